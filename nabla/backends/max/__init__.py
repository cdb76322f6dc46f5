"""The MAX backend: compile a ``Program`` with Modular MAX and run it on CPU or GPU.

This package is the only place in nabla that imports ``max``; importing it without MAX
installed works (``available()`` is then False). See ``README.md`` here for invariants and the
measured figures behind the design.

Contract used by ``nabla.backends``:

- ``available()``: MAX is importable.
- ``compile_program(program)``: a callable ``f(inputs) -> outputs`` (NumPy arrays for host
  tensors, MAX ``Buffer``s for accelerator tensors). Raises ``UnsupportedOnMax``.
- ``ready_for(program)``: for the ``auto`` policy; True once a compiled model is ready,
  otherwise starts compiling (in the background when ``CONFIG.background_compile``).
- ``buffer_to_numpy(buf)``, ``to_device(arr, device)``, ``stats()``.
- ``compiling()``: True while a background compile of this process is in flight.
- ``note_path(program, kind, extra)``: where a note about ``program`` (the executor race's
  outcome) is kept beside its compiled model, or None without a usable disk cache.
"""

from __future__ import annotations

import sys

import numpy as np

from ...core.config import CONFIG
from .cache import program_digest, reset_stats, stats
from .disk import DISK
from .lowerings import LOWERINGS, UNSUPPORTED, UnsupportedOnMax, unsupported_reason

__all__ = [
    "available",
    "compile_program",
    "ready_for",
    "buffer_to_numpy",
    "to_device",
    "stats",
    "reset_stats",
    "clear_caches",
    "accelerator_count",
    "note_path",
    "compiling",
    "UnsupportedOnMax",
    "LOWERINGS",
    "UNSUPPORTED",
    "unsupported_reason",
]

_AVAILABLE: list = []


def available() -> bool:
    """True when MAX (graph, engine, driver) can be imported."""
    if not _AVAILABLE:
        try:
            import max.driver  # noqa: F401, PLC0415
            import max.engine  # noqa: F401, PLC0415
            import max.graph  # noqa: F401, PLC0415

            _AVAILABLE.append(True)
        except Exception:  # noqa: BLE001 - a broken install counts as absent
            _AVAILABLE.append(False)
    return _AVAILABLE[0]


def _session():
    from . import session  # noqa: PLC0415 - imports max

    return session


def compile_program(program):
    """Compile (or fetch from the caches) ``program``; returns ``f(list) -> list``."""

    return _session().get_executable(program, debug=CONFIG.debug_compile)


def ready_for(program) -> bool:
    """``auto`` policy hook: True when a compiled model is ready; else start compiling it.

    Programs MAX cannot run are remembered and always answer False (they stay on NumPy).
    """

    return _session().ready(
        program, background=CONFIG.background_compile, debug=CONFIG.debug_compile
    )


def buffer_to_numpy(buf) -> np.ndarray:
    """A NumPy array with the value of ``buf`` (zero-copy for host buffers)."""
    if isinstance(buf, np.ndarray):
        return buf
    from max import driver  # noqa: PLC0415
    from max.dtype import DType  # noqa: PLC0415

    if isinstance(buf, driver.Buffer):
        if not buf.is_host:
            buf = buf.to(driver.CPU())
        if buf.dtype == DType.bfloat16:
            import ml_dtypes  # noqa: PLC0415

            return buf.view(DType.uint16, buf.shape).to_numpy().view(ml_dtypes.bfloat16)
        return buf.to_numpy()
    return np.asarray(buf)


def to_device(arr, device):
    """Place a NumPy array on ``device``: the array itself for the CPU, a ``Buffer`` on an
    accelerator."""
    if device.is_cpu:
        return buffer_to_numpy(arr)
    from max import driver  # noqa: PLC0415

    s = _session()
    target = s.driver_device(device)
    if isinstance(arr, driver.Buffer):
        return arr if arr.device == target else arr.to(target)
    arr = np.asarray(arr)
    return s._cpu_in(arr.dtype.name)(arr).to(target)


def accelerator_count() -> int:
    """Number of accelerators MAX sees (0 without MAX)."""
    if not available():
        return 0
    from max import driver  # noqa: PLC0415

    return driver.accelerator_count()


def compiling() -> bool:
    """True while a background compile of this process is in flight (it takes a core: a
    race timed beside it is not kept, ``runtime/race_records.py``)."""
    session = sys.modules.get(f"{__name__}.session")  # not imported: nothing compiled yet
    return session is not None and session.compiling()


def note_path(program, kind: str, extra: str = ""):
    """``<cache dir>/<kind>/<digest>.json``: the file for a note of kind ``kind`` about
    ``program`` (its digest covers the program's content, MAX's version, the CPU, our
    lowerings and ``extra``), or None when the disk cache cannot be used or the program has
    no stable digest. The ``kind`` directory is made on first use."""
    directory = DISK.directory()
    if directory is None:
        return None
    digest = program_digest(program, f"{kind}|{extra}")
    if digest is None:
        return None
    folder = directory / kind
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return folder / f"{digest[:40]}.json"


def clear_caches() -> None:
    """Forget in-memory compiled models and unsupported marks (the disk cache stays)."""
    if available():
        _session().clear_caches()
