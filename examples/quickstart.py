"""Nabla in one page: lazy tensors, grad, vmap, jacobians and a compiled training loop.

Run: python examples/quickstart.py
"""

import numpy as np

import nabla as nb


def main():
    # Lazy tensors: shapes are known at once, values are computed when needed.
    x = nb.arange(6, dtype=nb.float32).reshape(2, 3)
    y = nb.exp(x) * 2.0 + x.sum(axis=0)
    print("y.shape", y.shape, "(not computed yet:", not y.is_realized, ")")
    print(y)

    # JAX-style transforms compose.
    f = lambda v: (nb.sin(v) * v).sum()  # noqa: E731
    v = nb.constant([0.5, 1.0, 2.0])
    print("grad      ", nb.grad(f)(v).numpy())
    print("hessian   \n", nb.hessian(f)(v).numpy())
    print("per-example grads", nb.vmap(nb.grad(f))(nb.stack([v, 2 * v])).numpy())

    # A small regression MLP trained with a compiled step (traced once, then reused).
    rng = np.random.default_rng(0)
    X = nb.constant(rng.standard_normal((256, 4)).astype(np.float32))
    true_w = nb.constant(rng.standard_normal((4, 1)).astype(np.float32))
    Y = nb.tanh(X @ true_w)
    params = {
        "w1": nb.constant(rng.standard_normal((4, 32)).astype(np.float32) * 0.5),
        "b1": nb.zeros((32,)),
        "w2": nb.constant(rng.standard_normal((32, 1)).astype(np.float32) * 0.2),
    }

    def loss(p, x, y):
        h = nb.relu(x @ p["w1"] + p["b1"])
        return ((h @ p["w2"] - y) ** 2).mean()

    @nb.compile
    def step(p, x, y):
        value, g = nb.value_and_grad(loss)(p, x, y)
        return nb.tree_map(lambda a, b: a - 0.1 * b, p, g), value

    for i in range(201):
        params, value = step(params, X, Y)
        if i % 50 == 0:
            print(f"step {i:3d}  loss {value.item():.5f}")
    print("compile stats", step.stats)

    # PyTorch style works too.
    w = nb.constant([1.0, -2.0])
    w.requires_grad = True
    ((w * w).sum() + w[0]).backward()
    print("w.grad", w.grad.numpy())


if __name__ == "__main__":
    main()
