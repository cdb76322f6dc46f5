"""Random numbers: explicit keys (reproducible) and a seeded global generator (fresh draws).

A key is an int64 tensor of shape ``(2,)`` holding two 32-bit words. Draws are *host ops*:
the evaluator runs them with NumPy's counter-based Philox generator before the rest of the
graph (on any backend), so values are the same on NumPy and MAX and a draw is never baked
into a compiled graph as a constant. Under ``vmap`` a batched key gives one independent draw
per batch element, and global-generator draws inside ``vmap`` are independent per element.
"""

from __future__ import annotations

import math
import numbers
import threading

import ml_dtypes
import numpy as np

from ..core.device import get_default_device
from ..core.dtypes import DType, get_default_dtype, to_dtype
from ..core.state import STATE, Drawn, Replay, level_sizes
from ..runtime.tensor import Tensor
from . import batching
from ._util import alias_arg, as_tensor, norm_axis, norm_shape, readable_now
from .base import Operation
from .functions import fn

__all__ = [
    "key",
    "split",
    "fold_in",
    "uniform",
    "normal",
    "gaussian",
    "bernoulli",
    "randint",
    "permutation",
    "categorical",
    "gumbel",
    "exponential",
    "laplace",
    "logistic",
    "cauchy",
    "lognormal",
    "rademacher",
    "truncated_normal",
    "choice",
    "seed",
    "manual_seed",
    "get_rng_state",
    "set_rng_state",
    "randn",
    "rand",
    "randn_like",
    "rand_like",
    "randint_like",
    "randperm",
    "multinomial",
    "PRNGKey",
]

_MASK = 0xFFFFFFFF


class _RandomOp(Operation):
    host_only = True
    # random draws run on the host from whole keys: operands are gathered to whole values first
    runs_sharded = False
    differentiable = False

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [None] * len(primals)

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [None] * len(outputs)

    def _check_key(self, shapes):
        if tuple(shapes[0]) != (2,):
            raise ValueError(f"{self.name}: a key has shape (2,), got {shapes[0]}")


class SplitOp(_RandomOp):
    name = "random_split"

    def infer(self, shapes, dtypes, kwargs):
        self._check_key(shapes)
        return [(kwargs["num"], 2)], [DType.int64]


class DrawOp(_RandomOp):
    """``random_uniform`` / ``random_normal`` / ``random_randint`` / ``random_fold_in``."""

    def __init__(self, name):
        self.name = name
        super().__init__()

    def infer(self, shapes, dtypes, kwargs):
        self._check_key(shapes)
        return [kwargs["shape"]], [kwargs["dtype"]]


class FoldInOp(_RandomOp):
    """``random_fold_in``: inputs ``(key, data)``; ``data`` is an integer scalar tensor, so
    it may be traced or batched (``vmap(lambda i: fold_in(k, i))(nb.arange(3))``)."""

    name = "random_fold_in"
    arity = 2

    def infer(self, shapes, dtypes, kwargs):
        self._check_key(shapes)
        if tuple(shapes[1]) != () or not dtypes[1].is_int or dtypes[1].is_bool:
            raise TypeError(
                f"random.fold_in: data must be an integer scalar, got {dtypes[1].value} of "
                f"shape {tuple(shapes[1])}"
            )
        return [(2,)], [DType.int64]


_split = SplitOp()
_uniform = DrawOp("random_uniform")
_normal = DrawOp("random_normal")
_randint = DrawOp("random_randint")
_fold = FoldInOp()


def _as_key(k, op: str) -> Tensor:
    if not isinstance(k, Tensor):
        raise TypeError(f"{op}: expected a key made by nb.random.key, got {type(k).__name__}")
    if k.shape != (2,) or not k.dtype.is_int:
        raise ValueError(
            f"{op}: a key is an int64 tensor of shape (2,) (nb.random.key), got "
            f"{k.dtype.value} of shape {k.shape}"
        )
    return k


def key(seed: int) -> Tensor:
    """A key for reproducible random draws: ``k = nb.random.key(0)``.

    Raises:
        TypeError: for a seed that is not an integer (a float is not rounded, as in JAX).
        OverflowError: for a seed outside ``[-2**63, 2**64)``, which would wrap.
    """
    if isinstance(seed, Tensor):
        if seed.shape != () or not (seed.dtype.is_int or seed.dtype.is_bool):
            raise TypeError(
                f"random.key: the seed must be an integer scalar, got a {seed.dtype.value} "
                f"tensor of shape {seed.shape}"
            )
        if seed._impl.levels or seed._impl.buffer is None:
            # computed, traced or batched (``vmap(nb.random.key)(seeds)``, as JAX's): the
            # same two words, by ops on the seed's 64 bits
            s64 = seed.cast(DType.int64)
            hi = fn.bitwise_and(fn.right_shift(s64, 32), _MASK)
            return fn.stack([hi, fn.bitwise_and(s64, _MASK)])
        seed = seed.item()
    if not isinstance(seed, numbers.Integral):
        raise TypeError(f"random.key: the seed must be an integer, got {seed!r}")
    seed = int(seed)
    if not -(1 << 63) <= seed < 1 << 64:
        raise OverflowError(f"random.key: the seed {seed} is outside [-2**63, 2**64)")
    words = np.array([(seed >> 32) & _MASK, seed & _MASK], dtype=np.int64)

    return fn.constant(words)


PRNGKey = key


def split(key, num=2) -> Tensor:
    """``num`` new independent keys from ``key``, stacked: shape ``(num, 2)``; ``num`` may
    be a shape (``split(k, (2, 3))`` has shape ``(2, 3, 2)``), as in JAX."""
    k = key
    if isinstance(num, tuple | list):
        shape = norm_shape("random.split", tuple(num))
        keys = _split.bind(
            [_as_key(k, "random.split")], {"num": int(np.prod(shape, dtype=np.int64))}
        )
        return keys.reshape(shape + (2,))
    if not isinstance(num, numbers.Integral) or isinstance(num, bool) or num < 0:
        raise ValueError(f"random.split: num must be a non-negative int or a shape, got {num!r}")
    return _split.bind([_as_key(k, "random.split")], {"num": int(num)})


def fold_in(key, data) -> Tensor:
    """A new key derived from ``key`` and an integer ``data``: a Python int (taken modulo
    2**64) or an integer scalar tensor (traced by ``compile``, batched by ``vmap``, as in
    JAX).

    Raises:
        TypeError: for data that is not an integer (a float was truncated: 1.5 gave the
            key of 1).
    """
    if isinstance(data, Tensor):
        if not data.dtype.is_int:
            raise TypeError(
                f"random.fold_in: data must be an integer, got a {data.dtype.value} tensor "
                f"of shape {data.shape}"
            )
        d = data if data.dtype is DType.int64 else data.cast(DType.int64)
    else:
        if isinstance(data, bool | np.bool_) or not isinstance(data, numbers.Integral):
            raise TypeError(
                f"random.fold_in: data must be an integer, got {data!r} ({type(data).__name__})"
            )
        v = int(data) % (1 << 64)
        d = fn.constant(np.asarray(v - (1 << 64) if v >= 1 << 63 else v, dtype=np.int64))
    return _fold.bind([_as_key(key, "random.fold_in"), d], {})


