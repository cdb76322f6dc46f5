"""Elementwise unary ops.

Each op is one ``UnaryOperation`` with its derivative written in nabla ops (so derivatives
are themselves differentiable and batchable). Float-math ops (rounding included) promote
integer and bool inputs to the default float dtype; ``relu``/``abs``/``neg``/``sign`` keep the
input dtype. A factory-made op's class docstring is composed from its ``doc`` summary and its
dtype flags (``_unary_doc``).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..core.dtypes import DType, get_default_dtype, to_dtype
from ..core.pytree import tree_map
from ..core.state import STATE, is_live
from ..runtime.tensor import Tensor, borrowed
from . import spmd
from ._util import as_tensor, doc_paragraph
from .base import Operation
from .functions import fn, provide

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
    "log10",
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
    "isfinite",
    "nan_to_num",
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
    A subclass that defines ``kernel(self, args, kwargs)`` is an op in the original Nabla's
    protocol, lowered on MAX by that method (``ops.kernels.kernel_protocol``,
    ``docs/custom_kernels.md``).
    """

    float_only = True  # promote ints/bools to the default float dtype

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "kernel" in cls.__dict__:
            # the original Nabla's protocol: a user op lowered by its kernel() on MAX values
            fn.kernel_protocol(cls)  # ops/kernels.py

    unchanged_for = None  # dtype predicate: inputs it accepts come back as they are (rounding)
    out_dtype: DType | None = None  # e.g. bool for predicates
    allowed = None  # optional predicate on the input dtype

    def __call__(self, x):
        if not isinstance(x, Tensor):
            x = as_tensor(x, op=self.name)
        if self.allowed is not None and not self.allowed(x.dtype):
            raise TypeError(f"{self.name}: unsupported dtype {x.dtype} (shape {x.shape})")
        if self.unchanged_for is not None and self.unchanged_for(x.dtype):
            return x
        if self.float_only and not x.dtype.is_float:
            x = cast(x, get_default_dtype())
        return self.bind([x], {})

    def infer(self, shapes, dtypes, kwargs):
        return [shapes[0]], [self.out_dtype or dtypes[0]]

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.elementwise_rule(in_shapes, out_shapes)

    def derivative(self, x, y):
        raise NotImplementedError(f"op {self.name} has no derivative")

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        if not self.differentiable:
            return [None]
        d = self.derivative(primals[0], outputs[0])
        if type(d) is float and d == 0.0:  # (no cotangent: a zero that stays one)
            return [None]
        return [cotangents[0] * d]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if not self.differentiable or tangents[0] is None:
            return [None]
        d = self.derivative(primals[0], outputs[0])
        if type(d) is float and d == 0.0:
            return [None]
        return [tangents[0] * d]

    # ``derivative`` may return a Python float for constant derivatives (neg, floor, ...).
    # A constant 0 (sign, floor, round) gives no tangent or cotangent at all, as JAX's
    # symbolic zeros: ``sqrt(sign(x) * 0)`` has derivative 0 at every x, where a tangent of
    # zeros times sqrt's infinite derivative at 0 made NaN.


_X_ARG = (
    "x: a tensor, or a Python scalar, nested list or NumPy array (converted with\n"
    "        :func:`nabla.constant`)."
)


def _dtype_phrase(dtypes) -> str:
    """``dtype bool`` / ``a float dtype`` / ``dtype int8 or uint8`` for a Raises line."""
    floats = [d for d in DType if d.is_float]
    if list(dtypes) == floats:
        return "a float dtype"
    return "dtype " + " or ".join(d.value for d in dtypes)


