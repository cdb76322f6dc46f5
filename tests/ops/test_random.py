"""Random numbers: explicit keys reproduce exactly, the global generator differs per call,
distributions have the right statistics, and the documented signatures hold."""

import math

import numpy as np
import pytest

import nabla as nb


def test_keys_reproduce_and_split_gives_independent_keys():
    k = nb.random.key(42)
    a = nb.random.uniform(k, (100,)).numpy()
    b = nb.random.uniform(nb.random.key(42), (100,)).numpy()
    np.testing.assert_array_equal(a, b)
    k1, k2 = nb.random.split(k, 2)
    assert nb.random.split(k, 3).shape == (3, 2)
    c = nb.random.uniform(k1, (100,)).numpy()
    d = nb.random.uniform(k2, (100,)).numpy()
    assert not np.allclose(c, d) and not np.allclose(a, c)
    e = nb.random.uniform(nb.random.fold_in(k, 7), (100,)).numpy()
    assert not np.allclose(a, e)


def test_global_generator_differs_per_call_and_seed_reproduces():
    nb.random.seed(3)
    a = nb.uniform((50,)).numpy()
    b = nb.uniform((50,)).numpy()
    assert not np.allclose(a, b)
    nb.random.seed(3)
    np.testing.assert_array_equal(nb.uniform((50,)).numpy(), a)


def test_any_int_seeds_the_global_generator_and_its_state_round_trips():
    """As ``torch.manual_seed``: a negative seed draws (it failed at the first draw), and
    the state (an int64 pair) holds any seed, taken modulo 2**63."""
    for s in (-1, -(2**40), 2**63 + 5, np.int64(7)):
        nb.manual_seed(s)
        state = nb.get_rng_state()
        a = nb.randn(4).numpy()
        nb.set_rng_state(state)
        np.testing.assert_array_equal(nb.randn(4).numpy(), a)
    nb.manual_seed(2**63 + 5)
    b = nb.randn(4).numpy()
    nb.manual_seed(5)
    np.testing.assert_array_equal(nb.randn(4).numpy(), b)


