"""The intermediate representation: tensors as records, recorded op applications, programs.

- ``TensorImpl``: everything known about one tensor value (physical shape, dtype, device,
  vmap levels, the producing ``OpNode`` or a realized buffer, autodiff state).
- ``OpNode``: one recorded op application (what produced a promise tensor).
- ``Program``: what a backend runs: a flat list of ``Instruction``s over numbered slots,
  built by ``build_program`` and nowhere else.
- ``SymDim``: a dimension size that is symbolic for ``compile``.

This module is data only: it runs nothing, and imports nothing above ``nabla.core``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from .device import Device
from .dtypes import DType

__all__ = [
    "SymDim",
    "OpNode",
    "TensorImpl",
    "TensorSpec",
    "Instruction",
    "Program",
    "build_program",
    "symbolize",
    "substitute_dims",
]


# ----------------------------------------------------------------------------- symbolic dims
class SymDim(int):
    """A dimension size that ``compile`` treats as symbolic: an int carrying a name.

    It behaves as its current size everywhere (shape rules, kwargs); backends that can
    compile one model for every size see the name through :func:`symbolize`.
    """

    def __new__(cls, value, name):
        obj = super().__new__(cls, value)
        obj.name = name
        return obj

    def __repr__(self):
        return int.__repr__(self)

    __str__ = __repr__


def symbolize(obj):
    """``obj`` (nested tuples/dicts of kwargs, shapes, specs) with every ``SymDim`` replaced
    by its name: the form a backend compiles once for every size."""
    if isinstance(obj, SymDim):
        return obj.name
    if isinstance(obj, tuple):
        out = tuple(symbolize(o) for o in obj)
        return type(obj)(*out) if hasattr(obj, "_fields") else out
    if isinstance(obj, dict):
        return {k: symbolize(v) for k, v in obj.items()}
    return obj


def substitute_dims(obj, sizes: dict):
    """``obj`` with each ``SymDim`` named in ``sizes`` set to that size (name kept)."""
    if isinstance(obj, SymDim):
        return SymDim(sizes.get(obj.name, int(obj)), obj.name)
    if isinstance(obj, tuple):
        out = tuple(substitute_dims(o, sizes) for o in obj)
        return type(obj)(*out) if hasattr(obj, "_fields") else out
    if isinstance(obj, dict):
        return {k: substitute_dims(v, sizes) for k, v in obj.items()}
    return obj


# ----------------------------------------------------------------------------- graph records
class OpNode:
    """One recorded op application: what produced a promise tensor.

    ``kwargs`` are the op's original (logical) keyword arguments, used by differentiation
    rules; ``phys_kwargs`` are their translation to the physical layout, used by backends.
    ``key`` is the node's static structural key (backend op name + physical kwargs).
    """

    __slots__ = (
        "op",
        "inputs",
        "kwargs",
        "phys_kwargs",
        "key",
        "outputs",
        "out_specs",
        "__weakref__",
    )

    def __init__(self, op, inputs: tuple, kwargs: dict, phys_kwargs: dict, key: tuple):
        self.op = op
        self.inputs = inputs
        self.kwargs = kwargs
        self.phys_kwargs = phys_kwargs
        self.key = key
        self.outputs: tuple = ()  # weakrefs to output impls (set by the pipeline)
        self.out_specs: tuple = ()  # physical (dtype, shape) per output

    def __repr__(self):
        return f"OpNode({self.op.name}, {len(self.inputs)} inputs)"


class TensorImpl:
    """Everything the system knows about one tensor value.

    Invariants:
    - ``shape`` is the *physical* shape: one batch dim per vmap level in ``levels`` (strictly
      increasing, outer levels first) followed by the logical shape.
    - Realized (``buffer`` holds a backend value) or a *promise* (``node`` will produce it).
    - ``tangents`` maps a forward-mode transform level to the tangent impl at that level.
    - ``traced`` is the set of differentiation levels the value depends on.
    - ``sharding`` is None, or the ``ShardingSpec`` (over the physical dims) of a value held
      as one block per mesh device; ``shape`` stays global, ``buffer_shape`` is the buffer's.
    - ``wrapper`` is a weak reference to the user's ``Tensor`` handle, if one is alive.
    """

    __slots__ = (
        "shape",
        "levels",
        "dtype",
        "device",
        "sharding",
        "node",
        "index",
        "buffer",
        "tangents",
        "traced",
        "requires_grad",
        "grad",
        "wrapper",
        "__weakref__",
    )

    def __init__(
        self,
        shape: tuple,
        dtype: DType,
        device: Device,
        levels: tuple = (),
        node: OpNode | None = None,
        index: int = 0,
        buffer: Any = None,
        traced: frozenset = frozenset(),
    ):
        self.shape = shape
        self.levels = levels
        self.dtype = dtype
        self.device = device
        self.sharding = None
        self.node = node
        self.index = index
        self.buffer = buffer
        self.tangents = None
        self.traced = traced
        self.requires_grad = False
        self.grad = None
        self.wrapper = None

    @property
    def realized(self) -> bool:
        return self.buffer is not None

    @property
    def buffer_shape(self) -> tuple:
        """The backend buffer's shape: ``shape``, or for a sharded value the mesh dims
        followed by one device's block (``nabla.core.sharding``)."""
        s = self.sharding
        return self.shape if s is None else s.buffer_shape(self.shape)

    @property
    def batch_ndim(self) -> int:
        return len(self.levels)

    @property
    def logical_shape(self) -> tuple:
        n = len(self.levels)
        return self.shape[n:] if n else self.shape

    def __repr__(self):
        state = "realized" if self.buffer is not None else "promise"
        return f"TensorImpl({self.shape}, {self.dtype}, levels={self.levels}, {state})"


