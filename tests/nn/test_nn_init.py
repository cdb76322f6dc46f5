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


def test_in_place_initializers_take_pytorch_s_fans_on_weights_in_its_layout():
    """Conv1d, ConvTranspose2d, LSTM and GRU hold PyTorch's (out, in, *kernel) layout:
    ``kaiming_uniform_`` had used our (..., in, out) rule on them (a 3x smaller bound on a
    Conv1d). Shapes of no layer keep ours."""
    import math

    from nabla.nn import init

    conv = nb.nn.Conv1d(16, 64, 7)
    init.kaiming_uniform_(conv.weight, a=math.sqrt(5))
    bound = 1.0 / math.sqrt(16 * 7)  # PyTorch's: gain sqrt(2 / 6) * sqrt(3 / fan_in)
    got = np.abs(conv.weight.numpy()).max()
    assert 0.97 * bound < got <= bound
    init.xavier_uniform_(conv.weight)
    assert np.abs(conv.weight.numpy()).max() <= math.sqrt(6.0 / (16 * 7 + 64 * 7))
    lstm = nb.nn.LSTM(10, 20)
    init.kaiming_normal_(lstm.weight_ih_l0, mode="fan_in")  # (80, 10): fan_in 10
    assert abs(lstm.weight_ih_l0.numpy().std() - math.sqrt(2.0 / 10)) < 0.05
    plain = nb.zeros((64, 16, 7))  # not a layer's: our (..., in, out) rule
    init.kaiming_uniform_(plain, a=math.sqrt(5))
    assert np.abs(plain.numpy()).max() <= 1.0 / math.sqrt(64 * 16)
    assert init.he_uniform((0, 5)).shape == (0, 5)  # (a bare ZeroDivisionError)
    assert init.kaiming_normal_(nb.zeros((3, 3, 0, 8))).shape == (3, 3, 0, 8)
    with pytest.raises(ValueError, match="std must be >= 0"):
        init.normal_(nb.zeros((2,)), 0.0, -1.0)


def test_pytorch_layout_weights_keep_pytorch_s_fans_in_copies_and_in_every_such_layer():
    """The mark that gives a weight PyTorch's fans is by identity: a deep-copied or
    unpickled Conv1d/LSTM had lost it (a 3-4x smaller init); the cells, MultiheadAttention's
    projections and Embedding had never had it. Each layer now says which of its
    parameters are in PyTorch's layout, and copies are marked again."""
    import copy
    import math
    import pickle

    from nabla.nn import init

    def std_after(w, mode="fan_in"):
        init.kaiming_normal_(w, mode=mode, key=nb.random.key(0))
        return float(w.numpy().std())

    conv = nb.nn.Conv1d(32, 64, 5)
    for layer in (conv, copy.deepcopy(conv), pickle.loads(pickle.dumps(conv))):
        assert abs(std_after(layer.weight) - math.sqrt(2 / (32 * 5))) < 0.01
    lstm = copy.deepcopy(nb.nn.LSTM(16, 32))
    assert abs(std_after(lstm.weight_ih_l0) - math.sqrt(2 / 16)) < 0.02
    cell = nb.nn.GRUCell(16, 32)
    assert abs(std_after(cell.weight_ih) - math.sqrt(2 / 16)) < 0.02
    mha = nb.nn.MultiheadAttention(64, 4, kdim=16)
    assert abs(std_after(mha.k_proj_weight) - math.sqrt(2 / 16)) < 0.02
    assert abs(std_after(mha.out_proj.weight) - math.sqrt(2 / 64)) < 0.02
    emb = nb.nn.Embedding(500, 32)  # (num, dim): PyTorch's fan_in is dim
    assert abs(std_after(emb.weight) - math.sqrt(2 / 32)) < 0.02
    assert abs(std_after(emb.weight, "fan_out") - math.sqrt(2 / 500)) < 0.005
    lin = nb.nn.Linear(16, 64)  # ours, (in, out): fan_in 16
    assert abs(std_after(lin.weight) - math.sqrt(2 / 16)) < 0.02
    # fewer than 2 dims: no fans, as PyTorch refuses (a loop over parameters() filled
    # every bias)
    for fill in (init.xavier_uniform_, init.xavier_normal_, init.kaiming_uniform_):
        with pytest.raises(ValueError, match="fewer than 2 dims"):
            fill(lin.bias)
