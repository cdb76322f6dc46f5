"""Indexing: ``gather``/``take``, ``scatter`` (primitives), and ``__getitem__``,
``__setitem__`` and ``x.at[k].set/add/mul/min/max/get`` built on them with NumPy semantics.

Basic indices (ints, slices with steps, ``...``, ``None``) become one strided ``slice`` plus
a reshape. Advanced indices (integer tensors, boolean masks) are broadcast together,
linearized, and become one ``gather`` (reads) or ``scatter`` (writes) on a flattened axis;
their result dims go where NumPy puts them (in place when adjacent, else in front). A boolean
mask must have a concrete value: its result shape depends on it.
"""

from __future__ import annotations

import math
import numbers
import weakref
from typing import NamedTuple

import numpy as np

from ..core.dtypes import DType, promote_types, result_type
from ..core.ir import RETAIN, TensorImpl, same_shape
from ..core.sharding import PartitionSpec
from ..core.state import REQUIRES_GRAD, STATE, enable_grad
from ..runtime.graph import GRAPH
from ..runtime.tensor import Tensor
from . import batching, spmd
from ._util import as_tensor, norm_axis, readable_now
from .base import Operation, OpError
from .functions import fn, provide

__all__ = [
    "gather",
    "torch_gather",
    "take",
    "take_along_axis",
    "put_along_axis",
    "scatter",
    "getitem",
    "setitem",
    "write_through",
    "make_view",
    "viewable_reshape",
    "fits_in_place",
    "restore_and_refuse",
    "AtIndexer",
]


def _what(kwargs) -> dict:
    """The indexing a gather or scatter carries out for the user (``what``, kept only for
    an index checked when the program runs): the backend's out-of-range error names it."""
    return {"what": kwargs["what"]} if "what" in kwargs else {}


class GatherOp(Operation):
    """``take(x, indices, axis)``: out = x.shape[:axis] + indices.shape + x.shape[axis+1:]."""

    name = "gather"
    arity = 2
    linear = True
    index_args = (1,)

    def infer(self, shapes, dtypes, kwargs):
        xs, ids = shapes
        a = kwargs["axis"]
        return [xs[:a] + ids + xs[a + 1 :]], [dtypes[0]]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"axis": kwargs["axis"] + nb, "batch_dims": nb, **_what(kwargs)}

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return _take_rule(in_shapes, out_shapes, kwargs["axis"], scatter=False)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x, idx = primals
        return [
            _scatter.bind(
                [fn.zeros_like(x), idx, cotangents[0]],
                {"axis": kwargs["axis"], "mode": "add"},
            ),
            None,
        ]


class ScatterOp(Operation):
    """``x`` with ``updates`` written (``mode="set"``) or added (``"add"``) at ``indices``
    along ``axis``; ``updates`` has the shape ``take(x, indices, axis)`` would have."""

    name = "scatter"
    arity = 3
    linear = True
    index_args = (1,)

    def infer(self, shapes, dtypes, kwargs):
        xs, ids, us = shapes
        a = kwargs["axis"]
        want = xs[:a] + ids + xs[a + 1 :]
        if tuple(us) != want:
            raise OpError(
                f"scatter: updates of shape {us} do not match {want} for x of shape {xs} and "
                f"indices of shape {ids} along axis {a}"
            )
        return [xs], [dtypes[0]]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"axis": kwargs["axis"] + nb, "mode": kwargs["mode"], "batch_dims": nb} | _what(
            kwargs
        )

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return _take_rule(in_shapes, out_shapes, kwargs["axis"], scatter=True)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x, idx, upd = primals
        ct = cotangents[0]
        g = {"axis": kwargs["axis"]}
        if kwargs["mode"] == "add":
            return [ct, None, _gather.bind([ct, idx], g)]
        # "set": overwritten positions get no gradient from x.
        ct_x = _scatter.bind([ct, idx, fn.zeros_like(upd)], {"axis": kwargs["axis"], "mode": "set"})
        ct_upd = _gather.bind([ct, idx], g)
        if _may_repeat(idx):  # only the update that was written gets the gradient
            kept = _written(idx, x.shape[kwargs["axis"]], kwargs["axis"], x.ndim)
            ct_upd = ct_upd * kept.cast(ct_upd.dtype)
        return [ct_x, None, ct_upd]


class ScatterCombineOp(ScatterOp):
    """``x`` with ``updates`` combined into it at ``indices`` along ``axis`` by ``mode``
    (``"mul"``, ``"min"``, ``"max"``): every update at a repeated index takes part, as in
    JAX's ``scatter_mul``/``scatter_min``/``scatter_max``. Not linear: its own rules."""

    name = "scatter_combine"
    backend_name = "scatter"
    linear = False

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x, idx, upd = primals
        ct = cotangents[0]
        a = kwargs["axis"]
        if kwargs["mode"] == "mul":
            total, others = _mul_factors(x, idx, upd, a)
            return [ct * total, None, _gather.bind([ct * x, idx], {"axis": a}) * others]
        hit_x, hit_u, count = _extremal_hits(x, idx, upd, outputs[0], a)
        share = ct / count
        ct_x = fn.where(hit_x, share, fn.zeros_like(share))
        ct_u = _gather.bind([share, idx], {"axis": a})
        return [ct_x, None, fn.where(hit_u, ct_u, fn.zeros_like(ct_u))]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        x, idx, upd = primals
        tx, tu = tangents[0], tangents[2]
        a = kwargs["axis"]
        tx = fn.zeros_like(x) if tx is None else tx
        tu = fn.zeros_like(upd) if tu is None else tu
        if kwargs["mode"] == "mul":
            total, others = _mul_factors(x, idx, upd, a)
            return [tx * total + x * _scatter_add(x, idx, tu * others, a)]
        hit_x, hit_u, count = _extremal_hits(x, idx, upd, outputs[0], a)
        picked = fn.where(hit_x, tx, fn.zeros_like(tx))
        picked = picked + _scatter_add(x, idx, fn.where(hit_u, tu, fn.zeros_like(tu)), a)
        return [picked / count]


def _scatter_add(like, idx, upd, axis):
    return _scatter.bind([fn.zeros_like(like), idx, upd], {"axis": axis, "mode": "add"})


def _extremal_hits(x, idx, upd, out, axis):
    """For scatter min/max: which of ``x`` and of the updates reached each result, and how
    many did per position (ties share the derivative, as a max reduction's do)."""
    hit_x = x == out
    hit_u = upd == _gather.bind([out, idx], {"axis": axis})
    count = hit_x.cast(x.dtype) + _scatter_add(x, idx, hit_u.cast(x.dtype), axis)
    return hit_x, hit_u, count


def _mul_factors(x, idx, upd, axis):
    """For scatter mul: the product of every update per position (1 where none), and per
    update the product of the *other* updates at its position, exact with zeros (no
    division by a zero update)."""
    ones = fn.ones_like(x)
    combine = {"axis": axis, "mode": "mul"}
    total = _scatter_combine.bind([ones, idx, upd], combine)
    zero = upd == 0
    safe = fn.where(zero, fn.ones_like(upd), upd)
    at = {"axis": axis}
    nonzero_product = _gather.bind([_scatter_combine.bind([ones, idx, safe], combine), idx], at)
    zeros_here = _gather.bind([_scatter_add(x, idx, zero.cast(x.dtype), axis), idx], at)
    # the zero updates enter as themselves (values 0), not as constants: the product's
    # derivative with respect to a zero update is the others' product (a Hessian's mixed
    # entries had been lost)
    zero_product = _gather.bind(
        [_scatter_combine.bind([ones, idx, fn.where(zero, upd, fn.ones_like(upd))], combine), idx],
        at,
    )
    zero_sum = _gather.bind(
        [_scatter_add(x, idx, fn.where(zero, upd, fn.zeros_like(upd)), axis), idx], at
    )
    # for a zero update: the other zero updates' product (1 with none; the other's own value
    # with one; 0 with more, whose first derivative is 0 as well)
    other_zeros = fn.where(
        zeros_here == 1, fn.ones_like(upd), fn.where(zeros_here == 2, zero_sum - upd, 0.0)
    )
    others = fn.where(zero, nonzero_product * other_zeros, (nonzero_product / safe) * zero_product)
    return total, others


def _may_repeat(idx: Tensor) -> bool:
    """False only for indices known at the call without repeats (the usual case)."""
    impl = idx._impl
    if impl.buffer is None or impl.levels:
        return True
    values = idx.numpy().ravel()
    return len(np.unique(values)) != len(values)


def _written(idx: Tensor, n: int, axis: int, ndim: int) -> Tensor:
    """True for each index position whose update a ``set`` scatter kept (for a repeated
    index, the one the backend wrote); shaped to broadcast against the updates. Found by
    scattering the positions themselves and reading them back, so it agrees with the
    backend's own choice among repeats."""
    size = 1
    for d in idx.shape:
        size *= d
    positions = fn.reshape(fn.arange(size, dtype=DType.int32), idx.shape)
    table = fn.zeros((n,), dtype=DType.int32)
    table = _scatter.bind([table, idx, positions], {"axis": 0, "mode": "set"})
    kept = _gather.bind([table, idx], {"axis": 0}) == positions
    lead, trail = (1,) * axis, (1,) * (ndim - axis - 1)
    return fn.reshape(kept, lead + idx.shape + trail)


