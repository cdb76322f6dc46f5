"""NumPy's and JAX's remaining numeric functions, all at the top level (``nb.gcd``,
``nb.frexp``, ``nb.polydiv``, ``nb.kaiser``, ...): integer and bit functions, the float's
parts, polynomial arithmetic, window functions, predicates and NumPy's conveniences.

They are written with the ops (differentiable where the values are, batched under ``vmap``,
compiled) and, for ``gcd``/``lcm``, a ``while_loop``: the reason this module sits at the
top level, above the transforms. Shapes stay static as JAX's do: ``polydiv``'s remainder is
as long as the dividend, with zeros in front.
"""

from __future__ import annotations

import builtins
import collections
import math
import numbers

import numpy as np

from .core.dtypes import DType, finfo, get_default_dtype, promote_types, to_dtype
from .ops import array_functions as af
from .ops import binary, creation, indexing, reduction, unary, view
from .ops._util import as_tensor, concrete_int, norm_axis
from .ops.base import OpError
from .ops.special import i0
from .runtime.tensor import Tensor
from .transforms.control_flow import while_loop

__all__ = [
    "angle",
    "apply_over_axes",
    "array_repr",
    "array_str",
    "bartlett",
    "bitwise_count",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_right_shift",
    "blackman",
    "c_",
    "einsum_path",
    "euler_gamma",
    "fabs",
    "frexp",
    "frombuffer",
    "get_printoptions",
    "fromfunction",
    "fromiter",
    "gcd",
    "hamming",
    "hanning",
    "histogram2d",
    "histogramdd",
    "i0",
    "index_exp",
    "invert",
    "iscomplex",
    "iscomplexobj",
    "isneginf",
    "isposinf",
    "isreal",
    "isrealobj",
    "isscalar",
    "iterable",
    "kaiser",
    "lcm",
    "ldexp",
    "load",
    "mask_indices",
    "nextafter",
    "packbits",
    "place",
    "poly",
    "polyadd",
    "polyder",
    "polydiv",
    "polyint",
    "polymul",
    "polysub",
    "positive",
    "printoptions",
    "r_",
    "s_",
    "save",
    "savez",
    "set_printoptions",
    "spacing",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "unpackbits",
]

euler_gamma = np.euler_gamma
# NumPy's printing options, which a tensor's repr follows
printoptions, set_printoptions, get_printoptions = (
    np.printoptions,
    np.set_printoptions,
    np.get_printoptions,
)
s_, index_exp = np.s_, np.index_exp
bitwise_invert = invert = unary.bitwise_not
bitwise_left_shift, bitwise_right_shift = binary.left_shift, binary.right_shift


def _float(x, op: str) -> Tensor:
    x = as_tensor(x, op=op)
    return x if x.dtype.is_float else unary.cast(x, get_default_dtype())


def _ints(x, op: str) -> Tensor:
    x = as_tensor(x, op=op)
    if not x.dtype.is_int:
        raise OpError(f"{op}: needs integers, got {x.dtype.value}{list(x.shape)}")
    return x


# ----------------------------------------------------------------------------- elementwise
def fabs(x) -> Tensor:
    """NumPy's and JAX's ``fabs``: the absolute value as a float (integers become the
    default float).

    Args:
        x: the input.

    Returns:
        A float tensor like ``x``.
    """
    return unary.abs(_float(x, "fabs"))


def positive(x) -> Tensor:
    """NumPy's and JAX's ``positive``: ``+x``, the values as they are.

    Args:
        x: the input (numbers, not bools).

    Returns:
        ``x`` as a tensor.
    """
    t = as_tensor(x, op="positive")
    if t.dtype.is_bool:
        raise OpError("positive: not defined for bool (as NumPy's)")
    return t


def angle(z, deg: bool = False) -> Tensor:
    """NumPy's and JAX's ``angle`` of real values (no complex dtype): 0 for ``x >= 0``,
    pi for ``x < 0`` (``atan2(0, x)``).

    Args:
        z: the values.
        deg: in degrees instead of radians.

    Returns:
        A float tensor like ``z``.
    """
    x = _float(z, "angle")
    a = binary.atan2(creation.zeros_like(x), x)
    return a * (180.0 / math.pi) if deg else a


def isposinf(x) -> Tensor:
    """NumPy's and JAX's ``isposinf``: where ``x`` is ``+inf``.

    Args:
        x: the values.

    Returns:
        A bool tensor like ``x``.
    """
    t = as_tensor(x, op="isposinf")
    return binary.logical_and(unary.is_inf(t), t > 0)


def isneginf(x) -> Tensor:
    """NumPy's and JAX's ``isneginf``: where ``x`` is ``-inf``.

    Args:
        x: the values.

    Returns:
        A bool tensor like ``x``.
    """
    t = as_tensor(x, op="isneginf")
    return binary.logical_and(unary.is_inf(t), t < 0)


def iscomplex(x) -> Tensor:
    """NumPy's and JAX's ``iscomplex``: False everywhere (there is no complex dtype).

    Args:
        x: the values.

    Returns:
        A bool tensor like ``x``.
    """
    return creation.zeros_like(as_tensor(x, op="iscomplex"), dtype=DType.bool)


def isreal(x) -> Tensor:
    """NumPy's and JAX's ``isreal``: True everywhere (there is no complex dtype).

    Args:
        x: the values.

    Returns:
        A bool tensor like ``x``.
    """
    return creation.ones_like(as_tensor(x, op="isreal"), dtype=DType.bool)


