"""JAX's ``jax.nn.initializers``: functions ``init(key, shape, dtype)`` that draw a new
parameter (also ``nb.nn.functional.initializers``, where ``jax.nn``'s names live). The
draws are nabla's (:mod:`nabla.random`); the distributions and scales are JAX's.

``variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1, batch_axis=())``
is the general one: the fans are ``shape[in_axis]`` and ``shape[out_axis]`` times the
receptive field (the other dims but ``batch_axis``), and the draws have variance ``scale /
fan``; ``glorot_*``/``xavier_*``, ``lecun_*`` and ``he_*``/``kaiming_*`` are its
instances.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from ..core.dtypes import get_default_dtype, to_dtype
from ..ops import creation, view
from ..ops import random as _random
from ..ops.distributions import orthogonal as _orthogonal
from ..runtime.tensor import Tensor

__all__ = [
    "zeros",
    "ones",
    "constant",
    "uniform",
    "normal",
    "truncated_normal",
    "variance_scaling",
    "glorot_uniform",
    "glorot_normal",
    "xavier_uniform",
    "xavier_normal",
    "lecun_uniform",
    "lecun_normal",
    "he_uniform",
    "he_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "orthogonal",
    "delta_orthogonal",
    "Initializer",
]


class Initializer(Protocol):
    """What every initializer here returns (JAX's ``initializers.Initializer``): a function
    of a key, a shape and an optional dtype that gives a tensor."""

    def __call__(self, key, shape, dtype=None) -> Tensor: ...


def _dt(dtype, op: str):
    """``dtype`` as a ``DType`` (default: the default dtype); errors name ``op``."""
    return to_dtype(dtype, op) if dtype is not None else get_default_dtype()


def zeros(key, shape, dtype=None):
    """Zeros of ``shape`` (the key is not used)."""
    return creation.zeros(tuple(shape), dtype=_dt(dtype, "initializers.zeros"))


def ones(key, shape, dtype=None):
    """Ones of ``shape`` (the key is not used)."""
    return creation.ones(tuple(shape), dtype=_dt(dtype, "initializers.ones"))


def constant(value, dtype=None):
    """An initializer filling with ``value``.

    Args:
        value: the fill.
        dtype: the default dtype of the draws.

    Returns:
        ``init(key, shape, dtype=dtype)``.
    """

    def init(key, shape, dtype=dtype):
        return creation.full(tuple(shape), value, dtype=_dt(dtype, "initializers.constant"))

    return init


def uniform(scale: float = 1e-2, dtype=None):
    """An initializer drawing uniformly from ``[0, scale)``.

    Args:
        scale: the upper end.
        dtype: the default dtype of the draws.

    Returns:
        ``init(key, shape, dtype=dtype)``.
    """

    def init(key, shape, dtype=dtype):
        return _random.uniform(
            key, tuple(shape), 0.0, scale, dtype=_dt(dtype, "initializers.uniform")
        )

    return init


def normal(stddev: float = 1e-2, dtype=None):
    """An initializer drawing from a normal of standard deviation ``stddev``.

    Args:
        stddev: the standard deviation.
        dtype: the default dtype of the draws.

    Returns:
        ``init(key, shape, dtype=dtype)``.
    """

    def init(key, shape, dtype=dtype):
        return _random.normal(
            key, tuple(shape), 0.0, stddev, dtype=_dt(dtype, "initializers.normal")
        )

    return init


def truncated_normal(stddev: float = 1e-2, dtype=None, lower: float = -2.0, upper: float = 2.0):
    """An initializer drawing a normal truncated to ``[lower, upper]`` standard deviations,
    times ``stddev``.

    Args:
        stddev: the scale of the draws.
        dtype: the default dtype of the draws.
        lower: the lower bound, in standard deviations.
        upper: the upper bound.

    Returns:
        ``init(key, shape, dtype=dtype)``.
    """

    def init(key, shape, dtype=dtype):
        z = _random.truncated_normal(
            key, lower, upper, tuple(shape), dtype=_dt(dtype, "initializers.truncated_normal")
        )
        return z * stddev

    return init


def _fans(shape, in_axis, out_axis, batch_axis) -> tuple:
    shape = tuple(shape)
    if len(shape) < 2:
        raise ValueError(
            f"initializers: fans need at least 2 dims (shape {shape}): a vector has no fan-in"
        )
    rank = len(shape)
    ins = [a % rank for a in (in_axis if isinstance(in_axis, tuple | list) else (in_axis,))]
    outs = [a % rank for a in (out_axis if isinstance(out_axis, tuple | list) else (out_axis,))]
    batch = [
        a % rank for a in (batch_axis if isinstance(batch_axis, tuple | list) else (batch_axis,))
    ]
    receptive = math.prod(n for i, n in enumerate(shape) if i not in ins + outs + batch)
    fan_in = math.prod(shape[i] for i in ins) * receptive
    return fan_in, math.prod(shape[i] for i in outs) * receptive


def variance_scaling(
    scale: float,
    mode: str,
    distribution: str,
    in_axis=-2,
    out_axis=-1,
    batch_axis=(),
    dtype=None,
):
    """JAX's ``variance_scaling``: draws of variance ``scale / fan``.

    Args:
        scale: the variance's numerator.
        mode: ``"fan_in"``, ``"fan_out"`` or ``"fan_avg"``.
        distribution: ``"truncated_normal"`` (within 2 standard deviations, rescaled to
            the variance), ``"normal"`` or ``"uniform"``.
        in_axis: the input dim(s) (default -2).
        out_axis: the output dim(s) (default -1).
        batch_axis: dims left out of the fans.
        dtype: the default dtype of the draws.

    Returns:
        ``init(key, shape, dtype=dtype)``.

    Raises:
        ValueError: for an unknown mode or distribution.
    """
    if mode not in ("fan_in", "fan_out", "fan_avg"):
        raise ValueError(f"variance_scaling: mode must be fan_in, fan_out or fan_avg, got {mode!r}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(
            "variance_scaling: distribution must be truncated_normal, normal or uniform, got "
            f"{distribution!r}"
        )

    def init(key, shape, dtype=dtype):
        fan_in, fan_out = _fans(shape, in_axis, out_axis, batch_axis)
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        variance = scale / max(fan, 1)
        dt = _dt(dtype, "initializers.variance_scaling")
        if distribution == "uniform":
            limit = math.sqrt(3.0 * variance)
            return _random.uniform(key, tuple(shape), -limit, limit, dtype=dt)
        if distribution == "normal":
            return _random.normal(key, tuple(shape), 0.0, math.sqrt(variance), dtype=dt)
        # the standard deviation of a standard normal truncated to [-2, 2]
        std = math.sqrt(variance) / 0.87962566103423978
        return _random.truncated_normal(key, -2.0, 2.0, tuple(shape), dtype=dt) * std

    return init


def _named(scale, mode, distribution):
    def make(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
        return variance_scaling(scale, mode, distribution, in_axis, out_axis, batch_axis, dtype)

    make.__doc__ = (
        f"``variance_scaling({scale}, {mode!r}, {distribution!r})``: an initializer.\n\n"
        "    Args:\n        in_axis: the input dim(s).\n        out_axis: the output dim(s).\n"
        "        batch_axis: dims left out of the fans.\n        dtype: the default dtype."
    )
    return make


glorot_uniform = xavier_uniform = _named(1.0, "fan_avg", "uniform")
glorot_normal = xavier_normal = _named(1.0, "fan_avg", "truncated_normal")
lecun_uniform = _named(1.0, "fan_in", "uniform")
lecun_normal = _named(1.0, "fan_in", "truncated_normal")
he_uniform = kaiming_uniform = _named(2.0, "fan_in", "uniform")
he_normal = kaiming_normal = _named(2.0, "fan_in", "truncated_normal")


def orthogonal(scale: float = 1.0, column_axis: int = -1, dtype=None):
    """An initializer of (semi-)orthogonal matrices times ``scale`` (JAX's
    ``orthogonal``): the other dims flattened into rows, ``column_axis`` the columns.

    Args:
        scale: the factor.
        column_axis: the dim of the columns (default -1).
        dtype: the default dtype of the draws.

    Returns:
        ``init(key, shape, dtype=dtype)``.
    """

    def init(key, shape, dtype=dtype):
        shape = tuple(shape)
        if len(shape) < 2:
            raise ValueError(f"orthogonal: needs at least 2 dims, got shape {shape}")
        dt = _dt(dtype, "initializers.orthogonal")
        col = column_axis % len(shape)
        n_cols = shape[col]
        n_rows = math.prod(shape) // n_cols
        size = max(n_rows, n_cols)
        q = _orthogonal(key, size, (), dt)[:n_rows, :n_cols]
        rest = tuple(n for i, n in enumerate(shape) if i != col)
        return view.moveaxis(q.reshape(rest + (n_cols,)), -1, col) * scale

    return init


def delta_orthogonal(scale: float = 1.0, column_axis: int = -1, dtype=None):
    """An initializer of convolution kernels that pass an orthogonal map through their
    centre tap only (JAX's ``delta_orthogonal``, the delta-orthogonal init of Xiao et
    al.): ``shape`` is ``spatial + (in, out)`` with 1 to 3 spatial dims and ``in <= out``;
    the centre (``(k - 1) // 2`` per dim) holds :func:`orthogonal`'s ``(in, out)`` matrix
    times ``scale``, every other tap zeros.

    Args:
        scale: the factor.
        column_axis: the dim of the columns of the orthogonal matrix (default -1).
        dtype: the default dtype of the draws.

    Returns:
        ``init(key, shape, dtype=dtype)``.
    """
    centre_matrix = orthogonal(scale, column_axis, dtype)

    def init(key, shape, dtype=dtype):
        shape = tuple(shape)
        if len(shape) not in (3, 4, 5):
            raise ValueError(
                f"delta_orthogonal: needs 1 to 3 spatial dims and (in, out), got shape {shape}"
            )
        n_in, n_out = shape[-2:]
        if n_in > n_out:
            raise ValueError(
                f"delta_orthogonal: in ({n_in}) must not exceed out ({n_out}) in shape {shape}"
            )
        q = centre_matrix(key, (n_in, n_out), dtype)
        mask = np.zeros(shape[:-2] + (1, 1), dtype=q.dtype.numpy)
        mask[tuple((k - 1) // 2 for k in shape[:-2])] = 1.0
        return creation.constant(mask) * q

    return init
