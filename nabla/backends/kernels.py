"""Custom kernel packages: finding a kernel by name, content digests, NumPy references.

A custom kernel lives in a *kernel package*: a Mojo source directory (an ``__init__.mojo``
plus the kernel files, each kernel a struct decorated ``@register("name")``) or a prebuilt
``.mojoc``. This module needs no compiler: it reads the sources to learn which names a package
registers (so "kernel not found" can list them at the call) and hashes their content (the
digest travels in the instruction's kwargs, so the disk cache of compiled models and the
``.mojoc`` cache both change when a source changes). Precompiling is the MAX backend's job
(``max/kernels.py``).

``NUMPY_REFERENCES`` maps ``(op name, kernel name, package digest)`` to the user's NumPy
reference function; the NumPy backend runs it for a ``custom_kernel`` instruction (the
reference is kept out of the instruction so that the program's digest stays canonical).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import time
from pathlib import Path

from ..core.ir import Program

__all__ = [
    "KernelError",
    "KernelNotFoundError",
    "KernelPackage",
    "find_kernel",
    "NUMPY_REFERENCES",
    "kernel_instructions",
    "KernelLowering",
    "graph_kernel_calls",
    "graph_kernel_call",
]

RECHECK_SECONDS = 1.0
"""How long a package's files are trusted unchanged before they are stat'ed again."""

NUMPY_REFERENCES: dict = {}
"""``(op name, kernel name, package digest) -> fn(*arrays, **params) -> array(s)``."""

_REGISTER = re.compile(
    r"""@\s*(?:[A-Za-z_][\w.]*\.)?register\(\s*(?:name\s*=\s*)?["']([^"']+)["']"""
)


class KernelError(RuntimeError):
    """A custom kernel could not be found, built or run; the message names the kernel and
    carries the compiler's own words."""


class KernelNotFoundError(KernelError, LookupError):
    """No package given to a custom kernel call registers its name."""


class KernelPackage:
    """One kernel package on disk: a Mojo source directory or a prebuilt ``.mojoc``.

    ``digest`` is a sha256 of the package content (every ``.mojo`` file's relative path and
    bytes, or the ``.mojoc`` bytes), recomputed only when a file's size or mtime changes
    (files are stat'ed again at most once per ``RECHECK_SECONDS``).
    ``names`` are the kernel names its sources register (None for a ``.mojoc``: unknown
    until MAX loads it).
    """

    _CACHE: dict = {}
    _LOCK = threading.Lock()

    def __init__(self, path: Path, files: tuple, digest: str, names: tuple | None):
        self.path = path
        self.files = files
        self.digest = digest
        self.names = names

    @property
    def is_source(self) -> bool:
        return self.path.is_dir()

    @classmethod
    def load(cls, path) -> KernelPackage:
        """The package at ``path`` (a directory with ``__init__.mojo``, or a ``.mojoc``).

        Within ``RECHECK_SECONDS`` of the last look the package is taken as unchanged (an op
        call costs a dict lookup); after that its files are listed and stat'ed again, and
        hashed again only when one changed."""
        key = os.path.abspath(os.fspath(path))
        now = time.monotonic()
        with cls._LOCK:
            hit = cls._CACHE.get(key)
            if hit is not None and now - hit[2] < RECHECK_SECONDS:
                return hit[1]
        path = Path(key)
        if path.is_dir():
            if not (path / "__init__.mojo").is_file():
                raise KernelError(
                    f"{path} is not a Mojo kernel package: it has no __init__.mojo (a kernel "
                    "package is a directory holding __init__.mojo and the kernel files)"
                )
            files = sorted(p for p in path.rglob("*.mojo") if p.is_file())
        elif path.is_file() and path.suffix == ".mojoc":
            files = [path]
        elif path.exists():
            raise KernelError(
                f"{path} is not a Mojo kernel package (a directory with __init__.mojo, or a "
                "precompiled .mojoc file)"
            )
        else:
            raise KernelError(f"the kernel package {path} does not exist")
        stamp = tuple((str(p), st.st_size, st.st_mtime_ns) for p in files for st in [p.stat()])
        if hit is not None and hit[0] == stamp:
            with cls._LOCK:
                cls._CACHE[key] = (stamp, hit[1], now)
            return hit[1]
        h = hashlib.sha256()
        names: list | None = [] if path.is_dir() else None
        for p in files:
            data = p.read_bytes()
            rel = p.relative_to(path).as_posix() if path.is_dir() else p.name
            h.update(rel.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
            if names is not None:
                text = data.decode("utf-8", errors="replace")
                names.extend(m.group(1) for m in _REGISTER.finditer(text))
        pkg = cls(path, tuple(files), h.hexdigest(), None if names is None else tuple(names))
        with cls._LOCK:
            cls._CACHE[key] = (stamp, pkg, now)
        return pkg

    def __repr__(self):
        return f"<kernel package {self.path} ({self.digest[:12]})>"


def find_kernel(name: str, kernel_path, caller: str = "call_custom_kernel") -> KernelPackage:
    """The package among ``kernel_path`` (one path or a sequence) that registers ``name``.

    A ``.mojoc`` cannot be read without MAX, so one is taken on trust when no source package
    registers the name (MAX then reports a missing kernel when the graph is built). Raises
    ``KernelNotFoundError`` listing the files searched and the names they register.
    """
    if isinstance(kernel_path, str | os.PathLike):
        paths = [kernel_path]
    else:
        paths = list(kernel_path)
    if not paths:
        raise KernelNotFoundError(f"{caller}: no kernel path given for kernel {name!r}")
    packages = [KernelPackage.load(p) for p in paths]
    for pkg in packages:
        if pkg.names is not None and name in pkg.names:
            return pkg
    binaries = [pkg for pkg in packages if pkg.names is None]
    if binaries:
        return binaries[0]
    searched = [str(f) for pkg in packages for f in pkg.files]
    registered = sorted({n for pkg in packages for n in pkg.names or ()})
    raise KernelNotFoundError(
        f"{caller}: no kernel named {name!r} is registered in "
        f"{', '.join(str(p.path) for p in packages)}.\n"
        f"  files searched: {', '.join(searched)}\n"
        f"  kernels registered there: {', '.join(registered) if registered else '(none)'}\n"
        '  (a kernel is registered with @register("name") on its struct)'
    )


def kernel_instructions(program):
    """Yield every ``custom_kernel`` instruction of ``program``, nested programs included."""
    for instr in program.instructions:
        if instr.op == "custom_kernel":
            yield instr
            continue
        for v in instr.kwargs.values():  # compiled_call and control-flow bodies
            for sub in v if isinstance(v, tuple) else (v,):
                if isinstance(sub, Program):
                    yield from kernel_instructions(sub)


class KernelLowering:
    """A custom op lowered by the user's own Python: ``fn(values, kwargs) -> list`` of graph
    values, run by a graph backend (MAX) on its graph values (the original Nabla's op-class
    protocol, ``kernel(args, kwargs)``). It has no canonical form (its code is not part of
    the program's content), so a program holding one is compiled in this process and never
    cached on disk. Compared by identity: one per op.

    Args:
        name: the op's name (in errors).
        fn: ``fn(values, kwargs)``.
    """

    __slots__ = ("name", "fn")

    def __init__(self, name: str, fn):
        self.name, self.fn = name, fn

    def __repr__(self):
        return f"<kernel() lowering of {self.name}>"


_GRAPH_CALL = threading.local()


@contextlib.contextmanager
def graph_kernel_calls(call):
    """While a graph backend runs a ``KernelLowering``: ``call(name, kernel_path, values,
    out_types, device=None, **params)`` builds a kernel call on its graph values (what
    ``call_custom_kernel`` does when given graph values instead of tensors)."""
    saved = getattr(_GRAPH_CALL, "call", None)
    _GRAPH_CALL.call = call
    try:
        yield
    finally:
        _GRAPH_CALL.call = saved


def graph_kernel_call():
    """The active graph backend's kernel call (``graph_kernel_calls``), or None."""
    return getattr(_GRAPH_CALL, "call", None)
