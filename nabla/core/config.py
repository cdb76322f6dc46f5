"""Process-wide settings: backend choice, auto-tier threshold, memory bound, debug switches.

Environment variables read at import (each is validated, and a bad value raises ValueError
naming the variable): ``NABLA_BACKEND`` (``auto``|``numpy``|``max``), ``NABLA_AUTO_THRESHOLD``
(int >= 0, default 2), ``NABLA_MAX_ALLOC_BYTES`` (int > 0: the largest result an op may
create, default the smallest of the machine's physical memory, the process's ``ulimit -v``
(``RLIMIT_AS``/``RLIMIT_DATA``) and its cgroups' ``memory.max``), and the switches
``NABLA_EAGER_MAX_GRAPH`` (builds and checks each op's backend value at the call),
``NABLA_DEBUG_NANS`` and ``NABLA_DEBUG_INFS`` (``nb.debug_nans``: find the op that made a
NaN or an infinity),
``NABLA_DEBUG_COMPILE`` (logs every MAX compile and the source of every program lowered to
straight-line NumPy code), ``NABLA_BACKGROUND_COMPILE`` and ``NABLA_FAST_NUMPY`` (hot
programs on NumPy as straight-line code; both default on) and ``NABLA_FAST_NUMPY_CHECK``
(every NumPy program's first calls also run that way and compared bit for bit), which
accept ``1/0``, ``true/false``, ``yes/no`` and ``on/off`` in any case.
"""

from __future__ import annotations

import contextlib
import logging
import os

__all__ = ["set_backend", "get_backend_name", "backend", "BACKENDS", "debug_log"]

BACKENDS = ("auto", "numpy", "max")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def env_bool(name: str, default: bool) -> bool:
    """The switch ``name`` from the environment (``default`` when unset or empty)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"{name} must be one of {'/'.join(_TRUE)} (on) or {'/'.join(_FALSE)} (off), got {raw!r}"
    )


def env_int(name: str, default: int | None, minimum: int) -> int | None:
    """The integer ``name`` from the environment, at least ``minimum`` (``default`` when unset
    or empty)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {raw!r}")
    return value


def physical_memory_bytes() -> int | None:
    """The machine's physical memory in bytes, or None where the OS does not say."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page = os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    if pages <= 0 or page <= 0:
        return None
    return pages * page


_UNLIMITED = 1 << 62  # larger values (cgroup v1's "no limit", RLIM_INFINITY) bound nothing


def _cgroup_memory_limits() -> list[int]:
    """The memory limits of this process's cgroups (v2 ``memory.max`` of its group and every
    ancestor, v1 ``memory.limit_in_bytes``), in bytes; empty where none is set or readable."""
    limits = []

    def read(file):
        try:
            with open(file) as f:
                text = f.read().strip()
        except OSError:
            return
        if text.isdigit() and 0 < int(text) < _UNLIMITED:
            limits.append(int(text))

    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return limits
    for line in lines:
        _, controllers, group = line.split(":", 2)
        if controllers == "":  # v2: the limit of the group and of each ancestor applies
            parts = [p for p in group.split("/") if p]
            for k in range(len(parts), -1, -1):
                read(os.path.join("/sys/fs/cgroup", *parts[:k], "memory.max"))
        elif "memory" in controllers.split(","):  # v1 (in a container: the mount's root)
            for base in (os.path.join("/sys/fs/cgroup/memory", group.lstrip("/")), ""):
                read(os.path.join(base or "/sys/fs/cgroup/memory", "memory.limit_in_bytes"))
    return limits


def memory_bound() -> tuple[int, str]:
    """``(bytes, what)``: the smallest of the machine's physical memory, the process's
    address-space and data limits (``ulimit -v``: ``RLIMIT_AS``, ``RLIMIT_DATA``) and its
    cgroups' memory limits (``memory.max``), with a description of which one it is."""
    bounds = []
    phys = physical_memory_bytes()
    if phys is not None:
        bounds.append((phys, "this machine's physical memory"))
    try:
        import resource  # noqa: PLC0415 - POSIX only

        for name, flag in (("RLIMIT_AS", "-v"), ("RLIMIT_DATA", "-d")):
            soft = resource.getrlimit(getattr(resource, name))[0]
            if soft != resource.RLIM_INFINITY and 0 < soft < _UNLIMITED:
                bounds.append((soft, f"the process's {name} limit (ulimit {flag})"))
    except (ImportError, AttributeError, ValueError, OSError):
        pass
    bounds += [
        (n, "the process's cgroup memory limit (memory.max)") for n in _cgroup_memory_limits()
    ]
    return min(bounds, key=lambda b: b[0]) if bounds else (_UNLIMITED, "no known bound")


