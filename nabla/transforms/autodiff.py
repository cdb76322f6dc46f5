"""Reverse and forward mode differentiation.

Reverse mode walks recorded ``OpNode``s from the outputs back to the differentiated inputs,
calling each op's ``vjp_rule``. Rules are written with nabla ops, so the backward pass is
itself recorded: higher-order derivatives compose, and the whole backward graph is lazy
(evaluated in one program). Every transform wraps its inputs in *fresh identities*
(an ``identity`` op marked as traced), so nested differentiation of closures has no
perturbation confusion: an inner ``grad`` only targets its own wrappers.

Forward mode attaches tangents to the wrappers under a fresh transform level; step 9 of the
op pipeline propagates them (``jvp_rule``) one level at a time, innermost levels seeing outer
tangents but never the reverse.

PyTorch-style ``Tensor.backward`` uses the same walk with the ``requires_grad`` leaves it
reaches as targets and accumulates realized, detached gradients into ``.grad``.
"""

from __future__ import annotations

import functools
import numbers
import operator
import threading
import weakref
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from ..core.config import CONFIG
from ..core.debug import site_in_rule
from ..core.device import get_default_device
from ..core.dtypes import from_numpy_dtype
from ..core.ir import RETAIN, SymDim, TensorImpl, post_order
from ..core.pytree import keystr, tree_flatten, tree_flatten_with_path, tree_map, tree_unflatten
from ..core.state import (
    REQUIRES_GRAD,
    STATE,
    end_grad_level,
    grad_level,
    new_level,
    pulling_back,
    shared_draws,
    spmd_axes,
    start_grad_level,
)
from ..ops import batching, collectives
from ..ops._util import as_tensor, check_callable
from ..ops.creation import constant, eye, full, ones_like, zeros_like
from ..ops.indexing import fits_in_place, rebind
from ..ops.unary import identity, stop_gradient
from ..ops.view import moveaxis
from ..runtime.graph import GRAPH
from ..runtime.tensor import Tensor
from ..runtime.tensor import realize as realize_tensors
from .vmap import vmap

__all__ = [
    "vjp",
    "grad",
    "value_and_grad",
    "jvp",
    "linearize",
    "linear_transpose",
    "jacrev",
    "jacobian",
    "jacfwd",
    "hessian",
    "backward",
    "detach",
    "backward_pass",
]


# ----------------------------------------------------------------------------- the walk
def _fresh(x: Tensor, level: int) -> Tensor:
    """A new identity for ``x`` at grad ``level``: same value, linked to ``x`` so outer
    transforms still see through it."""
    y = identity(x)
    y._impl.traced = y._impl.traced | {level}
    _same_spec(y, x)
    return y


def _same_spec(y: Tensor, x: Tensor) -> None:
    """Give ``y``, a copy of ``x``, ``x``'s sharding spec as it is: its dims' open/closed
    flags and priorities too (an op's result gets the defaults), so propagation from the
    copy decides as from ``x`` (``DimSpec``)."""
    if x._impl.sharding is not None and y._impl.sharding is not None:
        y._impl.sharding = x._impl.sharding


def _toposort(roots: list[TensorImpl], stop: set[int]) -> list:
    """Traced nodes reachable from ``roots`` (inputs first), not expanding ``stop`` impls."""

    def through(impl) -> bool:
        return impl.node is not None and impl.traced and id(impl) not in stop

    def children(node):
        return [i.node for i in node.inputs if through(i)]

    # the last root's subgraph first: the order the backward pass has always summed in
    return post_order([r.node for r in reversed(roots) if through(r)], children)[0]


def backward_pass(
    outputs, cotangents, targets: list[TensorImpl], observe=(), *, detach_hooked=False
) -> dict:
    """Propagate ``cotangents`` of ``outputs`` back to ``targets``.

    Returns a dict ``id(target impl) -> Tensor`` (absent when no cotangent reached it),
    with the cotangents of the ``observe`` impls too (values the walk passes through:
    ``retain_grad``'s). A computed value's ``register_hook`` functions see its cotangent
    once it is complete, before its node's rule reads it (without its history when
    ``detach_hooked``); the targets' hooks are the caller's (``backward`` runs a leaf's on
    the total over its versions).
    """
    target_ids = {id(t) for t in targets}
    wanted = target_ids | {id(o) for o in observe}  # (observed values do not stop the walk)
    out_impls = [o._impl for o in outputs]
    order = _toposort(out_impls, target_ids)
    live = _live_nodes(order, wanted)
    cts: dict[int, tuple] = {}  # id(impl) -> (impl, its cotangent so far)
    for o, ct in zip(out_impls, cotangents):
        if ct is not None:
            _accumulate(cts, o, ct)
    for node in reversed(order):
        for ref in node.outputs:
            o = ref()
            if o is not None and o.hooks and id(o) in cts:
                cts[id(o)] = (o, _run_hooks(o.hooks, cts[id(o)][1], detach_hooked))
        if id(node) not in live:
            continue
        in_cts = _pull_node(node, cts)
        for inp, g in zip(node.inputs, in_cts):
            if g is not None and inp.dtype.is_float and _reaches(inp, wanted, live):
                _accumulate(cts, inp, _fit_cotangent(node.op, inp, g))
    out = {}
    for tid, (impl, ct) in list(cts.items()):
        if tid in target_ids:
            if impl.sharding is not None or ct._impl.sharding is not None:
                # a gradient is laid out like its primal, partial terms completed
                ct = collectives.layout_like(ct, impl)
            out[tid] = ct
    for impl in observe:
        if id(impl) in cts:
            out[id(impl)] = cts[id(impl)][1]
    return out


def _run_hooks(hooks: list, ct: Tensor, detach: bool) -> Tensor:
    """Cotangent ``ct`` through ``register_hook`` functions, in order (one that returns
    None keeps it); ``detach``: they see it without its history (``backward`` without
    ``create_graph``, as PyTorch's hooks get a gradient that requires no grad)."""
    for hook in list(hooks):
        if hook is RETAIN:
            continue
        got = hook(stop_gradient(ct) if detach else ct)
        if got is None:
            continue
        if not isinstance(got, Tensor) or got.shape != ct.shape or got.dtype is not ct.dtype:
            raise RuntimeError(  # (PyTorch refuses another dtype too)
                f"a register_hook function returned {_described(got)} for a gradient of "
                f"shape {ct.shape} and dtype {ct.dtype.value}; return a tensor of that shape "
                "and dtype, or None"
            )
        ct = got
    return ct