# ----------------------------------------------------------------------------- global state
class _Global:
    """The global generator: one per process, shared by its threads (as PyTorch's), so
    ``seed`` makes every thread's draws reproducible; a draw takes the next counter under
    a lock, so no two draws share a stream."""

    def __init__(self):
        self.seed = np.random.SeedSequence().entropy & ((1 << 63) - 1)
        self.counter = 0
        self.lock = threading.Lock()


_GLOBAL = _Global()


def seed(s: int) -> None:
    """Seed the global generator used by shape-only calls (``nb.uniform((3,))``): one per
    process, shared by its threads, as PyTorch's.

    Any int: a negative one or one of 63 bits or more is taken modulo ``2**63`` (the
    state, ``get_rng_state``, is an int64).

    Raises:
        TypeError: for a seed that is not an int.
    """
    _reseed(s, "seed")


def _reseed(s, op: str) -> None:
    """The global generator started again from seed ``s`` (``op`` names a bad seed)."""
    s = _seed_int(s, op)
    with _GLOBAL.lock:
        _GLOBAL.seed, _GLOBAL.counter = s, 0


def _seed_int(s, op: str) -> int:
    if isinstance(s, bool) or not isinstance(s, numbers.Integral):
        raise TypeError(f"{op}: the seed must be an int, got {s!r} ({type(s).__name__})")
    return int(s) % (1 << 63)


def next_key_words() -> np.ndarray:
    with _GLOBAL.lock:
        _GLOBAL.counter = counter = _GLOBAL.counter + 1
        s = _GLOBAL.seed
    ss = np.random.SeedSequence([s & _MASK, s >> 32, counter])
    return ss.generate_state(2, np.uint32).astype(np.int64)


def drawing_levels() -> list:
    """The vmap levels a global draw is independent along: the active ones, but those of
    ``jacfwd``'s basis (its tangents belong to one evaluation)."""
    return [lv for lv in STATE.active_vmap if lv not in STATE.shared_draw_levels]


def global_key(batched: bool = True) -> Tensor:
    """A fresh key from the global generator, recorded as one by an enclosing ``compile``
    (which feeds a fresh key on every call). ``batched``: inside vmap, one independent key
    per element of every level of ``drawing_levels()``."""

    replay = STATE.key_replay
    if replay is not None and replay.drawn:  # a re-run (checkpoint, 1F1B) draws again
        drawn = _redrawn(replay.drawn.pop(0), replay)
    else:
        base = fn.constant(next_key_words())
        if STATE.recording_rng is not None:
            STATE.recording_rng.append(base._impl)  # compile feeds a fresh key on every call
        levels = tuple(drawing_levels()) if batched else ()
        drawn = Drawn(base, _per_lane(base, levels), levels)
    # logged as drawn (one key per lane): a re-run outside the vmap or on another device's
    # schedule (the derivative of ``vmap(checkpoint(f))``, a 1F1B backward) draws the same;
    # a replayed draw is logged again (a checkpoint inside a re-run keeps it for its own)
    if STATE.key_log is not None:
        STATE.key_log.append(drawn)
    return drawn.key


def _per_lane(base: Tensor, levels: tuple) -> Tensor:
    """``base`` split into one independent key per lane of ``levels`` (outer first)."""
    if not levels:
        return base
    sizes = [level_sizes[lv] for lv in levels]
    keys = split(base, int(np.prod(sizes))).reshape(tuple(sizes) + (2,))
    for lv in levels:
        keys = batching.to_batch(keys, 0, lv)
    return keys


def _redrawn(drawn: Drawn, replay: Replay) -> Drawn:
    """A logged draw for its re-run: as drawn, when its levels are still the ones around
    (the forward's outer vmaps, a device's); split again from its base over the re-run's
    own vmaps where the forward's were its own (``checkpoint(vmap(dropout))``: those levels
    are gone, the re-run made new ones of the same sizes, in the same order)."""
    inner = [lv for lv in drawn.levels if lv > replay.since]
    if not inner:
        return drawn
    fresh = [lv for lv in drawing_levels() if lv > replay.now]
    if [level_sizes[lv] for lv in fresh] != [level_sizes[lv] for lv in inner]:
        raise RuntimeError(  # (a re-run that vmaps differently from its forward)
            "a re-run (checkpoint) draws a random key inside vmaps other than its forward's "
            f"(sizes {[level_sizes[lv] for lv in fresh]}, forward "
            f"{[level_sizes[lv] for lv in inner]}); draw from a key passed in instead"
        )
    new = dict(zip(inner, fresh, strict=True))
    levels = tuple(new.get(lv, lv) for lv in drawn.levels)
    return Drawn(drawn.base, _per_lane(drawn.base, levels), levels)


def _draw(op, k, shape, dtype, extra=None):
    shape = norm_shape(op.name, shape)
    kwargs = {"shape": shape, "dtype": dtype}
    if extra:
        kwargs.update(extra)
    return op.bind([k], kwargs)


def _split_args(key_or_shape, shape, params, op: str):
    """``(key, shape, params)`` of a draw called either way:

    - ``f(key, shape, *params)``: reproducible, from the key;
    - ``f(shape, *params)``: from the global generator. The positional slot named ``shape``
      then holds the first parameter, so the parameters shift back by one.
    """
    if isinstance(key_or_shape, Tensor):
        return _as_key(key_or_shape, op), (() if shape is None else shape), params
    if not isinstance(key_or_shape, tuple | list | numbers.Integral | type(None)):
        raise TypeError(
            f"{op}: expected a key made by nb.random.key or a shape as the first argument, got "
            f"{type(key_or_shape).__name__}"
        )
    if isinstance(shape, numbers.Number):
        params = (shape, *params[:-1])
        if params[-1] is not None:
            raise TypeError("too many positional parameters after the shape")
    elif shape is not None:
        if key_or_shape not in ((), None):
            raise TypeError("pass either a key and a shape, or only a shape")
        return global_key(), shape, params  # (``normal(shape=(3,))``)
    return global_key(), (() if key_or_shape is None else key_or_shape), params


def _dtype_like(v) -> bool:
    """A dtype where JAX's draws take one positionally (``uniform(key, shape, dtype)``; a
    dtype's name too, ``"float16"``: no bound is a string)."""
    return isinstance(v, DType | np.dtype | str) or (isinstance(v, type) and v is not bool)


def _one_dtype(op, dtype, positional):
    if dtype is not None:
        raise TypeError(f"{op}: dtype given twice (positionally and as dtype=)")
    return positional


class _DefaultFloat(float):
    """A parameter default that reads as its value (``inspect.signature`` shows 0.0) but is
    told apart from the same number passed: the key form shifts the positional slots."""


_ZERO, _ONE = _DefaultFloat(0.0), _DefaultFloat(1.0)


def _given(value, default):
    return None if value is default else value


def _is_default(value, default) -> bool:
    """A Python number equal to the default: the affine step is skipped. A tensor always
    takes it, so the draw differentiates and batches with respect to it."""
    return isinstance(value, numbers.Number) and value == default


