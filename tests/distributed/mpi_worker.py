"""One scenario of tests/distributed/test_mpi.py, run by every process under ``mpiexec``:
``python mpi_worker.py SCENARIO``. Each process checks its results against the unsharded
computation (which every process can run alone) and prints ``OK SCENARIO RANK``; a failed
check raises, which aborts every process."""

import sys

import numpy as np

import nabla as nb
from nabla import P

nb.distributed.initialize()
RANK = nb.distributed.process_index()
N = nb.distributed.process_count()


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------- training
def init_params():
    return {
        "w1": nb.constant(data(8, 16, seed=1) * 0.3),
        "b1": nb.constant(np.zeros(16, np.float32)),
        "w2": nb.constant(data(16, 3, seed=2) * 0.3),
    }


def loss_fn(params, x, y):
    h = nb.tanh(x @ params["w1"] + params["b1"])
    return nb.mean((h @ params["w2"] - y) ** 2)


def sgd_step(params, x, y):
    loss, grads = nb.value_and_grad(loss_fn)(params, x, y)
    return loss, {k: params[k] - 0.1 * grads[k] for k in params}


def train(params, x, y, steps, step_fn):
    losses = []
    for _ in range(steps):
        loss, params = step_fn(params, x, y)
        losses.append(float(loss.item()))
    return losses, {k: v.numpy() for k, v in params.items()}


