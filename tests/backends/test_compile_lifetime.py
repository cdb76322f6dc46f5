"""Background MAX compiles end with the program that started them (by default), or finish
detached, one at a time per cache directory at the lowest priority (``NABLA_COMPILE_DETACH=1``).

Each script starts a background compile in a fresh cache directory (so it must really
compile) and exits as soon as the worker process runs: no test waits for a MAX compile.
The scripts run in a session of their own, so their process group is theirs alone and the
process table says what they left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("max.graph")

pytestmark = pytest.mark.max

ROOT = str(Path(__file__).resolve().parents[2])

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    import numpy as np
    import nabla as nb
    from nabla.core.config import CONFIG
    from nabla.backends.max import session

    CONFIG.auto_threshold = 1
    rows = int(sys.argv[3])
    x = nb.constant(np.arange(2 * rows, dtype=np.float32).reshape(rows, 2) * float(sys.argv[1]))
    with nb.backend("auto"):
        (nb.tanh(x * 3.0) + x).sum(axis=0).numpy()  # starts a background compile
    deadline = time.monotonic() + 60
    while not session._CHILDREN and time.monotonic() < deadline:
        time.sleep(0.001)
    print(next(iter(session._CHILDREN)), flush=True)
    if sys.argv[2] == "kill":  # no exit handler runs: the worker must notice by itself
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _env(cache: Path, **extra) -> dict:
    env = dict(os.environ, NABLA_CACHE_DIR=str(cache), NABLA_BACKGROUND_COMPILE="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def _run(cache: Path, scale: float, how: str, rows: int = 5, **extra) -> tuple[int, int, str, int]:
    """Run the script on a ``(rows, 2)`` value: ``(its pid, its return code, its stderr,
    the worker's pid)``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(scale), how, str(rows)],
        env=_env(cache, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: pgid == its pid
    )
    out, err = proc.communicate(timeout=300)
    assert out.strip(), err
    return proc.pid, proc.returncode, err, int(out.split()[-1])


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (None: no such process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _group(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and fields[0] != "Z" and int(fields[2]) == pgid:
                out.append(int(entry.name))
    return out


def _gone(pgid: int, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _group(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table in /proc")
@pytest.mark.parametrize("how", ["exit", "kill"])
def test_a_background_compile_ends_with_its_program(tmp_path, how):
    # "exit": the exit handler ends the worker; "kill": the program dies by SIGKILL, no
    # handler runs, and the worker sees its parent gone (parent-death signal, getppid)
    pid, rc, err, worker = _run(tmp_path, 1.0, how)
    if how == "exit":
        assert rc == 0, err
        assert "Traceback" not in err, err
    else:
        assert rc == -signal.SIGKILL, err
    left = _gone(pid)
    assert not left, f"processes left behind in the program's process group: {left}"
    assert _stat(worker) is None or _stat(worker)[0] == "Z"
    assert not list(tmp_path.glob("*.mef"))  # it was cut short: nothing half-written kept
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table in /proc")
def test_a_detached_compile_outlives_its_program_one_at_a_time(tmp_path):
    workers = []
    # a shape of this run's own: MAX's own cache (beside nabla's, which tmp_path makes
    # fresh) holds no model of it, so the first compile takes long enough for the second
    # to find it running (a model MAX had cached compiled in ~2 s, before the second began)
    rows = 6 + time.time_ns() % 100_003
    try:
        for scale in (1.0, 2.0):  # the same program twice, one cache directory
            _, rc, err, worker = _run(tmp_path, scale, "exit", rows, NABLA_COMPILE_DETACH="1")
            assert rc == 0, err
            workers.append(worker)
        for worker in workers:
            fields = _stat(worker)
            assert fields is not None and fields[0] != "Z", "a detached compile should run on"
            assert int(fields[3]) == worker  # its own session: our signals do not reach it
        log = tmp_path / "compile.log"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = log.read_text() if log.exists() else ""
            if "started" in text and "waiting for another" in text:
                break
            time.sleep(0.1)
        assert "at the lowest priority (nice 19)" in text, text
        assert text.count("started") == 1, text  # the second waits for the first
        assert f"pid {workers[1]}: waiting for another" in text or (
            f"pid {workers[0]}: waiting for another" in text
        ), text
        assert int(_stat(workers[0])[16]) == 19  # the nice value in the process table
    finally:
        for worker in workers:  # not wait for two MAX compiles here
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                pass
