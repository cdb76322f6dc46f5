"""Losses: ``mse_loss``, ``l1_loss``, ``smooth_l1_loss``, ``huber_loss``,
``cross_entropy_loss`` (and ``cross_entropy``, PyTorch's spelling), ``nll_loss``, ``kl_div``,
``binary_cross_entropy``, ``binary_cross_entropy_with_logits``; and each as a module with
PyTorch's name and constructor (``nn.CrossEntropyLoss()``, ``nn.MSELoss()``, ...).

Classes are on the **last** axis (``logits`` of shape ``(..., C)``), matching the channels-last
layout of the rest of ``nabla.nn``. ``reduction`` is ``"mean"`` (default), ``"sum"`` or
``"none"``.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..core.dtypes import DType, get_default_dtype, result_type
from ..ops import binary, creation, unary, view
from ..ops import reduction as _reduction_ops
from ..ops._util import as_tensor, readable_now
from ..ops.indexing import take_along_axis
from ..ops.linalg import norm as _linalg_norm
from ..runtime.tensor import Tensor
from ..transforms.control_flow import scan
from ..transforms.custom import custom_jvp
from .module import Module

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "HuberLoss",
    "KLDivLoss",
    "L1Loss",
    "MSELoss",
    "NLLLoss",
    "SmoothL1Loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "cross_entropy_loss",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "mse_loss",
    "nll_loss",
    "smooth_l1_loss",
]

_REDUCTIONS = ("mean", "sum", "none")


def _reduce(loss: Tensor, reduction_: str, fn: str) -> Tensor:
    if reduction_ == "mean":
        return loss.mean()
    if reduction_ == "sum":
        return loss.sum()
    if reduction_ == "none":
        return loss
    raise ValueError(f"{fn}: reduction must be one of {_REDUCTIONS}, got {reduction_!r}")


# the arguments, result and errors of the losses that compare input and target pointwise,
# written once for their docstrings
_POINTWISE_LOSS_PARTS = """\
Args:
        input: predictions.
        target: targets of the same shape.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        weight: optional weight of each element's loss (keyword; broadcasts onto the
            input's shape): ``"mean"`` is then the weighted mean, ``sum(w * loss) /
            sum(w)``, as PyTorch's.

    Returns:
        A scalar, or the elementwise loss for ``"none"``.

    Raises:
        ValueError: if the shapes differ, for a weight that does not broadcast onto the
            input, or for an unknown ``reduction``."""


def _pointwise_loss_doc(fn):
    fn.__doc__ = fn.__doc__.replace("{pointwise_loss_parts}", _POINTWISE_LOSS_PARTS)
    return fn


@_pointwise_loss_doc
def mse_loss(input, target, reduction: str = "mean", *, weight=None) -> Tensor:  # noqa: A002
    """Mean squared error ``(input - target) ** 2``, reduced.

    {pointwise_loss_parts}
    """
    pred, target = as_tensor(input, op="mse_loss"), as_tensor(target, op="mse_loss")
    _check_same_shape("mse_loss", pred, target)
    return _weighted((pred - target).square(), weight, reduction, "mse_loss", by_weight=True)


def _weighted(loss: Tensor, weight, reduction_: str, fn: str, by_weight: bool = False) -> Tensor:
    """``loss`` times ``weight`` (None: none; it must broadcast onto the loss), reduced;
    ``by_weight``: a ``"mean"`` divides by the weights' sum (PyTorch's mse and l1; its
    huber divides by the element count)."""
    if weight is None:
        return _reduce(loss, reduction_, fn)
    w = _onto(fn, "weight", weight, loss)
    loss = loss * w
    if by_weight and reduction_ == "mean":
        return loss.sum() / view.broadcast_to(w, tuple(loss.shape)).sum()
    return _reduce(loss, reduction_, fn)


def _one_hot(target: Tensor, classes: int, dtype) -> Tensor:
    return _hits(target, classes).cast(dtype)


def _hits(target: Tensor, classes: int) -> Tensor:
    """True at each target's class (``(..., classes)``)."""
    return binary.equal(creation.arange(classes), target.unsqueeze(-1))


def _picked(scores: Tensor, target: Tensor) -> Tensor:
    """``scores[..., target]``, by a select rather than a one-hot product: another class's
    ``-inf`` score (a masked class) must not make ``0 * -inf = nan``."""
    return binary.where(_hits(target, scores.shape[-1]), scores, 0.0).sum(axis=-1)


def _check_indices(fn, scores: Tensor, target: Tensor, ignore_index=None) -> bool:
    """Check a class-index target against the scores; returns whether its values were
    checked (False for a target that is traced or batched: see ``_nan_out_of_range``)."""
    if target.shape != scores.shape[:-1]:
        raise ValueError(
            f"{fn}: class-index target of shape {target.shape} does not match input of shape "
            f"{scores.shape} (expected target shape {scores.shape[:-1]}; classes are the last axis)"
        )
    if target.size and readable_now(target):
        # a target with a value already (the usual case: labels from data) is checked here,
        # and so is one computed lazily outside compile (its value is computed now, alone:
        # a NaN loss would hide the bad index); an out-of-range index would otherwise match
        # no class and count as zero loss
        values = target.numpy()
        classes = scores.shape[-1]
        bad = (values < 0) | (values >= classes)
        if ignore_index is not None:
            bad &= values != ignore_index
        if bad.any():
            value = int(values[bad].flat[0])
            hint = "; pass ignore_index=-100 to skip such targets, as PyTorch does"
            raise IndexError(
                f"{fn}: class index {value} is out of range for {classes} classes (input of "
                f"shape {scores.shape}, target of shape {target.shape})"
                + (hint if value == -100 and fn in ("cross_entropy_loss", "nll_loss") else "")
            )
        return True
    return False


def _nan_out_of_range(loss: Tensor, target: Tensor, classes: int) -> Tensor:
    """NaN where a class index (known only when the program runs: traced by compile,
    batched by vmap) is out of range, which would otherwise match no class and count as
    zero loss; the check at the call covers targets that hold values. The NaN is made by a
    division (``loss * 0 / 0``), so ``debug_nans`` names it (a NaN constant selected in
    would pass as data); in range, ``loss * 1 / 1`` is ``loss`` exactly."""
    inside = binary.logical_and(target >= 0, target < classes).cast(loss.dtype)
    return loss * inside / inside


def nll_loss(
    log_probs, target, reduction: str = "mean", *, weight=None, ignore_index: int | None = -100
) -> Tensor:
    """Negative log-likelihood of class indices: ``-log_probs[..., target]``.

    Args:
        log_probs: log-probabilities ``(..., C)`` (e.g. from ``log_softmax``).
        target: integer class indices of shape ``log_probs.shape[:-1]``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        weight: optional per-class weights ``(C,)`` (by keyword, or third in place of
            ``reduction`` as PyTorch's ``F.nll_loss(input, target, weight)``): each target's
            term is scaled by its class's weight, and ``"mean"`` divides by the summed
            weights of the counted targets, as PyTorch.
        ignore_index: a class-index value whose targets count for nothing (keyword only;
            ``-100`` by default, as PyTorch's; None counts every target).

    Returns:
        The reduced loss.

    Raises:
        TypeError: if ``target`` is not an integer tensor, or for a ``reduction`` that is
            neither a string nor (with no ``weight``) the class weights.
        ValueError: for mismatched shapes or an unknown ``reduction``.
        IndexError: for a class index out of range (that is not ``ignore_index``) in a
            target that holds values or is computed lazily (one known only when the program
            runs, traced by ``compile`` or batched by ``vmap``, gives a NaN loss there
            instead).
    """
    log_probs, target = as_tensor(log_probs, op="nll_loss"), as_tensor(target, op="nll_loss")
    if not target.dtype.is_int:
        raise TypeError(f"nll_loss: target must hold integer class indices, got {target.dtype}")
    if not isinstance(reduction, str):
        if weight is not None or reduction is None or isinstance(reduction, bool | numbers.Number):
            raise TypeError(f"nll_loss: reduction must be a string, got {type(reduction).__name__}")
        # PyTorch's F.nll_loss(input, target, weight): a tensor third is the class weights
        weight, reduction = reduction, "mean"
    weight = _class_weight("nll_loss", log_probs, weight)
    loss, share = _class_index_loss("nll_loss", log_probs, target, 0.0, weight, ignore_index)
    if share is not None and reduction == "mean":
        return loss.sum() / share.sum()
    return _reduce(loss, reduction, "nll_loss")


