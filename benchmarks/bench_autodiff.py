"""Autodiff cost: grad of an MLP loss and a Hessian-vector product, per call.

Columns: nabla on the NumPy backend (lazy build + backward build + realize each call), JAX
without and with ``jit`` (only when ``import jax`` works; otherwise skipped), and hand-written
NumPy backprop (and a hand-written Pearlmutter R-op for the HVP) as the floor.

HVP is forward-over-reverse: ``jvp(grad(f), (params,), (v,))``. The Jacobian rows are
``jacrev``/``jacfwd`` of ``tanh(W @ x)``, ``x`` in R^256 (the basis is vmapped: ``W @ v`` with
``v`` batched must be one GEMM, never ``W`` copied per basis element).

Run: ``python benchmarks/bench_autodiff.py``  (about 15-30 s).
"""

from __future__ import annotations

import os
import sys

# Small-matrix timings are dominated by dispatch; a multi-threaded BLAS on a loaded machine
# adds scheduler stalls. Pin it to one thread so the columns are comparable.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
from _timing import median_ms  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import nabla as nb  # noqa: E402

try:  # optional comparison column
    import jax  # noqa: E402
    import jax.numpy as jnp  # noqa: E402
except Exception:  # pragma: no cover - JAX is optional
    jax = None

B, D_IN, D_H, D_OUT = 256, 64, 128, 10
N_REPS = 30


# ----------------------------------------------------------------------------- problem
def make_problem():
    rng = np.random.default_rng(0)
    params = (
        (rng.normal(size=(D_IN, D_H)) / np.sqrt(D_IN)).astype(np.float32),
        (0.1 * rng.normal(size=(D_H,))).astype(np.float32),
        (rng.normal(size=(D_H, D_OUT)) / np.sqrt(D_H)).astype(np.float32),
        (0.1 * rng.normal(size=(D_OUT,))).astype(np.float32),
    )
    v = tuple(rng.normal(size=p.shape).astype(np.float32) for p in params)
    x = rng.normal(size=(B, D_IN)).astype(np.float32)
    y = rng.normal(size=(B, D_OUT)).astype(np.float32)
    return params, v, x, y


# ----------------------------------------------------------------------------- NumPy floor
def np_grad(params, x, y):
    w1, b1, w2, b2 = params
    z1 = x @ w1 + b1
    h = np.maximum(z1, 0)
    r = h @ w2 + b2 - y
    dout = (2.0 / B) * r
    dh = dout @ w2.T
    dz1 = dh * (z1 > 0)
    return (x.T @ dz1, dz1.sum(0), h.T @ dout, dout.sum(0))


def np_hvp(params, v, x, y):
    """Pearlmutter's R-op of np_grad in direction v (exact HVP; relu'' = 0)."""
    w1, b1, w2, b2 = params
    v1, c1, v2, c2 = v
    z1 = x @ w1 + b1
    mask = z1 > 0
    h = np.maximum(z1, 0)
    r = h @ w2 + b2 - y
    dout = (2.0 / B) * r
    rz1 = x @ v1 + c1
    rh = rz1 * mask
    rdout = (2.0 / B) * (rh @ w2 + h @ v2 + c2)
    rdh = rdout @ w2.T + dout @ v2.T
    rdz1 = rdh * mask
    return (x.T @ rdz1, rdz1.sum(0), rh.T @ dout + h.T @ rdout, rdout.sum(0))


# ----------------------------------------------------------------------------- nabla
def nb_loss(params, x, y):
    w1, b1, w2, b2 = params
    h = nb.relu(x @ w1 + b1)
    return ((h @ w2 + b2 - y) ** 2).mean() * D_OUT


