"""NumPy lowering table: backend op name -> ``fn(args, kwargs) -> list[ndarray]``.

Inputs are physical arrays (vmap batch prefix included); kwargs are the physical kwargs the
op's ``adapt_kwargs`` produced. The interpreter casts every result to the dtype the op's
shape rule predicted, so a lowering may return NumPy scalars or wider dtypes, and runs each
program under ``np.errstate(all="ignore")`` (IEEE results, no warnings, as on MAX), once
per program rather than once per op.
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np

__all__ = [
    "LOWERINGS",
    "DIRECT",
    "UFUNCS",
    "ELEMENTWISE",
    "MESH_REDUCE",
    "exchanges_data",
    "mesh_merge",
    "mesh_select",
    "mesh_split",
    "mesh_unshard",
    "partial_runs",
]

LOWERINGS: dict = {}
# For the straight-line lowering of hot programs (``fast.py``): per op of one result, the
# table entry and the function it wraps, called as ``fn(*args, **kwargs)`` (the entry is
# compared first: ``mpi.activate`` replaces some entries); per elementwise op that is a
# plain NumPy ufunc, that ufunc (then ``out=`` and in-place updates are open to it).
DIRECT: dict = {}
UFUNCS: dict = {}
# the elementwise ops (operands broadcast NumPy-style; element i of the result reads
# element i of each operand): ``nans.py`` compares their bad values position by position
ELEMENTWISE: set = set()


def _one(name):
    def deco(fn):
        entry = LOWERINGS[name] = lambda args, kw: [fn(*args, **kw)]
        DIRECT[name] = (entry, fn)
        return fn

    return deco


def _elementwise(name, fn):
    entry = LOWERINGS[name] = lambda args, kw: [fn(*args)]
    DIRECT[name] = (entry, fn)
    ELEMENTWISE.add(name)
    if isinstance(fn, np.ufunc):
        UFUNCS[name] = fn


# --------------------------------------------------------------------------- elementwise
_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    return np.asarray(_erf_scalar(x), dtype=x.dtype)


_SIGMOID_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


def _sigmoid(x):
    """``1 / (1 + exp(-x))``: four fast loops (a ``logaddexp`` form is ~8x slower and no
    more accurate above the subnormals, where this one gives 0 as XLA's does); float16 and
    bfloat16 go through float32, whose ``exp`` overflows only where the result is ~0."""
    dt = x.dtype
    w = x if dt in _SIGMOID_NATIVE else x.astype(np.float32)
    with np.errstate(over="ignore"):
        e = np.true_divide(1, np.add(np.exp(np.negative(w)), w.dtype.type(1)))
    return np.asarray(e, dtype=dt)


def _rsqrt(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1 / np.sqrt(x)


for _name, _fn in {
    "abs": np.abs,
    "neg": np.negative,
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "log2": np.log2,
    "log10": lambda x: (
        # (NumPy's float32 log10 is an ulp off at exact powers of ten: 3.0000002 for 1000)
        np.log10(x.astype(np.float64)).astype(x.dtype) if x.dtype.itemsize <= 4 else np.log10(x)
    ),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "atanh": np.arctanh,
    "erf": _erf,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "reciprocal": np.reciprocal,
    "sigmoid": _sigmoid,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
    "trunc": np.trunc,
    "is_nan": np.isnan,
    "is_inf": np.isinf,
    "logical_not": np.logical_not,
    "bitwise_not": np.invert,
    "identity": lambda x: x,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "floor_div": np.floor_divide,
    "mod": np.mod,
    "atan2": np.arctan2,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift,
    "right_shift": np.right_shift,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    "where": np.where,
}.items():
    _elementwise(_name, _fn)


_BLOCK = 4096
_FILLS: dict = {}


def _against_scalar(fn, x, value, out=None):
    """``fn(x, value)`` for a ufunc ``fn`` and a 0-d ``value`` of x's dtype, into ``out``
    (an array of x's dtype and shape, x itself allowed) when given. NumPy's maximum/minimum
    loops run 4-5x slower against a broadcast (stride-0) scalar than against a contiguous
    operand, so a large contiguous ``x`` goes through in rows of a cached block filled with
    the value (relu of a (16, 64, 512) activation: 0.40 -> 0.10 ms)."""
    n = x.size
    if n < 16 * _BLOCK or not x.flags.c_contiguous or not (out is None or out.flags.c_contiguous):
        return fn(x, value) if out is None else fn(x, value, out=out)
    value = np.asarray(value, dtype=x.dtype)
    key = (x.dtype, value.tobytes())
    block = _FILLS.get(key)
    if block is None:
        if len(_FILLS) > 64:
            _FILLS.clear()
        block = _FILLS[key] = np.full(_BLOCK, value, dtype=x.dtype)
    if out is None:
        out = np.empty_like(x)
    flat, flat_out = x.reshape(-1), out.reshape(-1)
    m = n - n % _BLOCK
    fn(flat[:m].reshape(-1, _BLOCK), block, out=flat_out[:m].reshape(-1, _BLOCK))
    if m < n:
        fn(flat[m:], value, out=flat_out[m:])
    return out


def _clamp(fn):
    def run(x, y):
        if x.dtype == y.dtype:  # otherwise NumPy promotes: the value must not be cast to x's
            if y.ndim == 0 and x.ndim > 0:
                return _against_scalar(fn, x, y)
            if x.ndim == 0 and y.ndim > 0:
                return _against_scalar(fn, y, x)
        return fn(x, y)

    return run


def _pow(x, y):
    # the ** 2 of squared errors and norms: a multiply runs 3x faster than the power loop;
    # their derivative 2 * x ** (2 - 1) raises to a computed 1: exactly x
    if y.ndim == 0 and x.dtype.kind == "f":
        if y == 2:
            return np.multiply(x, x)
        if y == 1:
            return x
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":
        negative = y < 0
        if negative.any():  # NumPy raises; JAX truncates: 1, (-1) ** y, else 0
            r = np.power(x, np.where(negative, 0, y))
            odd = (y % 2) != 0
            inverse = np.where(x == 1, 1, np.where(x == -1, np.where(odd, -1, 1), 0))
            return np.where(negative, inverse, r).astype(r.dtype)
    return np.power(x, y)


_elementwise("relu", lambda x: _against_scalar(np.maximum, x, x.dtype.type(0)))
_elementwise("maximum", _clamp(np.maximum))
_elementwise("minimum", _clamp(np.minimum))
_elementwise("pow", _pow)


@_one("cast")
def _cast(x, dtype):
    target = dtype.numpy
    with np.errstate(invalid="ignore", over="ignore"):
        out = x.astype(target)
    if x.size and target.kind in "iu" and (x.dtype.kind == "f" or x.dtype == ml_dtypes.bfloat16):
        # float -> int saturates and NaN is 0, as JAX/XLA (a C cast is undefined there,
        # and NumPy's gives INT_MIN); min/max first keep the in-range case to two passes.
        # [lo, hi) are powers of two (or 0), float64 scalars: a float16 x compares exactly
        info = np.iinfo(target)
        lo, hi = np.float64(info.min), np.float64(info.max) + 1.0
        if not (x.min() >= lo and x.max() < hi):  # also False for a NaN
            out[x >= hi] = info.max
            out[x < lo] = info.min
            out[np.isnan(x)] = 0
    return out


# --------------------------------------------------------------------------- creation
@_one("full")
def _full(shape, value, dtype, device):
    return np.full(shape, value, dtype=dtype.numpy)


@_one("arange")
def _arange(start, step, length, dtype, device):
    if dtype.is_float:
        return (np.arange(length, dtype=np.float64) * step + start).astype(dtype.numpy)
    if dtype.is_unsigned:  # (uint64 values past int64's range: computed in their own dtype)
        t, i = dtype.numpy.type, np.arange(length, dtype=dtype.numpy)
        return t(start) + i * t(step) if step >= 0 else t(start) - i * t(-step)
    return (np.arange(length, dtype=np.int64) * step + start).astype(dtype.numpy)


# --------------------------------------------------------------------------- reductions
_MAX_STEPS = 64  # a middle axis at most this long is reduced slice by slice


def _middle_axis(x, axes):
    """The one axis of ``axes`` when it is a short axis neither first nor last, over
    slices of at least 16 values: NumPy reduces such an axis in a strided inner loop
    (3-4x slower than one ufunc call per slice, as pooling windows and their counts are
    reduced); else None."""
    if len(axes) != 1 or x.ndim < 3:
        return None
    a = axes[0] % x.ndim
    if not 0 < a < x.ndim - 1 or not 0 < x.shape[a] <= _MAX_STEPS:
        return None
    return a if math.prod(x.shape[a + 1 :]) >= 16 else None


def _by_slices(ufunc, x, a, keepdims):
    """``ufunc`` folded over axis ``a`` of ``x`` one slice at a time, in order (the order
    NumPy adds along a non-contiguous axis too)."""
    lead = (slice(None),) * a
    out = x[(*lead, 0)].copy()
    for k in range(1, x.shape[a]):
        ufunc(out, x[(*lead, k)], out=out)
    return np.expand_dims(out, a) if keepdims else out


def _reduce(fn, ufunc):
    def run(x, axes, keepdims):
        a = _middle_axis(x, axes)
        if a is not None and x.dtype.isbuiltin == 1:
            return _by_slices(ufunc, x, a, keepdims)
        return fn(x, axis=axes, keepdims=keepdims)

    return run


_HALF_FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _accumulator(x):
    """The dtype a sum or product of ``x`` accumulates in: float32 for 16-bit floats, as
    JAX does (ml_dtypes' bfloat16 adds in bfloat16: a sum of 1000 ones is 256); None keeps
    NumPy's choice. The interpreter casts the result back to the op's dtype."""
    return np.float32 if x.dtype in _HALF_FLOATS else None


_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_MAX_ROW = 1024  # longer trailing sums keep np.sum's pairwise summation
_MIN_KEPT = 16  # a leading sum keeping fewer values is a long contiguous sum: pairwise too
_MAX_ONES = 1 << 16  # bounds the cached ones vectors (64 of them at most)


@functools.lru_cache(maxsize=64)
def _ones(n, dtype):
    v = np.ones(n, dtype)
    v.flags.writeable = False
    return v


@_one("reduce_sum")
def _reduce_sum(x, axes, keepdims):
    """A sum over leading or trailing axes of a contiguous float array is a matrix-vector
    product with ones: BLAS runs it 2-6x faster than ``np.sum``, whose reduction pays per
    row (layer-norm and softmax sums over a 64-128 long last axis; bias gradients).
    Trailing sums over more than ``_MAX_ROW`` values, and leading sums that keep fewer than
    ``_MIN_KEPT`` (in effect one long contiguous sum), keep ``np.sum`` and its pairwise
    summation: BLAS adds in a few float32 lanes, 30x less accurately at 10^5 values. A
    leading sum that keeps more accumulates row by row in ``np.sum`` too, as accurate as
    BLAS."""
    nd = x.ndim
    if nd >= 2 and x.dtype in _BLAS_FLOATS and x.flags.c_contiguous and x.size:
        ax = sorted(a % nd for a in axes)
        k = len(ax)
        if 0 < k < nd:
            shape = x.shape
            out = tuple(1 if i in ax else d for i, d in enumerate(shape)) if keepdims else None
            if ax == list(range(nd - k, nd)):  # trailing
                n = math.prod(shape[nd - k :])
                if n <= _MAX_ROW:
                    r = x.reshape(-1, n) @ _ones(n, x.dtype)
                    return r.reshape(out if keepdims else shape[: nd - k])
            elif ax == list(range(k)):  # leading
                n = math.prod(shape[:k])
                if n <= _MAX_ONES and x.size // n >= _MIN_KEPT:
                    r = _ones(n, x.dtype) @ x.reshape(n, -1)
                    return r.reshape(out if keepdims else shape[k:])
    if x.dtype in _BLAS_FLOATS:
        a = _middle_axis(x, axes)
        if a is not None:
            return _by_slices(np.add, x, a, keepdims)
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=_sum_accumulator(x, axes))


# NumPy sums pairwise only along the contiguous inner loop; over another axis it adds
# value by value, and a float32 sum of 10^6 values of 0.1 came out 1% high. Such a sum over
# more values than this accumulates in float64 (PyTorch's and JAX's sums are this close),
# unless ``_reduce_sum`` gave it to BLAS first (a leading sum of up to ``_MAX_ONES`` rows:
# ~1e-4 relative at most, 6.5e-5 measured for 65536 rows)
_LONG_SUM = 1 << 14


def _narrow_float(dtype) -> bool:
    return dtype == np.float32 or dtype in _HALF_FLOATS


def _sum_accumulator(x, axes):
    """``_accumulator``, or float64 for a float sum of more than ``_LONG_SUM`` values that
    is not one contiguous run (a tall matrix's columns; trailing axes of a C-contiguous
    array are summed pairwise already)."""
    if _narrow_float(x.dtype) and x.ndim:
        ax = sorted({a % x.ndim for a in axes})
        trailing = x.flags.c_contiguous and ax == list(range(x.ndim - len(ax), x.ndim))
        if not trailing and math.prod(x.shape[a] for a in ax) > _LONG_SUM:
            return np.float64
    return _accumulator(x)


@_one("reduce_prod")
def _reduce_prod(x, axes, keepdims):
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=_accumulator(x))


_one("reduce_max")(_reduce(np.max, np.maximum))
_one("reduce_min")(_reduce(np.min, np.minimum))


@_one("argmax")
def _argmax(x, axis, keepdims):
    return np.argmax(x, axis=axis, keepdims=keepdims)


@_one("argsort")
def _argsort(x, axis, descending):
    """A stable sort's indices (NaN last); descending keeps equal values in their order
    too: the reversed values sorted stably, the result reversed and mapped back."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    rev = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return np.ascontiguousarray(np.flip(n - 1 - rev, axis))


@_one("argmin")
def _argmin(x, axis, keepdims):
    return np.argmin(x, axis=axis, keepdims=keepdims)


_MAX_SCAN_STEPS = 16  # a scan over an axis at most this long runs slice by slice ...
_MIN_SCAN_SLICE = 256  # ... when each slice holds at least this many values


def _scan_by_slices(ufunc, x, axis, dtype, exclusive):
    """``ufunc``'s running fold along a short ``axis`` of ``x``, one slice at a time and in
    order, so the same bits as NumPy's ``accumulate``. NumPy scans such an axis as one
    short inner loop per position of the other axes (a max-pool window's 4 taps: 32768
    loops of 4, 0.9-1 ms for this 512 KiB); by slices it is 4 ufunc calls (0.16 ms).
    ``exclusive``: slice k holds the fold of slices before k, the first the identity."""
    lead = (slice(None),) * axis
    out = np.empty(x.shape, dtype)
    shift = 1 if exclusive else 0  # (exclusive: slice k adds the value of slice k - 1)
    prev = out[(*lead, 0)]
    prev[...] = ufunc.identity if exclusive else x[(*lead, 0)]
    for k in range(1, x.shape[axis]):
        cur = out[(*lead, k)]
        ufunc(prev, x[(*lead, k - shift)], out=cur)
        prev = cur
    return out


def _short_scan(x, axis) -> bool:
    n = x.shape[axis] if x.ndim else 0
    return x.ndim >= 2 and 1 < n <= _MAX_SCAN_STEPS and x.size // n >= _MIN_SCAN_SLICE


# a float running sum longer than this accumulates in float64: NumPy's adds value by value,
# and float32 0.1 summed 10^7 times ended 8.8% high (PyTorch's CPU cumsum is this close)
_LONG_SCAN = 1 << 10


@_one("cumsum")
def _cumsum(x, axis, exclusive, reverse):
    axis %= max(x.ndim, 1)
    if reverse:
        x = np.flip(x, axis)
    acc = _accumulator(x)
    if _narrow_float(x.dtype) and x.ndim and x.shape[axis] > _LONG_SCAN:
        acc = np.float64
    if acc is None:
        acc = x.dtype if x.dtype != np.bool_ else np.int32
    if _short_scan(x, axis):
        out = _scan_by_slices(np.add, x, axis, acc, exclusive)
    elif exclusive:  # the sum of the values before each: shifted, exactly as by slices
        out = np.zeros(x.shape, acc)
        head = (slice(None),) * axis
        np.cumsum(x[(*head, slice(0, -1))], axis=axis, dtype=acc, out=out[(*head, slice(1, None))])
    else:
        out = np.cumsum(x, axis=axis, dtype=acc)
    if reverse:
        out = np.flip(out, axis)
    return out


@_one("cumprod")
def _cumprod(x, axis):
    acc = _accumulator(x)
    if acc is None:
        acc = x.dtype if x.dtype != np.bool_ else np.int32
    return np.cumprod(x, axis=axis, dtype=acc)


# --------------------------------------------------------------------------- views
@_one("reshape")
def _reshape(x, shape):
    # views through the ndarray methods: the np.* functions add ~1-1.5 us of dispatch
    return x.reshape(shape)


@_one("broadcast_to")
def _broadcast_to(x, shape):
    return np.broadcast_to(x, shape)


@_one("broadcast_in_dim")
def _broadcast_in_dim(x, shape, dims):
    inter = [1] * len(shape)
    for src, dst in enumerate(dims):
        inter[dst] = x.shape[src]
    return np.broadcast_to(x.reshape(inter), shape)


@_one("transpose")
def _transpose(x, perm):
    return x.transpose(perm)


@_one("flip")
def _flip(x, axes):
    return np.flip(x, axes)


def _py_slices(slices):
    out = []
    for start, step, length in slices:
        if length == 0:  # any start (a compiled plan's at a new size may be -1): empty
            out.append(slice(0, 0, 1))
            continue
        stop = start + step * length
        out.append(slice(start, None if stop < 0 else stop, step))
    return tuple(out)


@_one("slice")
def _slice(x, slices):
    return x[_py_slices(slices)]


@_one("slice_update")
def _slice_update(x, update, slices):
    out = np.array(x, copy=True)
    out[_py_slices(slices)] = update
    return out


@_one("pad")
def _pad(x, pads, value):
    # a filled array with x copied in: np.pad's general machinery costs 2x for this
    out = np.full(tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pads)), value, x.dtype)
    out[tuple(slice(lo, lo + d) for d, (lo, _) in zip(x.shape, pads))] = x
    return out


@_one("concatenate")
def _concatenate(*xs, axis):
    return np.concatenate(xs, axis=axis)


def _split(args, kw):
    """Views of ``x``'s consecutive parts along ``axis``: what ``np.split`` returns, by
    plain slicing (``np.split``'s Python costs ~20 us a call: an LSTM step's gates)."""
    x, start, out = args[0], 0, []
    lead = (slice(None),) * kw["axis"]
    for n in kw["sizes"]:
        out.append(x[lead + (slice(start, start + n),)])
        start += n
    return out


LOWERINGS["split"] = _split


def _window_slices(kw, i: int, j: int, lead: int) -> tuple:
    """The positions window tap ``(i, j)`` of every window reads, as slices of
    ``(*lead, H, W, C)``."""
    (sh, sw), (dh, dw), (oh, ow) = kw["stride"], kw["dilation"], kw["out"]
    rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
    cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
    return (slice(None),) * lead + (rows, cols)


@_one("windows")
def _windows(x, **kw):
    # one copy out of a strided view of all windows (no per-tap pieces to join), always
    # into a new C-contiguous array
    (kh, kw_), (sh, sw), (dh, dw) = kw["kernel"], kw["stride"], kw["dilation"]
    *lead, _, _, c = x.shape
    if c == 1:  # one channel (an image's first layer): a copy per tap is 2x faster
        out = np.empty((*lead, *kw["out"], kh * kw_, 1), x.dtype)
        for i in range(kh):
            for j in range(kw_):
                out[..., i * kw_ + j, :] = x[_window_slices(kw, i, j, len(lead))]
        return out
    st = x.strides
    shape = (*lead, *kw["out"], kh, kw_, c)
    view = np.lib.stride_tricks.as_strided(
        x,
        shape,
        (*st[:-3], st[-3] * sh, st[-2] * sw, st[-3] * dh, st[-2] * dw, st[-1]),
        writeable=False,
    )
    out = np.empty(shape, x.dtype)
    np.copyto(out, view)
    return out.reshape(*lead, *kw["out"], kh * kw_, c)


_SLAB_BYTES = 512  # channel rows shorter than this are added from a tap-major copy


def _tap_major(cols):
    """``cols`` ``(..., KH*KW, C)`` copied tap-major, ``(KH*KW, ..., C)``. Each channel row
    moves as one opaque item: NumPy's copy of short rows pays per row, one item per row
    runs 1.3-10x faster (2.2x for 16 float32 channels)."""
    taps = np.moveaxis(cols, -2, 0)
    if cols.strides[-1] != cols.itemsize:
        return np.ascontiguousarray(taps)
    row = np.dtype((np.void, cols.shape[-1] * cols.itemsize))
    items = np.ascontiguousarray(np.moveaxis(cols.view(row)[..., 0], -1, 0))
    return items[..., None].view(cols.dtype)


@_one("windows_sum")
def _windows_sum(cols, **kw):
    (kh, kw_), (sh, sw), (dh, dw) = kw["kernel"], kw["stride"], kw["dilation"]
    (h, w), lead = kw["size"], cols.shape[:-4]
    oh, ow, c = cols.shape[-4], cols.shape[-3], cols.shape[-1]
    if (dh, dw) == (1, 1) and sh >= kh and sw >= kw_:
        # windows apart (pooling): each position takes at most one tap, all placed by one
        # copy into a writeable view of the windows (zeros first where some stay uncovered)
        tiled = (sh, sw) == (kh, kw_) and (oh * sh, ow * sw) == (h, w)
        out = (np.empty if tiled else np.zeros)((*lead, h, w, c), cols.dtype)
        st = out.strides
        view = np.lib.stride_tricks.as_strided(
            out,
            (*lead, oh, ow, kh, kw_, c),
            (*st[:-3], st[-3] * sh, st[-2] * sw, st[-3], st[-2], st[-1]),
        )
        np.copyto(view, cols.reshape(*lead, oh, ow, kh, kw_, c))
        return out
    # one zero buffer, each window tap added into its strided region, taps in order
    out = np.zeros((*lead, h, w, c), cols.dtype)
    if c * cols.itemsize < _SLAB_BYTES:  # short rows: strided adds are slow, copy tap-major
        taps = _tap_major(cols)
    else:
        taps = np.moveaxis(cols, -2, 0)
    for i in range(kh):
        for j in range(kw_):
            region = out[_window_slices(kw, i, j, len(lead))]
            np.add(region, taps[i * kw_ + j], out=region)
    return out


# --------------------------------------------------------------------------- LAPACK
@_one("inv")
def _inv(a):
    # a singular matrix gives inf/NaN entries, as JAX's (NumPy raises)
    return _per_matrix(np.linalg.inv, a)


@_one("solve")
def _solve(a, b):
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], b.dtype)
        for i in np.ndindex(out.shape[:-2]):
            try:
                out[i] = np.linalg.solve(a[i], b[i])
            except np.linalg.LinAlgError:
                out[i] = np.nan
        return out


