"""PyTorch's 1-D and 3-D pools, adaptive max pools, pixel shuffles, padding modules,
``InstanceNorm1d`` and the 3-D norms, unfold/fold, ``Conv3d``, channel dropouts and the
distance modules, channels last, against NumPy definitions (checked against PyTorch
itself when written)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import nabla as nb

nn, F = nb.nn, nb.nn.functional
RNG = np.random.default_rng(11)
X = RNG.standard_normal((2, 11, 3)).astype(np.float32)  # (N, L, C)
IM = RNG.standard_normal((2, 7, 9, 8)).astype(np.float32)  # (N, H, W, C)


def _pool1d(x, k, s, p, d, reduce, fill):
    padded = np.pad(x, ((0, 0), (p, p), (0, 0)), constant_values=fill)
    n = (padded.shape[1] - (k - 1) * d - 1) // s + 1
    taps = [padded[:, t * d : t * d + (n - 1) * s + 1 : s] for t in range(k)]
    return reduce(np.stack(taps), 0)


@pytest.mark.parametrize("k, s, p, d", [(3, 3, 0, 1), (3, 2, 1, 1), (2, 1, 1, 2), (4, 3, 2, 1)])
def test_max_and_avg_pool1d(k, s, p, d):
    want = _pool1d(X, k, s, p, d, np.max, -np.inf)
    np.testing.assert_array_equal(F.max_pool1d(X, k, s, p, d).numpy(), want)
    np.testing.assert_array_equal(nn.MaxPool1d(k, s, p, d)(X).numpy(), want)
    np.testing.assert_array_equal(F.max_pool1d(X[0], k, s, p, d).numpy(), want[0])  # unbatched
    if d == 1:
        want = _pool1d(X, k, s, p, 1, np.sum, 0.0) / k  # (padding counted, as PyTorch)
        np.testing.assert_allclose(nn.AvgPool1d(k, s, p)(X).numpy(), want, rtol=1e-6)
    with pytest.raises(ValueError, match="MaxPool1d: padding 3 is more than half"):
        nn.MaxPool1d(3, 1, 3)


def test_adaptive_pools_use_pytorch_s_bins():
    def bins(n, out):
        return [(i * n // out, -(-(i + 1) * n // out)) for i in range(out)]

    for out in (1, 4, 5, 11):
        mean = np.stack([X[:, a:b].mean(1) for a, b in bins(11, out)], 1)
        top = np.stack([X[:, a:b].max(1) for a, b in bins(11, out)], 1)
        np.testing.assert_allclose(F.adaptive_avg_pool1d(X, out).numpy(), mean, rtol=1e-6)
        np.testing.assert_array_equal(nn.AdaptiveMaxPool1d(out)(X).numpy(), top)
    for oh, ow in ((1, 1), (3, 4), (7, 9)):
        want = np.stack(
            [
                np.stack([IM[:, a:b, c:e].max((1, 2)) for c, e in bins(9, ow)], 1)
                for a, b in bins(7, oh)
            ],
            1,
        )
        np.testing.assert_array_equal(nn.AdaptiveMaxPool2d((oh, ow))(IM).numpy(), want)


def test_pixel_shuffle_follows_pytorch_s_channel_order():
    r = 2
    n, h, w, c = IM.shape
    want = np.empty((n, h * r, w * r, c // (r * r)), np.float32)
    for i in range(r):
        for j in range(r):
            want[:, i::r, j::r, :] = IM[..., i * r + j :: r * r]
    np.testing.assert_array_equal(nn.PixelShuffle(r)(IM).numpy(), want)
    np.testing.assert_array_equal(nn.PixelUnshuffle(r)(want).numpy(), IM)
    with pytest.raises(ValueError, match=r"pixel_shuffle: channels 8 .* divisible by .* 9"):
        F.pixel_shuffle(IM, 3)


def test_padding_modules_pad_the_spatial_dims_only():
    cases = [
        ("ZeroPad2d", ((1, 2, 0, 3),), "constant", {}),
        ("ConstantPad2d", (2, 3.5), "constant", {"constant_values": 3.5}),
        ("ReflectionPad2d", ((1, 2, 2, 1),), "reflect", {}),
        ("ReplicationPad2d", (2,), "edge", {}),
        ("CircularPad2d", ((1, 1, 2, 0),), "wrap", {}),
    ]
    for name, args, mode, kw in cases:
        pad = args[0]
        left, right, top, bottom = (pad,) * 4 if isinstance(pad, int) else pad
        want = np.pad(IM, ((0, 0), (top, bottom), (left, right), (0, 0)), mode, **kw)
        np.testing.assert_array_equal(getattr(nn, name)(*args)(IM).numpy(), want, err_msg=name)
    want = np.pad(X, ((0, 0), (3, 3), (0, 0)), "reflect")
    np.testing.assert_array_equal(nn.ReflectionPad1d(3)(X).numpy(), want)
    with pytest.raises(ValueError, match=r"ZeroPad2d: padding must be an int or 4 ints"):
        nn.ZeroPad2d((1, 2))


def test_instance_norm1d_and_the_distance_modules():
    m = nn.InstanceNorm1d(3, affine=True, track_running_stats=True)
    mean, var = X.mean(1, keepdims=True), X.var(1, keepdims=True)
    np.testing.assert_allclose(m(X).numpy(), (X - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    n = X.shape[1]  # running statistics: the batch's mean of the instances', unbiased
    want = 0.9 * 0 + 0.1 * X.mean(1).mean(0)
    np.testing.assert_allclose(m.running_mean.numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        m.running_var.numpy(), 0.9 + 0.1 * (var[:, 0] * n / (n - 1)).mean(0), rtol=1e-5
    )
    assert nn.InstanceNorm1d(3)(X[0]).shape == (11, 3)
    a, b = RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5))
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    np.testing.assert_allclose(nn.CosineSimilarity(1)(a, b).numpy(), cos, rtol=1e-6)
    dist = (np.abs(a - b + 1e-6) ** 3).sum(1, keepdims=True) ** (1 / 3)
    np.testing.assert_allclose(
        nn.PairwiseDistance(3.0, keepdim=True)(a, b).numpy(), dist, rtol=1e-6
    )


def test_jax_nn_s_remaining_functions():
    """``jax.nn``'s names that were missing, against their definitions."""
    x = np.linspace(-3, 3, 13)
    relu6 = np.clip(x + 3, 0, 6) / 6
    np.testing.assert_allclose(F.hard_sigmoid(x).numpy(), relu6)
    np.testing.assert_allclose(F.hard_swish(x).numpy(), x * relu6)
    np.testing.assert_allclose(F.squareplus(x).numpy(), (x + np.sqrt(x * x + 4)) / 2)
    sp = np.where(x <= -1, 0, np.where(x >= 1, x, (x + 1) ** 2 / 4))
    np.testing.assert_allclose(F.sparse_plus(x).numpy(), sp)
    np.testing.assert_allclose(F.sparse_sigmoid(x).numpy(), np.clip((x + 1) / 2, 0, 1))
    xp = np.array([1e-8, 1e-3, 0.5, 0.7, 3.0, 30.0])
    want = np.where(xp < np.log(2), np.log(-np.expm1(-xp)), np.log1p(-np.exp(-xp)))
    np.testing.assert_allclose(F.log1mexp(xp).numpy(), want, rtol=1e-12)
    y, m = RNG.standard_normal((3, 5)), RNG.random((3, 5)) > 0.3
    m[:, 0] = True
    want = np.log(np.sum(np.exp(y), 1, where=m) / m.sum(1))
    np.testing.assert_allclose(F.logmeanexp(y, axis=1, where=m).numpy(), want, rtol=1e-12)
    want = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(F.standardize(y).numpy(), want, rtol=1e-6)
    got = F.one_hot(np.array([0, 2, 1]), 3, dtype=nb.float32, axis=0).numpy()
    np.testing.assert_array_equal(got, np.eye(3)[[0, 2, 1]].T)


