"""The sharded path of the op pipeline (``docs/architecture.md``, "Sharding") and the
resharding planner.

``Operation.bind`` hands an op to :func:`bind_sharded` when an operand is sharded. There:

1. every operand must be on one mesh; partial operands the op is not linear in (for their
   reduction kind) are reduced first (``all_reduce``): lazily, only where a consumer needs it;
2. operands are aligned: same vmap levels, and for elementwise ops the same rank, so the
   kernels never broadcast a local block against a mesh dim;
3. the op's shapes are computed on the *global* (logical) shapes, which validates the call
   exactly as unsharded;
4. the op's factor rule (``sharding_rule``) and :func:`nabla.core.sharding.propagate` decide
   every operand's sharding and the output's; operands that differ are resharded with
   collectives (``all_gather``, ``all_to_all``, ``all_reduce``, ``reduce_scatter``) or sliced
   locally (``shard``), each an op in the graph, visible in ``nb.trace``;
5. the op's kwargs are translated to one device's block (``shard_kwargs``) and then to the
   buffer's layout (mesh dims first, then vmap batch dims: ``adapt_kwargs``), so the backend
   runs the ordinary kernel over every device's block at once: one program over all shards.

Ops that cannot run on blocks (control flow, compiled calls, host random draws, custom calls)
declare ``runs_sharded = False``: their operands are gathered to whole values first.
"""

from __future__ import annotations

from collections import OrderedDict
from math import prod

from ..core.sharding import (
    FactorRule,
    ShardingError,
    ShardingSpec,
    propagate,
)
from ..core.state import STATE, spmd_axes
from ..runtime.tensor import Tensor
from .functions import fn
from .pipeline import Call, emit, shapes

__all__ = [
    "FactorRule",
    "bind_sharded",
    "reshard_to",
    "mesh_of",
    "elementwise_rule",
    "aligned_rule",
    "permute_rule",
    "reduce_rule",
    "reshape_rule",
]


def mesh_of(op_name: str, impls):
    """The one mesh of the sharded operands; a clear error when they differ."""
    mesh = None
    for im in impls:
        s = im.sharding
        if s is None:
            continue
        if mesh is None:
            mesh = s.mesh
        elif s.mesh != mesh:
            raise ShardingError(
                f"{op_name}: operands are on different meshes: {mesh} and {s.mesh} (shapes "
                + ", ".join(str(tuple(i.logical_shape)) for i in impls)
                + ")"
            )
    return mesh


def elementwise_rule(in_shapes, out_shapes) -> FactorRule:
    """Every output dim one factor; an input dim of size 1 under a larger output dim is a
    broadcast, a factor of its own (size 1, never sharded)."""
    out = out_shapes[0]
    n = len(out)
    ins = []
    sizes = {f"d{i}": s for i, s in enumerate(out)}
    for k, shape in enumerate(in_shapes):
        dims = []
        off = n - len(shape)
        for i, s in enumerate(shape):
            j = i + off
            if s == out[j]:
                dims.append((f"d{j}",))
            else:
                f = f"b{k}_{j}"
                sizes[f] = s
                dims.append((f,))
        ins.append(dims)
    outs = [[(f"d{i}",) for i in range(n)] for _ in out_shapes]
    return FactorRule(ins, outs, sizes)


def aligned_rule(in_shapes, out_shapes, blocked=()) -> FactorRule:
    """Inputs and outputs of one rank whose dim ``i`` correspond (concatenate, split, slice,
    pad, flip, cumsum...): dim ``i`` is one shared factor unless ``i`` is in ``blocked``
    (the op needs that dim whole: each operand's is a factor of its own, never sharded)."""
    sizes: dict = {}
    block: set = set()

    def side(shapes, prefix):
        out = []
        for k, shape in enumerate(shapes):
            dims = []
            for i, n in enumerate(shape):
                f = f"{prefix}{k}_{i}" if i in blocked else f"d{i}"
                if i in blocked:
                    block.add(f)
                sizes.setdefault(f, n)
                dims.append((f,))
            out.append(dims)
        return out

    return FactorRule(side(in_shapes, "i"), side(out_shapes, "o"), sizes, blocked=block)


def permute_rule(shape, perm) -> FactorRule:
    """Output dim ``j`` is input dim ``perm[j]``."""
    return FactorRule(
        [[(f"d{i}",) for i in range(len(shape))]],
        [[(f"d{p}",) for p in perm]],
        {f"d{i}": n for i, n in enumerate(shape)},
    )


