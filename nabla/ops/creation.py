"""Creation ops: constants, ``full``, ``arange`` and what is built from them."""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np

from ..core.config import CONFIG
from ..core.device import Device, get_default_device
from ..core.dtypes import DType, from_numpy_dtype, get_default_dtype, to_dtype
from ..core.ir import SymDim, note_size_decision, range_length
from ..runtime.tensor import (
    Tensor,
    TensorImpl,
    constant_impl,
    int_range,
    numpy_value,
    out_of_range_error,
)
from . import batching, spmd
from ._util import (
    alias_arg,
    as_tensor,
    concrete_int,
    device_arg,
    dtype_or,
    int_arg,
    norm_axis,
    norm_shape,
)
from .base import Operation, OpError
from .functions import fn, provide

__all__ = [
    "constant",
    "asarray",
    "full",
    "zeros",
    "ones",
    "zeros_like",
    "ones_like",
    "full_like",
    "arange",
    "eye",
    "linspace",
    "triu",
    "tril",
    "hann_window",
    "from_dlpack",
    "tensor",
    "from_numpy",
    "empty",
    "empty_like",
    "identity",
    "tri",
    "triu_indices",
    "tril_indices",
]


def constant(
    value, *, dtype=None, device: Device | None = None, requires_grad: bool = False
) -> Tensor:
    """Make a realized tensor from a Python value or NumPy array.

    Python ``bool`` -> bool, ``int`` -> int32, ``float`` -> the default float dtype (float32);
    a NumPy array keeps its dtype, and so do nested lists of NumPy scalars of one dtype.

    Args:
        value: a Python scalar, nested list of them, NumPy array or tensor (a tensor is
            returned unchanged when ``dtype`` and ``device`` are None). Tensors, alone or
            inside nested lists, stay in the graph (cast, moved or stacked, as
            ``jnp.asarray`` does), so gradients flow through them; numbers beside them take
            their dtype.
        dtype: the dtype to convert to (a ``DType``, NumPy dtype, Python type or name);
            default: inferred as above.
        device: the device to place it on (default: :func:`nabla.get_default_device`).
        requires_grad: make it a leaf whose gradient ``backward`` accumulates (PyTorch's
            ``torch.tensor(data, requires_grad=True)``); a tensor ``value`` is copied
            without its history first.

    Returns:
        A tensor: realized, unless built from tensors.

    Raises:
        TypeError: for values of other kinds (strings, objects) or an unknown ``dtype``.
        ValueError: for ragged nested lists.
        OverflowError: for a Python int that the integer dtype (int32 by default) cannot
            hold; the message names the value and the dtype's range.

    Example:
        >>> nb.constant([[1.0, 2.0]]).shape
        (1, 2)
    """
    return _constant(value, dtype, device, requires_grad, "constant")


def _constant(value, dtype, device, requires_grad: bool, op: str) -> Tensor:
    """:func:`constant`, called as op ``op`` (its errors name ``op``)."""
    if requires_grad:
        if isinstance(value, Tensor):  # a new leaf: the caller's tensor keeps its flags
            value = fn.stop_gradient(value)
        return _leaf(constant_for(value, dtype, device, op))
    if isinstance(value, Tensor) and dtype is None and device is None:
        return value
    return constant_for(value, dtype, device, op)


def tensor(data, *, dtype=None, device: Device | None = None, requires_grad: bool = False):
    """PyTorch's ``torch.tensor``: :func:`constant` (a copy of ``data``).

    Args:
        data: a Python scalar, nested list, NumPy array or tensor (copied without its
            history, as PyTorch's: a new tensor whose in-place changes leave ``data`` as it
            is).
        dtype: the dtype (default: inferred, as :func:`constant`).
        device: the device (default: :func:`nabla.get_default_device`).
        requires_grad: make it a leaf whose gradient ``backward`` accumulates.

    Returns:
        A new tensor.
    """
    if isinstance(data, Tensor) and not requires_grad:
        copy = fn.stop_gradient(data)
        data = Tensor._wrap(copy._impl) if copy is data else copy
        if dtype is None and device is None:
            return data
    return _constant(data, dtype, device, requires_grad, "tensor")


def from_numpy(a) -> Tensor:
    """PyTorch's ``torch.from_numpy``: a tensor of the NumPy array ``a`` (copied: a tensor's
    value is read-only here, so it never shares the array's memory; ``nb.from_dlpack`` of a
    contiguous array is zero-copy).

    Args:
        a: a NumPy array.

    Returns:
        A tensor of its dtype and shape.
    """
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected a NumPy array, got {type(a).__name__}")
    return constant(a)


