"""The op call pipeline (``docs/architecture.md``, "The op call pipeline"): one record of
the call, :class:`Call`, and the stages every call goes through. ``Operation.bind`` runs
them, in this order; each takes the record and returns it:

1. ``Call(op, args, kwargs)``: the metadata, read once: the operands' vmap levels, their
   traced levels and tangents, whether any is sharded;
2. :func:`align`: the operands brought to one set of vmap levels (run only when their
   levels differ, ``Call.mixed``);
3. :func:`shapes`: the outputs' vmap levels, shapes, dtypes and devices, eagerly
   (``infer``), validating the call;
4. :func:`physical_kwargs`: the logical kwargs translated to the buffers' layout
   (``adapt_kwargs``: axes count past the vmap batch prefix);
5. :func:`emit`: the node's structural key ``(backend op name, physical kwargs)``, the
   ``OpNode`` and its outputs (promise tensors, registered as pending; an output larger
   than ``CONFIG.max_alloc_bytes`` is refused), forward-mode tangents one transform level
   at a time; while ``nb.debug_nans`` is on, the user's line that called the op
   (``core.debug``); with ``NABLA_EAGER_MAX_GRAPH=1`` the node run at once and checked
   against step 3.

A call with a sharded operand takes the same record through ``spmd.bind_sharded``: partial
operands completed before (2), and between (3) and (5) the layout planned, the operands
resharded and the kwargs translated to one device's block instead of (4). Ops that place
their outputs themselves (collectives, compiled calls) fill in steps 3-4 with
:meth:`Call.placed` and end in the same :func:`emit`.
"""

from __future__ import annotations

import weakref
from math import prod

from ..backends import buffer_shape_dtype
from ..core.config import CONFIG
from ..core.debug import user_site
from ..core.ir import OpNode, TensorImpl
from ..core.state import (
    EMPTY,
    STATE,
    grad_cut,
    hide_levels_from,
    level_sizes,
    live_grad_levels,
    visible,
)
from ..runtime.graph import GRAPH
from ..runtime.tensor import Tensor
from .functions import fn

__all__ = ["Call", "OpError", "align", "shapes", "physical_kwargs", "emit"]


class OpError(ValueError):
    """Raised for a bad argument to an op (wrong shape, axis, ...)."""


class Call:
    """One op call, as the pipeline's stages fill it in.

    Set at creation: ``op``, ``args`` (operand tensors), ``impls`` (their ``TensorImpl``),
    ``kwargs`` (logical), ``levels`` (the operands' vmap levels; after :func:`align` the
    one set they share), ``traced`` (the transform levels differentiating an operand),
    ``has_tangent``, ``sharded`` (an operand is sharded). Filled in by the stages:
    ``batch_shape`` (sizes of ``levels``), ``out_levels``, ``shapes``/``dtypes``/``devices``
    (per output, physical), ``levels_each`` (per-output levels, or None: all
    ``out_levels``), ``phys_kwargs``, ``shardings`` (per output, or None unsharded). The
    sharded stages add ``mesh`` and the layout ``plan``.
    """

    __slots__ = (
        "op",
        "args",
        "impls",
        "kwargs",
        "levels",
        "mixed",
        "traced",
        "has_tangent",
        "sharded",
        "batch_shape",
        "out_levels",
        "shapes",
        "dtypes",
        "devices",
        "levels_each",
        "phys_kwargs",
        "shardings",
        "mesh",
        "plan",
    )

    def __init__(self, op, args: list, kwargs: dict):
        self.op = op
        self.kwargs = kwargs
        self.shardings = None  # the sharded stages' ``mesh`` and ``plan`` are set by them
        self.args = args
        impls = self.impls = [a._impl for a in args]
        implicit = op.implicit_broadcast
        levels = None
        mixed = sharded = has_tangent = False
        traced = EMPTY
        for i, im in enumerate(impls):
            t = im.traced
            if t and t is not traced:
                traced = t if not traced else traced | t
            if im.tangents:
                has_tangent = True
            if im.sharding is not None:
                sharded = True
            if implicit(i, im):
                continue  # the kernel broadcasts this operand itself (e.g. a scalar constant)
            if levels is None:
                levels = im.levels
            elif im.levels != levels:
                mixed = True
        self.levels = () if levels is None else levels
        self.mixed = mixed
        self.traced = traced
        self.has_tangent = has_tangent
        self.sharded = sharded

    def operands(self, args: list) -> Call:
        """Take ``args`` as the call's operands and read their metadata again (the sharded
        stages replace operands: resharded operands are new tensors)."""
        self.__init__(self.op, args, self.kwargs)
        return self

    def placed(self, phys_kwargs: dict, shapes, dtypes, devices, shardings=None, levels=None):
        """Steps 3-4 decided by the op itself (collectives, compiled calls): the physical
        kwargs, the outputs' global shapes, dtypes, devices and shardings (one
        ``ShardingSpec`` or None each; None: unsharded) and their vmap levels (default:
        the operands')."""
        self.phys_kwargs = phys_kwargs
        self.shapes, self.dtypes, self.devices = shapes, dtypes, devices
        self.shardings = shardings
        self.out_levels = self.levels if levels is None else levels
        self.levels_each = None
        return self