def _unary_doc(doc, *, float_only, out_dtype, allowed, unchanged=None) -> str:
    """The class docstring of a ``_unary`` op: ``doc`` (a one-line summary, optionally
    followed by a blank line and notes) plus the dtype rules, Args, Returns and Raises that
    follow from the op's flags."""
    summary, _, notes = doc.strip().partition("\n\n")
    if out_dtype is not None:
        rule = "" if notes else "Any input dtype is accepted."
        returns = f"A {out_dtype.value} tensor of ``x``'s shape."
    elif unchanged is not None:
        rule = f"{unchanged} inputs are returned unchanged, as in JAX."
        returns = "A tensor of ``x``'s shape and dtype."
    elif float_only:
        rule = (
            "Integer and bool inputs are first cast to the default float dtype "
            "(:func:`nabla.get_default_dtype`, float32 unless changed); float inputs keep theirs."
        )
        returns = "A tensor of ``x``'s shape and (float) dtype."
    else:
        rule = "The result keeps the input's dtype (no promotion to float)."
        returns = "A tensor of ``x``'s shape and dtype."
    body = doc_paragraph(f"{notes} {rule}".strip())
    parts = [summary, body, f"Args:\n    {_X_ARG}", f"Returns:\n    {returns}"]
    if allowed is not None:
        rejected = [d for d in DType if not allowed(d)]
        parts.append(f"Raises:\n    TypeError: if ``x`` has {_dtype_phrase(rejected)}.")
    return "\n\n".join(parts) + "\n"


