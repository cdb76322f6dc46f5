"""L-BFGS, as ``torch.optim.LBFGS``: a quasi-Newton method over all trainable parameters
as one flat vector, stepped with a closure that re-evaluates the loss.

One ``step(closure)`` runs up to ``max_iter`` iterations. Each builds a search direction
from the last ``history_size`` pairs of parameter and gradient changes by the two-loop
recursion (Nocedal and Wright, *Numerical Optimization*, algorithm 7.4), scaled by
``y's / y'y`` of the newest pair, then moves along it: by ``lr`` (the first iteration of
all by ``min(1, 1 / |g|_1) lr``), or by a step that satisfies the strong Wolfe conditions
(``line_search_fn="strong_wolfe"``: bracketing, then zooming in by cubic interpolation,
N&W algorithms 3.5 and 3.6, ``c1 = 1e-4``, ``c2 = 0.9``, within the step's remaining
evaluations, with PyTorch's safeguards, so the two pick the same steps). It stops
early as PyTorch's does: the gradient's largest entry at most ``tolerance_grad``, a
change in loss or a step below ``tolerance_change``, ``max_eval`` loss evaluations, or a
direction that no longer descends. The history and the counts carry over to the next
``step``.

The vector arithmetic runs in NumPy on the host, in the parameters' dtype (as PyTorch's
runs in theirs); the closure's forward and backward run wherever the model does. The
loop is data-dependent (how many evaluations, which step), so there is no
``compile_step``; the closure itself may call compiled functions.
"""

from __future__ import annotations

import math
import numbers
from collections import OrderedDict

import numpy as np

from ...core.pytree import tree_leaves
from ...core.state import enable_grad
from ...ops import creation
from ...runtime.tensor import Tensor
from ..module import Module, laid_out_like, rebind, trainable_mask
from . import Optimizer  # (this module is imported at the end of the package's)

__all__ = ["LBFGS"]

_C1, _C2 = 1e-4, 0.9


def _cubic_minimum(a, fa, ga, b, fb, gb, lo, hi) -> float:
    """The minimizer of the cubic through ``(a, fa)`` and ``(b, fb)`` with slopes ``ga``
    and ``gb``, kept within ``[lo, hi]`` (their middle where the cubic has no minimum)."""
    d1 = ga + gb - 3.0 * (fa - fb) / (a - b)
    disc = d1 * d1 - ga * gb
    if disc < 0 or not math.isfinite(disc):
        return (lo + hi) / 2.0
    d2 = math.copysign(math.sqrt(disc), b - a)
    t = b - (b - a) * (gb + d2 - d1) / (gb - ga + 2.0 * d2)
    return min(max(t, lo), hi) if math.isfinite(t) else (lo + hi) / 2.0


class _Point:
    """A step length with the loss, gradient and slope along the direction there."""

    __slots__ = ("t", "f", "g", "slope")

    def __init__(self, t, f, g, slope):
        self.t, self.f, self.g, self.slope = t, f, g, slope


def _strong_wolfe(evaluate, d, start: _Point, t: float, tolerance_change: float, budget: int):
    """A step ``t`` along ``d`` meeting the strong Wolfe conditions (or the best point seen
    within ``budget + 1`` evaluations: the step's remaining ones, as PyTorch's).
    ``evaluate(t) -> (loss, flat grad)``; ``start`` is the point at ``t = 0``. Returns
    ``(point, evaluations)``."""
    f0, slope0 = start.f, start.slope
    spread = float(np.abs(d).max())

    def at(t):
        f, g = evaluate(t)
        return _Point(t, f, g, float(np.dot(g, d)))

    def sufficient(p):  # the Armijo condition
        return p.f <= f0 + _C1 * p.t * slope0

    def curved(p):  # the strong curvature condition
        return abs(p.slope) <= -_C2 * slope0

    prev, cur, evals = start, at(t), 1
    bracket = None
    while evals <= budget:  # bracketing: grow the step until an interval holds a good one
        # (a loss above the previous trial's ends it from the third trial on, as PyTorch's)
        if not sufficient(cur) or (evals > 2 and cur.f >= prev.f):
            bracket = [prev, cur]
            break
        if curved(cur):
            return cur, evals
        if cur.slope >= 0:
            bracket = [prev, cur]
            break
        lo, hi = cur.t + 0.01 * (cur.t - prev.t), cur.t * 10.0
        nxt = _cubic_minimum(prev.t, prev.f, prev.slope, cur.t, cur.f, cur.slope, lo, hi)
        prev, cur = cur, at(nxt)
        evals += 1
    if bracket is None:
        bracket = [start, cur]
    # zoom: shrink the bracket, keeping at [0] the end with the lower loss
    if bracket[1].f < bracket[0].f:
        bracket.reverse()
    stalled = False
    while evals <= budget:
        low, high = bracket
        width = abs(high.t - low.t)
        if width * spread < tolerance_change:
            break
        a, b = min(low.t, high.t), max(low.t, high.t)
        t = _cubic_minimum(low.t, low.f, low.slope, high.t, high.f, high.slope, a, b)
        # a trial within a tenth of the interval of an end shrinks it little: allowed once,
        # then (or at an end) moved a tenth inside from the nearer end (PyTorch's safeguard)
        margin = 0.1 * width
        if min(b - t, t - a) < margin:
            if stalled or t >= b or t <= a:
                t = b - margin if abs(t - b) < abs(t - a) else a + margin
                stalled = False
            else:
                stalled = True
        else:
            stalled = False
        p = at(t)
        evals += 1
        if not sufficient(p) or p.f >= low.f:
            bracket[1] = p
        else:
            if curved(p):
                return p, evals
            if p.slope * (high.t - low.t) >= 0:
                bracket[1] = low
            bracket[0] = p
        if bracket[1].f < bracket[0].f:
            bracket.reverse()
    return bracket[0], evals