_gather = GatherOp()
_scatter = ScatterOp()
_scatter_combine = ScatterCombineOp()


def _take_rule(in_shapes, out_shapes, axis, scatter):
    """x's dims other than ``axis`` and the indices' dims map to the taken value's dims; the
    indexed dim stays whole (an index may point into any block). For scatter the indices'
    dims stay whole too: a block of updates added on every copy of x would count x twice."""
    xs, ids = in_shapes[0], in_shapes[1]
    x = [(f"x{i}",) for i in range(len(xs))]
    idx = [(f"i{j}",) for j in range(len(ids))]
    taken = x[:axis] + idx + x[axis + 1 :]
    blocked = {f"x{axis}"} | ({f"i{j}" for j in range(len(ids))} if scatter else set())
    ins = [x, idx, taken] if scatter else [x, idx]
    outs = [x] if scatter else [taken]
    return spmd.FactorRule.parse_dims(ins, outs, in_shapes, out_shapes, blocked=blocked)


def _index_tensor(op, idx, n=None, where="") -> Tensor:
    idx = as_tensor(idx, op=op)
    if not idx.dtype.is_int:
        raise TypeError(
            f"{op}: indices must be integers, got {idx.dtype} (indices of shape {idx.shape})"
        )
    if n is not None:
        _check_bounds(op, idx, n, where)
        if idx.dtype.is_unsigned:  # no negative index to wrap
            return idx
        if idx.dtype.itemsize < 4:  # int8/int16 may not hold ``i + n`` (-1 + 300)
            idx = idx.cast(DType.int32)

        if idx.is_realized and not idx._impl.levels:
            a = idx.numpy()
            if (a < 0).any():  # stays a realized constant: its values stay known
                idx = as_tensor(np.where(a < 0, a + n, a).astype(a.dtype), op=op)
        else:
            idx = fn.where(idx < 0, idx + n, idx)
    return idx


def _check_bounds(op, idx, n, where=""):
    if idx.is_realized and not idx._impl.levels:
        a = idx.numpy()
        if a.size and (a.max() >= n or a.min() < -n):
            bad = a.max() if a.max() >= n else a.min()
            raise IndexError(
                f"{op}: index {bad} is out of range for a dimension of size {n}{where} "
                f"(indices of shape {idx.shape})"
            )


def gather(
    x,
    indices=None,
    axis=0,
    *,
    dim=None,
    index=None,
    mode=None,
    fill_value=None,
    unique_indices: bool = False,
    indices_are_sorted: bool = False,
) -> Tensor:
    """Take elements of ``x`` along ``axis`` at integer ``indices`` (NumPy's ``take``).
    Without ``indices``, the original Nabla's ``gather(x)``: a sharded ``x`` made whole on
    every device of its mesh (``x.gather()``; partial sums reduced, split dims gathered).

    Negative indices count from the end. ``axis=None`` takes from the flattened ``x``
    (NumPy's and JAX's ``take``). Example: ``gather(x, [2, 0], axis=1)``. PyTorch's order,
    ``gather(x, dim, index)`` (an int, then the indices), and its keywords ``dim=`` and
    ``index=`` are PyTorch's ``torch.gather``.

    ``mode`` is JAX's: None or ``"raise"`` (an index out of range is an ``IndexError``
    where its value is known at the call), ``"fill"`` (it gives ``fill_value``: NaN for
    floats, the least value for signed integers, the largest for unsigned ones, True for
    bools), ``"clip"`` (clipped into the dim, negatives to 0), ``"wrap"`` (modulo the
    dim) or ``"promise_in_bounds"`` (clipped). ``unique_indices`` and
    ``indices_are_sorted`` are JAX's hints, accepted.
    """
    x = as_tensor(x, op="gather")
    if mode not in (None, "raise"):
        if axis is None:
            x, axis = fn.reshape(x, (-1,)), 0
        if x.ndim == 0:
            raise OpError("take: cannot index a 0-d tensor")
        axis = norm_axis("take", axis, x.ndim, x.shape)
        idx = _index_tensor("take", indices)
        idx, valid = _moded_index("take", idx, x.shape[axis], mode, normalize=mode == "fill")
        out = _gather_from(x, idx, axis)
        if valid is None:
            return out
        shape = (1,) * axis + tuple(idx.shape) + (1,) * (x.ndim - axis - 1)
        return _filled(out, fn.reshape(valid, shape), fill_value)
    if dim is not None or index is not None:
        if dim is None or index is None or indices is not None:
            raise TypeError("gather: PyTorch's form takes dim= and index= (and no indices)")
        return torch_gather(x, dim, index)
    if indices is None:  # the original Nabla's gather(x): a sharded value made whole
        spec = x.sharding
        return x if spec is None else fn.reshard(x, spec.mesh, PartitionSpec())
    int_first = isinstance(indices, numbers.Integral) and not isinstance(indices, bool)
    if int_first and isinstance(axis, Tensor | np.ndarray | list):
        return torch_gather(x, int(indices), axis)
    if axis is None:
        x, axis = fn.reshape(x, (-1,)), 0
    if x.ndim == 0:
        raise OpError("gather: cannot index a 0-d tensor")
    axis = norm_axis("gather", axis, x.ndim, x.shape)
    idx = _index_tensor("gather", indices, x.shape[axis], f" (axis {axis} of shape {x.shape})")
    return _gather_from(x, idx, axis)


def torch_gather(x, dim: int, index) -> Tensor:
    """PyTorch's ``gather(x, dim, index)`` (``x.gather(dim, index)``): ``out[i][j] =
    x[i][index[i][j]]`` along ``dim``, ``index`` as large as ``x`` or smaller in every dim
    but ``dim`` (no broadcasting), the result of its shape."""
    index = as_tensor(index, op="gather")
    d = norm_axis("gather", dim, x.ndim, x.shape)
    if index.ndim != x.ndim or any(i != d and index.shape[i] > x.shape[i] for i in range(x.ndim)):
        raise ValueError(
            f"gather: index of shape {index.shape} must have x's rank and be no larger than "
            f"x {x.shape} in every dim but {d} (PyTorch's rule)"
        )
    if any(i != d and index.shape[i] < x.shape[i] for i in range(x.ndim)):
        x = x[tuple(slice(None) if i == d else slice(0, index.shape[i]) for i in range(x.ndim))]
    return take_along_axis(x, index, d)


def torch_scatter(x, dim: int, index, src, op: str = "scatter", add: bool = False) -> Tensor:
    """PyTorch's ``x.scatter(dim, index, src)`` (``add``: ``scatter_add``): ``out[i][index[i]
    [j]] = src[i][j]`` along ``dim`` (``+=`` with ``add``), ``index`` no larger than ``x`` in
    the other dims and than ``src`` in every dim; ``src`` may be a number. Written where
    ``index`` says, as an ``x.at[...]`` update with index grids over the other dims; a
    position written twice keeps one of the values (PyTorch leaves which undefined)."""
    index = as_tensor(index, op=op)
    d = norm_axis(op, dim, x.ndim, x.shape)
    if (
        not index.dtype.is_int
        or index.ndim != x.ndim
        or any(i != d and index.shape[i] > x.shape[i] for i in range(x.ndim))
    ):
        raise ValueError(
            f"{op}: index of shape {index.shape} ({index.dtype.value}) must be an integer "
            f"tensor of x's rank, no larger than x {x.shape} in every dim but {d} "
            "(PyTorch's rule)"
        )
    if readable_now(index) and index.size:  # (PyTorch's bounds: no counting from the end)
        values = index.numpy()
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= x.shape[d]:
            raise IndexError(
                f"{op}: index values {low}..{high} are out of range for dim {d} of size "
                f"{x.shape[d]} (x of shape {x.shape})"
            )
    if isinstance(src, Tensor) and src.dtype is not x.dtype:
        raise TypeError(
            f"{op}: src is {src.dtype.value} but x is {x.dtype.value} (PyTorch's rule: one "
            "dtype; cast src)"
        )
    if isinstance(src, Tensor | np.ndarray | list):
        src = as_tensor(src, op=op)
        if src.ndim != x.ndim or any(index.shape[i] > src.shape[i] for i in range(x.ndim)):
            raise ValueError(
                f"{op}: src of shape {src.shape} must have x's rank and be at least as large "
                f"as index {index.shape} in every dim (PyTorch's rule)"
            )
        src = src[tuple(slice(0, n) for n in index.shape)]
        src = fn.cast(src, x.dtype)
    grid = []
    for i in range(x.ndim):
        if i == d:
            grid.append(index)
        else:
            shape = [1] * x.ndim
            shape[i] = index.shape[i]
            grid.append(fn.reshape(fn.arange(index.shape[i]), tuple(shape)))
    at = x.at[tuple(grid)]
    return at.add(src) if add else at.set(src)


def lookup(x, indices, what: str) -> Tensor:
    """Rows of table ``x`` (along axis 0) at ``indices``, each of which must lie in
    ``[0, rows)``: PyTorch's embedding rule, no counting from the end. An index known only
    when the program runs (traced by ``compile``, batched by ``vmap``) is checked then, the
    error naming ``what``; known ones are the caller's to check at the call."""
    return _gather_from(x, as_tensor(indices, op=what), 0, what=what)


