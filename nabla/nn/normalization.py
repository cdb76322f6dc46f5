"""Normalization layers with running statistics: ``BatchNorm1d``, ``BatchNorm2d``,
``GroupNorm``, ``InstanceNorm2d``, and their functional forms ``batch_norm``, ``group_norm``
and ``instance_norm`` (re-exported by :mod:`nabla.nn.functional`).

PyTorch's semantics and ``state_dict`` names (``weight``, ``bias``, ``running_mean``,
``running_var``, ``num_batches_tracked``), in Nabla's channels-last layouts: the channel
axis is the *last* one (``(N, C)``, ``(N, L, C)``, NHWC images), as ``Conv2d`` and the
pools produce and consume.

Statistics: normalization uses the biased batch variance; the running variance is updated
with the unbiased one, ``running = (1 - momentum) * running + momentum * batch`` (a
cumulative average when ``momentum=None``). The running statistics are updated *in place*
(the buffer tensors keep their identity and get new values with no autodiff history, as an
optimizer updates parameters), so every reference to the module sees them; under
``nb.compile`` the update is an output of the compiled program that each call writes back.
On a mesh with the batch sharded, the batch statistics are reductions over the global batch
(SyncBatchNorm's semantics, with no extra code).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.dtypes import float32, int64
from ..ops import creation
from ..ops._util import as_tensor
from ..runtime.tensor import Tensor
from ..transforms.autodiff import detach
from . import init
from .module import Module, rebind

__all__ = [
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
    "InstanceNorm2d",
    "InstanceNorm1d",
    "InstanceNorm3d",
    "batch_norm",
    "group_norm",
    "instance_norm",
]


# ----------------------------------------------------------------------------- helpers
@dataclass(frozen=True, slots=True)
class _NormParams:
    """What normalizes and rescales one input: the running statistics (None to use the
    input's own), the per-channel affine ``weight``/``bias`` (None to skip) and ``eps``."""

    running_mean: Tensor | None
    running_var: Tensor | None
    weight: Tensor | None
    bias: Tensor | None
    eps: float

    def checked(self, who: str, channels: int) -> _NormParams:
        """These parameters as tensors of shape ``(channels,)``, ``eps`` a float."""
        if (self.running_mean is None) != (self.running_var is None):
            raise ValueError(f"{who}: give both running_mean and running_var, or neither")
        return _NormParams(
            _check_vector(who, "running_mean", self.running_mean, channels),
            _check_vector(who, "running_var", self.running_var, channels),
            _check_vector(who, "weight", self.weight, channels),
            _check_vector(who, "bias", self.bias, channels),
            _check_eps(who, self.eps),
        )


_HALF = ("float16", "bfloat16")


def widened(x: Tensor) -> Tensor:
    """``x`` in float32 when it is float16 or bfloat16: statistics and norms of half
    values are computed in float32, as PyTorch's kernels accumulate (a float16 square
    overflows above 256, and a bfloat16 mean loses the digits a normalization needs); the
    result is cast back to ``x``'s dtype."""
    return x.cast("float32") if x.dtype.value in _HALF else x


def _moments(x: Tensor, axes: tuple) -> tuple[Tensor, Tensor]:
    """Mean and biased variance of ``x`` over ``axes`` (kept as size-1 dims)."""
    mean = x.mean(axis=axes, keepdims=True)
    var = (x - mean).square().mean(axis=axes, keepdims=True)
    return mean, var


def _count(shape, axes) -> int:
    n = 1
    for a in axes:
        n *= int(shape[a])
    return n


def _float_input(who: str, value, min_rank: int, layout: str) -> Tensor:
    """``value`` as a float tensor of rank ``>= min_rank``."""
    x = as_tensor(value, op=who)
    _check_float(who, x)
    if x.ndim < min_rank:
        raise ValueError(
            f"{who}: expected an input of rank >= {min_rank} {layout}, got shape {tuple(x.shape)}"
        )
    return x


def _affine(y: Tensor, weight, bias) -> Tensor:
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _check_vector(who: str, name: str, v, channels: int):
    """``v`` (a per-channel tensor or None) as a tensor, checked to have shape ``(C,)``."""
    if v is None:
        return None
    v = as_tensor(v, op=who)
    if tuple(v.shape) != (channels,):
        raise ValueError(
            f"{who}: {name} has shape {tuple(v.shape)}, expected ({channels},) "
            f"(one value per channel of the input's last axis)"
        )
    return v


def _check_float(who: str, x: Tensor) -> None:
    if not x.dtype.is_float:
        raise TypeError(f"{who}: input must be a floating-point tensor, got {x.dtype.name}")


def _set_stat(who: str, buf, value: Tensor) -> None:
    """Give the running-statistic tensor ``buf`` the value ``value`` in place (cast to its
    dtype, with no autodiff history). Refused when ``value`` varies along a vmap axis that
    ``buf`` does not: one buffer cannot hold a statistic per mapped element."""
    _check_updatable(who, buf, value)
    if value.dtype is not buf.dtype:
        value = value.cast(buf.dtype)
    rebind(buf, detach(value))


def _update_stats(who: str, buffers: tuple, batch: tuple, f, current: tuple | None = None):
    """Blend the batch statistics ``batch`` (mean, var) into the running-statistic tensors
    ``buffers`` in place: ``(1 - f) * current + f * batch``, ``current`` the buffers' values
    as tensors (the buffers themselves by default)."""
    for buf, old, new in zip(buffers, current or buffers, batch, strict=True):
        _set_stat(who, buf, (1.0 - f) * old + f * new.cast(old.dtype))


def _check_updatable(who: str, buf, value: Tensor) -> None:
    if not isinstance(buf, Tensor):
        raise TypeError(
            f"{who}: running statistics must be tensors to be updated in place, got "
            f"{type(buf).__name__}"
        )
    if set(value._impl.levels) - set(buf._impl.levels):
        raise ValueError(
            f"{who}: training mode under vmap computes batch statistics per mapped element, "
            "so they cannot update one set of running statistics; use eval() (running "
            "statistics) or track_running_stats=False (batch statistics only)"
        )


def _factor(momentum, num_batches_tracked):
    """The weight of the new batch statistics: ``momentum``, or ``1 / num_batches_tracked``
    (a cumulative average) when ``momentum`` is None."""
    if momentum is not None:
        return float(momentum)
    return 1.0 / num_batches_tracked.cast(float32)


def _check_momentum(who: str, momentum, allow_none=True) -> None:
    if momentum is None and allow_none:
        return
    if isinstance(momentum, Tensor):
        return
    try:
        m = float(momentum)
    except (TypeError, ValueError):
        raise TypeError(f"{who}: momentum must be a number or None, got {momentum!r}") from None
    if not 0.0 <= m <= 1.0:
        raise ValueError(f"{who}: momentum must be in [0, 1], got {momentum}")


def _check_eps(who: str, eps) -> float:
    try:
        e = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"{who}: eps must be a number, got {eps!r}") from None
    if not e >= 0.0:
        raise ValueError(f"{who}: eps must be >= 0, got {eps}")
    return e


