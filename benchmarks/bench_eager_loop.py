"""The PyTorch-style eager training loop, phase by phase, beside PyTorch eager.

The loop a PyTorch user writes first (no ``compile``): ``zero_grad``, forward and loss,
``loss.backward()``, ``clip_grad_norm_``, ``optimizer.step()``, ``loss.item()``. The model
is a small BatchNorm CNN on scikit-learn's 8x8 digits (batch 64, AdamW, label-smoothed
cross-entropy), the same in both frameworks. Each phase is timed on every step; the table
gives the median over the steps after one warm-up epoch, in ms.

    python benchmarks/bench_eager_loop.py [--steps 60] [--backend numpy]

PyTorch runs with one thread per process when ``OMP_NUM_THREADS=1`` is set (as for ours).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

PHASES = ("forward", "backward", "clip", "step", "item")


def _data():
    from sklearn.datasets import load_digits  # noqa: PLC0415 - the example's own dataset

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]  # NHWC
    return x, digits.target.astype(np.int64)


def _batches(x, y, steps: int, batch: int = 64):
    order = np.random.default_rng(0).permutation(len(x))
    out = []
    for k in range(steps):
        idx = order[(k * batch) % (len(x) - batch) :][:batch]
        out.append((x[idx], y[idx]))
    return out


def _time_loop(batches, step_parts) -> dict:
    """Per phase, the median ms over ``batches`` (after a warm-up pass over 10 of them)."""
    for xb, yb in batches[:10]:
        for part in step_parts(xb, yb):
            part()
    times = {p: [] for p in PHASES}
    for xb, yb in batches:
        for name, part in zip(PHASES, step_parts(xb, yb), strict=True):
            t0 = time.perf_counter()
            part()
            times[name].append(time.perf_counter() - t0)
    return {p: 1e3 * statistics.median(v) for p, v in times.items()}


def nabla_loop(batches, backend: str) -> dict:
    import nabla as nb  # noqa: PLC0415
    from nabla import nn  # noqa: PLC0415

    nb.random.seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16)
            self.conv2, self.pool = nn.Conv2d(16, 32, 3, padding=1), nn.MaxPool2d(2)
            self.gap, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(32, 10)

        def forward(self, x):
            x = self.pool(nn.functional.relu(self.bn1(self.conv1(x))))
            x = nn.functional.relu(self.conv2(x))
            return self.fc(self.gap(x).flatten(1))

    model, criterion = Net(), nn.CrossEntropyLoss(label_smoothing=0.05)
    opt = nn.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    held = {}

    def parts(xb, yb):
        def forward():
            opt.zero_grad()
            held["loss"] = criterion(model(nb.constant(xb)), nb.constant(yb))

        return (
            forward,
            lambda: held["loss"].backward(),
            lambda: nn.utils.clip_grad_norm_(model.parameters(), 1.0),
            opt.step,
            lambda: held["loss"].item(),
        )

    with nb.backend(backend):
        return _time_loop(batches, parts)


def torch_loop(batches) -> dict | None:
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return None
    from torch import nn  # noqa: PLC0415

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16)
            self.conv2, self.pool = nn.Conv2d(16, 32, 3, padding=1), nn.MaxPool2d(2)
            self.gap, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(32, 10)

        def forward(self, x):
            x = self.pool(torch.relu(self.bn1(self.conv1(x))))
            x = torch.relu(self.conv2(x))
            return self.fc(self.gap(x).flatten(1))

    model, criterion = Net(), nn.CrossEntropyLoss(label_smoothing=0.05)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    held = {}

    def parts(xb, yb):
        def forward():
            opt.zero_grad()
            x = torch.from_numpy(np.ascontiguousarray(xb.transpose(0, 3, 1, 2)))
            held["loss"] = criterion(model(x), torch.from_numpy(yb))

        return (
            forward,
            lambda: held["loss"].backward(),
            lambda: nn.utils.clip_grad_norm_(model.parameters(), 1.0),
            opt.step,
            lambda: held["loss"].item(),
        )

    return _time_loop(batches, parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--backend", default="numpy")
    args = parser.parse_args()
    x, y = _data()
    batches = _batches(x, y, args.steps)
    rows = {"nabla": nabla_loop(batches, args.backend), "PyTorch eager": torch_loop(batches)}
    print(f"PyTorch-style eager step, digits CNN, batch 64 (median ms over {args.steps} steps)")
    print(f"{'':<16}" + "".join(f"{p:>10}" for p in PHASES) + f"{'total':>10}")
    for name, row in rows.items():
        if row is None:
            print(f"{name:<16} not installed")
            continue
        cells = "".join(f"{row[p]:>10.2f}" for p in PHASES)
        print(f"{name:<16}{cells}{sum(row.values()):>10.2f}")
    if rows["PyTorch eager"] is not None:
        ratio = sum(rows["nabla"].values()) / sum(rows["PyTorch eager"].values())
        print(f"nabla / PyTorch eager: {ratio:.2f}x per step")


if __name__ == "__main__":
    main()
