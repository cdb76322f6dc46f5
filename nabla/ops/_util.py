"""Argument normalization shared by ops: tensors from Python values, axes, shapes."""

from __future__ import annotations

import numbers
import textwrap

import numpy as np

from ..backends import max_backend
from ..core.device import device_like
from ..core.dtypes import DType, to_dtype
from ..core.ir import as_dim
from ..core.state import STATE
from ..runtime.tensor import Tensor
from .functions import fn

__all__ = [
    "as_tensor",
    "norm_axis",
    "norm_axes",
    "norm_shape",
    "is_scalar",
    "readable_now",
    "dtype_or",
    "alias_arg",
    "doc_paragraph",
]


def is_scalar(x) -> bool:
    """Whether ``x`` is a Python or NumPy scalar (not an array)."""
    return isinstance(x, numbers.Number | np.bool_) and not isinstance(x, np.ndarray)


def readable_now(t: Tensor) -> bool:
    """Whether ``t``'s value can be read at the call (to check it, or to take it as a Python
    number): not batched by vmap, and held already or computable now, alone (while compile
    or a control-flow body traces, a value with no buffer is a placeholder)."""
    impl = t._impl
    return not impl.levels and (impl.buffer is not None or STATE.recording is None)


def as_tensor(x, dtype: DType | None = None, op: str = "constant") -> Tensor:
    """Tensor from a Tensor, NumPy array, Python scalar or nested list; ``op`` (the op the
    user called) is named in conversion errors."""
    if isinstance(x, Tensor):
        if dtype is not None and x.dtype is not dtype:
            return fn.cast(x, dtype)
        return x
    return fn.constant_for(x, dtype, None, op)


def _of(ndim: int, shape) -> str:
    return f"a tensor of shape {tuple(shape)}" if shape is not None else f"a tensor of rank {ndim}"


def norm_axis(op: str, axis, ndim: int, shape=None) -> int:
    """A non-negative axis; ``shape`` (optional) is named in the error messages."""
    if isinstance(axis, Tensor) or not isinstance(axis, numbers.Integral):
        raise TypeError(
            f"{op}: axis must be an int, got {axis!r} ({type(axis).__name__}) "
            f"for {_of(ndim, shape)}"
        )
    axis = int(axis)
    if not -ndim <= axis < ndim:  # a 0-d tensor has no axis, as in NumPy
        raise IndexError(f"{op}: axis {axis} is out of range for {_of(ndim, shape)}")
    return axis % ndim


def norm_axes(op: str, axis, ndim: int, shape=None) -> tuple[int, ...]:
    """``None`` -> all axes; int or sequence -> sorted unique non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, list | tuple):
        out = tuple(sorted(norm_axis(op, a, ndim, shape) for a in axis))
        if len(set(out)) != len(out):
            raise ValueError(f"{op}: repeated axis in {axis!r} for {_of(ndim, shape)}")
        return out
    return (norm_axis(op, axis, ndim, shape),)


def concrete_int(value):
    """A 0-d integer tensor whose value is known at the call as its int (JAX takes such a
    concrete array as a size, PyTorch such a tensor); anything else as it is, so a traced
    one is still refused by the caller's check."""
    if isinstance(value, Tensor) and value.ndim == 0 and value.dtype.is_int and readable_now(value):
        return int(value.item())
    return value


def norm_shape(op: str, shape) -> tuple[int, ...]:
    """``shape`` (an int or a sequence of sizes, symbolic sizes kept; a 0-d integer tensor
    known at the call counts as its int) as a tuple; errors name ``op``."""
    shape = concrete_int(shape)
    if isinstance(shape, numbers.Integral):
        shape = (as_dim(shape),)
    elif isinstance(shape, list | tuple):
        shape = type(shape)(concrete_int(s) for s in shape)
    try:
        out = tuple(as_dim(s) for s in shape)
    except TypeError:
        raise TypeError(f"{op}: shape must be a sequence of ints, got {shape!r}") from None
    for s in shape:
        if isinstance(s, Tensor):  # (a concrete 0-d integer one is an int by now)
            raise TypeError(
                f"{op}: shape entries must be ints, got {shape!r}: a size must be known where "
                "the function is traced (compile, vmap, grad); pass it as a Python int"
            )
        if isinstance(s, float):
            raise TypeError(f"{op}: shape entries must be ints, got {shape!r}")
    if any(s < 0 for s in out):
        raise ValueError(f"{op}: negative dimension in shape {out}")
    return out


