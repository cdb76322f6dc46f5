"""Attach operators and methods to ``Tensor`` from one table (the Tensor class stays thin)."""

from __future__ import annotations

import numpy as np

from ..core.device import CPU
from ..core.dtypes import DType
from ..core.sharding import P
from ..core.state import STATE
from ..runtime.tensor import Tensor
from . import (
    array_functions,
    binary,
    collectives,
    creation,
    indexing,
    linalg,
    reduction,
    special,
    transfer,
    unary,
    view,
)
from . import random as random_ops
from ._util import as_tensor, device_arg, device_like, norm_axes, norm_axis, readable_now
from .base import OpError


def _swap(fn):
    return lambda self, other: fn(other, self)


def _to(self, *args, device=None, dtype=None, non_blocking=False, copy=False):
    """The tensor on another device and/or with another dtype, in PyTorch's forms:
    ``x.to(device)``, ``x.to(dtype)``, ``x.to(device, dtype)``, ``x.to(other)``,
    ``x.to(device=..., dtype=...)``.

    Args:
        *args: a :class:`nabla.Device`, a device name as PyTorch spells it (``"cpu"``,
            ``"cuda"``, ``"gpu:1"``) or a ``torch.device``; a dtype in any form
            :func:`nabla.cast` accepts (``torch.float64`` too); or a tensor whose device and
            dtype to take. In any order.
        device: the device, by keyword.
        dtype: the dtype, by keyword.
        non_blocking: accepted for PyTorch compatibility (transfers are ordered anyway).
        copy: return a new tensor even when nothing changes (PyTorch's: in-place
            methods on it leave this one as it is).

    Returns:
        The moved and/or cast tensor (the tensor itself when nothing changes;
        differentiable, casts only between float dtypes).

    Raises:
        TypeError: without a target, or for an argument that is none of these.
    """
    for arg in args:
        if isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        elif device_like(arg) is not None:
            device = device_like(arg)
        else:
            dtype = arg
    if device is None and dtype is None:
        raise TypeError("to: missing the target (a device, a dtype or a tensor)")
    out = self
    if device is not None:
        out = transfer.to_device(out, device_arg("to", device))
    if dtype is not None:
        try:
            out = unary.cast(out, dtype)
        except TypeError as e:
            if not isinstance(dtype, str):
                raise
            # a string that is neither: name both readings (it read "cast: unsupported
            # dtype 'tpu:7'", where a device was meant)
            raise TypeError(
                f"to: {dtype!r} is neither a device (e.g. 'cpu', 'cuda', 'gpu:1') nor a dtype ({e})"
            ) from None
    return unary.identity(out) if copy and out is self else out


def _cpu(self):
    """A copy of the tensor on ``nb.CPU()`` (the tensor itself if it is there already).

    Returns:
        A tensor on the CPU; differentiable (gradients flow back to the original device).
    """
    return _to(self, CPU())


def _gather(self, *args, **kwargs):
    """The whole value on every device of the tensor's mesh (the original Nabla's
    ``x.gather()``): partial terms reduced (``all_reduce``), split dims gathered
    (``all_gather``); lazy, differentiable, and listed by ``nb.trace`` by those names.

    The result stays on the mesh, replicated (``x.is_sharded`` is still True): the same as
    ``x.reshard(mesh, nb.P())``. An unsharded tensor is returned as is.
    Given arguments, it is PyTorch's ``x.gather(dim, index)``: ``out[i][j] =
    x[i][index[i][j]]`` along ``dim``, of ``index``'s shape (which may be smaller than
    ``x`` in the other dims; :func:`nabla.take_along_axis` of the leading part of ``x``).

    Returns:
        A tensor with the same global value, replicated on its mesh (or the gathered
        elements).

    Raises:
        TypeError: for arguments that are not PyTorch's ``(dim, index)``.
    """
    if args or kwargs:
        dim = kwargs.pop("dim", args[0] if args else None)
        index = kwargs.pop("index", args[1] if len(args) > 1 else None)
        if kwargs or len(args) > 2 or not isinstance(dim, int) or index is None:
            raise TypeError(
                "Tensor.gather: with arguments it is PyTorch's x.gather(dim, index); got "
                f"{len(args)} positional and {sorted(kwargs)} keyword (x.gather() with none "
                "gathers a sharded tensor's blocks)"
            )
        return indexing.torch_gather(self, dim, index)
    spec = self.sharding
    if spec is None:
        return self
    return collectives.reshard(self, spec.mesh, P())


def _T(self):  # noqa: N802
    """The tensor with all dims reversed (NumPy's ``x.T``); a 0-d or 1-D tensor is unchanged."""
    return view.permute(self, tuple(reversed(range(self.ndim))))


def _mT(self):  # noqa: N802
    """The tensor with its last two dims swapped (PyTorch's ``x.mT``; needs rank >= 2)."""
    return view.swap_axes(self, -2, -1)


def _reshape(self, *shape):
    """Same elements, new shape: ``x.reshape(2, 3)`` or ``x.reshape((2, 3))`` (``x.view``).

    Args:
        *shape: the new shape, as ints or one tuple/list; one dim may be -1 (inferred).

    Returns:
        The reshaped tensor (``x`` itself if the shape is unchanged). As PyTorch's
        ``view``, an in-place method or assignment on it (``x.view(-1)[0] = v``) reaches
        ``x`` too.

    Raises:
        ValueError: (:class:`nabla.OpError`) if the element count does not match.
        TypeError: for a shape entry that is not an int (a string such as ``"12"`` too).
    """
    if len(shape) == 1 and isinstance(shape[0], list | tuple):
        shape = tuple(shape[0])
    if len(shape) == 1 and isinstance(shape[0], DType | np.dtype | type):
        raise TypeError(
            f"view: reading the bits of a {self.dtype.value} tensor as {shape[0]} (PyTorch's "
            "x.view(dtype)) is not supported; x.astype(dtype) converts the values"
        )
    try:
        return view.reshape(self, shape)
    except TypeError:
        if any(isinstance(s, str | bytes) for s in shape):  # named here, as NumPy refuses them
            raise TypeError(
                f"reshape: shape entries must be ints, got {shape!r} for a tensor of shape "
                f"{self.shape}"
            ) from None
        raise


def _at(self):
    """Functional indexed updates, as in JAX: ``x.at[idx].set(v)``.

    ``x.at[idx]`` takes any index ``x[idx]`` accepts; then ``.set(v)``, ``.add(v)`` (repeated
    indices accumulate), ``.multiply(v)``, ``.min(v)``, ``.max(v)`` return an updated copy
    (``x`` is unchanged) and ``.get()`` returns ``x[idx]``.
    """
    return indexing.AtIndexer(self)


def _numpy_reduction(fn):
    """``fn`` as a method that also takes NumPy's keywords, so ``np.sum(t)``,
    ``np.mean(t, axis=0)``, ``np.max(t)`` work on tensors (they call ``t.sum(axis=...,
    dtype=..., out=...)``) and return a tensor, as they do for JAX arrays."""

    def method(self, *args, dtype=None, out=None, **kwargs):
        if out is not None:
            raise TypeError(f"{fn.__name__}: out= is not supported (tensors are immutable)")
        kwargs = _torch_keywords(fn.__name__, kwargs)
        if dtype is None:
            return fn(self, *args, **kwargs)
        # computed in ``dtype``, as NumPy: an int8 sum with dtype=int64 does not wrap
        return fn(self.cast(dtype), *args, **kwargs).cast(dtype)

    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


