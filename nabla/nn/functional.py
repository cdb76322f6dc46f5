"""Stateless layer functions (``nb.nn.functional``, usually imported as ``F``).

Layouts: a linear weight is ``(in_features, out_features)`` (``y = x @ W + b``), images are
NHWC, classes are the last axis. Activations are the ``nabla`` ops themselves; losses and
initializers are re-exported from :mod:`nabla.nn.losses` and :mod:`nabla.nn.init`.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import ml_dtypes
import numpy as np

from ..core.dtypes import DType, get_default_dtype, promote_types
from ..ops import array_functions, binary, creation, indexing, linalg, reduction, unary, view
from ..ops import nn as _nn_ops
from ..ops import random as _random
from ..ops._util import as_tensor, norm_axis, readable_now
from ..ops.nn import check_pool_padding, conv2d, conv2d_transpose
from ..runtime.tensor import Tensor
from .init import he_normal, he_uniform, xavier_normal, xavier_uniform
from .losses import (
    _distance,
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    broadcasts_onto,
    cosine_embedding_loss,
    cross_entropy,
    cross_entropy_loss,
    ctc_loss,
    gaussian_nll_loss,
    hinge_embedding_loss,
    huber_loss,
    kl_div,
    l1_loss,
    margin_ranking_loss,
    mse_loss,
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    nll_loss,
    poisson_nll_loss,
    smooth_l1_loss,
    soft_margin_loss,
    triplet_margin_loss,
    triplet_margin_with_distance_loss,
)
from .normalization import batch_norm, group_norm, instance_norm, widened

__all__ = [
    "embedding_bag",
    "affine_grid",
    "grid_sample",
    "adaptive_avg_pool2d",
    "adaptive_max_pool2d",
    "fractional_max_pool2d",
    "adaptive_avg_pool1d",
    "adaptive_max_pool1d",
    "max_pool1d",
    "avg_pool1d",
    "pixel_shuffle",
    "pixel_unshuffle",
    "cosine_similarity",
    "normalize",
    "one_hot",
    "pad",
    "avg_pool2d",
    "batch_norm",
    "group_norm",
    "instance_norm",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "conv2d",
    "cross_entropy",
    "cross_entropy_loss",
    "ctc_loss",
    "dropout",
    "elu",
    "embedding",
    "gelu",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "he_normal",
    "he_uniform",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_softmax",
    "logsigmoid",
    "max_pool2d",
    "mish",
    "mse_loss",
    "nll_loss",
    "relu",
    "relu6",
    "rms_norm",
    "selu",
    "smooth_l1_loss",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "tanh",
    "xavier_normal",
    "xavier_uniform",
]

gelu = unary.gelu
tanh = unary.tanh
sigmoid = unary.sigmoid


def _inplace(name: str, inplace) -> None:
    """PyTorch's ``inplace`` flag: accepted, and changes nothing (every op here gives a new
    tensor)."""
    if not isinstance(inplace, bool):
        raise TypeError(f"{name}: inplace must be a bool, got {inplace!r}")


def relu(x, inplace: bool = False) -> Tensor:
    """``max(x, 0)`` (``nb.relu``).

    Args:
        x: the input.
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.
    """
    _inplace("relu", inplace)
    return unary.relu(x)


def silu(x, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)`` (``nb.silu``).

    Args:
        x: the input.
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.
    """
    _inplace("silu", inplace)
    return unary.silu(x)


