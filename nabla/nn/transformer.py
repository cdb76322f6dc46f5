"""Attention and transformer layers: ``MultiHeadAttention``, ``TransformerEncoderLayer``,
``TransformerDecoderLayer``, and their stacks ``TransformerEncoder``/``TransformerDecoder``.

Sequences are ``(batch, length, features)``. Masks follow ``torch.nn.MultiheadAttention``: a
bool ``attn_mask`` is True where a query may NOT attend, a float one is added to the scores,
and a ``key_padding_mask`` is True at padding positions, which are ignored. (The functional
``scaled_dot_product_attention`` takes a bool mask the other way round, as PyTorch's does:
True where a query may attend.)
"""

from __future__ import annotations

import copy
import math

import numpy as np

from ..core.dtypes import get_default_dtype
from ..ops import creation, unary, view
from ..ops._util import as_tensor
from ..runtime.tensor import Tensor
from . import functional as F
from . import init
from .layers import Dropout, LayerNorm, Linear, _keys
from .module import Module, ModuleList

__all__ = [
    "MultiHeadAttention",
    "MultiheadAttention",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]


def _one_of(owner: str, name: str, value, alias: str, alias_value):
    """``value`` or its alias's (the original nabla's spelling of the same argument): one of
    them must be given, not both."""
    if value is not None and alias_value is not None:
        raise TypeError(f"{owner}: got both {name}={value!r} and {alias}={alias_value!r}; pass one")
    if value is None and alias_value is None:
        raise TypeError(f"{owner}: missing the argument {name!r} (or its alias {alias!r})")
    return value if value is not None else alias_value


