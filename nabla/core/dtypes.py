"""Data types and type promotion.

Invariants:
- A ``DType`` is a singleton enum member; ``dtype.numpy`` is the matching NumPy dtype
  (bfloat16 comes from ``ml_dtypes``).
- Promotion follows one lattice for every op: bool < unsigned/signed ints < floats, with
  Python scalars "weak" (they never widen a tensor of the same kind: ``f32 * 2.0 -> f32``,
  ``i32 + 1 -> i32``) and int + float giving the float type (``i32 + f32 -> f32``).
"""

from __future__ import annotations

import contextlib
import enum
import numbers
import threading

import ml_dtypes
import numpy as np

__all__ = [
    "DType",
    "bfloat16",
    "bool_",
    "default_dtype",
    "float16",
    "float32",
    "float64",
    "get_default_dtype",
    "int8",
    "int16",
    "int32",
    "int64",
    "promote_types",
    "result_type",
    "to_dtype",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]


class DType(enum.Enum):
    """Element type of a tensor: ``nb.DType.float32`` (alias ``nb.float32``).

    An enum: ``DType(value)`` looks a member up by its name (``nb.DType("int32")``; ValueError
    for an unknown one). The ``dtype`` arguments of ops also accept NumPy dtypes, Python
    types (``float`` -> float32) and names. ``names``, ``module``, ``qualname``, ``type``,
    ``start`` and ``boundary`` belong to :class:`enum.Enum`'s functional API and are not used
    by nabla. Properties: ``numpy`` (the NumPy dtype; also ``dtype``), ``is_float``,
    ``is_int``, ``is_unsigned``, ``is_bool`` and ``itemsize`` (bytes). A member equals its
    NumPy dtype, NumPy or JAX scalar type and name (``x.dtype == np.float32``,
    ``== "float32"``), as a JAX array's dtype does, and MAX's ``max.dtype.DType`` member of
    its name (the original Nabla's dtype objects: ``x.dtype == DType.float32``).
    """

    bool = "bool"
    uint8 = "uint8"
    uint16 = "uint16"
    uint32 = "uint32"
    uint64 = "uint64"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype (``ml_dtypes.bfloat16`` for bfloat16)."""
        return _TO_NUMPY[self]

    @property
    def is_float(self) -> bool:
        """A floating-point dtype (float16, bfloat16, float32, float64)."""
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        """A signed or unsigned integer dtype."""
        return self in _INTS

    @property
    def is_unsigned(self) -> bool:
        """An unsigned integer dtype (uint8, uint16, uint32, uint64)."""
        return self in _UINTS

    @property
    def is_bool(self) -> bool:
        """The bool dtype."""
        return self is DType.bool

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _TO_NUMPY[self].itemsize

    # ``numpy`` again, under the name NumPy's dtype protocol reads: ``np.dtype(x.dtype)``
    # works as it does for JAX and NumPy arrays
    dtype = numpy

    def __eq__(self, other):
        # JAX users compare with NumPy dtypes and names: ``x.dtype == jnp.float32``
        if isinstance(other, DType):
            return self is other
        if isinstance(other, str):
            return other == self.value
        if isinstance(other, np.dtype | type):
            try:
                return np.dtype(other) == _TO_NUMPY[self]
            except TypeError:
                return False
        if _is_max_dtype(other):  # (the original Nabla's tests compare with MAX's members)
            return other.name == self._name_
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._name_)

    def __call__(self, value):
        """``value`` as a tensor of this dtype, as JAX's scalar types (``nb.float32(3)``,
        ``nb.int32(x)``): a Python number or array converted, a tensor cast."""
        make = _AS_ARRAY[0]
        if make is None:  # (installed by ``nabla`` on import: core builds no tensors)
            raise RuntimeError(f"{self!r}(...) needs nabla imported")
        return make(value, self)

    def __repr__(self) -> str:
        return f"nb.{self.value}"

    __str__ = __repr__


_AS_ARRAY: list = [None]  # ``asarray(value, dtype)``, installed by the package on import


def install_array_constructor(fn) -> None:
    """Make ``fn(value, dtype)`` what calling a dtype does (``nb.float32(3)``). The layer
    that builds tensors installs it: core imports nothing above it."""
    _AS_ARRAY[0] = fn


_TO_NUMPY = {
    DType.bool: np.dtype(np.bool_),
    DType.uint8: np.dtype(np.uint8),
    DType.uint16: np.dtype(np.uint16),
    DType.uint32: np.dtype(np.uint32),
    DType.uint64: np.dtype(np.uint64),
    DType.int8: np.dtype(np.int8),
    DType.int16: np.dtype(np.int16),
    DType.int32: np.dtype(np.int32),
    DType.int64: np.dtype(np.int64),
    DType.float16: np.dtype(np.float16),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
    DType.float32: np.dtype(np.float32),
    DType.float64: np.dtype(np.float64),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
_FLOATS = frozenset({DType.float16, DType.bfloat16, DType.float32, DType.float64})
_UINTS = frozenset({DType.uint8, DType.uint16, DType.uint32, DType.uint64})
_INTS = _UINTS | {DType.int8, DType.int16, DType.int32, DType.int64}

bool_ = DType.bool
uint8 = DType.uint8
uint16 = DType.uint16
uint32 = DType.uint32
uint64 = DType.uint64
int8 = DType.int8
int16 = DType.int16
int32 = DType.int32
int64 = DType.int64
float16 = DType.float16
bfloat16 = DType.bfloat16
float32 = DType.float32
float64 = DType.float64

_BY_NAME = {d.value: d for d in DType}
_BY_NAME.update({"bool_": DType.bool, "float": DType.float32, "int": DType.int32})
_SUPPORTED = ", ".join(x.value for x in DType)


def to_dtype(d, op: str | None = None) -> DType:
    """Normalize a DType, NumPy dtype, Python type or name ``d`` to a ``DType``; ``op``, the
    public function asking, opens the error's message when given.

    MAX's ``max.dtype.DType`` members (the original Nabla's dtype objects) are read by their
    name: ``DType.float32`` of MAX is ours. Matched by duck typing, since only the MAX
    backend may import ``max``.

    Raises:
        TypeError: if ``d`` names no supported dtype.
    """
    if isinstance(d, DType):
        return d
    if d is None:  # (NumPy reads None as float64)
        raise TypeError(f"{_by(op)}dtype None names no dtype; supported: {_SUPPORTED}")
    if d is bool:
        return DType.bool
    if d is int:
        return DType.int32
    if d is float:  # as a Python float becomes: the default float dtype
        return get_default_dtype()
    if isinstance(d, str) and d in _BY_NAME:
        return _BY_NAME[d]
    if _is_max_dtype(d) and d.name in _BY_NAME:
        return _BY_NAME[d.name]
    if type(d).__module__ == "torch" and str(d).removeprefix("torch.") in _BY_NAME:
        return _BY_NAME[str(d).removeprefix("torch.")]  # ``torch.float64``, by duck typing
    try:
        nd = np.dtype(d)
    except TypeError:
        nd = None
    if nd is not None and nd.byteorder not in "=|":  # a big-endian array's: its values'
        nd = nd.newbyteorder("=")
    if nd is not None and nd in _FROM_NUMPY:
        return _FROM_NUMPY[nd]
    raise TypeError(f"{_by(op)}unsupported dtype {d!r}; supported: {_SUPPORTED}")


def _is_max_dtype(d) -> bool:
    """``d`` is a member of MAX's ``DType`` enum (duck typing: core does not import MAX)."""
    return isinstance(d, enum.Enum) and type(d).__name__ == "DType" and not isinstance(d, DType)