def scenario_dp_train():
    """Data-parallel training (batch split over every device, parameters replicated) equals
    the single-process run, on one device per process and on processes x local devices,
    eager and compiled."""
    x, y = data(32, 8, seed=3), data(32, 3, seed=4)
    want_losses, want_params = train(init_params(), nb.constant(x), nb.constant(y), 4, sgd_step)
    meshes = [nb.DeviceMesh("procs", (N,), ("dp",)), nb.DeviceMesh("mixed", (N, 2), ("p", "l"))]
    for mesh in meshes:
        batch = P(mesh.axis_names)
        rep = P()
        for step_fn in (sgd_step, nb.compile(sgd_step)):
            params = {k: nb.shard(v, mesh, rep) for k, v in init_params().items()}
            xs, ys = nb.shard(x, mesh, batch), nb.shard(y, mesh, batch)
            # each process holds only its rows
            assert xs.addressable_shards[0].data.shape == (32 // mesh.size, 8)
            losses, got = train(params, xs, ys, 4, step_fn)
            close(losses, want_losses)
            for k in want_params:
                close(got[k], want_params[k])


def scenario_tensor_parallel():
    """A Megatron MLP whose hidden dim is split over the processes: the second matmul's
    contraction crosses processes (one all_reduce), forward and grad equal unsharded."""
    mesh = nb.DeviceMesh("tp", (N,), ("tp",))
    x, w1, w2 = data(4, 8, seed=5), data(8, 4 * N, seed=6), data(4 * N, 6, seed=7)

    def f(x, w1, w2):
        return nb.sum(nb.tanh(nb.relu(x @ w1) @ w2))

    want = nb.value_and_grad(f, argnums=(1, 2))(nb.constant(x), nb.constant(w1), nb.constant(w2))
    args = (nb.shard(x, mesh, P()), nb.shard(w1, mesh, P(None, "tp")), nb.shard(w2, mesh, P("tp")))
    names = [c.op for c in nb.trace(f)(*args).collectives()]
    assert names == ["all_reduce"], names  # the row-parallel product's partial sums, once
    got = nb.value_and_grad(f, argnums=(1, 2))(*args)
    close(got[0].item(), want[0].item())
    assert got[1][0].sharding.to_partition_spec() == P(None, "tp")
    for g, w in zip(got[1], want[1], strict=True):
        close(g.numpy(), w.numpy())


def scenario_collectives():
    """Every explicit collective on tensors whose blocks live on different processes."""
    mesh = nb.DeviceMesh("m", (N, 2), ("p", "l"))
    x = data(4 * N, 2 * N, seed=8)
    t = nb.shard(x, mesh, P(("p", "l")))
    assert [s.device for s in t.addressable_shards] == [2 * RANK, 2 * RANK + 1]
    for s in t.addressable_shards:
        np.testing.assert_array_equal(s.data, x[s.index])
    close(t.numpy(), x)
    # partial sums completed across processes; max of a partial sum
    close(nb.sum(t, axis=0).numpy(), x.sum(0))
    close(nb.max(nb.sum(t, axis=0)).item(), x.sum(0).max())
    blocks = x.reshape(2 * N, 2, 2 * N)
    close(nb.all_reduce(t, "sum", axes=("p", "l")).numpy(), blocks.sum(0))
    close(nb.all_reduce(t, "max", axes=("p", "l")).numpy(), blocks.max(0))
    close(nb.pmean(t, axes=("p", "l")).numpy(), blocks.mean(0))
    close(nb.all_gather(t, 0).numpy(), x)
    wide = data(4 * N, 8 * N, seed=10)
    terms = nb.sum(nb.shard(wide, mesh, P(("p", "l"))), axis=0)  # partial over p and l
    scattered = nb.reduce_scatter(terms, 0)
    assert scattered.sharding.to_partition_spec() == P(("p", "l"))
    close(scattered.numpy(), wide.sum(0))
    swapped = nb.all_to_all(nb.shard(wide, mesh, P(("p", "l"))), 1, 0)
    assert swapped.sharding.to_partition_spec() == P(None, ("p", "l"))
    close(swapped.numpy(), wide)
    # one device per process along the axes: one Reduce_scatter_block / Alltoall call
    rows = nb.shard(wide, mesh, P("p"))
    scattered = nb.reduce_scatter(nb.sum(rows, axis=0), 0)
    assert scattered.sharding.to_partition_spec() == P("p")
    close(scattered.numpy(), wide.sum(0))
    swapped = nb.all_to_all(rows, 1, 0)
    assert swapped.sharding.to_partition_spec() == P(None, "p")
    close(swapped.numpy(), wide)
    if N == 4:  # a dim split over two axes in the reverse of the mesh's order
        grid = nb.DeviceMesh("grid", (2, 2), ("a", "b"))
        rev = nb.shard(wide, grid, P(("b", "a")))
        back = nb.reduce_scatter(nb.sum(rev, axis=0), 0, axes=("b", "a"))
        assert back.sharding.to_partition_spec() == P(("b", "a"))
        close(back.numpy(), wide.sum(0))
        close(nb.all_to_all(rev, 1, 0).numpy(), wide)
        for s in nb.all_to_all(rev, 1, 0).addressable_shards:
            np.testing.assert_array_equal(s.data, wide[s.index])
        # past one exchange (768 KiB of blocks for the others): in pieces, in that order
        big = data(4, 1 << 18, seed=11)
        rev = nb.shard(big, grid, P(("b", "a")))
        back = nb.reduce_scatter(nb.sum(rev, axis=0), 0, axes=("b", "a"))
        assert back.sharding.to_partition_spec() == P(("b", "a"))
        close(back.numpy(), big.sum(0))
    # small values travel inside the agreement, large ones by their own exchange or MPI
    # call, and past 512 KiB in pieces (on 4 processes also within groups of 2): equal
    for cols in (8, 4096, (1 << 16) + 12):  # 32 B, 16 KiB and 512 KiB + 48 B per device
        check_small_and_large(cols)
    # a 0-d block per device travels too
    line = nb.DeviceMesh("line", (N,), ("q",))
    scalar_ring = [(d, (d + 1) % N) for d in range(N)]
    close(nb.ppermute(nb.shard(np.float32(3), line, P()), scalar_ring).numpy(), 3)
    # a ring over every device (flat indices) crosses processes
    ring = [(d, (d + 1) % mesh.size) for d in range(mesh.size)]
    close(nb.ppermute(t, ring).numpy(), np.roll(blocks, 1, axis=0).reshape(x.shape))
    close(nb.axis_index(mesh, "p").numpy(), np.arange(N))
    close(nb.broadcast(t, root=N - 1, axes="p").numpy(), x.reshape(N, 4, 2 * N)[N - 1])
    # every pair of layouts reshards to the same value
    specs = [P(), P("p"), P("l"), P(("p", "l")), P(None, "p"), P("l", "p"), P(("l", "p"))]
    for a in specs:
        for b in specs:
            close(nb.reshard(nb.shard(x, mesh, a), mesh, b).numpy(), x)
    # grad through collectives that cross processes
    g = nb.grad(lambda t: nb.sum(nb.all_gather(t, 0) ** 2))(t)
    close(g.numpy(), 2 * x)
    assert g.sharding.to_partition_spec() == P(("p", "l"))


def check_small_and_large(cols: int):
    """all_reduce, all_gather and reduce_scatter of ``cols`` float32 per device, over every
    process and (on 4) over a sub-group of a 2-D mesh, against NumPy."""
    x = data(2 * N, cols, seed=cols)
    line = nb.DeviceMesh("line", (N,), ("q",))
    t = nb.shard(x, line, P("q"))
    blocks = x.reshape(N, 2, cols)
    close(nb.all_reduce(t, "sum", axes="q").numpy(), blocks.sum(0))
    close(nb.all_reduce(t, "max", axes="q").numpy(), blocks.max(0))
    close(nb.all_gather(t, 0).numpy(), x)
    close(nb.all_gather(nb.shard(x, line, P(None, "q")), 1).numpy(), x)
    scattered = nb.reduce_scatter(nb.sum(nb.shard(x, line, P("q")), axis=0), 0)
    close(scattered.numpy(), x.sum(0))
    whole = nb.all_reduce(nb.shard(x.astype(np.int32), line, P("q")), "sum", axes="q")
    np.testing.assert_array_equal(whole.numpy(), blocks.astype(np.int32).sum(0))
    if N == 4:  # groups of 2 processes: each reduces with its own row of the grid only
        grid = nb.DeviceMesh("grid", (2, 2), ("a", "b"))
        g = nb.shard(x, grid, P(("a", "b")))
        by_a = x.reshape(2, 2, 2, cols).sum(0).reshape(4, cols)
        got = nb.all_reduce(g, "sum", axes="a")
        for s in got.addressable_shards:
            close(s.data, by_a[2 * (s.device % 2) : 2 * (s.device % 2) + 2])
        close(nb.all_gather(nb.shard(x, grid, P("b")), 0, axes="b").numpy(), x)


def scenario_eager_lane():
    """all_reduce, all_gather and reduce_scatter of a realized value run at once, straight
    on its buffer (no graph node), with the graph's result: the same collective of an
    unrealized operand (``x * 1``) takes the lazy path. A layout with several devices per
    process along the axes keeps the lazy path."""

    def lane(fn, x):
        got = fn(x)
        assert got._impl.node is None and got._impl.buffer is not None, "not run at once"
        want = fn(x * 1)
        assert want._impl.node is not None, "an unrealized operand stays lazy"
        assert got.sharding == want.sharding, (got.sharding, want.sharding)
        for g, w in zip(got.addressable_shards, want.addressable_shards, strict=True):
            assert g.data.dtype == w.data.dtype and g.data.shape == w.data.shape
            np.testing.assert_array_equal(g.data, w.data)
        return got

    line = nb.DeviceMesh("line", (N,), ("q",))
    for dtype in (np.float32, np.float64, np.int32):
        for cols in (3, 1024):  # data inside the agreement's 4 KiB on the lazy path, and not
            x = (data(2 * N, cols, seed=cols) * 8).astype(dtype)
            t = nb.shard(x, line, P("q"))
            nb.realize(t)
            blocks = x.reshape(N, 2, cols)
            for kind, ref in (("sum", np.sum), ("max", np.max), ("min", np.min)):
                got = lane(lambda v, kind=kind: nb.all_reduce(v, kind, axes="q"), t)
                close(got.numpy(), ref(blocks, axis=0))
            close(lane(lambda v: nb.all_gather(v, 0), t).numpy(), x)
            cols_split = nb.shard(x, line, P(None, "q")) if cols % N == 0 else None
            if cols_split is not None:  # joined along a dim that is not the leading one
                close(lane(lambda v: nb.all_gather(v, 1), nb.realize(cols_split)).numpy(), x)
            wide = (data(2 * N, 4 * N, seed=cols + 1) * 8).astype(dtype)
            terms = nb.realize(nb.sum(nb.shard(wide, line, P("q")), axis=0))
            close(lane(lambda v: nb.reduce_scatter(v, 0), terms).numpy(), wide.sum(0))
            close(lane(lambda v: nb.all_reduce(v, "sum"), terms).numpy(), wide.sum(0))
            # scattered along a dim that is not the leading one: the blocks are gathered
            # out of the buffer (not a view of it)
            deep = (data(2 * N, 12 * N, seed=cols + 2) * 8).astype(dtype).reshape(2 * N, 3, -1)
            terms = nb.realize(nb.sum(nb.shard(deep, line, P("q")), axis=0))
            close(lane(lambda v: nb.reduce_scatter(v, 1), terms).numpy(), deep.sum(0))
    # past one exchange (512 KiB per process): through the slots in pieces, also at once,
    # with the lazy path's bits
    cols = (1 << 16) + 4 * N
    x = data(2 * N, cols, seed=9)
    t = nb.realize(nb.shard(x, line, P("q")))
    for kind, ref in (("sum", np.sum), ("max", np.max)):
        got = lane(lambda v, kind=kind: nb.all_reduce(v, kind, axes="q"), t)
        close(got.numpy(), ref(x.reshape(N, 2, cols), axis=0))
    close(lane(lambda v: nb.all_gather(v, 0), t).numpy(), x)
    wide = data(2 * N, 4 * cols, seed=10)
    terms = nb.realize(nb.sum(nb.shard(wide, line, P("q")), axis=0))
    close(lane(lambda v: nb.reduce_scatter(v, 0), terms).numpy(), wide.sum(0))
    # several devices per process along the axes: the lazy path
    mesh = nb.DeviceMesh("m", (N, 2), ("p", "l"))
    x = data(4 * N, 3, seed=5)
    t = nb.realize(nb.shard(x, mesh, P(("p", "l"))))
    got = nb.all_reduce(t, "sum", axes=("p", "l"))
    assert got._impl.node is not None
    close(got.numpy(), x.reshape(2 * N, 2, 3).sum(0))
    if N == 4:  # groups of 2 processes; a dim split over two axes in reverse mesh order
        grid = nb.DeviceMesh("grid", (2, 2), ("a", "b"))
        g = nb.realize(nb.shard(x, grid, P(("a", "b"))))
        got = lane(lambda v: nb.all_reduce(v, "sum", axes="a"), g)
        by_a = x.reshape(2, 2, 4, 3).sum(0).reshape(8, 3)
        for s in got.addressable_shards:
            close(s.data, by_a[4 * (s.device % 2) : 4 * (s.device % 2) + 4])
        close(lane(lambda v: nb.all_gather(v, 0, axes="b"), g).numpy(), x)
        wide = data(4, 16, seed=6)
        rev = nb.realize(nb.sum(nb.shard(wide, grid, P(("b", "a"))), axis=0))
        back = lane(lambda v: nb.reduce_scatter(v, 0, axes=("b", "a")), rev)
        assert back.sharding.to_partition_spec() == P(("b", "a"))
        close(back.numpy(), wide.sum(0))
        # integers: their blocks travel in the agreement, in the members' block order
        iwide = (wide * 8).astype(np.int32)
        irev = nb.realize(nb.sum(nb.shard(iwide, grid, P(("b", "a"))), axis=0))
        back = lane(lambda v: nb.reduce_scatter(v, 0, axes=("b", "a")), irev)
        np.testing.assert_array_equal(back.numpy(), iwide.sum(0))
        split = nb.realize(nb.shard(iwide, grid, P(("b", "a"))))
        np.testing.assert_array_equal(lane(lambda v: nb.all_gather(v, 0), split).numpy(), iwide)
    # under grad, vmap or compile the collective stays in the graph
    t = nb.realize(nb.shard(data(2 * N, 4, seed=7), line, P("q")))
    g = nb.grad(lambda v: nb.sum(nb.all_gather(v, 0) ** 2))(t)
    close(g.numpy(), 2 * t.numpy())
    step = nb.compile(lambda v: nb.all_reduce(v, "sum", axes="q"))
    close(step(t).numpy(), t.numpy().reshape(N, 2, 4).sum(0))
    program_lane(line)


def program_lane(line):
    """Inside a compiled program on the shared-memory exchange, collectives whose data fit
    the slots go through their lane's fold, with the bits of the lowering's own path
    (each collective alone: ``scenario_coalesced`` checks a group against that)."""
    from nabla.backends import mpi

    def step(v, terms):
        return (
            nb.all_reduce(v, "sum", axes="q"),
            nb.all_gather(v, 0),
            nb.reduce_scatter(terms, 0),
        )

    x, wide = data(2 * N, 6, seed=8), data(2 * N, 4 * N, seed=9)
    v = nb.realize(nb.shard(x, line, P("q")))
    terms = nb.realize(nb.sum(nb.shard(wide, line, P("q")), axis=0))
    real, folded = mpi._folded_in_program, []

    def counted(*args):
        out = real(*args)
        folded.append(out is not None)
        return out

    try:
        mpi.COALESCE = False
        mpi._folded_in_program = counted
        compiled = nb.compile(step)
        fast = [compiled(v, terms) for _ in range(3)]  # traced, then the plan twice
        mpi._folded_in_program = lambda *args: None  # the lowerings' own path
        slow = nb.compile(step)(v, terms)
    finally:
        mpi._folded_in_program = real
        mpi.COALESCE = True
    if mpi._STATE.exchange.shared:
        assert len(folded) == 9 and all(folded), folded
    else:  # agreements and data go by MPI calls: no slots to fold into
        assert not folded, folded
    want = (x.reshape(N, 2, 6).sum(0), x, wide.sum(0))
    for got in fast:
        for g, s, w in zip(got, slow, want, strict=True):
            close(g.numpy(), w)
            for a, b in zip(g.addressable_shards, s.addressable_shards, strict=True):
                np.testing.assert_array_equal(a.data, b.data)
    # a hot step that only lays out a constant as its operand's blocks (``mesh_shard``, no
    # exchange) runs as straight-line code, with the interpreter's values
    affine = nb.compile(lambda a: a * 2.0 + 1.0)
    for _ in range(8):
        close(affine(v).numpy(), x * 2 + 1)
    if nb.get_backend_name() == "numpy":
        ran = next(iter(affine._cache.values())).program().executables["numpy_fast"]
        assert hasattr(ran, "source"), "stayed interpreted"


def scenario_coalesced():
    """Small collectives of one compiled program that do not depend on each other share
    one exchange (``mesh_coalesced``): the values are the same, bit for bit, as with each
    collective alone, and the step makes fewer exchanges. A value computed from a grouped
    collective's output closes the group first."""
    from nabla.backends import mpi  # noqa: PLC0415 - the transport under test
    from nabla.runtime import executor  # noqa: PLC0415

    line = nb.DeviceMesh("line", (N,), ("q",))

    def step(a, b, c):
        s1 = nb.all_reduce(a, "sum", axes="q")
        g1 = nb.all_gather(b, 0)
        t = nb.reduce_scatter(nb.sum(c * 1.5, axis=0), 0)
        u = s1 * 2.0  # reads s1: the group above runs before it
        s2 = nb.all_reduce(u, "max", axes="q")
        g2 = nb.all_gather(b * 3.0, 0)
        return s1, g1, t, s2, g2

    fn = nb.compile(step)
    rng = np.random.default_rng(7 + RANK)
    a, b, c = (
        nb.distributed.from_process_local(rng.standard_normal(shape).astype(dt), line, P("q"))
        for shape, dt in (((1, 33), np.float64), ((2, 5), np.float32), ((1, 4 * N), np.float32))
    )
    nb.realize(a, b, c)
    ex = mpi._STATE.exchange

    def run():
        before = ex.count
        outs = nb.realize(*fn(a, b, c))
        made = ex.count - before
        return [o.numpy() for o in outs], made

    mpi.COALESCE = False
    try:
        alone, alone_made = run()
        alone, alone_made = run()
        prog = next(iter(fn._cache.values())).program()
        assert executor.coalesced(prog) is prog, "grouped with coalescing off"
    finally:
        mpi.COALESCE = True
    prog.executables.pop("coalesced")
    together, made = run()
    together, made = run()
    grouped = executor.coalesced(prog)
    parts = [len(i.kwargs["parts"]) for i in grouped.instructions if i.op == "mesh_coalesced"]
    assert parts and max(parts) >= 2, [i.op for i in grouped.instructions]
    assert made < alone_made, (made, alone_made)
    for x, y in zip(alone, together, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))
    # and the values are the collectives' own
    av, bv = a.numpy(), b.numpy()
    close(together[0], av.sum(0, keepdims=True))
    close(together[1], bv)
    close(together[3], 2 * together[0])  # the max of equal copies
    close(together[4], 3 * bv)
    # a program of collectives only is one group run alone: its exchange is also the
    # agreement (one exchange a call)
    gathers = nb.compile(lambda xs: [nb.all_gather(v, 0) for v in xs])
    operands = nb.realize(b, b * 2.0, b * 3.0)
    nb.realize(*gathers(list(operands)))  # (the first call traces)
    for _ in range(3):
        before = ex.count
        outs = nb.realize(*gathers(list(operands)))
        assert ex.count - before == 1, ex.count - before
        for k, o in enumerate(outs):
            close(o.numpy(), (k + 1) * bv)