def cross_entropy_loss(
    logits,
    target,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    *,
    weight=None,
    ignore_index: int | None = None,
    axis: int = -1,
) -> Tensor:
    """Softmax cross-entropy between ``logits`` and class indices or class probabilities.

    With integer ``target`` of shape ``logits.shape[:-1]`` it is ``-log_softmax(logits)[target]``;
    with float ``target`` of the same shape as ``logits`` it is
    ``-(target * log_softmax(logits)).sum(-1)``. ``label_smoothing = e`` mixes the target
    distribution with the uniform one: ``(1 - e) * target + e / C``. ``weight`` and
    ``ignore_index`` follow PyTorch: each class's term is scaled by its weight, and with
    class indices ``"mean"`` divides by the summed weights of the counted targets.

    Args:
        logits: unnormalized scores ``(..., C)``.
        target: integer class indices, or probabilities of the same shape as ``logits``.
        label_smoothing: in ``[0, 1]`` (default 0).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        weight: optional per-class weights ``(C,)`` (keyword only; PyTorch's third
            positional argument).
        ignore_index: a class-index value whose targets count for nothing (keyword only;
            PyTorch's default is -100, here None: every target counts, and a -100 target is
            an out-of-range error unless ``ignore_index=-100`` is given).
        axis: the class axis of ``logits`` (keyword only; default -1, the last, as the
            original nabla's ``axis``; PyTorch's class axis 1 is ``axis=1``). Class-index
            targets have the other axes; probability targets have their class axis there too.

    Returns:
        The reduced loss.

    Raises:
        ValueError: for mismatched shapes, ``label_smoothing`` outside ``[0, 1]``, an
            unknown ``reduction``, or ``ignore_index`` with probability targets.
        TypeError: for a tensor passed as ``label_smoothing`` (a weight passed by position),
            or a bool target.
        IndexError: for a class index out of range (that is not ``ignore_index``) in a
            target that holds values or is computed lazily (its value is computed at the
            call); one known only when the program runs (traced by ``compile``, batched by
            ``vmap``) gives a NaN loss there instead.

    Example:
        >>> F.cross_entropy_loss(nb.zeros((2, 4)), nb.constant([0, 3])).item()
        1.3862943649291992
    """
    logits = as_tensor(logits, op="cross_entropy_loss")
    target = as_tensor(target, op="cross_entropy_loss")
    if target.dtype.is_bool:
        raise TypeError(
            f"cross_entropy_loss: target must hold class indices (an integer dtype) or "
            f"probabilities (a float dtype), got bool of shape {target.shape} for logits of "
            f"shape {logits.shape}"
        )
    logits, target = _classes_last(logits, target, axis)
    weight = _cross_entropy_weight(logits, label_smoothing, weight)
    logp = _reduction_ops.logsoftmax(logits, axis=-1)
    if target.dtype.is_int:
        loss, share = _class_index_loss(
            "cross_entropy_loss", logp, target, label_smoothing, weight, ignore_index
        )
        if share is not None and reduction == "mean":
            return loss.sum() / share.sum()
        return _reduce(loss, reduction, "cross_entropy_loss")
    if ignore_index is not None:
        raise ValueError("cross_entropy_loss: ignore_index needs class-index targets")
    if target.shape != logits.shape:
        raise ValueError(
            f"cross_entropy_loss: probability target of shape {target.shape} does not match "
            f"logits of shape {logits.shape}"
        )
    loss = _soft_cross_entropy(target.cast(logits.dtype), logp, label_smoothing, weight)
    return _reduce(loss, reduction, "cross_entropy_loss")


def cross_entropy(
    input,  # noqa: A002 - PyTorch name
    target,
    weight=None,
    *,
    ignore_index: int | None = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    axis: int = -1,
) -> Tensor:
    """``cross_entropy_loss`` with PyTorch's spelling and defaults (``F.cross_entropy``):
    ``weight`` third, the rest by keyword, and ``ignore_index=-100`` (a -100 target counts
    for nothing, as in PyTorch).

    Classes are on the last axis, as everywhere in ``nabla.nn`` (channels last); for a
    ``(N, C)`` input that is PyTorch's axis 1. Pass ``axis=1`` for PyTorch's ``(N, C, ...)``.

    Args:
        input: unnormalized scores ``(..., C)``.
        target: integer class indices of shape ``input.shape[:-1]``, or probabilities of the
            same shape as ``input``.
        weight: optional per-class weights ``(C,)``.
        ignore_index: a class-index value whose targets count for nothing (default -100;
            None counts every target). With probability targets a non-negative one is an
            error and a negative one is ignored, as in PyTorch.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        label_smoothing: in ``[0, 1]`` (default 0).
        axis: the class axis (default -1).

    Returns:
        The reduced loss.

    Raises:
        ValueError, TypeError, IndexError: as :func:`cross_entropy_loss`.

    Example:
        >>> F.cross_entropy(nb.zeros((2, 4)), nb.constant([0, -100])).item()
        1.3862943649291992
    """
    probabilities = not as_tensor(target, op="cross_entropy").dtype.is_int
    if probabilities and ignore_index is not None and ignore_index >= 0:
        raise ValueError(  # (PyTorch's rule: a class it could name needs class indices)
            f"cross_entropy: ignore_index={ignore_index} needs class-index targets; the "
            f"target holds probabilities (a float dtype)"
        )
    return cross_entropy_loss(
        input,
        target,
        label_smoothing,
        reduction,
        weight=weight,
        ignore_index=None if probabilities else ignore_index,
        axis=axis,
    )


def _classes_last(logits: Tensor, target: Tensor, axis) -> tuple:
    """``logits`` (and a probability ``target`` of the same rank) with the class ``axis``
    moved last."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"cross_entropy_loss: axis must be an int, got {axis!r}")
    if logits.ndim == 0:
        raise ValueError("cross_entropy_loss: logits need a class axis, got a scalar")
    if not -logits.ndim <= axis < logits.ndim:
        raise ValueError(
            f"cross_entropy_loss: axis={axis} is out of range for logits of shape {logits.shape}"
        )
    axis %= logits.ndim
    if axis == logits.ndim - 1:
        return logits, target
    logits_last = view.moveaxis(logits, axis, -1)
    if not target.dtype.is_int and target.ndim == logits.ndim:
        target = view.moveaxis(target, axis, -1)
    return logits_last, target


def _cross_entropy_weight(logits: Tensor, label_smoothing, weight) -> Tensor | None:
    """Check ``cross_entropy_loss``'s settings against ``logits``; returns ``weight`` as a
    tensor of the logits' dtype (None without one)."""
    if not isinstance(label_smoothing, int | float):
        raise TypeError(
            "cross_entropy_loss: label_smoothing must be a number, got "
            f"{type(label_smoothing).__name__}; class weights go by keyword: weight=..."
        )
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(
            f"cross_entropy_loss: label_smoothing must be in [0, 1], got {label_smoothing}"
        )
    return _class_weight("cross_entropy_loss", logits, weight)


def _class_weight(fn: str, scores: Tensor, weight) -> Tensor | None:
    """``weight`` as a ``(C,)`` tensor of the scores' dtype (None without one)."""
    if scores.ndim == 0:
        raise ValueError(f"{fn}: the input needs a class axis, got a scalar")
    if weight is None:
        return None
    weight = as_tensor(weight, scores.dtype, fn)
    classes = scores.shape[-1]
    if weight.shape != (classes,):
        raise ValueError(
            f"{fn}: weight of shape {weight.shape} for {classes} classes (input of shape "
            f"{scores.shape})"
        )
    return weight


