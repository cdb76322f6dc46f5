"""Choosing an executor for a ``Program``: the backend policy and the ``auto`` tier.

``numpy`` interprets; ``max`` compiles with MAX; ``auto`` interprets a structure the first
times it is seen and switches to MAX once it repeats ``CONFIG.auto_threshold`` times (always
MAX when a value lives on an Accelerator, or when the program holds a custom kernel with no
NumPy reference). Without MAX installed, ``auto`` is the interpreter. Each backend's
compiled form is kept on the program (``program.executables``).
"""

from __future__ import annotations

import hashlib
import weakref

import numpy as np

from ..backends import buffer_to_numpy, max_backend, mpi
from ..backends import numpy as numpy_backend
from ..core.config import CONFIG
from ..core.ir import Program
from ..core.sharding import PROCESS

__all__ = ["select_backend", "run_program"]


def _needs_max(program: Program) -> bool:
    """True when any input lives on, or any instruction places a value on, an accelerator."""
    for spec in program.inputs:
        if spec.device is not None and not spec.device.is_cpu:
            return True
    for instr in program.instructions:
        dev = instr.kwargs.get("device")
        if dev is not None and not dev.is_cpu:
            return True
    return False


_CROSSES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def crosses_processes(program: Program) -> bool:
    """True when ``program`` (or a program it calls) holds a collective between processes
    (a ``mesh_*`` op of a mesh spanning processes): the MPI lowerings run those."""
    got = _CROSSES.get(program)
    if got is None:
        got = False
        for instr in program.instructions:
            kw = instr.kwargs
            nested = kw.get("program") if instr.op == "compiled_call" else None
            if (instr.op.startswith("mesh_") and "mesh" in kw) or (
                nested is not None and crosses_processes(nested)
            ):
                got = True
                break
        _CROSSES[program] = got
    return got


def select_backend(program: Program, seen: int) -> str:
    """The backend that runs ``program`` now, given how often its structure was seen."""
    choice = CONFIG.backend
    if PROCESS.count > 1 and crosses_processes(program):
        return "numpy"
    if choice == "numpy":
        if _needs_max(program):
            raise RuntimeError("the numpy backend cannot run tensors on an Accelerator")
        return "numpy"
    if choice == "max" or _needs_max(program):
        if max_backend() is None:
            raise RuntimeError(
                "the max backend was requested but MAX is not installed; "
                "install it with: pip install 'nabla[max]'"
            )
        return "max"
    # auto: a structure the interpreter cannot run (a custom kernel without a NumPy
    # reference) is compiled by MAX now; without MAX, the interpreter's error says why
    if not numpy_backend.supports(program):
        return "numpy" if max_backend() is None else "max"
    # a structure seen fewer times than the threshold never touches MAX (importing it
    # costs ~0.25 s, which the first result must not pay)
    if seen < CONFIG.auto_threshold:
        return "numpy"
    mx = max_backend()
    if mx is None:
        return "numpy"
    return "max" if mx.ready_for(program) else "numpy"


_DIGESTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _digest(program: Program) -> str:
    """The program's op sequence and shapes, in a form equal across processes (no object
    identities): what the processes of one SPMD program must agree on."""
    got = _DIGESTS.get(program)
    if got is None:
        parts = [repr([(s.dtype.name, tuple(s.shape)) for s in program.inputs])]
        for instr in program.instructions:
            shapes = [(dt.name, tuple(shape)) for dt, shape in instr.out_specs]
            parts.append(f"{instr.op}{instr.inputs}{shapes}")
            if instr.op == "compiled_call":  # the called program's collectives too
                parts.append(_digest(instr.kwargs["program"]))
        text = ";".join(parts)
        got = _DIGESTS[program] = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    return got


def run_program(program: Program, seen: int, inputs: list) -> list:
    """Run ``program`` on ``inputs`` (backend buffers) with the selected backend."""
    if PROCESS.count > 1 and crosses_processes(program):
        # every process must run this same program: a mismatch is an error, not a deadlock
        with mpi.agreed_program(f"program {_digest(program)} ({len(program.instructions)} ops)"):
            return _run(program, seen, inputs)
    return _run(program, seen, inputs)


def _run(program: Program, seen: int, inputs: list) -> list:
    name = select_backend(program, seen)
    exe = program.executables.get(name)
    if exe is None:
        if name == "numpy":
            exe = numpy_backend.compile_program(program)
        else:
            exe = max_backend().compile_program(program)
        program.executables[name] = exe
    if name == "numpy":
        inputs = [b if isinstance(b, np.ndarray) else buffer_to_numpy(b) for b in inputs]
    return exe(inputs)