def _float_dtype(name, dtype):
    dtype = to_dtype(dtype, name) if dtype is not None else get_default_dtype()
    if not dtype.is_float:
        raise ValueError(f"{name}: dtype must be a float dtype, got {dtype.value}")
    return dtype


def _check_broadcast(name, shape, params):
    """Parameters must broadcast to the draw's shape (the result keeps ``shape``)."""
    shape = tuple(shape)
    shapes = {k: tuple(np.shape(v)) for k, v in params.items()}
    try:
        ok = np.broadcast_shapes(shape, *shapes.values()) == shape
    except ValueError:
        ok = False
    if not ok:
        given = ", ".join(f"{k} of shape {s}" for k, s in shapes.items())
        raise ValueError(f"{name}: {given} do not broadcast to the shape {shape}")


def _affine(name, z, scale, shift, params):
    """``z * scale + shift`` (each skipped at its default), keeping the draw's shape."""
    _check_broadcast(name, z.shape, params)
    if not _is_default(scale, 1.0):
        z = z * scale
    if not _is_default(shift, 0.0):
        z = z + shift
    return z


def uniform(
    key_or_shape=(),
    shape=None,
    low=None,
    high=None,
    jax_maxval=None,
    *,
    dtype=None,
    device=None,
    minval=None,
    maxval=None,
    key=None,
):
    """Uniform floats in ``[low, high)``.

    Call as ``uniform(key, shape, low, high)`` (reproducible) or ``uniform(shape, low, high)``
    (global generator, fresh on every call); JAX's ``uniform(key, shape, dtype, minval,
    maxval)`` too.

    Args:
        key_or_shape: a key (from :func:`nabla.random.key`), or the shape (int or tuple).
        shape: the shape when a key comes first (default ``()``).
        low: the lower bound (inclusive), default 0.0; a number or a tensor that broadcasts
            to ``shape`` (also ``minval=``, JAX's name). Tensor bounds are cast to ``dtype``.
        high: the upper bound (exclusive), default 1.0 (also ``maxval=``).
        jax_maxval: the upper bound in JAX's positional order (after a dtype).
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`).
        device: the device of the result; drawn on the host, then moved.
        key: the key as a keyword (JAX's ``key=``), instead of the first argument.

    Returns:
        A float tensor of ``shape``: differentiable (and batched by ``vmap``) with respect to
        tensor bounds, ``low + u * (high - low)``; never with respect to the key.

    Raises:
        TypeError: for a shape given twice or too many positional parameters.
        ValueError: for a dtype that is not a float, or bounds that do not broadcast to
            ``shape``.
    """
    key_or_shape = _keyword_key("uniform", key_or_shape, key)
    if isinstance(key_or_shape, Tensor) and _dtype_like(low):  # JAX: (key, shape, dtype, ...)
        dtype, low, high = _one_dtype("uniform", dtype, low), high, jax_maxval
    elif jax_maxval is not None:
        raise TypeError("uniform: too many positional parameters")
    low = alias_arg("uniform", "low", low, "minval", minval)  # JAX's names as well
    high = alias_arg("uniform", "high", high, "maxval", maxval)
    k, shape, (low, high, _) = _split_args(key_or_shape, shape, (low, high, None), "uniform")
    low = 0.0 if low is None else low
    high = 1.0 if high is None else high
    numbers_given = isinstance(low, int | float) and isinstance(high, int | float)
    if numbers_given and low > high:  # as PyTorch (the clamp below high left every value out)
        raise ValueError(f"uniform: low ({low}) must not be above high ({high})")
    dtype = _float_dtype("uniform", dtype)
    low, high = (_cast_bound(v, dtype) for v in (low, high))
    u = _draw(_uniform, k, shape, dtype)
    if numbers_given and low == high:  # an empty range: the one value (a key is still drawn)
        return _place(fn.full_like(u, low), device)
    unit = _is_default(low, 0.0) and _is_default(high, 1.0)
    span = 1.0 if unit else high - low
    with np.errstate(over="ignore"):
        wide = numbers_given and not np.isfinite(np.array(span, dtype.numpy))
    if wide:  # high - low beyond the dtype (-3e38 to 3e38 in float32): (1 - u) low + u high
        out = u * float(high) + (1.0 - u) * float(low)
    else:
        out = _affine("uniform", u, span, low, {"low": low, "high": high})
    if not unit and isinstance(high, int | float):
        # low + u * span can round up to high: clamp to the largest value below it
        top = np.array(high, dtype.numpy)
        out = fn.minimum(out, float(np.nextafter(top, np.array(-np.inf, dtype.numpy))))
        if isinstance(low, int | float):  # where high rounds to low in dtype: low, as JAX
            out = fn.maximum(out, float(np.array(low, dtype.numpy)))
    return _place(out, device)


def _cast_bound(v, dtype):
    """A tensor (or NumPy array) parameter of a float draw in the draw's dtype (as JAX
    casts its bounds: a float64 array must not make the draw float64)."""
    if isinstance(v, np.ndarray):
        v = fn.asarray(v)
    if isinstance(v, Tensor) and v.dtype is not dtype:
        return fn.cast(v, dtype)
    return v


def _keyword_key(op, key_or_shape, key):
    """The first argument, or JAX's ``key=`` keyword in its place."""
    if key is None:
        return key_or_shape
    if isinstance(key_or_shape, Tensor) or key_or_shape not in ((), None):
        raise TypeError(f"{op}: the key given twice (first argument and key=)")
    return key


def normal(key_or_shape=(), shape=None, mean=None, std=None, *, dtype=None, device=None, key=None):
    """Normal samples with ``mean`` and ``std``.

    Call as ``normal(key, shape, mean, std)`` (reproducible) or ``normal(shape, mean, std)``
    (global generator, fresh on every call).

    Args:
        key_or_shape: a key (from :func:`nabla.random.key`), or the shape (int or tuple).
        shape: the shape when a key comes first (default ``()``).
        mean: the mean, default 0.0; a number or a tensor that broadcasts to ``shape``.
        std: the standard deviation, default 1.0; a number or such a tensor.
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`); tensor parameters
            are cast to it.
        device: the device of the result; drawn on the host, then moved.
        key: the key as a keyword (JAX's ``key=``), instead of the first argument.

    Returns:
        A float tensor of ``shape``: differentiable (and batched by ``vmap``) with respect to
        a tensor ``mean`` and ``std``, ``mean + z * std`` (the reparameterization); never
        with respect to the key.

    Raises:
        TypeError: for a shape given twice or too many positional parameters.
        ValueError: for a dtype that is not a float, parameters that do not broadcast to
            ``shape``, or a number ``std`` below 0 (or NaN).
    """
    key_or_shape = _keyword_key("normal", key_or_shape, key)
    if isinstance(key_or_shape, Tensor) and _dtype_like(mean):  # JAX: normal(key, shape, dtype)
        dtype, mean, std = _one_dtype("normal", dtype, mean), std, None
    k, shape, (mean, std, _) = _split_args(key_or_shape, shape, (mean, std, None), "normal")
    mean = 0.0 if mean is None else mean
    std = 1.0 if std is None else std
    if isinstance(std, numbers.Real) and not isinstance(std, bool) and not std >= 0:
        # as PyTorch and NumPy (a negative scale flipped the draws' signs, silently)
        raise ValueError(f"normal: std must be >= 0, got {std}")
    dtype = _float_dtype("normal", dtype)
    mean, std = _cast_bound(mean, dtype), _cast_bound(std, dtype)
    z = _draw(_normal, k, shape, dtype)
    return _place(_affine("normal", z, std, mean, {"mean": mean, "std": std}), device)


