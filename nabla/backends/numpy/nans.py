"""Finding the instruction that made a NaN or an infinity (``nb.debug_nans``).

A program whose outputs hold a bad value is run again here, one instruction at a time,
each result checked: the first instruction whose result is bad while none of its operands
is made it. Nested programs (compiled calls, ``cond`` branches, ``while_loop`` and ``scan``
bodies) are entered the same way, one iteration at a time, so the finding names the
construct and the step. Only a program already known to hold a bad value comes here: the
ordinary interpreter (``compile_program``) checks nothing and costs nothing more.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...core.ir import Program
from .lowerings import ELEMENTWISE, LOWERINGS

__all__ = ["Frame", "Finding", "find_first_bad", "bad_kind"]


class Frame(NamedTuple):
    """One level of where a finding is: instruction ``index`` of ``program``, and for an
    instruction whose nested program holds the finding, the iteration of its loop
    (``None`` for no loop)."""

    program: Program
    index: int
    iteration: int | None = None


class Finding(NamedTuple):
    """The first instruction that made a bad value: where (``path``, outermost first), its
    backend op ``name`` and physical ``kwargs``, its operand arrays, which ``output`` is
    bad, that output's array and the ``kind`` of bad value (``"NaN"`` or ``"inf"``)."""

    path: tuple
    name: str
    kwargs: dict
    inputs: list
    output: int
    value: np.ndarray
    kind: str
    made: np.ndarray | None = None  # where it made bad values (None: wherever it has one)


def bad_kind(value, nans: bool = True, infs: bool = False) -> str | None:
    """``"NaN"`` or ``"inf"`` when ``value`` (an array) holds one that is being looked for,
    else None (integer and boolean arrays never do)."""
    a = np.asarray(value)
    if a.dtype.kind not in "fc":
        return None
    if nans and np.isnan(a).any():
        return "NaN"
    if infs and np.isinf(a).any():
        return "inf"
    return None


def find_first_bad(program: Program, inputs, nans: bool = True, infs: bool = False):
    """The first instruction of ``program`` run on ``inputs`` (arrays) that makes a bad
    value out of operands without one, or None when every bad value came in with the
    inputs."""
    with np.errstate(all="ignore"):
        finding, _ = _walk(program, list(inputs), (), (nans, infs))
    return finding


def _walk(program: Program, inputs: list, path: tuple, look: tuple):
    """(the finding or None, the program's outputs)."""
    slots = inputs + [None] * sum(len(ins.outputs) for ins in program.instructions)
    for k, (name, ins, kwargs, outs, specs) in enumerate(program.instructions):
        args = [slots[i] for i in ins]
        res = [
            np.asarray(r, dtype=dt.numpy)
            for r, (dt, _) in zip(LOWERINGS[name](args, kwargs), specs, strict=True)
        ]
        for o, r in zip(outs, res, strict=True):
            slots[o] = r
        bad = [(i, kind) for i, r in enumerate(res) if (kind := bad_kind(r, *look))]
        if not bad:
            continue
        fill = kwargs.get("value")  # ``full``'s or ``pad``'s value: a NaN or inf the user
        if fill is not None and bad_kind(np.asarray(fill), *look):  # wrote: data (compile
            continue  # folds such a fill into a constant input, which is data too)
        here = path + (Frame(program, k),)
        if not any(bad_kind(a, *look) for a in args):
            inner = _enter(name, args, kwargs, here, look)
            if inner is not None:
                return inner, None
            i, kind = bad[0]
            return Finding(here, name, kwargs, args, i, res[i], kind), None
        made = _made_here(name, args, res[0], look)
        if made is not None:  # beside bad values it was given (``log`` of [nan, -1])
            return Finding(here, name, kwargs, args, 0, res[0], bad_kind(res[0], *look), made), None
    return None, [slots[s] for s in program.outputs]


def _bad_mask(a, look: tuple) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "fc":
        return np.zeros(a.shape, bool)
    nans, infs = look
    return (np.isnan(a) if nans else False) | (np.isinf(a) if infs else False)


def _made_here(name: str, args: list, res, look: tuple):
    """Where elementwise op ``name``, given operands that hold bad values, made new ones
    (at positions where no operand has one), or None: a NaN that came in with the data does
    not hide one the same op makes elsewhere. Other ops mix positions: None."""
    if name not in ELEMENTWISE:
        return None
    try:
        came = np.zeros(res.shape, bool)
        for a in args:
            came |= np.broadcast_to(_bad_mask(a, look), res.shape)
    except ValueError:
        return None
    made = _bad_mask(res, look) & ~came
    return made if made.any() else None


def _enter(name: str, args: list, kwargs: dict, path: tuple, look: tuple):
    """The finding inside a nested program of instruction ``path[-1]``, if it has one."""
    if name == "compiled_call":
        return _walk(kwargs["program"], list(args), path, look)[0]
    if name == "cond":
        branches = kwargs["branches"]
        index = min(max(int(args[0]), 0), len(branches) - 1)
        return _walk(branches[index], list(args[1:]), path, look)[0]
    if name == "while_loop":
        return _enter_while(args, kwargs, path, look)
    if name == "scan":
        return _enter_scan(args, kwargs, path, look)
    return None


def _step(path: tuple, t: int) -> tuple:
    """``path`` with its last frame at iteration ``t``."""
    return path[:-1] + (path[-1]._replace(iteration=t),)


def _enter_while(args, kwargs, path, look):
    n = kwargs["n_carry"]
    carry, caps = list(args[:n]), list(args[n:])
    t = 0
    while True:
        found, out = _walk(kwargs["cond"], carry + caps, _step(path, t), look)
        if found is not None:
            return found
        if not bool(out[0]):
            return None
        found, carry = _walk(kwargs["body"], carry + caps, _step(path, t), look)
        if found is not None:
            return found
        t += 1


def _enter_scan(args, kwargs, path, look):
    n, nx, length = kwargs["n_carry"], kwargs["n_xs"], kwargs["length"]
    carry, xs, caps = list(args[:n]), args[n : n + nx], list(args[n + nx :])
    x_pre = [(slice(None),) * a for a in kwargs["x_axes"]]
    for t in range(length - 1, -1, -1) if kwargs["reverse"] else range(length):
        step_in = carry + [x[p + (t,)] for x, p in zip(xs, x_pre, strict=True)] + caps
        found, out = _walk(kwargs["body"], step_in, _step(path, t), look)
        if found is not None:
            return found
        carry = out[:n]
    return None
