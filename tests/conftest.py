import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

# The generated suites check the NumPy interpreter; MAX parity is tests/backends.
os.environ.setdefault("NABLA_BACKEND", "numpy")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
