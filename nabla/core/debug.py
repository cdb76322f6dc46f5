"""Finding the first NaN: the switches (``nb.debug_nans``, ``nb.debug_infs``) and the
user's call site each op remembers while one is on (``docs/debugging.md``).

While a switch is on, the op pipeline gives every node it emits a :class:`Site`: the
user's own line that called the op (the first frame outside the ``nabla`` package), or,
for an op a derivative rule emitted, the forward op whose rule it was and that op's line.
Every realized value is checked; when one holds a NaN (or an infinity, for
``debug_infs``) the program is run again one instruction at a time to find the op that
made it, and a ``FloatingPointError`` names it. With both switches off nothing is
recorded or checked.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
from dataclasses import dataclass

from .config import CONFIG

__all__ = ["Site", "debug_nans", "debug_infs", "checking", "user_site", "site_in_rule"]

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@dataclass(frozen=True, slots=True)
class Site:
    """Where an op was called: ``file``, ``line`` and ``function``; ``grad_of`` names the
    forward op whose derivative rule emitted it (None for a forward op), in which case the
    place is that forward op's call."""

    file: str
    line: int
    function: str
    grad_of: str | None = None

    @property
    def text(self) -> str:
        """The source line (read when a message needs it, not at every op)."""
        return linecache.getline(self.file, self.line).strip()

    def where(self) -> str:
        """``file:line in function``, then the line's source."""
        src = f": `{self.text}`" if self.text else ""
        return f"{self.file}:{self.line} in {self.function}{src}"


# The switches' two forms, as JAX's: the call (``nb.debug_nans(True)``) sets the process's
# setting (``CONFIG.debug_nans``), as ``jax.config.update`` does; a block (``with
# nb.debug_nans():``) sets only its own thread's, innermost block first, and other threads
# go on as they were. ``CONFIG.debug_values``, which every op reads, stays on while the
# process's setting is on or any thread has a block open; :func:`checking` gives a thread's
# own answer.
_local = threading.local()  # per thread and switch: the open blocks' flags, innermost last
_OPEN = [0]  # blocks open in any thread
_LOCK = threading.Lock()  # (``+= 1`` from two threads can lose one)


def checking() -> tuple[bool, bool]:
    """Whether NaNs and infinities are checked in this thread: its innermost open block's
    setting, else the process's."""
    nans = getattr(_local, "debug_nans", None)
    infs = getattr(_local, "debug_infs", None)
    return (
        nans[-1] if nans else CONFIG.debug_nans,
        infs[-1] if infs else CONFIG.debug_infs,
    )


class _Switch:
    """Sets the process's switch at the call (``nb.debug_nans(True)``); as a context manager
    (``with nb.debug_nans():``) it is this thread's setting for the block instead, and the
    process's comes back as it was."""

    _attr = ""

    def __init__(self, flag: bool = True):
        self._flag = bool(flag)
        self._previous = getattr(CONFIG, self._attr)
        _set(self._attr, self._flag)

    def __enter__(self):
        # this thread's block from here on, then the process's setting as before the call
        # (the flag is on in this thread throughout); put back only if it still holds this
        # call's value: another thread's block, opened meanwhile, saw this one's as its
        # previous and may have put the true one back already
        stack = _local.__dict__.setdefault(self._attr, [])
        stack.append(self._flag)
        with _LOCK:
            _OPEN[0] += 1
            if getattr(CONFIG, self._attr) == self._flag:
                _set(self._attr, self._previous)
        return self

    def __exit__(self, *exc) -> None:
        getattr(_local, self._attr).pop()
        with _LOCK:
            _OPEN[0] -= 1
        _set(self._attr, getattr(CONFIG, self._attr))


def _set(attr: str, flag: bool) -> None:
    setattr(CONFIG, attr, flag)
    CONFIG.debug_values = CONFIG.debug_nans or CONFIG.debug_infs or _OPEN[0] > 0


class debug_nans(_Switch):  # noqa: N801 - a switch read as a function, as torch.no_grad
    """Raise ``FloatingPointError`` when an op makes a NaN out of operands without one,
    naming the op and the user's line that called it (for a NaN made by a gradient: the
    forward op whose rule made it). ``nb.debug_nans(True)`` turns it on for the process,
    ``nb.debug_nans(False)`` off, ``with nb.debug_nans():`` for a block in this thread (as
    JAX's); the environment variable ``NABLA_DEBUG_NANS=1`` turns it on at import
    (``docs/debugging.md``).

    Args:
        flag: True (the default) turns the check on, False off; as a context manager it is
            this thread's setting inside the block only.
    """

    _attr = "debug_nans"


class debug_infs(_Switch):  # noqa: N801 - a switch read as a function, as torch.no_grad
    """As :class:`debug_nans`, for ±inf (``NABLA_DEBUG_INFS=1``).

    Args:
        flag: True (the default) turns the check on, False off; as a context manager it is
            this thread's setting inside the block only.
    """

    _attr = "debug_infs"


def _rule_of() -> list:
    """This thread's forward nodes whose derivative rules are running, innermost last."""
    stack = getattr(_local, "rule_of", None)
    if stack is None:
        stack = _local.rule_of = []
    return stack


def user_site() -> Site:
    """The call site of the op being emitted now: inside a derivative rule, the forward
    op's (see :func:`site_in_rule`), else the first frame outside the package."""
    rules = _rule_of()
    if rules:
        node = rules[-1]
        fwd = node.site
        name = node.op.described(node.kwargs)
        if fwd is not None:
            return Site(fwd.file, fwd.line, fwd.function, name)
        return Site("<unknown>", 0, "?", name)
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:  # pragma: no cover - an op is always called from some user code
        return Site("<unknown>", 0, "?")
    return Site(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


class site_in_rule:  # noqa: N801 - used as ``with site_in_rule(node):``
    """While the derivative rule of forward ``node`` runs, the ops it emits take ``node``'s
    site (only while a switch is on: ``autodiff`` enters it only then)."""

    __slots__ = ("node",)

    def __init__(self, node):
        self.node = node

    def __enter__(self):
        _rule_of().append(self.node)
        return self

    def __exit__(self, *exc) -> None:
        _rule_of().pop()