def _min_max(fn, elementwise, name):
    """``x.max``/``x.min``: NumPy's reduction (``axis`` positional or keyword, values
    only), PyTorch's ``x.max(dim=d)`` or ``x.max(d, keepdim=...)`` (PyTorch's keyword: a
    ``(values, indices)`` pair whose gradient goes to the index returned, the first extreme
    of a tie, as PyTorch's) and PyTorch's elementwise ``x.max(other)`` (a tensor
    argument)."""
    numpy_form = _numpy_reduction(fn)

    def method(self, *args, **kwargs):
        if args and isinstance(args[0], Tensor) and not kwargs:
            return elementwise(self, *args)
        if "keepdim" in kwargs and "dim" not in kwargs and len(args) == 1:
            kwargs["dim"], args = args[0], ()  # x.max(d, keepdim=True): PyTorch's call
        if "dim" not in kwargs:
            return numpy_form(self, *args, **kwargs)
        return fn(self, *args, **kwargs)  # PyTorch's (values, indices)

    method.__name__ = name
    method.__doc__ = fn.__doc__
    return method


def _sort(self, axis=-1, *, dim=None, descending=False, stable=True):
    """NumPy's and JAX's ``x.sort(axis)`` (the sorted values), or PyTorch's
    ``x.sort(dim=d, descending=...)``: the pair ``(values, indices)``. The sort is stable
    (``stable=False`` is accepted and sorts the same); ``descending`` starts from the
    largest."""
    if dim is None:
        return reduction.sort(self, axis, descending, stable)
    return reduction.sorted_along(self, dim, descending, stable)


def _argsort(self, axis=-1, *, dim=None, descending=False, stable=True):
    """The indices that sort ``x`` along ``axis`` (``dim=`` too), stably (``stable=False``
    sorts the same), from the largest with ``descending``."""
    if dim is None:
        return reduction.argsort(self, axis, descending, stable)
    return reduction.argsort(self, descending=descending, stable=stable, dim=dim)


def _nonzero(self, *, as_tuple=False):
    """PyTorch's ``x.nonzero()``: the indices of the nonzero elements as rows, ``(count,
    x.ndim)`` (``as_tuple=True``: one tensor per dim, NumPy's ``nonzero``), counted now."""
    return reduction.nonzero(self) if as_tuple else reduction.argwhere(self)