def _described(v) -> str:
    if isinstance(v, Tensor):
        return f"a {v.dtype.value} tensor of shape {v.shape}"
    return f"{type(v).__name__} {v!r:.40}"


def _reaches(inp: TensorImpl, target_ids: set, live: set) -> bool:
    """Does a cotangent of ``inp`` lead to a target: it is one, or a live node's output?"""
    return id(inp) in target_ids or (inp.node is not None and id(inp.node) in live and inp.traced)


def _live_nodes(order: list, target_ids: set) -> set[int]:
    """The ids of the nodes of ``order`` (inputs first) that lie on a path from a target."""
    live: set[int] = set()
    for node in order:
        if any(_reaches(inp, target_ids, live) for inp in node.inputs):
            live.add(id(node))
    return live


def _accumulate(cts: dict, impl: TensorImpl, ct: Tensor) -> None:
    prev = cts.get(id(impl))
    cts[id(impl)] = (impl, ct if prev is None else prev[1] + ct)


def _pull_node(node, cts: dict) -> list:
    """The cotangents of ``node``'s inputs from its outputs' in ``cts`` (its op's
    ``vjp_rule``); empty when none reached it or the op is not differentiable."""
    outs = [ref() for ref in node.outputs]
    node_cts = [None if o is None or id(o) not in cts else cts[id(o)][1] for o in outs]
    op = node.op
    if all(c is None for c in node_cts) or not op.differentiable:
        return []
    primals = [Tensor._wrap(i) for i in node.inputs]
    out_ts = [None if o is None else Tensor._wrap(o) for o in outs]
    try:
        if CONFIG.debug_values:  # the rule's ops take the node's site
            with site_in_rule(node):
                return op.vjp_rule(primals, node_cts, out_ts, node.kwargs)
        return op.vjp_rule(primals, node_cts, out_ts, node.kwargs)
    except NotImplementedError as e:
        raise NotImplementedError(f"reverse-mode differentiation of op {op.name}: {e}") from e


def _fit_cotangent(op, inp: TensorImpl, g: Tensor) -> Tensor:
    """A rule's cotangent ``g`` for input ``inp``: its shape checked, cast to its dtype."""
    if tuple(g.shape) != inp.logical_shape:
        raise RuntimeError(
            f"vjp_rule of op {op.name} returned a cotangent of shape {g.shape} for "
            f"an input of shape {inp.logical_shape}"
        )
    return g if g.dtype is inp.dtype else g.cast(inp.dtype)


# ----------------------------------------------------------------------------- helpers
def _check_float(x, what):
    if isinstance(x, Tensor) and not x.dtype.is_float:
        raise TypeError(
            f"{what} must have a float dtype to be differentiated, got {x.dtype} (shape {x.shape})"
        )


def _to_tensor_leaf(x):
    if isinstance(x, Tensor):
        return x
    if isinstance(x, numbers.Number | np.ndarray | list) and not isinstance(x, bool):
        return as_tensor(x)
    return x


def _primal_leaves(flat: list, what: str) -> list:
    """The leaves of ``vjp``'s or ``jvp``'s primals as tensors (numbers and arrays made
    tensors); a string or another object is JAX's TypeError (it was returned as it was,
    as if differentiated)."""
    out = [_to_tensor_leaf(x) for x in flat]
    for i, x in enumerate(out):
        if not isinstance(x, Tensor | bool | np.bool_):
            raise TypeError(
                f"{what}: primal leaf {i} is a {type(x).__name__} ({x!r:.40}), which cannot be "
                "differentiated: primals hold tensors, arrays or numbers; pass it by closure"
            )
    return out


def _scalar_output(o):
    """A Python number, NumPy scalar or NumPy array a differentiated function returns, as
    the tensor JAX makes it (a constant: its derivative is zero); any other value is
    returned as it is."""
    if isinstance(o, numbers.Number) and not isinstance(o, bool):
        return as_tensor(o)
    if isinstance(o, np.ndarray) and o.dtype.kind in "biuf":
        return as_tensor(o)
    return o


def _argnums_tuple(argnums, n, what):
    try:  # an int, a NumPy integer, or a sequence of them (as JAX)
        nums, single = (operator.index(argnums),), True
    except TypeError:
        try:
            nums, single = tuple(operator.index(a) for a in argnums), False
        except TypeError:
            raise TypeError(
                f"{what}: argnums must be an int or a sequence of ints, got {argnums!r}"
            ) from None
    if not nums:
        raise ValueError(f"{what}: argnums is empty: name at least one argument to differentiate")
    for a in nums:
        if not -n <= a < n:
            called = f"{n} positional argument{'' if n == 1 else 's'}"
            raise TypeError(f"{what}: argnums {argnums} is out of range for a call with {called}")
    nums = tuple(a % n for a in nums)
    if len(set(nums)) != len(nums):  # one gradient would overwrite the other's input
        raise ValueError(f"{what}: argnums {argnums} names an argument twice")
    return nums, single


def _split_argnums(fun, args, kwargs, argnums, what, check_float=True):
    """-> (f over the differentiated arguments, their values, single?) for ``argnums``."""
    nums, single = _argnums_tuple(argnums, len(args), what)
    dyn = [tree_map(_to_tensor_leaf, args[i]) for i in nums]
    if check_float:
        for i, d in zip(nums, dyn):
            for path, leaf in tree_flatten_with_path(d)[0]:
                if isinstance(leaf, Tensor):
                    where = f"argument {i} at {keystr(path)}" if path else f"argument {i}"
                    _check_float(leaf, f"{where} of {what}")
                elif isinstance(leaf, bool | np.bool_):  # JAX's TypeError, not a None grad
                    raise TypeError(
                        f"argument {i} of {what} must have a float dtype to be "
                        f"differentiated, got the Python bool {leaf}"
                    )
                else:  # a string or another object: JAX's TypeError, not a None gradient
                    raise TypeError(
                        f"argument {i} of {what} holds a {type(leaf).__name__} ({leaf!r:.40}), "
                        "which cannot be differentiated: differentiated arguments hold "
                        "tensors, arrays or numbers; pass it by closure or leave it out of "
                        "argnums"
                    )

    def f(*dyn_args):
        full = list(args)
        for i, d in zip(nums, dyn_args):
            full[i] = d
        return fun(*full, **kwargs)

    return f, dyn, single


