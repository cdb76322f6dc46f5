"""Timing shared by the benchmark scripts: median wall time of repeated calls, and the best
of rounds that time several callables in turn."""

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
