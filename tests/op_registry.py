"""The op registry: one entry per public op; it drives every per-op test suite.

An entry holds the op under test (``fn`` over tensors), a NumPy reference (``ref`` over
arrays), sample inputs, the dtypes to check, and flags. Suites generated from it:
reference values (``test_ops_reference``), vmap vs a loop of slices and nested vmap
(``test_ops_vmap``), JVP vs central finite differences, the adjoint identity and vmap∘grad
(``test_ops_autodiff``), MAX vs NumPy (``tests/backends``). ``test_registry_complete`` fails
when a public op has no entry. Expected failures live on the entry (``xfail``) with a reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

import nabla as nb


@dataclass
class Sample:
    args: tuple
    kwargs: dict = field(default_factory=dict)


@dataclass
class OpEntry:
    name: str
    fn: object  # callable(*tensors, **kwargs) -> Tensor | list
    ref: object  # callable(*arrays, **kwargs) -> array | list
    samples: object  # callable(rng, dtype) -> list[Sample]
    dtypes: tuple = ("float32", "float64")
    differentiable: bool = True
    batchable: bool = True  # vmap(fn) == stack(fn(slice))
    atol: float = 1e-5
    rtol: float = 1e-5
    fd_eps: float = 1e-6
    out_dtype: object = None  # callable(in_dtype) -> dtype name, default: same as input
    # suite -> reason: a strict xfail of that suite ("reference", "vmap", "jvp_fd",
    # "adjoint", "vmap_grad")
    xfail: dict = field(default_factory=dict)


REGISTRY: dict[str, OpEntry] = {}


def register(entry: OpEntry):
    assert entry.name not in REGISTRY, entry.name
    REGISTRY[entry.name] = entry


# ----------------------------------------------------------------------------- samplers
SHAPES = [(), (3,), (2, 3), (2, 1, 4)]
EMPTY = (0, 3)


def _vals(rng, shape, dtype, domain=(-2.0, 2.0)):
    dt = np.dtype(nb.DType[dtype].numpy) if isinstance(dtype, str) else dtype
    lo, hi = domain
    if dt.kind == "b":
        return rng.random(shape) > 0.5
    if dt.kind in "iu":
        lo_i, hi_i = (int(lo), int(hi)) if domain != (-2.0, 2.0) else (-5, 6)
        if dt.kind == "u":
            lo_i = max(lo_i, 0)
        return rng.integers(lo_i, hi_i, size=shape).astype(dt)
    return rng.uniform(lo, hi, size=shape).astype(dt)


def _away(v, pts, gap=0.15):
    """Nudge values away from kink points (for finite differences)."""
    for p in pts:
        near = np.abs(v - p) < gap
        v = np.where(near, p + np.sign(v - p + 1e-12) * gap, v)
    return v.astype(v.dtype)


def unary_samples(domain=(-2.0, 2.0), kinks=()):
    def gen(rng, dtype):
        out = []
        for s in SHAPES + [EMPTY]:
            v = _vals(rng, s, dtype, domain)
            if kinks and v.dtype.kind == "f":
                v = _away(v, kinks)
            out.append(Sample((v,)))
        return out

    return gen


def binary_samples(domain_x=(-2.0, 2.0), domain_y=(-2.0, 2.0), scalars=True, away_y=None):
    pairs = [
        ((3,), (3,)),
        ((2, 3), (3,)),
        ((2, 1), (1, 3)),
        ((), (2, 2)),
        ((2, 3), ()),
        ((2, 1, 4), (3, 1)),
        ((0, 3), (3,)),
    ]

    def gen(rng, dtype):
        out = []
        for sx, sy in pairs:
            x = _vals(rng, sx, dtype, domain_x)
            y = _vals(rng, sy, dtype, domain_y)
            if away_y is not None and y.dtype.kind in "fiu":
                y = np.where(np.abs(y) < away_y, away_y + 0.5, y).astype(y.dtype)
            out.append(Sample((x, y)))
        if scalars:
            x = _vals(rng, (2, 3), dtype, domain_x)
            y = _vals(rng, (), dtype, domain_y)
            if away_y is not None:
                y = np.asarray(away_y + 1.25 if y.dtype.kind == "f" else 2, dtype=y.dtype)
            out.append(Sample((x, y.item())))
        return out

    return gen


def _same(args):
    return args


def unary(name, np_fn, domain=(-2.0, 2.0), kinks=(), dtypes=("float32", "float64"), **kw):
    register(
        OpEntry(name, getattr(nb, name), np_fn, unary_samples(domain, kinks), dtypes=dtypes, **kw)
    )


def binary(name, np_fn, dtypes=("float32", "float64"), **kw):
    samp = kw.pop("samples", None) or binary_samples(
        kw.pop("domain_x", (-2.0, 2.0)),
        kw.pop("domain_y", (-2.0, 2.0)),
        away_y=kw.pop("away_y", None),
    )
    register(OpEntry(name, getattr(nb, name), np_fn, samp, dtypes=dtypes, **kw))


# ----------------------------------------------------------------------------- elementwise
def _erf(x):
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / np.sqrt(2).astype(x.dtype)))


unary("abs", np.abs, kinks=(0,), dtypes=("float32", "float64", "int32"))
unary("neg", np.negative, dtypes=("float32", "float64", "int32"))
unary("exp", np.exp)
unary("expm1", np.expm1)
unary("log", np.log, domain=(0.2, 3.0))
unary("log1p", np.log1p, domain=(-0.5, 3.0))
unary("log2", np.log2, domain=(0.2, 3.0))
unary("log10", np.log10, domain=(0.2, 3.0))
unary("sin", np.sin)
unary("cos", np.cos)
unary("tan", np.tan, domain=(-1.2, 1.2))
unary("asin", np.arcsin, domain=(-0.9, 0.9))
unary("acos", np.arccos, domain=(-0.9, 0.9))
unary("atan", np.arctan)
unary("sinh", np.sinh)
unary("cosh", np.cosh)
unary("tanh", np.tanh)
unary("atanh", np.arctanh, domain=(-0.9, 0.9))
unary("asinh", np.arcsinh, domain=(-3.0, 3.0))
unary("acosh", np.arccosh, domain=(1.1, 4.0))
unary("erf", _erf)
unary("sqrt", np.sqrt, domain=(0.2, 3.0))
unary("rsqrt", lambda x: 1 / np.sqrt(x), domain=(0.2, 3.0))
unary("reciprocal", np.reciprocal, domain=(0.3, 3.0))
unary("sigmoid", _sigmoid)
unary("relu", lambda x: np.maximum(x, 0), kinks=(0,), dtypes=("float32", "float64", "int32"))
unary("silu", lambda x: x * _sigmoid(x))
unary("softplus", lambda x: np.logaddexp(x, 0))
unary("square", np.square, dtypes=("float32", "float64", "int32"))
unary("sign", np.sign, kinks=(0,), dtypes=("float32", "int32"))
for _n, _f in [("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc)]:
    unary(_n, _f, kinks=(-2, -1, 0, 1, 2))
unary("round", np.round, kinks=(-1.5, -0.5, 0.5, 1.5))
unary("is_nan", np.isnan, differentiable=False, out_dtype=lambda d: "bool")
unary("is_inf", np.isinf, differentiable=False, out_dtype=lambda d: "bool")
unary("isfinite", np.isfinite, differentiable=False, out_dtype=lambda d: "bool")
unary(
    "logical_not",
    np.logical_not,
    differentiable=False,
    dtypes=("bool", "float32"),
    out_dtype=lambda d: "bool",
)
unary("bitwise_not", np.invert, differentiable=False, dtypes=("int32", "bool"))
register(OpEntry("gelu", nb.gelu, _gelu, unary_samples()))
register(
    OpEntry(
        "gelu_tanh",
        lambda x: nb.gelu(x, approximate="tanh"),
        lambda x: _gelu(x, "tanh"),
        unary_samples(),
    )
)
register(
    OpEntry(
        "stop_gradient", nb.stop_gradient, lambda x: x.copy(), unary_samples(), differentiable=False
    )
)
register(
    OpEntry(
        "cast",
        lambda x, dtype: nb.cast(x, dtype),
        lambda x, dtype: _cast_ref(x, dtype),
        lambda rng, dt: (
            [
                Sample((_vals(rng, s, dt),), {"dtype": to})
                for s in SHAPES
                for to in ("float64", "int32", "float16")
            ]
            + [  # float -> int beyond the range saturates, NaN is 0 (as JAX)
                Sample((np.array(_CAST_EDGES, dt),), {"dtype": to})
                for to in ("int8", "uint8", "int32", "int64")
                if np.dtype(dt).kind == "f"
            ]
        ),
        differentiable=False,
        out_dtype=lambda d: None,
    )
)
_CAST_EDGES = [1e10, -1e10, np.nan, np.inf, -np.inf, 2.7, -2.7, 127.9, 128, -129, 255.5, 256, -0.5]


def _cast_ref(x, dtype):
    """``astype``, except float -> int as JAX: saturating, NaN -> 0 (worked in Python ints)."""
    to = np.dtype(_np_dtype(dtype))
    if x.dtype.kind != "f" or to.kind not in "iu":
        return x.astype(to)
    lo, hi = int(np.iinfo(to).min), int(np.iinfo(to).max)

    def one(v):
        return 0 if np.isnan(v) else hi if v >= hi + 1 else lo if v < lo else int(v)

    flat = [one(v) for v in x.astype(np.float64).ravel().tolist()]
    return np.array(flat, to).reshape(x.shape)


def _np_dtype(name):
    return nb.DType[name].numpy


binary("add", np.add, dtypes=("float32", "float64", "int32"))
binary("sub", np.subtract, dtypes=("float32", "float64", "int32"))
binary("mul", np.multiply, dtypes=("float32", "float64", "int32"))
binary("div", np.true_divide, away_y=0.3)
binary("floor_div", np.floor_divide, dtypes=("float32", "int32"), away_y=1, differentiable=False)
binary(
    "mod",
    np.mod,
    dtypes=("float32", "float64", "int32"),
    away_y=1,
)
binary("pow", np.power, domain_x=(0.5, 2.0), domain_y=(-1.5, 1.5))
binary("maximum", np.maximum, dtypes=("float32", "float64", "int32"))
binary("minimum", np.minimum, dtypes=("float32", "float64", "int32"))
binary("atan2", np.arctan2, away_y=0.3)
binary("logaddexp", np.logaddexp)
binary("fmod", np.fmod, dtypes=("float32", "float64", "int32"), away_y=1)
binary("hypot", np.hypot)


def _nan_to_num_samples(rng, dt):
    x = _vals(rng, (2, 4), dt)
    if np.dtype(x.dtype).kind == "f":
        x[0, 0], x[0, 1], x[1, 2] = np.nan, np.inf, -np.inf
    return [
        Sample((_vals(rng, (3,), dt),)),
        Sample((x,)),
        Sample((x,), {"nan": 5.0, "posinf": 9.0, "neginf": -9.0}),
    ]


register(
    OpEntry(
        "nan_to_num",
        nb.nan_to_num,
        np.nan_to_num,
        _nan_to_num_samples,
        dtypes=("float32", "float64", "int32"),
    )
)
for _n, _f in [
    ("equal", np.equal),
    ("not_equal", np.not_equal),
    ("greater", np.greater),
    ("greater_equal", np.greater_equal),
    ("less", np.less),
    ("less_equal", np.less_equal),
]:
    binary(_n, _f, dtypes=("float32", "int32"), differentiable=False, out_dtype=lambda d: "bool")


def _close_samples(rng, dt):
    # pairs near and far, with infinities and NaNs (float), broadcasting, and keywords
    out = []
    for shape in [(3,), (2, 3)]:
        a = _vals(rng, shape, dt)
        b = a + (_vals(rng, shape, dt) * 1e-7 if np.dtype(a.dtype).kind == "f" else 0)
        if a.ndim == 2 and np.dtype(a.dtype).kind == "f":
            a[0, 0], b[0, 0], a[1, 1], b[1, 1], a[0, 1], b[0, 1] = (
                np.inf,
                np.inf,
                np.nan,
                1,
                -np.inf,
                np.inf,
            )
        out.append(Sample((a, b)))
    a = _vals(rng, (2, 3), dt)
    out.append(Sample((a, a[0] * 2 if np.dtype(a.dtype).kind == "f" else a[0])))
    out.append(Sample((a, a), {"rtol": 0.0, "atol": 0.5}))
    return out


binary_close = [
    ("isclose", np.isclose),
    ("allclose", lambda a, b, **k: np.asarray(np.allclose(a, b, **k))),
]
for _n, _f in binary_close:
    register(
        OpEntry(
            _n,
            getattr(nb, _n),
            _f,
            _close_samples,
            dtypes=("float32", "int32"),
            differentiable=False,
            batchable=_n == "isclose",
            out_dtype=lambda d: "bool",
        )
    )
for _n, _f in [
    ("logical_and", np.logical_and),
    ("logical_or", np.logical_or),
    ("logical_xor", np.logical_xor),
]:
    binary(_n, _f, dtypes=("bool",), differentiable=False, out_dtype=lambda d: "bool")
for _n, _f in [
    ("bitwise_and", np.bitwise_and),
    ("bitwise_or", np.bitwise_or),
    ("bitwise_xor", np.bitwise_xor),
]:
    binary(_n, _f, dtypes=("int32", "bool"), differentiable=False)
for _n, _f in [("left_shift", np.left_shift), ("right_shift", np.right_shift)]:
    # counts from -3 to 69: negative and too-large shifts (0, or -1 for a negative x >> y)
    binary(
        _n,
        _f,
        dtypes=("int32", "int8", "uint8", "uint32", "int64", "uint64"),
        differentiable=False,
        domain_x=(-1000, 1000),
        domain_y=(-3, 70),
    )


def _where_samples(rng, dt):
    out = []
    for sc, sx, sy in [
        ((3,), (3,), (3,)),
        ((2, 3), (3,), ()),
        ((2, 1), (1, 3), (2, 3)),
        ((), (2,), (2,)),
    ]:
        out.append(Sample((rng.random(sc) > 0.5, _vals(rng, sx, dt), _vals(rng, sy, dt))))
    return out


register(
    OpEntry("where", nb.where, np.where, _where_samples, dtypes=("float32", "float64", "int32"))
)
register(
    OpEntry(
        "clip",
        lambda x, lo, hi: nb.clip(x, lo, hi),
        lambda x, lo, hi: np.clip(x, lo, hi),
        lambda rng, dt: [
            Sample((_away(_vals(rng, s, dt), (-0.5, 0.5)), -0.5, 0.5)) for s in SHAPES
        ],
    )
)


# ----------------------------------------------------------------------------- reductions
def reduce_samples(axes=(None, 0, -1, (0, 2), 1), keepdims=(False, True), domain=(-2.0, 2.0)):
    def gen(rng, dtype):
        out = [Sample((_vals(rng, (), dtype, domain),), {"axis": None})]
        x = _vals(rng, (2, 3, 4), dtype, domain)
        for a in axes:
            for k in keepdims:
                out.append(Sample((x,), {"axis": a, "keepdims": k}))
        out.append(Sample((_vals(rng, (0, 3), dtype, domain),), {"axis": 1}))
        return out

    return gen


def _reduction(name, np_fn, fn=None, samples=None, **kw):
    register(OpEntry(name, fn or getattr(nb, name), np_fn, samples or reduce_samples(), **kw))


def _np_red(f):
    return lambda x, axis=None, keepdims=False: f(x, axis=axis, keepdims=keepdims)


_reduction("sum", _np_red(np.sum), dtypes=("float32", "float64", "int32"))
_reduction("reduce_sum", _np_red(np.sum))
_reduction("mean", _np_red(np.mean))
_reduction("prod", _np_red(np.prod), samples=reduce_samples(domain=(0.5, 1.5)))
_nonempty = reduce_samples()


def _nonempty_samples(rng, dt):
    return [s for s in _nonempty(rng, dt) if 0 not in s.args[0].shape]


_reduction(
    "max", _np_red(np.max), samples=_nonempty_samples, dtypes=("float32", "float64", "int32")
)
_reduction("reduce_max", _np_red(np.max), samples=_nonempty_samples)
_reduction(
    "min", _np_red(np.min), samples=_nonempty_samples, dtypes=("float32", "float64", "int32")
)
_reduction("reduce_min", _np_red(np.min), samples=_nonempty_samples)
register(
    OpEntry(
        "minmax",
        lambda x: list(nb.minmax(x).values()),  # {"min": ..., "max": ...}
        lambda x: [np.min(x), np.max(x)],
        lambda rng, dt: [Sample((_vals(rng, s, dt),)) for s in SHAPES],
        dtypes=("float32", "float64", "int32"),
    )
)
_reduction("var", _np_red(np.var), samples=_nonempty_samples)
_reduction(
    "std",
    _np_red(np.std),
    atol=1e-4,  # sqrt'(0) is inf: no 0-d sample
    samples=lambda rng, dt: [s for s in _nonempty_samples(rng, dt) if s.args[0].ndim],
)


def _np_lse(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


_reduction("logsumexp", _np_lse, samples=_nonempty_samples)
_reduction(
    "all",
    _np_red(np.all),
    dtypes=("bool", "float32"),
    differentiable=False,
    out_dtype=lambda d: "bool",
)
_reduction(
    "any",
    _np_red(np.any),
    dtypes=("bool", "float32"),
    differentiable=False,
    out_dtype=lambda d: "bool",
)


def _arg_samples(rng, dt):
    x = rng.permutation(24).reshape(2, 3, 4).astype(nb.DType[dt].numpy)
    return [
        Sample((x,), {"axis": a, "keepdims": k}) for a in (None, 0, -1, 1) for k in (False, True)
    ]


for _n, _f in [("argmax", np.argmax), ("argmin", np.argmin)]:
    register(
        OpEntry(
            _n,
            getattr(nb, _n),
            lambda x, axis=None, keepdims=False, _f=_f: _f(x, axis=axis, keepdims=keepdims),
            _arg_samples,
            dtypes=("float32", "int32"),
            differentiable=False,
            out_dtype=lambda d: "int64",
        )
    )


def _argsort_samples(rng, dt):
    x = rng.integers(0, 5, (3, 4, 5)).astype(nb.DType[dt].numpy)  # ties: the order is stable
    return [Sample((x,), {"axis": a, "descending": d}) for a in (0, -1, 1) for d in (False, True)]


def _np_argsort(x, axis=-1, descending=False):
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    return np.flip(n - 1 - np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)


register(
    OpEntry(
        "argsort",
        nb.argsort,
        _np_argsort,
        _argsort_samples,
        dtypes=("float32", "int32"),
        differentiable=False,
        out_dtype=lambda d: "int64",
    )
)


def _nonzero_samples(rng, dt):
    out = []
    for shape in ((5,), (2, 3), (2, 1, 4), (0, 3)):
        x = _vals(rng, shape, dt)
        if x.size:
            x.ravel()[::2] = 0  # zeros to skip
        out.append(Sample((x,)))
    x = _vals(rng, (2, 3), dt)
    out.append(Sample((x,), {"size": 8, "fill_value": -1}))  # padded
    out.append(Sample((x,), {"size": 2}))  # cut
    return out


register(
    OpEntry(
        "nonzero",
        lambda x, **kw: list(nb.nonzero(x, **kw)),
        lambda x, size=None, fill_value=None: _np_nonzero(x, size, fill_value),
        _nonzero_samples,
        dtypes=("float32", "int32"),
        differentiable=False,
        batchable=False,  # (the count differs per example; with size it batches)
        out_dtype=lambda d: "int64",
    )
)
register(
    OpEntry(
        "argwhere",
        nb.argwhere,
        lambda x, size=None, fill_value=None: np.stack(_np_nonzero(x, size, fill_value), -1),
        _nonzero_samples,
        dtypes=("float32", "int32"),
        differentiable=False,
        batchable=False,
        out_dtype=lambda d: "int64",
    )
)


def _np_nonzero(x, size, fill_value):
    """NumPy's ``nonzero`` as int64, cut or padded to ``size`` with ``fill_value`` (JAX's)."""
    got = [i.astype(np.int64) for i in np.nonzero(x)]
    if size is None:
        return got
    fill = 0 if fill_value is None else fill_value
    return [np.concatenate([i[:size], np.full(max(size - len(i), 0), fill, np.int64)]) for i in got]


def _distinct(rng, shape, dt):
    """Values without ties (the sort's gradient moves them; finite differences need a gap
    between neighbours)."""
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) * 0.5 - n / 4).astype(nb.DType[dt].numpy)


register(
    OpEntry(
        "sort",
        nb.sort,
        lambda x, axis=-1, descending=False: -np.sort(-x, axis) if descending else np.sort(x, axis),
        lambda rng, dt: [
            Sample((_distinct(rng, (3, 4), dt),), {"axis": a, "descending": d})
            for a in (0, -1)
            for d in (False, True)
        ],
        dtypes=("float32", "float64"),
    )
)
register(
    OpEntry(
        "top_k",
        lambda x, k: nb.top_k(x, k)[0],  # (its indices are argsort's, checked there)
        lambda x, k: -np.sort(-x, -1)[..., :k],
        lambda rng, dt: [
            Sample((_distinct(rng, (3, 5), dt), 2)),
            Sample((_distinct(rng, (4,), dt), 4)),
        ],
        dtypes=("float32", "float64"),
    )
)
register(
    OpEntry(
        "take_along_axis",
        nb.take_along_axis,
        lambda x, i, axis: np.take_along_axis(x, i, axis),
        lambda rng, dt: [
            Sample((_vals(rng, (3, 4), dt), np.array([[0, 3], [1, 1], [2, 0]])), {"axis": 1}),
            Sample((_vals(rng, (3, 4), dt), np.array([[2, 0, 1, 1]])), {"axis": 0}),
        ],
        dtypes=("float32", "float64", "int32"),
    )
)


def _np_cumsum(x, axis=-1, exclusive=False, reverse=False):
    if reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis)
    if exclusive:
        out = out - x
    return np.flip(out, axis) if reverse else out


register(
    OpEntry(
        "cumsum",
        nb.cumsum,
        _np_cumsum,
        lambda rng, dt: [
            Sample((_vals(rng, (2, 3, 4), dt),), {"axis": a, "exclusive": e, "reverse": r})
            for a in (0, -1)
            for e in (False, True)
            for r in (False, True)
        ],
        dtypes=("float32", "float64", "int32"),
    )
)


def _np_cumprod(x, axis=-1, exclusive=False, reverse=False):
    if reverse:
        x = np.flip(x, axis)
    out = np.cumprod(x, axis=axis, dtype=np.int32 if x.dtype == np.bool_ else x.dtype)
    if exclusive:
        n = x.shape[axis]
        out = np.concatenate(
            [np.ones_like(np.take(out, [0], axis)), np.take(out, range(n - 1), axis)], axis
        )
    return np.flip(out, axis) if reverse else out


def _cumprod_samples(rng, dt):
    x = _vals(rng, (2, 3, 5), dt)
    z = x.copy()  # zeros, one and two along a row: the gradient must stay exact there
    z[0, 0, 2] = z[1, 1, 0] = z[1, 1, 3] = z[0, 2, 4] = 0
    out = [
        Sample((v,), {"axis": a, "exclusive": e, "reverse": r})
        for v in (x, z)
        for a in (-1, 0)
        for e, r in ((False, False), (True, True))
    ]
    out.append(Sample((z,), {"axis": 2, "exclusive": True}))
    out.append(Sample((z,), {"axis": 1, "reverse": True}))
    out.append(Sample((_vals(rng, (7,), dt),)))
    out.append(Sample((_vals(rng, (0, 3), dt),), {"axis": 0}))
    return out


register(
    OpEntry(
        "cumprod",
        nb.cumprod,
        _np_cumprod,
        _cumprod_samples,
        dtypes=("float32", "float64", "int32", "uint16", "bool"),
        out_dtype=lambda d: "int32" if d == "bool" else d,
    )
)


def _np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


_axis_samples = lambda rng, dt: [
    Sample((_vals(rng, (2, 3, 4), dt),), {"axis": a})  # noqa: E731
    for a in (-1, 0, 1)
]
register(OpEntry("softmax", nb.softmax, _np_softmax, _axis_samples))
register(
    OpEntry(
        "logsoftmax", nb.logsoftmax, lambda x, axis=-1: np.log(_np_softmax(x, axis)), _axis_samples
    )
)


# ----------------------------------------------------------------------------- shape ops
def shaped(name, fn, ref, shape_kwargs, dtypes=("float32", "int32"), **kw):
    """Entry whose samples are one input of a given shape with kwargs variants."""

    def gen(rng, dt):
        return [Sample((_vals(rng, s, dt),) + tuple(extra), k) for s, extra, k in shape_kwargs]

    register(OpEntry(name, fn, ref, gen, dtypes=dtypes, **kw))


shaped(
    "reshape",
    lambda x, shape: nb.reshape(x, shape),
    lambda x, shape: np.reshape(x, shape),
    [
        ((2, 3), (), {"shape": (3, 2)}),
        ((2, 3, 4), (), {"shape": (-1, 4)}),
        ((6,), (), {"shape": (1, 2, 3)}),
        ((), (), {"shape": (1, 1)}),
        ((0, 3), (), {"shape": (3, 0)}),
    ],
)
shaped(
    "broadcast_to",
    lambda x, shape: nb.broadcast_to(x, shape),
    lambda x, shape: np.broadcast_to(x, shape),
    [
        ((3,), (), {"shape": (2, 3)}),
        ((2, 1), (), {"shape": (2, 4)}),
        ((), (), {"shape": (2, 2)}),
        ((1, 3, 1), (), {"shape": (2, 3, 5)}),
    ],
)
shaped(
    "expand",
    lambda x, shape: nb.expand(x, *shape),
    lambda x, shape: np.broadcast_to(
        x, tuple(x.shape[i - (len(shape) - x.ndim)] if s == -1 else s for i, s in enumerate(shape))
    ),
    [((2, 1), (), {"shape": (-1, 4)}), ((3,), (), {"shape": (2, 3)})],
)
shaped(
    "flatten",
    nb.flatten,
    lambda x, start_dim=0, end_dim=-1: (
        x.reshape(x.shape[:start_dim] + (-1,) + x.shape[(end_dim % x.ndim) + 1 :])
        if x.ndim
        else x.reshape(1)
    ),
    [
        ((2, 3, 4), (), {}),
        ((2, 3, 4), (), {"start_dim": 1}),
        ((2, 3, 4), (), {"start_dim": 0, "end_dim": 1}),
        ((), (), {}),
    ],
)
shaped(
    "squeeze",
    nb.squeeze,
    lambda x, axis=None: np.squeeze(x, axis),
    [
        ((1, 3, 1), (), {}),
        ((1, 3, 1), (), {"axis": 0}),
        ((1, 3, 1), (), {"axis": (0, 2)}),
        ((2, 3), (), {}),
    ],
)
shaped(
    "unsqueeze",
    nb.unsqueeze,
    lambda x, axis: np.expand_dims(x, axis),
    [
        ((2, 3), (), {"axis": 0}),
        ((2, 3), (), {"axis": -1}),
        ((2, 3), (), {"axis": (0, 2)}),
        ((), (), {"axis": 0}),
    ],
)
shaped(
    "permute",
    lambda x, axes: nb.permute(x, axes),
    lambda x, axes: np.transpose(x, axes),
    [
        ((2, 3, 4), (), {"axes": (2, 0, 1)}),
        ((2, 3), (), {"axes": (1, 0)}),
        ((2, 3, 4), (), {"axes": (0, -1, 1)}),
    ],
)
shaped(
    "transpose",
    nb.transpose,
    lambda x, axis1=-2, axis2=-1: np.swapaxes(x, axis1, axis2),
    [((2, 3), (), {}), ((2, 3, 4), (), {"axis1": 0, "axis2": 2})],
)
shaped(
    "swap_axes",
    nb.swap_axes,
    lambda x, axis1=-2, axis2=-1: np.swapaxes(x, axis1, axis2),
    [((2, 3, 4), (), {"axis1": 0, "axis2": 1})],
)
shaped(
    "moveaxis",
    nb.moveaxis,
    np.moveaxis,
    [((2, 3, 4), (0, 2), {}), ((2, 3, 4), ((0, 1), (1, 2)), {}), ((2, 3, 4), (-1, 0), {})],
)
shaped(
    "flip",
    nb.flip,
    lambda x, axis=None: np.flip(x, axis),
    [((2, 3), (), {}), ((2, 3, 4), (), {"axis": 1}), ((2, 3, 4), (), {"axis": (0, -1)})],
)
shaped(
    "roll",
    nb.roll,
    lambda x, shift, axis=None: np.roll(x, shift, axis),
    [((5,), (2,), {}), ((2, 3, 4), (-1,), {"axis": 2}), ((2, 3, 4), ((1, 2),), {"axis": (0, 1)})],
)
shaped(
    "tile",
    nb.tile,
    np.tile,
    [((2, 3), ((2, 1),), {}), ((3,), (2,), {}), ((2, 3), ((2, 1, 2),), {})],
)
shaped(
    "repeat",
    nb.repeat,
    lambda x, r, axis=None: np.repeat(x, r, axis),
    [((2, 3), (2,), {"axis": 1}), ((2, 3), (3,), {}), ((2, 3), (2,), {"axis": 0})],
)
shaped(
    "pad",
    nb.pad,
    lambda x, p, mode="constant", value=0.0, **kw: (
        np.pad(x, p, mode=mode, constant_values=kw.get("constant_values", value))
        if mode == "constant"
        else np.pad(x, p, mode=mode, **kw)
    ),
    [
        ((2, 3), (((1, 2), (0, 1)),), {}),
        ((2, 3), (((1, 0), (2, 2)),), {"value": 1.5}),
        # NumPy's other modes and per-side settings (later dims fill the corners)
        ((2, 3), (((1, 2), (0, 1)),), {"constant_values": ((1.0, 2.0), (3.0, 4.0))}),
        ((3, 4), (((2, 3), (4, 1)),), {"mode": "symmetric"}),
        ((3, 4), (((1, 1), (2, 1)),), {"mode": "reflect", "reflect_type": "odd"}),
        ((3, 4), (((1, 2), (2, 1)),), {"mode": "maximum", "stat_length": 2}),
        ((3, 4), (((1, 2), (2, 1)),), {"mode": "mean", "stat_length": ((1, 2), (3, 1))}),
        ((3, 4), (((2, 1), (1, 3)),), {"mode": "linear_ramp", "end_values": (1.0, -2.0)}),
        ((3, 4), (((1, 2), (2, 1)),), {"mode": "reflect"}),
        # wider than the dim less one: reflected again at each end (a single element repeats)
        ((3, 2), (((4, 5), (1, 3)),), {"mode": "reflect"}),
        ((1, 3), (((2, 1), (0, 0)),), {"mode": "reflect"}),
        ((3, 4), (((1, 2), (0, 3)),), {"mode": "edge"}),
        ((3, 4), (((2, 0), (1, 5)),), {"mode": "wrap"}),
    ],
    dtypes=("float32",),
)
shaped(
    "slice_tensor",
    lambda x, start, stop, step=None: nb.slice_tensor(x, start=start, stop=stop, step=step),
    lambda x, start, stop, step=None: x[
        tuple(slice(a, b, c) for a, b, c in zip(start, stop, step or [None] * len(start)))
    ],
    [
        ((4, 5), ([1, 0], [3, 5]), {}),
        ((4, 5), ([None, 4], [None, 0], [2, -1]), {}),
        ((6,), ([-1], [None], [-2]), {}),
    ],
)
shaped(
    "chunk",
    lambda x, c, axis=0: nb.chunk(x, c, axis),
    lambda x, c, axis=0: [a for a in np.array_split(x, c, axis) if a.shape[axis]],
    [((5, 3), (2,), {}), ((4, 6), (3,), {"axis": 1})],
)
shaped(
    "split",
    lambda x, n, axis=0: nb.split(x, n, axis),
    lambda x, n, axis=0: np.split(x, n if isinstance(n, int) else np.cumsum(n)[:-1], axis),
    [((4, 3), (2,), {}), ((4, 6), ([1, 2, 3],), {"axis": 1})],
)
shaped(
    "unbind",
    lambda x, axis=0: nb.unbind(x, axis),
    lambda x, axis=0: [np.take(x, i, axis) for i in range(x.shape[axis])],
    [((3, 2), (), {}), ((2, 3), (), {"axis": 1})],
)


def _multi(name, fn, ref, shapes_list, dtypes=("float32", "int32"), **kw):
    def gen(rng, dt):
        return [Sample(tuple(_vals(rng, s, dt) for s in shapes), k) for shapes, k in shapes_list]

    register(OpEntry(name, fn, ref, gen, dtypes=dtypes, **kw))


_multi(
    "concatenate",
    lambda *xs, axis=0: nb.concatenate(xs, axis),
    lambda *xs, axis=0: np.concatenate(xs, axis),
    [
        ([(2, 3), (1, 3)], {}),
        ([(2, 3), (2, 1), (2, 2)], {"axis": 1}),
        ([(2, 0), (2, 3)], {"axis": -1}),
    ],
)
_multi(
    "stack",
    lambda *xs, axis=0: nb.stack(xs, axis),
    lambda *xs, axis=0: np.stack(xs, axis),
    [([(2, 3), (2, 3)], {}), ([(3,), (3,), (3,)], {"axis": 1}), ([(), ()], {})],
)
_multi(
    "hstack",
    lambda *xs: nb.hstack(xs),
    lambda *xs: np.hstack(xs),
    [([(2,), (3,)], {}), ([(2, 1), (2, 3)], {}), ([(), (2,)], {})],
)
_multi(
    "vstack",
    lambda *xs: nb.vstack(xs),
    lambda *xs: np.vstack(xs),
    [([(3,), (3,)], {}), ([(2, 3), (3,)], {}), ([(1, 2, 2), (3, 2, 2)], {})],
)


def _diag_samples(rng, dt):
    return [Sample((_vals(rng, (3,), dt),), {"k": k}) for k in (0, 1, -2)] + [
        Sample((_vals(rng, (3, 4), dt),), {"k": k}) for k in (0, 2, -1, 5)
    ]


register(OpEntry("diag", nb.diag, np.diag, _diag_samples, dtypes=("float32", "int32")))
_multi(
    "meshgrid",
    lambda *xs, indexing="xy": nb.meshgrid(*xs, indexing=indexing),
    lambda *xs, indexing="xy": np.meshgrid(*xs, indexing=indexing),
    [([(3,), (4,)], {}), ([(2,), (3,), (4,)], {"indexing": "ij"}), ([(2,), (3,), (2,)], {})],
)
_multi(
    "tensordot",
    lambda x, y, axes=2: nb.tensordot(x, y, axes),
    lambda x, y, axes=2: np.tensordot(x, y, axes),
    [
        ([(2, 3, 4), (3, 4, 5)], {}),
        ([(2, 3, 4), (4, 3, 5)], {"axes": ([1, 2], [1, 0])}),
        ([(2, 3), (4,)], {"axes": 0}),
        ([(3, 4), (4, 2)], {"axes": 1}),
    ],
    dtypes=("float32",),
    atol=1e-4,
)
_multi(
    "slice_update",
    lambda x, u, start, stop: nb.slice_update(x, u, start=start, stop=stop),
    lambda x, u, start, stop: _np_set(x, tuple(slice(a, b) for a, b in zip(start, stop)), u),
    [
        ([(4, 5), (2, 3)], {"start": [1, 2], "stop": [3, 5]}),
        ([(4, 5), (1, 5)], {"start": [3], "stop": [4]}),
    ],
)


def _np_set(x, idx, u):
    out = x.copy()
    out[idx] = u
    return out


# ----------------------------------------------------------------------------- indexing
_IDX = np.array([2, 0, 1, 2])


def _gather_samples(rng, dt):
    return [
        Sample((_vals(rng, (3, 4), dt), _IDX[:3]), {"axis": 0}),
        Sample((_vals(rng, (2, 3, 4), dt), np.array([[0, 3], [1, -1]])), {"axis": 2}),
        Sample((_vals(rng, (5,), dt), np.array(4)), {"axis": 0}),
    ]


register(
    OpEntry(
        "gather",
        nb.gather,
        lambda x, i, axis=0: np.take(x, i, axis),
        _gather_samples,
        dtypes=("float32", "float64", "int32"),
    )
)
register(
    OpEntry(
        "take",
        nb.take,
        lambda x, i, axis=0: np.take(x, i, axis),
        _gather_samples,
        dtypes=("float32",),
    )
)


def _np_scatter(x, i, u, axis=0, mode="set"):
    out = x.copy()
    axis %= x.ndim
    idx = (slice(None),) * axis + (i,)
    combine = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}
    if mode == "set":
        out[idx] = u
    else:
        combine[mode].at(out, idx, u)
    return out


def _scatter_samples(rng, dt):
    return [
        Sample((_vals(rng, (4, 3), dt), np.array([2, 0]), _vals(rng, (2, 3), dt)), {"axis": 0}),
        Sample(
            (_vals(rng, (2, 5), dt), np.array([1, 1, 4]), _vals(rng, (2, 3), dt)),
            {"axis": 1, "mode": "add"},
        ),
        Sample((_vals(rng, (2, 5), dt), np.array([4, 0]), _vals(rng, (2, 2), dt)), {"axis": -1}),
    ] + [  # every update at a repeated index takes part
        Sample(
            (_vals(rng, (4, 3), dt), np.array([2, 0, 2, 2]), _vals(rng, (4, 3), dt)),
            {"axis": 0, "mode": mode},
        )
        for mode in ("mul", "min", "max")
    ]


register(
    OpEntry(
        "scatter", nb.scatter, _np_scatter, _scatter_samples, dtypes=("float32", "float64", "int32")
    )
)

_GETITEM_KEYS = [
    1,
    -1,
    slice(None, None, -1),
    (slice(1, 3), 2),
    (Ellipsis, 0),
    (None, slice(None), 1),
    (slice(None, None, 2), None, Ellipsis),
    np.array([2, 0, 2]),
    (slice(None), np.array([1, 0])),
    (np.array([0, 2]), np.array([1, 3])),
    (np.array([[0], [2]]), slice(None), np.array([1, 3])),
    (1, slice(None), np.array([0, 2])),
    np.array([True, False, True]),
]


def _getitem_samples(rng, dt):
    return [Sample((_vals(rng, (3, 4, 5), dt),), {"key": k}) for k in _GETITEM_KEYS]


register(
    OpEntry(
        "getitem",
        lambda x, key: x[key],
        lambda x, key: x[key],
        _getitem_samples,
        dtypes=("float32", "int32"),
    )
)


def _setitem_samples(rng, dt):
    out = []
    for k in [
        1,
        (slice(1, 3), 2),
        (Ellipsis, slice(None, None, 2)),
        np.array([2, 0]),
        (slice(None), np.array([1, 3])),
        (np.array([0, 2]), np.array([1, 3])),
    ]:
        x = _vals(rng, (3, 4, 5), dt)
        region = x[k]
        out.append(Sample((x, _vals(rng, region.shape, dt)), {"key": k}))
    return out


def _set_fn(x, v, key):
    return x.at[key].set(v)


def _add_fn(x, v, key):
    return x.at[key].add(v)


def _np_setitem(x, v, key):
    out = x.copy()
    out[key] = v
    return out


def _np_additem(x, v, key):
    out = x.copy()
    np.add.at(out, key, v)
    return out


register(OpEntry("at_set", _set_fn, _np_setitem, _setitem_samples, dtypes=("float32", "int32")))
register(OpEntry("at_add", _add_fn, _np_additem, _setitem_samples, dtypes=("float32",)))


def _setitem_inplace(x, v, key):
    y = x * 1
    y[key] = v
    return y


register(OpEntry("setitem", _setitem_inplace, _np_setitem, _setitem_samples, dtypes=("float32",)))


# ----------------------------------------------------------------------------- linalg
def _matmul_samples(rng, dt):
    shapes = [
        ((2, 3), (3, 4)),
        ((3,), (3, 2)),
        ((2, 3), (3,)),
        ((4,), (4,)),
        ((2, 2, 3), (3, 5)),
        ((2, 1, 2, 3), (4, 3, 2)),
        ((0, 3), (3, 2)),
    ]
    return [Sample((_vals(rng, a, dt), _vals(rng, b, dt))) for a, b in shapes]


register(
    OpEntry(
        "matmul",
        nb.matmul,
        np.matmul,
        _matmul_samples,
        dtypes=("float32", "float64", "int32"),
        atol=1e-4,
    )
)


register(
    OpEntry(
        "bmm",
        nb.bmm,
        np.matmul,
        lambda rng, dt: [
            Sample((_vals(rng, (2, 3, 4), dt), _vals(rng, (2, 4, 5), dt))),
            Sample((_vals(rng, (1, 1, 3), dt), _vals(rng, (1, 3, 1), dt))),
            Sample((_vals(rng, (0, 2, 3), dt), _vals(rng, (0, 3, 2), dt))),
        ],
        dtypes=("float32", "float64", "int32"),
        atol=1e-4,
    )
)


def _dot_samples(rng, dt):
    # NumPy's dot: matmul's cases, plus both operands batched (no broadcasting: every dim of
    # both kept) and a 0-d operand (a product)
    shapes = [((2, 3), (3, 4)), ((3,), (3, 2)), ((2, 3), (3,)), ((4,), (4,)), ((2, 2, 3), (3, 5))]
    shapes += [((2, 3, 4), (5, 4, 6)), ((3,), (2, 3, 4)), ((), (3,)), ((0, 3), (3, 2))]
    return [Sample((_vals(rng, a, dt), _vals(rng, b, dt))) for a, b in shapes]


register(OpEntry("dot", nb.dot, np.dot, _dot_samples, dtypes=("float32",), atol=1e-4))
register(
    OpEntry(
        "outer",
        nb.outer,
        np.outer,
        lambda rng, dt: [
            Sample((_vals(rng, (3,), dt), _vals(rng, (4,), dt))),
            Sample((_vals(rng, (2, 2), dt), _vals(rng, (2,), dt))),
        ],
    )
)

_EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(3, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->ji", [(2, 3)]),
    ("i,j->ij", [(2,), (3,)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
]
register(
    OpEntry(
        "einsum",
        lambda *xs, eq: nb.einsum(eq, *xs),
        lambda *xs, eq: np.einsum(eq, *xs),
        lambda rng, dt: [
            Sample(tuple(_vals(rng, s, dt) for s in shapes), {"eq": eq}) for eq, shapes in _EINSUM
        ],
        atol=1e-4,
    )
)


# ----------------------------------------------------------------------------- nn kernels
def _ref_conv(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    s = (stride, stride) if isinstance(stride, int) else stride
    d = (dilation, dilation) if isinstance(dilation, int) else dilation
    p = ((padding, padding), (padding, padding)) if isinstance(padding, int) else padding
    x = np.pad(x, ((0, 0), p[0], p[1], (0, 0)))
    n, h, wd, c = x.shape
    kh, kw, cg, o = w.shape
    oh = (h - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (wd - d[1] * (kw - 1) - 1) // s[1] + 1
    out = np.zeros((n, oh, ow, o), dtype=x.dtype)
    og = o // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = x[
                    :,
                    i * d[0] : i * d[0] + s[0] * (oh - 1) + 1 : s[0],
                    j * d[1] : j * d[1] + s[1] * (ow - 1) + 1 : s[1],
                    g * cg : (g + 1) * cg,
                ]
                out[..., g * og : (g + 1) * og] += patch @ w[i, j, :, g * og : (g + 1) * og]
    return out if bias is None else out + bias


def _ref_conv_t(x, w, bias=None, stride=1, padding=0, output_padding=0, dilation=1):
    s = (stride, stride) if isinstance(stride, int) else stride
    d = (dilation, dilation) if isinstance(dilation, int) else dilation
    op = (output_padding,) * 2 if isinstance(output_padding, int) else output_padding
    p = padding if isinstance(padding, int) else padding[0]
    n, h, wd, c = x.shape
    kh, kw, ci, o = w.shape
    hh = (h - 1) * s[0] + d[0] * (kh - 1) + 1 + op[0]
    ww = (wd - 1) * s[1] + d[1] * (kw - 1) + 1 + op[1]
    out = np.zeros((n, hh, ww, o), dtype=x.dtype)
    for y in range(h):
        for xx in range(wd):
            for i in range(kh):
                for j in range(kw):
                    out[:, y * s[0] + i * d[0], xx * s[1] + j * d[1], :] += x[:, y, xx, :] @ w[i, j]
    return out[:, p : hh - p, p : ww - p, :]


def _conv_samples(rng, dt):
    return [
        Sample((_vals(rng, (2, 5, 6, 3), dt), _vals(rng, (3, 3, 3, 4), dt))),
        Sample(
            (_vals(rng, (1, 6, 5, 4), dt), _vals(rng, (2, 3, 2, 6), dt)),
            {"stride": (2, 1), "padding": 1, "dilation": (1, 2), "groups": 2},
        ),
        Sample(
            (_vals(rng, (1, 4, 4, 2), dt), _vals(rng, (3, 3, 2, 2), dt), _vals(rng, (2,), dt)),
            {"padding": 1},
        ),
    ]


def _conv_t_samples(rng, dt):
    return [
        Sample((_vals(rng, (2, 3, 4, 3), dt), _vals(rng, (3, 3, 3, 2), dt)), {"stride": 2}),
        Sample(
            (_vals(rng, (1, 4, 3, 2), dt), _vals(rng, (2, 3, 2, 3), dt)),
            {"stride": 2, "padding": 1, "output_padding": 1, "dilation": (1, 2)},
        ),
    ]


register(OpEntry("conv2d", nb.conv2d, _ref_conv, _conv_samples, atol=1e-4, fd_eps=1e-5))
register(
    OpEntry(
        "conv2d_transpose",
        nb.conv2d_transpose,
        _ref_conv_t,
        _conv_t_samples,
        atol=1e-4,
        fd_eps=1e-5,
    )
)


def _windows_ref(x, k, s, pad_val, p=0, d=1):
    x = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)), constant_values=pad_val)
    n, h, w, c = x.shape
    reach = d * (k - 1) + 1
    oh, ow = (h - reach) // s + 1, (w - reach) // s + 1
    return np.stack(
        [
            x[:, i * d : i * d + s * (oh - 1) + 1 : s, j * d : j * d + s * (ow - 1) + 1 : s]
            for i in range(k)
            for j in range(k)
        ],
        3,
    )


register(
    OpEntry(
        "max_pool2d",
        nb.max_pool2d,
        lambda x, kernel_size, stride=None, padding=0, ceil_mode=False: _windows_ref(
            # ceil_mode without padding: one more row and column of the fill at the end
            np.pad(
                x,
                ((0, 0), (0, int(ceil_mode)), (0, int(ceil_mode)), (0, 0)),
                constant_values=-np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min,
            ),
            kernel_size,
            stride or kernel_size,
            -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min,
            padding,
        ).max(3),
        lambda rng, dt: [
            Sample((_vals(rng, (2, 6, 6, 3), dt),), {"kernel_size": 2}),
            Sample((_vals(rng, (1, 5, 5, 2), dt),), {"kernel_size": 3, "stride": 1, "padding": 1}),
            Sample((_vals(rng, (1, 5, 5, 2), dt),), {"kernel_size": 2, "ceil_mode": True}),
        ],
        # integer inputs: padding takes the dtype's minimum (int8 once overflowed)
        dtypes=("float32", "float64", "int8", "int32"),
    )
)
register(
    OpEntry(
        "avg_pool2d",
        nb.avg_pool2d,
        lambda x, kernel_size, stride=None, padding=0, dilation=1: _windows_ref(
            x, kernel_size, stride or kernel_size, 0.0, padding, dilation
        ).mean(3),
        lambda rng, dt: [
            Sample((_vals(rng, (2, 6, 6, 3), dt),), {"kernel_size": 2}),
            Sample((_vals(rng, (1, 5, 5, 2), dt),), {"kernel_size": 3, "stride": 1, "padding": 1}),
            # the original Nabla's dilation keyword
            Sample((_vals(rng, (1, 6, 6, 2), dt),), {"kernel_size": 2, "stride": 1, "dilation": 2}),
        ],
    )
)


# ----------------------------------------------------------------------------- creation
def _creation(name, fn, ref, samples, **kw):
    register(OpEntry(name, fn, ref, samples, differentiable=False, batchable=False, **kw))


_creation(
    "zeros",
    lambda shape: nb.zeros(shape),
    lambda shape: np.zeros(shape, np.float32),
    lambda rng, dt: [Sample(((2, 3),)), Sample(((),)), Sample(((0, 2),))],
    dtypes=("float32",),
)
_creation(
    "ones",
    lambda shape: nb.ones(shape),
    lambda shape: np.ones(shape, np.float32),
    lambda rng, dt: [Sample(((2, 3),)), Sample(((),))],
    dtypes=("float32",),
)
_creation(
    "full",
    lambda shape, v: nb.full(shape, v),
    lambda shape, v: np.full(shape, v),
    lambda rng, dt: [Sample(((2, 3), 1.5)), Sample(((2,), 7))],
    dtypes=("float32",),
    out_dtype=lambda d: None,
)
_creation(
    "arange",
    nb.arange,
    lambda *a, dtype=None: np.arange(*a),
    lambda rng, dt: [Sample((5,)), Sample((1, 7, 2)), Sample((0.0, 1.0, 0.25)), Sample((5, 0, -2))],
    dtypes=("int32",),
    out_dtype=lambda d: None,
)
_creation(
    "linspace",
    nb.linspace,
    lambda *a, **k: np.linspace(*a, **k),
    lambda rng, dt: [Sample((0.0, 1.0, 5)), Sample((2.0, -1.0, 4), {"endpoint": False})],
    dtypes=("float32",),
)
_creation(
    "eye",
    nb.eye,
    lambda *a, **k: np.eye(*a, **k),
    lambda rng, dt: [Sample((3,)), Sample((2, 4)), Sample((3, 3), {"k": 1})],
    dtypes=("float32",),
)
_creation(
    "hann_window",
    nb.hann_window,
    lambda n, periodic=True: np.hanning(n + 1)[:-1] if periodic else np.hanning(n),
    lambda rng, dt: [Sample((8,)), Sample((5,), {"periodic": False})],
    dtypes=("float32",),
    atol=1e-6,
)
for _n, _f in [("zeros_like", np.zeros_like), ("ones_like", np.ones_like)]:
    register(OpEntry(_n, getattr(nb, _n), _f, unary_samples(), differentiable=False))
register(
    OpEntry(
        "full_like",
        nb.full_like,
        lambda x, v: np.full_like(x, v),
        lambda rng, dt: [Sample((_vals(rng, (2, 3), dt), 2.5))],
        differentiable=False,
    )
)
for _n, _f in [("triu", np.triu), ("tril", np.tril)]:
    register(
        OpEntry(
            _n,
            getattr(nb, _n),
            _f,
            lambda rng, dt: [
                Sample((_vals(rng, (3, 4), dt),)),
                Sample((_vals(rng, (2, 3, 3), dt), -1)),
                Sample((_vals(rng, (3, 3), dt), 1)),
            ],
            dtypes=("float32", "int32"),
        )
    )

# NumPy's and JAX's array functions composed of the ops (ops/array_functions.py)
shaped("ravel", nb.ravel, np.ravel, [((2, 3, 4), (), {}), ((), (), {})])
for _n in ("atleast_1d", "atleast_2d", "atleast_3d"):
    shaped(_n, getattr(nb, _n), getattr(np, _n), [((), (), {}), ((3,), (), {}), ((2, 3), (), {})])
shaped("fliplr", nb.fliplr, np.fliplr, [((2, 3), (), {}), ((2, 3, 4), (), {})])
shaped("flipud", nb.flipud, np.flipud, [((3,), (), {}), ((2, 3, 4), (), {})])
shaped(
    "rot90",
    nb.rot90,
    np.rot90,
    [((2, 3), (), {}), ((2, 3, 4), (3,), {}), ((2, 3, 4), (), {"k": 2, "axes": (2, 0)})],
)
shaped(
    "diagonal",
    nb.diagonal,
    np.diagonal,
    [((3, 4), (), {}), ((3, 4), (), {"offset": 1}), ((2, 3, 4), (-1, 2, 0), {})],
)
shaped(
    "count_nonzero",
    nb.count_nonzero,
    lambda x, axis=None, keepdims=False: np.count_nonzero(x, axis, keepdims=keepdims).astype(
        np.int32
    ),
    [((2, 3), (), {}), ((2, 3, 4), (), {"axis": 1, "keepdims": True})],
    differentiable=False,
    out_dtype=lambda dt: "int32",
)
shaped(
    "diff",
    nb.diff,
    np.diff,
    [((5,), (), {}), ((2, 5, 3), (2,), {"axis": 1}), ((3, 4), (), {"axis": 0, "prepend": 0})],
)
_multi("vdot", nb.vdot, np.vdot, [([(2, 3), (3, 2)], {})], dtypes=("float32",), atol=1e-4)
_multi("inner", nb.inner, np.inner, [([(2, 3), (4, 3)], {}), ([(3,), (2, 2, 3)], {})],
       dtypes=("float32",), atol=1e-4)  # fmt: skip
_multi("kron", nb.kron, np.kron, [([(2, 3), (2, 2)], {}), ([(3,), (2, 2)], {})])
_multi(
    "cross",
    nb.cross,
    np.cross,
    [([(4, 3), (4, 3)], {}), ([(3, 2), (2, 3)], {"axisa": 0, "axisc": 0})],
    dtypes=("float32",),
)
shaped(
    "array_split",
    nb.array_split,
    np.array_split,
    [((7,), (3,), {}), ((2, 5), ([1, 3],), {"axis": 1})],
)
_multi(
    "searchsorted",
    lambda a, v, side="left": nb.searchsorted(nb.sort(a), v, side),
    lambda a, v, side="left": np.searchsorted(np.sort(a), v, side).astype(np.int32),
    [([(6,), (2, 3)], {}), ([(5,), (4,)], {"side": "right"})],
    differentiable=False,
    out_dtype=lambda dt: "int32",
)

_multi(
    "digitize",
    lambda x, bins, right=False: nb.digitize(x, nb.sort(bins), right),
    lambda x, bins, right=False: np.digitize(x, np.sort(bins), right).astype(np.int32),
    [([(2, 3), (4,)], {}), ([(5,), (3,)], {"right": True})],
    differentiable=False,
    out_dtype=lambda dt: "int32",
)
register(
    OpEntry(
        "bincount",
        nb.bincount,
        lambda x, weights=None, minlength=0, length=None: np.bincount(
            x, weights, minlength if length is None else length
        )[: length or None].astype(np.int32 if weights is None else np.float32),
        lambda rng, dt: [
            Sample((rng.integers(0, 5, 9).astype(np.int32),)),
            Sample((rng.integers(0, 5, 9).astype(np.int32),), {"minlength": 8}),
            Sample((rng.integers(0, 5, 9).astype(np.int32),), {"length": 3}),
        ],
        dtypes=("int32",),
        differentiable=False,
        batchable=False,  # (its length is the values' maximum, unless given)
    )
)

for _n in ("nansum", "nanmean", "nanmax", "nanmin", "nanvar", "nanstd", "ptp"):
    shaped(
        _n,
        getattr(nb, _n),
        getattr(np, _n),
        [
            ((2, 3, 4), (), {}),
            ((2, 3, 4), (), {"axis": 1}),
            ((3, 4), (), {"axis": 0, "keepdims": True}),
        ],
        dtypes=("float32", "float64"),
    )
for _n, _q in (("quantile", 0.3), ("percentile", [10.0, 75.0])):
    shaped(
        _n,
        getattr(nb, _n),
        getattr(np, _n),
        [
            ((7,), (_q,), {}),
            ((3, 5), (_q,), {"axis": 1}),
            ((3, 5), (_q,), {"axis": 0, "keepdims": True}),
        ],
        dtypes=("float32", "float64"),
    )
shaped("median", nb.median, np.median, [((7,), (), {}), ((3, 6), (), {"axis": 1})],
       dtypes=("float32", "float64"))  # fmt: skip
for _n, _q in (("nanquantile", 0.3), ("nanpercentile", [10.0, 75.0])):
    shaped(
        _n,
        getattr(nb, _n),
        getattr(np, _n),
        [((7,), (_q,), {}), ((3, 5), (_q,), {"axis": 1})],
        dtypes=("float32", "float64"),
    )
shaped("nanmedian", nb.nanmedian, np.nanmedian, [((7,), (), {}), ((3, 6), (), {"axis": 1})],
       dtypes=("float32", "float64"))  # fmt: skip
shaped("nanprod", nb.nanprod, np.nanprod, [((2, 3), (), {}), ((3, 4), (), {"axis": 1})],
       dtypes=("float32", "float64"))  # fmt: skip
for _n in ("cov", "corrcoef"):
    shaped(
        _n,
        getattr(nb, _n),
        getattr(np, _n),
        [((3, 6), (), {}), ((6, 3), (), {"rowvar": False}), ((5,), (), {})],
        dtypes=("float32", "float64"),
        atol=1e-4,
    )


def _set_ref(np_fn, fill_smallest=True):
    def ref(a, b, size):
        got = np_fn(a, b)
        fill = (got[0] if len(got) else 0) if fill_smallest else 0
        return np.concatenate([got, np.full(size - len(got), fill, got.dtype)])[:size]

    return ref


for _n, _smallest in (("union1d", True), ("intersect1d", True), ("setdiff1d", False),
                      ("setxor1d", True)):  # fmt: skip
    register(
        OpEntry(
            _n,
            getattr(nb, _n),
            _set_ref(getattr(np, _n), _smallest),
            lambda rng, dt: [
                Sample(
                    (rng.integers(0, 9, 7).astype(dt), rng.integers(0, 9, 5).astype(dt)),
                    {"size": 12},  # (at least the concatenation setxor1d sorts)
                )
            ],
            dtypes=("int32",),
            differentiable=False,
        )
    )


# PyTorch's names (ops/array_functions.py), against NumPy forms of their definitions
def _np_cdist(a, b, p=2.0):
    d = np.abs(a[..., :, None, :] - b[..., None, :, :])
    return (d**p).sum(-1) ** (1 / p)


register(
    OpEntry(
        "cdist",
        nb.cdist,
        _np_cdist,
        lambda rng, dt: [
            Sample((_vals(rng, (3, 4), dt), _vals(rng, (5, 4), dt))),
            Sample((_vals(rng, (2, 3, 4), dt), _vals(rng, (2, 5, 4), dt)), {"p": 3.0}),
        ],
        atol=1e-4,
    )
)
register(
    OpEntry(
        "bucketize",
        nb.bucketize,
        lambda x, b, right=False: np.searchsorted(b, x, "right" if right else "left"),
        lambda rng, dt: [
            Sample((rng.uniform(-2, 2, (3, 4)).astype(dt), np.array([-1.0, 0.0, 1.0], dt))),
            Sample(
                (np.array([-1.0, 0.0, 0.5, 1.0], dt), np.array([-1.0, 0.0, 1.0], dt)),
                {"right": True},
            ),
        ],  # fmt: skip
        differentiable=False,
        out_dtype=lambda dt: "int64",
    )
)


def _np_diag_embed(x, offset=0):
    n = x.shape[-1] + abs(offset)
    out = np.zeros(x.shape[:-1] + (n, n), x.dtype)
    idx = np.arange(x.shape[-1])
    rows, cols = (idx, idx + offset) if offset >= 0 else (idx - offset, idx)
    out[..., rows, cols] = x
    return out


shaped("diag_embed", nb.diag_embed, _np_diag_embed, [((3,), (), {}), ((2, 3), (), {"offset": -1})],
       dtypes=("float32", "float64"))  # fmt: skip
register(
    OpEntry(
        "cartesian_prod",
        nb.cartesian_prod,
        lambda a, b: np.stack([g.ravel() for g in np.meshgrid(a, b, indexing="ij")], -1),
        lambda rng, dt: [Sample((_vals(rng, (3,), dt), _vals(rng, (2,), dt)))],
        dtypes=("float32", "int32"),
    )
)
register(
    OpEntry(
        "combinations",
        nb.combinations,
        lambda x, r=2: np.array(list(__import__("itertools").combinations(x, r)), x.dtype),
        lambda rng, dt: [Sample((rng.uniform(-2, 2, 4).astype(dt),), {"r": 3})],
    )
)
shaped(
    "logcumsumexp",
    lambda x, dim: nb.logcumsumexp(x, dim),
    lambda x, dim: np.logaddexp.accumulate(x, dim),
    [((3, 4), (1,), {}), ((5,), (0,), {})],
    dtypes=("float32", "float64"),
)


def _np_take_along_dim(x, i, dim=None):
    if dim is None:
        return np.take_along_axis(x.ravel(), i.ravel(), 0)
    return np.take_along_axis(x, i, dim)


register(
    OpEntry(
        "take_along_dim",
        nb.take_along_dim,
        _np_take_along_dim,
        lambda rng, dt: [
            Sample((_vals(rng, (3, 4), dt), np.array([[0, 2], [1, 1], [3, 0]])), {"dim": 1}),
            Sample((_vals(rng, (3, 4), dt), np.array([0, 5, 11]))),
        ],
    )
)
shaped("tensor_split", nb.tensor_split, lambda x, n, dim=0: np.array_split(x, n, dim),
       [((10,), (3,), {}), ((4, 7), (3,), {"dim": 1})], dtypes=("float32",))  # fmt: skip
shaped("var_mean", nb.var_mean, lambda x, dim=None: [np.var(x, dim, ddof=1), np.mean(x, dim)],
       [((3, 4), (), {"dim": 1}), ((5,), (), {})], dtypes=("float32", "float64"))  # fmt: skip
shaped("std_mean", nb.std_mean, lambda x, dim=None: [np.std(x, dim, ddof=1), np.mean(x, dim)],
       [((3, 4), (), {"dim": 1}), ((5,), (), {})], dtypes=("float32", "float64"))  # fmt: skip
unary("real", np.real)
unary("imag", np.imag)
unary("conj", np.conj)

_multi(
    "average",
    lambda a, w=None, axis=None: nb.average(a, axis, w),
    lambda a, w=None, axis=None: np.average(a, axis, w),
    [([(3, 4)], {}), ([(3, 4), (4,)], {"axis": 1}), ([(2, 3), (2, 3)], {"axis": 0})],
    dtypes=("float32", "float64"),
)

# more of jnp's functions (ops/array_functions.py, ops/creation.py)
unary("cbrt", np.cbrt, kinks=(0.0,))
unary("deg2rad", np.deg2rad)
unary("rad2deg", np.rad2deg)
unary("sinc", np.sinc, atol=1e-4)
unary("exp2", np.exp2)
unary("rint", np.rint, kinks=(-1.5, -0.5, 0.5, 1.5))
shaped(
    "signbit",
    nb.signbit,
    np.signbit,
    [((2, 3), (), {}), ((4,), (), {})],
    dtypes=("float32", "int32"),
    differentiable=False,
    out_dtype=lambda dt: "bool",
)
binary("copysign", np.copysign)
binary("heaviside", np.heaviside)
binary("fmax", np.fmax)
binary("fmin", np.fmin)
binary("logaddexp2", np.logaddexp2)
_multi("column_stack", lambda *xs: nb.column_stack(xs), lambda *xs: np.column_stack(xs),
       [([(3,), (3,)], {}), ([(2, 3), (2,)], {})])  # fmt: skip
_multi("dstack", lambda *xs: nb.dstack(xs), lambda *xs: np.dstack(xs),
       [([(3,), (3,)], {}), ([(2, 3), (2, 3)], {}), ([(2, 3, 1), (2, 3, 2)], {})])  # fmt: skip
_multi(
    "broadcast_arrays",
    nb.broadcast_arrays,
    lambda *xs: list(np.broadcast_arrays(*xs)),
    [([(3,), (2, 1)], {}), ([(2, 3), ()], {})],
)
for _n in ("array_equal", "array_equiv"):
    _multi(
        _n,
        getattr(nb, _n),
        lambda a, b, f=getattr(np, _n): np.asarray(f(a, b)),
        [([(2, 3), (2, 3)], {}), ([(3,), (2, 3)], {}), ([(1,), (1,)], {})],
        dtypes=("int32",),
        differentiable=False,
        batchable=False,  # (one answer for the whole array)
        out_dtype=lambda dt: "bool",
    )
_multi(
    "isin",
    nb.isin,
    np.isin,
    [([(2, 3), (4,)], {}), ([(5,), (2, 2)], {"invert": True})],
    dtypes=("int32",),
    differentiable=False,
    out_dtype=lambda dt: "bool",
)
_multi(
    "select",
    lambda c, a, b: nb.select([c > 0, c < -1], [a, b], 0.5),
    lambda c, a, b: np.select([c > 0, c < -1], [a, b], 0.5),
    [([(2, 3), (2, 3), (2, 3)], {}), ([(4,), (4,), ()], {})],
    dtypes=("float32",),
)
shaped(
    "trapezoid",
    nb.trapezoid,
    np.trapezoid,
    [((5,), (), {}), ((3, 4), (), {"dx": 0.5, "axis": 0})],
    dtypes=("float32", "float64"),
)
_multi("polyval", nb.polyval, np.polyval, [([(3,), (2, 4)], {}), ([(1,), (3,)], {})],
       dtypes=("float32", "float64"))  # fmt: skip
# JAX's jax.ops segment reductions (ids outside the segments are dropped)
_SEGMENT_IDS = np.array([0, 2, 2, 4, -1, 1, 0], np.int32)


def _np_segment(kind):
    def ref(d, num_segments=4):
        ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[kind]
        if kind in ("sum", "prod"):
            fill = 0 if kind == "sum" else 1
        elif d.dtype.kind == "f":
            fill = -np.inf if kind == "max" else np.inf
        else:
            fill = np.iinfo(d.dtype).min if kind == "max" else np.iinfo(d.dtype).max
        out = np.full((num_segments + 1, *d.shape[1:]), fill, d.dtype)
        ids = np.where((_SEGMENT_IDS >= 0) & (_SEGMENT_IDS < num_segments), _SEGMENT_IDS,
                       num_segments)  # fmt: skip
        ufunc.at(out, ids, d)
        return out[:num_segments]

    return ref


for _k in ("sum", "prod", "max", "min"):
    shaped(
        f"segment_{_k}",
        lambda d, _k=_k, **kw: getattr(nb, f"segment_{_k}")(d, _SEGMENT_IDS, **kw),
        _np_segment(_k),
        # (max/min: every segment reached, so finite differences see no infinity)
        [((7,), (), {"num_segments": 4 if _k in ("sum", "prod") else 3}),
         ((7, 3), (), {"num_segments": 6 if _k in ("sum", "prod") else 2})],
    )  # fmt: skip
# the user's NumPy function as an op (more in tests/test_callback.py)
register(
    OpEntry(
        "pure_callback",
        lambda x: nb.pure_callback(
            np.tanh, nb.ShapeDtypeStruct(x.shape, x.dtype), x, vmap_method="sequential"
        ),
        np.tanh,
        unary_samples(),
        differentiable=False,
    )
)
# nabla/_numeric.py: NumPy's remaining numeric functions
unary("i0", lambda x: np.i0(x).astype(x.dtype), domain=(-6.0, 6.0), atol=1e-4, rtol=1e-5)
unary("fabs", np.fabs)
unary("angle", lambda x: np.angle(x).astype(x.dtype), kinks=(0.0,))
for _n in ("isposinf", "isneginf"):
    register(
        OpEntry(
            _n,
            getattr(nb, _n),
            getattr(np, _n),
            lambda rng, dt: [
                Sample((np.array([np.inf, -np.inf, 1.0, np.nan, -2.0], dt),)),
                Sample((_vals(rng, (2, 3), dt),)),
            ],
            differentiable=False,
            out_dtype=lambda dt: "bool",
        )
    )
shaped(
    "bitwise_count",
    nb.bitwise_count,
    np.bitwise_count,
    [((2, 3), (), {}), ((5,), (), {})],
    dtypes=("int32", "uint8", "int64"),
    differentiable=False,
    out_dtype=lambda dt: "uint8",
)
for _n in ("gcd", "lcm"):
    register(
        OpEntry(
            _n,
            getattr(nb, _n),
            getattr(np, _n),
            lambda rng, dt: [
                Sample(
                    (rng.integers(-60, 60, (2, 5)).astype(dt), rng.integers(-60, 60, 5).astype(dt))
                ),
                Sample((np.array([0, 0, 7, 12], dt), np.array([0, 5, 0, -18], dt))),
            ],
            dtypes=("int32", "int64"),
            differentiable=False,
        )
    )
register(
    OpEntry(
        "ldexp",
        nb.ldexp,
        lambda x, e: np.ldexp(x, e),
        lambda rng, dt: [
            Sample((_vals(rng, (2, 3), dt), rng.integers(-5, 6, (2, 3)).astype(np.int32))),
            Sample((_vals(rng, (4,), dt), np.int32(3))),
        ],
    )
)
register(
    OpEntry(
        "nextafter",
        nb.nextafter,
        np.nextafter,
        lambda rng, dt: [
            Sample((_vals(rng, (2, 3), dt), _vals(rng, (3,), dt))),
            Sample(
                (
                    np.array([0.0, 1.0, -1.0, 0.5, np.inf, 2.0], dt),
                    np.array([-1.0, 0.0, -1.0, 0.0, 0.0, 2.0], dt),
                )
            ),
        ],
        differentiable=False,
        atol=0.0,
        rtol=0.0,
    )
)
unary("spacing", np.spacing, differentiable=False, atol=0.0, rtol=0.0)
register(
    OpEntry(
        "frexp",
        nb.frexp,
        lambda x: [a.astype(x.dtype if a.dtype.kind == "f" else np.int32) for a in np.frexp(x)],
        lambda rng, dt: [
            Sample((_vals(rng, (2, 3), dt) * 40.0,)),
            Sample((np.array([0.0, 1.0, 0.5, -3.0, 1024.0], dt),)),
        ],
        differentiable=False,
        out_dtype=lambda dt: None,  # (float and int32: tests/test_numeric.py)
    )
)
_multi("polyadd", nb.polyadd, np.polyadd, [([(3,), (5,)], {}), ([(4,), (2,)], {})],
       dtypes=("float32", "float64"))  # fmt: skip
_multi("polysub", nb.polysub, np.polysub, [([(3,), (5,)], {}), ([(4,), (2,)], {})],
       dtypes=("float32", "float64"))  # fmt: skip
_multi(
    "polymul",
    nb.polymul,
    np.polymul,
    [([(3,), (4,)], {})],
    dtypes=("float32", "float64"),
    batchable=False,  # (convolve's: 1-D, as NumPy's)
)
shaped(
    "polyder",
    nb.polyder,
    np.polyder,
    [((5,), (), {}), ((5,), (2,), {}), ((3,), (), {"m": 0})],
    dtypes=("float32", "float64"),
)
shaped(
    "polyint",
    nb.polyint,
    lambda p, m=1, k=None: np.polyint(p, m, 0 if k is None else k).astype(p.dtype),
    [((4,), (), {}), ((3,), (2,), {"k": 1.5})],
    dtypes=("float32", "float64"),
)
_multi(
    "polydiv",
    lambda u, v: nb.polydiv(u, v + 3.0),
    lambda u, v: [
        np.polydiv(u, v + 3.0)[0],
        np.concatenate([np.zeros(len(u) - len(v) + 1), np.polydiv(u, v + 3.0)[1]])[-len(u) :],
    ],
    [([(5,), (2,)], {}), ([(6,), (3,)], {})],
    dtypes=("float32", "float64"),
    atol=1e-4,
)
shaped("poly", nb.poly, np.poly, [((3,), (), {}), ((1,), (), {})], dtypes=("float32", "float64"))
register(
    OpEntry(
        "kaiser",
        lambda b: nb.kaiser(7, b),
        lambda b: np.kaiser(7, float(b)).astype(b.dtype),
        lambda rng, dt: [Sample((np.asarray(rng.uniform(0.5, 8.0), dt),))],
        atol=1e-4,
        batchable=True,
    )
)
shaped(
    "packbits",
    nb.packbits,
    np.packbits,
    [((2, 11), (), {}), ((3, 4), (), {"axis": 0, "bitorder": "little"})],
    dtypes=("int32", "bool"),
    differentiable=False,
    out_dtype=lambda dt: "uint8",
)
shaped(
    "unpackbits",
    nb.unpackbits,
    np.unpackbits,
    [((2, 3), (), {}), ((2, 3), (), {"axis": 1, "count": -3, "bitorder": "little"})],
    dtypes=("uint8",),
    differentiable=False,
)
shaped(
    "gradient",
    nb.gradient,
    np.gradient,
    [
        ((5,), (), {}),
        ((3, 4), (0.5,), {"edge_order": 2}),
        ((3, 4), (), {"axis": 1}),
        ((4, 3), (np.array([0.0, 0.5, 1.5, 1.75]),), {"axis": 0, "edge_order": 2}),
    ],
    dtypes=("float32", "float64"),
    atol=1e-4,
)
_multi(
    "polyfit",
    lambda x, y, deg=2: nb.polyfit(nb.arange(x.shape[0], dtype=x.dtype) / 4.0 + x / 8, y, deg),
    lambda x, y, deg=2: np.polyfit(np.arange(x.shape[0]) / 4.0 + x / 8, y, deg).astype(x.dtype),
    [([(6,), (6,)], {}), ([(8,), (8, 2)], {"deg": 3})],
    dtypes=("float32", "float64"),
    atol=1e-3,
)
_multi(
    "float_power",
    lambda a, b: nb.float_power(nb.abs(a) + 0.5, b),
    lambda a, b: np.float_power(np.abs(a) + 0.5, b).astype(
        np.float64 if a.dtype == np.float64 else np.float32
    ),
    [([(2, 3), (2, 3)], {}), ([(4,), ()], {})],
    dtypes=("float32", "float64"),
)
shaped(
    "unwrap",
    lambda p, **k: nb.unwrap(p * 3.0, **k),
    lambda p, **k: np.unwrap(p * 3.0, **k),
    [((3, 6), (), {}), ((5, 2), (), {"axis": 0, "period": 4.0}), ((6,), (), {"discont": 4.0})],
    dtypes=("float32", "float64"),
)
shaped(
    "piecewise",
    lambda x: nb.piecewise(x, [x < -0.5, x > 0.5], [lambda v: v * v, lambda v: -v, 2.0]),
    lambda x: np.piecewise(x, [x < -0.5, x > 0.5], [lambda v: v * v, lambda v: -v, 2.0]),
    [((2, 5), (), {}), ((7,), (), {})],
    dtypes=("float32", "float64"),
)
register(
    OpEntry(
        "unravel_index",
        lambda i: nb.unravel_index(i, (3, 4)),
        lambda i: [a.astype(np.int32) for a in np.unravel_index(i, (3, 4))],
        lambda rng, dt: [Sample((rng.integers(0, 12, (2, 3)).astype(np.int32),))],
        dtypes=("int32",),
        differentiable=False,
    )
)
register(
    OpEntry(
        "ravel_multi_index",
        lambda r, c: nb.ravel_multi_index((r, c), (3, 4)),
        lambda r, c: np.ravel_multi_index((r, c), (3, 4)).astype(np.int32),
        lambda rng, dt: [
            Sample(
                (
                    rng.integers(0, 3, (5,)).astype(np.int32),
                    rng.integers(0, 4, (5,)).astype(np.int32),
                )
            )
        ],
        dtypes=("int32",),
        differentiable=False,
    )
)
_creation(
    "empty",
    lambda shape: nb.empty(shape),
    lambda shape: np.zeros(shape, np.float32),
    lambda rng, dt: [Sample(((2, 3),)), Sample(((),))],
    dtypes=("float32",),
)
register(OpEntry("empty_like", nb.empty_like, np.zeros_like, unary_samples(), differentiable=False))
_creation(
    "identity",
    nb.identity,
    lambda n: np.identity(n, np.float32),
    lambda rng, dt: [Sample((3,)), Sample((1,))],
    dtypes=("float32",),
)
_creation(
    "tri",
    nb.tri,
    lambda *a, **k: np.tri(*a, **k, dtype=np.float32),
    lambda rng, dt: [Sample((3,)), Sample((2, 4)), Sample((3, 3), {"k": -1})],
    dtypes=("float32",),
)
for _n in ("triu_indices", "tril_indices"):
    _creation(
        _n,
        getattr(nb, _n),
        lambda *a, f=getattr(np, _n), **k: [v.astype(np.int32) for v in f(*a, **k)],
        lambda rng, dt: [Sample((3,)), Sample((3, 1)), Sample((2, 0, 4))],
        dtypes=("int32",),
    )


# LAPACK's decompositions (ops/linalg.py; nb.linalg): well-conditioned samples
def _conditioned(rng, shape, dt):
    n = shape[-1]
    return (rng.standard_normal(shape) + n * np.eye(n)).astype(dt)


def _spd(rng, shape, dt):
    m = rng.standard_normal(shape)
    return (m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dt)


def _la_samples(rng, dt):
    return [Sample((_conditioned(rng, (3, 3), dt),)), Sample((_conditioned(rng, (2, 4, 4), dt),))]


register(
    OpEntry(
        "inv", nb.linalg.inv, np.linalg.inv, _la_samples, dtypes=("float32", "float64"), atol=1e-4
    )
)
register(
    OpEntry(
        "slogdet",
        lambda a: list(nb.linalg.slogdet(a)),
        lambda a: [np.asarray(v, a.dtype) for v in np.linalg.slogdet(a)],
        _la_samples,
        dtypes=("float32", "float64"),
        atol=1e-4,
    )
)
register(
    OpEntry(
        "det", nb.linalg.det, np.linalg.det, _la_samples, dtypes=("float32", "float64"), rtol=1e-4
    )
)
register(
    OpEntry(
        "solve",
        nb.linalg.solve,
        np.linalg.solve,  # (NumPy 2's rule: b a vector only when 1-D, as JAX's)
        lambda rng, dt: [
            Sample((_conditioned(rng, (3, 3), dt), _vals(rng, (3, 2), dt))),
            Sample((_conditioned(rng, (2, 3, 3), dt), _vals(rng, (3,), dt))),
            Sample((_conditioned(rng, (2, 3, 3), dt), _vals(rng, (3, 3), dt))),
        ],
        dtypes=("float32", "float64"),
        atol=1e-4,
    )
)
register(
    OpEntry(
        "cholesky",
        nb.linalg.cholesky,
        lambda a: np.linalg.cholesky((a + np.swapaxes(a, -1, -2)) / 2),
        lambda rng, dt: [Sample((_spd(rng, (3, 3), dt),)), Sample((_spd(rng, (2, 4, 4), dt),))],
        dtypes=("float32", "float64"),
        atol=1e-4,
    )
)


def _symmetric(rng, shape, dt):
    m = rng.standard_normal(shape)
    return (m + np.swapaxes(m, -1, -2)).astype(dt)


def _np_eigh(a):
    w, v = np.linalg.eigh((a + np.swapaxes(a, -1, -2)) / 2)
    return [w, v]


register(
    OpEntry(
        "eigh",
        lambda a: list(nb.linalg.eigh(a)),
        _np_eigh,
        lambda rng, dt: [
            Sample((_symmetric(rng, (3, 3), dt),)),
            Sample((_symmetric(rng, (2, 4, 4), dt),)),
        ],
        dtypes=("float32", "float64"),
        atol=1e-4,
    )
)
register(
    OpEntry(
        "eigvalsh",
        nb.linalg.eigvalsh,
        lambda a: _np_eigh(a)[0],
        lambda rng, dt: [Sample((_symmetric(rng, (2, 3, 3), dt),))],
        dtypes=("float32", "float64"),
        atol=1e-4,
    )
)


def _svd_samples(rng, dt):
    return [
        Sample((_vals(rng, (4, 3), dt),), {"full_matrices": False}),
        Sample((_vals(rng, (2, 3, 5), dt),), {"full_matrices": False}),
        Sample((_vals(rng, (3, 3), dt),), {"full_matrices": True}),
    ]


register(
    OpEntry(
        "svd",
        lambda a, **k: list(nb.linalg.svd(a, **k)),
        lambda a, **k: list(np.linalg.svd(a, **k)),
        _svd_samples,
        atol=1e-4,
    )
)
register(
    OpEntry(
        "qr",
        lambda a, **k: list(nb.linalg.qr(a, **k)),
        lambda a, **k: list(np.linalg.qr(a, **k)),
        lambda rng, dt: [
            Sample((_vals(rng, (4, 3), dt),)),
            Sample((_vals(rng, (2, 3, 5), dt),)),
            Sample((_conditioned(rng, (3, 3), dt),), {"mode": "complete"}),
        ],
        atol=1e-4,
    )
)
register(
    OpEntry(
        "pinv",
        nb.linalg.pinv,
        np.linalg.pinv,  # (NumPy's cutoff is lower than JAX's; these matrices are well apart)
        lambda rng, dt: [Sample((_vals(rng, (4, 3), dt),)), Sample((_vals(rng, (2, 3, 5), dt),))],
        atol=1e-4,
    )
)

# random draws: checked by tests/ops/test_random.py (statistics, reproducibility, vmap)
for _n in ("uniform", "normal", "gaussian", "bernoulli", "randint", "randn_like", "rand_like",
           "randint_like", "randperm", "multinomial"):  # fmt: skip
    register(OpEntry(_n, getattr(nb, _n), None, None, differentiable=False, batchable=False))


def entries_with_ref():
    return [e for e in REGISTRY.values() if e.ref is not None]


# more of jnp (ops/array_functions.py): composites, each checked against NumPy
def _divisors(rng, dt):
    a = rng.uniform(-5, 5, (2, 3)).astype(dt)
    b = (rng.uniform(0.5, 3, (2, 3)) * rng.choice([-1, 1], (2, 3))).astype(dt)
    return [Sample((a, b)), Sample((a, b[0]))]


register(OpEntry("divmod", nb.divmod, np.divmod, _divisors, differentiable=False))
register(
    OpEntry(
        "modf",
        nb.modf,
        lambda x: list(np.modf(x)),
        lambda rng, dt: [Sample((np.array([1.5, -2.25, 0.0, 3.0, -0.5], dt),))],
        differentiable=False,
    )
)
_creation(
    "logspace",
    nb.logspace,
    lambda *a, **k: np.logspace(*a, **k).astype(np.float32),
    lambda rng, dt: [
        Sample((0.0, 2.0, 5)),
        Sample((1.0, -1.0, 4), {"endpoint": False, "base": 2.0}),
    ],
    dtypes=("float32",),
)
_creation(
    "geomspace",
    nb.geomspace,
    lambda *a, **k: np.geomspace(*a, **k).astype(np.float32),
    lambda rng, dt: [Sample((1.0, 1000.0, 4)), Sample((-2.0, -32.0, 5), {"endpoint": False})],
    dtypes=("float32",),
)
_multi(
    "append",
    nb.append,
    np.append,
    [([(2, 3), (4,)], {}), ([(2, 3), (1, 3)], {"axis": 0})],
)
shaped("hsplit", nb.hsplit, np.hsplit, [((2, 4), (2,), {}), ((3, 5), ([1, 3],), {})])
shaped("vsplit", nb.vsplit, np.vsplit, [((4, 2), (2,), {}), ((5, 3), ([2],), {})])
shaped("dsplit", nb.dsplit, np.dsplit, [((2, 1, 4), (2,), {}), ((1, 2, 5), ([1, 4],), {})])
for _n in ("nanargmax", "nanargmin"):
    shaped(
        _n,
        getattr(nb, _n),
        lambda x, f=getattr(np, _n), **k: f(x, **k),
        [((2, 3), (), {}), ((3, 4), (), {"axis": 1}), ((3, 4), (), {"axis": 0, "keepdims": True})],
        dtypes=("float32",),
        differentiable=False,
        out_dtype=lambda dt: "int64",
    )
for _n, _f in (("cumulative_sum", np.cumsum), ("cumulative_prod", np.cumprod)):
    shaped(
        _n,
        getattr(nb, _n),
        lambda x, axis=None, include_initial=False, f=_f, n=_n: np.concatenate(
            (
                [np.full_like(np.take(x, [0], axis or 0), n == "cumulative_prod")]
                if include_initial
                else []
            )
            + [f(x, axis=axis or 0)],
            axis or 0,
        ),
        [
            ((5,), (), {}),
            ((3, 4), (), {"axis": 1}),
            ((3, 4), (), {"axis": 0, "include_initial": True}),
        ],
        dtypes=("float32", "int32"),
    )
for _n in ("nancumsum", "nancumprod"):
    shaped(
        _n,
        getattr(nb, _n),
        lambda x, f=getattr(np, _n), **k: f(x, **k),
        [((2, 3), (), {}), ((3, 4), (), {"axis": 1})],
        dtypes=("float32",),
    )
shaped("diagflat", nb.diagflat, np.diagflat, [((2, 2), (), {}), ((3,), (-1,), {})])
_creation(
    "diag_indices",
    nb.diag_indices,
    lambda *a: [v.astype(np.int32) for v in np.diag_indices(*a)],
    lambda rng, dt: [Sample((3,)), Sample((2, 3))],
    dtypes=("int32",),
)
for _n in ("diag_indices_from", "tril_indices_from", "triu_indices_from"):
    shaped(
        _n,
        getattr(nb, _n),
        lambda x, *a, f=getattr(np, _n): [v.astype(np.int32) for v in f(x, *a)],
        [((3, 3), (), {})] + ([((3, 4), (1,), {})] if _n != "diag_indices_from" else []),
        differentiable=False,
        out_dtype=lambda dt: "int32",
    )
_multi(
    "vecdot",
    nb.vecdot,
    lambda a, b, axis=-1: np.sum(a * b, axis=axis),
    [([(2, 3), (2, 3)], {}), ([(3, 4), (4,)], {}), ([(3, 2), (3, 2)], {"axis": 0})],
)
shaped(
    "rollaxis",
    nb.rollaxis,
    np.rollaxis,
    [((2, 3, 4), (2,), {}), ((2, 3, 4), (0,), {"start": 2}), ((2, 3, 4), (1,), {"start": 3})],
)
shaped(
    "unstack",
    nb.unstack,
    lambda x, axis=0: [np.take(x, i, axis) for i in range(x.shape[axis])],
    [((3, 2), (), {}), ((2, 3), (), {"axis": 1})],
)
shaped(
    "ediff1d",
    nb.ediff1d,
    lambda x, to_end=None, to_begin=None: np.ediff1d(x, to_end, to_begin).astype(x.dtype),
    [((5,), (), {}), ((2, 3), (), {"to_end": [1, 2], "to_begin": 0})],
)
shaped(
    "vander",
    nb.vander,
    np.vander,
    [((3,), (), {}), ((4,), (2,), {}), ((3,), (), {"N": 4, "increasing": True})],
)
shaped(
    "flatnonzero",
    lambda x, **k: nb.flatnonzero(x > 0, **k),
    lambda x, size=None, fill_value=None: _np_nonzero((x > 0).ravel(), size, fill_value)[0],
    [((2, 3), (), {}), ((3, 4), (), {"size": 8, "fill_value": -1})],
    differentiable=False,
    batchable=False,  # (the count is the values')
    out_dtype=lambda dt: "int64",
)
register(
    OpEntry(
        "interp",
        lambda x, fp: nb.interp(x, np.array([-1.0, 0.0, 0.5, 2.0], np.float32), fp),
        lambda x, fp: np.interp(x, np.array([-1.0, 0.0, 0.5, 2.0]), fp).astype(x.dtype),
        lambda rng, dt: [
            Sample(
                (
                    _away(rng.uniform(-2, 3, (2, 5)), (-1.0, 0.0, 0.5, 2.0)).astype(dt),
                    rng.standard_normal(4).astype(dt),
                )
            ),
        ],
        dtypes=("float32",),
    )
)
_creation(
    "indices",
    nb.indices,
    lambda dims, sparse=False: (
        np.indices(dims, np.int32, sparse=True) if sparse else np.indices(dims, np.int32)
    ),
    lambda rng, dt: [Sample(((2, 3),)), Sample(((3, 1, 2),), {"sparse": True})],
    dtypes=("int32",),
)
_creation(
    "ix_",
    nb.ix_,
    lambda *a: [v.astype(np.int32) for v in np.ix_(*a)],
    lambda rng, dt: [Sample((np.array([0, 2], np.int32), np.array([1, 0, 3], np.int32)))],
    dtypes=("int32",),
)
unary("copy", np.copy)


def _np_unique_sized(x, size=None, **k):
    """NumPy's ``unique`` cut or padded to ``size`` as JAX's: values with the smallest,
    first indices with the smallest's, counts with 0."""
    got = np.unique(x, **k)
    got = list(got) if isinstance(got, tuple) else [got]
    if size is not None:
        pads = [got[0][0], *([got[1][0]] if k.get("return_index") else [])]
        if k.get("return_inverse"):
            pads.append(None)
        if k.get("return_counts"):
            pads.append(0)
        got = [
            g
            if p is None
            else np.concatenate([g[:size], np.full(max(size - len(g), 0), p, g.dtype)])
            for g, p in zip(got, pads, strict=True)
        ]
    got = [g.astype(np.int64) if g.dtype.kind in "iu" and i else g for i, g in enumerate(got)]
    return got[0] if len(got) == 1 else got


