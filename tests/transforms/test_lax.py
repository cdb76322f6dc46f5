"""``nb.lax``: ``jax.lax``'s most used names. References are NumPy slicing and JAX's
documented rules (starts clamped so the block fits; negative ones count from the end)."""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb

L = nb.lax
X = np.arange(24, dtype=np.float32).reshape(4, 6)


def _i(v):
    return nb.constant(np.int32(v))


@pytest.mark.parametrize(
    "starts, want", [((1, 2), (1, 2)), ((3, 5), (2, 3)), ((-1, 0), (2, 0)), ((-3, -2), (1, 3))]
)
def test_dynamic_slice_clamps_as_jax_with_int_or_tensor_starts(starts, want):
    ref = X[want[0] : want[0] + 2, want[1] : want[1] + 3]
    np.testing.assert_array_equal(L.dynamic_slice(X, starts, (2, 3)).numpy(), ref)
    tensors = tuple(_i(s) for s in starts)
    np.testing.assert_array_equal(L.dynamic_slice(X, tensors, (2, 3)).numpy(), ref)


def test_dynamic_update_slice_and_the_in_dim_forms():
    u = -np.ones((2, 2), np.float32)
    for starts, at in (((1, 2), (1, 2)), ((3, 5), (2, 4))):
        want = X.copy()
        want[at[0] : at[0] + 2, at[1] : at[1] + 2] = u
        np.testing.assert_array_equal(L.dynamic_update_slice(X, u, starts).numpy(), want)
        got = L.dynamic_update_slice(X, u, tuple(_i(s) for s in starts)).numpy()
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(L.dynamic_slice_in_dim(X, _i(1), 2, 1).numpy(), X[:, 1:3])
    np.testing.assert_array_equal(L.dynamic_index_in_dim(X, 2, 1, keepdims=False).numpy(), X[:, 2])
    want = X.copy()
    want[:, 4:6] = 0.0
    np.testing.assert_array_equal(
        L.dynamic_update_slice_in_dim(X, np.zeros((4, 2), np.float32), 4, 1).numpy(), want
    )
    with pytest.raises(ValueError, match="one start index"):
        L.dynamic_slice(X, (1,), (2, 3))
    for update in (np.zeros(X.shape[1], np.float32), np.zeros((1, X.shape[1]), np.float32)):
        for index, row in ((2, 2), (_i(1), 1), (9, X.shape[0] - 1)):  # (clamped, as JAX's)
            want = X.copy()
            want[row] = 0.0
            got = L.dynamic_update_index_in_dim(X, update, index, 0).numpy()
            np.testing.assert_array_equal(got, want)
    assert L.broadcast_shapes((2, 1), (3,)) == (2, 3)
    with pytest.raises(ValueError, match=r"lax.broadcast_shapes: shapes \(2,\), \(3,\)"):
        L.broadcast_shapes((2,), (3,))
    tree = {"a": X, "b": [X]}
    assert L.optimization_barrier(tree) is tree


def test_dynamic_slices_batch_and_differentiate():
    sums = nb.vmap(lambda s: L.dynamic_slice(nb.constant(X), (s, 0), (1, 6)).sum())(
        nb.constant(np.array([0, 1, 3], np.int32))
    )
    assert sums.tolist() == [X[i].sum() for i in (0, 1, 3)]

    def f(v):
        return L.dynamic_update_slice(v, nb.ones((1, 2)) * 3.0, (_i(1), 2)).sum() + (v * v).sum()

    want = 2 * X + 1
    want[1, 2:4] = 2 * X[1, 2:4]  # the overwritten block's own contribution is gone
    np.testing.assert_allclose(nb.grad(f)(nb.constant(X)).numpy(), want)


def test_map_select_clamp_iota_and_the_collectives():
    np.testing.assert_allclose(L.map(lambda r: (r * 2).sum(), nb.constant(X)).numpy(), 2 * X.sum(1))
    assert L.clamp(0.0, nb.constant([-1.0, 0.5, 2.0]), 1.0).tolist() == [0.0, 0.5, 1.0]
    assert L.iota(nb.int32, 4).tolist() == [0, 1, 2, 3]
    assert L.select(nb.constant([True, False]), nb.ones(2), nb.zeros(2)).tolist() == [1.0, 0.0]
    assert L.scan is nb.scan and L.cond is nb.cond and L.stop_gradient is nb.stop_gradient
    mesh = nb.DeviceMesh("lax", (2,), ("i",))
    v = np.arange(4.0, dtype=np.float32)
    for name, want in (("psum", [2.0, 4.0]), ("pmean", [1.0, 2.0]), ("pmax", [2.0, 3.0])):
        fn = getattr(L, name)
        body = nb.shard_map(lambda a, fn=fn: fn(a, "i"), mesh, (nb.P("i"),), nb.P())
        assert body(v).tolist() == want, name


