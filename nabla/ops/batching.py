"""vmap plumbing: ops that move dims between the logical shape and the batch prefix.

Every batch dim carries its vmap level; a tensor's levels are kept sorted (outer first).

- ``to_batch(x, axis, level)``: logical ``axis`` becomes the batch dim of ``level``.
- ``from_batch(x, level, axis)``: the batch dim of ``level`` becomes logical ``axis``.
- ``broadcast_levels(x, levels)``: add missing levels by broadcasting (operand alignment).
- ``sum_levels(x, levels)``: sum batch dims away (cotangents of broadcasts).
- ``stack_examples(x, level)`` / ``unstack_examples(y, level)``: ``from_batch`` and
  ``to_batch`` as the collectives over a named vmap's examples use them (``lax.psum``,
  ``all_gather``, ``ppermute``, ... under ``vmap(axis_name=)``). They move the same dims;
  their cotangents differ where the vmap runs around the differentiation (``vmap(grad(f))``):
  there each example is a device running its own backward pass, as in JAX. The stacked
  value is the same on every example, so its cotangent is the sum of every example's
  (``psum`` transposes to ``psum``), and an example's slice of a stacked value owes its
  cotangent to that slice alone.

Their physical kwargs are derived from the input's levels at the call and lower to the
ordinary backend ops ``transpose``, ``broadcast_in_dim`` and ``reduce_sum``.
"""

from __future__ import annotations

import math

from ..core.ir import TensorImpl
from ..core.state import STATE, is_live, level_sizes, live_grad_levels, spmd_axes
from ..runtime.tensor import Tensor
from . import spmd
from .base import Operation
from .functions import fn, provide

__all__ = [
    "to_batch",
    "from_batch",
    "stack_examples",
    "unstack_examples",
    "broadcast_levels",
    "sum_levels",
    "bind_per_example",
]


class _LevelOp(Operation):
    physical = True
    data_movement = True

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return kwargs["phys"]

    def out_levels(self, impls, levels, kwargs):
        return kwargs["levels"]


class _MoveLevelOp(_LevelOp):
    """A level entering or leaving: a transpose of the buffer (``kwargs["phys"]["perm"]``)."""

    backend_name = "transpose"

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.permute_rule(in_shapes[0], kwargs["phys"]["perm"])

    def shard_physical(self, kwargs, mesh_shape, local_in, local_out):
        n = len(mesh_shape)
        return {"perm": tuple(range(n)) + tuple(p + n for p in kwargs["phys"]["perm"])}


class ToBatchOp(_MoveLevelOp):
    name = "to_batch"

    def infer(self, shapes, dtypes, kwargs):
        s = shapes[0]
        a = kwargs["axis"]
        return [s[:a] + s[a + 1 :]], [dtypes[0]]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [from_batch(cotangents[0], kwargs["level"], kwargs["axis"])]

    def replay(self, args, kwargs):
        """Re-bind for ``compile``'s replay path (the batch size may have changed)."""
        level_sizes[kwargs["level"]] = args[0].shape[kwargs["axis"]]
        return to_batch(args[0], kwargs["axis"], kwargs["level"])

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [to_batch(tangents[0], kwargs["axis"], kwargs["level"])]


class FromBatchOp(_MoveLevelOp):
    name = "from_batch"

    def infer(self, shapes, dtypes, kwargs):
        s = shapes[0]
        a = kwargs["axis"]
        return [s[:a] + (level_sizes[kwargs["level"]],) + s[a:]], [dtypes[0]]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [to_batch(cotangents[0], kwargs["axis"], kwargs["level"])]

    def replay(self, args, kwargs):
        return from_batch(args[0], kwargs["level"], kwargs["axis"])

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [from_batch(tangents[0], kwargs["level"], kwargs["axis"])]