def _split_aux(res, has_aux):
    """A function's result as ``(out, aux)``: ``aux`` is None without ``has_aux``."""
    if not has_aux:
        return res, None
    if not (type(res) in (tuple, list) and len(res) == 2):  # (a list too, as JAX)
        raise TypeError("has_aux=True needs the function to return a pair (out, aux)")
    return tuple(res)


def _zeros_like(t: Tensor) -> Tensor:
    z = zeros_like(t)
    # the gradient of an unused sharded input is laid out like it, as every other gradient
    return collectives.layout_like(z, t._impl) if t._impl.sharding is not None else z


# ----------------------------------------------------------------------------- vjp / grad
def vjp(fun, *primals, has_aux=False):
    """Reverse-mode: ``out, pullback = vjp(f, *primals)``; ``pullback(ct)`` returns a tuple
    with one cotangent (pytree) per primal.

    Args:
        fun: function of pytrees of tensors.
        *primals: the point to differentiate at (pytrees; Python numbers become tensors).
        has_aux: ``fun`` returns ``(out, aux)``; aux is returned undifferentiated.

    Returns:
        ``(out, pullback)`` or ``(out, pullback, aux)``.
    """
    check_callable("vjp", fun)
    level = start_grad_level()
    try:
        res = _vjp(fun, primals, has_aux, level)
    except BaseException:
        end_grad_level(level)
        raise
    # the trace stays live for as long as the pullback can be called
    weakref.finalize(res[1], end_grad_level, level)
    return res


def _vjp(fun, primals, has_aux, level):
    flat, tree = tree_flatten(primals)
    flat = _primal_leaves(flat, "vjp")
    wrapped = [_fresh(x, level) if isinstance(x, Tensor) and x.dtype.is_float else x for x in flat]
    # the inputs' values, taken before ``fun`` runs: an in-place update of an argument
    # (``x.mul_(2)``) gives the argument object a new value, and the derivative is with
    # respect to the value passed in, not the updated one
    copied = [(x, w, w._impl) for x, w in zip(flat, wrapped, strict=True) if w is not x]
    targets = [before for _x, _w, before in copied]  # (the float tensors', in order)
    res = fun(*tree_unflatten(tree, wrapped))
    out, aux = _split_aux(res, has_aux)
    out_flat, out_tree = tree_flatten(out)
    # an argument updated in place (a BatchNorm module's running statistics) is updated
    # for the caller too, as when the function runs without the transform
    if copied:
        write_back(*(list(col) for col in zip(*copied, strict=True)))

    def pullback(ct):
        ct_flat, ct_tree = tree_flatten(ct)
        if ct_tree != out_tree:
            raise ValueError(
                f"pullback: cotangent structure {ct_tree} does not match output {out_tree}"
            )
        outs, cts = [], []
        for o, c in zip(out_flat, ct_flat):
            if not isinstance(o, Tensor) or c is None:
                continue
            _check_cotangent_dtype(c, o)
            c = as_tensor(c, o.dtype, "pullback")
            if c.shape != o.shape:
                raise ValueError(
                    f"pullback: cotangent of shape {c.shape} for an output of shape {o.shape}"
                )
            outs.append(o)
            cts.append(c)
        with pulling_back(level):
            got = backward_pass(outs, cts, targets)
        result, it, given = [], iter(targets), {}
        for x, w in zip(flat, wrapped, strict=True):
            if isinstance(w, Tensor) and w.dtype.is_float:
                target = next(it)
                g = got.get(id(target))
                if g is None:
                    g = _zeros_like(w)
                elif given.setdefault(id(g), id(x)) != id(x):
                    # two inputs whose cotangent is one tensor (x + a + b: a's and b's) get
                    # a tensor each: a module of gradients would hold one object in two
                    # places, as tied weights (named_parameters would list it once)
                    g = identity(g)
                result.append(g)
            else:
                result.append(None)
        return tuple(tree_unflatten(tree, result))

    return (out, pullback, aux) if has_aux else (out, pullback)


def write_back(originals: list, copies: list, befores: list) -> None:
    """After a function ran on ``copies`` of ``originals`` (a transform's fresh or
    stop-gradient copies), give each original whose copy was updated in place (its value
    is no longer ``befores[i]``) the copy's new value, without the transform's history."""
    for x, c, before in zip(originals, copies, befores, strict=True):
        if c._impl is not before and fits_in_place(x, c):
            rebind(x, stop_gradient(c), item=True)


def _check_cotangent_dtype(c, o: Tensor) -> None:
    """A cotangent tensor (or array) must have its output's dtype, as JAX's pullback
    requires: an int32 cotangent for a float32 output is an error, not a silent cast. A
    Python number is taken in the output's dtype."""
    if isinstance(c, Tensor):
        if c.dtype is not o.dtype:
            raise ValueError(
                f"pullback: cotangent of dtype {c.dtype.value} for an output of dtype "
                f"{o.dtype.value} (shape {o.shape}); give it the output's dtype"
            )
    elif isinstance(c, np.ndarray) and c.dtype != o.dtype.numpy:
        if not (c.dtype.kind == "f" and o.dtype.is_float):
            raise ValueError(
                f"pullback: cotangent array of dtype {c.dtype} for an output of dtype "
                f"{o.dtype.value} (shape {o.shape})"
            )