class MultiHeadAttention(Module):
    """Multi-head attention over ``(batch, length, embed_dim)`` sequences.

    Args:
        embed_dim: model width; a multiple of ``num_heads``.
        num_heads: number of heads.
        dropout: dropout on the attention weights while training (default 0).
        bias: biases in the projections (default True).
        key: optional RNG key for the initial values.
        dtype: parameter dtype (default: the default dtype).
        kdim: features of the keys (default ``embed_dim``), as in PyTorch.
        vdim: features of the values (default ``embed_dim``).
        batch_first: sequences are ``(batch, length, features)`` (True, the default, as the
            original nabla's module); False takes and returns ``(length, batch, features)``,
            as PyTorch's default.
        d_model: the original nabla's name of ``embed_dim`` (keyword only; give one of them).

    Raises:
        ValueError: for ``embed_dim`` not a multiple of ``num_heads``.
        TypeError: for both or neither of ``embed_dim`` and ``d_model``.
    """

    def __init__(
        self,
        embed_dim: int | None = None,
        num_heads: int | None = None,
        dropout=0.0,
        bias=True,
        key=None,
        dtype=None,
        *,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = True,
        d_model: int | None = None,
    ):
        super().__init__()
        embed_dim = _one_of("MultiHeadAttention", "embed_dim", embed_dim, "d_model", d_model)
        if num_heads is None:
            raise TypeError("MultiHeadAttention: missing the argument 'num_heads'")
        self.batch_first = bool(batch_first)
        for name, v in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 1:
                raise ValueError(f"MultiHeadAttention: {name} must be a positive int, got {v!r}")
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiHeadAttention: embed_dim={embed_dim} is not a multiple of "
                f"num_heads={num_heads} (it must be divisible by num_heads)"
            )
        self.embed_dim, self.num_heads, self.dropout = int(embed_dim), int(num_heads), dropout
        self.kdim = self.embed_dim if kdim is None else int(kdim)
        self.vdim = self.embed_dim if vdim is None else int(vdim)
        self._make_projections(bias, key, dtype)

    def _make_projections(self, bias, key, dtype) -> None:
        """The query, key, value and output projections' parameters."""
        e = self.embed_dim
        kq, kk, kv, ko = _keys(key, 4)
        self.q_proj = Linear(e, e, bias, kq, dtype)
        self.k_proj = Linear(self.kdim, e, bias, kk, dtype)
        self.v_proj = Linear(self.vdim, e, bias, kv, dtype)
        self.out_proj = Linear(e, e, bias, ko, dtype)

    def _heads(self, x: Tensor) -> Tensor:
        n, length, _ = x.shape
        return x.reshape(n, length, self.num_heads, x.shape[-1] // self.num_heads).swap_axes(1, 2)

    def forward(
        self,
        query,
        key=None,
        value=None,
        key_padding_mask=None,
        attn_mask=None,
        is_causal: bool = False,
        *,
        need_weights: bool = False,
        average_attn_weights: bool = True,
    ):
        """Attend from ``query`` to ``key``/``value`` (self-attention when they are None).

        Args:
            query: ``(N, L, embed_dim)``, or ``(L, embed_dim)`` unbatched (with 2-D ``key``
                and ``value`` and a ``(S,)`` ``key_padding_mask``, as PyTorch's).
            key: ``(N, S, kdim)`` (default: ``query``).
            value: ``(N, S, vdim)`` (default: ``key``).
            key_padding_mask: optional ``(N, S)``: bool (True marks padding that is
                ignored) or float (added to the scores, as in PyTorch).
            attn_mask: optional mask of shape ``(L, S)``, ``(N * heads, L, S)`` (PyTorch's
                per-head form; another 3-D shape is refused) or 4-D broadcasting to
                ``(N, heads, L, S)``: bool (True = may NOT
                attend, as in PyTorch's ``MultiheadAttention``) or float (added to the scores).
            is_causal: position ``i`` attends only to positions ``<= i``.
            need_weights: also return the attention weights, as PyTorch (default False: the
                output alone, as the original nabla's module).
            average_attn_weights: with ``need_weights``, average the weights over the heads
                (``(N, L, S)``) instead of ``(N, heads, L, S)``.

        Returns:
            ``(N, L, embed_dim)`` (unbatched: ``(L, embed_dim)``); with ``need_weights``,
            ``(output, weights)``.

        Raises:
            ValueError: for inputs that are not ``(N, length, embed_dim)`` (or all three
                unbatched), or a mask of another shape.
        """
        cls = type(self).__name__
        query = as_tensor(query, op=cls)
        key = query if key is None else as_tensor(key, op=cls)
        value = key if value is None else as_tensor(value, op=cls)
        # PyTorch's unbatched call: (length, features) each, a key_padding_mask of (S,)
        unbatched = query.ndim == 2 and key.ndim == 2 and value.ndim == 2
        dims = (("query", query, self.embed_dim), ("key", key, self.kdim))
        layout = "batch, length" if self.batch_first else "length, batch"
        for name, t, d in (*dims, ("value", value, self.vdim)):
            if t.ndim != (2 if unbatched else 3) or t.shape[-1] != d:
                raise ValueError(
                    f"{cls}({self.extra_repr()}): {name} of shape {t.shape} is not ({layout}, "
                    f"{d}) or, unbatched, (length, {d})"
                )
        if unbatched:
            query, key, value = (t.unsqueeze(0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = as_tensor(key_padding_mask, op=cls).unsqueeze(0)
        else:  # PyTorch's (length, batch, features) when not batch_first: swapped in and out
            query, key, value = (_seq_major(t, self.batch_first) for t in (query, key, value))
        got = self._forward_batch_first(
            query,
            key,
            value,
            key_padding_mask,
            attn_mask,
            is_causal,
            need_weights,
            average_attn_weights,
        )
        out, weights = (got, None) if not need_weights else got
        if unbatched:
            out = out.squeeze(0)
            weights = None if weights is None else weights.squeeze(0)
        else:
            out = _seq_major(out, self.batch_first)
        return out if not need_weights else (out, weights)

    def _forward_batch_first(
        self,
        query,
        key,
        value,
        key_padding_mask,
        attn_mask,
        is_causal,
        need_weights,
        average_attn_weights,
    ):
        if query.shape[0] != key.shape[0]:
            raise ValueError(
                f"MultiHeadAttention: query {query.shape} and key {key.shape} differ in batch"
            )
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"MultiHeadAttention: key {key.shape} and value {value.shape} differ in "
                "batch or length"
            )
        q, k, v = (self._heads(t) for t in self._project(query, key, value))
        extra = k.shape[2] - key.shape[1]  # key positions the layer appends (add_bias_kv)
        if attn_mask is not None:
            attn_mask = _pad_mask(as_tensor(attn_mask, op="MultiHeadAttention"), extra)
        mask = None if attn_mask is None else self._keep_mask(attn_mask, q.shape, k.shape)
        if key_padding_mask is not None:
            kpm = as_tensor(key_padding_mask, op="MultiHeadAttention")
            if kpm.shape != (key.shape[0], key.shape[1]):
                raise ValueError(
                    f"MultiHeadAttention: key_padding_mask of shape {kpm.shape}, expected "
                    f"(batch, source length) = {(key.shape[0], key.shape[1])}"
                )
            kpm = _pad_mask(kpm, extra)
            if not (kpm.dtype.is_bool or kpm.dtype.is_float):
                raise TypeError(
                    f"MultiHeadAttention: key_padding_mask must be bool (True = padding) or "
                    f"float (added to the scores), got {kpm.dtype.value}{list(kpm.shape)}; "
                    "for a 0/1 mask pass mask > 0"
                )
            at = (kpm.shape[0], 1, 1, kpm.shape[1])
            if kpm.dtype.is_float:  # added to the scores, as in PyTorch (-inf at padding)
                add = kpm.cast(q.dtype).reshape(*at)
                mask = add if mask is None else _add_scores(mask, add)
            else:  # True marks padding
                keep = unary.logical_not(kpm).reshape(*at)
                mask = keep if mask is None else _combine(mask, keep)
        out, weights = F.attention_with_weights(
            q, k, v, mask, self.dropout, is_causal, training=self.training
        )
        n, _, length, _ = out.shape
        out = self.out_proj(out.swap_axes(1, 2).reshape(n, length, self.embed_dim))
        if not need_weights:
            return out
        return out, (weights.mean(axis=1) if average_attn_weights else weights)

    def _project(self, query, key, value) -> tuple:
        """The query, key and value projections, each ``(N, length, embed_dim)``."""
        return self.q_proj(query), self.k_proj(key), self.v_proj(value)

    def _keep_mask(self, attn_mask, q_shape, k_shape):
        """The user's mask as the attention takes it: a bool one inverted (True = may
        attend), PyTorch's ``(N * heads, L, S)`` form split into ``(N, heads, L, S)``."""
        mask = as_tensor(attn_mask, op="MultiHeadAttention")
        n, heads, length, source = q_shape[0], self.num_heads, q_shape[2], k_shape[2]
        who = f"MultiHeadAttention({self.extra_repr()})"
        if mask.ndim == 3:  # PyTorch's two forms only: a (N, L, S) mask must not be read
            # as one per head when N happens to equal the number of heads
            if mask.shape != (n * heads, length, source):
                raise ValueError(
                    f"{who}: a 3-D attn_mask must be (batch * num_heads, L, S) = "
                    f"{(n * heads, length, source)}, got {mask.shape}; a 2-D (L, S) mask "
                    "applies to every batch element and head, a 4-D one broadcasts to (N, "
                    "num_heads, L, S)"
                )
            mask = mask.reshape(n, heads, length, source)
        F.check_attention_mask(who, mask, q_shape, k_shape, "True = may not attend")
        return unary.logical_not(mask) if mask.dtype.is_bool else mask

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        dims = "".join(
            f", {n}={d}"
            for n, d in (("kdim", self.kdim), ("vdim", self.vdim))
            if d != self.embed_dim
        )
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}{dims}"


def _pad_mask(mask: Tensor, extra: int) -> Tensor:
    """A mask over the source positions widened by ``extra`` positions that every query may
    attend (False in a bool mask, 0 in an additive one), as PyTorch pads for
    ``add_bias_kv``/``add_zero_attn``."""
    if not extra or mask.ndim == 0:
        return mask
    pads = [(0, 0)] * (mask.ndim - 1) + [(0, extra)]
    return view.pad(mask, pads, value=False if mask.dtype.is_bool else 0.0)


def _combine(mask, keep: Tensor) -> Tensor:
    """A user mask (bool or additive float) combined with a bool keep-mask."""
    mask = as_tensor(mask, op="MultiHeadAttention")
    if mask.dtype.is_bool:
        return mask & keep
    return mask + (1.0 - keep.cast(mask.dtype)) * F._neg_large(mask.dtype)


def _add_scores(mask, add: Tensor) -> Tensor:
    """A user mask (bool keep-mask or additive float) with a float mask ``add`` added."""
    if mask.dtype.is_bool:
        return add + (1.0 - mask.cast(add.dtype)) * F._neg_large(add.dtype)
    return mask + add


_ACTIVATIONS = {"relu": unary.relu, "gelu": unary.gelu, "silu": unary.silu, "tanh": unary.tanh}


def _activation(name):
    if callable(name):
        return name
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)} or a callable")
    return _ACTIVATIONS[name]


