"""Choosing an executor for a ``Program``: the backend policy and the ``auto`` tier.

``numpy`` interprets; ``max`` compiles with MAX; ``auto`` interprets a structure the first
times it is seen and compiles it with MAX once it repeats ``CONFIG.auto_threshold`` times
(always MAX when a value lives on an Accelerator, or when the program holds a custom kernel
with no NumPy reference). Without MAX installed, ``auto`` is the interpreter. Each backend's
compiled form is kept on the program (``program.executables``).

The fastest executor wins each hot structure: once MAX's model is ready, the next calls
run on each executor of ``RACE_ENTRANTS`` in turn, timed (a ``Race``), and the fastest runs
from then on. MAX fuses elementwise chains, but on a CPU its GEMM trails the BLAS NumPy
links, and a tiny program pays MAX's per-call cost; measuring settles each program on its
own numbers.

Executors share the cores: the interpreter's programs whose matrix products are small run
NumPy's BLAS on one thread (``backends/blas.py``). OpenBLAS's helper threads spin after each
call and take the cores MAX's thread pool works on (MAX's own threads stop within a
millisecond or so of a call); and on a machine loaded by other processes, a product split
over two threads waits for whichever of them was descheduled. A process that calls host
programs right after MAX ones keeps on MAX only its clear wins (``Interleaving``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time
import weakref
from collections import deque
from statistics import median
from typing import NamedTuple

import numpy as np

from ..backends import blas, buffer_to_numpy, max_backend, mpi
from ..backends import numpy as numpy_backend
from ..core.config import CONFIG, debug_log
from ..core.device import get_default_device
from ..core.ir import Made, Program, build_program, nested_programs
from ..core.sharding import PROCESS
from . import race_records

__all__ = [
    "coalesced",
    "select_backend",
    "run_program",
    "Race",
    "RACE_STATS",
    "EXECUTORS",
    "HOST_EXECUTORS",
    "RACE_ENTRANTS",
]

LOG = logging.getLogger("nabla.auto")

# The executors a program can run on, by name: each makes ``f(inputs) -> outputs`` of a
# program once (kept in ``program.executables[name]``). ``HOST_EXECUTORS`` take NumPy arrays.
EXECUTORS = {
    "numpy": lambda program: numpy_backend.compile_program(program),
    # a hot program's NumPy executable: its straight-line form (``numpy_backend.use_fast``)
    "numpy_fast": lambda program: numpy_backend.compile_fast(program),
    "max": lambda program: max_backend().compile_program(program),
}
HOST_EXECUTORS = {"numpy"}
# The executors the ``auto`` tier races on a hot program once MAX has a model, in order of
# preference: on a near tie (``Race.MARGIN``) the earlier one wins
RACE_ENTRANTS = ["numpy", "max"]

_NEEDS_MAX: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _needs_max(program: Program) -> bool:
    """True when any input lives on, or any instruction places a value on, an accelerator
    (memoized per program: asked at every call)."""
    got = _NEEDS_MAX.get(program)
    if got is None:
        got = any(spec.device is not None and not spec.device.is_cpu for spec in program.inputs)
        for instr in program.instructions:
            dev = instr.kwargs.get("device")
            if dev is not None and not dev.is_cpu:
                got = True
        _NEEDS_MAX[program] = got
    return got


_PRODUCTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# a program whose largest matrix product has at least this many multiply-adds keeps BLAS's
# threads: there the second core pays for the helpers' spinning (a 1024 matmul runs ~2x
# faster on two). Below it a product is over before a helper's help matters, and under load
# a helper stalls it: per-example gradients (64 examples) ran at a median of 0.40 ms and a
# 90th percentile of 16 ms on two threads at load 2, at 0.21-0.24 and 0.30-0.37 ms on one
_THREADED_PRODUCT = 1 << 24


def _small_products(program: Program) -> bool:
    """True when ``program`` (or a program it holds) multiplies matrices, each of fewer
    than ``_THREADED_PRODUCT`` multiply-adds (memoized per program)."""
    got = _PRODUCTS.get(program)
    if got is None:
        largest = _largest_product(program)
        got = _PRODUCTS[program] = 0 < largest < _THREADED_PRODUCT
    return got


def _largest_product(program: Program) -> int:
    """Multiply-adds of the largest matrix product in ``program`` or its nested programs
    (0 when it has none; a symbolic size counts as unbounded)."""
    shapes = {i: spec.shape for i, spec in enumerate(program.inputs)}
    largest = 0
    for instr in program.instructions:
        for o, (_, shape) in zip(instr.outputs, instr.out_specs, strict=True):
            shapes[o] = shape
        for sub in nested_programs(instr.kwargs):
            largest = max(largest, _largest_product(sub))
        if instr.op != "matmul":
            continue
        a, out = shapes.get(instr.inputs[0], ()), instr.out_specs[0][1]
        dims = [*out, *(a[-1:] if len(a) > 1 else a)]
        if not all(type(d) is int for d in dims):
            return 1 << 62
        largest = max(largest, math.prod(dims))
    return largest


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
    if PROCESS.count > 1:
        # auto across processes: every process must run a program on the same executor
        # (MAX contracts a * b + c into one rounding, NumPy does not: replicas computed on
        # different executors drift apart), and a race decides per process, on its own
        # timings. So no race: the host executors, the same on every process
        return "numpy"
    race = program.executables.get("race")
    if race is not None and race.winner is not None:  # settled: the common case, first
        return race.winner
    # auto: a structure the interpreter cannot run (a custom kernel without a NumPy
    # reference) is compiled by MAX now; without MAX, the interpreter's error says why
    if not numpy_backend.supports(program):
        return "numpy" if max_backend() is None else "max"
    # a structure seen fewer times than the threshold never touches MAX (importing it
    # costs ~0.25 s, which the first result must not pay)
    if seen < CONFIG.auto_threshold:
        return "numpy"
    mx = max_backend()
    if mx is None:
        return "numpy"
    if race is None and CONFIG.auto_race:
        recalled = _recalled(program, mx)
        if recalled is not None:
            return recalled
    if not mx.ready_for(program):
        return "numpy"
    if not CONFIG.auto_race:
        return "max"
    if race is None:
        race = program.executables["race"] = Race(RACE_ENTRANTS)
    return race.winner or race.next_entrant()


def _recalled(program: Program, mx) -> str | None:
    """The executor for ``program`` when a race it ran in an earlier process settles it now
    (the same as then, with no MAX compile when a host executor won), else None."""
    scores = race_records.recall(program, RACE_ENTRANTS)
    if scores is None:
        return None
    race = Race(RACE_ENTRANTS)
    if race.choose(scores) == "max" and not mx.ready_for(program):
        return "numpy"  # MAX won then: the interpreter runs until its model is ready
    program.executables["race"] = race
    race.decide(scores, program, recalled=True)
    RACE_STATS["races_recalled"] += 1
    return race.winner


class Interleaving:
    """Whether this process calls host programs right after MAX ones.

    MAX's worker threads run on for 50-300 us of CPU after each call, and on a machine of
    few cores whatever runs next pays for it: a NumPy program called between two MAX calls
    ran 1.8x slower (an HVP: 343 against 188 us). A process whose programs run one after
    another in stretches (a benchmark's rows, a training loop and then an evaluation) pays
    it once a stretch, and there MAX keeps every program it wins. A process that calls host
    programs right after MAX ones (a MAX training step and NumPy metrics at each step) pays
    it at every call: once ``NEEDED`` of the last ``CALLS`` host calls started within
    ``WINDOW_S`` of a MAX call's end, it is ``seen``, for the rest of the process, and the
    per-process choice of ``Race`` applies. Nothing is timed while no race has gone to MAX
    or once it is seen."""

    WINDOW_S = 1e-3
    CALLS = 64
    NEEDED = 16
    __slots__ = ("seen", "_max_end", "_recent", "_close")

    def __init__(self):
        self.seen = False
        self._max_end = -math.inf
        self._recent: deque = deque()  # per recent host call: began right after MAX's
        self._close = 0  # how many of them did

    def max_call_ended(self) -> None:
        self._max_end = time.perf_counter()

    def host_call(self) -> None:
        close = time.perf_counter() - self._max_end < self.WINDOW_S
        self._recent.append(close)
        self._close += close
        if len(self._recent) > self.CALLS:
            self._close -= self._recent.popleft()
        if self._close >= self.NEEDED:
            self.seen = True
            self._recent.clear()
            if CONFIG.debug_compile:
                debug_log(LOG, "host programs run right after MAX ones: MAX keeps clear wins only")
            Race.move_narrow_max_wins()


INTERLEAVING = Interleaving()

RACE_STATS = {
    "races_won_by_max": 0,
    "races_won_by_numpy": 0,
    "races_recalled": 0,
    "races_moved_by_watch": 0,
}
# the settled races of this process, by where they run ("max" or a "host" executor): the
# per-process choice of ``Race`` reads them
_SETTLED = {"max": weakref.WeakSet(), "host": weakref.WeakSet()}


class Race:
    """The ``auto`` tier's measurement of one hot program, once MAX has a model.

    ``entrants``: the executors raced, in order of preference. MAX warms up first, on its
    own, until two things hold. Its calls have settled: the median of its last ``WINDOW``
    calls is no more than 10% below the median of the ``WINDOW`` before (calls after a load
    run several times slower for tens of calls: 2.8 ms falling to 0.55 ms over ~50 calls of
    a per-example-gradient program here), or ``MAX_WARMUP`` calls have run. And the warm-up
    has lasted ``QUIET_S`` seconds (it starts right after the interpreter last ran this
    program), so whatever the interpreter's last call left running has stopped.

    Then ``ROUNDS`` rounds: in each, every entrant runs ``CALLS`` timed calls in a row (MAX
    first, then the others in order). These are the program's real calls, between whatever
    else the user's code runs, so each executor is timed in the conditions it will run in;
    and repeating the rounds spreads each executor's calls over the stretch of the race, so
    a slow stretch of the machine does not fall on one executor only. An executor's score
    is its best round's median call, the winner the entrant of the lowest score, except
    that an earlier entrant within ``MARGIN`` of it wins instead: two executors that are
    nearly equal do not swap between runs of the same script on noise. Every call computes
    the requested values, so racing costs only the slower entrants' calls.

    The process's programs share its cores (a per-process choice). After each call MAX's
    worker threads use 50-300 us of CPU that whatever runs next pays for (MAX 26.7 cannot
    turn those threads down, ``runtime/README.md``). So once the process calls host
    programs right after MAX ones (``Interleaving``), MAX keeps a program only if it beats
    the best host entrant by more than ``MAX_TAIL_S`` a call: such a race goes to the host
    entrant, and races MAX won earlier by less are moved to theirs. A program much faster
    on MAX keeps it; a process whose programs run in stretches, one after another, keeps
    every MAX win.

    A race's rounds are short and its entrants take turns, so its scores are those of the
    moment, and an executor's first calls after another's run slower (here the transformer
    block's NumPy calls right after a MAX block: 53-82 ms, then 18 ms). So once settled,
    the winner is watched (``watch``): its calls are timed until they settle as the
    warm-up's do (two ``WINDOW`` medians within 10%, or ``MAX_WARMUP`` calls), and that
    steady median replaces its score. A close runner-up (race score within
    ``TRIAL_WITHIN`` of it) then gets the same long stretch, and the program settles on
    what the steady scores choose: each entrant is watched once per process, so nothing
    swaps back and forth. The steady scores are what the race's record keeps, so the next
    run of the script starts from them."""

    ROUNDS = 3
    CALLS = 7
    WINDOW = 8
    MAX_WARMUP = 64
    QUIET_S = 0.25
    MARGIN = 0.1
    MAX_TAIL_S = 3e-4
    TRIAL_WITHIN = 3.0
    __slots__ = (
        "entrants",
        "times",
        "winner",
        "scores",
        "watching",
        "_order",
        "_warmup",
        "_warming",
        "_since",
        "_beside_compile",
        "_decided",
        "_watched",
        "__weakref__",
    )

    def __init__(self, entrants=("numpy", "max")):
        self.entrants = tuple(entrants)
        self.times = {name: [] for name in self.entrants}  # the timed calls, per entrant
        self.winner = None
        self.scores = None  # seconds per entrant, once decided
        # the timed calls' executors, in the order they run
        first = [n for n in self.entrants if n == "max"] + [n for n in self.entrants if n != "max"]
        self._order = [n for _ in range(self.ROUNDS) for n in first for _ in range(self.CALLS)]
        self._warmup: list[float] = []  # MAX's warm-up call times
        self._warming = "max" in self.entrants
        self._since = None  # when MAX's warm-up began
        self._beside_compile = False  # a background compile ran during a timed call
        self.watching = None  # the watched executor's call times (``watch``)
        self._decided = None  # the winner as the race decided it, while watched
        self._watched: set = set()  # the entrants whose steady calls were timed

    def next_entrant(self) -> str:
        """The executor that runs the program's next call."""
        if self._warming:
            return "max"
        done = sum(len(t) for t in self.times.values())
        return self._order[min(done, len(self._order) - 1)]

    def record(self, name: str, seconds: float, program) -> None:
        """Count one call of ``seconds`` on executor ``name``; decides once all have run."""
        if self._warming:
            now = time.perf_counter()
            if self._since is None:
                self._since = now - seconds
            times = self._warmup
            times.append(seconds)
            self._warming = not (self._settled(times) and now - self._since >= self.QUIET_S)
            if not self._warming:
                times.clear()  # thousands of calls for a fast program; the race keeps none
            return
        self.times[name].append(seconds)
        if not self._beside_compile:
            mx = max_backend()
            self._beside_compile = mx is not None and mx.compiling()
        if sum(len(t) for t in self.times.values()) < len(self._order):
            return
        scores = {k: self.score(k) for k in self.entrants}
        self.decide(scores, program)
        if not self._beside_compile:  # a compile took a core meanwhile: the next run races
            race_records.keep(program, scores)

    def _settled(self, times: list) -> bool:
        """Whether calls timed ``times`` have settled: the median of the last ``WINDOW``
        is no more than 10% below the one before, or ``MAX_WARMUP`` calls ran."""
        w = self.WINDOW
        return len(times) >= self.MAX_WARMUP or (
            len(times) >= 2 * w and median(times[-w:]) >= 0.9 * median(times[-2 * w : -w])
        )

    def decide(self, scores: dict, program, recalled: bool = False) -> None:
        """Settle on ``scores`` (seconds per entrant: this race's, or a past process's
        recalled from disk, ``race_records``), and start watching the winner."""
        winner = self.choose(scores)
        self.scores = dict(scores)
        self._warming = False
        self._settle(winner)
        self._decided = winner
        self.watching = [] if len(self.entrants) > 1 else None
        if CONFIG.debug_compile:
            debug_log(
                LOG,
                "%d-op program runs on %s (%s: %s)",
                program.num_ops,
                self.winner,
                "as its race in an earlier process decided"
                if recalled
                else "best round's median call",
                ", ".join(f"{k} {1e3 * v:.3f} ms" for k, v in scores.items()),
            )

    def watch(self, seconds: float, program) -> None:
        """Count one call of the watched executor (``winner``); once its calls have
        settled, their median is its score. The best other entrant, when its race score
        is within ``TRIAL_WITHIN`` of that, then runs until its own calls settle (a trial:
        its score came from short turns after another executor's); then the program
        settles on what the steady scores choose."""
        times = self.watching
        times.append(seconds)
        if not self._settled(times):
            return
        mx = max_backend()
        if mx is not None and mx.compiling():  # a compile takes a core: time again later
            times.clear()
            return
        name, steady = self.winner, median(times[-self.WINDOW :])
        self.scores[name] = steady
        self._watched.add(name)
        # (a recalled host win compiled no MAX model: MAX takes no part, and no compile)
        rivals = [k for k in self.entrants if k != "max" or "max" in program.executables]
        rival = min((k for k in rivals if k != name), key=self.scores.__getitem__, default=None)
        if (
            rival is not None
            and rival not in self._watched
            and self.scores[rival] <= steady * self.TRIAL_WITHIN
        ):
            self.winner, self.watching = rival, []  # the trial (the decision stands)
            return
        self.watching = None
        decided = self._decided
        final = self.choose({k: self.scores[k] for k in rivals})
        if final == decided:
            self.winner = final
        else:
            RACE_STATS[f"races_won_by_{decided}"] -= 1
            RACE_STATS["races_moved_by_watch"] += 1
            why = ", ".join(f"{k} {1e3 * self.scores[k]:.3f} ms" for k in rivals)
            self._settle(final, f"steady calls: {why}")
        race_records.keep(program, self.scores)

    def choose(self, scores: dict) -> str:
        """The winner on ``scores``, in this process (changes nothing)."""
        best = min(scores.values())
        winner = next(
            k for k in self.entrants if k in scores and scores[k] <= best * (1 + self.MARGIN)
        )
        if winner == "max" and INTERLEAVING.seen:
            winner = self._host_within_tail(scores) or winner
        return winner

    def _settle(self, winner: str, why: str = "") -> None:
        self.winner = winner
        key = f"races_won_by_{winner}"
        RACE_STATS[key] = RACE_STATS.get(key, 0) + 1
        if why and CONFIG.debug_compile:
            debug_log(LOG, "a program moves to %s (%s)", winner, why)
        if winner == "max":
            _SETTLED["host"].discard(self)
            _SETTLED["max"].add(self)
            return
        _SETTLED["max"].discard(self)
        _SETTLED["host"].add(self)

    @staticmethod
    def move_narrow_max_wins() -> None:
        """Once host programs run right after MAX ones (``Interleaving``), MAX's narrow
        wins cost the others: those races move to their best host entrant."""
        for race in list(_SETTLED["max"]):
            host = race.host_alternative()
            if host is not None:
                RACE_STATS["races_won_by_max"] -= 1
                race._settle(host, "this process runs host programs right after MAX ones")
                race.watching = None  # (settled by this rule: no watch, no trial)

    def host_alternative(self) -> str | None:
        """The best host entrant of a settled race, if it is within ``MAX_TAIL_S`` a call of
        MAX's score."""
        return self._host_within_tail(self.scores)

    def _host_within_tail(self, scores: dict) -> str | None:
        host = [k for k in self.entrants if k != "max"]
        if "max" not in self.entrants or not host:
            return None
        best = min(host, key=scores.__getitem__)
        return best if scores[best] <= scores["max"] + self.MAX_TAIL_S else None

    def score(self, name: str) -> float:
        """``name``'s best round's median call (seconds; inf before it ran), or its recalled
        score when the race was settled from a record."""
        if self.scores is not None:
            return self.scores[name]
        t = self.times[name]
        rounds = [t[i : i + self.CALLS] for i in range(0, len(t), self.CALLS)]
        return min((median(r) for r in rounds if r), default=float("inf"))


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


# the count of the agreement the last ``run_program`` call ran its program under, or None
_AGREED: list = [None]


def input_names(impls) -> list | None:
    """``run_program``'s ``made``: across processes, the inputs' common names
    (``TensorImpl.made_name``); None in one process."""
    return [im.made_name for im in impls] if PROCESS.count > 1 else None


def name_outputs(impls, buffers) -> None:
    """After ``run_program``: the outputs of a program run under an agreement get the name
    every process gives them, ``#count.i`` (the agreement's count, every process numbering
    them alike, and the output's position), kept with the buffer they name."""
    count = _AGREED[0]
    if count is not None:
        for i, (im, buf) in enumerate(zip(impls, buffers, strict=True)):
            im.made = Made(buf, f"#{count}.{i}")


def run_program(program: Program, seen: int, inputs: list, made: list | None = None) -> list:
    """Run ``program`` on ``inputs`` (backend buffers) with the selected backend.

    ``made``: across processes, each input's common name (``TensorImpl.made``) or None. An
    agreement on the program covers them, so processes that run the same program on
    different values (read in another order) fail instead of mixing them."""
    _AGREED[0] = None
    if PROCESS.count > 1 and crosses_processes(program):
        program = coalesced(program)
        if mpi.in_agreed_program():  # a nested program: the outer one's digest covers it
            return _run_across(program, seen, inputs)
        instrs = program.instructions
        if len(instrs) == 1 and mpi.agrees_itself(instrs[0].op):
            # one collective (an eager call): its lowering agrees on it, a small one with
            # its data in the same exchange, so the call synchronizes once, not twice
            return _run_across(program, seen, inputs)
        # every process must run this same program: a mismatch is an error, not a deadlock
        what = f"program {_digest(program)} ({len(program.instructions)} ops)"
        if made and any(made):
            what += mpi.ON_VALUES + ", ".join(m or "-" for m in made)
        with mpi.agreed_program(what, lambda: mpi.describe_program(program)):
            count = mpi.agreement_count()
            outs = _run_across(program, seen, inputs)
        _AGREED[0] = count  # (after the run: a nested program's call resets it)
        return outs
    return _run(program, seen, inputs)


def coalesced(program: Program) -> Program:
    """``program`` with its small independent collectives grouped, each group one
    ``mesh_coalesced`` instruction that shares one exchange (``mpi.coalescible``), or
    ``program`` itself when no two can share one. Made once per program.

    A collective joins the open group unless it reads a group member's output (the group
    runs first, then it opens the next); the group runs where the first instruction that
    reads one of its outputs stands (or at the end), so every member moves later, never
    earlier, and what it reads is computed by then. A group also closes when the next
    member's data would overflow the exchange's slots. Every process runs the same program
    and makes the same groups."""
    got = program.executables.get("coalesced")
    if got is None:
        got = program.executables["coalesced"] = _coalesce(program)
    return got


def _coalesce(program: Program) -> Program:
    spec_of = _slot_specs(program)
    capacity = mpi.coalesce_capacity()
    steps: list = []
    ref = {i: i for i in range(program.num_inputs)}  # slot -> build_program ref
    group: list = []  # (instruction, bytes) of the open group
    pending: set = set()  # the open group's outputs

    def emit(op, ins_slots, kwargs, out_specs, outs):
        steps.append((op, tuple(ref[s] for s in ins_slots), kwargs, tuple(out_specs)))
        for i, o in enumerate(outs):
            ref[o] = (len(steps) - 1, i)

    def close():
        if len(group) == 1:
            ins = group[0][0]
            emit(ins.op, ins.inputs, ins.kwargs, ins.out_specs, ins.outputs)
        elif group:
            members = [ins for ins, _ in group]
            kwargs = {
                "mesh": members[0].kwargs["mesh"],
                "parts": tuple(mpi.CoalescedPart(ins.op, ins.kwargs) for ins in members),
                "what": f"{len(members)} collectives sharing one exchange",
            }
            emit(
                "mesh_coalesced",
                [s for ins in members for s in ins.inputs],
                kwargs,
                [spec for ins in members for spec in ins.out_specs],
                [o for ins in members for o in ins.outputs],
            )
        group.clear()
        pending.clear()

    for ins in program.instructions:
        if pending.intersection(ins.inputs):
            close()
        nbytes = 0
        if len(ins.inputs) == 1 and len(ins.outputs) == 1:
            dtype, shape = spec_of[ins.inputs[0]][:2]
            if all(type(d) is int for d in shape):
                nbytes = mpi.coalescible(ins.op, dtype.numpy, tuple(shape), ins.kwargs)
        if nbytes:
            if sum(b for _, b in group) + nbytes > capacity:
                close()
            group.append((ins, nbytes))
            pending.update(ins.outputs)
            continue
        emit(ins.op, ins.inputs, ins.kwargs, ins.out_specs, ins.outputs)
    close()
    if len(steps) == len(program.instructions):
        return program  # no two collectives share an exchange: nothing changed
    inputs = [spec_of[i] for i in range(program.num_inputs)]
    outputs = [ref[s] for s in program.outputs]
    return build_program((program.key, "coalesced"), inputs, steps, outputs, program.symbolic)


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
        exe = program.executables[key] = EXECUTORS[key](program)
    if name in HOST_EXECUTORS:
        inputs = [b if isinstance(b, np.ndarray) else buffer_to_numpy(b) for b in inputs]
        if _small_products(program):  # a helper thread costs more than it brings
            with blas.one_thread():
                return _call(program, name, exe, inputs)
    return _call(program, name, exe, inputs)


def _call(program: Program, name: str, exe, inputs: list) -> list:
    """``exe(inputs)``, timed for the program's race while it runs."""
    if _SETTLED["max"] and not INTERLEAVING.seen:  # only while a MAX win could be moved
        if name == "max":
            try:
                return _call_raced(program, name, exe, inputs)
            finally:
                INTERLEAVING.max_call_ended()
        INTERLEAVING.host_call()
    return _call_raced(program, name, exe, inputs)


def _call_raced(program: Program, name: str, exe, inputs: list) -> list:
    race = program.executables.get("race")
    if race is None or CONFIG.backend != "auto":
        return exe(inputs)
    if race.winner is not None:
        if race.watching is None or name != race.winner:
            return exe(inputs)
        t0 = time.perf_counter()
        outs = exe(inputs)
        race.watch(time.perf_counter() - t0, program)
        return outs
    t0 = time.perf_counter()
    outs = exe(inputs)
    race.record(name, time.perf_counter() - t0, program)
    return outs