class LBFGS(Optimizer):
    """L-BFGS, as ``torch.optim.LBFGS`` (see the module's docstring): ``opt.step(closure)``
    with a closure that zeroes the gradients, computes the loss, calls ``backward()`` and
    returns the loss.

    Args:
        params: a Module, a pytree of tensors or ``model.parameters()`` (updated in place;
            all of one floating dtype).
        lr: the step length factor (default 1).
        max_iter: iterations per :meth:`step` (default 20).
        max_eval: loss evaluations per :meth:`step` (default ``max_iter * 5 // 4``).
        tolerance_grad: stop when the gradient's largest entry is at most this (default
            1e-7).
        tolerance_change: stop when the loss or the parameters change by less (default
            1e-9).
        history_size: the pairs of changes kept (default 100).
        line_search_fn: None (steps of ``lr``) or ``"strong_wolfe"``.

    Example:
        >>> opt = LBFGS(model.parameters(), line_search_fn="strong_wolfe")
        >>> def closure():
        ...     opt.zero_grad()
        ...     loss = F.mse_loss(model(x), y)
        ...     loss.backward()
        ...     return loss
        >>> loss = opt.step(closure)
    """

    _hyper_names = (
        "lr",
        "max_iter",
        "max_eval",
        "tolerance_grad",
        "tolerance_change",
        "history_size",
        "line_search_fn",
    )
    _dynamic = ("lr",)

    def __init__(
        self,
        params,
        lr=1.0,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ):
        settings = {
            "lr": lr,
            "max_iter": max_iter,
            "max_eval": max_eval,
            "tolerance_grad": tolerance_grad,
            "tolerance_change": tolerance_change,
            "history_size": history_size,
            "line_search_fn": line_search_fn,
        }
        if isinstance(params, list | tuple) and params and isinstance(params[0], dict):
            if len(params) > 1:  # (PyTorch's LBFGS refuses several groups too)
                raise ValueError(f"LBFGS: takes one parameter group, got {len(params)}")
            group = dict(params[0])
            if "params" not in group:
                raise ValueError("LBFGS: a parameter group needs a 'params' entry")
            params = group.pop("params")
            unknown = sorted(set(group) - set(settings))
            if unknown:
                raise ValueError(f"LBFGS: unknown setting(s) {unknown} in the parameter group")
            settings.update(group)
        if isinstance(params, str | bytes) or not (
            isinstance(params, Tensor) or hasattr(params, "__iter__")
        ):
            raise TypeError(
                f"LBFGS: params must be a Module, an iterable of tensors or a pytree of "
                f"tensors, got {type(params).__name__}"
            )
        if not isinstance(params, Module | list | tuple | dict | Tensor):
            params = list(params)  # model.parameters(), as in PyTorch
        self.params = params
        self.model = params if isinstance(params, Module) else None
        if not self._trained():
            raise ValueError("LBFGS: got an empty parameter list")
        if settings["max_eval"] is None:
            settings["max_eval"] = settings["max_iter"] * 5 // 4
        for name, value in settings.items():
            setattr(self, name, value)
        self._validate()
        dtypes = {p.dtype for p in self._trained()}
        if len(dtypes) > 1:
            raise ValueError(
                f"LBFGS: the parameters have dtypes {sorted(d.name for d in dtypes)}; its "
                "flat vector needs one (as PyTorch's)"
            )
        self.state: dict = {"func_evals": 0, "n_iter": 0}
        self._step_count = 0  # steps taken (a scheduler checks it, as with the others)
        self.maximize = False

    # ------------------------------------------------------------------ settings
    def _validate(self) -> None:
        def bad(name, why):
            raise ValueError(f"LBFGS: {name} {why}, got {getattr(self, name)!r}")

        if not isinstance(self.lr, numbers.Real) or not self.lr > 0:
            bad("lr", "must be a positive number")
        for name in ("max_iter", "max_eval", "history_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                bad(name, "must be an int >= 1")
        for name in ("tolerance_grad", "tolerance_change"):
            v = getattr(self, name)
            if not isinstance(v, numbers.Real) or v < 0:
                bad(name, "must be a number >= 0")
        if self.line_search_fn not in (None, "strong_wolfe"):
            bad("line_search_fn", "must be None or 'strong_wolfe' (PyTorch's one)")

    def _trained(self) -> list:
        leaves = tree_leaves(self.params)
        mask = trainable_mask(self.params)
        return [
            p for p, m in zip(leaves, mask) if m and isinstance(p, Tensor) and p.requires_grad
        ] or [p for p, m in zip(leaves, mask) if m and isinstance(p, Tensor)]

    # ------------------------------------------------------------------ the flat vector
    def _flat(self, params, grads: bool) -> np.ndarray:
        parts = []
        for p in params:
            if grads:
                g = p.grad
                v = np.zeros(p.shape, p.dtype.numpy) if g is None else g.numpy()
            else:
                v = p.numpy()
            parts.append(np.asarray(v, p.dtype.numpy).ravel())
        return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()

    def _set(self, params, flat: np.ndarray) -> None:
        at = 0
        for p in params:
            n = math.prod(p.shape)
            value = flat[at : at + n].reshape(p.shape).copy()
            at += n
            new = creation.constant(value, dtype=p.dtype, device=p.device)
            rebind(p, laid_out_like(p, new))

    def _evaluate(self, closure):
        with enable_grad():
            loss = closure()
        if loss is None:
            raise TypeError("LBFGS.step: the closure must return the loss")
        return loss, float(loss.item() if isinstance(loss, Tensor) else loss)

    # ------------------------------------------------------------------ the step
    def step(self, closure=None):
        """Run up to ``max_iter`` iterations (see the class docstring).

        Args:
            closure: a function that zeroes the gradients, computes the loss, calls
                ``backward()`` and returns the loss; called once or more per iteration.

        Returns:
            The loss the first call of ``closure`` returned (before any update), as
            PyTorch's.

        Raises:
            TypeError: without a closure, or a closure that returns nothing.
        """
        if closure is None or not callable(closure):
            raise TypeError(
                "LBFGS.step needs a closure (it evaluates the loss several times a step): "
                "opt.step(closure) with closure() zeroing the gradients, computing the "
                "loss, calling loss.backward() and returning the loss"
            )
        self._validate()
        params = self._trained()
        st = self.state
        first_loss, loss = self._evaluate(closure)
        evals = 1
        st["func_evals"] += 1
        g = self._flat(params, grads=True)
        dtype = g.dtype.type
        if np.abs(g).max() <= self.tolerance_grad:
            self._step_count += 1
            return first_loss
        d, t = st.get("d"), st.get("t")
        dirs, steps, rho = st.get("old_dirs", []), st.get("old_stps", []), st.get("ro", [])
        h_diag, prev_g, prev_loss = st.get("H_diag", 1.0), st.get("prev_flat_grad"), None
        lr = dtype(self.lr)
        it = 0
        while it < self.max_iter:
            it += 1
            st["n_iter"] += 1
            if st["n_iter"] == 1:
                d, dirs, steps, rho, h_diag = -g, [], [], [], dtype(1.0)
            else:
                y, s = g - prev_g, d * t
                ys = dtype(np.dot(y, s))
                if ys > 1e-10:  # keep the pair only where the curvature is positive
                    if len(dirs) == self.history_size:
                        dirs.pop(0), steps.pop(0), rho.pop(0)
                    dirs.append(y), steps.append(s), rho.append(dtype(1.0) / ys)
                    h_diag = ys / dtype(np.dot(y, y))
                d = self._direction(g, dirs, steps, rho, h_diag)
            prev_g, prev_loss = g.copy(), loss
            if st["n_iter"] == 1:
                t = dtype(min(1.0, 1.0 / float(np.abs(g).sum()))) * lr
            else:
                t = lr
            slope = float(np.dot(g, d))
            if slope > -self.tolerance_change:  # no longer a descent direction
                break
            x0 = self._flat(params, grads=False)
            if self.line_search_fn == "strong_wolfe":

                def evaluate(step, x0=x0, d=d):
                    self._set(params, x0 + dtype(step) * d)
                    _, f = self._evaluate(closure)
                    return f, self._flat(params, grads=True)

                start = _Point(0.0, loss, g, slope)
                budget = self.max_eval - evals
                best, ls_evals = _strong_wolfe(
                    evaluate, d, start, float(t), self.tolerance_change, budget
                )
                loss, g, t = best.f, best.g, dtype(best.t)
                self._set(params, x0 + t * d)
                done = np.abs(g).max() <= self.tolerance_grad
            else:
                self._set(params, x0 + t * d)
                ls_evals, done = 0, False
                if it != self.max_iter:  # the next iteration's loss and gradient
                    _, loss = self._evaluate(closure)
                    g = self._flat(params, grads=True)
                    done = np.abs(g).max() <= self.tolerance_grad
                    ls_evals = 1
            evals += ls_evals
            st["func_evals"] += ls_evals
            if it == self.max_iter or evals >= self.max_eval or done:
                break
            if np.abs(d * t).max() <= self.tolerance_change:
                break
            if abs(loss - prev_loss) < self.tolerance_change:
                break
        st.update(d=d, t=t, old_dirs=dirs, old_stps=steps, ro=rho, H_diag=h_diag)
        st.update(prev_flat_grad=prev_g, prev_loss=prev_loss)
        self._step_count += 1
        return first_loss

    @staticmethod
    def _direction(g, dirs, steps, rho, h_diag) -> np.ndarray:
        """``-H g`` by the two-loop recursion over the kept pairs."""
        q = -g
        alphas = [None] * len(dirs)
        for i in range(len(dirs) - 1, -1, -1):
            alphas[i] = np.dot(steps[i], q) * rho[i]
            q = q - alphas[i] * dirs[i]
        r = q * h_diag
        for i in range(len(dirs)):
            beta = np.dot(dirs[i], r) * rho[i]
            r = r + (alphas[i] - beta) * steps[i]
        return r

    # ------------------------------------------------------------------ PyTorch's rest
    def compile_step(self, loss_fn):
        """Not available: a step evaluates the loss a data-dependent number of times.

        Args:
            loss_fn: (ignored).

        Raises:
            TypeError: always, saying what to use.
        """
        raise TypeError(
            "LBFGS has no compile_step: a step evaluates the loss a data-dependent number of "
            "times; use opt.step(closure) (the closure may call compiled functions)"
        )

    def state_dict(self) -> OrderedDict:
        """The counts, the last direction and step, and the kept pairs, as flat arrays
        (``"old_dirs.3"``, ...): a run restored from them continues as it would have.

        Returns:
            An ``OrderedDict`` name -> array or number.
        """
        st = self.state
        sd = OrderedDict(func_evals=st["func_evals"], n_iter=st["n_iter"])
        for key in ("d", "t", "H_diag", "prev_flat_grad", "prev_loss"):
            if st.get(key) is not None:
                sd[key] = np.array(st[key])
        for key in ("old_dirs", "old_stps", "ro"):
            for i, v in enumerate(st.get(key, [])):
                sd[f"{key}.{i}"] = np.array(v)
        return sd

    def load_state_dict(self, state_dict) -> None:
        """Restore what :meth:`state_dict` saved.

        Args:
            state_dict: a mapping from :meth:`state_dict` (arrays or tensors).

        Raises:
            ValueError: without the counts.
        """
        sd = {k: (v.numpy() if isinstance(v, Tensor) else v) for k, v in state_dict.items()}
        if "func_evals" not in sd or "n_iter" not in sd:
            raise ValueError("LBFGS.load_state_dict: needs 'func_evals' and 'n_iter'")
        st = {key: int(np.asarray(sd[key])) for key in ("func_evals", "n_iter")}
        for key in ("d", "prev_flat_grad"):
            if key in sd:
                st[key] = np.array(sd[key])
        for key in ("t", "H_diag", "prev_loss"):
            if key in sd:
                v = np.asarray(sd[key])
                st[key] = v[()] if key != "prev_loss" else float(v)
        for key in ("old_dirs", "old_stps", "ro"):
            n = sum(1 for k in sd if k.startswith(key + "."))
            values = [np.asarray(sd[f"{key}.{i}"]) for i in range(n)]
            st[key] = [v[()] if v.ndim == 0 else np.array(v) for v in values]
        self.state = st
