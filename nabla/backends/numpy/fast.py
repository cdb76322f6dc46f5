"""Hot programs lowered once into straight-line Python over NumPy.

``lower(program)`` turns a ``Program`` into the source of one Python function, compiled in
memory (never read from disk; ``NABLA_DEBUG_COMPILE=1`` logs it), that computes exactly
what the interpreter (``compile_program``) computes, bit for bit:

- one line per instruction calling the NumPy function itself (a ufunc, an ndarray
  method, or the lowering's own function with its kwargs bound as constants): no table
  lookup, no kwargs dict, no slot list at call time;
- nested compiled calls inlined; control-flow bodies (``cond``/``while_loop``/``scan``)
  lowered the same way and run by the interpreter's control-flow loops;
- constant folding (instructions whose inputs are all constants run once, here) and
  dead-code removal, done once;
- intermediate results of elementwise ufuncs and matmuls written with ``out=`` into
  scratch buffers kept across calls (all programs' together within a budget,
  ``_Scratch``), assigned by liveness: a chain of elementwise ops runs in place in one
  buffer;
- a per-channel operand (one short row of the last dim) against a whole channels-last
  operand computed over rows of the row tiled (``_rowwise``), not one short row at a time;
- a concatenation's pieces that nothing else reads, results of elementwise ufuncs, written
  with ``out=`` straight into their slices of its result's buffer (``_concat_pieces``:
  the gates' cotangents of a split, a copy saved per piece).

Buffer rules (what keeps the function pure): a scratch buffer holds only values that
never reach an output, not even through a view (``_escaping``); an output is always a
fresh array (or a view of an input, as in the interpreter). A value is written in place
over an operand only when the operand is the buffer itself (not a view of it), has the
result's dtype and shape, and nothing reads that buffer later. Constants never reach an
output either (one that would is computed per call instead) and are never written.
Program inputs are never written. Each call takes a set of scratch buffers from a pool
and puts it back at the end, so concurrent or re-entrant calls never share one.

What the interpreter casts (each result to the dtype its shape rule predicted) the code
casts too, except where the dtype is known statically: an ``out=`` result has the
buffer's dtype, which is used only where NumPy's own loop produces that dtype.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import threading
import weakref
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from ...core.config import CONFIG, debug_log
from ...core.ir import Program
from . import fusion
from .fusion import FUSED
from .lowerings import (
    _BLOCK,
    DIRECT,
    LOWERINGS,
    UFUNCS,
    _against_scalar,
    _blas_ready,
    _py_slices,
    exchanges_data,
    gemm,
)

__all__ = ["lower", "CannotLower", "FastPathMismatch", "checked"]

LOG = logging.getLogger("nabla.numpy")


class CannotLower(Exception):
    """The program has something the straight-line form does not take (a symbolic size,
    a collective between processes): the interpreter runs it."""


class FastPathMismatch(AssertionError):
    """The straight-line function and the interpreter disagreed (check mode)."""


class _Step(NamedTuple):
    """One instruction after inlining: ``op`` on slots ``inputs`` fills slots ``outputs``
    with ``specs`` (NumPy dtype, shape of ints) each."""

    op: str
    inputs: tuple
    kwargs: dict
    outputs: tuple
    specs: tuple


# results are views of (or may be) an operand
_VIEWS = frozenset({"reshape", "transpose", "broadcast_to", "broadcast_in_dim", "slice"})
# lowerings whose results are always new arrays (never an operand or a view of one)
_FRESH = frozenset(
    {
        "cast",
        "full",
        "arange",
        "reduce_sum",
        "reduce_prod",
        "argmax",
        "argmin",
        "cumsum",
        "cumprod",
        "matmul",
        "concatenate",
        "pad",
        "gather",
        "scatter",
        "slice_update",
        "relu",
        "maximum",
        "minimum",
        "erf",
        "sigmoid",
        "rsqrt",
        "where",
        "windows",
        "windows_sum",
        "col2im_of_product",
    }
    | set(UFUNCS)
)
_CONTROL = frozenset({"cond", "while_loop", "scan"})
# kept even when nothing reads them: they may raise, as in the interpreter
_KEEP = frozenset({"gather", "scatter", "custom_kernel", "transfer"}) | _CONTROL
_BIG = 1 << 16  # bytes from which a dead intermediate is dropped at its last use
# elementwise-like lowerings (and reductions) whose result is C-contiguous when their
# operands are: NumPy lays a new result out in its operands' order
_KEEPS_C = frozenset(
    {
        "cast",
        "sigmoid",
        "rsqrt",
        "erf",
        "where",
        "maximum",
        "minimum",
        "relu",
        "reduce_sum",
        "reduce_prod",
        "reduce_max",
        "reduce_min",
        "argmax",
        "argmin",
        "matmul",
        "windows",
        "windows_sum",
        "pow",  # (x * x, x itself, or np.power)
        "concatenate",
        "pad",
    }
    | set(UFUNCS)
)
_NO_LAYOUT = (None, frozenset())


class _Piece(NamedTuple):
    """Where a value goes in a concatenation's result: the step and the slice's index."""

    concat: int
    index: str


_NAME = re.compile(r"\bv\d+\b")  # a slot's name in the generated code


def _no_fold(step: _Step) -> bool:
    op = step.op
    return (
        op.startswith("random_")
        or op in _KEEP
        or (op.startswith("mesh_") and "mesh" in step.kwargs)
    )


def _ints(shape) -> tuple:
    out = []
    for d in shape:
        if not isinstance(d, int) or isinstance(d, bool):
            raise CannotLower(f"size {d!r} is not a number")
        out.append(int.__int__(d))
    return tuple(out)


def _flatten(program: Program, passes_through) -> tuple[list, dict, list]:
    """The program's instructions with compiled calls inlined and pass-through
    instructions dropped: ``(steps, spec per slot, output slots)``."""
    spec = {i: (s.dtype.numpy, _ints(s.shape)) for i, s in enumerate(program.inputs)}
    steps: list = []
    fresh = itertools.count(program.num_inputs)

    def walk(prog, args):
        env = dict(enumerate(args))
        for ins in fusion.instructions(prog):  # as the interpreter: per program
            a = tuple(env[i] for i in ins.inputs)
            if exchanges_data(ins.op, ins.kwargs):
                raise CannotLower("a collective between processes")
            specs = tuple((dt.numpy, _ints(shape)) for dt, shape in ins.out_specs)
            if ins.op == "compiled_call":
                outs = walk(ins.kwargs["program"], a)
            elif passes_through(ins.op, ins.kwargs, ins.out_specs):
                outs = a[:1]
            else:
                outs = tuple(next(fresh) for _ in ins.outputs)
                steps.append(_Step(ins.op, a, ins.kwargs, outs, specs))
                spec.update(zip(outs, specs))
            for o, s in zip(outs, specs, strict=True):
                if spec[o][0] != s[0]:  # the interpreter would cast here
                    raise CannotLower(f"{ins.op} hands on {spec[o][0]} as {s[0]}")
            env.update(zip(ins.outputs, outs))
        return tuple(env[s] for s in prog.outputs)

    outs = walk(program, tuple(range(program.num_inputs)))
    for s, (dt, _) in zip(outs, program.output_specs, strict=True):
        if spec[s][0] != dt.numpy:
            raise CannotLower("an output of another dtype than its value")
    return steps, spec, list(outs)


def _merge_common(steps: list, outputs: list) -> list:
    """``steps`` with each instruction that repeats an earlier one (op, operands, kwargs)
    dropped and its readers reading the earlier results. A program output is never such
    a repeat: two outputs stay two arrays, as in the interpreter."""
    seen: dict = {}
    rename: dict = {}
    out_slots = set(outputs)
    kept = []
    for step in steps:
        ins = tuple(rename.get(i, i) for i in step.inputs)
        step = step._replace(inputs=ins)
        key = _cse_key(step.op, ins, step.kwargs, step.specs)
        earlier = seen.get(key) if key is not None else None
        if earlier is not None and not out_slots.intersection(step.outputs):
            rename.update(zip(step.outputs, earlier))
            continue
        kept.append(step)
        if key is not None and earlier is None:
            seen[key] = step.outputs
    return kept


def _cse_key(op, inputs, kwargs, specs):
    """What makes two instructions compute the same values, or None (not a pure function
    of its operands, or kwargs that do not hash)."""
    if op.startswith("random_") or op in _KEEP or op.startswith("mesh_"):
        return None
    try:
        key = (op, inputs, _frozen(kwargs), specs)
        hash(key)
    except TypeError:
        return None
    return key


def _frozen(v):
    """``v`` as a key that tells apart what ``==`` does not: 0.0 and -0.0 (by the float's
    bits), 1 and 1.0 and True (by type)."""
    if isinstance(v, dict):
        return tuple((k, _frozen(x)) for k, x in sorted(v.items()))
    if isinstance(v, tuple | list):
        return (type(v).__name__, *(_frozen(x) for x in v))
    if isinstance(v, float | np.floating):
        return (type(v).__name__, float(v).hex())
    if isinstance(v, complex | np.complexfloating):
        return (type(v).__name__, complex(v).real.hex(), complex(v).imag.hex())
    if isinstance(v, int | np.integer):
        return (type(v).__name__, int(v))
    return v


def _may_alias(step: _Step) -> bool:
    """May a result of ``step`` share memory with an operand?"""
    return step.op not in _FRESH or step.op in _VIEWS


def _escaping(steps: list, outputs: list) -> set:
    """The slots an output is, or may be a view of."""
    esc = set(outputs)
    for step in reversed(steps):
        if _may_alias(step) and any(o in esc for o in step.outputs):
            esc.update(step.inputs)
    return esc


def _interpret_step(step: _Step, args: list) -> list:
    """``step`` run as the interpreter runs it (constant folding)."""
    fn = LOWERINGS.get(step.op) or FUSED.get(step.op)
    if fn is None:
        raise CannotLower(f"no lowering for {step.op!r}")
    with np.errstate(all="ignore"):
        res = fn(args, step.kwargs)
    out = []
    for r, (dt, _) in zip(res, step.specs, strict=True):
        if type(r) is not np.ndarray or r.dtype != dt:
            r = np.asarray(r, dtype=dt)
        if r.flags.owndata:  # shared by every call: nothing may write it
            r.flags.writeable = False
        out.append(r)
    return out


def _c_ordered(x) -> bool:
    """Are ``x``'s strides in C order (non-negative, non-increasing over its dims longer
    than 1)? A scan's step of its ``xs`` along a later axis is, though not contiguous;
    NumPy lays a new result of such operands out C-contiguous."""
    last = None
    for n, stride in zip(x.shape, x.strides, strict=True):
        if n > 1:
            if stride < 0 or (last is not None and stride > last):
                return False
            last = stride
    return True


_ROW_MIN_ROWS = 1024  # rows of the last dim: below, the tiling costs more than it saves
_ROW_MAX_BYTES = 128  # a channel row of 32 float32 values or fewer counts as short
_ROW_WIDTH = 512  # elements per tiled row, the fastest measured for 8-32 channels


def _is_row(small, shape) -> bool:
    """Is ``small`` one row of ``shape``'s last dim (``(C,)``, ``(1, C)``, ...)?"""
    return (
        bool(small)
        and small[-1] == shape[-1]
        and len(small) <= len(shape)
        and all(n == 1 for n in small[:-1])
    )