def value_and_grad(fun, argnums=0, has_aux=False, *, realize=False):
    """``value_and_grad(f)(*args) -> (value, grad)`` for a scalar-valued ``f``.

    Args:
        fun: returns a scalar float tensor (or ``(scalar, aux)`` with ``has_aux``); a
            single-element output such as shape ``(1,)`` counts as a scalar (as in the
            original Nabla and ``torch.autograd``), and the value keeps its shape.
        argnums: int or tuple of ints: which positional arguments to differentiate.
        has_aux: see :func:`vjp`.
        realize: compute the value and gradients (one program) before returning, as the
            original Nabla's ``realize=True``; by default they are returned lazily.

    Raises:
        TypeError: if a differentiated argument is not float, or the output is not a float
            scalar.

    Example:
        >>> nb.value_and_grad(lambda x: (x * x).sum())(nb.constant([1.0, 2.0]))
    """
    check_callable("value_and_grad", fun)
    return _value_and_grad(fun, argnums, has_aux, realize, "value_and_grad")


def _value_and_grad(fun, argnums, has_aux, realize, what: str):
    """``value_and_grad``'s function; its errors name ``what`` (``grad`` or
    ``value_and_grad``: the transform the user called)."""

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        f, dyn, single = _split_argnums(fun, args, kwargs, argnums, what)
        with grad_level() as level:
            result = _value_and_grad_at(f, dyn, level, single)
        if realize:
            realize_tensors(result)
        return result

    def _value_and_grad_at(f, dyn, level, single):
        res = _vjp(f, dyn, has_aux, level)
        out, pullback = res[0], res[1]
        if isinstance(out, int) and not isinstance(out, bool):  # JAX: int32 output
            raise TypeError(
                f"{what} requires a float output, got the Python int {out} (int32); return a "
                "float, or use vjp for integer outputs"
            )
        out = _scalar_output(out)  # a constant function (a float, NumPy's): zero gradients
        if not isinstance(out, Tensor):
            raise TypeError(f"{what} needs the function to return a scalar tensor, got {type(out)}")
        if any(d != 1 for d in out.shape):  # a single element, e.g. (1,), as torch.autograd
            raise TypeError(
                f"{what} requires a scalar (single-element) output, got shape {out.shape}; "
                "use vjp or jacrev for non-scalar outputs"
            )
        if not out.dtype.is_float:
            raise TypeError(f"{what} requires a float output, got {out.dtype}")

        # the seed is a constant, unbatched under vmap: the backward ops broadcast it
        # inside their kernels rather than a copy per batch element. Inside a shard_map,
        # though, a loss that differs per device seeds 1 on every device (JAX's varying
        # seed): a replicated term of it then gets every device's 1, summed where it
        # meets the per-device part (``sum(a * w) + w * w`` counts ``w * w`` per device)
        seed = full(out.shape, 1, dtype=out.dtype, device=out.device)
        devices = {lv for lv, _mesh in spmd_axes.values()}
        varying = tuple(lv for lv in out._impl.levels if lv in devices)
        if varying:
            seed = batching.broadcast_levels(seed, varying)
        grads = pullback(seed)
        g = grads[0] if single else grads
        if has_aux:
            return (out, res[2]), g
        return out, g

    return wrapper


def grad(fun, argnums=0, has_aux=False, *, realize=False):
    """Gradient of a scalar-valued function: ``grad(f)(x)`` has the structure of ``x``.

    Args:
        fun: returns a scalar float tensor (or ``(scalar, aux)`` with ``has_aux``); a
            single-element output such as shape ``(1,)`` counts as a scalar.
        argnums: int or tuple of ints: which positional arguments to differentiate (default
            0). With a tuple the gradient is a tuple with one entry per argument.
        has_aux: ``fun`` returns ``(out, aux)``; the result is then ``(grad, aux)``.
        realize: compute the gradients before returning (the original Nabla's
            ``realize=True``); by default they are returned lazily.

    Returns:
        A function of the same arguments as ``fun`` returning the gradient.

    Raises:
        TypeError: if a differentiated argument is not float, the output is not a float
            scalar, ``argnums`` is out of range or ``has_aux`` output is not a pair (as in
            JAX).

    Example:
        >>> nb.grad(lambda x: nb.sin(x))(nb.constant(0.0)).item()
        1.0
    """
    check_callable("grad", fun)
    vg = _value_and_grad(fun, argnums, has_aux, realize, "grad")

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        (v, g) = vg(*args, **kwargs)
        if has_aux:
            return g, v[1]
        return g

    return wrapper


# ----------------------------------------------------------------------------- jvp
def jvp(fun, primals, tangents, has_aux=False):
    """Forward-mode: ``out, tangent_out = jvp(f, primals, tangents)``.

    Args:
        fun: function of the primals.
        primals: tuple (or list) of arguments.
        tangents: same structure as ``primals``; each leaf of its primal's shape and dtype
            (a Python scalar takes the primal's dtype; an integer or bool primal's tangent
            may be JAX's ``float0`` zeros, which count as none).
        has_aux: ``fun`` returns ``(out, aux)``.

    Returns:
        ``(out, tangent_out)`` or ``(out, tangent_out, aux)``.

    Raises:
        TypeError: if ``primals``/``tangents`` are not tuples or lists, their structures
            differ, or a tangent's dtype differs from its primal's (as in JAX).
        ValueError: if a tangent's shape differs from its primal's (as in JAX).
    """
    check_callable("jvp", fun)
    if not isinstance(primals, tuple | list) or not isinstance(tangents, tuple | list):
        raise TypeError("jvp expects primals and tangents as tuples")
    p_flat, p_tree = tree_flatten(tuple(primals))
    t_flat, t_tree = tree_flatten(tuple(tangents))
    if p_tree != t_tree:
        raise TypeError(f"jvp: tangents structure {t_tree} does not match primals {p_tree}")
    p_flat = _primal_leaves(p_flat, "jvp")
    t_flat = [
        _check_tangent(i, p, t) if isinstance(p, Tensor) else t
        for i, (p, t) in enumerate(zip(p_flat, t_flat))
    ]
    level = new_level()
    wrapped = [_with_tangent(p, t, level) for p, t in zip(p_flat, t_flat)]
    copied = [(p, w, w._impl) for p, w in zip(p_flat, wrapped) if w is not p]
    out, aux = _split_aux(fun(*tree_unflatten(p_tree, wrapped)), has_aux)
    if copied:  # an argument updated in place is updated for the caller too, as ``vjp``'s
        write_back(*(list(col) for col in zip(*copied, strict=True)))
    o_flat, o_tree = tree_flatten(out)
    pairs = [_take_tangent(o, level) for o in o_flat]
    out = tree_unflatten(o_tree, [o for o, _ in pairs])
    tout = tree_unflatten(o_tree, [t for _, t in pairs])
    if has_aux:
        aux = tree_map(
            lambda a: (
                _strip_level(a, level)
                if isinstance(a, Tensor) and a._impl.tangents and level in a._impl.tangents
                else a
            ),
            aux,
        )
        return out, tout, aux
    return out, tout


