"""``nb.scipy.linalg``: JAX's ``jax.scipy.linalg`` names that models use most, with SciPy's
conventions (``cholesky`` upper by default, ``qr``'s ``"full"``/``"economic"`` modes).
Written with :mod:`nabla.linalg`'s LAPACK ops (a triangular solve is the general ``solve``
of the triangle, so its derivative reaches only the triangle, as JAX's). Not built:
``lu``/``lu_factor``/``lu_solve``, ``expm``, ``schur``, ``sqrtm``, ``polar``."""

from __future__ import annotations

from .. import linalg as _la
from ..core.dtypes import promote_types
from ..ops import creation, unary, view
from ..ops._util import as_tensor
from ..ops.base import OpError
from ..ops.special import floats
from ..runtime.tensor import Tensor

__all__ = [
    "solve_triangular",
    "cho_factor",
    "cho_solve",
    "cholesky",
    "block_diag",
    "det",
    "inv",
    "solve",
    "svd",
    "qr",
    "eigh",
]


def _triangle(a: Tensor, lower: bool, unit_diagonal: bool) -> Tensor:
    tri = creation.tril(a) if lower else creation.triu(a)
    if unit_diagonal:
        eye = creation.eye(a.shape[-1], dtype=a.dtype)
        tri = tri * (1.0 - eye) + eye
    return tri


def solve_triangular(
    a,
    b,
    trans=0,
    lower: bool = False,
    unit_diagonal: bool = False,
    overwrite_b: bool = False,
    debug=None,
    check_finite: bool = True,
) -> Tensor:
    """``x`` with ``op(a) @ x = b`` for triangular ``a`` (SciPy's and JAX's
    ``solve_triangular``): only ``a``'s lower (``lower=True``) or upper triangle is read;
    ``trans`` 0/``"N"``, 1/``"T"`` or 2/``"C"`` (``a``, ``a^T``, ``a^T``: real).

    Args:
        a: ``(..., n, n)``.
        b: ``(..., n)`` or ``(..., n, k)``.
        trans: which of ``a``, ``a^T`` to solve with.
        lower: read the lower triangle (default: the upper, SciPy's).
        unit_diagonal: take ``a``'s diagonal as ones.
        overwrite_b: accepted (SciPy's); nothing is overwritten.
        debug: accepted.
        check_finite: accepted.

    Returns:
        ``x`` of ``b``'s shape.

    Raises:
        ValueError: (:class:`nabla.OpError`) for an unknown ``trans`` or shapes that do not
            fit.
    """
    a, b = floats("scipy.linalg.solve_triangular", a, b)
    codes = {0: 0, "N": 0, 1: 1, "T": 1, 2: 1, "C": 1}
    if trans not in codes:
        raise OpError(f"solve_triangular: trans must be 0/'N', 1/'T' or 2/'C', got {trans!r}")
    tri = _triangle(a, lower, unit_diagonal)
    if codes[trans]:
        tri = view.swap_axes(tri, -1, -2)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise OpError(f"solve_triangular: a must be square matrices (..., n, n), got {a.shape}")
    vector = b.ndim == a.ndim - 1
    rhs = view.unsqueeze(b, -1) if vector else b
    if rhs.shape[-2] != a.shape[-1]:
        raise OpError(f"solve_triangular: b of shape {b.shape} does not fit a of shape {a.shape}")
    x = _la.solve(tri, rhs)
    return view.squeeze(x, -1) if vector else x


