"""Pipeline-parallel training steps on a simulated 4-stage ``pp`` mesh vs the unpipelined step.

A 4-stage MLP (equal-width ``tanh`` layers, float32) takes one step of
``pipeline_value_and_grad`` (loss and gradients, realized) with ``schedule="gpipe"`` and
``"1f1b"``, for M = 1, 2, 4, 8, 16 microbatches, beside ``value_and_grad`` of the same model
unpipelined (numpy backend). Every configuration's loss and gradients are first checked
against the unpipelined ones.

The mesh is simulated: every stage's work runs in one process, one after the other (each
pipeline step computes all stages at once over the device dim), so the step time measures
the pipeline's overhead (per-step ops, masking of idle slots, ``ppermute`` as data
movement), not a speed-up. The bubble fraction (idle stage-steps over all) and the peak
activations are the schedule's: what a run on real devices would have. "ideal x" is the
speed-up the schedule allows on 4 real devices, ``S * M / (M + S - 1)`` (the bubble
subtracted from perfect scaling).

Run: ``python benchmarks/bench_pipeline.py`` (about 20 s; ``--quick``: 1 timed step and
M up to 8).
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
from nabla.nn import pipeline  # noqa: E402

S, WIDTH, BATCH = 4, 256, 128
MICROBATCHES = (1, 2, 4, 8, 16)


def stage(p, h):
    return nb.tanh(h @ p["w"] + p["b"])


def mse(out, y):
    return nb.mean((out - y) ** 2)


def unpipelined_loss(p, x, y):
    h = x
    for s in range(S):
        h = stage({"w": p["w"][s], "b": p["b"][s]}, h)
    return mse(h, y)


def realized(loss, grads):
    nb.realize(loss, *nb.tree_leaves(grads))
    return loss, grads


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="timed steps per configuration")
    parser.add_argument("--quick", action="store_true", help="1 timed step, M up to 8")
    args = parser.parse_args()
    reps, warmup = (1, 1) if args.quick else (args.reps, 1)
    counts = [m for m in MICROBATCHES if not args.quick or m <= 8]

    nb.set_backend("numpy")
    rng = np.random.default_rng(0)
    w = (rng.normal(size=(S, WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
    b = (0.1 * rng.normal(size=(S, WIDTH))).astype(np.float32)
    x = nb.constant(rng.normal(size=(BATCH, WIDTH)).astype(np.float32))
    y = nb.constant(rng.normal(size=(BATCH, WIDTH)).astype(np.float32))
    mesh = nb.DeviceMesh("pipe", (S,), ("pp",))
    whole = {"w": nb.constant(w), "b": nb.constant(b)}
    staged = {"w": nb.shard(w, mesh, P("pp")), "b": nb.shard(b, mesh, P("pp"))}

    def base_step():
        return realized(*nb.value_and_grad(unpipelined_loss)(whole, x, y))

    def pipe_step(m, schedule):
        return realized(
            *pipeline.pipeline_value_and_grad(
                stage, mse, staged, x, y, mesh=mesh, microbatches=m, schedule=schedule
            )
        )

    want_loss, want_grads = base_step()
    for m in counts:
        for schedule in ("gpipe", "1f1b"):
            loss, grads = pipe_step(m, schedule)
            where = f"{schedule}, M={m}"
            np.testing.assert_allclose(loss.item(), want_loss.item(), rtol=1e-5, err_msg=where)
            for k in grads:
                np.testing.assert_allclose(
                    grads[k].numpy(), want_grads[k].numpy(), rtol=1e-4, atol=1e-6, err_msg=where
                )

    t_base = median_ms(base_step, reps, warmup)
    print(
        f"MLP: {S} stages of {WIDTH}x{WIDTH} tanh layers, batch {BATCH}, float32; loss + grads "
        f"per step, numpy backend, median of {reps} step(s); checked against unpipelined"
    )
    print(f"  unpipelined value_and_grad: {t_base:.1f} ms")
    print(
        f"  {'M':>3}{'bubble':>8}{'ideal x':>9}{'gpipe ms':>10}{'ratio':>7}"
        f"{'1f1b ms':>9}{'ratio':>7}{'peak act. gpipe / 1f1b':>24}"
    )
    for m in counts:
        t_g = median_ms(lambda m=m: pipe_step(m, "gpipe"), reps, warmup)
        t_f = median_ms(lambda m=m: pipe_step(m, "1f1b"), reps, warmup)
        gpipe, one_f = pipeline.GPipe(S, m), pipeline.OneFOneB(S, m)
        assert abs(gpipe.bubble_fraction - one_f.bubble_fraction) < 1e-12
        peaks = f"{max(gpipe.peak_activations)} / {max(one_f.peak_activations)}"
        print(
            f"  {m:>3}{gpipe.bubble_fraction:>8.3f}{S * m / (m + S - 1):>9.2f}"
            f"{t_g:>10.1f}{t_g / t_base:>7.1f}{t_f:>9.1f}{t_f / t_base:>7.1f}{peaks:>24}"
        )


if __name__ == "__main__":
    main()