def _soft_cross_entropy(probs: Tensor, logp: Tensor, label_smoothing, weight) -> Tensor:
    """``-(probs * logp * weight).sum(-1)``, the target distribution ``probs`` first mixed
    with the uniform one: ``(1 - e) * probs + e / C`` for ``label_smoothing = e``."""
    if label_smoothing:
        # e / C as the tensor's division: a dynamic class count stays a value of each call
        share = binary.div(creation.constant(label_smoothing, dtype=probs.dtype), logp.shape[-1])
        probs = probs * (1.0 - label_smoothing) + share
    terms = probs * logp if weight is None else probs * logp * weight
    return -terms.sum(axis=-1)


def _class_index_loss(fn, logp, target, label_smoothing, weight, ignore_index):
    """``-logp[..., target]`` (cross-entropy of each class-index target when ``logp`` is a
    log-softmax): ``(loss, share)``, ``share`` being each target's part in a ``"mean"``
    (None: every target counts alike, a plain mean)."""
    classes = logp.shape[-1]
    checked = _check_indices(fn, logp, target, ignore_index)
    counted = None if ignore_index is None else binary.not_equal(target, ignore_index)
    if counted is not None:
        target = binary.where(counted, target, 0)
    if label_smoothing:
        one_hot = _one_hot(target, classes, logp.dtype)
        loss = _soft_cross_entropy(one_hot, logp, label_smoothing, weight)
    else:
        loss = -_picked(logp if weight is None else logp * weight, target)
    if not checked:
        loss = _nan_out_of_range(loss, target, classes)
    if counted is None and weight is None:
        return loss, None
    # with weights or ignored targets, PyTorch's weighted mean: each target counts its
    # class's weight, an ignored one nothing
    share = creation.ones((), dtype=logp.dtype) if weight is None else _picked(weight, target)
    if counted is not None:
        share = binary.where(counted, share, 0.0)
        loss = binary.where(counted, loss, 0.0)
    return loss, share


def binary_cross_entropy_with_logits(
    logits, target, weight=None, reduction: str = "mean", pos_weight=None
) -> Tensor:
    """Sigmoid cross-entropy, computed stably from logits:
    ``-weight * (pos_weight * t * log(sigmoid(x)) + (1 - t) * log(1 - sigmoid(x)))``.

    Arguments in PyTorch's order (``weight`` third, ``pos_weight`` by keyword).

    Args:
        logits: unnormalized scores.
        target: targets in ``[0, 1]`` of the same shape.
        weight: optional weight of each element's loss (broadcasts against the loss).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        pos_weight: optional weight of the positive term (broadcasts against the last axis).

    Returns:
        The reduced loss.

    Raises:
        ValueError: if the shapes differ, or for an unknown ``reduction``.
    """
    x, t = _pair("binary_cross_entropy_with_logits", logits, target)
    # log(sigmoid(x)) = -softplus(-x) and log(1 - sigmoid(x)) = -softplus(x): no overflow
    log_p, log_not_p = -unary.softplus(-x), -unary.softplus(x)
    fn = "binary_cross_entropy_with_logits"
    if pos_weight is None:
        pos = t * log_p
    else:
        pos = _onto(fn, "pos_weight", pos_weight, x) * t * log_p
    loss = -(pos + (1.0 - t) * log_not_p)
    if weight is not None:
        loss = loss * _onto(fn, "weight", weight, x)
    return _reduce(loss, reduction, fn)


def broadcasts_onto(shape: tuple, onto: tuple) -> bool:
    """Whether a value of ``shape`` broadcasts onto ``onto`` without changing it (a weight
    or bias must not enlarge what it scales or shifts)."""
    try:
        return np.broadcast_shapes(tuple(onto), tuple(shape)) == tuple(onto)
    except ValueError:
        return False


def _onto(fn: str, name: str, w, x: Tensor) -> Tensor:
    """``w`` as a tensor that broadcasts onto ``x``'s shape without changing it (PyTorch's
    rule: a weight must not enlarge the loss, which would change its mean)."""
    w = as_tensor(w, op=fn)
    if not broadcasts_onto(w.shape, x.shape):
        raise ValueError(
            f"{fn}: {name} of shape {w.shape} does not broadcast onto the input's shape {x.shape}"
        )
    return w


def _pair(fn: str, input, target):  # noqa: A002 - PyTorch name
    """``input`` and ``target`` in their promoted dtype, a float one (integers in the default
    float dtype): an integer input had cast a float target down to it ([1, 2] against 0.5
    scored as against 0), and a float16 input a float32 target."""
    pred, target = as_tensor(input, op=fn), as_tensor(target, op=fn)
    _check_same_shape(fn, pred, target)
    dtype = result_type([pred.dtype, target.dtype])
    if not dtype.is_float:
        dtype = get_default_dtype()
    return pred.cast(dtype), target.cast(dtype)


def _check_same_shape(fn: str, pred: Tensor, target: Tensor) -> None:
    if pred.shape != target.shape:
        raise ValueError(
            f"{fn}: input of shape {pred.shape} and target of shape {target.shape} differ"
        )


def _abs_torch(d):
    """``|d|`` whose derivative is ``sign(d)``, 0 at 0 as in PyTorch's L1 losses (``abs``'s
    own derivative there is 1, as JAX's)."""
    return d * unary.sign(unary.stop_gradient(d))


def _inside(near, diff):
    """``diff`` where the quadratic piece applies, 0 elsewhere: an infinite ``diff`` gives the
    unused piece no ``0 * inf`` gradient. The linear piece is ``_abs_torch`` of ``diff``
    itself, so a NaN difference has a NaN gradient, as PyTorch's (``abs`` of it had taken
    the negative branch: a finite gradient beside a NaN loss)."""
    return binary.where(near, diff, 0.0)


@_pointwise_loss_doc
def l1_loss(input, target, reduction: str = "mean", *, weight=None) -> Tensor:  # noqa: A002
    """Mean absolute error ``|input - target|``, reduced (PyTorch's ``l1_loss``; its
    gradient is ``sign(input - target)``, 0 where they are equal, as PyTorch's).

    {pointwise_loss_parts}
    """
    pred, target = _pair("l1_loss", input, target)
    return _weighted(_abs_torch(pred - target), weight, reduction, "l1_loss", by_weight=True)