gaussian = normal


def bernoulli(key_or_shape=(), p=0.5, shape=None, *, device=None, key=None):
    """Random booleans, True with probability ``p``.

    Call as ``bernoulli(key, p, shape)`` (reproducible) or ``bernoulli(shape, p)`` (global
    generator).

    Args:
        key_or_shape: a key (from :func:`nabla.random.key`) for a reproducible draw, or the
            shape (int or tuple of ints; default ``()``) for a draw from the global generator.
        p: the probability of True (default 0.5).
        shape: with a key, the shape of the result (default: ``p``'s shape, as JAX); with a
            shape as the first argument it replaces it when given.
        device: the device of the result (default: the default device); drawn on the host,
            then moved.
        key: the key as a keyword (JAX's ``key=``), instead of the first argument.

    Returns:
        A bool tensor (not differentiable).

    Raises:
        ValueError: if ``key_or_shape`` is a tensor that is not a key (int, shape ``(2,)``),
            or for a number ``p`` outside ``[0, 1]``.
    """
    key_or_shape = _keyword_key("bernoulli", key_or_shape, key)
    if isinstance(key_or_shape, Tensor):
        k = _as_key(key_or_shape, "bernoulli")
        if shape is None:  # JAX: p's shape
            shape = tuple(np.shape(p)) if isinstance(p, Tensor | np.ndarray) else ()
    else:
        k, shape = global_key(), (key_or_shape if shape is None else shape)
    if not isinstance(p, numbers.Number):
        _check_broadcast("bernoulli", norm_shape("bernoulli", shape), {"p": p})
    elif isinstance(p, numbers.Real) and not 0.0 <= p <= 1.0:
        # as PyTorch (1.5 drew all True, -0.5 all False, silently)
        raise ValueError(f"bernoulli: p must be in [0, 1], got {p}")
    u = _draw(_uniform, k, shape, DType.float32)
    return _place(u < p, device)


def randint(
    key_or_shape=(),
    shape=None,
    low=None,
    high=None,
    jax_dtype=None,
    *,
    dtype=None,
    device=None,
    minval=None,
    maxval=None,
    key=None,
    size=None,
    generator=None,
):
    """Uniform random integers in ``[low, high)``.

    Call as ``randint(key, (3,), 0, 10)`` (reproducible) or ``randint((3,), 0, 10)`` (global
    generator; PyTorch's ``randint(0, 10, (3,))`` and ``randint(10, (3,))`` too). With only
    ``low`` given the range is ``[0, low)``, as in NumPy.

    Args:
        key_or_shape: a key (from :func:`nabla.random.key`) for a reproducible draw, or the
            shape (int or tuple of ints; default ``()``) for a draw from the global generator.
        shape: the shape of the result when a key comes first (default ``()``). After a
            shape, the positional parameters are ``low, high``.
        low: the lowest value (inclusive), or the exclusive upper bound when ``high`` is None
            (also ``minval=``, JAX's name). A number, or an integer tensor that broadcasts to
            ``shape``.
        high: the exclusive upper bound (also ``maxval=``).
        jax_dtype: the dtype in JAX's positional order, ``randint(key, shape, minval,
            maxval, dtype)``.
        dtype: an integer dtype (default int32). Bounds outside its range are clamped to it,
            as in JAX (``randint(k, s, -5, 3, dtype=nb.uint8)`` draws from ``[0, 3)``);
            where clamping empties the range, every value is the clamped ``low``.
        device: the device of the result (default: the default device); drawn on the host,
            then moved.
        key: the key as a keyword (JAX's ``key=``), instead of the first argument.
        size: PyTorch's keyword for the shape: ``randint(0, 10, size=(3,))``, the bounds
            then the first positional arguments.
        generator: PyTorch's keyword, accepted as None (draws come from the global
            generator or a key).

    Returns:
        An integer tensor (not differentiable).

    Raises:
        ValueError: unless ``low < high`` (for number bounds), or for tensor bounds that do
            not broadcast to ``shape``.
        TypeError: without bounds, for a shape given twice, or a dtype that is not an
            integer.
    """
    _no_generator("randint", generator)
    if size is not None:  # PyTorch's randint(low, high, size=...) / randint(high, size=...)
        if low is not None or high is not None or isinstance(key_or_shape, Tensor):
            raise TypeError("randint: size= goes with PyTorch's form, randint(low, high, size=)")
        bounds = (key_or_shape,) if shape is None else (key_or_shape, shape)
        key_or_shape, shape = tuple(size) if isinstance(size, tuple | list) else size, None
        low, high = (0, bounds[0]) if len(bounds) == 1 else bounds
    key_or_shape = _keyword_key("randint", key_or_shape, key)
    if isinstance(key_or_shape, numbers.Integral) and high is None and maxval is None:
        # PyTorch's torch.randint(low, high, size) and torch.randint(high, size): a size
        # after the bounds (no shape of ours is followed by a tuple)
        if isinstance(low, tuple | list) and isinstance(shape, numbers.Integral):
            key_or_shape, shape, low = tuple(low), key_or_shape, shape
        elif isinstance(shape, tuple | list) and low is None and minval is None:
            key_or_shape, shape = tuple(shape), key_or_shape
    if jax_dtype is not None:
        dtype = _one_dtype("randint", dtype, jax_dtype)
    low = alias_arg("randint", "low", low, "minval", minval)  # JAX's names as well
    high = alias_arg("randint", "high", high, "maxval", maxval)
    k, shape, (low, high, _) = _split_args(key_or_shape, shape, (low, high, None), "randint")
    if low is None:
        raise TypeError("randint needs an upper bound: randint(key, shape, high) or low, high")
    if high is None:
        low, high = 0, low
    dtype = to_dtype(dtype, "randint") if dtype is not None else DType.int32
    if not dtype.is_int or dtype.is_bool:
        raise TypeError(f"randint: dtype must be an integer dtype, got {dtype.value}")
    if isinstance(low, Tensor | np.ndarray) or isinstance(high, Tensor | np.ndarray):
        return _place(_randint_between(k, shape, low, high, dtype), device)
    if high <= low:
        raise ValueError(f"randint: need low < high, got [{low}, {high})")
    info = np.iinfo(dtype.numpy)
    lo = min(max(int(low), int(info.min)), int(info.max))
    hi = min(max(int(high), lo + 1), int(info.max) + 1)
    if hi > 1 << 63:  # (uint64: the generator draws int64 values)
        raise OverflowError(
            f"randint: high={high} for {dtype.value}: the draws stay below 2**63 (the "
            "generator's int64 range); pass high <= 2**63"
        )
    return _place(_draw(_randint, k, shape, dtype, {"low": lo, "high": hi}), device)