def _leaf(t: Tensor, requires_grad: bool = True) -> Tensor:
    """``t`` made a leaf that requires grad (PyTorch's ``requires_grad=True`` on a creation
    function); an integer one is the ``TypeError`` of ``requires_grad``'s setter."""
    if requires_grad:
        t.requires_grad = True
    return t


def constant_for(value, dtype, device, op: str) -> Tensor:
    """:func:`constant` for an argument of op ``op``: conversion errors name ``op``.

    A tensor, or a nested list holding tensors, stays in the graph (cast, moved or stacked),
    as ``jnp.asarray`` does: its gradient flows and it works under ``vmap``."""
    device = device_arg(op, device)
    if isinstance(value, Tensor) or (isinstance(value, list | tuple) and _holds_tensor(value)):
        return _from_tensors(value, None if dtype is None else to_dtype(dtype, op), device, op)
    if isinstance(value, SymDim):  # a dynamic size as a value: computed at each call's size
        return full((), value, dtype=dtype or DType.int32, device=device)
    return Tensor._wrap(constant_impl(value, dtype, device, op))  # _wrap sets impl.wrapper


def _holds_tensor(value) -> bool:
    if isinstance(value, Tensor):
        return True
    return isinstance(value, list | tuple) and any(_holds_tensor(v) for v in value)


def _first_tensor_dtype(value):
    if isinstance(value, Tensor):
        return value.dtype
    for v in value:
        if isinstance(v, Tensor | list | tuple) and (d := _first_tensor_dtype(v)) is not None:
            return d
    return None


def _weak(number, like):
    """The dtype a Python number beside tensors of dtype ``like`` takes: ``like`` when it
    can hold the number exactly as a kind (ints in int tensors, numbers in float tensors)."""
    if like is None or isinstance(number, bool | np.bool_):
        return None
    if like.is_float and _is_number(number):
        return like
    if like.is_int and isinstance(number, int | np.integer):
        return like
    return None


def _from_tensors(value, dtype, device, op) -> Tensor:
    """``value`` (a tensor or a nested list mixing tensors and numbers) as one tensor built
    from graph ops. Numbers take the first tensor's dtype (JAX's weak typing)."""

    def build(v, like):
        if isinstance(v, Tensor):
            return v
        if isinstance(v, list | tuple):
            parts = [build(e, like) for e in v]
            if not parts:
                raise ValueError(f"{op}: cannot mix tensors with an empty list")
            shapes = {p.shape for p in parts}
            if len(shapes) > 1:
                got = [p.shape for p in parts]
                raise ValueError(f"{op}: cannot make a tensor from a ragged list: shapes {got}")
            return fn.stack(parts)
        return constant_for(v, _weak(v, like), device, op)

    t = build(value, _first_tensor_dtype(value))
    if dtype is not None and t.dtype is not dtype:
        t = t.cast(dtype)
    if device is not None and t.device != device:
        t = t.to(device)
    return t


def asarray(value, dtype=None, *, device=None, copy=None) -> Tensor:
    """Like :func:`constant`, but returns a Tensor argument unchanged (cast if ``dtype``).

    Args:
        value: a tensor, Python scalar, nested list or NumPy array.
        dtype: optional dtype to convert to; default: ``value``'s (inferred as in
            :func:`constant` for non-tensors).
        device: the device for a new tensor (default: :func:`nabla.get_default_device`);
            ignored when ``value`` is already a tensor.
        copy: NumPy's and JAX's keyword: None or True take a copy of a host array (as
            always: tensors are values); False, which promises none, is refused for
            anything but a tensor of the dtype asked for (:func:`from_dlpack` shares an
            array's memory).

    Returns:
        A tensor.

    Raises:
        ValueError: for ``copy=False`` where a copy is needed.
    """
    if copy is False and not (
        isinstance(value, Tensor) and (dtype is None or value.dtype is to_dtype(dtype, "asarray"))
    ):
        raise ValueError(
            f"asarray: copy=False, but a {type(value).__name__} is copied into a tensor "
            "(nb.from_dlpack shares an array's memory)"
        )
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype is not to_dtype(dtype, "asarray"):
            return value.cast(dtype)
        return value
    return _constant(value, dtype, device, False, "asarray")


