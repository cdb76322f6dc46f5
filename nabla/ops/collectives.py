"""Placing values on a device mesh, and the collectives (``docs/architecture.md``, "Sharding").

A sharded tensor keeps its global (logical) shape; its buffer holds one block per mesh
device (``nabla.core.sharding``). Two kinds of ops live here:

- **Layout ops**, identities on the global value: ``shard`` (a whole value to blocks: local
  slicing, no communication), ``unshard`` (blocks to a whole value), ``all_gather``,
  ``all_to_all``, ``reduce_scatter``, ``shard_slice`` (local slicing of a replicated dim) and
  ``all_reduce`` over partial axes of its own kind. Propagation inserts these; their
  gradients are the reverse layout change.
- **Per-device collectives**, which change the global value because they act on each
  device's block: ``all_reduce`` over axes a dim is split on (every device gets the
  reduction of the blocks: the dim shrinks to one block, replicated) or the value is
  replicated on (the equal copies are reduced: ``sum`` is ``n * x``, as JAX's ``psum``;
  ``reduce_scatter`` over such axes is that, then a split), ``ppermute`` (blocks
  move between devices), ``broadcast`` (every device gets the root's block) and
  ``axis_index`` (each device's coordinate).

Every collective is an op: it has JVP and VJP rules, works under vmap, shows in ``nb.trace``
with its mesh axes, and reports the bytes each device sends (``comm_bytes``, ring formulas
of ``nabla.core.sharding.collective_bytes``). On the simulated mesh the backends lower them
to ordinary data movement over the buffer's leading mesh dims.

Dims in these ops' kwargs count from the end (``-1`` is the last dim), so a rule that
rebinds the op on a tangent with more vmap levels addresses the same logical dim.
"""

from __future__ import annotations

import contextlib
import weakref
from math import prod
from typing import Any, NamedTuple

import numpy as np

from ..backends import mpi
from ..core.config import CONFIG
from ..core.device import get_default_device
from ..core.dtypes import DType
from ..core.sharding import (
    REDUCE_KINDS,
    DeviceMesh,
    PartitionSpec,
    ShardingError,
    ShardingSpec,
    collective_bytes,
)
from ..core.state import STATE, live_grad_levels, spmd_axes
from ..runtime.tensor import Tensor
from . import per_device, spmd
from ._util import alias_arg, as_tensor
from .base import Operation
from .functions import fn, provide
from .pipeline import Call, _check_alloc, emit

__all__ = [
    "shard",
    "reshard",
    "unshard",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "ppermute",
    "axis_index",
    "pmean",
    "broadcast",
    "distributed_broadcast",
]


def _idx(mesh: DeviceMesh, axes) -> tuple:
    return tuple(mesh.axis(a) for a in axes)


def _spec_like(spec: ShardingSpec, src, dst) -> ShardingSpec:
    """``spec`` (a layout of impl ``src``) for impl ``dst``, which has the same logical
    shape but maybe other vmap levels: logical dims keep their axes, a batch dim keeps the
    axes of the same level in ``src``."""
    if dst.levels == src.levels:
        return spec
    nsrc = len(src.levels)
    by_level = dict(zip(src.levels, spec.dims[:nsrc], strict=True))
    dims = tuple(by_level.get(lv, ()) for lv in dst.levels) + spec.dims[nsrc:]
    used = {a for d in dims for a in d}
    partial = tuple((a, k) for a, k in spec.partial if a not in used)
    return ShardingSpec(spec.mesh, dims, partial)


def _to_layout(t: Tensor, spec: ShardingSpec | None, like) -> Tensor:
    """Tangent/cotangent ``t`` laid out as ``spec`` (given for impl ``like``); None: whole."""
    if t is None:
        return None
    if spec is None:
        return unshard(t) if t._impl.sharding is not None else t
    return spmd.reshard_to(t, _spec_like(spec, like, t._impl))


def _tangent_spec(spec: ShardingSpec | None, t: Tensor | None) -> ShardingSpec | None:
    """The layout for tangent ``t`` of a value laid out as ``spec``: its dims, and on each
    of its partial axes the tangent's own kind of terms, or none (the tangent of a partial
    max is a partial *sum*: one term per device, zero where the max is not; a sum cannot
    be laid out as max terms)."""
    if spec is None or not spec.partial or t is None:
        return spec
    own = dict(t._impl.sharding.partial) if t._impl.sharding is not None else {}
    return spec.with_partial(tuple((a, own[a]) for a, _ in spec.partial if a in own))


def layout_like(t: Tensor, like) -> Tensor:
    """``t`` laid out like impl ``like`` without its partial axes (whole if ``like`` is)."""
    spec = None if like.sharding is None else _no_partial(like.sharding)
    return _to_layout(t, spec, like)


def _spanning(phys: dict, mesh: DeviceMesh) -> dict:
    """A mesh op's backend kwargs, plus the mesh when its devices span processes (the MPI
    lowerings need the whole mesh to find which processes exchange blocks)."""
    return {**phys, "mesh": mesh} if mesh.spans_processes else phys


def _no_partial(spec: ShardingSpec) -> ShardingSpec:
    return spec.with_partial(()) if spec.partial else spec


class MeshPlan(NamedTuple):
    """Where a collective puts its output: the global output shape, its
    ``ShardingSpec``, and the backend kwargs of the data movement."""

    shape: tuple
    spec: ShardingSpec
    phys: dict


# A plan depends only on the op, the input's global shape and sharding, and the call's
# kwargs: the same collective called again (every training step, every eager call in a
# loop) reuses it instead of validating and building the output spec again.
_PLANS: dict = {}
_PLANS_MAX = 4096