def _randint_between(k, shape, low, high, dtype):
    """``randint`` with tensor bounds: ``low + r % (high - low)`` for raw draws ``r`` in
    ``[0, 2**62)`` (a bias below ``span / 2**62``), bounds clamped to ``dtype``'s range and
    an empty range giving ``low``, as JAX does."""
    int64 = DType.int64
    info = np.iinfo(dtype.numpy)
    # the exclusive upper bound may pass the dtype's maximum by one (every int64 already
    # fits below it)
    top = min(int(info.max) + 1, int(np.iinfo(np.int64).max))

    def bound(v, name):
        t = fn.asarray(v)
        if not t.dtype.is_int or t.dtype.is_bool:
            raise TypeError(f"randint: {name} must be integers, got {t.dtype.value}")
        return fn.clip(fn.cast(t, int64), int(info.min), top)

    lo, hi = bound(low, "low"), bound(high, "high")
    shape = norm_shape("randint", shape)
    _check_broadcast("randint", shape, {"low": lo, "high": hi})
    lo = fn.minimum(lo, int(info.max))
    if dtype.numpy.itemsize == 8:
        return fn.cast(_wide_randint(k, shape, lo, hi), dtype)
    span = fn.maximum(hi - lo, 1)
    raw = _draw(_randint, k, shape, int64, {"low": 0, "high": 1 << 62})
    return fn.cast(lo + raw % span, dtype)


_WIDE_ROUNDS = 6  # rejection rounds of a 64-bit randint (see _wide_randint)


def _wide_randint(k, shape, lo, hi):
    """``lo + r % (hi - lo)`` for 64-bit bounds, in uint64 arithmetic (modulo ``2**64``): the
    span is the exact difference (up to the whole int64 range) and ``r`` has 64 random bits
    (two draws of 32). A draw at or past the largest multiple of the span below ``2**64``
    (which ``%`` would fold onto the low values: up to half of them for a span just past
    ``2**63``) is replaced by the next round's, ``_WIDE_ROUNDS`` rounds; the bias left is
    that fraction to the power of the rounds (below 1% at worst, none for a span that
    divides ``2**64``). With raw draws below ``2**62`` and an int64 difference, a span of
    ``3 * 2**60`` had drawn its top third once in four, and the whole range only ``lo``."""
    u64 = DType.uint64
    rounds = _WIDE_ROUNDS
    bits = _draw(_randint, k, (*shape, 2 * rounds), DType.int64, {"low": 0, "high": 1 << 32})
    words = [fn.cast(fn.squeeze(w, -1), u64) for w in fn.split(bits, 2 * rounds, -1)]
    span = fn.cast(hi, u64) - fn.cast(lo, u64)  # (exact: hi >= lo when the range is not empty)
    span = fn.where(hi > lo, span, fn.full_like(span, 1))  # an empty range gives low
    # the draws past ``limit`` are the biased ones: limit = 2**64 - 1 - (2**64 % span)
    limit = fn.full_like(span, np.iinfo(np.uint64).max) - (
        (fn.full_like(span, np.iinfo(np.uint64).max) % span + 1) % span
    )
    out = None
    for i in range(rounds - 1, -1, -1):  # the first round's draw wins where it is kept
        raw = fn.bitwise_or(fn.left_shift(words[2 * i], 32), words[2 * i + 1])
        out = raw if out is None else fn.where(raw <= limit, raw, out)
    return fn.cast(fn.cast(lo, u64) + out % span, DType.int64)


def permutation(key_or_x=None, x=None, axis=0, independent: bool = False, *, key=None):
    """A random permutation (JAX's ``random.permutation``): of ``range(n)`` for an int
    ``x``, else of ``x``'s slices along ``axis``. Call as ``permutation(key, x)``
    (reproducible; ``key=`` too) or ``permutation(x)`` (global generator). With
    ``independent=True`` each vector of ``x`` along ``axis`` is shuffled on its own.

    Raises:
        ValueError: for a negative ``n``, a 0-d ``x``, or ``independent`` with an int ``x``.
    """
    if key is not None:  # permutation(key=k, x=...) or permutation(x, key=k)
        if key_or_x is not None and x is not None:
            raise TypeError("random.permutation: the key given twice (first argument and key=)")
        key_or_x, x = key, (key_or_x if x is None else x)
    if isinstance(key_or_x, Tensor) and x is not None:
        k = _as_key(key_or_x, "permutation")
    else:
        k, x = global_key(), key_or_x
    n, values, axis = _candidates("random.permutation", x, axis)
    if independent:
        if values is None:
            raise ValueError("random.permutation: independent=True needs an array x, not an int")
        order = fn.argsort(_draw(_uniform, k, tuple(values.shape), DType.float32), axis=axis)
        return fn.take_along_axis(values, order, axis)
    order = fn.argsort(_draw(_uniform, k, (n,), DType.float32))
    order = fn.cast(order, DType.int32)
    return order if values is None else fn.gather(values, order, axis)


def _candidates(op: str, x, axis) -> tuple:
    """``(n, values, axis)`` of what ``op`` draws from: ``range(x)`` for an int (values
    None), else ``x``'s slices along ``axis``."""
    if isinstance(x, numbers.Integral):
        if x < 0:
            raise ValueError(f"{op}: n must be >= 0, got {x}")
        return int(x), None, axis
    values = as_tensor(x, op=op)
    if values.ndim == 0 and values.dtype.is_int:  # a 0-d integer array is n, as in JAX
        return _candidates(op, int(values.item()), axis)
    if values.ndim == 0:
        raise ValueError(f"{op}: x must be an int or have a dim to draw along")
    axis = norm_axis(op, axis, values.ndim, values.shape)
    return values.shape[axis], values, axis


def categorical(key, logits, axis=-1, shape=None, replace: bool = True):
    """Indices drawn with probabilities ``softmax(logits)`` along ``axis`` (JAX's
    ``random.categorical``, by the Gumbel-max trick): int32, of the shape of ``logits``
    without ``axis``, or ``shape`` (which must end with it, broadcasting ``logits``).
    ``replace=False`` is refused (:func:`choice` draws without replacement, with ``p``).

    Raises:
        ValueError: for a ``shape`` ``logits`` does not broadcast to, or ``replace=False``.
    """
    if not replace:
        raise ValueError(
            "random.categorical: replace=False is not supported; draw without replacement "
            "with nb.random.choice(key, n, shape, replace=False, p=nb.softmax(logits))"
        )
    k = _as_key(key, "categorical")
    logits = as_tensor(logits, op="random.categorical")
    axis = norm_axis("random.categorical", axis, logits.ndim, logits.shape)
    batch = logits.shape[:axis] + logits.shape[axis + 1 :]
    shape = batch if shape is None else tuple(shape)
    try:
        fits = len(shape) >= len(batch) and np.broadcast_shapes(shape, batch) == shape
    except ValueError:  # (NumPy's own message names neither the op nor the logits)
        fits = False
    if not fits:
        raise ValueError(
            f"random.categorical: shape {shape} must end with (and broadcast) the logits' "
            f"batch {batch} (logits of shape {logits.shape}, axis {axis})"
        )
    moved = axis + len(shape) - len(batch)  # the categories' dim in the draws
    full = shape[:moved] + (logits.shape[axis],) + shape[moved:]
    dt = logits.dtype if logits.dtype.is_float else get_default_dtype()
    if dt.itemsize < 4:  # 16-bit noise has so few values that ties (first index wins) bias
        dt = DType.float32  # the draw toward low indices: bfloat16's 50.17% for 2 classes
    noise = gumbel(k, full, dt)
    return fn.cast(fn.argmax(fn.cast(logits, dt) + noise, axis=moved), DType.int32)