def test_the_rough_edges_a_check_against_jax_found():
    """``map(batch_size=)``; ``clamp``'s derivative is JAX's (none at a tie, where
    ``nb.clip`` shares it); ``select`` takes a bool ``pred`` only; an update of another
    dtype is refused (it was truncated); a bad ``_in_dim`` axis and a 0-d ``xs`` are named."""
    f = lambda r: (r * 2).sum()  # noqa: E731
    x = nb.constant(np.arange(21, dtype=np.float32).reshape(7, 3))
    for b in (None, 1, 3, 7, 10):
        np.testing.assert_allclose(L.map(f, x, batch_size=b).numpy(), 2 * x.numpy().sum(1))
    grads = nb.grad(lambda v: L.clamp(0.0, v, 1.0).sum())(nb.constant([0.0, 0.5, 1.0, 2.0]))
    assert grads.tolist() == [0.0, 1.0, 0.0, 0.0]  # jax.grad of lax.clamp's
    with pytest.raises(TypeError, match="pred must be bool or an integer"):
        L.select(nb.constant([1.0, 0.0]), nb.ones(2), nb.zeros(2))
    with pytest.raises(TypeError, match="update of dtype float32 for an operand of dtype int32"):
        L.dynamic_update_slice(np.zeros(4, np.int32), np.array([9.7], np.float32), (1,))
    assert L.dynamic_update_slice(np.zeros(4, np.int32), [9], (1,)).tolist() == [0, 9, 0, 0]
    with pytest.raises(IndexError, match="dynamic_slice_in_dim: axis 5"):
        L.dynamic_slice_in_dim(np.zeros((2, 2)), 0, 1, 5)
    with pytest.raises(ValueError, match="lax.map: every leaf of xs needs a leading dim"):
        L.map(f, nb.constant(1.0))


def test_a_second_check_against_jax():
    """``clamp`` with min > max is JAX's ``min(max(x, min), max)`` (every element max);
    ``select`` takes an integer ``pred`` as JAX's (positive picks ``on_true``); ``map``
    with ``batch_size`` over nothing gives an empty result."""
    assert L.clamp(3.0, nb.constant([0.0, 2.0, 5.0]), 1.0).tolist() == [1.0, 1.0, 1.0]
    assert nb.grad(lambda v: L.clamp(3.0, v, 1.0))(nb.constant(2.0)).item() == 0.0
    pred = nb.constant(np.array([0, 2, -1], np.int32))
    got = L.select(pred, nb.constant([1.0, 2.0, 3.0]), nb.constant([4.0, 5.0, 6.0]))
    assert got.tolist() == [4.0, 2.0, 6.0]  # jax.lax.select's answer
    for b in (None, 2):
        assert L.map(lambda r: r * 2, nb.zeros((0, 3)), batch_size=b).shape == (0, 3)


def test_collectives_over_a_named_vmap_axis():
    """``vmap(axis_name=)`` as JAX's: ``psum``/``pmean``/``pmax``/``pmin`` over the examples
    give one value for every example, ``axis_index`` each example's position; nested
    names reduce over both; they differentiate, and compile."""
    x = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    f = lambda v: v / L.psum(v, "i")  # noqa: E731
    np.testing.assert_allclose(nb.vmap(f, axis_name="i")(x).numpy(), x / x.sum(0), rtol=1e-6)
    np.testing.assert_allclose(
        nb.compile(nb.vmap(f, axis_name="i"))(x).numpy(), x / x.sum(0), rtol=1e-6
    )

    def g(v):
        centred = (v - L.pmean(v, "i")) * L.axis_index("i")
        return centred + L.pmax(v, "i") - L.pmin(v.sum(), "i")

    want = (x - x.mean(0)) * np.arange(4)[:, None] + x.max(0) - x.sum(1).min()
    np.testing.assert_allclose(nb.vmap(g, axis_name="i")(x).numpy(), want, rtol=1e-6)
    assert nb.vmap(lambda v: L.psum(1.0, "i"), axis_name="i")(x).tolist() == [4.0] * 4
    both = nb.vmap(nb.vmap(lambda v: L.psum(v, ("i", "j")), axis_name="j"), axis_name="i")(x)
    assert both.tolist() == [[x.sum()] * 3] * 4
    outer = nb.vmap(nb.vmap(lambda v: L.psum(v, "i"), axis_name="j"), axis_name="i")(x)
    np.testing.assert_allclose(outer.numpy(), np.broadcast_to(x.sum(0), (4, 3)))
    # d/dx of sum((v - mean_i v)^2) over the batch: 2 (x - mean)
    grad = nb.grad(lambda x: (nb.vmap(lambda v: v - L.pmean(v, "i"), axis_name="i")(x) ** 2).sum())
    np.testing.assert_allclose(grad(x).numpy(), 2 * (x - x.mean(0)), rtol=1e-5, atol=1e-5)
    with pytest.raises(NameError, match="no running vmap or shard_map body has .* 'q'"):
        L.axis_index("q")
    mesh = nb.DeviceMesh("lax_ix", (2,), ("d",))
    body = nb.shard_map(lambda a: a * 0 + L.axis_index("d"), mesh, (nb.P("d"),), nb.P("d"))
    assert body(np.zeros(4, np.float32)).tolist() == [0.0, 0.0, 1.0, 1.0]


