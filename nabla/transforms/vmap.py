"""``vmap``: vectorize a function over a batch axis, with JAX semantics.

Mechanism (``docs/architecture.md``, "Transforms as interpreters"): on entry each mapped
input's axis moves into the physical batch prefix and is tagged with a fresh vmap *level*;
the function sees logical shapes; on exit the level's dim moves to ``out_axes``. Ops align
operands carrying different levels (missing levels broadcast), so closures over outer
levels, unbatched captures, equal-sized levels and outputs that do not depend on the mapped
input all give JAX's answers.
"""

from __future__ import annotations

import functools
import numbers
import re
from typing import NamedTuple

import numpy as np

from ..core.dtypes import DType
from ..core.pytree import (
    broadcast_prefix,
    keystr,
    tree_flatten,
    tree_flatten_with_path,
    tree_unflatten,
)
from ..core.sharding import DeviceMesh, ShardingError
from ..core.state import STATE, new_level, vmap_level
from ..ops import reduction
from ..ops._util import as_tensor, check_callable, norm_axis
from ..ops.batching import broadcast_levels, from_batch, stack_examples, to_batch
from ..ops.collectives import split_level
from ..ops.creation import arange
from ..ops.indexing import fits_in_place, rebind, restore, restore_and_refuse
from ..ops.view import broadcast_to, moveaxis, unsqueeze
from ..runtime.tensor import Tensor

__all__ = ["vmap"]


def _is_none(x):
    return x is None


def _check_axes_spec(name, spec):
    for leaf in tree_flatten(spec, is_leaf=_is_none)[0]:
        if leaf is not None and not isinstance(leaf, numbers.Integral):
            raise TypeError(f"vmap {name} must be ints or None, got {leaf!r}")


def _checked_in_axes(in_axes):
    """``in_axes`` as vmap reads it: a list is a tuple (one entry per positional argument);
    a dict, or a leaf that is not an int or None, is refused."""
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if isinstance(in_axes, dict):
        raise TypeError(
            "vmap in_axes must be an int, None, or a tuple with one entry per positional "
            f"argument, got a dict {in_axes!r}; wrap it in a tuple: in_axes=({{...}},)"
        )
    _check_axes_spec("in_axes", in_axes)
    return in_axes


