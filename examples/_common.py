"""Helpers shared by the training examples: a rich progress bar and a loss-curve plot."""

from __future__ import annotations

import time
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class TrainingProgress:
    """A progress bar showing step, loss and throughput (examples per second).

    Use as a context manager; ``update(loss, batch_size)`` after each step. With
    ``enabled=False`` it only records the losses (tests run quietly).
    """

    def __init__(self, total: int, description: str = "training", enabled: bool = True):
        self.total, self.enabled, self.losses = total, enabled, []
        self.examples, self.start = 0, time.perf_counter()
        self.progress = (
            Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TextColumn("loss {task.fields[loss]:.4f}"),
                TextColumn("{task.fields[rate]:,.0f} ex/s"),
                TimeElapsedColumn(),
            )
            if enabled
            else None
        )
        self.task = None
        self.description = description

    def __enter__(self):
        if self.progress is not None:
            self.progress.start()
            self.task = self.progress.add_task(
                self.description, total=self.total, loss=float("nan"), rate=0.0
            )
        self.start = time.perf_counter()
        return self

    def update(self, loss: float, batch_size: int) -> None:
        self.losses.append(float(loss))
        self.examples += batch_size
        if self.progress is not None:
            rate = self.examples / max(time.perf_counter() - self.start, 1e-9)
            self.progress.update(self.task, advance=1, loss=float(loss), rate=rate)

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()
        return False


def save_loss_curve(losses, path, title: str) -> Path:
    """Plot ``losses`` against the step and save a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(losses) + 1), losses)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
