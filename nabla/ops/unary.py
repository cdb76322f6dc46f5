"""Elementwise unary ops.

Each op is one ``UnaryOperation`` with its derivative written in nabla ops (so derivatives
are themselves differentiable and batchable). Float-math ops promote integer inputs to the
default float dtype; ``relu``/``abs``/``neg``/rounding keep the input dtype.
"""

from __future__ import annotations

import math

from ..core.dtypes import DType, get_default_dtype, to_dtype
from . import binary
from ._util import as_tensor
from .base import Operation

__all__ = [
    "abs",
    "acos",
    "asin",
    "atan",
    "atanh",
    "cos",
    "sin",
    "tan",
    "cosh",
    "sinh",
    "tanh",
    "erf",
    "exp",
    "expm1",
    "log",
    "log1p",
    "log2",
    "neg",
    "reciprocal",
    "relu",
    "sigmoid",
    "silu",
    "gelu",
    "softplus",
    "sqrt",
    "rsqrt",
    "square",
    "sign",
    "floor",
    "ceil",
    "round",
    "trunc",
    "is_nan",
    "is_inf",
    "logical_not",
    "bitwise_not",
    "cast",
    "stop_gradient",
    "UnaryOperation",
    "identity",
]


class UnaryOperation(Operation):
    """Elementwise op of one tensor: output has the input's shape.

    Subclasses give ``derivative(x, y)`` (dy/dx as a tensor) or set ``differentiable=False``.
    """

    float_only = True  # promote ints/bools to the default float dtype
    out_dtype: DType | None = None  # e.g. bool for predicates
    allowed = None  # optional predicate on the input dtype

    def __call__(self, x):
        x = as_tensor(x)
        if self.allowed is not None and not self.allowed(x.dtype):
            raise TypeError(f"{self.name}: unsupported dtype {x.dtype} (shape {x.shape})")
        if self.float_only and not x.dtype.is_float:
            x = cast(x, get_default_dtype())
        return self.bind([x], {})

    def infer(self, shapes, dtypes, kwargs):
        return [shapes[0]], [self.out_dtype or dtypes[0]]

    def derivative(self, x, y):
        raise NotImplementedError(f"op {self.name} has no derivative")

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        if not self.differentiable:
            return [None]
        return [cotangents[0] * self.derivative(primals[0], outputs[0])]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if not self.differentiable or tangents[0] is None:
            return [None]
        return [tangents[0] * self.derivative(primals[0], outputs[0])]

    # ``derivative`` may return a Python float for constant derivatives (neg, floor, ...).


def _unary(name, derivative=None, *, float_only=True, out_dtype=None, allowed=None, linear=False):
    cls = type(
        f"{name.title().replace('_', '')}Op",
        (UnaryOperation,),
        {
            "name": name,
            "float_only": float_only,
            "out_dtype": out_dtype,
            "differentiable": derivative is not None,
            "allowed": staticmethod(allowed) if allowed else None,
            "linear": linear,
        },
    )
    if derivative is not None:
        cls.derivative = lambda self, x, y: derivative(x, y)
    op = cls()
    return op


def _not_bool(d):
    return not d.is_bool


