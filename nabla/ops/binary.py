"""Elementwise binary ops, comparisons, logical/bitwise ops and ``where``.

``BinaryOperation.__call__`` resolves the user-facing conveniences before the pipeline:
Python scalars (weakly typed) and dtype promotion, and it validates NumPy broadcasting of the
logical shapes. Kernels then see operands of one dtype whose shapes broadcast NumPy-style
(every backend's elementwise kernel broadcasts itself, so no ``broadcast_to`` is recorded);
an operand batched by vmap with fewer logical dims gets leading 1s first, so right-aligned
broadcasting never reaches into its batch prefix. VJPs sum cotangents back to each
operand's shape (``_sum_to_like``).
"""

from __future__ import annotations

import numbers

import numpy as np

from ..core.dtypes import DType, get_default_dtype, result_type
from ..core.ir import SymDim, TensorImpl, same_shape
from ..core.state import STATE, is_live
from ..runtime.tensor import Tensor, int_range
from . import batching, spmd
from ._util import as_tensor, doc_paragraph, is_scalar
from .base import Operation, OpError
from .functions import fn, provide

__all__ = [
    "add",
    "sub",
    "mul",
    "div",
    "floor_div",
    "mod",
    "pow",
    "maximum",
    "minimum",
    "atan2",
    "equal",
    "not_equal",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "left_shift",
    "right_shift",
    "where",
    "clip",
    "isclose",
    "allclose",
    "logaddexp",
    "fmod",
    "hypot",
    "broadcast_shapes",
    "BinaryOperation",
]


def broadcast_shapes(op: str, *shapes) -> tuple:
    """NumPy broadcasting of logical shapes; raises ValueError naming the op and shapes."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        size = 1
        for s in shapes:
            d = s[i - ndim + len(s)] if i - ndim + len(s) >= 0 else 1
            if d == 1:  # broadcasts; a dynamic size that is 1 here (traced per size) too
                if type(d) is SymDim and size == 1 and type(size) is not SymDim:
                    size = d  # (kept where nothing larger meets it: the result's size)
                continue
            if size not in (1, d):
                raise OpError(
                    f"{op}: shapes {', '.join(str(tuple(x)) for x in shapes)} "
                    "cannot be broadcast together"
                )
            if size == 1 or not isinstance(size, SymDim):  # keep a symbolic size
                size = d
        out.append(size)
    return tuple(out)


def _operand(v, dtype: DType, op_name: str) -> Tensor:
    if isinstance(v, Tensor):
        return v if v.dtype is dtype else v.cast(dtype)
    if isinstance(v, np.generic):
        # a NumPy scalar is weak as a Python one (as PyTorch takes it) and, as one, must
        # fit the dtype: np.int64(200) into int8 is an error, not a silent -56
        v = v.item()
    return as_tensor(v, dtype, op_name)


def _describe_operands(values) -> str:
    out = []
    for v in values:
        if isinstance(v, Tensor):
            out.append(f"{v.dtype.value} {v.shape}")
        else:
            out.append(type(v).__name__)
    return " and ".join(out)


def _value_dtype(op_name: str, v, values) -> DType:
    try:
        return as_tensor(v, op=op_name).dtype
    except (TypeError, ValueError) as e:
        msg = str(e).removeprefix(f"{op_name}: ")
        raise TypeError(
            f"{op_name}: unsupported operand of type {type(v).__name__} "
            f"(operands: {_describe_operands(values)}): {msg}"
        ) from None


def promote_operands(op_name: str, values, dtype: DType | None = None, *, broadcast=True):
    """Promote ``values`` to one dtype and (unless ``broadcast=False``, for ops such as
    matmul/concatenate whose operands legitimately differ in shape) broadcast them to one
    logical shape."""
    if dtype is None:
        tds, scalars = [], []
        for v in values:
            if isinstance(v, Tensor):
                tds.append(v.dtype)
            elif is_scalar(v):
                scalars.append(v)
            else:
                tds.append(_value_dtype(op_name, v, values))
        dtype = result_type(tds, scalars)
    ts = [_operand(v, dtype, op_name) for v in values]
    if broadcast:
        ts = _rank_align(op_name, ts)
    return ts, dtype


def _rank_align(op_name, ts):
    """Validate NumPy broadcasting of logical shapes. Elementwise kernels broadcast
    themselves; only an operand batched by vmap with fewer logical dims than the result
    gets leading 1s (so right-aligned broadcasting never reaches into its batch prefix)."""
    shapes = [t.shape for t in ts]
    first = shapes[0]
    if all(s == first for s in shapes):
        return ts
    # a captured sharded value has its global shape: say so rather than "cannot broadcast"
    spmd.check_capture(op_name, [t._impl for t in ts])
    out = broadcast_shapes(op_name, *shapes)
    if any(t._impl.levels and t.ndim < len(out) for t in ts):
        ts = [
            fn.reshape(t, (1,) * (len(out) - t.ndim) + t.shape)
            if t._impl.levels and t.ndim < len(out)
            else t
            for t in ts
        ]
    return ts


def _aligned(op_name, args) -> list:
    """``args`` of an elementwise op with its tensor operands rank-aligned where vmap
    batched one of lower rank (``_rank_align``; Python scalars broadcast as they are)."""
    args = list(args)
    at = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    if len(at) < 2 or not any(args[i]._impl.levels for i in at):
        return args
    for i, t in zip(at, _rank_align(op_name, [args[i] for i in at]), strict=True):
        args[i] = t
    return args


def _bshape(a, b):
    if a == b and (STATE.size_reads is None or same_shape(a, b)):
        return a
    if not a:
        return b
    if not b:
        return a
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    return tuple(_bdim(x, y) for x, y in zip(a, b))


def _bdim(x, y):
    """One dim of the broadcast of sizes ``x`` and ``y``: a dynamic size (``SymDim``) over
    a number equal to it at this trace (a 1 against a size that is 1 here broadcasts at
    compile's other sizes)."""
    if type(y) is SymDim and type(x) is not SymDim:
        return y
    return x if y == 1 or (x == y and isinstance(x, SymDim)) else y


def _weak_scalar(value, t: Tensor, result: str):
    """A 0-d constant for a Python scalar that keeps ``t``'s dtype, or None."""
    tv = type(value)
    if tv is not float and tv is not int:
        return None
    impl = t._impl
    d = impl.dtype
    if (tv is float or result == "float") and not d.is_float:
        return None
    if d.is_bool or not impl.device.is_cpu:
        return None
    try:
        # an int for a float dtype goes through float (ml_dtypes' bfloat16 takes no int
        # beyond int64)
        buf = np.array(float(value) if tv is int and d.is_float else value, dtype=d.numpy)
    except OverflowError:
        return None  # out of the dtype's range: the general path names op, value and range
    return Tensor._wrap(TensorImpl((), d, impl.device, buffer=buf))


def _sum_to_like(ct, like):
    """The cotangent of an operand the kernel broadcast implicitly: sum the broadcast
    logical dims and the vmap levels (whose vmap has finished) it lacked."""
    if ct is None:
        return ct
    xs, cs = tuple(like.shape), tuple(ct.shape)
    if xs != cs or (STATE.size_reads is not None and not same_shape(xs, cs)):
        lead = len(cs) - len(xs)
        # (a dim of 1 against a dynamic size that is 1 at this trace is summed too: the
        # size is another number at compile's other sizes)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, d in enumerate(xs) if d == 1 and not same_shape((d,), (cs[lead + i],))
        )
        if axes:
            ct = fn.reduce_sum(ct, axes, keepdims=True)
        if tuple(ct.shape) != xs:
            ct = fn.reshape(ct, xs)
    if ct._impl.levels != like._impl.levels:
        ct = batching.sum_finished_levels(ct, like)
    return ct