def test_api_signatures_and_ranges():
    u = nb.uniform((2000,), 2.0, 3.0).numpy()  # nb.uniform(shape, low, high)
    assert u.dtype == np.float32 and u.min() >= 2.0 and u.max() < 3.0
    assert abs(u.mean() - 2.5) < 0.03
    z = nb.normal((4000,), 1.0, 2.0).numpy()  # nb.normal(shape, mean, std)
    assert abs(z.mean() - 1.0) < 0.15 and abs(z.std() - 2.0) < 0.15
    assert nb.gaussian((3, 2)).shape == (3, 2)
    assert nb.uniform((2,), dtype=nb.float64).dtype == nb.float64
    k = nb.random.key(0)
    r = nb.random.randint(k, (1000,), 3, 7).numpy()
    assert r.dtype == np.int32 and r.min() >= 3 and r.max() <= 6 and len(set(r)) == 4
    bern = nb.random.bernoulli(k, 0.25, (4000,)).numpy()
    assert bern.dtype == np.bool_ and abs(bern.mean() - 0.25) < 0.03
    n = nb.random.normal(k, (3,), 5.0, 0.0).numpy()
    np.testing.assert_allclose(n, 5.0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_narrow_float_uniforms_never_reach_high(dtype):
    """A draw rounded to a narrow float (or scaled in it) could round up to ``high``; the
    range is [low, high) in every dtype."""
    k = nb.random.key(0)
    u = nb.random.uniform(k, (200_000,), dtype=getattr(nb, dtype)).numpy().astype(np.float64)
    v = nb.random.uniform(k, (200_000,), 2.0, 4.0, dtype=getattr(nb, dtype)).numpy()
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01
    assert v.astype(np.float64).min() >= 2.0 and v.astype(np.float64).max() < 4.0


def test_bad_keys_and_ranges_raise():
    with pytest.raises(ValueError, match="key"):
        nb.random.uniform(nb.constant([1, 2, 3]), (2,))
    with pytest.raises(TypeError):
        nb.random.split(np.array([0, 1]), 2)
    with pytest.raises(ValueError, match="low < high"):
        nb.random.randint(nb.random.key(0), (2,), 5, 5)


def test_a_uniform_range_of_one_value_gives_that_value():
    """low == high: the value itself (the clamp below high gave a value below low)."""
    np.testing.assert_array_equal(nb.uniform((3,), 1.0, 1.0).numpy(), [1.0, 1.0, 1.0])
    k = nb.random.key(0)
    np.testing.assert_array_equal(nb.random.uniform(k, (2,), low=-2.0, high=-2.0).numpy(), [-2, -2])


def test_draws_are_identical_on_every_backend():
    k = nb.random.key(9)
    with nb.backend("numpy"):
        a = (nb.random.normal(k, (8,)) * 2.0).numpy()
    b = (nb.random.normal(k, (8,)) * 2.0).numpy()  # whatever the default backend is
    np.testing.assert_array_equal(a, b)


def test_every_calling_form_keeps_its_parameters():
    k = nb.random.key(3)
    # keyed, random-module form and top-level form give the same draw with the same bounds
    a = nb.random.uniform(k, (500,), 7.0, 9.0).numpy()
    b = nb.uniform(k, (500,), 7.0, 9.0).numpy()
    np.testing.assert_array_equal(a, b)
    assert a.min() >= 7.0 and a.max() < 9.0
    z = nb.normal(k, (2000,), 5.0, 0.5).numpy()
    assert abs(z.mean() - 5.0) < 0.1 and abs(z.std() - 0.5) < 0.1
    # shape-first: the positional parameters follow the shape
    r = nb.random.randint((1000,), 3, 7).numpy()
    assert r.min() >= 3 and r.max() < 7
    r = nb.random.randint((1000,), 4).numpy()
    assert r.min() >= 0 and r.max() < 4
    u = nb.random.uniform((1000,), -2.0).numpy()
    assert u.min() >= -2.0 and u.max() < 1.0
    with pytest.raises(TypeError, match="positional"):
        nb.random.uniform((3,), 0.0, 1.0, 2.0)
    with pytest.raises(TypeError, match="extra positional"):
        nb.uniform((3,), 0.0, 1.0, 2.0)
    with pytest.raises(TypeError, match="upper bound"):
        nb.random.randint((3,))


def test_tensor_parameters_differentiate_and_batch():
    """A tensor mean/std/low/high always takes part (it was skipped when equal to the
    default, leaving a zero gradient at std=1 and an error under vmap)."""
    k = nb.random.key(0)
    z = nb.random.normal(k, (3,)).numpy()
    u = nb.random.uniform(k, (3,)).numpy()
    np.testing.assert_allclose(
        nb.grad(lambda s: nb.random.normal(k, (3,), 0.0, s).sum())(nb.constant(1.0)).item(),
        z.sum(),
        rtol=1e-6,
    )
    assert nb.grad(lambda m: nb.random.normal(k, (3,), m, 1.0).sum())(nb.constant(0.0)).item() == 3
    gl, gh = nb.grad(lambda lo, hi: nb.random.uniform(k, (3,), lo, hi).sum(), argnums=(0, 1))(
        nb.constant(0.0), nb.constant(1.0)
    )
    np.testing.assert_allclose([gl.item(), gh.item()], [3 - u.sum(), u.sum()], rtol=1e-6)
    got = nb.vmap(lambda s: nb.random.normal(k, (3,), 0.0, s))(nb.constant([1.0, 2.0]))
    np.testing.assert_allclose(got.numpy(), np.stack([z, 2 * z]), rtol=1e-6)
    # array bounds broadcast to the shape; JAX's keyword names
    lo, hi = nb.constant([0.0, 1.0, 2.0]), nb.constant([1.0, 2.0, 4.0])
    np.testing.assert_allclose(
        nb.random.uniform(k, (3,), lo, hi).numpy(), [0, 1, 2] + u * [1, 1, 2], rtol=1e-6
    )
    v = nb.random.uniform(k, shape=(2, 3), minval=-1.0, maxval=1.0).numpy()
    assert v.shape == (2, 3) and v.min() >= -1 and v.max() < 1
    with pytest.raises(ValueError, match=r"low of shape \(2,\).*shape \(3,\)"):
        nb.random.uniform(k, (3,), nb.constant([0.0, 1.0]), 1.0)
    with pytest.raises(TypeError, match="low or minval, not both"):
        nb.random.uniform(k, (3,), low=0.0, minval=1.0)


def test_dtypes_are_checked_and_randint_bounds_clamp_to_the_dtype():
    k = nb.random.key(0)
    with pytest.raises(ValueError, match="uniform: dtype must be a float"):
        nb.random.uniform(k, (2,), dtype=nb.int32)
    with pytest.raises(ValueError, match="normal: dtype must be a float"):
        nb.random.normal(k, (2,), dtype=nb.int32)
    with pytest.raises(TypeError, match="randint: dtype must be an integer"):
        nb.random.randint(k, (2,), 0, 10, dtype=nb.float32)
    # JAX clamps the bounds to the dtype's range (values wrapped around before)
    assert set(np.unique(nb.random.randint(k, (500,), -200, -150, dtype=nb.int8).numpy())) == {-128}
    assert set(np.unique(nb.random.randint(k, (500,), -5, 3, dtype=nb.uint8).numpy())) == {0, 1, 2}
    assert nb.random.randint(k, (500,), 0, 256, dtype=nb.uint8).numpy().max() > 250
    big = nb.random.randint(k, (500,), 0, 2**40).numpy()
    assert big.dtype == np.int32 and big.min() >= 0
    # tensor bounds broadcast, JAX's keyword names, a shaped split
    r = nb.random.randint(k, (2, 500), nb.constant([[0], [10]]), nb.constant([[5], [12]]))
    r = r.numpy()
    assert set(np.unique(r[0])) == set(range(5)) and set(np.unique(r[1])) == {10, 11}
    assert nb.random.randint(k, (300,), minval=2, maxval=4).numpy().min() == 2
    wide = nb.random.randint(k, (2, 300), nb.constant([[0], [5]]), 7, dtype=nb.int64).numpy()
    assert wide.dtype == np.int64 and set(np.unique(wide[1])) == {5, 6}
    assert nb.random.split(k, (2, 3)).shape == (2, 3, 2)
    keys = nb.random.split(k, (2, 3)).numpy().reshape(6, 2)
    np.testing.assert_array_equal(keys, nb.random.split(k, 6).numpy())


def test_fold_in_takes_a_traced_or_batched_integer():
    """JAX's fold_in(key, i) with i a tensor: under vmap one key per i, under compile one
    trace for every i; a Python int gives the same key as the matching tensor."""
    k = nb.random.key(7)
    each = np.stack([nb.random.fold_in(k, i).numpy() for i in range(4)])
    np.testing.assert_array_equal(
        nb.vmap(lambda i: nb.random.fold_in(k, i))(nb.arange(4)).numpy(), each
    )
    keys = nb.random.split(k, 3)
    np.testing.assert_array_equal(
        nb.vmap(lambda kk: nb.random.fold_in(kk, 2))(keys).numpy(),
        np.stack([nb.random.fold_in(keys[i], 2).numpy() for i in range(3)]),
    )
    f = nb.compile(lambda kk, i: nb.random.uniform(nb.random.fold_in(kk, i), (2,)))
    for i in (1, 2):
        np.testing.assert_array_equal(
            f(k, nb.constant(i)).numpy(), nb.random.uniform(nb.random.fold_in(k, i), (2,)).numpy()
        )
    assert f.stats.misses == 1
    assert len({tuple(r) for r in each}) == 4
    with pytest.raises(TypeError, match="fold_in: data must be an integer scalar"):
        nb.random.fold_in(k, nb.constant([1, 2]))


def test_global_draws_are_shared_by_the_columns_of_jacfwd():
    """jacfwd's basis batches one evaluation's tangents, so a global draw inside it is one
    draw (as in jacrev), also across several differentiated arguments; an outer vmap still
    draws per element."""
    f = lambda a: nb.sum(a) * nb.uniform((3,))  # noqa: E731
    for jac in (nb.jacfwd, nb.jacrev):
        j = jac(f)(nb.ones((3,))).numpy()
        np.testing.assert_array_equal(j, np.repeat(j[:, :1], 3, axis=1))
    h = nb.hessian(lambda a: nb.sum(a) ** 2 * nb.sum(nb.uniform((3,))))(nb.ones((2,))).numpy()
    np.testing.assert_array_equal(h, np.full((2, 2), h[0, 0]))
    per = nb.vmap(nb.jacfwd(f))(nb.ones((2, 3))).numpy()
    assert not np.allclose(per[0], per[1])
    # several arguments: one evaluation for all their columns, so one draw
    da, db = nb.jacfwd(lambda a, b: a * b * nb.normal(()), argnums=(0, 1))(
        nb.constant(2.0), nb.constant(3.0)
    )
    np.testing.assert_allclose(da.item() / 3.0, db.item() / 2.0, rtol=1e-6)


def test_jax_positional_dtype_and_documented_defaults():
    """JAX's ``uniform(key, shape, dtype, minval)`` / ``normal(key, shape, dtype)`` take the
    dtype third; the top-level draws' signatures show the documented defaults (0.0 and 1.0)."""
    import inspect

    k = nb.random.key(0)
    assert nb.random.uniform(k, (3,), nb.float64).dtype == nb.float64
    b = nb.random.uniform(k, (50,), np.float64, 5.0, maxval=6.0).numpy()
    assert b.dtype == np.float64 and b.min() >= 5.0 and b.max() < 6.0
    assert nb.random.normal(k, (2,), np.float16).dtype == nb.float16
    assert nb.normal(k, (2,), nb.float64).dtype == nb.float64
    with pytest.raises(TypeError, match="dtype given twice"):
        nb.random.uniform(k, (3,), nb.float64, dtype=nb.float32)
    params = inspect.signature(nb.uniform).parameters
    assert params["low"].default == 0.0 and params["high"].default == 1.0
    params = inspect.signature(nb.normal).parameters
    assert params["mean"].default == 0.0 and params["std"].default == 1.0
    # the defaults are still told apart from numbers passed in the key form
    u = nb.uniform(k, (100,), 2.0, 3.0).numpy()
    assert u.min() >= 2.0 and u.max() < 3.0


def test_jax_argument_orders_keywords_and_bound_dtypes():
    """JAX's ``uniform(key, shape, dtype, minval, maxval)``, ``randint(key, shape, minval,
    maxval, dtype)``, ``key=``, ``bernoulli(key, p)`` taking ``p``'s shape, and bounds cast
    to the draw's dtype; a range whose ``high`` rounds to ``low`` in the dtype gives ``low``
    (it gave the value below ``low``)."""
    k = nb.random.key(0)
    u = nb.random.uniform(k, (200,), nb.float16, -1.0, 1.0)
    assert u.dtype == nb.float16 and u.numpy().min() >= -1 and u.numpy().max() < 1
    r = nb.random.randint(k, (50,), 0, 10, nb.uint8)
    assert r.dtype == nb.uint8 and r.numpy().max() < 10
    np.testing.assert_array_equal(
        nb.random.uniform(key=k, shape=(3,)).numpy(), nb.random.uniform(k, (3,)).numpy()
    )
    assert nb.random.normal(key=k, shape=(2,)).shape == (2,)
    assert nb.random.randint(key=k, shape=(2,), minval=0, maxval=3).shape == (2,)
    p = nb.constant(np.array([0.0, 1.0, 1.0]))
    np.testing.assert_array_equal(nb.random.bernoulli(k, p).numpy(), [False, True, True])
    with pytest.raises(TypeError, match="key given twice"):
        nb.random.uniform(k, key=k)
    lo, hi = nb.zeros((3,)), nb.ones((3,))
    assert nb.random.uniform(k, (3,), lo, hi, dtype=nb.float16).dtype == nb.float16
    assert nb.random.normal(k, (3,), lo, 1.0, dtype=nb.bfloat16).dtype == nb.bfloat16
    for dtype, low, high in [(nb.bfloat16, 1.0, 1.001), (nb.float16, 2048.0, 2049.0)]:
        got = nb.random.uniform(k, (5,), low, high, dtype=dtype).numpy().astype(np.float32)
        np.testing.assert_array_equal(got, np.full(5, low, np.float32))
        got = nb.uniform((5,), low, high, dtype=dtype).numpy().astype(np.float32)
        np.testing.assert_array_equal(got, np.full(5, low, np.float32))


def test_keys_and_draws_refuse_what_jax_refuses_and_take_shape_by_keyword():
    """A float seed or one that would wrap is an error (JAX's TypeError / OverflowError);
    the global generator's draws take ``shape=`` by keyword; a foreign key, a ``p`` of
    another shape and a uint64 bound past the generator's range are named errors."""
    with pytest.raises(TypeError, match="random.key: the seed must be an integer"):
        nb.random.key(1.5)
    with pytest.raises(OverflowError, match="outside"):
        nb.random.key(2**64)
    assert nb.random.key(-1).shape == (2,) and nb.random.key(2**64 - 1).shape == (2,)
    assert nb.random.normal(shape=(3,)).shape == (3,)
    assert nb.random.uniform(shape=(2, 2)).shape == (2, 2)
    assert nb.random.randint(shape=(4,), low=0, high=5).shape == (4,)
    with pytest.raises(TypeError, match="expected a key made by nb.random.key or a shape"):
        nb.random.uniform(np.zeros(2, np.uint32), (3,))
    k = nb.random.key(0)
    with pytest.raises(ValueError, match=r"bernoulli: p of shape \(3,\) do not broadcast"):
        nb.random.bernoulli(k, nb.constant([0.1, 0.5, 0.9]), (2,))
    with pytest.raises(OverflowError, match="randint: high=.* uint64"):
        nb.random.randint(k, (3,), 0, 2**64, dtype=nb.uint64)
    assert nb.random.randint(k, (3,), 0, 2**63, dtype=nb.uint64).dtype == nb.uint64


def test_the_global_generator_s_state_round_trips_through_a_checkpoint(tmp_path):
    """PyTorch's get_rng_state/set_rng_state: a resumed run that saved the global
    generator's state draws (dropout masks, nb.randn) what the first run drew."""
    nb.manual_seed(11)
    nb.randn(3)
    nb.nn.save({"rng": nb.get_rng_state()}, tmp_path / "ck.safetensors")
    drop = nb.nn.Dropout(0.5)
    first = [nb.randn(4).numpy(), drop(nb.ones(8)).numpy()]
    nb.manual_seed(0)  # another run, elsewhere in its stream
    nb.set_rng_state(nb.nn.load(tmp_path / "ck.safetensors")["rng"])
    again = [nb.randn(4).numpy(), drop(nb.ones(8)).numpy()]
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"set_rng_state: expected \[seed, draws\]"):
        nb.set_rng_state([1.5, 2])