def main():
    nb.set_backend("numpy")
    p_np, v_np, x_np, y_np = make_problem()
    params = tuple(nb.constant(p) for p in p_np)
    v = tuple(nb.constant(t) for t in v_np)
    x, y = nb.constant(x_np), nb.constant(y_np)

    grad_fn = nb.grad(nb_loss)

    def nb_grad_call():
        nb.realize(*grad_fn(params, x, y))

    def nb_hvp_call():
        _, hv = nb.jvp(lambda p: grad_fn(p, x, y), (params,), (v,))
        nb.realize(*hv)

    # correctness against the NumPy floor
    for a, b in zip(grad_fn(params, x, y), np_grad(p_np, x_np, y_np)):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-4, atol=1e-5)
    _, hv = nb.jvp(lambda p: grad_fn(p, x, y), (params,), (v,))
    for a, b in zip(hv, np_hvp(p_np, v_np, x_np, y_np)):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-3, atol=1e-4)

    rows = {
        "grad(loss)": {
            "nabla (numpy)": median_ms(nb_grad_call),
            "NumPy by hand": median_ms(lambda: np_grad(p_np, x_np, y_np)),
        },
        "HVP jvp(grad)": {
            "nabla (numpy)": median_ms(nb_hvp_call),
            "NumPy by hand": median_ms(lambda: np_hvp(p_np, v_np, x_np, y_np)),
        },
    }

    if jax is not None:
        jp = tuple(jnp.asarray(p) for p in p_np)
        jv = tuple(jnp.asarray(t) for t in v_np)
        jx, jy = jnp.asarray(x_np), jnp.asarray(y_np)

        def j_loss(params, x, y):
            w1, b1, w2, b2 = params
            h = jax.nn.relu(x @ w1 + b1)
            return jnp.mean((h @ w2 + b2 - y) ** 2) * D_OUT

        j_grad = jax.grad(j_loss)

        def j_hvp(p, t):
            return jax.jvp(lambda q: j_grad(q, jx, jy), (p,), (t,))[1]

        j_grad_jit = jax.jit(j_grad)
        j_hvp_jit = jax.jit(j_hvp)
        for a, b in zip(j_hvp_jit(jp, jv), np_hvp(p_np, v_np, x_np, y_np)):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-3, atol=1e-4)

        def block(t):
            return jax.block_until_ready(t)

        rows["grad(loss)"]["JAX (no jit)"] = median_ms(lambda: block(j_grad(jp, jx, jy)))
        rows["grad(loss)"]["JAX (jit)"] = median_ms(lambda: block(j_grad_jit(jp, jx, jy)))
        rows["HVP jvp(grad)"]["JAX (no jit)"] = median_ms(lambda: block(j_hvp(jp, jv)))
        rows["HVP jvp(grad)"]["JAX (jit)"] = median_ms(lambda: block(j_hvp_jit(jp, jv)))

    jacobian_rows(rows)
    cols = ["nabla (numpy)", "JAX (no jit)", "JAX (jit)", "NumPy by hand"]
    print(f"MLP {D_IN}->{D_H}->{D_OUT} relu, batch {B}, float32; median ms/call of {N_REPS}")
    if jax is None:
        print("(JAX not importable: its columns are skipped)")
    else:
        print(f"(JAX {jax.__version__} on CPU)")
    header = f"{'':<16}" + "".join(f"{c:>16}" for c in cols)
    print(header)
    for name, r in rows.items():
        cells = "".join(f"{r[c]:>16.3f}" if c in r else f"{'-':>16}" for c in cols)
        print(f"{name:<16}{cells}")
    print()
    for name, r in rows.items():
        print(f"{name}: nabla / NumPy floor = {r['nabla (numpy)'] / r['NumPy by hand']:.1f}x")


def jacobian_rows(rows, n=256):
    """jacrev/jacfwd of tanh(W x): nabla (numpy backend), JAX, and the closed form."""
    rng = np.random.default_rng(1)
    w_np = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    x_np = rng.standard_normal(n).astype(np.float32)
    want = (1 - np.tanh(w_np @ x_np) ** 2)[:, None] * w_np
    w, x = nb.constant(w_np), nb.constant(x_np)
    for name in ("jacrev", "jacfwd"):
        key = f"{name} tanh(Wx)"
        jac = getattr(nb, name)(lambda v: nb.tanh(w @ v))
        with nb.backend("numpy"):
            np.testing.assert_allclose(jac(x).numpy(), want, rtol=1e-4, atol=1e-5)
            rows[key] = {"nabla (numpy)": median_ms(lambda jac=jac: jac(x).numpy(), N_REPS)}
        rows[key]["NumPy by hand"] = median_ms(
            lambda: (1 - np.tanh(w_np @ x_np) ** 2)[:, None] * w_np, N_REPS
        )
        if jax is not None:
            jw = jnp.asarray(w_np)
            jf = getattr(jax, name)(lambda v: jnp.tanh(jw @ v))
            jx = jnp.asarray(x_np)
            np.testing.assert_allclose(np.asarray(jf(jx)), want, rtol=1e-4, atol=1e-5)
            jit = jax.jit(jf)
            rows[key]["JAX (no jit)"] = median_ms(lambda jf=jf: jax.block_until_ready(jf(jx)))
            rows[key]["JAX (jit)"] = median_ms(lambda jit=jit: jax.block_until_ready(jit(jx)))


if __name__ == "__main__":
    main()
