"""Shape and view ops.

Primitives (each with a kernel on every backend): ``reshape``, ``broadcast_to``,
``transpose``, ``flip``, ``slice``, ``slice_update``, ``pad``, ``concatenate``, ``split``.
Everything else (squeeze, unsqueeze, flatten, moveaxis, stack, unbind, chunk, tile, repeat,
non-constant pad modes) is composed from them, so it is differentiable, batchable and lowered
everywhere for free.

Slices are stored as ``(start, step, length)`` per axis: unambiguous for negative steps.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..core.dtypes import DType
from ..core.ir import SymDim, as_dim, note_size_decision, range_length, same_shape
from ..core.state import STATE
from ..runtime.tensor import Tensor
from . import spmd
from ._util import (
    alias_arg,
    as_tensor,
    concrete_int,
    int_arg,
    norm_axes,
    norm_axis,
    norm_shape,
    readable_now,
)
from .base import Operation, OpError, describe
from .functions import fn, provide

__all__ = [
    "reshape",
    "broadcast_to",
    "expand",
    "transpose",
    "permute",
    "swap_axes",
    "moveaxis",
    "flip",
    "roll",
    "squeeze",
    "unsqueeze",
    "flatten",
    "slice_tensor",
    "slice_update",
    "pad",
    "concatenate",
    "stack",
    "hstack",
    "vstack",
    "meshgrid",
    "diag",
    "split",
    "chunk",
    "unbind",
    "tile",
    "repeat",
]


# ----------------------------------------------------------------------------- reshape
class ReshapeOp(Operation):
    name = "reshape"
    data_movement = True
    linear = True

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.reshape_rule(in_shapes[0], out_shapes[0])

    def shard_kwargs(self, kwargs, local_in, local_out):
        return {"shape": tuple(local_out[0])}

    def infer(self, shapes, dtypes, kwargs):
        shape = kwargs["shape"]
        if math.prod(shape) != math.prod(shapes[0]):  # also a compiled plan's new sizes
            raise OpError(f"reshape: cannot reshape tensor of shape {shapes[0]} into {shape}")
        return [shape], [dtypes[0]]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"shape": batch_shape + kwargs["shape"]}

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [reshape(cotangents[0], primals[0].shape)]


_reshape = ReshapeOp()


def _resolve_shape(op, shape, size, in_shape):
    if isinstance(shape, str | bytes):  # NumPy: a TypeError, never one dim per character
        raise TypeError(
            f"{op}: shape must be an int or a sequence of ints, got {shape!r} for a tensor of "
            f"shape {in_shape}"
        )
    shape = tuple(concrete_int(s) for s in shape)
    if any(
        isinstance(s, float | str | bytes) or not isinstance(s, numbers.Integral | SymDim)
        for s in shape
    ):
        raise TypeError(
            f"{op}: shape entries must be ints, got {shape} for a tensor of shape {in_shape}"
        )
    shape = tuple(as_dim(s) for s in shape)
    if shape.count(-1) > 1:
        raise OpError(f"{op}: only one dimension can be -1, got {shape}")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or size % known:
            raise OpError(f"{op}: cannot reshape tensor of shape {in_shape} into {shape}")
        shape = tuple(size // known if s == -1 else s for s in shape)
    if any(s < 0 for s in shape) or math.prod(shape) != size:
        raise OpError(f"{op}: cannot reshape tensor of shape {in_shape} into {shape}")
    return shape


def reshape(x, shape, *more, order: str = "C") -> Tensor:
    """Same elements, new shape (one dim may be -1). ``x.reshape(2, 3)`` also works.
    ``order="F"`` (NumPy's and JAX's) reads and writes the elements with the first index
    varying fastest; ``"A"`` is ``"C"`` here (a tensor has no memory order)."""
    x = as_tensor(x, op="reshape")
    if more or isinstance(shape, numbers.Integral):
        shape = (shape, *more)
    if order not in ("C", "F", "A"):
        raise ValueError(f"reshape: order must be 'C', 'F' or 'A', got {order!r}")
    if order == "F":  # the reversed dims in C order, reversed back
        shape = _resolve_shape("reshape", shape, x.size, x.shape)
        flipped = permute(x, tuple(range(x.ndim - 1, -1, -1))) if x.ndim > 1 else x
        out = reshape(flipped, tuple(reversed(shape)))
        return permute(out, tuple(range(len(shape) - 1, -1, -1))) if len(shape) > 1 else out
    shape = _resolve_shape("reshape", shape, x.size, x.shape)
    if same_shape(shape, x.shape):
        return x
    return _reshape.bind([x], {"shape": shape})


# ----------------------------------------------------------------------------- broadcast_to
class BroadcastToOp(Operation):
    """Broadcast to ``shape`` of the same rank (size-1 dims stretch)."""

    name = "broadcast_to"
    data_movement = True
    linear = True

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.elementwise_rule(in_shapes, out_shapes)

    def shard_kwargs(self, kwargs, local_in, local_out):
        return {"shape": tuple(local_out[0])}

    def infer(self, shapes, dtypes, kwargs):
        shape = kwargs["shape"]
        have = shapes[0]
        # also a compiled plan's new sizes: each dim is kept or stretched from 1
        if len(have) != len(shape) or any(a != b and a != 1 for a, b in zip(have, shape)):
            raise OpError(f"broadcast_to: cannot broadcast shape {have} to {shape}")
        return [shape], [dtypes[0]]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"shape": batch_shape + kwargs["shape"]}

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        in_shape = primals[0].shape
        # (not ``a != b``: a 1 against a dynamic size that is 1 at this trace is a broadcast)
        pairs = zip(in_shape, kwargs["shape"])
        axes = tuple(i for i, (a, b) in enumerate(pairs) if not same_shape((a,), (b,)))
        ct = cotangents[0]
        return [fn.reduce_sum(ct, axes, keepdims=True) if axes else ct]


_broadcast_to = BroadcastToOp()


def broadcast_to(x, shape) -> Tensor:
    """Broadcast ``x`` to ``shape`` with NumPy rules."""
    x = as_tensor(x, op="broadcast_to")
    shape = norm_shape("broadcast_to", shape)
    if same_shape(x.shape, shape):
        return x
    if len(shape) < x.ndim:
        raise OpError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}")
    lead = len(shape) - x.ndim
    for a, b in zip(x.shape, shape[lead:]):
        if a != b and a != 1:
            raise OpError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}")
    if lead:
        x = reshape(x, (1,) * lead + x.shape)
        if same_shape(x.shape, shape):
            return x
    return _broadcast_to.bind([x], {"shape": shape})


def expand(x, *shape) -> Tensor:
    """PyTorch's ``expand``: broadcast, with -1 keeping a dim's size."""
    x = as_tensor(x, op="expand")
    if len(shape) == 1 and isinstance(shape[0], list | tuple):
        shape = tuple(shape[0])
    lead = len(shape) - x.ndim
    if any(s == -1 for s in shape[: max(lead, 0)]):
        raise OpError(
            f"expand: -1 keeps an existing dim's size, but a leading new dim has none "
            f"(tensor of shape {x.shape}, sizes {tuple(shape)})"
        )
    full = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
    return broadcast_to(x, full)


# ----------------------------------------------------------------------------- transpose
class TransposeOp(Operation):
    name = "transpose"
    data_movement = True
    linear = True

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.permute_rule(in_shapes[0], kwargs["perm"])

    def infer(self, shapes, dtypes, kwargs):
        return [tuple(shapes[0][p] for p in kwargs["perm"])], [dtypes[0]]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"perm": tuple(range(nb)) + tuple(p + nb for p in kwargs["perm"])}

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        perm = kwargs["perm"]
        inv = tuple(sorted(range(len(perm)), key=lambda i: perm[i]))
        return [_transpose.bind([cotangents[0]], {"perm": inv})]


_transpose = TransposeOp()


def permute(x, *axes, order=None) -> Tensor:
    """Reorder dims of ``x``: output dim ``i`` is input dim ``axes[i]``.

    ``axes`` is given as separate ints, one sequence, or (the original Nabla's spelling) the
    keyword ``order=``.
    """
    if order is not None:
        if axes:
            raise TypeError("permute: pass the axes either positionally or as order=, not both")
        axes = (order,)
    if len(axes) == 1 and isinstance(axes[0], list | tuple):
        axes = tuple(axes[0])
    return _permuted(x, axes, "permute")


def _permuted(x, axes: tuple, op: str) -> Tensor:
    """``permute`` of ``x`` by ``axes``, its errors naming ``op``, the function called."""
    x = as_tensor(x, op=op)
    if len(axes) != x.ndim:
        raise OpError(f"{op}: axes {axes} do not match a tensor of shape {x.shape}")
    perm = tuple(norm_axis(op, a, x.ndim) for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise OpError(f"{op}: {axes} is not a permutation of the axes of shape {x.shape}")
    if perm == tuple(range(x.ndim)):
        return x
    inner = _transposed_from(x)
    if inner is not None:  # a transpose of a transpose is one transpose, or none
        first = x._impl.node.kwargs["perm"]
        perm = tuple(first[p] for p in perm)
        if perm == tuple(range(x.ndim)):
            return inner
        x = inner
    return _transpose.bind([x], {"perm": perm})


def _transposed_from(x):
    """The operand of the unrealized transpose that made ``x``, when ``x`` can be re-derived
    from it: same vmap levels, no sharding, and not under ``no_grad`` (where a new op would
    cut the trace). Autodiff rules swap a swapped weight back (the VJP of ``x @ W^T``); MAX
    copies each transpose, so folding saves a full copy of the weight per call."""
    impl = x._impl
    node = impl.node
    if node is None or node.op is not _transpose or impl.buffer is not None:
        return None
    (src,) = node.inputs
    if src.levels != impl.levels or src.sharding is not None or impl.sharding is not None:
        return None
    if STATE.no_grad is not None:
        return None
    return Tensor._wrap(src)


def swap_axes(x, axis1=-2, axis2=-1) -> Tensor:
    """Swap two dims of ``x`` (NumPy's ``swapaxes``; also ``nb.swapaxes``, ``x.swap_axes``).

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis1: the first dim (default -2, the second to last); negative counts from the end.
        axis2: the second dim (default -1, the last).

    Returns:
        ``x`` with dims ``axis1`` and ``axis2`` exchanged (``x`` itself when they are equal).

    Raises:
        TypeError: for an axis that is not an int.
        IndexError: for an axis out of range.
    """
    return _swapped(x, axis1, axis2, "swap_axes")


def _swapped(x, axis1, axis2, op: str) -> Tensor:
    """``x`` with two dims exchanged, its errors naming ``op``, the function called."""
    x = as_tensor(x, op=op)
    a = norm_axis(op, axis1, x.ndim)
    b = norm_axis(op, axis2, x.ndim)
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return _permuted(x, tuple(perm), op)


def transpose(x, axis1=-2, axis2=-1, *, axes=None) -> Tensor:
    """Swap two dims (default: the last two), like ``torch.transpose``.

    Unlike NumPy's ``transpose``, which reverses every dim when given no axes. A sequence
    in place of ``axis1`` is NumPy's and JAX's spelling, ``transpose(x, axes)``: the full
    permutation, as :func:`nabla.permute`.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        axis1: the first dim (default -2); negative counts from the end. Or a sequence of
            every dim: output dim ``i`` is input dim ``axis1[i]``.
        axis2: the second dim (default -1); not given with a sequence.
        axes: NumPy's and JAX's keyword for the permutation (``transpose(x, axes=(1, 0))``).

    A tensor of fewer than 2 dims called with the defaults is returned as it is (NumPy's
    and JAX's transpose of a vector; PyTorch's ``x.t()``).

    Returns:
        ``x`` with dims ``axis1`` and ``axis2`` exchanged (or permuted by ``axis1``).

    Raises:
        TypeError: for an axis that is not an int, or a sequence given with ``axis2``.
        IndexError: for an axis out of range.

    Example:
        >>> nb.transpose(nb.zeros((2, 3, 4))).shape
        (2, 4, 3)
        >>> nb.transpose(nb.zeros((2, 3, 4)), (2, 0, 1)).shape
        (4, 2, 3)
    """
    if axes is not None:
        if (axis1, axis2) != (-2, -1):
            raise TypeError("transpose: pass axes= or the positional dims, not both")
        axis1 = tuple(axes)
    if isinstance(axis1, list | tuple):
        if axis2 != -1:
            raise TypeError(
                f"transpose: pass either a permutation or two dims, got axes {tuple(axis1)} "
                f"and axis2={axis2!r}"
            )
        return _permuted(x, tuple(axis1), "transpose")
    if (axis1, axis2) == (-2, -1):
        x = as_tensor(x, op="transpose")
        if x.ndim < 2:
            return x
    return _swapped(x, axis1, axis2, "transpose")


def moveaxis(x, source, destination) -> Tensor:
    """Move dims ``source`` to positions ``destination`` (NumPy's ``moveaxis``).

    The other dims keep their relative order.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        source: int or sequence of ints: the dims to move.
        destination: int or sequence of ints of the same length: their new positions.

    Returns:
        ``x`` with its dims permuted.

    Raises:
        ValueError: (:class:`nabla.OpError`) if ``source`` and ``destination`` differ in
            length.
        IndexError: for an axis out of range.

    Example:
        >>> nb.moveaxis(nb.zeros((2, 3, 4)), 0, -1).shape
        (3, 4, 2)
    """
    x = as_tensor(x, op="moveaxis")
    src = [source] if isinstance(source, numbers.Integral) else list(source)
    dst = [destination] if isinstance(destination, numbers.Integral) else list(destination)
    if len(src) != len(dst):
        raise OpError("moveaxis: source and destination must have the same length")
    src = [norm_axis("moveaxis", a, x.ndim) for a in src]
    dst = [norm_axis("moveaxis", a, x.ndim) for a in dst]
    for name, axes in (("source", src), ("destination", dst)):
        if len(set(axes)) != len(axes):
            raise OpError(f"moveaxis: repeated axis in {name} {axes} (tensor of shape {x.shape})")
    order = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute(x, order)


# ----------------------------------------------------------------------------- flip
class FlipOp(Operation):
    name = "flip"
    data_movement = True
    linear = True

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        # a flipped dim would also reverse the order of its blocks: it stays whole
        return spmd.aligned_rule(in_shapes, out_shapes, blocked=kwargs["axes"])

    def infer(self, shapes, dtypes, kwargs):
        return [shapes[0]], [dtypes[0]]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"axes": tuple(a + nb for a in kwargs["axes"])}

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [_flip.bind([cotangents[0]], kwargs)]


_flip = FlipOp()


def _torch_dim(axis, dim, op: str = "", names: str = "axis or dim"):
    """``axis``, or PyTorch's ``dim``/``dims`` keyword when given (``torch.flip(x, dims=)``,
    ``torch.unbind(x, dim=)``, ...); both given is an error naming ``op`` (when ``axis``
    defaults to None: another default cannot be told from an argument)."""
    if dim is None:
        return axis
    if axis is not None and op:
        raise TypeError(f"{op}: pass {names}, not both")
    return dim


def flip(x, axis=None, *, dims=None) -> Tensor:
    """Reverse the order of elements along ``axis`` (int, tuple, or None for all;
    ``dims=`` is PyTorch's name)."""
    axis = _torch_dim(axis, dims, "flip", "axis or dims")
    x = as_tensor(x, op="flip")
    axes = norm_axes("flip", axis, x.ndim)
    if not axes:
        return x
    return _flip.bind([x], {"axes": axes})


def roll(x, shift=None, axis=None, *, shifts=None, dims=None) -> Tensor:
    """Shift elements along ``axis`` cyclically: those past the end come back at the start
    (NumPy's and JAX's ``roll``, PyTorch's ``roll(shifts, dims)``).

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        shift: int, or one int per axis of ``axis`` (several for one int ``axis`` add
            up, as in NumPy); a concrete tensor or array of them too. Negative shifts go
            the other way.
        axis: int, tuple of ints, or None (default): the flattened tensor, reshaped back.
        shifts: PyTorch's name for ``shift`` (then ``shift`` may be left out).
        dims: PyTorch's name for ``axis``.

    Returns:
        A tensor like ``x``.

    Raises:
        ValueError: (:class:`nabla.OpError`) when ``shift`` and ``axis`` differ in length.

    Example:
        >>> nb.roll(nb.arange(5), 2).tolist()
        [3, 4, 0, 1, 2]
    """
    axis = _torch_dim(axis, dims, "roll", "axis or dims")
    shift = _torch_dim(shift, shifts, "roll", "shift or shifts")
    x = as_tensor(x, op="roll")
    if shift is None:
        raise TypeError(f"roll: give the shift (tensor of shape {x.shape})")
    if isinstance(shift, Tensor | np.ndarray):  # a shift known now: its Python ints
        shift = shift.tolist()
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, 0), x.shape)
    one_shift = isinstance(shift, numbers.Integral)
    shifts = (shift,) if one_shift else tuple(shift)
    # one axis and several shifts, or the reverse, broadcast against each other (NumPy's)
    axes = (axis,) * len(shifts) if isinstance(axis, numbers.Integral) else tuple(axis)
    if one_shift:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise OpError(f"roll: {len(shifts)} shifts for {len(axes)} axes (shape {x.shape})")
    for k, a in zip(shifts, axes, strict=True):
        a = norm_axis("roll", a, x.ndim, x.shape)
        n = x.shape[a]
        k = int(k) % n if n else 0
        if isinstance(k, SymDim) and not k:  # no roll at this size, one at others
            note_size_decision(n, "a roll by a multiple of the size")
        if k:
            lead = (slice(None),) * a
            x = concatenate([x[lead + (slice(n - k, None),)], x[lead + (slice(0, n - k),)]], a)
    return x


# ----------------------------------------------------------------------------- squeeze etc.
def squeeze(x, axis=None, *, dim=None) -> Tensor:
    """Remove size-1 dims (all of them, or those in ``axis``, each of which must have size
    1). ``dim=`` is PyTorch's form: a dim of another size is left as it is."""
    x = as_tensor(x, op="squeeze")
    if dim is not None:
        dims = norm_axes("squeeze", _torch_dim(axis, dim, "squeeze"), x.ndim, x.shape)
        axis = tuple(d for d in dims if x.shape[d] == 1)
        if not axis:  # (nothing to remove: the tensor itself, as the method has given it)
            return x
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = norm_axes("squeeze", axis, x.ndim)
        for a in axes:
            if x.shape[a] != 1:
                raise OpError(f"squeeze: axis {a} of shape {x.shape} has size {x.shape[a]}, not 1")
    return reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def unsqueeze(x, axis=None, *, dim=None) -> Tensor:
    """Insert a size-1 dim at ``axis`` (an int or a tuple of ints, output positions;
    ``dim=`` is PyTorch's name)."""
    axis = _torch_dim(axis, dim, "unsqueeze")
    x = as_tensor(x, op="unsqueeze")
    if axis is None:
        raise TypeError(f"unsqueeze: give the axis of the new dim (tensor of shape {x.shape})")
    axes = [axis] if isinstance(axis, numbers.Integral) else list(axis)
    out_ndim = x.ndim + len(axes)
    axes = sorted(norm_axis("unsqueeze", a, out_ndim) for a in axes)
    if len(set(axes)) != len(axes):
        raise OpError(f"unsqueeze: repeated axis in {axis} (tensor of shape {x.shape})")
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def flatten(x, start_dim=0, end_dim=-1) -> Tensor:
    """Merge dims ``start_dim`` to ``end_dim`` (inclusive) into one, like ``torch.flatten``.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array; a 0-d tensor becomes
            shape ``(1,)``.
        start_dim: the first dim to merge (default 0); negative counts from the end.
        end_dim: the last dim to merge (default -1).

    Returns:
        ``x`` reshaped, with the merged dims replaced by their product.

    Raises:
        ValueError: (:class:`nabla.OpError`) if ``start_dim`` comes after ``end_dim``.
        IndexError: for a dim out of range.

    Example:
        >>> nb.flatten(nb.zeros((2, 3, 4)), 1).shape
        (2, 12)
    """
    x = as_tensor(x, op="flatten")
    if x.ndim == 0:
        return reshape(x, (1,))
    s = norm_axis("flatten", start_dim, x.ndim)
    e = norm_axis("flatten", end_dim, x.ndim)
    if s > e:
        raise OpError(f"flatten: start_dim {start_dim} is after end_dim {end_dim}")
    merged = math.prod(x.shape[s : e + 1])
    return reshape(x, x.shape[:s] + (merged,) + x.shape[e + 1 :])


# ----------------------------------------------------------------------------- slicing
def _py_slice(start, step, length):
    stop = start + step * length
    return slice(start, None if stop < 0 else stop, step)


def _cut_dims(shape, kwargs) -> tuple:
    """The dims a slice does not take whole (they cannot stay split)."""
    return tuple(
        i
        for i, (n, (start, step, length)) in enumerate(zip(shape, kwargs["slices"]))
        if (start, step, length) != (0, 1, n)
    )


def _local_slices(kwargs, local_shape) -> dict:
    """A slice's kwargs on one block: whole dims cover the block."""
    out = tuple(
        (0, 1, n) if (start, step) == (0, 1) and length >= n else (start, step, length)
        for n, (start, step, length) in zip(local_shape, kwargs["slices"])
    )
    return {**kwargs, "slices": out}


class SliceOp(Operation):
    """Basic strided slice: ``slices`` holds ``(start, step, length)`` per logical dim."""

    name = "slice"
    data_movement = True
    linear = True

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.aligned_rule(in_shapes, out_shapes, _cut_dims(in_shapes[0], kwargs))

    def shard_kwargs(self, kwargs, local_in, local_out):
        return _local_slices(kwargs, local_in[0])

    def infer(self, shapes, dtypes, kwargs):
        for (start, step, length), n in zip(kwargs["slices"], shapes[0]):
            # also a compiled plan's slices at new sizes: each one stays inside its dim
            if length and not (0 <= start < n and 0 <= start + step * (length - 1) < n):
                raise OpError(f"slice: {kwargs['slices']} reaches outside shape {shapes[0]}")
        return [tuple(s[2] for s in kwargs["slices"])], [dtypes[0]]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"slices": tuple((0, 1, b) for b in batch_shape) + kwargs["slices"]}

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [_slice_update.bind([fn.zeros_like(primals[0]), cotangents[0]], kwargs)]


