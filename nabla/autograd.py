"""``nb.autograd``: PyTorch's ``torch.autograd`` names over nabla's own machinery, so a
ported script's gradient code runs unchanged.

- :func:`grad` is ``torch.autograd.grad``: the gradients of outputs with respect to
  inputs, returned, not accumulated (no ``.grad`` changes), differentiable again with
  ``create_graph=True`` (a gradient penalty).
- :class:`Function` is ``torch.autograd.Function``: ``forward(ctx, ...)`` and
  ``backward(ctx, *grads)`` as static methods, called through ``apply``; it runs as a
  ``custom_vjp`` (``nb.custom_vjp``), so ``grad``, ``vmap`` and ``compile`` take it too.
- ``functional`` holds ``jacobian``, ``hessian``, ``vjp``, ``jvp``, ``hvp`` and ``vhp``
  with ``torch.autograd.functional``'s signatures, over ``nb.jacrev``, ``nb.hessian``,
  ``nb.vjp`` and ``nb.jvp``.
"""

from __future__ import annotations

import types

from .core.state import is_live
from .ops import creation
from .runtime.tensor import Tensor
from .transforms import autodiff
from .transforms.custom import custom_vjp

__all__ = ["Function", "grad", "functional"]


def _tensors(value, what: str) -> list:
    items = [value] if isinstance(value, Tensor) else list(value)
    for t in items:
        if not isinstance(t, Tensor):
            raise TypeError(f"autograd.grad: {what} holds a {type(t).__name__}, not a tensor")
    return items


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused=None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple:
    """The gradients of ``outputs`` with respect to ``inputs`` (``torch.autograd.grad``),
    without touching any ``.grad``.

    Args:
        outputs: a tensor or a sequence of them (each one element, unless its
            ``grad_outputs`` entry is given).
        inputs: a tensor or a sequence of them, each requiring grad (a leaf) or computed
            from one.
        grad_outputs: the vector of each output's vector-Jacobian product (None: ones for
            a one-element output).
        retain_graph: accepted for PyTorch's calls (the graph is always kept).
        create_graph: the gradients keep their history, to be differentiated again.
        only_inputs: accepted for PyTorch's calls (deprecated there).
        allow_unused: an input the outputs do not depend on gets None instead of an error.
        is_grads_batched: not supported (``nb.vmap`` of ``nb.vjp`` batches instead).
        materialize_grads: such an input gets zeros instead of None.

    Returns:
        A tuple with one gradient per input.

    Raises:
        RuntimeError: for an input the outputs do not depend on (without ``allow_unused``
            or ``materialize_grads``), or a non-scalar output without its
            ``grad_outputs``, as PyTorch's.
    """
    if is_grads_batched:
        raise NotImplementedError(
            "autograd.grad: is_grads_batched is not supported; use nb.vmap over nb.vjp"
        )
    outs = _tensors(outputs, "outputs")
    ins = _tensors(inputs, "inputs")
    if grad_outputs is None:
        vectors = [None] * len(outs)
    else:
        vectors = [grad_outputs] if isinstance(grad_outputs, Tensor) else list(grad_outputs)
        if len(vectors) != len(outs):
            raise RuntimeError(
                f"autograd.grad: {len(vectors)} grad_outputs for {len(outs)} outputs"
            )
    total = None
    for out, v in zip(outs, vectors, strict=True):
        if v is not None and tuple(getattr(v, "shape", ())) != tuple(out.shape):
            raise RuntimeError(
                f"autograd.grad: mismatch in shape: a grad_outputs entry of shape "
                f"{tuple(getattr(v, 'shape', ()))} for an output of shape {tuple(out.shape)}"
            )
        if v is None:
            if out.size != 1:
                raise RuntimeError(
                    f"autograd.grad: grad can be implicitly created only for scalar outputs "
                    f"(an output of shape {out.shape}): pass its grad_outputs"
                )
            term = out.sum()
        else:
            term = (out * autodiff.detach(v)).sum()
        total = term if total is None else total + term
    kept = [(x, x.grad) for x in ins]
    for x in ins:
        x.grad = None
    try:
        total.backward(inputs=ins, create_graph=create_graph)
        got = [x.grad for x in ins]
    finally:
        for x, g in kept:
            x.grad = g
    result = []
    for x, g in zip(ins, got, strict=True):
        if g is None:
            if materialize_grads:
                g = creation.zeros_like(x)
            elif not allow_unused:
                raise RuntimeError(
                    f"autograd.grad: an input of shape {x.shape} was not used in the graph "
                    "of the outputs; pass allow_unused=True for None there"
                )
        result.append(g)
    return tuple(result)


class FunctionCtx:
    """``ctx`` of a :class:`Function`: ``save_for_backward(*tensors)`` and
    ``saved_tensors``, ``needs_input_grad``, and any attribute ``forward`` sets for
    ``backward``. ``mark_non_differentiable``, ``mark_dirty`` and
    ``set_materialize_grads`` are accepted (gradients of unused outputs come as zeros)."""

    def __init__(self, args):
        # a float tensor some differentiation reaches: ``requires_grad`` (PyTorch's), or a
        # live ``nb.grad``/``vjp`` level
        self.needs_input_grad = tuple(
            isinstance(a, Tensor)
            and a.dtype.is_float
            and (a.requires_grad or is_live(a._impl.traced))
            for a in args
        )
        self.saved_tensors = ()

    def save_for_backward(self, *tensors) -> None:
        self.saved_tensors = tuple(tensors)

    def mark_non_differentiable(self, *tensors) -> None:
        pass

    def mark_dirty(self, *tensors) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        pass


