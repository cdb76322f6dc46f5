"""``nb.linalg``: the names of NumPy's and JAX's ``linalg`` that nabla has.

``norm``, and ``inv``, ``solve``, ``det``, ``slogdet`` and ``cholesky``: ops run by LAPACK
through NumPy on every backend (MAX has no kernels for them), with derivatives of any order.
The other decompositions (``eigh``, ``svd``, ``qr``, ...) are not built yet.
"""

from __future__ import annotations

from .ops.linalg import cholesky, det, inv, norm, slogdet, solve

__all__ = ["norm", "inv", "solve", "det", "slogdet", "cholesky"]