def from_dlpack(x) -> Tensor:
    """A tensor from any object exporting DLPack (a NumPy array, a torch CPU tensor, ...),
    sharing its memory (unlike :func:`constant`, which copies). A write to the producer's
    array shows in this tensor, and in lazy results computed from it that have not been
    computed yet; ``clone()``, ``nb.copy``, ``copy.copy``/``deepcopy`` and
    ``load_state_dict`` copy the memory at the call (as PyTorch's), so they keep the value
    they were given.

    Args:
        x: an object with ``__dlpack__`` (a tensor of ours too).

    Returns:
        A tensor sharing ``x``'s memory (on the host; moved, so copied, when the default
        device is an accelerator).

    Raises:
        TypeError: for an object without ``__dlpack__``, or when NumPy cannot import
            ``x``'s dtype through DLPack (bfloat16): ``nb.constant(x)`` copies it instead.
    """
    if not hasattr(x, "__dlpack__"):
        raise TypeError(
            f"from_dlpack: expects an object exporting DLPack (with __dlpack__), got "
            f"{type(x).__name__}; nb.constant(x) copies other values"
        )
    try:
        arr = np.from_dlpack(x)
    except (RuntimeError, BufferError):
        if "bfloat16" in str(getattr(x, "dtype", "")):
            raise TypeError(
                f"from_dlpack: NumPy cannot import bfloat16 through DLPack (shape "
                f"{tuple(getattr(x, 'shape', ()))}); nb.constant(x) copies it"
            ) from None
        raise
    device = get_default_device()
    if not device.is_cpu:
        return constant(arr)  # moved: a copy
    return Tensor._wrap(TensorImpl(arr.shape, from_numpy_dtype(arr.dtype), device, buffer=arr))


class FullOp(Operation):
    name = "full"
    arity = 0

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.elementwise_rule([], out_shapes)  # no operands: never sharded by an op

    def infer(self, shapes, dtypes, kwargs):
        return [kwargs["shape"]], [kwargs["dtype"]]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return []

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [None]


class IotaOp(Operation):
    """``arange(start, stop, step)`` with a static length."""

    name = "arange"
    arity = 0
    differentiable = False

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.elementwise_rule([], out_shapes)  # no operands: never sharded by an op

    def infer(self, shapes, dtypes, kwargs):
        return [(kwargs["length"],)], [kwargs["dtype"]]


_full = FullOp()
_iota = IotaOp()


def _scalar_value(value, dtype: DType, op: str = "full"):
    if isinstance(value, SymDim) and not dtype.is_bool:
        if not (dtype.is_int and dtype.itemsize <= 2):
            return value  # a dynamic size under compile: evaluated at each call's sizes
        # an int8/int16 may not hold it at another size (eagerly an OverflowError): this
        # trace serves its own size, which is checked as any number is below
        note_size_decision(value, f"a size as a {dtype.value} value")
    if dtype.is_bool:
        return bool(value)
    if dtype.is_int:
        if isinstance(value, float | np.floating) and not math.isfinite(value):
            raise ValueError(f"{op}: cannot fill {dtype.value} with {float(value)}")
        value = int(value)
        lo, hi = int_range(dtype)
        if not lo <= value <= hi:
            raise out_of_range_error(op, value, dtype)
        return value
    return float(value)


def _full_of_array(shape, value, dtype, device) -> Tensor:
    """``full`` with a tensor or array value: the value broadcast to ``shape`` (so a traced
    value stays differentiable, as in JAX)."""
    dtype = None if dtype is None else to_dtype(dtype, "full")
    if not isinstance(value, Tensor):
        value = constant_for(value, dtype, device, "full")
    elif dtype is not None:
        value = value.cast(dtype)
    if fn.broadcast_shapes("full", value.shape, shape) != shape:
        raise OpError(f"full: a value of shape {value.shape} does not broadcast to shape {shape}")
    return fn.broadcast_to(value, shape)


