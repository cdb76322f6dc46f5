"""The NumPy interpreter backend: reference semantics and instant first results.

``LOWERINGS`` maps each backend op name to ``fn(args: list[ndarray], kwargs) -> list``;
``compile_program`` binds a ``Program``'s instructions to those functions once, so running a
cached program is one Python loop with no graph building. ``compile_fast`` lowers a hot
program once into a straight-line Python function (``fast.py``) that gives the same bits.
"""

from __future__ import annotations

import ctypes
import functools
import os
import weakref

import numpy as np

from ...core.config import CONFIG, debug_log
from ...core.ir import Program
from ..kernels import NUMPY_REFERENCES, kernel_instructions
from . import fast, fusion
from .lowerings import LOWERINGS

__all__ = [
    "LOWERINGS",
    "compile_program",
    "compile_fast",
    "use_fast",
    "UnsupportedOp",
    "supports",
]


class UnsupportedOp(RuntimeError):
    pass


def _missing_reference(program: Program):
    """The first ``custom_kernel`` instruction without a NumPy reference, or None."""
    for instr in kernel_instructions(program):
        kw = instr.kwargs
        if (kw["op"], kw["kernel"], kw["digest"]) not in NUMPY_REFERENCES:
            return instr
    return None


_SUPPORTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def supports(program: Program) -> bool:
    """False when the interpreter cannot run ``program`` (a custom kernel with no NumPy
    reference); the ``auto`` policy then sends it to MAX. Memoized per program."""
    ok = _SUPPORTS.get(program)
    if ok is None:
        ok = _SUPPORTS[program] = _missing_reference(program) is None
    return ok


# glibc's mallopt parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold on 64-bit
_TRIM_THRESHOLD = 128 << 20


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):  # not a glibc system
        return False


@functools.cache
def keep_freed_memory() -> bool:
    """Ask glibc to serve arrays up to 32 MiB from its heap and to keep up to 128 MiB of
    freed heap for reuse, once per process (``NABLA_MALLOC_REUSE=0`` opts out).

    By default glibc maps each large array freshly (or trims its heap as soon as 2x the
    largest recently freed block lies free at the top), so every call of a program
    page-faults on all its intermediates again: a transformer block's forward and backward
    took ~9,000 minor faults per call, a third of its time here. XLA and PyTorch's caching
    allocators exist for the same reason. Returns whether the settings were applied."""
    if not (CONFIG.malloc_reuse and _glibc()):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
        )
    except (OSError, AttributeError):
        return False


def _unsupported(program: Program) -> UnsupportedOp | None:
    """The error for a custom kernel the interpreter cannot run, or None."""
    missing = _missing_reference(program)
    if missing is None:
        return None
    kw = missing.kwargs
    if kw["package"] is None:  # an op in the original Nabla's protocol: kernel() on MAX values
        return UnsupportedOp(
            f"custom op {kw['op']!r} is lowered by its kernel() on MAX graph values, so "
            "the numpy backend cannot run it: run it with the 'max' or 'auto' backend"
        )
    return UnsupportedOp(
        f"custom op {kw['op']!r} (Mojo kernel {kw['kernel']!r} from {kw['package']}) has no "
        "NumPy reference, so the numpy backend cannot run it: give the op a numpy_fn, or "
        "run it with the 'max' or 'auto' backend"
    )