# ----------------------------------------------------------------------------- functional
def _batch_norm(who: str, x: Tensor, p: _NormParams, training: bool):
    """Batch norm over every axis but the last: ``(y, (batch_mean, batch_var_unbiased))``;
    the statistics are None when the running ones are used."""
    c = int(x.shape[-1])
    axes = tuple(range(x.ndim - 1))
    if training or p.running_mean is None:
        n = _count(x.shape, axes)
        if training and n <= 1:
            raise ValueError(
                f"{who}: expected more than 1 value per channel when training, got input of "
                f"shape {tuple(x.shape)}"
            )
        mean = x.mean(axis=axes, keepdims=True)
        centered = x - mean
        var = centered.square().mean(axis=axes, keepdims=True)
        y = centered * _channel_scale(var, p)
        unbiased = var.reshape((c,)) * (n / max(n - 1, 1))
        stats = (mean.reshape((c,)), unbiased)
    else:
        rm, rv = p.running_mean, p.running_var
        rm = rm.cast(x.dtype) if rm.dtype is not x.dtype else rm
        rv = rv.cast(x.dtype) if rv.dtype is not x.dtype else rv
        scale = _channel_scale(rv, p)
        # one pass over the input: x * scale + (bias - mean * scale)
        shift = -rm * scale if p.bias is None else p.bias - rm * scale
        return x * scale + shift, (None, None)
    return (y if p.bias is None else y + p.bias), stats