def vmap(
    fun=None,
    in_axes=0,
    out_axes=0,
    axis_name=None,
    axis_size=None,
    spmd_axis_name=None,
    mesh=None,
):
    """Vectorize ``fun`` over an axis of its inputs.

    Args:
        fun: function of tensors/pytrees. As in JAX, keyword arguments are mapped over
            their axis 0: every tensor or NumPy array leaf in them is; other leaves
            (Python scalars, strings, None) are passed through unchanged (JAX raises).
        in_axes: int, None, or a pytree prefix of the positional arguments (a tuple with one
            entry per argument), giving the mapped axis of each input (negative counts from
            the end; None means not mapped).
        out_axes: int, None, or a pytree prefix of the output: where the mapped axis goes.
        axis_name: a name (any hashable, e.g. a string) for the mapped axis, as JAX's:
            ``nb.lax.psum(x, name)`` (``pmean``, ``pmax``, ``pmin``) inside the function
            reduces over the examples, and ``nb.lax.axis_index(name)`` is each example's
            position.
        axis_size: the batch size (a non-negative int); required when no input is mapped.
        spmd_axis_name: mesh axis name (or tuple of names) to split the new batch dim over:
            every mapped input is resharded so its batch dim is split over it, and results
            keep that split. Values never change, only where the blocks live.
        mesh: the ``DeviceMesh`` of ``spmd_axis_name``; default: the mesh of the sharded
            inputs, else the one the function's outputs are sharded on (an error when there
            is none).

    Returns:
        The vectorized function. Usable as ``@vmap`` or ``@vmap(in_axes=...)``.

    Raises:
        ValueError: for mapped inputs of inconsistent sizes (naming the arguments), a 0-d
            input with an int axis, an axis out of range, all-None ``in_axes`` without
            ``axis_size``, or a negative ``axis_size``.
        TypeError: for an ``axis_size`` that is not an int.

    Example:
        >>> nb.vmap(lambda x, y: x @ y, in_axes=(0, None))(xs, w)
    """
    if fun is None:
        return functools.partial(
            vmap,
            in_axes=in_axes,
            out_axes=out_axes,
            axis_name=axis_name,
            axis_size=axis_size,
            spmd_axis_name=spmd_axis_name,
            mesh=mesh,
        )
    check_callable("vmap", fun)
    in_axes = _checked_in_axes(in_axes)
    _check_axes_spec("out_axes", out_axes)
    if spmd_axis_name is not None and not isinstance(spmd_axis_name, str | tuple):
        raise TypeError(f"vmap spmd_axis_name must be a str, got {spmd_axis_name!r}")
    _check_axis_size(axis_size)

    @functools.wraps(fun)
    def vmapped(*args, **kwargs):
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            raise ValueError(
                f"vmap in_axes has {len(in_axes)} entries but the function got {len(args)} "
                "positional arguments"
            )
        spec = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        leaves, treedef = tree_flatten((args, kwargs))
        axes = broadcast_prefix(spec, args, spec_name="vmap in_axes specification")
        # keyword arguments: JAX maps them over axis 0; non-array leaves pass unchanged
        axes = axes + [0 if _is_array(x) else None for x in leaves[len(axes) :]]
        paths = _leaf_names(args) + _leaf_names(kwargs, keyword=True)
        prepared, size = _mapped_leaves(leaves, axes, paths, axis_size)

        spmd = None
        if spmd_axis_name is not None:
            spmd = _spmd_target(spmd_axis_name, mesh, leaves, size, required=False)
        level = new_level()
        with vmap_level(level, size):
            batched = [leaf if ax is None else to_batch(leaf, ax, level) for leaf, ax in prepared]
            if spmd is not None:
                batched = [
                    b if ax is None else split_level(b, level, *spmd)
                    for b, (_, ax) in zip(batched, prepared, strict=True)
                ]
            befores = [b._impl if isinstance(b, Tensor) else None for b in batched]
            args, kwargs = tree_unflatten(treedef, batched)
            outer, STATE.vmap_writes = STATE.vmap_writes, []
            recording = STATE.recording if isinstance(STATE.recording, list) else None
            recorded_before = len(recording) if recording is not None else 0
            names = STATE.vmap_names
            if axis_name is not None:
                STATE.vmap_names = {**names, axis_name: NamedAxis(level, size)}
            try:
                out = fun(*args, **kwargs)
            except BaseException:  # the writes that would be refused are undone all the same
                restore(_batched_writes(STATE.vmap_writes, level, None))
                raise
            finally:
                writes, STATE.vmap_writes = STATE.vmap_writes, outer
                STATE.vmap_names = names
            # (under compile the trace's write records keep the function's own tensors
            # alive: one whose value before the write was made inside is its own too)
            made = (
                {id(n) for n in recording[recorded_before:]}
                if recording is not None and writes
                else None
            )
            _refuse_batched_writes(writes, level, out, made)
            if outer is not None:
                outer.extend(writes)
            _write_back_mapped(prepared, batched, befores, level, size)
            if spmd_axis_name is not None and spmd is None:
                # no mesh given and no sharded input: the body's shardings name it (a row
                # sharded inside the function), and every output's new dim is split over it
                found = _meshes(tree_flatten(out)[0])
                spmd = _spmd_target(spmd_axis_name, mesh, list(found.values()), size)
                return _unbatch(out, level, size, out_axes, spmd, every=True)
            return _unbatch(out, level, size, out_axes, spmd)

    return vmapped


class NamedAxis(NamedTuple):
    """A running ``vmap(axis_name=)``'s axis, as ``STATE.vmap_names`` keeps it."""

    level: int  # the vmap level of its examples
    size: int  # how many examples


def names_a_vmap(axis_name) -> bool:
    """Whether ``axis_name`` (a name or a tuple of names) names running vmaps only."""
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    return bool(names) and all(_hashable(n) and n in STATE.vmap_names for n in names)


def _hashable(name) -> bool:
    try:
        hash(name)
    except TypeError:
        return False
    return True


_REDUCE = {"sum": reduction.sum, "max": reduction.max, "min": reduction.min}


def reduce_over_vmap(x, axis_name, kind: str) -> Tensor:
    """``x`` reduced (``kind``: sum, mean, max or min) over the examples of the vmaps named
    ``axis_name``: one value, the same for every example (JAX's ``psum`` and its kin under
    ``vmap(axis_name=)``)."""
    x = as_tensor(x, op=f"p{kind}")
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    count = 1
    for name in names:  # (a value the same in every example is stacked all the same: its
        # cotangent is the sum of the examples', which may differ)
        named = STATE.vmap_names[name]
        count *= named.size
        x = _REDUCE["sum" if kind == "mean" else kind](stack_examples(x, named.level, 0), axis=0)
    return x / count if kind == "mean" else x


