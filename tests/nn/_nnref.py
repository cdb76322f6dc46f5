"""Shared helpers of the nn tests: NumPy conversion, finite-difference gradients, and the
recorded PyTorch references of ``tests/nn/data``."""

import importlib.util
from pathlib import Path

import numpy as np

import nabla as nb


def t(a, dtype=np.float32):
    return nb.constant(np.asarray(a, dtype=dtype))


def fd_grad(f, x, eps=1e-3):
    """Central differences of scalar ``f`` (NumPy float64 in, float out) at array ``x``."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


DATA = Path(__file__).parent / "data"


def recorded(maker: str, npz: str):
    """``(the maker module, its recorded arrays)``: ``tests/nn/data/<maker>.py``, the script
    that recorded PyTorch's values (its cases are shared with the test), and ``<npz>``."""
    spec = importlib.util.spec_from_file_location(maker, DATA / f"{maker}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, dict(np.load(DATA / npz))
