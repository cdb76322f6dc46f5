"""The NumPy interpreter backend: reference semantics and instant first results.

``LOWERINGS`` maps each backend op name to ``fn(args: list[ndarray], kwargs) -> list``;
``compile_program`` binds a ``Program``'s instructions to those functions once, so running a
cached program is one Python loop with no graph building.
"""

from __future__ import annotations

import numpy as np

from .lowerings import LOWERINGS

__all__ = ["LOWERINGS", "compile_program", "UnsupportedOp"]


class UnsupportedOp(RuntimeError):
    pass


def compile_program(program):
    steps = []
    for name, ins, kwargs, outs, specs in program.instrs:
        fn = LOWERINGS.get(name)
        if fn is None:
            raise UnsupportedOp(f"the numpy backend has no lowering for op '{name}'")
        dtypes = tuple(dt.numpy for dt, _ in specs)
        steps.append((fn, ins, kwargs, outs, dtypes))
    n_slots = program.n_inputs + sum(len(s[3]) for s in steps)
    out_slots = program.out_slots

    def run(inputs):
        slots = list(inputs)
        slots.extend([None] * (n_slots - len(slots)))
        for fn, ins, kwargs, outs, dtypes in steps:
            res = fn([slots[i] for i in ins], kwargs)
            for o, r, dt in zip(outs, res, dtypes, strict=True):
                if type(r) is not np.ndarray or r.dtype != dt:
                    r = np.asarray(r, dtype=dt)
                slots[o] = r
        return [slots[s] for s in out_slots]

    return run