class BinaryOperation(Operation):
    """Elementwise op of two tensors of equal (broadcast) shape."""

    arity = 2
    scalar_operands = True
    result: str = "same"  # "same" | "bool" | "float"
    kinds: str = "all"  # "all" | "int" (ints/bools only) | "intonly" (no bools) | "nobool"

    def __call__(self, x, y):
        tx, ty = type(x), type(y)
        if tx is Tensor and ty is Tensor:
            if (
                x._impl.dtype is y._impl.dtype
                and x.shape == y.shape
                and self.result != "float"
                and self.kinds == "all"
            ):
                return self.bind([x, y], {})
        elif self.kinds == "all" and (tx is Tensor or ty is Tensor):
            # fast path: a tensor with a Python scalar that does not change its dtype
            s = _weak_scalar(y, x, self.result) if tx is Tensor else _weak_scalar(x, y, self.result)
            if s is not None:
                return self.bind([x, s] if tx is Tensor else [s, y], {})
        if self.result == "bool" and (tx is int or ty is int):  # (past the fast path: an
            known = _compared_out_of_range(self.name, x, y)  # int the dtype holds took it)
            if known is not None:
                return known
        dtype = None
        if self.result == "float":
            tds, dtype = _promote_any(x, y, self.name)
            if not dtype.is_float:
                dtype = get_default_dtype()
        operands = (x, y)
        (x, y), dtype = promote_operands(self.name, [x, y], dtype)
        if self.kinds == "int" and not (dtype.is_int or dtype.is_bool):
            raise TypeError(
                f"{self.name}: needs integer or bool tensors, got "
                f"{_describe_operands(operands)} (promoted to {dtype.value})"
            )
        if self.kinds == "intonly" and (  # (a Python bool beside ints counts as 0 or 1)
            not dtype.is_int or any(_is_bool_operand(v) and type(v) is not bool for v in operands)
        ):
            why = (
                f"promoted to {dtype.value}"
                if not dtype.is_int
                else "a bool tensor is refused: cast it to an integer dtype"
            )
            raise TypeError(
                f"{self.name}: needs integer tensors (no bool or float), got "
                f"{_describe_operands(operands)} ({why})"
            )
        if self.kinds == "nobool" and dtype.is_bool:
            raise TypeError(
                f"{self.name}: unsupported for bool tensors, got {_describe_operands(operands)}"
            )
        return self.bind([x, y], {})

    def infer(self, shapes, dtypes, kwargs):
        out = DType.bool if self.result == "bool" else dtypes[0]
        return [_bshape(shapes[0], shapes[1])], [out]

    def rebind(self, args, kwargs):
        # a recorded call replayed on operands vmap batched (compile's replay, a loop body
        # under vmap): their ranks aligned as the call aligns them (``_rank_align``)
        return self.bind(_aligned(self.name, args), kwargs)

    def partials(self, x, y, out):
        """(d out/dx, d out/dy) as tensors or Python floats."""
        raise NotImplementedError(f"op {self.name} has no derivative")

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        if not self.differentiable:
            return [None, None]
        x, y = primals
        ct = cotangents[0]
        dx, dy = self.partials(x, y, outputs[0])
        return [_partial_cotangent(ct, d, v) for d, v in ((dx, x), (dy, y))]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if not self.differentiable:
            return [None]
        x, y = primals
        tx, ty = tangents
        dx, dy = self.partials(x, y, outputs[0])
        out = None
        if tx is not None:
            out = _times(tx, dx)
        if ty is not None:
            t = _times(ty, dy)
            out = t if out is None else out + t
        if out is not None and tuple(out.shape) != tuple(outputs[0].shape):
            out = fn.broadcast_to(out, outputs[0].shape)
        return [out]