def iscomplexobj(x) -> bool:
    """NumPy's and JAX's ``iscomplexobj``: whether ``x`` has a complex dtype.

    Args:
        x: a tensor, array or number.

    Returns:
        A Python bool (False for every tensor).
    """
    return bool(np.iscomplexobj(x)) if not isinstance(x, Tensor) else False


def isrealobj(x) -> bool:
    """NumPy's and JAX's ``isrealobj``: ``not iscomplexobj(x)``.

    Args:
        x: a tensor, array or number.

    Returns:
        A Python bool.
    """
    return not iscomplexobj(x)


def isscalar(element) -> bool:
    """JAX's ``isscalar``: a Python or NumPy scalar, or a tensor or array of 0 dims.

    Args:
        element: anything.

    Returns:
        A Python bool.
    """
    if isinstance(element, numbers.Number | np.generic):
        return True
    if isinstance(element, Tensor | np.ndarray):
        return element.ndim == 0
    return False


def iterable(y) -> bool:
    """NumPy's and JAX's ``iterable``: whether ``iter(y)`` works (a tensor of 0 dims does
    not iterate).

    Args:
        y: anything.

    Returns:
        A Python bool.
    """
    if isinstance(y, Tensor):
        return y.ndim > 0
    try:
        iter(y)
    except TypeError:
        return False
    return True


def bitwise_count(x) -> Tensor:
    """NumPy's and JAX's ``bitwise_count``: the number of 1 bits of ``|x|``, as uint8.

    Args:
        x: integers.

    Returns:
        A uint8 tensor like ``x``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a dtype that is not an integer.
    """
    t = _ints(x, "bitwise_count")
    return popcount(t if t.dtype.is_unsigned else unary.abs(t))


def unsigned_bits(t: Tensor) -> Tensor:
    """The two's-complement bits of integers ``t`` as the unsigned dtype of their width."""
    return unary.cast(t, DType(f"uint{8 * t.dtype.itemsize}"))