def _by(op: str | None) -> str:
    """An error message's opening naming ``op``, or nothing."""
    return "" if op is None else f"{op}: "


def from_numpy_dtype(nd: np.dtype) -> DType:
    try:
        return _FROM_NUMPY[nd]
    except KeyError:
        return to_dtype(nd)


# ---------------------------------------------------------------------------------------------
# Default dtype
# ---------------------------------------------------------------------------------------------
_state = threading.local()
_FLOAT32 = DType.float32  # (the member, looked up once)
# How many ``default_dtype``/``default_device`` blocks are open, in any thread (each thread
# has its own defaults). While none is, every thread has the process's defaults, so a
# compiled function's hot lane need not read them (each read is ~1 us: an attribute a
# thread-local object may lack). Counted under a lock: ``+= 1`` from two threads can lose
# one.
DEFAULTS_OPEN = [0]
_OPEN_LOCK = threading.Lock()


@contextlib.contextmanager
def defaults_block():
    """Counts a block that changes this thread's defaults (``DEFAULTS_OPEN``) while it is
    open: entered before the change, left after the defaults are put back."""
    with _OPEN_LOCK:
        DEFAULTS_OPEN[0] += 1
    try:
        yield
    finally:
        with _OPEN_LOCK:
            DEFAULTS_OPEN[0] -= 1


