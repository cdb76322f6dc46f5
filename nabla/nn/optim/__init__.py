"""Optimizers: stateful (``SGD``, ``Adam``, ``AdamW``) and functional (``*_init``/``*_update``),
learning-rate schedules and gradient clipping.

The functional form is the primitive and fits inside ``nb.compile``::

    state = adamw_init(params)
    params, state = adamw_update(params, grads, state, lr=1e-3)

``params`` and ``grads`` are pytrees of the same structure (a ``Module`` and the grads
``Module`` that ``nb.grad`` returns for it, or dicts/lists of tensors). Only *trainable* leaves
are updated and carry state: float tensors that are not a module's buffer or frozen parameter
(see :func:`nabla.nn.module.trainable_mask`). The state is a dict of tensors (``"step"``, a
float32 scalar counting completed updates, and one list per moment with one tensor per
trainable leaf), so it is itself a pytree. As PyTorch, each leaf counts its own updates
(Adam's bias correction, SGD's dampening and Adagrad's decay use it): a leaf without a
gradient on some steps falls behind ``"step"``, and its count is kept in ``"steps"`` (one
entry per leaf, None for one in step: a state whose leaves always have gradients has none).

``lr`` is a number or a schedule: a callable of the step count (0 for the first update) that
returns a number or a scalar tensor, e.g. :func:`warmup_cosine`.

The stateful optimizers wrap the functional ones: ``opt = AdamW(model, lr=1e-3)`` (or
``AdamW(model.parameters())``, or any params tree); after ``loss.backward()``, ``opt.step()``
reads each parameter's ``.grad``; ``opt.step(grads)`` takes a grads tree. Both update the
parameters in place (each tensor object keeps its identity, ``requires_grad`` and ``.grad``,
as after PyTorch's ``step``) and return the model (or the params tree). Inside ``nb.compile``
use the functional form: a compiled function's side effects are not replayed on later calls.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections import OrderedDict
from collections.abc import MutableMapping
from typing import NamedTuple

import numpy as np

from ...core.dtypes import DType
from ...core.pytree import tree_flatten, tree_leaves, tree_unflatten
from ...core.state import REQUIRES_GRAD, STATE, enable_grad, is_live
from ...ops import binary, creation, unary
from ...ops._util import as_tensor
from ...runtime.tensor import Tensor, realize
from ...transforms.autodiff import detach, value_and_grad
from ...transforms.compile import compile as _compile
from ..module import (
    Module,
    castable,
    get_policy,
    laid_out_like,
    loaded_tensor,
    named_leaves,
    rebind,
    set_policy,
    trainable_mask,
    zero_grads,
)
from ..normalization import widened

__all__ = [
    "SGD",
    "Adagrad",
    "Adam",
    "AdamW",
    "RMSprop",
    "CompiledStep",
    "Optimizer",
    "adam_init",
    "adagrad_init",
    "adagrad_update",
    "adamax_init",
    "adamax_update",
    "nadam_init",
    "nadam_update",
    "radam_init",
    "radam_update",
    "adadelta_init",
    "adadelta_update",
    "Adamax",
    "NAdam",
    "RAdam",
    "Adadelta",
    "Rprop",
    "ASGD",
    "SparseAdam",
    "sparse_adam_init",
    "sparse_adam_update",
    "Adafactor",
    "adafactor_init",
    "adafactor_update",
    "rprop_init",
    "rprop_update",
    "asgd_init",
    "asgd_update",
    "adam_update",
    "adamw_init",
    "adamw_step",
    "adamw_update",
    "clip_grad_norm",
    "clip_grad_norm_",
    "clip_grad_value",
    "clip_grad_value_",
    "cosine_decay",
    "global_norm",
    "linear_warmup",
    "lr_scheduler",
    "rmsprop_init",
    "rmsprop_update",
    "sgd_init",
    "sgd_step",
    "sgd_update",
    "warmup_cosine",
]


# ----------------------------------------------------------------------------- schedules
def _as_float(step):
    return step if isinstance(step, int | float) else as_tensor(step).cast(DType.float32)


def linear_warmup(peak_lr: float, warmup_steps: int):
    """A schedule rising linearly from ``peak_lr / warmup_steps`` to ``peak_lr``, then flat.

    Args:
        peak_lr: the rate reached after ``warmup_steps`` updates.
        warmup_steps: length of the ramp (at least 1).

    Returns:
        A callable ``lr(step)`` (step 0 is the first update).

    Example:
        >>> [round(linear_warmup(1.0, 4)(s), 2) for s in range(6)]
        [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    """
    warmup_steps = max(1, int(warmup_steps))

    def lr(step):
        step = _as_float(step)
        frac = (step + 1.0) / warmup_steps
        if isinstance(frac, float):
            return peak_lr * min(frac, 1.0)
        return binary.minimum(frac, 1.0) * peak_lr

    return lr


def cosine_decay(peak_lr: float, decay_steps: int, final_lr: float = 0.0):
    """A schedule following half a cosine from ``peak_lr`` (step 0) to ``final_lr`` (step
    ``decay_steps`` and after).

    Args:
        peak_lr: the starting rate.
        decay_steps: length of the decay (at least 1).
        final_lr: the rate at the end (default 0).

    Returns:
        A callable ``lr(step)``.
    """
    decay_steps = max(1, int(decay_steps))

    def lr(step):
        step = _as_float(step)
        if isinstance(step, float | int):
            frac = min(step / decay_steps, 1.0)
            return final_lr + 0.5 * (peak_lr - final_lr) * (1.0 + math.cos(math.pi * frac))
        frac = binary.minimum(step / decay_steps, 1.0)
        return final_lr + 0.5 * (peak_lr - final_lr) * (1.0 + unary.cos(frac * math.pi))

    return lr


def warmup_cosine(peak_lr: float, warmup_steps: int, total_steps: int, final_lr: float = 0.0):
    """Linear warmup for ``warmup_steps`` updates, then cosine decay to ``final_lr`` at
    ``total_steps``.

    Args:
        peak_lr: the rate at the end of the warmup.
        warmup_steps: length of the ramp.
        total_steps: the step at which the decay ends.
        final_lr: the rate at the end (default 0).

    Returns:
        A callable ``lr(step)``.
    """
    warm = linear_warmup(peak_lr, warmup_steps)
    decay = cosine_decay(peak_lr, max(1, total_steps - warmup_steps), final_lr)

    def lr(step):
        step = _as_float(step)
        if isinstance(step, float | int):
            return warm(step) if step < warmup_steps else decay(step - warmup_steps)
        after = binary.maximum(step - warmup_steps, 0.0)
        return binary.where(step < warmup_steps, warm(step), decay(after))

    return lr


def _lr_at(lr, step: Tensor):
    return lr(step) if callable(lr) else lr


def _on(value) -> bool:
    """Is a setting such as ``momentum`` in use? A tensor (a value that a scheduler changes,
    passed into a compiled step) counts as in use; a number when it is nonzero."""
    return isinstance(value, Tensor) or bool(value)


def _like(value, p: Tensor):
    """A setting or rate as a factor of ``p``: a tensor is cast to ``p``'s dtype (a float32
    rate must not promote a bfloat16 parameter); a number is left to broadcasting."""
    return value.cast(p.dtype) if isinstance(value, Tensor) else value


# ----------------------------------------------------------------------------- clipping
def global_norm(tree, norm_type: float = 2.0) -> Tensor:
    """The norm of all the float leaves of ``tree`` taken together (as one vector).

    Args:
        tree: a pytree of tensors (None leaves are skipped).
        norm_type: the p of the p-norm (default 2; ``float("inf")``: the largest magnitude).

    Returns:
        A scalar tensor.

    Raises:
        ValueError: for a ``norm_type`` that is not a number > 0.
    """
    p = _checked_norm_type("global_norm", norm_type)
    # half-precision gradients summed in float32 (a float16 square overflows above 256)
    leaves = [widened(t) for t in tree_leaves(tree) if isinstance(t, Tensor) and t.dtype.is_float]
    if not leaves:
        return creation.zeros(())
    if p == math.inf:
        total = unary.abs(leaves[0]).max()
        for t in leaves[1:]:
            total = binary.maximum(total, unary.abs(t).max().cast(total.dtype))
        return total
    if p == 2.0:
        total = leaves[0].square().sum()
        for t in leaves[1:]:
            total = total + t.square().sum()
        return total.sqrt()
    total = (unary.abs(leaves[0]) ** p).sum()
    for t in leaves[1:]:
        total = total + (unary.abs(t) ** p).sum()
    return total ** (1.0 / p)


def _checked_norm_type(name: str, norm_type) -> float:
    if isinstance(norm_type, str):  # PyTorch takes "inf" too (it calls float() on it)
        try:
            norm_type = float(norm_type)
        except ValueError:
            pass
    if (
        isinstance(norm_type, bool)
        or not isinstance(norm_type, numbers.Real)
        or math.isnan(norm_type)
        or norm_type <= 0
    ):
        raise ValueError(f"{name}: norm_type must be a number > 0 or inf, got {norm_type!r}")
    return float(norm_type)


def clip_grad_norm(grads, max_norm: float, norm_type: float = 2.0):
    """Scale ``grads`` so their global norm is at most ``max_norm`` (functional), by
    ``min(max_norm / (norm + 1e-6), 1)`` as PyTorch.

    Args:
        grads: a pytree of gradient tensors.
        max_norm: the largest allowed global norm.
        norm_type: the p of the p-norm (default 2; ``float("inf")`` for the max norm).

    Returns:
        ``(clipped_grads, norm)``: a tree like ``grads`` and the norm before clipping.

    Raises:
        ValueError: for a ``max_norm`` given as a number that is negative or NaN (a tensor
            one is taken as it is), or a bad ``norm_type``.
    """
    if isinstance(max_norm, numbers.Real) and not max_norm >= 0:
        # (a negative one would flip every gradient's sign), as ``clip_grad_norm_``
        raise ValueError(f"clip_grad_norm: max_norm must be >= 0, got {max_norm}")
    norm = global_norm(grads, _checked_norm_type("clip_grad_norm", norm_type))
    scale = binary.minimum(max_norm / (norm + 1e-6), 1.0)
    leaves, tree = tree_flatten(grads)
    clipped = [g * scale.cast(g.dtype) if isinstance(g, Tensor) else g for g in leaves]
    return tree_unflatten(tree, clipped), norm


def _params_of(parameters) -> list:
    """A Module's parameters, a tensor alone, or an iterable of tensors, as a list."""
    if isinstance(parameters, Module):
        return list(parameters.parameters())
    if isinstance(parameters, Tensor):
        return [parameters]
    return list(parameters)


