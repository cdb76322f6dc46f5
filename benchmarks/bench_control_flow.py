"""A 1,000-step RNN three ways, forward and forward+backward, side by side in one run:
``nb.scan`` (one loop node, compiled with ``nb.compile``), a Python loop of nabla ops (1,000
unrolled steps, one lazy program), NumPy (forward only) and ``jax.lax.scan`` under
``jax.jit`` when JAX imports. Every variant is checked against the NumPy loop first.

Also printed: the time to trace the scan at 10 and at 10,000 steps (it must not grow).

The Python-loop variant runs on the NumPy backend only (on MAX it would be a 3,000-op graph
to compile). Run: ``python benchmarks/bench_control_flow.py [--backend numpy|max|auto]
[--steps N]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _timing import median_ms  # noqa: E402

import nabla as nb  # noqa: E402

try:  # optional peer
    import jax
    import jax.numpy as jnp
except Exception:  # noqa: BLE001 - any import problem: no JAX column
    jax = None


def make(steps, batch, hidden, seed=0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    xs = rng.standard_normal((steps, batch, hidden)).astype(np.float32)
    h0 = np.zeros((batch, hidden), np.float32)
    return w, h0, xs


def rnn_numpy(w, h0, xs):
    h = h0
    for x in xs:
        h = np.tanh(h @ w + x)
    return float((h * h).sum())


def rnn_scan(w, h0, xs):
    h, _ = nb.scan(lambda h, x: (nb.tanh(h @ w + x), None), h0, xs)
    return (h * h).sum()


def rnn_loop(w, h0, xs, steps):
    h = h0
    for t in range(steps):
        h = nb.tanh(h @ w + xs[t])
    return (h * h).sum()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="numpy", choices=["numpy", "max", "auto"])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    nb.set_backend(args.backend)
    w, h0, xs = make(args.steps, args.batch, args.hidden)
    ref = rnn_numpy(w, h0, xs)
    W, H0, XS = nb.constant(w), nb.constant(h0), nb.constant(xs)

    fwd = nb.compile(rnn_scan)
    bwd = nb.compile(nb.value_and_grad(rnn_scan))
    rows = []

    def check(name, value):
        if not np.isclose(value, ref, rtol=2e-3):
            raise SystemExit(f"{name}: {value} differs from the NumPy loop's {ref}")

    check("nb.scan", fwd(W, H0, XS).item())
    check("nb.scan grad", bwd(W, H0, XS)[0].item())
    rows.append(
        ("forward", "nabla scan (compile)", median_ms(lambda: fwd(W, H0, XS).item(), args.reps))
    )
    rows.append(
        (
            "fwd+bwd",
            "nabla scan (compile)",
            median_ms(lambda: nb.realize(*nb.tree_leaves(bwd(W, H0, XS))), args.reps),
        )
    )
    if args.backend == "numpy":  # on MAX the unrolled loop is a 3,000-op graph to compile
        loop_f = lambda: rnn_loop(W, H0, XS, args.steps).item()  # noqa: E731
        check("python loop", loop_f())
        reps = max(3, args.reps // 3)
        rows.append(("forward", "nabla Python loop of ops", median_ms(loop_f, reps)))
        loop_g = nb.value_and_grad(lambda w_: rnn_loop(w_, H0, XS, args.steps))
        rows.append(
            (
                "fwd+bwd",
                "nabla Python loop of ops",
                median_ms(lambda: nb.realize(*nb.tree_leaves(loop_g(W))), reps),
            )
        )
    rows.append(("forward", "NumPy loop", median_ms(lambda: rnn_numpy(w, h0, xs), args.reps)))
    if jax is not None:

        def jrnn(w, h0, xs):
            h, _ = jax.lax.scan(lambda h, x: (jnp.tanh(h @ w + x), None), h0, xs)
            return (h * h).sum()

        jf = jax.jit(jrnn)
        jg = jax.jit(jax.value_and_grad(jrnn))
        check("jax", float(jf(w, h0, xs)))
        rows.append(
            (
                "forward",
                "jax.lax.scan (jit)",
                median_ms(lambda: jf(w, h0, xs).block_until_ready(), args.reps),
            )
        )
        rows.append(
            (
                "fwd+bwd",
                "jax.lax.scan (jit)",
                median_ms(lambda: jax.block_until_ready(jg(w, h0, xs)), args.reps),
            )
        )

    print(
        f"RNN tanh(h @ W + x): {args.steps} steps, batch {args.batch}, hidden {args.hidden}, "
        f"backend {args.backend}, float32"
    )
    for kind in ("forward", "fwd+bwd"):
        group = [r for r in rows if r[0] == kind]
        best_peer = min((ms for _, name, ms in group if not name.startswith("nabla")), default=None)
        print(f"\n{kind}")
        for _, name, ms in group:
            ratio = f"  ({ms / best_peer:.2f}x the fastest non-nabla)" if best_peer else ""
            print(f"  {name:28s} {ms:9.2f} ms{ratio}")

    print("\ntrace time of nb.scan (one body, whatever the length):")
    for n in (10, 10_000):
        xs_n = nb.zeros((n, args.batch, args.hidden))
        t0 = time.perf_counter()
        for _ in range(20):
            rnn_scan(W, H0, xs_n)
        print(f"  {n:6d} steps: {1e3 * (time.perf_counter() - t0) / 20:.2f} ms")


if __name__ == "__main__":
    main()
