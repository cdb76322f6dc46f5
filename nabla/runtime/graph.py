"""Lazy graph evaluation: pending tensors, evaluate-on-demand, epochs, the program cache.

``GRAPH.evaluate(targets)`` walks back from the requested promise tensors to realized leaves,
collects the nodes in topological order and turns them into a ``Program`` (``nabla.core.ir``:
a flat list of instructions over numbered slots). The program's *structural key* holds, per
node, its static key and where its inputs come from, per leaf (dtype, shape, device), and
which leaves are the same buffer: ``x * y`` after ``x * x`` is a different structure, never a
cache hit. Programs
live in a bounded LRU cache with a count of how often each structure was seen (the ``auto``
tier's signal); each backend attaches its compiled form to the cached program.

Invariants:
- Evaluation stores a value in every target and in every evaluated tensor a user still holds,
  then drops the node of those that no live differentiation can need.
- ``GRAPH.epoch`` increases on every evaluation; ``GRAPH.thread_epoch`` counts the calling
  thread's evaluations only (``compile`` checks that a trace realized nothing with it, so
  other threads' work never turns a trace into a fallback).
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from ..backends import buffer_to_numpy, max_backend
from ..backends.numpy import LOWERINGS as HOST_LOWERINGS
from ..core.config import CONFIG
from ..core.ir import Program, TensorImpl, build_program, post_order
from ..core.sharding import PROCESS
from ..core.state import is_live
from .executor import RACE_STATS, input_names, name_outputs, run_program
from .nans import check_outputs

__all__ = ["GRAPH", "backend_stats", "ConcretizationError"]


class ConcretizationError(RuntimeError):
    """A value was asked of a tensor that has none yet: a placeholder standing for the
    operands of a body that a control-flow construct (``cond``, ``while_loop``, ``scan``...)
    is tracing. Its value exists only when the construct runs."""


_PLACEHOLDER_HINT = (
    "a tensor with no value and no producing op was read; this is what happens when the "
    "value of a tensor inside a cond/switch/while_loop/fori_loop/scan body is asked for while "
    "the body is traced: use nb.cond or nb.where instead of a Python `if` on it, and do not "
    "call .item(), .numpy(), bool() or print on it there"
)


class _PendingWrite(NamedTuple):
    """``GRAPH.note_write``'s record of a tensor written in place with a pending value:
    the tensor, how many such writes in a row, and the value written (both weakly)."""

    tensor: weakref.ref
    count: int
    value: weakref.ref


class PendingSet:
    """The promise tensors not yet realized, held weakly: one weak entry per op node (much
    cheaper on the op hot path than a ``WeakSet`` of tensors), compacted as it grows."""

    def __init__(self):
        self._nodes: list = []
        self._limit = 1024

    def add_node(self, node) -> None:
        self._nodes.append(weakref.ref(node))
        if len(self._nodes) > self._limit:
            self._nodes = [r for r in self._nodes if _has_pending(r())]
            self._limit = max(1024, 2 * len(self._nodes))

    def __iter__(self):
        for r in list(self._nodes):
            node = r()
            if node is None:
                continue
            for ref in node.outputs:
                impl = ref()
                if impl is not None and impl.buffer is None:
                    yield impl

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _has_pending(node) -> bool:
    if node is None:
        return False
    for ref in node.outputs:
        impl = ref()
        if impl is not None and impl.buffer is None:
            return True
    return False


class _Entry:
    """A cached program and how many evaluations used it."""

    __slots__ = ("program", "seen")

    def __init__(self, program: Program):
        self.program = program
        self.seen = 0


class _Graph:
    """The process-wide evaluation state (``nabla.runtime.graph.GRAPH``)."""

    def __init__(self, cache_size: int = 512):
        self.epoch = 0
        self._local = threading.local()
        self.pending = PendingSet()
        self.cache: OrderedDict[tuple, _Entry] = OrderedDict()
        self.cache_size = cache_size
        self.lock = threading.RLock()
        self.stats = {"evaluations": 0, "program_hits": 0, "program_misses": 0}

    @property
    def _writes(self) -> dict:
        """This thread's tensors written in place with a pending value (``note_write``):
        id -> ``_PendingWrite``. Per thread, as the
        evaluations that compute them: another thread's evaluation (inside its own
        ``debug_nans`` block, say) is not this thread's "next evaluation"."""
        try:
            return self._local.writes
        except AttributeError:
            self._local.writes = {}
            return self._local.writes

    @property
    def thread_epoch(self) -> int:
        """How many evaluations the calling thread has run."""
        return getattr(self._local, "epoch", 0)

    # ----------------------------------------------------------------- pending set
    def realize_pending(self) -> None:
        todo = list(self.pending)
        if todo:
            self.evaluate(todo)

    # ----------------------------------------------------------------- in-place writes
    WRITE_CHAIN = 64  # pending writes in a row to one tensor before it is computed

    def note_write(self, tensor) -> None:
        """``tensor`` was just given a pending value in place (a module's running
        statistics, ``x[i] = v``, ``x.add_(v)``). As PyTorch's eager writes happen at the
        call, it is computed with the next evaluation, whatever that reads: a write nothing
        reads (BatchNorm's statistics when the optimizer was given ``parameters()``) had
        kept every step's batch and old weights alive. A tensor written ``WRITE_CHAIN``
        times in a row with nothing evaluated (statistics recalibrated in a loop that reads
        nothing) is computed at once, so its pending chain stays bounded.

        Not across processes: there a read on one process (``if rank == 0``) would take
        the write into its program and not the others', and their next common program
        would no longer agree.

        The value written is what is kept, not the tensor's value at the evaluation: a
        compiled function tracing a write of its own to that tensor gives it a value of
        the trace, which no evaluation may compute (its plan would take it for a
        constant: the function's write lost, its output read before it)."""
        if PROCESS.count > 1:
            return
        key = id(tensor)
        entry = self._writes.get(key)
        count = entry.count + 1 if entry is not None and entry.tensor() is tensor else 1
        if count >= self.WRITE_CHAIN:
            self._writes.pop(key, None)
            self.evaluate([tensor._impl])
            return
        self._writes[key] = _PendingWrite(weakref.ref(tensor), count, weakref.ref(tensor._impl))

    def _written(self) -> list:
        """The pending values written in place since the last evaluation (the record is
        emptied)."""
        entries = self._writes
        if not entries:
            return []
        self._local.writes = {}
        out = []
        for entry in entries.values():
            impl = entry.value()
            if impl is not None and impl.buffer is None and impl.node is not None:
                out.append(impl)
        return out

    # ----------------------------------------------------------------- evaluation
    def evaluate(self, targets: list[TensorImpl]) -> None:
        targets = [t for t in targets if t.buffer is None]
        if not targets:
            return
        with self.lock:
            if self._writes:  # computed with this evaluation (``note_write``)
                targets = targets + self._written()
            # what must be computed, innermost last: a host op (a random draw) runs once its
            # inputs are realized, so those go on top first; a chain of them (a key split at
            # every step and never read) is walked here, not by recursion, which Python's
            # limit stopped at a few hundred
            stack = [targets]
            while stack:
                # (again under the lock: another thread may have computed them meanwhile,
                # which also cleared their nodes)
                todo = [t for t in stack[-1] if t.buffer is None]
                if not todo:
                    stack.pop()
                    continue
                order, host = _topological_order(todo)
                if not host:
                    self._run(order, todo)
                    stack.pop()
                    continue
                blocked = [i for node in host for i in node.inputs if i.buffer is None]
                if blocked:
                    stack.append(blocked)
                else:
                    self._run_host_nodes(host)

    def evaluate_unobserved(self, targets: list[TensorImpl]) -> None:
        """``evaluate``, left out of the calling thread's ``thread_epoch``: for values no
        running trace depends on (a tensor made lazily before a trace began, computed
        while a compiled function inside it builds its plan), which the enclosing trace
        must not take for its function realizing a value."""
        local = self._local
        before = getattr(local, "epoch", 0)
        try:
            self.evaluate(targets)
        finally:
            local.epoch = before

    def _run(self, order: list, targets: list[TensorImpl]) -> None:
        """Compute ``targets`` by the nodes ``order`` (no host op among them) as one program."""
        structure = _Structure.of(order, targets)
        entry = self._entry(structure, order)
        self.epoch += 1
        self._local.epoch = getattr(self._local, "epoch", 0) + 1
        self.stats["evaluations"] += 1
        leaves = [leaf.buffer for leaf in structure.leaves]
        outs = run_program(entry.program, entry.seen, leaves, input_names(structure.leaves))
        name_outputs(structure.stored, outs)
        for impl, value in zip(structure.stored, outs, strict=True):
            impl.buffer = value
            if not is_live(impl.traced):
                impl.node = None
        if CONFIG.debug_values:  # nb.debug_nans: find the op
            check_outputs(entry.program, leaves, outs, order)

    def _run_host_nodes(self, nodes) -> None:
        """Run host ops (random draws) with NumPy; their inputs are realized."""
        for node in nodes:
            args = [buffer_to_numpy(i.buffer) for i in node.inputs]
            outs = HOST_LOWERINGS[node.op.backend_name](args, node.phys_kwargs)
            for ref, value, (dtype, _) in zip(node.outputs, outs, node.out_specs, strict=True):
                impl = ref()
                if impl is not None and impl.buffer is None:
                    impl.buffer = np.asarray(value, dtype=dtype.numpy)
                    if not is_live(impl.traced):
                        impl.node = None

    def _entry(self, structure: _Structure, order: list) -> _Entry:
        """The cached program of ``structure`` (made from ``order`` on a miss), counted as
        seen once more."""
        key = structure.key
        entry = self.cache.get(key)
        if entry is not None:
            self.cache.move_to_end(key)
            self.stats["program_hits"] += 1
        else:
            self.stats["program_misses"] += 1
            entry = _Entry(_make_program(structure, order))
            self.cache[key] = entry
            if len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        entry.seen += 1
        return entry

    def programs(self) -> list[Program]:
        """The cached programs, least recently used first."""
        return [e.program for e in self.cache.values()]

    def seen(self, program: Program) -> int:
        """How many evaluations used the cached ``program`` (0 when not cached)."""
        entry = self.cache.get(program.key)
        return entry.seen if entry is not None and entry.program is program else 0

    def clear_cache(self) -> None:
        with self.lock:
            self.cache.clear()


