"""Layers: outputs vs NumPy references, gradients, masks, modes and error messages."""

import numpy as np
import pytest
from _nnref import fd_grad, t

import nabla as nb

nn = nb.nn
rng = np.random.default_rng(0)


def test_linear_matches_numpy_and_names_the_layer_in_errors():
    layer = nn.Linear(4, 3, key=nb.random.key(0))
    x = rng.standard_normal((2, 4))
    ref = x @ layer.weight.numpy() + layer.bias.numpy()
    np.testing.assert_allclose(layer(t(x)).numpy(), ref, rtol=1e-5)
    assert layer.weight.shape == (4, 3) and abs(layer.weight.numpy()).max() <= 0.5
    with pytest.raises(ValueError) as e:
        layer(nb.ones((2, 5)))
    assert str(e.value) == (
        "Linear(in_features=4, out_features=3): input of shape (2, 5) has 5 features, expected 4"
    )
    assert nn.Linear(2, 2, bias=False).bias is None
    same = nn.Linear(4, 3, key=nb.random.key(0))
    np.testing.assert_array_equal(same.weight.numpy(), layer.weight.numpy())


def _conv_ref(x, w, b):
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    out = np.zeros((n, h - kh + 1, wd - kw + 1, o))
    for i in range(out.shape[1]):
        for j in range(out.shape[2]):
            out[:, i, j] = np.einsum("nhwc,hwco->no", x[:, i : i + kh, j : j + kw], w)
    return out + b