def _topk(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - PyTorch's name
    """PyTorch's ``x.topk(k, dim)``: the ``k`` largest (``largest=False``: smallest)
    values along ``dim`` and their indices, ``(values, indices)``, always in order
    (``sorted`` is accepted)."""
    return reduction.sorted_along(self, dim, descending=largest, k=k, op="topk")


def _torch_split(self, split_size_or_sections, axis=0):
    """PyTorch's ``x.split``: parts of ``split_size_or_sections`` elements along ``axis``
    (``dim=``; the last part smaller when the size does not divide), or of each size in a
    list. (The function ``nb.split(x, n)`` is JAX's and the original Nabla's: ``n`` equal
    parts.)"""
    if isinstance(split_size_or_sections, int) and not isinstance(split_size_or_sections, bool):
        step = split_size_or_sections
        if step <= 0:
            raise ValueError(f"split: split_size must be positive, got {step}")
        n = self.shape[norm_axis("split", axis, self.ndim, self.shape)] if self.ndim else 0
        sizes = [min(step, n - i) for i in range(0, n, step)] or [0]
        return view.split(self, sizes, axis)
    return view.split(self, split_size_or_sections, axis)


def _varargs(fn, name, keyword):
    """``fn(x, axis)`` as a method that also takes PyTorch's forms: ``keyword=`` for the
    axis (``dims=``, ``dim=``) and several axes as separate arguments (``x.flip(0, 2)``)."""

    def method(self, *axes, **kwargs):
        if keyword in kwargs:
            if axes:
                raise TypeError(f"{name}: pass the dims either positionally or as {keyword}=")
            axes = (kwargs.pop(keyword),)
        if len(axes) > 1:
            axes = (tuple(axes),)
        return fn(self, *axes, **kwargs)

    method.__name__ = name
    method.__doc__ = fn.__doc__
    return method


def _roll(self, shifts=None, dims=None, *, shift=None, axis=None):
    """``x`` rolled by ``shifts`` along ``dims`` (PyTorch's keywords; NumPy's ``shift`` and
    ``axis`` also)."""
    shift = shifts if shift is None else shift
    axis = dims if axis is None else axis
    if shift is None:
        raise TypeError("roll: missing the shift (shifts= or shift=)")
    return view.roll(self, shift, axis)


def _permute(self, *axes, dims=None, **kwargs):
    """``x`` with its dims in the order ``axes`` (``x.permute(2, 0, 1)``, a tuple, or
    PyTorch's ``dims=``)."""
    if dims is not None:
        if axes:
            raise TypeError("permute: pass the dims either positionally or as dims=")
        axes = tuple(dims)
    return view.permute(self, *axes, **kwargs)


def _transpose(self, *args, dim0=None, dim1=None, **kwargs):
    """``x`` with two dims swapped (default the last two; PyTorch's ``dim0=``/``dim1=``
    too), or, given a whole order (``x.transpose(1, 0, 2)`` or one tuple, as NumPy's and
    JAX's method), permuted."""
    if dim0 is not None or dim1 is not None:
        if args or dim0 is None or dim1 is None:
            raise TypeError("transpose: pass both dim0= and dim1=, or the two dims positionally")
        args = (dim0, dim1)
    if len(args) == 1 and isinstance(args[0], tuple | list):
        return view.permute(self, *args[0])
    if len(args) == 1 or len(args) > 2:  # a whole order (NumPy's x.transpose(0) of a vector);
        # two dims are swapped, as the API's and PyTorch's transpose(a1, a2)
        return view.permute(self, *args)
    return view.transpose(self, *args, **kwargs)


def _squeeze(self, axis=None, *, dim=None):
    """NumPy's ``squeeze`` (a given axis must have size 1), or PyTorch's with ``dim=``:
    dims of another size are left as they are (:func:`nabla.squeeze`'s rule)."""
    return view.squeeze(self, axis, dim=dim)


def _ravel(self):
    """``x`` flattened to one dim (NumPy's and JAX's ``ravel``)."""
    return view.reshape(self, (-1,))


def _block_until_ready(self):
    """``x`` computed (JAX's ``block_until_ready``: ``x.realize()``); returns ``x``."""
    return self.realize()


def _tile(self, *reps):
    """NumPy's ``tile`` (``x.tile(reps)``), also as PyTorch spells its ``repeat``: the
    counts as separate arguments, ``x.tile(1, 2, 1)``."""
    return view.tile(self, reps[0] if len(reps) == 1 else tuple(reps))


def _spread(fn):
    """``var``/``std`` as methods that also take PyTorch's ``unbiased=`` (``correction``
    1 when True, 0 when False; also as PyTorch's second positional argument,
    ``x.std(dim, unbiased, keepdim)``) and ``dim=``/``keepdim=``. Called PyTorch's way, with
    ``dim=`` or ``keepdim=`` and no estimator named, the estimator is PyTorch's default, the
    unbiased one (``x.std(dim=1)``, ``x.std(-1, keepdim=True)`` as in PyTorch); ``x.std()``
    and ``x.std(axis)`` keep NumPy's and JAX's ``ddof=0``."""
    reduce = _numpy_reduction(fn)

    def method(self, *args, unbiased=None, **kwargs):
        if len(args) >= 2 and isinstance(args[1], bool | np.bool_):
            # PyTorch's x.std(dim, unbiased[, keepdim]); NumPy's second is dtype, not a bool
            if unbiased is not None:
                raise TypeError(f"{fn.__name__}: unbiased given by position and by keyword")
            unbiased, args = bool(args[1]), (args[0], *args[2:])
            if len(args) >= 2:
                kwargs["keepdim"], args = args[1], args[:1]
            kwargs.setdefault("dim", args[0])
            args = ()
        named = unbiased is not None or "correction" in kwargs or "ddof" in kwargs
        if unbiased is not None:
            if "correction" in kwargs or "ddof" in kwargs:
                raise TypeError(f"{fn.__name__}: pass unbiased= or correction=, not both")
            kwargs["correction"] = 1 if unbiased else 0
        elif ("dim" in kwargs or "keepdim" in kwargs) and not named:
            kwargs["correction"] = 1
        return reduce(self, *args, **kwargs)

    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


def _torch_keywords(name, kwargs):
    """PyTorch's ``dim=``/``keepdim=`` as ``axis=``/``keepdims=`` (``x.sum(dim=1)``)."""
    if "dim" not in kwargs and "keepdim" not in kwargs:
        return kwargs
    kwargs = dict(kwargs)
    dims = kwargs.get("dim")
    for torch_name, name_here in (("dim", "axis"), ("keepdim", "keepdims")):
        if torch_name in kwargs:
            if name_here in kwargs:
                raise TypeError(f"{name}: pass either {torch_name}= or {name_here}=, not both")
            kwargs[name_here] = kwargs.pop(torch_name)
    if isinstance(dims, tuple | list) and not dims and name not in ("all", "any"):
        kwargs["axis"] = None  # PyTorch's empty dim reduces every dim (all/any: none)
    return kwargs


def _torch_dim(fn):
    """``fn`` as a method that also takes PyTorch's ``dim=``/``keepdim=``."""

    def method(self, *args, **kwargs):
        return fn(self, *args, **_torch_keywords(fn.__name__, kwargs))

    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


def _in_place(op, name):
    """``x op= y``. A ``requires_grad`` leaf (a parameter) is updated in place and stays that
    leaf, as PyTorch's in-place ops under ``no_grad`` (``with nb.no_grad(): w -= lr *
    w.grad``: it was rebound to a new tensor that no longer required grad); any other
    tensor gets a new value (``x = x op y``), as JAX's arrays."""

    def run(x, y):
        if not x._impl.requires_grad:
            return op(x, y)
        new = op(x.detach(), y.detach() if isinstance(y, Tensor) else y)
        return _rebind_fitting(name, x, new, "the requires_grad tensor")

    return run


def _rebind_fitting(name: str, x, new, what: str):
    """``x`` holding ``new`` in place (``indexing.rebind``), which must have its shape and
    dtype (else an error naming ``name`` and both); returns ``x``."""
    if new.shape != x.shape or new.dtype is not x.dtype:
        raise ValueError(
            f"{name}: the in-place result {new.dtype.value}{list(new.shape)} does not fit "
            f"{what} {x.dtype.value}{list(x.shape)} it updates"
        )
    indexing.rebind(x, new, item=True)
    return x


def _clamp_min(self, min):  # noqa: A002 - PyTorch's name
    """PyTorch's ``x.clamp_min(min)``: ``x`` clipped from below."""
    return binary.clip(self, min, None)


def _clamp_max(self, max):  # noqa: A002 - PyTorch's name
    """PyTorch's ``x.clamp_max(max)``: ``x`` clipped from above."""
    return binary.clip(self, None, max)


def _view_of_index(self, key):
    """``x[key]``: a basic index (ints, slices, ``...``, None) reads a view, as PyTorch's
    do: an in-place method or assignment on it (``w[0].zero_()``, ``x[:, 1][0] = v``)
    writes through to ``x`` (``indexing.write_through``). An integer tensor or a mask reads
    a copy, as in PyTorch. Otherwise values are values: ``row = x[0]; row += 1`` gives
    ``row`` a new value and leaves ``x`` as it is, as JAX's arrays."""
    out = indexing.getitem(self, key)
    if out is not self and indexing.is_basic_key(key):
        indexing.make_view(out, self, key)
    return out


def _permutation_between(x, out):
    """The dims' permutation that made ``out`` from ``x`` (``out = x.transpose(perm)``), or
    None when ``out`` is not a permutation of ``x``. ``permute`` folds a transpose of an
    unrealized transpose into one transpose of the inner value (or the inner value itself,
    when they cancel): the permutation is then read relative to ``x``, not the node's own
    (which had scrambled a write through ``x.T.T[0]`` or a second write through ``x.T``)."""
    node, made = out._impl.node, x._impl.node
    n = len(x.shape)
    if node is not None and node.op is view._transpose and node.inputs[0] is x._impl:
        return tuple(node.kwargs["perm"])
    if made is None or made.op is not view._transpose or x._impl.buffer is not None:
        return None
    inner = made.inputs[0]
    if out._impl is inner:  # the two transposes cancel
        composed = tuple(range(n))
    elif node is not None and node.op is view._transpose and node.inputs[0] is inner:
        composed = tuple(node.kwargs["perm"])
    else:
        return None
    first = tuple(made.kwargs["perm"])  # x = inner.transpose(first), out = x.transpose(q)
    return tuple(first.index(c) for c in composed)


def _viewing(method, copies: bool = False):
    """``method`` (a reshape or a permutation of dims) returning a PyTorch-style view of
    ``x`` (see :func:`_view_of_index`). ``copies``: PyTorch's ``reshape``/``flatten``, a copy
    where ``x``'s strides do not allow the new shape (``x.T.reshape(-1)``); ``view`` is a
    view always."""

    def view_method(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        if out is not self:
            perm = _permutation_between(self, out)
            if perm is not None:
                indexing.make_view(out, self, indexing.Permuted(perm))
            elif not copies or indexing.viewable_reshape(self, tuple(out.shape)):
                indexing.make_view(out, self, indexing.Reshaped(tuple(self.shape)))
        return out

    view_method.__name__ = getattr(method, "__name__", "view")
    view_method.__doc__ = method.__doc__
    return view_method


_METHODS = {
    # in-place operators: a parameter's value changes in place
    "__iadd__": _in_place(binary.add, "+="),
    "__isub__": _in_place(binary.sub, "-="),
    "__imul__": _in_place(binary.mul, "*="),
    "__itruediv__": _in_place(binary.div, "/="),
    # arithmetic operators
    "__add__": binary.add,
    "__radd__": _swap(binary.add),
    "__sub__": binary.sub,
    "__rsub__": _swap(binary.sub),
    "__mul__": binary.mul,
    "__rmul__": _swap(binary.mul),
    "__truediv__": binary.div,
    "__rtruediv__": _swap(binary.div),
    "__floordiv__": binary.floor_div,
    "__rfloordiv__": _swap(binary.floor_div),
    "__mod__": binary.mod,
    "__rmod__": _swap(binary.mod),
    "__divmod__": lambda a, b: (binary.floor_div(a, b), binary.mod(a, b)),
    "__rdivmod__": lambda a, b: (binary.floor_div(b, a), binary.mod(b, a)),
    "__pow__": binary.pow,
    "__rpow__": _swap(binary.pow),
    "__matmul__": linalg.matmul,
    "__rmatmul__": _swap(linalg.matmul),
    "__neg__": unary.neg,
    "__pos__": lambda self: self,
    "__round__": lambda self, ndigits=None: unary.round(self, ndigits or 0),
    "round": unary.round,  # (x.round(decimals=0), as NumPy, JAX and PyTorch)
    "__abs__": unary.abs,
    # ``v in x``: whether any element equals ``v``, as PyTorch and NumPy (Python's fallback
    # iterated the rows and asked each for a truth value)
    "__contains__": lambda self, v: bool(reduction.any(binary.equal(self, v))),
    "__invert__": lambda self: (
        unary.logical_not(self) if self.dtype.is_bool else unary.bitwise_not(self)
    ),
    "__and__": lambda a, b: _bitwise(binary.logical_and, binary.bitwise_and, a, b),
    "__rand__": lambda a, b: _bitwise(binary.logical_and, binary.bitwise_and, b, a),
    "__or__": lambda a, b: _bitwise(binary.logical_or, binary.bitwise_or, a, b),
    "__ror__": lambda a, b: _bitwise(binary.logical_or, binary.bitwise_or, b, a),
    "__xor__": lambda a, b: _bitwise(binary.logical_xor, binary.bitwise_xor, a, b),
    "__rxor__": lambda a, b: _bitwise(binary.logical_xor, binary.bitwise_xor, b, a),
    "__lshift__": binary.left_shift,
    "__rlshift__": _swap(binary.left_shift),
    "__rshift__": binary.right_shift,
    "__rrshift__": _swap(binary.right_shift),
    # comparisons
    "__eq__": lambda a, b: NotImplemented if b is None else binary.equal(a, b),
    "__ne__": lambda a, b: NotImplemented if b is None else binary.not_equal(a, b),
    "__gt__": binary.greater,
    "__ge__": binary.greater_equal,
    "__lt__": binary.less,
    "__le__": binary.less_equal,
    # indexing
    "__getitem__": _view_of_index,
    "__setitem__": indexing.setitem,
    "at": property(_at),
    # constructors, as the original spells them (``Tensor.from_dlpack(x)``)
    "from_dlpack": staticmethod(creation.from_dlpack),
    "constant": staticmethod(creation.constant),
    # conversions and placement
    "cast": unary.cast,
    "astype": unary.cast,
    "to": _to,
    "cpu": _cpu,
    # placement on a device mesh
    "shard": collectives.shard,
    "reshard": collectives.reshard,
    "gather": _gather,
    # shape
    "T": property(_viewing(_T)),
    "mT": property(_viewing(_mT)),
    "reshape": _viewing(_reshape, copies=True),
    "view": _viewing(_reshape),
    "squeeze": _viewing(_squeeze),
    "unsqueeze": _viewing(_torch_dim(view.unsqueeze)),
    "permute": _viewing(_permute),
    "transpose": _viewing(_transpose),
    "swap_axes": _viewing(view.swap_axes),
    "swapaxes": _viewing(view.swap_axes),
    "moveaxis": _viewing(view.moveaxis),
    "flatten": _viewing(view.flatten, copies=True),
    "flip": _varargs(view.flip, "flip", "dims"),
    "broadcast_to": view.broadcast_to,
    "expand": view.expand,
    "tile": _tile,
    "ravel": _ravel,
    "block_until_ready": _block_until_ready,
    "repeat": view.repeat,
    "split": _torch_dim(_torch_split),
    "chunk": _torch_dim(view.chunk),
    "unbind": _torch_dim(view.unbind),
    # reductions (NumPy's np.sum(t), np.mean(t), ... call these with dtype= and out=)
    "sum": _numpy_reduction(reduction.sum),
    "mean": _numpy_reduction(reduction.mean),
    "max": _min_max(reduction.max, binary.maximum, "max"),
    "min": _min_max(reduction.min, binary.minimum, "min"),
    "prod": _numpy_reduction(reduction.prod),
    "var": _spread(reduction.var),
    "std": _spread(reduction.std),
    "sort": _sort,
    "argsort": _argsort,
    "nonzero": _nonzero,
    "argwhere": reduction.argwhere,
    "topk": _topk,
    "argmax": _numpy_reduction(reduction.argmax),
    "argmin": _numpy_reduction(reduction.argmin),
    "amax": _torch_dim(reduction.max),  # PyTorch's (values only, as x.max(axis))
    "amin": _torch_dim(reduction.min),
    "roll": _roll,
    "cumsum": _torch_dim(reduction.cumsum),
    "cumprod": _torch_dim(reduction.cumprod),
    "logsumexp": _torch_dim(reduction.logsumexp),
    "all": _torch_dim(reduction.all),
    "any": _torch_dim(reduction.any),
    "softmax": _torch_dim(reduction.softmax),
    "logsoftmax": _torch_dim(reduction.logsoftmax),
    "log_softmax": _torch_dim(reduction.logsoftmax),  # PyTorch's name for the method
    # elementwise
    "clip": binary.clip,
    "clamp": binary.clip,
    "clamp_min": _clamp_min,
    "clamp_max": _clamp_max,
    "maximum": binary.maximum,
    "minimum": binary.minimum,
    "fmod": binary.fmod,
    "hypot": binary.hypot,
    "bmm": linalg.bmm,
    "pow": binary.pow,
    "matmul": linalg.matmul,
    "triu": creation.triu,
    "tril": creation.tril,
    "zeros_like": creation.zeros_like,
    "ones_like": creation.ones_like,
    "gelu": unary.gelu,
    "silu": unary.silu,
    "softplus": unary.softplus,
    "square": unary.square,
    "logical_not": unary.logical_not,
}


# PyTorch's spellings of what the table already has, for code ported from it: each one is
# a method of ours under another name (no new semantics). ``x.repeat`` stays NumPy's and
# JAX's (``repeat(repeats, axis)``), as the ops list it; PyTorch's is ``x.tile``.
def _caster(dtype: str):
    def cast(self):
        return unary.cast(self, dtype)

    cast.__name__ = {"float32": "float", "float64": "double", "float16": "half"}.get(dtype, dtype)
    cast.__doc__ = f"``x.astype({dtype})`` (PyTorch's spelling)."
    return cast


def _new_filled(value):
    def new(self, *size, dtype=None, device=None):
        """A tensor of ``size`` (ints, or one sequence) filled with ``value``, in ``x``'s
        dtype and on its device unless given (PyTorch's ``new_zeros``/``new_ones``)."""
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], list | tuple) else size
        return creation.full(shape, value, dtype=dtype or self.dtype, device=device or self.device)

    return new


