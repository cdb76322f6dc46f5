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
  ``axis_index``/``axis_size`` along either; ``all_gather``, ``psum_scatter``,
  ``all_to_all`` (stacked or tiled), ``ppermute`` and ``pshuffle`` with JAX's
  signatures, likewise;
- ``reduce`` with any associative, commutative computation (on pytrees: an argmax is a
  ``reduce`` of ``(values, indices)``), in log-depth halvings, and ``reduce_sum``/``_max``/
  ``_min``/``_prod``/``_and``/``_or``/``_xor``; ``population_count``, ``clz``, ``nextafter``;
- the elementwise names (``add``, ``mul``, ``max``, ``lt``, ...: nabla's ops, which promote
  mixed dtypes as ``jnp`` does), ``div``/``rem`` (C's rounding toward zero), ``round``
  (halves away from zero), and the structural ones: ``dot_general``, ``broadcast_in_dim``,
  ``pad`` (interior and negative), ``select_n``, ``slice``, ``rev``, ``sort`` of several
  operands, ``top_k`` (and ``approx_max_k``/``approx_min_k``, exact), ``cumsum``/
  ``cumprod`` with ``reverse``, ``full``, ``padtype_to_pads``;
- ``associative_scan`` (log-depth doubling) and ``cummax``/``cummin``/``cumlogsumexp``
  built on it, ``reduce_window`` (any rank, any binary computation, padding and
  dilations), ``conv_general_dilated``/``conv`` (any number of spatial dims, layouts,
  padding, both dilations, feature groups; two spatial dims run as :func:`nabla.conv2d`).
"""

from __future__ import annotations

import builtins
import enum
import numbers

import numpy as np

from ._numeric import nextafter, popcount, unsigned_bits
from .core.dtypes import DType
from .core.pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten
from .core.state import STATE, spmd_axes
from .ops import (
    array_functions,
    binary,
    collectives,
    creation,
    indexing,
    linalg,
    reduction,
    special,
    unary,
    view,
)
from .ops import nn as nn_ops
from .ops._util import as_tensor, norm_axis
from .ops.base import OpError
from .ops.batching import stack_examples, unstack_examples
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
    "dynamic_update_index_in_dim",
    "optimization_barrier",
    "broadcast_shapes",
    "psum",
    "pmean",
    "pmax",
    "pmin",
    "axis_index",
    "axis_size",
    "all_gather",
    "psum_scatter",
    "all_to_all",
    "ppermute",
    "nextafter",
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


def dynamic_update_index_in_dim(operand, update, index, axis: int) -> Tensor:
    """``operand`` with the slice at ``index`` along ``axis`` replaced by ``update`` (JAX's
    ``lax.dynamic_update_index_in_dim``): ``update`` has ``operand``'s shape with that dim
    of size 1 or left out; ``index`` may be a tensor, clamped as :func:`dynamic_slice`'s."""
    x = operand if isinstance(operand, Tensor) else creation.constant(operand)
    axis = norm_axis("dynamic_update_index_in_dim", axis, x.ndim, x.shape)
    u = update if isinstance(update, Tensor) else creation.constant(update, dtype=x.dtype)
    if u.ndim == x.ndim - 1:
        u = view.unsqueeze(u, axis)
    return dynamic_update_slice_in_dim(x, u, index, axis)


def optimization_barrier(operand):
    """``operand`` itself, a pytree (JAX's ``lax.optimization_barrier``, which keeps XLA from
    moving computations across it): nabla's programs run their ops in the order recorded,
    so there is nothing to hold back."""
    return operand


def broadcast_shapes(*shapes) -> tuple:
    """The shape ``shapes`` broadcast to, by NumPy's rules (JAX's ``lax.broadcast_shapes``).

    Raises:
        ValueError: (:class:`nabla.OpError`) for shapes that do not broadcast.
    """
    return binary.broadcast_shapes("lax.broadcast_shapes", *(tuple(s) for s in shapes))


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


class RoundingMethod(enum.IntEnum):
    """JAX's ``lax.RoundingMethod``, the ``rounding_method`` of :func:`round`."""

    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


def round(x, rounding_method=0) -> Tensor:  # noqa: A001 - JAX's name
    """``x`` rounded to integers (JAX's ``lax.round``): halves away from zero by default
    (``rounding_method=0``, ``RoundingMethod.AWAY_FROM_ZERO``), to even with ``1``
    (``RoundingMethod.TO_NEAREST_EVEN``, :func:`nabla.round`'s)."""
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


# ----------------------------------------------------------------------------- scans, windows,
# convolutions and the remaining elementwise names
__all__ += [
    "Precision", "RoundingMethod", "associative_scan", "cummax", "cummin", "cumlogsumexp",
    "sort_key_val",
    "broadcasted_iota", "batch_matmul", "reduce_window", "conv_general_dilated", "conv",
    "conv_with_general_padding", "ConvDimensionNumbers", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "exp2", "is_finite", "erf_inv",
    "erfc", "lgamma", "digamma", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "shift_left", "shift_right_arithmetic", "shift_right_logical", "real",
    "imag", "conj", "reduce_precision",
]  # fmt: skip

tan, asin, acos, atan, sinh, cosh, atanh = (
    unary.tan, unary.asin, unary.acos, unary.atan, unary.sinh, unary.cosh, unary.atanh,
)  # fmt: skip
atan2, exp2 = binary.atan2, array_functions.exp2
asinh, acosh = array_functions.asinh, array_functions.acosh
is_finite = unary.isfinite
erf_inv, erfc, lgamma, digamma = special.erfinv, special.erfc, special.gammaln, special.digamma
bitwise_and, bitwise_or, bitwise_xor = binary.bitwise_and, binary.bitwise_or, binary.bitwise_xor
bitwise_not = unary.bitwise_not
shift_left = binary.left_shift


def shift_right_arithmetic(x, y) -> Tensor:
    """``x >> y`` with the sign bit copied in (JAX's ``lax.shift_right_arithmetic``; NumPy's
    ``>>`` of a signed integer)."""
    return binary.right_shift(_t(x), y)


def shift_right_logical(x, y) -> Tensor:
    """``x >> y`` with zeros shifted in (JAX's ``lax.shift_right_logical``): the arithmetic
    shift with the copied sign bits masked off; 0 for a count of the width or more."""
    x = _t(x)
    if not x.dtype.is_int or x.dtype.value.startswith("u"):
        return binary.right_shift(x, y)
    bits = x.dtype.itemsize * 8
    y = _t(y).cast(x.dtype)
    shifted = binary.right_shift(x, binary.clip(y, 0, bits - 1))
    keep = binary.clip(bits - y, 0, bits - 1)  # (the bits below the copied ones)
    one = creation.ones((), dtype=x.dtype)
    mask = binary.where(y <= 0, -1, binary.left_shift(one, keep) - 1)
    return binary.where(y >= bits, 0, binary.bitwise_and(shifted, mask))


def real(x) -> Tensor:
    """The real part: ``x`` itself (nabla has no complex dtypes)."""
    return _t(x)


def imag(x) -> Tensor:
    """The imaginary part: zeros like ``x`` (nabla has no complex dtypes)."""
    return creation.zeros_like(_t(x))


def conj(x) -> Tensor:
    """The complex conjugate: ``x`` itself (nabla has no complex dtypes)."""
    return _t(x)


def reduce_precision(operand, exponent_bits: int, mantissa_bits: int) -> Tensor:
    """``operand`` rounded to a float format of ``exponent_bits`` and ``mantissa_bits``
    (JAX's ``lax.reduce_precision``), for the formats nabla has (float16: 5/10,
    bfloat16: 8/7, float32: 8/23), as a round trip through that dtype.

    Raises:
        ValueError: for another format.
    """
    formats = {(5, 10): DType.float16, (8, 7): DType.bfloat16, (8, 23): DType.float32}
    x = _t(operand)
    key = (int(exponent_bits), int(mantissa_bits))
    if key not in formats:
        raise ValueError(
            f"lax.reduce_precision: ({key[0]}, {key[1]}) exponent and mantissa bits is not one "
            f"of nabla's float formats {sorted(formats)}"
        )
    return unary.cast(unary.cast(x, formats[key]), x.dtype)


class Precision:
    """JAX's ``lax.Precision`` (``precision=lax.Precision.HIGHEST``): accepted by
    ``dot``/``dot_general``/``conv_general_dilated``; nabla's CPU and MAX products run at
    their one precision."""

    DEFAULT = "default"
    HIGH = "high"
    HIGHEST = "highest"


def associative_scan(fn, elems, reverse: bool = False, axis: int = 0):
    """The running combination of ``elems`` along ``axis`` by the associative ``fn``
    (JAX's ``lax.associative_scan``): ``out[i] = fn(...fn(elems[0], elems[1])...,
    elems[i])``, in ``ceil(log2(n))`` calls of ``fn`` on whole slices (Hillis and
    Steele's doubling), so ``fn`` must work elementwise on batches, as in JAX. ``elems``
    may be a pytree of arrays of one length along ``axis``.

    Raises:
        ValueError: for leaves of different lengths along ``axis``.
    """
    leaves, tree = tree_flatten(elems)
    leaves = [_t(v) for v in leaves]
    if not leaves:
        return elems
    axes = [norm_axis("lax.associative_scan", axis, v.ndim, v.shape) for v in leaves]
    n = leaves[0].shape[axes[0]]
    if any(v.shape[a] != n for v, a in zip(leaves, axes, strict=True)):
        raise ValueError(
            f"lax.associative_scan: every leaf needs the same length along axis {axis}, got "
            f"shapes {[tuple(v.shape) for v in leaves]}"
        )
    if reverse:
        leaves = [view.flip(v, a) for v, a in zip(leaves, axes, strict=True)]

    def part(v, a, start, stop):
        index = [builtins.slice(None)] * v.ndim
        index[a] = builtins.slice(start, stop)
        return v[tuple(index)]

    offset = 1
    while offset < n:
        before = tree_unflatten(tree, [part(v, a, 0, n - offset) for v, a in zip(leaves, axes)])
        after = tree_unflatten(tree, [part(v, a, offset, n) for v, a in zip(leaves, axes)])
        combined = tree_flatten(fn(before, after))[0]
        leaves = [
            view.concatenate([part(v, a, 0, offset), _t(c)], a)
            for v, c, a in zip(leaves, combined, axes, strict=True)
        ]
        offset *= 2
    if reverse:
        leaves = [view.flip(v, a) for v, a in zip(leaves, axes, strict=True)]
    return tree_unflatten(tree, leaves)


def cummax(operand, axis: int = 0, reverse: bool = False) -> Tensor:
    """The running maximum along ``axis`` (JAX's ``lax.cummax``)."""
    return associative_scan(binary.maximum, _t(operand), reverse, axis)


def cummin(operand, axis: int = 0, reverse: bool = False) -> Tensor:
    """The running minimum along ``axis`` (JAX's ``lax.cummin``)."""
    return associative_scan(binary.minimum, _t(operand), reverse, axis)


def cumlogsumexp(operand, axis: int = 0, reverse: bool = False) -> Tensor:
    """The running ``logsumexp`` along ``axis`` (JAX's ``lax.cumlogsumexp``)."""
    return associative_scan(binary.logaddexp, _t(operand), reverse, axis)


def sort_key_val(keys, values, dimension: int = -1, is_stable: bool = True):
    """``keys`` sorted along ``dimension`` and ``values`` in the same order (JAX's
    ``lax.sort_key_val``)."""
    return sort((keys, values), dimension, is_stable, num_keys=1)


def broadcasted_iota(dtype, shape, dimension: int) -> Tensor:
    """Indices along ``dimension`` broadcast to ``shape`` (JAX's ``lax.broadcasted_iota``)."""
    shape = tuple(int(s) for s in shape)
    d = norm_axis("lax.broadcasted_iota", dimension, len(shape), shape)
    along = creation.arange(shape[d], dtype=dtype)
    return broadcast_in_dim(along, shape, (d,))


def batch_matmul(lhs, rhs, precision=None) -> Tensor:
    """Batched matrix products over matching leading dims (JAX's ``lax.batch_matmul``).

    Raises:
        ValueError: for operands of different ranks or leading dims.
    """
    a, b = _t(lhs), _t(rhs)
    if a.ndim != b.ndim or a.ndim < 2 or tuple(a.shape[:-2]) != tuple(b.shape[:-2]):
        raise ValueError(
            f"lax.batch_matmul: operands must be (..., m, k) and (..., k, n) with the same "
            f"leading dims, got {a.shape} and {b.shape}"
        )
    return linalg.matmul(a, b)


def _padding_pairs(op, padding, spatial, window, strides, dilation):
    """``[(low, high), ...]``: JAX's ``"SAME"``/``"SAME_LOWER"``/``"VALID"`` or pairs."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return [(0, 0)] * len(spatial)
        if mode not in ("SAME", "SAME_LOWER"):
            raise ValueError(f"{op}: padding must be 'SAME', 'SAME_LOWER', 'VALID' or pairs")
        pairs = []
        for n, k, s, d in zip(spatial, window, strides, dilation, strict=True):
            extent = (k - 1) * d + 1
            out = -(-n // s)
            total = builtins.max((out - 1) * s + extent - n, 0)
            lo = total // 2 if mode == "SAME" else total - total // 2
            pairs.append((lo, total - lo))
        return pairs
    pairs = [tuple(int(v) for v in p) for p in padding]
    if len(pairs) != len(spatial) or any(len(p) != 2 for p in pairs):
        raise ValueError(
            f"{op}: padding needs one (low, high) pair per windowed dim ({len(spatial)}), "
            f"got {padding!r}"
        )
    return pairs


def reduce_window(
    operand,
    init_value,
    computation,
    window_dimensions,
    window_strides,
    padding,
    base_dilation=None,
    window_dilation=None,
):
    """``computation`` over each window of ``operand`` (JAX's ``lax.reduce_window``):
    the operand padded with ``init_value`` (``"SAME"``/``"VALID"`` or pairs per dim), then
    combined over the window's taps (one strided slice each) starting from ``init_value``.
    ``computation`` is a binary function such as ``lax.add``/``lax.max``; ``operand`` may
    be a pytree with matching ``init_value`` leaves. Differentiates as its parts do.

    Raises:
        ValueError: for dims that do not fit.
    """
    leaves, tree = tree_flatten(operand)
    inits = tree_leaves(init_value)
    leaves = [_t(v) for v in leaves]
    if len(inits) != len(leaves):
        raise ValueError("lax.reduce_window: init_value must match operand's structure")
    x0 = leaves[0]
    rank = x0.ndim
    window = tuple(int(v) for v in window_dimensions)
    strides = tuple(int(v) for v in window_strides)
    wdil = tuple(int(v) for v in (window_dilation or (1,) * rank))
    bdil = tuple(int(v) for v in (base_dilation or (1,) * rank))
    if not len(window) == len(strides) == len(wdil) == len(bdil) == rank:
        raise ValueError(
            f"lax.reduce_window: window_dimensions {window}, strides {strides} and dilations "
            f"need one entry per dim of the operand of shape {x0.shape}"
        )
    dilated = [(n - 1) * b + 1 if n else 0 for n, b in zip(x0.shape, bdil, strict=True)]
    pairs = _padding_pairs("lax.reduce_window", padding, dilated, window, strides, wdil)
    padded = [
        pad(v, _t(init).cast(v.dtype), [(lo, hi, b - 1) for (lo, hi), b in zip(pairs, bdil)])
        for v, init in zip(leaves, inits, strict=True)
    ]
    out_shape = _window_counts("lax.reduce_window", tuple(padded[0].shape), window, strides, wdil)
    acc = [creation.full(tuple(out_shape), init, dtype=v.dtype) for v, init in zip(padded, inits)]
    for tap in np.ndindex(*window):
        index = _tap_slices(tap, wdil, out_shape, strides)
        taken = tree_unflatten(tree, [v[index] for v in padded])
        acc = tree_flatten(computation(tree_unflatten(tree, acc), taken))[0]
    return tree_unflatten(tree, acc)


def _window_counts(op, size, window, strides, dilation) -> list:
    """The number of window positions per dim of a (padded) ``size``.

    Raises:
        ValueError: where the (dilated) window does not fit.
    """
    counts = []
    for n, k, s, d in zip(size, window, strides, dilation, strict=True):
        extent = (k - 1) * d + 1
        if n < extent:
            raise ValueError(
                f"{op}: the window {tuple(window)} (dilation {tuple(dilation)}) does not fit "
                f"the padded operand of shape {tuple(size)}"
            )
        counts.append((n - extent) // s + 1)
    return counts


def _tap_slices(tap, dilation, counts, strides) -> tuple:
    """The strided slices window tap ``tap`` reads at every window position."""
    return tuple(
        builtins.slice(t * d, t * d + (m - 1) * s + 1, s)
        for t, d, m, s in zip(tap, dilation, counts, strides, strict=True)
    )


class ConvDimensionNumbers(tuple):
    """JAX's ``lax.ConvDimensionNumbers(lhs_spec, rhs_spec, out_spec)``: each the dim
    positions in the order (batch, feature, spatial...) for ``lhs`` and the output, and
    (out feature, in feature, spatial...) for ``rhs``."""

    __slots__ = ()

    def __new__(cls, lhs_spec, rhs_spec, out_spec):
        return super().__new__(cls, (tuple(lhs_spec), tuple(rhs_spec), tuple(out_spec)))

    lhs_spec = property(lambda self: self[0])
    rhs_spec = property(lambda self: self[1])
    out_spec = property(lambda self: self[2])


def _conv_specs(dimension_numbers, rank: int) -> ConvDimensionNumbers:
    """Dimension numbers from JAX's forms: None (``NC...``, ``OI...``, ``NC...``), a triple
    of strings such as ``("NHWC", "HWIO", "NHWC")``, or of position tuples."""
    if dimension_numbers is None:
        lead = (0, 1, *range(2, rank))
        return ConvDimensionNumbers(lead, lead, lead)
    lhs, rhs, out = dimension_numbers
    if isinstance(lhs, str):

        def positions(spec, first, second):
            if len(spec) != rank or first not in spec or second not in spec:
                raise ValueError(
                    f"lax.conv_general_dilated: dimension spec {spec!r} does not describe "
                    f"a rank-{rank} operand"
                )
            spatial = [i for i, c in enumerate(spec) if c not in (first, second)]
            return (spec.index(first), spec.index(second), *spatial)

        return ConvDimensionNumbers(
            positions(lhs, "N", "C"), positions(rhs, "O", "I"), positions(out, "N", "C")
        )
    return ConvDimensionNumbers(lhs, rhs, out)


def conv_general_dilated(
    lhs,
    rhs,
    window_strides,
    padding,
    lhs_dilation=None,
    rhs_dilation=None,
    dimension_numbers=None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision=None,
    preferred_element_type=None,
) -> Tensor:
    """JAX's ``lax.conv_general_dilated``, any number of spatial dims: ``lhs`` and ``rhs``
    laid out as ``dimension_numbers`` says, ``padding`` ``"SAME"``/``"SAME_LOWER"``/
    ``"VALID"`` or pairs, ``lhs_dilation`` (a transposed convolution: zeros between the
    input's elements), ``rhs_dilation`` (atrous), ``feature_group_count``. Two spatial dims
    without ``lhs_dilation`` run as :func:`nabla.conv2d` (im2col and one GEMM); others as
    one product per filter tap.

    Raises:
        ValueError: for shapes that do not fit, or ``batch_group_count`` other than 1.
    """
    a, w = _t(lhs), _t(rhs)
    if batch_group_count != 1:
        raise ValueError(
            "lax.conv_general_dilated: batch_group_count other than 1 is not supported"
        )
    rank = a.ndim
    if w.ndim != rank or rank < 3:
        raise ValueError(
            f"lax.conv_general_dilated: lhs {a.shape} and rhs {w.shape} must have the same "
            "rank, at least 3"
        )
    dn = _conv_specs(dimension_numbers, rank)
    nsp = rank - 2
    # to channels last: (N, *spatial, C) and the filter (*spatial, I, O)
    x = view.permute(a, (dn.lhs_spec[0], *dn.lhs_spec[2:], dn.lhs_spec[1]))
    k = view.permute(w, (*dn.rhs_spec[2:], dn.rhs_spec[1], dn.rhs_spec[0]))
    strides = tuple(int(s) for s in window_strides)
    ldil = tuple(int(v) for v in (lhs_dilation or (1,) * nsp))
    rdil = tuple(int(v) for v in (rhs_dilation or (1,) * nsp))
    groups = int(feature_group_count)
    c, i, o = x.shape[-1], k.shape[-2], k.shape[-1]
    if len(strides) != nsp or len(ldil) != nsp or len(rdil) != nsp:
        raise ValueError(
            f"lax.conv_general_dilated: strides and dilations need {nsp} entries (spatial "
            f"dims of lhs {a.shape})"
        )
    if c != i * groups or o % groups:
        raise ValueError(
            f"lax.conv_general_dilated: lhs has {c} features, rhs takes {i} per group x "
            f"{groups} groups and gives {o} (must divide by the groups)"
        )
    if builtins.max(ldil) > 1:  # zeros between the input's elements
        zero = creation.zeros((), dtype=x.dtype)
        x = pad(x, zero, [(0, 0, 0)] + [(0, 0, d - 1) for d in ldil] + [(0, 0, 0)])
    window = tuple(k.shape[:nsp])
    pairs = _padding_pairs(
        "lax.conv_general_dilated", padding, tuple(x.shape[1:-1]), window, strides, rdil
    )
    if nsp == 2:
        out = nn_ops.conv2d(x, k, None, strides, [tuple(p) for p in pairs], rdil, groups)
    else:
        out = _conv_by_taps(x, k, strides, pairs, rdil, groups)
    # back to the output's layout
    inverse = [0] * rank
    for pos, dim in enumerate((dn.out_spec[0], *dn.out_spec[2:], dn.out_spec[1])):
        inverse[dim] = pos
    out = view.permute(out, tuple(inverse))
    return out if preferred_element_type is None else unary.cast(out, preferred_element_type)


def _conv_by_taps(x, k, strides, pairs, rdil, groups):
    """A channels-last convolution of any number of spatial dims: one product per filter
    tap of the strided slice it reads."""
    nsp = len(strides)
    zero = creation.zeros((), dtype=x.dtype)
    x = pad(x, zero, [(0, 0, 0)] + [(lo, hi, 0) for lo, hi in pairs] + [(0, 0, 0)])
    window = tuple(k.shape[:nsp])
    out_sp = _window_counts("lax.conv_general_dilated", tuple(x.shape[1:-1]), window, strides, rdil)
    c, o = x.shape[-1], k.shape[-1]
    cg, og = c // groups, o // groups
    out = None
    for tap in np.ndindex(*window):
        index = (builtins.slice(None),) + _tap_slices(tap, rdil, out_sp, strides)
        piece = x[index]  # (N, *out, C)
        tap_w = k[tap]  # (I, O)
        if groups == 1:
            term = linalg.matmul(piece, tap_w)
        else:
            parts = [
                linalg.matmul(piece[..., g * cg : (g + 1) * cg], tap_w[:, g * og : (g + 1) * og])
                for g in range(groups)
            ]
            term = view.concatenate(parts, -1)
        out = term if out is None else out + term
    return out


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """JAX's ``lax.conv``: :func:`conv_general_dilated` with the default layouts (``lhs``
    ``(N, C, *spatial)``, ``rhs`` ``(O, I, *spatial)``)."""
    return conv_general_dilated(
        lhs, rhs, window_strides, padding, preferred_element_type=preferred_element_type
    )


def conv_with_general_padding(
    lhs,
    rhs,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    precision=None,
    preferred_element_type=None,
):
    """JAX's ``lax.conv_with_general_padding``: :func:`conv_general_dilated` with the
    default layouts."""
    return conv_general_dilated(
        lhs,
        rhs,
        window_strides,
        padding,
        lhs_dilation,
        rhs_dilation,
        preferred_element_type=preferred_element_type,
    )


# ----------------------------------------------------------------------------- named collectives
# JAX's collectives by axis name: over mesh axes inside ``shard_map`` (nabla's collectives,
# whose tiled forms these are), or over the examples of a ``vmap(axis_name=)`` (the examples
# stacked with ``stack_examples``, the result handed back per example with
# ``unstack_examples``: ``from_batch`` and ``to_batch`` whose cotangents are those of each
# example's own backward pass, a collective's transpose being the collective JAX names).
def _named_vmap(axis_name, op: str):
    """The running vmap named ``axis_name`` (one name), or None for mesh axes."""
    if not names_a_vmap(axis_name):
        return None
    if isinstance(axis_name, tuple):
        if len(axis_name) != 1:
            raise NotImplementedError(f"lax.{op}: over one vmap axis name at a time")
        axis_name = axis_name[0]
    return STATE.vmap_names[axis_name]


def _stacked(x: Tensor, named) -> Tensor:
    """Every example's ``x`` stacked along a new leading dim (the same value for all)."""
    return stack_examples(x, named.level, 0)


def axis_size(axis_name) -> int:
    """The number of devices along mesh axis (or axes) ``axis_name`` inside ``shard_map``, or
    of examples of the ``vmap`` named so (JAX's ``lax.axis_size``).

    Args:
        axis_name: a name or a tuple of names.

    Returns:
        A Python int.

    Raises:
        NameError: when no running vmap or shard_map body has that axis name.
    """
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    size = 1
    for n in names:
        if names_a_vmap(n):
            size *= STATE.vmap_names[n].size
        elif isinstance(n, str) and spmd_axes.get(n):
            size *= spmd_axes[n][1].axis_size(n)
        else:
            raise NameError(f"lax.axis_size: no running vmap or shard_map body has axis {n!r}")
    return size


def all_gather(x, axis_name, *, axis: int = 0, tiled: bool = False) -> Tensor:
    """Every device's (or example's) ``x`` gathered (JAX's ``lax.all_gather``): stacked along
    a new dim ``axis`` (``tiled=False``), or concatenated along dim ``axis`` (``tiled=True``).

    Args:
        x: the per-device (or per-example) value.
        axis_name: the mesh axis (or axes) or vmap axis name.
        axis: where the gathered dim goes.
        tiled: concatenate instead of stacking.

    Returns:
        The gathered value, the same on every device.
    """
    x = as_tensor(x, op="all_gather")
    nd = x.ndim if tiled else x.ndim + 1
    ax = norm_axis("all_gather", axis, nd, x.shape)
    named = _named_vmap(axis_name, "all_gather")
    if named is not None:
        stacked = view.moveaxis(_stacked(x, named), 0, ax)
        if not tiled:
            return stacked
        shape = stacked.shape
        return view.reshape(stacked, shape[:ax] + (shape[ax] * shape[ax + 1],) + shape[ax + 2 :])
    if not tiled:
        x = view.unsqueeze(x, ax)
    return collectives.all_gather(x, ax, axes=axis_name)


def psum_scatter(x, axis_name, *, scatter_dimension: int = 0, tiled: bool = False) -> Tensor:
    """The sum over devices (or examples), each keeping its block of dim
    ``scatter_dimension`` (JAX's ``lax.psum_scatter``): with ``tiled=False`` that dim's size
    is the number of devices and is dropped; with ``tiled=True`` each keeps a slice of it.

    Args:
        x: the per-device (or per-example) value.
        axis_name: the mesh axis (or axes) or vmap axis name.
        scatter_dimension: the dim to scatter.
        tiled: keep the dim (a slice of it) instead of dropping it.

    Returns:
        This device's (example's) block of the sum.

    Raises:
        ValueError: (:class:`nabla.OpError`) when the dim does not divide among the devices.
    """
    x = as_tensor(x, op="psum_scatter")
    d = norm_axis("psum_scatter", scatter_dimension, x.ndim, x.shape)
    n = axis_size(axis_name)
    if (not tiled and x.shape[d] != n) or (tiled and x.shape[d] % n):
        want = f"equal to {n}" if not tiled else f"divisible by {n}"
        raise OpError(
            f"psum_scatter: dim {d} of shape {tuple(x.shape)} must be {want}, the size of "
            f"axis {axis_name!r}"
        )
    named = _named_vmap(axis_name, "psum_scatter")
    if named is not None:
        total = reduction.sum(_stacked(x, named), axis=0)
        blocks = view.reshape(total, total.shape[:d] + (n, -1) + total.shape[d + 1 :])
        mine = unstack_examples(view.moveaxis(blocks, d, 0), 0, named.level)
        return mine if tiled else view.squeeze(mine, d)
    out = collectives.reduce_scatter(x, d, axes=axis_name)
    return out if tiled else view.squeeze(out, d)


def all_to_all(x, axis_name, split_axis: int, concat_axis: int, *, tiled: bool = False):
    """JAX's ``lax.all_to_all``: dim ``split_axis`` cut into one chunk per device, chunk
    ``j`` sent to device ``j``, the received chunks joined along ``concat_axis``: stacked
    as a new dim there (``tiled=False``; ``split_axis``'s size is then the device count and
    the dim is dropped), or concatenated (``tiled=True``).

    Args:
        x: the per-device (or per-example) value.
        axis_name: the mesh axis (or axes) or vmap axis name.
        split_axis: the dim to cut.
        concat_axis: where the received chunks go (counted in the result).
        tiled: concatenate instead of stacking.

    Returns:
        This device's (example's) received chunks.

    Raises:
        ValueError: (:class:`nabla.OpError`) when the dim does not divide among the devices.
    """
    x = as_tensor(x, op="all_to_all")
    s = norm_axis("all_to_all", split_axis, x.ndim, x.shape)
    c = norm_axis("all_to_all", concat_axis, x.ndim, x.shape)
    n = axis_size(axis_name)
    if (not tiled and x.shape[s] != n) or (tiled and x.shape[s] % n):
        want = f"equal to {n}" if not tiled else f"divisible by {n}"
        raise OpError(
            f"all_to_all: split dim {s} of shape {tuple(x.shape)} must be {want}, the size "
            f"of axis {axis_name!r}"
        )
    if not tiled:  # the tiled form over chunks of 1, then the senders' dim moved to c
        y = all_to_all(view.unsqueeze(x, s + 1), axis_name, s, s + 1, tiled=True)
        return view.moveaxis(view.squeeze(y, s), s, c)
    named = _named_vmap(axis_name, "all_to_all")
    if named is None:  # nabla's all_to_all in a shard_map body is JAX's tiled form
        return collectives.all_to_all(x, s, c, axes=axis_name)
    shape = tuple(x.shape)
    rest = shape[:s] + (shape[s] // n,) + shape[s + 1 :]  # a chunk's shape
    # (sender j, ..., chunk k, within, ...) -> (receiver k, sender j, *rest)
    blocks = view.reshape(_stacked(x, named), (n,) + shape[:s] + (n, rest[s]) + shape[s + 1 :])
    mine = view.moveaxis(blocks, s + 1, 0)
    # the senders' chunks concatenated along c: j just before rest's dim c, then merged
    order = (0, *range(2, 2 + c), 1, *range(2 + c, mine.ndim))
    joined = view.reshape(
        view.permute(mine, order), (n,) + rest[:c] + (n * rest[c],) + rest[c + 1 :]
    )
    return unstack_examples(joined, 0, named.level)


def ppermute(x, axis_name, perm) -> Tensor:
    """JAX's ``lax.ppermute``: each ``(source, destination)`` pair of positions along
    ``axis_name`` sends the source's ``x`` to the destination; one that receives nothing
    gets zeros.

    Args:
        x: the per-device (or per-example) value.
        axis_name: the mesh axis or vmap axis name.
        perm: ``(source, destination)`` pairs (each position at most once on each side).

    Returns:
        The value this device (example) received.
    """
    named = _named_vmap(axis_name, "ppermute")
    if named is None:
        return collectives.ppermute(x, perm, axis_name=axis_name)
    x = as_tensor(x, op="ppermute")
    pairs = [(int(a), int(b)) for a, b in perm]
    srcs, dsts = [a for a, _ in pairs], [b for _, b in pairs]
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise OpError(f"ppermute: each position at most once as source and destination: {perm}")
    stacked = _stacked(x, named)
    source = np.zeros(named.size, np.int32)
    received = np.zeros(named.size, bool)
    for a, b in pairs:
        source[b], received[b] = a, True
    moved = indexing.take(stacked, as_tensor(source, DType.int32, "ppermute"), axis=0)
    keep = as_tensor(received.reshape((-1,) + (1,) * x.ndim), DType.bool, "ppermute")
    out = binary.where(keep, moved, creation.zeros_like(moved))
    return unstack_examples(out, 0, named.level)


# ----------------------------------------------------------------------------- reductions
def _axes(operand, axes, op: str) -> tuple:
    return tuple(norm_axis(op, a, operand.ndim, operand.shape) for a in axes)


def reduce_sum(operand, axes) -> Tensor:
    """JAX's ``lax.reduce_sum``: the sum over ``axes`` (a sequence of dims)."""
    x = as_tensor(operand, op="reduce_sum")
    return reduction.sum(x, axis=_axes(x, axes, "reduce_sum"))


def reduce_max(operand, axes) -> Tensor:
    """JAX's ``lax.reduce_max``: the maximum over ``axes``."""
    x = as_tensor(operand, op="reduce_max")
    return reduction.max(x, axis=_axes(x, axes, "reduce_max"))


def reduce_min(operand, axes) -> Tensor:
    """JAX's ``lax.reduce_min``: the minimum over ``axes``."""
    x = as_tensor(operand, op="reduce_min")
    return reduction.min(x, axis=_axes(x, axes, "reduce_min"))


def reduce_prod(operand, axes) -> Tensor:
    """JAX's ``lax.reduce_prod``: the product over ``axes``."""
    x = as_tensor(operand, op="reduce_prod")
    return reduction.prod(x, axis=_axes(x, axes, "reduce_prod"))


def reduce_and(operand, axes) -> Tensor:
    """JAX's ``lax.reduce_and``: logical (bools) or bitwise (integers) and over ``axes``."""
    return _reduce_bits(operand, axes, "reduce_and", binary.bitwise_and, -1)


def reduce_or(operand, axes) -> Tensor:
    """JAX's ``lax.reduce_or``: logical (bools) or bitwise (integers) or over ``axes``."""
    return _reduce_bits(operand, axes, "reduce_or", binary.bitwise_or, 0)


def reduce_xor(operand, axes) -> Tensor:
    """JAX's ``lax.reduce_xor``: logical (bools) or bitwise (integers) xor over ``axes``."""
    return _reduce_bits(operand, axes, "reduce_xor", binary.bitwise_xor, 0)


def _reduce_bits(operand, axes, op: str, combine, identity: int) -> Tensor:
    x = as_tensor(operand, op=op)
    if x.dtype.is_float:
        raise OpError(f"lax.{op}: needs bools or integers, got {x.dtype.value}{list(x.shape)}")
    if x.dtype.is_bool:
        identity = bool(identity)
    return _fold(x, _axes(x, axes, op), combine, creation.full((), identity, dtype=x.dtype))


def _fold(tree, axes, combine, init):
    """``tree``'s leaves reduced over ``axes`` by the associative ``combine`` (on pytrees),
    in log-depth halvings; an odd length is padded with ``init`` (the identity) first."""
    leaves, treedef = tree_flatten(tree)
    inits = tree_leaves(init)
    for ax in sorted(axes, reverse=True):
        if leaves[0].shape[ax] == 0:
            leaves = [_slab(v, ax, i) for v, i in zip(leaves, inits, strict=True)]
        while leaves[0].shape[ax] > 1:
            n = leaves[0].shape[ax]
            if n % 2:
                leaves = [
                    view.concatenate([v, _slab(v, ax, i)], ax)
                    for v, i in zip(leaves, inits, strict=True)
                ]
                n += 1
            lo = tree_unflatten(treedef, [_cut(v, ax, 0, n // 2) for v in leaves])
            hi = tree_unflatten(treedef, [_cut(v, ax, n // 2, n) for v in leaves])
            leaves = [as_tensor(v, op="reduce") for v in tree_leaves(combine(lo, hi))]
        leaves = [view.squeeze(v, ax) for v in leaves]
    return tree_unflatten(treedef, leaves)


def _slab(v, ax: int, value) -> Tensor:
    """``value`` in ``v``'s dtype, shaped as ``v`` with dim ``ax`` of length 1."""
    shape = tuple(v.shape[:ax]) + (1,) + tuple(v.shape[ax + 1 :])
    return view.broadcast_to(as_tensor(value, v.dtype, "reduce"), shape)


def _cut(v, ax, start, stop):
    index = [builtins.slice(None)] * v.ndim
    index[ax] = builtins.slice(start, stop)
    return v[tuple(index)]


def reduce(operands, init_values, computation, dimensions):
    """JAX's ``lax.reduce``: ``operands`` (a tensor or a pytree of same-shape tensors)
    reduced over ``dimensions`` by ``computation``, which must be associative and
    commutative with ``init_values`` its identity (as JAX requires); evaluated in log-depth
    halvings, so any such computation differentiates and batches.

    Args:
        operands: a tensor or a pytree of tensors of one shape.
        init_values: the identity, a scalar (or a pytree of them, as ``operands``).
        computation: ``f(a, b)`` on pytrees like ``operands``.
        dimensions: the dims to reduce.

    Returns:
        The reduced value(s), as ``operands``' structure.
    """
    leaves, treedef = tree_flatten(operands)
    leaves = [as_tensor(v, op="reduce") for v in leaves]
    inits = [
        as_tensor(i, v.dtype, "reduce")
        for v, i in zip(leaves, tree_leaves(init_values), strict=True)
    ]
    if builtins.any(v.shape != leaves[0].shape for v in leaves):
        raise OpError(f"lax.reduce: operands of one shape, got {[tuple(v.shape) for v in leaves]}")
    axes = _axes(leaves[0], dimensions, "reduce")
    tree = tree_unflatten(treedef, leaves)
    return _fold(tree, axes, computation, tree_unflatten(treedef, inits))


# ----------------------------------------------------------------------------- more elementwise
cbrt, reciprocal = array_functions.cbrt, unary.reciprocal
bessel_i0e, bessel_i1e = special.i0e, special.i1e
igamma, igammac, betainc = special.gammainc, special.gammaincc, special.betainc
zeta, polygamma = special.zeta, special.polygamma


def population_count(x) -> Tensor:
    """JAX's ``lax.population_count``: the 1 bits of each integer's two's-complement form,
    in ``x``'s dtype."""
    t = as_tensor(x, op="population_count")
    if not t.dtype.is_int:
        raise OpError(f"lax.population_count: needs integers, got {t.dtype.value}")
    return unary.cast(popcount(t), t.dtype)


def clz(x) -> Tensor:
    """JAX's ``lax.clz``: the leading zero bits of each integer's two's-complement form, in
    ``x``'s dtype (every bit below the highest 1 set, then counted)."""
    t = as_tensor(x, op="clz")
    if not t.dtype.is_int:
        raise OpError(f"lax.clz: needs integers, got {t.dtype.value}")
    u = unsigned_bits(t)
    bits, shift = 8 * t.dtype.itemsize, 1
    while shift < bits:
        u = binary.bitwise_or(u, u >> shift)
        shift *= 2
    return unary.cast(bits - unary.cast(popcount(u), DType.int32), t.dtype)


# ----------------------------------------------------------------------------- more structure
def broadcast(operand, sizes) -> Tensor:
    """JAX's ``lax.broadcast``: ``operand`` with new leading dims of ``sizes``."""
    x = as_tensor(operand, op="broadcast")
    return view.broadcast_to(x, (*sizes, *x.shape))


def broadcast_to_rank(x, rank: int) -> Tensor:
    """JAX's ``lax.broadcast_to_rank``: leading dims of 1 up to ``rank`` dims."""
    t = as_tensor(x, op="broadcast_to_rank")
    return view.reshape(t, (1,) * builtins.max(rank - t.ndim, 0) + tuple(t.shape))


def collapse(operand, start_dimension: int, stop_dimension: int | None = None) -> Tensor:
    """JAX's ``lax.collapse``: dims ``[start_dimension, stop_dimension)`` merged into one."""
    x = as_tensor(operand, op="collapse")
    stop = x.ndim if stop_dimension is None else stop_dimension
    start = norm_axis("collapse", start_dimension, x.ndim, x.shape)
    stop = stop + x.ndim if stop < 0 else stop
    shape = tuple(x.shape)
    return view.reshape(x, shape[:start] + (-1,) + shape[stop:]) if stop > start else x


def split(operand, sizes, axis: int = 0) -> list:
    """JAX's ``lax.split``: pieces of ``sizes`` along ``axis`` (they must add up to it)."""
    x = as_tensor(operand, op="split")
    ax = norm_axis("split", axis, x.ndim, x.shape)
    if builtins.sum(sizes) != x.shape[ax]:
        raise OpError(
            f"lax.split: sizes {list(sizes)} do not add up to dim {ax} of {tuple(x.shape)}"
        )
    out, at = [], 0
    for size in sizes:
        out.append(_cut(x, ax, at, at + size))
        at += size
    return out


tile = view.tile


__all__ += ["approx_max_k", "approx_min_k", "padtype_to_pads", "pshuffle"]


def approx_max_k(
    operand,
    k: int,
    reduction_dimension: int = -1,
    recall_target: float = 0.95,
    reduction_input_size_override: int = -1,
    aggregate_to_topk: bool = True,
):
    """JAX's ``lax.approx_max_k``, exactly: the ``k`` largest values along
    ``reduction_dimension`` and their int32 indices (JAX's result on CPU is exact too).

    Args:
        operand: the values.
        k: how many.
        reduction_dimension: the dim searched.
        recall_target: accepted (an exact search recalls all).
        reduction_input_size_override: accepted (JAX's hint for sharded inputs).
        aggregate_to_topk: accepted (the result is always the top ``k``).

    Returns:
        ``(values, indices)``, ``k`` along ``reduction_dimension``.
    """
    return _top_k_along("approx_max_k", _t(operand), k, reduction_dimension)


def approx_min_k(
    operand,
    k: int,
    reduction_dimension: int = -1,
    recall_target: float = 0.95,
    reduction_input_size_override: int = -1,
    aggregate_to_topk: bool = True,
):
    """JAX's ``lax.approx_min_k``, exactly: the ``k`` smallest values along
    ``reduction_dimension`` (ascending) and their int32 indices.

    Args:
        operand: the values.
        k: how many.
        reduction_dimension: the dim searched.
        recall_target: accepted (an exact search recalls all).
        reduction_input_size_override: accepted (JAX's hint for sharded inputs).
        aggregate_to_topk: accepted (the result is always the bottom ``k``).

    Returns:
        ``(values, indices)``, ``k`` along ``reduction_dimension``.
    """
    x = _t(operand)
    values, indices = _top_k_along("approx_min_k", unary.neg(x), k, reduction_dimension)
    return unary.neg(values), indices


def _top_k_along(op: str, x, k: int, axis: int):
    ax = norm_axis(op, axis, x.ndim, x.shape)
    last = ax == x.ndim - 1
    values, indices = top_k(x if last else view.moveaxis(x, ax, -1), k)
    if not last:
        values, indices = view.moveaxis(values, -1, ax), view.moveaxis(indices, -1, ax)
    return values, indices


def padtype_to_pads(in_shape, window_shape, window_strides, padding) -> list:
    """JAX's ``lax.padtype_to_pads``: the ``(low, high)`` pairs that ``"SAME"``,
    ``"SAME_LOWER"`` or ``"VALID"`` pad each windowed dim with.

    Args:
        in_shape: the windowed dims' sizes.
        window_shape: the window's size per dim.
        window_strides: the stride per dim.
        padding: ``"SAME"``, ``"SAME_LOWER"`` or ``"VALID"``.

    Returns:
        A list of ``(low, high)`` pairs.
    """
    if not isinstance(padding, str):
        raise TypeError(f"lax.padtype_to_pads: padding must be a string, got {padding!r}")
    ones = (1,) * len(in_shape)
    return _padding_pairs(
        "lax.padtype_to_pads", padding, tuple(in_shape), window_shape, window_strides, ones
    )


def pshuffle(x, axis_name, perm) -> Tensor:
    """JAX's ``lax.pshuffle``: position ``i`` along ``axis_name`` receives the value of
    position ``perm[i]`` (a permutation: every position once).

    Args:
        x: the per-device (or per-example) value.
        axis_name: the mesh axis or vmap axis name.
        perm: a permutation of the positions.

    Returns:
        The value this device (example) received.
    """
    perm = [int(p) for p in perm]
    if sorted(perm) != list(builtins.range(len(perm))):
        raise OpError(f"lax.pshuffle: perm must be a permutation of 0..{len(perm) - 1}, got {perm}")
    return ppermute(x, axis_name, [(src, dst) for dst, src in enumerate(perm)])
