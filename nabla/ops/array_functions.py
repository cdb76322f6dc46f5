"""NumPy's and JAX's array functions composed of the families' ops (``jnp.ravel``,
``jnp.diff``, ``jnp.kron``, ...): no op of their own, so each differentiates, batches under
``vmap``, shards and compiles as the ops it is made of. They reach the families through
``fn``, as the families reach each other."""

from __future__ import annotations

import builtins
import math
import numbers

import numpy as np

from ..core.dtypes import DType, get_default_dtype, promote_types, to_dtype
from ..runtime.tensor import Tensor
from ._util import as_tensor, jnp_dtype_slot, norm_axes, norm_axis, readable_now
from .base import OpError
from .functions import fn

__all__ = [
    "segment_sum",
    "segment_prod",
    "segment_max",
    "segment_min",
    "gradient",
    "polyfit",
    "float_power",
    "unwrap",
    "piecewise",
    "cdist",
    "bucketize",
    "diag_embed",
    "cartesian_prod",
    "combinations",
    "logcumsumexp",
    "take_along_dim",
    "tensor_split",
    "var_mean",
    "std_mean",
    "union1d",
    "intersect1d",
    "setdiff1d",
    "setxor1d",
    "nanquantile",
    "nanpercentile",
    "nanmedian",
    "nanprod",
    "cov",
    "corrcoef",
    "real",
    "imag",
    "conj",
    "conjugate",
    "asinh",
    "acosh",
    "ravel",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "fliplr",
    "flipud",
    "rot90",
    "diagonal",
    "count_nonzero",
    "diff",
    "vdot",
    "inner",
    "kron",
    "cross",
    "array_split",
    "searchsorted",
    "digitize",
    "bincount",
    "nansum",
    "nanmean",
    "nanmax",
    "nanmin",
    "nanvar",
    "nanstd",
    "ptp",
    "quantile",
    "percentile",
    "median",
    "average",
    "cbrt",
    "column_stack",
    "dstack",
    "array_equal",
    "array_equiv",
    "signbit",
    "copysign",
    "deg2rad",
    "rad2deg",
    "sinc",
    "heaviside",
    "exp2",
    "logaddexp2",
    "fmax",
    "fmin",
    "isin",
    "select",
    "trapezoid",
    "polyval",
    "unravel_index",
    "ravel_multi_index",
    "ndim",
    "shape",
    "size",
    "broadcast_shapes",
    "broadcast_arrays",
    "rint",
    "divmod",
    "modf",
    "logspace",
    "geomspace",
    "append",
    "hsplit",
    "vsplit",
    "dsplit",
    "nanargmax",
    "nanargmin",
    "cumulative_sum",
    "cumulative_prod",
    "nancumsum",
    "nancumprod",
    "diagflat",
    "diag_indices",
    "diag_indices_from",
    "tril_indices_from",
    "triu_indices_from",
    "vecdot",
    "rollaxis",
    "unstack",
    "ediff1d",
    "vander",
    "flatnonzero",
    "interp",
    "indices",
    "ix_",
    "copy",
    "unique",
    "histogram",
    "histogram_bin_edges",
    "convolve",
    "correlate",
    "delete",
    "insert",
    "block",
    "partition",
    "argpartition",
    "lexsort",
    "choose",
    "compress",
    "extract",
    "matvec",
    "vecmat",
    "resize",
    "trim_zeros",
    "put",
    "fill_diagonal",
    "mgrid",
    "ogrid",
]


def ravel(a, order: str = "C") -> Tensor:
    """``a`` flattened to one dim (NumPy's and JAX's ``ravel``).

    Args:
        a: a tensor, or a Python scalar, nested list or NumPy array.
        order: ``"C"`` (the last index varies fastest), ``"F"`` (the first) or ``"A"``
            (``"C"`` here: a tensor has no memory order).

    Returns:
        A 1-D tensor of ``a``'s elements.
    """
    return fn.reshape(as_tensor(a, op="ravel"), (-1,), order=order)


def _at_least(op: str, arys, shape_of):
    out = []
    for a in arys:
        t = as_tensor(a, op=op)
        want = shape_of(tuple(t.shape))
        out.append(t if want == tuple(t.shape) else fn.reshape(t, want))
    return out[0] if len(out) == 1 else out


def atleast_1d(*arys):
    """Each argument with at least one dim (a 0-d one becomes shape ``(1,)``), as NumPy's
    and JAX's ``atleast_1d``.

    Args:
        *arys: tensors, or Python scalars, nested lists or NumPy arrays.

    Returns:
        A tensor for one argument, else a list of them.
    """
    return _at_least("atleast_1d", arys, lambda s: s if s else (1,))


def atleast_2d(*arys):
    """Each argument with at least two dims: 0-d becomes ``(1, 1)``, ``(n,)`` becomes
    ``(1, n)`` (NumPy's and JAX's ``atleast_2d``).

    Args:
        *arys: tensors, or Python scalars, nested lists or NumPy arrays.

    Returns:
        A tensor for one argument, else a list of them.
    """
    return _at_least("atleast_2d", arys, lambda s: s if len(s) >= 2 else (1,) * (2 - len(s)) + s)


def atleast_3d(*arys):
    """Each argument with at least three dims: 0-d becomes ``(1, 1, 1)``, ``(n,)`` becomes
    ``(1, n, 1)``, ``(m, n)`` becomes ``(m, n, 1)`` (NumPy's and JAX's ``atleast_3d``).

    Args:
        *arys: tensors, or Python scalars, nested lists or NumPy arrays.

    Returns:
        A tensor for one argument, else a list of them.
    """

    def shape(s):
        if len(s) >= 3:
            return s
        return {0: (1, 1, 1), 1: (1, *s, 1), 2: (*s, 1)}[len(s)]

    return _at_least("atleast_3d", arys, shape)


def fliplr(m) -> Tensor:
    """``m`` with its second dim reversed (NumPy's and JAX's ``fliplr``).

    Args:
        m: a tensor of at least two dims.

    Returns:
        A tensor like ``m``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for fewer than two dims.
    """
    m = as_tensor(m, op="fliplr")
    if m.ndim < 2:
        raise OpError(f"fliplr: needs at least 2 dims, got shape {m.shape}")
    return fn.flip(m, 1)


def flipud(m) -> Tensor:
    """``m`` with its first dim reversed (NumPy's and JAX's ``flipud``).

    Args:
        m: a tensor of at least one dim.

    Returns:
        A tensor like ``m``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a 0-d ``m``.
    """
    m = as_tensor(m, op="flipud")
    if m.ndim < 1:
        raise OpError("flipud: needs at least 1 dim, got a 0-d tensor")
    return fn.flip(m, 0)


