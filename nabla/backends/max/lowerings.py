"""MAX lowering table: backend op name -> ``fn(args: list[TensorValue], kwargs) -> list``.

Semantics are those of ``nabla/backends/numpy/lowerings.py`` (the reference). Every lowering
runs inside an open ``max.graph.Graph``; the graph builder casts/reshapes each result to the
physical ``(dtype, shape)`` the op's shape rule predicted, so a lowering may return a value
that still has reduced axes kept (MAX reductions keep them) or a wider dtype.

Where MAX has no op, the lowering composes one from MAX ops (``tan``, ``atan``, ``atan2``,
``asin``, ``expm1``, ``sinh``, bitwise ops on integers, ``flip``, strided ``slice_update``, ...).
``UNSUPPORTED`` names ops that cannot be lowered at all; ``unsupported_reason`` names
(op, dtype, device) combinations that MAX cannot run, checked before any graph is built.
"""

from __future__ import annotations

import math

import numpy as np

try:  # MAX is optional: the table (names) stays importable without it.
    from max.dtype import DType as MDType
    from max.graph import DeviceRef, Dim, TensorType, ops
except ImportError:  # pragma: no cover - exercised only in NumPy-only installs
    MDType = None
    DeviceRef = None
    Dim = None
    TensorType = None
    ops = None

from ...core.dtypes import DType
from ...core.ir import DIM_OPS, DIM_TAG
from ..kernels import KernelError, graph_kernel_calls

__all__ = [
    "LOWERINGS",
    "SIZE_KWARGS",
    "max_dims",
    "UNSUPPORTED",
    "UnsupportedOnMax",
    "unsupported_reason",
    "max_dtype",
    "device_ref",
]


class UnsupportedOnMax(RuntimeError):
    """An op/dtype/device combination the MAX backend cannot run.

    Raised before any graph is built; ``op``, ``dtype``, ``device`` and ``reason`` say which.
    """

    def __init__(self, op: str, dtype, device, reason: str = ""):
        self.op = op
        self.dtype = dtype
        self.device = device
        self.reason = reason
        dt = getattr(dtype, "value", dtype)
        msg = f"op '{op}' with dtype {dt} is not supported by the MAX backend on {device}"
        super().__init__(f"{msg} ({reason})" if reason else msg)


LOWERINGS: dict = {}

# op name -> reason, for ops MAX cannot run at all (the auto policy keeps them on NumPy).
UNSUPPORTED: dict[str, str] = {
    # (max.graph's argsort takes rank-1 tensors only, and top_k leaves the order of equal
    # values unspecified, where nabla's sort is stable)
    "argsort": "MAX sorts rank-1 tensors only, with no stable order: argsort runs on the host",
}
# LAPACK's: no MAX kernels
for _n in ("inv", "solve", "det", "slogdet", "cholesky", "eigh", "svd", "qr", "pinv"):
    UNSUPPORTED[_n] = f"MAX has no {_n} kernel: it runs on the host (NumPy's LAPACK)"
UNSUPPORTED["random_gamma_grad"] = (
    "the gamma draws' derivative (an incomplete gamma function) runs on the host"
)
for _n in ("igamma", "igamma_grad_a", "betainc", "betainc_grad_ab"):
    UNSUPPORTED[_n] = f"{_n} (an incomplete gamma or beta function) runs on the host, in float64"
UNSUPPORTED["pure_callback"] = "pure_callback runs the user's Python on the host"


def max_dtype(dt):
    """nabla ``DType`` -> ``max.dtype.DType`` (same names)."""
    return getattr(MDType, dt.value)


def device_ref(device):
    """nabla ``Device`` -> ``max.graph.DeviceRef``."""
    return DeviceRef.CPU() if device.is_cpu else DeviceRef.GPU(device.id)


def unsupported_reason(name: str, dtypes, device) -> str | None:
    """Why op ``name`` on inputs of ``dtypes`` cannot run on ``device`` (None when it can)."""
    if name in UNSUPPORTED:
        return UNSUPPORTED[name]
    if name not in LOWERINGS:
        return "the MAX backend has no lowering for it"
    if not device.is_cpu:
        names = {d.value for d in dtypes}
        if name == "matmul" and not names <= {"float32", "float16", "bfloat16"}:
            return "MAX matmul kernels on GPU take float32/float16/bfloat16 only"
        if name in _NO_F64_ON_GPU and "float64" in names:
            return f"MAX's {name} kernel has no float64 version on NVIDIA GPUs"
    return None


# seen failing to compile on an H200 (Mojo's math: "DType.float64 is not supported for sin
# on NVIDIA GPU"); tan is computed from them
_NO_F64_ON_GPU = frozenset({"sin", "cos", "tan"})


# ----------------------------------------------------------------------------- helpers
_HALF = ("float16", "bfloat16")


def _name(v) -> str:
    return str(v.dtype).rsplit(".", 1)[-1]


def _is_float(v) -> bool:
    return _name(v) in ("float16", "bfloat16", "float32", "float64")


def _is_bool(v) -> bool:
    return _name(v) == "bool"


def _c(value, like, dtype=None):
    """A 0-d constant with ``like``'s dtype (or ``dtype``) on ``like``'s device."""
    return ops.constant(value, dtype or like.dtype, device=like.device)


def _host(value, like):
    """A 0-d constant with ``like``'s dtype on the CPU: MAX takes scalar operands of some ops
    (``pad``'s fill value) from the host whatever device the data is on."""
    return ops.constant(value, like.dtype, device=DeviceRef.CPU())


def _on_host(pred):
    """A ``cond``/``while_loop`` predicate on the CPU, where MAX requires it (control flow
    is driven by the host; a GPU predicate is copied back each time it is read)."""
    return pred if pred.device == DeviceRef.CPU() else ops.transfer_to(pred, DeviceRef.CPU())


def _shape(v) -> tuple:
    return tuple(int(d) for d in v.shape)


def _one(name):
    def deco(fn):
        LOWERINGS[name] = lambda args, kw: [fn(*args, **kw)]
        return fn

    return deco


def _upcast(fn):
    """Run a composite in float32 for float16/bfloat16 inputs (accuracy), cast back."""

    def run(x, *rest):
        if _name(x) in _HALF:
            dt = x.dtype
            out = fn(ops.cast(x, MDType.float32), *(ops.cast(r, MDType.float32) for r in rest))
            return ops.cast(out, dt)
        return fn(x, *rest)

    return run


def _elementwise(name, fn):
    LOWERINGS[name] = lambda args, kw: [fn(*args)]


# ----------------------------------------------------------------------------- unary math
def _expm1(x):
    # Kahan's trick: accurate near 0 without a native expm1.
    u = ops.exp(x)
    um1 = u - _c(1.0, x)
    r = ops.where(ops.equal(u, _c(1.0, x)), x, um1 * x / ops.log(u))
    r = ops.where(ops.equal(um1, _c(-1.0, x)), _c(-1.0, x), r)
    return ops.where(ops.is_inf(u), u, r)


def _atan_f32(x):
    # Cephes atanf: range reduction to |x| <= tan(pi/8), then a degree-9 odd polynomial.
    ax = ops.abs(x)
    big = ops.greater(ax, _c(2.414213562373095, x))
    mid = ops.greater(ax, _c(0.4142135623730950, x))
    t = ops.where(big, _c(-1.0, x) / ax, ops.where(mid, (ax - _c(1.0, x)) / (ax + _c(1.0, x)), ax))
    y0 = ops.where(big, _c(math.pi / 2, x), ops.where(mid, _c(math.pi / 4, x), _c(0.0, x)))
    z = t * t
    p = _c(8.05374449538e-2, x) * z - _c(1.38776856032e-1, x)
    p = p * z + _c(1.99777106478e-1, x)
    p = p * z - _c(3.33329491539e-1, x)
    y = y0 + (p * z * t + t)
    return _copysign(y, x)


