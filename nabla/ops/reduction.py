"""Reductions (sum, max, min, prod, argmax, argmin), cumsum, cumprod, and composites built on them
(mean, var, std, logsumexp, all, any, softmax, logsoftmax).

``axis`` is an int, a tuple of ints, or None (all axes); ``keepdims`` keeps reduced axes as
size 1. Kernels receive physical axes (shifted past the vmap batch prefix).
"""

from __future__ import annotations

import collections
import math

import numpy as np

from ..core.dtypes import DType, get_default_dtype, promote_types
from ..core.ir import SymDim, note_size_decision
from ..runtime.tensor import Tensor
from . import spmd
from ._util import as_tensor, is_scalar, jnp_dtype_slot, norm_axes, norm_axis, readable_now
from .base import Operation, OpError
from .functions import fn, provide

__all__ = [
    "reduce_sum",
    "sum",
    "reduce_max",
    "max",
    "reduce_min",
    "min",
    "prod",
    "mean",
    "var",
    "std",
    "logsumexp",
    "argmax",
    "argsort",
    "nonzero",
    "argwhere",
    "sort",
    "top_k",
    "argmin",
    "cumsum",
    "cumprod",
    "all",
    "any",
    "minmax",
    "softmax",
    "logsoftmax",
    "ReduceOperation",
]


def _reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _expand_back(ct, in_shape, axes, keepdims):
    """Broadcast a reduced cotangent back to the input's logical shape."""

    if not keepdims:
        ct = fn.reshape(ct, _reduced_shape(in_shape, axes, True))
    return fn.broadcast_to(ct, in_shape)


class ReduceOperation(Operation):
    """Reduction over ``axes`` (normalized, sorted) with ``keepdims``."""

    def __call__(self, x, axis=None, keepdims=False):
        if not isinstance(x, Tensor):
            x = as_tensor(x, op=self.name)
        axes = norm_axes(self.name, axis, x.ndim, x.shape)
        return self.bind([self.widen(x)], {"axes": axes, "keepdims": bool(keepdims)})

    def widen(self, x):
        """The input as this reduction accumulates it (sum and product: in int32 for
        integers narrower than that)."""
        return x

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"axes": tuple(a + nb for a in kwargs["axes"]), "keepdims": kwargs["keepdims"]}

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        # a reduced dim that is split leaves partial terms of this reduction's kind
        return spmd.reduce_rule(
            in_shapes[0], kwargs["axes"], kwargs["keepdims"], self.partial_reduce
        )

    def infer(self, shapes, dtypes, kwargs):
        shape = shapes[0]
        for a in kwargs["axes"]:
            if shape[a] == 0 and self.name in ("reduce_max", "reduce_min"):
                raise OpError(f"{self.name}: zero-size axis {a} in shape {shape} has no identity")
        return [_reduced_shape(shape, kwargs["axes"], kwargs["keepdims"])], [
            self.out_dtype(dtypes[0])
        ]

    def out_dtype(self, d):
        return d


def _widen_small_int(x):
    # JAX's rule (NumPy and PyTorch widen further, to int64 and uint64): an int8/int16 sum
    # or product accumulates in int32 and a uint8/uint16 one in uint32, instead of wrapping
    # at 127 or 255. Bool already gives int32 (``out_dtype``).
    d = x.dtype
    if d.is_int and not d.is_bool and d.itemsize < 4:
        return x.cast(DType.uint32 if d.is_unsigned else DType.int32)
    return x


class ReduceSumOp(ReduceOperation):
    """Sum over ``axis`` (``nb.reduce_sum``, the op behind :func:`nabla.sum`).

    int8, int16 and bool tensors sum in int32 and uint8, uint16 ones in uint32, as in JAX;
    wider integers and floats keep their dtype (no widening to int64, unlike NumPy). An
    empty reduction gives 0.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.

    Returns:
        A tensor of ``x``'s dtype (int32 for bool, int8 and int16; uint32 for uint8 and
        uint16).

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
        ValueError: for a repeated axis.
    """

    name = "reduce_sum"
    linear = True
    partial_reduce = "sum"
    widen = staticmethod(_widen_small_int)

    def out_dtype(self, d):
        return DType.int32 if d.is_bool else d

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x = primals[0]
        return [_expand_back(cotangents[0], x.shape, kwargs["axes"], kwargs["keepdims"])]


class ReduceProdOp(ReduceOperation):
    """Product over ``axis`` (the op behind :func:`nabla.prod`).

    int8, int16 and bool tensors multiply in int32 and uint8, uint16 ones in uint32, as in
    JAX; an empty reduction gives 1. The gradient is exact when ``x`` holds zeros.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.

    Returns:
        A tensor of ``x``'s dtype (int32 for bool, int8 and int16; uint32 for uint8 and
        uint16).

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
        ValueError: for a repeated axis.
    """

    name = "reduce_prod"
    partial_reduce = "prod"
    widen = staticmethod(_widen_small_int)

    def out_dtype(self, d):
        return DType.int32 if d.is_bool else d

    def _others(self, x, kwargs):
        """d prod / d x_i: the product of all the other elements, built from multiplies
        only (no division, no select), so it is exact with zeros present and its own
        derivatives are too (hessians of ``prod`` at zeros)."""
        axes = kwargs["axes"]
        if not axes:
            return fn.ones_like(x)
        kept = [d for d in range(x.ndim) if d not in axes]
        perm = kept + list(axes)
        n = 1
        for a in axes:
            n *= x.shape[a]
        moved = fn.permute(x, perm)
        flat = fn.reshape(moved, (*moved.shape[: len(kept)], n))
        others = _products_of_others(flat)
        back = fn.reshape(others, moved.shape)
        inverse = [perm.index(d) for d in range(x.ndim)]
        return fn.permute(back, inverse)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x = primals[0]
        ct = _expand_back(cotangents[0], x.shape, kwargs["axes"], kwargs["keepdims"])
        return [ct * self._others(x, kwargs)]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        x = primals[0]
        return [
            reduce_sum(tangents[0] * self._others(x, kwargs), kwargs["axes"], kwargs["keepdims"])
        ]


def _products_of_others(x: Tensor) -> Tensor:
    """``out[..., i] = prod_{j != i} x[..., j]`` along the last axis, by a tree of pairwise
    products (O(n) multiplies over log2(n) levels): the products of the other pairs times
    each element's partner."""
    n = x.shape[-1]
    if isinstance(n, SymDim):  # the tree's levels are fixed by this size
        note_size_decision(n, "the levels of prod's derivative")
    if n <= 1:  # (0: an empty axis, whose derivative is empty)
        return fn.ones_like(x)
    if n % 2:  # a neutral partner for the last element
        pad = fn.ones((*x.shape[:-1], 1), dtype=x.dtype, device=x.device)
        return _products_of_others(fn.concatenate([x, pad], -1))[..., :n]
    first, second = x[..., 0::2], x[..., 1::2]
    rest = _products_of_others(first * second)  # per pair: the product of the other pairs
    pairs = fn.stack([rest * second, rest * first], -1)  # (..., n / 2, 2)
    return fn.reshape(pairs, (*x.shape[:-1], n))


