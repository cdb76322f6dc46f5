"""``nb.image``: JAX's ``jax.image`` (``resize``, ``scale_and_translate``).

Images are resampled one dim at a time. Each resized dim is a matrix product with a weight
matrix built on the host from the sizes (shapes are static), so the result differentiates in
the image, batches under ``vmap`` and compiles as a ``matmul`` does. Sample positions use
half-pixel centres: output sample ``i`` sits at input coordinate ``(i + 0.5) / scale - 0.5 -
translation / scale``. A kernel's taps are the input samples around that position, weighted
by the kernel and normalized to sum to 1; downsampling with ``antialias`` widens the kernel
by the reduction factor (a low-pass filter), as JAX's. Output samples whose position falls
outside the input get 0.
"""

from __future__ import annotations

import enum
import numbers

import numpy as np

from .core.dtypes import get_default_dtype
from .ops import creation, indexing, linalg, unary, view
from .ops._util import as_tensor, norm_axis
from .ops.base import OpError
from .runtime.tensor import Tensor

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
    """JAX's resampling methods (their names, or these members, name a method)."""

    NEAREST = "nearest"
    LINEAR = "linear"
    LANCZOS3 = "lanczos3"
    LANCZOS5 = "lanczos5"
    CUBIC = "cubic"


_ALIASES = {
    "nearest": ResizeMethod.NEAREST,
    "linear": ResizeMethod.LINEAR,
    "bilinear": ResizeMethod.LINEAR,
    "trilinear": ResizeMethod.LINEAR,
    "triangle": ResizeMethod.LINEAR,
    "lanczos3": ResizeMethod.LANCZOS3,
    "lanczos5": ResizeMethod.LANCZOS5,
    "cubic": ResizeMethod.CUBIC,
    "bicubic": ResizeMethod.CUBIC,
    "tricubic": ResizeMethod.CUBIC,
}


def _method(method, op: str) -> ResizeMethod:
    if isinstance(method, ResizeMethod):
        return method
    found = _ALIASES.get(str(method).lower()) if isinstance(method, str) else None
    if found is None:
        raise OpError(f"{op}: unknown method {method!r}; methods: {', '.join(_ALIASES)}")
    return found


def _lanczos(radius: int):
    def kernel(x):
        return np.where(x < radius, np.sinc(x) * np.sinc(x / radius), 0.0)

    return kernel


def _keys_cubic(x):
    """Keys' cubic convolution kernel with ``a = -0.5`` (exact for quadratics)."""
    a = -0.5
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return np.where(x <= 1.0, near, np.where(x < 2.0, far, 0.0))


_KERNELS = {
    ResizeMethod.LINEAR: lambda x: np.maximum(0.0, 1.0 - x),
    ResizeMethod.CUBIC: _keys_cubic,
    ResizeMethod.LANCZOS3: _lanczos(3),
    ResizeMethod.LANCZOS5: _lanczos(5),
}


def _weights(size_in: int, size_out: int, scale: float, shift: float, kernel, antialias):
    """The ``(size_in, size_out)`` matrix taking a dim of ``size_in`` samples to
    ``size_out``: column ``i`` holds output sample ``i``'s normalized tap weights."""
    positions = (np.arange(size_out) + 0.5 - shift) / scale - 0.5
    widen = max(1.0 / scale, 1.0) if antialias else 1.0
    dist = np.abs(positions[None, :] - np.arange(size_in)[:, None]) / widen
    w = kernel(dist)
    total = w.sum(axis=0, keepdims=True)
    w = np.where(np.abs(total) > 1e-4, w / np.where(total == 0, 1.0, total), 0.0)
    inside = (positions >= -0.5) & (positions <= size_in - 0.5)
    return np.where(inside[None, :], w, 0.0)


def _resample(x: Tensor, dim: int, weights: np.ndarray) -> Tensor:
    moved = view.moveaxis(x, dim, -1)
    w = as_tensor(weights.astype(x.dtype.numpy), x.dtype, "resize")
    return view.moveaxis(linalg.matmul(moved, w), -1, dim)


def _image(image, op: str) -> Tensor:
    x = as_tensor(image, op=op)
    return x if x.dtype.is_float else unary.cast(x, get_default_dtype())


