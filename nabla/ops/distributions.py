"""JAX's ``jax.random`` distributions beyond the uniform and normal ones (``nb.random.gamma``,
``beta``, ``dirichlet``, ``poisson``, ...), written with the keyed uniform and normal draws
(``ops/random.py``): each is reproducible from its key, batches under ``vmap`` (one
independent draw per example) and compiles as those do.

The gamma family samples by Marsaglia and Tsang's method, each element taking the first
accepted of 8 proposals (a proposal is accepted with probability above 0.95, so all 8 fail
with probability below 1e-10, and then the mode is used); a shape below 1 is boosted,
``gamma(a) = gamma(a + 1) u^(1/a)``. The derivative in ``a`` is the implicit one of the
boosted draw, ``dg/da = -(dF/da) / f(g)`` with ``F`` the gamma CDF (as JAX's; an op of its
own, ``random_gamma_grad``, computes it on the host), and the boost's pathwise term: an
unbiased reparameterization gradient, finite where a tiny shape's draw underflows.
"""

from __future__ import annotations

import numpy as np

from ..core.dtypes import DType, get_default_dtype, to_dtype
from ..runtime.tensor import Tensor
from . import linalg
from . import random as _r
from ._util import as_tensor, norm_shape
from .array_functions import diagonal
from .base import Operation
from .functions import fn
from .special import gammaln

__all__ = [
    "gamma",
    "loggamma",
    "beta",
    "dirichlet",
    "chisquare",
    "t",
    "f",
    "poisson",
    "binomial",
    "multinomial",
    "geometric",
    "rayleigh",
    "pareto",
    "wald",
    "weibull_min",
    "triangular",
    "maxwell",
    "double_sided_maxwell",
    "generalized_normal",
    "ball",
    "multivariate_normal",
    "orthogonal",
    "bits",
    "key_data",
    "wrap_key_data",
    "clone",
]

_ROUNDS = 8  # proposals per element of a gamma draw


class GammaGradOp(Operation):
    """``dx/da`` of a gamma(``a``) draw ``x`` (elementwise): the implicit derivative
    ``-(dP(a, x)/da) / p(x; a)``, ``P`` the regularized lower incomplete gamma function and
    ``p`` the density. Host-only (no MAX kernel): computed in float64."""

    name = "random_gamma_grad"
    arity = 2
    differentiable = False
    host_only = True

    def infer(self, shapes, dtypes, kwargs):
        return [fn.broadcast_shapes(self.name, tuple(shapes[0]), tuple(shapes[1]))], [dtypes[1]]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [None, None]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [None]


_gamma_grad = GammaGradOp()


def _dtype(name: str, dtype) -> DType:
    dt = to_dtype(dtype, f"random.{name}") if dtype is not None else get_default_dtype()
    if not dt.is_float:
        raise ValueError(f"random.{name}: dtype must be a float dtype, got {dt.value}")
    return dt


def _param(name: str, v, dtype: DType) -> Tensor:
    return fn.cast(as_tensor(v, op=f"random.{name}"), dtype)


def _shape_of(name: str, shape, *params) -> tuple:
    """The draw's shape: ``shape``, or the parameters' broadcast shape when None; the
    parameters must broadcast to it."""
    shapes = [tuple(p.shape) for p in params]
    if shape is None:
        return fn.broadcast_shapes(f"random.{name}", *shapes) if shapes else ()
    shape = norm_shape(f"random.{name}", shape)
    _r._check_broadcast(f"random.{name}", shape, {f"arg{i}": p for i, p in enumerate(params)})
    return shape


