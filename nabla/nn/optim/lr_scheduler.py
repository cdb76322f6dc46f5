"""Learning-rate schedulers as objects, with ``torch.optim.lr_scheduler``'s constructors and
semantics.

A scheduler sets its optimizer's ``lr`` (and, for :class:`OneCycleLR`, its ``momentum`` or
``betas[0]``) when it is made and at each :meth:`LRScheduler.step`; call it after the
optimizer's step, as in PyTorch::

    opt = nn.optim.SGD(model, lr=0.1, momentum=0.9)
    sched = nn.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    for x, y in data:
        ...
        opt.step()          # or step = opt.compile_step(loss_fn); step(x, y)
        sched.step()

``last_epoch`` counts the scheduler's steps (-1: start a new schedule; the constructor makes
the first step, so it is 0 afterwards). The rates follow PyTorch's recursive forms (each
step scales the optimizer's current ``lr``), so a rate changed by hand between steps is
carried on, as in PyTorch. The optimizer's learning rate must be a number (a schedule
callable already sets the rate itself).

A compiled step (:meth:`nabla.nn.optim.Optimizer.compile_step`) reads the learning rate (and a
cycled momentum) as a tensor input, so a scheduler changing it every step does not retrace.

The schedulers keep one rate: our optimizers have one parameter group.
"""

from __future__ import annotations

import math
import numbers
import warnings
from bisect import bisect_right

from . import Optimizer

__all__ = [
    "ChainedScheduler",
    "ConstantLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "CyclicLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "OneCycleLR",
    "PolynomialLR",
    "ReduceLROnPlateau",
    "SequentialLR",
    "StepLR",
]