def reduce_rule(shape, axes, keepdims, kind) -> FactorRule:
    """Dims ``axes`` are reduced: a sharded one leaves partial terms of ``kind`` (None: the
    reduction cannot be completed from terms, so the dim must be whole)."""
    ins = [(f"d{i}",) for i in range(len(shape))]
    outs = []
    sizes = {f"d{i}": n for i, n in enumerate(shape)}
    for i in range(len(shape)):
        if i in axes:
            if keepdims:
                outs.append((f"k{i}",))
                sizes[f"k{i}"] = 1
        else:
            outs.append((f"d{i}",))
    return FactorRule([ins], [outs], sizes, reduce={f"d{a}": kind for a in axes})


def _reshape_runs(in_shape, out_shape):
    """A reshape's dims in runs of equal products, in order, as ``(in_dims, out_dims)``;
    a size-1 dim facing a dim that is not is a run of its own (``([i], [])``)."""
    i = j = 0
    n_in, n_out = len(in_shape), len(out_shape)
    while i < n_in or j < n_out:
        if i < n_in and in_shape[i] == 1 and (j >= n_out or out_shape[j] != 1):
            yield [i], []
            i += 1
        elif j < n_out and out_shape[j] == 1 and (i >= n_in or in_shape[i] != 1):
            yield [], [j]
            j += 1
        else:
            a, b = [i], [j]
            pa, pb = in_shape[i], out_shape[j]
            while pa != pb:
                if pa < pb:
                    i += 1
                    a.append(i)
                    pa *= in_shape[i]
                else:
                    j += 1
                    b.append(j)
                    pb *= out_shape[j]
            i += 1
            j += 1
            yield a, b


def reshape_rule(in_shape, out_shape) -> FactorRule:
    """Dims grouped into runs with equal products; a run of one input dim split into
    several output dims (or the reverse) shares factors, the major one carrying the axes;
    runs many-to-many stay whole."""
    ins: list = []
    outs: list = []
    sizes: dict = {}
    blocked: set = set()

    def factors(g, dims, shape, tag=""):
        # named by place in the run; a whole run's by dim and side (``tag``)
        fs = tuple(f"g{g}_{tag}{k if not tag else d}" for k, d in enumerate(dims))
        sizes.update(zip(fs, (shape[d] for d in dims), strict=True))
        return fs

    for g, (a, b) in enumerate(_reshape_runs(in_shape, out_shape)):
        if not b or not a:  # a size-1 dim: a factor of its own
            f = f"u{g}_i{a[0]}" if a else f"u{g}_o{b[0]}"
            sizes[f] = 1
            (ins if a else outs).append((f,))
        elif len(a) == 1:  # one input dim split into several
            fs = factors(g, b, out_shape)
            outs.extend((f,) for f in fs)
            ins.append(fs)
        elif len(b) == 1:  # several input dims merged into one
            fs = factors(g, a, in_shape)
            ins.extend((f,) for f in fs)
            outs.append(fs)
        else:  # many to many: every dim whole
            fi, fo = factors(g, a, in_shape, "i"), factors(g, b, out_shape, "o")
            blocked.update(fi + fo)
            ins.extend((f,) for f in fi)
            outs.extend((f,) for f in fo)
    return FactorRule([ins], [outs], sizes, blocked=blocked)


def physical_rule(op, impls, out_shapes, kwargs, nb: int) -> FactorRule:
    """The op's factor rule over physical dims: its logical rule, with the vmap batch dims
    as shared leading factors."""
    if op.physical:
        return op.sharding_rule([im.shape for im in impls], out_shapes, kwargs)
    logical = op.sharding_rule(
        [im.logical_shape for im in impls], [s[nb:] for s in out_shapes], kwargs
    )
    if not nb:
        return logical
    batch = tuple((f"_v{i}",) for i in range(nb))
    sizes = dict(logical.sizes)
    sizes.update({f"_v{i}": out_shapes[0][i] for i in range(nb)} if out_shapes else {})
    for im in impls:
        for i in range(nb):
            sizes.setdefault(f"_v{i}", im.shape[i])
    return FactorRule(
        [
            batch + dims if im.levels else dims
            for im, dims in zip(impls, logical.inputs, strict=True)
        ],
        [batch + dims for dims in logical.outputs],
        sizes,
        logical.reduce,
        logical.blocked,
    )