def scenario_exchanges():
    """Agreements and collectives back to back with the processes out of step: each
    process pauses at random before some calls, so one is often a call or two behind
    (on the shared-memory exchange it writes its next slot while a peer still reads the
    last one). Every result is checked, over sizes that fit the exchange's slots and
    sizes that do not (their data then go by MPI), eager and inside a compiled program."""
    import os
    import time

    from nabla.backends import mpi

    shared = os.environ.get("NABLA_MPI_SHARED", "1") != "0"
    assert mpi._STATE.exchange.shared is shared, type(mpi._STATE.exchange)
    if not shared or os.environ.get("NABLA_MPI_SINGLE_COPY", "1") == "0":
        assert mpi._STATE.exchange.reader is None
    # gathers past the agreement's slot read the peers' blocks where every process can
    reads = []
    real_gather = mpi._single_copy_gather

    def counted(x, members, rows=None):
        reads.append(x.nbytes)
        return real_gather(x, members, rows)

    mpi._single_copy_gather = counted
    line = nb.DeviceMesh("line", (N,), ("q",))
    rng = np.random.default_rng(RANK)
    ranks = np.arange(N).reshape(N, 1)
    # small, mid-size, past the MPI slot (4 KiB), past one exchange (512 KiB: in pieces,
    # the last one short) and past the pieces of a gather (4 MiB)
    for cols in (3, 1000, 5000, (1 << 18) + 12, (1 << 20) + 7):
        for step in range(40 if cols < 1 << 16 else 4):
            if rng.random() < 0.3:
                time.sleep(rng.random() * 3e-4)
            mine = np.full((1, cols), 10 * step + RANK, np.int32)
            t = nb.distributed.from_process_local(mine, line, P("q"))
            nb.realize(t)
            want = np.broadcast_to(10 * step + ranks, (N, cols))
            np.testing.assert_array_equal(nb.all_gather(t, 0).numpy(), want)
            total = nb.all_reduce(t, "sum", axes="q").numpy()
            np.testing.assert_array_equal(total, want.sum(0, keepdims=True))
            vals = nb.distributed.from_process_local(mine.astype(np.float32), line, P("q"))
            terms = nb.realize(nb.sum(vals * 1, axis=0))  # a partial value, realized
            if cols % N == 0:
                got = nb.reduce_scatter(terms, 0).numpy()
                np.testing.assert_array_equal(got, want.sum(0).astype(np.float32))
    # inside one compiled program: several collectives of different sizes, one agreement
    step = nb.compile(lambda a, b: (nb.all_reduce(a, "sum", axes="q"), nb.all_gather(b, 0)))
    for cols in (4, 3000, (1 << 20) + 4):
        a = nb.distributed.from_process_local(np.full((1, cols), RANK + 1.0), line, P("q"))
        b = nb.distributed.from_process_local(np.full((2, 5), float(RANK)), line, P("q"))
        for _ in range(3):
            if rng.random() < 0.5:
                time.sleep(rng.random() * 3e-4)
            s, g = step(a, b)
            np.testing.assert_array_equal(s.numpy(), np.full((1, cols), N * (N + 1) / 2))
            want = np.repeat(np.arange(N, dtype=np.float64), 2)[:, None] * np.ones((1, 5))
            np.testing.assert_array_equal(g.numpy(), want)
    mpi._single_copy_gather = real_gather
    reader = mpi._STATE.exchange.reader
    if reader is not None:  # a failed read names the process, the bytes and the reason
        try:
            reader.read((RANK + 1) % N, 8, np.empty(16, np.uint8))  # (page 0: never mapped)
            raise AssertionError("a read of an unmapped address succeeded")
        except nb.distributed.DistributedError as e:
            assert f"reading 16 bytes of a gather's block out of process {(RANK + 1) % N}" in str(e)
            assert "NABLA_MPI_SINGLE_COPY=0" in str(e), e
    if reader is None:
        assert not reads, reads
    else:  # the 1 MiB and 4 MiB gathers (4 calls each), none that fit the slot
        assert sorted(set(reads)) == [4 * ((1 << 18) + 12), 4 * ((1 << 20) + 7)], reads
        assert len(reads) == 8, reads