# ----------------------------------------------------------------------------- programs
class TensorSpec(NamedTuple):
    """A program input: physical dtype, shape (ints, ``SymDim``s, or names once
    symbolized) and device."""

    dtype: DType
    shape: tuple
    device: Device


class Instruction(NamedTuple):
    """One step of a program: run backend op ``op`` on the values in slots ``inputs`` with
    physical ``kwargs``; its results fill slots ``outputs``, with the physical
    ``(dtype, shape)`` of each in ``out_specs`` (what the shape rules predicted)."""

    op: str
    inputs: tuple
    kwargs: dict
    outputs: tuple
    out_specs: tuple


@dataclass(frozen=True, eq=False)
class Program:
    """A backend-independent graph: slots ``0..len(inputs)-1`` hold the inputs, each
    instruction fills new slots, ``outputs`` names the slots returned.

    ``key`` identifies the structure to the runtime's program cache. ``symbolic`` marks a
    program verified by ``compile`` to be valid for every size of its ``SymDim``s, so a
    backend may compile it once in symbolic form (``symbolize``). ``executables`` is the
    one mutable part: each backend keeps its compiled form of the program there.
    Identity is by object (``eq=False``): programs are hashable cache values.
    """

    key: Any
    inputs: tuple  # (TensorSpec, ...)
    instructions: tuple  # (Instruction, ...)
    outputs: tuple  # slots
    output_specs: tuple  # ((dtype, shape), ...) per output
    symbolic: bool = False
    executables: dict = field(default_factory=dict, repr=False)

    def __getstate__(self):
        # a program travels (to a compile worker process) without its executables
        return {**self.__dict__, "executables": {}}

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    @property
    def num_ops(self) -> int:
        return len(self.instructions)

    def symbolized(self) -> Program:
        """This program with every ``SymDim`` replaced by its name (one model, every size)."""
        return replace(
            self,
            key=("symbolic", self.key),
            inputs=symbolize(self.inputs),
            instructions=tuple(symbolize(i) for i in self.instructions),
            output_specs=symbolize(self.output_specs),
            symbolic=False,
            executables={},
        )


def build_program(key, inputs, steps, outputs, symbolic: bool = False) -> Program:
    """The one place programs are made.

    Args:
        key: the structure's cache key.
        inputs: ``(dtype, shape, device)`` per program input.
        steps: ``(op_name, input_refs, phys_kwargs, out_specs)`` per instruction, in
            topological order. A ref is an ``int`` (a program input) or ``(step, output)``
            (an output of an earlier step).
        outputs: refs of the values the program returns.
        symbolic: see :class:`Program`.
    """
    inputs = tuple(TensorSpec(*spec) for spec in inputs)
    slot_of: list[tuple] = []
    nxt = len(inputs)

    def slot(ref):
        return ref if isinstance(ref, int) else slot_of[ref[0]][ref[1]]

    instructions = []
    specs_of_slot = {}
    for name, refs, kwargs, out_specs in steps:
        outs = tuple(range(nxt, nxt + len(out_specs)))
        nxt += len(out_specs)
        instructions.append(
            Instruction(name, tuple(slot(r) for r in refs), kwargs, outs, tuple(out_specs))
        )
        slot_of.append(outs)
        specs_of_slot.update(zip(outs, out_specs))
    out_slots = tuple(slot(r) for r in outputs)
    output_specs = tuple(
        specs_of_slot[s] if s in specs_of_slot else inputs[s][:2] for s in out_slots
    )
    return Program(key, inputs, tuple(instructions), out_slots, output_specs, symbolic)
