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


def test_reshard_errors_name_reshard():
    x = nb.shard(nb.ones((4, 4)), MESH, P("dp"))
    with _err("reshard: unknown mesh axis 'zz'"):
        nb.reshard(x, MESH, P("zz"))
    with _err(r"reshard: dim 0 of shape \(3, 4\) has size 3"):
        nb.reshard(nb.ones((3, 4)), MESH, P("dp"))


def test_shard_map_refuses_malformed_specs():
    f = nb.shard_map(lambda x: x, mesh=MESH, in_specs=(0,), out_specs=P())
    with _err("shard_map in_specs: .*got 0"):
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


# ----------------------------------------------------------------------------- review findings
M2X2 = nb.DeviceMesh("review", (2, 2), ("dp", "tp"))


def test_sharded_values_captured_in_a_body_or_nested_bodies_are_refused():
    x = nb.shard(np.ones((4, 4)), M2X2, P("dp", "tp"))
    body = nb.shard_map(
        lambda y: y + x[:2, :2], mesh=M2X2, in_specs=(P("dp", "tp"),), out_specs=P("dp", "tp")
    )
    with pytest.raises(nb.ShardingError, match="pass it to shard_map as an argument"):
        body(x)
    # whatever the shapes: the captured value's global shape does not broadcast with a block
    whole = nb.shard_map(
        lambda y: y + x, mesh=M2X2, in_specs=(P("dp", "tp"),), out_specs=P("dp", "tp")
    )
    with pytest.raises(nb.ShardingError, match="add: a sharded value"):
        whole(x)
    inner = nb.shard_map(lambda z: z, mesh=M2X2, in_specs=(P(),), out_specs=P())
    outer = nb.shard_map(inner, mesh=M2X2, in_specs=(P("dp", "tp"),), out_specs=P("dp", "tp"))
    with pytest.raises(nb.ShardingError, match="nesting over the same axes"):
        outer(x)
    other = nb.DeviceMesh("other", (2,), ("r",))
    inner = nb.shard_map(lambda z: z * 2, mesh=other, in_specs=(P("r"),), out_specs=P("r"))
    outer = nb.shard_map(inner, mesh=M2X2, in_specs=(P("dp", "tp"),), out_specs=P("dp", "tp"))
    with pytest.raises(nb.ShardingError, match="inside a shard_map body over mesh 'review'"):
        outer(x)
    # axis_index of another mesh (even one with the body's axis names) inside a body
    twin = nb.DeviceMesh("twin", (2, 2), ("dp", "tp"))
    for mesh in (twin, other):
        name = mesh.axis_names[0]
        body = nb.shard_map(
            lambda y, mesh=mesh, name=name: y + nb.axis_index(mesh, name),
            mesh=M2X2,
            in_specs=(P("dp", "tp"),),
            out_specs=P("dp", "tp"),
        )
        with pytest.raises(nb.ShardingError, match="not the mesh of the enclosing shard_map"):
            body(x)
    with pytest.raises(nb.ShardingError, match="mesh must be a DeviceMesh"):
        nb.vmap(lambda r: r, spmd_axis_name="dp", mesh="review")(np.ones((4, 2)))


def test_all_reduce_refuses_a_reduction_that_is_not_the_terms_kind():
    x = nb.shard(np.arange(16.0).reshape(4, 4), M2X2, P("dp", "tp"))
    with pytest.raises(nb.ShardingError, match="'sum' terms"):
        nb.all_reduce(nb.sum(x, axis=0), "max")
    with pytest.raises(nb.ShardingError, match="no mesh axes"):
        nb.all_reduce(x, axes=())


def test_a_partial_value_read_twice_is_completed_once():
    a, b = np.arange(24.0).reshape(4, 6), np.ones((6, 3))
    args = (nb.shard(a, M2X2, P(None, "tp")), nb.shard(b, M2X2, P("tp")))
    text = str(nb.trace(lambda a, b: nb.softmax(a @ b, axis=1))(*args))
    assert text.count("all_reduce") == 1, text


