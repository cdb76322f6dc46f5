"""``Operation``: the base of every op, and the ``__call__`` pipeline (``docs/architecture.md``,
"The op call pipeline").

An op is a stateless singleton. Its user-facing ``__call__`` normalizes arguments (Python
scalars, dtype promotion, broadcasting, negative axes) and then calls ``bind(args, kwargs)``,
the pipeline every op shares:

1. metadata: batch levels, traced flag, tangents of the inputs;
2. adaptation: align inputs to one set of vmap levels; translate logical kwargs to physical
   ones (``adapt_kwargs``);
3. the node's static structural key ``(backend op name, physical kwargs)``;
4. ``compute_physical_shape``: output shapes/dtypes/devices, eagerly, validating inputs;
   an output larger than ``CONFIG.max_alloc_bytes`` (``NABLA_MAX_ALLOC_BYTES``, default the
   machine's physical memory) is refused here, on every backend;
5. optional eager execution (``NABLA_EAGER_MAX_GRAPH=1``), checked against step 4;
6. packaging: promise tensors registered as pending;
7. the ``OpNode`` (original kwargs for rules, physical kwargs for backends);
8. forward-mode tangents, one transform level at a time.

When an operand is sharded, ``bind`` hands the call to ``spmd.bind_sharded`` (the sharded
stages: resharding the operands, partial outputs completed lazily where a consumer
needs them); it ends in the same ``emit`` as the unsharded path.

Unified internal signatures: ``vjp_rule(primals, cotangents, outputs, kwargs)`` and
``jvp_rule(primals, tangents, outputs, kwargs)`` take and return lists; backends lower
``(op_name, args, phys_kwargs) -> list``.

Structure is declared, rules derived (JAX's ``deflinear``/``defbilinear``): an op declared
``linear`` gets the JVP "apply the op to the tangents", one declared ``bilinear`` gets
``op(tx, y) + op(x, ty)``. Every op registers itself in ``OPS`` when it is made.
"""

from __future__ import annotations

import weakref
from math import prod

from ..backends import buffer_shape_dtype
from ..core.config import CONFIG
from ..core.device import get_default_device
from ..core.ir import OpNode, TensorImpl
from ..core.state import EMPTY, STATE, hide_levels_from, level_sizes, live_grad_levels, visible
from ..runtime.graph import GRAPH
from ..runtime.tensor import Tensor
from . import spmd
from .functions import fn

__all__ = ["Operation", "OpError"]


class OpError(ValueError):
    """Raised for a bad argument to an op (wrong shape, axis, ...)."""


def describe(shapes) -> str:
    return ", ".join(str(tuple(s)) for s in shapes)


OPS: dict[str, Operation] = {}
"""Every op by name (one singleton per name), in the order the ops were made."""


