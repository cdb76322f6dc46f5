"""Shifts (``<<``, ``>>``), ``cumprod`` with its derivatives at zeros (against PyTorch's values,
recorded by ``data/make_cumprod.py``), and the uint16/uint32/uint64 dtypes."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import nabla as nb

DATA = np.load(os.path.join(os.path.dirname(__file__), "data", "cumprod.npz"))
HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(autouse=True)
def _numpy_backend():
    with nb.backend("numpy"):
        yield


# ----------------------------------------------------------------------------- shifts
@pytest.mark.parametrize("dt", ["int8", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_shifts_match_numpy_for_every_count(dt):
    info = np.iinfo(dt)
    x = np.array([info.min, info.max, 0, 1, 5, info.max // 3, -7 if info.min else 7], dt)
    bits = 8 * np.dtype(dt).itemsize
    counts = [0, 1, 3, bits - 2, bits - 1, bits, bits + 1, 2 * bits]
    if info.min:
        counts += [-1, -bits]
    for k in counts:
        y = np.full(x.shape, k, dt)
        tx, ty = nb.constant(x), nb.constant(y)
        np.testing.assert_array_equal((tx << ty).numpy(), np.left_shift(x, y), err_msg=f"{k}")
        np.testing.assert_array_equal((tx >> ty).numpy(), np.right_shift(x, y), err_msg=f"{k}")
        assert (tx << ty).dtype == dt and nb.right_shift(tx, ty).dtype == dt


def test_shift_operators_scalars_and_broadcasting():
    a = np.array([[1, -8, 255]], np.int32)
    t = nb.constant(a)
    np.testing.assert_array_equal((t << 2).numpy(), a << 2)
    np.testing.assert_array_equal((t >> 1).numpy(), a >> 1)  # arithmetic: -8 >> 1 == -4
    np.testing.assert_array_equal((1 << nb.constant([1, 2, 31])).numpy(), [2, 4, -(2**31)])
    np.testing.assert_array_equal((1024 >> nb.constant([[1], [3]])).numpy(), [[512], [128]])
    u8 = nb.constant(np.array([200, 3], np.uint8))
    assert (u8 << 1).dtype == nb.uint8 and (u8 << 1).tolist() == [144, 6]  # a weak scalar
    counts = nb.constant(np.array([[0], [1], [2]], np.int64))
    got = nb.left_shift(t, counts)  # int32 with int64 promotes, shapes broadcast
    assert got.dtype == nb.int64 and got.shape == (3, 3)
    np.testing.assert_array_equal(got.numpy(), np.left_shift(a.astype(np.int64), counts.numpy()))


def test_shifts_under_vmap_and_compile():
    x = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    y = np.array([0, 1, 2, 3], np.int32)
    f = lambda a, b: (a << b) + (a >> b)  # noqa: E731
    want = np.left_shift(x, y) + np.right_shift(x, y)
    got = nb.vmap(f, in_axes=(0, None))(nb.constant(x), nb.constant(y))
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(nb.compile(f)(nb.constant(x), nb.constant(y)).numpy(), want)
    got = nb.vmap(f, in_axes=(1, 0))(nb.constant(x), nb.constant(y))
    np.testing.assert_array_equal(got.numpy(), (np.left_shift(x, y) + np.right_shift(x, y)).T)


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: nb.constant([1.5]) << 1, ["left_shift", "float32 (1,)", "int"]),
        (lambda: nb.constant([1]) >> nb.constant([1.0]), ["right_shift", "int32", "float32"]),
        (lambda: nb.constant([True]) << 1, ["left_shift", "bool (1,)"]),
        (
            lambda: nb.right_shift(nb.constant([4]), nb.constant([True])),
            ["right_shift", "int32 (1,)", "bool"],
        ),
        (lambda: nb.constant([4]) << 0.5, ["left_shift", "float"]),
    ],
)
def test_shifts_of_floats_or_bools_are_type_errors(call, words):
    with pytest.raises(TypeError) as e:
        call()
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_shifts_are_not_differentiable():
    assert not nb.ops.OPS["left_shift"].differentiable
    assert not nb.ops.OPS["right_shift"].differentiable


# ----------------------------------------------------------------------------- cumprod
def test_cumprod_values_and_derivatives_at_zeros_match_pytorch():
    x = nb.constant(DATA["x"])
    out, pull = nb.vjp(lambda v: nb.cumprod(v, 1), x)
    np.testing.assert_allclose(out.numpy(), DATA["out"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pull(nb.constant(DATA["ct"]))[0].numpy(), DATA["vjp"], atol=1e-12)
    _, t = nb.jvp(lambda v: nb.cumprod(v, 1), (x,), (nb.constant(DATA["tan"]),))
    np.testing.assert_allclose(t.numpy(), DATA["jvp"], atol=1e-12)
    # second derivatives at two zeros (a quotient or a mask of the zeros gets these wrong)
    h = nb.hessian(lambda v: (nb.cumprod(v, 0) ** 2).sum())(nb.constant(DATA["row"]))
    np.testing.assert_allclose(h.numpy(), DATA["hess"], atol=1e-12)
    assert np.isfinite(pull(nb.constant(DATA["ct"]))[0].numpy()).all()


def test_cumprod_float32_gradient_and_method():
    x = DATA["x"].astype(np.float32)
    g = nb.grad(lambda v: (nb.cumprod(v, axis=1) * nb.constant(DATA["ct"], dtype=nb.float32)).sum())
    np.testing.assert_allclose(g(nb.constant(x)).numpy(), DATA["vjp"], rtol=1e-5, atol=1e-5)
    t = nb.constant(x)
    np.testing.assert_allclose(t.cumprod(dim=0).numpy(), np.cumprod(x, 0), rtol=1e-6)
    np.testing.assert_allclose(t.cumprod(1).numpy(), np.cumprod(x, 1), rtol=1e-6)


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_cumprod_matches_pytorch_live():
    import torch

    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, (4, 9))
    x[rng.random(x.shape) < 0.25] = 0.0
    ct = rng.normal(size=x.shape)
    tx = torch.tensor(x, requires_grad=True)
    torch.cumprod(tx, 1).backward(torch.tensor(ct))
    _, pull = nb.vjp(lambda v: nb.cumprod(v, 1), nb.constant(x))
    np.testing.assert_allclose(pull(nb.constant(ct))[0].numpy(), tx.grad.numpy(), atol=1e-12)


def test_cumprod_vmap_compile_and_per_example_gradients():
    x = DATA["x"]
    f = lambda v: nb.cumprod(v, 0).sum()  # noqa: E731
    per_row = nb.vmap(nb.grad(f))(nb.constant(x))
    loop = np.stack([nb.grad(f)(nb.constant(r)).numpy() for r in x])
    np.testing.assert_allclose(per_row.numpy(), loop, atol=1e-12)
    got = nb.compile(lambda v: nb.cumprod(v, -1, exclusive=True, reverse=True))(nb.constant(x))
    rev = np.flip(np.cumprod(np.flip(x, 1), 1), 1)
    want = np.concatenate([rev[:, 1:], np.ones((3, 1))], 1)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    gc = nb.compile(nb.grad(f))(nb.constant(x[0]))
    np.testing.assert_allclose(gc.numpy(), loop[0], atol=1e-12)


def test_cumprod_dtypes_and_errors():
    assert nb.cumprod(nb.constant([True, True, False])).tolist() == [1, 1, 0]
    assert nb.cumprod(nb.constant([True])).dtype == nb.int32
    u = nb.cumprod(nb.constant(np.array([3, 2**20, 2**20], np.uint32)))
    assert u.dtype == nb.uint32 and u.tolist() == [3, 3 * 2**20, (3 * 2**40) % 2**32]
    assert nb.cumprod(nb.constant([1, 2, 3]), dtype=nb.float64).dtype == nb.float64
    h = nb.cumprod(nb.constant(np.full(8, 1.5, np.float16)))
    np.testing.assert_allclose(h.numpy(), 1.5 ** np.arange(1, 9), rtol=1e-3)
    with pytest.raises(nb.OpError, match=r"cumprod: needs rank >= 1, got shape \(\)"):
        nb.cumprod(nb.constant(2.0))
    with pytest.raises(IndexError, match="cumprod"):
        nb.cumprod(nb.ones((2, 3)), axis=2)


def test_exclusive_cumprod_of_an_empty_axis_and_torch_s_dim():
    """An exclusive cumprod of a 0-long axis came back 1 long (the shift padded a 1 onto
    nothing), eagerly and under ``dynamic_dims`` at size 0."""
    for reverse in (False, True):
        assert nb.cumprod(nb.zeros((3, 0)), axis=1, exclusive=True, reverse=reverse).shape == (3, 0)
    assert nb.cumprod(nb.zeros((0,)), exclusive=True).shape == (0,)
    f = nb.compile(lambda x: nb.cumprod(x, exclusive=True), dynamic_dims={0: {0: "n"}})
    for n in (0, 1, 5):
        x = np.arange(1, n + 1, dtype=np.float32)
        want = np.concatenate([[1.0], np.cumprod(x)[:-1]]) if n else x
        np.testing.assert_array_equal(f(x).numpy(), want)
    assert f.stats.cache_size == 1  # one trace for every size
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    np.testing.assert_array_equal(nb.cumprod(x, dim=0).numpy(), np.cumprod(x, 0))


def test_narrow_index_dtypes_shift_counts_and_out_of_range_comparisons():
    """int8/int16 indices wrapped ``i + n`` in their own dtype (-1 + 300: NumPy's overflow;
    lazily even 5 + 300 failed), a Python bool shift count was refused, ``uint32 > -1``
    raised where NumPy 2 compares exactly, and uint64 ``arange`` past 2**63 crashed."""
    x = nb.arange(300, dtype=nb.float32)
    idx = np.array([-1, -128, 5], np.int8)
    for got in (x[idx], nb.gather(x, idx), x[nb.constant(idx) * 1], nb.vmap(lambda i: x[i])(idx)):
        assert got.tolist() == [299.0, 172.0, 5.0]
    assert x[np.array([5, 200], np.uint8) + nb.constant(np.uint8(0))].tolist() == [5.0, 200.0]
    assert x.at[idx].set(-1.0).numpy()[[299, 172, 5]].tolist() == [-1.0] * 3
    assert nb.arange(40000)[np.array([-1], np.int16)].tolist() == [39999]

    i32 = nb.constant([1, 2])
    assert (i32 << True).tolist() == [2, 4] and (i32 >> False).tolist() == [1, 2]
    with pytest.raises(TypeError, match="left_shift: needs integer tensors"):
        nb.constant([True]) << 1

    u = nb.constant(np.array([0, 7], np.uint32))
    i8 = nb.constant(np.array([-128, 127], np.int8))
    for got, want in (
        (u > -1, [True, True]),
        (u == -1, [False, False]),
        (u != -1, [True, True]),
        (u < 2**40, [True, True]),
        (-1 < u, [True, True]),
        (2**40 <= u, [False, False]),
        (i8 < 300, [True, True]),
        (i8 >= -300, [True, True]),
        (i8 == 300, [False, False]),
    ):
        assert got.dtype == nb.bool and got.tolist() == want
    assert nb.vmap(lambda v: v > -1)(np.zeros((2, 3), np.uint8)).shape == (2, 3)

    big = nb.arange(2**63, 2**63 + 3, dtype=nb.uint64).tolist()
    assert big == [2**63, 2**63 + 1, 2**63 + 2]
    assert nb.arange(5, 0, -2, dtype=nb.uint8).tolist() == [5, 3, 1]
    with pytest.raises(OverflowError, match=r"out of range for int64$"):
        nb.arange(2**63, 2**63 + 3, dtype=nb.int64)


# ----------------------------------------------------------------------------- uint dtypes
@pytest.mark.parametrize("dt", ["uint16", "uint32", "uint64"])
def test_unsigned_dtypes_convert_print_and_compute(dt):
    d = getattr(nb, dt)
    assert d is nb.DType(dt) and d.is_int and d.is_unsigned and not nb.int32.is_unsigned
    top = int(np.iinfo(dt).max)
    a = np.array([0, 1, top], dt)
    t = nb.constant(a)  # a NumPy array keeps its dtype (uint32/uint64 no longer widen)
    assert t.dtype is d and t.numpy().dtype == np.dtype(dt)
    assert t.tolist() == [0, 1, top] and t[2].item() == top
    assert f"dtype={dt}" in repr(t) and str(top) in repr(t)
    assert nb.constant([0, top], dtype=d).tolist() == [0, top]
    assert nb.asarray(a).dtype is d and nb.from_dlpack(a).dtype is d
    assert np.asarray(t).dtype == np.dtype(dt)
    with pytest.raises(OverflowError, match=f"{top + 1} is out of range for {dt}"):
        nb.constant([top + 1], dtype=d)
    with pytest.raises(OverflowError, match=f"add: the value -1 is out of range for {dt}"):
        t + (-1)
    # wrapping arithmetic, comparisons, casts (float -> uint saturates, as JAX)
    np.testing.assert_array_equal((t + 1).numpy(), a + np.array(1, dt))
    np.testing.assert_array_equal((t * t).numpy(), a * a)
    np.testing.assert_array_equal((t // 2).numpy(), a // 2)
    assert (t > 0).tolist() == [False, True, True]
    assert nb.constant([-3.0, 2.7, 1e30]).cast(d).tolist() == [0, 2, top]
    assert t.cast(nb.float64).dtype == nb.float64
    assert nb.zeros((2,), dtype=d).dtype is d and nb.arange(4, dtype=d).tolist() == [0, 1, 2, 3]
    assert nb.full((2,), 7, dtype=d).tolist() == [7, 7]
    assert "u" + dt[4:] in str(nb.trace(lambda v: v + 1)(t))


def test_unsigned_reductions_and_promotion():
    u16 = nb.constant(np.full(70000, 1, np.uint16))
    assert u16.sum().dtype == nb.uint32 and u16.sum().item() == 70000
    u32 = nb.constant(np.array([2**31, 2**31], np.uint32))
    assert u32.sum().dtype == nb.uint32 and u32.sum().item() == 0  # wraps, as JAX
    assert nb.cumsum(u32).tolist() == [2**31, 0]
    assert (u32 + nb.constant(np.array([1, 2], np.int32))).dtype == nb.int64
    assert (u32 + nb.constant(np.array([1, 2], np.uint8))).dtype == nb.uint32
    assert (nb.constant(np.array([1], np.uint64)) + nb.constant([1])).dtype == nb.float64
    assert (u32 * 0.5).dtype == nb.float32
    assert nb.max(u32).item() == 2**31 and nb.argmax(u32).item() == 0


def test_scatter_updates_combine_in_the_promoted_dtype_as_jax():
    """x.at[k].add(v) (and subtract, multiply, min, max) converted v to x's dtype before
    combining: int32.at[0].add(-1.5) gave 2 (JAX: 3 - 1.5 = 1.5, then 1), int8 min with a
    uint8 200 gave -56, and a float16 scatter-add of float32 ones at one index 4096 times
    stopped at 2048."""
    i32 = nb.constant(np.array([3, 4, 5], np.int32))
    assert i32.at[0].add(-1.5).tolist() == [1, 4, 5]
    assert i32.at[0].add(nb.constant(np.float32(-1.5))).tolist() == [1, 4, 5]
    assert i32.at[0].subtract(2.5).tolist() == [0, 4, 5]
    assert nb.constant(np.array([3], np.int8)).at[0].multiply(2.5).tolist() == [7]
    i8 = nb.constant(np.array([1], np.int8))
    assert i8.at[0].min(nb.constant(np.array([200], np.uint8))).tolist() == [1]
    assert i8.at[0].max(nb.constant(np.array([200], np.uint8))).tolist() == [-56]
    u8 = nb.constant(np.array([1, 5], np.uint8))
    assert u8.at[nb.constant([0, 0])].subtract(1).tolist() == [255, 5]  # wraps, as uint8
    half = nb.zeros(1, dtype=nb.float16).at[nb.constant([0] * 4096)].add(nb.ones(4096))
    assert half.dtype is nb.float16 and half.tolist() == [4096.0]


def test_gelu_tail_nan_to_num_bfloat16_and_square_of_bools():
    """Exact gelu's 1 + erf(x / sqrt 2) cancelled for negative x (float32 gelu(-6) was 0,
    float16 gelu(-3) 8% off); nan_to_num crashed on bfloat16 (NumPy's finfo); square of
    bools stayed bool (JAX: int32)."""
    import math

    x = np.array([-12.0, -8.0, -6.0, -5.0, -3.0, -1.0, 0.0, 2.0])
    want = x * 0.5 * np.array([math.erfc(-v / math.sqrt(2)) for v in x])
    got = nb.gelu(nb.constant(x.astype(np.float32))).numpy().astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=0)  # (JAX: 1.5e-5 here)
    got64 = nb.gelu(nb.constant(x)).numpy()
    np.testing.assert_allclose(got64, want, rtol=3e-7, atol=0)
    g = nb.grad(lambda v: nb.gelu(v).sum())(nb.constant(x.astype(np.float32))).numpy()
    assert np.isfinite(g).all()
    h = nb.gelu(nb.constant(np.array([-3.0], np.float16))).numpy().astype(np.float64)
    np.testing.assert_allclose(h, want[4:5], rtol=2e-3)
    import ml_dtypes

    grid = np.linspace(-6.0, 4.0, 401).astype(ml_dtypes.bfloat16)  # float32, rounded once
    exact = nb.gelu(nb.constant(grid.astype(np.float32))).numpy().astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(nb.gelu(nb.constant(grid)).numpy(), exact)
    bf = nb.nan_to_num(nb.constant(np.array([np.inf, np.nan], np.float32)).astype(nb.bfloat16))
    assert bf.dtype is nb.bfloat16 and np.isfinite(bf.numpy().astype(np.float32)).all()
    sq = nb.square(nb.constant([True, False]))
    assert sq.dtype is nb.int32 and sq.tolist() == [1, 0]
