"""Digests of programs, the in-memory compiled-model cache and the MAX backend's counters.

Two cache layers, both keyed by a digest of what the program computes:

- in memory: an LRU dict ``identity -> Executable`` (the graph layer's own program LRU may
  drop a ``Program``; a rebuilt one with the same content finds its executable here);
- on disk: verified ``.mef`` entries (``disk.py``), read back with
  ``InferenceSession.load(path)`` (1-4 ms, against ~2.6 s for MAX 26.7's own cache).

The digest is a sha256 of a canonical text form of the program's content (input specs,
instructions with their physical kwargs, outputs; ``DType`` -> its value, ``Device`` ->
``str``, floats via ``repr``, a nested ``compiled_call`` program by its own content),
not of ``program.key`` (a key may hold object ids). The disk digest adds everything the
machine code depends on: the MAX version, the CPU (machine + a hash of ``/proc/cpuinfo``
flags), the accelerator architectures used, and a hash of this backend's source. A program
holding an object with no canonical form is cached in memory only (by its key).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
import threading
import weakref
from collections import OrderedDict
from pathlib import Path

import numpy as np

from ...core.device import Device
from ...core.dtypes import DType
from ...core.ir import Program

__all__ = ["STATS", "stats", "reset_stats", "program_digest", "max_version", "MemoryCache"]

_STAT_KEYS = (
    "compiles",
    "compile_seconds",
    "memory_hits",
    "disk_hits",
    "disk_load_seconds",
    "disk_writes",
    "background_compiles",
    "unsupported_programs",
    "kernel_builds",
    "kernel_build_seconds",
    "kernel_cache_hits",
)
STATS: dict = dict.fromkeys(_STAT_KEYS, 0)
STATS["compile_seconds"] = 0.0
STATS["disk_load_seconds"] = 0.0
STATS["kernel_build_seconds"] = 0.0
_LOCK = threading.Lock()


def bump(name: str, amount=1) -> None:
    with _LOCK:
        STATS[name] += amount


def stats() -> dict:
    """A snapshot of the MAX backend counters (``nb.backend_stats()``)."""
    with _LOCK:
        return dict(STATS)


def reset_stats() -> None:
    with _LOCK:
        for k in _STAT_KEYS:
            STATS[k] = 0.0 if k.endswith("seconds") else 0


# ----------------------------------------------------------------------------- digests
class _NoCanonicalForm(Exception):
    pass


def _canon(obj, out: list) -> None:
    if obj is None or obj is True or obj is False:
        out.append(repr(obj))
    elif isinstance(obj, tuple | list):
        out.append("(" if isinstance(obj, tuple) else "[")
        for x in obj:
            _canon(x, out)
            out.append(",")
        out.append(")" if isinstance(obj, tuple) else "]")
    elif isinstance(obj, DType):
        out.append("D:" + obj.value)
    elif isinstance(obj, Device):
        out.append("V:" + str(obj))
    elif isinstance(obj, int):
        out.append("i" + str(int(obj)))
    elif isinstance(obj, float):
        out.append("f" + repr(float(obj)))
    elif isinstance(obj, str):
        out.append("s" + repr(obj))
    elif isinstance(obj, dict):
        out.append("{")
        for k in sorted(obj, key=repr):
            _canon(k, out)
            out.append(":")
            _canon(obj[k], out)
            out.append(",")
        out.append("}")
    elif isinstance(obj, Program):
        # a nested program (``compiled_call``): canonical by its content
        _canon(("program", obj.symbolic, program_content(obj)), out)
    else:
        if isinstance(obj, np.bool_):
            out.append(repr(bool(obj)))
        elif isinstance(obj, np.integer):
            out.append("i" + str(int(obj)))
        elif isinstance(obj, np.floating):
            out.append("f" + repr(float(obj)))
        else:
            raise _NoCanonicalForm(type(obj).__name__)


def canonical(obj) -> str | None:
    """Stable text form of a structural key, or None when it holds an unknown object."""
    out: list = []
    try:
        _canon(obj, out)
    except _NoCanonicalForm:
        return None
    return "".join(out)


_FINGERPRINT: dict = {}


def _cpu_flags_hash() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return hashlib.sha256(line.encode()).hexdigest()[:16]
    except OSError:
        pass
    return platform.processor() or "unknown"


def _code_hash() -> str:
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in ("lowerings.py", "session.py", "kernels.py"):
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()[:16]


@functools.cache
def max_version() -> str:
    """The installed MAX version ("unknown" when its metadata cannot be read)."""
    try:
        return importlib.metadata.version("max")
    except Exception:  # noqa: BLE001 - any metadata problem: still a usable key
        return "unknown"


def environment_fingerprint() -> str:
    """What a compiled model depends on besides the program: MAX, CPU, our lowerings."""
    fp = _FINGERPRINT.get("env")
    if fp is None:
        fp = "|".join([f"max={max_version()}", platform.machine(), _cpu_flags_hash(), _code_hash()])
        _FINGERPRINT["env"] = fp
    return fp


def program_content(program) -> tuple:
    """What a program computes: input specs, instructions (with physical kwargs), outputs.

    Hashing this rather than ``program.key`` keeps the digest independent of how the key was
    made (a key may hold object ids); input aliasing shows up as shared input slots."""
    return (program.inputs, program.instructions, program.outputs, program.output_specs)


_CONTENT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def content_digest(program) -> str | None:
    """sha256 of the canonical program content (cached per Program), None if not canonical."""
    try:
        hit = _CONTENT.get(program, _MISSING)
    except TypeError:  # not weak-referenceable
        hit = _MISSING
    if hit is not _MISSING:
        return hit
    text = canonical(program_content(program))
    digest = None if text is None else hashlib.sha256(text.encode()).hexdigest()
    try:
        _CONTENT[program] = digest
    except TypeError:
        pass
    return digest


_MISSING = object()


def program_digest(program, extra: str = "") -> str | None:
    """Stable hex digest of a program for the disk cache (None: do not cache on disk):
    the program content plus the environment fingerprint and ``extra`` (accelerators)."""
    content = content_digest(program)
    if content is None:
        return None
    h = hashlib.sha256()
    for part in (environment_fingerprint(), extra, content):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# ----------------------------------------------------------------------------- memory layer
class MemoryCache:
    """A small thread-safe LRU: ``program.key -> Executable``."""

    def __init__(self, capacity: int = 512):
        self.capacity = capacity
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            exe = self._data.get(key)
            if exe is not None:
                self._data.move_to_end(key)
            return exe

    def put(self, key, exe) -> None:
        with self._lock:
            self._data[key] = exe
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