def _unrealized_inputs(node) -> list | None:
    """The producers of ``node``'s unrealized inputs; ``None`` for a host-only node (its
    inputs must be realized before it runs)."""
    if node.op.host_only:
        return None
    kids = []
    for inp in node.inputs:
        if inp.buffer is None:
            if inp.node is None:
                raise ConcretizationError(_PLACEHOLDER_HINT)
            kids.append(inp.node)
    return kids


def _topological_order(targets: list[TensorImpl]) -> tuple[list, list]:
    """The unrealized op nodes the targets need, each after the nodes of its inputs, and the
    host-only nodes among them (the walk stops there: their outputs must be realized first,
    and ``order`` is then incomplete)."""
    roots = [t.node for t in targets]
    if None in roots:
        raise ConcretizationError(_PLACEHOLDER_HINT)
    return post_order(roots, _unrealized_inputs)


_OWN_REFS = 3  # references to an output while ``_Structure.of`` weighs it: its own


class _Structure(NamedTuple):
    """An ordered subgraph read as a program: its cache key and what the run needs.

    A node's input refs are ``-1 - leaf`` for a realized leaf, else the running number of
    the node output (over all nodes' outputs, in order) that produces it."""

    key: tuple
    node_keys: list  # per node: (node.key, input refs)
    leaves: list  # the realized TensorImpls read, in first-use order
    leaf_specs: tuple  # (dtype, buffer_shape, device) per leaf
    stored: list  # the TensorImpls that receive a value: targets, those a user holds and
    # those a pending op outside the program reads (``of``)
    stored_refs: list  # the output number of each stored impl

    @classmethod
    def of(cls, order: list, targets: list[TensorImpl]) -> _Structure:
        """The structure of the nodes ``order`` (topologically sorted) computing ``targets``.

        Besides the targets and the values a user holds, an intermediate that something
        outside the program still references (a pending op that reads it, as the next
        step's parameters read this step's in a functional loop that rebinds ``params``)
        keeps its value: dropped, every later evaluation computed it again, and such a loop
        took time growing with its step count. Its references are counted: the program's
        own nodes that read it, and this function's."""
        leaves: list[TensorImpl] = []
        leaf_idx: dict[int, int] = {}
        out_slot: dict[int, int] = {}  # id(impl) -> node-output number
        uses: dict[int, int] = {}  # id(impl) -> how many of the program's inputs read it
        target_ids = {id(t) for t in targets}
        outs: list = []  # (impl, node-output number) of every live output
        node_keys = []
        n_out = 0
        for node in order:
            refs = []
            for inp in node.inputs:
                if inp.buffer is not None:
                    i = leaf_idx.get(id(inp))
                    if i is None:
                        i = leaf_idx[id(inp)] = len(leaves)
                        leaves.append(inp)
                    refs.append(-1 - i)
                else:
                    refs.append(out_slot[id(inp)])
                    uses[id(inp)] = uses.get(id(inp), 0) + 1
            node_keys.append((node.key, tuple(refs)))
            for ref in node.outputs:
                impl = ref()
                slot = n_out
                n_out += 1
                if impl is None:
                    continue
                out_slot[id(impl)] = slot
                outs.append((impl, slot))
        inp = impl = None  # (the loops' last items: references the count below must not see)
        stored: list[TensorImpl] = []
        stored_refs: list[int] = []
        for impl, slot in outs:
            if (
                id(impl) in target_ids
                or (impl.wrapper is not None and impl.wrapper() is not None)
                # beyond ``outs``'s, the loop's and getrefcount's own: read from outside
                or sys.getrefcount(impl) > _OWN_REFS + uses.get(id(impl), 0)
            ):
                stored.append(impl)
                stored_refs.append(slot)
        leaf_specs = tuple((leaf.dtype, leaf.buffer_shape, leaf.device) for leaf in leaves)
        # a sharded leaf's buffer holds blocks: its sharding is part of the structure
        shardings = tuple(leaf.sharding for leaf in leaves if leaf.sharding is not None)
        key = (tuple(node_keys), leaf_specs, tuple(stored_refs), shardings)
        return cls(key, node_keys, leaves, leaf_specs, stored, stored_refs)


