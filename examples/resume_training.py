"""Training that survives being killed: data- plus tensor-parallel training with sharded
checkpoints, resumed on another process count.

The mesh is always the same 4 devices, ``(dp=2, tp=2)``, dealt to however many processes
run the script: 1 process simulates all 4, 2 processes hold one ``dp`` row each (``tp`` is
local), 4 processes one device each. The MLP's first layer is split over ``tp`` by columns,
the second by rows (one ``all_reduce`` over ``tp``); the batch is split over ``dp``, each
process loading only its part of every global batch (``DataLoader(num_replicas=, rank=)``).
Every ``--every`` steps the whole state is saved with ``nb.nn.save_sharded``: parameters,
AdamW state, the RNG key, the step counter and the data loader's position. A run started
with an existing checkpoint resumes from it, on any process count, and continues with the
same batches and the same random draws, so its final parameters equal an uninterrupted
run's (bit for bit here: every reduction has two terms, whose sum does not depend on the
order).

    mpiexec -n 2 python examples/resume_training.py --ckpt /tmp/ck --kill-at 7   # dies
    mpiexec -n 4 python examples/resume_training.py --ckpt /tmp/ck --out p4.npz  # resumes
    python examples/resume_training.py --ckpt /tmp/ck2 --out p1.npz   # from the start

``--kill-at K`` makes process 0 send itself ``SIGKILL`` after step ``K`` (as a crash would).
"""

from __future__ import annotations

import argparse
import os
import signal

import numpy as np

import nabla as nb
from nabla import P

D_IN, D_HIDDEN, D_OUT = 16, 32, 4


def make_data(n=512, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, D_IN)).astype(np.float32)
    w = rng.standard_normal((D_IN, D_OUT)).astype(np.float32)
    return x, np.tanh(x @ w).astype(np.float32)


def init_state(mesh, seed=1):
    """Step 0: parameters laid out for tensor parallelism, AdamW state, an RNG key."""
    rng = np.random.default_rng(seed)
    shapes = {"w1": (D_IN, D_HIDDEN), "b1": (D_HIDDEN,), "w2": (D_HIDDEN, D_OUT), "b2": (D_OUT,)}
    specs = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}
    params = {}
    for name, shape in shapes.items():
        value = rng.standard_normal(shape).astype(np.float32) / np.sqrt(shape[0])
        params[name] = nb.shard(value if name[0] == "w" else 0 * value, mesh, specs[name])
    opt = nb.nn.optim.adamw_init(params)
    return {"params": params, "opt": opt, "key": nb.random.key(seed), "step": 0}


def loss_fn(params, x, y):
    h = nb.tanh(x @ params["w1"] + params["b1"])  # columns over tp
    out = h @ params["w2"] + params["b2"]  # rows over tp: partial sums, one all_reduce
    return nb.mean((out - y) ** 2)


def train_step(params, opt, x, y):
    loss, grads = nb.value_and_grad(loss_fn)(params, x, y)
    params, opt = nb.nn.optim.adamw_update(params, grads, opt, lr=0.01, weight_decay=0.01)
    return loss, params, opt


def loader_for(mesh, x, y, batch):
    """This process's part of every global batch: the processes holding the same ``dp``
    block (they differ along ``tp``) read the same rows."""
    start, size = mesh.local_box[mesh.axis("dp")]
    parts = mesh.shape[mesh.axis("dp")] // size
    return nb.nn.DataLoader(
        (x, y), batch_size=batch, shuffle=True, drop_last=True, seed=3,
        num_replicas=parts, rank=start // size,
    )  # fmt: skip


def main(ckpt, steps=12, every=3, kill_at=None, out=None, batch=32, verbose=True) -> dict:
    nb.distributed.initialize()
    rank, procs = nb.distributed.process_index(), nb.distributed.process_count()
    say = print if verbose and rank == 0 else (lambda *a, **k: None)
    mesh = nb.DeviceMesh("mesh", (2, 2), ("dp", "tp"))
    x, y = make_data()
    loader = loader_for(mesh, x, y, batch)
    state = init_state(mesh)
    if os.path.exists(os.path.join(ckpt, "index.json")):
        state["data"] = loader.state_dict()
        state = nb.nn.load_sharded(ckpt, like=state)
        loader.load_state_dict(state.pop("data"))
        say(f"resumed from {ckpt} at step {state['step']} on {procs} process(es)")
    else:
        say(f"starting on {procs} process(es)")
    step_fn = nb.compile(train_step)
    params, opt, key, step = state["params"], state["opt"], state["key"], state["step"]
    losses = []
    batches = iter(loader)
    while step < steps:
        try:
            xb, yb = next(batches)
        except StopIteration:  # the next epoch (a new order)
            batches = iter(loader)
            continue
        # a little input noise from the run's key: resumed runs must draw the same
        key, sub = nb.random.split(key)
        noise = nb.random.normal(sub, (batch, D_IN)) * 0.01
        xs = nb.distributed.from_process_local(xb, mesh, P("dp"))
        ys = nb.distributed.from_process_local(yb, mesh, P("dp"))
        xs = xs + nb.shard(noise, mesh, P("dp"))
        loss, params, opt = step_fn(params, opt, xs, ys)
        step += 1
        if rank == 0:  # the loss comes back replicated: no other process is needed
            losses.append(loss.item())
            say(f"step {step:3d} loss {losses[-1]:.5f}")
        if step % every == 0:
            state = {"params": params, "opt": opt, "key": key, "step": step}
            nb.nn.save_sharded({**state, "data": loader.state_dict()}, ckpt)
        if kill_at is not None and step == kill_at and rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)
    final = {k: v.numpy() for k, v in params.items()}  # every process gathers
    if out is not None and rank == 0:
        np.savez(out, **final)
    return {"losses": losses, "params": final, "step": step}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ckpt", required=True, help="checkpoint folder (resumed if it exists)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--every", type=int, default=3, help="save every this many steps")
    ap.add_argument("--kill-at", type=int, default=None, help="SIGKILL process 0 after this step")
    ap.add_argument("--out", default=None, help="write the final parameters (.npz)")
    a = ap.parse_args()
    main(a.ckpt, a.steps, a.every, a.kill_at, a.out)
