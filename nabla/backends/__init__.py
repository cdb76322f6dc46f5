"""Backends: tables from op name to a lowering, plus a way to run a ``Program``.

Each backend takes a ``nabla.core.ir.Program`` and returns a callable from input buffers to
output buffers (``compile_program``); it knows nothing of tensors, transforms or the policy
that chooses between backends (that is ``nabla.runtime.executor``). Only
``nabla.backends.max`` imports ``max``; ``max_backend()`` is None without it.
"""

from __future__ import annotations

import numpy as np

from ..core.dtypes import from_numpy_dtype

__all__ = ["max_backend", "max_available", "buffer_to_numpy", "buffer_shape_dtype"]

_MAX_STATE = {"checked": False, "module": None}


def max_backend():
    """The MAX backend module, or None when MAX is not installed."""
    if not _MAX_STATE["checked"]:
        _MAX_STATE["checked"] = True
        try:
            # imported on first use: importing MAX costs ~0.3 s of start-up
            from . import max as max_mod  # noqa: PLC0415

            if max_mod.available():
                _MAX_STATE["module"] = max_mod
        except ImportError:
            _MAX_STATE["module"] = None
    return _MAX_STATE["module"]


def max_available() -> bool:
    return max_backend() is not None


def buffer_to_numpy(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        return buf
    mx = max_backend()
    if mx is not None:
        return mx.buffer_to_numpy(buf)
    return np.asarray(buf)


def buffer_shape_dtype(buf):
    a = buffer_to_numpy(buf)
    return a.shape, from_numpy_dtype(a.dtype)