_ATAN_P = (
    -8.750608600031904122785e-1,
    -1.615753718733365076637e1,
    -7.500855792314704667340e1,
    -1.228866684490136173410e2,
    -6.485021904942025371773e1,
)
_ATAN_Q = (
    2.485846490142306297962e1,
    1.650270098316988542046e2,
    4.328810604912902668951e2,
    4.853903996359136964868e2,
    1.945506571482613964425e2,
)


def _atan_f64(x):
    # Cephes atan (double): rational approximation after range reduction.
    ax = ops.abs(x)
    big = ops.greater(ax, _c(2.41421356237309504880, x))
    mid = ops.greater(ax, _c(0.66, x))
    one = _c(1.0, x)
    t = ops.where(big, _c(-1.0, x) / ax, ops.where(mid, (ax - one) / (ax + one), ax))
    y0 = ops.where(big, _c(math.pi / 2, x), ops.where(mid, _c(math.pi / 4, x), _c(0.0, x)))
    more = ops.where(
        big,
        _c(6.123233995736765886130e-17, x),
        ops.where(mid, _c(0.5 * 6.123233995736765886130e-17, x), _c(0.0, x)),
    )
    z = t * t
    p = _c(_ATAN_P[0], x)
    for coef in _ATAN_P[1:]:
        p = p * z + _c(coef, x)
    q = z + _c(_ATAN_Q[0], x)
    for coef in _ATAN_Q[1:]:
        q = q * z + _c(coef, x)
    r = t * (z * p / q) + t
    return _copysign(y0 + (r + more), x)


def _copysign(mag, x):
    return ops.where(ops.greater_equal(x, _c(0.0, x)), mag, -mag)


def _atan(x):
    if _name(x) == "float64":
        return _atan_f64(x)
    return _upcast(_atan_f32)(x)


def _asin(x):
    one = _c(1.0, x)
    return _atan(x / ops.sqrt((one - x) * (one + x)))


def _acos(x):
    one = _c(1.0, x)
    return _c(2.0, x) * _atan(ops.sqrt((one - x) / (one + x)))


def _negative(v):
    """``v < 0`` counting -0.0 as negative (its reciprocal is -inf): IEEE's sign bit."""
    zero = _c(0.0, v)
    is_zero = ops.equal(v, zero)
    safe = ops.where(is_zero, v, _c(1.0, v))
    return ops.logical_or(
        ops.greater(zero, v), ops.logical_and(is_zero, ops.greater(zero, _c(1.0, v) / safe))
    )


def _atan2(y, x):
    """C99/NumPy ``atan2`` including signed zeros and infinite arguments."""
    pi = _c(math.pi, x)
    zero = _c(0.0, x)
    y_neg = _negative(y)
    a = _atan(y / x)
    # x < 0 (or -0.0): the angle is beyond +-pi/2, on the side of y's sign
    beyond = ops.where(y_neg, a - pi, a + pi)
    x_zero = ops.equal(x, zero)
    half = ops.where(y_neg, _c(-math.pi / 2, x), _c(math.pi / 2, x))
    y_zero = ops.equal(y, zero)
    # y = +-0: +-0 for x >= +0, +-pi for x <= -0
    on_axis = ops.where(_negative(x), ops.where(y_neg, -pi, pi), y)
    r = ops.where(ops.greater(x, zero), a, beyond)
    r = ops.where(x_zero, half, r)
    r = ops.where(y_zero, on_axis, r)
    # both infinite: +-pi/4 or +-3pi/4
    quarter = ops.where(ops.greater(x, zero), _c(math.pi / 4, x), _c(3 * math.pi / 4, x))
    both_inf = ops.logical_and(ops.is_inf(x), ops.is_inf(y))
    r = ops.where(both_inf, ops.where(y_neg, -quarter, quarter), r)
    nan = ops.logical_or(ops.is_nan(x), ops.is_nan(y))
    return ops.where(nan, x + y, r)


@_upcast
def _sinh(x):
    ax = ops.abs(x)
    e = ops.exp(ax - _c(math.log(2.0), x))  # e^|x| / 2
    large = _copysign(e - _c(0.25, x) / e, x)
    small = (_expm1(x) - _expm1(-x)) * _c(0.5, x)
    return ops.where(ops.greater(_c(1.0, x), ax), small, large)


@_upcast
def _cosh(x):
    e = ops.exp(ops.abs(x) - _c(math.log(2.0), x))
    return e + _c(0.25, x) / e


def _tan(x):
    return ops.sin(x) / ops.cos(x)


def _log2(x):
    return ops.log(x) * _c(1.0 / math.log(2.0), x)


def _log10(x):
    return ops.log(x) * _c(1.0 / math.log(10.0), x)


def _sign(x):
    zero = _c(0, x)
    if _is_bool(x):
        return x
    if _is_unsigned(x):  # (no -1 in the dtype)
        return ops.where(ops.greater(x, zero), _c(1, x), zero)
    pos = ops.where(ops.greater(x, zero), _c(1, x), x)
    return ops.where(ops.greater(zero, x), _c(-1, x), pos)


def _relu(x):
    if _is_float(x):
        return ops.relu(x)
    return ops.max(x, _c(0, x))


def _keep_nan(fn):
    """``fn`` with NaN inputs giving NaN: MAX's exp/tanh/sigmoid/relu map NaN to a number
    (exp(nan) = inf, tanh(nan) = 1, relu(nan) = 0), NumPy and JAX propagate it."""

    def run(x):
        r = fn(x)
        return ops.where(ops.is_nan(x), x, r) if _is_float(x) else r

    return run


def _false_like(x):
    return ops.broadcast_to(ops.constant(False, MDType.bool, device=x.device), _shape(x))


def _is_nan(x):
    return ops.is_nan(x) if _is_float(x) else _false_like(x)


def _is_inf(x):
    return ops.is_inf(x) if _is_float(x) else _false_like(x)


def _is_unsigned(x) -> bool:
    return _name(x).startswith("uint")


def _bitwise_not(x):
    if _is_bool(x):
        return ops.logical_not(x)
    if _is_unsigned(x):  # all ones (uint16: 2**16 - 1) minus x
        return _c((1 << (8 * _INT_BYTES[_name(x)])) - 1, x) - x
    return -x - _c(1, x)


def _neg(x):
    # MAX's negate does not compile for unsigned ints (and it folds ``0 - x`` into one);
    # ``~x + 1`` wraps as NumPy's ``-x`` does
    return _bitwise_not(x) + _c(1, x) if _is_unsigned(x) else ops.negate(x)


