"""Timing shared by the benchmark scripts: median wall time of repeated calls, the best of
rounds that time several callables in turn, and rows timed each in a process of its own."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time


def call_seconds(fn, reps: int = 30, warmup: int = 3) -> list:
    """Seconds of each of ``reps`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def median_seconds(fn, reps: int = 30, warmup: int = 3) -> float:
    """Median seconds of ``reps`` calls of ``fn`` after ``warmup`` untimed calls."""
    return statistics.median(call_seconds(fn, reps, warmup))


def median_ms(fn, reps: int = 30, warmup: int = 3) -> float:
    """Like :func:`median_seconds`, in milliseconds."""
    return 1e3 * median_seconds(fn, reps, warmup)


def best_of_rounds_ms(fns: dict, reps: int, rounds: int = 3, warmup: int = 3, before=None) -> dict:
    """Per entry of ``fns``, the lowest over ``rounds`` of the median ms of ``reps`` calls.
    Each round times every entry in turn, so a drift in a shared machine's speed reaches
    them all alike. ``before(fn)``, when given, runs before each entry's block (after it,
    ``warmup`` untimed calls)."""
    best: dict = {}
    for _ in range(rounds):
        for name, fn in fns.items():
            if before is not None:
                before(fn)
            ms = median_ms(fn, reps, warmup)
            best[name] = min(ms, best.get(name, ms))
    return best


def blas_kernel() -> str:
    """The BLAS NumPy's products run on, as a header line: library, the kernel family it
    chose for this CPU, and the environment variables that force one. A GEMM-bound row
    moves ~1.7x with the kernel (AVX2 ``Haswell`` against AVX-512 ``SkylakeX`` on this
    machine's CPU; ``benchmarks/README.md``), so every table says which one ran."""
    forced = [
        f"{var}={os.environ[var]}"
        for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS")
        if var in os.environ
    ]
    try:
        import threadpoolctl  # noqa: PLC0415 - optional: the max extra brings it

        info = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    except ImportError:
        info = []
    kernel = (
        ", ".join(f"{i['internal_api']} {i.get('architecture', '?')}" for i in info)
        if info
        else "unknown (no threadpoolctl)"
    )
    return f"BLAS: {kernel}" + (f" ({', '.join(forced)})" if forced else "")


# ----------------------------------------------------------------------------- isolated rows
# Two libraries timed in one process share its cores with each other's thread pools: after
# its GEMMs OpenBLAS's helper threads keep polling for work, and so do OpenMP's after
# PyTorch's parallel loops. On 2 cores, calls alternating in one process slowed PyTorch's
# LSTM step from 37-42 ms to 77 ms, and each CNN step taken right after the other library's
# ran 1.5-2.8x its time in a block of its own. So a row that compares libraries runs each
# in a process of its own (a worker, ``serve``), timed in turn with the others idle.
_MARK = "@@bench "


def serve(step, after=None) -> None:
    """A worker of :func:`isolated_rounds_ms`: reports ``step()``'s first value (a float,
    for the rows' agreement check) and that first call's seconds, then times a block of
    calls per request read from stdin (the count of calls), reporting their median and
    fastest seconds. ``after``, when given, returns a line printed once the requests end."""
    t0 = time.perf_counter()
    value = float(step())
    _send({"value": value, "first_s": time.perf_counter() - t0})
    for line in sys.stdin:
        times = call_seconds(step, int(line), warmup=3)
        _send({"median": statistics.median(times), "best": min(times)})
    if after is not None:
        print(after(), flush=True)


def _send(obj) -> None:
    print(_MARK + json.dumps(obj), flush=True)


def _receive(proc):
    """The worker's next report (a dict), or None when it ended without one; its other
    output is passed through."""
    for line in proc.stdout:
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK) :])
        print(line, end="")
    return None


def isolated_rounds_ms(workers: dict, reps: int, rounds: int = 3, pause: float = 0.5):
    """``(firsts, ms)``: per row of ``workers`` (name -> the argv of a Python script that
    builds the row's step and calls :func:`serve`), its first report (``value``, and
    ``first_s``: the first call's seconds) and the lowest over ``rounds`` of the median ms
    of ``reps`` calls. Every worker is built first; then each round times the rows in turn,
    one worker at a time, after ``pause`` seconds in which none runs (the last one's helper
    threads stop polling). A row whose worker ended without a report (its library cannot
    build the step here) is left out of both."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for name, argv in workers.items()
    }
    firsts, ms = {}, {}
    try:
        for name, proc in procs.items():
            got = _receive(proc)
            if got is not None:
                firsts[name] = got
        for _ in range(rounds):
            for name in firsts:
                time.sleep(pause)
                procs[name].stdin.write(f"{reps}\n")
                procs[name].stdin.flush()
                got = _receive(procs[name])
                if got is None:
                    raise SystemExit(f"{name}: its worker ended while being timed")
                ms[name] = min(1e3 * got["median"], ms.get(name, math.inf))
    finally:
        for proc in procs.values():
            proc.stdin.close()
        for proc in procs.values():
            for line in proc.stdout:  # (what a worker prints at its end)
                print(line, end="")
            proc.wait()
    return firsts, ms
