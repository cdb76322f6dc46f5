"""``nb.scipy.stats``: the distributions of JAX's ``jax.scipy.stats`` that models use most,
each a namespace of functions (``nb.scipy.stats.norm.logpdf(x, loc, scale)``), with
``loc``/``scale`` as SciPy's. Outside a distribution's support a log density is ``-inf``.

The CDFs of ``gamma``, ``chi2``, ``beta``, ``t`` and ``poisson`` (and their ``sf``) use the
regularized incomplete gamma and beta functions (:func:`nabla.ops.special.gammainc`,
``betainc``: host ops in float64)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import NamedTuple

from ..core.dtypes import get_default_dtype
from ..linalg import cholesky, matmul, solve
from ..ops import binary, creation, indexing, random, reduction, unary, view
from ..ops._util import as_tensor, norm_axis
from ..ops.array_functions import diagonal, segment_max, segment_min, segment_sum
from ..ops.base import OpError
from ..ops.special import (
    betainc,
    betaln,
    expit,
    floats,
    gammainc,
    gammaincc,
    gammaln,
    i0e,
    log_ndtr,
    logit,
    ndtr,
    ndtri,
    xlog1py,
    xlogy,
)
from ..runtime.tensor import Tensor
from ..transforms.vmap import vmap

__all__ = [
    "norm",
    "multivariate_normal",
    "uniform",
    "expon",
    "laplace",
    "logistic",
    "cauchy",
    "t",
    "gamma",
    "beta",
    "chi2",
    "poisson",
    "bernoulli",
    "binom",
    "nbinom",
    "betabinom",
    "geom",
    "multinomial",
    "gumbel_r",
    "gumbel_l",
    "pareto",
    "truncnorm",
    "vonmises",
    "wrapcauchy",
    "gennorm",
    "dirichlet",
    "sem",
    "rankdata",
    "mode",
    "ModeResult",
    "gaussian_kde",
]

_LOG_2PI = math.log(2.0 * math.pi)


def _standard(op, x, loc, scale):
    """``((x - loc) / scale, scale)`` in one float dtype."""
    x, loc, scale = floats(op, x, loc, scale)
    return (x - loc) / scale, scale


def _inf_outside(inside, value, at) -> Tensor:
    """``value`` (a log density or mass) where ``inside``, ``-inf`` elsewhere and at the
    infinities (where every density here is 0), NaN where the point ``at`` is NaN."""
    finite = unary.logical_not(unary.is_inf(at))
    out = binary.where(binary.logical_and(inside, finite), value, -math.inf)
    return binary.where(unary.is_nan(at), math.nan, out)


def _nan_outside_unit(q, value) -> Tensor:
    """A quantile function's ``value``, NaN for a probability ``q`` outside ``[0, 1]``."""
    return binary.where(binary.logical_and(q >= 0, q <= 1), value, math.nan)


def _dist(name: str, **functions) -> SimpleNamespace:
    for fname, f in functions.items():
        f.__name__ = f.__qualname__ = fname
        f.__doc__ = f"``{name}.{fname}`` (JAX's ``scipy.stats.{name}.{fname}``). {f.__doc__}"
    return SimpleNamespace(**functions)


# ----------------------------------------------------------------------------- normal
def _norm_logpdf(x, loc=0, scale=1):
    """The normal log density."""
    z, scale = _standard("norm.logpdf", x, loc, scale)
    return -0.5 * z * z - unary.log(scale) - 0.5 * _LOG_2PI


def _norm_pdf(x, loc=0, scale=1):
    """The normal density."""
    return unary.exp(_norm_logpdf(x, loc, scale))


def _norm_cdf(x, loc=0, scale=1):
    """The normal CDF."""
    return ndtr(_standard("norm.cdf", x, loc, scale)[0])


def _norm_logcdf(x, loc=0, scale=1):
    """The log of the normal CDF, finite far in the lower tail."""
    return log_ndtr(_standard("norm.logcdf", x, loc, scale)[0])


def _norm_sf(x, loc=0, scale=1):
    """The normal survival function ``1 - cdf``."""
    return ndtr(unary.neg(_standard("norm.sf", x, loc, scale)[0]))


def _norm_logsf(x, loc=0, scale=1):
    """The log of the normal survival function."""
    return log_ndtr(unary.neg(_standard("norm.logsf", x, loc, scale)[0]))


def _norm_ppf(q, loc=0, scale=1):
    """The normal quantile function."""
    q, loc, scale = floats("norm.ppf", q, loc, scale)
    return loc + scale * ndtri(q)


def _norm_isf(q, loc=0, scale=1):
    """The normal inverse survival function."""
    q, loc, scale = floats("norm.isf", q, loc, scale)
    return loc - scale * ndtri(q)


norm = _dist(
    "norm",
    logpdf=_norm_logpdf,
    pdf=_norm_pdf,
    cdf=_norm_cdf,
    logcdf=_norm_logcdf,
    sf=_norm_sf,
    logsf=_norm_logsf,
    ppf=_norm_ppf,
    isf=_norm_isf,
)


def _mvn_logpdf(x, mean, cov, allow_singular=None):
    """The multivariate normal log density of ``x`` ``(..., d)``, by the Cholesky factor of
    ``cov`` ``(d, d)`` (``allow_singular`` must be None or False, as JAX's)."""
    if allow_singular:
        raise NotImplementedError("multivariate_normal.logpdf: allow_singular=True (as JAX)")
    x, mean, cov = floats("multivariate_normal.logpdf", x, mean, cov)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1] or x.shape[-1:] != cov.shape[:1]:
        raise ValueError(
            f"multivariate_normal.logpdf: cov must be (d, d) for x of shape (..., d), got x "
            f"{x.shape} and cov {cov.shape}"
        )
    d = cov.shape[0]
    low = cholesky(cov)
    diff = x - mean
    flat = view.reshape(diff, (-1, d))
    y = solve(low, view.swap_axes(flat, 0, 1))  # (d, n): L^-1 (x - mean)
    quad = view.reshape(reduction.sum(y * y, 0), tuple(diff.shape[:-1]))
    logdet = 2.0 * reduction.sum(unary.log(diagonal(low)))
    return -0.5 * quad - 0.5 * logdet - 0.5 * d * _LOG_2PI


def _mvn_pdf(x, mean, cov, allow_singular=None):
    """The multivariate normal density."""
    return unary.exp(_mvn_logpdf(x, mean, cov, allow_singular))