class _TorchLinear(Module):
    """A linear map holding PyTorch's ``(out, in)`` weight (``x @ weight.T + bias``): the
    ``out_proj`` of :class:`MultiheadAttention`, so its ``state_dict`` loads PyTorch's as
    it is (a square weight of the other layout would load transposed, silently)."""

    def _in_pytorch_layout(self, name: str) -> bool:
        return name == "weight"  # (PyTorch's layout: nn.init takes its fans)

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype=None):
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = init.uniform((out_features, in_features), -bound, bound, dtype=dtype)
        self.bias = init.zeros((out_features,), dtype) if bias else None

    def forward(self, x):
        """``x @ weight.T + bias``.

        Args:
            x: ``(..., in_features)``.

        Returns:
            ``(..., out_features)``.
        """
        y = x @ self.weight.T
        return y if self.bias is None else y + self.bias


class MultiheadAttention(MultiHeadAttention):
    """PyTorch's ``nn.MultiheadAttention``: its constructor, defaults, call and parameters.

    Unlike :class:`MultiHeadAttention` (the original nabla's module), sequences are
    ``(length, batch, embed_dim)`` unless ``batch_first=True``, the call returns
    ``(output, weights)`` (weights None with ``need_weights=False``), and the parameters
    are PyTorch's, in its layouts: ``in_proj_weight`` ``(3 * embed_dim, embed_dim)`` and
    ``in_proj_bias`` (or ``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` when
    ``kdim``/``vdim`` differ from ``embed_dim``), ``out_proj.weight`` ``(out, in)`` and
    ``out_proj.bias``, so a PyTorch ``state_dict`` loads as it is.

    Args:
        embed_dim: model width; a multiple of ``num_heads``.
        num_heads: number of heads.
        dropout: dropout on the attention weights while training (default 0).
        bias: biases in the projections (default True).
        add_bias_kv: learn one more key and value position (``bias_k``, ``bias_v``, each
            ``(1, 1, embed_dim)``), appended to every sequence's keys and values.
        add_zero_attn: append one more key and value position of zeros (after
            ``bias_k``'s), which every query may attend.
        kdim: features of the keys (default ``embed_dim``).
        vdim: features of the values (default ``embed_dim``).
        batch_first: sequences ``(batch, length, features)`` (default False, as PyTorch:
            ``(length, batch, features)``).
        device: accepted for PyTorch's signature; parameters are made on the default device.
        dtype: parameter dtype (default: the default dtype).

    Raises:
        ValueError: for ``embed_dim`` not a multiple of ``num_heads``.
    """

    def _in_pytorch_layout(self, name: str) -> bool:
        # PyTorch's (out, in) projections: nn.init takes their fans as PyTorch's
        return name in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight")

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout=0.0,
        bias=True,
        add_bias_kv=False,
        add_zero_attn=False,
        kdim=None,
        vdim=None,
        batch_first=False,
        device=None,
        dtype=None,
    ):
        super().__init__(embed_dim, num_heads, dropout, bias, None, dtype, kdim=kdim, vdim=vdim)
        self.batch_first = bool(batch_first)
        self.add_zero_attn = bool(add_zero_attn)
        if add_bias_kv:  # PyTorch's xavier_normal_ of a (1, 1, E) tensor: std sqrt(1 / E)
            std = math.sqrt(1.0 / self.embed_dim)
            self.bias_k = init.normal((1, 1, self.embed_dim), 0.0, std, dtype=dtype)
            self.bias_v = init.normal((1, 1, self.embed_dim), 0.0, std, dtype=dtype)
        else:
            self.bias_k = self.bias_v = None

    def _make_projections(self, bias, key, dtype) -> None:
        # PyTorch's parameters, in its layouts and order
        e = self.embed_dim
        self.packed = self.kdim == e and self.vdim == e
        if self.packed:
            self.in_proj_weight = init.xavier_uniform((3 * e, e), dtype=dtype)
        else:
            self.q_proj_weight = init.xavier_uniform((e, e), dtype=dtype)
            self.k_proj_weight = init.xavier_uniform((e, self.kdim), dtype=dtype)
            self.v_proj_weight = init.xavier_uniform((e, self.vdim), dtype=dtype)
        self.in_proj_bias = init.zeros((3 * e,), dtype) if bias else None
        self.out_proj = _TorchLinear(e, e, bias, dtype)

    def _project(self, query, key, value) -> tuple:
        e = self.embed_dim
        if self.packed:
            w = self.in_proj_weight
            weights = (w[:e], w[e : 2 * e], w[2 * e :])
        else:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        out = []
        for i, (x, w) in enumerate(zip((query, key, value), weights, strict=True)):
            y = x @ w.T
            if self.in_proj_bias is not None:
                y = y + self.in_proj_bias[i * e : (i + 1) * e]
            out.append(y)
        q, k, v = out
        n = k.shape[0]
        if self.bias_k is not None:  # one learned key and value position, at the end
            k = view.concatenate([k, self.bias_k.broadcast_to((n, 1, e))], 1)
            v = view.concatenate([v, self.bias_v.broadcast_to((n, 1, e))], 1)
        if self.add_zero_attn:  # then one of zeros
            k = view.concatenate([k, creation.zeros((n, 1, e), dtype=k.dtype)], 1)
            v = view.concatenate([v, creation.zeros((n, 1, e), dtype=v.dtype)], 1)
        return q, k, v

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        """Attend from ``query`` to ``key``/``value``, PyTorch's call.

        Args:
            query: ``(L, N, embed_dim)`` (``(N, L, embed_dim)`` with ``batch_first``).
            key: ``(S, N, kdim)`` (batch first likewise).
            value: ``(S, N, vdim)``.
            key_padding_mask: optional ``(N, S)``: bool (True marks padding) or float
                (added to the scores).
            need_weights: also return the attention weights (default True).
            attn_mask: optional ``(L, S)`` or ``(N * num_heads, L, S)`` mask: bool (True =
                may NOT attend) or float (added to the scores).
            average_attn_weights: average the weights over the heads (default True).
            is_causal: position ``i`` attends only to positions ``<= i``.

        Returns:
            ``(output, weights)``: the output like ``query`` with ``embed_dim`` features;
            the weights ``(N, L, S)`` (``(N, num_heads, L, S)`` unaveraged), or None.
        """
        got = super().forward(  # (which takes the layout batch_first says)
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            is_causal=is_causal,
            need_weights=need_weights,
            average_attn_weights=average_attn_weights,
        )
        return got if need_weights else (got, None)


