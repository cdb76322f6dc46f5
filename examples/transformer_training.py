"""Train a small causal transformer language model, in both styles.

The data are token sequences that count upward modulo the vocabulary from a random start
(``5, 6, 7, ..., 15, 0, 1``): next-token prediction is learnable from context, so the loss
falls from ``log(vocab)`` towards zero. The model is token + position embeddings, pre-norm
``TransformerEncoderLayer``s with a causal mask, and a linear head.

- ``style="jax"``: ``value_and_grad`` + functional AdamW, the whole step one compiled graph.
- ``style="pytorch"``: ``loss.backward()`` + ``AdamW.step()`` around a compiled forward.
- ``style="compile_step"``: PyTorch-style in-place updates from ``opt.compile_step(loss_fn)``,
  forward, backward and update in one compiled graph.

Run: python examples/transformer_training.py [jax|pytorch|compile_step]
"""

import sys

import numpy as np

import nabla as nb

try:
    from ._common import TrainingProgress, save_loss_curve
except ImportError:  # run as a script
    from _common import TrainingProgress, save_loss_curve

nn = nb.nn
F = nn.functional


class TinyLM(nn.Module):
    def __init__(self, vocab, seq_len, d_model, nhead, layers, key):
        super().__init__()
        keys = nb.random.split(key, layers + 3)
        self.tok = nn.Embedding(vocab, d_model, key=keys[0])
        self.pos = nn.Embedding(seq_len, d_model, key=keys[1])
        self.blocks = [
            nn.TransformerEncoderLayer(
                d_model,
                nhead,
                4 * d_model,
                dropout=0.0,
                activation="gelu",
                norm_first=True,
                key=keys[2 + i],
            )
            for i in range(layers)
        ]
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, key=keys[-1])
        self.seq_len = seq_len

    def forward(self, tokens):
        h = self.tok(tokens) + self.pos(nb.arange(tokens.shape[1]))
        for block in self.blocks:
            h = block(h, is_causal=True)
        return self.head(self.norm(h))


def make_batches(n, seq_len, vocab, seed=0):
    rng = np.random.default_rng(seed)
    start = rng.integers(0, vocab, (n, 1))
    seq = (start + np.arange(seq_len + 1)) % vocab
    return seq[:, :-1].astype(np.int32), seq[:, 1:].astype(np.int32)


def main(
    style="jax",
    steps=150,
    batch_size=16,
    seq_len=16,
    vocab=16,
    d_model=32,
    nhead=4,
    layers=2,
    lr=3e-3,
    plot_path="transformer_loss.png",
    progress=True,
    seed=0,
) -> dict:
    x, y = make_batches(batch_size * 16, seq_len, vocab, seed)
    loader = nn.DataLoader((x, y), batch_size=batch_size, shuffle=True, drop_last=True, seed=seed)
    model = TinyLM(vocab, seq_len, d_model, nhead, layers, nb.random.key(seed))
    schedule = nn.optim.warmup_cosine(lr, max(1, steps // 10), steps, final_lr=lr / 10)

    def loss_fn(model, xb, yb):
        return F.cross_entropy_loss(model(xb), yb)

    if style == "jax":
        opt_state = nn.optim.adamw_init(model)

        @nb.compile
        def step_fn(model, opt_state, xb, yb):
            loss, grads = nb.value_and_grad(loss_fn)(model, xb, yb)
            model, opt_state = nn.optim.adamw_update(model, grads, opt_state, lr=schedule)
            return model, opt_state, loss
    elif style == "pytorch":
        opt = nn.optim.AdamW(model, lr=schedule)
        step_fn = nb.compile(loss_fn)
    elif style == "compile_step":
        step_fn = nn.optim.AdamW(model, lr=schedule).compile_step(loss_fn)
    else:
        raise ValueError(f"style must be 'jax', 'pytorch' or 'compile_step', got {style!r}")

    with TrainingProgress(steps, f"transformer ({style})", progress) as bar:
        it = iter(loader)
        for _ in range(steps):
            try:
                xb, yb = next(it)
            except StopIteration:
                it = iter(loader)
                xb, yb = next(it)
            if style == "jax":
                model, opt_state, loss = step_fn(model, opt_state, xb, yb)
            elif style == "compile_step":
                loss = step_fn(xb, yb)  # updates model in place
            else:
                opt.zero_grad()
                loss = step_fn(model, xb, yb)
                loss.backward()
                opt.step()
            bar.update(loss.item(), batch_size * seq_len)
    if plot_path:
        save_loss_curve(bar.losses, plot_path, f"tiny transformer LM ({style} style)")
    return {"losses": bar.losses, "misses": step_fn.stats.misses, "model": model}


if __name__ == "__main__":
    main(style=sys.argv[1] if len(sys.argv) > 1 else "jax")
