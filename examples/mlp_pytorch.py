"""Train an MLP PyTorch style: a ``Module``, ``loss.backward()``, ``opt.step()``.

The model regresses a smooth function of 8 inputs. The forward pass and loss are one
``nb.compile``d function (traced once); ``backward`` fills each parameter's ``.grad`` and
``AdamW.step`` rebinds the parameters to their new values, all lazily evaluated per step.

Run: python examples/mlp_pytorch.py
"""

import numpy as np

import nabla as nb

try:
    from ._common import TrainingProgress, save_loss_curve
except ImportError:  # run as a script
    from _common import TrainingProgress, save_loss_curve

nn = nb.nn
F = nn.functional


class MLP(nn.Module):
    def __init__(self, sizes, key):
        super().__init__()
        keys = nb.random.split(key, len(sizes) - 1)
        self.layers = [
            nn.Linear(a, b, key=keys[i]) for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))
        ]

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = nb.gelu(layer(x))
        return self.layers[-1](x)


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 8)).astype(np.float32)
    y = (np.sin(3 * x[:, :1]) * x[:, 1:2] + np.cos(2 * x[:, 2:3] + x[:, 3:4])).astype(np.float32)
    return x, y


def main(
    steps=200,
    batch_size=64,
    hidden=64,
    lr=1e-2,
    plot_path="mlp_pytorch_loss.png",
    progress=True,
    seed=0,
) -> dict:
    x, y = make_data(2048, seed)
    loader = nn.DataLoader((x, y), batch_size=batch_size, shuffle=True, drop_last=True, seed=seed)
    model = MLP([8, hidden, hidden, 1], key=nb.random.key(seed))
    opt = nn.optim.AdamW(model, lr=nn.optim.warmup_cosine(lr, steps // 10, steps))

    @nb.compile
    def forward_loss(model, xb, yb):
        return F.mse_loss(model(xb), yb)

    with TrainingProgress(steps, "MLP (PyTorch style)", progress) as bar:
        it = iter(loader)
        for _ in range(steps):
            try:
                xb, yb = next(it)
            except StopIteration:
                it = iter(loader)
                xb, yb = next(it)
            opt.zero_grad()
            loss = forward_loss(model, xb, yb)
            loss.backward()
            opt.step()
            bar.update(loss.item(), batch_size)
    if plot_path:
        save_loss_curve(bar.losses, plot_path, "MLP, PyTorch style")
    return {"losses": bar.losses, "misses": forward_loss.stats.misses, "model": model}


if __name__ == "__main__":
    main()