def _standard_gamma(key, a: Tensor, shape: tuple, dtype: DType, log_space: bool = False):
    """Gamma(``a``, 1) draws of ``shape`` (or their logs, accurate for tiny ``a``), with the
    implicit derivative in ``a``."""
    work = DType.float32 if dtype.itemsize < 4 else dtype
    a = fn.broadcast_to(fn.cast(a, work), shape)
    keys = _r.split(key, 2 * _ROUNDS + 1)
    small = a < 1.0
    boosted = fn.where(small, a + 1.0, a)  # gamma(a) = gamma(a + 1) u^(1/a) for a < 1
    d = fn.stop_gradient(boosted - 1.0 / 3.0)
    c = 1.0 / fn.sqrt(9.0 * d)
    draw = d  # (used where all proposals fail: probability below 1e-10)
    taken = fn.zeros_like(a, dtype=DType.bool)
    for r in range(_ROUNDS):
        z = _r._draw(_r._normal, keys[2 * r], shape, work)
        u = _r._draw(_r._uniform, keys[2 * r + 1], shape, work)
        v = 1.0 + c * z
        v3 = v * v * v
        positive = v > 0.0
        v3s = fn.where(positive, v3, 1.0)
        ok = fn.logical_and(positive, fn.log(u) < 0.5 * z * z + d - d * v3s + d * fn.log(v3s))
        new = fn.logical_and(ok, fn.logical_not(taken))
        draw = fn.where(new, d * v3s, draw)
        taken = fn.logical_or(taken, ok)
    u = _r._draw(_r._uniform, keys[2 * _ROUNDS], shape, work)
    u = fn.maximum(u, float(np.finfo(work.numpy).tiny))
    a_s, g = fn.stop_gradient(a), fn.stop_gradient(draw)
    log_u = fn.log(u)
    log_x = fn.log(g) + fn.where(small, log_u / a_s, 0.0)
    # d log x / da: the boosted draw's implicit derivative (dg/da, ``random_gamma_grad``)
    # over g, and for a < 1 the boost's own term, -log(u) / a^2 (x = g u^(1/a) is a
    # reparameterization: an unbiased pathwise derivative, finite where x underflows)
    slope = _gamma_grad.bind([fn.stop_gradient(boosted), g], {}) / g
    slope = fn.stop_gradient(slope + fn.where(small, -log_u / (a_s * a_s), 0.0))
    if log_space:
        out = fn.stop_gradient(log_x) + (a - a_s) * slope
    else:
        x = fn.stop_gradient(fn.where(small, g * u ** (1.0 / a_s), g))
        out = x + (a - a_s) * (x * slope)
    return fn.cast(out, dtype)


def gamma(key, a, shape=None, dtype=None) -> Tensor:
    """Gamma draws of shape ``a`` and scale 1 (JAX's ``random.gamma``), differentiable in
    ``a`` (the implicit derivative, as JAX's).

    Args:
        key: a key (from :func:`nabla.random.key`).
        a: the shape parameter (positive), a number or a tensor broadcasting to ``shape``.
        shape: the result's shape (default: ``a``'s).
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`).

    Returns:
        A float tensor of ``shape``.
    """
    dt = _dtype("gamma", dtype)
    a = _param("gamma", a, dt)
    shape = _shape_of("gamma", shape, a)
    return _standard_gamma(_r._as_key(key, "random.gamma"), a, shape, dt)


def loggamma(key, a, shape=None, dtype=None) -> Tensor:
    """The logs of gamma draws (JAX's ``random.loggamma``), finite for tiny ``a`` where the
    draws themselves underflow to 0.

    Args:
        key: a key.
        a: the shape parameter, a number or a tensor broadcasting to ``shape``.
        shape: the result's shape (default: ``a``'s).
        dtype: a float dtype.

    Returns:
        A float tensor of ``shape``.
    """
    dt = _dtype("loggamma", dtype)
    a = _param("loggamma", a, dt)
    shape = _shape_of("loggamma", shape, a)
    return _standard_gamma(_r._as_key(key, "random.loggamma"), a, shape, dt, log_space=True)


def beta(key, a, b, shape=None, dtype=None) -> Tensor:
    """Beta(``a``, ``b``) draws (JAX's ``random.beta``): ``X / (X + Y)`` of gamma draws,
    in log space; differentiable in ``a`` and ``b``.

    Args:
        key: a key.
        a: the first shape parameter, a number or a tensor.
        b: the second, likewise.
        shape: the result's shape (default: the parameters' broadcast shape).
        dtype: a float dtype.

    Returns:
        A float tensor of ``shape``, in ``[0, 1]``.
    """
    dt = _dtype("beta", dtype)
    a, b = _param("beta", a, dt), _param("beta", b, dt)
    shape = _shape_of("beta", shape, a, b)
    ka, kb = _r.split(_r._as_key(key, "random.beta"), 2)
    la = _standard_gamma(ka, a, shape, dt, log_space=True)
    lb = _standard_gamma(kb, b, shape, dt, log_space=True)
    return fn.exp(la - fn.logaddexp(la, lb))


