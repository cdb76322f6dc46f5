"""Pipeline and data parallelism together: a 4-layer MLP on a simulated (pp, dp) = (2, 2) mesh.

The model is the one of ``pipeline_mlp.py`` (four equal-width ``tanh`` layers), grouped into
two pipeline stages of two layers each: every parameter is stacked as
``(stages, layers per stage, ...)`` and dim 0 is split over ``pp``. With
``data_axis="dp"`` each microbatch is also split over ``dp``: the two devices of a stage
process half of it each, and the loss and the gradients are averaged over ``dp`` (each
stage's gradient stays replicated over ``dp``, like its parameters).

Both schedules are trained for a few SGD steps and checked against the same four layers on
one device.

Run: python examples/pipeline_dp.py
"""

import numpy as np

import nabla as nb
from nabla import P
from nabla.nn import pipeline

try:
    from .pipeline_mlp import init_params, make_data, mse, train, unpipelined_loss
except ImportError:  # run as a script
    from pipeline_mlp import init_params, make_data, mse, train, unpipelined_loss

LAYERS, PP, DP = 4, 2, 2


def stage(p, h):
    """One stage: its ``LAYERS // PP`` layers in order (``p["w"]``: (layers, width, width))."""
    for i in range(p["w"].shape[0]):
        h = nb.tanh(h @ p["w"][i] + p["b"][i])
    return h


def as_stages(params):
    """(layers, ...) -> (stages, layers per stage, ...): consecutive layers form a stage."""
    return {k: v.reshape((PP, LAYERS // PP) + v.shape[1:]) for k, v in params.items()}


def main(steps=6, batch=32, width=16, microbatches=4, lr=0.5, verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    mesh = nb.DeviceMesh("pipe_data", (PP, DP), ("pp", "dp"))
    init = init_params(LAYERS, width)
    x_np, y_np = make_data(batch, width)
    x, y = nb.constant(x_np), nb.constant(y_np)

    ref_losses, ref_params = train(
        lambda p: nb.value_and_grad(unpipelined_loss)(p, x, y),
        {k: nb.constant(v) for k, v in init.items()},
        steps,
        lr,
    )
    ref_staged = as_stages({k: v.numpy() for k, v in ref_params.items()})
    rows = batch // microbatches // DP
    say(
        f"MLP: {LAYERS} layers of width {width} as {PP} stages on a (pp, dp) = ({PP}, {DP}) "
        f"mesh; batch {batch} in {microbatches} microbatches of {batch // microbatches} rows, "
        f"{rows} per dp device"
    )
    say(f"single-device losses: {np.round(ref_losses, 6).tolist()}")

    out = {"reference": ref_losses, "losses": {}}
    for schedule in ("gpipe", "1f1b"):
        # dim 0 (the stage) over pp; replicated over dp
        params = {k: nb.shard(v, mesh, P("pp")) for k, v in as_stages(init).items()}

        def step(p, schedule=schedule):
            return pipeline.pipeline_value_and_grad(
                stage,
                mse,
                p,
                x,
                y,
                mesh=mesh,
                microbatches=microbatches,
                schedule=schedule,
                data_axis="dp",
            )

        losses, params = train(step, params, steps, lr)
        say(f"{schedule:<5} losses:        {np.round(losses, 6).tolist()}")
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-10)
        for k in params:
            np.testing.assert_allclose(params[k].numpy(), ref_staged[k], rtol=1e-9, atol=1e-12)
            assert params[k].sharding.to_partition_spec() == P("pp")
        out["losses"][schedule] = losses
    say("both schedules: losses and parameters equal the single-device model's")
    say(f"\n{pipeline.OneFOneB(PP, microbatches)}")
    return out


if __name__ == "__main__":
    main()