def scenario_eager_memo():
    """A public collective called again on a value of the same layout reuses its memoized
    call; another dtype, shape, spec or argument is a new entry with its own checks and
    result, never the stale one."""
    from nabla.ops import collectives as C  # noqa: PLC0415 - the memo under test

    line = nb.DeviceMesh("line", (N,), ("q",))
    x = data(2 * N, 4 * N, seed=11)
    rows = nb.realize(nb.shard(x, line, P("q")))
    C._EAGER.clear()
    for _ in range(3):  # the first call fills the memo, the others hit it
        got = nb.all_reduce(rows, "sum", axes="q")
        assert got._impl.node is None
        close(got.numpy(), x.reshape(N, 2, 4 * N).sum(0))
    assert len(C._EAGER) == 1, list(C._EAGER)
    # another dtype: its own entry, an int32 result
    ints = nb.realize(nb.shard((x * 8).astype(np.int32), line, P("q")))
    got = nb.all_reduce(ints, "sum", axes="q")
    assert got.dtype == nb.int32, got.dtype
    np.testing.assert_array_equal(got.numpy(), (x * 8).astype(np.int32).reshape(N, 2, -1).sum(0))
    # another kind: max, not the memoized sum
    close(nb.all_reduce(rows, "max", axes="q").numpy(), x.reshape(N, 2, 4 * N).max(0))
    # another shape
    wide = data(4 * N, 4 * N, seed=12)
    got = nb.all_reduce(nb.realize(nb.shard(wide, line, P("q"))), "sum", axes="q")
    close(got.numpy(), wide.reshape(N, 4, 4 * N).sum(0))
    # all_gather of dim 0 memoized, then the same call on a value split along dim 1: the
    # check runs again and fails
    close(nb.all_gather(rows, 0).numpy(), x)
    close(nb.all_gather(rows, 0).numpy(), x)
    cols = nb.realize(nb.shard(x, line, P(None, "q")))
    try:
        nb.all_gather(cols, 0)
    except nb.ShardingError as e:
        assert "not split" in str(e), e
    else:
        raise AssertionError("all_gather of an unsplit dim passed")
    close(nb.all_gather(cols, 1).numpy(), x)
    # reduce_scatter memoized, then on a value that is not partial: all_reduce then a slice
    terms = nb.realize(nb.sum(nb.shard(x, line, P("q")), axis=0))
    for _ in range(2):
        close(nb.reduce_scatter(terms, 0).numpy(), x.sum(0))
    plain = nb.realize(nb.shard(x[0], line, P()))
    close(nb.reduce_scatter(plain, 0).numpy(), N * x[0])
    # a bool operand is cast to a count first: never memoized as the bool call
    flags = nb.realize(nb.shard(x > 0, line, P("q")))
    for _ in range(2):
        got = nb.all_reduce(flags, "sum", axes="q")
        np.testing.assert_array_equal(got.numpy(), (x > 0).reshape(N, 2, -1).sum(0))
    # a new transport (``activate`` with another communicator): a memoized call's function
    # holds the old one's slots, so it steps aside and the call takes the general path
    from nabla.backends import mpi  # noqa: PLC0415 - the transport under test

    old = mpi._STATE.exchange
    mpi.activate(mpi.world().Dup())
    assert mpi._STATE.exchange is not old
    for _ in range(2):
        close(nb.all_reduce(rows, "sum", axes="q").numpy(), x.reshape(N, 2, 4 * N).sum(0))
        close(nb.all_gather(rows, 0).numpy(), x)
        close(nb.reduce_scatter(terms, 0).numpy(), x.sum(0))