def test_conv2d_pools_and_flatten():
    conv = nn.Conv2d(3, 4, 3, key=nb.random.key(1))
    assert conv.weight.shape == (3, 3, 3, 4)
    x = rng.standard_normal((2, 6, 6, 3))
    ref = _conv_ref(x, conv.weight.numpy(), conv.bias.numpy())
    np.testing.assert_allclose(conv(t(x)).numpy(), ref, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"Conv2d\(3, 4.*input of shape \(2, 6, 6, 5\)"):
        conv(nb.ones((2, 6, 6, 5)))
    one = conv(t(x[0]))  # one unbatched (H, W, C) image, as PyTorch takes (C, H, W)
    assert one.shape == (4, 4, 4)
    np.testing.assert_allclose(one.numpy(), ref[0], rtol=1e-4, atol=1e-5)
    y = rng.standard_normal((1, 4, 4, 2))
    mp = nn.MaxPool2d(2)(t(y)).numpy()
    np.testing.assert_allclose(mp, y.reshape(1, 2, 2, 2, 2, 2).max(axis=(2, 4)), rtol=1e-6)
    ap = nn.AvgPool2d(2)(t(y)).numpy()
    np.testing.assert_allclose(ap, y.reshape(1, 2, 2, 2, 2, 2).mean(axis=(2, 4)), rtol=1e-5)
    # PyTorch's module options: count_include_pad, dilation (by keyword)
    F = nn.functional
    got = nn.AvgPool2d(3, 1, 1, count_include_pad=False)(t(y)).numpy()
    want = F.avg_pool2d(t(y), 3, 1, 1, count_include_pad=False).numpy()
    np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(got[0, 0, 0], y[0, :2, :2].mean(axis=(0, 1)), rtol=1e-6)
    got = nn.MaxPool2d(2, 1, dilation=2)(t(y)).numpy()
    np.testing.assert_allclose(got[0, 0, 0], y[0, ::2, ::2].max(axis=(0, 1)))
    with pytest.raises(TypeError, match=r"MaxPool2d: unexpected argument\(s\) \['groups'\]"):
        nn.MaxPool2d(2, groups=2)
    # ceil_mode (PyTorch's): 5 rows, kernel 2, stride 2 -> 3 windows, the last one row tall
    z = rng.standard_normal((1, 5, 5, 1))
    got = nn.MaxPool2d(2, ceil_mode=True)(t(z)).numpy()
    assert got.shape == (1, 3, 3, 1)
    np.testing.assert_allclose(got[0, 2, 2, 0], z[0, 4, 4, 0])
    np.testing.assert_allclose(got[0, 0, 2, 0], z[0, :2, 4, 0].max())
    avg = nn.AvgPool2d(2, ceil_mode=True)(t(z)).numpy()  # the part past the input not counted
    np.testing.assert_allclose(avg[0, 2, 1, 0], z[0, 4, 2:4, 0].mean(), rtol=1e-6)
    # 6 rows, kernel 3, stride 2, padding 1: a fourth window starts on the last row; its
    # mean counts that row and the padding row (count_include_pad), not what lies past them
    w6 = rng.standard_normal((1, 6, 6, 1))
    avg = F.avg_pool2d(t(w6), 3, 2, 1, ceil_mode=True).numpy()
    assert avg.shape == (1, 4, 4, 1)
    np.testing.assert_allclose(avg[0, 3, 3, 0], w6[0, 5, 5, 0] / 4, rtol=1e-6)
    # 5 rows, kernel 2, stride 2, padding 1: a fourth window would start in the trailing
    # padding, so PyTorch drops it
    assert F.max_pool2d(t(z), 2, 2, 1, ceil_mode=True).shape == (1, 3, 3, 1)
    # PyTorch's positional order: ceil_mode, then count_include_pad (they were swapped: a
    # ported F.avg_pool2d(x, 3, 2, 1, True) pooled without ceil_mode, silently)
    for args in ((3, 2, 1, True), (3, 2, 1, True, False), (3, 1, 1, False, False)):
        keywords = dict(zip(("ceil_mode", "count_include_pad"), args[3:], strict=False))
        want = F.avg_pool2d(t(w6), 3, args[1], 1, **keywords).numpy()
        np.testing.assert_array_equal(F.avg_pool2d(t(w6), *args).numpy(), want)
        np.testing.assert_array_equal(nn.AvgPool2d(*args)(t(w6)).numpy(), want)
    assert F.avg_pool2d(t(w6), 3, 2, 1, True).shape == (1, 4, 4, 1)
    got = nn.MaxPool2d(3, 2, 1, 2, False, True)(t(w6)).numpy()  # dilation, indices, ceil
    np.testing.assert_array_equal(got, F.max_pool2d(t(w6), 3, 2, 1, 2, ceil_mode=True).numpy())
    values, indices = nn.MaxPool2d(3, 2, 1, 1, True)(t(w6))  # return_indices, positionally
    assert indices.dtype == nb.int64 and indices.shape == values.shape
    with pytest.raises(TypeError, match="takes at most 6 positional arguments"):
        nn.AvgPool2d(3, 2, 1, False, True, None, 1)
    # divisor_override: every window's sum over that number, padding or not
    got = F.avg_pool2d(t(w6), 3, 2, 1, divisor_override=5).numpy()
    padded = np.pad(w6, ((0, 0), (1, 1), (1, 1), (0, 0)))
    np.testing.assert_allclose(got[0, 1, 1, 0], padded[0, 2:5, 2:5, 0].sum() / 5, rtol=1e-6)
    np.testing.assert_allclose(
        nn.AvgPool2d(2, divisor_override=3)(t(y)).numpy(),
        y.reshape(1, 2, 2, 2, 2, 2).sum(axis=(2, 4)) / 3,
        rtol=1e-6,
    )
    with pytest.raises(ValueError, match="divisor_override must be a positive int, got 0"):
        F.avg_pool2d(t(w6), 2, divisor_override=0)
    # a window longer than the input (kernel 3, dilation 2: 5 rows of 4): no output at
    # stride 1, as PyTorch (it had one, the window run past the input); one at stride 2
    four = np.arange(16.0).reshape(1, 4, 4, 1)
    with pytest.raises(ValueError, match=r"max_pool2d: input \(1, 4, 4, 1\) is too small"):
        F.max_pool2d(t(four), 3, 1, 0, 2, ceil_mode=True)
    assert F.max_pool2d(t(four), 3, 2, 0, 2, ceil_mode=True).numpy().ravel().tolist() == [10.0]
    assert nn.Flatten()(t(y)).shape == (1, 32)
    assert nn.Flatten(1, 2)(t(y)).shape == (1, 16, 2)