def popcount(t: Tensor) -> Tensor:
    """The number of 1 bits of each integer's two's-complement form (uint8), by summing
    neighbouring bit fields (the count of ``|x|`` for ``bitwise_count``'s ``abs`` first)."""
    u = unsigned_bits(t)
    bits = 8 * t.dtype.itemsize

    def mask(pattern: int) -> int:  # the byte pattern repeated over the width
        return int.from_bytes(bytes([pattern]) * (bits // 8), "little")

    u = u - binary.bitwise_and(u >> 1, mask(0x55))
    u = binary.bitwise_and(u, mask(0x33)) + binary.bitwise_and(u >> 2, mask(0x33))
    u = binary.bitwise_and(u + (u >> 4), mask(0x0F))
    shift = 8
    while shift < bits:  # the bytes' counts summed into the lowest byte
        u = u + (u >> shift)
        shift *= 2
    return unary.cast(binary.bitwise_and(u, 0xFF), DType.uint8)


def gcd(x1, x2) -> Tensor:
    """NumPy's and JAX's ``gcd``: the greatest common divisor of ``|x1|`` and ``|x2|``
    (Euclid's algorithm in a ``while_loop``, so it compiles and batches; 0 for two zeros).

    Args:
        x1: integers.
        x2: integers (broadcast with ``x1``).

    Returns:
        The divisors, in the promoted integer dtype.

    Raises:
        ValueError: (:class:`nabla.OpError`) for operands that are not integers.
    """
    a, b = _int_pair(x1, x2, "gcd")
    zero = creation.zeros_like(a)

    def body(ab):
        p, q = ab
        done = q == 0
        safe = binary.where(done, creation.ones_like(q), q)
        return binary.where(done, p, q), binary.where(done, zero, binary.mod(p, safe))

    return while_loop(lambda ab: reduction.any(ab[1] != 0), body, (a, b))[0]


def lcm(x1, x2) -> Tensor:
    """NumPy's and JAX's ``lcm``: the least common multiple of ``|x1|`` and ``|x2|`` (0 where
    either is 0).

    Args:
        x1: integers.
        x2: integers (broadcast with ``x1``).

    Returns:
        The multiples, in the promoted integer dtype.

    Raises:
        ValueError: (:class:`nabla.OpError`) for operands that are not integers.
    """
    a, b = _int_pair(x1, x2, "lcm")
    d = gcd(a, b)
    safe = binary.where(d == 0, creation.ones_like(d), d)
    return binary.where(d == 0, creation.zeros_like(d), binary.floor_div(a, safe) * b)


def _int_pair(x1, x2, op: str):
    a, b = (_ints(v, op) for v in (x1, x2))
    dt = promote_types(a.dtype, b.dtype)
    shape = binary.broadcast_shapes(op, a.shape, b.shape)
    return tuple(unary.abs(view.broadcast_to(unary.cast(v, dt), shape)) for v in (a, b))


# ----------------------------------------------------------------------------- float parts
def _pow2_parts(dt: DType):
    """The exponent bound past which ``x * 2**e`` is 0 or inf for every ``x``, and the table
    of exact powers of two, ``2**k`` for ``|k| <= bound / 3 + 2``, that three factors use."""
    fi = finfo(dt)
    bound = int(fi.maxexp - fi.minexp + fi.nmant + 2)
    part = bound // 3 + 2
    with np.errstate(over="ignore"):  # (float16's largest powers are inf; never gathered)
        table = np.ldexp(1.0, np.arange(-part, part + 1)).astype(dt.numpy)
    return bound, part, table


def _times_pow2(x: Tensor, e: Tensor) -> Tensor:
    """``x * 2**e`` by exact powers of two gathered from a table (three factors, so each is
    representable): no ``exp2``, whose rounding would leak into the mantissa."""
    bound, part, table = _pow2_parts(x.dtype)
    if e.dtype.is_unsigned:  # -bound is out of an unsigned type's range: clip above only
        e = binary.minimum(e, bound) if e.dtype.itemsize > 1 else e
        e = unary.cast(e, DType.int32)
    e = unary.cast(binary.clip(e, -bound, bound), DType.int32)
    q = binary.floor_div(e, 3)
    powers = as_tensor(table, x.dtype, "ldexp")
    for k in (q, q, e - 2 * q):
        x = x * indexing.take(powers, k + part, axis=0)
    return x


def ldexp(x1, x2) -> Tensor:
    """NumPy's and JAX's ``ldexp``: ``x1 * 2**x2``, exact unless the result is subnormal,
    0 or inf.

    Args:
        x1: the values (integers become the default float).
        x2: integer exponents (broadcast with ``x1``).

    Returns:
        A float tensor of the broadcast shape.

    Raises:
        ValueError: (:class:`nabla.OpError`) for exponents that are not integers.
    """
    x = _float(x1, "ldexp")
    e = _ints(x2, "ldexp")
    shape = binary.broadcast_shapes("ldexp", x.shape, e.shape)
    return _times_pow2(view.broadcast_to(x, shape), view.broadcast_to(e, shape))


def frexp(x):
    """NumPy's and JAX's ``frexp``: ``(m, e)`` with ``x = m * 2**e`` and ``0.5 <= |m| < 1``;
    ``(x, 0)`` for zeros, infinities and NaN. Subnormals are split exactly, as NumPy's.

    Args:
        x: the values (integers become the default float).

    Returns:
        ``(mantissa, exponent)``: a float tensor and an int32 tensor, like ``x``.
    """
    t = _float(x, "frexp")
    ok = binary.logical_and(unary.isfinite(t), t != 0)
    safe = binary.where(ok, t, creation.ones_like(t))
    e = unary.cast(unary.floor(unary.log2(unary.abs(safe))), DType.int32) + 1
    m = _times_pow2(safe, -e)
    # log2 rounds near powers of two: one step either way puts |m| in [0.5, 1)
    big, small = unary.abs(m) >= 1.0, unary.abs(m) < 0.5
    m = binary.where(big, m * 0.5, binary.where(small, m * 2.0, m))
    e = e + unary.cast(big, DType.int32) - unary.cast(small, DType.int32)
    return binary.where(ok, m, t), binary.where(ok, e, creation.zeros_like(e))


def nextafter(x1, x2) -> Tensor:
    """NumPy's and JAX's ``nextafter``: the float after ``x1`` towards ``x2`` (``x2`` where
    they are equal; the smallest subnormal, signed as ``x2``, from a zero). Subnormals need a
    backend that keeps them (NumPy's does).

    Args:
        x1: the start (integers become the default float).
        x2: the direction (broadcast with ``x1``).

    Returns:
        A float tensor of the broadcast shape.
    """
    a, b = _float(x1, "nextafter"), _float(x2, "nextafter")
    dt = promote_types(a.dtype, b.dtype)
    shape = binary.broadcast_shapes("nextafter", a.shape, b.shape)
    a, b = (view.broadcast_to(unary.cast(v, dt), shape) for v in (a, b))
    fi = finfo(dt)
    digits, lowest = int(fi.nmant) + 1, int(fi.minexp) - int(fi.nmant)  # 2**lowest: the tiniest
    mag = unary.abs(a)
    m, e = frexp(binary.where(mag == 0, creation.ones_like(mag), mag))
    e_ulp = binary.maximum(e - digits, lowest)
    # going towards zero from a power of two the step halves (unless it is the tiniest)
    halve = binary.logical_and(m == 0.5, e - digits - 1 >= lowest)
    away = (b > a) == (a > 0)
    shrink = unary.cast(binary.logical_and(halve, unary.logical_not(away)), DType.int32)
    step = _times_pow2(creation.ones_like(mag), e_ulp - shrink)
    moved = binary.where(away, mag + step, mag - step)
    moved = binary.where(a < 0, -moved, moved)
    tiny = _times_pow2(creation.ones_like(mag), creation.full(shape, lowest, dtype=DType.int32))
    from_zero = binary.where(b < 0, -tiny, tiny)
    out = binary.where(a == 0, from_zero, moved)
    largest = creation.full_like(a, float(fi.max))
    out = binary.where(unary.is_inf(a), binary.where(a < 0, -largest, largest), out)
    out = binary.where(a == b, b, out)
    return binary.where(binary.logical_or(unary.is_nan(a), unary.is_nan(b)), a + b, out)


def spacing(x) -> Tensor:
    """NumPy's and JAX's ``spacing``: the distance from ``x`` to the next float away from
    zero, signed as ``x`` (JAX's sign at ``-0.0``); inf at the largest float, NaN at inf.

    Args:
        x: the values (integers become the default float).

    Returns:
        A float tensor like ``x``.
    """
    t = _float(x, "spacing")
    inf = binary.where(af.signbit(t), creation.full_like(t, -np.inf), creation.full_like(t, np.inf))
    return nextafter(t, inf) - t


def histogramdd(sample, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """NumPy's and JAX's ``histogramdd``: the counts of ``D``-dimensional samples in a grid
    of bins, each dim binned as :func:`nabla.histogram` bins (a bin holds its lower edge,
    the last also its upper one; samples outside are left out). Counts are floats, as JAX's.

    Args:
        sample: ``(N, D)`` points (or ``D`` 1-D tensors).
        bins: one count for every dim, or per dim a count or increasing edges.
        range: per dim ``(lower, upper)`` of the equal bins (the data's by default).
        weights: ``(N,)`` weights summed instead of counted.
        density: divide by the total and the bins' volumes.

    Returns:
        ``(hist, edges)``: the ``D``-dim counts and a list of ``D`` edge tensors.
    """
    if isinstance(sample, list | tuple):
        pts = view.stack([_float(s, "histogramdd") for s in sample], 1)
    else:
        pts = _float(sample, "histogramdd")
    if pts.ndim == 1:
        pts = view.reshape(pts, (-1, 1))
    if pts.ndim != 2:
        raise OpError(f"histogramdd: sample must be (N, D), got shape {tuple(pts.shape)}")
    n, d = pts.shape
    per_dim = [bins] * d if isinstance(bins, numbers.Integral) else list(bins)
    ranges = [None] * d if range is None else list(range)
    if len(per_dim) != d or len(ranges) != d:
        raise OpError(f"histogramdd: bins and range need one entry per dim ({d})")
    flat = creation.zeros((n,), dtype=DType.int32)
    inside = creation.ones((n,), dtype=DType.bool)
    edges, sizes = [], []
    for k in builtins.range(d):
        x = pts[:, k]
        e = af.histogram_bin_edges(x, per_dim[k], ranges[k])
        nb_ = e.shape[0] - 1
        idx = af.searchsorted(e, x, side="right") - 1
        idx = binary.where(x == e[nb_], creation.full_like(idx, nb_ - 1), idx)
        inside = binary.logical_and(inside, binary.logical_and(x >= e[0], x <= e[nb_]))
        flat = flat * nb_ + unary.cast(idx, DType.int32)
        edges.append(e)
        sizes.append(nb_)
    total = int(np.prod(sizes))
    hits = binary.logical_and(
        view.reshape(flat, (-1, 1)) == creation.arange(total, dtype=DType.int32),
        view.reshape(inside, (-1, 1)),
    )
    w = creation.ones((n,), dtype=pts.dtype) if weights is None else _float(weights, "histogramdd")
    w = view.reshape(unary.cast(w, pts.dtype), (-1, 1))
    hist = view.reshape(reduction.sum(binary.where(hits, w, creation.zeros_like(w)), 0), sizes)
    if density:
        volume = creation.ones(tuple(sizes), dtype=pts.dtype)
        for k, e in enumerate(edges):
            shape = [1] * d
            shape[k] = -1
            volume = volume * view.reshape(e[1:] - e[:-1], tuple(shape))
        hist = hist / (reduction.sum(hist) * volume)
    return hist, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """NumPy's and JAX's ``histogram2d``: :func:`histogramdd` of the points ``(x, y)``.

    Args:
        x: the first coordinates ``(N,)``.
        y: the second coordinates ``(N,)``.
        bins: one count, a count per dim, edges for both, or edges per dim.
        range: ``((xmin, xmax), (ymin, ymax))``.
        weights: ``(N,)`` weights summed instead of counted.
        density: divide by the total and the bins' areas.

    Returns:
        ``(hist, xedges, yedges)``.
    """
    if not isinstance(bins, numbers.Integral) and np.ndim(bins) == 1 and len(bins) != 2:
        bins = [bins, bins]  # one array of edges for both dims
    hist, (ex, ey) = histogramdd([x, y], bins, range, weights, density)
    return hist, ex, ey


# ----------------------------------------------------------------------------- polynomials
def _poly(p, op: str, exact: bool = False) -> Tensor:
    # exact: integer coefficients stay integers (sums and differences, as NumPy's)
    t = as_tensor(p, op=op) if exact else _float(p, op)
    if t.ndim != 1:
        raise OpError(f"{op}: a polynomial is 1-D coefficients, got shape {t.shape}")
    return t


def _same_length(a: Tensor, b: Tensor):
    n = max(a.shape[0], b.shape[0])
    dt = promote_types(a.dtype, b.dtype)
    pad = [view.pad(unary.cast(v, dt), [(n - v.shape[0], 0)]) for v in (a, b)]
    return pad[0], pad[1]


def polyadd(a1, a2) -> Tensor:
    """NumPy's and JAX's ``polyadd``: the sum of two polynomials (highest power first).

    Args:
        a1: 1-D coefficients.
        a2: 1-D coefficients.

    Returns:
        The coefficients, as long as the longer.
    """
    a, b = _same_length(_poly(a1, "polyadd", True), _poly(a2, "polyadd", True))
    return a + b


def polysub(a1, a2) -> Tensor:
    """NumPy's and JAX's ``polysub``: ``a1 - a2`` as polynomials (highest power first).

    Args:
        a1: 1-D coefficients.
        a2: 1-D coefficients.

    Returns:
        The coefficients, as long as the longer.
    """
    a, b = _same_length(_poly(a1, "polysub", True), _poly(a2, "polysub", True))
    return a - b


def polymul(a1, a2, *, trim_leading_zeros: bool = False) -> Tensor:
    """NumPy's and JAX's ``polymul``: the product of two polynomials (their convolution).

    Args:
        a1: 1-D coefficients.
        a2: 1-D coefficients.
        trim_leading_zeros: accepted for JAX's signature; the shape stays static.

    Returns:
        ``len(a1) + len(a2) - 1`` coefficients.
    """
    a, b = _same_dtype(_poly(a1, "polymul"), _poly(a2, "polymul"))
    return af.convolve(a, b)


def _same_dtype(a: Tensor, b: Tensor):
    dt = promote_types(a.dtype, b.dtype)
    return unary.cast(a, dt), unary.cast(b, dt)


def polyder(p, m: int = 1) -> Tensor:
    """NumPy's and JAX's ``polyder``: the ``m``-th derivative of a polynomial.

    Args:
        p: 1-D coefficients (highest power first).
        m: how many times to differentiate (a non-negative int).

    Returns:
        ``max(len(p) - m, 0)`` coefficients.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a negative ``m``.
    """
    t = _poly(p, "polyder")
    if not isinstance(m, numbers.Integral) or m < 0:
        raise OpError(f"polyder: m must be a non-negative int, got {m!r}")
    for _ in range(int(m)):
        n = t.shape[0]
        t = t[: max(n - 1, 0)] * as_tensor(np.arange(n - 1, 0, -1), t.dtype, "polyder")
    return t


def polyint(p, m: int = 1, k=None) -> Tensor:
    """NumPy's and JAX's ``polyint``: the ``m``-th antiderivative of a polynomial.

    Args:
        p: 1-D coefficients (highest power first).
        m: how many times to integrate (a non-negative int).
        k: the integration constants: one for all, or ``m`` of them (the first for the
            first integration); 0 by default.

    Returns:
        ``len(p) + m`` coefficients.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a negative ``m`` or a ``k`` of the wrong
            length.
    """
    t = _poly(p, "polyint")
    if not isinstance(m, numbers.Integral) or m < 0:
        raise OpError(f"polyint: m must be a non-negative int, got {m!r}")
    consts = view.reshape(as_tensor(0.0 if k is None else k, t.dtype, "polyint"), (-1,))
    if consts.shape[0] == 1:
        consts = view.broadcast_to(consts, (int(m),))
    if consts.shape[0] != m:
        raise OpError(f"polyint: k must be one constant or m = {m}, got {consts.shape[0]}")
    for i in range(int(m)):
        n = t.shape[0]
        t = t / as_tensor(np.arange(n, 0, -1), t.dtype, "polyint")
        t = view.concatenate([t, consts[i : i + 1]], 0)
    return t


def polydiv(u, v, *, trim_leading_zeros: bool = False):
    """NumPy's and JAX's ``polydiv``: quotient and remainder of ``u / v`` by long division.
    As JAX's, the remainder keeps ``u``'s length (zeros in front), so shapes are static.

    Args:
        u: the dividend's 1-D coefficients (highest power first).
        v: the divisor's (its leading coefficient nonzero).
        trim_leading_zeros: accepted for JAX's signature; the shapes stay static.

    Returns:
        ``(q, r)``: ``len(u) - len(v) + 1`` (at least 1) and ``len(u)`` coefficients.
    """
    a, b = _same_dtype(_poly(u, "polydiv"), _poly(v, "polydiv"))
    n, d = a.shape[0], b.shape[0]
    rem = list(view.unbind(a, 0)) if n else []
    div = list(view.unbind(b, 0))
    quot = []
    for i in range(max(n - d + 1, 0)):
        c = rem[i] / div[0]
        quot.append(c)
        rem[i] = creation.zeros_like(c)
        for j in range(1, d):
            rem[i + j] = rem[i + j] - c * div[j]
    q = view.stack(quot, 0) if quot else creation.zeros((1,), dtype=a.dtype)
    return q, view.stack(rem, 0) if rem else a


def poly(seq_of_zeros) -> Tensor:
    """NumPy's and JAX's ``poly`` of 1-D roots: the monic polynomial with those zeros.

    Args:
        seq_of_zeros: the roots (1-D; a matrix's characteristic polynomial needs its
            eigenvalues, which are not built).

    Returns:
        ``len(seq_of_zeros) + 1`` coefficients, highest power first (a 0-d 1 for no roots).

    Raises:
        ValueError: (:class:`nabla.OpError`) for an input that is not 1-D.
    """
    z = _float(seq_of_zeros, "poly")
    if z.ndim == 0:
        z = view.reshape(z, (1,))
    if z.ndim != 1:
        raise OpError(f"poly: the roots must be 1-D (matrices are not supported), got {z.shape}")
    if z.shape[0] == 0:
        return creation.ones((), dtype=z.dtype)  # NumPy's 1.0
    out = creation.ones((1,), dtype=z.dtype)
    zero = creation.zeros((1,), dtype=z.dtype)
    for r in view.unbind(z, 0):
        # times (x - r), with no r * 0 term: the leading 1 stays exact for a NaN or inf root
        out = view.concatenate([out, zero], 0) + view.concatenate([zero, -r * out], 0)
    return out


# ----------------------------------------------------------------------------- windows
def _window(op: str, m, values) -> Tensor:
    m = concrete_int(m)
    if not isinstance(m, numbers.Integral):
        raise OpError(f"{op}: M must be an int, got {m!r}")
    return as_tensor(np.asarray(values(int(m))), get_default_dtype(), op)


def bartlett(M: int) -> Tensor:  # noqa: N803 - NumPy's name
    """NumPy's and JAX's triangular ``bartlett`` window of ``M`` points.

    Args:
        M: the number of points (none for ``M < 1``).

    Returns:
        A 1-D tensor of the default float dtype.
    """
    return _window("bartlett", M, np.bartlett)


def blackman(M: int) -> Tensor:  # noqa: N803
    """NumPy's and JAX's ``blackman`` window of ``M`` points.

    Args:
        M: the number of points (none for ``M < 1``).

    Returns:
        A 1-D tensor of the default float dtype.
    """
    return _window("blackman", M, np.blackman)


def hamming(M: int) -> Tensor:  # noqa: N803
    """NumPy's and JAX's ``hamming`` window of ``M`` points.

    Args:
        M: the number of points (none for ``M < 1``).

    Returns:
        A 1-D tensor of the default float dtype.
    """
    return _window("hamming", M, np.hamming)


def hanning(M: int) -> Tensor:  # noqa: N803
    """NumPy's and JAX's ``hanning`` window of ``M`` points.

    Args:
        M: the number of points (none for ``M < 1``).

    Returns:
        A 1-D tensor of the default float dtype.
    """
    return _window("hanning", M, np.hanning)


def kaiser(M: int, beta) -> Tensor:  # noqa: N803
    """NumPy's and JAX's ``kaiser`` window: ``i0(beta sqrt(1 - (2n/(M-1) - 1)^2)) /
    i0(beta)``; differentiable in ``beta``, which may be a tensor.

    Args:
        M: the number of points (none for ``M < 1``).
        beta: the shape parameter.

    Returns:
        A 1-D tensor of ``beta``'s float dtype (the default one for a number).
    """
    if not isinstance(M, numbers.Integral):
        raise OpError(f"kaiser: M must be an int, got {M!r}")
    b = _float(beta, "kaiser")
    if M == 1:
        return creation.ones((1,), dtype=b.dtype)
    half = (int(M) - 1) / 2.0
    n = (np.arange(max(int(M), 0)) - half) / half if M > 1 else np.zeros(0)
    r = as_tensor(np.sqrt(np.maximum(1.0 - n * n, 0.0)), b.dtype, "kaiser")
    return i0(b * r) / i0(b)


# ----------------------------------------------------------------------------- bits
def _bit_weights(bitorder: str, op: str) -> np.ndarray:
    if bitorder not in ("big", "little"):
        raise OpError(f"{op}: bitorder must be 'big' or 'little', got {bitorder!r}")
    w = 1 << np.arange(8)
    return w[::-1] if bitorder == "big" else w


def packbits(a, axis=None, bitorder: str = "big") -> Tensor:
    """NumPy's and JAX's ``packbits``: nonzero elements as 1 bits, eight to a uint8,
    zero-padded at the end.

    Args:
        a: bools or integers.
        axis: the axis to pack along (None: the flattened input).
        bitorder: ``"big"`` (the first element is the highest bit) or ``"little"``.

    Returns:
        A uint8 tensor, ``ceil(n / 8)`` long along ``axis``.
    """
    t = as_tensor(a, op="packbits")
    if t.dtype.is_float:
        raise OpError(f"packbits: needs bools or integers, got {t.dtype.value}{list(t.shape)}")
    weights = _bit_weights(bitorder, "packbits")
    if axis is None:
        t, axis = view.reshape(t, (-1,)), 0
    ax = norm_axis("packbits", axis, t.ndim, t.shape)
    t = view.moveaxis(unary.cast(t != 0, DType.int32), ax, -1)
    n = t.shape[-1]
    pads = [(0, 0)] * (t.ndim - 1) + [(0, -n % 8)]
    t = view.reshape(view.pad(t, pads), (*t.shape[:-1], -1, 8))
    packed = reduction.sum(t * as_tensor(weights, DType.int32, "packbits"), -1)
    return view.moveaxis(unary.cast(packed, DType.uint8), -1, ax)


def unpackbits(a, axis=None, count=None, bitorder: str = "big") -> Tensor:
    """NumPy's and JAX's ``unpackbits``: each uint8 as its eight bits.

    Args:
        a: uint8 values.
        axis: the axis to unpack along (None: the flattened input).
        count: keep this many bits along ``axis`` (negative: drop that many from the end;
            more than there are: zero-padded).
        bitorder: ``"big"`` (the highest bit first) or ``"little"``.

    Returns:
        A uint8 tensor of 0s and 1s.
    """
    t = as_tensor(a, op="unpackbits")
    if t.dtype is not DType.uint8:
        raise OpError(f"unpackbits: needs uint8, got {t.dtype.value}{list(t.shape)}")
    weights = _bit_weights(bitorder, "unpackbits")
    if axis is None:
        t, axis = view.reshape(t, (-1,)), 0
    ax = norm_axis("unpackbits", axis, t.ndim, t.shape)
    t = view.moveaxis(t, ax, -1)
    bits = binary.bitwise_and(view.unsqueeze(t, -1), as_tensor(weights, DType.uint8, "unpackbits"))
    bits = unary.cast(bits != 0, DType.uint8)
    bits = view.reshape(bits, (*t.shape[:-1], t.shape[-1] * 8))
    if count is not None:
        n = bits.shape[-1]
        keep = count if count >= 0 else max(n + count, 0)
        if keep <= n:
            bits = bits[..., :keep]
        else:
            bits = view.pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, keep - n)])
    return view.moveaxis(bits, -1, ax)