def _rowwise(fn, big, row, out, tile: int, row_at: int):
    """``fn(big, row)`` (``fn(row, big)`` for ``row_at == 0``) into ``out``, for a C-ordered
    ``big`` of ``out``'s shape and a ``row`` of its last dim: the same values and bits as
    NumPy's broadcast, computed over rows of ``tile`` copies of ``row``."""
    c = row.shape[-1]
    tiled = np.empty((tile, c), row.dtype)
    tiled[...] = row.reshape(1, c)
    width = tile * c
    wide, flat = big.reshape(-1, width), tiled.reshape(width)
    if row_at:
        fn(wide, flat, out=out.reshape(-1, width))
    else:
        fn(flat, wide, out=out.reshape(-1, width))
    return out


def _copying_reshape(transposed, in_spec, shape) -> bool:
    """Does NumPy's reshape to ``shape`` of a transpose ``(source shape, perm)`` of a
    C-contiguous array copy it (into a new C-contiguous array)? Asked of a stand-in with
    the same strides over one element (``copy=False`` raises rather than copy; NumPy
    before 2.1 has no such argument: then not known)."""
    if transposed is None:
        return False
    source, perm = transposed
    dtype = in_spec[0]
    strides, step = [], dtype.itemsize
    for n in reversed(source):
        strides.append(step)
        step *= max(int(n), 1)
    stand_in = np.lib.stride_tricks.as_strided(
        np.zeros(1, dtype), tuple(int(n) for n in source), tuple(reversed(strides))
    ).transpose(perm)
    try:
        np.reshape(stand_in, tuple(int(n) for n in shape), copy=False)
    except ValueError:
        return True
    except TypeError:
        return False
    return False