class SliceUpdateOp(Operation):
    """``x`` with the strided region ``slices`` replaced by ``update``."""

    name = "slice_update"
    data_movement = True
    arity = 2
    linear = True
    adapt_kwargs = SliceOp.adapt_kwargs

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.aligned_rule(in_shapes, out_shapes, _cut_dims(in_shapes[0], kwargs))

    def shard_kwargs(self, kwargs, local_in, local_out):
        return _local_slices(kwargs, local_in[0])

    def infer(self, shapes, dtypes, kwargs):
        want = tuple(s[2] for s in kwargs["slices"])
        if tuple(shapes[1]) != want:
            raise OpError(
                f"slice_update: update of shape {shapes[1]} does not fit region of shape {want} "
                f"in tensor of shape {shapes[0]}"
            )
        return [shapes[0]], [dtypes[0]]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        ct = cotangents[0]
        return [
            _slice_update.bind([ct, fn.zeros_like(primals[1])], kwargs),
            _slice.bind([ct], kwargs),
        ]


_slice = SliceOp()
_slice_update = SliceUpdateOp()


def normalize_slices(op, shape, index) -> tuple:
    """``index``: sequence of slices/ints/None per leading dim -> ((start, step, length), ...)."""
    out = []
    for d, sl in zip(shape, index):
        if isinstance(sl, slice):
            if sl.step == 0:
                raise ValueError(f"{op}: slice step cannot be zero")
            out.append(slice_entry(sl, d))
        else:
            raise TypeError(f"{op}: expected a slice, got {sl!r}")
    for d in shape[len(index) :]:
        out.append((0, 1, d))
    return tuple(out)


