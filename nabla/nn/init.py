"""Parameter initializers: ``xavier_*``, ``he_*`` (Kaiming), ``normal``, ``uniform``, ``zeros``,
``ones``, each making a new tensor of a shape; and PyTorch's in-place forms (``xavier_uniform_``,
``kaiming_normal_``, ``normal_``, ``zeros_``, ``constant_``, ``trunc_normal_``, ...), which give
an existing tensor (a module's parameter) new values and keep its identity, with
``calculate_gain``.

Each takes the shape and an optional RNG ``key`` (from ``nb.random.key``): with a key the draw
is reproducible, without one it comes from the seeded global generator (``nb.random.seed``).
Fans follow the weight layouts used in ``nabla.nn``: a ``Linear`` weight is ``(in, out)`` and a
``Conv2d`` filter is ``(KH, KW, in / groups, out)`` (HWIO), so ``fan_in`` is the product of all
dims but the last and ``fan_out`` is the last dim times the receptive field.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.dtypes import get_default_dtype, to_dtype
from ..ops import creation
from ..ops import random as _random
from ..ops.indexing import rebind
from ..runtime.tensor import Tensor
from ..transforms.autodiff import detach
from .module import PYTORCH_LAYOUT

__all__ = [
    "calculate_fans",
    "calculate_gain",
    "constant_",
    "eye_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "orthogonal_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
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


def _fans_of(t: Tensor, fn: str) -> tuple[int, int]:
    """The fans of a tensor to fill: PyTorch's rule for a weight in its layout (a layer's
    own, ``PYTORCH_LAYOUT``: Conv1d, ConvTranspose2d, the recurrent layers and cells,
    ``MultiheadAttention``'s projections, Embedding), ours for the others. A tensor of fewer
    than 2 dims has none, as PyTorch refuses (``for p in model.parameters():
    xavier_uniform_(p)`` had filled every bias and norm weight)."""
    if t.ndim < 2:
        raise ValueError(
            f"{fn}: fan in and fan out cannot be computed for a tensor with fewer than 2 "
            f"dims (shape {t.shape}), as PyTorch's"
        )
    if t in PYTORCH_LAYOUT:
        receptive = math.prod(t.shape[2:])
        return t.shape[1] * receptive, t.shape[0] * receptive
    return calculate_fans(t.shape)


def _dtype(dtype, op: str):
    """``dtype`` as a ``DType`` (default: the default dtype); errors name ``op``."""
    return get_default_dtype() if dtype is None else to_dtype(dtype, op)


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
        return _random.uniform(shape, low=low, high=high, dtype=_dtype(dtype, "init.uniform"))
    return _random.uniform(key, shape, low=low, high=high, dtype=_dtype(dtype, "init.uniform"))


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

    Raises:
        ValueError: for a negative ``std`` (as PyTorch's).
    """
    if isinstance(std, int | float) and not std >= 0:
        raise ValueError(f"normal: std must be >= 0, got {std}")
    shape = tuple(shape)
    if key is None:
        return _random.normal(shape, mean=mean, std=std, dtype=_dtype(dtype, "init.normal"))
    return _random.normal(key, shape, mean=mean, std=std, dtype=_dtype(dtype, "init.normal"))


def zeros(shape, dtype=None) -> Tensor:
    """Zeros (biases).

    Args:
        shape: the shape.
        dtype: the dtype (default: the default dtype).

    Returns:
        A new tensor.
    """
    return creation.zeros(tuple(shape), dtype=_dtype(dtype, "init.zeros"))


def ones(shape, dtype=None) -> Tensor:
    """Ones (norm scales).

    Args:
        shape: the shape.
        dtype: the dtype (default: the default dtype).

    Returns:
        A new tensor.
    """
    return creation.ones(tuple(shape), dtype=_dtype(dtype, "init.ones"))


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
    a = gain * math.sqrt(3.0 / max(fan_in, 1))  # (a fan of 0: an empty shape)
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
    return normal(shape, 0.0, gain / math.sqrt(max(fan_in, 1)), key=key, dtype=dtype)


kaiming_uniform = he_uniform
kaiming_normal = he_normal