class _ExtremumOp(ReduceOperation):
    """Max/min reduction; the gradient is shared evenly among the elements at the extremum."""

    @staticmethod
    def _hits(x, out, kwargs):
        """1 where ``x`` equals its extremum ``out``, else 0 (``x``'s dtype and shape)."""
        axes = kwargs["axes"]
        outk = out if kwargs["keepdims"] else _expand_back(out, x.shape, axes, False)
        return (x == outk).cast(x.dtype)

    def _weights(self, x, out, kwargs):
        # Gradient is shared evenly among the elements equal to the extremum (JAX's rule).
        hit = self._hits(x, out, kwargs)
        return hit / reduce_sum(hit, kwargs["axes"], True)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        # each extremum's share of the cotangent is divided out at the reduced size, then
        # placed with the mask: one pass over the input less than ct * (hit / count)
        x, axes, keepdims = primals[0], kwargs["axes"], kwargs["keepdims"]
        hit = self._hits(x, outputs[0], kwargs)
        ct = cotangents[0]
        if not keepdims:
            ct = fn.reshape(ct, _reduced_shape(x.shape, axes, True))
        share = ct / reduce_sum(hit, axes, True)
        return [hit * fn.broadcast_to(share, x.shape)]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        x = primals[0]
        w = self._weights(x, outputs[0], kwargs)
        return [reduce_sum(tangents[0] * w, kwargs["axes"], kwargs["keepdims"])]


class ReduceMaxOp(_ExtremumOp):
    """Maximum over ``axis`` (``nb.reduce_max``, the op behind :func:`nabla.max`).

    NaN propagates (like NumPy's ``max``). The gradient is shared evenly among the elements
    equal to the maximum, as in JAX. The dtype is kept.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.

    Returns:
        A tensor of ``x``'s dtype (with ``dim``: the pair).

    Raises:
        ValueError: (:class:`nabla.OpError`) for a zero-size reduced axis (no identity), or a
            repeated axis.
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
    """

    name = "reduce_max"
    partial_reduce = "max"


class ReduceMinOp(_ExtremumOp):
    """Minimum over ``axis`` (``nb.reduce_min``, the op behind :func:`nabla.min`).

    NaN propagates (like NumPy's ``min``). The gradient is shared evenly among the elements
    equal to the minimum, as in JAX. The dtype is kept.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.

    Returns:
        A tensor of ``x``'s dtype (with ``dim``: the pair).

    Raises:
        ValueError: (:class:`nabla.OpError`) for a zero-size reduced axis (no identity), or a
            repeated axis.
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
    """

    name = "reduce_min"
    partial_reduce = "min"


class WindowMaxOp(ReduceMaxOp):
    """The maximum over one axis whose gradient goes to the **first** maximum along it
    (row-major order), as JAX's and PyTorch's max pooling do (``reduce_window``'s
    select-and-scatter, ``max_pool2d``'s indices): ``max_pool2d`` reduces each window's
    taps with it. The value is ``reduce_max``'s, and so is its lowering (``backend_name``);
    ``nb.max`` keeps the even split among ties, as JAX's ``max``."""

    name = "window_max"
    backend_name = "reduce_max"

    @staticmethod
    def _hits(x, out, kwargs):
        (axis,) = kwargs["axes"]
        outk = out if kwargs["keepdims"] else _expand_back(out, x.shape, (axis,), False)
        hit = x == outk
        # the first hit along the axis: a hit with no hit before it
        first = fn.cumsum(hit.cast(DType.int32), axis) == 1
        return fn.logical_and(hit, first).cast(x.dtype)

    def _weights(self, x, out, kwargs):
        return self._hits(x, out, kwargs)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x, axes = primals[0], kwargs["axes"]
        ct = cotangents[0]
        if not kwargs["keepdims"]:
            ct = fn.reshape(ct, _reduced_shape(x.shape, axes, True))
        return [self._hits(x, outputs[0], kwargs) * fn.broadcast_to(ct, x.shape)]


reduce_sum = ReduceSumOp()
reduce_prod = ReduceProdOp()
reduce_max = ReduceMaxOp()
reduce_min = ReduceMinOp()
window_max = WindowMaxOp()


def _empty_dims(dim) -> bool:
    return isinstance(dim, tuple | list) and not dim


def _torch_names(op, axis, dim, keepdims=False, keepdim=None):
    """``(axis, keepdims)`` from NumPy's names or PyTorch's ``dim``/``keepdim`` (both
    spellings of one argument at once is a ``TypeError`` naming ``op``)."""
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{op}: pass axis or dim, not both")
        # PyTorch's empty dim reduces every dim (all/any keep them, as PyTorch's); NumPy's
        # empty axis tuple none
        axis = None if _empty_dims(dim) and op not in ("all", "any") else dim
    if keepdim is not None:
        keepdims = keepdim
    return axis, keepdims


def _masked(op: str, x, where, fill):
    """``x`` with ``fill`` where the mask ``where`` (NumPy's and JAX's ``where=``, broadcast
    against ``x``) is False; ``x`` itself without a mask."""
    if where is None:
        return x
    x = as_tensor(x, op=op)
    mask = as_tensor(where, op=op)
    if not mask.dtype.is_bool:
        mask = fn.cast(mask, DType.bool)
    try:
        fits = np.broadcast_shapes(tuple(mask.shape), tuple(x.shape)) == tuple(x.shape)
    except ValueError:
        fits = False
    if not fits:
        raise OpError(
            f"{op}: where= of shape {mask.shape} does not broadcast to the input's {x.shape}"
        )
    return fn.where(mask, x, fill)


def _where_count(op: str, x, where, axes, keepdims):
    """How many elements ``where`` selects over ``axes`` (a float tensor like the reduced
    ``x``)."""
    ones = _masked(op, fn.ones_like(x), where, 0.0)
    return reduce_sum(ones, axes, keepdims)


def sum(  # noqa: A001
    x, axis=None, keepdims=False, *, dtype=None, dim=None, keepdim=None, initial=None, where=None
):
    """Sum of the elements over ``axis`` (NumPy's ``sum``; also ``x.sum(...)``).

    int8, int16 and bool tensors sum in int32 and uint8, uint16 ones in uint32, as in JAX;
    wider integers and floats keep their dtype (no widening to int64, unlike NumPy). An
    empty reduction gives 0.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.
        dtype: compute in (and return) this dtype, as NumPy and JAX (``x`` is cast first).
        dim: PyTorch's name for ``axis`` (``torch.sum(x, dim=1)``).
        keepdim: PyTorch's name for ``keepdims``.
        initial: added to the sum (NumPy's and JAX's).
        where: a bool mask broadcasting against ``x``: only its True elements are summed.

    Returns:
        A tensor of ``x``'s dtype (int32 for bool, int8 and int16; uint32 for uint8 and
        uint16), or of
        ``dtype``.

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
        ValueError: for a repeated axis.

    Example:
        >>> nb.sum(nb.constant([[1, 2], [3, 4]]), axis=0).tolist()
        [4, 6]
    """
    if not isinstance(x, Tensor):
        x = as_tensor(x, op="sum")
    keepdims, dtype = jnp_dtype_slot("sum", keepdims, dtype, "keepdims")
    axis, keepdims = _torch_names("sum", axis, dim, keepdims, keepdim)
    x = _masked("sum", x, where, 0)
    if dtype is not None:
        out = reduce_sum(x.cast(dtype), axis, keepdims).cast(dtype)
    else:
        out = reduce_sum(x, axis, keepdims)
    return out if initial is None else out + initial


