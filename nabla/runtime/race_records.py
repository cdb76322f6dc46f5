"""The outcomes of past executor races, kept on disk: a script run again picks the same
executors.

A ``Race`` (``executor.py``) settles a hot program on timings of the moment. Two executors
within a few percent of each other can go either way from one run of a script to the next,
and the program's speed with them: per-example gradients ran at 0.23-0.34 ms on MAX in some
runs and 0.33-0.57 ms on the host in others. As FFTW keeps its measured plans ("wisdom")
and cuDNN its autotuning results, a finished race's scores are written beside the compiled
models, ``<cache dir>/races/<digest>.json``, and a later process meeting the same program
settles its race from them at once: no timed calls, and no MAX compile at all when a host
executor won. Only the scores are kept; the winner is decided from them again in each
process, so the per-process choice (``Race.MAX_TAIL_S``, ``Interleaving``) still applies.
A race timed while a background compile of the process ran (another program's, taking a
core: the first run of a script with several hot programs) is not kept; a later run races
again.

The digest covers what the scores depend on: the program's content, MAX's version, the CPU
(its flags and count), our MAX lowerings, NumPy's version and our NumPy executors' code. A
change of any of them races the program again. A record is JSON (``FORMAT``, the scores in
seconds per entrant, the time it was made); one that cannot be read, or names other
entrants, is ignored and the program raced again, and the new scores replace it. Writes go
to a temporary file renamed into place, so concurrent processes never see part of one.

``NABLA_RACE_MEMORY=0`` (``CONFIG.race_memory``) neither reads nor writes records; removing
the ``races`` directory forgets them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import tempfile
import time
import weakref
from pathlib import Path

import numpy as np

from ..backends import max_backend
from ..backends import numpy as numpy_backend
from ..core.config import CONFIG
from ..core.ir import Program

__all__ = ["recall", "keep", "FORMAT"]

FORMAT = 1
_KIND = "races"
_RECALLED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # program -> scores | None


@functools.cache
def _host_fingerprint() -> str:
    """What the host executors' speed depends on besides the program: NumPy's version, our
    NumPy executors' code and the number of cores."""
    h = hashlib.sha256()
    folder = Path(numpy_backend.__file__).parent
    for path in sorted(folder.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return f"numpy={np.__version__}|cpus={os.cpu_count()}|{h.hexdigest()[:16]}"


def _path(program) -> Path | None:
    mx = max_backend()
    if mx is None or not isinstance(program, Program):
        return None
    return mx.note_path(program, _KIND, _host_fingerprint())


def recall(program, entrants) -> dict | None:
    """The scores (seconds per entrant) a past race of ``program`` recorded, or None (no
    record, another set of entrants, memory off). Read once per program and process."""
    if not CONFIG.race_memory:
        return None
    try:
        return _RECALLED[program]
    except KeyError:
        pass
    scores = None
    path = _path(program)
    if path is not None:
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            record = json.loads(path.read_text())
            got = {str(k): float(v) for k, v in record["scores"].items()}
            if record.get("format") == FORMAT and set(got) == set(entrants):
                if all(math.isfinite(v) and v > 0 for v in got.values()):
                    scores = got
    with contextlib.suppress(TypeError):
        _RECALLED[program] = scores
    return scores


def keep(program, scores: dict) -> None:
    """Record a finished race's ``scores`` for ``program`` (no-op when memory is off or the
    disk cache cannot be used; a write that fails is dropped: the next run races again)."""
    if not CONFIG.race_memory:
        return
    path = _path(program)
    if path is None:
        return
    record = {"format": FORMAT, "scores": dict(scores), "made": time.time()}
    with contextlib.suppress(OSError, ValueError):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    with contextlib.suppress(TypeError):
        _RECALLED[program] = dict(scores)
