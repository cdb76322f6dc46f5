"""``visualize_sharding``: which device holds which block of a sharded tensor (a rich table).

Reads only a tensor's shape and ``ShardingSpec``; computes nothing.
"""

from __future__ import annotations

from ..core.sharding import ShardingError, ShardingSpec
from .tensor import Tensor

__all__ = ["visualize_sharding", "sharding_table"]


def _blocks(spec, shape):
    """Per dim, the distinct block ranges, and per device its block's coordinates."""
    where: dict = {}
    for dev in range(spec.mesh.size):
        idx = spec.block_index(dev, shape)
        key = tuple((s.start, s.stop) for s in idx)
        where.setdefault(key, []).append(dev)
    return where


def sharding_table(x: Tensor):
    """The ``rich.table.Table`` that :func:`visualize_sharding` prints."""
    from rich.table import Table  # noqa: PLC0415 - why: rich loads only when a table is drawn

    spec = x.sharding
    shape = tuple(x.shape)
    if spec is None:
        raise ShardingError(f"visualize_sharding: the tensor of shape {shape} is not sharded")
    if not 1 <= len(shape) <= 2:
        raise ShardingError(
            f"visualize_sharding: shows 1-D and 2-D tensors; this one has shape {shape}"
        )
    shape2 = shape if len(shape) == 2 else (1,) + shape
    dims = spec.dims if len(shape) == 2 else ((),) + tuple(spec.dims)
    spec2 = ShardingSpec(spec.mesh, dims, spec.partial)
    where = _blocks(spec2, shape2)
    rows = sorted({k[0] for k in where})
    cols = sorted({k[1] for k in where})
    title = f"{spec.mesh.name} {spec.mesh.shape} {spec.mesh.axis_names}: {spec.to_partition_spec()}"
    if spec.partial:
        title += " partial " + ", ".join(f"{a}:{k}" for a, k in spec.partial)
    table = Table(title=title, show_header=True, show_lines=True)
    table.add_column("")
    for c0, c1 in cols:
        table.add_column(f"[{c0}:{c1}]" if len(shape) else "", justify="center")
    for r0, r1 in rows:
        cells = []
        for c in cols:
            devs = where.get(((r0, r1), c), [])
            cells.append("dev " + ",".join(str(d) for d in devs))
        table.add_row(f"[{r0}:{r1}]" if len(shape) == 2 else "", *cells)
    return table


def visualize_sharding(x: Tensor, console=None):
    """Print which mesh device holds which block of ``x`` (JAX's ``visualize_sharding``):
    one cell per block, listing the devices (flat indices) that hold it.

    Args:
        x: a sharded 1-D or 2-D tensor.
        console: a ``rich.console.Console`` to print to (default: a new one on stdout).

    Returns:
        The ``rich`` table that was printed.
    """
    from rich.console import Console  # noqa: PLC0415 - why: rich loads only when printing

    table = sharding_table(x)
    (console or Console()).print(table)
    return table
