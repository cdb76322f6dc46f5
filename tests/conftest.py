import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

# The generated suites check the NumPy interpreter; MAX parity is tests/backends.
os.environ.setdefault("NABLA_BACKEND", "numpy")
# Every program the suite runs on NumPy runs both ways on its first calls, the interpreter
# and its straight-line form (backends/numpy/fast.py), and the results must agree bit for
# bit.
os.environ.setdefault("NABLA_FAST_NUMPY_CHECK", "1")
# Races decide afresh: a race recorded by an earlier run of the suite (in the compiled-model
# cache, runtime/race_records.py) would settle a test's program before it is timed.
os.environ.setdefault("NABLA_RACE_MEMORY", "0")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
