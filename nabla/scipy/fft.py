"""``nb.scipy.fft``: JAX's real transforms ``dct``/``idct``/``dctn``/``idctn`` (type II and
its inverse), each a product with the transform's matrix built on the host (so they
differentiate and batch); there is no complex dtype, hence no FFT."""

from __future__ import annotations

import numpy as np

from ..core.dtypes import get_default_dtype
from ..linalg import matmul
from ..ops import unary, view
from ..ops._util import as_tensor, norm_axis
from ..ops.base import OpError

__all__ = ["dct", "idct", "dctn", "idctn"]

_NORMS = (None, "backward", "ortho", "forward")


def _dct2_matrix(n: int, norm) -> np.ndarray:
    """``(n, n)``: row ``k`` maps a signal to its type-II coefficient ``k``,
    ``2 sum_j x_j cos(pi k (2j + 1) / 2n)``, scaled as ``norm`` says."""
    k, j = np.arange(n)[:, None], np.arange(n)[None, :]
    m = 2.0 * np.cos(np.pi * k * (2 * j + 1) / (2 * n))
    if norm == "ortho":
        m = m * np.where(k == 0, np.sqrt(1.0 / (4 * n)), np.sqrt(1.0 / (2 * n)))
    elif norm == "forward":
        m = m / (2 * n)
    return m


def _prepared(x, op: str, type_: int, norm):
    if type_ != 2:
        raise OpError(f"{op}: only type 2 is supported (as JAX's), got {type_}")
    if norm not in _NORMS:
        raise OpError(f"{op}: norm must be one of {_NORMS}, got {norm!r}")
    t = as_tensor(x, op=op)
    return t if t.dtype.is_float else unary.cast(t, get_default_dtype())


def _along(t, axis: int, n, matrix_of, op: str):
    ax = norm_axis(op, axis, t.ndim, t.shape)
    moved = view.moveaxis(t, ax, -1)
    size = moved.shape[-1] if n is None else int(n)
    if size < 1:
        raise OpError(f"{op}: n must be >= 1, got {size}")
    have = moved.shape[-1]
    if size < have:
        moved = moved[..., :size]
    elif size > have:
        moved = view.pad(moved, [(0, 0)] * (moved.ndim - 1) + [(0, size - have)])
    m = as_tensor(matrix_of(size).T.astype(t.dtype.numpy), t.dtype, op)
    return view.moveaxis(matmul(moved, m), -1, ax)


def dct(x, type: int = 2, n=None, axis: int = -1, norm=None):  # noqa: A002
    """SciPy's and JAX's ``dct`` (type II): ``y_k = 2 sum_j x_j cos(pi k (2j + 1) / 2N)``
    along ``axis``.

    Args:
        x: the signal.
        type: 2 only.
        n: the length (the signal cut or zero-padded to it).
        axis: the axis to transform.
        norm: None/``"backward"`` (as above), ``"ortho"`` (orthonormal) or ``"forward"``
            (divided by ``2N``).

    Returns:
        The coefficients.
    """
    t = _prepared(x, "dct", type, norm)
    return _along(t, axis, n, lambda s: _dct2_matrix(s, norm), "dct")


def idct(x, type: int = 2, n=None, axis: int = -1, norm=None):  # noqa: A002
    """SciPy's and JAX's ``idct``: the inverse of :func:`dct` with the same ``norm``.

    Args:
        x: the coefficients.
        type: 2 only.
        n: the length (cut or zero-padded to it).
        axis: the axis to transform.
        norm: as :func:`dct`'s.

    Returns:
        The signal.
    """
    t = _prepared(x, "idct", type, norm)
    return _along(t, axis, n, lambda s: np.linalg.inv(_dct2_matrix(s, norm)), "idct")


def _axes(t, s, axes, op: str):
    axes = list(range(t.ndim)) if axes is None else [axes] if isinstance(axes, int) else list(axes)
    sizes = [None] * len(axes) if s is None else list(s)
    if len(sizes) != len(axes):
        raise OpError(f"{op}: s and axes need one entry each, got {len(sizes)} and {len(axes)}")
    return axes, sizes


def dctn(x, type: int = 2, s=None, axes=None, norm=None):  # noqa: A002
    """SciPy's and JAX's ``dctn``: :func:`dct` along each of ``axes`` (all by default).

    Args:
        x: the signal.
        type: 2 only.
        s: the lengths, one per axis.
        axes: the axes (default all).
        norm: as :func:`dct`'s.

    Returns:
        The coefficients.
    """
    t = _prepared(x, "dctn", type, norm)
    for ax, n in zip(*_axes(t, s, axes, "dctn"), strict=True):
        t = _along(t, ax, n, lambda size: _dct2_matrix(size, norm), "dctn")
    return t


def idctn(x, type: int = 2, s=None, axes=None, norm=None):  # noqa: A002
    """SciPy's and JAX's ``idctn``: :func:`idct` along each of ``axes``.

    Args:
        x: the coefficients.
        type: 2 only.
        s: the lengths, one per axis.
        axes: the axes (default all).
        norm: as :func:`dct`'s.

    Returns:
        The signal.
    """
    t = _prepared(x, "idctn", type, norm)
    for ax, n in zip(*_axes(t, s, axes, "idctn"), strict=True):
        t = _along(t, ax, n, lambda size: np.linalg.inv(_dct2_matrix(size, norm)), "idctn")
    return t