def _slogdet(args, kw):
    sign, logabs = np.linalg.slogdet(args[0])
    dtype = args[0].dtype
    return [np.asarray(sign, dtype), np.asarray(logabs, dtype)]


LOWERINGS["slogdet"] = _slogdet


@_one("det")
def _det(a):
    return np.asarray(np.linalg.det(a), a.dtype)


def _eigh(args, kw):
    w, v = np.linalg.eigh(args[0])
    return [w, v]


LOWERINGS["eigh"] = _eigh


def _svd(args, kw):
    a = args[0]
    full = kw["full_matrices"]
    try:
        u, s, vh = np.linalg.svd(a, full_matrices=full)
    except np.linalg.LinAlgError:  # (no convergence, NaN entries): that matrix NaN, as JAX's
        m, n = a.shape[-2:]
        k = min(m, n)
        u = np.full((*a.shape[:-2], m, m if full else k), np.nan, a.dtype)
        s = np.full((*a.shape[:-2], k), np.nan, a.dtype)
        vh = np.full((*a.shape[:-2], n if full else k, n), np.nan, a.dtype)
        for i in np.ndindex(a.shape[:-2]):
            try:
                u[i], s[i], vh[i] = np.linalg.svd(a[i], full_matrices=full)
            except np.linalg.LinAlgError:
                pass
    return [u, s, vh]


