"""``Tensor``: the user's handle on a ``TensorImpl`` (``nabla.core.ir``).

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
  attached from one table in ``nabla.ops.methods``; the ones that need transforms
  (``backward``, ``detach``) from the top level.
"""

from __future__ import annotations

import math
import numbers
import sys
import weakref

import ml_dtypes
import numpy as np

from ..backends import buffer_to_numpy, max_backend, mpi
from ..backends.numpy import lowerings as numpy_backend
from ..core.device import Device, get_default_device
from ..core.dtypes import DType, from_numpy_dtype, get_default_dtype, to_dtype
from ..core.ir import RETAIN, SymDim, TensorImpl, note_size_decision
from ..core.pytree import tree_leaves
from ..core.state import REQUIRES_GRAD, STATE, is_live
from .graph import GRAPH

__all__ = ["Tensor", "constant_impl", "numpy_value", "realize"]


_INT_RANGES = {
    d: (int(np.iinfo(d.numpy).min), int(np.iinfo(d.numpy).max)) for d in DType if d.is_int
}


def int_range(dtype: DType) -> tuple[int, int]:
    """``(min, max)`` of an integer ``dtype``."""
    return _INT_RANGES[dtype]


def out_of_range_error(op: str, value, dtype: DType, inferred: bool = False) -> OverflowError:
    """The error for a Python int ``value`` that ``dtype`` (an integer dtype) cannot hold,
    naming the op, the value and the dtype's range; ``inferred``: nabla chose ``dtype``."""
    lo, hi = int_range(dtype)
    if inferred:
        i64_lo, i64_hi = int_range(DType.int64)
        hint = "Python ints become int32 unless a dtype is given; "
        hint += (
            "pass dtype=nb.int64 or a float dtype"
            if i64_lo <= value <= i64_hi
            else "pass a float dtype (it is out of int64's range too)"
        )
    elif dtype is DType.int64:
        hint = "use a float dtype"
    else:
        hint = "use a wider integer or a float dtype"
    return OverflowError(
        f"{op}: the value {value} is out of range for {dtype.value} ({lo} to {hi}); {hint}"
    )


def _first_out_of_range(value, dtype: DType):
    """The first Python int in the nested lists ``value`` that ``dtype`` cannot hold."""
    lo, hi = int_range(dtype)
    for v in np.asarray(value, dtype=object).ravel():
        if isinstance(v, int | np.integer) and not isinstance(v, bool) and not lo <= v <= hi:
            return int(v)
    return None


def _check_int_range(op: str, value, dtype: DType, inferred: bool) -> None:
    bad = _first_out_of_range(value, dtype)
    if bad is not None:
        raise out_of_range_error(op, bad, dtype, inferred)


def foreign_array(value) -> np.ndarray:
    """Another framework's array (JAX, PyTorch) as a NumPy array of its dtype. A PyTorch
    tensor is read through ``detach`` (one that requires grad has no NumPy view of its
    own), and a bfloat16 one, which NumPy cannot read, through its bits (``ml_dtypes``'
    bfloat16)."""
    if not isinstance(value, np.ndarray) and callable(getattr(value, "detach", None)):
        value = value.detach()  # (PyTorch's, by duck typing)
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            bits = value.cpu().contiguous().view(sys.modules["torch"].int16)
            return np.asarray(bits).view(ml_dtypes.bfloat16)
    return np.asarray(value)


def borrowed(buffer) -> bool:
    """Whether a NumPy buffer's memory belongs to something other than NumPy (another
    library's array imported by ``from_dlpack``, a memory map): its chain of bases ends in
    an object that is not an array, whose owner may write to it. A copy of a tensor
    (``clone``, ``copy.deepcopy``, a loaded ``state_dict``) then copies the memory, which
    it otherwise shares, since a tensor's own buffers never change."""
    if not isinstance(buffer, np.ndarray):
        return False
    base = buffer.base
    while isinstance(base, np.ndarray):
        buffer, base = base, base.base
    return base is not None


def owned_buffer(buffer):
    """``buffer``, or a copy of it when its memory is ``borrowed``."""
    return np.array(buffer) if borrowed(buffer) else buffer


def owned(t: Tensor) -> Tensor:
    """``t``, or when its computed value lies in ``borrowed`` memory, a new tensor with a
    copy of it and no history: what a model keeps of a loaded ``state_dict``. (A value
    not computed yet is left so: computing it here would cost an evaluation per
    parameter, and end a compile trace.)"""
    impl = t._impl
    if impl.levels or not borrowed(impl.buffer):
        return t
    return Tensor._from_buffer(impl.shape, impl.dtype, impl.device, np.array(impl.buffer))


def _has_history(impl: TensorImpl) -> bool:
    """Is the value computed from a ``requires_grad`` leaf (not a leaf itself)?"""
    if impl.requires_grad or REQUIRES_GRAD not in impl.traced or impl.node is None:
        return False
    return any(REQUIRES_GRAD in i.traced for i in impl.node.inputs)


