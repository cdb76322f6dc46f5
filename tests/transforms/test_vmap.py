"""vmap with level-tagged prefix batch dims (JAX semantics are the reference).

Expected values are computed with NumPy (loops, einsum, broadcasting); JAX is never imported.
"""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb

RTOL = 1e-5
ATOL = 1e-5


def f32(a):
    return np.asarray(a, dtype=np.float32)


def close(got, want, rtol=RTOL, atol=ATOL):
    got = got.numpy() if isinstance(got, nb.Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ----------------------------------------------------------------------------- in_axes
def test_in_axes_int_default(rng):
    a = f32(rng.normal(size=(4, 3)))
    close(nb.vmap(lambda x: nb.sin(x).sum())(nb.constant(a)), np.sin(a).sum(1))


def test_in_axes_positive_nonzero(rng):
    a = f32(rng.normal(size=(2, 5, 3)))
    out = nb.vmap(lambda x: x.sum(axis=0), in_axes=1)(nb.constant(a))
    # per element i: a[:, i, :].sum(0) -> shape (3,)
    close(out, np.stack([a[:, i, :].sum(0) for i in range(5)]))


def test_in_axes_negative(rng):
    a = f32(rng.normal(size=(2, 3, 4)))
    out = nb.vmap(lambda x: x @ nb.ones((3,)), in_axes=-1)(nb.constant(a))
    close(out, np.stack([a[:, :, i] @ np.ones(3) for i in range(4)]))
    out2 = nb.vmap(lambda x: x * 2.0, in_axes=-3)(nb.constant(a))
    close(out2, a * 2)


def test_in_axes_none_and_tuple(rng):
    xs = f32(rng.normal(size=(5, 3)))
    w = f32(rng.normal(size=(3,)))
    out = nb.vmap(lambda x, w: (x * w).sum(), in_axes=(0, None))(nb.constant(xs), nb.constant(w))
    close(out, xs @ w)
    # list in_axes behaves like a tuple
    out = nb.vmap(lambda x, w: (x * w).sum(), in_axes=[0, None])(nb.constant(xs), nb.constant(w))
    close(out, xs @ w)


def test_in_axes_tuple_mixed_axes(rng):
    a = f32(rng.normal(size=(4, 3)))
    b = f32(rng.normal(size=(3, 4)))
    out = nb.vmap(lambda x, y: x * y, in_axes=(0, 1))(nb.constant(a), nb.constant(b))
    close(out, a * b.T)


def test_in_axes_pytree_prefix_dict(rng):
    p = {"w": f32(rng.normal(size=(3,))), "b": f32(rng.normal(size=(6,)))}
    xs = f32(rng.normal(size=(6, 3)))

    def f(params, x):
        return (params["w"] * x).sum() + params["b"]

    params = {k: nb.constant(v) for k, v in p.items()}
    out = nb.vmap(f, in_axes=({"w": None, "b": 0}, 0))(params, nb.constant(xs))
    close(out, xs @ p["w"] + p["b"])


def test_in_axes_pytree_prefix_list_and_nested(rng):
    a = f32(rng.normal(size=(5, 2)))
    b = f32(rng.normal(size=(2,)))
    c = f32(rng.normal(size=(2, 5)))

    def f(lst):
        x, y, z = lst
        return x * y + z

    out = nb.vmap(f, in_axes=([0, None, 1],))([nb.constant(a), nb.constant(b), nb.constant(c)])
    close(out, a * b + c.T)
    # a single int in_axes applies to every leaf of a pytree argument
    d = {"u": nb.constant(a), "v": nb.constant(c.T)}
    out = nb.vmap(lambda d: d["u"] - d["v"])(d)
    close(out, a - c.T)


def test_kwargs_are_mapped_over_axis_0_as_in_jax(rng):
    xs = f32(rng.normal(size=(4, 3)))
    scales = f32(rng.normal(size=(4, 3)))

    def f(x, *, scale, shift=0.0, tag=None):
        assert tag == "static"
        return x * scale + shift

    # tensor and array leaves of keyword arguments are mapped over axis 0 (JAX's rule),
    # even with in_axes given for the positional ones; Python scalars and strings pass as is
    out = nb.vmap(f)(nb.constant(xs), scale=nb.constant(scales), shift=1.0, tag="static")
    close(out, xs * scales + 1.0)
    out = nb.vmap(f, in_axes=(None,))(nb.constant(xs[0]), scale={"a": scales}["a"], tag="static")
    close(out, xs[0] * scales)
    # a pytree keyword argument: every array leaf is mapped
    g = nb.vmap(lambda x, *, p: x * p["w"] + p["b"])
    close(g(nb.constant(xs), p={"w": nb.constant(scales), "b": scales}), xs * scales + scales)
    # all positional in_axes None: the keyword arguments alone set the size
    h = nb.vmap(lambda c, *, x: c + x, in_axes=(None,))
    close(h(nb.constant(2.0), x=nb.constant(xs)), xs + 2.0)
    with pytest.raises(ValueError, match="keyword argument 'scale'.*size 5"):
        nb.vmap(f)(nb.constant(xs), scale=nb.constant(np.ones((5, 3), np.float32)), tag="static")
    with pytest.raises(ValueError, match="keyword argument 'scale'.*0-d"):
        nb.vmap(f)(nb.constant(xs), scale=nb.constant(2.0), tag="static")


def test_decorator_forms(rng):
    xs = f32(rng.normal(size=(4, 3)))
    w = f32(rng.normal(size=(3,)))

    @nb.vmap
    def f(x):
        return (x * x).sum()

    @nb.vmap(in_axes=(None, 0))
    def g(w, x):
        return (w * x).sum()

    close(f(nb.constant(xs)), (xs * xs).sum(1))
    close(g(nb.constant(w), nb.constant(xs)), xs @ w)
    assert f.__name__ == "f" and g.__name__ == "g"


def test_numpy_inputs_are_accepted(rng):
    xs = f32(rng.normal(size=(4, 3)))
    close(nb.vmap(lambda x: x.sum())(xs), xs.sum(1))


# ----------------------------------------------------------------------------- out_axes
def test_out_axes_int_and_negative(rng):
    a = f32(rng.normal(size=(4, 2, 3)))
    out = nb.vmap(lambda x: x + 1.0, out_axes=1)(nb.constant(a))
    close(out, np.moveaxis(a + 1, 0, 1))
    out = nb.vmap(lambda x: x + 1.0, out_axes=-1)(nb.constant(a))
    close(out, np.moveaxis(a + 1, 0, -1))
    out = nb.vmap(lambda x: x + 1.0, out_axes=2)(nb.constant(a))
    close(out, np.moveaxis(a + 1, 0, 2))


def test_out_axes_none_for_unbatched_output(rng):
    xs = f32(rng.normal(size=(4, 3)))
    c = f32(rng.normal(size=(2,)))
    out = nb.vmap(lambda x: (x * 2.0, nb.constant(c)), out_axes=(0, None))(nb.constant(xs))
    close(out[0], xs * 2)
    close(out[1], c)  # not broadcast: shape (2,)


def test_out_axes_none_for_batched_output_errors(rng):
    xs = nb.constant(f32(rng.normal(size=(4, 3))))
    with pytest.raises(ValueError, match="out_axes"):
        nb.vmap(lambda x: x * 2.0, out_axes=None)(xs)


def test_out_axes_pytree(rng):
    a = f32(rng.normal(size=(4, 3)))

    def f(x):
        return {"s": x.sum(), "x": x * 3.0}

    out = nb.vmap(f, out_axes={"s": 0, "x": 1})(nb.constant(a))
    close(out["s"], a.sum(1))
    close(out["x"], (a * 3).T)
    out = nb.vmap(lambda x: (x, [x.sum(), x * 2]), out_axes=(1, [0, -1]))(nb.constant(a))
    close(out[0], a.T)
    close(out[1][0], a.sum(1))
    close(out[1][1], (2 * a).T)


def test_in_axes_one_out_axes_one(rng):
    a = f32(rng.normal(size=(3, 5, 2)))
    out = nb.vmap(lambda x: nb.exp(x) * 2.0, in_axes=1, out_axes=1)(nb.constant(a))
    close(out, np.exp(a) * 2, rtol=1e-5)
    # a reduction inside: per-slice sums over the logical axis 0
    out = nb.vmap(lambda x: x.sum(axis=0, keepdims=True), in_axes=1, out_axes=1)(nb.constant(a))
    close(out, a.sum(0, keepdims=True))


# ----------------------------------------------------------------------------- errors
def test_error_inconsistent_sizes_names_arguments():
    with pytest.raises(ValueError) as ei:
        nb.vmap(lambda x, y: x + y)(nb.ones((3, 2)), nb.ones((4, 2)))
    msg = str(ei.value)
    assert "argument 0" in msg and "argument 1" in msg
    assert "3" in msg and "4" in msg


def test_error_inconsistent_sizes_in_pytree():
    with pytest.raises(ValueError, match="argument 0"):
        nb.vmap(lambda d: d["a"] + d["b"])({"a": nb.ones((3,)), "b": nb.ones((5,))})


def test_error_rank0_input_with_int_axis():
    with pytest.raises(ValueError, match="argument 0"):
        nb.vmap(lambda x: x * 2.0)(nb.constant(1.0))


def test_error_axis_out_of_range():
    with pytest.raises(ValueError, match="out of range"):
        nb.vmap(lambda x: x, in_axes=2)(nb.ones((3, 2)))
    with pytest.raises(ValueError, match="out of range"):
        nb.vmap(lambda x: x, in_axes=-3)(nb.ones((3, 2)))
    with pytest.raises(ValueError, match="out_axes"):
        nb.vmap(lambda x: x, out_axes=3)(nb.ones((3, 2)))


def test_error_all_none_without_axis_size():
    with pytest.raises(ValueError, match="axis_size"):
        nb.vmap(lambda x: x * 2.0, in_axes=None)(nb.ones((3,)))


def test_error_in_axes_wrong_length():
    with pytest.raises(ValueError):
        nb.vmap(lambda x, y: x + y, in_axes=(0,))(nb.ones((3,)), nb.ones((3,)))


def test_axis_size_with_all_none():
    out = nb.vmap(lambda x: x * 2.0, in_axes=None, axis_size=4)(nb.constant(f32([1.0, 2.0])))
    close(out, np.tile(f32([2.0, 4.0]), (4, 1)))
    out = nb.vmap(lambda: nb.ones((2,)), axis_size=3)()
    close(out, np.ones((3, 2)))
    out = nb.vmap(lambda x: x, in_axes=None, axis_size=np.int64(2))(nb.ones((3,)))
    assert out.shape == (2, 3)


def test_axis_size_is_checked_at_the_call():
    """A negative size failed later inside the backend, a float was truncated."""
    x = nb.ones((3,))
    with pytest.raises(ValueError, match=r"vmap axis_size must be >= 0, got -1"):
        nb.vmap(lambda v: v, in_axes=None, axis_size=-1)
    for bad in (2.5, "2", True):
        with pytest.raises(TypeError, match="vmap axis_size must be an int"):
            nb.vmap(lambda v: v, in_axes=None, axis_size=bad)(x)


# ----------------------------------------------------------------------------- broadcasting
def test_unbatched_output_broadcasts(rng):
    """An output that does not depend on the mapped input still has the batch dim."""
    xs = nb.constant(f32(rng.normal(size=(5, 3))))
    w = f32(rng.normal(size=(2,)))
    out = nb.vmap(lambda x: nb.constant(w) * 2.0)(xs)
    close(out, np.tile(w * 2, (5, 1)))
    out = nb.vmap(lambda x: (x.sum(), nb.ones(()), 3.0))(xs)
    close(out[1], np.ones(5))
    close(out[2], np.full(5, 3.0))
    # and with out_axes=1
    out = nb.vmap(lambda x: nb.constant(w), out_axes=1)(xs)
    close(out, np.tile(w[:, None], (1, 5)))


def test_unbatched_output_broadcasts_in_nested_vmap():
    xs = nb.ones((2,))
    ys = nb.ones((3,))
    out = nb.vmap(lambda x: nb.vmap(lambda y: nb.constant(7.0))(ys))(xs)
    close(out, np.full((2, 3), 7.0))
    # inner result depends only on the outer x
    out = nb.vmap(lambda x: nb.vmap(lambda y: x * 2.0)(ys))(nb.constant(f32([1.0, 2.0])))
    close(out, f32([[2, 2, 2], [4, 4, 4]]))


# ----------------------------------------------------------------------------- regressions
def test_inner_vmap_over_unrelated_tensor_with_outer_closure(rng):
    """Outer vmap over x; inner vmap over an unrelated y closing over the outer x."""
    x = f32(rng.normal(size=(4, 3)))
    y = f32(rng.normal(size=(5, 3)))
    X, Y = nb.constant(x), nb.constant(y)

    def f(xi, yj):
        return (nb.sin(xi) * yj).sum() + xi[0]

    out = nb.vmap(lambda xi: nb.vmap(lambda yj: f(xi, yj))(Y))(X)
    want = np.array([[(np.sin(x[i]) * y[j]).sum() + x[i, 0] for j in range(5)] for i in range(4)])
    close(out, want)


def test_equal_sized_levels_do_not_alias(rng):
    """Two nested vmaps of the same size over different tensors: outer product, not diagonal."""
    a = f32(rng.normal(size=(3,)))
    b = f32(rng.normal(size=(3,)))
    out = nb.vmap(lambda x: nb.vmap(lambda y: x * y)(nb.constant(b)))(nb.constant(a))
    close(out, np.outer(a, b))
    # also when both come in as arguments with in_axes
    out = nb.vmap(lambda x, bb: nb.vmap(lambda y: x * y)(bb), in_axes=(0, None))(
        nb.constant(a), nb.constant(b)
    )
    close(out, np.outer(a, b))
    # and for matrices: out[i, j] = A[i] . B[j]
    A = f32(rng.normal(size=(3, 3)))
    B = f32(rng.normal(size=(3, 3)))
    out = nb.vmap(lambda r: nb.vmap(lambda c: (r * c).sum())(nb.constant(B)))(nb.constant(A))
    close(out, A @ B.T)


def test_nested_depth3_mixed_closures(rng):
    a = f32(rng.normal(size=(2, 4)))
    b = f32(rng.normal(size=(3, 4)))
    c = f32(rng.normal(size=(5, 4)))
    A, B, C = nb.constant(a), nb.constant(b), nb.constant(c)

    # level 3 closes over level 1 (x) and level 2 (y)
    def lvl1(x):
        def lvl2(y):
            return nb.vmap(lambda z: (x * y * z).sum() + x.sum())(C)

        return nb.vmap(lvl2)(B)

    out = nb.vmap(lvl1)(A)
    want = np.einsum("ik,jk,lk->ijl", a, b, c) + a.sum(1)[:, None, None]
    close(out, want, rtol=1e-4)

    # mixing in_axes=None at the middle level, and a closure only over level 1 at level 3
    w = f32(rng.normal(size=(4,)))

    def lvl1b(x):
        def lvl2(y, wv):
            return nb.vmap(lambda z: (x * z).sum() * (y * wv).sum())(C)

        return nb.vmap(lvl2, in_axes=(0, None))(B, nb.constant(w))

    out = nb.vmap(lvl1b)(A)
    want = np.einsum("ik,lk->il", a, c)[:, None, :] * (b @ w)[None, :, None]
    close(out, want, rtol=1e-4)

    # the innermost level ignores its own input and uses only outer ones
    out = nb.vmap(lambda x: nb.vmap(lambda y: nb.vmap(lambda z: x[0] + y[1])(C))(B))(A)
    want = np.broadcast_to(a[:, 0][:, None, None] + b[:, 1][None, :, None], (2, 3, 5))
    close(out, want)


def test_nested_with_different_in_axes(rng):
    m = f32(rng.normal(size=(3, 4)))
    # outer over columns, inner over rows: out[j, i] = m[i, j] * 2
    out = nb.vmap(lambda col: nb.vmap(lambda e: e * 2.0)(col), in_axes=1)(nb.constant(m))
    close(out, 2 * m.T)
    # inner out_axes=0 twice gives transposed layout; out_axes=1 at the outer restores it
    out = nb.vmap(lambda col: nb.vmap(lambda e: e * 2.0)(col), in_axes=1, out_axes=1)(
        nb.constant(m)
    )
    close(out, 2 * m)


# ----------------------------------------------------------------------------- matmul
def test_vmap_matmul_batched_and_unbatched(rng):
    xs = f32(rng.normal(size=(6, 4, 3)))
    w = f32(rng.normal(size=(3, 2)))
    ws = f32(rng.normal(size=(6, 3, 2)))
    v = f32(rng.normal(size=(4, 3)))
    X, W, WS, V = map(nb.constant, (xs, w, ws, v))
    close(nb.vmap(lambda x: x @ W)(X), xs @ w, rtol=1e-4)
    close(nb.vmap(lambda x, w: x @ w, in_axes=(0, None))(X, W), xs @ w, rtol=1e-4)
    close(nb.vmap(lambda x, w: nb.matmul(x, w))(X, WS), xs @ ws, rtol=1e-4)
    close(nb.vmap(lambda w: V @ w)(WS), v @ ws, rtol=1e-4)
    # matrix-vector and vector-matrix under vmap
    vecs = f32(rng.normal(size=(6, 3)))
    close(nb.vmap(lambda u: V @ u)(nb.constant(vecs)), vecs @ v.T, rtol=1e-4)
    close(nb.vmap(lambda u: u @ W)(nb.constant(vecs)), vecs @ w, rtol=1e-4)
    # nested: outer over x rows, inner over w columns
    out = nb.vmap(lambda x: nb.vmap(lambda col: x @ col, in_axes=1)(W))(nb.constant(v))
    close(out, v @ w, rtol=1e-4)


def test_vmap_mlp_matches_batched(rng):
    w1 = f32(rng.normal(size=(8, 16)) * 0.3)
    b1 = f32(rng.normal(size=(16,)))
    w2 = f32(rng.normal(size=(16, 4)) * 0.3)
    xs = f32(rng.normal(size=(10, 8)))

    def mlp(x, w1, b1, w2):
        return nb.relu(x @ w1 + b1) @ w2

    out = nb.vmap(mlp, in_axes=(0, None, None, None))(*map(nb.constant, (xs, w1, b1, w2)))
    close(out, np.maximum(xs @ w1 + b1, 0) @ w2, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- random
def test_global_random_draws_differ_per_element():
    out = nb.vmap(lambda x: x + nb.uniform(()))(nb.zeros((5,))).numpy()
    assert out.shape == (5,)
    assert len(np.unique(out)) == 5
    assert np.all((out >= 0) & (out < 1))


def test_global_random_shaped_draws_under_nested_vmap():
    out = nb.vmap(lambda x: nb.vmap(lambda y: y + nb.normal((2,)))(x))(nb.zeros((3, 4))).numpy()
    assert out.shape == (3, 4, 2)
    assert len(np.unique(out.reshape(-1))) == 24


def test_batched_key_gives_independent_draws():
    keys = nb.random.split(nb.random.key(0), 5)
    out = nb.vmap(lambda k: nb.random.uniform(k, (3,)))(keys).numpy()
    assert out.shape == (5, 3)
    assert len(np.unique(out.reshape(-1))) == 15
    # reproducible, and equal to drawing with each key separately
    again = nb.vmap(lambda k: nb.random.uniform(k, (3,)))(keys).numpy()
    np.testing.assert_array_equal(out, again)
    for i in range(5):
        np.testing.assert_allclose(nb.random.uniform(keys[i], (3,)).numpy(), out[i], rtol=1e-6)


def test_spmd_axis_name_is_checked_and_values_unchanged(rng):
    xs = f32(rng.normal(size=(4, 3)))
    mesh = nb.DeviceMesh("m", (2,), ("dp",))
    out = nb.vmap(lambda x: nb.sin(x) * 2.0, spmd_axis_name="dp", mesh=mesh)(nb.constant(xs))
    close(out, np.sin(xs) * 2)
    assert out.sharding.to_partition_spec() == nb.P("dp")
    with pytest.raises(TypeError, match="spmd_axis_name"):
        nb.vmap(lambda x: x, spmd_axis_name=3)(nb.constant(xs))
    with pytest.raises(nb.ShardingError, match="needs a mesh"):  # never silently ignored
        nb.vmap(lambda x: x, spmd_axis_name="dp")(nb.constant(xs))


# ----------------------------------------------------------------------------- with grad
def _loss(w, x, y):
    return ((nb.tanh(x @ w) - y) ** 2).sum()


def _loss_grad_np(w, x, y):
    z = np.tanh(x @ w)
    return np.outer(x, 2 * (z - y) * (1 - z * z))


def test_vmap_of_grad_per_example(rng):
    w = f32(rng.normal(size=(3, 2)))
    xs = f32(rng.normal(size=(5, 3)))
    ys = f32(rng.normal(size=(5, 2)))
    g = nb.vmap(nb.grad(_loss), in_axes=(None, 0, 0))(
        nb.constant(w), nb.constant(xs), nb.constant(ys)
    )
    want = np.stack([_loss_grad_np(w, xs[i], ys[i]) for i in range(5)])
    close(g, want, rtol=1e-4, atol=1e-5)


def test_grad_of_sum_of_vmap(rng):
    w = f32(rng.normal(size=(3, 2)))
    xs = f32(rng.normal(size=(5, 3)))
    ys = f32(rng.normal(size=(5, 2)))
    X, Y = nb.constant(xs), nb.constant(ys)
    g = nb.grad(lambda w: nb.vmap(_loss, in_axes=(None, 0, 0))(w, X, Y).sum())(nb.constant(w))
    want = sum(_loss_grad_np(w, xs[i], ys[i]) for i in range(5))
    close(g, want, rtol=1e-4, atol=1e-5)
    # the form from the issue: in_axes=(None, 0)
    g = nb.grad(lambda w: nb.vmap(lambda w, x: (w * x).sum(), in_axes=(None, 0))(w, X).sum())(
        nb.constant(xs[0])
    )
    close(g, xs.sum(0))


def test_grad_wrt_unbatched_closure_inside_vmap_is_per_example(rng):
    xs = f32(rng.normal(size=(4, 3)))
    w0 = nb.constant(f32(rng.normal(size=(3,))))
    g = nb.vmap(lambda x: nb.grad(lambda w: (w * x).sum())(w0))(nb.constant(xs))
    close(g, xs)  # JAX: shape (B, 3), row i = x_i (not summed)
    # nonlinear: d/dw sum(sin(w * x)) = x * cos(w * x)
    g = nb.vmap(lambda x: nb.grad(lambda w: nb.sin(w * x).sum())(w0))(nb.constant(xs))
    close(g, xs * np.cos(w0.numpy() * xs), rtol=1e-5)


def test_jvp_inside_vmap_with_unbatched_primal(rng):
    xs = f32(rng.normal(size=(4, 3)))
    w0 = f32(rng.normal(size=(3,)))
    t = nb.vmap(lambda x: nb.jvp(lambda w: (w * x).sum(), (nb.constant(w0),), (nb.ones((3,)),))[1])(
        nb.constant(xs)
    )
    close(t, xs.sum(1))


def test_contractions_with_an_unbatched_weight_never_copy_it_per_example():
    # einsum, matmul on either side and conv2d under vmap: the weight stays unbatched
    from nabla.runtime.graph import GRAPH

    rng = np.random.default_rng(0)
    w = nb.constant(rng.standard_normal((32, 32)).astype(np.float32))
    k = nb.constant(rng.standard_normal((3, 3, 4, 8)).astype(np.float32))
    vs = nb.constant(rng.standard_normal((16, 32)).astype(np.float32))
    xs = nb.constant(rng.standard_normal((16, 1, 6, 6, 4)).astype(np.float32))
    ids = nb.constant(rng.integers(0, 32, (16, 5)))
    cases = {
        "einsum": (lambda v: nb.einsum("ij,j->i", w, v), vs, lambda a: a @ w.numpy().T),
        "w @ v": (lambda v: w @ v, vs, lambda a: a @ w.numpy().T),
        "v @ w": (lambda v: v @ w, vs, lambda a: a @ w.numpy()),
        "conv2d": (lambda x: nb.conv2d(x, k), xs, None),
        "table[idx]": (lambda i: w[i], ids, lambda a: w.numpy()[a]),
    }
    for name, (f, batch, ref) in cases.items():
        with nb.backend("numpy"):
            got = nb.vmap(f)(batch).numpy()
            program = GRAPH.programs()[-1]
        if ref is not None:
            np.testing.assert_allclose(got, ref(batch.numpy()), rtol=1e-4, atol=1e-4)
        weight = w if name != "conv2d" else k
        copies = [
            ins.op
            for ins in program.instructions
            if ins.op == "broadcast_in_dim"
            and int(np.prod(ins.out_specs[0][1])) >= 16 * weight.size
        ]
        assert not copies, f"{name}: the weight was broadcast over the batch"


def test_per_example_gradients_of_a_table_lookup_stay_per_example():
    # the lookup's fast path (indices batched, table not) must not apply to a table being
    # differentiated: each example keeps its own gradient
    rng = np.random.default_rng(1)
    table = nb.constant(rng.standard_normal((20, 4)).astype(np.float32))
    ids = nb.constant(rng.integers(0, 20, (3, 5)))
    g = nb.grad(lambda t, i: (t[i] ** 2).sum())
    batched = nb.vmap(g, in_axes=(None, 0))(table, ids).numpy()
    loop = np.stack([g(table, ids[k]).numpy() for k in range(3)])
    np.testing.assert_allclose(batched, loop, rtol=1e-6)


def test_grad_of_vmapped_lookups_never_copies_the_table(monkeypatch):
    """grad of a function that vmaps table lookups: the table meets the batch as index dims
    (its cotangent is summed over the examples, as the finished vmap needs); per-example
    gradients (grad inside the vmap) stay per example."""
    from nabla.ops import batching

    rng = np.random.default_rng(0)
    table = rng.standard_normal((10, 4)).astype(np.float32)
    ids = rng.integers(0, 10, (6, 3)).astype(np.int32)
    broadcast = []
    real = batching.broadcast_levels

    def spy(x, levels):
        if not x._impl.levels:
            broadcast.append(x.shape)
        return real(x, levels)

    monkeypatch.setattr(batching, "broadcast_levels", spy)

    def loss(t, i):
        return (nb.tanh(t[i]) ** 2).sum()

    g = nb.grad(lambda t: nb.vmap(lambda i: loss(t, i))(nb.constant(ids)).sum())(nb.constant(table))
    assert (10, 4) not in broadcast, broadcast
    th = np.tanh(table[ids])
    want = np.zeros_like(table)
    np.add.at(want, ids, 2 * th * (1 - th**2))
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)
    per_example = nb.vmap(nb.grad(loss), in_axes=(None, 0))(nb.constant(table), nb.constant(ids))
    for k in range(len(ids)):
        want_k = np.zeros_like(table)
        np.add.at(want_k, ids[k], (2 * th * (1 - th**2))[k])
        np.testing.assert_allclose(per_example.numpy()[k], want_k, rtol=1e-5, atol=1e-6)


def test_per_example_gradients_of_an_unbatched_operand_are_each_examples_own():
    """``vmap(grad)`` with respect to an operand the vmap does not batch: a 3-D matmul
    operand, a grouped convolution's weight and a sharded weight each give every example
    its own gradient (each had come back as the sum over the batch: folding the batch into
    GEMM rows is right only for a gradient taken outside the vmap, which still sums)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 5)).astype(np.float32)
    x = rng.standard_normal((3, 1, 5, 5, 6)).astype(np.float32)
    w = rng.standard_normal((2, 2, 3, 6)).astype(np.float32)

    def mm(a, b):
        return nb.sum(nb.sin(a @ b))

    def conv(x, w):
        return nb.sum(nb.tanh(nb.conv2d(x, w, groups=2)))

    mesh = nb.DeviceMesh("pe", (2,), ("x",))
    s = rng.standard_normal((4, 4, 6)).astype(np.float32)
    v = rng.standard_normal((6, 4)).astype(np.float32)
    sharded = (nb.shard(s, mesh, nb.P(None, "x")), nb.shard(v, mesh, nb.P(None, "x")))
    for f, (p, q) in ((mm, (a, b)), (conv, (x, w)), (mm, sharded)):
        p, q = (
            nb.constant(p) if isinstance(p, np.ndarray) else p,
            nb.constant(q) if isinstance(q, np.ndarray) else q,
        )
        per = nb.vmap(nb.grad(f, argnums=1), in_axes=(0, None))(p, q).numpy()
        want = np.stack([nb.grad(f, argnums=1)(p[i], q).numpy() for i in range(p.shape[0])])
        np.testing.assert_allclose(per, want, rtol=1e-4, atol=1e-5)
        summed = nb.grad(lambda q: nb.sum(nb.vmap(f, in_axes=(0, None))(p, q)))(q).numpy()
        np.testing.assert_allclose(summed, want.sum(0), rtol=1e-4, atol=1e-4)


def test_vmap_refuses_what_would_escape_it_and_names_what_did():
    """Random draws over a batch of no keys crashed (np.stack of nothing); a collective
    naming an axis that nothing defines (JAX's pmean(x, 'batch') ported from
    vmap(axis_name=...)) returned its input silently; a captured tensor given a batched
    value in place kept it after the vmap (then an error that said 'inside the vmapped
    function'). A tensor the function makes and returns is its own."""
    keys = nb.random.split(nb.random.key(0), 0)
    assert nb.vmap(lambda k: nb.random.uniform(k, (2,)))(keys).numpy().shape == (0, 2)
    assert nb.vmap(lambda k: nb.random.split(k, 2))(keys).numpy().shape == (0, 2, 2)
    assert nb.vmap(lambda k: nb.random.fold_in(k, 3))(keys).numpy().shape == (0, 2)
    x = nb.constant(np.arange(8.0, dtype=np.float32).reshape(4, 2))
    with pytest.raises(nb.ShardingError, match=r"pmean: axes 'batch' name mesh axes, but the"):
        nb.vmap(lambda a: a - nb.pmean(a, axis_name="batch"))(x)
    with pytest.raises(nb.ShardingError, match=r"all_reduce: axes 'nope' name mesh axes"):
        nb.all_reduce(nb.ones(3), "sum", axes="nope")
    assert nb.all_reduce(nb.ones(3), "sum").tolist() == [1.0] * 3  # one device: its value
    buf = nb.zeros(4)

    def leak(a):
        buf[0] = a[1]
        return a * 2

    with pytest.raises(ValueError, match=r"vmap: a tensor from outside the vmapped function"):
        nb.vmap(leak)(x)
    assert buf.tolist() == [0.0] * 4  # as it was

    def own(a):
        out = nb.zeros(3)
        out[0] = a.sum()
        return out

    assert nb.vmap(own)(x).numpy()[:, 0].tolist() == [1.0, 5.0, 9.0, 13.0]

    def own_dropped(a):  # a buffer it makes and drops: its own under compile too
        c = nb.zeros(3)
        c[0] = a[1] * 2
        return (c * c).sum()

    for mapped in (nb.vmap(own_dropped), nb.compile(nb.vmap(own_dropped))):
        assert mapped(x).tolist() == [4.0, 36.0, 100.0, 196.0]
    with pytest.raises(ValueError, match=r"vmap: a tensor from outside the vmapped function"):
        nb.compile(nb.vmap(leak))(x)
    assert buf.tolist() == [0.0] * 4
    kept = []
    nb.vmap(lambda a: kept.append(a * 2) or a)(x)
    with pytest.raises(ValueError, match=r"batched by a vmap that has finished .* escaped it"):
        kept[0].numpy()


def test_a_vmapped_function_that_raises_leaves_captured_tensors_as_they_were():
    """A per-example value written into a captured tensor, then an error: the tensor kept
    a value of one lane per example, unreadable for the rest of the process."""
    buf = nb.zeros((3,))

    def f(r):
        buf[0] = r.sum()
        raise KeyError("a bug later in the function")

    with pytest.raises(KeyError):
        nb.vmap(f)(nb.ones((2, 3)))
    np.testing.assert_array_equal(buf.numpy(), [0.0, 0.0, 0.0])
    with pytest.raises(KeyError):
        nb.compile(nb.vmap(f))(nb.ones((2, 3)))
    np.testing.assert_array_equal((buf * 2.0).numpy(), [0.0, 0.0, 0.0])


def test_vectorize_and_apply_along_axis_are_numpy_s():
    """``nb.vectorize`` (scalars, or core dims by a gufunc signature; ``excluded``) and
    ``nb.apply_along_axis`` as nested ``vmap``s, against NumPy's own."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    got = nb.vectorize(lambda x, y: nb.where(x > y, x * 2 + y, x - y))(a, b)
    want = np.vectorize(lambda x, y: x * 2 + y if x > y else x - y)(a, b)
    np.testing.assert_allclose(got.numpy(), want)
    got = nb.vectorize(lambda x, y: nb.dot(x, y), signature="(n),(n)->()")(a, b)
    np.testing.assert_allclose(got.numpy(), a @ b)
    m = rng.standard_normal((2, 3, 3)) + 3 * np.eye(3)
    got = nb.vectorize(nb.linalg.inv, signature="(n,n)->(n,n)")(m)
    np.testing.assert_allclose(got.numpy(), np.linalg.inv(m), rtol=1e-10)
    got = nb.vectorize(lambda x, p: x**p, excluded={1})(a, 2)
    np.testing.assert_allclose(got.numpy(), a**2)
    with pytest.raises(ValueError, match="core dim 'n' is 4 in one input and 3"):
        nb.vectorize(lambda x, y: nb.dot(x, y), signature="(n),(n)->()")(a, b[:3])
    c = rng.standard_normal((2, 3, 4))
    cases = [
        (0, lambda v: nb.cumsum(v) / v.sum(), lambda v: np.cumsum(v) / v.sum()),
        (1, lambda v: nb.stack([v.min(), v.max()]), lambda v: np.array([v.min(), v.max()])),
        (2, lambda v: nb.outer(v, v), lambda v: np.outer(v, v)),
    ]
    for axis, ours, theirs in cases:
        np.testing.assert_allclose(
            nb.apply_along_axis(ours, axis, c).numpy(),
            np.apply_along_axis(theirs, axis, c),
            rtol=1e-12,
        )
