"""Collectives across processes with MPI (``mpi4py``): the ``mesh_*`` lowerings of a mesh whose
devices span processes.

A sharded buffer in process ``p`` holds only the blocks of its devices: the mesh dims of the
buffer are the process's box of the mesh (``DeviceMesh.local_box``). Ordinary ops run on that
slab unchanged; only the ``mesh_*`` ops move data between devices, so only they are replaced
here (``activate`` installs this module's table over the NumPy interpreter's entries). Each
one works on the mesh dims it names (``axes``): the processes whose boxes differ only along
those dims form a group (an MPI sub-communicator made once per mesh and axes), and

- ``mesh_reduce`` reduces the process's own devices first, then ``Allreduce``s in place;
- ``mesh_reduce_scatter`` and ``mesh_all_to_all`` are one ``Reduce_scatter_block`` or
  ``Alltoall`` when each process holds one device along ``axes`` (the usual layout);
  otherwise the first is an ``Allreduce`` after which each device keeps its block, the second
  goes the ``Allgather`` way below;
- ``mesh_gather``/``mesh_select``/``mesh_unshard`` (and ``mesh_all_to_all`` otherwise)
  ``Allgather`` the group's slabs into the box widened along ``axes``, run the
  single-process lowering on it and keep the process's own devices;
- ``mesh_slice`` needs no exchange: every device along ``axes`` already holds the value,
  each keeps its block;
- ``mesh_permute`` sends each block to the process of its destination (``Isend``/``Irecv``);
- ``mesh_shard``/``mesh_iota`` build the process's devices only.

When every process runs on one machine (the usual case; ``NABLA_MPI_SHARED=0`` turns it
off), ``activate`` maps one MPI shared-memory window into every process, and exchanges go
through it (``_SharedExchange``): each process writes its slot, posts a count, and reads the
others' slots in place. ``mesh_reduce``, ``mesh_reduce_scatter`` and ``mesh_gather`` with
one device per process along ``axes`` then move their data that way, with no MPI call,
each process reducing its group's slots in rank order (a reduce-scatter writes only the
blocks the others keep). A gather past 512 KiB per process reads each peer's block straight
out of the peer's memory instead (``_PeerReader``, where every process can: one copy, where
the slots take two); without that reader, gathers past 4 MiB take MPI's ``Allgather``.

Safety: before every program that communicates (``agreed_program``, from the runtime), and
before a collective run outside one, the processes agree on what it is (a 64-bit digest of a
running count and the program's ops and shapes, or the op, its kwargs and the local shape
and dtype). Every agreement exchanges one fixed-size slot per process (4 MiB of room in
shared memory; 4 KiB, one ``Iallgather``, over MPI alone), so a collective run alone (an
eager call) whose data fit in it sends them in the same exchange and costs one
synchronization, not two; a larger one runs its MPI call after the agreement. An eager
collective of a realized buffer (``now_function``, called from the op's bind instead of building
a graph) whose data fit the slot sends them in the agreement as the lazy path does (the same
result, one exchange); a larger one runs its MPI collective on the buffer itself after the
agreement (over MPI alone: posted beside it, nonblocking). A
mismatch raises ``DistributedError`` on every process naming the first op that differs and
its shapes and dtypes on each process (the processes exchange a line per op,
``describe_program``, only then); a process that
never arrives makes the others abort after ``NABLA_MPI_TIMEOUT`` seconds (default 300; a
number > 0, checked when nabla is imported).
``activate`` also makes an uncaught exception on any process abort every process
(``MPI_Abort``) instead of leaving the others waiting.

Only ``nabla.backends.mpi`` imports ``mpi4py``, and only when ``activate`` is called.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import math
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..core.config import CONFIG
from ..core.sharding import PROCESS
from .numpy import LOWERINGS as HOST
from .numpy import lowerings as host

__all__ = [
    "DistributedError",
    "activate",
    "world",
    "LOWERINGS",
    "agree",
    "agreed_program",
    "CoalescedPart",
    "coalesce_capacity",
    "coalescible",
    "describe_program",
    "first_difference",
    "in_agreed_program",
    "agreement_count",
    "now_function",
    "read_value",
    "barrier",
    "broadcast_object",
]


class DistributedError(RuntimeError):
    """The processes of one SPMD program disagree (a different collective, shape or dtype on
    some process), or MPI is needed and missing."""


@dataclass(slots=True)
class _MPIState:
    """This process's MPI state (one per process; the watchdog thread reads ``watch``)."""

    comm: Any = None  # the world communicator, once ``activate`` ran
    MPI: Any = None  # the ``mpi4py.MPI`` module
    count: int = 0  # collectives agreed so far (part of each agreement's digest)
    groups: dict = field(default_factory=dict)  # _Group -> (sub-communicator, members)
    hook: Any = None  # the excepthook ``activate`` replaced
    depth: int = 0  # nesting of agreed programs running now
    watch: tuple | None = None  # (deadline, what) of the wait the watchdog guards
    watchdog: threading.Thread | None = None
    tags: int = 0  # point-to-point tag counter (ppermute)
    timeout: float = 300.0  # NABLA_MPI_TIMEOUT, read by ``activate``
    exchange: Any = None  # the agreements' transport (_SharedExchange or _MPIExchange)


_STATE = _MPIState()

LOWERINGS: dict = {}


def world():
    """The world communicator once ``activate`` ran, else None."""
    return _STATE.comm


def timeout() -> float:
    """``NABLA_MPI_TIMEOUT``: the seconds a process waits at a collective for the others
    before aborting every process (default 300).

    Raises:
        ValueError: naming the variable and its value unless it is a number > 0 (checked
            when nabla is imported and again by ``activate``).
    """
    raw = os.environ.get("NABLA_MPI_TIMEOUT")
    if raw is None or not raw.strip():
        return 300.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 0:  # NaN too: it would never time out
        raise ValueError(
            f"NABLA_MPI_TIMEOUT must be a number of seconds > 0 (e.g. 300), got {raw!r}"
        )
    return value


timeout()  # a bad setting fails the import, not the first collective


# launchers set one of these in every process they start
_LAUNCHER_VARS = (
    "PMI_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMIX_RANK",
    "SLURM_NTASKS",
    "MPI_LOCALNRANKS",
)


def launched_by_mpi() -> bool:
    """Whether an MPI launcher (``mpiexec``, ``srun``) started this process among several:
    read from the environment it sets, before (or without) ``activate``."""
    for var in _LAUNCHER_VARS:
        try:
            if int(os.environ.get(var, "1")) > 1:
                return True
        except ValueError:
            continue
    return "PMIX_RANK" in os.environ


def active() -> bool:
    """Whether ``activate`` ran: collectives go over MPI."""
    return _STATE.comm is not None


def activate(comm=None) -> None:
    """Run collectives over MPI from now on: records this process's rank and size in
    ``core.sharding.PROCESS``, installs the cross-process ``mesh_*`` lowerings and makes an
    uncaught exception abort every process."""
    from mpi4py import MPI  # noqa: PLC0415 - imported only when running distributed

    _STATE.timeout = timeout()  # checked again: the environment may have changed
    comm = MPI.COMM_WORLD if comm is None else comm
    if _STATE.exchange is None or comm is not _STATE.comm:
        if _STATE.exchange is not None:
            _STATE.exchange.close()
        capacity = _shared_capacity(comm, MPI) if comm.Get_size() > 1 else 0
        shared = _SharedExchange(comm, MPI, capacity) if capacity else None
        _STATE.exchange = shared or _MPIExchange(comm)
        _LANES.clear()  # their views are into the previous transport's slots
    _STATE.comm, _STATE.MPI, _STATE.count, _STATE.groups = comm, MPI, 0, {}
    PROCESS.set(comm.Get_rank(), comm.Get_size())
    if comm.Get_size() > 1:
        HOST.update(LOWERINGS)
        if _STATE.hook is None:
            _STATE.hook = sys.excepthook
            sys.excepthook = _abort_on_exception
            threading.excepthook = lambda a: _abort_on_exception(
                a.exc_type, a.exc_value, a.exc_traceback
            )
        if _STATE.watchdog is None:
            _STATE.watchdog = threading.Thread(target=_watchdog, daemon=True)
            _STATE.watchdog.start()
            atexit.register(_at_exit)  # Python's exit hooks run before mpi4py finalizes MPI


def _abort(message: str, code: int) -> None:
    """Print ``message`` and end every process. The pause lets the launcher forward the
    message before MPI kills the job."""
    os.write(2, message.encode())
    time.sleep(0.2)
    _STATE.comm.Abort(code)


def _abort_on_exception(kind, value, tb):
    """An uncaught exception on one process ends all of them (a bounded failure, never a
    hang): print it with the process index, then ``MPI_Abort``."""
    text = "".join(traceback.format_exception(kind, value, tb))
    sys.stderr.flush()
    _abort(
        f"[nabla process {PROCESS.index}/{PROCESS.count}] uncaught exception; aborting every "
        f"process:\n{text}",
        1,
    )


class _watch:
    """Context: a blocking MPI call is running; the watchdog thread aborts every process if
    it lasts longer than ``NABLA_MPI_TIMEOUT`` (a peer stopped, or runs another program).
    ``what`` is a string or a callable making one (formatted only on a timeout)."""

    __slots__ = ("what",)

    def __init__(self, what):
        self.what = what

    def __enter__(self):
        _STATE.watch = (time.monotonic() + _STATE.timeout, self.what)

    def __exit__(self, *exc):
        _STATE.watch = None


def _watchdog() -> None:
    while True:
        time.sleep(0.1)
        watch = _STATE.watch
        if watch is not None and time.monotonic() > watch[0]:
            what = watch[1]() if callable(watch[1]) else watch[1]
            _abort(
                f"[nabla process {PROCESS.index}/{PROCESS.count}] waited {_STATE.timeout:.0f} s at "
                f"collective {what} for the other processes (NABLA_MPI_TIMEOUT); one of them "
                "stopped or runs a different program: aborting every process\n",
                3,
            )


# Every agreement is one exchange of a fixed-size slot per process: a 64-bit digest, then
# room for a collective's data. Each process's k-th exchange meets every other process's
# k-th, whatever they are at, so processes at different collectives (or one with data, one
# without) see the mismatch in the digests: never a hang or a truncated receive. A
# collective whose data fit the slot sends them in the same exchange (one synchronization,
# not two). Two transports carry the exchanges:
#
# - ``_SharedExchange`` when every process runs on one machine (the usual case here): each
#   process's slots live in one MPI shared-memory window that every process maps. A process
#   writes its slot, then a count saying which exchange it holds; the others wait for the
#   count and read the slot in place. Slots alternate between two sets, so a process can
#   write exchange k + 1 while a slow peer still reads exchange k; it cannot get to k + 2
#   before every peer posted k + 1, i.e. finished reading k. The slots hold up to
#   ``_SHARED_BYTES`` (4 MiB) each; a collective's data go up to 512 KiB per exchange
#   (larger ones in pieces, ``_chunked_allreduce``), with no MPI call at all: measured here
#   (2 processes), 256 KiB sums in 45-100 us against MPI's 190-320 us, 1 KiB in 3 us
#   against 6 us.
# - ``_MPIExchange`` otherwise (processes on several machines, or ``NABLA_MPI_SHARED=0``):
#   one ``Iallgather`` of a 4 KiB slot per process.
_PAYLOAD_MAX = 4096
_SLOT = 8 + _PAYLOAD_MAX
_SHARED_BYTES = 4 << 20
# One exchange carries up to 512 KiB of a collective's data per process; larger reductions
# go a piece of 512 KiB per exchange; larger gathers read the peers' blocks in place
# (``_single_copy_gather``), or without that go in pieces too up to 4 MiB, above which MPI's
# own Allgather copies less (``_chunked_allreduce``, measured there).
_SHARED_REDUCE_BYTES = 1 << 19
_SHARED_GATHER_BYTES = 1 << 19
_PIECEWISE_GATHER_BYTES = 4 << 20
_LINE = 64  # a count or a digest keeps a cache line to itself