def linearize(fun, *primals, has_aux=False):
    """JAX's ``linearize``: ``fun``'s value at ``primals`` and its JVP there as a function of
    the tangents alone, ``out, f_jvp = linearize(f, x)``, ``f_jvp(t)`` being ``jvp(f, (x,),
    (t,))[1]``.

    Each ``f_jvp`` call runs forward mode at the saved primals (the primal work is lazy and
    shares nothing with the first call's: under ``nb.compile`` of the caller it is one
    graph). Tangents are checked as :func:`jvp` checks them.

    Args:
        fun: function of the primals.
        *primals: the point (pytrees of tensors, arrays or numbers).
        has_aux: ``fun`` returns ``(out, aux)``.

    Returns:
        ``(out, f_jvp)``, or ``(out, f_jvp, aux)``; ``f_jvp(*tangents)`` takes one tangent
        per primal, of its structure, shape and dtype.

    Example:
        >>> out, f_jvp = nb.linearize(lambda x: nb.sin(x) * x, nb.constant([0.0, 1.0]))
        >>> f_jvp(nb.constant([1.0, 1.0])).tolist()  # cos(x) x + sin(x)
        [0.0, 1.3817732334136963]
    """
    check_callable("linearize", fun)
    got = jvp(fun, primals, tuple(tree_map(_zero_like_leaf, p) for p in primals), has_aux)
    out = got[0]

    def f_jvp(*tangents):
        if len(tangents) != len(primals):
            raise TypeError(
                f"linearize's jvp function takes {len(primals)} tangent(s), one per primal, "
                f"got {len(tangents)}"
            )
        return jvp(fun, primals, tangents, has_aux)[1]

    return (out, f_jvp, got[2]) if has_aux else (out, f_jvp)


def linear_transpose(fun, *primals, reduce_axes=()):
    """JAX's ``linear_transpose``: the transpose of the linear function ``fun`` as a
    function of an output cotangent, ``f_t = linear_transpose(f, x)``, ``f_t(ct)`` giving a
    tuple with one cotangent per primal (``vjp``'s pullback, which for a linear ``fun`` is
    the same at every point).

    Args:
        fun: a function linear in its arguments.
        *primals: example arguments (tensors, arrays, or ``ShapeDtypeStruct``s): only their
            structure, shapes and dtypes are used.
        reduce_axes: accepted for JAX's signature (deprecated there); must be empty.

    Returns:
        ``f_t(ct) -> tuple``.

    Example:
        >>> f_t = nb.linear_transpose(lambda x: 2.0 * x, nb.zeros((3,)))
        >>> f_t(nb.ones((3,)))[0].tolist()
        [2.0, 2.0, 2.0]
    """
    check_callable("linear_transpose", fun)
    if reduce_axes:
        raise ValueError("linear_transpose: reduce_axes is not supported (deprecated in JAX)")
    zeros = tuple(tree_map(_example_zero, p) for p in primals)
    _, pullback = vjp(fun, *zeros)

    def transposed(ct):
        return pullback(ct)

    return transposed


def _example_zero(p):
    """Zeros like an example leaf: a tensor, an array, a number, or a shape and dtype (a
    ``ShapeDtypeStruct``, ours or JAX's)."""
    if not isinstance(p, Tensor | np.ndarray | np.generic | numbers.Number):
        shape, dtype = getattr(p, "shape", None), getattr(p, "dtype", None)
        if shape is not None and dtype is not None:
            return full(tuple(shape), 0, dtype=from_numpy_dtype(np.dtype(dtype)))
    return _zero_like_leaf(p)


def _zero_like_leaf(p):
    """A zero tangent for primal leaf ``p`` (the primal evaluation of ``linearize``)."""
    if isinstance(p, Tensor):
        return _zeros_like(p)
    if isinstance(p, np.ndarray | np.generic):
        return np.zeros_like(p)
    return type(p)(0) if isinstance(p, int | float) and not isinstance(p, bool) else p


def _with_tangent(p, t, level: int):
    """A fresh identity of primal leaf ``p`` carrying tangent ``t`` at ``level`` (a float
    primal's only); a leaf that is not a tensor as it is."""
    if not isinstance(p, Tensor):
        return p
    w = identity(p)
    if p.dtype.is_float and t is not None:
        # copied: the identity may share its tangents with the primal's
        w._impl.tangents = dict(w._impl.tangents or {})
        w._impl.tangents[level] = t._impl
    return w


def _take_tangent(o, level: int) -> tuple:
    """An output leaf as ``(primal, tangent at level)``: the primal without that tangent,
    and zeros when none reached it; ``(o, None)`` for a leaf that is not a tensor."""
    o = _scalar_output(o)  # as JAX: a Python number out is a 0-d array, tangent 0
    if not isinstance(o, Tensor):
        return o, None
    tans = o._impl.tangents
    t = tans.get(level) if tans else None
    if t is None:
        return o, _zeros_like(o)
    return _strip_level(o, level), Tensor._wrap(t)