def dirichlet(key, alpha, shape=None, dtype=None) -> Tensor:
    """Dirichlet(``alpha``) draws (JAX's ``random.dirichlet``): normalized gamma draws
    along the last axis, in log space.

    Args:
        key: a key.
        alpha: the concentrations ``(..., K)``.
        shape: the batch shape (default: ``alpha``'s leading dims); the result is ``shape
            + (K,)``.
        dtype: a float dtype.

    Returns:
        A float tensor of ``shape + (K,)`` whose last axis sums to 1.

    Raises:
        ValueError: for an ``alpha`` of no dims.
    """
    dt = _dtype("dirichlet", dtype)
    alpha = _param("dirichlet", alpha, dt)
    if alpha.ndim < 1:
        raise ValueError(f"random.dirichlet: alpha must have at least 1 dim, got {alpha.shape}")
    batch = tuple(alpha.shape[:-1]) if shape is None else norm_shape("random.dirichlet", shape)
    full = batch + tuple(alpha.shape[-1:])
    _r._check_broadcast("random.dirichlet", full, {"alpha": alpha})
    logs = _standard_gamma(_r._as_key(key, "random.dirichlet"), alpha, full, dt, log_space=True)
    return fn.exp(logs - fn.logsumexp(logs, -1, keepdims=True))


def chisquare(key, df, shape=None, dtype=None) -> Tensor:
    """Chi-squared draws with ``df`` degrees of freedom: ``2 gamma(df / 2)``."""
    dt = _dtype("chisquare", dtype)
    df = _param("chisquare", df, dt)
    shape = _shape_of("chisquare", shape, df)
    return 2.0 * _standard_gamma(_r._as_key(key, "random.chisquare"), df * 0.5, shape, dt)


def t(key, df, shape=(), dtype=None) -> Tensor:
    """Student's t draws with ``df`` degrees of freedom: ``z / sqrt(chi2(df) / df)``.

    Args:
        key: a key.
        df: the degrees of freedom, a number or a tensor broadcasting to ``shape``.
        shape: the result's shape (default ``()``).
        dtype: a float dtype.

    Returns:
        A float tensor of ``shape``.
    """
    dt = _dtype("t", dtype)
    df = _param("t", df, dt)
    shape = _shape_of("t", shape, df)
    kz, kc = _r.split(_r._as_key(key, "random.t"), 2)
    z = _r._draw(_r._normal, kz, shape, dt)
    chi = 2.0 * _standard_gamma(kc, df * 0.5, shape, dt)
    return z * fn.rsqrt(chi / df)


def f(key, dfnum, dfden, shape=(), dtype=None) -> Tensor:
    """F draws: ``(chi2(dfnum) / dfnum) / (chi2(dfden) / dfden)``.

    Args:
        key: a key.
        dfnum: the numerator's degrees of freedom.
        dfden: the denominator's.
        shape: the result's shape (default ``()``).
        dtype: a float dtype.

    Returns:
        A float tensor of ``shape``.
    """
    dt = _dtype("f", dtype)
    dn, dd = _param("f", dfnum, dt), _param("f", dfden, dt)
    shape = _shape_of("f", shape, dn, dd)
    k1, k2 = _r.split(_r._as_key(key, "random.f"), 2)
    num = 2.0 * _standard_gamma(k1, dn * 0.5, shape, dt) / dn
    den = 2.0 * _standard_gamma(k2, dd * 0.5, shape, dt) / dd
    return num / den


