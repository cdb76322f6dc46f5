"""Collectives and data-parallel training across processes over MPI (``nb.distributed``).

1. ``all_reduce`` bandwidth, 1 KiB to 64 MiB of float32 per process: ``nb.all_reduce`` of a
   tensor sharded one block per process (building the lazy graph, agreeing on the program
   and the collective, realizing), against raw ``mpi4py`` ``Allreduce`` on the same
   buffers. Raw MPI is the floor; the ratio is raw time / nabla time (1.0 = no overhead).
2. A data-parallel MLP step (784-512-10, batch 256 split over the processes, SGD) on 1, 2
   and 4 processes: ms per step, checked first against the single-process step.

Processes share this machine's cores, so more processes do not mean more compute here; the
figures show the framework's overhead over the transport, not a scaling curve.

Run: ``python benchmarks/bench_distributed.py`` (it launches ``mpiexec`` itself; about a
minute; ``--quick``: fewer sizes and steps). Needs the ``mpi`` extra.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from _timing import median_seconds  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import nabla as nb  # noqa: E402
from nabla import P  # noqa: E402


def worker_allreduce(quick: bool):
    from mpi4py import MPI  # noqa: PLC0415 - the bench's own reference

    nb.distributed.initialize()
    comm = MPI.COMM_WORLD
    n = nb.distributed.process_count()
    mesh = nb.DeviceMesh("procs", (n,), ("p",))
    sizes = [1 << 10, 1 << 16, 1 << 20, 1 << 26] if quick else [1 << k for k in range(10, 27, 2)]
    rows = []
    for nbytes in sizes:
        count = nbytes // 4
        local = np.full(count, comm.Get_rank() + 1, dtype=np.float32)
        x = nb.distributed.from_process_local(local, mesh, P("p"))
        out = np.empty_like(local)
        repeat = 5 if nbytes >= 1 << 24 else 30

        def raw():
            comm.Allreduce(local, out, op=MPI.SUM)

        def ours():
            y = nb.all_reduce(x, "sum", axes="p")
            y.realize()
            return y

        got = ours().addressable_shards[0].data
        assert np.allclose(got, n * (n + 1) / 2), "all_reduce is wrong"
        comm.Barrier()
        t_raw = median_seconds(raw, repeat, warmup=1)
        comm.Barrier()
        t_ours = median_seconds(ours, repeat, warmup=1)
        rows.append((nbytes, t_raw, t_ours))
    if comm.Get_rank() == 0:
        print(f"all_reduce over {n} processes (float32, median):")
        print(
            f"{'bytes':>10} {'mpi4py ms':>10} {'nabla ms':>10} {'GB/s nabla':>11} {'raw/nabla':>10}"
        )
        for nbytes, t_raw, t_ours in rows:
            print(
                f"{nbytes:>10} {t_raw * 1e3:>10.3f} {t_ours * 1e3:>10.3f} "
                f"{nbytes / t_ours / 1e9:>11.2f} {t_raw / t_ours:>10.2f}"
            )


def _mlp(params, x, y):
    h = nb.relu(x @ params["w1"] + params["b1"])
    return nb.mean((h @ params["w2"] - y) ** 2)


def _step(params, x, y):
    loss, g = nb.value_and_grad(_mlp)(params, x, y)
    return loss, {k: params[k] - 0.01 * g[k] for k in params}


def worker_dp(quick: bool):
    nb.distributed.initialize()
    n = nb.distributed.process_count()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 784)).astype(np.float32)
    y = rng.standard_normal((256, 10)).astype(np.float32)
    init = {
        "w1": (rng.standard_normal((784, 512)) * 0.03).astype(np.float32),
        "b1": np.zeros(512, np.float32),
        "w2": (rng.standard_normal((512, 10)) * 0.03).astype(np.float32),
    }
    want, _ = _step({k: nb.constant(v) for k, v in init.items()}, nb.constant(x), nb.constant(y))
    mesh = nb.DeviceMesh("dp", (n,), ("dp",))
    params = {k: nb.shard(v, mesh, P()) for k, v in init.items()}
    xs, ys = nb.shard(x, mesh, P("dp")), nb.shard(y, mesh, P("dp"))
    step = nb.compile(_step)
    loss, _ = step(params, xs, ys)
    assert abs(loss.item() - want.item()) < 1e-4 * abs(want.item()), "dp step differs"

    def one():
        loss, new = step(params, xs, ys)
        nb.realize(loss, *new.values())

    t = median_seconds(one, 5 if quick else 20, warmup=1)
    if nb.distributed.process_index() == 0:
        print(f"dp_step processes={n} ms={t * 1e3:.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", choices=["allreduce", "dp"])
    args = ap.parse_args()
    if args.worker == "allreduce":
        return worker_allreduce(args.quick)
    if args.worker == "dp":
        return worker_dp(args.quick)
    bindir = os.path.dirname(sys.executable)
    mpiexec = shutil.which("mpiexec", path=bindir + os.pathsep + os.environ.get("PATH", ""))
    if mpiexec is None:
        sys.exit('needs mpiexec: pip install -e ".[mpi]"')
    env = dict(os.environ, NABLA_BACKEND="numpy")
    me = [sys.executable, os.path.abspath(__file__)] + (["--quick"] if args.quick else [])
    subprocess.run([mpiexec, "-n", "2", *me, "--worker", "allreduce"], check=True, env=env)
    print("\ndata-parallel MLP step (784-512-10, batch 256, compiled), same machine:")
    for n in (1, 2, 4):
        subprocess.run([mpiexec, "-n", str(n), *me, "--worker", "dp"], check=True, env=env)


if __name__ == "__main__":
    main()