def jnp_dtype_slot(op: str, value, dtype, slot: str):
    """``(value, dtype)``: jnp's third positional argument of ``sum``/``mean``/``prod``/
    ``var``/``std``/``cumsum``/``cumprod`` and the ``nan`` reductions is the dtype, where
    PyTorch's and ours is ``slot`` (``keepdims``, ``exclusive``, ``ddof``): a dtype there
    is taken as jnp's (it cannot be a flag), with ``slot`` at its default.
    ``nb.sum(x, 0, nb.float32)`` had kept the dims. ``dtype`` comes back as a ``DType``
    (an unsupported one's error names ``op``)."""
    if dtype is not None:
        dtype = to_dtype(dtype, op)
    if value is None or isinstance(value, bool | np.bool_ | int | np.integer | Tensor):
        return value, dtype
    try:
        as_dtype = to_dtype(value)
    except (TypeError, ValueError, KeyError):
        raise TypeError(f"{op}: {slot} must be a bool, got {value!r}") from None
    if dtype is not None:
        raise TypeError(f"{op}: dtype given twice (a dtype in place of {slot}, and dtype=)")
    return False, as_dtype


def int_arg(op: str, name: str, value) -> int:
    """``value`` as an int (a NumPy integer too), or a ``TypeError`` naming ``op`` and
    ``name``: a float offset or count is refused (as JAX), never truncated."""
    value = concrete_int(value)
    if not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}: {name} must be an int, got {value!r} ({type(value).__name__})")
    return int(value)


def alias_arg(op: str, name: str, value, alias: str, alias_value):
    """The argument passed as ``name`` or under another spelling ``alias`` (the original
    Nabla's or JAX's name for it); both at once is a ``TypeError`` naming ``op``."""
    if alias_value is None:
        return value
    if value is not None:
        raise TypeError(f"{op}: pass {name} or {alias}, not both")
    return alias_value


def device_arg(op: str, device):
    """A creation op's ``device`` argument as a Device (None: the default device's), taking
    PyTorch's names and devices too; anything else is an error naming the op (it was kept
    as given and failed when the value was computed)."""
    if device is None:
        return device
    got = device_like(device)
    if got is not None:
        check_device(op, got)
        return got
    raise TypeError(
        f"{op}: device must be nb.CPU(), nb.Accelerator(i) or a name such as 'cpu' or "
        f"'gpu:0', got {type(device).__name__} {device!r}"
    )


def check_device(op: str, device) -> None:
    """An accelerator this machine has, or an error naming ``op`` at the call (as PyTorch's
    ``device="cuda"`` on a machine without one), not when a value is computed there."""
    if device.is_cpu:
        return
    mx = max_backend()
    if mx is None:
        raise RuntimeError(
            f"{op}({device!r}): accelerators need the MAX backend: pip install 'nabla[max]'"
        )
    n = mx.accelerator_count()
    if device.id >= n:
        raise RuntimeError(f"{op}({device!r}): MAX sees {n} accelerator(s) on this machine")


def check_callable(transform: str, fun) -> None:
    """A transform given something that is not a function fails where it is applied, as in
    JAX, naming the transform (not later, at the first call, with Python's "'int' object is
    not callable")."""
    if not callable(fun):
        raise TypeError(f"{transform}: expected a function, got {type(fun).__name__} {fun!r:.60}")


def dtype_or(dtype, default, op: str | None = None) -> DType:
    """``dtype`` as a ``DType``, or ``default`` when it is None; ``op`` names the public
    function in an unsupported dtype's error."""
    return default if dtype is None else to_dtype(dtype, op)


def doc_paragraph(text: str, width: int = 92) -> str:
    """``text`` wrapped to ``width`` columns without breaking inside a ````literal````
    (for the docstrings the op factories compose)."""
    parts = text.split("``")
    parts[1::2] = [p.replace(" ", "\0") for p in parts[1::2]]
    return textwrap.fill("``".join(parts), width=width).replace("\0", " ")