# ----------------------------------------------------------------------------- stages
def align(call: Call) -> Call:
    """Stage 2: operands with different vmap levels are broadcast to their union, except
    those the kernel broadcasts itself (``implicit_broadcast``)."""
    if not call.mixed:
        return call
    op = call.op
    union = tuple(sorted({lv for im in call.impls for lv in im.levels}))
    args = [
        a if im.levels == union or op.implicit_broadcast(i, im) else fn.broadcast_levels(a, union)
        for i, (a, im) in enumerate(zip(call.args, call.impls, strict=True))
    ]
    call.args = args
    call.impls = [a._impl for a in args]
    call.levels = union
    call.mixed = False
    return call


def shapes(call: Call) -> Call:
    """Stage 3: the outputs' vmap levels (``out_levels``: an op may add or drop one) and
    their physical shapes, dtypes and devices (``compute_physical_shape``)."""
    op, impls, kwargs, levels = call.op, call.impls, call.kwargs, call.levels
    batch = tuple([level_sizes[lv] for lv in levels]) if levels else ()
    call.batch_shape = batch
    out = op.out_levels(impls, levels, kwargs)
    if out is not levels:
        batch = tuple([level_sizes[lv] for lv in out])
    call.out_levels = out
    call.shapes, call.dtypes, call.devices = op.compute_physical_shape(impls, kwargs, out, batch)
    call.levels_each = op.levels_per_output(impls, kwargs)
    return call


def physical_kwargs(call: Call) -> Call:
    """Stage 4: the logical kwargs in the buffers' layout, behind the operands' batch dims
    (the kwargs themselves when there are none, unless the op is vmap plumbing)."""
    op = call.op
    if call.levels or op.physical:
        call.phys_kwargs = op.adapt_kwargs(call.kwargs, len(call.levels), call.batch_shape)
    else:
        call.phys_kwargs = call.kwargs
    return call