def cholesky(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """The Cholesky factor of each symmetric positive-definite matrix (SciPy's and JAX's
    ``scipy.linalg.cholesky``: upper ``U`` with ``a = U^T U`` by default)."""
    return _la.cholesky(a, upper=not lower)


def cho_factor(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """``(c, lower)`` for :func:`cho_solve`: ``c`` the Cholesky factor (the other triangle
    is zero here; SciPy leaves it unspecified)."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b: bool = False, check_finite: bool = True) -> Tensor:
    """``x`` with ``a @ x = b`` from :func:`cho_factor`'s ``(c, lower)`` (two triangular
    solves)."""
    c, lower = c_and_lower
    y = solve_triangular(c, b, trans=0 if lower else 1, lower=lower)
    return solve_triangular(c, y, trans=1 if lower else 0, lower=lower)


def block_diag(*arrs) -> Tensor:
    """The block-diagonal matrix of ``arrs`` (each a scalar, 1-D row or 2-D matrix), as
    SciPy's and JAX's ``block_diag``."""
    if not arrs:
        return creation.zeros((1, 0))
    blocks = [as_tensor(a, op="scipy.linalg.block_diag") for a in arrs]
    blocks = [view.reshape(b, (1, -1)) if b.ndim < 2 else b for b in blocks]
    if any(b.ndim != 2 for b in blocks):
        raise OpError(
            "block_diag: takes scalars, vectors and matrices, got shapes "
            f"{[b.shape for b in blocks]}"
        )
    dtype = blocks[0].dtype
    for blk in blocks[1:]:
        dtype = promote_types(dtype, blk.dtype)
    cols = sum(b.shape[1] for b in blocks)
    rows, start = [], 0
    for blk in blocks:
        n = blk.shape[1]
        rows.append(view.pad(unary.cast(blk, dtype), ((0, 0), (start, cols - start - n))))
        start += n
    return view.concatenate(rows, 0)


def det(a, overwrite_a: bool = False, check_finite: bool = True) -> Tensor:
    """The determinant of each square matrix."""
    return _la.det(a)


def inv(a, overwrite_a: bool = False, check_finite: bool = True) -> Tensor:
    """The inverse of each square matrix."""
    return _la.inv(a)


def solve(
    a,
    b,
    lower: bool = False,
    overwrite_a: bool = False,
    overwrite_b: bool = False,
    debug: bool = False,
    check_finite: bool = True,
    assume_a: str = "gen",
) -> Tensor:
    """``x`` with ``a @ x = b`` (SciPy's ``solve``: ``b`` of ``a.ndim - 1`` dims is one
    right-hand side; ``assume_a`` ``"gen"``, ``"sym"``, ``"her"`` or ``"pos"``, the same
    solution)."""
    known = ("gen", "general", "sym", "symmetric", "her", "hermitian", "pos", "positive definite")
    if assume_a not in known:
        raise OpError(f"scipy.linalg.solve: unknown assume_a={assume_a!r}")
    a, b = floats("scipy.linalg.solve", a, b)
    vector = b.ndim == a.ndim - 1
    x = _la.solve(a, view.unsqueeze(b, -1) if vector else b)
    return view.squeeze(x, -1) if vector else x


def svd(
    a,
    full_matrices: bool = True,
    compute_uv: bool = True,
    overwrite_a: bool = False,
    check_finite: bool = True,
    lapack_driver: str = "gesdd",
):
    """The singular value decomposition (``nb.linalg.svd``): ``(U, s, Vh)``, or ``s``."""
    return _la.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


def qr(
    a,
    overwrite_a: bool = False,
    lwork=None,
    mode: str = "full",
    pivoting: bool = False,
    check_finite: bool = True,
):
    """The QR decomposition with SciPy's modes: ``"full"`` (square ``Q``), ``"economic"``,
    ``"r"`` (a 1-tuple ``(R,)``, as SciPy's) or ``"raw"`` (refused)."""
    if pivoting:
        raise NotImplementedError("scipy.linalg.qr: pivoting=True is not supported")
    modes = {"full": "complete", "economic": "reduced", "r": "r"}
    if mode not in modes:
        raise OpError(f"scipy.linalg.qr: mode must be 'full', 'economic' or 'r', got {mode!r}")
    out = _la.qr(a, modes[mode])
    return (out,) if mode == "r" else tuple(out)


def eigh(
    a,
    b=None,
    lower: bool = True,
    eigvals_only: bool = False,
    overwrite_a: bool = False,
    overwrite_b: bool = False,
    type: int = 1,  # noqa: A002 - SciPy's name
    check_finite: bool = True,
    subset_by_index=None,
    subset_by_value=None,
    driver=None,
):
    """The eigenvalues (ascending) and eigenvectors of each symmetric matrix, from its
    ``lower`` (default) or upper triangle; ``eigvals_only`` gives the values alone. The
    generalized problem (``b``) and subsets are refused."""
    if b is not None or subset_by_index is not None or subset_by_value is not None:
        raise NotImplementedError(
            "scipy.linalg.eigh: the generalized problem (b) and subsets are not supported"
        )
    w, v = _la.eigh(a, "L" if lower else "U")
    return w if eigvals_only else (w, v)
