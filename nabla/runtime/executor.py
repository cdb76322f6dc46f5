"""Choosing an executor for a ``Program``: the backend policy and the ``auto`` tier.

``numpy`` interprets; ``max`` compiles with MAX; ``auto`` interprets a structure the first
times it is seen and switches to MAX once it repeats ``CONFIG.auto_threshold`` times (always
MAX when a value lives on an Accelerator, or when the program holds a custom kernel with no
NumPy reference). Without MAX installed, ``auto`` is the interpreter. Each backend's
compiled form is kept on the program (``program.executables``).
"""

from __future__ import annotations

import numpy as np

from ..backends import buffer_to_numpy, max_backend
from ..backends import numpy as numpy_backend
from ..core.config import CONFIG
from ..core.ir import Program

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


def select_backend(program: Program, seen: int) -> str:
    """The backend that runs ``program`` now, given how often its structure was seen."""
    choice = CONFIG.backend
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


def run_program(program: Program, seen: int, inputs: list) -> list:
    """Run ``program`` on ``inputs`` (backend buffers) with the selected backend."""
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
