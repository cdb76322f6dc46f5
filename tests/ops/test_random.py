"""Random numbers: explicit keys reproduce exactly, the global generator differs per call,
distributions have the right statistics, and the API signatures of API.md hold."""

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


def test_bad_keys_and_ranges_raise():
    with pytest.raises(ValueError, match="key"):
        nb.random.uniform(nb.constant([1, 2, 3]), (2,))
    with pytest.raises(TypeError):
        nb.random.split(np.array([0, 1]), 2)
    with pytest.raises(ValueError, match="low < high"):
        nb.random.randint(nb.random.key(0), (2,), 5, 5)


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