LOWERINGS["svd"] = _svd


def _qr(args, kw):
    q, r = np.linalg.qr(args[0], mode="complete" if kw["complete"] else "reduced")
    return [q, r]


LOWERINGS["qr"] = _qr


@_one("pinv")
def _pinv(a, rtol):
    m, n = a.shape[-2:]
    if m == 0 or n == 0:
        return np.zeros((*a.shape[:-2], n, m), a.dtype)
    u, s, vh = _svd([a], {"full_matrices": False})
    cutoff = rtol * s[..., :1]
    s_inv = np.where(s > cutoff, 1 / np.where(s > cutoff, s, 1), 0).astype(a.dtype)
    return np.swapaxes(vh, -1, -2) @ (s_inv[..., None] * np.swapaxes(u, -1, -2))


@_one("cholesky")
def _cholesky(a):
    return _per_matrix(np.linalg.cholesky, a)


def _per_matrix(f, a):
    """``f`` of each matrix of ``a``; one that LAPACK refuses (singular, not positive
    definite) comes back NaN, as JAX's, instead of failing the whole batch."""
    try:
        return f(a)
    except np.linalg.LinAlgError:
        out = np.empty_like(a)
        for i in np.ndindex(a.shape[:-2]):
            try:
                out[i] = f(a[i])
            except np.linalg.LinAlgError:
                out[i] = np.nan
        return out


