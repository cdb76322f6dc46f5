"""Initializers: fans, scales, reproducibility with keys, fresh draws without."""

import math

import numpy as np
import pytest

import nabla as nb

init = nb.nn.init


def test_fans():
    assert init.calculate_fans((4, 3)) == (4, 3)
    assert init.calculate_fans((3, 3, 16, 32)) == (144, 288)
    assert init.calculate_fans((5,)) == (5, 5)
    with pytest.raises(ValueError, match="at least one dim"):
        init.calculate_fans(())


@pytest.mark.parametrize(
    "fn,std",
    [
        (init.xavier_normal, math.sqrt(2 / (200 + 300))),
        (init.xavier_uniform, math.sqrt(6 / (200 + 300)) / math.sqrt(3)),
        (init.he_normal, math.sqrt(2 / 200)),
        (init.kaiming_uniform, math.sqrt(2) * math.sqrt(3 / 200) / math.sqrt(3)),
    ],
)
def test_scales_and_keys(fn, std):
    k = nb.random.key(7)
    a = fn((200, 300), key=k).numpy()
    assert a.shape == (200, 300) and a.dtype == np.float32
    assert abs(a.std() - std) < 0.05 * std and abs(a.mean()) < 0.05 * std
    np.testing.assert_array_equal(fn((200, 300), key=k).numpy(), a)  # same key, same draw
    assert not np.array_equal(fn((200, 300)).numpy(), fn((200, 300)).numpy())  # global: fresh


def test_plain_initializers():
    u = init.uniform((1000,), -2.0, 3.0, key=nb.random.key(0)).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0
    n = init.normal((2000,), 1.0, 0.5, key=nb.random.key(0), dtype=nb.float64).numpy()
    assert n.dtype == np.float64 and abs(n.mean() - 1.0) < 0.05 and abs(n.std() - 0.5) < 0.05
    assert (
        init.zeros((2, 2)).numpy().sum() == 0 and init.ones((3,), nb.bfloat16).dtype is nb.bfloat16
    )