def _partial_cotangent(ct, partial, operand):
    """``ct * partial`` summed to ``operand``'s shape. A partial of -1 (a subtrahend) is
    applied after the sum: negation commutes with the sum exactly, and a broadcast
    operand's negated cotangent is then one pass over the reduced values, not the whole
    cotangent (a mean subtracted per channel, as BatchNorm does)."""
    if isinstance(partial, float) and partial == -1.0 and ct is not None:
        return -_sum_to_like(ct, operand)
    return _sum_to_like(_times(ct, partial), operand)


# A comparison's outcome where every element is above a Python int the dtype cannot hold
# (``uint32 > -1``), and where every element is below one (``int8 < 300``), by op, as
# NumPy 2 compares: (above, below).
_KNOWN = {
    "greater": (True, False),
    "greater_equal": (True, False),
    "less": (False, True),
    "less_equal": (False, True),
    "equal": (False, False),
    "not_equal": (True, True),
}
_MIRROR = {"greater": "less", "less": "greater", "greater_equal": "less_equal"}
_MIRROR.update({v: k for k, v in _MIRROR.items()})


def _compared_out_of_range(name: str, x, y):
    """``x name y`` where one side is a Python int outside the other's integer dtype (no
    cast could hold it, and every element lies on one side of it): the known outcome, laid
    out like the tensor. None otherwise (the ordinary path)."""
    if name not in _KNOWN:
        return None
    if type(x) is int:  # ``3 < t`` is ``t > 3``
        x, y, name = y, x, _MIRROR.get(name, name)
    if type(y) is not int or not isinstance(x, Tensor) or not x.dtype.is_int:
        return None
    lo, hi = int_range(x.dtype)
    if lo <= y <= hi:
        return None
    above, below = _KNOWN[name]
    return fn.full_like(x, above if y < lo else below, dtype=DType.bool)


def _is_bool_operand(v) -> bool:
    if isinstance(v, Tensor):
        return v.dtype.is_bool
    return isinstance(v, bool | np.bool_) or (isinstance(v, np.ndarray) and v.dtype == np.bool_)


def _times(a, b):
    if isinstance(b, float) and b == 1.0:
        return a
    if isinstance(b, float) and b == -1.0:
        return -a
    return a * b


def _promote_any(x, y, op_name="div"):
    tds, scalars = [], []
    for v in (x, y):
        if isinstance(v, Tensor):
            tds.append(v.dtype)
        elif is_scalar(v):
            scalars.append(v)
        else:
            tds.append(_value_dtype(op_name, v, (x, y)))
    return tds, result_type(tds, scalars)


_BINARY_RULES = (
    "Operands are promoted to one dtype (:func:`nabla.promote_types`). Python scalars (and "
    "NumPy scalars, as PyTorch takes them) are weakly typed and must fit that dtype: they "
    "take the other operand's dtype unless they are of a higher kind "
    "(``int32_tensor * 2 -> int32``, ``int32_tensor * 0.5 -> default float``). Shapes "
    "broadcast as in NumPy."
)
_BINARY_RESULTS = {
    "same": "A tensor of the broadcast shape and the promoted dtype.",
    "bool": "A bool tensor of the broadcast shape.",
    "float": (
        "A tensor of the broadcast shape and the promoted dtype, or the default float dtype\n"
        "    (:func:`nabla.get_default_dtype`) when the operands promote to an int or bool dtype\n"
        "    (int64 and uint64 too, as PyTorch; JAX with 64-bit types on gives float64)."
    ),
}
_BINARY_KIND_ERRORS = {
    "all": "",
    "int": ",\n        or if the operands do not promote to an integer or bool dtype",
    "intonly": ",\n        or if an operand is a float or bool",
    "nobool": " or the operands promote to bool",
}