def test_dot_product_attention_grouped_masked_and_causal():
    q = RNG.standard_normal((2, 5, 4, 8))
    k, v = RNG.standard_normal((2, 6, 2, 8)), RNG.standard_normal((2, 6, 2, 8))
    bias = RNG.standard_normal((2, 4, 5, 6))
    mask = RNG.random((2, 1, 5, 6)) > 0.2
    mask[..., 0] = True
    kk, vv = np.repeat(k, 2, axis=2), np.repeat(v, 2, axis=2)  # (each key head serves two)
    logits = np.einsum("btnh,bsnh->bnts", q, kk) * 0.3 + bias
    logits = np.where(mask, logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    want = np.einsum("bnts,bsnh->btnh", w / w.sum(-1, keepdims=True), vv)
    got = F.dot_product_attention(q, k, v, bias, mask, scale=0.3).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    k2, v2 = RNG.standard_normal((2, 5, 4, 8)), RNG.standard_normal((2, 5, 4, 8))
    causal = F.dot_product_attention(q, k2, v2, is_causal=True).numpy()
    # the first query sees the first key only
    np.testing.assert_allclose(causal[:, 0], v2[:, 0], rtol=1e-6)
    with pytest.raises(ValueError, match="4 query heads are not a multiple of 3 key heads"):
        F.dot_product_attention(q, k[:, :, :1].repeat(3, 2), v[:, :, :1].repeat(3, 2))


def test_jax_s_initializers_scale_by_the_fans():
    init, key = nn.initializers, nb.random.key(0)
    assert nb.nn.functional.initializers is init
    cases = [
        (init.glorot_uniform(), (300, 200), 2 / 500),
        (init.glorot_normal(), (300, 200), 2 / 500),
        (init.lecun_normal(), (400, 100), 1 / 400),
        (init.he_uniform(), (3, 3, 64, 32), 2 / (9 * 64)),
        (init.he_normal(), (3, 3, 64, 32), 2 / (9 * 64)),
        (init.variance_scaling(1.0, "fan_out", "normal", 0, 1, 2), (30, 40, 5), 1 / 40),
    ]
    for make, shape, var in cases:
        w = make(key, shape).numpy()
        assert w.shape == shape and abs(w.var() / var - 1) < 0.05, (shape, w.var(), var)
    w = init.glorot_uniform()(key, (300, 200)).numpy()
    assert np.abs(w).max() <= np.sqrt(6 / 500)
    q = init.orthogonal(2.0)(key, (6, 4)).numpy()
    np.testing.assert_allclose(q.T @ q, 4 * np.eye(4), atol=1e-5)
    assert init.zeros(key, (2,)).tolist() == [0.0, 0.0]
    assert init.constant(3.0)(key, (2,), nb.int32).tolist() == [3, 3]
    with pytest.raises(ValueError, match="mode must be fan_in, fan_out or fan_avg"):
        init.variance_scaling(1.0, "fan", "normal")
    # delta_orthogonal: an orthogonal (in, out) map at the kernel's centre tap, zeros elsewhere
    delta: init.Initializer = init.delta_orthogonal(2.0)
    for shape in ((3, 4, 5), (3, 3, 4, 5), (4, 4, 2, 4, 5)):
        w = delta(key, shape).numpy()
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        np.testing.assert_allclose(w[centre] @ w[centre].T, 4 * np.eye(4), atol=1e-5)
        assert np.abs(w).sum() == pytest.approx(np.abs(w[centre]).sum())
    with pytest.raises(ValueError, match=r"in \(5\) must not exceed out \(4\)"):
        delta(key, (3, 3, 5, 4))


def _np_conv_transpose1d(x, w, b, s, p, op, g, d):
    """The transposed convolution by its definition: each input element spreads its
    filter over the output, ``out[i s + j d - p] += x[i] w[j]``."""
    n, length, c = x.shape
    og = w.shape[1]
    k = w.shape[2]
    out_len = (length - 1) * s - 2 * p + d * (k - 1) + op + 1
    out = np.zeros((n, out_len + 2 * p + k * d + s, og * g))
    cg = c // g
    for i in range(length):
        for j in range(k):
            pos = i * s + j * d
            for grp in range(g):
                xs = x[:, i, grp * cg : (grp + 1) * cg]
                out[:, pos, grp * og : (grp + 1) * og] += xs @ w[grp * cg : (grp + 1) * cg, :, j]
    return out[:, p : p + out_len] + b


@pytest.mark.parametrize(
    "cfg", [(4, 6, 3, 1, 0, 0, 1, 1), (4, 6, 3, 2, 1, 1, 2, 1), (4, 2, 2, 3, 0, 2, 1, 2)]
)
def test_conv_transpose1d_is_the_definition(cfg):
    cin, cout, k, s, p, op, g, d = cfg
    m = nn.ConvTranspose1d(cin, cout, k, s, p, op, g, True, d, key=nb.random.key(1))
    assert m.weight.shape == (cin, cout // g, k)  # (PyTorch's layout)
    x = RNG.standard_normal((2, 7, cin))
    want = _np_conv_transpose1d(x, m.weight.numpy(), m.bias.numpy(), s, p, op, g, d)
    np.testing.assert_allclose(m(x.astype(np.float32)).numpy(), want, rtol=1e-4, atol=1e-5)
    assert m(x[0].astype(np.float32)).shape == want.shape[1:]  # one unbatched sequence


def test_embedding_bag_sums_means_and_maxima_of_bags():
    """PyTorch's ``EmbeddingBag``: 1-D input split at offsets (an empty bag gives zeros),
    a 2-D input's rows as bags, the padding row left out of counts, per-sample weights;
    checked against the bags' plain NumPy reductions."""
    w = RNG.standard_normal((10, 4))
    inp = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
    offsets = np.array([0, 3, 3, 8])
    bags = [inp[0:3], inp[3:3], inp[3:8], inp[8:10]]
    for mode, reduce in (("sum", np.sum), ("mean", np.mean), ("max", np.max)):
        for pad in (None, 4):
            want = np.stack([
                reduce(w[b[b != pad]], 0) if len(b[b != pad]) else np.zeros(4) for b in bags
            ])  # fmt: skip
            got = F.embedding_bag(inp, w, offsets, mode=mode, padding_idx=pad).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=f"{mode} {pad}")
    psw = RNG.random(10)
    want = np.stack(
        [(w[inp[a:b]] * psw[a:b, None]).sum(0) for a, b in ((0, 3), (3, 3), (3, 8), (8, 10))]
    )
    got = F.embedding_bag(inp, w, offsets, mode="sum", per_sample_weights=psw).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    got = F.embedding_bag(inp, w, np.array([0, 3, 3, 8, 10]), include_last_offset=True)
    assert got.shape == (4, 4)
    i2 = RNG.integers(0, 10, (3, 5))
    np.testing.assert_allclose(F.embedding_bag(i2, w, mode="max").numpy(), w[i2].max(1))
    bag = nn.EmbeddingBag(10, 4, mode="sum", key=nb.random.key(0))
    assert bag(inp, offsets).shape == (4, 4) and bag.weight.shape == (10, 4)
    with pytest.raises(ValueError, match="per_sample_weights are taken with mode='sum'"):
        F.embedding_bag(inp, w, offsets, per_sample_weights=psw)


def _np_bilinear(x, grid, align_corners):
    """Bilinear sampling with zeros outside, by its definition (NHWC)."""
    n, h, w, c = x.shape
    out = np.zeros(grid.shape[:3] + (c,))
    for b, i, j in np.ndindex(*grid.shape[:3]):
        gx, gy = grid[b, i, j]
        if align_corners:
            px, py = (gx + 1) / 2 * (w - 1), (gy + 1) / 2 * (h - 1)
        else:
            px, py = ((gx + 1) * w - 1) / 2, ((gy + 1) * h - 1) / 2
        x0, y0 = int(np.floor(px)), int(np.floor(py))
        for yy, wy in ((y0, 1 - (py - y0)), (y0 + 1, py - y0)):
            for xx, wx in ((x0, 1 - (px - x0)), (x0 + 1, px - x0)):
                if 0 <= yy < h and 0 <= xx < w:
                    out[b, i, j] += wy * wx * x[b, yy, xx]
    return out


def test_affine_grid_and_grid_sample():
    x = RNG.standard_normal((2, 5, 7, 3))
    identity = np.tile(np.eye(2, 3), (2, 1, 1))
    for ac in (False, True):  # the identity map samples every pixel at its center
        grid = F.affine_grid(identity, (2, 3, 5, 7), align_corners=ac)
        assert grid.shape == (2, 5, 7, 2)
        np.testing.assert_allclose(F.grid_sample(x, grid, align_corners=ac).numpy(), x, atol=1e-12)
    grid = 1.3 * RNG.uniform(-1, 1, (2, 4, 6, 2))
    for ac in (False, True):
        got = F.grid_sample(x, grid, "bilinear", "zeros", ac).numpy()
        np.testing.assert_allclose(got, _np_bilinear(x, grid, ac), atol=1e-12)
    border = F.grid_sample(x, np.full((2, 1, 1, 2), 5.0), padding_mode="border").numpy()
    np.testing.assert_allclose(border[:, 0, 0], x[:, -1, -1])  # (clamped to the corner)
    with pytest.raises(ValueError, match="grid_sample: mode must be 'bilinear' or 'nearest'"):
        F.grid_sample(x, grid, "bicubic")


def _unfold_reference(x, k, d, p, s):
    """PyTorch's unfold by its definition, channels last: block (oh, ow) holds, at
    ``c * KH * KW + i * KW + j``, the padded image's ``[oh*s + i*d, ow*s + j*d, c]``."""
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (p[0], p[0]), (p[1], p[1]), (0, 0)))
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.zeros((n, oh * ow, c * k[0] * k[1]), x.dtype)
    for a in range(oh):
        for b in range(ow):
            for i in range(k[0]):
                for j in range(k[1]):
                    tap = xp[:, a * s[0] + i * d[0], b * s[1] + j * d[1], :]  # (n, c)
                    out[:, a * ow + b, i * k[1] + j :: k[0] * k[1]] = tap
    return out