def test_norms_embedding_activations_identity():
    x = rng.standard_normal((3, 4))
    ln = nn.LayerNorm(4)
    out = ln(t(x)).numpy()
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(-1), 1, atol=1e-3)
    assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"]
    rms = nn.RMSNorm(4)(t(x)).numpy()
    np.testing.assert_allclose(np.sqrt((rms**2).mean(-1)), 1, atol=1e-4)
    emb = nn.Embedding(10, 3, key=nb.random.key(0))
    assert emb(nb.constant(np.array([[1, 2, 3]]))).shape == (1, 3, 3)
    for mod, fn in [
        (nn.ReLU(), lambda v: np.maximum(v, 0)),
        (nn.Tanh(), np.tanh),
        (nn.Sigmoid(), lambda v: 1 / (1 + np.exp(-v))),
        (nn.SiLU(), lambda v: v / (1 + np.exp(-v))),
        (nn.Identity(), lambda v: v),
        (nn.Softplus(), lambda v: np.log1p(np.exp(v))),
    ]:
        np.testing.assert_allclose(mod(t(x)).numpy(), fn(x), rtol=1e-5, atol=1e-6)
    sm = nn.Softmax()(t(x)).numpy()
    np.testing.assert_allclose(sm.sum(-1), 1, rtol=1e-5)
    np.testing.assert_allclose(nn.LogSoftmax()(t(x)).numpy(), np.log(sm), rtol=1e-4, atol=1e-5)
    assert nn.GELU("tanh")(t(x)).shape == (3, 4)


def test_dropout_module_modes():
    d = nn.Dropout(0.5)
    x = nb.ones((200,))
    assert (d(x).numpy() == 0).any()
    assert not np.array_equal(d(x).numpy(), d(x).numpy())
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), 1.0)


def _mha_ref(m, q, kv, keep, value=None, add=0.0, weights=False):
    def proj(lin, v):
        return v @ lin.weight.numpy() + lin.bias.numpy()

    def heads(v):
        n, length, _ = v.shape
        return v.reshape(n, length, m.num_heads, -1).transpose(0, 2, 1, 3)

    value = kv if value is None else value
    qh, kh, vh = heads(proj(m.q_proj, q)), heads(proj(m.k_proj, kv)), heads(proj(m.v_proj, value))
    s = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(qh.shape[-1])
    s = np.where(keep, s + add, -1e9)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    o = (w @ vh).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], -1)
    return (proj(m.out_proj, o), w) if weights else proj(m.out_proj, o)