def clip_grad_norm_(
    parameters,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Clip the ``.grad`` of ``parameters`` in place to a global norm of at most ``max_norm``
    (``torch.nn.utils.clip_grad_norm_``, after ``backward``).

    Args:
        parameters: a Module, a tensor, or an iterable of tensors.
        max_norm: the largest allowed global norm.
        norm_type: the p of the p-norm (default 2; ``float("inf")`` for the max norm).
        error_if_nonfinite: raise if the norm is NaN or infinite (it is computed at the
            call then) instead of scaling every gradient by it.
        foreach: accepted for PyTorch compatibility (its choice of kernels); ignored: the
            gradients are clipped together in one call either way.

    Returns:
        The global norm before clipping (a scalar tensor).

    Raises:
        RuntimeError: with ``error_if_nonfinite``, for a NaN or infinite norm.
        ValueError: for a negative ``max_norm`` or a bad ``norm_type``.
    """
    norm_type = _checked_norm_type("clip_grad_norm_", norm_type)
    if not max_norm >= 0:  # (a negative one would flip every gradient's sign)
        raise ValueError(f"clip_grad_norm_: max_norm must be >= 0, got {max_norm}")
    with_grad = [p for p in _params_of(parameters) if p.grad is not None]
    grads = [p.grad for p in with_grad]
    if STATE.recording is None and grads:  # one compiled call, not two ops per gradient
        clipped, norm = _clip_compiled(grads, float(max_norm), float(norm_type))
    else:
        clipped, norm = clip_grad_norm(grads, max_norm, norm_type)
    if error_if_nonfinite and not math.isfinite(norm.item()):
        raise RuntimeError(
            f"clip_grad_norm_: the total norm of order {norm_type} of the gradients of "
            f"{len(with_grad)} parameters is {norm.item()}; set error_if_nonfinite=False to "
            "clip anyway"
        )
    if STATE.recording is None and clipped:  # (realize() of nothing realizes everything)
        realize(*clipped)
    _write_grads(with_grad, clipped)
    return norm


def _write_grads(params, values) -> None:
    """Each ``p.grad`` takes its new value in place, as PyTorch's clipping does: a
    reference to the gradient taken before sees the clipped values."""
    for p, g in zip(params, values):
        p.grad.copy_(g)


def _clip(grads, max_norm: float, norm_type: float):
    return clip_grad_norm(grads, max_norm, norm_type)


# ``clip_grad_norm_``'s work as one compiled call (traced once per gradient structure and
# setting): called eagerly after every ``backward``, its ops cost more than their compute
_clip_compiled = _compile(_clip)


def _checked_clip_value(name: str, clip_value) -> float:
    if (
        isinstance(clip_value, bool)
        or not isinstance(clip_value, numbers.Real)
        or not (math.isfinite(clip_value) and clip_value >= 0)
    ):
        raise ValueError(
            f"{name}: invalid clip_value={clip_value!r} (must be a finite number >= 0)"
        )
    return float(clip_value)


def clip_grad_value(grads, clip_value: float):
    """Clamp every gradient element into ``[-clip_value, clip_value]`` (functional).

    Args:
        grads: a pytree of gradient tensors (None leaves are kept).
        clip_value: the largest allowed magnitude (a finite number >= 0).

    Returns:
        A tree like ``grads`` with each tensor clamped.

    Raises:
        ValueError: for a negative, NaN or infinite ``clip_value``.
    """
    c = _checked_clip_value("clip_grad_value", clip_value)
    leaves, tree = tree_flatten(grads)
    clipped = [binary.clip(g, -c, c) if isinstance(g, Tensor) else g for g in leaves]
    return tree_unflatten(tree, clipped)


def clip_grad_value_(parameters, clip_value: float, foreach: bool | None = None) -> None:
    """Clamp the ``.grad`` of ``parameters`` in place into ``[-clip_value, clip_value]``
    (``torch.nn.utils.clip_grad_value_``, after ``backward``); parameters without a
    ``.grad`` are skipped.

    Args:
        parameters: a Module, a tensor, or an iterable of tensors.
        clip_value: the largest allowed magnitude of a gradient element (a finite number
            >= 0).
        foreach: accepted for PyTorch compatibility; ignored (as ``clip_grad_norm_``'s).

    Raises:
        ValueError: for a negative, NaN or infinite ``clip_value``.
    """
    c = _checked_clip_value("clip_grad_value_", clip_value)
    with_grad = [p for p in _params_of(parameters) if p.grad is not None]
    clipped = [binary.clip(p.grad, -c, c) for p in with_grad]
    if STATE.recording is None and clipped:
        realize(*clipped)
    _write_grads(with_grad, clipped)


# ----------------------------------------------------------------------------- functional core
def _is_none(x) -> bool:
    return x is None


def _split(params, grads):
    """Flat params, flat grads aligned with them, the treedef and the trainable mask."""
    leaves, tree = tree_flatten(params)
    marked, marked_tree = tree_flatten(params, is_leaf=_is_none)
    g_leaves, g_tree = tree_flatten(grads, is_leaf=_is_none)
    if g_tree == marked_tree:  # (a None in params, a module's unset bias: no gradient)
        g_leaves = [g for p, g in zip(marked, g_leaves, strict=True) if p is not None]
    elif not isinstance(grads, list | tuple):
        raise ValueError(
            f"optimizer: grads of structure {g_tree} for params of structure {tree}; pass the "
            "gradient of the params tree (same structure) or a flat list"
        )
    if len(g_leaves) != len(leaves):
        raise ValueError(
            f"optimizer: grads have {len(g_leaves)} leaves but params have {len(leaves)}; pass "
            "the gradient of the params tree (same structure)"
        )
    return leaves, g_leaves, tree, trainable_mask(params)


def _filled(p: Tensor, value: float) -> Tensor:
    zeros = creation.zeros_like(p)
    return zeros + value if value else zeros


def _zeros_state(params, value: float = 0.0) -> list:
    """One moment per params leaf, in leaf order: zeros for a trainable leaf, None for the
    others (a leaf unfrozen later gets its zeros at its first update). Aligned with every
    leaf, not only the trainable ones, so freezing or unfreezing after the optimizer was
    made never hands one parameter's moments to another."""
    leaves = tree_leaves(params)
    return [_filled(p, value) if t else None for p, t in zip(leaves, trainable_mask(params))]


def _step0() -> Tensor:
    return creation.zeros((), dtype=DType.float32)


def _no_backward_history(t):
    """``t`` cut from the ``Tensor.backward`` graph when that is its only autodiff history.

    An update is not part of the next step's backward graph (PyTorch runs ``step`` under
    ``no_grad``); keeping it would also make every later compiled call take the slow replay
    path. History of a live transform (a ``grad`` around the update) is kept.
    """
    traced = t._impl.traced if isinstance(t, Tensor) else None
    if traced and REQUIRES_GRAD in traced and not is_live(traced - {REQUIRES_GRAD}):
        return detach(t)
    return t


def _apply(params, grads, state, moments, rule, initial: float = 0.0):
    """Run ``rule(p, g, moment_values, done) -> (new_p, new_moment_values)`` on each
    trainable leaf that has a gradient; returns ``(new_params, new_state)``. A leaf without
    moments yet (unfrozen after the state was made) starts from ``initial``.

    ``done`` counts the leaf's own completed updates, as PyTorch keeps a step per
    parameter: a leaf skipped on some steps (no gradient: frozen for a while, or not used)
    falls behind ``state["step"]``, which counts every update. Such a leaf's count is kept in
    ``state["steps"]`` (None for a leaf in step with ``state["step"]``, the usual case,
    so a step whose leaves all have gradients adds nothing); one with no moments yet has
    made no update."""
    leaves, g_leaves, tree, mask = _split(params, grads)
    g_leaves = _tied_totals(leaves, g_leaves)
    step = state["step"]
    for m in moments:
        if len(state[m]) != len(leaves):
            raise ValueError(
                f"optimizer: the state's {m!r} holds {len(state[m])} entries for params with "
                f"{len(leaves)} leaves; make the state (or the optimizer) for these params"
            )
    steps = state.get("steps")
    if steps is None or len(steps) != len(leaves):
        steps = [None] * len(leaves)
    new_leaves, new_moments = list(leaves), {m: list(state[m]) for m in moments}
    new_steps = list(steps)
    for i, (p, g, trainable) in enumerate(zip(leaves, g_leaves, mask)):
        fresh = bool(moments) and state[moments[0]][i] is None  # no update made yet
        done = steps[i]
        if not trainable or g is None:
            if done is None and not fresh and moments:  # falls behind from here
                new_steps[i] = step
            continue
        if done is None and fresh and moments:
            done = new_steps[i] = creation.zeros((), dtype=DType.float32)
        g = _checked_grad(g, p, i, tree)
        old = [state[m][i] if state[m][i] is not None else _filled(p, initial) for m in moments]
        new_p, values = rule(p, g, old, step if done is None else done)
        new_leaves[i] = _no_backward_history(new_p)
        for m, v in zip(moments, values):
            new_moments[m][i] = _no_backward_history(v)
        if done is not None:
            new_steps[i] = done + 1.0
    new_state = {**state, "step": step + 1.0, **new_moments}  # same keys: same pytree
    if "steps" in state or any(c is not None for c in new_steps):
        new_state["steps"] = new_steps
    return tree_unflatten(tree, new_leaves), new_state


def _tied_groups(leaves: list) -> tuple:
    """The leaf positions of each tensor that appears at several leaves (tied weights: an
    embedding shared with the output layer), as a tuple of tuples (usually empty)."""
    at: dict = {}
    for i, p in enumerate(leaves):
        if isinstance(p, Tensor):
            at.setdefault(id(p), []).append(i)
    return tuple(tuple(ix) for ix in at.values() if len(ix) > 1)


def _tied_totals(leaves: list, grads: list, groups: tuple | None = None) -> list:
    """The gradients with each tensor that appears at several leaves given its total at
    all of them (``groups``: ``_tied_groups(leaves)`` when not given). ``nb.grad`` of a
    module gives each leaf its own part; PyTorch's ``.grad`` holds the sum, and so does
    every leaf that reads it (the same tensor at each: already the total). Each leaf then
    makes the same update from the same value, one update of the tensor."""
    groups = _tied_groups(leaves) if groups is None else groups
    if not groups:
        return grads
    grads = list(grads)
    for ix in groups:
        parts = [grads[i] for i in ix if grads[i] is not None]
        if len({id(g) for g in parts}) <= 1:
            continue  # none, one, or the one ``.grad`` read at each leaf
        total = parts[0]
        for g in parts[1:]:
            total = total + g
        for i in ix:
            grads[i] = total
    return grads


def _checked_grad(g, p: Tensor, i: int, tree) -> Tensor:
    """``g`` as a tensor of ``p``'s dtype; a gradient of another shape is a clear error
    naming the leaf (it would broadcast into the parameter, or fail deep in the update)."""
    g = as_tensor(g)
    if g.shape != p.shape:
        raise ValueError(
            f"optimizer: the gradient of params leaf {i} has shape {g.shape}, the parameter "
            f"{p.shape} (params structure {tree})"
        )
    return g.cast(p.dtype)


def sgd_init(params, momentum: float = 0.0) -> dict:
    """The state of :func:`sgd_update` for ``params``.

    Args:
        params: the params pytree (a Module or a tree of tensors).
        momentum: when nonzero, allocate a momentum buffer per trainable leaf.

    Returns:
        ``{"step": 0.0, "momentum": [...]}``: one buffer per params leaf (None for a leaf
        that is not trainable now); an empty list without momentum.
    """
    return {"step": _step0(), "momentum": _zeros_state(params) if _on(momentum) else []}


def _check_settings(
    name,
    lr,
    *,
    momentum=0.0,
    nesterov=False,
    dampening=0.0,
    betas=None,
    eps=0.0,
    wd=0.0,
    alpha=0.0,
    lr_decay=0.0,
    initial_accumulator_value=0.0,
):
    """PyTorch's checks of an optimizer's settings, also refusing NaN and infinity (a schedule
    or tensor ``lr`` is not checked), so a typo fails at once instead of diverging."""
    problems = []

    def number(label, value, low=0.0, high=None):
        """``value`` must be a finite real in ``[low, high)`` (no upper end when None); a
        tensor is not checked."""
        if isinstance(value, Tensor):
            return
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            problems.append(f"{label}={value!r} (must be a number)")
        elif not (math.isfinite(value) and value >= low and (high is None or value < high)):
            where = f">= {low:g}" if high is None else f"in [{low:g}, {high:g})"
            problems.append(f"{label}={value} (must be a finite number {where})")

    if not callable(lr):
        number("lr", lr)
    number("momentum", momentum)
    number("dampening", dampening)
    if nesterov and not _on(momentum):
        problems.append("nesterov=True with momentum=0 (Nesterov needs momentum)")
    if nesterov and dampening:
        problems.append(f"dampening={dampening} (Nesterov momentum needs dampening=0, as PyTorch)")
    if betas is not None:
        if not isinstance(betas, list | tuple) or len(betas) != 2:
            problems.append(f"betas={betas!r} (must be a pair (beta1, beta2))")
        else:
            for i, b in enumerate(betas):
                number(f"betas[{i}]", b, 0.0, 1.0)
    number("eps", eps)
    number("weight_decay", wd)
    number("alpha", alpha)
    number("lr_decay", lr_decay)
    number("initial_accumulator_value", initial_accumulator_value)
    if problems:
        raise ValueError(f"{name}: invalid " + "; ".join(problems))


def sgd_update(
    params,
    grads,
    state=None,
    lr=1e-3,
    momentum: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
    dampening: float = 0.0,
):
    """One SGD step: ``g += weight_decay * p``; with momentum ``buf = momentum * buf + (1 -
    dampening) * g`` (``buf = g`` at the first step, as PyTorch) and the direction ``buf``
    (or ``g + momentum * buf`` with ``nesterov``); ``p -= lr * direction``.

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`sgd_init` (None: a fresh state).
        lr: learning rate or schedule (default 1e-3, PyTorch's).
        momentum: momentum factor (default 0).
        nesterov: use Nesterov momentum (default False).
        weight_decay: L2 penalty added to the gradient (default 0).
        dampening: the share of the gradient held back from the momentum buffer after the
            first step (default 0).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings(
        "sgd_update", lr, momentum=momentum, nesterov=nesterov, dampening=dampening, wd=weight_decay
    )
    if state is None:
        state = sgd_init(params, momentum)
    if _on(momentum) and not state["momentum"]:
        state = {**state, "momentum": _zeros_state(params)}
    rate = _lr_at(lr, state["step"])

    def rule(p, g, moments, done):
        if weight_decay:
            g = g + weight_decay * p
        if not _on(momentum):
            return p - _like(rate, p) * g, []
        # the first update's buffer is the gradient itself; dampening applies from the
        # second on (the leaf's own: a leaf skipped so far has made none)
        kept = 1.0 - dampening * (done > 0).cast(done.dtype) if dampening else 1.0
        share, mom = _like(kept, p), _like(momentum, p)
        buf = mom * moments[0] + share * g
        direction = g + mom * buf if nesterov else buf
        return p - _like(rate, p) * direction, [buf]

    return _apply(params, grads, state, ["momentum"] if _on(momentum) else [], rule)


def adam_init(params, amsgrad: bool = False) -> dict:
    """The state of :func:`adam_update` / :func:`adamw_update` for ``params``.

    Args:
        params: the params pytree.
        amsgrad: also keep the running maximum of the second moment (``"nu_max"``).

    Returns:
        ``{"step": 0.0, "mu": [...], "nu": [...]}``: first and second moments, one per
        params leaf (zeros; None for a leaf that is not trainable now).
    """
    state = {"step": _step0(), "mu": _zeros_state(params), "nu": _zeros_state(params)}
    if amsgrad:
        state["nu_max"] = _zeros_state(params)
    return state


adamw_init = adam_init


def _bias_correction(beta: float, t: Tensor) -> Tensor:
    """``1 - beta ** t`` to float32's precision: ``-expm1(t * log(beta))``, with the log
    in float64. ``1 - beta ** t`` in float32 cancels: 7e-6 relative error at the first step
    with beta 0.999, 7e-4 with 0.99999 (PyTorch computes it in float64)."""
    if isinstance(beta, Tensor):  # beta1 cycled by a scheduler inside a compiled step
        return -unary.expm1(t * unary.log(beta.cast(t.dtype)))
    log_beta = math.log(beta) if beta > 0 else -math.inf
    return -unary.expm1(t * log_beta)


class _AdamSettings(NamedTuple):
    """The settings of one Adam or AdamW update (``decoupled``: AdamW's weight decay)."""

    betas: tuple
    eps: float
    weight_decay: float
    decoupled: bool
    amsgrad: bool
    bias_correction: bool = True


def _adam(params, grads, state, lr, settings: _AdamSettings):
    betas, eps, weight_decay, decoupled, amsgrad, bias_correction = settings
    name = "adamw_update" if decoupled else "adam_update"
    _check_settings(name, lr, betas=betas, eps=eps, wd=weight_decay)
    if amsgrad and "nu_max" not in state:
        state = {**state, "nu_max": _zeros_state(params)}
    b1, b2 = betas
    rate = _lr_at(lr, state["step"])
    corrections: dict = {}  # per count (the leaves in step share one: computed once)

    def corrected(done):
        got = corrections.get(id(done))
        if got is None:
            if bias_correction:
                t = done + 1.0
                got = (_bias_correction(b1, t), _bias_correction(b2, t), done)
            else:  # the raw moments (the original nabla's bias_correction=False)
                one = creation.ones((), dtype=DType.float32)
                got = (one, one, done)
            corrections[id(done)] = got
        return got[:2]

    def rule(p, g, moments, done):
        c1, c2 = corrected(done)
        if weight_decay and not decoupled:
            g = g + weight_decay * p
        beta1 = _like(b1, p)
        mu = beta1 * moments[0] + (1.0 - beta1) * g
        nu = b2 * moments[1] + (1.0 - b2) * g.square()
        kept = [mu, nu]
        if amsgrad:  # the denominator never shrinks: the largest second moment so far
            nu = binary.maximum(moments[2], nu)
            kept.append(nu)
        step = (mu / c1.cast(p.dtype)) / ((nu / c2.cast(p.dtype)).sqrt() + eps)
        if weight_decay and decoupled:
            p = p - (_like(rate, p) * weight_decay) * p
        return p - _like(rate, p) * step, kept

    return _apply(params, grads, state, ["mu", "nu"] + (["nu_max"] if amsgrad else []), rule)


# the arguments adam_update and adamw_update take alike, written once for both docstrings
_ADAM_ARGS = """\
params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`{init}`.
        lr: learning rate or schedule (default 1e-3).
        betas: decay rates of the two moments (default ``(0.9, 0.999)``).
        eps: added to the denominator (default 1e-8)."""


def _adam_doc(init: str):
    def fill(fn):
        fn.__doc__ = fn.__doc__.replace("{adam_args}", _ADAM_ARGS.replace("{init}", init))
        return fn

    return fill


@_adam_doc("adam_init")
def adam_update(
    params, grads, state, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False
):
    """One Adam step (with ``weight_decay`` as an L2 penalty added to the gradient).

    Args:
        {adam_args}
        weight_decay: L2 penalty (default 0).
        amsgrad: divide by the largest second moment so far (AMSGrad; default False).

    Returns:
        ``(new_params, new_state)``.
    """
    return _adam(params, grads, state, lr, _AdamSettings(betas, eps, weight_decay, False, amsgrad))


def _betas(fn: str, betas, beta1, beta2) -> tuple:
    """``betas`` with the original nabla's separate ``beta1``/``beta2`` keywords applied."""
    if beta1 is None and beta2 is None:
        return betas
    if betas is not None:
        raise TypeError(f"{fn}: got both betas={betas!r} and beta1/beta2; pass one form")
    return (0.9 if beta1 is None else beta1, 0.999 if beta2 is None else beta2)


@_adam_doc("adamw_init")
def adamw_update(
    params,
    grads,
    state,
    lr=1e-3,
    betas=None,
    eps=1e-8,
    weight_decay=0.0,
    amsgrad=False,
    *,
    beta1=None,
    beta2=None,
    bias_correction: bool = True,
    realize: bool | None = None,
):
    """One AdamW step: Adam with decoupled weight decay ``p -= lr * weight_decay * p``.

    Its keywords and defaults are the original nabla's functional ``adamw_update`` (``lr``,
    ``weight_decay=0.0``, ``beta1``, ``beta2``, ``eps``, ``bias_correction``, ``realize``);
    the stateful :class:`AdamW` keeps PyTorch's ``weight_decay=1e-2``.

    Args:
        {adam_args}
        weight_decay: decoupled decay (default 0).
        amsgrad: divide by the largest second moment so far (AMSGrad; default False).
        beta1: the first moment's decay rate, instead of ``betas`` (keyword only).
        beta2: the second moment's decay rate, instead of ``betas`` (keyword only).
        bias_correction: divide the moments by ``1 - beta ** t`` (default True); False uses
            the raw moments.
        realize: compute the new params now (True) or leave them lazy (False); None follows
            :meth:`Optimizer.set_execution_policy` (default: lazy; the new state is realized
            with them when ``auto_realize_updated_state`` is on). Ignored while tracing.

    Returns:
        ``(new_params, new_state)``.

    Raises:
        TypeError: for both ``betas`` and ``beta1``/``beta2``.

    Example:
        >>> p = {"w": nb.ones((2,))}
        >>> p, s = adamw_update(p, {"w": nb.ones((2,))}, adamw_init(p), lr=0.1, weight_decay=0.01)
        >>> p["w"].numpy().round(3).tolist()
        [0.899, 0.899]
    """
    betas = _betas("adamw_update", betas, beta1, beta2) or (0.9, 0.999)
    settings = _AdamSettings(betas, eps, weight_decay, True, amsgrad, bool(bias_correction))
    new_params, new_state = _adam(params, grads, state, lr, settings)
    _realize_per_policy(new_params, new_state, realize, functional=True)
    return new_params, new_state


def _realize_per_policy(new_params, new_state, realize_params, functional: bool) -> None:
    """Realize the updated params (and state) as the execution policy (or ``realize_params``)
    says; nothing while a function is being traced."""
    if STATE.recording is not None:
        return
    if realize_params is None:
        realize_params = Optimizer._auto_realize_params and not functional
    todo = [t for t in tree_leaves(new_params) if isinstance(t, Tensor)] if realize_params else []
    if Optimizer._auto_realize_state and (realize_params or not functional):
        todo += [t for t in tree_leaves(new_state) if isinstance(t, Tensor)]
    if todo:
        realize(*todo)


def sgd_step(param, grad, momentum_buffer=None, *, lr, weight_decay=0.0, momentum=0.0):
    """One SGD update of a single tensor, the original nabla's ``sgd_step``: the rule of
    :func:`sgd_update` (``g += weight_decay * p``; with momentum ``buf = momentum * buf + g``,
    or ``buf = g`` when there is no buffer yet; ``p -= lr * buf``).

    Args:
        param: the parameter tensor.
        grad: its gradient (same shape).
        momentum_buffer: the momentum buffer from the previous step, or None.
        lr: learning rate (keyword only).
        weight_decay: L2 penalty added to the gradient (default 0).
        momentum: momentum factor (default 0: no buffer).

    Returns:
        ``(new_param, new_momentum_buffer)``; the buffer is None without momentum.

    Raises:
        ValueError: for a gradient or buffer of another shape, or invalid settings.

    Example:
        >>> p, buf = sgd_step(nb.ones((2,)), nb.ones((2,)), lr=0.5)
        >>> p.tolist(), buf
        ([0.5, 0.5], None)
    """
    param = as_tensor(param, op="sgd_step")
    state = sgd_init(param, momentum)
    if momentum_buffer is not None and _on(momentum):
        state["momentum"] = [_checked_buffer("sgd_step", "momentum_buffer", momentum_buffer, param)]
        state["step"] = state["step"] + 1.0  # a buffer exists: not the first step
    new_param, new_state = sgd_update(param, grad, state, lr, momentum, False, weight_decay)
    return new_param, (new_state["momentum"][0] if _on(momentum) else None)


def adamw_step(
    param,
    grad,
    m,
    v,
    step,
    *,
    lr,
    beta1=0.9,
    beta2=0.999,
    eps=1e-8,
    weight_decay=0.0,
    bias_correction: bool = True,
):
    """One AdamW update of a single tensor, the original nabla's ``adamw_step``: the rule of
    :func:`adamw_update` for one parameter with its moments.

    Args:
        param: the parameter tensor.
        grad: its gradient (same shape).
        m: the first moment before this update (zeros at the start).
        v: the second moment before this update.
        step: the number of this update, counting from 1 (a number or a scalar tensor).
        lr: learning rate (keyword only).
        beta1: first moment decay rate (default 0.9).
        beta2: second moment decay rate (default 0.999).
        eps: added to the denominator (default 1e-8).
        weight_decay: decoupled decay (default 0).
        bias_correction: divide the moments by ``1 - beta ** step`` (default True).

    Returns:
        ``(new_param, new_m, new_v)``.

    Raises:
        ValueError: for a gradient or moment of another shape, or invalid settings.
    """
    param = as_tensor(param, op="adamw_step")
    moments = [_checked_buffer("adamw_step", n, t, param) for n, t in (("m", m), ("v", v))]
    done = as_tensor(step, op="adamw_step").cast(DType.float32) - 1.0
    state = {"step": done.reshape(()), "mu": [moments[0]], "nu": [moments[1]]}
    settings = _AdamSettings((beta1, beta2), eps, weight_decay, True, False, bool(bias_correction))
    new_param, new_state = _adam(param, grad, state, lr, settings)
    return new_param, new_state["mu"][0], new_state["nu"][0]


def _checked_buffer(fn: str, name: str, t, param: Tensor) -> Tensor:
    t = as_tensor(t, op=fn)
    if t.shape != param.shape:
        raise ValueError(f"{fn}: {name} of shape {t.shape} for a parameter of shape {param.shape}")
    return t.cast(param.dtype)


def rmsprop_init(params, momentum: float = 0.0, centered: bool = False) -> dict:
    """The state of :func:`rmsprop_update` for ``params``.

    Args:
        params: the params pytree.
        momentum: when nonzero, also keep a momentum buffer per trainable leaf.
        centered: also keep the running mean of the gradient (centered RMSprop).

    Returns:
        ``{"step": 0.0, "square_avg": [...], "momentum_buffer": [...], "grad_avg": [...]}``
        (PyTorch's state names): zeros per params leaf (None for a leaf that is not trainable
        now); ``momentum_buffer`` and ``grad_avg`` are empty lists when not in use.
    """
    return {
        "step": _step0(),
        "square_avg": _zeros_state(params),
        "momentum_buffer": _zeros_state(params) if _on(momentum) else [],
        "grad_avg": _zeros_state(params) if centered else [],
    }


def rmsprop_update(
    params,
    grads,
    state=None,
    lr=1e-2,
    alpha: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    centered: bool = False,
):
    """One RMSprop step, as ``torch.optim.RMSprop``: ``g += weight_decay * p``;
    ``square_avg = alpha * square_avg + (1 - alpha) * g**2``; the denominator ``avg =
    sqrt(square_avg) + eps`` (``sqrt(square_avg - grad_avg**2) + eps`` when ``centered``, with
    ``grad_avg`` the running mean of ``g``); with momentum ``buf = momentum * buf + g / avg``
    and ``p -= lr * buf``, else ``p -= lr * g / avg``.

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`rmsprop_init` (None: a fresh state).
        lr: learning rate or schedule (default 1e-2, PyTorch's).
        alpha: smoothing constant of the running averages (default 0.99).
        eps: added to the denominator (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).
        momentum: momentum factor (default 0).
        centered: normalize by the estimated variance of the gradient instead of its
            uncentered second moment (default False).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings("rmsprop_update", lr, momentum=momentum, eps=eps, wd=weight_decay, alpha=alpha)
    if state is None:
        state = rmsprop_init(params, momentum, centered)
    if _on(momentum) and not state["momentum_buffer"]:
        state = {**state, "momentum_buffer": _zeros_state(params)}
    if centered and not state["grad_avg"]:
        state = {**state, "grad_avg": _zeros_state(params)}
    rate = _lr_at(lr, state["step"])
    moments = (
        ["square_avg"]
        + (["momentum_buffer"] if _on(momentum) else [])
        + (["grad_avg"] if centered else [])
    )

    def rule(p, g, old, done):
        if weight_decay:
            g = g + weight_decay * p
        square_avg = alpha * old[0] + (1.0 - alpha) * g.square()
        kept = [square_avg]
        if centered:
            grad_avg = alpha * old[-1] + (1.0 - alpha) * g
            avg = (square_avg - grad_avg.square()).sqrt() + eps
        else:
            avg = square_avg.sqrt() + eps
        if _on(momentum):
            buf = _like(momentum, p) * old[1] + g / avg
            kept.append(buf)
            new_p = p - _like(rate, p) * buf
        else:
            new_p = p - _like(rate, p) * (g / avg)
        if centered:
            kept.append(grad_avg)
        return new_p, kept

    return _apply(params, grads, state, moments, rule)


def adagrad_init(params, initial_accumulator_value: float = 0.0) -> dict:
    """The state of :func:`adagrad_update` for ``params``.

    Args:
        params: the params pytree.
        initial_accumulator_value: the starting value of each sum of squared gradients.

    Returns:
        ``{"step": 0.0, "sum": [...]}`` (PyTorch's state name): one accumulator per params
        leaf, filled with ``initial_accumulator_value`` (None for a leaf that is not
        trainable now).
    """
    return {"step": _step0(), "sum": _zeros_state(params, initial_accumulator_value)}


def adagrad_update(
    params,
    grads,
    state=None,
    lr=1e-2,
    lr_decay: float = 0.0,
    weight_decay: float = 0.0,
    initial_accumulator_value: float = 0.0,
    eps: float = 1e-10,
):
    """One Adagrad step, as ``torch.optim.Adagrad``: ``g += weight_decay * p``; ``sum +=
    g**2``; ``p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps)`` at update ``t``
    (1 for the first).

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`adagrad_init` (None: a fresh state).
        lr: learning rate or schedule (default 1e-2, PyTorch's).
        lr_decay: the rate's decay per update (default 0).
        weight_decay: L2 penalty added to the gradient (default 0).
        initial_accumulator_value: the sum a fresh accumulator starts from (for a fresh
            state, and for a leaf first trained after the state was made; default 0).
        eps: added to the denominator (default 1e-10).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings(
        "adagrad_update",
        lr,
        eps=eps,
        wd=weight_decay,
        lr_decay=lr_decay,
        initial_accumulator_value=initial_accumulator_value,
    )
    if state is None:
        state = adagrad_init(params, initial_accumulator_value)
    base = _lr_at(lr, state["step"])

    def rule(p, g, old, done):
        if weight_decay:
            g = g + weight_decay * p
        # ``done`` counts the leaf's completed updates: PyTorch's t - 1
        rate = base / (done * lr_decay + 1.0) if lr_decay else base
        total = old[0] + g.square()
        return p - _like(rate, p) * (g / (total.sqrt() + eps)), [total]

    return _apply(params, grads, state, ["sum"], rule, initial=initial_accumulator_value)


# ----------------------------------------------------------------------------- Adamax, NAdam,
# RAdam, Adadelta (PyTorch's rules and defaults; ``t`` is the leaf's update, from 1)
def adamax_init(params) -> dict:
    """The state of :func:`adamax_update`: ``{"step", "exp_avg", "exp_inf"}`` (PyTorch's
    names), zeros per trainable leaf.

    Args:
        params: the params pytree.

    Returns:
        The state dict.
    """
    return {"step": _step0(), "exp_avg": _zeros_state(params), "exp_inf": _zeros_state(params)}


def adamax_update(
    params, grads, state=None, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0
):
    """One Adamax step, as ``torch.optim.Adamax``: ``m = b1 m + (1 - b1) g``; ``u =
    max(b2 u, |g| + eps)``; ``p -= lr / (1 - b1^t) * m / u``.

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`adamax_init` (None: a fresh state).
        lr: learning rate or schedule (default 2e-3, PyTorch's).
        betas: decay rates of the mean and of the infinity norm (default ``(0.9, 0.999)``).
        eps: added to ``|g|`` (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings("adamax_update", lr, betas=betas, eps=eps, wd=weight_decay)
    if state is None:
        state = adamax_init(params)
    b1, b2 = betas
    rate = _lr_at(lr, state["step"])

    def rule(p, g, old, done):
        if weight_decay:
            g = g + weight_decay * p
        m = b1 * old[0] + (1.0 - b1) * g
        u = binary.maximum(b2 * old[1], g.abs() + eps)
        c1 = _bias_correction(b1, done + 1.0).cast(p.dtype)
        return p - (_like(rate, p) / c1) * (m / u), [m, u]

    return _apply(params, grads, state, ["exp_avg", "exp_inf"], rule)


def nadam_init(params) -> dict:
    """The state of :func:`nadam_update`: ``{"step", "mu_product", "exp_avg",
    "exp_avg_sq"}`` (PyTorch's names); ``mu_product`` one scalar per trainable leaf.

    Args:
        params: the params pytree.

    Returns:
        The state dict.
    """
    leaves, mask = tree_leaves(params), trainable_mask(params)
    products = [creation.ones((), dtype=DType.float32) if t else None for t in mask]
    return {
        "step": _step0(),
        "mu_product": products if leaves else [],
        "exp_avg": _zeros_state(params),
        "exp_avg_sq": _zeros_state(params),
    }


def nadam_update(
    params,
    grads,
    state=None,
    lr=2e-3,
    betas=(0.9, 0.999),
    eps=1e-8,
    weight_decay=0.0,
    momentum_decay=4e-3,
):
    """One NAdam step, as ``torch.optim.NAdam``: Adam with Nesterov momentum and the
    momentum schedule ``mu_t = b1 (1 - 0.96^(t psi) / 2)`` (``psi = momentum_decay``).

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`nadam_init` (None: a fresh state).
        lr: learning rate or schedule (default 2e-3, PyTorch's).
        betas: decay rates of the two moments (default ``(0.9, 0.999)``).
        eps: added to the denominator (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).
        momentum_decay: ``psi`` (default 4e-3).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings("nadam_update", lr, betas=betas, eps=eps, wd=weight_decay)
    if state is None:
        state = nadam_init(params)
    b1, b2 = betas
    rate = _lr_at(lr, state["step"])

    def rule(p, g, old, done):
        if weight_decay:
            g = g + weight_decay * p
        t = done + 1.0
        mu = b1 * (1.0 - 0.5 * unary.exp(t * (momentum_decay * math.log(0.96))))
        mu_next = b1 * (1.0 - 0.5 * unary.exp((t + 1.0) * (momentum_decay * math.log(0.96))))
        # (a leaf first trained after the state was made starts from a filled tensor)
        product = (old[0] if old[0].ndim == 0 else old[0].reshape(-1)[0]).cast(DType.float32)
        product = product * mu
        m = b1 * old[1] + (1.0 - b1) * g
        v = b2 * old[2] + (1.0 - b2) * g.square()
        denom = (v / _bias_correction(b2, t).cast(p.dtype)).sqrt() + eps
        lr_p = _like(rate, p)
        step_g = (lr_p * ((1.0 - mu) / (1.0 - product)).cast(p.dtype)) * (g / denom)
        step_m = (lr_p * (mu_next / (1.0 - product * mu_next)).cast(p.dtype)) * (m / denom)
        return p - step_g - step_m, [product, m, v]

    return _apply(params, grads, state, ["mu_product", "exp_avg", "exp_avg_sq"], rule, 1.0)


def radam_init(params) -> dict:
    """The state of :func:`radam_update`: ``{"step", "exp_avg", "exp_avg_sq"}``.

    Args:
        params: the params pytree.

    Returns:
        The state dict.
    """
    return {"step": _step0(), "exp_avg": _zeros_state(params), "exp_avg_sq": _zeros_state(params)}


def radam_update(
    params, grads, state=None, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0
):
    """One RAdam step, as ``torch.optim.RAdam``: Adam whose adaptive step is rectified by
    ``r_t`` once the variance's degrees of freedom ``rho_t`` pass 5, and plain momentum
    SGD before.

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`radam_init` (None: a fresh state).
        lr: learning rate or schedule (default 1e-3).
        betas: decay rates of the two moments (default ``(0.9, 0.999)``).
        eps: added to the denominator (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings("radam_update", lr, betas=betas, eps=eps, wd=weight_decay)
    if state is None:
        state = radam_init(params)
    b1, b2 = betas
    rate = _lr_at(lr, state["step"])
    rho_inf = 2.0 / (1.0 - b2) - 1.0

    def rule(p, g, old, done):
        if weight_decay:
            g = g + weight_decay * p
        t = done + 1.0
        m = b1 * old[0] + (1.0 - b1) * g
        v = b2 * old[1] + (1.0 - b2) * g.square()
        c2 = _bias_correction(b2, t)
        m_hat = m / _bias_correction(b1, t).cast(p.dtype)
        rho = rho_inf - 2.0 * t * unary.exp(t * math.log(b2)) / c2
        rect = (rho - 4.0) * (rho - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho)
        use = rho > 5.0
        rect = binary.where(use, binary.maximum(rect, 0.0), 0.0).sqrt()
        adaptive = c2.sqrt().cast(p.dtype) / (v.sqrt() + eps)
        factor = binary.where(use, rect.cast(p.dtype) * adaptive, 1.0)
        return p - _like(rate, p) * m_hat * factor, [m, v]

    return _apply(params, grads, state, ["exp_avg", "exp_avg_sq"], rule)


def adadelta_init(params) -> dict:
    """The state of :func:`adadelta_update`: ``{"step", "square_avg", "acc_delta"}``.

    Args:
        params: the params pytree.

    Returns:
        The state dict.
    """
    return {"step": _step0(), "square_avg": _zeros_state(params), "acc_delta": _zeros_state(params)}


def adadelta_update(params, grads, state=None, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0):
    """One Adadelta step, as ``torch.optim.Adadelta``: ``s = rho s + (1 - rho) g^2``;
    ``d = sqrt(a + eps) / sqrt(s + eps) g``; ``a = rho a + (1 - rho) d^2``; ``p -= lr d``.

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`adadelta_init` (None: a fresh state).
        lr: a factor on the update (default 1.0, PyTorch's).
        rho: decay rate of the running averages (default 0.9).
        eps: added inside the roots (default 1e-6).
        weight_decay: L2 penalty added to the gradient (default 0).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings("adadelta_update", lr, eps=eps, wd=weight_decay, alpha=rho)
    if state is None:
        state = adadelta_init(params)
    rate = _lr_at(lr, state["step"])

    def rule(p, g, old, done):
        if weight_decay:
            g = g + weight_decay * p
        square_avg = rho * old[0] + (1.0 - rho) * g.square()
        delta = (old[1] + eps).sqrt() / (square_avg + eps).sqrt() * g
        acc_delta = rho * old[1] + (1.0 - rho) * delta.square()
        return p - _like(rate, p) * delta, [square_avg, acc_delta]

    return _apply(params, grads, state, ["square_avg", "acc_delta"], rule)


def rprop_init(params) -> dict:
    """The state of :func:`rprop_update`: ``{"step", "prev", "step_size"}`` (the last
    gradient used, and each element's step size; both start when a leaf first updates).

    Args:
        params: the params pytree.

    Returns:
        The state dict.
    """
    return {"step": _step0(), "prev": _zeros_state(params), "step_size": _zeros_state(params)}


def rprop_update(params, grads, state=None, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50.0)):
    """One Rprop step, as ``torch.optim.Rprop``: each element's step size grows by
    ``etas[1]`` while its gradient keeps its sign and shrinks by ``etas[0]`` when it flips
    (then that element skips the step and forgets the gradient), within ``step_sizes``;
    ``p -= sign(g) step_size``. Step sizes start at ``lr``.

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`rprop_init` (None: a fresh state).
        lr: the initial step size (default 1e-2).
        etas: ``(decrease, increase)`` factors (default (0.5, 1.2)).
        step_sizes: ``(min, max)`` step size (default (1e-6, 50)).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings("rprop_update", lr)
    minus, plus = _pair_setting("rprop_update", "etas", etas)
    low, high = _pair_setting("rprop_update", "step_sizes", step_sizes)
    if not 0.0 < minus < 1.0 < plus:
        raise ValueError(f"rprop_update: invalid etas={etas!r} (need 0 < etas[0] < 1 < etas[1])")
    if state is None:
        state = rprop_init(params)
    rate = _lr_at(lr, state["step"])

    def rule(p, g, old, done):
        prev, size = old
        size = binary.where(done == 0.0, _like(rate, p), size)  # (starts at lr)
        agree = g * prev
        factor = binary.where(agree > 0, plus, binary.where(agree < 0, minus, 1.0))
        size = binary.minimum(binary.maximum(size * factor, low), high)
        g = binary.where(agree < 0, 0.0, g)  # a flipped sign: no step, nothing to compare
        return p - unary.sign(g) * size, [g, size]

    return _apply(params, grads, state, ["prev", "step_size"], rule)


def sparse_adam_init(params) -> dict:
    """The state of :func:`sparse_adam_update`: ``{"step", "mu", "nu"}``.

    Args:
        params: the params pytree.

    Returns:
        The state dict.
    """
    return {"step": _step0(), "mu": _zeros_state(params), "nu": _zeros_state(params)}


def sparse_adam_update(params, grads, state=None, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
    """One step of ``torch.optim.SparseAdam`` on dense gradients: only the rows a gradient
    reaches (for a tensor of 2 or more dims, the rows along its first dim with a nonzero
    entry, as an ``Embedding``'s sparse gradient lists them; for a vector, its nonzero
    elements) update their moments and values; the others keep theirs. The step is
    ``lr sqrt(1 - b2^t) / (1 - b1^t) mu / (sqrt(nu) + eps)``, as PyTorch's.

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`sparse_adam_init` (None: a fresh state).
        lr: learning rate or schedule (default 1e-3).
        betas: decay rates of the two moments (default ``(0.9, 0.999)``).
        eps: added to the denominator (default 1e-8).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings("sparse_adam_update", lr, betas=betas, eps=eps)
    b1, b2 = betas
    if state is None:
        state = sparse_adam_init(params)
    rate = _lr_at(lr, state["step"])

    def rule(p, g, moments, done):
        hit = g != 0
        if g.ndim >= 2:  # whole rows, as a sparse gradient's indices name them
            hit = hit.reshape((g.shape[0], -1)).any(axis=1).reshape((-1,) + (1,) * (g.ndim - 1))
        t = done + 1.0
        mu = binary.where(hit, b1 * moments[0] + (1.0 - b1) * g, moments[0])
        nu = binary.where(hit, b2 * moments[1] + (1.0 - b2) * g.square(), moments[1])
        size = _like(rate, p) * (_bias_correction(b2, t).sqrt() / _bias_correction(b1, t))
        step = size.cast(p.dtype) * mu / (nu.sqrt() + eps)
        return binary.where(hit, p - step, p), [mu, nu]

    return _apply(params, grads, state, ["mu", "nu"], rule)


def _pair_setting(fn: str, name: str, value) -> tuple:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"{fn}: {name} must be a pair, got {value!r}")
    a, b = value
    for v in (a, b):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"{fn}: {name} must be a pair of finite numbers, got {value!r}")
    return float(a), float(b)


def asgd_init(params, lr=1e-2) -> dict:
    """The state of :func:`asgd_update`: ``{"step", "eta", "ax"}`` (each leaf's step
    length, 0-d, and its running average).

    Args:
        params: the params pytree.
        lr: the learning rate the step lengths start from.

    Returns:
        The state dict.
    """
    leaves = tree_leaves(params)
    eta = [
        creation.constant(np.float32(lr)) if isinstance(p, Tensor) and not callable(lr) else None
        for p in leaves
    ]
    return {"step": _step0(), "eta": eta, "ax": _zeros_state(params)}


def asgd_update(
    params, grads, state=None, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0
):
    """One averaged-SGD step, as ``torch.optim.ASGD``: ``p = p (1 - lambd eta) - eta g``
    with this leaf's step length ``eta``, then the running average ``ax`` of the
    parameters (a copy of them until step ``t0``); then ``eta = lr / (1 + lambd lr
    step)^alpha``. The average is in the state (``state["ax"]``), as PyTorch keeps it.

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`asgd_init` (None: a fresh state).
        lr: the learning rate (default 1e-2).
        lambd: the decay term (default 1e-4).
        alpha: the power of the step length's decay (default 0.75).
        t0: the step from which the average starts (default 1e6).
        weight_decay: L2 penalty added to the gradient (default 0).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings("asgd_update", lr, wd=weight_decay, alpha=alpha)
    if state is None:
        state = asgd_init(params, lr)
    rate = _lr_at(lr, state["step"])

    def rule(p, g, old, done):
        eta, ax = old
        eta = binary.where(done == 0.0, _like(rate, eta), eta)  # (starts at lr)
        eta_p = _like(eta, p)
        if weight_decay:
            g = g + weight_decay * p
        p = p * (1.0 - lambd * eta_p) - eta_p * g
        mu = 1.0 / binary.maximum(done - t0, 1.0)  # (this leaf's updates so far: done)
        ax = binary.where(mu == 1.0, p, ax + (p - ax) * _like(mu, p))
        count = done + 1.0
        new_eta = _like(rate, eta) / (1.0 + lambd * _like(rate, eta) * count) ** alpha
        return p, [new_eta.cast(eta.dtype), ax]

    return _apply(params, grads, state, ["eta", "ax"], rule)


def _factored_shapes(p: Tensor) -> tuple:
    """Adafactor's moment shapes for ``p``: ``(row, col, full)``, () where unused."""
    if p.ndim > 1:
        return p.shape[:-1] + (1,), p.shape[:-2] + (1, p.shape[-1]), ()
    return (), (), tuple(p.shape)


def adafactor_init(params) -> dict:
    """The state of :func:`adafactor_update`: ``{"step", "row_var", "col_var",
    "variance"}``: for a tensor of 2 or more dims the running mean of the squared gradient
    over its last dim (``row_var``, ``(..., R, 1)``) and over the one before
    (``col_var``, ``(..., 1, C)``), for a vector its running mean (``variance``); the
    unused ones are 0-d zeros.

    Args:
        params: the params pytree.

    Returns:
        The state dict.
    """
    leaves = tree_leaves(params)
    state = {"step": _step0(), "row_var": [], "col_var": [], "variance": []}
    for p in leaves:
        shapes = _factored_shapes(p) if isinstance(p, Tensor) else None
        for key, shape in zip(("row_var", "col_var", "variance"), shapes or ((), (), ())):
            state[key].append(creation.zeros(shape, dtype=p.dtype) if shapes else None)
    return state


def adafactor_update(
    params,
    grads,
    state=None,
    lr=1e-2,
    beta2_decay=-0.8,
    eps=(None, 1e-3),
    d=1.0,
    weight_decay=0.0,
):
    """One Adafactor step, as ``torch.optim.Adafactor``: the squared gradient's running
    means (``1 - beta2 = step^beta2_decay``), factored into row and column means for
    tensors of 2 or more dims; the update ``g / sqrt(v)`` clipped to an RMS of ``d``, scaled
    by ``max(eps[1], RMS(p)) * min(lr, 1 / sqrt(step))``; decoupled weight decay.

    Args:
        params: the params pytree.
        grads: gradients, a pytree of the same structure (None leaves are skipped).
        state: from :func:`adafactor_init` (None: a fresh state).
        lr: the rate's ceiling (default 1e-2).
        beta2_decay: the exponent of the running means' decay (default -0.8).
        eps: ``(eps1, eps2)``: the smallest variance's root (None: the dtype's machine
            epsilon) and the smallest parameter RMS (default ``(None, 1e-3)``).
        d: the clipping threshold of the update's RMS (default 1).
        weight_decay: decoupled weight decay (default 0).

    Returns:
        ``(new_params, new_state)``.
    """
    _check_settings("adafactor_update", lr, wd=weight_decay)
    if not isinstance(eps, list | tuple) or len(eps) != 2:
        raise ValueError(f"adafactor_update: eps must be a pair (eps1, eps2), got {eps!r}")
    if state is None:
        state = adafactor_init(params)
    rate = _lr_at(lr, state["step"])

    def rule(p, g, old, done):
        row_var, col_var, variance = old
        row_shape, col_shape, full_shape = _factored_shapes(p)
        eps1 = float(np.finfo(p.dtype.numpy).eps) if eps[0] is None else float(eps[0])
        step = done + 1.0
        weight = _like(step ** float(beta2_decay), p)
        r = _like(rate, p)
        rho = binary.minimum(r, _like(1.0 / unary.sqrt(step), p))
        rms_p = unary.sqrt((p * p).mean())
        alpha = binary.maximum(rms_p, float(eps[1])) * rho
        if weight_decay:
            p = p * (1.0 - r * weight_decay)
        if p.ndim > 1:
            row_var = (
                row_var
                if tuple(row_var.shape) == row_shape
                else creation.zeros(row_shape, dtype=p.dtype)
            )
            col_var = (
                col_var
                if tuple(col_var.shape) == col_shape
                else creation.zeros(col_shape, dtype=p.dtype)
            )
            row_var = row_var + ((g * g).mean(axis=-1, keepdims=True) - row_var) * weight
            col_var = col_var + ((g * g).mean(axis=-2, keepdims=True) - col_var) * weight
            scale = binary.maximum(row_var.mean(axis=-2, keepdims=True), eps1)
            estimate = (row_var @ col_var) / scale
        else:
            variance = (
                variance
                if tuple(variance.shape) == full_shape
                else creation.zeros(full_shape, dtype=p.dtype)
            )
            variance = variance + (g * g - variance) * weight
            estimate = variance
        update = g / unary.sqrt(binary.maximum(estimate, eps1 * eps1))
        denom = binary.maximum(unary.sqrt((update * update).mean()) / d, 1.0)
        return p - (alpha / denom) * update, [row_var, col_var, variance]

    return _apply(params, grads, state, ["row_var", "col_var", "variance"], rule)


# ----------------------------------------------------------------------------- stateful
def _scalar_input(value) -> Tensor:
    """A setting's number as a realized float32 scalar: data of the program that reads it.
    (A ``full`` op held the number in its kwargs, part of the program's structure: a
    scheduler's new rate at every step made every step a new program, never cached.)"""
    return creation.constant(np.float32(value))


def _as_input(value, always: bool = False):
    """A setting as an input of a compiled step: a number becomes a float32 scalar tensor (a
    zero one stays 0.0 unless ``always``); a pair such as ``betas`` has its first entry so
    converted (the one a scheduler cycles); a schedule or a tensor is left as is."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | tuple):
        return value
    if isinstance(value, tuple):
        return (_as_input(value[0]), *value[1:]) if value else value
    return _scalar_input(value) if always or value else 0.0


def _same_numbers(a, b) -> bool:
    """Are ``a`` and ``b`` the same Python number (or tuple of numbers), type included?
    False for anything else (a tensor, a schedule) and for NaN."""
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(map(_same_numbers, a, b))
    return type(a) in (float, int) and a == b


_PYTORCH_FLAGS = ("maximize", "foreach", "fused", "capturable", "differentiable")


def _pytorch_flags(name: str, flags: dict) -> bool:
    """The keywords every PyTorch optimizer takes, so its call runs unchanged: ``maximize``
    (returned), and ``foreach``/``fused``/``capturable``, which choose among PyTorch's
    implementations (the update here is one fused graph either way). ``differentiable=True``
    (autograd through the update) is refused."""
    unknown = sorted(set(flags) - set(_PYTORCH_FLAGS))
    if unknown:
        raise TypeError(f"{name}.__init__() got an unexpected keyword argument {unknown[0]!r}")
    if flags.get("differentiable"):
        raise ValueError(
            f"{name}: differentiable=True (autograd through the update) is not supported; "
            "differentiate through the functional update (e.g. adam_update) instead"
        )
    return bool(flags.get("maximize", False))


class Optimizer:
    """Base of the stateful optimizers: holds the params and the state.

    The settings are attributes (``opt.lr``, ``opt.momentum``, ``opt.betas``, ...) read at
    each update, so a learning-rate scheduler (:mod:`nabla.nn.optim.lr_scheduler`) or the
    user may change them between steps; :meth:`compile_step` passes the ones a scheduler
    changes as tensor inputs, so changing them does not retrace.

    Args:
        params: a Module, a pytree of tensors, or an iterable of tensors such as
            ``model.parameters()``; updated in place.
        lr: learning rate or schedule.
        **kwargs: PyTorch's keywords every optimizer takes (each subclass passes them on):
            ``maximize`` (ascend: the gradients negated), and ``foreach``, ``fused`` and
            ``capturable``, which pick among PyTorch's implementations and change nothing
            here (the update is one fused graph); ``differentiable=True`` is refused.
    """

    #: the execution policy (see :meth:`set_execution_policy`), shared by all optimizers
    _auto_realize_params: bool = True
    _auto_realize_state: bool = True
    #: each policy setting's class attribute
    _policy_attrs = {
        "auto_realize_updated_params": "_auto_realize_params",
        "auto_realize_updated_state": "_auto_realize_state",
    }

    #: the settings an update reads, by attribute name
    _hyper_names: tuple = ("lr",)
    #: those a scheduler changes from step to step (tensor inputs of a compiled step)
    _dynamic: tuple = ("lr",)

    def __init__(self, params, lr, **kwargs):
        self.maximize = _pytorch_flags(type(self).__name__, kwargs)
        name = type(self).__name__
        if isinstance(params, str | bytes) or not (
            isinstance(params, Module | Tensor) or hasattr(params, "__iter__")
        ):
            raise TypeError(
                f"{name}: params must be a Module, an iterable of tensors or a pytree of "
                f"tensors, got {type(params).__name__}"
            )
        if not isinstance(params, Module | list | tuple | dict | Tensor):
            params = list(params)  # model.parameters(), as in PyTorch
        params, settings = self._one_group(params)
        if isinstance(params, list | tuple):  # PyTorch's list: tensors only (as it checks)
            odd = [type(p).__name__ for p in params if not isinstance(p, Tensor)]
            if odd:
                raise TypeError(f"{name}: params holds a {odd[0]}, not a tensor")
        leaves = tree_leaves(params)
        if not any(isinstance(t, Tensor) for t in leaves):
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        twice = () if isinstance(params, Module) else _tied_groups(leaves)  # (a module: tied)
        if twice:
            warnings.warn(  # (PyTorch warns too, and steps such a tensor twice)
                f"{type(self).__name__}: the parameters hold one tensor twice (leaves "
                f"{twice[0][0]} and {twice[0][1]}); it is updated once per step",
                UserWarning,
                stacklevel=3,
            )
        self.model = params if isinstance(params, Module) else None
        self.params = params
        self.lr = lr
        for name, value in settings.items():  # a group's own settings, as PyTorch's
            setattr(self, name, tuple(value) if name == "betas" else value)
        if settings:
            self._validate()
        self.state = self._init(params)
        self._step_count = 0  # updates applied (a scheduler warns when stepped before)
        self._inputs: dict = {}  # setting name -> (value, its input form), see _settings
        self._compiled_update = None  # step()'s update as one compiled call, made at first
        self._update_tree = None  # the params treedef of the last step (kept: hashed once)
        # the cycled settings as constructed (see _update_compiled): what a fresh optimizer
        # made with the same arguments has too, so a resumed run decides alike
        self._initial_settings = {n: getattr(self, n) for n in self._dynamic if n != "lr"}

    def __getstate__(self) -> dict:
        # a copy or pickle leaves out step()'s compiled update (it holds locks and a
        # closure over this object): the copy traces its own at its first step
        state = dict(self.__dict__)
        state["_compiled_update"] = state["_update_tree"] = None
        return state

    def _one_group(self, params) -> tuple:
        """``(params, settings)`` of PyTorch's list of parameter-group dicts
        (``[{"params": ..., "lr": ...}]``); other params as they are, with no settings. One
        group only: an update here has one set of settings."""
        name = type(self).__name__
        groups = isinstance(params, list | tuple) and params and isinstance(params[0], dict)
        if not groups:
            return params, {}
        if len(params) > 1:
            raise ValueError(
                f"{name}: {len(params)} parameter groups given; an optimizer here has one "
                "group of settings. Make one optimizer per group (e.g. AdamW(decayed, "
                "weight_decay=0.01) and AdamW(others, weight_decay=0.0)) and step each"
            )
        group = dict(params[0])
        if "params" not in group:
            raise ValueError(f"{name}: a parameter group needs a 'params' entry")
        unknown = sorted(set(group) - {"params", *self._hyper_names})
        if unknown:
            raise ValueError(
                f"{name}: unknown settings {unknown} in the parameter group; {name} takes "
                f"{list(self._hyper_names)}"
            )
        params = group.pop("params")
        if isinstance(params, Tensor):
            params = [params]
        elif not isinstance(params, Module | list | tuple | dict):
            params = list(params)
        return params, group

    def _validate(self) -> None:
        """The constructor's checks of the settings, on their current values (after a
        parameter group's or a ``param_groups`` edit)."""
        named = {"weight_decay": "wd"}
        kw = {
            named.get(n, n): getattr(self, n)
            for n in self._hyper_names
            if n not in ("lr", "amsgrad", "centered")
        }
        _check_settings(type(self).__name__, self.lr, **kw)

    @property
    def param_groups(self) -> list:
        """PyTorch's ``param_groups``: one group, a dict-like view whose ``"params"`` are the
        trainable parameters and whose other keys are the settings (``"lr"``, ``"betas"``,
        ...). Setting a key sets the optimizer's attribute: ``for g in opt.param_groups:
        g["lr"] = 1e-4`` works as in PyTorch (and a compiled step takes it without a
        retrace).

        Returns:
            A list of one mapping.
        """
        return [_ParamGroup(self)]

    @classmethod
    def set_execution_policy(
        cls, *, auto_realize_updated_params: bool | None = None, auto_realize_updated_state=None
    ) -> None:
        """Choose whether :meth:`step` computes the updated values at once (the default) or
        leaves them lazy, to be computed with whatever uses them next (the original nabla's
        policy; one setting for all optimizers).

        Args:
            auto_realize_updated_params: compute the updated parameters in each step (None:
                unchanged).
            auto_realize_updated_state: compute the updated optimizer state in each step
                (None: unchanged).
        """
        settings = {
            "auto_realize_updated_params": auto_realize_updated_params,
            "auto_realize_updated_state": auto_realize_updated_state,
        }
        set_policy(Optimizer, Optimizer._policy_attrs, settings)

    @classmethod
    def get_execution_policy(cls) -> dict:
        """The policy :meth:`set_execution_policy` sets.

        Returns:
            ``{"auto_realize_updated_params": bool, "auto_realize_updated_state": bool}``.
        """
        return get_policy(Optimizer, Optimizer._policy_attrs)

    def _init(self, params) -> dict:
        raise NotImplementedError

    #: the pure update function; it takes the settings as keywords named as in
    #: ``_hyper_names`` (a subclass that assembles them otherwise overrides :meth:`_rule`)
    _update_rule = None

    def _update(self, params, grads, state, hyper=None):
        """``(new_params, new_state)``; ``hyper`` (default :meth:`_settings`) holds the
        settings by name, and ``"maximize"`` where a compiled step passes it (an argument,
        so a new value is a new trace: read from ``self`` inside the trace, it was baked
        in)."""
        h = self._settings() if hyper is None else hyper
        maximize = self.maximize
        if "maximize" in h:
            h = dict(h)
            maximize = h.pop("maximize")
        if maximize:  # PyTorch's maximize: ascend, the gradients negated
            grads = tree_unflatten(
                tree_flatten(grads)[1],
                [None if g is None else -as_tensor(g) for g in tree_leaves(grads)],
            )
        return self._rule(params, grads, state, h)

    def _rule(self, params, grads, state, h: dict):
        """The update with the settings ``h`` (a subclass that assembles them otherwise
        overrides this)."""
        return self._update_rule(params, grads, state, **h)

    def _settings(self, traced: bool = False) -> dict:
        """The settings by name. ``traced``: for a compiled step, the changing ones
        (``_dynamic``) as float32 scalar tensors, so a new value is a new input, not a new
        trace; a zero momentum stays the number 0.0 (it decides whether buffers exist)."""
        out = {}
        for name in self._hyper_names:
            value = getattr(self, name)
            if traced and name in self._dynamic:
                # the tensor made for the same value last step is reused: a new scalar tensor
                # per setting per step costs more than the lookup
                seen = self._inputs.get(name)
                if seen is not None and _same_numbers(seen[0], value):
                    value = seen[1]
                else:
                    converted = _as_input(value, always=name == "lr")
                    if _same_numbers(value, value):
                        self._inputs[name] = (value, converted)
                    value = converted
            out[name] = value
        return out

    def _grads_from_attr(self, params):
        """Each parameter's ``.grad``, or None when none has one."""
        leaves = tree_leaves(params)
        grads = [p.grad if isinstance(p, Tensor) else None for p in leaves]
        return None if all(g is None for g in grads) else grads

    def step(self, grads=None, closure=None):
        """Apply one update.

        Args:
            grads: a gradient pytree like the params (e.g. from ``nb.grad``); None reads each
                parameter's ``.grad`` (after ``loss.backward()``). A function here is taken
                as ``closure`` (PyTorch's ``opt.step(closure)``).
            closure: PyTorch's: a function that computes the loss and calls ``backward()``;
                it is called first (with gradients enabled) and the update reads the
                ``.grad`` it leaves.

        Returns:
            The updated model or params tree (the same objects, updated in place); with a
            ``closure``, its loss, as PyTorch's. With no ``grads`` and no parameter holding
            a ``.grad``, nothing changes, as PyTorch's ``step()`` skips parameters without
            one (the step still counts for schedulers).
        """
        if callable(grads) and not isinstance(grads, Tensor | Module):
            grads, closure = None, grads
        if closure is not None:
            if grads is not None:
                raise TypeError("step: pass grads or a closure, not both")
            with enable_grad():
                loss = closure()
            self.step()
            return loss
        params = self.params
        if grads is None:
            grads = self._grads_from_attr(params)
            if grads is None:
                self._step_count += 1
                return self.model if self.model is not None else params
        self._check_state_fits(params)
        if STATE.recording is None:
            new_params, new_state = self._update_compiled(params, grads)
        else:  # inside a traced function: its ops are the trace's own
            new_params, new_state = self._update(params, grads, self.state)
        mask = trainable_mask(params)
        pairs = [
            (old, detach(new))
            for old, new, m in zip(tree_leaves(params), tree_leaves(new_params), mask)
            if m and new is not old
        ]
        # one evaluation for all new values, outside compile (as the execution policy says)
        _realize_per_policy([new for _, new in pairs], new_state, None, functional=False)
        for old, new in pairs:
            rebind(old, new)
        self.state = new_state
        self._step_count += 1
        return self.model if self.model is not None else params

    def _check_state_fits(self, params) -> None:
        """The per-parameter state (moments) still fits the parameters: a module's
        parameter replaced by one of another shape (``m.weight = nn.Parameter(...)``)
        would meet the old one's moments inside the update (an ``OpError`` there)."""
        leaves = tree_leaves(params)
        for key, value in self.state.items():
            if not isinstance(value, list) or len(value) != len(leaves):
                continue
            for i, (p, m) in enumerate(zip(leaves, value, strict=True)):
                if not (isinstance(p, Tensor) and isinstance(m, Tensor)) or m.ndim == 0:
                    continue  # (a 0-d entry is a per-parameter count, ``steps``)
                if p.shape != m.shape:
                    raise ValueError(
                        f"{type(self).__name__}.step: parameter {i} now has shape "
                        f"{tuple(p.shape)}, but its state {key!r} was made for "
                        f"{tuple(m.shape)}: the parameter was replaced after the optimizer "
                        "was made; make a new optimizer"
                    )

    def _update_compiled(self, params, grads):
        """``_update(params, grads, self.state)`` as one ``nb.compile``d call: a step's
        dozen ops per parameter are traced once, then each step is one cached program
        (the eager loop of ``loss.backward(); opt.step()`` paid an op call for each, about
        5 ms a step for a small CNN's Adam). The settings go in as :meth:`_settings`
        (traced): a scheduler's new rate is a new input, not a new trace."""
        leaves, tree = tree_flatten(params)
        if tree == self._update_tree:  # the same object: its hash is kept
            tree = self._update_tree
        self._update_tree = tree
        if self._compiled_update is None:

            def update(leaves, tree, grads, state, hyper):
                new_params, new_state = self._update(
                    tree_unflatten(tree, leaves), grads, state, hyper
                )
                return tree_leaves(new_params), new_state

            update.__name__ = f"{type(self).__name__}.step"
            self._compiled_update = _compile(update)
        plain = [detach(x) if isinstance(x, Tensor) else x for x in leaves]
        # tied weights' parts summed here, where the leaves' identity is known (a compiled
        # call's inputs are one per leaf)
        grads = _tied_totals(leaves, _split(params, grads)[1])
        hyper = self._settings(traced=True)
        hyper["maximize"] = self.maximize
        # a cycled setting (momentum, betas[0]) is an input only while it differs from its
        # value as constructed: until a scheduler changes it, it stays the Python number, as
        # the functional update takes it (a float32 beta computes the bias correction in
        # float32: 7e-6 relative off). Compared with the constructed value, not the first
        # step's: a run resumed into a fresh optimizer takes the same path at every step
        if not hasattr(self, "_initial_settings"):  # (unpickled from an older version)
            self._initial_settings = {n: getattr(self, n) for n in self._dynamic if n != "lr"}
        for name, initial in self._initial_settings.items():
            value = getattr(self, name)
            if _same_numbers(value, initial):
                hyper[name] = value
        new_leaves, new_state = self._compiled_update(plain, tree, grads, self.state, hyper)
        return tree_unflatten(tree, new_leaves), new_state

    def compile_step(self, loss_fn) -> CompiledStep:
        """A training step that is one compiled graph: ``step(*batch)`` computes
        ``loss_fn(params, *batch)``, its gradients and this optimizer's update together, then
        updates the parameters in place (as :meth:`step` does) and returns the loss.
        Parameters and optimizer state still pending at a call (a new model's
        initialization, the zero moments) are computed first, on their own: the step's
        program is then the same from the first call on (one MAX compile, not two).

        Args:
            loss_fn: ``loss_fn(params, *batch) -> scalar``; ``params`` is the model (or
                params tree) this optimizer was built on.

        Returns:
            A :class:`CompiledStep` (callable; ``.stats`` are its compilation statistics).

        Example:
            >>> step = AdamW(model, lr=1e-3).compile_step(lambda m, x, y: F.mse_loss(m(x), y))
            >>> loss = step(x, y)  # forward, backward and update: one graph
        """
        return CompiledStep(self, loss_fn)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset ``.grad`` of every parameter: to None (default, as PyTorch's), or to zeros
        in place with ``set_to_none=False`` (a held ``.grad`` tensor sees them).

        Args:
            set_to_none: drop the gradients instead of zeroing them.
        """
        zero_grads([p for p in tree_leaves(self.params) if isinstance(p, Tensor)], set_to_none)

    def state_dict(self) -> OrderedDict:
        """The optimizer state as flat named tensors (``"step"``, ``"mu.<param name>"``, ...),
        ready for :func:`nabla.nn.save`.

        Returns:
            An ``OrderedDict`` name -> Tensor.
        """
        names = named_leaves(self.params)
        sd = OrderedDict(step=self.state["step"])
        for key, values in self.state.items():
            if key != "step":
                for n, v in zip(names, values):
                    if v is not None:  # a leaf never trained has no moments yet
                        sd[f"{key}.{n}"] = v
        return sd

    def load_state_dict(self, state_dict) -> None:
        """Restore the state saved by :meth:`state_dict`.

        Args:
            state_dict: a mapping name -> Tensor or array.

        Raises:
            ValueError: for missing or unexpected keys, or shape or dtype mismatches, all
                listed in one message (nothing is changed).
        """
        names = named_leaves(self.params)
        leaf_of = dict(zip(names, tree_leaves(self.params)))
        # the counts of leaves that fell behind ("steps.<name>", see ``_apply``), apart:
        # a checkpoint without them had every leaf in step
        counts = {k[len("steps.") :]: v for k, v in state_dict.items() if k.startswith("steps.")}
        state_dict = {k: v for k, v in state_dict.items() if not k.startswith("steps.")}
        problems = self._load_problems(state_dict, leaf_of)
        for n, v in counts.items():
            got, problem = loaded_tensor(f"steps.{n}", v)
            if n not in leaf_of:
                problems.append(f"unexpected key {'steps.' + n!r}")
            elif problem is not None or got.shape != ():
                problems.append(problem or f"steps.{n}: shape {tuple(got.shape)}, expected ()")
        if problems:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: {'; '.join(problems)} (nothing loaded)"
            )
        # each value cast to, and laid out as, what it belongs to (a sharded parameter's
        # moments are sharded as the parameter is)
        conv = lambda v, like: laid_out_like(like, as_tensor(v).cast(like.dtype))  # noqa: E731
        new = {"step": conv(state_dict["step"], self.state["step"])}
        for key, values in self.state.items():
            if key not in ("step", "steps"):
                new[key] = [
                    conv(state_dict[f"{key}.{n}"], leaf_of[n]) if f"{key}.{n}" in state_dict else v
                    for n, v in zip(names, values)
                ]
        if counts:
            new["steps"] = [
                as_tensor(counts[n]).cast(DType.float32).reshape(()) if n in counts else None
                for n in names
            ]
        self.state = new

    def _load_problems(self, state_dict, leaf_of: dict) -> list:
        """What keeps ``state_dict`` from loading: missing and unexpected keys, then shape
        (and, for entries this state holds, dtype) mismatches."""
        own = {k: v for k, v in self.state_dict().items() if not k.startswith("steps.")}
        # a saved moment may also fill a leaf that has none yet (trained before, or frozen
        # when this optimizer was made): it must have the leaf's shape
        fillable = {
            f"{key}.{n}": leaf
            for key in self.state
            if key not in ("step", "steps")
            for n, leaf in leaf_of.items()
            if f"{key}.{n}" not in own
        }
        loaded, problems = {}, []
        for k, v in state_dict.items():
            if k in own or k in fillable:
                loaded[k], problem = loaded_tensor(k, v)
                if problem is not None:
                    problems.append(problem)
        problems += [f"missing key {k!r}" for k in own if k not in state_dict]
        problems += [
            f"unexpected key {k!r}" for k in state_dict if k not in own and k not in fillable
        ]
        problems += [
            _mismatch(k, got, fillable[k], dtype=False)
            for k, got in loaded.items()
            if k in fillable and got is not None
        ]
        problems += [
            _mismatch(k, loaded[k], v, dtype=True)
            for k, v in own.items()
            if loaded.get(k) is not None
        ]
        return [p for p in problems if p is not None]


def _mismatch(key: str, got, like: Tensor, dtype: bool) -> str | None:
    """How the loaded value ``got`` differs from ``like`` in shape (or ``dtype``), if it does."""
    if tuple(got.shape) != tuple(like.shape):
        return f"{key}: shape {tuple(got.shape)}, expected {tuple(like.shape)}"
    have = as_tensor(got).dtype
    # cast as Module.load_state_dict casts (a float64 moment into float32), and a step
    # count saved as an integer into the float step
    count = key == "step" and have.is_int and like.dtype.is_float
    if dtype and have is not like.dtype and not (castable(have, like.dtype) or count):
        return f"{key}: dtype {have.value}, expected {like.dtype.value}"
    return None


class _ParamGroup(MutableMapping):
    """An optimizer's settings seen as PyTorch's parameter-group dict (``param_groups``):
    reads and writes go to the optimizer's attributes."""

    def __init__(self, optimizer: Optimizer):
        self._opt = optimizer

    # PyTorch's implementation flags, as every group of its holds them: ``maximize`` is
    # the optimizer's; the others choose among PyTorch's kernels (one graph here)
    _FLAGS = {"foreach": None, "fused": None, "capturable": False, "differentiable": False}

    def _keys(self) -> tuple:
        started = getattr(self._opt, "initial_lr", None) is not None
        keys = ("params", *self._opt._hyper_names, "maximize", *self._FLAGS)
        return keys + (("initial_lr",) if started else ())

    def __getitem__(self, key):
        if key == "params":
            mask = trainable_mask(self._opt.params)
            return [p for p, m in zip(tree_leaves(self._opt.params), mask) if m]
        if key == "initial_lr" and getattr(self._opt, "initial_lr", None) is not None:
            return self._opt.initial_lr
        if key == "maximize":
            return self._opt.maximize
        if key in self._FLAGS:
            return self._FLAGS[key]
        if key not in self._opt._hyper_names:
            raise KeyError(key)
        return getattr(self._opt, key)

    def __setitem__(self, key, value) -> None:
        name = type(self._opt).__name__
        if key == "params":
            raise KeyError(f"{name}.param_groups: the parameters are fixed when it is made")
        if key == "initial_lr":  # where a resumed schedule starts from (PyTorch's key)
            self._opt.initial_lr = float(value)
            return
        if key == "maximize":
            self._opt.maximize = bool(value)
            return
        if key in self._FLAGS:  # (a kernel choice: the same update either way)
            _pytorch_flags(name, {key: value})
            return
        if key not in self._opt._hyper_names:
            raise KeyError(
                f"{name}.param_groups: no setting {key!r}; the settings are "
                f"{list(self._opt._hyper_names)}"
            )
        before = getattr(self._opt, key)
        setattr(self._opt, key, tuple(value) if key == "betas" else value)
        try:
            self._opt._validate()
        except ValueError:
            setattr(self._opt, key, before)
            raise

    def __delitem__(self, key) -> None:
        raise KeyError(f"{type(self._opt).__name__}.param_groups: settings cannot be removed")

    def __iter__(self):
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __repr__(self) -> str:
        settings = ", ".join(f"{k!r}: {self[k]!r}" for k in self._opt._hyper_names)
        return f"{{'params': [{len(self['params'])} tensors], {settings}}}"


def _trained(opt: Optimizer, leaves: list) -> list:
    """Which of ``opt``'s parameter leaves a compiled step trains: ``trainable_mask``'s
    (float parameters of modules not frozen) less the tensors whose ``requires_grad`` is
    off (``p.requires_grad = False``, PyTorch's way to freeze one), as ``backward`` gives
    those no gradient. Plain tensors given to an optimizer in the functional style do not
    require grad at all: when no trainable leaf does (and the optimizer was not made from
    a module), every one is trained."""
    mask = trainable_mask(opt.params)
    flags = [m and (not isinstance(p, Tensor) or p.requires_grad) for p, m in zip(leaves, mask)]
    if opt.model is not None or any(flags):
        return flags
    return mask


class CompiledStep:
    """What :meth:`Optimizer.compile_step` returns: a PyTorch-style step (parameters updated
    in place) whose forward, backward and update run as one ``nb.compile``d graph.

    Args:
        optimizer: the stateful optimizer whose update rule and state are used.
        loss_fn: ``loss_fn(params, *batch) -> scalar``.
    """

    def __init__(self, optimizer: Optimizer, loss_fn):
        self.optimizer, self.loss_fn = optimizer, loss_fn

        def train_step(leaves, tree, trained, ties, state, hyper, *batch):
            # the parameters come as their flat leaves and (a static argument) their treedef:
            # a module is not flattened again as an argument and rebuilt from the outputs at
            # every call. Differentiate the trainable leaves only (``trained``, a static
            # bitmask: freezing a parameter retraces): buffers (BatchNorm's running
            # statistics, an int64 step count) stay the module's own tensors, so an update
            # the forward makes to them in place is written back by compile
            params = tree_unflatten(tree, leaves)
            mask = [bool(trained >> i & 1) for i in range(len(leaves))]

            def loss_of(trainable):
                it = iter(trainable)
                full = [next(it) if m else leaf for leaf, m in zip(leaves, mask, strict=True)]
                return loss_fn(tree_unflatten(tree, full), *batch)

            loss, g = value_and_grad(loss_of)([x for x, m in zip(leaves, mask) if m])
            it = iter(g)
            grads = [next(it) if m else None for m in mask]
            grads = _tied_totals(leaves, grads, ties)  # (the inputs: one object per leaf)
            new_params, new_state = optimizer._update(params, grads, state, hyper)
            return tree_leaves(new_params), new_state, loss

        train_step.__name__ = f"{type(optimizer).__name__}.compile_step"
        self.compiled = _compile(train_step)
        self._tree = None  # the last call's params treedef: an equal one is passed as this

    @property
    def stats(self):
        """The compilation statistics of the underlying ``nb.compile``d function."""
        return self.compiled.stats

    def __call__(self, *batch) -> Tensor:
        opt = self.optimizer
        # detached views of the trainable leaves: arguments without backward history take
        # compile's fast path; buffers go as they are, so updates written back reach them
        leaves, tree = tree_flatten(opt.params)
        if tree == self._tree:  # the same object: its hash is kept, the key compares by id
            tree = self._tree
        self._tree = tree
        mask = _trained(opt, leaves)
        plain = [detach(p) if m and isinstance(p, Tensor) else p for p, m in zip(leaves, mask)]
        # the settings are an argument: the learning rate (and a cycled momentum) as tensor
        # inputs, so a scheduler's new value each step runs the same trace; the others are
        # Python values, part of the trace's key (changing one retraces)
        hyper = opt._settings(traced=True)
        hyper["maximize"] = opt.maximize
        trained = sum(1 << i for i, m in enumerate(mask) if m)
        ties = _tied_groups(leaves)  # (static: usually ())
        # parameters or moments still pending (a new model's initialization, the zero
        # moments, a lazy load) are computed on their own first: each step leaves them
        # realized, so a program that computed them with the step would run once, one MAX
        # compile more than the step's own program, which runs from the first call on
        waiting = [
            t
            for t in (*plain, *tree_leaves(opt.state))
            if isinstance(t, Tensor) and t._impl.buffer is None
        ]
        if waiting and STATE.recording is None:
            realize(*waiting)
        new_leaves, new_state, loss = self.compiled(
            plain, tree, trained, ties, opt.state, hyper, *batch
        )
        pairs = [
            (old, new)
            for old, new, m in zip(leaves, new_leaves, mask)
            if m and isinstance(old, Tensor)
        ]
        realize(loss, *[new for _, new in pairs], *tree_leaves(new_state))
        for old, new in pairs:
            rebind(old, new)
        opt.state = new_state
        opt._step_count += 1
        return loss


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov and weight decay
    (see :func:`sgd_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: learning rate or schedule (default 1e-3, PyTorch's).
        momentum: momentum factor (default 0).
        dampening: share of the gradient held back from the momentum buffer (default 0).
        weight_decay: L2 penalty (default 0).
        nesterov: Nesterov momentum (default False).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``fused``, ``capturable`` (see
            :class:`Optimizer`).

    Example:
        >>> opt = SGD({"w": nb.ones((2,))}, lr=0.5)
        >>> opt.step({"w": nb.ones((2,))})["w"].numpy().tolist()
        [0.5, 0.5]
    """

    def __init__(
        self,
        params,
        lr=1e-3,
        momentum=0.0,
        dampening=0.0,
        weight_decay=0.0,
        nesterov=False,
        **kwargs,
    ):
        _check_settings(
            "SGD", lr, momentum=momentum, nesterov=nesterov, dampening=dampening, wd=weight_decay
        )
        self.momentum, self.nesterov, self.weight_decay = momentum, nesterov, weight_decay
        self.dampening = dampening
        super().__init__(params, lr, **kwargs)

    _hyper_names = ("lr", "momentum", "dampening", "weight_decay", "nesterov")
    _update_rule = staticmethod(sgd_update)
    _dynamic = ("lr", "momentum")

    def _init(self, params):
        return sgd_init(params, self.momentum)


class Adam(Optimizer):
    """Adam (see :func:`adam_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: learning rate or schedule (default 1e-3).
        betas: moment decay rates (default ``(0.9, 0.999)``).
        eps: denominator epsilon (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).
        amsgrad: divide by the largest second moment so far (AMSGrad; default False).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``fused``, ``capturable`` (see
            :class:`Optimizer`).
    """

    decoupled = False

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.0,
        amsgrad=False,
        **kwargs,
    ):
        _check_settings(type(self).__name__, lr, betas=betas, eps=eps, wd=weight_decay)
        self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay
        self.amsgrad = bool(amsgrad)
        super().__init__(params, lr, **kwargs)

    _hyper_names = ("lr", "betas", "eps", "weight_decay", "amsgrad")
    _dynamic = ("lr", "betas")

    @property
    def beta1(self) -> float:
        """``betas[0]`` (the original Nabla's spelling)."""
        return self.betas[0]

    @property
    def beta2(self) -> float:
        """``betas[1]`` (the original Nabla's spelling)."""
        return self.betas[1]

    def _init(self, params):
        return adam_init(params, self.amsgrad)

    def _rule(self, params, grads, state, h: dict):
        settings = _AdamSettings(
            tuple(h["betas"]), h["eps"], h["weight_decay"], self.decoupled, h["amsgrad"]
        )
        return _adam(params, grads, state, h["lr"], settings)


class AdamW(Adam):
    """AdamW: Adam with decoupled weight decay (see :func:`adamw_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: learning rate or schedule (default 1e-3).
        betas: moment decay rates (default ``(0.9, 0.999)``).
        eps: denominator epsilon (default 1e-8).
        weight_decay: decoupled decay (default 1e-2).
        amsgrad: divide by the largest second moment so far (AMSGrad; default False).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``fused``, ``capturable`` (see
            :class:`Optimizer`).
    """

    decoupled = True

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=1e-2,
        amsgrad=False,
        **kwargs,
    ):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, **kwargs)


class RMSprop(Optimizer):
    """RMSprop, as ``torch.optim.RMSprop`` (see :func:`rmsprop_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: learning rate or schedule (default 1e-2).
        alpha: smoothing constant of the running averages (default 0.99).
        eps: denominator epsilon (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).
        momentum: momentum factor (default 0).
        centered: normalize by the estimated variance of the gradient (default False).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``fused``, ``capturable`` (see
            :class:`Optimizer`).

    Example:
        >>> opt = RMSprop({"w": nb.ones((2,))}, lr=0.01)
        >>> [round(v, 4) for v in opt.step({"w": nb.ones((2,))})["w"].tolist()]
        [0.9, 0.9]
    """

    _hyper_names = ("lr", "alpha", "eps", "weight_decay", "momentum", "centered")
    _update_rule = staticmethod(rmsprop_update)
    _dynamic = ("lr", "momentum")

    def __init__(
        self,
        params,
        lr=1e-2,
        alpha=0.99,
        eps=1e-8,
        weight_decay=0.0,
        momentum=0.0,
        centered=False,
        **kwargs,
    ):
        _check_settings("RMSprop", lr, momentum=momentum, eps=eps, wd=weight_decay, alpha=alpha)
        self.alpha, self.eps, self.weight_decay = alpha, eps, weight_decay
        self.momentum, self.centered = momentum, bool(centered)
        super().__init__(params, lr, **kwargs)

    def _init(self, params):
        return rmsprop_init(params, self.momentum, self.centered)


class Adagrad(Optimizer):
    """Adagrad, as ``torch.optim.Adagrad`` (see :func:`adagrad_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: learning rate or schedule (default 1e-2).
        lr_decay: the rate's decay per update (default 0).
        weight_decay: L2 penalty added to the gradient (default 0).
        initial_accumulator_value: the starting value of the sums of squared gradients
            (default 0).
        eps: denominator epsilon (default 1e-10).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``fused``, ``capturable`` (see
            :class:`Optimizer`).

    Example:
        >>> opt = Adagrad({"w": nb.ones((2,))}, lr=0.1)
        >>> [round(v, 4) for v in opt.step({"w": nb.ones((2,))})["w"].tolist()]
        [0.9, 0.9]
    """

    _hyper_names = ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")
    _update_rule = staticmethod(adagrad_update)
    _dynamic = ("lr",)

    def __init__(
        self,
        params,
        lr=1e-2,
        lr_decay=0.0,
        weight_decay=0.0,
        initial_accumulator_value=0.0,
        eps=1e-10,
        **kwargs,
    ):
        _check_settings(
            "Adagrad",
            lr,
            eps=eps,
            wd=weight_decay,
            lr_decay=lr_decay,
            initial_accumulator_value=initial_accumulator_value,
        )
        self.lr_decay, self.weight_decay, self.eps = lr_decay, weight_decay, eps
        self.initial_accumulator_value = initial_accumulator_value
        super().__init__(params, lr, **kwargs)

    def _init(self, params):
        return adagrad_init(params, self.initial_accumulator_value)


class Adamax(Optimizer):
    """Adamax, as ``torch.optim.Adamax`` (see :func:`adamax_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: learning rate or schedule (default 2e-3).
        betas: decay rates (default ``(0.9, 0.999)``).
        eps: added to ``|g|`` (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``fused``, ``capturable`` (see
            :class:`Optimizer`).
    """

    _hyper_names = ("lr", "betas", "eps", "weight_decay")
    _update_rule = staticmethod(adamax_update)
    _dynamic = ("lr",)

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, **kwargs):
        _check_settings("Adamax", lr, betas=betas, eps=eps, wd=weight_decay)
        self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay
        super().__init__(params, lr, **kwargs)

    def _init(self, params):
        return adamax_init(params)


class NAdam(Optimizer):
    """NAdam, as ``torch.optim.NAdam`` (see :func:`nadam_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: learning rate or schedule (default 2e-3).
        betas: decay rates (default ``(0.9, 0.999)``).
        eps: denominator epsilon (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).
        momentum_decay: the momentum schedule's ``psi`` (default 4e-3).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``fused``, ``capturable`` (see
            :class:`Optimizer`).
    """

    _hyper_names = ("lr", "betas", "eps", "weight_decay", "momentum_decay")
    _update_rule = staticmethod(nadam_update)
    _dynamic = ("lr",)

    def __init__(
        self,
        params,
        lr=2e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.0,
        momentum_decay=4e-3,
        **kwargs,
    ):
        _check_settings("NAdam", lr, betas=betas, eps=eps, wd=weight_decay)
        self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay
        self.momentum_decay = momentum_decay
        super().__init__(params, lr, **kwargs)

    def _init(self, params):
        return nadam_init(params)


class RAdam(Optimizer):
    """RAdam, as ``torch.optim.RAdam`` (see :func:`radam_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: learning rate or schedule (default 1e-3).
        betas: decay rates (default ``(0.9, 0.999)``).
        eps: denominator epsilon (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``fused``, ``capturable`` (see
            :class:`Optimizer`).
    """

    _hyper_names = ("lr", "betas", "eps", "weight_decay")
    _update_rule = staticmethod(radam_update)
    _dynamic = ("lr",)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, **kwargs):
        _check_settings("RAdam", lr, betas=betas, eps=eps, wd=weight_decay)
        self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay
        super().__init__(params, lr, **kwargs)

    def _init(self, params):
        return radam_init(params)


class Adadelta(Optimizer):
    """Adadelta, as ``torch.optim.Adadelta`` (see :func:`adadelta_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: a factor on the update (default 1.0).
        rho: decay rate of the running averages (default 0.9).
        eps: added inside the roots (default 1e-6).
        weight_decay: L2 penalty added to the gradient (default 0).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``fused``, ``capturable`` (see
            :class:`Optimizer`).
    """

    _hyper_names = ("lr", "rho", "eps", "weight_decay")
    _update_rule = staticmethod(adadelta_update)
    _dynamic = ("lr",)

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, **kwargs):
        _check_settings("Adadelta", lr, eps=eps, wd=weight_decay, alpha=rho)
        self.rho, self.eps, self.weight_decay = rho, eps, weight_decay
        super().__init__(params, lr, **kwargs)

    def _init(self, params):
        return adadelta_init(params)


class Rprop(Optimizer):
    """Rprop, as ``torch.optim.Rprop`` (see :func:`rprop_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: the initial step size (default 1e-2).
        etas: ``(decrease, increase)`` factors (default (0.5, 1.2)).
        step_sizes: ``(min, max)`` step size (default (1e-6, 50)).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``capturable`` (see
            :class:`Optimizer`).
    """

    _hyper_names = ("lr", "etas", "step_sizes")
    _update_rule = staticmethod(rprop_update)
    _dynamic = ("lr",)

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50.0), **kwargs):
        _check_settings("Rprop", lr)
        self.etas = _pair_setting("Rprop", "etas", etas)
        self.step_sizes = _pair_setting("Rprop", "step_sizes", step_sizes)
        super().__init__(params, lr, **kwargs)

    def _validate(self) -> None:
        _check_settings("Rprop", self.lr)
        _pair_setting("Rprop", "etas", self.etas)
        _pair_setting("Rprop", "step_sizes", self.step_sizes)

    def _init(self, params):
        return rprop_init(params)


