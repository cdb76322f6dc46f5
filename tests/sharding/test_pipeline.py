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


def reference_loss(p, x, y, stage_fn=stage, loss=loss_fn):
    """The unpipelined model: every stage in turn, then the loss."""
    h = x
    for s in range(p["w"].shape[0]):
        h = stage_fn({"w": p["w"][s], "b": p["b"][s]}, h)
    return loss(h, y)


def staged(w, b, mesh):
    """The stages' weights and biases, stage s on device s along ``pp``."""
    return {"w": nb.shard(w, mesh, P("pp")), "b": nb.shard(b, mesh, P("pp"))}


def pipelined(stage_fn, loss, params, x, y, mesh, **kw):
    """``pipeline_value_and_grad`` on NumPy data."""
    return pl.pipeline_value_and_grad(
        stage_fn, loss, params, nb.constant(x), nb.constant(y), mesh=mesh, **kw
    )


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
    params = staged(w, b, mesh)

    def step(p):
        return pipelined(
            stage, loss_fn, p, x, y, mesh, microbatches=4, schedule=schedule, data_axis=dp
        )

    losses, params = train(step, params)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-10)
    for k in ("w", "b"):
        np.testing.assert_allclose(params[k].numpy(), ref_params[k].numpy(), rtol=1e-9, atol=1e-12)
        assert params[k].sharding.to_partition_spec() == P("pp")


def test_pipeline_forward_is_the_model():
    w, b, x, _ = data(8)
    mesh = nb.DeviceMesh("pipe", (4,), ("pp",))
    params = staged(w, b, mesh)
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
    params = staged(w, b, mesh)
    with pytest.raises(nb.ShardingError, match="does not split into 4 microbatches"):
        pl.pipeline_forward(stage, params, nb.constant(x), mesh=mesh, microbatches=4)
    with pytest.raises(ValueError, match="schedule must be"):
        pipelined(stage, loss_fn, params, x, y, mesh, microbatches=2, schedule="zb")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_loss_with_an_infinite_derivative_off_the_last_stage_gives_finite_gradients(schedule):
    """The loss runs on every stage's output and counts on the last one only; its zero
    cotangent met ``log``'s infinite derivative at a 0 an earlier stage made: NaN."""
    mesh = nb.DeviceMesh("pipe", (4,), ("pp",))  # (4 devices: also run on 4 processes)
    eye = [[1.0, 0.0], [0.0, 1.0]]
    w = np.array([eye, eye, eye, [[1.0, 0.5], [0.5, 1.0]]])
    b = np.array([[0.0, -1.0], [0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])  # relu's exact zeros
    x, y = np.array([[1.0, 0.5], [2.0, 0.0]]), np.ones((2, 2))

    def relu_stage(p, h):
        return nb.relu(h @ p["w"] + p["b"])

    def poisson(o, t):
        return nb.mean(o - t * nb.log(o))

    want_loss, want = nb.value_and_grad(reference_loss)(
        {"w": nb.constant(w), "b": nb.constant(b)},
        nb.constant(x),
        nb.constant(y),
        relu_stage,
        poisson,
    )
    loss, grads = pipelined(
        relu_stage, poisson, staged(w, b, mesh), x, y, mesh, microbatches=2, schedule=schedule
    )
    np.testing.assert_allclose(loss.item(), want_loss.item(), rtol=1e-12)
    np.testing.assert_allclose(grads["w"].numpy(), want["w"].numpy(), rtol=1e-10, atol=1e-12)


def test_1f1b_differentiates_the_dropout_masks_its_forward_drew():
    """1F1B re-runs each stage for its backward: the re-run drew new masks, so the gradient
    was another loss's. With a loss linear in each stage's weight, sum(w * dL/dw) is L."""
    mesh = nb.DeviceMesh("pipe", (4,), ("pp",))
    params = {"w": nb.shard(np.ones((4, 4)), mesh, P("pp"))}

    def plain(p, h):
        return nb.nn.functional.dropout(h, 0.5) * p["w"]

    dropped = nb.checkpoint(plain)  # (a checkpoint inside a re-run logs what it replays)
    loss, grads = pl.pipeline_value_and_grad(
        dropped,
        lambda o, t: nb.mean(o),
        params,
        nb.ones((4, 4), dtype=nb.float64),
        nb.ones((4, 4)),
        mesh=mesh,
        microbatches=2,
        schedule="1f1b",
    )
    per_stage = (grads["w"].numpy() * 1.0).sum(axis=1)  # w = 1
    np.testing.assert_allclose(per_stage, [loss.item()] * 4, rtol=1e-12)


def test_stage_and_loss_functions_are_checked():
    """A stage output of another shape or dtype than its input was merged into the next
    microbatch's input silently (broadcast, or token ids promoted to floats); a loss per
    row and an integer parameter passed 1F1B unchecked."""
    w, b, x, y = data(8)
    mesh = nb.DeviceMesh("pipe", (4,), ("pp",))
    params = staged(w, b, mesh)
    narrow = nb.constant(x[:, :1])
    with pytest.raises(ValueError, match=r"stage_fn must return a tensor of its input's shape"):
        pl.pipeline_forward(
            lambda p, h: nb.sum(h, -1, keepdims=True) * p["w"][0],
            params,
            narrow,
            mesh=mesh,
            microbatches=2,
        )
    for schedule in ("gpipe", "1f1b"):
        per_row = lambda o, t: nb.mean((o - t) ** 2, axis=1)  # noqa: E731
        with pytest.raises(ValueError, match=r"loss_fn must return a scalar tensor"):
            pipelined(stage, per_row, params, x, y, mesh, microbatches=2, schedule=schedule)
        ints = {**params, "k": nb.shard(np.zeros((4, 2), np.int32), mesh, P("pp"))}
        with pytest.raises(TypeError, match=r"parameter \['k'\] has dtype int32"):
            pipelined(stage, loss_fn, ints, x, y, mesh, microbatches=2, schedule=schedule)