# ---------------------------------------------------------------- the rest of jax.lax's names
R = np.random.default_rng(0)
A = R.standard_normal((3, 4, 5)).astype(np.float32)
B = R.standard_normal((3, 4, 5)).astype(np.float32)


def test_elementwise_names_are_the_ops():
    np.testing.assert_allclose(L.add(A, B).numpy(), A + B)
    np.testing.assert_allclose(L.max(A, B).numpy(), np.maximum(A, B))
    np.testing.assert_allclose(L.rsqrt(np.abs(A)).numpy(), 1 / np.sqrt(np.abs(A)), rtol=1e-5)
    np.testing.assert_allclose(L.logistic(A).numpy(), 1 / (1 + np.exp(-A)), rtol=1e-5)
    np.testing.assert_array_equal(L.ge(A, B).numpy(), A >= B)


def test_div_rem_and_round_follow_c_not_python():
    x = np.array([-7, -6, 7, 6, 0, 5], np.int32)
    y = np.array([2, -3, -2, 3, 4, -5], np.int32)
    q = np.trunc(x / y).astype(np.int32)  # C's quotient rounds toward zero
    np.testing.assert_array_equal(L.div(x, y).numpy(), q)
    np.testing.assert_array_equal(L.rem(x, y).numpy(), x - q * y)
    np.testing.assert_allclose(L.rem(A, B).numpy(), np.fmod(A, B), rtol=1e-6)
    h = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49], np.float32)
    np.testing.assert_array_equal(L.round(h).numpy(), [-3, -2, -1, 1, 2, 3, 0])
    np.testing.assert_array_equal(L.round(h, 1).numpy(), np.round(h))
    even = L.round(h, L.RoundingMethod.TO_NEAREST_EVEN).numpy()  # JAX's enum spelling
    np.testing.assert_array_equal(even, np.round(h))
    away = L.round(h, L.RoundingMethod.AWAY_FROM_ZERO).numpy()
    np.testing.assert_array_equal(away, L.round(h).numpy())
    np.testing.assert_allclose(L.integer_pow(A, 3).numpy(), A**3, rtol=1e-6)
    with pytest.raises(TypeError, match="integer_pow"):
        L.integer_pow(A, 2.0)


def test_select_n_broadcast_in_dim_and_convert():
    w = np.array([0, 1, 2, 1, 0])
    c = [A[0, 0], B[0, 0], 2 * A[0, 0]]
    np.testing.assert_array_equal(L.select_n(w, *c).numpy(), np.choose(w, c))
    np.testing.assert_array_equal(L.select_n(A > 0, A, B).numpy(), np.where(A > 0, B, A))
    with pytest.raises(ValueError, match="2 cases"):
        L.select_n(A > 0, A)
    got = L.broadcast_in_dim(A[:, 0, :1], (3, 2, 7), (0, 2)).numpy()
    np.testing.assert_array_equal(got, np.broadcast_to(A[:, 0, :1][:, None, :], (3, 2, 7)))
    with pytest.raises(ValueError, match=r"broadcast_in_dim.*\(3, 1\)"):
        L.broadcast_in_dim(A[:, 0, :1], (3, 2, 7), (2, 0))
    got = L.convert_element_type(A, nb.int32)
    assert got.dtype == nb.int32


def test_dot_general_puts_batch_then_lhs_then_rhs_dims():
    a = R.standard_normal((2, 3, 4)).astype(np.float32)
    b = R.standard_normal((5, 3, 2)).astype(np.float32)
    got = L.dot_general(a, b, (((1,), (1,)), ((0,), (2,))))
    np.testing.assert_allclose(got.numpy(), np.einsum("bij,kib->bjk", a, b), rtol=1e-5)
    g = nb.grad(lambda t: (L.dot_general(t, b, (((1,), (1,)), ((0,), (2,)))) ** 2).sum())(a)
    want = 2 * np.einsum("bjk,kib->bij", np.einsum("bij,kib->bjk", a, b), b)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-4)
    np.testing.assert_allclose(
        L.dot(a[0].T, b[:, :, 0].T).numpy(), a[0].T @ b[:, :, 0].T, rtol=1e-5
    )