def test_draws_a_probe_found_wrong_or_unclear():
    """A uniform range wider than the dtype holds (-3e38 to 3e38: high - low overflowed and
    every value came out the top one); fold_in of a float (truncated: 1.5 gave 1's key) or
    a bool is refused, an int of 64 bits wraps; PyTorch's randint(low, high, size) and
    randint(high, size); categorical names itself for a shape that does not broadcast,
    and draws bfloat16 classes without the 16-bit noise's tie bias."""
    k = nb.random.key(0)
    v = nb.random.uniform(k, (10000,), -3e38, 3e38).numpy().astype(np.float64)
    assert v.min() < -2.9e38 and v.max() > 2.9e38 and abs(v.mean()) < 0.05 * 3e38
    for bad in (1.5, True, nb.constant(1.5)):
        with pytest.raises(TypeError, match="random.fold_in: data must be an integer"):
            nb.random.fold_in(k, bad)
    np.testing.assert_array_equal(
        nb.random.fold_in(k, 2**64 - 1).numpy(), nb.random.fold_in(k, -1).numpy()
    )
    nb.manual_seed(0)
    a = nb.randint(0, 10, (3,)).numpy()
    nb.manual_seed(0)
    np.testing.assert_array_equal(a, nb.randint((3,), 0, 10).numpy())
    c = nb.randint(10, (1000,)).numpy()
    assert c.shape == (1000,) and c.min() >= 0 and c.max() <= 9
    with pytest.raises(ValueError, match=r"random.categorical: shape \(4,\) must end with"):
        nb.random.categorical(k, nb.zeros((3, 5)), shape=(4,))
    draws = nb.random.categorical(k, nb.zeros((2,), dtype=nb.bfloat16), shape=(100000,))
    assert abs(draws.numpy().mean() - 0.5) < 0.006  # (5 standard errors)