def _ufunc_ok(fn, dtypes, shapes, spec) -> bool:
    """Does ``fn(*operands)`` produce the predicted dtype and shape by itself (so writing
    it into a buffer of that dtype changes nothing)?"""
    dt, shape = spec
    if any(d.isbuiltin != 1 for d in (*dtypes, dt)):
        return False  # ml_dtypes' bfloat16: loops outside NumPy's resolution
    try:
        resolved = fn.resolve_dtypes((*dtypes, None))
        return resolved[-1] == dt and np.broadcast_shapes(*shapes) == shape
    except (TypeError, ValueError, np.exceptions.DTypePromotionError):
        return False


class _Lowering:
    """The source of one straight-line function and the constants it names."""

    def __init__(self, program: Program, unordered: frozenset = frozenset()):
        from . import _control_flow, _passes_through, _unsupported  # noqa: PLC0415

        err = _unsupported(program)
        if err is not None:
            raise err
        self.control = _control_flow
        self.steps, self.spec, self.outputs = _flatten(program, _passes_through)
        self.steps = _merge_common(self.steps, self.outputs)
        self.ns: dict = {
            "ndarray": np.ndarray,
            "asarray": np.asarray,
            "broadcast_to": np.broadcast_to,
            "ready": _blas_ready,
            "matmul": gemm,
            "multiply": np.multiply,
            "ordered": _c_ordered,
            "rowwise": _rowwise,
        }
        self.lines: list[str] = []
        self.num_inputs = program.num_inputs
        self.name: dict = {i: f"v{i}" for i in range(program.num_inputs)}
        self.sure: set = set()  # slots known to hold an ndarray of their spec's dtype
        self.buffers: list = []  # (dtype, shape) per scratch buffer
        self.owner: dict = {}  # slot -> the buffer it is (written with out=)
        self.roots: dict = {}  # slot -> the buffers it may be a view of
        self.buf_last: dict = {}  # buffer -> the last step reading it
        self.pool: dict = {}  # (dtype, shape) -> free buffers
        # Layouts, as NumPy makes them in the interpreter (a lowering's result, and its
        # bits, may depend on its operands' strides: np.sum's order, _reduce_sum's BLAS
        # path). Per slot: "C" (strides in C order: C-contiguous, any 1-d array, a slice
        # or reshape of such), "B" (a broadcast of a "C" value, dims in order), or None
        # (unknown), with the program inputs of 2 or more dims whose layout that relies
        # on. A value is written into a (C-contiguous) buffer only where NumPy's own result
        # would be C-contiguous: every operand "C" or "B". The inputs so relied on are
        # checked at each call (``guard``, ``_c_ordered``); a call where one is laid out
        # otherwise (a transposed view) runs in the variant lowered for the inputs not in
        # C order (``unordered``), which writes no buffer from those.
        self.layout: dict = {
            i: ("C", frozenset((i,) if len(s.shape) >= 2 else ()))
            for i, s in enumerate(program.inputs)
            if i not in unordered
        }
        self.guard: set = set()
        # slot -> the slot of the short row it broadcasts (see ``_row_operand``)
        self.row_source: dict = {}
        # slots BLAS takes as they are (C- or F-contiguous: a scratch buffer, a reshape of
        # one, a 2-d transpose of one): their matmul operands skip ``_blas_ready``
        self.blas: set = set()
        self.view_lines: set = set()  # indices of ``self.lines`` that only make a view
        # slots known C-contiguous (a new array or buffer, or a reshape of one), and the
        # transposes of such slots: (source shape, perm) each, so that a reshape of one
        # is known to copy into a new C-contiguous array (``_copying_reshape``)
        self.dense: set = set()
        self.transposed: dict = {}
        self._n = 0
        self._fold()
        # concatenations whose pieces are written straight into the result's buffer
        self.pieces = self._concat_pieces()  # piece slot -> its place in the result
        self.concat_buffer: dict = {}  # concatenate step -> the buffer of its result
        self.written_pieces: set = set()
        self._emit_all()

    # ----------------------------------------------------------------- analysis
    def _fold(self):
        esc = _escaping(self.steps, self.outputs)
        const: dict = {}
        kept = []
        for step in self.steps:
            if (
                not _no_fold(step)
                and all(i in const for i in step.inputs)
                and not any(o in esc for o in step.outputs)
            ):
                values = _interpret_step(step, [const[i] for i in step.inputs])
                const.update(zip(step.outputs, values))
            else:
                kept.append(step)
        need = set(self.outputs)
        live = []
        for step in reversed(kept):  # dead-code removal
            if step.op in _KEEP or any(o in need for o in step.outputs):
                live.append(step)
                need.update(step.inputs)
        self.steps = live[::-1]
        self.escaping = esc
        for slot, value in const.items():
            if slot in need:
                self.name[slot] = self._const(value, f"c{slot}")
                self.sure.add(slot)
                if value.flags.c_contiguous:
                    self.layout[slot] = ("C", frozenset())
        self.const = const
        last = {}
        for k, step in enumerate(self.steps):
            for i in step.inputs:
                last[i] = k
        for s in self.outputs:
            last[s] = len(self.steps)
        self.last = last

    def _concat_pieces(self) -> dict:
        """The pieces an elementwise op may write straight into their slices of a
        concatenation's result (``_Piece`` per slot): values the concatenation alone reads
        (once), neither inputs, constants nor escaping, of a concatenation whose result is
        a scratch buffer. (An LSTM's four gates' cotangents, concatenated before their
        product with the weight, a copy of 128 KiB a step otherwise.)"""
        uses: dict = {}
        for step in self.steps:
            for i in step.inputs:
                uses[i] = uses.get(i, 0) + 1
        for o in self.outputs:
            uses[o] = uses.get(o, 0) + 1
        pieces = {}
        for k, step in enumerate(self.steps):
            if step.op != "concatenate" or len(step.outputs) != 1:
                continue
            dt, shape = self.spec[step.outputs[0]]
            if step.outputs[0] in self.escaping or not shape:
                continue
            axis = step.kwargs["axis"] % len(shape)
            start = 0
            for i in step.inputs:
                width = self.spec[i][1][axis]
                free = (
                    uses.get(i) == 1
                    and i >= self.num_inputs
                    and i not in self.const
                    and i not in self.escaping
                    and self.spec[i][0] == dt
                )
                if free:
                    index = ", ".join([":"] * axis + [f"{start}:{start + width}"])
                    pieces[i] = _Piece(k, index)
                start += width
        return pieces

    def _piece_call(self, k, step, fname, args, dying) -> None:
        """``step``'s result written into its slice of the concatenation's buffer (taken
        at the first piece written; it lives until the concatenation, which makes no copy
        of this piece)."""
        out = step.outputs[0]
        piece = self.pieces[out]
        cb = self.concat_buffer.get(piece.concat)
        if cb is None:
            cb = self.concat_buffer[piece.concat] = self._take(
                self.spec[self.steps[piece.concat].outputs[0]]
            )
            self.buf_last[cb] = piece.concat
        self.lines.append(f"{self.name[out]} = {fname}({args}, out=b{cb}[{piece.index}])")
        self.written_pieces.add(out)
        self.roots[out] = (cb,)
        self.layout[out] = _NO_LAYOUT
        self.sure.add(out)
        self._release(dying)

    def _concatenated(self, k, step, ins) -> bool:
        """A concatenation some of whose pieces were written into its buffer already: the
        others copied into their slices, the buffer its result. False for one with none."""
        cb = self.concat_buffer.get(k)
        if cb is None:
            return False
        shape = self.spec[step.outputs[0]][1]
        axis = step.kwargs["axis"] % len(shape)
        start = 0
        for i, x in zip(step.inputs, ins, strict=True):
            width = self.spec[i][1][axis]
            if i not in self.written_pieces:
                index = ", ".join([":"] * axis + [f"{start}:{start + width}"])
                self.lines.append(f"b{cb}[{index}] = {x}")
            start += width
        dying = self._dying(k, step)
        self.lines.append(f"{self.name[step.outputs[0]]} = b{cb}")
        self._written(k, step, cb, dying)
        self._drop_dead(k, step)
        return True

    def _const(self, value, hint: str) -> str:
        self._n += 1
        name = f"{hint}_{self._n}"
        self.ns[name] = value
        return name

    # ----------------------------------------------------------------- emission
    def _emit_all(self):
        for k, step in enumerate(self.steps):
            self._emit(k, step)

    def _emit(self, k: int, step: _Step):
        op, spec = step.op, self.spec
        ins = [self.name[i] for i in step.inputs]
        in_specs = [spec[i] for i in step.inputs]
        for o in step.outputs:
            self.name[o] = f"v{o}"
        if op == "concatenate" and self._concatenated(k, step, ins):
            return
        if op == "pass_through" and len(step.outputs) == 1:  # a scan's residual: its value
            src = step.kwargs["n_skip"]
            self._alias(k, step, ins[src], src)
            return
        direct = DIRECT.get(op)
        if direct is None or direct[0] is not LOWERINGS.get(op):
            # no lowering of ours, or one replaced in the table (``mpi.activate``, a test):
            # the table's entry runs, as in the interpreter
            self._call(k, step, ins)
            return

        fn = UFUNCS.get(op)
        extra = ""
        if op == "relu":
            fn, extra = np.maximum, self._const(in_specs[0][0].type(0), "zero")
            in_specs = in_specs + [(in_specs[0][0], ())]
        elif op in ("maximum", "minimum"):
            fn = np.maximum if op == "maximum" else np.minimum
            big = [s for s in in_specs if s[1] and np.prod(s[1]) >= 16 * _BLOCK]
            if big and any(not s[1] for s in in_specs):
                fn = None  # the interpreter's blocked loop against a scalar is faster
        if op == "relu" and np.prod(in_specs[0][1]) >= 16 * _BLOCK:
            fn = None
        if (
            fn is not None
            and len(step.outputs) == 1
            and _ufunc_ok(fn, [s[0] for s in in_specs], [s[1] for s in in_specs], step.specs[0])
        ):
            args = ", ".join(ins + ([extra] if extra else []))
            self._out_call(k, step, self._fn(fn, op), args, elementwise=True)
            return
        if op == "matmul" and self._matmul_ok(in_specs, step.specs[0]):
            x, y = (n if i in self.blas else f"ready({n})" for i, n in zip(step.inputs, ins))
            self._out_call(k, step, "matmul", f"{x}, {y}", False)
            return
        if op == "pow" and self._square(k, step, ins, in_specs):
            return
        if op in _VIEWS:
            self._view(k, step, ins[0], in_specs[0])
            return
        if op in ("sigmoid", "rsqrt", "relu") and self._chain(k, step, ins[0]):
            return
        self._call(k, step, ins)

    def _fn(self, fn, op) -> str:
        name = getattr(fn, "__name__", op)
        if self.ns.get(name, fn) is not fn:
            name = f"{name}_{op}"
        self.ns[name] = fn
        return name

    @staticmethod
    def _matmul_ok(in_specs, out_spec) -> bool:
        (dx, sx), (dy, sy) = in_specs
        floats = (np.dtype(np.float32), np.dtype(np.float64))
        outer = len(sx) >= 2 and len(sy) >= 2 and sx[-1] == 1  # the interpreter's outer product
        return dx == dy == out_spec[0] and dx in floats and len(out_spec[1]) >= 1 and not outer

    def _square(self, k, step, ins, in_specs) -> bool:
        """``x ** c`` with a folded 0-d float ``c`` of 2 or 1: what ``_pow`` does at run
        time (``x * x``, ``x``), decided here."""
        y = self.const.get(step.inputs[1])
        (dx, _), (_, sy) = in_specs
        if y is None or sy != () or dx.kind != "f":
            return False
        if y == 2:
            self._out_call(k, step, "multiply", f"{ins[0]}, {ins[0]}", True)
            return True
        if y == 1:
            self._alias(k, step, ins[0])
            return True
        return False

    def _dying(self, k, step) -> list:
        """The buffers the operands of step ``k`` view and nothing reads after it."""
        out = []
        for i in step.inputs:
            for b in self.roots.get(i, ()):
                if self.buf_last[b] <= k and b not in out:
                    out.append(b)
        return out

    def _take(self, key, reuse=None):
        if reuse is not None:
            return reuse
        free = self.pool.get(key)
        if free:
            return free.pop()
        self.buffers.append(key)
        return len(self.buffers) - 1

    def _out_call(self, k, step, fname, args, elementwise: bool):
        out = step.outputs[0]
        v = self.name[out]
        dt, shape = step.specs[0]
        dying = self._dying(k, step)
        lays = [self.layout.get(i, _NO_LAYOUT) for i in step.inputs]
        c_like = (
            not elementwise
            or all(kind in ("C", "B") for kind, _ in lays)
            or self._c_order_wins(step, lays)
        )
        relies = frozenset().union(*(r for _, r in lays)) if elementwise else frozenset()
        if out in self.escaping or not c_like:  # a fresh array per call, laid out by NumPy
            self.lines.append(f"{v} = {fname}({args})")
            if shape:
                self.sure.add(out)
            else:  # a 0-d result comes back as a NumPy scalar
                self._check(out)
            if c_like:
                self.layout[out] = ("C", relies)
                self.dense.add(out)  # (a new array, laid out as its C-ordered operands)
            self._release(dying)
            self._drop_dead(k, step)
            return
        self.guard |= relies
        row = self._row_operand(step, lays) if elementwise else None
        if elementwise and row is None and out in self.pieces:
            self._piece_call(k, step, fname, args, dying)
            self._drop_dead(k, step)
            return
        b = self._target(step, dying, elementwise)
        if row is not None:  # one channel row against every row of the other operand
            at, tile = row
            small = self.row_source.get(step.inputs[at], step.inputs[at])
            big, small = self.name[step.inputs[1 - at]], self.name[small]
            self.lines.append(f"{v} = rowwise({fname}, {big}, {small}, b{b}, {tile}, {at})")
        else:
            self.lines.append(f"{v} = {fname}({args}, out=b{b})")
        self._written(k, step, b, dying)
        self._drop_dead(k, step)

    def _c_order_wins(self, step, lays) -> bool:
        """Is elementwise ``step``'s result C-contiguous in NumPy whatever the layouts of
        its other operands (a transposed matmul result, say)? Yes when one operand of the
        result's shape, no dim of which is 1, is in C order: NumPy's iterator orders the
        result's axes by comparing the operands' strides, and on a conflict C order wins
        (``nditer``'s ``find_best_axis_ordering``); that operand says C order for every
        pair of axes (its strides decrease and none is 0)."""
        shape = tuple(step.specs[0][1])
        if len(shape) < 2 or min(shape) <= 1:
            return False
        return any(
            kind == "C" and tuple(self.spec[i][1]) == shape
            for (kind, _), i in zip(lays, step.inputs, strict=True)
        )

    def _row_operand(self, step, lays):
        """``(index, tile)`` when binary elementwise ``step`` combines a C-ordered operand of
        the result's shape with one row of its last dim broadcast over the rest (a
        per-channel scale or shift in channels-last layout) and that row is short: NumPy
        then pays its inner loop once per short row. ``rowwise`` runs it over rows of
        ``tile`` copies of the row instead (2.5x faster for 16 float32 channels and 64x8x8
        positions). None otherwise."""
        if len(step.inputs) != 2:
            return None
        dt, shape = step.specs[0]
        size = int(np.prod(shape)) if shape else 0
        if not shape or shape[-1] * dt.itemsize > _ROW_MAX_BYTES:
            return None
        c = shape[-1]
        if c <= 1 or size < _ROW_MIN_ROWS * c:  # one channel: a scalar's loop is long already
            return None
        for at in (0, 1):
            big, small = step.inputs[1 - at], step.inputs[at]
            small = self.row_source.get(small, small)  # a broadcast view: its row
            if (
                tuple(self.spec[big][1]) == tuple(shape)
                and lays[1 - at][0] == "C"
                and _is_row(self.spec[small][1], shape)
            ):
                tile = _ROW_WIDTH // c
                while tile > 1 and size % (tile * c):
                    tile //= 2
                return (at, tile) if tile > 1 else None
        return None

    def _target(self, step, dying, elementwise: bool) -> int:
        """The buffer step's result goes to: in place over an elementwise operand that is
        the buffer and dies here, else a free one of its dtype and shape, else a new one."""
        dt, shape = step.specs[0]
        reuse = None
        if elementwise:
            for b in dying:
                owners = [i for i in step.inputs if b in self.roots.get(i, ())]
                if self.buffers[b] == (dt, shape) and all(self.owner.get(i) == b for i in owners):
                    reuse = b
                    break
        return self._take((dt, shape), reuse)

    def _written(self, k, step, b, dying):
        out = step.outputs[0]
        self.owner[out] = b
        self.roots[out] = (b,)
        self.layout[out] = ("C", frozenset())
        self.dense.add(out)
        self.blas.add(out)
        self.buf_last[b] = self.last.get(out, k)
        self.sure.add(out)
        self._release([d for d in dying if d != b])

    def _chain(self, k, step, x) -> bool:
        """``sigmoid``, ``rsqrt`` and a large ``relu`` of a float32/float64 value that stays
        inside: the interpreter's NumPy calls, one after the other in one buffer (its
        lowerings run the same loops on fresh arrays). False where the lowering is called
        instead."""
        dt, shape = step.specs[0]
        kind, relies = self.layout.get(step.inputs[0], _NO_LAYOUT)
        floats = (np.dtype(np.float32), np.dtype(np.float64))
        if (
            step.outputs[0] in self.escaping
            or kind not in ("C", "B")
            or dt not in floats
            or self.spec[step.inputs[0]] != (dt, shape)
        ):
            return False
        self.guard |= relies
        dying = self._dying(k, step)
        t = f"b{self._target(step, dying, True)}"
        v = self.name[step.outputs[0]]
        if step.op == "sigmoid":  # 1 / (1 + exp(-x))
            one = self._const(dt.type(1), "one")
            self.ns.update(negative=np.negative, exp=np.exp, add=np.add)
            self.ns.update(true_divide=np.true_divide)
            self.lines += [
                f"negative({x}, out={t})",
                f"exp({t}, out={t})",
                f"add({t}, {one}, out={t})",
                f"{v} = true_divide(1, {t}, out={t})",
            ]
        elif step.op == "relu":  # the interpreter's blocked max against 0, into the buffer
            zero = self._const(dt.type(0), "zero")
            self.ns.update(against_scalar=_against_scalar, maximum=np.maximum)
            self.lines.append(f"{v} = against_scalar(maximum, {x}, {zero}, {t})")
        else:  # rsqrt: 1 / sqrt(x)
            self.ns.update(sqrt=np.sqrt, true_divide=np.true_divide)
            self.lines += [f"sqrt({x}, out={t})", f"{v} = true_divide(1, {t}, out={t})"]
        self._written(k, step, int(t[1:]), dying)
        return True

    def _release(self, bufs):
        for b in bufs:
            self.pool.setdefault(self.buffers[b], []).append(b)

    def _alias_roots(self, k, step):
        roots = tuple({b for i in step.inputs for b in self.roots.get(i, ())})
        for o in step.outputs:
            self.roots[o] = roots
            for b in roots:
                self.buf_last[b] = max(self.buf_last[b], self.last.get(o, k))

    def _alias(self, k, step, x, src: int = 0):
        """Step ``k``'s one result is its operand ``src`` (named ``x``) itself."""
        self.lines.append(f"{self.name[step.outputs[0]]} = {x}")
        self.layout[step.outputs[0]] = self.layout.get(step.inputs[src], _NO_LAYOUT)
        self._after_alias(k, step, src)

    def _after_alias(self, k, step, src: int = 0):
        self._alias_roots(k, step)
        if all(i in self.sure for i in step.inputs[src : src + 1]):
            self.sure.update(step.outputs)
        else:
            self._check(step.outputs[0])
        self._release(self._dying(k, step))

    def _view(self, k, step, x, in_spec):
        kw, (_, shape) = step.kwargs, step.specs[0]
        v = self.name[step.outputs[0]]
        op = step.op
        kind, relies = self.layout.get(step.inputs[0], _NO_LAYOUT)
        lay = _NO_LAYOUT
        if op == "reshape":
            line = f"{x}.reshape({_ints(kw['shape'])!r})" if in_spec[1] != shape else x
            if kind == "C" or in_spec[1] == shape:
                lay = (kind, relies)
            if step.inputs[0] in self.dense:
                self.dense.add(step.outputs[0])
            elif _copying_reshape(self.transposed.get(step.inputs[0]), in_spec, shape):
                # a new C-contiguous array, sharing no memory with the operand
                self.layout[step.outputs[0]] = ("C", frozenset())
                self.dense.add(step.outputs[0])
                self.lines.append(f"{v} = {line}")
                self.sure.add(step.outputs[0])
                self._release(self._dying(k, step))
                return
        elif op == "transpose":
            perm = tuple(int(p) for p in kw["perm"])
            line = f"{x}.transpose({perm!r})"
            if step.inputs[0] in self.dense:
                self.transposed[step.outputs[0]] = (tuple(in_spec[1]), perm)
        elif op == "broadcast_to":
            line = f"broadcast_to({x}, {shape!r})" if in_spec[1] != shape else x
            if in_spec[1] != shape and _is_row(in_spec[1], shape):
                self.row_source[step.outputs[0]] = step.inputs[0]
            if in_spec[1] == shape:
                lay = (kind, relies)
            elif kind == "C":
                lay = ("B", relies)
        elif op == "broadcast_in_dim":
            inter = [1] * len(shape)
            for src, dst in enumerate(kw["dims"]):
                inter[dst] = in_spec[1][src]
            inter = tuple(inter)
            line = f"{x}.reshape({inter!r})" if inter != in_spec[1] else x
            if inter != shape:
                line = f"broadcast_to({line}, {shape!r})"
            in_order = list(kw["dims"]) == sorted(kw["dims"])
            if kind == "C" and in_order:
                lay = ("C" if inter == shape else "B", relies)
            elif line == x:
                lay = (kind, relies)
        else:  # slice
            line = f"{x}[{self._const(_py_slices(kw['slices']), 'sl')}]"
            if kind == "C" and all(step > 0 for _, step, _ in kw["slices"]):
                lay = (kind, relies)
        self.layout[step.outputs[0]] = lay
        if step.inputs[0] in self.blas and (
            op == "reshape" or (op == "transpose" and len(shape) == 2) or line == x
        ):
            self.blas.add(step.outputs[0])
        self.view_lines.add(len(self.lines))
        self.lines.append(f"{v} = {line}")
        self._after_alias(k, step)

    def _call(self, k, step, ins):
        """Any other instruction: its lowering's function, called directly."""
        op, kw = step.op, step.kwargs
        outs = [self.name[o] for o in step.outputs]
        entry = LOWERINGS.get(op) or FUSED.get(op)
        if entry is None:
            from . import UnsupportedOp  # noqa: PLC0415

            raise UnsupportedOp(f"the numpy backend has no lowering for op '{op}'")
        direct = DIRECT.get(op)
        if op in _CONTROL:
            f = self._const(self.control[op], op)
            args = ", ".join(ins)
            self.lines.append(f"{', '.join(outs)}, = {f}([{args}], {self._const(kw, 'kw')})")
        elif direct is not None and direct[0] is entry and len(step.outputs) == 1:
            f = self._const(direct[1], op)
            args = ins + [f"{key}={self._const(val, key)}" for key, val in kw.items()]
            self.lines.append(f"{outs[0]} = {f}({', '.join(args)})")
        else:
            f = self._const(entry, op)
            self.lines.append(
                f"{', '.join(outs)}, = {f}([{', '.join(ins)}], {self._const(kw, 'kw')})"
            )
        for o in step.outputs:
            self._check(o)
        lays = [self.layout.get(i, _NO_LAYOUT) for i in step.inputs]
        keeps_c = op in _KEEPS_C or (op == "cumsum" and not kw["reverse"])  # (reverse: flipped)
        if op in FUSED:  # each a new C-contiguous array, whatever its operands' layouts
            self.layout.update((o, ("C", frozenset())) for o in step.outputs)
            self.dense.update(step.outputs)
        elif keeps_c and len(step.outputs) == 1 and all(kind == "C" for kind, _ in lays):
            self.layout[step.outputs[0]] = ("C", frozenset().union(*(r for _, r in lays)))
            if op in _FRESH:
                self.dense.add(step.outputs[0])
        elif op == "split" and lays[0][0] == "C":  # slices of it: their strides stay in order
            self.layout.update((o, lays[0]) for o in step.outputs)
        elif op == "scan":  # its ys are new arrays it fills step by step (the carries: any)
            self.layout.update((o, ("C", frozenset())) for o in step.outputs[kw["n_carry"] :])
        if _may_alias(step):
            self._alias_roots(k, step)
        self._release(self._dying(k, step))
        self._drop_dead(k, step)

    def _drop_dead(self, k, step) -> None:
        """``del`` the large intermediates step ``k`` reads last that are arrays of their
        own (not scratch buffers, inputs or constants): memory stays flat. (Without it, the
        fresh arrays of a chain that cannot write into scratch buffers, as after a
        checkpoint's output, lived until the function returned: 75 arrays where the
        interpreter held 27.)"""
        for i in sorted(set(step.inputs)):
            if (
                self.last.get(i) == k
                and i >= self.num_inputs
                and i not in self.owner
                and i not in self.const
                and self._nbytes(i) >= _BIG
            ):
                self.lines.append(f"del {self.name[i]}")

    def _nbytes(self, slot) -> int:
        dt, shape = self.spec[slot]
        return dt.itemsize * int(np.prod(shape, dtype=np.int64))

    def _check(self, slot):
        """The interpreter's cast of a result to its predicted dtype."""
        v = self.name[slot]
        dt = self._const(self.spec[slot][0], "dt")
        self.lines.append(
            f"if type({v}) is not ndarray or {v}.dtype != {dt}: {v} = asarray({v}, dtype={dt})"
        )
        self.sure.add(slot)

    # ----------------------------------------------------------------- source
    def source(self) -> str:
        body = []
        if self.num_inputs:
            body.append(f"{''.join(f'v{i}, ' for i in range(self.num_inputs))}= inputs")
        if self.guard:
            test = " and ".join(
                f"(v{i}.flags.c_contiguous or ordered(v{i}))" for i in sorted(self.guard)
            )
            body.append(f"if not ({test}): return relower(inputs)")
        if self.buffers:
            names = "".join(f"b{i}, " for i in range(len(self.buffers)))
            body.append("S = take()")
            body.append(f"{names}= S")
        tail = []
        if self.buffers:
            tail.append("give(S)")
        for s in self.outputs:
            if s not in self.sure:
                self._check_line(tail, s)
        tail.append(f"return [{', '.join(self.name[s] for s in self.outputs)}]")
        body += self._live_lines(tail) + tail
        return "def raw(inputs):\n" + "".join(f"    {line}\n" for line in body)

    def _live_lines(self, tail: list) -> list:
        """``self.lines`` without the views nothing reads: a broadcast a tiled per-channel
        operation read through its row instead (``rowwise``) costs ~4 us to make for
        nothing. A ``del`` of a dropped view goes too, and so does a dtype check of a value
        nothing reads (``_check``)."""
        used = set(_NAME.findall(" ".join(tail)))
        keep = [True] * len(self.lines)
        for i in range(len(self.lines) - 1, -1, -1):
            line = self.lines[i]
            if line.startswith("del "):
                continue
            if line.startswith("if type("):  # ``_check``: reads only the value it checks
                keep[i] = line[8 : line.index(")")] in used
                continue
            if i in self.view_lines and line.split(" = ", 1)[0] not in used:
                keep[i] = False
                continue
            used.update(_NAME.findall(line))
        dropped = {
            self.lines[i].split(" = ", 1)[0]
            for i, k in enumerate(keep)
            if not k and i in self.view_lines
        }
        return [
            line
            for line, k in zip(self.lines, keep, strict=True)
            if k and not (line.startswith("del ") and line[4:] in dropped)
        ]

    def _check_line(self, body, slot):
        v = self.name[slot]
        dt = self._const(self.spec[slot][0], "dt")
        body.append(
            f"if type({v}) is not ndarray or {v}.dtype != {dt}: {v} = asarray({v}, dtype={dt})"
        )


