"""``nb.scipy.linalg``: JAX's ``jax.scipy.linalg`` names that models use most, with SciPy's
conventions (``cholesky`` upper by default, ``qr``'s ``"full"``/``"economic"`` modes).
Written with :mod:`nabla.linalg`'s LAPACK ops (a triangular solve is the general ``solve``
of the triangle, so its derivative reaches only the triangle, as JAX's). ``expm`` is scaling and
squaring with the [13/13] Pade approximant (differentiable). ``lu`` is Gaussian
elimination with partial pivoting written with the ops (one unrolled step per column).
Not built: ``schur``, ``sqrtm``, ``funm``."""

from __future__ import annotations

import math

import numpy as np

from .. import linalg as _la
from ..core.dtypes import get_default_dtype, promote_types, to_dtype
from ..ops import array_functions, binary, creation, indexing, reduction, unary, view
from ..ops._util import as_tensor, readable_now
from ..ops.base import OpError
from ..ops.special import floats
from ..runtime.tensor import Tensor
from ..transforms.control_flow import fori_loop

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
    "expm",
    "toeplitz",
    "hankel",
    "circulant",
    "companion",
    "hilbert",
    "invhilbert",
    "hadamard",
    "pascal",
    "invpascal",
    "helmert",
    "leslie",
    "fiedler",
    "fiedler_companion",
    "convolution_matrix",
    "polar",
    "lu",
    "lu_factor",
    "lu_solve",
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


# ----------------------------------------------------------------------------- expm
# The exponential by scaling and squaring with the [13/13] Pade approximant: A is scaled by
# 2^-s until its 1-norm is at most THETA_13 (where that approximant is accurate to float64's
# rounding, by Higham's backward-error bound), exp(A / 2^s) taken from the approximant,
# then squared s times.
_PADE_ORDER = 13
_PADE = [
    math.factorial(2 * _PADE_ORDER - k)
    * math.factorial(_PADE_ORDER)
    / (math.factorial(2 * _PADE_ORDER) * math.factorial(k) * math.factorial(_PADE_ORDER - k))
    for k in range(_PADE_ORDER + 1)
]
_THETA_13 = 5.371920351148152


def _squarings(norm) -> int:
    return max(0, math.ceil(math.log2(norm / _THETA_13))) if norm > _THETA_13 else 0


def expm(A, *, upper_triangular: bool = False, max_squarings: int = 16) -> Tensor:  # noqa: N803
    """The matrix exponential (SciPy's and JAX's ``expm``) of ``(..., n, n)`` matrices, by
    scaling and squaring with the [13/13] Pade approximant; differentiable (the products
    and the solve differentiate).

    Args:
        A: square matrices (integers become the default float).
        upper_triangular: accepted (JAX's hint).
        max_squarings: the most squarings when the norm is known only while the program
            runs (under ``compile``/``vmap``); a matrix whose norm needs more gives an
            inaccurate result, as JAX's.

    Returns:
        ``exp(A)``, like ``A``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for matrices that are not square.
    """
    a = floats("expm", A)[0]
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise OpError(f"expm: needs square matrices (..., n, n), got {tuple(a.shape)}")
    norm = reduction.max(reduction.sum(unary.abs(a), -2))  # the largest 1-norm
    if readable_now(norm):
        s = _squarings(float(norm.item()))
        r = _pade13(a / float(2**s))
        for _ in range(s):
            r = _la.matmul(r, r)
        return r
    # the number of squarings known only at run time: scale by it, then square that often
    s = binary.maximum(unary.ceil(unary.log2(norm / _THETA_13)), 0.0)
    s = binary.minimum(s, float(max_squarings))
    r = _pade13(a / array_functions.exp2(s))

    def body(k, m):
        return binary.where(k < s, _la.matmul(m, m), m)

    return fori_loop(0, int(max_squarings), body, r)