def _unary(
    name,
    derivative=None,
    *,
    doc,
    float_only=True,
    out_dtype=None,
    allowed=None,
    linear=False,
    unchanged=None,
):
    """A unary op class's singleton. ``unchanged``: None, or ``(phrase, predicate)``: inputs
    whose dtype satisfies the predicate come back as they are (``"Bool"`` for ``abs``)."""
    cls = type(
        f"{name.title().replace('_', '')}Op",
        (UnaryOperation,),
        {
            "__doc__": _unary_doc(
                doc,
                float_only=float_only,
                out_dtype=out_dtype,
                allowed=allowed,
                unchanged=unchanged and unchanged[0],
            ),
            "name": name,
            "float_only": float_only,
            "unchanged_for": staticmethod(unchanged[1]) if unchanged else None,
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


_ZERO_GRAD = "\n\nIts derivative is taken as zero everywhere."

# d|x|/dx at 0 is 1, as in JAX
abs = _unary(  # noqa: A001
    "abs",
    lambda x, y: (x >= 0).cast(x.dtype) * 2.0 - 1.0,
    doc="Elementwise absolute value ``|x|``.\n\nIts derivative at 0 is taken as 1, as in JAX.",
    float_only=False,
    unchanged=("Bool", lambda d: d.is_bool),
)
neg = _unary(
    "neg",
    lambda x, y: -1.0,
    doc="Elementwise negation ``-x`` (also ``nb.negate``).",
    float_only=False,
    allowed=_not_bool,
    linear=True,
)
exp = _unary("exp", lambda x, y: y, doc="Elementwise exponential ``e ** x``.")
expm1 = _unary(
    # (exp(x), not y + 1: that cancels where y is near -1, and ELU's gradient at -8 in
    # bfloat16 came out 0)
    "expm1",
    lambda x, y: exp(x),
    doc="Elementwise ``exp(x) - 1``, accurate for ``x`` near 0.",
)
log = _unary(
    "log",
    lambda x, y: reciprocal(x),
    doc="Elementwise natural logarithm (``-inf`` at 0, NaN for negative ``x``).",
)
log1p = _unary(
    "log1p",
    lambda x, y: reciprocal(x + 1.0),
    doc="Elementwise ``log(1 + x)``, accurate for ``x`` near 0.",
)
log2 = _unary(
    "log2", lambda x, y: reciprocal(x * math.log(2.0)), doc="Elementwise base-2 logarithm."
)
log10 = _unary(
    "log10", lambda x, y: reciprocal(x * math.log(10.0)), doc="Elementwise base-10 logarithm."
)
sin = _unary("sin", lambda x, y: cos(x), doc="Elementwise sine (``x`` in radians).")
cos = _unary("cos", lambda x, y: -sin(x), doc="Elementwise cosine (``x`` in radians).")
tan = _unary("tan", lambda x, y: 1.0 + y * y, doc="Elementwise tangent (``x`` in radians).")
asin = _unary(
    "asin",
    lambda x, y: rsqrt(1.0 - x * x),
    doc="Elementwise inverse sine (NumPy's ``arcsin``).\n\n"
    "The result is in ``[-pi/2, pi/2]``; NaN for ``x`` outside ``[-1, 1]``.",
)
acos = _unary(
    "acos",
    lambda x, y: -rsqrt(1.0 - x * x),
    doc="Elementwise inverse cosine (NumPy's ``arccos``).\n\n"
    "The result is in ``[0, pi]``; NaN for ``x`` outside ``[-1, 1]``.",
)
atan = _unary(
    "atan",
    lambda x, y: reciprocal(1.0 + x * x),
    doc="Elementwise inverse tangent (NumPy's ``arctan``); the result is in ``[-pi/2, pi/2]``.",
)
sinh = _unary("sinh", lambda x, y: cosh(x), doc="Elementwise hyperbolic sine.")
cosh = _unary("cosh", lambda x, y: sinh(x), doc="Elementwise hyperbolic cosine.")
tanh = _unary("tanh", lambda x, y: 1.0 - y * y, doc="Elementwise hyperbolic tangent.")
atanh = _unary(
    "atanh",
    lambda x, y: reciprocal(1.0 - x * x),
    doc="Elementwise inverse hyperbolic tangent (NumPy's ``arctanh``).\n\n"
    "``+-inf`` at ``x = +-1``; NaN for ``x`` outside ``[-1, 1]``.",
)
erf = _unary(
    "erf",
    lambda x, y: (2.0 / math.sqrt(math.pi)) * exp(-(x * x)),
    doc="Elementwise Gauss error function ``erf(x)``.",
)
sqrt = _unary("sqrt", lambda x, y: 0.5 / y, doc="Elementwise square root (NaN for negative ``x``).")
rsqrt = _unary(
    "rsqrt",
    lambda x, y: -0.5 * y / x,
    doc="Elementwise reciprocal square root ``1 / sqrt(x)`` (``inf`` at 0).",
)
reciprocal = _unary(
    "reciprocal", lambda x, y: -(y * y), doc="Elementwise reciprocal ``1 / x`` (``inf`` at 0)."
)
sigmoid = _unary(
    "sigmoid",
    lambda x, y: y * (1.0 - y),
    doc="Elementwise logistic sigmoid ``1 / (1 + exp(-x))``.",
)
relu = _unary(
    "relu",
    # from the output (y > 0 exactly where x > 0, and both false at NaN): the backward then
    # keeps y, which the next layer reads anyway, and x dies at the relu (written over in place)
    lambda x, y: (y > 0).cast(x.dtype),
    doc="Elementwise rectified linear unit ``max(x, 0)``.\n\nIts derivative at 0 is taken as 0.",
    float_only=False,
    allowed=_not_bool,
)
sign = _unary(
    "sign",
    lambda x, y: 0.0,
    doc="Elementwise sign: -1, 0 or 1 (NaN stays NaN), like NumPy's ``sign``." + _ZERO_GRAD,
    float_only=False,
    allowed=_not_bool,
)


def _rounding(name, doc):
    """A rounding op: derivative zero, integer and bool inputs returned unchanged."""
    return _unary(
        name,
        lambda x, y: 0.0,
        doc=doc + _ZERO_GRAD,
        unchanged=("Integer and bool", lambda d: not d.is_float),
    )


floor = _rounding("floor", "Elementwise floor (round toward -inf).")
ceil = _rounding("ceil", "Elementwise ceiling (round toward +inf).")
_round = _rounding(
    "round", "Elementwise rounding to the nearest integer, halves to even (NumPy's ``round``)."
)


def round(x, decimals=0):  # noqa: A001 - NumPy's and JAX's name
    """Elementwise rounding to ``decimals`` places (default: to the nearest integer), halves
    to even, as NumPy's and JAX's ``round``: with ``decimals``, ``x`` is scaled by
    ``10**decimals``, rounded and scaled back (a negative ``decimals`` rounds to tens,
    hundreds, ...). Its derivative is zero."""
    if not isinstance(decimals, int) or isinstance(decimals, bool):
        raise TypeError(f"round: decimals must be an int, got {decimals!r}")
    if decimals == 0:
        return _round(x)
    x = as_tensor(x, op="round")
    if not x.dtype.is_float:
        if decimals >= 0:
            return x
        scale = 10**-decimals
        return fn.cast(_round(fn.cast(x, "float64") / scale) * scale, x.dtype)
    scale = 10.0**decimals
    if x.dtype.itemsize < 4:  # scaled in float32, as JAX: x * 100 overflows float16 past 655
        return fn.cast(_round(fn.cast(x, "float32") * scale) / scale, x.dtype)
    return _round(x * scale) / scale


trunc = _rounding("trunc", "Elementwise truncation (round toward zero).")
is_nan = _unary(
    "is_nan",
    doc="Elementwise NaN test (NumPy's ``isnan``).\n\nAlways False for integer and bool tensors.",
    out_dtype=DType.bool,
    float_only=False,
)
is_inf = _unary(
    "is_inf",
    doc="Elementwise test for ``+inf`` or ``-inf`` (NumPy's ``isinf``).\n\n"
    "Always False for integer and bool tensors.",
    out_dtype=DType.bool,
    float_only=False,
)


def isfinite(x):
    """Elementwise test of ``x`` for a finite value (neither NaN nor infinite; NumPy's and
    JAX's ``isfinite``). Always True for integer and bool tensors."""
    x = as_tensor(x, op="isfinite")
    return _logical_not(fn.logical_or(is_nan(x), is_inf(x)))


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """``x`` with NaN replaced by ``nan`` and the infinities by ``posinf``/``neginf``
    (default: the dtype's largest and lowest finite values), as NumPy's and JAX's
    ``nan_to_num``. Integer and bool tensors are returned as they are. The gradient flows
    to the finite elements.

    Args:
        x: a tensor, Python scalar, nested list or NumPy array.
        copy: accepted for NumPy's signature (the result is always a new value).
        nan: the value for NaN (default 0).
        posinf: the value for +inf (default: the dtype's largest).
        neginf: the value for -inf (default: the dtype's lowest).

    Returns:
        A tensor like ``x``.
    """
    x = as_tensor(x, op="nan_to_num")
    if not x.dtype.is_float:
        return x
    info = ml_dtypes.finfo(x.dtype.numpy)  # (NumPy's finfo has no bfloat16)
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    out = fn.where(is_nan(x), nan, x)
    out = fn.where(is_inf(x) & (x > 0), hi, out)
    return fn.where(is_inf(x) & (x < 0), lo, out)


_logical_not = _unary(
    "logical_not",
    doc="Elementwise logical NOT of a bool tensor (the primitive of :func:`nabla.logical_not`).",
    out_dtype=DType.bool,
    float_only=False,
)
bitwise_not = _unary(
    "bitwise_not",
    doc="Elementwise bitwise NOT ``~x`` (two's complement; logical NOT for bool tensors).",
    float_only=False,
    allowed=lambda d: d.is_int or d.is_bool,
)
identity = _unary(
    "identity",
    lambda x, y: 1.0,
    doc="Elementwise identity: a new tensor with ``x``'s value (used by the transforms).",
    float_only=False,
)
identity.data_movement = True  # partial terms pass through a copy


def clone(x) -> Tensor:
    """``identity``, whose result owns its memory from the call on: a tensor sharing
    another library's array (``from_dlpack``) has its value copied now, as PyTorch's
    ``clone`` copies, so a later write to that array changes the clone no more than there.
    A lazy view of such a tensor (``t[1:3]``, ``t.reshape(...)``, ``t.data``) is computed
    at the call, then copied. (Inside a trace, or batched by ``vmap``, it is ``identity``:
    a captured array is read at each call.)"""
    x = as_tensor(x, op="clone")
    src = x._impl
    eager = not src.levels and STATE.recording is None and STATE.body_writes is None
    if eager and src.buffer is None and _views_borrowed(src):
        x.realize()  # (from the array as it is now)
    out = identity(x)
    impl = out._impl
    if eager and borrowed(src.buffer) and impl.buffer is None and not impl.levels:
        impl.buffer = np.array(src.buffer)
        if not is_live(impl.traced):
            impl.node = None
    return out


def _views_borrowed(impl, hops: int = 32) -> bool:
    """Whether a pending value is a view (through ops that move data, and
    ``stop_gradient``) of a computed buffer in another library's memory."""
    while impl.buffer is None and hops:
        node = impl.node
        if node is None or len(node.inputs) != 1:
            return False
        if not (getattr(node.op, "data_movement", False) or node.op.name == "stop_gradient"):
            return False
        impl, hops = node.inputs[0], hops - 1
    return borrowed(impl.buffer)


def logical_not(x):
    """Elementwise logical NOT (NumPy's ``logical_not``; ``~x`` for a bool tensor).

    Args:
        x: a tensor, Python scalar, nested list or NumPy array of any dtype; non-bool values
            are compared with zero first (nonzero is True).

    Returns:
        A bool tensor of ``x``'s shape, True where ``x`` is False (or zero).

    Example:
        >>> nb.logical_not(nb.constant([0, 2])).tolist()
        [True, False]
    """
    x = as_tensor(x, op="logical_not")
    if not x.dtype.is_bool:
        x = x != 0
    return _logical_not(x)


class CastOp(Operation):
    name = "cast"
    linear = True

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.elementwise_rule(in_shapes, out_shapes)

    def keeps_partial(self, kwargs):
        # a partial sum is completed first: an integer cast truncates each term, and a float
        # cast rounds each one (f32 terms cast to f16, then summed, differed from the f16 of
        # their sum in 7 of 16 elements; a wider one sums more exactly than the value has)
        return False

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

    Float to int truncates toward zero (like NumPy's ``astype``); a value beyond the
    integer dtype's range saturates to its min or max and NaN becomes 0 (as JAX; NumPy's
    result there is platform-defined).
    """
    x = as_tensor(x, op="cast")
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
    """The value of ``x``, treated as a constant by every differentiation transform.

    ``x`` may be a tensor (or a value convertible to one) or a pytree of them, as in JAX's
    ``lax.stop_gradient``: each tensor leaf is stopped and the structure is kept."""
    return tree_map(_stop_gradient, x)


# ------------------------------------------------------------------ composites
def silu(x):
    """``x * sigmoid(x)``."""
    x = as_tensor(x, op="silu")
    return x * sigmoid(x)


# erfc(t) for t >= 0 to ~1.2e-7 relative error everywhere (the Chebyshev fit of the
# classic ``erfcc`` in Numerical Recipes): the tail 1 + erf(x) = erfc(-x) without the
# cancellation of adding erf's value near -1 to 1
_ERFC_FIT = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def erfc_fit(t):
    """``(u, poly)`` with ``erfc(t) = u exp(-t^2 + poly)`` for ``t >= 0`` (a tensor), to
    ~1.2e-7 relative error: the parts, so that a caller can stay in log space
    (``special.log_ndtr``) or leave out ``exp(-t^2)`` (``special.erfcx``)."""
    u = 1.0 / (1.0 + 0.5 * t)
    poly = _ERFC_FIT[-1]
    for c in reversed(_ERFC_FIT[:-1]):
        poly = c + u * poly
    return u, poly


def _erfc_nonnegative(t):
    """``erfc(t)`` for ``t >= 0`` (a tensor), to ~1.2e-7 relative error."""
    u, poly = erfc_fit(t)
    return u * exp(-t * t + poly)


# below this x, float64 gelu's 1 + erf(x / sqrt 2) has lost more relative accuracy to
# cancellation than the fit's 1.2e-7
_GELU_TAIL_F64 = -6.0


def gelu(x, approximate="none"):
    """GELU: ``0.5 x (1 + erf(x / sqrt 2))``, or the tanh approximation (``approximate="tanh"``).

    The exact form is ``0.5 x erfc(-x / sqrt 2)``, computed without adding ``erf``'s value
    near -1 to 1 for negative ``x`` (which left float32 ``gelu(-6)`` at 0 and float16
    ``gelu(-3)`` 8% off), as JAX's ``erfc`` form: float32 and narrower from a fit of
    ``erfc(|x| / sqrt 2)`` accurate to ~1.2e-7 everywhere (one exponential), float64 from
    ``erf`` but in its far negative tail.
    """
    x = as_tensor(x, op="gelu")
    if approximate in (False, "none"):
        by_erf = lambda: 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))  # noqa: E731
        if not x.dtype.is_float:
            return by_erf()
        if x.dtype in (DType.float16, DType.bfloat16):  # in float32, rounded once (PyTorch)
            return gelu(x.cast(DType.float32)).cast(x.dtype)
        tail = _erfc_nonnegative(abs(x) * (1.0 / math.sqrt(2.0)))  # erfc(|x| / sqrt 2)
        if x.dtype is not DType.float64:
            return 0.5 * x * fn.where(x < 0.0, tail, 2.0 - tail)
        return fn.where(x < _GELU_TAIL_F64, 0.5 * x * tail, by_erf())
    if approximate in (True, "tanh"):
        if x.dtype in (DType.float16, DType.bfloat16):  # in float32, rounded once (PyTorch)
            return gelu(x.cast(DType.float32), "tanh").cast(x.dtype)
        c = math.sqrt(2.0 / math.pi)
        # the cubic of |x| > 10 only saturates tanh (exactly 1 in float64 already): clipped
        # there, it never overflows to an inf whose derivative times 0 is NaN
        u = fn.clip(x, -10.0, 10.0) if x.dtype.is_float else x
        return 0.5 * x * (1.0 + tanh(c * (u + 0.044715 * u * u * u)))
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


# where exp(-x) is below half an ulp of x: softplus(x) == x from there on
_SOFTPLUS_LINEAR = {
    DType.float64: 37.0,
    DType.float32: 17.0,
    DType.float16: 8.0,
    DType.bfloat16: 6.0,
}


def softplus(x):
    """``log(1 + exp(x))``, computed stably."""

    x = as_tensor(x, op="softplus")
    if not x.dtype.is_float:
        x = cast(x, get_default_dtype())
    # log1p(exp(x)) for x <= 0, x + log1p(exp(-x)) above, and x itself above a threshold
    # where that equals x to the dtype's precision: smooth, so every derivative is
    # sigmoid's (a max(x, 0) + log1p(exp(-|x|)) form has a kink at 0 that zeroed the second
    # derivative there). Each branch exponentiates a non-positive value, so its backward
    # never divides the cotangent by 1 + exp(x) first: in float16 that quotient fell below
    # the normal range and came back 33% off. The selects keep exp's input in range, so no
    # inf reaches the gradient of a branch not taken.
    big = _SOFTPLUS_LINEAR.get(x.dtype, 17.0)
    positive = x > 0.0
    right = fn.where(positive, x, 0.0)
    left = fn.where(positive, 0.0, x)
    curve = fn.where(positive, right + log1p(exp(-right)), log1p(exp(left)))
    return fn.where(x > big, x, curve)


def square(x):
    """``x * x`` (a bool ``x`` squares as int32, as JAX's ``square``: 1 and 0)."""
    x = as_tensor(x, op="square")
    if x.dtype.is_bool:
        x = x.cast(DType.int32)
    return x * x


provide(globals(), __all__ + ["clone", "erfc_fit"])
