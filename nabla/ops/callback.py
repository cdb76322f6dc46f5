"""Python on the host inside a traced program: ``pure_callback`` (JAX's), an op whose kernel
calls the user's function on NumPy arrays.

The op runs on the host on every backend (``host_only``: its operands are realized first,
as a random draw's; under MAX the graph is split around it), is never folded at trace time
(a compiled call runs it at every call) and may be merged with an identical call or dropped
when unused, as JAX allows for a pure function. The callable travels in the kwargs as a
``HostCallback``, hashed by the function's identity and the call's structure, so equal
calls share programs.

Batching (``vmap_method``, JAX's): ``"sequential"`` calls the function once per example and
stacks the results; ``"broadcast_all"`` (and ``"expand_dims"``, which receives the same
broadcast operands) calls it once with the batch dims in front of every operand and
expects them in front of every result; None refuses ``vmap``, as JAX's default does.
It has no derivative (wrap it in ``custom_vjp`` for one): differentiating through it is an
error naming it.
"""

from __future__ import annotations

import numpy as np

from ..core.dtypes import from_numpy_dtype, to_dtype
from ..core.pytree import tree_flatten, tree_unflatten
from . import batching
from ._util import as_tensor
from .base import Operation, OpError

__all__ = ["pure_callback", "HostCallback"]

_VMAP_METHODS = (None, "sequential", "expand_dims", "broadcast_all", "legacy_vectorized")


class HostCallback:
    """The user's function with the structure of its call: what the op's kernel runs.

    Equal when the function is the same object and the call's structure and static
    keyword arguments are equal (so repeated calls share a program)."""

    __slots__ = ("fun", "in_tree", "out_tree", "static", "_key")

    def __init__(self, fun, in_tree, out_tree, static: dict):
        self.fun, self.in_tree, self.out_tree, self.static = fun, in_tree, out_tree, static
        try:
            items = tuple(sorted(static.items()))
            hash(items)
        except TypeError:
            items = ("id", id(static))  # unhashable keyword values: this call alone
        self._key = (id(fun), in_tree, out_tree, items)

    def __eq__(self, other):
        return isinstance(other, HostCallback) and self.fun is other.fun and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return f"HostCallback({getattr(self.fun, '__qualname__', self.fun)!r})"

    def __call__(self, arrays: list, out_types: tuple) -> list:
        """The function on ``arrays`` (NumPy), its results checked against ``out_types``
        (``(DType, shape)`` each, batch dims first) and cast to their dtypes."""
        args = tree_unflatten(self.in_tree, list(arrays))
        result = self.fun(*args, **self.static)
        leaves, tree = tree_flatten(result)
        name = getattr(self.fun, "__qualname__", repr(self.fun))
        if tree != self.out_tree:
            raise TypeError(
                f"pure_callback: {name} returned a structure {tree} unlike result_shape_dtypes' "
                f"{self.out_tree}"
            )
        out = []
        for leaf, (dt, shape) in zip(leaves, out_types, strict=True):
            arr = np.asarray(leaf)
            if tuple(arr.shape) != tuple(shape):
                raise ValueError(
                    f"pure_callback: {name} returned shape {arr.shape} where "
                    f"result_shape_dtypes says {tuple(shape)}"
                )
            out.append(np.asarray(arr, dtype=dt.numpy, order="C"))
        return out