def rot90(m, k: int = 1, axes=(0, 1)) -> Tensor:
    """``m`` rotated by 90 degrees ``k`` times in the plane of ``axes``, from the first
    axis toward the second (NumPy's and JAX's ``rot90``).

    Args:
        m: a tensor of at least two dims.
        k: the number of quarter turns (negative turns the other way).
        axes: the two dims of the plane.

    Returns:
        A tensor with those two dims' sizes swapped for an odd ``k``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for ``axes`` that are not two different dims.
    """
    m = as_tensor(m, op="rot90")
    if len(axes) != 2:
        raise OpError(f"rot90: axes must be two dims, got {axes!r}")
    a0, a1 = (norm_axis("rot90", a, m.ndim, m.shape) for a in axes)
    if a0 == a1:
        raise OpError(f"rot90: axes must be two different dims, got {axes!r}")
    k = int(k) % 4
    if k == 0:
        return m
    if k == 2:
        return fn.flip(fn.flip(m, a0), a1)
    perm = list(range(m.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return fn.permute(fn.flip(m, a1), perm)
    return fn.flip(fn.permute(m, perm), a1)


def diagonal(a, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """The diagonal of ``a`` in the plane of ``axis1`` and ``axis2``, shifted by
    ``offset`` (above the main one for a positive offset), as a new last dim (NumPy's and
    JAX's ``diagonal``).

    Args:
        a: a tensor of at least two dims.
        offset: the diagonal's offset from the main one.
        axis1: the dim of the rows.
        axis2: the dim of the columns.

    Returns:
        A tensor of ``a``'s other dims followed by the diagonal.

    Raises:
        ValueError: (:class:`nabla.OpError`) for fewer than two dims or equal axes.
    """
    a = as_tensor(a, op="diagonal")
    if a.ndim < 2:
        raise OpError(f"diagonal: needs at least 2 dims, got shape {a.shape}")
    i, j = (norm_axis("diagonal", v, a.ndim, a.shape) for v in (axis1, axis2))
    if i == j:
        raise OpError(f"diagonal: axis1 and axis2 must differ, got {axis1} and {axis2}")
    rest = [d for d in range(a.ndim) if d not in (i, j)]
    x = fn.permute(a, rest + [i, j])
    rows, cols = x.shape[-2], x.shape[-1]
    offset = int(offset)
    lead = (slice(None),) * len(rest)
    if offset >= 0:
        n = max(0, min(rows, cols - offset))
        x = x[(*lead, slice(0, n), slice(offset, offset + n))]
    else:
        n = max(0, min(rows + offset, cols))
        x = x[(*lead, slice(-offset, -offset + n), slice(0, n))]
    return fn.einsum("...ii->...i", x)


def count_nonzero(a, axis=None, keepdims: bool = False) -> Tensor:
    """How many elements of ``a`` are nonzero over ``axis`` (NumPy's and JAX's
    ``count_nonzero``), as int32.

    Args:
        a: a tensor, or a Python scalar, nested list or NumPy array.
        axis: an int, a tuple of ints, or None for every dim.
        keepdims: keep the counted dims as size 1.

    Returns:
        An int32 tensor.
    """
    a = as_tensor(a, op="count_nonzero")
    return fn.sum(fn.cast(a != 0, DType.int32), axis, keepdims)  # (int32's sum stays int32)


def _along(x, axis: int, start, stop):
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, stop)
    return x[tuple(index)]


def diff(a, n: int = 1, axis: int = -1, prepend=None, append=None) -> Tensor:
    """The ``n``-th difference along ``axis``: ``a[1:] - a[:-1]``, ``n`` times (NumPy's and
    JAX's ``diff``; for bools, ``!=``).

    Args:
        a: a tensor of at least one dim.
        n: how many times to take the difference (0 returns ``a``).
        axis: the dim along which to take it.
        prepend: values put before ``a`` along ``axis`` first (a scalar is broadcast).
        append: values put after it.

    Returns:
        A tensor with ``axis`` shorter by ``n`` (after prepend/append).

    Raises:
        ValueError: (:class:`nabla.OpError`) for a 0-d ``a`` or a negative ``n``.
    """
    a = as_tensor(a, op="diff")
    if a.ndim == 0:
        raise OpError("diff: needs at least 1 dim, got a 0-d tensor")
    if not isinstance(n, numbers.Integral) or n < 0:
        raise OpError(f"diff: n must be a non-negative int, got {n!r}")
    axis = norm_axis("diff", axis, a.ndim, a.shape)
    parts = []
    for extra, where in ((prepend, "before"), (None, None), (append, "after")):
        if where is None:
            parts.append(a)
        elif extra is not None:
            e = as_tensor(extra, a.dtype if isinstance(extra, numbers.Number) else None, "diff")
            if e.ndim == 0:
                shape = list(a.shape)
                shape[axis] = 1
                e = fn.broadcast_to(e, tuple(shape))
            parts.append(e)
    x = parts[0] if len(parts) == 1 else fn.concatenate(parts, axis)
    for _ in range(int(n)):
        hi, lo = _along(x, axis, 1, None), _along(x, axis, None, -1)
        x = (hi != lo) if x.dtype.is_bool else hi - lo
    return x


def _float_of(x: Tensor) -> Tensor:
    return x if x.dtype.is_float else fn.cast(x, get_default_dtype())


def gradient(f, *varargs, axis=None, edge_order: int = 1):
    """NumPy's and JAX's ``gradient``: second-order central differences inside,
    ``edge_order`` (1 or 2) one-sided ones at both ends, along each axis asked.

    Args:
        f: the sampled values (at least 2 per axis taken).
        *varargs: the spacing: none (1), one scalar for every axis, one per axis, or per
            axis the 1-D coordinates of the samples (nonuniform spacing, NumPy's formulas).
        axis: an int, a tuple of ints, or None (every axis).
        edge_order: 1 (default) or 2.

    Returns:
        One tensor for one axis, else a list, one per axis.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a bad spacing, edge_order, or too few
            samples.
    """
    x = _float_of(as_tensor(f, op="gradient"))
    axes = tuple(range(x.ndim)) if axis is None else norm_axes("gradient", axis, x.ndim, x.shape)
    if isinstance(axes, int):
        axes = (axes,)
    if edge_order not in (1, 2):
        raise OpError(f"gradient: edge_order must be 1 or 2, got {edge_order!r}")
    if len(varargs) == 0:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1 and _ndim(varargs[0]) == 0:
        spacings = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise OpError(
            f"gradient: give no spacing, one, or one per axis ({len(axes)}), got {len(varargs)}"
        )
    out = []
    for ax, h in zip(axes, spacings):
        n = x.shape[ax]
        if n < edge_order + 1:
            raise OpError(
                f"gradient: axis {ax} of shape {x.shape} needs at least {edge_order + 1} samples"
            )
        out.append(_gradient_1d(x, ax, h, edge_order))
    return out[0] if len(out) == 1 else out


def _ndim(v) -> int:
    return v.ndim if isinstance(v, Tensor) else np.ndim(v)


def _gradient_1d(x: Tensor, ax: int, h, edge_order: int) -> Tensor:
    def at(i, j=None):
        return _along(x, ax, i, j)

    def shaped(v):  # a 1-D factor along ``ax``
        shape = [1] * x.ndim
        shape[ax] = -1
        return fn.reshape(v, tuple(shape))

    n = x.shape[ax]
    if _ndim(h) == 0:
        h = h if isinstance(h, Tensor) else float(h)
        inner = (at(2, None) - at(None, -2)) / (2.0 * h)
        if edge_order == 1:
            first = (at(1, 2) - at(0, 1)) / h
            last = (at(n - 1, n) - at(n - 2, n - 1)) / h
        else:
            first = (-1.5 * at(0, 1) + 2.0 * at(1, 2) - 0.5 * at(2, 3)) / h
            last = (0.5 * at(n - 3, n - 2) - 2.0 * at(n - 2, n - 1) + 1.5 * at(n - 1, n)) / h
        return fn.concatenate([first, inner, last], ax)
    c = fn.cast(as_tensor(h, op="gradient"), x.dtype)
    if c.shape != (n,):
        raise OpError(f"gradient: coordinates of axis {ax} must be ({n},), got {c.shape}")
    d = shaped(diff(c))  # the steps, laid along ``ax``; NumPy's nonuniform formulas
    h1, h2 = _along(d, ax, None, -1), _along(d, ax, 1, None)
    a, b, cc = -h2 / (h1 * (h1 + h2)), (h2 - h1) / (h1 * h2), h1 / (h2 * (h1 + h2))
    inner = a * at(None, -2) + b * at(1, -1) + cc * at(2, None)
    g0, g1 = _along(d, ax, 0, 1), _along(d, ax, 1, 2)
    e0, e1 = _along(d, ax, n - 3, n - 2), _along(d, ax, n - 2, n - 1)
    if edge_order == 1:
        first = (at(1, 2) - at(0, 1)) / g0
        last = (at(n - 1, n) - at(n - 2, n - 1)) / e1
    else:
        first = (
            -(2.0 * g0 + g1) / (g0 * (g0 + g1)) * at(0, 1)
            + (g0 + g1) / (g0 * g1) * at(1, 2)
            - g0 / (g1 * (g0 + g1)) * at(2, 3)
        )
        last = (
            e1 / (e0 * (e0 + e1)) * at(n - 3, n - 2)
            - (e1 + e0) / (e0 * e1) * at(n - 2, n - 1)
            + (2.0 * e1 + e0) / (e1 * (e0 + e1)) * at(n - 1, n)
        )
    return fn.concatenate([first, inner, last], ax)


def polyfit(x, y, deg: int, rcond=None, full: bool = False, w=None, cov: bool = False):
    """NumPy's and JAX's ``polyfit``: the least-squares polynomial of degree ``deg``,
    highest power first (by the pseudo-inverse of the scaled Vandermonde matrix).

    Args:
        x: the sample points ``(M,)``.
        y: the values ``(M,)`` or ``(M, K)`` (K fits at once).
        deg: the degree.
        rcond: the relative cutoff of small singular values (default ``M * eps``).
        full: must be False (the diagnostics are not returned).
        w: optional weights ``(M,)`` (applied to the residuals, NumPy's).
        cov: must be False.

    Returns:
        ``(deg + 1,)`` or ``(deg + 1, K)``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for ``full`` or ``cov``, a negative degree, or
            shapes that do not fit.
    """
    if full or cov:
        raise OpError("polyfit: full=True and cov=True are not supported (the fit only)")
    if not isinstance(deg, numbers.Integral) or deg < 0:
        raise OpError(f"polyfit: deg must be a non-negative int, got {deg!r}")
    xs, ys = (_float_of(as_tensor(v, op="polyfit")) for v in (x, y))
    if xs.ndim != 1 or ys.ndim not in (1, 2) or ys.shape[0] != xs.shape[0]:
        raise OpError(f"polyfit: x (M,) and y (M,) or (M, K) do not fit: {xs.shape}, {ys.shape}")
    powers = fn.stack([xs ** float(k) for k in range(int(deg), -1, -1)], 1)  # (M, deg+1)
    if w is not None:
        ws = fn.cast(as_tensor(w, op="polyfit"), xs.dtype)
        powers = powers * fn.unsqueeze(ws, 1)
        ys = ys * (ws if ys.ndim == 1 else fn.unsqueeze(ws, 1))
    # columns scaled to unit norm first, as NumPy's: the fit's conditioning
    scale = fn.sqrt(fn.sum(powers * powers, 0))
    scale = fn.where(scale == 0, 1.0, scale)
    cutoff = xs.shape[0] * float(np.finfo(xs.dtype.numpy).eps) if rcond is None else rcond
    coef = fn.matmul(fn.pinv(powers / scale, rtol=cutoff), ys)
    return coef / (scale if ys.ndim == 1 else fn.unsqueeze(scale, 1))


def float_power(x1, x2) -> Tensor:
    """NumPy's and JAX's ``float_power``: ``x1 ** x2`` in a float dtype, at least the
    default one (JAX's without 64-bit: float32; float64 inputs stay float64).

    Args:
        x1: the bases.
        x2: the exponents.

    Returns:
        The powers, broadcast.
    """
    a, b = as_tensor(x1, op="float_power"), as_tensor(x2, op="float_power")
    dt = promote_types(promote_types(a.dtype, b.dtype), get_default_dtype())
    if not dt.is_float:
        dt = get_default_dtype()
    return fn.pow(fn.cast(a, dt), fn.cast(b, dt))


def unwrap(p, discont=None, axis: int = -1, period: float = 2 * math.pi) -> Tensor:
    """NumPy's and JAX's ``unwrap``: jumps between neighbours larger than ``discont``
    (default ``period / 2``) replaced by their equivalent modulo ``period``.

    Args:
        p: the values (phases).
        discont: the largest jump left as it is (default ``period / 2``).
        axis: the axis along which to unwrap (default -1).
        period: the period (default ``2 pi``).

    Returns:
        A tensor like ``p``.
    """
    x = _float_of(as_tensor(p, op="unwrap"))
    ax = norm_axis("unwrap", axis, x.ndim, x.shape)
    half = period / 2.0
    discont = half if discont is None else max(float(discont), half)
    dd = diff(x, axis=ax)
    ddmod = fn.mod(dd + half, period) - half
    ddmod = fn.where((ddmod == -half) & (dd > 0), half, ddmod)
    correct = fn.where(fn.abs(dd) < discont, 0.0, ddmod - dd)
    zero = fn.zeros_like(_along(x, ax, 0, 1))
    return x + fn.concatenate([zero, fn.cumsum(correct, ax)], ax)


def piecewise(x, condlist, funclist, *args, **kw) -> Tensor:
    """NumPy's and JAX's ``piecewise``: ``funclist[i]`` (a function of ``x``, or a value)
    where ``condlist[i]`` holds (a later condition wins), and one more function or value,
    if given, where none does (else 0). Every function is evaluated on all of ``x``, so a
    function that is NaN outside its piece can still give NaN gradients there.

    Args:
        x: the input.
        condlist: boolean tensors (or one) of ``x``'s shape.
        funclist: functions ``f(x, *args, **kw)`` or values, one per condition (and one
            more for the rest).
        *args: passed to each function.
        **kw: passed to each function.

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for lists of lengths that do not fit.
    """
    x = as_tensor(x, op="piecewise")
    conds = condlist if isinstance(condlist, list | tuple) else [condlist]
    funcs = list(funclist)
    if len(funcs) not in (len(conds), len(conds) + 1):
        raise OpError(
            f"piecewise: {len(conds)} conditions need {len(conds)} or {len(conds) + 1} "
            f"functions, got {len(funcs)}"
        )

    def value(f):
        got = f(x, *args, **kw) if callable(f) else f
        return fn.cast(fn.broadcast_to(as_tensor(got, x.dtype, "piecewise"), x.shape), x.dtype)

    out = value(funcs[-1]) if len(funcs) > len(conds) else fn.zeros_like(x)
    for cond, f in zip(conds, funcs):
        out = fn.where(as_tensor(cond, op="piecewise"), value(f), out)
    return out


def vdot(a, b) -> Tensor:
    """The dot product of ``a`` and ``b`` flattened (NumPy's and JAX's ``vdot``; real
    dtypes, so no conjugate).

    Args:
        a: a tensor, or a Python scalar, nested list or NumPy array.
        b: one of the same size.

    Returns:
        A 0-d tensor.
    """
    return fn.dot(ravel(a), ravel(b))


def inner(a, b) -> Tensor:
    """The sum of products over the last dims of ``a`` and ``b`` (NumPy's and JAX's
    ``inner``): shape ``a.shape[:-1] + b.shape[:-1]``; a 0-d operand multiplies.

    Args:
        a: a tensor, or a Python scalar, nested list or NumPy array.
        b: one whose last dim matches ``a``'s.

    Returns:
        A tensor.
    """
    a, b = as_tensor(a, op="inner"), as_tensor(b, op="inner")
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return fn.tensordot(a, b, ([-1], [-1]))


def kron(a, b) -> Tensor:
    """The Kronecker product of ``a`` and ``b`` (NumPy's and JAX's ``kron``): blocks of
    ``b`` scaled by each element of ``a``; the shorter shape is padded with leading 1s.

    Args:
        a: a tensor, or a Python scalar, nested list or NumPy array.
        b: another.

    Returns:
        A tensor of shape ``a.shape * b.shape``, dim by dim.
    """
    a, b = as_tensor(a, op="kron"), as_tensor(b, op="kron")
    nd = max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + tuple(a.shape)
    sb = (1,) * (nd - b.ndim) + tuple(b.shape)
    ea = fn.reshape(a, tuple(v for d in sa for v in (d, 1)))
    eb = fn.reshape(b, tuple(v for d in sb for v in (1, d)))
    return fn.reshape(ea * eb, tuple(x * y for x, y in zip(sa, sb, strict=True)))


def cross(a, b, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis=None) -> Tensor:
    """The cross product of 3-vectors (or 2-vectors, whose missing third component is 0)
    along ``axisa`` of ``a`` and ``axisb`` of ``b`` (NumPy's and JAX's ``cross``). Two
    2-vectors give the scalar third component.

    Args:
        a: a tensor whose ``axisa`` has size 2 or 3.
        b: one whose ``axisb`` has size 2 or 3, the other dims broadcasting.
        axisa: the vectors' dim in ``a``.
        axisb: the vectors' dim in ``b``.
        axisc: where the result's vectors go.
        axis: when given, all three axes.

    Returns:
        A tensor of the broadcast dims with the vectors at ``axisc``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for vectors of another size.
    """
    a, b = as_tensor(a, op="cross"), as_tensor(b, op="cross")
    if axis is not None:
        axisa = axisb = axisc = axis
    a = fn.moveaxis(a, norm_axis("cross", axisa, a.ndim, a.shape), -1)
    b = fn.moveaxis(b, norm_axis("cross", axisb, b.ndim, b.shape), -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise OpError(
            f"cross: the vectors need 2 or 3 components, got {a.shape[-1]} and {b.shape[-1]} "
            f"(shapes {a.shape} and {b.shape})"
        )

    def part(v, i):
        return v[..., i] if i < v.shape[-1] else None

    a0, a1, a2 = (part(a, i) for i in range(3))
    b0, b1, b2 = (part(b, i) for i in range(3))
    z = a0 * b1 - a1 * b0
    if a2 is None and b2 is None:  # two 2-vectors: the third component alone
        return z
    if a2 is None:  # (a missing third component is 0)
        x, y = a1 * b2, -(a0 * b2)
    elif b2 is None:
        x, y = -(a2 * b1), a2 * b0
    else:
        x, y = a1 * b2 - a2 * b1, a2 * b0 - a0 * b2
    out = fn.stack([x, y, z], -1)
    return fn.moveaxis(out, -1, norm_axis("cross", axisc, out.ndim, out.shape))


def array_split(ary, indices_or_sections, axis: int = 0) -> list:
    """``ary`` split along ``axis`` (NumPy's and JAX's ``array_split``): into ``k`` parts
    for an int ``k`` (the first ``n % k`` one longer), or at the given indices.

    Args:
        ary: a tensor of at least one dim.
        indices_or_sections: an int count, or a sequence of split indices.
        axis: the dim to split.

    Returns:
        A list of tensors.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a count below 1.
    """
    x = as_tensor(ary, op="array_split")
    axis = norm_axis("array_split", axis, x.ndim, x.shape)
    n = x.shape[axis]
    if isinstance(indices_or_sections, numbers.Integral):
        k = int(indices_or_sections)
        if k < 1:
            raise OpError(f"array_split: the number of sections must be >= 1, got {k}")
        size, extra = builtins.divmod(n, k)  # (this module's divmod is NumPy's)
        bounds = np.cumsum([0] + [size + 1] * extra + [size] * (k - extra))
    else:
        cuts = [min(max(int(i) + (n if int(i) < 0 else 0), 0), n) for i in indices_or_sections]
        bounds = [0, *cuts, n]
    return [
        _along(x, axis, int(lo), max(int(lo), int(hi)))
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def searchsorted(a, v, side: str = "left", sorter=None, *, method: str = "scan") -> Tensor:
    """Where ``v``'s elements would go in the sorted 1-D ``a`` to keep it sorted (NumPy's
    and JAX's ``searchsorted``): the count of ``a``'s elements below each (``side="left"``)
    or not above it (``"right"``), as int32.

    Args:
        a: a sorted 1-D tensor (or any 1-D one with ``sorter``).
        v: the values to place, any shape.
        side: ``"left"`` or ``"right"``.
        sorter: indices that sort ``a`` (``argsort(a)``).
        method: JAX's choice of algorithm (``"scan"``, ``"scan_unrolled"``, ``"sort"`` or
            ``"compare_all"``), accepted: all give the same answer.

    Returns:
        An int32 tensor of ``v``'s shape.

    Raises:
        ValueError: (:class:`nabla.OpError`) for an ``a`` that is not 1-D or another side.
    """
    if method not in ("scan", "scan_unrolled", "sort", "compare_all"):
        raise OpError(
            f"searchsorted: method must be 'scan', 'scan_unrolled', 'sort' or 'compare_all', "
            f"got {method!r}"
        )
    a = as_tensor(a, op="searchsorted")
    if a.ndim != 1:
        raise OpError(f"searchsorted: a must be 1-D, got shape {a.shape}")
    if side not in ("left", "right"):
        raise OpError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    if sorter is not None:
        a = fn.take(a, sorter, axis=0)
    v = as_tensor(v, op="searchsorted")
    expanded = fn.reshape(v, (*v.shape, 1))
    before = (a < expanded) if side == "left" else (a <= expanded)
    if a.dtype.is_float or expanded.dtype.is_float:  # NaN sorts last, as NumPy's sort puts it
        nan = fn.is_nan(expanded)
        before = before | (nan & ~fn.is_nan(a)) if side == "left" else before | nan
    return fn.sum(fn.cast(before, DType.int32), -1)  # (int32's sum stays int32)


def digitize(x, bins, right: bool = False) -> Tensor:
    """The index of the bin each element of ``x`` falls in (NumPy's and JAX's
    ``digitize``): for increasing ``bins``, ``i`` with ``bins[i-1] <= x < bins[i]``
    (``right=True``: ``bins[i-1] < x <= bins[i]``); for decreasing ones, ``i`` with
    ``bins[i-1] > x >= bins[i]`` (``right=True``: ``bins[i-1] >= x > bins[i]``). NaN falls
    past the last bin. As int32.

    Args:
        x: the values, any shape.
        bins: a 1-D monotonic tensor of bin edges (which way is read from its ends, as
            JAX does: so under ``compile`` too).
        right: which side of an edge belongs to the bin below it.

    Returns:
        An int32 tensor of ``x``'s shape.
    """
    bins = as_tensor(bins, op="digitize")
    side = "left" if right else "right"
    rising = searchsorted(bins, x, side=side)
    if bins.ndim != 1 or bins.shape[0] < 2:
        return rising
    n = bins.shape[0]
    falling = fn.constant(np.int32(n)) - searchsorted(fn.flip(bins, 0), x, side=side)
    return fn.where(bins[n - 1] >= bins[0], rising, falling)


def bincount(x, weights=None, minlength: int = 0, *, length: int | None = None) -> Tensor:
    """How many times each value ``0 .. n - 1`` occurs in the integers ``x`` (or the sum
    of their ``weights``), NumPy's and JAX's ``bincount``; a negative value counts as 0, as
    in JAX (NumPy refuses it). ``n`` is ``length``
    when given (JAX's, needed under ``compile``/``vmap``, where ``x``'s largest value is
    not known; values at or past it are dropped), else ``max(x) + 1``, at least
    ``minlength``.

    Args:
        x: a 1-D integer tensor.
        weights: a tensor of ``x``'s shape whose entries are summed instead of counted.
        minlength: the least number of bins.
        length: the number of bins.

    Returns:
        A 1-D tensor: int32 counts, or the sums in ``weights``' dtype.

    Raises:
        ValueError: (:class:`nabla.OpError`) for an ``x`` that is not 1-D integers.
    """
    x = as_tensor(x, op="bincount")
    if x.ndim != 1 or not x.dtype.is_int or x.dtype.is_bool:
        raise OpError(f"bincount: x must be 1-D integers, got {x.dtype.value}{list(x.shape)}")
    if length is None:  # (negative values count as 0: at least one bin then)
        top = max(int(fn.max(x).item()), 0) + 1 if x.shape[0] else 0
        length = max(int(minlength), top)
    if not x.dtype.is_unsigned:
        x = fn.maximum(x, fn.zeros_like(x))
    hits = fn.reshape(x, (-1, 1)) == fn.arange(int(length), dtype=x.dtype)
    if weights is None:
        return fn.sum(fn.cast(hits, DType.int32), 0)
    w = as_tensor(weights, op="bincount")
    return fn.sum(fn.where(hits, fn.reshape(w, (-1, 1)), fn.zeros_like(w)[..., None]), 0)


def nansum(a, axis=None, keepdims: bool = False, *, dtype=None) -> Tensor:
    """The sum over ``axis`` with NaNs counted as 0 (NumPy's and JAX's ``nansum``).

    Args:
        a: a tensor, or a Python scalar, nested list or NumPy array.
        axis: an int, a tuple of ints, or None for every dim.
        keepdims: keep the reduced dims as size 1 (a dtype here is NumPy's and JAX's third
            argument, ``dtype``).
        dtype: the sum's dtype, as ``sum``'s.

    Returns:
        A tensor (``sum``'s dtype).
    """
    keepdims, dtype = jnp_dtype_slot("nansum", keepdims, dtype, "keepdims")
    a = as_tensor(a, op="nansum")
    if a.dtype.is_float:
        _, a = _not_nan(a)
    return fn.sum(a, axis, keepdims, dtype=dtype)


def _nan_result(op: str, a, dtype, compute):
    """``compute(a)`` with NumPy's and JAX's ``dtype``: a float one is cast to first and
    computed in, an integer one is the result's (computed in the default float)."""
    a = as_tensor(a, op=op)
    if dtype is None:
        return compute(a)
    if dtype.is_float:
        return compute(fn.cast(a, dtype))
    return fn.cast(compute(a), dtype)


def _not_nan(a) -> tuple:
    """``(mask, values)``: where ``a`` is not NaN, and ``a`` with its NaNs as 0."""
    valid = fn.logical_not(fn.is_nan(a))
    return valid, fn.where(valid, a, fn.zeros_like(a))


def nanmean(a, axis=None, keepdims: bool = False, *, dtype=None) -> Tensor:
    """The mean over ``axis`` of the elements that are not NaN (NumPy's and JAX's
    ``nanmean``; NaN where all are).

    Args:
        a: a tensor, or a Python scalar, nested list or NumPy array.
        axis: an int, a tuple of ints, or None for every dim.
        keepdims: keep the reduced dims as size 1 (a dtype here is NumPy's and JAX's third
            argument, ``dtype``).
        dtype: a float dtype to compute in, or an integer one for the result.

    Returns:
        A float tensor (``dtype`` when given).
    """
    keepdims, dtype = jnp_dtype_slot("nanmean", keepdims, dtype, "keepdims")
    return _nan_result("nanmean", a, dtype, lambda t: _nanmean(t, axis, keepdims))


def _nanmean(a, axis, keepdims):
    if not a.dtype.is_float:
        return fn.mean(a, axis, keepdims)
    valid, values = _not_nan(a)
    return fn.sum(values, axis, keepdims) / fn.sum(fn.cast(valid, a.dtype), axis, keepdims)


def _nan_extreme(a, axis, keepdims, op: str, pick, fill: float):
    a = as_tensor(a, op=op)
    if not a.dtype.is_float:
        return pick(a, axis, keepdims)
    nan = fn.is_nan(a)
    out = pick(fn.where(nan, fn.full_like(a, fill), a), axis, keepdims)
    return fn.where(fn.all(nan, axis, keepdims), fn.full_like(out, np.nan), out)


def nanmax(a, axis=None, keepdims: bool = False) -> Tensor:
    """The maximum over ``axis`` ignoring NaNs (NumPy's and JAX's ``nanmax``; NaN where
    every element is).

    Args:
        a: a tensor, or a Python scalar, nested list or NumPy array.
        axis: an int, a tuple of ints, or None for every dim.
        keepdims: keep the reduced dims as size 1.

    Returns:
        A tensor of ``a``'s dtype.
    """
    return _nan_extreme(a, axis, keepdims, "nanmax", fn.max, -np.inf)


def nanmin(a, axis=None, keepdims: bool = False) -> Tensor:
    """The minimum over ``axis`` ignoring NaNs (NumPy's and JAX's ``nanmin``; NaN where
    every element is).

    Args:
        a: a tensor, or a Python scalar, nested list or NumPy array.
        axis: an int, a tuple of ints, or None for every dim.
        keepdims: keep the reduced dims as size 1.

    Returns:
        A tensor of ``a``'s dtype.
    """
    return _nan_extreme(a, axis, keepdims, "nanmin", fn.min, np.inf)


def nanvar(a, axis=None, ddof: int = 0, keepdims: bool = False, *, dtype=None) -> Tensor:
    """The variance over ``axis`` of the elements that are not NaN, divided by their count
    less ``ddof`` (NumPy's and JAX's ``nanvar``).

    Args:
        a: a float tensor, or a nested list or NumPy array.
        axis: an int, a tuple of ints, or None for every dim.
        ddof: subtracted from the count in the divisor (a dtype here is NumPy's and JAX's
            third argument, ``dtype``).
        keepdims: keep the reduced dims as size 1.
        dtype: a float dtype to compute in, or an integer one for the result.

    Returns:
        A float tensor (``dtype`` when given).
    """
    ddof, dtype = _dtype_in_ddof("nanvar", ddof, dtype)
    return _nan_result("nanvar", a, dtype, lambda t: _nanvar(t, axis, ddof, keepdims))


def _dtype_in_ddof(op: str, ddof, dtype):
    """NumPy's and JAX's third argument is ``dtype`` where ours is ``ddof``: a dtype
    there is taken as theirs (``ddof`` then 0), as ``jnp_dtype_slot`` does for flags."""
    if isinstance(ddof, numbers.Number) and not isinstance(ddof, bool):
        return ddof, None if dtype is None else to_dtype(dtype, op)
    ddof, dtype = jnp_dtype_slot(op, ddof, dtype, "ddof")
    return (0 if ddof is False else ddof), dtype


def _nanvar(a, axis, ddof, keepdims):
    if not a.dtype.is_float:
        return fn.var(a, axis, keepdims=keepdims, ddof=ddof)
    valid, values = _not_nan(a)  # (one mask for the mean, the squares and the count)
    count = fn.sum(fn.cast(valid, a.dtype), axis, True)
    centred = fn.where(valid, a - fn.sum(values, axis, True) / count, fn.zeros_like(a))
    squares = fn.sum(centred * centred, axis, keepdims)
    divisor = fn.reshape(count, tuple(squares.shape)) - ddof
    out = squares / divisor
    return fn.where(divisor > 0, out, fn.full_like(out, np.nan))  # (NaN past ddof, as NumPy)


def nanstd(a, axis=None, ddof: int = 0, keepdims: bool = False, *, dtype=None) -> Tensor:
    """The square root of :func:`nanvar` (NumPy's and JAX's ``nanstd``).

    Args:
        a: a float tensor, or a nested list or NumPy array.
        axis: an int, a tuple of ints, or None for every dim.
        ddof: subtracted from the count in the divisor (a dtype here is NumPy's and JAX's
            third argument, ``dtype``).
        keepdims: keep the reduced dims as size 1.
        dtype: a float dtype to compute in (an integer one is refused, as JAX does).

    Returns:
        A float tensor.

    Raises:
        TypeError: for an integer ``dtype``.
    """
    ddof, dtype = _dtype_in_ddof("nanstd", ddof, dtype)
    if dtype is not None and not dtype.is_float:
        raise TypeError(f"nanstd: dtype must be a float dtype, got {dtype.value}")
    return fn.sqrt(nanvar(a, axis, ddof, keepdims, dtype=dtype))


def ptp(a, axis=None, keepdims: bool = False) -> Tensor:
    """The range, maximum minus minimum, over ``axis`` (NumPy's and JAX's ``ptp``).

    Args:
        a: a tensor, or a Python scalar, nested list or NumPy array.
        axis: an int, a tuple of ints, or None for every dim.
        keepdims: keep the reduced dims as size 1.

    Returns:
        A tensor of ``a``'s dtype.
    """
    a = as_tensor(a, op="ptp")
    return fn.max(a, axis, keepdims) - fn.min(a, axis, keepdims)


_QUANTILE_METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


def quantile(a, q, axis=None, keepdims: bool = False, *, method: str = "linear") -> Tensor:
    """The ``q``-th quantiles of ``a`` over ``axis`` (NumPy's and JAX's ``quantile``): at
    ``q (n - 1)`` in the sorted values, between its ``floor`` and ``ceil`` as ``method``
    says; a NaN in the values gives NaN (:func:`nanquantile` skips them).

    Args:
        a: a tensor, or a nested list or NumPy array.
        q: a number in ``[0, 1]`` or a 1-D sequence of them (their quantiles stacked first).
        axis: an int, a tuple of ints (those dims taken as one), or None for all of them.
        keepdims: keep the reduced dims as size 1.
        method: ``"linear"`` (interpolated; the only one for a tensor ``q``), ``"lower"``,
            ``"higher"``, ``"nearest"`` (halves to even, as NumPy's) or ``"midpoint"``.

    Returns:
        A float tensor.

    Raises:
        ValueError: (:class:`nabla.OpError`) for another method or a ``q`` outside ``[0, 1]``.
    """
    return _quantile("quantile", a, q, axis, keepdims, method, skip_nan=False)


def nanquantile(a, q, axis=None, keepdims: bool = False, *, method: str = "linear") -> Tensor:
    """:func:`quantile` of the values that are not NaN (NumPy's and JAX's ``nanquantile``;
    NaN where a slice has none).

    Args:
        a: a tensor, or a nested list or NumPy array.
        q: a number in ``[0, 1]`` or a 1-D sequence of them.
        axis: an int, a tuple of ints, or None for all dims.
        keepdims: keep the reduced dims as size 1.
        method: as :func:`quantile`'s (numbers ``q`` only).

    Returns:
        A float tensor.
    """
    return _quantile("nanquantile", a, q, axis, keepdims, method, skip_nan=True)


def nanpercentile(a, q, axis=None, keepdims: bool = False, *, method: str = "linear") -> Tensor:
    """:func:`nanquantile` with ``q`` in percent (NumPy's and JAX's ``nanpercentile``).

    Args:
        a: a tensor, or a nested list or NumPy array.
        q: a number in ``[0, 100]`` or a 1-D sequence of them.
        axis: an int, a tuple of ints, or None for all dims.
        keepdims: keep the reduced dims as size 1.
        method: as :func:`quantile`'s.

    Returns:
        A float tensor.
    """
    qs = np.asarray(q, dtype=np.float64) / 100.0
    return nanquantile(a, qs, axis, keepdims, method=method)


def nanmedian(a, axis=None, keepdims: bool = False) -> Tensor:
    """The median of the values that are not NaN (NumPy's and JAX's ``nanmedian``).

    Args:
        a: a tensor, or a nested list or NumPy array.
        axis: an int, a tuple of ints, or None for all dims.
        keepdims: keep the reduced dims as size 1.

    Returns:
        A float tensor.
    """
    return nanquantile(a, 0.5, axis, keepdims)


def _quantile(op, a, q, axis, keepdims, method, skip_nan: bool) -> Tensor:
    if method not in _QUANTILE_METHODS:
        raise OpError(f"{op}: method must be one of {_QUANTILE_METHODS}, got {method!r}")
    a = as_tensor(a, op=op)
    if not a.dtype.is_float:
        a = fn.cast(a, DType.float32)
    if isinstance(q, Tensor):  # differentiable in q too (and batched, and traced), as JAX's
        if method != "linear" or skip_nan:
            raise OpError(f"{op}: a tensor q takes method='linear' with NaN propagated")
        return _quantile_at(a, q, axis, keepdims)
    qs = np.asarray(q, dtype=np.float64)
    if qs.ndim > 1 or np.any((qs < 0) | (qs > 1)):
        raise OpError(f"{op}: q must be a number or 1-D numbers in [0, 1], got {q!r}")
    x, ax, reduced = _quantile_axis(a, axis)
    n = x.shape[ax]
    s = fn.sort(x, axis=ax)  # (NaN last)
    missing = fn.is_nan(x)
    count = fn.sum(fn.cast(fn.logical_not(missing), a.dtype), ax, True) if skip_nan else None
    outs = []
    for v in np.atleast_1d(qs):
        if skip_nan:  # the position differs per slice: index tensors into the sorted values
            pos = count * float(v) - float(v)  # q (count - 1)
            lo, hi = fn.floor(pos), fn.ceil(pos)

            def at(i):
                idx = fn.cast(fn.clip(i, 0.0, float(max(n - 1, 0))), DType.int32)
                return fn.take_along_axis(s, idx, ax)

            val = _by_method(method, at(lo), at(hi), pos - lo, at(fn.round(pos)))
            val = fn.where(count > 0, val, fn.full_like(val, np.nan))
        else:
            pos = float(v) * (n - 1)
            lo, hi = math.floor(pos), math.ceil(pos)
            low, high = _along(s, ax, lo, lo + 1), _along(s, ax, hi, hi + 1)
            near = int(np.round(pos))
            val = _by_method(method, low, high, pos - lo, _along(s, ax, near, near + 1))
            nan = fn.any(missing, ax, True)
            val = fn.where(nan, fn.full_like(val, np.nan), val)
        val = fn.squeeze(val, ax)
        if keepdims:
            val = fn.reshape(val, tuple(1 if i in reduced else d for i, d in enumerate(a.shape)))
        outs.append(val)
    return outs[0] if qs.ndim == 0 else fn.stack(outs, 0)


def _by_method(method, low, high, frac, nearest):
    """The quantile between the sorted values ``low`` and ``high`` around its position
    (``frac`` past ``low``; ``nearest`` the value at the rounded position)."""
    if method == "lower":
        return low
    if method == "higher":
        return high
    if method == "nearest":
        return nearest
    if method == "midpoint":
        return (low + high) * 0.5
    if isinstance(frac, float) and frac == 0.0:
        return low
    return low + (high - low) * frac


def _quantile_axis(a, axis) -> tuple:
    """``(x, ax, reduced)``: ``a`` with the dims ``axis`` names as one dim ``ax`` (moved last
    and merged when several), and the dims of ``a`` reduced."""
    if axis is None:
        return ravel(a), 0, tuple(range(a.ndim))
    if isinstance(axis, tuple | list):  # the dims moved last and merged into one
        reduced = norm_axes("quantile", axis, a.ndim, a.shape)
        kept = [i for i in range(a.ndim) if i not in reduced]
        merged = math.prod(a.shape[i] for i in reduced)
        x = fn.reshape(fn.permute(a, (*kept, *reduced)), (*(a.shape[i] for i in kept), merged))
        return x, len(kept), reduced
    ax = norm_axis("quantile", axis, a.ndim, a.shape)
    return a, ax, (ax,)


def _quantile_at(a, q: Tensor, axis, keepdims: bool) -> Tensor:
    """``quantile`` at a tensor ``q``: the two sorted values around ``q (n - 1)`` taken by
    index tensors, weighted by its fraction, so the derivative in ``q`` is the slope between
    them times ``n - 1`` (the floor's is 0), as JAX's."""
    if q.ndim > 1 or not (q.dtype.is_float or q.dtype.is_int):
        raise OpError(f"quantile: q must be a number or 1-D numbers in [0, 1], got {q!r}")
    if readable_now(q):
        values = q.numpy()
        if np.any((values < 0) | (values > 1)):
            raise OpError(f"quantile: q must be a number or 1-D numbers in [0, 1], got {q!r}")
    x, ax, reduced = _quantile_axis(a, axis)
    n = x.shape[ax]
    s = fn.sort(x, axis=ax)
    pos = fn.cast(q, a.dtype) * float(n - 1)
    below = fn.floor(pos)
    lo = fn.cast(fn.clip(below, 0.0, float(n - 1)), DType.int32)
    hi = fn.cast(fn.clip(fn.ceil(pos), 0.0, float(n - 1)), DType.int32)
    low, high = fn.take(s, lo, axis=ax), fn.take(s, hi, axis=ax)  # q's dims at ax
    frac = fn.reshape(pos - below, tuple(q.shape) + (1,) * (x.ndim - ax - 1))
    val = low + (high - low) * frac
    nan = fn.any(fn.is_nan(x), ax, True)
    if q.ndim == 0:
        nan = fn.squeeze(nan, ax)
    val = fn.where(nan, fn.full_like(val, np.nan), val)
    if q.ndim:  # the quantiles stacked first, as NumPy's
        val = fn.moveaxis(val, ax, 0)
    if keepdims:
        rest = tuple(1 if i in reduced else d for i, d in enumerate(a.shape))
        val = fn.reshape(val, tuple(q.shape) + rest)
    return val


def percentile(a, q, axis=None, keepdims: bool = False, *, method: str = "linear") -> Tensor:
    """:func:`quantile` with ``q`` in percent (NumPy's and JAX's ``percentile``).

    Args:
        a: a tensor, or a nested list or NumPy array.
        q: a number in ``[0, 100]`` or a 1-D sequence of them.
        axis: an int, a tuple of ints, or None for all dims.
        keepdims: keep the reduced dims as size 1.
        method: as :func:`quantile`'s.

    Returns:
        A float tensor.
    """
    if isinstance(q, Tensor):  # (kept a tensor: differentiable in q)
        q = q if q.dtype.is_float else fn.cast(q, DType.float32)
        return quantile(a, q / 100.0, axis, keepdims, method=method)
    qs = np.asarray(q, dtype=np.float64) / 100.0
    return quantile(a, qs, axis, keepdims, method=method)


def median(a, axis=None, keepdims: bool = False) -> Tensor:
    """The median over ``axis`` (NumPy's and JAX's ``median``: the 0.5 quantile).

    Args:
        a: a tensor, or a nested list or NumPy array.
        axis: an int, a tuple of ints, or None for all dims.
        keepdims: keep the reduced dims as size 1.

    Returns:
        A float tensor.
    """
    return quantile(a, 0.5, axis, keepdims)


def average(a, axis=None, weights=None, returned: bool = False, keepdims: bool = False):
    """The weighted mean over ``axis`` (NumPy's and JAX's ``average``): ``sum(a * w) /
    sum(w)``, with ``weights`` of ``a``'s shape or 1-D along a single ``axis``; the plain
    mean without them.

    Args:
        a: a tensor, or a nested list or NumPy array.
        axis: an int, a tuple of ints, or None for every dim.
        weights: the weights, or None.
        returned: also return the sum of the weights (broadcast like the average).
        keepdims: keep the reduced dims as size 1.

    Returns:
        The average, or ``(average, sum of weights)`` with ``returned``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for 1-D weights without a single ``axis`` or
            of another length, or weights of another shape.
    """
    a = as_tensor(a, op="average")
    if not a.dtype.is_float:
        a = fn.cast(a, DType.float32)
    if weights is None:
        avg = fn.mean(a, axis, keepdims)
        if not returned:
            return avg
        count = (
            a.size
            if axis is None
            else math.prod(
                a.shape[norm_axis("average", d, a.ndim, a.shape)]
                for d in (axis if isinstance(axis, tuple) else (axis,))
            )
        )
        return avg, fn.full_like(avg, float(count))
    w = as_tensor(weights, op="average")
    if tuple(w.shape) != tuple(a.shape):
        if axis is None or isinstance(axis, tuple) or w.ndim != 1:
            raise OpError(
                f"average: weights of shape {w.shape} for a of shape {a.shape} must have a's "
                "shape, or be 1-D along a single axis"
            )
        ax = norm_axis("average", axis, a.ndim, a.shape)
        if w.shape[0] != a.shape[ax]:
            raise OpError(
                f"average: 1-D weights of length {w.shape[0]} along axis {ax} of a of shape "
                f"{a.shape}"
            )
        w = fn.reshape(w, tuple(a.shape[ax] if d == ax else 1 for d in range(a.ndim)))
    w = fn.cast(w, a.dtype) if w.dtype is not a.dtype else w
    # (the weights' sum over the averaged dims, without a copy of them per element of a:
    # 1-D weights hold size-1 dims everywhere else, which the division broadcasts)
    total = fn.sum(w, axis, keepdims)
    avg = fn.sum(a * w, axis, keepdims) / total
    if not returned:
        return avg
    return avg, fn.broadcast_to(total, tuple(avg.shape))


# ----------------------------------------------------------------------------- more of jnp
def cbrt(x) -> Tensor:
    """The real cube root (NumPy's and JAX's ``cbrt``): ``sign(x) * |x| ** (1/3)``, negative
    for negative ``x``; integers in the default float dtype.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.

    Returns:
        A float tensor.
    """
    x = _float(x, "cbrt")
    root = fn.abs(x) ** (1.0 / 3.0)
    return fn.where(signbit(x), fn.neg(root), root)  # (-0.0 stays -0.0)


def _float(x, op: str) -> Tensor:
    x = as_tensor(x, op=op)
    return x if x.dtype.is_float else fn.cast(x, get_default_dtype())


def _promoted(op: str, *values, floats: bool = False) -> list:
    """``values`` as tensors of their promoted dtype, by the binary ops' own rule (Python
    and NumPy numbers weak: ``fmax(int8 tensor, 2)`` stays int8); ``floats``: integers in
    the default float dtype."""
    ts, dtype = fn.promote_operands(op, list(values), broadcast=False)
    if floats and not dtype.is_float:
        ts = [fn.cast(t, get_default_dtype()) for t in ts]
    return ts


def column_stack(tup) -> Tensor:
    """1-D arrays as columns, 2-D ones as they are, joined along axis 1 (NumPy's and
    JAX's ``column_stack``).

    Args:
        tup: a sequence of tensors (1-D of one length, or 2-D of as many rows).

    Returns:
        A 2-D tensor.
    """
    cols = [as_tensor(t, op="column_stack") for t in tup]
    cols = [fn.reshape(t, (t.size, 1)) if t.ndim < 2 else t for t in cols]
    return fn.concatenate(cols, 1)


def dstack(tup) -> Tensor:
    """The arrays, each made at least 3-D, joined along axis 2 (NumPy's and JAX's
    ``dstack``).

    Args:
        tup: a sequence of tensors.

    Returns:
        A tensor of at least 3 dims.
    """
    return fn.concatenate([atleast_3d(t) for t in tup], 2)


def array_equal(a1, a2, equal_nan: bool = False) -> Tensor:
    """Whether two arrays have the same shape and elements (NumPy's and JAX's
    ``array_equal``); shapes that differ give False without comparing.

    Args:
        a1: a tensor, or a Python scalar, nested list or NumPy array.
        a2: the other.
        equal_nan: count NaNs in the same places as equal.

    Returns:
        A 0-d bool tensor.
    """
    a, b = as_tensor(a1, op="array_equal"), as_tensor(a2, op="array_equal")
    if tuple(a.shape) != tuple(b.shape):
        return as_tensor(False, op="array_equal")
    same = a == b
    if equal_nan and (a.dtype.is_float or b.dtype.is_float):
        same = fn.logical_or(same, fn.logical_and(fn.is_nan(a), fn.is_nan(b)))
    return fn.all(same)


def array_equiv(a1, a2) -> Tensor:
    """Whether two arrays are equal where they broadcast to one shape (NumPy's and JAX's
    ``array_equiv``); shapes that do not broadcast give False.

    Args:
        a1: a tensor, or a Python scalar, nested list or NumPy array.
        a2: the other.

    Returns:
        A 0-d bool tensor.
    """
    a, b = as_tensor(a1, op="array_equiv"), as_tensor(a2, op="array_equiv")
    try:
        np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except ValueError:
        return as_tensor(False, op="array_equiv")
    return fn.all(a == b)


def signbit(x) -> Tensor:
    """Whether the sign bit is set (NumPy's and JAX's ``signbit``): True for negative
    numbers and for -0.0.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.

    Returns:
        A bool tensor.
    """
    x = as_tensor(x, op="signbit")
    if not x.dtype.is_float:
        return x < 0
    # -0.0 compares equal to 0: its reciprocal is -inf
    zero = x == 0
    return fn.logical_or(x < 0, fn.logical_and(zero, 1.0 / fn.where(zero, x, 1.0) < 0))


def copysign(x1, x2) -> Tensor:
    """``|x1|`` with the sign of ``x2`` (NumPy's and JAX's ``copysign``; -0.0 counts as
    negative).

    Args:
        x1: the magnitudes.
        x2: the signs, broadcasting against ``x1``.

    Returns:
        A float tensor.
    """
    mag, sign = _promoted("copysign", x1, x2, floats=True)
    return fn.where(signbit(sign), fn.neg(fn.abs(mag)), fn.abs(mag))


def deg2rad(x) -> Tensor:
    """Degrees to radians (NumPy's and JAX's ``deg2rad``, ``radians``).

    Args:
        x: angles in degrees.

    Returns:
        A float tensor.
    """
    return _float(x, "deg2rad") * (math.pi / 180.0)


def rad2deg(x) -> Tensor:
    """Radians to degrees (NumPy's and JAX's ``rad2deg``, ``degrees``).

    Args:
        x: angles in radians.

    Returns:
        A float tensor.
    """
    return _float(x, "rad2deg") * (180.0 / math.pi)


def sinc(x) -> Tensor:
    """The normalized sinc, ``sin(pi x) / (pi x)`` and 1 at 0 (NumPy's and JAX's
    ``sinc``); the gradient at 0 is 0.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.

    Returns:
        A float tensor.
    """
    x = _float(x, "sinc")
    zero = x == 0
    px = fn.where(zero, 1.0, x) * math.pi  # (no 0 / 0 in the value or the gradient)
    # at 0 its Maclaurin series, 1 - (pi x)**2 / 6: value 1, slope 0 and the curvature
    # -pi**2 / 3 of the function (a constant 1 there had none)
    series = 1.0 - (x * math.pi) ** 2 / 6.0
    return fn.where(zero, series, fn.sin(px) / px)


def heaviside(x1, x2) -> Tensor:
    """The Heaviside step (NumPy's and JAX's ``heaviside``): 0 where ``x1 < 0``, 1 where
    ``x1 > 0``, ``x2`` where ``x1 == 0``.

    Args:
        x1: the input.
        x2: the value at 0, broadcasting against ``x1``.

    Returns:
        A float tensor of the promoted dtype (NaN where ``x1`` is NaN).
    """
    x1, x2 = _promoted("heaviside", x1, x2, floats=True)
    step = fn.where(x1 < 0, fn.zeros_like(x1), fn.where(x1 > 0, fn.ones_like(x1), x2))
    return fn.where(fn.is_nan(x1), x1, step)  # (NaN in, NaN out)


def exp2(x) -> Tensor:
    """``2 ** x`` (NumPy's and JAX's ``exp2``).

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.

    Returns:
        A float tensor.
    """
    return fn.exp(_float(x, "exp2") * math.log(2.0))


def logaddexp2(x1, x2) -> Tensor:
    """``log2(2 ** x1 + 2 ** x2)`` without overflow (NumPy's and JAX's ``logaddexp2``).

    Args:
        x1: a tensor, or a Python scalar, nested list or NumPy array.
        x2: broadcasting against ``x1``.

    Returns:
        A float tensor.
    """
    ln2 = math.log(2.0)
    a, b = _promoted("logaddexp2", x1, x2, floats=True)
    return fn.logaddexp(a * ln2, b * ln2) / ln2


def fmax(x1, x2) -> Tensor:
    """The elementwise maximum ignoring NaNs (NumPy's and JAX's ``fmax``): a NaN only where
    both are NaN.

    Args:
        x1: a tensor, or a Python scalar, nested list or NumPy array.
        x2: broadcasting against ``x1``.

    Returns:
        A tensor of the promoted dtype.
    """
    return _ignoring_nans("fmax", fn.maximum, x1, x2)


def fmin(x1, x2) -> Tensor:
    """The elementwise minimum ignoring NaNs (NumPy's and JAX's ``fmin``).

    Args:
        x1: a tensor, or a Python scalar, nested list or NumPy array.
        x2: broadcasting against ``x1``.

    Returns:
        A tensor of the promoted dtype.
    """
    return _ignoring_nans("fmin", fn.minimum, x1, x2)


def _ignoring_nans(op: str, pick, x1, x2) -> Tensor:
    """``pick(x1, x2)`` where neither is NaN, the other one where one is."""
    a, b = _promoted(op, x1, x2)
    return fn.where(fn.is_nan(b), a, fn.where(fn.is_nan(a), b, pick(a, b)))


def isin(element, test_elements, invert: bool = False) -> Tensor:
    """Whether each element of ``element`` is among ``test_elements`` (NumPy's and JAX's
    ``isin``), by comparing with every test value.

    Args:
        element: a tensor, or a Python scalar, nested list or NumPy array.
        test_elements: the values to look for (any shape: flattened).
        invert: give where it is not among them.

    Returns:
        A bool tensor of ``element``'s shape.
    """
    x = as_tensor(element, op="isin")
    tests = ravel(test_elements)
    hit = fn.any(fn.reshape(x, (*x.shape, 1)) == tests, -1)
    return fn.logical_not(hit) if invert else hit


def select(condlist, choicelist, default=0) -> Tensor:
    """The first choice whose condition holds, per element (NumPy's and JAX's ``select``);
    ``default`` where none does.

    Args:
        condlist: a sequence of bool tensors.
        choicelist: as many tensors, broadcasting with the conditions.
        default: the value where no condition holds.

    Returns:
        A tensor of the broadcast shape.

    Raises:
        ValueError: (:class:`nabla.OpError`) for lists of different lengths or none.
    """
    if len(condlist) != len(choicelist) or not condlist:
        raise OpError(
            f"select: condlist and choicelist must have the same non-zero length, got "
            f"{len(condlist)} and {len(choicelist)}"
        )
    out = default  # (a Python number stays weak: int8 choices stay int8, as NumPy's)
    for cond, choice in zip(reversed(condlist), reversed(choicelist), strict=True):
        out = fn.where(cond, choice, out)
    return as_tensor(out, op="select")


def trapezoid(y, x=None, dx: float = 1.0, axis: int = -1) -> Tensor:
    """The integral of ``y`` by the trapezoid rule along ``axis`` (NumPy's and JAX's
    ``trapezoid``), at sample points ``x`` or spacing ``dx``.

    Args:
        y: the values.
        x: optional sample points (1-D along ``axis``, or ``y``'s shape).
        dx: the spacing when ``x`` is None.
        axis: the axis to integrate along.

    Returns:
        A float tensor with ``axis`` removed.
    """
    y = _float(y, "trapezoid")
    ax = norm_axis("trapezoid", axis, y.ndim, y.shape)
    n = y.shape[ax]
    lo, hi = _along(y, ax, 0, n - 1), _along(y, ax, 1, n)
    if x is None:
        return fn.sum((lo + hi) * (0.5 * dx), ax)
    xs = _float(x, "trapezoid")
    if xs.ndim == 1 and y.ndim > 1:
        xs = fn.reshape(xs, tuple(n if i == ax else 1 for i in range(y.ndim)))
    d = diff(xs, axis=ax if xs.ndim > 1 else 0)
    return fn.sum((lo + hi) * d * 0.5, ax)


def polyval(p, x) -> Tensor:
    """The polynomial with coefficients ``p`` (highest degree first) at ``x`` (NumPy's and
    JAX's ``polyval``), by Horner's rule.

    Args:
        p: 1-D coefficients.
        x: where to evaluate.

    Returns:
        A tensor of ``x``'s shape.
    """
    p, x = _promoted("polyval", p, x)
    if p.shape[0] == 0:  # no coefficients: the zero polynomial
        return fn.zeros_like(x)
    out = fn.zeros_like(x * p[0])
    for i in range(p.shape[0]):
        out = out * x + p[i]
    return out


def unravel_index(indices, shape) -> tuple:
    """Flat indices as a tuple of coordinate arrays in ``shape`` (JAX's ``unravel_index``,
    C order): a negative index counts from the end and one out of range is clipped into it,
    as JAX's (NumPy raises).

    Args:
        indices: integer flat indices (any shape).
        shape: the array shape they index (an int for a 1-D one, as NumPy's).

    Returns:
        A tuple of ``len(shape)`` integer tensors of ``indices``' shape.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a ``shape`` with no element.
    """
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    total = math.prod(shape)
    if total == 0:
        raise OpError(f"unravel_index: shape {tuple(shape)} has no element to index")
    idx = as_tensor(indices, op="unravel_index")
    idx = fn.clip(fn.where(idx < 0, idx + total, idx), 0, total - 1)
    out, stride = [], total
    for d in shape:
        stride //= d
        out.append((idx // stride) % d)
    return tuple(out)


def ravel_multi_index(multi_index, dims, mode: str = "raise", order: str = "C") -> Tensor:
    """Coordinate arrays as flat indices into ``dims`` (NumPy's and JAX's
    ``ravel_multi_index``, C order).

    Args:
        multi_index: a sequence of ``len(dims)`` integer tensors.
        dims: the array shape.
        mode: ``"raise"`` (an index out of range is an error, checked when the values
            are known at the call: under ``compile`` or ``vmap``, use another mode),
            ``"wrap"`` (taken modulo its dim) or ``"clip"`` (clipped into it).
        order: ``"C"`` only.

    Returns:
        An integer tensor of the broadcast shape.

    Raises:
        ValueError: (:class:`nabla.OpError`) for an index out of range under ``"raise"``,
            another mode or order, or as many coordinates as dims.
    """
    if mode not in ("raise", "wrap", "clip") or order != "C":
        raise OpError(
            f"ravel_multi_index: mode must be 'raise', 'wrap' or 'clip' and order 'C', got "
            f"mode={mode!r}, order={order!r}"
        )
    coords, dims = [as_tensor(c, op="ravel_multi_index") for c in multi_index], tuple(dims)
    if len(coords) != len(dims):
        raise OpError(
            f"ravel_multi_index: {len(coords)} coordinate arrays for dims {dims} of rank "
            f"{len(dims)}"
        )
    out, stride = None, 1
    for k in range(len(dims) - 1, -1, -1):
        coord, d = coords[k], dims[k]
        if mode == "wrap":
            coord = coord % d
        elif mode == "clip":
            coord = fn.clip(coord, 0, d - 1)
        elif readable_now(coord):
            values = coord.numpy()
            if values.size and (values.min() < 0 or values.max() >= d):
                raise OpError(
                    f"ravel_multi_index: coordinate {k} holds {values.min()}..{values.max()}, "
                    f"out of range for dim {d} of {dims} (mode='wrap' or 'clip' folds them in)"
                )
        term = coord * stride
        out = term if out is None else out + term
        stride *= d
    return out


def ndim(a) -> int:
    """The number of dims of a tensor, array, nested list or scalar (NumPy's and JAX's
    ``ndim``).

    Args:
        a: anything array-like.

    Returns:
        A Python int.
    """
    return a.ndim if isinstance(a, Tensor) else int(np.ndim(a))


def shape(a) -> tuple:
    """The shape of a tensor, array, nested list or scalar (NumPy's and JAX's ``shape``).

    Args:
        a: anything array-like.

    Returns:
        A tuple of ints.
    """
    return tuple(a.shape) if isinstance(a, Tensor) else tuple(np.shape(a))


def size(a, axis=None) -> int:
    """The element count of a tensor, array, nested list or scalar, or the length of one
    ``axis`` (NumPy's and JAX's ``size``).

    Args:
        a: anything array-like.
        axis: an int or a tuple of them (the product of those lengths), or None for all
            the elements.

    Returns:
        A Python int.
    """
    dims = shape(a)
    if axis is None:
        return math.prod(dims)
    return math.prod(dims[i] for i in norm_axes("size", axis, len(dims), dims))


def broadcast_shapes(*shapes) -> tuple:
    """The shape ``shapes`` broadcast to (NumPy's and JAX's ``broadcast_shapes``).

    Args:
        *shapes: tuples of ints.

    Returns:
        A tuple of ints.

    Raises:
        ValueError: for shapes that do not broadcast, naming them.
    """
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        raise ValueError(f"broadcast_shapes: shapes {list(shapes)} do not broadcast") from None


def broadcast_arrays(*args) -> list:
    """The arrays broadcast to one shape (NumPy's and JAX's ``broadcast_arrays``).

    Args:
        *args: tensors, or Python scalars, nested lists or NumPy arrays.

    Returns:
        A list of tensors of the broadcast shape.
    """
    ts = [as_tensor(a, op="broadcast_arrays") for a in args]
    target = broadcast_shapes(*(t.shape for t in ts))
    return [t if tuple(t.shape) == target else fn.broadcast_to(t, target) for t in ts]


def rint(x) -> Tensor:
    """Round to the nearest integer, halves to even (NumPy's and JAX's ``rint``); integers
    come back in the default float dtype, as JAX's.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.

    Returns:
        A float tensor.
    """
    return fn.round(_float(x, "rint"))


# ----------------------------------------------------------------------------- more of jnp
def divmod(x1, x2) -> tuple:  # noqa: A001 - NumPy's and JAX's name
    """``(x1 // x2, x1 % x2)`` (NumPy's and JAX's ``divmod``: the floor quotient and the
    remainder with the divisor's sign).

    Args:
        x1: the dividend.
        x2: the divisor.

    Returns:
        A pair of tensors of the broadcast shape.
    """
    return fn.floor_div(x1, x2), fn.mod(x1, x2)


def modf(x) -> tuple:
    """The fractional and integral parts of ``x``, each with ``x``'s sign (NumPy's and
    JAX's ``modf``); an infinity's fractional part is a zero of its sign.

    Args:
        x: a float tensor.

    Returns:
        ``(fractional, integral)``.
    """
    x = _float(x, "modf")
    whole = fn.trunc(x)
    frac = fn.where(fn.is_inf(x), copysign(fn.zeros_like(x), x), x - whole)
    return frac, whole


def logspace(start, stop, num: int = 50, endpoint: bool = True, base=10.0, dtype=None, axis=0):
    """``base ** linspace(start, stop, num)`` (NumPy's and JAX's ``logspace``).

    Args:
        start: the first exponent (a number or tensor).
        stop: the last exponent (included when ``endpoint``).
        num: how many values.
        endpoint: include ``base ** stop``.
        base: the base.
        dtype: the result's dtype (the default float dtype by default).
        axis: where the values go when ``start``/``stop`` are tensors.

    Returns:
        A tensor of ``num`` values along ``axis``.
    """
    exps = fn.linspace(start, stop, num, endpoint=endpoint, axis=axis)
    out = fn.pow(fn.cast(fn.constant(base), exps.dtype), exps)
    return out if dtype is None else fn.cast(out, dtype)


def geomspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None, axis=0):
    """Values evenly spaced on a log scale from ``start`` to ``stop`` (NumPy's and JAX's
    ``geomspace``): ``start`` and ``stop`` are the values themselves, both of one sign.

    Args:
        start: the first value (non-zero).
        stop: the last value (included when ``endpoint``), of ``start``'s sign.
        num: how many values.
        endpoint: include ``stop``.
        dtype: the result's dtype (the default float dtype by default).
        axis: where the values go when ``start``/``stop`` are tensors.

    Returns:
        A tensor of ``num`` values along ``axis``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a zero bound or bounds of two signs,
            when their values are known at the call.
    """
    lo = fn.cast(as_tensor(start, op="geomspace"), get_default_dtype())
    hi = fn.cast(as_tensor(stop, op="geomspace"), get_default_dtype())
    bounds = fn.broadcast_shapes("geomspace", tuple(lo.shape), tuple(hi.shape))
    if readable_now(lo) and readable_now(hi):
        a, b = lo.numpy(), hi.numpy()
        if np.any(a == 0) or np.any(b == 0) or np.any(np.sign(a) != np.sign(b)):
            raise OpError(
                f"geomspace: start and stop must be non-zero and of one sign, got {a} and {b}"
            )
    lo, hi = fn.broadcast_to(lo, bounds), fn.broadcast_to(hi, bounds)
    sign = fn.sign(lo)
    exps = fn.linspace(fn.log(fn.abs(lo)), fn.log(fn.abs(hi)), num, endpoint=endpoint, axis=axis)
    out = fn.exp(exps) * fn.unsqueeze(sign, axis) if sign.ndim else fn.exp(exps) * sign
    # the ends exactly, as NumPy sets them
    n = out.shape[axis]
    if n:
        first = fn.unsqueeze(lo, axis) if lo.ndim else fn.reshape(lo, (1,))
        parts = [first, _along(out, axis, 1, n)]
        if endpoint and n > 1:
            last = fn.unsqueeze(hi, axis) if hi.ndim else fn.reshape(hi, (1,))
            parts = [first, _along(out, axis, 1, n - 1), last]
        out = fn.concatenate(parts, axis)
    return out if dtype is None else fn.cast(out, dtype)


def append(arr, values, axis=None) -> Tensor:
    """``values`` appended to ``arr`` (NumPy's and JAX's ``append``): both flattened when
    ``axis`` is None, else joined along ``axis`` (the shapes must agree elsewhere).

    Args:
        arr: a tensor.
        values: what to append.
        axis: the dim to join along, or None.

    Returns:
        A tensor.
    """
    a, v = _promoted("append", arr, values)
    if axis is None:
        return fn.concatenate([fn.reshape(a, (-1,)), fn.reshape(v, (-1,))], 0)
    return fn.concatenate([a, v], axis)


def _split_at(op: str, ary, indices_or_sections, axis: int, least: int = 1) -> list:
    """NumPy's ``split`` along ``axis`` of a tensor of at least ``least`` dims: equal
    sections (which must divide the dim) or cut points."""
    x = as_tensor(ary, op=op)
    if x.ndim < max(least, axis + 1):
        raise OpError(f"{op}: needs at least {max(least, axis + 1)} dims, got shape {x.shape}")
    if isinstance(indices_or_sections, numbers.Integral):
        n, k = x.shape[axis], int(indices_or_sections)
        if k <= 0 or n % k:
            raise OpError(f"{op}: {k} sections do not divide dim {axis} of shape {x.shape}")
    return array_split(x, indices_or_sections, axis=axis)


def hsplit(ary, indices_or_sections) -> list:
    """Split along the columns (NumPy's and JAX's ``hsplit``: dim 1, or dim 0 of a 1-D
    tensor) into equal sections or at cut points.

    Args:
        ary: a tensor.
        indices_or_sections: a number of equal sections, or the indices to cut at.

    Returns:
        A list of tensors.
    """
    x = as_tensor(ary, op="hsplit")
    return _split_at("hsplit", x, indices_or_sections, 1 if x.ndim > 1 else 0)


def vsplit(ary, indices_or_sections) -> list:
    """Split along the rows (NumPy's and JAX's ``vsplit``: dim 0 of a tensor of at least
    2 dims) into equal sections or at cut points.

    Args:
        ary: a tensor of at least 2 dims.
        indices_or_sections: a number of equal sections, or the indices to cut at.

    Returns:
        A list of tensors.
    """
    return _split_at("vsplit", ary, indices_or_sections, 0, least=2)


def dsplit(ary, indices_or_sections) -> list:
    """Split along the depth (NumPy's and JAX's ``dsplit``: dim 2 of a tensor of at least
    3 dims) into equal sections or at cut points.

    Args:
        ary: a tensor of at least 3 dims.
        indices_or_sections: a number of equal sections, or the indices to cut at.

    Returns:
        A list of tensors.
    """
    return _split_at("dsplit", ary, indices_or_sections, 2)


def _nan_arg(op: str, a, axis, keepdims, pick, fill):
    a = as_tensor(a, op=op)
    if axis is not None:
        axis = norm_axis(op, axis, a.ndim, a.shape)
    if not a.dtype.is_float:  # no NaN to skip
        return pick(a, axis=axis, keepdims=keepdims)
    nan = fn.is_nan(a)
    if readable_now(a):  # NumPy's and JAX's error for a slice of NaNs only
        everywhere = np.all(nan.numpy(), axis=axis) if a.size else np.zeros(())
        if np.any(everywhere):
            raise OpError(f"{op}: an all-NaN slice has no {op[3:]} (shape {a.shape})")
    clean = fn.where(nan, fn.full_like(a, fill), a)
    return pick(clean, axis=axis, keepdims=keepdims)


def nanargmax(a, axis=None, keepdims: bool = False) -> Tensor:
    """The index of the largest value, NaNs ignored (NumPy's and JAX's ``nanargmax``).

    Args:
        a: a tensor.
        axis: the dim to search (the flattened tensor when None).
        keepdims: keep ``axis`` as a dim of size 1.

    Returns:
        An integer tensor.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a slice of NaNs only (when the values
            are known at the call).
    """
    return _nan_arg("nanargmax", a, axis, keepdims, fn.argmax, -np.inf)


def nanargmin(a, axis=None, keepdims: bool = False) -> Tensor:
    """The index of the smallest value, NaNs ignored (NumPy's and JAX's ``nanargmin``).

    Args:
        a: a tensor.
        axis: the dim to search (the flattened tensor when None).
        keepdims: keep ``axis`` as a dim of size 1.

    Returns:
        An integer tensor.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a slice of NaNs only (when the values
            are known at the call).
    """
    return _nan_arg("nanargmin", a, axis, keepdims, fn.argmin, np.inf)


def _cumulative(op: str, scan, x, axis, dtype, include_initial: bool, initial) -> Tensor:
    x = as_tensor(x, op=op)
    if axis is None:
        if x.ndim != 1:
            raise OpError(f"{op}: axis is required for a tensor of shape {x.shape} (not 1-D)")
        axis = 0
    out = scan(x, axis=axis, dtype=dtype)
    if include_initial:
        axis = norm_axis(op, axis, x.ndim, x.shape)
        shape = (*out.shape[:axis], 1, *out.shape[axis + 1 :])
        out = fn.concatenate([fn.full(shape, initial, dtype=out.dtype), out], axis)
    return out


def cumulative_sum(x, axis=None, dtype=None, include_initial: bool = False) -> Tensor:
    """The running sum along ``axis`` (the array API's and JAX's ``cumulative_sum``).

    Args:
        x: a tensor.
        axis: the dim (may be omitted for a 1-D tensor).
        dtype: the accumulation and result dtype (default: ``x``'s, bools and integers
            narrower than 32 bits widened to int32 or uint32, as JAX's).
        include_initial: start with a 0 (one more element along ``axis``).

    Returns:
        A tensor.
    """
    x = as_tensor(x, op="cumulative_sum")
    if dtype is None and (x.dtype.is_bool or (x.dtype.is_int and x.dtype.numpy.itemsize < 4)):
        # JAX's: bools and small integers accumulate as int32 (unsigned: uint32), as a sum
        # does (an int8 running sum overflowed at 128)
        dtype = DType.uint32 if x.dtype.numpy.kind == "u" else DType.int32
    return _cumulative("cumulative_sum", fn.cumsum, x, axis, dtype, include_initial, 0)


def cumulative_prod(x, axis=None, dtype=None, include_initial: bool = False) -> Tensor:
    """The running product along ``axis`` (the array API's and JAX's
    ``cumulative_prod``).

    Args:
        x: a tensor.
        axis: the dim (may be omitted for a 1-D tensor).
        dtype: the accumulation and result dtype.
        include_initial: start with a 1 (one more element along ``axis``).

    Returns:
        A tensor.
    """
    return _cumulative("cumulative_prod", fn.cumprod, x, axis, dtype, include_initial, 1)


def _nan_scan(op: str, scan, a, axis, dtype, fill) -> Tensor:
    a = as_tensor(a, op=op)
    if axis is None:
        a, axis = fn.reshape(a, (-1,)), 0
    if a.dtype.is_float:
        a = fn.where(fn.is_nan(a), fn.full_like(a, fill), a)
    return scan(a, axis=axis, dtype=dtype)


def nancumsum(a, axis=None, dtype=None) -> Tensor:
    """The running sum with NaNs counted as 0 (NumPy's and JAX's ``nancumsum``).

    Args:
        a: a tensor.
        axis: the dim (the flattened tensor when None).
        dtype: the accumulation and result dtype.

    Returns:
        A tensor.
    """
    return _nan_scan("nancumsum", fn.cumsum, a, axis, dtype, 0)


def nancumprod(a, axis=None, dtype=None) -> Tensor:
    """The running product with NaNs counted as 1 (NumPy's and JAX's ``nancumprod``).

    Args:
        a: a tensor.
        axis: the dim (the flattened tensor when None).
        dtype: the accumulation and result dtype.

    Returns:
        A tensor.
    """
    return _nan_scan("nancumprod", fn.cumprod, a, axis, dtype, 1)


def diagflat(v, k: int = 0) -> Tensor:
    """A 2-D tensor with the flattened ``v`` on its ``k``-th diagonal (NumPy's and JAX's
    ``diagflat``).

    Args:
        v: a tensor (flattened).
        k: the diagonal: 0 the main one, > 0 above it, < 0 below.

    Returns:
        A square tensor of side ``v.size + |k|``.
    """
    return fn.diag(fn.reshape(as_tensor(v, op="diagflat"), (-1,)), k)


def diag_indices(n: int, ndim: int = 2) -> tuple:
    """The indices of the main diagonal of an ``(n,) * ndim`` array (NumPy's and JAX's
    ``diag_indices``): ``ndim`` copies of ``arange(n)``.

    Args:
        n: the side.
        ndim: the number of dims.

    Returns:
        A tuple of ``ndim`` int32 tensors.
    """
    idx = fn.arange(int(n), dtype=DType.int32)
    return (idx,) * int(ndim)


def diag_indices_from(arr) -> tuple:
    """``diag_indices`` of a square array's shape (NumPy's and JAX's
    ``diag_indices_from``).

    Args:
        arr: a tensor of at least 2 dims, all of one size.

    Returns:
        A tuple of ``arr.ndim`` int32 tensors.

    Raises:
        ValueError: (:class:`nabla.OpError`) for fewer than 2 dims or dims of other sizes.
    """
    shape = tuple(np.shape(arr)) if not isinstance(arr, Tensor) else tuple(arr.shape)
    if len(shape) < 2 or len(set(shape)) != 1:
        raise OpError(f"diag_indices_from: needs a square array of >= 2 dims, got {shape}")
    return diag_indices(shape[0], len(shape))


def _indices_from(op: str, arr, k: int, make) -> tuple:
    shape = tuple(np.shape(arr)) if not isinstance(arr, Tensor) else tuple(arr.shape)
    if len(shape) != 2:
        raise OpError(f"{op}: needs a 2-D array, got shape {shape}")
    return make(shape[0], k, shape[1])


def tril_indices_from(arr, k: int = 0) -> tuple:
    """``tril_indices`` of a 2-D array's shape (NumPy's and JAX's ``tril_indices_from``).

    Args:
        arr: a 2-D tensor.
        k: the diagonal offset.

    Returns:
        A pair of index tensors.
    """
    return _indices_from("tril_indices_from", arr, k, fn.tril_indices)


def triu_indices_from(arr, k: int = 0) -> tuple:
    """``triu_indices`` of a 2-D array's shape (NumPy's and JAX's ``triu_indices_from``).

    Args:
        arr: a 2-D tensor.
        k: the diagonal offset.

    Returns:
        A pair of index tensors.
    """
    return _indices_from("triu_indices_from", arr, k, fn.triu_indices)


def vecdot(x1, x2, axis: int = -1) -> Tensor:
    """The dot product of vectors along ``axis``, broadcast over the other dims (the array
    API's and JAX's ``vecdot``; real tensors: no conjugate to take).

    Args:
        x1: a tensor.
        x2: a tensor broadcastable with ``x1``, of the same size along ``axis``.
        axis: the dim of the vectors.

    Returns:
        A tensor of the broadcast shape without ``axis``.
    """
    a, b = _promoted("vecdot", x1, x2)
    return fn.sum(a * b, axis=axis)


def rollaxis(a, axis: int, start: int = 0) -> Tensor:
    """Dim ``axis`` moved to stand before dim ``start`` (NumPy's and JAX's ``rollaxis``;
    ``moveaxis`` is the clearer name).

    Args:
        a: a tensor.
        axis: the dim to move.
        start: the dim it goes before (``ndim`` for the end).

    Returns:
        A tensor.
    """
    x = as_tensor(a, op="rollaxis")
    n = x.ndim
    axis = norm_axis("rollaxis", axis, n, x.shape)
    start = start + n if start < 0 else start
    if not 0 <= start <= n:
        raise OpError(f"rollaxis: start {start} is out of range for {n} dims")
    dest = start - 1 if axis < start else start
    return fn.moveaxis(x, axis, dest)


def unstack(x, axis: int = 0) -> tuple:
    """The slices of ``x`` along ``axis`` (the array API's and JAX's ``unstack``).

    Args:
        x: a tensor.
        axis: the dim to slice along.

    Returns:
        A tuple of ``x.shape[axis]`` tensors.
    """
    return tuple(fn.unbind(as_tensor(x, op="unstack"), axis))


def ediff1d(ary, to_end=None, to_begin=None) -> Tensor:
    """The differences of consecutive elements of the flattened ``ary`` (NumPy's and JAX's
    ``ediff1d``), with ``to_begin`` and ``to_end`` around them.

    Args:
        ary: a tensor (flattened).
        to_end: values appended after the differences.
        to_begin: values put before them.

    Returns:
        A 1-D tensor.
    """
    x = fn.reshape(as_tensor(ary, op="ediff1d"), (-1,))
    parts = [x[1:] - x[:-1]]
    if to_begin is not None:
        parts.insert(0, fn.cast(fn.reshape(as_tensor(to_begin), (-1,)), x.dtype))
    if to_end is not None:
        parts.append(fn.cast(fn.reshape(as_tensor(to_end), (-1,)), x.dtype))
    return fn.concatenate(parts, 0) if len(parts) > 1 else parts[0]


def vander(x, N=None, increasing: bool = False) -> Tensor:  # noqa: N803 - NumPy's name
    """The Vandermonde matrix of the 1-D ``x`` (NumPy's and JAX's ``vander``): column
    ``j`` is ``x ** (N - 1 - j)`` (``x ** j`` when ``increasing``).

    Args:
        x: a 1-D tensor.
        N: the number of columns (``len(x)`` by default).
        increasing: powers increasing from left to right.

    Returns:
        A ``(len(x), N)`` tensor.
    """
    x = as_tensor(x, op="vander")
    if x.ndim != 1:
        raise OpError(f"vander: x must be 1-D, got shape {x.shape}")
    n = x.shape[0] if N is None else int(N)
    powers = np.arange(n) if increasing else np.arange(n)[::-1]
    cols = [fn.ones_like(x) if p == 0 else x ** int(p) for p in powers]
    return fn.stack(cols, 1) if cols else fn.zeros((x.shape[0], 0), dtype=x.dtype)


def flatnonzero(a, *, size=None, fill_value=None) -> Tensor:
    """The flat indices of the non-zero elements (NumPy's and JAX's ``flatnonzero``).

    Args:
        a: a tensor (flattened).
        size: JAX's static number of indices (cut or padded with ``fill_value``), needed
            under ``compile`` and ``vmap``.
        fill_value: what pads the indices past the non-zero ones (default 0).

    Returns:
        A 1-D integer tensor.
    """
    flat = fn.reshape(as_tensor(a, op="flatnonzero"), (-1,))
    return fn.nonzero(flat, size=size, fill_value=fill_value)[0]


def interp(x, xp, fp, left=None, right=None, period=None) -> Tensor:
    """Piecewise-linear interpolation of the points ``(xp, fp)`` at ``x`` (NumPy's and
    JAX's ``interp``): below ``xp[0]`` it gives ``left`` (``fp[0]`` by default), above
    ``xp[-1]`` ``right`` (``fp[-1]``). Differentiable in ``x`` and ``fp``.

    Args:
        x: where to evaluate, any shape.
        xp: the increasing 1-D x-coordinates of the points.
        fp: their 1-D y-values.
        left: the value below ``xp[0]``.
        right: the value above ``xp[-1]``.
        period: not supported (an error).

    Returns:
        A tensor of ``x``'s shape.

    Raises:
        ValueError: (:class:`nabla.OpError`) for ``xp``/``fp`` that are not 1-D of one
            length, or a ``period``.
    """
    if period is not None:
        raise OpError("interp: period is not supported")
    x, xp, fp = _promoted("interp", x, xp, fp, floats=True)
    if xp.ndim != 1 or fp.ndim != 1 or xp.shape[0] != fp.shape[0] or xp.shape[0] == 0:
        raise OpError(
            f"interp: xp and fp must be 1-D of one non-zero length, got {xp.shape} and {fp.shape}"
        )
    n = xp.shape[0]
    if n == 1:
        out = fn.broadcast_to(fn.reshape(fp, ()), x.shape)
    else:
        i = fn.clip(searchsorted(xp, x, side="right") - 1, 0, n - 2)
        x0, x1 = fn.take(xp, i, axis=0), fn.take(xp, i + 1, axis=0)
        y0, y1 = fn.take(fp, i, axis=0), fn.take(fp, i + 1, axis=0)
        span = x1 - x0
        t = (x - x0) / fn.where(span == 0, fn.ones_like(span), span)
        out = y0 + t * (y1 - y0)
    below = fp[0] if left is None else fn.cast(as_tensor(left), x.dtype)
    above = fp[n - 1] if right is None else fn.cast(as_tensor(right), x.dtype)
    out = fn.where(x < xp[0], below, out)
    return fn.where(x > xp[n - 1], above, out)


def indices(dimensions, dtype=None, sparse: bool = False):
    """The grid of indices of an array of shape ``dimensions`` (NumPy's and JAX's
    ``indices``): tensor ``i`` holds each position's index along dim ``i``.

    Args:
        dimensions: the shape.
        dtype: the indices' dtype (int32 by default).
        sparse: one broadcastable tensor per dim (each of size 1 but along its own dim)
            instead of one stacked tensor.

    Returns:
        A ``(len(dimensions), *dimensions)`` tensor, or a tuple of tensors when
        ``sparse``.
    """
    dims = tuple(int(d) for d in dimensions)
    dtype = DType.int32 if dtype is None else dtype
    parts = []
    for i, d in enumerate(dims):
        shape = [1] * len(dims)
        shape[i] = d
        parts.append(fn.reshape(fn.arange(d, dtype=dtype), tuple(shape)))
    if sparse:
        return tuple(parts)
    if not dims:
        return fn.zeros((0,), dtype=dtype)
    return fn.stack([fn.broadcast_to(p, dims) for p in parts], 0)


def ix_(*args) -> tuple:
    """Open-mesh index tensors from 1-D sequences (NumPy's and JAX's ``ix_``): the ``i``-th
    has its values along dim ``i`` and size 1 elsewhere, so indexing with them picks the
    cross product.

    Args:
        *args: 1-D integer (or boolean: their non-zero positions) sequences.

    Returns:
        A tuple of ``len(args)`` tensors.
    """
    out = []
    for i, a in enumerate(args):
        t = as_tensor(a, op="ix_")
        if t.ndim != 1:
            raise OpError(f"ix_: each argument must be 1-D, got shape {t.shape} at {i}")
        if t.dtype.is_bool:
            t = fn.nonzero(t)[0]
        elif t.shape[0] == 0 and not t.dtype.is_int:
            t = fn.cast(t, DType.int64)  # an empty list is no positions, as in NumPy
        shape = [1] * len(args)
        shape[i] = t.shape[0]
        out.append(fn.reshape(t, tuple(shape)))
    return tuple(out)


def copy(a, order=None) -> Tensor:
    """A new tensor with ``a``'s value (NumPy's and JAX's ``copy``; PyTorch's ``clone``):
    an in-place change of one is not seen by the other. Differentiable.

    Args:
        a: a tensor (or anything ``asarray`` takes).
        order: accepted for NumPy's calls: ``None``, ``"K"``, ``"A"`` or ``"C"``.

    Returns:
        A tensor.
    """
    if order not in (None, "K", "A", "C"):
        raise OpError(f"copy: order must be None, 'K', 'A' or 'C', got {order!r}")
    return fn.clone(as_tensor(a, op="copy"))


def unique(
    ar,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis=None,
    *,
    equal_nan: bool = True,
    size=None,
    fill_value=None,
):
    """The sorted distinct values of the flattened ``ar``, or its distinct slices along
    ``axis`` in lexicographic order (NumPy's and JAX's ``unique``), through stable sorts: so
    with ``size`` (JAX's static number of values) it runs under ``compile`` and ``vmap``,
    the values past the distinct ones being ``fill_value`` (the smallest value by default),
    their first indices the smallest value's and their counts 0. Without ``size`` the
    number of values is read at the call.

    Args:
        ar: a tensor (flattened unless ``axis`` is given).
        return_index: also return each value's first index in the flattened ``ar`` (along
            ``axis``, with one).
        return_inverse: also return each element's position among the values (``ar``'s
            shape; 1-D along ``axis``, with one).
        return_counts: also return each value's count.
        axis: the dim whose slices are compared whole (one sort per element of a slice).
        equal_nan: count all NaNs as one value (else each NaN is its own).
        size: the number of values to return.
        fill_value: the values past the distinct ones, with ``size``.

    Returns:
        The values, or a tuple of them and the requested arrays, in NumPy's order.

    Raises:
        IndexError: for an ``axis`` out of range.
    """
    x = as_tensor(ar, op="unique")
    if axis is None:
        shape, rows = x.shape, fn.reshape(x, (-1, 1))
    else:
        axis = norm_axis("unique", axis, x.ndim, x.shape)
        moved = fn.moveaxis(x, axis, 0)
        shape = (x.shape[axis],)
        rows = fn.reshape(moved, (shape[0], math.prod(moved.shape[1:])))
    n, width = rows.shape

    def slices(r):  # distinct rows back as values: scalars, or slices along axis
        if axis is None:
            return fn.reshape(r, (-1,))
        return fn.moveaxis(fn.reshape(r, (r.shape[0],) + moved.shape[1:]), 0, axis)

    if n == 0:  # nothing to sort: the values (with size, all fill_value) and empty indices
        k = 0 if size is None else int(size)
        fill = 0 if fill_value is None else fill_value
        out = [slices(fn.full((k, width), fill, dtype=x.dtype))]
        out += [fn.zeros((k,), dtype=DType.int64)] if return_index else []
        out += [fn.zeros(shape, dtype=DType.int64)] if return_inverse else []
        out += [fn.zeros((k,), dtype=DType.int64)] if return_counts else []
        return out[0] if len(out) == 1 else tuple(out)
    # the first column decides first: lexsort takes its last key as the primary one
    keys = [rows[:, j] for j in reversed(range(width))]
    order = lexsort(keys) if keys else fn.arange(n, dtype=DType.int64)
    ordered = fn.take(rows, order, axis=0)
    differ = ordered[1:] != ordered[:-1]
    if equal_nan and x.dtype.is_float:
        differ = differ & ~(fn.is_nan(ordered[1:]) & fn.is_nan(ordered[:-1]))
    new = fn.any(differ, axis=1)
    first = fn.concatenate([fn.ones((min(n, 1),), dtype=DType.bool), new], 0)
    # where each run of one value starts, and where it ends (the next one's start)
    if size is None:
        starts = fn.nonzero(first)[0]
        ends = fn.concatenate([starts[1:], fn.full((1,), n, dtype=starts.dtype)], 0)
    else:
        bounds = fn.nonzero(first, size=int(size) + 1, fill_value=n)[0]
        starts, ends = bounds[: int(size)], bounds[1:]
        starts = fn.minimum(starts, fn.full_like(starts, max(n - 1, 0)))
    values = fn.take(ordered, starts, axis=0)
    if size is not None:
        count = fn.sum(fn.cast(first, DType.int32))
        past = fn.arange(int(size), dtype=DType.int32) >= count
        fill = ordered[:1] if fill_value is None else fn.full((), fill_value, dtype=x.dtype)
        values = fn.where(fn.reshape(past, (-1, 1)), fill, values)
    out = [slices(values)]
    if return_index:
        index = fn.take(order, starts, axis=0)
        out.append(index if size is None else fn.where(past, index[0], index))
    if return_inverse:
        group = fn.cumsum(fn.cast(first, DType.int32), axis=0) - 1
        inverse = fn.take(group, fn.argsort(order, stable=True), axis=0)
        out.append(fn.reshape(inverse, shape))
    if return_counts:
        counts = ends - starts
        out.append(counts if size is None else fn.where(past, fn.zeros_like(counts), counts))
    return out[0] if len(out) == 1 else tuple(out)


def histogram(a, bins=10, range=None, weights=None, density=None):  # noqa: A002 - NumPy's
    """The counts of the flattened ``a`` in ``bins`` (NumPy's and JAX's ``histogram``):
    each bin holds its lower edge, the last also its upper one. The counts are floats, as
    JAX's.

    Args:
        a: a tensor (flattened).
        bins: the number of equal bins, or their increasing edges.
        range: ``(lower, upper)`` of the equal bins (``a``'s min and max by default).
        weights: a tensor of ``a``'s shape whose entries are summed instead of counted.
        density: divide by the total and the bin widths (a density).

    Returns:
        ``(hist, bin_edges)``.
    """
    x, edges = _histogram_input(a, bins, range, weights)
    nbins = edges.shape[0] - 1
    lo, hi = edges[0], edges[nbins]
    idx = searchsorted(edges, x, side="right") - 1
    idx = fn.where(x == hi, fn.full_like(idx, nbins - 1), idx)
    inside = (x >= lo) & (x <= hi)
    hits = (fn.reshape(idx, (-1, 1)) == fn.arange(nbins, dtype=idx.dtype)) & fn.reshape(
        inside, (-1, 1)
    )
    w = (
        fn.ones_like(x)
        if weights is None
        else fn.cast(fn.reshape(as_tensor(weights), (-1,)), x.dtype)
    )
    hist = fn.sum(fn.where(hits, fn.reshape(w, (-1, 1)), fn.zeros((), dtype=x.dtype)), 0)
    if density:
        hist = hist / (fn.sum(hist) * (edges[1:] - edges[:-1]))
    return hist, edges


def histogram_bin_edges(a, bins=10, range=None, weights=None) -> Tensor:  # noqa: A002
    """The bin edges :func:`histogram` uses (NumPy's and JAX's ``histogram_bin_edges``).

    Args:
        a: a tensor (flattened).
        bins: the number of equal bins, or their edges.
        range: ``(lower, upper)`` of the equal bins (``a``'s min and max by default).
        weights: accepted, as NumPy's (the edges do not depend on them).

    Returns:
        A 1-D tensor of ``bins + 1`` edges.
    """
    return _histogram_input(a, bins, range, weights)[1]


def _histogram_input(a, bins, range, weights) -> tuple:  # noqa: A002
    x = fn.reshape(as_tensor(a, op="histogram"), (-1,))
    if not x.dtype.is_float:
        x = fn.cast(x, get_default_dtype())
    if not isinstance(bins, numbers.Integral):
        edges = fn.cast(as_tensor(bins, op="histogram"), x.dtype)
        if edges.ndim != 1 or edges.shape[0] < 2:
            raise OpError(f"histogram: bin edges must be 1-D with 2 or more, got {edges.shape}")
        return x, edges
    if int(bins) < 1:
        raise OpError(f"histogram: bins must be >= 1, got {bins}")
    if range is None:
        lo, hi = (fn.min(x), fn.max(x)) if x.shape[0] else (0.0, 1.0)
    else:
        lo, hi = range
    lo, hi = fn.cast(as_tensor(lo), x.dtype), fn.cast(as_tensor(hi), x.dtype)
    # an empty range widens by 0.5 each way, as NumPy's
    half = fn.cast(lo == hi, x.dtype) * 0.5
    lo, hi = lo - half, hi + half
    # the edges as fractions of the range, the last one exact (MAX 26.7's compiler crashed
    # on linspace's select fed by the two reductions)
    steps = np.linspace(0.0, 1.0, int(bins) + 1)[:-1].astype(x.dtype.numpy)
    inner = lo + (hi - lo) * fn.constant(steps)
    return x, fn.concatenate([inner, fn.reshape(hi, (1,))], 0)


def _conv_full(op: str, a, v) -> tuple:
    a, v = _promoted(op, a, v)
    if a.ndim != 1 or v.ndim != 1 or a.shape[0] == 0 or v.shape[0] == 0:
        raise OpError(f"{op}: a and v must be non-empty 1-D, got {a.shape} and {v.shape}")
    return a, v


def _convolved(op: str, a, v, mode: str) -> Tensor:
    """The full convolution of 1-D ``a`` and ``v``, cut to ``mode``: each output element
    one row of a gather of ``a``'s zero-padded windows times the flipped ``v``."""
    if mode not in ("full", "same", "valid"):
        raise OpError(f"{op}: mode must be 'full', 'same' or 'valid', got {mode!r}")
    n, m = a.shape[0], v.shape[0]
    padded = fn.pad(a, ((m - 1, m - 1),))
    windows = np.arange(n + m - 1)[:, None] + np.arange(m)[None, :]
    rows = fn.take(padded, fn.constant(windows.astype(np.int32)), axis=0)
    full = fn.matmul(rows, fn.flip(v, 0))
    if mode == "full":
        return full
    if mode == "same":
        size, start = max(n, m), (min(n, m) - 1) // 2
    else:
        size, start = max(n, m) - min(n, m) + 1, min(n, m) - 1
    return _along(full, 0, start, start + size)


def convolve(a, v, mode: str = "full", *, precision=None, preferred_element_type=None) -> Tensor:
    """The discrete linear convolution of two 1-D tensors (NumPy's and JAX's
    ``convolve``). Differentiable in both.

    Args:
        a: a non-empty 1-D tensor.
        v: a non-empty 1-D tensor.
        mode: ``"full"`` (every overlap), ``"same"`` (the length of the longer input,
            centred) or ``"valid"`` (only complete overlaps).
        precision: JAX's, accepted.
        preferred_element_type: the dtype to compute and return in (JAX's).

    Returns:
        A 1-D tensor.
    """
    a, v = _conv_full("convolve", a, v)
    if preferred_element_type is not None:
        a, v = fn.cast(a, preferred_element_type), fn.cast(v, preferred_element_type)
    return _convolved("convolve", a, v, mode)


def correlate(a, v, mode: str = "valid", *, precision=None, preferred_element_type=None):
    """The cross-correlation of two 1-D tensors (NumPy's and JAX's ``correlate``):
    ``convolve(a, v[::-1], mode)``. Differentiable in both.

    Args:
        a: a non-empty 1-D tensor.
        v: a non-empty 1-D tensor.
        mode: ``"valid"`` (only complete overlaps, the default), ``"same"`` or ``"full"``.
        precision: JAX's, accepted.
        preferred_element_type: the dtype to compute and return in (JAX's).

    Returns:
        A 1-D tensor.
    """
    a, v = _conv_full("correlate", a, v)
    if preferred_element_type is not None:
        a, v = fn.cast(a, preferred_element_type), fn.cast(v, preferred_element_type)
    if a.shape[0] < v.shape[0]:  # NumPy's: the longer one slides, the result reversed
        return fn.flip(_convolved("correlate", v, fn.flip(a, 0), mode), 0)
    return _convolved("correlate", a, fn.flip(v, 0), mode)


def _static_indices(op: str, obj, n: int) -> np.ndarray:
    if isinstance(obj, Tensor):
        if not readable_now(obj):
            raise OpError(f"{op}: the indices must be known at the call (not traced)")
        obj = obj.numpy()
    if isinstance(obj, slice):
        return np.arange(n)[obj]
    obj = np.asarray(obj)
    if obj.size and obj.dtype.kind not in "iub":
        raise OpError(f"{op}: the indices must be integers, got {obj.dtype} {obj.shape}")
    return obj.astype(np.int64) if obj.size == 0 else obj  # (no indices: nothing to do)


def delete(arr, obj, axis=None) -> Tensor:
    """``arr`` without the entries ``obj`` along ``axis`` (NumPy's and JAX's ``delete``;
    flattened when ``axis`` is None).

    Args:
        arr: a tensor.
        obj: an int, a slice or a sequence of ints (negative from the end), known at the
            call.
        axis: the dim, or None.

    Returns:
        A tensor.
    """
    x = as_tensor(arr, op="delete")
    if axis is None:
        x, axis = fn.reshape(x, (-1,)), 0
    axis = norm_axis("delete", axis, x.ndim, x.shape)
    n = x.shape[axis]
    keep = np.delete(np.arange(n), _static_indices("delete", obj, n))
    return fn.take(x, fn.constant(keep.astype(np.int32)), axis=axis)


def insert(arr, obj, values, axis=None) -> Tensor:
    """``values`` inserted into ``arr`` before the entries ``obj`` along ``axis`` (NumPy's
    and JAX's ``insert``; flattened when ``axis`` is None).

    Args:
        arr: a tensor.
        obj: an int or a sequence of ints (positions before which to insert), known at the
            call.
        values: what to insert, broadcast to the inserted slices (for an int ``obj`` and
            ``axis=None``, a 1-D ``values`` inserts as a block), as NumPy broadcasts them.
        axis: the dim, or None.

    Returns:
        A tensor.
    """
    x = as_tensor(arr, op="insert")
    if axis is None:
        x, axis = fn.reshape(x, (-1,)), 0
    axis = norm_axis("insert", axis, x.ndim, x.shape)
    n = x.shape[axis]
    v = fn.cast(as_tensor(values, op="insert"), x.dtype)
    if v.ndim < x.ndim:  # NumPy's ndmin: leading dims of size 1
        v = fn.reshape(v, (1,) * (x.ndim - v.ndim) + tuple(v.shape))
    where = _static_indices("insert", obj, n)
    if where.ndim == 0:  # one position: the values' first dim is the inserted one
        v = fn.moveaxis(v, 0, axis)
        where = np.full(v.shape[axis], int(where))
    k = where.size
    v = fn.broadcast_to(v, (*x.shape[:axis], k, *x.shape[axis + 1 :]))
    order = np.insert(np.arange(n), np.where(where < 0, where + n, where), n + np.arange(k))
    joined = fn.concatenate([x, v], axis)
    return fn.take(joined, fn.constant(order.astype(np.int32)), axis=axis)


def block(arrays) -> Tensor:
    """A tensor assembled from nested lists of blocks (NumPy's and JAX's ``block``): the
    innermost lists join along the last dim, the next along the one before, and so on;
    blocks of fewer dims get leading dims of size 1.

    Args:
        arrays: nested lists (all of one depth) of tensors or numbers.

    Returns:
        A tensor.
    """

    def depth(a) -> int:
        return 1 + depth(a[0]) if isinstance(a, list) and a else int(isinstance(a, list))

    def rank(a) -> int:
        return max(rank(b) for b in a) if isinstance(a, list) else as_tensor(a).ndim

    if isinstance(arrays, tuple):
        raise OpError("block: takes nested lists, not tuples (NumPy's rule)")
    if isinstance(arrays, list) and not arrays:
        raise OpError("block: an empty list")
    d = depth(arrays)
    ndim = max(d, rank(arrays)) if d else as_tensor(arrays).ndim

    def build(a, level):
        if not isinstance(a, list):
            t = as_tensor(a, op="block")
            return fn.reshape(t, (1,) * (ndim - t.ndim) + tuple(t.shape))
        if not a:
            raise OpError("block: an empty list")
        parts = [build(b, level + 1) for b in a]
        return fn.concatenate(parts, ndim - d + level) if len(parts) > 1 else parts[0]

    return build(arrays, 0) if d else as_tensor(arrays)


def partition(a, kth: int, axis: int = -1) -> Tensor:
    """``a`` partly sorted along ``axis`` (NumPy's and JAX's ``partition``): the ``kth``
    smallest value at position ``kth``, the smaller ones before it and the larger after,
    as JAX orders them (ascending before, descending after).

    Args:
        a: a tensor.
        kth: the position that holds its sorted value.
        axis: the dim.

    Returns:
        A tensor of ``a``'s shape.
    """
    x = as_tensor(a, op="partition")
    axis = norm_axis("partition", axis, x.ndim, x.shape)
    n = x.shape[axis]
    k = _kth("partition", kth, n, x.shape)
    ordered = fn.sort(x, axis=axis)
    rest = fn.flip(_along(ordered, axis, k + 1, n), axis)
    return fn.concatenate([_along(ordered, axis, 0, k + 1), rest], axis)


def argpartition(a, kth: int, axis: int = -1) -> Tensor:
    """The indices that :func:`partition` ``a`` (NumPy's and JAX's ``argpartition``), as JAX
    gives them: the ``kth + 1`` smallest in order, then the others in their own order.

    Args:
        a: a tensor.
        kth: the position that holds its sorted value.
        axis: the dim.

    Returns:
        An integer tensor of ``a``'s shape.
    """
    x = as_tensor(a, op="argpartition")
    axis = norm_axis("argpartition", axis, x.ndim, x.shape)
    n = x.shape[axis]
    k = _kth("argpartition", kth, n, x.shape)
    order = fn.argsort(x, axis=axis, stable=True)
    low = _along(order, axis, 0, k + 1)
    # the others in index order: each index's rank among those not in ``low``
    taken = fn.sum(
        fn.cast(
            fn.unsqueeze(low, axis + 1) == _index_along(x.shape, axis, order.dtype), DType.int32
        ),
        axis,
    )
    rest = fn.argsort(taken, axis=axis, stable=True)
    return fn.concatenate([low, _along(rest, axis, 0, n - k - 1)], axis)


def _kth(op: str, kth, n: int, shape) -> int:
    """``kth`` as a position in ``[0, n)`` (negative from the end), or an error."""
    if not isinstance(kth, numbers.Integral) or isinstance(kth, bool):
        raise OpError(f"{op}: kth must be one int (JAX's), got {kth!r}")
    if not -n <= int(kth) < n:
        raise OpError(f"{op}: kth={kth} is out of range for a dim of {n} (shape {shape})")
    return int(kth) + (n if int(kth) < 0 else 0)


def _index_along(shape: tuple, axis: int, dtype) -> Tensor:
    """``arange(shape[axis])`` shaped to broadcast after ``axis`` (one more dim)."""
    at = [1] * (len(shape) + 1)
    at[axis + 1] = shape[axis]
    return fn.reshape(fn.arange(shape[axis], dtype=dtype), tuple(at))


def lexsort(keys, axis: int = -1) -> Tensor:
    """The indices that sort by several keys (NumPy's and JAX's ``lexsort``): the last key
    first, ties broken by the one before it, and so on.

    Args:
        keys: a sequence of tensors of one shape (or a tensor, one key per row).
        axis: the dim to sort along.

    Returns:
        An integer tensor of the keys' shape.
    """
    if isinstance(keys, Tensor | np.ndarray):
        # one key per row (a 1-D array is that many 0-d keys, as in NumPy and JAX)
        keys = fn.unbind(as_tensor(keys, op="lexsort"), 0)
    ks = [as_tensor(k, op="lexsort") for k in keys]
    if not ks:
        raise OpError("lexsort: needs at least one key")
    if ks[0].ndim == 0:  # one element: its only order
        return fn.zeros((), dtype=DType.int64)
    order = fn.argsort(ks[0], axis=axis, stable=True)
    for k in ks[1:]:
        order = fn.take_along_axis(
            order, fn.argsort(fn.take_along_axis(k, order, axis), axis=axis, stable=True), axis
        )
    return order


def choose(a, choices, mode: str = "raise") -> Tensor:
    """Element ``i`` from ``choices[a[i]]`` (NumPy's and JAX's ``choose``), all broadcast
    together.

    Args:
        a: integer indices into ``choices``.
        choices: a sequence of tensors.
        mode: ``"raise"`` (an index out of range is an error where known at the call),
            ``"wrap"`` or ``"clip"``.

    Returns:
        A tensor of the broadcast shape.
    """
    idx = as_tensor(a, op="choose")
    cs = _promoted("choose", *choices)
    n = len(cs)
    if mode == "wrap":
        idx = idx % n
    elif mode == "clip":
        idx = fn.clip(idx, 0, n - 1)
    elif mode != "raise":
        raise OpError(f"choose: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    elif readable_now(idx) and idx.size:
        values = idx.numpy()
        if values.min() < 0 or values.max() >= n:
            raise OpError(
                f"choose: indices {values.min()}..{values.max()} are out of range for {n} choices"
            )
    shape = fn.broadcast_shapes("choose", tuple(idx.shape), *(tuple(c.shape) for c in cs))
    stacked = fn.stack([fn.broadcast_to(c, shape) for c in cs], 0)
    pick = fn.unsqueeze(fn.broadcast_to(idx, shape), 0)
    return fn.squeeze(fn.take_along_axis(stacked, pick, 0), 0)


def compress(condition, a, axis=None, *, size=None, fill_value=0) -> Tensor:
    """The slices of ``a`` along ``axis`` where the 1-D ``condition`` holds (NumPy's and
    JAX's ``compress``; flattened when ``axis`` is None).

    Args:
        condition: a 1-D boolean tensor (shorter than the dim: the rest is dropped).
        a: a tensor.
        axis: the dim, or None.
        size: JAX's static number of slices (cut, or padded with ``fill_value``).
        fill_value: what pads past the chosen slices.

    Returns:
        A tensor.
    """
    x = as_tensor(a, op="compress")
    if axis is None:
        x, axis = fn.reshape(x, (-1,)), 0
    axis = norm_axis("compress", axis, x.ndim, x.shape)
    cond = fn.reshape(as_tensor(condition, op="compress"), (-1,))
    cond = _along(cond, 0, 0, min(cond.shape[0], x.shape[axis]))
    idx = fn.nonzero(cond, size=size, fill_value=-1)[0]
    out = fn.take(x, fn.maximum(idx, fn.zeros_like(idx)), axis=axis)
    if size is None:
        return out
    at = [1] * x.ndim
    at[axis] = int(size)
    return fn.where(fn.reshape(idx >= 0, tuple(at)), out, fn.full((), fill_value, dtype=x.dtype))


def extract(condition, arr, *, size=None, fill_value=0) -> Tensor:
    """The elements of ``arr`` where ``condition`` holds, flattened (NumPy's and JAX's
    ``extract``).

    Args:
        condition: a boolean tensor of ``arr``'s size.
        arr: a tensor.
        size: JAX's static number of elements (cut, or padded with ``fill_value``).
        fill_value: what pads past the chosen elements.

    Returns:
        A 1-D tensor.
    """
    return compress(
        fn.reshape(as_tensor(condition), (-1,)), arr, None, size=size, fill_value=fill_value
    )


def matvec(x1, x2) -> Tensor:
    """Matrix-vector products, broadcast over leading dims (the array API's and JAX's
    ``matvec``): ``(..., m, n)`` with ``(..., n)`` gives ``(..., m)``.

    Args:
        x1: a tensor of at least 2 dims.
        x2: a tensor of at least 1 dim.

    Returns:
        A tensor.
    """
    a, b = _promoted("matvec", x1, x2)
    if a.ndim < 2 or b.ndim < 1:
        raise OpError(f"matvec: needs a matrix and a vector, got shapes {a.shape} and {b.shape}")
    return fn.squeeze(fn.matmul(a, fn.unsqueeze(b, -1)), -1)


def vecmat(x1, x2) -> Tensor:
    """Vector-matrix products, broadcast over leading dims (the array API's and JAX's
    ``vecmat``): ``(..., n)`` with ``(..., n, m)`` gives ``(..., m)``.

    Args:
        x1: a tensor of at least 1 dim.
        x2: a tensor of at least 2 dims.

    Returns:
        A tensor.
    """
    a, b = _promoted("vecmat", x1, x2)
    if a.ndim < 1 or b.ndim < 2:
        raise OpError(f"vecmat: needs a vector and a matrix, got shapes {a.shape} and {b.shape}")
    return fn.squeeze(fn.matmul(fn.unsqueeze(a, -2), b), -2)


def resize(a, new_shape) -> Tensor:
    """``a``'s flattened elements repeated cyclically into ``new_shape`` (NumPy's and
    JAX's ``resize``).

    Args:
        a: a tensor.
        new_shape: an int or a shape.

    Returns:
        A tensor of ``new_shape``.
    """
    x = fn.reshape(as_tensor(a, op="resize"), (-1,))
    shape = (int(new_shape),) if isinstance(new_shape, numbers.Integral) else tuple(new_shape)
    if any(int(d) < 0 for d in shape):
        raise OpError(f"resize: new_shape {shape} has a negative dim")
    total = math.prod(shape)
    if total and x.shape[0] == 0:
        raise OpError(f"resize: cannot fill shape {shape} from an empty tensor")
    return fn.reshape(_cycled(x, total), shape)


def _cycled(flat: Tensor, k: int) -> Tensor:
    """The 1-D ``flat``'s elements repeated cyclically to ``k`` of them (one gather)."""
    idx = np.arange(k) % max(flat.shape[0], 1)
    return fn.take(flat, fn.constant(idx.astype(np.int32)), axis=0)


def trim_zeros(filt, trim: str = "fb", axis=None) -> Tensor:
    """``filt`` without its leading (``"f"``) and/or trailing (``"b"``) zeros along ``axis``
    (NumPy's and JAX's ``trim_zeros``): along each dim, the slices that hold only zeros
    before the first and after the last one that does not; its values must be known at
    the call.

    Args:
        filt: a tensor.
        trim: ``"f"``, ``"b"`` or ``"fb"``.
        axis: the dim or dims to trim (default: all of them).

    Returns:
        A tensor of ``filt``'s rank.
    """
    x = as_tensor(filt, op="trim_zeros")
    if x.ndim == 0:
        raise OpError("trim_zeros: filt must have at least one dim, got shape ()")
    if not readable_now(x):
        raise OpError("trim_zeros: the values must be known at the call (its length is theirs)")
    axes = range(x.ndim) if axis is None else norm_axes("trim_zeros", axis, x.ndim, x.shape)
    if not isinstance(trim, str) or not trim or set(trim.lower()) - {"f", "b"}:
        raise OpError(f"trim_zeros: trim must be 'f', 'b' or 'fb', got {trim!r}")
    values, front, back = x.numpy(), "f" in trim.lower(), "b" in trim.lower()
    for d in axes:
        others = tuple(k for k in range(x.ndim) if k != d)
        nz = np.flatnonzero(np.any(values != 0, axis=others) if others else values != 0)
        n = x.shape[d]
        if not nz.size:  # only zeros: nothing is left (NumPy's and JAX's)
            lo, hi = 0, 0
        else:
            lo = int(nz[0]) if front else 0
            hi = int(nz[-1]) + 1 if back else n
        x = _along(x, d, lo, max(lo, hi))
    return x


def _not_in_place(op: str, inplace) -> None:
    if inplace:
        raise ValueError(
            f"{op}: pass inplace=False for a new tensor (JAX's form); to change a tensor in "
            "place, assign into it (x[...] = v, PyTorch's way)"
        )


def put(a, ind, v, mode=None, *, inplace: bool = True) -> Tensor:
    """``a`` with the values ``v`` written at the flat indices ``ind`` (NumPy's and JAX's
    ``put``; JAX's ``inplace=False`` is required, as there).

    Args:
        a: a tensor.
        ind: integer flat indices (negative from the end).
        v: the values, repeated over ``ind`` when fewer.
        mode: None (an index out of range is dropped), ``"clip"`` (clipped, negatives to
            0) or ``"wrap"`` (modulo the size).
        inplace: must be False.

    Returns:
        A tensor of ``a``'s shape.
    """
    _not_in_place("put", inplace)
    x = as_tensor(a, op="put")
    flat = fn.reshape(x, (-1,))
    n = flat.shape[0]
    idx = fn.reshape(as_tensor(ind, op="put"), (-1,))
    vals = fn.reshape(fn.cast(as_tensor(v, op="put"), x.dtype), (-1,))
    k = idx.shape[0]
    if vals.shape[0] != k and k:
        if vals.shape[0] == 0:
            raise OpError(f"put: no values to write at {k} indices")
        vals = _cycled(vals, k)
    if mode == "clip":
        idx = fn.clip(idx, 0, n - 1)
    elif mode == "wrap":
        idx = idx % n
    elif mode is None and readable_now(idx):  # out of range: left out
        at = idx.numpy()
        keep = np.flatnonzero((at >= -n) & (at < n))
        if keep.size < k:
            idx = fn.constant(np.where(at[keep] < 0, at[keep] + n, at[keep]))
            vals = fn.take(vals, fn.constant(keep.astype(np.int32)), axis=0)
    elif mode is None:  # out of range: written past the end, then dropped
        idx = fn.where(idx < 0, idx + n, idx)
        idx = fn.where((idx >= 0) & (idx < n), idx, fn.full_like(idx, n))
        wide = fn.concatenate([flat, fn.zeros((1,), dtype=x.dtype)], 0)
        return fn.reshape(_along(fn.scatter(wide, idx, vals, 0), 0, 0, n), x.shape)
    else:
        raise OpError(f"put: mode must be None, 'clip' or 'wrap', got {mode!r}")
    return fn.reshape(fn.scatter(flat, idx, vals, 0), x.shape)


def fill_diagonal(a, val, wrap: bool = False, *, inplace: bool = True) -> Tensor:
    """``a`` with ``val`` on its main diagonal (NumPy's and JAX's ``fill_diagonal``; JAX's
    ``inplace=False`` is required, as there): positions ``(i, i, ...)``, ``val`` repeated
    along them when shorter.

    Args:
        a: a tensor of at least 2 dims, all of one size beyond 2.
        val: a value, or values for the diagonal's positions in order.
        wrap: not supported (an error), as JAX's.
        inplace: must be False.

    Returns:
        A tensor of ``a``'s shape.
    """
    _not_in_place("fill_diagonal", inplace)
    if wrap:
        raise OpError("fill_diagonal: wrap=True is not supported")
    x = as_tensor(a, op="fill_diagonal")
    if x.ndim < 2 or (x.ndim > 2 and len(set(x.shape)) != 1):
        raise OpError(f"fill_diagonal: needs 2 dims, or more all of one size; got shape {x.shape}")
    n = min(x.shape)
    vals = fn.cast(as_tensor(val, op="fill_diagonal"), x.dtype)  # (put repeats them)
    flat_at = np.arange(n) * sum(math.prod(x.shape[d + 1 :]) for d in range(x.ndim))
    return put(x, fn.constant(flat_at.astype(np.int64)), vals, mode="clip", inplace=False)


class _GridMaker:
    """NumPy's and JAX's ``mgrid`` (dense) and ``ogrid`` (open): ``mgrid[0:2, 0:3]``; a
    slice with an imaginary step ``5j`` gives that many points, ends included."""

    def __init__(self, sparse: bool, name: str):
        self.sparse, self.name = sparse, name

    def __getitem__(self, key):
        grid = (np.ogrid if self.sparse else np.mgrid)[key]
        if isinstance(grid, list | tuple):
            return [self._tensor(g) for g in grid]
        return self._tensor(grid)

    @staticmethod
    def _tensor(grid) -> Tensor:
        """NumPy's int64 or float64 grid in the default dtypes, as JAX's ``arange`` and
        ``linspace`` give (int32 and the default float)."""
        grid = np.asarray(grid)
        if grid.dtype.kind == "f":
            return fn.constant(grid.astype(get_default_dtype().numpy))
        return fn.constant(grid.astype(np.int32))

    def __repr__(self) -> str:
        return f"nabla.{self.name}"


def _inexact(x, op: str) -> Tensor:
    x = as_tensor(x, op=op)
    return x if x.dtype.is_float else fn.cast(x, get_default_dtype())


def asinh(x) -> Tensor:
    """The inverse hyperbolic sine (NumPy's ``arcsinh``, PyTorch's ``asinh``), as
    ``sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2)))``: no cancellation near 0, and
    ``|x| (1 + sqrt(1 + 1/x^2))`` past ``1e8`` so the square does not overflow.

    Args:
        x: a tensor or array (integers in the default float dtype).

    Returns:
        A float tensor like ``x``.
    """
    x = _inexact(x, "asinh")
    pos = x >= 0
    a = fn.where(pos, x, fn.neg(x))  # (|x| with slope 1 at 0, where sign(x) is 0)
    big = a > 1e8
    small = fn.where(big, 0.0, a)
    near = fn.log1p(small + small * small / (1.0 + fn.sqrt(1.0 + small * small)))
    large = fn.where(big, a, 1e8)
    far = fn.log(large) + math.log(2.0)  # (1/x^2 below float64's epsilon there)
    out = fn.where(big, far, near)
    return fn.where(pos, out, fn.neg(out))


def acosh(x) -> Tensor:
    """The inverse hyperbolic cosine (NumPy's ``arccosh``, PyTorch's ``acosh``), for
    ``x >= 1`` (NaN below), as ``log1p((x - 1) + sqrt((x - 1)(x + 1)))``, exact near 1.

    Args:
        x: a tensor or array (integers in the default float dtype).

    Returns:
        A float tensor like ``x``.
    """
    x = _inexact(x, "acosh")
    big = x > 1e8
    xs = fn.where(big, 2.0, x)
    t = xs - 1.0
    near = fn.log1p(t + fn.sqrt(t * (xs + 1.0)))
    far = fn.log(fn.where(big, x, 2.0)) + math.log(2.0)
    # below about -1e19, t * (x + 1) overflows to inf and near would read inf, not NaN
    return fn.where(big, far, fn.where(x < 1.0, math.nan, near))


def nanprod(a, axis=None, keepdims: bool = False, *, dtype=None) -> Tensor:
    """The product over ``axis`` with NaNs taken as 1 (NumPy's and JAX's ``nanprod``).

    Args:
        a: a tensor, or a nested list or NumPy array.
        axis: an int, a tuple of ints, or None for all dims.
        keepdims: keep the reduced dims as size 1.
        dtype: compute in (and return) this dtype.

    Returns:
        A tensor.
    """
    a = as_tensor(a, op="nanprod")
    if a.dtype.is_float:
        a = fn.where(fn.is_nan(a), 1.0, a)
    return fn.prod(a, axis, keepdims, dtype=dtype)


def cov(m, y=None, rowvar: bool = True, bias: bool = False, ddof=None, fweights=None,
        aweights=None) -> Tensor:  # fmt: skip
    """The covariance matrix of the variables in ``m`` (NumPy's and JAX's ``cov``): each
    row a variable and each column an observation (``rowvar=False``: the other way), with
    ``y`` as more variables; normalized by ``N - 1`` (``N`` with ``bias``, or ``N - ddof``).

    Args:
        m: a 0-D, 1-D or 2-D tensor or array.
        y: more variables, laid out as ``m``.
        rowvar: variables in rows (default True).
        bias: normalize by ``N`` instead of ``N - 1``.
        ddof: the count's correction (overrides ``bias``).
        fweights: integer frequency weights per observation.
        aweights: observation weights.

    Returns:
        ``(V, V)`` for ``V`` variables (a 0-d tensor for one).

    Raises:
        ValueError: (:class:`nabla.OpError`) for more than 2 dims or weights of the wrong length.
    """
    x = as_tensor(m, op="cov")
    if x.ndim > 2:
        raise OpError(f"cov: m must be 1-D or 2-D, got shape {x.shape}")
    if y is not None:
        yt = as_tensor(y, op="cov")
        yt = fn.reshape(yt, (1, -1)) if yt.ndim < 2 else (yt if rowvar else fn.swap_axes(yt, 0, 1))
    # computed in at least the default float, as NumPy (float64) and JAX (its default) do
    dt = promote_types(x.dtype, yt.dtype) if y is not None else x.dtype
    dt = promote_types(dt, get_default_dtype()) if dt.is_float else get_default_dtype()
    x = fn.reshape(x, (1, -1)) if x.ndim < 2 else (x if rowvar else fn.swap_axes(x, 0, 1))
    x = fn.cast(x, dt)
    if y is not None:
        x = fn.concatenate([x, fn.cast(yt, dt)], 0)
    n_obs = x.shape[1]
    w = None
    for name, weights in (("fweights", fweights), ("aweights", aweights)):
        if weights is not None:
            wt = fn.cast(as_tensor(weights, op="cov"), x.dtype)
            if wt.shape != (n_obs,):
                raise OpError(
                    f"cov: {name} must have one weight per observation ({n_obs}), got {wt.shape}"
                )
            w = wt if w is None else w * wt
    if ddof is None:
        ddof = 0 if bias else 1
    if w is None:
        mean = fn.mean(x, 1, keepdims=True)
        # too few observations: NaN or inf, as NumPy's (which warns) and JAX's
        factor = float(max(n_obs - ddof, 0))
        d = x - mean
        out = fn.matmul(d, fn.swap_axes(d, 0, 1)) / factor
    else:
        total = fn.sum(w)
        mean = fn.sum(x * w, 1, keepdims=True) / total
        if aweights is None:
            factor = total - ddof
        else:
            aw = fn.cast(as_tensor(aweights, op="cov"), x.dtype)
            factor = total - ddof * fn.sum(w * aw) / total
        factor = fn.maximum(factor, 0.0)
        d = x - mean
        out = fn.matmul(d * w, fn.swap_axes(d, 0, 1)) / factor
    return fn.squeeze(out, (0, 1)) if out.shape == (1, 1) else out


def corrcoef(x, y=None, rowvar: bool = True) -> Tensor:
    """The correlation coefficients of the variables (NumPy's and JAX's ``corrcoef``):
    :func:`cov` divided by the outer product of the standard deviations, clipped to
    ``[-1, 1]``.

    Args:
        x: a 1-D or 2-D tensor or array (variables in rows unless ``rowvar=False``).
        y: more variables.
        rowvar: variables in rows (default True).

    Returns:
        ``(V, V)`` (a 0-d tensor for one variable).
    """
    c = cov(x, y, rowvar)
    if c.ndim == 0:
        return c / c
    d = fn.sqrt(diagonal(c))
    return fn.clip(c / fn.unsqueeze(d, 1) / fn.unsqueeze(d, 0), -1.0, 1.0)


def real(val) -> Tensor:
    """The real part (NumPy's and JAX's ``real``): the value itself (nabla has no complex
    dtypes).

    Args:
        val: a tensor, or a nested list or NumPy array.

    Returns:
        ``val`` as a tensor.
    """
    return as_tensor(val, op="real")


def imag(val) -> Tensor:
    """The imaginary part (NumPy's and JAX's ``imag``): zeros like ``val`` (nabla has no
    complex dtypes).

    Args:
        val: a tensor, or a nested list or NumPy array.

    Returns:
        Zeros of ``val``'s shape and dtype.
    """
    return fn.zeros_like(as_tensor(val, op="imag"))


def conj(x) -> Tensor:
    """The complex conjugate (NumPy's and JAX's ``conj``/``conjugate``): ``x`` itself
    (nabla has no complex dtypes).

    Args:
        x: a tensor, or a nested list or NumPy array.

    Returns:
        ``x`` as a tensor.
    """
    return as_tensor(x, op="conj")


conjugate = conj


def _set_operands(op: str, ar1, ar2) -> tuple:
    a = ravel(as_tensor(ar1, op=op))
    b = ravel(as_tensor(ar2, op=op))
    if a.dtype is not b.dtype:
        dtype = promote_types(a.dtype, b.dtype)
        a, b = fn.cast(a, dtype), fn.cast(b, dtype)
    return a, b


def _chosen(values, mask, size, fill_value) -> Tensor:
    """The sorted ``values`` where ``mask`` holds: read at the call without ``size``;
    with it (JAX's static size, so it runs under ``compile`` and ``vmap``) the first
    ``size`` of them, padded with ``fill_value`` (the smallest one chosen by default)."""
    if size is None:
        return values[mask]
    idx = fn.nonzero(mask, size=int(size), fill_value=0)[0]
    picked = fn.take(values, idx, axis=0)
    count = fn.sum(fn.cast(mask, DType.int32))
    if fill_value is None:  # (JAX's default: the smallest value, the first chosen)
        fill_value = picked[0]
    return fn.where(fn.arange(int(size)) < count, picked, fill_value)


def union1d(ar1, ar2, *, size=None, fill_value=None) -> Tensor:
    """The sorted distinct values of both arrays (NumPy's and JAX's ``union1d``).

    Args:
        ar1: an array (flattened).
        ar2: another.
        size: JAX's static number of values (runs under ``compile``; padded with
            ``fill_value``); without it the number is read at the call.
        fill_value: the padding (default: the smallest value).

    Returns:
        A 1-D tensor.
    """
    a, b = _set_operands("union1d", ar1, ar2)
    return unique(fn.concatenate([a, b], 0), size=size, fill_value=fill_value)


def _unique_padded(x):
    """``(values, present)``: ``x``'s distinct values sorted, padded to ``x``'s length,
    and which of them are values (not padding)."""
    n = builtins.max(int(x.shape[0]), 1)
    values, counts = unique(x, return_counts=True, size=n)
    return values, counts > 0


def intersect1d(ar1, ar2, assume_unique: bool = False, return_indices: bool = False, *,
                size=None, fill_value=None) -> Tensor:  # fmt: skip
    """The sorted distinct values in both arrays (NumPy's and JAX's ``intersect1d``).

    Args:
        ar1: an array (flattened).
        ar2: another.
        assume_unique: accepted (the result is the same).
        return_indices: must be False.
        size: JAX's static number of values (padded with ``fill_value``).
        fill_value: the padding (default: the smallest value).

    Returns:
        A 1-D tensor.

    Raises:
        NotImplementedError: for ``return_indices=True``.
    """
    if return_indices:
        raise NotImplementedError("intersect1d: return_indices=True is not supported")
    a, b = _set_operands("intersect1d", ar1, ar2)
    values, present = _unique_padded(a)
    return _chosen(values, fn.logical_and(present, isin(values, b)), size, fill_value)


def setdiff1d(ar1, ar2, assume_unique: bool = False, *, size=None, fill_value=None) -> Tensor:
    """The sorted distinct values of ``ar1`` not in ``ar2`` (NumPy's and JAX's
    ``setdiff1d``).

    Args:
        ar1: an array (flattened).
        ar2: another.
        assume_unique: accepted (the result is the same).
        size: JAX's static number of values (padded with ``fill_value``).
        fill_value: the padding (default 0, as JAX's).

    Returns:
        A 1-D tensor.
    """
    a, b = _set_operands("setdiff1d", ar1, ar2)
    values, present = _unique_padded(a)
    keep = fn.logical_and(present, isin(values, b, invert=True))
    return _chosen(values, keep, size, 0 if fill_value is None else fill_value)


def setxor1d(ar1, ar2, assume_unique: bool = False, *, size=None, fill_value=None) -> Tensor:
    """The sorted distinct values in exactly one of the arrays (NumPy's and JAX's
    ``setxor1d``).

    Args:
        ar1: an array (flattened).
        ar2: another.
        assume_unique: accepted (the result is the same).
        size: JAX's static number of values (padded with ``fill_value``).
        fill_value: the padding (default: the smallest value).

    Returns:
        A 1-D tensor.
    """
    a, b = _set_operands("setxor1d", ar1, ar2)
    values, present = _unique_padded(fn.concatenate([a, b], 0))
    once = fn.not_equal(isin(values, a), isin(values, b))
    if values.dtype.is_float:  # NaN equals nothing, so it is never in both (NumPy's, JAX's)
        once = fn.logical_or(once, fn.is_nan(values))
    return _chosen(values, fn.logical_and(present, once), size, fill_value)


# ----------------------------------------------------------------------------- PyTorch's
def cdist(x1, x2, p: float = 2.0, compute_mode=None) -> Tensor:
    """PyTorch's ``cdist``: the ``p``-norm distances between each row of ``x1`` ``(..., P,
    M)`` and each row of ``x2`` ``(..., R, M)``, ``(..., P, R)``; for ``p = 2`` through
    ``|a|^2 + |b|^2 - 2 a.b`` (one matrix product, clamped at 0), else elementwise.

    Args:
        x1: ``(..., P, M)``.
        x2: ``(..., R, M)``.
        p: the norm's order (``inf`` too).
        compute_mode: accepted (PyTorch's choice of method).

    Returns:
        ``(..., P, R)``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for inputs of different row lengths.
    """
    a, b = as_tensor(x1, op="cdist"), as_tensor(x2, op="cdist")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-1]:
        raise OpError(f"cdist: x1 (..., P, M) and x2 (..., R, M) do not fit: {a.shape}, {b.shape}")
    if p == 2.0:
        sq = (
            fn.unsqueeze(fn.sum(a * a, -1), -1)
            + fn.unsqueeze(fn.sum(b * b, -1), -2)
            - 2.0 * fn.matmul(a, fn.swap_axes(b, -1, -2))
        )
        zero = sq <= 0
        return fn.where(zero, 0.0, fn.sqrt(fn.where(zero, 1.0, sq)))
    diff = fn.abs(fn.unsqueeze(a, -2) - fn.unsqueeze(b, -3))
    if p == math.inf:
        return fn.max(diff, -1)
    if p == 0:
        return fn.sum(fn.cast(diff != 0, diff.dtype), -1)
    total = fn.sum(diff ** float(p), -1)
    zero = total == 0
    return fn.where(zero, 0.0, fn.where(zero, 1.0, total) ** (1.0 / float(p)))


def bucketize(input, boundaries, *, out_int32: bool = False, right: bool = False) -> Tensor:  # noqa: A002
    """PyTorch's ``bucketize``: the index of each value's bucket among the sorted 1-D
    ``boundaries`` (``boundaries[i-1] < x <= boundaries[i]``; ``right=True``: ``<=`` on the
    left side instead), int64 (int32 with ``out_int32``).

    Args:
        input: the values.
        boundaries: sorted 1-D boundaries.
        out_int32: return int32.
        right: which side of a boundary equal values take.

    Returns:
        An integer tensor like ``input``.
    """
    x = as_tensor(input, op="bucketize")
    idx = searchsorted(boundaries, fn.reshape(x, (-1,)), "right" if right else "left")
    return fn.cast(fn.reshape(idx, x.shape), DType.int32 if out_int32 else DType.int64)


def diag_embed(input, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: A002
    """PyTorch's ``diag_embed``: matrices whose (``offset``) diagonal is ``input``'s last
    dim, in the plane of ``dim1`` and ``dim2`` of the result.

    Args:
        input: ``(..., n)``.
        offset: the diagonal (above the main one for a positive offset).
        dim1: the result's row dim.
        dim2: the result's column dim.

    Returns:
        The result, of ``input.ndim + 1`` dims.
    """
    x = as_tensor(input, op="diag_embed")
    k = int(offset)
    n = x.shape[-1]
    m = n + builtins.abs(k)
    # x padded to the matrix's size (zeros after for k >= 0, before for k < 0): row i of
    # the k-th diagonal holds its element i (k >= 0) or i - |k|
    pads = [(0, 0)] * (x.ndim - 1) + [(0, k) if k >= 0 else (-k, 0)]
    column = fn.unsqueeze(fn.pad(x, pads), -1)
    out = column * fn.eye(m, m, k=k, dtype=x.dtype)
    rank = out.ndim
    d1, d2 = (norm_axis("diag_embed", d, rank, out.shape) for d in (dim1, dim2))
    return fn.moveaxis(out, (rank - 2, rank - 1), (d1, d2))


def cartesian_prod(*tensors) -> Tensor:
    """PyTorch's ``cartesian_prod``: every combination of the 1-D ``tensors``' elements,
    ``(N, len(tensors))`` (one tensor: itself).

    Args:
        *tensors: 1-D tensors.

    Returns:
        The combinations, the last tensor's element varying fastest.
    """
    ts = [as_tensor(t, op="cartesian_prod") for t in tensors]
    if len(ts) == 1:
        return ts[0]
    grids = fn.meshgrid(*ts, indexing="ij")
    return fn.stack([fn.reshape(g, (-1,)) for g in grids], -1)


def combinations(input, r: int = 2, with_replacement: bool = False) -> Tensor:  # noqa: A002
    """PyTorch's ``combinations``: the ``r``-element combinations of the 1-D ``input``, in
    order, ``(N, r)``.

    Args:
        input: a 1-D tensor.
        r: the combinations' length.
        with_replacement: allow repeated elements.

    Returns:
        ``(N, r)``.
    """
    import itertools  # noqa: PLC0415 - stdlib

    x = as_tensor(input, op="combinations")
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    idx = np.array(list(pick(range(x.shape[0]), int(r))), dtype=np.int64).reshape(-1, int(r))
    return fn.take(x, fn.constant(idx), axis=0)


def logcumsumexp(input, dim: int) -> Tensor:  # noqa: A002
    """PyTorch's ``logcumsumexp``: the running ``logsumexp`` along ``dim``, stably (the
    running maximum taken out).

    Args:
        input: a float tensor.
        dim: the dim.

    Returns:
        A tensor like ``input``.
    """
    x = as_tensor(input, op="logcumsumexp")
    d = norm_axis("logcumsumexp", dim, x.ndim, x.shape)
    m = fn.stop_gradient(fn.max(x, d, keepdims=True))
    m = fn.where(fn.is_inf(m), 0.0, m)
    return fn.log(fn.cumsum(fn.exp(x - m), d)) + m


def take_along_dim(input, indices, dim=None) -> Tensor:  # noqa: A002
    """PyTorch's ``take_along_dim``: ``take_along_axis``, over the flattened input when
    ``dim`` is None.

    Args:
        input: the tensor.
        indices: integer indices (broadcasting along the other dims).
        dim: the dim, or None for the flattened input.

    Returns:
        The values.
    """
    x = as_tensor(input, op="take_along_dim")
    idx = as_tensor(indices, op="take_along_dim")
    if dim is None:
        return fn.take_along_axis(fn.reshape(x, (-1,)), fn.reshape(idx, (-1,)), 0)
    return fn.take_along_axis(x, idx, dim)


def tensor_split(input, indices_or_sections, dim: int = 0) -> list:  # noqa: A002
    """PyTorch's ``tensor_split``: :func:`array_split` (``n`` nearly equal parts, or at
    the given indices) along ``dim``.

    Args:
        input: the tensor.
        indices_or_sections: a count or a list of split indices.
        dim: the dim.

    Returns:
        A list of tensors.
    """
    return array_split(input, indices_or_sections, dim)


def var_mean(input, dim=None, *, correction=1, keepdim: bool = False, unbiased=None):  # noqa: A002
    """PyTorch's ``var_mean``: ``(var, mean)`` over ``dim``, the variance with PyTorch's
    default ``correction=1`` (``unbiased=False``: 0).

    Args:
        input: the tensor.
        dim: the dims (default all).
        correction: subtracted from the count (default 1).
        keepdim: keep the reduced dims.
        unbiased: PyTorch's older form of ``correction``.

    Returns:
        ``(var, mean)``.
    """
    if unbiased is not None:
        correction = 1 if unbiased else 0
    x = as_tensor(input, op="var_mean")
    var = fn.var(x, dim, keepdim, correction)
    return var, fn.mean(x, dim, keepdim)


def std_mean(input, dim=None, *, correction=1, keepdim: bool = False, unbiased=None):  # noqa: A002
    """PyTorch's ``std_mean``: ``(std, mean)`` over ``dim`` (``correction=1`` by default).

    Args:
        input: the tensor.
        dim: the dims (default all).
        correction: subtracted from the count (default 1).
        keepdim: keep the reduced dims.
        unbiased: PyTorch's older form of ``correction``.

    Returns:
        ``(std, mean)``.
    """
    var, mean = var_mean(input, dim, correction=correction, keepdim=keepdim, unbiased=unbiased)
    return fn.sqrt(var), mean


mgrid = _GridMaker(False, "mgrid")
ogrid = _GridMaker(True, "ogrid")


# ----------------------------------------------------------------------------- segments
def _segment(op: str, data, segment_ids, num_segments, mode: str, empty):
    """``data``'s rows combined by ``mode`` into ``num_segments`` rows by ``segment_ids``;
    ids outside ``[0, num_segments)`` are dropped (JAX's default): they go to one extra
    row, cut off at the end. ``empty(dtype)`` fills the segments no row reaches."""
    x = as_tensor(data, op=op)
    ids = as_tensor(segment_ids, op=op)
    if not ids.dtype.is_int or ids.ndim != 1 or x.ndim < 1 or ids.shape[0] != x.shape[0]:
        raise OpError(
            f"{op}: segment_ids must be 1-D integers, one per row of data; got "
            f"{ids.dtype.value}{list(ids.shape)} for data of shape {tuple(x.shape)}"
        )
    if num_segments is None:
        if not readable_now(ids):
            raise OpError(f"{op}: num_segments is needed under compile/vmap (a static size)")
        num_segments = int(ids.numpy().max()) + 1 if ids.shape[0] else 0
    n = int(num_segments)
    if n < 0:
        raise OpError(f"{op}: num_segments must be >= 0, got {n}")
    ids = fn.cast(ids, DType.int32)
    inside = (ids >= 0) & (ids < n)
    slot = fn.where(inside, ids, fn.full_like(ids, n))
    base = fn.full((n + 1, *x.shape[1:]), empty(x.dtype), dtype=x.dtype)
    return _along(fn.scatter(base, slot, x, 0, mode), 0, 0, n)


def _lowest(dt: DType):
    return -math.inf if dt.is_float else (False if dt.is_bool else int(np.iinfo(dt.numpy).min))


def _highest(dt: DType):
    return math.inf if dt.is_float else (True if dt.is_bool else int(np.iinfo(dt.numpy).max))


def _segment_function(kind: str, combine: str, empty, what: str):
    """JAX's ``jax.ops.segment_<kind>``: rows combined by the scatter mode ``combine``."""
    name = f"segment_{kind}"

    def segment(
        data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
        bucket_size=None, mode=None,
    ) -> Tensor:  # fmt: skip
        return _segment(name, data, segment_ids, num_segments, combine, empty)

    segment.__name__ = segment.__qualname__ = name
    segment.__doc__ = f"""JAX's ``jax.ops.{name}``: {what}; ids outside
    ``[0, num_segments)`` are dropped.

    Args:
        data: ``(N, ...)`` rows.
        segment_ids: ``(N,)`` integers, each row's segment.
        num_segments: the number of segments (static; by default ``max(segment_ids) + 1``,
            read at the call).
        indices_are_sorted: a hint, accepted.
        unique_indices: a hint, accepted.
        bucket_size: accepted (one scatter serves every size).
        mode: None or ``"drop"``/``"fill"`` (ids outside are dropped either way).

    Returns:
        ``(num_segments, ...)``.
    """
    return segment


segment_sum = _segment_function("sum", "add", lambda dt: 0, "each segment's sum (0 where none)")
segment_prod = _segment_function("prod", "mul", lambda dt: 1, "each segment's product (1 if none)")
segment_max = _segment_function(
    "max", "max", _lowest, "each segment's maximum (the dtype's lowest value where none)"
)
segment_min = _segment_function(
    "min", "min", _highest, "each segment's minimum (the dtype's highest value where none)"
)
