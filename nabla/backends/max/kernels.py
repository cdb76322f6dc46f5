"""Custom kernel packages for MAX: precompiled once into a ``.mojoc`` in nabla's cache.

Given a Mojo source directory, MAX 26.7 runs ``mojo precompile`` on it at every ``Graph``
construction in every new process (1-3 s, more under load). Instead, ``extension_for``
precompiles a source package once into ``<cache dir>/kernels/k_<digest>.mojoc``, where the
digest covers the package content (``KernelPackage.digest``) and the MAX version, and hands
MAX that file: a new process, or an edited-and-reverted package, pays nothing. The build is
locked with ``fcntl`` (concurrent processes build a package once; the others wait and use
it) and published by an atomic rename of a file already carrying its final name (the compiler
bakes the module name from the file's stem). Without a usable cache directory the package is
built into a private temporary directory once per process. Staging directories left by a
killed build are removed after an hour. The ``kernels/`` directory is not bounded by
``NABLA_CACHE_MAX_BYTES`` (a package is tens of KB).

A Mojo compile error is raised as ``KernelError`` carrying the compiler's own message.
Only graphs that hold a custom kernel get ``custom_extensions`` (``extensions_for``), so
kernels a graph does not use cost nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from ..kernels import KernelError, KernelPackage, find_kernel, kernel_instructions
from . import cache
from .disk import DISK

__all__ = ["extension_for", "extensions_for", "kernel_dir", "compiler_message", "graph_call"]

_LOCK = threading.Lock()
_BUILT: dict = {}  # (package path, digest) -> .mojoc path, this process
_PRIVATE: list = []
_CLEANED: set = set()
STALE_SECONDS = 3600.0


def kernel_dir() -> Path:
    """Where precompiled packages live: ``kernels/`` in the compiled-model cache directory
    (``$NABLA_CACHE_DIR`` or ``~/.cache/nabla/max``), else a private temporary directory."""
    directory = DISK.directory()
    if directory is not None:
        path = directory / "kernels"
        with contextlib.suppress(OSError):
            path.mkdir(mode=0o700, exist_ok=True)
            if path not in _CLEANED:  # staging dirs a killed build left, once per process
                _CLEANED.add(path)
                for stale in path.glob(".staging-*"):
                    if time.time() - stale.stat().st_mtime > STALE_SECONDS:
                        shutil.rmtree(stale, ignore_errors=True)
            return path
    if not _PRIVATE:
        _PRIVATE.append(Path(tempfile.mkdtemp(prefix="nabla-kernels-")))
    return _PRIVATE[0]


def compiler_message(text: str) -> str:
    """The useful part of Mojo/MAX compiler output: no crash-reporter noise, no blank lines."""
    keep = []
    for line in text.splitlines():
        if not line.strip() or "Crashpad" in line:
            continue
        keep.append(line.rstrip())
    return "\n".join(keep)


def _mojo(args: list[str]):
    from mojo.run import subprocess_run_mojo  # noqa: PLC0415 - ships with MAX, only needed here

    return subprocess_run_mojo(args, capture_output=True, text=True)


def _build(pkg: KernelPackage, target: Path) -> None:
    """``mojo precompile`` the package into ``target`` (staged, then renamed)."""
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        out = staging / target.name  # the final name: the compiler bakes the module name in
        t0 = time.perf_counter()
        proc = _mojo(["precompile", str(pkg.path), "-o", str(out)])
        if proc.returncode != 0 or not out.exists():
            message = compiler_message((proc.stderr or "") + "\n" + (proc.stdout or ""))
            raise KernelError(
                f"the Mojo kernel package {pkg.path} does not compile (mojo precompile exited "
                f"with {proc.returncode}):\n{message}"
            )
        os.replace(out, target)
        cache.bump("kernel_builds")
        cache.bump("kernel_build_seconds", time.perf_counter() - t0)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def extension_for(package: str, digest: str) -> Path:
    """The ``.mojoc`` MAX loads for the package at ``package`` whose content has ``digest``:
    the package itself when it is a ``.mojoc``, else its cached precompiled form."""
    key = (package, digest)
    hit = _BUILT.get(key)
    if hit is not None and hit.exists():
        return hit
    pkg = KernelPackage.load(package)
    if not pkg.is_source:
        return pkg.path
    if pkg.digest != digest:
        raise KernelError(
            f"the kernel package {package} changed since the op was recorded (its digest is "
            f"now {pkg.digest[:12]}, the program holds {digest[:12]}); record the op again"
        )
    full = hashlib.sha256(f"{digest}|max={cache.max_version()}".encode()).hexdigest()
    directory = kernel_dir()
    target = directory / f"k_{full[:32]}.mojoc"
    with _LOCK:  # threads of this process; the file lock below covers other processes
        if not target.exists():
            fd = os.open(directory / f"k_{full[:32]}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if not target.exists():
                    _build(pkg, target)
            finally:
                os.close(fd)
        else:
            cache.bump("kernel_cache_hits")
        _BUILT[key] = target
    return target


def extensions_for(program) -> list[Path]:
    """The ``custom_extensions`` a graph of ``program`` needs (empty without custom kernels)."""
    seen: dict = {}
    for instr in kernel_instructions(program):
        if instr.kwargs["package"] is None:  # lowered by user code: it loads its packages
            continue
        key = (instr.kwargs["package"], instr.kwargs["digest"])
        if key not in seen:
            seen[key] = extension_for(*key)
    return list(dict.fromkeys(seen.values()))


def graph_call(name: str, kernel_path, values, out_types, device=None, **params):
    """``call_custom_kernel`` on MAX graph values, inside a graph being built (an op's
    ``kernel()``, the original Nabla's protocol): the package's ``.mojoc`` (precompiled once,
    as for ``custom_op``) joins the graph's kernel library, and the call is ``ops.custom``.

    ``values``: a graph value or a list; ``out_types``: a ``max.graph.TensorType`` (``x.type``)
    or a list of them (then a list is returned). ``params``: compile-time kernel parameters.
    """
    from max.graph import Graph, TensorValue, ops  # noqa: PLC0415 - MAX only while lowering

    pkg = find_kernel(name, kernel_path, caller="call_custom_kernel")
    mojoc = extension_for(str(pkg.path), pkg.digest)
    graph = Graph.current
    if str(mojoc) not in {str(p) for p in graph._kernel_library.library_paths()}:
        # MAX takes packages at Graph construction (custom_extensions); a kernel() names its
        # package only now, so it is added to the open graph's library
        graph._import_kernels([mojoc])
    values = list(values) if isinstance(values, list | tuple) else [values]
    single = not isinstance(out_types, list | tuple)
    types = [out_types] if single else list(out_types)
    if device is None:
        device = values[0].device if values else types[0].device
    res = ops.custom(name, device=device, values=values, out_types=types, parameters=params or None)
    res = [r if isinstance(r, TensorValue) else r.tensor for r in res]
    return res[0] if single else res