class GradFn:
    """What ``x.grad_fn`` shows of the op that made ``x`` (PyTorch's autograd node):
    ``name()`` (``"MulBackward0"``) and ``next_functions``, one ``(GradFn or None, 0)``
    pair per input (None for a leaf or an input nothing differentiates, where PyTorch has
    its ``AccumulateGrad``)."""

    __slots__ = ("_node",)

    def __init__(self, node):
        self._node = node

    def name(self) -> str:
        """The op's name in PyTorch's style, ``<Op>Backward0``."""
        op = self._node.op.name
        return "".join(part.capitalize() for part in op.split("_")) + "Backward0"

    @property
    def next_functions(self) -> tuple:
        """One ``(GradFn or None, 0)`` per input of the op."""
        return tuple(
            (GradFn(impl.node) if _has_history(impl) else None, 0) for impl in self._node.inputs
        )

    def __repr__(self) -> str:
        return f"<{self.name()} object>"


def read_only_view(a: np.ndarray) -> np.ndarray:
    """A view of ``a`` that cannot be made writeable: its base is a read-only memoryview,
    so ``setflags(write=True)`` raises, as on JAX's arrays. (A plain view with the flag
    cleared can be set writeable again whenever its base is, and a write would then change
    a tensor's value under every copy and lazy op sharing the buffer.)"""
    if a.dtype.hasobject:  # (no buffer protocol for objects: the flag is what there is)
        view = a.view()
        view.flags.writeable = False
        return view
    try:
        return np.asarray(memoryview(a).toreadonly())
    except (ValueError, TypeError, BufferError):  # a dtype the protocol lacks (bfloat16)
        bits = a.view(np.dtype(f"V{a.dtype.itemsize}"))
        return np.asarray(memoryview(bits).toreadonly()).view(a.dtype)


def numpy_value(value, dtype: DType | None, op: str = "constant") -> np.ndarray:
    """``value`` as a NumPy array of ``dtype``, or of the dtype nabla infers for it
    (bool -> bool, int -> int32, float -> the default float; arrays keep theirs).

    Python ints (alone or in lists) that the integer dtype cannot hold raise
    ``OverflowError`` naming ``op`` (the op the user called), the value and the range;
    NumPy arrays are converted as ``astype`` does, into a copy: the tensor never shares
    memory with the caller's array (as ``jnp.array``/``torch.tensor``), so writing to the
    array later changes neither the tensor nor a lazy op reading it (``from_dlpack``
    shares)."""
    if isinstance(value, Tensor):
        value = value.numpy()
    elif hasattr(value, "__array__") and not isinstance(value, np.ndarray | np.generic):
        value = foreign_array(value)  # a JAX or PyTorch array keeps its dtype
    if isinstance(value, np.ndarray | np.generic):
        return _array_copy(value, dtype)
    if dtype is not None:
        return _python_value(op, value, dtype)
    if isinstance(value, bool):
        return _python_value(op, value, DType.bool)
    if isinstance(value, int):
        if not -2147483648 <= value <= 2147483647:
            raise out_of_range_error(op, value, DType.int32, inferred=True)
        return np.asarray(value, dtype=np.int32)
    if isinstance(value, float):
        return _python_value(op, value, get_default_dtype())
    return _infer_array(op, value)


def _array_copy(value, dtype: DType | None) -> np.ndarray:
    """A NumPy array or scalar as a new array of ``dtype`` (default: its own)."""
    arr = np.asarray(value)
    target = from_numpy_dtype(arr.dtype) if dtype is None else dtype
    return np.array(arr, dtype=target.numpy, copy=True)


def _python_value(op: str, value, dtype: DType) -> np.ndarray:
    """A Python scalar or nested lists of them as an array of ``dtype``; a value of another
    kind, or one ``dtype`` cannot hold, raises an error naming ``op``."""
    if value is None or isinstance(value, str | bytes):
        raise TypeError(
            f"{op}: cannot make a tensor from {type(value).__name__} {value!r:.80}; supported: "
            "bool, int and float values, nested lists of them, NumPy arrays and tensors"
        )
    if type(value) is int and dtype.is_int:
        lo, hi = int_range(dtype)
        if not lo <= value <= hi:
            raise out_of_range_error(op, value, dtype)
    if type(value) is int and dtype.is_float:
        value = float(value)  # (ml_dtypes' bfloat16 takes no int beyond int64)
    try:
        return np.asarray(value, dtype=dtype.numpy)
    except OverflowError:
        if dtype.is_int:
            _check_int_range(op, value, dtype, inferred=False)
        raise OverflowError(
            f"{op}: {type(value).__name__} {value!r:.80} does not fit in {dtype.value}"
        ) from None
    except (TypeError, ValueError) as e:
        kind = TypeError if isinstance(e, TypeError) else ValueError
        raise kind(
            f"{op}: cannot make a {dtype.value} tensor from {type(value).__name__} "
            f"{value!r:.80}: {e}"
        ) from None