# --------------------------------------------------------------------------- linalg / indexing
def _blas_ready(a):
    # np.matmul leaves BLAS for a slow loop on broadcast (stride-0) or scattered views.
    if a.flags.c_contiguous or a.flags.f_contiguous:
        return a
    if (
        a.ndim >= 2
        and 0 not in a.strides[-2:]
        and (a.strides[-1] == a.itemsize or a.strides[-2] == a.itemsize)
        and 0 not in a.strides
    ):
        return a
    return np.ascontiguousarray(a)


_OUTER_BY_EINSUM = 1 << 14  # output elements from which einsum beats the broadcast multiply


@_one("matmul")
def _matmul(x, y):
    if x.ndim >= 2 and y.ndim >= 2 and x.shape[-1] == 1:
        # a contraction over one element is an outer product (per-example gradients of a
        # dense layer). NumPy's batched matmul runs it ~4x slower than a broadcast multiply,
        # and einsum's loop runs large ones 1.4-1.7x faster than the multiply's, whose
        # inner loop is one row against a stride-0 scalar. einsum has no loops for
        # ml_dtypes' bfloat16 (not a NumPy builtin dtype), which keeps the multiply
        big = max(x.size * y.shape[-1], y.size * x.shape[-2]) >= _OUTER_BY_EINSUM
        if big and x.dtype.isbuiltin == 1 and y.dtype.isbuiltin == 1:
            return np.einsum("...ik,...kj->...ij", x, y)
        return np.multiply(x, y)
    return gemm(_blas_ready(x), _blas_ready(y))


