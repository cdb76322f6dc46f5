"""Pipelined inference: ``pipeline_forward`` of a 4-stage MLP over several batches, with 1 to 8
microbatches, on a simulated 4-device ``pp`` mesh.

A forward pipeline of ``S`` stages and ``M`` microbatches takes ``M + S - 1`` steps, in which
each stage is busy ``M`` times: the idle share (the bubble) is ``(S - 1) / (M + S - 1)``,
so more microbatches keep the stages busier. On ``S`` real devices a step would take one
stage's time on one microbatch, ``1 / M`` of a stage's time on the batch, against ``S``
stage-times for the whole model on one device: an ideal speed-up of
``S * M / (M + S - 1)`` (the "ideal x" column). Here every stage's work runs in one process,
so the measured time shows the simulation's per-step overhead instead; the unpipelined
model's time is printed above for comparison. Every output is checked against the
unpipelined model.

Run: python examples/pipeline_inference.py
"""

import time

import numpy as np

import nabla as nb
from nabla import P
from nabla.nn import pipeline

try:
    from .pipeline_mlp import STAGES, init_params, stage
except ImportError:  # run as a script
    from pipeline_mlp import STAGES, init_params, stage


def unpipelined_forward(params, x):
    h = x
    for s in range(params["w"].shape[0]):
        h = stage({"w": params["w"][s], "b": params["b"][s]}, h)
    return h


def main(batches=3, batch=32, width=16, microbatch_counts=(1, 2, 4, 8), verbose: bool = True):
    say = print if verbose else (lambda *a, **k: None)
    mesh = nb.DeviceMesh("pipe", (STAGES,), ("pp",))
    init = init_params(STAGES, width)
    params = {k: nb.shard(v, mesh, P("pp")) for k, v in init.items()}
    rng = np.random.default_rng(2)
    data = [rng.normal(size=(batch, width)) for _ in range(batches)]

    say(f"MLP: {STAGES} stages of width {width}; {batches} batches of {batch} rows each")
    whole = {k: nb.constant(v) for k, v in init.items()}
    unpipelined_forward(whole, nb.constant(data[0])).numpy()
    start = time.perf_counter()
    wants = [unpipelined_forward(whole, nb.constant(x)).numpy() for x in data]
    base_ms = 1e3 * (time.perf_counter() - start) / batches
    say(f"  unpipelined, one device: {base_ms:.2f} ms/batch")
    say(
        f"  {'M':>3}{'steps':>7}{'bubble':>8}{'ideal x':>9}"
        f"{'ms/batch':>10}{'rows/s':>9}{'max |error|':>13}"
    )
    rows = []
    for m in microbatch_counts:
        worst = 0.0
        # untimed: the first call per shape records the program that later calls reuse
        pipeline.pipeline_forward(stage, params, data[0], mesh=mesh, microbatches=m).numpy()
        start = time.perf_counter()
        outs = []
        for x in data:
            out = pipeline.pipeline_forward(stage, params, x, mesh=mesh, microbatches=m)
            outs.append(out.numpy())  # realizes the batch: part of its time
        ms = 1e3 * (time.perf_counter() - start) / batches
        for got, want in zip(outs, wants, strict=True):
            worst = max(worst, float(np.max(np.abs(got - want))))
        # forward only: the stages are busy M of the M + S - 1 steps
        bubble = (STAGES - 1) / (m + STAGES - 1)
        assert abs(bubble - pipeline.GPipe(STAGES, m).bubble_fraction) < 1e-12
        assert worst < 1e-12, (m, worst)
        ideal = STAGES * m / (m + STAGES - 1)
        say(
            f"  {m:>3}{m + STAGES - 1:>7}{bubble:>8.3f}{ideal:>9.2f}"
            f"{ms:>10.2f}{batch / ms * 1e3:>9.0f}{worst:>13.1e}"
        )
        rows.append({"microbatches": m, "bubble": bubble, "ms": ms, "max_error": worst})
    say("every batch's output equals the unpipelined model's")
    return {"rows": rows}


if __name__ == "__main__":
    main()
