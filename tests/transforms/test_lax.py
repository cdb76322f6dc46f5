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
