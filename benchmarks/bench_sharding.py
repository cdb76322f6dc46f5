"""Sharded MLP training steps on a simulated device mesh vs the same step unsharded.

One step: forward, ``value_and_grad`` of a mean squared error, SGD update; each timed call
builds the lazy graph and realizes the loss and the new parameters (numpy backend). Layouts:

- data parallel, 4 devices: the batch split over ``dp``, parameters replicated (the
  weight gradients are summed over ``dp``);
- tensor parallel (Megatron), 4 devices: ``w1`` column-parallel, ``w2`` row-parallel, the
  batch replicated (one ``all_reduce`` of the output forward, one of ``dx`` backward);
- both on a 2x2 mesh (``dp`` x ``tp``).

Every variant's loss, gradients and updated parameters are first checked against the
unsharded step. The mesh is simulated: all devices' blocks live in one buffer and one NumPy
kernel runs over them, so the ratio to unsharded measures the cost of the simulation and of
the collectives as data movement, not a speed-up. The bytes column is what each device
would send per step on a ring (``nb.communication_report``).

Each step runs lazily (the graph rebuilt every call, the program cached) and under
``nb.compile``. Run: ``python benchmarks/bench_sharding.py`` (about 10-20 s; ``--quick``: 3
steps per variant and the cost report tables).
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from _timing import median_ms  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import nabla as nb  # noqa: E402
from nabla import P  # noqa: E402

B, D_IN, D_H, D_OUT = 128, 256, 512, 256
LR = 0.1

# per variant: mesh, then the spec of (w1, b1, w2, b2) and of (x, y)
MESH4_DP = nb.DeviceMesh("dp4", (4,), ("dp",))
MESH4_TP = nb.DeviceMesh("tp4", (4,), ("tp",))
MESH22 = nb.DeviceMesh("m22", (2, 2), ("dp", "tp"))
MEGATRON = (P(None, "tp"), P("tp"), P("tp"), P())
VARIANTS = [
    ("data parallel, 4 devices", MESH4_DP, (P(), P(), P(), P()), (P("dp"), P("dp"))),
    ("tensor parallel (Megatron), 4 devices", MESH4_TP, MEGATRON, (P(), P())),
    ("data + tensor parallel, 2x2", MESH22, MEGATRON, (P("dp"), P("dp"))),
]


def loss_fn(params, x, y):
    w1, b1, w2, b2 = params
    out = nb.relu(x @ w1 + b1) @ w2 + b2
    return nb.mean((out - y) ** 2)


def train_step(params, x, y):
    loss, grads = nb.value_and_grad(loss_fn)(params, x, y)
    return loss, [p - LR * g for p, g in zip(params, grads, strict=True)]


def run_step(params, x, y, step=train_step):
    loss, new = step(params, x, y)
    nb.realize(loss, *new)
    return loss, new


def check(name, params, inputs, base_params, base_inputs, step):
    """The sharded step's loss, gradients and updated parameters equal the unsharded ones."""
    loss, new = run_step(params, *inputs, step=step)
    loss0, new0 = run_step(base_params, *base_inputs)
    np.testing.assert_allclose(loss.item(), loss0.item(), rtol=1e-5, err_msg=name)
    grads = nb.grad(loss_fn)(params, *inputs)
    grads0 = nb.grad(loss_fn)(base_params, *base_inputs)
    for g, w in zip(grads, grads0, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
    for g, w, p in zip(new, new0, params, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
        # the update keeps each parameter's layout, so steps chain without resharding
        assert g.sharding == p.sharding, (name, g.sharding, p.sharding)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30, help="timed steps per variant")
    parser.add_argument("--quick", action="store_true", help="3 timed steps per variant")
    args = parser.parse_args()
    reps = 3 if args.quick else args.reps

    nb.set_backend("numpy")
    rng = np.random.default_rng(0)
    p_np = [
        (rng.normal(size=(D_IN, D_H)) / np.sqrt(D_IN)).astype(np.float32),
        (0.1 * rng.normal(size=D_H)).astype(np.float32),
        (rng.normal(size=(D_H, D_OUT)) / np.sqrt(D_H)).astype(np.float32),
        (0.1 * rng.normal(size=D_OUT)).astype(np.float32),
    ]
    x_np = rng.normal(size=(B, D_IN)).astype(np.float32)
    y_np = rng.normal(size=(B, D_OUT)).astype(np.float32)

    base_params = [nb.constant(p) for p in p_np]
    base_inputs = (nb.constant(x_np), nb.constant(y_np))
    t_base = median_ms(lambda: run_step(base_params, *base_inputs), reps)
    compiled = nb.compile(train_step)
    check("unsharded, compiled", base_params, base_inputs, base_params, base_inputs, compiled)
    t_base_c = median_ms(lambda: run_step(base_params, *base_inputs, step=compiled), reps)

    print(
        f"MLP {D_IN}->{D_H}->{D_OUT}, batch {B}, float32, forward + grad + SGD, "
        f"numpy backend, median of {reps} steps"
    )
    print("  lazy: graph built and realized per step (program cache); compiled: nb.compile")
    head = f"  {'variant':<38}{'lazy ms':>9}{'ratio':>7}{'compiled ms':>13}{'ratio':>7}"
    print(head + f"{'collectives':>13}{'KiB sent/device':>17}")
    print(
        f"  {'unsharded':<38}{t_base:>9.2f}{1.0:>7.2f}{t_base_c:>13.2f}{1.0:>7.2f}"
        f"{0:>13}{0.0:>17.1f}"
    )
    for name, mesh, p_specs, in_specs in VARIANTS:
        params = [nb.shard(p, mesh, s) for p, s in zip(p_np, p_specs, strict=True)]
        inputs = tuple(nb.shard(a, mesh, s) for a, s in zip((x_np, y_np), in_specs, strict=True))
        compiled = nb.compile(train_step)
        check(name, params, inputs, base_params, base_inputs, train_step)
        check(name + ", compiled", params, inputs, base_params, base_inputs, compiled)
        report = nb.communication_report(train_step)(params, *inputs)
        t = median_ms(lambda params=params, inputs=inputs: run_step(params, *inputs), reps)
        t_c = median_ms(
            lambda params=params, inputs=inputs, c=compiled: run_step(params, *inputs, step=c),
            reps,
        )
        print(
            f"  {name:<38}{t:>9.2f}{t / t_base:>7.2f}{t_c:>13.2f}{t_c / t_base_c:>7.2f}"
            f"{len(report):>13}{report.total_bytes / 1024:>17.1f}"
        )
        if args.quick:
            print("\n".join("    " + line for line in str(report).splitlines()))


if __name__ == "__main__":
    main()
