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

import numbers
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from .device import Device
from .dtypes import DType
from .state import STATE

__all__ = [
    "SymDim",
    "OpNode",
    "TensorImpl",
    "RETAIN",
    "TensorSpec",
    "Instruction",
    "Program",
    "build_program",
    "nested_programs",
    "symbolize",
    "substitute_dims",
    "has_symdim",
    "as_dim",
    "range_length",
    "same_shape",
    "DIM_TAG",
    "DIM_OPS",
    "eval_dim_expr",
]


# ----------------------------------------------------------------------------- symbolic dims
_NABLA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep

# the first entry of a symbolized derived size: (DIM_TAG, op, a, b)
DIM_TAG = "symdim"

# expression operators a size supports, with Python's (floor) semantics; backends that
# build symbolic dims apply the same table to their own dim objects
DIM_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


def _expr_str(e) -> str:
    if isinstance(e, tuple):
        return f"({_expr_str(e[1])} {e[0]} {_expr_str(e[2])})"
    return str(e)


def eval_dim_expr(expr, sizes: dict) -> int:
    """The value of a size expression (a name, an int or ``(op, a, b)``) at ``sizes``."""
    if isinstance(expr, str):
        return int(sizes[expr])
    if isinstance(expr, tuple):
        return DIM_OPS[expr[0]](eval_dim_expr(expr[1], sizes), eval_dim_expr(expr[2], sizes))
    return int(expr)


def _in_library(filename: str) -> bool:
    return "site-packages" in filename or filename.startswith(("<frozen", _STDLIB_DIR))


def _note_read(dim, what: str, anywhere: bool = False) -> None:
    """Python code decided on a symbolic size or took it as a plain number (``if n > 3``,
    ``int(n)``, ``n / 2``): the trace is then only valid for this size. Recorded while
    ``compile`` traces (``STATE.size_reads``). Comparisons and truth tests in nabla's own
    shape code are not recorded (``anywhere=False``): their consequences are shapes, which
    the plan re-infers at each new size; conversions to a number are recorded anywhere."""
    reads = STATE.size_reads
    if reads is None:
        return
    frame = sys._getframe(2)
    while frame.f_back is not None and _in_library(frame.f_code.co_filename):
        frame = frame.f_back  # NumPy or the standard library, called by nabla or by the user
    filename = frame.f_code.co_filename
    if filename.startswith(_NABLA_DIR):
        if not anywhere:
            return
        while frame.f_back is not None and frame.f_code.co_filename.startswith(_NABLA_DIR):
            frame = frame.f_back  # name the user's line that called into nabla
        filename = frame.f_code.co_filename
    reads.append(f"{what} of dynamic size {dim.describe()} at {filename}:{frame.f_lineno}")


def note_size_decision(dim, what: str) -> None:
    """nabla's own code made a result depend on symbolic size ``dim`` in a way the trace
    cannot keep as an expression (``what``: "a clamped or empty slice", say): recorded
    as a size read (``_note_read``), naming the user's line, so the trace then serves only
    its own sizes and another size traces again instead of reusing a stale number."""
    _note_read(dim, what, True)


def _arith(op, reflected=False):
    fn = DIM_OPS[op]

    def method(self, other):
        if isinstance(other, SymDim):
            oe = other.expr
        elif isinstance(other, numbers.Integral) and not isinstance(other, bool):
            oe = other = int(other)  # a NumPy integer too
        elif isinstance(other, float):
            _note_read(self, f"'{op}' with a float", True)
            a, b = (other, int.__int__(self)) if reflected else (int.__int__(self), other)
            return fn(a, b)
        else:
            return NotImplemented
        a, b = (oe, self.expr) if reflected else (self.expr, oe)
        mine, theirs = int.__int__(self), int.__int__(other)
        value = fn(theirs, mine) if reflected else fn(mine, theirs)
        return SymDim.of(value, _simplify(op, a, b))

    return method