def _new_full(self, size, fill_value, *, dtype=None, device=None):
    """A tensor of ``size`` filled with ``fill_value``, in ``x``'s dtype and on its device
    unless given (PyTorch's ``new_full``)."""
    return creation.full(
        tuple(size), fill_value, dtype=dtype or self.dtype, device=device or self.device
    )


def _type_as(self, other):
    """``x`` cast to the dtype of ``other`` (PyTorch's ``type_as``)."""
    return unary.cast(self, other.dtype)


def _dim(self):
    """The number of dims, ``x.ndim`` (PyTorch's ``dim()``)."""
    return self.ndim


def _t(self):
    """PyTorch's ``x.t()``: a 2-D tensor transposed (a 0-d or 1-D one as it is)."""
    if self.ndim > 2:
        raise ValueError(f"t: expects a tensor of at most 2 dims, got shape {self.shape}")
    return _T(self)


def _type(self, dtype=None):
    """PyTorch's ``x.type(dtype)``: ``x`` cast to ``dtype``; without one, the dtype's name
    (``"float32"``; PyTorch returns its tensor type's name).

    Args:
        dtype: the dtype to cast to.
    """
    if dtype is None:
        return self.dtype.value
    return unary.cast(self, dtype)


def _repeat_interleave(self, repeats, dim=None):
    """PyTorch's ``x.repeat_interleave(repeats, dim)``: each element repeated ``repeats``
    times along ``dim`` (the flattened tensor when None); NumPy's and JAX's ``repeat``.

    Args:
        repeats: an int, or one count per element along ``dim``.
        dim: the dim (default: the flattened tensor).
    """
    return view.repeat(self, repeats, dim)


def _is_floating_point(self):
    """PyTorch's ``x.is_floating_point()``: whether the dtype is a float."""
    return self.dtype.is_float