def smooth_l1_loss(input, target, reduction: str = "mean", beta: float = 1.0) -> Tensor:  # noqa: A002
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (``d = input -
    target``), reduced (PyTorch's ``smooth_l1_loss``; ``beta=0`` is the L1 loss).

    Args:
        input: predictions.
        target: targets of the same shape.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        beta: where the loss turns from quadratic to linear (default 1, >= 0).

    Returns:
        A scalar, or the elementwise loss for ``"none"``.

    Raises:
        ValueError: if the shapes differ, for a negative ``beta`` or an unknown ``reduction``.
    """
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    pred, target = _pair("smooth_l1_loss", input, target)
    if beta == 0:
        return _reduce(_abs_torch(pred - target), reduction, "smooth_l1_loss")
    diff = pred - target
    near = unary.abs(diff) < beta
    loss = binary.where(
        near, 0.5 * _inside(near, diff).square() / beta, _abs_torch(diff) - 0.5 * beta
    )
    return _reduce(loss, reduction, "smooth_l1_loss")


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None) -> Tensor:  # noqa: A002, E501
    """``0.5 d**2`` where ``|d| <= delta``, else ``delta (|d| - 0.5 delta)`` (``d = input -
    target``), reduced (PyTorch's ``huber_loss``).

    Args:
        input: predictions.
        target: targets of the same shape.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        delta: where the loss turns from quadratic to linear (default 1, > 0).
        weight: optional weight of each element's loss (broadcasts onto the input's
            shape); ``"mean"`` still divides by the element count, as PyTorch's huber.

    Returns:
        A scalar, or the elementwise loss for ``"none"``.

    Raises:
        ValueError: if the shapes differ, for ``delta <= 0``, a weight that does not
            broadcast onto the input, or an unknown ``reduction``.
    """
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta}")
    pred, target = _pair("huber_loss", input, target)
    diff = pred - target
    near = unary.abs(diff) <= delta
    loss = binary.where(
        near, 0.5 * _inside(near, diff).square(), delta * (_abs_torch(diff) - 0.5 * delta)
    )
    return _weighted(loss, weight, reduction, "huber_loss")


def kl_div(input, target, reduction: str = "mean", log_target: bool = False) -> Tensor:  # noqa: A002
    """Kullback-Leibler divergence of ``target`` from the log-probabilities ``input``:
    ``target * (log(target) - input)`` elementwise, reduced (PyTorch's ``kl_div``, with its
    ``xlogy``: ``target * log(target)`` is 0 where ``target`` is 0 and NaN where it is
    negative; the gradient to ``input`` is ``-target`` everywhere).

    Args:
        input: log-probabilities.
        target: probabilities (log-probabilities with ``log_target``), same shape.
        reduction: ``"mean"`` (default: over every element, as PyTorch), ``"batchmean"``
            (the sum over the first axis's size: the true KL divergence per example),
            ``"sum"`` or ``"none"``.
        log_target: ``target`` holds log-probabilities.

    Returns:
        A scalar, or the elementwise loss for ``"none"``.

    Raises:
        ValueError: if the shapes differ, or for an unknown ``reduction``.
    """
    pred, target = _pair("kl_div", input, target)
    if log_target:
        loss = unary.exp(target) * (target - pred)
    else:
        # log(0) never reaches the gradient; a negative target keeps its log: NaN in the
        # value and in the gradient, as PyTorch's (it had given 0 and no gradient)
        safe = binary.where(target == 0, creation.ones_like(target), target)
        loss = target * unary.log(safe) - target * pred
    if reduction == "batchmean":
        return loss.sum() / (pred.shape[0] if pred.ndim else 1)
    return _reduce(loss, reduction, "kl_div")


def _clamped_logs(p):
    return binary.maximum(unary.log(p), -100.0), binary.maximum(unary.log1p(-p), -100.0)


@custom_jvp
def _bce(p, t):
    log_p, log_not_p = _clamped_logs(p)
    return -(t * log_p + (1.0 - t) * log_not_p)


@_bce.defjvp
def _bce_jvp(primals, tangents):
    # PyTorch's derivative: (p - t) / p(1 - p), the denominator clamped at 1e-12. Through
    # the clamped logs autodiff gave NaN where p is exactly 0 or 1 (inf * 0), which a
    # saturated sigmoid reaches in float32
    (p, t), (tp, tt) = primals, tangents
    log_p, log_not_p = _clamped_logs(p)
    d_p = (p - t) / binary.maximum(p * (1.0 - p), 1e-12)
    return _bce(p, t), d_p * tp + (log_not_p - log_p) * tt


def _check_unit_range(fn: str, name: str, v: Tensor) -> None:
    """Probabilities outside ``[0, 1]`` are an error at the call (as PyTorch's) when they
    hold values already (data, a target); a pending value (a model's output) is not
    computed early for it: there an out-of-range value gives NaN."""
    impl = v._impl
    if impl.levels or not v.size or impl.buffer is None or impl.sharding is not None:
        return
    values = v.numpy()
    bad = ~((values >= 0) & (values <= 1))
    if bad.any():
        raise ValueError(
            f"{fn}: all elements of {name} should be between 0 and 1, got {values[bad].flat[0]} "
            f"({name} of shape {v.shape})"
        )


def binary_cross_entropy(input, target, weight=None, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Cross-entropy of probabilities: ``-(t log(p) + (1 - t) log(1 - p))``, each log
    clamped at -100 as in PyTorch (so ``p`` of exactly 0 or 1 stays finite), with
    PyTorch's derivative ``(p - t) / max(p (1 - p), 1e-12)`` (finite there too).

    Args:
        input: probabilities in ``[0, 1]``.
        target: targets in ``[0, 1]`` of the same shape.
        weight: optional weight of each element's loss (broadcasts against the loss).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        A scalar, or the elementwise loss for ``"none"``.

    Raises:
        ValueError: if the shapes differ, for an unknown ``reduction``, or for an input or
            target outside ``[0, 1]`` (checked at the call when they hold values already).
    """
    p, t = _pair("binary_cross_entropy", input, target)
    for name, v in (("input", p), ("target", t)):
        _check_unit_range("binary_cross_entropy", name, v)
    loss = _bce(p, t)
    if weight is not None:
        loss = loss * _onto("binary_cross_entropy", "weight", weight, p)
    return _reduce(loss, reduction, "binary_cross_entropy")


# ----------------------------------------------------------------------------- modules
# The losses as modules, with torch.nn's names and constructors: ``criterion =
# nn.CrossEntropyLoss(); loss = criterion(logits, target)``. Settings are static attributes;
# a class-weight tensor is a buffer (in ``state_dict``, as PyTorch's). Class-index losses
# default to ``ignore_index=-100``, as PyTorch's modules do.
class _Loss(Module):
    """A loss function as a module: ``forward(input, target)``."""

    _settings: tuple = ("reduction",)

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(
                f"{type(self).__name__}: reduction must be one of {_REDUCTIONS}, got {reduction!r}"
            )
        self.reduction = reduction

    def _weight(self, name: str, weight) -> None:
        """Keep ``weight`` (None or values) as buffer ``name``."""
        value = None if weight is None else as_tensor(weight, op=type(self).__name__)
        self.register_buffer(name, value)

    def extra_repr(self) -> str:
        """The settings shown by ``repr``."""
        return ", ".join(f"{k}={getattr(self, k)!r}" for k in self._settings)


class MSELoss(_Loss):
    """:func:`mse_loss` as a module (``torch.nn.MSELoss``).

    Args:
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
    """

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of ``input`` against ``target`` (same shape)."""
        return mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    """:func:`l1_loss` as a module (``torch.nn.L1Loss``).

    Args:
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
    """

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of ``input`` against ``target`` (same shape)."""
        return l1_loss(input, target, self.reduction)


class SmoothL1Loss(_Loss):
    """:func:`smooth_l1_loss` as a module (``torch.nn.SmoothL1Loss(reduction, beta)``)."""

    _settings = ("reduction", "beta")

    def __init__(self, reduction: str = "mean", beta: float = 1.0):
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of ``input`` against ``target`` (same shape)."""
        return smooth_l1_loss(input, target, self.reduction, self.beta)


class HuberLoss(_Loss):
    """:func:`huber_loss` as a module (``torch.nn.HuberLoss(reduction, delta)``)."""

    _settings = ("reduction", "delta")

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of ``input`` against ``target`` (same shape)."""
        return huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(Module):
    """:func:`kl_div` as a module (``torch.nn.KLDivLoss(reduction, log_target)``; also
    ``reduction="batchmean"``)."""

    def __init__(self, reduction: str = "mean", log_target: bool = False):
        super().__init__()
        if reduction not in (*_REDUCTIONS, "batchmean"):
            raise ValueError(
                f"KLDivLoss: reduction must be one of {(*_REDUCTIONS, 'batchmean')}, got "
                f"{reduction!r}"
            )
        self.reduction, self.log_target = reduction, bool(log_target)

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The divergence of ``target`` from the log-probabilities ``input``."""
        return kl_div(input, target, self.reduction, self.log_target)

    def extra_repr(self) -> str:
        """The settings shown by ``repr``."""
        return f"reduction={self.reduction!r}, log_target={self.log_target}"


class CrossEntropyLoss(_Loss):
    """:func:`cross_entropy` as a module (``torch.nn.CrossEntropyLoss(weight,
    ignore_index=-100, reduction, label_smoothing)``), classes on the last axis (``axis``
    picks another).

    Example:
        >>> criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
        >>> loss = criterion(model(x), labels)
    """

    _settings = ("ignore_index", "reduction", "label_smoothing")

    def __init__(
        self,
        weight=None,
        ignore_index: int | None = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
        *,
        axis: int = -1,
    ):
        super().__init__(reduction)
        self._weight("weight", weight)
        self.ignore_index, self.label_smoothing, self.axis = ignore_index, label_smoothing, axis

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of the scores ``input`` (``(..., C)``) against ``target``: class indices
        of shape ``input.shape[:-1]`` or probabilities like ``input``."""
        return cross_entropy(
            input,
            target,
            self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
            axis=self.axis,
        )


class NLLLoss(_Loss):
    """:func:`nll_loss` as a module (``torch.nn.NLLLoss(weight, ignore_index=-100,
    reduction)``), classes on the last axis."""

    _settings = ("ignore_index", "reduction")

    def __init__(self, weight=None, ignore_index: int | None = -100, reduction: str = "mean"):
        super().__init__(reduction)
        self._weight("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of the log-probabilities ``input`` (``(..., C)``) against ``target``,
        class indices of shape ``input.shape[:-1]``."""
        return nll_loss(
            input, target, self.reduction, weight=self.weight, ignore_index=self.ignore_index
        )


class BCELoss(_Loss):
    """:func:`binary_cross_entropy` as a module (``torch.nn.BCELoss(weight, reduction)``)."""

    def __init__(self, weight=None, reduction: str = "mean"):
        super().__init__(reduction)
        self._weight("weight", weight)

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of the probabilities ``input`` against ``target`` (same shape)."""
        return binary_cross_entropy(input, target, self.weight, self.reduction)


class BCEWithLogitsLoss(_Loss):
    """:func:`binary_cross_entropy_with_logits` as a module
    (``torch.nn.BCEWithLogitsLoss(weight, reduction, pos_weight)``)."""

    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None):
        super().__init__(reduction)
        self._weight("weight", weight)
        self._weight("pos_weight", pos_weight)

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of the scores ``input`` against ``target`` (same shape)."""
        return binary_cross_entropy_with_logits(
            input, target, self.weight, self.reduction, pos_weight=self.pos_weight
        )


# ----------------------------------------------------------------------------- more losses
# PyTorch's ranking, embedding and likelihood losses, with its formulas and defaults; the
# vectors of a pair are on the last axis (PyTorch's dim 1 for (N, D)).
def _neg_log_sigmoid(x):
    """``-log(sigmoid(x))`` without overflow: ``softplus(-x)``."""
    return unary.softplus(-x)


def margin_ranking_loss(input1, input2, target, margin: float = 0.0, reduction: str = "mean"):
    """``max(0, -target * (input1 - input2) + margin)``, reduced (PyTorch's).

    Args:
        input1: scores.
        input2: scores, broadcasting with ``input1``.
        target: 1 where ``input1`` should rank higher, -1 where ``input2`` should.
        margin: the margin (default 0).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        The reduced loss.
    """
    a, b = as_tensor(input1, op="margin_ranking_loss"), as_tensor(input2, op="margin_ranking_loss")
    y = as_tensor(target, op="margin_ranking_loss")
    return _reduce(binary.maximum(-y * (a - b) + margin, 0.0), reduction, "margin_ranking_loss")


def hinge_embedding_loss(input, target, margin: float = 1.0, reduction: str = "mean"):  # noqa: A002
    """``input`` where ``target`` is 1, ``max(0, margin - input)`` where it is -1, reduced
    (PyTorch's).

    Args:
        input: distances.
        target: 1 or -1, of ``input``'s shape.
        margin: the margin (default 1).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        The reduced loss.
    """
    x = as_tensor(input, op="hinge_embedding_loss")
    y = as_tensor(target, op="hinge_embedding_loss")
    zero = creation.zeros_like(x)
    loss = binary.where(y != 1, binary.maximum(margin - x, 0.0), zero) + binary.where(
        y != -1, x, zero
    )
    return _reduce(loss, reduction, "hinge_embedding_loss")


def soft_margin_loss(input, target, reduction: str = "mean"):  # noqa: A002
    """``log(1 + exp(-target * input))``, reduced (PyTorch's).

    Args:
        input: scores.
        target: 1 or -1, of ``input``'s shape.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        The reduced loss.
    """
    x, y = _pair("soft_margin_loss", input, target)
    return _reduce(_neg_log_sigmoid(y * x), reduction, "soft_margin_loss")


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, reduction: str = "mean"):
    """``1 - cos(input1, input2)`` where ``target`` is 1, ``max(0, cos - margin)`` where it
    is -1, the cosine along the last axis, reduced (PyTorch's, with its ``1e-12`` in each
    squared norm).

    Args:
        input1: vectors ``(N, D)`` or ``(D,)``.
        input2: vectors of the same shape.
        target: 1 or -1 per pair, ``(N,)`` or ``()``.
        margin: the margin (default 0).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        The reduced loss.
    """
    a, b = _pair("cosine_embedding_loss", input1, input2)
    y = as_tensor(target, op="cosine_embedding_loss")
    mags = ((a * a).sum(axis=-1) + 1e-12) * ((b * b).sum(axis=-1) + 1e-12)
    cos = (a * b).sum(axis=-1) / unary.sqrt(mags)
    zero = creation.zeros_like(cos)
    loss = binary.where(y == 1, 1.0 - cos, zero) + binary.where(
        y == -1, binary.maximum(cos - margin, 0.0), zero
    )
    return _reduce(loss, reduction, "cosine_embedding_loss")


def poisson_nll_loss(
    input,  # noqa: A002
    target,
    log_input: bool = True,
    full: bool = False,
    eps: float = 1e-8,
    reduction: str = "mean",
):
    """The Poisson negative log-likelihood, reduced (PyTorch's): ``exp(input) - target *
    input`` with ``log_input``, else ``input - target * log(input + eps)``; ``full`` adds
    Stirling's ``target log target - target + log(2 pi target) / 2`` where ``target > 1``.

    Args:
        input: the rate's log (or the rate).
        target: counts of ``input``'s shape.
        log_input: ``input`` is the log of the rate (default True).
        full: add the Stirling term.
        eps: keeps the log finite when ``log_input`` is False.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        The reduced loss.
    """
    x, t = _pair("poisson_nll_loss", input, target)
    if log_input:
        loss = unary.exp(x) - t * x
    else:
        loss = x - t * unary.log(x + eps)
    if full:
        big = t > 1
        safe = binary.where(big, t, creation.ones_like(t))
        stirling = safe * unary.log(safe) - safe + 0.5 * unary.log(2.0 * np.pi * safe)
        loss = loss + binary.where(big, stirling, creation.zeros_like(t))
    return _reduce(loss, reduction, "poisson_nll_loss")


def gaussian_nll_loss(
    input,  # noqa: A002
    target,
    var,
    full: bool = False,
    eps: float = 1e-6,
    reduction: str = "mean",
):
    """The Gaussian negative log-likelihood, reduced (PyTorch's): ``(log(var) + (input -
    target)**2 / var) / 2`` with ``var`` clamped at ``eps`` (its gradient passed as if
    unclamped, as PyTorch's), plus ``log(2 pi) / 2`` with ``full``.

    Args:
        input: the means.
        target: the samples, of ``input``'s shape.
        var: the variances: ``input``'s shape, one dim fewer (one per sample), or a last
            dim of 1.
        full: add the constant term.
        eps: the smallest variance (default 1e-6).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        The reduced loss.

    Raises:
        ValueError: for a negative variance (known at the call) or shapes that do not fit.
    """
    x, t = _pair("gaussian_nll_loss", input, target)
    v = as_tensor(var, x.dtype, op="gaussian_nll_loss")
    if v.ndim == x.ndim - 1 and tuple(v.shape) == tuple(x.shape[:-1]):
        v = v.unsqueeze(-1)  # (one variance per sample, as PyTorch's)
    if not broadcasts_onto(v.shape, x.shape):
        raise ValueError(
            f"gaussian_nll_loss: var of shape {v.shape} does not fit input of shape {x.shape}"
        )
    if readable_now(v) and (v.numpy() < 0).any():
        raise ValueError("gaussian_nll_loss: var has negative entries")
    v = v + unary.stop_gradient(binary.maximum(v, eps) - v)
    loss = 0.5 * (unary.log(v) + (x - t).square() / v)
    if full:
        loss = loss + 0.5 * float(np.log(2.0 * np.pi))
    return _reduce(loss, reduction, "gaussian_nll_loss")


def _distance(a, b, p: float, eps: float, keepdim: bool = False):
    """PyTorch's ``pairwise_distance`` (``F.pairwise_distance`` is this): the ``p``-norm of
    ``a - b + eps`` on the last axis."""
    return _linalg_norm(a - b + eps, p, -1, keepdim)


def triplet_margin_loss(
    anchor,
    positive,
    negative,
    margin: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-6,
    swap: bool = False,
    reduction: str = "mean",
):
    """``max(d(anchor, positive) - d(anchor, negative) + margin, 0)`` with ``d`` the
    ``p``-norm distance on the last axis, reduced (PyTorch's).

    Args:
        anchor: ``(N, D)`` or ``(D,)``.
        positive: of ``anchor``'s shape.
        negative: of ``anchor``'s shape.
        margin: the margin (default 1).
        p: the norm's order (default 2).
        eps: added to each difference (default 1e-6).
        swap: use ``min(d(a, n), d(p, n))`` as the negative distance.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        The reduced loss.
    """
    a = as_tensor(anchor, op="triplet_margin_loss")
    pos = as_tensor(positive, op="triplet_margin_loss")
    neg = as_tensor(negative, op="triplet_margin_loss")
    d_pos, d_neg = _distance(a, pos, p, eps), _distance(a, neg, p, eps)
    if swap:
        d_neg = binary.minimum(d_neg, _distance(pos, neg, p, eps))
    loss = binary.maximum(d_pos - d_neg + margin, 0.0)
    return _reduce(loss, reduction, "triplet_margin_loss")


def triplet_margin_with_distance_loss(
    anchor,
    positive,
    negative,
    *,
    distance_function=None,
    margin: float = 1.0,
    swap: bool = False,
    reduction: str = "mean",
):
    """PyTorch's ``triplet_margin_with_distance_loss``: ``max(d(a, p) - d(a, n) + margin,
    0)`` with any distance ``d`` (default: the pairwise 2-norm distance).

    Args:
        anchor: ``(N, D)`` or ``(D,)``.
        positive: of ``anchor``'s shape.
        negative: of ``anchor``'s shape.
        distance_function: ``d(x, y)`` per example (keyword; default ``pairwise_distance``).
        margin: the margin (keyword; default 1).
        swap: use ``min(d(a, n), d(p, n))`` as the negative distance (keyword).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (keyword).

    Returns:
        The reduced loss.

    Raises:
        ValueError: for a margin below 0.
    """
    fn = "triplet_margin_with_distance_loss"
    if margin < 0:
        raise ValueError(f"{fn}: margin must be >= 0, got {margin}")
    a, pos, neg = (as_tensor(v, op=fn) for v in (anchor, positive, negative))
    dist = distance_function or (lambda x, y: _distance(x, y, 2.0, 1e-6))
    d_pos, d_neg = dist(a, pos), dist(a, neg)
    if swap:
        d_neg = binary.minimum(d_neg, dist(pos, neg))
    loss = binary.maximum(d_pos - d_neg + margin, 0.0)
    return _reduce(loss, reduction, fn)


def multilabel_soft_margin_loss(input, target, weight=None, reduction: str = "mean"):  # noqa: A002
    """The mean over the classes (last axis) of ``-(target log sigmoid(input) + (1 -
    target) log sigmoid(-input))``, optionally weighted per class, reduced over the rest
    (PyTorch's).

    Args:
        input: scores ``(N, C)`` or ``(C,)``.
        target: 0/1 labels of ``input``'s shape.
        weight: optional per-class weights ``(C,)``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        The reduced loss.
    """
    fn = "multilabel_soft_margin_loss"
    x, t = _pair(fn, input, target)
    loss = t * _neg_log_sigmoid(x) + (1.0 - t) * _neg_log_sigmoid(-x)
    if weight is not None:
        loss = loss * _onto(fn, "weight", weight, loss)
    return _reduce(loss.mean(axis=-1), reduction, fn)


class MarginRankingLoss(_Loss):
    """:func:`margin_ranking_loss` as a module (``torch.nn.MarginRankingLoss(margin,
    reduction)``)."""

    _settings = ("margin", "reduction")

    def __init__(self, margin: float = 0.0, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        """The loss of the pairs ``(input1, input2)`` ranked by ``target``."""
        return margin_ranking_loss(input1, input2, target, self.margin, self.reduction)


class HingeEmbeddingLoss(_Loss):
    """:func:`hinge_embedding_loss` as a module (``torch.nn.HingeEmbeddingLoss(margin,
    reduction)``)."""

    _settings = ("margin", "reduction")

    def __init__(self, margin: float = 1.0, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of ``input`` against ``target`` (1 or -1)."""
        return hinge_embedding_loss(input, target, self.margin, self.reduction)


class SoftMarginLoss(_Loss):
    """:func:`soft_margin_loss` as a module (``torch.nn.SoftMarginLoss(reduction)``)."""

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of ``input`` against ``target`` (1 or -1)."""
        return soft_margin_loss(input, target, self.reduction)


class CosineEmbeddingLoss(_Loss):
    """:func:`cosine_embedding_loss` as a module (``torch.nn.CosineEmbeddingLoss(margin,
    reduction)``)."""

    _settings = ("margin", "reduction")

    def __init__(self, margin: float = 0.0, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        """The loss of the pairs ``(input1, input2)`` labelled by ``target``."""
        return cosine_embedding_loss(input1, input2, target, self.margin, self.reduction)


class PoissonNLLLoss(_Loss):
    """:func:`poisson_nll_loss` as a module (``torch.nn.PoissonNLLLoss(log_input, full,
    eps=, reduction=)``)."""

    _settings = ("log_input", "full", "eps", "reduction")

    def __init__(
        self, log_input: bool = True, full: bool = False, eps: float = 1e-8, reduction="mean"
    ):
        super().__init__(reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        """The loss of ``log_input`` (the rates' logs, or the rates when the module's
        ``log_input`` is False) against ``target``."""
        return poisson_nll_loss(
            log_input, target, self.log_input, self.full, self.eps, self.reduction
        )


class GaussianNLLLoss(_Loss):
    """:func:`gaussian_nll_loss` as a module (``torch.nn.GaussianNLLLoss(full=, eps=,
    reduction=)``)."""

    _settings = ("full", "eps", "reduction")

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):  # noqa: A002 - PyTorch name
        """The loss of the means ``input`` and variances ``var`` against ``target``."""
        return gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class TripletMarginLoss(_Loss):
    """:func:`triplet_margin_loss` as a module (``torch.nn.TripletMarginLoss(margin, p,
    eps, swap, reduction=)``)."""

    _settings = ("margin", "p", "eps", "swap", "reduction")

    def __init__(
        self,
        margin: float = 1.0,
        p: float = 2.0,
        eps: float = 1e-6,
        swap: bool = False,
        reduction: str = "mean",
    ):
        super().__init__(reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        """The loss of the triplets ``(anchor, positive, negative)``."""
        return triplet_margin_loss(
            anchor, positive, negative, self.margin, self.p, self.eps, self.swap, self.reduction
        )


class TripletMarginWithDistanceLoss(_Loss):
    """:func:`triplet_margin_with_distance_loss` as a module
    (``torch.nn.TripletMarginWithDistanceLoss(distance_function=, margin=, swap=,
    reduction=)``).

    Args:
        distance_function: ``d(x, y)`` per example (default: the 2-norm distance).
        margin: the margin (default 1).
        swap: use ``min(d(a, n), d(p, n))`` as the negative distance.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
    """

    _settings = ("margin", "swap", "reduction")

    def __init__(
        self,
        *,
        distance_function=None,
        margin: float = 1.0,
        swap: bool = False,
        reduction: str = "mean",
    ):
        super().__init__(reduction)
        self.distance_function, self.margin, self.swap = distance_function, margin, swap

    def forward(self, anchor, positive, negative):
        """The loss of the triplets ``(anchor, positive, negative)``.

        Args:
            anchor: ``(N, D)`` or ``(D,)``.
            positive: of ``anchor``'s shape.
            negative: of ``anchor``'s shape.

        Returns:
            The reduced loss.
        """
        return triplet_margin_with_distance_loss(
            anchor,
            positive,
            negative,
            distance_function=self.distance_function,
            margin=self.margin,
            swap=self.swap,
            reduction=self.reduction,
        )


class MultiLabelSoftMarginLoss(_Loss):
    """:func:`multilabel_soft_margin_loss` as a module
    (``torch.nn.MultiLabelSoftMarginLoss(weight, reduction=)``); ``weight`` a buffer."""

    def __init__(self, weight=None, reduction: str = "mean"):
        super().__init__(reduction)
        self._weight("weight", weight)

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of the scores ``input`` against the 0/1 ``target``."""
        return multilabel_soft_margin_loss(input, target, self.weight, self.reduction)


# ----------------------------------------------------------------------------- CTC
def _log_sum(*terms: Tensor) -> Tensor:
    """``log(sum(exp(terms)))`` elementwise, exact where every term is ``-inf`` (``-inf``,
    with a zero gradient, where a plain logsumexp's gradient is 0/0)."""
    top = terms[0]
    for t in terms[1:]:
        top = binary.maximum(top, t)
    shift = binary.where(unary.isfinite(top), unary.stop_gradient(top), 0.0)
    total = None
    for t in terms:
        e = unary.exp(t - shift)
        total = e if total is None else total + e
    some = total > 0
    return binary.where(some, unary.log(binary.where(some, total, 1.0)) + shift, -np.inf)


def _int_vector(fn: str, name: str, v, n: int) -> Tensor:
    t = as_tensor(v, op=fn)
    if t.dtype.is_float or t.dtype.name == "bool":
        raise ValueError(f"{fn}: {name} must hold integers, got {t.dtype.name}")
    t = t.reshape((1,)) if t.ndim == 0 else t
    if t.shape != (n,):
        raise ValueError(f"{fn}: {name} must have shape ({n},) (one per sequence), got {t.shape}")
    return t.cast(DType.int32)


def _padded_targets(fn: str, targets, lengths: Tensor, n: int) -> Tensor:
    """``(N, S)`` targets from PyTorch's two forms: padded ``(N, S)``, or all sequences
    concatenated ``(sum(target_lengths),)`` (then the lengths must be readable now)."""
    t = as_tensor(targets, op=fn)
    if t.dtype.is_float or t.dtype.name == "bool":
        raise ValueError(f"{fn}: targets must hold class indices, got {t.dtype.name}")
    if t.ndim == 2:
        if t.shape[0] != n:
            raise ValueError(f"{fn}: targets {t.shape} must have {n} rows (one per sequence)")
        return t.cast(DType.int32)
    if t.ndim != 1:
        raise ValueError(
            f"{fn}: targets must be (N, S) or concatenated (sum(lengths),), got {t.shape}"
        )
    if not readable_now(lengths):
        raise ValueError(
            f"{fn}: concatenated targets need target_lengths known at the call (here they "
            "are traced); pass targets padded to (N, S)"
        )
    sizes = np.asarray(lengths.numpy(), np.int64)
    if int(sizes.sum()) != t.shape[0]:
        raise ValueError(
            f"{fn}: concatenated targets have {t.shape[0]} entries, target_lengths sum to "
            f"{int(sizes.sum())}"
        )
    width = max(int(sizes.max(initial=0)), 1)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    at = np.minimum(starts[:, None] + np.arange(width)[None], max(t.shape[0] - 1, 0))
    if t.shape[0] == 0:
        return creation.full((n, width), 0, DType.int32)
    return t.cast(DType.int32)[at.astype(np.int32)]


def ctc_loss(
    log_probs,
    targets,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """PyTorch's ``F.ctc_loss``: the negative log-likelihood of each target sequence
    summed over all its alignments to the inputs (connectionist temporal classification),
    by the forward recursion over the targets with blanks between them (one ``nb.scan``
    over time, in log space); differentiable in ``log_probs``.

    Args:
        log_probs: log-probabilities ``(T, N, C)`` (time first, as PyTorch's), or ``(T,
            C)`` for one sequence; usually a ``log_softmax`` over ``C``.
        targets: class indices, padded ``(N, S)``, or PyTorch's concatenated form
            ``(sum(target_lengths),)``; never ``blank``.
        input_lengths: ``(N,)`` ints: each sequence's length in time (at most ``T``).
        target_lengths: ``(N,)`` ints: each target's length (at most ``S``).
        blank: the blank class (default 0).
        reduction: ``"mean"`` (default: each loss divided by its target length, then the
            mean over the batch, as PyTorch's), ``"sum"`` or ``"none"`` (``(N,)``).
        zero_infinity: make infinite losses (no alignment fits: the input too short for
            the target) and their gradients zero (default False: ``inf``).

    Returns:
        The reduced loss, or ``(N,)`` for ``"none"`` (a scalar for one sequence).

    Raises:
        ValueError: for shapes or dtypes that do not fit, a ``blank`` outside the classes,
            or a bad ``reduction``, naming them.
    """
    fn = "ctc_loss"
    lp = as_tensor(log_probs, op=fn)
    if not lp.dtype.is_float or lp.ndim not in (2, 3):
        raise ValueError(
            f"{fn}: log_probs must be float (T, N, C) or (T, C), got {lp.dtype.name} {lp.shape}"
        )
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{fn}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    unbatched = lp.ndim == 2
    if unbatched:
        lp = lp.reshape((lp.shape[0], 1, lp.shape[1]))
        targets = as_tensor(targets, op=fn).reshape((1, -1))
    steps, n, classes = lp.shape
    if (
        isinstance(blank, bool)
        or not isinstance(blank, numbers.Integral)
        or not (0 <= blank < classes)
    ):
        raise ValueError(f"{fn}: blank must be a class index in [0, {classes}), got {blank!r}")
    t_len = _int_vector(fn, "input_lengths", input_lengths, n)
    s_len = _int_vector(fn, "target_lengths", target_lengths, n)
    tg = _padded_targets(fn, targets, s_len, n)
    width = tg.shape[1]
    ext = 2 * width + 1  # the targets with a blank before, between and after them
    blanks = creation.full((n, width), blank, DType.int32)
    labels = view.concatenate(
        [view.stack([blanks, tg], -1).reshape((n, 2 * width)), blanks[:, :1]], 1
    )
    # each step's log-probability of each extended label: (T, N, L)
    emit = take_along_axis(lp, view.broadcast_to(labels[None], (steps, n, ext)), 2)
    pos = creation.arange(ext, dtype=DType.int32)[None]  # (1, L)
    # a step from label s-2 to s skips a blank: allowed between two different labels
    before = view.concatenate([labels[:, :2], labels[:, :-2]], 1)
    skip = (pos >= 2) & (labels != blank) & (labels != before)
    neg = creation.full((n, 1), -np.inf, lp.dtype)
    last = (2 * s_len)[:, None]  # the final blank's position
    alpha = binary.where((pos < 2) & (pos <= last), emit[0], -np.inf)

    def advance(alpha, xs):
        e, t = xs
        one = view.concatenate([neg, alpha[:, :-1]], 1)
        two = binary.where(skip, view.concatenate([neg, neg, alpha[:, :-2]], 1), -np.inf)
        new = e + _log_sum(alpha, one, two)
        return binary.where((t < t_len)[:, None], new, alpha), None

    if steps > 1:
        times = creation.arange(1, steps, dtype=DType.int32)
        alpha, _ = scan(advance, alpha, (emit[1:], times))
    end = take_along_axis(alpha, last, 1)[:, 0]
    before_end = take_along_axis(alpha, binary.maximum(last - 1, 0), 1)[:, 0]
    before_end = binary.where(s_len >= 1, before_end, -np.inf)
    loss = -_log_sum(end, before_end)
    if zero_infinity:
        loss = binary.where(unary.is_inf(loss), 0.0, loss)
    if reduction == "mean":
        per = loss / binary.maximum(s_len, 1).cast(loss.dtype)
        return per.mean()
    if reduction == "sum":
        return loss.sum()
    return loss[0] if unbatched else loss


class CTCLoss(_Loss):
    """:func:`ctc_loss` as a module (``torch.nn.CTCLoss(blank, reduction,
    zero_infinity)``)."""

    _settings = ("blank", "reduction", "zero_infinity")

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        """The loss of ``targets`` under ``log_probs`` (see :func:`ctc_loss`).

        Args:
            log_probs: ``(T, N, C)`` or ``(T, C)`` log-probabilities.
            targets: padded ``(N, S)`` or concatenated class indices.
            input_lengths: ``(N,)`` lengths in time.
            target_lengths: ``(N,)`` target lengths.

        Returns:
            The reduced loss (``(N,)`` for ``"none"``).
        """
        return ctc_loss(
            log_probs,
            targets,
            input_lengths,
            target_lengths,
            self.blank,
            self.reduction,
            self.zero_infinity,
        )


def multi_margin_loss(
    input,  # noqa: A002 - PyTorch name
    target,
    p: int = 1,
    margin: float = 1.0,
    weight=None,
    reduction: str = "mean",
) -> Tensor:
    """PyTorch's ``F.multi_margin_loss``: per example, ``sum_{i != y} max(0, margin - x[y]
    + x[i])^p / C`` (each term times ``weight[y]`` when given).

    Args:
        input: scores ``(N, C)`` or ``(C,)``.
        target: class indices ``(N,)`` (or a scalar).
        p: 1 or 2.
        margin: the margin (default 1).
        weight: optional per-class weights ``(C,)``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        The reduced loss, or ``(N,)`` for ``"none"``.

    Raises:
        ValueError: for ``p`` other than 1 or 2, or shapes that do not fit.
    """
    if p not in (1, 2):
        raise ValueError(f"multi_margin_loss: p must be 1 or 2, got {p!r}")
    x = as_tensor(input, op="multi_margin_loss")
    t = as_tensor(target, op="multi_margin_loss")
    if x.ndim not in (1, 2) or t.ndim != x.ndim - 1 or (x.ndim == 2 and t.shape[0] != x.shape[0]):
        raise ValueError(
            f"multi_margin_loss: input (N, C) or (C,) and target (N,) or () do not fit: "
            f"{x.shape}, {t.shape}"
        )
    classes = x.shape[-1]
    hit = _one_hot(t, classes, x.dtype)
    picked = (x * hit).sum(axis=-1, keepdims=True)  # (``reduction`` is the argument here)
    terms = binary.maximum(margin - picked + x, 0.0)
    if p == 2:
        terms = terms * terms
    if weight is not None:
        w = as_tensor(weight, op="multi_margin_loss")
        terms = terms * (w * hit).sum(axis=-1, keepdims=True)
    loss = (terms * (1.0 - hit)).sum(axis=-1) / classes
    return _reduce(loss, reduction, "multi_margin_loss")


def multilabel_margin_loss(input, target, reduction: str = "mean") -> Tensor:  # noqa: A002
    """PyTorch's ``F.multilabel_margin_loss``: per example, the target classes are
    ``target``'s entries up to its first -1; ``sum over target j, non-target i of max(0, 1 -
    (x[j] - x[i])) / C``.

    Args:
        input: scores ``(N, C)`` or ``(C,)``.
        target: class indices of ``input``'s shape, padded with -1 after the targets.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns:
        The reduced loss, or ``(N,)`` for ``"none"``.

    Raises:
        ValueError: for shapes that differ.
    """
    fn = "multilabel_margin_loss"
    x, t = as_tensor(input, op=fn), as_tensor(target, op=fn)
    if x.ndim not in (1, 2) or t.shape != x.shape:
        raise ValueError(
            f"{fn}: input (N, C) or (C,) and target of its shape, got {x.shape}, {t.shape}"
        )
    classes = x.shape[-1]
    t = t.cast(DType.int32)
    # the targets: entries before the first -1 (a running product of "not -1")
    valid = _reduction_ops.cumprod((t >= 0).cast(x.dtype), axis=-1)
    picked = binary.where(t >= 0, t, 0)
    is_target = (_one_hot(picked, classes, x.dtype) * valid.unsqueeze(-1)).sum(axis=-2)
    is_target = binary.minimum(is_target, 1.0)  # (C,) per example: 1 at the target classes
    scores = (x.unsqueeze(-2) * _one_hot(picked, classes, x.dtype)).sum(axis=-1)  # x[t_k]
    hinge = binary.maximum(1.0 - (scores.unsqueeze(-1) - x.unsqueeze(-2)), 0.0)  # [k, i]
    pair = valid.unsqueeze(-1) * (1.0 - is_target).unsqueeze(-2)
    loss = (hinge * pair).sum(axis=(-2, -1)) / classes
    return _reduce(loss, reduction, fn)


class MultiLabelMarginLoss(_Loss):
    """:func:`multilabel_margin_loss` as a module (``torch.nn.MultiLabelMarginLoss``).

    Args:
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
    """

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of the scores ``input`` for the class lists ``target``.

        Args:
            input: ``(N, C)`` or ``(C,)``.
            target: class indices padded with -1, ``input``'s shape.

        Returns:
            The reduced loss.
        """
        return multilabel_margin_loss(input, target, self.reduction)


class MultiMarginLoss(_Loss):
    """``nn.functional.multi_margin_loss`` as a module (``torch.nn.MultiMarginLoss(p,
    margin, weight, reduction)``).

    Args:
        p: 1 or 2.
        margin: the margin (default 1).
        weight: optional per-class weights ``(C,)``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
    """

    _settings = ("p", "margin", "reduction")

    def __init__(self, p: int = 1, margin: float = 1.0, weight=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.p, self.margin = p, margin
        self._weight("weight", weight)

    def forward(self, input, target):  # noqa: A002 - PyTorch name
        """The loss of the scores ``input`` for the classes ``target``.

        Args:
            input: ``(N, C)`` or ``(C,)``.
            target: ``(N,)`` or ``()``.

        Returns:
            The reduced loss.
        """
        return multi_margin_loss(input, target, self.p, self.margin, self.weight, self.reduction)


_MORE = [
    "ctc_loss",
    "triplet_margin_with_distance_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "margin_ranking_loss",
    "hinge_embedding_loss",
    "soft_margin_loss",
    "cosine_embedding_loss",
    "poisson_nll_loss",
    "gaussian_nll_loss",
    "triplet_margin_loss",
    "multilabel_soft_margin_loss",
]
_MORE_MODULES = [
    "CTCLoss",
    "TripletMarginWithDistanceLoss",
    "MultiMarginLoss",
    "MultiLabelMarginLoss",
    "MarginRankingLoss",
    "HingeEmbeddingLoss",
    "SoftMarginLoss",
    "CosineEmbeddingLoss",
    "PoissonNLLLoss",
    "GaussianNLLLoss",
    "TripletMarginLoss",
    "MultiLabelSoftMarginLoss",
]
__all__ += _MORE + _MORE_MODULES