def _gather_from(x, idx, axis, what=None):
    """The gather op; an unbatched ``x`` (a table) with indices batched by vmap is indexed
    with the batch as extra index dims instead of being copied once per batch element.

    The rewrite turns the batch into index dims, so the VJP sums the table's cotangent over
    them. That is the gradient when every differentiation tracing the table began before
    the vmap (``grad`` of a function that vmaps lookups: the vmap has finished when the
    cotangent arrives). A differentiation begun inside the vmap needs one cotangent per
    example (per-example gradients), which are as large as the broadcast table: those keep
    the broadcast."""
    levels = idx._impl.levels
    xi = x._impl
    kwargs = {"axis": axis} if what is None else {"axis": axis, "what": what}
    if not levels or xi.levels or xi.tangents or batching.differentiated_inside(xi, min(levels)):
        return _gather.bind([x, idx], kwargs)
    for i, level in enumerate(levels):  # the batch dims become the leading index dims
        idx = batching.from_batch(idx, level, i)
    out = _gather.bind([x, idx], kwargs)
    for level in levels:  # ... which land at ``axis``, outer level first: back to the prefix
        out = batching.to_batch(out, axis, level)
    return out


def put_along_axis(arr, indices, values, axis, inplace: bool = True, mode=None) -> Tensor:
    """``arr`` with ``values`` written at ``indices`` along ``axis``, row by row (NumPy's
    and JAX's ``put_along_axis``; JAX's ``inplace=False`` is required, as there):
    ``indices`` has ``arr``'s rank and broadcasts against it outside ``axis``, ``values``
    broadcasts to ``indices``; a negative index counts from the end.

    Args:
        arr: a tensor.
        indices: integer indices of ``arr``'s rank.
        values: the values to write.
        axis: the dim the indices index, or None (the flattened ``arr``, 1-D indices).
        inplace: must be False (to change a tensor in place, assign into it).
        mode: None (an index out of range is an error where known at the call) or
            ``"clip"``.

    Returns:
        A tensor of ``arr``'s shape.
    """
    if inplace:
        raise ValueError(
            "put_along_axis: pass inplace=False for a new tensor (JAX's form); to change a "
            "tensor in place, assign into it (x[...] = v, PyTorch's way)"
        )
    x = as_tensor(arr, op="put_along_axis")
    idx = as_tensor(indices, op="put_along_axis")
    if axis is None:  # the flattened arr, 1-D indices (NumPy's)
        if idx.ndim != 1:
            raise OpError(f"put_along_axis: axis=None takes 1-D indices, got shape {idx.shape}")
        flat = put_along_axis(fn.reshape(x, (-1,)), idx, values, 0, inplace=False, mode=mode)
        return fn.reshape(flat, x.shape)
    if not idx.dtype.is_int or idx.ndim != x.ndim:
        raise OpError(
            f"put_along_axis: indices of shape {idx.shape} ({idx.dtype.value}) must be "
            f"integers of the rank of arr {x.shape}"
        )
    axis = norm_axis("put_along_axis", axis, x.ndim, x.shape)
    n = x.shape[axis]
    if mode == "clip":
        idx = fn.clip(fn.where(idx < 0, idx + n, idx), 0, n - 1)
    elif mode is None:
        idx = _index_tensor("put_along_axis", idx, n, f" (axis {axis} of {x.shape})")
    else:
        raise OpError(f"put_along_axis: mode must be None or 'clip', got {mode!r}")
    other = fn.broadcast_shapes(
        "put_along_axis",
        x.shape[:axis] + x.shape[axis + 1 :],
        idx.shape[:axis] + idx.shape[axis + 1 :],
    )
    idx = fn.broadcast_to(idx, other[:axis] + (idx.shape[axis],) + other[axis:])
    vals = fn.broadcast_to(as_tensor(values, x.dtype, op="put_along_axis"), idx.shape)
    return torch_scatter(x, axis, idx, vals, op="put_along_axis")


def _moded_index(op: str, idx, n, mode: str, normalize: bool):
    """``idx`` made safe for a gather of a dim of size ``n`` under JAX's ``mode``, and the
    mask of the indices in range (``"fill"``; else None). ``normalize``: a negative index
    in ``[-n, 0)`` counts from the end first."""
    if mode not in ("fill", "clip", "wrap", "promise_in_bounds"):
        raise ValueError(
            f"{op}: mode must be None, 'raise', 'fill', 'clip', 'wrap' or "
            f"'promise_in_bounds', got {mode!r}"
        )
    if idx.dtype.itemsize < 4 and not idx.dtype.is_unsigned:
        idx = idx.cast(DType.int32)  # (int8 may not hold ``i + n``)
    n = int(n)
    if n == 0:
        raise OpError(f"{op}: cannot take from a dim of size 0 with mode={mode!r}")
    if mode == "wrap":
        return idx % n, None
    if normalize and not idx.dtype.is_unsigned:
        idx = fn.where(idx < 0, idx + n, idx)
    if mode in ("clip", "promise_in_bounds"):
        return fn.clip(idx, 0, n - 1), None
    valid = (idx >= 0) & (idx < n)
    return fn.where(valid, idx, fn.zeros_like(idx)), valid


def _filled(out, valid, fill_value):
    """``out`` with ``fill_value`` (JAX's default for its dtype) where ``valid`` is False."""
    dt = out.dtype
    if fill_value is None:
        if dt.is_bool:
            fill_value = True
        elif dt.is_float:
            fill_value = float("nan")
        else:
            info = np.iinfo(dt.numpy)
            fill_value = int(info.max if dt.is_unsigned else info.min)
    return fn.where(valid, out, fn.full((), fill_value, dtype=dt))


def take_along_axis(x, indices, axis=-1, *, mode=None, fill_value=None) -> Tensor:
    """``x``'s values at ``indices`` along ``axis`` (default the last, as NumPy's and
    JAX's), row by row (NumPy's and JAX's ``take_along_axis``; PyTorch's ``gather``):
    ``indices`` has ``x``'s rank, and its other dims broadcast against ``x``'s.
    ``axis=None`` takes from the flattened ``x`` with 1-D ``indices``. Differentiable in
    ``x``.

    ``mode`` is JAX's: None or ``"raise"`` (an index out of range is an error), ``"fill"``
    (it gives ``fill_value``, by default NaN for floats, the least value for signed
    integers, the largest for unsigned ones, True for bools), ``"clip"`` (clipped into the
    dim, after a negative one counts from the end), ``"wrap"`` (modulo the dim) or
    ``"promise_in_bounds"`` (clipped).

    Raises:
        ValueError: (:class:`nabla.OpError`) for ranks that differ or dims that do not
            broadcast, naming both shapes.
        IndexError: for an index out of range (known now; or when the program runs).
    """
    x = as_tensor(x, op="take_along_axis")
    idx = as_tensor(indices, op="take_along_axis")
    if not idx.dtype.is_int:
        raise TypeError(f"take_along_axis: indices must be integers, got {idx.dtype.value}")
    if axis is None:
        if idx.ndim != 1:
            raise OpError(f"take_along_axis: axis=None takes 1-D indices, got shape {idx.shape}")
        x, axis = fn.reshape(x, (-1,)), 0
    if mode not in (None, "raise"):
        if idx.ndim != x.ndim:
            raise OpError(
                f"take_along_axis: indices of shape {idx.shape} need the rank of x {x.shape}"
            )
        axis = norm_axis("take_along_axis", axis, x.ndim, x.shape)
        safe, valid = _moded_index("take_along_axis", idx, x.shape[axis], mode, normalize=True)
        out = take_along_axis(x, safe, axis)
        return out if valid is None else _filled(out, valid, fill_value)
    if idx.ndim != x.ndim:
        raise OpError(f"take_along_axis: indices of shape {idx.shape} need the rank of x {x.shape}")
    axis = norm_axis("take_along_axis", axis, x.ndim, x.shape)
    try:
        lead = fn.broadcast_shapes(
            "take_along_axis",
            x.shape[:axis] + x.shape[axis + 1 :],
            idx.shape[:axis] + idx.shape[axis + 1 :],
        )
    except OpError:
        raise OpError(
            f"take_along_axis: indices of shape {idx.shape} do not broadcast against x of "
            f"shape {x.shape} outside axis {axis}"
        ) from None
    out_shape = lead[:axis] + (idx.shape[axis],) + lead[axis:]
    x_shape = lead[:axis] + (x.shape[axis],) + lead[axis:]
    idx = _index_tensor("take_along_axis", idx, x.shape[axis], f" (axis {axis} of {x.shape})")
    x = fn.broadcast_to(x, x_shape)
    # every other dim is indexed by its own positions: one gather from the flattened value,
    # whose index out of range in its dim (known only when the program runs) never lands
    # in another row (``_linear_index``)
    grids = [
        fn.reshape(
            fn.arange(n, dtype=DType.int64), [n if d == i else 1 for d in range(len(out_shape))]
        )
        for i, n in enumerate(out_shape)
        if i != axis
    ]
    adv = list(enumerate(grids[:axis] + [idx] + grids[axis:]))
    flat, lin, _, _ = _linear_index(x, adv)
    return _gather_from(flat, lin, 0, _run_time_what("take_along_axis", x, adv[axis : axis + 1]))