def test_mha_masks_and_weights_as_pytorch():
    """As ``torch.nn.MultiheadAttention``: a bool attn_mask is True where a query may not
    attend, a float one may be per head ``(N * heads, L, S)``, and ``need_weights`` returns
    the weights too (averaged over the heads unless ``average_attn_weights=False``)."""
    m = nn.MultiHeadAttention(8, 2, key=nb.random.key(4))
    q, mem = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 6, 8))
    blocked = np.triu(np.ones((5, 6), bool), 1)
    out, w = m(t(q), t(mem), attn_mask=nb.constant(blocked), need_weights=True)
    ref, ref_w = _mha_ref(m, q, mem, ~blocked, weights=True)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.numpy(), ref_w.mean(1), rtol=1e-4, atol=1e-6)
    per_head = rng.standard_normal((4, 5, 6))
    out, w = m(t(q), t(mem), attn_mask=t(per_head), need_weights=True, average_attn_weights=False)
    ref, ref_w = _mha_ref(m, q, mem, True, add=per_head.reshape(2, 2, 5, 6), weights=True)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.numpy(), ref_w, rtol=1e-4, atol=1e-6)
    assert isinstance(m(t(q), t(mem)), nb.Tensor)  # the output alone by default
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 6\) does not broadcast"):
        m(t(q), t(mem), attn_mask=nb.ones((3, 6)))
    with pytest.raises(ValueError, match=r"query \(2, 5, 8\) and key \(1, 6, 8\) differ"):
        m(t(q), t(mem[:1]))
    seq_first = nn.MultiHeadAttention(8, 2, batch_first=False)
    seq_first.load_state_dict(m.state_dict())
    got = seq_first(t(q).swap_axes(0, 1), t(mem).swap_axes(0, 1))
    np.testing.assert_allclose(got.swap_axes(0, 1).numpy(), m(t(q), t(mem)).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: attn_mask of shape"):
        nn.functional.scaled_dot_product_attention(t(q), t(mem), t(mem), attn_mask=nb.ones((4,)))
    # empty sequences, as PyTorch's shapes (the heads' reshape had inferred a -1 from 0)
    for n_q, n_k in ((0, 6), (5, 0)):
        out, w = m(nb.zeros((2, n_q, 8)), nb.zeros((2, n_k, 8)), need_weights=True)
        assert out.shape == (2, n_q, 8) and w.shape == (2, n_q, n_k)
    # an additive float64 mask (NumPy's default float) is added in the scores' dtype: the
    # attention stays float32 (PyTorch refuses the mismatch)
    mask64 = np.where(blocked, -np.inf, 0.0)
    out, w = m(t(q), t(mem), attn_mask=mask64, need_weights=True)
    assert out.dtype == nb.float32 and w.dtype == nb.float32
    ref, _ = _mha_ref(m, q, mem, ~blocked, weights=True)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_mha_float_key_padding_mask_is_added_to_the_scores():
    """As PyTorch: a float ``key_padding_mask`` is added to the scores (it was read as a
    bool mask, every nonzero entry padding), alone and with a bool ``attn_mask``."""
    m = nn.MultiHeadAttention(8, 2, key=nb.random.key(5))
    q, mem = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 6, 8))
    kpm = rng.standard_normal((2, 6)).astype(np.float32)
    kpm[1, 4:] = -np.inf
    out, w = m(t(q), t(mem), key_padding_mask=t(kpm), need_weights=True)
    ref, ref_w = _mha_ref(m, q, mem, True, add=kpm[:, None, None, :], weights=True)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.numpy(), ref_w.mean(1), rtol=1e-4, atol=1e-6)
    blocked = np.triu(np.ones((5, 6), bool), 1)
    out = m(t(q), t(mem), attn_mask=nb.constant(blocked), key_padding_mask=t(kpm))
    ref = _mha_ref(m, q, mem, ~blocked, add=kpm[:, None, None, :])
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_multi_head_attention_with_padding_and_causal_masks():
    m = nn.MultiHeadAttention(8, 2, key=nb.random.key(0))
    x = rng.standard_normal((2, 5, 8))
    pad = np.zeros((2, 5), bool)
    pad[0, 3:] = True  # the last two tokens of the first sequence are padding
    out = m(t(x), key_padding_mask=nb.constant(pad), is_causal=True).numpy()
    keep = (~pad)[:, None, None, :] & np.tril(np.ones((5, 5), bool))
    np.testing.assert_allclose(out, _mha_ref(m, x, x, keep), rtol=1e-4, atol=1e-5)
    # padding changes nothing for the non-padded positions of a causal model
    x2 = x.copy()
    x2[0, 3:] = 100.0
    out2 = m(t(x2), key_padding_mask=nb.constant(pad), is_causal=True).numpy()
    np.testing.assert_allclose(out2[0, :3], out[0, :3], rtol=1e-4, atol=1e-5)
    # cross-attention with a different source length
    mem = rng.standard_normal((2, 3, 8))
    cross = m(t(x), t(mem)).numpy()
    np.testing.assert_allclose(
        cross, _mha_ref(m, x, mem, np.ones((1, 1, 1, 3), bool)), rtol=1e-4, atol=1e-5
    )
    with pytest.raises(ValueError, match=r"query of shape \(2, 5\) is not \(batch, length, 8\)"):
        m(nb.ones((2, 5)))
    with pytest.raises(ValueError, match="not a multiple"):
        nn.MultiHeadAttention(6, 4)


