"""``nb.lax``: the ``jax.lax`` names JAX programs use most, so ``lax.`` ports by renaming.

Control flow (``cond``, ``switch``, ``while_loop``, ``fori_loop``, ``scan``) and
``stop_gradient`` are nabla's own functions; the rest are written with nabla's ops, so they
differentiate, batch under ``vmap`` and compile as those do:

- ``map(f, xs)``: ``f`` over the leading dim of ``xs``, as one ``scan`` (one traced body);
- ``select``, ``clamp`` (JAX's argument order ``(min, x, max)``), ``iota``;
- ``dynamic_slice``/``dynamic_update_slice`` (and their ``_in_dim`` forms,
  ``dynamic_index_in_dim``): start indices that may be tensors (traced or batched), clamped
  so the slice fits, as JAX clamps them;
- ``psum``/``pmean``/``pmax``/``pmin`` over a mesh axis name inside ``shard_map``
  (:func:`nabla.all_reduce`), or over the examples of a ``vmap(axis_name=)``, and
  ``axis_index`` along either;
- the elementwise names (``add``, ``mul``, ``max``, ``lt``, ...: nabla's ops, which promote
  mixed dtypes as ``jnp`` does), ``div``/``rem`` (C's rounding toward zero), ``round``
  (halves away from zero), and the structural ones: ``dot_general``, ``broadcast_in_dim``,
  ``pad`` (interior and negative), ``select_n``, ``slice``, ``rev``, ``sort`` of several
  operands, ``top_k``, ``cumsum``/``cumprod`` with ``reverse``, ``full``.
"""

from __future__ import annotations

import builtins
import numbers

import numpy as np

from .core.dtypes import DType
from .core.pytree import tree_leaves, tree_map
from .core.state import spmd_axes
from .ops import binary, collectives, creation, indexing, linalg, reduction, unary, view
from .ops._util import norm_axis
from .ops.unary import stop_gradient
from .runtime.tensor import Tensor
from .transforms.control_flow import cond, fori_loop, scan, switch, while_loop
from .transforms.vmap import names_a_vmap, reduce_over_vmap, vmap, vmap_axis_index

__all__ = [
    "cond",
    "switch",
    "while_loop",
    "fori_loop",
    "scan",
    "map",
    "stop_gradient",
    "select",
    "clamp",
    "iota",
    "dynamic_slice",
    "dynamic_update_slice",
    "dynamic_slice_in_dim",
    "dynamic_update_slice_in_dim",
    "dynamic_index_in_dim",
    "psum",
    "pmean",
    "pmax",
    "pmin",
    "axis_index",
]


