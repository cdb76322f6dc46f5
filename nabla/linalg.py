"""``nb.linalg``: the names of NumPy's and JAX's ``linalg`` that nabla has.

``norm``, and ``inv``, ``solve``, ``det``, ``slogdet``, ``cholesky``, ``eigh`` and
``eigvalsh``: ops run by LAPACK through NumPy on every backend (MAX has no kernels for
them), with derivatives of any order. ``svd``, ``qr`` and the rest are not built yet.
"""

from __future__ import annotations

from .ops.linalg import cholesky, det, eigh, eigvalsh, inv, norm, slogdet, solve

__all__ = ["norm", "inv", "solve", "det", "slogdet", "cholesky", "eigh", "eigvalsh"]