def _check_tangent(i: int, p: Tensor, t):
    """The tangent ``t`` of primal leaf ``i`` as a tensor of ``p``'s shape and dtype, as JAX
    checks them: a tensor or array must match in dtype and shape; a Python scalar takes the
    primal's dtype (weak typing)."""
    if t is None:
        return None
    if isinstance(t, np.ndarray | np.generic) and np.asarray(t).dtype.names == ("float0",):
        # JAX's tangent of an integer or bool primal (``jax.dtypes.float0``): none
        if p.dtype.is_float:
            raise TypeError(
                f"jvp: primal {i} is {p.dtype.value} {p.shape}: a float0 tangent is for "
                "integer and bool primals only"
            )
        if np.shape(t) != tuple(p.shape):
            raise ValueError(
                f"jvp: primal and tangent arguments do not match; shapes must be equal: "
                f"primal {i} has shape {p.shape} ({p.dtype.value}), its tangent {np.shape(t)}"
            )
        return None
    weak = isinstance(t, numbers.Number) and not isinstance(t, np.generic)
    if isinstance(t, Tensor | np.ndarray | np.generic):
        t_dtype = t.dtype if isinstance(t, Tensor) else from_numpy_dtype(np.asarray(t).dtype)
        if t_dtype is not p.dtype:
            raise TypeError(
                f"jvp: primal and tangent arguments do not match; dtypes must be equal: "
                f"primal {i} is {p.dtype.value} {p.shape}, its tangent is "
                f"{t_dtype.value} {tuple(t.shape)}"
            )
    elif not weak:
        raise TypeError(
            f"jvp: tangent {i} must be a tensor, array or number, got {type(t).__name__} "
            f"(primal {p.dtype.value} {p.shape})"
        )
    t = as_tensor(t, p.dtype, "jvp")
    if t.shape != p.shape:
        raise ValueError(
            f"jvp: primal and tangent arguments do not match; shapes must be equal: "
            f"primal {i} has shape {p.shape} ({p.dtype.value}), its tangent {t.shape}"
        )
    return t


def _strip_level(o: Tensor, level: int) -> Tensor:
    """``o`` without its tangent at ``level`` (a new handle; ``o`` may be shared)."""
    y = identity(o)
    if y._impl.tangents:
        y._impl.tangents = {k: v for k, v in y._impl.tangents.items() if k != level} or None
    return y


# ----------------------------------------------------------------------------- jacobians
# what jacrev and jacfwd take and return alike, written once for both docstrings
_JACOBIAN_OPTIONS = """\
argnums: int or tuple of ints: which positional arguments to differentiate (default
            0). With a tuple each output leaf gets a tuple with one Jacobian per argument.
        has_aux: ``fun`` returns ``(out, aux)``; the result is then ``(jacobian, aux)``.

    Returns:
        A function of the same arguments as ``fun`` returning the Jacobian."""


def _jacobian_doc(fn):
    fn.__doc__ = fn.__doc__.replace("{jacobian_options}", _JACOBIAN_OPTIONS)
    return fn


@_jacobian_doc
def jacrev(fun, argnums=0, has_aux=False):
    """Jacobian by reverse mode: one pullback vmapped over the output basis.

    Efficient when the output is smaller than the input. The result has the output's
    structure on the outside and the (``argnums``) inputs' inside; each leaf has shape
    ``out.shape + in.shape``.

    Args:
        fun: a function of tensors returning a float tensor or a pytree of them.
        {jacobian_options}

    Raises:
        TypeError: for a non-float output or differentiated argument.

    Example:
        >>> nb.jacrev(lambda x: x * x)(nb.constant([1.0, 2.0])).tolist()
        [[2.0, 0.0], [0.0, 4.0]]
    """
    check_callable("jacrev", fun)

    def jac(*args, **kwargs):
        f, dyn, single = _split_argnums(fun, args, kwargs, argnums, "jacrev")
        with grad_level() as level:
            return _jacrev_at(f, dyn, level, single)

    def _jacrev_at(f, dyn, level, single):
        res = _vjp(f, dyn, has_aux, level)
        out, pullback = res[0], res[1]
        o_flat, o_tree = tree_flatten(out)
        per_out = []
        for k, o in enumerate(o_flat):
            o = _scalar_output(o)  # its pullback is zero (the pullback skips the number)
            if not isinstance(o, Tensor) or not o.dtype.is_float:
                raise TypeError(
                    f"jacrev requires real-valued (float) outputs, got "
                    f"{getattr(o, 'dtype', type(o).__name__)}"
                )
            n = o.size
            basis = _basis(n, o.dtype).reshape((n,) + o.shape)

            def pb(ct, k=k):
                cts = [
                    ct if j == k else _zeros_like(oo) if isinstance(oo, Tensor) else oo
                    for j, oo in enumerate(o_flat)
                ]
                return pullback(tree_unflatten(o_tree, cts))

            g = vmap(pb)(basis)
            g = tree_map(lambda leaf, o=o: leaf.reshape(o.shape + leaf.shape[1:]), g)
            per_out.append(g[0] if single else g)
        result = tree_unflatten(o_tree, per_out)
        return (result, res[2]) if has_aux else result

    return jac


@_jacobian_doc
def jacfwd(fun, argnums=0, has_aux=False):
    """Jacobian by forward mode: one pushforward vmapped over the basis of every input leaf.

    Efficient when the input is smaller than the output. Same result layout as
    :func:`jacrev`: each leaf has shape ``out.shape + in.shape``.

    Args:
        fun: a function of tensors returning a tensor or a pytree of them.
        {jacobian_options}

    Raises:
        TypeError: for a differentiated argument that is not float.
    """
    check_callable("jacfwd", fun)

    def jac(*args, **kwargs):
        f, dyn, single = _split_argnums(fun, args, kwargs, argnums, "jacfwd")
        d_flat, d_tree = tree_flatten(tuple(dyn))
        # one pushforward vmapped over the basis of every input leaf at once (one
        # evaluation of ``f``: its random draws are the same for every leaf's columns)
        sizes = [x.size for x in d_flat]
        total = sum(sizes)
        offsets = [sum(sizes[:k]) for k in range(len(sizes))]
        bases = []
        for x, off, n in zip(d_flat, offsets, sizes, strict=True):
            basis = _basis(total, x.dtype)
            if n != total:  # leaf k's coordinates of the whole basis
                basis = basis[:, off : off + n]
            bases.append(basis.reshape((total,) + x.shape))

        traced_aux = []

        def push(*tans):
            # the basis batches one evaluation's tangents: a global draw is shared
            with shared_draws(STATE.active_vmap[-1]):
                res = jvp(f, tuple(dyn), tuple(tree_unflatten(d_tree, list(tans))), has_aux=has_aux)
            if has_aux:
                traced_aux.append(res[2])
            return res[1] if not has_aux else (res[1], res[2])

        aux = None
        g = vmap(push, out_axes=0)(*bases)
        if has_aux:  # a tensor's first copy; a Python value as the function gave it (JAX's)
            g, aux_b = g
            aux = tree_map(
                lambda a, given: a[0] if isinstance(given, Tensor) else given,
                aux_b,
                traced_aux[0],
            )
        go, out_tree = tree_flatten(g)
        cols = []  # per input leaf: output pytree with leaves (*out_shape, *in_shape)
        for x, off, n in zip(d_flat, offsets, sizes, strict=True):
            col = []
            for leaf in go:
                block = leaf if n == total else leaf[off : off + n]
                block = block.reshape(x.shape + leaf.shape[1:])
                if x.ndim:
                    nd = block.ndim
                    block = moveaxis(block, list(range(x.ndim)), list(range(nd - x.ndim, nd)))
                col.append(block)
            cols.append(col)
        per_out = []
        for j in range(len(cols[0]) if cols else 0):
            per_in = tree_unflatten(d_tree, [cols[k][j] for k in range(len(d_flat))])
            per_out.append(per_in[0] if single else per_in)
        result = tree_unflatten(out_tree, per_out)
        return (result, aux) if has_aux else result

    return jac