# ----------------------------------------------------------------------------- array API unique
UniqueAllResult = collections.namedtuple(
    "UniqueAllResult", ["values", "indices", "inverse_indices", "counts"]
)
UniqueCountsResult = collections.namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = collections.namedtuple("UniqueInverseResult", ["values", "inverse_indices"])


def unique_all(x, *, size=None, fill_value=None):
    """The array API's (and JAX's) ``unique_all``: the sorted distinct values, each one's
    first index, each element's position among them (``x``'s shape) and the counts.

    Args:
        x: a tensor (flattened).
        size: JAX's static number of values (so it runs under ``compile`` and ``vmap``).
        fill_value: the value past the distinct ones when ``size`` is larger.

    Returns:
        ``UniqueAllResult(values, indices, inverse_indices, counts)``.
    """
    out = af.unique(x, True, True, True, size=size, fill_value=fill_value)
    return UniqueAllResult(*out)


def unique_counts(x, *, size=None, fill_value=None):
    """The array API's ``unique_counts``: the sorted distinct values and their counts.

    Args:
        x: a tensor (flattened).
        size: JAX's static number of values.
        fill_value: the value past the distinct ones when ``size`` is larger.

    Returns:
        ``UniqueCountsResult(values, counts)``.
    """
    return UniqueCountsResult(*af.unique(x, return_counts=True, size=size, fill_value=fill_value))