class SparseAdam(Optimizer):
    """``torch.optim.SparseAdam`` (see :func:`sparse_adam_update`): Adam that moves only the
    rows a gradient reaches, for embedding tables. Gradients here are dense (an
    ``Embedding``'s ``sparse=True`` is accepted and gives dense ones); a row whose gradient
    is all zeros counts as not reached.

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: learning rate or schedule (default 1e-3).
        betas: moment decay rates (default ``(0.9, 0.999)``).
        eps: denominator epsilon (default 1e-8).
        **kwargs: PyTorch's ``maximize`` (see :class:`Optimizer`).
    """

    _hyper_names = ("lr", "betas", "eps")
    _update_rule = staticmethod(sparse_adam_update)
    _dynamic = ("lr",)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, **kwargs):
        _check_settings("SparseAdam", lr, betas=betas, eps=eps)
        self.betas, self.eps = tuple(betas), eps
        super().__init__(params, lr, **kwargs)

    def _init(self, params):
        return sparse_adam_init(params)


class ASGD(Optimizer):
    """Averaged SGD, as ``torch.optim.ASGD`` (see :func:`asgd_update`; the average is
    ``opt.state["ax"]``).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: the learning rate (default 1e-2).
        lambd: the decay term (default 1e-4).
        alpha: the power of the step length's decay (default 0.75).
        t0: the step from which the average starts (default 1e6).
        weight_decay: L2 penalty added to the gradient (default 0).
        **kwargs: PyTorch's ``maximize``, ``foreach``, ``capturable`` (see
            :class:`Optimizer`).
    """

    _hyper_names = ("lr", "lambd", "alpha", "t0", "weight_decay")
    _update_rule = staticmethod(asgd_update)
    _dynamic = ("lr",)

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0, **kwargs):
        _check_settings("ASGD", lr, wd=weight_decay, alpha=alpha)
        self.lambd, self.alpha, self.t0, self.weight_decay = lambd, alpha, t0, weight_decay
        super().__init__(params, lr, **kwargs)

    def _validate(self) -> None:
        _check_settings("ASGD", self.lr, wd=self.weight_decay, alpha=self.alpha)

    def _init(self, params):
        return asgd_init(params, self.lr)