def _simplify(op, a, b):
    if isinstance(a, int) and isinstance(b, int):
        return DIM_OPS[op](a, b)
    if (op == "+" and b == 0) or (op == "-" and b == 0) or (op in ("*", "//") and b == 1):
        return a
    if op == "+" and a == 0 or op == "*" and a == 1:
        return b
    if op == "*" and (a == 0 or b == 0):
        return 0
    return (op, a, b)


# what a decision on a size is called in a retrace's reason (other names: a comparison)
_DECISIONS = {"__bool__": "a truth test", "__int__": "int()", "__abs__": "abs()"}
_DECISIONS.update(
    (f"__{r}{op}__", f"'{sign}'")
    for op, sign in (
        ("pow", "**"),
        ("lshift", "<<"),
        ("rshift", ">>"),
        ("and", "&"),
        ("or", "|"),
        ("xor", "^"),
    )
    for r in ("", "r")
)
_DECISIONS.update(
    {"__invert__": "'~'", "__round__": "round()", "__trunc__": "math.trunc()"}
    | {"__floor__": "math.floor()", "__ceil__": "math.ceil()"}
    | {"__divmod__": "divmod()", "__rdivmod__": "divmod()"}
)


def _decide(name, anywhere=False):
    base = getattr(int, name)
    what = _DECISIONS.get(name, "a comparison")

    def method(self, *args):
        _note_read(self, what, anywhere)
        return base(self, *args)

    return method


class SymDim(int):
    """A dimension size that ``compile`` treats as symbolic: an int (its size at this trace
    or call) carrying an expression over the dynamic dims' names.

    ``expr`` is a name (a dynamic dim), or ``(op, a, b)`` built by ``+ - * // %`` with ints
    and other sizes (``n * 4``, ``n // 2``, ``n + m``), so sizes derived from a dynamic dim
    stay symbolic in shapes and kwargs. It behaves as its current size everywhere;
    ``substitute_dims`` evaluates it at other sizes and backends that compile one model
    for every size see the expression through :func:`symbolize`. Python decisions on it
    in user code (a comparison, ``bool``, ``int()``, arithmetic with a float) are recorded
    while tracing: that trace then serves only its own sizes.
    """

    def __new__(cls, value, expr):
        obj = super().__new__(cls, value)
        obj.expr = expr
        return obj

    @staticmethod
    def of(value, expr):
        """A SymDim, or a plain int when ``expr`` reads no dynamic dim."""
        return int(value) if isinstance(expr, int) else SymDim(value, expr)

    @property
    def name(self):
        """The dynamic dim's name, or None for a derived size (``n * 4``)."""
        return self.expr if isinstance(self.expr, str) else None

    def describe(self) -> str:
        """The expression and its current size, for messages (``n=6``, ``(n * 4)=24``)."""
        return f"{_expr_str(self.expr)}={int.__repr__(self)}"

    def __repr__(self):
        return int.__repr__(self)

    __str__ = __repr__
    __hash__ = int.__hash__
    __add__, __radd__ = _arith("+"), _arith("+", True)
    __sub__, __rsub__ = _arith("-"), _arith("-", True)
    __mul__, __rmul__ = _arith("*"), _arith("*", True)
    __floordiv__, __rfloordiv__ = _arith("//"), _arith("//", True)
    __mod__, __rmod__ = _arith("%"), _arith("%", True)

    def __neg__(self):
        return SymDim.of(-int.__int__(self), _simplify("-", 0, self.expr))

    def __pos__(self):
        return self

    def __truediv__(self, other):
        _note_read(self, "'/'", True)
        return int.__truediv__(self, other)

    def __rtruediv__(self, other):
        _note_read(self, "'/'", True)
        return int.__rtruediv__(self, other)

    def __float__(self):
        _note_read(self, "float()", True)
        return int.__float__(self)

    __bool__ = _decide("__bool__")
    # int() drops the expression wherever it happens (nabla's shape code keeps SymDims with
    # ``as_dim``): a size taken as a plain number may be baked into a kwarg or a value
    __int__ = _decide("__int__", anywhere=True)
    __eq__ = _decide("__eq__")
    __ne__ = _decide("__ne__")
    __lt__ = _decide("__lt__")
    __le__ = _decide("__le__")
    __gt__ = _decide("__gt__")
    __ge__ = _decide("__ge__")

    # int's other operators give a plain number: in user code a decision on the size
    # (``n ** -0.5``, ``abs(n - 5)``, ``n >> 1``; nabla's own checks, such as the bytes
    # bound ``n << 3``, are not; a float on the left of a size, ``0.5 * n`` or ``1.0 / n``,
    # runs float's own operator and cannot be seen)
    __pow__ = _decide("__pow__")
    __rpow__ = _decide("__rpow__")
    __abs__ = _decide("__abs__")
    __divmod__ = _decide("__divmod__")
    __rdivmod__ = _decide("__rdivmod__")
    __lshift__ = _decide("__lshift__")
    __rlshift__ = _decide("__rlshift__")
    __rshift__ = _decide("__rshift__")
    __rrshift__ = _decide("__rrshift__")
    __and__ = _decide("__and__")
    __rand__ = _decide("__rand__")
    __or__ = _decide("__or__")
    __ror__ = _decide("__ror__")
    __xor__ = _decide("__xor__")
    __rxor__ = _decide("__rxor__")
    __invert__ = _decide("__invert__")
    __round__ = _decide("__round__")
    __trunc__ = _decide("__trunc__")
    __floor__ = _decide("__floor__")
    __ceil__ = _decide("__ceil__")

    def __reduce__(self):  # pickled into a compile worker's program
        return (SymDim, (int.__int__(self), self.expr))


