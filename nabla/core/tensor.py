"""``Tensor`` (the user handle) and ``TensorImpl`` (the record the graph works on).

Invariants:
- ``impl.shape`` is the *physical* shape: a prefix of vmap batch dims followed by the logical
  shape. ``impl.levels`` has one vmap level id per prefix dim, strictly increasing (outer
  levels first). ``Tensor.shape`` is the logical part, a tuple of Python ints.
- A tensor is either realized (``impl.buffer`` holds a backend value) or a *promise*
  (``impl.node`` is the ``OpNode`` that will produce it when evaluated). Realizing a tensor that
  no autodiff trace needs drops its node, so graphs of long loops do not grow without bound.
- ``impl.tangents`` maps a forward-mode transform level to the tangent impl at that level.
- ``impl.traced`` is the set of differentiation levels the tensor depends on; while one of
  them is live (``state.is_live``) the node is kept after realization, so differentiation can
  walk back through it.
- A ``Tensor`` is a thin handle: identity, metadata and realization. Operators and methods are
  attached from one table in ``nabla.ops.methods``.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .device import Device
from .dtypes import DType

__all__ = ["Tensor", "TensorImpl", "OpNode"]


class OpNode:
    """One recorded op application: what produced a promise tensor.

    ``kwargs`` are the op's original (logical) keyword arguments, used by differentiation
    rules; ``phys_kwargs`` are their translation to the physical layout, used by backends.
    ``key`` is the node's static structural key (backend op name + physical kwargs).
    """

    __slots__ = (
        "op",
        "inputs",
        "kwargs",
        "phys_kwargs",
        "key",
        "outputs",
        "out_specs",
        "__weakref__",
    )

    def __init__(self, op, inputs: tuple, kwargs: dict, phys_kwargs: dict, key: tuple):
        self.op = op
        self.inputs = inputs
        self.kwargs = kwargs
        self.phys_kwargs = phys_kwargs
        self.key = key
        self.outputs: tuple = ()  # weakrefs to output impls (set by the pipeline)
        self.out_specs: tuple = ()  # physical (dtype, shape) per output

    def __repr__(self):
        return f"OpNode({self.op.name}, {len(self.inputs)} inputs)"


class TensorImpl:
    """Everything the system knows about one tensor value."""

    __slots__ = (
        "shape",
        "levels",
        "dtype",
        "device",
        "sharding",
        "node",
        "index",
        "buffer",
        "tangents",
        "traced",
        "requires_grad",
        "grad",
        "wrapper",
        "__weakref__",
    )

    def __init__(
        self,
        shape: tuple,
        dtype: DType,
        device: Device,
        levels: tuple = (),
        node: OpNode | None = None,
        index: int = 0,
        buffer: Any = None,
        traced: frozenset = frozenset(),
    ):
        self.shape = shape
        self.levels = levels
        self.dtype = dtype
        self.device = device
        self.sharding = None
        self.node = node
        self.index = index
        self.buffer = buffer
        self.tangents = None
        self.traced = traced
        self.requires_grad = False
        self.grad = None
        self.wrapper = None

    @property
    def realized(self) -> bool:
        return self.buffer is not None

    @property
    def batch_ndim(self) -> int:
        return len(self.levels)

    @property
    def logical_shape(self) -> tuple:
        n = len(self.levels)
        return self.shape[n:] if n else self.shape

    def __repr__(self):
        state = "realized" if self.buffer is not None else "promise"
        return f"TensorImpl({self.shape}, {self.dtype}, levels={self.levels}, {state})"


class Tensor:
    """A lazy n-dimensional array.

    Calling ops on tensors records a graph and computes shapes at once; values are computed
    when needed (``.numpy()``, ``.item()``, ``print``, ``nb.realize``).
    """

    __slots__ = ("_impl", "__weakref__")
    __array_priority__ = 1000  # make ``ndarray * Tensor`` defer to Tensor

    def __init__(self, value=None, *, dtype=None, device=None):
        from ..ops.creation import _constant_impl

        self._impl = _constant_impl(value, dtype, device)
        self._impl.wrapper = weakref.ref(self)

    @classmethod
    def _wrap(cls, impl: TensorImpl) -> Tensor:
        t = object.__new__(cls)
        t._impl = impl
        if impl.wrapper is None or impl.wrapper() is None:
            impl.wrapper = weakref.ref(t)
        return t

    # ------------------------------------------------------------------ metadata
    @property
    def shape(self) -> tuple:
        """Logical shape (vmap batch dims hidden), a tuple of Python ints."""
        impl = self._impl
        n = len(impl.levels)
        return impl.shape[n:] if n else impl.shape

    @property
    def dtype(self) -> DType:
        return self._impl.dtype

    @property
    def device(self) -> Device:
        return self._impl.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    rank = ndim

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def sharding(self):
        return self._impl.sharding

    @property
    def is_realized(self) -> bool:
        return self._impl.buffer is not None

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ------------------------------------------------------------------ autodiff state
    @property
    def requires_grad(self) -> bool:
        """True for a ``requires_grad`` leaf and for anything computed from one (PyTorch)."""
        impl = self._impl
        return impl.requires_grad or 0 in impl.traced

    @requires_grad.setter
    def requires_grad(self, value: bool):
        value = bool(value)
        if value and not (self.dtype.is_float):
            raise TypeError(f"requires_grad needs a float tensor, got {self.dtype}")
        self._impl.requires_grad = value
        if value:
            self._impl.traced = self._impl.traced | {0}

    def requires_grad_(self, value: bool = True) -> Tensor:
        self.requires_grad = value
        return self

    @property
    def grad(self):
        g = self._impl.grad
        return None if g is None else Tensor._wrap(g)

    @grad.setter
    def grad(self, value):
        self._impl.grad = None if value is None else value._impl

    # ------------------------------------------------------------------ realization
    def realize(self) -> Tensor:
        """Compute this tensor's value now (and any pending tensor it needs). Returns self."""
        from .graph import GRAPH

        if self._impl.buffer is None:
            GRAPH.evaluate([self._impl])
        return self

    def numpy(self) -> np.ndarray:
        """The value as a NumPy array (computes it if needed)."""
        impl = self._impl
        if impl.levels:
            raise ValueError(
                "cannot convert a tensor batched by vmap to NumPy inside the vmapped function "
                f"(logical shape {self.shape}, batch levels {impl.levels})"
            )
        self.realize()
        from .graph import to_numpy

        return to_numpy(impl)

    to_numpy = numpy

    def item(self):
        """The value of a one-element tensor as a Python scalar."""
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        if dtype is not None:
            a = a.astype(dtype)
        return a

    def __dlpack__(self, *args, **kwargs):
        return np.ascontiguousarray(self.numpy()).__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.numpy().__dlpack_device__()

    def __bool__(self):
        if self.size != 1:
            raise ValueError(
                f"the truth value of a tensor with shape {self.shape} is ambiguous; "
                "use .any() or .all()"
            )
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if not (self.dtype.is_int or self.dtype.is_bool):
            raise TypeError(f"only integer tensors can be used as an index, got {self.dtype}")
        return int(self.item())

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self[i]

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        impl = self._impl
        meta = f"dtype={self.dtype.value}, shape={self.shape}"
        if impl.sharding is not None:
            meta += f", sharding={impl.sharding}"
        if impl.levels:
            return f"Tensor(<batched by vmap levels {impl.levels}>, {meta})"
        if impl.tangents:
            meta += ", has_tangent"
        body = np.array2string(self.numpy(), separator=", ", prefix="Tensor(")
        return f"Tensor({body}, {meta})"

    __str__ = __repr__