def poisson(key, lam, shape=None, dtype=DType.int32) -> Tensor:
    """Poisson(``lam``) counts (JAX's ``random.poisson``): by inversion of the CDF below a
    rate of 10 (at most 64 terms), and by Hörmann's transformed rejection (PTRS, the first
    accepted of 10 proposals) from 10 on.

    Args:
        key: a key.
        lam: the rate (non-negative), a number or a tensor broadcasting to ``shape``.
        shape: the result's shape (default: ``lam``'s).
        dtype: an integer dtype (default int32).

    Returns:
        An integer tensor of ``shape``.
    """
    work = DType.float64 if get_default_dtype() is DType.float64 else DType.float32
    lam = _param("poisson", lam, work)
    shape = _shape_of("poisson", shape, lam)
    lam = fn.broadcast_to(lam, shape)
    k_small, *k_big = _r.split(_r._as_key(key, "random.poisson"), 21)
    # inversion: count while the CDF stays below u
    u = _r._draw(_r._uniform, k_small, shape, work)
    small_lam = fn.minimum(lam, 10.0)
    p = fn.exp(-small_lam)
    cdf = p
    count = fn.zeros_like(lam)
    for i in range(1, 64):
        more = u > cdf
        count = count + fn.cast(more, work)
        p = p * small_lam / float(i)
        cdf = cdf + p
    # transformed rejection for lam >= 10
    big_lam = fn.maximum(lam, 10.0)
    slam, loglam = fn.sqrt(big_lam), fn.log(big_lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2.0)
    draw = fn.floor(big_lam)
    taken = fn.zeros_like(lam, dtype=DType.bool)
    for r in range(10):
        uu = _r._draw(_r._uniform, k_big[2 * r], shape, work) - 0.5
        v = fn.maximum(_r._draw(_r._uniform, k_big[2 * r + 1], shape, work), 1e-30)
        us = 0.5 - fn.abs(uu)
        k = fn.floor((2.0 * a / us + b) * uu + big_lam + 0.43)
        quick = fn.logical_and(us >= 0.07, v <= vr)
        valid = fn.logical_and(k >= 0, fn.logical_not(fn.logical_and(us < 0.013, v > us)))
        ks = fn.maximum(k, 0.0)
        lhs = fn.log(v) + fn.log(inv_alpha) - fn.log(a / (us * us) + b)
        rhs = -big_lam + ks * loglam - gammaln(ks + 1.0)
        ok = fn.logical_or(quick, fn.logical_and(valid, lhs <= rhs))
        new = fn.logical_and(ok, fn.logical_not(taken))
        draw = fn.where(new, ks, draw)
        taken = fn.logical_or(taken, ok)
    out = fn.where(lam < 10.0, count, draw)
    return fn.cast(out, to_dtype(dtype, "random.poisson"))


# nb.random's ``multinomial`` becomes the one below (nabla/__init__.py), which hands
# PyTorch's form of the call to PyTorch's, kept here as it was
_TORCH_MULTINOMIAL = _r.multinomial
_BINOMIAL_ROUNDS = 12  # BTRS proposals per element (each accepted with probability > 0.7)


