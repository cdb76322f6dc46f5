"""``shard_map``: write the per-device program; JAX's semantics.

Mechanism: each mesh axis becomes a vmap level for the body (``core.state.spmd_axes``). An
argument is laid out by its ``in_specs`` entry (``reshard``) and seen per device
(``mesh_to_local``: its buffer already holds one block per device, so no data moves); a value
varies along an axis exactly when it carries the axis's level, which is how collectives
inside the body (``nabla.ops.per_device``) and the replication check find what to do. On
exit each result is read as one sharded value by its ``out_specs`` entry
(``mesh_from_local``).

The body runs once, over every device's block at once: grad, vmap and compile see ordinary
ops, in either order.
"""

from __future__ import annotations

import contextlib
import functools

from ..core.pytree import broadcast_prefix, tree_flatten, tree_unflatten
from ..core.sharding import DeviceMesh, PartitionSpec, ShardingError, ShardingSpec
from ..core.state import mesh_levels, new_level, spmd_axes, spmd_axis, vmap_level
from ..ops import collectives, per_device
from ..ops._util import as_tensor
from ..runtime.tensor import Tensor

__all__ = ["shard_map"]


def _is_spec(x) -> bool:
    return x is None or isinstance(x, PartitionSpec | ShardingSpec)


def _specs_for(op, specs, tree, n_args=None):
    """``specs`` (a pytree prefix of ``tree`` made of ``P``/None, or the original's dict
    ``{arg index: spec}``) broadcast to one spec per leaf of ``tree``."""
    if isinstance(specs, dict) and n_args is not None:
        specs = _by_index(op, specs, n_args, "arguments")
    if isinstance(specs, list):
        specs = tuple(specs)
    return broadcast_prefix(specs, tree, is_leaf=_is_spec, spec_name=f"shard_map {op}")


def _out_specs_of(out_specs, out):
    """The original's ``{output index: spec}`` dict as the result's prefix: one spec per
    element of a tuple or list result, the spec of key 0 for a single result."""
    if not isinstance(out_specs, dict) or isinstance(out, dict):
        return out_specs  # (a dict result's specs are a dict prefix, as JAX's)
    many = isinstance(out, tuple | list)
    specs = _by_index("out_specs", out_specs, len(out) if many else 1, "results")
    return (type(out)(specs) if isinstance(out, list) else specs) if many else specs[0]


def _by_index(op, specs: dict, n: int, what: str) -> tuple:
    """The original's ``{index: spec}`` dict as a tuple of ``n`` specs (None where a key
    is missing), every key checked to be one of the ``n`` indices."""
    bad = [k for k in specs if not isinstance(k, int) or not 0 <= k < n]
    if bad:
        raise ShardingError(
            f"shard_map {op}: key {bad[0]!r} of {specs!r} is not the index of one of the {n} {what}"
        )
    return tuple(specs.get(i) for i in range(n))