multivariate_normal = _dist("multivariate_normal", logpdf=_mvn_logpdf, pdf=_mvn_pdf)


# ----------------------------------------------------------------------------- on an interval
def _uniform_logpdf(x, loc=0, scale=1):
    """The log density of the uniform distribution on ``[loc, loc + scale]``."""
    z, scale = _standard("uniform.logpdf", x, loc, scale)
    inside = binary.logical_and(z >= 0, z <= 1)
    return _inf_outside(inside, unary.neg(unary.log(scale)) + 0.0 * z, z)


def _uniform_pdf(x, loc=0, scale=1):
    """The uniform density."""
    return unary.exp(_uniform_logpdf(x, loc, scale))


def _uniform_cdf(x, loc=0, scale=1):
    """The uniform CDF."""
    return binary.clip(_standard("uniform.cdf", x, loc, scale)[0], 0.0, 1.0)


def _uniform_ppf(q, loc=0, scale=1):
    """The uniform quantile function (NaN outside ``[0, 1]``)."""
    q, loc, scale = floats("uniform.ppf", q, loc, scale)
    return _nan_outside_unit(q, loc + q * scale)


uniform = _dist(
    "uniform", logpdf=_uniform_logpdf, pdf=_uniform_pdf, cdf=_uniform_cdf, ppf=_uniform_ppf
)


def _expon_logpdf(x, loc=0, scale=1):
    """The exponential log density (rate ``1 / scale``)."""
    z, scale = _standard("expon.logpdf", x, loc, scale)
    return _inf_outside(z >= 0, unary.neg(z) - unary.log(scale), z)


def _expon_pdf(x, loc=0, scale=1):
    """The exponential density."""
    return unary.exp(_expon_logpdf(x, loc, scale))


def _expon_cdf(x, loc=0, scale=1):
    """The exponential CDF."""
    z, _ = _standard("expon.cdf", x, loc, scale)
    value = unary.neg(unary.expm1(unary.neg(binary.maximum(z, 0.0))))
    return binary.where(z > 0, value, binary.where(unary.is_nan(z), math.nan, 0.0))


def _expon_ppf(q, loc=0, scale=1):
    """The exponential quantile function."""
    q, loc, scale = floats("expon.ppf", q, loc, scale)
    return _nan_outside_unit(q, loc - scale * unary.log1p(unary.neg(q)))


expon = _dist("expon", logpdf=_expon_logpdf, pdf=_expon_pdf, cdf=_expon_cdf, ppf=_expon_ppf)


def _laplace_logpdf(x, loc=0, scale=1):
    """The Laplace log density."""
    z, scale = _standard("laplace.logpdf", x, loc, scale)
    return unary.neg(unary.abs(z)) - unary.log(2.0 * scale)


def _laplace_pdf(x, loc=0, scale=1):
    """The Laplace density."""
    return unary.exp(_laplace_logpdf(x, loc, scale))


def _laplace_cdf(x, loc=0, scale=1):
    """The Laplace CDF."""
    z, _ = _standard("laplace.cdf", x, loc, scale)
    below = 0.5 * unary.exp(binary.minimum(z, 0.0))
    return binary.where(z < 0, below, 1.0 - 0.5 * unary.exp(unary.neg(binary.maximum(z, 0.0))))


laplace = _dist("laplace", logpdf=_laplace_logpdf, pdf=_laplace_pdf, cdf=_laplace_cdf)


def _logistic_logpdf(x, loc=0, scale=1):
    """The logistic log density (stable for large ``|x|``)."""
    z, scale = _standard("logistic.logpdf", x, loc, scale)
    a = unary.abs(z)
    return unary.neg(a) - 2.0 * unary.log1p(unary.exp(unary.neg(a))) - unary.log(scale)


def _logistic_pdf(x, loc=0, scale=1):
    """The logistic density."""
    return unary.exp(_logistic_logpdf(x, loc, scale))


def _logistic_cdf(x, loc=0, scale=1):
    """The logistic CDF."""
    return expit(_standard("logistic.cdf", x, loc, scale)[0])


def _logistic_sf(x, loc=0, scale=1):
    """The logistic survival function."""
    return expit(unary.neg(_standard("logistic.sf", x, loc, scale)[0]))


def _logistic_ppf(q, loc=0, scale=1):
    """The logistic quantile function."""
    q, loc, scale = floats("logistic.ppf", q, loc, scale)
    return loc + scale * logit(q)


logistic = _dist(
    "logistic",
    logpdf=_logistic_logpdf,
    pdf=_logistic_pdf,
    cdf=_logistic_cdf,
    sf=_logistic_sf,
    ppf=_logistic_ppf,
)


def _cauchy_logpdf(x, loc=0, scale=1):
    """The Cauchy log density."""
    z, scale = _standard("cauchy.logpdf", x, loc, scale)
    return -math.log(math.pi) - unary.log(scale) - unary.log1p(z * z)


def _cauchy_pdf(x, loc=0, scale=1):
    """The Cauchy density."""
    return unary.exp(_cauchy_logpdf(x, loc, scale))


def _cauchy_cdf(x, loc=0, scale=1):
    """The Cauchy CDF."""
    return 0.5 + unary.atan(_standard("cauchy.cdf", x, loc, scale)[0]) / math.pi


def _cauchy_ppf(q, loc=0, scale=1):
    """The Cauchy quantile function."""
    q, loc, scale = floats("cauchy.ppf", q, loc, scale)
    return loc + scale * unary.tan(math.pi * (q - 0.5))


cauchy = _dist("cauchy", logpdf=_cauchy_logpdf, pdf=_cauchy_pdf, cdf=_cauchy_cdf, ppf=_cauchy_ppf)


# ----------------------------------------------------------------------------- gamma family
def _t_logpdf(x, df, loc=0, scale=1):
    """Student's t log density with ``df`` degrees of freedom."""
    x, df, loc, scale = floats("t.logpdf", x, df, loc, scale)
    z = (x - loc) / scale
    half = 0.5 * (df + 1.0)
    norm_ = gammaln(half) - gammaln(0.5 * df) - 0.5 * unary.log(df * math.pi) - unary.log(scale)
    return norm_ - half * unary.log1p(z * z / df)


def _t_pdf(x, df, loc=0, scale=1):
    """Student's t density."""
    return unary.exp(_t_logpdf(x, df, loc, scale))