def test_jax_s_other_distributions_have_their_moments():
    """``gumbel``, ``exponential``, ``laplace``, ``logistic`` and ``choice`` (JAX's names and
    arguments): means and variances of 200k draws against the distributions' own, and
    ``choice`` with and without replacement, with weights."""
    k = nb.random.key(0)
    moments = {
        nb.random.gumbel: (0.5772, np.pi**2 / 6),
        nb.random.exponential: (1.0, 1.0),
        nb.random.laplace: (0.0, 2.0),
        nb.random.logistic: (0.0, np.pi**2 / 3),
    }
    for draw, (mean, var) in moments.items():
        x = draw(k, (200_000,)).numpy()
        assert x.dtype == np.float32 and np.isfinite(x).all(), draw.__name__
        assert abs(x.mean() - mean) < 0.02 and abs(x.var() / var - 1) < 0.03, draw.__name__
        np.testing.assert_array_equal(draw(k, (3,)).numpy(), draw(k, (3,)).numpy())
    assert nb.random.gumbel(k, (2,), dtype=nb.bfloat16).dtype == nb.bfloat16
    counts = np.bincount(nb.random.choice(k, 5, (100_000,)).numpy()) / 1e5
    np.testing.assert_allclose(counts, 0.2, atol=0.01)
    p = np.array([0.2, 0.5, 0.3], np.float32)
    counts = np.bincount(nb.random.choice(k, 3, (100_000,), p=p).numpy()) / 1e5
    np.testing.assert_allclose(counts, p, atol=0.01)
    perm = nb.random.choice(k, 6, (6,), replace=False).tolist()
    assert sorted(perm) == list(range(6))
    picked = nb.random.choice(k, nb.arange(10.0) * 10.0, (2, 3))
    assert picked.shape == (2, 3) and set(picked.numpy().ravel()) <= set(range(0, 100, 10))
    firsts = [
        nb.random.choice(nb.random.key(i), 3, (1,), replace=False, p=[0.7, 0.2, 0.1]).item()
        for i in range(600)
    ]
    assert 0.6 < firsts.count(0) / 600 < 0.8  # weighted, without replacement
    with pytest.raises(ValueError, match="4 draws without replacement from 3"):
        nb.random.choice(k, 3, (4,), replace=False)


