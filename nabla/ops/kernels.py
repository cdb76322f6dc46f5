"""Custom Mojo kernels as ops: ``call_custom_kernel`` and ``CustomKernelOp`` (``custom_op``).

A custom kernel call is recorded like any op. Its backend op is ``custom_kernel``; the
physical kwargs carry everything a backend needs, all hashable and canonical (so programs
holding kernels are cached on disk like any other): the user-facing op name (``op``), the
registered kernel name (``kernel``), the package path and the sha256 of its content
(``package``, ``digest``), the physical output specs (``out_types``: ``(DType, shape)``
pairs, vmap batch dims first) and the kernel's compile-time parameters (``params``: sorted
``(name, value)`` pairs). The MAX backend precompiles the package once
(``backends/max/kernels.py``); the NumPy backend runs the op's NumPy reference, registered
in ``backends.kernels.NUMPY_REFERENCES`` under ``(op, kernel, digest)``.

Batching (vmap): ``batching="elementwise"`` (the default) declares that the kernel maps over
leading dims independently (true of elementwise kernels and of reductions over the last
axis), so the vmap batch dims are simply prefixed to every input and output. ``"loop"``
calls the kernel once per batch element (slices of the inputs) and stacks the results.

Sharding (not built yet): a custom op will declare the same split as its batching: an
``"elementwise"`` op is sharded along leading dims like an elementwise op; a ``"loop"`` op is
replicated (its inputs gathered on each device).
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

from ..backends.kernels import (
    NUMPY_REFERENCES,
    KernelLowering,
    KernelPackage,
    find_kernel,
    graph_kernel_call,
)
from ..core.dtypes import DType, to_dtype
from ..runtime.tensor import Tensor
from . import _util, batching
from .base import Operation, OpError
from .functions import provide

__all__ = ["ShapeDtype", "CustomKernelOp", "custom_op", "call_custom_kernel"]

_PROTOCOL_DOC = "the original Nabla's op-class protocol"


class ShapeDtype(NamedTuple):
    """The shape and dtype of a kernel output (or, in a shape rule, of an input).

    Attributes:
        shape: the logical shape, a tuple of ints.
        dtype: a nabla ``DType``.
    """

    shape: tuple
    dtype: DType


_PARAM_TYPES = (bool, int, float, str, DType)


def _is_spec(x) -> bool:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return True
    if isinstance(x, tuple | list) and len(x) == 2 and isinstance(x[0], tuple | list):
        if all(isinstance(d, numbers.Integral) for d in x[0]):
            try:
                to_dtype(x[1])
            except TypeError:
                return False
            return True
    return False


def _spec(op: str, x) -> ShapeDtype:
    if isinstance(x, tuple | list) and len(x) == 2 and not hasattr(x, "shape"):
        shape, dtype = x
    else:
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    try:
        return ShapeDtype(tuple(int(d) for d in shape), to_dtype(dtype))
    except (TypeError, ValueError):
        raise TypeError(
            f"{op}: an output type must be (shape, dtype), e.g. ((4, 5), nb.float32), or have "
            f".shape and .dtype; got {x!r}"
        ) from None


def out_specs(op: str, out_types) -> tuple[list[ShapeDtype], bool]:
    """``out_types`` as a list of specs, and whether it named a single output."""
    if _is_spec(out_types):
        return [_spec(op, out_types)], True
    if isinstance(out_types, tuple | list) and out_types:
        return [_spec(op, t) for t in out_types], False
    raise TypeError(
        f"{op}: out_types must be an output type (shape, dtype) or a non-empty list of them, "
        f"got {out_types!r}"
    )


class _KernelRef(NamedTuple):
    """The kernel a call runs: its registered name, the package (or list of packages) to
    find it in and its NumPy reference (None: none)."""

    name: str
    path: object
    numpy_fn: object


def _params(op: str, params: dict) -> tuple:
    for k, v in params.items():
        if not isinstance(v, _PARAM_TYPES):
            raise TypeError(
                f"{op}: kernel parameter {k}={v!r} ({type(v).__name__}) must be a bool, int, "
                "float, str or nabla DType (it is a compile-time parameter of the kernel)"
            )
    return tuple(sorted(params.items()))


class CustomKernelOp(Operation):
    """A Mojo kernel as a reusable op, with its own rules (``custom_op`` makes one).

    Instances are not entered in the built-in ``OPS`` registry (only ``call_custom_kernel``'s
    ``custom_kernel`` is); subclass it to override ``out_types``, ``vjp_rule`` or ``jvp_rule``
    as methods instead of passing functions.

    Args:
        name: the op's name (in errors and in the program).
        kernel_path: the kernel package (Mojo source directory or ``.mojoc``), or a list.
        kernel: the registered kernel name when not ``name``.
        out_types: the shape/dtype rule or fixed output type(s) (see ``custom_op``).
        numpy_fn: the NumPy reference run by the NumPy backend (optional).
        vjp: the reverse-mode rule (optional).
        jvp: the forward-mode rule (optional).
        batching: ``"elementwise"`` (default) or ``"loop"`` (see ``custom_op``).
        register: enter the op in ``OPS`` (only the built-in ``custom_kernel`` does).
    """

    # a kernel is written for whole tensors: operands are gathered to whole values first
    runs_sharded = False

    backend_name = "custom_kernel"
    arity = None
    multiple_results = True
    physical = True

    def __init__(
        self,
        name: str,
        kernel_path=None,
        *,
        kernel: str | None = None,
        out_types=None,
        numpy_fn=None,
        vjp=None,
        jvp=None,
        batching: str = "elementwise",
        register: bool = False,
    ):
        self.name = name
        self.kernel = kernel or name
        self.kernel_path = kernel_path
        self._out_types = out_types
        self.numpy_fn = numpy_fn
        self._vjp = vjp
        self._jvp = jvp
        if batching not in ("elementwise", "loop"):
            raise ValueError(
                f"custom op {name!r}: batching must be 'elementwise' or 'loop', got {batching!r}"
            )
        self.batching = batching
        if register:
            super().__init__()
        else:
            self.backend_name = "custom_kernel"

    def __repr__(self):
        return f"<custom op {self.name} (kernel {self.kernel!r})>"

    # ------------------------------------------------------------------ the call
    def __call__(self, *args, **params):
        """Run the kernel on tensors ``args`` with compile-time kernel parameters ``params``."""
        tensors = [_util.as_tensor(a, op=self.name) for a in args]
        specs = [ShapeDtype(tuple(t.shape), t.dtype) for t in tensors]
        outs, single = self.out_types(specs, **params)
        kernel = _KernelRef(self.kernel, self.kernel_path, self.numpy_fn)
        results = self._record(tensors, kernel, outs, params)
        return results[0] if single else results

    def out_types(self, specs: list[ShapeDtype], **params):
        """The shape/dtype rule: ``(list of output ShapeDtype, single)`` for inputs ``specs``.

        The default (no ``out_types`` given) is elementwise: every input has the shape and
        dtype of the first, and so has the one output."""
        rule = self._out_types
        if rule is None:
            if not specs:
                raise OpError(f"{self.name}: takes at least one tensor")
            first = specs[0]
            if any(s != first for s in specs[1:]):
                got = ", ".join(f"{s.dtype.value}{tuple(s.shape)}" for s in specs)
                raise OpError(
                    f"{self.name}: an elementwise custom op takes inputs of one shape and dtype, "
                    f"got {got} (give the op an out_types rule for anything else)"
                )
            return [first], True
        if callable(rule):
            rule = rule(*specs, **params)
        return out_specs(self.name, rule)

    def _record(self, tensors, kernel: _KernelRef, outs, params):
        label = self.name if self is not _CALL else "call_custom_kernel"
        # one-off calls get their own op name: a custom_op named like the kernel keeps its
        # NumPy reference (references are keyed by op, kernel and package digest)
        kwargs_op = self.name if self is not _CALL else f"call_custom_kernel({kernel.name!r})"
        pkg = find_kernel(kernel.name, kernel.path, caller=label)
        if kernel.numpy_fn is not None:
            NUMPY_REFERENCES[(kwargs_op, kernel.name, pkg.digest)] = kernel.numpy_fn
        kwargs = {
            "op": kwargs_op,
            "kernel": kernel.name,
            "package": str(pkg.path),
            "digest": pkg.digest,
            "out_types": tuple((s.dtype, s.shape) for s in outs),
            "params": _params(self.name, params),
        }
        return self.apply(tensors, kwargs)

    def apply(self, tensors: list[Tensor], kwargs: dict) -> list:
        """Bind, or call once per batch element for a ``"loop"`` op under vmap."""
        if self.batching == "loop" and any(t._impl.levels for t in tensors):
            return batching.bind_per_example(self, list(tensors), kwargs, kwargs["out_types"])
        return self.bind(list(tensors), kwargs)

    def replay(self, args, kwargs):
        """``compile``'s replay path (it may replay under vmap)."""
        return self.apply(list(args), kwargs)

    # ------------------------------------------------------------------ pipeline hooks
    def infer(self, shapes, dtypes, kwargs):
        specs = kwargs["out_types"]
        return [tuple(s) for _, s in specs], [dt for dt, _ in specs]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        phys = dict(kwargs)
        phys["out_types"] = tuple(
            (dt, tuple(batch_shape) + tuple(s)) for dt, s in phys["out_types"]
        )
        return phys

    # ------------------------------------------------------------------ rules
    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        cts = self._user_rule("vjp", primals, cotangents, outputs, kwargs)
        if len(cts) != len(primals):
            raise OpError(
                f"custom op {kwargs['op']!r}: its vjp returned {len(cts)} cotangent(s) for "
                f"{len(primals)} input(s)"
            )
        return cts

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return self._user_rule("jvp", primals, tangents, outputs, kwargs)

    def _user_rule(self, which, primals, others, outputs, kwargs) -> list:
        """The result of the rule ``which`` (``"vjp"``/``"jvp"``) given to ``custom_op``, on
        the primals, the cotangents or tangents and the outputs, with the call's kernel
        parameters."""
        rule = self._vjp if which == "vjp" else self._jvp
        if rule is None:
            mode = "reverse" if which == "vjp" else "forward"
            raise NotImplementedError(
                f"custom op {kwargs['op']!r} (kernel {kwargs['kernel']!r}) has no {which} rule: "
                f"give it one (custom_op(..., {which}=...)) to differentiate through it in "
                f"{mode} mode"
            )
        return list(rule(list(primals), list(others), list(outputs), **dict(kwargs["params"])))


