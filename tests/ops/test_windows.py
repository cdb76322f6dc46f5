"""The im2col primitives under conv2d and pooling: ``windows`` (the strided windows of an
NHWC image stacked) and its adjoint ``windows_sum`` (each window tap added back where it
came from), each the other's VJP. NumPy references, finite differences of second order
(``windows_sum``'s own VJP and JVP), vmap, the straight-line executor, bad kwargs."""

import numpy as np
import pytest

import nabla as nb
from nabla.ops import OPS

WINDOWS, WINDOWS_SUM = OPS["windows"], OPS["windows_sum"]

# (H, W), kernel, stride, dilation: overlapping, strided, dilated, tiling and apart (some
# positions in no window) windows
CASES = [
    ((5, 6), (3, 3), (1, 1), (1, 1)),
    ((7, 6), (3, 2), (2, 1), (1, 2)),
    ((6, 6), (2, 2), (2, 2), (1, 1)),
    ((4, 5), (1, 1), (2, 2), (1, 1)),
    ((7, 9), (2, 2), (3, 3), (1, 1)),
]


def _kwargs(size, k, s, d):
    out = tuple((size[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2))
    return {"kernel": k, "stride": s, "dilation": d, "size": size, "out": out}


def _ref_windows(x, kw):
    (kh, kwd), (sh, sw), (dh, dw), (oh, ow) = kw["kernel"], kw["stride"], kw["dilation"], kw["out"]
    taps = [
        x[
            ...,
            i * dh : i * dh + sh * (oh - 1) + 1 : sh,
            j * dw : j * dw + sw * (ow - 1) + 1 : sw,
            :,
        ]
        for i in range(kh)
        for j in range(kwd)
    ]
    return np.stack(taps, axis=-2)


def _ref_windows_sum(cols, kw):
    (kh, kwd), (sh, sw), (dh, dw), (oh, ow) = kw["kernel"], kw["stride"], kw["dilation"], kw["out"]
    out = np.zeros((*cols.shape[:-4], *kw["size"], cols.shape[-1]), cols.dtype)
    for i in range(kh):
        for j in range(kwd):
            for a in range(oh):
                for b in range(ow):
                    out[..., i * dh + a * sh, j * dw + b * sw, :] += cols[..., a, b, i * kwd + j, :]
    return out


@pytest.mark.parametrize("channels", [1, 3, 64])  # 1: a copy per tap; 64: no tap-major copy
@pytest.mark.parametrize("case", CASES)
def test_windows_and_windows_sum_match_numpy(case, channels, rng):
    kw = _kwargs(*case)
    x = rng.standard_normal((2, *kw["size"], channels))
    got = WINDOWS.bind([nb.constant(x)], kw)
    np.testing.assert_array_equal(got.numpy(), _ref_windows(x, kw))
    cols = rng.standard_normal(got.shape)
    back = WINDOWS_SUM.bind([nb.constant(cols)], kw)
    np.testing.assert_allclose(back.numpy(), _ref_windows_sum(cols, kw), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES[:3])
def test_windows_sum_of_channels_not_contiguous(case, rng):
    # cols whose channel rows are strided (a permuted view): the tap-major copy that moves
    # each contiguous row as one item must fall back
    kw = _kwargs(*case)
    k = kw["kernel"][0] * kw["kernel"][1]
    c_first = rng.standard_normal((3, 2, *kw["out"], k))
    cols = nb.permute(nb.constant(c_first), (1, 2, 3, 4, 0))
    back = WINDOWS_SUM.bind([cols], kw)
    want = _ref_windows_sum(np.moveaxis(c_first, 0, -1), kw)
    np.testing.assert_allclose(back.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_each_is_the_others_adjoint_and_vjp(case, rng):
    kw = _kwargs(*case)
    x = rng.standard_normal((2, *kw["size"], 3))
    cols_shape = WINDOWS.bind([nb.constant(x)], kw).shape
    cols = rng.standard_normal(cols_shape)
    # <windows(x), cols> == <x, windows_sum(cols)>
    lhs = float((WINDOWS.bind([nb.constant(x)], kw).numpy() * cols).sum())
    rhs = float((x * WINDOWS_SUM.bind([nb.constant(cols)], kw).numpy()).sum())
    assert np.isclose(lhs, rhs, rtol=1e-12)
    # the VJPs: windows' is windows_sum, windows_sum's is windows
    gx = nb.grad(lambda v: (WINDOWS.bind([v], kw) * nb.constant(cols)).sum())(nb.constant(x))
    np.testing.assert_allclose(gx.numpy(), _ref_windows_sum(cols, kw), rtol=1e-12)
    gc = nb.grad(lambda v: (WINDOWS_SUM.bind([v], kw) * nb.constant(x)).sum())(nb.constant(cols))
    np.testing.assert_allclose(gc.numpy(), _ref_windows(x, kw), rtol=1e-12)


def test_second_order_conv_gradient_matches_finite_differences(rng):
    """A Hessian-vector product through conv2d's input gradient runs windows_sum's own VJP
    and JVP: central differences of the gradient agree."""
    x = rng.standard_normal((2, 5, 5, 2))
    w = rng.standard_normal((3, 3, 2, 3))

    def loss(v):
        return (nb.tanh(nb.conv2d(v, nb.constant(w), padding=1, stride=(2, 1))) ** 2).sum()

    grad = nb.grad(loss)
    t = rng.standard_normal(x.shape)
    _, hvp = nb.jvp(grad, (nb.constant(x),), (nb.constant(t),))
    eps = 1e-6
    fd = (grad(nb.constant(x + eps * t)).numpy() - grad(nb.constant(x - eps * t)).numpy()) / (
        2 * eps
    )
    np.testing.assert_allclose(hvp.numpy(), fd, rtol=1e-5, atol=1e-6)
    # reverse over reverse: the VJP of the input gradient (windows_sum's VJP is windows)
    hvp_rev = nb.grad(lambda v: (grad(v) * nb.constant(t)).sum())(nb.constant(x))
    np.testing.assert_allclose(hvp_rev.numpy(), fd, rtol=1e-5, atol=1e-6)


def test_vmap_of_both(rng):
    kw = _kwargs(*CASES[1])
    x = rng.standard_normal((4, 2, *kw["size"], 3)).astype(np.float32)
    got = nb.vmap(lambda v: WINDOWS.bind([v], kw))(nb.constant(x))
    np.testing.assert_array_equal(got.numpy(), _ref_windows(x, kw))
    cols = rng.standard_normal(got.shape).astype(np.float32)
    back = nb.vmap(lambda v: WINDOWS_SUM.bind([v], kw), in_axes=1)(
        nb.constant(np.moveaxis(cols, 0, 1))
    )
    np.testing.assert_allclose(back.numpy(), _ref_windows_sum(cols, kw), rtol=1e-6, atol=1e-6)


def test_compiled_conv_step_runs_the_straight_line_executor_alike(rng):
    """A hot compiled conv + pool gradient: the straight-line NumPy code and the
    interpreter agree bit for bit (the suite's check mode compares every output)."""
    x = nb.constant(rng.standard_normal((4, 8, 8, 3)).astype(np.float32))
    w = nb.constant(rng.standard_normal((3, 3, 3, 5)).astype(np.float32))

    @nb.compile
    def step(v, f):
        def loss(f):
            return nb.max_pool2d(nb.relu(nb.conv2d(v, f, padding=1)), 2).sum()

        return nb.value_and_grad(loss)(f)

    first = None
    for _ in range(6):  # past the threshold that makes the program hot
        loss, g = step(x, w)
        first = g.numpy() if first is None else first
        np.testing.assert_array_equal(g.numpy(), first)
    ref = nb.grad(lambda f: nb.max_pool2d(nb.relu(nb.conv2d(x, f, padding=1)), 2).sum())(w)
    np.testing.assert_allclose(first, ref.numpy(), rtol=1e-5, atol=1e-5)


def test_bad_windows_are_errors_naming_the_op():
    x = nb.zeros((1, 4, 4, 2))
    with pytest.raises(nb.OpError, match=r"windows: windows .* do not fit spatial size \(4, 4\)"):
        WINDOWS.bind([x], _kwargs((4, 4), (3, 3), (1, 1), (1, 1)) | {"out": (3, 2)})
    with pytest.raises(nb.OpError, match=r"windows: expects \(\.\.\., H, W, C\)"):
        WINDOWS.bind([nb.zeros((4, 4))], _kwargs((4, 4), (3, 3), (1, 1), (1, 1)))
    kw = _kwargs((4, 4), (3, 3), (1, 1), (1, 1))
    with pytest.raises(nb.OpError, match=r"windows_sum: expects .* got shape \(1, 3, 3, 9, 2\)"):
        WINDOWS_SUM.bind([nb.zeros((1, 3, 3, 9, 2))], kw)
    with pytest.raises(nb.OpError, match=r"windows_sum: windows .* with 4 taps per window"):
        WINDOWS_SUM.bind([nb.zeros((1, 2, 2, 4, 2))], kw)


def test_tiling_pools_stack_their_taps_first_and_keep_a_spatial_sharding(rng):
    """Pools whose windows tile the input (stride = kernel, no padding) reshape and
    transpose the taps first instead of gathering windows: the same values and
    first-maximum gradient as the windows, and a sharded H stays sharded (no collective).
    Overlapping or padded pools still gather windows."""
    x = rng.standard_normal((2, 8, 6, 4)).astype(np.float32)
    x[0, 0, 0, 0] = x[0, 0, 1, 0] = x[0, 1, 0, 0] = 9.0  # a tie: the first tap wins
    xt = nb.constant(x)
    tiles = x.reshape(2, 4, 2, 3, 2, 4)
    np.testing.assert_array_equal(nb.max_pool2d(xt, 2).numpy(), tiles.max((2, 4)))
    np.testing.assert_allclose(nb.avg_pool2d(xt, 2).numpy(), tiles.mean((2, 4)), rtol=1e-6)
    g = nb.grad(lambda v: nb.max_pool2d(v, 2).sum())(xt).numpy()
    assert g[0, 0, 0, 0] == 1 and g[0, 0, 1, 0] == 0 and g[0, 1, 0, 0] == 0
    assert g.sum() == 2 * 4 * 3 * 4
    for pool in (nb.max_pool2d, nb.avg_pool2d):
        assert "windows" not in str(nb.trace(lambda v, pool=pool: pool(v, 2))(xt))
        assert "windows" in str(nb.trace(lambda v, pool=pool: pool(v, 3, 1))(xt))
        assert "windows" in str(nb.trace(lambda v, pool=pool: pool(v, 2, padding=1))(xt))
    mesh = nb.DeviceMesh("pool", (2,), ("d",))
    xs = xt.shard(mesh, nb.P(None, "d"))
    graph = str(nb.trace(lambda v: nb.max_pool2d(v, 2))(xs))
    assert not any(c in graph for c in ("all_gather", "all_reduce", "all_to_all")), graph
    out = nb.max_pool2d(xs, 2)
    assert out.sharding.spec == nb.P(None, "d")
    np.testing.assert_array_equal(out.numpy(), tiles.max((2, 4)))
    for pool in (nb.max_pool2d, nb.avg_pool2d):  # no window at all: still the error
        with pytest.raises(nb.OpError, match=r"too small for kernel \(2, 2\)"):
            pool(nb.ones((1, 0, 4, 3)), 2)


def test_the_pool_functions_take_any_padding_as_reduce_window():
    """The original Nabla's and JAX's pooling: padding past half the window is fine (a
    window wholly in it pools the fill); F.max_pool2d/F.avg_pool2d keep PyTorch's limit."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 7, 6, 1)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (1, 0), (2, 1), (0, 0)))
    windows = np.stack(
        [padded[:, i : i + 5 : 2, j : j + 8] for i in range(3) for j in range(2)], 0
    )  # kernel (3, 2), stride (2, 1): 3 x 8 outputs
    got = nb.avg_pool2d(nb.constant(x), kernel_size=(3, 2), stride=(2, 1), padding=(1, 0, 2, 1))
    np.testing.assert_allclose(got.numpy(), windows.mean(0), rtol=1e-6, atol=1e-7)
    neg = np.pad(x, ((0, 0), (1, 0), (2, 1), (0, 0)), constant_values=-np.inf)
    wmax = np.stack([neg[:, i : i + 5 : 2, j : j + 8] for i in range(3) for j in range(2)], 0)
    got = nb.max_pool2d(nb.constant(x), kernel_size=(3, 2), stride=(2, 1), padding=(1, 0, 2, 1))
    np.testing.assert_array_equal(got.numpy(), wmax.max(0))
    with pytest.raises(ValueError, match="more than half the window"):
        nb.nn.functional.max_pool2d(nb.constant(x), (3, 2), (2, 1), (1, 0, 2, 1))