# ----------------------------------------------------------------------------- in place
# PyTorch's ``torch.nn.init.*_``: each gives ``tensor`` (a parameter) new values in place,
# keeping its identity, ``requires_grad`` and ``.grad`` (``rebind``: the new value has no
# autodiff history), and returns it. Fans come from the tensor's shape in ``nabla.nn``'s
# ``(..., in, out)`` layout (``calculate_fans``), as the functions above.
_GAINS = {"linear": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3.0, "relu": math.sqrt(2.0), "selu": 0.75}
_GAINS.update({k: 1.0 for k in ("identity", "conv1d", "conv2d", "conv3d")})
_GAINS.update({k: 1.0 for k in ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")})


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for ``nonlinearity`` (PyTorch's ``calculate_gain``).

    Args:
        nonlinearity: ``"linear"``, ``"identity"``, ``"conv1d"``/``2d``/``3d``,
            ``"conv_transpose*"``, ``"sigmoid"``, ``"tanh"``, ``"relu"``, ``"leaky_relu"``
            or ``"selu"``.
        param: the negative slope of ``"leaky_relu"`` (default 0.01).

    Returns:
        The gain.

    Raises:
        ValueError: for another nonlinearity or a slope that is not a number.

    Example:
        >>> calculate_gain("tanh")
        1.6666666666666667
    """
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, int | float):
            raise ValueError(f"calculate_gain: negative_slope {slope!r} is not a number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity not in _GAINS:
        raise ValueError(
            f"calculate_gain: unsupported nonlinearity {nonlinearity!r}; one of "
            f"{sorted((*_GAINS, 'leaky_relu'))}"
        )
    return _GAINS[nonlinearity]


def _target(fn: str, tensor) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{fn}: expected a Tensor to fill, got {type(tensor).__name__}")
    if not tensor.dtype.is_float:
        raise TypeError(f"{fn}: expected a floating tensor, got {tensor.dtype}")
    return tensor


def _fill(tensor: Tensor, value: Tensor) -> Tensor:
    """``tensor`` holding ``value`` (cast to its dtype), in place; returned."""
    rebind(tensor, detach(value.cast(tensor.dtype)))
    return tensor


def uniform_(tensor, a: float = 0.0, b: float = 1.0, key: Tensor | None = None) -> Tensor:
    """Fill ``tensor`` with values from ``U(a, b)``, in place.

    Args:
        tensor: the tensor to fill.
        a: lower bound.
        b: upper bound.
        key: an RNG key (PyTorch's ``generator``); None draws from the global generator.

    Returns:
        ``tensor``.
    """
    t = _target("uniform_", tensor)
    return _fill(t, uniform(t.shape, a, b, key=key, dtype=t.dtype))


def normal_(tensor, mean: float = 0.0, std: float = 1.0, key: Tensor | None = None) -> Tensor:
    """Fill ``tensor`` with values from ``N(mean, std^2)``, in place.

    Args:
        tensor: the tensor to fill.
        mean: the mean.
        std: the standard deviation.
        key: an RNG key; None draws from the global generator.

    Returns:
        ``tensor``.
    """
    t = _target("normal_", tensor)
    return _fill(t, normal(t.shape, mean, std, key=key, dtype=t.dtype))


def trunc_normal_(
    tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0, key=None
) -> Tensor:
    """Fill ``tensor`` with values from ``N(mean, std^2)`` truncated to ``[a, b]``, in place
    (PyTorch's ``trunc_normal_``), by rejection: each value is drawn until it falls in
    ``[a, b]``, from the normal itself or, for a cut narrow against ``std``, from the
    uniform on ``[a, b]`` (accepted with the normal's density ratio), whichever accepts
    more. Runs at the call (an initializer, not a traced op).

    Args:
        tensor: the tensor to fill.
        mean: the mean of the normal.
        std: its standard deviation (> 0).
        a: lower cut (an absolute value, not in standard deviations).
        b: upper cut.
        key: an RNG key; None draws from the global generator.

    Returns:
        ``tensor``.

    Raises:
        ValueError: if ``a >= b`` or ``std <= 0``, or if the cut is so far in a tail that
            almost nothing is accepted.
    """
    t = _target("trunc_normal_", tensor)
    if not a < b or not std > 0:
        raise ValueError(f"trunc_normal_: needs a < b and std > 0, got a={a}, b={b}, std={std}")

    def cdf(v):
        return 0.5 * (1.0 + math.erf((v - mean) / (std * math.sqrt(2.0))))

    # the closest point of [a, b] to the mean bounds the density there; a uniform draw is
    # kept with the density's ratio to that bound, whose mean over [a, b] is its rate
    nearest = min(max(mean, a), b)
    normal_rate = cdf(b) - cdf(a)
    grid = np.linspace(a, b, 1025)
    uniform_rate = float(np.exp(((nearest - mean) ** 2 - (grid - mean) ** 2) / (2 * std**2)).mean())
    shape = t.shape
    values = np.zeros(shape, np.float64)
    todo = np.ones(shape, bool)
    keys = None if key is None else iter(_random.split(key, 2 * _TRUNC_TRIES))
    for _ in range(_TRUNC_TRIES):
        if not todo.any():
            return _fill(t, creation.constant(values).cast(t.dtype))
        k1, k2 = (None, None) if keys is None else (next(keys), next(keys))
        if normal_rate >= uniform_rate:
            x = normal(shape, mean, std, key=k1, dtype="float64").numpy()
            take = (x >= a) & (x <= b)
        else:
            x = uniform(shape, a, b, key=k1, dtype="float64").numpy()
            u = uniform(shape, key=k2, dtype="float64").numpy()
            take = u < np.exp(((nearest - mean) ** 2 - (x - mean) ** 2) / (2.0 * std**2))
        take &= todo
        values[take] = x[take]
        todo &= ~take
    if not todo.any():
        return _fill(t, creation.constant(values).cast(t.dtype))
    raise ValueError(
        f"trunc_normal_: the cut [{a}, {b}] of N({mean}, {std}^2) accepts too few draws "
        f"({max(normal_rate, uniform_rate):.2g} of them)"
    )


_TRUNC_TRIES = 200  # rounds of draws: the worst acceptance allowed leaves none after them


def constant_(tensor, val: float) -> Tensor:
    """Fill ``tensor`` with ``val``, in place.

    Args:
        tensor: the tensor to fill.
        val: the value.

    Returns:
        ``tensor``.
    """
    return _constant("constant_", tensor, val)


def _constant(fn: str, tensor, val: float) -> Tensor:
    t = _target(fn, tensor)
    return _fill(t, creation.full(t.shape, val, dtype=t.dtype))


def zeros_(tensor) -> Tensor:
    """Fill ``tensor`` with zeros, in place; returns it."""
    return _constant("zeros_", tensor, 0.0)


def ones_(tensor) -> Tensor:
    """Fill ``tensor`` with ones, in place; returns it."""
    return _constant("ones_", tensor, 1.0)


def eye_(tensor) -> Tensor:
    """Fill the 2-D ``tensor`` with the identity (ones on the diagonal), in place.

    Raises:
        ValueError: for a tensor that is not 2-D.
    """
    t = _target("eye_", tensor)
    if t.ndim != 2:
        raise ValueError(f"eye_: expected a 2-D tensor, got shape {t.shape}")
    return _fill(t, creation.eye(t.shape[0], t.shape[1], dtype=t.dtype))


def xavier_uniform_(tensor, gain: float = 1.0, key: Tensor | None = None) -> Tensor:
    """:func:`xavier_uniform` into ``tensor``, in place.

    Args:
        tensor: the tensor to fill (``(..., in, out)`` layout for the fans).
        gain: a scale factor (default 1).
        key: an RNG key; None draws from the global generator.

    Returns:
        ``tensor``.

    Raises:
        ValueError: for a tensor of fewer than 2 dims (no fans), as PyTorch's.
    """
    t = _target("xavier_uniform_", tensor)
    a = gain * math.sqrt(6.0 / max(sum(_fans_of(t, "xavier_uniform_")), 1))
    return _fill(t, uniform(t.shape, -a, a, key=key, dtype=t.dtype))


def xavier_normal_(tensor, gain: float = 1.0, key: Tensor | None = None) -> Tensor:
    """:func:`xavier_normal` into ``tensor``, in place.

    Args:
        tensor: the tensor to fill (``(..., in, out)`` layout for the fans).
        gain: a scale factor (default 1).
        key: an RNG key; None draws from the global generator.

    Returns:
        ``tensor``.

    Raises:
        ValueError: for a tensor of fewer than 2 dims (no fans), as PyTorch's.
    """
    t = _target("xavier_normal_", tensor)
    std = gain * math.sqrt(2.0 / max(sum(_fans_of(t, "xavier_normal_")), 1))
    return _fill(t, normal(t.shape, 0.0, std, key=key, dtype=t.dtype))


def _kaiming_std(fn: str, t: Tensor, a, mode: str, nonlinearity: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"{fn}: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans_of(t, fn)
    fan = fan_in if mode == "fan_in" else fan_out
    # (a fan of 0 is an empty tensor: nothing to fill, as PyTorch's no-op)
    return calculate_gain(nonlinearity, a) / math.sqrt(max(fan, 1))


def kaiming_uniform_(
    tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", key=None
) -> Tensor:
    """Kaiming uniform into ``tensor``, in place (PyTorch's signature): ``U(-bound, bound)``
    with ``bound = gain * sqrt(3 / fan)``, ``gain = calculate_gain(nonlinearity, a)``.

    The fans come from ``nabla.nn``'s ``(..., in, out)`` layout; the weights that layers
    hold in PyTorch's ``(out, in, *kernel)`` layout (``Conv1d``, ``ConvTranspose2d``, the
    recurrent layers and cells, ``MultiheadAttention``'s projections, ``Embedding``) take
    PyTorch's fans, as ported code expects, in copies of those layers too.

    Args:
        tensor: the tensor to fill.
        a: the negative slope of a following leaky ReLU.
        mode: ``"fan_in"`` (default; keeps the forward pass's variance) or ``"fan_out"``.
        nonlinearity: as :func:`calculate_gain` (default ``"leaky_relu"``).
        key: an RNG key; None draws from the global generator.

    Returns:
        ``tensor``.

    Raises:
        ValueError: for a tensor of fewer than 2 dims (no fans), as PyTorch's, or an unknown
            ``mode``.
    """
    t = _target("kaiming_uniform_", tensor)
    bound = math.sqrt(3.0) * _kaiming_std("kaiming_uniform_", t, a, mode, nonlinearity)
    return _fill(t, uniform(t.shape, -bound, bound, key=key, dtype=t.dtype))


def kaiming_normal_(
    tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", key=None
) -> Tensor:
    """Kaiming normal into ``tensor``, in place (PyTorch's signature): ``N(0, std^2)`` with
    ``std = gain / sqrt(fan)``; fans as :func:`kaiming_uniform_`.

    Args:
        tensor: the tensor to fill.
        a: the negative slope of a following leaky ReLU.
        mode: ``"fan_in"`` (default) or ``"fan_out"``.
        nonlinearity: as :func:`calculate_gain` (default ``"leaky_relu"``).
        key: an RNG key; None draws from the global generator.

    Returns:
        ``tensor``.

    Raises:
        ValueError: for a tensor of fewer than 2 dims (no fans), as PyTorch's, or an unknown
            ``mode``.
    """
    t = _target("kaiming_normal_", tensor)
    std = _kaiming_std("kaiming_normal_", t, a, mode, nonlinearity)
    return _fill(t, normal(t.shape, 0.0, std, key=key, dtype=t.dtype))


def orthogonal_(tensor, gain: float = 1.0, key: Tensor | None = None) -> Tensor:
    """Fill ``tensor`` with a (semi-)orthogonal matrix times ``gain``, in place (PyTorch's
    ``orthogonal_``): the tensor seen as ``(shape[0], rest)``, the Q of a QR factorization
    of a normal draw (signs fixed by R's diagonal, so the result is uniform over the
    orthogonal matrices). Runs at the call (an initializer, not a traced op).

    Args:
        tensor: the tensor to fill, at least 2-D.
        gain: a scale factor (default 1).
        key: an RNG key; None draws from the global generator.

    Returns:
        ``tensor``.

    Raises:
        ValueError: for a tensor of fewer than 2 dims.
    """
    t = _target("orthogonal_", tensor)
    if t.ndim < 2:
        raise ValueError(f"orthogonal_: needs a tensor of at least 2 dims, got shape {t.shape}")
    rows = t.shape[0]
    cols = t.size // rows if rows else 0
    flat = normal((rows, cols), key=key, dtype="float64").numpy()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(t, creation.constant(gain * q.reshape(t.shape)))