def gemm(x, y, out=None):
    """``np.matmul``, except that a C-contiguous stack times a matrix is one GEMM over all
    the stack's rows (NumPy runs one small GEMM per matrix of the stack: a vmapped
    ``x @ w``, a scan's steps at once). The straight-line form calls it too, so both
    executors take the same BLAS calls."""
    if x.ndim > 2 and y.ndim == 2 and x.flags.c_contiguous:
        n = y.shape[-1]
        if out is None:
            return np.matmul(x.reshape(-1, x.shape[-1]), y).reshape(x.shape[:-1] + (n,))
        np.matmul(x.reshape(-1, x.shape[-1]), y, out=out.reshape(-1, n))
        return out
    return np.matmul(x, y, out=out)


def _flat_batch(a, nb):
    lead = a.shape[:nb]
    return a.reshape((int(np.prod(lead, dtype=np.int64)),) + a.shape[nb:]), lead


_JAX_OUT_OF_BOUNDS = {"gather": "JAX clamps such an index", "scatter": "JAX drops such an update"}


def _index_error(op, err, x, idx, what=None, batch_dims=0):
    """NumPy's bare out-of-bounds error with the op and shapes: an index known only when
    the program runs (traced or batched) is checked here, not at the call. ``what``: the
    user's indexing this op carries out (``x[i, j]`` becomes a gather from a flattened
    value, whose positions the user never wrote). Under vmap (``batch_dims``) the shapes
    are one example's, as the user wrote the call."""
    tail = (
        "an index known only when the program runs (a compiled function's argument, or "
        f"computed in the graph) is checked then; {_JAX_OUT_OF_BOUNDS[op]}"
    )
    x_shape, idx_shape = x.shape[batch_dims:], np.shape(idx)[batch_dims:]
    if batch_dims:
        tail = f"per example of a vmap; {tail}"
    if what is not None:
        return IndexError(
            f"{what}: an index is out of range of its dim (indices of shape {idx_shape}; {tail})"
        )
    return IndexError(
        f"{op}: {err} (input of shape {x_shape}, indices of shape {idx_shape}; {tail})"
    )


def _below_range(op, x, idx, axis, what=None, batch_dims=0):
    """The ops' indices arrive with negative ones already counted from the end (``idx +
    n``): one still negative was below ``-n``, which NumPy would wrap again."""
    if idx.size and idx.min() < 0:
        n = x.shape[axis]
        err = (
            f"index {int(idx.min()) - n} is out of bounds for axis {axis - batch_dims} with "
            f"size {n}"
        )
        raise _index_error(op, err, x, idx, what, batch_dims)


@_one("gather")
def _gather(x, idx, axis, batch_dims=0, what=None):
    _below_range("gather", x, idx, axis, what, batch_dims)
    try:
        return _gather_any(x, idx, axis, batch_dims)
    except IndexError as err:
        raise _index_error("gather", err, x, idx, what, batch_dims) from None


def _gather_any(x, idx, axis, batch_dims):
    if batch_dims == 0:
        return np.take(x, idx, axis=axis)
    xf, lead = _flat_batch(x, batch_dims)
    idf, _ = _flat_batch(idx, batch_dims)
    a = axis - batch_dims
    parts = [np.take(xf[p], idf[p], axis=a) for p in range(xf.shape[0])]
    out_tail = x.shape[batch_dims:][:a] + idx.shape[batch_dims:] + x.shape[batch_dims:][a + 1 :]
    if not parts:
        return np.zeros(lead + out_tail, x.dtype)
    return np.stack(parts).reshape(lead + out_tail)


