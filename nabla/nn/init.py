"""Parameter initializers: ``xavier_*``, ``he_*`` (Kaiming), ``normal``, ``uniform``, ``zeros``,
``ones``.

Each takes the shape and an optional RNG ``key`` (from ``nb.random.key``): with a key the draw
is reproducible, without one it comes from the seeded global generator (``nb.random.seed``).
Fans follow the weight layouts used in ``nabla.nn``: a ``Linear`` weight is ``(in, out)`` and a
``Conv2d`` filter is ``(KH, KW, in / groups, out)`` (HWIO), so ``fan_in`` is the product of all
dims but the last and ``fan_out`` is the last dim times the receptive field.
"""

from __future__ import annotations

import math

from ..core.dtypes import get_default_dtype, to_dtype
from ..ops import creation
from ..ops import random as _random
from ..runtime.tensor import Tensor

__all__ = [
    "calculate_fans",
    "he_normal",
    "he_uniform",
    "kaiming_normal",
    "kaiming_uniform",
    "normal",
    "ones",
    "uniform",
    "xavier_normal",
    "xavier_uniform",
    "zeros",
]


def calculate_fans(shape) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight of ``shape`` in the ``(..., in, out)`` layout.

    Args:
        shape: the weight shape; at least one dim.

    Returns:
        ``(fan_in, fan_out)`` as ints.

    Raises:
        ValueError: for a shape of rank 0.

    Example:
        >>> calculate_fans((3, 3, 16, 32))  # a 3x3 conv from 16 to 32 channels
        (144, 288)
    """
    shape = tuple(int(d) for d in shape)
    if not shape:
        raise ValueError("calculate_fans: a weight needs at least one dim, got shape ()")
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def _dtype(dtype):
    return get_default_dtype() if dtype is None else to_dtype(dtype)


def uniform(shape, low: float = 0.0, high: float = 1.0, key: Tensor | None = None, dtype=None):
    """Uniform values in ``[low, high)``.

    Args:
        shape: the shape of the result.
        low: lower bound (default 0).
        high: upper bound (default 1).
        key: an RNG key for a reproducible draw; None draws from the global generator.
        dtype: a float dtype (default: the default dtype).

    Returns:
        A new tensor.
    """
    shape = tuple(shape)
    if key is None:
        return _random.uniform(shape, low=low, high=high, dtype=_dtype(dtype))
    return _random.uniform(key, shape, low=low, high=high, dtype=_dtype(dtype))


def normal(shape, mean: float = 0.0, std: float = 1.0, key: Tensor | None = None, dtype=None):
    """Normal values with the given ``mean`` and ``std``.

    Args:
        shape: the shape of the result.
        mean: the mean (default 0).
        std: the standard deviation (default 1).
        key: an RNG key for a reproducible draw; None draws from the global generator.
        dtype: a float dtype (default: the default dtype).

    Returns:
        A new tensor.
    """
    shape = tuple(shape)
    if key is None:
        return _random.normal(shape, mean=mean, std=std, dtype=_dtype(dtype))
    return _random.normal(key, shape, mean=mean, std=std, dtype=_dtype(dtype))


def zeros(shape, dtype=None) -> Tensor:
    """Zeros (biases).

    Args:
        shape: the shape.
        dtype: the dtype (default: the default dtype).

    Returns:
        A new tensor.
    """
    return creation.zeros(tuple(shape), dtype=_dtype(dtype))


def ones(shape, dtype=None) -> Tensor:
    """Ones (norm scales).

    Args:
        shape: the shape.
        dtype: the dtype (default: the default dtype).

    Returns:
        A new tensor.
    """
    return creation.ones(tuple(shape), dtype=_dtype(dtype))


def xavier_uniform(shape, gain: float = 1.0, key: Tensor | None = None, dtype=None) -> Tensor:
    """Glorot uniform: ``U(-a, a)`` with ``a = gain * sqrt(6 / (fan_in + fan_out))``.

    Args:
        shape: the weight shape (``(..., in, out)``).
        gain: a scale factor (default 1).
        key: an RNG key for a reproducible draw; None draws from the global generator.
        dtype: a float dtype (default: the default dtype).

    Returns:
        A new tensor.
    """
    fan_in, fan_out = calculate_fans(shape)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform(shape, -a, a, key=key, dtype=dtype)


def xavier_normal(shape, gain: float = 1.0, key: Tensor | None = None, dtype=None) -> Tensor:
    """Glorot normal: ``N(0, std^2)`` with ``std = gain * sqrt(2 / (fan_in + fan_out))``.

    Args:
        shape: the weight shape (``(..., in, out)``).
        gain: a scale factor (default 1).
        key: an RNG key for a reproducible draw; None draws from the global generator.
        dtype: a float dtype (default: the default dtype).

    Returns:
        A new tensor.
    """
    fan_in, fan_out = calculate_fans(shape)
    return normal(shape, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), key=key, dtype=dtype)


def he_uniform(shape, gain: float = math.sqrt(2.0), key: Tensor | None = None, dtype=None):
    """He (Kaiming) uniform: ``U(-a, a)`` with ``a = gain * sqrt(3 / fan_in)``; the default gain
    suits ReLU.

    Args:
        shape: the weight shape (``(..., in, out)``).
        gain: a scale factor (default ``sqrt(2)``).
        key: an RNG key for a reproducible draw; None draws from the global generator.
        dtype: a float dtype (default: the default dtype).

    Returns:
        A new tensor.
    """
    fan_in, _ = calculate_fans(shape)
    a = gain * math.sqrt(3.0 / fan_in)
    return uniform(shape, -a, a, key=key, dtype=dtype)


def he_normal(shape, gain: float = math.sqrt(2.0), key: Tensor | None = None, dtype=None):
    """He (Kaiming) normal: ``N(0, std^2)`` with ``std = gain / sqrt(fan_in)``; the default gain
    suits ReLU.

    Args:
        shape: the weight shape (``(..., in, out)``).
        gain: a scale factor (default ``sqrt(2)``).
        key: an RNG key for a reproducible draw; None draws from the global generator.
        dtype: a float dtype (default: the default dtype).

    Returns:
        A new tensor.
    """
    fan_in, _ = calculate_fans(shape)
    return normal(shape, 0.0, gain / math.sqrt(fan_in), key=key, dtype=dtype)


kaiming_uniform = he_uniform
kaiming_normal = he_normal