# Scratch sets kept between calls, in all lowered functions together: at most 256 MiB or
# twice the largest set, whichever is more (a step's programs beside its biggest one stay
# kept), and 1024 sets; the functions called least recently give theirs up first. Each
# function keeping its own peak working set made memory grow with the number of
# programs: an eager loop over 200 sequence lengths held 7 GB from its second pass on.
_SCRATCH_BUDGET = 1 << 28
_SCRATCH_MAX_SETS = 1024


class _Scratch:
    """The scratch buffers of one lowered function: a set of them per call (``take``),
    put back after it (``give``: a re-entrant or concurrent call takes another). Sets put
    back stay for the next call, within the process-wide budget: past it, the sets of the
    functions used least recently are dropped (allocated again when those run). The set
    just put back always stays."""

    __slots__ = ("buffers", "nbytes", "sets")

    def __init__(self, buffers: list):
        self.buffers = buffers  # (dtype, shape) per buffer
        self.nbytes = sum(dt.itemsize * math.prod(shape) for dt, shape in buffers)
        self.sets: list = []

    def take(self) -> list:
        with _KEPT_LOCK:
            if self.sets:
                _KEPT.nbytes -= self.nbytes
                _KEPT.sets -= 1
                return self.sets.pop()
        return [np.empty(shape, dt) for dt, shape in self.buffers]

    def give(self, buffers: list) -> None:
        kept = _KEPT
        with _KEPT_LOCK:
            self.sets.append(buffers)
            kept.nbytes += self.nbytes
            kept.sets += 1
            if kept.last is not self:  # (a loop calling one program: nothing to reorder)
                kept.last = self
                kept.order[id(self)] = self
                kept.order.move_to_end(id(self))
                if self.nbytes > kept.largest:
                    kept.largest = self.nbytes
                    kept.limit = max(_SCRATCH_BUDGET, 2 * self.nbytes)
            if kept.nbytes > kept.limit or kept.sets > _SCRATCH_MAX_SETS:
                kept.drop_oldest(self)