def slice_entry(s: slice, n) -> tuple:
    """``(start, step, length)`` of slice ``s`` (nonzero step) over a dim of size ``n``.

    Under ``compile``'s dynamic dims (``n`` or an end a ``SymDim``) the start and length
    stay expressions in the sizes wherever the ends are: None, a negative end counted from
    the end, or an end inside the dim, in either direction (``x[1:]`` has ``n - 1``
    elements, ``x[::-2]`` starts at ``n - 1`` and has ``(n + 1) // 2``); the compiled plan
    checks them again at each new size. ``slice.indices`` alone would give this size's
    numbers, which a later size would reuse. A slice whose numbers cannot be kept so (an
    end past the dim, clamped; an empty slice; a symbolic step) is recorded as a decision
    on the size: the trace then serves that size only."""
    start, stop, step = s.indices(int.__int__(n) if isinstance(n, SymDim) else n)
    length = len(range(start, stop, step))
    symbolic = [v for v in (n, s.start, s.stop, s.step) if isinstance(v, SymDim)]
    if not symbolic:
        return (start, step, length)
    lo = _symbolic_end(s.start, n, step, True)
    hi = _symbolic_end(s.stop, n, step, False)
    if (
        length > 0
        and not isinstance(s.step, SymDim)
        and lo is not None
        and hi is not None
        and int.__int__(lo) == start
        and int.__int__(hi) == stop
    ):
        return (lo, step, range_length(lo, hi, step))
    for dim in symbolic:
        note_size_decision(dim, "a clamped or empty slice")
    return (start, step, length)