def vmap_axis_index(axis_name) -> Tensor:
    """Each example's position along the vmap named ``axis_name`` (int32)."""
    named = STATE.vmap_names[axis_name]
    return to_batch(arange(named.size, dtype=DType.int32), 0, named.level)


def _write_back_mapped(prepared, batched, befores, level: int, size: int) -> None:
    """A mapped tensor argument updated in place inside the function (``x.add_(1)``) is
    updated for the caller too, each example's new value at its place along the mapped
    axis, as ``torch.func.vmap`` updates its input."""
    for (x, ax), b, before in zip(prepared, batched, befores, strict=True):
        if ax is None or not isinstance(x, Tensor) or b._impl is before:
            continue
        if level in b._impl.levels:
            new = from_batch(b, level, ax)
        else:  # one value for every example (``x.zero_()``)
            new = broadcast_to(unsqueeze(b, ax), x.shape)
        if fits_in_place(x, new):
            rebind(x, new, item=True)


def _batched_writes(writes: list, level: int, out, made: set | None = None) -> list:
    """The ``(tensor, impl before)`` of ``writes`` that gave a tensor from outside the
    vmapped function a value batched by this vmap (``out``: the function's result, whose
    tensors are its own business; None when it raised; ``made``: ids of the nodes a trace
    recorded while the function ran, whose values are the function's own)."""
    results = {id(o) for o in tree_flatten(out)[0]} if out is not None else set()
    bad = []
    for ref, before in writes:
        x = ref()
        if x is None or id(x) in results or level in before.levels:
            continue
        if made and before.node is not None and id(before.node) in made:
            continue
        if level in x._impl.levels:
            bad.append((x, before))
    return bad


def _refuse_batched_writes(writes: list, level: int, out, made: set | None = None) -> None:
    """A tensor from outside the vmapped function cannot take a value batched by this vmap
    in place (``buf[0] = a[1]`` on a captured ``buf``): it would keep a value of one lane
    per example after the vmap, unreadable. Refused, as ``torch.func.vmap`` refuses it,
    with the tensor's value restored; a tensor the function made and returns, or drops,
    is its own business."""
    bad = _batched_writes(writes, level, out, made)
    if bad:
        restore_and_refuse(
            bad,
            lambda x: (
                f"vmap: a tensor from outside the vmapped function (shape {tuple(x.shape)}) "
                "is updated in place with a value that differs per example; it cannot keep "
                "it after the vmap. Return the value from the function instead"
            ),
        )


def _check_axis_size(axis_size) -> None:
    """``axis_size`` is None or a non-negative int (JAX's check): a float was truncated
    and a negative size failed later, inside the backend."""
    if axis_size is None:
        return
    if isinstance(axis_size, bool) or not isinstance(axis_size, numbers.Integral):
        raise TypeError(f"vmap axis_size must be an int, got {axis_size!r}")
    if axis_size < 0:
        raise ValueError(f"vmap axis_size must be >= 0, got {axis_size}")


def _mapped_leaves(leaves, axes, paths, axis_size) -> tuple[list, int]:
    """Each input leaf as ``(value, mapped axis or None)``, a mapped one as a tensor with its
    axis counted from the start, and the batch size: the mapped axes' common size (named by
    ``paths`` in errors), or ``axis_size`` when nothing is mapped."""
    size = None
    sources = []
    prepared = []
    for leaf, ax, where in zip(leaves, axes, paths):
        if ax is None:
            prepared.append((leaf, None))
            continue
        t = leaf if isinstance(leaf, Tensor) else _to_tensor(leaf, where)
        if t.ndim == 0:
            raise ValueError(
                f"vmap was asked to map axis {ax} of {where}, but it is a 0-d (scalar) value"
            )
        if not -t.ndim <= ax < t.ndim:
            raise ValueError(f"vmap in_axes {ax} is out of range for {where} of shape {t.shape}")
        ax %= t.ndim
        n = t.shape[ax]
        sources.append(f"{where} of shape {t.shape} (axis {ax}: size {n})")
        if size is None:
            size = n
        elif n != size:
            raise ValueError(
                "vmap got inconsistent sizes for the mapped axis: " + "; ".join(sources)
            )
        prepared.append((t, ax))
    if size is None:
        if axis_size is None:
            raise ValueError("vmap needs axis_size when no input is mapped (all in_axes None)")
        size = int(axis_size)
    elif axis_size is not None and int(axis_size) != size:
        raise ValueError(f"vmap axis_size={axis_size} differs from the mapped size {size}")
    return prepared, size