def test_choice_is_uniform_over_many_candidates_and_laplace_finite_at_the_edges(monkeypatch):
    """(A float32 draw scaled by n had 24 bits: for n = 2**26, 69% of the picks were
    multiples of 4. ``2u - 1`` rounded to -1 for the smallest draws, so laplace gave -inf.)"""
    import nabla.backends.numpy.lowerings as lowerings

    picks = nb.random.choice(nb.random.key(0), 2**26, (4000,)).numpy().astype(np.int64)
    assert 0.45 < np.mean(picks % 2 == 1) < 0.55 and 0.2 < np.mean(picks % 4 == 0) < 0.3
    tiny = lowerings._per_key(lambda g, shape, dtype: np.full(shape, 1e-8, dtype.numpy))
    monkeypatch.setitem(lowerings.LOWERINGS, "random_uniform", tiny)
    assert np.isfinite(nb.random.laplace(nb.random.key(1), (3,)).numpy()).all()


def test_array_bounds_keep_the_draw_dtype_and_a_0d_int_is_n():
    """As JAX: NumPy-array bounds are cast to the draw's dtype (a float64 array made the
    draw float64, even with ``dtype=float16``); a 0-d integer array is ``n`` for
    ``permutation`` and ``choice``; ``import nabla.random`` is ``nb.random``."""
    k = nb.random.key(0)
    lo, hi = np.array([0.0, 10.0]), np.array([1.0, 11.0])
    assert nb.random.uniform(k, (2,), minval=lo, maxval=hi).dtype == nb.float32
    assert nb.random.uniform(k, (2,), minval=lo, maxval=hi, dtype=nb.float16).dtype == nb.float16
    got = nb.random.uniform(k, (2,), minval=lo, maxval=hi).numpy()
    assert (got >= lo).all() and (got < hi).all()
    assert nb.random.uniform(k, (2,), minval=np.array([1, 2]), maxval=3).dtype == nb.float32
    perm = nb.random.permutation(k, nb.constant(np.int32(5))).numpy()
    assert sorted(perm.tolist()) == [0, 1, 2, 3, 4]
    assert nb.random.choice(k, np.array(5), (3,)).shape == (3,)
    import nabla.random as module  # noqa: PLC0415 - the import path is the point

    assert module is nb.random


def test_key_of_a_batched_or_traced_seed():
    """``vmap(nb.random.key)(seeds)`` and a compiled ``key(seed)`` of a traced seed, as
    JAX's: the keys of each seed (they had needed the seed's value at the call)."""
    seeds = [0, 1, -5, 2**40 + 3]
    keys = nb.vmap(nb.random.key)(nb.constant(np.array(seeds, np.int64)))
    assert keys.tolist() == [nb.random.key(s).tolist() for s in seeds]
    draw = nb.compile(lambda s: nb.random.normal(nb.random.key(s), (2,)))
    for s in (3, 4):
        np.testing.assert_array_equal(
            draw(nb.constant(np.int64(s))).numpy(), nb.random.normal(nb.random.key(s), (2,)).numpy()
        )
    small = nb.vmap(nb.random.key)(nb.constant(np.array([1, 2], np.uint32)))
    assert small.tolist() == [[0, 1], [0, 2]]


