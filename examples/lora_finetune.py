"""LoRA finetuning: adapt a frozen, pretrained MLP to a shifted task by training only low-rank
adapters (``A @ B`` per layer), then merge them into the weights for inference.

1. pretrain a base MLP on task A (a random teacher network);
2. task B's teacher differs by a low-rank change of its first layer;
3. train only the adapters on task B (the base is an argument that is never differentiated),
   one compiled step per batch;
4. merge the adapters (``merge_lora_weight``) and check the merged model matches, then save the
   adapters with ``save_finetune_checkpoint``.

Run: python examples/lora_finetune.py
"""

import numpy as np

import nabla as nb

try:
    from ._common import TrainingProgress, save_loss_curve
except ImportError:  # run as a script
    from _common import TrainingProgress, save_loss_curve

nn = nb.nn
F = nn.functional
ft = nn.finetune

D_IN, HIDDEN, D_OUT = 64, 256, 4


def teacher_data(n, shift_rank, seed):
    """Inputs and targets of a random teacher; ``shift_rank > 0`` adds a low-rank change."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((D_IN, HIDDEN)) / np.sqrt(D_IN)
    w2 = rng.standard_normal((HIDDEN, D_OUT)) / np.sqrt(HIDDEN)
    if shift_rank:
        shift = np.random.default_rng(seed + 100)
        w1 = (
            w1
            + 1.5
            * (
                shift.standard_normal((D_IN, shift_rank))
                @ shift.standard_normal((shift_rank, HIDDEN))
            )
            / D_IN
        )
    x = rng.standard_normal((n, D_IN))
    y = np.tanh(x @ w1) @ w2
    return x.astype(np.float32), y.astype(np.float32)


def forward(base, x, adapters=None, alpha=8.0, linear=ft.lora_linear):
    """The MLP on frozen ``base`` weights, with LoRA adapters when given."""
    if adapters is None:
        h = nb.tanh(x @ base["w1"] + base["b1"])
        return h @ base["w2"] + base["b2"]
    h = nb.tanh(linear(x, base["w1"], adapters["l1"], alpha, base["b1"]))
    return linear(h, base["w2"], adapters["l2"], alpha, base["b2"])


def pretrain(steps, seed, batch_size=64):
    x, y = teacher_data(2048, 0, seed)
    key = nb.random.split(nb.random.key(seed), 2)
    base = {
        "w1": nn.init.xavier_normal((D_IN, HIDDEN), key=key[0]),
        "b1": nn.init.zeros((HIDDEN,)),
        "w2": nn.init.xavier_normal((HIDDEN, D_OUT), key=key[1]),
        "b2": nn.init.zeros((D_OUT,)),
    }
    state = nn.optim.adamw_init(base)

    @nb.compile
    def step(base, state, xb, yb):
        loss, g = nb.value_and_grad(lambda b: F.mse_loss(forward(b, xb), yb))(base)
        base, state = nn.optim.adamw_update(base, g, state, lr=1e-2, weight_decay=0.0)
        return base, state, loss

    loader = nn.DataLoader((x, y), batch_size=batch_size, shuffle=True, drop_last=True, seed=seed)
    done = 0
    while done < steps:
        for xb, yb in loader:
            base, state, _ = step(base, state, xb, yb)
            done += 1
            if done == steps:
                break
    return base


def finetune(base, x, y, steps, rank, alpha, lr, seed, batch_size, progress, linear, title):
    keys = nb.random.split(nb.random.key(seed + 1), 2)
    shapes = {"l1": (D_IN, HIDDEN), "l2": (HIDDEN, D_OUT)}
    like = {"l1": base["w1"], "l2": base["w2"]}
    adapters = {k: ft.init_lora_adapter(like[k], rank, key=keys[i]) for i, k in enumerate(shapes)}
    state = nn.optim.adamw_init(adapters)

    def loss_fn(adapters, base, xb, yb):
        return F.mse_loss(forward(base, xb, adapters, alpha, linear), yb)

    @nb.compile
    def step(adapters, state, base, xb, yb):
        loss, g = nb.value_and_grad(loss_fn)(adapters, base, xb, yb)  # adapters only
        adapters, state = nn.optim.adamw_update(adapters, g, state, lr=lr, weight_decay=0.0)
        return adapters, state, loss

    loader = nn.DataLoader((x, y), batch_size=batch_size, shuffle=True, drop_last=True, seed=seed)
    with TrainingProgress(steps, title, progress) as bar:
        it = iter(loader)
        for _ in range(steps):
            try:
                xb, yb = next(it)
            except StopIteration:
                it = iter(loader)
                xb, yb = next(it)
            adapters, state, loss = step(adapters, state, base, xb, yb)
            bar.update(loss.item(), batch_size)
    return adapters, state, bar.losses, step


def main(
    steps=150,
    pretrain_steps=150,
    rank=4,
    alpha=8.0,
    lr=1e-2,
    batch_size=64,
    plot_path="lora_loss.png",
    checkpoint_path=None,
    progress=True,
    seed=0,
) -> dict:
    base = pretrain(pretrain_steps, seed)
    x, y = teacher_data(2048, shift_rank=2, seed=seed)
    adapters, state, losses, step = finetune(
        base,
        x,
        y,
        steps,
        rank,
        alpha,
        lr,
        seed,
        batch_size,
        progress,
        ft.lora_linear,
        "LoRA finetune",
    )
    n_base = sum(int(np.prod(v.shape)) for v in base.values())
    n_lora = sum(int(np.prod(v.shape)) for v in nb.tree_leaves(adapters))
    merged = dict(base)
    merged["w1"] = ft.merge_lora_weight(base["w1"], adapters["l1"], alpha)
    merged["w2"] = ft.merge_lora_weight(base["w2"], adapters["l2"], alpha)
    xt = nb.constant(x[:256])
    merge_error = float(
        nb.abs(forward(merged, xt) - forward(base, xt, adapters, alpha)).max().item()
    )
    if progress:
        print(
            f"trainable {n_lora} of {n_base + n_lora} parameters ({n_lora / n_base:.1%} of the "
            f"base); loss {losses[0]:.4f} -> {losses[-1]:.4f}; merged max error {merge_error:.2e}"
        )
    if plot_path:
        save_loss_curve(losses, plot_path, f"LoRA finetuning (rank {rank})")
    if checkpoint_path:
        ft.save_finetune_checkpoint(
            checkpoint_path, adapters, state, metadata={"rank": rank, "alpha": alpha}
        )
    return {
        "losses": losses,
        "misses": step.stats.misses,
        "merge_error": merge_error,
        "trainable": n_lora,
        "base": n_base,
        "adapters": adapters,
    }


if __name__ == "__main__":
    main(checkpoint_path="lora_adapters.safetensors")