class StackExamplesOp(FromBatchOp):
    """``from_batch`` inside a collective over a named vmap's examples: each example sees
    every example's value. Its cotangent is the sum over the examples of each one's
    cotangent of the stack (JAX's ``psum`` as its own transpose): a cotangent that differs
    per example is summed over them, one the same for every example counted ``size``
    times. (``from_batch``'s own cotangent keeps the plain vmap's per-example meaning.)"""

    name = "stack_examples"

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        ct, level = cotangents[0], kwargs["level"]
        if level in ct._impl.levels:
            total = sum_levels(ct, (level,))
        elif level in STATE.active_vmap:  # one per example, each the same
            total = ct * kwargs["size"]
        else:  # the vmap has finished: its examples' cotangents are summed already
            total = ct
        return [to_batch(total, kwargs["axis"], level)]

    def replay(self, args, kwargs):
        return stack_examples(args[0], kwargs["level"], kwargs["axis"])


class UnstackExamplesOp(ToBatchOp):
    """``to_batch`` ending a collective over a named vmap's examples: example ``e`` takes
    slice ``e`` of a value stacked over them. Its cotangent for example ``e`` is its own
    cotangent in slice ``e`` and zeros elsewhere, a value per example (``to_batch``'s
    cotangent stacks the examples' into one value instead, which ``stack_examples``
    would then count once per example)."""

    name = "unstack_examples"

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        axis, level, n = kwargs["axis"], kwargs["level"], kwargs["size"]
        ct = fn.unsqueeze(cotangents[0], axis)
        shape = list(ct.shape)
        shape[axis] = n
        positions = fn.arange(n)
        slot = fn.equal(positions, to_batch(positions, 0, level))  # this example's slot
        slot = fn.reshape(slot, (1,) * axis + (n,) + (1,) * (len(shape) - axis - 1))
        return [fn.where(slot, fn.broadcast_to(ct, tuple(shape)), fn.zeros_like(ct))]

    def replay(self, args, kwargs):
        level_sizes[kwargs["level"]] = args[0].shape[kwargs["axis"]]
        return unstack_examples(args[0], kwargs["axis"], kwargs["level"])


class BroadcastLevelsOp(_LevelOp):
    name = "broadcast_levels"
    backend_name = "broadcast_in_dim"

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        dims, out = kwargs["phys"]["dims"], out_shapes[0]
        ins = []
        sizes = {f"d{j}": n for j, n in enumerate(out)}
        for i, d in enumerate(dims):
            if in_shapes[0][i] == out[d]:
                ins.append((f"d{d}",))
            else:  # a size-1 dim broadcast
                ins.append((f"u{i}",))
                sizes[f"u{i}"] = in_shapes[0][i]
        return spmd.FactorRule([ins], [[(f"d{j}",) for j in range(len(out))]], sizes)

    def shard_physical(self, kwargs, mesh_shape, local_in, local_out):
        n = len(mesh_shape)
        dims = tuple(range(n)) + tuple(d + n for d in kwargs["phys"]["dims"])
        return {"shape": tuple(mesh_shape) + tuple(local_out[0]), "dims": dims}

    def infer(self, shapes, dtypes, kwargs):
        return [shapes[0]], [dtypes[0]]

    def replay(self, args, kwargs):
        return broadcast_levels(args[0], kwargs["levels"])

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [sum_finished_levels(cotangents[0], primals[0])]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        t = tangents[0]
        return [broadcast_levels(t, tuple(sorted(set(t._impl.levels) | set(kwargs["levels"]))))]


class SumLevelsOp(_LevelOp):
    name = "sum_levels"
    data_movement = False
    partial_reduce = "sum"
    backend_name = "reduce_sum"

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.reduce_rule(in_shapes[0], kwargs["phys"]["axes"], False, "sum")

    def shard_physical(self, kwargs, mesh_shape, local_in, local_out):
        n = len(mesh_shape)
        return {"axes": tuple(a + n for a in kwargs["phys"]["axes"]), "keepdims": False}

    def infer(self, shapes, dtypes, kwargs):
        return [shapes[0]], [dtypes[0]]

    def replay(self, args, kwargs):
        # a recorded sum replayed on a value that no longer varies along some of the levels
        # (a loop body traced first with an unbatched carry, then widened): summing the
        # copies of a constant is a product with their count
        x = args[0]
        have = x._impl.levels
        out = sum_levels(x, tuple(lv for lv in kwargs["drop"] if lv in have))
        copies = math.prod(level_sizes[lv] for lv in kwargs["drop"] if lv not in have)
        return out if copies == 1 else out * copies

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        ct = cotangents[0]
        want = tuple(sorted(set(ct._impl.levels) | set(primals[0]._impl.levels)))
        return [broadcast_levels(ct, want)]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        t = tangents[0]
        drop = tuple(lv for lv in kwargs["drop"] if lv in t._impl.levels)
        return [sum_levels(t, drop)]


