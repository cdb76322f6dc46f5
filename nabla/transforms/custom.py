"""``custom_vjp``, ``custom_jvp`` and ``checkpoint``.

All three record one ``custom_call`` node whose inputs are the primal inputs followed by the
forward outputs (computed on stop-gradient copies, so ordinary differentiation cannot see
through them) and whose outputs pass those values through. The node carries a per-call rule
object; differentiation asks the rule:

- ``custom_vjp``: the user's ``bwd(residuals, cotangents)``;
- ``custom_jvp``: the user's ``jvp(primals, tangents)``; reverse mode transposes it by
  running our own reverse mode over the user's (linear-in-tangents) rule;
- ``checkpoint``: the function is *re-run* on fresh copies of the inputs during the backward
  pass, so its intermediates are not kept alive between forward and backward.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import threading
import weakref
from typing import Any, NamedTuple

import numpy as np

from ..core.pytree import flatten_one_level, tree_flatten, tree_map, tree_structure, tree_unflatten
from ..core.state import (
    STATE,
    Replay,
    grad_level,
    is_live,
    live_grad_levels,
    may_be_pulled_back,
    newest_level,
    spmd_axes,
    spmd_axes_as,
    visible,
)
from ..ops import batching
from ..ops._util import as_tensor, check_callable
from ..ops.base import Operation
from ..ops.unary import stop_gradient
from ..runtime.tensor import Tensor
from .autodiff import _fresh, _zeros_like, backward_pass, jvp, write_back

__all__ = [
    "custom_vjp",
    "custom_jvp",
    "checkpoint",
    "remat",
    "checkpoint_policies",
    "checkpoint_name",
]


class CustomCallOp(Operation):
    arity = None
    name = "custom_call"
    # user rules are written for whole operands: operands are gathered to whole values first
    runs_sharded = False
    backend_name = "pass_through"
    multiple_results = True
    physical = True

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"n_skip": kwargs["n_in"]}

    def infer(self, shapes, dtypes, kwargs):
        n = kwargs["n_in"]
        return list(shapes[n:]), list(dtypes[n:])

    # the outputs are the forward outputs passed through as they are: operands are never
    # broadcast to one set of vmap levels, and each output keeps its forward value's (a
    # value replicated over a shard_map axis stays so)
    def implicit_broadcast(self, index, impl):
        return True

    def levels_per_output(self, impls, kwargs):
        return [im.levels for im in impls[kwargs["n_in"] :]]

    def compute_physical_shape(self, impls, kwargs, levels, batch_shape):
        outs = impls[kwargs["n_in"] :]
        return [im.shape for im in outs], [im.dtype for im in outs], [im.device for im in outs]

    # inputs: the function's argument tensors (``n_args``), then the values it closes over
    # that a differentiation may reach (``n_in`` in all), then the forward outputs
    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        n, k = kwargs["n_in"], kwargs.get("n_args", kwargs["n_in"])
        for p in primals[k:n]:
            if STATE.pulling_back & p._impl.traced:
                _closure_error(kwargs["rule"], p, "reverse")
        # an output nobody kept is gone (None): its forward value, an input here, stands in
        # for it, so an unused output gets a zero cotangent of its shape
        outputs = [primals[n + i] if o is None else o for i, o in enumerate(outputs)]
        cts = kwargs["rule"].vjp(primals[:k], cotangents, outputs)
        return list(cts) + [None] * (len(primals) - k)

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        n, k = kwargs["n_in"], kwargs.get("n_args", kwargs["n_in"])
        for p, t in zip(primals[k:n], tangents[k:n]):
            if t is not None:
                _closure_error(kwargs["rule"], p, "forward")
        rule = kwargs["rule"]
        if isinstance(rule, _VjpRule):
            # the forward outputs' own tangents (fwd's ops differentiated along the way),
            # once a reverse level inside this one has taken the rule
            return rule.jvp(primals[:k], tangents[:k], outputs, tangents[n:])
        return rule.jvp(primals[:k], tangents[:k], outputs)

    def described(self, kwargs):
        owner = kwargs["rule"].owner
        return f"{type(owner).__name__} function {owner.fun.__name__}"

    def replay(self, args, kwargs):
        """``compile``'s replay path: call the decorated function again on the new inputs
        (the rule holds per-call residuals, so it must be rebuilt)."""
        return kwargs["rule"].call(args[: kwargs.get("n_args", kwargs["n_in"])])


def _closure_error(rule, value, mode: str):
    owner = rule.owner
    kind = type(owner).__name__
    raise TypeError(
        f"{kind} function {owner.fun.__name__}: {mode}-mode differentiation with respect to "
        f"a value it closes over ({value.dtype.value}{list(value.shape)}, computed from the "
        f"differentiated inputs); its rule gives derivatives for its arguments only, as "
        f"JAX's {kind} does; pass it as an argument"
    )


_custom_call = CustomCallOp()


def _needs_rule(tensors) -> bool:
    # While ``compile`` or a control-flow body records, the rule is needed even on inputs
    # nobody differentiates yet: a recorded node is re-bound later (compile's replay under
    # grad, a body's derivative), and only the ``custom_call`` node brings the rule along.
    return STATE.recording is not None or any(
        is_live(t._impl.traced) or t._impl.tangents for t in tensors
    )


def _live_levels(tensors) -> list:
    """The differentiation levels (reverse and forward) some of ``tensors`` carry now."""
    levels = set()
    for t in tensors:
        impl = t._impl
        levels.update(lv for lv in impl.traced if lv in live_grad_levels)
        if impl.tangents:
            levels.update(impl.tangents)
    return sorted(levels)


def _plain_call(fun, args):
    """``fun(*args)`` when no argument is differentiated, or None when its result still
    depends on a value being differentiated, which it closes over: the rule then handles
    the call, and differentiating with respect to that value is refused, as under
    ``compile`` (and as JAX's custom rules refuse it)."""
    out = fun(*args)
    if any(isinstance(o, Tensor) and _needs_rule([o]) for o in tree_flatten(out)[0]):
        return None
    return out


def _run_recorded(run):
    """``run()``, and the values its ops read that it did not make itself: its arguments
    and what it closes over (the recorded ops still reach an enclosing trace)."""
    outer = STATE.recording
    STATE.recording = recorded = []
    try:
        out = run()
    finally:
        STATE.recording = outer
    if outer is not None:
        outer.extend(recorded)
    made: set = set()
    read: dict = {}
    for node in recorded:
        for impl in node.inputs:
            if id(impl) not in made:
                read.setdefault(id(impl), impl)
        for ref in node.outputs:
            o = ref()
            if o is not None:
                made.add(id(o))
    return out, list(read.values())


def _differentiated_closure(reads, args) -> list:
    """Of the values a custom function read (``_run_recorded``), those outside its argument
    tensors ``args`` that a differentiation may reach: carrying a visible tangent or a live
    grad level, or, while a trace records, computed from its placeholders (a compiled
    function's arguments, a loop body's carry), which its replay may differentiate. A rule
    written for the explicit arguments knows nothing of them."""
    explicit = {id(t._impl) for t in args}
    tracing = STATE.recording is not None
    seen: dict = {}

    def from_placeholders(impl) -> bool:
        if impl.buffer is not None:
            return False
        if impl.node is None:
            return True
        key = id(impl)
        if key not in seen:
            seen[key] = False  # (a graph has no cycles; this only stops repeat visits)
            seen[key] = any(from_placeholders(i) for i in impl.node.inputs)
        return seen[key]

    out = []
    for impl in reads:
        if id(impl) in explicit or not impl.dtype.is_float:
            continue
        if (
            (impl.tangents and any(visible(lv) for lv in impl.tangents))
            or may_be_pulled_back(impl.traced)
            or (tracing and from_placeholders(impl))
        ):
            out.append(impl)
    return out


def _bind(rule, in_tensors, out_flat, what, closure=()):
    """The ``custom_call`` node: ``in_tensors`` (the arguments), then ``closure`` (values
    the function closes over whose derivative its rule cannot give: differentiating with
    respect to them is an error), then the forward outputs."""
    out_flat = [_output_leaf(o, what) for o in out_flat]
    kwargs = {"n_in": len(in_tensors) + len(closure), "rule": rule}
    if closure:
        kwargs["n_args"] = len(in_tensors)
    return _custom_call.bind(list(in_tensors) + list(closure) + list(out_flat), kwargs)


def _described(value) -> str:
    """A value as an error names it: a tensor by its shape and dtype, a sequence by its
    length."""
    if isinstance(value, Tensor):
        return f"a tensor of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def _output_leaf(o, what):
    """An output leaf as the node passes it: a Python number is a 0-d tensor (JAX: an
    array), anything else but a tensor is refused."""
    if isinstance(o, Tensor):
        return o
    if isinstance(o, numbers.Number | np.ndarray | np.generic):
        return as_tensor(o, op=what)
    raise TypeError(
        f"{what} returned an output leaf of type {type(o).__name__}; outputs are tensors"
    )


def _positional(fun, args, kwargs, what):
    """``args`` with ``kwargs`` and the defaults of omitted arguments resolved to their
    positions in ``fun``'s signature, as JAX does for custom rules (the rules see every
    positional argument)."""
    if not kwargs and len(args) >= _n_positional(fun):
        return args
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{what} {getattr(fun, '__name__', fun)}: {e}") from None
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(
            f"{what} {getattr(fun, '__name__', fun)}: keyword-only arguments "
            f"{sorted(bound.kwargs)} cannot be resolved to positions; pass them positionally"
        )
    return bound.args


_N_POSITIONAL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _n_positional(fun) -> int:
    """How many positional parameters ``fun`` has (0 when it has no inspectable
    signature): fewer arguments than this leave defaults to fill in. Kept per function
    (weakly: a checkpointed lambda made every step must not be held, nor what it holds)."""
    try:
        return _N_POSITIONAL[fun]
    except (KeyError, TypeError):
        pass
    try:
        params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return 0
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    n = sum(p.kind in kinds for p in params)
    try:
        _N_POSITIONAL[fun] = n
    except TypeError:  # not weakly referenceable
        pass
    return n


def _matches(ct, arg) -> bool:
    """Whether cotangent tree ``ct`` has the structure of argument ``arg``, a None standing
    for any whole subtree: the same node types, keys and lengths down to ``arg``'s leaves,
    where ``ct`` has a leaf too."""
    if ct is None:
        return True
    try:
        a_children, a_aux = flatten_one_level(arg)
    except ValueError:  # a leaf of the argument: a leaf of the cotangent
        return _is_leaf(ct)
    if type(ct) is not type(arg):
        return False
    c_children, c_aux = flatten_one_level(ct)
    return (
        c_aux == a_aux
        and len(c_children) == len(a_children)
        and all(_matches(c, a) for c, a in zip(c_children, a_children))
    )


def _is_leaf(x) -> bool:
    try:
        flatten_one_level(x)
    except ValueError:
        return True
    return False


def _none_prefix(ct, arg):
    """``ct`` with a None standing for a whole subtree of ``arg`` (JAX: a None cotangent is
    zero for every leaf under it) expanded to one None per leaf."""
    if ct is None:
        return tree_map(lambda _: None, arg)
    if type(ct) is type(arg) and isinstance(arg, tuple | list) and len(ct) == len(arg):
        items = [_none_prefix(c, a) for c, a in zip(ct, arg)]
        return type(arg)(*items) if hasattr(arg, "_fields") else type(arg)(items)
    if isinstance(arg, dict) and isinstance(ct, dict) and ct.keys() == arg.keys():
        return {k: _none_prefix(ct[k], arg[k]) for k in arg}
    return ct


class _CallArgs(NamedTuple):
    """A call's positional arguments, flattened: the leaves, their structure, and the
    positions of the tensor leaves (the node's inputs, what the rules differentiate). A rule
    keeps it to call the function again with other tensors in those positions."""

    flat: list
    tree: Any
    idx: list

    @classmethod
    def of(cls, args) -> _CallArgs:
        flat, tree = tree_flatten(args)
        return cls(flat, tree, [i for i, x in enumerate(flat) if isinstance(x, Tensor)])

    @property
    def tensors(self) -> list:
        return [self.flat[i] for i in self.idx]

    def leaves_with(self, tensors, base=None) -> list:
        """The leaves (or ``base``) with ``tensors`` in the tensor leaves' positions."""
        out = list(self.flat if base is None else base)
        for k, i in enumerate(self.idx):
            out[i] = tensors[k]
        return out

    def rebuilt(self, tensors):
        """The arguments with ``tensors`` in place of the tensor leaves."""
        return tree_unflatten(self.tree, self.leaves_with(tensors))

    def detached(self):
        """The arguments with stop-gradient copies of the tensor leaves."""
        return self.rebuilt([stop_gradient(t) for t in self.tensors])

    def recall(self, fn, tensors) -> list:
        """The tensor leaves of ``fn``'s output on the arguments rebuilt with ``tensors``."""
        out = fn(*self.rebuilt(tensors))
        return [o for o in tree_flatten(out)[0] if isinstance(o, Tensor)]


def _fill_zeros(cts, like):
    return [(_zeros_like(p) if c is None else c) for c, p in zip(cts, like)]


def _pull_back(fn, points, cotangents, outputs, linear: str | None = None):
    """Cotangents of ``points`` for ``fn(fresh copies of points)`` given output cotangents.

    ``linear`` names a map that must be linear in ``points`` (a custom_jvp rule's tangent
    map, pulled back at zero tangents): a cotangent that still depends on the points
    shows that it is not (``t * t``'s is ``2 * t * ct``), where the pullback at zero would
    silently give 0; that is a ``TypeError`` naming the map."""
    with grad_level() as level:
        copies = [_fresh(p, level) for p in points]
        outs = fn(copies)
        cts = _fill_zeros(cotangents, outputs)
        pairs = [(o, c) for o, c in zip(outs, cts) if isinstance(o, Tensor)]
        got = backward_pass([o for o, _ in pairs], [c for _, c in pairs], [c._impl for c in copies])
        results = [got.get(id(c._impl)) for c in copies]
        if linear is not None and any(r is not None and level in r._impl.traced for r in results):
            raise TypeError(
                f"{linear} is not linear in its tangents: reverse mode (grad, vjp) "
                f"transposes it, so the tangent it returns must be a linear function of "
                f"the input tangents (no products or nonlinear functions of them); for a "
                f"gradient of another form, use custom_vjp"
            )
    return results


# ----------------------------------------------------------------------------- custom_vjp
class custom_vjp:  # noqa: N801 - JAX's spelling
    """Give a function a custom reverse-mode rule (JAX's ``custom_vjp``).

    ``nondiff_argnums`` (JAX's) names positional arguments that get no cotangent (a
    function, a static setting): ``bwd`` receives them first, ``bwd(*nondiff, residuals,
    ct)``, and returns cotangents for the other arguments only.

    Example:
        >>> @nb.custom_vjp
        ... def f(x): return nb.sin(x)
        >>> f.defvjp(lambda x: (nb.sin(x), nb.cos(x)), lambda res, g: (g * res,))
    """

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(sorted(nondiff_argnums))
        self.fwd = None
        self.bwd = None
        # .level: while this function's fwd runs, the differentiation level it runs for
        self._in_fwd = threading.local()

    def __deepcopy__(self, memo):
        # a function: copying a model that holds one shares it, as Python's functions are
        return self

    def __copy__(self):
        return self

    def defvjp(self, fwd, bwd):
        """``fwd(*args) -> (out, residuals)``; ``bwd(residuals, ct) -> tuple of cts``."""
        self.fwd = fwd
        self.bwd = bwd
        return self

    def __call__(self, *args, **kwargs):
        if self.fwd is None:
            raise TypeError(f"custom_vjp function {self.fun.__name__} has no defvjp rules")
        args = _positional(self.fun, args, kwargs, "custom_vjp function")
        split = _CallArgs.of(args)
        tensors = split.tensors
        # Inside its own fwd (JAX's usual ``def f_fwd(x): return f(x), res``) the function
        # is its primal computation for the level that fwd runs for, and keeps its rule for
        # the levels outside it, as JAX's: ``grad(grad(f))`` differentiates ``f(x)`` in fwd
        # by the rule too (the plain code's derivative may overflow where the rule's does
        # not). A level is the newest one among the inputs' differentiations.
        running = getattr(self._in_fwd, "level", None)
        levels = _live_levels(tensors)
        if running is not None:
            levels = [lv for lv in levels if lv < running]
            if not levels:
                return self.fun(*args)
        elif STATE.recording is None and not levels:  # (``_needs_rule``, from ``levels``)
            if (out := _plain_call(self.fun, args)) is not None:
                return out
        # fwd sees the real inputs: residuals keep their links for higher-order reverse mode,
        # while the rule returns no cotangent for the forward outputs (no double counting).
        self._in_fwd.level = max(levels, default=math.inf)
        try:
            got, reads = _run_recorded(lambda: self.fwd(*args))
        finally:
            self._in_fwd.level = running
        if not isinstance(got, tuple | list) or len(got) != 2:
            # (a bare output was unpacked by its rows, and the error then blamed bwd)
            raise TypeError(
                f"custom_vjp fwd of {self.fun.__name__} must return a pair (output, "
                f"residuals), got {_described(got)}"
            )
        out, res = got
        o_flat, o_tree = tree_flatten(out)
        rule = _VjpRule(self, res, o_tree, split)
        what = f"custom_vjp fwd of {self.fun.__name__}"
        closure = [Tensor._wrap(i) for i in _differentiated_closure(reads, tensors)]
        return tree_unflatten(o_tree, _bind(rule, tensors, o_flat, what, closure))


class _VjpRule:
    def __init__(self, owner, res, o_tree, args: _CallArgs):
        self.owner, self.res, self.o_tree, self.args = owner, res, o_tree, args

    def call(self, tensors):
        return self.args.recall(self.owner, tensors)

    def vjp(self, primals, cotangents, outputs):
        cts = tree_unflatten(self.o_tree, _fill_zeros(cotangents, outputs))
        nondiff = self.owner.nondiff_argnums
        args = tree_unflatten(self.args.tree, self.args.flat)
        got = self.owner.bwd(*[args[i] for i in nondiff], self.res, cts)
        if isinstance(got, list):  # as JAX: a list of cotangents is taken as the tuple
            got = tuple(got)
        if not isinstance(got, tuple):
            raise TypeError(f"custom_vjp bwd of {self.owner.fun.__name__} must return a tuple")
        if nondiff:  # no cotangent for them: None at each of their leaves
            if len(got) != len(args) - len(nondiff):
                raise TypeError(
                    f"custom_vjp bwd of {self.owner.fun.__name__} returned {len(got)} "
                    f"cotangents for {len(args) - len(nondiff)} differentiable arguments"
                )
            rest = iter(got)
            got = tuple(
                tree_map(lambda _: None, a) if i in nondiff else next(rest)
                for i, a in enumerate(args)
            )
        if len(got) == len(args):  # None for a whole argument: no cotangent for its leaves
            for i, (g, a) in enumerate(zip(got, args)):
                if not _matches(g, a):  # (JAX's TypeError: not matched up by position)
                    raise TypeError(
                        f"custom_vjp bwd of {self.owner.fun.__name__} must return cotangents "
                        f"structured as the arguments (None for a whole subtree): for argument "
                        f"{i} of structure {tree_structure(a)} it returned one of structure "
                        f"{tree_structure(g)}"
                    )
            got = tuple(_none_prefix(g, a) for g, a in zip(got, args))
        flat, _ = tree_flatten(got, is_leaf=lambda x: x is None)
        n_flat = len(self.args.flat)
        if len(flat) != n_flat:  # a structure error: JAX's TypeError
            raise TypeError(
                f"custom_vjp bwd of {self.owner.fun.__name__} returned {len(flat)} cotangents "
                f"for {n_flat} inputs"
            )
        tensors = set(self.args.idx)
        for i, leaf in enumerate(self.args.flat):  # a Python number's cotangent: a scalar
            ct = flat[i]
            if i not in tensors and ct is not None and isinstance(leaf, numbers.Number):
                shape = tuple(ct.shape) if isinstance(ct, Tensor) else np.shape(ct)
                if shape != ():
                    raise ValueError(
                        f"custom_vjp bwd of {self.owner.fun.__name__} returned a cotangent of "
                        f"shape {shape} for the Python number {leaf!r} (shape ())"
                    )
        return [self._fit(flat[i], p) for i, p in zip(self.args.idx, primals)]

    def _fit(self, ct, primal):
        """A cotangent from ``bwd`` as the pipeline takes it. Under a vmap that has finished
        (``grad`` of a function that vmaps this one), an input the vmap did not batch gets
        the sum over its elements, as every op's rule gives (``bwd`` computes per element)."""
        if ct is None:
            return None
        if not isinstance(ct, Tensor):
            ct = as_tensor(ct, primal.dtype, "custom_vjp bwd")
        if ct._impl.levels != primal._impl.levels:
            ct = batching.sum_finished_levels(ct, primal)
        if ct.shape != primal.shape:
            raise ValueError(
                f"custom_vjp bwd of {self.owner.fun.__name__} returned a cotangent of shape "
                f"{ct.shape} for an input of shape {primal.shape}"
            )
        return ct

    def jvp(self, primals, tangents, outputs, fwd_tangents):
        """Forward mode over a reverse mode that takes the rule (``hessian``, ``jacfwd``
        of ``grad``): the reverse level, inside this one, runs ``fwd`` and later ``bwd`` as
        ordinary code, which this level differentiates; the outputs' tangents are then
        those of ``fwd``'s outputs, as in JAX. Forward mode straight on the function has
        no rule to use, as in JAX."""
        # (``_apply_jvp`` hides this level, and newer ones, while the rules run)
        level = STATE.hidden[-1][0] if STATE.hidden else math.inf
        inner = any(lv > level and lv in live_grad_levels for p in primals for lv in p._impl.traced)
        if not inner:
            raise TypeError(
                f"cannot use forward-mode differentiation on custom_vjp function "
                f"{self.owner.fun.__name__}; use custom_jvp instead"
            )
        return list(fwd_tangents)


# ----------------------------------------------------------------------------- custom_jvp
class custom_jvp:  # noqa: N801
    """Give a function a custom forward-mode rule (JAX's ``custom_jvp``); reverse mode is
    derived from it automatically, by transposing the rule: its tangent output must be
    linear in the tangents (reverse mode raises ``TypeError`` on a rule that is not).

    ``nondiff_argnums`` (JAX's) names positional arguments that get no tangent (a function,
    a static setting): the rule receives them first, ``jvp_fn(*nondiff, primals,
    tangents)``, with ``primals``/``tangents`` holding the other arguments.

    Example:
        >>> @nb.custom_jvp
        ... def f(x): return nb.log1p(nb.exp(x))
        >>> @f.defjvp
        ... def f_jvp(primals, tangents):
        ...     (x,), (t,) = primals, tangents
        ...     return f(x), t * nb.sigmoid(x)
    """

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.jvp_fn = None
        self.nondiff_argnums = tuple(sorted(nondiff_argnums))

    def defjvp(self, jvp_fn):
        """``jvp_fn(primals, tangents) -> (primal_out, tangent_out)``; with
        ``nondiff_argnums`` (JAX's), ``jvp_fn(*nondiff, primals, tangents)`` where
        ``primals``/``tangents`` hold the other arguments."""
        self.jvp_fn = jvp_fn
        return jvp_fn

    def defjvps(self, *jvps):
        """One rule per positional argument (JAX's ``defjvps``): ``jvp_i(tangent_i,
        primal_out, *primals)`` is argument i's contribution to the output tangent (a pytree
        like the output); None for an argument without one. The contributions are summed."""

        if self.nondiff_argnums:
            raise TypeError(
                f"custom_jvp function {self.fun.__name__}: defjvps cannot be used with "
                "nondiff_argnums (as in JAX); use defjvp"
            )

        def jvp_fn(primals, tangents):
            out = self.fun(*primals)
            total = None
            for rule, t in zip(jvps, tangents, strict=False):
                if rule is None or t is None:
                    continue
                part = rule(t, out, *primals)
                total = part if total is None else tree_map(lambda a, b: a + b, total, part)
            if total is None:
                total = tree_map(_zeros_like, out)
            return out, total

        self.jvp_fn = jvp_fn

    def __call__(self, *args, **kwargs):
        if self.jvp_fn is None:
            raise TypeError(f"custom_jvp function {self.fun.__name__} has no defjvp rule")
        args = _positional(self.fun, args, kwargs, "custom_jvp function")
        split = _CallArgs.of(args)
        tensors = split.tensors
        if not _needs_rule(tensors) and (out := _plain_call(self.fun, args)) is not None:
            return out
        detached = split.detached()
        out, reads = _run_recorded(lambda: self.fun(*detached))
        o_flat, o_tree = tree_flatten(out)
        rule = _JvpRule(self, split)
        what = f"custom_jvp function {self.fun.__name__}"
        closure = _differentiated_closure(reads, _CallArgs.of(detached).tensors)
        closure = [Tensor._wrap(i) for i in closure]
        return tree_unflatten(o_tree, _bind(rule, tensors, o_flat, what, closure))


def _zero_tangent(x):
    """The tangent of an argument nobody differentiates: zeros, for a Python number too (a
    rule computes with every tangent, as in JAX); None for a value that is not a number."""
    if isinstance(x, Tensor):
        return _zeros_like(x)
    if isinstance(x, numbers.Number) and not isinstance(x, bool):
        return type(x)(0)
    return None


class _JvpRule:
    def __init__(self, owner, args: _CallArgs):
        self.owner, self.args = owner, args

    def call(self, tensors):
        return self.args.recall(self.owner, tensors)

    def _call_user(self, primals, tangents):
        p = self.args.leaves_with(primals)
        t = self.args.leaves_with(tangents, [None] * len(p))
        t = [tt if tt is not None else _zero_tangent(x) for tt, x in zip(t, p)]
        p_args = tree_unflatten(self.args.tree, p)
        t_args = tree_unflatten(self.args.tree, t)
        nondiff = self.owner.nondiff_argnums
        if nondiff:  # JAX's order: the nondiff arguments first, then the others' pairs
            keep = [i for i in range(len(p_args)) if i not in nondiff]
            rule_args = [p_args[i] for i in nondiff]
            p_args, t_args = [p_args[i] for i in keep], [t_args[i] for i in keep]
            got = self.owner.jvp_fn(*rule_args, tuple(p_args), tuple(t_args))
        else:
            got = self.owner.jvp_fn(tuple(p_args), tuple(t_args))
        name = f"custom_jvp rule of {self.owner.fun.__name__}"
        if not isinstance(got, tuple | list) or len(got) != 2:
            raise TypeError(f"{name} must return a pair (primal_out, tangent_out)")
        pout, tout = got
        # as JAX: the two outputs have one structure (the function's value is the one the
        # call computed; the rule's primal is only checked)
        if tree_structure(pout) != tree_structure(tout):
            raise TypeError(
                f"{name} must produce primal and tangent outputs of the same structure, got "
                f"{tree_structure(pout)} and {tree_structure(tout)}"
            )
        return tree_flatten(pout)[0], [_output_leaf(t, name) for t in tree_flatten(tout)[0]]

    def _tangents_of(self, primals, tangents, outputs):
        """The rule's output tangents, each checked against its primal output (JAX's
        check: a tangent of another shape or dtype would flow on silently); the rule's own
        primal outputs are checked against the function's the same way."""
        pout, got = self._call_user(primals, tangents)
        name = f"custom_jvp rule of {self.owner.fun.__name__}"
        if len(got) != len(outputs):
            raise TypeError(f"{name}: {len(got)} tangent leaves for {len(outputs)} outputs")
        for k, (p, t, o) in enumerate(zip(pout, got, outputs)):
            for what, v in (("primal", p), ("tangent", t)):
                if isinstance(v, Tensor) and (
                    tuple(v.shape) != tuple(o.shape) or v.dtype != o.dtype
                ):
                    raise TypeError(
                        f"{name}: {what} output {k} is {v.dtype.value}{list(v.shape)} for the "
                        f"function's output {o.dtype.value}{list(o.shape)}; they must match"
                    )
        return got

    def jvp(self, primals, tangents, outputs):
        return self._tangents_of(primals, tangents, outputs)

    def vjp(self, primals, cotangents, outputs):
        # The tangent map is linear: transpose it with our own reverse mode.
        return _pull_back(
            lambda probes: self._tangents_of(primals, probes, outputs),
            [_zeros_like(p) for p in primals],
            cotangents,
            outputs,
            linear=f"custom_jvp rule of {self.owner.fun.__name__}",
        )


# ----------------------------------------------------------------------------- checkpoint
def checkpoint(fun=None, *, prevent_cse=True, policy=None, static_argnums=()):
    """Rematerialize ``fun`` in the backward pass instead of keeping its intermediates.

    The forward pass runs on stop-gradient copies (its intermediates are not kept for
    differentiation); reverse mode re-runs ``fun`` on fresh copies of the inputs and
    differentiates that. Values and gradients equal those without checkpointing. Also
    ``nb.remat``; usable as ``@nb.checkpoint`` or ``@nb.checkpoint(...)``.

    Args:
        fun: the function, taking positional arguments (pytrees of tensors).
        prevent_cse: accepted for JAX compatibility; ignored.
        policy: accepted for JAX compatibility (which intermediates to save, e.g. one of
            ``nb.checkpoint_policies``); ignored: nothing is saved, everything is
            recomputed (the values are the same under every policy).
        static_argnums: accepted for JAX compatibility: arguments that are not tensors are
            static already (tensors given at these positions are refused).

    Returns:
        The wrapped function (or a decorator when ``fun`` is None).
    """
    if fun is None:
        return functools.partial(
            checkpoint, prevent_cse=prevent_cse, policy=policy, static_argnums=static_argnums
        )
    check_callable("checkpoint", fun)
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        args = _positional(fun, args, kwargs, "checkpoint of")
        for i in static:
            if -len(args) <= i < len(args) and isinstance(args[i], Tensor):
                raise TypeError(
                    f"checkpoint of {getattr(fun, '__name__', fun)}: argument {i} is in "
                    "static_argnums but is a tensor; static arguments are Python values"
                )
        split = _CallArgs.of(args)
        tensors = split.tensors
        if not _needs_rule(tensors):
            return fun(*args)
        copies = [stop_gradient(t) for t in tensors]
        befores = [c._impl for c in copies]
        detached = split.rebuilt(copies)
        outer_log, STATE.key_log = STATE.key_log, []
        outer_fw, STATE.remat_forward = STATE.remat_forward, True
        since = newest_level()  # (vmaps newer than this are the function's own)
        try:
            out, reads = _run_recorded(lambda: fun(*detached))
            keys = STATE.key_log
        finally:
            STATE.key_log, STATE.remat_forward = outer_log, outer_fw
        if outer_log is not None:
            outer_log.extend(keys)
        if _differentiated_closure(reads, _CallArgs.of(detached).tensors):
            # it closes over values being differentiated (a layer's own weights): the
            # re-run could not give their gradients, so it runs as it is, intermediates kept
            # (pass them as arguments to save the memory), with the keys drawn above
            outer_replay = STATE.key_replay
            STATE.key_replay = Replay(list(keys), since, newest_level())
            try:
                return fun(*args)
            finally:
                STATE.key_replay = outer_replay
        # in-place updates of the arguments (a BatchNorm's running statistics) reach the
        # caller's tensors, not only the copies the forward ran on
        write_back(tensors, copies, befores)
        o_flat, o_tree = tree_flatten(out)
        rule = _RematRule(fun, split, wrapped, keys, since)
        what = f"checkpoint of {getattr(fun, '__name__', fun)}"
        return tree_unflatten(o_tree, _bind(rule, tensors, o_flat, what))

    return wrapped


remat = checkpoint


class _RematRule:
    def __init__(self, fun, args: _CallArgs, wrapped, keys: list, since: int):
        self.fun, self.args, self.wrapped = fun, args, wrapped
        self.spmd = dict(spmd_axes)  # inside a shard_map body: its per-device view
        self.keys = keys  # the forward's draws from the global generator (``Drawn``)
        self.since = since  # the newest level when the forward began

    def call(self, tensors):
        return self.args.recall(self.wrapped, tensors)

    def _rerun(self, inputs):
        # the forward's keys again (PyTorch's checkpoint restores the RNG state): a
        # dropout inside is differentiated with the mask the forward applied
        outer = STATE.key_replay
        STATE.key_replay = Replay(list(self.keys), self.since, newest_level())
        try:
            with spmd_axes_as(self.spmd):
                return tree_flatten(self.fun(*self.args.rebuilt(inputs)))[0]
        finally:
            STATE.key_replay = outer

    def vjp(self, primals, cotangents, outputs):
        return _pull_back(self._rerun, primals, cotangents, outputs)

    def jvp(self, primals, tangents, outputs):
        tans = [(_zeros_like(p) if t is None else t) for p, t in zip(primals, tangents)]
        _, touts = jvp(lambda *xs: tuple(self._rerun(list(xs))), tuple(primals), tuple(tans))
        return list(touts)


# ----------------------------------------------------------------------------- policies
def _saves_nothing(*_args, **_kwargs) -> bool:
    return False


def _saves_everything(*_args, **_kwargs) -> bool:
    return True


def _named_policy(*names):
    """A policy over the values named by ``checkpoint_name`` (JAX's signature)."""
    return _saves_nothing


class checkpoint_policies:  # noqa: N801 - JAX's namespace
    """JAX's ``jax.checkpoint_policies``, so code passing ``policy=`` runs unchanged. A
    policy says which intermediates a ``checkpoint`` keeps; here ``checkpoint`` keeps none
    and recomputes every intermediate under any policy, which changes memory and time,
    never values. The names are JAX's: the policies themselves, and the constructors taking
    names (``save_only_these_names("a")``) or policies (``save_from_both_policies``)."""

    everything_saveable = staticmethod(_saves_everything)
    nothing_saveable = staticmethod(_saves_nothing)
    dots_saveable = staticmethod(_saves_nothing)
    checkpoint_dots = staticmethod(_saves_nothing)
    dots_with_no_batch_dims_saveable = staticmethod(_saves_nothing)
    checkpoint_dots_with_no_batch_dims = staticmethod(_saves_nothing)
    save_anything_except_these_names = staticmethod(_named_policy)
    save_any_names_but_these = staticmethod(_named_policy)
    save_only_these_names = staticmethod(_named_policy)

    @staticmethod
    def save_from_both_policies(policy_1, policy_2):
        return _saves_nothing


def checkpoint_name(x, name: str):
    """JAX's ``checkpoint_name``: ``x`` unchanged, named for a checkpoint policy (which
    ``checkpoint`` accepts and does not need: it recomputes every intermediate).

    Args:
        x: a pytree of tensors.
        name: the name a policy would refer to.

    Returns:
        ``x``.
    """
    if not isinstance(name, str):
        raise TypeError(f"checkpoint_name: name must be a string, got {type(name).__name__}")
    return x
