"""Timing shared by the benchmark scripts: median wall time of repeated calls, and the best
of rounds that time several callables in turn."""

from __future__ import annotations

import os
import statistics
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
