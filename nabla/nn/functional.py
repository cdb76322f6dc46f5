"""Stateless layer functions (``nb.nn.functional``, usually imported as ``F``).

Layouts: a linear weight is ``(in_features, out_features)`` (``y = x @ W + b``), images are
NHWC, classes are the last axis. Activations are the ``nabla`` ops themselves; losses and
initializers are re-exported from :mod:`nabla.nn.losses` and :mod:`nabla.nn.init`.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..ops import binary, creation, indexing, reduction, unary
from ..ops import random as _random
from ..ops._util import as_tensor
from ..ops.nn import avg_pool2d, conv2d, max_pool2d
from ..runtime.tensor import Tensor
from .init import he_normal, he_uniform, xavier_normal, xavier_uniform
from .losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy_loss,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from .normalization import batch_norm, group_norm, instance_norm

__all__ = [
    "avg_pool2d",
    "batch_norm",
    "group_norm",
    "instance_norm",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "conv2d",
    "cross_entropy_loss",
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

relu = unary.relu
gelu = unary.gelu
tanh = unary.tanh
sigmoid = unary.sigmoid
silu = unary.silu
softmax = reduction.softmax
log_softmax = reduction.logsoftmax


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
    if beta == 1.0:
        y = unary.softplus(x)
    else:
        y = unary.softplus(x * beta) / beta
    if threshold != 20.0:
        y = binary.where(x * beta > threshold, x, y)
    return y


def leaky_relu(x, negative_slope: float = 0.01) -> Tensor:
    """``x`` where positive, ``negative_slope * x`` elsewhere.

    Args:
        x: the input.
        negative_slope: the slope for negative inputs (default 0.01).

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="leaky_relu")
    return binary.where(x > 0, x, x * negative_slope)