def max(  # noqa: A001
    x, axis=None, keepdims=False, *, dim=None, keepdim=None, initial=None, where=None
):
    """Maximum of the elements over ``axis`` (NumPy's ``max``; also ``x.max(...)``).

    NaN propagates. The gradient is shared evenly among the elements equal to the
    maximum, as in JAX.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.
        dim: PyTorch's name for ``axis``: with it the result is PyTorch's ``(values,
            indices)`` pair (``MinMax``), the gradient going to the index returned.
        keepdim: PyTorch's name for ``keepdims``.
        initial: a value the result is at least (NumPy's and JAX's).
        where: a bool mask broadcasting against ``x``: its True elements only (needs
            ``initial``, as JAX's).

    A tensor or array in ``axis``'s place is PyTorch's ``torch.max(a, b)``: the elementwise
    :func:`nabla.maximum`.

    Returns:
        A tensor of ``x``'s dtype.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a zero-size reduced axis (no identity), or a
            repeated axis.
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
    """
    if dim is not None:
        return extreme_along(x, axis, dim, keepdim, "max")
    if isinstance(axis, Tensor | np.ndarray):  # PyTorch's torch.max(a, b): elementwise
        return fn.maximum(x, axis)
    if not isinstance(x, Tensor):
        x = as_tensor(x, op="max")
    if where is not None:
        if initial is None:  # (JAX's rule: a mask needs a value for what it leaves out)
            raise ValueError(
                "max: a where= mask needs initial= (the maximum has no identity to fill "
                "the masked-out elements with)"
            )
        x = _masked("max", x, where, initial)
    out = reduce_max(x, axis, keepdims)
    return out if initial is None else fn.maximum(out, initial)


MinMax = collections.namedtuple("MinMax", "values indices")


def extreme_along(x, axis, dim, keepdim, which: str) -> MinMax:
    """PyTorch's ``torch.max(x, dim=d)``/``x.max(dim=d)``: the ``(values, indices)`` pair,
    the gradient going to the index returned (the first extreme of a tie)."""
    if axis is not None:
        raise TypeError(f"{which}: pass axis or dim, not both")
    x = as_tensor(x, op=which)
    pick = argmax if which == "max" else argmin
    keep = bool(keepdim)
    if isinstance(dim, tuple | list):
        whole = max if which == "max" else min
        return MinMax(whole(x, tuple(dim), keep), pick(x, dim, keepdims=keep))
    return MinMax(first_extreme(x, dim, keep, which), pick(x, dim, keepdims=keep))


def first_extreme(x, axis: int, keepdims: bool, which: str):
    """The maximum (``which="max"``) or minimum over one ``axis`` whose gradient goes to the
    first extreme along it, as PyTorch's ``x.max(dim=d)`` gives it to the index it returns
    (``nb.max`` shares it among ties, as JAX). Integers have no gradient: their
    ``max``/``min``."""
    x = as_tensor(x, op=which)
    if not x.dtype.is_float:
        return (max if which == "max" else min)(x, axis, keepdims)
    if which == "max":
        return window_max(x, axis, keepdims)
    return -window_max(-x, axis, keepdims)


def min(  # noqa: A001
    x, axis=None, keepdims=False, *, dim=None, keepdim=None, initial=None, where=None
):
    """Minimum of the elements over ``axis`` (NumPy's ``min``; also ``x.min(...)``).

    NaN propagates. The gradient is shared evenly among the elements equal to the
    minimum, as in JAX.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.
        dim: PyTorch's name for ``axis``: with it the result is PyTorch's ``(values,
            indices)`` pair (``MinMax``), the gradient going to the index returned.
        keepdim: PyTorch's name for ``keepdims``.
        initial: a value the result is at most (NumPy's and JAX's).
        where: a bool mask broadcasting against ``x``: its True elements only (needs
            ``initial``, as JAX's).

    A tensor or array in ``axis``'s place is PyTorch's ``torch.min(a, b)``: the elementwise
    :func:`nabla.minimum`.

    Returns:
        A tensor of ``x``'s dtype.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a zero-size reduced axis (no identity), or a
            repeated axis.
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
    """
    if dim is not None:
        return extreme_along(x, axis, dim, keepdim, "min")
    if isinstance(axis, Tensor | np.ndarray):  # PyTorch's torch.min(a, b): elementwise
        return fn.minimum(x, axis)
    if not isinstance(x, Tensor):
        x = as_tensor(x, op="min")
    if where is not None:
        if initial is None:  # (JAX's rule: a mask needs a value for what it leaves out)
            raise ValueError(
                "min: a where= mask needs initial= (the minimum has no identity to fill "
                "the masked-out elements with)"
            )
        x = _masked("min", x, where, initial)
    out = reduce_min(x, axis, keepdims)
    return out if initial is None else fn.minimum(out, initial)


def prod(
    x, axis=None, keepdims=False, *, dtype=None, dim=None, keepdim=None, initial=None, where=None
):
    """Product of the elements over ``axis`` (NumPy's ``prod``; also ``x.prod(...)``).

    int8, int16 and bool tensors multiply in int32 and uint8, uint16 ones in uint32, as in
    JAX; an empty reduction gives 1. The gradient is exact when ``x`` holds zeros.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.
        dtype: compute in (and return) this dtype, as NumPy and JAX (``x`` is cast first).
        dim: PyTorch's name for ``axis``.
        keepdim: PyTorch's name for ``keepdims``.
        initial: multiplied into the product (NumPy's and JAX's).
        where: a bool mask broadcasting against ``x``: only its True elements are multiplied.

    Returns:
        A tensor of ``x``'s dtype (int32 for bool, int8 and int16; uint32 for uint8 and
        uint16), or of
        ``dtype``.

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
        ValueError: for a repeated axis.
    """
    keepdims, dtype = jnp_dtype_slot("prod", keepdims, dtype, "keepdims")
    axis, keepdims = _torch_names("prod", axis, dim, keepdims, keepdim)
    if not isinstance(x, Tensor):
        x = as_tensor(x, op="prod")
    x = _masked("prod", x, where, 1)
    if dtype is not None:
        out = reduce_prod(x.cast(dtype), axis, keepdims).cast(dtype)
    else:
        out = reduce_prod(x, axis, keepdims)
    return out if initial is None else out * initial


def _count(x, axes):
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


def _float(x, op):
    x = as_tensor(x, op=op)
    return x if x.dtype.is_float else x.cast(get_default_dtype())


