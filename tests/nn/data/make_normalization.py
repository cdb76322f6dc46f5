"""Record PyTorch's normalization layers for tests/nn/test_nn_normalization.py.

Run with torch installed: ``python tests/nn/data/make_normalization.py``. Writes
``normalization.npz`` next to this file. Inputs are stored channels last (Nabla's layout);
PyTorch is run on their channels-first transposes and its results transposed back.
"""

from pathlib import Path

import numpy as np
import torch

torch.manual_seed(0)
rng = np.random.default_rng(0)
out = {}


def cl(a):
    """channels-first torch tensor -> channels-last numpy array."""
    a = a.detach().numpy()
    return np.moveaxis(a, 1, -1) if a.ndim > 2 else a


def cf(a):
    """channels-last numpy array -> channels-first torch tensor."""
    a = np.moveaxis(a, -1, 1) if a.ndim > 2 else a
    return torch.tensor(np.ascontiguousarray(a), requires_grad=True)


def record(name, module, x, g, train=True):
    """Forward, and gradients of the input, weight and bias for the cotangent ``g``."""
    module.train(train)
    xt = cf(x)
    y = module(xt)
    y.backward(torch.tensor(np.ascontiguousarray(np.moveaxis(g, -1, 1) if g.ndim > 2 else g)))
    out[f"{name}.x"], out[f"{name}.g"], out[f"{name}.y"] = x, g, cl(y)
    out[f"{name}.dx"] = cl(xt.grad)
    if module.weight is not None:
        out[f"{name}.w"] = module.weight.detach().numpy().copy()
        out[f"{name}.b"] = module.bias.detach().numpy().copy()
        out[f"{name}.dw"] = module.weight.grad.numpy()
        out[f"{name}.db"] = module.bias.grad.numpy()


def data(*shape, scale=2.0, shift=0.5):
    return (rng.standard_normal(shape) * scale + shift).astype(np.float32)


def affine(module, c):
    with torch.no_grad():
        module.weight.copy_(torch.tensor(data(c, scale=0.5, shift=1.0)))
        module.bias.copy_(torch.tensor(data(c, scale=0.5, shift=0.0)))
    return module


# forward + gradients, training mode (batch statistics)
record("bn1d_2", affine(torch.nn.BatchNorm1d(5), 5), data(8, 5), data(8, 5, scale=1, shift=0))
record("bn1d_3", affine(torch.nn.BatchNorm1d(4), 4), data(3, 6, 4), data(3, 6, 4, scale=1, shift=0))
record(
    "bn2d", affine(torch.nn.BatchNorm2d(3), 3), data(2, 4, 5, 3), data(2, 4, 5, 3, scale=1, shift=0)
)
record(
    "gn",
    affine(torch.nn.GroupNorm(2, 6), 6),
    data(2, 3, 4, 6),
    data(2, 3, 4, 6, scale=1, shift=0),
)
record("gn_1d", affine(torch.nn.GroupNorm(3, 6), 6), data(4, 6), data(4, 6, scale=1, shift=0))
record(
    "in2d",
    affine(torch.nn.InstanceNorm2d(3, affine=True), 3),
    data(2, 4, 5, 3),
    data(2, 4, 5, 3, scale=1, shift=0),
)

# running statistics: 20 training steps, then evaluation
for name, make in [
    ("run_bn1d", lambda: torch.nn.BatchNorm1d(4)),
    ("run_bn1d_cum", lambda: torch.nn.BatchNorm1d(4, momentum=None)),
    ("run_bn2d", lambda: torch.nn.BatchNorm2d(4, momentum=0.3)),
    ("run_in2d", lambda: torch.nn.InstanceNorm2d(4, affine=True, track_running_stats=True)),
]:
    m = affine(make(), 4)
    shape = (6, 4) if "bn1d" in name else (2, 3, 3, 4)
    xs = np.stack([data(*shape, scale=1.0 + 0.1 * i, shift=0.1 * i) for i in range(20)])
    m.train()
    for x in xs:
        m(cf(x))
    m.eval()
    xe = data(*shape)
    out[f"{name}.xs"], out[f"{name}.xe"] = xs, xe
    out[f"{name}.ye"] = cl(m(cf(xe)))
    for k, v in m.state_dict().items():
        out[f"{name}.sd.{k}"] = v.numpy()

np.savez_compressed(Path(__file__).with_name("normalization.npz"), **out)
print(f"wrote {len(out)} arrays")
