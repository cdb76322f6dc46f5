"""vmap overhead: a vmapped per-example MLP vs the same MLP written with explicit batch dims.

Both run on the NumPy backend; each timed call builds the lazy graph *and* realizes it
(``.numpy()``), so the numbers include nabla's Python overhead (graph recording, vmap level
plumbing) and the NumPy kernels. Also compares per-example gradients: ``vmap(grad(loss))``
vs a Python loop of ``grad(loss)`` calls.

Run: ``python benchmarks/bench_vmap.py``  (about 10-20 s). Target: vmap within 1.2x of the
hand-batched version.
"""

from __future__ import annotations

import os
import sys

# Small-matrix timings are dominated by dispatch; a multi-threaded BLAS on a loaded machine
# adds scheduler stalls (~16 ms per gemm seen on a busy 2-core box). Pin it to one thread.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from _timing import median_ms  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import nabla as nb  # noqa: E402

B, D_IN, D_H, D_OUT = 256, 64, 128, 10
N_REPS = 50
N_GRAD_REPS = 20
N_LOOP = 32  # per-example gradients: batch size used for the loop comparison


def mlp_single(params, x):
    """One example: x (D_IN,) -> (D_OUT,)."""
    w1, b1, w2, b2 = params
    return nb.relu(x @ w1 + b1) @ w2 + b2


def mlp_batched(params, xs):
    """Explicit batch dims: xs (B, D_IN) -> (B, D_OUT)."""
    w1, b1, w2, b2 = params
    return nb.relu(xs @ w1 + b1) @ w2 + b2


def loss_single(params, x, y):
    return ((mlp_single(params, x) - y) ** 2).sum()


def main():
    nb.set_backend("numpy")
    rng = np.random.default_rng(0)
    p_np = [
        (rng.normal(size=(D_IN, D_H)) / np.sqrt(D_IN)).astype(np.float32),
        np.zeros(D_H, np.float32),
        (rng.normal(size=(D_H, D_OUT)) / np.sqrt(D_H)).astype(np.float32),
        np.zeros(D_OUT, np.float32),
    ]
    params = [nb.constant(p) for p in p_np]
    xs_np = rng.normal(size=(B, D_IN)).astype(np.float32)
    ys_np = rng.normal(size=(B, D_OUT)).astype(np.float32)
    xs, ys = nb.constant(xs_np), nb.constant(ys_np)

    vm = nb.vmap(mlp_single, in_axes=(None, 0))
    a = vm(params, xs).numpy()
    b = mlp_batched(params, xs).numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

    def numpy_forward():
        w1, b1, w2, b2 = p_np
        return np.maximum(xs_np @ w1 + b1, 0) @ w2 + b2

    t_np = median_ms(numpy_forward, N_REPS)
    t_batched = median_ms(lambda: mlp_batched(params, xs).numpy(), N_REPS)
    t_vmap = median_ms(lambda: vm(params, xs).numpy(), N_REPS)

    print(f"MLP {D_IN}->{D_H}->{D_OUT}, batch {B}, float32, backend=numpy, median of {N_REPS}")
    print(f"  {'variant':<36}{'ms/call':>10}")
    print(f"  {'raw NumPy (floor)':<36}{t_np:>10.3f}")
    print(f"  {'nabla, explicit batch dims':<36}{t_batched:>10.3f}")
    print(f"  {'nabla, vmap over the batch':<36}{t_vmap:>10.3f}")
    ratio = t_vmap / t_batched
    print(
        f"  vmap / explicit = {ratio:.2f}x  (target <= 1.20x: {'OK' if ratio <= 1.2 else 'MISS'})"
    )

    # ---------------------------------------------------------------- per-example gradients
    pe = nb.vmap(nb.grad(loss_single), in_axes=(None, 0, 0))
    g_v = pe(params, xs, ys)
    g0 = nb.grad(loss_single)(params, xs[0], ys[0])
    for gv, gl in zip(g_v, g0):
        np.testing.assert_allclose(gv.numpy()[0], gl.numpy(), rtol=1e-4, atol=1e-5)

    def vmapped_grads(n):
        g = pe(params, xs[:n], ys[:n])
        nb.realize(*g)

    def loop_grads(n):
        gs = [nb.grad(loss_single)(params, xs[i], ys[i]) for i in range(n)]
        nb.realize(*[t for g in gs for t in g])

    t_vg = median_ms(lambda: vmapped_grads(N_LOOP), N_GRAD_REPS)
    t_lg = median_ms(lambda: loop_grads(N_LOOP), max(3, N_GRAD_REPS // 4), warmup=1)
    t_vg_full = median_ms(lambda: vmapped_grads(B), N_GRAD_REPS)
    print()
    print("Per-example gradients of the MLP squared-error loss (median)")
    print(f"  {'variant':<36}{'ms/call':>10}")
    print(f"  {f'vmap(grad), batch {N_LOOP}':<36}{t_vg:>10.3f}")
    print(f"  {f'loop of grad, batch {N_LOOP}':<36}{t_lg:>10.3f}")
    print(f"  {f'vmap(grad), batch {B}':<36}{t_vg_full:>10.3f}")
    print(f"  loop / vmap at batch {N_LOOP} = {t_lg / t_vg:.1f}x")


if __name__ == "__main__":
    main()
