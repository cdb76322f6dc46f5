"""Meshes, specs, sharded tensors and the collectives: values against NumPy, VJP/JVP, the
errors at the call, and named regressions of the original's failures."""

import gc
import itertools

import numpy as np
import pytest

import nabla as nb
from nabla import P
from nabla.runtime.graph import GRAPH

M4 = nb.DeviceMesh("m4", (4,), ("x",))
M22 = nb.DeviceMesh("m22", (2, 2), ("dp", "tp"))
M23 = nb.DeviceMesh("m23", (2, 3), ("a", "b"))
M222 = nb.DeviceMesh("m222", (2, 2, 2), ("a", "b", "c"))


def arr(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def blocks(x):
    return {s.device: s.data for s in x.addressable_shards}


# ----------------------------------------------------------------------------- types
def test_mesh_properties_and_errors():
    assert M22.shape == (2, 2) and M22.axis_names == ("dp", "tp") and M22.size == 4
    assert M22.devices.tolist() == [[0, 1], [2, 3]]
    with pytest.raises(nb.ShardingError, match="repeat"):
        nb.DeviceMesh("m", (2, 2), ("a", "a"))
    with pytest.raises(nb.ShardingError, match="2 dims"):
        nb.DeviceMesh("m", (2, 2), ("a",))


@pytest.mark.parametrize(
    "mesh,spec",
    [
        (M4, P("x")),
        (M4, P(None, "x")),
        (M22, P("dp", "tp")),
        (M22, P(("dp", "tp"))),
        (M22, P(None, ("tp", "dp"))),
        (M23, P("a", "b")),
        (M222, P(("a", "c"), "b")),
    ],
)
def test_addressable_shards_are_slices_of_the_value(mesh, spec):
    x = arr(12, 8) if mesh is not M23 else arr(4, 6)
    t = nb.shard(x, mesh, spec)
    shards = t.addressable_shards
    assert [s.device for s in shards] == list(mesh.local_devices)
    for s in shards:
        np.testing.assert_array_equal(s.data, x[s.index])
    np.testing.assert_array_equal(t.numpy(), x)
    assert "sharding=ShardingSpec" in repr(t)
    assert t.sharding.to_partition_spec() == spec
    assert t.sharding.spec == spec  # JAX's NamedSharding.spec
    # as JAX: a whole dim is slice(None); replica_id numbers the copies of each block
    for s in shards:
        for i, sl in enumerate(s.index):
            assert (sl == slice(None)) == (not t.sharding.dims[i])
    copies = {}
    for s in shards:
        copies.setdefault(tuple((sl.start, sl.stop) for sl in s.index), []).append(s.replica_id)
    assert all(sorted(ids) == list(range(len(ids))) for ids in copies.values())
    # as JAX's immutable arrays: a write would change the tensor (one copy of a block only)
    with pytest.raises(ValueError, match="read-only"):
        shards[-1].data[...] = 0
    np.testing.assert_array_equal(t.numpy(), x)
    with pytest.raises(ValueError, match="read-only"):
        nb.constant(x).addressable_shards[0].data[0] = 1


def test_a_dim_split_over_size_1_axes_only_is_whole_in_shard_indices():
    """As JAX: an axis of size 1 splits nothing, so such a dim's index is slice(None)."""
    mesh = nb.DeviceMesh("m14", (1, 4), ("a", "b"))
    x = arr(2, 8)
    t = nb.shard(x, mesh, P("a", "b"))
    for s in t.addressable_shards:
        assert s.index[0] == slice(None) and s.index[1] != slice(None)
        np.testing.assert_array_equal(s.data, x[s.index])


def test_spec_errors_name_the_op_the_shape_and_the_spec():
    x = nb.constant(arr(4, 6))
    with pytest.raises(nb.ShardingError, match="unknown mesh axis 'q'"):
        nb.shard(x, M22, P("q"))
    with pytest.raises(nb.ShardingError, match="'dp' is used twice"):
        nb.shard(x, M22, P("dp", "dp"))
    with pytest.raises(nb.ShardingError, match="3 entries but the value has rank 2"):
        nb.shard(x, M22, P("dp", None, None))
    with pytest.raises(nb.ShardingError, match=r"dim 1 of shape \(4, 6\) has size 6.*\('x',\)"):
        nb.shard(x, M4, P(None, "x"))
    a = nb.shard(x, M22, P("dp"))
    b = nb.shard(x, nb.DeviceMesh("other", (2, 2), ("dp", "tp")), P("dp"))
    with pytest.raises(nb.ShardingError, match="add: operands are on different meshes"):
        a + b
    with pytest.raises(nb.ShardingError, match="all_to_all: axis 2 is out of range"):
        nb.all_to_all(x, 0, 2)  # (no mesh: the identity, as the other collectives)
    with pytest.raises(nb.ShardingError, match=r"axis 2 is out of range for shape \(4, 6\)"):
        nb.all_gather(x, 2)
    with pytest.raises(nb.ShardingError, match="partial over 'tp' with 'sum' terms"):
        nb.reduce_scatter(nb.sum(nb.shard(x, M22, P(None, "tp")), axis=1), 0, reduce_op="max")
    with pytest.raises(nb.ShardingError, match="reduce_op must be one of"):
        nb.reduce_scatter(a, 1, reduce_op="mean")


def test_collectives_over_replicated_axes_reduce_the_equal_copies():
    """As JAX's psum/psum_scatter of a replicated value: the n copies along an axis are the
    terms (the original Nabla's all_reduce/reduce_scatter of a replicated value)."""
    x = arr(4, 6) + 1.0
    a = nb.shard(x, M22, P("dp"))  # replicated along tp (size 2)
    np.testing.assert_allclose(nb.all_reduce(a, axes="tp").numpy(), 2 * x)
    np.testing.assert_allclose(nb.all_reduce(a, "max", axes="tp").numpy(), x)
    np.testing.assert_allclose(nb.all_reduce(a, "prod", axes="tp").numpy(), x**2, rtol=1e-6)
    # blocks over dp then copies over tp: 2 * (block 0 + block 1)
    both = nb.all_reduce(a, axes=("dp", "tp"))
    assert both.shape == (2, 6) and both.sharding.is_replicated
    np.testing.assert_allclose(both.numpy(), 2 * (x[:2] + x[2:]))
    r = nb.shard(x, M22, P())
    np.testing.assert_allclose(nb.all_reduce(r).numpy(), 4 * x)  # default: every mesh axis
    np.testing.assert_allclose(nb.pmean(r, axis_name="dp").numpy(), x)
    np.testing.assert_allclose(nb.pmean(r).numpy(), x)
    rs = nb.reduce_scatter(a, 1, axes="tp")
    assert rs.sharding.to_partition_spec() == P("dp", "tp")
    np.testing.assert_allclose(rs.numpy(), 2 * x)
    rs = nb.reduce_scatter(r, 0)  # default: every replicated axis
    assert rs.sharding.to_partition_spec() == P(("dp", "tp"))
    np.testing.assert_allclose(rs.numpy(), 4 * x)
    # derivatives: n * ct for sum, ct for max, n * x ** (n - 1) * ct for prod
    w = arr(4, 6)
    for kind, d in [("sum", 2 * w), ("max", w), ("prod", 2 * x * w)]:
        g = nb.grad(lambda v, k=kind: nb.sum(nb.all_reduce(v, k, axes="tp") * w))(a)
        np.testing.assert_allclose(g.numpy(), d, rtol=1e-6, err_msg=kind)
        _, t = nb.jvp(lambda v, k=kind: nb.all_reduce(v, k, axes="tp"), (a,), (a * 0 + w,))
        np.testing.assert_allclose(t.numpy(), d, rtol=1e-6, err_msg=kind)
    g = nb.grad(lambda v: nb.sum(nb.reduce_scatter(v, 0) * w))(r)
    np.testing.assert_allclose(g.numpy(), 4 * w)
    # over split axes the blocks are the terms: all_reduce, then split again
    b = nb.reduce_scatter(nb.shard(x, M22, P("dp")), 0, axes="dp")
    assert b.shape == (2, 6) and b.sharding.to_partition_spec() == P("dp")
    np.testing.assert_allclose(b.numpy(), x[:2] + x[2:])


def test_reductions_and_gathers_of_a_tensor_with_no_mesh_are_its_value():
    """A tensor with no mesh lives on one device: as on a mesh of one device (and in the
    original Nabla) a reduction or gather over it is the identity."""
    x = nb.constant(arr(4, 6))
    for y in (
        nb.all_reduce(x),
        nb.all_reduce(x, "max"),
        nb.pmean(x),
        nb.all_gather(x, 1),
        nb.reduce_scatter(x, 0),
        nb.all_to_all(x, 0, 1),
        nb.all_to_all(x, 0, 0, 0),  # (the original's tiled fourth, as its test passes it)
    ):
        np.testing.assert_array_equal(y.numpy(), arr(4, 6))
    with pytest.raises(nb.ShardingError, match=r"all_to_all: axis 2 is out of range"):
        nb.all_to_all(x, 0, 2)


# ----------------------------------------------------------------------------- layout ops
def test_all_gather_all_to_all_reduce_scatter_keep_the_value():
    x = arr(4, 6)
    t = nb.shard(x, M22, P("dp", "tp"))
    g = nb.all_gather(t, 1)
    assert g.sharding.to_partition_spec() == P("dp")
    np.testing.assert_allclose(g.numpy(), x)
    y = arr(8, 8)
    a = nb.all_to_all(nb.shard(y, M4, P("x")), 1, 0)
    assert a.sharding.to_partition_spec() == P(None, "x")
    np.testing.assert_allclose(a.numpy(), y)
    with pytest.raises(nb.ShardingError, match="concat dim 1 .* not split over any mesh axis"):
        nb.all_to_all(nb.shard(y, M4, P("x")), 1, 1)
    # split dim = concat dim (as JAX's): each device's block cut into 4 chunks, chunk j to
    # device j: the 4 x 4 chunks of the dim transposed, in the same layout
    z = arr(16, 3)
    chunks_t = lambda a: a.reshape(4, 4, 1, 3).swapaxes(0, 1).reshape(16, 3)  # noqa: E731
    same = nb.all_to_all(nb.shard(z, M4, P("x")), 0, 0)
    assert same.sharding.to_partition_spec() == P("x")
    np.testing.assert_allclose(same.numpy(), chunks_t(z))
    assert "all_to_all" in str(nb.trace(lambda v: nb.all_to_all(v, 0, 0))(nb.shard(z, M4, P("x"))))
    w = arr(16, 3, seed=3)
    g = nb.grad(lambda v: nb.sum(nb.all_to_all(nb.shard(v, M4, P("x")), 0, 0) * w))(z)
    np.testing.assert_allclose(g.numpy(), chunks_t(w))  # the transpose is its own inverse
    with pytest.raises(nb.ShardingError, match="not divisible by 16"):
        nb.all_to_all(nb.shard(arr(4, 2), M4, P("x")), 0, 0)
    w = arr(6, 5)
    part = nb.shard(x, M22, P(None, "tp")) @ nb.shard(w, M22, P("tp"))
    assert part.sharding.partial == (("tp", "sum"),)
    rs = nb.reduce_scatter(part, 0)
    assert rs.sharding.to_partition_spec() == P("tp") and not rs.sharding.partial
    np.testing.assert_allclose(rs.numpy(), x @ w)
    ar = nb.all_reduce(part)
    assert ar.sharding.is_replicated
    np.testing.assert_allclose(ar.numpy(), x @ w)


def test_reshard_plans_every_pair_of_specs():
    x = arr(4, 4)
    specs = [
        P(),
        P("dp"),
        P("tp"),
        P(None, "dp"),
        P(None, "tp"),
        P("dp", "tp"),
        P("tp", "dp"),
        P(("dp", "tp")),
        P(None, ("tp", "dp")),
    ]
    for a, b in itertools.product(specs, specs):
        t = nb.reshard(nb.shard(x, M22, a), M22, b)
        assert t.sharding.to_partition_spec() == b, (a, b)
        for s in t.addressable_shards:
            np.testing.assert_array_equal(s.data, x[s.index])


def test_layout_ops_are_identities_under_grad_and_jvp():
    x = arr(4, 6)
    t = nb.shard(x, M22, P("dp", "tp"))

    def f(v):
        return nb.sum(nb.all_gather(nb.all_to_all(v, 0, 1), 0) ** 2)

    g = nb.grad(f)(t)
    np.testing.assert_allclose(g.numpy(), 2 * x)
    assert g.sharding == t.sharding
    tan = arr(4, 6, seed=1)
    _, jt = nb.jvp(f, (t,), (nb.constant(tan),))
    np.testing.assert_allclose(jt.item(), np.sum(2 * x * tan))


# ----------------------------------------------------------------------------- value-changing
def test_all_reduce_over_a_split_dim_reduces_the_blocks():
    x = arr(8, 3)
    t = nb.shard(x, M4, P("x"))
    for op, ref in (("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod)):
        y = nb.all_reduce(t, op)
        assert y.shape == (2, 3) and y.sharding.is_replicated
        np.testing.assert_allclose(y.numpy(), ref(x.reshape(4, 2, 3), axis=0))
    w = arr(2, 3, seed=1)
    g = nb.grad(lambda v: nb.sum(nb.all_reduce(v, "sum") * nb.constant(w)))(t)
    np.testing.assert_allclose(g.numpy(), np.tile(w, (4, 1)))
    gm = nb.grad(lambda v: nb.sum(nb.all_reduce(v, "max") * nb.constant(w)))(t)
    blk = x.reshape(4, 2, 3)
    mask = blk == blk.max(0)
    np.testing.assert_allclose(gm.numpy(), (mask * w).reshape(8, 3))
    tan = arr(8, 3, seed=2)
    _, jt = nb.jvp(lambda v: nb.all_reduce(v, "sum"), (t,), (nb.constant(tan),))
    np.testing.assert_allclose(jt.numpy(), tan.reshape(4, 2, 3).sum(0))
    np.testing.assert_allclose(nb.pmean(t).numpy(), blk.mean(0))
    # the original API's keyword
    np.testing.assert_allclose(nb.all_reduce(t, reduce_axes=("x",)).numpy(), blk.sum(0))


def test_ppermute_ring_is_a_roll_of_blocks_and_its_gradient_the_inverse_roll():
    x = arr(8, 2)
    t = nb.shard(x, M4, P("x"))
    ring = [(i, (i + 1) % 4) for i in range(4)]
    y = nb.ppermute(t, ring)
    np.testing.assert_allclose(y.numpy(), np.roll(x, 2, axis=0))
    w = arr(8, 2, seed=1)
    g = nb.grad(lambda v: nb.sum(nb.ppermute(v, ring) * nb.constant(w)))(t)
    np.testing.assert_allclose(g.numpy(), np.roll(w, -2, axis=0))
    tan = arr(8, 2, seed=2)
    _, jt = nb.jvp(lambda v: nb.ppermute(v, ring), (t,), (nb.constant(tan),))
    np.testing.assert_allclose(jt.numpy(), np.roll(tan, 2, axis=0))
    # a device that receives nothing gets zeros
    half = nb.ppermute(t, [(0, 1)])
    np.testing.assert_allclose(half.numpy()[2:4], x[0:2])
    np.testing.assert_allclose(half.numpy()[:2], 0)
    with pytest.raises(nb.ShardingError, match="destination twice"):
        nb.ppermute(t, [(0, 1), (2, 1)])
    with pytest.raises(nb.ShardingError, match="not a flat index"):
        nb.ppermute(t, [(0, 7)])
    # devices that hold the same block must receive the same block
    r = nb.shard(arr(4, 2), M22, P("dp"))
    with pytest.raises(nb.ShardingError, match="hold the same block"):
        nb.ppermute(r, [(0, 2)])


def test_axis_index_and_broadcast():
    np.testing.assert_array_equal(nb.axis_index(M23, "b").numpy(), [0, 1, 2])
    np.testing.assert_array_equal(nb.axis_index(M23, "a").numpy(), [0, 1])
    x = arr(8, 2)
    t = nb.shard(x, M4, P("x"))
    b = nb.broadcast(t, root=2)
    np.testing.assert_allclose(b.numpy(), x[4:6])
    w = arr(2, 2, seed=1)
    g = nb.grad(lambda v: nb.sum(nb.broadcast(v, root=2) * nb.constant(w)))(t)
    want = np.zeros((8, 2))
    want[4:6] = w
    np.testing.assert_allclose(g.numpy(), want)
    # one int for two axes counts along them together, row-major (as axis_index of a
    # tuple); it had meant that position along each axis: root 1 was device (1, 1)
    y = arr(2, 2, 2)
    s = nb.shard(y, M22, P(None, "dp"))
    for root, dp in ((0, 0), (1, 0), (2, 1), (3, 1)):
        got = nb.broadcast(s, root=root, axes=("dp", "tp"))
        np.testing.assert_array_equal(got.numpy(), y[:, dp : dp + 1])
    np.testing.assert_array_equal(nb.broadcast(s, root=(1, 0), axes=("dp", "tp")).numpy(), y[:, 1:])
    with pytest.raises(nb.ShardingError, match=r"root 4 is out of range for mesh axes"):
        nb.broadcast(s, root=4, axes=("dp", "tp"))


def test_comm_bytes_follow_the_ring_formulas():
    from nabla.ops.base import OPS as OPS_BY_NAME

    t = nb.shard(nb.constant(np.zeros((8, 4), np.float32)), M4, P("x"))  # 32 B per block
    ar = OPS_BY_NAME["all_reduce"].comm_bytes(t._impl, {"axes": ("x",), "kind": "sum"})
    assert ar == 2 * 3 / 4 * 32
    ag = OPS_BY_NAME["all_gather"].comm_bytes(t._impl, {"axes": ("x",), "dim": -2})
    assert ag == 3 * 32


# ----------------------------------------------------------------------------- regressions
def test_max_and_min_of_a_partial_sum_complete_the_sum_first():
    x, w = arr(4, 6), arr(6, 3)
    y = nb.shard(x, M22, P(None, "tp")) @ nb.shard(w, M22, P("tp"))
    assert y.sharding.partial_kinds == {"tp": "sum"}
    np.testing.assert_allclose(nb.max(y).item(), (x @ w).max())
    np.testing.assert_allclose(nb.min(y, axis=0).numpy(), (x @ w).min(0))
    text = str(nb.trace(lambda v: nb.max(v, axis=1))(y))
    assert text.index("all_reduce[axes=('tp',), kind=sum]") < text.index("reduce_max")


def test_a_cast_of_a_partial_sum_completes_the_sum_first():
    """Each term cast, then summed, differed from the cast of the sum (f32 terms to f16: 7
    of 16 elements off against the unsharded f16 result): the cast is of the completed
    value."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((4, 8)) * 10).astype(np.float32)
    w = (rng.standard_normal((8, 4)) * 10).astype(np.float32)
    y = nb.shard(x, M22, P(None, "tp")) @ nb.shard(w, M22, P("tp"))
    whole = y.numpy()  # (the completed f32 sum)
    np.testing.assert_array_equal(nb.cast(y, nb.float16).numpy(), whole.astype(np.float16))
    np.testing.assert_array_equal(nb.cast(y, nb.float64).numpy(), whole.astype(np.float64))
    text = str(nb.trace(lambda v: v.cast(nb.float16))(y))
    assert text.index("all_reduce[axes=('tp',), kind=sum]") < text.index("cast")


def test_a_sharded_max_leaves_a_max_partial():
    x = arr(4, 8)
    t = nb.shard(x, M22, P(None, "tp"))
    m = nb.max(t, axis=1)
    assert m.sharding.partial_kinds == {"tp": "max"}
    np.testing.assert_allclose(m.numpy(), x.max(1))
    np.testing.assert_allclose((m - 1.0).numpy(), x.max(1) - 1)  # completed before sub
    np.testing.assert_allclose(
        nb.softmax(t, axis=1).numpy(), np.exp(x) / np.exp(x).sum(1, keepdims=True)
    )


@pytest.mark.parametrize("mesh", [M22, M222])
def test_conflicting_operand_shardings_of_a_matmul(mesh):
    x, w = arr(8, 8), arr(8, 8, seed=1)
    names = mesh.axis_names
    specs = (
        [P()]
        + [P(a) for a in names]
        + [P(None, a) for a in names]
        + [P(a, b) for a, b in itertools.permutations(names, 2)]
    )
    for sx, sw in itertools.product(specs, specs):
        y = nb.shard(x, mesh, sx) @ nb.shard(w, mesh, sw)
        np.testing.assert_allclose(y.numpy(), x @ w, err_msg=f"{sx} @ {sw}")


def test_reshape_merging_a_sharded_dim():
    x = arr(4, 6)
    minor = nb.shard(x, M22, P(None, "tp"))
    r = nb.reshape(minor, (24,))
    np.testing.assert_array_equal(r.numpy(), x.reshape(24))
    assert "all_gather" in str(nb.trace(lambda v: nb.reshape(v, (24,)))(minor))
    major = nb.shard(x, M22, P("dp"))
    r2 = nb.reshape(major, (24,))
    assert r2.sharding.to_partition_spec() == P("dp")
    np.testing.assert_array_equal(r2.numpy(), x.reshape(24))
    assert "all_gather" not in str(nb.trace(lambda v: nb.reshape(v, (24,)))(major))
    split = nb.reshape(nb.shard(arr(24), M4, P("x")), (4, 6))
    assert split.sharding.to_partition_spec() == P("x")


def test_megatron_mlp_has_one_all_reduce_and_no_all_gather():
    x, w1, w2, b = arr(8, 16), arr(16, 32, seed=1), arr(32, 16, seed=2), arr(16, seed=3)

    def mlp(x, w1, w2, b):
        return nb.relu(x @ w1) @ w2 + b

    args = (
        nb.shard(x, M22, P("dp")),
        nb.shard(w1, M22, P(None, "tp")),  # column-parallel
        nb.shard(w2, M22, P("tp")),  # row-parallel
        nb.shard(b, M22, P()),
    )
    text = str(nb.trace(mlp)(*args))
    assert text.count("all_reduce") == 1 and "all_gather" not in text, text
    want = np.maximum(x @ w1, 0) @ w2 + b
    np.testing.assert_allclose(mlp(*args).numpy(), want)
    grads = nb.grad(lambda *a: nb.sum(mlp(*a) ** 2), argnums=(1, 2))(*args)
    ref = nb.grad(lambda *a: nb.sum(mlp(*a) ** 2), argnums=(1, 2))(
        *[nb.constant(v) for v in (x, w1, w2, b)]
    )
    for g, r, a in zip(grads, ref, args[1:3], strict=True):
        np.testing.assert_allclose(g.numpy(), r.numpy())
        assert g.sharding == a.sharding


# ----------------------------------------------------------------------------- transforms
def test_vmap_over_a_sharded_value_and_a_sharded_weight():
    x, w = arr(4, 6), arr(6, 3, seed=1)
    tw = nb.shard(w, M22, P("tp"))
    f = nb.vmap(lambda r: nb.tanh(r @ tw))
    np.testing.assert_allclose(f(nb.constant(x)).numpy(), np.tanh(x @ w))
    tx = nb.shard(x, M22, P("dp"))
    out = nb.vmap(lambda r: nb.sum(r * r))(tx)
    np.testing.assert_allclose(out.numpy(), (x * x).sum(1))
    assert out.sharding.to_partition_spec() == P("dp")


def test_compile_keys_on_sharding():
    f = nb.compile(lambda a, b: nb.sum(nb.tanh(a @ b)))
    x, w = arr(4, 6), arr(6, 4, seed=1)
    for sx, sw in ((P("dp"), P()), (P(None, "tp"), P("tp")), (P("dp"), P())):
        v = f(nb.shard(x, M22, sx), nb.shard(w, M22, sw))
        np.testing.assert_allclose(v.item(), np.tanh(x @ w).sum())
    assert f.stats.misses == 2 and f.stats.hits == 1


def test_ops_that_need_whole_operands_gather_them():
    x = nb.shard(arr(4, 6), M22, P("dp", "tp"))
    out = nb.scan(lambda c, r: (c + r, c * 2.0), nb.zeros((6,), dtype=nb.float64), x)
    np.testing.assert_allclose(out[0].numpy(), arr(4, 6).sum(0))
    key = nb.random.key(0)
    assert nb.random.normal(key, (4,)).sharding is None


def test_a_value_sharded_inside_a_control_flow_body_leaves_it_whole():
    """A branch or step that shards a value (a partial sum included) returns it whole: the
    node's outputs are whole values, as its operands are."""
    x = arr(8, 4)

    def branch(v):
        return nb.sum(nb.shard(v, M4, P("x")), axis=0)  # partial over x inside the body

    r = nb.cond(nb.constant(True), branch, lambda v: nb.sum(v, axis=0), nb.constant(x))
    assert r.shape == (4,) and r.sharding is None
    np.testing.assert_allclose(r.numpy(), x.sum(0))
    g = nb.grad(lambda v: nb.sum(nb.cond(nb.constant(True), branch, branch, v) ** 2))(x)
    np.testing.assert_allclose(g.numpy(), np.broadcast_to(2 * x.sum(0), x.shape))
    c, ys = nb.scan(
        lambda c, r: (c + branch(r), nb.shard(r, M4, P("x")) * 2.0),
        nb.zeros((4,), dtype=nb.float64),
        x.reshape(2, 4, 4),
    )
    np.testing.assert_allclose(c.numpy(), x.sum(0))
    np.testing.assert_allclose(ys.numpy(), 2 * x.reshape(2, 4, 4))


def test_a_sharded_value_captured_by_a_control_flow_body_enters_it_whole():
    """A branch or step that closes over a sharded tensor (not passed as an operand) sees
    its whole value, in every construct, compiled, differentiated, and for a partial sum
    or a collective's result: the body had been traced on the blocks and run on the
    gathered value (a (2, 2) result read back as (4, 2), its sum doubled)."""
    a_np, p_np = arr(4, 4), arr(8, 4, seed=1)
    a = nb.shard(a_np, M22, P("dp", "tp"))
    partial = nb.sum(nb.shard(p_np, M22, P("dp")), axis=0)  # partial over dp
    assert partial.sharding.partial
    z = nb.zeros((4, 4), dtype=nb.float64)
    ones = nb.ones((4,), dtype=nb.float64)
    want = a_np + p_np.sum(0)
    runs = {
        "cond": lambda: nb.cond(nb.constant(True), lambda v: v + a + partial, lambda v: v, z),
        "switch": lambda: nb.switch(nb.constant(1), [lambda v: v, lambda v: v + a + partial], z),
        "fori_loop": lambda: nb.fori_loop(0, 2, lambda i, v: v + (a + partial) * 0.5, z),
        "while_loop": lambda: nb.while_loop(
            lambda s: s[0] < 1, lambda s: (s[0] + 1, s[1] + a + partial), (0, z)
        )[1],
        "scan": lambda: nb.scan(lambda c, r: (c + r, c), z, nb.stack([a + partial, a * 0]))[0],
        "gathered": lambda: nb.cond(
            nb.constant(True), lambda v: v + nb.all_gather(a, 1) + partial, lambda v: v, z
        ),
    }
    for name, run in runs.items():
        got = run()
        assert got.shape == (4, 4) and got.numpy().shape == (4, 4), name
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(nb.compile(run)().numpy(), want, rtol=1e-12, err_msg=name)
    w = nb.shard(arr(4, seed=2), M4, P("x"))
    c, _ = nb.scan(lambda c, r: (c * w + r, c), ones, nb.constant(arr(3, 4, seed=3)))
    want_c = np.ones(4)
    for r in arr(3, 4, seed=3):
        want_c = want_c * arr(4, seed=2) + r
    np.testing.assert_allclose(c.numpy(), want_c, rtol=1e-12)
    g = nb.grad(lambda v: nb.sum(nb.cond(nb.constant(True), lambda u: u * a, lambda u: u, v)))(z)
    np.testing.assert_allclose(g.numpy(), a_np, rtol=1e-12)


def test_a_partial_completed_inside_a_body_leaves_nothing_pending():
    """The completion cache does not keep a finished body's nodes alive: their inputs are
    the body's placeholders, so a later ``nb.realize()`` of everything pending would fail."""
    nb.realize()  # flush what other tests left pending
    x = arr(8, 4)

    def step(c, r):
        return c + nb.sum(nb.shard(r, M4, P("x")), axis=0), r * 2.0

    c, _ = nb.scan(step, nb.zeros((4,), dtype=nb.float64), x.reshape(2, 4, 4))
    np.testing.assert_allclose(c.numpy(), x.sum(0))
    gc.collect()
    assert not [impl for impl in GRAPH.pending if impl.node is not None]
    nb.realize()


def test_collectives_batch_under_vmap_and_differentiate_under_jacrev():
    x = arr(3, 8, 2)
    t = nb.shard(x, M4, P(None, "x"))
    ring = [(i, (i + 1) % 4) for i in range(4)]
    np.testing.assert_allclose(
        nb.vmap(lambda r: nb.ppermute(r, ring))(t).numpy(), np.roll(x, 2, axis=1)
    )
    np.testing.assert_allclose(
        nb.vmap(lambda r: nb.all_reduce(r, "sum"))(t).numpy(), x.reshape(3, 4, 2, 2).sum(1)
    )
    np.testing.assert_allclose(nb.vmap(lambda r: nb.all_gather(r, 0))(t).numpy(), x)
    jac = nb.jacrev(lambda r: nb.all_reduce(r, "sum"))(nb.shard(x[0], M4, P("x")))
    want = np.zeros((2, 2, 8, 2))
    for k in range(4):
        for i in range(2):
            want[i, :, 2 * k + i, :] = np.eye(2)
    np.testing.assert_allclose(jac.numpy(), want)


def test_psum_dtypes_and_checkpoint_and_partial_broadcast_inside_and_out():
    """all_reduce keeps a narrow int's dtype and counts bools in int32 (JAX's psum), in a
    shard_map body and on a sharded tensor alike; a checkpointed body function recomputes
    with the body's per-device view, its results varying along the body's axes as the
    function's do; broadcasting a partial value has no derivative (it
    keeps one device's term) and says so rather than giving the whole sum's."""
    m = nb.DeviceMesh("m2", (2,), ("y",))
    b = nb.constant(np.array([True, True, False, True]))
    i8 = nb.constant(np.full(4, 100, np.int8))
    psum = nb.shard_map(lambda t: nb.all_reduce(t, axes="y"), m, (P("y"),), P())
    for got in (psum(b), nb.all_reduce(nb.shard(b, m, P("y")), "sum", axes="y")):
        assert got.dtype == nb.int32 and got.tolist() == [1, 2]
    for got in (psum(i8), nb.all_reduce(nb.shard(i8, m, P("y")), axes="y")):
        assert got.dtype == nb.int8 and got.tolist() == [-56, -56]
    body = lambda t: t * nb.axis_index(m, "y").astype(nb.float32)  # noqa: E731
    for fn in (body, nb.checkpoint(body)):
        f = nb.shard_map(fn, m, (P("y"),), P("y"))
        assert nb.grad(lambda a, f=f: nb.sum(f(a)))(nb.arange(4.0)).tolist() == [0, 0, 1, 1]
    # a checkpointed function whose result is replicated (an all_reduce) stays replicated
    sq = lambda t: nb.all_reduce((t * t).sum(), axes="y")  # noqa: E731
    for fn in (sq, nb.checkpoint(sq)):
        f = nb.shard_map(fn, m, (P("y"),), P())
        assert nb.grad(lambda a, f=f: f(a))(nb.arange(4.0)).tolist() == [0, 2, 4, 6]
    h = lambda a: nb.broadcast(nb.shard(a, m, P("y")).sum(), root=1)  # noqa: E731
    assert h(nb.arange(4.0)).item() == 5.0
    with pytest.raises(nb.ShardingError, match="no derivative for a value partial"):
        nb.grad(h)(nb.arange(4.0))


def test_a_one_name_tuple_entry_equals_the_name():
    assert P(("x",)) == P("x") and not P(("x",)) != P("x")
    assert hash(P(("x",), None)) == hash(P("x", None))
    assert P(("x", "y")) != P("x") and P("x") == ("x",)


def test_a_collective_over_the_axis_that_splits_a_vmapped_dim_is_refused():
    """Each element's collective combined other elements' rows: a (4, 8) batch split over
    dp came back as (2, 8) sums of two examples. ``reshard`` refused this already."""
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    per_example = nb.vmap(lambda r: nb.all_reduce(r, "sum", axes="dp"))
    np.testing.assert_array_equal(per_example(nb.shard(x, M22, P())).numpy(), 2 * x)
    for f in (
        per_example,
        nb.vmap(lambda r: nb.pmean(r, axes="dp")),
        nb.vmap(lambda r: nb.broadcast(r, 0, axes="dp")),
        nb.vmap(lambda r: nb.ppermute(r, [(0, 1), (1, 0)], axis_name="dp")),
    ):
        with pytest.raises(nb.ShardingError, match="mapped dim is split over mesh axis 'dp'"):
            f(nb.shard(x, M22, P("dp")))
    # over another axis it runs, per element
    out = nb.vmap(lambda r: nb.all_reduce(r, "sum", axes="tp"))(nb.shard(x, M22, P("dp")))
    np.testing.assert_array_equal(out.numpy(), 2 * x)


def test_forward_derivative_through_a_sharded_max_then_a_broadcast():
    """The max's partial value was completed first inside its own JVP rule, before it had
    a tangent, and a later use took that completion: the tangent came out 0."""
    x = np.array([[1.0, 5.0, 2.0, 3.0], [4.0, 0.0, 0.0, 7.0]], np.float32)
    t = np.arange(8, dtype=np.float32).reshape(2, 4)
    for f in (
        lambda a: a - nb.max(a, axis=1, keepdims=True),
        lambda a: nb.max(a, axis=1, keepdims=True) + nb.zeros((1, 3)),
        lambda a: a * nb.min(a, axis=1, keepdims=True),
    ):
        _, want = nb.jvp(f, (nb.constant(x),), (nb.constant(t),))
        _, got = nb.jvp(f, (nb.shard(x, M22, P(None, "tp")),), (nb.constant(t),))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_forward_derivative_of_a_partial_max_that_a_later_op_gathers():
    """A slice needing the dim whole gathers a value holding partial max terms; the
    gather's JVP laid the tangent (partial *sum* terms) out as max terms: an internal
    ``could not reshard`` error."""
    x = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    t = np.arange(16, dtype=np.float32).reshape(4, 4)
    for f in (
        lambda a: nb.max(a, axis=0)[::2],
        lambda a: nb.min(a, axis=0)[1],
        lambda a: nb.prod(a, axis=0)[::2],
    ):
        _, want = nb.jvp(f, (nb.constant(x),), (nb.constant(t),))
        sharded = (nb.shard(x, M22, P("dp", "tp")), nb.shard(t, M22, P("dp", "tp")))
        _, got = nb.jvp(f, (sharded[0],), (sharded[1],))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)


def test_an_update_of_a_sharded_tensor_keeps_its_layout():
    """As JAX's ``x.at[...].set``: ``x[i, j] = v`` and ``.at`` updates of a region that cuts
    sharded dims give the right values in ``x``'s layout (the result was left replicated
    on every device: a sharded parameter after ``w[0] = 0``); gradients too."""
    x = arr(8, 8)
    t = nb.shard(x, M22, P("dp", "tp"))
    t[0:3, 5] = 100.0
    want = x.copy()
    want[0:3, 5] = 100.0
    np.testing.assert_array_equal(t.numpy(), want)
    assert t.sharding.spec == P("dp", "tp")
    u = nb.shard(x, M22, P("dp", "tp")).at[nb.constant([1, 6])].add(1.0)
    assert u.sharding.spec == P("dp", "tp")
    added = x.copy()
    added[[1, 6]] += 1.0
    np.testing.assert_array_equal(u.numpy(), added)
    g = nb.grad(lambda v: (v.at[2:5, 3].set(0.0) ** 2).sum())(nb.shard(x, M22, P("dp", "tp")))
    zeroed = x.copy()
    zeroed[2:5, 3] = 0.0
    np.testing.assert_allclose(g.numpy(), 2 * zeroed, rtol=1e-6)
    assert g.sharding.spec == P("dp", "tp")


def test_the_original_s_distributed_broadcast_and_its_rule():
    """The original Nabla's distributed_broadcast: the first device's block on every device
    of the mesh; its rule all-reduces the cotangent over the mesh (its test: the gradient
    of sum(distributed_broadcast(u) ** 2) is 2 u n)."""
    u = arr(4)
    m2 = nb.DeviceMesh("db", (2,), ("tp",))
    r = nb.distributed_broadcast(nb.constant(u), mesh=m2)
    assert r.sharding.is_replicated and r.sharding.mesh == m2
    np.testing.assert_array_equal(r.numpy(), u)
    g = nb.grad(lambda v: nb.reduce_sum(nb.distributed_broadcast(v, mesh=m2) ** 2))(nb.constant(u))
    np.testing.assert_allclose(g.numpy(), 2 * u * 2, rtol=1e-6)
    x = nb.shard(nb.constant(arr(8)), m2, P("tp"))
    np.testing.assert_array_equal(nb.distributed_broadcast(x).numpy(), arr(8)[:4])
    plain = nb.constant(u)
    assert nb.distributed_broadcast(plain) is plain  # no mesh: the value
    with pytest.raises(nb.ShardingError, match="not on the mesh given"):
        nb.distributed_broadcast(x, mesh=M4)
    from nabla.ops.communication import accelerator, cpu, distributed_broadcast, gpu

    assert distributed_broadcast is nb.distributed_broadcast and cpu is nb.cpu
    assert gpu is nb.gpu and accelerator is nb.accelerator
