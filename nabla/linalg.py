"""``nb.linalg``: the names of NumPy's and JAX's ``linalg``.

``inv``, ``solve``, ``slogdet``, ``cholesky``, ``eigh``, ``svd``, ``qr`` and ``pinv`` are
ops run by LAPACK through NumPy on every backend (MAX has no kernels for them), with
derivatives of any order; the rest (``det``, ``eigvalsh``, ``svdvals``, ``lstsq``,
``matrix_rank``, ``matrix_power``, ``cond``, ...) are written with them and nabla's other
ops. There is no complex dtype, so no ``eig``/``eigvals`` (a real matrix's eigenvalues may
be complex).
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from .core.dtypes import DType, get_default_dtype, promote_types
from .ops import array_functions, binary, creation, reduction, unary, view
from .ops._util import as_tensor, norm_axis
from .ops.base import OpError
from .ops.linalg import (
    EighResult,
    QRResult,
    SlogdetResult,
    SVDResult,
    cholesky,
    det,
    eigh,
    eigvalsh,
    inv,
    matmul,
    norm,
    outer,
    pinv,
    qr,
    slogdet,
    solve,
    svd,
    tensordot,
)
from .runtime.tensor import Tensor

__all__ = [
    "norm",
    "inv",
    "solve",
    "det",
    "slogdet",
    "cholesky",
    "eigh",
    "eigvalsh",
    "svd",
    "svdvals",
    "qr",
    "pinv",
    "lstsq",
    "matrix_rank",
    "matrix_power",
    "matrix_norm",
    "vector_norm",
    "cond",
    "multi_dot",
    "cross",
    "trace",
    "diagonal",
    "matmul",
    "matrix_transpose",
    "outer",
    "tensordot",
    "tensorinv",
    "tensorsolve",
    "vecdot",
    "SVDResult",
    "QRResult",
    "EighResult",
    "SlogdetResult",
]


def matrix_transpose(x, /) -> Tensor:
    """Each matrix transposed: the last two dims swapped (the array API's
    ``linalg.matrix_transpose``)."""
    x = as_tensor(x, op="linalg.matrix_transpose")
    _matrices(x, "matrix_transpose")
    return view.swap_axes(x, -1, -2)


def _float(x, op: str) -> Tensor:
    x = as_tensor(x, op=f"linalg.{op}")
    return x if x.dtype.is_float else unary.cast(x, get_default_dtype())


def _matrices(x: Tensor, op: str) -> None:
    if x.ndim < 2:
        raise OpError(f"linalg.{op}: expects matrices (..., m, n), got shape {x.shape}")


def svdvals(x) -> Tensor:
    """The singular values of each matrix, descending (``svd(x, compute_uv=False)``).

    Args:
        x: ``(..., m, n)``.

    Returns:
        ``(..., min(m, n))``.
    """
    return svd(x, compute_uv=False)


def _eps(x: Tensor) -> float:
    return float(np.finfo(x.dtype.numpy).eps)


def lstsq(a, b, rcond=None, *, numpy_resid: bool = False) -> tuple:
    """The least-squares solution of ``a @ x = b`` (NumPy's and JAX's ``linalg.lstsq``),
    from ``a``'s singular values: those below ``rcond`` times the largest are taken as zero.

    Args:
        a: ``(m, n)``.
        b: ``(m,)`` or ``(m, k)``.
        rcond: the cutoff (default JAX's, ``eps * max(m, n)``; a negative one is ``eps``).
        numpy_resid: residuals as NumPy gives them: empty unless ``a`` has full column rank
            and ``m > n`` (needs ``a``'s value: not inside ``compile``); by default always the
            squared residual norms, as JAX's.

    Returns:
        ``(x, residuals, rank, s)``: ``x`` ``(n,)`` or ``(n, k)``, the squared norms of
        ``b - a @ x`` per column (``(1,)`` for a vector ``b``, or ``(k,)``, as NumPy's and
        JAX's), the rank (int32) and the singular values.

    Raises:
        ValueError: (:class:`nabla.OpError`) for an ``a`` that is not 2-D, a ``b`` not 1-D
            or 2-D, or different leading dims.
    """
    a, b = _float(a, "lstsq"), _float(b, "lstsq")
    if a.ndim != 2 or b.ndim not in (1, 2) or a.shape[0] != b.shape[0]:
        raise OpError(
            f"linalg.lstsq: a must be (m, n) and b (m,) or (m, k) with the same m, got a of "
            f"shape {a.shape} and b of shape {b.shape}"
        )
    if a.dtype is not b.dtype:
        dtype = promote_types(a.dtype, b.dtype)
        a, b = unary.cast(a, dtype), unary.cast(b, dtype)
    m, n = a.shape
    vector = b.ndim == 1
    b2 = view.unsqueeze(b, -1) if vector else b
    if rcond is None:
        rcond = _eps(a) * max(m, n)
    elif rcond < 0:
        rcond = _eps(a)
    u, s, vh = svd(a, full_matrices=False)
    keep = binary.logical_and(s > 0, s >= rcond * s[:1])
    rank = reduction.sum(unary.cast(keep, DType.int32))
    s_inv = binary.where(keep, 1.0 / binary.where(keep, s, 1.0), 0.0)
    x = matmul(matrix_transpose(vh), view.unsqueeze(s_inv, -1) * matmul(matrix_transpose(u), b2))
    miss = b2 - matmul(a, x)
    resid = reduction.sum(miss * miss, 0)
    if numpy_resid and (m <= n or int(rank.item()) < n):
        resid = creation.zeros((0,), dtype=a.dtype)
    return (view.squeeze(x, -1) if vector else x), resid, rank, s


def matrix_rank(M, rtol=None, *, tol=None) -> Tensor:  # noqa: N803 - NumPy's and JAX's name
    """The number of singular values of each matrix above the tolerance (NumPy's and JAX's
    ``linalg.matrix_rank``).

    Args:
        M: ``(..., m, n)`` (a vector: 1 unless all zeros).
        rtol: relative to the largest singular value (default ``max(m, n) * eps``).
        tol: an absolute tolerance instead (NumPy's older argument).

    Returns:
        An int32 tensor of ``M``'s leading shape.
    """
    x = _float(M, "matrix_rank")
    if x.ndim < 2:
        return unary.cast(reduction.any(x != 0), DType.int32)
    s = svdvals(x)
    if tol is None:
        if rtol is None:
            rtol = max(x.shape[-2:]) * _eps(x)
        tol = rtol * reduction.max(s, -1, keepdims=True)
    return reduction.sum(unary.cast(s > tol, DType.int32), -1)


def matrix_power(a, n: int) -> Tensor:
    """``a`` multiplied by itself ``n`` times (NumPy's and JAX's ``linalg.matrix_power``),
    by repeated squaring; ``n = 0`` gives identities and a negative ``n`` powers ``a``'s
    inverse.

    Args:
        a: ``(..., k, k)``.
        n: a Python int.

    Returns:
        A tensor like ``a``.

    Raises:
        TypeError: for an ``n`` that is not an int.
        ValueError: (:class:`nabla.OpError`) for matrices that are not square.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"linalg.matrix_power: n must be an int, got {n!r}")
    a = as_tensor(a, op="linalg.matrix_power")
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise OpError(f"linalg.matrix_power: expects square matrices (..., k, k), got {a.shape}")
    n = int(n)
    if n == 0:
        eye = creation.eye(a.shape[-1], dtype=a.dtype)
        return view.broadcast_to(eye, a.shape)
    if n < 0:
        a, n = inv(a), -n
    result, square = None, a
    while n:
        if n & 1:
            result = square if result is None else matmul(result, square)
        n >>= 1
        if n:
            square = matmul(square, square)
    return result


def tensorinv(a, ind: int = 2) -> Tensor:
    """The inverse of ``a`` read as a linear map from its last dims to its first ``ind``
    (NumPy's and JAX's ``linalg.tensorinv``): ``tensordot(tensorinv(a, ind), a, ind)`` is
    the identity on ``a.shape[ind:]``. Differentiable, as ``inv``.

    Args:
        a: a tensor whose first ``ind`` dims hold as many elements as the rest.
        ind: how many leading dims index the map's output (a positive int).

    Returns:
        A tensor of shape ``a.shape[ind:] + a.shape[:ind]``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for ``ind`` not positive, or dims that do not
            make a square matrix.
    """
    a = _float(a, "tensorinv")
    if isinstance(ind, bool) or not isinstance(ind, numbers.Integral) or ind <= 0:
        raise OpError(f"linalg.tensorinv: ind must be a positive int, got {ind!r}")
    rows, cols = a.shape[:ind], a.shape[ind:]
    if math.prod(rows) != math.prod(cols):
        raise OpError(
            f"linalg.tensorinv: a of shape {a.shape} is no square map with ind={ind}: "
            f"{rows} holds {math.prod(rows)} elements, {cols} {math.prod(cols)}"
        )
    n = math.prod(rows)
    return view.reshape(inv(view.reshape(a, (n, n))), cols + rows)


def tensorsolve(a, b, axes=None) -> Tensor:
    """``x`` with ``tensordot(a, x, x.ndim) == b`` (NumPy's and JAX's
    ``linalg.tensorsolve``): ``a``'s first ``b.ndim`` dims index the equations and the rest
    the unknowns, whose shape ``x`` takes. Differentiable, as ``solve``.

    Args:
        a: the coefficients, of shape ``b.shape + x.shape``.
        b: the right-hand side.
        axes: dims of ``a`` moved to the end (the unknowns') first, as NumPy's.

    Returns:
        A tensor of shape ``a.shape[b.ndim:]`` (after ``axes`` are moved).

    Raises:
        ValueError: (:class:`nabla.OpError`) when ``a``'s dims do not make a square system
            with ``b``'s.
    """
    a, b = _float(a, "tensorsolve"), _float(b, "tensorsolve")
    if axes is not None:  # the named dims go last, in their order
        moved = [norm_axis("linalg.tensorsolve", k, a.ndim, a.shape) for k in axes]
        a = view.permute(a, *[d for d in range(a.ndim) if d not in moved], *moved)
    if a.ndim < b.ndim or a.shape[: b.ndim] != b.shape:
        raise OpError(
            f"linalg.tensorsolve: a of shape {a.shape} does not start with b's shape {b.shape}"
        )
    unknowns = a.shape[b.ndim :]
    n = math.prod(unknowns)
    if math.prod(b.shape) != n:
        raise OpError(
            f"linalg.tensorsolve: a of shape {a.shape} and b of shape {b.shape} make "
            f"{math.prod(b.shape)} equations in {n} unknowns (they must be as many)"
        )
    dtype = promote_types(a.dtype, b.dtype)
    x = solve(view.reshape(a, (n, n)).cast(dtype), view.reshape(b, (n, 1)).cast(dtype))
    return view.reshape(x, unknowns)


def matrix_norm(x, /, *, keepdims: bool = False, ord="fro") -> Tensor:  # noqa: A002
    """The norm of each matrix over the last two dims (the array API's and JAX's
    ``linalg.matrix_norm``): :func:`norm` with ``axis=(-2, -1)``."""
    return norm(x, ord, (-2, -1), keepdims)


def vector_norm(x, /, *, axis=None, keepdims: bool = False, ord=2) -> Tensor:  # noqa: A002
    """The ``ord``-norm of the elements over ``axis`` (all of them by default) taken as one
    vector (the array API's and JAX's ``linalg.vector_norm``)."""
    x = _float(x, "vector_norm")
    if axis is None:
        out = norm(view.reshape(x, (-1,)), ord, 0)
        return view.reshape(out, (1,) * x.ndim) if keepdims else out
    if isinstance(axis, numbers.Integral):
        return norm(x, ord, axis, keepdims)
    axes = tuple(int(a) % x.ndim for a in axis)
    rest = [d for d in range(x.ndim) if d not in axes]
    flat = view.reshape(view.permute(x, (*rest, *axes)), tuple(x.shape[d] for d in rest) + (-1,))
    out = norm(flat, ord, -1)
    for d in sorted(axes) if keepdims else ():
        out = view.unsqueeze(out, d)
    return out


def cond(x, p=None) -> Tensor:
    """The condition number of each matrix (NumPy's and JAX's ``linalg.cond``): the ratio
    of the largest to the smallest singular value (``p`` None, 2; -2 the inverse), or
    ``norm(x, p) * norm(inv(x), p)`` for the other matrix norms (square ``x``).

    Args:
        x: ``(..., m, n)``.
        p: None, 2, -2, ``"fro"``, ``"nuc"``, 1, -1, ``inf`` or ``-inf``.

    Returns:
        A tensor of ``x``'s leading shape.
    """
    x = _float(x, "cond")
    _matrices(x, "cond")
    if p in (None, 2, -2):
        s = svdvals(x)
        ratio = s[..., 0] / s[..., -1]
        return 1.0 / ratio if p == -2 else ratio
    return norm(x, p, (-2, -1)) * norm(inv(x), p, (-2, -1))


def multi_dot(arrays) -> Tensor:
    """The product of a sequence of matrices (NumPy's and JAX's ``linalg.multi_dot``); the
    first may be a row vector and the last a column vector, given 1-D. Multiplied left to
    right (NumPy picks the cheapest order; the values agree up to rounding).

    Raises:
        ValueError: (:class:`nabla.OpError`) for fewer than two arrays.
    """
    arrays = list(arrays)
    if len(arrays) < 2:
        raise OpError(f"linalg.multi_dot: needs at least two arrays, got {len(arrays)}")
    return functools.reduce(matmul, arrays)


def cross(x1, x2, /, *, axis: int = -1) -> Tensor:
    """The cross product of 3-vectors along ``axis`` (the array API's and JAX's
    ``linalg.cross``; :func:`nabla.cross` also takes 2-vectors).

    Raises:
        ValueError: (:class:`nabla.OpError`) for vectors that are not of size 3.
    """
    a, b = as_tensor(x1, op="linalg.cross"), as_tensor(x2, op="linalg.cross")
    for t in (a, b):
        if t.ndim == 0 or t.shape[axis] != 3:
            raise OpError(
                f"linalg.cross: vectors of size 3 along axis {axis}, got shapes {a.shape} and "
                f"{b.shape}"
            )
    return array_functions.cross(a, b, axis=axis)


def diagonal(x, /, *, offset: int = 0) -> Tensor:
    """The diagonal of each matrix over the last two dims (the array API's
    ``linalg.diagonal``)."""
    x = as_tensor(x, op="linalg.diagonal")
    _matrices(x, "diagonal")
    return array_functions.diagonal(x, offset, -2, -1)


def trace(x, /, *, offset: int = 0, dtype=None) -> Tensor:
    """The sum of the diagonal of each matrix over the last two dims (the array API's and
    JAX's ``linalg.trace``)."""
    out = reduction.sum(diagonal(x, offset=offset), -1)
    return out if dtype is None else unary.cast(out, dtype)


def vecdot(x1, x2, /, *, axis: int = -1) -> Tensor:
    """The dot product of vectors along ``axis`` (the array API's ``linalg.vecdot``)."""
    return array_functions.vecdot(x1, x2, axis=axis)