def _infer_array(op: str, value) -> np.ndarray:
    """A nested list (or other non-scalar Python value) as an array of the inferred dtype."""
    try:
        arr = np.asarray(value)
    except ValueError as e:
        raise ValueError(
            f"{op}: cannot make a tensor from {type(value).__name__} {value!r:.80}: {e}"
        ) from None
    kind = arr.dtype.kind
    typed = kind in "biuf" or arr.dtype.name == "bfloat16"  # (ml_dtypes' kind is "V")
    if typed and arr.size and _typed_leaves_only(value):
        return np.asarray(arr, dtype=from_numpy_dtype(arr.dtype).numpy)  # they keep theirs
    if kind == "O" and arr.size and all(_is_real(v) for v in arr.ravel()):
        # Python ints beyond int64 make NumPy fall back to objects
        if any(isinstance(v, float | np.floating) for v in arr.ravel()):
            kind = "f"
        else:
            _check_int_range(op, arr, DType.int32, inferred=True)
            kind = "i"
    if kind == "b":
        dtype = DType.bool
    elif kind in "iu":
        dtype = DType.int32
        if arr.size and (arr.min() < -2147483648 or arr.max() > 2147483647):
            _check_int_range(op, value, dtype, inferred=True)
    elif kind == "f":
        dtype = get_default_dtype()
    else:
        raise TypeError(
            f"{op}: cannot make a tensor from {type(value).__name__} "
            f"(NumPy sees dtype {arr.dtype}); supported: bool, int and float values, "
            "nested lists of them, NumPy arrays and tensors"
        )
    try:
        return np.asarray(arr, dtype=dtype.numpy)
    except OverflowError:
        raise OverflowError(
            f"{op}: {type(value).__name__} {value!r:.80} does not fit in {dtype.value}"
        ) from None


def _typed_leaves_only(value) -> bool:
    """Nested lists whose every leaf carries a dtype: a NumPy scalar or array, a tensor (or
    another library's array) (``[np.uint8(1), np.uint8(2)]``, ``[a_f16, b_f16]``): NumPy's
    dtype for them stands, as in NumPy and JAX (a Python number's would not)."""
    if isinstance(value, list | tuple):
        return all(_typed_leaves_only(v) for v in value)
    if isinstance(value, np.generic | np.ndarray):
        return True
    return (
        not isinstance(value, numbers.Number)
        and hasattr(value, "dtype")
        and hasattr(value, "shape")
    )


def _is_real(v) -> bool:
    return isinstance(v, bool | int | float | np.bool_ | np.integer | np.floating)


def constant_impl(value, dtype=None, device=None, op: str = "constant") -> TensorImpl:
    """A realized ``TensorImpl`` holding ``value`` (Python value, NumPy array or Tensor);
    conversion errors name ``op``, the op the user called."""
    dtype = None if dtype is None else to_dtype(dtype, op)
    arr = numpy_value(value, dtype, op)
    device = device or get_default_device()
    impl = TensorImpl(arr.shape, from_numpy_dtype(arr.dtype), device, buffer=arr)
    if not device.is_cpu:
        mx = max_backend()
        if mx is None:
            raise RuntimeError("Accelerator tensors need the MAX backend: pip install 'nabla[max]'")
        impl.buffer = mx.to_device(arr, device)
    return impl


def _outside_bodies(what: str) -> None:
    """A loop or branch body is traced once and runs as one op: a hook on a value inside
    it would never see a gradient (refused, as its in-place updates of outside tensors)."""
    if STATE.body_writes is not None:
        raise RuntimeError(
            f"{what} inside a scan/fori_loop/while_loop/cond body: the body runs as one op, "
            "so its values' gradients are never seen one by one; call it on the loop's "
            "results (or inputs) outside the body"
        )


class HookHandle:
    """What ``Tensor.register_hook`` and ``Module.register_forward_hook`` return (PyTorch's
    ``RemovableHandle``): ``remove()`` unregisters the hook, once (a second call does
    nothing); as a context manager, the hook is removed at the block's end."""

    __slots__ = ("_undo",)

    def __init__(self, undo):
        self._undo = undo  # what unregistering takes; None once done

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        """Unregister the hook (nothing if it is gone already)."""
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()


class TensorSet:
    """Tensors marked by identity, held weakly (a tensor's ``==`` is elementwise, so it
    cannot be a set member): ``add(t)``, ``t in marks``."""

    __slots__ = ("_by_id",)

    def __init__(self):
        self._by_id: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def add(self, t) -> None:
        self._by_id[id(t)] = t

    def __contains__(self, t) -> bool:
        return self._by_id.get(id(t)) is t