# ``take`` is ``gather`` under its other name (the API's ``gather/take(x, indices, axis)``):
# axis 0 by default, where ``jnp.take``/``np.take`` read a flattened ``x`` without an axis
take = gather


_SCATTER_MODES = ("set", "add", "mul", "min", "max")


def scatter(x, indices, updates, axis=0, mode="set") -> Tensor:
    """``x`` with ``updates`` written at ``indices`` along ``axis``; ``mode="add"`` adds them
    and ``"mul"``, ``"min"``, ``"max"`` combine them (JAX's ``scatter_add``/``scatter_mul``/
    ``scatter_min``/``scatter_max``): every update at a repeated index takes part. With
    ``"set"`` a repeated index keeps one of its updates.

    ``updates`` must broadcast to ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``.
    """

    x = as_tensor(x, op="scatter")
    if mode not in _SCATTER_MODES:
        raise ValueError(f"scatter: mode must be one of {_SCATTER_MODES}, got {mode!r}")
    axis = norm_axis("scatter", axis, x.ndim, x.shape)
    idx = _index_tensor("scatter", indices, x.shape[axis], f" (axis {axis} of shape {x.shape})")
    want = x.shape[:axis] + idx.shape + x.shape[axis + 1 :]
    upd = as_tensor(updates, x.dtype, op="scatter")
    if upd.shape != want:
        try:
            upd = fn.broadcast_to(upd, want)
        except OpError:
            raise OpError(
                f"scatter: updates of shape {upd.shape} do not broadcast to {want}, the shape "
                f"of x[indices] for x of shape {x.shape} and indices of shape {idx.shape} "
                f"along axis {axis}"
            ) from None
    return _scatter_at(x, idx, upd, axis, mode)


def _scatter_at(x, idx, upd, axis, mode, what=None):
    """The scatter op on indices already counted from the end (``_index_tensor``: counting
    again would wrap an index below ``-n`` into range) and updates of the right shape."""
    op = _scatter if mode in ("set", "add") else _scatter_combine
    kwargs = {"axis": axis, "mode": mode} | ({} if what is None else {"what": what})
    return op.bind([x, idx, upd], kwargs)


# ----------------------------------------------------------------------------- key parsing
# An entry of a key, as the parsing stages pass it on: (kind, value, dims it consumes), kind
# one of "int", "slice", "adv" (an integer index tensor), "new" (None), "ell" (...), and
# ("mask", index tensors, mask rank, mask shape) until the mask is split into its dims.
_WHOLE = ("slice", slice(None), 1)
# an ``...`` that covers no dim still separates the advanced indices on its two sides (NumPy
# then puts their dims in front): it stays in the layout as this mark
_SEP = ("sep", None, 0)


class _Key(NamedTuple):
    """An index key resolved against a tensor's shape (``_parse_key``)."""

    slices: tuple  # one (start, step, length) per input dim; an advanced index takes it whole
    int_dims: list  # the dims an int removes (none with an advanced index: ints join those)
    adv: list  # (input dim, index tensor) per advanced index, counted from the end once
    layout: list  # per entry in key order: ("basic", input dim) | ("adv", k) | ("new",) |
    # ("sep",): an empty ``...``

    def adv_block(self):
        """Where NumPy puts the advanced indices' dims (call with ``adv``): after this many
        basic dims when the advanced entries are adjacent, else None (in front)."""
        pos = [i for i, e in enumerate(self.layout) if e[0] == "adv"]
        if pos != list(range(pos[0], pos[0] + len(pos))):
            return None
        return sum(1 for e in self.layout[: pos[0]] if e[0] == "basic")

    def result_shape(self, sliced, ishape=(), front=False) -> tuple:
        """The shape of ``x[key]``: ``None`` entries as 1, basic entries as their dims of
        ``sliced`` (``x`` after ``slices``) and the advanced dims ``ishape`` at the first
        advanced entry or, ``front``, before everything."""
        shape = list(ishape) if front else []
        placed = front
        for e in self.layout:
            if e[0] == "new":
                shape.append(1)
            elif e[0] == "basic":
                shape.append(sliced[e[1]])
            elif e[0] == "adv" and not placed:
                shape.extend(ishape)
                placed = True
        return tuple(shape)


def _parse_key(x: Tensor, key, op="getitem") -> _Key:
    """``key`` (NumPy's index forms) resolved against ``x``'s shape, validated: each entry
    classified, ``...`` and boolean masks expanded to the dims they cover, then every dim
    given its slice or advanced index."""
    entries = [_key_entry(x, k, op) for k in _entries_of(key)]
    return _resolve_entries(x, _expand_entries(x, entries, op), op)


def _key_entry(x, k, op) -> tuple:
    """The entry of one element ``k`` of a key."""
    if isinstance(k, range):  # an integer index, as NumPy (``logits[range(n), labels]``)
        k = np.arange(k.start, k.stop, k.step, dtype=np.int64)
    if isinstance(k, Tensor | np.ndarray | list):
        return _array_entry(x, k, op)
    if k is None:
        return ("new", None, 0)
    if k is Ellipsis:
        return ("ell", None, 0)
    if isinstance(k, slice):
        return ("slice", k, 1)
    if isinstance(k, numbers.Integral) and not isinstance(k, bool):
        return ("int", int(k), 1)
    if isinstance(k, bool):
        raise IndexError(
            f"{op}: indexing with a Python bool is not supported (tensor of shape {x.shape})"
        )
    raise IndexError(
        f"{op}: invalid index {k!r} of type {type(k).__name__} for a tensor of shape "
        f"{x.shape} (use ints, slices, ..., None, or integer/bool tensors)"
    )


def _array_entry(x, k, op) -> tuple:
    """The entry of an index array: an integer index, or a concrete boolean mask as the
    integer indices of its True elements."""
    if isinstance(k, list) and not k:
        k = np.zeros(0, np.int64)  # x[[]]: an empty integer index, as in NumPy
    t = k if isinstance(k, Tensor) else as_tensor(np.asarray(k))
    if not t.dtype.is_bool:
        return ("adv", t, 1)
    if t.ndim == 0:
        raise IndexError(
            f"{op}: a 0-d boolean index is not supported (tensor of shape {x.shape}); "
            "use x[None] for True"
        )
    if t._impl.levels:
        raise IndexError(
            "boolean mask indexing needs a concrete mask; it cannot be batched by vmap"
        )
    idx = [as_tensor(a.astype(np.int64)) for a in np.nonzero(t.numpy())]
    return ("mask", idx, t.ndim, t.shape)


def _expand_entries(x, entries, op) -> list:
    """``entries`` with ``...`` (or, without one, the end of the key) standing for the dims
    no entry indexes, and each boolean mask as one advanced index per dim it covers."""
    n_ell = sum(1 for e in entries if e[0] == "ell")
    if n_ell > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis ('...')")
    consumed = sum(e[2] for e in entries)
    if consumed > x.ndim:
        raise IndexError(
            f"{op}: too many indices for a tensor of shape {x.shape}: {consumed} were indexed"
        )
    rest = [_WHOLE] * (x.ndim - consumed)
    out = []
    at = 0  # the input dim the entry indexes
    for e in entries:
        if e[0] == "ell":
            out.extend(rest or [_SEP])
            at += len(rest)
            continue
        if e[0] == "mask":
            covered = x.shape[at : at + e[2]]
            if tuple(e[3]) != tuple(covered):
                raise IndexError(
                    f"{op}: boolean mask of shape {tuple(e[3])} does not match the indexed "
                    f"dims {tuple(covered)} of a tensor of shape {x.shape} (at dim {at})"
                )
            out.extend(("adv", a, 1) for a in e[1])
        else:
            out.append(e)
        at += e[2]
    if n_ell == 0:
        out.extend(rest)
    return out


def _resolve_entries(x, entries, op) -> _Key:
    """The slice or advanced index of every input dim, from entries covering all of them."""
    any_adv = any(e[0] == "adv" for e in entries)
    slices, int_dims, adv, layout = [], [], [], []
    dim = 0
    for kind, v, _ in entries:
        if kind in ("new", "sep"):
            layout.append((kind,))
            continue
        n = x.shape[dim]
        if kind == "slice":
            if v.step == 0:
                raise ValueError(f"{op}: slice step cannot be zero (tensor of shape {x.shape})")
            slices.append(fn.slice_entry(v, n))
            layout.append(("basic", dim))
        elif kind == "int" and not any_adv:
            slices.append((_int_index(x, v, dim, op), 1, 1))
            int_dims.append(dim)
        else:  # an advanced index (an int among advanced indices is one too, as in NumPy)
            slices.append((0, 1, n))
            adv.append((dim, _advanced_index(x, kind, v, dim, op)))
            layout.append(("adv", len(adv) - 1))
        dim += 1
    return _Key(tuple(slices), int_dims, adv, layout)


def _int_index(x, i, dim, op) -> int:
    """An int index into ``dim`` of ``x``, counted from the end when negative."""
    n = x.shape[dim]
    if not -n <= i < n:
        raise IndexError(
            f"{op}: index {i} is out of bounds for axis {dim} with size {n} "
            f"(tensor of shape {x.shape})"
        )
    # (not ``i % n``: under compile's dynamic sizes that wraps a later size's index around;
    # ``n + i`` stays an offset from the end, and the plan checks it at each size)
    return i if i >= 0 else n + i