for _n, _f in {
    "abs": ops.abs if ops else None,
    "neg": _neg,
    "exp": _keep_nan(ops.exp) if ops else None,
    "expm1": _keep_nan(_upcast(_expm1)),
    "log": ops.log if ops else None,
    "log1p": ops.log1p if ops else None,
    "log2": _log2,
    "log10": _log10,
    "sin": ops.sin if ops else None,
    "cos": ops.cos if ops else None,
    "tan": _upcast(_tan),
    "asin": _asin,
    "acos": _acos,
    "atan": _atan,
    "sinh": _keep_nan(_sinh),
    "cosh": _keep_nan(_cosh),
    "tanh": _keep_nan(_upcast(ops.tanh)) if ops else None,  # (float16's own is off past 3)
    "atanh": ops.atanh if ops else None,
    "erf": ops.erf if ops else None,
    "sqrt": ops.sqrt if ops else None,
    "rsqrt": ops.rsqrt if ops else None,
    "reciprocal": lambda x: _c(1.0, x) / x,
    "sigmoid": _keep_nan(ops.sigmoid) if ops else None,
    "sign": _sign,
    "floor": ops.floor if ops else None,
    "ceil": ops.ceil if ops else None,
    "round": ops.round if ops else None,
    "trunc": ops.trunc if ops else None,
    "is_nan": _is_nan,
    "is_inf": _is_inf,
    "logical_not": ops.logical_not if ops else None,
    "bitwise_not": _bitwise_not,
    "identity": lambda x: x,
    "relu": _keep_nan(_relu),
}.items():
    _elementwise(_n, _f)


# ----------------------------------------------------------------------------- binary
def _add(x, y):
    return ops.logical_or(x, y) if _is_bool(x) else ops.add(x, y)


def _mul(x, y):
    return ops.logical_and(x, y) if _is_bool(x) else ops.mul(x, y)


def _div(x, y):
    return ops.div(x, y)


def _int_div_guard(x, y):
    """Integer division in MAX traps (SIGFPE) on ``y == 0`` and ``MIN // -1``; NumPy gives 0
    and wraps. Returns (safe divisor, y == 0 mask, y == -1 mask or None)."""
    zero = ops.equal(y, _c(0, y))
    if _is_unsigned(y):
        return ops.where(zero, _c(1, y), y), zero, None
    m1 = ops.equal(y, _c(-1, y))
    return ops.where(ops.logical_or(zero, m1), _c(1, y), y), zero, m1


def _float_div_edges(x, y, res, kind):
    """NumPy's ``floor_divide``/``mod`` where MAX's ``x - floor(x / y) * y`` differs: a
    finite ``x`` over an infinite ``y`` (NumPy: ``x`` or ``y`` for the remainder, 0 or -1
    for the quotient, by the signs) and an infinite ``x`` (NaN for both, but ``x / 0``)."""
    zero = _c(0, x)
    finite_x = ops.logical_not(ops.logical_or(ops.is_inf(x), ops.is_nan(x)))
    over_inf = ops.logical_and(ops.is_inf(y), finite_x)
    y_negative = ops.greater(zero, y)
    same = ops.equal(ops.greater(zero, x), y_negative)
    is_zero = ops.equal(x, zero)
    if kind == "mod":  # a zero remainder takes the divisor's sign
        signed_zero = ops.where(y_negative, _c(-0.0, x), zero)
        edge = ops.where(is_zero, signed_zero, ops.where(same, x, y))
        return ops.where(over_inf, edge, res)
    edge = ops.where(is_zero, ops.div(x, y), ops.where(same, zero, _c(-1, x)))
    res = ops.where(over_inf, edge, res)
    inf_x = ops.logical_and(ops.is_inf(x), ops.logical_not(ops.equal(y, zero)))  # inf/0: inf
    return ops.where(inf_x, _c(float("nan"), x), res)


def _floor_div(x, y):
    if _is_float(x):
        return _float_div_edges(x, y, ops.floor_div(x, y), "floor_div")
    safe, zero, m1 = _int_div_guard(x, y)
    q = ops.floor_div(x, safe)
    if m1 is not None:
        q = ops.where(m1, -x, q)
    return ops.where(zero, _c(0, x), q)


def _mod(x, y):
    if _is_float(x):
        if _name(x) != "float64" and x.device == DeviceRef.CPU():
            res = ops.cast(
                _exact_mod(ops.cast(x, MDType.float64), ops.cast(y, MDType.float64)), x.dtype
            )
        else:  # (exact while |x / y| < 2**53)
            res = ops.mod(x, y)
        return _float_div_edges(x, y, res, "mod")
    safe, zero, m1 = _int_div_guard(x, y)
    r = ops.mod(x, safe)
    return ops.where(zero, _c(0, x), r)


# MAX's float ``mod`` is ``x - floor(x / y) * y``: once the quotient is past the float's
# integers (|x / y| >= 2**24 in float32) it is far off (``1e10 % 3`` gave 256). For
# float32 and narrower, ``_exact_mod`` reduces in float64 by chunks of 28 bits of the
# quotient, from the largest ratio the dtypes allow (2**277) down: each product
# ``q * y * 2**k`` has at most 29 + 24 bits and each difference is a multiple of the
# coarser of x's and that product's last bit, so every step is exact, as ``fmod`` is.
_MOD_CHUNKS = tuple(2.0 ** (28 * j) for j in range(9, -1, -1))


def _exact_mod(x, y):
    """NumPy's float ``mod`` of float64 ``x``, ``y`` holding float32 (or narrower) values."""
    r = x
    for scale in _MOD_CHUNKS:
        ys = y * _c(scale, y)
        r = r - ops.trunc(r / ys) * ys
    # r is x's remainder up to one |y| either way (the last quotient may round over)
    ay = ops.abs(y)
    r = ops.where(ops.greater_equal(ops.abs(r), ay), r - _copysign(ay, r), r)
    r = ops.where(ops.greater(_c(0.0, r), r * _copysign(_c(1.0, x), x)), r + _copysign(ay, x), r)
    # fmod's sign (x's) to floor's (y's)
    zero = _c(0.0, r)
    flip = ops.logical_and(
        ops.logical_not(ops.equal(r, zero)),
        ops.logical_not(ops.equal(ops.greater(zero, r), ops.greater(zero, y))),
    )
    r = ops.where(flip, r + y, r)
    return ops.where(ops.equal(r, zero), _copysign(zero, y), r)


def ieee_not_equal(x, y):
    # MAX's not_equal is False for NaN operands; IEEE (NumPy) says NaN != anything
    if _is_float(x):
        return ops.logical_not(ops.equal(x, y))
    return ops.not_equal(x, y)


def _pow(x, y):
    """MAX's ``pow`` plus the C99/NumPy special cases it gets wrong: a NaN operand gives NaN
    (except ``x ** 0`` and ``1 ** y``, which are 1), an infinite or huge exponent
    (|y| >= 2**24 for float32, 2**53 for float64: every such float is an even integer) gives
    0, 1 or inf by whether |x| is below, at or above 1, and ``(-inf) ** y`` for a non-integer
    y is inf (y > 0) or 0 (y < 0), not NaN."""
    r = ops.pow(x, y)
    if not _is_float(x):
        return r
    one, zero = _c(1.0, x), _c(0.0, x)
    ax = ops.abs(x)
    fraction = ops.logical_not(ops.equal(ops.floor(y), y))
    neg_inf = ops.logical_and(ops.equal(x, _c(-math.inf, x)), fraction)
    r = ops.where(neg_inf, ops.where(ops.greater(y, zero), _c(math.inf, x), zero), r)
    huge = ops.greater_equal(ops.abs(y), _c(2.0 ** (53 if _name(x) == "float64" else 24), x))
    grows = ops.equal(ops.greater(ax, one), ops.greater(y, zero))
    limit = ops.where(ops.equal(ax, one), one, ops.where(grows, _c(math.inf, x), zero))
    r = ops.where(huge, limit, r)
    r = ops.where(ops.logical_or(ops.is_nan(x), ops.is_nan(y)), x + y, r)
    return ops.where(ops.logical_or(ops.equal(y, zero), ops.equal(x, one)), one, r)


