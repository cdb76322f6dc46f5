"""Transforms compose, and ``nb.compile`` traces a function once per signature: vmap, grad,
jacobians, compile statistics and dynamic dims.

Run: python examples/transforms_compile.py
"""

import time

import numpy as np

import nabla as nb


def main(steps: int = 20, verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)

    def predict(w, x):
        return nb.tanh(x @ w)

    def loss(w, x, y):
        return ((predict(w, x) - y) ** 2).mean()

    rng = np.random.default_rng(0)
    w = nb.constant(rng.standard_normal((4, 2)).astype(np.float32) * 0.5)
    x = nb.constant(rng.standard_normal((32, 4)).astype(np.float32))
    y = nb.constant(rng.standard_normal((32, 2)).astype(np.float32))

    # Composition: per-example Jacobians of the prediction w.r.t. the weights.
    jac = nb.vmap(nb.jacrev(predict), in_axes=(None, 0))(w, x[:3])
    say("per-example jacobians", jac.shape)

    # A compiled gradient step: traced once, then reused.
    @nb.compile
    def step(w, x, y):
        value, g = nb.value_and_grad(loss)(w, x, y)
        return w - 0.2 * g, value

    losses = []
    t0 = time.perf_counter()
    for _ in range(steps):
        w, value = step(w, x, y)
        losses.append(value.item())
    say(
        f"{steps} compiled steps in {time.perf_counter() - t0:.3f}s; loss {losses[0]:.4f} -> "
        f"{losses[-1]:.4f}"
    )
    say("stats", step.stats)

    # Dynamic dims: the batch size is symbolic while tracing, so one trace serves every
    # batch size (each later size is a cache hit).
    @nb.compile(dynamic_dims={0: {0: "batch"}})
    def row_norms(v):
        return (v * v).sum(axis=1).sqrt()

    for n in (3, 5, 9, 17):
        row_norms(nb.ones((n, 4)))
    say("dynamic dims: misses", row_norms.stats.misses, "for 4 batch sizes")
    return {
        "losses": losses,
        "misses": step.stats.misses,
        "dyn_misses": row_norms.stats.misses,
        "jac_shape": jac.shape,
    }


if __name__ == "__main__":
    main()
