"""Thread-local transform state shared by ops and transforms.

- ``new_level()`` hands out unique, increasing transform level ids (vmap, jvp, grad all draw
  from one counter, so an inner transform's level is always larger than an outer one's).
- ``level_sizes`` maps a vmap level id to its batch size.
- ``active_vmap`` lists the vmap levels whose function is currently running.
- ``jvp_ceiling``: ops ignore tangents at levels >= the ceiling. A jvp rule for level L runs
  with the ceiling at L, so it sees only outer tangents (no perturbation confusion).
"""

from __future__ import annotations

import contextlib
import itertools
import threading

_counter = itertools.count(1)


class _State(threading.local):
    def __init__(self):
        self.active_vmap: list[int] = []
        self.jvp_ceiling: float = float("inf")
        self.tracing_depth = 0
        self.no_grad = False


STATE = _State()
level_sizes: dict[int, int] = {}


def new_level() -> int:
    return next(_counter)


@contextlib.contextmanager
def jvp_ceiling(level):
    old = STATE.jvp_ceiling
    STATE.jvp_ceiling = min(old, level)
    try:
        yield
    finally:
        STATE.jvp_ceiling = old


@contextlib.contextmanager
def vmap_level(level: int, size: int):
    level_sizes[level] = size
    STATE.active_vmap.append(level)
    try:
        yield level
    finally:
        STATE.active_vmap.pop()


@contextlib.contextmanager
def no_grad():
    """Ops inside record no history for ``Tensor.backward`` (like ``torch.no_grad``)."""
    old = STATE.no_grad
    STATE.no_grad = True
    try:
        yield
    finally:
        STATE.no_grad = old