_to_batch = ToBatchOp()
_from_batch = FromBatchOp()
_stack_examples = StackExamplesOp()
_unstack_examples = UnstackExamplesOp()
_broadcast_levels = BroadcastLevelsOp()
_sum_levels = SumLevelsOp()


def to_batch(x: Tensor, axis: int, level: int) -> Tensor:
    """Make logical ``axis`` of ``x`` the batch dim of vmap ``level``."""
    impl = x._impl
    kwargs = _to_batch_kwargs(impl, axis, level)
    perm = kwargs["phys"]["perm"]
    if (
        perm == tuple(range(len(perm)))
        and impl.buffer is not None
        and not impl.tangents
        and not is_live(impl.traced)
        and STATE.recording is None
    ):
        # the common in_axes=0 case on a realized value: same buffer, new level metadata;
        # no node is needed (nothing will differentiate or record through it)
        out = TensorImpl(impl.shape, impl.dtype, impl.device, kwargs["levels"], buffer=impl.buffer)
        out.sharding = impl.sharding
        return Tensor._wrap(out)
    return _to_batch.bind([x], kwargs)


def _to_batch_kwargs(impl, axis: int, level: int) -> dict:
    lv = impl.levels
    new = tuple(sorted(lv + (level,)))
    pos = new.index(level)
    perm = list(range(len(impl.shape)))
    perm.insert(pos, perm.pop(len(lv) + axis))
    return {"axis": axis, "level": level, "levels": new, "phys": {"perm": tuple(perm)}}


def from_batch(x: Tensor, level: int, axis: int) -> Tensor:
    """Move the batch dim of ``level`` to logical ``axis`` (broadcasting if ``x`` lacks it)."""
    x = _with_level(x, level)
    return _from_batch.bind([x], _from_batch_kwargs(x._impl, level, axis))


def _with_level(x: Tensor, level: int) -> Tensor:
    if level in x._impl.levels:
        return x
    return broadcast_levels(x, tuple(sorted(x._impl.levels + (level,))))


def _from_batch_kwargs(impl, level: int, axis: int) -> dict:
    lv = impl.levels
    pos = lv.index(level)
    new = lv[:pos] + lv[pos + 1 :]
    perm = list(range(len(impl.shape)))
    perm.insert(len(new) + axis, perm.pop(pos))
    return {"axis": axis, "level": level, "levels": new, "phys": {"perm": tuple(perm)}}


def stack_examples(x: Tensor, level: int, axis: int = 0) -> Tensor:
    """Every example's ``x`` along logical ``axis``, for a collective over the examples of
    vmap ``level`` (``StackExamplesOp``); ``x`` the same for every example is repeated."""
    x = _with_level(x, level)
    kwargs = _from_batch_kwargs(x._impl, level, axis)
    kwargs["size"] = level_sizes[level]
    return _stack_examples.bind([x], kwargs)


def unstack_examples(y: Tensor, axis: int, level: int) -> Tensor:
    """Example ``e`` of vmap ``level`` takes slice ``e`` of ``y``'s ``axis``, ending a
    collective over the examples (``UnstackExamplesOp``)."""
    kwargs = _to_batch_kwargs(y._impl, axis, level)
    kwargs["size"] = y.shape[axis]
    return _unstack_examples.bind([y], kwargs)


