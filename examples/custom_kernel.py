"""Custom Mojo kernels as nabla ops: forward, grad, jvp, vmap and compile.

The kernels live in ``examples/custom_kernels/`` (a Mojo package: ``__init__.mojo`` plus
one file per kernel): ``softplus``, its derivative ``softplus_jvp`` (``t * sigmoid(x)``) and
the row reduction ``row_sum``. See ``docs/custom_kernels.md`` for the walk-through.

Run: python examples/custom_kernel.py            (MAX: needs ``pip install 'nabla[max]'``)
     python examples/custom_kernel.py --numpy    (the NumPy references only, no compiler)

The first MAX run precompiles the package once (a few seconds) and compiles the graphs
(tens of seconds); later runs load both from nabla's cache (``$NABLA_CACHE_DIR`` or
``~/.cache/nabla/max``).
"""

import sys
import time
from pathlib import Path

import numpy as np

import nabla as nb

KERNELS = Path(__file__).parent / "custom_kernels"

# 1. The derivative kernel, as an op of its own: elementwise (the default shape rule: one
#    output like the inputs), with a NumPy reference for the NumPy backend.
softplus_jvp = nb.custom_op("softplus_jvp", KERNELS, numpy_fn=lambda x, t: t / (1 + np.exp(-x)))

# 2. softplus, differentiable through its derivative kernel: both rules are one kernel call
#    (rules take lists: the op's inputs, the incoming cotangents/tangents, its outputs).
softplus = nb.custom_op(
    "softplus",
    KERNELS,
    numpy_fn=lambda x: np.logaddexp(0, x),
    vjp=lambda primals, cotangents, outputs: [softplus_jvp(primals[0], cotangents[0])],
    jvp=lambda primals, tangents, outputs: [softplus_jvp(primals[0], tangents[0])],
)

# 3. A row reduction: its shape rule drops the last axis, its rules are ordinary nabla ops.
#    It maps over leading dims, so vmap just prefixes its batch dims (the default,
#    batching="elementwise"); a kernel that cannot would say batching="loop".
row_sum = nb.custom_op(
    "row_sum",
    KERNELS,
    out_types=lambda x: (x.shape[:-1], x.dtype),
    numpy_fn=lambda x: x.sum(-1),
    vjp=lambda p, ct, out: [nb.broadcast_to(nb.unsqueeze(ct[0], -1), p[0].shape)],
    jvp=lambda p, t, out: [nb.sum(t[0], axis=-1)],
)


def loss(x):
    return nb.sum(row_sum(softplus(x)) ** 2)


@nb.compile
def step(x):
    """A compiled function using the kernels: traced once, then one cached program."""
    return x - 0.1 * nb.grad(loss)(x)


def main():
    if "--numpy" in sys.argv:
        nb.set_backend("numpy")
    elif nb.backends.max_backend() is None:
        print("MAX is not installed: running the NumPy references (pip install 'nabla[max]')")
        nb.set_backend("numpy")
    else:
        nb.set_backend("max")
    print("backend:", nb.get_backend_name())

    rng = np.random.default_rng(0)
    x = nb.asarray(rng.standard_normal((4, 8)).astype(np.float32))

    t0 = time.perf_counter()
    y = row_sum(softplus(x))  # forward: two kernel calls
    g = nb.grad(loss)(x)  # reverse mode through the kernels' vjp rules
    _, tangent = nb.jvp(lambda a: row_sum(softplus(a)), (x,), (nb.ones_like(x),))
    per_example = nb.vmap(nb.grad(loss))(x)  # per-row gradients (batch dims prefixed)
    x1 = step(x)  # the compiled function's first call traces it (its ops join this graph)
    nb.realize(y, g, tangent, per_example, x1)  # one program, one MAX compile
    print(f"first results in {time.perf_counter() - t0:.2f} s (compile included)")

    xn = x.numpy()
    rows = np.logaddexp(0, xn).sum(-1)
    sig = 1 / (1 + np.exp(-xn))
    checks = {
        "forward": (y, rows),
        "grad": (g, 2 * rows[:, None] * sig),
        "jvp": (tangent, sig.sum(-1)),
        "vmap(grad)": (per_example, 2 * rows[:, None] * sig),
        "compiled step": (x1, xn - 0.2 * rows[:, None] * sig),
    }
    for name, (got, want) in checks.items():
        err = float(np.abs(np.asarray(got) - want).max())
        print(f"{name:14s} max |error| = {err:.2e}")
        assert err < 1e-4, name

    # later calls are one node running the recorded plan: one more MAX compile (the first
    # step below), then each step runs the cached model
    t0 = time.perf_counter()
    x = step(x)
    x.numpy()
    print(f"first compiled step in {time.perf_counter() - t0:.2f} s (compile included)")
    t0 = time.perf_counter()
    for _ in range(10):
        x = step(x)
        x.numpy()
    print(f"10 more compiled steps in {time.perf_counter() - t0:.3f} s")
    print("backend stats:", {k: v for k, v in nb.backend_stats().items() if v})


if __name__ == "__main__":
    main()