def test_structural_names_match_numpy():
    np.testing.assert_array_equal(L.rev(A, (0, 2)).numpy(), A[::-1, :, ::-1])
    np.testing.assert_array_equal(
        L.slice(A, (0, 1, 0), (3, 4, 5), (2, 1, 3)).numpy(), A[::2, 1:, ::3]
    )
    np.testing.assert_array_equal(L.slice_in_dim(A, 1, 4, 2, 2).numpy(), A[:, :, 1:4:2])
    np.testing.assert_array_equal(L.index_in_dim(A, -1, 1).numpy(), A[:, -1:])
    np.testing.assert_array_equal(L.index_in_dim(A, 2, 2, False).numpy(), A[:, :, 2])
    np.testing.assert_array_equal(L.concatenate([A, B], 1).numpy(), np.concatenate([A, B], 1))
    np.testing.assert_array_equal(L.squeeze(A[:1, :, :1], (0, 2)).numpy(), A[0, :, 0])
    assert L.expand_dims(A, (0, -1)).shape == (1, 3, 4, 5, 1)
    np.testing.assert_array_equal(L.transpose(A, (2, 0, 1)).numpy(), A.transpose(2, 0, 1))
    got = L.reshape(A, (5, 12), (2, 0, 1)).numpy()
    np.testing.assert_array_equal(got, A.transpose(2, 0, 1).reshape(5, 12))


def _pad_ref(x, value, config):
    """lax.pad by its definition: spread with interior fills, then pad or crop the ends."""
    for axis, (low, high, interior) in enumerate(config):
        n = x.shape[axis]
        shape = list(x.shape)
        shape[axis] = max(n + (n - 1) * interior, 0)
        spread = np.full(shape, value, x.dtype)
        index = [slice(None)] * x.ndim
        index[axis] = slice(None, None, interior + 1)
        spread[tuple(index)] = x
        widths = [(0, 0)] * x.ndim
        widths[axis] = (max(low, 0), max(high, 0))
        x = np.pad(spread, widths, constant_values=value)
        index[axis] = slice(max(-low, 0), x.shape[axis] - max(-high, 0))
        x = x[tuple(index)]
    return x


@pytest.mark.parametrize(
    "config",
    [
        ((1, 2, 0), (0, 0, 1), (-1, 2, 2)),
        ((0, 0, 0), (-2, -1, 0), (2, -3, 1)),
        ((3, -1, 1), (1, 1, 3), (0, 0, 0)),
    ],
)
def test_pad_interior_and_negative_edges(config):
    np.testing.assert_array_equal(L.pad(A, 0.5, config).numpy(), _pad_ref(A, 0.5, config))
    # the gradient is the cotangent read back at the kept positions
    g = nb.grad(lambda t: (L.pad(t, 0.0, config) * L.pad(nb.ones_like(t), 0.0, config)).sum())(A)
    kept = _pad_ref(np.arange(A.size, dtype=np.float32).reshape(A.shape) + 1, 0.0, config)
    want = np.zeros(A.size, np.float32)
    want[kept[kept > 0].astype(int) - 1] = 1
    np.testing.assert_array_equal(g.numpy(), want.reshape(A.shape))


def test_pad_errors_name_the_shape():
    with pytest.raises(ValueError, match=r"lax.pad.*\(3, 4, 5\)"):
        L.pad(A, 0.0, ((1, 1, 0),))
    with pytest.raises(ValueError, match="interior"):
        L.pad(A, 0.0, ((0, 0, -1), (0, 0, 0), (0, 0, 0)))


def test_sort_top_k_arg_and_cumulative_forms():
    v, i = L.top_k(A, 2)
    np.testing.assert_array_equal(v.numpy(), -np.sort(-A, -1)[..., :2])
    assert i.dtype == nb.int32
    np.testing.assert_array_equal(L.sort(A, 1).numpy(), np.sort(A, 1))
    k1, k2 = np.array([2, 1, 2, 1, 0, 2]), np.array([5, 3, 1, 3, 9, 0])
    v = np.arange(6.0, dtype=np.float32)
    order = np.lexsort((k2, k1))  # lexsort's last key is the primary one
    for got, want in zip(L.sort((k1, k2, v), num_keys=2), (k1, k2, v), strict=True):
        np.testing.assert_array_equal(got.numpy(), want[order])
    order = np.argsort(k1, kind="stable")
    np.testing.assert_array_equal(L.sort((k1, v), num_keys=1)[1].numpy(), v[order])
    with pytest.raises(ValueError, match="num_keys"):
        L.sort((k1, v), num_keys=3)
    assert L.argmax(A, 1, nb.int32).dtype == nb.int32
    np.testing.assert_array_equal(L.argmin(A, 2, nb.int64).numpy(), A.argmin(2))
    np.testing.assert_allclose(L.cumsum(A).numpy(), A.cumsum(0), rtol=1e-6)
    want = np.flip(np.flip(A, 1).cumsum(1), 1)
    np.testing.assert_allclose(L.cumsum(A, 1, True).numpy(), want, rtol=1e-5, atol=1e-6)
    want = np.flip(np.flip(A, 2).cumprod(2), 2)
    np.testing.assert_allclose(L.cumprod(A, 2, True).numpy(), want, rtol=1e-5)
    np.testing.assert_array_equal(L.full((2, 3), 1.5).numpy(), np.full((2, 3), 1.5, np.float32))
    got = L.full_like(A, 2, nb.int32, (2,))
    assert got.dtype == nb.int32 and got.shape == (2,)