def scenario_read_alone_beside_eager():
    """Process 0 reads a value split over the processes alone while the others run an
    eager all_reduce straight on its buffer: every process fails at once, naming the
    read, as when the others run a program."""
    mesh = nb.DeviceMesh("procs", (N,), ("dp",))
    x = nb.realize(nb.shard(np.ones((4 * N, 2), np.float32), mesh, P("dp")))
    nb.all_reduce(x, "sum", axes="dp").numpy()  # the group's communicator exists
    t = nb.realize(nb.sum(x, axis=0))
    if RANK == 0:
        print(t.numpy())
    else:
        nb.all_reduce(x, "sum", axes="dp")


def scenario_mismatch_eager(ops: bool):
    """Different eager collectives (another size, or another op) on the same group, each
    posted beside its agreement: an error on every process, not a hang or a wrong value."""
    mesh = nb.DeviceMesh("m", (N,), ("p",))
    small = nb.realize(nb.shard(np.ones((N, 4), np.float32), mesh, P("p")))
    large = nb.realize(nb.shard(np.ones((N, 8192), np.float32), mesh, P("p")))
    nb.all_reduce(small, "sum", axes="p").numpy()  # the group's communicator exists
    if ops:
        out = nb.all_gather(large, 0) if RANK == 0 else nb.all_reduce(large, "sum", axes="p")
    else:
        out = nb.all_reduce(small if RANK == 0 else large, "sum", axes="p")
    print(out.addressable_shards[0].data.sum())  # not reached