def _binary_doc(doc, *, result, kinds) -> str:
    """The class docstring of a ``_binary`` op: ``doc`` (a one-line summary, optionally
    followed by a blank line and notes) plus the promotion rules, Args, Returns and Raises
    that follow from its ``result`` and ``kinds``."""
    summary, _, notes = doc.strip().partition("\n\n")
    body = doc_paragraph(f"{notes} {_BINARY_RULES}".strip())
    args = (
        "Args:\n"
        "    x: first operand: a tensor, Python scalar, nested list or NumPy array.\n"
        "    y: second operand, in the same forms; its shape must broadcast with ``x``'s."
    )
    raises = (
        "Raises:\n"
        "    ValueError: (:class:`nabla.OpError`) if the shapes cannot be broadcast together.\n"
        f"    TypeError: if an operand cannot be made a tensor{_BINARY_KIND_ERRORS[kinds]}."
    )
    returns = f"Returns:\n    {_BINARY_RESULTS[result]}"
    return "\n\n".join([summary, body, args, returns, raises]) + "\n"


class _ProductOp(BinaryOperation):
    """``mul``: a square ``x * x`` gives ``x`` its two equal cotangent terms as one doubled
    product, one pass over the values less than adding them (the same bits: doubling is
    exact)."""

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x, y = primals
        ct = cotangents[0]
        if x._impl is y._impl and ct is not None and x.dtype.is_float:
            return [_sum_to_like(ct * x, x) * 2.0, None]
        return super().vjp_rule(primals, cotangents, outputs, kwargs)


class _QuotientOp(BinaryOperation):
    """``div``: the cotangents JAX's rule gives, ``ct / y`` and ``-ct * out / y``, with the
    divisor's summed to its shape before it is divided. Where ``y`` was broadcast (the row
    sum of a softmax, the deviation of a norm) it is constant along the summed dims, so
    ``-sum(ct * out) / y`` divides the reduced values: one pass over the cotangent (the
    product) where ``ct * (-out / y)`` took three, and the dividend's ``ct / y`` is one pass
    where ``ct * (1 / y)`` took two for a ``y`` of the full shape."""

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x, y = primals
        ct = cotangents[0]
        if ct is None:
            return [None, None]
        return [_sum_to_like(ct / y, x), -(_sum_to_like(ct * outputs[0], y) / y)]


class _PowerOp(BinaryOperation):
    """``pow``: an integer base to a negative Python-int exponent is an error at the call,
    as JAX's (``integer_pow``); a tensor of exponents gives the truncated result."""

    def __call__(self, x, y):
        int_power = isinstance(y, numbers.Integral) and not isinstance(y, bool)
        if int_power and isinstance(x, Tensor) and x.dtype.is_float:
            exact = _exact_int_power(self, x, int(y))
            if exact is not None:
                return exact
        if int_power and y < 0:
            dtype = x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype
            if isinstance(dtype, DType):
                integer = dtype.is_int or dtype.is_bool
            else:
                integer = dtype.kind in "iub"
            if integer:
                base = _describe_operands((x,)) if isinstance(x, Tensor) else f"{dtype} array"
                raise TypeError(
                    f"pow: integers cannot be raised to negative powers, got {base} ** {int(y)} "
                    "(as JAX); cast the base to a float dtype"
                )
        return super().__call__(x, y)


def _exact_int_power(op, x: Tensor, n: int):
    """``x ** n`` for a Python int ``n`` that ``x``'s float dtype cannot hold exactly
    (bfloat16 from 257, float16 from 2049, float32 from 2**24 + 1): it would round to
    another power, an even one for an odd ``n`` (``-1 ** 257`` gave 1). JAX keeps the int
    (``integer_pow``). Computed in float32 or float64, which hold it, and cast back;
    past 2**53 as ``|x| ** n`` with ``x``'s sign where ``n`` is odd. None when ``n`` fits
    (or is 2**63 or more, which no dtype holds)."""
    if abs(n) >= 1 << 63:  # (no dtype holds it: the usual conversion's error or value)
        return None
    nf = float(n)
    if float(np.asarray(nf, dtype=np.float64).astype(x.dtype.numpy)) == n:
        return None
    wide = DType.float32 if x.dtype.itemsize < 4 else DType.float64
    if abs(n) <= (1 << (24 if wide is DType.float32 else 53)):
        return BinaryOperation.__call__(op, x.cast(wide), n).cast(x.dtype)
    mag = BinaryOperation.__call__(op, abs(x).cast(DType.float64), nf)
    if n % 2:
        mag = where(x < 0, -mag, mag)
    return mag.cast(x.dtype)