def compile_program(program: Program):
    """``program`` bound to the lowering table: ``run(list of arrays) -> list of arrays``."""
    keep_freed_memory()
    err = _unsupported(program)
    if err is not None:
        raise err
    # an instruction that hands its input through unchanged runs as no step: its output
    # slot reads the input's (arrays are never written in place, and views alias anyway)
    alias: dict = {}
    instructions = []
    for name, ins, kwargs, outs, specs in fusion.instructions(program):
        ins = tuple(alias.get(i, i) for i in ins)
        if _passes_through(name, kwargs, specs):
            alias[outs[0]] = ins[0]
            continue
        instructions.append((name, ins, kwargs, outs, specs))
    out_slots = [alias.get(s, s) for s in program.outputs]
    # free each intermediate after its last use: peak memory stays flat and hot data stays
    # in cache (program outputs are kept)
    last_use = {}
    for k, (_, ins, *_) in enumerate(instructions):
        for i in ins:
            last_use[i] = k
    keep = set(out_slots)
    frees = [[] for _ in instructions]
    for slot, k in last_use.items():
        if slot not in keep:
            frees[k].append(slot)
    steps = []
    for k, (name, ins, kwargs, outs, specs) in enumerate(instructions):
        fn = LOWERINGS.get(name) or fusion.FUSED.get(name)
        if fn is None:
            raise UnsupportedOp(f"the numpy backend has no lowering for op '{name}'")
        dtypes = tuple(dt.numpy for dt, _ in specs)
        steps.append((fn, ins, kwargs, outs, dtypes, tuple(frees[k])))
    n_slots = program.num_inputs + sum(len(ins.outputs) for ins in program.instructions)
    # an output that reads a program input (passed through) gets the check results get
    from_inputs = [
        (k, dt.numpy)
        for k, (slot, (dt, _)) in enumerate(zip(out_slots, program.output_specs, strict=True))
        if slot < program.num_inputs
    ]

    def raw(inputs):
        slots = list(inputs)
        slots.extend([None] * (n_slots - len(slots)))
        for fn, ins, kwargs, outs, dtypes, free in steps:
            res = fn([slots[i] for i in ins], kwargs)
            for o, r, dt in zip(outs, res, dtypes, strict=True):
                if type(r) is not np.ndarray or r.dtype != dt:
                    r = np.asarray(r, dtype=dt)
                slots[o] = r
            for i in free:
                slots[i] = None
        outs = [slots[s] for s in out_slots]
        for k, dt in from_inputs:  # as an instruction's result is: an array of its dtype
            r = outs[k]
            if type(r) is not np.ndarray or r.dtype != dt:
                outs[k] = np.asarray(r, dtype=dt)
        return outs

    def run(inputs):
        with np.errstate(all="ignore"):
            return raw(inputs)

    run.raw = raw  # for nested programs, which always run inside an outer ``run``
    return run


def _passes_through(name, kwargs, specs) -> bool:
    """Is this instruction its input unchanged: ``identity``, a transpose by the identity
    permutation (vmap moving a batch dim that is already first)?"""
    if name == "identity":
        return True
    perm = kwargs.get("perm") if name == "transpose" else None
    return perm is not None and tuple(perm) == tuple(range(len(specs[0][1])))


def _bound(program: Program):
    """A nested program bound to the lowering table once (kept on the program); it runs
    inside the enclosing program's ``np.errstate``, so without one of its own."""
    run = program.executables.get("numpy")
    if run is None:
        run = program.executables["numpy"] = compile_program(program)
    return run.raw


def use_fast(seen: int) -> bool:
    """Does a program whose structure was evaluated ``seen`` times run as straight-line
    code (``compile_fast``)? From the ``auto`` threshold on (a hot program; also under the
    ``numpy`` backend), unless ``NABLA_FAST_NUMPY=0``; always in check mode."""
    return CONFIG.fast_numpy and (seen >= CONFIG.auto_threshold or CONFIG.fast_numpy_check)


def compile_fast(program: Program):
    """``program`` lowered once into a straight-line function (``fast.lower``), or the
    interpreter where it cannot be (``fast.CannotLower``: a size left symbolic, a
    collective between processes). In check mode (``NABLA_FAST_NUMPY_CHECK=1``) every call
    also runs the interpreter and compares the results bit for bit."""
    keep_freed_memory()
    try:
        run = fast.lower(program)
    except fast.CannotLower as why:
        if CONFIG.debug_compile:
            debug_log(fast.LOG, "%d-op program stays interpreted: %s", program.num_ops, why)
        run = program.executables.get("numpy") or compile_program(program)
        program.executables.setdefault("numpy", run)
        return run
    if CONFIG.fast_numpy_check:
        interpreter = program.executables.get("numpy") or compile_program(program)
        run = fast.checked(program, run, interpreter)
    return run