class _GivenWeights(MultiheadAttention):
    """A :class:`MultiheadAttention` over weights it is given rather than made: the module
    behind :func:`multi_head_attention_forward`, so the function and the module compute
    the same way (masks, ``add_bias_kv``, ``add_zero_attn``, dropout, the weights)."""

    def __init__(self, num_heads, dropout_p, training, weights: dict, add_zero_attn):
        Module.__init__(self)
        out_w = weights.pop("out_proj_weight")
        e = out_w.shape[0]
        self.embed_dim, self.num_heads, self.dropout = e, int(num_heads), dropout_p
        self.batch_first, self.add_zero_attn = False, bool(add_zero_attn)
        self.packed = weights.get("in_proj_weight") is not None
        self.kdim = e if self.packed else weights["k_proj_weight"].shape[1]
        self.vdim = e if self.packed else weights["v_proj_weight"].shape[1]
        for name, w in weights.items():
            setattr(self, name, w)
        self.out_proj = _TorchLinear.__new__(_TorchLinear)
        Module.__init__(self.out_proj)
        self.out_proj.weight, self.out_proj.bias = out_w, weights.get("out_proj_bias")
        self.train(bool(training))


def multi_head_attention_forward(
    query,
    key,
    value,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight,
    in_proj_bias,
    bias_k,
    bias_v,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight,
    out_proj_bias,
    training: bool = True,
    key_padding_mask=None,
    need_weights: bool = True,
    attn_mask=None,
    use_separate_proj_weight: bool = False,
    q_proj_weight=None,
    k_proj_weight=None,
    v_proj_weight=None,
    static_k=None,
    static_v=None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
):
    """PyTorch's ``F.multi_head_attention_forward``: :class:`MultiheadAttention`'s call on
    weights given as arguments, in PyTorch's layouts. Sequences are ``(length, batch,
    features)``, or ``(length, features)`` unbatched.

    Args:
        query: ``(L, N, E)``.
        key: ``(S, N, kdim)``.
        value: ``(S, N, vdim)``.
        embed_dim_to_check: ``E``, checked against ``query``.
        num_heads: number of heads (a divisor of ``E``).
        in_proj_weight: ``(3 E, E)``, the query, key and value projections stacked (None
            with ``use_separate_proj_weight``).
        in_proj_bias: ``(3 E,)`` or None.
        bias_k: ``(1, 1, E)`` key appended to every sequence's keys, or None.
        bias_v: ``(1, 1, E)`` value appended likewise, or None.
        add_zero_attn: append one more key and value position of zeros.
        dropout_p: dropout on the attention weights while ``training``.
        out_proj_weight: ``(E, E)``, PyTorch's ``(out, in)``.
        out_proj_bias: ``(E,)`` or None.
        training: apply the dropout (default True, PyTorch's).
        key_padding_mask: optional ``(N, S)``, bool (True marks padding) or float (added).
        need_weights: also return the attention weights (default True).
        attn_mask: optional ``(L, S)`` or ``(N * num_heads, L, S)``, bool (True = may not
            attend) or float (added to the scores).
        use_separate_proj_weight: take ``q_proj_weight``/``k_proj_weight``/
            ``v_proj_weight`` instead of ``in_proj_weight``.
        q_proj_weight: ``(E, E)``.
        k_proj_weight: ``(E, kdim)``.
        v_proj_weight: ``(E, vdim)``.
        static_k: not supported (PyTorch's precomputed per-head keys).
        static_v: not supported.
        average_attn_weights: average the returned weights over the heads (default True).
        is_causal: PyTorch's hint that ``attn_mask`` is the causal mask; it needs
            ``attn_mask``, which is what is applied.

    Returns:
        ``(output, weights)``: the output ``(L, N, E)``; the weights ``(N, L, S)`` (``(N,
        num_heads, L, S)`` unaveraged), or None without ``need_weights``.

    Raises:
        ValueError: for a ``query`` whose features are not ``embed_dim_to_check``, missing
            projection weights, ``is_causal`` without ``attn_mask``, or the shape errors of
            :class:`MultiheadAttention`.
        NotImplementedError: for ``static_k``/``static_v``.
    """
    if static_k is not None or static_v is not None:
        raise NotImplementedError(
            "multi_head_attention_forward: static_k and static_v are not supported; "
            "project the keys and values with the weights instead"
        )
    query = as_tensor(query, op="multi_head_attention_forward")
    if query.shape[-1:] != (embed_dim_to_check,):
        raise ValueError(
            f"multi_head_attention_forward: query of shape {query.shape} does not have "
            f"embed_dim_to_check={embed_dim_to_check} features"
        )
    if is_causal and attn_mask is None:
        raise ValueError(
            "multi_head_attention_forward: is_causal is a hint that attn_mask is the causal "
            "mask; pass attn_mask too (as PyTorch requires)"
        )
    if embed_dim_to_check % num_heads:
        raise ValueError(
            f"multi_head_attention_forward: embed_dim {embed_dim_to_check} is not a multiple "
            f"of num_heads={num_heads}"
        )
    if use_separate_proj_weight:
        given = {"q_proj_weight": q_proj_weight, "k_proj_weight": k_proj_weight}
        given["v_proj_weight"] = v_proj_weight
    else:
        given = {"in_proj_weight": in_proj_weight}
    missing = [name for name, w in given.items() if w is None]
    if missing or out_proj_weight is None:
        raise ValueError(
            f"multi_head_attention_forward: missing {missing or ['out_proj_weight']} "
            f"(use_separate_proj_weight={use_separate_proj_weight})"
        )
    given.update(
        in_proj_bias=in_proj_bias,
        out_proj_weight=out_proj_weight,
        out_proj_bias=out_proj_bias,
        bias_k=bias_k,
        bias_v=bias_v,
    )
    weights = {
        k: None if v is None else as_tensor(v, op="multi_head_attention_forward")
        for k, v in given.items()
    }
    module = _GivenWeights(num_heads, dropout_p, training, weights, add_zero_attn)
    return module(
        query,
        key,
        value,
        key_padding_mask=key_padding_mask,
        need_weights=need_weights,
        attn_mask=attn_mask,
        average_attn_weights=average_attn_weights,
    )


