"""Collectives on per-device values: the body of ``shard_map``.

Inside ``shard_map`` every mesh axis is a vmap level (``core.state.spmd_axes``): a value
varies along a mesh axis exactly when it carries that axis's level, and an axis's level
dim indexes the devices along it. A collective over an axis is then an ordinary op over that
dim: ``all_reduce`` a reduction that drops the level (the result is the same on every
device), ``all_gather`` moves the level into a dim, ``ppermute`` permutes it. So
differentiation, vmap and compile of these collectives come from the ops they are made of.

A value that does not vary along an axis behaves as JAX's: ``all_reduce`` sums ``n`` equal
copies, ``all_gather`` tiles it. Functions here take levels, not names: the rules of
``shard_map``'s boundary ops call them after the body has returned.
"""

from __future__ import annotations

import numpy as np

from ..core.dtypes import DType
from ..core.sharding import ShardingError
from ..core.state import level_sizes, spmd_axes
from ..runtime.tensor import Tensor

__all__ = [
    "active_axes",
    "levels_of",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "ppermute",
    "axis_index",
    "broadcast",
]


def active_axes() -> tuple:
    """The mesh axis names of the enclosing shard_map bodies."""
    return tuple(spmd_axes)


def levels_of(op: str, axes) -> list:
    """The vmap levels of mesh axes ``axes`` (names) of the enclosing shard_map."""
    out = []
    for a in axes:
        if a not in spmd_axes:
            raise ShardingError(
                f"{op}: {a!r} is not a mesh axis of the enclosing shard_map (axes: "
                f"{tuple(spmd_axes)})"
            )
        out.append(spmd_axes[a][0])
    return out


def _varies(x: Tensor, level: int) -> bool:
    return level in x._impl.levels


_REDUCE = {"sum": "reduce_sum", "max": "reduce_max", "min": "reduce_min", "prod": "reduce_prod"}


def all_reduce(x: Tensor, kind: str, levels) -> Tensor:
    """Every device gets the reduction (``kind``) over the devices along ``levels``."""
    for lv in levels:
        n = level_sizes[lv]
        if _varies(x, lv):
            stacked = batching.from_batch(x, lv, 0)
            x = getattr(reduction, _REDUCE[kind])(stacked, 0)
        elif kind == "sum":
            x = x * n
        elif kind == "prod":
            x = x**n
    return x


def all_gather(x: Tensor, axis: int, levels) -> Tensor:
    """Every device gets the blocks of the devices along ``levels`` concatenated along
    ``axis`` (the first level major)."""
    for lv in reversed(levels):  # minor axis first: the major one's blocks are outermost
        n = level_sizes[lv]
        if _varies(x, lv):
            stacked = batching.from_batch(x, lv, axis)
        else:
            stacked = view.broadcast_to(
                view.reshape(x, x.shape[:axis] + (1,) + x.shape[axis:]),
                x.shape[:axis] + (n,) + x.shape[axis:],
            )
        shape = stacked.shape
        x = view.reshape(
            stacked, shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2 :]
        )
    return x


def reduce_scatter(x: Tensor, axis: int, level: int) -> Tensor:
    """The sum over the devices along ``level``, each device keeping its block of ``axis``."""
    n = level_sizes[level]
    total = all_reduce(x, "sum", [level])
    size = total.shape[axis]
    if size % n:
        raise ShardingError(
            f"reduce_scatter: dim {axis} of shape {total.shape} is not divisible by the "
            f"{n} devices of the axis"
        )
    split = view.reshape(total, total.shape[:axis] + (n, size // n) + total.shape[axis + 1 :])
    return batching.to_batch(split, axis, level)


def all_to_all(x: Tensor, split_axis: int, concat_axis: int, level: int) -> Tensor:
    """Device ``i`` sends chunk ``j`` of its ``split_axis`` to device ``j``, which
    concatenates what it receives along ``concat_axis`` (in device order)."""
    n = level_sizes[level]
    if not _varies(x, level):
        x = batching.broadcast_levels(x, tuple(sorted(x._impl.levels + (level,))))
    size = x.shape[split_axis]
    if size % n:
        raise ShardingError(
            f"all_to_all: dim {split_axis} of shape {x.shape} is not divisible by the {n} "
            "devices of the axis"
        )
    src = batching.from_batch(x, level, 0)  # (source i, ...)
    s, c = split_axis + 1, concat_axis + 1
    parts = view.reshape(src, src.shape[:s] + (n, size // n) + src.shape[s + 1 :])
    # dims: 0 = source i, s = destination j, then the rest (c shifts when after s)
    c2 = c + 1 if c > s else c
    rest = [d for d in range(parts.ndim) if d not in (0, s)]
    pos = rest.index(c2)
    order = [s] + rest[:pos] + [0] + rest[pos:]
    moved = view.permute(parts, order)  # (j, ..., i, concat dim, ...)
    shape = moved.shape
    merged = view.reshape(
        moved, shape[: pos + 1] + (shape[pos + 1] * shape[pos + 2],) + shape[pos + 3 :]
    )
    return batching.to_batch(merged, 0, level)


def ppermute(x: Tensor, pairs, levels) -> Tensor:
    """Device ``src`` (a flat position along ``levels``, row-major) sends its value to device
    ``dst``; devices that receive nothing get zeros."""
    sizes = [level_sizes[lv] for lv in levels]
    total = int(np.prod(sizes))
    missing = [lv for lv in levels if not _varies(x, lv)]
    if missing:
        x = batching.broadcast_levels(x, tuple(sorted(set(x._impl.levels) | set(missing))))
    stacked = x
    for k, lv in enumerate(levels):
        stacked = batching.from_batch(stacked, lv, k)
    flat = view.reshape(stacked, (total,) + stacked.shape[len(levels) :])
    src_of = dict((d, s) for s, d in pairs)
    idx = np.array([src_of.get(d, 0) for d in range(total)], dtype=np.int32)
    keep = np.array([d in src_of for d in range(total)])
    moved = indexing.take(flat, creation.constant(idx), axis=0)
    if not keep.all():
        mask = creation.constant(keep.reshape((total,) + (1,) * (flat.ndim - 1)))
        moved = binary.where(mask, moved, creation.zeros_like(moved))
    out = view.reshape(moved, tuple(sizes) + moved.shape[1:])
    for lv in levels:
        out = batching.to_batch(out, 0, lv)
    return out


def axis_index(level: int) -> Tensor:
    """Each device's position along the axis of ``level`` (an int32 scalar per device)."""
    n = level_sizes[level]
    return batching.to_batch(creation.arange(n, dtype=DType.int32), 0, level)


def broadcast(x: Tensor, root, levels) -> Tensor:
    """Every device gets the value of the device at position ``root`` along ``levels``."""
    for lv, r in zip(levels, root, strict=True):
        if _varies(x, lv):
            stacked = batching.from_batch(x, lv, 0)
            x = view.reshape(view.slice_tensor(stacked, [r], [1]), stacked.shape[1:])
    return x


# Ops this module calls at run time; imported last because they are built on it.
from . import batching, binary, creation, indexing, reduction, view  # noqa: E402