def _binary(name, partials=None, *, doc, result="same", kinds="all", base=BinaryOperation):
    cls = type(
        f"{name.title().replace('_', '')}Op",
        (base,),
        {
            "__doc__": _binary_doc(doc, result=result, kinds=kinds),
            "name": name,
            "result": result,
            "kinds": kinds,
            "differentiable": partials is not None,
        },
    )
    if partials is not None:
        cls.partials = lambda self, x, y, out: partials(x, y, out)
    cls.partial_sum = _PARTIAL_SUM.get(name)
    return cls()


# how partial sums pass each op (``Operation.partial_sum``)
_PARTIAL_SUM = {"add": "joint", "sub": "joint", "mul": "bilinear", "div": "first"}


def _known_scalar(t: Tensor):
    """The value of a 0-d tensor that holds a host value and that no transform traces (a
    Python exponent, say), as a Python number; else None. A rule may then build its
    derivative from the number: nothing can differentiate through it or batch it."""
    impl = t._impl
    buf = impl.buffer
    if (
        type(buf) is not np.ndarray
        or buf.shape != ()
        or impl.levels
        or impl.tangents
        or impl.sharding is not None
        or is_live(impl.traced)
    ):
        return None
    return buf.item()


def _pow_partials(x, y, out):
    dx = 0.0
    c = _known_scalar(y) if x.dtype.is_float else None
    if c is not None and not isinstance(c, complex):
        # a known exponent (``x ** 2``): c * x ** (c - 1) with c - 1 a number, as JAX's
        # integer_pow; a square's derivative is one multiply, not a guarded pow
        if c == 0:
            dx = 0.0
        elif c == 1:
            dx = 1.0
        elif c == 2:
            dx = x * 2.0
        else:
            dx = (x ** (c - 1)) * c
    elif x.dtype.is_float:
        # y * x ** (y - 1), computed on a safe base where both are 0: the next derivative of
        # x ** 0 would be 0 * x ** -1 = 0 * inf = NaN at x = 0, which made the (n+1)-th
        # derivative of x ** n NaN (JAX special-cases integer powers). y stays a factor
        # everywhere: d/dy of this at y = 0 is x ** -1 (a constant 0 there had lost it)
        base = where((y == 0) & (x == 0), 1.0, x)
        dx = y * (base ** (y - 1.0))
    safe = where(x == 0, 1.0, x)
    dy = out * fn.log(safe)
    return dx, dy


def _max_partials(x, y, out):
    # JAX's convention: ties split the gradient evenly, and a NaN result (either operand
    # NaN: no comparison holds) gives neither operand any (the second got it all)
    eq = (x == y).cast(x.dtype) * 0.5
    return (x > y).cast(x.dtype) + eq, (y > x).cast(x.dtype) + eq


def _min_partials(x, y, out):
    eq = (x == y).cast(x.dtype) * 0.5
    return (x < y).cast(x.dtype) + eq, (y < x).cast(x.dtype) + eq


def _atan2_partials(x, y, out):
    denom = x * x + y * y
    return y / denom, -x / denom


_INT_DIV0 = "Integer division by zero gives 0, as in NumPy."
_TIES = (
    "Where ``x == y`` the gradient is split evenly between ``x`` and ``y``, and where the "
    "result is NaN neither gets any, as in JAX."
)