class Operation:
    """Base class of all ops. Subclasses set ``name`` and implement ``infer`` and rules."""

    name: str = ""
    backend_name: str | None = None  # defaults to ``name``
    arity: int | None = 1  # number of tensor inputs; None: any number
    multiple_results: bool = False
    differentiable: bool = True
    # declared structure from which the JVP is derived (see the module docstring):
    # ``linear`` in all inputs jointly except ``index_args`` (indices, predicates), which
    # tangents never replace; ``bilinear`` in each of its two inputs separately
    linear: bool = False
    bilinear: bool = False
    index_args: tuple = ()
    # elementwise ops: kernels broadcast NumPy-style, so operands without vmap levels are
    # never broadcast by extra ops (rules unbroadcast their cotangents)
    scalar_operands: bool = False
    # vmap plumbing ops compute their physical kwargs themselves, even with no batch dims
    physical: bool = False
    # host ops (random draws) run with NumPy before the rest of the graph, on every backend
    host_only: bool = False
    # outputs never carry autodiff history (stop_gradient / detach)
    cuts_trace: bool = False
    # sharding (see ``spmd``): ops that only move data let partial terms of any kind pass;
    # a reduction passes partial terms of its own kind; ``runs_sharded = False`` ops get
    # whole operands; collectives place their outputs themselves
    data_movement: bool = False
    partial_reduce: str | None = None
    # how partial *sums* pass: "joint" (linear in all data operands together: each must
    # carry the same terms), "bilinear" (linear in each operand: one may be partial),
    # "first" (linear in the first operand only); default: from ``linear``/``bilinear``
    partial_sum: str | None = None
    runs_sharded: bool = True
    collective: bool = False

    def __init__(self):
        if self.backend_name is None:
            self.backend_name = self.name
        other = OPS.get(self.name)
        if other is not None and type(other) is not type(self):
            raise RuntimeError(f"two ops named {self.name!r}: {other!r} and {self!r}")
        OPS[self.name] = self

    def __repr__(self):
        return f"<op {self.name}>"

    # ----------------------------------------------------------------- rules (override)
    def infer(self, shapes: list[tuple], dtypes: list, kwargs: dict):
        """Logical output shapes and dtypes from logical input shapes/dtypes. Validates."""
        raise NotImplementedError(f"op {self.name} must implement infer()")

    def adapt_kwargs(self, kwargs: dict, nb: int, batch_shape: tuple) -> dict:
        """Translate logical kwargs to the physical layout (``nb`` leading batch dims)."""
        return kwargs

    def out_levels(self, impls: list[TensorImpl], levels: tuple, kwargs: dict) -> tuple:
        """The vmap levels of the outputs, given the operands' aligned ``levels`` (ops that
        add or drop a level, such as vmap's entry and exit, override it)."""
        return levels

    def levels_per_output(self, impls: list[TensorImpl], kwargs: dict) -> list | None:
        """One tuple of vmap levels per output, for an op whose outputs do not share the
        aligned operands' levels (``custom_call``'s outputs pass operands through as they
        are); None: every output has the call's levels."""
        return None

    def vjp_rule(self, primals, cotangents, outputs, kwargs) -> list:
        """Reverse mode: one cotangent (or None) per primal input, from the cotangents of
        the outputs. Written with nabla ops, so it is itself differentiable and lazy.

        Args:
            primals: the input tensors of the call.
            cotangents: one per output (None where an output has none).
            outputs: the call's output tensors.
            kwargs: the call's logical kwargs.
        """
        raise NotImplementedError(f"op {self.name} has no vjp_rule")

    def jvp_rule(self, primals, tangents, outputs, kwargs) -> list:
        """Forward mode: one tangent per output, from one tangent (or None) per input
        (``linear``/``bilinear`` ops get theirs derived; see :meth:`jvp`)."""
        raise NotImplementedError(f"op {self.name} has no jvp_rule")

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        """The op's factor template (``nabla.core.sharding.FactorRule``) over logical shapes
        (physical shapes for ``physical`` ops). Elementwise ops share one by default."""
        if self.scalar_operands:
            return spmd.elementwise_rule(in_shapes, out_shapes)
        raise NotImplementedError(f"op {self.name} declares no sharding rule")

    def keeps_partial(self, kwargs) -> bool:
        """False when this call must not see partial terms even though the op is linear
        (``cast`` to an integer dtype truncates each term)."""
        return True

    def shard_kwargs(self, kwargs, local_in_shapes, local_out_shapes) -> dict:
        """The logical kwargs for one device's block, given the blocks' logical shapes
        (ops whose kwargs hold shapes override it)."""
        return kwargs

    def shard_physical(self, kwargs, mesh_shape, local_in_shapes, local_out_shapes) -> dict:
        """Physical kwargs of a ``physical`` op for blocks behind the mesh dims."""
        raise NotImplementedError(f"op {self.name} cannot run on sharded operands")

    def jvp(self, primals, tangents, outputs, kwargs) -> list:
        """The forward-mode rule in force: derived from a ``linear``/``bilinear``
        declaration when there is one, else the op's own ``jvp_rule``."""
        if self.linear:
            return _linear_jvp(self, primals, tangents, outputs, kwargs)
        if self.bilinear:
            return _bilinear_jvp(self, primals, tangents, kwargs)
        return self.jvp_rule(primals, tangents, outputs, kwargs)

    def rebind(self, args: list[Tensor], kwargs: dict):
        """This op on other operands of the same kinds (the derived rules use it); an op
        whose primitive needs operands prepared first overrides it."""
        return self.bind(list(args), kwargs)

    @property
    def jvp_source(self) -> str | None:
        """Where the op's JVP comes from: ``"linear"``, ``"bilinear"``, ``"own"`` or None."""
        if not self.differentiable:
            return None
        if self.linear or self.bilinear:
            return "linear" if self.linear else "bilinear"
        return "own" if type(self).jvp_rule is not Operation.jvp_rule else None

    @property
    def has_vjp(self) -> bool:
        """Whether reverse mode can go through this op (it declares a ``vjp_rule``)."""
        return self.differentiable and type(self).vjp_rule is not Operation.vjp_rule

    def device_of(self, impls, kwargs):
        """Where the call runs: a ``device`` kwarg, else the first accelerator operand,
        else the first operand's device (the default device for an op with none)."""
        dev = kwargs.get("device")
        if dev is not None:
            return dev
        if not impls:
            return get_default_device()
        for im in impls:  # an accelerator operand decides (2.0 * gpu_x runs on the GPU)
            if not im.device.is_cpu:
                return im.device
        return impls[0].device

    def compute_physical_shape(self, impls, kwargs, levels, batch_shape):
        """Step 4: physical shapes, dtypes and devices of the outputs."""
        shapes, dtypes = self.infer(
            [im.logical_shape for im in impls], [im.dtype for im in impls], kwargs
        )
        if batch_shape:
            shapes = [batch_shape + tuple(s) for s in shapes]
        device = self.device_of(impls, kwargs)
        return shapes, dtypes, [device] * len(shapes)

    # ----------------------------------------------------------------- the pipeline
    def bind(self, args: list[Tensor], kwargs: dict):
        """The op call pipeline on normalized operands (the module docstring's steps;
        ``docs/architecture.md``, "The op call pipeline"): returns the output tensor, or a
        list of them for an op with ``multiple_results``."""
        impls = [a._impl for a in args]
        if self.arity is not None and len(impls) != self.arity:
            raise TypeError(f"op {self.name} takes {self.arity} tensors, got {len(impls)}")
        if self.collective:
            return self.bind_collective(args, kwargs)
        for im in impls:
            if im.sharding is not None:
                return spmd.bind_sharded(self, args, kwargs)

        # 1. metadata
        levels = None
        mixed = False
        traced = EMPTY
        has_tangent = False
        for i, im in enumerate(impls):
            t = im.traced
            if t and t is not traced:
                traced = t if not traced else traced | t
            if im.tangents:
                has_tangent = True
            if self.implicit_broadcast(i, im):
                continue  # the kernel broadcasts this operand itself (e.g. a scalar constant)
            if levels is None:
                levels = im.levels
            elif im.levels != levels:
                mixed = True
        if levels is None:
            levels = ()

        # 2. adaptation: align batch levels, translate kwargs
        if mixed:
            args, impls, levels = self._align(args, impls)
        nb = len(levels)
        batch_shape = ()
        if nb:
            batch_shape = tuple(level_sizes[lv] for lv in levels)
        phys_kwargs = (
            self.adapt_kwargs(kwargs, nb, batch_shape) if (nb or self.physical) else kwargs
        )
        out_lv = self.out_levels(impls, levels, kwargs)
        if out_lv is not levels:
            levels = out_lv
            batch_shape = tuple(level_sizes[lv] for lv in levels)

        # 4. eager shapes (3., the node's structural key, is made by ``_emit``)
        shapes, dtypes, devices = self.compute_physical_shape(impls, kwargs, levels, batch_shape)
        return self._emit(
            args,
            impls,
            kwargs,
            phys_kwargs,
            levels,
            shapes,
            dtypes,
            devices,
            traced,
            has_tangent,
            None,
            self.levels_per_output(impls, kwargs),
        )

    def emit(self, args, kwargs, phys_kwargs, levels, shapes, dtypes, devices, shardings):
        """Steps 6-8 for a call whose operands, physical kwargs, global output shapes and
        output shardings (one ``ShardingSpec`` or None per output) are decided."""
        impls = [a._impl for a in args]
        traced = EMPTY
        has_tangent = False
        for im in impls:
            if im.traced:
                traced = traced | im.traced
            if im.tangents:
                has_tangent = True
        return self._emit(
            args,
            impls,
            kwargs,
            phys_kwargs,
            levels,
            shapes,
            dtypes,
            devices,
            traced,
            has_tangent,
            shardings,
        )

    def _emit(
        self,
        args,
        impls,
        kwargs,
        phys_kwargs,
        levels,
        shapes,
        dtypes,
        devices,
        traced,
        has_tangent,
        shardings,
        levels_each=None,
    ):
        if traced:
            if STATE.no_grad or self.cuts_trace:
                traced = EMPTY
            else:
                traced = traced & live_grad_levels  # finished transforms drop out
        # 3. the node's static structural key; 6./7. packaging and the OpNode
        key = (self.backend_name, tuple(phys_kwargs.items()))
        node = OpNode(self, tuple(impls), kwargs, phys_kwargs, key)
        outs = []
        # outputs bigger than memory are refused here; one of the first input's shape and
        # dtype is no bigger than a tensor that exists already (the common case, unsized)
        first = impls[0] if impls else None
        for i, (shape, dtype, dev) in enumerate(zip(shapes, dtypes, devices, strict=True)):
            lv = levels if levels_each is None else levels_each[i]
            if first is None or shape is not first.shape or dtype is not first.dtype:
                _check_alloc(self, shape, dtype, len(lv))
            outs.append(TensorImpl(shape, dtype, dev, lv, node, i, None, traced))
        if shardings is None:
            node.out_specs = tuple(zip(dtypes, shapes, strict=True))
        else:
            for o, spec in zip(outs, shardings, strict=True):
                o.sharding = spec
            node.out_specs = tuple((o.dtype, o.buffer_shape) for o in outs)
        node.outputs = tuple(weakref.ref(o) for o in outs)
        GRAPH.pending.add_node(node)
        if STATE.recording is not None:
            STATE.recording.append(node)
        results = [Tensor._wrap(o) for o in outs]

        # 8. forward-mode tangents
        if has_tangent and self.differentiable:
            _apply_jvp(self, args, results, kwargs)

        # 5. eager execution (debug/verification mode): realize now and check step 4.
        if CONFIG.eager_graph:
            _verify_eager(self, outs)

        return results if self.multiple_results else results[0]

    def bind_collective(self, args, kwargs):
        """The pipeline of an op that places its outputs itself (``collective``): it
        decides the outputs' shardings and emits the node."""
        raise NotImplementedError(f"op {self.name} is not a collective")

    def implicit_broadcast(self, index: int, impl) -> bool:
        """True when operand ``index`` needs no level alignment because every backend's
        kernel broadcasts it (by default: an unbatched operand of an elementwise op)."""
        return self.scalar_operands and not impl.levels

    def _align(self, args, impls):
        union = tuple(sorted({lv for im in impls for lv in im.levels}))
        new_args = []
        for i, (a, im) in enumerate(zip(args, impls, strict=True)):
            if im.levels != union and not self.implicit_broadcast(i, im):
                a = fn.broadcast_levels(a, union)
            new_args.append(a)
        return new_args, [a._impl for a in new_args], union