def mean(x, axis=None, keepdims=False, *, dtype=None, dim=None, keepdim=None, where=None):
    """Arithmetic mean over ``axis`` (NumPy's ``mean``; also ``x.mean(...)``).

    Computed as sum / count (so sharded reductions stay exact). Integer and bool tensors are
    cast to the default float dtype first; an empty reduction gives NaN.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.
        dtype: compute in (and return) this dtype, as NumPy and JAX (``x`` is cast first).
        dim: PyTorch's name for ``axis`` (``torch.mean(x, dim=1)``).
        keepdim: PyTorch's name for ``keepdims``.
        where: a bool mask broadcasting against ``x``: the mean of its True elements.

    Returns:
        A float tensor (of ``dtype`` when given).

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
        ValueError: for a repeated axis.

    Example:
        >>> nb.mean(nb.constant([1, 2])).item()
        1.5
    """
    keepdims, dtype = jnp_dtype_slot("mean", keepdims, dtype, "keepdims")
    axis, keepdims = _torch_names("mean", axis, dim, keepdims, keepdim)
    if dtype is not None:
        x = as_tensor(x, op="mean").cast(dtype)
    x = _float(x, "mean")
    axes = norm_axes("mean", axis, x.ndim, x.shape)
    if where is not None:  # the selected elements' sum over their count (NaN for none)
        w = _wide(x)
        out = reduce_sum(_masked("mean", w, where, 0.0), axes, keepdims)
        out = out / _where_count("mean", w, where, axes, keepdims)
        return out.cast(x.dtype if dtype is None else dtype)
    n = _count(x, axes)
    out = reduce_sum(_wide(x), axes, keepdims)
    out = _divide_by_count(out, n)
    return out.cast(x.dtype if dtype is None else dtype)


def _divide_by_count(total, n):
    """``total / n`` for an element count ``n``: NaN for none, made by a division
    (``0 * total / 0``), so ``debug_nans`` names the op that made it (a NaN constant would
    have counted as the user's data). A symbolic count (a dynamic dim under ``compile``)
    divides as a value computed at each call's size."""
    if isinstance(n, SymDim):
        count = fn.full((), n, dtype=total.dtype)
        return fn.where(count > 0, total / count, (total * 0.0) / count)
    if n > 0:
        return total * (1.0 / n)
    return (total * 0.0) / 0.0


def _wide(x):
    """A 16-bit float computed in float32, as JAX's mean and var do: the sum of two float16
    60000s overflows, and each rounding of a long float16 sum loses a digit."""
    return x.cast(DType.float32) if x.dtype in (DType.float16, DType.bfloat16) else x


def var(
    x,
    axis=None,
    keepdims=False,
    correction=None,
    *,
    ddof=None,
    dim=None,
    keepdim=None,
    unbiased=None,
    where=None,
    dtype=None,
):
    """Variance over ``axis``: ``sum((x - mean) ** 2) / (n - correction)``.

    Integer and bool tensors are cast to the default float dtype first. The result is NaN
    when ``n - correction <= 0``.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.
        correction: subtracted from the element count ``n``: 0 (default) gives the population
            variance (NumPy's ``ddof=0``), 1 the sample variance (PyTorch's default, taken
            when ``dim`` is given and neither ``correction`` nor ``ddof``).
        ddof: NumPy's and JAX's name for ``correction``; give one of the two.
        dim: PyTorch's name for ``axis``.
        keepdim: PyTorch's name for ``keepdims``.
        unbiased: PyTorch's older form: True is ``correction=1``, False ``correction=0``.
        where: a bool mask broadcasting against ``x``: over its True elements only.
        dtype: NumPy's and JAX's: ``x`` is cast to it first (a float one is the result's).

    Returns:
        A float tensor.

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
        ValueError: for a repeated axis, or both ``ddof`` and a nonzero ``correction``.
    """
    correction = _correction("var", correction, ddof, dim, unbiased)
    keepdims, jnp_dtype = jnp_dtype_slot("var", keepdims, dtype, "keepdims")
    if jnp_dtype is not None:
        x = as_tensor(x, op="var").cast(jnp_dtype)
    axis, keepdims = _torch_names("var", axis, dim, keepdims, keepdim)
    return _var(x, axis, keepdims, correction, "var", where)


def _var(x, axis, keepdims, correction, op: str, where=None):
    x = _float(x, op)
    axes = norm_axes(op, axis, x.ndim, x.shape)
    w = _wide(x)
    if where is not None:  # over the selected elements (NaN where too few)
        d = _masked(op, w - mean(w, axes, keepdims=True, where=where), where, 0.0)
        n = _where_count(op, w, where, axes, keepdims) - correction
        total = reduce_sum(d * d, axes, keepdims)  # (0 where none is selected: 0 / 0 is NaN)
        return (total / fn.where(n > 0, n, 0.0)).cast(x.dtype)
    d = w - mean(w, axes, keepdims=True)
    n = _count(x, axes) - correction
    return _divide_by_count(reduce_sum(d * d, axes, keepdims), n).cast(x.dtype)


def _correction(op, correction, ddof, dim=None, unbiased=None):
    """The count's correction from ``correction``, ``ddof`` or PyTorch's ``unbiased``: 0
    unless given, 1 (PyTorch's default) for a call with ``dim=`` that names none."""
    if unbiased is not None:
        if correction is not None or ddof is not None:
            raise ValueError(f"{op}: give unbiased, correction or ddof, not two of them")
        return 1 if unbiased else 0
    if ddof is None:
        if correction is None:
            return 1 if dim is not None else 0
        return correction
    if correction:
        raise ValueError(f"{op}: give ddof or correction, not both (got {ddof} and {correction})")
    return ddof


def std(
    x,
    axis=None,
    keepdims=False,
    correction=None,
    *,
    ddof=None,
    dim=None,
    keepdim=None,
    unbiased=None,
    where=None,
    dtype=None,
):
    """Standard deviation over ``axis``: ``sqrt(var(x, axis, keepdims, correction))``.

    Integer and bool tensors are cast to the default float dtype first.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.
        correction: subtracted from the element count: 0 (default, population; NumPy's
            ``ddof=0``) or 1 (sample; the default with ``dim``, as PyTorch's).
        ddof: NumPy's and JAX's name for ``correction``; give one of the two.
        dim: PyTorch's name for ``axis``.
        keepdim: PyTorch's name for ``keepdims``.
        unbiased: PyTorch's older form: True is ``correction=1``, False ``correction=0``.
        where: a bool mask broadcasting against ``x``: over its True elements only.
        dtype: NumPy's and JAX's: ``x`` is cast to it first (a float one is the result's).

    Returns:
        A float tensor.

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
        ValueError: for a repeated axis, or both ``ddof`` and a nonzero ``correction``.
    """

    keepdims, jnp_dtype = jnp_dtype_slot("std", keepdims, dtype, "keepdims")
    if jnp_dtype is not None:
        x = as_tensor(x, op="std").cast(jnp_dtype)
    axis, keepdims = _torch_names("std", axis, dim, keepdims, keepdim)
    correction = _correction("std", correction, ddof, dim, unbiased)
    x = _float(x, "std")
    # the root taken in float32 for a 16-bit float: its variance may exceed the dtype
    # (float16 [3e4, 4e4, 1]: variance 2.9e8, std 1.7e4) though the std does not
    return fn.sqrt(_var(_wide(x), axis, keepdims, correction, "std", where)).cast(x.dtype)