def _nan_either(x, y, r):
    if not _is_float(x):
        return r
    return ops.where(ops.logical_or(ops.is_nan(x), ops.is_nan(y)), x + y, r)


def _maximum(x, y):
    if _is_bool(x):
        return ops.logical_or(x, y)
    return _nan_either(x, y, ops.max(x, y))


def _minimum(x, y):
    if _is_bool(x):
        return ops.logical_and(x, y)
    return _nan_either(x, y, ops.min(x, y))


_LUTS: dict = {}


def _lut(kind: str):
    """A 65536-entry uint8 table: ``lut[a * 256 + b] = a <op> b`` for bytes a, b."""
    t = _LUTS.get(kind)
    if t is None:
        import numpy as np

        a = np.arange(256, dtype=np.uint8)[:, None]
        b = np.arange(256, dtype=np.uint8)[None, :]
        fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[kind]
        t = _LUTS[kind] = np.ascontiguousarray(fn(a, b).reshape(-1))
    return t


_INT_BYTES = {
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
}


def _bitwise(logical, kind):
    """Bitwise ops on integers through a byte lookup table (MAX has no bitwise ops).

    All bytes at once: ``floor_div(x, 256**k) mod 256`` (exact on two's complement values)
    along a new leading axis, one gather from a 65536-entry table, and a weighted sum that
    wraps back to the right bits."""

    def run(x, y):
        if _is_bool(x):
            return logical(x, y)
        import numpy as np

        n = _INT_BYTES[_name(x)]
        work, wnp = (MDType.int64, np.int64) if n == 8 else (MDType.int32, np.int32)
        rank = max(len(_shape(x)), len(_shape(y)))  # operands may broadcast in the kernel
        lead = (n,) + (1,) * rank
        scale = np.array([1 << (8 * k) for k in range(n)], dtype=np.int64).astype(wnp)
        scale = ops.constant(scale.reshape(lead), work, device=x.device)
        base = ops.constant(256, work, device=x.device)
        qa = ops.mod(ops.floor_div(ops.cast(x, work), scale), base)  # (n, *shape) bytes
        qb = ops.mod(ops.floor_div(ops.cast(y, work), scale), base)
        lut = ops.constant(_lut(kind), MDType.uint8, device=x.device)
        r = ops.cast(ops.gather(lut, qa * base + qb, axis=0), work)
        return ops.cast(ops.sum(r * scale, axis=0), x.dtype)

    return run


_bit_and = _bitwise(lambda x, y: ops.logical_and(x, y), "and")
_bit_or = _bitwise(lambda x, y: ops.logical_or(x, y), "or")
_bit_xor = _bitwise(lambda x, y: ops.logical_xor(x, y), "xor")


def _shift(left: bool):
    """``x << y`` / ``x >> y`` with NumPy's results (MAX has no shift ops): a multiply by, or
    a floor division by, ``2**y`` read from a table of the dtype's powers of two. Counts
    outside the table (negative, or at least the bit width) give 0; a signed right shift by
    ``bits - 1`` or more gives the sign (-1 or 0), as the arithmetic shift does."""

    def run(x, y):
        import numpy as np

        name = _name(x)
        bits = 8 * _INT_BYTES[name]
        signed = not name.startswith("uint")
        top = bits - 1 if signed and not left else bits  # counts the table covers
        inside = ops.greater(_c(top, y), y)
        if signed:
            inside = ops.logical_and(inside, ops.greater_equal(y, _c(0, y)))
        # 2**(bits - 1) wraps to the minimum of a signed dtype: x * it is still x << (bits - 1)
        table = np.array([1 << k for k in range(top)], np.uint64).astype(name)
        count = ops.cast(ops.where(inside, y, _c(0, y)), MDType.int64)
        p = ops.gather(ops.constant(table, x.dtype, device=x.device), count, axis=0)
        if left:
            return ops.where(inside, ops.mul(x, p), _c(0, x))
        outside = _c(0, x)
        if signed:
            outside = ops.where(ops.greater(_c(0, x), x), _c(-1, x), _c(0, x))
        return ops.where(inside, ops.floor_div(x, p), outside)

    return run


for _n, _f in {
    "add": _add,
    "sub": lambda x, y: ops.sub(x, y),
    "mul": _mul,
    "div": _div,
    "floor_div": _floor_div,
    "mod": _mod,
    "pow": _upcast(_pow),  # (bfloat16's own is off by several ulps)
    "maximum": _maximum,
    "minimum": _minimum,
    "atan2": _upcast(_atan2),
    "equal": lambda x, y: ops.equal(x, y),
    "not_equal": ieee_not_equal,
    "greater": lambda x, y: ops.greater(x, y),
    "greater_equal": lambda x, y: ops.greater_equal(x, y),
    "less": lambda x, y: ops.greater(y, x),
    "less_equal": lambda x, y: ops.greater_equal(y, x),
    "bitwise_and": _bit_and,
    "bitwise_or": _bit_or,
    "bitwise_xor": _bit_xor,
    "left_shift": _shift(left=True),
    "right_shift": _shift(left=False),
    "logical_and": lambda x, y: ops.logical_and(x, y),
    "logical_or": lambda x, y: ops.logical_or(x, y),
    "logical_xor": lambda x, y: ops.logical_xor(x, y),
    "where": lambda c, x, y: ops.where(c, x, y),
}.items():
    _elementwise(_n, _f)


@_one("cast")
def _cast(x, dtype):
    target = max_dtype(dtype)
    if target == x.dtype:
        return x
    if dtype.is_bool:
        return ieee_not_equal(x, _c(0, x))  # NaN is True, as NumPy's cast
    out = ops.cast(x, target)
    if _is_float(x) and not dtype.is_float:
        # float -> int saturates and NaN is 0, as JAX/XLA and the NumPy backend
        info = np.iinfo(dtype.numpy)
        lo, hi = float(info.min), float(info.max) + 1.0  # powers of two (or 0)
        # exact in float32/64; a 16-bit float is compared in float32 (2**31 is inf there)
        w = ops.cast(x, MDType.float32) if _name(x) in ("float16", "bfloat16") else x
        out = ops.where(ops.greater_equal(w, _c(hi, w)), _c(int(info.max), out), out)
        out = ops.where(ops.greater(_c(lo, w), w), _c(int(info.min), out), out)
        out = ops.where(ops.is_nan(w), _c(0, out), out)
    return out


# ----------------------------------------------------------------------------- symbolic sizes
# kwargs whose sizes may be symbolic in a program compiled once for every size (a dynamic
# dim's name, or a derived size ``(DIM_TAG, op, a, b)``): the graph builder turns them into
# MAX dims (``max_dims``) before the lowering sees them
SIZE_KWARGS = {
    "reshape": ("shape",),
    "broadcast_to": ("shape",),
    "broadcast_in_dim": ("shape",),
    "full": ("shape", "value"),
    "arange": ("length",),
    "slice": ("slices",),
}


def max_dims(obj):
    """``obj`` (nested tuples of sizes) with each symbolic size as a MAX ``Dim``."""
    if isinstance(obj, str):
        return Dim(obj)
    if isinstance(obj, tuple):
        if len(obj) == 4 and obj[0] == DIM_TAG:
            a, b = max_dims(obj[2]), max_dims(obj[3])
            if not isinstance(a, Dim):  # int op Dim: MAX's dims compose from the left
                a = Dim(a)
            return DIM_OPS[obj[1]](a, b)  # + - * // (a % is compiled per size)
        return tuple(max_dims(o) for o in obj)
    return obj