def get_default_dtype() -> DType:
    """The float dtype given to Python floats and to float-producing creation ops."""
    return getattr(_state, "default", _FLOAT32)


@contextlib.contextmanager
def default_dtype(dtype):
    """Context manager setting the default float dtype: ``with nb.default_dtype(nb.float64):``."""
    dtype = to_dtype(dtype)
    if not dtype.is_float:
        raise TypeError(f"default_dtype must be a float dtype, got {dtype}")
    old = get_default_dtype()
    with defaults_block():
        _state.default = dtype
        try:
            yield dtype
        finally:
            _state.default = old


# ---------------------------------------------------------------------------------------------
# Promotion
# ---------------------------------------------------------------------------------------------
_FLOAT_RANK = {DType.float16: 1, DType.bfloat16: 1, DType.float32: 2, DType.float64: 3}
_PROMOTE_CACHE: dict[tuple[DType, DType], DType] = {}


def promote_types(a: DType, b: DType) -> DType:
    """The dtype two tensor dtypes promote to (both "strong", unlike Python scalars).

    bool < integers < floats: a float wins over any integer (``int32`` with ``float16`` gives
    ``float16``, as in JAX), integers promote as in NumPy and JAX (``uint8`` with ``int8``
    gives ``int16``, ``uint32`` with ``int32`` gives ``int64``; ``uint64`` with a signed
    integer has no integer to go to and gives ``float64``), and ``float16`` with
    ``bfloat16`` gives ``float32``.

    Args:
        a: the first :class:`nabla.DType`.
        b: the second.

    Returns:
        The promoted :class:`nabla.DType`.

    Example:
        >>> nb.promote_types(nb.int32, nb.float32)
        nb.float32
    """
    key = (a, b)
    hit = _PROMOTE_CACHE.get(key)
    if hit is not None:
        return hit
    if not (isinstance(a, DType) and isinstance(b, DType)):  # "int8", np.uint8, ...
        return promote_types(to_dtype(a), to_dtype(b))
    if a is b:
        out = a
    elif a.is_bool:
        out = b
    elif b.is_bool:
        out = a
    elif a.is_float and b.is_float:
        ra, rb = _FLOAT_RANK[a], _FLOAT_RANK[b]
        if ra == rb:  # float16 with bfloat16
            out = DType.float32
        else:
            out = a if ra > rb else b
    elif a.is_float:
        out = a
    elif b.is_float:
        out = b
    else:
        out = _FROM_NUMPY[np.promote_types(a.numpy, b.numpy)]
    _PROMOTE_CACHE[key] = out
    return out


def scalar_kind_dtype(value) -> DType:
    """The dtype a Python scalar gets on its own (bool, int32, default float)."""
    if isinstance(value, bool | np.bool_):
        return DType.bool
    if isinstance(value, int | np.integer):
        return DType.int32
    if isinstance(value, float | np.floating):
        return get_default_dtype()
    raise TypeError(f"unsupported scalar {value!r} of type {type(value).__name__}")