def binomial(key, n, p, shape=None, dtype=None) -> Tensor:
    """Binomial(``n``, ``p``) counts (JAX's ``random.binomial``), as floats: ``p`` above
    one half draws the failures of ``1 - p``; then, below a mean of 10, the inverse of the
    CDF (at most 64 terms); from 10 on, Hörmann's transformed rejection with squeeze (BTRS,
    the first accepted of 12 proposals; all 12 fail with probability below 1e-6, and then
    the mode is used).

    Args:
        key: a key.
        n: the number of trials (a non-negative whole number), a number or a tensor
            broadcasting to ``shape``.
        p: the success probability in [0, 1], likewise.
        shape: the result's shape (default: ``n`` and ``p`` broadcast).
        dtype: a float dtype (default: the default float dtype).

    Returns:
        A float tensor of ``shape`` holding whole numbers in ``[0, n]``.
    """
    dt = _dtype("binomial", dtype)
    # float64 throughout: BTRS compares differences of log-factorials of the size of n log n
    # (float32 rounding moved the acceptance enough to take 11% off the variance at n = 1e6)
    work = DType.float64
    n, p = _param("binomial", n, work), _param("binomial", p, work)
    shape = _shape_of("binomial", shape, n, p)
    n, p = fn.broadcast_to(n, shape), fn.broadcast_to(p, shape)
    k_small, *k_big = _r.split(_r._as_key(key, "random.binomial"), 1 + 2 * _BINOMIAL_ROUNDS)
    flip = p > 0.5
    q = fn.where(flip, 1.0 - p, p)  # at most one half
    # inversion below a mean of 10: count while the CDF stays below u
    mean = n * q
    small = mean < 10.0
    qs = fn.where(small, q, 0.0)
    odds = qs / (1.0 - qs)
    u = _r._draw(_r._uniform, k_small, shape, work)
    pmf = fn.exp(n * fn.log1p(-qs))  # P(0) = (1 - q)^n
    cdf, count = pmf, fn.zeros_like(n)
    for i in range(64):
        more = fn.logical_and(u > cdf, float(i) < n)
        count = count + fn.cast(more, work)
        pmf = pmf * fn.maximum(n - float(i), 0.0) / float(i + 1) * odds
        cdf = cdf + pmf
    # BTRS from a mean of 10 (Hörmann 1993); ``qb`` keeps its constants finite elsewhere
    qb = fn.where(small, 0.5, q)
    nb_ = fn.where(small, 40.0, n)
    spq = fn.sqrt(nb_ * qb * (1.0 - qb))
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * qb
    c = nb_ * qb + 0.5
    vr = 0.92 - 4.2 / b
    alpha = (2.83 + 5.1 / b) * spq
    lpq = fn.log(qb / (1.0 - qb))
    m = fn.floor((nb_ + 1.0) * qb)
    h = gammaln(m + 1.0) + gammaln(nb_ - m + 1.0)
    draw, taken = m, fn.zeros_like(n, dtype=DType.bool)
    for r in range(_BINOMIAL_ROUNDS):
        uu = _r._draw(_r._uniform, k_big[2 * r], shape, work) - 0.5
        v = fn.maximum(_r._draw(_r._uniform, k_big[2 * r + 1], shape, work), 1e-30)
        us = fn.maximum(0.5 - fn.abs(uu), 1e-30)
        k = fn.floor((2.0 * a / us + b) * uu + c)
        inside = fn.logical_and(k >= 0.0, k <= nb_)
        ks = fn.minimum(fn.maximum(k, 0.0), nb_)
        quick = fn.logical_and(us >= 0.07, v <= vr)
        lhs = fn.log(v * alpha / (a / (us * us) + b))
        rhs = h - gammaln(ks + 1.0) - gammaln(nb_ - ks + 1.0) + (ks - m) * lpq
        ok = fn.logical_and(inside, fn.logical_or(quick, lhs <= rhs))
        draw = fn.where(fn.logical_and(ok, fn.logical_not(taken)), ks, draw)
        taken = fn.logical_or(taken, ok)
    out = fn.where(small, count, draw)
    out = fn.where(flip, n - out, out)
    return fn.cast(out, dt)


