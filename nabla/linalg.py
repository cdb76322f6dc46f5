"""``nb.linalg``: the names of NumPy's and JAX's ``linalg`` that nabla has.

Only ``norm`` so far: the decompositions (``inv``, ``solve``, ``svd``, ``eigh``, ...) have no
kernels on MAX's CPU target and are not built.
"""

from __future__ import annotations

from .ops.linalg import norm

__all__ = ["norm"]