class PureCallbackOp(Operation):
    """``pure_callback``'s op: operands are the flattened arguments' tensors; kwargs hold
    the ``HostCallback``, the outputs' ``(DType, shape)`` and the vmap method."""

    name = "pure_callback"
    arity = None
    multiple_results = True
    host_only = True
    runs_sharded = False  # (the function sees whole values)

    def infer(self, shapes, dtypes, kwargs):
        return [tuple(s) for _, s in kwargs["out_types"]], [dt for dt, _ in kwargs["out_types"]]

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        phys = dict(kwargs)
        phys["out_types"] = tuple((dt, (*batch_shape, *s)) for dt, s in kwargs["out_types"])
        return phys

    def apply(self, tensors: list, kwargs: dict) -> list:
        """Bind, or per example under ``vmap`` with ``"sequential"`` (refused with None)."""
        if not any(t._impl.levels for t in tensors):
            return self.bind(list(tensors), kwargs)
        method = kwargs["vmap_method"]
        if method is None:
            raise NotImplementedError(
                f"pure_callback({kwargs['callback']!r}) under vmap needs vmap_method: "
                "'sequential' (one call per example) or 'broadcast_all'/'expand_dims' (one "
                "call with the batch dims in front of every operand and result)"
            )
        if method == "sequential":
            return batching.bind_per_example(self, list(tensors), kwargs, kwargs["out_types"])
        return self.bind(list(tensors), kwargs)

    def rebind(self, args, kwargs):
        return self.apply(list(args), kwargs)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        raise NotImplementedError(
            f"pure_callback({kwargs['callback']!r}) has no derivative: wrap the call in "
            "custom_vjp (or custom_jvp) with a rule to differentiate through it"
        )

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        self.vjp_rule(primals, tangents, outputs, kwargs)


_OP = PureCallbackOp()


def _shape_dtype(leaf):
    shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(
            "pure_callback: result_shape_dtypes holds objects with .shape and .dtype "
            f"(nb.ShapeDtypeStruct, arrays), got {type(leaf).__name__}"
        )
    dt = dtype if not isinstance(dtype, np.dtype) else from_numpy_dtype(dtype)
    return to_dtype(dt), tuple(int(d) for d in shape)


def pure_callback(callback, result_shape_dtypes, *args, sharding=None, vmap_method=None, **kwargs):
    """Call a Python function of NumPy arrays from inside traced code (JAX's
    ``jax.pure_callback``): under ``compile`` it runs at every call, on the host, with the
    arguments' values; eagerly it runs when the result is needed.

    The function must be pure (same arguments, same results): calls may be merged or
    dropped. It has no derivative; under ``vmap`` it needs ``vmap_method``.

    Args:
        callback: ``f(*args, **kwargs)`` of NumPy arrays, returning arrays (a pytree).
        result_shape_dtypes: the results' shapes and dtypes, a pytree of objects with
            ``.shape`` and ``.dtype`` (``nb.ShapeDtypeStruct``, arrays).
        *args: the arguments: pytrees of tensors or arrays.
        sharding: accepted (the function sees whole values).
        vmap_method: ``"sequential"``, ``"broadcast_all"`` or ``"expand_dims"`` (both
            receive the batch dims in front of every operand), or None (refused under vmap).
        **kwargs: passed to ``callback`` as they are (static values).

    Returns:
        Tensors in ``result_shape_dtypes``' structure.

    Raises:
        ValueError: for an unknown ``vmap_method``; at run time, for results of other
            shapes than declared.
    """
    if not callable(callback):
        raise TypeError(f"pure_callback: callback must be callable, got {type(callback).__name__}")
    if vmap_method not in _VMAP_METHODS:
        raise OpError(
            f"pure_callback: vmap_method must be one of {_VMAP_METHODS[1:]} or None, got "
            f"{vmap_method!r}"
        )
    method = "broadcast_all" if vmap_method in ("expand_dims", "legacy_vectorized") else vmap_method
    leaves, in_tree = tree_flatten(args)
    tensors = [as_tensor(v, op="pure_callback") for v in leaves]
    specs, out_tree = tree_flatten(result_shape_dtypes)
    out_types = tuple(_shape_dtype(s) for s in specs)
    host = HostCallback(callback, in_tree, out_tree, kwargs)
    op_kwargs = {"callback": host, "out_types": out_types, "vmap_method": method}
    if not out_types:  # (no results: a pure function's call can be dropped)
        return tree_unflatten(out_tree, [])
    return tree_unflatten(out_tree, list(_OP.apply(tensors, op_kwargs)))
