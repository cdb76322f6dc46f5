"""``nb.pure_callback``: the user's NumPy function inside traced code, run on the host at
every call, batched by ``vmap_method``, refused where JAX refuses it."""

import numpy as np
import pytest

import nabla as nb

X = np.linspace(0.0, 2.0, 6, dtype=np.float32).reshape(2, 3)


def test_eager_and_compiled_calls_run_the_function_on_numpy_arrays_each_time():
    seen = []

    def host(x, y, scale=1.0):
        assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
        seen.append(x.copy())
        return {"sum": np.cumsum(x, 1) * scale, "prod": x @ y}

    spec = {
        "sum": nb.ShapeDtypeStruct((2, 3), nb.float32),
        "prod": nb.ShapeDtypeStruct((2, 2), nb.float32),
    }
    y = np.ones((3, 2), np.float32)
    out = nb.pure_callback(host, spec, X, y, scale=2.0)
    np.testing.assert_allclose(out["sum"].numpy(), 2 * np.cumsum(X, 1))
    np.testing.assert_allclose(out["prod"].numpy(), X @ y)

    f = nb.compile(lambda x, y: nb.pure_callback(host, spec, nb.sin(x), y)["sum"] + 1.0)
    for shift in (0.0, 1.0, 2.0):
        got = f(X + shift, y).numpy()
        np.testing.assert_allclose(got, np.cumsum(np.sin(X + shift), 1) + 1.0, rtol=1e-6)
        np.testing.assert_allclose(seen[-1], np.sin(X + shift), rtol=1e-6)  # this call's value
    assert f.stats.misses == 1 and f.stats.hits == 2


def test_vmap_methods_and_refusals():
    spec = nb.ShapeDtypeStruct((3,), nb.float32)
    shapes = []

    def cumsum(v):
        shapes.append(v.shape)
        return np.cumsum(v, -1)

    seq = nb.vmap(lambda r: nb.pure_callback(cumsum, spec, r, vmap_method="sequential"))(X)
    np.testing.assert_allclose(seq.numpy(), np.cumsum(X, 1))
    assert shapes == [(3,), (3,)]
    shapes.clear()
    whole = nb.vmap(lambda r: nb.pure_callback(cumsum, spec, r, vmap_method="broadcast_all"))(X)
    np.testing.assert_allclose(whole.numpy(), np.cumsum(X, 1))
    assert shapes == [(2, 3)]
    with pytest.raises(NotImplementedError, match="under vmap needs vmap_method"):
        nb.vmap(lambda r: nb.pure_callback(cumsum, spec, r))(X)
    with pytest.raises(NotImplementedError, match="has no derivative: wrap the call in custom_vjp"):
        nb.grad(lambda v: nb.sum(nb.pure_callback(np.sin, spec, v)))(X[0])
    with pytest.raises(ValueError, match=r"returned shape \(2,\) where result_shape_dtypes says"):
        nb.pure_callback(lambda v: v[:2], spec, X[0]).numpy()
    with pytest.raises(nb.OpError, match="vmap_method must be one of"):
        nb.pure_callback(np.sin, spec, X[0], vmap_method="parallel")


def test_a_callback_with_custom_vjp_differentiates():
    @nb.custom_vjp
    def host_sin(x):
        return nb.pure_callback(np.sin, nb.ShapeDtypeStruct(x.shape, x.dtype), x)

    def fwd(x):
        return host_sin(x), x

    def bwd(x, ct):
        return (ct * nb.pure_callback(np.cos, nb.ShapeDtypeStruct(x.shape, x.dtype), x),)

    host_sin.defvjp(fwd, bwd)
    g = nb.grad(lambda v: nb.sum(host_sin(v)))(X[0])
    np.testing.assert_allclose(g.numpy(), np.cos(X[0]), rtol=1e-6)


# (on MAX: its registry entry, in tests/backends/test_max_edges.py's graph)