def _channel_scale(var: Tensor, p: _NormParams) -> Tensor:
    """``weight / sqrt(var + eps)`` per channel (the weight folded in before the input is
    scaled: one pass over the input, and one less in its gradient)."""
    inv = (var + p.eps).rsqrt()
    return inv if p.weight is None else inv * p.weight


# the per-channel arguments batch_norm and instance_norm take alike, written once
_PER_CHANNEL_ARGS = """\
running_mean: a ``(C,)`` tensor or None.
        running_var: a ``(C,)`` tensor or None.
        weight: optional per-channel scale ``(C,)``.
        bias: optional per-channel shift ``(C,)``."""


def _per_channel_doc(fn):
    fn.__doc__ = fn.__doc__.replace("{per_channel_args}", _PER_CHANNEL_ARGS)
    return fn


@_per_channel_doc
def batch_norm(
    input,  # noqa: A002 - PyTorch's name
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalization over every axis but the last (the channel axis), PyTorch's
    ``F.batch_norm`` in channels-last layout.

    In training mode (or without running statistics) the input is normalized with the
    batch's mean and biased variance; given running statistics in training mode, they are
    updated **in place** (as PyTorch does): ``running = (1 - momentum) * running + momentum
    * batch``, with the unbiased batch variance. In evaluation mode the running statistics
    normalize.

    Args:
        input: a float tensor ``(N, C)``, ``(N, L, C)``, ``(N, H, W, C)``, ... (C last).
        {per_channel_args}
        training: use (and update) batch statistics (default False).
        momentum: the weight of the batch statistics in the running update (default 0.1).
        eps: added to the variance (default 1e-5).

    Returns:
        A tensor like ``input``.

    Raises:
        ValueError: for an input of rank < 2, per-channel tensors of the wrong shape, one
            running statistic without the other, or a single value per channel in training.
    """
    who = "batch_norm"
    x = _float_input(who, input, 2, "(N, ..., C)")
    p = _NormParams(running_mean, running_var, weight, bias, eps).checked(who, int(x.shape[-1]))
    _check_momentum(who, momentum, allow_none=False)
    y, stats = _batch_norm(who, widened(x), p, training)
    y = y.cast(x.dtype) if y.dtype is not x.dtype else y
    if training and running_mean is not None:
        running = (running_mean, running_var)
        _update_stats(who, running, stats, float(momentum), (p.running_mean, p.running_var))
    return y


def group_norm(
    input,  # noqa: A002 - PyTorch's name
    num_groups: int,
    weight=None,
    bias=None,
    eps: float = 1e-5,
) -> Tensor:
    """Group normalization (PyTorch's ``F.group_norm``, channels last): the channels (last
    axis) are split into ``num_groups`` groups, and each example is normalized over each
    group's channels and all other non-batch axes, then scaled and shifted per channel.

    Args:
        input: a float tensor ``(N, ..., C)`` with ``C`` divisible by ``num_groups``.
        num_groups: the number of groups.
        weight: optional per-channel scale ``(C,)``.
        bias: optional per-channel shift ``(C,)``.
        eps: added to the variance (default 1e-5).

    Returns:
        A tensor like ``input``.

    Raises:
        ValueError: for an input of rank < 2, ``C`` not divisible by ``num_groups``, or
            per-channel tensors of the wrong shape.
    """
    who = "group_norm"
    x = _float_input(who, input, 2, "(N, ..., C)")
    g = _check_groups(who, num_groups)
    c = int(x.shape[-1])
    if c % g:
        raise ValueError(
            f"{who}: the {c} channels of the input (shape {tuple(x.shape)}) do not split "
            f"into num_groups={g} groups"
        )
    weight = _check_vector(who, "weight", weight, c)
    bias = _check_vector(who, "bias", bias, c)
    eps = _check_eps(who, eps)
    shape = tuple(x.shape)
    grouped = widened(x).reshape(shape[:-1] + (g, c // g))
    axes = tuple(range(1, x.ndim - 1)) + (x.ndim,)
    mean, var = _moments(grouped, axes)
    y = _affine(((grouped - mean) * (var + eps).rsqrt()).reshape(shape), weight, bias)
    return y.cast(x.dtype) if y.dtype is not x.dtype else y


def _check_groups(who: str, num_groups) -> int:
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
        raise ValueError(f"{who}: num_groups must be a positive int, got {num_groups!r}")
    return num_groups


@_per_channel_doc
def instance_norm(
    input,  # noqa: A002 - PyTorch's name
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Instance normalization (PyTorch's ``F.instance_norm``, channels last): each example
    and channel is normalized over the spatial axes (every axis but the first and last).

    With ``use_input_stats`` (default) the instance statistics normalize, and given running
    statistics they are updated **in place** with the batch average of the instance means
    and unbiased variances; without it the running statistics normalize.

    Args:
        input: a float tensor ``(N, ..., C)`` with at least one spatial axis.
        {per_channel_args}
        use_input_stats: normalize with each instance's statistics (default True).
        momentum: the weight of the new statistics in the running update (default 0.1).
        eps: added to the variance (default 1e-5).

    Returns:
        A tensor like ``input``.

    Raises:
        ValueError: for an input of rank < 3, per-channel tensors of the wrong shape, one
            running statistic without the other, or ``use_input_stats=False`` without
            running statistics.
    """
    who = "instance_norm"
    x = _float_input(who, input, 3, "(N, spatial..., C)")
    if not use_input_stats and running_mean is None and running_var is None:
        raise ValueError(f"{who}: use_input_stats=False needs running_mean and running_var")
    p = _NormParams(running_mean, running_var, weight, bias, eps).checked(who, int(x.shape[-1]))
    _check_momentum(who, momentum, allow_none=False)
    y, stats = _instance_norm(who, widened(x), p, use_input_stats)
    y = y.cast(x.dtype) if y.dtype is not x.dtype else y
    if use_input_stats and running_mean is not None:
        running = (running_mean, running_var)
        _update_stats(who, running, stats, float(momentum), (p.running_mean, p.running_var))
    return y


def _instance_norm(who: str, x: Tensor, p: _NormParams, use_input_stats: bool):
    """Instance norm of ``(N, spatial..., C)``: ``(y, (mean, var))``, the batch averages of
    the instance means and unbiased variances (None when the running ones are used)."""
    c = int(x.shape[-1])
    if not use_input_stats:
        return _batch_norm(who, x, p, False)
    axes = tuple(range(1, x.ndim - 1))
    n = _count(x.shape, axes)
    if n == 1:  # each instance's variance would be 0 and the output 0, as PyTorch refuses
        raise ValueError(
            f"{who}: expected more than 1 spatial element when normalizing with the instance "
            f"statistics, got input of shape {x.shape}"
        )
    mean, var = _moments(x, axes)
    y = (x - mean) * (var + p.eps).rsqrt()
    batch = int(x.shape[0])
    avg_mean = mean.reshape((batch, c)).mean(axis=0)
    avg_var = var.reshape((batch, c)).mean(axis=0) * (n / max(n - 1, 1))
    return _affine(y, p.weight, p.bias), (avg_mean, avg_var)


# ----------------------------------------------------------------------------- modules
def _check_features(cls: str, name: str, n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{cls}: {name} must be a positive int, got {n!r}")
    return n


class _NormBase(Module):
    """Parameters and running statistics shared by batch and instance norm."""

    _ranks: tuple = ()
    _layout: str = ""

    # batch norm's constructor (PyTorch's defaults); InstanceNorm2d overrides the defaults
    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        super().__init__()
        cls = type(self).__name__
        self.num_features = _check_features(cls, "num_features", num_features)
        self.eps = _check_eps(cls, eps)
        _check_momentum(cls, momentum)
        self.momentum = None if momentum is None else float(momentum)
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        c = self.num_features
        self.weight = init.ones((c,), dtype) if self.affine else None
        self.bias = init.zeros((c,), dtype) if self.affine and bias else None
        if self.track_running_stats:
            self.register_buffer("running_mean", init.zeros((c,), dtype))
            self.register_buffer("running_var", init.ones((c,), dtype))
            self.register_buffer("num_batches_tracked", creation.constant(0, dtype=int64))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)
        if device is not None:
            self.to(device)

    def reset_running_stats(self) -> None:
        """Reset the running statistics in place: mean 0, variance 1, count 0."""
        if self.track_running_stats:
            c = self.num_features
            rebind(self.running_mean, init.zeros((c,), self.running_mean.dtype))
            rebind(self.running_var, init.ones((c,), self.running_var.dtype))
            rebind(self.num_batches_tracked, creation.constant(0, dtype=int64))

    def reset_parameters(self) -> None:
        """Reset the running statistics, and ``weight``/``bias`` to ones/zeros, in place."""
        self.reset_running_stats()
        if self.affine:
            c = self.num_features
            rebind(self.weight, init.ones((c,), self.weight.dtype))
            if self.bias is not None:
                rebind(self.bias, init.zeros((c,), self.bias.dtype))

    def _check_input(self, x) -> Tensor:
        cls = type(self).__name__
        x = as_tensor(x, op=cls)
        if x.ndim not in self._ranks:
            raise ValueError(
                f"{cls}({self.extra_repr()}): expected input {self._layout}, got shape "
                f"{tuple(x.shape)} (rank {x.ndim})"
            )
        if int(x.shape[-1]) != self.num_features:
            raise ValueError(
                f"{cls}({self.extra_repr()}): input of shape {tuple(x.shape)} has "
                f"{x.shape[-1]} channels on its last axis, expected {self.num_features}"
            )
        _check_float(cls, x)
        return x

    def _params(self, use_running: bool) -> _NormParams:
        """This module's parameters, with the running statistics only if ``use_running``."""
        rm, rv = (self.running_mean, self.running_var) if use_running else (None, None)
        return _NormParams(rm, rv, self.weight, self.bias, self.eps)

    def _update_running(self, cls, stats: tuple, count: bool) -> None:
        """The in-place update of the running statistics with this batch's ``(mean, var)``."""
        _check_updatable(cls, self.running_mean, stats[0])  # before anything changes
        nbt = self.num_batches_tracked
        if count:
            nbt = nbt + 1
            _set_stat(cls, self.num_batches_tracked, nbt)
        f = _factor(self.momentum, nbt) if count else (self.momentum or 0.0)
        _update_stats(cls, (self.running_mean, self.running_var), stats, f)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )


class _BatchNorm(_NormBase):
    def forward(self, x):
        """Normalize ``x`` with batch statistics (training mode, updating the running ones
        in place) or the running statistics (evaluation mode).

        Args:
            x: the input, channels last.

        Returns:
            A tensor like ``x``.

        Raises:
            ValueError: for a wrong rank or channel count, or a single value per channel
                in training mode.
        """
        cls = type(self).__name__
        x = self._check_input(x)
        use_batch = self.training or not self.track_running_stats
        who = f"{cls}({self.extra_repr()})"
        y, stats = _batch_norm(who, widened(x), self._params(not use_batch), self.training)
        if self.training and self.track_running_stats:
            self._update_running(cls, stats, count=True)
        return y.cast(x.dtype) if y.dtype is not x.dtype else y


class BatchNorm1d(_BatchNorm):
    """Batch normalization of ``(N, C)`` or ``(N, L, C)`` inputs (PyTorch's ``BatchNorm1d``,
    channels last: ``C`` is the last axis, as in ``(batch, length, features)`` sequences).

    In training mode (``train()``) each channel is normalized with the batch's mean and
    biased variance, and the running statistics are updated in place (with the unbiased
    variance); in evaluation mode (``eval()``) the running statistics normalize.
    ``state_dict`` names: ``weight``, ``bias``, ``running_mean``, ``running_var``,
    ``num_batches_tracked`` (int64), so a PyTorch state dict loads as is.

    Args:
        num_features: ``C``, the number of channels.
        eps: added to the variance (default 1e-5).
        momentum: the weight of each batch in the running statistics (default 0.1), or None
            for a cumulative average over the batches seen.
        affine: learn a per-channel scale ``weight`` (ones) and shift ``bias`` (zeros)
            (default True).
        track_running_stats: keep running statistics (default True); when False, batch
            statistics are used in both modes.
        device: where the parameters and statistics live (default: the default device).
        dtype: dtype of the parameters and running statistics (default: the default dtype).
        bias: with ``affine``, learn the shift ``bias`` too (default True; PyTorch's keyword).

    Example:
        >>> bn = BatchNorm1d(3)
        >>> y = bn(nb.ones((4, 3)))           # training mode: running stats updated
        >>> int(bn.num_batches_tracked.item())
        1
    """

    _ranks = (2, 3)
    _layout = "(N, C) or (N, L, C)"