def multinomial(
    key, n, p=None, *, shape=None, dtype=None, unroll=1, replacement=None, generator=None
) -> Tensor:
    """JAX's ``random.multinomial(key, n, p)``: counts of ``n`` trials over the outcomes
    of ``p`` (its last axis), each outcome's count a binomial draw of the trials left with
    its probability among the outcomes left. Called with PyTorch's arguments instead
    (``multinomial(input, num_samples, replacement=False)``, weights as the first
    argument, not a key), it is :func:`nabla.multinomial` (PyTorch's index draws).

    Args:
        key: a key (or PyTorch's weights ``input``).
        n: the number of trials, a number or a tensor broadcasting to the batch shape (or
            PyTorch's ``num_samples``).
        p: the outcomes' probabilities on the last axis, summing to 1 (or PyTorch's
            ``replacement``).
        shape: the batch shape, without the outcome axis (default: ``n`` and ``p``'s
            batch dims broadcast).
        dtype: a float dtype (default: the default float dtype).
        unroll: JAX's loop setting, accepted and unused (the loop over the outcomes is
            unrolled).
        replacement: PyTorch's keyword.
        generator: PyTorch's keyword (None).

    Returns:
        Counts of shape ``(*shape, K)`` for ``K`` outcomes, summing to ``n``.
    """
    if not (isinstance(key, Tensor) and key.shape == (2,) and key.dtype.is_int):
        # PyTorch's form: multinomial(input, num_samples, replacement)
        keep = bool(p) if p is not None else bool(replacement)
        return _TORCH_MULTINOMIAL(key, n, keep, generator=generator)
    dt = _dtype("multinomial", dtype)
    work = DType.float64 if dt is DType.float64 else DType.float32
    p = _param("multinomial", p, work)
    if p.ndim < 1:
        raise ValueError(f"random.multinomial: p needs an outcome axis, got shape {p.shape}")
    n = _param("multinomial", n, work)
    outcomes = p.shape[-1]
    batch = _shape_of("multinomial", shape, n, fn.zeros(p.shape[:-1], dtype=work))
    p = fn.broadcast_to(p, (*batch, outcomes))
    left, mass = fn.broadcast_to(n, batch), fn.ones(batch, dtype=work)
    keys = _r.split(_r._as_key(key, "random.multinomial"), outcomes)
    counts = []
    for i in range(outcomes):
        pi = p[..., i]
        if i == outcomes - 1:
            x = left  # the last outcome takes the trials left
        else:
            share = fn.minimum(fn.where(mass > 0.0, pi / fn.maximum(mass, 1e-30), 0.0), 1.0)
            x = binomial(keys[i], left, fn.maximum(share, 0.0), batch, work)
        counts.append(x)
        left = fn.maximum(left - x, 0.0)
        mass = mass - pi
    return fn.cast(fn.stack(counts, -1), dt)


def geometric(key, p, shape=None, dtype=DType.int32) -> Tensor:
    """The number of Bernoulli(``p``) trials up to the first success, from 1 (JAX's
    ``random.geometric``): ``floor(log(u) / log1p(-p)) + 1``."""
    p = _param("geometric", p, DType.float32)
    shape = _shape_of("geometric", shape, p)
    u = _r._draw(_r._uniform, _r._as_key(key, "random.geometric"), shape, DType.float32)
    u = fn.maximum(u, float(np.finfo(np.float32).tiny))
    return fn.cast(fn.floor(fn.log(u) / fn.log1p(-p)) + 1.0, to_dtype(dtype, "random.geometric"))


def rayleigh(key, scale=1.0, shape=None, dtype=None) -> Tensor:
    """Rayleigh draws: ``scale sqrt(-2 log u)``."""
    dt = _dtype("rayleigh", dtype)
    scale = _param("rayleigh", scale, dt)
    shape = _shape_of("rayleigh", shape, scale)
    u, _ = _r._float_draw(key, shape, dt, "random.rayleigh")
    return scale * fn.cast(fn.sqrt(-2.0 * fn.log(u)), dt)


def pareto(key, b, shape=None, dtype=None) -> Tensor:
    """Pareto draws of shape ``b`` and scale 1 (JAX's ``random.pareto``): ``exp(e / b)``
    for a standard exponential ``e``."""
    dt = _dtype("pareto", dtype)
    b = _param("pareto", b, dt)
    shape = _shape_of("pareto", shape, b)
    e = _r.exponential(key, shape, dt)
    return fn.exp(e / b)


def wald(key, mean, shape=None, dtype=None) -> Tensor:
    """Wald (inverse Gaussian) draws of mean ``mean`` and shape 1 (JAX's ``random.wald``;
    variance ``mean ** 3``), by Michael, Schucany and Haas' transformation of one normal
    and one uniform draw: a root of the quadratic a normal's square gives, or the other
    root ``mean ** 2 / x`` with the probability that makes the law exact. Its derivative
    in ``mean`` is the chosen root's, as JAX's: the choice between the roots moves with
    ``mean`` too, so the mean of the draws' derivatives is not the derivative of their
    mean (about 1.24 for 1 at ``mean=2``)."""
    dt = _dtype("wald", dtype)
    mu = _param("wald", mean, dt)
    shape = _shape_of("wald", shape, mu)
    kz, ku = _r.split(_r._as_key(key, "random.wald"), 2)
    z = _r._draw(_r._normal, kz, shape, dt)
    u, _ = _r._float_draw(ku, shape, dt, "random.wald")
    y = z * z
    x = mu + 0.5 * mu * mu * y - 0.5 * mu * fn.sqrt(4.0 * mu * y + mu * mu * y * y)
    return fn.where(fn.cast(u, dt) <= mu / (mu + x), x, mu * mu / x)