# ----------------------------------------------------------------------------- partials
def _partial_mode(op, kind: str) -> str | None:
    """How ``op`` lets partial terms of ``kind`` through: ``"joint"`` (linear in all data
    operands together), ``"bilinear"`` (linear in each), ``"first"`` (in the first only), or
    None (it does not commute with that reduction)."""
    if op.data_movement or op.partial_reduce == kind:
        return "joint"
    if kind != "sum":
        return None
    return op.partial_sum or ("joint" if op.linear else "bilinear" if op.bilinear else None)


def _passes_partial(op, impls, index: int, kind: str, kwargs) -> bool:
    """Whether operand ``index`` may stay partial (``kind``) through ``op``: the op commutes
    with the reduction that completes it."""
    data = [i for i in range(len(impls)) if i not in op.index_args]
    if index not in data or not op.keeps_partial(kwargs):
        return False
    mode = _partial_mode(op, kind)
    parts = [impls[i].sharding.partial if impls[i].sharding is not None else () for i in data]
    if mode == "joint":  # each data operand must carry the same partial terms
        return all(p == parts[0] for p in parts)
    others_whole = not any(p for i, p in zip(data, parts, strict=True) if i != index)
    if mode == "bilinear":
        return others_whole
    return mode == "first" and index == data[0] and others_whole


def _reduce_partials(op, args, kwargs):
    """Complete the partial operands ``op`` cannot take as they are (in place)."""
    for i, a in enumerate(args):
        s = a._impl.sharding
        if s is not None and s.partial:
            impls = [x._impl for x in args]  # sees the operands completed so far
            if not all(_passes_partial(op, impls, i, k, kwargs) for _, k in s.partial):
                args[i] = fn.complete_partial(a)
    return args


# ----------------------------------------------------------------------------- the pipeline
def check_capture(op_name: str, impls) -> None:
    """A sharded value (laid out over all devices) may not meet a per-device value of a
    running ``shard_map`` body: it was captured instead of passed in."""
    if not spmd_axes or all(im.sharding is None for im in impls):
        return
    body = {lv for lv, _ in spmd_axes.values()}
    if any(body.intersection(im.levels) for im in impls):
        raise ShardingError(
            f"{op_name}: a sharded value (laid out over all devices) meets a per-device "
            "value inside a shard_map body; pass it to shard_map as an argument with an "
            "in_specs entry instead of capturing it"
        )


def _captured_into_body(impls) -> set:
    """The ids of the sharded ``impls`` that a control-flow body being traced captured from
    outside (none of its operands reaches them). A body runs on whole values (its
    construct gathers its operands and captured inputs to whole values first), so such a
    value enters it whole: its gather is recorded here and, reaching no operand, is hoisted
    out of the body with the capture. Operands are found forward over the body's
    recording, which is in creation order."""
    reached = set(STATE.body_args)
    for node in STATE.recording:
        if any(id(i) in reached for i in node.inputs):
            reached.update(id(o) for o in (r() for r in node.outputs) if o is not None)
    return {id(im) for im in impls if im.sharding is not None and id(im) not in reached}


def bind_sharded(call: Call):
    """The call (``pipeline.Call``) of an op with a sharded operand, in the stages of the
    module docstring: (1) partial operands completed where the op needs it, (2) operands
    aligned, (3) global shapes, (4) the layout planned (a partial axis the op's factors
    need is completed and the planning starts again), operands resharded, (5) the block's
    kwargs; then the node is emitted as for any op (``pipeline.emit``)."""
    op = call.op
    if not op.runs_sharded:
        mesh_of(op.name, call.impls)
        check_capture(op.name, call.impls)
        return op.bind([fn.unshard(a) if a._impl.sharding else a for a in call.args], call.kwargs)
    if STATE.body_args is not None:
        captured = _captured_into_body(call.impls)
        if captured:
            args = [fn.unshard(a) if id(a._impl) in captured else a for a in call.args]
            return op.bind(args, call.kwargs)
    call.mesh = mesh_of(op.name, call.impls)
    while True:
        check_capture(op.name, call.impls)
        clash = _plan_layout(shapes(_align(_complete_partials(call))))
        if not clash:
            break
        # a partial axis that the op's factors need: complete those operands, plan again
        call.operands(
            [
                fn.complete_partial(a)
                if a._impl.sharding is not None and set(a._impl.sharding.partial_axes) & clash
                else a
                for a in call.args
            ]
        )
        call.mesh = mesh_of(op.name, call.impls)
    return emit(_block_kwargs(_reshard_operands(call)))