def _t_tail(x, df, loc, scale, op):
    """``(z, half the probability beyond |z|)`` for Student's t: ``I_{df/(df+z^2)}(df/2,
    1/2) / 2``."""
    x, df, loc, scale = floats(op, x, df, loc, scale)
    z = (x - loc) / scale
    return z, 0.5 * betainc(0.5 * df, 0.5, df / (df + z * z))


def _t_cdf(x, df, loc=0, scale=1):
    """Student's t CDF (by the incomplete beta function)."""
    z, tail = _t_tail(x, df, loc, scale, "t.cdf")
    return binary.where(z > 0, 1.0 - tail, tail)


def _t_sf(x, df, loc=0, scale=1):
    """Student's t survival function, ``1 - cdf``, exact in the upper tail."""
    z, tail = _t_tail(x, df, loc, scale, "t.sf")
    return binary.where(z > 0, tail, 1.0 - tail)


t = _dist("t", logpdf=_t_logpdf, pdf=_t_pdf, cdf=_t_cdf, sf=_t_sf)


def _gamma_logpdf(x, a, loc=0, scale=1):
    """The gamma log density with shape ``a``."""
    x, a, loc, scale = floats("gamma.logpdf", x, a, loc, scale)
    y = (x - loc) / scale
    ys = binary.maximum(y, 0.0)
    value = xlogy(a - 1.0, ys) - ys - gammaln(a) - unary.log(scale)
    return _inf_outside(y >= 0, value, y)


def _gamma_pdf(x, a, loc=0, scale=1):
    """The gamma density."""
    return unary.exp(_gamma_logpdf(x, a, loc, scale))


def _gamma_cdf(x, a, loc=0, scale=1):
    """The gamma CDF, ``P(a, (x - loc) / scale)``."""
    x, a, loc, scale = floats("gamma.cdf", x, a, loc, scale)
    return gammainc(a, binary.maximum((x - loc) / scale, 0.0))


def _gamma_sf(x, a, loc=0, scale=1):
    """The gamma survival function, ``Q(a, (x - loc) / scale)``."""
    x, a, loc, scale = floats("gamma.sf", x, a, loc, scale)
    return gammaincc(a, binary.maximum((x - loc) / scale, 0.0))


gamma = _dist("gamma", logpdf=_gamma_logpdf, pdf=_gamma_pdf, cdf=_gamma_cdf, sf=_gamma_sf)


def _chi2_logpdf(x, df, loc=0, scale=1):
    """The chi-squared log density with ``df`` degrees of freedom (a gamma of shape
    ``df / 2`` and scale ``2 scale``)."""
    x, df, loc, scale = floats("chi2.logpdf", x, df, loc, scale)
    return _gamma_logpdf(x, 0.5 * df, loc, 2.0 * scale)


def _chi2_pdf(x, df, loc=0, scale=1):
    """The chi-squared density."""
    return unary.exp(_chi2_logpdf(x, df, loc, scale))


def _chi2_cdf(x, df, loc=0, scale=1):
    """The chi-squared CDF (a gamma of shape ``df / 2`` and scale ``2 scale``)."""
    x, df, loc, scale = floats("chi2.cdf", x, df, loc, scale)
    return _gamma_cdf(x, 0.5 * df, loc, 2.0 * scale)


def _chi2_sf(x, df, loc=0, scale=1):
    """The chi-squared survival function."""
    x, df, loc, scale = floats("chi2.sf", x, df, loc, scale)
    return _gamma_sf(x, 0.5 * df, loc, 2.0 * scale)


chi2 = _dist("chi2", logpdf=_chi2_logpdf, pdf=_chi2_pdf, cdf=_chi2_cdf, sf=_chi2_sf)


def _beta_logpdf(x, a, b, loc=0, scale=1):
    """The beta log density with shapes ``a`` and ``b``."""
    x, a, b, loc, scale = floats("beta.logpdf", x, a, b, loc, scale)
    y = (x - loc) / scale
    inside = binary.logical_and(y >= 0, y <= 1)
    ys = binary.clip(y, 0.0, 1.0)
    value = xlogy(a - 1.0, ys) + xlog1py(b - 1.0, unary.neg(ys)) - betaln(a, b)
    return _inf_outside(inside, value - unary.log(scale), y)


def _beta_pdf(x, a, b, loc=0, scale=1):
    """The beta density."""
    return unary.exp(_beta_logpdf(x, a, b, loc, scale))


def _beta_cdf(x, a, b, loc=0, scale=1):
    """The beta CDF, ``I_y(a, b)`` at ``y = (x - loc) / scale`` clipped to [0, 1]."""
    x, a, b, loc, scale = floats("beta.cdf", x, a, b, loc, scale)
    return betainc(a, b, binary.clip((x - loc) / scale, 0.0, 1.0))


def _beta_sf(x, a, b, loc=0, scale=1):
    """The beta survival function, ``I_{1-y}(b, a)`` (exact in the upper tail)."""
    x, a, b, loc, scale = floats("beta.sf", x, a, b, loc, scale)
    return betainc(b, a, 1.0 - binary.clip((x - loc) / scale, 0.0, 1.0))


beta = _dist("beta", logpdf=_beta_logpdf, pdf=_beta_pdf, cdf=_beta_cdf, sf=_beta_sf)


# ----------------------------------------------------------------------------- discrete
def _poisson_logpmf(k, mu, loc=0):
    """The Poisson log probability of ``k`` (``-inf`` off the non-negative integers)."""
    k, mu, loc = floats("poisson.logpmf", k, mu, loc)
    j = k - loc
    valid = binary.logical_and(j >= 0, unary.floor(j) == j)
    js = binary.maximum(j, 0.0)
    return _inf_outside(valid, xlogy(js, mu) - gammaln(js + 1.0) - mu, k)


def _poisson_pmf(k, mu, loc=0):
    """The Poisson probability."""
    return unary.exp(_poisson_logpmf(k, mu, loc))


def _poisson_cdf(k, mu, loc=0):
    """The Poisson CDF, ``Q(floor(k - loc) + 1, mu)`` (0 below the support)."""
    k, mu, loc = floats("poisson.cdf", k, mu, loc)
    j = unary.floor(k - loc)
    return binary.where(j < 0, 0.0, gammaincc(binary.maximum(j, 0.0) + 1.0, mu))