def test_a_row_an_additive_mask_hides_wholly_averages_the_values():
    """PyTorch's float masks use -inf: a left-padded causal batch has query rows whose every
    key is -inf, which made NaN (the bool masks already gave the values' mean)."""
    F = nb.nn.functional
    q, k = nb.ones((1, 2, 4)), nb.ones((1, 3, 4))
    v = nb.constant(np.arange(12.0, dtype=np.float32).reshape(1, 3, 4))
    mask = np.zeros((2, 3), np.float32)
    mask[0, :] = -np.inf  # row 0 attends to nothing
    mask[1, 2] = -np.inf
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=nb.constant(mask)).numpy()
    np.testing.assert_allclose(out[0, 0], v.numpy()[0].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(out[0, 1], v.numpy()[0, :2].mean(axis=0), rtol=1e-6)
    g = nb.grad(
        lambda a: F.scaled_dot_product_attention(a, k, v, attn_mask=nb.constant(mask)).sum()
    )(q)
    assert np.isfinite(g.numpy()).all()


def test_mha_keys_and_values_of_other_widths():
    """``kdim``/``vdim`` as in PyTorch: keys and values of their own widths."""
    m = nn.MultiHeadAttention(8, 2, key=nb.random.key(3), kdim=5, vdim=3)
    assert "kdim=5, vdim=3" in repr(m) and m.k_proj.weight.shape == (5, 8)
    q, k, v = (
        rng.standard_normal((2, 4, 8)),
        rng.standard_normal((2, 6, 5)),
        rng.standard_normal((2, 6, 3)),
    )
    out = m(t(q), t(k), t(v)).numpy()
    ref = _mha_ref(m, q, k, np.ones((1, 1, 1, 6), bool), value=v)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"key of shape \(2, 4, 8\) is not \(batch, length, 5\)"):
        m(t(q), t(q), t(v))
    with pytest.raises(ValueError, match="differ in batch or length"):
        m(t(q), t(k), t(v[:, :4]))


def test_mha_gradient_matches_finite_differences():
    m = nn.MultiHeadAttention(4, 2, key=nb.random.key(2))
    m = nb.tree_map(lambda p: p.cast(nb.float64), m)
    x = rng.standard_normal((1, 3, 4))
    g = nb.grad(lambda v: m(v, is_causal=True).square().sum())(t(x, np.float64))
    ref = fd_grad(lambda v: (_mha_ref(m, v, v, np.tril(np.ones((3, 3), bool))) ** 2).sum(), x)
    np.testing.assert_allclose(g.numpy(), ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_layers(norm_first):
    enc = nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, norm_first=norm_first, key=nb.random.key(0)
    )
    dec = nn.TransformerDecoderLayer(
        8, 2, 16, dropout=0.0, activation="gelu", norm_first=norm_first, key=nb.random.key(1)
    )
    src, tgt = t(rng.standard_normal((2, 5, 8))), t(rng.standard_normal((2, 4, 8)))
    memory = enc(src, src_key_padding_mask=nb.constant(np.zeros((2, 5), bool)))
    out = dec(tgt, memory, tgt_is_causal=True)
    assert memory.shape == (2, 5, 8) and out.shape == (2, 4, 8)
    # causal: changing the last target token leaves earlier outputs unchanged
    tgt2 = tgt.numpy().copy()
    tgt2[:, -1] += 5.0
    out2 = dec(t(tgt2), memory, tgt_is_causal=True)
    np.testing.assert_allclose(out2.numpy()[:, :3], out.numpy()[:, :3], rtol=1e-4, atol=1e-5)
    g = nb.grad(lambda d: d(tgt, memory, tgt_is_causal=True).sum())(dec)
    assert g.cross_attn.q_proj.weight.shape == (8, 8)
    assert len(nb.tree_leaves(g)) == len(list(dec.parameters()))


def test_dropout_inside_compile_draws_fresh_masks():
    d = nn.Dropout(0.5)
    f = nb.compile(lambda mod, x: mod(x))
    x = nb.ones((64,))
    a, b = f(d, x).numpy(), f(d, x).numpy()
    assert not np.array_equal(a, b)
    assert f.stats.misses == 1


