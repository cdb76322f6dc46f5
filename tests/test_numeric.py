"""nabla/_numeric.py and the dtype helpers beside it, checked against NumPy's definitions
(the registry's entries check the values on every backend, under vmap and differentiated;
here: the corners, the dtypes, the errors and the Python-valued helpers)."""

import io

import numpy as np
import pytest

import nabla as nb


def test_frexp_splits_every_float_exactly_as_numpy_including_subnormals():
    x32 = np.array(
        [0.0, -0.0, 1.0, -3.5, 1e-40, 2**-149, 1.17549435e-38, 3.4e38, 0.75, 1 - 2**-24],
        np.float32,
    )
    rng = np.random.default_rng(0)
    x64 = rng.standard_normal(40) * 10.0 ** rng.integers(-300, 300, 40)
    x64 = np.concatenate([x64, [5e-324, np.finfo(np.float64).max, 2.0**-1022]])
    for x in (x32, x64, np.array([6e-8, 0.1, 65504.0], np.float16)):
        m, e = nb.frexp(x)
        want_m, want_e = np.frexp(x)
        assert m.dtype == nb.dtype(x.dtype) and e.dtype == nb.int32
        np.testing.assert_array_equal(m.numpy(), want_m)
        np.testing.assert_array_equal(e.numpy(), want_e)
        # and back: ldexp undoes it, bit for bit
        np.testing.assert_array_equal(nb.ldexp(m, e).numpy(), x)
    m, e = nb.frexp(np.array([np.inf, -np.inf, np.nan], np.float32))
    np.testing.assert_array_equal(m.numpy(), [np.inf, -np.inf, np.nan])
    np.testing.assert_array_equal(e.numpy(), [0, 0, 0])


def test_ldexp_is_exact_over_the_whole_exponent_range():
    x = np.array([1.5, -3.0, 1e-30, 0.0, 3e38, 1.0, 1.0, 1.0], np.float32)
    e = np.array([100, -140, 200, 5000, -300, 127, 128, -149], np.int32)
    with np.errstate(over="ignore"):
        want = np.ldexp(x, e)
    np.testing.assert_array_equal(nb.ldexp(x, e).numpy(), want)
    with pytest.raises(nb.OpError, match=r"ldexp: needs integers, got float32\[2\]"):
        nb.ldexp(x[:2], np.ones(2, np.float32))


def test_gcd_and_lcm_follow_numpy_at_the_corners_and_under_compile_and_vmap():
    a = np.array([0, 0, 7, -12, 2**31 - 1, 1836311903], np.int32)
    b = np.array([0, 5, 0, 18, 3, 1134903170], np.int32)  # (two Fibonacci numbers: 45 steps)
    np.testing.assert_array_equal(nb.gcd(a, b).numpy(), np.gcd(a, b))
    np.testing.assert_array_equal(nb.lcm(a[:4], b[:4]).numpy(), np.lcm(a[:4], b[:4]))
    np.testing.assert_array_equal(nb.compile(nb.gcd)(a, b).numpy(), np.gcd(a, b))
    got = nb.vmap(nb.gcd, in_axes=(0, None))(a.reshape(2, 3), b[:3])
    np.testing.assert_array_equal(got.numpy(), np.gcd(a.reshape(2, 3), b[:3]))
    with pytest.raises(nb.OpError, match="gcd: needs integers, got float32"):
        nb.gcd(np.ones(2, np.float32), b[:2])


def test_bitwise_count_counts_the_absolute_value_s_bits_as_uint8():
    x = np.array([np.iinfo(np.int32).min, -7, -1, 0, 255, np.iinfo(np.int32).max], np.int32)
    got = nb.bitwise_count(x)
    assert got.dtype == nb.uint8
    np.testing.assert_array_equal(got.numpy(), np.bitwise_count(x))
    u = np.array([0, 2**64 - 1, 2**63, 12345], np.uint64)
    np.testing.assert_array_equal(nb.bitwise_count(u).numpy(), np.bitwise_count(u))


