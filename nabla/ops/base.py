"""``Operation``: the base of every op, and the ``__call__`` pipeline (spec/01).

An op is a stateless singleton. Its user-facing ``__call__`` normalizes arguments (Python
scalars, dtype promotion, broadcasting, negative axes) and then calls ``bind(args, kwargs)``,
the pipeline every op shares:

1. metadata: batch levels, traced flag, tangents of the inputs;
2. adaptation: align inputs to one set of vmap levels; translate logical kwargs to physical
   ones (``adapt_kwargs``); sharding hook;
3. the node's static structural key ``(backend op name, physical kwargs)``;
4. ``compute_physical_shape``: output shapes/dtypes/devices, eagerly, validating inputs;
5. optional eager execution (``NABLA_EAGER_MAX_GRAPH=1``), checked against step 4;
6. packaging: promise tensors registered as pending;
7. the ``OpNode`` (original kwargs for rules, physical kwargs for backends);
8. auto-reduction hook (partial sharded results);
9. forward-mode tangents via ``jvp_rule``, one transform level at a time.

Unified internal signatures (spec/05): ``vjp_rule(primals, cotangents, outputs, kwargs)`` and
``jvp_rule(primals, tangents, outputs, kwargs)`` take and return lists; backends lower
``(op_name, args, phys_kwargs) -> list``.
"""

from __future__ import annotations

import weakref

from ..core.config import CONFIG
from ..core.device import get_default_device
from ..core.graph import GRAPH
from ..core.state import EMPTY, STATE, hide_levels_from, level_sizes, live_grad_levels, visible
from ..core.tensor import OpNode, Tensor, TensorImpl

__all__ = ["Operation", "OpError"]


class OpError(ValueError):
    """Raised for a bad argument to an op (wrong shape, axis, ...)."""


def describe(shapes) -> str:
    return ", ".join(str(tuple(s)) for s in shapes)


class Operation:
    """Base class of all ops. Subclasses set ``name`` and implement ``infer`` and rules."""

    name: str = ""
    backend_name: str | None = None  # defaults to ``name``
    multiple_results: bool = False
    differentiable: bool = True
    # elementwise ops: kernels broadcast NumPy-style, so operands without vmap levels are
    # never broadcast by extra ops (rules unbroadcast their cotangents)
    scalar_operands: bool = False
    # vmap plumbing ops compute their physical kwargs themselves, even with no batch dims
    physical: bool = False
    # host ops (random draws) run with NumPy before the rest of the graph, on every backend
    host_only: bool = False
    # outputs never carry autodiff history (stop_gradient / detach)
    cuts_trace: bool = False

    def __init__(self):
        if self.backend_name is None:
            self.backend_name = self.name

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
        return levels

    def vjp_rule(self, primals, cotangents, outputs, kwargs) -> list:
        raise NotImplementedError(f"op {self.name} has no vjp_rule")

    def jvp_rule(self, primals, tangents, outputs, kwargs) -> list:
        raise NotImplementedError(f"op {self.name} has no jvp_rule")

    def batch_rule(self, args: list[Tensor], kwargs: dict):
        """Optional: compute the op on inputs that carry vmap levels with other ops.

        Return ``NotImplemented`` to use the generic prefix path (the kernel sees the batch
        prefix and ``adapt_kwargs`` shifted its axes)."""
        return NotImplemented

    has_batch_rule = False

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return None

    def device_of(self, impls, kwargs):
        dev = kwargs.get("device")
        if dev is not None:
            return dev
        if not impls:
            return get_default_device()
        for im in impls:  # an accelerator operand decides (2.0 * gpu_x runs on the GPU)
            if not im.device.is_cpu:
                return im.device
        return impls[0].device

    def compute_physical_shape(self, impls, kwargs, levels, batch_shape, output_sharding=None):
        """Step 4: per-shard physical shapes, dtypes and devices of the outputs."""
        shapes, dtypes = self.infer(
            [im.logical_shape for im in impls], [im.dtype for im in impls], kwargs
        )
        if batch_shape:
            shapes = [batch_shape + tuple(s) for s in shapes]
        device = self.device_of(impls, kwargs)
        return shapes, dtypes, [device] * len(shapes)

    # ----------------------------------------------------------------- the pipeline
    def bind(self, args: list[Tensor], kwargs: dict):
        impls = [a._impl for a in args]

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
        if traced:
            if STATE.no_grad or self.cuts_trace:
                traced = EMPTY
            else:
                traced = traced & live_grad_levels  # finished transforms drop out

        if levels and self.has_batch_rule:
            out = self.batch_rule(args, kwargs)
            if out is not NotImplemented:
                return out

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

        # 3. static structural key of this node
        key = (self.backend_name, tuple(phys_kwargs.items()))

        # 4. eager shapes
        shapes, dtypes, devices = self.compute_physical_shape(impls, kwargs, levels, batch_shape)

        # 6./7. packaging and the OpNode
        node = OpNode(self, tuple(impls), kwargs, phys_kwargs, key)
        outs = []
        for i, (shape, dtype, dev) in enumerate(zip(shapes, dtypes, devices, strict=True)):
            outs.append(TensorImpl(shape, dtype, dev, levels, node, i, None, traced))
        node.outputs = tuple(weakref.ref(o) for o in outs)
        GRAPH.pending.add_node(node)
        node.out_specs = tuple(zip(dtypes, shapes, strict=True))
        if STATE.recording is not None:
            STATE.recording.append(node)
        results = [Tensor._wrap(o) for o in outs]

        # 8. auto-reduction of partial (sharded) results: no mesh in a single-device graph.

        # 9. forward-mode tangents
        if has_tangent and self.differentiable:
            _apply_jvp(self, args, results, kwargs)

        # 5. eager execution (debug/verification mode): realize now and check step 4.
        if CONFIG.eager_graph:
            _verify_eager(self, outs)

        return results if self.multiple_results else results[0]

    def implicit_broadcast(self, index: int, impl) -> bool:
        """True when operand ``index`` needs no level alignment because every backend's
        kernel broadcasts it (by default: an unbatched operand of an elementwise op)."""
        return self.scalar_operands and not impl.levels

    def _align(self, args, impls):
        from .batching import broadcast_levels

        union = tuple(sorted({lv for im in impls for lv in im.levels}))
        new_args = []
        for i, (a, im) in enumerate(zip(args, impls, strict=True)):
            if im.levels != union and not self.implicit_broadcast(i, im):
                a = broadcast_levels(a, union)
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
            out_t = op.jvp_rule(args, tans, results, kwargs)
        for r, t in zip(results, out_t, strict=True):
            if t is None or not r._impl.dtype.is_float:
                continue
            if r._impl.tangents is None:
                r._impl.tangents = {}
            r._impl.tangents[lv] = t._impl


def _verify_eager(op, outs):
    GRAPH.evaluate(outs)
    from ..backends import buffer_shape_dtype

    for o in outs:
        shape, dtype = buffer_shape_dtype(o.buffer)
        if tuple(shape) != tuple(o.shape) or dtype != o.dtype:
            raise RuntimeError(
                f"op {op.name}: backend produced {dtype} {tuple(shape)} but the shape rule "
                f"predicted {o.dtype} {o.shape}"
            )