def _advanced_index(x, kind, v, dim, op) -> Tensor:
    """The index tensor of an advanced entry (an int or an integer tensor) into ``dim``."""
    if kind == "int":
        return as_tensor(np.asarray(_int_index(x, v, dim, op), np.int64))
    if not v.dtype.is_int:
        raise IndexError(
            f"{op}: index tensors must be integer or bool, got {v.dtype} "
            f"(tensor of shape {x.shape})"
        )
    return _index_tensor(op, v, x.shape[dim], f" (axis {dim} of shape {x.shape})")


def _linear_index(y, adv):
    """Move advanced dims of ``y`` to the front and flatten them; return (flat y, index)."""

    dims = [d for d, _ in adv]
    shape = fn.broadcast_shapes("getitem", *[t.shape for _, t in adv])
    idxs = [
        fn.broadcast_to(t.cast(DType.int64) if t.dtype is not DType.int64 else t, shape)
        for _, t in adv
    ]
    rest = [i for i in range(y.ndim) if i not in dims]
    yt = fn.permute(y, dims + rest) if dims + rest != list(range(y.ndim)) else y
    sizes = [y.shape[d] for d in dims]
    lin = None
    stride = 1
    for t, n in reversed(list(zip(idxs, sizes))):
        term = t if stride == 1 else t * stride
        lin = term if lin is None else lin + term
        stride *= n
    if len(idxs) > 1 and not all(t.is_realized and not t._impl.levels for _, t in adv):
        # an index known only when the program runs, out of range in its own dim, could
        # land in range of the flattened dims (x[0, 5] of a (3, 4) x is x[1, 1]): such a
        # position is made out of range of the whole, for the backend's bounds check
        bad = None
        for t, n in zip(idxs, sizes):
            out = (t < 0) | (t >= n)
            bad = out if bad is None else bad | out
        lin = fn.where(bad, fn.full_like(lin, stride), lin)
    flat = fn.reshape(yt, (math.prod(sizes),) + tuple(y.shape[i] for i in rest))
    return flat, lin, shape, rest


def _run_time_what(op, x, adv) -> str | None:
    """What an out-of-range error at run time should name (the flat gather or scatter it
    becomes indexes a reshaped value): None when every index is known now (checked at the
    call)."""
    if all(t.is_realized and not t._impl.levels for _, t in adv):
        return None
    dims = tuple(d for d, _ in adv)
    name = "x.at[...]" if op == "at" else op
    return f"{name} on a tensor of shape {tuple(x.shape)}, with array indices into dims {dims}"


def getitem(x, key) -> Tensor:
    """``x[key]`` with NumPy semantics (ints, slices with steps, ``...``, ``None``, integer
    tensors/arrays/lists and concrete boolean masks)."""

    x = as_tensor(x, op="getitem")
    if any(type(k) is bool or type(k) is np.bool_ for k in _entries_of(key)):
        return _with_scalar_bools(x, key)
    if x.ndim == 0 and not all(k is None or k is Ellipsis for k in _entries_of(key)):
        raise IndexError(f"getitem: cannot index a 0-d tensor with {key!r}")
    k = _parse_key(x, key)
    y = fn.slice_normalized(x, k.slices)
    if not k.adv:
        return fn.reshape(y, k.result_shape(y.shape))
    flat, lin, ishape, _ = _linear_index(y, k.adv)
    out = _gather_from(flat, lin, 0, _run_time_what("getitem", x, k.adv))  # (ishape..., rest)
    at = k.adv_block()
    if at:  # adjacent advanced indices: their dims go after the basic dims before them
        n = len(ishape)
        out = fn.moveaxis(out, list(range(n)), list(range(at, at + n)))
    return fn.reshape(out, k.result_shape(y.shape, ishape, front=at is None))


def _with_scalar_bools(x, key) -> Tensor:
    """``x[key]`` for a key holding Python bools, as NumPy: a 0-d mask, so a new axis of
    length 1 (True) or 0 (False). Among array indices NumPy counts them as advanced
    indices too, which moves dims around: not supported there."""
    parts = _entries_of(key)
    if any(isinstance(k, Tensor | np.ndarray | list) for k in parts):
        raise IndexError(
            f"getitem: a Python bool among array indices is not supported (tensor of shape "
            f"{x.shape}, index {key!r})"
        )
    consumed = sum(1 for k in parts if isinstance(k, slice) or _is_int(k))
    empty, at = [], 0  # the result dims that False makes empty
    for k in parts:
        if type(k) is bool or type(k) is np.bool_:
            if not k:
                empty.append(at)
            at += 1
        elif k is None or isinstance(k, slice):
            at += 1
        elif k is Ellipsis:
            at += x.ndim - consumed
    y = getitem(x, tuple(None if type(k) is bool or type(k) is np.bool_ else k for k in parts))
    if not empty:
        return y
    return y[tuple(slice(0, 0) if d in empty else slice(None) for d in range(empty[-1] + 1))]


def _is_int(k) -> bool:
    return isinstance(k, numbers.Integral) and not isinstance(k, bool)


