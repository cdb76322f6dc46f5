"""Train a small CNN with BatchNorm on real data: scikit-learn's bundled handwritten digits
(1,797 8x8 grayscale images, ten classes; no download).

Conv2d -> BatchNorm2d -> ReLU -> Conv2d -> BatchNorm2d -> ReLU -> MaxPool2d -> Flatten ->
Linear, trained with cross-entropy and Adam on 80% of the images; the other 20% are held out
and only evaluated (in eval mode: BatchNorm uses its running statistics). Each training step
is one compiled graph (`opt.compile_step`), BatchNorm's running statistics updated in place.
Shows a progress bar, saves a loss/accuracy plot, prints the test accuracy (about 98%).

Run: python examples/digits_cnn.py   (needs scikit-learn for the data: pip install scikit-learn)
"""

from __future__ import annotations

import numpy as np

import nabla as nb

try:
    from ._common import TrainingProgress
except ImportError:  # run as a script
    from _common import TrainingProgress

nn = nb.nn
F = nn.functional


def load_split(seed: int = 0, test_fraction: float = 0.2):
    """The digits as NHWC float32 images in [0, 1] and int32 labels, split into a training
    and a held-out test part (shuffled once, reproducibly)."""
    from sklearn.datasets import load_digits  # an optional dependency of this example only

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]  # (1797, 8, 8, 1)
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(len(labels) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return (images[train], labels[train]), (images[test], labels[test])


class DigitsCNN(nn.Module):
    """Two 3x3 convolutions with BatchNorm over NHWC images, a pooling and a linear head."""

    def __init__(self, channels: int = 16, key=None):
        super().__init__()
        k = nb.random.split(key if key is not None else nb.random.key(0), 3)
        self.conv1 = nn.Conv2d(1, channels, 3, padding=1, bias=False, key=k[0])
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1, bias=False, key=k[1])
        self.bn2 = nn.BatchNorm2d(2 * channels)
        self.head = nn.Linear(2 * channels * 16, 10, key=k[2])

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.max_pool2d(x, 2)
        return self.head(x.reshape(x.shape[0], -1))


def accuracy(model, images, labels) -> float:
    with nb.no_grad():
        predictions = model(nb.constant(images)).argmax(axis=-1).numpy()
    return float((predictions == labels).mean())


def main(
    epochs: int = 6,
    batch_size: int = 64,
    channels: int = 16,
    lr: float = 3e-3,
    plot_path: str | None = "digits_cnn.png",
    progress: bool = True,
    seed: int = 0,
) -> dict:
    (train_x, train_y), (test_x, test_y) = load_split(seed)
    loader = nn.DataLoader(
        (train_x, train_y), batch_size=batch_size, shuffle=True, drop_last=True, seed=seed
    )
    model = DigitsCNN(channels, key=nb.random.key(seed))
    opt = nn.optim.Adam(model, lr=lr)

    def loss_fn(model, xb, yb):
        return F.cross_entropy_loss(model(xb), yb)

    step = opt.compile_step(loss_fn)
    steps = epochs * len(loader)
    test_curve = []
    with TrainingProgress(steps, "digits CNN", progress) as bar:
        for _ in range(epochs):
            model.train()
            for xb, yb in loader:
                bar.update(step(xb, yb).item(), batch_size)
            model.eval()
            test_curve.append(accuracy(model, test_x, test_y))
    result = {
        "losses": bar.losses,
        "test_accuracy": test_curve[-1],
        "test_curve": test_curve,
        "train_accuracy": accuracy(model, train_x, train_y),
        "retraces": step.stats.misses if hasattr(step, "stats") else None,
    }
    if plot_path:
        _plot(bar.losses, test_curve, len(loader), plot_path)
    if progress:
        print(
            f"test accuracy {result['test_accuracy']:.1%} on {len(test_y)} held-out images "
            f"(train {result['train_accuracy']:.1%})"
        )
    return result


def _plot(losses, test_curve, steps_per_epoch: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    a.plot(losses)
    a.set(xlabel="step", ylabel="training loss", yscale="log", title="loss")
    epochs = np.arange(1, len(test_curve) + 1) * steps_per_epoch
    b.plot(epochs, test_curve, marker="o")
    b.set(xlabel="step", ylabel="test accuracy", title="held-out accuracy", ylim=(0.8, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
