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
  ``axis_index`` along either.
"""

from __future__ import annotations

import numbers

import numpy as np

from .core.dtypes import DType
from .core.pytree import tree_leaves, tree_map
from .core.state import spmd_axes
from .ops import binary, collectives, creation, indexing, view
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
    b = max(1, min(int(batch_size), n)) if n else 1
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
        return min(max(index, 0), size - length)
    t = index if isinstance(index, Tensor) else creation.constant(index)
    if t.ndim != 0 or not t.dtype.is_int:
        raise TypeError(f"{what}: a start index is an int or a 0-d integer tensor, got {index!r}")
    t = t.cast(DType.int64)
    t = binary.where(t < 0, t + size, t)
    return binary.clip(t, 0, size - length)


def _positions(start, length: int):
    """The indices ``start .. start + length - 1`` (a tensor start: computed)."""
    if isinstance(start, int):
        return slice(start, start + length)
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
        if isinstance(at, slice):
            x = x[(slice(None),) * d + (at,)]
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
    if all(isinstance(a, slice) for a in at):
        return x.at[tuple(at)].set(u)
    # index grids: one integer tensor per dim, broadcasting to the update's shape
    grids = []
    for d, a in enumerate(at):
        a = creation.arange(a.start, a.stop, dtype=DType.int64) if isinstance(a, slice) else a
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
