"""The process a background compile runs in: ``python -m nabla.backends.max.worker``.

It reads ``(program, devices, debug)`` pickled on stdin, compiles the program with MAX and
stores the model in the disk cache (``session.make``: under the entry's lock, so a
concurrent process compiles nothing twice), then writes ``("ok", counters)`` or
``("error", exception)`` pickled to stdout, where ``counters`` are the backend counters the
work moved. The parent loads the stored model in milliseconds.

Compiling in a child process is what lets the parent exit at once: a compile still running
then is left to finish on its own and cache its model for the next run, instead of holding
the exit (a thread inside MAX cannot be stopped, and MAX aborts a process that finalizes
under it).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys


def main() -> None:
    # a background compile yields the cores to the process it serves, whose interpreter keeps
    # running the calls meanwhile (at equal priority its threads were slowed ~20x)
    with contextlib.suppress(OSError):
        os.nice(10)
    program, devices, debug = pickle.load(sys.stdin.buffer)
    from . import cache, session  # noqa: PLC0415 - imports max; after reading the job

    before = cache.stats()
    try:
        session.make(program, devices, debug)
        after = cache.stats()
        result = ("ok", {k: after[k] - before[k] for k in after if after[k] != before[k]})
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
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
