"""Layers: ``Linear``, ``Conv2d``, pools, norms, ``Embedding``, ``Dropout``, activation
modules, ``Identity`` and ``Flatten`` (attention and transformer blocks: ``transformer.py``).

Every layer that draws initial weights takes an optional ``key`` (``nb.random.key``) so a model
is reproducible; without one the seeded global generator is used. Layouts follow
:mod:`nabla.nn.functional`: linear weights ``(in, out)``, images NHWC, filters HWIO, sequences
``(batch, length, features)``.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

from ..ops import binary, creation, reduction, unary, view
from ..ops import random as _random
from ..ops._util import alias_arg, as_tensor
from ..runtime.tensor import Tensor
from ..transforms.autodiff import detach
from . import functional as F
from . import init
from .module import Module, mark_frozen_parameter

__all__ = [
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "Conv1d",
    "Conv3d",
    "ConvTranspose3d",
    "Bilinear",
    "ChannelShuffle",
    "LocalResponseNorm",
    "CrossMapLRN2d",
    "Softmax2d",
    "UpsamplingNearest2d",
    "UpsamplingBilinear2d",
    "MaxPool3d",
    "AvgPool3d",
    "Conv2d",
    "ConvTranspose2d",
    "Dropout",
    "AlphaDropout",
    "FeatureAlphaDropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "ELU",
    "Embedding",
    "Flatten",
    "GELU",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "Identity",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "LogSigmoid",
    "LogSoftmax",
    "MaxPool2d",
    "Mish",
    "PReLU",
    "Parameter",
    "RMSNorm",
    "ReLU",
    "ReLU6",
    "SELU",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Softplus",
    "Softsign",
    "Tanhshrink",
    "Hardshrink",
    "Softshrink",
    "ConvTranspose1d",
    "EmbeddingBag",
    "MaxPool1d",
    "AvgPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveAvgPool3d",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "FractionalMaxPool2d",
    "LPPool1d",
    "LPPool2d",
    "RReLU",
    "AdaptiveMaxPool3d",
    "AdaptiveAvgPool1d",
    "AdaptiveMaxPool1d",
    "PixelShuffle",
    "Unfold",
    "Fold",
    "PixelUnshuffle",
    "ZeroPad1d",
    "ZeroPad2d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "CircularPad1d",
    "CircularPad2d",
    "ZeroPad3d",
    "ConstantPad3d",
    "ReflectionPad3d",
    "ReplicationPad3d",
    "CircularPad3d",
    "CosineSimilarity",
    "PairwiseDistance",
    "Softmin",
    "CELU",
    "GLU",
    "Threshold",
    "Tanh",
    "Unflatten",
    "Upsample",
]


def _keys(key: Tensor | None, n: int) -> list:
    """``n`` independent keys from ``key`` (``[None] * n`` without one)."""
    if key is None:
        return [None] * n
    ks = _random.split(key, n)
    return [ks[i] for i in range(n)]


def _per_dim(v, n: int) -> tuple:
    """An int for each of ``n`` dims, or the per-dim values as given."""
    return (v,) * n if isinstance(v, int) else tuple(v)


def _pair(v) -> tuple:
    return _per_dim(v, 2)


def _check_sizes(layer: str, **sizes) -> None:
    """Each size a positive int, or an error naming the layer and the argument."""
    for name, v in sizes.items():
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{layer}: {name} must be a positive int, got {v!r}")


class Linear(Module):
    """``y = x @ weight + bias`` with ``weight`` of shape ``(in_features, out_features)``.

    Weights and bias start uniform in ``±1 / sqrt(in_features)``.

    Args:
        in_features: size of the input's last axis.
        out_features: size of the output's last axis.
        bias: whether to add a learned bias (default True).
        key: optional RNG key for the initial values.
        dtype: parameter dtype (default: the default dtype).

    Example:
        >>> Linear(4, 3)
        Linear(in_features=4, out_features=3, bias=True)
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, key=None, dtype=None
    ):
        super().__init__()
        _check_sizes("Linear", in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = int(in_features), int(out_features)
        kw, kb = _keys(key, 2)
        bound = 1.0 / math.sqrt(self.in_features)
        self.weight = init.uniform((in_features, out_features), -bound, bound, kw, dtype)
        self.bias = init.uniform((out_features,), -bound, bound, kb, dtype) if bias else None

    def forward(self, x):
        """Apply the layer to ``x`` of shape ``(..., in_features)``.

        Args:
            x: the input.

        Returns:
            ``(..., out_features)``.

        Raises:
            ValueError: if the last axis of ``x`` is not ``in_features``.
        """
        x = as_tensor(x, op="Linear")
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"{self._name()}: input of shape {x.shape} has "
                f"{x.shape[-1] if x.ndim else 0} features, expected {self.in_features}"
            )
        return F.linear(x, self.weight, self.bias)

    def _name(self) -> str:
        return f"Linear(in_features={self.in_features}, out_features={self.out_features})"

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