@_one("scatter")
def _scatter(x, idx, upd, axis, mode, batch_dims=0, what=None):
    _below_range("scatter", x, idx, axis, what, batch_dims)
    out = np.array(x, copy=True)
    # the ufunc merging the updates at a repeated index (every one takes part); None: replace
    combine = (_SCATTER_COMBINE_BOOL if out.dtype == np.bool_ else _SCATTER_COMBINE).get(mode)
    of, _ = _flat_batch(out, batch_dims)
    idf, _ = _flat_batch(idx, batch_dims)
    uf, _ = _flat_batch(upd, batch_dims)
    lead = (slice(None),) * (axis - batch_dims)
    try:
        for p in range(of.shape[0]):
            where = lead + (idf[p],)
            if combine is None:
                of[p][where] = uf[p]
            else:
                combine.at(of[p], where, uf[p])
    except IndexError as err:
        raise _index_error("scatter", err, x, idx, what, batch_dims) from None
    return of.reshape(out.shape)


_SCATTER_COMBINE = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}
# bools: a sum is a logical or, a product a logical and (as the elementwise ops)
_SCATTER_COMBINE_BOOL = {
    "add": np.logical_or,
    "mul": np.logical_and,
    "min": np.minimum,
    "max": np.maximum,
}


# --------------------------------------------------------------------------- random (host ops)
def _generator(words) -> np.random.Generator:
    k = (int(words[0]) << 32) | int(words[1])
    return np.random.Generator(np.random.Philox(key=k))


def _per_key(fn):
    """Apply ``fn(generator, **kw)`` once per key in a (batch..., 2) key array."""

    def run(args, kw):
        keys = args[0]
        lead = keys.shape[:-1]
        flat = keys.reshape(-1, 2)
        if not len(flat):  # no keys (a batch of none): the shape of one draw, no values
            one = np.asarray(fn(_generator((0, 0)), **kw))
            return [np.empty(lead + one.shape, one.dtype)]
        outs = [np.asarray(fn(_generator(k), **kw)) for k in flat]
        return [np.stack(outs).reshape(lead + outs[0].shape) if lead else outs[0]]

    return run


LOWERINGS["random_split"] = _per_key(
    lambda g, num: g.integers(0, 1 << 32, size=(num, 2), dtype=np.int64)
)


def _unit_uniform(g, shape, dtype):
    """Uniform in [0, 1): a float64 draw rounded to a narrower float can round up to 1.0
    (1 in ~4,000 draws for float16), so those become the largest value below 1."""
    u = g.random(shape, dtype=np.float64).astype(dtype.numpy)
    return np.minimum(u, 1 - ml_dtypes.finfo(dtype.numpy).epsneg).astype(dtype.numpy)


LOWERINGS["random_uniform"] = _per_key(_unit_uniform)
LOWERINGS["random_normal"] = _per_key(
    lambda g, shape, dtype: g.standard_normal(shape, dtype=np.float64).astype(dtype.numpy)
)
LOWERINGS["random_randint"] = _per_key(
    lambda g, shape, dtype, low, high: g.integers(low, high, size=shape).astype(dtype.numpy)
)


def _fold_in(args, kw):
    """One new key per (key, data) pair; either may carry batch dims (they broadcast)."""
    keys, data = args
    lead = np.broadcast_shapes(keys.shape[:-1], data.shape)
    flat = np.broadcast_to(keys, lead + (2,)).reshape(-1, 2)
    values = np.broadcast_to(data, lead).reshape(-1)
    outs = [
        np.random.Generator(
            np.random.Philox(
                key=int(_generator(k).integers(0, 1 << 62))
                ^ (int(d) * 0x9E3779B97F4A7C15 % (1 << 64))
            )
        ).integers(0, 1 << 32, size=(2,), dtype=np.int64)
        for k, d in zip(flat, values)
    ]
    if not outs:  # no keys (a batch of none)
        return [np.empty(lead + (2,), np.int64)]
    return [np.stack(outs).reshape(lead + (2,))]


LOWERINGS["random_fold_in"] = _fold_in


_LGAMMA = np.vectorize(math.lgamma, otypes=[np.float64])


