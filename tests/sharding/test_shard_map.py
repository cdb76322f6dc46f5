"""shard_map (JAX semantics) and vmap(spmd_axis_name=...): per-block shapes, collectives
over mesh axes, the replication check, and composition with grad, vmap and compile."""

import numpy as np
import pytest

import nabla as nb
from nabla import P

M4 = nb.DeviceMesh("ring", (4,), ("x",))
M22 = nb.DeviceMesh("m22", (2, 2), ("dp", "tp"))
RING = [(i, (i + 1) % 4) for i in range(4)]


def arr(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_the_body_sees_each_devices_block():
    seen = []

    def body(a, w, s):
        seen.append((a.shape, w.shape, s))
        return a

    a, w = nb.constant(arr(4, 6)), nb.constant(arr(6, 3))
    out = nb.shard_map(
        body, mesh=M22, in_specs=(P("dp", "tp"), P("tp"), None), out_specs=P("dp", "tp")
    )(a, w, 3.0)
    assert seen == [((2, 3), (3, 3), 3.0)]
    np.testing.assert_array_equal(out.numpy(), a.numpy())
    # the original API's dict form
    f = nb.shard_map(
        lambda a, w: a @ w, mesh=M22, in_specs={0: P("dp"), 1: None}, out_specs=P("dp")
    )
    np.testing.assert_allclose(f(a, w).numpy(), a.numpy() @ w.numpy())
    # out_specs as a dict too (they raised): key 0 for one result, one key per result
    g = nb.shard_map(lambda a: a * 2.0, M22, {0: P("dp", "tp")}, {0: P("dp", "tp")})
    np.testing.assert_array_equal(g(a).numpy(), a.numpy() * 2)
    two = nb.shard_map(lambda a: (a * 2.0, a + 1.0), M22, {0: P("dp")}, {0: P("dp"), 1: P("dp")})
    got = two(a)
    np.testing.assert_array_equal(got[1].numpy(), a.numpy() + 1)
    with pytest.raises(nb.ShardingError, match="key 1 .* one of the 1 results"):
        nb.shard_map(lambda a: a, M22, {0: P("dp")}, {1: P("dp")})(a)


def test_row_parallel_matmul_with_all_reduce_over_tp():
    a, w = arr(4, 6), arr(6, 3, seed=1)

    def rowpar(a, w):
        return nb.all_reduce(a @ w, "sum", axes="tp")

    f = nb.shard_map(rowpar, mesh=M22, in_specs=(P("dp", "tp"), P("tp")), out_specs=P("dp"))
    y = f(nb.constant(a), nb.constant(w))
    np.testing.assert_allclose(y.numpy(), a @ w)
    assert y.sharding.to_partition_spec() == P("dp")
    g = nb.grad(lambda a, w: nb.sum(f(a, w) ** 2), argnums=(0, 1))(nb.constant(a), nb.constant(w))
    r = nb.grad(lambda a, w: nb.sum((a @ w) ** 2), argnums=(0, 1))(nb.constant(a), nb.constant(w))
    for got, want in zip(g, r, strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy())


def test_ppermute_ring_is_a_roll_and_its_gradient_the_inverse_roll():
    x, w = arr(8, 2), arr(8, 2, seed=1)
    f = nb.shard_map(lambda b: nb.ppermute(b, RING), mesh=M4, in_specs=(P("x"),), out_specs=P("x"))
    np.testing.assert_allclose(f(nb.constant(x)).numpy(), np.roll(x, 2, axis=0))
    g = nb.grad(lambda v: nb.sum(f(v) * nb.constant(w)))(nb.constant(x))
    np.testing.assert_allclose(g.numpy(), np.roll(w, -2, axis=0))
    # positions along one named axis of a 2-D mesh
    h = nb.shard_map(
        lambda b: nb.ppermute(b, [(0, 1), (1, 0)], axis_name="tp"),
        mesh=M22,
        in_specs=(P(None, "tp"),),
        out_specs=P(None, "tp"),
    )
    y = arr(2, 4)
    np.testing.assert_allclose(h(nb.constant(y)).numpy(), np.roll(y, 2, axis=1))


def test_collectives_inside_shard_map_against_numpy():
    x = arr(8, 4)
    blocks = x.reshape(4, 2, 4)

    def run(body, out_specs=P()):
        return nb.shard_map(body, mesh=M4, in_specs=(P("x"),), out_specs=out_specs)(nb.constant(x))

    np.testing.assert_allclose(
        run(lambda b: nb.all_reduce(b, "max", axes="x")).numpy(), blocks.max(0)
    )
    np.testing.assert_allclose(run(lambda b: nb.pmean(b, axes="x")).numpy(), blocks.mean(0))
    np.testing.assert_allclose(run(lambda b: nb.all_gather(b, 0, axes="x")).numpy(), x)
    np.testing.assert_allclose(run(lambda b: nb.broadcast(b, root=3, axes="x")).numpy(), blocks[3])
    rs = run(lambda b: nb.reduce_scatter(nb.all_gather(b, 0, axes="x"), 0, axes="x"), P("x"))
    np.testing.assert_allclose(rs.numpy(), 4 * x)
    idx = run(lambda b: b * 0 + nb.axis_index(M4, "x").cast(nb.float64), P("x"))
    np.testing.assert_allclose(idx.numpy()[:, 0], np.repeat(np.arange(4.0), 2))
    # all_to_all: split dim 1 over the devices, concatenate along dim 0
    a2a = run(lambda b: nb.all_to_all(b, 1, 0, axes="x"), P(None, "x"))
    np.testing.assert_allclose(a2a.numpy(), x)
    # a value that does not vary along the axis: all_reduce sums n copies
    np.testing.assert_allclose(
        run(lambda b: nb.all_reduce(nb.ones((2,)), axes="x")).numpy(), [4, 4]
    )


def test_check_rep_refuses_a_varying_value_declared_replicated():
    f = nb.shard_map(lambda b: b * 2, mesh=M4, in_specs=(P("x"),), out_specs=P())
    with pytest.raises(nb.ShardingError, match="differs between devices along it"):
        f(nb.constant(arr(8, 2)))
    g = nb.shard_map(lambda b: b * 2, mesh=M4, in_specs=(P("x"),), out_specs=P(), check_rep=False)
    np.testing.assert_allclose(g(nb.constant(arr(8, 2))).numpy(), 2 * arr(8, 2)[:2])
    # JAX's newer name for the flag
    g = nb.shard_map(lambda b: b * 2, mesh=M4, in_specs=(P("x"),), out_specs=P(), check_vma=False)
    np.testing.assert_allclose(g(nb.constant(arr(8, 2))).numpy(), 2 * arr(8, 2)[:2])
    with pytest.raises(TypeError, match="check_rep=False and check_vma=True disagree"):
        nb.shard_map(lambda b: b, M4, (P("x"),), P(), check_rep=False, check_vma=True)
    # a collective over axes a block's dim does not split names them and the block
    with pytest.raises(
        nb.ShardingError,
        match=r"all_to_all: dim 1 of the per-device block of shape \(2, 3\) is not divisible "
        r"by the 4 devices of mesh axes \('x',\)",
    ):
        nb.shard_map(lambda b: nb.all_to_all(b, 1, 0, axes="x"), M4, (P("x"),), P("x"))(
            nb.constant(arr(8, 3))
        )
    with pytest.raises(nb.ShardingError, match="'y' is not a mesh axis"):
        nb.shard_map(
            lambda b: nb.all_reduce(b, axes="y"), mesh=M4, in_specs=(P("x"),), out_specs=P()
        )(nb.constant(arr(8, 2)))


def test_shard_map_inside_grad_vmap_and_compile_and_the_reverse():
    a, w = arr(4, 6), arr(6, 3, seed=1)

    def rowpar(a, w):
        return nb.all_reduce(nb.tanh(a) @ w, "sum", axes="tp")

    f = nb.shard_map(rowpar, mesh=M22, in_specs=(P("dp", "tp"), P("tp")), out_specs=P("dp"))
    want = np.tanh(a) @ w
    # compile(shard_map)
    cf = nb.compile(f)
    for _ in range(2):
        np.testing.assert_allclose(cf(nb.constant(a), nb.constant(w)).numpy(), want)
    # vmap(shard_map)
    a3 = np.stack([a, 2 * a])
    vf = nb.vmap(f, in_axes=(0, None))(nb.constant(a3), nb.constant(w))
    np.testing.assert_allclose(vf.numpy(), np.tanh(a3) @ w)

    # shard_map(grad) and shard_map(vmap) inside the body
    def body(a, w):
        g = nb.grad(lambda v: nb.sum(nb.tanh(v) @ w))(a)
        rows = nb.vmap(lambda r: nb.sum(r * r))(a)
        return g, rows

    g, rows = nb.shard_map(
        body,
        mesh=M22,
        in_specs=(P("dp", "tp"), P("tp")),
        out_specs=(P("dp", "tp"), P(("dp", "tp"))),
    )(nb.constant(a), nb.constant(w))
    np.testing.assert_allclose(g.numpy(), (1 - np.tanh(a) ** 2) * w.sum(1)[None, :])
    # device (dp, tp) holds the sums of squares of its block's two rows
    want_rows = (a.reshape(2, 2, 2, 3) ** 2).sum(-1).transpose(0, 2, 1).reshape(8)
    np.testing.assert_allclose(rows.numpy(), want_rows)
    # grad(compile(shard_map))
    gc = nb.grad(lambda a: nb.sum(cf(a, nb.constant(w))))(nb.constant(a))
    gr = nb.grad(lambda a: nb.sum(nb.tanh(a) @ nb.constant(w)))(nb.constant(a))
    np.testing.assert_allclose(gc.numpy(), gr.numpy())


def test_vmap_spmd_axis_name_splits_the_batch_dim():
    x, w = arr(8, 6), arr(6, 3, seed=1)
    f = nb.vmap(lambda r, w: nb.tanh(r @ w), in_axes=(0, None), spmd_axis_name="dp", mesh=M22)
    y = f(nb.constant(x), nb.constant(w))
    assert y.sharding.to_partition_spec() == P("dp")
    np.testing.assert_allclose(y.numpy(), np.tanh(x @ w))
    # the mesh comes from a sharded input
    z = nb.vmap(lambda r: r * 2, spmd_axis_name="tp")(nb.shard(x, M22, P()))
    assert z.sharding.to_partition_spec() == P("tp")
    with pytest.raises(nb.ShardingError, match="needs a mesh"):
        nb.vmap(lambda r: r, spmd_axis_name="dp")(nb.constant(x))
    # no mesh given and no sharded input: the one the body shards on (the original's test)
    halves = nb.vmap(lambda r: nb.split(r.shard(M22, P("tp")), 2, axis=0), spmd_axis_name="dp")(
        nb.constant(x)
    )
    assert [h.sharding.dims[0] for h in halves] == [("dp",), ("dp",)]
    np.testing.assert_array_equal(halves[1].numpy(), x[:, 3:])
    with pytest.raises(nb.ShardingError, match="not divisible"):
        nb.vmap(lambda r: r, spmd_axis_name="dp", mesh=M22)(nb.constant(arr(3, 2)))
    g = nb.grad(lambda w: nb.sum(f(nb.constant(x), w)))(nb.constant(w))
    np.testing.assert_allclose(g.numpy(), x.T @ (1 - np.tanh(x @ w) ** 2))
    # no mapped input (every in_axes None): the new dim is split all the same (it stayed
    # whole, as the original Nabla's tests found)
    staged = nb.vmap(
        lambda p, s: p * s, in_axes=(None, None), axis_size=2, spmd_axis_name="dp", mesh=M22
    )(nb.shard(x, M22, P()), nb.constant(0.5))
    assert staged.sharding.to_partition_spec() == P("dp") and staged.shape == (2, 8, 6)
    np.testing.assert_allclose(staged.numpy(), np.broadcast_to(x * 0.5, (2, 8, 6)))


def test_a_compiled_function_inside_the_body_replays_with_each_calls_levels():
    a, w = arr(4, 6), arr(6, 3, seed=1)
    inner = nb.compile(lambda a, w: nb.tanh(a) @ w)
    f = nb.shard_map(
        lambda a, w: nb.all_reduce(inner(a, w), axes="tp"),
        mesh=M22,
        in_specs=(P("dp", "tp"), P("tp")),
        out_specs=P("dp"),
    )
    for _ in range(3):  # every call makes new mesh levels
        np.testing.assert_allclose(f(a, w).numpy(), np.tanh(a) @ w)
    assert inner.stats.misses == 1


def test_spmd_vmap_never_copies_an_unbatched_weight_per_example():
    x, w = arr(8, 6), arr(6, 4, seed=1)
    for f, want in (
        (lambda r, w: nb.tanh(r @ w), np.tanh(x @ w)),
        (lambda r, w: w @ r[:4], x[:, :4] @ w.T),  # the weight on the left
    ):
        g = nb.vmap(f, in_axes=(0, None), spmd_axis_name="dp", mesh=M22)
        np.testing.assert_allclose(g(nb.constant(x), nb.constant(w)).numpy(), want)
        text = str(nb.trace(g)(nb.constant(x), nb.constant(w)))
        assert "broadcast_levels" not in text and "broadcast_to" not in text, text
    grad = nb.grad(
        lambda w: nb.sum(
            nb.vmap(lambda r: r @ w, spmd_axis_name="dp", mesh=M22)(nb.constant(x)) ** 2
        )
    )(nb.shard(w, M22, P(None, "tp")))
    np.testing.assert_allclose(grad.numpy(), 2 * x.T @ (x @ w))
    assert grad.sharding.to_partition_spec() == P(None, "tp")


def test_axis_index_of_a_tuple_of_axes_counts_them_together():
    """JAX's lax.axis_index(("dp", "tp")): the position along both, the first slowest."""
    z = np.zeros(4, np.float32)

    def run(names):
        body = lambda b: b + nb.axis_index(M22, names).astype(nb.float32)  # noqa: E731
        return nb.shard_map(body, M22, (P(("dp", "tp")),), P(("dp", "tp")))(z).numpy()

    np.testing.assert_array_equal(run(("dp", "tp")), [0, 1, 2, 3])
    np.testing.assert_array_equal(run(("tp", "dp")), [0, 2, 1, 3])
    with pytest.raises(nb.ShardingError, match="inside a shard_map body"):
        nb.axis_index(M22, ("dp", "tp"))


def test_collectives_over_a_tuple_of_axes_follow_jax():
    """JAX's orders, checked against a NumPy simulation of the 2x2 devices: ppermute numbers
    devices in mesh order whatever order the axes are named in; psum_scatter and all_to_all
    treat a tuple as one axis in the order named (the first slowest), as all_gather does."""
    y = np.arange(16.0, dtype=np.float32).reshape(2, 8)
    blocks = {(a, b): y[a : a + 1, 4 * b : 4 * b + 4] for a in range(2) for b in range(2)}
    ring = [(i, (i + 1) % 4) for i in range(4)]
    for names in (("dp", "tp"), ("tp", "dp")):

        def pos(dev, names=names):  # a device's position along ``names``
            return dev[0] * 2 + dev[1] if names == ("dp", "tp") else dev[1] * 2 + dev[0]

        by_pos = {pos(d): d for d in blocks}
        # ppermute: the flat index is the mesh-order one for both namings
        f = nb.shard_map(
            lambda v, n=names: nb.ppermute(v, ring, axis_name=n),
            M22,
            (P("dp", "tp"),),
            P("dp", "tp"),
        )
        want = np.empty_like(y)
        for (a, b), blk in blocks.items():
            dst = (a * 2 + b + 1) % 4
            want[dst // 2, 4 * (dst % 2) : 4 * (dst % 2) + 4] = blk
        np.testing.assert_array_equal(f(y).numpy(), want)
        # psum_scatter: device at position p keeps block p of the sum of its dim 1
        rs = nb.shard_map(
            lambda v, n=names: nb.reduce_scatter(v, 1, axes=n), M22, (P(),), P(None, ("dp", "tp"))
        )
        total = 4 * y
        want = np.concatenate(
            [
                total[:, 2 * pos(d) : 2 * pos(d) + 2]
                for d in sorted(blocks, key=lambda d: d[0] * 2 + d[1])
            ],
            axis=1,
        )
        np.testing.assert_array_equal(rs(y).numpy(), want)
        # all_to_all, split and concat the same dim: device j gets chunk j of each source i
        a2a = nb.shard_map(
            lambda v, n=names: nb.all_to_all(v, 1, 1, axes=n), M22, (P("dp", "tp"),), P("dp", "tp")
        )
        if nb.distributed.process_count() > 1:  # several axes across processes: refused
            with pytest.raises(nb.ShardingError, match="one mesh axis at a time"):
                a2a(y).numpy()
            continue
        want = np.empty_like(y)
        for a, b in blocks:
            j = pos((a, b))
            got = np.stack([blocks[by_pos[i]][0, j] for i in range(4)])
            want[a, 4 * b : 4 * b + 4] = got
        np.testing.assert_array_equal(a2a(y).numpy(), want)
    with pytest.raises(nb.ShardingError, match="at least one mesh axis"):
        nb.shard_map(lambda v: nb.reduce_scatter(v, 1, axes=()), M22, (P(),), P())(y)
    with pytest.raises(nb.ShardingError, match="name an axis twice"):
        nb.shard_map(lambda v: nb.all_to_all(v, 1, 1, axes=("dp", "dp")), M22, (P(),), P())(y)


def test_vmap_of_a_shard_map_whose_mapped_input_is_sharded_along_the_batch():
    """The mapped dim split over a mesh axis (even the one in_specs uses, or by
    spmd_axis_name) is gathered on entry: the body's mesh axes stay its own."""
    sm = nb.shard_map(lambda x: x * 2.0, M22, (P("tp"),), P("tp"))
    x = arr(4, 4)
    for layout in (P("dp"), P("tp"), P(None, "dp")):
        np.testing.assert_allclose(nb.vmap(sm)(nb.shard(x, M22, layout)).numpy(), 2 * x)
    np.testing.assert_allclose(nb.vmap(sm, spmd_axis_name="dp", mesh=M22)(x).numpy(), 2 * x)
    g = nb.grad(lambda v: nb.vmap(sm)(v).sum())(nb.shard(x, M22, P("dp")))
    np.testing.assert_allclose(g.numpy(), np.full((4, 4), 2.0))


def test_jacrev_and_hessian_through_shard_map_match_jacfwd():
    """jacrev vmaps the pullback with a level newer than the mesh's: the body's entry and
    exit keep batch dims in level order whatever their age."""
    m = nb.DeviceMesh("jm", (2, 2), ("a", "b"))
    f = nb.shard_map(
        lambda t: nb.tanh(t) * nb.all_reduce(t, axes="b"), m, (P("a", "b"),), P("a", "b")
    )
    x = nb.constant(np.arange(16.0, dtype=np.float32).reshape(4, 4) / 10)
    if nb.distributed.process_count() > 1:  # the mesh spans processes: refused, clearly
        with pytest.raises(nb.ShardingError, match="jacrev/hessian's vmap of the pullback"):
            nb.jacrev(f)(x).numpy()
        return
    np.testing.assert_allclose(nb.jacrev(f)(x).numpy(), nb.jacfwd(f)(x).numpy(), atol=1e-6)
    m2 = nb.DeviceMesh("jm2", (2,), ("y",))
    g = nb.shard_map(lambda t: nb.sin(t) * nb.all_reduce(t, axes="y"), m2, (P("y"),), P("y"))
    v = np.arange(4.0, dtype=np.float32)
    h = nb.hessian(lambda t: g(t).sum())(nb.constant(v)).numpy()
    # sum_i sin(v_i) * (v_i + v_{i +- 2}): the partner across the mesh
    partner = np.roll(v, 2)
    want = np.diag(-np.sin(v) * (v + partner) + 2 * np.cos(v))
    want[np.arange(4), (np.arange(4) + 2) % 4] = np.cos(v) + np.cos(partner)
    np.testing.assert_allclose(h, want, atol=1e-5)


def test_grad_inside_the_body_sums_a_replicated_input_s_gradient_over_the_devices():
    """JAX's shard_map rule: a value the same on every device along an axis (``P()`` there)
    has one gradient, the sum of the devices' contributions (its implicit broadcast
    transposes to psum), whether the loss is summed over the devices or local. A vmap's
    level keeps per-example gradients."""
    x = np.arange(16.0, dtype=np.float32).reshape(8, 2) / 10
    w = np.ones((2, 1), np.float32)

    def summed(xb, wb):
        return nb.grad(lambda v: nb.all_reduce(nb.sum(xb @ v), "sum", axes="x"))(wb)

    got = nb.shard_map(summed, M4, (P("x"), P()), P())(x, w)
    np.testing.assert_allclose(got.numpy().ravel(), x.sum(0), rtol=1e-6)

    def local(xb, wb):
        return nb.grad(lambda v: nb.sum(xb @ v))(wb)[None]

    got = nb.shard_map(local, M4, (P("x"), P()), P("x"))(x, w)
    np.testing.assert_allclose(got.numpy()[..., 0], np.stack([x.sum(0)] * 4), rtol=1e-6)
    # on a 2-D mesh: summed over the axis the weight is replicated along only
    xs = np.arange(16.0, dtype=np.float32).reshape(4, 4) / 10
    ws = np.ones((4, 2), np.float32)

    def dp_grad(xb, wb):  # weight split over tp, replicated over dp
        return nb.grad(lambda v: nb.pmean(nb.sum(xb @ v), axes=("dp", "tp")))(wb)

    got = nb.shard_map(dp_grad, M22, (P("dp", "tp"), P("tp")), P("tp"))(xs, ws)
    # d/dw of the mean over the 4 devices of each device's block sum: the column sums of
    # x (its rows summed over dp), over 4
    want = np.repeat(xs.sum(0)[:, None] / 4, 2, axis=1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    per_example = nb.vmap(lambda r: nb.grad(lambda v: nb.sum(r @ v))(nb.constant(w)))(x)
    np.testing.assert_allclose(per_example.numpy()[..., 0], x, rtol=1e-6)


def test_ppermute_outside_a_body_takes_positions_along_axis_name_as_inside():
    x = nb.shard(np.arange(8.0), M22, P(("dp", "tp")))
    swap = [(0, 1), (1, 0)]
    body = nb.shard_map(
        lambda b: nb.ppermute(b, swap, axis_name="dp"), M22, (P(("dp", "tp")),), P(("dp", "tp"))
    )
    outside = nb.ppermute(x, swap, axis_name="dp")
    np.testing.assert_array_equal(outside.numpy(), body(x).numpy())
    np.testing.assert_array_equal(outside.numpy(), [4, 5, 6, 7, 0, 1, 2, 3])
    np.testing.assert_array_equal(nb.ppermute(x, swap).numpy(), [2, 3, 0, 1, 0, 0, 0, 0])
    with pytest.raises(nb.ShardingError, match="axis_name 'no_such_axis' names"):
        nb.ppermute(x, swap, axis_name="no_such_axis")
    with pytest.raises(nb.ShardingError, match=r"reduce_scatter: dim 1 of size 6 .*\(8, 6\)"):
        nb.reduce_scatter(nb.shard(np.ones((8, 6), np.float32), M22, P("dp")), 1)


def test_spmd_axis_name_on_a_mapped_dim_split_over_other_axes():
    """A batch of 2 split over tp was split over (tp, dp) too, which 2 cannot hold (a
    ShardingError); a batch split over (dp, tp) already was gathered and split again."""
    f = nb.vmap(lambda r: r * 2.0, spmd_axis_name="dp", mesh=M22)
    two = arr(2, 8)
    out = f(nb.shard(two, M22, P("tp")))
    np.testing.assert_allclose(out.numpy(), 2 * two)
    assert out.sharding.spec == P("dp")
    four = arr(4, 4, 8)
    x = nb.shard(four, M22, P(("dp", "tp")))
    assert "all_gather" not in str(nb.trace(f)(x))
    np.testing.assert_allclose(f(x).numpy(), 2 * four)


@pytest.mark.parametrize("loop", ["scan", "fori_loop", "scan_pmean"])
def test_reverse_mode_through_a_loop_whose_replicated_carry_meets_a_collective(loop):
    """The loop's carry starts replicated and stays so (``c + psum(r * c)``), while its xs
    vary per device. The reverse loop's carry cotangent came broadcast over the device
    level (a construct's results share their levels), and ``all_reduce``'s transpose summed
    the copies: gradients 4x (``pmean``: 4x, two steps: 10x) the unrolled loop's and JAX's."""
    mesh = nb.DeviceMesh("m", (4,), ("b",))
    x = (np.arange(1, 17, dtype=np.float32).reshape(2, 8) / 10) ** 1.5

    def reduce(v):
        if loop == "scan_pmean":
            return nb.pmean(v, "b")
        return nb.all_reduce(v, "sum", axes="b")

    def looped(v):
        if loop == "fori_loop":
            return nb.fori_loop(0, 2, lambda i, c: c + reduce(v[i] * c), nb.ones((2,)))
        c, _ = nb.scan(lambda c, r: (c + reduce(r * c), nb.sum(c)), nb.ones((2,)), v)
        return c

    def unrolled(v):
        c = nb.ones((2,))
        for i in range(2):
            c = c + reduce(v[i] * c)
        return c

    def grad_of(body):
        f = nb.shard_map(body, mesh, (P(None, "b"),), P())
        return nb.grad(lambda q: nb.sum(f(q) ** 2))(x).numpy()

    np.testing.assert_allclose(grad_of(looped), grad_of(unrolled), rtol=1e-5)

    # the unrolled loop against the global math (numerical derivative of the same sums)
    def global_fn(q):
        c = np.ones(2)
        for i in range(2):
            s = (q[i].reshape(4, 2) * c).sum(0)
            c = c + (s / 4 if loop == "scan_pmean" else s)
        return (c**2).sum()

    q, eps, num = x.astype(np.float64), 1e-6, np.zeros(x.shape)
    for idx in np.ndindex(*x.shape):
        d = np.zeros(x.shape)
        d[idx] = eps
        num[idx] = (global_fn(q + d) - global_fn(q - d)) / (2 * eps)
    np.testing.assert_allclose(grad_of(unrolled), num, rtol=1e-4)


@pytest.mark.parametrize("construct", ["scan", "fori_loop", "while_loop", "cond"])
def test_each_result_of_a_construct_keeps_its_own_replication(construct):
    """A construct's results used to share one set of levels: a carry that never reads the
    per-device part (a replicated weight stepped beside a per-device accumulator) came out
    varying, and ``out_specs=P()`` for it was refused, where JAX's replication rules accept
    it. Values and gradients equal the unrolled body's."""
    mesh = nb.DeviceMesh("m", (4,), ("d",))
    x0 = (np.arange(8, dtype=np.float32) + 1) / 8
    w0 = np.array([0.5, -0.25], np.float32)

    def step(w, acc, x):  # w stays replicated (its update is all-reduced), acc varies
        g = nb.all_reduce(nb.sum(w * x) * x[:2], axes="d")
        return w - 0.1 * g, acc + x * nb.sum(w)

    def body(x, w, *, unrolled=False):
        acc = x * 0
        if unrolled or construct == "cond":
            for _ in range(1 if construct == "cond" else 3):
                w, acc = step(w, acc, x)
            return w, acc
        if construct == "scan":
            return nb.scan(lambda c, _: (step(*c, x), None), (w, acc), None, length=3)[0]
        if construct == "fori_loop":
            return nb.fori_loop(0, 3, lambda i, c: step(*c, x), (w, acc))
        i, w, acc = nb.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, *step(c[1], c[2], x)), (0, w, acc)
        )
        return w, acc

    def branched(x, w):
        return nb.cond(nb.sum(w) > 0, lambda w, a: step(w, a, x), lambda w, a: (w, a), w, x * 0)

    specs = dict(in_specs=(P("d"), P()), out_specs=(P(), P("d")))
    f = nb.shard_map(branched if construct == "cond" else body, mesh, **specs)
    ref = nb.shard_map(lambda x, w: body(x, w, unrolled=True), mesh, **specs)
    for got, want in zip(f(x0, w0), ref(x0, w0), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)

    def loss(fn):
        return lambda w: nb.sum(fn(x0, w)[0] ** 2) + nb.sum(fn(x0, w)[1] ** 2)

    if construct != "while_loop":  # (reverse mode needs max_steps there)
        want = nb.grad(loss(ref))(w0).numpy()
        np.testing.assert_allclose(nb.grad(loss(f))(w0).numpy(), want, rtol=1e-5)
    t = np.array([1.0, 2.0], np.float32)
    np.testing.assert_allclose(
        nb.jvp(loss(f), (w0,), (t,))[1].numpy(),
        nb.jvp(loss(ref), (w0,), (t,))[1].numpy(),
        rtol=1e-5,
    )


def test_grad_inside_a_body_counts_a_replicated_term_of_a_per_device_loss_per_device():
    """``sum(a * w) + w * w`` on each device, ``w`` replicated: JAX's gradient inside the
    body is ``sum(a) + 4 * 2w`` (the loss differs per device, so its seed does, and the
    replicated term is every device's). The seed was one constant, so ``w * w`` counted
    once (4.4 for 8.6); a wholly replicated loss still counts it once."""
    mesh = nb.DeviceMesh("m", (4,), ("d",))  # (4 devices: also run on 4 processes)
    a = np.array([0.5, -1.0, 2.0, 1.5], np.float32)
    w = np.array([0.7], np.float32)

    def grad_of(loss):
        body = lambda a, w: nb.grad(lambda w: loss(a, w))(w)  # noqa: E731
        return nb.shard_map(body, mesh, in_specs=(P("d"), P()), out_specs=P("d"))(a, w)

    mixed = grad_of(lambda a, w: nb.sum(a * w) + nb.sum(w * w))
    np.testing.assert_allclose(mixed.numpy(), [a.sum() + 4 * 2 * w[0]] * 4, rtol=1e-6)
    alone = grad_of(lambda a, w: nb.sum(w * w))
    np.testing.assert_allclose(alone.numpy(), [2 * w[0]] * 4, rtol=1e-6)


def test_scan_ys_all_reduced_are_replicated_when_the_body_has_per_step_work():
    """``ys = psum(carry)`` is the same on every device; with carry-free work on the step's
    x (``x * 2``, taken out of the loop and run for all steps at once) the loop replayed a
    body that broadcast every result to the shared levels, and ``out_specs=P()`` was
    refused. Values are JAX's (``jax.shard_map``)."""
    mesh = nb.DeviceMesh("m", (4,), ("d",))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)

    def body(v):
        step = lambda c, xi: (c + xi * 2.0, nb.all_reduce(c, "sum", axes="d"))  # noqa: E731
        return nb.scan(step, v[:, 0], v.T)[1]

    got = nb.shard_map(body, mesh, in_specs=(P("d"),), out_specs=P())(x)
    np.testing.assert_allclose(got.numpy().ravel(), [18.0, 54.0, 98.0])