def full(shape, value, dtype=None, *, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``shape`` filled with ``value``.

    Args:
        shape: int or tuple of ints.
        value: the fill value: a Python scalar, or a tensor or array that broadcasts to
            ``shape`` (differentiable when a tensor).
        dtype: the dtype; default inferred from ``value`` (bool, int32 or the default float
            for a Python scalar, its own dtype for a tensor or array).
        device: the device to place it on (default: :func:`nabla.get_default_device`).
        requires_grad: make it a leaf whose gradient ``backward`` accumulates (PyTorch's).

    Returns:
        A tensor of ``shape``.

    Raises:
        TypeError: if ``shape`` is not an int or a sequence of ints.
        ValueError: for a negative dim, or a result larger than the memory bound
            (``NABLA_MAX_ALLOC_BYTES``, default: the smallest of physical memory and the
            process's memory limits).
        OverflowError: for an int ``value`` out of the integer dtype's range.

    Example:
        >>> nb.full((2, 3), 7, dtype=nb.int32).tolist()
        [[7, 7, 7], [7, 7, 7]]
    """
    shape = norm_shape("full", shape)
    dev = device_arg("full", device) or get_default_device()
    if isinstance(value, Tensor) or (not isinstance(value, SymDim) and np.ndim(value) > 0):
        out = _full_of_array(shape, value, dtype, dev)
        return _leaf(fn.stop_gradient(out)) if requires_grad else out
    if dtype is None:
        dtype = from_numpy_dtype(numpy_value(value, None, "full").dtype)
    dtype = to_dtype(dtype, "full")
    out = _full.bind(
        [], {"shape": shape, "value": _scalar_value(value, dtype), "dtype": dtype, "device": dev}
    )
    return _leaf(out, requires_grad)


_FILLED_DOC = """A tensor of ``shape`` filled with {what}.

    Args:
        shape: int or tuple of ints.
        sizes: PyTorch's form: the sizes one by one after the first (``{what}(3, 4)``).
        dtype: the dtype (default: :func:`nabla.get_default_dtype`); also positional, after
            the shape, as NumPy and JAX.
        device: the device to place it on (default: :func:`nabla.get_default_device`).
        requires_grad: make it a leaf whose gradient ``backward`` accumulates (PyTorch's).

    Returns:
        A tensor of ``shape``.
    """


def zeros(shape, *sizes, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _filled("zeros", 0, shape, sizes, dtype, device, requires_grad)


def ones(shape, *sizes, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _filled("ones", 1, shape, sizes, dtype, device, requires_grad)


def _filled(op: str, value, shape, sizes, dtype, device, requires_grad) -> Tensor:
    """``zeros``/``ones``/``empty`` (``op``): ``full`` of ``value`` in the default float
    dtype."""
    shape, dtype = _shape_and_dtype(shape, sizes, dtype)
    shape = norm_shape(op, shape)  # (its errors name op, not the full below)
    device = device_arg(op, device)
    dtype = dtype_or(dtype, get_default_dtype(), op)
    return full(shape, value, dtype=dtype, device=device, requires_grad=requires_grad)


def _shape_and_dtype(shape, sizes: tuple, dtype):
    """``zeros``/``ones``'s positional arguments: ``(shape, dtype)`` as NumPy and JAX give
    them, or PyTorch's sizes one by one (``zeros(3, 4)``; a trailing dtype after them too)."""
    if not sizes:
        return shape, dtype
    if not isinstance(sizes[-1], numbers.Integral) or isinstance(sizes[-1], bool):
        if dtype is not None:
            raise TypeError("pass the dtype once (positionally or as dtype=)")
        *sizes, dtype = sizes
    if not sizes:
        return shape, dtype
    if not isinstance(shape, numbers.Integral) or isinstance(shape, bool):
        raise TypeError(
            f"a shape and then sizes {tuple(sizes)}: give the shape as one tuple, or the sizes "
            "one by one (zeros(3, 4))"
        )
    return (shape, *sizes), dtype


# one text for the pair, the fill named per function
zeros.__doc__ = _FILLED_DOC.format(what="zeros")
ones.__doc__ = _FILLED_DOC.format(what="ones")


def _like(x, dtype, op):
    x = as_tensor(x, op=op)
    return x, dtype_or(dtype, x.dtype, op)


def zeros_like(x, *, dtype=None, shape=None, requires_grad: bool = False) -> Tensor:
    """Zeros with the shape (and dtype) of ``x``; batched like ``x`` under vmap, and laid
    out like it on its mesh.

    Args:
        x: the tensor whose shape (and dtype) to take.
        dtype: the dtype (default: ``x``'s).
        shape: another shape (JAX's), instead of ``x``'s.
        requires_grad: make it a leaf whose gradient ``backward`` accumulates (PyTorch's).
    """
    x, dt = _like(x, dtype, "zeros_like")
    if shape is not None:  # (JAX's: a new shape, so nothing of x's layout or batching)
        return _leaf(full(shape, 0, dtype=dt, device=x.device), requires_grad)
    out = _broadcast_like(full(x.shape, 0, dtype=dt, device=x.device), x)
    return _leaf(out, requires_grad)


def ones_like(x, *, dtype=None, shape=None, requires_grad: bool = False) -> Tensor:
    """Ones with the shape (and dtype) of ``x`` (batched and laid out like it).

    Args:
        x: the tensor whose shape (and dtype) to take.
        dtype: the dtype (default: ``x``'s).
        shape: another shape (JAX's), instead of ``x``'s.
        requires_grad: make it a leaf whose gradient ``backward`` accumulates (PyTorch's).
    """
    x, dt = _like(x, dtype, "ones_like")
    if shape is not None:  # (JAX's: a new shape, so nothing of x's layout or batching)
        return _leaf(full(shape, 1, dtype=dt, device=x.device), requires_grad)
    out = _broadcast_like(full(x.shape, 1, dtype=dt, device=x.device), x)
    return _leaf(out, requires_grad)


def full_like(x, value, *, dtype=None, shape=None, requires_grad: bool = False) -> Tensor:
    """``value`` with the shape (and dtype) of ``x`` (batched and laid out like it).

    Args:
        x: the tensor whose shape (and dtype) to take.
        value: the fill value.
        dtype: the dtype (default: ``x``'s).
        shape: another shape (JAX's), instead of ``x``'s.
        requires_grad: make it a leaf whose gradient ``backward`` accumulates (PyTorch's).
    """
    x, dt = _like(x, dtype, "full_like")
    if shape is not None:  # (JAX's: a new shape, so nothing of x's layout or batching)
        shape = norm_shape("full_like", shape)  # (its errors name full_like, not full)
        return _leaf(full(shape, value, dtype=dt, device=x.device), requires_grad)
    out = _broadcast_like(full(x.shape, value, dtype=dt, device=x.device), x)
    return _leaf(out, requires_grad)


def _broadcast_like(t: Tensor, like: Tensor) -> Tensor:
    # A *_like result carries the same vmap levels as its template (JAX: batched like x),
    # and its layout on a mesh (JAX's: ``zeros_like`` keeps the sharding), without the
    # template's partial terms (a constant has none)
    if like._impl.levels:
        return batching.broadcast_levels(t, like._impl.levels)
    s = like._impl.sharding
    if s is not None:
        return spmd.reshard_to(t, s.with_partial(()) if s.partial else s)
    return t


def arange(start=0, stop=None, step=1, dtype=None, *, device=None, requires_grad=False) -> Tensor:
    """Evenly spaced values in ``[start, stop)`` (NumPy's ``arange``).

    ``arange(n)`` counts from 0 to ``n - 1``. Integers give int32 unless ``dtype`` is set; any
    float argument gives the default float dtype.

    Args:
        start: the first value (or, with ``stop`` None, the end and the start is 0).
        stop: the end (exclusive).
        step: the spacing (default 1; may be negative, not zero).
        dtype: the dtype (default: as above).
        device: the device to place it on (default: :func:`nabla.get_default_device`).
        requires_grad: make it a leaf whose gradient ``backward`` accumulates (PyTorch's).

    Returns:
        A 1-D tensor of ``max(0, ceil((stop - start) / step))`` values.

    Raises:
        ValueError: if ``step`` is zero, or a bound or the step is NaN or infinite.

    Example:
        >>> nb.arange(1, 2, 0.25).tolist()
        [1.0, 1.25, 1.5, 1.75]
    """
    if stop is None:
        start, stop = 0, start
    vals = [start, stop, step]
    if any(isinstance(v, Tensor) for v in vals):
        vals = [v.item() if isinstance(v, Tensor) else v for v in vals]
        start, stop, step = vals
    for name, v in zip(("start", "stop", "step"), vals):
        if not isinstance(v, numbers.Real | SymDim):
            raise TypeError(
                f"arange: {name} must be a real number, got {v!r} ({type(v).__name__}) "
                f"(start={start!r}, stop={stop!r}, step={step!r})"
            )
    if step == 0:
        raise ValueError(f"arange: step must not be zero (start={start}, stop={stop}, step=0)")
    if any(not isinstance(v, SymDim) and not math.isfinite(v) for v in vals):
        raise ValueError(
            f"arange: start, stop and step must be finite, got start={start}, stop={stop}, "
            f"step={step} (the length cannot be computed)"
        )
    if dtype is None:
        # NumPy float scalars count as floats (np.float32(1.5) is no Python float)
        floats = any(isinstance(v, float | np.floating) for v in vals)
        dtype = get_default_dtype() if floats else DType.int32
    dtype = to_dtype(dtype, "arange")
    exact = not isinstance(start, SymDim) and not isinstance(stop, SymDim)
    count = max(0, math.ceil((stop - start) / step)) if exact else 0
    if dtype.is_int and exact and not all(float(v).is_integer() for v in (start, step)):
        # NumPy's (and JAX's, PyTorch's) integer range of float bounds: the length from the
        # float bounds, the values from the first two truncated (0, 2, 0.5 -> 0, 0, 0, 0)
        first = int(start)
        start, step = first, int(start + step) - first
    # (a range too long to allocate is the size check's error, at the bind)
    if dtype.is_int and exact and count * dtype.itemsize <= CONFIG.max_alloc_bytes:
        lo, hi = int_range(dtype)
        last = start + (count - 1) * step
        for v in (start, last) if count else ():
            if not lo <= v <= hi:
                raise OverflowError(
                    f"arange: the value {v} (start={start}, stop={stop}, step={step}) is out "
                    f"of range for {dtype.value}"
                    + ("; pass dtype=nb.int64" if lo >= -(2**31) and hi < 2**63 - 1 else "")
                )
    if isinstance(start, SymDim) or isinstance(stop, SymDim):  # a size under compile
        step = int(step)
        length = range_length(start, stop, step)
    else:
        length = count
    if dtype.is_bool and not (isinstance(length, int) and length <= 2):
        raise TypeError(  # (as NumPy: a bool range has at most False and True)
            f"arange: dtype bool holds a range of at most 2 values, got {length} "
            f"(start={start}, stop={stop}, step={step})"
        )
    dev = device_arg("arange", device) or get_default_device()
    out = _iota.bind(
        [], {"start": start, "step": step, "length": length, "dtype": dtype, "device": dev}
    )
    return _leaf(out, requires_grad)


def linspace(
    start,
    stop,
    num=50,
    endpoint=True,
    retstep=False,
    dtype=None,
    axis=0,
    *,
    device=None,
    steps=None,
):
    """``num`` evenly spaced values from ``start`` to ``stop`` (NumPy's ``linspace``).

    Args:
        start: the first value: a number, or an array/tensor for one sequence per element
            (broadcast against ``stop``; differentiable when a tensor).
        stop: the last value (included when ``endpoint``).
        num: the number of values (default 50).
        endpoint: include ``stop`` (default True); otherwise the spacing is
            ``(stop - start) / num``.
        retstep: also return the spacing, as JAX does (NaN when there is no spacing: ``num``
            below 2 with ``endpoint``, or 0).
        dtype: the dtype (default: :func:`nabla.get_default_dtype`); values are computed in
            float and cast.
        axis: where the ``num`` axis goes when ``start``/``stop`` are arrays (default 0).
        device: the device to place it on (default: :func:`nabla.get_default_device`).
        steps: PyTorch's name for ``num`` (``torch.linspace(start, end, steps)``).

    Returns:
        A tensor of shape ``(num,)`` for number bounds, else ``num`` inserted at ``axis`` in
        their broadcast shape; with ``retstep``, the pair ``(values, step)``.

    Raises:
        ValueError: if ``num`` is negative.
        TypeError: if ``num`` is not an int.
        IndexError: if ``axis`` is out of range.
        OpError: if ``start`` and ``stop`` do not broadcast.

    Example:
        >>> nb.linspace(0, 1, 5).tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    if steps is not None and num != 50:  # (50: the default, not told from an argument)
        raise TypeError("linspace: pass num or steps, not both")
    num = num if steps is None else steps
    if not isinstance(num, SymDim):
        num = int_arg("linspace", "num", num)
    if num < 0:
        raise ValueError(f"linspace: num must be non-negative, got {num}")
    dtype = dtype_or(dtype, get_default_dtype(), "linspace")
    # integers from float64 points, as NumPy and PyTorch (float32 lost int64 ends: 2**40 + 1
    # came out 2**40)
    work = DType.float64 if dtype is DType.float64 or dtype.is_int else DType.float32
    if isinstance(num, SymDim):  # the step and the ends' fixes are numbers of the size
        note_size_decision(num, "linspace's number of values")
    spacing = _Spacing(num, (num - 1) if endpoint else num, endpoint, retstep, dtype, work, device)
    if _is_number(start) and _is_number(stop):
        return _linspace_numbers(start, stop, spacing)
    return _linspace_arrays(start, stop, spacing, axis)


class _Spacing(NamedTuple):
    """``linspace``'s points, whatever its bounds: ``num`` of them, ``div`` steps from
    start to stop (``stop`` itself the last point with ``endpoint``), computed in ``work``
    and returned as ``dtype`` on ``device`` (with the step when ``retstep``)."""

    num: int
    div: int
    endpoint: bool
    retstep: bool
    dtype: DType
    work: DType
    device: Device | None


def _is_number(v) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)


def _as_dtype(out, sp: _Spacing):
    """The float values in ``sp.dtype``; for an integer dtype rounded toward -inf first, as
    NumPy (2.0 on) and JAX do (a cast truncates toward 0: -6.67 gave -6, not -7)."""
    return (fn.floor(out) if sp.dtype.is_int else out).cast(sp.dtype)


def _linspace_numbers(start, stop, sp: _Spacing):
    """``linspace`` with number bounds: one sequence."""
    step = (stop - start) / sp.div if sp.div > 0 else 0.0
    idx = arange(sp.num, dtype=sp.work, device=sp.device)
    out = idx * step + start
    if sp.endpoint and sp.num > 1:
        last = full((sp.num,), stop, dtype=out.dtype, device=sp.device)
        out = fn.where(idx == (sp.num - 1), last, out)
    if sp.retstep:
        spacing = step if sp.div > 0 else math.nan
        return _as_dtype(out, sp), constant(spacing, dtype=sp.work, device=sp.device).cast(sp.dtype)
    return _as_dtype(out, sp)


def _linspace_arrays(start, stop, sp: _Spacing, axis):
    """``linspace`` with array/tensor bounds: one sequence per element of their broadcast,
    along a new leading axis that is then moved to ``axis``."""
    start, stop = (
        v.cast(sp.work)
        if isinstance(v, Tensor)
        else constant_for(v, sp.work, sp.device, "linspace")
        for v in (start, stop)
    )
    shape = fn.broadcast_shapes("linspace", start.shape, stop.shape)
    axis = norm_axis("linspace", axis, len(shape) + 1)
    step = (stop - start) / sp.div if sp.div > 0 else full_like(stop - start, math.nan)
    idx = arange(sp.num, dtype=sp.work, device=sp.device).reshape((sp.num,) + (1,) * len(shape))
    out = idx * step + start
    if sp.endpoint and sp.num > 1:
        out = fn.where(idx == (sp.num - 1), stop, out)
    out = _as_dtype(fn.moveaxis(fn.broadcast_to(out, (sp.num, *shape)), 0, axis), sp)
    return (out, fn.broadcast_to(step, shape).cast(sp.dtype)) if sp.retstep else out


def eye(n, m=None, k=0, dtype=None, *, device=None, requires_grad=False) -> Tensor:
    """A 2-D tensor with ones on the ``k``-th diagonal and zeros elsewhere (NumPy's ``eye``).

    Args:
        n: the number of rows.
        m: the number of columns (default ``n``).
        k: the diagonal: 0 (default) the main one, positive above it, negative below.
        dtype: the dtype (default: :func:`nabla.get_default_dtype`).
        device: the device to place it on (default: :func:`nabla.get_default_device`).
        requires_grad: make it a leaf whose gradient ``backward`` accumulates (PyTorch's).

    Returns:
        A tensor of shape ``(n, m)``.

    Raises:
        ValueError: for an ``n`` or ``m`` that is not a non-negative int.
        TypeError: for a ``k`` that is not an int.
    """
    n = concrete_int(n)
    m = n if m is None else concrete_int(m)
    k = int_arg("eye", "k", k)
    for name, v in (("n", n), ("m", m)):
        if not isinstance(v, int | np.integer) or v < 0:
            raise ValueError(f"eye: {name} must be a non-negative int, got {v!r} (n={n}, m={m})")
    dtype = dtype_or(dtype, get_default_dtype(), "eye")
    rows = arange(n, device=device).reshape((n, 1))
    cols = arange(m, device=device).reshape((1, m))
    return _leaf(((cols - rows) == k).cast(dtype), requires_grad)


def _triangle(x, k, upper):
    """``triu`` (``upper``) or ``tril`` of ``x``: the other elements zeroed."""
    op = "triu" if upper else "tril"
    k = int_arg(op, "k", k)
    x = as_tensor(x, op=op)
    if x.ndim < 2:
        raise OpError(f"{op}: needs rank >= 2, got shape {x.shape}")
    n, m = x.shape[-2:]
    rows = arange(n, device=x.device).reshape((n, 1))
    cols = arange(m, device=x.device).reshape((1, m))
    keep = (cols - rows) >= k if upper else (cols - rows) <= k
    return fn.where(keep, x, zeros_like(x))


_TRIANGLE_DOC = """\
{Side} triangle of the last two dims (elements {beyond} the ``k``-th diagonal zeroed).

    Args:
        x: a tensor (or nested list / NumPy array) of rank >= 2; leading dims are batch dims.
        k: the diagonal: 0 (default) the main one, positive above it, negative below.
        diagonal: PyTorch's name for ``k``.

    Returns:
        A tensor of ``x``'s shape and dtype (NumPy's ``{name}``).

    Raises:
        ValueError: (:class:`nabla.OpError`) if ``x`` has rank < 2.
        TypeError: for a ``k`` that is not an int.
    """


def triu(x, k: int = 0, *, diagonal: int | None = None) -> Tensor:
    return _triangle(x, alias_arg("triu", "k", k or None, "diagonal", diagonal) or 0, upper=True)


def tril(x, k: int = 0, *, diagonal: int | None = None) -> Tensor:
    return _triangle(x, alias_arg("tril", "k", k or None, "diagonal", diagonal) or 0, upper=False)


# one text for the pair, its words filled in per side
triu.__doc__ = _TRIANGLE_DOC.format(Side="Upper", beyond="below", name="triu")
tril.__doc__ = _TRIANGLE_DOC.format(Side="Lower", beyond="above", name="tril")


def hann_window(window_length: int, periodic: bool = True, *, dtype=None, device=None) -> Tensor:
    """Hann window ``0.5 - 0.5 * cos(2 pi n / N)`` (PyTorch's ``hann_window``).

    Args:
        window_length: the number of samples (0 or 1 give ``ones((window_length,))``).
        periodic: True (default) for spectral analysis (``N = window_length``, the window
            of length ``window_length + 1`` without its last sample); False for the
            symmetric window (``N = window_length - 1``).
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`).
        device: the device to place it on (default: :func:`nabla.get_default_device`).

    Returns:
        A 1-D tensor of ``window_length`` values.

    Raises:
        TypeError: for a dtype that is not floating point (as PyTorch's).
        ValueError: for a negative ``window_length``.
    """

    if isinstance(window_length, SymDim):  # its step and the one-sample case are numbers
        note_size_decision(window_length, "hann_window's length")
    dtype = dtype_or(dtype, get_default_dtype(), "hann_window")
    if not dtype.is_float:  # (as PyTorch's: an integer window would be all zeros)
        raise TypeError(f"hann_window: dtype must be a float dtype, got {dtype.value}")
    if window_length < 0:
        raise ValueError(f"hann_window: window_length must be >= 0, got {window_length}")
    if window_length <= 1:
        return ones((window_length,), dtype=dtype, device=device)
    n = arange(window_length, dtype=dtype, device=device)
    denom = window_length if periodic else window_length - 1
    return 0.5 - 0.5 * fn.cos(n * (2.0 * math.pi / denom))


def empty(shape, *sizes, dtype=None, device=None) -> Tensor:
    """Zeros (NumPy's, JAX's and PyTorch's ``empty``: a tensor's memory is never left
    uninitialized here, as JAX's is not).

    Args:
        shape: an int or a sequence of ints (or several ints, PyTorch's form).
        *sizes: more sizes after an int ``shape``.
        dtype: the dtype (default: the default float dtype).
        device: the device (default: :func:`nabla.get_default_device`).

    Returns:
        A tensor of zeros.
    """
    return _filled("empty", 0, shape, sizes, dtype, device, False)


def empty_like(x, dtype=None, shape=None) -> Tensor:
    """Zeros like ``x`` (NumPy's, JAX's and PyTorch's ``empty_like``).

    Args:
        x: the tensor whose shape (and dtype) to take.
        dtype: the dtype (default: ``x``'s).
        shape: another shape (JAX's and NumPy's keyword; default: ``x``'s).

    Returns:
        A tensor of zeros.
    """
    if shape is None:
        return zeros_like(x, dtype=dtype)
    x = as_tensor(x, op="empty_like")
    dtype = dtype_or(dtype, x.dtype, "empty_like")
    return _filled("empty_like", 0, shape, (), dtype, x.device, False)


def identity(n, dtype=None, *, device=None) -> Tensor:
    """The ``n x n`` identity matrix (NumPy's and JAX's ``identity``).

    Args:
        n: the size.
        dtype: the dtype (default: the default float dtype).
        device: the device (default: :func:`nabla.get_default_device`).

    Returns:
        A 2-D tensor.
    """
    return eye(n, dtype=dtype, device=device)


def tri(n, m=None, k: int = 0, dtype=None, *, device=None) -> Tensor:
    """Ones on and below diagonal ``k`` of an ``n x m`` matrix (NumPy's and JAX's ``tri``).

    Args:
        n: the rows.
        m: the columns (default ``n``).
        k: the diagonal (0 main, > 0 above, < 0 below).
        dtype: the dtype (default: the default float dtype).
        device: the device (default: :func:`nabla.get_default_device`).

    Returns:
        A 2-D tensor.
    """
    return tril(ones((n, n if m is None else m), dtype=dtype, device=device), k)


def _indices(name: str, picker, n, k, m) -> tuple:
    n = int_arg(name, "n", n)
    m = n if m is None else int_arg(name, "m", m)
    rows, cols = picker(n, int_arg(name, "k", k), m)
    return constant(rows.astype(np.int32)), constant(cols.astype(np.int32))


def triu_indices(n, k: int = 0, m=None) -> tuple:
    """The row and column indices of the upper triangle of an ``n x m`` matrix, on and
    above diagonal ``k`` (NumPy's and JAX's ``triu_indices``; constants: the sizes are
    Python ints).

    Args:
        n: the rows.
        k: the diagonal offset.
        m: the columns (default ``n``).

    Returns:
        A pair of 1-D int32 tensors.
    """
    return _indices("triu_indices", np.triu_indices, n, k, m)


def tril_indices(n, k: int = 0, m=None) -> tuple:
    """The row and column indices of the lower triangle of an ``n x m`` matrix, on and
    below diagonal ``k`` (NumPy's and JAX's ``tril_indices``).

    Args:
        n: the rows.
        k: the diagonal offset.
        m: the columns (default ``n``).

    Returns:
        A pair of 1-D int32 tensors.
    """
    return _indices("tril_indices", np.tril_indices, n, k, m)


# (``identity`` is also the unary op compile traces arguments with: fn keeps that one)
provide(globals(), [*(n for n in __all__ if n != "identity"), "constant_for"])