def _poisson_sf(k, mu, loc=0):
    """The Poisson survival function, ``P(floor(k - loc) + 1, mu)`` (1 below the support)."""
    k, mu, loc = floats("poisson.sf", k, mu, loc)
    j = unary.floor(k - loc)
    return binary.where(j < 0, 1.0, gammainc(binary.maximum(j, 0.0) + 1.0, mu))


poisson = _dist(
    "poisson", logpmf=_poisson_logpmf, pmf=_poisson_pmf, cdf=_poisson_cdf, sf=_poisson_sf
)


def _bernoulli_logpmf(k, p, loc=0):
    """The Bernoulli log probability of ``k`` in ``{0, 1}`` (``-inf`` elsewhere)."""
    k, p, loc = floats("bernoulli.logpmf", k, p, loc)
    j = k - loc
    valid = binary.logical_or(j == 0, j == 1)
    js = binary.where(valid, j, 0.0)
    return _inf_outside(valid, xlogy(js, p) + xlog1py(1.0 - js, unary.neg(p)), k)


def _bernoulli_pmf(k, p, loc=0):
    """The Bernoulli probability."""
    return unary.exp(_bernoulli_logpmf(k, p, loc))


def _bernoulli_cdf(k, p, loc=0):
    """The Bernoulli CDF."""
    k, p, loc = floats("bernoulli.cdf", k, p, loc)
    j = k - loc
    value = binary.where(j < 0, 0.0, binary.where(j < 1, 1.0 - p, 1.0))
    return binary.where(unary.is_nan(j), math.nan, value)


bernoulli = _dist("bernoulli", logpmf=_bernoulli_logpmf, pmf=_bernoulli_pmf, cdf=_bernoulli_cdf)


# ----------------------------------------------------------------------------- more discrete
def _binom_comb(n, y):
    return gammaln(n + 1.0) - gammaln(y + 1.0) - gammaln(n - y + 1.0)


def _binom_logpmf(k, n, p, loc=0):
    """The binomial log probability (``-inf`` outside ``0 <= k - loc <= n``)."""
    k, n, p, loc = floats("binom.logpmf", k, n, p, loc)
    y = k - loc
    inside = binary.logical_and(y >= 0, y <= n)
    ys = binary.where(inside, y, 0.0)
    value = _binom_comb(n, ys) + xlogy(ys, p) + xlog1py(n - ys, unary.neg(p))
    return _inf_outside(inside, value, y)


def _binom_pmf(k, n, p, loc=0):
    """The binomial probability."""
    return unary.exp(_binom_logpmf(k, n, p, loc))


binom = _dist("binom", logpmf=_binom_logpmf, pmf=_binom_pmf)


def _nbinom_logpmf(k, n, p, loc=0):
    """The negative binomial log probability of ``k`` failures before the ``n``-th success
    (``-inf`` below 0)."""
    k, n, p, loc = floats("nbinom.logpmf", k, n, p, loc)
    y = k - loc
    inside = y >= 0
    ys = binary.where(inside, y, 0.0)
    value = gammaln(n + ys) - gammaln(ys + 1.0) - gammaln(n) + xlogy(n, p)
    return _inf_outside(inside, value + xlog1py(ys, unary.neg(p)), y)


def _nbinom_pmf(k, n, p, loc=0):
    """The negative binomial probability."""
    return unary.exp(_nbinom_logpmf(k, n, p, loc))


nbinom = _dist("nbinom", logpmf=_nbinom_logpmf, pmf=_nbinom_pmf)


def _betabinom_logpmf(k, n, a, b, loc=0):
    """The beta-binomial log probability (``-inf`` outside ``0 <= k - loc <= n``)."""
    k, n, a, b, loc = floats("betabinom.logpmf", k, n, a, b, loc)
    y = k - loc
    inside = binary.logical_and(y >= 0, y <= n)
    ys = binary.where(inside, y, 0.0)
    value = _binom_comb(n, ys) + betaln(ys + a, n - ys + b) - betaln(a, b)
    return _inf_outside(inside, value, y)


def _betabinom_pmf(k, n, a, b, loc=0):
    """The beta-binomial probability."""
    return unary.exp(_betabinom_logpmf(k, n, a, b, loc))


betabinom = _dist("betabinom", logpmf=_betabinom_logpmf, pmf=_betabinom_pmf)


def _geom_logpmf(k, p, loc=0):
    """The geometric log probability of the first success at trial ``k`` (``-inf`` below
    1)."""
    k, p, loc = floats("geom.logpmf", k, p, loc)
    y = k - loc
    inside = y >= 1
    ys = binary.where(inside, y, 1.0)
    return _inf_outside(inside, xlog1py(ys - 1.0, unary.neg(p)) + unary.log(p), y)


def _geom_pmf(k, p, loc=0):
    """The geometric probability."""
    return unary.exp(_geom_logpmf(k, p, loc))


geom = _dist("geom", logpmf=_geom_logpmf, pmf=_geom_pmf)


def _multinomial_logpmf(x, n, p):
    """The multinomial log probability of the counts ``x`` (last axis) in ``n`` trials
    (``-inf`` where they do not add up to ``n``); ``x`` and ``n`` integers, as JAX's."""
    xt, nt = (as_tensor(v, op="multinomial.logpmf") for v in (x, n))
    if not (xt.dtype.is_int and nt.dtype.is_int):
        raise OpError(
            f"multinomial.logpmf: x and n must be integers, got {xt.dtype.value} and "
            f"{nt.dtype.value}"
        )
    p = floats("multinomial.logpmf", p)[0]
    xf, nf = unary.cast(xt, p.dtype), unary.cast(nt, p.dtype)
    value = gammaln(nf + 1.0) + reduction.sum(xlogy(xf, p) - gammaln(xf + 1.0), -1)
    return _inf_outside(reduction.sum(xf, -1) == nf, value, value)


def _multinomial_pmf(x, n, p):
    """The multinomial probability."""
    return unary.exp(_multinomial_logpmf(x, n, p))


multinomial = _dist("multinomial", logpmf=_multinomial_logpmf, pmf=_multinomial_pmf)


# ----------------------------------------------------------------------------- more continuous
def _gumbel_r_logpdf(x, loc=0, scale=1):
    """The right-skewed Gumbel log density."""
    z, scale = _standard("gumbel_r.logpdf", x, loc, scale)
    return unary.neg(z) - unary.exp(unary.neg(z)) - unary.log(scale)


