"""Weight averaging, as ``torch.optim.swa_utils``: :class:`AveragedModel` (stochastic
weight averaging, or an exponential moving average with :func:`get_ema_multi_avg_fn`),
the :class:`SWALR` schedule, and :func:`update_bn` (BatchNorm statistics recomputed for
the averaged weights).

An ``AveragedModel`` holds a deep copy of the model and a count ``n_averaged`` (a buffer,
in its ``state_dict`` as PyTorch's). ``update_parameters(model)`` blends the model's
parameters (and, with ``use_buffers=True``, its buffers) into the copy in place; without
``use_buffers`` the copy's buffers are set to the model's. The blend of all tensors is one
compiled call, traced once (the count is a tensor input).
"""

from __future__ import annotations

import copy
import math

from ...core.dtypes import DType
from ...core.pytree import tree_leaves
from ...ops import creation
from ...ops.indexing import rebind
from ...runtime.tensor import Tensor, realize
from ...transforms.autodiff import detach
from ...transforms.compile import compile as _compile
from ..module import Module
from ..normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d
from .lr_scheduler import LRScheduler, _check, _check_optimizer, _number, _single

__all__ = [
    "AveragedModel",
    "SWALR",
    "update_bn",
    "get_ema_multi_avg_fn",
    "get_swa_multi_avg_fn",
    "get_ema_avg_fn",
    "get_swa_avg_fn",
]


def get_swa_avg_fn():
    """The running mean: ``avg + (new - avg) / (n + 1)``, ``n`` the count so far.

    Returns:
        ``fn(averaged, current, num_averaged) -> new averaged``.
    """

    def swa(averaged, current, num_averaged):
        return averaged + (current - averaged) / (num_averaged + 1)

    return swa


def get_ema_avg_fn(decay: float = 0.999):
    """The exponential moving average: ``decay avg + (1 - decay) new``.

    Args:
        decay: the weight of the average so far (default 0.999).

    Returns:
        ``fn(averaged, current, num_averaged) -> new averaged``.

    Raises:
        ValueError: for ``decay`` outside ``[0, 1]``.
    """
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"get_ema_avg_fn: decay must be in [0, 1], got {decay!r}")

    def ema(averaged, current, num_averaged):
        return averaged + (current - averaged) * (1.0 - decay)  # (PyTorch's lerp)

    return ema


def get_swa_multi_avg_fn():
    """:func:`get_swa_avg_fn` over lists of tensors.

    Returns:
        ``fn(averaged list, current list, num_averaged) -> new averaged list``.
    """
    one = get_swa_avg_fn()
    return lambda avg, cur, n: [one(a, c, n) for a, c in zip(avg, cur, strict=True)]


def get_ema_multi_avg_fn(decay: float = 0.999):
    """:func:`get_ema_avg_fn` over lists of tensors.

    Args:
        decay: the weight of the average so far (default 0.999).

    Returns:
        ``fn(averaged list, current list, num_averaged) -> new averaged list``.
    """
    one = get_ema_avg_fn(decay)
    return lambda avg, cur, n: [one(a, c, n) for a, c in zip(avg, cur, strict=True)]


class AveragedModel(Module):
    """PyTorch's ``AveragedModel``: a copy of ``model`` whose parameters average the
    model's over the calls of :meth:`update_parameters` (see the module's docstring).

    Args:
        model: the model to average.
        device: PyTorch's placement argument: accepted (the copy stays where the model is).
        avg_fn: ``fn(averaged, current, num_averaged)`` per tensor (default: the running
            mean).
        multi_avg_fn: the same over lists of tensors (takes precedence).
        use_buffers: average the buffers too (default False: copy them).
    """

    def __init__(
        self, model: Module, device=None, avg_fn=None, multi_avg_fn=None, use_buffers: bool = False
    ):
        super().__init__()
        del device
        if not isinstance(model, Module):
            raise TypeError(f"AveragedModel: expects a Module, got {type(model).__name__}")
        self.module = copy.deepcopy(model)
        self.register_buffer("n_averaged", creation.constant(0, dtype=DType.int64))
        object.__setattr__(self, "_avg", (avg_fn, multi_avg_fn))
        self.use_buffers = bool(use_buffers)
        object.__setattr__(self, "_blend", None)

    def forward(self, *args, **kwargs):
        """The averaged model's output.

        Args:
            *args: the model's positional arguments.
            **kwargs: its keyword arguments.

        Returns:
            What the model returns.
        """
        return self.module(*args, **kwargs)

    def _tensors(self, model: Module, buffers: bool) -> list:
        out = [p for p in model.parameters()]
        if buffers:
            out += [b for b in model.buffers() if b.dtype.is_float]
        return out

    def update_parameters(self, model: Module) -> None:
        """Blend ``model``'s current parameters into the average (the first call copies
        them), in place; the count goes up by one.

        Args:
            model: a model of the same structure as the one averaged.

        Raises:
            ValueError: for a model with other tensors.
        """
        mine = self._tensors(self.module, self.use_buffers)
        theirs = self._tensors(model, self.use_buffers)
        if len(mine) != len(theirs) or any(a.shape != b.shape for a, b in zip(mine, theirs)):
            raise ValueError(
                "AveragedModel.update_parameters: the model's parameters do not match the "
                f"averaged copy's ({len(theirs)} tensors against {len(mine)}, or other shapes)"
            )
        n = int(self.n_averaged.item())
        if n == 0:
            new = [detach(t).cast(a.dtype) + 0 for a, t in zip(mine, theirs)]
        else:
            if self._blend is None:
                object.__setattr__(self, "_blend", _compile(self._blend_fn))
            count = creation.constant(float(n), dtype=DType.float32)
            new = self._blend([detach(a) for a in mine], [detach(t) for t in theirs], count)
        realize(*new)
        for a, v in zip(mine, new):
            rebind(a, detach(v))
        if not self.use_buffers:  # the copy's buffers follow the model's
            for a, b in zip(self.module.buffers(), model.buffers()):
                rebind(a, detach(b) + 0)  # (a new tensor: the copy never shares one)
        rebind(self.n_averaged, creation.constant(n + 1, dtype=DType.int64))

    def _blend_fn(self, averaged: list, current: list, count: Tensor) -> list:
        avg_fn, multi_avg_fn = self._avg
        if multi_avg_fn is not None:
            return list(multi_avg_fn(averaged, current, count))
        one = avg_fn or get_swa_avg_fn()
        return [one(a, c, count.cast(a.dtype)) for a, c in zip(averaged, current)]