def weibull_min(key, scale, concentration, shape=(), dtype=None) -> Tensor:
    """Weibull draws (JAX's ``random.weibull_min``): ``scale (-log u)^(1 / concentration)``."""
    dt = _dtype("weibull_min", dtype)
    scale, k = _param("weibull_min", scale, dt), _param("weibull_min", concentration, dt)
    shape = _shape_of("weibull_min", shape, scale, k)
    e = _r.exponential(key, shape, dt)
    return scale * e ** (1.0 / k)


def triangular(key, left, mode, right, shape=None, dtype=None) -> Tensor:
    """Triangular draws on ``[left, right]`` peaking at ``mode``, by the inverse CDF."""
    dt = _dtype("triangular", dtype)
    lo, mo, hi = (_param("triangular", v, dt) for v in (left, mode, right))
    shape = _shape_of("triangular", shape, lo, mo, hi)
    u, _ = _r._float_draw(key, shape, dt, "random.triangular")
    u = fn.cast(u, dt)
    cut = (mo - lo) / (hi - lo)
    below = lo + fn.sqrt(u * (hi - lo) * (mo - lo))
    above = hi - fn.sqrt((1.0 - u) * (hi - lo) * (hi - mo))
    return fn.where(u < cut, below, above)


def maxwell(key, shape=(), dtype=None) -> Tensor:
    """Maxwell draws: the length of a standard normal 3-vector."""
    dt = _dtype("maxwell", dtype)
    shape = norm_shape("random.maxwell", shape)
    z = _r._draw(_r._normal, _r._as_key(key, "random.maxwell"), shape + (3,), dt)
    return fn.sqrt(fn.sum(z * z, -1))


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None) -> Tensor:
    """Double-sided Maxwell draws: ``loc + scale * s * m`` for a random sign ``s`` and a
    Maxwell draw ``m``."""
    dt = _dtype("double_sided_maxwell", dtype)
    loc = _param("double_sided_maxwell", loc, dt)
    scale = _param("double_sided_maxwell", scale, dt)
    shape = _shape_of("double_sided_maxwell", shape, loc, scale)
    k1, k2 = _r.split(_r._as_key(key, "random.double_sided_maxwell"), 2)
    sign = fn.cast(_r.rademacher(k2, shape), dt)
    return loc + scale * sign * maxwell(k1, shape, dt)


def generalized_normal(key, p, shape=(), dtype=None) -> Tensor:
    """Generalized normal draws of power ``p`` (density ``exp(-|x|^p)`` up to a constant):
    a random sign times ``gamma(1/p)^(1/p)``."""
    dt = _dtype("generalized_normal", dtype)
    p = _param("generalized_normal", p, dt)
    shape = _shape_of("generalized_normal", shape, p)
    k1, k2 = _r.split(_r._as_key(key, "random.generalized_normal"), 2)
    g = _standard_gamma(k1, 1.0 / p, shape, dt)
    return fn.cast(_r.rademacher(k2, shape), dt) * g ** (1.0 / p)