class Tensor:
    """A lazy n-dimensional array.

    Calling ops on tensors records a graph and computes shapes at once; values are computed
    when needed (``.numpy()``, ``.item()``, ``print``, ``nb.realize``).

    ``Tensor(value)`` makes a realized tensor, as :func:`nabla.constant` does.

    Args:
        value: a Python scalar, nested list of them, NumPy array or tensor (Python ``bool``
            -> bool, ``int`` -> int32, ``float`` -> the default float dtype; arrays keep theirs).
        dtype: the dtype to convert to (default: inferred from ``value``).
        device: the device to place it on (default: :func:`nabla.get_default_device`).

    Raises:
        TypeError: for values of other kinds or an unknown ``dtype``.
        ValueError: for ragged nested lists.

    Example:
        >>> nb.Tensor([1.0, 2.0]).shape
        (2,)
    """

    # ``_base``: set on a PyTorch-style view (``x[0]``, ``x.view(-1)``, ``x.T``) to
    # ``(x, where)``; an in-place method or assignment on the view writes through to ``x``
    # (``ops.indexing.write_through``). ``_views``: on ``x``, weak references to its views,
    # which an in-place change of ``x`` gives their new value (``ops.indexing.rebind``).
    # Unset on every other tensor.
    __slots__ = ("_impl", "_base", "_views", "__weakref__")
    __array_priority__ = 1000  # make ``ndarray * Tensor`` defer to Tensor

    def __init__(self, value=None, *, dtype=None, device=None):
        self._impl = constant_impl(value, dtype, device)
        self._impl.wrapper = weakref.ref(self)

    # ------------------------------------------------------------------ copying
    def __deepcopy__(self, memo) -> Tensor:
        """A new tensor with this one's value (computed now), dtype, device, sharding,
        ``requires_grad`` and ``.grad`` (copied), and no history: ``copy.deepcopy(model)``
        makes independent parameters (an EMA or target network). Values are never changed
        in place, so the copy shares the computed buffer, unless that buffer is another
        library's memory (``from_dlpack``): then it is copied. A tensor computed from one
        that requires grad (not a leaf) is refused, as PyTorch refuses it."""
        return self._copied("deepcopy", memo)

    def __copy__(self) -> Tensor:
        """``copy.copy``: as :meth:`__deepcopy__`, without the gradient (PyTorch's copy and
        pickle drop ``.grad``)."""
        return self._copied("copy", None)

    def _copied(self, how: str, memo) -> Tensor:
        impl = self._impl
        if impl.levels:
            raise TypeError(
                f"{how} of a tensor batched by vmap (logical shape {self.shape}) inside "
                "the vmapped function; copy it outside"
            )
        if self._has_history():
            raise RuntimeError(
                f"{how} of a tensor computed from one that requires grad (not a leaf, shape "
                f"{self.shape}): only leaves can be copied, as in PyTorch; copy "
                "x.detach(), or the leaves it was computed from"
            )
        self.realize()
        buffer = owned_buffer(impl.buffer)
        new = Tensor._from_buffer(impl.shape, impl.dtype, impl.device, buffer, impl.sharding)
        new._impl.made = impl.made
        if impl.requires_grad:
            new.requires_grad = True
        if memo is not None:
            memo[id(self)] = new
            if impl.grad is not None:  # as PyTorch's: the copy keeps a copy of the gradient
                new._impl.grad = impl.grad._copied(how, memo)
        return new

    def __reduce__(self):
        """Pickling keeps the value (computed now), the dtype and ``requires_grad`` (a
        float value computed from a ``requires_grad`` leaf unpickles as a leaf that
        requires grad, as PyTorch's); the unpickled tensor is on the default device. A
        tensor sharded over a mesh of this process keeps its layout (its devices' blocks,
        a partial sum's terms too); over a mesh that spans processes, the whole value is
        kept, unsharded."""
        impl = self._impl
        if impl.levels:
            raise TypeError(
                f"cannot pickle a tensor batched by vmap (logical shape {self.shape}) inside "
                "the vmapped function"
            )
        grad = self.requires_grad  # (a value computed from a leaf too: PyTorch's flag)
        if impl.sharding is not None and not impl.sharding.mesh.spans_processes:
            self.realize()
            blocks = np.array(buffer_to_numpy(impl.buffer))
            return (_unpickled_blocks, (blocks, impl.shape, impl.dtype, impl.sharding, grad))
        return (_unpickled, (np.array(self.numpy()), grad))

    @classmethod
    def _from_buffer(cls, shape, dtype, device, buffer, sharding=None) -> Tensor:
        """A realized tensor holding ``buffer`` (a backend value laid out as ``sharding``
        says: a process's blocks, or the whole value for None), made by no op: no graph
        node, no history."""
        impl = TensorImpl(shape, dtype, device, (), None, 0, buffer)  # (positional: quicker)
        impl.sharding = sharding
        t = object.__new__(cls)  # (``_wrap``, inlined: a new impl has no wrapper yet)
        t._impl = impl
        impl.wrapper = weakref.ref(t)
        return t

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
        """Element type, a :class:`nabla.DType` (e.g. ``nb.float32``)."""
        return self._impl.dtype

    @property
    def device(self) -> Device:
        """The :class:`nabla.Device` the tensor lives on (``nb.CPU()`` or an Accelerator)."""
        return self._impl.device

    @property
    def ndim(self) -> int:
        """Number of (logical) dims, ``len(x.shape)``; also ``x.rank``."""
        return len(self.shape)

    rank = ndim

    @property
    def size(self) -> int:
        """Number of elements, the product of ``x.shape`` (1 for a 0-d tensor)."""
        return math.prod(self.shape)  # exact Python ints; np.prod costs ~5 us a call

    def numel(self) -> int:
        """Number of elements, as PyTorch's and the original Nabla's ``x.numel()``: ``x.size``."""
        return self.size

    @property
    def itemsize(self) -> int:
        """Bytes per element (NumPy's and JAX's ``itemsize``)."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the logical value, ``size * itemsize`` (NumPy's and JAX's ``nbytes``)."""
        return self.size * self.dtype.itemsize

    @property
    def sharding(self):
        """The ``ShardingSpec`` of a sharded tensor (over its logical dims), else None."""
        s = self._impl.sharding
        n = len(self._impl.levels)
        return s if s is None or not n else s.drop_prefix(n)

    @property
    def is_realized(self) -> bool:
        """True once the value has been computed (False for a pending, lazy result)."""
        return self._impl.buffer is not None

    @property
    def real(self) -> bool:
        """``x.is_realized``, as the original Nabla spells it: True once the value has been
        computed, False for a pending, lazy result.

        Not NumPy's or PyTorch's real part: Nabla has no complex dtypes, so the real part of a
        tensor would be the tensor itself.
        """
        return self._impl.buffer is not None

    @property
    def is_sharded(self) -> bool:
        """True for a tensor held as blocks on a device mesh (``x.sharding`` is set, even when
        every device holds the whole value), False for one on a single device."""
        return self._impl.sharding is not None

    @property
    def op_kwargs(self) -> dict:
        """The keyword arguments of the op that produced this tensor, as a new dict.

        Known while the tensor still records its op: a pending result, or one with autodiff
        history (``x.is_traced``). Empty for a leaf (made from data) and for a realized value
        whose op was dropped.
        """
        node = self._impl.node
        return {} if node is None else dict(node.kwargs)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        n = self.shape[0]
        if isinstance(n, SymDim):  # len() returns a plain int: the size as a number
            note_size_decision(n, "len()")
        return n

    # ------------------------------------------------------------------ autodiff state
    @property
    def requires_grad(self) -> bool:
        """True for a ``requires_grad`` leaf and for any float value computed from one
        (PyTorch's: an integer or bool result, ``x > 0`` or ``x.argmax()``, has no
        gradient)."""
        impl = self._impl
        return impl.requires_grad or (0 in impl.traced and impl.dtype.is_float)

    @requires_grad.setter
    def requires_grad(self, value: bool):
        if not isinstance(value, bool | np.bool_):  # PyTorch's check ("yes" was True)
            raise TypeError(f"requires_grad must be a bool, got {value!r}")
        value = bool(value)
        if value and not (self.dtype.is_float):
            raise TypeError(f"requires_grad needs a float tensor, got {self.dtype}")
        if self._has_history():
            raise RuntimeError(
                f"requires_grad can only be changed on a leaf, as in PyTorch: this "
                f"{self.dtype} tensor of shape {self.shape} was computed from a requires_grad "
                "tensor (marking it would cut it from that graph); use x.detach() for a "
                "value without history, or x.requires_grad_(False) on the leaf"
            )
        was_leaf = self._impl.requires_grad
        self._impl.requires_grad = value
        if value:
            self._impl.traced = self._impl.traced | {0}
        elif was_leaf:  # a leaf stops requiring grad (in place, as PyTorch)
            self._impl.traced = self._impl.traced - {0}

    @property
    def is_traced(self) -> bool:
        """True when the tensor carries autodiff history that a live differentiation can walk
        back through: a ``requires_grad`` leaf or anything computed from one, a value inside
        ``nb.grad``/``nb.vjp`` that depends on the differentiated inputs, or a tensor marked
        with :meth:`Tensor.trace`. The ops on a traced tensor keep their graph after
        realization, so :meth:`Tensor.backward` can reach it.

        Assigning True marks the tensor (as :meth:`Tensor.trace`) without making it a leaf
        whose ``.grad`` :meth:`Tensor.backward` fills (that is ``requires_grad``); as in
        PyTorch, a tensor with history reports ``requires_grad`` True. Assigning False cuts it
        from the :meth:`Tensor.backward` graph in place (a running transform's history stays).
        """
        return is_live(self._impl.traced)

    @is_traced.setter
    def is_traced(self, value: bool):
        impl = self._impl
        if value:
            impl.traced = impl.traced | {REQUIRES_GRAD}
        else:
            impl.requires_grad = False
            impl.traced = impl.traced - {REQUIRES_GRAD}

    def trace(self) -> Tensor:
        """Mark the tensor as traced (``x.is_traced = True``) and return it, as the original
        Nabla's ``x.trace()``: the ops applied to it keep their graph for autodiff.

        Not PyTorch's ``trace`` (the sum of a matrix's diagonal): for that use
        ``nb.einsum("ii->", x)``.

        Returns:
            This tensor.
        """
        self.is_traced = True
        return self

    def requires_grad_(self, value: bool = True) -> Tensor:
        """Set ``requires_grad`` in place (PyTorch's ``requires_grad_``) and return ``self``.

        Args:
            value: True (default) to make the tensor a leaf whose gradient
                :meth:`Tensor.backward` accumulates into ``.grad``; False to stop.

        Returns:
            This tensor.

        Raises:
            TypeError: for ``value=True`` on a tensor that is not float.
            RuntimeError: for ``value=False`` on a tensor computed from a ``requires_grad``
                one (``value=True`` there changes nothing, as in PyTorch).
        """
        if not (value and self._has_history()):
            self.requires_grad = value
        return self

    @property
    def is_leaf(self) -> bool:
        """PyTorch's ``is_leaf``: False for a tensor computed from a ``requires_grad`` one
        (its ``.grad`` stays None), True for every other."""
        return not self._has_history()

    @property
    def grad_fn(self):
        """PyTorch's ``grad_fn``: None for a leaf (or a value no ``requires_grad`` tensor
        reaches), else the :class:`GradFn` of the op that made this value."""
        return GradFn(self._impl.node) if self._has_history() else None

    def _has_history(self) -> bool:
        """Computed from a ``requires_grad`` leaf (not a leaf itself)?"""
        return _has_history(self._impl)

    @property
    def grad(self):
        """The gradient accumulated by :meth:`Tensor.backward` (None until then).

        Realized and detached. Assign None to reset it (``x.grad = None``), as in PyTorch.
        The same tensor object on every read: an in-place method on it (``x.grad.zero_()``)
        changes the gradient, and a later ``backward`` accumulates into that object.
        """
        return self._impl.grad

    @grad.setter
    def grad(self, value):
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"grad: expected a Tensor or None, got {type(value).__name__}")
        if value is not None and (value.shape != self.shape or value.dtype is not self.dtype):
            # (PyTorch's checks: backward would accumulate into it as if it fitted)
            raise ValueError(
                f"grad: the gradient of a {self.dtype.value}{list(self.shape)} tensor must be "
                f"{self.dtype.value}{list(self.shape)}, got {value.dtype.value}"
                f"{list(value.shape)}"
            )
        # the handle itself, as PyTorch keeps it: ``p.grad.zero_()``, ``g = p.grad;
        # g.mul_(s)`` change the gradient the optimizer reads
        self._impl.grad = value

    def register_hook(self, hook) -> HookHandle:
        """Call ``hook(grad)`` with this tensor's gradient whenever reverse mode computes it
        (``backward``, ``nb.grad``), as PyTorch's ``register_hook``: a tensor it returns
        replaces the gradient (for a leaf, before it is accumulated into ``.grad``; for a
        computed tensor, before it flows on to the tensors it was computed from); None keeps
        it. Hooks run in the order they were registered, and stay with the tensor through
        in-place updates.

        Args:
            hook: a function of the gradient (a tensor of this tensor's shape and dtype).

        Returns:
            A handle whose ``remove()`` unregisters the hook.

        Raises:
            RuntimeError: for a tensor that does not require grad (nothing would call it),
                or inside a control-flow body.
        """
        if not callable(hook):
            raise TypeError(f"register_hook: expected a function, got {type(hook).__name__}")
        _outside_bodies("register_hook")
        if STATE.remat_forward and not self.requires_grad:  # the re-run registers it
            return HookHandle(None)
        if not self.requires_grad and not is_live(self._impl.traced):
            raise RuntimeError(
                f"register_hook: a {self.dtype.value}{list(self.shape)} tensor that does not "
                "require grad has no gradient to hook"
            )
        impl = self._impl
        impl.hooks = [*(impl.hooks or ()), hook]
        # a computed tensor's hook stays on this value; a leaf's moves with the tensor
        values = (weakref.ref(impl), weakref.ref(self))

        def undo():
            t = values[1]()
            for im in (values[0](), None if t is None else t._impl):
                hooks = None if im is None else im.hooks
                if hooks and any(h is hook for h in hooks):
                    im.hooks = [h for h in hooks if h is not hook] or None

        return HookHandle(undo)

    def retain_grad(self) -> None:
        """Keep this computed tensor's gradient in ``.grad`` when ``backward`` runs (as
        PyTorch's ``retain_grad``; a leaf's is kept anyway: a no-op there).

        Raises:
            RuntimeError: for a tensor that does not require grad, or inside a
                control-flow body.
        """
        _outside_bodies("retain_grad")
        if STATE.remat_forward and not self.requires_grad:  # (the re-run's values)
            return
        if not self.requires_grad:
            raise RuntimeError(
                f"retain_grad: a {self.dtype.value}{list(self.shape)} tensor that does not "
                "require grad has no gradient to keep"
            )
        impl = self._impl
        if not impl.requires_grad and RETAIN not in (impl.hooks or ()):
            impl.hooks = [*(impl.hooks or ()), RETAIN]

    @property
    def retains_grad(self) -> bool:
        """Does ``backward`` keep this computed tensor's gradient (:meth:`retain_grad`)?"""
        return RETAIN in (self._impl.hooks or ())

    # ------------------------------------------------------------------ realization
    def realize(self) -> Tensor:
        """Compute this tensor's value now (and any pending tensor it needs). Returns self."""
        if self._impl.buffer is None:
            GRAPH.evaluate([self._impl])
        return self

    @staticmethod
    def to_numpy_all(*tensors: Tensor) -> tuple:
        """The values of several tensors as NumPy arrays, computed in one evaluation (the
        original Nabla's ``Tensor.to_numpy_all``; ``nb.realize(*ts)`` then ``.numpy()``).

        Args:
            *tensors: the tensors to read.

        Returns:
            A tuple of read-only arrays, one per tensor (see :meth:`numpy`).
        """
        GRAPH.evaluate([t._impl for t in tensors if t._impl.buffer is None])
        return tuple(t.numpy() for t in tensors)

    def numpy(self) -> np.ndarray:
        """The value as a read-only NumPy array sharing the tensor's memory (computes it if
        needed), as JAX gives; ``np.array(t)`` makes a writable copy."""
        impl = self._impl
        if impl.levels:
            if any(lv in STATE.active_vmap for lv in impl.levels):
                raise ValueError(
                    "cannot convert a tensor batched by vmap to NumPy inside the vmapped "
                    f"function (logical shape {self.shape}, batch levels {impl.levels})"
                )
            raise ValueError(
                f"a tensor batched by a vmap that has finished (logical shape {self.shape}, "
                f"batch levels {impl.levels}) escaped it, through a closure, a container or "
                "an in-place update of a captured tensor; return it from the vmapped "
                "function instead"
            )
        self.realize()
        if STATE.value_reads is not None:  # compile is tracing: it checks what was read
            STATE.value_reads.append(impl)
        if impl.sharding is not None:
            return assemble(impl)
        # a read-only view, as JAX gives: a write would change this tensor's value under
        # every lazy op reading it (nb.asarray(t.numpy()) or np.array(t) copy it)
        return read_only_view(buffer_to_numpy(impl.buffer))

    to_numpy = numpy

    @property
    def addressable_shards(self) -> list:
        """One ``Shard`` per mesh device this process holds (as in JAX; every device in one
        process): ``.device`` (flat mesh index),
        ``.index`` (slices of the global value) and ``.data`` (that device's block, a
        read-only NumPy view, as JAX's immutable arrays: a write would change the tensor,
        and only one copy of a replicated block; for a partial value, that device's term).
        An unsharded tensor is one shard."""
        impl = self._impl
        if impl.levels:
            raise ValueError("addressable_shards is not available inside vmap")
        self.realize()
        spec = impl.sharding
        blocks = read_only_view(buffer_to_numpy(impl.buffer))
        if spec is None:
            full = (slice(None),) * len(impl.shape)
            return [Shard(0, full, blocks, 0)]
        mesh = spec.mesh
        origin = [o for o, _ in mesh.local_box] if mesh.spans_processes else [0] * mesh.ndim
        # as JAX: a dim no axis splits is ``slice(None)``; ``replica_id`` numbers the
        # devices holding the same block, along the axes that neither split nor hold terms
        size = dict(zip(mesh.axis_names, mesh.shape, strict=True))
        whole = [all(size[a] == 1 for a in axes) for axes in spec.dims]  # size-1 axes: whole
        copies = [
            k
            for k, a in enumerate(mesh.axis_names)
            if a not in spec.sharded_axes + spec.partial_axes
        ]
        shards = []
        for d in mesh.local_devices:
            coords = mesh.coords(d)
            index = tuple(
                slice(None) if w else s
                for w, s in zip(whole, spec.block_index(d, impl.shape), strict=True)
            )
            replica = 0
            for k in copies:
                replica = replica * mesh.shape[k] + coords[k]
            local = blocks[tuple(c - o for c, o in zip(coords, origin, strict=True))]
            shards.append(Shard(d, index, local, replica, spec.partial_kinds or None))
        return shards

    def item(self, *args):
        """The value of a one-element tensor as a Python scalar; with ``args``, NumPy's and
        JAX's ``x.item(i)`` (the element at flat index ``i``) or ``x.item(i, j, ...)`` (at
        those coordinates), of a tensor of any size.

        Args:
            *args: a flat index, or one index per dim (none for a one-element tensor).

        Returns:
            A Python scalar.

        Raises:
            IndexError: for an index out of range.
            ValueError: for a tensor of more than one element and no ``args``.
        """
        if args:
            try:
                return self.numpy().item(*args)
            except (IndexError, ValueError, TypeError) as e:
                raise type(e)(f"item{args}: {e} (tensor of shape {self.shape})") from None
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        """The value as nested Python lists (a Python scalar for a 0-d tensor); computes it.

        Example:
            >>> nb.constant([[1, 2]]).tolist()
            [[1, 2]]
        """
        return self.numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        if is_live(self._impl.traced - {REQUIRES_GRAD}):
            # (JAX's TracerArrayConversionError: np.exp(t) would give a constant, and the
            # gradient through it would silently be lost)
            raise TypeError(
                f"cannot convert a tensor that nb.grad/vjp/jacrev differentiates "
                f"({self.dtype.value} of shape {self.shape}) to a NumPy array inside the "
                "differentiated function (a NumPy function, np.asarray): its gradient would "
                "be lost; use nabla's ops (nb.exp, nb.sum, ...) there"
            )
        a = self.numpy()  # read-only: np.array(t) (copy=True) gets a writable copy
        if dtype is not None and np.dtype(dtype) != a.dtype:
            if copy is False:  # NumPy 2's protocol: refuse rather than copy
                raise ValueError(
                    f"__array__: a {self.dtype.value} tensor of shape {self.shape} cannot be "
                    f"read as {np.dtype(dtype)} without a copy (copy=False)"
                )
            return a.astype(dtype)
        return a.copy() if copy else a

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export the value through DLPack (``np/jnp/torch.from_dlpack(x)``).

        A copy, unless the consumer asks for none (``from_dlpack(t, copy=False)``): a
        tensor's value is read-only (as ``.numpy()``), and consumers that ignore DLPack
        1.0's read-only flag (PyTorch's) would otherwise hand out a writable alias of it.
        Without a copy the export is read-only (DLPack 1.0) and needs a C-contiguous host
        value. bfloat16 cannot cross (NumPy, which holds the value, has no DLPack
        bfloat16): the error says what to do instead.
        """
        if self.dtype is DType.bfloat16:
            raise BufferError(
                "DLPack export of a bfloat16 tensor (shape "
                f"{self.shape}): NumPy, which holds the value, cannot export bfloat16; cast "
                "first (t.cast(nb.float32)), or pass t.numpy() (ml_dtypes' bfloat16) to "
                "jnp.asarray"
            )
        a = self.numpy()
        if copy is False:
            if not a.flags.c_contiguous:
                raise BufferError(
                    f"DLPack export without a copy (copy=False) of a tensor of shape "
                    f"{self.shape} whose host value is not C-contiguous"
                )
        else:  # (never for 0-d: those are always contiguous, and stay 0-d)
            a = np.array(a, order="C", copy=True)
        kwargs = {"stream": stream}
        if max_version is not None:
            kwargs.update(max_version=max_version, dl_device=dl_device, copy=copy)
        return a.__dlpack__(**kwargs)

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

    def __format__(self, spec: str) -> str:
        # f"{loss:.4f}" formats the value of a 0-d tensor, as NumPy and JAX arrays do
        if not spec:
            return str(self)
        if self._impl.levels:
            raise TypeError("cannot format a tensor batched by vmap with a format spec")
        return format(self.numpy(), spec)

    def __index__(self):
        if not (self.dtype.is_int or self.dtype.is_bool):
            raise TypeError(f"only integer tensors can be used as an index, got {self.dtype}")
        return int(self.item())

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        n = self.shape[0]
        if isinstance(n, SymDim):  # as many rows as the size now: a decision on it
            note_size_decision(n, "iteration")
        for i in range(n):
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


class Shard:
    """One device's block of a tensor (``Tensor.addressable_shards``): ``device`` (flat
    mesh index), ``index`` (slices of the global value; ``slice(None)`` for a whole dim),
    ``data`` and ``replica_id`` (which copy of this block it is, as in JAX). ``partial``:
    None, or for a value held as partial terms (which JAX never shows) the mesh axes whose
    devices' terms make the block, each with its reduction (``{"tp": "sum"}``): ``data``
    is then this device's term, not ``value[index]``."""

    __slots__ = ("device", "index", "data", "replica_id", "partial")

    def __init__(self, device: int, index: tuple, data, replica_id: int = 0, partial=None):
        self.device = device
        self.index = index
        self.data = data
        self.replica_id = replica_id
        self.partial = partial

    def __repr__(self):
        terms = f", partial={self.partial}" if self.partial else ""
        return f"Shard(device={self.device}, index={self.index}, shape={self.data.shape}{terms})"