_BASES: OrderedDict = OrderedDict()  # (n, dtype, device) -> realized identity, LRU


def _basis(n, dtype):
    """The ``n x n`` identity jacrev/jacfwd vmap over: made once per (size, dtype, device)
    and reused. It is a realized constant, so a compiled Jacobian captures it instead of
    filling it on every call. Bases over 16 MiB, and a basis whose size is one of
    ``compile``'s dynamic dims (filled at each call's size), are made afresh."""
    if isinstance(n, SymDim) or n * n * dtype.itemsize > 1 << 24:
        return eye(n, dtype=dtype)
    key = (n, dtype, get_default_device())
    basis = _BASES.get(key)
    if basis is None:
        basis = constant(np.eye(n, dtype=dtype.numpy), device=key[2])
        _BASES[key] = basis
        if len(_BASES) > 16:
            _BASES.popitem(last=False)
    else:
        _BASES.move_to_end(key)
    return basis


def hessian(fun, argnums=0, has_aux=False):
    """Hessian (matrix of second derivatives), computed as ``jacfwd(jacrev(fun))``.

    Args:
        fun: a function returning a float tensor (usually a scalar).
        argnums: int or tuple of ints: which positional arguments to differentiate
            (default 0), passed to both :func:`jacrev` and :func:`jacfwd`.
        has_aux: ``fun`` returns ``(out, aux)``; the result is then ``(hessian, aux)``.

    Returns:
        A function of the same arguments as ``fun``; for a scalar output and an argument of
        shape ``s`` each Hessian has shape ``s + s``.

    Example:
        >>> nb.hessian(lambda x: (x ** 3).sum())(nb.constant([1.0, 2.0])).tolist()
        [[6.0, 0.0], [0.0, 12.0]]
    """
    check_callable("hessian", fun)
    inner = jacfwd(jacrev(fun, argnums, has_aux), argnums, has_aux)

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        _split_argnums(fun, args, kwargs, argnums, "hessian")  # (its errors named jacfwd)
        return inner(*args, **kwargs)

    return wrapper


# ----------------------------------------------------------------------------- PyTorch style
def detach(x: Tensor) -> Tensor:
    """The value of ``x`` with no autodiff history and ``requires_grad=False``."""
    if type(x) is Tensor and STATE.recording is None:
        impl = x._impl
        if (
            impl.buffer is not None
            and impl.sharding is None
            and not impl.levels
            and not impl.tangents
        ):
            # a realized plain value: a new handle on the same buffer, without an op call
            # (a compiled training step detaches every parameter at every call)
            return Tensor._wrap(TensorImpl(impl.shape, impl.dtype, impl.device, buffer=impl.buffer))
    return stop_gradient(x)


def backward(
    t: Tensor, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None
) -> None:
    """Accumulate d t / d leaf into ``leaf.grad`` for every ``requires_grad`` leaf ``t``
    depends on (``Tensor.backward``), and into ``.grad`` of the computed tensors marked
    with ``retain_grad``. Gradients are realized and detached, unless ``create_graph``.

    Args:
        t: the tensor to differentiate (a scalar unless ``gradient`` is given).
        gradient: the cotangent of ``t`` (same shape); default 1.0 for a scalar.
        retain_graph: accepted for PyTorch compatibility; the graph is always kept, so a
            second ``backward`` through it works either way.
        create_graph: keep each gradient's own history, as PyTorch's: ``x.grad`` is then
            differentiable (``x.grad.sum().backward()`` accumulates the second derivative
            into it, a gradient penalty reaches the parameters).
        inputs: PyTorch's: a tensor or a sequence of tensors whose ``.grad`` alone is
            accumulated (leaves, or computed tensors ``t`` depends on); the others keep
            theirs.

    Raises:
        RuntimeError: for a non-scalar ``t`` without ``gradient``, or an ``inputs`` entry
            ``t`` does not depend on.
    """
    if gradient is None:
        if t.size != 1:  # one element of any shape, as torch.autograd
            raise RuntimeError(
                f"backward() on a non-scalar tensor of shape {t.shape} needs a gradient argument"
            )

        gradient = ones_like(t)
    gradient = as_tensor(gradient, t.dtype, "backward")
    if gradient.shape != t.shape:
        raise ValueError(
            f"backward: gradient of shape {gradient.shape} for a tensor of shape {t.shape}"
        )
    reached = _requires_grad_leaves(t._impl)
    if not reached.leaves:
        raise RuntimeError(
            "backward(): the tensor does not depend on any tensor with requires_grad=True"
        )
    leaves, retained = reached.leaves, reached.retained
    if inputs is not None:
        leaves, retained = _chosen_inputs(inputs, reached)
    if create_graph:  # the gradients' history is walked again: reverse loops keep carries
        got = backward_pass([t], [gradient], leaves, retained)
    else:
        with pulling_back(REQUIRES_GRAD):
            got = backward_pass([t], [gradient], leaves, retained, detach_hooked=True)
    grads = _leaf_totals(leaves, got, not create_graph)
    grads += [(impl, got[id(impl)]) for impl in retained if id(impl) in got]
    # (``_leaf_totals`` gave each leaf's gradient to the leaf its tensor holds now)
    if create_graph:  # the gradients as computed, with their history (not realized here)
        with _ACCUMULATING:
            for leaf, g in grads:
                leaf.grad = g if leaf.grad is None else leaf.grad + g
        return
    # the output is realized with its gradients: one graph runs the forward pass once
    GRAPH.evaluate([t._impl] + [g._impl for _, g in grads])
    with _ACCUMULATING:  # threads' backward calls on shared leaves (Hogwild) add up
        _accumulate_into_grads(grads)