def _symbolic_end(v, n, step: int, at_start: bool):
    """A slice end as ``slice.indices`` gives it, as an expression in the dim's size ``n``
    (None: an end it clamps, which no expression keeps)."""
    if v is None:
        if step > 0:
            return 0 if at_start else n
        return n - 1 if at_start else -1  # backwards: from the last element to before 0
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        if v < 0:
            return n + v if -n <= v else None
        inside = v <= n if step > 0 else v < n
        return v if inside else None
    return None


def _sized(op, shape, dim, start: int, size: int) -> slice:
    """The slice of ``size`` elements from ``start`` (negative: counted from the end) in
    dim ``dim``; a clear error where that region is not inside the dim (a slice would
    clip or wrap it silently, giving another shape than ``size``)."""
    n = shape[dim] if dim < len(shape) else None
    if n is None:
        raise IndexError(f"{op}: {dim + 1} start/size entries for a tensor of shape {shape}")
    at = start + n if start < 0 else start
    if size < 0 or at < 0 or at + size > n:
        raise IndexError(
            f"{op}: a region of size {size} from index {start} does not fit in dim {dim} of "
            f"size {n} (tensor of shape {shape})"
        )
    return slice(at, at + size)


def _region(op, start=None, size=None, *, stop=None, step=None, slices=None, shape=()) -> list:
    """The ``slice`` per leading dim named by one of the two spellings: ``start``/``size``
    (the original Nabla's, as ``lax.dynamic_slice``) or ``start``/``stop``/``step``, or
    ``slices`` (the region arguments of ``slice_tensor`` and ``slice_update``, taken as
    they do). A sequence of ``slice`` objects alone in ``start``'s place is ``slices``;
    slices mixed into an index sequence are an error naming ``op``."""
    if (
        slices is None
        and size is None
        and stop is None
        and step is None
        and isinstance(start, list | tuple)
        and start
        and all(isinstance(a, slice) for a in start)
    ):
        slices, start = start, None  # slices given positionally: one spelling, no doubt
    if slices is not None:
        if any(v is not None for v in (start, size, stop, step)):
            raise TypeError(f"{op}: pass either slices= or start/size/stop/step, not both")
        return list(slices)
    for name, seq in (("start", start), ("size", size), ("stop", stop), ("step", step)):
        if isinstance(seq, list | tuple) and any(isinstance(a, slice) for a in seq):
            raise TypeError(
                f"{op}: {name} mixes slices and indices, got {seq!r}; pass either a sequence "
                f"of slice objects or one of ints"
            )
    if size is not None:
        if stop is not None or step is not None:
            raise TypeError(f"{op}: pass either size or stop=/step=, not both")
        if start is None or len(start) != len(size):
            raise TypeError(f"{op}: start {start!r} and size {size!r} need one entry per dim")
        return [_sized(op, shape, d, int(a), int(n)) for d, (a, n) in enumerate(zip(start, size))]
    given = [v for v in (start, stop, step) if v is not None]
    if not given:
        raise TypeError(f"{op}: missing the region (start and size, stop=, or slices=)")
    n = len(given[0])
    start, stop, step = (v or [None] * n for v in (start, stop, step))
    return [slice(a, b, c) for a, b, c in zip(start, stop, step)]


def slice_tensor(x, start=None, size=None, *, stop=None, step=None, slices=None) -> Tensor:
    """The region of ``x`` from ``start`` with ``size`` elements per dim (the original
    Nabla's spelling: ``slice_tensor(x, [1, 2], [2, 2])`` has shape ``(2, 2)``), or given by
    ``start=``/``stop=``/``step=`` sequences (NumPy-like, steps may be negative), or by
    ``slices=[slice(...), ...]`` (also taken positionally, in ``start``'s place). Dims not
    covered are taken whole.

    Raises:
        TypeError: for mixed or missing region arguments.
        IndexError: for more entries than dims.
    """
    x = as_tensor(x, op="slice_tensor")
    slices = _region(
        "slice_tensor", start, size, stop=stop, step=step, slices=slices, shape=x.shape
    )
    if len(slices) > x.ndim:
        raise IndexError(f"slice_tensor: {len(slices)} slices for a tensor of shape {x.shape}")
    norm = normalize_slices("slice_tensor", x.shape, slices)
    return slice_normalized(x, norm)


def slice_normalized(x, norm):
    """``x[...]`` for slices already normalized to ``(start, step, count)`` per dim (no
    node when they take everything)."""
    if all(same_shape(s, (0, 1, d)) for s, d in zip(norm, x.shape)):
        return x
    return _slice.bind([x], {"slices": norm})


def slice_update(x, update, start=None, size=None, *, stop=None, step=None, slices=None) -> Tensor:
    """``x`` with a region replaced by ``update`` (functional; ``x`` is unchanged).

    The region is given as in :func:`nabla.slice_tensor`: ``start`` and ``size`` (the
    original Nabla's spelling), ``start=``/``stop=``/``step=``, or ``slices``; dims not
    covered are taken whole. JAX's ``x.at[region].set(update)``.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        update: the new values, cast to ``x``'s dtype and broadcast to the region's shape.
        start: sequence of per-dim start indices (ints, or None with ``stop=``).
        size: sequence of per-dim region sizes (with ``start``).
        stop: sequence of per-dim stop indices (ints or None).
        step: sequence of per-dim steps (ints or None; nonzero, may be negative).
        slices: instead of ``start``/``stop``/``step``, a sequence of ``slice`` objects, one
            per leading dim (also taken positionally, in ``start``'s place).

    Returns:
        A tensor of ``x``'s shape and dtype.

    Raises:
        ValueError: if ``update`` does not fit the region (:class:`nabla.OpError`) or a step
            is zero.
        TypeError: for an entry of ``slices`` that is not a ``slice``, slices mixed with
            indices, or mixed or missing region arguments.

    Example:
        >>> nb.slice_update(nb.zeros((4,)), 1.0, [1], [2]).tolist()
        [0.0, 1.0, 1.0, 0.0]
    """
    x = as_tensor(x, op="slice_update")
    slices = _region(
        "slice_update", start, size, stop=stop, step=step, slices=slices, shape=x.shape
    )
    norm = normalize_slices("slice_update", x.shape, slices)
    region = tuple(s[2] for s in norm)
    update = as_tensor(update, x.dtype, op="slice_update")
    if update.shape != region:
        update = broadcast_to(update, region) if _broadcastable(update.shape, region) else update
    return _slice_update.bind([x, update], {"slices": norm})


def slice_update_normalized(x, update, norm):
    """``x`` with the region of slices already normalized to ``(start, step, count)`` per
    dim replaced by ``update`` (of the region's shape): the region of an indexed update,
    whose starts may be expressions in ``compile``'s dynamic sizes."""
    return _slice_update.bind([x, update], {"slices": norm})


def _broadcastable(a, b):
    if len(a) > len(b):
        return False
    return all(x in (1, y) for x, y in zip(a, b[len(b) - len(a) :]))


# ----------------------------------------------------------------------------- pad
class PadOp(Operation):
    """Constant padding: ``pads`` is ((low, high), ...) per logical dim."""

    name = "pad"

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        padded = tuple(i for i, p in enumerate(kwargs["pads"]) if p != (0, 0))
        return spmd.aligned_rule(in_shapes, out_shapes, padded)

    def infer(self, shapes, dtypes, kwargs):
        return [tuple(d + lo + hi for d, (lo, hi) in zip(shapes[0], kwargs["pads"]))], [dtypes[0]]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"pads": ((0, 0),) * nb + kwargs["pads"], "value": kwargs["value"]}

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        norm = tuple((lo, 1, d) for d, (lo, _) in zip(primals[0].shape, kwargs["pads"]))
        return [_slice.bind([cotangents[0]], {"slices": norm})]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [_pad.bind([tangents[0]], {"pads": kwargs["pads"], "value": 0.0})]