def custom_op(
    name: str,
    kernel_path,
    *,
    kernel: str | None = None,
    out_types=None,
    numpy_fn=None,
    vjp=None,
    jvp=None,
    batching: str = "elementwise",
) -> CustomKernelOp:
    """Make a Mojo kernel a reusable op that works with grad, vmap and compile.

    Example:
        >>> softplus = nb.custom_op("softplus", "examples/custom_kernels",
        ...     numpy_fn=lambda x: np.logaddexp(0, x),
        ...     vjp=lambda p, ct, out: [softplus_jvp(p[0], ct[0])])
        >>> y = softplus(x)

    Args:
        name: the op's name (in errors); also the kernel's registered name by default.
        kernel_path: the kernel package: a Mojo source directory (``__init__.mojo`` plus the
            kernel files) or a precompiled ``.mojoc``, or a list of packages to search.
        kernel: the registered kernel name (``@register("...")``), when not ``name``.
        out_types: the shape/dtype rule: a function ``(*input ShapeDtype, **params) ->``
            output type(s), or fixed output type(s); an output type is ``(shape, dtype)`` or
            anything with ``.shape`` and ``.dtype``. A list means several outputs. Default:
            elementwise (one output like the first input; all inputs alike).
        numpy_fn: the NumPy reference ``(*arrays, **params) -> array(s)``, run by the NumPy
            backend (it sees vmap batch dims first, as the kernel does). Without it, the
            ``numpy`` backend refuses the op and ``auto`` compiles it with MAX.
        vjp: reverse-mode rule ``(primals, cotangents, outputs, **params) -> cotangents``
            (lists of tensors, None for no cotangent), written with nabla ops or kernels.
        jvp: forward-mode rule ``(primals, tangents, outputs, **params) -> tangents``.
        batching: ``"elementwise"`` (default): the kernel maps over leading dims, so vmap
            prefixes its batch dims to every input and output; ``"loop"``: one kernel call
            per batch element. Sharding, once it exists, follows: elementwise ops split
            along leading dims, loop ops are replicated.

    Returns:
        A ``CustomKernelOp``: call it on tensors, with kernel parameters as keywords.

    Raises:
        ValueError: for an unknown ``batching``. Calls of the op raise ``KernelNotFoundError``
        (listing the files searched and the names registered), ``OpError``/``TypeError`` for
        bad inputs, and ``KernelError`` with the Mojo compiler's message on MAX.
    """
    return CustomKernelOp(
        name,
        kernel_path,
        kernel=kernel,
        out_types=out_types,
        numpy_fn=numpy_fn,
        vjp=vjp,
        jvp=jvp,
        batching=batching,
    )