def test_polynomial_arithmetic_keeps_static_shapes_as_jax():
    u, v = np.array([1.0, 0.0, -1.0, 2.0, 5.0]), np.array([1.0, 3.0, 2.0])
    q, r = nb.polydiv(u, v)
    want_q, want_r = np.polydiv(u, v)
    np.testing.assert_allclose(q.numpy(), want_q)
    assert r.shape == u.shape  # the remainder keeps the dividend's length, zeros in front
    np.testing.assert_allclose(r.numpy(), np.concatenate([np.zeros(3), want_r]))
    np.testing.assert_allclose(nb.polyadd(nb.polymul(q, v), r).numpy(), u)
    assert nb.polyder(np.array([1.0, 2.0]), 3).shape == (0,)
    np.testing.assert_allclose(
        nb.polyint(np.array([3.0, 2.0, 1.0]), 2, np.array([5.0, 7.0])).numpy(),
        np.polyint([3.0, 2.0, 1.0], 2, [5.0, 7.0]),
    )
    with pytest.raises(nb.OpError, match=r"polyint: k must be one constant or m = 2, got 3"):
        nb.polyint(np.ones(3), 2, np.ones(3))
    with pytest.raises(nb.OpError, match=r"polyadd: a polynomial is 1-D coefficients"):
        nb.polyadd(np.ones((2, 2)), np.ones(2))
    with pytest.raises(nb.OpError, match="poly: the roots must be 1-D"):
        nb.poly(np.eye(2))
    # differentiable: d/dz of poly(z)'s coefficients
    g = nb.grad(lambda z: nb.sum(nb.poly(z)))(np.array([1.0, 2.0]))
    np.testing.assert_allclose(g.numpy(), [-(1 - 2.0), -(1 - 1.0)])  # sum = (1-z0)(1-z1)


def test_windows_match_numpy_and_kaiser_differentiates_in_beta():
    for m in (0, 1, 2, 7):
        for name in ("bartlett", "blackman", "hamming", "hanning"):
            got = getattr(nb, name)(m)
            assert got.dtype == nb.float32
            np.testing.assert_allclose(got.numpy(), getattr(np, name)(m), atol=1e-7)
        np.testing.assert_allclose(nb.kaiser(m, 3.0).numpy(), np.kaiser(m, 3.0), rtol=2e-6)
    eps = 1e-6
    fd = (np.kaiser(6, 2.5 + eps) - np.kaiser(6, 2.5 - eps)).sum() / (2 * eps)
    g = nb.grad(lambda b: nb.sum(nb.kaiser(6, b)))(np.float64(2.5))
    np.testing.assert_allclose(g.item(), fd, rtol=1e-6)
    with pytest.raises(nb.OpError, match="hanning: M must be an int"):
        nb.hanning(3.5)


def test_packbits_and_unpackbits_round_trip():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2, (3, 13)).astype(np.uint8)
    packed = nb.packbits(bits, axis=1, bitorder="little")
    np.testing.assert_array_equal(packed.numpy(), np.packbits(bits, 1, "little"))
    back = nb.unpackbits(packed, axis=1, count=13, bitorder="little")
    np.testing.assert_array_equal(back.numpy(), bits)
    with pytest.raises(nb.OpError, match="unpackbits: needs uint8, got int32"):
        nb.unpackbits(np.ones(3, np.int32))
    with pytest.raises(nb.OpError, match="packbits: bitorder must be 'big' or 'little'"):
        nb.packbits(bits, bitorder="middle")


def test_unique_array_api_forms_are_named_tuples():
    x = np.array([[3, 1], [1, 2]], np.int32)
    res = nb.unique_all(x)
    assert res._fields == ("values", "indices", "inverse_indices", "counts")
    np.testing.assert_array_equal(res.values.numpy(), [1, 2, 3])
    np.testing.assert_array_equal(res.indices.numpy(), [1, 3, 0])
    np.testing.assert_array_equal(res.inverse_indices.numpy(), [[2, 0], [0, 1]])
    np.testing.assert_array_equal(res.counts.numpy(), [2, 1, 1])
    np.testing.assert_array_equal(nb.unique_counts(x).counts.numpy(), [2, 1, 1])
    assert nb.unique_inverse(x).inverse_indices.shape == (2, 2)
    np.testing.assert_array_equal(nb.unique_values(x, size=4).numpy(), [1, 2, 3, 1])