def _seq_major(x, batch_first: bool):
    """``x`` as ``(batch, length, ...)`` from the layer's layout (a swap of the first two
    axes when it is PyTorch's ``(length, batch, ...)``), and back; an unbatched
    ``(length, features)`` stays as it is (the attention takes it so)."""
    x = as_tensor(x, op="transformer layer")
    return x if batch_first or x.ndim == 2 else x.swap_axes(0, 1)


def _qkv_bound(attention, proj) -> float:
    """PyTorch's Xavier bound for a query, key or value projection of ``attention``: of its
    packed ``(3E, E)`` ``in_proj_weight`` when the key and value widths are ``E``, else of
    that projection's own ``(E, width)`` matrix."""
    e = attention.embed_dim
    if attention.kdim == e and attention.vdim == e:
        return math.sqrt(6.0 / (e + 3 * e))
    return math.sqrt(6.0 / (e + proj.weight.shape[0]))  # (ours: (width, E))


def _qkv(attention) -> tuple:
    return attention.q_proj, attention.k_proj, attention.v_proj


def _pytorch_attention_init(attention, key) -> None:
    """The initial values PyTorch's ``MultiheadAttention`` gives (its ``_reset_parameters``)
    on ``MultiHeadAttention``'s separate projections: the query, key and value weights
    Xavier-uniform as one packed matrix, their biases and the output bias 0 (the output
    weight keeps a Linear's). The encoder and decoder layers take them, as PyTorch's."""
    for proj, k in zip(_qkv(attention), _keys(key, 3)):
        a = _qkv_bound(attention, proj)
        proj.weight = init.uniform(proj.weight.shape, -a, a, k, proj.weight.dtype)
        if proj.bias is not None:
            proj.bias = init.zeros(proj.bias.shape, proj.bias.dtype)
    out = attention.out_proj
    if out.bias is not None:
        out.bias = init.zeros(out.bias.shape, out.bias.dtype)