def unique_inverse(x, *, size=None, fill_value=None):
    """The array API's ``unique_inverse``: the sorted distinct values and each element's
    position among them (``x``'s shape).

    Args:
        x: a tensor (flattened).
        size: JAX's static number of values.
        fill_value: the value past the distinct ones when ``size`` is larger.

    Returns:
        ``UniqueInverseResult(values, inverse_indices)``.
    """
    return UniqueInverseResult(*af.unique(x, return_inverse=True, size=size, fill_value=fill_value))


def unique_values(x, *, size=None, fill_value=None) -> Tensor:
    """The array API's ``unique_values``: the sorted distinct values.

    Args:
        x: a tensor (flattened).
        size: JAX's static number of values.
        fill_value: the value past the distinct ones when ``size`` is larger.

    Returns:
        A 1-D tensor.
    """
    return af.unique(x, size=size, fill_value=fill_value)


# ----------------------------------------------------------------------------- conveniences
def fromfunction(function, shape, *, dtype=float, **kwargs):
    """NumPy's and JAX's ``fromfunction``: ``function`` called once on the grids of indices
    (``nb.indices(shape, dtype)``, one tensor per dim).

    Args:
        function: ``f(*index_grids, **kwargs)``.
        shape: the shape of the grids.
        dtype: the grids' dtype (``float``: the default float).
        **kwargs: passed to ``function``.

    Returns:
        What ``function`` returns.
    """
    grids = af.indices(tuple(shape), dtype=to_dtype(dtype, "fromfunction"))
    return function(*grids, **kwargs)