class _Kept:
    """What the ``_Scratch`` objects keep between calls: those holding sets (least
    recently given back first) and the totals."""

    __slots__ = ("largest", "last", "limit", "nbytes", "order", "sets")

    def __init__(self):
        self.order: OrderedDict = OrderedDict()  # id -> _Scratch
        self.nbytes = 0
        self.sets = 0
        self.largest = 0  # the biggest set given back so far
        self.limit = _SCRATCH_BUDGET  # bytes kept at most: the budget, or 2 * largest
        self.last = None  # the _Scratch given a set back last

    def forget(self, key: int) -> None:
        """A lowered function is gone (its program was evicted or freed): its sets go
        with it, and the largest set is that of the ones left."""
        with _KEPT_LOCK:
            gone = self.order.pop(key, None)
            if gone is None:
                return
            self.nbytes -= len(gone.sets) * gone.nbytes
            self.sets -= len(gone.sets)
            gone.sets.clear()
            if self.last is gone:
                self.last = None
            self.largest = max((s.nbytes for s in self.order.values()), default=0)
            self.limit = max(_SCRATCH_BUDGET, 2 * self.largest)

    def drop_oldest(self, keep: _Scratch) -> None:
        """Drop the sets of the least recently used functions but ``keep`` until within
        the limits."""
        order = self.order
        while self.nbytes > self.limit or self.sets > _SCRATCH_MAX_SETS:
            key, oldest = next(iter(order.items()))
            if oldest is keep:
                return
            del order[key]
            self.nbytes -= len(oldest.sets) * oldest.nbytes
            self.sets -= len(oldest.sets)
            oldest.sets.clear()


