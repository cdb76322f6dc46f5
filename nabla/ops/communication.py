"""The collectives under the original Nabla's module name, ``nabla.ops.communication``.

Each name is the function of ``nabla.ops.collectives`` (or ``nabla.ops.transfer``) itself,
not a second implementation: ``communication.ppermute is nabla.ppermute``. Added here:
``gather_all_axes`` (the original's name for making a sharded value whole on every device)
and ``transfer_to`` (the original's name for :func:`to_device`).
"""

from __future__ import annotations

from ..core.sharding import PartitionSpec
from ..runtime.tensor import Tensor
from ._util import as_tensor
from .collectives import (
    AllGatherOp,
    AllReduceOp,
    AllToAllOp,
    AxisIndexOp,
    BroadcastOp,
    PPermuteOp,
    ReduceScatterOp,
    ShardOp,
    all_gather,
    all_reduce,
    all_to_all,
    axis_index,
    broadcast,
    distributed_broadcast,
    pmean,
    ppermute,
    reduce_scatter,
    reshard,
    shard,
    unshard,
)
from .transfer import accelerator, cpu, gpu, to_device

transfer_to = to_device

__all__ = [
    "AllGatherOp",
    "AllReduceOp",
    "AllToAllOp",
    "AxisIndexOp",
    "BroadcastOp",
    "PPermuteOp",
    "ReduceScatterOp",
    "ShardOp",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "axis_index",
    "broadcast",
    "distributed_broadcast",
    "gather_all_axes",
    "pmean",
    "ppermute",
    "reduce_scatter",
    "reshard",
    "shard",
    "to_device",
    "transfer_to",
    "unshard",
    "cpu",
    "gpu",
    "accelerator",
]


def gather_all_axes(x) -> Tensor:
    """``x`` whole on every device of its mesh: every sharded dim gathered, partial sums
    reduced (the original Nabla's ``gather_all_axes``). The global value is unchanged.

    Args:
        x: a tensor; sharded on a mesh, or not (then it is returned as is).

    Returns:
        ``x`` replicated on its mesh (``reshard(x, mesh, P())``).
    """
    x = as_tensor(x, op="gather_all_axes")
    spec = x.sharding
    if spec is None:
        return x
    return reshard(x, spec.mesh, PartitionSpec())
