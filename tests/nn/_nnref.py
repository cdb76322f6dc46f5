"""Shared helpers of the nn tests: NumPy conversion and finite-difference gradients."""

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