class Function:
    """``torch.autograd.Function``: subclass it with static ``forward(ctx, *args)`` and
    ``backward(ctx, *grad_outputs)`` (one gradient per ``forward`` argument, None for a
    non-tensor), and call ``MyFn.apply(*args)``. It runs as a ``custom_vjp``: the
    gradient through it is ``backward``'s, under ``Tensor.backward``, ``nb.grad``,
    ``vmap`` and ``compile`` alike."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("autograd.Function: define a static forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("autograd.Function: define a static backward(ctx, ...)")

    @classmethod
    def apply(cls, *args):
        """``forward``'s result, differentiated by ``backward``."""
        rule = cls.__dict__.get("_nabla_rule")
        if rule is None:
            rule = _as_custom_vjp(cls)
            cls._nabla_rule = rule
        return rule(*args)


def _as_custom_vjp(cls):
    def primal(*args):
        return cls.forward(FunctionCtx(args), *args)

    def fwd(*args):
        ctx = FunctionCtx(args)
        return cls.forward(ctx, *args), (ctx, len(args))

    def bwd(res, cotangents):
        ctx, n = res
        cts = cotangents if isinstance(cotangents, tuple) else (cotangents,)
        got = cls.backward(ctx, *cts)
        got = tuple(got) if isinstance(got, tuple | list) else (got,)
        if len(got) > n and all(g is None for g in got[n:]):
            got = got[:n]  # (trailing Nones past the arguments, as PyTorch accepts)
        if len(got) != n:
            raise TypeError(
                f"autograd.Function {cls.__name__}: backward returned an incorrect number "
                f"of gradients (expected {n}, got {len(got)}), one per forward argument"
            )
        return got

    primal.__name__ = cls.__name__
    rule = custom_vjp(primal)
    rule.defvjp(fwd, bwd)
    return rule


def _jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy=None):
    """``torch.autograd.functional.jacobian``: of a function of a tensor (or a tuple of
    tensors), by reverse mode."""
    if isinstance(inputs, Tensor):
        return autodiff.jacrev(func)(inputs)
    argnums = tuple(range(len(inputs)))
    return autodiff.jacrev(func, argnums=argnums)(*inputs)


def _hessian(
    func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy=None
):
    """``torch.autograd.functional.hessian`` of a scalar function."""
    if isinstance(inputs, Tensor):
        return autodiff.hessian(func)(inputs)
    argnums = tuple(range(len(inputs)))
    return autodiff.hessian(func, argnums=argnums)(*inputs)


def _vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``torch.autograd.functional.vjp``: ``(func(inputs), v^T J)``."""
    single = isinstance(inputs, Tensor)
    args = (inputs,) if single else tuple(inputs)
    out, pullback = autodiff.vjp(func, *args)
    if v is None:
        if not isinstance(out, Tensor) or out.size != 1:
            raise RuntimeError(
                "autograd.functional.vjp: v can only be None for a function returning one "
                "tensor of one element, as PyTorch's"
            )
        v = creation.ones_like(out)
    cts = pullback(v)
    return out, cts[0] if single else cts


def _jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``torch.autograd.functional.jvp``: ``(func(inputs), J v)``."""
    single = isinstance(inputs, Tensor)
    args = (inputs,) if single else tuple(inputs)
    tangents = _one_element_default("jvp", args, v, single)
    return autodiff.jvp(func, args, tangents)


def _one_element_default(name: str, args: tuple, v, single: bool) -> tuple:
    """The tangents ``v`` as a tuple; None only for one input of one element (PyTorch's
    rule), then 1."""
    if v is None:
        if len(args) != 1 or args[0].size != 1:
            raise RuntimeError(
                f"autograd.functional.{name}: v can only be None for one input of one "
                "element, as PyTorch's"
            )
        return (creation.ones_like(args[0]),)
    return (v,) if single and isinstance(v, Tensor) else tuple(v)


def _hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``torch.autograd.functional.hvp``: ``(func(inputs), H v)`` (forward over reverse)."""
    single = isinstance(inputs, Tensor)
    args = (inputs,) if single else tuple(inputs)
    tangents = _one_element_default("hvp", args, v, single)
    argnums = 0 if single else tuple(range(len(args)))
    # (the value comes with the gradient: ``func`` is not run a second time for it)
    both = autodiff.value_and_grad(func, argnums=argnums)
    (value, _), (_, hv) = autodiff.jvp(both, args, tangents)
    return value, hv


def _vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``torch.autograd.functional.vhp``: ``(func(inputs), v^T H)`` (equal to ``hvp`` for
    a twice-differentiable ``func``: the Hessian is symmetric)."""
    return _hvp(func, inputs, v, create_graph, strict)


functional = types.SimpleNamespace(
    jacobian=_jacobian, hessian=_hessian, vjp=_vjp, jvp=_jvp, hvp=_hvp, vhp=_vhp
)