_CALL = CustomKernelOp("custom_kernel", register=True)


def call_custom_kernel(name: str, kernel_path, values, out_types, *, numpy_fn=None, **params):
    """Run the Mojo kernel registered as ``name`` on ``values`` (``docs/custom_kernels.md``).

    The kernel has no derivative rules (use ``custom_op`` for that); vmap prefixes its batch
    dims to every input and output (the kernel must map over leading dims).

    Example:
        >>> y = nb.call_custom_kernel("add_one", "kernels/", [x], (x.shape, x.dtype))

    Args:
        name: the kernel's registered name (``@register("name")`` on its struct).
        kernel_path: the kernel package (a Mojo source directory with ``__init__.mojo``, or
            a precompiled ``.mojoc``), or a list of packages to search.
        values: the input tensors (arrays and scalars are converted), in the order of the
            kernel's ``execute`` inputs.
        out_types: the output type ``(shape, dtype)`` (or anything with ``.shape`` and
            ``.dtype``), or a list of them for several outputs.
        numpy_fn: optional NumPy reference ``(*arrays, **params) -> array(s)`` for the NumPy
            backend.
        **params: compile-time kernel parameters (bool, int, float, str or DType).

    Inside ``kernel(args, kwargs)`` of an op in the original Nabla's protocol
    (``kernel_protocol``), ``values`` are MAX graph values and ``out_types`` MAX tensor types
    (``x.type``): the call is built into the graph MAX is building, and graph values come
    back (the original's ``call_custom_kernel(name, path, x, x.type)``); ``device=`` may
    name the MAX device there.

    Returns:
        A Tensor, or a list of Tensors when ``out_types`` is a list.

    Raises:
        KernelNotFoundError: no package registers ``name`` (the files searched and the names
            they register are listed). TypeError: bad ``out_types`` or parameters.
        KernelError: at realization on MAX, a Mojo compile error or output types the kernel
            rejects, with the compiler's message.
    """
    graph_call = graph_kernel_call()
    if graph_call is not None:  # inside an op's kernel() (the original's protocol): MAX values
        return graph_call(name, kernel_path, values, out_types, **params)
    if isinstance(values, Tensor) or not isinstance(values, tuple | list):
        values = [values]
    foreign = [v for v in values if type(v).__module__.startswith("max.")]
    if foreign:
        raise TypeError(
            f"call_custom_kernel: got a MAX graph value ({type(foreign[0]).__name__}) outside "
            "an op's kernel(): graph values are passed to kernel() of a UnaryOperation "
            "subclass while MAX builds its graph; call it on tensors otherwise"
        )
    tensors = [_util.as_tensor(v, op="call_custom_kernel") for v in values]
    outs, single = out_specs("call_custom_kernel", out_types)
    results = _CALL._record(tensors, _KernelRef(name, kernel_path, numpy_fn), outs, params)
    return results[0] if single else results