def map(f, xs, *, batch_size: int | None = None):  # noqa: A001 - JAX's name
    """``f`` applied to each slice of ``xs`` (a pytree) along its leading dim, the results
    stacked (JAX's ``lax.map``): one ``scan`` whose body ``f`` is traced once.

    Args:
        f: a function of one slice.
        xs: a tensor or pytree of tensors sharing their leading dim.
        batch_size: with it, each step maps ``f`` over that many slices at once (``vmap``),
            as JAX's; a remainder is mapped on its own.

    Returns:
        ``f``'s results stacked along a new leading dim.

    Raises:
        ValueError: for a leaf of ``xs`` with no leading dim.
    """
    leaves = tree_leaves(xs)
    if any(not isinstance(x, Tensor | np.ndarray) or np.ndim(x) == 0 for x in leaves):
        raise ValueError("lax.map: every leaf of xs needs a leading dim to map over")
    n = np.shape(leaves[0])[0] if leaves else 0
    if batch_size is None or not n:  # (nothing to map: scan's empty results, as JAX's)
        return scan(lambda carry, x: (carry, f(x)), (), xs)[1]
    b = builtins.max(1, builtins.min(int(batch_size), n)) if n else 1
    full = n - n % b
    vf = vmap(f)
    parts = []
    if full:
        chunks = tree_map(lambda x: view.reshape(x[:full], (full // b, b) + tuple(x.shape[1:])), xs)
        ys = scan(lambda carry, x: (carry, vf(x)), (), chunks)[1]
        parts.append(tree_map(lambda y: view.reshape(y, (full,) + tuple(y.shape[2:])), ys))
    if n - full:
        parts.append(vf(tree_map(lambda x: x[full:], xs)))
    if len(parts) == 1:
        return parts[0]
    return tree_map(lambda a, c: view.concatenate([a, c], 0), *parts)


def select(pred, on_true, on_false) -> Tensor:
    """``on_true`` where ``pred`` else ``on_false`` (JAX's ``lax.select``:
    :func:`nabla.where`). ``pred`` is bool or an integer, as JAX's: an integer picks
    ``on_true`` where it is positive (JAX's ``select_n`` index, clamped to the two cases).

    Raises:
        TypeError: for a float ``pred``.
    """
    pred = pred if isinstance(pred, Tensor) else creation.constant(pred)
    if pred.dtype.is_int:
        pred = pred > 0
    if not pred.dtype.is_bool:
        raise TypeError(f"lax.select: pred must be bool or an integer, got {pred.dtype.value}")
    return binary.where(pred, on_true, on_false)


def clamp(min, x, max) -> Tensor:  # noqa: A002 - JAX's names
    """``x`` clamped into ``[min, max]``, in JAX's argument order (:func:`nabla.clip`'s
    value). The derivative is JAX's: ``x``'s only strictly inside the bounds, a bound's
    only strictly beyond it (none at a tie, where ``nb.clip`` shares it)."""
    x = x if isinstance(x, Tensor) else creation.constant(x)
    below, above = x < min, x > max
    tie = stop_gradient(x)
    inside = binary.logical_and(x > min, x < max)
    out = binary.where(below, min, binary.where(above, max, binary.where(inside, x, tie)))
    # JAX's min(max(x, min), max): where min > max, every element is max
    return binary.where(out > max, max, out)


def iota(dtype, size: int) -> Tensor:
    """``0, 1, ..., size - 1`` of ``dtype`` (JAX's ``lax.iota``)."""
    return creation.arange(size, dtype=dtype)


def _start(index, size: int, length: int, what: str):
    """Start ``index`` as JAX takes it: a negative one counts from the end, then it is
    clamped into ``[0, size - length]``; a Python int when it is one, else an int64
    tensor."""
    if isinstance(index, numbers.Integral) and not isinstance(index, bool):
        index = int(index) + size if index < 0 else int(index)
        return builtins.min(builtins.max(index, 0), size - length)
    t = index if isinstance(index, Tensor) else creation.constant(index)
    if t.ndim != 0 or not t.dtype.is_int:
        raise TypeError(f"{what}: a start index is an int or a 0-d integer tensor, got {index!r}")
    t = t.cast(DType.int64)
    t = binary.where(t < 0, t + size, t)
    return binary.clip(t, 0, size - length)


def _positions(start, length: int):
    """The indices ``start .. start + length - 1`` (a tensor start: computed)."""
    if isinstance(start, int):
        return builtins.slice(start, start + length)
    return creation.arange(length, dtype=DType.int64) + start


def _checked(what, x, starts, sizes=None):
    x = x if isinstance(x, Tensor) else creation.constant(x)
    starts = list(starts)
    if len(starts) != x.ndim or (sizes is not None and len(sizes) != x.ndim):
        raise ValueError(
            f"{what}: one start index{' and one size' if sizes is not None else ''} per dim "
            f"of the operand of shape {x.shape}, got {len(starts)}"
            + ("" if sizes is None else f" and {len(sizes)}")
        )
    return x, starts


def dynamic_slice(operand, start_indices, slice_sizes) -> Tensor:
    """The block of ``operand`` of shape ``slice_sizes`` starting at ``start_indices``
    (JAX's ``lax.dynamic_slice``): starts may be tensors, known only when the program runs;
    each is clamped so the block fits.

    Raises:
        ValueError: unless there is one start and one size per dim, each size fitting.
    """
    x, starts = _checked("dynamic_slice", operand, start_indices, slice_sizes)
    for d, (s, n) in enumerate(zip(starts, slice_sizes, strict=True)):
        if not 0 <= n <= x.shape[d]:
            raise ValueError(
                f"dynamic_slice: slice size {n} does not fit dim {d} of shape {x.shape}"
            )
        at = _positions(_start(s, x.shape[d], n, "dynamic_slice"), n)
        if isinstance(at, builtins.slice):
            x = x[(builtins.slice(None),) * d + (at,)]
        else:
            x = indexing.gather(x, at, d)
    return x


def dynamic_update_slice(operand, update, start_indices) -> Tensor:
    """``operand`` with the block at ``start_indices`` replaced by ``update`` (JAX's
    ``lax.dynamic_update_slice``); starts as in :func:`dynamic_slice`, clamped so
    ``update`` fits.

    Raises:
        ValueError: unless there is one start per dim and ``update`` fits in ``operand``.
    """
    x, starts = _checked("dynamic_update_slice", operand, start_indices)
    if isinstance(update, Tensor):
        u = update
    elif isinstance(update, np.ndarray | np.generic):  # (an array keeps its dtype)
        u = creation.constant(update)
    else:  # Python numbers and lists take the operand's, as weakly typed values do
        u = creation.constant(update, dtype=x.dtype)
    if u.dtype is not x.dtype:  # (JAX's: a silent cast would truncate a float into ints)
        raise TypeError(
            f"dynamic_update_slice: update of dtype {u.dtype.value} for an operand of dtype "
            f"{x.dtype.value}; cast it first"
        )
    if u.ndim != x.ndim or any(a > b for a, b in zip(u.shape, x.shape, strict=True)):
        raise ValueError(
            f"dynamic_update_slice: update of shape {u.shape} does not fit the operand of "
            f"shape {x.shape}"
        )
    at = [
        _positions(_start(s, x.shape[d], u.shape[d], "dynamic_update_slice"), u.shape[d])
        for d, s in enumerate(starts)
    ]
    if all(isinstance(a, builtins.slice) for a in at):
        return x.at[tuple(at)].set(u)
    # index grids: one integer tensor per dim, broadcasting to the update's shape
    grids = []
    for d, a in enumerate(at):
        a = (
            creation.arange(a.start, a.stop, dtype=DType.int64)
            if isinstance(a, builtins.slice)
            else a
        )
        grids.append(view.reshape(a, tuple(-1 if i == d else 1 for i in range(x.ndim))))
    return x.at[tuple(grids)].set(u)


def dynamic_slice_in_dim(operand, start_index, slice_size: int, axis: int = 0) -> Tensor:
    """:func:`dynamic_slice` along one dim (JAX's ``lax.dynamic_slice_in_dim``)."""
    x = operand if isinstance(operand, Tensor) else creation.constant(operand)
    axis = norm_axis("dynamic_slice_in_dim", axis, x.ndim, x.shape)
    starts = [0] * x.ndim
    sizes = list(x.shape)
    starts[axis], sizes[axis] = start_index, slice_size
    return dynamic_slice(x, starts, sizes)


def dynamic_update_slice_in_dim(operand, update, start_index, axis: int) -> Tensor:
    """:func:`dynamic_update_slice` along one dim (JAX's ``lax.dynamic_update_slice_in_dim``)."""
    x = operand if isinstance(operand, Tensor) else creation.constant(operand)
    axis = norm_axis("dynamic_update_slice_in_dim", axis, x.ndim, x.shape)
    starts = [0] * x.ndim
    starts[axis] = start_index
    return dynamic_update_slice(x, update, starts)


def dynamic_index_in_dim(operand, index, axis: int = 0, keepdims: bool = True) -> Tensor:
    """The slice at ``index`` along ``axis`` (JAX's ``lax.dynamic_index_in_dim``), the dim
    kept as size 1 unless ``keepdims`` is False."""
    out = dynamic_slice_in_dim(operand, index, 1, axis)
    return out if keepdims else view.squeeze(out, axis)


def psum(x, axis_name) -> Tensor:
    """The sum over mesh axis (or axes) ``axis_name`` inside ``shard_map`` (JAX's
    ``lax.psum``: :func:`nabla.all_reduce`), or over the examples of a ``vmap`` named
    ``axis_name`` (``vmap(axis_name=)``)."""
    if names_a_vmap(axis_name):
        return reduce_over_vmap(x, axis_name, "sum")
    return collectives.all_reduce(x, "sum", axes=axis_name)


def pmean(x, axis_name) -> Tensor:
    """The mean over mesh axis ``axis_name`` (JAX's ``lax.pmean``), or over a named
    ``vmap``'s examples."""
    if names_a_vmap(axis_name):
        return reduce_over_vmap(x, axis_name, "mean")
    return collectives.pmean(x, axes=axis_name)


def pmax(x, axis_name) -> Tensor:
    """The maximum over mesh axis ``axis_name`` (JAX's ``lax.pmax``), or over a named
    ``vmap``'s examples."""
    if names_a_vmap(axis_name):
        return reduce_over_vmap(x, axis_name, "max")
    return collectives.all_reduce(x, "max", axes=axis_name)


def pmin(x, axis_name) -> Tensor:
    """The minimum over mesh axis ``axis_name`` (JAX's ``lax.pmin``), or over a named
    ``vmap``'s examples."""
    if names_a_vmap(axis_name):
        return reduce_over_vmap(x, axis_name, "min")
    return collectives.all_reduce(x, "min", axes=axis_name)


def axis_index(axis_name) -> Tensor:
    """Each example's position (int32) along the ``vmap`` named ``axis_name``, or this
    device's along the mesh axis (or axes) ``axis_name`` inside ``shard_map`` (JAX's
    ``lax.axis_index``; :func:`nabla.axis_index` with the body's mesh).

    Raises:
        NameError: when no running vmap or shard_map body has that axis name.
    """
    if names_a_vmap(axis_name) and not isinstance(axis_name, tuple):
        return vmap_axis_index(axis_name)
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    bodies = [spmd_axes.get(n) for n in names if isinstance(n, str)]
    if len(bodies) == len(names) and all(bodies):
        return collectives.axis_index(bodies[0][1], axis_name)
    raise NameError(
        f"lax.axis_index: no running vmap or shard_map body has the axis name {axis_name!r}"
    )


# ----------------------------------------------------------------------------- more of jax.lax
# (these names shadow Python's max, min, abs, round, pow and slice: this module says
# builtins.max and so on for those)
# Elementwise names that are nabla's ops as they are (JAX's lax.add is jnp.add without
# promotion; nabla's promote as jnp does, the same values for same-dtype operands).
add, sub, mul, neg, abs = binary.add, binary.sub, binary.mul, unary.neg, unary.abs  # noqa: A001
exp, log, sqrt, rsqrt, tanh = unary.exp, unary.log, unary.sqrt, unary.rsqrt, unary.tanh
sin, cos, expm1, log1p, erf = unary.sin, unary.cos, unary.expm1, unary.log1p, unary.erf
sign, floor, ceil, square, logistic = (
    unary.sign,
    unary.floor,
    unary.ceil,
    unary.square,
    unary.sigmoid,
)
max, min, pow = binary.maximum, binary.minimum, binary.pow  # noqa: A001
eq, ne, lt, le = binary.equal, binary.not_equal, binary.less, binary.less_equal
gt, ge = binary.greater, binary.greater_equal
__all__ += [
    "add", "sub", "mul", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sin", "cos",
    "expm1", "log1p", "erf", "sign", "floor", "ceil", "square", "logistic", "max", "min",
    "pow", "eq", "ne", "lt", "le", "gt", "ge", "div", "rem", "round", "integer_pow",
    "convert_element_type", "select_n", "broadcast_in_dim", "dot_general", "dot", "rev",
    "slice", "slice_in_dim", "index_in_dim", "concatenate", "squeeze", "expand_dims",
    "transpose", "reshape", "pad", "top_k", "sort", "argmax", "argmin", "cumsum",
    "cumprod", "full", "full_like",
]  # fmt: skip


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else creation.constant(x)


def div(x, y) -> Tensor:
    """``x / y`` as JAX's ``lax.div``: for integers the quotient rounded toward zero (C's;
    ``//`` rounds toward -inf), for floats the true quotient."""
    x, y = _t(x), _t(y)
    if not (x.dtype.is_int and y.dtype.is_int):
        return binary.div(x, y)
    q = binary.floor_div(x, y)
    inexact = binary.logical_and(binary.mod(x, y) != 0, (x < 0) != (y < 0))
    return binary.where(inexact, q + 1, q)


def rem(x, y) -> Tensor:
    """The remainder of :func:`div` (JAX's ``lax.rem``: the sign of ``x``, C's ``%`` and
    ``fmod``; Python's ``%`` takes the sign of ``y``)."""
    x, y = _t(x), _t(y)
    if x.dtype.is_int and y.dtype.is_int:
        return x - div(x, y) * y
    return binary.fmod(x, y)


def round(x, rounding_method=0) -> Tensor:  # noqa: A001 - JAX's name
    """``x`` rounded to integers (JAX's ``lax.round``): halves away from zero by default
    (``rounding_method=0``, JAX's ``AWAY_FROM_ZERO``), to even with ``1``
    (``TO_NEAREST_EVEN``, :func:`nabla.round`'s)."""
    x = _t(x)
    method = int(rounding_method)
    if method == 1:
        return unary.round(x)
    if method != 0:
        raise ValueError(f"lax.round: rounding_method must be 0 or 1, got {rounding_method!r}")
    return unary.sign(x) * unary.floor(unary.abs(x) + 0.5)


def integer_pow(x, y: int) -> Tensor:
    """``x ** y`` for a Python int ``y`` (JAX's ``lax.integer_pow``)."""
    if isinstance(y, bool) or not isinstance(y, numbers.Integral):
        raise TypeError(f"lax.integer_pow: y must be an int, got {y!r}")
    return binary.pow(_t(x), int(y))


def convert_element_type(operand, new_dtype) -> Tensor:
    """``operand`` cast to ``new_dtype`` (JAX's ``lax.convert_element_type``)."""
    return unary.cast(_t(operand), new_dtype)


def select_n(which, *cases) -> Tensor:
    """``cases[which]`` elementwise (JAX's ``lax.select_n``): ``which`` bool (two cases:
    False picks the first) or an integer in ``[0, len(cases))``.

    Raises:
        ValueError: without cases, or with a bool ``which`` and not two cases.
        TypeError: for a float ``which``.
    """
    if not cases:
        raise ValueError("lax.select_n: needs at least one case")
    which = _t(which)
    if which.dtype.is_bool:
        if len(cases) != 2:
            raise ValueError(
                f"lax.select_n: a bool which selects between 2 cases, got {len(cases)}"
            )
        return binary.where(which, cases[1], cases[0])
    if not which.dtype.is_int:
        raise TypeError(f"lax.select_n: which must be bool or integer, got {which.dtype.value}")
    out = _t(cases[-1])
    for i in range(len(cases) - 2, -1, -1):
        out = binary.where(which == i, cases[i], out)
    return out


def broadcast_in_dim(operand, shape, broadcast_dimensions) -> Tensor:
    """``operand`` broadcast to ``shape``, its dim ``i`` becoming dim
    ``broadcast_dimensions[i]`` (JAX's ``lax.broadcast_in_dim``).

    Raises:
        ValueError: for dims that do not fit ``shape``.
    """
    x = _t(operand)
    shape, dims = tuple(int(s) for s in shape), tuple(int(d) for d in broadcast_dimensions)
    if len(dims) != x.ndim or list(dims) != sorted(set(dims)) or (dims and dims[-1] >= len(shape)):
        raise ValueError(
            f"lax.broadcast_in_dim: broadcast_dimensions {dims} must be increasing positions "
            f"in shape {shape}, one per dim of the operand of shape {x.shape}"
        )
    placed = [1] * len(shape)
    for i, d in enumerate(dims):
        if x.shape[i] not in (1, shape[d]):
            raise ValueError(
                f"lax.broadcast_in_dim: operand dim {i} of size {x.shape[i]} cannot broadcast "
                f"to size {shape[d]} (operand {x.shape}, shape {shape})"
            )
        placed[d] = x.shape[i]
    return view.broadcast_to(view.reshape(x, tuple(placed)), shape)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None) -> Tensor:
    """JAX's ``lax.dot_general``: ``dimension_numbers = ((lhs_contract, rhs_contract),
    (lhs_batch, rhs_batch))``; the result's dims are the batch dims, then ``lhs``'s free
    dims, then ``rhs``'s (an ``einsum``). ``precision`` is accepted; with
    ``preferred_element_type`` the result is cast to it."""
    a, b = _t(lhs), _t(rhs)
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = (
        tuple(int(d) % t.ndim for d in ds) for ds, t in ((lc, a), (rc, b), (lb, a), (rb, b))
    )
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise ValueError(
            f"lax.dot_general: contracting dims {lc} and {rc}, batch dims {lb} and {rb} must "
            "pair up"
        )
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    la = [next(letters) for _ in range(a.ndim)]
    lb_ = [None] * b.ndim
    for i, j in zip(lc + lb, rc + rb, strict=True):
        lb_[j] = la[i]
    lb_ = [c if c is not None else next(letters) for c in lb_]
    batch = [la[i] for i in lb]
    free_a = [c for i, c in enumerate(la) if i not in lc and i not in lb]
    free_b = [c for j, c in enumerate(lb_) if j not in rc and j not in rb]
    spec = f"{''.join(la)},{''.join(lb_)}->{''.join(batch + free_a + free_b)}"
    out = linalg.einsum(spec, a, b)
    return out if preferred_element_type is None else unary.cast(out, preferred_element_type)


def dot(lhs, rhs, precision=None, preferred_element_type=None) -> Tensor:
    """JAX's ``lax.dot``: vector/matrix products (:func:`nabla.matmul` of up to 2-D
    operands); ``precision`` accepted, ``preferred_element_type`` the result's dtype."""
    out = linalg.matmul(_t(lhs), _t(rhs))
    return out if preferred_element_type is None else unary.cast(out, preferred_element_type)


def rev(operand, dimensions) -> Tensor:
    """``operand`` reversed along ``dimensions`` (JAX's ``lax.rev``)."""
    return view.flip(_t(operand), tuple(dimensions))


def slice(operand, start_indices, limit_indices, strides=None) -> Tensor:  # noqa: A001
    """``operand[start:limit:stride]`` per dim (JAX's ``lax.slice``; static bounds)."""
    x = _t(operand)
    strides = strides or (1,) * x.ndim
    if not len(start_indices) == len(limit_indices) == len(strides) == x.ndim:
        raise ValueError(
            f"lax.slice: one start, limit and stride per dim of the operand of shape {x.shape}"
        )
    return x[
        tuple(builtins.slice(s, e, st) for s, e, st in zip(start_indices, limit_indices, strides))
    ]


def slice_in_dim(operand, start_index, limit_index, stride: int = 1, axis: int = 0) -> Tensor:
    """``operand[start:limit:stride]`` along ``axis`` (JAX's ``lax.slice_in_dim``)."""
    x = _t(operand)
    axis = norm_axis("lax.slice_in_dim", axis, x.ndim, x.shape)
    index = [builtins.slice(None)] * x.ndim
    index[axis] = builtins.slice(start_index, limit_index, stride)
    return x[tuple(index)]


def index_in_dim(operand, index: int, axis: int = 0, keepdims: bool = True) -> Tensor:
    """``operand``'s slice ``index`` along ``axis`` (JAX's ``lax.index_in_dim``), the dim
    kept with ``keepdims``."""
    x = _t(operand)
    axis = norm_axis("lax.index_in_dim", axis, x.ndim, x.shape)
    out = slice_in_dim(x, index, index + 1 if index != -1 else None, 1, axis)
    return out if keepdims else view.squeeze(out, axis)


def concatenate(operands, dimension: int) -> Tensor:
    """``operands`` joined along ``dimension`` (JAX's ``lax.concatenate``)."""
    return view.concatenate([_t(o) for o in operands], dimension)


def squeeze(array, dimensions) -> Tensor:
    """``array`` without the size-1 ``dimensions`` (JAX's ``lax.squeeze``)."""
    return view.squeeze(_t(array), tuple(dimensions))


def expand_dims(array, dimensions) -> Tensor:
    """``array`` with size-1 dims inserted at ``dimensions`` (JAX's ``lax.expand_dims``)."""
    x = _t(array)
    for d in sorted(int(d) % (x.ndim + len(dimensions)) for d in dimensions):
        x = view.unsqueeze(x, d)
    return x


def transpose(operand, permutation) -> Tensor:
    """``operand``'s dims in the order ``permutation`` (JAX's ``lax.transpose``)."""
    return view.permute(_t(operand), tuple(permutation))


def reshape(operand, new_sizes, dimensions=None) -> Tensor:
    """``operand`` reshaped to ``new_sizes`` (JAX's ``lax.reshape``), after permuting its
    dims by ``dimensions`` when given."""
    x = _t(operand)
    if dimensions is not None:
        x = view.permute(x, tuple(dimensions))
    return view.reshape(x, tuple(new_sizes))


def pad(operand, padding_value, padding_config) -> Tensor:
    """``operand`` padded with ``padding_value`` (JAX's ``lax.pad``): per dim ``(low,
    high, interior)``, ``interior`` values between neighbours; a negative ``low`` or
    ``high`` crops.

    Raises:
        ValueError: for a config that does not have one triple per dim, or a negative
            interior.
    """
    x = _t(operand)
    config = [tuple(int(v) for v in c) for c in padding_config]
    if len(config) != x.ndim or any(len(c) != 3 or c[2] < 0 for c in config):
        raise ValueError(
            f"lax.pad: padding_config needs one (low, high, interior >= 0) per dim of the "
            f"operand of shape {x.shape}, got {padding_config!r}"
        )
    value = _t(padding_value).cast(x.dtype)
    for axis, (_, _, interior) in enumerate(config):
        if interior and x.shape[axis] > 1:  # each element, then `interior` fills, but the last
            n = x.shape[axis]
            moved = view.moveaxis(x, axis, -1)
            fill = view.broadcast_to(value, tuple(moved.shape) + (interior,))
            spread = view.concatenate([view.unsqueeze(moved, -1), fill], -1)
            spread = view.reshape(spread, tuple(moved.shape[:-1]) + (n * (interior + 1),))
            x = view.moveaxis(spread[..., : (n - 1) * (interior + 1) + 1], -1, axis)
    for axis, (low, high, _) in enumerate(config):
        n = x.shape[axis]
        start, stop = builtins.max(-low, 0), n - builtins.max(-high, 0)
        if start or stop != n:
            index = [builtins.slice(None)] * x.ndim
            index[axis] = builtins.slice(start, builtins.max(stop, start))
            x = x[tuple(index)]
        lo, hi = builtins.max(low, 0), builtins.max(high, 0)
        if lo or hi:
            x = view.concatenate(
                [_fill_like(x, axis, lo, value), x, _fill_like(x, axis, hi, value)], axis
            )
    return x


def _fill_like(x: Tensor, axis: int, size: int, value: Tensor) -> Tensor:
    """``value`` broadcast to ``x``'s shape with ``size`` along ``axis`` (may be 0)."""
    shape = list(x.shape)
    shape[axis] = size
    return view.broadcast_to(value, tuple(shape))


def top_k(operand, k: int):
    """The ``k`` largest values along the last dim and their int32 indices (JAX's
    ``lax.top_k``: :func:`nabla.top_k`)."""
    values, indices = reduction.top_k(_t(operand), k)
    return values, unary.cast(indices, DType.int32)


def sort(operand, dimension: int = -1, is_stable: bool = True, num_keys: int = 1):
    """``operand`` sorted along ``dimension`` (JAX's ``lax.sort`` of one operand, or a
    tuple of operands sorted by the first ``num_keys`` of them, lexicographically).

    Raises:
        ValueError: for ``num_keys`` outside ``[1, len(operands)]``.
    """
    if isinstance(operand, Tensor | np.ndarray):
        return reduction.sort(_t(operand), dimension)
    ops_ = [_t(o) for o in operand]
    if not 1 <= num_keys <= len(ops_):
        raise ValueError(f"lax.sort: num_keys must be in [1, {len(ops_)}], got {num_keys}")
    order = None  # stable sorts from the last key to the first: lexicographic order
    for key in reversed(ops_[:num_keys]):
        k = key if order is None else indexing.take_along_axis(key, order, dimension)
        step = reduction.argsort(k, dimension)
        order = step if order is None else indexing.take_along_axis(order, step, dimension)
    return tuple(indexing.take_along_axis(o, order, dimension) for o in ops_)


def argmax(operand, axis: int, index_dtype) -> Tensor:
    """The index of the largest element along ``axis``, of ``index_dtype`` (JAX's
    ``lax.argmax``)."""
    return unary.cast(reduction.argmax(_t(operand), axis), index_dtype)


def argmin(operand, axis: int, index_dtype) -> Tensor:
    """The index of the smallest element along ``axis``, of ``index_dtype`` (JAX's
    ``lax.argmin``)."""
    return unary.cast(reduction.argmin(_t(operand), axis), index_dtype)


def cumsum(operand, axis: int = 0, reverse: bool = False) -> Tensor:
    """The running sum along ``axis`` (JAX's ``lax.cumsum``: axis 0 by default)."""
    return reduction.cumsum(_t(operand), axis, reverse=reverse)


def cumprod(operand, axis: int = 0, reverse: bool = False) -> Tensor:
    """The running product along ``axis`` (JAX's ``lax.cumprod``)."""
    x = _t(operand)
    if reverse:
        return view.flip(reduction.cumprod(view.flip(x, axis), axis), axis)
    return reduction.cumprod(x, axis)


def full(shape, fill_value, dtype=None) -> Tensor:
    """A tensor of ``shape`` holding ``fill_value`` (JAX's ``lax.full``)."""
    return creation.full(tuple(shape), fill_value, dtype=dtype)


def full_like(x, fill_value, dtype=None, shape=None) -> Tensor:
    """A tensor like ``x`` (its shape and dtype, or those given) holding ``fill_value``
    (JAX's ``lax.full_like``)."""
    x = _t(x)
    return creation.full(
        tuple(x.shape) if shape is None else tuple(shape), fill_value, dtype=dtype or x.dtype
    )