def _make_program(structure: _Structure, order: list) -> Program:
    """The Program of ``structure``, whose nodes are ``order``."""
    step_of_out = []  # running output number -> (step, output index)
    steps = []
    for k, (node, (nkey, refs)) in enumerate(zip(order, structure.node_keys, strict=True)):
        ins = tuple(-1 - r if r < 0 else step_of_out[r] for r in refs)
        steps.append((nkey[0], ins, node.phys_kwargs, node.out_specs))
        step_of_out.extend((k, i) for i in range(len(node.outputs)))
    outputs = [step_of_out[r] for r in structure.stored_refs]
    return build_program(structure.key, structure.leaf_specs, steps, outputs)


GRAPH = _Graph()


def backend_stats() -> dict:
    """Counters of the execution layer (``nb.backend_stats()``).

    Returns:
        A dict: ``evaluations``, ``program_hits``/``program_misses`` (structural cache),
        ``programs_cached``, ``races_won_by_max``/``races_won_by_numpy`` (hot programs the
        ``auto`` tier settled on an executor, by the winner), ``races_recalled`` (those of
        them settled from an earlier process's race, ``runtime/race_records.py``),
        ``races_moved_by_watch`` (programs moved to another executor once the winner's
        steady calls were timed, ``Race.watch``), and when MAX is installed
        ``max_*`` counters: compiles,
        compile seconds, memory/disk cache hits, disk load seconds, background compiles and
        programs MAX could not run.
    """
    out = dict(GRAPH.stats)
    out["programs_cached"] = len(GRAPH.cache)
    out.update(RACE_STATS)
    mx = max_backend()
    if mx is not None:
        out.update({f"max_{k}": v for k, v in mx.stats().items()})
    return out