def ball(key, d: int, p: float = 2, shape=(), dtype=None) -> Tensor:
    """Points uniform in the unit ``p``-ball of dimension ``d`` (JAX's ``random.ball``):
    generalized normal draws over their ``p``-norm with an exponential added."""
    dt = _dtype("ball", dtype)
    shape = norm_shape("random.ball", shape)
    k1, k2 = _r.split(_r._as_key(key, "random.ball"), 2)
    g = generalized_normal(k1, float(p), shape + (int(d),), dt)
    e = _r.exponential(k2, shape, dt)
    total = fn.sum(fn.abs(g) ** float(p), -1) + e
    return g / fn.unsqueeze(total ** (1.0 / float(p)), -1)


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method: str = "cholesky"):
    """Multivariate normal draws (JAX's ``random.multivariate_normal``): ``mean + z A^T``
    for ``A A^T = cov``, ``A`` by ``method``: ``"cholesky"``, ``"eigh"`` or ``"svd"``.

    Args:
        key: a key.
        mean: ``(..., n)``.
        cov: ``(..., n, n)``.
        shape: the batch shape (default: ``mean``'s and ``cov``'s broadcast batch).
        dtype: a float dtype.
        method: how ``cov`` is factored.

    Returns:
        ``shape + (n,)``.

    Raises:
        ValueError: for an unknown method or shapes that do not fit.
    """
    dt = _dtype("multivariate_normal", dtype)
    mean, cov = _param("multivariate_normal", mean, dt), _param("multivariate_normal", cov, dt)
    square = cov.ndim >= 2 and cov.shape[-1] == cov.shape[-2]
    if mean.ndim < 1 or not square or cov.shape[-1] != mean.shape[-1]:
        raise ValueError(
            f"random.multivariate_normal: mean (..., n) and cov (..., n, n) do not fit: "
            f"{mean.shape} and {cov.shape}"
        )
    if method == "cholesky":
        factor = linalg.cholesky(cov)
    elif method == "eigh":
        w, v = linalg.eigh(cov)
        factor = v * fn.unsqueeze(fn.sqrt(fn.maximum(w, 0.0)), -2)
    elif method == "svd":
        u, s, _ = linalg.svd(cov, full_matrices=False)
        factor = u * fn.unsqueeze(fn.sqrt(s), -2)
    else:
        raise ValueError(
            f"random.multivariate_normal: method must be cholesky, eigh or svd, got {method!r}"
        )
    n = mean.shape[-1]
    batch = fn.broadcast_shapes(
        "random.multivariate_normal", tuple(mean.shape[:-1]), tuple(cov.shape[:-2])
    )
    batch = batch if shape is None else norm_shape("random.multivariate_normal", shape)
    z = _r._draw(_r._normal, _r._as_key(key, "random.multivariate_normal"), batch + (n,), dt)
    return mean + fn.squeeze(fn.matmul(factor, fn.unsqueeze(z, -1)), -1)


def orthogonal(key, n: int, shape=(), dtype=None) -> Tensor:
    """Haar-uniform orthogonal ``n x n`` matrices (JAX's ``random.orthogonal``): ``Q`` of
    a normal matrix's QR with its columns' signs set by ``R``'s diagonal."""
    dt = _dtype("orthogonal", dtype)
    shape = norm_shape("random.orthogonal", shape)
    z = _r._draw(_r._normal, _r._as_key(key, "random.orthogonal"), shape + (int(n), int(n)), dt)
    q, r = linalg.qr(z)
    diag = diagonal(r, 0, -2, -1)
    return q * fn.unsqueeze(fn.where(diag < 0, -1.0, 1.0), -2)


def bits(key, shape=(), dtype=DType.uint32) -> Tensor:
    """Uniformly random bits of an unsigned integer dtype (JAX's ``random.bits``)."""
    dt = to_dtype(dtype, "random.bits")
    if not dt.value.startswith("u"):
        raise ValueError(f"random.bits: dtype must be an unsigned integer dtype, got {dt.value}")
    return _r.randint(key, shape, 0, 2 ** (8 * dt.itemsize), dtype=dt)


def key_data(key) -> Tensor:
    """The words of a key as uint32 (JAX's ``random.key_data``)."""
    return fn.cast(_r._as_key(key, "random.key_data"), DType.uint32)


def wrap_key_data(key_bits_array, *, impl=None) -> Tensor:
    """A key from its words (JAX's ``random.wrap_key_data``; ``impl`` accepted)."""
    return fn.cast(as_tensor(key_bits_array, op="random.wrap_key_data"), DType.int64)


def clone(key) -> Tensor:
    """The key itself (JAX's ``random.clone``: keys are values here)."""
    return _r._as_key(key, "random.clone")
