"""The NumPy interpreter's process-level behaviour (its per-op results are checked through
the op registry in tests/ops)."""

from __future__ import annotations

import os
import subprocess
import sys

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


def _faults_per_call(reuse: str) -> float:
    env = {**os.environ, "NABLA_MALLOC_REUSE": reuse}
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
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_matmul_over_one_element_is_the_outer_product(a_shape, b_shape, dtype):
    """A contraction over K=1 runs as a multiply or an einsum, never NumPy's batched GEMM;
    every path must give matmul's answer, batch broadcasting included."""
    rng = np.random.default_rng(0)
    a = rng.integers(-9, 9, a_shape).astype(dtype)
    b = rng.integers(-9, 9, b_shape).astype(dtype)
    (got,) = LOWERINGS["matmul"]([a, b], {})
    np.testing.assert_array_equal(got, np.matmul(a, b))