def logsumexp(
    x, axis=None, keepdims=False, *, b=None, return_sign=False, dim=None, keepdim=None, where=None
):
    """``log(sum(exp(x)))`` over ``axis``, computed stably (no overflow for large ``x``).

    The maximum is subtracted before ``exp`` (and treated as a constant in the gradient, which
    is ``softmax``); all ``-inf`` inputs give ``-inf``. Integer and bool tensors are cast to the
    default float dtype first.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.
        b: optional weights broadcasting against ``x``: ``log(sum(b * exp(x)))``, as
            ``jax.nn.logsumexp`` (keyword only here: the third place is ``keepdims``).
        return_sign: also return the sign of the weighted sum (a negative one otherwise
            gives NaN), as JAX: ``(log|sum|, sign)``.
        where: a bool mask broadcasting against ``x``: over its True elements only.
        dim: PyTorch's name for ``axis``.
        keepdim: PyTorch's name for ``keepdims``.

    Returns:
        A float tensor, or the pair ``(value, sign)`` with ``return_sign``.

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
        ValueError: for a repeated axis.
    """
    axis, keepdims = _torch_names("logsumexp", axis, dim, keepdims, keepdim)

    x = _masked("logsumexp", _float(x, "logsumexp"), where, -math.inf)
    if b is not None:  # (the axes count in the shape x and b broadcast to, as JAX's)
        weak = is_scalar(b)  # (a Python number takes x's dtype, as JAX's)
        b = as_tensor(b, None if not weak else x.dtype, op="logsumexp")
        dtype = promote_types(x.dtype, b.dtype) if b.dtype.is_float else x.dtype
        x, b = fn.cast(x, dtype), fn.cast(b, dtype)
        shape = fn.broadcast_shapes("logsumexp", tuple(x.shape), tuple(b.shape))
        x, b = fn.broadcast_to(x, shape), fn.broadcast_to(b, shape)
        # a zero weight drops its term whatever it is (inf, NaN), as JAX's: it masks
        x = fn.where(b != 0, x, -math.inf)
    axes = norm_axes("logsumexp", axis, x.ndim, x.shape)
    if _count(x, axes) == 0:  # the log of an empty sum, as JAX (max has no identity)
        shape = _reduced_shape(x.shape, axes, keepdims)
        empty = fn.full(shape, -math.inf, dtype=x.dtype, device=x.device)
        return (empty, fn.zeros_like(empty)) if return_sign else empty
    m = fn.stop_gradient(reduce_max(x, axes, True))

    m = fn.where(fn.is_inf(m), 0.0, m)
    terms = fn.exp(x - m)
    if b is not None:
        terms = terms * b
    total = reduce_sum(terms, axes, True)
    sign = None
    if return_sign:
        sign, total = fn.sign(total), fn.abs(total)
    s = fn.log(total) + m
    if not keepdims:
        s = fn.reshape(s, _reduced_shape(x.shape, axes, False))
        if sign is not None:
            sign = fn.reshape(sign, tuple(s.shape))
    return s if sign is None else (s, sign)


def _empty_axes(x, axes, op: str) -> bool:
    """Whether the axes ``axes`` of ``x`` hold no element (the result is then the empty
    input); under compile's dynamic sizes an empty axis at the trace is a decision on the
    size."""
    empty = _count(x, axes) == 0
    if empty:
        for a in axes:
            if isinstance(x.shape[a], SymDim):
                note_size_decision(x.shape[a], f"{op} over an empty axis")
    return empty


def softmax(x, axis=-1, *, dim=None, where=None):
    """``exp(x) / sum(exp(x))`` over ``axis``, computed stably: an int, a tuple of axes
    normalized together, or None for every axis (as JAX's ``jax.nn.softmax``); ``dim=`` is
    PyTorch's name. ``where=`` (JAX's), a bool mask broadcasting against ``x``: normalized
    over its True elements, 0 at the others."""

    axis = axis if dim is None else dim
    x = _float(x, "softmax")
    axes = norm_axes("softmax", axis, x.ndim, x.shape)
    if _empty_axes(x, axes, "softmax"):
        return x
    if where is not None:
        out = softmax(_masked("softmax", x, where, -math.inf), axes)
        return _masked("softmax", out, where, 0.0)
    e = fn.exp(x - fn.stop_gradient(reduce_max(x, axes, True)))
    return e / reduce_sum(e, axes, True)


def logsoftmax(x, axis=-1, *, dim=None, where=None):
    """``x - logsumexp(x)`` over ``axis`` (an int, a tuple, or None for every axis, as
    ``jax.nn.log_softmax``; PyTorch's ``dim=`` too), computed as ``(x - max) -
    log(sum(exp(x - max)))``: the large ``logsumexp`` of large logits is never formed, whose
    rounding would reach the result (logits of 1e5 lost two digits that way). ``where=``
    (JAX's), a bool mask broadcasting against ``x``: over its True elements, ``-inf`` at the
    others."""
    axis = axis if dim is None else dim
    x = _float(x, "logsoftmax")
    axes = norm_axes("logsoftmax", axis, x.ndim, x.shape)
    if _empty_axes(x, axes, "logsoftmax"):
        return x
    if where is not None:
        out = logsoftmax(_masked("logsoftmax", x, where, -math.inf), axes)
        return _masked("logsoftmax", out, where, -math.inf)
    m = fn.stop_gradient(reduce_max(x, axes, True))
    # no shift where every logit is -inf (the result is nan there, as JAX's); a +inf
    # logit makes the whole row nan, as in JAX and in softmax
    shifted = x - fn.where(m == -math.inf, 0.0, m)
    return shifted - fn.log(reduce_sum(fn.exp(shifted), axes, True))


def all(x, axis=None, keepdims=False, *, dim=None, keepdim=None, where=None):  # noqa: A001
    """Logical AND over ``axis``: True where every element is nonzero (NumPy's ``all``).

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.
        dim: PyTorch's name for ``axis``.
        keepdim: PyTorch's name for ``keepdims``.
        where: a bool mask broadcasting against ``x``: its True elements only.

    Returns:
        A bool tensor.

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
        ValueError: for a repeated axis.

    Example:
        >>> nb.all(nb.constant([1, 0])).item()
        False
    """
    axis, keepdims = _torch_names("all", axis, dim, keepdims, keepdim)
    x = as_tensor(x, op="all")
    axes = norm_axes("all", axis, x.ndim, x.shape)
    if _empty(x, axes):  # nothing to check: True, as NumPy and JAX
        return fn.full(_reduced_shape(x.shape, axes, keepdims), True, device=x.device)
    b = x if x.dtype.is_bool else x != 0
    b = _masked("all", b, where, True)  # (the masked-out elements: the identity)
    return reduce_min(b.cast(DType.int32), axes, keepdims) > 0


