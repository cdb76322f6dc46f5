"""Shared helpers for the registry-generated op suites."""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb


def to_nb(a):
    """Arrays become tensors; Python scalars, shapes and keys stay as they are."""
    return nb.constant(a) if isinstance(a, np.ndarray) else a


def as_list(out):
    return list(out) if isinstance(out, list | tuple) else [out]


def samples(entry, dtype, seed=0):
    return entry.samples(np.random.default_rng(seed), dtype)


def tol(entry, dtype):
    if dtype == "float64":
        return max(entry.atol * 1e-4, 1e-9), 1e-7
    if dtype in ("float16", "bfloat16"):
        return 1e-2, 1e-2
    return entry.atol, entry.rtol


def array_positions(sample, kinds="f"):
    return [
        i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray) and a.dtype.kind in kinds
    ]


def entry_params(entries, suite: str) -> list:
    """``entries`` as pytest params named after the op; an entry's expected failure in
    ``suite`` becomes a strict xfail (a fix that makes it pass fails the run)."""
    out = []
    for e in entries:
        marks = ()
        if suite in e.xfail:
            marks = pytest.mark.xfail(strict=True, reason=e.xfail[suite])
        out.append(pytest.param(e, id=e.name, marks=marks))
    return out