def _gumbel_r_pdf(x, loc=0, scale=1):
    """The right-skewed Gumbel density."""
    return unary.exp(_gumbel_r_logpdf(x, loc, scale))


def _gumbel_r_logcdf(x, loc=0, scale=1):
    """The log CDF, ``-exp(-z)``."""
    return unary.neg(unary.exp(unary.neg(_standard("gumbel_r.logcdf", x, loc, scale)[0])))


def _gumbel_r_cdf(x, loc=0, scale=1):
    """The CDF, ``exp(-exp(-z))``."""
    return unary.exp(_gumbel_r_logcdf(x, loc, scale))


def _gumbel_r_sf(x, loc=0, scale=1):
    """The survival function, ``1 - exp(-exp(-z))`` without cancellation."""
    return unary.neg(unary.expm1(_gumbel_r_logcdf(x, loc, scale)))


def _gumbel_r_logsf(x, loc=0, scale=1):
    """The log survival function."""
    return unary.log(_gumbel_r_sf(x, loc, scale))


def _gumbel_r_ppf(q, loc=0, scale=1):
    """The quantile function, ``loc - scale log(-log q)``."""
    q, loc, scale = floats("gumbel_r.ppf", q, loc, scale)
    return loc - scale * unary.log(unary.neg(unary.log(q)))


gumbel_r = _dist(
    "gumbel_r", logpdf=_gumbel_r_logpdf, pdf=_gumbel_r_pdf, cdf=_gumbel_r_cdf,
    logcdf=_gumbel_r_logcdf, sf=_gumbel_r_sf, logsf=_gumbel_r_logsf, ppf=_gumbel_r_ppf,
)  # fmt: skip


def _gumbel_l_logpdf(x, loc=0, scale=1):
    """The left-skewed Gumbel log density."""
    z, scale = _standard("gumbel_l.logpdf", x, loc, scale)
    return z - unary.exp(z) - unary.log(scale)


def _gumbel_l_pdf(x, loc=0, scale=1):
    """The left-skewed Gumbel density."""
    return unary.exp(_gumbel_l_logpdf(x, loc, scale))


def _gumbel_l_logsf(x, loc=0, scale=1):
    """The log survival function, ``-exp(z)``."""
    return unary.neg(unary.exp(_standard("gumbel_l.logsf", x, loc, scale)[0]))


def _gumbel_l_sf(x, loc=0, scale=1):
    """The survival function, ``exp(-exp(z))``."""
    return unary.exp(_gumbel_l_logsf(x, loc, scale))


def _gumbel_l_cdf(x, loc=0, scale=1):
    """The CDF, ``1 - exp(-exp(z))`` without cancellation."""
    return unary.neg(unary.expm1(_gumbel_l_logsf(x, loc, scale)))


def _gumbel_l_logcdf(x, loc=0, scale=1):
    """The log CDF."""
    return unary.log(_gumbel_l_cdf(x, loc, scale))


def _gumbel_l_ppf(q, loc=0, scale=1):
    """The quantile function, ``loc + scale log(-log(1 - q))``."""
    q, loc, scale = floats("gumbel_l.ppf", q, loc, scale)
    return loc + scale * unary.log(unary.neg(unary.log1p(unary.neg(q))))


gumbel_l = _dist(
    "gumbel_l", logpdf=_gumbel_l_logpdf, pdf=_gumbel_l_pdf, cdf=_gumbel_l_cdf,
    logcdf=_gumbel_l_logcdf, sf=_gumbel_l_sf, logsf=_gumbel_l_logsf, ppf=_gumbel_l_ppf,
)  # fmt: skip


def _pareto_parts(op, x, b, loc, scale):
    x, b, loc, scale = floats(op, x, b, loc, scale)
    z = (x - loc) / scale
    inside = z >= 1.0
    # z itself where inside, 1 below the support; a NaN point stays NaN through every function
    return binary.where(binary.logical_or(inside, unary.is_nan(z)), z, 1.0), b, scale, inside


def _pareto_logpdf(x, b, loc=0, scale=1):
    """The Pareto log density (``-inf`` below ``loc + scale``)."""
    z, b, scale, inside = _pareto_parts("pareto.logpdf", x, b, loc, scale)
    return _inf_outside(inside, unary.log(b) - (b + 1.0) * unary.log(z) - unary.log(scale), z)


def _pareto_pdf(x, b, loc=0, scale=1):
    """The Pareto density."""
    return unary.exp(_pareto_logpdf(x, b, loc, scale))


def _pareto_logsf(x, b, loc=0, scale=1):
    """The log survival function, ``-b log z`` (0 below the support)."""
    z, b, _, _ = _pareto_parts("pareto.logsf", x, b, loc, scale)
    return unary.neg(b) * unary.log(z)


def _pareto_sf(x, b, loc=0, scale=1):
    """The survival function, ``z^-b``."""
    return unary.exp(_pareto_logsf(x, b, loc, scale))


def _pareto_cdf(x, b, loc=0, scale=1):
    """The CDF, ``1 - z^-b``."""
    return unary.neg(unary.expm1(_pareto_logsf(x, b, loc, scale)))


def _pareto_logcdf(x, b, loc=0, scale=1):
    """The log CDF."""
    return unary.log(_pareto_cdf(x, b, loc, scale))


def _pareto_ppf(q, b, loc=0, scale=1):
    """The quantile function, ``loc + scale (1 - q)^(-1/b)``."""
    q, b, loc, scale = floats("pareto.ppf", q, b, loc, scale)
    return _nan_outside_unit(q, loc + scale * unary.exp(unary.neg(unary.log1p(unary.neg(q))) / b))


pareto = _dist(
    "pareto", logpdf=_pareto_logpdf, pdf=_pareto_pdf, cdf=_pareto_cdf, logcdf=_pareto_logcdf,
    sf=_pareto_sf, logsf=_pareto_logsf, ppf=_pareto_ppf,
)  # fmt: skip


def _log_mass_between(a, b):
    """``log(Phi(b) - Phi(a))`` for ``a <= b``, from the tail that keeps its precision."""
    upper = binary.where(a > 0, unary.neg(a), b)  # by symmetry, the lower tail's values
    lower = binary.where(a > 0, unary.neg(b), a)
    hi, lo = log_ndtr(upper), log_ndtr(lower)
    return hi + unary.log1p(unary.neg(unary.exp(lo - hi)))


