"""``nb.scipy.optimize``: JAX's ``minimize`` with ``method="BFGS"``.

The iteration is one ``while_loop`` (so it compiles and runs without Python between
steps): the quasi-Newton direction ``-H g``, a backtracking line search to the Armijo
condition (at most ``line_search_maxiter`` halvings, itself a ``while_loop``), then the
BFGS update of the inverse Hessian, skipped when the step's curvature ``y.s`` is not
positive (the update would lose positive definiteness). Status codes are JAX's: 0
converged (``|g|_inf <= gtol``), 1 out of iterations, 3 the line search found no decrease.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..linalg import matmul
from ..ops import binary, creation, reduction, unary, view
from ..ops._util import as_tensor
from ..ops.base import OpError
from ..runtime.tensor import Tensor
from ..transforms.autodiff import value_and_grad
from ..transforms.control_flow import while_loop

__all__ = ["minimize", "OptimizeResults"]


class OptimizeResults(NamedTuple):
    """What :func:`minimize` returns (JAX's fields).

    Attributes:
        x: the final point.
        success: whether the gradient norm reached ``gtol``.
        status: 0 converged, 1 out of iterations, 3 the line search failed.
        fun: the objective at ``x``.
        jac: its gradient at ``x``.
        hess_inv: the final inverse-Hessian estimate.
        nfev: objective evaluations.
        njev: gradient evaluations.
        nit: iterations.
    """

    x: Tensor
    success: Tensor
    status: Tensor
    fun: Tensor
    jac: Tensor
    hess_inv: Tensor
    nfev: Tensor
    njev: Tensor
    nit: Tensor


def minimize(fun, x0, args=(), *, method: str, tol=None, options=None) -> OptimizeResults:
    """JAX's ``jax.scipy.optimize.minimize`` with ``method="BFGS"``: minimize
    ``fun(x, *args)`` (a scalar) from ``x0`` (1-D).

    Args:
        fun: the objective, differentiable in ``x``.
        x0: the starting point (1-D).
        args: extra arguments of ``fun``.
        method: ``"BFGS"``.
        tol: accepted (``options["gtol"]`` sets the gradient tolerance).
        options: ``maxiter`` (default ``200 * len(x0)``), ``gtol`` (1e-5), ``norm``
            (``inf`` only), ``line_search_maxiter`` (10).

    Returns:
        :class:`OptimizeResults`.

    Raises:
        ValueError: (:class:`nabla.OpError`) for another method or option, or an ``x0``
            that is not 1-D.
    """
    if str(method).lower() != "bfgs":
        raise OpError(f"minimize: method must be 'BFGS' (the one JAX has), got {method!r}")
    opts = dict(options or {})
    x = as_tensor(x0, op="minimize")
    if x.ndim != 1:
        raise OpError(f"minimize: x0 must be 1-D, got shape {tuple(x.shape)}")
    if not x.dtype.is_float:
        raise OpError(f"minimize: x0 must be floats, got {x.dtype.value}")
    n = x.shape[0]
    maxiter = int(opts.pop("maxiter", None) or 200 * n)
    gtol = float(opts.pop("gtol", 1e-5))
    ls_max = int(opts.pop("line_search_maxiter", 10))
    norm = opts.pop("norm", np.inf)
    if norm != np.inf or opts:
        raise OpError(f"minimize: unknown or unsupported options {sorted(opts) or ['norm']}")
    value_grad = value_and_grad(lambda v: fun(v, *args))
    dt = x.dtype

    def scalar(v, dtype=dt):
        return creation.full((), v, dtype=dtype)

    f0, g0 = value_grad(x)
    eye = creation.eye(n, dtype=dt)
    zero = scalar(0, "int32")
    state = (x, unary.cast(f0, dt), g0, eye, zero, scalar(1, "int32"), zero)

    def gnorm(g):
        return reduction.max(unary.abs(g)) if n else scalar(0.0)

    def keep_going(s):
        _, _, g, _, k, _, status = s
        return binary.logical_and(binary.logical_and(gnorm(g) > gtol, k < maxiter), status == 0)

    def step(s):
        x, f, g, h, k, nfev, _ = s
        p = unary.neg(view.reshape(matmul(h, view.reshape(g, (n, 1))), (n,)))
        slope = reduction.sum(g * p)

        def too_high(ls):
            alpha, fa, tries = ls
            return binary.logical_and(fa > f + 1e-4 * alpha * slope, tries < ls_max)

        def halve(ls):
            alpha, _, tries = ls
            a = alpha * 0.5
            return a, unary.cast(fun(x + a * p, *args), dt), tries + 1

        first = unary.cast(fun(x + p, *args), dt)
        alpha, fa, tries = while_loop(too_high, halve, (scalar(1.0), first, zero))
        failed = binary.logical_or(fa > f + 1e-4 * alpha * slope, unary.is_nan(fa))
        s_vec = alpha * p
        x_new = x + s_vec
        f_new, g_new = value_grad(x_new)
        y = g_new - g
        ys = reduction.sum(y * s_vec)
        rho = binary.where(ys > 0, 1.0 / binary.where(ys > 0, ys, 1.0), 0.0)
        left = eye - rho * view.reshape(s_vec, (n, 1)) * view.reshape(y, (1, n))
        h_new = matmul(matmul(left, h), view.swap_axes(left, 0, 1))
        h_new = h_new + rho * view.reshape(s_vec, (n, 1)) * view.reshape(s_vec, (1, n))
        h_new = binary.where(ys > 0, h_new, h)
        status = binary.where(failed, scalar(3, "int32"), zero)
        # a failed search keeps the point it started from
        return (
            binary.where(failed, x, x_new),
            binary.where(failed, f, unary.cast(f_new, dt)),
            binary.where(failed, g, g_new),
            binary.where(failed, h, h_new),
            k + 1,
            nfev + tries + 2,
            status,
        )

    x, f, g, h, k, nfev, status = while_loop(keep_going, step, state)
    converged = gnorm(g) <= gtol
    status = binary.where(converged, zero, binary.where(status == 3, status, scalar(1, "int32")))
    return OptimizeResults(x, converged, status, f, g, h, nfev, k + 1, k)