class ProtocolOp(CustomKernelOp):
    """The op behind a ``UnaryOperation`` subclass written in the original Nabla's protocol
    (``kernel_protocol``): elementwise (output of the input's shape and dtype, vmap batch
    dims prefixed), derivative ``user._derivative(x, y)`` times the (co)tangent, lowered on
    MAX by ``user.kernel(values, kwargs)`` (a ``KernelLowering``). No NumPy reference: the
    ``numpy`` backend refuses it naming the op, ``auto`` compiles it with MAX.

    Args:
        user: the user's op instance.
    """

    def __init__(self, user):
        name = user.name
        if not isinstance(name, str) or not name:
            raise TypeError(
                f"{type(user).__name__}: an op in {_PROTOCOL_DOC} needs a name (a non-empty "
                f"str property), got {name!r}"
            )
        super().__init__(name, None, kernel=f"{type(user).__qualname__}.kernel")
        self.user = user
        self.lowering = KernelLowering(name, user.kernel)

    def call(self, args, kwargs) -> list:
        """``op([x], {})``: the one output, in a list (the original's calling convention)."""
        if not isinstance(args, list | tuple) or len(args) != 1:
            raise OpError(
                f"{self.name}: a unary op is called as op([x], kwargs) with one tensor, got "
                f"{args!r}"
            )
        if not isinstance(kwargs, dict):
            raise OpError(f"{self.name}: kwargs must be a dict, got {kwargs!r}")
        x = _util.as_tensor(args[0], op=self.name)
        record = {
            "op": self.name,
            "kernel": self.kernel,
            "package": None,
            "digest": None,
            "out_types": ((x.dtype, tuple(x.shape)),),
            "params": _params(self.name, kwargs),
            "lower": self.lowering,
        }
        return self.apply([x], record)

    def _factor(self, x, y):
        d = self.user._derivative(x, y)
        if d is NotImplemented or d is None:
            raise NotImplementedError(
                f"custom op {self.name!r} has no derivative: define _derivative(self, primals, "
                "output) returning d(output)/d(input) elementwise"
            )
        return d

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [cotangents[0] * self._factor(primals[0], outputs[0])]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return [tangents[0] * self._factor(primals[0], outputs[0])]