def result_type(tensor_dtypes: list[DType], scalars: list = ()) -> DType:
    """Promote tensor dtypes with weakly typed Python scalars.

    A scalar only lifts the result to a higher *kind*: a Python float with an int tensor gives
    the default float dtype; an int scalar with a bool tensor gives int32.
    """
    out = None
    for d in tensor_dtypes:
        out = d if out is None else promote_types(out, d)
    for s in scalars:
        sd = scalar_kind_dtype(s)
        if out is None:
            out = sd
        elif sd.is_float and not out.is_float:
            out = sd
        elif sd.is_int and out.is_bool:
            out = sd
    return out


# ---------------------------------------------------------------------------------------------
# NumPy's and JAX's dtype queries
# ---------------------------------------------------------------------------------------------
# the abstract scalar classes ``issubdtype`` tests against (NumPy's own: ``jnp.floating``)
floating, integer, signedinteger, unsignedinteger = (
    np.floating,
    np.integer,
    np.signedinteger,
    np.unsignedinteger,
)
inexact, number, generic = np.inexact, np.number, np.generic
_BFLOAT16_KINDS = (np.floating, np.inexact, np.number, np.generic)


def _dtype_of(x):
    """A dtype from a nabla DType, a NumPy dtype or type, a name, or anything with a
    ``.dtype`` (a tensor, an array)."""
    if isinstance(x, DType):
        return x
    dt = getattr(x, "dtype", None)
    if dt is not None and not isinstance(x, type):
        return _dtype_of(dt)
    return to_dtype(x)


def finfo(dtype):
    """Machine limits of a float dtype (NumPy's and JAX's ``finfo``: ``eps``, ``max``,
    ``min``, ``tiny``, ``bits``, ...); bfloat16's from ``ml_dtypes``.

    Args:
        dtype: a float dtype (nabla's, NumPy's, a name) or a tensor or array of one.

    Returns:
        The ``finfo`` object of the NumPy dtype.

    Raises:
        ValueError: for a dtype that is not a float.
    """
    d = _dtype_of(dtype)
    if not d.is_float:
        raise ValueError(f"finfo: {d!r} is not a float dtype (iinfo takes integers)")
    if d is DType.bfloat16:  # (a NumPy extension's type: its own finfo)
        return ml_dtypes.finfo(ml_dtypes.bfloat16)
    return np.finfo(d.numpy)


def iinfo(dtype):
    """Limits of an integer dtype (NumPy's and JAX's ``iinfo``: ``min``, ``max``, ``bits``).

    Args:
        dtype: an integer dtype (nabla's, NumPy's, a name) or a tensor or array of one.

    Returns:
        NumPy's ``iinfo`` object.

    Raises:
        ValueError: for a dtype that is not an integer.
    """
    d = _dtype_of(dtype)
    if not d.is_int:
        raise ValueError(f"iinfo: {d!r} is not an integer dtype (finfo takes floats)")
    return np.iinfo(d.numpy)


def _numpy_kind(x):
    """``x`` for ``np.issubdtype``: an abstract class as it is, a Python type as NumPy
    reads it (``float`` is float64, ``int`` int64), a dtype as nabla's."""
    if x in (float, int, bool, complex):
        return np.dtype(x).type
    if isinstance(x, type) and issubclass(x, np.generic) and x in (
        np.floating, np.integer, np.signedinteger, np.unsignedinteger, np.inexact,
        np.number, np.generic, np.bool_, np.complexfloating,
    ):  # fmt: skip
        return x
    return _dtype_of(x)


def issubdtype(arg1, arg2) -> bool:
    """Whether ``arg1``'s dtype is ``arg2`` or under it (NumPy's and JAX's ``issubdtype``):
    ``nb.issubdtype(x.dtype, nb.floating)``; bfloat16 is a float, as in JAX.

    Args:
        arg1: a dtype (nabla's, NumPy's, a name, an abstract class) or a tensor or array.
        arg2: a dtype or one of the abstract classes ``nb.floating``, ``nb.integer``,
            ``nb.signedinteger``, ``nb.unsignedinteger``, ``nb.inexact``, ``nb.number``,
            ``nb.generic``.

    Returns:
        A Python bool.
    """
    a, b = _numpy_kind(arg1), _numpy_kind(arg2)
    if isinstance(a, DType) and isinstance(b, DType):
        return a is b
    if isinstance(b, DType) and b is DType.bfloat16:
        return a is DType.bfloat16
    if a is DType.bfloat16:
        return b in _BFLOAT16_KINDS
    return bool(
        np.issubdtype(
            a.numpy if isinstance(a, DType) else a, b.numpy if isinstance(b, DType) else b
        )
    )


