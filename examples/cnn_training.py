"""Train a small CNN on a synthetic image dataset (NHWC): classify which of four bar patterns
(horizontal, vertical, diagonal, anti-diagonal) is drawn in a noisy 12x12 image.

Conv2d -> ReLU -> MaxPool2d -> Conv2d -> ReLU -> AvgPool2d -> Flatten -> Linear, trained with
cross-entropy and Adam; the whole step is one compiled graph.

Run: python examples/cnn_training.py
"""

import numpy as np

import nabla as nb

try:
    from ._common import TrainingProgress, save_loss_curve
except ImportError:  # run as a script
    from _common import TrainingProgress, save_loss_curve

nn = nb.nn
F = nn.functional


def make_images(n, size=12, noise=0.3, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    images = rng.normal(0.0, noise, (n, size, size, 1)).astype(np.float32)
    idx = np.arange(size)
    for i, c in enumerate(labels):
        k = rng.integers(2, size - 2)
        if c == 0:
            images[i, k, :, 0] += 1.0
        elif c == 1:
            images[i, :, k, 0] += 1.0
        elif c == 2:
            images[i, idx, idx, 0] += 1.0
        else:
            images[i, idx, size - 1 - idx, 0] += 1.0
    return images, labels.astype(np.int32)


def make_model(key, channels=8):
    k = nb.random.split(key, 3)
    return nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1, key=k[0]),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(channels, 2 * channels, 3, padding=1, key=k[1]),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * channels * 9, 4, key=k[2]),
    )


def main(
    steps=80, batch_size=32, channels=8, lr=5e-3, plot_path="cnn_loss.png", progress=True, seed=0
) -> dict:
    images, labels = make_images(1024, seed=seed)
    loader = nn.DataLoader(
        (images, labels), batch_size=batch_size, shuffle=True, drop_last=True, seed=seed
    )
    model = make_model(nb.random.key(seed), channels)
    opt_state = nn.optim.adam_init(model)

    def loss_fn(model, xb, yb):
        return F.cross_entropy_loss(model(xb), yb)

    @nb.compile
    def train_step(model, opt_state, xb, yb):
        loss, grads = nb.value_and_grad(loss_fn)(model, xb, yb)
        model, opt_state = nn.optim.adam_update(model, grads, opt_state, lr=lr)
        return model, opt_state, loss

    with TrainingProgress(steps, "CNN", progress) as bar:
        it = iter(loader)
        for _ in range(steps):
            try:
                xb, yb = next(it)
            except StopIteration:
                it = iter(loader)
                xb, yb = next(it)
            model, opt_state, loss = train_step(model, opt_state, xb, yb)
            bar.update(loss.item(), batch_size)
    test_x, test_y = make_images(256, seed=seed + 1)
    predictions = model.eval()(nb.constant(test_x)).argmax(axis=-1).numpy()
    accuracy = float((predictions == test_y).mean())
    if plot_path:
        save_loss_curve(bar.losses, plot_path, f"CNN (test accuracy {accuracy:.0%})")
    if progress:
        print(f"test accuracy {accuracy:.1%}")
    return {"losses": bar.losses, "misses": train_step.stats.misses, "accuracy": accuracy}


if __name__ == "__main__":
    main()
