"""PyTorch's 1-D pools, adaptive max pools, pixel shuffles, padding modules,
``InstanceNorm1d`` and the distance modules, channels last, against NumPy definitions
(checked against PyTorch itself when written)."""

from __future__ import annotations

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