def mask_indices(n: int, mask_func, k=0, *, size=None):
    """NumPy's and JAX's ``mask_indices``: the indices where ``mask_func(ones((n, n)), k)``
    is nonzero (``nb.triu`` gives the upper triangle's).

    Args:
        n: the side of the square.
        mask_func: ``f(square, k)``, e.g. ``nb.triu`` or ``nb.tril``.
        k: passed to ``mask_func``.
        size: JAX's static number of indices (padded with zeros, or cut).

    Returns:
        ``(rows, cols)``: int32 tensors.
    """
    square = creation.ones((int(n), int(n)), dtype=DType.int32)
    rows, cols = np.nonzero(np.asarray(mask_func(square, k)))
    if size is not None:
        rows, cols = (np.resize(np.pad(v, (0, max(size - len(v), 0))), size) for v in (rows, cols))
    return tuple(as_tensor(v.astype(np.int32), DType.int32, "mask_indices") for v in (rows, cols))


def apply_over_axes(func, a, axes):
    """NumPy's and JAX's ``apply_over_axes``: ``a = func(a, axis)`` for each axis in turn,
    a reduced axis put back as a dim of size 1.

    Args:
        func: ``f(tensor, axis)``, returning a tensor of the same rank or one less.
        a: the input.
        axes: an int or a sequence of ints.

    Returns:
        A tensor of ``a``'s rank.

    Raises:
        ValueError: (:class:`nabla.OpError`) when ``func`` changes the rank otherwise.
    """
    t = as_tensor(a, op="apply_over_axes")
    for axis in [axes] if isinstance(axes, numbers.Integral) else list(axes):
        ax = norm_axis("apply_over_axes", axis, t.ndim, t.shape)
        res = as_tensor(func(t, ax), op="apply_over_axes")
        if res.ndim == t.ndim - 1:
            res = view.unsqueeze(res, ax)
        elif res.ndim != t.ndim:
            raise OpError(
                f"apply_over_axes: func must keep the rank or drop one dim; it gave shape "
                f"{res.shape} for {t.shape} along axis {ax}"
            )
        t = res
    return t