# ----------------------------------------------------------------------------- creation
@_one("full")
def _full(shape, value, dtype, device):
    if Dim is not None and isinstance(value, Dim):  # a dynamic size as a value
        v = ops.reshape(ops.shape_to_tensor([value]), ())
        v = ops.transfer_to(ops.cast(v, max_dtype(dtype)), device_ref(device))
    else:
        v = ops.constant(value, max_dtype(dtype), device=device_ref(device))
    return ops.broadcast_to(v, tuple(shape)) if shape else v


@_one("arange")
def _arange(start, step, length, dtype, device):
    dev = device_ref(device)
    i = ops.range(0, length, 1, out_dim=length, dtype=MDType.int64, device=dev)
    if dtype.is_float:
        work = MDType.float64 if device.is_cpu else MDType.float32
        v = ops.cast(i, work) * ops.constant(float(step), work, device=dev)
        v = v + ops.constant(float(start), work, device=dev)
    else:
        v = i * ops.constant(int(step), MDType.int64, device=dev)
        v = v + ops.constant(int(start), MDType.int64, device=dev)
    return ops.cast(v, max_dtype(dtype))


# ----------------------------------------------------------------------------- reductions
def _reduce(kind):
    def run(x, axes, keepdims):
        if _is_bool(x):
            x = ops.cast(x, MDType.int32)
        fn = {"sum": ops.sum, "prod": ops.prod, "max": ops.max, "min": ops.min}[kind]
        out = x
        for a in axes:
            out = fn(out, axis=a)  # MAX keeps the reduced axis; the builder reshapes
        if kind in ("max", "min") and axes and _is_float(x):
            nan = ops.cast(ops.is_nan(x), MDType.int32)
            # MAX starts a max at the lowest finite value (a min at the highest): a row
            # of -inf only (+inf for a min) came back as that value
            inf = _c(-math.inf if kind == "max" else math.inf, x)
            live = ops.cast(ops.logical_not(ops.equal(x, inf)), MDType.int32)
            for a in axes:
                nan = ops.max(nan, axis=a)
                live = ops.max(live, axis=a)
            out = ops.where(ops.equal(live, _c(0, live)), inf, out)
            out = ops.where(ops.greater(nan, _c(0, nan)), _c(float("nan"), out), out)
        return out

    return run


_one("reduce_sum")(_reduce("sum"))
_one("reduce_prod")(_reduce("prod"))
_one("reduce_max")(_reduce("max"))
_one("reduce_min")(_reduce("min"))


def _arg(fn):
    def run(x, axis, keepdims):
        if _is_bool(x):
            x = ops.cast(x, MDType.int32)
        out = fn(x, axis=axis)
        if _is_float(x):  # NumPy: the first NaN wins
            nan = ops.is_nan(x)
            has = ops.max(ops.cast(nan, MDType.int32), axis=axis)
            first = ops.argmax(ops.cast(nan, MDType.int32), axis=axis)
            out = ops.where(ops.greater(has, _c(0, has)), first, out)
        return out

    return run


_one("argmax")(_arg(lambda x, axis: ops.argmax(x, axis=axis)))
_one("argmin")(_arg(lambda x, axis: ops.argmin(x, axis=axis)))


@_one("cumsum")
def _cumsum(x, axis, exclusive, reverse):
    if _is_bool(x):
        x = ops.cast(x, MDType.int32)
    return ops.cumsum(x, axis=axis, exclusive=exclusive, reverse=reverse)


@_one("cumprod")
def _cumprod(x, axis):
    """MAX has no cumulative product (and ``exp(cumsum(log x))`` fails on zeros and negative
    values): log2(n) rounds of multiplying by the values ``d`` places before (Hillis and
    Steele), in float32 for 16-bit floats as the NumPy backend accumulates."""
    if _is_bool(x):
        x = ops.cast(x, MDType.int32)
    dt = x.dtype
    if _name(x) in _HALF:
        x = ops.cast(x, MDType.float32)
    n = _shape(x)[axis]
    d = 1
    while d < n:
        key = [slice(None)] * len(_shape(x))
        key[axis] = slice(0, n - d)
        pads = [0, 0] * len(_shape(x))
        pads[2 * axis] = d
        x = x * ops.pad(x[tuple(key)], pads, mode="constant", value=_host(1, x))
        d *= 2
    return ops.cast(x, dt) if x.dtype != dt else x


# ----------------------------------------------------------------------------- views
@_one("reshape")
def _reshape(x, shape):
    return ops.reshape(x, tuple(shape))


@_one("broadcast_to")
def _broadcast_to(x, shape):
    return ops.broadcast_to(x, tuple(shape))


@_one("broadcast_in_dim")
def _broadcast_in_dim(x, shape, dims):
    inter = [1] * len(shape)
    xs = _shape(x)
    for src, dst in enumerate(dims):
        inter[dst] = xs[src]
    return ops.broadcast_to(ops.reshape(x, tuple(inter)), tuple(shape))


@_one("transpose")
def _transpose(x, perm):
    return ops.permute(x, list(perm))


def _flip_axis(x, axis):
    n = _shape(x)[axis]
    if n <= 1:
        return x
    idx = ops.range(n - 1, -1, -1, out_dim=n, dtype=MDType.int64, device=x.device)
    return ops.gather(x, idx, axis=axis)


@_one("flip")
def _flip(x, axes):
    for a in axes:
        x = _flip_axis(x, a)
    return x


def _pos_slices(slices):
    """(start, step, length) per axis -> (python slices with positive steps, axes to flip)."""
    out, flips = [], []
    for axis, (start, step, length) in enumerate(slices):
        if length == 0:
            out.append(slice(0, 0, 1))
        elif step > 0:
            out.append(slice(start, start + step * (length - 1) + 1, step))
        else:
            lo = start + step * (length - 1)
            out.append(slice(lo, start + 1, -step))
            if length > 1:
                flips.append(axis)
    return out, flips


@_one("slice")
def _slice(x, slices):
    pos, flips = _pos_slices(slices)
    if not slices:
        return x
    out = x[tuple(pos)]
    for a in flips:
        out = _flip_axis(out, a)
    return out


@_one("slice_update")
def _slice_update(x, update, slices):
    shape = _shape(x)
    if any(s[2] == 0 for s in slices) or not slices:
        return x if slices else update
    pos, flips = _pos_slices(slices)
    for a in flips:  # write the reversed region forwards
        update = _flip_axis(update, a)
    if all(p.step == 1 for p in pos):
        pads = []
        for p, d in zip(pos, shape):
            pads += [p.start, d - p.stop]
        placed = ops.pad(update, pads, mode="constant", value=_host(0, update))
        ones = ops.broadcast_to(ops.constant(True, MDType.bool, device=x.device), _shape(update))
        mask = ops.pad(ones, pads, mode="constant", value=_host(False, ones))
        return ops.where(mask, placed, x)
    # Strided region: scatter_nd with an explicit index grid.
    ushape = _shape(update)
    grids = []
    for axis, p in enumerate(pos):
        n = ushape[axis]
        g = ops.range(
            p.start, p.start + p.step * n, p.step, out_dim=n, dtype=MDType.int64, device=x.device
        )
        view = [1] * len(ushape)
        view[axis] = n
        grids.append(ops.broadcast_to(ops.reshape(g, tuple(view)), ushape))
    idx = ops.stack(grids, axis=-1)
    return ops.scatter_nd(x, update, idx)