def _igamma(a, x):
    """``(P(a, x), Q(a, x))``, the regularized lower and upper incomplete gamma functions,
    in float64: ``P`` by its series below ``x = a + 1`` (then ``Q = 1 - P``), ``Q`` by
    Legendre's continued fraction (Lentz's method) above (then ``P = 1 - Q``), each run
    until every element has converged (at most 2000 terms). NaN for ``a <= 0`` or ``x <
    0``, as SciPy's; ``(1, 0)`` at ``x = inf``, which neither form reaches."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    bad = ~((a > 0) & (x >= 0))
    top = ~bad & (x == np.inf)
    a = np.where(bad, 1.0, a)
    x = np.where(bad | top, 1.0, x)
    with np.errstate(all="ignore"):
        log_front = a * np.log(x) - x - _LGAMMA(a)
        series = x < a + 1.0
        # series: P = front / a * sum_n x^n / ((a + 1) ... (a + n))
        term = 1.0 / a
        total = term.copy()
        ap = a.copy()
        for _ in range(2000):
            ap = ap + 1.0
            term = term * x / ap
            total = total + term
            if np.all(np.abs(term[series]) <= np.abs(total[series]) * 1e-16):
                break
        p_series = total * np.exp(log_front)
        # continued fraction for Q = 1 - P
        tiny = 1e-300
        b = x + 1.0 - a
        c = np.full(a.shape, 1.0 / tiny)
        d = 1.0 / np.where(b == 0, tiny, b)
        h = d.copy()
        for i in range(1, 2000):
            an = -i * (i - a)
            b = b + 2.0
            d = an * d + b
            d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
            c = b + an / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            delta = d * c
            h = h * delta
            if np.all(np.abs(delta[~series] - 1.0) <= 1e-16):
                break
        q_cf = np.exp(log_front) * h
    lower = np.where(series, p_series, 1.0 - q_cf)
    upper = np.where(series, 1.0 - p_series, q_cf)
    lower, upper = np.where(x <= 0, 0.0, lower), np.where(x <= 0, 1.0, upper)
    lower, upper = np.where(top, 1.0, lower), np.where(top, 0.0, upper)
    return np.where(bad, np.nan, lower), np.where(bad, np.nan, upper)


def _gammainc(a, x):
    return _igamma(a, x)[0]


def _ibeta(a, b, x):
    """``I_x(a, b)`` in float64: the continued fraction (Lentz's method) of ``I_x(a, b)``
    below ``x = (a + 1) / (a + b + 2)`` and of ``1 - I_{1-x}(b, a)`` above, where it
    converges fast, until every element has converged (at most 2000 terms). NaN for shapes
    ``<= 0`` or ``x`` outside ``[0, 1]``, as SciPy's."""
    a, b, x = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, x)))
    bad = ~((a > 0) & (b > 0) & (x >= 0) & (x <= 1))
    swap = x > (a + 1.0) / (a + b + 2.0)
    aa, bb = np.where(swap, b, a), np.where(swap, a, b)
    xx = np.where(bad, 0.5, np.where(swap, 1.0 - x, x))
    aa, bb = np.where(bad, 1.0, aa), np.where(bad, 1.0, bb)
    tiny = 1e-300
    with np.errstate(all="ignore"):
        log_front = (
            aa * np.log(xx) + bb * np.log1p(-xx) - _LGAMMA(aa) - _LGAMMA(bb) + _LGAMMA(aa + bb)
        )
        c = np.ones(aa.shape)
        d = 1.0 - (aa + bb) * xx / (aa + 1.0)
        d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
        h = d.copy()
        for m in range(1, 2000):
            for num in (
                m * (bb - m) * xx / ((aa + 2 * m - 1) * (aa + 2 * m)),
                -(aa + m) * (aa + bb + m) * xx / ((aa + 2 * m) * (aa + 2 * m + 1)),
            ):
                d = 1.0 + num * d
                d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
                c = 1.0 + num / c
                c = np.where(np.abs(c) < tiny, tiny, c)
                delta = d * c
                h = h * delta
            if np.all(np.abs(delta - 1.0) <= 1e-16):
                break
        value = np.exp(log_front) * h / aa
    value = np.where(xx <= 0, 0.0, value)
    out = np.where(swap, 1.0 - value, value)
    return np.where(bad, np.nan, out)


def _shape_step(v):
    return 1e-5 * np.maximum(np.abs(v), 1e-3)


def _igamma_op(args, kw):
    a, x = args
    lower, upper = _igamma(a, x)
    dt = np.result_type(x)
    return [lower.astype(dt), upper.astype(dt)]


def _igamma_grad_a(args, kw):
    a, x = (np.asarray(v, np.float64) for v in args)
    h = np.minimum(_shape_step(a), 0.5 * a)
    slope = (_gammainc(a + h, x) - _gammainc(a - h, x)) / (2.0 * h)
    return [slope.astype(np.result_type(args[1]))]


def _betainc_op(args, kw):
    return [_ibeta(*args).astype(np.result_type(args[2]))]


def _betainc_grad_ab(args, kw):
    a, b, x = (np.asarray(v, np.float64) for v in args)
    ha, hb = np.minimum(_shape_step(a), 0.5 * a), np.minimum(_shape_step(b), 0.5 * b)
    da = (_ibeta(a + ha, b, x) - _ibeta(a - ha, b, x)) / (2.0 * ha)
    db = (_ibeta(a, b + hb, x) - _ibeta(a, b - hb, x)) / (2.0 * hb)
    dt = np.result_type(args[2])
    return [da.astype(dt), db.astype(dt)]


LOWERINGS["igamma"] = _igamma_op
# pure_callback: the user's function (a ``HostCallback`` in the kwargs) on the operands
LOWERINGS["pure_callback"] = lambda args, kw: kw["callback"](args, kw["out_types"])
LOWERINGS["igamma_grad_a"] = _igamma_grad_a
LOWERINGS["betainc"] = _betainc_op
LOWERINGS["betainc_grad_ab"] = _betainc_grad_ab


@_one("random_gamma_grad")
def _random_gamma_grad(a, x):
    """``dx/da`` of a gamma(``a``) draw ``x``: ``-(dP/da) / p(x; a)``, ``dP/da`` by a central
    difference of :func:`_gammainc` in float64 (step ``1e-5 a``: ~1e-9 relative)."""
    a64 = np.asarray(a, np.float64)
    x64 = np.asarray(x, np.float64)
    h = 1e-5 * np.maximum(a64, 1e-3)
    dp = (_gammainc(a64 + h, x64) - _gammainc(a64 - h, x64)) / (2.0 * h)
    with np.errstate(all="ignore"):
        log_pdf = (a64 - 1.0) * np.log(x64) - x64 - _LGAMMA(a64)
        grad = -dp / np.exp(log_pdf)
    grad = np.where((x64 > 0) & np.isfinite(grad), grad, 0.0)
    return grad.astype(np.result_type(x))


# --------------------------------------------------------------------------- custom calls
LOWERINGS["pass_through"] = lambda args, kw: list(args[kw["n_skip"] :])


# --------------------------------------------------------------------------- devices
def _transfer(x, device):
    if not device.is_cpu:
        raise RuntimeError(
            f"the numpy backend cannot place tensors on {device}; use the max backend"
        )
    return x


LOWERINGS["transfer"] = lambda args, kw: [_transfer(args[0], kw["device"])]


# --------------------------------------------------------------------------- mesh (sharding)
# A sharded value is one buffer ``mesh.shape + local_shape`` (``nabla.core.sharding``); the
# collectives of a simulated mesh are data movement and reductions over its leading mesh dims.
# Kwargs: ``ndev`` leading mesh dims; ``axes`` mesh dim indices, major first; ``dim`` a local
# dim (0-based after the mesh dims). ``MESH_REDUCE`` and the ``mesh_*`` functions below
# (split, merge, select, unshard) are public: the MPI backend runs them on a process's slab.
MESH_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


