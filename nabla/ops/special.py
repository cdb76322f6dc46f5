"""Special functions (SciPy's and JAX's ``scipy.special``), composed of the families' ops, so
each differentiates (to any order), batches under ``vmap``, shards and compiles as the ops
it is made of, on every backend. The exceptions are the regularized incomplete gamma and
beta functions (``gammainc``, ``gammaincc``, ``betainc``): ops of their own that run on the
host in float64 (series and continued fractions, each element iterated until it has
converged: about 1e-13 relative, 1e-12 for shapes in the thousands, where the prefactor
``x^a e^-x / Γ(a)`` cancels large logarithms), differentiable once in every argument (in
``x`` by the density, in the shape parameters by central differences of the float64
functions, ~1e-9 relative); a second derivative through a shape parameter raises.

Accuracy, float64: ``gammaln`` (Lanczos, g = 7) and ``digamma`` (shifted by ten, then its
asymptotic series) to about 1e-13 relative; ``erfc`` is ``1 - erf`` below 2 and a Chebyshev
fit (fractional error below 1.2e-7) above, so it and what is built on it (``ndtr`` and
``log_ndtr`` far in the lower tail, ``erfcx``) carry about 1e-7 there; ``ndtri`` is
Acklam's approximation (1.2e-9) refined by a Newton step on ``ndtr``: exact to rounding
where ``|x| < 2.8``, about ``1e-7 / x^2`` relative beyond; ``erfinv`` is Giles' polynomial
refined by Newton steps on ``erf`` for ``|y| < 0.9`` and ``ndtri`` beyond. Float32 results
agree with SciPy's to about 1e-6 relative (absolute near the zeros of ``gammaln`` and
``digamma``).

The branches of ``where`` are both computed: each branch's input is replaced where the
branch is not taken, so that neither a value nor a gradient becomes NaN from the side not
taken.
"""

from __future__ import annotations

import fractions
import math

import numpy as np

from ..core.dtypes import DType, get_default_dtype, promote_types
from ..runtime.tensor import Tensor
from . import spmd
from ._util import as_tensor, is_scalar
from .base import Operation, OpError
from .functions import fn, provide

__all__ = [
    "erfc",
    "erfcx",
    "erfinv",
    "ndtr",
    "ndtri",
    "log_ndtr",
    "gammaln",
    "loggamma",
    "gammainc",
    "gammaincc",
    "betainc",
    "gammasgn",
    "gamma",
    "digamma",
    "betaln",
    "beta",
    "multigammaln",
    "factorial",
    "comb",
    "poch",
    "xlogy",
    "boxcox",
    "boxcox1p",
    "bernoulli",
    "exp1",
    "expi",
    "expn",
    "xlog1py",
    "entr",
    "rel_entr",
    "kl_div",
    "logit",
    "expit",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "zeta",
    "polygamma",
]


def _float(x, op: str) -> Tensor:
    x = as_tensor(x, op=op)
    return x if x.dtype.is_float else fn.cast(x, get_default_dtype())


def floats(op: str, *xs) -> list:
    """``xs`` as tensors of one float dtype: the promotion of the tensors' and arrays'
    dtypes (the default float dtype for integers); Python numbers take it as they are (weak,
    as JAX's: ``0.2`` beside a float64 array is float64's 0.2, not float32's)."""
    strong = [as_tensor(x, op=op) for x in xs if not is_scalar(x)]
    dtype = strong[0].dtype if strong else get_default_dtype()
    for t in strong[1:]:
        dtype = promote_types(dtype, t.dtype)
    if not dtype.is_float:
        dtype = get_default_dtype()
    return [as_tensor(x, dtype, op) for x in xs]


# ----------------------------------------------------------------------------- error function
def _erfc_log_fit(z):
    """``log(erfc(z))`` for ``z >= 0`` from the fit: ``log t - z^2 + poly(t)``; in log
    space it stays finite where ``erfc`` underflows."""
    t, poly = fn.erfc_fit(z)  # (unary's fit, which its gelu uses too)
    return fn.log(t) - z * z + poly


def erfc(x) -> Tensor:
    """``1 - erf(x)``, accurate where it is small (large ``x``).

    Args:
        x: a tensor or array (integers in the default float dtype).

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "erfc")
    z = fn.abs(x)
    far = z >= 2.0
    # erfc(|x|) past 2; past 40 it is 0 even in float64, and capping there keeps the
    # gradient at inf 0 (the fit's own would be 0 * inf)
    tail = fn.exp(_erfc_log_fit(fn.where(far, fn.minimum(z, 40.0), 2.0)))
    upper = fn.where(far, tail, 1.0 - fn.erf(fn.where(far, 0.0, z)))
    return fn.where(x < 0, 2.0 - upper, upper)


def erfcx(x) -> Tensor:
    """The scaled complementary error function ``exp(x^2) erfc(x)``, finite where
    ``erfc`` underflows (from 10 on its asymptotic series).

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "erfcx")
    z = fn.abs(x)
    far, huge = z >= 2.0, z >= 10.0
    t, poly = fn.erfc_fit(fn.where(far, z, 2.0))
    tail = t * fn.exp(poly)
    zh = fn.where(huge, z, 10.0)  # 1/(z sqrt(pi)) (1 - 1/(2z^2) + 3/(2z^2)^2 - ...)
    u = 1.0 / (2.0 * zh * zh)
    series = 1.0
    for k in range(7, 0, -1):
        series = 1.0 - (2 * k - 1) * u * series
    tail = fn.where(huge, series / (zh * math.sqrt(math.pi)), tail)
    zn = fn.where(far, 0.0, z)
    upper = fn.where(far, tail, fn.exp(zn * zn) * (1.0 - fn.erf(zn)))
    # erfcx(-z) = 2 exp(z^2) - erfcx(z)
    zs = fn.where(x < 0, z, 0.0)
    return fn.where(x < 0, 2.0 * fn.exp(zs * zs) - upper, upper)