def result_type_of(*args) -> DType:
    """The dtype an operation on ``args`` computes in (NumPy's and JAX's ``result_type``,
    with nabla's promotion): tensors, arrays and dtypes are strong, Python and NumPy
    scalars weak, as the ops take them (``nb.result_type(nb.int8, 1.0)`` is the default
    float).

    Args:
        *args: dtypes (nabla's, NumPy's, names), tensors or arrays, and Python scalars.

    Returns:
        A :class:`nabla.DType`.

    Raises:
        ValueError: with no arguments.
    """
    if not args:
        raise ValueError("result_type: at least one array or dtype is required")
    strong, weak = [], []
    for a in args:
        if isinstance(a, numbers.Number | np.bool_) and not isinstance(a, np.ndarray):
            weak.append(a)
        else:
            strong.append(_dtype_of(a))
    return result_type(strong, weak)


def dtype(obj) -> DType:
    """The :class:`nabla.DType` of a name, a NumPy dtype or type, a DType, or anything with a
    ``.dtype`` (JAX's ``jnp.dtype``, nabla's dtypes in place of NumPy's; ``nb.dtype(t) ==
    nb.float32`` as in JAX).

    Args:
        obj: a dtype in any spelling, or a tensor or array.

    Returns:
        A :class:`nabla.DType`.
    """
    return _dtype_of(obj)


_KINDS = {
    "bool": lambda d: d.is_bool,
    "signed integer": lambda d: d.is_int and not d.is_unsigned,
    "unsigned integer": lambda d: d.is_unsigned,
    "integral": lambda d: d.is_int,
    "real floating": lambda d: d.is_float,
    "complex floating": lambda d: False,  # no complex dtype
    "numeric": lambda d: d.is_int or d.is_float,
}


def isdtype(dtype, kind) -> bool:
    """The array API's ``isdtype`` (JAX's too): whether ``dtype`` is of ``kind``.

    Args:
        dtype: a dtype (nabla's, NumPy's, a name).
        kind: a dtype, one of ``"bool"``, ``"signed integer"``, ``"unsigned integer"``,
            ``"integral"``, ``"real floating"``, ``"complex floating"``, ``"numeric"``, or a
            tuple of those (any of them).

    Returns:
        A Python bool.

    Raises:
        ValueError: for a kind name not in that list.
    """
    d = to_dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(d, k) for k in kind)
    if isinstance(kind, str) and kind in _KINDS:
        return bool(_KINDS[kind](d))
    if isinstance(kind, str) and kind not in _BY_NAME:
        raise ValueError(
            f"isdtype: unknown kind {kind!r}; kinds are {', '.join(map(repr, _KINDS))}"
        )
    return d is to_dtype(kind)


def can_cast(from_, to, casting: str = "safe") -> bool:
    """NumPy's and JAX's ``can_cast``: whether a cast keeps every value under ``casting``'s
    rule (``"no"``, ``"equiv"``, ``"safe"``, ``"same_kind"``, ``"unsafe"``).

    Args:
        from_: a dtype (any spelling) or a tensor or array.
        to: a dtype.
        casting: NumPy's rule (default ``"safe"``).

    Returns:
        A Python bool.
    """
    return bool(np.can_cast(_dtype_of(from_).numpy, to_dtype(to).numpy, casting))


# NumPy's other names of the dtypes, at their NumPy widths
single, double, float_ = DType.float32, DType.float64, DType.float64
half, int_, uint = DType.float16, DType.int64, DType.uint64