class BatchNorm2d(_BatchNorm):
    """Batch normalization of NHWC images (PyTorch's ``BatchNorm2d``, channels last as
    ``Conv2d``'s output): each channel is normalized over the batch and spatial axes.

    See :class:`BatchNorm1d` for the modes, the running statistics and the state dict.

    Args:
        num_features: ``C``, the number of channels.
        eps: added to the variance (default 1e-5).
        momentum: the weight of each batch in the running statistics (default 0.1), or None
            for a cumulative average.
        affine: learn a per-channel ``weight`` and ``bias`` (default True).
        track_running_stats: keep running statistics (default True).
        device: where the parameters and statistics live (default: the default device).
        dtype: dtype of the parameters and running statistics (default: the default dtype).
        bias: with ``affine``, learn the shift ``bias`` too (default True; PyTorch's keyword).
    """

    _ranks = (4,)
    _layout = "(N, H, W, C)"


class BatchNorm3d(_BatchNorm):
    """Batch normalization of volumes ``(N, D, H, W, C)`` (PyTorch's ``BatchNorm3d``,
    channels last as ``Conv3d``'s output): each channel is normalized over the batch and
    the three spatial axes.

    See :class:`BatchNorm1d` for the modes, the running statistics and the state dict.

    Args:
        num_features: ``C``, the number of channels.
        eps: added to the variance (default 1e-5).
        momentum: the weight of each batch in the running statistics (default 0.1), or None
            for a cumulative average.
        affine: learn a per-channel ``weight`` and ``bias`` (default True).
        track_running_stats: keep running statistics (default True).
        device: where the parameters and statistics live (default: the default device).
        dtype: dtype of the parameters and running statistics (default: the default dtype).
        bias: with ``affine``, learn the shift ``bias`` too (default True; PyTorch's keyword).
    """

    _ranks = (5,)
    _layout = "(N, D, H, W, C)"


