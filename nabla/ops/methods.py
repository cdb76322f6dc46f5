"""Attach operators and methods to ``Tensor`` from one table (the Tensor class stays thin)."""

from __future__ import annotations

from ..core.device import CPU, Device
from ..runtime.tensor import Tensor
from . import _util, binary, creation, indexing, linalg, reduction, transfer, unary, view


def _swap(fn):
    return lambda self, other: fn(other, self)


def _to(self, target):
    """``x.to(device)`` or ``x.to(dtype)``."""

    if isinstance(target, Device):
        return transfer.to_device(self, target)
    return unary.cast(self, target)


def _cpu(self):
    return _to(self, CPU())


def _T(self):  # noqa: N802
    return view.permute(self, tuple(reversed(range(self.ndim))))


def _reshape(self, *shape):
    if len(shape) == 1 and isinstance(shape[0], list | tuple):
        shape = tuple(shape[0])
    return view.reshape(self, shape)


def _at(self):
    return indexing.AtIndexer(self)


_METHODS = {
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
    "__pow__": binary.pow,
    "__rpow__": _swap(binary.pow),
    "__matmul__": linalg.matmul,
    "__rmatmul__": _swap(linalg.matmul),
    "__neg__": unary.neg,
    "__pos__": lambda self: self,
    "__abs__": unary.abs,
    "__invert__": lambda self: (
        unary.logical_not(self) if self.dtype.is_bool else unary.bitwise_not(self)
    ),
    "__and__": lambda a, b: _bitwise(binary.logical_and, binary.bitwise_and, a, b),
    "__rand__": lambda a, b: _bitwise(binary.logical_and, binary.bitwise_and, b, a),
    "__or__": lambda a, b: _bitwise(binary.logical_or, binary.bitwise_or, a, b),
    "__ror__": lambda a, b: _bitwise(binary.logical_or, binary.bitwise_or, b, a),
    "__xor__": lambda a, b: _bitwise(binary.logical_xor, binary.bitwise_xor, a, b),
    "__rxor__": lambda a, b: _bitwise(binary.logical_xor, binary.bitwise_xor, b, a),
    # comparisons
    "__eq__": binary.equal,
    "__ne__": binary.not_equal,
    "__gt__": binary.greater,
    "__ge__": binary.greater_equal,
    "__lt__": binary.less,
    "__le__": binary.less_equal,
    # indexing
    "__getitem__": indexing.getitem,
    "__setitem__": indexing.setitem,
    "at": property(_at),
    # conversions and placement
    "cast": unary.cast,
    "astype": unary.cast,
    "to": _to,
    "cpu": _cpu,
    # shape
    "T": property(_T),
    "mT": property(lambda self: view.swap_axes(self, -2, -1)),
    "reshape": _reshape,
    "view": _reshape,
    "squeeze": view.squeeze,
    "unsqueeze": view.unsqueeze,
    "permute": view.permute,
    "transpose": view.transpose,
    "swap_axes": view.swap_axes,
    "swapaxes": view.swap_axes,
    "moveaxis": view.moveaxis,
    "flatten": view.flatten,
    "flip": view.flip,
    "broadcast_to": view.broadcast_to,
    "expand": view.expand,
    "tile": view.tile,
    "repeat": view.repeat,
    "split": view.split,
    "chunk": view.chunk,
    "unbind": view.unbind,
    # reductions
    "sum": reduction.sum,
    "mean": reduction.mean,
    "max": reduction.max,
    "min": reduction.min,
    "prod": reduction.prod,
    "var": reduction.var,
    "std": reduction.std,
    "argmax": reduction.argmax,
    "argmin": reduction.argmin,
    "cumsum": reduction.cumsum,
    "logsumexp": reduction.logsumexp,
    "all": reduction.all,
    "any": reduction.any,
    "softmax": reduction.softmax,
    "logsoftmax": reduction.logsoftmax,
    # elementwise
    "clip": binary.clip,
    "clamp": binary.clip,
    "maximum": binary.maximum,
    "minimum": binary.minimum,
    "pow": binary.pow,
    "matmul": linalg.matmul,
    "zeros_like": creation.zeros_like,
    "ones_like": creation.ones_like,
    "gelu": unary.gelu,
    "silu": unary.silu,
    "softplus": unary.softplus,
    "square": unary.square,
    "logical_not": unary.logical_not,
}

# every elementwise unary op is also a method (x.exp(), x.tanh(), ...)
for _n in unary.__all__:
    _obj = getattr(unary, _n)
    if isinstance(_obj, unary.UnaryOperation) and _n not in ("identity", "bitwise_not"):
        _METHODS.setdefault(_n, _obj)


def _bitwise(logical, bitwise, a, b):
    ta = _util.as_tensor(a)
    tb = _util.as_tensor(b)
    if ta.dtype.is_bool and tb.dtype.is_bool:
        return logical(ta, tb)
    return bitwise(ta, tb)


def _as_method(fn):
    # Op singletons are callables, not functions: wrap them so attribute access binds self.
    if isinstance(fn, property) or type(fn).__name__ == "function":
        return fn

    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__ = getattr(fn, "name", "method")
    method.__doc__ = getattr(fn, "__doc__", None)
    return method


def install() -> None:
    for name, fn in _METHODS.items():
        setattr(Tensor, name, _as_method(fn))
    Tensor.__hash__ = object.__hash__


install()