def scenario_mismatch_coalesced():
    """A compiled program of collectives only (one group that shares one exchange and
    agrees in it) run on one process while the other traces the call again for another
    shape: an error on every process, not a hang or a wrong value."""
    mesh = nb.DeviceMesh("m", (N,), ("p",))
    a, five, six = (
        nb.realize(nb.shard(np.ones((N, n), np.float32), mesh, P("p"))) for n in (4, 5, 6)
    )
    gathers = nb.compile(lambda xs: [nb.all_gather(v, 0) for v in xs])
    for _ in range(2):  # traced, then the group alone
        nb.realize(*gathers([a, five]))
    outs = gathers([a, six if RANK else five])
    print([o.addressable_shards[0].data.sum() for o in outs])  # not reached


def scenario_mismatch_eager_sizes():
    scenario_mismatch_eager(ops=False)


def scenario_mismatch_eager_ops():
    scenario_mismatch_eager(ops=True)


def scenario_process_local():
    """from_process_local: each process gives only its rows (no process holds the whole)."""
    mesh = nb.DeviceMesh("m", (N, 2), ("p", "l"))
    x = data(4 * N, 3, seed=9)
    mine = x[4 * RANK : 4 * RANK + 4]
    t = nb.distributed.from_process_local(mine, mesh, P(("p", "l")))
    assert t.shape == x.shape
    close(t.numpy(), x)
    close((t * 2).sum(axis=0).numpy(), 2 * x.sum(0))
    # replicated columns, rows over processes only: each local device holds the same rows
    u = nb.distributed.from_process_local(mine, mesh, P("p"))
    close(u.numpy(), x)
    close(nb.mean(u).item(), x.mean())


def scenario_max_segments():
    """On the MAX backend a program that communicates is cut at its collectives and each
    segment is a compiled MAX graph: here the ``all_reduce`` completing partial sums and
    ``axis_index`` (both cuts, run over MPI), then ``tanh(.) + 1`` and ``axis_index + 1`` in
    one compiled graph (one small graph: the cold compile stays cheap)."""
    mesh = nb.DeviceMesh("procs", (N,), ("dp",))
    x = data(4 * N, 3, seed=3)
    terms = nb.sum(nb.shard(x, mesh, P("dp")), axis=0)  # partial over dp
    nb.realize(terms)
    assert terms.sharding.partial_kinds == {"dp": "sum"}
    nb.set_backend("max")
    before = nb.backend_stats()
    out = nb.tanh(terms) + 1.0
    idx = nb.axis_index(mesh, "dp") + 1
    nb.realize(out, idx)
    after = nb.backend_stats()
    nb.set_backend("numpy")
    ran = sum(after[f"max_{k}"] - before[f"max_{k}"] for k in ("compiles", "disk_hits"))
    assert ran >= 1, (before, after)  # the segment was compiled (or loaded) by MAX
    assert after["max_unsupported_programs"] == before["max_unsupported_programs"]
    close(out.numpy(), np.tanh(x.sum(0)) + 1)
    close(idx.numpy(), np.arange(1, N + 1))


def scenario_reads():
    """Reads that need no other process: a compiled data-parallel step returns its mean loss
    replicated, so ``if RANK == 0: print(loss.item())`` runs on process 0 alone; a value
    gathered once (partial sums completed) is kept; a value this process holds whole is
    read locally. And a process waiting for a late peer sleeps instead of spinning."""
    import time

    x, y = data(32, 8, seed=3), data(32, 3, seed=4)
    want_losses, want_params = train(init_params(), nb.constant(x), nb.constant(y), 3, sgd_step)
    mesh = nb.DeviceMesh("procs", (N,), ("dp",))
    params = {k: nb.shard(v, mesh, P()) for k, v in init_params().items()}
    xs, ys = nb.shard(x, mesh, P("dp")), nb.shard(y, mesh, P("dp"))
    step = nb.compile(sgd_step)
    for i in range(3):
        loss, params = step(params, xs, ys)
        assert not loss.sharding.partial, loss.sharding  # replicated, as jax.jit returns it
        if RANK == 0:
            close(loss.item(), want_losses[i])
            print(f"step {i} loss {loss.item():.4f}", flush=True)
    for k in want_params:
        close(params[k].numpy(), want_params[k])
    # gathered once on every process, then read on process 0 alone
    total = nb.sum(xs)
    assert total.sharding.partial
    close(total.item(), x.sum())
    if RANK == 0:
        close(total.item(), x.sum())
        close(float(total), x.sum())
    # a (2, 2) mesh over 2 processes: a value split over the local axis only is held whole
    if N == 2:
        grid = nb.DeviceMesh("grid", (2, 2), ("p", "l"))
        cols = nb.shard(x, grid, P(None, "l"))
        part = nb.sum(cols, axis=1)
        nb.realize(cols, part)  # computing them is a program every process runs
        if RANK == 1:
            close(cols.numpy(), x)
            close(part.numpy(), x.sum(1))  # partial over l: completed locally
    # waiting for a late peer costs (almost) no CPU: the agreement sleeps between tests
    if RANK == 1:
        time.sleep(3)
    cpu = time.process_time()
    close(nb.sum(xs * 2).item(), 2 * x.sum())
    cpu = time.process_time() - cpu
    if RANK == 0:
        print(f"cpu while waiting {cpu:.2f} s", flush=True)
        assert cpu < 1.0, f"process 0 used {cpu:.2f} s of CPU waiting 3 s for process 1"


def scenario_read_alone():
    """Process 0 reads a value split over the processes that the others never read, and
    they finish: process 0 fails at once with an error naming the value and what to do."""
    mesh = nb.DeviceMesh("procs", (N,), ("dp",))
    t = nb.sum(nb.shard(np.ones((4 * N, 2), np.float32), mesh, P("dp")), axis=0)
    nb.realize(t)  # every process holds its partial sums
    if RANK == 0:
        print(t.numpy())