def test_layer_errors_name_the_layer_and_the_shapes():
    with pytest.raises(
        ValueError, match=r"LayerNorm\(\(4,\), eps=1e-05\): input of shape \(2, 5\)"
    ):
        nn.LayerNorm(4)(nb.ones((2, 5)))
    with pytest.raises(ValueError, match=r"RMSNorm\(\(3,\).*input of shape \(3, 2\)"):
        nn.RMSNorm(3)(nb.ones((3, 2)))
    with pytest.raises(TypeError, match=r"Embedding\(10, 3\): indices of shape \(2,\) have dtype"):
        nn.Embedding(10, 3)(nb.ones((2,)))
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)

    class ListOfTensors(nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = [nb.ones((2,)), nb.ones((2,))]

    with pytest.raises(TypeError, match="ListOfTensors.ws: a list of tensors"):
        ListOfTensors()


def test_conv2d_gradient_matches_finite_differences():
    conv = nn.Conv2d(2, 3, 2, stride=1, padding=1, key=nb.random.key(4))
    conv = nb.tree_map(lambda p: p.cast(nb.float64), conv)
    x = rng.standard_normal((1, 3, 3, 2))
    c = rng.standard_normal((1, 4, 4, 3))
    w, b = conv.weight.numpy(), conv.bias.numpy()

    def ref(v):
        return (_conv_ref(np.pad(v, ((0, 0), (1, 1), (1, 1), (0, 0))), w, b) * c).sum()

    np.testing.assert_allclose(
        conv(t(x, np.float64)).numpy() * c,
        _conv_ref(np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))), w, b) * c,
        rtol=1e-6,
    )
    g = nb.grad(lambda v: (conv(v) * t(c, np.float64)).sum())(t(x, np.float64))
    np.testing.assert_allclose(g.numpy(), fd_grad(ref, x), rtol=1e-5, atol=1e-7)


def test_decoder_memory_padding_is_ignored():
    dec = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, key=nb.random.key(3))
    tgt = t(rng.standard_normal((1, 3, 8)))
    memory = rng.standard_normal((1, 4, 8))
    pad = nb.constant(np.array([[False, False, True, True]]))
    out = dec(tgt, t(memory), memory_key_padding_mask=pad).numpy()
    memory[0, 2:] = 50.0  # padded memory positions cannot change the result
    out2 = dec(tgt, t(memory), memory_key_padding_mask=pad).numpy()
    np.testing.assert_allclose(out2, out, rtol=1e-5, atol=1e-6)


def test_transformer_layers_take_pytorch_s_positional_order():
    """(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
    norm_first): a sixth positional argument is the LayerNorm epsilon, as in PyTorch."""
    for cls in (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer):
        layer = cls(8, 2, 16, 0.0, "relu", 1e-3)
        assert layer.norm_first is False and layer.norm1.eps == 1e-3
        assert cls(8, 2, 16, 0.0, "relu", 1e-5, True, True).norm_first is True


