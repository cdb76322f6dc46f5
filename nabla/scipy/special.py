"""``nb.scipy.special``: JAX's ``jax.scipy.special`` functions (see
:mod:`nabla.ops.special` for their accuracy; the incomplete gamma and beta functions run on
the host in float64). Of the Bessel functions, ``i0``/``i0e``/``i1``/``i1e``; ``zeta``
(Hurwitz's) and ``polygamma``; not built: the other Bessel functions."""

from __future__ import annotations

from ..ops.reduction import logsoftmax as _logsoftmax
from ..ops.reduction import logsumexp
from ..ops.reduction import softmax as _softmax
from ..ops.special import (
    bernoulli,
    beta,
    betainc,
    betaln,
    boxcox,
    boxcox1p,
    comb,
    digamma,
    entr,
    erfc,
    erfcx,
    erfinv,
    exp1,
    expi,
    expit,
    expn,
    factorial,
    gamma,
    gammainc,
    gammaincc,
    gammaln,
    gammasgn,
    i0,
    i0e,
    i1,
    i1e,
    kl_div,
    log_ndtr,
    loggamma,
    logit,
    multigammaln,
    ndtr,
    ndtri,
    poch,
    polygamma,
    rel_entr,
    xlog1py,
    xlogy,
    zeta,
)
from ..ops.unary import erf

__all__ = [
    "bernoulli",
    "beta",
    "betainc",
    "betaln",
    "boxcox",
    "boxcox1p",
    "comb",
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfcx",
    "erfinv",
    "exp1",
    "expi",
    "expn",
    "expit",
    "factorial",
    "gamma",
    "gammainc",
    "gammaincc",
    "gammaln",
    "gammasgn",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "kl_div",
    "log_ndtr",
    "log_softmax",
    "loggamma",
    "logit",
    "logsumexp",
    "multigammaln",
    "ndtr",
    "ndtri",
    "poch",
    "polygamma",
    "rel_entr",
    "softmax",
    "xlog1py",
    "xlogy",
    "zeta",
]


def softmax(x, /, *, axis=None):
    """``exp(x) / sum(exp(x))`` over ``axis`` (JAX's ``scipy.special.softmax``: every
    element by default, unlike ``jax.nn.softmax``'s last axis)."""
    return _softmax(x, axis)


def log_softmax(x, /, *, axis=None):
    """``x - logsumexp(x)`` over ``axis`` (every element by default, as JAX's
    ``scipy.special.log_softmax``)."""
    return _logsoftmax(x, axis)
