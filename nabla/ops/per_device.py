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

When the mesh spans processes (``nb.distributed``), a level's batch dim holds only this
process's devices along the axis, so a collective cannot be an op over that dim. It goes
through the global view instead: the per-device values are stacked into a global tensor
whose leading dim ``k`` is split over mesh axis ``k`` (``_stack``, shard_map's exit op), the
global collective of ``collectives`` runs on it (MPI between processes), and each device's
block comes back as its per-device value (``_unstack``, shard_map's entry op).
"""

from __future__ import annotations

import numpy as np

from ..core.dtypes import DType
from ..core.sharding import ShardingError, ShardingSpec
from ..core.state import level_sizes, mesh_levels, spmd_axes
from ..runtime.tensor import Tensor
from . import batching
from .functions import fn, provide

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
    "axis_size",
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


def _axis_of(level: int):
    """``(axis name, mesh)`` of a shard_map level."""
    got = mesh_levels.get(level)
    if got is None:
        raise ShardingError(f"level {level} is not a mesh axis of a shard_map")
    return got[0], got[1]


def is_spanning_level(level: int) -> bool:
    """True for a shard_map level whose mesh spans processes (its batch dim holds only this
    process's devices: a sum over it must cross processes)."""
    got = mesh_levels.get(level)
    return got is not None and got[1].spans_processes


def axis_size(level: int) -> int:
    """The devices along the mesh axis of ``level`` (the whole mesh's, on every process)."""
    got = mesh_levels.get(level)
    return level_sizes[level] if got is None else got[1].axis_size(got[0])


def _not_divisible(op: str, dim: int, shape, n: int, levels) -> ShardingError:
    """The error of a collective whose ``dim`` does not split over the ``n`` devices of the
    axes of ``levels``, naming the axes and saying ``shape`` is the per-device block."""
    by_level = {lv: name for name, (lv, _mesh) in spmd_axes.items()}
    names = tuple(by_level.get(lv, lv) for lv in levels)
    return ShardingError(
        f"{op}: dim {dim} of the per-device block of shape {tuple(shape)} is not divisible "
        f"by the {n} devices of mesh axes {names}"
    )


def _spans(levels) -> bool:
    return any(is_spanning_level(lv) for lv in levels)


def _frame(levels):
    """``(mesh, names of levels, ((axis, level), ...) for every axis of the mesh)``."""
    names = tuple(_axis_of(lv)[0] for lv in levels)
    _, mesh, frame = mesh_levels[levels[0]]
    return mesh, names, frame


def _stack(x: Tensor, mesh, frame, names) -> Tensor:
    """The devices' values of ``x`` as one global tensor ``(n_1, ..., n_m) + x.shape``, its
    leading dim ``k`` split over mesh axis ``k`` where ``x`` varies along it or the
    collective runs over it (``names``); elsewhere that dim has size 1 (copies)."""
    mesh_levels = {lv for _, lv in frame}
    first = min(mesh_levels)
    inner = [lv for lv in x._impl.levels if lv > first and lv not in mesh_levels]
    if inner:
        raise ShardingError(
            f"shard_map: a collective across processes on a value batched by a vmap newer "
            f"than the mesh (shape {x.shape}; a vmap inside the body, or jacrev/hessian's vmap "
            "of the pullback) is not supported; vmap outside the shard_map, or use jacfwd"
        )
    m = mesh.ndim
    y = fn.reshape(x, (1,) * m + tuple(x.shape))
    split = {a for a, lv in frame if lv in x._impl.levels} | set(names)
    dims = tuple((a,) if a in split else () for a in mesh.axis_names) + ((),) * x.ndim
    return fn.from_local(y, mesh, dims, frame)


def _unstack(g: Tensor, mesh, frame, shape) -> Tensor:
    """Each device's block of ``g`` as its per-device value, reshaped to ``shape``."""
    spec = ShardingSpec(mesh, g._impl.sharding.dims[len(g._impl.levels) :])
    return fn.reshape(fn.to_local(g, mesh, spec, frame), tuple(shape))


def _global_all_reduce(x, kind, levels):
    mesh, names, frame = _frame(levels)
    g = fn.all_reduce_phys(_stack(x, mesh, frame, names), kind, names)
    return _unstack(g, mesh, frame, x.shape)


def _global_all_gather(x, axis, levels):
    mesh, names, frame = _frame(levels)
    g = _stack(x, mesh, frame, names)
    for a in names:
        g = fn.all_gather_phys(g, len(g._impl.levels) + mesh.axis(a), (a,))
    lead = tuple(mesh.axis_size(a) if a in names else 1 for a in mesh.axis_names)
    y = _unstack(g, mesh, frame, lead + tuple(x.shape))
    # the gathered dims in the order of ``levels`` (major first), then merged into ``axis``
    order = [mesh.axis(a) for a in names]
    order += [k for k in range(mesh.ndim) if k not in order]
    order += list(range(mesh.ndim, y.ndim))
    n = int(np.prod([mesh.axis_size(a) for a in names]))
    y = fn.reshape(fn.permute(y, order), (n,) + tuple(x.shape))
    y = fn.moveaxis(y, 0, axis)
    s = y.shape
    return fn.reshape(y, s[:axis] + (s[axis] * s[axis + 1],) + s[axis + 2 :])


def _global_ppermute(x, pairs, levels):
    mesh, names, frame = _frame(levels)
    sizes = [mesh.axis_size(a) for a in names]
    ks = [mesh.axis(a) for a in names]
    dst_of = dict(pairs)
    flat = []
    for d in range(mesh.size):
        c = list(mesh.coords(d))
        p = int(np.ravel_multi_index([c[k] for k in ks], sizes))
        if p in dst_of:
            for k, v in zip(ks, np.unravel_index(dst_of[p], sizes), strict=True):
                c[k] = int(v)
            flat.append((d, int(np.ravel_multi_index(c, mesh.shape))))
    g = fn.ppermute(_stack(x, mesh, frame, names), flat)
    return _unstack(g, mesh, frame, x.shape)


def _global_broadcast(x, root, levels):
    mesh, names, frame = _frame(levels)
    g = fn.broadcast(_stack(x, mesh, frame, names), tuple(root), names)
    return _unstack(g, mesh, frame, x.shape)


def _global_axis_index(level):
    mesh, names, frame = _frame([level])
    g = fn.mesh_axis_index(mesh, names[0])
    return fn.reshape(fn.to_local(g, mesh, g._impl.sharding, frame), ())


def _global_reduce_scatter(x, axis, levels):
    mesh, names, frame = _frame(levels)
    n = int(np.prod([mesh.axis_size(a) for a in names]))
    if x.shape[axis] % n:
        raise _not_divisible("reduce_scatter", axis, x.shape, n, levels)
    g = fn.all_reduce_phys(_stack(x, mesh, frame, names), "sum", names)
    d = len(g._impl.levels) + mesh.ndim + axis
    dims = list(g._impl.sharding.dims)
    dims[d] = dims[d] + names  # split over the axes in the order named, the first major
    g = fn.slice_phys(g, dims)
    shape = list(x.shape)
    shape[axis] //= n
    return _unstack(g, mesh, frame, shape)


def _global_all_to_all(x, split_axis, concat_axis, level):
    mesh, names, frame = _frame([level])
    a = names[0]
    n = mesh.axis_size(a)
    size = x.shape[split_axis]
    if size % n:
        raise _not_divisible("all_to_all", split_axis, x.shape, n, [level])
    g = _stack(x, mesh, frame, names)  # (n_1..n_m, *s), dim k (axis a) split over a
    m, nb_ = mesh.ndim, len(g._impl.levels)
    s = tuple(x.shape)
    g = fn.reshape(g, g.shape[:m] + s[:split_axis] + (n, size // n) + s[split_axis + 1 :])
    # sources (dim k) gathered, destinations (the new chunk dim) split over a
    g = fn.all_to_all_phys(g, nb_ + m + split_axis, nb_ + mesh.axis(a), (a,))
    chunked = s[:split_axis] + (size // n,) + s[split_axis + 1 :]
    y = _unstack(g, mesh, frame, (n,) + chunked)  # (source, *chunked)
    y = fn.moveaxis(y, 0, concat_axis)
    t = y.shape
    return fn.reshape(
        y, t[:concat_axis] + (t[concat_axis] * t[concat_axis + 1],) + t[concat_axis + 2 :]
    )


def _varies(x: Tensor, level: int) -> bool:
    return level in x._impl.levels


_REDUCE = {"sum": "reduce_sum", "max": "reduce_max", "min": "reduce_min", "prod": "reduce_prod"}


def all_reduce(x: Tensor, kind: str, levels) -> Tensor:
    """Every device gets the reduction (``kind``) over the devices along ``levels``."""
    dtype = x.dtype
    if dtype.is_bool and kind in ("sum", "prod"):
        x = x.cast(DType.int32)  # a count, as JAX's psum
    if _spans(levels):
        return _narrow_back(_global_all_reduce(x, kind, levels), dtype)
    for lv in levels:
        n = level_sizes[lv]
        if _varies(x, lv):
            stacked = batching.from_batch(x, lv, 0)
            x = getattr(fn, _REDUCE[kind])(stacked, 0)
        elif kind == "sum":
            x = x * n
        elif kind == "prod":
            x = x**n
    return _narrow_back(x, dtype)


def _narrow_back(x: Tensor, dtype) -> Tensor:
    """As JAX's psum, a narrow int keeps its dtype (the reductions widen it to int32)."""
    return x.cast(dtype) if dtype.is_int and x.dtype != dtype else x


def all_gather(x: Tensor, axis: int, levels) -> Tensor:
    """Every device gets the blocks of the devices along ``levels`` concatenated along
    ``axis`` (the first level major)."""
    if _spans(levels):
        return _global_all_gather(x, axis, levels)
    for lv in reversed(levels):  # minor axis first: the major one's blocks are outermost
        n = level_sizes[lv]
        if _varies(x, lv):
            stacked = batching.from_batch(x, lv, axis)
        else:
            stacked = fn.broadcast_to(
                fn.reshape(x, x.shape[:axis] + (1,) + x.shape[axis:]),
                x.shape[:axis] + (n,) + x.shape[axis:],
            )
        shape = stacked.shape
        x = fn.reshape(stacked, shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2 :])
    return x


def reduce_scatter(x: Tensor, axis: int, levels) -> Tensor:
    """The sum over the devices along ``levels``, each device keeping its block of ``axis``
    (blocks in row-major order of the positions along ``levels``, the first major)."""
    if _spans(levels):
        return _global_reduce_scatter(x, axis, levels)
    sizes = tuple(level_sizes[lv] for lv in levels)
    n = int(np.prod(sizes))
    total = all_reduce(x, "sum", levels)
    size = total.shape[axis]
    if size % n:
        raise _not_divisible("reduce_scatter", axis, total.shape, n, levels)
    split = fn.reshape(total, total.shape[:axis] + sizes + (size // n,) + total.shape[axis + 1 :])
    for lv in levels:  # each takes the leading device dim left at ``axis``
        split = batching.to_batch(split, axis, lv)
    return split


def _stack_levels(x: Tensor, levels) -> Tensor:
    """``x``'s values on the devices along ``levels`` as one leading dim (row-major over
    ``levels``, the first major); a value the same along a level is broadcast to it."""
    missing = [lv for lv in levels if not _varies(x, lv)]
    if missing:
        x = batching.broadcast_levels(x, tuple(sorted(set(x._impl.levels) | set(missing))))
    for k, lv in enumerate(levels):
        x = batching.from_batch(x, lv, k)
    total = int(np.prod([level_sizes[lv] for lv in levels]))
    return fn.reshape(x, (total,) + x.shape[len(levels) :])


def _unstack_levels(y: Tensor, levels) -> Tensor:
    """Inverse of ``_stack_levels``: leading dim ``k`` is the device along ``levels``."""
    y = fn.reshape(y, tuple(level_sizes[lv] for lv in levels) + y.shape[1:])
    for lv in levels:
        y = batching.to_batch(y, 0, lv)
    return y


def all_to_all(x: Tensor, split_axis: int, concat_axis: int, levels) -> Tensor:
    """Device ``i`` sends chunk ``j`` of its ``split_axis`` to device ``j``, which
    concatenates what it receives along ``concat_axis`` (in device order; several levels
    act as one axis, row-major, the first major)."""
    if _spans(levels):
        if len(levels) > 1:
            raise ShardingError(
                "all_to_all: inside a shard_map over a mesh that spans processes it takes one "
                "mesh axis at a time"
            )
        return _global_all_to_all(x, split_axis, concat_axis, levels[0])
    n = int(np.prod([level_sizes[lv] for lv in levels]))
    size = x.shape[split_axis]
    if size % n:
        raise _not_divisible("all_to_all", split_axis, x.shape, n, levels)
    src = _stack_levels(x, levels)  # (source i, ...)
    s, c = split_axis + 1, concat_axis + 1
    parts = fn.reshape(src, src.shape[:s] + (n, size // n) + src.shape[s + 1 :])
    # dims: 0 = source i, s = destination j, then the rest (c shifts when not before s:
    # with c == s the sources' chunks are concatenated back along that dim)
    c2 = c + 1 if c >= s else c
    rest = [d for d in range(parts.ndim) if d not in (0, s)]
    pos = rest.index(c2)
    order = [s] + rest[:pos] + [0] + rest[pos:]
    moved = fn.permute(parts, order)  # (j, ..., i, concat dim, ...)
    shape = moved.shape
    merged = fn.reshape(
        moved, shape[: pos + 1] + (shape[pos + 1] * shape[pos + 2],) + shape[pos + 3 :]
    )
    return _unstack_levels(merged, levels)


def ppermute(x: Tensor, pairs, levels) -> Tensor:
    """Device ``src`` (a flat position along ``levels``, row-major in mesh order as JAX's
    ``ppermute``, whatever order the axes were named in) sends its value to device ``dst``;
    devices that receive nothing get zeros."""
    levels = sorted(levels)  # a shard_map's levels are made in mesh order
    if _spans(levels):
        return _global_ppermute(x, pairs, levels)
    flat = _stack_levels(x, levels)
    total = flat.shape[0]
    src_of = dict((d, s) for s, d in pairs)
    idx = np.array([src_of.get(d, 0) for d in range(total)], dtype=np.int32)
    keep = np.array([d in src_of for d in range(total)])
    moved = fn.take(flat, fn.constant(idx), axis=0)
    if not keep.all():
        mask = fn.constant(keep.reshape((total,) + (1,) * (flat.ndim - 1)))
        moved = fn.where(mask, moved, fn.zeros_like(moved))
    return _unstack_levels(moved, levels)


def axis_index(level: int) -> Tensor:
    """Each device's position along the axis of ``level`` (an int32 scalar per device)."""
    if _spans([level]):
        return _global_axis_index(level)
    n = level_sizes[level]
    return batching.to_batch(fn.arange(n, dtype=DType.int32), 0, level)


def first_lane(x: Tensor, level: int) -> Tensor:
    """``x`` without ``level``, a shard_map level whose mesh spans processes, where ``x``
    is the same on every device along it: the first device's value, as one value every
    device holds (a broadcast over processes). A process's own first device would do for
    the value, but not for its derivative: one cotangent per process, not one in all,
    would flow back."""
    mesh, names, frame = _frame([level])
    g = _stack(x, mesh, frame, names)
    k = mesh.axis_names.index(names[0])
    g = g[(slice(None),) * (len(g._impl.levels) + k) + (slice(0, 1),)]
    return _unstack(g, mesh, frame, x.shape)


def broadcast(x: Tensor, root, levels) -> Tensor:
    """Every device gets the value of the device at position ``root`` along ``levels``."""
    if _spans(levels):
        return _global_broadcast(x, root, levels)
    for lv, r in zip(levels, root, strict=True):
        if _varies(x, lv):
            stacked = batching.from_batch(x, lv, 0)
            x = fn.reshape(fn.slice_tensor(stacked, [r], [1]), stacked.shape[1:])
    return x


# the per-device collectives share their names with the public ones they serve
provide(globals(), ["is_spanning_level"])
provide(globals(), ["all_reduce"], prefix="per_device_")
