"""Backends: time to first result in a fresh process and steady-state MLP training steps.

For an MLP forward+backward (+SGD update) this prints, in one run:
- time to first result in a fresh process with ``auto`` and with ``max``, on a cold MAX
  cache (empty ``NABLA_CACHE_DIR``) and a warm one (second process, same cache dir);
- steady-state step time on ``numpy``, ``max`` and ``auto``;
- the same step with ``jax.jit`` and PyTorch eager when they are installed.

Run: python benchmarks/bench_backends.py [--skip-cold]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from _timing import median_seconds

SIZES = (256, 512, 512, 10)
BATCH = 128
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def data():
    rng = np.random.default_rng(0)
    params = [
        (
            (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32),
            np.zeros((b,), np.float32),
        )
        for a, b in zip(SIZES[:-1], SIZES[1:])
    ]
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = rng.standard_normal((BATCH, SIZES[-1])).astype(np.float32)
    return params, x, y


def nabla_step():
    import nabla as nb

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = nb.relu(h @ w + b)
        w, b = params[-1]
        return ((h @ w + b - y) ** 2).mean()

    @nb.compile
    def step(params, x, y):
        value, g = nb.value_and_grad(loss)(params, x, y)
        return nb.tree_map(lambda p, d: p - 0.01 * d, params, g), value

    return step


FIRST_RESULT = """
import time, sys
t0 = time.perf_counter()
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
import nabla as nb
from bench_backends import data, nabla_step
nb.set_backend({backend!r})
params, x, y = data()
params = nb.tree_map(nb.constant, params)
step = nabla_step()
params, value = step(params, nb.constant(x), nb.constant(y))
value.item()
print(time.perf_counter() - t0)
"""


def first_result(backend, cache_dir, home):
    # MAX keeps its own kernel caches under $HOME/.cache/modular: a fresh HOME is a cold MAX
    env = dict(os.environ, NABLA_CACHE_DIR=cache_dir, NABLA_BACKGROUND_COMPILE="1", HOME=home)
    code = FIRST_RESULT.format(root=ROOT, bench=os.path.join(ROOT, "benchmarks"), backend=backend)
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900
    )
    wall = time.perf_counter() - t
    if out.returncode != 0:
        return f"failed: {out.stderr.strip().splitlines()[-1] if out.stderr else out.returncode}"
    return f"{float(out.stdout.strip().splitlines()[-1]):.3f} s (process {wall:.1f} s)"


def nabla_steady(backend, n):
    import nabla as nb

    nb.set_backend(backend)
    params, x, y = data()
    state = {"p": nb.tree_map(nb.constant, params)}
    xt, yt = nb.constant(x), nb.constant(y)
    step = nabla_step()

    def once():
        state["p"], value = step(state["p"], xt, yt)
        value.item()

    if backend in ("max", "auto"):  # compile (and in auto: switch to MAX) before timing
        for _ in range(5):
            once()
        if backend == "auto":
            deadline = time.time() + 600
            while time.time() < deadline and not _auto_settled():
                once()
                time.sleep(0.5)
    return median_seconds(once, n)


def _auto_settled():
    from nabla.runtime.graph import GRAPH

    def settled(p):  # on MAX, or raced (this run or an earlier one, whose record settles it)
        race = p.executables.get("race")
        return "max" in p.executables or (race is not None and race.winner is not None)

    return any(settled(p) for p in GRAPH.programs())


def jax_steady(n):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        return jnp.mean((h @ w + b - y) ** 2)

    @jax.jit
    def step(params, x, y):
        value, g = jax.value_and_grad(loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, d: p - 0.01 * d, params, g), value

    params, x, y = data()
    state = {"p": jax.tree_util.tree_map(jnp.asarray, params)}
    xj, yj = jnp.asarray(x), jnp.asarray(y)

    def once():
        state["p"], value = step(state["p"], xj, yj)
        value.block_until_ready()

    return median_seconds(once, n)


def torch_steady(n):
    try:
        import torch
    except ImportError:
        return None
    params, x, y = data()
    ps = [
        (torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True))
        for w, b in params
    ]
    xt, yt = torch.tensor(x), torch.tensor(y)

    def once():
        h = xt
        for w, b in ps[:-1]:
            h = torch.relu(h @ w + b)
        w, b = ps[-1]
        loss = ((h @ w + b - yt) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for w, b in ps:
                w -= 0.01 * w.grad
                b -= 0.01 * b.grad
                w.grad = None
                b.grad = None
        loss.item()

    return median_seconds(once, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-cold", action="store_true", help="skip the fresh-process runs")
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    from nabla.backends import max_available

    print(f"MLP {SIZES}, batch {BATCH}, float32: forward + backward + SGD update")
    if not args.skip_cold:
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as home:
            print("time to first result, fresh process (cold = empty HOME and NABLA_CACHE_DIR):")
            print(f"  auto, cold MAX cache   {first_result('auto', cache, home)}")
            if max_available():
                print(f"  max,  cold MAX cache   {first_result('max', cache, home)}")
                print(f"  max,  warm MAX cache   {first_result('max', cache, home)}")
                print(f"  auto, warm MAX cache   {first_result('auto', cache, home)}")
    print(f"steady-state step (median of {args.steps}), ms:")
    rows = [("numpy", nabla_steady("numpy", args.steps))]
    if max_available():
        rows.append(("max", nabla_steady("max", args.steps)))
        rows.append(("auto", nabla_steady("auto", args.steps)))
    j = jax_steady(args.steps)
    if j is not None:
        rows.append(("jax.jit", j))
    t = torch_steady(args.steps)
    if t is not None:
        rows.append(("torch eager", t))
    for name, v in rows:
        print(f"  {name:12s} {v * 1e3:9.3f}")
    if j is not None and max_available():
        print(f"  max / jax.jit = {dict(rows)['max'] / j:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