def partial_runs(partial) -> list:
    """A value's partial ``(mesh dim, kind)`` pairs as ``(mesh dims, kind)`` runs: the
    consecutive dims of one kind together (terms of one kind reduce in any grouping; of
    two kinds, in the recorded order)."""
    runs = []
    for a, kind in partial:
        if runs and runs[-1][1] == kind:
            runs[-1] = (runs[-1][0] + (a,), kind)
        else:
            runs.append(((a,), kind))
    return runs


def mesh_split(x, ndev, axes, dim):
    """Inverse of ``mesh_merge``: ``x`` equal over mesh dims ``axes``; local ``dim`` is cut
    into blocks, block ``i`` going to mesh coordinate ``i`` (row-major over ``axes``)."""
    sel = tuple(0 if i in axes else slice(None) for i in range(ndev))
    y = x[sel]
    rest = [i for i in range(ndev) if i not in axes]
    pos = len(rest) + dim
    sizes = [x.shape[a] for a in axes]
    shape = list(y.shape)
    shape[pos : pos + 1] = sizes + [shape[pos] // math.prod(sizes)]
    y = y.reshape(shape)
    labels = [("m", k) for k in rest]
    local = [("l", i) for i in range(x.ndim - ndev)]
    labels += local[:dim] + [("m", a) for a in axes] + local[dim:]
    target = [("m", k) for k in range(ndev)] + local
    return np.transpose(y, [labels.index(t) for t in target])


def mesh_merge(x, ndev, axes, dim):
    """Concatenate the blocks along mesh dims ``axes`` into local ``dim`` on every device."""
    rest = [i for i in range(x.ndim) if i not in axes]
    pos = rest.index(ndev + dim)
    y = np.transpose(x, rest[:pos] + list(axes) + rest[pos:])
    shape = [x.shape[i] for i in rest]
    shape[pos] *= math.prod(x.shape[a] for a in axes)
    y = np.expand_dims(y.reshape(shape), sorted(axes))
    out = list(y.shape)
    for a in axes:
        out[a] = x.shape[a]
    return np.broadcast_to(y, out)


# Mesh ops that only select or label this process's own blocks: on a mesh spanning
# processes (kwargs with ``mesh``; ``mpi.activate`` installs their lowerings, given the
# process's ``box``) they still exchange nothing, so a program of them may run as
# straight-line code. (Such a program is still agreed on across processes, as any program
# with a mesh op of such a mesh: that is what catches processes that laid out different
# shapes.)
_OWN_BLOCKS = frozenset({"mesh_shard", "mesh_iota"})


def exchanges_data(op: str, kwargs: dict) -> bool:
    """Whether an instruction exchanges data between processes: a ``mesh_*`` op on a mesh
    that spans them (its kwargs carry the ``mesh``), other than ``_OWN_BLOCKS``."""
    return "mesh" in kwargs and op.startswith("mesh_") and op not in _OWN_BLOCKS


@_one("mesh_shard")
def _mesh_shard(x, mesh_shape, dims):
    ndev = len(mesh_shape)
    y = np.broadcast_to(x, tuple(mesh_shape) + x.shape)
    for d, axes in enumerate(dims):
        if axes:
            y = mesh_split(y, ndev, axes, d)
    return np.ascontiguousarray(y)


@_one("mesh_unshard")
def mesh_unshard(x, ndev, dims, partial):
    """The whole value of a sharded buffer: partial axes reduced, split dims merged. The
    axes of one kind of terms reduce together, in ``mesh_reduce``'s order (flat over
    them): reading a partial value gives the bits its ``all_reduce`` gives."""
    for axes, kind in partial_runs(partial):
        x = MESH_REDUCE[kind](x, axis=axes, keepdims=True)
    for d, axes in enumerate(dims):
        if axes:
            x = mesh_merge(x, ndev, axes, d)
    # np.ascontiguousarray would turn device 0's 0-d value into shape (1,)
    return np.array(x[(0,) * ndev], order="C")


@_one("mesh_reduce")
def _mesh_reduce(x, axes, kind):
    return np.broadcast_to(MESH_REDUCE[kind](x, axis=tuple(axes), keepdims=True), x.shape)


@_one("mesh_gather")
def _mesh_gather(x, ndev, axes, dim):
    return mesh_merge(x, ndev, axes, dim)


@_one("mesh_slice")
def _mesh_slice(x, ndev, axes, dim):
    return mesh_split(x, ndev, axes, dim)


@_one("mesh_reduce_scatter")
def _mesh_reduce_scatter(x, ndev, axes, dim, kind):
    return mesh_split(_mesh_reduce(x, axes, kind), ndev, axes, dim)


@_one("mesh_all_to_all")
def _mesh_all_to_all(x, ndev, axes, split_dim, concat_dim):
    return mesh_split(mesh_merge(x, ndev, axes, concat_dim), ndev, axes, split_dim)


@_one("mesh_permute")
def _mesh_permute(x, ndev, pairs):
    lead = x.shape[:ndev]
    flat = x.reshape((math.prod(lead),) + x.shape[ndev:])
    out = np.zeros_like(flat)
    for src, dst in pairs:
        out[dst] = flat[src]
    return out.reshape(x.shape)


@_one("mesh_select")
def mesh_select(x, axes, index):
    """Every device along mesh dims ``axes`` gets the block of the device at ``index``."""
    sel = [slice(None)] * x.ndim
    for a, i in zip(axes, index, strict=True):
        sel[a] = slice(i, i + 1)
    return np.broadcast_to(x[tuple(sel)], x.shape)


@_one("mesh_iota")
def _mesh_iota(mesh_shape, axis, dtype, device):
    shape = [1] * len(mesh_shape)
    shape[axis] = mesh_shape[axis]
    coords = np.arange(mesh_shape[axis], dtype=dtype.numpy).reshape(shape)
    return np.broadcast_to(coords, tuple(mesh_shape))[..., None]


@_one("mesh_local")
def _mesh_local(x, drop, perm):
    """shard_map's entry: the mesh dims ``drop`` (replicated axes) go, the rest move behind
    the vmap batch dims (``perm``)."""
    sel = tuple(0 if i in drop else slice(None) for i in range(x.ndim))
    return np.transpose(x[sel], perm)


@_one("mesh_global")
def _mesh_global(x, perm, shape, dims):
    """shard_map's exit: mesh dims to the front (``perm``), missing ones broadcast."""
    return _broadcast_in_dim(np.transpose(x, perm), shape, dims)
