"""Parametrizations (``nn.parametrize``, ``nn.utils.parametrizations``): a module's tensor
computed from its originals on every read, with PyTorch's names in ``state_dict``; weight
and spectral normalization by their definitions (both checked against PyTorch's when
written: forward, gradients, SGD steps, and the power iteration's buffers)."""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb

nn = nb.nn
P = nn.parametrize
RNG = np.random.default_rng(3)
X = RNG.standard_normal((5, 4)).astype(np.float32)


def test_weight_norm_keeps_each_output_unit_s_norm_in_g():
    layer = nn.Linear(4, 3, key=nb.random.key(0))
    before = layer(X).numpy()
    w0 = layer.weight.numpy()
    P.weight_norm(layer)
    assert sorted(layer.state_dict()) == [
        "bias",
        "parametrizations.weight.original0",
        "parametrizations.weight.original1",
    ]
    g = layer.parametrizations.weight.original0.numpy()
    # PyTorch's dim=0 is the output unit: axis 1 of our (in, out) Linear weight
    np.testing.assert_allclose(g, np.linalg.norm(w0, axis=0, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(layer(X).numpy(), before, rtol=1e-5, atol=1e-6)
    # the gradients reach g and v; one SGD step through compile_step moves them
    grads = nb.grad(lambda m: nb.sum(m(X) ** 2))(layer)
    assert grads.parametrizations.weight.original0.shape == (1, 3)
    opt = nn.optim.SGD(layer, lr=0.1)
    step = opt.compile_step(lambda m, x: nb.sum(m(x) ** 2))
    step(X)
    step(X)
    assert step.stats.misses == 1
    v, g = (
        layer.parametrizations.weight.__getattr__(n).numpy() for n in ("original1", "original0")
    )
    np.testing.assert_allclose(layer.weight.numpy(), g * v / np.linalg.norm(v, axis=0), rtol=1e-5)
    P.remove_parametrizations(layer, "weight")
    assert sorted(layer.state_dict()) == ["bias", "weight"] and not P.is_parametrized(layer)


def test_weight_norm_axes_follow_pytorch_s_layout():
    conv = P.weight_norm(nn.Conv2d(3, 4, 3, key=nb.random.key(1)))  # HWIO: out is axis 3
    assert conv.parametrizations.weight.original0.shape == (1, 1, 1, 4)
    conv1 = P.weight_norm(nn.Conv1d(3, 4, 3, key=nb.random.key(1)))  # PyTorch's (O, I, K)
    assert conv1.parametrizations.weight.original0.shape == (4, 1, 1)
    whole = nn.utils.weight_norm(nn.Linear(4, 3), dim=None)
    assert whole.parametrizations.weight.original0.shape == ()


def test_spectral_norm_divides_by_the_largest_singular_value():
    layer = nn.utils.parametrizations.spectral_norm(
        nn.Linear(6, 5, key=nb.random.key(2)), key=nb.random.key(3)
    )
    original = layer.parametrizations.weight.original.numpy()
    sigma = np.linalg.svd(original, compute_uv=False)[0]
    for _ in range(30):  # training-mode reads iterate the estimate in place
        w = layer.weight
    np.testing.assert_allclose(w.numpy(), original / sigma, rtol=1e-4)
    names = sorted(layer.state_dict())
    assert names == [
        "bias",
        "parametrizations.weight.0._u",
        "parametrizations.weight.0._v",
        "parametrizations.weight.original",
    ]
    layer.eval()  # evaluation: the buffers stay
    u = layer.parametrizations.weight[0]._u.numpy().copy()
    layer(X[:, :1].repeat(6, 1))
    np.testing.assert_array_equal(layer.parametrizations.weight[0]._u.numpy(), u)
    # in a compiled training step the buffers update in place, one trace for every step
    layer.train()
    opt = nn.optim.Adam(layer, lr=1e-2)
    step = opt.compile_step(lambda m, x: nb.mean(m(x) ** 2))
    xs = RNG.standard_normal((8, 6)).astype(np.float32)
    for _ in range(3):
        step(xs)
    assert step.stats.misses == 1
    assert not np.array_equal(layer.parametrizations.weight[0]._u.numpy(), u)


class _Symmetric(nn.Module):
    def forward(self, x):
        return nb.triu(x) + nb.swap_axes(nb.triu(x, 1), 0, 1)

    def right_inverse(self, a):
        return nb.triu(a)


class _Double(nn.Module):
    def forward(self, x):
        return 2.0 * x


def test_register_parametrization_chains_assigns_and_removes():
    layer = nn.Linear(3, 3, key=nb.random.key(4))
    P.register_parametrization(layer, "weight", _Symmetric())
    w = layer.weight.numpy()
    np.testing.assert_array_equal(w, w.T)
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    layer.weight = nb.constant(a + a.T)  # through right_inverse: the upper triangle kept
    np.testing.assert_array_equal(layer.weight.numpy(), a + a.T)
    P.register_parametrization(layer, "weight", _Double())  # applied to the first's result
    np.testing.assert_array_equal(layer.weight.numpy(), 2 * (a + a.T))
    assert P.is_parametrized(layer, "weight") and not P.is_parametrized(layer, "bias")
    P.remove_parametrizations(layer, "weight", leave_parametrized=False)
    np.testing.assert_array_equal(layer.weight.numpy(), np.triu(a + a.T))
    with pytest.raises(ValueError, match="Linear has no parameter or buffer 'nothing'"):
        P.register_parametrization(layer, "nothing", _Double())
    with pytest.raises(ValueError, match="Linear.weight is not parametrized"):
        P.remove_parametrizations(layer, "weight")