def _norm(self, p="fro", dim=None, keepdim=False):
    """PyTorch's ``x.norm(p, dim, keepdim)``: the ``p``-norm over ``dim`` (every element by
    default; ``"fro"`` and 2 the Euclidean norm, ``inf`` the largest magnitude, 1 the sum
    of magnitudes, 0 the count of nonzeros).

    Args:
        p: the order (default ``"fro"``, the Euclidean norm of the elements).
        dim: the dims reduced (default: all).
        keepdim: keep the reduced dims as size 1.

    As PyTorch's, the gradient at a zero vector is zero (not the NaN of the root's
    infinite slope there times 0).

    ``"nuc"`` is the nuclear norm (the sum of singular values) of a matrix: ``x`` 2-D, or
    the two dims ``dim`` names.

    Raises:
        ValueError: for an order that is not a number, ``"fro"`` or ``"nuc"``, or ``"nuc"``
            without a matrix.
    """
    if isinstance(dim, tuple | list) and not dim:
        dim = None  # (PyTorch's empty dim: every element)
    if p == "nuc":
        dims = (0, 1) if dim is None and self.ndim == 2 else dim
        if not isinstance(dims, tuple | list) or len(dims) != 2:
            raise ValueError(
                f"norm: p='nuc' takes a matrix: a 2-D tensor or two dims, got shape "
                f"{self.shape} and dim={dim!r}"
            )
        return linalg.norm(self, "nuc", tuple(dims), keepdim)
    if isinstance(p, str) and p != "fro" or isinstance(p, bool):
        raise ValueError(f"norm: p must be a number, 'fro' or 'nuc', got {p!r}")
    # the elements over ``dim`` as one vector: ``nb.linalg.norm``'s vector orders (1 as
    # x * sign(x): PyTorch's subgradient 0 at 0, where abs's is 1, as JAX's)
    axes = norm_axes("norm", tuple(range(self.ndim)) if dim is None else dim, self.ndim)
    return linalg.vector_norm(self, None if p == "fro" else p, axes, keepdim)


def _contiguous(self):
    """``x`` itself: every tensor is logically contiguous (PyTorch's ``contiguous()``)."""
    return self


def _is_contiguous(self):
    """True: every tensor is logically contiguous (PyTorch's ``is_contiguous()``)."""
    return True


def _view_as(self, other):
    """``x`` reshaped to the shape of ``other`` (PyTorch's ``view_as``/``reshape_as``)."""
    return _reshape(self, other.shape)


def _expand_as(self, other):
    """``x`` broadcast to the shape of ``other`` (PyTorch's ``expand_as``)."""
    return view.broadcast_to(self, other.shape)


def _masked_fill(self, mask, value):
    """``x`` with ``value`` where ``mask`` is True (PyTorch's ``masked_fill``; ``mask``, a
    bool tensor as PyTorch requires, broadcasts against ``x``): ``nb.where(mask, value, x)``
    in ``x``'s dtype.

    Raises:
        TypeError: for a mask that is not bool (an integer mask is refused by PyTorch).
    """
    mask = as_tensor(mask, op="masked_fill")
    if not mask.dtype.is_bool:
        raise TypeError(
            f"masked_fill: the mask must be a bool tensor, got {mask.dtype.value} of shape "
            f"{mask.shape} (compare it first, e.g. mask != 0)"
        )
    if binary.broadcast_shapes("masked_fill", mask.shape, self.shape) != tuple(self.shape):
        raise OpError(
            f"masked_fill: a mask of shape {mask.shape} does not broadcast to the tensor's "
            f"shape {self.shape}"
        )
    return binary.where(mask, unary.cast(as_tensor(value, op="masked_fill"), self.dtype), self)


def _in_place_method(compute, name: str):
    """PyTorch's in-place method ``name`` (``x.add_(y)``, ``x.zero_()``, ...): ``x`` takes
    the value ``compute(x, ...)`` in place and is returned, keeping its identity (every
    reference sees it). A ``requires_grad`` leaf (a parameter) is updated as under
    ``no_grad``, its arguments detached, as ``x op= y`` does; any other tensor keeps the
    history of the new value (its earlier uses keep the old value). The result keeps
    ``x``'s shape and dtype (a float result is cast to ``x``'s float dtype, as PyTorch)."""

    def method(self, *args, **kwargs):
        leaf = self._impl.requires_grad
        if leaf:
            args = [a.detach() if isinstance(a, Tensor) else a for a in args]
        new = compute(self.detach() if leaf else self, *args, **kwargs)
        if new.dtype is not self.dtype and new.dtype.is_float and self.dtype.is_float:
            new = unary.cast(new, self.dtype)
        _rebind_fitting(name, self, indexing.unrecorded(self, new), "the tensor")
        indexing.write_through(self)
        return self

    method.__name__ = name
    method.__doc__ = f"In place (PyTorch's ``{name}``); returns ``x``. {compute.__doc__}"
    return method


def _add(x, other, *, alpha=1):
    """``x + alpha * other``."""
    return binary.add(x, other if alpha == 1 else binary.mul(other, alpha))


def _sub(x, other, *, alpha=1):
    """``x - alpha * other``."""
    return binary.sub(x, other if alpha == 1 else binary.mul(other, alpha))


