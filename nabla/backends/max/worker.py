"""The process a background compile runs in: ``python -m nabla.backends.max.worker``.

It reads a ``Job`` pickled on stdin, compiles the program with MAX and stores the model in
the disk cache (``session.make``: under the entry's lock, so a concurrent process compiles
nothing twice), then writes ``("ok", counters)`` or ``("error", exception)`` pickled to
stdout, where ``counters`` are the backend counters the work moved. The parent loads the
stored model in milliseconds.

Compiling in a child process is what lets the parent exit at once (a thread inside MAX
cannot be stopped, and MAX aborts a process that finalizes under it). By default the worker
ends with its parent: it sits in the parent's process group, ignores the terminal's Ctrl-C
(the parent decides), and a watchdog thread ends it when the parent is gone (the parent's
exit handler sends SIGTERM; on Linux the kernel sends it too when the parent dies,
``PR_SET_PDEATHSIG``; elsewhere ``getppid`` changing says so). A compile that has finished
is stored before the worker exits, so its work is kept; one cut short leaves nothing
behind and compiles again, from the start, the next time the program is hot.

With ``detach`` (``NABLA_COMPILE_DETACH=1``) the worker runs in its own session and
finishes after its parent is gone, at the lowest priority, one at a time per cache
directory (``compile.lock`` there), logging what it does to ``compile.log`` there.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import pickle
import select
import signal
import sys
import threading
import time
from typing import NamedTuple

DIR_LOCK = "compile.lock"
DIR_LOG = "compile.log"
# how often the watchdog checks that the parent is alive where no signal says it
POLL_S = 0.2


class Job(NamedTuple):
    """What the parent hands a worker."""

    program: object
    devices: tuple
    debug: bool
    parent: int  # the parent's pid: the watchdog's reference
    detach: bool  # finish after the parent exits (see the module docstring)


_STORING = threading.Event()  # set while a compiled model is being written to the cache


def _die_with_parent(parent: int) -> None:
    """Exit as soon as ``parent`` is gone, unless a compiled model is being stored (then
    once it is): on SIGTERM/SIGHUP (the parent's exit handler, the kernel's parent-death
    signal, a kill of the process group) or when the parent pid changes."""
    rd, wr = os.pipe()
    os.set_blocking(wr, False)
    # the handlers themselves run only when the main thread leaves MAX's compile (which
    # holds it for tens of seconds); the wake-up byte reaches the watchdog at once
    signal.set_wakeup_fd(wr, warn_on_full_buffer=False)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the parent
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG

    def watch():
        while True:
            ready, _, _ = select.select([rd], [], [], POLL_S)
            if ready or os.getppid() != parent:
                break
        while _STORING.is_set():  # a finished model is kept: let its write complete
            time.sleep(0.01)
        os._exit(0)  # no finalization: MAX's threads may still run

    threading.Thread(target=watch, name="nabla-worker-watchdog", daemon=True).start()
    if os.getppid() != parent:  # the parent died before the watchdog was in place
        os._exit(0)


class _DirLog:
    """``compile.log`` in the cache directory: a line per event of a detached compile."""

    def __init__(self, directory):
        self.path = None if directory is None else os.path.join(directory, DIR_LOG)

    def __call__(self, message: str) -> None:
        if self.path is None:
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError), open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{stamp} pid {os.getpid()}: {message}\n")


@contextlib.contextmanager
def _one_per_directory(directory, log):
    """Hold the cache directory's compile lock (waiting for it): detached compiles run
    one at a time there."""
    if directory is None:
        yield
        return
    try:
        fd = os.open(os.path.join(directory, DIR_LOCK), os.O_CREAT | os.O_RDWR, 0o600)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            log("waiting for another detached compile of this cache directory")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def main() -> None:
    job: Job = pickle.load(sys.stdin.buffer)
    if job.detach:
        with contextlib.suppress(OSError):
            os.nice(19)  # the lowest priority: whatever runs next is not slowed
    else:
        _die_with_parent(job.parent)
        # it yields the cores to the process it serves, whose interpreter keeps running the
        # calls meanwhile (at equal priority its threads were slowed ~20x)
        with contextlib.suppress(OSError):
            os.nice(10)
    from . import cache, session  # noqa: PLC0415 - imports max; after reading the job
    from .disk import DISK  # noqa: PLC0415

    directory = DISK.directory() if job.detach else None
    log = _DirLog(directory)
    before = cache.stats()
    t0 = time.perf_counter()
    try:
        with _one_per_directory(directory, log):
            log(
                f"detached compile of a {job.program.num_ops}-op program started at the lowest "
                f"priority (nice {os.nice(0)}); its parent {job.parent} may exit"
            )
            session.make(job.program, job.devices, job.debug, storing=_STORING)
        after = cache.stats()
        result = ("ok", {k: after[k] - before[k] for k in after if after[k] != before[k]})
        log(f"finished in {time.perf_counter() - t0:.1f} s; the model is in the cache")
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        log(f"failed after {time.perf_counter() - t0:.1f} s: {type(e).__name__}: {e}")
        try:
            pickle.loads(pickle.dumps(e))
            result = ("error", e)
        except Exception:  # noqa: BLE001 - an exception that does not survive pickling
            result = ("error", RuntimeError(f"{type(e).__name__}: {e}"))
    try:
        sys.stdout.buffer.write(pickle.dumps(result))
        sys.stdout.flush()
    except OSError:
        pass  # the parent has exited: the model is in the disk cache all the same


if __name__ == "__main__":
    main()