def range_length(start, stop, step: int):
    """``len(range(start, stop, step))`` for ends that may be ``SymDim``s: an expression
    in the dynamic dims when they are (0 when the current sizes give no element)."""
    if step > 0:
        n = (stop - start + (step - 1)) // step
    else:
        n = (start - stop + (-step - 1)) // -step
    return n if n > 0 else 0


def same_shape(a: tuple, b: tuple) -> bool:
    """Whether shapes ``a`` and ``b`` are the same at every size ``compile`` may call them
    with: equal, and where either entry is a ``SymDim``, the same expression. A literal 3
    is not the dynamic size that is 3 at this trace, so a shortcut taken on ``==`` alone
    (``reshape`` to the same shape returns ``x``) would serve another size the trace's
    shape."""
    if len(a) != len(b) or a != b:
        return False
    for x, y in zip(a, b):
        if x is not y and (type(x) is SymDim or type(y) is SymDim):
            if not (type(x) is SymDim and type(y) is SymDim and x.expr == y.expr):
                return False
    return True


def as_dim(s):
    """A shape entry as an int, keeping a ``SymDim`` (and its expression) as it is; a string
    is a ``TypeError`` (``int("12")`` would parse it), as in NumPy."""
    if type(s) is int or isinstance(s, SymDim):
        return s
    if isinstance(s, str | bytes):
        raise TypeError(f"a shape entry must be an int, got the {type(s).__name__} {s!r}")
    return int(s)


def _tagged(expr):
    if isinstance(expr, tuple):
        return (DIM_TAG, expr[0], _tagged(expr[1]), _tagged(expr[2]))
    return expr


def symbolize(obj):
    """``obj`` (nested tuples/dicts of kwargs, shapes, specs) with every ``SymDim`` replaced
    by its expression: a dynamic dim's name, or for a derived size a tuple
    ``(DIM_TAG, op, a, b)`` (told apart from kwargs' own tuples by the tag). The form a
    backend compiles once for every size."""
    if isinstance(obj, SymDim):
        return _tagged(obj.expr)
    if isinstance(obj, tuple):
        out = tuple(symbolize(o) for o in obj)
        return type(obj)(*out) if hasattr(obj, "_fields") else out
    if isinstance(obj, dict):
        return {k: symbolize(v) for k, v in obj.items()}
    return obj


