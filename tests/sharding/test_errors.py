"""Bad inputs to the sharding API raise a clear ShardingError at the call, and 0-d sharded
values assemble to 0-d arrays."""

import numpy as np
import pytest

import nabla as nb
from nabla import P
from nabla.nn import pipeline

MESH = nb.DeviceMesh("m", (2, 2), ("dp", "tp"))
RING = nb.DeviceMesh("r", (4,), ("x",))


def _err(match):
    return pytest.raises(nb.ShardingError, match=match)


def test_sharded_scalar_assembles_to_0d():
    s = nb.shard(nb.asarray(3.0), MESH, P())
    assert s.numpy().shape == ()
    total = nb.sum(nb.shard(np.arange(4.0, dtype=np.float32), RING, P("x")))
    assert total.numpy().shape == () and float(total.numpy()) == 6.0


def test_mesh_shape_and_names_must_be_sequences():
    with _err("shape must be positive ints"):
        nb.DeviceMesh("a", None, ("x",))
    with _err("shape must be positive ints"):
        nb.DeviceMesh("a", (True,), ("x",))
    with _err("axis names must be strings"):
        nb.DeviceMesh("a", (2,), None)


@pytest.mark.parametrize("spec", [3, [1], {"dp": 0}, [{"dp"}]])
def test_shard_refuses_malformed_spec(spec):
    with _err("shard: .*got"):
        nb.shard(nb.ones((4, 4)), MESH, spec)


def test_shard_map_refuses_malformed_specs():
    f = nb.shard_map(lambda x: x, mesh=MESH, in_specs=(0,), out_specs=P())
    with _err("shard_map: .*got 0"):
        f(np.ones((4, 4)))
    g = nb.shard_map(lambda x: x, mesh=MESH, in_specs={3: P("dp")}, out_specs=P())
    with _err("key 3"):
        g(np.ones((4, 4)))
    h = nb.shard_map(lambda x: None, mesh=MESH, in_specs=(P("dp"),), out_specs=P())
    with _err("out_specs P\\(\\) do not match the result None"):
        h(np.ones((4, 4)))


def test_shard_map_out_specs_dict():
    f = nb.shard_map(
        lambda x: {"a": x, "b": nb.all_reduce(nb.sum(x), "sum", axes="dp")},
        mesh=MESH,
        in_specs=(P("dp"),),
        out_specs={"a": P("dp"), "b": P()},
    )
    a = np.arange(16.0, dtype=np.float32).reshape(4, 4)
    out = f(a)
    np.testing.assert_allclose(out["a"].numpy(), a)
    np.testing.assert_allclose(out["b"].numpy(), a.sum())


def test_collective_axes_must_be_names():
    x = nb.shard(nb.ones((4, 4)), MESH, P("dp"))
    with _err("all_reduce: axes must be a mesh axis name"):
        nb.all_reduce(x, "sum", axes=0)
    body = nb.shard_map(
        lambda b: nb.all_reduce(b, "sum", axes=0), mesh=MESH, in_specs=(P("dp"),), out_specs=P()
    )
    with _err("all_reduce: axes must be a mesh axis name"):
        body(np.ones((4, 4)))


@pytest.mark.parametrize("perm", [[(0.5, 1)], [(True, False)], [("1", "0")]])
def test_ppermute_refuses_non_int_devices(perm):
    v = nb.shard(np.arange(8.0), RING, P("x"))
    with _err("ppermute: perm must be pairs of int"):
        nb.ppermute(v, perm)
    body = nb.shard_map(
        lambda b: nb.ppermute(b, perm, axis_name="x"),
        mesh=RING,
        in_specs=(P("x"),),
        out_specs=P("x"),
    )
    with _err("ppermute: perm must be pairs of int"):
        body(np.arange(8.0))


@pytest.mark.parametrize("root", [1.5, "a", None])
def test_broadcast_refuses_non_int_root(root):
    v = nb.shard(np.arange(8.0), RING, P("x"))
    with _err("broadcast: root must be an int"):
        nb.broadcast(v, root=root)


@pytest.mark.parametrize(
    "root, match",
    [
        (5, "out of range"),
        (-1, "out of range"),
        ((0, 1, 1), "3 root positions"),
        (0.5, "root must"),
    ],
)
def test_broadcast_in_shard_map_checks_root(root, match):
    body = nb.shard_map(
        lambda b: nb.broadcast(b, root, axes="dp"),
        mesh=MESH,
        in_specs=(P("dp"),),
        out_specs=P(),
    )
    with _err(f"broadcast: .*{match}"):
        body(np.ones((4, 4)))


def test_all_to_all_in_shard_map_refuses_same_dims():
    body = nb.shard_map(
        lambda b: nb.all_to_all(b, 0, 0, axes="tp"),
        mesh=MESH,
        in_specs=(P(None, "tp"),),
        out_specs=P("tp"),
    )
    with _err("all_to_all: split_axis 0 and concat_axis 0 are the same"):
        body(np.ones((4, 4)))


def test_visualize_sharding_refuses_0d():
    with _err("shows 1-D and 2-D tensors"):
        nb.visualize_sharding(nb.shard(nb.asarray(1.0), MESH, P()))


def _stage(p, h):
    return nb.tanh(h @ p["w"])


def _mse(out, target):
    return nb.mean((out - target) ** 2)


def test_pipeline_checks_arguments():
    w = np.ones((4, 8, 8), np.float32)
    xb = np.ones((16, 8), np.float32)
    ring = nb.DeviceMesh("p", (4,), ("pp",))
    fwd = pipeline.pipeline_forward
    with _err("data_axis 'pp' is the pipeline axis"):
        fwd(_stage, {"w": w}, xb, mesh=ring, microbatches=4, data_axis="pp")
    with _err("stacks the 4 stages .* shape \\(8, 8, 8\\)"):
        fwd(_stage, {"w": np.ones((8, 8, 8))}, xb, mesh=ring, microbatches=4)
    with _err("microbatches must be an int"):
        fwd(_stage, {"w": w}, xb, mesh=ring, microbatches=2.0)
    with _err("pipeline: unknown mesh axis 'zz'"):
        fwd(_stage, {"w": w}, xb, mesh=ring, axis="zz", microbatches=4)
    with _err("mesh must be a DeviceMesh"):
        fwd(_stage, {"w": w}, xb, mesh=None, microbatches=4)
    with _err("targets of shape \\(8, 8\\)"):
        pipeline.pipeline_value_and_grad(
            _stage, _mse, {"w": w}, xb, xb[:8], mesh=ring, microbatches=4
        )
