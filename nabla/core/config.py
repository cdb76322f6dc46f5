"""Process-wide settings: backend choice, auto-tier threshold, debug switches.

Environment variables read at import: ``NABLA_BACKEND`` (``auto``|``numpy``|``max``),
``NABLA_AUTO_THRESHOLD`` (int, default 2), ``NABLA_EAGER_MAX_GRAPH`` (``1`` builds and checks
each op's backend value at the call), ``NABLA_DEBUG_COMPILE`` (``1`` logs every MAX compile).
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["set_backend", "get_backend_name", "backend", "BACKENDS"]

BACKENDS = ("auto", "numpy", "max")


class _Config:
    """Process-wide (not per thread): background compile workers see the same settings."""

    def __init__(self):
        name = os.environ.get("NABLA_BACKEND", "auto").strip().lower() or "auto"
        if name not in BACKENDS:
            raise ValueError(f"NABLA_BACKEND must be one of {BACKENDS}, got {name!r}")
        self.backend = name
        self.auto_threshold = int(os.environ.get("NABLA_AUTO_THRESHOLD", "2"))
        self.eager_graph = os.environ.get("NABLA_EAGER_MAX_GRAPH", "0") == "1"
        self.debug_compile = os.environ.get("NABLA_DEBUG_COMPILE", "0") == "1"
        self.background_compile = os.environ.get("NABLA_BACKGROUND_COMPILE", "1") == "1"


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