def _giles(w, y):
    """Giles' single-precision ``erfinv`` ("Approximating the erfinv function", GPU
    Computing Gems, 2011) in ``w = -log((1 - y)(1 + y))``: relative error about 4e-7."""
    central, tail = w - 2.5, fn.sqrt(fn.where(w < 5.0, 5.0, w)) - 3.0
    p_c = 2.81022636e-08
    for c in (
        3.43273939e-07,
        -3.5233877e-06,
        -4.39150654e-06,
        0.00021858087,
        -0.00125372503,
        -0.00417768164,
        0.246640727,
        1.50140941,
    ):
        p_c = c + p_c * central
    p_t = -0.000200214257
    for c in (
        0.000100950558,
        0.00134934322,
        -0.00367342844,
        0.00573950773,
        -0.0076224613,
        0.00943887047,
        1.00167406,
        2.83297682,
    ):
        p_t = c + p_t * tail
    return fn.where(w < 5.0, p_c, p_t) * y


def _newton_erf(x, y, steps: int):
    """``x`` refined toward ``erf(x) = y`` (float64: each step squares the error)."""
    for _ in range(steps):
        x = x - (fn.erf(x) - y) * (math.sqrt(math.pi) / 2.0) * fn.exp(x * x)
    return x


def erfinv(y) -> Tensor:
    """The inverse of ``erf`` on ``[-1, 1]`` (``+-inf`` at ``+-1``, NaN outside); near
    ``+-1`` through :func:`ndtri` of ``(1 - |y|) / 2``, which keeps the tail's digits.

    Args:
        y: a tensor or array.

    Returns:
        A float tensor like ``y``.
    """
    y = _float(y, "erfinv")
    a = fn.abs(y)
    central = a < 0.9
    ys = fn.where(central, y, 0.0)
    x = _giles(-fn.log((1.0 - ys) * (1.0 + ys)), ys)
    if y.dtype.itemsize >= 8:
        x = _newton_erf(x, ys, 2)
    # erf(x) = 1 - 2 ndtr(-x sqrt 2): x = -ndtri((1 - |y|) / 2) / sqrt(2)
    q = fn.where(central, 0.25, 0.5 * (1.0 - a))
    q = fn.where(a >= 1.0, 0.25, q)  # (a NaN y keeps its NaN q)
    tail = fn.where(y < 0, 1.0, -1.0) * _ndtri_refined(q) * (1.0 / math.sqrt(2.0))
    edge = fn.where(a == 1.0, fn.where(y < 0, -math.inf, math.inf), math.nan)
    return fn.where(a >= 1.0, edge, fn.where(central, x, tail))