@pytest.mark.parametrize(
    "k, d, p, s",
    [(3, 1, 0, 1), ((3, 2), (2, 1), (1, 2), (2, 1)), (2, 1, 1, 2), ((1, 3), 1, (0, 1), (1, 3))],
)
def test_unfold_and_fold_follow_pytorch_channels_last(k, d, p, s):
    pair = [v if isinstance(v, tuple) else (v, v) for v in (k, d, p, s)]
    want = _unfold_reference(IM, *pair)
    np.testing.assert_array_equal(F.unfold(IM, k, d, p, s).numpy(), want)
    np.testing.assert_array_equal(nn.Unfold(k, d, p, s)(IM[0]).numpy(), want[0])  # unbatched
    # fold is unfold's adjoint: <unfold(x), y> == <x, fold(y)>, padding cut off included
    y = RNG.standard_normal(want.shape).astype(np.float32)
    folded = nn.Fold(IM.shape[1:3], k, d, p, s)(y).numpy()
    assert folded.shape == IM.shape
    np.testing.assert_allclose(np.sum(want * y), np.sum(IM * folded), rtol=1e-5)
    np.testing.assert_allclose(F.fold(y[1], IM.shape[1:3], k, d, p, s).numpy(), folded[1])
    # and differentiable: the gradient of <unfold(x), y> is fold(y)
    g = nb.grad(lambda x: nb.sum(F.unfold(x, k, d, p, s) * y))(nb.constant(IM))
    np.testing.assert_allclose(g.numpy(), folded, rtol=1e-5, atol=1e-6)