class _Concatenator:
    """``r_`` and ``c_``: NumPy's index tricks for building 1-D and column arrays (slices
    become ``arange``, or ``linspace`` for a complex step; no string directives)."""

    def __init__(self, columns: bool):
        self.columns = columns

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        parts = []
        for item in items:
            if isinstance(item, str):
                raise OpError("r_/c_: string directives are not supported")
            if isinstance(item, slice):
                start = 0 if item.start is None else item.start
                step = 1 if item.step is None else item.step
                if isinstance(step, complex):
                    part = creation.linspace(start, item.stop, int(abs(step)))
                else:
                    part = creation.arange(start, item.stop, step)
            else:
                part = as_tensor(item, op="r_")
            parts.append(part)
        if not self.columns:
            parts = [view.reshape(p, (1,)) if p.ndim == 0 else p for p in parts]
            dt = parts[0].dtype
            for p in parts[1:]:
                dt = promote_types(dt, p.dtype)
            return view.concatenate([unary.cast(p, dt) for p in parts], 0)
        cols = []
        for p in parts:
            p = view.reshape(p, (1,)) if p.ndim == 0 else p
            cols.append(view.reshape(p, (-1, 1)) if p.ndim == 1 else p)
        dt = cols[0].dtype
        for p in cols[1:]:
            dt = promote_types(dt, p.dtype)
        return view.concatenate([unary.cast(p, dt) for p in cols], -1)