# impl -> (its buffer, its global value): a value gathered from every process once (partial
# sums completed) is kept, so reading it again needs no collective
_GATHERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def assemble(impl: TensorImpl) -> np.ndarray:
    """The global value of a realized sharded tensor, from its blocks (partial terms
    reduced), as a NumPy array.

    Across processes, a value this process holds whole (its devices span every mesh axis
    the value is split or partial over, e.g. a replicated one) is read locally; any other
    value is gathered from every process (a collective: all must call) once, then kept."""
    spec = impl.sharding
    mesh = spec.mesh
    blocks = buffer_to_numpy(impl.buffer)
    kw = {
        "ndev": mesh.ndim,
        "dims": tuple(tuple(mesh.axis(a) for a in d) for d in spec.dims),
        "partial": tuple((mesh.axis(a), k) for a, k in spec.partial),
    }
    if not mesh.spans_processes or _held_whole(mesh, spec):
        out = numpy_backend.mesh_unshard(blocks, **kw)
    else:
        kept = _GATHERED.get(impl)
        if kept is not None and kept[0] is impl.buffer:
            return kept[1]
        kw["mesh"] = mesh
        out = mpi.read_value(_read_label(impl), blocks, kw)
        out = read_only_view(np.asarray(out, dtype=impl.dtype.numpy))  # shared by later reads
        _GATHERED[impl] = (impl.buffer, out)
        return out
    return np.asarray(out, dtype=impl.dtype.numpy)