# one accumulation into ``.grad`` at a time: two threads' ``backward`` on the same leaves
# had each read the old ``.grad`` and one sum was lost, where PyTorch's adds up
_ACCUMULATING = threading.Lock()


def _accumulate_into_grads(grads: list) -> None:
    """Add each realized gradient ``g`` into ``leaf.grad`` (in place into a ``.grad``
    tensor a user may hold), or make it the leaf's ``.grad``."""
    for leaf, g in grads:
        new = TensorImpl(leaf.shape, leaf.dtype, leaf.device, leaf.levels, buffer=g._impl.buffer)
        new.sharding = g._impl.sharding
        held = leaf.grad  # the ``.grad`` tensor a user may hold: accumulated into in place
        if held is not None:
            acc = held + Tensor._wrap(new)
            acc.realize()
            new = TensorImpl(
                leaf.shape, leaf.dtype, leaf.device, leaf.levels, buffer=acc._impl.buffer
            )
            new.sharding = acc._impl.sharding
            held._impl = new
            new.wrapper = weakref.ref(held)
        else:
            leaf.grad = Tensor._wrap(new)


def _current_leaf(leaf: TensorImpl) -> TensorImpl:
    """Where ``leaf``'s gradient accumulates: the leaf its tensor holds now. A parameter
    updated in place (``w[i] = v``, an optimizer step, ``load_state_dict``) holds a new
    leaf; a graph built before the update reaches the old one, whose gradient is the same
    parameter's, as in PyTorch (it was kept on the old leaf, where nothing reads it)."""
    ref = leaf.wrapper
    owner = ref() if ref is not None else None
    now = owner._impl if owner is not None else None
    if (
        now is not None
        and now is not leaf
        and now.requires_grad
        and now.shape == leaf.shape
        and now.dtype is leaf.dtype
    ):
        return now
    return leaf


class _Reached(NamedTuple):
    """What ``root``'s recorded history reaches: its ``requires_grad`` leaves, the computed
    values on the way marked with ``retain_grad``, and the ids of every value walked."""

    leaves: list
    retained: list
    seen: set


def _requires_grad_leaves(root: TensorImpl) -> _Reached:
    """The ``requires_grad`` leaves ``root`` depends on through differentiable ops (the walk
    stops at them), and what else it walked (``_Reached``). A leaf reached only through ops
    of derivative zero (``floor``) gets a gradient of zeros (``_leaf_totals``), as in
    PyTorch; one behind a comparison is not reached."""
    found, retained, seen, stack = [], [], set(), [root]
    while stack:
        impl = stack.pop()
        if id(impl) in seen:
            continue
        seen.add(id(impl))
        if impl.requires_grad:
            found.append(impl)
            continue
        if impl.hooks and RETAIN in impl.hooks:
            retained.append(impl)
        node = impl.node
        if node is not None and impl.traced and node.op.differentiable:
            # (a comparison or argmax passes nothing back: what is behind it is not
            # reached, as PyTorch's graph has no edge there)
            stack.extend(node.inputs)
    return _Reached(found, retained, seen)


def _leaf_totals(leaves: list, got: dict, detach: bool) -> list:
    """``(leaf, gradient)`` per tensor: the gradients of a leaf's versions (a graph built
    before an in-place update reaches the old one) summed, then through its hooks once,
    as PyTorch's leaf hooks see the total."""
    totals: dict = {}
    for leaf in leaves:
        cur = _current_leaf(leaf)
        prev = totals.get(id(cur))
        g = got.get(id(leaf))
        if g is None:  # reached through ops of derivative zero only (floor, sign): zeros,
            if prev is not None:  # as PyTorch's (their rules give no cotangent, as JAX's)
                continue
            g = zeros_like(Tensor._wrap(cur))
        totals[id(cur)] = (cur, g if prev is None else prev[1] + g)
    return [
        (cur, _run_hooks(cur.hooks, g, detach) if cur.hooks else g) for cur, g in totals.values()
    ]


def _chosen_inputs(inputs, reached: _Reached) -> tuple[list, list]:
    """``backward(inputs=...)``: the leaves among ``inputs`` (differentiated as targets)
    and the computed tensors among them, with the ``retain_grad`` ones on the way (both
    observed, not stopping the walk); each once. An input must require grad; one the
    output's history never ``reached`` gets no gradient (its ``.grad`` stays as it was), as
    in PyTorch."""
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if not inputs:
        raise RuntimeError("backward(): inputs is empty; name the tensors to differentiate")
    reach = reached.seen
    chosen_leaves, chosen = [], list(reached.retained)
    for x in inputs:
        if not isinstance(x, Tensor):
            raise TypeError(f"backward(): inputs holds a {type(x).__name__}, not a tensor")
        impl = x._impl
        # a compiled function's argument stands for the caller's tensor while it traces
        impl = (STATE.trace_args or {}).get(id(impl), impl)
        if not (impl.requires_grad or REQUIRES_GRAD in impl.traced):
            raise RuntimeError(
                f"backward(): an input of shape {x.shape} does not require grad (it has no "
                "requires_grad history)"
            )
        if id(impl) not in reach:  # the output does not depend on it: no gradient, as PyTorch
            continue
        group = chosen_leaves if impl.requires_grad else chosen
        if all(impl is not c for c in group):  # (named twice: one gradient)
            group.append(impl)
    return chosen_leaves, chosen


jacobian = jacrev  # JAX's alias of jacrev