@pytest.mark.parametrize("batch_first", [False, True])
def test_attention_and_transformer_layers_take_pytorch_s_unbatched_inputs(batch_first):
    """As PyTorch: a ``(length, features)`` query, key and value (a ``(S,)`` padding mask)
    in either layout give the batched call's answer for a batch of one, without its batch
    dim (the sequence-first layer had swapped the 2-D input's axes); the weights too."""
    q, kv = t(rng.standard_normal((4, 6))), t(rng.standard_normal((5, 6)))
    pad = nb.constant(np.array([False, False, True, False, False]))
    mha = nn.MultiheadAttention(6, 2, batch_first=batch_first)
    batched = (lambda a: a[None]) if batch_first else (lambda a: a[:, None])
    for avg in (True, False):
        out, w = mha(q, kv, kv, key_padding_mask=pad, average_attn_weights=avg)
        want, want_w = mha(
            batched(q),
            batched(kv),
            batched(kv),
            key_padding_mask=pad[None],
            average_attn_weights=avg,
        )
        assert out.shape == (4, 6) and w.shape == ((4, 5) if avg else (2, 4, 5))
        np.testing.assert_allclose(out.numpy(), want.numpy().reshape(4, 6), rtol=1e-6)
        np.testing.assert_allclose(w.numpy(), want_w.numpy()[0], rtol=1e-6)
    enc = nn.TransformerEncoderLayer(6, 2, 12, 0.0, batch_first=batch_first, key=nb.random.key(3))
    np.testing.assert_allclose(
        enc(q).numpy(), enc(batched(q)).numpy().reshape(4, 6), rtol=1e-5, atol=1e-6
    )
    dec = nn.TransformerDecoderLayer(6, 2, 12, 0.0, batch_first=batch_first, key=nb.random.key(4))
    np.testing.assert_allclose(
        dec(q, kv).numpy(), dec(batched(q), batched(kv)).numpy().reshape(4, 6), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ValueError, match=r"MultiheadAttention\(embed_dim=6, num_heads=2\): query"):
        mha(q, kv[None], kv[None])


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_layers_take_pytorch_s_sequence_first_layout(norm_first):
    """``batch_first=False`` (PyTorch's default) takes and returns ``(length, batch,
    features)``: the batch-first layer's answer with the first two axes swapped, masks
    unchanged."""
    x = t(rng.standard_normal((3, 5, 8)))  # (batch, length, features)
    mem = t(rng.standard_normal((3, 4, 8)))
    pad = nb.constant(np.array([[False] * 4, [False] * 3 + [True], [False] * 4]))
    for cls in (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer):
        first = cls(8, 2, 16, 0.0, norm_first=norm_first, key=nb.random.key(1))
        seq = cls(8, 2, 16, 0.0, batch_first=False, norm_first=norm_first, key=nb.random.key(1))
        if cls is nn.TransformerEncoderLayer:
            want = first(x, src_key_padding_mask=pad[:, :1].broadcast_to((3, 5)))
            got = seq(x.swap_axes(0, 1), src_key_padding_mask=pad[:, :1].broadcast_to((3, 5)))
        else:
            want = first(x, mem, memory_key_padding_mask=pad, tgt_is_causal=True)
            got = seq(
                x.swap_axes(0, 1),
                mem.swap_axes(0, 1),
                memory_key_padding_mask=pad,
                tgt_is_causal=True,
            )
        assert got.shape == (5, 3, 8)
        np.testing.assert_allclose(got.swap_axes(0, 1).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_embedding_padding_idx_starts_at_zero_and_gets_no_gradient():
    emb = nn.Embedding(5, 3, 1, key=nb.random.key(0))
    assert emb.padding_idx == 1 and np.all(emb.weight.numpy()[1] == 0)
    idx = nb.constant(np.array([1, 2, 1, 4]))
    g = nb.grad(lambda m: (m(idx) * 2.0).sum())(emb).weight.numpy()
    np.testing.assert_array_equal(g[1], 0.0)
    np.testing.assert_array_equal(g[2], 2.0)
    assert nn.Embedding(5, 3, -1).padding_idx == 4
    with pytest.raises(ValueError, match="padding_idx 5 is out of range"):
        nn.Embedding(5, 3, 5)


def test_embedding_index_out_of_range_names_the_layer_its_size_and_the_index():
    """Not the internal gather: the layer, its table size and the first bad index."""
    emb = nn.Embedding(5, 2)
    with pytest.raises(
        IndexError,
        match=r"Embedding\(5, 2\): index 7 is out of range for 5 rows \(indices of shape "
        r"\(2,\); valid indices are 0 to 4\)",
    ):
        emb(nb.constant([1, 7]))
    with pytest.raises(IndexError, match=r"Embedding\(5, 2\): index -1 is out of range"):
        emb(nb.constant([[0, -1]]))


def test_layer_sizes_must_be_positive_ints():
    for make, msg in [
        (lambda: nn.Linear(0, 3), "Linear: in_features must be a positive int, got 0"),
        (lambda: nn.Linear(2.5, 3), "Linear: in_features must be a positive int, got 2.5"),
        (lambda: nn.Conv2d(4, 6, 0), "Conv2d: kernel_size must be a positive int, got 0"),
        (lambda: nn.Conv2d(-4, 6, 3), "Conv2d: in_channels must be a positive int, got -4"),
        (lambda: nn.Embedding(-3, 4), "Embedding: num_embeddings must be a positive int"),
        (lambda: nb.random.split(nb.random.key(0), -1), "num must be a non-negative int"),
    ]:
        with pytest.raises(ValueError, match=msg):
            make()