def softmax(x, axis=-1, *, dim: int | None = None, dtype=None, where=None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis`` (or PyTorch's ``dim``), computed stably.

    Args:
        x: the input.
        axis: the axis (default -1, the last); a tuple of axes, or None for every axis,
            normalizes them together (as ``jax.nn``).
        dim: PyTorch's name for ``axis``.
        dtype: cast ``x`` to this dtype first (PyTorch's ``dtype=``).
        where: a bool mask broadcasting against ``x`` (``jax.nn``'s): over its True
            elements, 0 at the others.

    Returns:
        A tensor like ``x``.

    Raises:
        TypeError: for both ``axis`` and ``dim``.
    """
    x, axis = _normalized_input("softmax", x, axis, dim, dtype)
    return reduction.softmax(x, axis, where=where)


def log_softmax(x, axis=-1, *, dim: int | None = None, dtype=None, where=None) -> Tensor:
    """``x - logsumexp(x)`` along ``axis`` (or PyTorch's ``dim``).

    Args:
        x: the input.
        axis: the axis (default -1, the last); a tuple of axes, or None for every axis,
            normalizes them together (as ``jax.nn``).
        dim: PyTorch's name for ``axis``.
        dtype: cast ``x`` to this dtype first (PyTorch's ``dtype=``).
        where: a bool mask broadcasting against ``x`` (``jax.nn``'s): over its True
            elements, ``-inf`` at the others.

    Returns:
        A tensor like ``x``.

    Raises:
        TypeError: for both ``axis`` and ``dim``.
    """
    x, axis = _normalized_input("log_softmax", x, axis, dim, dtype)
    return reduction.logsoftmax(x, axis, where=where)


def _normalized_input(op: str, x, axis, dim, dtype) -> tuple:
    """``(x, axis)`` of ``softmax``/``log_softmax``: one of ``axis`` and PyTorch's ``dim``
    (default -1; None: every axis, as JAX), ``x`` cast to ``dtype`` when given."""
    if dim is not None:
        if axis != -1:  # (given as well: the default -1 cannot be told from a given -1)
            raise TypeError(f"{op}: pass axis or dim, not both")
        axis = dim
    x = as_tensor(x, op=op)
    return (x if dtype is None else x.cast(dtype)), axis


def one_hot(tensor, num_classes: int = -1, *, dtype=None, axis: int = -1) -> Tensor:
    """PyTorch's ``one_hot``: an int64 tensor ``tensor.shape + (num_classes,)`` with a 1 at
    each index (``jax.nn.one_hot(x, n)`` is float32: pass ``dtype=nb.float32``).

    Args:
        tensor: integer class indices in ``[0, num_classes)``.
        num_classes: the number of classes; -1 (default) takes the largest index + 1
            (computed at the call).
        dtype: the result's dtype (default int64, as PyTorch's).
        axis: where the classes' dim goes (default -1, the last; ``jax.nn.one_hot``'s).

    Returns:
        The one-hot tensor.

    Raises:
        TypeError: for indices that are not integers.
        ValueError: for an index outside ``[0, num_classes)`` (checked at the call when the
            indices hold values), or no classes.
    """
    tensor = as_tensor(tensor, op="one_hot")
    if not tensor.dtype.is_int:
        raise TypeError(f"one_hot: indices must be integers, got {tensor.dtype}")
    # indices with a value, or computed lazily outside compile (computed now, alone), are
    # checked: an out-of-range one would give a row of zeros
    known = tensor.size and readable_now(tensor)
    if num_classes == -1:
        if not tensor.size:
            raise ValueError("one_hot: num_classes=-1 needs at least one index")
        num_classes = int(tensor.numpy().max()) + 1
    if num_classes < 1:
        raise ValueError(f"one_hot: num_classes must be >= 1 or -1, got {num_classes}")
    if known:
        values = tensor.numpy()
        if values.min() < 0 or values.max() >= num_classes:
            bad = int(values[(values < 0) | (values >= num_classes)].flat[0])
            raise ValueError(
                f"one_hot: class index {bad} is out of range for {num_classes} classes "
                f"(indices of shape {tensor.shape})"
            )
    hits = binary.equal(creation.arange(num_classes), tensor.unsqueeze(-1))
    out = hits.cast("int64" if dtype is None else dtype)
    if axis != -1:
        out = view.moveaxis(out, -1, norm_axis("one_hot", axis, out.ndim, out.shape))
    return out


def pad(input, pad, mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """PyTorch's ``F.pad``: ``pad`` lists ``(before, after)`` pairs from the **last** dim
    backwards (``(left, right, top, bottom)`` pads the last two dims), a negative amount
    crops. For NumPy's per-dim pairs use :func:`nabla.pad`.

    Args:
        input: the tensor.
        pad: an even-length sequence of ints, at most two per dim.
        mode: ``"constant"`` (default), ``"reflect"``, ``"replicate"`` or ``"circular"``.
        value: the fill of ``"constant"`` (default 0).

    Returns:
        The padded tensor.

    Raises:
        ValueError: for an odd-length ``pad`` or one longer than two per dim, a crop past
            a dim's size or with a mode other than ``"constant"``, a ``"reflect"`` pad not
            below the dim's size or a ``"circular"`` one above it, or an unknown mode.
        TypeError: for a pad amount that is not an int.
    """
    x = as_tensor(input, op="pad")
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in pad):
        raise TypeError(f"pad: pad={tuple(pad)} must hold ints (input of shape {x.shape})")
    pad = tuple(int(v) for v in pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(
            f"pad: pad={pad} needs two ints per padded dim, at most {x.ndim} dims for an "
            f"input of shape {x.shape}"
        )
    pairs = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        pairs[x.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    # negative amounts crop first (PyTorch's), then the rest pads
    crop = tuple(slice(-lo if lo < 0 else None, hi if hi < 0 else None) for lo, hi in pairs)
    if any(lo < 0 or hi < 0 for lo, hi in pairs):
        for d, (lo, hi) in enumerate(pairs):
            if x.shape[d] + min(lo, 0) + min(hi, 0) < 0:
                raise ValueError(
                    f"pad: pad={pad} crops dim {d} of size {x.shape[d]} below nothing "
                    f"(input of shape {x.shape})"
                )
        if mode != "constant":  # (PyTorch pads the whole dim first, then crops)
            raise ValueError(
                f"pad: a negative pad (a crop) with mode {mode!r} is not supported (pad={pad}, "
                f"input of shape {x.shape}); crop with indexing first"
            )
        x = x[crop]
        pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    if mode == "constant":
        return view.pad(x, pairs, "constant", 0.0 if value is None else value)
    if value is not None:
        raise ValueError(f"pad: mode {mode!r} takes no fill value (got {value!r})")
    # PyTorch's limits: a reflection reaches at most size - 1 values in, a circular pad
    # wraps at most once (NumPy's modes, nb.pad's, repeat past them)
    limit = {"reflect": 1, "circular": 0}.get(mode)
    for d, (lo, hi) in enumerate(pairs):
        if limit is not None and max(lo, hi) > x.shape[d] - limit:
            raise ValueError(
                f"pad: {mode} padding {(lo, hi)} of dim {d} must be at most "
                f"{x.shape[d] - limit} for an input of shape {x.shape} (PyTorch's limit)"
            )
    return view.pad(x, pairs, mode)


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # noqa: A002
    """PyTorch's ``F.normalize``: ``input / max(norm_p(input, dim), eps)``.

    Args:
        input: the tensor.
        p: the order of the norm (default 2).
        dim: the axis the norm runs over (default 1, as PyTorch).
        eps: the smallest divisor.

    Returns:
        A tensor like ``input``.
    """
    x0 = as_tensor(input, op="normalize")
    dim = norm_axis("normalize", dim, x0.ndim, x0.shape)
    x = widened(x0)
    # max(norm, eps) taken inside the root (the same value): a zero vector's gradient is
    # 1 / eps, as PyTorch's, not the NaN of the root's infinite slope at 0 times 0
    if p == 2.0:
        norm = binary.maximum(x.square().sum(axis=dim, keepdims=True), eps * eps).sqrt()
    elif p == 0:  # PyTorch's "0-norm": the count of non-zero entries
        count = (x != 0).cast(x.dtype).sum(axis=dim, keepdims=True)
        norm = binary.maximum(count, eps)
    elif p == math.inf:
        norm = binary.maximum(unary.abs(x).max(axis=dim, keepdims=True), eps)
    else:
        # |x|^p with PyTorch's gradient 0 at x = 0 (p < 1: the slope is infinite there,
        # and abs's own derivative at 0 is 1)
        ax = unary.abs(x)
        zero = ax == 0
        powered = binary.where(zero, 0.0, binary.where(zero, 1.0, ax) ** p)
        total = powered.sum(axis=dim, keepdims=True)
        norm = binary.maximum(total, eps**p) ** (1.0 / p)
    return (x / norm).cast(x0.dtype)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """PyTorch's ``F.cosine_similarity``: ``x1 . x2 / (max(|x1|, eps) max(|x2|, eps))``
    along ``dim`` (the two broadcast against each other).

    Args:
        x1: the first tensor.
        x2: the second tensor.
        dim: the axis of the vectors (default 1).
        eps: the smallest divisor.

    Returns:
        The similarities, ``dim`` reduced.
    """
    a, b = as_tensor(x1, op="cosine_similarity"), as_tensor(x2, op="cosine_similarity")
    dtype = promote_types(a.dtype, b.dtype)
    # broadcast first: ``dim`` counts in the broadcast shape (a lower-rank input's own
    # axis ``dim`` is another one)
    shape = binary.broadcast_shapes("cosine_similarity", a.shape, b.shape)
    dim = norm_axis("cosine_similarity", dim, len(shape), shape)
    a, b = view.broadcast_to(widened(a), shape), view.broadcast_to(widened(b), shape)
    dot = (a * b).sum(axis=dim)
    # each norm clamped at eps on its own, as PyTorch 2's (inside the root: finite
    # gradients for a zero vector)
    na = binary.maximum(a.square().sum(axis=dim), eps * eps).sqrt()
    nb_ = binary.maximum(b.square().sum(axis=dim), eps * eps).sqrt()
    out = dot / (na * nb_)
    return out.cast(dtype) if dtype.is_float else out


def max_pool2d(
    x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """PyTorch's ``F.max_pool2d`` on NHWC ``x``: :func:`nabla.max_pool2d` with PyTorch's limit
    on the padding (at most half the window; ``nb.max_pool2d`` takes any, as JAX's
    ``reduce_window``).

    Args:
        x: input ``(N, H, W, C)``.
        kernel_size: int or pair.
        stride: int, pair or None (default: ``kernel_size``).
        padding: int or pair, at most half the (dilated) window.
        dilation: int or pair: spacing between window elements.
        ceil_mode: round the output size up.
        return_indices: also return, per output, where its maximum is (PyTorch's: int64
            ``h * W + w`` in the unpadded input's plane; the first maximum of a window), for
            :func:`max_unpool2d`.

    Returns:
        ``(N, OH, OW, C)``; with ``return_indices``, ``(values, indices)``.

    Raises:
        ValueError: for padding past half the window, and as :func:`nabla.max_pool2d`.
    """
    check_pool_padding("max_pool2d", x, kernel_size, stride, padding, dilation)
    values = _nn_ops.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)
    if not return_indices:
        return values
    return values, _max_indices(
        as_tensor(x, op="max_pool2d"), values, kernel_size, stride, padding, dilation
    )


def _max_indices(x, values, kernel_size, stride, padding, dilation) -> Tensor:
    """Each window's first maximum as PyTorch's flat index ``h * W + w`` (int64)."""
    op = "max_pool2d"
    k = _nn_ops._pair(kernel_size, "kernel_size", op)
    s = k if stride is None else _nn_ops._pair(stride, "stride", op)
    p = _nn_ops._pair(padding, "padding", op, minimum=0)
    d = _nn_ops._pair(dilation, "dilation", op)
    unbatched = x.ndim == 3
    if unbatched:
        x, values = x[None], values[None]
    n, h, w, c = x.shape
    oh, ow = values.shape[1:3]
    # -inf around the input, enough for every window (ceil mode's last ones too)
    extra = [
        max(0, (o - 1) * s[i] + d[i] * (k[i] - 1) + 1 - (size + 2 * p[i]))
        for i, (o, size) in enumerate(((oh, h), (ow, w)))
    ]
    low = creation.full((), -np.inf if x.dtype.is_float else np.iinfo(x.dtype.numpy).min, x.dtype)
    xp = view.pad(x, ((0, 0), (p[0], p[0] + extra[0]), (p[1], p[1] + extra[1]), (0, 0)), value=low)
    taps = _nn_ops._windows(xp, k, s, d, (oh, ow))  # (N, OH, OW, KH*KW, C)
    tap = reduction.argmax(taps, 3)  # the first maximum: (N, OH, OW, C)
    i, j = tap // k[1], tap % k[1]
    rows = creation.arange(oh, dtype=tap.dtype).reshape(1, oh, 1, 1) * s[0] + i * d[0] - p[0]
    cols = creation.arange(ow, dtype=tap.dtype).reshape(1, 1, ow, 1) * s[1] + j * d[1] - p[1]
    index = (rows * w + cols).cast(DType.int64)
    return index[0] if unbatched else index


def _fractional_starts(sample, size: int, out: int, pool: int, dtype):
    """PyTorch's pseudo-random window starts along one dim, from one sample ``u`` in
    ``[0, 1)`` per (example, channel): ``floor((i + u) a) - floor(u a)`` with
    ``a = (size - pool) / (out - 1)``, the last start ``size - pool`` (in ``dtype``, as
    PyTorch rounds)."""
    last = creation.full(tuple(sample.shape) + (1,), size - pool, dtype=DType.int32)
    if out == 1:
        return last
    alpha = creation.full((), (size - pool) / (out - 1), dtype=dtype)
    i = creation.arange(out - 1, dtype=dtype)
    u = view.unsqueeze(sample, -1)
    starts = unary.floor((i + u) * alpha) - unary.floor(u * alpha)
    return view.concatenate([starts.cast(DType.int32), last], -1)


def fractional_max_pool2d(
    input, kernel_size, output_size=None, output_ratio=None, return_indices=False,  # noqa: A002
    _random_samples=None, *, key=None,
):  # fmt: skip
    """PyTorch's ``F.fractional_max_pool2d`` on NHWC ``input``: max over ``kernel_size``
    windows whose starts step by a pseudo-random mix of ``floor`` and ``ceil`` of the
    ratio, a new mix per example and channel at every call (PyTorch's sequence, so given
    the same ``_random_samples`` it pools the same windows).

    Args:
        input: ``(N, H, W, C)`` (or ``(H, W, C)``).
        kernel_size: int or pair.
        output_size: int or pair ``(OH, OW)``; or give ``output_ratio``.
        output_ratio: float or pair in ``(0, 1)``: the output size as a fraction.
        return_indices: also return each maximum's ``h * W + w`` (int64).
        _random_samples: PyTorch's ``(N, C, 2)`` samples in ``[0, 1)`` (width's first),
            fixing the windows; drawn by the global generator (or from ``key``) otherwise.
        key: a ``nb.random`` key for the samples.

    Returns:
        ``(N, OH, OW, C)``; with ``return_indices``, ``(values, indices)``.

    Raises:
        ValueError: for a missing or double size, or windows that do not fit.
    """
    x = as_tensor(input, op="fractional_max_pool2d")
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    if x.ndim != 4:
        raise ValueError(f"fractional_max_pool2d: expected (N, H, W, C), got {x.shape}")
    n, h, w, c = x.shape
    kh, kw = _nn_ops._pair(kernel_size, "kernel_size", "fractional_max_pool2d")
    if (output_size is None) == (output_ratio is None):
        raise ValueError("fractional_max_pool2d: give one of output_size and output_ratio")
    if output_size is not None:
        oh, ow = _nn_ops._pair(output_size, "output_size", "fractional_max_pool2d")
    else:
        rh, rw = (output_ratio, output_ratio) if np.ndim(output_ratio) == 0 else output_ratio
        oh, ow = int(h * rh), int(w * rw)
    if oh + kh - 1 > h or ow + kw - 1 > w or min(oh, ow) < 1:
        raise ValueError(
            f"fractional_max_pool2d: output {(oh, ow)} with kernel {(kh, kw)} does not fit an "
            f"input of {(h, w)} (each needs output + kernel - 1 <= input)"
        )
    if _random_samples is not None:
        samples = as_tensor(_random_samples, x.dtype, "fractional_max_pool2d")
    elif key is not None:
        samples = _random.uniform(key, (n, c, 2), dtype=x.dtype)
    else:
        samples = _random.uniform((n, c, 2), dtype=x.dtype)
    if tuple(samples.shape) != (n, c, 2):
        raise ValueError(
            f"fractional_max_pool2d: _random_samples must be (N, C, 2) = {(n, c, 2)}, got "
            f"{tuple(samples.shape)}"
        )
    rows = _fractional_starts(samples[..., 1], h, oh, kh, x.dtype)  # (N, C, OH)
    cols = _fractional_starts(samples[..., 0], w, ow, kw, x.dtype)  # (N, C, OW)
    rows = view.unsqueeze(rows, -1) + creation.arange(kh, dtype=DType.int32)  # (N, C, OH, kh)
    cols = view.unsqueeze(cols, -1) + creation.arange(kw, dtype=DType.int32)  # (N, C, OW, kw)
    # every tap's flat position h * W + w: (N, C, OH, OW, kh * kw), row-major in a window
    where = view.reshape(rows, (n, c, oh, 1, kh, 1)) * w + view.reshape(cols, (n, c, 1, ow, 1, kw))
    where = view.reshape(where, (n, c, oh * ow * kh * kw))
    planes = view.reshape(view.moveaxis(x, -1, 1), (n, c, h * w))
    taps = view.reshape(indexing.take_along_axis(planes, where, 2), (n, c, oh, ow, kh * kw))
    values = view.moveaxis(reduction.max(taps, -1), 1, -1)
    if unbatched:
        values = values[0]
    if not return_indices:
        return values
    tap = reduction.argmax(taps, -1)  # (the first maximum in the window)
    index = indexing.take_along_axis(
        view.reshape(where, (n, c, oh, ow, kh * kw)), view.unsqueeze(tap, -1), -1
    )
    index = view.moveaxis(view.squeeze(index, -1), 1, -1).cast(DType.int64)
    return values, (index[0] if unbatched else index)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):  # noqa: A002
    """PyTorch's ``F.max_unpool2d`` on NHWC: each value written at its index (from
    :func:`max_pool2d` with ``return_indices=True``) into a zero image, the inverse of the
    pooling's selection; differentiable in ``input``.

    Args:
        input: pooled values ``(N, OH, OW, C)`` (or ``(OH, OW, C)``).
        indices: their flat indices ``h * W + w``, of ``input``'s shape.
        kernel_size: int or pair.
        stride: int, pair or None (default: ``kernel_size``).
        padding: int or pair (default 0).
        output_size: the image's ``(H, W)``, or its whole channels-last shape ``(N, H,
            W, C)`` / ``(H, W, C)``; default ``(OH - 1) * stride - 2 * padding +
            kernel_size``.

    Returns:
        ``(N, H, W, C)`` (or ``(H, W, C)``).

    Raises:
        ValueError: for indices of another shape or outside the image.
    """
    op = "max_unpool2d"
    v, idx = as_tensor(input, op=op), as_tensor(indices, op=op)
    if v.ndim not in (3, 4) or idx.shape != v.shape:
        raise ValueError(
            f"{op}: expects input (N, OH, OW, C) and indices of its shape, got {v.shape} and "
            f"{idx.shape}"
        )
    unbatched = v.ndim == 3
    if unbatched:
        v, idx = v[None], idx[None]
    k = _nn_ops._pair(kernel_size, "kernel_size", op)
    s = k if stride is None else _nn_ops._pair(stride, "stride", op)
    p = _nn_ops._pair(padding, "padding", op, minimum=0)
    n, oh, ow, c = v.shape
    if output_size is None:
        h, w = ((oh - 1) * s[0] - 2 * p[0] + k[0], (ow - 1) * s[1] - 2 * p[1] + k[1])
    else:
        h, w = spatial_output_size(op, output_size, 2, c)
    if (
        readable_now(idx)
        and idx.size
        and (int(idx.min().item()) < 0 or int(idx.max().item()) >= h * w)
    ):
        raise ValueError(
            f"{op}: indices must be in [0, {h * w}) for an output of {h} x {w}, got "
            f"[{int(idx.min().item())}, {int(idx.max().item())}]"
        )
    flat = creation.zeros((n, h * w, c), dtype=v.dtype)
    out = indexing.put_along_axis(
        flat, idx.reshape(n, oh * ow, c), v.reshape(n, oh * ow, c), 1, inplace=False
    )
    out = out.reshape(n, h, w, c)
    return out[0] if unbatched else out


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):  # noqa: A002
    """PyTorch's ``F.max_unpool1d`` over sequences ``(N, L, C)`` (or ``(L, C)``):
    :func:`max_unpool2d` over a height of 1.

    Args:
        input: pooled values ``(N, OL, C)``.
        indices: their indices in the sequence, of ``input``'s shape.
        kernel_size: an int.
        stride: an int or None (default: ``kernel_size``).
        padding: an int (default 0).
        output_size: the output length, or the whole shape ``(N, L, C)`` / ``(L, C)``.

    Returns:
        ``(N, L, C)`` (or ``(L, C)``).
    """
    k = _one(kernel_size, "kernel_size", "max_unpool1d")
    s = k if stride is None else _one(stride, "stride", "max_unpool1d")
    p = _one(padding, "padding", "max_unpool1d")
    v2, unbatched = _as_2d("max_unpool1d", input)
    i2, _ = _as_2d("max_unpool1d", indices)
    size = None
    if output_size is not None:
        channels = v2.shape[-1]
        size = (1, *spatial_output_size("max_unpool1d", output_size, 1, channels))
    return _from_2d(max_unpool2d(v2, i2, (1, k), (1, s), (0, p), size), unbatched)


def avg_pool2d(
    x,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
) -> Tensor:
    """PyTorch's ``F.avg_pool2d`` on NHWC ``x`` (its arguments, in its order):
    :func:`nabla.avg_pool2d` with PyTorch's limit on the padding (at most half the window).

    Args:
        x: input ``(N, H, W, C)``.
        kernel_size: int or pair.
        stride: int, pair or None (default: ``kernel_size``).
        padding: int or pair, at most half the window.
        ceil_mode: round the output size up.
        count_include_pad: divide by the whole window, padding included (default True).
        divisor_override: a positive int that divides every window's sum instead.

    Returns:
        ``(N, OH, OW, C)``.

    Raises:
        ValueError: for padding past half the window, and as :func:`nabla.avg_pool2d`.
    """
    check_pool_padding("avg_pool2d", x, kernel_size, stride, padding)
    return _nn_ops.avg_pool2d(
        x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


def adaptive_avg_pool2d(x, output_size) -> Tensor:
    """PyTorch's ``adaptive_avg_pool2d`` on NHWC ``x``: output cell ``(i, j)`` is the mean of
    rows ``floor(i H / OH)`` to ``ceil((i + 1) H / OH)`` and the same for columns.

    Args:
        x: float input ``(N, H, W, C)`` (or ``(H, W, C)``).
        output_size: ``OH`` (square) or ``(OH, OW)``; None in the pair keeps that size.

    Returns:
        ``(N, OH, OW, C)``.

    Raises:
        ValueError: for an input that is not 3-D or 4-D, or an output size below 1.
    """
    x = as_tensor(x, op="adaptive_avg_pool2d")
    if x.ndim not in (3, 4):
        raise ValueError(f"adaptive_avg_pool2d: expected (N, H, W, C) or (H, W, C), got {x.shape}")
    h, w = x.shape[-3], x.shape[-2]
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    oh, ow = h if oh is None else int(oh), w if ow is None else int(ow)
    if oh < 1 or ow < 1:
        raise ValueError(f"adaptive_avg_pool2d: output size must be >= 1, got {(oh, ow)}")
    if h % oh == 0 and w % ow == 0:  # equal windows: one pool
        return avg_pool2d(x if x.ndim == 4 else x[None], (h // oh, w // ow)).reshape(
            x.shape[:-3] + (oh, ow, x.shape[-1])
        )

    def bins(n, out):
        return [(i * n // out, -(-(i + 1) * n // out)) for i in range(out)]

    rows = [x[..., a:b, :, :].mean(axis=-3, keepdims=True) for a, b in bins(h, oh)]
    x = view.concatenate(rows, axis=-3)
    cols = [x[..., a:b, :].mean(axis=-2, keepdims=True) for a, b in bins(w, ow)]
    return view.concatenate(cols, axis=-2)


def adaptive_max_pool2d(x, output_size, return_indices: bool = False) -> Tensor:
    """PyTorch's ``adaptive_max_pool2d`` on NHWC ``x``: output cell ``(i, j)`` is the
    maximum over rows ``floor(i H / OH)`` to ``ceil((i + 1) H / OH)`` and the same for
    columns.

    Args:
        x: input ``(N, H, W, C)`` (or ``(H, W, C)``).
        output_size: ``OH`` (square) or ``(OH, OW)``; None in the pair keeps that size.
        return_indices: also return where each maximum is (PyTorch's int64 ``h * W + w``,
            the first maximum of a window in row-major order), for :func:`max_unpool2d`.

    Returns:
        ``(N, OH, OW, C)``; with ``return_indices``, ``(values, indices)``.

    Raises:
        ValueError: for an input that is not 3-D or 4-D, or an output size below 1.
    """
    x = as_tensor(x, op="adaptive_max_pool2d")
    if x.ndim not in (3, 4):
        raise ValueError(f"adaptive_max_pool2d: expected (N, H, W, C) or (H, W, C), got {x.shape}")
    h, w = x.shape[-3], x.shape[-2]
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    oh, ow = h if oh is None else int(oh), w if ow is None else int(ow)
    if oh < 1 or ow < 1:
        raise ValueError(f"adaptive_max_pool2d: output size must be >= 1, got {(oh, ow)}")

    def bins(n, out):
        return [(i * n // out, -(-(i + 1) * n // out)) for i in range(out)]

    if return_indices:
        return _adaptive_max_with_indices(x, bins(h, oh), bins(w, ow))
    rows = [x[..., a:b, :, :].max(axis=-3, keepdims=True) for a, b in bins(h, oh)]
    x = view.concatenate(rows, axis=-3)
    cols = [x[..., a:b, :].max(axis=-2, keepdims=True) for a, b in bins(w, ow)]
    return view.concatenate(cols, axis=-2)


def _adaptive_max_with_indices(x, row_bins, col_bins):
    """Each adaptive window's maximum and its first position (row-major) as ``h * W + w``:
    the window's taps flattened, one ``argmax``, the tap turned into the plane's index."""
    w = x.shape[-2]
    values, indices = [], []
    for a, b in row_bins:
        row_values, row_indices = [], []
        for c, d in col_bins:
            window = x[..., a:b, c:d, :]
            taps = window.reshape(window.shape[:-3] + ((b - a) * (d - c), window.shape[-1]))
            tap = reduction.argmax(taps, -2)  # (the first maximum)
            row_values.append(reduction.max(taps, -2))
            row_indices.append(((a + tap // (d - c)) * w + c + tap % (d - c)).cast(DType.int64))
        values.append(view.stack(row_values, -2))
        indices.append(view.stack(row_indices, -2))
    return view.stack(values, -3), view.stack(indices, -3)


def spatial_output_size(op: str, output_size, n: int, channels: int) -> tuple:
    """The ``n`` spatial sizes of an ``output_size`` given alone, or with the channels
    last and the batch first (this layout's ``(N, H, W, C)``, as ``x.shape`` of a tensor
    of the wanted size gives it). A size whose last entry is not ``channels`` is refused:
    it is most likely PyTorch's ``(N, C, H, W)``, whose spatial sizes sit elsewhere."""
    given = tuple(int(v) for v in np.atleast_1d(output_size))
    if len(given) == n:
        return given
    if len(given) in (n + 1, n + 2) and given[-1] == channels:
        return given[-n - 1 : -1]
    raise ValueError(
        f"{op}: output_size {tuple(output_size)!r} is neither {n} spatial sizes nor a "
        f"channels-last shape ending in the {channels} channels (this layout's (N, "
        f"{('L', 'H, W', 'D, H, W')[n - 1]}, C); PyTorch's (N, C, ...) must be reordered)"
    )


def _as_2d(op: str, x):
    """``(x as (N, 1, L, C), unbatched)`` for a 1-D pool of ``(N, L, C)`` or ``(L, C)``."""
    x = as_tensor(x, op=op)
    if x.ndim not in (2, 3):
        raise ValueError(f"{op}: expected (N, L, C) or (L, C) (channels last), got {x.shape}")
    unbatched = x.ndim == 2
    return view.unsqueeze(x[None] if unbatched else x, 1), unbatched


def _from_2d(y, unbatched):
    y = view.squeeze(y, 1)
    return y[0] if unbatched else y


def _one(v, name: str, op: str) -> int:
    """A 1-D pool's size argument: an int or a 1-tuple."""
    if isinstance(v, tuple | list):
        if len(v) != 1:
            raise ValueError(f"{op}: {name} must be an int or a 1-tuple, got {v!r}")
        v = v[0]
    return int(v)


def max_pool1d(
    x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
) -> Tensor:
    """PyTorch's ``F.max_pool1d`` over sequences ``(N, L, C)`` (channels last; or ``(L,
    C)``): :func:`max_pool2d` over a height of 1.

    Args:
        x: input ``(N, L, C)`` or ``(L, C)``.
        kernel_size: an int.
        stride: an int or None (default: ``kernel_size``).
        padding: an int, at most half the window.
        dilation: spacing between window elements.
        ceil_mode: round the output length up.
        return_indices: also return where each maximum is in the sequence.

    Returns:
        ``(N, OL, C)`` (or ``(OL, C)``); with ``return_indices``, ``(values, indices)``.
    """
    k = _one(kernel_size, "kernel_size", "max_pool1d")
    s = k if stride is None else _one(stride, "stride", "max_pool1d")
    p, d = _one(padding, "padding", "max_pool1d"), _one(dilation, "dilation", "max_pool1d")
    x2, unbatched = _as_2d("max_pool1d", x)
    out = max_pool2d(x2, (1, k), (1, s), (0, p), (1, d), ceil_mode, return_indices)
    if return_indices:  # (a height of 1: the flat index is the position in the sequence)
        return _from_2d(out[0], unbatched), _from_2d(out[1], unbatched)
    return _from_2d(out, unbatched)


def _triple(v, name: str, op: str) -> tuple:
    """A 3-D pool's size argument: an int or 3 ints."""
    vals = (v,) * 3 if isinstance(v, numbers.Integral) and not isinstance(v, bool) else v
    if not isinstance(vals, tuple | list) or len(vals) != 3:
        raise ValueError(f"{op}: {name} must be an int or 3 ints, got {v!r}")
    return tuple(int(a) for a in vals)


def _pool3d(op: str, x, kernel_size, stride, padding, dilation, pool):
    """A 3-D pool as two 2-D pools (a window's max or sum splits by dims): ``pool(y, k, s,
    p, d)`` over (H, W) of every depth slice, then over (D, 1) of the results."""
    x = as_tensor(x, op=op)
    if x.ndim not in (4, 5):
        raise ValueError(
            f"{op}: expected (N, D, H, W, C) or (D, H, W, C) (channels last), got {x.shape}"
        )
    unbatched = x.ndim == 4
    if unbatched:
        x = x[None]
    k = _triple(kernel_size, "kernel_size", op)
    s = k if stride is None else _triple(stride, "stride", op)
    p, d = _triple(padding, "padding", op), _triple(dilation, "dilation", op)
    for i in range(3):  # PyTorch's limit, checked on the whole window (3-D names)
        if p[i] > ((k[i] - 1) * d[i] + 1) // 2:
            raise ValueError(
                f"{op}: padding {p} is more than half of the window {k} (dilation {d}) "
                f"for input {tuple(x.shape[1:] if unbatched else x.shape)}"
            )
    n, depth, h, w, c = x.shape
    planes = pool(x.reshape(n * depth, h, w, c), k[1:], s[1:], p[1:], d[1:])
    oh, ow = planes.shape[1:3]
    y = pool(planes.reshape(n, depth, oh * ow, c), (k[0], 1), (s[0], 1), (p[0], 0), (d[0], 1))
    y = y.reshape(n, y.shape[1], oh, ow, c)
    return y[0] if unbatched else y


def max_pool3d(
    x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
) -> Tensor:
    """PyTorch's ``F.max_pool3d`` over volumes ``(N, D, H, W, C)`` (channels last; or one
    ``(D, H, W, C)``): the max over (H, W) windows of each depth slice, then over depth.

    Args:
        x: input ``(N, D, H, W, C)`` or ``(D, H, W, C)``.
        kernel_size: int or 3 ints.
        stride: int, 3 ints or None (default: ``kernel_size``).
        padding: int or 3 ints, at most half the (dilated) window.
        dilation: int or 3 ints: spacing between window elements.
        ceil_mode: round the output sizes up.
        return_indices: must be False.

    Returns:
        ``(N, OD, OH, OW, C)`` (or ``(OD, OH, OW, C)``).

    Raises:
        ValueError: for a bad size argument or padding past half the window.
    """
    if return_indices:
        raise NotImplementedError("max_pool3d: return_indices=True is not supported")

    def pool(y, k, s, p, d):
        return _nn_ops.max_pool2d(y, k, s, p, d, ceil_mode)

    return _pool3d("max_pool3d", x, kernel_size, stride, padding, dilation, pool)


def avg_pool3d(
    x,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
) -> Tensor:
    """PyTorch's ``F.avg_pool3d`` over volumes ``(N, D, H, W, C)`` (channels last; or one
    ``(D, H, W, C)``), its arguments in its order: the mean over (H, W) windows of each
    depth slice, then over depth (a window's count is the product of its counts per dim,
    so the mean of the means is the mean).

    Args:
        x: input ``(N, D, H, W, C)`` or ``(D, H, W, C)``.
        kernel_size: int or 3 ints.
        stride: int, 3 ints or None (default: ``kernel_size``).
        padding: int or 3 ints, at most half the window.
        ceil_mode: round the output sizes up.
        count_include_pad: divide by the whole window, padding included (default True).
        divisor_override: a positive int that divides every window's sum instead.

    Returns:
        ``(N, OD, OH, OW, C)`` (or ``(OD, OH, OW, C)``).

    Raises:
        ValueError: for a bad size argument or padding past half the window.
    """
    stage = [1 if divisor_override is not None else None, divisor_override]

    def pool(y, k, s, p, d):  # (sums first when a divisor overrides the counts)
        divisor = stage.pop(0)
        return _nn_ops.avg_pool2d(y, k, s, p, ceil_mode, count_include_pad, divisor)

    return _pool3d("avg_pool3d", x, kernel_size, stride, padding, 1, pool)


def _adaptive3d(op: str, x, output_size, pool2d):
    """A 3-D adaptive pool as two 2-D ones (a bin's max or mean splits by dims): over (H,
    W) of every depth slice, then over depth."""
    x = as_tensor(x, op=op)
    if x.ndim not in (4, 5):
        raise ValueError(
            f"{op}: expected (N, D, H, W, C) or (D, H, W, C) (channels last), got {x.shape}"
        )
    unbatched = x.ndim == 4
    if unbatched:
        x = x[None]
    n, depth, h, w, c = x.shape
    size = (output_size,) * 3 if isinstance(output_size, numbers.Integral) else output_size
    if not isinstance(size, tuple | list) or len(size) != 3:
        raise ValueError(f"{op}: output_size must be an int or 3 sizes, got {output_size!r}")
    od, oh, ow = (dim if s is None else int(s) for s, dim in zip(size, (depth, h, w)))
    planes = pool2d(x.reshape(n * depth, h, w, c), (oh, ow))
    y = pool2d(planes.reshape(n, depth, oh * ow, c), (od, oh * ow))
    y = y.reshape(n, od, oh, ow, c)
    return y[0] if unbatched else y


def adaptive_avg_pool3d(x, output_size) -> Tensor:
    """PyTorch's ``adaptive_avg_pool3d`` on volumes ``(N, D, H, W, C)`` (channels last; or
    one ``(D, H, W, C)``): PyTorch's bins along each dim, each cell their mean.

    Args:
        x: float input.
        output_size: an int or ``(OD, OH, OW)`` (None in it keeps that size).

    Returns:
        ``(N, OD, OH, OW, C)`` (or ``(OD, OH, OW, C)``).
    """
    return _adaptive3d("adaptive_avg_pool3d", x, output_size, adaptive_avg_pool2d)


def adaptive_max_pool3d(x, output_size, return_indices: bool = False) -> Tensor:
    """PyTorch's ``adaptive_max_pool3d`` on volumes ``(N, D, H, W, C)`` (channels last; or
    one ``(D, H, W, C)``): PyTorch's bins along each dim, each cell their max.

    Args:
        x: input.
        output_size: an int or ``(OD, OH, OW)`` (None in it keeps that size).
        return_indices: must be False.

    Returns:
        ``(N, OD, OH, OW, C)`` (or ``(OD, OH, OW, C)``).
    """
    if return_indices:
        raise NotImplementedError("adaptive_max_pool3d: return_indices=True is not supported")
    return _adaptive3d("adaptive_max_pool3d", x, output_size, adaptive_max_pool2d)


def avg_pool1d(
    x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True
) -> Tensor:
    """PyTorch's ``F.avg_pool1d`` over sequences ``(N, L, C)`` (channels last; or ``(L,
    C)``): :func:`avg_pool2d` over a height of 1.

    Args:
        x: input ``(N, L, C)`` or ``(L, C)``.
        kernel_size: an int.
        stride: an int or None (default: ``kernel_size``).
        padding: an int, at most half the window.
        ceil_mode: round the output length up.
        count_include_pad: divide by the whole window, padding included (default True).

    Returns:
        ``(N, OL, C)`` (or ``(OL, C)``).
    """
    k = _one(kernel_size, "kernel_size", "avg_pool1d")
    s = k if stride is None else _one(stride, "stride", "avg_pool1d")
    p = _one(padding, "padding", "avg_pool1d")
    x2, unbatched = _as_2d("avg_pool1d", x)
    out = avg_pool2d(x2, (1, k), (1, s), (0, p), ceil_mode, count_include_pad)
    return _from_2d(out, unbatched)


def adaptive_avg_pool1d(x, output_size) -> Tensor:
    """PyTorch's ``F.adaptive_avg_pool1d`` over sequences ``(N, L, C)`` (or ``(L, C)``).

    Args:
        x: input ``(N, L, C)`` or ``(L, C)``.
        output_size: the output length.

    Returns:
        ``(N, OL, C)`` (or ``(OL, C)``).
    """
    x2, unbatched = _as_2d("adaptive_avg_pool1d", x)
    out = adaptive_avg_pool2d(x2, (1, _one(output_size, "output_size", "adaptive_avg_pool1d")))
    return _from_2d(out, unbatched)


def adaptive_max_pool1d(x, output_size, return_indices: bool = False) -> Tensor:
    """PyTorch's ``F.adaptive_max_pool1d`` over sequences ``(N, L, C)`` (or ``(L, C)``).

    Args:
        x: input ``(N, L, C)`` or ``(L, C)``.
        output_size: the output length.
        return_indices: also return where each maximum is in the sequence (int64).

    Returns:
        ``(N, OL, C)`` (or ``(OL, C)``); with ``return_indices``, ``(values, indices)``.
    """
    x2, unbatched = _as_2d("adaptive_max_pool1d", x)
    size = (1, _one(output_size, "output_size", "adaptive_max_pool1d"))
    out = adaptive_max_pool2d(x2, size, return_indices)
    if return_indices:  # (a height of 1: the flat index is the position in the sequence)
        return _from_2d(out[0], unbatched), _from_2d(out[1], unbatched)
    return _from_2d(out, unbatched)


def pixel_shuffle(x, upscale_factor: int) -> Tensor:
    """PyTorch's ``F.pixel_shuffle`` on NHWC ``x``: ``(N, H, W, C r^2)`` to ``(N, H r, W r,
    C)``, output pixel ``(h r + i, w r + j)`` of channel ``c`` taking input channel ``c r^2
    + i r + j`` (PyTorch's order of the channels).

    Args:
        x: input ``(..., H, W, C r^2)``.
        upscale_factor: ``r``.

    Returns:
        ``(..., H r, W r, C)``.

    Raises:
        ValueError: for channels not divisible by ``r^2``.
    """
    x = as_tensor(x, op="pixel_shuffle")
    r = int(upscale_factor)
    *lead, h, w, c = x.shape
    if x.ndim < 3 or r < 1 or c % (r * r):
        raise ValueError(
            f"pixel_shuffle: channels {c} of input {x.shape} must be divisible by "
            f"upscale_factor^2 = {r * r}"
        )
    co = c // (r * r)
    y = x.reshape(*lead, h, w, co, r, r)
    n = len(lead)
    y = view.permute(y, (*range(n), n, n + 3, n + 1, n + 4, n + 2))
    return y.reshape(*lead, h * r, w * r, co)


def pixel_unshuffle(x, downscale_factor: int) -> Tensor:
    """PyTorch's ``F.pixel_unshuffle`` on NHWC ``x``: the inverse of :func:`pixel_shuffle`.

    Args:
        x: input ``(..., H r, W r, C)``.
        downscale_factor: ``r``.

    Returns:
        ``(..., H, W, C r^2)``.

    Raises:
        ValueError: for a height or width not divisible by ``r``.
    """
    x = as_tensor(x, op="pixel_unshuffle")
    r = int(downscale_factor)
    *lead, hr, wr, c = x.shape
    if x.ndim < 3 or r < 1 or hr % r or wr % r:
        raise ValueError(
            f"pixel_unshuffle: height and width of input {x.shape} must be divisible by "
            f"downscale_factor {r}"
        )
    n = len(lead)
    y = x.reshape(*lead, hr // r, r, wr // r, r, c)
    y = view.permute(y, (*range(n), n, n + 2, n + 4, n + 1, n + 3))
    return y.reshape(*lead, hr // r, wr // r, c * r * r)


def _block_args(op: str, kernel_size, dilation, padding, stride):
    """``unfold``/``fold``'s arguments as pairs, checked as PyTorch checks them."""
    k = _nn_ops._pair(kernel_size, "kernel_size", op)
    d = _nn_ops._pair(dilation, "dilation", op)
    p = _nn_ops._pair(padding, "padding", op, minimum=0)
    s = _nn_ops._pair(stride, "stride", op)
    return k, d, p, s


def _blocks(op: str, size, k, d, p, s) -> tuple:
    """The number of sliding blocks along H and W of an image of spatial ``size``."""
    out = tuple((size[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2))
    if min(out) < 1:
        raise ValueError(
            f"{op}: spatial size {tuple(size)} with padding {p} is too small for "
            f"kernel_size {k} with dilation {d} (no sliding block fits)"
        )
    return out


def unfold(input, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:  # noqa: A002
    """PyTorch's ``F.unfold`` (im2col) on a channels-last image: every sliding block of
    ``input`` flattened, ``(N, H, W, C)`` to ``(N, L, C * KH * KW)``, where PyTorch gives
    ``(N, C * KH * KW, L)`` for ``(N, C, H, W)``: block ``l = oh * OW + ow`` in PyTorch's
    order, and within a block PyTorch's order of the values, ``c * KH * KW + i * KW + j``
    (so a PyTorch conv weight ``(O, C, KH, KW)`` reshaped to ``(O, C * KH * KW)`` applies
    as ``unfold(x) @ w.T``).

    Args:
        input: ``(N, H, W, C)``, or one image ``(H, W, C)``.
        kernel_size: int or pair: the block's size.
        dilation: int or pair: the spacing of the block's taps (default 1).
        padding: int or pair: zeros added on both sides of H and W (default 0).
        stride: int or pair: the step between blocks (default 1).

    Returns:
        ``(N, L, C * KH * KW)`` (``(L, C * KH * KW)`` for one image), ``L = OH * OW``.

    Raises:
        ValueError: for an input of another rank, or no block fitting.
    """
    x = as_tensor(input, op="unfold")
    if x.ndim not in (3, 4):
        raise ValueError(
            f"unfold: expects an image (H, W, C) or a batch (N, H, W, C) (channels last), "
            f"got shape {x.shape}"
        )
    k, d, p, s = _block_args("unfold", kernel_size, dilation, padding, stride)
    unbatched = x.ndim == 3
    if unbatched:
        x = view.unsqueeze(x, 0)
    n, h, w, c = x.shape
    oh, ow = _blocks("unfold", (h, w), k, d, p, s)
    if any(p):
        x = view.pad(x, ((0, 0), (p[0], p[0]), (p[1], p[1]), (0, 0)))
    cols = _nn_ops._windows(x, k, s, d, (oh, ow))  # (N, OH, OW, KH*KW, C)
    out = view.permute(cols, (0, 1, 2, 4, 3)).reshape(n, oh * ow, c * k[0] * k[1])
    return out[0] if unbatched else out


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:  # noqa: A002
    """PyTorch's ``F.fold`` (col2im) to a channels-last image, the adjoint of
    :func:`unfold`: each block's values added back at the positions ``unfold`` took them
    from (overlaps summed), ``(N, L, C * KH * KW)`` to ``(N, H, W, C)``.

    Args:
        input: ``(N, L, C * KH * KW)``, or ``(L, C * KH * KW)``.
        output_size: int or pair: the image's ``(H, W)``.
        kernel_size: int or pair: the block's size.
        dilation: int or pair: the spacing of the block's taps (default 1).
        padding: int or pair: the zero padding ``unfold`` added, cut off again (default 0).
        stride: int or pair: the step between blocks (default 1).

    Returns:
        ``(N, H, W, C)`` (``(H, W, C)`` for an unbatched input).

    Raises:
        ValueError: for an input of another rank, a last dim not divisible by
            ``KH * KW``, or a number of blocks ``L`` other than the output size gives.
    """
    x = as_tensor(input, op="fold")
    if x.ndim not in (2, 3):
        raise ValueError(
            f"fold: expects (N, L, C * KH * KW) or (L, C * KH * KW), got shape {x.shape}"
        )
    size = _nn_ops._pair(output_size, "output_size", "fold")
    k, d, p, s = _block_args("fold", kernel_size, dilation, padding, stride)
    given, unbatched = x.shape, x.ndim == 2
    if unbatched:
        x = view.unsqueeze(x, 0)
    n, blocks, ckk = x.shape
    kk = k[0] * k[1]
    if ckk % kk:
        raise ValueError(
            f"fold: the last dim of input {given} must be divisible by the product of "
            f"kernel_size {k} ({kk})"
        )
    oh, ow = _blocks("fold", size, k, d, p, s)
    if blocks != oh * ow:
        raise ValueError(
            f"fold: output_size {size}, kernel_size {k}, dilation {d}, padding {p} and "
            f"stride {s} make {oh} x {ow} = {oh * ow} blocks, but input of shape {given} "
            f"has {blocks}"
        )
    c = ckk // kk
    cols = view.permute(x.reshape(n, oh, ow, c, kk), (0, 1, 2, 4, 3))
    padded = (size[0] + 2 * p[0], size[1] + 2 * p[1])
    img = _nn_ops._windows_sum(cols, padded, k, s, d)
    if any(p):
        img = img[:, p[0] : p[0] + size[0], p[1] : p[1] + size[1], :]
    return img[0] if unbatched else img


def lp_pool2d(x, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
    """PyTorch's ``F.lp_pool2d`` on NHWC ``x``: ``(sum of x^p over each window)^(1/p)``
    (PyTorch's formula: the window's mean of ``x^p`` times its size, negative sums clamped
    to 0; ``x^p`` of a negative ``x`` is NaN for a fractional ``p``, as there).

    Args:
        x: input ``(N, H, W, C)`` (or one ``(H, W, C)``).
        norm_type: ``p``.
        kernel_size: int or pair.
        stride: int, pair or None (default: ``kernel_size``).
        ceil_mode: round the output size up.

    Returns:
        ``(N, OH, OW, C)``.
    """
    x = as_tensor(x, op="lp_pool2d")
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    p = float(norm_type)
    mean = avg_pool2d(x**p, (kh, kw), stride, 0, ceil_mode)
    total = binary.maximum(mean, 0.0) * float(kh * kw)
    return total ** (1.0 / p)


def lp_pool1d(x, norm_type: float, kernel_size: int, stride=None, ceil_mode: bool = False):
    """PyTorch's ``F.lp_pool1d`` over sequences ``(N, L, C)`` (channels last; or ``(L,
    C)``): :func:`lp_pool2d` over a height of 1.

    Args:
        x: input ``(N, L, C)`` or ``(L, C)``.
        norm_type: ``p``.
        kernel_size: an int.
        stride: an int or None (default: ``kernel_size``).
        ceil_mode: round the output length up.

    Returns:
        ``(N, OL, C)`` (or ``(OL, C)``).
    """
    k = _one(kernel_size, "kernel_size", "lp_pool1d")
    s = k if stride is None else _one(stride, "stride", "lp_pool1d")
    x2, unbatched = _as_2d("lp_pool1d", x)
    return _from_2d(lp_pool2d(x2, norm_type, (1, k), (1, s), ceil_mode), unbatched)


def rrelu(
    x,
    lower: float = 1.0 / 8,
    upper: float = 1.0 / 3,
    training: bool = False,
    key=None,
    *,
    inplace: bool = False,
) -> Tensor:
    """PyTorch's ``F.rrelu``: ``x`` where non-negative, ``a x`` elsewhere, with ``a`` drawn
    uniformly from ``[lower, upper]`` per element while training, ``(lower + upper) / 2`` in
    evaluation (``training=False``, the function's default as PyTorch's).

    Args:
        x: the input.
        lower: the lowest slope (default 1/8).
        upper: the highest slope (default 1/3).
        training: draw the slopes (default False).
        key: an RNG key for a reproducible draw; None uses the global generator.
        inplace: PyTorch's flag (keyword), accepted; the result is a new tensor.

    Returns:
        A tensor like ``x``.
    """
    _inplace("rrelu", inplace)
    x = as_tensor(x, op="rrelu")
    if not 0.0 <= lower <= upper:
        raise ValueError(f"rrelu: needs 0 <= lower <= upper, got lower={lower}, upper={upper}")
    if training:
        if key is None:
            slope = _random.uniform(x.shape, lower, upper, dtype=x.dtype)
        else:
            slope = _random.uniform(key, x.shape, lower, upper, dtype=x.dtype)
    else:
        slope = (lower + upper) / 2.0
    return binary.where(x >= 0, x, x * slope)


_SELU_ALPHA_PRIME = -1.7580993408473766  # -scale * alpha of selu: its negative saturation


def _alpha_dropout(op, x, p, training, key, per_channel: bool):
    x = as_tensor(x, op=op)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    shape = tuple(x.shape)
    if per_channel:  # one draw per example and channel (channels last)
        if x.ndim < 3:
            raise ValueError(f"{op}: expected (N, ..., C) with spatial dims, got {x.shape}")
        shape = shape[:1] + (1,) * (x.ndim - 2) + shape[-1:]
    keep = 1.0 - p
    if key is None:
        mask = _random.bernoulli(shape, keep)
    else:
        mask = _random.bernoulli(key, keep, shape)
    a = (keep * (1.0 + p * _SELU_ALPHA_PRIME**2)) ** -0.5
    b = -a * _SELU_ALPHA_PRIME * p
    dropped = binary.where(mask, x, creation.full((), _SELU_ALPHA_PRIME, x.dtype))
    return dropped * a + b


def alpha_dropout(x, p: float = 0.5, training: bool = False, key=None, *, inplace=False):
    """PyTorch's ``F.alpha_dropout`` (for SELU networks): dropped elements take SELU's
    negative saturation value, then an affine map keeps the mean and variance.

    Args:
        x: the input.
        p: the drop probability (default 0.5).
        training: apply it (default False, as PyTorch's function).
        key: an RNG key for a reproducible mask; None uses the global generator.
        inplace: PyTorch's flag (keyword), accepted.

    Returns:
        A tensor like ``x``.
    """
    _inplace("alpha_dropout", inplace)
    return _alpha_dropout("alpha_dropout", x, p, training, key, False)


def feature_alpha_dropout(x, p: float = 0.5, training: bool = False, key=None, *, inplace=False):
    """PyTorch's ``F.feature_alpha_dropout``, channels last: :func:`alpha_dropout` of whole
    channels (one draw per example and channel).

    Args:
        x: the input ``(N, ..., C)``.
        p: the drop probability (default 0.5).
        training: apply it (default False, as PyTorch's function).
        key: an RNG key for a reproducible mask; None uses the global generator.
        inplace: PyTorch's flag (keyword), accepted.

    Returns:
        A tensor like ``x``.
    """
    _inplace("feature_alpha_dropout", inplace)
    return _alpha_dropout("feature_alpha_dropout", x, p, training, key, True)


def channel_shuffle(x, groups: int) -> Tensor:
    """PyTorch's ``F.channel_shuffle`` on channels-last ``x``: the ``C`` channels seen as
    ``(groups, C / groups)`` and transposed (ShuffleNet's mixing of group convolutions).

    Args:
        x: input ``(..., C)``.
        groups: divides ``C``.

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: for channels not divisible by ``groups``.
    """
    x = as_tensor(x, op="channel_shuffle")
    g = int(groups)
    c = x.shape[-1]
    if x.ndim < 1 or g < 1 or c % g:
        raise ValueError(
            f"channel_shuffle: channels {c} of input {x.shape} must be divisible by groups {groups}"
        )
    lead = x.shape[:-1]
    y = view.swap_axes(x.reshape(*lead, g, c // g), -1, -2)
    return y.reshape(*lead, c)


def local_response_norm(x, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
    """PyTorch's ``F.local_response_norm`` on channels-last ``x``: each value divided by
    ``(k + alpha * mean(x^2 over the size channels around it))^beta``, the window from
    ``size // 2`` channels before to ``(size - 1) // 2`` after, zeros past the ends counted
    in the mean.

    Args:
        x: input ``(N, ..., C)`` (at least 2-D).
        size: the number of channels in a window.
        alpha: the scale of the mean of squares (default 1e-4).
        beta: the exponent (default 0.75).
        k: the additive constant (default 1).

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: for an input of fewer than 2 dims or a size below 1.
    """
    x = as_tensor(x, op="local_response_norm")
    if x.ndim < 2 or int(size) < 1:
        raise ValueError(
            f"local_response_norm: expected an input of 2 or more dims (channels last) and "
            f"size >= 1, got shape {x.shape} and size {size!r}"
        )
    n = int(size)
    sq = x * x
    pads = [(0, 0)] * (x.ndim - 1) + [(n // 2 + 1, (n - 1) // 2)]
    run = reduction.cumsum(view.pad(sq, pads), axis=-1)  # (a zero first: window sums by
    total = run[..., n:] - run[..., :-n]  # differences of the running sum)
    return x / (k + alpha * total / n) ** beta


def pdist(input, p: float = 2.0) -> Tensor:  # noqa: A002 - PyTorch name
    """PyTorch's ``F.pdist``: the ``p``-norm distance between each pair of rows ``i < j``
    of ``input`` ``(N, M)``, in row-major order of the pairs, ``(N (N - 1) / 2,)``; a zero
    distance has a zero gradient.

    Args:
        input: ``(N, M)``.
        p: the norm's order (``inf`` too; 0 counts the differing entries).

    Returns:
        ``(N (N - 1) / 2,)``.

    Raises:
        ValueError: for an input that is not 2-D.
    """
    x = as_tensor(input, op="pdist")
    if x.ndim != 2:
        raise ValueError(f"pdist: expected a 2-D input (N, M), got shape {x.shape}")
    i, j = np.triu_indices(x.shape[0], 1)
    diff = unary.abs(x[i.astype(np.int64)] - x[j.astype(np.int64)])
    if p == math.inf:
        return reduction.max(diff, -1)
    if p == 0:
        return reduction.sum((diff != 0).cast(x.dtype), -1)
    total = reduction.sum(diff ** float(p), -1)
    zero = total == 0
    return binary.where(zero, 0.0, binary.where(zero, 1.0, total) ** (1.0 / float(p)))


def gumbel_softmax(
    logits, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1, key=None
) -> Tensor:
    """PyTorch's ``F.gumbel_softmax``: ``softmax((logits + g) / tau)`` along ``dim`` with
    standard Gumbel noise ``g``; ``hard=True`` returns the one-hot of its argmax with the
    soft sample's gradient (straight-through).

    Args:
        logits: unnormalized log-probabilities.
        tau: the temperature (> 0).
        hard: return one-hot samples (straight-through gradients).
        eps: PyTorch's (unused there too).
        dim: the categories' axis (default -1).
        key: an RNG key for a reproducible draw; None uses the global generator.

    Returns:
        A tensor like ``logits``.

    Raises:
        ValueError: for ``tau <= 0``.
    """
    x = as_tensor(logits, op="gumbel_softmax")
    if not tau > 0:
        raise ValueError(f"gumbel_softmax: tau must be > 0, got {tau!r}")
    if key is None:  # the global generator's uniforms, made Gumbel as random.gumbel does
        u = _random.uniform(x.shape, dtype=x.dtype)
        u = binary.maximum(u, float(np.finfo(x.dtype.numpy).tiny))
        g = -unary.log(-unary.log(u))
    else:
        g = _random.gumbel(key, x.shape, dtype=x.dtype)
    soft = softmax((x + g) / tau, dim)
    if not hard:
        return soft
    axis = dim % x.ndim
    index = reduction.argmax(soft, axis)
    onehot = one_hot(index, x.shape[axis], dtype=x.dtype, axis=axis)
    return onehot - unary.stop_gradient(soft) + soft


def bilinear(input1, input2, weight, bias=None) -> Tensor:
    """PyTorch's ``F.bilinear``: ``y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] +
    b[o]``, with PyTorch's weight layout ``(out, in1, in2)``.

    Args:
        input1: ``(..., in1)``.
        input2: ``(..., in2)`` (the same leading dims).
        weight: ``(out, in1, in2)``.
        bias: optional ``(out,)``.

    Returns:
        ``(..., out)``.

    Raises:
        ValueError: for sizes that do not fit, naming the shapes.
    """
    a, b = as_tensor(input1, op="bilinear"), as_tensor(input2, op="bilinear")
    w = as_tensor(weight, op="bilinear")
    if w.ndim != 3 or a.shape[-1:] != w.shape[1:2] or b.shape[-1:] != w.shape[2:]:
        raise ValueError(
            f"bilinear: input1 {a.shape}, input2 {b.shape} and weight {w.shape} do not fit "
            "(weight (out, in1, in2), inputs (..., in1) and (..., in2))"
        )
    y = linalg.einsum("...i,oij,...j->...o", a, w, b)
    return y if bias is None else y + as_tensor(bias, op="bilinear")


def softplus(x, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``
    (PyTorch's ``softplus``).

    Args:
        x: the input.
        beta: the sharpness (default 1).
        threshold: above it (in ``beta * x``) the result is ``x`` (default 20, where the
            two already agree to float32 precision, so it changes nothing there).

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: for ``beta <= 0``.
    """
    if beta <= 0:
        raise ValueError(f"softplus: beta must be positive, got {beta}")
    x = as_tensor(x, op="softplus")
    if beta == 1.0 and threshold == 20.0:  # (the op is linear from 17 on already)
        return unary.softplus(x)
    z = x * beta
    # x itself above the threshold, as PyTorch's: where ``beta * x`` overflows (float16,
    # beta 100, x 700) the curve is inf, but the value is x
    return binary.where(z > threshold, x, unary.softplus(z) / beta)


def leaky_relu(x, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` where positive, ``negative_slope * x`` elsewhere. The derivative at 0 is
    ``negative_slope``, as PyTorch's (``jax.nn.leaky_relu``'s is 1).

    Args:
        x: the input.
        negative_slope: the slope for negative inputs (default 0.01).
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.
    """
    _inplace("leaky_relu", inplace)
    x = as_tensor(x, op="leaky_relu")
    return binary.where(x > 0, x, x * negative_slope)


def relu6(x, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)`` (PyTorch's ``relu6``).

    Args:
        x: the input.
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.
    """
    _inplace("relu6", inplace)
    return hardtanh(as_tensor(x, op="relu6"), 0.0, 6.0)


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` clipped to ``[min_val, max_val]`` (PyTorch's ``hardtanh``; its gradient is 1
    strictly inside the interval and 0 elsewhere, at the bounds too, as PyTorch's).

    Args:
        x: the input.
        min_val: the lower bound (default -1).
        max_val: the upper bound (default 1).
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: when ``min_val`` is above ``max_val`` (PyTorch's).
    """
    _inplace("hardtanh", inplace)
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} is greater than max_val {max_val}")
    x = as_tensor(x, op="hardtanh")
    return binary.where(x <= min_val, min_val, binary.where(x >= max_val, max_val, x))


def elu(x, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere (PyTorch's ``elu``).

    Args:
        x: the input.
        alpha: the scale of the negative part (default 1).
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.
    """
    _inplace("elu", inplace)
    x = as_tensor(x, op="elu")
    positive = x > 0
    # expm1 only sees the negative part: a large x never makes inf * 0 in the gradient
    return binary.where(positive, x, alpha * unary.expm1(binary.where(positive, 0.0, x)))


_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805


def selu(x, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with the self-normalizing constants (PyTorch's ``selu``).

    Args:
        x: the input.
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.
    """
    _inplace("selu", inplace)
    return _SELU_SCALE * elu(as_tensor(x, op="selu"), _SELU_ALPHA)


def mish(x, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))`` (PyTorch's ``mish``).

    Args:
        x: the input.
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.
    """
    _inplace("mish", inplace)
    x = as_tensor(x, op="mish")
    return x * unary.tanh(unary.softplus(x))


def hardsigmoid(x, inplace: bool = False) -> Tensor:
    """``relu6(x + 3) / 6`` (PyTorch's ``hardsigmoid``).

    Args:
        x: the input.
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.
    """
    _inplace("hardsigmoid", inplace)
    return hardtanh(as_tensor(x, op="hardsigmoid") / 6.0 + 0.5, 0.0, 1.0)


def hardswish(x, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6`` (PyTorch's ``hardswish``).

    Args:
        x: the input.
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.
    """
    _inplace("hardswish", inplace)
    x = as_tensor(x, op="hardswish")
    # PyTorch's pieces with its boundaries (the gradient at -3 is 0, at 3 it is 1); the
    # middle piece on x clipped to [-3, 3], so an infinite x gives it no 0 * inf gradient
    mid = binary.clip(x, -3.0, 3.0)
    return binary.where(x <= -3.0, 0.0, binary.where(x < 3.0, mid * (mid + 3.0) / 6.0, x))


def logsigmoid(x) -> Tensor:
    """``log(sigmoid(x)) = -softplus(-x)``, without overflow (PyTorch's ``logsigmoid``).

    Args:
        x: the input.

    Returns:
        A tensor like ``x``.
    """
    return -unary.softplus(-as_tensor(x, op="logsigmoid"))


def linear(x, weight, bias=None) -> Tensor:
    """``x @ weight + bias`` over the last axis of ``x``.

    Args:
        x: input ``(..., in_features)``.
        weight: ``(in_features, out_features)``.
        bias: optional ``(out_features,)``.

    Returns:
        ``(..., out_features)``.

    Raises:
        ValueError: if the feature sizes do not match.

    Example:
        >>> nb.nn.functional.linear(nb.ones((2, 3)), nb.ones((3, 4))).shape
        (2, 4)
    """
    x, weight = as_tensor(x, op="linear"), as_tensor(weight, op="linear")
    if weight.ndim != 2:
        raise ValueError(f"linear: weight must be (in_features, out_features), got {weight.shape}")
    if x.ndim == 0 or x.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"linear: input of shape {x.shape} has {x.shape[-1] if x.ndim else 0} features, "
            f"weight of shape {weight.shape} expects {weight.shape[0]}"
        )
    y = x @ weight
    if bias is None:
        return y
    bias = as_tensor(bias, op="linear")
    # (out_features,), or any shape that broadcasts onto the output (the original's (1, out))
    if not broadcasts_onto(bias.shape, y.shape):
        raise ValueError(
            f"linear: bias of shape {bias.shape} for {weight.shape[1]} output features "
            f"(weight of shape {weight.shape}, output of shape {y.shape}); expected "
            f"({weight.shape[1]},)"
        )
    return y + bias


def _check_normalized(fn, x: Tensor, normalized_shape) -> tuple:
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(int(d) for d in normalized_shape)
    n = len(normalized_shape)
    if n == 0 or tuple(x.shape[-n:]) != normalized_shape or x.ndim < n:
        raise ValueError(
            f"{fn}: input of shape {x.shape} does not end with normalized_shape {normalized_shape}"
        )
    return tuple(range(-n, 0))


def _check_norm_axes(fn, x: Tensor, axis) -> tuple:
    """``axis`` (an int or a tuple of ints, negative counting from the end) as a tuple of
    distinct non-negative axes of ``x``."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if not axes or not all(isinstance(a, int) and not isinstance(a, bool) for a in axes):
        raise ValueError(f"{fn}: axis must be an int or a non-empty tuple of ints, got {axis!r}")
    if any(not -x.ndim <= a < x.ndim for a in axes):
        raise ValueError(f"{fn}: axis {axis!r} is out of range for an input of shape {x.shape}")
    axes = tuple(a % x.ndim for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{fn}: axis {axis!r} repeats an axis")
    return axes


def layer_norm(
    x, normalized_shape=None, weight=None, bias=None, eps: float = 1e-5, *, axis=None
) -> Tensor:
    """Normalize over the trailing ``normalized_shape`` dims (or the dims ``axis``) to zero mean
    and unit variance, then scale by ``weight`` and shift by ``bias``.

    Args:
        x: the input.
        normalized_shape: int or tuple: the trailing dims to normalize over (PyTorch's form).
        weight: optional scale, broadcast against ``x`` (shape ``normalized_shape``).
        bias: optional shift, broadcast against ``x``.
        eps: added to the variance (default 1e-5).
        axis: the original nabla's form (keyword only): an axis or a tuple of axes to
            normalize over, any of ``x``'s, not only trailing ones. With neither
            ``normalized_shape`` nor ``axis``, the last axis.

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: if ``x`` does not end with ``normalized_shape``, for an ``axis`` out of
            range or repeated, or for both ``normalized_shape`` and ``axis``.

    Example:
        >>> F.layer_norm(nb.constant([[1.0, 3.0]]), axis=-1).tolist()
        [[-0.9999949932098389, 0.9999949932098389]]
    """
    x = as_tensor(x, op="layer_norm")
    if normalized_shape is not None and axis is not None:
        raise ValueError(
            f"layer_norm: got both normalized_shape={normalized_shape!r} and axis={axis!r}; "
            "pass one"
        )
    if normalized_shape is not None:
        axes = _check_normalized("layer_norm", x, normalized_shape)
    else:
        axes = _check_norm_axes("layer_norm", x, -1 if axis is None else axis)
    _check_scales("layer_norm", x, axes, weight=weight, bias=bias)
    x0, x = x, widened(x)
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = centered.square().mean(axis=axes, keepdims=True)
    y = centered * unary.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.cast(x0.dtype) if x0.dtype.is_float and y.dtype is not x0.dtype else y


def _check_scales(op: str, x: Tensor, axes, **scales) -> None:
    """A norm's ``weight``/``bias`` must have the shape of the normalized dims."""
    want = tuple(x.shape[a] for a in axes)
    for name, v in scales.items():
        if v is not None and tuple(as_tensor(v, op=op).shape) != want:
            raise ValueError(
                f"{op}: {name} of shape {tuple(as_tensor(v).shape)} for normalized "
                f"dims {want} (input of shape {x.shape})"
            )


def rms_norm(x, normalized_shape, weight=None, eps: float | None = None) -> Tensor:
    """Root-mean-square norm: ``x / sqrt(mean(x ** 2) + eps) * weight`` over the trailing dims.

    Args:
        x: the input.
        normalized_shape: int or tuple: the trailing dims to normalize over.
        weight: optional scale of shape ``normalized_shape``.
        eps: added to the mean square (default: the machine epsilon of the dtype it is
            computed in, float32 for half inputs, as PyTorch's ``rms_norm``).

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: if ``x`` does not end with ``normalized_shape``, or ``weight`` does not
            have that shape.
    """
    x0 = as_tensor(x, op="rms_norm")
    axes = _check_normalized("rms_norm", x0, normalized_shape)
    _check_scales("rms_norm", x0, axes, weight=weight)
    x = widened(x0)
    if eps is None:
        eps = float(ml_dtypes.finfo(x.dtype.numpy).eps) if x.dtype.is_float else 0.0
    y = x * unary.rsqrt(x.square().mean(axis=axes, keepdims=True) + eps)
    y = y if weight is None else y * weight
    return y.cast(x0.dtype) if x0.dtype.is_float and y.dtype is not x0.dtype else y


def dropout(
    x, p: float = 0.5, training: bool = True, key: Tensor | None = None, *, inplace: bool = False
) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    A fresh mask is drawn on every call (under ``nb.compile`` too) unless ``key`` is given.

    Args:
        x: the input.
        p: the drop probability in ``[0, 1]`` (default 0.5; 1 gives zeros).
        training: when False, return ``x`` unchanged.
        key: an RNG key for a reproducible mask; None uses the global generator.
        inplace: PyTorch's flag (keyword), accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: for ``p`` outside ``[0, 1]``.
    """
    _inplace("dropout", inplace)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    x = as_tensor(x, op="dropout")
    if not training or p == 0.0:
        return x
    if p == 1.0:  # everything dropped, as PyTorch's x * 0: a zero gradient (inf gives NaN)
        return x * 0.0
    keep = 1.0 - p
    if key is None:
        mask = _random.bernoulli(x.shape, keep)
    else:
        mask = _random.bernoulli(key, keep, x.shape)
    return binary.where(mask, x / keep, creation.zeros((), dtype=x.dtype))


def _channel_dropout(op: str, spatial: int, layout: str, x, p, training, key, inplace):
    """Zero whole channels: one draw per example and channel, spread over the
    ``spatial`` dims of a channels-last input (batched or not)."""
    _inplace(op, inplace)
    x = as_tensor(x, op=op)
    if x.ndim not in (spatial + 1, spatial + 2):
        raise ValueError(f"{op}: expected {layout} (channels last), got shape {x.shape}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    ones = creation.ones(
        x.shape[: x.ndim - spatial - 1] + (1,) * spatial + x.shape[-1:], dtype=x.dtype
    )
    return x * dropout(ones, p, True, key)


def dropout1d(x, p: float = 0.5, training: bool = True, key=None, *, inplace: bool = False):
    """PyTorch's ``F.dropout1d``, channels last: zero whole channels of sequences ``(N, L,
    C)`` (or one ``(L, C)``) with probability ``p``, one draw per sequence and channel, the
    kept ones scaled by ``1 / (1 - p)``.

    Args:
        x: the input.
        p: the drop probability in ``[0, 1]`` (default 0.5).
        training: when False, return ``x`` unchanged.
        key: an RNG key for a reproducible mask; None uses the global generator.
        inplace: PyTorch's flag (keyword), accepted; the result is a new tensor.

    Returns:
        A tensor like ``x``.
    """
    return _channel_dropout("dropout1d", 1, "(N, L, C) or (L, C)", x, p, training, key, inplace)


def dropout2d(x, p: float = 0.5, training: bool = True, key=None, *, inplace: bool = False):
    """PyTorch's ``F.dropout2d``, channels last: zero whole channels of NHWC images (or
    one ``(H, W, C)``), one draw per image and channel.

    Args:
        x: the input.
        p: the drop probability in ``[0, 1]`` (default 0.5).
        training: when False, return ``x`` unchanged.
        key: an RNG key for a reproducible mask; None uses the global generator.
        inplace: PyTorch's flag (keyword), accepted; the result is a new tensor.

    Returns:
        A tensor like ``x``.
    """
    return _channel_dropout(
        "dropout2d", 2, "(N, H, W, C) or (H, W, C)", x, p, training, key, inplace
    )


def dropout3d(x, p: float = 0.5, training: bool = True, key=None, *, inplace: bool = False):
    """PyTorch's ``F.dropout3d``, channels last: zero whole channels of volumes ``(N, D, H,
    W, C)`` (or one ``(D, H, W, C)``), one draw per volume and channel.

    Args:
        x: the input.
        p: the drop probability in ``[0, 1]`` (default 0.5).
        training: when False, return ``x`` unchanged.
        key: an RNG key for a reproducible mask; None uses the global generator.
        inplace: PyTorch's flag (keyword), accepted; the result is a new tensor.

    Returns:
        A tensor like ``x``.
    """
    return _channel_dropout(
        "dropout3d", 3, "(N, D, H, W, C) or (D, H, W, C)", x, p, training, key, inplace
    )


def embedding(
    indices,
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of ``weight`` picked by integer ``indices``: shape ``indices.shape + (dim,)``.

    Args:
        indices: an integer tensor of row numbers in ``[0, num_embeddings)``.
        weight: the table ``(num_embeddings, dim)``.
        padding_idx: optional row whose lookups pass no gradient to ``weight`` (PyTorch's).
        max_norm: rescale each looked-up row whose ``norm_type``-norm exceeds it to that
            norm, in ``weight`` itself, in place, as PyTorch's (so a compiled function,
            whose arguments it cannot rewrite, refuses it).
        norm_type: the norm's order for ``max_norm`` (default 2).
        scale_grad_by_freq: divide each row's gradient by how often the indices name it.
        sparse: PyTorch's sparse gradients: accepted (gradients here are dense).

    Returns:
        The gathered rows.

    Raises:
        TypeError: if ``indices`` is not an integer tensor.
        ValueError: if ``weight`` is not a 2-D table, or ``max_norm`` on a traced table.
        IndexError: for an index outside ``[0, num_embeddings)`` (checked at the call when
            the indices hold values).
    """
    del sparse
    if max_norm is not None:
        renorm_rows(weight, indices, max_norm, norm_type, "embedding")
    rows = _embedding(indices, weight, padding_idx, "embedding")
    return _by_frequency(rows, indices, weight.shape[0]) if scale_grad_by_freq else rows


def renorm_rows(weight, indices, max_norm: float, norm_type: float, who: str) -> None:
    """PyTorch's ``embedding_renorm_``: the rows ``indices`` names whose norm exceeds
    ``max_norm`` rescaled to ``max_norm / (norm + 1e-7)`` times themselves, in place."""
    w, idx = as_tensor(weight, op=who), as_tensor(indices, op=who)
    if not (isinstance(weight, Tensor) and readable_now(w) and readable_now(idx)):
        raise ValueError(
            f"{who}: max_norm rewrites the table in place at each call, which a traced table "
            "(inside compile, grad or vmap) cannot take; call it eagerly, or renormalize the "
            "weight yourself"
        )
    table = np.array(w.numpy())
    rows = np.unique(idx.numpy().reshape(-1))
    norms = np.linalg.norm(table[rows].astype(np.float64), ord=norm_type, axis=-1)
    big = norms > max_norm
    if big.any():
        scale = (max_norm / (norms[big] + 1e-7)).astype(table.dtype)
        table[rows[big]] *= scale[:, None]
        new = creation.constant(table, dtype=w.dtype, device=w.device)
        indexing.rebind(weight, new, item=True)


def _by_frequency(rows: Tensor, indices, num: int) -> Tensor:
    """``rows`` whose gradient is divided by the count of their index among ``indices``
    (the value unchanged, bit for bit)."""
    idx = as_tensor(indices, op="embedding").reshape(-1).cast(DType.int32)
    counts = creation.zeros((num,), dtype=rows.dtype).at[idx].add(1.0)
    freq = counts[as_tensor(indices, op="embedding").cast(DType.int32)].unsqueeze(-1)
    frozen = unary.stop_gradient(rows)
    return frozen + (rows - frozen) / freq


def embedding_bag(
    input,  # noqa: A002 - PyTorch's name
    weight,
    offsets=None,
    max_norm=None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights=None,
    include_last_offset: bool = False,
    padding_idx=None,
) -> Tensor:
    """PyTorch's ``F.embedding_bag``: the sum, mean or max of each bag's rows of
    ``weight``, without forming the ``(bags, size, dim)`` lookups for a 1-D ``input``: a
    2-D ``input`` ``(B, N)`` is ``B`` bags of ``N``; a 1-D one is split at ``offsets``
    (the bags' starts; with ``include_last_offset`` also the end). Rows at ``padding_idx``
    are left out (not counted in a mean); an empty bag gives zeros.

    Args:
        input: integer indices, ``(B, N)`` or ``(L,)``.
        weight: the table ``(num_embeddings, dim)``.
        offsets: the bags' start positions in a 1-D ``input``.
        max_norm: must be None.
        norm_type: accepted (with ``max_norm``).
        scale_grad_by_freq: must be False.
        mode: ``"sum"``, ``"mean"`` (default) or ``"max"``.
        sparse: accepted (gradients are dense here).
        per_sample_weights: weights of ``input``'s shape multiplying each row (``"sum"``).
        include_last_offset: ``offsets`` ends with the end of the last bag.
        padding_idx: a row left out of the bags.

    Returns:
        ``(B, dim)``.

    Raises:
        ValueError: for an unknown mode, missing or extra offsets, offsets that do not
            start at 0, decrease or pass the input's end, or per-sample weights outside
            ``"sum"``.
        NotImplementedError: for ``max_norm`` or ``scale_grad_by_freq``.
    """
    if max_norm is not None or scale_grad_by_freq:
        raise NotImplementedError(
            "embedding_bag: max_norm and scale_grad_by_freq are not supported"
        )
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode must be sum, mean or max, got {mode!r}")
    idx = as_tensor(input, op="embedding_bag")
    if per_sample_weights is not None and mode != "sum":
        raise ValueError("embedding_bag: per_sample_weights are taken with mode='sum' only")
    rows = _embedding(idx, weight, None, "embedding_bag")  # idx.shape + (dim,)
    keep = (
        binary.not_equal(idx, int(padding_idx) % as_tensor(weight).shape[0])
        if padding_idx is not None
        else binary.greater_equal(idx, 0)
    )
    w = keep.cast(rows.dtype)
    if per_sample_weights is not None:
        w = w * as_tensor(per_sample_weights, op="embedding_bag").cast(rows.dtype)
    if idx.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets are for a 1-D input; a 2-D input is its bags")
        if mode == "max":
            top = binary.where(keep.unsqueeze(-1), rows, -math.inf).max(axis=1)
            return binary.where(keep.any(axis=1).unsqueeze(-1), top, 0.0)
        total = (rows * w.unsqueeze(-1)).sum(axis=1)
        if mode == "sum":
            return total
        count = keep.cast(rows.dtype).sum(axis=1, keepdims=True)
        return total / binary.maximum(count, 1.0)
    if idx.ndim != 1 or offsets is None:
        raise ValueError(
            f"embedding_bag: input must be (B, N), or 1-D with offsets; got shape {idx.shape}"
        )
    starts = as_tensor(offsets, op="embedding_bag")
    if starts.ndim != 1 or not starts.dtype.is_int:
        raise ValueError(
            f"embedding_bag: offsets must be 1-D integers, got {starts.dtype.value} of shape "
            f"{starts.shape}"
        )
    if starts.shape[0] and readable_now(starts):  # PyTorch's checks, where the offsets are known
        known = starts.numpy()
        if known[0] != 0 or known[-1] > idx.shape[0] or (np.diff(known) < 0).any():
            raise ValueError(
                f"embedding_bag: offsets {known.tolist()} must start at 0, never decrease and "
                f"end at most at the input's length {idx.shape[0]}"
            )
    if include_last_offset:
        starts = starts[:-1]
    bags = starts.shape[0]
    # each element's bag: the number of starts at or before it, less one
    bag = binary.sub(
        array_functions.searchsorted(starts, creation.arange(idx.shape[0]), "right"), 1
    )
    dim = rows.shape[-1]
    if mode == "max":
        masked = binary.where(keep.unsqueeze(-1), rows, -math.inf)
        top = creation.full((bags, dim), -math.inf, dtype=rows.dtype).at[bag].max(masked)
        return binary.where(top == -math.inf, 0.0, top)
    total = creation.zeros((bags, dim), dtype=rows.dtype).at[bag].add(rows * w.unsqueeze(-1))
    if mode == "sum":
        return total
    count = creation.zeros((bags,), dtype=rows.dtype).at[bag].add(keep.cast(rows.dtype))
    return total / binary.maximum(count, 1.0).unsqueeze(-1)


def _embedding(indices, weight, padding_idx, who: str) -> Tensor:
    """:func:`embedding`, its errors naming ``who`` (``nn.Embedding`` names itself)."""
    indices, weight = as_tensor(indices, op=who), as_tensor(weight, op=who)
    if not indices.dtype.is_int:
        raise TypeError(f"{who}: indices must be integers, got {indices.dtype}")
    if weight.ndim != 2:
        raise ValueError(f"{who}: weight must be (num_embeddings, dim), got {weight.shape}")
    if indices.size and readable_now(indices):
        # a known index is checked here, naming the table: take() would read -1 as the last
        # row (PyTorch raises) and name only its internal gather for one past the end
        values = indices.numpy()
        rows = weight.shape[0]
        bad = values[(values < 0) | (values >= rows)]
        if bad.size:
            raise IndexError(
                f"{who}: index {int(bad[0])} is out of range for {rows} rows (indices of shape "
                f"{indices.shape}; valid indices are 0 to {rows - 1})"
            )
    if padding_idx is not None and not -weight.shape[0] <= padding_idx < weight.shape[0]:
        raise ValueError(
            f"{who}: padding_idx {padding_idx} is out of range for {weight.shape[0]} rows "
            f"(weight of shape {weight.shape})"
        )
    # (an index known only when the program runs is checked then: take() would read -1 as
    # the last row)
    rows = indexing.lookup(weight, indices, who)
    if padding_idx is None:
        return rows
    pad = (indices == padding_idx % weight.shape[0]).unsqueeze(-1)
    return binary.where(pad, unary.stop_gradient(rows), rows)


def _neg_large(dtype) -> float:
    # a finite "minus infinity", the dtype's lowest value: a fully masked row gives a
    # uniform softmax instead of NaN, and no allowed score is below it (a fill of -1e9 let
    # masked keys take the weight of a row whose scores were all below -1e9)
    return float(ml_dtypes.finfo(dtype.numpy).min)  # (NumPy's finfo has no bfloat16)


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    training: bool = True,
    rng_key: Tensor | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value``.

    Args:
        query: ``(..., L, E)``.
        key: ``(..., S, E)``.
        value: ``(..., S, Ev)``.
        attn_mask: optional mask broadcasting to ``(..., L, S)``: bool (True = may attend) or
            float (added to the scores).
        dropout_p: dropout probability on the attention weights (default 0).
        is_causal: when True, position ``i`` attends only to positions ``<= i``.
        scale: the score scale (default ``1 / sqrt(E)``).
        training: apply ``dropout_p`` only when True.
        rng_key: optional RNG key for the dropout mask.
        enable_gqa: grouped-query attention, as PyTorch's: ``key`` and ``value`` with
            ``Hkv`` heads (dim -3) serve a ``query`` of ``Hq`` heads, ``Hq`` a multiple of
            ``Hkv``; each key/value head serves ``Hq // Hkv`` consecutive query heads.

    Returns:
        ``(..., L, Ev)``.

    Raises:
        ValueError: if the shapes of ``query``, ``key`` and ``value`` do not fit.
    """
    q = as_tensor(query, op="scaled_dot_product_attention")
    k = as_tensor(key, op="scaled_dot_product_attention")
    v = as_tensor(value, op="scaled_dot_product_attention")
    if enable_gqa and min(q.ndim, k.ndim, v.ndim) >= 3 and k.shape[-3] != q.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hk == 0 or hq % hk or v.shape[-3] != hk:
            raise ValueError(
                f"scaled_dot_product_attention: with enable_gqa the query's heads (dim -3 of "
                f"{q.shape}) must be a multiple of the key's and value's ({k.shape}, {v.shape})"
            )
        k, v = (view.repeat(t, hq // hk, axis=-3) for t in (k, v))
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ValueError(
            f"scaled_dot_product_attention: query, key and value need (..., length, dim), got "
            f"{q.shape}, {k.shape}, {v.shape}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"scaled_dot_product_attention: query {q.shape}, key {k.shape} and value {v.shape} "
            "must share the feature dim (query/key) and the sequence length (key/value)"
        )
    batch = _batch_of_scores("scaled_dot_product_attention", q.shape, k.shape)
    try:
        np.broadcast_shapes(batch, v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"scaled_dot_product_attention: the batch and head dims of value {v.shape} do not "
            f"match those of query {q.shape} and key {k.shape}"
        ) from None
    if attn_mask is not None:
        attn_mask = as_tensor(attn_mask, op="scaled_dot_product_attention")
        check_attention_mask("scaled_dot_product_attention", attn_mask, q.shape, k.shape)
    out, _ = attention_with_weights(
        q, k, v, attn_mask, dropout_p, is_causal, scale, training, rng_key
    )
    return out


def check_attention_mask(op, mask, q_shape, k_shape, bool_means="True = may attend") -> None:
    """Refuse a mask that is not bool or float (an integer 0/1 mask would be added to the
    scores as a bias, as PyTorch refuses it) or that does not broadcast to the scores
    ``(..., L, S)``, naming it; ``bool_means`` states the caller's bool convention."""
    if not (mask.dtype.is_bool or mask.dtype.is_float):
        raise TypeError(
            f"{op}: attn_mask must be bool ({bool_means}) or float (added to the "
            f"scores), got {mask.dtype.value}{list(mask.shape)}; for a 0/1 mask pass mask > 0"
        )
    scores = (*_batch_of_scores(op, q_shape, k_shape), q_shape[-2], k_shape[-2])
    try:
        ok = np.broadcast_shapes(mask.shape, scores) == scores
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"{op}: attn_mask of shape {mask.shape} does not broadcast to the attention "
            f"scores {scores} (..., query length, key length)"
        )


def _batch_of_scores(op, q_shape, k_shape) -> tuple:
    """The batch dims of the scores ``query @ key^T``: the query's and key's broadcast
    (heads and batch), or an error naming ``op`` and both shapes."""
    try:
        return np.broadcast_shapes(q_shape[:-2], k_shape[:-2])
    except ValueError:
        raise ValueError(
            f"{op}: the batch and head dims of query {tuple(q_shape)} and key "
            f"{tuple(k_shape)} do not match (..., length, dim)"
        ) from None


def attention_with_weights(
    q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, training=True, rng_key=None
):
    """``scaled_dot_product_attention``'s output and its attention weights (after dropout),
    for tensors whose shapes it has checked."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.swap_axes(-1, -2)) * scale
    neg = _neg_large(scores.dtype)
    if is_causal:
        L, S = q.shape[-2], k.shape[-2]
        causal = creation.tril(creation.ones((L, S), dtype=scores.dtype)) > 0
        scores = binary.where(causal, scores, neg)
    if attn_mask is not None:
        mask = as_tensor(attn_mask, op="scaled_dot_product_attention")
        if mask.dtype.is_bool:
            scores = binary.where(mask, scores, neg)
        else:  # an additive mask's -inf (PyTorch's convention) stops at the same finite
            # floor: a row it masks wholly (a left-padded causal batch) averages the values
            # instead of making NaN
            if mask.dtype is not scores.dtype:  # (a float64 NumPy mask would have made the
                mask = mask.cast(scores.dtype)  # whole attention float64: PyTorch refuses)
            scores = binary.maximum(scores + mask, neg)
    weights = reduction.softmax(scores, axis=-1)
    if dropout_p > 0.0 and training:
        weights = dropout(weights, dropout_p, True, rng_key)
    return weights @ v, weights


# ------------------------------------------------------------------ conv1d, conv_transpose2d
__all__ += [
    "max_pool3d",
    "avg_pool3d",
    "max_unpool1d",
    "max_unpool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool3d",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "channel_shuffle",
    "local_response_norm",
    "pdist",
    "gumbel_softmax",
    "bilinear",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "triplet_margin_with_distance_loss",
    "lp_pool1d",
    "lp_pool2d",
    "rrelu",
    "alpha_dropout",
    "feature_alpha_dropout",
    "conv1d",
    "conv3d",
    "conv_transpose3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "interpolate",
    "unfold",
    "fold",
]

# ``jax.nn``'s names for functions above
swish = silu
log_sigmoid = logsigmoid
logsumexp = reduction.logsumexp


def hard_tanh(x) -> Tensor:
    """``x`` clipped to ``[-1, 1]`` (JAX's ``jax.nn.hard_tanh``). Its gradient is 1 on the
    closed interval, at the bounds too, as JAX's; PyTorch's :func:`hardtanh` gives 0 there.

    Args:
        x: the input.

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="hard_tanh")
    return binary.where(x > 1.0, 1.0, binary.where(x < -1.0, -1.0, x))


__all__ += ["swish", "log_sigmoid", "hard_tanh", "logsumexp"]


# ----------------------------------------------------------------------------- more of jax.nn
def hard_sigmoid(x) -> Tensor:
    """``relu6(x + 3) / 6`` (``jax.nn.hard_sigmoid``; PyTorch's ``hardsigmoid``)."""
    return hardsigmoid(x)


def hard_silu(x) -> Tensor:
    """``x * hard_sigmoid(x)`` (``jax.nn.hard_silu``/``hard_swish``; PyTorch's
    ``hardswish``)."""
    return hardswish(x)


hard_swish = hard_silu


def soft_sign(x) -> Tensor:
    """``x / (1 + |x|)`` (``jax.nn.soft_sign``)."""
    return softsign(x)


def identity(x) -> Tensor:
    """``x`` itself (``jax.nn.identity``)."""
    return as_tensor(x, op="identity")


def squareplus(x, b: float = 4.0) -> Tensor:
    """``(x + sqrt(x^2 + b)) / 2`` (``jax.nn.squareplus``), a smooth ReLU.

    Args:
        x: the input.
        b: the smoothness (default 4).

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="squareplus")
    return 0.5 * (x + unary.sqrt(x * x + b))


def sparse_plus(x) -> Tensor:
    """0 below -1, ``x`` above 1, ``(x + 1)^2 / 4`` between (``jax.nn.sparse_plus``)."""
    x = as_tensor(x, op="sparse_plus")
    mid = 0.25 * (x + 1.0) * (x + 1.0)
    return binary.where(x <= -1.0, 0.0, binary.where(x >= 1.0, x, mid))


def sparse_sigmoid(x) -> Tensor:
    """``clip((x + 1) / 2, 0, 1)`` (``jax.nn.sparse_sigmoid``, sparse_plus's derivative)."""
    x = as_tensor(x, op="sparse_sigmoid")
    return binary.clip(0.5 * (x + 1.0), 0.0, 1.0)


def log1mexp(x) -> Tensor:
    """``log(1 - exp(-x))`` for ``x > 0`` (``jax.nn.log1mexp``), stable at both ends:
    ``log(-expm1(-x))`` below ``log 2``, ``log1p(-exp(-x))`` above.

    Args:
        x: the input.

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="log1mexp")
    near = x < math.log(2.0)
    small = unary.log(unary.neg(unary.expm1(unary.neg(binary.where(near, x, 1.0)))))
    large = unary.log1p(unary.neg(unary.exp(unary.neg(binary.where(near, 1.0, x)))))
    return binary.where(near, small, large)


def logmeanexp(x, axis=None, where=None, keepdims: bool = False) -> Tensor:
    """``log(mean(exp(x)))`` over ``axis`` (``jax.nn.logmeanexp``), stably.

    Args:
        x: the input.
        axis: the axes (default all).
        where: a bool mask of the elements that count.
        keepdims: keep the reduced dims.

    Returns:
        A float tensor.
    """
    x = as_tensor(x, op="logmeanexp")
    x = x if x.dtype.is_float else x.cast(get_default_dtype())
    total = reduction.logsumexp(x, axis, keepdims, where=where)
    ones = creation.ones_like(x)
    if where is not None:  # (the mask's count, broadcast to x: an inf in x counts too)
        ones = binary.where(
            view.broadcast_to(as_tensor(where, op="logmeanexp"), x.shape), ones, 0.0
        )
    count = reduction.sum(ones, axis, keepdims)
    return total - unary.log(count)


def standardize(x, axis=-1, mean=None, variance=None, epsilon: float = 1e-5, where=None):
    """``(x - mean) / sqrt(variance + epsilon)`` over ``axis`` (``jax.nn.standardize``),
    the statistics computed when not given.

    Args:
        x: the input.
        axis: the axes of the statistics (default -1).
        mean: the mean, or None to compute it.
        variance: the variance, or None to compute it.
        epsilon: added to the variance (default 1e-5).
        where: a bool mask of the elements the statistics count.

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="standardize")
    if mean is None:
        mean = reduction.mean(x, axis, keepdims=True, where=where)
    if variance is None:
        # JAX's: the mean of the squares minus the square of the mean
        sq = reduction.mean(x * x, axis, keepdims=True, where=where)
        variance = sq - mean * mean
    return (x - mean) * unary.rsqrt(variance + epsilon)


def dot_product_attention(
    query,
    key,
    value,
    bias=None,
    mask=None,
    *,
    scale=None,
    is_causal: bool = False,
    query_seq_lengths=None,
    key_value_seq_lengths=None,
    local_window_size=None,
    implementation=None,
) -> Tensor:
    """``jax.nn.dot_product_attention``: ``softmax(q k^T * scale + bias) v`` over inputs
    laid out ``(B, T, N, H)`` (or ``(T, N, H)``), keys and values ``(B, S, K, H)`` with
    ``N`` a multiple of ``K`` (grouped-query attention); ``mask`` a bool (True keeps),
    ``is_causal`` the lower triangle; the softmax in float32.

    Args:
        query: ``(B, T, N, H)``.
        key: ``(B, S, K, H)``.
        value: ``(B, S, K, H)``.
        bias: added to the logits ``(B, N, T, S)`` (broadcasting).
        mask: a bool mask of the logits (broadcasting to ``(B, N, T, S)``).
        scale: the logits' factor (default ``1 / sqrt(H)``).
        is_causal: keep only ``s <= t``.
        query_seq_lengths: per batch, the queries that count (the rest give 0).
        key_value_seq_lengths: per batch, the keys that count.
        local_window_size: must be None.
        implementation: accepted (JAX's choice of kernel).

    Returns:
        ``(B, T, N, H)`` like ``query``.

    Raises:
        ValueError: for shapes that do not fit, or a ``local_window_size``.
    """
    if local_window_size is not None:
        raise ValueError("dot_product_attention: local_window_size is not supported")
    q = as_tensor(query, op="dot_product_attention")
    k = as_tensor(key, op="dot_product_attention")
    v = as_tensor(value, op="dot_product_attention")
    unbatched = q.ndim == 3
    if unbatched:
        q, k, v = q[None], k[None], v[None]
    if q.ndim != 4 or k.shape != v.shape or k.ndim != 4 or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "dot_product_attention: query (B, T, N, H), key and value (B, S, K, H) do not fit: "
            f"{q.shape}, {k.shape}, {v.shape}"
        )
    n, kh = q.shape[2], k.shape[2]
    if n % kh:
        raise ValueError(
            f"dot_product_attention: {n} query heads are not a multiple of {kh} key heads"
        )
    if kh != n:  # grouped-query attention: each key/value head serves n // kh query heads
        k, v = view.repeat(k, n // kh, 2), view.repeat(v, n // kh, 2)
    h = q.shape[-1]
    s = 1.0 / math.sqrt(h) if scale is None else float(scale)
    logits = linalg.einsum("btnh,bsnh->bnts", widened(q), widened(k)) * s
    if bias is not None:
        logits = logits + widened(as_tensor(bias, op="dot_product_attention"))
    t_len, s_len = q.shape[1], k.shape[1]
    keep = None
    if mask is not None:
        keep = as_tensor(mask, op="dot_product_attention").cast("bool")
    if is_causal:
        tri = creation.tril(creation.ones((t_len, s_len), dtype="bool"))
        keep = tri if keep is None else binary.logical_and(keep, tri)
    if key_value_seq_lengths is not None:
        lens = as_tensor(key_value_seq_lengths, op="dot_product_attention")
        valid = creation.arange(s_len) < lens.reshape(-1, 1, 1, 1)
        keep = valid if keep is None else binary.logical_and(keep, valid)
    if keep is not None:
        logits = binary.where(keep, logits, float(np.finfo(np.float32).min))
    out = linalg.einsum("bnts,bsnh->btnh", reduction.softmax(logits, -1), widened(v))
    if query_seq_lengths is not None:
        lens = as_tensor(query_seq_lengths, op="dot_product_attention")
        out = out * (creation.arange(t_len) < lens.reshape(-1, 1)).cast(out.dtype).reshape(
            -1, t_len, 1, 1
        )
    out = out.cast(q.dtype)
    return out[0] if unbatched else out


from . import initializers  # noqa: E402 - jax.nn.initializers, as jax.nn has it

__all__ += [
    "initializers",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "soft_sign",
    "identity",
    "squareplus",
    "sparse_plus",
    "sparse_sigmoid",
    "log1mexp",
    "logmeanexp",
    "standardize",
    "dot_product_attention",
]


def _conv_int(fn_name: str, name: str, v, n: int, minimum: int) -> tuple:
    """``v`` (an int or ``n`` ints) as ``n`` ints, each ``>= minimum``, or an error naming the
    function and the argument."""
    vals = (v,) * n if isinstance(v, int) and not isinstance(v, bool) else v
    ok = isinstance(vals, tuple | list) and len(vals) == n
    ok = ok and all(isinstance(a, int) and not isinstance(a, bool) for a in vals)
    if not ok or min(vals) < minimum:
        kind = "an int" if n == 1 else f"an int or {n} ints"
        raise ValueError(f"{fn_name}: {name} must be {kind} >= {minimum}, got {v!r}")
    return tuple(int(a) for a in vals)


def _channels_last(fn_name: str, x: Tensor, spatial: int, layout: str) -> tuple[Tensor, bool]:
    """``x`` with a batch dim (added when it is unbatched) and whether one was added."""
    if x.ndim == spatial + 1:
        return x.unsqueeze(0), True
    if x.ndim != spatial + 2:
        raise ValueError(
            f"{fn_name}: input of shape {x.shape} is not {layout} (channels last) or unbatched"
        )
    return x, False


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """1-D convolution (cross-correlation) over sequences ``(N, L, C)``, channels last as
    every Nabla layer, with PyTorch's filter layout ``(out_channels, C / groups, K)`` (so a
    ``torch.nn.Conv1d`` weight is used as it is).

    Args:
        x: input ``(N, L, C)``, or ``(L, C)`` unbatched.
        weight: filter ``(O, C // groups, K)``.
        bias: optional ``(O,)``.
        stride: int or 1-tuple (default 1).
        padding: int or 1-tuple (zeros at both ends), ``"same"`` (output as long as the
            input; stride 1 only, the odd extra zero at the end as PyTorch) or ``"valid"``
            (none).
        dilation: int or 1-tuple: spacing between filter taps (default 1).
        groups: channel groups; ``C`` and ``O`` must be divisible by it.

    Returns:
        ``(N, L_out, O)`` (``(L_out, O)`` for an unbatched input), with
        ``L_out = (L + 2 * padding - dilation * (K - 1) - 1) // stride + 1``.

    Raises:
        ValueError: on rank, channel or size mismatches, or a bad argument, naming the shapes
            and the argument.
    """
    x, w = as_tensor(x, op="conv1d"), as_tensor(weight, op="conv1d")
    x, unbatched = _channels_last("conv1d", x, 1, "(N, L, C)")
    (s,) = _conv_int("conv1d", "stride", stride, 1, 1)
    (d,) = _conv_int("conv1d", "dilation", dilation, 1, 1)
    (g,) = _conv_int("conv1d", "groups", groups, 1, 1)
    c = x.shape[-1]
    if w.ndim != 3 or c % g or w.shape[0] % g or w.shape[1] != c // g:
        raise ValueError(
            f"conv1d: input of shape {x.shape} ({c} channels), weight of shape {w.shape} and "
            f"groups={g} do not match (weight needs (O, {c // g}, K), O divisible by {g})"
        )
    k = w.shape[2]
    if isinstance(padding, str):
        mode = padding.lower()
        if mode not in ("same", "valid"):
            raise ValueError(f"conv1d: padding must be 'same', 'valid' or an int, got {padding!r}")
        if mode == "same" and s != 1:
            raise ValueError(f"conv1d: padding='same' needs stride 1, got stride={stride!r}")
        total = d * (k - 1) if mode == "same" else 0
        pads = (total // 2, total - total // 2)
    else:
        pads = _conv_int("conv1d", "padding", padding, 1, 0) * 2
    if x.shape[1] + sum(pads) < d * (k - 1) + 1:
        raise ValueError(
            f"conv1d: input of shape {x.shape} (padded by {pads}) is shorter than the filter "
            f"{w.shape} spans (dilation {d})"
        )
    # a sequence is an image of height 1; the filter (O, C/g, K) becomes HWIO (1, K, C/g, O)
    w4 = w.permute(2, 1, 0).unsqueeze(0)
    y = conv2d(x.unsqueeze(1), w4, bias, (1, s), ((0, 0), pads), (1, d), g).squeeze(1)
    return y.squeeze(0) if unbatched else y


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """3-D convolution (cross-correlation) over volumes ``(N, D, H, W, C)``, channels last
    as every Nabla layer, with PyTorch's filter layout ``(O, C / groups, KD, KH, KW)`` (so
    a ``torch.nn.Conv3d`` weight is used as it is).

    Computed as one :func:`nabla.conv2d` over the ``N * OD`` depth positions: the ``KD``
    depth taps each position reads are stacked as channels (``KD * C``), one im2col and
    one GEMM (with ``groups > 1``, one 2-D convolution per depth tap, summed).

    Args:
        x: input ``(N, D, H, W, C)``, or ``(D, H, W, C)`` unbatched.
        weight: filter ``(O, C // groups, KD, KH, KW)``.
        bias: optional ``(O,)``.
        stride: int or 3 ints (default 1).
        padding: int or 3 ints (zeros on both sides), ``"same"`` (stride 1 only, the odd
            extra zero after, as PyTorch) or ``"valid"`` (none).
        dilation: int or 3 ints: spacing between filter taps (default 1).
        groups: channel groups; ``C`` and ``O`` must be divisible by it.

    Returns:
        ``(N, OD, OH, OW, O)`` (``(OD, OH, OW, O)`` unbatched), each output size
        ``(size + 2 * padding - dilation * (K - 1) - 1) // stride + 1``.

    Raises:
        ValueError: on rank, channel or size mismatches, or a bad argument, naming the shapes
            and the argument.
    """
    x, w = as_tensor(x, op="conv3d"), as_tensor(weight, op="conv3d")
    x, unbatched = _channels_last("conv3d", x, 3, "(N, D, H, W, C)")
    s = _conv_int("conv3d", "stride", stride, 3, 1)
    d = _conv_int("conv3d", "dilation", dilation, 3, 1)
    (g,) = _conv_int("conv3d", "groups", groups, 1, 1)
    c = x.shape[-1]
    if w.ndim != 5 or c % g or w.shape[0] % g or w.shape[1] != c // g:
        raise ValueError(
            f"conv3d: input of shape {x.shape} ({c} channels), weight of shape {w.shape} and "
            f"groups={g} do not match (weight needs (O, {c // g}, KD, KH, KW), O divisible "
            f"by {g})"
        )
    k = tuple(w.shape[2:])
    if isinstance(padding, str):
        mode = padding.lower()
        if mode not in ("same", "valid"):
            raise ValueError(
                f"conv3d: padding must be 'same', 'valid', an int or 3 ints, got {padding!r}"
            )
        if mode == "same" and s != (1, 1, 1):
            raise ValueError(f"conv3d: padding='same' needs stride 1, got stride={stride!r}")
        totals = [d[i] * (k[i] - 1) if mode == "same" else 0 for i in range(3)]
        pads = tuple((t // 2, t - t // 2) for t in totals)
    else:
        pads = tuple((p, p) for p in _conv_int("conv3d", "padding", padding, 3, 0))
    spatial = x.shape[1:4]
    if any(spatial[i] + sum(pads[i]) < d[i] * (k[i] - 1) + 1 for i in range(3)):
        raise ValueError(
            f"conv3d: input of shape {x.shape} (padded by {pads}) is smaller than the filter "
            f"{w.shape} spans (dilation {d})"
        )
    if any(pads[0]):
        x = view.pad(x, ((0, 0), pads[0], (0, 0), (0, 0), (0, 0)))
    n, depth, h, wd = x.shape[:4]
    od = (depth - d[0] * (k[0] - 1) - 1) // s[0] + 1
    taps = [x[:, i * d[0] : i * d[0] + s[0] * (od - 1) + 1 : s[0]] for i in range(k[0])]
    filt = view.permute(w, (2, 3, 4, 1, 0))  # (KD, KH, KW, C/g, O)
    plane = (s[1:], (pads[1], pads[2]), d[1:])
    if g == 1:  # the depth taps as channels: one 2-D convolution
        stacked = view.concatenate(taps, -1).reshape(n * od, h, wd, k[0] * c)
        f2 = view.permute(filt, (1, 2, 0, 3, 4)).reshape(k[1], k[2], k[0] * c, w.shape[0])
        y = conv2d(stacked, f2, None, plane[0], plane[1], plane[2], 1)
    else:
        y = None
        for i, tap in enumerate(taps):
            term = conv2d(tap.reshape(n * od, h, wd, c), filt[i], None, *plane, g)
            y = term if y is None else y + term
    y = y.reshape(n, od, *y.shape[1:])
    if bias is not None:
        y = _nn_ops._add_bias("conv3d", y, bias, f"weight {w.shape}")
    return y[0] if unbatched else y


def conv_transpose1d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    """Transposed 1-D convolution over sequences ``(N, L, C)`` (channels last), with
    PyTorch's argument order and filter layout ``(C, O / groups, K)``:
    :func:`conv_transpose2d` over a height of 1.

    Args:
        x: input ``(N, L, C)``, or ``(L, C)`` unbatched.
        weight: filter ``(C, O // groups, K)``.
        bias: optional ``(O,)``.
        stride: int or 1-tuple (default 1).
        padding: int or 1-tuple (default 0).
        output_padding: int or 1-tuple (default 0).
        groups: channel groups (default 1).
        dilation: int or 1-tuple (default 1).

    Returns:
        ``(N, OL, O)`` with ``OL = (L - 1) * stride - 2 * padding + dilation * (K - 1) +
        output_padding + 1``.

    Raises:
        ValueError: on rank or channel mismatches or a bad argument, naming the shapes.
    """
    x, w = as_tensor(x, op="conv_transpose1d"), as_tensor(weight, op="conv_transpose1d")
    x, unbatched = _channels_last("conv_transpose1d", x, 1, "(N, L, C)")
    if w.ndim != 3:
        raise ValueError(f"conv_transpose1d: weight of shape {w.shape} is not (C, O / groups, K)")
    one = [_conv_int("conv_transpose1d", n, v, 1, lo)[0] for n, v, lo in (
        ("stride", stride, 1), ("padding", padding, 0), ("output_padding", output_padding, 0),
        ("dilation", dilation, 1))]  # fmt: skip
    s, p, op_, d = one
    out = conv_transpose2d(
        x.unsqueeze(1), w.unsqueeze(2), bias, (1, s), (0, p), (0, op_), groups, (1, d)
    ).squeeze(1)
    return out[0] if unbatched else out


def _spread(x: Tensor, axis: int, step: int) -> Tensor:
    """``step - 1`` zeros between neighbouring elements along ``axis``."""
    if step == 1:
        return x
    n = x.shape[axis]
    zeros = creation.zeros((*x.shape[: axis + 1], step - 1, *x.shape[axis + 1 :]), dtype=x.dtype)
    spread = view.concatenate([x.unsqueeze(axis + 1), zeros], axis + 1)
    spread = spread.reshape((*x.shape[:axis], n * step, *x.shape[axis + 1 :]))
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, (n - 1) * step + 1)
    return spread[tuple(index)]


def conv_transpose3d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    """Transposed 3-D convolution over volumes ``(N, D, H, W, C)`` (the gradient of a
    convolution with respect to its input), with PyTorch's argument order and filter
    layout ``(C, O / groups, KD, KH, KW)`` (a ``torch.nn.ConvTranspose3d`` weight as it
    is): :func:`conv3d` of the stride-spread, padded input with the flipped filter.

    Args:
        x: input ``(N, D, H, W, C)``, or ``(D, H, W, C)`` unbatched.
        weight: filter ``(C, O // groups, KD, KH, KW)``.
        bias: optional ``(O,)``.
        stride: int or 3 ints: the upsampling factor (default 1).
        padding: int or 3 ints: removed from each side of the full output (default 0).
        output_padding: int or 3 ints: extra positions at the end of each dim, each
            smaller than the stride or the dilation (default 0).
        groups: channel groups; ``C`` must be divisible by it (default 1).
        dilation: int or 3 ints: spacing between filter taps (default 1).

    Returns:
        ``(N, OD, OH, OW, O)``, each ``(size - 1) * stride - 2 * padding + dilation * (K -
        1) + output_padding + 1``.

    Raises:
        ValueError: on rank or channel mismatches or a bad argument, naming the shapes.
    """
    op = "conv_transpose3d"
    x, w = as_tensor(x, op=op), as_tensor(weight, op=op)
    x, unbatched = _channels_last(op, x, 3, "(N, D, H, W, C)")
    s = _conv_int(op, "stride", stride, 3, 1)
    d = _conv_int(op, "dilation", dilation, 3, 1)
    p = _conv_int(op, "padding", padding, 3, 0)
    op_ = _conv_int(op, "output_padding", output_padding, 3, 0)
    (g,) = _conv_int(op, "groups", groups, 1, 1)
    c = x.shape[-1]
    if w.ndim != 5 or c % g or w.shape[0] != c:
        raise ValueError(
            f"{op}: input of shape {x.shape} ({c} channels), weight of shape {w.shape} and "
            f"groups={g} do not match (weight needs ({c}, O / groups, KD, KH, KW), {c} "
            "divisible by groups)"
        )
    if any(op_[i] >= max(s[i], d[i]) for i in range(3)):
        raise ValueError(
            f"{op}: output_padding {output_padding!r} must be smaller than the stride "
            f"{stride!r} or the dilation {dilation!r}"
        )
    og, k = w.shape[1], tuple(w.shape[2:])
    size = [
        (x.shape[1 + i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op_[i] + 1 for i in range(3)
    ]
    if min(size) < 1:
        raise ValueError(
            f"{op}: the output would be {tuple(size)} for an input of shape {x.shape}, weight "
            f"of shape {w.shape}, stride {stride!r}, padding {padding!r}: too small"
        )
    for i in range(3):
        x = _spread(x, 1 + i, s[i])
    # the full output needs d*(k-1) on each side; the padding takes some off (a crop when
    # it takes more), the output padding adds at the end
    for i in range(3):
        lo = d[i] * (k[i] - 1) - p[i]
        hi = lo + op_[i]
        axis = 1 + i
        if lo < 0 or hi < 0:
            index = [slice(None)] * x.ndim
            index[axis] = slice(max(0, -lo), x.shape[axis] - max(0, -hi))
            x = x[tuple(index)]
        if max(lo, 0) or max(hi, 0):
            widths = [(0, 0)] * x.ndim
            widths[axis] = (max(lo, 0), max(hi, 0))
            x = view.pad(x, widths)
    # (C, O/g, k...) -> conv3d's (O, C/g, k...), the taps flipped
    wc = w.reshape((g, c // g, og, *k)).permute(0, 2, 1, 3, 4, 5).reshape((g * og, c // g, *k))
    wc = view.flip(wc, (2, 3, 4))
    y = conv3d(x, wc, bias, 1, 0, d, g)
    return y[0] if unbatched else y


def conv_transpose2d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    """Transposed 2-D convolution over NHWC images (the gradient of a convolution with
    respect to its input), with PyTorch's argument order and filter layout
    ``(C, O / groups, KH, KW)`` (so a ``torch.nn.ConvTranspose2d`` weight is used as it is).

    Args:
        x: input ``(N, H, W, C)``, or ``(H, W, C)`` unbatched.
        weight: filter ``(C, O // groups, KH, KW)``.
        bias: optional ``(O,)``.
        stride: int or pair: the upsampling factor (default 1).
        padding: int or pair: ``dilation * (K - 1) - padding`` zeros are added on each side
            of the dilated input (default 0).
        output_padding: int or pair: extra rows/cols at the bottom/right; each must be
            smaller than the stride or the dilation (default 0).
        groups: channel groups; ``C`` must be divisible by it (default 1).
        dilation: int or pair: spacing between filter taps (default 1).

    Returns:
        ``(N, OH, OW, O)`` with ``OH = (H - 1) * stride - 2 * padding + dilation * (KH - 1)
        + output_padding + 1`` (likewise ``OW``).

    Raises:
        ValueError: on rank or channel mismatches or a bad argument, naming the shapes.
    """
    x, w = as_tensor(x, op="conv_transpose2d"), as_tensor(weight, op="conv_transpose2d")
    x, unbatched = _channels_last("conv_transpose2d", x, 2, "(N, H, W, C)")
    s = _conv_int("conv_transpose2d", "stride", stride, 2, 1)
    d = _conv_int("conv_transpose2d", "dilation", dilation, 2, 1)
    p = _conv_int("conv_transpose2d", "padding", padding, 2, 0)
    op_ = _conv_int("conv_transpose2d", "output_padding", output_padding, 2, 0)
    (g,) = _conv_int("conv_transpose2d", "groups", groups, 1, 1)
    c = x.shape[-1]
    if w.ndim != 4 or c % g or w.shape[0] != c:
        raise ValueError(
            f"conv_transpose2d: input of shape {x.shape} ({c} channels), weight of shape "
            f"{w.shape} and groups={g} do not match (weight needs ({c}, O / groups, KH, KW), "
            f"{c} divisible by groups)"
        )
    for i in range(2):
        if op_[i] >= max(s[i], d[i]):
            raise ValueError(
                f"conv_transpose2d: output_padding {output_padding!r} must be smaller than "
                f"the stride {stride!r} or the dilation {dilation!r}"
            )
    _, og, kh, kw = w.shape
    size = [
        (x.shape[-3 + i] - 1) * s[i] - 2 * p[i] + d[i] * ((kh, kw)[i] - 1) + op_[i] + 1
        for i in range(2)
    ]
    if min(size) < 1:
        raise ValueError(
            f"conv_transpose2d: the output would be {size[0]} x {size[1]} for an input of "
            f"shape {x.shape}, weight of shape {w.shape}, stride {stride!r}, padding "
            f"{padding!r}: too small (padding takes more than the transposed conv makes)"
        )
    # (C, O/g, KH, KW) -> HWIO (KH, KW, C/g, O): group j's inputs feed outputs j*O/g ...
    w = w.reshape((g, c // g, og, kh, kw)).permute(3, 4, 1, 0, 2).reshape((kh, kw, c // g, g * og))
    pads = ((p[0], p[0]), (p[1], p[1]))
    y = conv2d_transpose(x, w, bias, s, pads, op_, d, g)
    return y.squeeze(0) if unbatched else y


# ------------------------------------------------------------------------------ interpolate
_INTERP_MODES = {
    "nearest": None,
    "nearest-exact": None,
    "linear": 1,
    "bilinear": 2,
    "trilinear": 3,
    "bicubic": 2,
    "area": 2,
}
_CUBIC_A = -0.75  # PyTorch's (and OpenCV's) cubic convolution coefficient


def affine_grid(theta, size, align_corners: bool = False) -> Tensor:
    """PyTorch's ``affine_grid``: the sampling grid ``(N, H, W, 2)`` of the affine maps
    ``theta`` ``(N, 2, 3)`` over normalized output coordinates ``(x, y)`` in ``[-1, 1]``,
    for :func:`grid_sample`.

    Args:
        theta: ``(N, 2, 3)``.
        size: the output size as PyTorch gives it, ``(N, C, H, W)`` (only ``H``, ``W`` are
            read).
        align_corners: ``-1`` and ``1`` at the corner pixels' centers (else their outer
            edges).

    Returns:
        ``(N, H, W, 2)``.

    Raises:
        ValueError: for a ``theta`` that is not ``(N, 2, 3)`` or a size that is not 4-D.
    """
    t = as_tensor(theta, op="affine_grid")
    if t.ndim != 3 or tuple(t.shape[1:]) != (2, 3) or len(size) != 4:
        raise ValueError(
            f"affine_grid: theta must be (N, 2, 3) and size (N, C, H, W), got {t.shape} and "
            f"{tuple(size)}"
        )
    h, w = int(size[2]), int(size[3])

    def coords(n):
        if align_corners:
            return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
        return (np.arange(n) * 2.0 + 1.0) / n - 1.0

    xs, ys = np.meshgrid(coords(w), coords(h))  # (H, W)
    base = np.stack([xs, ys, np.ones_like(xs)], -1).astype(t.dtype.numpy)  # (H, W, 3)
    grid = linalg.einsum("hwk,njk->nhwj", creation.constant(base), t)
    return grid


def _reflect(coord, low2: float, high2: float):
    """PyTorch's reflection of coordinates into ``[low2 / 2, high2 / 2]``."""
    if low2 == high2:
        return coord * 0.0
    low, span = low2 / 2.0, (high2 - low2) / 2.0
    dist = unary.abs(coord - low)
    flips = unary.floor(dist / span)
    extra = dist - flips * span
    even = binary.equal(binary.mod(flips, 2.0), 0.0)
    return binary.where(even, extra + low, span - extra + low)


def grid_sample(
    input,  # noqa: A002 - PyTorch's name
    grid,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
) -> Tensor:
    """PyTorch's ``grid_sample`` on NHWC images: the input sampled at the normalized
    ``(x, y)`` of ``grid`` (``-1`` left/top, ``1`` right/bottom), bilinearly or at the
    nearest pixel; outside the image zeros, the border's values, or the reflection.

    Args:
        input: ``(N, H, W, C)``.
        grid: ``(N, Ho, Wo, 2)``.
        mode: ``"bilinear"`` or ``"nearest"``.
        padding_mode: ``"zeros"``, ``"border"`` or ``"reflection"``.
        align_corners: as in :func:`affine_grid`.

    Returns:
        ``(N, Ho, Wo, C)``.

    Raises:
        ValueError: for an unknown mode or shapes that do not fit.
    """
    x = as_tensor(input, op="grid_sample")
    g = as_tensor(grid, op="grid_sample")
    if mode not in ("bilinear", "nearest"):
        raise ValueError(f"grid_sample: mode must be 'bilinear' or 'nearest', got {mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(
            f"grid_sample: padding_mode must be zeros, border or reflection, got {padding_mode!r}"
        )
    if x.ndim != 4 or g.ndim != 4 or g.shape[-1] != 2 or g.shape[0] != x.shape[0]:
        raise ValueError(
            f"grid_sample: input (N, H, W, C) and grid (N, Ho, Wo, 2) do not fit: {x.shape}, "
            f"{g.shape}"
        )
    n, h, w, c = x.shape
    ho, wo = g.shape[1], g.shape[2]
    g = g.cast(x.dtype) if x.dtype.is_float else g

    def pixel(coord, size):  # normalized -> pixel coordinates, padded as asked
        if align_corners:
            p = (coord + 1.0) * (0.5 * (size - 1))
        else:
            p = ((coord + 1.0) * size - 1.0) * 0.5
        if padding_mode == "reflection":
            p = (
                _reflect(p, 0.0, 2.0 * (size - 1))
                if align_corners
                else _reflect(p, -1.0, 2.0 * size - 1.0)
            )
        if padding_mode != "zeros":
            p = binary.clip(p, 0.0, float(size - 1))
        return p

    px, py = pixel(g[..., 0], w), pixel(g[..., 1], h)
    flat = x.reshape(n, h * w, c)

    def gather(ix, iy):  # the pixels at integer (ix, iy), 0 outside the image
        inside = binary.logical_and(
            binary.logical_and(ix >= 0, ix <= w - 1), binary.logical_and(iy >= 0, iy <= h - 1)
        )
        xi = binary.clip(ix, 0.0, float(w - 1)).cast("int64")
        yi = binary.clip(iy, 0.0, float(h - 1)).cast("int64")
        idx = (yi * w + xi).reshape(n, ho * wo, 1)
        vals = indexing.take_along_axis(flat, idx, 1).reshape(n, ho, wo, c)
        return vals * inside.cast(vals.dtype).unsqueeze(-1)

    if mode == "nearest":
        return gather(unary.round(px), unary.round(py))
    x0, y0 = unary.floor(px), unary.floor(py)
    fx, fy = (px - x0).unsqueeze(-1), (py - y0).unsqueeze(-1)
    top = gather(x0, y0) * (1.0 - fx) + gather(x0 + 1.0, y0) * fx
    bottom = gather(x0, y0 + 1.0) * (1.0 - fx) + gather(x0 + 1.0, y0 + 1.0) * fx
    return top * (1.0 - fy) + bottom * fy


def interpolate(
    x,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
) -> Tensor:
    """Resize the spatial dims of a channels-last batch, with PyTorch's ``interpolate``
    semantics (which source position each output reads, and with what weights).

    Built from ``take`` along each spatial axis and arithmetic on constant weights, so it
    is differentiable and works under ``vmap`` and ``compile``.

    Args:
        x: ``(N, L, C)``, ``(N, H, W, C)`` or ``(N, D, H, W, C)`` (channels last).
        size: the output's spatial size: an int (every spatial dim) or one int per dim.
        scale_factor: a float (every spatial dim) or one per dim; the output size is
            ``floor(in * scale_factor)``. Exactly one of ``size`` and ``scale_factor``.
        mode: ``"nearest"`` (PyTorch's: source ``floor(out * scale)``),
            ``"nearest-exact"`` (``floor((out + 0.5) * scale)``), ``"linear"`` (3-D
            input), ``"bilinear"`` (4-D), ``"trilinear"`` (5-D), ``"bicubic"`` (4-D:
            PyTorch's cubic convolution, ``a = -0.75``, the border pixels repeated) or
            ``"area"`` (4-D: ``adaptive_avg_pool2d`` to the output size, as PyTorch's).
        align_corners: linear and cubic modes only: True maps the corner pixels' centers onto each
            other (source ``out * (in - 1) / (out - 1)``); False/None (default) maps the
            corners' edges (source ``(out + 0.5) * scale - 0.5``).
        recompute_scale_factor: with ``scale_factor``, True computes the sampling scale
            from the output size (``in / out``) instead of ``1 / scale_factor``.

    Returns:
        A tensor like ``x`` with the spatial dims resized.

    Raises:
        ValueError: for an unknown mode, a mode that does not fit the rank, both or neither
            of ``size`` and ``scale_factor``, or ``align_corners`` with a nearest mode.
    """
    x = as_tensor(x, op="interpolate")
    spatial = x.ndim - 2
    if mode not in _INTERP_MODES:
        raise ValueError(f"interpolate: mode must be one of {sorted(_INTERP_MODES)}, got {mode!r}")
    if spatial not in (1, 2, 3) or _INTERP_MODES[mode] not in (None, spatial):
        want = {1: "(N, L, C)", 2: "(N, H, W, C)", 3: "(N, D, H, W, C)"}
        need = want.get(_INTERP_MODES[mode], "(N, L, C), (N, H, W, C) or (N, D, H, W, C)")
        raise ValueError(
            f"interpolate: mode={mode!r} needs an input {need} (channels last), got shape {x.shape}"
        )
    if not x.dtype.is_float:
        raise TypeError(f"interpolate: needs a float tensor, got {x.dtype} of shape {x.shape}")
    linear = _INTERP_MODES[mode] is not None and mode != "area"
    if align_corners is not None and not linear:
        raise ValueError(
            f"interpolate: align_corners can only be set with a linear or cubic mode, not "
            f"mode={mode!r}"
        )
    in_sizes = x.shape[1:-1]
    out_sizes, scales = _interp_sizes(in_sizes, size, scale_factor, recompute_scale_factor)
    if mode == "area":
        return adaptive_avg_pool2d(x, out_sizes)
    # PyTorch's 2-D nearest kernel takes an axis of the same size as a copy and one of
    # twice the size as ``out // 2``, whatever the scale; its 1-D and 3-D kernels resample
    # both with the scale (5 * 1.1 stays 5: 2-D copies it, 1-D reads 0, 0, 1, 2, 3)
    shortcuts = mode == "nearest" and spatial == 2
    copies_kept = shortcuts or (linear and mode != "bicubic")
    for i, (n_in, n_out, scale) in enumerate(zip(in_sizes, out_sizes, scales, strict=True)):
        if n_in == n_out and (scale is None or copies_kept):
            # same size, scale in/out = 1: every output reads its own position; the linear
            # modes copy a same-size axis whatever the scale (PyTorch's kernels: 6 * 1.1
            # stays 6 unchanged), the bicubic one resamples it with the scale
            continue
        if shortcuts and n_out == 2 * n_in:
            scale = None  # in / out = 1/2: output i reads i // 2
        axis = _AxisResample(1 + i, n_in, n_out, scale)
        if mode == "bicubic":
            x = _cubic_axis(x, axis, bool(align_corners))
        elif linear:
            x = _linear_axis(x, axis, bool(align_corners))
        else:
            x = _nearest_axis(x, axis, mode == "nearest-exact")
    return x


def _interp_sizes(in_sizes, size, scale_factor, recompute) -> tuple:
    """The output sizes and the scale factors the sampling uses (None: from the sizes)."""
    n = len(in_sizes)
    if (size is None) == (scale_factor is None):
        raise ValueError(
            f"interpolate: pass exactly one of size and scale_factor, got size={size!r} and "
            f"scale_factor={scale_factor!r}"
        )
    if size is not None:
        sizes = _conv_int("interpolate", "size", size, n, 1)
        return sizes, (None,) * n
    factors = (scale_factor,) * n if isinstance(scale_factor, int | float) else scale_factor
    ok = isinstance(factors, tuple | list) and len(factors) == n
    if not ok or not all(isinstance(f, int | float) and f > 0 for f in factors):
        raise ValueError(
            f"interpolate: scale_factor must be a positive number or {n} of them, got "
            f"{scale_factor!r}"
        )
    sizes = tuple(int(math.floor(float(i) * float(f))) for i, f in zip(in_sizes, factors))
    if min(sizes) < 1:
        raise ValueError(
            f"interpolate: scale_factor {scale_factor!r} makes an empty output from spatial "
            f"size {tuple(in_sizes)}"
        )
    scales = (None,) * n if recompute else tuple(float(f) for f in factors)
    return sizes, scales


class _AxisResample(NamedTuple):
    """One spatial axis of an ``interpolate``: its position, sizes in and out, and the
    scale factor the sampling uses (None: from the sizes)."""

    axis: int
    n_in: int
    n_out: int
    scale_factor: float | None

    def source_scale(self) -> np.float32:
        """PyTorch's sampling scale: ``1 / scale_factor`` when given, else ``in / out``."""
        if self.scale_factor is not None and self.scale_factor > 0:
            return np.float32(1.0 / self.scale_factor)
        return np.float32(self.n_in / self.n_out)


def _along(x: Tensor, axis: int, values: np.ndarray) -> Tensor:
    """``values`` (one per position of ``axis``) as a constant broadcasting against ``x``."""
    shape = (len(values),) + (1,) * (x.ndim - 1 - axis)
    return creation.constant(values.reshape(shape), dtype=x.dtype)


def _nearest_axis(x, ax: _AxisResample, exact) -> Tensor:
    n_in, n_out = ax.n_in, ax.n_out
    scale = ax.source_scale()
    dst = np.arange(n_out, dtype=np.float32) + (np.float32(0.5) if exact else np.float32(0))
    src = np.minimum(np.floor(dst * scale).astype(np.int64), n_in - 1)
    return indexing.take(x, src, axis=ax.axis)


def _linear_axis(x, ax: _AxisResample, align_corners) -> Tensor:
    n_in, n_out = ax.n_in, ax.n_out
    dst = np.arange(n_out, dtype=np.float32)
    if align_corners:
        scale = np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.float32(0)
        src = dst * scale
    else:
        scale = ax.source_scale()
        src = np.maximum((dst + np.float32(0.5)) * scale - np.float32(0.5), np.float32(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    w1 = (src - i0.astype(np.float32)).astype(np.float32)
    w0 = (np.float32(1) - w1).astype(np.float32)
    lo = indexing.take(x, i0, axis=ax.axis)
    hi = indexing.take(x, i1, axis=ax.axis)
    return lo * _along(x, ax.axis, w0) + hi * _along(x, ax.axis, w1)


def _cubic_axis(x, ax: _AxisResample, align_corners) -> Tensor:
    """PyTorch's bicubic along one axis: four taps around each source position (the
    border pixels repeated past the edges), weighted by the cubic convolution kernel. The
    source is not clamped at 0, unlike the linear modes'."""
    n_in, n_out = ax.n_in, ax.n_out
    dst = np.arange(n_out, dtype=np.float32)
    if align_corners:
        scale = np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.float32(0)
        src = dst * scale
    else:
        src = (dst + np.float32(0.5)) * ax.source_scale() - np.float32(0.5)
    base = np.floor(src)
    t = (src - base).astype(np.float32)
    a = np.float32(_CUBIC_A)

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    weights = (far(t + 1), near(t), near(1 - t), far(2 - t))
    out = None
    for k, w in enumerate(weights):
        idx = np.clip(base.astype(np.int64) - 1 + k, 0, n_in - 1)
        term = indexing.take(x, idx, axis=ax.axis) * _along(x, ax.axis, w.astype(np.float32))
        out = term if out is None else out + term
    return out


# ----------------------------------------------------------------------------- more of F
def softsign(x) -> Tensor:
    """``x / (1 + |x|)`` (PyTorch's ``softsign``).

    Args:
        x: the input.

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="softsign")
    return x / (1.0 + unary.abs(x))


def tanhshrink(x) -> Tensor:
    """``x - tanh(x)`` (PyTorch's ``tanhshrink``).

    Args:
        x: the input.

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="tanhshrink")
    return x - unary.tanh(x)


def hardshrink(x, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, 0 elsewhere (PyTorch's ``hardshrink``).

    Args:
        x: the input.
        lambd: the bound (default 0.5).

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="hardshrink")
    return binary.where(unary.abs(x) > lambd, x, 0.0)


def softshrink(x, lambd: float = 0.5) -> Tensor:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, 0 between (PyTorch's
    ``softshrink``).

    Args:
        x: the input.
        lambd: the bound, at least 0 (default 0.5).

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: for a negative ``lambd``.
    """
    if not lambd >= 0:
        raise ValueError(f"softshrink: lambd must be >= 0, got {lambd}")
    x = as_tensor(x, op="softshrink")
    return binary.where(x > lambd, x - lambd, binary.where(x < -lambd, x + lambd, 0.0))


def prelu(x, weight) -> Tensor:
    """``x`` where positive, ``weight * x`` elsewhere (PyTorch's ``prelu``): one slope, or
    one per channel (the last axis, channels last); the derivative at 0 is the slope's, as
    PyTorch's.

    Args:
        x: the input.
        weight: the slopes, of shape ``(1,)`` (or ``()``) or ``(C,)`` for ``C`` channels.

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: for slopes that are neither one nor one per channel.
    """
    x, w = as_tensor(x, op="prelu"), as_tensor(weight, op="prelu")
    if w.ndim > 1 or (w.size != 1 and (not x.ndim or x.shape[-1] != w.size)):
        raise ValueError(
            f"prelu: weight of shape {w.shape} must hold one slope or one per channel (the "
            f"last axis of the input of shape {x.shape})"
        )
    w = w.reshape(()) if w.size == 1 else w
    return binary.where(x > 0, x, w.cast(x.dtype) * x)


def softmin(x, dim: int = -1) -> Tensor:
    """``softmax(-x)`` along ``dim`` (PyTorch's ``softmin``).

    Args:
        x: the input.
        dim: the dim to normalize (default the last).

    Returns:
        A tensor like ``x``; it sums to 1 along ``dim``.
    """
    return softmax(-as_tensor(x, op="softmin"), dim)


def celu(x, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x / alpha) - 1)`` elsewhere (PyTorch's
    ``celu``).

    Args:
        x: the input.
        alpha: the scale (default 1; not 0).
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: for ``alpha`` 0 (PyTorch's).
    """
    _inplace("celu", inplace)
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0")
    x = as_tensor(x, op="celu")
    positive = x > 0
    return binary.where(positive, x, alpha * unary.expm1(binary.where(positive, 0.0, x) / alpha))


def glu(x, dim: int = -1) -> Tensor:
    """The gated linear unit: ``a * sigmoid(b)`` for ``x``'s halves ``a, b`` along ``dim``
    (PyTorch's ``glu``; ``jax.nn.glu``).

    Args:
        x: the input; ``dim`` of even length.
        dim: the dim to halve (default the last).

    Returns:
        A tensor with ``dim`` halved.

    Raises:
        ValueError: for an odd length along ``dim``.
    """
    x = as_tensor(x, op="glu")
    d = norm_axis("glu", dim, x.ndim, x.shape)
    if x.shape[d] % 2:
        raise ValueError(f"glu: dim {dim} of shape {x.shape} must have an even length")
    a, b = view.split(x, 2, axis=d)
    return a * unary.sigmoid(b)


def threshold(x, threshold: float, value: float, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x`` where it is above ``threshold``, ``value`` elsewhere (PyTorch's ``threshold``).

    Args:
        x: the input.
        threshold: the bound.
        value: what replaces the values at or below it.
        inplace: PyTorch's flag, accepted; the result is a new tensor either way.

    Returns:
        A tensor like ``x``.
    """
    _inplace("threshold", inplace)
    x = as_tensor(x, op="threshold")
    # (PyTorch's test, x <= threshold: a NaN input stays NaN)
    return binary.where(x <= threshold, unary.cast(as_tensor(value, op="threshold"), x.dtype), x)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """The ``p``-norm distance of ``x1`` and ``x2`` along the last dim, of ``x1 - x2 + eps``
    (PyTorch's ``pairwise_distance``).

    Args:
        x1: ``(..., D)``.
        x2: broadcasting against ``x1``.
        p: the norm's order (default 2).
        eps: added to the difference (default 1e-6).
        keepdim: keep the last dim as size 1.

    Returns:
        The distances, ``(...)``.
    """
    a, b = as_tensor(x1, op="pairwise_distance"), as_tensor(x2, op="pairwise_distance")
    return _distance(a, b, p, eps, keepdim)


__all__ += [
    "softsign",
    "tanhshrink",
    "hardshrink",
    "softshrink",
    "prelu",
    "softmin",
    "celu",
    "glu",
    "threshold",
    "pairwise_distance",
    "margin_ranking_loss",
    "hinge_embedding_loss",
    "soft_margin_loss",
    "cosine_embedding_loss",
    "poisson_nll_loss",
    "gaussian_nll_loss",
    "triplet_margin_loss",
    "multilabel_soft_margin_loss",
]

# PyTorch's functional attention is the module's call on given weights: transformer.py holds
# the module, and imports this one (the functions above are all defined by now)
from .transformer import multi_head_attention_forward  # noqa: E402

__all__ += ["multi_head_attention_forward"]
