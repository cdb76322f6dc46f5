"""Many processes running one SPMD program over MPI (``nb.distributed``).

Launch the same script on every process (``mpiexec -n 4 python train.py``) and call
:func:`initialize` first. Every process then runs the same program, holds only the blocks of
its own devices of every sharded tensor, and the collectives (the explicit ones and those
sharding propagation inserts) exchange blocks between processes with MPI. A ``DeviceMesh``
spans the devices of every process: process ``p`` of ``P`` holds the devices
``[p * size / P, (p + 1) * size / P)`` in row-major order, a box of the mesh (so a
``(2, 2)`` mesh over 2 processes is 2 processes x 2 simulated local devices).

Rules of the multi-controller model (as JAX's):
- ``shard(x, mesh, spec)`` takes the same global value on every process and keeps only the
  local blocks; :func:`from_process_local` builds a global tensor from each process's part.
- ``.numpy()``, ``.item()``, ``print`` of a sharded tensor gather it: every process must call.
- ``addressable_shards`` lists the process's own shards.
- Every process must run the same ops, shapes and shardings in the same order; a mismatch at a
  collective is an error on every process, a process that stops answering makes the others
  abort after ``NABLA_MPI_TIMEOUT`` seconds, and an uncaught exception on any process aborts
  all of them.

Importing nabla never imports ``mpi4py``; a script run without ``mpiexec`` is one process and
:func:`initialize` only records that.
"""

from __future__ import annotations

import numpy as np

from .backends import mpi as _mpi
from .core.device import get_default_device
from .core.dtypes import from_numpy_dtype
from .core.sharding import PROCESS, DeviceMesh, ShardingError, ShardingSpec
from .runtime.graph import GRAPH
from .runtime.tensor import Tensor

__all__ = [
    "initialize",
    "is_initialized",
    "process_index",
    "process_count",
    "from_process_local",
    "DistributedError",
]

DistributedError = _mpi.DistributedError


def initialize() -> None:
    """Join the MPI world this process was launched in (``mpiexec``/``srun``).

    Reads the rank and size of ``MPI.COMM_WORLD``; from then on meshes span every process and
    collectives cross processes. A single process (launched without MPI, or with ``-n 1``) is
    left as it was. Calling it again is a no-op. Raises ``DistributedError`` when the process
    was started by an MPI launcher but ``mpi4py`` is missing (``pip install "nabla[mpi]"``).

    Call it first, before making meshes, sharded tensors or compiled functions: what was
    built before it was laid out for one process.
    """
    if is_initialized():
        return
    try:
        import mpi4py  # noqa: F401, PLC0415 - the optional transport
    except ImportError:
        if _mpi.launched_by_mpi():
            raise DistributedError(
                "nb.distributed.initialize: this process was started by an MPI launcher but "
                'mpi4py is not installed; install the extra: pip install "nabla[mpi]"'
            ) from None
        _STATE["initialized"] = True
        return
    _mpi.activate()
    _STATE["initialized"] = True
    # programs bound before now would run the single-process collectives
    GRAPH.clear_cache()


_STATE = {"initialized": False}


def is_initialized() -> bool:
    """True once :func:`initialize` ran."""
    return _STATE["initialized"]


def process_index() -> int:
    """This process's rank, ``0..process_count()-1`` (0 in a single process)."""
    return PROCESS.index


def process_count() -> int:
    """How many processes run the program (1 without MPI)."""
    return PROCESS.count


def from_process_local(local, mesh: DeviceMesh, spec) -> Tensor:
    """A global sharded tensor from each process's own part, with no process holding the
    whole value (JAX's ``make_array_from_process_local_data``).

    Args:
        local: this process's part of the global value: the blocks its devices hold, joined
            (a NumPy array or a Tensor). Along a dim split over mesh axes the process's
            devices hold consecutive blocks; along other dims it is the whole extent.
        mesh: the ``DeviceMesh`` (spanning the processes).
        spec: a ``P(...)`` for the global value.

    Returns:
        A sharded Tensor whose global shape follows from ``local`` and the spec; in one
        process this is ``shard(local, mesh, spec)``.
    """
    op = "from_process_local"
    local = np.asarray(local.numpy() if isinstance(local, Tensor) else local)
    sharding = ShardingSpec.from_spec(mesh, spec, local.ndim, op)
    box = mesh.local_box
    blocks_held, shape = [], []
    for d, axes in enumerate(sharding.dims):
        # the block indices of dim d this process's devices hold
        held = sorted({_block(mesh, axes, coords) for coords in _box_coords(box)})
        if held != list(range(held[0], held[0] + len(held))):
            raise ShardingError(
                f"{op}: dim {d} split over {axes}: the devices of process {PROCESS.index} hold "
                f"blocks {held}, not a consecutive run; reorder the mesh axes of the spec"
            )
        if local.shape[d] % len(held):
            raise ShardingError(
                f"{op}: dim {d} of the local part (shape {local.shape}) has size "
                f"{local.shape[d]}, not a multiple of the {len(held)} blocks this process holds"
            )
        blocks_held.append(held)
        shape.append(local.shape[d] // len(held) * sharding.splits(d))
    if PROCESS.count > 1:  # every process must build the same global tensor
        _mpi.agree(f"{op}: global shape {tuple(shape)}, {local.dtype}, {sharding}")
    block_shape = sharding.local_shape(tuple(shape))
    slab = np.empty(mesh.local_mesh_shape + block_shape, dtype=local.dtype)
    for coords in _box_coords(box):
        sel = []
        for d, axes in enumerate(sharding.dims):
            b = _block(mesh, axes, coords) - blocks_held[d][0]
            sel.append(slice(b * block_shape[d], (b + 1) * block_shape[d]))
        slab[tuple(c - o for c, (o, _) in zip(coords, box, strict=True))] = local[tuple(sel)]
    dtype = from_numpy_dtype(local.dtype)
    return Tensor._from_buffer(tuple(shape), dtype, get_default_device(), slab, sharding)


def _box_coords(box) -> list:
    """Every device's mesh coordinates in ``box``, row-major."""
    ranges = [range(o, o + s) for o, s in box]
    out = [()]
    for r in ranges:
        out = [c + (i,) for c in out for i in r]
    return out


def _block(mesh: DeviceMesh, axes, coords) -> int:
    b = 0
    for a in axes:
        k = mesh.axis(a)
        b = b * mesh.shape[k] + coords[k]
    return b