def _truncnorm_logpdf(x, a, b, loc=0, scale=1):
    """The log density of the normal truncated to ``[a, b]`` (standard units), ``-inf``
    outside."""
    x, a, b, loc, scale = floats("truncnorm.logpdf", x, a, b, loc, scale)
    z = (x - loc) / scale
    inside = binary.logical_and(z >= a, z <= b)
    value = -0.5 * z * z - 0.5 * _LOG_2PI - unary.log(scale) - _log_mass_between(a, b)
    return _inf_outside(inside, value, z)


def _truncnorm_pdf(x, a, b, loc=0, scale=1):
    """The truncated normal density."""
    return unary.exp(_truncnorm_logpdf(x, a, b, loc, scale))


def _truncnorm_logcdf(x, a, b, loc=0, scale=1):
    """The log CDF, ``log((Phi(z) - Phi(a)) / (Phi(b) - Phi(a)))``."""
    x, a, b, loc, scale = floats("truncnorm.logcdf", x, a, b, loc, scale)
    z = binary.clip((x - loc) / scale, a, b)
    value = _log_mass_between(a, z) - _log_mass_between(a, b)
    return binary.where(z <= a, -math.inf, binary.minimum(value, 0.0))


def _truncnorm_cdf(x, a, b, loc=0, scale=1):
    """The truncated normal CDF."""
    return unary.exp(_truncnorm_logcdf(x, a, b, loc, scale))


def _truncnorm_logsf(x, a, b, loc=0, scale=1):
    """The log survival function, ``log((Phi(b) - Phi(z)) / (Phi(b) - Phi(a)))``."""
    x, a, b, loc, scale = floats("truncnorm.logsf", x, a, b, loc, scale)
    z = binary.clip((x - loc) / scale, a, b)
    value = _log_mass_between(z, b) - _log_mass_between(a, b)
    return binary.where(z >= b, -math.inf, binary.minimum(value, 0.0))


def _truncnorm_sf(x, a, b, loc=0, scale=1):
    """The truncated normal survival function."""
    return unary.exp(_truncnorm_logsf(x, a, b, loc, scale))


truncnorm = _dist(
    "truncnorm", logpdf=_truncnorm_logpdf, pdf=_truncnorm_pdf, cdf=_truncnorm_cdf,
    logcdf=_truncnorm_logcdf, sf=_truncnorm_sf, logsf=_truncnorm_logsf,
)  # fmt: skip


def _vonmises_logpdf(x, kappa):
    """The von Mises log density, ``kappa (cos x - 1) - log(2 pi i0e(kappa))`` (periodic in
    ``x``)."""
    x, kappa = floats("vonmises.logpdf", x, kappa)
    return kappa * (unary.cos(x) - 1.0) - unary.log(2.0 * math.pi * i0e(kappa))


def _vonmises_pdf(x, kappa):
    """The von Mises density."""
    return unary.exp(_vonmises_logpdf(x, kappa))


vonmises = _dist("vonmises", logpdf=_vonmises_logpdf, pdf=_vonmises_pdf)


def _wrapcauchy_logpdf(x, c):
    """The wrapped Cauchy log density on ``[0, 2 pi]`` (``-inf`` outside)."""
    x, c = floats("wrapcauchy.logpdf", x, c)
    inside = binary.logical_and(x >= 0.0, x <= 2.0 * math.pi)
    value = unary.log1p(unary.neg(c * c)) - math.log(2.0 * math.pi)
    value = value - unary.log(1.0 + c * c - 2.0 * c * unary.cos(x))
    return _inf_outside(inside, value, x)


def _wrapcauchy_pdf(x, c):
    """The wrapped Cauchy density."""
    return unary.exp(_wrapcauchy_logpdf(x, c))


wrapcauchy = _dist("wrapcauchy", logpdf=_wrapcauchy_logpdf, pdf=_wrapcauchy_pdf)


def _gennorm_logpdf(x, beta):
    """The generalized normal log density, ``log(beta / (2 Gamma(1/beta))) - |x|^beta``."""
    x, beta = floats("gennorm.logpdf", x, beta)
    return unary.log(beta) - math.log(2.0) - gammaln(1.0 / beta) - unary.abs(x) ** beta


def _gennorm_pdf(x, beta):
    """The generalized normal density."""
    return unary.exp(_gennorm_logpdf(x, beta))


def _gennorm_cdf(x, beta):
    """The CDF, ``1/2 + sign(x) P(1/beta, |x|^beta) / 2``."""
    x, beta = floats("gennorm.cdf", x, beta)
    return 0.5 + 0.5 * unary.sign(x) * gammainc(1.0 / beta, unary.abs(x) ** beta)


gennorm = _dist("gennorm", logpdf=_gennorm_logpdf, pdf=_gennorm_pdf, cdf=_gennorm_cdf)


def _dirichlet_logpdf(x, alpha):
    """The Dirichlet log density of points ``x`` on the simplex: ``(K,)`` or ``(K, N)``
    (N points), ``alpha`` ``(K,)``; ``-inf`` off the simplex."""
    x, alpha = floats("dirichlet.logpdf", x, alpha)
    if alpha.ndim != 1 or x.ndim not in (1, 2) or x.shape[0] != alpha.shape[0]:
        raise OpError(
            f"dirichlet.logpdf: x (K,) or (K, N) and alpha (K,) do not fit: "
            f"{tuple(x.shape)}, {tuple(alpha.shape)}"
        )
    a = alpha if x.ndim == 1 else view.reshape(alpha, (-1, 1))
    norm_const = reduction.sum(gammaln(alpha)) - gammaln(reduction.sum(alpha))
    value = reduction.sum(xlogy(a - 1.0, x), 0) - norm_const
    on_simplex = binary.logical_and(
        reduction.all(x >= 0.0, 0), unary.abs(reduction.sum(x, 0) - 1.0) < 1e-6
    )
    return _inf_outside(on_simplex, value, reduction.sum(x, 0))


def _dirichlet_pdf(x, alpha):
    """The Dirichlet density."""
    return unary.exp(_dirichlet_logpdf(x, alpha))


dirichlet = _dist("dirichlet", logpdf=_dirichlet_logpdf, pdf=_dirichlet_pdf)