@pytest.mark.parametrize("loop", ["scan", "fori_loop"])
def test_a_replicated_carry_s_gradient_beside_a_per_device_operand_s(loop):
    """Differentiating a per-device operand too takes the loop's other reverse path, whose
    initial-carry cotangent came back broadcast over the device level: leaving the
    shard_map summed the copies (the carry's gradient times the axis size)."""
    mesh = nb.DeviceMesh("m", (4,), ("tp",))  # (4 devices: also run on 4 processes)
    c0 = np.array([1.0, 2.0], np.float32)
    w0 = np.arange(1.0, 9.0, dtype=np.float32)

    def body(c, w):
        step = lambda c: nb.all_reduce(c * w, "sum", axes="tp")  # noqa: E731
        if loop == "fori_loop":
            return nb.fori_loop(0, 1, lambda i, c: step(c), c)
        return nb.scan(lambda c, _: (step(c), None), c, None, length=1)[0]

    f = nb.shard_map(body, mesh=mesh, in_specs=(P(), P("tp")), out_specs=P())

    def loss(c, w):
        return nb.sum(f(c, w))

    alone = nb.grad(loss, argnums=0)(c0, w0).numpy()
    gc, gw = nb.grad(loss, argnums=(0, 1))(c0, w0)
    np.testing.assert_allclose(alone, [16.0, 20.0])  # the blocks of w summed
    np.testing.assert_allclose(gc.numpy(), alone)
    np.testing.assert_allclose(gw.numpy(), [1.0, 2.0] * 4)
