"""Train an MLP JAX style: pure functions, ``value_and_grad`` and a functional AdamW, the
whole step (forward, backward, update) one ``nb.compile``d graph.

Run: python examples/mlp_jax.py
"""

import nabla as nb

try:
    from ._common import TrainingProgress, save_loss_curve
    from .mlp_pytorch import make_data
except ImportError:  # run as a script
    from _common import TrainingProgress, save_loss_curve
    from mlp_pytorch import make_data

nn = nb.nn
F = nn.functional


def init_params(sizes, key):
    keys = nb.random.split(key, len(sizes) - 1)
    return [
        {"w": nn.init.he_normal((a, b), key=keys[i]), "b": nn.init.zeros((b,))}
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))
    ]


def predict(params, x):
    for layer in params[:-1]:
        x = nb.gelu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def main(
    steps=200,
    batch_size=64,
    hidden=64,
    lr=3e-3,
    plot_path="mlp_jax_loss.png",
    progress=True,
    seed=0,
) -> dict:
    x, y = make_data(2048, seed)
    loader = nn.DataLoader((x, y), batch_size=batch_size, shuffle=True, drop_last=True, seed=seed)
    params = init_params([8, hidden, hidden, 1], nb.random.key(seed))
    opt_state = nn.optim.adamw_init(params)
    schedule = nn.optim.warmup_cosine(lr, steps // 10, steps)

    def loss_fn(params, xb, yb):
        return F.mse_loss(predict(params, xb), yb)

    @nb.compile
    def train_step(params, opt_state, xb, yb):
        loss, grads = nb.value_and_grad(loss_fn)(params, xb, yb)
        grads, _ = nn.optim.clip_grad_norm(grads, 1.0)
        params, opt_state = nn.optim.adamw_update(params, grads, opt_state, lr=schedule)
        return params, opt_state, loss

    with TrainingProgress(steps, "MLP (JAX style)", progress) as bar:
        it = iter(loader)
        for _ in range(steps):
            try:
                xb, yb = next(it)
            except StopIteration:
                it = iter(loader)
                xb, yb = next(it)
            params, opt_state, loss = train_step(params, opt_state, xb, yb)
            bar.update(loss.item(), batch_size)
    if plot_path:
        save_loss_curve(bar.losses, plot_path, "MLP, JAX style")
    return {"losses": bar.losses, "misses": train_step.stats.misses, "params": params}


if __name__ == "__main__":
    main()