def kernel_protocol(cls) -> None:
    """Make ``cls``, a ``UnaryOperation`` subclass that defines ``kernel(self, args,
    kwargs)`` (the original Nabla's protocol), a front for a ``ProtocolOp``: instances are
    called ``op([x], kwargs)`` and return ``[y]``. ``name`` names the op; ``kernel`` gets
    the MAX graph values of the arguments (vmap batch dims first) and returns a list of
    graph values, typically from ``call_custom_kernel(name, path, x, x.type)``;
    ``_derivative(self, primals, output)`` returns d(output)/d(input) as a tensor."""

    def __init__(self):
        self._op = ProtocolOp(self)

    def __call__(self, args, kwargs=None):
        return self._op.call(args, {} if kwargs is None else kwargs)

    def __repr__(self):
        return f"<custom op {self.name} ({_PROTOCOL_DOC}: {type(self).__qualname__})>"

    __init__.__doc__ = "Make the op behind this class's instance (a ``ProtocolOp``)."
    __call__.__doc__ = ProtocolOp.call.__doc__
    for attr, value in (("__init__", __init__), ("__call__", __call__), ("__repr__", __repr__)):
        if attr not in cls.__dict__:
            setattr(cls, attr, value)


def package_digest(kernel_path) -> str:
    """The content digest of the kernel package at ``kernel_path`` (what keys its caches)."""
    return KernelPackage.load(kernel_path).digest


provide(globals(), ["kernel_protocol"])  # ops/unary.py's UnaryOperation calls it