add = _binary(
    "add",
    lambda x, y, o: (1.0, 1.0),
    doc="Elementwise sum ``x + y``.\n\nFor two bool operands it is logical OR, as in NumPy.",
)
sub = _binary(
    "sub",
    lambda x, y, o: (1.0, -1.0),
    doc="Elementwise difference ``x - y`` (also ``nb.subtract``).",
    kinds="nobool",
)
mul = _binary(
    "mul",
    lambda x, y, o: (y, x),
    base=_ProductOp,
    doc="Elementwise product ``x * y`` (also ``nb.multiply``).\n\n"
    "For two bool operands it is logical AND, as in NumPy.",
)
div = _binary(
    "div",
    lambda x, y, o: (1.0 / y, -o / y),
    doc="Elementwise true division ``x / y`` (also ``nb.divide``).\n\n"
    "Division by zero gives ``inf`` or NaN.",
    result="float",
    base=_QuotientOp,
)
floor_div = _binary(
    "floor_div",
    lambda x, y, o: (0.0, 0.0),
    doc="Elementwise floor division ``x // y``, rounding toward -inf (NumPy's ``floor_divide``)."
    f"\n\n{_INT_DIV0} Its derivative is taken as zero.",
    kinds="nobool",
)
mod = _binary(
    "mod",
    lambda x, y, o: (1.0, -floor_div(x, y)),
    doc="Elementwise remainder ``x % y`` with the sign of ``y`` (NumPy's ``mod``, Python's ``%``)."
    f"\n\n{_INT_DIV0}",
    kinds="nobool",
)
pow = _binary(  # noqa: A001
    "pow",
    _pow_partials,
    doc="Elementwise power ``x ** y`` (also ``nb.power``).\n\n"
    "Integer operands give an integer result, as in NumPy. An integer base to a negative "
    "Python int is a ``TypeError``, as in JAX; a negative element of an integer tensor of "
    "exponents gives the truncated result (1 for a base of 1, +-1 for -1, else 0) where "
    "NumPy and PyTorch raise. The derivative of ``x ** 0`` is "
    "zero everywhere, at ``x = 0`` too (JAX's integer power).",
    kinds="nobool",
    base=_PowerOp,
)
maximum = _binary(
    "maximum",
    _max_partials,
    doc=f"Elementwise maximum; NaN if either operand is NaN (NumPy's ``maximum``).\n\n{_TIES}",
)
minimum = _binary(
    "minimum",
    _min_partials,
    doc=f"Elementwise minimum; NaN if either operand is NaN (NumPy's ``minimum``).\n\n{_TIES}",
)
atan2 = _binary(
    "atan2",
    _atan2_partials,
    doc="Elementwise ``arctan(x / y)`` in ``[-pi, pi]``, the quadrant chosen from both signs.\n\n"
    "The argument order is NumPy's ``arctan2(x1, x2)``: ``x`` is the vertical coordinate.",
    result="float",
)
equal = _binary("equal", doc="Elementwise ``x == y``.", result="bool")
not_equal = _binary(
    "not_equal", doc="Elementwise ``x != y`` (True where either is NaN).", result="bool"
)
greater = _binary("greater", doc="Elementwise ``x > y``.", result="bool")
greater_equal = _binary("greater_equal", doc="Elementwise ``x >= y``.", result="bool")
less = _binary("less", doc="Elementwise ``x < y``.", result="bool")
less_equal = _binary("less_equal", doc="Elementwise ``x <= y``.", result="bool")
bitwise_and = _binary(
    "bitwise_and",
    doc="Elementwise bitwise AND ``x & y`` (logical AND for bool operands).",
    kinds="int",
)
bitwise_or = _binary(
    "bitwise_or",
    doc="Elementwise bitwise OR ``x | y`` (logical OR for bool operands).",
    kinds="int",
)
bitwise_xor = _binary(
    "bitwise_xor",
    doc="Elementwise bitwise XOR ``x ^ y`` (logical XOR for bool operands).",
    kinds="int",
)

_SHIFT_RANGE = (
    "As in NumPy, a shift by a negative count or by at least the number of bits of the "
    "dtype gives 0 (for a right shift of a negative value: -1). Not differentiable."
)
left_shift = _binary(
    "left_shift",
    doc="Elementwise left shift ``x << y`` of integers (NumPy's ``left_shift``): ``x * 2**y``, "
    f"wrapping at the dtype's width.\n\n{_SHIFT_RANGE}",
    kinds="intonly",
)
right_shift = _binary(
    "right_shift",
    doc="Elementwise right shift ``x >> y`` of integers (NumPy's ``right_shift``): "
    "arithmetic for signed dtypes (the sign is kept: ``-5 >> 1 == -3``), logical for "
    f"unsigned ones.\n\n{_SHIFT_RANGE}",
    kinds="intonly",
)


def _as_bool(v, op_name):
    t = as_tensor(v, op=op_name)
    return t if t.dtype.is_bool else t != 0


def _logical(word: str, example: str):
    """The public ``logical_<word>`` (NumPy's): its bool primitive op, applied to the
    operands compared with zero. ``example`` is what the docstring's example prints."""
    name = f"logical_{word}"
    prim = _binary(
        name,
        doc=f"Elementwise logical {word.upper()} (the primitive of :func:`nabla.{name}`; "
        "the operands are bool tensors).",
        result="bool",
    )

    def logical(x, y):
        return prim(_as_bool(x, name), _as_bool(y, name))

    logical.__name__ = logical.__qualname__ = name
    logical.__doc__ = f"""Elementwise logical {word.upper()} (NumPy's ``{name}``).

    Args:
        x: a tensor, Python scalar, nested list or NumPy array of any dtype; non-bool values
            are compared with zero first (nonzero is True).
        y: the second operand, in the same forms; its shape must broadcast with ``x``'s.

    Returns:
        A bool tensor of the broadcast shape.

    Raises:
        ValueError: (:class:`nabla.OpError`) if the shapes cannot be broadcast together.

    Example:
        >>> nb.{name}(nb.constant([0, 2]), True).tolist()
        {example}
    """
    return logical


logical_and = _logical("and", "[False, True]")
logical_or = _logical("or", "[True, True]")
logical_xor = _logical("xor", "[True, False]")