r_ = _Concatenator(columns=False)
c_ = _Concatenator(columns=True)


def fromiter(iterable, dtype, count: int = -1) -> Tensor:
    """NumPy's ``fromiter``: a 1-D tensor of ``iterable``'s values.

    Args:
        iterable: numbers.
        dtype: the dtype.
        count: how many to read (-1: all).

    Returns:
        A 1-D tensor.
    """
    dt = to_dtype(dtype, "fromiter")
    return as_tensor(np.fromiter(iterable, dt.numpy, count), dt, "fromiter")


def frombuffer(buffer, dtype=float, count: int = -1, offset: int = 0) -> Tensor:
    """NumPy's and JAX's ``frombuffer``: a 1-D tensor of a buffer's bytes read as
    ``dtype`` (a copy).

    Args:
        buffer: an object exposing the buffer protocol (``bytes``, ...).
        dtype: the dtype (``float``: the default float).
        count: how many items to read (-1: all).
        offset: the bytes to skip first.

    Returns:
        A 1-D tensor.
    """
    dt = to_dtype(dtype, "frombuffer")
    return as_tensor(np.frombuffer(buffer, dt.numpy, count, offset).copy(), dt, "frombuffer")


def save(file, arr, allow_pickle: bool = True) -> None:
    """NumPy's ``save`` of a tensor's value (``.npy``).

    Args:
        file: a path or a file object.
        arr: the tensor (or array).
        allow_pickle: NumPy's.
    """
    np.save(file, np.asarray(arr), allow_pickle=allow_pickle)


def savez(file, *args, **kwds) -> None:
    """NumPy's ``savez`` of tensors (an ``.npz`` of their values).

    Args:
        file: a path or a file object.
        *args: tensors, saved as ``arr_0``, ``arr_1``, ...
        **kwds: tensors saved under their names.
    """
    np.savez(file, *(np.asarray(a) for a in args), **{k: np.asarray(v) for k, v in kwds.items()})


def load(file, *args, **kwargs):
    """NumPy's and JAX's ``load``: an ``.npy`` file becomes a tensor; anything else
    (an ``.npz`` archive) is NumPy's object.

    Args:
        file: a path or a file object.
        *args: NumPy's ``load`` arguments.
        **kwargs: NumPy's ``load`` keywords.

    Returns:
        A tensor, or NumPy's ``NpzFile``.
    """
    out = np.load(file, *args, **kwargs)
    return as_tensor(out, op="load") if isinstance(out, np.ndarray) else out


def array_str(a, max_line_width=None, precision=None, suppress_small=None) -> str:
    """NumPy's ``array_str`` of a tensor's values.

    Args:
        a: the tensor.
        max_line_width: NumPy's.
        precision: NumPy's.
        suppress_small: NumPy's.

    Returns:
        A string.
    """
    return np.array_str(np.asarray(a), max_line_width, precision, suppress_small)


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None) -> str:
    """NumPy's ``array_repr`` of a tensor's values.

    Args:
        arr: the tensor.
        max_line_width: NumPy's.
        precision: NumPy's.
        suppress_small: NumPy's.

    Returns:
        A string.
    """
    return np.array_repr(np.asarray(arr), max_line_width, precision, suppress_small)


def einsum_path(subscripts, *operands, optimize="auto"):
    """NumPy's and JAX's ``einsum_path``: the contraction order ``einsum`` would take (by
    NumPy's planner, from the operands' shapes) and its report.

    Args:
        subscripts: the ``einsum`` subscripts.
        *operands: tensors or arrays (only their shapes are read).
        optimize: NumPy's ``"greedy"``/``"optimal"``/``"auto"`` or an explicit path.

    Returns:
        ``(path, report)``, as NumPy's.
    """
    shapes = [np.empty(tuple(getattr(o, "shape", np.shape(o))), np.float32) for o in operands]
    strategy = "greedy" if optimize in ("auto", True) else optimize
    path, report = np.einsum_path(subscripts, *shapes, optimize=strategy)
    return [tuple(step) for step in path[1:]], report


def place(arr, mask, vals, *, inplace: bool = True):
    """JAX's ``place``: ``arr`` with the positions where ``mask`` holds taking ``vals`` in
    order (repeated as needed). As JAX's, there is no in-place form: pass
    ``inplace=False``.

    Args:
        arr: the values.
        mask: a bool array of ``arr``'s shape (its values read at the call).
        vals: the values to place (1-D, repeated cyclically).
        inplace: must be False.

    Returns:
        A new tensor like ``arr``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for ``inplace=True`` or an empty ``vals`` with
            positions to fill.
    """
    if inplace:
        raise OpError("place: JAX arrays cannot be changed in place; pass inplace=False")
    x = as_tensor(arr, op="place")
    where = np.flatnonzero(np.asarray(mask, bool).reshape(-1))
    v = view.reshape(unary.cast(as_tensor(vals, op="place"), x.dtype), (-1,))
    if where.size == 0:
        return x
    if v.shape[0] == 0:
        raise OpError("place: vals is empty but the mask selects positions")
    picks = as_tensor((np.arange(where.size) % v.shape[0]).astype(np.int32), op="place")
    flat = view.reshape(x, (-1,))
    updated = indexing.scatter(
        flat, as_tensor(where.astype(np.int32), op="place"), indexing.take(v, picks, axis=0)
    )
    return view.reshape(updated, tuple(x.shape))