def test_truncated_normal_cauchy_lognormal_rademacher_are_jax_s():
    """JAX's ``truncated_normal`` (inverse CDF, draws strictly inside the bounds), ``cauchy``,
    ``lognormal`` and ``rademacher``: shapes, dtypes and statistics against the known
    moments and quantiles (200k draws)."""
    k = nb.random.key(0)
    t = nb.random.truncated_normal(k, -1.0, 2.0, (200_000,)).numpy()
    assert t.dtype == np.float32 and t.min() > -1.0 and t.max() < 2.0
    phi = lambda v: np.exp(-(v**2) / 2) / np.sqrt(2 * np.pi)  # noqa: E731
    mass = 0.5 * (math.erf(2 / np.sqrt(2)) - math.erf(-1 / np.sqrt(2)))
    mean = (phi(-1.0) - phi(2.0)) / mass
    var = 1 + (-1.0 * phi(-1.0) - 2.0 * phi(2.0)) / mass - mean**2
    assert abs(t.mean() - mean) < 5 * np.sqrt(var / t.size)
    assert abs(t.var() - var) < 0.01
    both = nb.random.truncated_normal(k, np.array([0.0, -2.0]), np.array([1.0, 0.0])).numpy()
    assert both.shape == (2,) and 0 < both[0] < 1 and -2 < both[1] < 0
    assert nb.random.truncated_normal(k, -2.0, 2.0, (3,), dtype=nb.float16).dtype == nb.float16
    c = nb.random.cauchy(k, (100_001,)).numpy()
    q1, q2, q3 = np.percentile(c, [25, 50, 75])  # Cauchy's quartiles: -1, 0, 1
    assert abs(q2) < 0.02 and abs(q3 - q1 - 2.0) < 0.05
    ln = nb.random.lognormal(k, 0.5, (200_000,)).numpy()
    assert ln.min() > 0 and abs(ln.mean() - math.exp(0.125)) < 0.01
    assert nb.random.lognormal(k, nb.constant([0.1, 0.2])).shape == (2,)
    r = nb.random.rademacher(k, (10_000,))
    assert r.dtype == nb.int32 and set(r.tolist()) == {-1, 1} and abs(r.numpy().mean()) < 0.05
    assert nb.random.rademacher(k, (2,), dtype=nb.float32).dtype == nb.float32


def test_a_negative_std_or_a_probability_outside_0_1_is_refused_as_pytorch():
    """A negative std flipped the draws' signs and a p of 1.5 drew all True, silently."""
    k = nb.random.key(0)
    for draw in (
        lambda: nb.normal((3,), std=-1.0),
        lambda: nb.gaussian((3,), 0.0, -1.0),
        lambda: nb.random.normal(k, (3,), 0.0, float("nan")),
    ):
        with pytest.raises(ValueError, match="normal: std must be >= 0"):
            draw()
    for p in (1.5, -0.5, 2):
        with pytest.raises(ValueError, match=rf"bernoulli: p must be in \[0, 1\], got {p}"):
            nb.random.bernoulli(k, p, (3,))
    assert nb.random.bernoulli(k, 1, (3,)).tolist() == [True] * 3
    assert nb.random.bernoulli(k, 0.0, (3,)).tolist() == [False] * 3
    assert np.all(nb.normal((2,), std=0.0).numpy() == 0.0)


