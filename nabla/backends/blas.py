"""NumPy's BLAS thread pool, held to one thread around a call (``one_thread``).

OpenBLAS's helper threads spin for ~0.1 s after each call that used them, waiting for the
next; on a machine with few cores they take the cores from whatever runs next. Beside
MAX's own CPU thread pool that was measured at 3-5x on MAX's calls (and the spinning pair
slows NumPy's own small products too when another process loads the machine: a 1000x1000
matrix-vector product in 0.12-0.19 ms on a quiet machine took 0.6-4 ms at load 4-5, with
one thread 0.19-0.25 ms). The runtime runs the interpreter's programs whose matrix
products are small on one BLAS thread (``runtime/executor.py``); the user's own NumPy calls
keep the pool as it is.

The pool is found through ``threadpoolctl`` (installed with the ``max`` extra, as MAX is);
without it ``one_thread`` does nothing. Setting the count is one C call (~0.3 us).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["one_thread", "controllers"]

_FOUND: list = []
_LOCK = threading.Lock()


class _Pool(NamedTuple):
    """One BLAS library's thread count: read and set."""

    get: Callable[[], int]
    set: Callable[[int], object]


def _pool(lib) -> _Pool:
    """OpenBLAS (with its own threads) through its C functions, looked up once: ~0.3 us a
    call against ~10 us through threadpoolctl's methods, which other libraries keep."""
    if getattr(lib, "internal_api", None) == "openblas" and lib.threading_layer != "openmp":
        for prefix in ("", "scipy_"):
            for suffix in ("", "64_", "_64"):
                get = getattr(lib.dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
                put = getattr(lib.dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    return _Pool(get, put)
    return _Pool(lib.get_num_threads, lib.set_num_threads)


def controllers() -> list:
    """The thread counts of the BLAS libraries loaded in this process (found once; empty
    without threadpoolctl)."""
    if not _FOUND:
        with _LOCK:
            if not _FOUND:
                try:
                    from threadpoolctl import ThreadpoolController  # noqa: PLC0415

                    found = [
                        _pool(c)
                        for c in ThreadpoolController().lib_controllers
                        if c.user_api == "blas"
                    ]
                except Exception:  # noqa: BLE001 - absent or broken: no control
                    found = []
                _FOUND.append(found)
    return _FOUND[0]


@contextlib.contextmanager
def one_thread():
    """Run the body with every BLAS library on one thread, then restore each one's count
    (read at entry, so a count the user set meanwhile stands)."""
    saved = []
    for pool in controllers():
        n = pool.get()
        if n != 1:
            pool.set(1)
            saved.append((pool, n))
    try:
        yield
    finally:
        for pool, n in saved:
            pool.set(n)
