"""PyTorch's lazy modules: the size from the first input, then the plain layer."""

import numpy as np
import pytest

import nabla as nb

nn = nb.nn


def test_lazy_layers_become_the_plain_layers_with_the_input_s_size():
    lin = nn.LazyLinear(3, bias=False)
    assert lin.has_uninitialized_params() and list(lin.parameters()) == []
    lin.eval()
    y = lin(np.ones((2, 5), np.float32))
    assert type(lin) is nn.Linear and lin.in_features == 5 and y.shape == (2, 3)
    assert lin.weight.shape == (5, 3) and lin.bias is None and not lin.training
    bound = 1 / np.sqrt(5)  # (Linear's own initialization)
    assert np.abs(lin.weight.numpy()).max() <= bound
    net = nn.Sequential(
        nn.LazyConv2d(8, 3, padding=1), nn.ReLU(), nn.LazyBatchNorm2d(), nn.LazyConv1d(2, 1)
    )
    x = np.ones((2, 6, 6, 4), np.float32)
    with pytest.raises(ValueError):  # (the 1-D convolution on 4-D images, once made)
        net(x)
    assert [type(m).__name__ for m in net][:3] == ["Conv2d", "ReLU", "BatchNorm2d"]
    assert net[0].weight.shape == (3, 3, 4, 8) and net[2].num_features == 8
    seq = nn.Sequential(nn.LazyLinear(4), nn.LazyLinear(2))
    out = seq(np.ones((3, 7), np.float32))
    assert out.shape == (3, 2) and list(seq.state_dict()) == [
        "0.weight", "0.bias", "1.weight", "1.bias",
    ]  # fmt: skip
    step = nb.compile(lambda m, v: m(v))
    assert step(seq, np.ones((3, 7), np.float32)).shape == (3, 2)


def test_the_first_call_must_be_eager():
    lazy = nn.LazyLinear(2)
    with pytest.raises(RuntimeError, match="must be an eager call"):
        nb.compile(lambda m, v: m(v))(lazy, np.ones((1, 3), np.float32))
    assert type(lazy) is nn.LazyLinear  # (left as it was)
    assert lazy(np.ones((1, 3), np.float32)).shape == (1, 2)