def ndtr(x) -> Tensor:
    """The standard normal CDF, ``erfc(-x / sqrt(2)) / 2``.

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "ndtr")
    return 0.5 * erfc(x * (-1.0 / math.sqrt(2.0)))


# Acklam's rational approximations of the normal quantile (relative error below 1.2e-9):
# the central region's in q = p - 1/2, the tails' in sqrt(-2 log p)
_ACKLAM_A = (-39.69683028665376, 220.9460984245205, -275.9285104469687, 138.3577518672690,
             -30.66479806614716, 2.506628277459239)  # fmt: skip
_ACKLAM_B = (-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972,
             -13.28068155288572)  # fmt: skip
_ACKLAM_C = (-0.007784894002430293, -0.3223964580411365, -2.400758277161838,
             -2.549732539343734, 4.374664141464968, 2.938163982698783)  # fmt: skip
_ACKLAM_D = (0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416)


def _horner(coeffs, v, last: float = 0.0):
    out = coeffs[0]
    for c in coeffs[1:]:
        out = out * v + c
    return out if not last else out * v + last


def _ndtri(p):
    """The normal quantile on ``(0, 1)`` (Acklam's approximations)."""
    low = fn.minimum(p, 1.0 - p)  # the nearer tail
    tails = low < 0.02425
    qt = fn.sqrt(-2.0 * fn.log(fn.where(tails, low, 0.02425)))
    tail = _horner(_ACKLAM_C, qt) / _horner(_ACKLAM_D, qt, 1.0)  # (the lower tail's)
    tail = fn.where(p < 0.5, tail, fn.neg(tail))
    q = fn.where(tails, 0.0, p - 0.5)
    r = q * q
    central = _horner(_ACKLAM_A, r) * q / _horner(_ACKLAM_B, r, 1.0)
    return fn.where(tails, tail, central)


def _ndtri_refined(p):
    """The normal quantile on ``(0, 1)``: Acklam's, then one Newton step on :func:`ndtr`
    in the lower half (where ``ndtr`` keeps its digits), which also makes the derivative
    ``1 / pdf`` rather than the approximation's own."""
    low = fn.where(p < 0.5, p, 1.0 - p)  # (minimum's gradient would split at 1/2)
    x = _ndtri(low)
    pdf = fn.exp(-0.5 * x * x) * (1.0 / math.sqrt(2.0 * math.pi))
    usable = pdf > 0  # (past float64's 1e-308, the step's division would be by 0)
    step = (ndtr(x) - low) / fn.where(usable, pdf, 1.0)
    x = x - fn.where(usable, step, 0.0)
    return fn.where(p < 0.5, x, fn.neg(x))


def ndtri(p) -> Tensor:
    """The inverse of :func:`ndtr` (the standard normal quantile), ``-inf``/``inf`` at
    0/1 and NaN outside; accurate in the far tails (``ndtri(1e-30)`` is -11.46).

    Args:
        p: a tensor or array of probabilities.

    Returns:
        A float tensor like ``p``.
    """
    p = _float(p, "ndtri")
    inside = fn.logical_and(p > 0.0, p < 1.0)
    x = _ndtri_refined(fn.where(inside, p, 0.5))
    edge = fn.where(p == 0.0, -math.inf, fn.where(p == 1.0, math.inf, math.nan))
    return fn.where(inside, x, edge)


def log_ndtr(x, series_order: int = 3) -> Tensor:
    """``log(ndtr(x))``, finite far in the lower tail (``x = -100``: -5005.5).

    Args:
        x: a tensor or array.
        series_order: accepted (JAX's asymptotic series' length); the tail here is the
            ``erfc`` fit's, in log space.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "log_ndtr")
    z = x * (-1.0 / math.sqrt(2.0))
    far = z >= 2.0  # (x <= -2.83: ndtr below 2.4e-3)
    tail = math.log(0.5) + _erfc_log_fit(fn.where(far, z, 2.0))
    near = fn.log(ndtr(fn.where(far, 0.0, x)))
    # above 0: log(1 - ndtr(-x)), whose log1p keeps the tiny difference from 0
    up = x > 0
    upper = fn.log1p(fn.neg(ndtr(fn.neg(fn.where(up, x, 0.0)))))
    return fn.where(far, tail, fn.where(up, upper, near))


# ----------------------------------------------------------------------------- gamma function
_LANCZOS_G = 7.0
_LANCZOS = (
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
)


def _lgamma_right(x):
    """``log(gamma(x))`` for ``x >= 1/2``: the Lanczos approximation, its
    ``(z + 1/2) log t - t`` written as ``(z + 1/2 - t / log t) log t`` with ``log t`` from
    ``log1p`` (what cancels near the zeros at 1 and 2 then cancels in fewer digits)."""
    z = x - 1.0
    total = _LANCZOS[0]
    for i, c in enumerate(_LANCZOS[1:], 1):
        total = total + c / (z + float(i))
    base = _LANCZOS_G + 0.5
    t = z + base
    log_t = math.log(base) + fn.log1p(z * (1.0 / base))
    return 0.5 * math.log(2.0 * math.pi) + (z + 0.5 - t / log_t) * log_t + fn.log(total)


def _reflected(x):
    """``(left, xr)``: where ``x < 1/2`` (reflected to ``1 - x``), and ``x`` or ``1 - x``."""
    left = x < 0.5
    return left, fn.where(left, 1.0 - x, x)


def _pole(x):
    """Where ``x`` is 0 or a negative integer."""
    return fn.logical_and(x <= 0, fn.floor(x) == x)


def _frac(x):
    """``x - round(x)`` (exact, in ``[-1/2, 1/2]``): ``sin``/``tan`` of ``pi`` times it
    have ``pi x``'s values up to sign, without the rounding of a large ``pi x``."""
    return x - fn.round(x)


def gammaln(x) -> Tensor:
    """``log|gamma(x)|`` (``inf`` at the poles, 0 and the negative integers).

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "gammaln")
    left, xr = _reflected(x)
    right = _lgamma_right(xr)
    pole = _pole(x)
    # gamma(x) gamma(1 - x) = pi / sin(pi x)
    sin = fn.abs(fn.sin(math.pi * _frac(fn.where(fn.logical_and(left, ~pole), x, 0.5))))
    out = fn.where(left, math.log(math.pi) - fn.log(sin) - right, right)
    # its zeros at 1 and 2, exactly; out minus its own constant value keeps the slope
    # there (digamma(1) and digamma(2)), where a constant 0 would give the gradient 0
    zero = fn.logical_or(x == 1.0, x == 2.0)
    out = fn.where(zero, out - fn.stop_gradient(out), out)
    # +inf as well as the poles is inf (Lanczos' form reads inf - inf there)
    return fn.where(fn.logical_or(pole, x == math.inf), math.inf, out)


def loggamma(x) -> Tensor:
    """``log(gamma(x))`` for real ``x`` (JAX's ``scipy.special.loggamma``): ``gammaln(x)``
    for ``x > 0``, NaN elsewhere, where the principal branch of the complex log leaves the
    reals (JAX gives NaN at 0 too; SciPy gives ``inf`` at +-0).

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "loggamma")
    return fn.where(x > 0, gammaln(x), math.nan)


def gammasgn(x) -> Tensor:
    """The sign of ``gamma(x)``: 1 for ``x >= 0``, alternating between the poles below
    (NaN at the negative integers).

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "gammasgn")
    pole = fn.logical_and(x < 0, fn.floor(x) == x)  # (0 itself: +inf, sign 1, as JAX's)
    odd = fn.fmod(fn.floor(x), 2.0) != 0  # gamma < 0 on (-1, 0), (-3, -2), ...
    sign = fn.where(fn.logical_and(x < 0, odd), -1.0, 1.0)
    return fn.where(fn.logical_or(pole, fn.is_nan(x)), math.nan, sign)


def gamma(x) -> Tensor:
    """The gamma function, ``gammasgn(x) * exp(gammaln(x))`` (``inf`` at 0, NaN at the
    negative integers).

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "gamma")
    return gammasgn(x) * fn.exp(gammaln(x))