def _tap_region(kw, i: int, j: int):
    """Window tap ``(i, j)``'s positions in ``(H, W)`` as ``(start, step, length)`` each."""
    (sh, sw), (dh, dw), (oh, ow) = kw["stride"], kw["dilation"], kw["out"]
    return (i * dh, sh, oh), (j * dw, sw, ow)


@_one("windows")
def _windows(x, **kw):
    lead = len(x.shape) - 3
    kh, kw_ = kw["kernel"]
    taps = []
    for i in range(kh):
        for j in range(kw_):
            pos, _ = _pos_slices(_tap_region(kw, i, j))
            taps.append(x[(slice(None),) * lead + tuple(pos) + (slice(None),)])
    return ops.stack(taps, axis=lead + 2)


@_one("windows_sum")
def _windows_sum(cols, **kw):
    lead = len(cols.shape) - 4
    kh, kw_ = kw["kernel"]
    shape = _shape(cols)
    out_shape = (*shape[:lead], *kw["size"], shape[-1])
    zeros = ops.broadcast_to(_c(0, cols), out_shape)
    parts = ops.split(cols, [1] * (kh * kw_), axis=lead + 2)
    total = None
    for k, part in enumerate(parts):
        rows, cs = _tap_region(kw, *divmod(k, kw_))
        region = ((0, 1, n) for n in shape[:lead])
        placed = _slice_update(
            zeros, ops.squeeze(part, lead + 2), (*region, rows, cs, (0, 1, shape[-1]))
        )
        total = placed if total is None else total + placed
    return total


@_one("pad")
def _pad(x, pads, value):
    flat = [int(v) for lo_hi in pads for v in lo_hi]
    return ops.pad(x, flat, mode="constant", value=_host(value, x))


def _concatenate(args, kw):
    return [ops.concat(list(args), axis=kw["axis"])]


LOWERINGS["concatenate"] = _concatenate


def _split(args, kw):
    return list(ops.split(args[0], list(kw["sizes"]), axis=kw["axis"]))


LOWERINGS["split"] = _split


# ----------------------------------------------------------------------------- linalg / indexing
@_one("matmul")
def _matmul(x, y):
    if len(x.shape) >= 2 and len(y.shape) >= 2 and str(x.shape[-1]) == "1":
        # a contraction over one element is an outer product (per-example gradients of a
        # dense layer): as a broadcast multiply it is one fused, vectorized loop; MAX's
        # matmul kernel ran per-example outer products 1.2-1.3x slower
        return ops.mul(x, y)
    if "loop" in _REGIONS:
        y = _layout_barrier(y)
    return ops.matmul(x, y)


def _layout_barrier(y):
    """``y`` through an identity gather along its K axis. MAX 26.7 gives a matmul's right
    operand a packed layout and pushes it back through view and elementwise ops onto the
    producing loop argument; for an argument that changes every iteration the loop's types
    then disagree and the graph fails to compile. A gather is not looked through."""
    shape = y.shape
    axis = len(shape) - 2 if len(shape) >= 2 else 0
    k = shape[axis]
    try:
        k = int(k)
    except (TypeError, ValueError):  # a symbolic dim: leave the operand as it is
        return y
    idx = ops.range(0, k, 1, out_dim=k, dtype=MDType.int64, device=y.device)
    return ops.gather(y, idx, axis=axis)


def _int64(v):
    return v if _name(v) == "int64" else ops.cast(v, MDType.int64)


def _flatten_batch(v, nb):
    s = _shape(v)
    return ops.reshape(v, (math.prod(s[:nb]),) + s[nb:])


# An index computed in the graph can be out of range when the program runs; a graph cannot
# raise (the NumPy backend does), so MAX follows JAX there: a gather clamps the index into
# range and a scatter drops the update (MAX's own scatter_nd leaves an out-of-range write
# undefined). Negative indices arrive counted from the end already: one still negative was
# below -n (MAX would wrap it again).
def _clamped(idx, x, axis):
    try:
        n = int(x.shape[axis])
    except (TypeError, ValueError):  # a symbolic dim: MAX's own bounds check stays
        return idx
    lo, hi = _c(0, idx), _c(max(n, 1) - 1, idx)
    return ops.min(ops.max(idx, lo), hi)


@_one("gather")
def _gather(x, idx, axis, batch_dims=0, what=None):
    idx = _clamped(_int64(idx), x, axis)
    if batch_dims == 0 and not _shape(idx):
        # MAX's gather kernel has no 0-d index (its instantiation fails): a 1-element index,
        # then that dim dropped
        got = ops.gather(x, ops.reshape(idx, (1,)), axis=axis)
        return ops.squeeze(got, axis)
    if batch_dims == 0:
        return ops.gather(x, idx, axis=axis)
    a = axis - batch_dims
    xf = _flatten_batch(x, batch_dims)  # (P, *rest)
    idf = _flatten_batch(idx, batch_dims)  # (P, *ish)
    r = len(_shape(xf)) - 1
    k = len(_shape(idf)) - 1
    # (P, rest[a], rest[:a], rest[a+1:]) so the gathered axis follows the batch axis
    perm = [0, a + 1] + [i + 1 for i in range(r) if i != a]
    g = ops.gather_nd(ops.permute(xf, perm), ops.unsqueeze(idf, -1), batch_dims=1)
    # g: (P, *ish, *rest[:a], *rest[a+1:]) -> (P, *rest[:a], *ish, *rest[a+1:])
    back = [0] + list(range(k + 1, k + 1 + a)) + list(range(1, k + 1))
    back += list(range(k + 1 + a, k + r))
    return ops.permute(g, back)


@_one("scatter")
def _scatter(x, idx, upd, axis, mode, batch_dims=0, what=None):
    dt = None
    if _is_bool(x) and mode != "set":
        dt = x.dtype
        x, upd = ops.cast(x, MDType.int32), ops.cast(upd, MDType.int32)
    xs = _shape(x)
    ish = _shape(idx)[batch_dims:]
    lead = xs[:batch_dims]
    rest = xs[batch_dims:]
    a = axis - batch_dims
    p = math.prod(lead)
    k = len(ish)
    r = len(rest)
    xf = ops.reshape(x, (p,) + rest)
    xt = ops.permute(xf, [0, a + 1] + [i + 1 for i in range(r) if i != a])
    # one spare slot past the end takes every out-of-range update, then is cut off
    n = rest[a]
    xt = ops.concat([xt, ops.broadcast_to(_c(0, xt), (p, 1) + _shape(xt)[2:])], axis=1)
    uf = ops.reshape(upd, (p,) + rest[:a] + ish + rest[a + 1 :])
    # (P, rest[:a], ish, rest[a+1:]) -> (P, ish, rest[:a], rest[a+1:])
    uperm = [0] + list(range(1 + a, 1 + a + k)) + list(range(1, 1 + a))
    uperm += list(range(1 + a + k, 1 + k + r - 1))
    ut = ops.permute(uf, uperm)
    idf = ops.reshape(_int64(idx), (p,) + ish)
    spare = _c(n, idf)
    idf = ops.where(
        ops.logical_or(ops.greater(_c(0, idf), idf), ops.greater_equal(idf, spare)), spare, idf
    )
    pid = ops.range(0, p, 1, out_dim=p, dtype=MDType.int64, device=x.device)
    pid = ops.broadcast_to(ops.reshape(pid, (p,) + (1,) * k), (p,) + ish)
    nd = ops.stack([pid, idf], axis=-1)
    out = getattr(ops, _SCATTER_ND[mode])(xt, ut, nd)  # (P, rest[a] + 1, rest[:a], ...)
    if mode in ("max", "min") and _is_float(x):
        # MAX's scatter max/min drop a NaN update; NumPy's maximum.at keeps it (and x's)
        bad = ops.cast(ops.is_nan(ut), MDType.int32)
        bad = ops.scatter_nd_max(ops.broadcast_to(_c(0, bad), _shape(xt)), bad, nd)
        nan = ops.logical_or(ops.greater(bad, _c(0, bad)), ops.is_nan(xt))
        out = ops.where(nan, _c(float("nan"), out), out)
    out = out[:, :n]
    inv = [0] + list(range(2, 2 + a)) + [1] + list(range(2 + a, 1 + r))
    out = ops.reshape(ops.permute(out, inv), xs)
    if dt is None:
        return out
    # bools went through int32: a sum (or) and a product (and) are then nonzero tests
    return ops.not_equal(out, ops.constant(0, MDType.int32, device=out.device))