def test_new_names_batch_under_vmap():
    got = nb.vmap(lambda t: L.pad(t, 1.0, ((1, 0, 1), (0, 1, 0))))(A).numpy()
    np.testing.assert_array_equal(
        got, np.stack([_pad_ref(a, 1.0, ((1, 0, 1), (0, 1, 0))) for a in A])
    )
    got = nb.vmap(lambda t: L.broadcast_in_dim(t, (2, 4, 5), (1, 2)))(A).numpy()
    np.testing.assert_array_equal(got, np.broadcast_to(A[:, None], (3, 2, 4, 5)))


def _np_conv(x, w, strides, pads, rdil=None, ldil=None, groups=1):
    """A direct NumPy convolution in JAX's default layouts (NC..., OI...)."""
    nsp = x.ndim - 2
    rdil, ldil = rdil or (1,) * nsp, ldil or (1,) * nsp
    if max(ldil) > 1:  # zeros between the input's elements
        shape = (*x.shape[:2], *[(n - 1) * d + 1 for n, d in zip(x.shape[2:], ldil)])
        spread = np.zeros(shape, x.dtype)
        spread[(slice(None), slice(None), *[slice(None, None, d) for d in ldil])] = x
        x = spread
    x = np.pad(x, [(0, 0), (0, 0), *pads])
    o, i = w.shape[:2]
    window = w.shape[2:]
    out_sp = [
        (n - ((k - 1) * d + 1)) // s + 1 for n, k, d, s in zip(x.shape[2:], window, rdil, strides)
    ]
    out = np.zeros((x.shape[0], o, *out_sp), np.float64)
    og = o // groups
    for tap in np.ndindex(*window):
        idx = tuple(
            slice(t * d, t * d + (m - 1) * s + 1, s)
            for t, d, m, s in zip(tap, rdil, out_sp, strides)
        )
        for g in range(groups):
            piece = x[(slice(None), slice(g * i, (g + 1) * i), *idx)]
            wt = w[(slice(g * og, (g + 1) * og), slice(None), *tap)]
            out[:, g * og : (g + 1) * og] += np.einsum("nc...,oc->no...", piece, wt)
    return out