register(
    OpEntry(
        "unique",
        nb.unique,
        _np_unique_sized,
        lambda rng, dt: [
            Sample((rng.integers(0, 4, (2, 5)).astype(dt),)),
            Sample(
                (rng.integers(0, 4, 7).astype(dt),),
                {"return_index": True, "return_inverse": True, "return_counts": True},
            ),
            Sample(
                (rng.integers(0, 9, 6).astype(dt),),
                {"size": 8, "return_index": True, "return_counts": True},
            ),
        ],
        dtypes=("float32", "int32"),
        differentiable=False,
        batchable=False,  # (the number of values is theirs, unless sized)
        out_dtype=lambda dt: None,  # (values of the input's dtype, indices and counts int64)
    )
)
_multi(
    "histogram",
    lambda a, w, **k: nb.histogram(a, weights=w, **k),
    lambda a, w, **k: [v.astype(np.float32) for v in np.histogram(a, weights=w, **k)],
    [
        ([(12,), (12,)], {"bins": 4}),
        ([(3, 4), (3, 4)], {"bins": 3, "range": (-1.0, 1.0), "density": True}),
    ],
    dtypes=("float32",),
    differentiable=False,
    batchable=False,
)
_multi(
    "histogram2d",
    lambda x, y, w, **k: nb.histogram2d(x, y, weights=w, **k),
    lambda x, y, w, **k: [v.astype(np.float32) for v in np.histogram2d(x, y, weights=w, **k)],
    [
        ([(12,), (12,), (12,)], {"bins": (3, 2)}),
        ([(9,), (9,), (9,)], {"bins": 2, "range": [(-1.0, 1.0), (-2.0, 2.0)], "density": True}),
    ],
    dtypes=("float32",),
    differentiable=False,
    batchable=False,  # (as histogram's)
)
register(
    OpEntry(
        "histogramdd",
        lambda s, **k: (lambda h: [h[0], *h[1]])(nb.histogramdd(s, **k)),
        lambda s, **k: [
            v.astype(np.float32) for v in (lambda h: [h[0], *h[1]])(np.histogramdd(s, **k))
        ],
        lambda rng, dt: [
            Sample((_vals(rng, (10, 3), dt),), {"bins": (2, 3, 2)}),
            Sample((_vals(rng, (8, 2), dt),), {"bins": 3, "density": True}),
        ],
        dtypes=("float32",),
        differentiable=False,
        batchable=False,
    )
)
shaped(
    "histogram_bin_edges",
    nb.histogram_bin_edges,
    lambda a, **k: np.histogram_bin_edges(a, **k).astype(np.float32),
    [((9,), (), {"bins": 3}), ((2, 5), (), {"bins": 4, "range": (-2.0, 2.0)})],
    dtypes=("float32",),
    differentiable=False,
    batchable=False,
)
for _n in ("convolve", "correlate"):
    _multi(
        _n,
        getattr(nb, _n),
        getattr(np, _n),
        [([(5,), (3,)], {}), ([(3,), (6,)], {"mode": "same"}), ([(4,), (4,)], {"mode": "full"})],
        dtypes=("float32", "float64"),
        batchable=False,  # (1-D only, as NumPy's)
    )
