"""The NumPy interpreter's process-level behaviour (its per-op results are checked through
the op registry in tests/ops)."""

from __future__ import annotations

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from nabla.backends.numpy import LOWERINGS, _glibc

# A program with 2 MiB intermediates run 20 times; prints minor page faults per call.
FAULTS = """
import resource
import numpy as np
import nabla as nb
nb.set_backend("numpy")
x = nb.constant(np.ones((512, 1024), np.float32))
f = nb.compile(lambda x: (nb.tanh(x * 2.0) + nb.exp(-x)).sum(axis=1))
for _ in range(3):
    f(x).numpy()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    f(x).numpy()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


def _faults_per_call(reuse: str, fast: str = "0") -> float:
    # fast=0: the interpreter, whose intermediates come from malloc on every call
    env = {
        **os.environ,
        "NABLA_MALLOC_REUSE": reuse,
        "NABLA_FAST_NUMPY": fast,
        "NABLA_FAST_NUMPY_CHECK": "0",  # the check mode runs the interpreter beside it
    }
    res = subprocess.run(
        [sys.executable, "-c", FAULTS], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return float(res.stdout.strip())


@pytest.mark.skipif(not _glibc(), reason="the allocator settings are glibc's")
def test_repeated_calls_reuse_freed_memory_instead_of_faulting_it_in_again():
    # 2 MiB is 512 pages: without reuse each call faults its intermediates in afresh
    tuned, untuned = _faults_per_call("1"), _faults_per_call("0")
    assert tuned < 100, tuned
    assert untuned > 500, untuned  # the opt-out restores glibc's behaviour


def test_straight_line_programs_reuse_their_scratch_buffers_across_calls():
    # the same hot program as straight-line code: its intermediates live in scratch
    # buffers kept across calls, so even with glibc's default behaviour nothing faults
    assert _faults_per_call("0", fast="1") < 100


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((3, 1), (1, 5)),  # small: broadcast multiply
        ((256, 1), (1, 128)),  # large: einsum
        ((64, 64, 1), (64, 1, 128)),  # per-example gradients of a dense layer
        ((64, 1), (8, 1, 512)),  # batch on the right only
        ((2, 1, 300, 1), (4, 1, 64)),  # batch dims broadcast against each other
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16, ml_dtypes.bfloat16])
def test_matmul_over_one_element_is_the_outer_product(a_shape, b_shape, dtype):
    """A contraction over K=1 runs as a multiply or an einsum, never NumPy's batched GEMM;
    every path must give matmul's answer, batch broadcasting included."""
    rng = np.random.default_rng(0)
    a = rng.integers(-9, 9, a_shape).astype(dtype)
    b = rng.integers(-9, 9, b_shape).astype(dtype)
    (got,) = LOWERINGS["matmul"]([a, b], {})
    assert got.dtype == a.dtype  # bfloat16 has no einsum loops: a multiply there
    np.testing.assert_array_equal(got, np.multiply(a, b))


@pytest.mark.parametrize(
    "shape, axes",
    [
        ((16, 64, 128), (2,)),  # layer norm: trailing
        ((16, 4, 64, 64), (3,)),  # softmax: trailing
        ((16, 64, 128), (0, 1)),  # a bias gradient: leading
        ((6, 5, 4), (1, 2)),
        ((6, 5, 4), (-1,)),
        ((6, 5, 4), (0, 2)),  # neither leading nor trailing: np.sum
        ((8, 4, 4, 4, 32), (3,)),  # one short middle axis (pooling windows): by slices
        ((6, 5, 40), (-2,)),
        ((3, 20000), (1,)),  # a long row: np.sum's pairwise summation
        ((0, 5), (1,)),
    ],
)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_reduce_sum_matches_numpy_on_every_path(shape, axes, keepdims, dtype):
    """Sums over leading or trailing axes run as a product with ones (BLAS); every path
    gives np.sum's shape and dtype and its value to rounding, and propagates inf and NaN."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    (got,) = LOWERINGS["reduce_sum"]([x], {"axes": axes, "keepdims": keepdims})
    want = np.sum(x.astype(np.float64), axis=axes, keepdims=keepdims)
    assert got.shape == want.shape
    assert got.dtype == np.sum(x, axis=axes).dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-3)
    if x.size and dtype != np.int32:
        x.flat[0], x.flat[-1] = np.inf, np.nan
        (got,) = LOWERINGS["reduce_sum"]([x], {"axes": axes, "keepdims": keepdims})
        np.testing.assert_array_equal(
            np.isnan(got), np.isnan(np.sum(x, axis=axes, keepdims=keepdims))
        )
        np.testing.assert_array_equal(
            np.isinf(got), np.isinf(np.sum(x, axis=axes, keepdims=keepdims))
        )


@pytest.mark.parametrize("name", ["reduce_max", "reduce_min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_])
@pytest.mark.parametrize("keepdims", [False, True])
def test_max_and_min_over_one_short_middle_axis_match_numpy(name, dtype, keepdims):
    """Folded slice by slice (pooling windows): np.max's values, shape and dtype, and NaN
    wherever a slice holds one."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((5, 3, 4, 2, 16)) * 50).astype(dtype)
    if dtype == np.float32:
        x[0, 1, 2, 0, 3] = np.nan
        x[1, 0, 0, 1, 5] = -np.inf
    ref = np.max if name == "reduce_max" else np.min
    for axes in ((2,), (-3,), (1,)):
        (got,) = LOWERINGS[name]([x], {"axes": axes, "keepdims": keepdims})
        want = ref(x, axis=axes, keepdims=keepdims)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, ml_dtypes.bfloat16])