def _fast_bound(program: Program):
    """A nested program (a control-flow body) as straight-line code, lowered once."""
    run = program.executables.get("numpy_fast")
    if run is None:
        run = program.executables["numpy_fast"] = compile_fast(program)
    return run.raw


def _compiled_call(args, kwargs):
    """A nested program (``nb.compile``'s fast path), interpreted once bound."""
    return _bound(kwargs["program"])(list(args))


# ----------------------------------------------------------------------------- control flow
# Bodies are nested programs over (their operands, the construct's captured inputs).
# ``bound``: how a body runs (interpreted, or as straight-line code: ``_fast_bound``)
def _cond(args, kwargs, bound=_bound):
    """Run branch ``args[0]`` (clamped) on the remaining inputs."""
    branches = kwargs["branches"]
    index = min(max(int(args[0]), 0), len(branches) - 1)
    return bound(branches[index])(list(args[1:]))


def _while_loop(args, kwargs, bound=_bound):
    n = kwargs["n_carry"]
    carry, caps = list(args[:n]), list(args[n:])
    cond, body = bound(kwargs["cond"]), bound(kwargs["body"])
    while bool(cond(carry + caps)[0]):
        carry = body(carry + caps)
    return carry


def _scan(args, kwargs, bound=_bound):
    """A Python loop over the body; each step's ``xs`` are views, ``ys`` are written in
    place into preallocated outputs (the step axis follows the batch dims)."""
    n, nx, length = kwargs["n_carry"], kwargs["n_xs"], kwargs["length"]
    carry, xs, caps = list(args[:n]), args[n : n + nx], list(args[n + nx :])
    body = bound(kwargs["body"])
    ys = [np.empty(tuple(shape), dtype.numpy) for dtype, shape in kwargs["out_specs"][n:]]
    x_pre = [(slice(None),) * a for a in kwargs["x_axes"]]
    y_pre = (slice(None),) * kwargs["y_axis"]
    steps = range(length - 1, -1, -1) if kwargs["reverse"] else range(length)
    for t in steps:
        out = body(carry + [x[p + (t,)] for x, p in zip(xs, x_pre)] + caps)
        carry = out[:n]
        for y, v in zip(ys, out[n:]):
            y[y_pre + (t,)] = v
    return carry + ys


LOWERINGS["compiled_call"] = _compiled_call
LOWERINGS["cond"] = _cond
LOWERINGS["while_loop"] = _while_loop
LOWERINGS["scan"] = _scan
# the same loops with bodies as straight-line code, for ``fast.py``
_control_flow = {
    name: functools.partial(fn, bound=_fast_bound)
    for name, fn in (("cond", _cond), ("while_loop", _while_loop), ("scan", _scan))
}


def _custom_kernel(args, kwargs):
    """A custom Mojo kernel, run by the user's NumPy reference function."""
    fn = NUMPY_REFERENCES[(kwargs["op"], kwargs["kernel"], kwargs["digest"])]
    res = fn(*args, **dict(kwargs["params"]))
    res = list(res) if isinstance(res, tuple | list) else [res]
    specs = kwargs["out_types"]
    if len(res) != len(specs):
        raise UnsupportedOp(
            f"custom op {kwargs['op']!r}: its NumPy reference returned {len(res)} result(s), "
            f"the op declares {len(specs)}"
        )
    out = []
    for i, (r, (dt, shape)) in enumerate(zip(res, specs, strict=True)):
        r = np.asarray(r)
        if tuple(r.shape) != tuple(shape):
            raise UnsupportedOp(
                f"custom op {kwargs['op']!r}: its NumPy reference returned shape "
                f"{tuple(r.shape)} for output {i}, the op declares {tuple(shape)} ({dt.value})"
            )
        out.append(r)
    return out


LOWERINGS["custom_kernel"] = _custom_kernel