def _check_shape(x: Tensor, shape, op: str) -> tuple:
    shape = tuple(int(s) for s in shape)
    if len(shape) != x.ndim or any(s < 0 for s in shape):
        raise OpError(
            f"{op}: shape {shape} must give one non-negative size per dim of the image "
            f"{tuple(x.shape)}"
        )
    return shape


def resize(image, shape, method, antialias: bool = True, precision=None) -> Tensor:
    """JAX's ``jax.image.resize``: ``image`` resampled to ``shape`` (every dim whose size
    changes).

    Args:
        image: the image (any rank; integers become the default float).
        shape: the output shape, one size per dim.
        method: ``"nearest"``, ``"linear"`` (``"bilinear"``, ``"trilinear"``),
            ``"cubic"`` (Keys, ``a = -0.5``), ``"lanczos3"``, ``"lanczos5"``, or a
            :class:`ResizeMethod`.
        antialias: when downsampling, widen the kernel (not for ``"nearest"``).
        precision: accepted (the products run in the image's dtype).

    Returns:
        The resized image.

    Raises:
        ValueError: (:class:`nabla.OpError`) for an unknown method or a shape of another
            rank.
    """
    x = _image(image, "resize")
    shape = _check_shape(x, shape, "resize")
    how = _method(method, "resize")
    for d, (n_in, n_out) in enumerate(zip(x.shape, shape, strict=True)):
        if n_in == n_out:
            continue
        if n_in == 0 or n_out == 0:
            x = creation.zeros(
                tuple(x.shape[:d]) + (n_out,) + tuple(x.shape[d + 1 :]), dtype=x.dtype
            )
            continue
        if how is ResizeMethod.NEAREST:  # the input sample under each output centre
            idx = np.minimum(np.floor((np.arange(n_out) + 0.5) * n_in / n_out), n_in - 1)
            x = indexing.take(x, as_tensor(idx.astype(np.int32), op="resize"), axis=d)
        else:
            x = _resample(x, d, _weights(n_in, n_out, n_out / n_in, 0.0, _KERNELS[how], antialias))
    return x


def scale_and_translate(
    image, shape, spatial_dims, scale, translation, method, antialias: bool = True,
    precision=None,
) -> Tensor:  # fmt: skip
    """JAX's ``jax.image.scale_and_translate``: along each of ``spatial_dims``, output sample
    ``i`` taken at input position ``(i + 0.5 - translation) / scale - 0.5``.

    Args:
        image: the image (integers become the default float).
        shape: the output shape, one size per dim (the other dims keep their sizes).
        spatial_dims: the dims to resample.
        scale: one scale per spatial dim (Python numbers).
        translation: one translation per spatial dim (Python numbers).
        method: ``"linear"``, ``"cubic"``, ``"lanczos3"`` or ``"lanczos5"``.
        antialias: when downsampling, widen the kernel.
        precision: accepted.

    Returns:
        The resampled image.

    Raises:
        ValueError: (:class:`nabla.OpError`) for ``"nearest"``, mismatched lengths, or a
            scale or translation that is not a number.
    """
    x = _image(image, "scale_and_translate")
    shape = _check_shape(x, shape, "scale_and_translate")
    how = _method(method, "scale_and_translate")
    if how is ResizeMethod.NEAREST:
        raise OpError("scale_and_translate: 'nearest' is not supported (as JAX's)")
    dims = [norm_axis("scale_and_translate", d, x.ndim, x.shape) for d in spatial_dims]
    scales, shifts = list(np.atleast_1d(scale)), list(np.atleast_1d(translation))
    if not len(dims) == len(scales) == len(shifts):
        raise OpError(
            f"scale_and_translate: spatial_dims, scale and translation need one entry each "
            f"per dim, got {len(dims)}, {len(scales)}, {len(shifts)}"
        )
    for d in range(x.ndim):
        if d not in dims and shape[d] != x.shape[d]:
            raise OpError(
                f"scale_and_translate: dim {d} is not spatial, so its size stays "
                f"{x.shape[d]}; shape says {shape[d]}"
            )
    for d, s, t in zip(dims, scales, shifts, strict=True):
        if not isinstance(s.item() if hasattr(s, "item") else s, numbers.Number):
            raise OpError(f"scale_and_translate: scale must be numbers, got {s!r}")
        w = _weights(x.shape[d], shape[d], float(s), float(t), _KERNELS[how], antialias)
        x = _resample(x, d, w)
    return x