def test_scans_windows_and_convolutions_of_lax():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 7))
    np.testing.assert_array_equal(L.cummax(x, 1).numpy(), np.maximum.accumulate(x, 1))
    want = np.flip(np.minimum.accumulate(np.flip(x, 0), 0), 0)
    np.testing.assert_array_equal(L.cummin(x, 0, reverse=True).numpy(), want)
    np.testing.assert_allclose(
        L.cumlogsumexp(x, 1).numpy(), np.logaddexp.accumulate(x, 1), rtol=1e-12
    )
    sums, prods = L.associative_scan(lambda a, b: (a[0] + b[0], a[1] * b[1]), (x, x + 2))
    np.testing.assert_allclose(sums.numpy(), np.cumsum(x, 0), rtol=1e-12)
    np.testing.assert_allclose(prods.numpy(), np.cumprod(x + 2, 0), rtol=1e-12)
    keys, vals = L.sort_key_val(x[0], np.arange(7))
    assert vals.tolist() == np.argsort(x[0], kind="stable").tolist()
    assert L.broadcasted_iota(nb.int32, (2, 3), 1).tolist() == [[0, 1, 2], [0, 1, 2]]
    assert L.reduce_precision(np.float32(1 / 3), 5, 10).item() == float(np.float16(1 / 3))
    i32 = np.array([-8, -1, 7, 100, -(2**31)], np.int32)
    counts = np.array([1, 3, 0, 31, 32], np.int32)
    want = [int(np.uint32(v) >> c) if c < 32 else 0 for v, c in zip(i32.view(np.uint32), counts)]
    assert L.shift_right_logical(i32, counts).numpy().view(np.uint32).tolist() == want
    im = rng.standard_normal((2, 3, 9, 8))
    for pad, pairs in (("VALID", [(0, 0)] * 2), (((1, 2), (0, 1)), [(1, 2), (0, 1)])):
        full = [(0, 0), (0, 0), *pairs]
        got = L.reduce_window(
            im, -np.inf, L.max, (1, 1, 3, 2), (1, 1, 2, 2), full if pad != "VALID" else pad
        )
        padded = np.pad(im, full, constant_values=-np.inf)
        oh, ow = (padded.shape[2] - 3) // 2 + 1, (padded.shape[3] - 2) // 2 + 1
        want = np.full((2, 3, oh, ow), -np.inf)
        for i, j in np.ndindex(3, 2):
            want = np.maximum(want, padded[:, :, i : i + 2 * oh - 1 : 2, j : j + 2 * ow - 1 : 2])
        np.testing.assert_array_equal(got.numpy(), want)
    w = rng.standard_normal((4, 3, 3, 2))
    for strides, pads in (((1, 1), [(1, 1), (0, 1)]), ((2, 1), [(0, 0), (2, 0)])):
        got = L.conv_general_dilated(im, w, strides, pads)
        np.testing.assert_allclose(got.numpy(), _np_conv(im, w, strides, pads), rtol=1e-10)
    got = L.conv_general_dilated(im, w, (1, 1), [(1, 1), (2, 2)], (2, 2), (1, 2))
    want = _np_conv(im, w, (1, 1), [(1, 1), (2, 2)], rdil=(1, 2), ldil=(2, 2))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)
    nhwc = L.conv_general_dilated(
        np.transpose(im, (0, 2, 3, 1)), np.transpose(w, (2, 3, 1, 0)), (1, 1), [(1, 1), (0, 1)],
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )  # fmt: skip
    want = _np_conv(im, w, (1, 1), [(1, 1), (0, 1)]).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(nhwc.numpy(), want, rtol=1e-10)
    x1, w1 = rng.standard_normal((2, 4, 10)), rng.standard_normal((6, 2, 3))  # 1-D, 2 groups
    got = L.conv_general_dilated(x1, w1, (2,), "SAME", feature_group_count=2)
    want = _np_conv(x1, w1, (2,), [(0, 1)], groups=2)  # ("SAME": the odd pad goes high)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)
    x3, w3 = rng.standard_normal((1, 2, 5, 4, 4)), rng.standard_normal((3, 2, 2, 3, 2))
    got = L.conv(x3, w3, (1, 2, 1), "VALID")
    np.testing.assert_allclose(got.numpy(), _np_conv(x3, w3, (1, 2, 1), [(0, 0)] * 3), rtol=1e-10)
    with pytest.raises(ValueError, match="lhs has 3 features, rhs takes 2 per group"):
        L.conv(im, rng.standard_normal((4, 2, 3, 3)), (1, 1), "SAME")


# ------------------------------------------------- JAX's named collectives, both kinds of axis
def _per_device_reference(name, blocks):
    """What each device (example) gets, from the blocks of all of them (JAX's definitions)."""
    n = len(blocks)
    if name == "all_gather":
        return [np.stack(blocks, 1)] * n
    if name == "all_gather_tiled":
        return [np.concatenate(blocks, 1)] * n
    if name == "psum_scatter":  # dim 0 of size n: block i of the sum
        total = sum(blocks)
        return [total[i] for i in range(n)]
    if name == "psum_scatter_tiled":  # dim 1 split in n
        total = sum(blocks)
        return np.split(total, n, axis=1)
    if name == "all_to_all_tiled":  # split dim 0, concat dim 1
        return [np.concatenate([np.split(b, n, 0)[i] for b in blocks], 1) for i in range(n)]
    if name == "all_to_all":  # split dim 0 (size n), the senders stacked at dim 1
        return [np.stack([b[i] for b in blocks], 1) for i in range(n)]
    if name == "ppermute":  # (0 -> 1), (1 -> 2), (2 -> 0); device 3 receives nothing
        src = {1: 0, 2: 1, 0: 2}
        return [blocks[src[i]] if i in src else np.zeros_like(blocks[0]) for i in range(n)]
    raise AssertionError(name)


COLLECTIVES = {
    "all_gather": lambda v: L.all_gather(v, "i", axis=1),
    "all_gather_tiled": lambda v: L.all_gather(v, "i", axis=1, tiled=True),
    "psum_scatter": lambda v: L.psum_scatter(v, "i"),
    "psum_scatter_tiled": lambda v: L.psum_scatter(v, "i", scatter_dimension=1, tiled=True),
    "all_to_all_tiled": lambda v: L.all_to_all(v, "i", 0, 1, tiled=True),
    "all_to_all": lambda v: L.all_to_all(v, "i", 0, 1),
    "ppermute": lambda v: L.ppermute(v, "i", [(0, 1), (1, 2), (2, 0)]),
}


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_named_collectives_match_their_definitions_in_shard_map_and_under_vmap(name):
    n = 4
    blocks = [R.standard_normal((4, 8)).astype(np.float32) for _ in range(n)]
    want = _per_device_reference(name, blocks)
    f = COLLECTIVES[name]
    got = nb.vmap(f, axis_name="i")(np.stack(blocks))
    np.testing.assert_allclose(got.numpy(), np.stack(want), rtol=1e-5, atol=1e-6)
    mesh = nb.DeviceMesh("lax_named", (n,), ("i",))
    body = nb.shard_map(lambda v: f(v)[None], mesh, (nb.P("i"),), nb.P("i"), check_rep=False)
    got = body(np.concatenate(blocks)).numpy()
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-5, atol=1e-6)