class _MPIExchange:
    """Exchanges over MPI: one ``Iallgather`` of every process's fixed-size slot."""

    shared = False
    capacity = _PAYLOAD_MAX
    reader = None  # no process reads another's memory between machines

    def __init__(self, comm):
        size = comm.Get_size()
        self.comm = comm
        self.mine = np.zeros(_SLOT, np.uint8)
        self.every = np.zeros(size * _SLOT, np.uint8)
        self.digest = self.mine[:8].view(np.uint64)
        self.heads = self.every.view(np.uint64)[:: _SLOT // 8]
        rows = self.every.reshape(size, _SLOT)
        self.rows = [rows[p, 8:] for p in range(size)]

    def parity(self) -> int:
        """Which set of slots the next exchange uses (always the one set here)."""
        return 0

    def outgoing(self, parity: int) -> np.ndarray:
        """This process's payload bytes for the next exchange (write them before it)."""
        return self.mine[8:]

    def incoming(self, parity: int) -> list:
        """Every process's payload bytes once the exchange completed, one array each."""
        return self.rows

    def post(self, digest: int):
        """Start the exchange with this process's ``digest``: its MPI request."""
        self.digest[0] = digest
        return self.comm.Iallgather(self.mine, self.every)

    def run(self, digest: int, what) -> None:
        """The exchange, start to end (waiting without spinning for long; ``what`` names
        it for the watchdog)."""
        request = self.post(digest)
        if not request.Test():
            _wait_watched(request.Test, what)

    def digests(self, parity: int) -> list:
        """Every process's digest in the exchange that completed."""
        return self.heads.tolist()

    def agreed(self, parity: int, digest: int) -> bool:
        """Whether every process's digest in the exchange that completed is ``digest``."""
        return bool((self.heads == digest).all())

    def close(self) -> None:
        pass


class _SharedExchange:
    """Exchanges through an MPI shared-memory window: per process a count (the last
    exchange it posted), then two slots, each a digest and ``capacity`` payload bytes."""

    shared = True

    def __init__(self, comm, MPI, capacity: int):
        size, me = comm.Get_size(), comm.Get_rank()
        slot = _LINE + _PAGE + capacity  # (a page of room to place the payload in it)
        region = _LINE + 2 * slot
        self.win = MPI.Win.Allocate_shared(region, 1, comm=comm)
        regions = [
            np.frombuffer(self.win.Shared_query(p)[0], np.uint8, count=region) for p in range(size)
        ]
        self.win.Lock_all()  # one passive epoch for the window's life: Sync is the fence
        self.capacity, self.me, self.count = capacity, me, 0
        self.posted = _word(regions[me])
        self.others = [_word(r) for p, r in enumerate(regions) if p != me]
        slots = [[r[_LINE + j * slot : _LINE + (j + 1) * slot] for r in regions] for j in (0, 1)]
        self.heads = [[_word(s) for s in both] for both in slots]
        self.mine = [self.heads[0][me], self.heads[1][me]]
        self.rows = [[_placed(s[_LINE:], capacity) for s in both] for both in slots]
        self.posted[0] = 0
        self.win.Sync()
        comm.Barrier()  # every count is zero before anyone posts
        self.reader = _peer_reader(comm, MPI)  # (a collective call too)

    def parity(self) -> int:
        return (self.count + 1) & 1

    def outgoing(self, parity: int) -> np.ndarray:
        return self.rows[parity][self.me]

    def incoming(self, parity: int) -> list:
        return self.rows[parity]

    def run(self, digest: int, what) -> None:
        k = self.count + 1
        self.mine[k & 1][0] = digest
        self.win.Sync()  # the slot's bytes are visible before the count that announces them
        self.posted[0] = k
        self.count = k
        others = self.others
        for count in others:
            if count[0] < k:
                if len(others) == 1:  # (two processes: one count to test, ~5x cheaper)
                    _wait_watched(lambda: count[0] >= k, what)
                else:
                    _wait_watched(lambda: all(c[0] >= k for c in others), what)
                break
        self.win.Sync()  # and read after the peers' counts

    def digests(self, parity: int) -> list:
        return [int(h[0]) for h in self.heads[parity]]

    def agreed(self, parity: int, digest: int) -> bool:
        for head in self.heads[parity]:
            if head[0] != digest:
                return False
        return True

    def close(self) -> None:
        self.win.Unlock_all()
        self.win.Free()


def _word(room: np.ndarray) -> memoryview:
    """The first 8 bytes of ``room`` as one unsigned 64-bit word (a count or a digest):
    a memoryview, whose item reads and writes are Python ints (~2x quicker than a NumPy
    scalar's, and an eager call makes several)."""
    return memoryview(room[:8]).cast("Q")


# A gather past the agreement's slot reads each peer's block straight out of the peer's
# memory (Linux's cross-memory attach, ``process_vm_readv``, as MPI libraries' single-copy
# transports do): one copy per block, where the shared slots take two (into a slot, out of
# it) and this MPI's ``Allgather`` two as well. ``activate`` checks that every process can
# read every other's memory (same user, no ptrace restriction, one PID namespace) and
# turns it off everywhere if one cannot; ``NABLA_MPI_SINGLE_COPY=0`` turns it off.
class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _PeerReader:
    """Copies bytes out of another process's memory (``process_vm_readv``)."""

    def __init__(self, call, pids: list):
        self.call, self.pids = call, pids
        self.here, self.there = _IOVec(), _IOVec()
        self.here_ref, self.there_ref = ctypes.byref(self.here), ctypes.byref(self.there)

    def read(self, process: int, address: int, into: np.ndarray) -> None:
        """``into.nbytes`` bytes from ``address`` in world process ``process`` into
        ``into`` (C-contiguous).

        Raises:
            DistributedError: naming the process, the bytes and the system's reason when
                the read fails.
        """
        total, base, done = into.nbytes, into.ctypes.data, 0
        while done < total:  # (a read stops short only at an unmapped page: then it fails)
            self.here.base, self.here.len = base + done, total - done
            self.there.base, self.there.len = address + done, total - done
            got = self.call(self.pids[process], self.here_ref, 1, self.there_ref, 1, 0)
            if got <= 0:
                reason = os.strerror(ctypes.get_errno()) if got < 0 else "nothing read"
                raise DistributedError(
                    f"reading {total} bytes of a gather's block out of process {process} "
                    f"failed ({reason}); NABLA_MPI_SINGLE_COPY=0 gathers through shared "
                    "memory instead"
                )
            done += got


_PROBE_MAGIC = 0x6E61626C61  # what each process's probe word holds, plus its rank


def _peer_reader(comm, MPI):
    """A ``_PeerReader`` when every process can read every other's memory, else None: the
    same answer on every process (a collective call; each keeps its probe word alive until
    every read of it is done)."""
    rank = comm.Get_rank()
    probe = np.array([_PROBE_MAGIC + rank], np.uint64)
    call = None
    if CONFIG.mpi_single_copy and sys.platform.startswith("linux"):
        try:
            call = ctypes.CDLL(None, use_errno=True).process_vm_readv
        except (OSError, AttributeError):
            call = None
    if call is not None:
        call.restype = ctypes.c_ssize_t
        call.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong]
        call.argtypes += [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    every = comm.allgather((os.getpid(), probe.ctypes.data))
    reader = None if call is None else _PeerReader(call, [pid for pid, _ in every])
    works = reader is not None
    got = np.zeros(1, np.uint64)
    for p, (_, address) in enumerate(every):
        if works and p != rank:
            try:
                reader.read(p, address, got)
            except DistributedError:
                works = False
            works = works and int(got[0]) == _PROBE_MAGIC + p
    works = comm.allreduce(works, op=MPI.LAND)
    return reader if works else None


# A slot's payload starts 2 KiB + 16 bytes into a page: large arrays from the allocator start
# 16 bytes into theirs, so the copy into the slot and the reductions out of it (into receive
# buffers placed half a page from it, ``_out_buffer``) never have stores trailing loads by a
# few bytes modulo 4 KiB (4K aliasing, below). The placement is the same in every process's
# mapping (a mapping starts on a page).
_PAYLOAD_PHASE = 2048 + 16


def _placed(room: np.ndarray, capacity: int) -> np.ndarray:
    """``capacity`` bytes of ``room`` (at least a page more) starting at the payload phase."""
    skip = (_PAYLOAD_PHASE - room.ctypes.data) % _PAGE
    return room[skip : skip + capacity]


def _shared_capacity(comm, MPI) -> int:
    """The payload bytes per slot of a shared-memory exchange, or 0 for none: processes on
    several machines, ``NABLA_MPI_SHARED=0``, or too little room in ``/dev/shm`` (the whole
    window kept under an eighth of what is free there; the same answer on every process)."""
    if not CONFIG.mpi_shared:
        return 0
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        one_machine = node.Get_size() == comm.Get_size()
    finally:
        node.Free()
    if not one_machine:
        return 0
    capacity = _SHARED_BYTES
    if comm.Get_rank() == 0:
        try:
            stat = os.statvfs("/dev/shm")
            free = stat.f_bavail * stat.f_frsize
        except OSError:  # no /dev/shm: the MPI library finds its own place
            free = None
        if free is not None:
            room = free // (8 * 2 * comm.Get_size())
            capacity = min(capacity, room // _PAGE * _PAGE)
    capacity = comm.bcast(capacity, root=0)
    return capacity if capacity >= _APART_MIN_BYTES else 0


# An agreement's digest: a 64-bit hash of its text (kept per text: an eager collective or a
# program agrees on the same text every time) plus the running count times an odd constant,
# so a skipped collective changes every later digest.
_HASHES: dict = {}
_COUNT_MIX = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


def _hash(what: str) -> int:
    got = _HASHES.get(what)
    if got is None:
        if len(_HASHES) >= 4096:
            _HASHES.clear()
        digest = hashlib.blake2b(what.encode(), digest_size=8).digest()
        got = _HASHES[what] = int.from_bytes(digest, "little")
    return got


def agree(what: str, describe=None, payload: np.ndarray | None = None):
    """Every process must be at the same collective: compare digests of ``what`` (with a
    running count, so a skipped collective is caught too).

    ``payload`` (a C-contiguous array of at most ``_payload_max()`` bytes, the same size on
    every process once they agree) travels in the same exchange: the result is then every
    process's payload bytes, one array per process (views valid until the next exchange);
    else None.

    On a mismatch (every process sees one, so all take this path together) the processes
    exchange their descriptions, ``describe()`` (one line per op: :func:`describe_program`)
    or ``what`` itself, and the error names the first op that differs, as each process has
    it; no payload is used."""
    ex = _STATE.exchange
    parity = ex.parity()
    if payload is not None:
        nbytes = payload.nbytes
        ex.outgoing(parity)[:nbytes] = payload.reshape(-1).view(np.uint8)
    digest = _counted_digest(what)
    count = _STATE.count
    # the agreement is where a process waits for late peers (the name is made only when
    # the watchdog needs it)
    ex.run(digest, lambda: f"#{count} {what}")
    if not ex.agreed(parity, digest):
        _checked(f"#{count} {what}", describe, ex.digests(parity), digest)
    return None if payload is None else [row[:nbytes] for row in ex.incoming(parity)]


def _payload_max(gather: bool = False) -> int:
    """The most bytes per process a collective's data may have to travel in its agreement
    (for a gather, to be worth it)."""
    ex = _STATE.exchange
    return min(ex.capacity, _SHARED_GATHER_BYTES if gather else _SHARED_REDUCE_BYTES)


def _counted_digest(what: str) -> int:
    """Count the next agreement (``_STATE.count``, which names it ``#count what``) and
    return its digest."""
    _STATE.count += 1
    return (_hash(what) + _STATE.count * _COUNT_MIX) & _MASK64


def _checked(what: str, describe, digests: list, mine: int) -> None:
    """Raises ``DistributedError`` (``agree``'s docstring) when another process's digest of
    the exchange that completed (``digests``, one per process) differs from ``mine``."""
    size = len(digests)
    if digests.count(mine) != size:
        differ = [r for r in range(size) if digests[r] != mine]
        lines = list(describe()) if describe is not None else [what]
        with _watch(f"{what} (exchanging the programs to name the difference)"):
            theirs = _STATE.comm.allgather((what, lines))
        raise DistributedError(
            f"process {PROCESS.index} is at collective {what}, but processes {differ} are at "
            "a different collective or with other shapes/dtypes: every process must run the "
            "same program (same ops, shapes and shardings) in the same order; "
            + first_difference(PROCESS.index, theirs)
            + _advice([w for w, _ in theirs])
        )


_IN_PROGRAM = "a collective inside an agreed program"


def _shared_rows(*sends: np.ndarray) -> list:
    """Inside an agreed program (or after its own agreement), on the shared-memory
    exchange: every process's ``sends`` (C-contiguous arrays, one after the other, at most
    ``_payload_max()`` bytes in all) as bytes, one array per process, through one exchange.
    The program's agreement covered what it is; the fixed digest still catches a peer
    that left the program (it caught an error) and is at an agreement instead: both
    raise, never reading the other's data."""
    ex = _STATE.exchange
    parity = ex.parity()
    out, nbytes = ex.outgoing(parity), 0
    for send in sends:
        out[nbytes : nbytes + send.nbytes] = send.reshape(-1).view(np.uint8)
        nbytes += send.nbytes
    _exchange_in_program(ex, parity)
    return [row[:nbytes] for row in ex.incoming(parity)]


def _exchange_in_program(ex, parity: int, what=_IN_PROGRAM) -> None:
    """The shared-memory exchange of a collective inside an agreed program, its payload
    already in this process's slot ``parity``: under the fixed digest (``_shared_rows``).
    ``what`` names it for the watchdog (unless the caller's watch names it already)."""
    digest = _hash(_IN_PROGRAM)
    ex.run(digest, what)
    if not ex.agreed(parity, digest):
        _checked(_IN_PROGRAM, None, ex.digests(parity), digest)


# The agreement before each program is where a process waits for late peers (one still
# computing, reading a file, or reading a value alone). A blocking MPI wait (MPICH's) polls
# for as long as the wait lasts, about half of it in the kernel (measured here: 0.43 s sys
# of 0.98 s CPU waiting 2 s for a late peer). The loop below tests back to back for 50 us (a
# peer that is already there answers within microseconds), then yields the core between
# tests up to 5 ms (a peer descheduled on a busy machine gets it sooner), then sleeps, the
# sleep doubling up to 1 ms: a late peer costs no CPU, while one that arrives within a few
# ms is seen at once (a waiter already asleep would delay the collective that follows for
# the whole group). The data collectives after an agreement stay blocking: every process is
# there by then, and on a busy machine testing or yielding through a transfer was slower.
_SPIN_S = 50e-6
_YIELD_S = 5e-3
_MAX_SLEEP_S = 1e-3


def _wait(ready) -> None:
    """Wait until ``ready()`` (an MPI request's ``Test``, or a test of the peers' counts)
    without using the CPU for long: test back to back for 50 us, then with ``sched_yield``
    between tests up to 5 ms, then with sleeps doubling from 50 us to 1 ms between tests."""
    if ready():
        return
    start = time.perf_counter()
    while time.perf_counter() - start < _SPIN_S:
        if ready():
            return
    while time.perf_counter() - start < _YIELD_S:
        _yield()
        if ready():
            return
    pause = 50e-6
    while not ready():
        time.sleep(pause)
        pause = min(2 * pause, _MAX_SLEEP_S)


_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


def _wait_watched(ready, what) -> None:
    """``_wait(ready)`` under the watchdog (``_watch``), naming the wait ``what`` (a string
    or a callable making one) unless a caller's watch already names it. An exchange sets
    the watch only when it has to wait: a peer that posted first costs no clock read."""
    outer = _STATE.watch
    if outer is None:
        _STATE.watch = (time.monotonic() + _STATE.timeout, what)
    try:
        _wait(ready)
    finally:
        _STATE.watch = outer


_READ = "read of "
_END = "the end of the program"


def _advice(whats: list) -> str:
    """What to do about a mismatch that involves reading a value or a finished process."""
    text = ""
    if any(_END in w for w in whats):
        text += "; a process finished the program while the others still wait at a collective"
        if not any(_READ in w for w in whats):
            text += (
                " (a lazy value on a mesh that spans processes, even a replicated one, is "
                "computed by a program every process must run: nb.realize(x) on every "
                "process, then read it on one)"
            )
    if any(_READ in w for w in whats):
        text += (
            "; reading a value that spans processes (.numpy(), .item(), print) is a "
            "collective: every process must read it, or read a value this process holds "
            "whole (a replicated one: compiled steps return their reduced outputs "
            "replicated, and nb.reshard(x, mesh, P()) on every process makes one), or read "
            "only this process's blocks with x.addressable_shards"
        )
    return text


def read_value(label: str, blocks: np.ndarray, kw: dict) -> np.ndarray:
    """The global value of sharded ``blocks`` (``mesh_unshard``'s kwargs ``kw``, with its
    ``mesh``) gathered from every process: a collective every process must call. ``label``
    names the value in the agreement, so a process that reads alone gets an error saying
    which value and what to do instead of waiting for the others."""
    if not _STATE.depth:  # (inside an agreed program its digest covers the read)
        agree(f"{_READ}{label}")
    _STATE.depth += 1
    try:
        return HOST["mesh_unshard"]([blocks], kw)[0]
    finally:
        _STATE.depth -= 1


def barrier(what: str) -> None:
    """Wait until every process reaches this point (a no-op in one process); waits
    without spinning, and a process that never arrives makes the others abort after
    ``NABLA_MPI_TIMEOUT`` seconds, the message naming ``what``."""
    comm = _STATE.comm
    if comm is None or comm.Get_size() == 1:
        return
    with _watch(f"barrier: {what}"):
        _wait(comm.Ibarrier().Test)


def broadcast_object(obj, what: str, root: int = 0):
    """Process ``root``'s ``obj`` (a small picklable value) on every process (``obj`` itself
    in one process); bounded by ``NABLA_MPI_TIMEOUT`` like every wait."""
    comm = _STATE.comm
    if comm is None or comm.Get_size() == 1:
        return obj
    barrier(what)  # the wait for late peers happens here, without spinning
    with _watch(f"broadcast: {what}"):
        return comm.bcast(obj, root=root)


def _at_exit() -> None:
    """A process that finished the program joins one last agreement: a peer still waiting
    at a collective (e.g. a value read on one process only) gets an error naming it at
    once, instead of waiting ``NABLA_MPI_TIMEOUT`` for a process that is gone."""
    if _STATE.comm is None or _STATE.comm.Get_size() == 1:
        return
    try:
        agree(_END)
    except DistributedError as e:
        _abort(f"[nabla process {PROCESS.index}/{PROCESS.count}] {e}\n", 4)
    # every process agreed it is at its end: free the shared window together (collective)
    exchange, _STATE.exchange = _STATE.exchange, None
    exchange.close()


ON_VALUES = " on the values "  # a program's inputs by their names (``TensorImpl.made``)


def first_difference(me: int, programs: list) -> str:
    """The first op where another process's program differs from process ``me``'s, as
    text naming both: ``programs`` holds each process's ``(what, op lines)``."""
    what, mine = programs[me]
    for rank, (their_what, theirs) in enumerate(programs):
        if rank == me or (their_what, theirs) == (what, mine):
            continue
        for i in range(max(len(mine), len(theirs))):
            a = mine[i] if i < len(mine) else "(no more ops)"
            b = theirs[i] if i < len(theirs) else "(no more ops)"
            if a != b:
                return (
                    f"the first difference is op {i}: process {me} runs {a}, process {rank} "
                    f"runs {b}"
                )
        text = f"process {me} is at {what}, process {rank} at {their_what}"
        if ON_VALUES in what or ON_VALUES in their_what:
            text += (
                ": the same ops on other values (each process must compute and read its "
                "values in the same order; iterating a set, whose order differs between "
                "processes, does not)"
            )
        return text
    return "no difference found in the programs' descriptions"


def describe_program(program) -> list[str]:
    """One line per instruction of ``program`` (a ``core.ir.Program``), equal across
    processes running the same program: the op, its inputs' and outputs' shapes and dtypes,
    and its collective parameters (mesh axes, reduction kind)."""
    specs = {i: (s.dtype.name, tuple(s.shape)) for i, s in enumerate(program.inputs)}

    def text(spec):
        return f"{spec[1]} {spec[0]}"

    lines = []
    for instr in program.instructions:
        outs = [(dt.name, tuple(shape)) for dt, shape in instr.out_specs]
        specs.update(zip(instr.outputs, outs))
        ins = ", ".join(text(specs[i]) if i in specs else "?" for i in instr.inputs)
        params = {
            k: instr.kwargs[k] for k in ("axes", "kind", "dims", "pairs") if k in instr.kwargs
        }
        extra = f" {params}" if params else ""
        lines.append(f"{instr.op}({ins}) -> {', '.join(text(o) for o in outs)}{extra}")
    return lines


# ----------------------------------------------------------------------------- groups and slabs
class _Group(NamedTuple):
    """What a collective over mesh dims ``axes`` of ``mesh`` exchanges with: the processes
    whose boxes differ only along ``axes`` (the op's ``mesh`` and ``axes`` kwargs)."""

    mesh: Any  # the DeviceMesh
    axes: tuple  # mesh dims


def _members(group: _Group) -> list[int]:
    """The processes of ``group`` in rank order (the order of its sub-communicator's
    ranks); computed from the mesh alone, no MPI call."""
    got = _MEMBERS.get(group)
    if got is None:
        mesh, axes = group
        boxes = [mesh.process_box(p) for p in range(PROCESS.count)]

        def color(box):
            return tuple(box[k][0] for k in range(mesh.ndim) if k not in axes)

        mine = color(boxes[PROCESS.index])
        got = _MEMBERS[group] = [p for p, b in enumerate(boxes) if color(b) == mine]
    return got


_MEMBERS: dict = {}


def _group(group: _Group):
    """``(communicator, boxes)``: the processes of ``group``, ordered by rank, with each
    one's box. Made once per group: a collective call on every process (they all reach it
    together, after ``agree``)."""
    got = _STATE.groups.get(group)
    if got is not None:
        return got
    mesh, axes = group
    boxes = [mesh.process_box(p) for p in range(PROCESS.count)]

    def color(box):
        return tuple(box[k][0] for k in range(mesh.ndim) if k not in axes)

    colors = sorted({color(b) for b in boxes})
    mine = color(boxes[PROCESS.index])
    sub = _STATE.comm.Split(colors.index(mine), PROCESS.index)
    members = [boxes[p] for p in _members(group)]
    got = _STATE.groups[group] = (sub, members)
    return got


def _bytes(a: np.ndarray):
    return [a, _STATE.MPI.BYTE]


def _widen(x: np.ndarray, group: _Group) -> np.ndarray:
    """The group's slabs joined along its mesh dims (full mesh extent there, this process's
    extent on the other mesh dims)."""
    sub, boxes = _group(group)
    mesh, axes = group
    if sub.Get_size() == 1:
        return x
    x = np.ascontiguousarray(x)
    every = np.empty((len(boxes),) + x.shape, dtype=x.dtype)
    sub.Allgather(_bytes(x), _bytes(every))
    shape = list(x.shape)
    for k in axes:
        shape[k] = mesh.shape[k]
    out = np.empty(shape, dtype=x.dtype)
    for slab, box in zip(every, boxes, strict=True):
        sel = [slice(None)] * x.ndim
        for k in axes:
            sel[k] = slice(box[k][0], box[k][0] + box[k][1])
        out[tuple(sel)] = slab
    return out


def _narrow(y: np.ndarray, group: _Group) -> np.ndarray:
    """This process's devices of a value widened along the group's mesh dims."""
    mesh, axes = group
    if y.shape[: mesh.ndim] == mesh.local_mesh_shape:
        return y
    sel = [slice(None)] * y.ndim
    for k in axes:
        o, s = mesh.local_box[k]
        sel[k] = slice(o, o + s)
    return y[tuple(sel)]


def _spread(x: np.ndarray, group: _Group) -> np.ndarray:
    """A value equal along the group's mesh dims seen as widened along them (a view: no
    exchange)."""
    mesh, axes = group
    sel = tuple(slice(0, 1) if k in axes else slice(None) for k in range(x.ndim))
    shape = tuple(mesh.shape[k] if k in axes else n for k, n in enumerate(x.shape))
    return np.broadcast_to(x[sel], shape)


def _describe(name, x, kw) -> str:
    kw = {k: v for k, v in kw.items() if k != "mesh"}
    shape = None if x is None else (x.shape, str(x.dtype))
    return f"{name}{kw} on {shape}"


_TEXTS: dict = {}  # id(kwargs) -> (kwargs, shape, dtype, text); holding kwargs keeps the id


def _agreement_text(name, x, kw) -> str:
    """What a collective run alone agrees on: the op, its kwargs, the local shape and dtype
    and the mesh. A program run again passes the same kwargs dict: its text is reused."""
    shape, dtype = (None, None) if x is None else (x.shape, x.dtype)
    got = _TEXTS.get(id(kw))
    if got is not None and got[0] is kw and got[1] == shape and got[2] == dtype:
        return got[3]
    text = _describe(name, x, kw) + f" {kw['mesh']}"
    if len(_TEXTS) >= 1024:
        _TEXTS.clear()
    _TEXTS[id(kw)] = (kw, shape, dtype, text)
    return text


def agreement_count() -> int:
    """The count of the latest agreement (every process numbers them alike)."""
    return _STATE.count


def in_agreed_program() -> bool:
    """True while a program the processes agreed on runs."""
    return _STATE.depth > 0


class agreed_program:
    """Context: the processes agreed on the whole program about to run (its digest covers
    every collective in it, in order), so its collectives skip their own check."""

    def __init__(self, what: str, describe=None):
        self.what, self.describe = what, describe

    def __enter__(self):
        agree(self.what, self.describe)
        _STATE.depth += 1

    def __exit__(self, *exc):
        _STATE.depth -= 1


_SELF_AGREEING: set = set()


def agrees_itself(op: str) -> bool:
    """True when ``op``'s cross-process lowering agrees on it before it communicates (run
    outside an agreed program): a program of that one op needs no agreement of its own,
    and a small one's data then travel in the agreement itself."""
    return op in _SELF_AGREEING


def _collective(name, *, over_axes: bool = True, fold=None):
    """Register a cross-process lowering: agree first (unless inside an agreed program),
    then run ``fn(x, **kw)`` with the op's kwargs, its ``mesh`` and ``axes`` given as one
    ``group`` (a ``_Group``), or ``mesh`` alone for an op with no ``axes`` (``over_axes``
    False).

    ``fold(x, share, **kw)``, when given, is tried first outside an agreed program: it either
    returns None without communicating (the data do not fit the agreement), or calls
    ``share(payload)`` once (the agreement, carrying ``payload``; it returns every
    process's payload bytes, one row per process) and returns the op's result."""

    def deco(fn):
        calls: dict = {}  # id(kwargs) -> (kwargs, fn's keyword arguments); as _TEXTS

        def run(args, kw):
            x = args[0] if args else None
            got = calls.get(id(kw))
            if got is None or got[0] is not kw:  # a program run again passes the same dict
                mesh = kw["mesh"]
                rest = {k: v for k, v in kw.items() if k != "mesh"}
                if over_axes:
                    rest["group"] = _Group(mesh, tuple(rest.pop("axes")))
                else:
                    rest["mesh"] = mesh
                if len(calls) >= 1024:
                    calls.clear()
                got = calls[id(kw)] = (kw, rest)
            rest = got[1]
            if not _STATE.depth:
                text = _agreement_text(name, x, kw)

                def describe():
                    return [_describe(name, x, kw)]

                if fold is not None:
                    out = fold(x, lambda payload: agree(text, describe, payload), **rest)
                    if out is not None:
                        return [out]
                agree(text, describe)
            elif _STATE.exchange.shared:
                out = _folded_in_program(name, x, kw)
                if out is not None:
                    return [out]
            with _watch(lambda: _describe(name, x, kw)):
                return [fn(*args, **rest)]

        LOWERINGS[name] = run
        _SELF_AGREEING.add(name)
        return fn

    return deco


# ----------------------------------------------------------------------------- output buffers
# Received values land in buffers recycled once nothing else references them (the tensor
# holding the last result died): a fresh multi-MiB buffer costs a page fault per 4 KiB on
# first touch, which made a collective 2x slower than MPI on its own reused buffers.
#
# A receive buffer also starts half a 4 KiB page away from the buffer it is computed from
# (``beside``): large arrays from the allocator start at nearly the same offset in their
# page, and when a store address trails a load address by a few bytes modulo 4 KiB the CPU
# takes it for a dependence ("4K aliasing"). MPI's copy into the receive buffer and its
# reduction loop then ran at half speed: an Allreduce of 256 KiB from one fresh array into
# another took 2x as long as into a buffer offset by 2 KiB (measured here, 2 processes).
#
# The pool holds at least 8 buffers and 512 MiB, and more when an agreed program held more
# at once (its results alive together): a step that gathers 1 GiB needs that 1 GiB at
# every call anyway, and mapping it afresh each time cost a quarter of the collective's
# time (page faults and the kernel zeroing the pages). Idle, the pool then holds at most
# what the largest such program held; never more than a quarter of memory.
_POOL_MIN_BYTES = 1 << 14
_POOL_MAX_BYTES = 1 << 29
_POOL_MAX = 8


def _quarter_of_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (AttributeError, ValueError, OSError):  # no sysconf: keep the fixed bound
        return _POOL_MAX_BYTES


_POOL_CEILING_BYTES = _quarter_of_memory()
_APART_MIN_BYTES = 1 << 14  # below this the loops are too short to matter
_PAGE = 4096


class _BufferPool:
    """Receive buffers (uint8 arrays of a size, with their addresses), least recently used
    first, each reused once only the pool references it (CPython's reference count says
    so). It keeps ``count`` buffers and ``nbytes`` at most: 8 and 512 MiB, or the most an
    agreed program has held at once (its results alive together) when that was more."""

    def __init__(self):
        self.entries: dict = {}  # id(base) -> (base, address), least recently used first
        self.by_size: dict = {}  # size -> {id(base): None}, least recently taken first
        self.held = 0  # bytes in ``entries``
        self.count, self.nbytes = _POOL_MAX, _POOL_MAX_BYTES

    def take(self, size: int):
        """A free buffer of ``size`` bytes and its address, or a new one (kept when it is
        big enough to be worth pooling)."""
        same = self.by_size.get(size, {})
        for key in same:  # the least recently taken first: the likeliest to be free
            base, address = entry = self.entries[key]
            # 3: the entry's tuple, ``base`` and getrefcount's argument
            if sys.getrefcount(base) == 3:
                del self.entries[key], same[key]
                self.entries[key], same[key] = entry, None  # the most recently used last
                self._took(size)
                return base, address
        base = np.empty(size, dtype=np.uint8)
        address = base.ctypes.data
        if size >= _POOL_MIN_BYTES:
            self.entries[id(base)] = (base, address)
            self.by_size.setdefault(size, {})[id(base)] = None
            self.held += size
            self._took(size)
            while len(self.entries) > self.count or self.held > self.nbytes:
                self._drop_oldest()
        return base, address

    def _took(self, size: int) -> None:
        """Inside an agreed program, raise the bounds to the buffers in use now (the one
        just taken among them): a program's results are alive together."""
        if not _STATE.depth:
            return
        # 3: the entry's tuple, the loop's name and getrefcount's argument (the buffer
        # just taken has its caller's reference too)
        alive = [b.nbytes for b, _ in self.entries.values() if sys.getrefcount(b) > 3]
        self.count = max(self.count, len(alive))
        self.nbytes = min(max(self.nbytes, sum(alive)), _POOL_CEILING_BYTES)

    def _drop_oldest(self) -> None:
        """Forget the least recently used buffer: freed when its last user is gone."""
        key = next(iter(self.entries))
        base, _ = self.entries.pop(key)
        same = self.by_size[base.nbytes]
        del same[key]
        if not same:
            del self.by_size[base.nbytes]
        self.held -= base.nbytes


_POOL = _BufferPool()


def _out_buffer(shape: tuple, dtype, beside: np.ndarray | int | None = None) -> np.ndarray:
    """An uninitialized array of ``shape`` from the pool, starting half a page away (modulo
    4 KiB) from ``beside`` (an array or its address) when given. (An array's address,
    ``.ctypes.data``, costs ~2 us to ask: callers that know it pass it.)"""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < _APART_MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    base, address = _POOL.take(nbytes + _PAGE)  # room to place the start anywhere in a page
    near = 0 if beside is None else beside if type(beside) is int else beside.ctypes.data
    start = (near + _PAGE // 2 - address) % _PAGE
    return base[start : start + nbytes].view(dtype).reshape(shape)


# ----------------------------------------------------------------------------- reductions
_MPI_DTYPES = {np.dtype(t) for t in ("float32", "float64", "int8", "int16", "int32", "int64")}
_MPI_DTYPES |= {np.dtype(t) for t in ("uint8", "uint16", "uint32", "uint64")}


def _wire(dtype) -> np.dtype:
    """The dtype a reduction of ``dtype`` travels and reduces in: MPI's types as they are,
    the rest (bool, float16, ...) as float64."""
    return dtype if dtype in _MPI_DTYPES else np.dtype(np.float64)


def _mpi_op(kind: str):
    """The MPI reduction of ``kind`` ("sum", "max", "min" or "prod")."""
    return getattr(_STATE.MPI, kind.upper())


def _allreduce(y: np.ndarray, group: _Group, kind: str, own: bool = False) -> np.ndarray:
    """``y`` (already reduced over this process's devices) reduced over the group; in
    place when ``own`` (``y`` is this lowering's own temporary) and ``y`` allows it."""
    members = _members(group)
    if len(members) == 1:
        return y
    wire = _wire(y.dtype)
    if _fits_shared(y.size * wire.itemsize):
        send = np.ascontiguousarray(y, dtype=wire)
        total = _combine(_shared_rows(send), members, send.shape, wire, kind)
        return total.astype(y.dtype, copy=False)
    if _STATE.exchange.shared:  # larger data: a piece per exchange
        send = np.ascontiguousarray(y, dtype=wire)
        return _chunked_allreduce(send, members, kind).astype(y.dtype, copy=False)
    sub, _ = _group(group)
    MPI = _STATE.MPI
    op = _mpi_op(kind)
    if own and y.dtype == wire and y.flags.c_contiguous and y.flags.writeable:
        sub.Allreduce(MPI.IN_PLACE, y, op=op)
        return y
    send = np.ascontiguousarray(y, dtype=wire)  # no copy when it already is
    out = _out_buffer(send.shape, wire, send)
    sub.Allreduce(send, out, op=op)
    return out.astype(y.dtype, copy=False)


_UFUNCS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


# Reductions of more than 512 KiB go through the shared-memory exchange 512 KiB at a time,
# each piece reduced in rank order as a smaller call's data are (the same bits at every
# size). Pieces that stay in a core's L2 cache between the copy into the slot and the
# reduction out of it run 2x faster than whole 4 MiB slots; MPI's own large reductions
# copy through its transport's buffers. Measured here (2 processes, sums of float32): 4 MiB
# per process in 0.38 ms through 512 KiB pieces, 0.77 ms through one 4 MiB slot, 0.87 ms by
# MPI's Allreduce; 64 MiB in 10 ms against Allreduce's 27-31 ms, and a 64 MiB
# reduce-scatter in 5-6 ms against Reduce_scatter_block's 23 ms. Without the single-copy
# reads (``_single_copy_gather``), gathers from 512 KiB to 4 MiB go the same way: 1 MiB per
# process in 0.15 ms against one 1 MiB exchange's 0.26 ms and Allgather's 0.21 ms, 4 MiB in
# 0.61 ms against 0.67 ms; from 16 MiB Allgather's one copy from the peer's memory wins
# (2.2 ms against 2.6 ms through pieces).
def _reduce_into(parts: list, kind: str, out: np.ndarray) -> None:
    """The members' ``parts`` reduced in rank order into ``out`` (every reduction of the
    exchange's data, whole or in pieces, is this one: the same bits)."""
    ufunc = _UFUNCS[kind]
    ufunc(parts[0], parts[1], out=out)
    for part in parts[2:]:
        ufunc(out, part, out=out)


def _chunked_allreduce(send: np.ndarray, members: list, kind: str) -> np.ndarray:
    """``_combine`` of the members' C-contiguous ``send`` (several members, any size) on the
    shared-memory exchange, a piece of ``_payload_max()`` bytes per exchange: a new
    array."""
    out = _out_buffer(send.shape, send.dtype, _PAYLOAD_PHASE)  # (read from the slots)
    flat, dst = send.reshape(-1), out.reshape(-1)
    step = _payload_max() // send.itemsize
    for start in range(0, flat.size, step):
        piece = flat[start : start + step]
        rows = _shared_rows(piece)
        parts = [rows[p].view(send.dtype) for p in members]
        _reduce_into(parts, kind, dst[start : start + piece.size])
    return out


def _chunked_gather(x: np.ndarray, members: list) -> np.ndarray:
    """The members' C-contiguous ``x`` (several members, any size), one slab per member in
    rank order as ``Allgather`` receives them, through the shared-memory exchange a piece
    of ``_payload_max(gather=True)`` bytes per exchange."""
    recv = _out_buffer((len(members),) + x.shape, x.dtype, _PAYLOAD_PHASE)
    flat, slabs = x.reshape(-1), recv.reshape(len(members), -1)
    step = _payload_max(gather=True) // x.itemsize
    for start in range(0, flat.size, step):
        piece = flat[start : start + step]
        rows = _shared_rows(piece)
        for i, p in enumerate(members):
            slabs[i, start : start + piece.size] = rows[p].view(x.dtype)
    return recv


def _single_copy_gather(x: np.ndarray, members: list, rows: list | None = None) -> np.ndarray:
    """The members' C-contiguous ``x`` (several members, any size), one slab per member in
    rank order as ``Allgather`` receives them, each read straight out of its owner's
    memory (``_PeerReader``): one exchange of the blocks' addresses (unless ``rows``, every
    process's payload row of an exchange made already, holds them: ``_address_fold``), the
    reads, then one exchange so that no member goes on (and frees or overwrites its block)
    before every member has read it."""
    ex = _STATE.exchange
    recv = _out_buffer((len(members),) + x.shape, x.dtype, x)
    if rows is None:
        rows = _shared_rows(np.array([x.ctypes.data], np.uint64))
    me = PROCESS.index
    try:
        for i, p in enumerate(members):
            if p != me:
                ex.reader.read(p, int(rows[p][:8].view(np.uint64)[0]), recv[i])
        recv[members.index(me)] = x
    finally:  # (a failed read still releases the peers: its error then ends the job)
        _exchange_in_program(ex, ex.parity())
    return recv


def _address_fold(order: list, group: _Group, ndev: int, dim: int) -> _Fold:
    """An eager single-copy gather as a ``_Fold``: ``fill`` puts the block's address in the
    agreement's own exchange (one exchange fewer than ``_single_copy_gather`` alone),
    ``finish`` reads the peers' blocks and joins them."""
    members, ex = _members(group), _STATE.exchange
    held: list = []  # the operand between fill and finish (one call at a time)

    def fill(x, parity):
        ex.outgoing(parity)[:8].view(np.uint64)[0] = x.ctypes.data
        held[:] = [x]

    def finish(parity):
        x = held.pop()
        out = _single_copy_gather(x, members, ex.incoming(parity))
        return _joined(out, x.shape, order, ndev + dim)

    return _Fold(fill, finish)


def _chunked_reduce_scatter(send: np.ndarray, members: list, kind: str) -> np.ndarray:
    """``_own_block_reduced`` of ``send`` (its blocks in member order, several members, any
    size) on the shared-memory exchange: per exchange each member writes the same slice of
    every block but its own, ``_payload_max()`` bytes in all, and reduces that slice of
    its own block. A new array."""
    ex = _STATE.exchange
    n, own = len(send), members.index(PROCESS.index)
    blocks = send.reshape(n, -1)
    out = _out_buffer(send.shape[1:], send.dtype, _PAYLOAD_PHASE)
    dst, width = out.reshape(-1), blocks.shape[1]
    step = _payload_max() // (send.itemsize * (n - 1))
    for start in range(0, width, step):
        cols = slice(start, min(start + step, width))
        size = cols.stop - start
        nbytes = (n - 1) * size * send.itemsize
        parity = ex.parity()
        _put_others(
            ex.outgoing(parity)[:nbytes].view(send.dtype).reshape(n - 1, size), blocks[:, cols], own
        )
        _exchange_in_program(ex, parity)
        parts = _received_blocks(ex.incoming(parity), members, own, blocks[:, cols])
        _reduce_into(parts, kind, dst[cols])
    return out


def _pieces_reduce(order: list, group: _Group, kind: str):
    """``_mesh_reduce`` with one device per process along the axes, in pieces."""
    members = _members(group)
    return lambda x: _chunked_allreduce(x, members, kind)  # (an MPI dtype: its own wire)


def _pieces_gather(order: list, group: _Group, ndev: int, dim: int):
    """``_mesh_gather`` with one device per process along the axes, in pieces."""
    members = _members(group)
    return lambda x: _joined(_chunked_gather(x, members), x.shape, order, ndev + dim)


def _pieces_reduce_scatter(order: list, group: _Group, ndev: int, dim: int, kind: str):
    """``_mesh_reduce_scatter`` with one device per process along the axes, in pieces."""
    members = _members(group)

    def run(x):
        return _chunked_reduce_scatter(_scatter_blocks(x, ndev, dim, order), members, kind)

    return run


_PIECES = {
    "mesh_reduce": _pieces_reduce,
    "mesh_gather": _pieces_gather,
    "mesh_reduce_scatter": _pieces_reduce_scatter,
}


def _combine(rows, members: list, shape: tuple, dtype, kind: str) -> np.ndarray:
    """The group members' payloads (rows of ``agree``'s result) reduced in rank order:
    a new array, equal on every member."""
    parts = [rows[p].view(dtype).reshape(shape) for p in members]
    if len(parts) == 1:
        return parts[0].copy()
    # (a payload large enough to place its result starts at the shared slots' phase)
    return _reduce(parts, kind, _PAYLOAD_PHASE)


def _fits_shared(nbytes: int, limit: int = _SHARED_REDUCE_BYTES) -> bool:
    """Whether a collective of ``nbytes`` per process inside an agreed program (or after
    its own agreement) goes through the shared-memory exchange: it is there and the data
    fit its slots and ``limit``. The same answer on every process (same shapes)."""
    ex = _STATE.exchange
    return ex.shared and nbytes <= min(ex.capacity, limit)


def _fold_reduce(x, share, kind, group):
    """``mesh_reduce`` of a small value inside the agreement: every member's locally reduced
    value arrives with the digests, and each reduces them in rank order."""
    one = all(x.shape[a] == 1 for a in group.axes)
    local = x if one else host.MESH_REDUCE[kind](x, axis=group.axes, keepdims=True)
    wire = _wire(local.dtype)
    send = np.ascontiguousarray(local, dtype=wire)
    if send.nbytes > _payload_max():
        return None
    rows = share(send)
    total = _combine(rows, _members(group), send.shape, wire, kind).astype(x.dtype, copy=False)
    return total if one else np.broadcast_to(total, x.shape)


@_collective("mesh_reduce", fold=_fold_reduce)
def _mesh_reduce(x, kind, group):
    # one device per process along the axes (the usual case): nothing to reduce locally
    one = all(x.shape[a] == 1 for a in group.axes)
    local = x if one else host.MESH_REDUCE[kind](x, axis=group.axes, keepdims=True)
    total = _allreduce(local, group, kind, own=not one)
    # the received value has the op's shape already: no broadcast view (never ``x`` itself)
    return total if one and total is not x else np.broadcast_to(total, x.shape)


def _block_order(x: np.ndarray, group: _Group) -> list | None:
    """The block index of each member of ``group`` in rank order when every process of the
    group holds one device along its mesh dims and the group has several processes (then a
    collective maps to one MPI call); else None. No MPI call."""
    mesh, axes = group
    if any(x.shape[k] != 1 for k in axes):
        return None
    order = _ORDERS.get(group)
    if order is None:
        members = _members(group)
        order = []
        for p in members:  # a dim split over axes (a, b) holds block i_a * size_b + i_b
            box = mesh.process_box(p)
            b = 0
            for k in axes:
                b = b * mesh.shape[k] + box[k][0]
            order.append(b)
        _ORDERS[group] = order
    return order if len(order) > 1 else None


_ORDERS: dict = {}  # _Group -> its members' block indices in rank order


def _single_devices(x: np.ndarray, group: _Group):
    """``(communicator, block index of each member in rank order)`` when every process of
    the group holds one device along its mesh dims (then a collective maps to one MPI
    call); else None."""
    order = _block_order(x, group)
    if order is None:
        return None
    return _group(group)[0], order


def _chunks(x: np.ndarray, d: int, n: int) -> np.ndarray:
    """``x``'s dim ``d`` cut into ``n`` blocks, the block index moved to the front."""
    shape = x.shape[:d] + (n, x.shape[d] // n) + x.shape[d + 1 :]
    return np.moveaxis(x.reshape(shape), d, 0)


def _scatter_blocks(x, ndev, dim, order):
    """What ``Reduce_scatter_block`` sends: the blocks along ``dim`` in the members' rank
    order, on the wire dtype; a view when they already are."""
    wire = _wire(x.dtype)
    chunks = _chunks(x, ndev + dim, len(order))
    if order != sorted(order):  # else a view; contiguous when dim is the leading one
        chunks = chunks[order]
    return np.ascontiguousarray(chunks, dtype=wire)


# A reduce-scatter through a slot carries only the blocks the other members keep: member
# ``i`` writes every block but block ``i`` (in member order), and reads its own block from
# its own buffer. On 2 processes that is half the bytes of the whole send.
def _others_shape(blocks_shape: tuple) -> tuple:
    """The shape of what a member writes: its blocks but one."""
    return (blocks_shape[0] - 1,) + tuple(blocks_shape[1:])


def _others_nbytes(nbytes: int, n: int) -> int:
    """The bytes a member writes of a send of ``nbytes`` in ``n`` blocks: all blocks but one."""
    return nbytes // n * (n - 1)


def _put_others(dst: np.ndarray, blocks: np.ndarray, own: int) -> None:
    """Every block of ``blocks`` but block ``own``, in order, into ``dst``."""
    if own:
        np.copyto(dst[:own], blocks[:own])
    if own < len(blocks) - 1:
        np.copyto(dst[own:], blocks[own + 1 :])


def _received_blocks(rows, members: list, own: int, blocks: np.ndarray, at: int = 0) -> list:
    """Block ``own`` (this process's) of every member's send, in member order: from the
    others' payloads (``rows``, one bytes array per process, the send ``at`` bytes into
    each) and from ``blocks``."""
    shape = _others_shape(blocks.shape)
    nbytes = blocks.nbytes // len(blocks) * shape[0]
    parts = []
    for q, p in enumerate(members):
        if q == own:
            parts.append(blocks[own])
        else:  # member q skipped its own block: ours moved down one past it
            sent = rows[p][at : at + nbytes].view(blocks.dtype).reshape(shape)
            parts.append(sent[own if own < q else own - 1])
    return parts


def _own_block_reduced(send: np.ndarray, group: _Group, kind: str, exchange) -> np.ndarray:
    """This process's block of the group's reduce-scatter of ``send`` (its blocks in member
    order), reduced in rank order: ``exchange(before, after)`` carries every block but its
    own (those before it and those after it) and returns every process's payload bytes."""
    members = _members(group)
    own = members.index(PROCESS.index)  # only the block this process keeps is reduced
    rows = exchange(send[:own], send[own + 1 :])
    return _reduce(_received_blocks(rows, members, own, send), kind)


def _fold_reduce_scatter(x, share, ndev, dim, kind, group):
    """``mesh_reduce_scatter`` of a small value inside the agreement: every member's blocks
    for the others arrive with the digests; each reduces its own block of every member's
    send, in rank order."""
    order = _block_order(x, group)
    if order is None:
        return None
    send = _scatter_blocks(x, ndev, dim, order)
    if _others_nbytes(send.nbytes, len(order)) > _payload_max():
        return None
    total = _own_block_reduced(send, group, kind, lambda *p: share(np.concatenate(p)))
    return total.astype(x.dtype, copy=False)


@_collective("mesh_reduce_scatter", fold=_fold_reduce_scatter)
def _mesh_reduce_scatter(x, ndev, dim, kind, group):
    order = _block_order(x, group)
    n = 0 if order is None else len(order)
    if n and _fits_shared(_others_nbytes(x.size * _wire(x.dtype).itemsize, n)):
        send = _scatter_blocks(x, ndev, dim, order)
        return _own_block_reduced(send, group, kind, _shared_rows).astype(x.dtype, copy=False)
    if n and _STATE.exchange.shared:  # larger data: a piece per exchange
        send = _scatter_blocks(x, ndev, dim, order)
        total = _chunked_reduce_scatter(send, _members(group), kind)
        return total.astype(x.dtype, copy=False)
    single = _single_devices(x, group)
    if single is not None:  # Reduce_scatter_block: each process receives its reduced block
        sub, order = single
        send = _scatter_blocks(x, ndev, dim, order)
        recv = _out_buffer(send.shape[1:], send.dtype, send)
        sub.Reduce_scatter_block(send, recv, op=_mpi_op(kind))
        return recv.astype(x.dtype, copy=False)
    local = host.MESH_REDUCE[kind](x, axis=group.axes, keepdims=True)
    total = _allreduce(local, group, kind, own=True)
    return _narrow(host.mesh_split(_spread(total, group), ndev, group.axes, dim), group)


# ----------------------------------------------------------------------------- data movement
def _joined(recv: np.ndarray, shape: tuple, order: list, d: int) -> np.ndarray:
    """The members' slabs ``recv`` (rank order, each of ``shape``) joined along dim ``d``
    in their blocks' order."""
    if order == sorted(order) and all(n == 1 for n in shape[:d]):
        # (members, 1, .., 1, block, rest) is already the joined value: no copy
        return recv.reshape(shape[:d] + (len(order) * shape[d],) + shape[d + 1 :])
    return np.concatenate(list(recv[np.argsort(order)]), axis=d)


def _fold_gather(x, share, ndev, dim, group):
    """``mesh_gather`` of a small value inside the agreement: every member's slab arrives
    with the digests."""
    order = _block_order(x, group)
    if order is None:
        return None
    x = np.ascontiguousarray(x)
    if x.nbytes > _payload_max(gather=True) or x.dtype.hasobject:
        return None
    return _joined_rows(share(x), x, group, order, ndev + dim)


def _joined_rows(rows, x: np.ndarray, group: _Group, order: list, d: int) -> np.ndarray:
    """The group's slabs like ``x`` from every process's payload bytes ``rows`` joined along
    dim ``d`` in their blocks' order: a copy out of the slots, which a later exchange
    reuses."""
    recv = _out_buffer((len(order),) + x.shape, x.dtype, _PAYLOAD_PHASE)  # (from slots)
    for i, p in enumerate(_members(group)):
        recv[i] = rows[p].view(x.dtype).reshape(x.shape)
    return _joined(recv, x.shape, order, d)


@_collective("mesh_gather", fold=_fold_gather)
def _mesh_gather(x, ndev, dim, group):
    order = _block_order(x, group)
    if order is not None and _fits_shared(x.nbytes, _SHARED_GATHER_BYTES):
        x = np.ascontiguousarray(x)
        return _joined_rows(_shared_rows(x), x, group, order, ndev + dim)
    if order is not None and _STATE.exchange.reader is not None:
        x = np.ascontiguousarray(x)
        return _joined(_single_copy_gather(x, _members(group)), x.shape, order, ndev + dim)
    if order is not None and _fits_shared(x.nbytes, _PIECEWISE_GATHER_BYTES):
        x = np.ascontiguousarray(x)
        return _joined(_chunked_gather(x, _members(group)), x.shape, order, ndev + dim)
    single = _single_devices(x, group)
    if single is not None:  # Allgather straight into the blocks' order: at most one copy
        sub, order = single
        x = np.ascontiguousarray(x)
        recv = _out_buffer((len(order),) + x.shape, x.dtype, x)
        sub.Allgather(_bytes(x), _bytes(recv))
        return _joined(recv, x.shape, order, ndev + dim)
    return _narrow(host.mesh_merge(_widen(x, group), ndev, group.axes, dim), group)


@_collective("mesh_slice")
def _mesh_slice(x, ndev, dim, group):
    return _narrow(host.mesh_split(_spread(x, group), ndev, group.axes, dim), group)


@_collective("mesh_all_to_all")
def _mesh_all_to_all(x, ndev, split_dim, concat_dim, group):
    single = _single_devices(x, group)
    if single is not None:  # Alltoall: rank r gets the block of the split dim it holds
        sub, order = single
        send = np.ascontiguousarray(_chunks(x, ndev + split_dim, len(order))[order])
        recv = np.empty_like(send)
        sub.Alltoall(_bytes(send), _bytes(recv))
        # what each sender sent, in the senders' block order, joined along the concat dim
        return np.concatenate(list(recv[np.argsort(order)]), axis=ndev + concat_dim)
    y = host.mesh_merge(_widen(x, group), ndev, group.axes, concat_dim)
    return _narrow(host.mesh_split(y, ndev, group.axes, split_dim), group)


@_collective("mesh_select")
def mesh_select(x, index, group):
    return _narrow(host.mesh_select(_widen(x, group), group.axes, index), group)


@_collective("mesh_unshard", over_axes=False)
def mesh_unshard(x, ndev, dims, partial, mesh):
    for axes, kind in host.partial_runs(partial):  # the terms first: then only blocks move
        x = _mesh_reduce(x, kind, _Group(mesh, axes))
    split = tuple(sorted({a for d in dims for a in d}))
    y = _widen(x, _Group(mesh, split)) if split else x
    return host.mesh_unshard(y, ndev, dims, ())


@_collective("mesh_permute", over_axes=False)
def _mesh_permute(x, ndev, pairs, mesh):
    """Each ``(src, dst)`` block goes from ``src``'s process to ``dst``'s; the rest get 0."""
    MPI = _STATE.MPI
    comm = _STATE.comm
    box = mesh.local_box
    lead = x.shape[:ndev]
    src_flat = np.ascontiguousarray(x).reshape((math.prod(lead),) + x.shape[ndev:])
    out = np.zeros(src_flat.shape, dtype=x.dtype)

    def slot(device):
        coords = mesh.coords(device)
        return int(np.ravel_multi_index([c - o for c, (o, _) in zip(coords, box)], lead))

    me = PROCESS.index
    # tags unique per call and destination: a message can never match another call's receive
    _STATE.tags += 1
    base = (_STATE.tags * mesh.size) % max(MPI.TAG_UB - mesh.size, 1)
    requests = []
    for src, dst in pairs:
        ps, pd = mesh.process_of(src), mesh.process_of(dst)
        i, j = slot(src) if ps == me else None, slot(dst) if pd == me else None
        if ps == me and pd == me:
            out[j] = src_flat[i]
        elif ps == me:  # [i : i + 1]: a buffer even for a 0-d block
            requests.append(comm.Isend(_bytes(src_flat[i : i + 1]), dest=pd, tag=base + dst))
        elif pd == me:
            requests.append(comm.Irecv(_bytes(out[j : j + 1]), source=ps, tag=base + dst))
    if requests:
        MPI.Request.Waitall(requests)
    return out.reshape(x.shape)


# ----------------------------------------------------------------------------- local builders
def _mesh_shard(args, kw):
    """The blocks of this process's devices of a value every process holds whole."""
    x = args[0]
    mesh_shape, dims, box = kw["mesh_shape"], kw["dims"], kw["box"]
    ndev = len(mesh_shape)
    y = np.broadcast_to(x, tuple(mesh_shape) + x.shape)
    for d, axes in enumerate(dims):
        if axes:
            y = host.mesh_split(y, ndev, axes, d)
    return [np.ascontiguousarray(y[tuple(slice(o, o + s) for o, s in box)])]


def _mesh_iota(args, kw):
    """Each of this process's devices' coordinate along mesh dim ``axis``."""
    box, axis = kw["box"], kw["axis"]
    shape = [1] * len(box)
    o, s = box[axis]
    shape[axis] = s
    coords = np.arange(o, o + s, dtype=kw["dtype"].numpy).reshape(shape)
    return [np.broadcast_to(coords, tuple(n for _, n in box))[..., None]]


LOWERINGS["mesh_shard"] = _mesh_shard
LOWERINGS["mesh_iota"] = _mesh_iota


# ----------------------------------------------------------------------------- eager calls
# An eager all_reduce / all_gather / reduce_scatter of a realized buffer (``now_function``, from
# the op's bind) skips the lazy graph. Data that fit the agreement's slot (4 KiB) travel in
# it, reduced or joined as the lazy path's fold does (the same bits, one exchange). Above
# that, the data collective works on the buffer itself (no
# copy in; the output is the receive buffer) and is posted beside its agreement, both
# nonblocking, so the call costs one round trip, not two. The agreement keeps every
# guarantee of the lazy path: agreements always match each other (a process here and one
# reading a value alone, at another collective or at its exit all see different digests
# and raise at once), and the received data are used only once the digests match. A data
# collective posted beside an agreement that failed is never completed (its peers are not
# in it): its buffers are kept alive here, since MPI may still write into them.
_ABANDONED: list = []
_NOW: dict = {}  # backend op name -> fn(x, order, **kwargs) -> _Posting


class _Posting(NamedTuple):
    """A data collective ready to post beside its agreement: ``start(sub)`` posts it on the
    group's communicator (returns its request), ``result()`` reads the output once it
    completed, ``buffers`` are what MPI reads and writes meanwhile."""

    start: Any
    result: Any
    buffers: tuple


class _Lane(NamedTuple):
    """What an eager call needs beyond its buffer, worked out once per (kwargs, buffer shape
    and dtype): the op's posting function and its arguments, the group and its members'
    block order, the agreement's text and the description a mismatch error shows."""

    post: Any
    args: dict
    group: _Group
    order: list
    text: str
    line: str
    fold: Any  # a _Fold when the data fit the agreement (the lazy path's way), else None
    pieces: Any = None  # fn(x) -> the output after the agreement, in pieces
    reads: Any = None  # a _Fold whose agreement carries the address: gathers read in place
    now: Any = None  # fn(x) -> the output, or None: the whole call (``_now_of``)


_LANES: dict = {}  # (id(kwargs), shape, dtype) -> (kwargs, _Lane or None: no direct form)


def _folds_alike(kw: dict, x: np.ndarray, order: list) -> bool:
    """Whether folding the data into the agreement gives the bits MPI's own reduction
    would (the graph's result inside a program): always for a gather; for a reduction of
    integers (exact in any order), or a sum or product over two processes (commutative).
    Else the order of a floating reduction could differ, and MPI's call is kept. On the
    shared-memory exchange a program reduces in rank order as the fold does: always."""
    kind = kw.get("kind")
    if kind is None or x.dtype.kind in "iu" or _STATE.exchange.shared:
        return True
    return len(order) == 2 and kind in ("sum", "prod")


def _lane(name: str, x: np.ndarray, kw: dict):
    """The ``_Lane`` of ``name`` on a buffer like ``x`` with kwargs ``kw``, or None when the
    call has no direct form: several devices per process along the axes, one process in
    the group, or a dtype MPI cannot reduce or an object dtype."""
    post = _NOW.get(name)
    if post is None:
        return None
    args = {k: v for k, v in kw.items() if k not in ("mesh", "axes")}
    group = _Group(kw["mesh"], tuple(kw["axes"]))
    order = _block_order(x, group)
    reduces = name != "mesh_gather"
    if order is None or (x.dtype not in _MPI_DTYPES if reduces else x.dtype.hasobject):
        return None
    text, line = _agreement_text(name, x, kw), _describe(name, x, kw)
    limit = _payload_max(gather=not reduces)
    n = len(order)  # a reduce-scatter sends every block but its own
    sent = _others_nbytes(x.nbytes, n) if name == "mesh_reduce_scatter" else x.nbytes
    small = sent <= limit and _folds_alike(kw, x, order)
    fold = _FOLDS[name](x, order, group, **args) if small else None
    reads = pieces = None
    if sent > limit and not reduces and _STATE.exchange.reader is not None:
        reads = _address_fold(order, group, **args)
    elif sent > limit and _STATE.exchange.shared and (reduces or sent <= _PIECEWISE_GATHER_BYTES):
        pieces = _PIECES[name](order, group, **args)
    lane = _Lane(post, args, group, order, text, line, fold, pieces, reads)
    return lane._replace(now=_now_of(lane))


def _lane_of(name: str, x: np.ndarray, kw: dict):
    """``_lane(name, x, kw)``, made once per (kwargs, buffer shape and dtype): a program
    run again, or an eager op's plan, passes the same kwargs dict every call."""
    key = (id(kw), x.shape, x.dtype)
    got = _LANES.get(key)
    if got is None or got[0] is not kw:
        if len(_LANES) >= 1024:
            _LANES.clear()
        got = _LANES[key] = (kw, _lane(name, x, kw))
    return got[1]


def _folded_in_program(name: str, x, kw: dict):
    """Inside an agreed program on the shared-memory exchange: ``name`` on ``x`` through
    its lane's fold when it has one (data that fit the slots), as an eager call's data go
    (views into the slots made once per lane, not per call). The lowering's own path
    (``_shared_rows``) computes the same with the same operations in the same order: the
    bits are the same. None (nothing exchanged) when there is no fold."""
    if type(x) is not np.ndarray or not x.flags.c_contiguous or name not in _NOW:
        return None
    lane = _lane_of(name, x, kw)
    fold = None if lane is None else lane.fold
    if fold is None:
        return None
    ex = _STATE.exchange
    parity = ex.parity()
    fold.fill(x, parity)
    _exchange_in_program(ex, parity, lane.line)
    return fold.finish(parity)


# ----------------------------------------------------------------------------- coalesced
# Small collectives of one program that do not depend on each other (every gradient's
# all-reduce in a data-parallel step) share one exchange: each one's data at its own place
# in the slots, one wait for the peers, then each one's fold as if it ran alone. The
# runtime rewrites a program once (``runtime/executor.py``) from what ``coalescible`` says,
# and ``mesh_coalesced`` runs each group. A part's result comes from the same fold, with the
# same operations in the same order, as alone: the same bits. ``COALESCE = False`` turns it
# off (tests compare both).
COALESCE = True
_ALIGN = 64  # each part's data start on a cache line of their own


class CoalescedPart(NamedTuple):
    """One collective of a ``mesh_coalesced`` group: its op and physical kwargs, as its
    own instruction had them."""

    op: str
    kwargs: dict


def coalescible(name: str, dtype, shape: tuple, kw: dict) -> int:
    """The bytes collective ``name`` (physical kwargs ``kw``) on a buffer of NumPy ``dtype``
    and ``shape`` puts in the exchange when it shares one with others inside a program
    (rounded up to a cache line), or 0 when it cannot share one: no shared-memory exchange,
    another op, a layout with no direct form, or data that do not fit the slots."""
    ex = _STATE.exchange
    if not COALESCE or ex is None or not ex.shared or name not in _FOLDS or "mesh" not in kw:
        return 0
    if not _one_device_each(kw["mesh"], tuple(kw["axes"]), PROCESS.count):
        return 0  # (asked of every process's box: each process must group alike)
    x = np.zeros(shape, dtype)
    lane = _lane_of(name, x, kw)
    if lane is None or lane.fold is None or not x.nbytes:
        return 0
    return _room(name, x, lane)


@functools.lru_cache(maxsize=256)
def _one_device_each(mesh, axes: tuple, count: int) -> bool:
    """Whether every process holds one device along mesh dims ``axes``: the answer is the
    same on every process (a lane is asked of this process's buffer only), so every
    process groups a program's collectives the same way and their exchanges meet."""
    return all(mesh.process_box(p)[k][1] == 1 for p in range(count) for k in axes)


def _room(name: str, x: np.ndarray, lane: _Lane) -> int:
    """The bytes ``lane``'s fold sends of ``x``, rounded up to a cache line."""
    n = len(lane.order)
    sent = _others_nbytes(x.nbytes, n) if name == "mesh_reduce_scatter" else x.nbytes
    return -(-sent // _ALIGN) * _ALIGN


def coalesce_capacity() -> int:
    """The bytes one exchange carries per process (the parts of a group must fit)."""
    ex = _STATE.exchange
    return 0 if ex is None else ex.capacity


_GROUPS: dict = {}  # id(kwargs) -> (kwargs, exchange, [_Fold per part] or None): as _TEXTS


def _coalesced_folds(args: list, kw: dict):
    """Each part's fold at its place in the slots (made once per program's kwargs and
    transport), or None when they cannot share the slots (the transport changed)."""
    got = _GROUPS.get(id(kw))
    ex = _STATE.exchange
    if got is None or got[0] is not kw or got[1] is not ex:
        folds = _placed_folds(args, kw["parts"], ex) if ex is not None and ex.shared else None
        if len(_GROUPS) >= 1024:
            _GROUPS.clear()
        got = _GROUPS[id(kw)] = (kw, ex, folds)
    return got[2]


def _placed_folds(args: list, parts: tuple, ex):
    """The parts' folds one after the other in the slots, or None when one has no fold or
    they do not fit."""
    folds, at = [], 0
    for (name, pkw), x in zip(parts, args, strict=True):
        lane = _lane_of(name, x, pkw)
        if lane is None or lane.fold is None:
            return None
        folds.append(_FOLDS[name](x, lane.order, lane.group, at=at, **lane.args))
        at += _room(name, x, lane)
    return folds if at <= ex.capacity else None


_GROUP_TEXTS: dict = {}  # id(kwargs) -> (kwargs, shapes and dtypes, text); as _TEXTS


def _group_text(args: list, kw: dict) -> str:
    """What a group run alone agrees on: each part's ``_agreement_text``."""
    layout = tuple((x.shape, x.dtype) for x in args)
    got = _GROUP_TEXTS.get(id(kw))
    if got is None or got[0] is not kw or got[1] != layout:
        texts = [_agreement_text(name, x, pkw) for (name, pkw), x in zip(kw["parts"], args)]
        if len(_GROUP_TEXTS) >= 1024:
            _GROUP_TEXTS.clear()
        got = _GROUP_TEXTS[id(kw)] = (kw, layout, "mesh_coalesced: " + "; ".join(texts))
    return got[2]


def _mesh_coalesced(args, kw):
    """Several small collectives of a program through one exchange (``coalescible``):
    ``kw["parts"]`` holds each one's ``CoalescedPart``, ``args`` their operands
    in the same order; returns their outputs in that order. Run alone (a program of this
    one instruction, which ``run_program`` does not agree on) the exchange is also the
    agreement, its digest naming every part, as an eager collective's is."""
    parts = kw["parts"]

    def lines():  # (a mismatch error's description, made only then)
        return [_describe(name, x, pkw) for (name, pkw), x in zip(parts, args)]

    def each():
        return [LOWERINGS[name]([x], pkw)[0] for (name, pkw), x in zip(parts, args)]

    folds = _coalesced_folds(args, kw)
    if folds is None:  # the parts no longer fit the slots: each on its own, in order
        if _STATE.depth:
            return each()
        with agreed_program(_group_text(args, kw), lines):
            return each()
    ex = _STATE.exchange
    parity = ex.parity()
    for (fill, _), x in zip(folds, args, strict=True):
        fill(x, parity)
    if _STATE.depth:
        _exchange_in_program(ex, parity, kw["what"])
    else:  # the data are in the slots already: the agreement's exchange carries them
        agree(_group_text(args, kw), lines)
    return [finish(parity) for _, finish in folds]


LOWERINGS["mesh_coalesced"] = _mesh_coalesced
_SELF_AGREEING.add("mesh_coalesced")


def now_function(name: str, x: np.ndarray, kw: dict):
    """The cross-process lowering of ``name`` (``mesh_reduce``, ``mesh_gather``,
    ``mesh_reduce_scatter``) with the physical kwargs ``kw`` (with ``mesh``), run at once
    on a realized host buffer like ``x``: one function of the buffer, made once per
    kwargs, shape and dtype (an eager call repeated every step keeps it: no lookup per
    call), returning the output array. None when the call has no direct form here (another
    op, several devices per process along the axes, a dtype MPI has no type for, a buffer
    that is not C-contiguous, or inside an agreed program). The function itself returns
    None, doing nothing, on a buffer that is not C-contiguous, inside an agreed program, or
    once MPI's transport changed (``activate`` with another communicator): the caller then
    takes the lazy path. A collective every process must call, as the lazy op's
    realization is."""
    if _STATE.depth or _STATE.comm is None or not x.flags.c_contiguous:
        return None
    lane = _lane_of(name, x, kw)
    return None if lane is None else lane.now


def _now_of(lane: _Lane):
    """The whole eager call of ``lane`` as one function of the buffer (``now_function``).
    With a fold it is ``agree`` with the data in the exchange, inlined: at 1 KiB the
    layers of calls cost more than the exchange itself (measured, 2 processes: 8.3 us
    of Python per call against 2.7 us for the same steps written out)."""
    st, ex = _STATE, _STATE.exchange
    text = lane.text
    if lane.pieces is not None:  # after the agreement, as the lazy path's lowering

        def in_pieces(x):
            if st.depth or st.exchange is not ex or not x.flags.c_contiguous:
                return None
            agree(text, lambda: [lane.line])
            with _watch(text):
                return lane.pieces(x)

        return in_pieces
    if lane.fold is None and lane.reads is None:

        def posted(x):
            if st.depth or st.exchange is not ex or not x.flags.c_contiguous:
                return None
            return _run_posted(lane, x)

        return posted

    fill, finish = lane.fold if lane.reads is None else lane.reads
    base = _hash(text)  # (``_counted_digest``, inlined)

    def name() -> str:  # the watchdog's (read while this call waits: the count is its own)
        return f"#{st.count} {text}"

    def lines() -> list:  # a mismatch error's description of this process's call
        return [lane.line]

    def folded(x):
        if st.depth or st.exchange is not ex or not x.flags.c_contiguous:
            return None
        parity = ex.parity()
        fill(x, parity)  # (into this process's slot, past the digest ``run`` writes)
        st.count = count = st.count + 1
        digest = (base + count * _COUNT_MIX) & _MASK64
        ex.run(digest, name)  # the agreement is where a process waits for late peers
        if not ex.agreed(parity, digest):
            _checked(f"#{count} {text}", lines, ex.digests(parity), digest)
        return finish(parity)

    return folded


def _run_posted(lane: _Lane, x: np.ndarray):
    """An eager call whose data do not fit the agreement: the MPI collective on the
    buffer itself, after (shared memory) or beside (MPI alone) its agreement."""
    posting = lane.post(x, lane.order, **lane.args)
    found = _STATE.groups.get(lane.group)
    ex = _STATE.exchange
    if found is None or ex.shared:
        # the group's communicator is made by a collective call: agree first, as the lazy
        # path does (once per mesh and axes); on shared memory the agreement costs a few
        # us, so the data collective simply follows it
        agree(lane.text, lambda: [lane.line])
        with _watch(lane.text):
            posting.start(_group(lane.group)[0]).Wait()
        return posting.result()
    digest = _counted_digest(lane.text)
    what = f"#{_STATE.count} {lane.text}"
    with _watch(what):
        check = ex.post(digest)
        data = posting.start(found[0])
        _wait(check.Test)
    try:
        _checked(what, lambda: [lane.line], ex.digests(0), digest)
    except DistributedError:
        _ABANDONED.append((data, posting.buffers))
        raise
    with _watch(what):
        data.Wait()
    return posting.result()


def _now_reduce(x, order, kind):
    out = _out_buffer(x.shape, x.dtype, x)
    op = _mpi_op(kind)
    return _Posting(lambda sub: sub.Iallreduce(x, out, op=op), lambda: out, (x, out))


def _now_gather(x, order, ndev, dim):
    recv = _out_buffer((len(order),) + x.shape, x.dtype, x)
    return _Posting(
        lambda sub: sub.Iallgather(_bytes(x), _bytes(recv)),
        lambda: _joined(recv, x.shape, order, ndev + dim),
        (x, recv),
    )


def _now_reduce_scatter(x, order, ndev, dim, kind):
    send = _scatter_blocks(x, ndev, dim, order)  # a view of ``x`` when already in order
    recv = _out_buffer(send.shape[1:], send.dtype, send)
    op = _mpi_op(kind)
    return _Posting(
        lambda sub: sub.Ireduce_scatter_block(send, recv, op=op), lambda: recv, (send, recv)
    )


_NOW.update(
    mesh_reduce=_now_reduce, mesh_gather=_now_gather, mesh_reduce_scatter=_now_reduce_scatter
)


# An eager collective whose data fit the agreement's slot: they are written into this
# process's slot and read back from every member's, through views made once per lane and
# set of slots (the slots are the same buffers for every exchange of the process).
# ``finish`` computes what the lazy path's fold (``_fold_reduce`` etc.) computes, with the
# same operations in the same order, so the bits are the same.
class _Fold(NamedTuple):
    """``fill(x, parity)`` writes the data into this process's slot of the next exchange
    (``parity``: its set of slots); ``finish(parity)``, once the agreement's exchange
    completed and the digests matched, makes the result (a new array: the slots are reused
    by a later exchange)."""

    fill: Any
    finish: Any


def _payload_views(shape: tuple, dtype, members: list, at: int = 0) -> list:
    """Per set of slots (parity 0 and 1), views of ``shape`` and ``dtype`` of this
    process's payload and of each member's (rank order) in the exchange's slots, ``at``
    bytes into each payload."""
    ex = _STATE.exchange
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize

    def view(row):
        return row[at : at + nbytes].view(dtype).reshape(shape)

    return [(view(ex.outgoing(j)), [view(ex.incoming(j)[p]) for p in members]) for j in (0, 1)]


def _reduce(parts: list, kind: str, near: int | None = None) -> np.ndarray:
    """The members' parts reduced in rank order (``_combine``'s reduction): a new array,
    from 16 KiB in a pooled buffer half a page from ``near``, the first part's address
    modulo 4 KiB (asked of NumPy, ~2 us, when the caller does not know it)."""
    first = parts[0]
    if first.nbytes < _APART_MIN_BYTES:  # (no pooled buffer to find)
        out = np.empty(first.shape, first.dtype)
    else:
        out = _out_buffer(first.shape, first.dtype, first if near is None else near)
    _reduce_into(parts, kind, out)
    return out


def _reduced(parts: list, kind: str):
    """``_reduce`` of parts fixed once per lane (views of the slots), as a function: the
    first part's address is asked once."""
    if len(parts) == 2 and parts[0].nbytes < _APART_MIN_BYTES:  # (``_reduce``'s, inlined)
        ufunc, (first, second) = _UFUNCS[kind], parts
        return lambda: ufunc(first, second)
    near = parts[0].ctypes.data if parts[0].nbytes >= _APART_MIN_BYTES else None
    return lambda: _reduce(parts, kind, near)


def _copy_into(slots: list):
    """A fold's ``fill`` that copies the buffer into this process's slot of the set
    (``slots[parity]``, a view of its shape and dtype): an item assignment, ~0.2-0.3 us
    quicker than ``np.copyto``'s dispatch at 1 KiB."""

    def fill(x, j):
        slots[j][...] = x

    return fill


def _fold_now_reduce(x, order, group, kind, at=0):
    views = _payload_views(x.shape, x.dtype, _members(group), at)
    finishes = [_reduced(parts, kind) for _, parts in views]
    return _Fold(_copy_into([mine for mine, _ in views]), lambda j: finishes[j]())


def _fold_now_gather(x, order, group, ndev, dim, at=0):
    views = _payload_views(x.shape, x.dtype, _members(group), at)
    blocks = np.argsort(order)  # the members in the blocks' order
    joined = [[parts[i] for i in blocks] for _, parts in views]
    d = ndev + dim
    shape = x.shape[:d] + (len(order) * x.shape[d],) + x.shape[d + 1 :]

    near = [parts[0].ctypes.data for parts in joined]

    def finish(j):
        out = _out_buffer(shape, x.dtype, near[j])
        return np.concatenate(joined[j], axis=d, out=out)

    def finish_small(j):  # no buffer to place or pool below 16 KiB: NumPy's own
        return np.concatenate(joined[j], axis=d)

    small = math.prod(shape) * x.dtype.itemsize < _APART_MIN_BYTES
    return _Fold(_copy_into([mine for mine, _ in views]), finish_small if small else finish)


def _fold_now_reduce_scatter(x, order, group, ndev, dim, kind, at=0):
    members = _members(group)
    blocks = _scatter_blocks(x, ndev, dim, order)
    shape = blocks.shape
    # this process's slot per set of slots (the others' parts are read as blocks, below)
    mine = [view for view, _ in _payload_views(_others_shape(shape), blocks.dtype, [], at)]
    own = members.index(PROCESS.index)  # each member reduces only the block it keeps
    # the others' parts, fixed per set of slots; this process's own block is the call's
    ex = _STATE.exchange
    received = [_received_blocks(ex.incoming(j), members, own, blocks, at) for j in (0, 1)]
    in_order = blocks.flags.c_contiguous and np.shares_memory(blocks, x)
    now: list = [None]  # the call's blocks (or its own block), from ``fill`` to ``finish``

    def blocks_of(x):
        # in order: the blocks are ``x``'s bytes (a contiguous view of all of them)
        return x.reshape(shape) if in_order else _scatter_blocks(x, ndev, dim, order)

    if len(members) == 2 and blocks.nbytes // 2 < _APART_MIN_BYTES:
        # two members and a small block: the one block the other member keeps is written,
        # and the two parts reduced in member order (``_put_others`` and ``_reduce``,
        # inlined: no pooled buffer to place at this size)
        ufunc, other = _UFUNCS[kind], [parts[1 - own] for parts in received]
        sent = [slot[0] for slot in mine]

        def fill(x, j):
            b = blocks_of(x)
            now[0] = b[own]
            sent[j][...] = b[1 - own]

        def finish(j):
            block, now[0] = now[0], None
            return ufunc(block, other[j]) if own == 0 else ufunc(other[j], block)

        return _Fold(fill, finish)

    # the result goes half a page from a part in a slot (their phase is known)
    near = _PAYLOAD_PHASE + (own - 1 if own else 0) * (blocks.nbytes // len(blocks))

    def fill(x, j):
        b = now[0] = blocks_of(x)
        _put_others(mine[j], b, own)

    def finish(j):
        parts = received[j].copy()
        parts[own] = now[0][own]
        now[0] = None
        return _reduce(parts, kind, near)

    return _Fold(fill, finish)


_FOLDS = {
    "mesh_reduce": _fold_now_reduce,
    "mesh_gather": _fold_now_gather,
    "mesh_reduce_scatter": _fold_now_reduce_scatter,
}
