"""Train a 4-stage MLP with pipeline parallelism on a simulated 4-device ``pp`` mesh.

Each stage is one equal-width ``tanh`` layer; stacking the stages' weights along dim 0 and
splitting that dim over ``pp`` puts one stage on each device. A batch is cut into
microbatches that flow from stage to stage (``nb.nn.pipeline``). Both schedules are trained
for a few SGD steps and compared with the same model run unpipelined, step by step:

- ``"gpipe"``: every microbatch's forward, then every backward; each stage keeps the
  activations of all ``M`` microbatches;
- ``"1f1b"``: after a warm-up each stage alternates one forward and one backward, keeping at
  most ``S - s`` activations. Same idle share ("bubble"), less memory.

The mesh is simulated in one process, so this shows the schedule and checks the values; it
is not faster than the unpipelined model.

Run: python examples/pipeline_mlp.py
"""

import numpy as np

import nabla as nb
from nabla import P
from nabla.nn import pipeline

STAGES = 4


def stage(p, h):
    """One stage: ``p`` holds this stage's ``w`` (width x width) and ``b``."""
    return nb.tanh(h @ p["w"] + p["b"])


def mse(out, target):
    return nb.mean((out - target) ** 2)


def unpipelined_loss(params, x, y):
    h = x
    for s in range(params["w"].shape[0]):
        h = stage({"w": params["w"][s], "b": params["b"][s]}, h)
    return mse(h, y)


def init_params(stages, width, seed=0):
    """Each leaf stacks the stages along dim 0."""
    rng = np.random.default_rng(seed)
    return {
        "w": rng.normal(size=(stages, width, width)) / np.sqrt(width),
        "b": 0.1 * rng.normal(size=(stages, width)),
    }


def make_data(batch, width, seed=1):
    """Targets from a fixed random two-layer tanh network, so the model can fit them."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, width))
    a = rng.normal(size=(width, width)) / np.sqrt(width)
    b = rng.normal(size=(width, width)) / np.sqrt(width)
    return x, np.tanh(np.tanh(x @ a) @ b)


def train(step, params, steps, lr):
    """Plain SGD; ``step(params) -> (loss, grads)``."""
    losses = []
    for _ in range(steps):
        loss, grads = step(params)
        losses.append(loss.item())
        params = nb.tree_map(lambda p, g: p - lr * g, params, grads)
    return losses, params


def main(steps=6, batch=32, width=16, microbatches=4, lr=0.5, verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    mesh = nb.DeviceMesh("pipe", (STAGES,), ("pp",))
    init = init_params(STAGES, width)
    x_np, y_np = make_data(batch, width)
    x, y = nb.constant(x_np), nb.constant(y_np)

    ref_losses, ref_params = train(
        lambda p: nb.value_and_grad(unpipelined_loss)(p, x, y),
        {k: nb.constant(v) for k, v in init.items()},
        steps,
        lr,
    )
    say(f"MLP: {STAGES} stages of width {width}, batch {batch}, {microbatches} microbatches")
    say(f"unpipelined losses: {np.round(ref_losses, 6).tolist()}")

    out = {"reference": ref_losses, "losses": {}, "bubble": {}, "peak_activations": {}}
    for schedule, table in (("gpipe", pipeline.GPipe), ("1f1b", pipeline.OneFOneB)):
        # one stage per device: dim 0 of every leaf split over pp
        params = {k: nb.shard(v, mesh, P("pp")) for k, v in init.items()}

        def step(p, schedule=schedule):
            return pipeline.pipeline_value_and_grad(
                stage, mse, p, x, y, mesh=mesh, microbatches=microbatches, schedule=schedule
            )

        losses, params = train(step, params, steps, lr)
        timetable = table(STAGES, microbatches)
        say(f"\n{timetable}")
        say(
            f"bubble fraction {timetable.bubble_fraction:.3f} = (S - 1) / (M + S - 1); "
            f"peak activations per stage {timetable.peak_activations}"
        )
        say(f"{schedule} losses:        {np.round(losses, 6).tolist()}")

        np.testing.assert_allclose(losses, ref_losses, rtol=1e-10)
        for k in params:
            np.testing.assert_allclose(
                params[k].numpy(), ref_params[k].numpy(), rtol=1e-9, atol=1e-12
            )
            assert params[k].sharding.to_partition_spec() == P("pp")  # still one stage each
        say(f"{schedule}: losses and parameters equal the unpipelined model's")
        out["losses"][schedule] = losses
        out["bubble"][schedule] = timetable.bubble_fraction
        out["peak_activations"][schedule] = timetable.peak_activations
    return out


if __name__ == "__main__":
    main()