class WhereOp(Operation):
    name = "where"
    arity = 3
    linear = True
    index_args = (0,)
    scalar_operands = True

    def infer(self, shapes, dtypes, kwargs):
        return [_bshape(_bshape(shapes[0], shapes[1]), shapes[2])], [dtypes[1]]

    def rebind(self, args, kwargs):
        return self.bind(_aligned("where", args), kwargs)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        c, x, y = primals
        ct = cotangents[0]
        zero = fn.zeros_like(ct)  # a select, never ``ct * 0``: a NaN there stays out
        return [None, _sum_to_like(where(c, ct, zero), x), _sum_to_like(where(c, zero, ct), y)]


_where = WhereOp()


def where(condition, x=None, y=None, *, size=None, fill_value=None):
    """Elementwise ``x if condition else y`` with broadcasting and promotion of ``x``/``y``.
    With ``condition`` alone, NumPy's and JAX's one-argument form: its nonzero indices,
    :func:`nabla.nonzero` (``size`` and ``fill_value`` as there).

    Example:
        >>> nb.where(nb.constant([True, False]), 1.0, 0.0).tolist()
        [1.0, 0.0]
    """
    if x is None and y is None:
        return fn.nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise OpError("where: give both x and y, or neither (the indices of condition)")
    c = as_tensor(condition, op="where")
    if not c.dtype.is_bool:
        c = c != 0
    (x, y), dtype = promote_operands("where", [x, y], broadcast=False)
    c, x, y = _rank_align("where", [c, x, y])
    return _where.bind([c, x, y], {})


def clip(x, min=None, max=None, *, a_min=None, a_max=None):  # noqa: A002
    """Clamp ``x`` into ``[min, max]`` (either bound may be None; ``a_min``/``a_max`` are
    NumPy's names)."""
    if (a_min is not None and min is not None) or (a_max is not None and max is not None):
        raise TypeError("clip: pass min/max or a_min/a_max, not both")
    if a_min is not None:
        min = a_min  # noqa: A001
    if a_max is not None:
        max = a_max  # noqa: A001
    x = as_tensor(x, op="clip")
    for bound in (min, max):  # a bound out of an integer dtype's range names clip
        if isinstance(bound, int | np.integer) and not isinstance(bound, bool):
            if x.dtype.is_int and not _fits(int(bound), x.dtype):
                lo, hi = np.iinfo(x.dtype.numpy).min, np.iinfo(x.dtype.numpy).max
                raise OverflowError(
                    f"clip: the bound {int(bound)} is out of range for {x.dtype.value} "
                    f"[{lo}, {hi}] (tensor of shape {x.shape})"
                )
        shape = getattr(bound, "shape", None)
        if shape is not None:  # (the error named maximum or minimum)
            try:
                np.broadcast_shapes(tuple(x.shape), tuple(shape))
            except ValueError:
                raise OpError(
                    f"clip: a bound of shape {tuple(shape)} does not broadcast with x of shape "
                    f"{x.shape}"
                ) from None
    if min is not None:
        x = maximum(x, min)
    if max is not None:
        x = minimum(x, max)
    return x


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    """Elementwise ``|a - b| <= atol + rtol * |b|`` (NumPy's and JAX's ``isclose``, not
    symmetric in ``a`` and ``b``); infinities are close only to themselves, NaN to nothing
    unless ``equal_nan``. Integer operands are compared as floats.

    Args:
        a: a tensor, Python scalar, nested list or NumPy array.
        b: the reference, broadcasting against ``a``.
        rtol: the relative tolerance (default 1e-5).
        atol: the absolute tolerance (default 1e-8).
        equal_nan: whether two NaNs count as close (default False).

    Returns:
        A bool tensor of the broadcast shape.
    """
    (a, b), dtype = promote_operands("isclose", [a, b], broadcast=True)
    if not dtype.is_float:
        a, b = a.cast(get_default_dtype()), b.cast(get_default_dtype())
    near = fn.abs(a - b) <= atol + rtol * fn.abs(b)
    out = where(logical_and(fn.isfinite(a), fn.isfinite(b)), near, equal(a, b))
    if equal_nan:
        out = logical_or(out, logical_and(fn.is_nan(a), fn.is_nan(b)))
    return out


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    """Whether every element of ``a`` is close to ``b`` (:func:`isclose`), as a 0-d bool
    tensor (JAX's ``allclose``; ``if nb.allclose(a, b):`` reads it).

    Args:
        a: a tensor, Python scalar, nested list or NumPy array.
        b: the reference, broadcasting against ``a``.
        rtol: the relative tolerance (default 1e-5).
        atol: the absolute tolerance (default 1e-8).
        equal_nan: whether two NaNs count as close (default False).

    Returns:
        A 0-d bool tensor.
    """
    return fn.all(isclose(a, b, rtol, atol, equal_nan))