class InstanceNorm2d(_NormBase):
    """Instance normalization of NHWC images (PyTorch's ``InstanceNorm2d``, channels last):
    each image and channel is normalized over its spatial axes. An unbatched ``(H, W, C)``
    image is accepted too.

    With ``track_running_stats=True`` the running statistics (batch averages of the instance
    statistics) are updated in place in training mode and normalize in evaluation mode.

    Args:
        num_features: ``C``, the number of channels.
        eps: added to the variance (default 1e-5).
        momentum: the weight of each batch in the running statistics (default 0.1; None
            keeps them fixed, as PyTorch).
        affine: learn a per-channel ``weight`` and ``bias`` (default False).
        track_running_stats: keep running statistics (default False).
        device: where the parameters and statistics live (default: the default device).
        dtype: dtype of the parameters and running statistics (default: the default dtype).
        bias: with ``affine``, learn the shift ``bias`` too (default True; PyTorch's keyword).
    """

    _ranks = (3, 4)
    _layout = "(N, H, W, C) or (H, W, C)"

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias
        )

    def forward(self, x):
        """Normalize each instance of ``x`` (each example and channel over its spatial
        axes).

        Args:
            x: laid out as the layer says: ``(N, H, W, C)`` or ``(H, W, C)`` here,
                sequences for ``InstanceNorm1d``, volumes for ``InstanceNorm3d``.

        Returns:
            A tensor like ``x``.

        Raises:
            ValueError: for a wrong rank or channel count.
        """
        cls = type(self).__name__
        x = self._check_input(x)
        shape = tuple(x.shape)
        images = self._as_images(x)
        use_input = self.training or not self.track_running_stats
        y, stats = _instance_norm(cls, widened(images), self._params(True), use_input)
        y = y.cast(x.dtype) if y.dtype is not x.dtype else y
        if self.training and self.track_running_stats:
            self._update_running(cls, stats, count=False)
        return y if tuple(y.shape) == shape else y.reshape(shape)

    def _as_images(self, x):
        """``x`` as a batch of NHWC images whose spatial axes are the instance's."""
        return x.reshape((1,) + tuple(x.shape)) if x.ndim == 3 else x