def relu6(x) -> Tensor:
    """``min(max(x, 0), 6)`` (PyTorch's ``relu6``).

    Args:
        x: the input.

    Returns:
        A tensor like ``x``.
    """
    return hardtanh(as_tensor(x, op="relu6"), 0.0, 6.0)


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """``x`` clipped to ``[min_val, max_val]`` (PyTorch's ``hardtanh``; its gradient is 1
    strictly inside the interval and 0 elsewhere, at the bounds too, as PyTorch's).

    Args:
        x: the input.
        min_val: the lower bound (default -1).
        max_val: the upper bound (default 1).

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="hardtanh")
    return binary.where(x <= min_val, min_val, binary.where(x >= max_val, max_val, x))


def elu(x, alpha: float = 1.0) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere (PyTorch's ``elu``).

    Args:
        x: the input.
        alpha: the scale of the negative part (default 1).

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="elu")
    positive = x > 0
    # expm1 only sees the negative part: a large x never makes inf * 0 in the gradient
    return binary.where(positive, x, alpha * unary.expm1(binary.where(positive, 0.0, x)))


_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805


def selu(x) -> Tensor:
    """``scale * elu(x, alpha)`` with the self-normalizing constants (PyTorch's ``selu``).

    Args:
        x: the input.

    Returns:
        A tensor like ``x``.
    """
    return _SELU_SCALE * elu(as_tensor(x, op="selu"), _SELU_ALPHA)


def mish(x) -> Tensor:
    """``x * tanh(softplus(x))`` (PyTorch's ``mish``).

    Args:
        x: the input.

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="mish")
    return x * unary.tanh(unary.softplus(x))


def hardsigmoid(x) -> Tensor:
    """``relu6(x + 3) / 6`` (PyTorch's ``hardsigmoid``).

    Args:
        x: the input.

    Returns:
        A tensor like ``x``.
    """
    return hardtanh(as_tensor(x, op="hardsigmoid") / 6.0 + 0.5, 0.0, 1.0)


def hardswish(x) -> Tensor:
    """``x * relu6(x + 3) / 6`` (PyTorch's ``hardswish``).

    Args:
        x: the input.

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="hardswish")
    # PyTorch's pieces with its boundaries (the gradient at -3 is 0, at 3 it is 1)
    return binary.where(x <= -3.0, 0.0, binary.where(x < 3.0, x * (x + 3.0) / 6.0, x))


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
    return y if bias is None else y + bias


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


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing ``normalized_shape`` dims to zero mean and unit variance, then
    scale by ``weight`` and shift by ``bias``.

    Args:
        x: the input.
        normalized_shape: int or tuple: the trailing dims to normalize over.
        weight: optional scale of shape ``normalized_shape``.
        bias: optional shift of shape ``normalized_shape``.
        eps: added to the variance (default 1e-5).

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: if ``x`` does not end with ``normalized_shape``.
    """
    x = as_tensor(x, op="layer_norm")
    axes = _check_normalized("layer_norm", x, normalized_shape)
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = centered.square().mean(axis=axes, keepdims=True)
    y = centered * unary.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def rms_norm(x, normalized_shape, weight=None, eps: float | None = None) -> Tensor:
    """Root-mean-square norm: ``x / sqrt(mean(x ** 2) + eps) * weight`` over the trailing dims.

    Args:
        x: the input.
        normalized_shape: int or tuple: the trailing dims to normalize over.
        weight: optional scale of shape ``normalized_shape``.
        eps: added to the mean square (default: the machine epsilon of ``x``'s dtype, as
            PyTorch's ``rms_norm``).

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: if ``x`` does not end with ``normalized_shape``.
    """
    x = as_tensor(x, op="rms_norm")
    axes = _check_normalized("rms_norm", x, normalized_shape)
    if eps is None:
        eps = float(ml_dtypes.finfo(x.dtype.numpy).eps) if x.dtype.is_float else 0.0
    y = x * unary.rsqrt(x.square().mean(axis=axes, keepdims=True) + eps)
    return y if weight is None else y * weight


def dropout(x, p: float = 0.5, training: bool = True, key: Tensor | None = None) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    A fresh mask is drawn on every call (under ``nb.compile`` too) unless ``key`` is given.

    Args:
        x: the input.
        p: the drop probability in ``[0, 1]`` (default 0.5; 1 gives zeros).
        training: when False, return ``x`` unchanged.
        key: an RNG key for a reproducible mask; None uses the global generator.

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: for ``p`` outside ``[0, 1]``.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    x = as_tensor(x, op="dropout")
    if not training or p == 0.0:
        return x
    if p == 1.0:  # everything dropped, as PyTorch
        return creation.zeros_like(x)
    keep = 1.0 - p
    if key is None:
        mask = _random.bernoulli(x.shape, keep)
    else:
        mask = _random.bernoulli(key, keep, x.shape)
    return binary.where(mask, x / keep, creation.zeros((), dtype=x.dtype))


def embedding(indices, weight, padding_idx=None) -> Tensor:
    """Rows of ``weight`` picked by integer ``indices``: shape ``indices.shape + (dim,)``.

    Args:
        indices: an integer tensor of row numbers in ``[0, num_embeddings)``.
        weight: the table ``(num_embeddings, dim)``.
        padding_idx: optional row whose lookups pass no gradient to ``weight`` (PyTorch's).

    Returns:
        The gathered rows.

    Raises:
        TypeError: if ``indices`` is not an integer tensor.
        ValueError: if ``weight`` is not a 2-D table.
        IndexError: for an index outside ``[0, num_embeddings)`` (checked at the call when
            the indices hold values).
    """
    return _embedding(indices, weight, padding_idx, "embedding")


def _embedding(indices, weight, padding_idx, who: str) -> Tensor:
    """:func:`embedding`, its errors naming ``who`` (``nn.Embedding`` names itself)."""
    indices, weight = as_tensor(indices, op=who), as_tensor(weight, op=who)
    if not indices.dtype.is_int:
        raise TypeError(f"{who}: indices must be integers, got {indices.dtype}")
    if weight.ndim != 2:
        raise ValueError(f"{who}: weight must be (num_embeddings, dim), got {weight.shape}")
    impl = indices._impl
    if impl.buffer is not None and not impl.levels and indices.size:
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
    rows = indexing.take(weight, indices, axis=0)
    if padding_idx is None:
        return rows
    pad = (indices == padding_idx % weight.shape[0]).unsqueeze(-1)
    return binary.where(pad, unary.stop_gradient(rows), rows)


def _neg_large(dtype) -> float:
    # a finite "minus infinity": a fully masked row gives a uniform softmax instead of NaN
    return -1e9 if dtype.numpy.itemsize >= 4 else -3e4


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

    Returns:
        ``(..., L, Ev)``.

    Raises:
        ValueError: if the shapes of ``query``, ``key`` and ``value`` do not fit.
    """
    q = as_tensor(query, op="scaled_dot_product_attention")
    k = as_tensor(key, op="scaled_dot_product_attention")
    v = as_tensor(value, op="scaled_dot_product_attention")
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
    if attn_mask is not None:
        attn_mask = as_tensor(attn_mask, op="scaled_dot_product_attention")
        check_attention_mask("scaled_dot_product_attention", attn_mask, q.shape, k.shape)
    out, _ = attention_with_weights(
        q, k, v, attn_mask, dropout_p, is_causal, scale, training, rng_key
    )
    return out


def check_attention_mask(op, mask, q_shape, k_shape) -> None:
    """Refuse a mask that does not broadcast to the scores ``(..., L, S)``, naming it."""
    scores = (*np.broadcast_shapes(q_shape[:-2], k_shape[:-2]), q_shape[-2], k_shape[-2])
    try:
        ok = np.broadcast_shapes(mask.shape, scores) == scores
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"{op}: attn_mask of shape {mask.shape} does not broadcast to the attention "
            f"scores {scores} (..., query length, key length)"
        )


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
        else:
            scores = scores + mask
    weights = reduction.softmax(scores, axis=-1)
    if dropout_p > 0.0 and training:
        weights = dropout(weights, dropout_p, True, rng_key)
    return weights @ v, weights
