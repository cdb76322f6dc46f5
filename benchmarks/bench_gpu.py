"""The MAX backend on an NVIDIA GPU beside PyTorch (CUDA, eager) and JAX (`jit`) on the same
GPU, measured side by side in one run.

Rows: a float32 and a bfloat16 matrix product, and a compiled MLP training step (forward,
backward, SGD) whose loss is read on the host every step, as a training loop does. Every
call ends with a host read (one element of the product, the step's loss), so each framework's
time includes its launch, its kernels and one device-to-host synchronization. The first call
of each nabla row compiles (cold GPU compiles take tens of seconds); it is not timed.

Run on a machine with a GPU that MAX sees: python benchmarks/bench_gpu.py [--reps N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _timing import median_ms

import nabla as nb
from nabla.backends import max as mx


def _try_import(name):
    try:
        return __import__(name)
    except ImportError:
        return None


def matmul_rows(n, dtype_name, reps):
    """Milliseconds per ``(a @ b)[0, 0]`` read on the host, per framework."""
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((n, n)).astype(np.float32)
    b_np = rng.standard_normal((n, n)).astype(np.float32)
    out = {}
    gpu = nb.Accelerator(0)
    dtype = getattr(nb, dtype_name)
    with nb.backend("max"):
        a = nb.constant(a_np, device=gpu).astype(dtype)
        b = nb.constant(b_np, device=gpu).astype(dtype)
        f = nb.compile(lambda a, b: (a @ b)[:1, :1])
        t0 = time.perf_counter()
        f(a, b).cpu().numpy()
        print(f"  nabla compile + first call: {time.perf_counter() - t0:.1f} s", flush=True)
        out["nabla"] = median_ms(lambda: f(a, b).cpu().numpy(), reps)
    torch = _try_import("torch")
    if torch is not None and torch.cuda.is_available():
        ta = torch.tensor(a_np, device="cuda").to(getattr(torch, dtype_name))
        tb = torch.tensor(b_np, device="cuda").to(getattr(torch, dtype_name))
        out["torch"] = median_ms(lambda: (ta @ tb)[:1, :1].float().cpu().numpy(), reps)
    jax = _try_import("jax")
    if jax is not None and jax.default_backend() == "gpu":
        jnp = jax.numpy
        ja = jnp.asarray(a_np).astype(dtype_name)
        jb = jnp.asarray(b_np).astype(dtype_name)
        jf = jax.jit(lambda a, b: (a @ b)[:1, :1])
        np.asarray(jf(ja, jb))
        out["jax"] = median_ms(lambda: np.asarray(jf(ja, jb)), reps)
    return out


def mlp_rows(sizes, batch, reps):
    """Milliseconds per compiled SGD step of an MLP with its loss read on the host."""
    rng = np.random.default_rng(0)
    ws = [
        (rng.standard_normal((a, b)) * np.sqrt(2 / a)).astype(np.float32)
        for a, b in zip(sizes[:-1], sizes[1:])
    ]
    x_np = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y_np = rng.standard_normal((batch, sizes[-1])).astype(np.float32)
    out, first_loss = {}, {}
    gpu = nb.Accelerator(0)

    def loss_fn(ps, x, y):
        h = x
        for w in ps[:-1]:
            h = nb.relu(h @ w)
        return nb.mean((h @ ps[-1] - y) ** 2)

    @nb.compile
    def step(ps, x, y):
        loss, g = nb.value_and_grad(loss_fn)(ps, x, y)
        return [w - 0.01 * d for w, d in zip(ps, g)], loss

    with nb.backend("max"):
        state = {"p": [nb.constant(w, device=gpu) for w in ws]}
        x, y = nb.constant(x_np, device=gpu), nb.constant(y_np, device=gpu)

        def nabla_step():
            state["p"], loss = step(state["p"], x, y)
            return float(loss.cpu().numpy())

        t0 = time.perf_counter()
        first_loss["nabla"] = nabla_step()
        print(f"  nabla compile + first step: {time.perf_counter() - t0:.1f} s", flush=True)
        out["nabla"] = median_ms(nabla_step, reps)
    torch = _try_import("torch")
    if torch is not None and torch.cuda.is_available():
        tp = [torch.tensor(w, device="cuda", requires_grad=True) for w in ws]
        tx, ty = torch.tensor(x_np, device="cuda"), torch.tensor(y_np, device="cuda")

        def torch_step():
            h = tx
            for w in tp[:-1]:
                h = torch.relu(h @ w)
            loss = ((h @ tp[-1] - ty) ** 2).mean()
            grads = torch.autograd.grad(loss, tp)
            with torch.no_grad():
                for w, d in zip(tp, grads):
                    w -= 0.01 * d
            return loss.item()

        first_loss["torch"] = torch_step()
        out["torch"] = median_ms(torch_step, reps)
    jax = _try_import("jax")
    if jax is not None and jax.default_backend() == "gpu":
        jnp = jax.numpy

        def jloss(ps, x, y):
            h = x
            for w in ps[:-1]:
                h = jax.nn.relu(h @ w)
            return jnp.mean((h @ ps[-1] - y) ** 2)

        @jax.jit
        def jstep(ps, x, y):
            loss, g = jax.value_and_grad(jloss)(ps, x, y)
            return [w - 0.01 * d for w, d in zip(ps, g)], loss

        jstate = {"p": [jnp.asarray(w) for w in ws]}
        jx, jy = jnp.asarray(x_np), jnp.asarray(y_np)

        def jax_step():
            jstate["p"], loss = jstep(jstate["p"], jx, jy)
            return float(loss)

        first_loss["jax"] = jax_step()
        out["jax"] = median_ms(jax_step, reps)
    print("  first-step losses (same weights and data):", first_loss)
    return out


def show(name, row):
    peers = [v for k, v in row.items() if k != "nabla"]
    best = min(peers) if peers else float("nan")
    cells = "  ".join(f"{k} {v:8.3f}" for k, v in row.items())
    print(f"{name:<34} {cells}   nabla / fastest peer {row['nabla'] / best:5.2f}x", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    if mx.accelerator_count() == 0:
        raise SystemExit("bench_gpu: MAX sees no GPU on this machine")
    print("ms per call (median), each call ending in a host read")
    show("matmul 4096 float32", matmul_rows(4096, "float32", args.reps))
    show("matmul 4096 bfloat16", matmul_rows(4096, "bfloat16", args.reps))
    show("MLP 784-2048-2048-10 b1024 SGD step", mlp_rows([784, 2048, 2048, 10], 1024, args.reps))


if __name__ == "__main__":
    main()