_KEPT = _Kept()
_KEPT_LOCK = threading.RLock()


def _forget_scratch(key: int) -> None:
    _KEPT.forget(key)  # (the module's current record: tests swap it)


_COUNT = itertools.count()


_MAX_VARIANTS = 4  # layouts of the inputs lowered for, per program (then: the interpreter)


def lower(program: Program):
    """``program`` as generated straight-line code: ``run(list of arrays) -> list of
    arrays``, with ``run.raw`` (without ``np.errstate``, for nested programs) and
    ``run.source``. The code is lowered for inputs in C order; a call whose inputs are laid
    out otherwise runs a variant lowered once for that layout (``_MAX_VARIANTS``, then the
    interpreter). Raises ``CannotLower`` where the interpreter must run the program."""
    from . import compile_program  # noqa: PLC0415

    variants: dict = {}
    wide = [i for i, spec in enumerate(program.inputs) if len(spec.shape) >= 2]

    def respecialize(inputs):
        unordered = frozenset(
            i for i in wide if not (inputs[i].flags.c_contiguous or _c_ordered(inputs[i]))
        )
        fn = variants.get(unordered)
        if fn is None:
            if len(variants) < _MAX_VARIANTS:
                fn = variants[unordered] = _generate(program, unordered, respecialize)[0]
            else:
                interpreter = program.executables.get("numpy") or compile_program(program)
                program.executables.setdefault("numpy", interpreter)
                fn = interpreter.raw
        return fn(inputs)

    raw, src = _generate(program, frozenset(), respecialize)
    variants[frozenset()] = raw

    def run(inputs):
        with np.errstate(all="ignore"):
            return raw(inputs)

    run.raw = raw
    run.source = src
    return run