class _TransformerLayer(Module):
    """What the encoder and decoder layers share: their construction (the attention blocks
    named in ``attentions``, the feed-forward block, a ``LayerNorm`` per block, dropout and
    the activation; parameters registered and drawn in that order) and the feed-forward
    block itself."""

    attentions: tuple = ()

    def __init__(
        self,
        d_model: int,
        nhead: int | None = None,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = True,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        key=None,
        num_heads: int | None = None,
    ):
        super().__init__()
        nhead = _one_of(type(self).__name__, "nhead", nhead, "num_heads", num_heads)
        self.batch_first = bool(batch_first)
        bias = bool(bias)
        *attention_keys, k1, k2 = _keys(key, len(self.attentions) + 2)
        for name, k in zip(self.attentions, attention_keys):
            k_made, k_qkv = _keys(k, 2)
            attention = MultiHeadAttention(d_model, nhead, dropout, bias, k_made, dtype)
            _pytorch_attention_init(attention, k_qkv)
            setattr(self, name, attention)
        self.linear1 = Linear(d_model, dim_feedforward, bias, k1, dtype)
        self.linear2 = Linear(dim_feedforward, d_model, bias, k2, dtype)
        for i in range(1, len(self.attentions) + 2):  # norm1, norm2, ...: one per block
            setattr(self, f"norm{i}", LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype))
        self.dropout = Dropout(dropout)
        self.activation = _activation(activation)
        self.norm_first = bool(norm_first)

    def _ff(self, x):
        return self.dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention then a feed-forward block, each with a residual connection and
    ``LayerNorm`` (after the residual, or before the block with ``norm_first=True``).

    Args:
        d_model: model width.
        nhead: attention heads.
        dim_feedforward: hidden width of the feed-forward block (default 2048).
        dropout: dropout rate (default 0.1).
        activation: ``"relu"`` (default), ``"gelu"``, ``"silu"``, ``"tanh"`` or a callable.
        layer_norm_eps: LayerNorm epsilon (default 1e-5).
        batch_first: sequences are ``(batch, length, features)`` (True, the default, as
            the original nabla's layer); False takes and returns ``(length, batch,
            features)``, as PyTorch's default.
        norm_first: pre-norm instead of post-norm (default False).
        bias: biases in the linear layers, the attention and the ``LayerNorm``s (default
            True; False: none, as PyTorch's).
        device: accepted for PyTorch's calls (the default device is used).
        dtype: the parameters' dtype (default: the default dtype).
        key: optional RNG key for the initial values (keyword only).
        num_heads: the original nabla's name of ``nhead`` (keyword only; give one of them).

    The positional order is PyTorch's: ``(d_model, nhead, dim_feedforward, dropout,
    activation, layer_norm_eps, batch_first, norm_first, bias, device, dtype)``.

    Raises:
        TypeError: for both or neither of ``nhead`` and ``num_heads``.
    """

    attentions = ("self_attn",)

    def _sa(self, x, mask, kpm, causal):
        return self.dropout(self.self_attn(x, x, x, kpm, mask, causal))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        """Apply the layer.

        Args:
            src: ``(N, L, d_model)``.
            src_mask: optional attention mask (see :class:`MultiHeadAttention`).
            src_key_padding_mask: optional bool ``(N, L)``, True at padding.
            is_causal: causal self-attention.

        Returns:
            ``(N, L, d_model)``.
        """
        x = _seq_major(src, self.batch_first)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff(self.norm2(x))
        else:
            x = self.norm1(x + self._sa(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff(x))
        return _seq_major(x, self.batch_first)


class TransformerDecoderLayer(_TransformerLayer):
    """Causal-capable self-attention, cross-attention to ``memory`` and a feed-forward block,
    each with a residual connection and ``LayerNorm``.

    Args:
        d_model: model width.
        nhead: attention heads.
        dim_feedforward: hidden width of the feed-forward block (default 2048).
        dropout: dropout rate (default 0.1).
        activation: ``"relu"`` (default), ``"gelu"``, ``"silu"``, ``"tanh"`` or a callable.
        layer_norm_eps: LayerNorm epsilon (default 1e-5).
        batch_first: sequences are ``(batch, length, features)`` (True, the default, as
            the original nabla's layer); False takes and returns ``(length, batch,
            features)``, as PyTorch's default.
        norm_first: pre-norm instead of post-norm (default False).
        bias: biases in the linear layers, the attention and the ``LayerNorm``s (default
            True; False: none, as PyTorch's).
        device: accepted for PyTorch's calls (the default device is used).
        dtype: the parameters' dtype (default: the default dtype).
        key: optional RNG key for the initial values (keyword only).
        num_heads: the original nabla's name of ``nhead`` (keyword only; give one of them).

    The positional order is PyTorch's: ``(d_model, nhead, dim_feedforward, dropout,
    activation, layer_norm_eps, batch_first, norm_first, bias, device, dtype)``.

    Raises:
        TypeError: for both or neither of ``nhead`` and ``num_heads``.
    """

    attentions = ("self_attn", "cross_attn")

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
        *,
        is_causal: bool | None = None,
    ):
        """Apply the layer.

        Args:
            tgt: ``(N, L, d_model)``.
            memory: ``(N, S, d_model)`` (the encoder's output).
            tgt_mask: optional self-attention mask.
            memory_mask: optional cross-attention mask.
            tgt_key_padding_mask: optional bool ``(N, L)``, True at padding.
            memory_key_padding_mask: optional bool ``(N, S)``, True at padding.
            tgt_is_causal: causal self-attention.
            memory_is_causal: PyTorch's hint that ``memory_mask`` is causal; accepted (the
                mask is applied as given).
            is_causal: the original nabla's name of ``tgt_is_causal`` (keyword only).

        Returns:
            ``(N, L, d_model)``.
        """
        if is_causal is not None:
            if tgt_is_causal and not is_causal:
                raise TypeError(
                    "TransformerDecoderLayer: got both tgt_is_causal=True and "
                    "is_causal=False; pass one"
                )
            tgt_is_causal = bool(is_causal)
        drop = self.dropout

        def sa(x):
            return drop(self.self_attn(x, x, x, tgt_key_padding_mask, tgt_mask, tgt_is_causal))

        def ca(x):
            return drop(self.cross_attn(x, memory, memory, memory_key_padding_mask, memory_mask))

        x = _seq_major(tgt, self.batch_first)
        memory = _seq_major(memory, self.batch_first)
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + ca(self.norm2(x))
            x = x + self._ff(self.norm3(x))
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + ca(x))
            x = self.norm3(x + self._ff(x))
        return _seq_major(x, self.batch_first)


class _Stack(Module):
    """``num_layers`` copies of a layer (``copy.deepcopy``: the same starting weights,
    trained apart, as PyTorch's stacks), then an optional final ``norm``."""

    def __init__(self, layer: Module, num_layers: int, norm: Module | None = None):
        super().__init__()
        name = type(self).__name__
        if not isinstance(layer, Module):
            raise TypeError(f"{name}: the layer must be a Module, got {type(layer).__name__}")
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"{name}: num_layers must be a positive int, got {num_layers!r}")
        self.layers = ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"num_layers={self.num_layers}"


