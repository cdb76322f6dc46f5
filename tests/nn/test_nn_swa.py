"""``nn.optim.swa_utils``: ``AveragedModel`` (the running mean of the snapshots, or an
exponential moving average), ``update_bn`` and ``SWALR`` (its rates are checked step by
step against recorded PyTorch runs in tests/nn/test_nn_optim_sched.py); all checked
against PyTorch's when written."""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb

nn = nb.nn
swa = nn.optim.swa_utils
RNG = np.random.default_rng(7)


def _snapshots(model, n):
    weights = []
    for _ in range(n):
        model.weight = nb.constant(RNG.standard_normal(model.weight.shape).astype(np.float32))
        weights.append(model.weight.numpy())
        yield model, weights


def test_averaged_model_is_the_mean_of_the_snapshots():
    model = nn.Linear(3, 2, key=nb.random.key(0))
    avg = swa.AveragedModel(model)
    assert avg.module is not model and int(avg.n_averaged.item()) == 0
    for m, seen in _snapshots(model, 6):
        avg.update_parameters(m)
        np.testing.assert_allclose(
            avg.module.weight.numpy(), np.mean(seen, 0), rtol=1e-5, atol=1e-6
        )
    assert int(avg.n_averaged.item()) == 6
    assert sorted(avg.state_dict()) == ["module.bias", "module.weight", "n_averaged"]
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(avg(x).numpy(), avg.module(x).numpy())


def test_averaged_model_ema_and_buffers():
    model = nn.Sequential(nn.Linear(3, 4, key=nb.random.key(1)), nn.BatchNorm1d(4))
    ema = swa.AveragedModel(model, multi_avg_fn=swa.get_ema_multi_avg_fn(0.9), use_buffers=True)
    want = None
    for _ in range(4):
        model(RNG.standard_normal((8, 3)).astype(np.float32))  # moves the running stats
        w = model[0].weight.numpy() + RNG.standard_normal((3, 4)).astype(np.float32)
        model[0].weight = nb.constant(w)
        rm = model[1].running_mean.numpy()
        want = (w, rm) if want is None else (0.9 * want[0] + 0.1 * w, 0.9 * want[1] + 0.1 * rm)
        ema.update_parameters(model)
    np.testing.assert_allclose(ema.module[0].weight.numpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ema.module[1].running_mean.numpy(), want[1], rtol=1e-5, atol=1e-6)
    # without use_buffers the copy's buffers are the model's
    plain = swa.AveragedModel(model)
    plain.update_parameters(model)
    model(RNG.standard_normal((8, 3)).astype(np.float32))
    plain.update_parameters(model)
    np.testing.assert_array_equal(plain.module[1].running_var.numpy(), model[1].running_var.numpy())
    with pytest.raises(ValueError, match="do not match the averaged copy"):
        plain.update_parameters(nn.Linear(3, 4))


def test_update_bn_recomputes_the_statistics_over_the_loader():
    net = nn.Sequential(nn.Linear(3, 4, key=nb.random.key(2)), nn.BatchNorm1d(4, momentum=0.3))
    net.eval()
    batches = [RNG.standard_normal((8, 3)).astype(np.float32) for _ in range(5)]
    swa.update_bn([(nb.constant(b), 0) for b in batches], net)
    feats = [b @ net[0].weight.numpy() + net[0].bias.numpy() for b in batches]
    np.testing.assert_allclose(
        net[1].running_mean.numpy(), np.mean([f.mean(0) for f in feats], 0), rtol=1e-5, atol=1e-6
    )
    var = np.mean([f.var(0, ddof=1) for f in feats], 0)
    np.testing.assert_allclose(net[1].running_var.numpy(), var, rtol=1e-5)
    assert net[1].momentum == 0.3 and not net.training  # restored