def _generate(program: Program, unordered: frozenset, respecialize):
    """The straight-line function for inputs laid out as ``unordered`` says, and its
    source."""
    low = _Lowering(program, unordered)
    src = low.source()
    ns = low.ns
    scratch = _Scratch(list(low.buffers))
    ns.update(relower=respecialize, take=scratch.take, give=scratch.give)
    name = f"<nabla numpy program {next(_COUNT)}: {program.num_ops} ops>"
    exec(compile(src, name, "exec"), ns)  # noqa: S102 - source generated from our own IR
    if scratch.buffers:  # its kept sets go when the function does (not the scratch: kept)
        weakref.finalize(ns["raw"], _forget_scratch, id(scratch))
    if CONFIG.debug_compile:
        debug_log(
            LOG,
            "%d-op program lowered to straight-line code%s (%d scratch buffers, %d bytes):\n%s",
            program.num_ops,
            f" for inputs {sorted(unordered)} not in C order" if unordered else "",
            len(scratch.buffers),
            scratch.nbytes,
            src,
        )
    return ns["raw"], src


def _layout(a) -> tuple:
    """The strides that lay ``a`` out: those of its dims longer than 1 (NumPy ignores the
    others; a broadcast to the same shape sets them to 0)."""
    return tuple(s for n, s in zip(a.shape, a.strides, strict=True) if n > 1)