def test_named_collectives_differentiate_and_refuse_sizes_that_do_not_divide():
    x = R.standard_normal((4, 3)).astype(np.float32)

    def loss(x):
        gathered = nb.vmap(lambda v: L.all_gather(v, "i") * v[None], axis_name="i")(x)
        return (gathered**2).sum()

    # sum_i sum_j (x_j x_i)^2 = (sum_j x_j^2) (sum_i x_i^2) per column: d/dx = 4 x S
    s = (x**2).sum(0)
    np.testing.assert_allclose(nb.grad(loss)(x).numpy(), 4 * x * s, rtol=1e-5)
    assert nb.vmap(lambda v: v * L.axis_size("i"), axis_name="i")(x).numpy()[0, 0] == 4 * x[0, 0]
    with pytest.raises(nb.OpError, match=r"psum_scatter: dim 0 of shape \(3,\) must be equal to 4"):
        nb.vmap(lambda v: L.psum_scatter(v, "i"), axis_name="i")(x)
    with pytest.raises(
        nb.OpError, match=r"all_to_all: split dim 0 of shape \(3,\) must be divisible"
    ):
        nb.vmap(lambda v: L.all_to_all(v, "i", 0, 0, tiled=True), axis_name="i")(x)
    with pytest.raises(NameError, match="lax.axis_size: no running vmap or shard_map body"):
        L.axis_size("nope")


def test_gradients_inside_a_named_vmap_transpose_each_collective():
    # vmap(grad(f)): each example is a device running its own backward pass, as in JAX;
    # a collective's transpose is a collective (psum's psum, all_gather's psum_scatter,
    # ppermute's the inverse permutation), so examples' cotangents reach each other
    n = 4
    x = R.standard_normal((n, 3)).astype(np.float32)
    w = R.standard_normal(3).astype(np.float32)
    S, sines = x.sum(0), np.sin(x).sum(0)

    def per_example(f, *args, in_axes=0):
        return nb.vmap(f, in_axes=in_axes, axis_name="i")(*args).numpy()

    cases = [  # (f, what JAX gives for each example)
        (lambda v: nb.sum(L.psum(v, "i")), np.full((n, 3), n)),
        (lambda v: nb.sum(L.pmean(v * v, "i")), 2 * x),
        (lambda v: nb.sum(nb.sin(v) * L.psum(v, "i")), np.cos(x) * S + sines),
        (lambda v: nb.sum(L.all_gather(v, "i") ** 2), 2 * n * x),
        (lambda v: nb.sum(L.all_gather(nb.sin(v), "i", tiled=True)) * nb.sum(v),
         sines.sum() + np.cos(x) * S.sum()),
        (lambda v: nb.sum(L.ppermute(v, "i", [(k, (k + 1) % n) for k in range(n)]) * v),
         np.roll(x, 1, 0) + np.roll(x, -1, 0)),
    ]  # fmt: skip
    for f, want in cases:
        np.testing.assert_allclose(per_example(nb.grad(f), x), want, rtol=1e-5, atol=1e-6)
    # a scattered sum: example e keeps row e of the total; every example's gradient is the
    # total gathered back
    xs = R.standard_normal((n, n, 2)).astype(np.float32)
    got = per_example(nb.grad(lambda v: nb.sum(L.psum_scatter(v, "i") ** 2)), xs)
    np.testing.assert_allclose(got, np.broadcast_to(2 * xs.sum(0), xs.shape), rtol=1e-5)
    # the gradient of a value the same for every example is the sum of theirs
    got = per_example(
        nb.grad(lambda v, u: nb.sum(nb.sin(v) * L.psum(u, "i")), 1), x, w, in_axes=(0, None)
    )
    np.testing.assert_allclose(got, np.broadcast_to(sines, (n, 3)), rtol=1e-5)
    # as in JAX, jacrev transposes the sum (n copies of each example's basis cotangent)
    # while jacfwd moves every example's input at once (JAX's values)
    g = lambda v: L.psum(v * v, "i")  # noqa: E731
    rev, fwd = per_example(nb.jacrev(g), x), per_example(nb.jacfwd(g), x)
    np.testing.assert_allclose(rev[1], np.diag(2 * n * x[1]), rtol=1e-5)
    np.testing.assert_allclose(fwd[1], np.diag(2 * S), rtol=1e-5)
    # outside the vmap, grad sums the examples' losses
    outer = nb.grad(lambda v: nb.sum(nb.vmap(lambda e: nb.sum(L.psum(e, "i")), axis_name="i")(v)))
    np.testing.assert_allclose(outer(x).numpy(), np.full((n, 3), n))


