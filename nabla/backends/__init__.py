"""Backends: tables from op name to a lowering, plus a way to run a ``Program``.

``run_program`` picks the executor per the policy in ``nabla.core.config``:
``numpy`` interprets; ``max`` compiles with MAX; ``auto`` interprets a structure the first
time and switches to MAX once it repeats (always MAX on an Accelerator). Only
``nabla.backends.max`` imports ``max``; without it installed, ``auto`` is the interpreter.
"""

from __future__ import annotations

import numpy as np

from ..core.config import CONFIG
from . import numpy as numpy_backend

__all__ = [
    "run_program",
    "buffer_to_numpy",
    "buffer_shape_dtype",
    "max_available",
    "backend_stats",
]

_MAX_STATE = {"checked": False, "module": None}


def max_backend():
    """The MAX backend module, or None when MAX is not installed."""
    if not _MAX_STATE["checked"]:
        _MAX_STATE["checked"] = True
        try:
            from . import max as max_mod  # noqa: PLC0415

            if max_mod.available():
                _MAX_STATE["module"] = max_mod
        except ImportError:
            _MAX_STATE["module"] = None
    return _MAX_STATE["module"]


def max_available() -> bool:
    return max_backend() is not None


def _needs_max(program) -> bool:
    """True when any input lives on, or any instruction places a value on, an accelerator."""
    for spec in program.in_specs:
        if spec[2] is not None and not spec[2].is_cpu:
            return True
    for instr in program.instrs:
        dev = instr[2].get("device")
        if dev is not None and not dev.is_cpu:
            return True
    return False


def backend_stats() -> dict:
    """Counters of the execution layer: graph evaluations and program-cache hits/misses, and
    (when MAX is installed) MAX compiles, compile seconds, memory/disk cache hits, disk load
    seconds, background compiles and programs MAX could not run."""
    from ..core.graph import GRAPH

    out = dict(GRAPH.stats)
    out["programs_cached"] = len(GRAPH.cache)
    mx = max_backend()
    if mx is not None:
        out.update({f"max_{k}": v for k, v in mx.stats().items()})
    return out


def select_backend(program) -> str:
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
    # auto
    mx = max_backend()
    if mx is None or program.seen < CONFIG.auto_threshold:
        return "numpy"
    return "max" if mx.ready_for(program) else "numpy"


def run_program(program, inputs: list) -> list:
    name = select_backend(program)
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


def buffer_to_numpy(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        return buf
    mx = max_backend()
    if mx is not None:
        return mx.buffer_to_numpy(buf)
    return np.asarray(buf)


def buffer_shape_dtype(buf):
    from ..core.dtypes import from_numpy_dtype

    a = buffer_to_numpy(buf)
    return a.shape, from_numpy_dtype(a.dtype)