_PADDING_MODES = {"zeros": None, "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _padding_mode(layer: str, padding_mode: str, padding, spatial: int, kernel, dilation):
    """PyTorch's ``padding_mode``: None for ``"zeros"`` (the convolution pads), else the
    per-spatial-dim ``(before, after)`` amounts the layer pads with that mode first
    (``"same"``: PyTorch's split of ``dilation * (kernel - 1)``, the extra one after)."""
    if padding_mode not in _PADDING_MODES:
        raise ValueError(
            f"{layer}: padding_mode must be one of {list(_PADDING_MODES)}, got {padding_mode!r}"
        )
    if padding_mode == "zeros":
        return None
    if isinstance(padding, str):
        if padding.lower() == "valid":
            return ((0, 0),) * spatial
        dil = (dilation,) * spatial if isinstance(dilation, int) else tuple(dilation)
        totals = [d * (k - 1) for k, d in zip(kernel, dil, strict=True)]
        return tuple((t // 2, t - t // 2) for t in totals)
    amounts = (padding,) * spatial if isinstance(padding, int) else tuple(padding)
    if len(amounts) != spatial or not all(isinstance(a, int) and a >= 0 for a in amounts):
        raise ValueError(
            f"{layer}: padding_mode={padding_mode!r} takes int padding (or one per spatial "
            f"dim), got {padding!r}"
        )
    return tuple((a, a) for a in amounts)


def _pad_spatial(layer: str, x, pads, mode: str):
    """``x`` (``(..., spatial..., C)``) padded by ``pads`` with ``mode``. As PyTorch, a
    reflection must be shorter than its dim and a circular pad wrap at most once (NumPy
    would reflect or wrap again)."""
    sizes = x.shape[x.ndim - len(pads) - 1 : -1]
    for n, (before, after) in zip(sizes, pads, strict=True):
        if not isinstance(n, int):  # (a symbolic size: checked by the pad itself)
            continue
        if (mode == "reflect" and max(before, after) >= n) or (
            mode == "circular" and max(before, after) > n
        ):
            limit = "less than" if mode == "reflect" else "at most"
            raise ValueError(
                f"{layer}: padding_mode={mode!r} pads {max(before, after)} along a spatial dim "
                f"of size {n} (input of shape {x.shape}); the padding must be {limit} the "
                "dim's size"
            )
    lead = ((0, 0),) * (x.ndim - len(pads) - 1)
    return view.pad(x, lead + tuple(pads) + ((0, 0),), _PADDING_MODES[mode])


class Conv2d(Module):
    """2-D convolution over NHWC images with an HWIO filter ``(KH, KW, in / groups, out)``.

    Args:
        in_channels: channels of the input (last axis).
        out_channels: channels of the output.
        kernel_size: int or ``(KH, KW)``.
        stride: int or pair (default 1).
        padding: int, pair, pairs of pairs, ``"SAME"`` (stride 1, as PyTorch) or
            ``"VALID"`` (default 0).
        dilation: int or pair (default 1).
        groups: channel groups (default 1).
        bias: whether to add a learned bias (default True).
        padding_mode: ``"zeros"`` (default), ``"reflect"``, ``"replicate"`` or
            ``"circular"``, as PyTorch (the last three take int padding).
        key: optional RNG key for the initial values.
        dtype: parameter dtype (default: the default dtype).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        key=None,
        dtype=None,
    ):
        super().__init__()
        channels = _ConvChannels(in_channels, out_channels, groups)
        self.kernel_size = _check_conv_layer("Conv2d", channels, kernel_size, 2)
        if isinstance(padding, str):
            if padding.lower() not in ("same", "valid"):
                raise ValueError(
                    f"Conv2d: padding must be an int, pairs, 'same' or 'valid', got {padding!r}"
                )
            if padding.lower() == "same" and stride not in (1, (1, 1)):  # (PyTorch's rule)
                raise ValueError(f"Conv2d: padding='same' needs stride 1, got stride={stride!r}")
        elif isinstance(padding, int) and padding < 0:
            raise ValueError(f"Conv2d: padding must be >= 0, got {padding}")
        self.padding_mode = padding_mode
        self._mode_pads = _padding_mode(
            "Conv2d", padding_mode, padding, 2, self.kernel_size, dilation
        )
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.stride, self.dilation, self.groups = stride, dilation, int(groups)
        self.padding = padding if isinstance(padding, str | int) else tuple(padding)
        kw, kb = _keys(key, 2)
        shape = self.kernel_size + (in_channels // groups, out_channels)
        fan_in, _ = init.calculate_fans(shape)
        bound = 1.0 / math.sqrt(fan_in)
        self.weight = init.uniform(shape, -bound, bound, kw, dtype)
        self.bias = init.uniform((out_channels,), -bound, bound, kb, dtype) if bias else None

    def forward(self, x):
        """Convolve ``x`` of shape ``(N, H, W, in_channels)``.

        Args:
            x: the input images (or one unbatched ``(H, W, in_channels)`` image, as
                PyTorch takes ``(C, H, W)``).

        Returns:
            ``(N, OH, OW, out_channels)`` (``(OH, OW, out_channels)`` for one image).

        Raises:
            ValueError: if ``x`` is not 3-D or 4-D with ``in_channels`` channels.
        """
        x = as_tensor(x, op="Conv2d")
        if x.ndim not in (3, 4) or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"Conv2d({self.extra_repr()}): input of shape {x.shape} is not "
                f"(N, H, W, {self.in_channels}) (images are NHWC)"
            )
        if x.ndim == 3:
            return self.forward(x[None])[0]
        padding = self.padding
        if self._mode_pads is not None:
            x, padding = _pad_spatial(type(self).__name__, x, self._mode_pads, self.padding_mode), 0
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding!r}"
            + ("" if self.padding_mode == "zeros" else f", padding_mode={self.padding_mode!r}")
        )


def _conv_weight(layer, key, shape, bias, dtype):
    """PyTorch's default conv initialization: weight and bias uniform in
    ``±1 / sqrt(fan_in)``. ``shape`` is in PyTorch's layout, so the fan-in is the product
    of every dim but the first; the bias has ``layer.out_channels`` entries."""
    kw, kb = _keys(key, 2)
    bound = 1.0 / math.sqrt(math.prod(shape[1:]))
    layer.weight = init.uniform(shape, -bound, bound, kw, dtype)  # (PyTorch's layout)
    layer.bias = init.uniform((layer.out_channels,), -bound, bound, kb, dtype) if bias else None


class _ConvChannels(NamedTuple):
    """A conv layer's channel counts and groups: checked together, since both counts
    must divide by the groups."""

    in_channels: int
    out_channels: int
    groups: int


def _check_conv_layer(layer, channels: _ConvChannels, kernel_size, n) -> tuple:
    """The kernel size as ``n`` ints, after checking the channel counts and groups."""
    in_channels, out_channels, groups = channels
    _check_sizes(layer, in_channels=in_channels, out_channels=out_channels, groups=groups)
    ks = (kernel_size,) * n if isinstance(kernel_size, numbers.Integral) else kernel_size
    if not isinstance(ks, tuple | list) or len(ks) != n:
        raise ValueError(f"{layer}: kernel_size must be an int or {n} ints, got {kernel_size!r}")
    for k in ks:
        _check_sizes(layer, kernel_size=k)
    if in_channels % groups or out_channels % groups:
        raise ValueError(
            f"{layer}: in_channels={in_channels} and out_channels={out_channels} must be "
            f"divisible by groups={groups}"
        )
    return tuple(int(k) for k in ks)


class Conv1d(Module):
    """1-D convolution over sequences ``(N, L, C)`` (channels last, as every Nabla layer).

    The weight has PyTorch's layout and name, ``weight`` ``(out_channels, in_channels /
    groups, kernel_size)`` and ``bias`` ``(out_channels,)``, so a ``torch.nn.Conv1d``
    state_dict loads as it is; both start uniform in ``±1 / sqrt(in / groups * K)``.

    Args:
        in_channels: channels of the input (last axis).
        out_channels: channels of the output.
        kernel_size: int (or a 1-tuple).
        stride: int (default 1).
        padding: int, ``"same"`` (stride 1 only) or ``"valid"`` (default 0).
        dilation: int: spacing between filter taps (default 1).
        groups: channel groups (default 1).
        bias: whether to add a learned bias (default True).
        padding_mode: ``"zeros"`` (default), ``"reflect"``, ``"replicate"`` or
            ``"circular"``, as PyTorch (the last three take int padding).
        key: optional RNG key for the initial values.
        dtype: parameter dtype (default: the default dtype).
    """

    def _in_pytorch_layout(self, name: str) -> bool:
        return name == "weight"  # (PyTorch's layout: nn.init takes its fans)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        key=None,
        dtype=None,
    ):
        super().__init__()
        channels = _ConvChannels(in_channels, out_channels, groups)
        (k,) = _check_conv_layer("Conv1d", channels, kernel_size, 1)
        if isinstance(padding, str):  # (checked here, as PyTorch, not at the first call)
            if padding.lower() not in ("same", "valid"):
                raise ValueError(
                    f"Conv1d: padding must be an int, 'same' or 'valid', got {padding!r}"
                )
        else:
            F._conv_int("Conv1d", "padding", padding, 1, 0)
        F._conv_int("Conv1d", "stride", stride, 1, 1)
        F._conv_int("Conv1d", "dilation", dilation, 1, 1)
        self.padding_mode = padding_mode
        self._mode_pads = _padding_mode("Conv1d", padding_mode, padding, 1, (k,), dilation)
        if isinstance(padding, str) and padding.lower() == "same" and stride not in (1, (1,)):
            raise ValueError(f"Conv1d: padding='same' needs stride 1, got stride={stride!r}")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size, self.groups = (k,), int(groups)
        self.stride, self.padding, self.dilation = stride, padding, dilation
        _conv_weight(self, key, (out_channels, in_channels // groups, k), bias, dtype)

    def forward(self, x):
        """Convolve ``x`` of shape ``(N, L, in_channels)`` (or ``(L, in_channels)``).

        Args:
            x: the input sequences.

        Returns:
            ``(N, L_out, out_channels)``.

        Raises:
            ValueError: if ``x`` is not ``(N, L, in_channels)`` or ``(L, in_channels)``.
        """
        x = as_tensor(x, op="Conv1d")
        if x.ndim not in (2, 3) or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"Conv1d({self.extra_repr()}): input of shape {x.shape} is not "
                f"(N, L, {self.in_channels}) (sequences are channels last)"
            )
        padding = self.padding
        if self._mode_pads is not None:
            x, padding = _pad_spatial(type(self).__name__, x, self._mode_pads, self.padding_mode), 0
        return F.conv1d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding!r}"
            + ("" if self.padding_mode == "zeros" else f", padding_mode={self.padding_mode!r}")
        )


class _ConvTranspose(Module):
    """What the transposed convolutions share: PyTorch's constructor, weight layout
    ``(in_channels, out_channels / groups, *kernel)`` and initialization, and the output
    padding that reaches an ``output_size``. ``spatial``: the number of spatial dims."""

    spatial = 0

    def _in_pytorch_layout(self, name: str) -> bool:
        return name == "weight"  # (PyTorch's layout: nn.init takes its fans)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        key=None,
        dtype=None,
    ):
        super().__init__()
        channels = _ConvChannels(in_channels, out_channels, groups)
        name, n = type(self).__name__, self.spatial
        if padding_mode != "zeros":  # (PyTorch's transposed convolutions: the same)
            raise ValueError(
                f"{name}: only padding_mode='zeros' is supported, got {padding_mode!r}"
            )
        k = _check_conv_layer(name, channels, kernel_size, n)
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size, self.groups = k, int(groups)
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.output_padding = output_padding
        _conv_weight(self, key, (in_channels, out_channels // groups) + k, bias, dtype)

    def _padding_for(self, spatial_in, output_size) -> tuple:
        """The output padding that makes the spatial output ``output_size`` (the spatial
        sizes alone, or the whole channels-last shape)."""
        n = self.spatial
        op = f"{type(self).__name__}({self.extra_repr()})"
        size = F.spatial_output_size(op, output_size, n, self.out_channels)

        s, p, d = (_per_dim(v, n) for v in (self.stride, self.padding, self.dilation))
        pads = []
        for i in range(n):
            least = (spatial_in[i] - 1) * s[i] - 2 * p[i] + d[i] * (self.kernel_size[i] - 1) + 1
            extra = size[i] - least
            if not 0 <= extra < max(s[i], d[i]):
                raise ValueError(
                    f"{type(self).__name__}({self.extra_repr()}): output_size {output_size!r} "
                    f"cannot be reached from input spatial size {tuple(spatial_in)} (it must be "
                    f"{least} to {least + max(s[i], d[i]) - 1} along dim {i})"
                )
            pads.append(extra)
        return tuple(pads)


class ConvTranspose3d(_ConvTranspose):
    """Transposed 3-D convolution over volumes ``(N, D, H, W, C)`` (upsampling by
    ``stride``; :func:`nabla.nn.functional.conv_transpose3d`).

    The weight has PyTorch's layout and name, ``weight`` ``(in_channels, out_channels /
    groups, KD, KH, KW)`` and ``bias`` ``(out_channels,)``, so a
    ``torch.nn.ConvTranspose3d`` state_dict loads as it is; both start uniform in ``±1 /
    sqrt(out / groups * KD * KH * KW)`` (PyTorch's fan-in for this layout).

    Args:
        in_channels: channels of the input (last axis).
        out_channels: channels of the output.
        kernel_size: int or 3 ints.
        stride: int or 3 ints (default 1).
        padding: int or 3 ints: removed from each side of the full output (default 0).
        output_padding: int or 3 ints: added at the end of each dim (default 0).
        groups: channel groups (default 1).
        bias: whether to add a learned bias (default True).
        dilation: int or 3 ints (default 1).
        padding_mode: ``"zeros"`` only, PyTorch's only value for a transposed
            convolution.
        key: optional RNG key for the initial values.
        dtype: parameter dtype (default: the default dtype).
    """

    spatial = 3

    def forward(self, x, output_size=None):
        """Apply the layer to ``x`` of shape ``(N, D, H, W, in_channels)``.

        Args:
            x: the input volumes (or one unbatched ``(D, H, W, in_channels)``).
            output_size: optional ``(OD, OH, OW)``, or the whole channels-last shape
                (``skip.shape``):
                the output padding is chosen to reach it, as PyTorch's ``output_size``.

        Returns:
            ``(N, OD, OH, OW, out_channels)``.

        Raises:
            ValueError: if ``x`` is not channels-last with ``in_channels`` channels, or no
                output padding reaches ``output_size``.
        """
        x = as_tensor(x, op="ConvTranspose3d")
        if x.ndim not in (4, 5) or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"ConvTranspose3d({self.extra_repr()}): input of shape {x.shape} is not "
                f"(N, D, H, W, {self.in_channels}) (volumes are channels last)"
            )
        output_padding = self.output_padding
        if output_size is not None:
            output_padding = self._padding_for(x.shape[-4:-1], output_size)
        return F.conv_transpose3d(
            x,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            output_padding,
            self.groups,
            self.dilation,
        )

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}"
        )


class Conv3d(Module):
    """3-D convolution over volumes ``(N, D, H, W, C)`` (channels last, as every Nabla
    layer; :func:`nabla.nn.functional.conv3d`).

    The weight has PyTorch's layout and name, ``weight`` ``(out_channels, in_channels /
    groups, KD, KH, KW)`` and ``bias`` ``(out_channels,)``, so a ``torch.nn.Conv3d``
    state_dict loads as it is; both start uniform in ``±1 / sqrt(in / groups * KD * KH *
    KW)``.

    Args:
        in_channels: channels of the input (last axis).
        out_channels: channels of the output.
        kernel_size: int or 3 ints.
        stride: int or 3 ints (default 1).
        padding: int, 3 ints, ``"same"`` (stride 1 only) or ``"valid"`` (default 0).
        dilation: int or 3 ints: spacing between filter taps (default 1).
        groups: channel groups (default 1).
        bias: whether to add a learned bias (default True).
        padding_mode: ``"zeros"`` (default), ``"reflect"``, ``"replicate"`` or
            ``"circular"``, as PyTorch (the last three take int padding).
        key: optional RNG key for the initial values.
        dtype: parameter dtype (default: the default dtype).
    """

    def _in_pytorch_layout(self, name: str) -> bool:
        return name == "weight"  # (PyTorch's layout: nn.init takes its fans)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        key=None,
        dtype=None,
    ):
        super().__init__()
        channels = _ConvChannels(in_channels, out_channels, groups)
        self.kernel_size = _check_conv_layer("Conv3d", channels, kernel_size, 3)
        if isinstance(padding, str):
            if padding.lower() not in ("same", "valid"):
                raise ValueError(
                    f"Conv3d: padding must be an int, 3 ints, 'same' or 'valid', got {padding!r}"
                )
            if padding.lower() == "same" and stride not in (1, (1, 1, 1)):
                raise ValueError(f"Conv3d: padding='same' needs stride 1, got stride={stride!r}")
        self.padding_mode = padding_mode
        self._mode_pads = _padding_mode(
            "Conv3d", padding_mode, padding, 3, self.kernel_size, dilation
        )
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.groups = int(groups)
        self.stride, self.dilation = stride, dilation
        self.padding = padding if isinstance(padding, str | int) else tuple(padding)
        shape = (out_channels, in_channels // groups, *self.kernel_size)
        _conv_weight(self, key, shape, bias, dtype)

    def forward(self, x):
        """Convolve ``x`` of shape ``(N, D, H, W, in_channels)`` (or one unbatched volume
        ``(D, H, W, in_channels)``).

        Args:
            x: the input volumes.

        Returns:
            ``(N, OD, OH, OW, out_channels)``.

        Raises:
            ValueError: if ``x`` is not 4-D or 5-D with ``in_channels`` channels.
        """
        x = as_tensor(x, op="Conv3d")
        if x.ndim not in (4, 5) or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"Conv3d({self.extra_repr()}): input of shape {x.shape} is not "
                f"(N, D, H, W, {self.in_channels}) (volumes are channels last)"
            )
        padding = self.padding
        if self._mode_pads is not None:
            x, padding = _pad_spatial(type(self).__name__, x, self._mode_pads, self.padding_mode), 0
        return F.conv3d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding!r}"
            + ("" if self.padding_mode == "zeros" else f", padding_mode={self.padding_mode!r}")
        )


class ConvTranspose2d(_ConvTranspose):
    """Transposed 2-D convolution over NHWC images (upsampling by ``stride``).

    The weight has PyTorch's layout and name, ``weight`` ``(in_channels, out_channels /
    groups, KH, KW)`` and ``bias`` ``(out_channels,)``, so a ``torch.nn.ConvTranspose2d``
    state_dict loads as it is; both start uniform in ``±1 / sqrt(out / groups * KH * KW)``
    (PyTorch's fan-in for this layout).

    Args:
        in_channels: channels of the input (last axis).
        out_channels: channels of the output.
        kernel_size: int or ``(KH, KW)``.
        stride: int or pair (default 1).
        padding: int or pair: removed from each border of the full output (default 0).
        output_padding: int or pair: added at the bottom/right (default 0; smaller than the
            stride or the dilation).
        groups: channel groups (default 1).
        bias: whether to add a learned bias (default True).
        dilation: int or pair (default 1).
        padding_mode: ``"zeros"`` only, PyTorch's only value for a transposed
            convolution.
        key: optional RNG key for the initial values.
        dtype: parameter dtype (default: the default dtype).
    """

    spatial = 2

    def forward(self, x, output_size=None):
        """Apply the layer to ``x`` of shape ``(N, H, W, in_channels)``.

        Args:
            x: the input images (or one unbatched ``(H, W, in_channels)`` image).
            output_size: optional ``(OH, OW)``, or the whole channels-last shape
                (``skip.shape``):
                the output padding is chosen to reach it, as PyTorch's ``output_size``.

        Returns:
            ``(N, OH, OW, out_channels)``.

        Raises:
            ValueError: if ``x`` is not NHWC with ``in_channels`` channels, or no output
                padding reaches ``output_size``.
        """
        x = as_tensor(x, op="ConvTranspose2d")
        if x.ndim not in (3, 4) or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"ConvTranspose2d({self.extra_repr()}): input of shape {x.shape} is not "
                f"(N, H, W, {self.in_channels}) (images are NHWC)"
            )
        output_padding = self.output_padding
        if output_size is not None:
            output_padding = self._padding_for(x.shape[-3:-1], output_size)
        return F.conv_transpose2d(
            x,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            output_padding,
            self.groups,
            self.dilation,
        )

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding!r}"
        )


class Upsample(Module):
    """Resize channels-last batches (``F.interpolate`` as a layer, PyTorch's ``Upsample``).

    Args:
        size: the output's spatial size (an int or one per spatial dim).
        scale_factor: the spatial multiplier (a number or one per spatial dim); exactly one
            of ``size`` and ``scale_factor``.
        mode: ``"nearest"`` (default), ``"nearest-exact"``, ``"linear"``, ``"bilinear"``
            or ``"trilinear"``.
        align_corners: linear modes only (see ``F.interpolate``; default None: False).
        recompute_scale_factor: sample with ``in / out`` instead of ``1 / scale_factor``.
    """

    def __init__(
        self,
        size=None,
        scale_factor=None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ):
        super().__init__()
        if (size is None) == (scale_factor is None):
            raise ValueError(
                f"Upsample: pass exactly one of size and scale_factor, got size={size!r} and "
                f"scale_factor={scale_factor!r}"
            )
        if mode not in F._INTERP_MODES:
            raise ValueError(
                f"Upsample: mode must be one of {sorted(F._INTERP_MODES)}, got {mode!r}"
            )
        if align_corners is not None and F._INTERP_MODES[mode] is None:
            raise ValueError(
                f"Upsample: align_corners can only be set with a linear mode, not mode={mode!r}"
            )
        self.size = tuple(size) if isinstance(size, list) else size
        self.scale_factor = tuple(scale_factor) if isinstance(scale_factor, list) else scale_factor
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x):
        """Resize ``x``.

        Args:
            x: ``(N, L, C)``, ``(N, H, W, C)`` or ``(N, D, H, W, C)``.

        Returns:
            ``x`` with its spatial dims resized.
        """
        return F.interpolate(
            x,
            self.size,
            self.scale_factor,
            self.mode,
            self.align_corners,
            self.recompute_scale_factor,
        )

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        which = (
            f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        )
        return f"{which}, mode={self.mode!r}"


class _Pool(Module):
    fn = None
    # the functional's further arguments, in PyTorch's positional order: name -> default
    options: dict = {}

    def __init__(self, kernel_size, stride=None, padding=0, *more, **options):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        who = type(self).__name__
        if len(more) > len(self.options):
            raise TypeError(
                f"{who}: takes at most {3 + len(self.options)} positional arguments "
                f"(kernel_size, stride, padding, {', '.join(self.options)}), got {3 + len(more)}"
            )
        for name, value in zip(self.options, more):  # PyTorch's positional order
            if name in options:
                raise TypeError(f"{who}: got multiple values for argument {name!r}")
            options[name] = value
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise TypeError(f"{who}: unexpected argument(s) {unknown}")
        for name, default in self.options.items():
            setattr(self, name, options.get(name, default))
        self._check_padding()

    def _check_padding(self) -> None:
        """PyTorch's rule: an int (or pair) padding is at most half the window it pads for
        (a larger one makes whole windows of padding: ``-inf`` or 0 rows)."""
        if isinstance(self.padding, str) or not isinstance(self.kernel_size, int | tuple | list):
            return
        kernel = _pair(self.kernel_size)
        dilation = _pair(getattr(self, "dilation", 1))
        padding = _pair(self.padding)
        if len(padding) != 2 or not all(isinstance(v, int) for v in padding):
            return  # ((top, bottom), (left, right)) pairs: the functional checks those
        for k, d, pad in zip(kernel, dilation, padding, strict=True):
            if pad > ((k - 1) * d + 1) // 2:
                raise ValueError(
                    f"{type(self).__name__}: padding {self.padding} is more than half of the "
                    f"window {tuple(kernel)} (dilation {tuple(dilation)}): pad should be at "
                    "most half of the effective kernel size, as in PyTorch"
                )

    def forward(self, x):
        """Pool ``x`` of shape ``(N, H, W, C)`` (or one image ``(H, W, C)``).

        Args:
            x: the input images.

        Returns:
            The pooled images.
        """
        options = {name: getattr(self, name) for name in self.options}
        x = as_tensor(x, op=type(self).__name__)
        if x.ndim == 3:  # one unbatched image (H, W, C), as PyTorch takes (C, H, W)
            return type(self).fn(x[None], self.kernel_size, self.stride, self.padding, **options)[0]
        return type(self).fn(x, self.kernel_size, self.stride, self.padding, **options)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        options = "".join(f", {name}={getattr(self, name)}" for name in self.options)
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
            + options
        )


class MaxPool2d(_Pool):
    """Max over windows of NHWC images (stride defaults to the kernel size).

    Args:
        kernel_size: int or pair.
        stride: int or pair (default: ``kernel_size``).
        padding: int or pair (default 0).
        dilation: int or pair: spacing between window elements (default 1).
        ceil_mode: round the output size up, as PyTorch (default False).

    The arguments are PyTorch's, in its positional order: ``return_indices=True`` also
    returns each maximum's flat index ``h * W + w``, for :class:`MaxUnpool2d`.
    """

    fn = staticmethod(F.max_pool2d)
    options = {"dilation": 1, "return_indices": False, "ceil_mode": False}


class AvgPool2d(_Pool):
    """Mean over windows of NHWC images (stride defaults to the kernel size).

    Args:
        kernel_size: int or pair.
        stride: int or pair (default: ``kernel_size``).
        padding: int or pair (default 0).
        ceil_mode: round the output size up, as PyTorch (default False).
        count_include_pad: divide by the whole window, padding included (default True, as
            PyTorch); False: by the input elements in it.
        divisor_override: a positive int that divides every window's sum instead.

    The arguments are PyTorch's, in its positional order.
    """

    fn = staticmethod(F.avg_pool2d)
    options = {"ceil_mode": False, "count_include_pad": True, "divisor_override": None}


class AdaptiveAvgPool2d(Module):
    """Mean over PyTorch's adaptive windows of NHWC images, to a fixed output size
    (``AdaptiveAvgPool2d(1)``: global average pooling).

    Args:
        output_size: ``OH`` (square) or ``(OH, OW)``; None in the pair keeps that size.
    """

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size if isinstance(output_size, int) else tuple(output_size)

    def forward(self, x):
        """Pool ``x`` of shape ``(N, H, W, C)`` to ``(N, OH, OW, C)``.

        Args:
            x: the input images.

        Returns:
            The pooled images.
        """
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"output_size={self.output_size}"


class ConvTranspose1d(_ConvTranspose):
    """Transposed 1-D convolution over sequences ``(N, L, C)`` (channels last): PyTorch's
    ``ConvTranspose1d``, its weight layout and name ``weight`` ``(in_channels, out_channels
    / groups, K)`` (a ``torch.nn.ConvTranspose1d`` state_dict loads as it is) and its
    initialization.

    Args:
        in_channels: channels of the input (last axis).
        out_channels: channels of the output.
        kernel_size: an int.
        stride: int (default 1).
        padding: int (default 0).
        output_padding: int (default 0; smaller than the stride or the dilation).
        groups: channel groups (default 1).
        bias: whether to add a learned bias (default True).
        dilation: int (default 1).
        padding_mode: ``"zeros"`` only, PyTorch's only value for a transposed
            convolution.
        key: optional RNG key for the initial values.
        dtype: parameter dtype (default: the default dtype).
    """

    spatial = 1

    def forward(self, x, output_size=None):
        """Apply the layer to ``x`` of shape ``(N, L, in_channels)`` (or ``(L,
        in_channels)``).

        Args:
            x: the input sequences.
            output_size: optional ``OL`` (an int or ``(OL,)``), or the whole channels-last
                shape: the output padding is chosen to reach it, as PyTorch's.

        Returns:
            ``(N, OL, out_channels)``.
        """
        output_padding = self.output_padding
        if output_size is not None:
            x = as_tensor(x, op="ConvTranspose1d")
            output_padding = self._padding_for(x.shape[-2:-1], output_size)
        return F.conv_transpose1d(
            x,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            output_padding,
            self.groups,
            self.dilation,
        )

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )


class EmbeddingBag(Module):
    """PyTorch's ``EmbeddingBag``: the sum, mean or max of bags of a table's rows
    (:func:`nabla.nn.functional.embedding_bag`), the table ``weight`` ``(num_embeddings,
    embedding_dim)`` standard normal at the start, as PyTorch's.

    Args:
        num_embeddings: number of rows.
        embedding_dim: size of each row.
        max_norm: must be None.
        norm_type: accepted.
        scale_grad_by_freq: must be False.
        mode: ``"sum"``, ``"mean"`` (default) or ``"max"``.
        sparse: accepted.
        _weight: an initial table (PyTorch's).
        include_last_offset: ``offsets`` end with the end of the last bag.
        padding_idx: a row left out of the bags (starts as zeros).
        key: optional RNG key for the initial values.
        dtype: parameter dtype (default: the default dtype).
    """

    def _in_pytorch_layout(self, name: str) -> bool:
        return name == "weight"  # (num, dim): PyTorch's fans for nn.init

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm=None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight=None,
        include_last_offset: bool = False,
        padding_idx=None,
        *,
        key=None,
        dtype=None,
    ):
        super().__init__()
        _check_sizes("EmbeddingBag", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBag: mode must be sum, mean or max, got {mode!r}")
        if max_norm is not None or scale_grad_by_freq:
            raise NotImplementedError(
                "EmbeddingBag: max_norm and scale_grad_by_freq are not supported"
            )
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.mode, self.include_last_offset = mode, bool(include_last_offset)
        self.padding_idx = None if padding_idx is None else int(padding_idx) % self.num_embeddings
        if _weight is not None:
            weight = as_tensor(_weight, op="EmbeddingBag")
        else:
            weight = init.normal((num_embeddings, embedding_dim), 0.0, 1.0, key, dtype)
            if self.padding_idx is not None:
                weight = weight.at[self.padding_idx].set(0.0)
        self.weight = weight

    def forward(self, input, offsets=None, per_sample_weights=None):  # noqa: A002
        """The bags' sums, means or maxima.

        Args:
            input: integer indices ``(B, N)``, or ``(L,)`` with ``offsets``.
            offsets: the bags' starts in a 1-D ``input``.
            per_sample_weights: weights of ``input``'s shape (``mode="sum"``).

        Returns:
            ``(B, embedding_dim)``.
        """
        return F.embedding_bag(
            input,
            self.weight,
            offsets,
            mode=self.mode,
            per_sample_weights=per_sample_weights,
            include_last_offset=self.include_last_offset,
            padding_idx=self.padding_idx,
        )

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"


class _Pool1d(_Pool):
    """A pool over sequences ``(N, L, C)`` (channels last, or one ``(L, C)``): int sizes."""

    def _check_padding(self) -> None:
        sizes = [self.kernel_size, self.padding, getattr(self, "dilation", 1)]
        k, pad, d = (v[0] if isinstance(v, tuple | list) and len(v) == 1 else v for v in sizes)
        if isinstance(k, int) and isinstance(pad, int) and pad > ((k - 1) * d + 1) // 2:
            raise ValueError(
                f"{type(self).__name__}: padding {self.padding} is more than half of the "
                f"window {k} (dilation {d}): pad should be at most half of the effective "
                "kernel size, as in PyTorch"
            )

    def forward(self, x):
        """Pool ``x`` of shape ``(N, L, C)`` (or one sequence ``(L, C)``).

        Args:
            x: the input sequences.

        Returns:
            The pooled sequences.
        """
        options = {name: getattr(self, name) for name in self.options}
        return type(self).fn(x, self.kernel_size, self.stride, self.padding, **options)


class MaxPool1d(_Pool1d):
    """Max over windows of sequences ``(N, L, C)`` (PyTorch's ``MaxPool1d``, channels last).

    Args:
        kernel_size: an int.
        stride: an int (default: ``kernel_size``).
        padding: an int (default 0).
        dilation: spacing between window elements (default 1).
        return_indices: also return where each maximum is (for :class:`MaxUnpool1d`).
        ceil_mode: round the output length up (default False).
    """

    fn = staticmethod(F.max_pool1d)
    options = {"dilation": 1, "return_indices": False, "ceil_mode": False}


class FractionalMaxPool2d(Module):
    """PyTorch's ``FractionalMaxPool2d`` on NHWC images
    (:func:`nabla.nn.functional.fractional_max_pool2d`): max over windows whose starts step
    pseudo-randomly, new steps at every call.

    Args:
        kernel_size: int or pair.
        output_size: int or pair ``(OH, OW)``; or give ``output_ratio``.
        output_ratio: float or pair in ``(0, 1)``.
        return_indices: also return each maximum's ``h * W + w``.
        _random_samples: PyTorch's ``(N, C, 2)`` samples fixing the windows.
    """

    def __init__(
        self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
        _random_samples=None,
    ):  # fmt: skip
        super().__init__()
        if (output_size is None) == (output_ratio is None):
            raise ValueError("FractionalMaxPool2d: give one of output_size and output_ratio")
        self.kernel_size, self.output_size = kernel_size, output_size
        self.output_ratio, self.return_indices = output_ratio, bool(return_indices)
        self._random_samples = _random_samples

    def forward(self, x):
        """Pool ``x``.

        Args:
            x: ``(N, H, W, C)`` or ``(H, W, C)``.

        Returns:
            The pooled input; with ``return_indices``, ``(values, indices)``.
        """
        return F.fractional_max_pool2d(
            x, self.kernel_size, self.output_size, self.output_ratio, self.return_indices,
            self._random_samples,
        )  # fmt: skip

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        size = (
            f"output_size={self.output_size}"
            if self.output_size is not None
            else f"output_ratio={self.output_ratio}"
        )
        return f"kernel_size={self.kernel_size}, {size}"


class MaxUnpool2d(Module):
    """PyTorch's ``MaxUnpool2d`` on NHWC: the values of a :class:`MaxPool2d` with
    ``return_indices=True`` put back at their positions, zeros elsewhere
    (:func:`nabla.nn.functional.max_unpool2d`).

    Args:
        kernel_size: int or pair.
        stride: int or pair (default: ``kernel_size``).
        padding: int or pair (default 0).
    """

    fn = staticmethod(F.max_unpool2d)

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, input, indices, output_size=None):  # noqa: A002 - PyTorch name
        """Unpool.

        Args:
            input: the pooled values.
            indices: their indices, from the pooling.
            output_size: the unpooled spatial size (default: from the window).

        Returns:
            The unpooled input.
        """
        return type(self).fn(
            input, indices, self.kernel_size, self.stride, self.padding, output_size
        )

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(MaxUnpool2d):
    """PyTorch's ``MaxUnpool1d`` over sequences ``(N, L, C)``
    (:func:`nabla.nn.functional.max_unpool1d`).

    Args:
        kernel_size: an int.
        stride: an int (default: ``kernel_size``).
        padding: an int (default 0).
    """

    fn = staticmethod(F.max_unpool1d)


class AvgPool1d(_Pool1d):
    """Mean over windows of sequences ``(N, L, C)`` (PyTorch's ``AvgPool1d``, channels
    last).

    Args:
        kernel_size: an int.
        stride: an int (default: ``kernel_size``).
        padding: an int (default 0).
        ceil_mode: round the output length up (default False).
        count_include_pad: divide by the whole window, padding included (default True).
    """

    fn = staticmethod(F.avg_pool1d)
    options = {"ceil_mode": False, "count_include_pad": True}


class _Pool3d(_Pool):
    """A pool over volumes ``(N, D, H, W, C)`` (channels last, or one ``(D, H, W, C)``)."""

    def _check_padding(self) -> None:
        k, pad = _per_dim(self.kernel_size, 3), _per_dim(self.padding, 3)
        d = _per_dim(getattr(self, "dilation", 1), 3)
        if len(k) == len(pad) == len(d) == 3 and any(
            p > ((a - 1) * b + 1) // 2 for a, p, b in zip(k, pad, d)
        ):
            raise ValueError(
                f"{type(self).__name__}: padding {self.padding} is more than half of the "
                f"window {k} (dilation {d}): pad should be at most half of the effective "
                "kernel size, as in PyTorch"
            )

    def forward(self, x):
        """Pool ``x`` of shape ``(N, D, H, W, C)`` (or one volume ``(D, H, W, C)``).

        Args:
            x: the input volumes.

        Returns:
            The pooled volumes.
        """
        options = {name: getattr(self, name) for name in self.options}
        return type(self).fn(x, self.kernel_size, self.stride, self.padding, **options)


class MaxPool3d(_Pool3d):
    """Max over windows of volumes ``(N, D, H, W, C)`` (PyTorch's ``MaxPool3d``, channels
    last; :func:`nabla.nn.functional.max_pool3d`).

    Args:
        kernel_size: int or 3 ints.
        stride: int or 3 ints (default: ``kernel_size``).
        padding: int or 3 ints (default 0), at most half the window.
        dilation: spacing between window elements (default 1).
        ceil_mode: round the output sizes up (default False).
    """

    fn = staticmethod(F.max_pool3d)
    options = {"dilation": 1, "ceil_mode": False}


class AvgPool3d(_Pool3d):
    """Mean over windows of volumes ``(N, D, H, W, C)`` (PyTorch's ``AvgPool3d``, channels
    last; :func:`nabla.nn.functional.avg_pool3d`).

    Args:
        kernel_size: int or 3 ints.
        stride: int or 3 ints (default: ``kernel_size``).
        padding: int or 3 ints (default 0), at most half the window.
        ceil_mode: round the output sizes up (default False).
        count_include_pad: divide by the whole window, padding included (default True).
        divisor_override: a positive int that divides every window's sum instead.
    """

    fn = staticmethod(F.avg_pool3d)
    options = {"ceil_mode": False, "count_include_pad": True, "divisor_override": None}


class LPPool2d(Module):
    """PyTorch's ``LPPool2d`` on NHWC images (:func:`nabla.nn.functional.lp_pool2d`).

    Args:
        norm_type: ``p``.
        kernel_size: int or pair.
        stride: int or pair (default: ``kernel_size``).
        ceil_mode: round the output size up (default False).
    """

    fn = staticmethod(F.lp_pool2d)

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size = float(norm_type), kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def forward(self, x):
        """Pool ``x``.

        Args:
            x: the input, channels last.

        Returns:
            The pooled input.
        """
        return type(self).fn(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, ceil_mode={self.ceil_mode}"
        )


class LPPool1d(LPPool2d):
    """PyTorch's ``LPPool1d`` over sequences ``(N, L, C)``
    (:func:`nabla.nn.functional.lp_pool1d`).

    Args:
        norm_type: ``p``.
        kernel_size: an int.
        stride: an int (default: ``kernel_size``).
        ceil_mode: round the output length up (default False).
    """

    fn = staticmethod(F.lp_pool1d)


class _Adaptive(Module):
    fn = None

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size if isinstance(output_size, int) else tuple(output_size)

    def forward(self, x):
        """Pool ``x`` (channels last) to ``output_size``.

        Args:
            x: the input.

        Returns:
            The pooled input.
        """
        return type(self).fn(x, self.output_size)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"output_size={self.output_size}"


class _AdaptiveMax(_Adaptive):
    def __init__(self, output_size, return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = bool(return_indices)

    def forward(self, x):
        """Pool ``x`` (channels last) to ``output_size``.

        Args:
            x: the input.

        Returns:
            The pooled input; with ``return_indices``, ``(values, indices)``.
        """
        return type(self).fn(x, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptiveMax):
    """Max over PyTorch's adaptive windows of NHWC images, to a fixed output size.

    Args:
        output_size: ``OH`` (square) or ``(OH, OW)``; None in the pair keeps that size.
        return_indices: also return each maximum's ``h * W + w`` (for ``MaxUnpool2d``).
    """

    fn = staticmethod(F.adaptive_max_pool2d)


class AdaptiveAvgPool3d(_Adaptive):
    """Mean over PyTorch's adaptive windows of volumes ``(N, D, H, W, C)``, to a fixed
    output size (:func:`nabla.nn.functional.adaptive_avg_pool3d`).

    Args:
        output_size: an int or ``(OD, OH, OW)``; None in it keeps that size.
    """

    fn = staticmethod(F.adaptive_avg_pool3d)


class AdaptiveMaxPool3d(_Adaptive):
    """Max over PyTorch's adaptive windows of volumes ``(N, D, H, W, C)``, to a fixed
    output size (:func:`nabla.nn.functional.adaptive_max_pool3d`).

    Args:
        output_size: an int or ``(OD, OH, OW)``; None in it keeps that size.
    """

    fn = staticmethod(F.adaptive_max_pool3d)


class AdaptiveAvgPool1d(_Adaptive):
    """Mean over PyTorch's adaptive windows of sequences ``(N, L, C)``, to a fixed length.

    Args:
        output_size: the output length.
    """

    fn = staticmethod(F.adaptive_avg_pool1d)


class AdaptiveMaxPool1d(_AdaptiveMax):
    """Max over PyTorch's adaptive windows of sequences ``(N, L, C)``, to a fixed length.

    Args:
        output_size: the output length.
        return_indices: also return each maximum's position (for ``MaxUnpool1d``).
    """

    fn = staticmethod(F.adaptive_max_pool1d)


class PixelShuffle(Module):
    """PyTorch's ``PixelShuffle`` on NHWC images: ``(N, H, W, C r^2)`` to ``(N, H r, W r,
    C)`` (:func:`nabla.nn.functional.pixel_shuffle`).

    Args:
        upscale_factor: ``r``.
    """

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = int(upscale_factor)

    def forward(self, x):
        """Rearrange ``x``'s channels into space.

        Args:
            x: ``(N, H, W, C r^2)``.

        Returns:
            ``(N, H r, W r, C)``.
        """
        return F.pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """PyTorch's ``PixelUnshuffle`` on NHWC images, the inverse of :class:`PixelShuffle`.

    Args:
        downscale_factor: ``r``.
    """

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = int(downscale_factor)

    def forward(self, x):
        """Rearrange ``x``'s space into channels.

        Args:
            x: ``(N, H r, W r, C)``.

        Returns:
            ``(N, H, W, C r^2)``.
        """
        return F.pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"downscale_factor={self.downscale_factor}"


class Unfold(Module):
    """PyTorch's ``Unfold`` on channels-last images: each sliding block flattened,
    ``(N, H, W, C)`` to ``(N, L, C * KH * KW)`` (:func:`nabla.nn.functional.unfold`).

    Args:
        kernel_size: int or pair: the block's size.
        dilation: int or pair: the spacing of the block's taps (default 1).
        padding: int or pair: zeros added on both sides of H and W (default 0).
        stride: int or pair: the step between blocks (default 1).
    """

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, x):
        """The blocks of ``x``.

        Args:
            x: ``(N, H, W, C)`` or ``(H, W, C)``.

        Returns:
            ``(N, L, C * KH * KW)`` (or ``(L, C * KH * KW)``).
        """
        return F.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
            f"padding={self.padding}, stride={self.stride}"
        )


class Fold(Module):
    """PyTorch's ``Fold`` to channels-last images, the adjoint of :class:`Unfold`: each
    block added back where ``Unfold`` took it from (:func:`nabla.nn.functional.fold`).

    Args:
        output_size: int or pair: the image's ``(H, W)``.
        kernel_size: int or pair: the block's size.
        dilation: int or pair: the spacing of the block's taps (default 1).
        padding: int or pair: the zero padding cut off (default 0).
        stride: int or pair: the step between blocks (default 1).
    """

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, x):
        """The image the blocks ``x`` add up to.

        Args:
            x: ``(N, L, C * KH * KW)`` or ``(L, C * KH * KW)``.

        Returns:
            ``(N, H, W, C)`` (or ``(H, W, C)``).
        """
        return F.fold(
            x, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride
        )

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
            f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}"
        )


class UpsamplingNearest2d(Upsample):
    """PyTorch's ``UpsamplingNearest2d``: :class:`Upsample` with ``mode="nearest"``.

    Args:
        size: the output's spatial size.
        scale_factor: the spatial multiplier; exactly one of the two.
    """

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """PyTorch's ``UpsamplingBilinear2d``: :class:`Upsample` with ``mode="bilinear"`` and
    ``align_corners=True`` (as PyTorch's).

    Args:
        size: the output's spatial size.
        scale_factor: the spatial multiplier; exactly one of the two.
    """

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class ChannelShuffle(Module):
    """PyTorch's ``ChannelShuffle``, channels last (:func:`nabla.nn.functional.channel_shuffle`).

    Args:
        groups: divides the channels.
    """

    def __init__(self, groups: int):
        super().__init__()
        self.groups = int(groups)

    def forward(self, x):
        """Shuffle ``x``'s channels.

        Args:
            x: ``(..., C)``.

        Returns:
            A tensor like ``x``.
        """
        return F.channel_shuffle(x, self.groups)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"groups={self.groups}"


class CrossMapLRN2d(Module):
    """PyTorch's ``CrossMapLRN2d`` on NHWC images (its legacy local response norm): each
    value divided by ``(k + alpha / size * S)^beta``, ``S`` the sum of squares over the
    channels ``c - (size - 1) // 2`` to ``c + (size - 1) // 2`` and, as PyTorch's running
    sum never drops it, channel 0 for every channel past the window's reach of it.

    Args:
        size: the window (channels).
        alpha: the scale (default 1e-4).
        beta: the exponent (default 0.75).
        k: the additive constant (default 1).
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        if int(size) < 1:
            raise ValueError(f"CrossMapLRN2d: size must be >= 1, got {size!r}")
        self.size, self.alpha, self.beta, self.k = int(size), alpha, beta, k

    def forward(self, x):
        """Normalize ``x`` across neighbouring channels.

        Args:
            x: ``(N, H, W, C)``.

        Returns:
            A tensor like ``x``.
        """
        x = as_tensor(x, op="CrossMapLRN2d")
        if x.ndim != 4:
            raise ValueError(f"CrossMapLRN2d: expected (N, H, W, C), got shape {x.shape}")
        half, c = (self.size - 1) // 2, x.shape[-1]
        sq = x * x
        pads = [(0, 0)] * 3 + [(half + 1, half)]
        run = reduction.cumsum(view.pad(sq, pads), axis=-1)
        total = run[..., 2 * half + 1 :] - run[..., :c]  # channels c - half .. c + half
        beyond = creation.arange(c, dtype="int32") > half  # (channel 0 out of the window)
        total = total + binary.where(beyond, sq[..., :1], 0.0)
        return x / (self.k + self.alpha / self.size * total) ** self.beta

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class LocalResponseNorm(Module):
    """PyTorch's ``LocalResponseNorm``, channels last
    (:func:`nabla.nn.functional.local_response_norm`).

    Args:
        size: the number of channels in a window.
        alpha: the scale of the mean of squares (default 1e-4).
        beta: the exponent (default 0.75).
        k: the additive constant (default 1).
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = int(size), alpha, beta, k

    def forward(self, x):
        """Normalize ``x`` across neighbouring channels.

        Args:
            x: ``(N, ..., C)``.

        Returns:
            A tensor like ``x``.
        """
        return F.local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class Bilinear(Module):
    """PyTorch's ``Bilinear``: ``y = x1^T W x2 + b`` per output feature, with its weight
    layout ``(out, in1, in2)`` and names, so a PyTorch ``state_dict`` loads as it is; both
    start uniform in ``±1 / sqrt(in1)`` (PyTorch's).

    Args:
        in1_features: ``x1``'s features.
        in2_features: ``x2``'s features.
        out_features: the output features.
        bias: whether to add a learned bias (default True).
        key: optional RNG key for the initial values.
        dtype: parameter dtype (default: the default dtype).
    """

    def _in_pytorch_layout(self, name: str) -> bool:
        return name == "weight"

    def __init__(
        self,
        in1_features: int,
        in2_features: int,
        out_features: int,
        bias=True,
        key=None,
        dtype=None,
    ):
        super().__init__()
        _check_sizes(
            "Bilinear",
            in1_features=in1_features,
            in2_features=in2_features,
            out_features=out_features,
        )
        self.in1_features, self.in2_features = int(in1_features), int(in2_features)
        self.out_features = int(out_features)
        kw, kb = _keys(key, 2)
        bound = 1.0 / math.sqrt(self.in1_features)
        shape = (self.out_features, self.in1_features, self.in2_features)
        self.weight = init.uniform(shape, -bound, bound, kw, dtype)
        self.bias = init.uniform((out_features,), -bound, bound, kb, dtype) if bias else None

    def forward(self, x1, x2):
        """``x1^T W x2 + b``.

        Args:
            x1: ``(..., in1_features)``.
            x2: ``(..., in2_features)``.

        Returns:
            ``(..., out_features)``.
        """
        return F.bilinear(x1, x2, self.weight, self.bias)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )


class _Pad(Module):
    """PyTorch's padding modules, channels last: ``padding`` is PyTorch's, ``(left,
    right[, top, bottom])`` for the length (width, height) dims, never the channels."""

    mode = "constant"
    dims = 2

    def __init__(self, padding, value: float | None = None):
        super().__init__()
        n = 2 * self.dims
        pads = (padding,) * n if isinstance(padding, int) else tuple(int(v) for v in padding)
        if len(pads) != n:
            raise ValueError(
                f"{type(self).__name__}: padding must be an int or {n} ints, got {padding!r}"
            )
        self.padding, self.value = pads, value

    def forward(self, x):
        """Pad ``x`` (channels last: ``(N, H, W, C)`` or ``(N, L, C)``).

        Args:
            x: the input.

        Returns:
            The padded input.
        """
        pads = (0, 0) + self.padding  # (the channels, last, untouched)
        if self.mode == "constant":
            return F.pad(x, pads, "constant", 0.0 if self.value is None else self.value)
        return F.pad(x, pads, self.mode)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        value = "" if self.value is None else f", value={self.value}"
        return f"padding={self.padding}{value}"


def _pad_module(name: str, mode: str, dims: int, what: str, constant: bool = False):
    def init(self, padding, value=0.0):
        _Pad.__init__(self, padding, value)

    def init_plain(self, padding):
        _Pad.__init__(self, padding)

    doc = (
        f"PyTorch's ``{name}``, channels last: {what}.\n\n    Args:\n        padding: an int "
        f"or {2 * dims} ints, PyTorch's order (from the last spatial dim outward)."
    )
    if constant:
        doc += "\n        value: the fill (default 0)."
    cls = type(
        name, (_Pad,), {"mode": mode, "dims": dims, "__init__": init if constant else init_plain}
    )
    cls.__doc__ = doc
    cls.__module__ = __name__
    cls.__init__.__doc__ = doc
    return cls


ZeroPad1d = _pad_module("ZeroPad1d", "constant", 1, "zeros around sequences ``(N, L, C)``")
ZeroPad2d = _pad_module("ZeroPad2d", "constant", 2, "zeros around NHWC images")
ConstantPad1d = _pad_module("ConstantPad1d", "constant", 1, "a value around sequences", True)
ConstantPad2d = _pad_module("ConstantPad2d", "constant", 2, "a value around images", True)
ReflectionPad1d = _pad_module("ReflectionPad1d", "reflect", 1, "reflected sequences")
ReflectionPad2d = _pad_module("ReflectionPad2d", "reflect", 2, "reflected images")
ReplicationPad1d = _pad_module("ReplicationPad1d", "replicate", 1, "edge values, sequences")
ReplicationPad2d = _pad_module("ReplicationPad2d", "replicate", 2, "edge values, images")
CircularPad1d = _pad_module("CircularPad1d", "circular", 1, "wrapped sequences")
CircularPad2d = _pad_module("CircularPad2d", "circular", 2, "wrapped images")
ZeroPad3d = _pad_module("ZeroPad3d", "constant", 3, "zeros around volumes ``(N, D, H, W, C)``")
ConstantPad3d = _pad_module("ConstantPad3d", "constant", 3, "a value around volumes", True)
ReflectionPad3d = _pad_module("ReflectionPad3d", "reflect", 3, "reflected volumes")
ReplicationPad3d = _pad_module("ReplicationPad3d", "replicate", 3, "edge values, volumes")
CircularPad3d = _pad_module("CircularPad3d", "circular", 3, "wrapped volumes")


class CosineSimilarity(Module):
    """PyTorch's ``CosineSimilarity`` (:func:`nabla.nn.functional.cosine_similarity`).

    Args:
        dim: the axis of the vectors (default 1).
        eps: the smallest divisor (default 1e-8).
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        """The cosine similarities of ``x1`` and ``x2`` along ``dim``.

        Args:
            x1: the first tensor.
            x2: the second tensor.

        Returns:
            The similarities.
        """
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """PyTorch's ``PairwiseDistance`` (:func:`nabla.nn.functional.pairwise_distance`).

    Args:
        p: the norm's order (default 2).
        eps: added to the differences (default 1e-6).
        keepdim: keep the reduced dim (default False).
    """

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        """The ``p``-norm distances between the rows of ``x1`` and ``x2``.

        Args:
            x1: the first tensor.
            x2: the second tensor.

        Returns:
            The distances.
        """
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class LayerNorm(Module):
    """Layer normalization over the trailing ``normalized_shape`` dims, with a learned scale
    (``weight``, ones) and shift (``bias``, zeros).

    Args:
        normalized_shape: int or tuple.
        eps: added to the variance (default 1e-5).
        elementwise_affine: learn ``weight`` and ``bias`` (default True).
        bias: learn ``bias`` too (default True).
        dtype: parameter dtype (default: the default dtype).
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
            raise ValueError(
                f"LayerNorm: normalized_shape must be positive ints, got {normalized_shape!r}"
            )
        self.normalized_shape, self.eps = tuple(shape), float(eps)
        self.weight = init.ones(shape, dtype) if elementwise_affine else None
        self.bias = init.zeros(shape, dtype) if elementwise_affine and bias else None

    def forward(self, x):
        """Normalize ``x``.

        Args:
            x: a tensor ending with ``normalized_shape``.

        Returns:
            A tensor like ``x``.

        Raises:
            ValueError: if ``x`` does not end with ``normalized_shape``.
        """
        x = _check_trailing(self, x)
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"{self.normalized_shape}, eps={self.eps}"


def _check_trailing(layer, x) -> Tensor:
    """``x`` as a tensor, after checking it ends with the layer's ``normalized_shape``."""
    x = as_tensor(x, op=type(layer).__name__)
    n = len(layer.normalized_shape)
    if x.ndim < n or tuple(x.shape[x.ndim - n :]) != layer.normalized_shape:
        raise ValueError(
            f"{type(layer).__name__}({layer.extra_repr()}): input of shape {x.shape} does not "
            f"end with normalized_shape {layer.normalized_shape}"
        )
    return x


class RMSNorm(Module):
    """RMS normalization over the trailing ``normalized_shape`` dims with a learned scale.

    Args:
        normalized_shape: int or tuple.
        eps: added to the mean square (default None: the machine epsilon of the input's
            dtype, as PyTorch's ``RMSNorm``).
        elementwise_affine: learn the scale ``weight`` (default True); False: none.
        dtype: parameter dtype (default: the default dtype).
    """

    def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(shape)
        self.eps = None if eps is None else float(eps)
        self.weight = init.ones(shape, dtype) if elementwise_affine else None

    def forward(self, x):
        """Normalize ``x``.

        Args:
            x: a tensor ending with ``normalized_shape``.

        Returns:
            A tensor like ``x``.

        Raises:
            ValueError: if ``x`` does not end with ``normalized_shape``.
        """
        x = _check_trailing(self, x)
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"{self.normalized_shape}, eps={self.eps}"


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``embedding_dim``, looked up by index.

    Args:
        num_embeddings: number of rows.
        embedding_dim: size of each row.
        padding_idx: optional row (negative counts from the end) that starts as zeros and
            gets no gradient, as PyTorch's (its third positional argument).
        max_norm: rescale each looked-up row whose norm exceeds it, in the table, in place
            (see :func:`nabla.nn.functional.embedding`).
        norm_type: the norm's order for ``max_norm`` (default 2).
        scale_grad_by_freq: divide each row's gradient by its count in the indices.
        sparse: PyTorch's sparse gradients: accepted (gradients here are dense).
        _weight: PyTorch's initial table, instead of the standard normal one.
        _freeze: keep the table out of training (PyTorch's).
        key: optional RNG key for the initial values (standard normal; keyword only).
        dtype: parameter dtype (default: the default dtype).
        device: where the table lives (default: the default device).

    Raises:
        ValueError: for a ``padding_idx`` out of range.
    """

    def _in_pytorch_layout(self, name: str) -> bool:
        return name == "weight"  # (num, dim): PyTorch's fans for nn.init

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx=None,
        max_norm=None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight=None,
        _freeze: bool = False,
        *,
        key=None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        self.max_norm, self.norm_type = max_norm, float(norm_type)
        self.scale_grad_by_freq, self.sparse = bool(scale_grad_by_freq), bool(sparse)
        _check_sizes("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"Embedding: padding_idx {padding_idx} is out of range for "
                    f"{num_embeddings} rows"
                )
            padding_idx = int(padding_idx) % self.num_embeddings
        self.padding_idx = padding_idx
        if _weight is not None:  # (PyTorch's table given at construction)
            weight = detach(as_tensor(_weight, op="Embedding"))
            if tuple(weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(
                    f"Embedding: _weight of shape {weight.shape} is not ({num_embeddings}, "
                    f"{embedding_dim})"
                )
        else:
            weight = init.normal((num_embeddings, embedding_dim), 0.0, 1.0, key, dtype)
            if padding_idx is not None:
                weight = weight.at[padding_idx].set(0.0)
        if device is not None:
            weight = weight.to(device)
        self.weight = weight
        if _freeze:
            self.requires_grad_(False)

    def forward(self, indices):
        """Look up rows.

        Args:
            indices: integer tensor of any shape.

        Returns:
            ``indices.shape + (embedding_dim,)``.

        Raises:
            TypeError: if ``indices`` is not an integer tensor.
        """
        indices = as_tensor(indices, op="Embedding")
        if not indices.dtype.is_int:
            raise TypeError(
                f"Embedding({self.extra_repr()}): indices of shape {indices.shape} have dtype "
                f"{indices.dtype.name}; expected integers"
            )
        who = f"Embedding({self.extra_repr()})"
        if self.max_norm is not None:
            F.renorm_rows(self.weight, indices, self.max_norm, self.norm_type, who)
        rows = F._embedding(indices, self.weight, self.padding_idx, who)
        if self.scale_grad_by_freq:
            rows = F._by_frequency(rows, indices, self.num_embeddings)
        return rows

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            pad += f", max_norm={self.max_norm}"
        if self.scale_grad_by_freq:
            pad += ", scale_grad_by_freq=True"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"

    @classmethod
    def from_pretrained(
        cls,
        embeddings,
        freeze: bool = True,
        padding_idx=None,
        max_norm=None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> Embedding:
        """An ``Embedding`` holding the table ``embeddings`` (PyTorch's ``from_pretrained``).

        Args:
            embeddings: a 2-D tensor or array ``(num_embeddings, embedding_dim)``.
            freeze: keep the table out of training (default True, as PyTorch).
            padding_idx: optional row that gets no gradient (its values are kept).
            max_norm: as the constructor's.
            norm_type: as the constructor's.
            scale_grad_by_freq: as the constructor's.
            sparse: as the constructor's.

        Returns:
            The module.

        Raises:
            ValueError: for a table that is not 2-D.
        """
        table = as_tensor(embeddings, op="Embedding.from_pretrained")
        if table.ndim != 2:
            raise ValueError(
                f"Embedding.from_pretrained: embeddings must be 2-D, got shape {table.shape}"
            )
        m = cls(
            table.shape[0],
            table.shape[1],
            padding_idx,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            sparse,
            dtype=table.dtype,
        )
        m.weight = detach(table)
        if freeze:
            m.requires_grad_(False)
        return m


class Dropout(Module):
    """Randomly zero elements with probability ``p`` while training (a fresh mask every call);
    the identity in ``eval()`` mode.

    Args:
        p: drop probability in ``[0, 1]`` (default 0.5; 1 gives zeros while training).
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        _inplace(type(self).__name__, inplace)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = float(p)

    def forward(self, x, key=None):
        """Apply dropout.

        Args:
            x: the input.
            key: optional RNG key for a reproducible mask.

        Returns:
            A tensor like ``x``.
        """
        return F.dropout(x, self.p, self.training, key)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"p={self.p}"


class Dropout2d(Dropout):
    """Zero whole channels with probability ``p`` while training (one draw per image and
    channel of NHWC input, the kept ones scaled by ``1 / (1 - p)``); the identity in
    ``eval()`` mode (:func:`nabla.nn.functional.dropout2d`).

    Args:
        p: drop probability in ``[0, 1]`` (default 0.5).
        inplace: PyTorch's flag, accepted (the result is a new tensor).
    """

    fn = staticmethod(F.dropout2d)

    def forward(self, x, key=None):
        """Apply channel dropout to channels-last input (:attr:`fn`'s layout).

        Args:
            x: the input.
            key: optional RNG key for a reproducible mask.

        Returns:
            A tensor like ``x``.
        """
        try:
            return type(self).fn(x, self.p, self.training, key)
        except ValueError as e:  # the module's name, as PyTorch's error names it
            raise ValueError(str(e).replace(type(self).fn.__name__, type(self).__name__)) from None


class AlphaDropout(Dropout):
    """PyTorch's ``AlphaDropout`` for SELU networks, while training
    (:func:`nabla.nn.functional.alpha_dropout`); the identity in ``eval()`` mode.

    Args:
        p: drop probability in ``[0, 1]`` (default 0.5).
        inplace: PyTorch's flag, accepted (the result is a new tensor).
    """

    fn = staticmethod(F.alpha_dropout)

    def forward(self, x, key=None):
        """Apply alpha dropout.

        Args:
            x: the input.
            key: optional RNG key for a reproducible mask.

        Returns:
            A tensor like ``x``.
        """
        return type(self).fn(x, self.p, self.training, key)


class FeatureAlphaDropout(AlphaDropout):
    """PyTorch's ``FeatureAlphaDropout``, channels last: alpha dropout of whole channels
    (:func:`nabla.nn.functional.feature_alpha_dropout`).

    Args:
        p: drop probability in ``[0, 1]`` (default 0.5).
        inplace: PyTorch's flag, accepted (the result is a new tensor).
    """

    fn = staticmethod(F.feature_alpha_dropout)


class Dropout1d(Dropout2d):
    """Zero whole channels of sequences ``(N, L, C)`` (or one ``(L, C)``) with probability
    ``p`` while training, one draw per sequence and channel (PyTorch's ``Dropout1d``,
    channels last; :func:`nabla.nn.functional.dropout1d`).

    Args:
        p: drop probability in ``[0, 1]`` (default 0.5).
        inplace: PyTorch's flag, accepted (the result is a new tensor).
    """

    fn = staticmethod(F.dropout1d)


class Dropout3d(Dropout2d):
    """Zero whole channels of volumes ``(N, D, H, W, C)`` (or one ``(D, H, W, C)``) with
    probability ``p`` while training, one draw per volume and channel (PyTorch's
    ``Dropout3d``, channels last; :func:`nabla.nn.functional.dropout3d`).

    Args:
        p: drop probability in ``[0, 1]`` (default 0.5).
        inplace: PyTorch's flag, accepted (the result is a new tensor).
    """

    fn = staticmethod(F.dropout3d)


# ----------------------------------------------------------------------------- activations
class _Activation(Module):
    """A function as a layer: ``fn(x, *settings)``, ``settings`` naming the attributes (set
    by the subclass's constructor) passed after ``x``, in order."""

    settings: tuple = ()

    def forward(self, x):
        """Apply the activation.

        Args:
            x: the input.

        Returns:
            A tensor like ``x``.
        """
        return type(self).fn(x, *[getattr(self, name) for name in self.settings])

    def extra_repr(self) -> str:
        """The settings, as PyTorch shows them (``LeakyReLU(negative_slope=0.2)``)."""
        return ", ".join(f"{name}={getattr(self, name)!r}" for name in self.settings)


_inplace = F._inplace  # (PyTorch's flag, checked once for modules and functions alike)

_INPLACE_DOC = """
    ``inplace`` (PyTorch's flag) is accepted and changes nothing: the result is a new tensor
    (read the returned value, not the input).
"""


class _InPlaceActivation(_Activation):
    """An activation whose PyTorch constructor takes ``inplace``."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        _inplace(type(self).__name__, inplace)


class ReLU(_InPlaceActivation):
    """``max(x, 0)``."""

    fn = staticmethod(unary.relu)


class Tanh(_Activation):
    """``tanh(x)``."""

    fn = staticmethod(unary.tanh)


class Sigmoid(_Activation):
    """``1 / (1 + exp(-x))``."""

    fn = staticmethod(unary.sigmoid)


class SiLU(_InPlaceActivation):
    """``x * sigmoid(x)`` (swish)."""

    fn = staticmethod(unary.silu)


class ReLU6(_InPlaceActivation):
    """``min(max(x, 0), 6)``."""

    fn = staticmethod(F.relu6)


class SELU(_InPlaceActivation):
    """``scale * elu(x, alpha)`` with the self-normalizing constants."""

    fn = staticmethod(F.selu)


class Mish(_InPlaceActivation):
    """``x * tanh(softplus(x))``."""

    fn = staticmethod(F.mish)


class Hardsigmoid(_InPlaceActivation):
    """``relu6(x + 3) / 6``."""

    fn = staticmethod(F.hardsigmoid)


class Hardswish(_InPlaceActivation):
    """``x * relu6(x + 3) / 6``."""

    fn = staticmethod(F.hardswish)


class LogSigmoid(_Activation):
    """``log(sigmoid(x))``, without overflow."""

    fn = staticmethod(F.logsigmoid)


class ELU(_Activation):
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere.

    Args:
        alpha: the scale of the negative part (default 1).
    """

    fn = staticmethod(F.elu)
    settings = ("alpha",)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        _inplace("ELU", inplace)
        self.alpha = float(alpha)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"alpha={self.alpha}"


class Hardtanh(_Activation):
    """``x`` clipped to ``[min_val, max_val]``.

    Args:
        min_val: the lower bound (default -1).
        max_val: the upper bound (default 1).
    """

    fn = staticmethod(F.hardtanh)
    settings = ("min_val", "max_val")

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        _inplace("Hardtanh", inplace)
        if max_val <= min_val:
            raise ValueError(f"Hardtanh: max_val={max_val} must exceed min_val={min_val}")
        self.min_val, self.max_val = float(min_val), float(max_val)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"min_val={self.min_val}, max_val={self.max_val}"


class Softplus(_Activation):
    """``log(1 + exp(beta * x)) / beta``, ``x`` where ``beta * x > threshold`` (PyTorch's).

    Args:
        beta: the sharpness (default 1).
        threshold: the linear region's start in ``beta * x`` (default 20).
    """

    fn = staticmethod(F.softplus)
    settings = ("beta", "threshold")

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = float(beta), float(threshold)


class Softsign(_Activation):
    """``x / (1 + |x|)``."""

    fn = staticmethod(F.softsign)


class Tanhshrink(_Activation):
    """``x - tanh(x)``."""

    fn = staticmethod(F.tanhshrink)


class Hardshrink(_Activation):
    """``x`` where ``|x| > lambd``, 0 elsewhere.

    Args:
        lambd: the bound (default 0.5).
    """

    fn = staticmethod(F.hardshrink)
    settings = ("lambd",)

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = float(lambd)


class Softshrink(Hardshrink):
    """``x`` moved ``lambd`` toward 0, 0 within ``lambd`` of it.

    Args:
        lambd: the bound, at least 0 (default 0.5).
    """

    fn = staticmethod(F.softshrink)


class Softmin(_Activation):
    """``softmax(-x)`` along ``dim``.

    Args:
        dim: the dim to normalize (default the last).
    """

    fn = staticmethod(F.softmin)
    settings = ("dim",)

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim


class CELU(_Activation):
    """``x`` where positive, ``alpha * (exp(x / alpha) - 1)`` elsewhere.

    Args:
        alpha: the scale (default 1).
        inplace: PyTorch's flag, accepted.
    """

    fn = staticmethod(F.celu)
    settings = ("alpha",)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        _inplace("CELU", inplace)
        self.alpha = float(alpha)


class GLU(_Activation):
    """The gated linear unit ``a * sigmoid(b)`` of the halves of ``dim``.

    Args:
        dim: the dim to halve (default the last).
    """

    fn = staticmethod(F.glu)
    settings = ("dim",)

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim


class Threshold(_Activation):
    """``x`` where above ``threshold``, ``value`` elsewhere.

    Args:
        threshold: the bound.
        value: the replacement.
        inplace: PyTorch's flag, accepted.
    """

    fn = staticmethod(F.threshold)
    settings = ("threshold", "value")

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        _inplace("Threshold", inplace)
        self.threshold, self.value = threshold, value


class Identity(_Activation):
    """Returns its input unchanged (a placeholder layer). As PyTorch's, its constructor
    takes and ignores any arguments."""

    fn = staticmethod(lambda x: x)

    def __init__(self, *args, **kwargs):
        super().__init__()


class GELU(_Activation):
    """Gaussian error linear unit.

    Args:
        approximate: ``"none"`` (exact, default) or ``"tanh"``.
    """

    fn = staticmethod(unary.gelu)
    settings = ("approximate",)

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate


class LeakyReLU(_Activation):
    """``x`` where positive, ``negative_slope * x`` elsewhere.

    Args:
        negative_slope: default 0.01.
    """

    fn = staticmethod(F.leaky_relu)
    settings = ("negative_slope",)

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        _inplace("LeakyReLU", inplace)
        self.negative_slope = float(negative_slope)


class RReLU(Module):
    """PyTorch's ``RReLU``: slopes drawn from ``[lower, upper]`` per element while
    training, their mean in ``eval()`` mode (:func:`nabla.nn.functional.rrelu`).

    Args:
        lower: the lowest slope (default 1/8).
        upper: the highest slope (default 1/3).
        inplace: PyTorch's flag, accepted (the result is a new tensor).
    """

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        _inplace("RReLU", inplace)
        if not 0.0 <= lower <= upper:
            raise ValueError(f"RReLU: needs 0 <= lower <= upper, got {lower}, {upper}")
        self.lower, self.upper = float(lower), float(upper)

    def forward(self, x, key=None):
        """Apply the randomized leaky ReLU.

        Args:
            x: the input.
            key: optional RNG key for reproducible slopes.

        Returns:
            A tensor like ``x``.
        """
        return F.rrelu(x, self.lower, self.upper, self.training, key)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"lower={self.lower}, upper={self.upper}"


class Softmax(_Activation):
    """Softmax along ``axis``.

    Args:
        axis: the axis that sums to one (default -1).
        dim: PyTorch's name for ``axis``.
    """

    fn = staticmethod(reduction.softmax)
    settings = ("axis",)

    def __init__(self, axis: int | None = None, *, dim: int | None = None):
        super().__init__()
        axis = alias_arg(type(self).__name__, "axis", axis, "dim", dim)
        self.axis = -1 if axis is None else int(axis)


class Softmax2d(_Activation):
    """PyTorch's ``Softmax2d``, channels last: the softmax over the channels of each
    position of ``(N, H, W, C)`` or ``(H, W, C)`` images."""

    def forward(self, x):
        """The channels' softmax at each position.

        Args:
            x: ``(N, H, W, C)`` or ``(H, W, C)``.

        Returns:
            A tensor like ``x``.

        Raises:
            ValueError: for another rank.
        """
        x = as_tensor(x, op="Softmax2d")
        if x.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected (N, H, W, C) or (H, W, C), got {x.shape}")
        return reduction.softmax(x, -1)


class LogSoftmax(Softmax):
    """Log-softmax along ``axis``.

    Args:
        axis: the normalized axis (default -1).
        dim: PyTorch's name for ``axis``.
    """

    fn = staticmethod(reduction.logsoftmax)


for _cls in (
    Dropout, Dropout2d, ReLU, SiLU, ReLU6, SELU, Mish, Hardsigmoid, Hardswish, ELU, Hardtanh,
    LeakyReLU,
):  # fmt: skip
    _cls.__doc__ += _INPLACE_DOC


class Flatten(Module):
    """Merge dims ``start_dim..end_dim`` into one (by default all but the batch dim).

    Args:
        start_dim: first dim to merge (default 1).
        end_dim: last dim to merge (default -1).
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, x):
        """Flatten ``x``.

        Args:
            x: the input.

        Returns:
            ``x`` with the dims merged.
        """
        x = as_tensor(x, op="Flatten")
        return view.flatten(x, self.start_dim, self.end_dim)  # (its checks name the dims)


class Unflatten(Module):
    """Split dim ``dim`` into ``unflattened_size`` (PyTorch's ``Unflatten``).

    Args:
        dim: the dim to split.
        unflattened_size: the new dims; their product is the dim's size (one may be -1).
    """

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = int(dim), tuple(int(v) for v in unflattened_size)

    def forward(self, x):
        """Unflatten ``x``.

        Args:
            x: the input.

        Returns:
            ``x`` with dim ``dim`` split.
        """
        x = as_tensor(x, op="Unflatten")
        if not -x.ndim <= self.dim < x.ndim:
            raise IndexError(
                f"Unflatten: dim {self.dim} is out of range for an input of shape {x.shape}"
            )
        d = self.dim % x.ndim
        sizes = self.unflattened_size
        known = math.prod(v for v in sizes if v != -1)
        fits = x.shape[d] % known == 0 if -1 in sizes and known else math.prod(sizes) == x.shape[d]
        if not fits or sizes.count(-1) > 1:
            raise ValueError(
                f"Unflatten: unflattened_size {sizes} does not split dim {self.dim} of size "
                f"{x.shape[d]} (input of shape {x.shape})"
            )
        return x.reshape(x.shape[:d] + sizes + x.shape[d + 1 :])

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class PReLU(Module):
    """``max(x, 0) + weight * min(x, 0)`` with a learned slope: one shared, or one per
    channel (the last axis, channels last) for ``num_parameters = C``.

    Args:
        num_parameters: 1 or the number of channels (default 1).
        init: the slopes' initial value (default 0.25).
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        _check_sizes("PReLU", num_parameters=num_parameters)
        self.num_parameters = int(num_parameters)
        self.weight = creation.full((self.num_parameters,), float(init))

    def forward(self, x):
        """Apply the activation.

        Args:
            x: the input; with several slopes its last axis has ``num_parameters``
                channels.

        Returns:
            A tensor like ``x``.
        """
        x = as_tensor(x, op="PReLU")
        if self.num_parameters > 1 and (not x.ndim or x.shape[-1] != self.num_parameters):
            raise ValueError(
                f"PReLU({self.num_parameters}): input of shape {x.shape} needs "
                f"{self.num_parameters} channels on its last axis"
            )
        # PyTorch's derivative at 0 is the slope (a max/min split would give (1 + w) / 2)
        return F.prelu(x, self.weight)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"num_parameters={self.num_parameters}"


def Parameter(data, requires_grad: bool = True) -> Tensor:  # noqa: N802 - PyTorch name
    """PyTorch's ``nn.Parameter``: ``data`` as a tensor to train. A float tensor assigned to
    a module attribute is a parameter already; this marks it ``requires_grad`` (or frozen,
    with ``requires_grad=False``: set on a module, it is then a frozen parameter the
    optimizers skip) so that ported code such as ``self.w = nn.Parameter(nb.randn(...))``
    runs as it is.

    Args:
        data: a tensor, array or number.
        requires_grad: whether the tensor is trained (default True).

    Returns:
        A new tensor handle on ``data``'s value (no autodiff history).
    """
    t = detach(as_tensor(data, op="Parameter"))
    if requires_grad and t.dtype.is_float:
        t.requires_grad = True
    elif not requires_grad:
        mark_frozen_parameter(t)  # (set on a module: frozen, as the docstring says)
    return t
