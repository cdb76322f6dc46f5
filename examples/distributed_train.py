"""Data-parallel training of an MLP over MPI processes (``nb.distributed``).

Every process runs this same script. The mesh has one axis, ``dp``, with two devices per
process: ``mpiexec -n 2`` gives a 4-device mesh (2 processes x 2 local devices), a plain
``python`` run one process with 2 devices. The batch is split over ``dp``; each process
loads only its own rows (``from_process_local``: no process ever holds the whole batch),
the parameters are replicated, and the gradients are summed across processes by the
``all_reduce`` that sharding propagation inserts (visible in ``nb.trace``). The step is
compiled; the losses are checked against the same step on the whole batch on one device.

Run: ``mpiexec -n 2 python examples/distributed_train.py`` (or without ``mpiexec``).
"""

import numpy as np

import nabla as nb
from nabla import P

LOCAL_DEVICES = 2


def make_data(batch, d_in, d_out, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, d_in)).astype(np.float32)
    w = rng.standard_normal((d_in, d_out)).astype(np.float32)
    return x, np.tanh(x @ w).astype(np.float32)


def init_params(d_in, d_hidden, d_out, seed=1):
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((d_in, d_hidden)) / np.sqrt(d_in)).astype(np.float32),
        "b1": np.zeros(d_hidden, np.float32),
        "w2": (rng.standard_normal((d_hidden, d_out)) / np.sqrt(d_hidden)).astype(np.float32),
    }


def loss_fn(params, x, y):
    h = nb.relu(x @ params["w1"] + params["b1"])
    return nb.mean((h @ params["w2"] - y) ** 2)


def sgd_step(params, x, y, lr=0.1):
    loss, grads = nb.value_and_grad(loss_fn)(params, x, y)
    return loss, {k: params[k] - lr * grads[k] for k in params}


def main(steps=20, batch=64, d_in=16, d_hidden=32, d_out=4, verbose=True) -> dict:
    nb.distributed.initialize()
    rank, procs = nb.distributed.process_index(), nb.distributed.process_count()
    say = print if verbose and rank == 0 else (lambda *a, **k: None)
    mesh = nb.DeviceMesh("data", (procs * LOCAL_DEVICES,), ("dp",))
    x, y = make_data(batch, d_in, d_out)  # here every process could make it; see below
    rows = batch // procs
    mine = slice(rank * rows, (rank + 1) * rows)
    xs = nb.distributed.from_process_local(x[mine], mesh, P("dp"))
    ys = nb.distributed.from_process_local(y[mine], mesh, P("dp"))
    params = {k: nb.shard(v, mesh, P()) for k, v in init_params(d_in, d_hidden, d_out).items()}
    say(
        f"{procs} process(es) x {LOCAL_DEVICES} local devices = mesh {mesh.shape}; "
        f"batch {batch}, {rows} rows per process"
    )
    moved = nb.trace(sgd_step)(params, xs, ys).collectives()
    collectives = [c.op for c in moved if c.bytes > 0]  # those that send data
    say("collectives in one step:", ", ".join(sorted(set(collectives))))

    step = nb.compile(sgd_step)
    losses = []
    for i in range(steps):
        loss, params = step(params, xs, ys)
        losses.append(loss.item())  # every process calls: the value is gathered
        if i % 5 == 0 or i == steps - 1:
            say(f"step {i:3d}  loss {losses[-1]:.5f}")

    # the same training on the whole batch, unsharded, in this process alone
    ref = {k: nb.constant(v) for k, v in init_params(d_in, d_hidden, d_out).items()}
    ref_losses = []
    for _ in range(steps):
        loss, ref = sgd_step(ref, nb.constant(x), nb.constant(y))
        ref_losses.append(loss.item())
    matches = bool(np.allclose(losses, ref_losses, rtol=1e-4, atol=1e-6))
    say("matches the single-device run:", matches)
    return {
        "losses": losses,
        "matches": matches,
        "processes": procs,
        "collectives": collectives,
    }


if __name__ == "__main__":
    out = main()
    if not out["matches"]:
        raise SystemExit("distributed training differs from the single-device run")