_SCATTER_ND = {
    "set": "scatter_nd",
    "add": "scatter_nd_add",
    "mul": "scatter_nd_mul",
    "min": "scatter_nd_min",
    "max": "scatter_nd_max",
}


# ----------------------------------------------------------------------------- devices
@_one("transfer")
def _transfer(x, device):
    ref = device_ref(device)
    if x.device == ref:
        return x
    return ops.transfer_to(x, ref)


# ----------------------------------------------------------------------------- custom calls
LOWERINGS["pass_through"] = lambda args, kw: list(args[kw["n_skip"] :])

# Random draws are host ops: the evaluator runs them with NumPy's Philox before the graph on
# every backend, so they never reach a compiled program (and MAX could not reproduce the
# NumPy streams bit for bit anyway).
for _n in ("random_split", "random_uniform", "random_normal", "random_randint", "random_fold_in"):
    UNSUPPORTED[_n] = "a host op (NumPy Philox draw) that runs before the compiled graph"


def _replayer():
    """``session.replay``, which inlines a nested program's instructions."""
    # same layer; session.py imports MAX unconditionally, this table must import without it
    from .session import replay  # noqa: PLC0415

    return replay


def _compiled_call(args, kw):
    """A nested program (``nb.compile``'s fast path): inline its instructions here."""
    return _replayer()(kw["program"], list(args))


LOWERINGS["compiled_call"] = _compiled_call


# ----------------------------------------------------------------------------- control flow
# Bodies are nested programs over (their operands, the construct's captured inputs), lowered
# into MAX's region ops. MAX verifies a region op built inside another region before that
# region is attached, so a nested region may only read values of its own enclosing region:
# loops therefore carry every outer value they read (xs and captured inputs as loop-invariant
# carries), and a cond inside a cond branch is lowered as "run every branch, select".
_REGIONS: list = []  # kinds of the region bodies being built ("cond" or "loop"), innermost last


def _in_region(kind, fn):
    _REGIONS.append(kind)
    try:
        return fn()
    finally:
        _REGIONS.pop()


def _cond(args, kw):
    """``switch`` (the index is already clamped): one MAX ``cond`` for two branches, a flat
    chain of ``cond``s for more; every branch then a select inside another cond's branch."""
    replay = _replayer()
    branches = kw["branches"]
    index, rest = args[0], list(args[1:])

    def k_const(k):
        return ops.constant(k, index.dtype, device=index.device)

    def run(k):
        return lambda: _in_region("cond", lambda: replay(branches[k], rest))

    if _REGIONS and _REGIONS[-1] == "cond":
        outs = run(len(branches) - 1)()
        for k in range(len(branches) - 2, -1, -1):
            hit = ops.equal(index, k_const(k))
            outs = [ops.where(hit, a, b) for a, b in zip(run(k)(), outs)]
        return outs
    out_types = [
        TensorType(max_dtype(dt), tuple(shape), device=index.device)
        for dt, shape in branches[0].output_specs
    ]
    hit = lambda k: _on_host(ops.equal(index, k_const(k)))  # noqa: E731
    outs = list(ops.cond(hit(1), out_types, run(1), run(0)))
    for k in range(2, len(branches)):
        prev = outs
        outs = list(ops.cond(hit(k), out_types, run(k), lambda p=prev: p))
    return outs


def _while_loop(args, kw):
    replay = _replayer()
    n = kw["n_carry"]

    def pred(*v):
        return _on_host(_in_region("loop", lambda: replay(kw["cond"], list(v))[0]))

    def body(*v):
        return _in_region("loop", lambda: replay(kw["body"], list(v))) + list(v[n:])

    return list(ops.while_loop(list(args), pred, body))[:n]


def _scan(args, kw):
    """A MAX ``while_loop`` over (step, carry, ys, xs, captured): each step gathers its ``xs``
    slices and scatters its ``ys`` into the stacked outputs (the step axis follows the batch
    dims); xs and captured inputs ride along unchanged."""
    replay = _replayer()
    n, nx, length = kw["n_carry"], kw["n_xs"], kw["length"]
    dev = args[0].device
    y_axis = kw["y_axis"]
    ys0 = [
        ops.broadcast_to(ops.constant(0, max_dtype(dt), device=dev), tuple(shape))
        for dt, shape in kw["out_specs"][n:]
    ]
    ny = len(ys0)

    def pred(i, *_):
        return _on_host(i < ops.constant(length, MDType.int64, device=dev))

    def step(i, *state):
        c, ys = list(state[:n]), list(state[n : n + ny])
        xs, caps = list(state[n + ny : n + ny + nx]), list(state[n + ny + nx :])
        t = i
        if kw["reverse"]:
            t = ops.constant(length - 1, MDType.int64, device=dev) - i
        t = ops.reshape(t, (1,))
        x_t = [ops.squeeze(ops.gather(x, t, axis=a), a) for x, a in zip(xs, kw["x_axes"])]
        out = replay(kw["body"], c + x_t + caps)
        new_ys = []
        for y, v in zip(ys, out[n:]):
            upd = ops.unsqueeze(v, y_axis)
            where = ops.broadcast_to(ops.reshape(t, (1,) * len(upd.shape)), upd.shape)
            new_ys.append(ops.scatter(y, upd, where, axis=y_axis))
        return [i + 1, *out[:n], *new_ys, *state[n + ny :]]

    def body(*v):
        return _in_region("loop", lambda: step(*v))

    i0 = ops.constant(0, MDType.int64, device=dev)
    carry, xs, caps = list(args[:n]), list(args[n : n + nx]), list(args[n + nx :])
    res = ops.while_loop([i0, *carry, *ys0, *xs, *caps], pred, body)
    return list(res[1 : 1 + n + ny])


LOWERINGS["cond"] = _cond
LOWERINGS["while_loop"] = _while_loop
LOWERINGS["scan"] = _scan


