"""The NumPy interpreter's process-level behaviour (its per-op results are checked through
the op registry in tests/ops)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nabla.backends.numpy import _glibc

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