def scenario_read_lazy_alone():
    """Process 0 reads a lazy replicated value that no other process computes: the program
    that computes it is every process's to run, so process 0 fails at once, saying so."""
    mesh = nb.DeviceMesh("procs", (N,), ("dp",))
    t = nb.shard(np.ones((4, 2), np.float32), mesh, P()) * 2.0
    if RANK == 0:
        print(t.numpy())


def scenario_other_order():
    """Two partial sums of the same shape, computed together on every process, then read
    (``reads``) or summed with a third value (``program``) in the other order on process 1:
    the same ops on other values, which must fail on every process instead of mixing
    process 0's partial terms of one with process 1's of the other."""
    what = sys.argv[2]
    mesh = nb.DeviceMesh("procs", (N,), ("dp",))
    a = nb.sum(nb.shard(np.ones((4 * N, 2), np.float32), mesh, P("dp")), axis=0)
    b = nb.sum(nb.shard(np.full((4 * N, 2), 5.0, np.float32), mesh, P("dp")), axis=0)
    nb.realize(a, b)  # one agreed program: each process holds its partial terms
    first, second = (a, b) if RANK == 0 else (b, a)
    if what == "reads":
        print(first.numpy(), second.numpy())
    else:
        c = nb.shard(np.zeros((4 * N, 2), np.float32), mesh, P("dp"))
        print((first * 2.0 + second + c.sum(axis=0)).numpy())


# ----------------------------------------------------------------------------- checkpoints
def ckpt_values(version):
    """The values a checkpoint holds (equal on every process count)."""
    return {
        "rows": data(8, 12, seed=20 + version),
        "grid": data(8, 12, seed=30 + version),
        "flat": data(16, 3, seed=40 + version),
        "terms": data(16, 8, seed=50 + version),
    }


def ckpt_state(version, mesh2):
    """A state saved from 2 processes: a matrix split over one mesh axis, one over two axes
    (one per dim), one whose rows are split over two axes at once, a partial sum, a
    replicated optimizer-like dict, an unsharded tensor, a NumPy array and scalars."""
    v = ckpt_values(version)
    line = nb.DeviceMesh("line", (N,), ("dp",))
    return {
        "rows": nb.shard(v["rows"], line, P("dp")),
        "grid": nb.shard(v["grid"], mesh2, P("p", "l")),
        "flat": nb.shard(v["flat"], mesh2, P(("p", "l"))),
        "terms": nb.sum(nb.shard(v["terms"], mesh2, P(("p", "l"))), axis=0),  # partial
        "opt": {"mu": nb.shard(v["rows"] * 0.5, mesh2, P()), "step": nb.constant(np.int32(3))},
        "key": nb.random.key(version),
        "seen": np.arange(4) + version,
        "step": 10 + version,
        "lr": 0.5,
    }


def check_loaded(version, directory):
    """Load the checkpoint on this process count into several layouts (none of them the
    saved one) and compare with the values it holds."""
    v = ckpt_values(version)
    mesh2 = nb.DeviceMesh("other", (N, 2), ("a", "b"))
    line = nb.DeviceMesh("line", (2 * N,), ("x",))
    layouts = [
        {"rows": P(None, "a"), "grid": P(("a", "b")), "flat": P("b"), "terms": P("a")},
        {"rows": P(("a", "b")), "grid": P("b", "a"), "flat": P(), "terms": P()},
    ]
    for specs in layouts:
        like = ckpt_state(0, nb.DeviceMesh("m", (N, 2), ("p", "l")))
        for name, spec in specs.items():
            shape = v[name].shape if name != "terms" else (8,)
            like[name] = nb.shard(np.zeros(shape, np.float32), mesh2, spec)
        like["opt"]["mu"] = nb.shard(np.zeros((8, 12), np.float32), line, P("x"))
        out = nb.nn.load_sharded(directory, like)
        for name, spec in specs.items():
            assert out[name].sharding.to_partition_spec() == spec, (name, out[name].sharding)
            for s in out[name].addressable_shards:  # each process built only its blocks
                want = v[name] if name != "terms" else v[name].sum(0)
                close(s.data, want[s.index])
            close(out[name].numpy(), v[name] if name != "terms" else v[name].sum(0))
        close(out["opt"]["mu"].numpy(), v["rows"] * 0.5)
        assert int(out["opt"]["step"].item()) == 3
        np.testing.assert_array_equal(out["key"].numpy(), nb.random.key(version).numpy())
        np.testing.assert_array_equal(out["seen"], np.arange(4) + version)
        assert out["step"] == 10 + version and out["lr"] == 0.5


