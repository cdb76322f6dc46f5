"""``nb.image`` (JAX's ``jax.image``) against the definitions: half-pixel sample positions,
normalized kernel taps, a kernel widened by the reduction when antialiasing."""

import numpy as np
import pytest

import nabla as nb

R = np.random.default_rng(0)
METHODS = ["nearest", "linear", "cubic", "lanczos3", "lanczos5"]


@pytest.mark.parametrize("method", METHODS)
def test_a_constant_image_stays_constant(method):
    x = np.full((2, 5, 7, 3), 1.5, np.float32)
    for shape in ((2, 11, 4, 3), (2, 2, 13, 3)):
        np.testing.assert_allclose(nb.image.resize(x, shape, method).numpy(), 1.5, rtol=1e-5)


def test_linear_upsampling_is_interpolation_at_half_pixel_centres():
    x = R.standard_normal(6).astype(np.float32)
    out = nb.image.resize(x, (15,), "linear").numpy()
    where = (np.arange(15) + 0.5) * 6 / 15 - 0.5
    np.testing.assert_allclose(out, np.interp(where, np.arange(6), x), rtol=1e-5, atol=1e-6)
    # nearest: the input sample under each output centre
    near = nb.image.resize(x, (15,), "nearest").numpy()
    np.testing.assert_array_equal(near, x[np.floor((np.arange(15) + 0.5) * 6 / 15).astype(int)])


def test_downsampling_by_two_antialiases_with_a_widened_triangle():
    x = R.standard_normal(12).astype(np.float32)
    out = nb.image.resize(x, (6,), "linear").numpy()
    taps = np.array([1, 3, 3, 1]) / 8  # the triangle over twice the distance, normalized
    for i in range(1, 5):
        np.testing.assert_allclose(out[i], taps @ x[2 * i - 1 : 2 * i + 3], rtol=1e-5)
    plain = nb.image.resize(x, (6,), "linear", antialias=False).numpy()
    np.testing.assert_allclose(plain[1:5], (x[2:10:2] + x[3:10:2]) / 2, rtol=1e-5)


def test_cubic_reproduces_a_quadratic_inside_the_image():
    t = np.arange(10.0)
    x = (0.3 * t * t - t + 2.0).astype(np.float32)
    out = nb.image.resize(x, (20,), "cubic", antialias=False).numpy()
    where = (np.arange(20) + 0.5) / 2 - 0.5
    inner = (where > 1.0) & (where < 8.0)
    want = 0.3 * where * where - where + 2.0
    np.testing.assert_allclose(out[inner], want[inner], rtol=1e-5)


def test_scale_and_translate_shifts_samples_and_resize_differentiates():
    x = R.standard_normal((1, 8, 8, 1)).astype(np.float32)
    same = nb.image.scale_and_translate(x, x.shape, (1, 2), [1.0, 1.0], [0.0, 0.0], "linear")
    np.testing.assert_allclose(same.numpy(), x, rtol=1e-6)
    moved = nb.image.scale_and_translate(x, x.shape, (1, 2), [1.0, 1.0], [1.0, 0.0], "linear")
    np.testing.assert_allclose(moved.numpy()[0, 1:, :, 0], x[0, :-1, :, 0], rtol=1e-6)
    assert np.all(moved.numpy()[0, 0] == 0.0)  # sampled from outside the image
    # the resize is linear in the image: its gradient is the weights' transpose
    w = R.standard_normal((1, 5, 3, 1)).astype(np.float32)
    g = nb.grad(lambda v: nb.sum(nb.image.resize(v, (1, 5, 3, 1), "cubic") * w))(x).numpy()
    eps = 1e-2
    e = np.zeros_like(x)
    e[0, 3, 4, 0] = eps
    hi = (nb.image.resize(x + e, (1, 5, 3, 1), "cubic").numpy() * w).sum()
    lo = (nb.image.resize(x - e, (1, 5, 3, 1), "cubic").numpy() * w).sum()
    np.testing.assert_allclose(g[0, 3, 4, 0], (hi - lo) / (2 * eps), rtol=1e-3)


def test_bad_arguments_are_refused_at_the_call():
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(nb.OpError, match="resize: unknown method 'area'"):
        nb.image.resize(x, (2, 2), "area")
    with pytest.raises(nb.OpError, match=r"resize: shape \(2,\) must give one"):
        nb.image.resize(x, (2,), "linear")
    with pytest.raises(nb.OpError, match="scale_and_translate: 'nearest' is not supported"):
        nb.image.scale_and_translate(x, (2, 2), (0, 1), [1, 1], [0, 0], "nearest")
    assert nb.image.resize(x.astype(np.uint8), (2, 2), "linear").dtype == nb.float32
