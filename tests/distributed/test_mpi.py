"""The same SPMD programs on several processes over MPI: each test launches ``mpiexec -n 2``
or ``-n 4`` on ``mpi_worker.py`` (or on the sharded op suite) and checks every process ended
well, or, for the failure scenarios, that every process ended in bounded time with a clear
message. Skipped, with the reason, only when the ``mpi`` extra is not installed."""

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nabla.backends import max_available

HERE = Path(__file__).parent
_BIN = os.path.dirname(sys.executable)
MPIEXEC = shutil.which("mpiexec", path=_BIN + os.pathsep + os.environ.get("PATH", ""))

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or MPIEXEC is None,
    reason='needs the mpi extra (pip install -e ".[mpi]": mpi4py and mpich, which brings mpiexec)',
)


def launch(n: int, args: list, timeout: float = 240, env: dict | None = None):
    # the checkout these tests belong to first (not an installed nabla), then the workers
    path = os.pathsep.join([str(HERE.parents[1]), str(HERE)])
    full_env = dict(os.environ, PYTHONPATH=path, NABLA_BACKEND="numpy")
    full_env.update(env or {})
    start = time.monotonic()
    proc = subprocess.run(
        [MPIEXEC, "-n", str(n), sys.executable, *args],
        cwd=HERE,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, time.monotonic() - start


def run_scenario(n: int, name: str, **kw):
    return launch(n, [str(HERE / "mpi_worker.py"), *name.split()], **kw)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize(
    "scenario",
    [
        "dp_train",
        "tensor_parallel",
        "collectives",
        "process_local",
        "eager_lane",
        "eager_memo",
        "exchanges",
        "coalesced",
    ],
)
def test_scenario_on_every_process(scenario, n):
    proc, _ = run_scenario(n, scenario)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(n):
        assert f"OK {scenario} {rank}/{n}" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("scenario", ["collectives", "eager_lane", "exchanges"])
def test_scenario_over_mpi_alone(scenario):
    """The same collectives with the shared-memory exchange off (``NABLA_MPI_SHARED=0``,
    as between machines): agreements and data travel by MPI calls."""
    proc, _ = run_scenario(2, scenario, env={"NABLA_MPI_SHARED": "0"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(2):
        assert f"OK {scenario} {rank}/2" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("scenario", ["collectives", "exchanges"])
def test_scenario_gathering_through_the_slots(scenario):
    """The same collectives with the single-copy reads off (``NABLA_MPI_SINGLE_COPY=0``):
    gathers past the agreement's slot go through the shared slots in pieces, and past
    4 MiB by MPI's ``Allgather``."""
    proc, _ = run_scenario(2, scenario, env={"NABLA_MPI_SINGLE_COPY": "0"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(2):
        assert f"OK {scenario} {rank}/2" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.max
def test_max_runs_the_segments_between_collectives():
    if not max_available():
        pytest.skip("needs the MAX backend (the max extra)")
    proc, _ = run_scenario(2, "max_segments", timeout=900, env={"NABLA_MPI_TIMEOUT": "600"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK max_segments 0/2" in proc.stdout and "OK max_segments 1/2" in proc.stdout


def test_the_example_trains_across_two_processes():
    example = HERE.parents[1] / "examples" / "distributed_train.py"
    proc, _ = launch(2, [str(example)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 process(es) x 2 local devices" in proc.stdout
    assert "collectives in one step: all_reduce" in proc.stdout
    assert "matches the single-device run: True" in proc.stdout


def run_suite(n: int, suites: list, env: dict | None = None):
    args = ["-m", "pytest", *suites, "-o", "addopts=", "-q", "-x", "-p", "mpi_plugin"]
    env = {"NABLA_MPI_TIMEOUT": "120", **(env or {})}
    proc, _ = launch(n, args + ["-p", "no:cacheprovider"], timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.count(" passed") == n and "failed" not in proc.stdout, proc.stdout[-2000:]


def test_the_sharding_suite_across_two_processes():
    """All of tests/sharding (every op forward and under grad on several meshes, the
    collectives, shard_map with all_reduce and ppermute rings, GPipe and 1F1B pipelines,
    the cost report and the errors), with every mesh's devices dealt to 2 processes.

    Under ``auto`` every program that communicates is cut into segments at its collectives
    (the path MAX takes); the threshold keeps every segment on the interpreter here."""
    run_suite(2, ["../sharding"], {"NABLA_BACKEND": "auto", "NABLA_AUTO_THRESHOLD": "1000000"})


def test_shard_map_and_pipelines_across_four_processes():
    run_suite(4, ["../sharding/test_shard_map.py", "../sharding/test_pipeline.py"])


def test_mismatched_programs_are_an_error_on_every_process():
    proc, _ = run_scenario(2, "mismatch", env={"NABLA_MPI_TIMEOUT": "30"})
    assert proc.returncode != 0
    assert "DistributedError" in proc.stderr
    assert "every process must run the same program" in proc.stderr
    # the runtime's program describes itself: the first op whose shapes differ is named
    assert "the first difference is op 0: process" in proc.stderr, proc.stderr
    assert "mesh_shard((8, 2) float32)" in proc.stderr and "((16, 2) float32)" in proc.stderr


def test_mismatched_reductions_are_an_error_on_every_process():
    proc, _ = run_scenario(2, "mismatch_kind", env={"NABLA_MPI_TIMEOUT": "30"})
    assert proc.returncode != 0
    assert "every process must run the same program" in proc.stderr
    assert "the first difference is op" in proc.stderr, proc.stderr


def test_a_small_and_a_large_collective_are_an_error_on_every_process():
    """One process's data travel inside the agreement, the other's after it: the exchanges
    still match, so the mismatch is an error at once, not a hang or a truncated message."""
    proc, took = run_scenario(2, "mismatch_sizes", env={"NABLA_MPI_TIMEOUT": "60"})
    assert proc.returncode != 0
    assert "every process must run the same program" in proc.stderr, proc.stderr
    assert "(1, 1, 4)" in proc.stderr and "(1, 1, 8192)" in proc.stderr, proc.stderr
    assert took < 50, took


@pytest.mark.parametrize("shared", ["1", "0"])
@pytest.mark.parametrize("what", ["sizes", "ops"])
def test_mismatched_eager_collectives_on_their_buffers_are_an_error_on_every_process(what, shared):
    """An eager collective of a realized value sends its data in its agreement (shared
    memory) or posts its data collective beside it (MPI alone): another size, or another
    op, on the same group is still an error at once on every process, and the mismatched
    data are never used."""
    env = {"NABLA_MPI_TIMEOUT": "60", "NABLA_MPI_SHARED": shared}
    proc, took = run_scenario(2, f"mismatch_eager_{what}", env=env)
    assert proc.returncode != 0
    assert "every process must run the same program" in proc.stderr, proc.stderr
    assert "the first difference is op 0" in proc.stderr, proc.stderr
    if what == "sizes":
        assert "(1, 1, 4)" in proc.stderr and "(1, 1, 8192)" in proc.stderr, proc.stderr
    else:
        assert "mesh_gather" in proc.stderr and "mesh_reduce" in proc.stderr, proc.stderr
    assert took < 50, took


def test_coalesced_groups_run_as_cuts_of_a_segmented_program():
    """Under ``auto`` a program across processes is cut at its collectives
    (``Segments``): a group of collectives is one cut, run by the MPI lowering between
    the compiled segments, with the same values as each collective alone."""
    env = {"NABLA_BACKEND": "auto", "NABLA_AUTO_THRESHOLD": "1000000"}
    proc, _ = run_scenario(2, "coalesced", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(2):
        assert f"OK coalesced {rank}/2" in proc.stdout, proc.stdout + proc.stderr


def test_mismatched_coalesced_groups_are_an_error_on_every_process():
    """A program of small collectives only is one group whose shared exchange is also its
    agreement: a process there while another is elsewhere (tracing the call again for
    another shape) fails at once, naming the group's parts, and so does the other."""
    proc, took = run_scenario(2, "mismatch_coalesced", env={"NABLA_MPI_TIMEOUT": "60"})
    assert proc.returncode != 0
    assert proc.stderr.count("every process must run the same program") >= 2, proc.stderr
    assert "mesh_coalesced: mesh_gather" in proc.stderr, proc.stderr
    assert "((1, 1, 5), 'float32')" in proc.stderr, proc.stderr
    assert took < 50, took


def test_a_process_that_left_a_program_early_is_an_error_not_wrong_data():
    proc, took = run_scenario(2, "left_a_program", env={"NABLA_MPI_TIMEOUT": "60"})
    assert proc.returncode != 0
    assert "a collective inside an agreed program" in proc.stderr, proc.stderr
    assert "the next step" in proc.stderr, proc.stderr
    assert took < 50, took


def test_a_read_alone_beside_an_eager_collective_fails_at_once():
    proc, took = run_scenario(2, "read_alone_beside_eager", env={"NABLA_MPI_TIMEOUT": "120"})
    assert proc.returncode != 0
    err = proc.stderr
    assert "read of a float32 value of shape (2,)" in err and "every process must read it" in err
    assert "mesh_reduce" in err, err
    assert took < 60, took


def test_a_bad_timeout_set_after_the_import_is_refused_by_initialize():
    """Checked when the setting is read (at import, and again by initialize), naming the
    variable and the value, not a raw float() error at the first collective."""
    code = (
        "import os, nabla as nb\n"
        "os.environ['NABLA_MPI_TIMEOUT'] = 'abc'\n"
        "nb.distributed.initialize()\n"
    )
    proc, _ = launch(2, ["-c", code], timeout=120)
    assert proc.returncode != 0
    assert "NABLA_MPI_TIMEOUT must be a number of seconds > 0 (e.g. 300), got 'abc'" in (
        proc.stderr
    ), proc.stderr


def test_mismatched_programs_name_the_first_op_that_differs_on_each_process():
    proc, _ = run_scenario(2, "mismatch_described", env={"NABLA_MPI_TIMEOUT": "30"})
    assert proc.returncode != 0
    assert (
        "the first difference is op 1: process 0 runs reduce_sum((8,) float32) -> () float32, "
        "process 1 runs reduce_sum((16,) float32) -> () float32" in proc.stderr
    ), proc.stderr


def test_first_difference_and_describe_program():
    from nabla.backends import mpi
    from nabla.core.dtypes import DType
    from nabla.core.ir import Instruction, Program, TensorSpec

    def program(n, op):
        spec = TensorSpec(DType.float32, (n,), None)
        red = Instruction(op, (0,), {"axes": (0,)}, (1,), ((DType.float32, ()),))
        return Program(None, (spec,), (red,), (1,), ((DType.float32, ()),))

    a, b = mpi.describe_program(program(8, "sum")), mpi.describe_program(program(16, "max"))
    assert a == ["sum((8,) float32) -> () float32 {'axes': (0,)}"]
    got = mpi.first_difference(1, [("p", a), ("q", b)])
    assert got == (
        "the first difference is op 0: process 1 runs max((16,) float32) -> () float32 "
        "{'axes': (0,)}, process 0 runs sum((8,) float32) -> () float32 {'axes': (0,)}"
    )
    assert "op 1: process 0 runs (no more ops)" in mpi.first_difference(0, [("p", a), ("q", a + a)])


def test_the_mesh_ops_that_exchange_nothing_are_those_mpi_runs_without_agreeing():
    """The straight-line executor lowers ``lowerings._OWN_BLOCKS`` on a mesh spanning
    processes: they must be exactly the MPI lowerings registered without an agreement
    (every other one communicates)."""
    from nabla.backends import mpi
    from nabla.backends.numpy import lowerings

    local = {name for name in mpi.LOWERINGS if not mpi.agrees_itself(name)}
    assert local == lowerings._OWN_BLOCKS
    assert not any(lowerings.exchanges_data(op, {"mesh": None}) for op in local)
    assert all(lowerings.exchanges_data(op, {"mesh": None}) for op in mpi.LOWERINGS.keys() - local)


def test_receive_buffers_start_half_a_page_from_their_send_buffer():
    """4K aliasing: MPI's copy and reduction loops ran at half speed when a receive buffer
    started a few bytes after its send buffer modulo 4 KiB. From 16 KiB up a receive buffer
    starts 2 KiB away, recycled from the pool once its last user is gone."""
    import numpy as np

    from nabla.backends import mpi

    for nbytes, offset in ((1 << 14, 0), (1 << 16, 16), (1 << 18, 4000)):
        raw = np.zeros(nbytes + 4096, np.uint8)
        send = raw[offset : offset + nbytes].view(np.float32)
        out = mpi._out_buffer((1, nbytes // 4), np.float32, send)
        assert out.shape == (1, nbytes // 4) and out.dtype == np.float32
        assert (out.ctypes.data - send.ctypes.data) % 4096 == 2048
        assert out.flags.c_contiguous and out.flags.writeable and out.flags.aligned
        if nbytes >= 1 << 16:  # pooled: the same memory once ``out`` is gone
            first = out.ctypes.data
            del out
            assert mpi._out_buffer((1, nbytes // 4), np.float32, send).ctypes.data == first
    small = mpi._out_buffer((4,), np.float64)
    assert small.shape == (4,) and small.dtype == np.float64


def test_the_pool_keeps_what_a_program_held_at_once(monkeypatch):
    """Outside a program the pool keeps its fixed bound (here 2 buffers); a program that
    holds more results at once raises the bound to that, so its next call reuses every
    buffer instead of faulting fresh memory in; results taken and dropped one after
    another raise nothing; never past the ceiling."""
    from nabla.backends import mpi

    size = 1 << 16
    pool = mpi._BufferPool()
    pool.count, pool.nbytes = 2, 8 * size

    def call(k):
        return [pool.take(size) for _ in range(k)]

    first = call(4)  # outside a program: only the 2 newest are kept
    addresses = [a for _, a in first]
    del first
    assert len(pool.entries) == 2 and pool.held == 2 * size
    assert sorted(a for _, a in call(4)[:2]) == sorted(addresses[2:])

    monkeypatch.setattr(mpi._STATE, "depth", 1)
    for _ in range(20):  # one at a time, each dropped: one buffer in use at most
        pool.take(size)
    assert pool.count == 2
    first = call(5)
    addresses = sorted(a for _, a in first)
    del first
    assert (pool.count, len(pool.entries)) == (5, 5)
    assert sorted(a for _, a in call(5)) == addresses  # every buffer reused

    monkeypatch.setattr(mpi, "_POOL_CEILING_BYTES", 8 * size)
    held = call(12)
    assert pool.nbytes == 8 * size and pool.held <= 8 * size and len(held) == 12


def test_a_process_that_leaves_inside_a_collective_is_bounded_too():
    proc, took = run_scenario(2, "rank_leaves_midway", env={"NABLA_MPI_TIMEOUT": "3"})
    assert proc.returncode != 0
    assert "waited 3 s at collective an Allreduce the others never join" in proc.stderr
    assert took < 60, took


def test_an_exception_on_one_process_ends_every_process():
    proc, took = run_scenario(2, "rank_fails", env={"NABLA_MPI_TIMEOUT": "60"})
    assert proc.returncode != 0
    assert "process 1 fails on purpose" in proc.stderr
    assert "aborting every process" in proc.stderr
    assert took < 30, took  # MPI_Abort, not the timeout


def test_a_process_that_leaves_makes_the_others_fail_at_once():
    proc, took = run_scenario(2, "rank_leaves", env={"NABLA_MPI_TIMEOUT": "120"})
    assert proc.returncode != 0
    assert "a process finished the program while the others still wait" in proc.stderr
    assert took < 60, took  # not the timeout


@pytest.mark.parametrize("n", [2, 4])
def test_reads_that_need_no_other_process_finish(n):
    """``if rank == 0: print(loss.item())`` in a compiled data-parallel loop (the loss comes
    back replicated), a gathered value read again on one process, a value held whole read
    locally, and a process that waits for a late peer without spinning on the CPU."""
    proc, took = run_scenario(n, "reads", env={"NABLA_MPI_TIMEOUT": "120"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "step 2 loss" in proc.stdout and f"OK reads {n - 1}/{n}" in proc.stdout
    assert took < 60, took


def test_a_value_read_on_one_process_alone_fails_at_once_naming_it():
    proc, took = run_scenario(2, "read_alone", env={"NABLA_MPI_TIMEOUT": "120"})
    assert proc.returncode != 0
    err = proc.stderr
    assert "read of a float32 value of shape (2,)" in err, err
    assert "all_reduce over ('dp',)" in err and "every process must read it" in err, err
    assert "addressable_shards" in err
    assert took < 60, took


def test_a_lazy_value_computed_on_one_process_alone_fails_at_once_saying_what_to_do():
    """A replicated value still lazy is computed by a program every process must run (as a
    jitted computation on a global array in JAX): read on process 0 alone, it fails at
    once, and the error says to realize it on every process first."""
    proc, took = run_scenario(2, "read_lazy_alone", env={"NABLA_MPI_TIMEOUT": "120"})
    assert proc.returncode != 0
    assert "nb.realize(x) on every process" in proc.stderr, proc.stderr
    assert took < 60, took


@pytest.mark.parametrize("what", ["reads", "program"])
def test_values_taken_in_another_order_on_one_process_are_an_error_not_mixed(what):
    """The agreement names the values a program reads (the agreed program that made each),
    not only its ops: two partial sums read, or combined, in the other order on process 1
    fail on every process, naming both."""
    proc, took = run_scenario(2, f"other_order {what}", env={"NABLA_MPI_TIMEOUT": "120"})
    assert proc.returncode != 0, proc.stdout
    assert "DistributedError" in proc.stderr, proc.stderr
    err = proc.stderr
    assert "#1.0" in err and "#1.1" in err, err  # the two values, named alike everywhere
    assert "made by program #" in err or "the same ops on other values" in err, err
    assert took < 60, took


def test_sharded_checkpoint_saved_on_two_processes_loads_on_one_two_and_four(tmp_path):
    """Save on 2 processes (tensors split over one mesh axis, over two, a dim over two axes
    at once, a partial sum, replicated and unsharded values, scalars) and load it into
    other layouts on 2; a second save killed (SIGKILL on process 1) after writing its
    blocks leaves the first checkpoint loadable, on 4 and on 1 processes; the next save
    (on 1 process, a simulated mesh) removes the leftovers. Each launch also checks the
    DataLoader's global batches on its process count."""
    directory = str(tmp_path / "ckpt")
    proc, _ = run_scenario(2, f"ckpt_save {directory}")
    assert "OK saved 0/2" in proc.stdout and "OK saved 1/2" in proc.stdout, proc.stderr
    assert proc.returncode != 0  # process 1 was killed during the second save
    for n in (4, 1):
        proc, _ = run_scenario(n, f"ckpt_load {directory}")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"OK ckpt_load {n - 1}/{n}" in proc.stdout


def test_training_killed_on_two_processes_resumes_on_four_and_on_one(tmp_path):
    """examples/resume_training.py: DP x TP training on 2 processes, killed (SIGKILL) at
    step 7 with its last checkpoint at step 6, resumed from that checkpoint on 4 processes
    and, separately, on 1: both end with the parameters of an uninterrupted run, bit for
    bit (every reduction has two terms, so its order cannot change the sum)."""
    import numpy as np

    example = str(HERE.parents[1] / "examples" / "resume_training.py")

    def run(n, ckpt, *extra):
        return launch(n, [example, "--ckpt", str(tmp_path / ckpt), *extra])[0]

    ref = run(1, "ref", "--out", str(tmp_path / "ref.npz"))
    assert ref.returncode == 0, ref.stdout + ref.stderr
    killed = run(2, "ck", "--kill-at", "7")
    assert killed.returncode != 0 and "step   7 loss" in killed.stdout, killed.stderr
    assert "step   8" not in killed.stdout
    shutil.copytree(tmp_path / "ck", tmp_path / "ck1")
    want = np.load(tmp_path / "ref.npz")
    for n, ckpt in ((4, "ck"), (1, "ck1")):
        proc = run(n, ckpt, "--out", str(tmp_path / f"p{n}.npz"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"resumed from {tmp_path / ckpt} at step 6 on {n} process(es)" in proc.stdout
        got = np.load(tmp_path / f"p{n}.npz")
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} on {n}")