def _empty(x, axes) -> bool:
    return 0 in [x.shape[a] for a in axes]


def any(x, axis=None, keepdims=False, *, dim=None, keepdim=None, where=None):  # noqa: A001
    """Logical OR over ``axis``: True where some element is nonzero (NumPy's ``any``).

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, tuple of ints or None (default: all axes); negative axes count from the end.
        keepdims: keep the reduced axes as size-1 dims, so the result broadcasts against ``x``.
        dim: PyTorch's name for ``axis``.
        keepdim: PyTorch's name for ``keepdims``.
        where: a bool mask broadcasting against ``x``: its True elements only.

    Returns:
        A bool tensor.

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
        ValueError: for a repeated axis.

    Example:
        >>> nb.any(nb.constant([1, 0])).item()
        True
    """
    axis, keepdims = _torch_names("any", axis, dim, keepdims, keepdim)
    x = as_tensor(x, op="any")
    axes = norm_axes("any", axis, x.ndim, x.shape)
    if _empty(x, axes):  # nothing is nonzero: False, as NumPy and JAX
        return fn.full(_reduced_shape(x.shape, axes, keepdims), False, device=x.device)
    b = x if x.dtype.is_bool else x != 0
    b = _masked("any", b, where, False)  # (the masked-out elements: the identity)
    return reduce_max(b.cast(DType.int32), axes, keepdims) > 0


class ArgOp(Operation):
    """argmax/argmin along one axis (int64 result)."""

    differentiable = False

    def infer(self, shapes, dtypes, kwargs):
        shape = shapes[0]
        a = kwargs["axis"]
        if shape[a] == 0:
            raise OpError(f"{self.name}: zero-size axis {a} in shape {shape}")
        return [_reduced_shape(shape, (a,), kwargs["keepdims"])], [DType.int64]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"axis": kwargs["axis"] + nb, "keepdims": kwargs["keepdims"]}

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        # the position of an extremum is not a reduction of per-block terms: dim stays whole
        return spmd.reduce_rule(in_shapes[0], (kwargs["axis"],), kwargs["keepdims"], None)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [None]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [None]


class ArgmaxOp(ArgOp):
    name = "argmax"


class ArgminOp(ArgOp):
    name = "argmin"


_argmax = ArgmaxOp()
_argmin = ArgminOp()


class ArgsortOp(Operation):
    """The indices that sort ``x`` along ``axis`` (int64), stably: equal values keep their
    order (NaN last ascending, as NumPy and JAX). ``descending`` sorts from the largest,
    equal values still in their order (JAX's ``argsort(descending=True)``)."""

    name = "argsort"
    arity = 1
    differentiable = False

    def infer(self, shapes, dtypes, kwargs):
        return [shapes[0]], [DType.int64]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"axis": kwargs["axis"] + nb, "descending": kwargs["descending"]}

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        # an element's place depends on the whole sorted dim: it stays whole
        dims = [(f"d{i}",) for i in range(len(in_shapes[0]))]
        blocked = {f"d{kwargs['axis']}"}
        return spmd.FactorRule.parse_dims([dims], [dims], in_shapes, out_shapes, blocked=blocked)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [None]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [None]


_argsort = ArgsortOp()


def argsort(x, axis=-1, descending=False, stable=True, *, dim=None):
    """The indices that sort ``x`` along ``axis`` (NumPy's and JAX's ``argsort``; also
    ``x.argsort(...)``): an int64 tensor of ``x``'s shape. The sort is stable (equal values
    keep their order; ``stable=False`` is accepted and sorts the same); NaN goes last
    (first with ``descending=True``, as JAX's).

    ``axis=None`` sorts the flattened ``x`` (NumPy's and JAX's); ``dim=`` is PyTorch's name
    for ``axis``.

    Raises:
        IndexError: for an axis out of range.
    """
    torch_form = dim is not None
    axis = axis if dim is None else dim
    x = as_tensor(x, op="argsort")
    if axis is None:
        x, axis = fn.reshape(x, (-1,)), 0
    if x.ndim == 0:
        _no_axis_of_a_scalar("argsort", axis, torch_form)
        return fn.zeros((), dtype=DType.int64)
    axis = norm_axis("argsort", axis, x.ndim, x.shape)
    return _argsort.bind([x], {"axis": axis, "descending": bool(descending)})


def nonzero(x, *, size=None, fill_value=None) -> tuple:
    """The indices of ``x``'s nonzero elements, one int64 tensor per dim, in row-major
    order (NumPy's and JAX's ``nonzero``; ``nb.where(cond)`` with one argument too).

    How many there are depends on the values: without ``size`` they are counted at the call
    (as NumPy and PyTorch do), which a function being compiled, vmapped or traced in a loop
    body cannot do; there, as JAX asks under ``jit``, give ``size``. With ``size`` each
    result has that length: the first ``size`` indices, then ``fill_value`` (default 0).

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array (at least 1-D).
        size: the fixed length of the results (an int >= 0), or None.
        fill_value: the index past the last nonzero element (default 0), or one per dim.

    Returns:
        A tuple of ``x.ndim`` int64 tensors of one length.

    Raises:
        ValueError: for a 0-d ``x``, or no ``size`` where the values cannot be read now.
    """
    x = as_tensor(x, op="nonzero")
    if x.ndim == 0:
        raise OpError("nonzero: a 0-d tensor has no dims to index; use x.reshape(1)")
    flat = fn.reshape(x if x.dtype.is_bool else fn.not_equal(x, 0), (-1,))
    if size is None:
        if not readable_now(flat):
            raise OpError(
                f"nonzero: the number of nonzero elements of a tensor of shape {x.shape} "
                "depends on its values, which are not known while a function is compiled, "
                "vmapped or traced; pass size= (and fill_value=), as JAX asks under jit"
            )
        size = int(np.count_nonzero(flat.numpy()))
    size = int(size)
    if size < 0:
        raise OpError(f"nonzero: size must be >= 0, got {size}")
    n = flat.shape[0]
    # the nonzero positions first, in order (a stable sort of "is zero"), then the others
    order = argsort(fn.logical_not(flat))
    if size <= n:
        order = order[:size]
    else:
        order = fn.concatenate([order, fn.zeros((size - n,), dtype=DType.int64)], 0)
    count = reduce_sum(fn.cast(flat, DType.int64), (0,), False)  # (int64 sums stay int64)
    found = fn.less(fn.arange(size, dtype=DType.int64), count)
    fills = fill_value if isinstance(fill_value, tuple | list) else [fill_value] * x.ndim
    if len(fills) != x.ndim:
        raise OpError(f"nonzero: {len(fills)} fill values for {x.ndim} dims (shape {x.shape})")
    out = []
    for d, fill in enumerate(fills):
        stride = int(np.prod(x.shape[d + 1 :], dtype=np.int64))
        coord = fn.mod(fn.floor_div(order, stride), x.shape[d]) if x.shape[d] else order
        fill = 0 if fill is None else fill
        out.append(fn.where(found, coord, fn.full((size,), fill, dtype=DType.int64)))
    return tuple(out)


