"""Pipeline parallelism: GPipe and 1F1B give the unpipelined model's losses and parameters
over several training steps, alone and with data parallelism on a (pp, dp) mesh; the
timetables' bubble fraction is (S-1)/(M+S-1)."""

import numpy as np
import pytest

import nabla as nb
from nabla import P
from nabla.nn import pipeline as pl

S, D = 4, 6


def stage(p, h):
    return nb.tanh(h @ p["w"] + p["b"])


def loss_fn(out, y):
    return nb.mean((out - y) ** 2)


def reference_loss(p, x, y):
    h = x
    for s in range(p["w"].shape[0]):
        h = nb.tanh(h @ p["w"][s] + p["b"][s])
    return loss_fn(h, y)


def data(batch, seed=0, stages=S):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(stages, D, D)) * 0.5
    b = rng.normal(size=(stages, D)) * 0.1
    return w, b, rng.normal(size=(batch, D)), rng.normal(size=(batch, D))


def train(step, params, steps=3, lr=0.1):
    losses = []
    for _ in range(steps):
        loss, grads = step(params)
        losses.append(loss.item())
        params = nb.tree_map(lambda p, g: p - lr * g, params, grads)
    return losses, params


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("mesh_shape", [(4,), (4, 2), (2, 2)])
def test_pipelined_training_equals_the_unpipelined_model(schedule, mesh_shape):
    w, b, x, y = data(16, stages=mesh_shape[0])
    names = ("pp", "dp")[: len(mesh_shape)]
    mesh = nb.DeviceMesh("pipe", mesh_shape, names)
    dp = "dp" if len(mesh_shape) == 2 else None
    ref_losses, ref_params = train(
        lambda p: nb.value_and_grad(reference_loss)(p, nb.constant(x), nb.constant(y)),
        {"w": nb.constant(w), "b": nb.constant(b)},
    )
    params = {"w": nb.shard(w, mesh, P("pp")), "b": nb.shard(b, mesh, P("pp"))}

    def step(p):
        return pl.pipeline_value_and_grad(
            stage,
            loss_fn,
            p,
            nb.constant(x),
            nb.constant(y),
            mesh=mesh,
            microbatches=4,
            schedule=schedule,
            data_axis=dp,
        )

    losses, params = train(step, params)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-10)
    for k in ("w", "b"):
        np.testing.assert_allclose(params[k].numpy(), ref_params[k].numpy(), rtol=1e-9, atol=1e-12)
        assert params[k].sharding.to_partition_spec() == P("pp")


def test_pipeline_forward_is_the_model():
    w, b, x, _ = data(8)
    mesh = nb.DeviceMesh("pipe", (4,), ("pp",))
    params = {"w": nb.shard(w, mesh, P("pp")), "b": nb.shard(b, mesh, P("pp"))}
    out = pl.pipeline_forward(stage, params, nb.constant(x), mesh=mesh, microbatches=2)
    h = x
    for s in range(S):
        h = np.tanh(h @ w[s] + b[s])
    np.testing.assert_allclose(out.numpy(), h)


@pytest.mark.parametrize("stages,micro", [(2, 1), (4, 4), (4, 8), (3, 16)])
def test_bubble_fraction_is_the_gpipe_formula(stages, micro):
    want = (stages - 1) / (micro + stages - 1)
    assert pl.GPipe(stages, micro).bubble_fraction == pytest.approx(want)
    assert pl.OneFOneB(stages, micro).bubble_fraction == pytest.approx(want)
    # 1F1B keeps at most S - s activations on stage s; GPipe keeps all M
    assert pl.OneFOneB(stages, micro).peak_activations == [
        min(stages - s, micro) for s in range(stages)
    ]
    assert pl.GPipe(stages, micro).peak_activations == [micro] * stages
    # the 1F1B executor's activation buffers have S slots, whatever M is
    assert pl._ring_size(pl.OneFOneB(stages, micro).table, stages, micro) == min(stages, micro)


def test_bad_microbatch_counts_are_refused():
    w, b, x, y = data(6)
    mesh = nb.DeviceMesh("pipe", (4,), ("pp",))
    params = {"w": nb.shard(w, mesh, P("pp")), "b": nb.shard(b, mesh, P("pp"))}
    with pytest.raises(nb.ShardingError, match="does not split into 4 microbatches"):
        pl.pipeline_forward(stage, params, nb.constant(x), mesh=mesh, microbatches=4)
    with pytest.raises(ValueError, match="schedule must be"):
        pl.pipeline_value_and_grad(
            stage,
            loss_fn,
            params,
            nb.constant(x),
            nb.constant(y),
            mesh=mesh,
            microbatches=2,
            schedule="zb",
        )