def check_data_order():
    """DataLoader's defaults come from nb.distributed: each process reads its part of every
    global batch, and the global batches are the single-process ones, shuffled alike."""
    x = np.arange(64 * 3, dtype=np.float32).reshape(64, 3)
    mesh = nb.DeviceMesh("line", (N,), ("dp",))
    mine = nb.nn.DataLoader(x, batch_size=16, shuffle=True, seed=5)
    whole = nb.nn.DataLoader(x, batch_size=16, shuffle=True, seed=5, num_replicas=1, rank=0)
    assert (mine.num_replicas, mine.rank) == (N, RANK)
    for _ in range(2):  # two epochs, two orders
        for part, want in zip(mine, whole, strict=True):
            assert part.shape == (16 // N, 3)
            got = nb.distributed.from_process_local(part, mesh, P("dp"))
            np.testing.assert_array_equal(got.numpy(), want.numpy())


def check_ckpt_mismatch(directory, mesh2):
    """A NumPy array that differs between processes (a save keeps process 0's), or a load
    into other layouts on one process: an error on every process naming that path."""

    def refused(fn, op, path):
        try:
            fn()
        except nb.distributed.DistributedError as e:
            assert f"first difference is op {op}: process {RANK} runs {path}: " in str(e), e
        else:
            raise AssertionError(f"{path}: no error")

    state = {"step": 1, "seen": np.arange(4) * RANK}
    refused(lambda: nb.nn.save_sharded(state, directory + "-x"), 0, "seen")
    like = ckpt_state(1, mesh2)
    if RANK == 1:
        like["rows"] = nb.constant(np.zeros((8, 12), np.float32))  # unsharded here only
    # (the paths in order: flat, grid, key, lr, opt.mu, opt.step, rows, ...)
    refused(lambda: nb.nn.load_sharded(directory, like), 6, "rows")


def scenario_ckpt_save():
    """On 2 processes: save version 1 (check it loads back here), then start saving version
    2 into the same folder and kill process 1 (SIGKILL) after it wrote its blocks, before
    the commit. The other process counts then load version 1."""
    import os
    import signal

    from nabla.nn import sharded_checkpoint as sc

    directory = sys.argv[2]
    mesh2 = nb.DeviceMesh("m", (N, 2), ("p", "l"))
    state = ckpt_state(1, mesh2)
    assert state["terms"].sharding.partial  # completed before saving
    nb.nn.save_sharded(state, directory)
    files = sorted(os.listdir(directory))
    data_dir = [f for f in files if f.startswith("data-")]
    assert files == data_dir + ["index.json"] and len(data_dir) == 1, files
    stored = sorted(os.listdir(os.path.join(directory, data_dir[0])))
    blocks = [f"process-0000{p}-of-0000{N}.safetensors" for p in range(N)]
    assert stored == [".nabla-checkpoint-data", *blocks], stored  # (the save's mark file)
    check_loaded(1, directory)
    check_data_order()
    check_ckpt_mismatch(directory, mesh2)
    print(f"OK saved {RANK}/{N}", flush=True)
    write = sc._write_file

    def write_then_die(path, arrays):
        write(path, arrays)
        if RANK == 1:
            os.kill(os.getpid(), signal.SIGKILL)

    sc._write_file = write_then_die
    nb.nn.save_sharded(ckpt_state(2, mesh2), directory)
    raise AssertionError("process 1 should have been killed during the save")


def scenario_ckpt_load():
    """Load the 2-process checkpoint (version 1: the interrupted save left it intact) in
    several layouts; then save again, which removes the interrupted save's leftovers."""
    import os

    directory = sys.argv[2]
    assert len([f for f in os.listdir(directory) if f.startswith("data-")]) == 2
    check_loaded(1, directory)
    check_data_order()
    if N == 1:  # one process, a simulated mesh: the same format
        nb.nn.save_sharded(ckpt_state(3, nb.DeviceMesh("m", (2, 2), ("p", "l"))), directory)
        left = sorted(f for f in os.listdir(directory) if f.startswith("data-"))
        assert len(left) == 1, left  # the leftover and the replaced version are gone
        check_loaded(3, directory)


# ----------------------------------------------------------------------------- failures
def scenario_mismatch():
    """Process 0 reduces another shape than the rest: an error naming the collective."""
    mesh = nb.DeviceMesh("m", (N,), ("p",))
    rows = 4 * N if RANK == 0 else 8 * N
    t = nb.shard(np.ones((rows, 2), np.float32), mesh, P("p"))
    nb.sum(t).item()


def scenario_mismatch_kind():
    """Same shapes, another reduction on process 0: an error, not a wrong value."""
    mesh = nb.DeviceMesh("m", (N,), ("p",))
    t = nb.shard(np.ones((4 * N, 2), np.float32), mesh, P("p"))
    nb.all_reduce(t, "max" if RANK == 0 else "sum", axes="p").numpy()


def scenario_mismatch_sizes():
    """Process 0 reduces a small value (its data travel inside the agreement), the others a
    large one (an agreement, then an Allreduce): an error on every process, not a hang."""
    mesh = nb.DeviceMesh("m", (N,), ("p",))
    small = nb.shard(np.ones((N, 4), np.float32), mesh, P("p"))
    large = nb.shard(np.ones((N, 8192), np.float32), mesh, P("p"))
    nb.realize(small, large)
    nb.all_reduce(small if RANK == 0 else large, "sum", axes="p").realize()


def scenario_mismatch_described():
    """The processes agree on programs described op by op (``describe_program``'s lines):
    on a mismatch each names the first op that differs, with both processes' shapes."""
    from nabla.backends import mpi

    rows = 8 if RANK == 0 else 16

    def describe():
        return ["mesh_iota() -> (2,) int32", f"reduce_sum(({rows},) float32) -> () float32"]

    with mpi.agreed_program(f"program of {rows} rows", describe):
        pass


def scenario_left_a_program():
    """Process 1 leaves an agreed program early (as after catching an error) and reaches
    the next agreement while process 0 is at a collective inside the program: on the
    shared-memory exchange both raise at once; neither reads the other's slot as data."""
    from nabla.backends import mpi

    assert mpi._STATE.exchange.shared
    with mpi.agreed_program("a step"):
        if RANK == 0:
            mpi._shared_rows(np.ones(4, np.float32))
    mpi.agree("the next step")


def scenario_rank_leaves_midway():
    """Process 1 stops answering after the processes agreed, while the others are inside a
    data collective: the watchdog aborts them after NABLA_MPI_TIMEOUT seconds."""
    import time

    from nabla.backends import mpi

    mpi.agree("both here")
    if RANK == 1:
        time.sleep(120)  # hangs elsewhere (a process that leaves is caught at its exit)
        return
    buf = np.ones(4, np.float32)
    with mpi._watch("an Allreduce the others never join"):
        mpi.world().Allreduce(buf.copy(), buf)


def scenario_rank_fails():
    """An exception on process 1 while the others wait in a collective ends every one."""
    mesh = nb.DeviceMesh("m", (N,), ("p",))
    t = nb.shard(np.ones((4 * N, 2), np.float32), mesh, P("p"))
    if RANK == 1:
        raise RuntimeError("process 1 fails on purpose")
    nb.sum(t).item()


def scenario_rank_leaves():
    """Process 1 returns without reaching a collective the others wait in: its exit joins
    their agreement, so they fail at once instead of waiting for NABLA_MPI_TIMEOUT."""
    mesh = nb.DeviceMesh("m", (N,), ("p",))
    t = nb.shard(np.ones((4 * N, 2), np.float32), mesh, P("p"))
    if RANK == 1:
        return
    nb.sum(t).item()


if __name__ == "__main__":
    name = sys.argv[1]
    globals()[f"scenario_{name}"]()
    print(f"OK {name} {RANK}/{N}", flush=True)