def _plan_key(op, impl, kwargs) -> tuple | None:
    """The cache key of ``op.plan(impl, kwargs)``, or None when it cannot be cached (under
    vmap levels, no sharding, or unhashable kwargs)."""
    spec = impl.sharding
    if impl.levels or spec is None:
        return None
    key = (
        op.name,
        tuple(impl.shape),
        spec,
        spec.open,
        spec.priority,
        spec.fixed_replicated,
        tuple(sorted(kwargs.items())),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _runs_now(im) -> bool:
    """Whether a collective on ``im`` (its mesh spans processes) may run at once instead of
    as a lazy op: ``im`` is a realized host buffer with no vmap levels, no autodiff history
    or tangents, and no transform, trace or ``shard_map`` body is running (those keep the
    graph); ``nb.debug_nans`` checks programs, so it keeps the lazy path too. The result is
    the lazy op's, computed by the same MPI collective; only the graph is skipped."""
    return (
        type(im.buffer) is np.ndarray
        and not im.levels
        and not im.traced
        and not im.tangents
        and STATE.recording is None
        and len(live_grad_levels) == 1
        and not spmd_axes
        and not STATE.active_vmap
        and not CONFIG.debug_values
    )


class _Eager(NamedTuple):
    """An eager collective run at once (``_runs_now``): the op, its output's global shape
    and spec, the physical kwargs ``mpi.now_function`` takes, and the call made one function of
    the buffer (``mpi.now_function``) for the memo's repeats."""

    op: Operation
    shape: tuple
    spec: ShardingSpec
    phys: dict
    now: Any


def _now_result(plan: _Eager, im, out) -> Tensor:
    """The tensor of an eager collective's result ``out`` (realized, no graph node; its
    size was checked before the first such call, ``bind_collective``: the memo's repeats
    have the same shape and dtype)."""
    return Tensor._from_buffer(plan.shape, im.dtype, im.device, out, plan.spec)


# The last bind that ran at once (set by ``bind_collective``; read by ``_bind_one``).
_RAN_NOW: list = [None]

# A public collective called again on a value of the same layout (every step of an eager
# loop) makes the same single bind: the memo maps the call (its name and arguments, the
# operand's global shape, dtype and spec) to that bind's ``_Eager``, so a repeat skips the
# argument checks, the plan lookup and the op's bind and goes straight to MPI. Only calls
# that made exactly one bind that ran at once, on the operand itself, are kept; the checks
# depend on nothing but the key, so a hit would have passed them.
_EAGER: dict = {}
_EAGER_MAX = 1024


def _eager_key(name: str, x, args: tuple):
    """The memo key of public collective ``name`` on ``x`` with ``args``, or None when the
    call could not run at once (not a realized sharded tensor, or a transform running). A
    key with unhashable arguments is never found nor kept (hashed once, by the lookup)."""
    if type(x) is not Tensor:
        return None
    im = x._impl
    spec = im.sharding
    if spec is None or not _runs_now(im):
        return None
    return (name, args, im.shape, im.dtype, spec)  # (a spec's equality covers its constraints)


def _eager_call(key, x):
    """The memoized call ``key`` run at once on ``x``, or None (no key, not memoized, or
    MPI has no direct form for it now: the caller takes the general path)."""
    try:
        plan = None if key is None else _EAGER.get(key)
    except TypeError:  # unhashable arguments: the general path
        return None
    if plan is None:
        return None
    im = x._impl
    out = plan.now(im.buffer)
    return None if out is None else _now_result(plan, im, out)


def _bind_one(key, op, bind) -> Tensor:
    """``bind()``, the public call's only bind (of ``op``, on the operand ``key`` was made
    from by ``_eager_key``); memoized under ``key`` when it ran at once."""
    _RAN_NOW[0] = None
    y = bind()
    ran, _RAN_NOW[0] = _RAN_NOW[0], None
    if key is not None and ran is not None and ran.op is op:
        if len(_EAGER) >= _EAGER_MAX:
            _EAGER.clear()
        with contextlib.suppress(TypeError):  # unhashable arguments are not kept
            _EAGER[key] = ran
    return y


class _MeshOp(Operation):
    """A collective: places its output itself (``plan``) instead of factor propagation."""

    collective = True
    comm = ""  # the cost model's name for what it sends ("" for none)

    def bind_collective(self, args, kwargs):
        im = args[0]._impl
        if im.sharding is None and self is not _shard:
            raise ShardingError(
                f"{self.name}: the tensor of shape {_shape(im)} is not sharded (no mesh)"
            )
        key = _plan_key(self, im, kwargs)
        got = _PLANS.get(key) if key is not None else None
        if got is None:
            plan = self.plan(im, kwargs)
            got = (plan.shape, plan.spec, _spanning(plan.phys, plan.spec.mesh))
            if key is not None:
                if len(_PLANS) >= _PLANS_MAX:
                    _PLANS.clear()
                _PLANS[key] = got
        shape, spec, phys = got
        if "mesh" in phys and _runs_now(im):
            if shape != im.shape:
                _check_alloc(self, shape, im.dtype, 0)
            now = mpi.now_function(self.backend_name, im.buffer, phys)
            out = None if now is None else now(im.buffer)
            if out is not None:  # the realized result, as the lazy op would compute it
                _RAN_NOW[0] = _Eager(self, shape, spec, phys, now)
                return _now_result(_RAN_NOW[0], im, out)
        call = Call(self, args, kwargs)
        call.placed(phys, [shape], [im.dtype], [im.device], [spec], im.levels)
        return emit(call)

    def plan(self, impl, kwargs) -> MeshPlan:
        """Where the output goes (a ``MeshPlan``); validates the call."""
        raise NotImplementedError

    def comm_bytes(self, impl, kwargs) -> float:
        """Bytes each device sends to run this op on ``impl`` (the ring cost model)."""
        spec = impl.sharding
        if not self.comm or spec is None:
            return 0.0
        n = prod(spec.mesh.axis_size(a) for a in kwargs.get("axes", ()))
        local = prod(spec.local_shape(impl.shape)) * impl.dtype.itemsize
        return collective_bytes(self.comm, local, n)


class _LayoutOp(_MeshOp):
    """An identity on the global value that changes only its layout."""

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        out = outputs[0]._impl
        return [_to_layout(tangents[0], _tangent_spec(out.sharding, tangents[0]), out)]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x = primals[0]._impl
        spec = None if x.sharding is None else _no_partial(x.sharding)
        return [_to_layout(cotangents[0], spec, x)]


def _neg(impl, dim: int) -> int:
    return dim - len(impl.shape)


def _phys(impl, neg: int) -> int:
    return len(impl.shape) + neg


# ----------------------------------------------------------------------------- layout ops
class ShardOp(_LayoutOp):
    """A whole value to blocks: every device keeps its block (no communication)."""

    name = "shard"
    data_movement = True

    def plan(self, impl, kwargs):
        spec = kwargs["spec"]
        nb = len(impl.shape) - spec.ndim
        spec = spec.with_prefix(((),) * nb)
        spec.check_shape(impl.shape, "shard")
        mesh = spec.mesh
        phys = {"mesh_shape": mesh.shape, "dims": tuple(_idx(mesh, d) for d in spec.dims)}
        if mesh.spans_processes:  # each process cuts only the blocks of its devices
            phys["box"] = mesh.local_box
        return MeshPlan(impl.shape, spec, phys)

    backend_name = "mesh_shard"


class ConstrainOp(_LayoutOp):
    """The same blocks under a spec that differs only in open/closed dims, priorities or
    explicitly replicated axes (no data moves)."""

    name = "shard_constrain"
    backend_name = "identity"
    data_movement = True

    def plan(self, impl, kwargs):
        spec = kwargs["spec"]
        if not spec.same_layout(impl.sharding):  # pragma: no cover - shard() checks
            raise ShardingError(f"shard: {spec} is not the layout of {impl.sharding}")
        return MeshPlan(impl.shape, spec, {})


class UnshardOp(_LayoutOp):
    """Blocks to a whole value on every device (gathers; completes partial terms)."""

    name = "unshard"
    backend_name = "mesh_unshard"
    comm = "all_gather"

    def bind_collective(self, args, kwargs):
        im = args[0]._impl
        mesh = im.sharding.mesh
        phys = {
            "ndev": mesh.ndim,
            "dims": tuple(_idx(mesh, d) for d in im.sharding.dims),
            "partial": tuple((mesh.axis(a), k) for a, k in im.sharding.partial),
        }
        phys = _spanning(phys, mesh)
        return emit(Call(self, args, kwargs).placed(phys, [im.shape], [im.dtype], [im.device]))

    def comm_bytes(self, impl, kwargs) -> float:
        spec = impl.sharding
        local = prod(spec.local_shape(impl.shape)) * impl.dtype.itemsize
        n_red = prod(spec.mesh.axis_size(a) for a in spec.partial_axes)
        n_gat = prod(spec.mesh.axis_size(a) for a in spec.sharded_axes)
        return collective_bytes("all_reduce", local, n_red) + collective_bytes(
            "all_gather", local, n_gat
        )


class AllGatherOp(_LayoutOp):
    """Dim ``dim`` stops being split over ``axes`` (its minor axes)."""

    name = "all_gather"
    backend_name = "mesh_gather"
    comm = "all_gather"
    data_movement = True

    def plan(self, impl, kwargs):
        spec, axes = impl.sharding, kwargs["axes"]
        d = _phys(impl, kwargs["dim"])
        have = spec.dims[d]
        if not axes or have[len(have) - len(axes) :] != axes:
            raise ShardingError(
                f"all_gather: dim {d - len(impl.levels)} of shape {_shape(impl)} is split over "
                f"{have}, not over {axes} (spec {spec})"
            )
        dims = list(spec.dims)
        dims[d] = have[: len(have) - len(axes)]
        phys = {"ndev": spec.mesh.ndim, "axes": _idx(spec.mesh, axes), "dim": d}
        return MeshPlan(impl.shape, spec.with_dims(dims), phys)


class ShardSliceOp(_LayoutOp):
    """Dim ``dim`` (replicated over ``axes``) is split over them too: each device keeps its
    block (no communication)."""

    name = "shard_slice"
    backend_name = "mesh_slice"
    data_movement = True

    def plan(self, impl, kwargs):
        spec, axes = impl.sharding, kwargs["axes"]
        d = _phys(impl, kwargs["dim"])
        dims = list(spec.dims)
        dims[d] = dims[d] + axes
        out = ShardingSpec(spec.mesh, dims, spec.partial, op="shard_slice")
        out.check_shape(impl.shape, "shard_slice")
        phys = {"ndev": spec.mesh.ndim, "axes": _idx(spec.mesh, axes), "dim": d}
        return MeshPlan(impl.shape, out, phys)


class AllToAllOp(_LayoutOp):
    """Mesh ``axes`` move from the minor end of dim ``concat`` to the minor end of dim
    ``split``."""

    name = "all_to_all"
    backend_name = "mesh_all_to_all"
    comm = "all_to_all"
    data_movement = True

    def plan(self, impl, kwargs):
        spec, axes = impl.sharding, kwargs["axes"]
        c, s = _phys(impl, kwargs["concat"]), _phys(impl, kwargs["split"])
        have = spec.dims[c]
        dim = c - len(impl.levels)
        if not have:
            raise ShardingError(
                f"all_to_all: concat dim {dim} of shape {_shape(impl)} is not split over any "
                f"mesh axis, so there is nothing to move (spec {spec})"
            )
        if c == s or not axes or have[len(have) - len(axes) :] != axes:
            why = "is the split dim too" if c == s else f"is split over {have}, not over {axes}"
            raise ShardingError(
                f"all_to_all: concat dim {dim} of shape {_shape(impl)} {why} (spec {spec})"
            )
        dims = list(spec.dims)
        dims[c] = have[: len(have) - len(axes)]
        dims[s] = dims[s] + axes
        out = ShardingSpec(spec.mesh, dims, spec.partial, op="all_to_all")
        out.check_shape(impl.shape, "all_to_all")
        phys = {
            "ndev": spec.mesh.ndim,
            "axes": _idx(spec.mesh, axes),
            "split_dim": s,
            "concat_dim": c,
        }
        return MeshPlan(impl.shape, out, phys)


class ReduceScatterOp(_LayoutOp):
    """Partial terms over ``axes`` are reduced and dim ``dim`` is split over them."""

    name = "reduce_scatter"
    backend_name = "mesh_reduce_scatter"
    comm = "reduce_scatter"

    def plan(self, impl, kwargs):
        spec, axes = impl.sharding, kwargs["axes"]
        d = _phys(impl, kwargs["dim"])
        kinds = spec.partial_kinds
        missing = [a for a in axes if a not in kinds]
        if missing or not axes:
            raise ShardingError(
                f"reduce_scatter: the value of shape {_shape(impl)} is not partial over "
                f"{tuple(missing) or axes} (spec {spec}); reduce_scatter completes partial sums"
            )
        kind = {kinds[a] for a in axes}
        if len(kind) > 1:
            raise ShardingError(f"reduce_scatter: axes {axes} hold different reductions {kind}")
        dims = list(spec.dims)
        dims[d] = dims[d] + axes
        out = ShardingSpec(
            spec.mesh,
            dims,
            tuple((a, k) for a, k in spec.partial if a not in axes),
            op="reduce_scatter",
        )
        out.check_shape(impl.shape, "reduce_scatter")
        phys = {
            "ndev": spec.mesh.ndim,
            "axes": _idx(spec.mesh, axes),
            "dim": d,
            "kind": kind.pop(),
        }
        return MeshPlan(impl.shape, out, phys)


# ----------------------------------------------------------------------------- all_reduce
class AllReduceOp(_MeshOp):
    """Every device gets the reduction (``kind``) over ``axes`` of the devices' values.

    Over a partial axis of the same kind that completes the value (a layout change); over an
    axis that splits a dim, it reduces the blocks: that dim shrinks to one block; over axes
    the value is replicated along, it reduces the equal copies (``sum``: ``n * x``, as JAX's
    ``psum`` of a replicated value). One bind reduces either only such replicated axes or
    none of them (``all_reduce`` splits a call), so each rule sees one case."""

    name = "all_reduce"
    backend_name = "mesh_reduce"
    comm = "all_reduce"

    def plan(self, impl, kwargs):
        spec, axes, kind = impl.sharding, kwargs["axes"], kwargs["kind"]
        kinds = spec.partial_kinds
        dims = [list(d) for d in spec.dims]
        shape = list(impl.shape)
        if not axes:
            raise ShardingError("all_reduce: no mesh axes given")
        for a in axes:
            if a in kinds:
                if kinds[a] != kind:  # the terms' reduction is not what was asked
                    raise ShardingError(
                        f"all_reduce: the value of shape {_shape(impl)} is partial over mesh "
                        f"axis {a!r} with {kinds[a]!r} terms (spec {spec}); all_reduce("
                        f"{kinds[a]!r}) completes it, a {kind!r} of the terms is not its value"
                    )
                continue
            d = spec.dim_of(a)
            if d is None:  # replicated along ``a``: the copies are the terms
                if kind == "prod" and spec.partial:
                    raise ShardingError(
                        f"all_reduce: a 'prod' over the copies along mesh axis {a!r} of a "
                        f"value that is partial (spec {spec}) is no product of its values; "
                        "complete the value first"
                    )
                continue
            dims[d].remove(a)
            shape[d] //= spec.mesh.axis_size(a)
        partial = tuple((a, k) for a, k in spec.partial if a not in axes)
        out = ShardingSpec(spec.mesh, dims, partial)
        phys = {"axes": _idx(spec.mesh, axes), "kind": kind}
        return MeshPlan(tuple(shape), out, phys)

    def completes(self, impl, kwargs) -> bool:
        """True when the call only completes partial terms (a layout change)."""
        kinds = impl.sharding.partial_kinds
        return all(kinds.get(a) == kwargs["kind"] for a in kwargs["axes"])

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        x, t = primals[0], tangents[0]
        out = outputs[0]._impl
        if _copies(x._impl.sharding, kwargs["axes"]):
            return [_copies_derivative(x, t, outputs[0], kwargs)]
        if self.completes(x._impl, kwargs):
            return [_to_layout(t, _tangent_spec(out.sharding, t), out)]
        t = _to_layout(t, _no_partial(x._impl.sharding), x._impl)
        if kwargs["kind"] == "sum":
            return [_all_reduce.bind([t], kwargs)]
        mask = _argext_mask(x, outputs[0], kwargs)
        return [_all_reduce.bind([t * mask], {"axes": kwargs["axes"], "kind": "sum"})]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x, ct = primals[0], cotangents[0]
        xi = x._impl
        if _copies(xi.sharding, kwargs["axes"]):
            out = outputs[0]._impl
            ct = _to_layout(ct, out.sharding, out)
            return [_copies_derivative(x, ct, outputs[0], kwargs)]
        if self.completes(xi, kwargs):
            return [_to_layout(ct, _no_partial(xi.sharding), xi)]
        if kwargs["kind"] != "sum" and any(a in xi.sharding.partial_kinds for a in kwargs["axes"]):
            raise NotImplementedError(
                f"all_reduce: no gradient for a {kwargs['kind']!r} that both completes "
                "partial terms and reduces blocks; complete the terms first"
            )
        out = outputs[0]._impl
        ct = _relabel_back(_to_layout(ct, out.sharding, out), x, kwargs["axes"])
        kind = kwargs["kind"]
        if kind == "sum":
            return [ct]
        if kind == "prod":
            return [ct * _relabel_back(outputs[0], x, kwargs["axes"]) / x]
        return [ct * _argext_mask(x, outputs[0], kwargs)]


def _copies(spec: ShardingSpec, axes) -> tuple:
    """The ``axes`` along which ``spec``'s value is replicated (neither split nor partial).
    Kept per (spec, axes): every eager call asks it again, and a spec hashes cheaply."""
    key = (spec, tuple(axes))
    got = _COPIES.get(key)
    if got is None:
        used = set(spec.sharded_axes) | set(spec.partial_axes)
        got = tuple(a for a in key[1] if a not in used)
        if len(_COPIES) >= 4096:
            _COPIES.clear()
        _COPIES[key] = got
    return got


_COPIES: dict = {}


def _copies_derivative(x, t, out, kwargs):
    """The tangent (or cotangent: the map is self-adjoint) of reducing the ``n`` equal
    copies of ``x`` along replicated axes: ``sum`` is ``n * x``, ``max``/``min`` ``x``,
    ``prod`` ``x ** n`` (derivative ``n * out / x``, as a sum of ``out / x`` over the
    copies)."""
    kind = kwargs["kind"]
    if kind in ("max", "min"):
        return t
    if kind == "prod":
        t = t * out / x
    return _all_reduce.bind([t], {"axes": kwargs["axes"], "kind": "sum"})


def _argext_mask(x, out, kwargs):
    """1 where a device's block equals the reduced max/min (ties share), as ``x``'s dtype."""
    back = _relabel_back(out, x, kwargs["axes"])
    return (x == back).cast(x.dtype)


class RelabelOp(_MeshOp):
    """The reverse of reducing blocks: each device keeps its (replicated) block, read as its
    own block of a dim ``n`` times larger. No data moves (the adjoint of ``all_reduce``)."""

    name = "mesh_relabel"
    backend_name = "identity"
    data_movement = True

    def plan(self, impl, kwargs):
        spec = impl.sharding
        dims = list(spec.dims)
        shape = list(impl.shape)
        for neg, full in kwargs["restore"]:
            d = _phys(impl, neg)
            added = [a for a in full if a not in dims[d]]
            dims[d] = full
            shape[d] *= prod(spec.mesh.axis_size(a) for a in added)
        return MeshPlan(tuple(shape), ShardingSpec(spec.mesh, dims, spec.partial), {})

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        out = outputs[0]._impl
        have = primals[0]._impl.sharding.sharded_axes
        axes = tuple(a for _, full in kwargs["restore"] for a in full if a not in have)
        ct = _to_layout(cotangents[0], out.sharding, out)
        return [_all_reduce.bind([ct], {"axes": axes, "kind": "sum"})]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        x = primals[0]._impl
        t = _to_layout(tangents[0], _tangent_spec(x.sharding, tangents[0]), x)
        return [self.bind([t], kwargs)]


def _relabel_back(y, x, axes):
    """``y`` (the result of reducing ``x``'s blocks over ``axes``) read as blocks of ``x``'s
    shape again (every device's block unchanged)."""
    xi = x._impl
    restore = tuple(
        (_neg(xi, d), xi.sharding.dims[d])
        for d in range(len(xi.shape))
        if set(xi.sharding.dims[d]) & set(axes)
    )
    return _relabel.bind([y], {"restore": restore})


# ----------------------------------------------------------------------------- value-changing
class PPermuteOp(_MeshOp):
    """Device ``src`` sends its block to device ``dst`` for each pair (flat mesh indices);
    a device that receives nothing gets zeros."""

    name = "ppermute"
    backend_name = "mesh_permute"
    comm = "ppermute"

    def plan(self, impl, kwargs):
        spec = impl.sharding
        mesh = spec.mesh
        pairs = kwargs["pairs"]
        _check_perm(mesh, pairs, spec, _shape(impl))
        return MeshPlan(impl.shape, spec, {"ndev": mesh.ndim, "pairs": pairs})

    def comm_bytes(self, impl, kwargs) -> float:
        spec = impl.sharding
        local = prod(spec.local_shape(impl.shape)) * impl.dtype.itemsize
        moved = sum(1 for s, d in kwargs["pairs"] if s != d)
        return collective_bytes("ppermute", local, 2) if moved else 0.0

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        x = primals[0]._impl
        return [
            self.bind([_to_layout(tangents[0], _tangent_spec(x.sharding, tangents[0]), x)], kwargs)
        ]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x = primals[0]._impl
        ct = _to_layout(cotangents[0], _no_partial(x.sharding), x)
        inv = tuple((d, s) for s, d in kwargs["pairs"])
        return [self.bind([ct], {"pairs": inv})]


def _check_pairs(pairs, n, what):
    """``ppermute``'s pairs: each entry in ``range(n)`` (``what`` says what an entry is,
    for the error), no device twice as a source or as a destination. The one check of both
    the per-device and the global form."""
    srcs = [s for s, _ in pairs]
    dsts = [d for _, d in pairs]
    for v in srcs + dsts:
        if not isinstance(v, int | np.integer) or not 0 <= v < n:
            raise ShardingError(f"ppermute: {v!r} is not {what} (perm {list(pairs)})")
    for label, vals in (("source", srcs), ("destination", dsts)):
        dup = sorted({v for v in vals if vals.count(v) > 1})
        if dup:
            raise ShardingError(f"ppermute: device {dup[0]} is a {label} twice in {list(pairs)}")


def _check_roots(axes, roots, sizes) -> None:
    """``broadcast``'s root positions, one per mesh axis, each inside its axis. The one
    check of both the per-device and the global form."""
    for a, r, n in zip(axes, roots, sizes, strict=True):
        if not 0 <= r < n:
            raise ShardingError(
                f"broadcast: root {r} is out of range for mesh axis {a!r} of size {n}"
            )


def _check_perm(mesh, pairs, spec, shape):
    n = mesh.size
    _check_pairs(pairs, n, f"a flat index of mesh {mesh.name!r} with {n} devices")
    # devices holding the same block (they differ only along unsplit axes) must receive the
    # same block, or the result is no longer one global value
    split = [mesh.axis(a) for a in spec.sharded_axes]

    def block(dev):
        c = mesh.coords(dev)
        return tuple(c[k] for k in split)

    src_of = {d: s for s, d in pairs}
    seen = {}
    for dev in range(n):
        s = src_of.get(dev)
        got = None if s is None else block(s)
        b = block(dev)
        if b in seen and seen[b][1] != got:
            raise ShardingError(
                f"ppermute: devices {seen[b][0]} and {dev} hold the same block of the value of "
                f"shape {shape} (spec {spec}) but would receive different blocks under "
                f"{list(pairs)}; permute along the axes the value is split over"
            )
        seen.setdefault(b, (dev, got))


class AxisIndexOp(Operation):
    """Each device's coordinate along a mesh axis: an int32 vector of length
    ``mesh.shape[axis]`` split over that axis (device ``i`` holds ``[i]``)."""

    name = "axis_index"
    backend_name = "mesh_iota"
    arity = 0
    collective = True
    differentiable = False

    def bind_collective(self, args, kwargs):
        mesh, axis = kwargs["mesh"], kwargs["axis"]
        k = mesh.axis(axis, "axis_index")
        spec = ShardingSpec(mesh, ((axis,),))
        dev = _default_device()
        phys = {"mesh_shape": mesh.shape, "axis": k, "dtype": DType.int32, "device": dev}
        if mesh.spans_processes:  # the coordinates of this process's devices (an MPI lowering)
            phys = _spanning({**phys, "box": mesh.local_box}, mesh)
        call = Call(self, [], kwargs)
        return emit(call.placed(phys, [(mesh.shape[k],)], [DType.int32], [dev], [spec]))


class BroadcastOp(_MeshOp):
    """Every device along ``axes`` gets the block of the device at coordinates ``root``."""

    name = "broadcast"
    backend_name = "mesh_select"
    comm = "broadcast"

    def plan(self, impl, kwargs):
        spec, axes, root = impl.sharding, kwargs["axes"], kwargs["root"]
        dims = [list(d) for d in spec.dims]
        shape = list(impl.shape)
        _check_roots(axes, root, [spec.mesh.axis_size(a) for a in axes])
        for a in axes:
            d = spec.dim_of(a)
            if d is not None:
                dims[d].remove(a)
                shape[d] //= spec.mesh.axis_size(a)
        partial = tuple((a, k) for a, k in spec.partial if a not in axes)
        phys = {"axes": _idx(spec.mesh, axes), "index": tuple(root)}
        return MeshPlan(tuple(shape), ShardingSpec(spec.mesh, dims, partial), phys)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x = primals[0]
        xi = x._impl
        _no_partial_derivative(xi, kwargs)
        out = outputs[0]._impl
        ct = _relabel_back(_to_layout(cotangents[0], out.sharding, out), x, kwargs["axes"])
        return [ct * _root_mask(xi, kwargs, x.dtype)]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        x = primals[0]._impl
        _no_partial_derivative(x, kwargs)
        return [self.bind([_to_layout(tangents[0], _no_partial(x.sharding), x)], kwargs)]


def _no_partial_derivative(xi, kwargs) -> None:
    """Broadcasting a value partial over an axis keeps the root device's term, which is no
    function of the value itself: its derivative is refused rather than taken as the
    whole sum's (a wrong gradient)."""
    partial = [a for a in kwargs["axes"] if a in xi.sharding.partial_axes]
    if partial:
        raise ShardingError(
            f"broadcast: no derivative for a value partial over {tuple(partial)} (it keeps "
            "the root device's term, which is no function of the value); all_reduce it "
            "first, or broadcast inside shard_map"
        )


def _root_mask(xi, kwargs, dtype):
    """1 on the blocks the root devices hold, 0 elsewhere, laid out like ``xi`` (the mask
    does not depend on vmap batch dims: it is built unbatched)."""
    nb = len(xi.levels)
    spec = _no_partial(xi.sharding).drop_prefix(nb)
    mesh = spec.mesh
    shape = tuple(xi.logical_shape)
    mask = np.zeros(shape, dtype=dtype.numpy)
    root = dict(zip(kwargs["axes"], kwargs["root"], strict=True))
    for d in range(mesh.size):
        if all(mesh.coords(d)[mesh.axis(a)] == r for a, r in root.items()):
            mask[spec.block_index(d, shape)] = 1
    return spmd.reshard_to(as_tensor(mask), spec)


# ----------------------------------------------------------------------------- shard_map's boundary
class ToLocalOp(Operation):
    """A sharded value as per-device values (``shard_map``'s entry): each mesh axis that
    splits it becomes a vmap level (``kwargs["levels"]``: every mesh axis's level, in mesh
    order; ``kwargs["varying"]``: the axes that split the value). No data moves."""

    name = "mesh_to_local"
    backend_name = "mesh_local"
    collective = True
    data_movement = True

    def bind_collective(self, args, kwargs):
        im = args[0]._impl
        spec = im.sharding
        mesh = spec.mesh
        varying = kwargs["varying"]
        k = len(im.levels)
        if spec.partial or any(spec.dims[:k]):  # pragma: no cover - shard_map reshards first
            raise ShardingError(f"shard_map: cannot enter with layout {spec}")
        new = tuple(lv for a, lv in kwargs["levels"] if a in varying)
        local = spec.local_shape(im.shape)[k:]
        # one batch entry per device this process holds along each axis (all in one process)
        held = mesh.local_mesh_shape
        drop = tuple(i for i, a in enumerate(mesh.axis_names) if a not in varying)
        v = len(varying)
        # the kept mesh dims come first in the buffer, then the batch dims; the result's
        # batch dims are in level order (an outer level may be newer than the mesh's:
        # jacrev's vmap of a pullback)
        src = [(lv, v + i, im.shape[i]) for i, lv in enumerate(im.levels)]
        src += [(lv, j, held[mesh.axis(a)]) for j, (a, lv) in enumerate(zip(varying, new))]
        src.sort()
        levels = tuple(lv for lv, _, _ in src)
        shape = tuple(n for _, _, n in src) + tuple(local)
        perm = tuple(d for _, d, _ in src) + tuple(range(v + k, v + k + len(local)))
        phys = {"drop": drop, "perm": perm}
        call = Call(self, args, kwargs)
        return emit(call.placed(phys, [shape], [im.dtype], [im.device], None, levels))

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [self.bind([layout_like(tangents[0], primals[0]._impl)], kwargs)]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x = primals[0]._impl
        ct = cotangents[0]
        # a value replicated along an axis was read by every device there: sum their parts
        extra = [lv for a, lv in kwargs["levels"] if a not in kwargs["varying"]]
        extra = [lv for lv in extra if lv in ct._impl.levels]
        if extra:
            ct = per_device.all_reduce(ct, "sum", extra)
        dims = x.sharding.dims[len(x.levels) :]
        return [from_local(ct, x.sharding.mesh, dims, kwargs["levels"])]


class FromLocalOp(Operation):
    """Per-device values as one sharded value (``shard_map``'s exit): dim ``i`` is split over
    ``kwargs["dims"][i]``; mesh axes the value does not vary along hold copies."""

    name = "mesh_from_local"
    backend_name = "mesh_global"
    collective = True
    data_movement = True

    def bind_collective(self, args, kwargs):
        im = args[0]._impl
        mesh, dims = kwargs["mesh"], kwargs["dims"]
        level_of = dict(kwargs["levels"])
        mesh_levels = set(level_of.values())
        outer = tuple(lv for lv in im.levels if lv not in mesh_levels)
        present = [a for a in mesh.axis_names if level_of[a] in im.levels]
        # batch dims in level order; an outer level may be newer than the mesh's (jacrev's
        # vmap of the pullback), so the mesh's need not come last: the perm sorts them out
        outer_pos = tuple(im.levels.index(lv) for lv in outer)
        mesh_pos = tuple(im.levels.index(level_of[a]) for a in present)
        k, p = len(outer), len(present)
        local = im.shape[k + p :]
        outer_shape = tuple(im.shape[i] for i in outer_pos)
        spec = ShardingSpec(mesh, ((),) * k + tuple(dims), op="shard_map")
        shape = outer_shape + tuple(n * spec.splits(k + i) for i, n in enumerate(local))
        r = len(local)
        perm = mesh_pos + outer_pos + tuple(range(k + p, k + p + r))
        m = mesh.ndim
        phys = {
            "perm": perm,
            "shape": mesh.local_mesh_shape + outer_shape + tuple(local),
            "dims": tuple(mesh.axis(a) for a in present) + tuple(range(m, m + k + r)),
        }
        call = Call(self, args, kwargs)
        return emit(call.placed(phys, [shape], [im.dtype], [im.device], [spec], outer))

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [self.bind([tangents[0]], kwargs)]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        y = primals[0]._impl
        out = outputs[0]._impl
        ct = layout_like(cotangents[0], out)
        varying = tuple(a for a in out.sharding.mesh.axis_names if a in out.sharding.sharded_axes)
        ct = _to_local.bind([ct], {"levels": kwargs["levels"], "varying": varying})
        # a value copied along an axis its out spec splits: every copy's part adds up
        extra = [lv for a, lv in kwargs["levels"] if a in varying and lv not in y.levels]
        if extra:
            ct = per_device.all_reduce(ct, "sum", extra)
        return [ct]


def to_local(x: Tensor, mesh: DeviceMesh, spec: ShardingSpec, levels) -> Tensor:
    """``x`` laid out as ``spec`` (its logical dims) and seen per device (shard_map's
    entry); ``levels``: ``((axis, level), ...)`` for every mesh axis, in mesh order.

    Under ``vmap`` every device sees every example: batch dims split over the mesh (a
    mapped input sharded along its batch dim, ``vmap(..., spmd_axis_name=)``) are gathered
    first, so the body's mesh axes stay free for its own ``in_specs``."""
    nb = len(x._impl.levels)
    cur = x._impl.sharding
    if nb and cur is not None and cur.mesh == mesh and any(cur.dims[:nb]):
        x = spmd.reshard_to(x, ShardingSpec(mesh, ((),) * nb + cur.dims[nb:]), op="shard_map")
    x = shard(x, mesh, spec)
    varying = tuple(a for a in mesh.axis_names if a in spec.sharded_axes)
    return _to_local.bind([x], {"levels": tuple(levels), "varying": varying})


def from_local(y: Tensor, mesh: DeviceMesh, dims, levels) -> Tensor:
    """Per-device ``y`` as one value whose logical dim ``i`` is split over ``dims[i]``."""
    return _from_local.bind([y], {"mesh": mesh, "dims": tuple(dims), "levels": tuple(levels)})


# ----------------------------------------------------------------------------- singletons
_shard = ShardOp()
_unshard = UnshardOp()
_all_gather = AllGatherOp()
_shard_slice = ShardSliceOp()
_all_to_all = AllToAllOp()
_reduce_scatter = ReduceScatterOp()
_all_reduce = AllReduceOp()
_relabel = RelabelOp()
_constrain = ConstrainOp()
_ppermute = PPermuteOp()
_axis_index = AxisIndexOp()
_broadcast = BroadcastOp()
_to_local = ToLocalOp()
_from_local = FromLocalOp()


def _shape(impl) -> tuple:
    return tuple(impl.logical_shape)


def _default_device():
    return get_default_device()


# ----------------------------------------------------------------------------- planner hooks
def shard_op(x: Tensor, target: ShardingSpec) -> Tensor:
    """A whole ``x`` laid out as ``target`` (physical dims; no partial axes)."""
    if target.partial:
        raise ShardingError(f"shard: a whole value cannot become partial ({target})")
    return _shard.bind([x], {"spec": target})


# partial impl -> (where its completion sits in the recording, weakref to the completed
# impl): a partial value read by several consumers is completed once, not once per consumer.
# The recording is named by a position in it, not held: a value held strongly here would
# keep every node of a finished trace (and the key itself) alive, pending forever.
_COMPLETED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def complete_partial(x: Tensor) -> Tensor:
    """``x`` with every partial axis reduced (grouped by kind), once per partial value."""
    impl = x._impl
    rec = STATE.recording
    hit = _COMPLETED.get(impl)
    if hit is not None:
        pos, ref = hit
        done = ref()
        # (not a completion made before ``x`` got its tangents, as inside its own JVP rule:
        # the tangents would be lost)
        if (
            done is not None
            and _recorded_here(rec, pos, done)
            and (not impl.tangents or done.tangents)
        ):
            return Tensor._wrap(done)
    spec = impl.sharding
    by_kind: dict = {}
    for a, k in spec.partial:
        by_kind.setdefault(k, []).append(a)
    for k, axes in by_kind.items():
        x = _all_reduce.bind([x], {"axes": tuple(axes), "kind": k})
    _COMPLETED[impl] = (_position(rec, x._impl.node), weakref.ref(x._impl))
    return x


def _position(rec, node):
    """Where ``node`` sits in recording ``rec`` (None outside a trace, or not recorded)."""
    if rec is None or node is None:
        return None
    for i in range(len(rec) - 1, max(-1, len(rec) - 9), -1):  # just appended (JVP after)
        if rec[i] is node:
            return i
    return None


def _recorded_here(rec, pos, done) -> bool:
    """Whether a completion made at ``pos`` belongs to the current recording ``rec``."""
    if rec is None:
        return pos is None
    return pos is not None and pos < len(rec) and rec[pos] is done.node


def all_reduce_phys(x, kind, axes):
    """``x``'s partial terms over mesh ``axes`` reduced (``kind``: sum, max, min, prod)."""
    return _all_reduce.bind([x], {"axes": tuple(axes), "kind": kind})


def reduce_scatter_phys(x, dim, axes):
    """``x``'s partial terms over ``axes`` reduced, physical dim ``dim`` then split over
    them."""
    return _reduce_scatter.bind([x], {"dim": _neg(x._impl, dim), "axes": tuple(axes)})


def all_gather_phys(x, dim, axes):
    """Physical dim ``dim`` of ``x`` no longer split over ``axes`` (its minor axes)."""
    return _all_gather.bind([x], {"dim": _neg(x._impl, dim), "axes": tuple(axes)})


def all_to_all_phys(x, split, concat, axes):
    """Mesh ``axes`` moved from the minor end of physical dim ``concat`` to that of
    ``split``."""
    im = x._impl
    return _all_to_all.bind(
        [x], {"split": _neg(im, split), "concat": _neg(im, concat), "axes": tuple(axes)}
    )


def slice_phys(x, target_dims):
    """``x`` split further to ``target_dims`` (each dim's axes extend its current ones):
    each device keeps its block, no communication."""
    cur = x._impl.sharding
    for d, (have, want) in enumerate(zip(cur.dims, target_dims, strict=True)):
        if have != want:
            if want[: len(have)] != have:  # pragma: no cover - the planner gathers first
                raise ShardingError(f"shard_slice: dim {d} holds {have}, cannot slice to {want}")
            x = _shard_slice.bind([x], {"dim": _neg(x._impl, d), "axes": want[len(have) :]})
    return x


# ----------------------------------------------------------------------------- public API
def _check_mesh(op, mesh):
    if not isinstance(mesh, DeviceMesh):
        raise ShardingError(f"{op}: expected a DeviceMesh, got {type(mesh).__name__}")


def _logical_spec(x: Tensor, mesh, spec, op, replicated_axes=()) -> ShardingSpec:
    _check_mesh(op, mesh)
    cur = x._impl.sharding
    nb = len(x._impl.levels)
    current = cur.dims[nb:] if cur is not None and cur.mesh == mesh else None
    s = ShardingSpec.from_spec(
        mesh, spec, x.ndim, op, current=current, replicated_axes=replicated_axes
    )
    if s.partial:
        raise ShardingError(f"{op}: a target spec cannot be partial ({s})")
    s.check_shape(x.shape, op)
    nb = len(x._impl.levels)
    if nb:
        cur = x._impl.sharding
        batch = cur.dims[:nb] if cur is not None and cur.mesh == mesh else ((),) * nb
        taken = {a for d in batch for a in d}
        again = [a for d in s.dims for a in d if a in taken]
        if again:
            raise ShardingError(
                f"{op}: inside vmap the mapped dim is split over mesh axis {again[0]!r} "
                f"(spmd_axis_name, or a mapped input sharded along it), so the spec {spec!r} "
                f"for each element of shape {x.shape} cannot use it too"
            )
        s = s.with_prefix(batch)
    return s


def shard(x, mesh: DeviceMesh, spec=None, *, replicated_axes=None, dim_specs=None) -> Tensor:
    """``x`` split over ``mesh`` as ``spec``: each device holds its block.

    Args:
        x: a tensor (or array-like); if already sharded on ``mesh`` it is resharded.
        mesh: the ``DeviceMesh``.
        spec: a ``P(...)`` (JAX semantics: one entry per leading dim, an axis name, None or a
            tuple of names; missing trailing entries replicate; ``P.UNCONSTRAINED`` keeps
            the dim's present axes and leaves it open), a list of ``DimSpec`` (closed by
            default: ops that read the result keep exactly those axes on the dim; see
            ``propagate``), or a ``ShardingSpec``.
        replicated_axes: mesh axes the result is explicitly replicated over: no op that
            reads it splits one of its dims over them (default: none).
        dim_specs: another name for ``spec`` (a list of ``DimSpec``); give one of the two.

    Returns:
        The same global value, sharded. Raises ``ShardingError`` for an unknown axis, an
        axis used twice, a spec longer than the rank, or a dim its axes do not divide.

    Example:
        >>> mesh = nb.DeviceMesh("m", (2,), ("x",))
        >>> nb.shard(nb.arange(4.0), mesh, nb.P("x")).addressable_shards[1].data.tolist()
        [2.0, 3.0]
    """
    spec = alias_arg("shard", "spec", spec, "dim_specs", dim_specs)
    return _laid_out(x, mesh, spec, replicated_axes, "shard")


def _laid_out(x, mesh: DeviceMesh, spec, replicated_axes, op: str) -> Tensor:
    """``shard``'s body, its errors naming ``op``, the function called."""
    x = as_tensor(x, op=op)
    cur = x._impl.sharding
    if cur is not None and cur.mesh != mesh:
        _check_mesh(op, mesh)
        raise ShardingError(
            f"{op}: the tensor of shape {x.shape} is on {cur.mesh}, not on {mesh}; unshard it first"
        )
    target = _logical_spec(x, mesh, spec, op, replicated_axes or ())
    y = spmd.reshard_to(x, target, op=op)
    if y._impl.sharding != target:  # same layout, other open/closed dims or priorities
        y = _constrain.bind([y], {"spec": target})
    return y


def reshard(x, mesh: DeviceMesh, spec) -> Tensor:
    """``x`` laid out as ``spec`` on ``mesh`` (same value), inserting the collectives that
    need: ``all_reduce``/``reduce_scatter`` for partial terms, ``all_to_all`` or
    ``all_gather`` for axes a dim loses, local slices for axes a dim gains.

    Args:
        x: a tensor.
        mesh: the ``DeviceMesh``.
        spec: the target (``P``, list of ``DimSpec``, or ``ShardingSpec``).
    """
    return _laid_out(x, mesh, spec, None, "reshard")


def split_level(x: Tensor, level: int, mesh: DeviceMesh, axes) -> Tensor:
    """``x`` with the batch dim of vmap ``level`` split over mesh ``axes`` (the rest of its
    layout kept; ``vmap(spmd_axis_name=...)``)."""
    im = x._impl
    pos = im.levels.index(level)
    cur = im.sharding
    if cur is not None and cur.mesh != mesh:
        raise ShardingError(f"vmap: an input is on {cur.mesh}, not on {mesh}")
    dims = list(cur.dims) if cur is not None else [()] * len(im.shape)
    if set(axes) <= set(dims[pos]):
        return x  # the mapped dim is split over them already
    # an axis that splits another dim moves to the mapped one (the planner reshards)
    dims = [tuple(a for a in d if a not in axes) for d in dims]
    wider = dims[pos] + tuple(axes)
    if im.shape[pos] % prod(mesh.axis_size(a) for a in wider):
        wider = tuple(axes)  # the mapped dim's other axes do not fit with them: dropped
    dims[pos] = wider
    partial = cur.partial if cur is not None else ()
    return spmd.reshard_to(x, ShardingSpec(mesh, dims, partial, op="vmap"), op="vmap")


def unshard(x) -> Tensor:
    """``x`` as one whole (unsharded) tensor: blocks gathered, partial terms reduced."""
    x = as_tensor(x, op="unshard")
    if x._impl.sharding is None:
        return x
    return _unshard.bind([x], {})


def _dispatch(op: str, x, per_device_form, global_form, one_device=None, axes=None):
    """The one place a public collective decides its form: a per-device value inside a
    ``shard_map`` body goes to ``per_device_form(x)`` (collectives over the body's mesh
    axes, ``ops/per_device.py``); a tensor with no mesh to ``one_device(x)`` when given (it
    lives on one device, where a reduction or gather is the identity, as on a mesh of one
    device and as in the original Nabla), unless ``axes`` names mesh axes it does not have
    (JAX's unbound axis name: code ported from ``vmap(axis_name=...)`` would otherwise get
    the identity silently); anything else must be sharded and goes to ``global_form(x)``
    (the op on the global value)."""
    x = as_tensor(x, op=op)
    if _per_device(x):
        return per_device_form(x)
    if one_device is not None and x._impl.sharding is None:
        if axes:  # (None, () or []: no axes named)
            raise ShardingError(
                f"{op}: axes {axes!r} name mesh axes, but the tensor of shape {x.shape} has "
                "no mesh and no shard_map body is running (vmap has no axis_name: a "
                "collective over a batch runs in shard_map over a mesh, or reduce the batch "
                "dim with a reduction)"
            )
        return one_device(x)
    return global_form(_sharded(x, op))


def _same(x: Tensor) -> Tensor:
    """A collective over the one device of a tensor with no mesh: its value."""
    return x


def _same_along(op: str, axis):
    """``_same`` for a collective along dim ``axis`` (checked against the shape)."""

    def same(x: Tensor) -> Tensor:
        _laxis(op, x, axis)
        return x

    return same


def _per_device(x: Tensor) -> bool:
    """True inside a shard_map body for a per-device value (collectives over mesh axes)."""
    return x._impl.sharding is None and bool(per_device.active_axes())


def _names(op, axes) -> tuple:
    """``axes`` (a mesh axis name or a sequence of names) as a tuple of names."""
    if isinstance(axes, str):
        return (axes,)
    if not isinstance(axes, tuple | list) or not all(isinstance(a, str) for a in axes):
        raise ShardingError(
            f"{op}: axes must be a mesh axis name or a tuple of names, got {axes!r}"
        )
    return tuple(axes)


def _body_axes(op, axes) -> tuple:
    if axes is None:
        return per_device.active_axes()
    names = _names(op, axes)
    if len(set(names)) != len(names):
        raise ShardingError(f"{op}: mesh axes {names} name an axis twice")
    return names


def _body_levels(op, axes) -> list:
    """The levels of one or more body axes (a tuple acts as one axis, the first major)."""
    names = _body_axes(op, axes)
    if not names:
        raise ShardingError(f"{op}: needs at least one mesh axis of the shard_map body, got ()")
    return per_device.levels_of(op, names)


def _sharded(x, op) -> Tensor:
    x = as_tensor(x, op=op)
    if x._impl.sharding is None:
        raise ShardingError(f"{op}: the tensor of shape {x.shape} is not sharded (no mesh)")
    return x


def _axes_arg(op, spec, axes) -> tuple:
    if axes is None:
        return None
    axes = _names(op, axes)
    for a in axes:
        spec.mesh.axis(a, op)
    if len(set(axes)) != len(axes):
        raise ShardingError(f"{op}: mesh axis repeated in {axes}")
    return axes


def _unmixed(op, x, names) -> None:
    """Refuse a collective over mesh axes that split a vmap batch dim of ``x``: each
    element's collective would combine other elements' rows (as ``reshard`` refuses to use
    such an axis inside the vmap)."""
    nb = len(x._impl.levels)
    spec = x._impl.sharding
    if not nb or spec is None or not names:
        return
    taken = {a for d in spec.dims[:nb] for a in d}
    mixed = [a for a in names if a in taken]
    if mixed:
        raise ShardingError(
            f"{op}: inside vmap the mapped dim is split over mesh axis {mixed[0]!r} "
            f"(spmd_axis_name, or a mapped input sharded along it), so a collective over it "
            f"would combine different elements (each of shape {x.shape}); reshard the input "
            "so the mapped dim is not split over it, or use shard_map"
        )


def _laxis(op, x, axis) -> int:
    """``axis`` of ``x``'s logical shape, normalized."""
    n = x.ndim
    if isinstance(axis, str):  # JAX's order, all_gather(x, "x"): a mesh axis name here
        raise ShardingError(
            f"{op}: a tensor dim is an int, got the name {axis!r} (shape {x.shape}); mesh "
            f"axes are named by axes= (JAX's {op}(x, axis_name) is not this order)"
        )
    if not isinstance(axis, int | np.integer) or not -n <= axis < n:
        raise ShardingError(f"{op}: axis {axis!r} is out of range for shape {x.shape}")
    return int(axis) % n


def _axis(op, x, axis) -> int:
    """``axis`` of ``x``'s physical shape (past its vmap batch dims)."""
    return _laxis(op, x, axis) + len(x._impl.levels)


def all_reduce(x, reduce_op: str = "sum", axes=None, *, reduce_axes=None) -> Tensor:
    """Every device gets the reduction over mesh ``axes`` of the devices' values.

    Over axes where ``x`` is partial with the same reduction this completes the value (the
    global value is unchanged). Over axes that split a dim of ``x`` it reduces the blocks:
    every device gets the reduction of the blocks, and that dim shrinks to one block. Over
    axes along which ``x`` is replicated it reduces the equal copies, as JAX's ``psum`` of a
    replicated value: ``sum`` gives ``n * x`` (``n`` devices along them), ``max``/``min``
    give ``x``, ``prod`` gives ``x ** n``.

    Args:
        x: a sharded tensor.
        reduce_op: ``"sum"``, ``"max"``, ``"min"`` or ``"prod"``.
        axes: mesh axis name(s); None: every partial axis of ``x`` if it has any, else every
            axis it is split over, else (a replicated ``x``) every mesh axis.
        reduce_axes: the original API's name for ``axes``.
    """
    key = _eager_key("all_reduce", x, (reduce_op, axes, reduce_axes))
    if (y := _eager_call(key, x)) is not None:
        return y
    if reduce_op not in REDUCE_KINDS:
        raise ShardingError(
            f"all_reduce: reduce_op must be one of {REDUCE_KINDS}, got {reduce_op!r}"
        )
    axes = alias_arg("all_reduce", "axes", axes, "reduce_axes", reduce_axes)

    def local(x):
        levels = per_device.levels_of("all_reduce", _body_axes("all_reduce", axes))
        return per_device.all_reduce(x, reduce_op, levels)

    def whole(x):
        if x.dtype.is_bool and reduce_op in ("sum", "prod"):
            x = x.cast(DType.int32)  # a count, as JAX's psum (a bool sum was a logical OR)
        spec = x._impl.sharding
        names = _axes_arg("all_reduce", spec, axes)
        if names is None:
            names = spec.partial_axes or spec.sharded_axes or spec.mesh.axis_names
        if not names:
            raise ShardingError("all_reduce: no mesh axes given")
        _unmixed("all_reduce", x, names)
        copies = _copies(spec, names)
        rest = tuple(a for a in names if a not in copies)
        if rest and copies:
            x = _all_reduce.bind([x], {"axes": rest, "kind": reduce_op})
            return _all_reduce.bind([x], {"axes": copies, "kind": reduce_op})
        one = key if x is x0 else None  # (not a cast of the operand)
        kwargs = {"axes": rest or copies, "kind": reduce_op}
        return _bind_one(one, _all_reduce, lambda: _all_reduce.bind([x], kwargs))

    x0 = x
    return _dispatch("all_reduce", x, local, whole, _same, axes)


def pmean(x, axes=None, *, axis_name=None) -> Tensor:
    """``all_reduce(x, "sum", axes)`` divided by the number of devices along ``axes``.

    Args:
        x: a sharded tensor, or a per-device value inside ``shard_map``.
        axes: the mesh axes to average over; None: the value's partial (else sharded, else
            every) axes, or inside ``shard_map`` every mesh axis of the body.
        axis_name: the original Nabla's (and JAX's) name for ``axes``.
    """
    axes = alias_arg("pmean", "axes", axes, "axis_name", axis_name)

    def local(x):
        levels = per_device.levels_of("pmean", _body_axes("pmean", axes))
        n = prod(per_device.axis_size(lv) for lv in levels)
        return per_device.all_reduce(x, "sum", levels) / n

    def whole(x):
        spec = x._impl.sharding
        names = _axes_arg("pmean", spec, axes)
        if names is None:
            names = spec.partial_axes or spec.sharded_axes or spec.mesh.axis_names
        _unmixed("pmean", x, names)
        n = prod(spec.mesh.axis_size(a) for a in names)
        return all_reduce(x, "sum", names) / n

    return _dispatch("pmean", x, local, whole, _same, axes)


def all_gather(x, axis: int, axes=None) -> Tensor:
    """``x`` with dim ``axis`` whole on every device (same value).

    Args:
        x: a sharded tensor.
        axis: the dim to gather.
        axes: the mesh axes to gather (the minor end of the dim's axes); None: all of them.
    """

    key = _eager_key("all_gather", x, (axis, axes))
    if (y := _eager_call(key, x)) is not None:
        return y

    def local(x):
        levels = per_device.levels_of("all_gather", _body_axes("all_gather", axes))
        return per_device.all_gather(x, _laxis("all_gather", x, axis), levels)

    def whole(x):
        spec = x._impl.sharding
        d = _axis("all_gather", x, axis)
        names = _axes_arg("all_gather", spec, axes)
        if names is None:
            names = spec.dims[d]
            if not names:
                raise ShardingError(
                    f"all_gather: dim {axis} of the tensor of shape {x.shape} is not split "
                    f"(spec {x.sharding})"
                )
        _unmixed("all_gather", x, names)
        return _bind_one(key, _all_gather, lambda: all_gather_phys(x, d, names))

    return _dispatch("all_gather", x, local, whole, _same_along("all_gather", axis), axes)


def reduce_scatter(x, axis: int, axes=None, *, reduce_op: str = "sum") -> Tensor:
    """Reduce ``x``'s terms over mesh ``axes`` and split dim ``axis`` over them (half the
    traffic of an ``all_reduce``).

    Over axes where ``x`` is partial this completes the value (the global value is
    unchanged). Over other axes it is ``all_reduce`` over them (the equal copies along an
    axis ``x`` is replicated on are the terms, as JAX's ``psum_scatter`` of a replicated
    value: ``sum`` gives ``n * x``; blocks of a dim split over one are reduced), then each
    device keeps its block of dim ``axis``. Partial axes come first in the dim's split.

    Args:
        x: a sharded tensor (or a per-device value inside ``shard_map``).
        axis: the dim to split.
        axes: mesh axes; None: every partial axis, or for a value with none every mesh axis
            (all devices' values are the terms, as the original Nabla).
        reduce_op: the reduction, ``"sum"`` (default), ``"max"``, ``"min"`` or ``"prod"``;
            a partial value's terms are reduced by their own kind, which it must match.
            Inside ``shard_map`` only ``"sum"``.
    """
    key = _eager_key("reduce_scatter", x, (axis, axes, reduce_op))
    if (y := _eager_call(key, x)) is not None:
        return y
    if reduce_op not in REDUCE_KINDS:
        raise ShardingError(
            f"reduce_scatter: reduce_op must be one of {REDUCE_KINDS}, got {reduce_op!r}"
        )

    def local(x):
        if reduce_op != "sum":
            raise ShardingError(
                f"reduce_scatter: inside shard_map only reduce_op='sum' is supported, got "
                f"{reduce_op!r}"
            )
        d = _laxis("reduce_scatter", x, axis)
        return per_device.reduce_scatter(x, d, _body_levels("reduce_scatter", axes))

    def whole(x):
        spec = x._impl.sharding
        d = _axis("reduce_scatter", x, axis)
        names = _axes_arg("reduce_scatter", spec, axes)
        if names is None:
            names = spec.partial_axes or spec.mesh.axis_names
        _unmixed("reduce_scatter", x, names)
        terms = tuple(a for a in names if a in spec.partial_kinds)
        copies = tuple(a for a in names if a not in terms)  # copies or blocks
        kinds = spec.partial_kinds
        wrong = [a for a in terms if a in kinds and kinds[a] != reduce_op]
        if wrong:
            raise ShardingError(
                f"reduce_scatter: the value of shape {x.shape} is partial over {wrong[0]!r} "
                f"with {kinds[wrong[0]]!r} terms (spec {spec}); reduce_op={reduce_op!r} is "
                "not their reduction"
            )
        split = tuple(spec.dims[d]) + tuple(names)
        ways = prod(spec.mesh.axis_size(a) for a in split)
        if x.shape[axis] % ways:
            raise ShardingError(
                f"reduce_scatter: dim {axis} of size {x.shape[axis]} of the tensor of shape "
                f"{x.shape} (spec {spec}) cannot be split over {split} ({ways} blocks); name "
                "other axes, or a dim they divide"
            )
        if not copies:
            return _bind_one(key, _reduce_scatter, lambda: reduce_scatter_phys(x, d, terms))
        if terms:
            x = reduce_scatter_phys(x, d, terms)
        x = all_reduce(x, reduce_op, copies)
        return _shard_slice.bind([x], {"dim": _neg(x._impl, d), "axes": copies})

    return _dispatch("reduce_scatter", x, local, whole, _same_along("reduce_scatter", axis), axes)


def all_to_all(x, split_axis: int, concat_axis: int, tiled: bool = True, axes=None) -> Tensor:
    """Move mesh ``axes`` from dim ``concat_axis`` (which each device then holds whole) to
    dim ``split_axis`` (same value). A tensor with no mesh lives on one device: its value,
    as the other collectives' (and the original Nabla's).

    With ``split_axis == concat_axis`` (as JAX's and the original Nabla's ``all_to_all``)
    each device cuts its block into ``n`` chunks, sends chunk ``j`` to device ``j``, and
    concatenates what it receives in device order: the layout stays, and the global value
    is the dim's ``n x n`` chunks transposed.

    Args:
        x: a tensor split along ``concat_axis``.
        split_axis: the dim that becomes split.
        concat_axis: the dim that becomes whole.
        tiled: the original Nabla's (and JAX's ``tiled=True``): the dims keep their rank, as
            here always; ``False`` (JAX's new-axis form) is refused.
        axes: the mesh axes to move; None: all of ``concat_axis``'s (with ``split_axis ==
            concat_axis`` they must be all of them).
    """

    def untiled_refused():
        if not tiled:
            raise ShardingError(
                "all_to_all: tiled=False (a new axis for the chunks, JAX's) is not supported; "
                "the tiled form keeps the rank (reshape around it)"
            )

    def one_device(x):
        _laxis("all_to_all", x, split_axis), _laxis("all_to_all", x, concat_axis)
        return x

    def local(x):
        untiled_refused()
        s, c = _laxis("all_to_all", x, split_axis), _laxis("all_to_all", x, concat_axis)
        return per_device.all_to_all(x, s, c, _body_levels("all_to_all", axes))

    def whole(x):
        untiled_refused()
        spec = x._impl.sharding
        s = _axis("all_to_all", x, split_axis)
        c = _axis("all_to_all", x, concat_axis)
        names = _axes_arg("all_to_all", spec, axes)
        names = spec.dims[c] if names is None else names
        _unmixed("all_to_all", x, names)
        if s == c and spec.dims[c]:
            return _chunk_transpose(x, _laxis("all_to_all", x, concat_axis), names)
        return all_to_all_phys(x, s, c, names)

    return _dispatch("all_to_all", x, local, whole, one_device, axes)


def _chunk_transpose(x: Tensor, d: int, axes) -> Tensor:
    """``all_to_all`` with split dim = concat dim ``d`` (logical) over mesh ``axes``, all of
    the dim's: the ``n x n`` chunks of dim ``d`` transposed, in ``x``'s layout."""
    spec = x._impl.sharding
    have = spec.dims[d + len(x._impl.levels)]
    if not axes or tuple(axes) != tuple(have):
        raise ShardingError(
            f"all_to_all: with split dim = concat dim {d}, the mesh axes must be all those "
            f"the dim is split over, {have}; got {tuple(axes)} (spec {spec})"
        )
    n = prod(spec.mesh.axis_size(a) for a in axes)
    shape = tuple(x.shape)
    if shape[d] % (n * n):
        raise ShardingError(
            f"all_to_all: dim {d} of shape {shape} is not divisible by {n * n}: each of the "
            f"{n} devices' blocks is cut into {n} chunks"
        )
    y = fn.reshape(x, shape[:d] + (n, n, shape[d] // (n * n)) + shape[d + 1 :])
    nb = len(x._impl.levels)
    if y._impl.sharding is not None and y._impl.sharding.dims[nb + d] == tuple(axes):
        # the exchange itself: the axes move to the chunk dim, then back by the transpose
        y = all_to_all_phys(y, nb + d + 1, nb + d, axes)
    y = fn.reshape(fn.transpose(y, d, d + 1), shape)
    return layout_like(y, x._impl)


def ppermute(x, perm=None, axis_name=None, *, permutation=None) -> Tensor:
    """Send each device's block to another: ``perm`` holds ``(source, destination)`` pairs
    of flat mesh device indices, or of positions along ``axis_name`` when given (inside
    ``shard_map``: along the body's axes by default); devices that receive nothing get
    zeros.

    Args:
        x: a sharded tensor, or a per-device value inside ``shard_map``.
        perm: pairs ``(src, dst)``; no device twice as a source or a destination.
        axis_name: the mesh axis (or tuple of axes) the positions run along: inside
            ``shard_map`` (default: every mesh axis of the body) and outside it (default:
            ``perm`` holds flat device indices), where every line of devices along those
            axes is permuted alike.
        permutation: the original Nabla's name for ``perm``.
    """
    perm = alias_arg("ppermute", "perm", perm, "permutation", permutation)
    if perm is None:
        raise TypeError("ppermute: missing the (source, destination) pairs perm")
    try:
        pairs = tuple((s, d) for s, d in perm)
    except (TypeError, ValueError):
        raise ShardingError(
            f"ppermute: perm must be (source, destination) pairs, got {perm!r}"
        ) from None
    if not all(_is_int(v) for p in pairs for v in p):
        raise ShardingError(f"ppermute: perm must be pairs of int device indices, got {perm!r}")
    pairs = tuple((int(s), int(d)) for s, d in pairs)

    def local(x):
        levels = per_device.levels_of("ppermute", _body_axes("ppermute", axis_name))
        n = prod(per_device.axis_size(lv) for lv in levels)
        _check_pairs(pairs, n, f"a position along the body's axes (0 to {n - 1})")
        return per_device.ppermute(x, pairs, levels)

    def whole(x):
        flat = pairs if axis_name is None else _flat_pairs(x, pairs, axis_name)
        return _ppermute.bind([x], {"pairs": flat})

    return _dispatch("ppermute", x, local, whole)


def _flat_pairs(x, pairs: tuple, axis_name) -> tuple:
    """``pairs`` of positions along the mesh axes ``axis_name`` (numbered in mesh order, as
    inside a body) as pairs of flat device indices of ``x``'s mesh: every line of devices
    along those axes permuted alike."""
    mesh = x._impl.sharding.mesh
    names = _names("ppermute", axis_name)
    unknown = [a for a in names if a not in mesh.axis_names]
    if unknown:
        raise ShardingError(
            f"ppermute: axis_name {axis_name!r} names {unknown}, not an axis of mesh "
            f"{mesh.name!r} (axes {mesh.axis_names}); tensor of shape {x.shape}"
        )
    _unmixed("ppermute", x, names)
    along = [i for i, a in enumerate(mesh.axis_names) if a in names]  # mesh order
    sizes = [mesh.shape[i] for i in along]
    n = prod(sizes)
    _check_pairs(pairs, n, f"a position along {names} (0 to {n - 1})")
    flat = []
    for device in range(prod(mesh.shape)):
        coords = list(np.unravel_index(device, mesh.shape))
        pos = int(np.ravel_multi_index([coords[i] for i in along], sizes)) if along else 0
        for src, dst in pairs:
            if src == pos:
                moved = np.unravel_index(dst, sizes)
                for i, c in zip(along, moved, strict=True):
                    coords[i] = int(c)
                flat.append((device, int(np.ravel_multi_index(coords, mesh.shape))))
    return tuple(flat)


def _is_int(v) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _roots(root, axes, sizes) -> tuple:
    """``root`` as one position per mesh axis of ``axes`` (of ``sizes``): one int per axis,
    or one int for the axes taken together as one, numbered row-major (the first axis
    slowest), as ``axis_index`` and the collectives number a tuple of axes."""
    if _is_int(root):
        n = prod(sizes)
        if not 0 <= root < n:
            raise ShardingError(
                f"broadcast: root {root} is out of range for mesh axes {tuple(axes)} "
                f"({n} devices along them)"
            )
        return tuple(int(r) for r in np.unravel_index(int(root), tuple(sizes)))
    if not isinstance(root, tuple | list) or not all(_is_int(r) for r in root):
        raise ShardingError(f"broadcast: root must be an int or one int per axis, got {root!r}")
    if len(root) != len(axes):
        raise ShardingError(f"broadcast: {len(root)} root positions for axes {axes}")
    return tuple(int(r) for r in root)


def axis_index(mesh: DeviceMesh, axis_name) -> Tensor:
    """Each device's coordinate along ``axis_name``: an int32 vector of length
    ``mesh.shape[axis]``, split over that axis (device ``i`` along it holds ``[i]``).

    Inside a ``shard_map`` body it is this device's int32 scalar position, and
    ``axis_name`` may be a tuple of axes: the position along them taken together, the
    first axis slowest (JAX's ``lax.axis_index`` of a tuple)."""
    _check_mesh("axis_index", mesh)
    body = {m.name: m for _lv, m in spmd_axes.values()}
    if body and mesh not in body.values():
        raise ShardingError(
            f"axis_index: mesh {mesh.name!r} is not the mesh of the enclosing shard_map body "
            f"({', '.join(map(repr, body))}); inside a body, ask for a position along its mesh"
        )
    if isinstance(axis_name, tuple | list):
        names = tuple(axis_name)
        if not names or not all(n in per_device.active_axes() for n in names):
            raise ShardingError(
                f"axis_index: a tuple of mesh axes {names!r} is supported inside a shard_map "
                "body over all of them; outside, ask for one axis at a time"
            )
        position = None
        for n in names:
            lv = per_device.levels_of("axis_index", (n,))[0]
            here = per_device.axis_index(lv)
            position = here if position is None else position * per_device.axis_size(lv) + here
        return position
    mesh.axis(axis_name, "axis_index")
    if axis_name in per_device.active_axes():
        return per_device.axis_index(per_device.levels_of("axis_index", (axis_name,))[0])
    return mesh_axis_index(mesh, axis_name)


def mesh_axis_index(mesh: DeviceMesh, axis_name: str) -> Tensor:
    """The global form of :func:`axis_index` (no checks): each device's position along
    ``axis_name``, split over that axis."""
    return _axis_index.bind([], {"mesh": mesh, "axis": axis_name})


def broadcast(x, root=0, axes=None) -> Tensor:
    """Every device along ``axes`` gets the block of the device at position ``root`` along
    them. A dim split over ``axes`` shrinks to that block.

    Args:
        x: a sharded tensor.
        root: the source: one int per axis, or one int for the axes taken together,
            numbered row-major (first axis slowest) as ``axis_index`` numbers a tuple of
            axes.
        axes: mesh axes; None: every axis ``x`` is split or partial over, in the order
            its spec names them (for ``P(("tp", "dp"))`` the root counts ``tp`` slowest:
            root 1 is the block at tp=0, dp=1, the second block of the split dim).
    """

    def local(x):
        names = _body_axes("broadcast", axes)
        levels = per_device.levels_of("broadcast", names)
        sizes = [per_device.axis_size(lv) for lv in levels]
        roots = _roots(root, names, sizes)
        _check_roots(names, roots, sizes)
        return per_device.broadcast(x, roots, levels)

    def whole(x):
        spec = x._impl.sharding
        names = _axes_arg("broadcast", spec, axes)
        if names is None:
            names = spec.sharded_axes + spec.partial_axes
        _unmixed("broadcast", x, names)
        sizes = [spec.mesh.axis_size(a) for a in names]
        return _broadcast.bind([x], {"axes": names, "root": _roots(root, names, sizes)})

    return _dispatch("broadcast", x, local, whole)


class DistributedBroadcastOp(Operation):
    """The original Nabla's ``distributed_broadcast``: the value as it is, on its mesh; its
    rule is the original's, the cotangent all-reduced over the mesh axes (for a replicated
    one, the sum of every device's copy: ``n`` times it), and the tangent likewise."""

    name = "distributed_broadcast"
    backend_name = "identity"  # (the value is its operand's)
    data_movement = True

    def infer(self, shapes, dtypes, kwargs):
        return [shapes[0]], [dtypes[0]]

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.elementwise_rule(in_shapes, out_shapes)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        ct = cotangents[0]
        return [None if ct is None else all_reduce(ct, axes=kwargs["axes"])]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        t = tangents[0]
        return [None if t is None else all_reduce(t, axes=kwargs["axes"])]


_distributed_broadcast = DistributedBroadcastOp()


def distributed_broadcast(x, mesh=None) -> Tensor:
    """The original Nabla's ``distributed_broadcast(x, mesh)``: the first device's block of
    ``x`` on every device of ``mesh`` (default: ``x``'s; a tensor with no mesh is its value).
    An unsharded ``x`` is that block already: the result is ``x`` replicated on ``mesh``.
    Its derivative is the original's: the cotangent all-reduced over the mesh, so
    ``grad(lambda u: sum(distributed_broadcast(u, mesh) ** 2))`` is ``2 * u * n`` for ``n``
    devices (``nb.broadcast`` is the collective with the value's own derivative).

    Args:
        x: a tensor.
        mesh: the ``DeviceMesh`` (default: ``x``'s).

    Returns:
        The value on every device of the mesh, replicated.

    Raises:
        ShardingError: for a ``mesh`` that is not a DeviceMesh, or not ``x``'s.
    """
    x = as_tensor(x, op="distributed_broadcast")
    spec = x._impl.sharding
    if mesh is None:
        if spec is None:
            return x
        mesh = spec.mesh
    _check_mesh("distributed_broadcast", mesh)
    if spec is None:
        x = reshard(x, mesh, PartitionSpec())
    elif spec.mesh != mesh:
        raise ShardingError(
            f"distributed_broadcast: x is on {spec.mesh}, not on the mesh given {mesh}"
        )
    elif spec.sharded_axes or spec.partial_axes:
        x = broadcast(x, 0)  # the first device's block, on every device
    return _distributed_broadcast.bind([x], {"axes": tuple(mesh.axis_names)})


provide(
    globals(),
    [
        *__all__,
        "complete_partial",
        "shard_op",
        "to_local",
        "from_local",
        "mesh_axis_index",
        "all_reduce_phys",
        "all_gather_phys",
        "reduce_scatter_phys",
        "all_to_all_phys",
        "slice_phys",
    ],
)