def digamma(x) -> Tensor:
    """The logarithmic derivative of the gamma function, ``psi(x)`` (NaN at the poles).

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "digamma")
    left, xr = _reflected(x)
    y = xr + 10.0  # psi(x) = psi(x + 10) - sum 1/(x + k), then the asymptotic series
    inv = 1.0 / y
    inv2 = inv * inv
    series = inv2 * (
        1.0 / 12 - inv2 * (1.0 / 120 - inv2 * (1.0 / 252 - inv2 * (1.0 / 240 - inv2 / 132)))
    )
    right = fn.log(y) - 0.5 * inv - series
    for k in range(10):
        right = right - 1.0 / (xr + float(k))
    # psi(1 - x) - psi(x) = pi / tan(pi x) = pi cos / sin
    pole = _pole(x)
    r = math.pi * _frac(fn.where(fn.logical_and(left, ~pole), x, 0.25))
    out = fn.where(left, right - math.pi * fn.cos(r) / fn.sin(r), right)
    return fn.where(pole, math.nan, out)


def _stirling_correction(x):
    """``gammaln(x) - ((x - 1/2) log x - x + log(2 pi) / 2)`` for ``x >= 8``."""
    inv = 1.0 / x
    inv2 = inv * inv
    return inv * (1.0 / 12 - inv2 * (1.0 / 360 - inv2 * (1.0 / 1260 - inv2 / 1680)))


def betaln(a, b) -> Tensor:
    """``log|B(a, b)|``: ``gammaln(a) + gammaln(b) - gammaln(a + b)``, and where the larger
    argument is 8 or more a form whose large terms cancel analytically (the plain sum
    loses them in float32: ``betaln(1.1, 1e5)``).

    Args:
        a: a tensor or array.
        b: likewise, broadcasting with ``a``.

    Returns:
        A float tensor of the broadcast shape.
    """
    a, b = floats("betaln", a, b)
    small, big = fn.minimum(a, b), fn.maximum(a, b)
    plain = gammaln(a) + gammaln(b) - gammaln(a + b)
    large = big >= 8.0
    bb = fn.where(large, big, 8.0)
    ss = fn.where(large, small, 1.0)
    # gammaln(b) - gammaln(a + b) = -(b - 1/2) log1p(a / b) - a log(a + b) + a
    #                               + corr(b) - corr(a + b)
    tail = gammaln(ss) - (bb - 0.5) * fn.log1p(ss / bb) - ss * fn.log(ss + bb) + ss
    tail = tail + _stirling_correction(bb) - _stirling_correction(ss + bb)
    return fn.where(large, tail, plain)


def beta(a, b) -> Tensor:
    """The beta function ``B(a, b) = gamma(a) gamma(b) / gamma(a + b)``.

    Args:
        a: a tensor or array.
        b: likewise, broadcasting with ``a``.

    Returns:
        A float tensor of the broadcast shape.
    """
    a, b = floats("beta", a, b)
    sign = gammasgn(a) * gammasgn(b) * gammasgn(a + b)
    return sign * fn.exp(betaln(a, b))


def multigammaln(a, d: int) -> Tensor:
    """The log of the multivariate gamma function of dimension ``d``.

    Args:
        a: a tensor or array, each element above ``(d - 1) / 2``.
        d: the dimension, a positive Python int.

    Returns:
        A float tensor like ``a``.

    Raises:
        ValueError: for a ``d`` that is not a positive int.
    """
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"multigammaln: d must be a positive int, got {d!r}")
    a = _float(a, "multigammaln")
    out = d * (d - 1) / 4.0 * math.log(math.pi)
    for j in range(d):
        out = out + gammaln(a - j / 2.0)
    return out


def factorial(n, exact: bool = False) -> Tensor:
    """``gamma(n + 1)``, 0 for negative ``n`` (SciPy's and JAX's ``factorial``).

    Args:
        n: a tensor or array.
        exact: must be False (JAX's; an exact integer result is not computed).

    Returns:
        A float tensor like ``n``.

    Raises:
        NotImplementedError: for ``exact=True``.
    """
    if exact:
        raise NotImplementedError("factorial: exact=True is not supported (as in JAX)")
    n = _float(n, "factorial")
    return fn.where(n < 0, 0.0, fn.exp(gammaln(fn.where(n < 0, 0.0, n) + 1.0)))


def comb(N, k, *, exact: bool = False, repetition: bool = False) -> Tensor:  # noqa: N803
    """The number of combinations of ``N`` things taken ``k`` at a time (SciPy's and
    JAX's ``comb``), from ``gammaln``; 0 where ``k > N`` or either is negative.

    Args:
        N: a tensor or array.
        k: likewise.
        exact: must be False.
        repetition: count combinations with repetition (``comb(N + k - 1, k)``).

    Returns:
        A float tensor of the broadcast shape.

    Raises:
        NotImplementedError: for ``exact=True``.
    """
    if exact:
        raise NotImplementedError("comb: exact=True is not supported (as in JAX)")
    n, k = floats("comb", N, k)
    if repetition:
        n = n + k - 1.0
    bad = fn.logical_or(fn.logical_or(k > n, n < 0), k < 0)
    ns, ks = fn.where(bad, 1.0, n), fn.where(bad, 0.0, k)
    value = fn.exp(gammaln(ns + 1.0) - gammaln(ks + 1.0) - gammaln(ns - ks + 1.0))
    return fn.where(bad, 0.0, value)


def poch(z, m) -> Tensor:
    """The rising factorial ``gamma(z + m) / gamma(z)``.

    Args:
        z: a tensor or array.
        m: likewise.

    Returns:
        A float tensor of the broadcast shape.
    """
    z, m = floats("poch", z, m)
    sign = gammasgn(z + m) * gammasgn(z)
    return sign * fn.exp(gammaln(z + m) - gammaln(z))


# ----------------------------------------------------------------------------- entropies, logit
def xlogy(x, y) -> Tensor:
    """``x * log(y)``, 0 where ``x`` is 0 (also for ``y <= 0``).

    Args:
        x: a tensor or array.
        y: likewise, broadcasting with ``x``.

    Returns:
        A float tensor of the broadcast shape.
    """
    x, y = floats("xlogy", x, y)
    # x = 0: y kept where log(y) is finite, so the derivative in x is log(y) (JAX's); at
    # y <= 0 both derivatives are 0 there (JAX's is -inf in x at y = 0)
    masked = fn.logical_and(x == 0, y <= 0)
    return x * fn.log(fn.where(masked, 1.0, y))


def _boxcox(logs, lmbda) -> Tensor:
    """``(exp(lmbda * logs) - 1) / lmbda``, ``logs`` where ``lmbda`` is 0 (the limit). Near
    ``lmbda * logs = 0`` it is ``logs (1 + z/2 + z^2/6 + z^3/24)`` (``z = lmbda * logs``),
    so the derivative in ``lmbda`` at 0 is the limit's, ``logs^2 / 2``."""
    z = lmbda * logs
    small = fn.abs(z) < 1e-4  # (the series' relative error, z^4/120, is below 1e-18)
    series = logs * (1.0 + z * (0.5 + z * (1.0 / 6.0 + z / 24.0)))
    zero = lmbda == 0
    general = fn.expm1(z) / fn.where(fn.logical_or(small, zero), 1.0, lmbda)
    return fn.where(small, series, fn.where(zero, logs, general))


def boxcox(x, lmbda) -> Tensor:
    """The Box-Cox transform ``(x ** lmbda - 1) / lmbda``, ``log(x)`` at ``lmbda = 0``
    (SciPy's and JAX's ``special.boxcox``; NaN for ``x < 0``).

    Args:
        x: a tensor or array.
        lmbda: the power, broadcasting with ``x``.

    Returns:
        A float tensor of the broadcast shape.
    """
    x, lmbda = floats("boxcox", x, lmbda)
    return _boxcox(fn.log(x), lmbda)


def boxcox1p(x, lmbda) -> Tensor:
    """:func:`boxcox` of ``1 + x``, accurate for small ``x`` (SciPy's and JAX's
    ``special.boxcox1p``).

    Args:
        x: a tensor or array.
        lmbda: the power, broadcasting with ``x``.

    Returns:
        A float tensor of the broadcast shape.
    """
    x, lmbda = floats("boxcox1p", x, lmbda)
    return _boxcox(fn.log1p(x), lmbda)


def bernoulli(n: int) -> Tensor:
    """The Bernoulli numbers ``B_0 .. B_n`` (SciPy's and JAX's ``special.bernoulli``, with
    ``B_1 = -1/2``), computed exactly as fractions, then rounded to the default float dtype.

    Args:
        n: the last index, a non-negative int.

    Returns:
        A 1-D tensor of ``n + 1`` numbers.

    Raises:
        ValueError: for ``n`` that is not a non-negative int.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"bernoulli: n must be a non-negative int, got {n!r}")
    # B_m = -1/(m+1) sum_{k<m} C(m+1, k) B_k, from sum_{k<=m} C(m+1, k) B_k = 0
    numbers = []
    for m in range(int(n) + 1):
        total = sum((math.comb(m + 1, k) * b for k, b in enumerate(numbers)), fractions.Fraction(0))
        numbers.append(fractions.Fraction(1) if m == 0 else -total / (m + 1))
    return as_tensor(np.array([float(b) for b in numbers]).astype(get_default_dtype().numpy))


_EULER_GAMMA = 0.5772156649015329


def _power_series(x, terms: int):
    """``sum_{k=1}^{terms} x^k / (k k!)``, the series both exponential integrals share:
    ``E1(x) = -gamma - log x - S(-x)`` and ``Ei(x) = gamma + log x + S(x)``."""
    term, total = fn.ones_like(x), fn.zeros_like(x)
    for k in range(1, terms + 1):
        term = term * (x / k)
        total = total + term / k
    return total


def _series_range(x) -> float:
    """Where the exponential integrals' power series hands over to their continued
    fraction: 1.5 in float64, 1 in lower precisions (the series' cancellation near 1.5
    cost 2.7e-6 in float32)."""
    return 1.5 if x.dtype == DType.float64 else 1.0


def _e1_positive(x):
    """``E1(x)`` for ``x > 0``: the power series up to 1.5 (30 terms; up to 1 in lower
    precisions, where its cancellation near 1.5 cost 2.7e-6 in float32), Laguerre's
    continued fraction beyond (60 levels, evaluated from the bottom); both within a few
    ulps of float64 there. Each branch reads a safe stand-in where it is not taken, so the
    other's derivative stays finite."""
    near = x <= _series_range(x)
    xs = fn.where(near, x, 1.0)
    series = -_EULER_GAMMA - fn.log(xs) - _power_series(-xs, 30)
    xc = fn.where(near, 2.0, x)
    tail = fn.zeros_like(xc)
    for k in range(60, 0, -1):
        tail = float(k * k) / (xc + float(2 * k + 1) - tail)
    fraction = fn.exp(-xc) / (xc + 1.0 - tail)
    return fn.where(near, series, fraction)


def exp1(x) -> Tensor:
    """The exponential integral ``E1(x) = int_x^inf exp(-t) / t dt`` (SciPy's and JAX's
    ``special.exp1`` for real ``x``): ``inf`` at 0 and NaN for ``x < 0``, where it is not
    real. Differentiable (``-exp(-x) / x``).

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "exp1")
    out = _e1_positive(fn.where(x > 0, x, 1.0))
    return fn.where(x > 0, out, fn.where(x == 0, math.inf, math.nan))


def expn(n, x) -> Tensor:
    """The generalized exponential integral ``E_n(x) = int_1^inf exp(-x t) / t^n dt``
    (SciPy's and JAX's ``special.expn``) for integers ``n >= 0`` and ``x >= 0``:
    ``exp(-x) / x`` for ``n = 0``; below 1.5 (1 in lower precisions) the series
    ``(-x)^(n-1) / (n-1)! (psi(n) - log x) - sum_(k != n-1) (-x)^k / ((k - n + 1) k!)``
    (40 terms), beyond it the continued fraction ``exp(-x) / (x + n - 1 n / (x + n + 2 -
    2 (n + 1) / (x + n + 4 - ...)))`` (60 levels, from the bottom). ``E_n(0) = 1 / (n -
    1)`` for ``n > 1`` and ``inf`` for ``n <= 1``; NaN for a negative or non-integer ``n``
    or a negative ``x``. Differentiable in ``x`` (``-E_(n-1)(x)``).

    Args:
        n: the order, an integer (a tensor of them too), broadcast with ``x``.
        x: a tensor or array.

    Returns:
        A float tensor of the broadcast shape.
    """
    x = _float(x, "expn")
    nt = fn.cast(as_tensor(n, op="expn"), x.dtype)
    shape = fn.broadcast_shapes("expn", tuple(nt.shape), tuple(x.shape))
    nt, x = fn.broadcast_to(nt, shape), fn.broadcast_to(x, shape)
    valid = fn.logical_and(fn.logical_and(nt >= 0, fn.floor(nt) == nt), x >= 0)
    positive = fn.logical_and(valid, x > 0)
    ns = fn.where(valid, nt, 1.0)
    xp = fn.where(positive, x, 1.0)
    near = xp <= _series_range(x)
    # the series (n >= 1): the k = n - 1 term is the one with psi(n) - log x
    xs, nn = fn.where(near, xp, 1.0), fn.maximum(ns, 1.0)
    lead = fn.exp((nn - 1.0) * fn.log(xs) - gammaln(nn)) * (digamma(nn) - fn.log(xs))
    lead = fn.where(fn.fmod(nn - 1.0, 2.0) == 0, lead, fn.neg(lead))  # (-1)^(n-1)
    power, total = fn.ones_like(xs), fn.zeros_like(xs)
    for k in range(40):
        if k:
            power = power * (fn.neg(xs) / float(k))  # (-x)^k / k!
        gap = float(k) - nn + 1.0
        total = total + fn.where(gap == 0, 0.0, power / fn.where(gap == 0, 1.0, gap))
    series = lead - total
    # the continued fraction
    xc = fn.where(near, 2.0, xp)
    tail = fn.zeros_like(xc)
    for i in range(60, 0, -1):
        tail = float(i) * (ns + float(i) - 1.0) / (xc + ns + float(2 * i) - tail)
    fraction = fn.exp(fn.neg(xc)) / (xc + ns - tail)
    out = fn.where(near, series, fraction)
    out = fn.where(ns == 0, fn.exp(fn.neg(xp)) / xp, out)
    at_zero = fn.where(ns > 1, 1.0 / fn.maximum(ns - 1.0, 1.0), math.inf)
    out = fn.where(positive, out, at_zero)
    return fn.where(valid, out, math.nan)


def expi(x) -> Tensor:
    """The exponential integral ``Ei(x)``, the principal value of ``int_-inf^x exp(t) / t
    dt`` (SciPy's and JAX's ``special.expi``): ``-E1(-x)`` for ``x < 0``, its power series
    up to 40 (100 terms) and the asymptotic series beyond (30 terms); ``-inf`` at 0.
    Differentiable (``exp(x) / x``).

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "expi")
    negative = x < 0
    left = -_e1_positive(fn.where(negative, -x, 1.0))
    small = fn.logical_and(x > 0, x <= 40.0)
    xs = fn.where(small, x, 1.0)
    series = _EULER_GAMMA + fn.log(xs) + _power_series(xs, 100)
    xa = fn.where(x > 40.0, x, 50.0)
    term, total = fn.ones_like(xa), fn.ones_like(xa)
    for k in range(1, 31):
        term = term * (k / xa)
        total = total + term
    asymptotic = fn.exp(xa) / xa * total
    out = fn.where(negative, left, fn.where(small, series, asymptotic))
    return fn.where(x == 0, -math.inf, out)


def xlog1py(x, y) -> Tensor:
    """``x * log1p(y)``, 0 where ``x`` is 0.

    Args:
        x: a tensor or array.
        y: likewise, broadcasting with ``x``.

    Returns:
        A float tensor of the broadcast shape.
    """
    x, y = floats("xlog1py", x, y)
    masked = fn.logical_and(x == 0, y <= -1)
    return x * fn.log1p(fn.where(masked, 0.0, y))


def entr(x) -> Tensor:
    """``-x log(x)`` for ``x > 0``, 0 at 0, ``-inf`` below.

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "entr")
    pos = x > 0
    value = fn.neg(x) * fn.log(fn.where(pos, x, 1.0))
    # NaN stays NaN (it is neither positive, zero nor negative)
    return fn.where(pos, value, fn.where(x < 0, -math.inf, fn.where(x == 0, 0.0, x)))


def rel_entr(p, q) -> Tensor:
    """``p log(p / q)`` elementwise: 0 where ``p = 0 <= q``, ``inf`` elsewhere outside
    ``p, q > 0``.

    Args:
        p: a tensor or array.
        q: likewise, broadcasting with ``p``.

    Returns:
        A float tensor of the broadcast shape.
    """
    p, q = floats("rel_entr", p, q)
    both = fn.logical_and(p > 0, q > 0)
    value = xlogy(p, fn.where(both, p, 1.0)) - xlogy(p, fn.where(both, q, 1.0))
    return fn.where(both, value, fn.where(fn.logical_and(p == 0, q >= 0), 0.0, math.inf))


def kl_div(p, q) -> Tensor:
    """``p log(p / q) - p + q`` elementwise (SciPy's ``kl_div``): ``q`` where ``p = 0 <=
    q``, ``inf`` elsewhere outside ``p, q > 0``.

    Args:
        p: a tensor or array.
        q: likewise, broadcasting with ``p``.

    Returns:
        A float tensor of the broadcast shape.
    """
    p, q = floats("kl_div", p, q)
    both = fn.logical_and(p > 0, q > 0)
    value = rel_entr(p, q) - p + q
    edge = fn.where(fn.logical_and(p == 0, q >= 0), q, math.inf)
    return fn.where(both, value, edge)


def logit(x) -> Tensor:
    """``log(x / (1 - x))``, the inverse of :func:`expit`.

    Args:
        x: a tensor or array of probabilities.

    Returns:
        A float tensor like ``x``.
    """
    x = _float(x, "logit")
    return fn.log(x) - fn.log1p(fn.neg(x))


def expit(x) -> Tensor:
    """The logistic sigmoid ``1 / (1 + exp(-x))``.

    Args:
        x: a tensor or array.

    Returns:
        A float tensor like ``x``.
    """
    return fn.sigmoid(_float(x, "expit"))


# ----------------------------------------------------------------------------- incomplete
def _same_shape(shapes, op: str) -> tuple:
    return tuple(fn.broadcast_shapes(op, *(tuple(s) for s in shapes)))


class _Elementwise(Operation):
    """An elementwise host op of equal-shaped operands: shards as its operands do."""

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.elementwise_rule(in_shapes, out_shapes)


class _ShapeSlopeOp(_Elementwise):
    """The derivatives of an incomplete function in its shape parameters (central
    differences on the host, float64). Differentiating them again is refused."""

    host_only = True
    multiple_results = True

    def infer(self, shapes, dtypes, kwargs):
        shape = _same_shape(shapes, self.name)
        return [shape] * self.results, [dtypes[-1]] * self.results

    def _refuse(self):
        raise OpError(
            f"{self.name}: a second derivative through the shape parameters of an incomplete "
            "gamma or beta function is not available (the first is a central difference)"
        )

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        self._refuse()

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        self._refuse()


class IncompleteGammaSlopeOp(_ShapeSlopeOp):
    """``dP(a, x)/da`` (``Q``'s is its negative)."""

    name = "igamma_grad_a"
    arity = 2
    results = 1


class IncompleteBetaSlopeOp(_ShapeSlopeOp):
    """``dI_x(a, b)/da`` and ``dI_x(a, b)/db``."""

    name = "betainc_grad_ab"
    arity = 3
    results = 2


_IGAMMA_GRAD_A = IncompleteGammaSlopeOp()
_BETAINC_GRAD_AB = IncompleteBetaSlopeOp()


def _density_terms(*pairs):
    """``sum(c * log(v))`` over ``(c, v)`` pairs, 0 where ``c`` is 0 (``0 log 0 = 0``)."""
    total = None
    for c, v in pairs:
        term = fn.where(c == 0.0, 0.0, c * fn.log(fn.where(c == 0.0, 1.0, v)))
        total = term if total is None else total + term
    return total


class IncompleteGammaOp(_Elementwise):
    """``(P(a, x), Q(a, x))``: the regularized lower and upper incomplete gamma functions
    of equal-shaped ``a`` and ``x``, each computed directly (``Q`` keeps its precision in
    the upper tail, where ``1 - P`` would round to 0)."""

    name = "igamma"
    arity = 2
    multiple_results = True
    host_only = True

    def infer(self, shapes, dtypes, kwargs):
        shape = _same_shape(shapes, self.name)
        return [shape, shape], [dtypes[1], dtypes[1]]

    def _slopes(self, a, x):
        inside = x > 0.0
        xs = fn.where(inside, x, 1.0)
        pdf = fn.exp(_density_terms((a - 1.0, xs)) - xs - gammaln(a))
        return _IGAMMA_GRAD_A.bind([a, x], {})[0], fn.where(inside, pdf, 0.0)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        ct_p, ct_q = cotangents
        ct = ct_p if ct_q is None else (-ct_q if ct_p is None else ct_p - ct_q)
        if ct is None:
            return [None, None]
        da, dx = self._slopes(*primals)
        return [ct * da, ct * dx]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        ta, tx = tangents
        if ta is None and tx is None:
            return [None, None]
        da, dx = self._slopes(*primals)
        t = (0.0 if ta is None else ta * da) + (0.0 if tx is None else tx * dx)
        return [t, -t]


class IncompleteBetaOp(_Elementwise):
    """``I_x(a, b)``, the regularized incomplete beta function, of equal-shaped ``a``,
    ``b`` and ``x``."""

    name = "betainc"
    arity = 3
    host_only = True

    def infer(self, shapes, dtypes, kwargs):
        return [_same_shape(shapes, self.name)], [dtypes[2]]

    def _slopes(self, a, b, x):
        inside = (x > 0.0) & (x < 1.0)
        xs = fn.where(inside, x, 0.5)
        log_pdf = _density_terms((a - 1.0, xs), (b - 1.0, 1.0 - xs)) - betaln(a, b)
        da, db = _BETAINC_GRAD_AB.bind([a, b, x], {})
        return da, db, fn.where(inside, fn.exp(log_pdf), 0.0)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        ct = cotangents[0]
        if ct is None:
            return [None, None, None]
        da, db, dx = self._slopes(*primals)
        return [ct * da, ct * db, ct * dx]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if all(t is None for t in tangents):
            return [None]
        slopes = self._slopes(*primals)
        t = 0.0
        for tan, slope in zip(tangents, slopes, strict=True):
            if tan is not None:
                t = t + tan * slope
        return [t]


_IGAMMA = IncompleteGammaOp()
_BETAINC = IncompleteBetaOp()


def _broadcast_floats(op: str, *xs) -> list:
    vals = floats(op, *xs)
    shape = _same_shape([v.shape for v in vals], op)
    return [fn.broadcast_to(v, shape) for v in vals]


def gammainc(a, x) -> Tensor:
    """The regularized lower incomplete gamma function ``P(a, x) = γ(a, x) / Γ(a)``
    (SciPy's ``gammainc``): ``a > 0``, ``x >= 0`` (NaN elsewhere, as SciPy's).

    Args:
        a: the shape.
        x: the upper limit of the integral.

    Returns:
        ``P(a, x)``, broadcast, in the arguments' float dtype.
    """
    return _IGAMMA.bind(_broadcast_floats("gammainc", a, x), {})[0]


def gammaincc(a, x) -> Tensor:
    """The regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)`` (SciPy's
    ``gammaincc``), computed directly (exact in the upper tail, where ``1 - P`` is 0).

    Args:
        a: the shape (``> 0``).
        x: the lower limit of the integral (``>= 0``).

    Returns:
        ``Q(a, x)``, broadcast, in the arguments' float dtype.
    """
    return _IGAMMA.bind(_broadcast_floats("gammaincc", a, x), {})[1]


def betainc(a, b, x) -> Tensor:
    """The regularized incomplete beta function ``I_x(a, b)`` (SciPy's ``betainc``):
    ``a, b > 0``, ``0 <= x <= 1`` (NaN elsewhere, as SciPy's).

    Args:
        a: the first shape.
        b: the second shape.
        x: the upper limit of the integral.

    Returns:
        ``I_x(a, b)``, broadcast, in the arguments' float dtype.
    """
    return _BETAINC.bind(_broadcast_floats("betainc", a, b, x), {})


# ----------------------------------------------------------------------------- Bessel I0, I1
# Below |x| = 20 the power series (45 terms reach float64's rounding there), above it the
# asymptotic series (20 terms: its smallest term, near k = 2|x|, is far below rounding).
_BESSEL_CUT = 20.0
_I0_SERIES = [1.0 / math.factorial(k) ** 2 for k in range(45)][::-1]
_I1_SERIES = [1.0 / (math.factorial(k) * math.factorial(k + 1)) for k in range(45)][::-1]


def _asymptotic(nu: int, n: int = 20) -> list:
    """The coefficients ``c_k`` of ``I_nu(x) ~ e^x / sqrt(2 pi x) * sum_k c_k / x^k``."""
    out, term = [1.0], 1.0
    for k in range(1, n):
        term *= -(4.0 * nu * nu - (2 * k - 1) ** 2) / (k * 8.0)
        out.append(term)
    return out[::-1]


_I0_ASYM, _I1_ASYM = _asymptotic(0), _asymptotic(1)


def _bessel_scaled(x, nu: int, op: str):
    """``(e^-|x| I_nu(|x|), |x|)``: the series below the cut, the asymptotic one above, each
    fed only the inputs it takes (so neither side's value nor gradient is NaN)."""
    ax = fn.abs(_float(x, op))
    small = ax < _BESSEL_CUT
    xs = fn.where(small, ax, 0.0)
    xl = fn.where(small, _BESSEL_CUT, ax)
    y = xs * xs / 4.0
    if nu == 0:
        series = _horner(_I0_SERIES, y)
    else:
        series = xs / 2.0 * _horner(_I1_SERIES, y)
    # sqrt(2 pi) apart from sqrt(x): 2 pi x itself overflows float32 from about 5e37
    asym = _horner(_I1_ASYM if nu else _I0_ASYM, 1.0 / xl) / (
        math.sqrt(2.0 * math.pi) * fn.sqrt(xl)
    )
    return fn.where(small, series * fn.exp(-xs), asym), ax


def i0e(x) -> Tensor:
    """The exponentially scaled modified Bessel function of order 0, ``exp(-|x|) I0(x)``
    (SciPy's and JAX's ``i0e``), to about 1e-15 relative in float64.

    Args:
        x: the input (integers become the default float).

    Returns:
        A float tensor like ``x``.
    """
    return _bessel_scaled(x, 0, "i0e")[0]


def i0(x) -> Tensor:
    """The modified Bessel function of the first kind of order 0 (SciPy's ``i0``, NumPy's
    and JAX's ``jnp.i0``); overflows where ``exp(|x|)`` does.

    Args:
        x: the input (integers become the default float).

    Returns:
        A float tensor like ``x``.
    """
    scaled, ax = _bessel_scaled(x, 0, "i0")
    return scaled * fn.exp(ax)


def i1e(x) -> Tensor:
    """The exponentially scaled modified Bessel function of order 1, ``exp(-|x|) I1(x)``
    (SciPy's and JAX's ``i1e``); odd in ``x``.

    Args:
        x: the input (integers become the default float).

    Returns:
        A float tensor like ``x``.
    """
    scaled, _ = _bessel_scaled(x, 1, "i1e")
    return fn.where(_float(x, "i1e") < 0, -scaled, scaled)


def i1(x) -> Tensor:
    """The modified Bessel function of the first kind of order 1 (SciPy's and JAX's
    ``i1``); odd in ``x``, overflows where ``exp(|x|)`` does.

    Args:
        x: the input (integers become the default float).

    Returns:
        A float tensor like ``x``.
    """
    scaled, ax = _bessel_scaled(x, 1, "i1")
    v = scaled * fn.exp(ax)
    return fn.where(_float(x, "i1") < 0, -v, v)


# ----------------------------------------------------------------------------- zeta
# The Hurwitz zeta function by Euler-Maclaurin summation: the first terms summed directly,
# the rest by the integral, the half-term and eight Bernoulli corrections at a = q + 12,
# where their error is far below float64's rounding for s > 1.
_ZETA_TERMS = 12
_BERNOULLI = [  # B_2, B_4, ..., B_16
    1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510,
]  # fmt: skip


def zeta(x, q=None) -> Tensor:
    """The Hurwitz zeta function ``sum_k (q + k)^-x`` (SciPy's and JAX's ``zeta``;
    Riemann's with ``q`` None), for ``x > 1``: NaN for ``x < 1``, inf at ``x = 1`` and at
    ``q`` a non-positive integer. Differentiable in both arguments; about 1e-15 relative
    in float64 for ``q > 0``.

    Args:
        x: the exponent (> 1).
        q: the shift (default 1).

    Returns:
        A float tensor of the broadcast shape.
    """
    s, a = floats("zeta", x, 1.0 if q is None else q)
    head = 0.0
    for k in range(_ZETA_TERMS):
        head = head + (a + float(k)) ** (-s)
    big = a + float(_ZETA_TERMS)
    ok = big > 0  # (the tail's expansion needs a positive point)
    b = fn.where(ok, big, 1.0)
    tail = b ** (1.0 - s) / (s - 1.0) + 0.5 * b ** (-s)
    rising = s  # s (s + 1) ... (s + 2j - 2)
    power = b ** (-(s + 1.0))
    for j, bern in enumerate(_BERNOULLI, start=1):
        tail = tail + bern / math.factorial(2 * j) * rising * power
        rising = rising * (s + 2 * j - 1) * (s + 2 * j)
        power = power / (b * b)
    value = fn.where(ok, head + tail, math.nan)
    value = fn.where(s == 1.0, math.inf, value)
    return fn.where(s < 1.0, math.nan, value)


def polygamma(n, x) -> Tensor:
    """The polygamma function, the ``n``-th derivative of :func:`digamma` (SciPy's and JAX's
    ``polygamma``): ``(-1)^(n+1) n! zeta(n + 1, x)`` for ``n >= 1``, ``digamma`` for
    ``n = 0``.

    Args:
        n: the order, a non-negative integer (an int, or an integer tensor broadcast with
            ``x`` whose values are read at the call).
        x: the input.

    Returns:
        A float tensor.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a negative or non-integer order.
    """
    orders = np.asarray(n.numpy() if isinstance(n, Tensor) else n)
    if orders.size and (np.any(orders < 0) or np.any(orders != np.floor(orders))):
        raise OpError(f"polygamma: n must be non-negative integers, got {orders!r}")
    if orders.ndim == 0:
        k = int(orders)
        if k == 0:
            return digamma(x)
        value = zeta(k + 1.0, x)
        return value * float((-1) ** (k + 1) * math.factorial(k))
    x_t = _float(x, "polygamma")
    out = None
    for k in np.unique(orders):  # (each order present, selected where it is)
        part = polygamma(int(k), x_t)
        hit = as_tensor(orders == k, op="polygamma")
        out = part if out is None else fn.where(hit, part, out)
    return out


provide(globals(), ["erfinv", "i0"])  # (random's truncated_normal inverts its CDF with erfinv;
# the kaiser window needs i0)