def emit(call: Call):
    """Stage 5: the node and its outputs (module docstring); returns the output tensor, or
    the list of them for an op with ``multiple_results``."""
    op, impls = call.op, call.impls
    traced = call.traced
    if traced:
        if op.cuts_trace:
            traced = EMPTY
        else:
            if STATE.no_grad is not None:
                traced = grad_cut(traced)
            traced = traced & live_grad_levels  # finished transforms drop out
    phys = call.phys_kwargs
    node = OpNode(op, tuple(impls), call.kwargs, phys, (op.backend_name, tuple(phys.items())))
    levels, levels_each = call.out_levels, call.levels_each
    outs = []
    # outputs bigger than memory are refused here; one of the first input's shape and
    # dtype is no bigger than a tensor that exists already (the common case, unsized)
    first = impls[0] if impls else None
    for i, (shape, dtype, dev) in enumerate(
        zip(call.shapes, call.dtypes, call.devices, strict=True)
    ):
        lv = levels if levels_each is None else levels_each[i]
        if first is None or shape is not first.shape or dtype is not first.dtype:
            _check_alloc(op, shape, dtype, len(lv))
        outs.append(TensorImpl(shape, dtype, dev, lv, node, i, None, traced))
    if call.shardings is None:
        node.out_specs = tuple(zip(call.dtypes, call.shapes, strict=True))
    else:
        for o, spec in zip(outs, call.shardings, strict=True):
            o.sharding = spec
        node.out_specs = tuple([(o.dtype, o.buffer_shape) for o in outs])
    # (list comprehensions: a generator costs ~0.2 us more per call on this hot path)
    node.outputs = tuple([weakref.ref(o) for o in outs])
    if CONFIG.debug_values:  # nb.debug_nans / debug_infs: remember the user's line
        node.site = user_site()
    if STATE.trace_args is None and STATE.body_args is None:
        # (a node a compile or loop-body trace records is the trace's: another thread's
        # ``nb.realize()`` computing it had made the trace take its values for constants)
        GRAPH.pending.add_node(node)
    if STATE.recording is not None:
        STATE.recording.append(node)
        node.cut = STATE.grad_block
    results = [Tensor._wrap(o) for o in outs]
    if call.has_tangent and op.differentiable:
        _apply_jvp(op, call.args, results, call.kwargs)
    if CONFIG.eager_graph:
        _verify_eager(op, outs)
    return results if op.multiple_results else results[0]


def _apply_jvp(op, args, results, kwargs):
    lvls = set()
    for a in args:
        t = a._impl.tangents
        if t:
            lvls.update(lv for lv in t if visible(lv))
    for lv in sorted(lvls):
        tans = []
        for a in args:
            t = a._impl.tangents
            tans.append(Tensor._wrap(t[lv]) if t and lv in t else None)
        with hide_levels_from(lv):
            out_t = op.jvp(args, tans, results, kwargs)
        for r, t in zip(results, out_t, strict=True):
            if t is None or not r._impl.dtype.is_float:
                continue
            if r._impl.tangents is None:
                r._impl.tangents = {}
            r._impl.tangents[lv] = t._impl


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # not reached


def _check_alloc(op, shape, dtype, nb):
    """Refuse an output of ``shape`` (physical, ``nb`` vmap batch dims first) whose bytes
    exceed ``CONFIG.max_alloc_bytes``, naming the logical shape the user asked for and the
    vmap batch size."""
    n = prod(shape)
    limit = CONFIG.max_alloc_bytes
    if n << 3 <= limit:  # 8 bytes: the widest dtype
        return
    size = n * dtype.itemsize
    if size <= limit:
        return
    logical, batch = tuple(shape[nb:]), tuple(shape[:nb])
    where = ""
    if batch:
        sizes = batch[0] if len(batch) == 1 else batch
        where = f", batched by vmap (batch size {sizes}; physical shape {tuple(shape)})"
    source = CONFIG.max_alloc_source
    bound = (
        "NABLA_MAX_ALLOC_BYTES"
        if source == "NABLA_MAX_ALLOC_BYTES"
        else f"{source}; NABLA_MAX_ALLOC_BYTES overrides it"
    )
    raise OpError(
        f"{op.name}: the result of shape {logical} and dtype {dtype.value}{where} would take "
        f"{_bytes(size)}, more than the {_bytes(limit)} allowed ({bound})"
    )


def _verify_eager(op, outs):
    GRAPH.evaluate(outs)
    for o in outs:
        shape, dtype = buffer_shape_dtype(o.buffer)
        if tuple(shape) != tuple(o.buffer_shape) or dtype != o.dtype:
            raise RuntimeError(
                f"op {op.name}: backend produced {dtype} {tuple(shape)} but the shape rule "
                f"predicted {o.dtype} {o.buffer_shape}"
            )
