"""``nb.scipy.stats``: the distributions of JAX's ``jax.scipy.stats`` that models use most,
each a namespace of functions (``nb.scipy.stats.norm.logpdf(x, loc, scale)``), with
``loc``/``scale`` as SciPy's. Outside a distribution's support a log density is ``-inf``.

The CDFs of ``gamma``, ``chi2``, ``beta``, ``t`` and ``poisson`` (and their ``sf``) use the
regularized incomplete gamma and beta functions (:func:`nabla.ops.special.gammainc`,
``betainc``: host ops in float64). Not built: ``dirichlet``, ``multinomial``, ``binom``,
``nbinom``, ``betabinom``."""

from __future__ import annotations

import math
from types import SimpleNamespace

from ..linalg import cholesky, solve
from ..ops import binary, reduction, unary, view
from ..ops.array_functions import diagonal
from ..ops.special import (
    betainc,
    betaln,
    expit,
    floats,
    gammainc,
    gammaincc,
    gammaln,
    log_ndtr,
    logit,
    ndtr,
    ndtri,
    xlog1py,
    xlogy,
)
from ..runtime.tensor import Tensor

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
]

_LOG_2PI = math.log(2.0 * math.pi)


def _standard(op, x, loc, scale):
    """``((x - loc) / scale, scale)`` in one float dtype."""
    x, loc, scale = floats(op, x, loc, scale)
    return (x - loc) / scale, scale


def _inf_outside(inside, value) -> Tensor:
    return binary.where(inside, value, -math.inf)


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
    return _inf_outside(inside, unary.neg(unary.log(scale)) + 0.0 * z)


def _uniform_pdf(x, loc=0, scale=1):
    """The uniform density."""
    return unary.exp(_uniform_logpdf(x, loc, scale))


def _uniform_cdf(x, loc=0, scale=1):
    """The uniform CDF."""
    return binary.clip(_standard("uniform.cdf", x, loc, scale)[0], 0.0, 1.0)


def _uniform_ppf(q, loc=0, scale=1):
    """The uniform quantile function (NaN outside ``[0, 1]``)."""
    q, loc, scale = floats("uniform.ppf", q, loc, scale)
    inside = binary.logical_and(q >= 0, q <= 1)
    return binary.where(inside, loc + q * scale, math.nan)


uniform = _dist(
    "uniform", logpdf=_uniform_logpdf, pdf=_uniform_pdf, cdf=_uniform_cdf, ppf=_uniform_ppf
)


def _expon_logpdf(x, loc=0, scale=1):
    """The exponential log density (rate ``1 / scale``)."""
    z, scale = _standard("expon.logpdf", x, loc, scale)
    return _inf_outside(z >= 0, unary.neg(z) - unary.log(scale))


def _expon_pdf(x, loc=0, scale=1):
    """The exponential density."""
    return unary.exp(_expon_logpdf(x, loc, scale))


def _expon_cdf(x, loc=0, scale=1):
    """The exponential CDF."""
    z, _ = _standard("expon.cdf", x, loc, scale)
    return binary.where(z > 0, unary.neg(unary.expm1(unary.neg(binary.maximum(z, 0.0)))), 0.0)


def _expon_ppf(q, loc=0, scale=1):
    """The exponential quantile function."""
    q, loc, scale = floats("expon.ppf", q, loc, scale)
    return loc - scale * unary.log1p(unary.neg(q))


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
    return _inf_outside(y >= 0, value)


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
    return _inf_outside(inside, value - unary.log(scale))


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
    return _inf_outside(valid, xlogy(js, mu) - gammaln(js + 1.0) - mu)


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
    return _inf_outside(valid, xlogy(js, p) + xlog1py(1.0 - js, unary.neg(p)))


def _bernoulli_pmf(k, p, loc=0):
    """The Bernoulli probability."""
    return unary.exp(_bernoulli_logpmf(k, p, loc))


def _bernoulli_cdf(k, p, loc=0):
    """The Bernoulli CDF."""
    k, p, loc = floats("bernoulli.cdf", k, p, loc)
    j = k - loc
    return binary.where(j < 0, 0.0, binary.where(j < 1, 1.0 - p, 1.0))


bernoulli = _dist("bernoulli", logpmf=_bernoulli_logpmf, pmf=_bernoulli_pmf, cdf=_bernoulli_cdf)