def _meshes(leaves) -> dict:
    """The meshes ``leaves`` (tensors among them) are sharded on, by identity."""
    return {
        id(leaf._impl.sharding.mesh): leaf
        for leaf in leaves
        if isinstance(leaf, Tensor) and leaf._impl.sharding is not None
    }


def _spmd_target(names, mesh, leaves, size, required=True):
    """``(mesh, axes)`` for ``spmd_axis_name``: the mesh given, or the sharded inputs' one
    (None when there is none and it is not ``required``: the outputs' then)."""
    axes = (names,) if isinstance(names, str) else tuple(names)
    if mesh is not None and not isinstance(mesh, DeviceMesh):
        raise ShardingError(f"vmap: mesh must be a DeviceMesh, got {type(mesh).__name__}")
    if mesh is None:
        meshes = {
            leaf._impl.sharding.mesh
            for leaf in leaves
            if isinstance(leaf, Tensor) and leaf._impl.sharding is not None
        }
        if len(meshes) > 1:
            raise ShardingError(f"vmap: the sharded inputs are on different meshes: {meshes}")
        if not meshes:
            if not required:
                return None
            raise ShardingError(
                f"vmap(spmd_axis_name={names!r}) needs a mesh: pass mesh=, map inputs "
                "sharded on one, or shard the outputs on one inside the function"
            )
        mesh = meshes.pop()
    n = 1
    for a in axes:
        n *= mesh.axis_size(mesh.axis_names[mesh.axis(a, "vmap")])
    if size % n:
        raise ShardingError(
            f"vmap: the batch size {size} is not divisible by the {n} devices of mesh axes "
            f"{axes} (spmd_axis_name)"
        )
    return mesh, axes


def _is_array(leaf) -> bool:
    return isinstance(leaf, Tensor | np.ndarray)


def _to_tensor(leaf, where):
    if isinstance(leaf, np.ndarray | list | numbers.Number):
        return as_tensor(leaf)
    raise TypeError(f"vmap can only map tensors and arrays, got {type(leaf).__name__} for {where}")


def _unbatch(out, level, size, out_axes, spmd=None, every=False):
    leaves, treedef = tree_flatten(out)
    spec = out_axes
    if isinstance(out, tuple) and isinstance(out_axes, list):
        spec = tuple(out_axes)
    axes = broadcast_prefix(spec, out, spec_name="vmap out_axes specification")
    result = []
    for leaf, ax in zip(leaves, axes):
        if not isinstance(leaf, Tensor):
            if ax is None:
                result.append(leaf)
                continue
            if not isinstance(leaf, np.ndarray | np.generic | numbers.Number):
                # (JAX's TypeError; it read "constant: cannot make a tensor from str")
                raise TypeError(
                    f"vmap: the function returned a {type(leaf).__name__} ({leaf!r:.40}) where "
                    "outputs are tensors, arrays or numbers (or give it out_axes None)"
                )
            leaf = as_tensor(leaf)
        if ax is None:
            if level in leaf._impl.levels:
                raise ValueError(
                    "vmap out_axes is None for an output that depends on the mapped input "
                    f"(logical shape {leaf.shape})"
                )
            result.append(leaf)
            continue
        nd = leaf.ndim + 1
        if not -nd <= ax < nd:
            raise ValueError(f"vmap out_axes {ax} is out of range for an output of rank {nd - 1}")
        if spmd is not None and level not in leaf._impl.levels:
            # an output the mapped inputs do not reach (every in_axes None) gets the new
            # dim split over spmd_axis_name too, as the mapped ones have it (it stayed whole)
            levels = tuple(sorted({*leaf._impl.levels, level}))
            leaf = split_level(broadcast_levels(leaf, levels), level, *spmd)
        elif every:  # (the mapped inputs were not split: the mesh was found only now)
            leaf = split_level(leaf, level, *spmd)
        result.append(from_batch(leaf, level, ax % nd))
    return tree_unflatten(treedef, result)


def _leaf_names(args, keyword=False):
    pairs, _ = tree_flatten_with_path(args)
    names = []
    for path, _ in pairs:
        if path:
            head = path[0]
            idx = getattr(head, "idx", getattr(head, "key", "?"))
            rest = keystr(path[1:]) if len(path) > 1 else ""
            names.append(f"keyword argument {idx!r}{rest}" if keyword else f"argument {idx}{rest}")
        else:
            names.append("argument")
    return names