shaped(
    "delete",
    nb.delete,
    np.delete,
    [((6,), ([0, 3],), {}), ((2, 3), (1,), {"axis": 1}), ((3, 4), (slice(1, 3),), {"axis": 0})],
)
shaped(
    "insert",
    nb.insert,
    np.insert,
    [
        ((5,), (2, [7.0, 8.0]), {}),
        ((2, 3), ([0, 2], [7.0, 8.0]), {"axis": 1}),
        ((2, 3), (1, 9.0), {"axis": 0}),
    ],
)
register(
    OpEntry(
        "block",
        lambda a, b, c, d: nb.block([[a, b], [c, d]]),
        lambda a, b, c, d: np.block([[a, b], [c, d]]),
        lambda rng, dt: [
            Sample(tuple(_vals(rng, s, dt) for s in ((2, 2), (2, 1), (1, 2), (1, 1))))
        ],
        dtypes=("float32", "int32"),
    )
)
for _n in ("partition", "argpartition"):
    shaped(
        _n,
        getattr(nb, _n),
        lambda x, kth, axis=-1, n=_n: _jax_partition(x, kth, axis, n == "argpartition"),
        [((7,), (2,), {}), ((3, 5), (1,), {"axis": 0}), ((2, 6), (-2,), {})],
        dtypes=("float32",),
        differentiable=_n == "partition",
        out_dtype=(lambda dt: "int64") if _n == "argpartition" else None,
    )


