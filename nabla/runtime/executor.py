"""Choosing an executor for a ``Program``: the backend policy and the ``auto`` tier.

``numpy`` interprets; ``max`` compiles with MAX; ``auto`` interprets a structure the first
times it is seen and compiles it with MAX once it repeats ``CONFIG.auto_threshold`` times
(always MAX when a value lives on an Accelerator, or when the program holds a custom kernel
with no NumPy reference). Without MAX installed, ``auto`` is the interpreter. Each backend's
compiled form is kept on the program (``program.executables``).

The fastest executor wins each hot structure: once MAX's model is ready, the next calls
run on MAX and then on the interpreter, timed (a ``Race``), and the faster runs from then
on. MAX fuses elementwise chains, but on a CPU its GEMM trails the BLAS NumPy links, and a
tiny program pays MAX's per-call cost; measuring settles each program on its own numbers.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import weakref
from statistics import median
from typing import NamedTuple

import numpy as np

from ..backends import buffer_to_numpy, max_backend, mpi
from ..backends import numpy as numpy_backend
from ..core.config import CONFIG, debug_log
from ..core.device import get_default_device
from ..core.ir import Program, build_program
from ..core.sharding import PROCESS

__all__ = ["select_backend", "run_program", "Race", "RACE_STATS"]

LOG = logging.getLogger("nabla.auto")


def _needs_max(program: Program) -> bool:
    """True when any input lives on, or any instruction places a value on, an accelerator."""
    for spec in program.inputs:
        if spec.device is not None and not spec.device.is_cpu:
            return True
    for instr in program.instructions:
        dev = instr.kwargs.get("device")
        if dev is not None and not dev.is_cpu:
            return True
    return False


_CROSSES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def crosses_processes(program: Program) -> bool:
    """True when ``program`` (or a program it calls) holds a collective between processes
    (a ``mesh_*`` op of a mesh spanning processes): the MPI lowerings run those."""
    got = _CROSSES.get(program)
    if got is None:
        got = False
        for instr in program.instructions:
            kw = instr.kwargs
            nested = kw.get("program") if instr.op == "compiled_call" else None
            if (instr.op.startswith("mesh_") and "mesh" in kw) or (
                nested is not None and crosses_processes(nested)
            ):
                got = True
                break
        _CROSSES[program] = got
    return got


def select_backend(program: Program, seen: int) -> str:
    """The backend that runs ``program`` now, given how often its structure was seen."""
    choice = CONFIG.backend
    if choice == "numpy":
        if _needs_max(program):
            raise RuntimeError("the numpy backend cannot run tensors on an Accelerator")
        return "numpy"
    if choice == "max" or _needs_max(program):
        if max_backend() is None:
            raise RuntimeError(
                "the max backend was requested but MAX is not installed; "
                "install it with: pip install 'nabla[max]'"
            )
        return "max"
    # auto: a structure the interpreter cannot run (a custom kernel without a NumPy
    # reference) is compiled by MAX now; without MAX, the interpreter's error says why
    if not numpy_backend.supports(program):
        return "numpy" if max_backend() is None else "max"
    # a structure seen fewer times than the threshold never touches MAX (importing it
    # costs ~0.25 s, which the first result must not pay)
    if seen < CONFIG.auto_threshold:
        return "numpy"
    mx = max_backend()
    if mx is None or not mx.ready_for(program):
        return "numpy"
    if not CONFIG.auto_race:
        return "max"
    race = program.executables.get("race")
    if race is None:
        race = program.executables["race"] = Race()
    return race.winner or race.next_entrant()


RACE_STATS = {"races_won_by_max": 0, "races_won_by_numpy": 0}


class Race:
    """The ``auto`` tier's measurement of one hot program, once MAX has a model.

    MAX warms up first, on its own, until two things hold. Its calls have settled: the
    median of its last ``WINDOW`` calls is no more than 10% below the median of the
    ``WINDOW`` before (calls after a load run several times slower for tens of calls:
    2.8 ms falling to 0.55 ms over ~50 calls of a per-example-gradient program here), or
    ``MAX_WARMUP`` calls have run. And the warm-up has lasted ``QUIET_S`` seconds (it
    starts right after the interpreter last ran this program): OpenBLAS's threads keep
    spinning for ~0.1 s after a NumPy matmul, and on 2 cores they slow every MAX call
    meanwhile 3-5x (0.4 ms became 2-2.5 ms for the per-example program), which had handed
    such programs to the interpreter. A fast program thus warms up for QUIET_S, however
    many calls that takes. Other programs that the interpreter runs between these calls
    still disturb the measurement, as they disturb MAX's calls afterwards.

    Then ``CALLS`` timed calls run on MAX and ``CALLS`` on the interpreter, each executor in
    one run (MAX's threads disturb the interpreter's first calls after it less than the
    reverse, and only each executor's best call counts), and the executor with the faster
    best call wins for good. Every call computes the requested values, so racing costs
    only the slower entrant's calls."""

    CALLS = 15
    WINDOW = 8
    MAX_WARMUP = 64
    QUIET_S = 0.25
    __slots__ = ("times", "winner", "_warmup", "_warming", "_since")

    def __init__(self):
        self.times = {"max": [], "numpy": []}
        self.winner = None
        self._warmup: list[float] = []  # MAX's warm-up call times
        self._warming = True
        self._since = None  # when MAX's warm-up began

    def next_entrant(self) -> str:
        if self._warming or len(self.times["max"]) < self.CALLS:
            return "max"
        return "numpy"

    def record(self, name: str, seconds: float, program) -> None:
        if self._warming:
            now = time.perf_counter()
            if self._since is None:
                self._since = now - seconds
            times = self._warmup
            times.append(seconds)
            w = self.WINDOW
            settled = len(times) >= self.MAX_WARMUP or (
                len(times) >= 2 * w and median(times[-w:]) >= 0.9 * median(times[-2 * w : -w])
            )
            self._warming = not (settled and now - self._since >= self.QUIET_S)
            if not self._warming:
                times.clear()  # thousands of calls for a fast program; the race keeps none
            return
        self.times[name].append(seconds)
        if len(self.times["numpy"]) < self.CALLS:
            return
        best = {k: min(t) for k, t in self.times.items()}
        self.winner = "max" if best["max"] <= best["numpy"] else "numpy"
        RACE_STATS[f"races_won_by_{self.winner}"] += 1
        if CONFIG.debug_compile:
            debug_log(
                LOG,
                "%d-op program runs on %s (best call: max %.3f ms, numpy %.3f ms)",
                program.num_ops,
                self.winner,
                1e3 * best["max"],
                1e3 * best["numpy"],
            )


_DIGESTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _digest(program: Program) -> str:
    """The program's op sequence and shapes, in a form equal across processes (no object
    identities): what the processes of one SPMD program must agree on."""
    got = _DIGESTS.get(program)
    if got is None:
        parts = [repr([(s.dtype.name, tuple(s.shape)) for s in program.inputs])]
        for instr in program.instructions:
            shapes = [(dt.name, tuple(shape)) for dt, shape in instr.out_specs]
            parts.append(f"{instr.op}{instr.inputs}{shapes}{_stable(instr.kwargs)}")
        text = ";".join(parts)
        got = _DIGESTS[program] = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    return got


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _stable(kwargs: dict) -> str:
    """An instruction's kwargs as text equal across processes: nested programs by their
    digest, object addresses and each process's box dropped (axes, reduction kinds and
    permutations stay)."""
    out = []
    for k in sorted(kwargs):
        if k == "box":  # each process's own devices: differs by design
            continue
        v = kwargs[k]
        if isinstance(v, Program):
            text = _digest(v)
        elif isinstance(v, tuple | list) and v and all(isinstance(p, Program) for p in v):
            text = ",".join(_digest(p) for p in v)
        else:
            text = _ADDRESS.sub("", repr(v))
        out.append(f"{k}={text}")
    return "{" + ";".join(out) + "}"


def run_program(program: Program, seen: int, inputs: list) -> list:
    """Run ``program`` on ``inputs`` (backend buffers) with the selected backend."""
    if PROCESS.count > 1 and crosses_processes(program):
        if mpi.in_agreed_program():  # a nested program: the outer one's digest covers it
            return _run_across(program, seen, inputs)
        # every process must run this same program: a mismatch is an error, not a deadlock
        what = f"program {_digest(program)} ({len(program.instructions)} ops)"
        with mpi.agreed_program(what, lambda: mpi.describe_program(program)):
            return _run_across(program, seen, inputs)
    return _run(program, seen, inputs)


def _run_across(program: Program, seen: int, inputs: list) -> list:
    """A program that communicates between processes: whole on the interpreter (whose
    ``mesh_*`` lowerings are the MPI ones) when that is the backend; otherwise cut at its
    collectives, each segment compiled and cached by its own backend choice."""
    if CONFIG.backend == "numpy":
        return _run(program, seen, inputs)
    plan = program.executables.get("segments")
    if plan is None:
        plan = program.executables["segments"] = Segments(program)
    return plan.run(seen, inputs)


def _is_cut(instr) -> bool:
    """A collective between processes (run by the MPI lowerings), or a call of a program
    that holds one (run by ``run_program``, itself cut)."""
    if instr.op.startswith("mesh_") and "mesh" in instr.kwargs:
        return True
    return instr.op == "compiled_call" and crosses_processes(instr.kwargs["program"])


class _Segment(NamedTuple):
    """The ordinary instructions of one depth as a program of their own."""

    program: Program
    inputs: list  # the outer program's slots it reads, in its input order
    outputs: list  # the outer program's slots it fills, in its output order


class _Stage(NamedTuple):
    """One depth of a cut program: its segment (None when it has no ordinary instruction),
    then its collectives."""

    segment: _Segment | None
    cuts: list


class Segments:
    """A program cut at its cross-process collectives.

    Each instruction gets a depth: how many collectives lie on its longest input path. The
    ordinary instructions of one depth form one segment (a ``Program`` of its own, run by
    whichever backend ``select_backend`` picks for it: MAX compiles and caches it as any
    program); after segment ``d`` come the collectives of depth ``d``. Independent
    collectives (say, every gradient's ``all_reduce``) so share one cut, and a
    data-parallel step is two compiled segments around one round of collectives.
    """

    def __init__(self, program: Program):
        instrs = program.instructions
        is_cut = [_is_cut(ins) for ins in instrs]
        producer = {o: k for k, ins in enumerate(instrs) for o in ins.outputs}
        depth = _cut_depths(instrs, producer, is_cut)
        n = max(depth, default=-1) + 1
        bodies: list[list] = [[] for _ in range(n)]
        cuts: list[list] = [[] for _ in range(n)]
        for ins, d, cut in zip(instrs, depth, is_cut, strict=True):
            (cuts if cut else bodies)[d].append(ins)
        spec_of = _slot_specs(program)
        needed = _read_later(instrs, producer, depth, is_cut)
        self.stages = [
            _Stage(self._segment(program, d, bodies[d], spec_of, needed[d]), cuts[d])
            for d in range(n)
        ]
        self.outputs = program.outputs

    @staticmethod
    def _segment(program, d, body, spec_of, needed) -> _Segment | None:
        """Depth ``d``'s ordinary instructions ``body`` as a program, returning the slots of
        ``needed`` (read by a later depth or a collective) and the outer program's outputs."""
        if not body:
            return None
        made = {o for ins in body for o in ins.outputs}
        ins_slots = []
        for ins in body:
            for slot in ins.inputs:
                if slot not in made and slot not in ins_slots:
                    ins_slots.append(slot)
        outs = [o for ins in body for o in ins.outputs if o in needed or o in program.outputs]
        ref = {slot: i for i, slot in enumerate(ins_slots)}
        steps = []
        for k, ins in enumerate(body):
            refs = tuple(ref[s] if s in ref else s for s in ins.inputs)
            steps.append((ins.op, refs, ins.kwargs, ins.out_specs))
            for i, o in enumerate(ins.outputs):
                ref[o] = (k, i)
        key = (program.key, "segment", d)
        sub = build_program(key, [spec_of[s] for s in ins_slots], steps, [ref[o] for o in outs])
        return _Segment(sub, ins_slots, outs)

    def run(self, seen: int, inputs: list) -> list:
        env = dict(enumerate(inputs))
        for seg, cuts in self.stages:
            if seg is not None:
                outs = _run(seg.program, seen, [env[s] for s in seg.inputs])
                env.update(zip(seg.outputs, outs, strict=True))
            for ins in cuts:
                args = [buffer_to_numpy(env[s]) for s in ins.inputs]
                if ins.op == "compiled_call":
                    res = run_program(ins.kwargs["program"], seen, args)
                else:
                    res = numpy_backend.LOWERINGS[ins.op](args, ins.kwargs)
                for o, r, (dt, _) in zip(ins.outputs, res, ins.out_specs, strict=True):
                    env[o] = np.asarray(r, dtype=dt.numpy)
        return [env[s] for s in self.outputs]


def _cut_depths(instrs, producer: dict, is_cut: list) -> list[int]:
    """Per instruction, how many collectives lie on its longest input path."""
    depth: list[int] = []
    for ins in instrs:
        d = 0
        for slot in ins.inputs:
            j = producer.get(slot)
            if j is not None:
                d = max(d, depth[j] + is_cut[j])
        depth.append(d)
    return depth


def _slot_specs(program: Program) -> dict:
    """``(dtype, shape, device)`` per slot of ``program``; every value lives on the device
    of its inputs (the default device when it has none)."""
    spec_of = {i: tuple(spec) for i, spec in enumerate(program.inputs)}
    device = program.inputs[0].device if program.inputs else get_default_device()
    for ins in program.instructions:
        for o, (dt, shape) in zip(ins.outputs, ins.out_specs, strict=True):
            spec_of[o] = (dt, shape, device)
    return spec_of


def _read_later(instrs, producer: dict, depth: list, is_cut: list) -> list[set]:
    """Per depth, its slots read by a later depth or by a collective: its segment's
    outputs."""
    needed: list[set] = [set() for _ in range(max(depth, default=-1) + 1)]
    for ins, d, cut in zip(instrs, depth, is_cut, strict=True):
        for slot in ins.inputs:
            j = producer.get(slot)
            if j is not None and (depth[j] != d or cut):
                needed[depth[j]].add(slot)
    return needed


def _run(program: Program, seen: int, inputs: list) -> list:
    name = select_backend(program, seen)
    # a hot program's NumPy entrant (in the race too) is its straight-line form
    key = "numpy_fast" if name == "numpy" and numpy_backend.use_fast(seen) else name
    exe = program.executables.get(key)
    if exe is None:
        if key == "numpy_fast":
            exe = numpy_backend.compile_fast(program)
        elif name == "numpy":
            exe = numpy_backend.compile_program(program)
        else:
            exe = max_backend().compile_program(program)
        program.executables[key] = exe
    if name == "numpy":
        inputs = [b if isinstance(b, np.ndarray) else buffer_to_numpy(b) for b in inputs]
    race = program.executables.get("race")
    if race is None or race.winner is not None or CONFIG.backend != "auto":
        return exe(inputs)
    t0 = time.perf_counter()
    outs = exe(inputs)
    race.record(name, time.perf_counter() - t0, program)
    return outs