def _real(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


def _check(name: str, problems: list) -> None:
    if problems:
        raise ValueError(f"{name}: invalid " + "; ".join(problems))


def _positive_int(label: str, value, problems: list) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        problems.append(f"{label}={value!r} (must be a positive integer)")


def _count(label: str, value, problems: list) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        problems.append(f"{label}={value!r} (must be an integer >= 0)")


def _number(label: str, value, problems: list, low=None, positive=False) -> None:
    if not _real(value):
        problems.append(f"{label}={value!r} (must be a finite number)")
    elif positive and value <= 0:
        problems.append(f"{label}={value} (must be > 0)")
    elif low is not None and value < low:
        problems.append(f"{label}={value} (must be >= {low:g})")


def _check_optimizer(name: str, optimizer) -> None:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(
            f"{name}: optimizer must be a nabla.nn.optim optimizer (SGD, Adam, AdamW, RMSprop, "
            f"Adagrad, ...), got {type(optimizer).__name__}"
        )
    if not _real(optimizer.lr):
        what = "a schedule (callable)" if callable(optimizer.lr) else repr(optimizer.lr)
        raise TypeError(
            f"{name}: the optimizer's lr is {what}; a scheduler sets the rate itself, so make "
            f"the {type(optimizer).__name__} with a number lr"
        )


def _single(name: str, label: str, value):
    """A per-group setting given for our single group: a value, or a list of one."""
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise ValueError(
                f"{name}: {label} has {len(value)} entries, but the optimizer has one parameter "
                "group (pass one value)"
            )
        return value[0]
    return value


class LRScheduler:
    """Base of the schedulers: holds the optimizer, ``base_lrs`` (the starting rates),
    ``last_epoch`` and the last rates set. A subclass defines :meth:`get_lr` (the rates at
    ``last_epoch``, from the optimizer's current ones) and, where one exists, a closed form
    ``_closed_form_lr`` (the rates at any ``last_epoch`` from ``base_lrs``, used by
    :class:`SequentialLR` at its milestones).

    Args:
        optimizer: the stateful optimizer whose ``lr`` is scheduled (it must be a number).
        last_epoch: the index of the last step: -1 starts a new schedule (the optimizer's
            ``lr`` becomes ``optimizer.initial_lr`` unless it has one); another value resumes
            one and needs ``optimizer.initial_lr``.
    """

    _is_initial = False

    def __init__(self, optimizer, last_epoch: int = -1):
        name = type(self).__name__
        _check_optimizer(name, optimizer)
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, int) or last_epoch < -1:
            raise ValueError(f"{name}: invalid last_epoch={last_epoch!r} (an integer >= -1)")
        if last_epoch == -1:
            if getattr(optimizer, "initial_lr", None) is None:
                optimizer.initial_lr = float(optimizer.lr)
        elif getattr(optimizer, "initial_lr", None) is None:
            raise ValueError(
                f"{name}: last_epoch={last_epoch} resumes a schedule, but the optimizer has no "
                "initial_lr (the rate the schedule started from); set optimizer.initial_lr, or "
                "pass last_epoch=-1 and load the scheduler's state_dict"
            )
        self.optimizer = optimizer
        self.base_lrs = [optimizer.initial_lr]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        """The constructor's step: counts restart, the rate at ``last_epoch + 1`` is set."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list:
        """The rates at ``last_epoch`` (one per parameter group: a list of one), computed from
        the optimizer's current rate. Called by :meth:`step`; use :meth:`get_last_lr` to read
        the rate in force."""
        raise NotImplementedError

    def get_last_lr(self) -> list:
        """The rates the last :meth:`step` set (a list of one float)."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance the schedule by one and set the optimizer's rate. Call it after the
        optimizer's step; calling it first skips the schedule's first value (a warning says
        so, as in PyTorch).

        Args:
            epoch: deprecated, as in PyTorch (a warning says so): jump to this ``last_epoch``
                instead of advancing by one, with the schedule's closed form where it has
                one (``StepLR(opt, 3).step(7)`` sets the rate of epoch 7).
        """
        self._check_order()
        self._step_count += 1
        if epoch is not None:
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise ValueError(f"{type(self).__name__}.step: epoch must be an int >= 0")
            warnings.warn(
                f"{type(self).__name__}.step(epoch) is deprecated (as in PyTorch): call "
                "step() once per epoch, or set last_epoch when constructing the scheduler",
                UserWarning,
                stacklevel=2,
            )
        self._update_lr(epoch)

    def _check_order(self) -> None:
        if self._step_count == 1 and self.optimizer._step_count == 0:
            warnings.warn(
                f"{type(self).__name__}.step() was called before the optimizer's step(): call "
                "optimizer.step() first, then scheduler.step(), or the schedule's first value "
                "is skipped",
                UserWarning,
                stacklevel=3,
            )

    def _update_lr(self, epoch: int | None = None) -> None:
        """Step (``epoch`` None) or jump to ``epoch`` with the closed form, then set the
        optimizer's rate."""
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        self.optimizer.lr = float(values[0])
        self._last_lr = [self.optimizer.lr]

    def _state_keys(self) -> list:
        return [k for k in self.__dict__ if k not in ("optimizer", "_is_initial")]

    def state_dict(self) -> dict:
        """The scheduler's state: every attribute but the optimizer (plain Python values:
        numbers and lists), for ``pickle`` or ``json``.

        Returns:
            A dict.
        """
        return {k: _copy(self.__dict__[k]) for k in self._state_keys()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore the state saved by :meth:`state_dict`, and set the optimizer's rate to the
        one in force when it was saved (our optimizers' ``state_dict`` holds tensors only,
        not the rate).

        Args:
            state_dict: a dict from :meth:`state_dict` of the same kind of scheduler.

        Raises:
            ValueError: for missing or unexpected keys, all listed (nothing is changed).
        """
        own = set(self._state_keys())
        problems = [f"missing key {k!r}" for k in sorted(own - set(state_dict))]
        problems += [f"unexpected key {k!r}" for k in sorted(set(state_dict) - own)]
        if problems:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: {'; '.join(problems)} (nothing loaded)"
            )
        self.__dict__.update({k: _copy(v) for k, v in state_dict.items()})
        self._restore_optimizer()

    def _restore_optimizer(self) -> None:
        self.optimizer.initial_lr = self.base_lrs[0]
        self.optimizer.lr = self._last_lr[0]


def _copy(value):
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


class StepLR(LRScheduler):
    """Multiply the rate by ``gamma`` every ``step_size`` steps (``torch.optim.lr_scheduler.
    StepLR``): ``lr = initial_lr * gamma ** (last_epoch // step_size)``.

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        step_size: the period of the decay, in steps (a positive integer, or a float
            equal to one).
        gamma: the factor applied at each period (default 0.1).
        last_epoch: the index of the last step (default -1: a new schedule).

    Example:
        >>> opt = nb.nn.optim.SGD({"w": nb.ones((2,))}, lr=1.0)
        >>> sched = StepLR(opt, step_size=2, gamma=0.5)
        >>> lrs = []
        >>> for _ in range(4):
        ...     _ = opt.step({"w": nb.ones((2,))})
        ...     lrs.append(sched.get_last_lr()[0])
        ...     sched.step()
        >>> lrs
        [1.0, 1.0, 0.5, 0.5]
    """

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        problems = []
        if isinstance(step_size, float) and step_size.is_integer():
            step_size = int(step_size)  # (PyTorch's tutorial passes 1.0)
        _positive_int("step_size", step_size, problems)
        _number("gamma", gamma, problems)
        _check("StepLR", problems)
        self.step_size, self.gamma = int(step_size), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        """The rate at ``last_epoch``: the current one times ``gamma`` at each nonzero
        multiple of ``step_size``."""
        if self.last_epoch == 0 or self.last_epoch % self.step_size:
            return [self.optimizer.lr]
        return [self.optimizer.lr * self.gamma]

    def _closed_form_lr(self) -> list:
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the rate by ``gamma`` at each milestone (``torch.optim.lr_scheduler.
    MultiStepLR``; a milestone listed twice multiplies by ``gamma ** 2``).

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        milestones: the steps (non-negative integers) at which the rate decays.
        gamma: the factor applied at each milestone (default 0.1).
        last_epoch: the index of the last step (default -1: a new schedule).
    """

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        problems = []
        try:
            milestones = list(milestones)
        except TypeError:
            problems.append(f"milestones={milestones!r} (must be a list of step indices)")
            milestones = []
        bad = [
            m
            for m in milestones
            if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 0
        ]
        if bad:
            problems.append(f"milestones={milestones!r} (must be integers >= 0; got {bad})")
        _number("gamma", gamma, problems)
        _check("MultiStepLR", problems)
        self.milestones, self.gamma = sorted(int(m) for m in milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        """The rate at ``last_epoch``: the current one times ``gamma`` to the number of
        times ``last_epoch`` is a milestone."""
        times = self.milestones.count(self.last_epoch)
        if not times:
            return [self.optimizer.lr]
        return [self.optimizer.lr * self.gamma**times]

    def _closed_form_lr(self) -> list:
        passed = bisect_right(self.milestones, self.last_epoch)
        return [b * self.gamma**passed for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the rate by ``gamma`` at every step (``torch.optim.lr_scheduler.
    ExponentialLR``): ``lr = initial_lr * gamma ** last_epoch``.

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        gamma: the factor per step.
        last_epoch: the index of the last step (default -1: a new schedule).
    """

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        problems = []
        _number("gamma", gamma, problems)
        _check("ExponentialLR", problems)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        """The rate at ``last_epoch``: the current one times ``gamma`` (unchanged at the
        constructor's step)."""
        if self._is_initial:
            return [self.optimizer.lr]
        return [self.optimizer.lr * self.gamma]

    def _closed_form_lr(self) -> list:
        return [b * self.gamma**self.last_epoch for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Half a cosine from the initial rate down to ``eta_min`` over ``T_max`` steps
    (``torch.optim.lr_scheduler.CosineAnnealingLR``, SGDR without restarts; past ``T_max``
    the rate rises again along the cosine, as PyTorch's). The rate follows PyTorch's recursive
    form, ``lr_t = eta_min + (lr_{t-1} - eta_min) * (1 + cos(pi t / T_max)) / (1 + cos(pi (t -
    1) / T_max))``, equal to ``eta_min + (initial_lr - eta_min) * (1 + cos(pi t / T_max)) / 2``
    when nothing else changes the rate.

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        T_max: the number of steps to reach ``eta_min`` (a positive integer).
        eta_min: the smallest rate (default 0).
        last_epoch: the index of the last step (default -1: a new schedule).
    """

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        problems = []
        _positive_int("T_max", T_max, problems)
        _number("eta_min", eta_min, problems)
        _check("CosineAnnealingLR", problems)
        self.T_max, self.eta_min = int(T_max), eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        """The rate at ``last_epoch`` by the recursive form (see the class)."""
        lr, t, period = self.optimizer.lr, self.last_epoch, self.T_max
        if self._is_initial:
            return [lr]
        if self._step_count == 1 and t > 0:
            return self._closed_form_lr()
        if (t - 1 - period) % (2 * period) == 0:  # the bottom: the ratio below would be 0/0
            rise = (1 - math.cos(math.pi / period)) / 2
            return [lr + (b - self.eta_min) * rise for b in self.base_lrs]
        ratio = (1 + math.cos(math.pi * t / period)) / (1 + math.cos(math.pi * (t - 1) / period))
        return [ratio * (lr - self.eta_min) + self.eta_min]

    def _closed_form_lr(self) -> list:
        c = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return [self.eta_min + (b - self.eta_min) * c for b in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the rate by a factor moving linearly from ``start_factor`` to ``end_factor``
    over ``total_iters`` steps, then keep it (``torch.optim.lr_scheduler.LinearLR``; a
    linear warmup with the defaults).

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        start_factor: the factor at step 0, in ``(0, 1]`` (default 1/3).
        end_factor: the factor from step ``total_iters`` on, in ``[0, 1]`` (default 1).
        total_iters: the number of steps of the ramp (default 5). 0 keeps
            ``start_factor`` for good, as PyTorch's does.
        last_epoch: the index of the last step (default -1: a new schedule).
    """

    def __init__(
        self,
        optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ):
        problems = []
        if not _real(start_factor) or not 0 < start_factor <= 1:
            problems.append(f"start_factor={start_factor!r} (must be in (0, 1])")
        if not _real(end_factor) or not 0 <= end_factor <= 1:
            problems.append(f"end_factor={end_factor!r} (must be in [0, 1])")
        _count("total_iters", total_iters, problems)
        _check("LinearLR", problems)
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = int(total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        """The rate at ``last_epoch``: the current one times the ratio of this step's factor
        to the last one's."""
        lr, t = self.optimizer.lr, self.last_epoch
        if t == 0:
            return [lr * self.start_factor]
        if self._is_initial or t > self.total_iters:
            return [lr]
        span = self.end_factor - self.start_factor
        return [lr * (1.0 + span / (self.total_iters * self.start_factor + (t - 1) * span))]

    def _closed_form_lr(self) -> list:
        if self.total_iters == 0:  # (as the chained form: no ramp, the start factor kept)
            return [b * self.start_factor for b in self.base_lrs]
        frac = min(self.total_iters, self.last_epoch) / self.total_iters
        factor = self.start_factor + (self.end_factor - self.start_factor) * frac
        return [b * factor for b in self.base_lrs]


class _ByFunction(LRScheduler):
    """A scheduler driven by the user's ``lr_lambda`` (:class:`LambdaLR`,
    :class:`MultiplicativeLR`): one function of the step index, kept out of
    :meth:`state_dict` (a function does not pickle reliably)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        name = type(self).__name__
        fn = _single(name, "lr_lambda", lr_lambda)
        if not callable(fn):
            raise TypeError(
                f"{name}: lr_lambda must be a function of the step index, got {type(fn).__name__}"
            )
        self.lr_lambdas = [fn]
        super().__init__(optimizer, last_epoch)

    def _state_keys(self) -> list:
        return [k for k in super()._state_keys() if k != "lr_lambdas"]

    def _factor(self) -> float:
        """``lr_lambda(last_epoch)`` as a float; anything else names the scheduler (it read
        "could not convert string to float")."""
        got = self.lr_lambdas[0](self.last_epoch)
        try:
            return float(got)
        except (TypeError, ValueError):
            raise TypeError(
                f"{type(self).__name__}: lr_lambda({self.last_epoch}) returned {got!r}; it must "
                "return a number (the factor for that step)"
            ) from None


class LambdaLR(_ByFunction):
    """The initial rate times ``lr_lambda(last_epoch)`` (``torch.optim.lr_scheduler.
    LambdaLR``).

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        lr_lambda: a function of the step index returning the factor (or a list of one such
            function). It is not part of :meth:`state_dict`.
        last_epoch: the index of the last step (default -1: a new schedule).

    Example:
        >>> opt = nb.nn.optim.Adam({"w": nb.ones((2,))}, lr=0.1)
        >>> sched = LambdaLR(opt, lambda step: min(1.0, (step + 1) / 10))  # warmup
        >>> round(opt.lr, 6)
        0.01
    """

    def get_lr(self) -> list:
        """The rate at ``last_epoch``: the initial one times ``lr_lambda(last_epoch)``."""
        return [b * self._factor() for b in self.base_lrs]


class MultiplicativeLR(_ByFunction):
    """Multiply the rate by ``lr_lambda(last_epoch)`` at every step after the first
    (``torch.optim.lr_scheduler.MultiplicativeLR``).

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        lr_lambda: a function of the step index returning the factor for that step (or a
            list of one such function). It is not part of :meth:`state_dict`.
        last_epoch: the index of the last step (default -1: a new schedule).
    """

    def get_lr(self) -> list:
        """The rate at ``last_epoch``: the current one times ``lr_lambda(last_epoch)``
        (unchanged at step 0)."""
        # unchanged at the constructor's step only (a resumed schedule too), as PyTorch's:
        # a SequentialLR handing over at its milestone steps this one to 0, a step
        if not self._is_initial:
            return [self.optimizer.lr * self._factor()]
        return [self.optimizer.lr]


class ConstantLR(LRScheduler):
    """Scale the rate by ``factor`` for the first ``total_iters`` steps, then restore it
    (``torch.optim.lr_scheduler.ConstantLR``).

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        factor: the scale during the first steps, in ``(0, 1]`` (default 1/3).
        total_iters: the number of scaled steps (default 5). 0 keeps the scale for good,
            as PyTorch's does.
        last_epoch: the index of the last step (default -1: a new schedule).
    """

    def __init__(
        self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1
    ):
        problems = []
        if not _real(factor) or not 0 < factor <= 1:
            problems.append(f"factor={factor!r} (must be in (0, 1])")
        _count("total_iters", total_iters, problems)
        _check("ConstantLR", problems)
        self.factor, self.total_iters = factor, int(total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        """The rate at ``last_epoch``: scaled by ``factor`` at step 0, scaled back at step
        ``total_iters``, else the current one."""
        lr, t = self.optimizer.lr, self.last_epoch
        if t == 0:
            return [lr * self.factor]
        if t != self.total_iters:
            return [lr]
        return [lr * (1.0 / self.factor)]

    def _closed_form_lr(self) -> list:
        # (with total_iters=0 the step that would restore the rate is step 0 itself, which
        # scales it: the chained form keeps the scale, and so does this one)
        done = 0 < self.total_iters <= self.last_epoch
        return [b * (self.factor + done * (1 - self.factor)) for b in self.base_lrs]


class PolynomialLR(LRScheduler):
    """Decay the rate to 0 over ``total_iters`` steps along ``(1 - t / total_iters) **
    power`` (``torch.optim.lr_scheduler.PolynomialLR``; linear with the default power).

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        total_iters: the number of steps of the decay (default 5).
        power: the polynomial's power (default 1).
        last_epoch: the index of the last step (default -1: a new schedule).
    """

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        problems = []
        _positive_int("total_iters", total_iters, problems)
        _number("power", power, problems)
        _check("PolynomialLR", problems)
        self.total_iters, self.power = int(total_iters), power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        """The rate at ``last_epoch``: the current one times the ratio of this step's decay
        to the last one's (kept at step 0 and past ``total_iters``)."""
        lr, t, n = self.optimizer.lr, self.last_epoch, self.total_iters
        if self._is_initial or t == 0 or t > n:  # (a resumed schedule: unchanged at first)
            return [lr]
        return [lr * ((1.0 - t / n) / (1.0 - (t - 1) / n)) ** self.power]

    def _closed_form_lr(self) -> list:
        t = min(self.total_iters, self.last_epoch)
        return [b * (1.0 - t / self.total_iters) ** self.power for b in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from the initial rate to ``eta_min`` over ``T_0`` steps, then
    restarting, each period ``T_mult`` times the last (SGDR;
    ``torch.optim.lr_scheduler.CosineAnnealingWarmRestarts``). ``step(epoch)`` also takes a
    fractional epoch (``sched.step(epoch + i / iters)`` within an epoch), as PyTorch's.

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        T_0: the steps of the first period (a positive integer).
        T_mult: the growth of each period (an integer >= 1, default 1).
        eta_min: the smallest rate (default 0).
        last_epoch: the index of the last step (default -1: a new schedule).
    """

    def __init__(
        self,
        optimizer,
        T_0: int,  # noqa: N803 - PyTorch's names
        T_mult: int = 1,  # noqa: N803
        eta_min: float = 0.0,
        last_epoch: int = -1,
    ):
        problems = []
        _positive_int("T_0", T_0, problems)
        _positive_int("T_mult", T_mult, problems)
        _number("eta_min", eta_min, problems)
        _check("CosineAnnealingWarmRestarts", problems)
        self.T_0, self.T_i, self.T_mult, self.eta_min = int(T_0), int(T_0), int(T_mult), eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def step(self, epoch=None) -> None:
        """Advance by one step, or go to ``epoch`` (a number >= 0, fractional allowed), and
        set the optimizer's rate."""
        self._check_order()
        self._step_count += 1
        self._update_lr(epoch)

    def _update_lr(self, epoch=None) -> None:
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            while self.T_cur >= self.T_i:  # (a resumed schedule may be periods ahead)
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
        else:
            if not _real(epoch) or epoch < 0:
                raise ValueError(
                    f"CosineAnnealingWarmRestarts.step: epoch must be a number >= 0, got {epoch!r}"
                )
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult**n
            else:
                self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        self.optimizer.lr = float(self.get_lr()[0])
        self._last_lr = [self.optimizer.lr]

    def get_lr(self) -> list:
        """The rate at the position ``T_cur`` in the period of ``T_i`` steps."""
        c = (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
        return [self.eta_min + (b - self.eta_min) * c for b in self.base_lrs]


class _OfSchedulers(LRScheduler):
    """A scheduler made of others (``_schedulers``, :class:`SequentialLR` and
    :class:`ChainedScheduler`): its state holds each one's."""

    _schedulers: list = []

    def _state_keys(self) -> list:
        return [k for k in super()._state_keys() if k != "_schedulers"]

    def state_dict(self) -> dict:
        """The state, with each scheduler's own ``state_dict`` under ``"_schedulers"``.

        Returns:
            A dict.
        """
        sd = super().state_dict()
        sd["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore the state saved by :meth:`state_dict` (each scheduler's too).

        Args:
            state_dict: a dict from :meth:`state_dict` of the same kind of scheduler, with as
                many schedulers.

        Raises:
            ValueError: for another number of schedulers, or missing or unexpected keys
                (all checked before anything changes).
        """
        name = type(self).__name__
        state_dict = dict(state_dict)
        subs = state_dict.pop("_schedulers", None)
        if subs is None or len(subs) != len(self._schedulers):
            got = "no" if subs is None else len(subs)
            raise ValueError(
                f"{name}.load_state_dict: {got} scheduler states for "
                f"{len(self._schedulers)} schedulers (nothing loaded)"
            )
        for s, sd in zip(self._schedulers, subs):  # check all before changing any
            own = set(s._state_keys())
            if own != set(sd):
                raise ValueError(
                    f"{name}.load_state_dict: the state of {type(s).__name__} has keys "
                    f"{sorted(sd)}, expected {sorted(own)} (nothing loaded)"
                )
        super().load_state_dict(state_dict)
        for s, sd in zip(self._schedulers, subs):
            s.__dict__.update({k: _copy(v) for k, v in sd.items()})
        for s in self._in_force():  # (their momentum, for OneCycleLR)
            s._restore_optimizer()
        self._restore_optimizer()

    def _in_force(self) -> list:
        """The schedulers whose settings are the optimizer's now."""
        return list(self._schedulers)


class ChainedScheduler(_OfSchedulers):
    """Step several schedulers together, each scaling the rate the others set
    (``torch.optim.lr_scheduler.ChainedScheduler``; e.g. a :class:`ConstantLR` warmup
    and an :class:`ExponentialLR` decay at once).

    Args:
        schedulers: the schedulers (made for one optimizer), stepped in order.
        optimizer: that optimizer (default: the first scheduler's).
    """

    def __init__(self, schedulers, optimizer=None):
        schedulers = list(schedulers)
        if not schedulers or not all(isinstance(s, LRScheduler) for s in schedulers):
            raise ValueError(
                "ChainedScheduler: schedulers must be a non-empty list of schedulers, got "
                f"{[type(s).__name__ for s in schedulers]}"
            )
        optimizer = schedulers[0].optimizer if optimizer is None else optimizer
        others = [type(s).__name__ for s in schedulers if s.optimizer is not optimizer]
        if others:
            raise ValueError(f"ChainedScheduler: {others} drive another optimizer")
        self.optimizer, self._schedulers = optimizer, schedulers
        self.base_lrs = [optimizer.initial_lr]
        self.last_epoch = max(s.last_epoch for s in schedulers)
        self._step_count = 1
        self._last_lr = [optimizer.lr]

    def get_lr(self) -> list:
        """The rate in force (the last scheduler's)."""
        return self.get_last_lr()

    def step(self) -> None:
        """Step each scheduler, in order."""
        for s in self._schedulers:
            s.step()
        self.last_epoch += 1
        self._last_lr = [self.optimizer.lr]


class ReduceLROnPlateau(LRScheduler):
    """Multiply the rate by ``factor`` when a metric has stopped improving for
    ``patience`` steps (``torch.optim.lr_scheduler.ReduceLROnPlateau``): call
    ``step(metric)`` after each evaluation (``sched.step(val_loss)``).

    Args:
        optimizer: the optimizer whose ``lr`` is scheduled.
        mode: ``"min"`` (the metric should fall, a loss) or ``"max"`` (rise, an accuracy).
        factor: the rate's scale at a reduction, in ``(0, 1)`` (default 0.1).
        patience: the steps without improvement tolerated before a reduction (default 10).
        threshold: the least change that counts as an improvement (default 1e-4).
        threshold_mode: ``"rel"`` (relative to the best, default) or ``"abs"``.
        cooldown: the steps after a reduction during which no step counts as bad.
        min_lr: the rate is never reduced below this (default 0).
        eps: a reduction smaller than this is skipped (default 1e-8).
    """

    def __init__(
        self,
        optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float = 0.0,
        eps: float = 1e-8,
    ):
        name = "ReduceLROnPlateau"
        _check_optimizer(name, optimizer)
        problems = []
        if mode not in ("min", "max"):
            problems.append(f"mode={mode!r} (must be 'min' or 'max')")
        if threshold_mode not in ("rel", "abs"):
            problems.append(f"threshold_mode={threshold_mode!r} (must be 'rel' or 'abs')")
        if not _real(factor) or not 0 <= factor < 1:
            problems.append(f"factor={factor!r} (must be in [0, 1))")
        for label, value in (("patience", patience), ("cooldown", cooldown)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                problems.append(f"{label}={value!r} (must be an integer >= 0)")
        _number("threshold", threshold, problems, low=0)
        _number("min_lr", _single(name, "min_lr", min_lr), problems, low=0)
        _number("eps", eps, problems, low=0)
        _check(name, problems)
        self.optimizer = optimizer
        self.mode, self.factor, self.patience = mode, factor, int(patience)
        self.threshold, self.threshold_mode = threshold, threshold_mode
        self.cooldown, self.min_lrs, self.eps = (
            int(cooldown),
            [_single(name, "min_lr", min_lr)],
            eps,
        )
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs, self.cooldown_counter = 0, 0
        self.last_epoch, self._step_count = 0, 1
        self.base_lrs = [float(optimizer.lr)]
        self._last_lr = [float(optimizer.lr)]

    def _is_better(self, a: float) -> bool:
        rel = self.threshold_mode == "rel"
        if self.mode == "min":
            return a < (self.best * (1 - self.threshold) if rel else self.best - self.threshold)
        return a > (self.best * (1 + self.threshold) if rel else self.best + self.threshold)

    def step(self, metrics) -> None:  # noqa: D417 - the metric is documented below
        """Record this evaluation's metric and reduce the rate after ``patience`` steps
        without improvement.

        Args:
            metrics: the metric (a number, or a 0-d tensor, read once).
        """
        current = float(metrics.item() if hasattr(metrics, "item") else metrics)
        self.last_epoch += 1
        if self._is_better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            old = float(self.optimizer.lr)
            new = max(old * self.factor, self.min_lrs[0])
            if old - new > self.eps:
                self.optimizer.lr = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [float(self.optimizer.lr)]

    def get_lr(self) -> list:
        """The rate in force."""
        return self.get_last_lr()

    def _restore_optimizer(self) -> None:
        self.optimizer.lr = self._last_lr[0]


def _momentum_settings(name, optimizer, cycle_momentum, base_momentum, max_momentum, problems):
    """The cycled momentum's bounds, checked (into ``problems``) when it is cycled: numbers,
    and an optimizer with ``momentum`` or ``betas`` to cycle."""
    base_momentum = _single(name, "base_momentum", base_momentum)
    max_momentum = _single(name, "max_momentum", max_momentum)
    if cycle_momentum:
        _number("base_momentum", base_momentum, problems, low=0.0)
        _number("max_momentum", max_momentum, problems, low=0.0)
        kinds = type(optimizer)._hyper_names
        if "momentum" not in kinds and "betas" not in kinds:
            problems.append(
                f"cycle_momentum=True with {type(optimizer).__name__}, which has no momentum "
                "or betas (pass cycle_momentum=False)"
            )
    return base_momentum, max_momentum


class _CyclesMomentum(LRScheduler):
    """What :class:`OneCycleLR` and :class:`CyclicLR` share: each step's rate and momentum
    from ``_at(step)``, the momentum (``betas[0]`` for Adam-style optimizers) set on the
    optimizer with ``cycle_momentum``, also when a state is loaded."""

    def _set_momentum(self, value: float) -> None:
        opt = self.optimizer
        if self.use_beta1:
            opt.betas = (value, *tuple(opt.betas)[1:])
        else:
            opt.momentum = value

    def get_lr(self) -> list:
        """The rate at ``last_epoch`` (and, with ``cycle_momentum``, sets the optimizer's
        momentum or ``betas[0]`` for that step)."""
        lr, momentum = self._at(self.last_epoch)
        if self.cycle_momentum:
            self._set_momentum(momentum)
        return [lr]

    def _restore_optimizer(self) -> None:
        super()._restore_optimizer()
        if self.cycle_momentum:
            self._set_momentum(self._at(self.last_epoch)[1])


class OneCycleLR(_CyclesMomentum):
    """The 1cycle policy (``torch.optim.lr_scheduler.OneCycleLR``): the rate rises from
    ``max_lr / div_factor`` to ``max_lr`` over the first ``pct_start`` of ``total_steps``, then
    falls to ``max_lr / div_factor / final_div_factor``; with ``cycle_momentum`` the momentum
    (``betas[0]`` for Adam-style optimizers) moves the opposite way between
    ``max_momentum`` and ``base_momentum``. Step it after every batch.

    Args:
        optimizer: the optimizer whose ``lr`` (and momentum) is scheduled.
        max_lr: the peak rate (or a list of one).
        total_steps: the number of steps of the cycle; or give ``epochs`` and
            ``steps_per_epoch``.
        epochs: with ``steps_per_epoch``: ``total_steps = epochs * steps_per_epoch``.
        steps_per_epoch: the steps per epoch (see ``epochs``).
        pct_start: the share of the cycle spent rising, in ``[0, 1]`` (default 0.3).
        anneal_strategy: ``"cos"`` (default) or ``"linear"`` annealing.
        cycle_momentum: also cycle the momentum (default True); needs an optimizer with
            ``momentum`` (SGD, RMSprop) or ``betas`` (Adam, AdamW).
        base_momentum: the momentum at the peak rate (default 0.85).
        max_momentum: the momentum at the start and end (default 0.95).
        div_factor: ``initial_lr = max_lr / div_factor`` (default 25).
        final_div_factor: ``min_lr = initial_lr / final_div_factor`` (default 1e4).
        three_phase: a third phase: rise, fall back to ``initial_lr`` symmetrically, then
            down to ``min_lr`` (default False).
        last_epoch: the index of the last step (default -1: a new schedule).

    Raises:
        ValueError: for bad settings, or when stepped past ``total_steps``.
    """

    def __init__(
        self,
        optimizer,
        max_lr,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float = 0.85,
        max_momentum: float = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ):
        name = "OneCycleLR"
        _check_optimizer(name, optimizer)
        problems = []
        if total_steps is not None:
            _positive_int("total_steps", total_steps, problems)
        elif epochs is not None and steps_per_epoch is not None:
            _positive_int("epochs", epochs, problems)
            _positive_int("steps_per_epoch", steps_per_epoch, problems)
        else:
            problems.append("no length (give total_steps, or epochs and steps_per_epoch)")
        max_lr = _single(name, "max_lr", max_lr)
        _number("max_lr", max_lr, problems, positive=True)
        if not _real(pct_start) or not 0 <= pct_start <= 1:
            problems.append(f"pct_start={pct_start!r} (must be in [0, 1])")
        if anneal_strategy not in ("cos", "linear"):
            problems.append(f"anneal_strategy={anneal_strategy!r} (must be 'cos' or 'linear')")
        _number("div_factor", div_factor, problems, positive=True)
        _number("final_div_factor", final_div_factor, problems, positive=True)
        base_momentum, max_momentum = _momentum_settings(
            name, optimizer, cycle_momentum, base_momentum, max_momentum, problems
        )
        _check(name, problems)
        self.total_steps = (
            int(total_steps) if total_steps is not None else int(epochs) * int(steps_per_epoch)
        )
        self.anneal_strategy, self.cycle_momentum = anneal_strategy, bool(cycle_momentum)
        self.max_lr = float(max_lr)
        self.initial_lr = self.max_lr / div_factor
        self.min_lr = self.initial_lr / final_div_factor
        self.base_momentum, self.max_momentum = base_momentum, max_momentum
        self.use_beta1 = self.cycle_momentum and "betas" in type(optimizer)._hyper_names
        n = self.total_steps
        rise_end = float(pct_start * n) - 1
        if three_phase:
            # (end step, start lr, end lr, start momentum, end momentum) of each phase
            self.phases = [
                [rise_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"],
                [
                    float(2 * pct_start * n) - 2,
                    "max_lr",
                    "initial_lr",
                    "base_momentum",
                    "max_momentum",
                ],
                [n - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"],
            ]
        else:
            self.phases = [
                [rise_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"],
                [n - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"],
            ]
        self.optimizer = optimizer
        if last_epoch == -1:
            optimizer.initial_lr = self.initial_lr
            if self.cycle_momentum:
                self._set_momentum(self.max_momentum)
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _at(self, step: int) -> tuple:
        """(rate, momentum) at ``step``."""
        if step > self.total_steps:
            raise ValueError(
                f"OneCycleLR: stepped {step} times, past total_steps={self.total_steps}; make "
                "the schedule longer (total_steps, or epochs * steps_per_epoch)"
            )
        start = 0.0
        for i, (end, lr0, lr1, m0, m1) in enumerate(self.phases):
            if step <= end or i == len(self.phases) - 1:
                pct = (step - start) / (end - start)
                lr = self._anneal(getattr(self, lr0), getattr(self, lr1), pct)
                return lr, self._anneal(getattr(self, m0), getattr(self, m1), pct)
            start = end
        raise AssertionError("unreachable")


class CyclicLR(_CyclesMomentum):
    """Cyclical learning rates (``torch.optim.lr_scheduler.CyclicLR``): the rate climbs
    from ``base_lr`` to ``max_lr`` over ``step_size_up`` steps and back over
    ``step_size_down``, the height of each cycle scaled by ``mode`` (``"triangular"``: 1;
    ``"triangular2"``: halved every cycle; ``"exp_range"``: ``gamma`` to the power of the
    step) or by ``scale_fn``; with ``cycle_momentum`` the momentum (``betas[0]`` for
    Adam-style optimizers) moves the opposite way between ``max_momentum`` and
    ``base_momentum``. Step it after every batch.

    Args:
        optimizer: the optimizer whose ``lr`` (and momentum) is scheduled.
        base_lr: the lowest rate (or a list of one).
        max_lr: the highest rate (or a list of one).
        step_size_up: steps of the rising half (default 2000).
        step_size_down: steps of the falling half (default: ``step_size_up``).
        mode: ``"triangular"`` (default), ``"triangular2"`` or ``"exp_range"``.
        gamma: ``exp_range``'s factor per step (default 1).
        scale_fn: a function of one argument, in ``[0, 1]``, instead of ``mode``.
        scale_mode: ``scale_fn``'s argument: ``"cycle"`` (the cycle number, default) or
            ``"iterations"`` (the step).
        cycle_momentum: also cycle the momentum (default True); needs an optimizer with
            ``momentum`` or ``betas``.
        base_momentum: the momentum at the peak rate (default 0.8).
        max_momentum: the momentum at the base rate (default 0.9).
        last_epoch: the index of the last step (default -1: a new schedule).

    Raises:
        ValueError: for bad settings.
    """

    def __init__(
        self,
        optimizer,
        base_lr,
        max_lr,
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_fn=None,
        scale_mode: str = "cycle",
        cycle_momentum: bool = True,
        base_momentum: float = 0.8,
        max_momentum: float = 0.9,
        last_epoch: int = -1,
    ):
        name = "CyclicLR"
        _check_optimizer(name, optimizer)
        problems = []
        base_lr, max_lr = _single(name, "base_lr", base_lr), _single(name, "max_lr", max_lr)
        _number("base_lr", base_lr, problems, low=0.0)
        _number("max_lr", max_lr, problems, low=0.0)
        _positive_int("step_size_up", step_size_up, problems)
        if step_size_down is not None:
            _positive_int("step_size_down", step_size_down, problems)
        if scale_fn is None and mode not in ("triangular", "triangular2", "exp_range"):
            problems.append(
                f"mode={mode!r} (must be 'triangular', 'triangular2' or 'exp_range', or give "
                "scale_fn)"
            )
        if scale_fn is not None and scale_mode not in ("cycle", "iterations"):
            problems.append(f"scale_mode={scale_mode!r} (must be 'cycle' or 'iterations')")
        _number("gamma", gamma, problems, low=0.0)
        base_momentum, max_momentum = _momentum_settings(
            name, optimizer, cycle_momentum, base_momentum, max_momentum, problems
        )
        _check(name, problems)
        self.base_lr, self.max_lr = float(base_lr), float(max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size, self.step_ratio = up + down, up / (up + down)
        self.mode, self.gamma = mode, gamma
        self.scale_fn_custom = scale_fn
        self.scale_mode = (
            scale_mode
            if scale_fn is not None
            else ("iterations" if mode == "exp_range" else "cycle")
        )
        self.cycle_momentum = bool(cycle_momentum)
        self.base_momentum, self.max_momentum = base_momentum, max_momentum
        self.use_beta1 = self.cycle_momentum and "betas" in type(optimizer)._hyper_names
        self.optimizer = optimizer
        if last_epoch == -1:
            optimizer.lr = self.base_lr  # (PyTorch starts the group at base_lr)
            optimizer.initial_lr = self.base_lr
            if self.cycle_momentum:
                self._set_momentum(self.max_momentum)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = [self.base_lr]

    def _state_keys(self) -> list:  # (a custom scale_fn is code: it stays with the object)
        return [k for k in super()._state_keys() if k != "scale_fn_custom"]

    def scale_fn(self, x: float) -> float:
        """The height's scale at ``x`` (the cycle number or the step, per ``scale_mode``)."""
        if self.scale_fn_custom is not None:
            return self.scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1.0 / (2.0 ** (x - 1))
        return self.gamma**x

    def _at(self, step: int) -> tuple:
        """(rate, momentum) at ``step``."""
        cycle = math.floor(1 + step / self.total_size)
        x = 1.0 + step / self.total_size - cycle
        if x <= self.step_ratio:
            factor = x / self.step_ratio
        else:
            factor = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else step)
        lr = self.base_lr + (self.max_lr - self.base_lr) * factor * scale
        momentum = self.max_momentum - (self.max_momentum - self.base_momentum) * factor * scale
        return lr, momentum


class SequentialLR(_OfSchedulers):
    """Run ``schedulers`` one after the other, switching at each milestone
    (``torch.optim.lr_scheduler.SequentialLR``; e.g. a :class:`LinearLR` warmup, then
    :class:`CosineAnnealingLR`). At a milestone the next scheduler starts from step 0 of its
    closed form, from the initial rate.

    Args:
        optimizer: the optimizer all ``schedulers`` were made for.
        schedulers: the schedulers, in order (made for ``optimizer``, before this one).
        milestones: the steps at which the next scheduler takes over (one fewer than
            ``schedulers``).
        last_epoch: the index of the last step (default -1: a new schedule).
    """

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        name = "SequentialLR"
        _check_optimizer(name, optimizer)
        schedulers, milestones = list(schedulers), list(milestones)
        problems = []
        if not schedulers:
            problems.append("schedulers=[] (give at least one)")
        for i, s in enumerate(schedulers):
            if not isinstance(s, LRScheduler):
                problems.append(f"schedulers[{i}] is a {type(s).__name__}, not a scheduler")
            elif s.optimizer is not optimizer:
                problems.append(
                    f"schedulers[{i}] ({type(s).__name__}) drives another optimizer than the one "
                    "given"
                )
        if len(milestones) != max(0, len(schedulers) - 1):
            problems.append(
                f"milestones={milestones!r} for {len(schedulers)} schedulers (give one fewer "
                "milestone than schedulers)"
            )
        _check(name, problems)
        self._schedulers, self._milestones = schedulers, milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        optimizer.lr = optimizer.initial_lr  # undo the rates the schedulers set when made
        self._undo(self)
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()
        self.base_lrs = [optimizer.initial_lr]
        self._step_count = 1

    @staticmethod
    def _undo(sched) -> None:
        """Undo the constructor's step of each (nested) scheduler."""
        if isinstance(sched, SequentialLR):
            for s in sched._schedulers:
                SequentialLR._undo(s)
        elif sched is not None:
            sched.last_epoch -= 1

    def get_lr(self) -> list:
        """The rate in force (the running scheduler's)."""
        return self.get_last_lr()

    def step(self) -> None:
        """Advance by one: the scheduler for this step steps (or, at its milestone, starts
        over from step 0), and its rate is set."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            sched._update_lr(0)
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()

    def _in_force(self) -> list:
        return [self._schedulers[bisect_right(self._milestones, self.last_epoch)]]


_LRScheduler = LRScheduler  # PyTorch's older name of the base class

# a name looked for here that lives elsewhere (as in PyTorch): said so
_ELSEWHERE = {"SWALR": "nabla.nn.optim.swa_utils.SWALR (torch.optim.swa_utils.SWALR)"}


def __getattr__(name: str):
    if name in _ELSEWHERE:
        raise AttributeError(
            f"nabla.nn.optim.lr_scheduler has no {name}: it is {_ELSEWHERE[name]}; the "
            f"schedulers here are {', '.join(n for n in __all__ if n != 'LRScheduler')}"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