class SWALR(LRScheduler):
    """PyTorch's ``SWALR``: anneal the rate from where it is to ``swa_lr`` over
    ``anneal_epochs`` steps (``"cos"`` or ``"linear"``), then hold it. Step it once per
    epoch of the averaging phase.

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        swa_lr: the rate annealed to (or a list of one).
        anneal_epochs: the steps of the annealing (default 10; 0 jumps at once).
        anneal_strategy: ``"cos"`` (default) or ``"linear"``.
        last_epoch: the index of the last step (default -1: a new schedule).

    Raises:
        ValueError: for bad settings.
    """

    def __init__(
        self,
        optimizer,
        swa_lr,
        anneal_epochs: int = 10,
        anneal_strategy: str = "cos",
        last_epoch: int = -1,
    ):
        name = "SWALR"
        _check_optimizer(name, optimizer)
        problems = []
        swa_lr = _single(name, "swa_lr", swa_lr)
        _number("swa_lr", swa_lr, problems, low=0.0)
        if (
            isinstance(anneal_epochs, bool)
            or not isinstance(anneal_epochs, int)
            or anneal_epochs < 0
        ):
            problems.append(f"anneal_epochs={anneal_epochs!r} (must be an int >= 0)")
        if anneal_strategy not in ("cos", "linear"):
            problems.append(f"anneal_strategy={anneal_strategy!r} (must be 'cos' or 'linear')")
        _check(name, problems)
        self.swa_lr, self.anneal_epochs = float(swa_lr), int(anneal_epochs)
        self.anneal_strategy = anneal_strategy
        super().__init__(optimizer, last_epoch)

    def _alpha(self, t: float) -> float:
        if self.anneal_strategy == "cos":
            return (1 - math.cos(math.pi * t)) / 2
        return t

    def get_lr(self) -> list:
        """The rate at this step, from the rate in force (PyTorch's recursive form)."""
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self._alpha(max(0.0, min(1.0, (step - 1) / max(1, self.anneal_epochs))))
        lr = float(self.optimizer.lr)
        if prev_alpha == 1:
            start = self.swa_lr
        else:
            start = (lr - prev_alpha * self.swa_lr) / (1 - prev_alpha)
        alpha = self._alpha(max(0.0, min(1.0, step / max(1, self.anneal_epochs))))
        return [self.swa_lr * alpha + start * (1 - alpha)]


def update_bn(loader, model: Module, device=None) -> None:
    """PyTorch's ``update_bn``: recompute every BatchNorm's running statistics by one pass
    of ``model`` over ``loader`` in training mode, as cumulative averages (momentum None
    meanwhile); the modes and momenta are restored after.

    Args:
        loader: an iterable of batches (a tensor, or a sequence whose first item is the
            input).
        model: the model (an :class:`AveragedModel` too).
        device: PyTorch's placement argument: accepted.
    """
    del device
    norms = [m for m in model.modules() if isinstance(m, BatchNorm1d | BatchNorm2d | BatchNorm3d)]
    if not norms:
        return
    momenta = {}
    for m in norms:
        m.reset_running_stats()
        momenta[m] = m.momentum
        m.momentum = None
    was_training = model.training
    model.train()
    for batch in loader:
        x = batch[0] if isinstance(batch, list | tuple) else batch
        out = model(x)
        realize(*[t for t in tree_leaves(out) if isinstance(t, Tensor)])
    for m in norms:
        m.momentum = momenta[m]
    model.train(was_training)