def _pade13(a: Tensor) -> Tensor:
    b = _PADE
    eye = creation.eye(a.shape[-1], dtype=a.dtype)
    a2 = _la.matmul(a, a)
    a4 = _la.matmul(a2, a2)
    a6 = _la.matmul(a4, a2)
    u = _la.matmul(a6, b[13] * a6 + b[11] * a4 + b[9] * a2)
    u = _la.matmul(a, u + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = _la.matmul(a6, b[12] * a6 + b[10] * a4 + b[8] * a2)
    v = v + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    return _la.solve(v - u, v + u)


# ----------------------------------------------------------------------------- structured
def _vector(x, op: str) -> Tensor:
    t = as_tensor(x, op=op)
    if t.ndim != 1:
        raise OpError(f"{op}: needs a 1-D tensor, got shape {tuple(t.shape)}")
    return t


def toeplitz(c, r=None) -> Tensor:
    """SciPy's and JAX's ``toeplitz``: constant diagonals, first column ``c`` and first row
    ``r`` (``r[0]`` ignored; ``c`` itself by default).

    Args:
        c: the first column (1-D).
        r: the first row (1-D; default ``c``).

    Returns:
        ``(len(c), len(r))``.
    """
    col = _vector(c, "toeplitz")
    row = col if r is None else _vector(r, "toeplitz")
    dt = promote_types(col.dtype, row.dtype)
    col, row = unary.cast(col, dt), unary.cast(row, dt)
    m, n = col.shape[0], row.shape[0]
    values = view.concatenate([view.flip(row[1:], 0), col], 0)  # row reversed, then column
    idx = np.arange(m)[:, None] - np.arange(n)[None, :] + n - 1
    return indexing.take(values, as_tensor(idx.astype(np.int32), op="toeplitz"), axis=0)


def hankel(c, r=None) -> Tensor:
    """SciPy's and JAX's ``hankel``: constant anti-diagonals, first column ``c`` and last
    row ``r`` (``r[0]`` ignored; zeros by default).

    Args:
        c: the first column (1-D).
        r: the last row (1-D; default zeros of ``c``'s length).

    Returns:
        ``(len(c), len(r))``.
    """
    col = _vector(c, "hankel")
    row = creation.zeros_like(col) if r is None else _vector(r, "hankel")
    dt = promote_types(col.dtype, row.dtype)
    values = view.concatenate([unary.cast(col, dt), unary.cast(row[1:], dt)], 0)
    m, n = col.shape[0], row.shape[0]
    idx = np.arange(m)[:, None] + np.arange(n)[None, :]
    return indexing.take(values, as_tensor(idx.astype(np.int32), op="hankel"), axis=0)


def circulant(c) -> Tensor:
    """SciPy's and JAX's ``circulant``: each column ``c`` rolled down by its index.

    Args:
        c: the first column (1-D).

    Returns:
        ``(n, n)``.
    """
    col = _vector(c, "circulant")
    n = col.shape[0]
    idx = (np.arange(n)[:, None] - np.arange(n)[None, :]) % max(n, 1)
    return indexing.take(col, as_tensor(idx.astype(np.int32), op="circulant"), axis=0)


def companion(a) -> Tensor:
    """SciPy's and JAX's ``companion`` matrix of the polynomial ``a`` (highest power
    first): first row ``-a[1:] / a[0]``, ones below the diagonal.

    Args:
        a: the coefficients (1-D, at least 2, ``a[0] != 0``).

    Returns:
        ``(len(a) - 1, len(a) - 1)``.
    """
    p = floats("companion", _vector(a, "companion"))[0]
    n = p.shape[0] - 1
    if n < 1:
        raise OpError(f"companion: needs at least 2 coefficients, got {p.shape[0]}")
    first = view.reshape(unary.neg(p[1:]) / p[0], (1, n))
    below = creation.eye(n - 1, n, dtype=p.dtype)
    return view.concatenate([first, below], 0)


def hilbert(n: int) -> Tensor:
    """SciPy's and JAX's ``hilbert`` matrix, ``1 / (i + j + 1)``.

    Args:
        n: the size.

    Returns:
        ``(n, n)`` in the default float dtype.
    """
    i = np.arange(int(n))
    return as_tensor(1.0 / (i[:, None] + i[None, :] + 1.0), op="hilbert")


def _exact(rows: list, op: str) -> Tensor:
    """A square matrix of exact Python numbers (ints or fractions) rounded once to the
    default float dtype."""
    n = len(rows)
    values = np.array([[float(v) for v in row] for row in rows], dtype=np.float64)
    return as_tensor(values.reshape(n, n).astype(get_default_dtype().numpy), op=op)


def _size(n, op: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise OpError(f"{op}: n must be a non-negative int, got {n!r}")
    return int(n)


def invhilbert(n: int) -> Tensor:
    """The inverse of :func:`hilbert` (SciPy's and JAX's ``invhilbert``), from its exact
    integer entries, rounded once to the default float dtype.

    Args:
        n: the size.

    Returns:
        ``(n, n)``.
    """
    n = _size(n, "invhilbert")
    c = math.comb

    def entry(i, j):
        sign = (-1) ** (i + j)
        return sign * (i + j + 1) * c(n + i, n - j - 1) * c(n + j, n - i - 1) * c(i + j, i) ** 2

    rows = [[entry(i, j) for j in range(n)] for i in range(n)]
    return _exact(rows, "invhilbert")


def hadamard(n: int, dtype=int) -> Tensor:
    """Sylvester's Hadamard matrix of order ``n``, a power of 2 (SciPy's and JAX's
    ``hadamard``): entries +-1, rows orthogonal.

    Args:
        n: the order.
        dtype: the result's dtype (default int32).

    Returns:
        ``(n, n)``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for ``n`` not a positive power of 2.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1 or n & (n - 1):
        raise OpError(f"hadamard: n must be a positive power of 2, got {n!r}")
    h = np.ones((1, 1), np.int64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return as_tensor(h.astype(to_dtype(dtype, "hadamard").numpy), op="hadamard")


def _pascal_lower(n: int) -> list:
    return [[math.comb(i, j) for j in range(n)] for i in range(n)]


def _kind(kind, op: str) -> str:
    kind = "symmetric" if kind is None else kind
    if kind not in ("symmetric", "lower", "upper"):
        raise OpError(f"{op}: kind must be 'symmetric', 'lower' or 'upper', got {kind!r}")
    return kind


def _product(a: list, b: list) -> list:
    """``a @ b`` of exact integer matrices."""
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in zip(*b)] for row in a]


def pascal(n: int, kind=None) -> Tensor:
    """The Pascal matrix (SciPy's and JAX's ``pascal``): binomial coefficients, exact, then
    rounded once to the default float dtype.

    Args:
        n: the size.
        kind: ``"symmetric"`` (default; ``C(i + j, i)``), ``"lower"`` (``C(i, j)``) or
            ``"upper"`` (its transpose).

    Returns:
        ``(n, n)``.
    """
    n, kind = _size(n, "pascal"), _kind(kind, "pascal")
    low = _pascal_lower(n)
    if kind == "lower":
        return _exact(low, "pascal")
    if kind == "upper":
        return _exact([list(r) for r in zip(*low)], "pascal")
    return _exact([[math.comb(i + j, i) for j in range(n)] for i in range(n)], "pascal")


def invpascal(n: int, kind=None) -> Tensor:
    """The inverse of :func:`pascal` (SciPy's and JAX's ``invpascal``), exact, then rounded
    once to the default float dtype.

    Args:
        n: the size.
        kind: ``"symmetric"`` (default), ``"lower"`` or ``"upper"``, as :func:`pascal`'s.

    Returns:
        ``(n, n)``.
    """
    n, kind = _size(n, "invpascal"), _kind(kind, "invpascal")
    inv_low = [[(-1) ** (i + j) * math.comb(i, j) for j in range(n)] for i in range(n)]
    inv_up = [list(r) for r in zip(*inv_low)]
    if kind == "lower":
        return _exact(inv_low, "invpascal")
    if kind == "upper":
        return _exact(inv_up, "invpascal")
    return _exact(_product(inv_up, inv_low), "invpascal")  # (L L^T)^-1 = L^-T L^-1


def helmert(n: int, full: bool = False) -> Tensor:
    """The Helmert matrix of order ``n`` (SciPy's and JAX's ``helmert``): orthonormal rows,
    the first ``1 / sqrt(n)`` everywhere, row ``i`` comparing element ``i`` with those
    before it.

    Args:
        n: the order.
        full: keep the first row (else ``(n - 1, n)``).

    Returns:
        ``(n, n)`` or ``(n - 1, n)`` in the default float dtype.
    """
    n = _size(n, "helmert")
    h = np.tril(np.ones((n, n)), -1) - np.diag(np.arange(n, dtype=np.float64))
    d = np.arange(n) * np.arange(1, n + 1, dtype=np.float64)
    if n:
        h[0], d[0] = 1.0, n
    h = h / np.sqrt(d)[:, None]
    return as_tensor((h if full else h[1:]).astype(get_default_dtype().numpy), op="helmert")


def leslie(f, s) -> Tensor:
    """The Leslie matrix (SciPy's and JAX's ``leslie``): fecundities ``f`` on the first
    row, survival rates ``s`` on the subdiagonal. Differentiable in both.

    Args:
        f: ``(n,)``.
        s: ``(n - 1,)``.

    Returns:
        ``(n, n)``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for lengths that do not fit.
    """
    f, s = _vector(f, "leslie"), _vector(s, "leslie")
    n = f.shape[0]
    if n < 1 or s.shape[0] != n - 1:
        raise OpError(f"leslie: f of length {n} needs s of length {n - 1}, got {s.shape[0]}")
    dt = promote_types(promote_types(f.dtype, s.dtype), get_default_dtype())
    values = view.concatenate(
        [creation.zeros((1,), dtype=dt), unary.cast(f, dt), unary.cast(s, dt)], 0
    )
    idx = np.zeros((n, n), np.int32)  # 0: a zero; 1..n: f; n+1..: s on the subdiagonal
    idx[0] = np.arange(1, n + 1)
    idx[np.arange(1, n), np.arange(n - 1)] = np.arange(n + 1, 2 * n)
    return indexing.take(values, as_tensor(idx, op="leslie"), axis=0)


def fiedler(a) -> Tensor:
    """The Fiedler matrix ``|a_i - a_j|`` (SciPy's and JAX's ``fiedler``).

    Args:
        a: ``(n,)``.

    Returns:
        ``(n, n)``.
    """
    a = _vector(a, "fiedler")
    return unary.abs(view.unsqueeze(a, 1) - view.unsqueeze(a, 0))


def fiedler_companion(a) -> Tensor:
    """Fiedler's companion matrix of the polynomial with coefficients ``a``, highest
    first (SciPy's and JAX's ``fiedler_companion``): pentadiagonal, with the roots of the
    polynomial as its eigenvalues. Differentiable in ``a``.

    Args:
        a: ``(n + 1,)`` coefficients, ``a[0]`` nonzero.

    Returns:
        ``(n, n)``.
    """
    a = _vector(a, "fiedler_companion")
    n = a.shape[0] - 1
    dt = promote_types(a.dtype, get_default_dtype())
    if n < 1:
        return creation.zeros((0, 0), dtype=dt)
    a = unary.cast(a, dt)
    coef = -a[1:] / a[0]  # -a_k / a_0 for k = 1..n
    values = view.concatenate(
        [creation.zeros((1,), dtype=dt), creation.ones((1,), dtype=dt), coef], 0
    )
    one, neg = 1, lambda k: k + 1  # index 0: zero; 1: one; k + 1: -a_k / a_0
    idx = np.zeros((n, n), np.int32)
    idx[0, 0] = neg(1)
    if n > 1:
        idx[1, 0] = one
    for i, j in zip(range(3, n, 2), range(1, n - 2, 2), strict=False):
        idx[i, j] = one
    for i, j, k in zip(range(2, n, 2), range(1, n - 1, 2), range(3, n + 1, 2), strict=False):
        idx[i, j] = neg(k)
    for i, j in zip(range(0, n - 2, 2), range(2, n, 2), strict=False):
        idx[i, j] = one
    for i, j, k in zip(range(0, n - 1, 2), range(1, n, 2), range(2, n + 1, 2), strict=False):
        idx[i, j] = neg(k)
    return indexing.take(values, as_tensor(idx, op="fiedler_companion"), axis=0)


def convolution_matrix(a, n: int, mode: str = "full") -> Tensor:
    """The matrix ``A`` with ``A @ v == convolve(a, v, mode)`` for ``v`` of length ``n``
    (SciPy's and JAX's ``convolution_matrix``). Differentiable in ``a``.

    Args:
        a: ``(m,)``, the kernel.
        n: the length of the vectors it convolves.
        mode: ``"full"`` (``m + n - 1`` rows), ``"same"`` (``max(m, n)``, centred as
            ``convolve``'s) or ``"valid"`` (``max(m, n) - min(m, n) + 1``).

    Returns:
        ``(rows, n)``.
    """
    a = _vector(a, "convolution_matrix")
    m, n = a.shape[0], _size(n, "convolution_matrix")
    if m == 0 or n == 0:
        raise OpError(f"convolution_matrix: needs a non-empty a and n >= 1, got {m} and {n}")
    if mode not in ("full", "same", "valid"):
        raise OpError(f"convolution_matrix: mode must be 'full', 'same' or 'valid', got {mode!r}")
    shift = np.arange(m + n - 1)[:, None] - np.arange(n)[None, :]  # a's index in each cell
    idx = np.where((shift >= 0) & (shift < m), shift + 1, 0).astype(np.int32)
    trim = min(m, n) - 1
    if mode == "same":
        idx = idx[trim // 2 : m + n - 1 - (trim - trim // 2)]
    elif mode == "valid":
        idx = idx[trim : m + n - 1 - trim]
    values = view.concatenate([creation.zeros((1,), dtype=a.dtype), a], 0)
    return indexing.take(values, as_tensor(idx, op="convolution_matrix"), axis=0)


def polar(a, side: str = "right", *, method: str = "svd") -> tuple:
    """SciPy's and JAX's ``polar`` decomposition by the SVD: ``a = u p`` (``side="right"``)
    or ``a = p u`` (``"left"``), ``u`` with orthonormal columns, ``p`` symmetric positive
    semidefinite.

    Args:
        a: a matrix ``(m, n)``.
        side: ``"right"`` or ``"left"``.
        method: ``"svd"`` (the only one).

    Returns:
        ``(u, p)``.
    """
    if side not in ("right", "left"):
        raise OpError(f"polar: side must be 'right' or 'left', got {side!r}")
    if method != "svd":
        raise OpError(f"polar: method must be 'svd', got {method!r}")
    x = floats("polar", a)[0]
    w, s, vh = _la.svd(x, full_matrices=False)
    u = _la.matmul(w, vh)
    if side == "right":
        p = _la.matmul(view.swap_axes(vh, -1, -2) * view.unsqueeze(s, -2), vh)
    else:
        p = _la.matmul(w * view.unsqueeze(s, -2), view.swap_axes(w, -1, -2))
    return u, p


# ----------------------------------------------------------------------------- LU
def _lu_steps(a: Tensor):
    """Gaussian elimination with partial pivoting of one ``(m, n)`` matrix, one unrolled
    step per column: ``(packed, pivots, perm)``, LAPACK's packed ``L\\U`` (``L``'s unit
    diagonal implied), the row swapped in at each step, and the final row order
    (``a[perm] = L @ U``)."""
    m, n = a.shape
    rows = creation.arange(m, dtype="int32")
    cols = creation.arange(n, dtype="int32")
    perm, pivots = rows, []
    for j in range(min(m, n)):
        below = rows >= j
        magnitude = binary.where(below, unary.abs(a[:, j]), -1.0)
        p = unary.cast(reduction.argmax(magnitude), "int32")
        pivots.append(p)
        swap = binary.where(rows == j, p, binary.where(rows == p, j, rows))
        a = indexing.take(a, swap, axis=0)
        perm = indexing.take(perm, swap, axis=0)
        pivot = a[j, j]
        safe = binary.where(pivot == 0, 1.0, pivot)
        factors = binary.where(rows > j, a[:, j] / safe, 0.0)  # (m,)
        update = view.unsqueeze(factors, 1) * view.unsqueeze(a[j], 0)
        right = view.unsqueeze(cols > j, 0)
        a = a - binary.where(binary.logical_and(view.unsqueeze(rows > j, 1), right), update, 0.0)
        at_j = binary.logical_and(view.unsqueeze(rows > j, 1), view.unsqueeze(cols == j, 0))
        a = binary.where(at_j, view.unsqueeze(factors, 1), a)
    piv = view.stack(pivots, 0) if pivots else creation.zeros((0,), dtype="int32")
    return a, piv, perm


def _matrix(a, op: str) -> Tensor:
    x = floats(op, a)[0]
    if x.ndim != 2:
        raise OpError(f"{op}: needs one matrix (m, n), got shape {tuple(x.shape)}")
    return x


def lu_factor(a, overwrite_a: bool = False, check_finite: bool = True):
    """SciPy's and JAX's ``lu_factor``: the LU factorization with partial pivoting, packed.

    Args:
        a: a square matrix ``(n, n)``.
        overwrite_a: accepted.
        check_finite: accepted.

    Returns:
        ``(lu, piv)``: ``L`` (unit diagonal implied) and ``U`` in one matrix, and LAPACK's
        pivots (row ``i`` was swapped with row ``piv[i]``), int32.
    """
    x = _matrix(a, "lu_factor")
    if x.shape[0] != x.shape[1]:
        raise OpError(f"lu_factor: needs a square matrix, got shape {tuple(x.shape)}")
    packed, piv, _ = _lu_steps(x)
    return packed, piv


def lu(a, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """SciPy's and JAX's ``lu``: ``a = p @ l @ u`` with partial pivoting (any ``(m, n)``).

    Args:
        a: a matrix.
        permute_l: return ``(p @ l, u)`` instead.
        overwrite_a: accepted.
        check_finite: accepted.

    Returns:
        ``(p, l, u)``: the ``(m, m)`` permutation, unit lower ``(m, k)`` and upper ``(k, n)``
        factors (``k = min(m, n)``); or ``(p @ l, u)``.
    """
    x = _matrix(a, "lu")
    m, n = x.shape
    k = min(m, n)
    packed, _, perm = _lu_steps(x)
    lower = creation.tril(packed[:, :k], -1) + creation.eye(m, k, dtype=x.dtype)
    upper = creation.triu(packed[:k, :])
    # p[perm[i], i] = 1, so that a = p @ (l @ u)
    p = view.swap_axes(indexing.take(creation.eye(m, dtype=x.dtype), perm, axis=0), 0, 1)
    if permute_l:
        return _la.matmul(p, lower), upper
    return p, lower, upper


def lu_solve(lu_and_piv, b, trans=0, overwrite_b: bool = False, check_finite: bool = True):
    """SciPy's and JAX's ``lu_solve``: ``x`` with ``a @ x = b`` (``trans=0``) or
    ``a^T @ x = b`` (1 or 2) from :func:`lu_factor`'s result.

    Args:
        lu_and_piv: ``(lu, piv)`` from :func:`lu_factor`.
        b: ``(n,)`` or ``(n, k)``.
        trans: 0/``"N"``, 1/``"T"`` or 2/``"C"``.
        overwrite_b: accepted.
        check_finite: accepted.

    Returns:
        ``x`` of ``b``'s shape.
    """
    packed, piv = lu_and_piv
    packed, b = floats("lu_solve", packed, b)
    n = packed.shape[0]
    rows = creation.arange(n, dtype="int32")
    perm = rows
    for j in range(n):  # the row order the pivots made, from the swaps in turn
        p = as_tensor(piv, op="lu_solve")[j]
        perm = indexing.take(perm, binary.where(rows == j, p, binary.where(rows == p, j, rows)), 0)
    codes = {0: 0, "N": 0, 1: 1, "T": 1, 2: 1, "C": 1}
    if trans not in codes:
        raise OpError(f"lu_solve: trans must be 0/'N', 1/'T' or 2/'C', got {trans!r}")
    if not codes[trans]:
        y = solve_triangular(packed, indexing.take(b, perm, axis=0), lower=True, unit_diagonal=True)
        return solve_triangular(packed, y)
    z = solve_triangular(packed, b, trans=1)
    w = solve_triangular(packed, z, trans=1, lower=True, unit_diagonal=True)
    inverse = reduction.argsort(perm, stable=True)
    return indexing.take(w, inverse, axis=0)