def shard_map(
    f=None,
    mesh: DeviceMesh = None,
    in_specs=None,
    out_specs=None,
    check_rep=True,
    *,
    check_vma=None,
):
    """Map ``f`` over the blocks of a device mesh (JAX's ``shard_map``).

    ``f`` sees each device's block of every argument (laid out by ``in_specs``) and returns
    per-device values, assembled by ``out_specs``. Inside it collectives name mesh axes:
    ``nb.all_reduce(x, "sum", axes="tp")``, ``nb.all_gather(x, 0, axes="dp")``,
    ``nb.ppermute(x, [(i, (i + 1) % n) for i in range(n)], axis_name="pp")``,
    ``nb.axis_index(mesh, "tp")``.

    Args:
        f: the per-device function (or use ``shard_map(mesh=..., ...)`` as a decorator).
        mesh: the ``DeviceMesh``.
        in_specs: one ``P`` (or None: replicated) per positional argument, as a tuple (a
            pytree prefix of the arguments), or the original API's ``{index: spec}`` dict.
        out_specs: a pytree prefix of ``f``'s result made of ``P``/None, or the original
            API's ``{result index: spec}`` dict.
        check_rep: refuse a result whose ``out_specs`` leaves out a mesh axis along which the
            result differs between devices (it would not be one value). With False such a
            result takes the values of the first device along that axis.
        check_vma: JAX's newer name for ``check_rep`` (either may be given).

    Returns:
        The mapped function over global (sharded or whole) arguments.

    Raises:
        ShardingError: for a spec naming an unknown axis or not dividing a dim, and for the
            replication check.
    """
    if check_vma is not None:
        if check_rep is not True and bool(check_rep) != bool(check_vma):
            raise TypeError(
                f"shard_map: check_rep={check_rep!r} and check_vma={check_vma!r} disagree "
                "(check_vma is JAX's newer name for check_rep: pass one)"
            )
        check_rep = bool(check_vma)
    if f is None:
        return functools.partial(
            shard_map, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=check_rep
        )
    if not isinstance(mesh, DeviceMesh):
        raise ShardingError(f"shard_map: mesh must be a DeviceMesh, got {type(mesh).__name__}")

    @functools.wraps(f)
    def mapped(*args):
        others = {m.name for _lv, m in spmd_axes.values() if m != mesh}
        if others:
            raise ShardingError(
                f"shard_map over mesh {mesh.name!r} is called inside a shard_map body over mesh "
                f"{sorted(others)[0]!r}: a body sees one device's blocks, which another mesh's "
                "shard_map cannot lay out; call the inner function directly, or use collectives "
                "over the enclosing mesh's axes"
            )
        nested = [a for a in mesh.axis_names if a in spmd_axes]
        if nested:
            raise ShardingError(
                f"shard_map: mesh axis {nested[0]!r} already belongs to an enclosing shard_map; "
                "nesting over the same axes is not supported"
            )
        leaves, tree = tree_flatten(args)
        specs = _specs_for("in_specs", in_specs, args, len(args))
        levels = tuple((a, new_level()) for a in mesh.axis_names)
        if mesh.spans_processes:  # collectives over these levels cross processes
            mesh_levels.update((lv, (a, mesh, levels)) for a, lv in levels)
        with contextlib.ExitStack() as stack:
            # a level's batch dim holds the devices this process has along the axis
            for (a, lv), n in zip(levels, mesh.local_mesh_shape, strict=True):
                stack.enter_context(vmap_level(lv, n))
                stack.enter_context(spmd_axis(a, lv, mesh))
            local = []
            for leaf, spec in zip(leaves, specs, strict=True):
                if not isinstance(leaf, Tensor) and not hasattr(leaf, "shape"):
                    # a Python value is passed as it is; its spec is a 0-d value's (JAX's)
                    ShardingSpec.from_spec(mesh, spec, 0, f"shard_map in_specs (for {leaf!r})")
                    local.append(leaf)
                    continue
                x = as_tensor(leaf, op="shard_map")
                s = ShardingSpec.from_spec(mesh, spec, x.ndim, "shard_map in_specs")
                try:
                    local.append(collectives.to_local(x, mesh, s, levels))
                except ShardingError as e:  # (an uneven split: the error names ``shard``)
                    raise ShardingError(
                        f"shard_map: in_specs entry {spec!r} for the argument of shape "
                        f"{tuple(x.shape)}: {e}"
                    ) from None
            out = f(*tree_unflatten(tree, local))
            outs, out_tree = tree_flatten(out)
            ospecs = _specs_for("out_specs", _out_specs_of(out_specs, out), out)
            if len(ospecs) != len(outs):
                raise ShardingError(
                    f"shard_map: out_specs {out_specs!r} do not match the result {out!r}"
                )
            return tree_unflatten(
                out_tree,
                [_exit(y, s, mesh, levels, check_rep) for y, s in zip(outs, ospecs, strict=True)],
            )

    return mapped


def _exit(y, spec, mesh, levels, check_rep):
    if not isinstance(y, Tensor):
        y = as_tensor(y, op="shard_map")
    s = ShardingSpec.from_spec(mesh, spec, y.ndim, "shard_map out_specs")
    for a, lv in levels:
        if lv in y._impl.levels and a not in s.sharded_axes:
            if check_rep:
                raise ShardingError(
                    f"shard_map: out_specs {spec!r} leave mesh axis {a!r} out (replicated) "
                    f"but the result of shape {y.shape} differs between devices along it; "
                    "split a dim over it, reduce it (all_reduce), or pass check_rep=False"
                )
            y = per_device.broadcast(y, (0,), [lv])  # the first device's values along it
    return collectives.from_local(y, mesh, s.dims, levels)