def _jax_partition(x, kth, axis, indices):
    """JAX's ``partition`` order: the ``kth + 1`` smallest ascending, then the rest
    descending (``argpartition``: the rest in index order)."""
    n = x.shape[axis]
    k = kth + n if kth < 0 else kth
    order = np.argsort(x, axis=axis, kind="stable")
    if not indices:
        s = np.sort(x, axis=axis)
        return np.concatenate(
            [np.take(s, range(k + 1), axis), np.flip(np.take(s, range(k + 1, n), axis), axis)], axis
        )
    low = np.take(order, range(k + 1), axis)
    rest = np.sort(np.take(order, range(k + 1, n), axis), axis=axis)
    return np.concatenate([low, rest], axis).astype(np.int64)


register(
    OpEntry(
        "lexsort",
        lambda a, b: nb.lexsort((a, b)),
        lambda a, b: np.lexsort((a, b)).astype(np.int64),
        lambda rng, dt: [
            Sample((rng.integers(0, 3, 8).astype(dt), rng.integers(0, 3, 8).astype(dt)))
        ],
        dtypes=("int32", "float32"),
        differentiable=False,
        out_dtype=lambda dt: "int64",
    )
)
register(
    OpEntry(
        "choose",
        lambda i, a, b, **k: nb.choose(i, [a, b], **k),
        lambda i, a, b, mode="raise": np.choose(i, [a, b], mode=mode),
        lambda rng, dt: [
            Sample((rng.integers(0, 2, (2, 3)), _vals(rng, (2, 3), dt), _vals(rng, (3,), dt))),
            Sample(
                (rng.integers(-2, 4, (4,)), _vals(rng, (4,), dt), _vals(rng, (4,), dt)),
                {"mode": "wrap"},
            ),
            Sample(
                (rng.integers(-2, 4, (4,)), _vals(rng, (4,), dt), _vals(rng, (4,), dt)),
                {"mode": "clip"},
            ),
        ],
        dtypes=("float32", "int32"),
    )
)
register(
    OpEntry(
        "compress",
        lambda c, a, **k: nb.compress(c > 0, a, **k),
        lambda c, a, axis=None, size=None, fill_value=0: _np_compressed(
            c > 0, a, axis, size, fill_value
        ),
        lambda rng, dt: [
            Sample((_vals(rng, (3,), dt), _vals(rng, (3, 2), dt)), {"axis": 0}),
            Sample((_vals(rng, (5,), dt), _vals(rng, (2, 4), dt))),
            Sample(
                (_vals(rng, (4,), dt), _vals(rng, (2, 4), dt)),
                {"axis": 1, "size": 4, "fill_value": 7},
            ),
        ],
        dtypes=("float32",),
        differentiable=False,  # (a gather: the registry's gradient suites batch it too)
        batchable=False,  # (the count is the values')
    )
)


