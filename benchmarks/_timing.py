"""Timing shared by the benchmark scripts: median wall time of repeated calls."""

from __future__ import annotations

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