@pytest.mark.parametrize("shape", [(64, 4, 4, 4, 32), (4096, 9), (3, 300), (4, 5, 30)])
def test_cumsum_over_every_axis_is_numpys_sequential_scan(shape, dtype):
    """A short axis runs slice by slice (a pooling window's taps), a long one through
    np.cumsum: both the same bits as NumPy's running sum, which adds in order; exclusive
    is the running sum of the values before each, reverse the same from the end. A float
    axis longer than 1024 accumulates in float64 (float32's running sum drifts)."""
    x = (np.random.default_rng(3).standard_normal(shape) * 3).astype(dtype)
    acc = {np.dtype(np.bool_): np.int32, np.dtype(ml_dtypes.bfloat16): np.float32}
    narrow = acc.get(x.dtype, x.dtype)
    for axis in range(len(shape)):
        long = shape[axis] > 1024 and x.dtype in (np.float32, ml_dtypes.bfloat16)
        acc = np.float64 if long else narrow
        for exclusive in (False, True):
            for reverse in (False, True):
                kw = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
                (got,) = LOWERINGS["cumsum"]([x], kw)
                src = np.flip(x, axis) if reverse else x
                want = np.cumsum(src, axis=axis, dtype=acc)
                if exclusive:
                    want = np.concatenate(
                        [np.zeros_like(np.take(want, [0], axis)), np.delete(want, -1, axis)],
                        axis,
                    )
                want = np.flip(want, axis) if reverse else want
                assert got.dtype == want.dtype, kw
                np.testing.assert_array_equal(got, want, err_msg=str(kw))


@pytest.mark.parametrize("exponent", [1.0, 2.0])
def test_pow_shortcuts_agree_with_np_power(exponent):
    """x ** 2 runs as a multiply and x ** 1 returns x: both must equal np.power, at the
    edge values too."""
    x = np.array([-np.inf, -2.5, -0.0, 0.0, 1e-30, 3.5, np.inf, np.nan], np.float32)
    with np.errstate(invalid="ignore"):  # as the interpreter runs every program
        (got,) = LOWERINGS["pow"]([x, np.array(exponent, np.float32)], {})
        np.testing.assert_array_equal(got, np.power(x, np.float32(exponent)))


@pytest.mark.parametrize(
    "shape, axes",
    [
        ((100_000, 1), (0,)),  # a leading sum that keeps one value: one long sum
        ((1, 100_000), (1,)),
        ((3, 5_000), (1,)),
    ],
)
def test_long_float32_sums_keep_pairwise_accuracy(shape, axes):
    """Long sums stay on np.sum's pairwise summation: BLAS adds in a few float32 lanes and
    is off by ~3e-5 relative over 10^5 values of 0.1."""
    x = np.full(shape, 0.1, np.float32)
    (got,) = LOWERINGS["reduce_sum"]([x], {"axes": axes, "keepdims": False})
    want = np.sum(x.astype(np.float64), axis=axes)
    np.testing.assert_allclose(got, want, rtol=5e-7)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_float_sums_and_products_accumulate_in_float32(dtype):
    """As in JAX: bfloat16 added in bfloat16 stalls at 256 (a sum of 1000 ones), float16's
    cumsum at 2048."""
    x = np.ones(3000, dtype)
    (s,) = LOWERINGS["reduce_sum"]([x], {"axes": (0,), "keepdims": False})
    assert float(s) == 3000.0
    kw = {"axis": 0, "exclusive": False, "reverse": False}
    (c,) = LOWERINGS["cumsum"]([x], kw)
    assert float(c[-1]) == 3000.0
    (p,) = LOWERINGS["reduce_prod"]([np.full(10, 1.5, dtype)], {"axes": (0,), "keepdims": False})
    np.testing.assert_allclose(float(p), 1.5**10, rtol=1e-6)


def test_integer_power_with_negative_exponents_truncates_like_jax():
    """NumPy raises for integers to negative integer powers; JAX gives the truncated
    value: 1 for a base of 1, +-1 for -1, else 0."""
    x = np.array([1, -1, -1, 2, -2, 0, 3], np.int32)
    y = np.array([-3, -3, -2, -2, -1, 2, 2], np.int32)
    (got,) = LOWERINGS["pow"]([x, y], {})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [1, -1, 1, 0, 0, 0, 9])


def test_instructions_that_pass_their_input_through_run_as_no_step():
    """``identity`` and a transpose by the identity permutation read their input's slot;
    an output that so reads a program input is still an array of the declared dtype."""
    from nabla.backends.numpy import compile_program
    from nabla.core.dtypes import DType
    from nabla.core.ir import build_program

    f32 = DType.float32
    steps = [
        ("identity", (0,), {}, ((f32, (2, 3)),)),
        ("transpose", ((0, 0),), {"perm": (0, 1)}, ((f32, (2, 3)),)),
        ("transpose", ((1, 0),), {"perm": (1, 0)}, ((f32, (3, 2)),)),
    ]
    program = build_program("pass", [(f32, (2, 3), None)], steps, [(1, 0), (2, 0), (0, 0)])
    run = compile_program(program)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    same, t, ident = run([x])
    assert same is x and ident is x
    np.testing.assert_array_equal(t, x.T)
    scalar = build_program(
        "scalar", [(f32, (), None)], [("identity", (0,), {}, ((f32, ()),))], [(0, 0)]
    )
    (out,) = compile_program(scalar)([np.float64(2.5)])
    assert type(out) is np.ndarray and out.dtype == np.float32 and out == 2.5