def test_unfold_and_fold_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"unfold: expects an image .* got shape \(7, 9\)"):
        F.unfold(IM[0, :, :, 0], 2)
    with pytest.raises(ValueError, match=r"unfold: spatial size \(7, 9\) .* too small"):
        F.unfold(IM, 8)
    with pytest.raises(ValueError, match=r"fold: .* make 6 x 8 = 48 blocks, but input of shape"):
        F.fold(np.ones((2, 47, 32), np.float32), (7, 9), 2)
    with pytest.raises(ValueError, match=r"divisible by the product of kernel_size \(2, 2\)"):
        F.fold(np.ones((2, 48, 30), np.float32), (7, 9), 2)


def _conv3d_reference(x, w, b, s, p, d, g):
    """A 3-D cross-correlation by its definition: channels-last ``x``, PyTorch's
    ``(O, C/g, KD, KH, KW)`` filter, per output position the sum over taps and group
    channels."""
    xp = np.pad(x.astype(np.float64), ((0, 0), *((q, q) for q in p), (0, 0)))
    k = w.shape[2:]
    out_sp = [(xp.shape[1 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(3)]
    o, cg = w.shape[0], w.shape[1]
    og = o // g
    out = np.zeros((x.shape[0], *out_sp, o))
    for tap in np.ndindex(*k):
        idx = tuple(
            slice(tap[i] * d[i], tap[i] * d[i] + s[i] * (out_sp[i] - 1) + 1, s[i]) for i in range(3)
        )
        piece = xp[(slice(None), *idx)]  # (N, OD, OH, OW, C)
        for gi in range(g):
            wg = w[gi * og : (gi + 1) * og, :, tap[0], tap[1], tap[2]]  # (og, cg)
            part = piece[..., gi * cg : (gi + 1) * cg] @ wg.T.astype(np.float64)
            out[..., gi * og : (gi + 1) * og] += part
    return out + b


@pytest.mark.parametrize(
    "k, s, p, d, g",
    [(3, (1, 1, 1), (1, 1, 1), (1, 1, 1), 1), ((2, 3, 2), (2, 1, 2), (1, 0, 2), (1, 2, 1), 2)],
)
def test_conv3d_against_the_definition(k, s, p, d, g):
    x = RNG.standard_normal((2, 5, 6, 5, 4)).astype(np.float32)
    kk = (k,) * 3 if isinstance(k, int) else k
    w = RNG.standard_normal((6, 4 // g, *kk)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    want = _conv3d_reference(x, w, b, s, p, d, g)
    got = F.conv3d(x, w, b, s, p, d, g)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    # the input gradient of <conv3d(x), y> is the adjoint: checked by a directional derivative
    y = RNG.standard_normal(want.shape).astype(np.float32)
    v = RNG.standard_normal(x.shape)
    gx = nb.grad(lambda x: nb.sum(F.conv3d(x, w, b, s, p, d, g) * y))(nb.constant(x)).numpy()
    eps = 1e-3
    plus = np.sum(_conv3d_reference(x + eps * v, w, b, s, p, d, g) * y)
    minus = np.sum(_conv3d_reference(x - eps * v, w, b, s, p, d, g) * y)
    np.testing.assert_allclose(np.sum(gx * v), (plus - minus) / (2 * eps), rtol=1e-3)


def test_conv3d_layer_takes_pytorch_s_layout_and_checks_its_input():
    layer = nn.Conv3d(4, 6, (3, 2, 3), padding="same", key=nb.random.key(0))
    assert layer.weight.shape == (6, 4, 3, 2, 3) and layer.bias.shape == (6,)
    x = RNG.standard_normal((2, 5, 6, 5, 4)).astype(np.float32)
    out = layer(x)
    assert out.shape == (2, 5, 6, 5, 6)
    np.testing.assert_allclose(layer(x[1]).numpy(), out.numpy()[1], rtol=1e-5, atol=1e-6)
    bound = 1 / np.sqrt(4 * 3 * 2 * 3)  # PyTorch's fan-in for this layout
    assert np.abs(layer.weight.numpy()).max() <= bound
    with pytest.raises(ValueError, match=r"Conv3d\(4, 6.*\): input of shape \(2, 5, 6, 5, 3\)"):
        layer(x[..., :3])
    with pytest.raises(ValueError, match="conv3d: padding='same' needs stride 1"):
        F.conv3d(x, layer.weight, None, 2, "same")


def _pool3d_reference(x, k, s, p, reduce, fill):
    """A 3-D pool by its definition (no ceil mode, dilation 1)."""
    xp = np.pad(x, ((0, 0), *((q, q) for q in p), (0, 0)), constant_values=fill)
    out = [(xp.shape[1 + i] - k[i]) // s[i] + 1 for i in range(3)]
    y = np.empty((x.shape[0], *out, x.shape[-1]), x.dtype)
    for a, b, c in np.ndindex(*out):
        win = xp[
            :, a * s[0] : a * s[0] + k[0], b * s[1] : b * s[1] + k[1], c * s[2] : c * s[2] + k[2]
        ]
        y[:, a, b, c] = reduce(win.reshape(x.shape[0], -1, x.shape[-1]), 1)
    return y


def test_max_and_avg_pool3d_by_their_definition():
    x = RNG.standard_normal((2, 7, 6, 9, 3)).astype(np.float32)
    k, s, p = (3, 2, 3), (2, 1, 2), (1, 1, 0)
    want = _pool3d_reference(x, k, s, p, np.max, -np.inf)
    np.testing.assert_array_equal(nn.MaxPool3d(k, s, p)(x).numpy(), want)
    np.testing.assert_array_equal(F.max_pool3d(x[0], k, s, p).numpy(), want[0])  # unbatched
    want = _pool3d_reference(x, k, s, p, np.mean, 0.0)  # padding counted, as PyTorch's
    np.testing.assert_allclose(nn.AvgPool3d(k, s, p)(x).numpy(), want, rtol=1e-5, atol=1e-6)
    sums = _pool3d_reference(x, k, s, p, np.sum, 0.0)
    got = F.avg_pool3d(x, k, s, p, divisor_override=5).numpy()
    np.testing.assert_allclose(got, sums / 5, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"MaxPool3d: padding 2 is more than half"):
        nn.MaxPool3d(3, 1, 2)
    with pytest.raises(ValueError, match=r"avg_pool3d: expected \(N, D, H, W, C\)"):
        F.avg_pool3d(x[0, 0, 0], 2)


VOL = RNG.standard_normal((2, 5, 6, 7, 3)).astype(np.float32)  # (N, D, H, W, C)


def _adaptive_reference(x, out, reduce):
    def bins(n, k):
        return [(i * n // k, -(-(i + 1) * n // k)) for i in range(k)]

    y = np.empty((x.shape[0], *out, x.shape[-1]), x.dtype)
    for (i, (a, b)), (j, (c, d)), (k, (e, f)) in itertools.product(
        *(enumerate(bins(n, o)) for n, o in zip(x.shape[1:4], out))
    ):
        y[:, i, j, k] = reduce(x[:, a:b, c:d, e:f].reshape(x.shape[0], -1, x.shape[-1]), 1)
    return y


@pytest.mark.parametrize("out", [1, (2, 3, 4), (5, 6, 7), (3, 4, 3)])
def test_adaptive_pools3d_use_pytorch_s_bins(out):
    size = (out,) * 3 if isinstance(out, int) else out
    want = _adaptive_reference(VOL, size, np.mean)
    np.testing.assert_allclose(nn.AdaptiveAvgPool3d(out)(VOL).numpy(), want, rtol=1e-5, atol=1e-6)
    want = _adaptive_reference(VOL, size, np.max)
    np.testing.assert_array_equal(F.adaptive_max_pool3d(VOL, out).numpy(), want)
    np.testing.assert_array_equal(F.adaptive_max_pool3d(VOL[1], out).numpy(), want[1])


def test_padding_modules_3d_and_batch_and_instance_norm_3d():
    pads = (1, 2, 0, 1, 2, 1)  # PyTorch's order: W, then H, then D
    widths = ((0, 0), (2, 1), (0, 1), (1, 2), (0, 0))
    for name, mode in [
        ("ZeroPad3d", "constant"),
        ("ReflectionPad3d", "reflect"),
        ("ReplicationPad3d", "edge"),
        ("CircularPad3d", "wrap"),
    ]:
        np.testing.assert_array_equal(
            getattr(nn, name)(pads)(VOL).numpy(), np.pad(VOL, widths, mode)
        )
    filled = np.pad(VOL, widths, constant_values=1.5)
    np.testing.assert_array_equal(nn.ConstantPad3d(pads, 1.5)(VOL).numpy(), filled)
    bn = nn.BatchNorm3d(3, momentum=0.2)
    y = bn(VOL).numpy()
    mean, var = VOL.mean((0, 1, 2, 3)), VOL.var((0, 1, 2, 3))
    np.testing.assert_allclose(y, (VOL - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    n = VOL.size // 3
    np.testing.assert_allclose(bn.running_var.numpy(), 0.8 + 0.2 * var * n / (n - 1), rtol=1e-5)
    inorm = nn.InstanceNorm3d(3)
    m, v = VOL.mean((1, 2, 3), keepdims=True), VOL.var((1, 2, 3), keepdims=True)
    want = (VOL - m) / np.sqrt(v + 1e-5)
    np.testing.assert_allclose(inorm(VOL).numpy(), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(inorm(VOL[0]).numpy(), want[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"BatchNorm3d\(3.*expected input \(N, D, H, W, C\)"):
        bn(VOL[0])


def test_channel_dropouts_drop_whole_channels():
    y = nn.Dropout3d(0.5)(VOL).numpy()
    per_channel = y.reshape(2, -1, 3)
    assert ((per_channel == 0).all(1) | (per_channel != 0).all(1)).all()
    np.testing.assert_allclose(y[y != 0], 2 * VOL[y != 0], rtol=1e-6)
    seq = VOL[0, 0]  # (6, 7, 3): 6 sequences of length 7
    y = F.dropout1d(seq, 0.5).numpy()
    assert ((y == 0).all(1) | (y != 0).all(1)).all()
    y = nn.Dropout2d(0.5)(VOL[0]).numpy()  # 5 images
    assert ((y == 0).reshape(5, -1, 3).all(1) | (y != 0).reshape(5, -1, 3).all(1)).all()
    layer = nn.Dropout3d(0.5)
    layer.eval()
    np.testing.assert_array_equal(layer(VOL).numpy(), VOL)
    with pytest.raises(ValueError, match=r"Dropout1d: expected \(N, L, C\) or \(L, C\)"):
        nn.Dropout1d()(VOL)


def test_channel_shuffle_local_response_norm_and_softmax2d_by_definition():
    x = IM  # (2, 7, 9, 8)
    want = x.reshape(2, 7, 9, 4, 2).swapaxes(-1, -2).reshape(x.shape)
    np.testing.assert_array_equal(nn.ChannelShuffle(4)(x).numpy(), want)
    size, alpha, beta, k = 3, 1e-2, 0.75, 2.0
    sq = np.pad(x.astype(np.float64) ** 2, ((0, 0), (0, 0), (0, 0), (size // 2, (size - 1) // 2)))
    window = np.stack([sq[..., c : c + size].sum(-1) for c in range(8)], -1)
    want = x / (k + alpha * window / size) ** beta
    got = nn.LocalResponseNorm(size, alpha, beta, k)(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(nn.Softmax2d()(x).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)
    with pytest.raises(ValueError, match=r"channel_shuffle: channels 8 .* divisible by groups 3"):
        F.channel_shuffle(x, 3)


def test_bilinear_pdist_and_multi_margin_loss_by_definition():
    layer = nn.Bilinear(3, 5, 2, key=nb.random.key(0))
    assert layer.weight.shape == (2, 3, 5) and np.abs(layer.weight.numpy()).max() <= 1 / np.sqrt(3)
    a, b = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 5))
    w, bias = layer.weight.numpy(), layer.bias.numpy()
    want = np.einsum("ni,oij,nj->no", a, w, b) + bias
    np.testing.assert_allclose(
        layer(a.astype(np.float32), b.astype(np.float32)).numpy(), want, rtol=1e-5, atol=1e-5
    )
    m = RNG.standard_normal((5, 3)).astype(np.float32)
    m[3] = m[1]  # a zero distance: value 0, gradient 0 (as PyTorch's)
    pairs = [(i, j) for i in range(5) for j in range(i + 1, 5)]
    for p in (2.0, 1.0, np.inf):
        want = [np.linalg.norm(m[i] - m[j], p) for i, j in pairs]
        np.testing.assert_allclose(F.pdist(m, p).numpy(), want, rtol=1e-5, atol=1e-6)
    g = nb.grad(lambda v: nb.sum(F.pdist(v)))(nb.constant(m)).numpy()
    assert np.isfinite(g).all()
    x = RNG.standard_normal((6, 4)).astype(np.float32)
    t = np.array([0, 3, 1, 1, 2, 3])
    weight = np.array([0.5, 1.0, 2.0, 1.5], np.float32)
    for p in (1, 2):
        terms = np.maximum(0.7 - x[np.arange(6), t][:, None] + x, 0) ** p
        terms[np.arange(6), t] = 0
        want = (terms * weight[t][:, None]).sum(1) / 4
        got = nn.MultiMarginLoss(p, 0.7, weight, "none")(x, t).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_gumbel_softmax_samples_the_categorical():
    logits = np.log(np.array([0.2, 0.3, 0.5], np.float32))
    soft = F.gumbel_softmax(np.tile(logits, (4, 1)), tau=0.5, key=nb.random.key(1)).numpy()
    np.testing.assert_allclose(soft.sum(-1), 1.0, rtol=1e-5)
    hard = F.gumbel_softmax(np.tile(logits, (20000, 1)), hard=True, key=nb.random.key(2)).numpy()
    assert set(np.unique(hard)) == {0.0, 1.0} and (hard.sum(-1) == 1).all()
    np.testing.assert_allclose(hard.mean(0), [0.2, 0.3, 0.5], atol=0.015)
    # straight through: the hard sample's gradient is the soft sample's
    x = nb.constant(np.tile(logits, (3, 1)))
    gh = nb.grad(lambda v: nb.sum(F.gumbel_softmax(v, hard=True, key=nb.random.key(3)) * 2.0))(x)
    gs = nb.grad(lambda v: nb.sum(F.gumbel_softmax(v, key=nb.random.key(3)) * 2.0))(x)
    np.testing.assert_allclose(gh.numpy(), gs.numpy(), atol=1e-6)


def test_lp_pools_rrelu_alpha_dropout_and_multilabel_margin_by_definition():
    x = np.abs(IM)
    want = np.sqrt((x**2).reshape(2, 7, 9, 8)[:, :6, :8].reshape(2, 3, 2, 4, 2, 8).sum((2, 4)))
    np.testing.assert_allclose(nn.LPPool2d(2, 2)(x).numpy(), want, rtol=1e-5)
    seq = x[:, 0]  # (2, 9, 8)
    want = (seq[:, :9] ** 3).reshape(2, 3, 3, 8).sum(2) ** (1 / 3)
    np.testing.assert_allclose(F.lp_pool1d(seq, 3, 3).numpy(), want, rtol=1e-5)
    v = RNG.standard_normal((50, 40)).astype(np.float32)
    np.testing.assert_allclose(
        F.rrelu(v).numpy(), np.where(v >= 0, v, v * (1 / 8 + 1 / 3) / 2), rtol=1e-6
    )
    r = nn.RReLU(0.1, 0.3)(v).numpy()
    slopes = r[v < 0] / v[v < 0]
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3 and slopes.std() > 0.04
    # alpha dropout keeps SELU's standardized activations at mean 0 and variance 1
    s = F.selu(RNG.standard_normal(200000).astype(np.float32)).numpy()
    y = nn.AlphaDropout(0.2)(s).numpy()
    assert abs(y.mean()) < 0.01 and abs(y.std() - 1.0) < 0.01
    assert np.isclose(y.min(), -1.2362, atol=1e-4)  # a dropped value: a alpha' + b
    feat = nn.FeatureAlphaDropout(0.5)(VOL, key=nb.random.key(4)).numpy().reshape(2, -1, 3)
    alpha = -1.7580993408473766
    a = (0.5 * (1 + 0.5 * alpha**2)) ** -0.5
    b = -a * alpha * 0.5
    dropped = np.isclose(feat, a * alpha + b).all(1)  # whole channels at one value
    kept = np.isclose(feat, a * VOL.reshape(2, -1, 3) + b, atol=1e-5).all(1)
    assert (dropped ^ kept).all() and dropped.any() and kept.any()
    scores = RNG.standard_normal((3, 4)).astype(np.float32)
    target = np.array([[3, 0, -1, 1], [0, 1, 2, 3], [-1, 1, 2, 0]])
    want = []
    for sc, t in zip(scores, target):
        labels = list(t[: list(t).index(-1)] if -1 in t else t)
        others = [i for i in range(4) if i not in labels]
        want.append(sum(max(0, 1 - (sc[j] - sc[i])) for j in labels for i in others) / 4)
    got = nn.MultiLabelMarginLoss("none")(scores, target).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_max_pool_indices_and_unpool_by_definition():
    x = IM.copy()  # (2, 7, 9, 8)
    x[0, 0, 0, 0] = x[0, 0, 1, 0] = 10.0  # a tie for the first window's max: the first wins
    values, idx = nn.MaxPool2d(3, 2, 1, 1, True, True)(x)
    v, i = values.numpy(), idx.numpy()
    assert idx.dtype == nb.int64 and i.shape == v.shape
    flat = x.reshape(2, 63, 8)
    np.testing.assert_array_equal(
        np.take_along_axis(flat, i.reshape(2, -1, 8), 1), v.reshape(2, -1, 8)
    )
    plain = nn.MaxPool2d(2, return_indices=True)
    v2, i2 = plain(x)
    assert i2.numpy()[0, 0, 0, 0] == 0  # (0, 0) and (0, 1) tie: the first
    out = nn.MaxUnpool2d(2)(v2, i2, output_size=x.shape[1:3]).numpy()
    # the whole channels-last shape gives the same size (its last two entries were read)
    np.testing.assert_array_equal(nn.MaxUnpool2d(2)(v2, i2, output_size=x.shape).numpy(), out)
    want = np.zeros_like(flat)
    np.put_along_axis(want, i2.numpy().reshape(2, -1, 8), v2.numpy().reshape(2, -1, 8), 1)
    np.testing.assert_array_equal(out, want.reshape(x.shape))
    # unpooling is differentiable in the values (each gradient read back at its index)
    g = nb.grad(lambda z: nb.sum(F.max_unpool2d(z, i2, 2, output_size=(7, 9)) ** 2))(v2)
    np.testing.assert_allclose(g.numpy(), 2 * v2.numpy(), rtol=1e-6)
    seq = x[:, 0]  # (2, 9, 8)
    v1, i1 = F.max_pool1d(seq, 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(np.take_along_axis(seq, i1.numpy(), 1), v1.numpy())
    back = nn.MaxUnpool1d(3, 2, 1)(v1, i1, output_size=9).numpy()
    assert back.shape == seq.shape and np.isin(back[back != 0], seq).all()
    with pytest.raises(ValueError, match=r"max_unpool2d: indices must be in \[0, 48\)"):
        F.max_unpool2d(v2, i2, 2)  # the default size, 6 x 8, is smaller than the input was


def test_triplet_margin_with_distance_loss_by_definition():
    a, p, n = (RNG.standard_normal((5, 4)).astype(np.float32) for _ in range(3))

    def dist(x, y):
        return np.linalg.norm(x - y + 1e-6, axis=-1)

    want = np.maximum(dist(a, p) - np.minimum(dist(a, n), dist(p, n)) + 0.5, 0)
    got = nn.TripletMarginWithDistanceLoss(margin=0.5, swap=True, reduction="none")(a, p, n)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)

    def l1(x, y):
        return nb.sum(nb.abs(x - y), axis=-1)

    want = np.maximum(np.abs(a - p).sum(-1) - np.abs(a - n).sum(-1) + 1.0, 0).mean()
    got = F.triplet_margin_with_distance_loss(a, p, n, distance_function=l1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)


def test_embedding_max_norm_and_scale_grad_by_freq_by_definition():
    w0 = (RNG.standard_normal((6, 3)) * 2).astype(np.float32)
    idx = np.array([[0, 2, 2], [5, 0, 2]])
    emb = nn.Embedding(6, 3, max_norm=1.5, _weight=w0)
    out = emb(idx).numpy()
    want = w0.copy()
    for r in (0, 2, 5):  # the rows looked up, rescaled in the table itself (PyTorch's)
        norm = np.linalg.norm(want[r])
        if norm > 1.5:
            want[r] *= 1.5 / (norm + 1e-7)
    np.testing.assert_allclose(emb.weight.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(out, want[idx], rtol=1e-6)
    np.testing.assert_array_equal(emb.weight.numpy()[[1, 3, 4]], w0[[1, 3, 4]])
    with pytest.raises(ValueError, match="max_norm rewrites the table in place"):
        nb.compile(lambda m, i: m(i))(nn.Embedding(6, 3, max_norm=1.0), idx)
    # each row's gradient divided by its count among the indices; the value unchanged
    freq = nn.Embedding(6, 3, scale_grad_by_freq=True, _weight=w0)
    np.testing.assert_array_equal(freq(idx).numpy(), w0[idx])
    g = nb.grad(lambda m: nb.sum(m(idx)))(freq).weight.numpy()
    counts = np.bincount(idx.reshape(-1), minlength=6)
    np.testing.assert_allclose(g[:, 0], np.where(counts > 0, 1.0, 0.0), rtol=1e-6)


def _conv_transpose3d_reference(x, w, b, s, p, op, d):
    """By its definition: each input position spreads ``x * w`` over the taps it reaches,
    in the full output, then the padding cut off (PyTorch's ``(C, O, KD, KH, KW)``)."""
    n, dd, hh, ww, c = x.shape
    o, k = w.shape[1], w.shape[2:]
    full = [
        (size - 1) * s[i] + d[i] * (k[i] - 1) + 1 + op[i] for i, size in enumerate((dd, hh, ww))
    ]
    out = np.zeros((n, *full, o))
    for a, bb, cc in np.ndindex(dd, hh, ww):
        for t in np.ndindex(*k):
            pos = [(a, bb, cc)[i] * s[i] + t[i] * d[i] for i in range(3)]
            out[:, pos[0], pos[1], pos[2]] += x[:, a, bb, cc] @ w[:, :, t[0], t[1], t[2]]
    out = out[:, p[0] : full[0] - p[0], p[1] : full[1] - p[1], p[2] : full[2] - p[2]]
    return out + b


def test_conv_transpose3d_by_definition():
    x = RNG.standard_normal((2, 3, 4, 3, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 5, 3, 2, 3)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    s, p, op, d = (2, 1, 2), (1, 0, 1), (1, 0, 0), (1, 1, 2)
    want = _conv_transpose3d_reference(x, w, b, s, p, op, d)
    got = F.conv_transpose3d(x, w, b, s, p, op, 1, d)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    layer = nn.ConvTranspose3d(4, 5, (3, 2, 3), s, p, op, dilation=d, key=nb.random.key(5))
    assert layer.weight.shape == (4, 5, 3, 2, 3)
    size = tuple(want.shape[1:4])
    assert layer(x, output_size=size).shape == (2, *size, 5)
    with pytest.raises(
        ValueError, match=r"ConvTranspose3d\(4, 5.*output_size .* cannot be reached"
    ):
        layer(x, output_size=(1, 1, 1))


def test_adaptive_max_pools_return_pytorch_s_indices():
    x = np.random.default_rng(11).integers(0, 4, (2, 7, 9, 3)).astype(np.float32)  # (ties)
    for size in ((3, 4), (5, 3), (7, 9)):
        values, index = nb.nn.functional.adaptive_max_pool2d(x, size, return_indices=True)
        assert index.dtype == nb.int64
        np.testing.assert_array_equal(
            values.numpy(), nb.nn.functional.adaptive_max_pool2d(x, size).numpy()
        )
        # each index points at its window's first maximum (row-major), in the H x W plane
        h, w = x.shape[1:3]
        for i in range(size[0]):
            a, b = i * h // size[0], -(-(i + 1) * h // size[0])
            for j in range(size[1]):
                c, d = j * w // size[1], -(-(j + 1) * w // size[1])
                window = x[:, a:b, c:d, :].reshape(2, -1, 3)
                first = window.argmax(1)  # (NumPy's first maximum)
                want = (a + first // (d - c)) * w + c + first % (d - c)
                np.testing.assert_array_equal(index.numpy()[:, i, j, :], want)
    seq = np.random.default_rng(12).standard_normal((2, 10, 3)).astype(np.float32)
    values, index = nb.nn.AdaptiveMaxPool1d(4, return_indices=True)(seq)
    np.testing.assert_array_equal(np.take_along_axis(seq, index.numpy(), 1), values.numpy())


def test_fractional_max_pool_follows_pytorch_s_window_sequence():
    rng = np.random.default_rng(13)
    x = rng.integers(0, 6, (2, 11, 13, 3)).astype(np.float32)
    u = rng.uniform(size=(2, 3, 2)).astype(np.float32)
    values, index = nb.nn.functional.fractional_max_pool2d(x, (2, 3), (5, 6), None, True, u)
    assert values.shape == (2, 5, 6, 3) and index.dtype == nb.int64

    def starts(sample, size, out, pool):  # PyTorch's sequence, in float32 as it rounds
        alpha = np.float32(size - pool) / np.float32(out - 1)
        seq = [int(np.float32(i + sample) * alpha) - int(np.float32(sample) * alpha)
               for i in range(out - 1)]  # fmt: skip
        return seq + [size - pool]

    for b in range(2):
        for ch in range(3):
            rows = starts(u[b, ch, 1], 11, 5, 2)
            cols = starts(u[b, ch, 0], 13, 6, 3)
            for i, r0 in enumerate(rows):
                for j, c0 in enumerate(cols):
                    window = x[b, r0 : r0 + 2, c0 : c0 + 3, ch]
                    assert values.numpy()[b, i, j, ch] == window.max()
                    first = window.argmax()
                    assert index.numpy()[b, i, j, ch] == (r0 + first // 3) * 13 + c0 + first % 3
    pool = nb.nn.FractionalMaxPool2d(2, output_ratio=0.5)
    assert pool(x).shape == (2, 5, 6, 3)
    with pytest.raises(ValueError, match="give one of output_size and output_ratio"):
        nb.nn.FractionalMaxPool2d(2)


def test_cross_map_lrn_uses_pytorch_s_windows_channel_zero_included():
    x = np.random.default_rng(15).standard_normal((2, 3, 4, 9)).astype(np.float32)
    for size in (2, 3, 5):
        got = nb.nn.CrossMapLRN2d(size, 0.1, 0.75, 1.5)(x).numpy()
        half, sq = (size - 1) // 2, x.astype(np.float64) ** 2
        want = np.empty_like(sq)
        for c in range(9):
            window = set(range(max(0, c - half), min(9, c + half + 1))) | {0}
            total = sq[..., sorted(window)].sum(-1)
            want[..., c] = x[..., c] / (1.5 + 0.1 / size * total) ** 0.75
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