def _complete_partials(call: Call) -> Call:
    """Stage 1: partial operands the op is not linear in are reduced; a bilinear op with
    both operands partial completes the smaller one (the other passes through)."""
    op, args = call.op, list(call.args)
    bilinear = op.partial_sum == "bilinear" or (op.partial_sum is None and op.bilinear)
    if bilinear and all(a._impl.sharding is not None and a._impl.sharding.partial for a in args):
        k = min(range(len(args)), key=lambda i: prod(args[i]._impl.shape))
        args[k] = fn.complete_partial(args[k])
    return call.operands(_reduce_partials(op, args, call.kwargs))


def _kept_partials(impls) -> dict:
    """The operands' partial axes (axis -> reduction kind), all together."""
    keep: dict = {}
    for im in impls:
        if im.sharding is not None:
            keep.update(im.sharding.partial)
    return keep


def _plan_layout(call: Call) -> set:
    """Stage 4: every factor's mesh axes (``propagate``); returns the operands' partial
    axes that the factors would split (empty when the plan stands)."""
    impls = call.impls
    call.plan = _propagated(call)
    used = {a for d in call.plan.input_dims for ax in d for a in ax} | set(call.plan.partial)
    return set(_kept_partials(impls)) & used


def _reshard_operands(call: Call) -> Call:
    """Stage 4, continued: operands resharded to the planned layouts, and the outputs'
    shardings (checked against the output shapes)."""
    mesh, impls, plan = call.mesh, call.impls, call.plan
    targets = [
        ShardingSpec(mesh, dims, im.sharding.partial if im.sharding is not None else ())
        for im, dims in zip(impls, plan.input_dims, strict=True)
    ]
    out_partial = _kept_partials(impls)
    out_partial.update(plan.partial)
    name = call.op.name
    call.operands([reshard_to(a, t, op=name) for a, t in zip(call.args, targets, strict=True)])
    call.shardings = [ShardingSpec(mesh, dims, out_partial) for dims in plan.output_dims]
    for spec, shape in zip(call.shardings, call.shapes, strict=True):
        spec.check_shape(shape, name)
    return call


def _block_kwargs(call: Call) -> Call:
    """Stage 5: the physical kwargs of one device's block, behind the mesh dims (the
    operands now have the planned layouts)."""
    op, mesh, levels = call.op, call.mesh, call.out_levels
    nb = len(call.levels)
    local_in = [im.sharding.local_shape(im.shape) for im in call.impls]
    local_out = [s.local_shape(shape) for s, shape in zip(call.shardings, call.shapes, strict=True)]
    if op.physical:
        call.phys_kwargs = op.shard_physical(
            call.kwargs, mesh.local_mesh_shape, local_in, local_out
        )
        return call
    local = op.shard_kwargs(
        call.kwargs, [s[nb:] for s in local_in], [s[len(levels) :] for s in local_out]
    )
    local_batch = local_out[0][: len(levels)] if local_out else ()
    call.phys_kwargs = op.adapt_kwargs(
        local, len(levels) + mesh.ndim, mesh.local_mesh_shape + tuple(local_batch)
    )
    return call


_PLANS: OrderedDict = OrderedDict()  # a propagation per (op, kwargs, operands), LRU


def _propagated(call: Call):
    """``propagate`` of the op's rule for the call's operands, remembered: a training step
    binds the same ops on the same layouts every time."""
    op, impls, shapes, kwargs, nb = call.op, call.impls, call.shapes, call.kwargs, len(call.levels)
    try:
        key = (
            op.name,
            tuple(kwargs.items()),
            nb,
            tuple((im.shape, im.dtype, im.sharding) for im in impls),
            tuple(shapes),
        )
        hash(key)
    except TypeError:  # kwargs that are not hashable: no memo
        key = None
    if key is not None:
        hit = _PLANS.get(key)
        if hit is not None:
            _PLANS.move_to_end(key)
            return hit
    rule = physical_rule(op, impls, shapes, kwargs, nb)
    sizes = [prod(im.shape) * im.dtype.itemsize for im in impls]
    plan = propagate(rule, [im.sharding for im in impls], sizes, call.mesh)
    if key is not None:
        _PLANS[key] = plan
        if len(_PLANS) > 4096:
            _PLANS.popitem(last=False)
    return plan


