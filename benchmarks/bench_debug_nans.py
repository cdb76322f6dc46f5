"""What ``nb.debug_nans`` costs: off, and on.

Off, an op call and a compiled step pay two attribute reads (is a switch on?); compare the
"off" rows with ``bench_overhead.py`` on a build without the feature. On, every op records
its caller's line (a frame walk) and every realized program's outputs are checked for NaN
(one pass over each output); a compiled step records nothing after its first trace.

Rows: recording one lazy op (``x + y``, no realization); an MLP training step (784-256-10,
batch 64, SGD) eager and under ``nb.compile``, realized each step; each off and on, the
ratio on/off side by side. Run: ``python benchmarks/bench_debug_nans.py`` (about 20 s).
"""

from __future__ import annotations

import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import nabla as nb  # noqa: E402


def best_us(fn, calls: int, repeats: int = 7) -> float:
    """The best of ``repeats`` batches of ``calls`` calls, in microseconds per call."""
    for _ in range(calls):
        fn()
    best = float("inf")
    for _ in range(repeats):
        gc.disable()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
        gc.enable()
    return best * 1e6


def mlp_step():
    rng = np.random.default_rng(0)
    params = {
        "w1": nb.constant(rng.normal(0, 0.05, (784, 256)).astype(np.float32)),
        "b1": nb.zeros((256,)),
        "w2": nb.constant(rng.normal(0, 0.05, (256, 10)).astype(np.float32)),
        "b2": nb.zeros((10,)),
    }
    x = nb.constant(rng.normal(size=(64, 784)).astype(np.float32))
    y = nb.constant(rng.integers(0, 10, 64).astype(np.int32))

    def loss(p, x, y):
        h = nb.relu(x @ p["w1"] + p["b1"])
        logits = h @ p["w2"] + p["b2"]
        return nb.nn.functional.cross_entropy_loss(logits, y)

    def step(p, x, y):
        value, g = nb.value_and_grad(loss)(p, x, y)
        return value, {k: p[k] - 0.01 * g[k] for k in p}

    return step, params, x, y


def main() -> None:
    a = nb.constant(np.ones((4, 4), np.float32))
    b = nb.constant(np.ones((4, 4), np.float32))
    rows = []

    def record():
        a + b

    step, params, x, y = mlp_step()
    compiled = nb.compile(step)

    def eager_step():
        value, _ = step(params, x, y)
        value.item()

    def compiled_step():
        value, _ = compiled(params, x, y)
        value.item()

    for name, fn, calls in (
        ("record x + y (us)", record, 2000),
        ("MLP step, eager (us)", eager_step, 30),
        ("MLP step, compiled (us)", compiled_step, 200),
    ):
        nb.debug_nans(False)
        off = best_us(fn, calls)
        with nb.debug_nans():
            on = best_us(fn, calls)
        rows.append((name, off, on))
        nb.runtime.graph.GRAPH.realize_pending()
    print(f"{'':28s} {'off':>10s} {'on':>10s} {'on/off':>8s}")
    for name, off, on in rows:
        print(f"{name:28s} {off:10.1f} {on:10.1f} {on / off:7.2f}x")


if __name__ == "__main__":
    main()