def test_reductions_reduce_and_the_bit_counts():
    xi = R.integers(-50, 50, (3, 5)).astype(np.int32)
    assert L.reduce_sum(A, (0, 2)).shape == (4,)
    np.testing.assert_allclose(L.reduce_max(A, (1,)).numpy(), A.max(1))
    np.testing.assert_array_equal(L.reduce_xor(xi, (1,)).numpy(), np.bitwise_xor.reduce(xi, 1))
    np.testing.assert_array_equal(L.reduce_and(xi > 0, (0,)).numpy(), (xi > 0).all(0))
    np.testing.assert_array_equal(L.reduce_or(xi, (0, 1)).numpy(), np.bitwise_or.reduce(xi.ravel()))
    with pytest.raises(nb.OpError, match="lax.reduce_or: needs bools or integers, got float32"):
        L.reduce_or(A, (0,))
    # lax.reduce with a pytree computation: the first index of each row's maximum
    idx = np.broadcast_to(np.arange(5, dtype=np.int32), (3, 5))
    v = R.standard_normal((3, 5)).astype(np.float32)

    def first_max(a, b):
        (va, ia), (vb, ib) = a, b
        take = (va > vb) | ((va == vb) & (ia < ib))
        return nb.where(take, va, vb), nb.where(take, ia, ib)

    best, at = L.reduce((v, idx), (-np.inf, 0), first_max, (1,))
    np.testing.assert_array_equal(at.numpy(), v.argmax(1))
    np.testing.assert_allclose(best.numpy(), v.max(1))
    prod_grad = nb.grad(lambda t: L.reduce(t, 1.0, L.mul, (1,)).sum())(v)
    np.testing.assert_allclose(
        prod_grad.numpy(), v.prod(1, keepdims=True) / v, rtol=1e-4, atol=1e-5
    )
    assert L.reduce(np.zeros((2, 0), np.float32), 0.0, L.add, (1,)).tolist() == [0.0, 0.0]
    ints = np.array([0, 1, -1, 255, np.iinfo(np.int32).min, 12345], np.int32)
    popc = [bin(int(i) & 0xFFFFFFFF).count("1") for i in ints]
    assert L.population_count(ints).tolist() == popc
    assert L.clz(ints).tolist() == [32 - (int(i) & 0xFFFFFFFF).bit_length() for i in ints]


def test_more_structural_names():
    assert L.broadcast(A[0], (2,)).shape == (2, 4, 5)
    assert L.broadcast_to_rank(A[0], 4).shape == (1, 1, 4, 5)
    assert L.collapse(A, 1).shape == (3, 20) and L.collapse(A, 0, 2).shape == (12, 5)
    parts = L.split(A, (1, 3), axis=1)
    assert [p.shape for p in parts] == [(3, 1, 5), (3, 3, 5)]
    np.testing.assert_array_equal(parts[1].numpy(), A[:, 1:])
    with pytest.raises(nb.OpError, match=r"lax.split: sizes \[1, 2\] do not add up to dim 1"):
        L.split(A, (1, 2), axis=1)


def test_approx_k_padtype_to_pads_and_pshuffle_as_jax():
    """``approx_max_k``/``approx_min_k`` (exact, as JAX's on CPU) along any dim, the pads of
    the string paddings, and ``pshuffle`` as a permutation under a named ``vmap``."""
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    for ax in (-1, 0):
        values, indices = nb.lax.approx_max_k(x, 2, reduction_dimension=ax)
        want = np.flip(np.sort(x, axis=ax), ax).take(range(2), axis=ax)
        np.testing.assert_array_equal(values.numpy(), want)
        assert indices.dtype == nb.int32
        np.testing.assert_array_equal(np.take_along_axis(x, indices.numpy(), ax), want)
        low, _ = nb.lax.approx_min_k(x, 2, reduction_dimension=ax)
        np.testing.assert_array_equal(low.numpy(), np.sort(x, axis=ax).take(range(2), axis=ax))
    assert nb.lax.padtype_to_pads((7, 8), (3, 2), (2, 3), "SAME") == [(1, 1), (0, 0)]
    assert nb.lax.padtype_to_pads((6,), (4,), (1,), "SAME_LOWER") == [(2, 1)]
    assert nb.lax.padtype_to_pads((6,), (4,), (1,), "VALID") == [(0, 0)]
    xs = np.arange(4.0, dtype=np.float32)
    got = nb.vmap(lambda v: nb.lax.pshuffle(v, "i", [2, 0, 3, 1]), axis_name="i")(xs)
    assert got.tolist() == [2.0, 0.0, 3.0, 1.0]
    with pytest.raises(nb.OpError, match=r"pshuffle: perm must be a permutation"):
        nb.vmap(lambda v: nb.lax.pshuffle(v, "i", [0, 0, 1, 2]), axis_name="i")(xs)
