"""``nb.scipy.signal``: JAX's ``jax.scipy.signal`` convolutions (any number of dims, as
``lax.conv_general_dilated``, so they differentiate in both inputs) and ``detrend``.
``fftconvolve`` computes the same values directly (there is no FFT). Not built: ``stft``,
``istft``, ``welch``, ``csd`` (they need complex FFTs)."""

from __future__ import annotations

from .. import lax
from ..core.dtypes import get_default_dtype, promote_types
from ..linalg import lstsq, matmul
from ..ops import creation, reduction, unary, view
from ..ops._util import as_tensor, norm_axis
from ..ops.base import OpError
from ..runtime.tensor import Tensor

__all__ = [
    "convolve",
    "correlate",
    "convolve2d",
    "correlate2d",
    "fftconvolve",
    "detrend",
]

_MODES = ("full", "same", "valid")


def _pair(op: str, in1, in2):
    a, b = as_tensor(in1, op=op), as_tensor(in2, op=op)
    if a.ndim != b.ndim:
        raise OpError(
            f"{op}: in1 and in2 must have the same number of dims, got {tuple(a.shape)} and "
            f"{tuple(b.shape)}"
        )
    dt = promote_types(a.dtype, b.dtype)
    work = dt if dt.is_float else get_default_dtype()
    return unary.cast(a, work), unary.cast(b, work), dt


def _full_correlation(a: Tensor, b: Tensor) -> Tensor:
    """Every overlap of ``b`` slid over ``a``: ``(len(a) + len(b) - 1)`` per dim."""
    if a.ndim == 0:
        return a * b
    lhs = view.reshape(a, (1, 1, *a.shape))
    rhs = view.reshape(b, (1, 1, *b.shape))
    pads = [(k - 1, k - 1) for k in b.shape]
    out = lax.conv_general_dilated(lhs, rhs, (1,) * a.ndim, pads)
    return view.reshape(out, tuple(out.shape[2:]))