# d|x|/dx at 0 is 1, as in JAX
abs = _unary(  # noqa: A001
    "abs", lambda x, y: (x >= 0).cast(x.dtype) * 2.0 - 1.0, float_only=False, allowed=_not_bool
)
neg = _unary("neg", lambda x, y: -1.0, float_only=False, allowed=_not_bool, linear=True)
exp = _unary("exp", lambda x, y: y)
expm1 = _unary("expm1", lambda x, y: y + 1.0)
log = _unary("log", lambda x, y: reciprocal(x))
log1p = _unary("log1p", lambda x, y: reciprocal(x + 1.0))
log2 = _unary("log2", lambda x, y: reciprocal(x * math.log(2.0)))
sin = _unary("sin", lambda x, y: cos(x))
cos = _unary("cos", lambda x, y: -sin(x))
tan = _unary("tan", lambda x, y: 1.0 + y * y)
asin = _unary("asin", lambda x, y: rsqrt(1.0 - x * x))
acos = _unary("acos", lambda x, y: -rsqrt(1.0 - x * x))
atan = _unary("atan", lambda x, y: reciprocal(1.0 + x * x))
sinh = _unary("sinh", lambda x, y: cosh(x))
cosh = _unary("cosh", lambda x, y: sinh(x))
tanh = _unary("tanh", lambda x, y: 1.0 - y * y)
atanh = _unary("atanh", lambda x, y: reciprocal(1.0 - x * x))
erf = _unary("erf", lambda x, y: (2.0 / math.sqrt(math.pi)) * exp(-(x * x)))
sqrt = _unary("sqrt", lambda x, y: 0.5 / y)
rsqrt = _unary("rsqrt", lambda x, y: -0.5 * y / x)
reciprocal = _unary("reciprocal", lambda x, y: -(y * y))
sigmoid = _unary("sigmoid", lambda x, y: y * (1.0 - y))
relu = _unary("relu", lambda x, y: (x > 0).cast(x.dtype), float_only=False, allowed=_not_bool)
sign = _unary("sign", lambda x, y: 0.0, float_only=False, allowed=_not_bool)
floor = _unary("floor", lambda x, y: 0.0)
ceil = _unary("ceil", lambda x, y: 0.0)
round = _unary("round", lambda x, y: 0.0)  # noqa: A001 - half to even, like NumPy
trunc = _unary("trunc", lambda x, y: 0.0)
is_nan = _unary("is_nan", out_dtype=DType.bool, float_only=False)
is_inf = _unary("is_inf", out_dtype=DType.bool, float_only=False)
_logical_not = _unary("logical_not", out_dtype=DType.bool, float_only=False)
bitwise_not = _unary("bitwise_not", float_only=False, allowed=lambda d: d.is_int or d.is_bool)
identity = _unary("identity", lambda x, y: 1.0, float_only=False)


def logical_not(x):
    """Elementwise NOT; non-bool inputs are compared with zero first."""
    x = as_tensor(x)
    if not x.dtype.is_bool:
        x = x != 0
    return _logical_not(x)


class CastOp(Operation):
    name = "cast"
    linear = True

    def infer(self, shapes, dtypes, kwargs):
        return [shapes[0]], [kwargs["dtype"]]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x = primals[0]
        if not x.dtype.is_float or not outputs[0].dtype.is_float:
            return [None]
        return [cast(cotangents[0], x.dtype)]


_cast = CastOp()


def cast(x, dtype) -> Tensor:  # noqa: F821
    """Convert ``x`` to ``dtype`` (``x.cast(dtype)`` / ``x.astype(dtype)``).

    Float to int truncates toward zero (like NumPy's ``astype``).
    """
    x = as_tensor(x)
    try:
        dtype = to_dtype(dtype)
    except TypeError as e:
        raise TypeError(f"cast: {e} (tensor of shape {x.shape}, dtype {x.dtype})") from None
    if x.dtype is dtype:
        return x
    return _cast.bind([x], {"dtype": dtype})


class StopGradientOp(UnaryOperation):
    name = "stop_gradient"
    backend_name = "identity"
    float_only = False
    differentiable = False
    cuts_trace = True


_stop_gradient = StopGradientOp()


def stop_gradient(x):
    """The value of ``x``, treated as a constant by every differentiation transform."""
    return _stop_gradient(x)


# ------------------------------------------------------------------ composites
def silu(x):
    """``x * sigmoid(x)``."""
    x = as_tensor(x)
    return x * sigmoid(x)


def gelu(x, approximate="none"):
    """GELU: ``0.5 x (1 + erf(x / sqrt 2))``, or the tanh approximation (``approximate="tanh"``)."""
    x = as_tensor(x)
    if approximate in (False, "none"):
        return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))
    if approximate in (True, "tanh"):
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)))
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def softplus(x):
    """``log(1 + exp(x))``, computed stably."""

    x = as_tensor(x)
    if not x.dtype.is_float:
        x = cast(x, get_default_dtype())
    return binary.maximum(x, 0.0) + log1p(exp(-abs(x)))


def square(x):
    """``x * x``."""
    x = as_tensor(x)
    return x * x