def sem(a, axis=0, ddof: int = 1, nan_policy: str = "propagate", *, keepdims: bool = False):
    """The standard error of the mean (SciPy's and JAX's ``scipy.stats.sem``):
    ``std(a, ddof) / sqrt(n)`` along ``axis``.

    Args:
        a: the samples.
        axis: the axis (None: all of them).
        ddof: the delta degrees of freedom (default 1).
        nan_policy: ``"propagate"`` or ``"omit"`` (NaNs left out of each count).
        keepdims: keep the reduced axis.

    Returns:
        The standard errors.
    """
    x = floats("sem", a)[0]
    if nan_policy not in ("propagate", "omit"):
        raise OpError(f"sem: nan_policy must be 'propagate' or 'omit', got {nan_policy!r}")
    if axis is None:
        x, axis = view.reshape(x, (-1,)), 0
    if nan_policy == "omit":
        ok = unary.logical_not(unary.is_nan(x))
        n = reduction.sum(unary.cast(ok, x.dtype), axis, keepdims=True)
        mean = reduction.sum(binary.where(ok, x, 0.0), axis, keepdims=True) / n
        dev = binary.where(ok, x - mean, 0.0)
        var = reduction.sum(dev * dev, axis, keepdims=True) / (n - ddof)
    else:
        n = x.shape[axis]
        var = reduction.var(x, axis, keepdims=True, ddof=ddof)
    out = unary.sqrt(var / n)
    return out if keepdims else view.squeeze(out, axis)


# ----------------------------------------------------------------------------- ranks, modes
_RANK_METHODS = ("average", "min", "max", "dense", "ordinal")


def _rank_1d(x: Tensor, method: str) -> Tensor:
    """The ranks (from 1) of a 1-D ``x``: one stable sort, the tie groups numbered from
    where the sorted values change, each group's first and last positions by segment
    reductions, then back to the input's order."""
    n = x.shape[0]
    order = reduction.argsort(x, stable=True)
    sorted_x = indexing.take(x, order, axis=0)
    positions = creation.arange(n, dtype="int32")
    if method == "ordinal":
        ranks = unary.cast(positions + 1, get_default_dtype())
    else:
        starts = binary.not_equal(sorted_x[1:], sorted_x[:-1])
        group = view.concatenate(
            [creation.zeros((1,), dtype="int32"), reduction.cumsum(unary.cast(starts, "int32"))],
            0,
        )
        first = segment_min(positions, group, n)
        last = segment_max(positions, group, n)
        lo = indexing.take(first, group, axis=0) + 1
        hi = indexing.take(last, group, axis=0) + 1
        pick = {"min": lo, "max": hi, "dense": group + 1}
        if method == "average":
            ranks = (unary.cast(lo, get_default_dtype()) + unary.cast(hi, get_default_dtype())) / 2
        else:
            ranks = unary.cast(pick[method], get_default_dtype())
    inverse = reduction.argsort(order, stable=True)  # each element's place in the sort
    return indexing.take(ranks, inverse, axis=0)


def rankdata(a, method: str = "average", *, axis=None, nan_policy: str = "propagate"):
    """SciPy's and JAX's ``rankdata``: ranks from 1, ties by ``method``; floats, as JAX's.

    Args:
        a: the values.
        method: ``"average"``, ``"min"``, ``"max"``, ``"dense"`` or ``"ordinal"``.
        axis: the axis to rank along (None: the flattened values).
        nan_policy: ``"propagate"`` only.

    Returns:
        The ranks (``a``'s shape, or flattened with ``axis=None``).
    """
    if method not in _RANK_METHODS:
        raise OpError(f"rankdata: method must be one of {_RANK_METHODS}, got {method!r}")
    if nan_policy != "propagate":
        raise OpError("rankdata: nan_policy must be 'propagate'")
    x = as_tensor(a, op="rankdata")
    if axis is None:
        return _rank_1d(view.reshape(x, (-1,)), method)
    ax = norm_axis("rankdata", axis, x.ndim, x.shape)
    ranked = vmap(lambda row: _rank_1d(row, method))(
        view.reshape(view.moveaxis(x, ax, -1), (-1, x.shape[ax]))
    )
    return view.moveaxis(view.reshape(ranked, tuple(view.moveaxis(x, ax, -1).shape)), -1, ax)


class ModeResult(NamedTuple):
    """What :func:`mode` returns.

    Attributes:
        mode: the most common value (the smallest among equally common ones).
        count: how often it occurs.
    """

    mode: Tensor
    count: Tensor


def _mode_1d(x: Tensor):
    n = x.shape[0]
    sorted_x = reduction.sort(x, stable=True)
    starts = binary.not_equal(sorted_x[1:], sorted_x[:-1])
    group = view.concatenate(
        [creation.zeros((1,), dtype="int32"), reduction.cumsum(unary.cast(starts, "int32"))], 0
    )
    counts = segment_sum(creation.ones((n,), dtype="int32"), group, n)
    best = reduction.argmax(counts)  # (the first: the smallest value among the most common)
    first = segment_min(creation.arange(n, dtype="int32"), group, n)
    return indexing.take(sorted_x, indexing.take(first, best, axis=0), axis=0), counts[best]


def mode(a, axis=0, nan_policy: str = "propagate", keepdims: bool = False) -> ModeResult:
    """SciPy's and JAX's ``stats.mode``: the most common value along ``axis`` (the smallest
    of those equally common) and its count.

    Args:
        a: the values.
        axis: the axis (None: the flattened values).
        nan_policy: ``"propagate"`` only.
        keepdims: keep the reduced axis.

    Returns:
        :class:`ModeResult` ``(mode, count)``.
    """
    if nan_policy != "propagate":
        raise OpError("mode: nan_policy must be 'propagate'")
    x = as_tensor(a, op="mode")
    if axis is None:
        x, axis = view.reshape(x, (-1,)), 0
    ax = norm_axis("mode", axis, x.ndim, x.shape)
    if x.shape[ax] == 0:
        raise OpError(f"mode: axis {ax} of shape {tuple(x.shape)} is empty")
    moved = view.moveaxis(x, ax, -1)
    rows = view.reshape(moved, (-1, x.shape[ax]))
    values, counts = vmap(_mode_1d)(rows)
    shape = tuple(moved.shape[:-1])
    values, counts = view.reshape(values, shape), view.reshape(counts, shape)
    if keepdims:
        values, counts = view.unsqueeze(values, ax), view.unsqueeze(counts, ax)
    return ModeResult(values, counts)