def _div(x, other, *, rounding_mode=None):
    """``x / other``; ``rounding_mode="floor"`` rounds the quotient down (``//``),
    ``"trunc"`` toward zero, as PyTorch's ``div``."""
    if rounding_mode is None:
        return binary.div(x, other)
    if rounding_mode == "floor":
        return binary.floor_div(x, other)
    if rounding_mode == "trunc":
        if x.dtype.is_float or (isinstance(other, Tensor) and other.dtype.is_float):
            return unary.trunc(binary.div(x, other))
        q = binary.floor_div(x, other)  # integers: floor, then one up where it went below
        inexact = binary.not_equal(binary.mul(q, other), x)
        negative = binary.not_equal(binary.less(x, 0), binary.less(other, 0))
        return binary.add(q, binary.logical_and(inexact, negative).cast(q.dtype))
    raise ValueError(f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


def _zero(x):
    """Zeros."""
    return creation.zeros_like(x)


def _fill(x, value):
    """``value`` everywhere."""
    return creation.full_like(x, value)


def _random_fill(name: str, x, draw):
    if not x.dtype.is_float:
        raise TypeError(f"{name}: fills a float tensor with random values, got {x.dtype}")
    return draw(tuple(x.shape), dtype=x.dtype, device=x.device)


def _uniform(x, a=0.0, b=1.0, *, generator=None, **bounds):
    """uniform draws in ``[a, b)`` from the global generator (``nb.random.seed``; a
    ``generator`` is accepted for PyTorch's calls and not used; PyTorch's keyword names of
    the bounds, ``from`` and ``to``, are taken in ``bounds``)."""
    unknown = set(bounds) - {"from", "to"}
    if unknown:
        raise TypeError(f"uniform_: unexpected keyword arguments {sorted(unknown)}")
    a, b = bounds.get("from", a), bounds.get("to", b)
    return _random_fill("uniform_", x, lambda s, **kw: random_ops.uniform_(s, a, b, **kw))


def _normal(x, mean=0.0, std=1.0, *, generator=None):
    """normal draws of ``mean`` and ``std`` (not negative) from the global generator
    (``nb.random.seed``; a ``generator`` is accepted for PyTorch's calls and not used)."""
    if std < 0:
        raise ValueError(f"normal_: std must be >= 0, got {std}")
    return _random_fill("normal_", x, lambda s, **kw: random_ops.normal_(s, mean, std, **kw))


def _copy(x, src):
    """``src`` (broadcast to ``x``'s shape)."""
    return view.broadcast_to(unary.cast(as_tensor(src, op="copy_"), x.dtype), x.shape)


def _clamp(x, min=None, max=None):  # noqa: A002 - PyTorch names
    """``x`` clipped to ``[min, max]``."""
    return binary.clip(x, min, max)


def _lerp(x, end, weight):
    """``x + weight * (end - x)`` (an EMA: ``ema.lerp_(p, 1 - decay)``)."""
    return binary.add(x, binary.mul(weight, binary.sub(end, x)))


def _index_select(self, dim, index):
    """PyTorch's ``x.index_select(dim, index)``: the slices at 1-D ``index`` along ``dim``
    (:func:`nabla.take`; a 0-d index selects one slice and keeps the dim, as PyTorch)."""
    index = as_tensor(index, op="index_select")
    if index.ndim == 0:
        index = index.reshape((1,))
    return indexing.take(self, index, dim)


def _take(self, indices, axis=None, *, mode=None, fill_value=None):
    """JAX's and PyTorch's ``x.take(indices)``: from the flattened ``x`` unless ``axis``
    is given (not :func:`nabla.take`'s default, dim 0); JAX's ``mode`` and ``fill_value``
    (:func:`nabla.take`'s)."""
    return indexing.take(self, indices, axis, mode=mode, fill_value=fill_value)


def _diagonal(self, offset=0, axis1=0, axis2=1, *, dim1=None, dim2=None):
    """JAX's and PyTorch's ``x.diagonal(offset, axis1, axis2)`` (PyTorch's ``dim1``/
    ``dim2`` for the two axes): :func:`nabla.diagonal`, as a PyTorch view: an in-place
    change of it reaches ``x`` (``cov.diagonal().add_(eps)``) and one of ``x`` reaches it."""
    axis1 = axis1 if dim1 is None else dim1
    axis2 = axis2 if dim2 is None else dim2
    out = array_functions.diagonal(self, offset, axis1, axis2)
    a1, a2 = (norm_axis("diagonal", a, self.ndim, self.shape) for a in (axis1, axis2))
    return indexing.make_view(out, self, indexing.Diagonal(int(offset), a1, a2))


def _searchsorted(self, v, side="left", sorter=None, *, method="scan"):
    """JAX's ``x.searchsorted(v, side, sorter)``: where the values ``v`` would go in the
    sorted 1-D ``x`` (:func:`nabla.searchsorted`; ``method`` is JAX's, accepted)."""
    return array_functions.searchsorted(self, v, side, sorter, method=method)


def _scatter(self, dim, index, src=None, value=None, *, reduce=None):
    """PyTorch's ``x.scatter(dim, index, src)`` (or ``value=``): ``src``'s elements written
    into a copy of ``x`` where ``index`` says along ``dim`` (``out[i][index[i][j]] =
    src[i][j]`` in 2-D); ``reduce="add"`` adds instead. Not :func:`nabla.scatter`, which is
    JAX's (whole slices at indices along an axis)."""
    if (src is None) == (value is None):
        raise TypeError("scatter: give exactly one of src and value, as PyTorch")
    if reduce not in (None, "add"):
        raise ValueError(f"scatter: reduce must be None or 'add', got {reduce!r}")
    return indexing.torch_scatter(
        self, dim, index, value if src is None else src, "scatter", add=reduce == "add"
    )


def _scatter_add(self, dim, index, src):
    """PyTorch's ``x.scatter_add(dim, index, src)``: as :meth:`scatter`, adding ``src``'s
    elements (repeated positions accumulate)."""
    return indexing.torch_scatter(self, dim, index, src, "scatter_add", add=True)


def _index_add(self, dim, index, source, *, alpha=1):
    """PyTorch's ``x.index_add(dim, index, source, alpha=1)``: ``alpha * source``'s slices
    added to ``x``'s slices at the 1-D ``index`` along ``dim`` (repeated indices
    accumulate)."""
    index = as_tensor(index, op="index_add")
    d = norm_axis("index_add", dim, self.ndim, self.shape)
    source = as_tensor(source, op="index_add")
    want = tuple(index.shape[0] if i == d else n for i, n in enumerate(self.shape))
    if index.ndim != 1 or tuple(source.shape) != want:
        raise ValueError(
            f"index_add: index must be 1-D and source of shape {want} for x {self.shape} "
            f"along dim {d}, got index {index.shape} and source {source.shape}"
        )
    if source.dtype is not self.dtype:
        raise TypeError(
            f"index_add: source is {source.dtype.value} but x is {self.dtype.value} "
            "(PyTorch's rule: one dtype; cast source)"
        )
    if alpha != 1:
        source = binary.mul(source, alpha)
    key = (slice(None),) * d + (index,)
    return self.at[key].add(unary.cast(source, self.dtype))


def _masked_select(self, mask):
    """PyTorch's ``x.masked_select(mask)``: the elements where ``mask`` (broadcasting with
    ``x``) is True, as a 1-D tensor (its length depends on the values: not under
    ``compile`` or ``vmap``)."""
    mask = as_tensor(mask, op="masked_select")
    if not mask.dtype.is_bool:  # (an integer mask would index: a gather)
        raise TypeError(
            f"masked_select: mask must be bool, got {mask.dtype.value}{list(mask.shape)} "
            "(PyTorch's rule; pass mask != 0)"
        )
    shape = binary.broadcast_shapes("masked_select", tuple(self.shape), tuple(mask.shape))
    return view.broadcast_to(self, shape)[view.broadcast_to(mask, shape)]


def _narrow(self, dim, start, length):
    """PyTorch's ``x.narrow(dim, start, length)``: ``length`` elements of ``dim`` from
    ``start`` (an int, or a 0-d integer tensor as PyTorch's; a view: in-place changes
    reach ``x``)."""
    d = norm_axis("narrow", dim, self.ndim, self.shape)
    size = self.shape[d]
    if isinstance(start, Tensor) and start.ndim == 0 and start.dtype.is_int:
        if not readable_now(start):  # traced or batched: a slice with a tensor bound
            key = (slice(None),) * d + (slice(start, start + length),)
            return _view_of_index(self, key)
        start = start.item()
    start, length = (int(v) if isinstance(v, np.integer) else v for v in (start, length))
    start = start + size if isinstance(start, int) and start < 0 else start
    if not (isinstance(start, int) and isinstance(length, int)) or not (
        0 <= start and 0 <= length and start + length <= size
    ):
        raise ValueError(
            f"narrow: start {start!r} and length {length!r} do not fit dim {dim} of size "
            f"{size} (shape {self.shape})"
        )
    key = (slice(None),) * d + (slice(start, start + length),)
    return _view_of_index(self, key)


_METHODS.update(
    {
        "add_": _in_place_method(_add, "add_"),
        "sub_": _in_place_method(_sub, "sub_"),
        "mul_": _in_place_method(binary.mul, "mul_"),
        "div_": _in_place_method(_div, "div_"),
        # PyTorch's named forms of the operators (``x.add(y, alpha=2)``)
        "add": _add,
        "sub": _sub,
        "mul": binary.mul,
        "div": _div,
        "zero_": _in_place_method(_zero, "zero_"),
        "fill_": _in_place_method(_fill, "fill_"),
        "uniform_": _in_place_method(_uniform, "uniform_"),
        "normal_": _in_place_method(_normal, "normal_"),
        "copy_": _in_place_method(_copy, "copy_"),
        "clamp_": _in_place_method(_clamp, "clamp_"),
        "lerp_": _in_place_method(_lerp, "lerp_"),
        "masked_fill_": _in_place_method(_masked_fill, "masked_fill_"),
        "scatter_": _in_place_method(_scatter, "scatter_"),
        "scatter_add_": _in_place_method(_scatter_add, "scatter_add_"),
        "index_add_": _in_place_method(_index_add, "index_add_"),
    }
)

_METHODS.update(
    {
        "float": _caster("float32"),
        "double": _caster("float64"),
        "half": _caster("float16"),
        "bfloat16": _caster("bfloat16"),
        "int": _caster("int32"),
        "long": _caster("int64"),
        "bool": _caster("bool"),
        "type_as": _type_as,
        "dim": _dim,
        "t": _viewing(_t),
        "type": _type,
        "is_floating_point": _is_floating_point,
        "repeat_interleave": _repeat_interleave,
        "norm": _norm,
        "clone": unary.clone,  # a new tensor with the value; differentiable
        "contiguous": _contiguous,
        "is_contiguous": _is_contiguous,
        "view_as": _viewing(_view_as),
        "reshape_as": _viewing(_view_as, copies=True),
        "expand_as": _expand_as,
        "masked_fill": _masked_fill,
        "index_select": _index_select,
        "take": _take,
        "diagonal": _diagonal,
        "searchsorted": _searchsorted,
        "scatter": _scatter,
        "scatter_add": _scatter_add,
        "index_add": _index_add,
        "masked_select": _masked_select,
        "narrow": _narrow,
        "lerp": _lerp,
        "new_zeros": _new_filled(0),
        "new_ones": _new_filled(1),
        "new_full": _new_full,
        "eq": binary.equal,
        "ne": binary.not_equal,
        "gt": binary.greater,
        "ge": binary.greater_equal,
        "lt": binary.less,
        "le": binary.less_equal,
        "isnan": unary.is_nan,
        "isinf": unary.is_inf,
    }
)


# ----------------------------------------------------------------------------- more of PyTorch's
def _mm(self, mat2):
    """PyTorch's ``x.mm(mat2)``: the product of two matrices (2-D only, as PyTorch's)."""
    other = as_tensor(mat2, op="mm")
    if self.ndim != 2 or other.ndim != 2:
        raise ValueError(f"mm: expects two matrices, got shapes {self.shape} and {other.shape}")
    return linalg.matmul(self, other)


def _mv(self, vec):
    """PyTorch's ``x.mv(vec)``: a matrix times a vector."""
    v = as_tensor(vec, op="mv")
    if self.ndim != 2 or v.ndim != 1:
        raise ValueError(
            f"mv: expects a matrix and a vector, got shapes {self.shape} and {v.shape}"
        )
    return linalg.matmul(self, v)


def _addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """PyTorch's ``x.addmm(mat1, mat2, beta=, alpha=)``: ``beta x + alpha (mat1 @ mat2)``."""
    prod = _mm(as_tensor(mat1, op="addmm"), mat2)
    return _scaled_sum(self, prod, beta, alpha, "addmm")


def _baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """PyTorch's ``x.baddbmm(batch1, batch2, beta=, alpha=)``: ``beta x + alpha
    bmm(batch1, batch2)``."""
    return _scaled_sum(self, linalg.bmm(batch1, batch2), beta, alpha, "baddbmm")


def _scaled_sum(x, prod, beta, alpha, op: str):
    prod = prod if alpha == 1 else binary.mul(prod, alpha)
    if beta == 0:  # (PyTorch ignores x then, NaN included)
        return view.broadcast_to(prod, binary.broadcast_shapes(op, tuple(x.shape), prod.shape))
    return binary.add(x if beta == 1 else binary.mul(x, beta), prod)


def _where(self, condition, y):
    """PyTorch's ``x.where(condition, y)``: ``x`` where ``condition``, else ``y``."""
    return binary.where(condition, self, y)


def _addcmul(self, tensor1, tensor2, *, value=1):
    """PyTorch's ``x.addcmul(tensor1, tensor2, value=)``: ``x + value * tensor1 * tensor2``."""
    return binary.add(self, binary.mul(binary.mul(tensor1, tensor2), value))


def _addcdiv(self, tensor1, tensor2, *, value=1):
    """PyTorch's ``x.addcdiv(tensor1, tensor2, value=)``: ``x + value * tensor1 / tensor2``."""
    return binary.add(self, binary.mul(binary.div(tensor1, tensor2), value))


def _unflatten(self, dim, sizes):
    """PyTorch's ``x.unflatten(dim, sizes)``: dim ``dim`` split into ``sizes`` (one may be
    -1)."""
    d = norm_axis("unflatten", dim, self.ndim, self.shape)
    sizes = tuple(int(v) for v in sizes)
    shape = tuple(self.shape)
    return view.reshape(self, shape[:d] + sizes + shape[d + 1 :])


def _new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    """PyTorch's ``x.new_tensor(data)``: a new tensor of ``data`` in ``x``'s dtype and on
    its device unless given (``dtype``, ``device``), a leaf with ``requires_grad`` if
    asked."""
    out = creation.constant(
        data.numpy() if isinstance(data, Tensor) else data,
        dtype=dtype or self.dtype,
        device=device or self.device,
    )
    return out.requires_grad_(True) if requires_grad else out


class _ValuesIndices(tuple):
    """PyTorch's ``(values, indices)`` result of ``median``/``kthvalue`` along a dim."""

    __slots__ = ()

    def __new__(cls, values, indices):
        return super().__new__(cls, (values, indices))

    @property
    def values(self):
        return self[0]

    @property
    def indices(self):
        return self[1]


def _kth_along(name, x, k, dim, keepdim):
    d = norm_axis(name, dim, x.ndim, x.shape)
    n = x.shape[d]
    if not 1 <= k <= n:
        raise IndexError(
            f"{name}: k={k} is out of range for dim {dim} of size {n} (shape {x.shape})"
        )
    order = reduction.argsort(x, d)  # (stable: the first of equal values)
    key = (slice(None),) * d + (slice(k - 1, k),)
    idx = order[key]
    values = indexing.take_along_axis(x, idx, d)
    if not keepdim:
        values, idx = view.squeeze(values, d), view.squeeze(idx, d)
    return _ValuesIndices(values, idx)


def _median(self, dim=None, keepdim=False):
    """PyTorch's ``x.median()``: the lower of the two middle values for an even count
    (not NumPy's mean of them, :func:`nabla.median`); with ``dim``, ``(values, indices)``
    along it (``keepdim`` keeps it as size 1)."""
    if dim is None:
        flat = view.reshape(self, (-1,))
        return _kth_along("median", flat, (flat.shape[0] + 1) // 2, 0, False)[0]
    d = norm_axis("median", dim, self.ndim, self.shape)
    return _kth_along("median", self, (self.shape[d] + 1) // 2, d, keepdim)


def _kthvalue(self, k, dim=-1, keepdim=False):
    """PyTorch's ``x.kthvalue(k, dim)``: the ``k``-th smallest value along ``dim`` (from
    1) and its index, ``(values, indices)`` (``keepdim`` keeps ``dim`` as size 1)."""
    return _kth_along("kthvalue", self, int(k), dim, keepdim)


def _logit(self, eps=None):
    """PyTorch's ``x.logit(eps)``: ``log(x / (1 - x))``, ``x`` clamped to ``[eps, 1 - eps]``
    first when ``eps`` is given."""
    x = self if eps is None else binary.clip(self, eps, 1.0 - eps)
    return special.logit(x)


def _frac(self):
    """PyTorch's ``x.frac()``: ``x - trunc(x)`` (the sign of ``x``)."""
    return binary.sub(self, unary.trunc(self))


def _equal(self, other):
    """PyTorch's ``x.equal(other)``: True when the shapes and every value agree."""
    other = as_tensor(other, op="equal")
    if tuple(self.shape) != tuple(other.shape):
        return False
    return bool(reduction.all(binary.equal(self, other)).item())


def _allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """PyTorch's ``x.allclose(other, rtol, atol, equal_nan)``, a Python bool."""
    return bool(binary.allclose(self, other, rtol, atol, equal_nan))


def _index_key(self, name, dim, index):
    d = norm_axis(name, dim, self.ndim, self.shape)
    return (slice(None),) * d + (as_tensor(index, op=name),)


def _index_fill(self, dim, index, value):
    """PyTorch's ``x.index_fill(dim, index, value)``: the slices at ``index`` along
    ``dim`` set to ``value``."""
    return self.at[_index_key(self, "index_fill", dim, index)].set(value)


def _index_copy(self, dim, index, source):
    """PyTorch's ``x.index_copy(dim, index, source)``: the slices at ``index`` along
    ``dim`` replaced by ``source``'s, in order."""
    return self.at[_index_key(self, "index_copy", dim, index)].set(source)


def _nelement(self):
    """PyTorch's ``x.nelement()``: the number of elements."""
    return int(self.size)


def _ndimension(self):
    """PyTorch's ``x.ndimension()``: the number of dims."""
    return self.ndim


def _element_size(self):
    """PyTorch's ``x.element_size()``: the bytes of one element."""
    return self.dtype.itemsize


def _fill_diagonal(self, fill_value, wrap=False):
    """``x`` with ``fill_value`` on its main diagonal (PyTorch's ``fill_diagonal_``)."""
    return array_functions.fill_diagonal(self, fill_value, wrap, inplace=False)


def _compress(self, condition, axis=None, *, size=None, fill_value=0):
    """JAX's and NumPy's ``x.compress(condition, axis)``: :func:`nabla.compress` with ``x``
    as the array (JAX's ``size`` and ``fill_value`` fix the result's length)."""
    return array_functions.compress(condition, self, axis, size=size, fill_value=fill_value)


_METHODS.update(
    {
        # JAX's and NumPy's array methods beyond PyTorch's
        "copy": array_functions.copy,
        "conj": array_functions.conj,
        "conjugate": array_functions.conjugate,
        "ptp": array_functions.ptp,
        "argpartition": array_functions.argpartition,
        "choose": array_functions.choose,
        "compress": _compress,
    }
)

_METHODS.update(
    {
        "mm": _mm,
        "mv": _mv,
        "addmm": _addmm,
        "baddbmm": _baddbmm,
        "outer": linalg.outer,
        "ger": linalg.outer,
        "inner": array_functions.inner,
        "dot": linalg.dot,
        "where": _where,
        "addcmul": _addcmul,
        "addcdiv": _addcdiv,
        "addcmul_": _in_place_method(_addcmul, "addcmul_"),
        "addcdiv_": _in_place_method(_addcdiv, "addcdiv_"),
        "unflatten": _unflatten,
        "movedim": view.moveaxis,
        "swapdims": view.swap_axes,
        "new_tensor": _new_tensor,
        "new_empty": _new_filled(0),
        "median": _median,
        "kthvalue": _kthvalue,
        "logit": _logit,
        "erfinv": special.erfinv,
        "lgamma": special.gammaln,
        "digamma": special.digamma,
        "asinh": array_functions.asinh,
        "acosh": array_functions.acosh,
        "arcsinh": array_functions.asinh,
        "arccosh": array_functions.acosh,
        "frac": _frac,
        "sgn": unary.sign,
        "remainder": binary.mod,
        "floor_divide": binary.floor_div,
        "true_divide": binary.div,
        "exp2": array_functions.exp2,
        "fliplr": array_functions.fliplr,
        "rot90": array_functions.rot90,
        "count_nonzero": array_functions.count_nonzero,
        "isclose": binary.isclose,
        "allclose": _allclose,
        "equal": _equal,
        "index_fill": _index_fill,
        "index_copy": _index_copy,
        "index_fill_": _in_place_method(_index_fill, "index_fill_"),
        "index_copy_": _in_place_method(_index_copy, "index_copy_"),
        "fill_diagonal_": _in_place_method(_fill_diagonal, "fill_diagonal_"),
        "tril_": _in_place_method(creation.tril, "tril_"),
        "triu_": _in_place_method(creation.triu, "triu_"),
        "pow_": _in_place_method(binary.pow, "pow_"),
        "clamp_min_": _in_place_method(_clamp_min, "clamp_min_"),
        "clamp_max_": _in_place_method(_clamp_max, "clamp_max_"),
        "nelement": _nelement,
        "ndimension": _ndimension,
        "element_size": _element_size,
    }
)
# PyTorch's in-place forms of the elementwise functions (x.relu_(), x.exp_(), ...)
for _n in (
    "relu", "sigmoid", "exp", "log", "sqrt", "rsqrt", "tanh", "abs", "neg", "sign", "square",
    "reciprocal", "floor", "ceil", "round", "trunc", "sin", "cos", "expm1", "log1p",
):  # fmt: skip
    _METHODS.setdefault(f"{_n}_", _in_place_method(getattr(unary, _n), f"{_n}_"))


# every elementwise unary op is also a method (x.exp(), x.tanh(), ...)
for _n in unary.__all__:
    _obj = getattr(unary, _n)
    if isinstance(_obj, unary.UnaryOperation) and _n not in ("identity", "bitwise_not"):
        _METHODS.setdefault(_n, _obj)


def _bitwise(logical, bitwise, a, b):
    # a Python int stays a weak scalar (int8 & 2 is int8, as JAX), not an int32 tensor
    ta = a if isinstance(a, int) else as_tensor(a, op=bitwise.name)
    tb = b if isinstance(b, int) else as_tensor(b, op=bitwise.name)
    if _is_bool(ta) and _is_bool(tb):
        return logical(ta, tb)
    return bitwise(ta, tb)


def _is_bool(v) -> bool:
    return isinstance(v, bool) or (not isinstance(v, int) and v.dtype.is_bool)


def _as_method(fn):
    # Op singletons are callables, not functions: wrap them so attribute access binds self.
    if isinstance(fn, property | staticmethod) or type(fn).__name__ == "function":
        return fn

    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__ = getattr(fn, "name", "method")
    method.__doc__ = getattr(fn, "__doc__", None)
    return method


class _Data(Tensor):
    """``x.data``: a handle on ``x``'s value with no history whose in-place changes
    (``x.data.mul_(s)``, ``x.data[i] = v``, ``x.data.copy_(v)``) reach ``x`` as well, and
    ``x``'s reach it (an optimizer's step on a parameter whose ``.data`` is held), as
    PyTorch's ``.data`` shares storage (``indexing.rebind`` follows ``_owner``; ``x``
    watches the handle among its views)."""

    __slots__ = ("_owner",)


def _data_get(self):
    """PyTorch's ``.data``: the value without autodiff history, as a tensor whose in-place
    updates reach this one (as under ``no_grad``); ``x.data = v`` gives ``x`` the value of
    ``v`` in place."""
    handle = _Data._wrap(unary.stop_gradient(self)._impl)
    handle._owner = self
    indexing.watch(self, handle)
    return handle


def _data_set(self, value):
    indexing.rebind(self, unary.stop_gradient(as_tensor(value, op="data")))


_grad_property = Tensor.grad


def _grad_set(self, value):
    old = self._impl.grad
    if STATE.writes is not None and indexing.fits_in_place(old, value):
        # ``p.grad = g`` while ``compile`` traces (``clip_grad_norm_``): the gradient tensor
        # takes ``g``'s value in place, which the compiled function writes at every call
        indexing.rebind(old, value, item=True)
        return
    _grad_property.fset(self, value)


def install() -> None:
    """Attach the op table as ``Tensor`` methods and operators (run once, on import)."""
    for name, fn in _METHODS.items():
        setattr(Tensor, name, _as_method(fn))
    Tensor.data = property(_data_get, _data_set, doc=_data_get.__doc__)
    Tensor.grad = property(_grad_property.fget, _grad_set, doc=_grad_property.__doc__)
    Tensor.__hash__ = object.__hash__


install()


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - PyTorch's names
    """``torch.topk``: the ``k`` largest (``largest=False``: smallest) values along ``dim``
    and their indices, as ``(values, indices)``; :func:`nabla.top_k` is JAX's form.

    Args:
        input: a tensor.
        k: how many.
        dim: the dim (default the last).
        largest: the largest (True) or the smallest.
        sorted: PyTorch's flag; the values come sorted either way.

    Returns:
        A ``(values, indices)`` pair.
    """
    return _topk(as_tensor(input, op="topk"), k, dim, largest, sorted)


def index_select(input, dim, index):  # noqa: A002 - PyTorch's name
    """``torch.index_select``: the slices of ``input`` at the 1-D ``index`` along ``dim``.

    Args:
        input: a tensor.
        dim: the dim to select along.
        index: 1-D integer indices (a 0-d one keeps the dim, as PyTorch).

    Returns:
        A tensor with ``dim`` of ``index``'s length.
    """
    return _index_select(as_tensor(input, op="index_select"), dim, index)
