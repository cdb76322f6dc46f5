"""``Operation``: the base of every op, the op protocol (shape rule, derivative rules,
sharding rule), and ``bind``, the entry to the op call pipeline (``ops/pipeline.py``;
``docs/architecture.md``, "The op call pipeline").

An op is a stateless singleton. Its user-facing ``__call__`` normalizes arguments (Python
scalars, dtype promotion, broadcasting, negative axes) and then calls ``bind(args, kwargs)``,
which makes one ``pipeline.Call`` record and runs the stages every op shares: align the
operands' vmap levels, compute the output shapes eagerly, translate the kwargs to the
physical layout, emit the node (``ops/pipeline.py`` lists them). When an operand is sharded,
``bind`` hands the record to ``spmd.bind_sharded`` (the sharded stages: partial operands
completed, the layout planned, operands resharded); it ends in the same ``emit``.

Unified internal signatures: ``vjp_rule(primals, cotangents, outputs, kwargs)`` and
``jvp_rule(primals, tangents, outputs, kwargs)`` take and return lists; backends lower
``(op_name, args, phys_kwargs) -> list``.

Structure is declared, rules derived (JAX's ``deflinear``/``defbilinear``): an op declared
``linear`` gets the JVP "apply the op to the tangents", one declared ``bilinear`` gets
``op(tx, y) + op(x, ty)``. Every op registers itself in ``OPS`` when it is made.
"""

from __future__ import annotations

from ..core.device import get_default_device
from ..core.ir import TensorImpl
from ..runtime.tensor import Tensor
from . import spmd
from .functions import fn
from .pipeline import Call, OpError, align, emit, physical_kwargs, shapes

__all__ = ["Operation", "OpError"]


def describe(shapes) -> str:
    """Shapes as ``(2, 3), (3,)`` for error messages."""
    return ", ".join(str(tuple(s)) for s in shapes)


OPS: dict[str, Operation] = {}
"""Every op by name (one singleton per name), in the order the ops were made."""


def _op_named(name: str) -> Operation:
    """The op registered as ``name`` (``Operation.__reduce__``)."""
    try:
        return OPS[name]
    except KeyError:
        raise LookupError(
            f"no op named {name!r} is registered in this process (create it before loading)"
        ) from None


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

    def described(self, kwargs: dict) -> str:
        """How an error names one use of the op (``nb.debug_nans``): its name, or what the
        user wrote where the op stands for a user function (``custom_vjp function f``)."""
        return self.name

    def __reduce__(self):
        # the singleton by name: a module holding an op (an activation) pickles, and
        # deepcopy keeps the one instance
        return (_op_named, (self.name,))

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
        """Stage 3 of the pipeline (``pipeline.shapes``): physical shapes, dtypes and devices
        of the outputs."""
        shapes, dtypes = self.infer(
            [im.logical_shape for im in impls], [im.dtype for im in impls], kwargs
        )
        if batch_shape:
            shapes = [batch_shape + tuple(s) for s in shapes]
        device = self.device_of(impls, kwargs)
        return shapes, dtypes, [device] * len(shapes)

    # ----------------------------------------------------------------- the pipeline
    def bind(self, args: list[Tensor], kwargs: dict):
        """The op call pipeline on normalized operands (``ops/pipeline.py``): returns the
        output tensor, or a list of them for an op with ``multiple_results``."""
        if self.arity is not None and len(args) != self.arity:
            raise TypeError(f"op {self.name} takes {self.arity} tensors, got {len(args)}")
        if self.collective:
            return self.bind_collective(args, kwargs)
        call = Call(self, args, kwargs)
        if call.sharded:
            return spmd.bind_sharded(call)
        if call.mixed:
            align(call)
        return emit(physical_kwargs(shapes(call)))

    def bind_collective(self, args, kwargs):
        """The pipeline of an op that places its outputs itself (``collective``): it
        decides the outputs' shardings and emits the node."""
        raise NotImplementedError(f"op {self.name} is not a collective")

    def implicit_broadcast(self, index: int, impl) -> bool:
        """True when operand ``index`` needs no level alignment because every backend's
        kernel broadcasts it (by default: an unbatched operand of an elementwise op)."""
        return self.scalar_operands and not impl.levels

    def rules_take_unbatched(self, index: int, impl) -> bool:
        """True when the op's derivative rules take operand ``index`` without level
        alignment (a stand-in that runs nothing, ``control_flow.ResidualOp``, aligns only
        the others). By default the operands the kernel broadcasts."""
        return self.implicit_broadcast(index, impl)


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