def _cut(op: str, full: Tensor, s1: tuple, s2: tuple, mode: str, up: bool = False) -> Tensor:
    """``full`` cut to ``mode``; ``"same"`` centres with the extra element of an odd margin
    after (``up``: before, as SciPy's ``correlate2d``)."""
    if mode == "full":
        return full
    if mode == "same":
        starts = [(f - n + up) // 2 for f, n in zip(full.shape, s1, strict=True)]
        sizes = list(s1)
    else:
        bigger = all(m >= n for m, n in zip(s1, s2, strict=True))
        smaller = all(m <= n for m, n in zip(s1, s2, strict=True))
        if not (bigger or smaller):
            raise OpError(
                f"{op}: for mode 'valid' one input must be at least as large as the other in "
                f"every dim, got {s1} and {s2}"
            )
        starts = [min(m, n) - 1 for m, n in zip(s1, s2, strict=True)]
        sizes = [max(m, n) - min(m, n) + 1 for m, n in zip(s1, s2, strict=True)]
    index = tuple(slice(st, st + n) for st, n in zip(starts, sizes, strict=True))
    return full[index]


def _finish(x: Tensor, dt) -> Tensor:
    return x if dt.is_float else unary.cast(unary.round(x), dt)


def _check_mode(op: str, mode: str) -> None:
    if mode not in _MODES:
        raise OpError(f"{op}: mode must be one of {_MODES}, got {mode!r}")


def correlate(in1, in2, mode: str = "full", method: str = "auto", precision=None) -> Tensor:
    """SciPy's and JAX's ``correlate``: ``z[k] = sum_l in1[l] in2[l - k + len(in2) - 1]``
    per dim (any number of dims).

    Args:
        in1: the first input.
        in2: the second input (same number of dims).
        mode: ``"full"``, ``"same"`` (``in1``'s size, centred) or ``"valid"`` (complete
            overlaps only).
        method: accepted (``"auto"``, ``"direct"``, ``"fft"``: the values are the same).
        precision: accepted.

    Returns:
        The correlation, in the inputs' promoted dtype.
    """
    _check_mode("correlate", mode)
    a, b, dt = _pair("correlate", in1, in2)
    full = _full_correlation(a, b)
    return _finish(_cut("correlate", full, tuple(a.shape), tuple(b.shape), mode), dt)


def convolve(in1, in2, mode: str = "full", method: str = "auto", precision=None) -> Tensor:
    """SciPy's and JAX's ``convolve``: ``z[k] = sum_l in1[l] in2[k - l]`` per dim (any
    number of dims).

    Args:
        in1: the first input.
        in2: the second input (same number of dims).
        mode: ``"full"``, ``"same"`` (``in1``'s size, centred) or ``"valid"``.
        method: accepted (the values are the same).
        precision: accepted.

    Returns:
        The convolution, in the inputs' promoted dtype.
    """
    _check_mode("convolve", mode)
    a, b, dt = _pair("convolve", in1, in2)
    flipped = view.flip(b, tuple(range(b.ndim))) if b.ndim else b
    full = _full_correlation(a, flipped)
    return _finish(_cut("convolve", full, tuple(a.shape), tuple(b.shape), mode), dt)


def fftconvolve(in1, in2, mode: str = "full", axes=None) -> Tensor:
    """SciPy's and JAX's ``fftconvolve``: the values of :func:`convolve` (computed
    directly).

    Args:
        in1: the first input.
        in2: the second input.
        mode: ``"full"``, ``"same"`` or ``"valid"``.
        axes: None only (every axis).

    Returns:
        The convolution.
    """
    if axes is not None:
        raise OpError("fftconvolve: axes other than None are not supported")
    return convolve(in1, in2, mode)


def _two_d(op: str, in1, in2, boundary: str, fillvalue) -> None:
    if boundary != "fill" or fillvalue != 0:
        raise OpError(f"{op}: only boundary='fill' with fillvalue=0 is supported (as JAX's)")
    for name, v in (("in1", in1), ("in2", in2)):
        if as_tensor(v, op=op).ndim != 2:
            raise OpError(f"{op}: {name} must be 2-D, got shape {tuple(as_tensor(v).shape)}")


def convolve2d(in1, in2, mode: str = "full", boundary: str = "fill", fillvalue=0, precision=None):
    """SciPy's and JAX's ``convolve2d`` of two 2-D inputs (zero fill at the boundary).

    Args:
        in1: a 2-D input.
        in2: a 2-D input.
        mode: ``"full"``, ``"same"`` or ``"valid"``.
        boundary: ``"fill"`` only.
        fillvalue: 0 only.
        precision: accepted.

    Returns:
        The convolution.
    """
    _two_d("convolve2d", in1, in2, boundary, fillvalue)
    return convolve(in1, in2, mode)


def correlate2d(in1, in2, mode: str = "full", boundary: str = "fill", fillvalue=0, precision=None):
    """SciPy's and JAX's ``correlate2d`` of two 2-D inputs (zero fill at the boundary).

    Args:
        in1: a 2-D input.
        in2: a 2-D input.
        mode: ``"full"``, ``"same"`` or ``"valid"``.
        boundary: ``"fill"`` only.
        fillvalue: 0 only.
        precision: accepted.

    Returns:
        The correlation.
    """
    _two_d("correlate2d", in1, in2, boundary, fillvalue)
    _check_mode("correlate2d", mode)
    a, b, dt = _pair("correlate2d", in1, in2)
    full = _full_correlation(a, b)
    # (``"same"`` centres an even filter's output one element later than ``correlate``)
    return _finish(_cut("correlate2d", full, tuple(a.shape), tuple(b.shape), mode, up=True), dt)


def detrend(data, axis: int = -1, type: str = "linear", bp=0, overwrite_data=None):  # noqa: A002
    """SciPy's and JAX's ``detrend``: ``data`` less its mean (``type="constant"``) or its
    least-squares line (``"linear"``) along ``axis``.

    Args:
        data: the samples.
        axis: the axis along which to detrend.
        type: ``"linear"`` or ``"constant"``.
        bp: 0 only (no breakpoints).
        overwrite_data: accepted.

    Returns:
        The detrended samples.
    """
    x = as_tensor(data, op="detrend")
    if not x.dtype.is_float:
        x = unary.cast(x, get_default_dtype())
    if type not in ("linear", "constant"):
        raise OpError(f"detrend: type must be 'linear' or 'constant', got {type!r}")
    if not isinstance(bp, int) or bp != 0:
        raise OpError("detrend: breakpoints (bp) are not supported")
    ax = norm_axis("detrend", axis, x.ndim, x.shape)
    if type == "constant":
        return x - reduction.mean(x, ax, keepdims=True)
    moved = view.moveaxis(x, ax, 0)
    n = moved.shape[0]
    rows = view.reshape(moved, (n, -1))
    t = creation.arange(n, dtype=x.dtype) / float(max(n, 1))
    design = view.stack([t, creation.ones((n,), dtype=x.dtype)], 1)  # (n, 2)
    coef = lstsq(design, rows)[0]
    fitted = matmul(design, coef)
    return view.moveaxis(view.reshape(rows - fitted, tuple(moved.shape)), 0, ax)
