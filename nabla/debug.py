"""``nb.debug``: JAX's ``jax.debug`` (``print``, ``callback``, the sharding views).

``print`` and ``callback`` hand the values to Python on the host through
:func:`nabla.pure_callback` and run it at once: eagerly when called; once per example
inside ``vmap``, in the examples' order; inside a ``compile``d function the call falls
back to running op by op (``stats.fallbacks`` counts it), so every call prints its own
values, as JAX's. Inside a ``scan``/``while_loop`` body, whose values exist only while the
loop runs, they raise an error that says so.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from .core.pytree import tree_flatten, tree_unflatten
from .ops.batching import broadcast_levels, from_batch
from .ops.callback import pure_callback
from .ops.view import reshape
from .runtime.display import visualize_sharding
from .runtime.graph import ConcretizationError
from .runtime.tensor import Tensor

__all__ = ["print", "callback", "visualize_array_sharding", "inspect_array_sharding"]

visualize_array_sharding = visualize_sharding


class _Done:  # the callback's token: one int32 zero
    shape, dtype = (), np.dtype(np.int32)


def callback(callback, *args, ordered: bool = False, partitioned: bool = False, **kwargs):
    """JAX's ``jax.debug.callback``: ``callback(*args, **kwargs)`` on the values (NumPy
    arrays where the arguments are tensors), run now; its result is ignored.

    Args:
        callback: the function.
        *args: its arguments (pytrees of tensors and Python values).
        ordered: accepted (the calls run in program order here).
        partitioned: accepted.
        **kwargs: its keyword arguments (pytrees too).

    Raises:
        RuntimeError: inside a loop body being traced.
    """
    leaves, tree = tree_flatten((args, kwargs))
    where = [i for i, v in enumerate(leaves) if isinstance(v, Tensor)]
    tensors = [leaves[i] for i in where]

    def run(*values):
        full = list(leaves)
        for i, v in zip(where, values, strict=True):
            full[i] = v
        a, k = tree_unflatten(tree, full)
        callback(*a, **k)
        return np.zeros((), np.int32)

    if not tensors:
        run()
        return
    try:
        for example in _examples(tensors):  # (one call per vmap example, in order)
            pure_callback(run, _Done(), *example).realize()
    except ConcretizationError:
        raise RuntimeError(
            "nb.debug.callback/print inside a scan, while_loop, fori_loop or cond body: the "
            "values exist only while the loop runs; return them from the body (as ys or in "
            "the carry) and print them after"
        ) from None


def _examples(tensors: list) -> list:
    """The operands per example of the vmaps they are batched by (every level moved to a
    leading dim, the batch flattened), or the operands themselves outside ``vmap``."""
    levels = tuple(sorted({lv for t in tensors for lv in t._impl.levels}))
    if not levels:
        return [tensors]
    flat = []
    for t in tensors:
        t = broadcast_levels(t, levels) if t._impl.levels != levels else t
        for i, lv in enumerate(levels):
            t = from_batch(t, lv, i)
        size = math.prod(t.shape[: len(levels)])
        flat.append(reshape(t, (size, *t.shape[len(levels) :])))
    return [[x[b] for x in flat] for b in range(flat[0].shape[0])]


def print(fmt: str, *args, ordered: bool = False, partitioned: bool = False, **kwargs):  # noqa: A001
    """JAX's ``jax.debug.print``: ``fmt.format(*args, **kwargs)`` with the values, printed
    now (once per example inside ``vmap``; at every call of a ``compile``d function).

    Args:
        fmt: a ``str.format`` string.
        *args: the values.
        ordered: accepted (prints come in program order here).
        partitioned: accepted.
        **kwargs: named values.
    """
    callback(lambda *a, **k: builtins.print(fmt.format(*a, **k)), *args, ordered=ordered, **kwargs)


def inspect_array_sharding(value, *, callback) -> None:
    """JAX's ``jax.debug.inspect_array_sharding``: ``callback(value.sharding)`` now.

    Args:
        value: a tensor.
        callback: called with its sharding (None for a tensor on one device).
    """
    callback(value.sharding)
