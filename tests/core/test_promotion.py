"""Type promotion: one lattice for every op, weakly typed Python scalars."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nabla as nb


@pytest.fixture(autouse=True)
def _numpy_backend():
    with nb.backend("numpy"):
        yield


ALL = list(nb.DType)
FLOATS = [nb.float16, nb.bfloat16, nb.float32, nb.float64]
INTS = [nb.uint8, nb.uint16, nb.uint32, nb.uint64, nb.int8, nb.int16, nb.int32, nb.int64]


def t(dtype, values=(1, 2)):
    return nb.constant(np.array(values).astype(dtype.numpy))


# ----------------------------------------------------------------------------- weak scalars
@pytest.mark.parametrize(
    "dtype, scalar, expected",
    [
        (nb.float32, 2.0, nb.float32),
        (nb.float16, 1.0, nb.float16),
        (nb.bfloat16, 1.0, nb.bfloat16),
        (nb.float64, 1.0, nb.float64),
        (nb.float16, 3, nb.float16),
        (nb.int32, 1, nb.int32),
        (nb.int8, 1, nb.int8),
        (nb.uint8, 1, nb.uint8),
        (nb.uint16, 1, nb.uint16),
        (nb.uint32, 7, nb.uint32),
        (nb.uint64, 1, nb.uint64),
        (nb.uint32, 1.5, nb.float32),
        (nb.int64, 1, nb.int64),
        (nb.int16, True, nb.int16),
        (nb.int32, 1.5, nb.float32),  # a float scalar lifts an int tensor to the default float
        (nb.int64, 1.5, nb.float32),
        (nb.bool, 1, nb.int32),  # an int scalar lifts a bool tensor to int32
        (nb.bool, 1.0, nb.float32),
        (nb.bool, True, nb.bool),
    ],
)
def test_python_scalars_are_weak(dtype, scalar, expected):
    x = t(dtype)
    for r in (x + scalar, scalar + x, x * scalar, nb.add(x, scalar), nb.maximum(scalar, x)):
        assert r.dtype is expected
        assert r.numpy().dtype == expected.numpy


def test_numpy_scalars_are_weak_too():
    x = t(nb.float16)
    assert (x * np.float64(2.0)).dtype is nb.float16
    assert (t(nb.int8) + np.int64(3)).dtype is nb.int8


def test_float_scalar_follows_default_dtype():
    with nb.default_dtype(nb.float64):
        assert (t(nb.int32) * 0.5).dtype is nb.float64
        assert (t(nb.float16) * 0.5).dtype is nb.float16


# ----------------------------------------------------------------------------- tensor pairs
@pytest.mark.parametrize(
    "a, b, expected",
    [
        (nb.int32, nb.float32, nb.float32),
        (nb.int64, nb.float32, nb.float32),
        (nb.int64, nb.float16, nb.float16),
        (nb.uint8, nb.int8, nb.int16),
        (nb.uint8, nb.int16, nb.int16),
        (nb.int8, nb.int64, nb.int64),
        (nb.uint8, nb.int64, nb.int64),
        (nb.uint8, nb.uint32, nb.uint32),
        (nb.uint16, nb.int16, nb.int32),
        (nb.uint16, nb.int8, nb.int32),
        (nb.uint32, nb.int32, nb.int64),
        (nb.uint32, nb.uint64, nb.uint64),
        # no integer holds both: a float, as in NumPy and JAX
        (nb.uint64, nb.int64, nb.float64),
        (nb.uint64, nb.int8, nb.float64),
        (nb.uint64, nb.float32, nb.float32),
        (nb.uint32, nb.float16, nb.float16),
        (nb.bool, nb.uint16, nb.uint16),
        (nb.int32, nb.int64, nb.int64),
        (nb.float16, nb.bfloat16, nb.float32),
        (nb.float16, nb.float32, nb.float32),
        (nb.bfloat16, nb.float64, nb.float64),
        (nb.float32, nb.float64, nb.float64),
        (nb.bool, nb.int8, nb.int8),
        (nb.bool, nb.float16, nb.float16),
        (nb.bool, nb.bool, nb.bool),
    ],
)
def test_promotion_table(a, b, expected):
    assert nb.promote_types(a, b) is expected
    assert nb.promote_types(b, a) is expected
    r = t(a) + t(b)
    assert r.dtype is expected
    assert r.numpy().dtype == expected.numpy


def test_bool_plus_bool():
    # As in NumPy and JAX: bool + bool stays bool (logical or); bool * bool is logical and.
    x = nb.constant([True, True, False, False])
    y = nb.constant([True, False, True, False])
    s = x + y
    assert s.dtype is nb.bool and s.tolist() == [True, True, True, False]
    p = x * y
    assert p.dtype is nb.bool and p.tolist() == [True, False, False, False]
    # reductions count: sum of bools is an int
    assert x.sum().dtype is nb.int32 and x.sum().item() == 2
    with pytest.raises(TypeError):
        x - y


def test_true_division_gives_float():
    a = nb.constant([3, 4])
    b = nb.constant([2, 8])
    r = a / b
    assert r.dtype is nb.float32 and r.tolist() == [1.5, 0.5]
    assert (t(nb.int64) / 2).dtype is nb.float32
    assert (t(nb.uint8) / t(nb.uint8)).dtype is nb.float32
    assert (t(nb.float16) / 2).dtype is nb.float16
    assert (t(nb.float64) / t(nb.int32)).dtype is nb.float64
    assert (t(nb.int32) // t(nb.int32)).dtype is nb.int32


def test_float_math_on_ints_gives_default_float():
    assert nb.exp(t(nb.int32)).dtype is nb.float32
    assert nb.sqrt(t(nb.uint8)).dtype is nb.float32
    assert nb.mean(t(nb.int64)).dtype is nb.float32
    assert nb.relu(t(nb.int8)).dtype is nb.int8  # value-preserving ops keep the dtype
    assert nb.abs(t(nb.int16)).dtype is nb.int16


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.value)
def test_comparisons_give_bool(dtype):
    x = t(dtype, (0, 1))
    y = t(dtype, (1, 1))
    for r in (x == y, x != y, x < y, x <= y, x > y, x >= y, x < 1, 1 >= x):
        assert r.dtype is nb.bool
        assert r.numpy().dtype == np.bool_
    assert (x == y).tolist() == [False, True]


def test_mixed_comparison_promotes_before_comparing():
    # int8 100 vs float 100.5: compared as floats, not truncated
    assert (t(nb.int32, (100,)) < 100.5).tolist() == [True]
    assert (t(nb.uint8, (200,)) > t(nb.int8, (-1,))).tolist() == [True]


def test_where_and_concatenate_promote():
    c = nb.constant([True, False])
    assert nb.where(c, t(nb.int32), t(nb.float16)).dtype is nb.float16
    assert nb.where(c, t(nb.int8), 2).dtype is nb.int8
    assert nb.where(c, 1.0, 0.0).dtype is nb.float32
    assert nb.concatenate([t(nb.int16), t(nb.float32)]).dtype is nb.float32


# ----------------------------------------------------------------------------- properties
dtypes = st.sampled_from(ALL)


@settings(max_examples=60, deadline=None)
@given(a=dtypes, b=dtypes)
def test_promote_types_is_commutative_and_matches_add(a, b):
    p = nb.promote_types(a, b)
    assert p is nb.promote_types(b, a)
    assert isinstance(p, nb.DType)
    # the result is at least as wide a kind as each input
    if a.is_float or b.is_float or _uint64_with_signed(a, b):
        assert p.is_float
    elif a.is_int or b.is_int:
        assert p.is_int
    else:
        assert p.is_bool
    r = nb.add(t(a), t(b))
    assert r.dtype is p
    assert r.numpy().dtype == p.numpy


def _uint64_with_signed(a, b) -> bool:
    pair = {a, b}
    return nb.uint64 in pair and any(d.is_int and not d.is_unsigned for d in pair)


def test_promote_types_is_associative():
    # Exhaustive over all triples: the order a sum is written in never changes its dtype,
    # except where uint64 meets a signed integer, which gives float64 as in NumPy (and as
    # there, (u64 + i8) + f16 is float64 while u64 + (i8 + f16) is float16)
    pt = nb.promote_types
    for a, b, c in itertools.product(ALL, repeat=3):
        if any(_uint64_with_signed(x, y) for x, y in ((a, b), (b, c), (a, c))):
            assert pt(pt(a, b), c).is_float and pt(a, pt(b, c)).is_float, (a, b, c)
            continue
        assert pt(pt(a, b), c) is pt(a, pt(b, c)), (a, b, c)


@settings(max_examples=40, deadline=None)
@given(a=dtypes)
def test_promote_types_identity(a):
    assert nb.promote_types(a, a) is a
    assert nb.promote_types(a, nb.bool) is a


def test_a_dtype_equals_its_numpy_dtype_scalar_type_and_name():
    """As a JAX array's dtype does: ``x.dtype == np.float32`` and ``np.dtype(x.dtype)``."""
    x = nb.ones((2,))
    assert x.dtype == np.float32 and x.dtype == np.dtype("float32") and x.dtype == "float32"
    assert x.dtype != np.float64 and x.dtype != "int32" and x.dtype != float
    assert x.dtype != None and x.dtype != 5  # noqa: E711 - comparing with None is the test
    assert np.dtype(x.dtype) == np.float32 and np.dtype(nb.bfloat16) == ml_dtypes.bfloat16
    assert nb.bfloat16 == ml_dtypes.bfloat16 and nb.DType.bool == np.bool_
    assert {nb.float32: 1}[nb.DType("float32")] == 1