_pad = PadOp()


def _norm_pads(x, paddings):
    if isinstance(paddings, Tensor):  # (widths as a tensor: its values, as JAX takes them)
        paddings = paddings.numpy()
    if isinstance(paddings, numbers.Integral):
        return ((int(paddings), int(paddings)),) * x.ndim
    paddings = list(paddings)
    if len(paddings) == 1 and isinstance(paddings[0], numbers.Integral):
        paddings = [(paddings[0], paddings[0])] * x.ndim  # (n,): n on both sides of every dim
    if len(paddings) == 2 and all(isinstance(p, numbers.Integral) for p in paddings):
        # one (low, high) pair for every dim, as NumPy and JAX read it
        paddings = [tuple(paddings)] * x.ndim
    elif len(paddings) == 1 and x.ndim != 1 and not isinstance(paddings[0], numbers.Integral):
        paddings = list(paddings) * x.ndim  # ((low, high),): the same for every dim
    if all(isinstance(p, numbers.Integral) for p in paddings) and len(paddings) == 2 * x.ndim:
        return tuple((as_dim(paddings[2 * i]), as_dim(paddings[2 * i + 1])) for i in range(x.ndim))
    if len(paddings) != x.ndim or not all(_pair_of_ints(p) for p in paddings):
        raise OpError(
            f"pad: paddings {paddings} are not one (low, high) pair of ints per dim of a "
            f"tensor of shape {x.shape}"
        )
    out = tuple((as_dim(lo), as_dim(hi)) for lo, hi in paddings)
    if any(lo < 0 or hi < 0 for lo, hi in out):
        raise OpError(f"pad: negative padding {out} for shape {x.shape}")
    return out


def _pair_of_ints(p) -> bool:
    if isinstance(p, np.ndarray):
        p = p.tolist()
    return (
        isinstance(p, list | tuple)
        and len(p) == 2
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in p)
    )


def _pad_with_tensor(x, pads, value) -> Tensor:
    """Constant padding with a tensor ``value``: zero-pad, then select ``value`` outside the
    original (so the value stays a differentiable input instead of a read-out number)."""
    if value.size != 1:
        raise OpError(f"pad: value must have one element, got shape {value.shape}")
    zero = False if x.dtype.is_bool else (0 if x.dtype.is_int else 0.0)
    ones = fn.ones(x.shape, dtype=DType.bool, device=x.device)
    inside = _pad.bind([ones], {"pads": pads, "value": False})
    padded = _pad.bind([x], {"pads": pads, "value": zero})
    return fn.where(inside, padded, reshape(value.cast(x.dtype), ()))


def pad(
    x,
    paddings,
    mode="constant",
    value=0.0,
    *,
    constant_values=None,
    stat_length=None,
    end_values=0,
    reflect_type="even",
) -> Tensor:
    """Pad ``x``: ``paddings`` is ((low, high), ...) per dim (or one int/pair for all dims).

    ``mode`` is one of NumPy's and JAX's:

    - ``"constant"``: with ``value`` (``constant_values=``, NumPy's and JAX's name, may
      also give a value per side: a pair, or one pair per dim; later dims fill the
      corners, as in NumPy);
    - ``"reflect"``, ``"symmetric"`` (the edge repeated), ``"edge"``/``"replicate"``,
      ``"wrap"``/``"circular"``: padding wider than the dim reflects or wraps again, as in
      NumPy and JAX; ``reflect_type="odd"`` reflects through the edge value
      (``2 * edge - mirrored``), up to one reflection (a width of at most the dim less one
      for ``"reflect"``, the dim for ``"symmetric"``);
    - ``"maximum"``, ``"minimum"``, ``"mean"``, ``"median"``: the statistic of the
      ``stat_length`` values nearest each side (all of the dim by default; an int, a
      pair, or one pair per dim), rounded for integers;
    - ``"linear_ramp"``: from ``end_values`` (per side or per dim, as
      ``constant_values``) to the edge value;
    - ``"empty"``: zeros (NumPy leaves them undefined).

    The dims are padded one after another, as NumPy does: a later dim's statistics see the
    earlier dims' padding.
    """
    x = as_tensor(x, op="pad")
    if constant_values is not None:
        if value not in (0.0, None):
            raise TypeError("pad: pass value= or constant_values=, not both")
        value = constant_values
    pads = _norm_pads(x, paddings)
    if mode == "empty":
        mode, value = "constant", 0
    if isinstance(value, str | bytes):  # (NumPy's "could not convert string to float")
        raise TypeError(f"pad: the fill value must be a number or a tensor, got {value!r}")
    if mode == "constant" and not (
        isinstance(value, Tensor) or np.ndim(value) == 0 or np.size(value) == 1
    ):
        return _pad_per_side(x, pads, _side_pairs(value, x.ndim, "constant_values"), _fill)
    if mode == "constant" and not isinstance(value, Tensor):
        value = np.asarray(value).reshape(()).item()
    if mode == "constant":
        if all(p == (0, 0) for p in pads):
            return x
        if isinstance(value, Tensor):
            return _pad_with_tensor(x, pads, value)
        v = bool(value) if x.dtype.is_bool else (int(value) if x.dtype.is_int else float(value))
        return _pad.bind([x], {"pads": pads, "value": _wrapped(v, x.dtype)})
    if mode not in _PAD_MODES:
        raise ValueError(f"pad: unknown mode {mode!r}; one of 'constant', {sorted(_PAD_MODES)}")
    if value is not None and (isinstance(value, Tensor) or value != 0):  # as PyTorch
        raise OpError(
            f"pad: mode {mode!r} takes no fill value (got {value!r}); it is for 'constant'"
        )
    if reflect_type not in ("even", "odd"):
        raise ValueError(f"pad: reflect_type must be 'even' or 'odd', got {reflect_type!r}")
    for axis, (lo, hi) in enumerate(pads):
        if (lo or hi) and x.shape[axis] == 0:
            raise OpError(f"pad: cannot {mode}-pad empty dim {axis} of shape {x.shape}")
    if mode in _STATISTICS:
        lengths = _side_pairs(stat_length, x.ndim, "stat_length")
        return _pad_per_side(x, pads, lengths, lambda x, a, k, low, n: _stat(x, a, k, low, n, mode))
    if mode == "linear_ramp":
        ends = _side_pairs(end_values, x.ndim, "end_values")
        return _pad_per_side(x, pads, ends, _ramp)
    if mode == "symmetric" or reflect_type == "odd":
        return _pad_by_index(x, pads, mode, reflect_type)
    for axis, (lo, hi) in enumerate(pads):
        if lo == 0 and hi == 0:
            continue
        n = x.shape[axis]
        if mode == "reflect" and (lo >= n or hi >= n):
            x = _reflect_far(x, axis, lo, hi)
            continue
        parts = []
        if lo:
            parts.append(_edge_part(x, axis, lo, mode, low=True))
        parts.append(x)
        if hi:
            parts.append(_edge_part(x, axis, hi, mode, low=False))
        x = concatenate(parts, axis)
    return x


_STATISTICS = ("maximum", "minimum", "mean", "median")
_PAD_MODES = {"reflect", "symmetric", "edge", "replicate", "wrap", "circular", "linear_ramp"}
_PAD_MODES.update(_STATISTICS)
_NUMPY_MODE = {"replicate": "edge", "circular": "wrap"}


def _side_pairs(value, ndim: int, name: str) -> list:
    """NumPy's reading of a per-side setting: one value, a (before, after) pair, or one
    pair per dim -> one (before, after) pair per dim (None stays None)."""
    if value is None:
        return [(None, None)] * ndim
    if isinstance(value, Tensor):
        value = value.numpy()
    a = np.asarray(value, dtype=object if np.ndim(value) == 0 else None)
    if a.ndim == 0 or a.size == 1:
        v = a.reshape(()).item()
        return [(v, v)] * ndim
    if a.shape == (2,):
        return [tuple(a.tolist())] * ndim
    if a.shape == (1, 2):
        return [tuple(a[0].tolist())] * ndim
    if a.shape == (ndim, 2):
        return [tuple(r) for r in a.tolist()]
    raise OpError(
        f"pad: {name} {value!r} is not one value, a (before, after) pair or one pair per "
        f"dim of a {ndim}-D tensor"
    )