class TransformerEncoder(_Stack):
    """A stack of ``num_layers`` copies of ``encoder_layer`` (PyTorch's
    ``TransformerEncoder``); sequences ``(batch, length, d_model)``.

    Args:
        encoder_layer: a :class:`TransformerEncoderLayer` (copied; its own weights are not
            used).
        num_layers: how many layers.
        norm: an optional module applied to the last layer's output (a ``LayerNorm``).
        enable_nested_tensor: PyTorch's fast-path switch, accepted with no effect (no
            nested tensors here: padded positions are computed as the others).
        mask_check: PyTorch's flag for checking the masks on the fast path, accepted.

    Example:
        >>> enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128), num_layers=2)
        >>> enc(nb.zeros((8, 10, 64))).shape
        (8, 10, 64)
    """

    def __init__(
        self,
        encoder_layer: Module,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ):
        super().__init__(encoder_layer, num_layers, norm)

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal: bool = False):
        """Run the layers in order.

        Args:
            src: ``(N, L, d_model)``.
            mask: optional self-attention mask, as the layer's ``src_mask``.
            src_key_padding_mask: optional bool ``(N, L)``, True at padding.
            is_causal: causal self-attention in every layer.

        Returns:
            ``(N, L, d_model)``.
        """
        x = src
        for layer in self.layers:
            x = layer(x, mask, src_key_padding_mask, is_causal)
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(_Stack):
    """A stack of ``num_layers`` copies of ``decoder_layer`` (PyTorch's
    ``TransformerDecoder``).

    Args:
        decoder_layer: a :class:`TransformerDecoderLayer` (copied).
        num_layers: how many layers.
        norm: an optional module applied to the last layer's output.
    """

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None):
        super().__init__(decoder_layer, num_layers, norm)

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ):
        """Run the layers in order, each attending to ``memory``.

        Args:
            tgt: ``(N, L, d_model)``.
            memory: ``(N, S, d_model)``.
            tgt_mask: optional self-attention mask.
            memory_mask: optional cross-attention mask.
            tgt_key_padding_mask: optional bool ``(N, L)``, True at padding.
            memory_key_padding_mask: optional bool ``(N, S)``, True at padding.
            tgt_is_causal: causal self-attention in every layer.
            memory_is_causal: PyTorch's hint that ``memory_mask`` is causal; accepted
                (the mask is applied as given).

        Returns:
            ``(N, L, d_model)``.
        """
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask,
                memory_mask,
                tgt_key_padding_mask,
                memory_key_padding_mask,
                tgt_is_causal,
            )
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """PyTorch's ``nn.Transformer``: an encoder stack and a decoder stack, each ending in a
    ``LayerNorm``, with PyTorch's arguments, defaults (``batch_first=False``: sequences
    ``(length, batch, d_model)``) and parameter names (``encoder.layers.0.self_attn...``,
    ``encoder.norm``, ``decoder.layers.0.cross_attn...``, ``decoder.norm``), so
    ``nn.utils.from_torch_state_dict`` loads a PyTorch model's weights. Every weight matrix
    starts Xavier-uniform, as PyTorch's ``_reset_parameters`` makes it.

    Args:
        d_model: model width (default 512).
        nhead: attention heads (default 8).
        num_encoder_layers: encoder layers (default 6).
        num_decoder_layers: decoder layers (default 6).
        dim_feedforward: hidden width of the feed-forward blocks (default 2048).
        dropout: dropout rate (default 0.1).
        activation: ``"relu"`` (default), ``"gelu"`` or a callable.
        custom_encoder: a module used instead of the encoder stack.
        custom_decoder: a module used instead of the decoder stack.
        layer_norm_eps: LayerNorm epsilon (default 1e-5).
        batch_first: sequences are ``(batch, length, d_model)`` (default False, PyTorch's).
        norm_first: pre-norm layers (default False).
        bias: biases in the linear layers, the attention and the ``LayerNorm``s (default
            True).
        device: accepted for PyTorch's calls (the default device is used).
        dtype: the parameters' dtype (default: the default dtype).
        key: optional RNG key for the initial values (keyword only).
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        custom_encoder: Module | None = None,
        custom_decoder: Module | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        key=None,
    ):
        super().__init__()
        k_enc, k_dec, k_init = _keys(key, 3)
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps)

        def stack(custom, layer_type, stack_type, num_layers, k):
            if custom is not None:
                return custom
            layer = layer_type(*layer_args, batch_first, norm_first, bias, None, dtype, key=k)
            norm = LayerNorm(d_model, layer_norm_eps, bias=bool(bias), dtype=dtype)
            return stack_type(layer, num_layers, norm)

        self.encoder = stack(
            custom_encoder, TransformerEncoderLayer, TransformerEncoder, num_encoder_layers, k_enc
        )
        self.decoder = stack(
            custom_decoder, TransformerDecoderLayer, TransformerDecoder, num_decoder_layers, k_dec
        )
        self.d_model, self.nhead, self.batch_first = d_model, nhead, bool(batch_first)
        # PyTorch's _reset_parameters: every matrix Xavier-uniform, the query, key and value
        # weights as its packed (3E, E) in_proj_weight (a bound half as wide apart as each
        # (E, E) alone would have)
        bounds = {
            id(proj.weight): _qkv_bound(m, proj)
            for m in self.modules()
            if isinstance(m, MultiHeadAttention) and not isinstance(m, MultiheadAttention)
            for proj in _qkv(m)
        }
        matrices = [p for p in self.parameters() if p.ndim > 1]
        for p, k in zip(matrices, _keys(k_init, len(matrices))):  # each its own draw
            if id(p) in bounds:
                a = bounds[id(p)]
                init.uniform_(p, -a, a, key=k)
            else:
                init.xavier_uniform_(p, key=k)

    def forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ):
        """Encode ``src``, then decode ``tgt`` attending to the encoding.

        Args:
            src: the source sequences (``(S, N, E)``, or ``(N, S, E)`` with
                ``batch_first``).
            tgt: the target sequences (``(T, N, E)``, or ``(N, T, E)``).
            src_mask: the encoder's self-attention mask.
            tgt_mask: the decoder's self-attention mask (e.g.
                :meth:`generate_square_subsequent_mask`).
            memory_mask: the decoder's cross-attention mask.
            src_key_padding_mask: bool ``(N, S)``, True at padding.
            tgt_key_padding_mask: bool ``(N, T)``, True at padding.
            memory_key_padding_mask: bool ``(N, S)``, True at padding.
            src_is_causal: causal encoder self-attention (a hint with ``src_mask``).
            tgt_is_causal: causal decoder self-attention (a hint with ``tgt_mask``).
            memory_is_causal: PyTorch's hint for ``memory_mask``; accepted.

        Returns:
            The decoder's output, shaped as ``tgt``.

        Raises:
            ValueError: for ``src`` and ``tgt`` of different batch sizes or a width other
                than ``d_model``.
        """
        src, tgt = as_tensor(src, op="Transformer"), as_tensor(tgt, op="Transformer")
        axis = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[axis] != tgt.shape[axis]:
            raise ValueError(
                f"Transformer: src {src.shape} and tgt {tgt.shape} must have one batch size "
                f"(dim {axis})"
            )
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(
                f"Transformer: the last dim of src {src.shape} and tgt {tgt.shape} must be "
                f"d_model={self.d_model}"
            )
        # (keywords, as PyTorch passes them: a custom encoder or decoder takes these names)
        memory = self.encoder(
            src,
            mask=src_mask,
            src_key_padding_mask=src_key_padding_mask,
            is_causal=bool(src_is_causal),
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=bool(tgt_is_causal),
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """The causal float mask of ``sz`` positions: 0 on and below the diagonal, ``-inf``
        above it (PyTorch's).

        Args:
            sz: the sequence length.
            device: the mask's device (default: the default device).
            dtype: its float dtype (default: the default dtype).

        Returns:
            A ``(sz, sz)`` tensor.
        """
        above = np.triu(np.full((sz, sz), -np.inf, np.float32), 1)
        return creation.constant(above, dtype=dtype or get_default_dtype(), device=device)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"d_model={self.d_model}, nhead={self.nhead}, batch_first={self.batch_first}"