def _held_whole(mesh, spec) -> bool:
    """Whether this process's devices span every mesh axis ``spec`` splits a dim over or
    holds partial terms over (then its own blocks make the whole value)."""
    box = mesh.local_box
    axes = spec.sharded_axes + spec.partial_axes
    return all(box[mesh.axis(a)][1] == mesh.shape[mesh.axis(a)] for a in axes)


def _read_label(impl: TensorImpl) -> str:
    """The value being read, as the processes' agreement (and a mismatch error) names it."""
    spec = impl.sharding
    text = f"a {impl.dtype.value} value of shape {tuple(impl.shape)} sharded {spec}"
    if spec.partial:
        text += f" (its partial terms are completed: all_reduce over {spec.partial_axes})"
    made = impl.made_name
    if made is not None:  # which value: processes reading others in turn are caught
        text += f" made by program {made}"
    return text + " (.numpy()/.item()/print)"


def _unpickled(value: np.ndarray, requires_grad: bool) -> Tensor:
    """A pickled tensor rebuilt (``Tensor.__reduce__``)."""
    t = Tensor(value)
    if requires_grad:
        t.requires_grad = True
    return t


def _unpickled_blocks(blocks, shape, dtype, sharding, requires_grad: bool) -> Tensor:
    """A pickled sharded tensor rebuilt from its devices' blocks (``Tensor.__reduce__``)."""
    t = Tensor._from_buffer(shape, dtype, get_default_device(), blocks, sharding)
    if requires_grad:
        t.requires_grad = True
    return t


def realize(*tensors):
    """Compute the values of all given tensors in one graph (``nb.realize``).

    Args:
        *tensors: tensors or pytrees of tensors; with none, every pending tensor.

    Returns:
        The argument (one) or the tuple of arguments, now realized; None with no arguments.
    """
    if not tensors:
        GRAPH.realize_pending()
        return None
    leaves = [t._impl for t in tree_leaves(tensors) if isinstance(t, Tensor)]
    GRAPH.evaluate(leaves)
    return tensors[0] if len(tensors) == 1 else tensors