def _same(a, b) -> bool:
    return (
        type(a) is np.ndarray
        and type(b) is np.ndarray
        and a.dtype == b.dtype
        and a.shape == b.shape
        and _layout(a) == _layout(b)
        and a.tobytes() == b.tobytes()
    )


CHECKED_CALLS = 3  # calls of each program checked; later ones run the straight-line form


def checked(program: Program, fast, interpreter):
    """Check mode (``NABLA_FAST_NUMPY_CHECK=1``): each of a program's first
    ``CHECKED_CALLS`` calls runs the interpreter and the straight-line function twice (the
    second call reuses the scratch buffers of the first), and every output of both calls
    must equal the interpreter's bit for bit, with the inputs unchanged; a difference
    raises ``FastPathMismatch`` naming the output. (A training loop's thousand steps of
    one program are checked on their first ones, at a bounded cost.)"""
    calls = [0]

    def run(inputs):
        if calls[0] >= CHECKED_CALLS:
            return fast(inputs)
        calls[0] += 1
        before = [np.array(x, copy=True, order="C") for x in inputs]
        want = interpreter(inputs)
        first = fast(inputs)
        second = fast(inputs)
        for call, got in (("first", first), ("second", second)):
            for k, (g, w) in enumerate(zip(got, want, strict=True)):
                if not _same(g, w):
                    raise FastPathMismatch(
                        f"the straight-line form of a {program.num_ops}-op program differs "
                        f"from the interpreter at output {k} on its {call} call: got "
                        f"{type(g).__name__} {getattr(g, 'dtype', '?')} "
                        f"{getattr(g, 'shape', '?')} strides {getattr(g, 'strides', '?')}, "
                        f"want {w.dtype} {w.shape} strides {w.strides}; values equal: "
                        f"{np.array_equal(g, w, equal_nan=True)}\n{fast.source}"
                    )
        for k, (x, b) in enumerate(zip(inputs, before, strict=True)):
            x = np.asarray(x)
            if x.shape != b.shape or np.ascontiguousarray(x).tobytes() != b.tobytes():
                raise FastPathMismatch(
                    f"the straight-line form of a {program.num_ops}-op program wrote its "
                    f"input {k}\n{fast.source}"
                )
        return first

    run.raw = fast.raw
    run.source = fast.source
    return run