def _np_compressed(c, a, axis, size, fill):
    got = np.compress(c, a, axis)
    if size is None:
        return got
    ax = 0 if axis is None else axis
    pad = [(0, 0)] * got.ndim
    pad[ax] = (0, max(size - got.shape[ax], 0))
    return np.take(np.pad(got, pad, constant_values=fill), range(size), ax)


register(
    OpEntry(
        "extract",
        lambda c, a, **k: nb.extract(c > 0, a, **k),
        lambda c, a, size=None, fill_value=0: _np_compressed(
            np.ravel(c > 0), np.ravel(a), None, size, fill_value
        ),
        lambda rng, dt: [
            Sample((_vals(rng, (2, 3), dt), _vals(rng, (2, 3), dt))),
            Sample((_vals(rng, (5,), dt), _vals(rng, (5,), dt)), {"size": 6}),
        ],
        dtypes=("float32",),
        differentiable=False,
        batchable=False,
    )
)
_multi(
    "matvec",
    nb.matvec,
    lambda a, b: np.einsum("...mn,...n->...m", a, b),
    [([(2, 3, 4), (4,)], {}), ([(5, 3, 2), (5, 2)], {})],
)
_multi(
    "vecmat",
    nb.vecmat,
    lambda a, b: np.einsum("...n,...nm->...m", a, b),
    [([(3,), (2, 3, 4)], {}), ([(5, 2), (5, 2, 3)], {})],
)
shaped(
    "resize",
    nb.resize,
    np.resize,
    [((3,), ((2, 4),), {}), ((2, 3), (4,), {}), ((2, 2), ((3, 1),), {})],
)
register(
    OpEntry(
        "trim_zeros",
        nb.trim_zeros,
        np.trim_zeros,
        lambda rng, dt: [
            Sample((np.array([0, 0, 1, 2, 0, 3, 0], dt),)),
            Sample((np.array([0, 1, 0], dt),), {"trim": "f"}),
            Sample((np.array([0, 0], dt),), {"trim": "b"}),
        ],
        dtypes=("float32", "int32"),
        differentiable=False,
        batchable=False,
    )
)
register(
    OpEntry(
        "put",
        lambda a, v, **k: nb.put(a, np.array([0, 7, -1, 2]), v, inplace=False, **k),
        lambda a, v, mode=None: _np_put(a, np.array([0, 7, -1, 2]), v, mode),
        lambda rng, dt: [
            Sample((_vals(rng, (2, 3), dt), _vals(rng, (4,), dt))),
            Sample((_vals(rng, (2, 3), dt), _vals(rng, (2,), dt)), {"mode": "clip"}),
            Sample((_vals(rng, (6,), dt), _vals(rng, (4,), dt)), {"mode": "wrap"}),
        ],
        dtypes=("float32", "int32"),
        differentiable=False,
    )
)