def logaddexp(a, b) -> Tensor:
    """``log(exp(a) + exp(b))`` without overflow (NumPy's and JAX's ``logaddexp``), as
    ``max(a, b) + log1p(exp(-|a - b|))``, whose derivatives are those of the smooth
    function: the gradient is the two softmax weights (1/2 each at a tie) and the second
    derivative at a tie 1/4. Equal infinities give that infinity (gradient 1 to ``a``).
    Integer operands are computed in the default float dtype.

    Args:
        a: a tensor, Python scalar, nested list or NumPy array.
        b: broadcasting against ``a``.

    Returns:
        A float tensor of the broadcast shape.
    """
    a, b = _float_pair("logaddexp", a, b)
    # max + log1p(exp(-|a - b|)): the small term keeps its digits (log(1 + e) rounded
    # 1 + e first: logaddexp(-20, 0) was 0 in float32, 2.06e-9 exactly). The max and the
    # |a - b| pick the same side by one test, a at a tie, so at a tie their kinks cancel
    # and autodiff sees the smooth function (with maximum's even split and abs's zero
    # slope at 0 the second derivative there was 0). Equal infinities (a - b NaN) add
    # log 2 to that infinity; a NaN operand gives NaN.
    d = sub(a, b)
    d = where(logical_and(equal(a, b), fn.is_inf(a)), 0.0, d)
    first = greater_equal(d, 0.0)
    top = where(first, a, b)
    gap = where(first, d, fn.neg(d))
    return top + fn.log1p(fn.exp(fn.neg(gap)))


def _float_pair(op: str, a, b) -> tuple:
    """``a`` and ``b`` promoted and broadcast for ``op``, integers in the default float
    dtype (a function defined on floats only)."""
    (a, b), dtype = promote_operands(op, [a, b], broadcast=True)
    if not dtype.is_float:
        a, b = a.cast(get_default_dtype()), b.cast(get_default_dtype())
    return a, b


def fmod(a, b) -> Tensor:
    """C's remainder, with the sign of ``a`` (NumPy's, JAX's and PyTorch's ``fmod``), where
    ``mod``/``%`` takes the sign of ``b``: ``fmod(-7, 3)`` is -1, ``-7 % 3`` is 2. Computed
    from ``mod`` (of the magnitudes for floats, with ``a``'s sign; for integers ``b``
    subtracted where the signs differ), so it is differentiable as ``mod`` is
    (``d/db = -trunc(a / b)``).

    Args:
        a: the dividend: a tensor, Python scalar, nested list or NumPy array.
        b: the divisor, broadcasting against ``a``.

    Returns:
        A tensor of the promoted dtype and the broadcast shape.
    """
    (a, b), _ = promote_operands("fmod", [a, b], broadcast=True)
    if a.dtype.is_float:
        # mod of the magnitudes is exact, and the result takes a's sign (-0.0 too). The
        # integer form below subtracts b from mod's result where the signs differ, which
        # for floats rounds: mod(-1, 65504) is 65504 in float16, so fmod came out 0. Each
        # magnitude is a where (not abs), so d/da stays 1 at a = 0
        a_neg, b_neg = _sign_bit(a), _sign_bit(b)
        r = mod(where(a_neg, fn.neg(a), a), where(b_neg, fn.neg(b), b))
        return where(a_neg, fn.neg(r), r)
    # integers: exact, and a zero remainder has no sign to take
    r = mod(a, b)
    zero = fn.zeros_like(r)
    other_side = logical_and(not_equal(r, zero), not_equal(less(r, zero), less(a, zero)))
    return where(other_side, r - b, r)


def _sign_bit(x) -> Tensor:
    """Where float ``x`` is negative, -0.0 included (its reciprocal is -inf)."""
    zero = fn.zeros_like(x)
    return logical_or(less(x, zero), less(fn.reciprocal(x), zero))


def hypot(a, b) -> Tensor:
    """``sqrt(a**2 + b**2)`` without overflow or underflow of the squares (NumPy's, JAX's
    and PyTorch's ``hypot``): ``m * sqrt(1 + (n / m)**2)`` for the larger ``m`` and smaller
    ``n`` of ``|a|``, ``|b|``; an infinite operand gives inf, even beside a NaN. Integer
    operands are computed in the default float dtype.

    Args:
        a: a tensor, Python scalar, nested list or NumPy array.
        b: broadcasting against ``a``.

    Returns:
        A float tensor of the broadcast shape.
    """
    a, b = _float_pair("hypot", a, b)
    x, y = fn.abs(a), fn.abs(b)
    big, small = maximum(x, y), minimum(x, y)
    safe = where(big > 0, big, fn.ones_like(big))  # (0 / 0 at the origin)
    ratio = small / safe
    out = big * fn.sqrt(1.0 + ratio * ratio)
    return where(logical_or(fn.is_inf(a), fn.is_inf(b)), fn.full_like(out, np.inf), out)


def _fits(value: int, dtype: DType) -> bool:
    info = np.iinfo(dtype.numpy)
    return int(info.min) <= value <= int(info.max)


provide(globals(), [*__all__, "promote_operands"])
