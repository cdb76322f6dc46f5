"""``eval_shape``: the shapes and dtypes a function returns, without computing it (JAX's
``jax.eval_shape``), and ``ShapeDtypeStruct``, the stand-in for an array it takes and
gives. The function is traced as a control-flow body is (``control_flow.trace_body``), so
reading a value (``float(x.sum())``, ``nonzero`` without ``size``) is a
``ConcretizationError`` rather than a shape computed from made-up values."""

from __future__ import annotations

import math

from ..core.dtypes import to_dtype
from ..core.pytree import tree_flatten, tree_map, tree_unflatten
from ..ops.creation import zeros
from ..runtime.tensor import Tensor
from .control_flow import DrawInBody, trace_body

__all__ = ["eval_shape", "ShapeDtypeStruct"]


class ShapeDtypeStruct:
    """A shape and dtype standing for an array (JAX's ``ShapeDtypeStruct``): what
    :func:`eval_shape` returns, and what it takes in place of an argument. A pytree leaf
    (a plain class: namedtuples and dataclasses are nodes).

    Args:
        shape: a tuple of ints.
        dtype: the dtype (nabla's, NumPy's or a name).
        sharding: the sharding (None: not sharded).
    """

    __slots__ = ("shape", "dtype", "sharding")

    def __init__(self, shape, dtype, sharding=None):
        self.shape, self.dtype, self.sharding = tuple(shape), to_dtype(dtype), sharding

    def __repr__(self) -> str:
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.value})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, ShapeDtypeStruct):
            return NotImplemented
        return (self.shape, self.dtype, self.sharding) == (
            other.shape,
            other.dtype,
            other.sharding,
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The element count."""
        return math.prod(self.shape)


def eval_shape(fun, *args, **kwargs):
    """JAX's ``eval_shape``: the shapes and dtypes of ``fun(*args, **kwargs)`` without
    computing it. ``ShapeDtypeStruct`` leaves (or anything with ``.shape`` and ``.dtype``,
    such as arrays) stand for arrays; ``fun`` is traced on placeholders, so a value it reads
    raises ``ConcretizationError``, as JAX's. A function that draws random numbers from a
    key it receives runs on zeros instead (draws are not traced; their shapes do not
    depend on the key).

    Args:
        fun: the function.
        *args: its positional arguments (pytrees).
        **kwargs: its keyword arguments.

    Returns:
        ``fun``'s output with every array leaf a :class:`ShapeDtypeStruct`.

    Raises:
        ConcretizationError: where ``fun`` needs a value of its arguments.
    """

    def stand_in(leaf):
        if isinstance(leaf, Tensor) or not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            return leaf
        return zeros(tuple(leaf.shape), dtype=leaf.dtype)

    leaves, tree = tree_flatten(tree_map(stand_in, (args, kwargs)))
    at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)]

    def call(*tensors):
        full = list(leaves)
        for i, t in zip(at, tensors, strict=True):
            full[i] = t
        a, k = tree_unflatten(tree, full)
        return fun(*a, **k)

    try:
        body = trace_body(call, [leaves[i] for i in at], "eval_shape", hoist=False)
    except DrawInBody:  # (a draw on a key it was given: run on the stand-ins instead)
        return tree_map(_struct, call(*[leaves[i] for i in at]))
    structs = [ShapeDtypeStruct(tuple(o.logical_shape), o.dtype) for o in body.out_impls]
    return tree_unflatten(body.out_tree, structs)


def _struct(leaf):
    return (
        ShapeDtypeStruct(tuple(leaf.shape), leaf.dtype, leaf.sharding)
        if isinstance(leaf, Tensor)
        else leaf
    )