def _entries_of(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _without_new_axes(x, key, value, op, dtype):
    """``(key, value)`` with the ``None`` entries of ``key`` dropped and ``value`` fitted
    to ``x[key]`` then reshaped without those size-1 axes, so a value shaped like ``x[key]``
    is accepted, as NumPy does. When a ``None`` sits between two array indices it keeps
    their dims in front (NumPy's rule for separated array indices), so the key keeps it and
    only the value loses the new axes."""
    parts = _entries_of(key)
    if not any(k is None for k in parts):
        return key, value
    arrays = [
        not (k is None or k is Ellipsis or isinstance(k, slice | numbers.Integral)) for k in parts
    ]
    # among array indices an int is an advanced index too (NumPy's rule)
    arrayish = [a or (any(arrays) and _is_int(k)) for a, k in zip(arrays, parts, strict=True)]
    firsts = [i for i, a in enumerate(arrayish) if a]
    separated = firsts and any(parts[i] is None for i in range(firsts[0], firsts[-1]))
    rest = key if separated else tuple(k for k in parts if k is not None)
    target = getitem(x, key).shape
    value = as_tensor(value, dtype, op)
    try:
        value = fn.broadcast_to(value, target)
    except OpError:
        raise OpError(
            f"{op}: value of shape {value.shape} cannot be broadcast to the indexed region of "
            f"shape {target}"
        ) from None
    if separated:
        return key, fn.reshape(value, _without_none_axes(x, key, target))
    return rest, fn.reshape(value, getitem(x, rest).shape)


def _without_none_axes(x, key, target):
    """``target`` (the shape of ``x[key]`` for a key whose array indices are separated, so
    their dims come first) without the size-1 axes its ``None`` entries made: after the
    array dims come the other entries' dims in key order (``_parse_key``'s layout)."""
    rest = [e for e in _parse_key(x, key).layout if e[0] in ("basic", "new")]
    start = len(target) - len(rest)
    drop = {start + i for i, e in enumerate(rest) if e[0] == "new"}
    return tuple(d for i, d in enumerate(target) if i not in drop)


_COMBINE = {  # x.at[key].<mode>(value) on the indexed region
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "min": lambda a, b: fn.minimum(a, b),
    "max": lambda a, b: fn.maximum(a, b),
}


def _combine_dtype(x: Tensor, value, op: str) -> DType:
    """The dtype ``x.at[k].add(value)`` (or another combining update) computes in: the
    two promoted, a Python scalar weakly (JAX's: ``int32.at[0].add(-1.5)`` adds in float32
    and converts the sum back, rather than converting ``-1.5`` to int32 first)."""
    if isinstance(value, Tensor):
        return promote_types(x.dtype, value.dtype)
    if isinstance(value, numbers.Number) and not isinstance(value, np.generic):
        return result_type([x.dtype], [value])
    return promote_types(x.dtype, as_tensor(value, op=op).dtype)


def _update(x, key, value, mode):
    op = "setitem" if mode == "set" else "at"
    x = as_tensor(x, op=op)
    work = x.dtype if mode == "set" else _combine_dtype(x, value, op)
    parts = _entries_of(key)
    if any(type(k) is bool or type(k) is np.bool_ for k in parts):
        # NumPy's 0-d masks: True is a new axis of length 1, False one of length 0 (a
        # region with nothing in it: the value must still fit it)
        region = getitem(x, key).shape
        if 0 in region:
            _fit(as_tensor(value, work, op), region)
            return x
        key = tuple(None if type(k) is bool or type(k) is np.bool_ else k for k in parts)
    key, value = _without_new_axes(x, key, value, op, work)
    k = _parse_key(x, key, op)
    region = fn.slice_normalized(x, k.slices)
    value = as_tensor(value, work, op)
    if not k.adv:
        view_shape = tuple(d for i, d in enumerate(region.shape) if i not in k.int_dims)
        v = fn.reshape(_fit(value, view_shape), region.shape)
        if mode == "set":
            new_region = v
        else:  # combined in the promoted dtype, converted back
            wide = region if work is x.dtype else fn.cast(region, work)
            new_region = _COMBINE[mode](wide, v)
            if new_region.dtype is not x.dtype:
                new_region = fn.cast(new_region, x.dtype)
    else:
        flat, lin, ishape, rest = _linear_index(region, k.adv)
        basic_shape = tuple(region.shape[i] for i in rest)
        at = k.adv_block() or 0  # separated advanced indices: their dims come first
        v = _fit(value, basic_shape[:at] + tuple(ishape) + basic_shape[at:])
        if at:
            n = len(ishape)
            v = fn.moveaxis(v, list(range(at, at + n)), list(range(n)))
        # every update at a repeated index takes part, but for ``set`` (one is kept)
        what = _run_time_what(op, x, k.adv)
        v = as_tensor(v, work, op="setitem")
        if mode == "sub":  # repeated indices accumulate: the negated values added
            v, scatter_mode = fn.neg(v), "add"
        else:
            scatter_mode = mode
        wide = flat if work is x.dtype else fn.cast(flat, work)
        new_flat = _scatter_at(wide, lin, v, 0, scatter_mode, what)
        if new_flat.dtype is not x.dtype:
            new_flat = fn.cast(new_flat, x.dtype)
        dims = [d for d, _ in k.adv]
        moved = fn.reshape(new_flat, tuple(region.shape[d] for d in dims) + basic_shape)
        order = dims + rest
        new_region = fn.permute(moved, [order.index(i) for i in range(region.ndim)])
    if all(same_shape(s, (0, 1, d)) for s, d in zip(k.slices, x.shape)):
        return _laid_out_as(x, new_region)
    # the normalized region as it is: turned back into slices, its starts would be
    # normalized again and lose their expressions in compile's dynamic sizes
    return _laid_out_as(x, fn.slice_update_normalized(x, new_region, k.slices))


def _laid_out_as(x: Tensor, out: Tensor) -> Tensor:
    """``out`` (``x`` updated) in ``x``'s layout, as JAX's ``x.at[...].set`` keeps it: an
    update of a region that cuts a sharded dim is computed on the gathered dim (each
    device needs the whole region), which left a sharded parameter replicated on every
    device after ``w[0] = 0``. A value with partial terms is left as computed."""
    spec = x._impl.sharding
    if spec is None or spec.partial or out._impl.sharding is None:
        return out
    if out._impl.shape != x._impl.shape or out._impl.sharding.same_layout(spec):
        return out
    return spmd.reshard_to(out, spec, "setitem")


def _fit(value, shape):
    while value.ndim > len(shape) and value.shape[0] == 1:
        value = fn.reshape(value, value.shape[1:])
    if value.shape != tuple(shape):
        try:
            value = fn.broadcast_to(value, tuple(shape))
        except OpError:
            raise OpError(
                f"setitem: value of shape {value.shape} cannot be broadcast to the indexed "
                f"region of shape {tuple(shape)}"
            ) from None
    return value


class Write(NamedTuple):
    """One in-place update recorded while ``compile`` traces (``STATE.writes``): ``tensor``
    took a new value; ``before`` is its impl until then. Captured state is written back at
    each call, and so is an argument, unless ``item``: an assignment (``x[i] = v``,
    ``x op= v``) leaves the caller's argument as it was, with a warning at the trace."""

    tensor: Tensor
    before: TensorImpl
    item: bool


def setitem(x: Tensor, key, value) -> None:
    """``x[key] = value``: rebinds ``x`` to the updated tensor (other handles of the old value
    are unchanged; the update is recorded like any op, so it is differentiable).

    On a ``requires_grad`` leaf (a parameter) the value changes and the tensor stays that
    leaf, with its ``.grad``, as under PyTorch's ``no_grad``: ``loss.backward()`` still
    reaches it (it had made the parameter a computed value that ``backward`` skipped). A
    compiled function that assigns into captured state writes it back at each call."""
    _WRITTEN[0] = _Written(x, key)  # (views of x this region misses keep their value)
    try:
        if x._impl.requires_grad:
            v = value.detach() if isinstance(value, Tensor) else value
            rebind(x, _update(x.detach(), key, v, "set"), item=True)
        else:
            rebind(x, unrecorded(x, _update(x, key, value, "set")), item=True)
    finally:
        _WRITTEN[0] = None
    write_through(x)


def unrecorded(x: Tensor, new: Tensor) -> Tensor:
    """What ``x`` holds after an in-place write of ``new`` (``x[i] = v``, ``x.clamp_()``).
    Under ``no_grad``, on a computed tensor with ``requires_grad`` history, the write is
    PyTorch's unrecorded in-place op: ``x`` takes the new value and keeps its history, so
    gradients pass straight through to what ``x`` was computed from. That is ``new``'s
    value exactly (``new - 0``) with ``x``'s derivative (the 0 is ``stop_gradient(x) - x``,
    0 also where ``x`` is not finite). Anywhere else, ``new`` itself, but for a computed
    tensor with history whose new value has none (``y = x * 2; y.fill_(3)``): PyTorch
    records the write, so ``y`` stays in the graph with a zero gradient through it (it had
    left it, and ``backward`` raised)."""
    impl = x._impl
    if STATE.no_grad is None and _leaves_the_graph(impl, new):
        with enable_grad():
            return fn.where(fn.full(tuple(x.shape), False, DType.bool), x, new)
    if (
        STATE.no_grad is None
        or impl.requires_grad
        or REQUIRES_GRAD not in impl.traced
        or not impl.dtype.is_float
        or new.dtype is not impl.dtype
        or new.shape != x.shape
    ):
        return new
    return _straight_through(x, new)


def _straight_through(x: Tensor, new: Tensor) -> Tensor:
    """``new``'s value exactly with ``x``'s derivative: ``stop_gradient(new) - 0``, the 0
    being ``stop_gradient(x) - x`` (0 also where ``x`` is not finite)."""
    with enable_grad():
        zero = fn.where(fn.isfinite(x), fn.stop_gradient(x) - x, 0.0)
        return fn.stop_gradient(new) - zero


def _leaves_the_graph(impl, new: Tensor) -> bool:
    """Whether a recorded in-place write of ``new`` would take a computed tensor (``impl``,
    with PyTorch-style history) out of the graph: the new value has none of its own."""
    return (
        REQUIRES_GRAD in impl.traced
        and not impl.requires_grad
        and not impl.levels
        and impl.dtype.is_float
        and REQUIRES_GRAD not in new._impl.traced
        and new.dtype is impl.dtype
        and new.shape == tuple(impl.logical_shape)
    )


# ``setitem``'s tensor and key while it rebinds: ``_refresh_views`` leaves the views of
# other regions (row views of a table whose rows are written one at a time) as they are
class _Written(NamedTuple):
    """The region ``setitem`` is writing: ``tensor[key]``."""

    tensor: Tensor
    key: object


_WRITTEN: list = [None]


def _spans(shape: tuple, key) -> list | None:
    """Per dim of ``shape``, the (first, last) index a basic key of ints and slices
    reaches (the whole dim for a dim it leaves out), or None for another key or an empty
    region."""
    entries = _entries_of(key)
    if len(entries) > len(shape):
        return None
    out = []
    for k, n in zip(entries, shape):
        n = int(n)
        if _is_int(k):
            i = int(k) % n if n else 0
            out.append((i, i))
        elif type(k) is slice:
            r = range(*k.indices(n))
            if not r:
                return None
            out.append((min(r[0], r[-1]), max(r[0], r[-1])))
        else:  # None, Ellipsis, a tensor: not worked out here
            return None
    out.extend((0, int(n) - 1) for n in shape[len(entries) :])
    return out


def _apart(spans_a, shape: tuple, b) -> bool:
    """Whether the region ``spans_a`` (``_spans`` of a key) and basic key ``b`` reach no
    common element of a tensor of ``shape`` (conservatively: their index ranges miss
    each other in some dim)."""
    sb = _spans(shape, b)
    if spans_a is None or sb is None:
        return False
    return any(ha < lb or hb < la for (la, ha), (lb, hb) in zip(spans_a, sb))


class Reshaped(NamedTuple):
    """Where a view made by a reshape (``x.view(-1)``, ``flatten``, ``squeeze``) sits in
    the tensor it was read from: all of it, in this shape."""

    shape: tuple


class Permuted(NamedTuple):
    """Where a view made by a permutation (``x.T``, ``x.transpose(0, 1)``) sits in the
    tensor it was read from: all of it, dims reordered by ``perm``."""

    perm: tuple


class Diagonal(NamedTuple):
    """Where a view made by ``x.diagonal(offset, axis1, axis2)`` sits in the tensor it was
    read from: the entries ``(i + r0, i + c0)`` of the plane of ``axis1`` (rows) and
    ``axis2`` (non-negative), as a last dim after the others."""

    offset: int
    axis1: int
    axis2: int

    def positions(self, shape: tuple) -> tuple:
        """``(rows, cols)``: the diagonal's index arrays in that plane."""
        n_rows, n_cols = int(shape[self.axis1]), int(shape[self.axis2])
        r0, c0 = max(-self.offset, 0), max(self.offset, 0)
        k = max(0, min(n_rows - r0, n_cols - c0))
        return np.arange(k) + r0, np.arange(k) + c0

    def read(self, x: Tensor) -> Tensor:
        """The diagonal of ``x`` (the view's value)."""
        rows, cols = self.positions(tuple(x.shape))
        plane = fn.moveaxis(x, (self.axis1, self.axis2), (-2, -1))
        return getitem(plane, (Ellipsis, rows, cols))

    def written(self, base: Tensor, view: Tensor) -> Tensor:
        """``base`` with ``view`` as its diagonal."""
        rows, cols = self.positions(tuple(base.shape))
        plane = fn.moveaxis(base, (self.axis1, self.axis2), (-2, -1))
        new = _update(plane, (Ellipsis, rows, cols), view, "set")
        return fn.moveaxis(new, (-2, -1), (self.axis1, self.axis2))


def is_basic_key(key) -> bool:
    """An index of ints, slices, ``...`` and None: PyTorch reads a view with it (integer
    tensors and masks read a copy). A 0-d integer tensor is an int to PyTorch (``x[i]`` in
    a ``fori_loop`` body, ``x[torch.tensor(1)]``): a view too."""
    for k in _entries_of(key):
        if not (k is None or k is Ellipsis or type(k) is slice or _is_int(k) or _int_scalar(k)):
            return False
    return True


def _int_scalar(k) -> bool:
    return isinstance(k, Tensor) and k.dtype.is_int and k.ndim == 0 and not k._impl.levels


def make_view(out: Tensor, base: Tensor, where) -> Tensor:
    """Mark ``out`` as a PyTorch-style view of ``base`` at ``where`` (a basic index key,
    ``Reshaped``, ``Permuted`` or ``Diagonal``): an in-place change of ``out`` writes
    through to ``base`` (``write_through``), and one of ``base`` reaches ``out`` (``rebind``
    re-derives it), as views share storage. ``base`` holds its views weakly."""
    out._base = (base, where)
    watch(base, out)
    return out


def watch(base: Tensor, view: Tensor) -> None:
    """Hold ``view`` weakly among ``base``'s views, which ``rebind`` refreshes after an
    in-place change of ``base``."""
    try:
        views = base._views
    except AttributeError:
        views = base._views = []
    if len(views) >= _PRUNE_AT and len(views) & (len(views) - 1) == 0:
        views[:] = [r for r in views if r() is not None]  # (at powers of two: amortized)
    views.append(weakref.ref(view))


_PRUNE_AT = 16


def viewable_reshape(x: Tensor, shape: tuple) -> bool:
    """Whether PyTorch's ``x.reshape(shape)`` is a view of ``x`` rather than a copy: the
    strides ``x`` has in its storage (a tensor read as a view has its base's, permuted or
    sliced) allow the new shape (``x.T.reshape(-1)`` is a copy in PyTorch)."""
    if getattr(x, "_base", None) is None:
        return True  # contiguous
    return _reshaped_strides(tuple(x.shape), _strides(x), tuple(shape)) is not None


def _contiguous(shape: tuple) -> tuple:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


def _strides(t: Tensor) -> tuple:
    """The element strides of ``t`` in the storage of the tensor its views lead back to
    (C order for a tensor that is not a view)."""
    link = getattr(t, "_base", None)
    if link is None:
        return _contiguous(tuple(t.shape))
    base, where = link
    s = _strides(base)
    if type(where) is Permuted:
        return tuple(s[p] for p in where.perm)
    if type(where) is Reshaped:
        got = _reshaped_strides(tuple(base.shape), s, tuple(t.shape))
        return got if got is not None else _contiguous(tuple(t.shape))
    if type(where) is Diagonal:
        rest = [s[d] for d in range(len(s)) if d not in (where.axis1, where.axis2)]
        return (*rest, s[where.axis1] + s[where.axis2])
    entries = _entries_of(where)
    used = sum(1 for k in entries if k is not None and k is not Ellipsis)
    out, i = [], 0
    for k in entries:
        if k is None:
            out.append(0)
        elif k is Ellipsis:
            for _ in range(len(base.shape) - used):
                out.append(s[i])
                i += 1
        elif type(k) is slice:
            out.append(s[i] * k.indices(int(base.shape[i]))[2])
            i += 1
        else:  # an int
            i += 1
    out.extend(s[i:])
    return tuple(out)


def _reshaped_strides(old: tuple, strides: tuple, new: tuple):
    """The strides of ``new`` over the same storage as a tensor of shape ``old`` and
    ``strides``, or None when no such strides exist (PyTorch then copies). Dims of the old
    shape that are contiguous with each other form chunks; the new dims must split each
    chunk exactly."""
    if not old or math.prod(old) == 0:  # (0-d, ``x[1, 1].reshape(-1)``: a view of ones)
        return _contiguous(new)
    result = [0] * len(new)
    view_d = len(new) - 1
    chunk_stride = strides[-1] if strides else 1
    tensor_numel = view_numel = 1
    for d in range(len(old) - 1, -1, -1):
        tensor_numel *= old[d]
        # a chunk ends where the next dim out is not laid out right after this one
        if d == 0 or (old[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new[view_d] == 1):
                result[view_d] = view_numel * chunk_stride
                view_numel *= new[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_stride = strides[d - 1]
                tensor_numel = view_numel = 1
    return tuple(result) if view_d == -1 else None


def _refresh_views(x: Tensor, source: Tensor | None = None) -> None:
    """After ``x`` took a new value in place: each live view of ``x`` takes its part of it,
    and passes it on to its own views (a view of a view of ``x``); ``x.data``'s handles
    take all of it, without history, except ``source`` (the handle the change came
    through, which holds it already)."""
    try:
        views = x._views
    except AttributeError:
        return
    live = []
    written = _WRITTEN[0]
    shape = tuple(x.shape)
    mine = written is not None and written.tensor is x
    region = _spans(shape, written.key) if mine else None
    # a view is read from its base with history even when the base changed under
    # ``no_grad`` (an optimizer's ``w.mul_``): ``v = w[:2]`` stays a function of ``w``
    outer = STATE.no_grad, STATE.grad_block
    STATE.no_grad, STATE.grad_block = None, "on"
    try:
        for ref in views:
            v = ref()
            if v is not None and getattr(v, "_owner", None) is x:  # ``x.data``'s handle
                live.append(ref)
                if v is not source:
                    _take_value(v, fn.stop_gradient(x))
                    _refresh_views(v)
                continue
            link = getattr(v, "_base", None) if v is not None else None
            if link is None or link[0] is not x:
                continue  # gone, or read from another tensor since
            live.append(ref)
            where = link[1]
            if region is not None and type(where) not in (Reshaped, Permuted, Diagonal):
                if _apart(region, shape, where):
                    continue  # another region was written: its value is as it was
            if type(where) is Reshaped:
                new = fn.reshape(x, tuple(v.shape))
            elif type(where) is Permuted:
                new = fn.permute(x, where.perm)
            elif type(where) is Diagonal:
                new = where.read(x)
            else:
                new = getitem(x, where)
            if new is x:  # (a reshape to the same shape: a value of its own)
                new = fn.identity(x)
            if fits_in_place(v, new):
                rebind(v, new, item=True)
    finally:
        STATE.no_grad, STATE.grad_block = outer
    x._views = live


def write_through(view: Tensor) -> None:
    """After an in-place change of ``view`` (``view[k] = v``, ``view.zero_()``): when it was
    read from a tensor as a PyTorch view (its ``_base``), write its new value there too,
    as PyTorch's views share storage (``w[pad].zero_()``, ``w.grad[0].zero_()``). That
    tensor takes it as an assignment does (a ``requires_grad`` leaf stays that leaf), and
    passes it on to the tensor it was itself read from."""
    link = getattr(view, "_base", None)
    if link is None:
        return
    base, where = link
    if type(where) is Reshaped:
        setitem(base, Ellipsis, fn.reshape(view, where.shape))
    elif type(where) is Permuted:
        back = tuple(int(i) for i in np.argsort(where.perm))
        setitem(base, Ellipsis, fn.permute(view, back))
    elif type(where) is Diagonal:
        setitem(base, Ellipsis, where.written(base, view))
    else:
        setitem(base, where, view)


def restore_and_refuse(bad: list, message) -> None:
    """Give each ``(tensor, impl before)`` of ``bad`` its value back (``restore``) and
    raise ``ValueError(message(first tensor))``: an in-place update a transform cannot
    honour (a loop body's or a vmap's on a tensor from outside it) leaves nothing
    behind."""
    restore(bad)
    raise ValueError(message(bad[0][0]))


def restore(bad: list) -> None:
    """Give each ``(tensor, impl before)`` of ``bad`` its value back, the last write undone
    first (also when the function that wrote raised: its writes would have been refused,
    and the tensor held a value of the trace)."""
    for x, before in reversed(bad):
        x._impl = before
        before.wrapper = weakref.ref(x)


def fits_in_place(old, new) -> bool:
    """Can tensor ``old`` take ``new``'s value in place (``rebind``): another tensor of the
    same shape, dtype and vmap levels?"""
    return (
        isinstance(old, Tensor)
        and isinstance(new, Tensor)
        and old is not new
        and old.shape == new.shape
        and old.dtype == new.dtype
        and old._impl.levels == new._impl.levels
    )


def _move_hooks(old, new) -> None:
    """A tensor updated in place, as PyTorch: a leaf's gradient hooks are the tensor's
    (they see the total gradient of every version), and ``retain_grad`` follows it to
    the new value; a computed tensor's hooks stay with the value they were registered
    on (the gradient of the old version)."""
    if old.requires_grad:
        new.hooks, old.hooks = old.hooks, None
    elif RETAIN in old.hooks:
        new.hooks = [RETAIN]
        old.hooks = [h for h in old.hooks if h is not RETAIN] or None


def rebind(x: Tensor, new: Tensor, *, item: bool = False, source: Tensor | None = None) -> None:
    """Make tensor object ``x`` hold ``new``'s value in place, keeping its identity, its
    ``requires_grad`` flag and its ``.grad``, so every reference to it (a parameter) sees
    the update: an optimizer's step, a loaded checkpoint, ``x[i] = v``, ``x -= v``.

    ``new`` must be a fresh tensor nothing else will use (e.g. from ``detach``): its storage
    becomes ``x``'s. While ``compile`` traces, the update is recorded (``STATE.writes``) and
    replayed at each call; ``item`` marks an assignment (``x[i] = v``, ``x op= v``), which
    is written back to captured state but not to an argument (``Write``).
    """
    if new is x:
        return
    _take_value(x, new, item)
    owner = getattr(x, "_owner", None)  # ``p.data``'s handle: the parameter follows it
    if owner is not None:
        rebind(owner, _through_data(owner, x), item=item, source=x)
        write_through(owner)  # (``x[1:].data.add_(v)``: the view's base follows it too)
    _refresh_views(x, source)


def _through_data(owner: Tensor, handle: Tensor) -> Tensor:
    """The value ``owner`` takes when its ``.data`` handle changed in place: the handle's,
    which PyTorch does not record. A computed tensor keeps its history (``y = x * w;
    y.data[0] = 0``: gradients pass straight through to ``x`` and ``w``, as in
    ``unrecorded``); a leaf takes the value alone (it stays the leaf it was)."""
    impl = owner._impl
    if impl.requires_grad or not impl.traced or not impl.dtype.is_float:
        return fn.stop_gradient(handle)
    return _straight_through(owner, handle)


def _take_value(x: Tensor, new: Tensor, item: bool = True) -> None:
    """``rebind``'s own part: ``x`` holds ``new``'s value, recorded for the traces that
    watch writes, keeping its leaf flag, ``.grad`` and hooks."""
    old = x._impl
    if STATE.writes is not None:
        STATE.writes.append(Write(x, old, item))
    if STATE.body_writes is not None:
        STATE.body_writes.append((weakref.ref(x), old))
    if STATE.vmap_writes is not None and new._impl.levels != old.levels:
        STATE.vmap_writes.append((weakref.ref(x), old))
    x._impl = new._impl
    x._impl.wrapper = weakref.ref(x)
    if old.requires_grad:  # (the impl's flags: ``x`` stays the leaf it was)
        x._impl.requires_grad = True
        x._impl.traced = x._impl.traced | {REQUIRES_GRAD}
    x._impl.grad = old.grad
    if old.hooks:  # (``register_hook``'s and ``retain_grad``'s marks, as PyTorch keeps them)
        _move_hooks(old, x._impl)
    impl = x._impl
    if (
        impl.buffer is None
        and impl.node is not None
        and not impl.levels
        and STATE.writes is None
        and STATE.body_writes is None
        and STATE.vmap_writes is None
    ):  # a pending write outside any trace: computed with the next evaluation
        GRAPH.note_write(x)


_MODES = (None, "promise_in_bounds", "clip", "fill", "drop")


def _fill_default(dtype: DType):
    """JAX's ``fill_value`` default for ``.at[...].get(mode="fill")``: NaN for floats, the
    lowest signed and highest unsigned integer, True for bool."""
    if dtype.is_bool:
        return True
    if dtype.is_float:
        return float("nan")
    info = np.iinfo(dtype.numpy)
    return int(info.min) if info.min < 0 else int(info.max)


def _moded(x, key, mode, op, fill=None):
    """``(x, key, pads)`` for JAX's out-of-bounds ``mode`` of an ``.at`` call: ``"clip"``
    clamps each integer and array index into its dim; ``"fill"`` and ``"drop"`` give each
    such dim one more slot (``pads``: 1 there), holding ``fill``, and send every index out
    of range to it, so a read gives ``fill`` there and a write lands where it is sliced off.
    None and ``"promise_in_bounds"`` keep the key (an index out of range is an error)."""
    if mode not in _MODES:
        raise ValueError(f"{op}: mode must be one of {_MODES[1:]} or None, got {mode!r}")
    pads = [0] * x.ndim
    if mode in (None, "promise_in_bounds"):
        return x, key, pads
    entries = _expand_entries(x, [_key_entry(x, k, op) for k in _entries_of(key)], op)
    out, at = [], 0
    for kind, v, width in entries:
        if kind in ("int", "adv"):
            n = x.shape[at]
            if kind == "int":
                if mode == "clip":
                    out.append(min(max(v + n if v < 0 else v, 0), n - 1))
                else:
                    out.append(v % n if -n <= v < n else n)
            else:
                from_end = fn.where(v < 0, v + n, v)
                if mode == "clip":
                    out.append(fn.clip(from_end, 0, n - 1))
                else:
                    out.append(fn.where((v >= -n) & (v < n), from_end, n))
            if mode != "clip":
                pads[at] = 1
        else:
            out.append(None if kind == "new" else v)
        at += width
    if any(pads):
        x = fn.pad(x, [(0, p) for p in pads], value=0 if fill is None else fill)
    return x, tuple(out), pads


def _unpadded(y, pads):
    if not any(pads):
        return y
    return getitem(y, tuple(slice(0, n - p) for n, p in zip(y.shape, pads, strict=True)))


class _AtRef:
    """``x.at[key]``. Every method takes JAX's keywords: ``mode`` (``"clip"`` clamps
    integer and array indices into range; ``"drop"`` leaves out updates at an index out of
    range; ``"fill"`` reads ``fill_value`` there; None or ``"promise_in_bounds"``: such an
    index is an error, nabla's default), and ``indices_are_sorted``/``unique_indices``,
    hints accepted and ignored."""

    def __init__(self, x, key):
        self.x = x
        self.key = key

    def _update(self, value, how, mode):
        x = as_tensor(self.x, op="at")
        padded, key, pads = _moded(x, self.key, mode, "at")  # ("fill" writes as "drop")
        return _unpadded(_update(padded, key, value, how), pads)

    def set(self, value, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``x[key] = value``."""
        return self._update(value, "set", mode)

    def add(self, value, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``x[key] += value`` (repeated indices accumulate)."""
        return self._update(value, "add", mode)

    def multiply(self, value, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``x[key] *= value``: every update at a repeated index takes
        part, as in JAX (also for :meth:`min` and :meth:`max`)."""
        return self._update(value, "mul", mode)

    mul = multiply

    def subtract(self, value, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``x[key] -= value`` (repeated indices accumulate)."""
        return self._update(value, "sub", mode)

    def divide(self, value, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x`` divided by ``value`` at ``key`` (true division: an int ``x`` gives floats),
        as JAX: ``x / ones.at[key].multiply(value)``, so repeated indices divide again."""
        return self.x / _AtRef(fn.ones_like(self.x), self.key).multiply(value, mode=mode)

    def power(self, value, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x ** value`` at ``key``, as JAX: ``x ** ones.at[key].multiply(value)``."""
        return self.x ** _AtRef(fn.ones_like(self.x), self.key).multiply(value, mode=mode)

    def min(self, value, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``x[key] = minimum(x[key], value)`` (see :meth:`multiply`)."""
        return self._update(value, "min", mode)

    def max(self, value, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``x[key] = maximum(x[key], value)`` (see :meth:`multiply`)."""
        return self._update(value, "max", mode)

    def get(self, *, mode=None, fill_value=None, indices_are_sorted=False, unique_indices=False):
        """``x[key]``; with ``mode="fill"``, ``fill_value`` (JAX's default: NaN, or an
        integer dtype's extreme) where an index is out of range."""
        x = as_tensor(self.x, op="at")
        # ("drop" reads as "fill": out of range gives the fill value)
        out_of_range = mode in ("fill", "drop")
        fill = _fill_default(x.dtype) if fill_value is None and out_of_range else fill_value
        padded, key, _ = _moded(x, self.key, mode, "at", fill)
        return getitem(padded, key)


class AtIndexer:
    """``x.at[key]``: ``.set(v)``, ``.add(v)``, ``.subtract(v)``, ``.multiply(v)``,
    ``.divide(v)``, ``.power(v)``, ``.min(v)``, ``.max(v)`` and ``.get()``, each a new tensor.

    An index out of range is an ``IndexError``, as NumPy's and PyTorch's (JAX drops such an
    update and clamps such a read): at the call for an index with a value; one known only
    when the program runs is checked then on the NumPy backend, and follows JAX on MAX (a
    compiled graph cannot raise)."""

    def __init__(self, x):
        self.x = x

    def __getitem__(self, key):
        return _AtRef(self.x, key)


provide(globals(), __all__)