def substitute_dims(obj, sizes: dict):
    """``obj`` with each ``SymDim`` evaluated at ``sizes`` (its expression kept)."""
    if isinstance(obj, SymDim):
        return SymDim(eval_dim_expr(obj.expr, sizes), obj.expr)
    if isinstance(obj, tuple):
        out = tuple(substitute_dims(o, sizes) for o in obj)
        return type(obj)(*out) if hasattr(obj, "_fields") else out
    if isinstance(obj, dict):
        return {k: substitute_dims(v, sizes) for k, v in obj.items()}
    return obj


def has_symdim(obj) -> bool:
    """Does ``obj`` (nested tuples, lists and dicts) hold a ``SymDim``?"""
    if isinstance(obj, SymDim):
        return True
    if isinstance(obj, tuple | list):
        return any(has_symdim(o) for o in obj)
    if isinstance(obj, dict):
        return any(has_symdim(v) for v in obj.values())
    return False


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
        "site",
        "cut",
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
        self.site = None  # the user's call (a core.debug.Site) while nb.debug_nans is on
        # while a compile trace records: the grad-mode block of the function it is in
        # ("off": ``no_grad``, "on": ``enable_grad``), which a replay repeats
        self.cut = None

    def __repr__(self):
        return f"OpNode({self.op.name}, {len(self.inputs)} inputs)"


class Made(NamedTuple):
    """``TensorImpl.made``: across processes, ``name`` (``#count.output``: the agreed program
    that computed ``buffer``, and which of its outputs) is what every process calls it."""

    buffer: Any
    name: str


RETAIN = "retain_grad"  # in ``TensorImpl.hooks``: ``Tensor.backward`` keeps this gradient


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
    - ``made`` is None, or a ``Made``: across processes, the name every process gives the
      value its ``buffer`` holds, valid while that buffer is the impl's.
    - ``hooks`` is None, or the list of functions reverse mode applies to the value's
      gradient (``Tensor.register_hook``; ``RETAIN`` marks ``retain_grad``).
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
        "made",
        "hooks",
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
        self.made = None
        self.hooks = None

    @property
    def realized(self) -> bool:
        return self.buffer is not None

    @property
    def made_name(self) -> str | None:
        """Across processes, the name every process gives this value (``#count.output`` of
        the agreed program that computed its buffer), or None."""
        made = self.made
        return made.name if made is not None and made.buffer is self.buffer else None

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
    # the user's call site of each instruction (``core.debug.Site`` or None), filled in by
    # the trace that made a nested program while ``nb.debug_nans`` was on; not structure
    sites: list = field(default_factory=list, repr=False)

    def __getstate__(self):
        # a program travels (to a compile worker process) without its executables
        return {**self.__dict__, "executables": {}, "sites": []}

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


def nested_programs(kwargs: dict) -> list:
    """The ``Program``s an instruction's kwargs carry (a compiled call's plan, control-flow
    bodies), each given alone or in a tuple."""
    out = []
    for v in kwargs.values():
        if isinstance(v, Program):
            out.append(v)
        elif isinstance(v, tuple):
            out.extend(p for p in v if isinstance(p, Program))
    return out


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


def post_order(roots, children) -> tuple[list, list]:
    """The nodes reachable from ``roots``, each after the nodes it depends on (the roots'
    subgraphs in the order given), and the nodes the walk stopped at.

    ``children(node)`` lists the nodes to place before ``node``, or returns ``None`` to
    stop there: ``node`` goes to the second list instead, and what it depends on is not
    walked. Iterative, as graphs can be deeper than Python's recursion limit; each node is
    visited once, by ``id``.
    """
    order: list = []
    stopped: list = []
    seen: set[int] = set()
    for root in roots:
        if id(root) in seen:
            continue
        # a node is placed when popped the second time (expanded)
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            nid = id(node)
            if expanded:
                if nid not in seen:
                    seen.add(nid)
                    order.append(node)
                continue
            if nid in seen:
                continue
            kids = children(node)
            if kids is None:
                seen.add(nid)
                stopped.append(node)
                continue
            stack.append((node, True))
            for kid in kids:
                if id(kid) not in seen:
                    stack.append((kid, False))
    return order, stopped