def _align(call: Call) -> Call:
    """Stage 2: the same vmap levels on every operand (no kernel-side broadcasting of an
    unbatched operand: its buffer has mesh dims in front) and, for elementwise ops, the
    same rank."""
    op, args, impls = call.op, call.args, call.impls
    if op.scalar_operands and len(args) > 1:
        rank = max(len(im.logical_shape) for im in impls)
        if any(len(im.logical_shape) < rank for im in impls):
            args = [
                fn.reshape(a, (1,) * (rank - a.ndim) + a.shape) if a.ndim < rank else a
                for a in args
            ]
            impls = [a._impl for a in args]
    union = tuple(sorted({lv for im in impls for lv in im.levels}))
    if any(im.levels != union for im in impls):
        args = [a if a._impl.levels == union else fn.broadcast_levels(a, union) for a in args]
    if args is not call.args:
        call.operands(args)
    call.levels = union
    return call


# ----------------------------------------------------------------------------- resharding
def reshard_to(x: Tensor, target: ShardingSpec, op: str = "reshard") -> Tensor:
    """``x`` laid out as ``target`` (same value), with the fewest collectives this planner
    knows: partial axes that ``target`` does not keep are reduced (``reduce_scatter`` when
    the axis then splits a dim, else ``all_reduce``); an axis that moves from the minor end
    of one dim to the minor end of another is an ``all_to_all``; other axes a dim loses are
    ``all_gather``ed (minor first); axes a dim gains are local slices (no communication)."""
    s = x._impl.sharding
    if s is None:
        return fn.shard_op(x, target)
    if s.same_layout(target):  # the layout only: open/closed dims are shard()'s business
        return x
    if s.mesh != target.mesh:
        raise ShardingError(f"{op}: cannot reshard a value on {s.mesh} to {target.mesh}")
    x = _reduce_dropped_partials(x, target)
    for d in range(s.ndim):
        x = _release_axes(x, target, d)
    if x._impl.sharding.dims != target.dims:  # 3. axes a dim gains: local slices
        x = fn.slice_phys(x, target.dims)
    cur = x._impl.sharding
    if not cur.same_layout(target):  # pragma: no cover - the planner covers every pair of specs
        raise ShardingError(f"{op}: could not reshard {s} to {target} (reached {cur})")
    return x


def _extends(target: ShardingSpec, cur: ShardingSpec, dim: int, axis: str) -> bool:
    """Whether ``target``'s dim ``dim`` is ``cur``'s with ``axis`` added at the minor end."""
    return target.dims[dim][: len(cur.dims[dim]) + 1] == cur.dims[dim] + (axis,)


def _reduce_dropped_partials(x: Tensor, target: ShardingSpec) -> Tensor:
    """1. The partial axes ``target`` does not keep, reduced: a ``reduce_scatter`` where the
    axis then splits a dim at its minor end, one ``all_reduce`` per kind for the rest."""
    s = x._impl.sharding
    rest: dict = {}  # kind -> the axes one all_reduce completes together
    for a in s.partial_axes:
        if a in target.partial_axes:
            continue
        dim = target.dim_of(a)
        cur = x._impl.sharding
        if dim is not None and _extends(target, cur, dim, a) and a not in cur.sharded_axes:
            x = fn.reduce_scatter_phys(x, dim, (a,))
        else:
            rest.setdefault(s.partial_kinds[a], []).append(a)
    for kind, axes in rest.items():
        x = fn.all_reduce_phys(x, kind, tuple(axes))
    return x


def _release_axes(x: Tensor, target: ShardingSpec, d: int) -> Tensor:
    """2. The axes dim ``d`` holds beyond what ``target`` keeps there: each minor one that
    another dim gains at its minor end moves there (``all_to_all``), the rest are gathered
    (``all_gather``)."""
    have, want = x._impl.sharding.dims[d], target.dims[d]
    k = 0
    while k < min(len(have), len(want)) and have[k] == want[k]:
        k += 1
    extra = have[k:]
    while extra:
        a = extra[-1]
        dest = target.dim_of(a)
        if dest is None or dest == d or not _extends(target, x._impl.sharding, dest, a):
            return fn.all_gather_phys(x, d, extra)
        x = fn.all_to_all_phys(x, dest, d, (a,))
        extra = extra[:-1]
    return x