def argwhere(x, *, size=None, fill_value=None) -> Tensor:
    """The indices of ``x``'s nonzero elements as rows, ``(count, x.ndim)`` (NumPy's and
    JAX's ``argwhere``, PyTorch's ``nonzero``); ``size`` and ``fill_value`` as in
    :func:`nonzero`.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array (at least 1-D).
        size: the fixed number of rows, or None (counted at the call).
        fill_value: the index in rows past the last nonzero element (default 0).

    Returns:
        An int64 tensor of shape ``(count or size, x.ndim)`` (``(1 or 0, 0)`` for a 0-d
        ``x``, as NumPy's).
    """
    x = as_tensor(x, op="argwhere")
    if x.ndim == 0:  # one element with no dims to index: a row of no columns, or none
        rows = nonzero(fn.reshape(x, (1,)), size=size, fill_value=fill_value)[0]
        return fn.zeros((rows.shape[0], 0), dtype=DType.int64)
    return fn.stack(list(nonzero(x, size=size, fill_value=fill_value)), -1)


# values and where they came from: ``top_k``'s result and PyTorch's ``x.sort(dim=)`` and
# ``x.topk``'s (a tuple, so ``values, indices = ...`` unpacks it)
Sorted = collections.namedtuple("Sorted", "values indices")


def sort(x, axis=-1, descending=False, stable=True, *, dim=None):
    """``x`` sorted along ``axis`` (NumPy's and JAX's ``sort``), from the largest with
    ``descending``, stably (``stable=False`` sorts the same); differentiable: the gradient
    goes back to where each value came from. ``axis=None`` sorts the flattened ``x``;
    ``dim=`` is PyTorch's name for it (the values only: ``x.sort(dim)`` gives PyTorch's
    ``(values, indices)``).

    Raises:
        IndexError: for an axis out of range.
    """
    torch_form = dim is not None
    axis = axis if dim is None else dim
    x = as_tensor(x, op="sort")
    if axis is None:
        x, axis = fn.reshape(x, (-1,)), 0
    if x.ndim == 0:
        _no_axis_of_a_scalar("sort", axis, torch_form)
        return x
    return sorted_along(x, axis, descending, stable).values


def _no_axis_of_a_scalar(op: str, axis, torch_form: bool) -> None:
    """A 0-d tensor has no axis to sort along: NumPy's and JAX's error (PyTorch's ``dim=``
    form sorts it as it is)."""
    if not torch_form:
        raise IndexError(
            f"{op}: axis {axis} is out of range for a 0-d tensor (shape ()); axis=None sorts "
            "it as one element"
        )


def sorted_along(x, axis=-1, descending=False, stable=True, k=None, op="sort") -> Sorted:
    """``x``'s values sorted along ``axis`` and their indices (:class:`Sorted`), the first
    ``k`` of them when ``k`` is given (an int in ``[0, n]``; errors name ``op``)."""
    axis = norm_axis(op, axis, x.ndim, x.shape)
    if k is not None:
        n = x.shape[axis]
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= n:
            raise ValueError(f"{op}: k must be an int in [0, {n}] for shape {x.shape}, got {k!r}")
    idx = argsort(x, axis, descending, stable)
    if k is not None:
        idx = idx[(slice(None),) * axis + (slice(0, k),)]
    return Sorted(fn.take_along_axis(x, idx, axis), idx)


def top_k(x, k: int):
    """The ``k`` largest values along the last axis and their indices, largest first
    (JAX's ``lax.top_k``; equal values in their order): ``(values, indices)``.

    Raises:
        ValueError: unless ``0 <= k <=`` the last dim.
    """
    x = as_tensor(x, op="top_k")
    if x.ndim == 0:
        raise OpError("top_k: needs rank >= 1, got a 0-d tensor")
    return sorted_along(x, -1, descending=True, k=k, op="top_k")


def _arg(op, x, axis, keepdims):
    x = as_tensor(x, op=op.name)
    if axis is None:
        flat = fn.reshape(x, (-1,))
        out = op.bind([flat], {"axis": 0, "keepdims": False})
        if keepdims:
            out = fn.reshape(out, (1,) * x.ndim)
        return out
    if x.ndim == 0:
        raise OpError(f"{op.name}: axis {axis} given for a 0-d tensor")
    axis = norm_axis(op.name, axis, x.ndim, x.shape)
    return op.bind([x], {"axis": axis, "keepdims": bool(keepdims)})


