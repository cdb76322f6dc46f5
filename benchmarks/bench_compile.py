"""compile: a compiled MLP training step vs the lazy (program-cached) path vs JAX jit, and the
per-call overhead of a cache hit for a tiny function.

Run: python benchmarks/bench_compile.py [--backend numpy|max|auto]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import median_seconds

import nabla as nb


def mlp_params(rng, sizes):
    return [
        {
            "w": (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32),
            "b": np.zeros((b,), np.float32),
        }
        for a, b in zip(sizes[:-1], sizes[1:])
    ]


def nabla_step_fns():
    def loss(params, x, y):
        h = x
        for layer in params[:-1]:
            h = nb.relu(h @ layer["w"] + layer["b"])
        out = h @ params[-1]["w"] + params[-1]["b"]
        return ((out - y) ** 2).mean()

    def step(params, x, y):
        value, g = nb.value_and_grad(loss)(params, x, y)
        return nb.tree_map(lambda p, d: p - 0.01 * d, params, g), value

    return step, nb.compile(step)


def bench_nabla(params_np, x_np, y_np, n):
    step, cstep = nabla_step_fns()
    to_nb = lambda tree: nb.tree_map(nb.constant, tree)  # noqa: E731
    x, y = nb.constant(x_np), nb.constant(y_np)
    state = {"lazy": to_nb(params_np), "compiled": to_nb(params_np)}

    def run(kind, fn):
        def once():
            state[kind], value = fn(state[kind], x, y)
            nb.realize(value, *nb.tree_leaves(state[kind]))

        return once

    t_lazy = median_seconds(run("lazy", step), n)
    t_comp = median_seconds(run("compiled", cstep), n)
    return t_lazy, t_comp, cstep.stats


def bench_jax(params_np, x_np, y_np, n):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def loss(params, x, y):
        h = x
        for layer in params[:-1]:
            h = jax.nn.relu(h @ layer["w"] + layer["b"])
        out = h @ params[-1]["w"] + params[-1]["b"]
        return jnp.mean((out - y) ** 2)

    @jax.jit
    def step(params, x, y):
        value, g = jax.value_and_grad(loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, d: p - 0.01 * d, params, g), value

    state = {"p": jax.tree_util.tree_map(jnp.asarray, params_np)}
    x, y = jnp.asarray(x_np), jnp.asarray(y_np)

    def once():
        state["p"], value = step(state["p"], x, y)
        value.block_until_ready()

    return median_seconds(once, n)


def bench_hit_overhead(n=5000):
    """Per-call cost of a cache hit on tiny functions: arguments only, a captured tensor
    (read again at every call), and a compiled ``Linear`` module (its two parameters) in an
    evaluation loop (``nb.no_grad()``; with grad on, its parameters make each call replay)."""
    w = nb.ones((4,))
    model = nb.nn.Linear(4, 4)
    cases = {
        "tiny function, arguments only": (nb.compile(lambda a, b: a * b + 1.0), 2),
        "tiny function, one captured tensor": (nb.compile(lambda a, b: a * b + w), 2),
        "nb.compile(Linear(4, 4)), no_grad": (nb.compile(model), 1),
    }
    out = {}
    for name, (f, arity) in cases.items():
        args = [nb.ones((4,))] * arity
        f(*args)

        def hits(f=f, args=args):
            with nb.no_grad():
                for _ in range(100):
                    f(*args)

        out[name] = median_seconds(hits, n // 100) / 100
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="numpy", choices=["numpy", "max", "auto"])
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    nb.set_backend(args.backend)
    rng = np.random.default_rng(0)
    sizes = [64, 256, 256, 10]
    params = mlp_params(rng, sizes)
    x = rng.standard_normal((128, sizes[0])).astype(np.float32)
    y = rng.standard_normal((128, sizes[-1])).astype(np.float32)

    t_lazy, t_comp, stats = bench_nabla(params, x, y, args.steps)
    t_jax = bench_jax(params, x, y, args.steps)
    hit = bench_hit_overhead()
    print(f"MLP {sizes}, batch 128, float32, backend={args.backend}")
    print(f"{'path':34s} {'ms/step':>10s}")
    print(f"{'nabla lazy (program cache)':34s} {t_lazy * 1e3:10.3f}")
    print(f"{'nabla compile':34s} {t_comp * 1e3:10.3f}")
    if t_jax is not None:
        print(f"{'jax.jit':34s} {t_jax * 1e3:10.3f}")
    else:
        print(f"{'jax.jit':34s} {'(jax not installed)':>10s}")
    print(f"compile stats: {stats}")
    print("compile cache-hit cost per call (no realize; target < 50 us):")
    for name, t in hit.items():
        print(f"  {name:36s} {t * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