def _np_put(a, ind, v, mode):
    """NumPy's ``put`` on a copy, an index out of range dropped for ``mode=None`` (JAX's)."""
    out = a.copy()
    if mode is None:
        keep = (ind >= -a.size) & (ind < a.size)
        v = np.resize(v, ind.shape)[keep]
        ind = ind[keep]
    np.put(out, ind, v, mode=mode or "raise")
    return out


register(
    OpEntry(
        "put_along_axis",
        lambda a, v: nb.put_along_axis(a, np.array([[0], [2]]), v, axis=1, inplace=False),
        lambda a, v: _np_put_along(a, np.array([[0], [2]]), v, 1),
        lambda rng, dt: [Sample((_vals(rng, (2, 3), dt), _vals(rng, (2, 1), dt)))],
        dtypes=("float32", "int32"),
    )
)


def _np_put_along(a, ind, v, axis):
    out = a.copy()
    np.put_along_axis(out, ind, v, axis)
    return out


register(
    OpEntry(
        "fill_diagonal",
        lambda a, v: nb.fill_diagonal(a, v, inplace=False),
        lambda a, v: _np_fill_diagonal(a, v),
        lambda rng, dt: [
            Sample((_vals(rng, (3, 4), dt), _vals(rng, (3,), dt))),
            Sample((_vals(rng, (3, 3, 3), dt), _vals(rng, (), dt))),
        ],
        dtypes=("float32", "int32"),
    )
)


def _np_fill_diagonal(a, v):
    out = a.copy()
    np.fill_diagonal(out, v)
    return out