def _pad_per_side(x, pads, settings, side) -> Tensor:
    """Pad dim by dim (NumPy's order), each side made by ``side(x, axis, width, low,
    setting)``."""
    for axis, ((lo, hi), (before, after)) in enumerate(zip(pads, settings, strict=True)):
        parts = [side(x, axis, lo, True, before)] if lo else []
        parts.append(x)
        if hi:
            parts.append(side(x, axis, hi, False, after))
        if len(parts) > 1:
            x = concatenate(parts, axis)
    return x


def _fill(x, axis, k, low, value) -> Tensor:
    """A constant side of width ``k``."""
    shape = _with_dim(x.shape, axis, k)
    return fn.full(shape, _wrapped(value, x.dtype), dtype=x.dtype, device=x.device)


def _wrapped(value, dtype: DType):
    """A fill value for ``dtype``: an integer wrapped into its range, as JAX's."""
    if dtype.is_bool or not dtype.is_int:
        return value
    info = np.iinfo(dtype.numpy)
    return (int(value) - int(info.min)) % (int(info.max) - int(info.min) + 1) + int(info.min)


def _stat(x, axis, k, low, length, mode) -> Tensor:
    """A side of width ``k`` filled with the statistic of the ``length`` values nearest it
    (all of them when None)."""
    n = x.shape[axis]
    if length is not None and int(length) < 1:
        raise OpError(f"pad: stat_length must be >= 1, got {length} (dim {axis} of {x.shape})")
    m = n if length is None else min(int(length), n)
    near = _take_range(x, axis, 0 if low else n - m, 1, m)
    if mode == "maximum":
        got = fn.max(near, axis=axis, keepdims=True)
    elif mode == "minimum":
        got = fn.min(near, axis=axis, keepdims=True)
    else:
        wide = near if near.dtype.is_float else fn.cast(near, DType.float64)
        if mode == "mean":
            got = fn.mean(wide, axis=axis, keepdims=True)
        else:  # the middle value (the mean of the two middle ones) of the sorted values
            ordered = fn.sort(wide, axis=axis)
            middle = _take_range(ordered, axis, (m - 1) // 2, 1, 2 - m % 2)
            got = fn.mean(middle, axis=axis, keepdims=True)
            if wide.dtype.is_float:  # a NaN among them makes the median NaN, as NumPy's
                nan = fn.any(fn.is_nan(near), axis=axis, keepdims=True)
                got = fn.where(nan, fn.full((), math.nan, dtype=got.dtype), got)
        if not x.dtype.is_float:  # rounded to the nearest integer, as NumPy
            got = fn.cast(fn.round(got), x.dtype)
    return broadcast_to(got, _with_dim(x.shape, axis, k))


def _ramp(x, axis, k, low, end) -> Tensor:
    """A side of width ``k`` going linearly from ``end`` (its outer value) towards the
    edge value, which it does not reach (NumPy's ``linspace(end, edge, k, endpoint=False)``)."""
    n = x.shape[axis]
    edge = _take_range(x, axis, 0 if low else n - 1, 1, 1)
    steps = np.arange(k) / k if low else np.arange(k)[::-1] / k
    shape = [1] * x.ndim
    shape[axis] = k
    wide = x.dtype if x.dtype.is_float else DType.float64
    w = fn.constant(steps.reshape(shape).astype(wide.numpy))
    edge = fn.cast(edge, wide) if edge.dtype is not wide else edge
    out = end + (edge - end) * w
    if not x.dtype.is_float:  # rounded down, as NumPy's integer linspace
        out = fn.floor(out)
    return fn.cast(out, x.dtype) if out.dtype is not x.dtype else out


def _pad_by_index(x, pads, mode, reflect_type) -> Tensor:
    """Index-based modes as one gather per dim of the positions NumPy's own ``pad`` gives
    ``arange(n)``; ``reflect_type="odd"`` reflects through the edge value: ``2 * edge -
    mirrored``, the edge positions being the ``"edge"`` mode's."""
    for axis, (lo, hi) in enumerate(pads):
        if lo == 0 and hi == 0:
            continue
        n = x.shape[axis]
        if isinstance(n, SymDim):  # the positions are numbers of the size
            note_size_decision(n, f"{mode} padding")
        n = int.__int__(n)
        where = np.arange(n)
        mirrored = np.pad(where, (lo, hi), mode=_NUMPY_MODE.get(mode, mode)).astype(np.int32)
        taken = fn.take(x, fn.constant(mirrored), axis=axis)
        if reflect_type == "odd" and mode in ("reflect", "symmetric"):
            if max(lo, hi) > n - (mode == "reflect"):
                raise OpError(
                    f"pad: reflect_type='odd' padding wider than the dim (widths {(lo, hi)}, "
                    f"dim {axis} of shape {x.shape}) is not supported"
                )
            edges = np.pad(where, (lo, hi), mode="edge").astype(np.int32)
            taken = fn.take(x, fn.constant(edges), axis=axis) * 2 - taken
        x = taken
    return x


def _reflect_far(x, axis, lo, hi):
    """Reflect padding wider than the dim less one, as NumPy and JAX do it: reflected again
    at each end, a period of ``2 (n - 1)`` (a single element repeats). One gather of the
    reflected positions."""
    n = x.shape[axis]
    if isinstance(n, SymDim):  # the positions are numbers of the size
        note_size_decision(n, "reflect padding wider than the dim")
    n = int.__int__(n)
    period = max(2 * (n - 1), 1)
    at = np.arange(-lo, n + hi) % period
    index = np.where(at < n, at, period - at) if n > 1 else np.zeros_like(at)
    return fn.take(x, fn.constant(index.astype(np.int32)), axis=axis)


def _with_dim(shape, axis, n) -> tuple:
    """``shape`` with dim ``axis`` of size ``n``."""
    return (*shape[:axis], n, *shape[axis + 1 :])


def _take_range(x, axis, start, step, length):
    norm = [(0, 1, d) for d in x.shape]
    norm[axis] = (start, step, length)
    return slice_normalized(x, tuple(norm))


def _edge_part(x, axis, k, mode, low):
    n = x.shape[axis]
    if mode == "reflect":
        return _take_range(x, axis, k, -1, k) if low else _take_range(x, axis, n - 2, -1, k)
    if mode in ("edge", "replicate"):
        edge = _take_range(x, axis, 0 if low else n - 1, 1, 1)
        return broadcast_to(edge, _with_dim(x.shape, axis, k))
    # wrap / circular
    reps = [_take_range(x, axis, 0, 1, n)] * (k // n + 1)
    tiled = concatenate(reps, axis) if len(reps) > 1 else reps[0]
    m = tiled.shape[axis]
    return _take_range(tiled, axis, m - k, 1, k) if low else _take_range(tiled, axis, 0, 1, k)


# ----------------------------------------------------------------------------- concat / split
class ConcatenateOp(Operation):
    name = "concatenate"
    data_movement = True
    arity = None
    linear = True

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.aligned_rule(in_shapes, out_shapes, (kwargs["axis"],))

    def infer(self, shapes, dtypes, kwargs):
        axis = kwargs["axis"]
        first = shapes[0]
        for s in shapes[1:]:
            if len(s) != len(first) or any(
                a != b for i, (a, b) in enumerate(zip(s, first)) if i != axis
            ):
                raise OpError(f"concatenate: shapes {describe(shapes)} differ outside axis {axis}")
        return [_with_dim(first, axis, sum(s[axis] for s in shapes))], [dtypes[0]]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"axis": kwargs["axis"] + nb}

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        axis = kwargs["axis"]
        sizes = [p.shape[axis] for p in primals]
        return list(_split.bind([cotangents[0]], {"sizes": tuple(sizes), "axis": axis}))


class SplitOp(Operation):
    name = "split"
    data_movement = True
    linear = True
    multiple_results = True

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.aligned_rule(in_shapes, out_shapes, (kwargs["axis"],))

    def infer(self, shapes, dtypes, kwargs):
        axis = kwargs["axis"]
        if sum(kwargs["sizes"]) != shapes[0][axis]:  # also a compiled plan's new sizes
            raise OpError(
                f"split: sizes {kwargs['sizes']} do not add up to axis {axis} of {shapes[0]}"
            )
        outs = [_with_dim(shapes[0], axis, n) for n in kwargs["sizes"]]
        return outs, [dtypes[0]] * len(outs)

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"sizes": kwargs["sizes"], "axis": kwargs["axis"] + nb}

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        axis = kwargs["axis"]
        x = primals[0]
        parts = []
        for ct, n in zip(cotangents, kwargs["sizes"]):
            if ct is None:
                ct = fn.zeros(_with_dim(x.shape, axis, n), dtype=x.dtype)
            parts.append(ct)
        return [_concatenate.bind(parts, {"axis": axis})]