def test_reductions_compute_in_a_requested_dtype():
    """``dtype=`` casts first, as NumPy and JAX: an int8 sum asked for int64 does not wrap,
    and one asked for int8 does; methods (and so ``np.sum(t, dtype=...)``) do the same."""
    x = nb.constant(np.array([100, 100, 100], np.int8))
    assert nb.sum(x, dtype=nb.int64).item() == 300 and nb.sum(x, dtype=nb.int64).dtype == nb.int64
    assert nb.sum(x, dtype=nb.int8).item() == 44
    assert np.sum(x, dtype=np.int64).item() == 300 and x.sum(dtype=nb.int64).item() == 300
    assert nb.prod(x, dtype=nb.float32).item() == 1e6
    assert nb.cumsum(x, dtype=nb.int32).tolist() == [100, 200, 300]
    i = nb.constant([1, 2, 4])
    assert nb.mean(i, dtype=nb.float64).dtype == nb.float64
    assert nb.mean(i, dtype=nb.int32).item() == 2


def test_mean_and_var_of_16_bit_floats_are_computed_in_float32():
    """As JAX: the sum of two float16 60000s overflows float16, and a long float16 sum
    rounds at every step; the result keeps the input's dtype."""
    big = nb.constant(np.array([60000, 60000], np.float16))
    assert nb.mean(big).item() == 60000.0 and nb.mean(big).dtype == nb.float16
    assert nb.var(big).item() == 0.0 and nb.std(big).item() == 0.0
    tenths = nb.constant(np.full(10000, 0.1, np.float16))
    assert nb.mean(tenths).item() == np.float16(0.1)
    assert nb.mean(nb.constant(np.full(4, 3.0, np.float32)), dtype=nb.float16).dtype == nb.float16