class InstanceNorm1d(InstanceNorm2d):
    """Instance normalization of sequences ``(N, L, C)`` (PyTorch's ``InstanceNorm1d``,
    channels last): each sequence and channel is normalized over its length. An unbatched
    ``(L, C)`` sequence is accepted too. The arguments are :class:`InstanceNorm2d`'s.

    Args:
        num_features: ``C``, the number of channels.
        eps: added to the variance (default 1e-5).
        momentum: the weight of each batch in the running statistics (default 0.1).
        affine: learn a per-channel ``weight`` and ``bias`` (default False).
        track_running_stats: keep running statistics (default False).
        device: where the parameters and statistics live (default: the default device).
        dtype: dtype of the parameters and running statistics (default: the default dtype).
        bias: with ``affine``, learn the shift ``bias`` too (default True; PyTorch's keyword).
    """

    _ranks = (2, 3)
    _layout = "(N, L, C) or (L, C)"

    def _as_images(self, x):
        shape = tuple(x.shape)
        return x.reshape((1, 1) + shape if x.ndim == 2 else (shape[0], 1) + shape[1:])


class InstanceNorm3d(InstanceNorm2d):
    """Instance normalization of volumes ``(N, D, H, W, C)`` (PyTorch's
    ``InstanceNorm3d``, channels last): each volume and channel is normalized over its
    three spatial axes. An unbatched ``(D, H, W, C)`` volume is accepted too. The arguments
    are :class:`InstanceNorm2d`'s.

    Args:
        num_features: ``C``, the number of channels.
        eps: added to the variance (default 1e-5).
        momentum: the weight of each batch in the running statistics (default 0.1).
        affine: learn a per-channel ``weight`` and ``bias`` (default False).
        track_running_stats: keep running statistics (default False).
        device: where the parameters and statistics live (default: the default device).
        dtype: dtype of the parameters and running statistics (default: the default dtype).
        bias: with ``affine``, learn the shift ``bias`` too (default True; PyTorch's keyword).
    """

    _ranks = (4, 5)
    _layout = "(N, D, H, W, C) or (D, H, W, C)"

    def _as_images(self, x):
        shape = tuple(x.shape)
        lead = (1,) if x.ndim == 4 else shape[:1]
        d, h, w, c = shape[-4:]
        return x.reshape(lead + (d * h, w, c))  # the spatial axes as one image


class GroupNorm(Module):
    """Group normalization (PyTorch's ``GroupNorm``, channels last): the ``C`` channels of
    an ``(N, ..., C)`` input are split into ``num_groups`` groups, each example is normalized
    over each group (its channels and all spatial axes), then scaled and shifted per channel.
    No running statistics: training and evaluation modes compute the same.

    Args:
        num_groups: the number of groups (must divide ``num_channels``).
        num_channels: ``C``.
        eps: added to the variance (default 1e-5).
        affine: learn a per-channel ``weight`` (ones) and ``bias`` (zeros) (default True).
        device: where the parameters live (default: the default device).
        dtype: dtype of the parameters (default: the default dtype).
        bias: with ``affine``, learn the shift ``bias`` too (default True; PyTorch's keyword).
    """

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps=1e-5,
        affine=True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        super().__init__()
        self.num_groups = _check_groups("GroupNorm", num_groups)
        self.num_channels = _check_features("GroupNorm", "num_channels", num_channels)
        if num_channels % num_groups:
            raise ValueError(
                f"GroupNorm: num_channels={num_channels} is not divisible by "
                f"num_groups={num_groups}"
            )
        self.eps = _check_eps("GroupNorm", eps)
        self.affine = bool(affine)
        self.weight = init.ones((num_channels,), dtype) if self.affine else None
        self.bias = init.zeros((num_channels,), dtype) if self.affine and bias else None
        if device is not None:
            self.to(device)

    def forward(self, x):
        """Normalize ``x``.

        Args:
            x: ``(N, ..., C)``.

        Returns:
            A tensor like ``x``.

        Raises:
            ValueError: for an input of rank < 2 or with another channel count.
        """
        x = as_tensor(x, op="GroupNorm")
        if x.ndim < 2 or int(x.shape[-1]) != self.num_channels:
            raise ValueError(
                f"GroupNorm({self.extra_repr()}): expected input (N, ..., {self.num_channels}),"
                f" got shape {tuple(x.shape)}"
            )
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