class _Config:
    """Process-wide (not per thread): background compile workers see the same settings."""

    def __init__(self):
        name = os.environ.get("NABLA_BACKEND", "auto").strip().lower() or "auto"
        if name not in BACKENDS:
            raise ValueError(f"NABLA_BACKEND must be one of {BACKENDS}, got {name!r}")
        self.backend = name
        self.auto_threshold = env_int("NABLA_AUTO_THRESHOLD", 2, 0)
        self.eager_graph = env_bool("NABLA_EAGER_MAX_GRAPH", False)
        # nb.debug_nans / nb.debug_infs (core/debug.py)
        self.debug_nans = env_bool("NABLA_DEBUG_NANS", False)
        self.debug_infs = env_bool("NABLA_DEBUG_INFS", False)
        self.debug_values = self.debug_nans or self.debug_infs  # either: one read per op
        self.debug_compile = env_bool("NABLA_DEBUG_COMPILE", False)
        self.background_compile = env_bool("NABLA_BACKGROUND_COMPILE", True)
        # a background compile finishes after the program exits (default: it ends with it)
        self.compile_detach = env_bool("NABLA_COMPILE_DETACH", False)
        # auto: once MAX has compiled a hot structure, time it against the interpreter on
        # the next calls and keep the faster (0: switch to MAX without measuring)
        self.auto_race = env_bool("NABLA_AUTO_RACE", True)
        # a finished race's scores are kept beside the compiled models and settle the same
        # program's race in later processes at once (runtime/race_records.py); 0: race anew
        self.race_memory = env_bool("NABLA_RACE_MEMORY", True)
        # the NumPy interpreter asks glibc to keep freed memory for reuse rather than hand it
        # back to the OS (backends/numpy: keep_freed_memory); 0 leaves malloc as it is
        self.malloc_reuse = env_bool("NABLA_MALLOC_REUSE", True)
        # a hot program on the NumPy executor runs as straight-line code generated from the
        # program (backends/numpy/fast.py); 0 keeps the interpreter. The check mode runs
        # every program both ways and compares the results bit for bit (for tests)
        self.fast_numpy = env_bool("NABLA_FAST_NUMPY", True)
        self.fast_numpy_check = env_bool("NABLA_FAST_NUMPY_CHECK", False)
        # both NumPy executors apply backends/numpy/fusion.py's rewrites to a program as
        # they bind it (a convolution's input gradient as a transposed convolution); 0
        # runs the program's instructions as recorded
        self.numpy_fusion = env_bool("NABLA_NUMPY_FUSION", True)
        # processes on one machine exchange collectives through an MPI shared-memory window
        # (backends/mpi.py); 0 keeps MPI's calls alone, as between machines
        self.mpi_shared = env_bool("NABLA_MPI_SHARED", True)
        # there, a large gather reads each peer's block straight out of its memory
        # (process_vm_readv; backends/mpi.py); 0 copies it through the shared slots
        self.mpi_single_copy = env_bool("NABLA_MPI_SINGLE_COPY", True)
        # the largest result (bytes) an op may create: checked at the op call (ops/base.py)
        self.max_alloc_bytes = env_int("NABLA_MAX_ALLOC_BYTES", None, 1)
        self.max_alloc_source = "NABLA_MAX_ALLOC_BYTES"
        if self.max_alloc_bytes is None:
            self.max_alloc_bytes, self.max_alloc_source = memory_bound()


CONFIG = _Config()


def set_backend(name: str) -> None:
    """Choose how graphs execute: ``"auto"`` (default), ``"numpy"`` or ``"max"``.

    ``auto`` interprets a graph structure with NumPy the first time it is seen and compiles it
    with MAX once it repeats (``NABLA_AUTO_THRESHOLD`` times); on an Accelerator it always uses
    MAX.

    Raises:
        ValueError: for an unknown backend name.
    """
    name = str(name).lower()
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS}")
    CONFIG.backend = name


def get_backend_name() -> str:
    """The execution backend in force: ``"auto"``, ``"numpy"`` or ``"max"``.

    Set by :func:`nabla.set_backend`, :func:`nabla.backend` or ``NABLA_BACKEND``.
    """
    return CONFIG.backend


@contextlib.contextmanager
def backend(name: str):
    """Context manager form of :func:`set_backend`: ``with nb.backend("numpy"): ...``.

    Args:
        name: ``"auto"``, ``"numpy"`` or ``"max"`` (case-insensitive); the previous backend
            is restored on exit.

    Raises:
        ValueError: for an unknown backend name.
    """
    old = CONFIG.backend
    set_backend(name)
    try:
        yield
    finally:
        CONFIG.backend = old


def debug_log(logger: logging.Logger, msg: str, *args) -> None:
    """Log ``msg`` at INFO on ``logger``, shown even when the application configured no
    logging (the messages ``NABLA_DEBUG_COMPILE=1`` asks for), as ``[logger name] msg``."""
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(f"[{logger.name}] %(message)s"))
        logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.info(msg, *args)