def _float_draw(k, shape, dtype, op: str):
    """Uniform floats in ``(0, 1)`` for ``op``'s transform (the smallest normal number for
    an exact 0, whose log would be infinite), in a float dtype of at least 32 bits."""
    k = _as_key(k, op)
    dt = get_default_dtype() if dtype is None else to_dtype(dtype, op)
    if not dt.is_float:
        raise ValueError(f"{op}: dtype must be a float dtype, got {dt.value}")
    work = DType.float32 if dt.itemsize < 4 else dt
    u = _draw(_uniform, k, shape, work)
    return fn.maximum(u, float(ml_dtypes.finfo(work.numpy).tiny)), dt


def _distribution(name: str, transform, what: str):
    """A keyed draw (JAX's ``random.<name>(key, shape, dtype)``): ``transform`` of uniform
    floats in ``(0, 1)``, computed in at least 32 bits and cast to ``dtype``."""

    def draw(key, shape=(), dtype=None):
        u, dt = _float_draw(key, shape, dtype, f"random.{name}")
        return fn.cast(transform(u), dt)

    draw.__name__ = draw.__qualname__ = name
    draw.__doc__ = f"""{what} (JAX's ``random.{name}``).

    Args:
        key: a key (from :func:`nabla.random.key`).
        shape: the result's shape (default ``()``).
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`).

    Returns:
        A float tensor of ``shape``.
    """
    return draw


gumbel = _distribution(
    "gumbel", lambda u: -fn.log(-fn.log(u)), "Standard Gumbel draws, ``-log(-log(u))``"
)
exponential = _distribution(
    "exponential", lambda u: -fn.log(u), "Standard exponential draws (rate 1), ``-log(u)``"
)
# each half of a Laplace draw from its own side of u, so neither log meets 0 (``2u - 1``
# rounds to -1 for the smallest draws, whose ``log1p`` was -inf)
laplace = _distribution(
    "laplace",
    lambda u: fn.where(u < 0.5, fn.log(2.0 * u), -fn.log(2.0 * (1.0 - u))),
    "Standard Laplace draws (location 0, scale 1)",
)
logistic = _distribution(
    "logistic", lambda u: fn.log(u) - fn.log1p(-u), "Standard logistic draws, ``log(u / (1 - u))``"
)


cauchy = _distribution(
    "cauchy", lambda u: fn.tan(math.pi * (u - 0.5)), "Standard Cauchy draws, ``tan(pi (u - 1/2))``"
)


def lognormal(key, sigma=1.0, shape=None, dtype=None):
    """``exp(sigma * z)`` for standard normal ``z`` (JAX's ``random.lognormal``).

    Args:
        key: a key (from :func:`nabla.random.key`).
        sigma: the standard deviation of the log, a number or a tensor broadcasting to
            ``shape``.
        shape: the result's shape (default: ``sigma``'s).
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`).

    Returns:
        A float tensor of ``shape``.
    """
    dt = _float_dtype("random.lognormal", dtype)
    sigma = _cast_bound(sigma, dt)
    if shape is None:
        shape = tuple(sigma.shape) if isinstance(sigma, Tensor) else ()
    return fn.exp(normal(_as_key(key, "random.lognormal"), shape, 0.0, sigma, dtype=dt))


def rademacher(key, shape=(), dtype=DType.int32):
    """-1 or 1 with equal probability (JAX's ``random.rademacher``).

    Args:
        key: a key (from :func:`nabla.random.key`).
        shape: the result's shape (default ``()``).
        dtype: the result's dtype (default int32).

    Returns:
        A tensor of ``shape`` and ``dtype``.
    """
    dt = to_dtype(dtype, "random.rademacher")
    u = _draw(
        _uniform, _as_key(key, "random.rademacher"), norm_shape("rademacher", shape), DType.float32
    )
    return fn.cast(fn.where(u < 0.5, -1, 1), dt)


def truncated_normal(key, lower, upper, shape=None, dtype=None):
    """Standard normal draws truncated to ``(lower, upper)`` (JAX's
    ``random.truncated_normal``), by the inverse CDF: ``sqrt(2) erfinv(u)`` for ``u``
    uniform between ``erf(lower / sqrt(2))`` and ``erf(upper / sqrt(2))``, kept strictly
    inside the bounds. The inverse of ``erf`` is ``nb.scipy.special.erfinv``'s (Giles'
    polynomial, refined by Newton steps in float64, and through the normal quantile near
    ``+-1``).

    Args:
        key: a key (from :func:`nabla.random.key`).
        lower: the lower bound, a number or a tensor broadcasting to ``shape``.
        upper: the upper bound, likewise.
        shape: the result's shape (default: the bounds' broadcast shape).
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`).

    Returns:
        A float tensor of ``shape``.

    Raises:
        ValueError: for bounds that do not broadcast to ``shape``.
    """
    k = _as_key(key, "random.truncated_normal")
    dt = _float_dtype("random.truncated_normal", dtype)
    work = DType.float32 if dt.itemsize < 4 else dt
    lo, hi = (fn.cast(fn.asarray(v), work) for v in (lower, upper))
    if shape is None:
        shape = fn.broadcast_shapes("random.truncated_normal", tuple(lo.shape), tuple(hi.shape))
    shape = norm_shape("random.truncated_normal", shape)
    _check_broadcast("random.truncated_normal", shape, {"lower": lo, "upper": hi})
    root2 = math.sqrt(2.0)
    a, b = fn.erf(lo / root2), fn.erf(hi / root2)
    u = _draw(_uniform, k, shape, work)
    z = root2 * fn.erfinv(a + u * (b - a))  # (special's, refined in float64 and the tails)
    return fn.cast(fn.clip(z, _inside(lower, lo, work, 1), _inside(upper, hi, work, -1)), dt)


def _inside(given, bound, dtype, toward: int):
    """The value next to a number (or NumPy array) bound toward the inside, as JAX keeps
    its draws strictly inside; a tensor bound as it is."""
    if isinstance(given, Tensor):
        return bound
    step = np.array(toward * np.inf, dtype.numpy)
    return fn.asarray(np.nextafter(np.asarray(given, dtype.numpy), step))