# ----------------------------------------------------------------------------- KDE
class gaussian_kde:  # noqa: N801 - SciPy's and JAX's name
    """SciPy's and JAX's Gaussian kernel density estimate of ``(d, n)`` points (a 1-D
    dataset is one dim), optionally weighted.

    The kernel's covariance is the data's weighted covariance times the bandwidth factor
    squared: Scott's ``neff^(-1/(d+4))`` by default, Silverman's
    ``(neff (d+2) / 4)^(-1/(d+4))``, a number, or a function of the estimate
    (``neff = 1 / sum(w^2)``, the effective sample size).

    Args:
        dataset: the points ``(d, n)`` or ``(n,)``.
        bw_method: ``"scott"`` (default), ``"silverman"``, a number, or a callable.
        weights: ``(n,)`` weights (normalized to sum to 1).

    Attributes:
        dataset, weights, d, n, neff, factor, covariance, inv_cov.
    """

    def __init__(self, dataset, bw_method=None, weights=None):
        data = floats("gaussian_kde", dataset)[0]
        self.dataset = view.reshape(data, (1, -1)) if data.ndim == 1 else data
        if self.dataset.ndim != 2 or self.dataset.shape[1] < 2:
            raise OpError(
                f"gaussian_kde: dataset needs (d, n) points with n > 1, got {tuple(data.shape)}"
            )
        self.d, self.n = self.dataset.shape
        if weights is None:
            w = creation.full((self.n,), 1.0 / self.n, dtype=self.dataset.dtype)
        else:
            w = unary.cast(as_tensor(weights, op="gaussian_kde"), self.dataset.dtype)
            w = w / reduction.sum(w)
        self.weights = w
        self.neff = 1.0 / reduction.sum(w * w)
        self.set_bandwidth(bw_method)

    def set_bandwidth(self, bw_method=None) -> None:
        """Choose the bandwidth factor (as the constructor's ``bw_method``) and recompute
        the kernel's covariance.

        Args:
            bw_method: ``"scott"``, ``"silverman"``, a number, or a callable.
        """
        power = -1.0 / (self.d + 4)
        if bw_method is None or bw_method == "scott":
            self.factor = self.neff**power
        elif bw_method == "silverman":
            self.factor = (self.neff * (self.d + 2.0) / 4.0) ** power
        elif callable(bw_method):
            self.factor = as_tensor(bw_method(self), self.dataset.dtype, "gaussian_kde")
        elif isinstance(bw_method, str):
            raise OpError(
                f"gaussian_kde: bw_method must be 'scott', 'silverman', a number or a "
                f"callable, got {bw_method!r}"
            )
        else:
            self.factor = as_tensor(bw_method, self.dataset.dtype, "gaussian_kde")
        mean = reduction.sum(self.dataset * self.weights, 1, keepdims=True)
        centred = self.dataset - mean
        data_cov = matmul(centred * self.weights, view.swap_axes(centred, 0, 1))
        data_cov = data_cov / (1.0 - reduction.sum(self.weights * self.weights))
        self.covariance = data_cov * self.factor**2
        self.inv_cov = solve(self.covariance, creation.eye(self.d, dtype=self.dataset.dtype))

    def _points(self, points) -> Tensor:
        x = unary.cast(as_tensor(points, op="gaussian_kde"), self.dataset.dtype)
        if x.ndim <= 1:
            x = view.reshape(x, (self.d, -1))
        if x.ndim != 2 or x.shape[0] != self.d:
            raise OpError(f"gaussian_kde: points must be ({self.d}, m), got shape {tuple(x.shape)}")
        return x

    def logpdf(self, points) -> Tensor:
        """The log of the estimated density at ``points`` ``(d, m)`` (log-sum-exp over the
        kernels, so it stays finite far from the data).

        Args:
            points: ``(d, m)`` points (or ``(m,)`` for ``d = 1``).

        Returns:
            ``(m,)`` log densities.
        """
        x = self._points(points)
        diff = view.unsqueeze(x, 2) - view.unsqueeze(self.dataset, 1)  # (d, m, n)
        solved = matmul(self.inv_cov, view.reshape(diff, (self.d, -1)))
        mahal = reduction.sum(view.reshape(solved, tuple(diff.shape)) * diff, 0)  # (m, n)
        chol = cholesky(self.covariance)
        log_det = 2.0 * reduction.sum(unary.log(diagonal(chol)))
        log_norm = 0.5 * (self.d * _LOG_2PI + log_det)
        terms = -0.5 * mahal + unary.log(self.weights) - log_norm
        return reduction.logsumexp(terms, 1)

    def evaluate(self, points) -> Tensor:
        """The estimated density at ``points``.

        Args:
            points: ``(d, m)`` points (or ``(m,)`` for ``d = 1``).

        Returns:
            ``(m,)`` densities.
        """
        return unary.exp(self.logpdf(points))

    __call__ = pdf = evaluate

    def integrate_box_1d(self, low, high) -> Tensor:
        """The estimate's mass between ``low`` and ``high`` (one dim only).

        Args:
            low: the lower bound.
            high: the upper bound.

        Returns:
            A scalar.
        """
        if self.d != 1:
            raise OpError("gaussian_kde.integrate_box_1d: the estimate must be 1-D")
        sd = unary.sqrt(self.covariance[0, 0])
        data = self.dataset[0]
        lo, hi = floats("gaussian_kde", low, high)
        return reduction.sum(self.weights * (ndtr((hi - data) / sd) - ndtr((lo - data) / sd)))

    def resample(self, key, shape=()) -> Tensor:
        """Draws from the estimate: a data point by its weight, plus kernel noise.

        Args:
            key: a ``nb.random`` key.
            shape: the draws' shape (beyond the leading ``d``).

        Returns:
            ``(d, *shape)`` draws.
        """
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        k_pick, k_noise = random.split(key)
        picks = random.choice(k_pick, self.n, shape=shape, p=self.weights)
        centres = indexing.take(self.dataset, view.reshape(picks, (-1,)), axis=1)
        noise = random.normal(k_noise, (self.d, centres.shape[1]), dtype=self.dataset.dtype)
        draws = centres + matmul(cholesky(self.covariance), noise)
        return view.reshape(draws, (self.d, *shape))