def test_conveniences_and_predicates():
    np.testing.assert_array_equal(nb.r_[1:4, 0, np.array([7, 8])].numpy(), [1, 2, 3, 0, 7, 8])
    np.testing.assert_allclose(nb.r_[0:1:5j].numpy(), np.linspace(0, 1, 5))
    np.testing.assert_array_equal(
        nb.c_[np.array([1, 2]), np.array([3, 4])].numpy(), [[1, 3], [2, 4]]
    )
    with pytest.raises(nb.OpError, match="string directives"):
        nb.r_["0,2", np.ones(2)]
    np.testing.assert_array_equal(
        nb.fromfunction(lambda i, j: i * 10 + j, (2, 3)).numpy(), [[0, 1, 2], [10, 11, 12]]
    )
    rows, cols = nb.mask_indices(3, nb.triu, 1)
    np.testing.assert_array_equal(rows.numpy(), [0, 0, 1])
    np.testing.assert_array_equal(cols.numpy(), [1, 2, 2])
    a = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_allclose(
        nb.apply_over_axes(nb.sum, a, [0, 2]).numpy(), np.apply_over_axes(np.sum, a, [0, 2])
    )
    assert nb.isscalar(1.0) and nb.isscalar(nb.constant(1.0)) and not nb.isscalar([1.0])
    assert nb.iterable([1]) and not nb.iterable(nb.constant(1.0)) and not nb.iterable(3)
    assert not nb.iscomplexobj(nb.ones(2)) and nb.isrealobj(nb.ones(2))
    assert not nb.iscomplex(np.ones(2)).numpy().any() and nb.isreal(np.ones(2)).numpy().all()
    np.testing.assert_allclose(nb.angle(np.array([-2.0, 0.0, 3.0]), deg=True).numpy(), [180, 0, 0])
    assert nb.fabs(np.array([-1, 2])).dtype == nb.float32
    assert isinstance(nb.ones(2), nb.ndarray)
    buf = io.BytesIO()
    nb.save(buf, nb.arange(3))
    buf.seek(0)
    loaded = nb.load(buf)
    assert isinstance(loaded, nb.Tensor) and loaded.numpy().tolist() == [0, 1, 2]
    assert nb.frombuffer(np.float32(1.5).tobytes(), dtype=nb.float32).item() == 1.5
    assert nb.fromiter(range(3), nb.int32).numpy().tolist() == [0, 1, 2]
    with nb.printoptions(precision=2):
        shown = repr(nb.constant([1.23456, 2.0]))
    assert "1.23" in shown and "1.2346" not in shown
    assert nb.array_str(nb.arange(3)) == "[0 1 2]"


def test_dtype_helpers_follow_the_array_api_and_numpy():
    assert nb.dtype("float32") is nb.float32 and nb.dtype(np.zeros(2)) is nb.float64
    assert nb.dtype(nb.ones(2)) == nb.float32
    assert nb.isdtype(nb.float32, "real floating") and not nb.isdtype(nb.int8, "real floating")
    assert nb.isdtype(nb.uint8, ("bool", "unsigned integer"))
    assert nb.isdtype(nb.int16, "signed integer") and nb.isdtype(nb.int16, "numeric")
    assert nb.isdtype(nb.int32, nb.int32) and not nb.isdtype(nb.int32, "complex floating")
    with pytest.raises(ValueError, match="isdtype: unknown kind 'reals'"):
        nb.isdtype(nb.float32, "reals")
    assert nb.can_cast(nb.int8, nb.float32) and not nb.can_cast(nb.float32, nb.int32)
    assert nb.can_cast(nb.float64, nb.float32, casting="same_kind")
    assert (nb.single, nb.double, nb.half) == (nb.float32, nb.float64, nb.float16)
    assert (nb.int_, nb.uint, nb.float_, nb.bool_) == (nb.int64, nb.uint64, nb.float64, nb.bool)


def test_nextafter_and_spacing_step_one_float_as_numpy_including_subnormals():
    tiny = 2.0**-149
    x = np.array([0.0, -0.0, 1.0, -1.0, tiny, -tiny, 2**-126, 2**-125, 3.4028235e38, np.inf],
                 np.float32)  # fmt: skip
    y = np.array([1.0, -1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1.0, np.inf, 0.0], np.float32)
    np.testing.assert_array_equal(nb.nextafter(x, y).numpy(), np.nextafter(x, y))
    assert nb.nextafter(np.float32(2.0), np.float32(2.0)).item() == 2.0
    assert np.isnan(nb.nextafter(np.float32(np.nan), np.float32(1.0)).item())
    rng = np.random.default_rng(2)
    x64 = rng.standard_normal(200) * 10.0 ** rng.integers(-300, 300, 200)
    y64 = rng.standard_normal(200)
    np.testing.assert_array_equal(nb.nextafter(x64, y64).numpy(), np.nextafter(x64, y64))
    np.testing.assert_array_equal(nb.spacing(x64).numpy(), np.spacing(x64))
    finite = x[np.isfinite(x) & (x != 0)]
    np.testing.assert_array_equal(nb.spacing(finite).numpy(), np.spacing(finite))
    assert nb.spacing(np.float32(-0.0)).item() == -(2.0**-149)  # (JAX's sign; NumPy's is +)
    assert nb.lax.nextafter is nb.nextafter