class Adafactor(Optimizer):
    """Adafactor, as ``torch.optim.Adafactor`` (see :func:`adafactor_update`).

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place).
        lr: the rate's ceiling (default 1e-2).
        beta2_decay: the exponent of the running means' decay (default -0.8).
        eps: ``(eps1, eps2)`` (default ``(None, 1e-3)``).
        d: the clipping threshold of the update's RMS (default 1).
        weight_decay: decoupled weight decay (default 0).
        **kwargs: PyTorch's ``maximize`` and ``foreach`` (see :class:`Optimizer`).
    """

    _hyper_names = ("lr", "beta2_decay", "eps", "d", "weight_decay")
    _update_rule = staticmethod(adafactor_update)
    _dynamic = ("lr",)

    def __init__(
        self,
        params,
        lr=1e-2,
        beta2_decay=-0.8,
        eps=(None, 1e-3),
        d=1.0,
        weight_decay=0.0,
        **kwargs,
    ):
        _check_settings("Adafactor", lr, wd=weight_decay)
        if beta2_decay > 0:
            raise ValueError(f"Adafactor: beta2_decay must be <= 0, got {beta2_decay}")
        if not d >= 1:
            raise ValueError(f"Adafactor: the clipping threshold d must be >= 1, got {d}")
        self.beta2_decay, self.eps, self.d = beta2_decay, tuple(eps), d
        self.weight_decay = weight_decay
        super().__init__(params, lr, **kwargs)

    def _validate(self) -> None:
        _check_settings("Adafactor", self.lr, wd=self.weight_decay)
        if not self.d >= 1:  # (PyTorch's rule)
            raise ValueError(f"Adafactor: the clipping threshold d must be >= 1, got {self.d}")

    def _init(self, params):
        return adafactor_init(params)

    def _check_state_fits(self, params) -> None:
        """The factored moments still fit the parameters (see :class:`Optimizer`)."""
        for i, p in enumerate(tree_leaves(params)):
            if not isinstance(p, Tensor):
                continue
            for key, shape in zip(("row_var", "col_var", "variance"), _factored_shapes(p)):
                m = self.state[key][i]
                if isinstance(m, Tensor) and m.ndim and tuple(m.shape) != shape:
                    raise ValueError(
                        f"Adafactor.step: parameter {i} now has shape {tuple(p.shape)}, but its "
                        f"state {key!r} was made for another ({tuple(m.shape)}); make a new "
                        "optimizer"
                    )


# the schedulers drive the optimizers above (``torch.optim.lr_scheduler``)
# and weight averaging (``torch.optim.swa_utils``) builds on both
from . import lr_scheduler, swa_utils  # noqa: E402
from .lbfgs import LBFGS  # noqa: E402 - a closure-driven quasi-Newton method, on its own

__all__ += ["LBFGS", "swa_utils"]
