"""A character-level LSTM language model trained on a text that ships with Python: the source
of the standard library's ``textwrap`` module (about 20 KB; no download).

Embedding -> LSTM (2 layers, built on ``nb.scan``: one traced body per layer) -> Linear,
trained with cross-entropy and Adam on windows of the text; each step is one compiled
graph (``opt.compile_step``). The loss falls well below the text's unigram entropy (what a
model that ignores context gets); samples are printed as it learns.

Run: python examples/char_lstm.py
"""

from __future__ import annotations

import inspect
import math
import textwrap

import numpy as np

import nabla as nb

try:
    from ._common import TrainingProgress, save_loss_curve
except ImportError:  # run as a script
    from _common import TrainingProgress, save_loss_curve

nn = nb.nn
F = nn.functional


def load_text() -> str:
    return inspect.getsource(textwrap)


def unigram_entropy(ids: np.ndarray, vocab: int) -> float:
    """Cross-entropy (nats per character) of the best model that ignores context."""
    p = np.bincount(ids, minlength=vocab) / len(ids)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


class CharLSTM(nn.Module):
    """Characters in, next-character logits out."""

    def __init__(self, vocab: int, embed: int = 32, hidden: int = 128, layers: int = 2, key=None):
        super().__init__()
        k = nb.random.split(key if key is not None else nb.random.key(0), 3)
        self.embed = nn.Embedding(vocab, embed, key=k[0])
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab, key=k[2])

    def forward(self, ids, state=None):
        out, state = self.lstm(self.embed(ids), state)
        return self.head(out), state


def sample(model, chars: str, start: str, n: int, seed: int = 0, temperature: float = 0.8):
    """``n`` characters after ``start``, drawn one at a time carrying the LSTM state."""
    index = {c: i for i, c in enumerate(chars)}
    rng = np.random.default_rng(seed)
    state = None
    ids = nb.constant(np.array([[index[c] for c in start]], np.int32))
    out = []
    with nb.no_grad():
        for _ in range(n):
            logits, state = model(ids, state)
            z = logits.numpy()[0, -1] / temperature
            p = np.exp(z - z.max())
            nxt = int(rng.choice(len(chars), p=p / p.sum()))
            out.append(chars[nxt])
            ids = nb.constant(np.array([[nxt]], np.int32))
    return start + "".join(out)


def main(
    steps: int = 300,
    batch_size: int = 32,
    seq_len: int = 64,
    hidden: int = 128,
    lr: float = 5e-3,
    plot_path: str | None = "char_lstm.png",
    progress: bool = True,
    samples: bool = True,
    seed: int = 0,
) -> dict:
    text = load_text()
    chars = "".join(sorted(set(text)))
    ids = np.array([chars.index(c) for c in text], np.int32)
    entropy = unigram_entropy(ids, len(chars))
    model = CharLSTM(len(chars), hidden=hidden, key=nb.random.key(seed))
    opt = nn.optim.Adam(model, lr=lr)

    def loss_fn(model, x, y):
        logits, _ = model(x)
        return F.cross_entropy_loss(logits.reshape(-1, len(chars)), y.reshape(-1))

    step = opt.compile_step(loss_fn)
    rng = np.random.default_rng(seed)
    with TrainingProgress(steps, "char LSTM", progress) as bar:
        for i in range(steps):
            starts = rng.integers(0, len(ids) - seq_len - 1, batch_size)
            window = np.stack([ids[s : s + seq_len + 1] for s in starts])
            loss = step(nb.constant(window[:, :-1]), nb.constant(window[:, 1:]))
            bar.update(loss.item(), batch_size)
            if samples and progress and (i + 1) % max(steps // 3, 1) == 0:
                bar.progress.console.print(
                    f"[dim]step {i + 1}:[/dim] {sample(model, chars, 'def ', 60, seed=i)!r}"
                )
    final = float(np.mean(bar.losses[-max(steps // 10, 1) :]))
    if plot_path:
        save_loss_curve(bar.losses, plot_path, f"char LSTM (unigram entropy {entropy:.2f})")
    if progress:
        print(
            f"loss {final:.2f} nats/char against a unigram entropy of {entropy:.2f} "
            f"({math.exp(final):.1f} vs {math.exp(entropy):.1f} perplexity)"
        )
    return {"losses": bar.losses, "final_loss": final, "unigram_entropy": entropy}


if __name__ == "__main__":
    main()