def test_histogram2d_and_histogramdd_match_numpy():
    rng = np.random.default_rng(3)
    x, y, w = rng.standard_normal(50), rng.standard_normal(50), rng.uniform(size=50)
    edges = np.array([-3.0, -1.0, 0.0, 0.5, 3.0])
    for kw in ({}, {"bins": (3, 4)}, {"bins": edges}, {"bins": 4, "weights": w, "density": True},
               {"bins": 5, "range": [(-1, 1), (-2, 2)]}):  # fmt: skip
        got, want = nb.histogram2d(x, y, **kw), np.histogram2d(x, y, **kw)
        for g, v in zip(got, want, strict=True):
            np.testing.assert_allclose(g.numpy(), v, rtol=1e-5, atol=1e-7)
    s = rng.standard_normal((40, 3))
    hist, got_edges = nb.histogramdd(s, bins=(2, 3, 4), density=True)
    want, want_edges = np.histogramdd(s, bins=(2, 3, 4), density=True)
    np.testing.assert_allclose(hist.numpy(), want, rtol=1e-5)
    for g, v in zip(got_edges, want_edges, strict=True):
        np.testing.assert_allclose(g.numpy(), v, rtol=1e-6)
    with pytest.raises(nb.OpError, match=r"histogramdd: bins and range need one entry per dim"):
        nb.histogramdd(s, bins=(2, 3))


def test_place_and_einsum_path_as_jax():
    a = np.arange(6.0).reshape(2, 3)
    got = nb.place(a, a > 2, np.array([10.0, 20.0]), inplace=False)
    np.testing.assert_array_equal(got.numpy(), [[0, 1, 2], [10, 20, 10]])
    with pytest.raises(nb.OpError, match="place: JAX arrays cannot be changed in place"):
        nb.place(a, a > 2, np.array([1.0]))
    path, report = nb.einsum_path(
        "ij,jk,kl->il", np.ones((2, 3)), np.ones((3, 40)), np.ones((40, 5))
    )
    assert path == [(1, 2), (0, 1)] and "Optimized" in report


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's own, for its NaN answers
def test_edge_inputs_match_numpy():
    """Overflow, NaN, empty and 0-d inputs that once gave another answer than NumPy's."""
    with np.errstate(all="ignore"):
        x = np.array([-1e30, -5.0, 0.5, 1.0, 1e30, np.nan], np.float32)
        # acosh: a huge negative x overflowed (x - 1)(x + 1) to inf and read inf, not NaN
        np.testing.assert_allclose(nb.acosh(x).numpy(), np.arccosh(x), rtol=1e-6)
        # i0: 2 pi x overflowed before the square root, giving 0 * inf
        big = np.array([3e38, -3e38, 50.0], np.float32)
        np.testing.assert_allclose(nb.i0(big).numpy(), np.i0(big.astype(np.float64)), rtol=1e-5)
        # cov: too few observations is NaN; a 0-d input is one observation of one variable
        for m in (np.array([1.0]), np.zeros(0), np.array(1.5)):
            np.testing.assert_array_equal(nb.cov(m).numpy(), np.cov(m))
        assert nb.cov(np.array([1, 2], np.float16)).dtype == nb.float32
        # setxor1d: NaN is in exactly one of the arrays
        a = np.array([1.0, np.nan, np.inf, 2.0], np.float32)
        b = np.array([2.0, 3.0], np.float32)
        np.testing.assert_array_equal(nb.setxor1d(a, b).numpy(), np.setxor1d(a, b))
        # poly: the leading coefficient is 1 even for a NaN root; no roots is 1
        np.testing.assert_array_equal(nb.poly(np.array([np.nan, 1.0])).numpy(), [1, np.nan, np.nan])
        assert nb.poly(np.zeros(0)).shape == () and float(nb.poly(np.zeros(0))) == 1.0
        np.testing.assert_allclose(nb.poly(np.array([1.0, 2, 3])).numpy(), np.poly([1.0, 2, 3]))
    # polyadd/polysub keep integers; ldexp takes unsigned exponents
    got = nb.polyadd(np.array([1, 2], np.int32), np.array([3], np.int32))
    assert got.dtype == nb.int32 and got.tolist() == [1, 5]
    assert nb.polysub(np.array([1, 2], np.int32), np.array([3], np.int32)).tolist() == [1, -1]
    e = np.array([255, 100, 3], np.uint8)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(
            nb.ldexp(np.ones(3, np.float32), e).numpy(), np.ldexp(np.ones(3, np.float32), e)
        )
    # ix_ of an empty list; lexsort of a 1-D array (that many 0-d keys) and of 2-D rows
    assert nb.ix_(np.zeros(0), [1, 2])[0].dtype.is_int
    for keys in (np.array([3, 1, 2]), np.array([[1, 1, 0], [3, 1, 2]])):
        assert nb.lexsort(keys).tolist() == np.lexsort(keys).tolist()