def test_randint_with_64_bit_tensor_bounds_draws_the_whole_span_evenly():
    """Raw draws below 2**62 and an int64 difference: a span of 3 * 2**60 drew its top
    third once in four, the whole int64 range only its lowest value."""
    k = nb.random.key(0)
    t = lambda v: nb.asarray(np.int64(v))  # noqa: E731
    x = nb.random.randint(k, (200_000,), t(0), t(3 * 2**60), dtype=nb.int64).numpy()
    thirds = np.bincount((x // 2**60) // 1, minlength=3)[:3] / x.size
    assert np.all(np.abs(thirds - 1 / 3) < 0.006), thirds
    y = nb.random.randint(k, (100_000,), t(-(2**63)), t(2**63 - 1), dtype=nb.int64).numpy()
    assert abs((y > 0).mean() - 0.5) < 0.006 and y.min() < -(2**62) and y.max() > 2**62
    small = nb.random.randint(k, (70_000,), t(5), t(12), dtype=nb.int64).numpy()
    assert set(small.tolist()) == set(range(5, 12))
    assert np.all(np.abs(np.bincount(small - 5) / small.size - 1 / 7) < 0.008)
    assert nb.random.randint(k, (3,), t(5), t(2), dtype=nb.int64).tolist() == [5, 5, 5]


def test_jax_s_keywords_independent_permutations_string_dtypes_and_bad_p():
    """key= on split/fold_in/categorical/permutation, permutation(independent=True), a dtype
    by name, and a choice p that is negative or sums to 0 (a NaN logit drew index 0)."""
    k = nb.random.key(0)
    assert nb.random.split(key=k).shape == (2, 2)
    assert nb.random.fold_in(key=k, data=3).shape == (2,)
    assert nb.random.categorical(key=k, logits=nb.zeros((3, 4))).shape == (3,)
    same = nb.random.permutation(k, 5).tolist()
    assert (
        nb.random.permutation(key=k, x=5).tolist()
        == same
        == nb.random.permutation(5, key=k).tolist()
    )
    x = nb.asarray(np.arange(12).reshape(3, 4))
    rows = nb.random.permutation(k, x, 1, True).numpy()
    assert all(sorted(r) == list(range(4 * i, 4 * i + 4)) for i, r in enumerate(rows))
    assert len({tuple(np.argsort(r)) for r in rows}) > 1  # each row its own order
    assert nb.random.uniform(k, (3,), "float16").dtype == nb.float16
    with pytest.raises(ValueError, match="p must hold non-negative finite probabilities"):
        nb.random.choice(k, 3, (10,), p=np.array([-0.5, 1.0, 0.5], np.float32))
    with pytest.raises(ValueError, match="p sums to 0"):
        nb.random.choice(k, 3, (2,), p=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="replace=False is not supported"):
        nb.random.categorical(k, nb.zeros(3), replace=False)
    assert nb.random.choice(k, 3, (5,), p=np.array([0.0, 1.0, 0.0], np.float32)).tolist() == [1] * 5


def test_pytorch_s_size_and_generator_keywords():
    assert nb.randint(0, 10, size=(3,)).shape == (3,)
    assert nb.randint(10, size=(2, 2)).shape == (2, 2)
    assert set(nb.randint(3, 5, size=(1000,)).tolist()) == {3, 4}
    assert nb.randn(size=(2, 3)).shape == (2, 3) and nb.rand(2, generator=None).shape == (2,)
    with pytest.raises(TypeError, match="the size given twice"):
        nb.randn(2, size=(3,))
    with pytest.raises(TypeError, match="generator= takes None here"):
        nb.rand(2, generator=object())


# ----------------------------------------------------------------------------- jax.random's others
def _moments(x, mean, var, n):
    """The sample mean and variance within ~5 standard errors of the true ones."""
    x = np.asarray(x.numpy(), np.float64)
    assert abs(x.mean() - mean) < 5 * np.sqrt(var / n) + 1e-9, (x.mean(), mean)
    assert abs(x.var() - var) < 0.08 * var + 1e-9, (x.var(), var)


def test_binomial_and_multinomial_follow_their_distributions():
    import scipy.stats as ss

    R, k, n = nb.random, nb.random.key(0), 40000
    # inversion below a mean of 10, BTRS from 10, p above one half by its failures
    for trials, p in ((5, 0.3), (30, 0.9), (100, 0.2), (1000, 0.7), (10**6, 0.5)):
        x = R.binomial(k, trials, p, (n,))
        assert x.dtype == nb.float32
        _moments(x, trials * p, trials * p * (1 - p), n)
        assert x.numpy().min() >= 0 and x.numpy().max() <= trials
    counts = np.bincount(R.binomial(R.key(4), 60, 0.35, (n,)).numpy().astype(int), minlength=61)
    assert np.abs(counts / n - ss.binom(60, 0.35).pmf(np.arange(61))).max() < 0.006
    edges = R.binomial(k, np.array([0.0, 7.0, 7.0]), np.array([0.5, 0.0, 1.0]), (3,)).numpy()
    np.testing.assert_array_equal(edges, [0.0, 0.0, 7.0])
    # multinomial: counts sum to n; each outcome's count is binomial(n, p_i)
    probs = np.array([0.2, 0.5, 0.3])
    c = R.multinomial(k, 10, probs, shape=(n,)).numpy()
    assert c.shape == (n, 3) and (c.sum(-1) == 10).all()
    np.testing.assert_allclose(c.mean(0), 10 * probs, atol=0.05)
    np.testing.assert_allclose(np.cov(c.T)[0, 1], -10 * 0.2 * 0.5, atol=0.05)
    batched = R.multinomial(k, np.array([3.0, 7.0]), np.array([[0.1, 0.9], [0.5, 0.5]]))
    assert batched.shape == (2, 2) and batched.numpy().sum(-1).tolist() == [3.0, 7.0]
    # PyTorch's form of the call (weights, not a key) draws indices, as nb.multinomial
    idx = R.multinomial(nb.constant([0.0, 1.0, 0.0]), 4, True).numpy()
    assert idx.tolist() == [1, 1, 1, 1]


def test_the_gamma_family_and_the_other_distributions_have_their_moments():
    import scipy.stats as ss

    R, k, n = nb.random, nb.random.key(0), 40000
    for a in (0.1, 0.7, 3.5, 50.0):
        x = R.gamma(k, a, (n,))
        _moments(x, a, a, n)
        assert ss.kstest(x.numpy(), ss.gamma(a).cdf).pvalue > 1e-3
    _moments(R.beta(k, 2.0, 5.0, (n,)), 2 / 7, 10 / (49 * 8), n)
    d = R.dirichlet(k, np.array([1.0, 2.0, 3.0]), (n,)).numpy()
    np.testing.assert_allclose(d.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(d.mean(0), [1 / 6, 2 / 6, 3 / 6], atol=0.01)
    _moments(R.chisquare(k, 4.0, (n,)), 4.0, 8.0, n)
    _moments(R.t(k, 5.0, (n,)), 0.0, 5 / 3, n)
    _moments(R.f(k, 5.0, 10.0, (n,)), 1.25, 2 * 100 * 13 / (5 * 64 * 6), n)
    for lam in (0.5, 9.9, 10.0, 37.0, 500.0):  # (inversion below 10, rejection from 10)
        p = R.poisson(k, lam, (n,))
        assert p.dtype == nb.int32
        _moments(p, lam, lam, n)
    counts = np.bincount(R.poisson(R.key(3), 37.0, (n,)).numpy(), minlength=80)[:80] / n
    assert np.abs(counts - ss.poisson(37).pmf(np.arange(80))).max() < 0.006
    _moments(R.geometric(k, 0.3, (n,)), 1 / 0.3, 0.7 / 0.09, n)
    _moments(R.rayleigh(k, 2.0, (n,)), 2 * np.sqrt(np.pi / 2), (4 - np.pi) * 2, n)
    _moments(R.pareto(k, 6.0, (n,)), 1.2, 6 / (25 * 4), n)  # (b > 4: a finite 4th moment)
    for mu in (0.5, 2.0):  # inverse Gaussian of shape 1: variance mu ** 3
        x = R.wald(k, mu, (n,))
        _moments(x, mu, mu**3, n)
        assert ss.kstest(x.numpy(), ss.invgauss(mu).cdf).pvalue > 1e-3
    w = ss.weibull_min(1.5, scale=2.0)
    _moments(R.weibull_min(k, 2.0, 1.5, (n,)), w.mean(), w.var(), n)
    _moments(R.triangular(k, 0.0, 1.0, 3.0, (n,)), 4 / 3, 7 / 18, n)
    _moments(R.maxwell(k, (n,)), ss.maxwell.mean(), ss.maxwell.var(), n)
    _moments(R.double_sided_maxwell(k, 1.0, 2.0, (n,)), 1.0, 12.0, n)
    _moments(R.generalized_normal(k, 2.0, (n,)), 0.0, 0.5, n)
    r = np.linalg.norm(R.ball(k, 3, 2, (n,)).numpy(), axis=1)
    assert r.max() <= 1.0 and abs((r**3).mean() - 0.5) < 0.01  # (uniform in the ball)
    cov = np.array([[2.0, 0.6], [0.6, 1.0]])
    for method in ("cholesky", "eigh", "svd"):
        z = R.multivariate_normal(k, np.array([1.0, -1.0]), cov, (n,), method=method).numpy()
        np.testing.assert_allclose(np.cov(z.T), cov, atol=0.06)
    q = R.orthogonal(k, 4, (3,)).numpy()
    np.testing.assert_allclose(
        q @ q.transpose(0, 2, 1), np.broadcast_to(np.eye(4), q.shape), atol=1e-5
    )
    assert R.bits(k, (3,)).dtype == nb.uint32 and R.bits(k, (3,), nb.uint8).dtype == nb.uint8
    assert R.wrap_key_data(R.key_data(k)).tolist() == k.tolist()
    with pytest.raises(ValueError, match="random.bits: dtype must be an unsigned integer"):
        R.bits(k, (2,), nb.int32)


def test_gamma_draws_differentiate_in_the_shape():
    """The implicit derivative (JAX's): d/da E[x] = 1 and d/da E[x^2] = 2a + 1 for gamma(a);
    through beta (d/da E = b / (a + b)^2) and loggamma (d/da E[log x] = trigamma(a), where
    a tiny shape's draws underflow)."""
    import scipy.special as sp

    R, n = nb.random, 100000
    for a in (0.3, 2.0, 20.0):
        g1 = nb.grad(lambda v: R.gamma(R.key(5), v, (n,)).mean())(a).item()
        g2 = nb.grad(lambda v: (R.gamma(R.key(5), v, (n,)) ** 2).mean())(a).item()
        assert abs(g1 - 1.0) < 0.02 and abs(g2 - (2 * a + 1)) < 0.03 * (2 * a + 1), (a, g1, g2)
    gb = nb.grad(lambda v: R.beta(R.key(6), v, 3.0, (n,)).mean())(2.0).item()
    assert abs(gb - 3 / 25) < 0.005
    gl = nb.grad(lambda v: R.loggamma(R.key(6), v, (n,)).mean())(0.05).item()
    assert abs(gl - sp.polygamma(1, 0.05)) < 0.03 * sp.polygamma(1, 0.05)
    # reproducible from the key, batched by vmap, and compiled
    assert R.gamma(R.key(1), 2.0, (4,)).tolist() == R.gamma(R.key(1), 2.0, (4,)).tolist()
    assert nb.vmap(lambda kk: R.gamma(kk, 2.0, (3,)))(R.split(R.key(0), 4)).shape == (4, 3)
    got = nb.compile(lambda kk, a: R.beta(kk, a, 2.0, (3,)))(R.key(2), nb.constant(1.5))
    assert got.shape == (3,) and ((got.numpy() > 0) & (got.numpy() < 1)).all()