# ----------------------------------------------------------------------------- NumPy's forms
def _parse_signature(signature: str) -> tuple:
    """``"(m,n),(n)->(m)"`` -> ``([["m", "n"], ["n"]], [["m"]])``."""
    pattern = r"^\s*(\(\w*(?:,\w+)*\)(?:\s*,\s*\(\w*(?:,\w+)*\))*)?\s*->\s*(\(.*\))\s*$"
    match = re.match(pattern, signature.replace(" ", ""))
    if match is None:
        raise ValueError(f"vectorize: not a valid gufunc signature: {signature!r}")

    def groups(text):
        return [[d for d in g.split(",") if d] for g in re.findall(r"\((\w*(?:,\w+)*)\)", text)]

    return groups(match.group(1) or ""), groups(match.group(2))


def vectorize(pyfunc, *, excluded=frozenset(), signature: str | None = None):
    """NumPy's and JAX's ``vectorize``: ``pyfunc`` of scalars (or of core dims, with a
    gufunc ``signature`` such as ``"(n),(n)->()"``) applied over the broadcast leading dims
    of its array arguments, as nested :func:`vmap` (one trace of ``pyfunc``).

    Args:
        pyfunc: the function to vectorize.
        excluded: positions (ints) or names (strs) of arguments passed through as they are.
        signature: core dims per input and output; without it every dim is looped over.

    Returns:
        The vectorized function.

    Raises:
        ValueError: for a malformed signature or inputs whose core dims do not fit it.
    """
    ins_core = _parse_signature(signature)[0] if signature is not None else None

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        fixed_kw = {k: v for k, v in kwargs.items() if k in excluded}
        mapped_kw = {k: v for k, v in kwargs.items() if k not in excluded}
        positions = [i for i in range(len(args)) if i not in excluded]
        names = list(mapped_kw)
        values = [as_tensor(args[i], op="vectorize") for i in positions]
        values += [as_tensor(mapped_kw[k], op="vectorize") for k in names]
        cores = ins_core if ins_core is not None else [[] for _ in values]
        if len(cores) != len(values):
            raise ValueError(
                f"vectorize: the signature {signature!r} has {len(cores)} inputs, the call "
                f"{len(values)} array arguments"
            )
        sizes: dict = {}
        loops = []
        for v, core in zip(values, cores, strict=True):
            if v.ndim < len(core):
                raise ValueError(
                    f"vectorize: an input of shape {v.shape} has fewer dims than its core "
                    f"{tuple(core)}"
                )
            split = v.ndim - len(core)
            for name, n in zip(core, v.shape[split:], strict=True):
                if sizes.setdefault(name, n) != n:
                    raise ValueError(
                        f"vectorize: core dim {name!r} is {sizes[name]} in one input and {n} "
                        "in another"
                    )
            loops.append(tuple(v.shape[:split]))
        loop = tuple(np.broadcast_shapes(*loops)) if loops else ()
        values = [
            broadcast_to(v, loop + tuple(v.shape[v.ndim - len(core) :]))
            for v, core in zip(values, cores, strict=True)
        ]

        def call(*vals):
            full = list(args)
            for i, v in zip(positions, vals[: len(positions)], strict=True):
                full[i] = v
            kw = dict(fixed_kw)
            kw.update(zip(names, vals[len(positions) :], strict=True))
            return pyfunc(*full, **kw)

        fn_ = call
        for _ in loop:
            fn_ = vmap(fn_)
        return fn_(*values)

    return wrapped


def apply_along_axis(func1d, axis: int, arr, *args, **kwargs):
    """NumPy's and JAX's ``apply_along_axis``: ``func1d`` of each 1-D slice of ``arr``
    along ``axis`` (as one :func:`vmap` over the other dims); its output's dims take
    ``axis``'s place.

    Args:
        func1d: a function of a 1-D tensor (and ``args``, ``kwargs``).
        axis: the axis of the slices.
        arr: the array.
        *args: more positional arguments of ``func1d``.
        **kwargs: its keyword arguments.

    Returns:
        The results, the other dims of ``arr`` around each.
    """
    x = as_tensor(arr, op="apply_along_axis")
    ax = norm_axis("apply_along_axis", axis, x.ndim, x.shape)
    moved = moveaxis(x, ax, -1)
    fn_ = lambda v: func1d(v, *args, **kwargs)  # noqa: E731
    for _ in range(x.ndim - 1):
        fn_ = vmap(fn_)
    out = as_tensor(fn_(moved), op="apply_along_axis")
    extra = out.ndim - (x.ndim - 1)  # the result's own dims, last: moved to axis
    if extra == 0:
        return out
    return moveaxis(out, tuple(range(x.ndim - 1, out.ndim)), tuple(range(ax, ax + extra)))


__all__ += ["vectorize", "apply_along_axis"]