def argmax(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Index of the maximum along ``axis`` (NumPy's ``argmax``; also ``x.argmax(...)``).

    Ties give the first occurrence; a NaN counts as the maximum (the first NaN wins).

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, or None (default) to index into the flattened tensor.
        keepdims: keep the reduced axis as a size-1 dim (with ``axis=None``: every dim).
        dim: PyTorch's name for ``axis`` (``torch.argmax(x, dim=1)``).
        keepdim: PyTorch's name for ``keepdims``.

    Returns:
        An int64 tensor (not differentiable).

    Raises:
        ValueError: (:class:`nabla.OpError`) for a zero-size axis, or an axis given for a
            0-d tensor.
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
    """
    axis, keepdims = _torch_names("argmax", axis, dim, keepdims, keepdim)
    return _arg(_argmax, x, axis, keepdims)


def argmin(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Index of the minimum along ``axis`` (NumPy's ``argmin``; also ``x.argmin(...)``).

    Ties give the first occurrence; a NaN counts as the minimum (the first NaN wins).

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis: int, or None (default) to index into the flattened tensor.
        keepdims: keep the reduced axis as a size-1 dim (with ``axis=None``: every dim).
        dim: PyTorch's name for ``axis`` (``torch.argmin(x, dim=1)``).
        keepdim: PyTorch's name for ``keepdims``.

    Returns:
        An int64 tensor (not differentiable).

    Raises:
        ValueError: (:class:`nabla.OpError`) for a zero-size axis, or an axis given for a
            0-d tensor.
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
    """
    axis, keepdims = _torch_names("argmin", axis, dim, keepdims, keepdim)
    return _arg(_argmin, x, axis, keepdims)


class _RunningOp(Operation):
    """A running reduction along ``kwargs["axis"]`` (cumsum, cumprod): the input's shape,
    bools counted in int32, the scanned dim kept whole on a mesh."""

    def infer(self, shapes, dtypes, kwargs):
        d = dtypes[0]
        return [shapes[0]], [DType.int32 if d.is_bool else d]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {**kwargs, "axis": kwargs["axis"] + nb}

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        # a running result crosses block boundaries: the scanned dim stays whole
        return spmd.aligned_rule(in_shapes, out_shapes, (kwargs["axis"],))


def _running_operand(op: str, x, axis, dtype):
    """``(x, axis)`` for a running reduction: ``x`` as a tensor (cast to ``dtype`` first),
    of rank >= 1, and ``axis`` normalized; errors name ``op``. ``axis=None`` runs over the
    flattened ``x`` (NumPy's and JAX's)."""
    x = as_tensor(x, op=op)
    if dtype is not None:
        x = x.cast(dtype)
    if axis is None:
        return fn.reshape(x, (-1,)), 0
    if x.ndim == 0:
        raise OpError(f"{op}: needs rank >= 1, got shape {x.shape}")
    return x, norm_axis(op, axis, x.ndim, x.shape)


class CumsumOp(_RunningOp):
    name = "cumsum"
    linear = True

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [cumsum(cotangents[0], kwargs["axis"], kwargs["exclusive"], not kwargs["reverse"])]


_cumsum = CumsumOp()


def cumsum(x, axis=-1, exclusive=False, reverse=False, *, dtype=None, dim=None):
    """Cumulative sum along ``axis`` (PyTorch's ``dim=`` too; ``axis=None``: over the
    flattened ``x``, as NumPy's and JAX's); ``exclusive`` starts from 0, ``reverse`` runs
    backwards; ``dtype`` casts ``x`` first (as NumPy, JAX and PyTorch)."""
    exclusive, dtype = jnp_dtype_slot("cumsum", exclusive, dtype, "exclusive")
    axis = axis if dim is None else dim
    x, axis = _running_operand("cumsum", x, axis, dtype)
    return _cumsum.bind([x], {"axis": axis, "exclusive": bool(exclusive), "reverse": bool(reverse)})


def _shift(v, axis, d, fill):
    """``v`` moved ``d`` places along ``axis`` (toward higher indices for ``d > 0``, lower
    for ``d < 0``), the vacated places holding ``fill``."""
    n = v.shape[axis]
    key = [slice(None)] * v.ndim
    pads = [(0, 0)] * v.ndim
    if isinstance(n, SymDim):  # padded first, then n kept: exact at every size, 0 too
        pads[axis] = (d, 0) if d > 0 else (0, -d)
        key[axis] = slice(0, n) if d > 0 else slice(-d, n - d)
        return fn.pad(v, pads, value=fill)[tuple(key)]
    d = n if d > n else -n if d < -n else d  # (a shorter axis is all fill; 0 long stays 0)
    if d > 0:
        key[axis], pads[axis] = slice(0, n - d), (d, 0)
    else:
        key[axis], pads[axis] = slice(-d, n), (0, -d)
    return fn.pad(v[tuple(key)], pads, value=fill)


def _linear_scan(a, b, axis):
    """``r[j] = b[j] + a[j] * r[j - 1]`` along ``axis`` (``r[-1] = 0``), by log2(n) rounds of
    composing the affine maps ``r -> b + a * r`` (Hillis and Steele): only multiplies and
    adds, so it is exact with zeros in ``a`` and its derivatives are too."""
    n = b.shape[axis]
    if isinstance(n, SymDim):  # the number of rounds is fixed by this size
        note_size_decision(n, "the rounds of cumprod's derivative scan")
    d = 1
    while d < n:
        b = b + a * _shift(b, axis, d, 0)
        if 2 * d < n:
            a = a * _shift(a, axis, d, 0)
        d *= 2
    return b


class CumprodOp(_RunningOp):
    """Cumulative product along ``axis`` (the op behind :func:`nabla.cumprod`).

    Its derivatives are exact where ``x`` holds zeros (no division by ``x``, no log): the
    VJP is ``exclusive_cumprod(x) * r`` with ``r[i] = ct[i] + x[i + 1] * r[i + 1]`` and the
    JVP ``t_out[j] = t[j] * exclusive_cumprod(x)[j] + x[j] * t_out[j - 1]``, both linear
    recurrences run by multiplies and adds only (``_linear_scan``), as JAX's cumprod
    differentiates through an associative scan.
    """

    name = "cumprod"

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x, out, ct = primals[0], outputs[0], cotangents[0]
        axis = kwargs["axis"]
        before = _shift(out, axis, 1, 1)  # exclusive cumprod: the product of x[:i]
        a = fn.flip(_shift(x, axis, -1, 0), axis)  # x[i + 1], run from the end
        r = fn.flip(_linear_scan(a, fn.flip(ct, axis), axis), axis)
        return [before * r]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        x, t = primals[0], tangents[0]
        if t is None:
            return [None]
        axis = kwargs["axis"]
        before = _shift(outputs[0], axis, 1, 1)
        return [_linear_scan(x, t * before, axis)]


_cumprod = CumprodOp()


def cumprod(x, axis=-1, exclusive=False, reverse=False, *, dtype=None, dim=None):
    """Cumulative product along ``axis`` (NumPy's ``cumprod``, PyTorch's ``torch.cumprod``;
    also ``x.cumprod(axis)``).

    ``out[..., j] = x[..., 0] * ... * x[..., j]``. Bool tensors multiply in int32; other
    dtypes are kept (integers wrap on overflow). Gradients are exact where ``x`` holds zeros.

    Args:
        x: a tensor of rank >= 1, or a nested list or NumPy array.
        axis: the axis to run along (default: the last); negative counts from the end;
            None runs over the flattened ``x`` (NumPy's and JAX's).
        exclusive: start from 1, leaving ``x[..., j]`` out of ``out[..., j]``.
        reverse: run from the end of the axis toward its start.
        dtype: cast ``x`` to this dtype first (as NumPy, JAX and PyTorch).
        dim: PyTorch's name for ``axis`` (``torch.cumprod(x, dim=0)``).

    Returns:
        A tensor of ``x``'s shape and dtype (int32 for bool).

    Raises:
        ValueError: (:class:`nabla.OpError`) for a 0-d ``x``.
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.

    Example:
        >>> nb.cumprod(nb.constant([1.0, 2.0, 0.0, 4.0])).tolist()
        [1.0, 2.0, 0.0, 0.0]
    """
    exclusive, dtype = jnp_dtype_slot("cumprod", exclusive, dtype, "exclusive")
    x, axis = _running_operand("cumprod", x, axis if dim is None else dim, dtype)
    if reverse:
        x = fn.flip(x, axis)
    out = _cumprod.bind([x], {"axis": axis})
    if exclusive:
        out = _shift(out, axis, 1, 1)
    if reverse:
        out = fn.flip(out, axis)
    return out


def minmax(x) -> dict:
    """The min and max of all elements of ``x`` (the original Nabla's ``nb.minmax``), as two
    0-d tensors computed in the same program.

    Args:
        x: a non-empty tensor, or a Python scalar, nested list or NumPy array.

    Returns:
        ``{"min": min, "max": max}`` (the original's dict), 0-d tensors of ``x``'s dtype
        (NaN propagates).

    Raises:
        ValueError: (:class:`nabla.OpError`) for an empty ``x``.
    """
    x = as_tensor(x, op="minmax")
    axes = tuple(range(x.ndim))
    return {"min": reduce_min(x, axes), "max": reduce_max(x, axes)}


provide(globals(), [*__all__, "reduce_prod", "window_max"])