def _apply_jvp(op: Operation, args, results, kwargs):
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


def _linear_jvp(op, primals, tangents, outputs, kwargs) -> list:
    """JVP of an op linear in its non-index inputs: the op applied to the tangents (zeros for
    inputs without one, primals at ``index_args``)."""
    n = len(outputs)
    index_args = op.index_args
    if all(t is None for i, t in enumerate(tangents) if i not in index_args):
        return [None] * n
    if not any(o.dtype.is_float for o in outputs):
        return [None] * n
    args = [
        p if i in index_args else (fn.zeros_like(p) if t is None else t)
        for i, (p, t) in enumerate(zip(primals, tangents, strict=True))
    ]
    out = op.rebind(args, kwargs)
    return list(out) if op.multiple_results else [out]


def _bilinear_jvp(op, primals, tangents, kwargs) -> list:
    """JVP of an op linear in each of its two inputs: ``op(tx, y) + op(x, ty)``."""
    (x, y), (tx, ty) = primals, tangents
    out = None if tx is None else op.rebind([tx, y], kwargs)
    if ty is not None:
        t = op.rebind([x, ty], kwargs)
        out = t if out is None else out + t
    return [out]


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
        else "this machine's physical memory; NABLA_MAX_ALLOC_BYTES overrides it"
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