def test_partials_through_two_operand_data_movement_and_integer_ops():
    a = np.arange(16.0).reshape(4, 4)
    x = nb.shard(a, M2X2, P("dp", "tp"))
    s = nb.sum(x, axis=0, keepdims=True)  # partial over dp
    cat = nb.concatenate([s, s], axis=0)
    assert cat.sharding.partial_kinds == {"dp": "sum"}
    np.testing.assert_allclose(cat.numpy(), np.concatenate([a.sum(0, keepdims=True)] * 2))
    upd = nb.slice_update(s, s[:, :2] * 2.0, start=[0, 0], stop=[1, 2])
    want = a.sum(0, keepdims=True).copy()
    want[:, :2] *= 2
    np.testing.assert_allclose(upd.numpy(), want)
    i = nb.sum(nb.shard(np.arange(16, dtype=np.int32).reshape(4, 4), M2X2, P("dp")), axis=0)
    ref = np.arange(16).reshape(4, 4).sum(0)
    np.testing.assert_array_equal(nb.floor_div(i, 3).numpy(), ref // 3)
    np.testing.assert_array_equal(nb.mod(i, 3).numpy(), ref % 3)


def test_unused_and_already_split_inputs_keep_their_layout():
    x = nb.shard(np.ones((4, 4)), M2X2, P("dp", "tp"))
    g = nb.grad(lambda a, b: nb.sum(a * 2.0), argnums=1)(x, x)
    assert g.sharding == x.sharding
    y = nb.vmap(lambda r: r * 2, in_axes=1, out_axes=1, spmd_axis_name="tp", mesh=M2X2)(
        nb.shard(np.ones((4, 4)), M2X2, P(None, "tp"))
    )
    assert y.sharding.to_partition_spec() == P(None, "tp")


def test_gpipe_gradients_of_a_stage_with_an_infinite_derivative_at_zero():
    S, D = 4, 6
    mesh = nb.DeviceMesh("rms", (S,), ("pp",))
    rng = np.random.default_rng(0)
    w = rng.standard_normal((S, D, D)) * 0.5
    x, y = rng.standard_normal((12, D)), rng.standard_normal((12, D))

    def stage(p, h):  # an RMS norm without eps: infinite derivative at h = 0
        return (h @ p["w"]) / nb.sqrt(nb.mean(h * h, axis=-1, keepdims=True))

    def mse(o, t):
        return nb.mean((o - t) ** 2)

    def ref(p):
        h = nb.constant(x)
        for s in range(S):
            h = stage({"w": p["w"][s]}, h)
        return mse(h, nb.constant(y))

    _, want = nb.value_and_grad(ref)({"w": nb.constant(w)})
    for schedule in ("gpipe", "1f1b"):
        _, got = pipeline.pipeline_value_and_grad(
            stage,
            mse,
            {"w": nb.shard(w, mesh, P("pp"))},
            x,
            y,
            mesh=mesh,
            microbatches=3,
            schedule=schedule,
        )
        np.testing.assert_allclose(got["w"].numpy(), want["w"].numpy(), rtol=1e-9, atol=1e-12)


def test_shard_inside_vmap_names_the_axis_the_mapped_dim_already_uses():
    x = np.arange(16.0, dtype=np.float32).reshape(4, 4)
    with _err("inside vmap the mapped dim is split over mesh axis 'tp'"):
        nb.vmap(lambda r: nb.shard(r, MESH, P("tp")), spmd_axis_name="tp", mesh=MESH)(x)
    with _err("inside vmap the mapped dim is split over mesh axis 'tp'"):
        nb.vmap(lambda r: nb.reshard(r, MESH, P("tp")))(nb.shard(x, MESH, P("tp")))
    out = nb.vmap(lambda r: nb.shard(r, MESH, P("dp")), spmd_axis_name="tp", mesh=MESH)(x)
    np.testing.assert_array_equal(out.numpy(), x)


def test_shard_map_in_specs_name_the_argument_and_check_python_values():
    """A spec longer than a Python argument's rank (0) was ignored silently (JAX refuses
    it); an uneven split's error named ``shard``, not the in_specs entry."""
    mesh = nb.DeviceMesh("m", (4,), ("x",))
    f = nb.shard_map(lambda b, k: b * k, mesh, (P("x"), P("x", None)), P("x"))
    with pytest.raises(nb.ShardingError, match=r"in_specs \(for 3\): spec P\('x', None\) has 2"):
        f(nb.ones((8,)), 3)
    g = nb.shard_map(lambda a: a, mesh, (P("x"),), P("x"))
    with pytest.raises(nb.ShardingError, match=r"shard_map: in_specs entry P\('x'\) for the arg"):
        g(nb.ones((6,)))
    h = nb.shard_map(lambda b, k: b * k, mesh, (P("x"), None), P("x"))
    assert h(nb.ones((8,)), 3.0).tolist() == [3.0] * 8


def test_jax_s_collective_order_names_the_mix_up():
    """``all_gather(x, "x")`` (JAX's order: the mesh axis second) said the axis 'x' was out
    of range; it now says a dim is an int and mesh axes go in ``axes=``."""
    mesh = nb.DeviceMesh("order", (2,), ("x",))
    x = nb.shard(nb.arange(4.0), mesh, nb.P("x"))
    for call in (
        lambda: nb.all_gather(x, "x"),
        lambda: nb.reduce_scatter(x, "x"),
        lambda: nb.all_to_all(x, "x", 0),
    ):
        with pytest.raises(nb.ShardingError, match=r"a tensor dim is an int, got the name 'x'"):
            call()