def choice(key, a, shape=(), replace=True, p=None, axis=0):
    """Random elements of ``a`` (JAX's ``random.choice``): of ``range(a)`` for an int,
    else slices of ``a`` along ``axis``; with probabilities ``p`` (default uniform), with
    or without replacement.

    Args:
        key: a key (from :func:`nabla.random.key`).
        a: an int ``n`` (choose from ``0 .. n-1``) or a tensor/array.
        shape: the shape of the draws (default ``()``, one).
        replace: draw with replacement (default True); without, at most ``n`` draws.
        p: the probabilities of the ``n`` candidates (a 1-D tensor or array summing to 1),
            or None.
        axis: the dim of ``a`` to choose along (default 0).

    Returns:
        The chosen elements (int32 indices for an int ``a``), ``shape`` replacing ``axis``.

    Raises:
        ValueError: for more draws than candidates without replacement, ``p`` of another
            length (or, when it has a value, negative, not finite or summing to 0), or a 0-d
            ``a``.
    """
    k = _as_key(key, "random.choice")
    shape = norm_shape("random.choice", shape)
    n, values, axis = _candidates("random.choice", a, axis)
    count = int(np.prod(shape, dtype=np.int64))
    if count and not n:
        raise ValueError(f"random.choice: no candidates to draw {count} from (a has {n})")
    if not replace and count > n:
        raise ValueError(
            f"random.choice: {count} draws without replacement from {n} candidates (shape {shape})"
        )
    if p is not None:
        p = as_tensor(p, op="random.choice")
        if p.shape != (n,):
            raise ValueError(f"random.choice: p of shape {p.shape} for {n} candidates")
        if readable_now(p):  # (a negative or NaN p had made a NaN logit: index 0, always)
            values_p = p.numpy().astype(np.float64)
            if not (np.all(values_p >= 0) and np.all(np.isfinite(values_p))):
                raise ValueError(
                    f"random.choice: p must hold non-negative finite probabilities, got {values_p}"
                )
            if count and not values_p.sum() > 0:
                raise ValueError("random.choice: p sums to 0: no candidate can be drawn")
        logits = fn.log(fn.cast(p, DType.float32))
    if not count:
        flat = fn.zeros((0,), dtype=DType.int32)
    elif replace:
        if p is None:  # (integers drawn as integers: a float32 u has 24 bits, n may not)
            flat = randint(k, (count,), 0, n)
        else:
            flat = categorical(k, logits, shape=(count,))
    else:  # the first draws of a random order: Gumbel-top-k with weights
        noise = gumbel(k, (n,), DType.float32)
        keys = noise if p is None else logits + noise
        flat = fn.cast(fn.argsort(-keys)[:count], DType.int32)
    idx = fn.reshape(flat, shape)
    if values is None:
        return idx
    picked = fn.gather(values, fn.reshape(flat, (count,)), axis)
    return fn.reshape(picked, values.shape[:axis] + shape + values.shape[axis + 1 :])


def _place(t, device):
    if device is None or device == get_default_device() or device == t.device:
        return t
    return t.to(device)


# ----------------------------------------------------------------------------- nb.* (shape first)
def uniform_(shape=(), low=_ZERO, high=_ONE, *rest, dtype=None, device=None):
    """Uniform floats in ``[low, high)`` from the global generator.

    Each call draws fresh values (seeded by :func:`nabla.random.seed`), independent per
    element inside ``vmap`` and fresh per call of a compiled function.
    ``nb.uniform(key, shape, low, high)`` draws reproducibly from a key instead (the
    :func:`nabla.random.uniform` form).

    Args:
        shape: int or tuple of ints (default ``()``), or a key as described above.
        low: the lower bound (inclusive), default 0.0.
        high: the upper bound (exclusive), default 1.0.
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`).
        device: the device of the result (default: the default device); drawn on the host,
            then moved.

    Returns:
        A float tensor of ``shape`` (not differentiable).

    Raises:
        TypeError: for more positional parameters than ``shape, low, high``.

    Example:
        >>> nb.uniform((2, 3), -1.0, 1.0).shape
        (2, 3)
    """
    low, high = _given(low, _ZERO), _given(high, _ONE)
    if isinstance(shape, Tensor):  # nb.uniform(key, shape, low, high): nb.random.uniform's form
        return uniform(shape, low, high, *rest, dtype=dtype, device=device)
    if rest:
        raise TypeError(f"uniform(shape, low, high) got {len(rest)} extra positional arguments")
    return uniform(shape, None, low, high, dtype=dtype, device=device)


def normal_(shape=(), mean=_ZERO, std=_ONE, *rest, dtype=None, device=None):
    """Normal samples with ``mean`` and ``std`` from the global generator (also ``nb.gaussian``).

    Each call draws fresh values (seeded by :func:`nabla.random.seed`), independent per
    element inside ``vmap`` and fresh per call of a compiled function.
    ``nb.normal(key, shape, mean, std)`` draws reproducibly from a key instead (the
    :func:`nabla.random.normal` form).

    Args:
        shape: int or tuple of ints (default ``()``), or a key as described above.
        mean: the mean, default 0.0.
        std: the standard deviation, default 1.0.
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`).
        device: the device of the result (default: the default device); drawn on the host,
            then moved.

    Returns:
        A float tensor of ``shape`` (not differentiable).

    Raises:
        TypeError: for more positional parameters than ``shape, mean, std``.
    """
    mean, std = _given(mean, _ZERO), _given(std, _ONE)
    if isinstance(shape, Tensor):  # nb.normal(key, shape, mean, std): nb.random.normal's form
        return normal(shape, mean, std, *rest, dtype=dtype, device=device)
    if rest:
        raise TypeError(f"normal(shape, mean, std) got {len(rest)} extra positional arguments")
    return normal(shape, None, mean, std, dtype=dtype, device=device)


# ----------------------------------------------------------------------------- PyTorch's names
def _sizes(op: str, size: tuple) -> tuple:
    """PyTorch's size arguments: the sizes one by one, or one tuple or list of them."""
    if len(size) == 1 and isinstance(size[0], tuple | list):
        size = tuple(size[0])
    if not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in size):
        raise TypeError(f"{op}: sizes must be ints (one by one or as one tuple), got {size!r}")
    return tuple(int(n) for n in size)


def randn(
    *size, dtype=None, device=None, requires_grad: bool = False, generator=None, **kw
) -> Tensor:
    """PyTorch's ``torch.randn``: standard normal samples from the global generator
    (``nb.normal(size)``; seeded by :func:`manual_seed`).

    Args:
        size: the shape, as ints one by one or one tuple (``randn(2, 3)``, ``randn((2, 3))``,
            ``randn(size=(2, 3))``).
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`).
        device: the device (default: :func:`nabla.get_default_device`).
        requires_grad: make it a leaf whose gradient ``backward`` accumulates.
        generator: PyTorch's keyword, accepted as None.
        **kw: ``size=`` (PyTorch's keyword).

    Returns:
        A tensor of that shape.
    """
    return _drawn(normal_, "randn", size, dtype, device, requires_grad, generator, kw)


def rand(
    *size, dtype=None, device=None, requires_grad: bool = False, generator=None, **kw
) -> Tensor:
    """PyTorch's ``torch.rand``: uniform samples in ``[0, 1)`` from the global generator
    (``nb.uniform(size)``).

    Args:
        size: the shape, as ints one by one or one tuple (or ``size=``).
        dtype: a float dtype (default: :func:`nabla.get_default_dtype`).
        device: the device (default: :func:`nabla.get_default_device`).
        requires_grad: make it a leaf whose gradient ``backward`` accumulates.
        generator: PyTorch's keyword, accepted as None.
        **kw: ``size=`` (PyTorch's keyword).

    Returns:
        A tensor of that shape.
    """
    return _drawn(uniform_, "rand", size, dtype, device, requires_grad, generator, kw)