def _custom_kernel(args, kw):
    """A user's Mojo kernel (``ops.custom``); the graph was built with its package among
    ``custom_extensions`` (``session.build_graph``). ``out_types`` are physical specs.
    A ``lower`` (``KernelLowering``: an op in the original Nabla's protocol) is the user's
    ``kernel(values, kwargs)``, run on the graph values; its ``call_custom_kernel`` calls
    build the kernel calls (``kernels.graph_call``)."""
    lowering = kw.get("lower")
    if lowering is not None:
        from .kernels import graph_call  # noqa: PLC0415 - kernels imports the disk cache

        with graph_kernel_calls(graph_call):
            res = lowering.fn(list(args), dict(kw["params"]))
        res = list(res) if isinstance(res, list | tuple) else [res]
        if len(res) != len(kw["out_types"]):
            raise KernelError(
                f"custom op {kw['op']!r}: its kernel() returned {len(res)} value(s), the op "
                f"has {len(kw['out_types'])} output(s) (kernel() returns a list)"
            )
        return res
    device = args[0].device if args else DeviceRef.CPU()
    out_types = [
        TensorType(max_dtype(dt), tuple(shape), device=device) for dt, shape in kw["out_types"]
    ]
    params = {k: max_dtype(v) if isinstance(v, DType) else v for k, v in kw["params"]}
    res = ops.custom(
        kw["kernel"],
        device=device,
        values=list(args),
        out_types=out_types,
        parameters=params or None,
    )
    return [r.tensor for r in res]


LOWERINGS["custom_kernel"] = _custom_kernel


# ----------------------------------------------------------------------------- mesh (sharding)
# The simulated mesh (nabla.core.sharding): a sharded value is one buffer, mesh dims first;
# collectives are data movement and reductions over them (mirrors the NumPy lowerings).
def _mesh_reduce_op(kind):
    # looked up at lowering time: without MAX installed ``ops`` is None, and this module
    # must still import (the table's names)
    return {"sum": ops.sum, "max": ops.max, "min": ops.min, "prod": ops.prod}[kind]


def _repeat_to(x, shape):
    """``x`` with its size-1 dims repeated up to ``shape`` by concatenation. MAX 26.7
    miscompiles a ``broadcast_to`` of a reduction that another reduction then reads ("input
    shape not broadcastable to result shape"); mesh dims are small, so copies are cheap."""
    xs = _shape(x)
    for a, (have, want) in enumerate(zip(xs, shape, strict=True)):
        if have != want:
            x = ops.concat([x] * want, axis=a)
    return x


def _take0(x, axes):
    """``x`` at index 0 of dims ``axes`` (which are dropped)."""
    if not axes:
        return x
    shape = _shape(x)
    x = x[tuple(slice(0, 1) if i in axes else slice(None) for i in range(len(shape)))]
    return ops.reshape(x, tuple(n for i, n in enumerate(shape) if i not in axes))


def _mesh_split_max(x, ndev, axes, dim):
    xs = _shape(x)
    y = _take0(x, axes)
    rest = [i for i in range(ndev) if i not in axes]
    pos = len(rest) + dim
    sizes = [xs[a] for a in axes]
    shape = list(_shape(y))
    shape[pos : pos + 1] = sizes + [shape[pos] // math.prod(sizes)]
    y = ops.reshape(y, tuple(shape))
    labels = [("m", k) for k in rest]
    local = [("l", i) for i in range(len(xs) - ndev)]
    labels += local[:dim] + [("m", a) for a in axes] + local[dim:]
    target = [("m", k) for k in range(ndev)] + local
    return ops.permute(y, [labels.index(t) for t in target])


def _mesh_merge_max(x, ndev, axes, dim):
    xs = _shape(x)
    rest = [i for i in range(len(xs)) if i not in axes]
    pos = rest.index(ndev + dim)
    y = ops.permute(x, rest[:pos] + list(axes) + rest[pos:])
    shape = [xs[i] for i in rest]
    shape[pos] *= math.prod(xs[a] for a in axes)
    y = ops.reshape(y, tuple(shape))
    inter = list(shape)
    for a in sorted(axes):
        inter.insert(a, 1)
    y = ops.reshape(y, tuple(inter))
    out = list(inter)
    for a in axes:
        out[a] = xs[a]
    return _repeat_to(y, tuple(out))


@_one("mesh_shard")
def _mesh_shard(x, mesh_shape, dims):
    ndev = len(mesh_shape)
    xs = _shape(x)
    y = _repeat_to(ops.reshape(x, (1,) * ndev + xs), tuple(mesh_shape) + xs)
    for d, axes in enumerate(dims):
        if axes:
            y = _mesh_split_max(y, ndev, axes, d)
    return y


@_one("mesh_unshard")
def _mesh_unshard(x, ndev, dims, partial):
    for a, kind in partial:
        x = _mesh_reduce_op(kind)(x, axis=a)
    for d, axes in enumerate(dims):
        if axes:
            x = _mesh_merge_max(x, ndev, axes, d)
    return _take0(x, tuple(range(ndev)))


@_one("mesh_reduce")
def _mesh_reduce(x, axes, kind):
    shape = _shape(x)
    for a in axes:
        x = _mesh_reduce_op(kind)(x, axis=a)
    return _repeat_to(x, shape)


@_one("mesh_gather")
def _mesh_gather(x, ndev, axes, dim):
    return _mesh_merge_max(x, ndev, axes, dim)


@_one("mesh_slice")
def _mesh_slice(x, ndev, axes, dim):
    return _mesh_split_max(x, ndev, axes, dim)


@_one("mesh_reduce_scatter")
def _mesh_reduce_scatter(x, ndev, axes, dim, kind):
    return _mesh_split_max(_mesh_reduce(x, axes, kind), ndev, axes, dim)


@_one("mesh_all_to_all")
def _mesh_all_to_all(x, ndev, axes, split_dim, concat_dim):
    return _mesh_split_max(_mesh_merge_max(x, ndev, axes, concat_dim), ndev, axes, split_dim)


@_one("mesh_permute")
def _mesh_permute(x, ndev, pairs):
    shape = _shape(x)
    n = math.prod(shape[:ndev])
    flat = ops.reshape(x, (n,) + shape[ndev:])
    src_of = {d: s for s, d in pairs}
    zero = None
    parts = []
    for dst in range(n):
        s = src_of.get(dst)
        if s is None:
            if zero is None:
                zero = ops.broadcast_to(_c(0, x), (1,) + shape[ndev:])
            parts.append(zero)
        else:
            parts.append(flat[s : s + 1])
    out = parts[0] if n == 1 else ops.concat(parts, axis=0)
    return ops.reshape(out, shape)


@_one("mesh_select")
def _mesh_select(x, axes, index):
    shape = _shape(x)
    sel = [slice(None)] * len(shape)
    for a, i in zip(axes, index, strict=True):
        sel[a] = slice(i, i + 1)
    return _repeat_to(x[tuple(sel)], shape)


@_one("mesh_iota")
def _mesh_iota(mesh_shape, axis, dtype, device):
    n = mesh_shape[axis]
    i = ops.range(0, n, 1, out_dim=n, dtype=MDType.int64, device=device_ref(device))
    view = [1] * len(mesh_shape)
    view[axis] = n
    coords = _repeat_to(ops.reshape(i, tuple(view)), tuple(mesh_shape))
    return ops.reshape(ops.cast(coords, max_dtype(dtype)), tuple(mesh_shape) + (1,))


@_one("mesh_local")
def _mesh_local(x, drop, perm):
    return ops.permute(_take0(x, tuple(drop)), list(perm))


@_one("mesh_global")
def _mesh_global(x, perm, shape, dims):
    y = ops.permute(x, list(perm))
    inter = [1] * len(shape)
    for src, dst in enumerate(dims):
        inter[dst] = _shape(y)[src]
    return _repeat_to(ops.reshape(y, tuple(inter)), tuple(shape))