def broadcast_levels(x: Tensor, levels: tuple) -> Tensor:
    """Give ``x`` exactly the batch ``levels`` (a sorted superset of its own)."""
    impl = x._impl
    if impl.levels == levels:
        return x
    nb = len(impl.levels)
    logical = impl.shape[nb:]
    out_shape = tuple(level_sizes[lv] for lv in levels) + logical
    dims = [levels.index(lv) for lv in impl.levels]
    dims += [len(levels) + i for i in range(len(logical))]
    kwargs = {"levels": levels, "phys": {"shape": out_shape, "dims": tuple(dims)}}
    return _broadcast_levels.bind([x], kwargs)


def bind_per_example(op, tensors: list, kwargs: dict, out_types) -> list:
    """``op`` bound once per element of the operands' vmap batch (an op that cannot take
    batch dims: a ``"loop"`` custom kernel, a sequential callback): every level moved into
    a leading logical dim, the batch flattened and sliced, each slice bound, the results
    stacked and their dims moved back to their levels. ``out_types``: the logical
    ``(DType, shape)`` of each output."""
    levels = tuple(sorted({lv for t in tensors for lv in t._impl.levels}))
    flat, batch_shape = [], ()
    for t in tensors:
        if t._impl.levels != levels:
            t = broadcast_levels(t, levels)
        for i, lv in enumerate(levels):
            t = from_batch(t, lv, i)
        batch_shape = tuple(t.shape[: len(levels)])
        flat.append(fn.reshape(t, (math.prod(batch_shape), *t.shape[len(levels) :])))
    results = [op.bind([x[b] for x in flat], kwargs) for b in range(math.prod(batch_shape))]
    outs = []
    for k, (dt, shape) in enumerate(out_types):
        if results:
            y = fn.stack([r[k] for r in results], axis=0)
        else:  # an empty batch
            y = fn.zeros((0, *shape), dtype=dt)
        y = fn.reshape(y, (*batch_shape, *shape))
        for lv in levels:
            y = to_batch(y, 0, lv)
        outs.append(y)
    return outs


def differentiated_inside(impl, vmap_level: int) -> bool:
    """True when a live differentiation tracing ``impl`` began after (inside) the vmap of
    ``vmap_level`` (levels are numbered in creation order): its cotangent must stay one per
    example, so a rewrite that folds that vmap's batch into a contraction or an index (and
    so sums over it in the backward) is wrong for it."""
    if not is_live(impl.traced):
        return False
    return max(lv for lv in impl.traced if lv in live_grad_levels) > vmap_level


def sum_finished_levels(ct: Tensor, primal: Tensor) -> Tensor:
    """The cotangent of a value broadcast over vmap levels ``primal`` lacks: sum the levels
    whose vmap has finished. A level still active belongs to a vmap *around* this
    differentiation, whose cotangents stay batched (JAX semantics: per-example gradients).
    A running ``shard_map``'s device level is summed too (a psum over the mesh axis): a
    value the same on every device along an axis has one gradient there, the sum of the
    devices' contributions, as JAX's ``shard_map`` (an invariant value's implicit
    broadcast transposes to ``psum``)."""
    have = set(primal._impl.levels)
    active = set(STATE.active_vmap)
    devices = {lv for lv, _mesh in spmd_axes.values()}
    drop = tuple(
        lv for lv in ct._impl.levels if lv not in have and (lv not in active or lv in devices)
    )
    return sum_levels(ct, drop)


def sum_levels(x: Tensor, drop: tuple) -> Tensor:
    """Sum the batch dims of the levels in ``drop`` away."""
    if not drop:
        return x
    across = tuple(lv for lv in drop if fn.is_spanning_level(lv))
    if across:  # shard_map levels whose devices are on other processes too
        x = fn.per_device_all_reduce(x, "sum", list(across))
        drop = tuple(lv for lv in drop if lv not in across)
        if not drop:
            return x
    lv = x._impl.levels
    axes = tuple(lv.index(d) for d in drop)
    new = tuple(v for v in lv if v not in drop)
    kwargs = {
        "drop": tuple(drop),
        "levels": new,
        "phys": {"axes": tuple(sorted(axes)), "keepdims": False},
    }
    return _sum_levels.bind([x], kwargs)


provide(globals(), __all__)