def randn_like(input, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    """PyTorch's ``torch.randn_like``: :func:`randn` of ``input``'s shape (and dtype and
    device unless given).

    Args:
        input: the tensor whose shape is drawn.
        dtype: a float dtype (default: ``input``'s, or the default float dtype).
        device: the device (default: ``input``'s).
        requires_grad: make it a leaf whose gradient ``backward`` accumulates.

    Returns:
        A tensor like ``input``.
    """
    return _drawn_like(randn, "randn_like", input, dtype, device, requires_grad)


def rand_like(input, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    """PyTorch's ``torch.rand_like``: :func:`rand` of ``input``'s shape.

    Args:
        input: the tensor whose shape is drawn.
        dtype: a float dtype (default: ``input``'s, or the default float dtype).
        device: the device (default: ``input``'s).
        requires_grad: make it a leaf whose gradient ``backward`` accumulates.

    Returns:
        A tensor like ``input``.
    """
    return _drawn_like(rand, "rand_like", input, dtype, device, requires_grad)


def _drawn_like(draw, op, input, dtype, device, requires_grad) -> Tensor:  # noqa: A002
    """``draw`` of ``input``'s shape, in its float dtype and on its device unless given."""
    x = as_tensor(input, op=op)
    dt = dtype or (x.dtype if x.dtype.is_float else None)
    return draw(tuple(x.shape), dtype=dt, device=device or x.device, requires_grad=requires_grad)


def randint_like(input, low=0, high=None, *, dtype=None, device=None) -> Tensor:  # noqa: A002
    """PyTorch's ``torch.randint_like``: integers in ``[low, high)`` (one bound: ``[0,
    low)``) of ``input``'s shape and dtype.

    Args:
        input: the tensor whose shape is drawn.
        low: the lower bound (or the upper one, alone).
        high: the upper bound.
        dtype: the dtype (default: ``input``'s).
        device: the device (default: ``input``'s).

    Returns:
        A tensor like ``input``.
    """
    x = as_tensor(input, op="randint_like")
    if high is None:
        low, high = 0, low
    out = randint(tuple(x.shape), int(low), int(high))
    return _place(fn.cast(out, dtype or x.dtype), device or x.device)


def randperm(n: int, *, generator=None, dtype=DType.int64, device=None) -> Tensor:
    """PyTorch's ``torch.randperm``: a random permutation of ``0 .. n-1`` from the global
    generator.

    Args:
        n: the length.
        generator: PyTorch's keyword, accepted as None.
        dtype: an integer dtype (default int64).
        device: the device.

    Returns:
        ``(n,)``.
    """
    _no_generator("randperm", generator)
    dtype = to_dtype(dtype, "randperm")
    out = permutation(global_key(), int(n))
    return _place(fn.cast(out, dtype), device)


def multinomial(input, num_samples: int, replacement: bool = False, *, generator=None) -> Tensor:  # noqa: A002
    """PyTorch's ``torch.multinomial``: ``num_samples`` category indices per row of the
    weights ``input`` (``(C,)`` or ``(N, C)``, non-negative, not necessarily normalized),
    with or without replacement (without: Gumbel top-k), from the global generator.

    Args:
        input: the weights.
        num_samples: the draws per row.
        replacement: draw with replacement.
        generator: PyTorch's keyword, accepted as None.

    Returns:
        int64 ``(num_samples,)`` or ``(N, num_samples)``.

    Raises:
        ValueError: for more draws than categories without replacement, or weights that
            are not 1-D or 2-D.
    """
    _no_generator("multinomial", generator)
    w = as_tensor(input, op="multinomial")
    if w.ndim not in (1, 2):
        raise ValueError(f"multinomial: input must be 1-D or 2-D, got shape {w.shape}")
    n = int(num_samples)
    if not replacement and n > w.shape[-1]:
        raise ValueError(
            f"multinomial: {n} samples without replacement from {w.shape[-1]} categories"
        )
    w = w if w.dtype.is_float else fn.cast(w, get_default_dtype())
    logits = fn.log(w)
    k = global_key()
    if replacement:
        batch = tuple(w.shape[:-1])
        draws = categorical(k, logits, -1, (n, *batch))
        out = fn.moveaxis(draws, 0, -1) if batch else draws
    else:
        noisy = logits + gumbel(k, tuple(w.shape), logits.dtype)
        out = fn.top_k(noisy, n)[1]
    return fn.cast(out, DType.int64)


def _no_generator(op: str, generator) -> None:
    """PyTorch's ``generator=``: None only (a torch.Generator's draws are not ours)."""
    if generator is not None:
        raise TypeError(
            f"{op}: generator= takes None here; seed the global generator "
            "(nb.manual_seed) or draw from a key (nb.random.key)"
        )


def _drawn(draw, op, size: tuple, dtype, device, requires_grad, generator, kw) -> Tensor:
    """``draw(shape)`` from the global generator with PyTorch's size forms (``size=``
    too), a leaf that requires grad when asked."""
    _no_generator(op, generator)
    if kw:
        if set(kw) != {"size"} or size:
            extra = sorted(set(kw) - {"size"})
            raise TypeError(
                f"{op}: unexpected keyword argument(s) {extra}"
                if extra
                else f"{op}: the size given twice (positionally and as size=)"
            )
        size = (kw["size"],)
    out = draw(_sizes(op, size), dtype=dtype, device=device)
    if requires_grad:
        out.requires_grad = True
    return out


def manual_seed(s: int) -> None:
    """PyTorch's ``torch.manual_seed``: :func:`seed` of the global generator.

    Args:
        s: the seed, an int (negative ones too, as PyTorch's).

    Raises:
        TypeError: for a seed that is not an int.
    """
    _reseed(s, "manual_seed")


def get_rng_state() -> np.ndarray:
    """The global generator's state (PyTorch's ``torch.get_rng_state``): its seed and how
    many draws it has made, as an int64 array of two, which a checkpoint holds
    (``nn.save``, ``nn.save_sharded``) so a resumed run draws what the first would have.

    Returns:
        A NumPy int64 array ``[seed, draws]``.

    Example:
        >>> nb.manual_seed(3); state = nb.get_rng_state()
        >>> a = nb.randn(2); nb.set_rng_state(state)
        >>> bool((nb.randn(2) == a).all())
        True
    """
    with _GLOBAL.lock:
        return np.array([_GLOBAL.seed, _GLOBAL.counter], dtype=np.int64)


def set_rng_state(state) -> None:
    """Restore the global generator to ``state`` from :func:`get_rng_state` (PyTorch's
    ``torch.set_rng_state``): the draws that follow are those that followed then.

    Args:
        state: ``[seed, draws]``: what :func:`get_rng_state` returned (an array, a tensor or
            a sequence of two ints).

    Raises:
        ValueError: for anything but two integers, the second not negative.
    """
    values = np.asarray(state.numpy() if isinstance(state, Tensor) else state)
    if values.shape != (2,) or values.dtype.kind not in "iu" or values[1] < 0:
        raise ValueError(
            f"set_rng_state: expected [seed, draws] as two integers (from get_rng_state), "
            f"got {state!r}"
        )
    with _GLOBAL.lock:
        _GLOBAL.seed, _GLOBAL.counter = int(values[0]), int(values[1])