_concatenate = ConcatenateOp()
_split = SplitOp()


def concatenate(tensors, axis=0, *, dim=None, dtype=None) -> Tensor:
    """Join tensors along an existing ``axis`` (dtypes promoted, or each cast to ``dtype``
    when given, as NumPy and JAX take it); ``axis=None`` joins them flattened, as NumPy and
    JAX do. ``dim=`` is PyTorch's name for ``axis`` (``nb.cat``)."""
    if dim is not None:
        axis = dim

    tensors = list(tensors)
    if not tensors:
        raise ValueError("concatenate: needs at least one tensor")
    if dtype is not None:
        tensors = [fn.cast(as_tensor(t, op="concatenate"), dtype) for t in tensors]
    if axis is None:
        tensors = [reshape(as_tensor(t, op="concatenate"), (-1,)) for t in tensors]
        axis = 0
    ts, _ = (
        fn.promote_operands("concatenate", tensors, broadcast=False)
        if _need_promote(tensors)
        else ([as_tensor(t, op="concatenate") for t in tensors], None)
    )
    ndim = ts[0].ndim
    if ndim == 0:
        raise OpError("concatenate: zero-dimensional tensors cannot be concatenated")
    if any(t.ndim != ndim for t in ts):
        raise OpError(f"concatenate: ranks differ: {describe([t.shape for t in ts])}")
    axis = norm_axis("concatenate", axis, ndim)
    if len(ts) == 1:
        return ts[0]
    return _concatenate.bind(ts, {"axis": axis})


def _need_promote(tensors):
    ds = {t.dtype if isinstance(t, Tensor) else None for t in tensors}
    return len(ds) > 1 or None in ds


def stack(tensors, axis=0, *, dim=None, dtype=None) -> Tensor:
    """Join tensors of equal shape along a new ``axis`` (PyTorch's ``dim=`` too), each cast
    to ``dtype`` first when given (NumPy's and JAX's)."""
    if dim is not None:
        axis = dim
    tensors = [as_tensor(t, op="stack") for t in tensors]
    if dtype is not None:
        tensors = [fn.cast(t, dtype) for t in tensors]
    if not tensors:
        raise ValueError("stack: needs at least one tensor")
    shape = tensors[0].shape
    for t in tensors[1:]:
        if t.shape != shape:
            raise OpError(f"stack: shapes differ: {describe([t.shape for t in tensors])}")
    axis = norm_axis("stack", axis, len(shape) + 1)
    return concatenate([unsqueeze(t, axis) for t in tensors], axis)


