"""``nn.optim.LBFGS`` against PyTorch's recorded runs (tests/nn/data/make_lbfgs.py):
parameters after each ``step(closure)``, the loss each step returns and the evaluation
counts, with and without the strong Wolfe line search; then a model fitted by it, its
state carried over, and its errors."""

from __future__ import annotations

import numpy as np
import pytest
from _nnref import recorded

import nabla as nb

nn = nb.nn
make, REF = recorded("make_lbfgs", "lbfgs.npz")
DATA = {k: nb.constant(v) for k, v in make.data().items()}


def _run(name, steps=None, opt_out=None):
    problem, kind, n, kw = make.CASES[name]
    x = nb.constant(make.start(kind, make.data()))
    x.requires_grad = True
    opt = nn.optim.LBFGS([x], **kw)
    if opt_out is not None:
        opt_out.append(opt)

    def closure():
        opt.zero_grad()
        loss = problem(x, DATA)
        loss.backward()
        return loss

    xs, losses, evals = [], [], []
    for _ in range(n if steps is None else steps):
        losses.append(float(opt.step(closure).item()))
        xs.append(x.numpy().copy())
        evals.append(opt.state["func_evals"])
    return np.array(xs), np.array(losses, np.float32), np.array(evals)


@pytest.mark.parametrize("name", list(make.CASES))
def test_lbfgs_steps_as_pytorch(name):
    """The same steps and evaluations while the loss is above its minimum. A step that
    ends at the minimum (the losses after it agree with the last to float32 rounding:
    0.43615767 against 0.43615770 on a flat valley) meets losses that tie in float32 there,
    and the line search's comparisons of equal losses may go either way with the last bits
    of the BLAS kernel NumPy picks for the CPU (the strong Wolfe least squares: 10 evaluations
    in its first step as PyTorch's with OpenBLAS's Haswell kernel, 15 with its SkylakeX one).
    There the count stays within the step's budget and the point is as close to the
    minimum, not the same float32 point."""
    xs, losses, evals = _run(name)
    ref, ref_x = REF[f"{name}.evals"], REF[f"{name}.x"]
    np.testing.assert_allclose(losses, REF[f"{name}.loss"], rtol=1e-5, atol=1e-7)
    # step i ends where step i + 1 starts: at the minimum once that loss is the last one
    # (and below the first: a run that never moves has no minimum to tie at)
    ends_at_min = np.append(np.isclose(losses[1:], losses[-1], rtol=1e-6, atol=0), True)
    if losses[0] <= losses[-1] * (1 + 1e-6):
        ends_at_min[:] = False
    exact = int(np.argmax(ends_at_min)) if ends_at_min.any() else len(evals)
    np.testing.assert_array_equal(evals[:exact], ref[:exact])
    np.testing.assert_allclose(xs[:exact], ref_x[:exact], rtol=1e-5, atol=1e-6)
    kw = make.CASES[name][3]
    # PyTorch's budget per step, which a line search's last tries (25 at most) may pass
    budget = kw.get("max_eval", kw.get("max_iter", 20) * 5 // 4) + 25
    per_step = np.diff(np.concatenate([[evals[exact - 1] if exact else 0], evals[exact:]]))
    assert (per_step >= 1).all() and (per_step <= budget).all(), (evals, ref)
    np.testing.assert_allclose(xs[exact:], ref_x[exact:], rtol=1e-5, atol=2e-4)


def test_lbfgs_fits_a_linear_model_to_least_squares():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = (x @ np.array([[1.5], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    y += 0.01 * rng.standard_normal(y.shape).astype(np.float32)
    model = nn.Linear(3, 1, key=nb.random.key(0))
    opt = nn.optim.LBFGS(model.parameters(), line_search_fn="strong_wolfe")
    xn, yn = nb.constant(x), nb.constant(y)

    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xn), yn)
        loss.backward()
        return loss

    first = float(opt.step(closure).item())
    for _ in range(3):
        opt.step(closure)
    design = np.concatenate([x, np.ones((64, 1), np.float32)], 1)
    want, *_ = np.linalg.lstsq(design.astype(np.float64), y.astype(np.float64), rcond=None)
    np.testing.assert_allclose(model.weight.numpy()[:, 0], want[:3, 0], atol=1e-4)
    np.testing.assert_allclose(model.bias.numpy(), want[3], atol=1e-4)
    assert first > float(closure().item())


def test_lbfgs_state_dict_resumes_the_same_run():
    """Steps 1-2 and a fresh optimizer loaded with their state for steps 3-4 give the
    uninterrupted run's parameters bit for bit."""
    whole, _, _ = _run("lsq_short_wolfe")
    opts: list = []
    first, _, _ = _run("lsq_short_wolfe", steps=2, opt_out=opts)
    problem, kind, _, kw = make.CASES["lsq_short_wolfe"]
    x = nb.constant(first[-1])
    x.requires_grad = True
    opt = nn.optim.LBFGS([x], **kw)
    opt.load_state_dict(opts[0].state_dict())

    def closure():
        opt.zero_grad()
        loss = problem(x, DATA)
        loss.backward()
        return loss

    for _ in range(2):
        opt.step(closure)
    np.testing.assert_array_equal(x.numpy(), whole[-1])


def test_lbfgs_errors_say_what_to_do():
    w = nb.ones((3,), requires_grad=True)
    opt = nn.optim.LBFGS([w])
    with pytest.raises(TypeError, match=r"LBFGS.step needs a closure"):
        opt.step()
    with pytest.raises(TypeError, match="the closure must return the loss"):
        opt.step(lambda: None)
    with pytest.raises(TypeError, match="LBFGS has no compile_step"):
        opt.compile_step(lambda m: m)
    with pytest.raises(ValueError, match="line_search_fn must be None or 'strong_wolfe'"):
        nn.optim.LBFGS([w], line_search_fn="backtracking")
    with pytest.raises(ValueError, match="max_iter must be an int >= 1"):
        nn.optim.LBFGS([w], max_iter=0)
    with pytest.raises(ValueError, match=r"dtypes \['float32', 'float64'\]"):
        nn.optim.LBFGS([w, nb.ones((2,), dtype=nb.float64, requires_grad=True)])
    assert nn.optim.LBFGS([{"params": [w], "lr": 0.5}]).lr == 0.5
    assert nn.optim.LBFGS([w], max_iter=8).max_eval == 10  # PyTorch's default: 5/4


def test_lbfgs_settings_through_param_groups_and_a_scheduler():
    w = nb.ones((3,), requires_grad=True)
    opt = nn.optim.LBFGS([w])
    for group in opt.param_groups:  # PyTorch's way of changing a setting
        group["lr"], group["history_size"] = 0.25, 5
    assert (opt.lr, opt.history_size) == (0.25, 5)
    with pytest.raises(ValueError, match="max_iter must be an int >= 1"):
        opt.param_groups[0]["max_iter"] = 0
    sched = nn.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)

    def closure():
        opt.zero_grad()
        loss = nb.sum((w - 2.0) ** 2)
        loss.backward()
        return loss

    opt.step(closure)
    sched.step()
    assert opt.lr == 0.125 and sched.get_last_lr() == [0.125]