def hstack(tensors) -> Tensor:
    """Join tensors horizontally (NumPy's and JAX's ``hstack``): along their first dim when
    they are 1-D (0-d ones count as length 1), else along their second.

    Args:
        tensors: a sequence of tensors (or values ``constant`` takes).

    Returns:
        The joined tensor.
    """
    ts = [as_tensor(t, op="hstack") for t in tensors]
    ts = [reshape(t, (1,)) if t.ndim == 0 else t for t in ts]
    return concatenate(ts, 0 if ts and ts[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    """Join tensors vertically (NumPy's and JAX's ``vstack``): along their first dim, a 1-D
    tensor of ``n`` taken as a ``(1, n)`` row (a 0-d one as ``(1, 1)``).

    Args:
        tensors: a sequence of tensors (or values ``constant`` takes).

    Returns:
        The joined tensor.
    """
    ts = [as_tensor(t, op="vstack") for t in tensors]
    ts = [reshape(t, (1, -1)) if t.ndim < 2 else t for t in ts]
    return concatenate(ts, 0)


def meshgrid(*xs, indexing: str = "xy", sparse: bool = False, copy: bool = True) -> list[Tensor]:
    """Coordinate grids from 1-D tensors (NumPy's and JAX's ``meshgrid``): each input
    broadcast over the others' lengths. ``indexing="xy"`` (default) swaps the first two
    output dims (Cartesian: ``x`` varies along columns); ``"ij"`` keeps the inputs' order.

    Args:
        xs: 1-D tensors (or values ``constant`` takes).
        indexing: ``"xy"`` or ``"ij"``.
        sparse: each output keeps size 1 along the other inputs' dims (they broadcast to
            the grid) instead of being broadcast.
        copy: accepted for NumPy's calls (tensors are values: nothing to copy).

    Returns:
        A list of tensors, one per input, each of the grid's shape.

    Raises:
        ValueError: for an input that is not 1-D or another ``indexing``.
    """
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    ts = [as_tensor(x, op="meshgrid") for x in xs]
    for t in ts:
        if t.ndim != 1:
            raise ValueError(f"meshgrid: inputs must be 1-D, got shape {t.shape}")
    n = len(ts)
    order = list(range(n))
    if indexing == "xy" and n >= 2:
        order[0], order[1] = 1, 0  # the dim each input runs along
    shape = [0] * n
    for t, d in zip(ts, order):
        shape[d] = t.shape[0]
    out = []
    for t, d in zip(ts, order):
        at = [1] * n
        at[d] = t.shape[0]
        line = reshape(t, tuple(at))
        out.append(line if sparse else broadcast_to(line, tuple(shape)))
    return out


def diag(x, k: int = 0) -> Tensor:
    """NumPy's and JAX's ``diag``: a 1-D ``x`` as the ``k``-th diagonal of a square matrix
    (zeros elsewhere), or the ``k``-th diagonal of a 2-D ``x`` as a 1-D tensor (``k > 0``
    above the main one, ``k < 0`` below).

    Args:
        x: a 1-D or 2-D tensor.
        k: the diagonal's offset (default 0).

    Returns:
        A 2-D or 1-D tensor.

    Raises:
        ValueError: for an ``x`` of another rank.
        TypeError: for a ``k`` that is not an int.
    """
    x = as_tensor(x, op="diag")
    k = int_arg("diag", "k", k)
    if x.ndim == 1:
        n = x.shape[0] + abs(k)
        rows = fn.arange(x.shape[0], dtype=DType.int64) + max(-k, 0)
        cols = rows + k
        return fn.zeros((n, n), dtype=x.dtype).at[rows, cols].set(x)
    if x.ndim == 2:
        r, c = x.shape
        length = max(0, min(r + min(k, 0), c - max(k, 0)))
        rows = fn.arange(length, dtype=DType.int64) + max(-k, 0)
        return x[rows, rows + k]
    raise ValueError(f"diag: x must be 1-D or 2-D, got shape {x.shape}")


def split(x, num_or_sizes=None, axis=0, *, num_splits=None, dim=None) -> tuple[Tensor, ...]:
    """Split ``x`` along ``axis`` into ``num_or_sizes`` equal parts, or parts of the given
    sizes; returns a tuple of tensors (as ``torch.split`` and the original Nabla).
    ``num_splits=`` is the original Nabla's keyword for a count, ``dim=`` PyTorch's for
    ``axis``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a 0-d ``x``, a count that does not divide
            the axis, or sizes that are negative or do not add up to it.
    """
    x = as_tensor(x, op="split")
    axis = axis if dim is None else dim
    num_or_sizes = alias_arg("split", "num_or_sizes", num_or_sizes, "num_splits", num_splits)
    if num_or_sizes is None:
        raise TypeError("split: missing the number of parts (num_or_sizes or num_splits=)")
    if x.ndim == 0:
        raise OpError("split: cannot split a 0-d tensor")
    axis = norm_axis("split", axis, x.ndim)
    n = x.shape[axis]
    if isinstance(num_or_sizes, numbers.Integral):
        k = int(num_or_sizes)
        if k <= 0 or n % k:
            raise OpError(f"split: axis {axis} of shape {x.shape} is not divisible into {k} parts")
        sizes = (n // k,) * k
    else:
        if not isinstance(num_or_sizes, list | tuple | np.ndarray):
            raise TypeError(
                f"split: num_or_sizes must be an int count or a list of sizes, got "
                f"{num_or_sizes!r} ({type(num_or_sizes).__name__}) for a tensor of shape {x.shape}"
            )
        sizes = tuple(as_dim(s) for s in num_or_sizes)
        if any(s < 0 for s in sizes):
            raise OpError(f"split: sizes {sizes} must not be negative (axis {axis} of {x.shape})")
        if sum(sizes) != n:
            raise OpError(f"split: sizes {sizes} do not add up to {n} (axis {axis} of {x.shape})")
    return tuple(_split.bind([x], {"sizes": sizes, "axis": axis}))


def chunk(x, chunks, axis=0, *, dim=None) -> list[Tensor]:
    """Split ``x`` along ``axis`` into ``chunks`` parts as even as possible, as the original
    Nabla (and ``np.array_split``): the first ``n % chunks`` parts get one element more
    (10 in 3 -> 4, 3, 3); empty parts are dropped (2 in 3 -> 1, 1).

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array (at least 1-D).
        chunks: the requested number of parts, a positive int.
        axis: the dim to split (default 0); negative counts from the end.
        dim: PyTorch's name for ``axis``.

    Returns:
        A list of tensors (the original Nabla's container for ``chunk``).

    Raises:
        ValueError: if ``chunks`` is not positive.
        IndexError: for an axis out of range.
    """
    x = as_tensor(x, op="chunk")
    axis = norm_axis("chunk", _torch_dim(axis, dim), x.ndim)
    n = x.shape[axis]
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    base, extra = divmod(n, chunks)
    sizes = [base + (i < extra) for i in range(chunks)]
    sizes = [sz for sz in sizes if sz > 0]
    return list(split(x, sizes, axis)) if sizes else []


def unbind(x, axis=0, *, dim=None) -> tuple[Tensor, ...]:
    """Remove ``axis`` of ``x``, returning the slices along it as a tuple (``dim=`` is
    PyTorch's name)."""
    x = as_tensor(x, op="unbind")
    axis = norm_axis("unbind", _torch_dim(axis, dim), x.ndim)
    if x.shape[axis] == 0:
        return ()
    return tuple(squeeze(p, axis) for p in split(x, x.shape[axis], axis))


def tile(x, reps) -> Tensor:
    """Repeat the whole tensor ``reps`` times per dim (NumPy's ``tile``).

    When ``reps`` and ``x`` differ in length, the shorter one is padded with leading 1s.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array.
        reps: int or sequence of ints: the repetitions per dim.

    Returns:
        A tensor of shape ``(reps[i] * x.shape[i], ...)`` after the padding.

    Raises:
        TypeError: if ``reps`` is not an int or a sequence of ints.
        ValueError: (:class:`nabla.OpError`) for a negative count.

    Example:
        >>> nb.tile(nb.constant([1, 2]), 2).tolist()
        [1, 2, 1, 2]
    """
    x = as_tensor(x, op="tile")
    given = reps
    reps = (reps,) if isinstance(reps, numbers.Integral) else reps
    try:
        reps = tuple(reps)
    except TypeError:
        reps = None
    if reps is None or not all(isinstance(r, numbers.Integral) for r in reps):
        raise TypeError(
            f"tile: reps must be an int or a sequence of ints, got {given!r} "
            f"(tensor of shape {x.shape})"
        )
    reps = tuple(int(r) for r in reps)
    if any(r < 0 for r in reps):
        raise OpError(f"tile: reps must be non-negative, got {given!r} (tensor of shape {x.shape})")
    nd = max(x.ndim, len(reps))
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    reps = (1,) * (nd - len(reps)) + reps
    inter = []
    for d in x.shape:
        inter += [1, d]
    y = reshape(x, tuple(inter))
    big = []
    for r, d in zip(reps, x.shape):
        big += [r, d]
    y = broadcast_to(y, tuple(big))
    return reshape(y, tuple(r * d for r, d in zip(reps, x.shape)))


def repeat(x, repeats, axis=None, *, total_repeat_length=None) -> Tensor:
    """Repeat each element ``repeats`` times along ``axis`` (flattened when None).

    ``repeats`` is an int, or one int per element along ``axis`` (a list, tuple, NumPy
    array, or a tensor whose values are known at the call: the output size must be known,
    as JAX requires). ``total_repeat_length`` (JAX's) fixes the output's length along
    ``axis``: longer repeats are cut, and shorter ones are followed by the last element
    repeated, as in JAX."""
    x = as_tensor(x, op="repeat")
    if isinstance(repeats, Tensor) and readable_now(repeats):
        repeats = repeats.numpy()
        repeats = int(repeats) if repeats.ndim == 0 else repeats
    if total_repeat_length is not None:
        if axis is None:
            x, axis = reshape(x, (-1,)), 0
        axis = norm_axis("repeat", axis, x.ndim)
        n, want = int(x.shape[axis]), int(total_repeat_length)
        if isinstance(repeats, Tensor):  # traced counts: the size is fixed, the index is not
            return _repeat_traced(x, repeats, axis, n, want)
        reps = np.broadcast_to(np.asarray(repeats), (n,)) if np.ndim(repeats) < 2 else None
        if reps is None or reps.dtype.kind not in "iu" or n == 0 or want < 0:
            raise OpError(
                f"repeat: total_repeat_length={total_repeat_length} needs a non-empty axis "
                f"and int repeats, got {repeats!r} for shape {x.shape}"
            )
        # output position j takes the element whose run holds j; past them all, the last
        at = np.searchsorted(np.cumsum(reps), np.arange(want), side="right")
        return fn.take(x, fn.constant(np.minimum(at, n - 1).astype(np.int32)), axis=axis)
    if not isinstance(repeats, numbers.Integral):
        return _repeat_each(x, repeats, axis)
    r = int(repeats)
    if r < 0:
        raise OpError(f"repeat: repeats must be non-negative, got {r} (tensor of shape {x.shape})")
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    axis = norm_axis("repeat", axis, x.ndim)
    y = unsqueeze(x, axis + 1)
    y = broadcast_to(y, _with_dim(y.shape, axis + 1, r))
    return reshape(y, _with_dim(x.shape, axis, x.shape[axis] * r))


def _repeat_traced(x, repeats, axis, n: int, want: int) -> Tensor:
    """``repeat`` to ``want`` elements with counts only the program knows (under
    ``compile`` or ``vmap``): output position ``j`` takes the element whose run holds it,
    the last one past them all (JAX's)."""
    if repeats.ndim > 1 or not repeats.dtype.is_int or n == 0:
        raise OpError(
            f"repeat: repeats must be an int tensor of 0 or 1 dims, got {repeats.dtype.value}"
            f"{tuple(repeats.shape)} for axis {axis} of shape {x.shape}"
        )
    ends = fn.cumsum(broadcast_to(repeats, (n,)) if repeats.ndim == 0 else repeats, axis=0)
    j = fn.arange(want, dtype=ends.dtype)
    before = fn.cast(reshape(ends, (1, n)) <= reshape(j, (want, 1)), DType.int32)
    at = fn.minimum(fn.sum(before, 1), fn.full((), n - 1, dtype=DType.int32))
    return fn.take(x, at, axis=axis)


def _repeat_each(x, repeats, axis):
    """``repeat`` with one count per element: a gather of each index its count of times."""
    if isinstance(repeats, Tensor):
        raise TypeError(
            "repeat: per-element repeats must be a list, tuple or NumPy array of ints (the "
            "output shape depends on their values), got a Tensor"
        )
    reps = np.asarray(repeats)
    if reps.ndim != 1 or reps.dtype.kind not in "iu":
        raise TypeError(
            f"repeat: repeats must be an int or a 1-D sequence of ints, got {repeats!r}"
        )
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    axis = norm_axis("repeat", axis, x.ndim)
    n = x.shape[axis]
    if reps.size == 1:
        return repeat(x, int(reps[0]), axis)
    if reps.size != n or (reps < 0).any():
        raise OpError(
            f"repeat: got repeats {reps.tolist()} for axis {axis} of size {n} (tensor of shape "
            f"{x.shape}): give one non-negative count per element"
        )
    if isinstance(n, SymDim):  # one count per element: the index is numbers of the size
        note_size_decision(n, "repeat's counts per element")
    index = np.repeat(np.arange(n, dtype=np.int32), reps)
    return fn.take(x, fn.constant(index), axis=axis)


provide(globals(), [*__all__, "slice_normalized", "slice_entry", "slice_update_normalized"])
