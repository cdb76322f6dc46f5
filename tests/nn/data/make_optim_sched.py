"""Record PyTorch's trajectories for tests/nn/test_nn_optim_sched.py (needs torch):

    python tests/nn/data/make_optim_sched.py

Each case trains ``w`` (3, 4) and ``b`` (4,) on ``mean((x @ w + b - y) ** 2)`` for 20 steps
(one batch per step), in the order ``loss.backward(); opt.step(); sched.step()``, and records
after each step the parameters, the learning rate and the momentum (``betas[0]`` for Adam)
in force. ``CASES`` is shared with the test: each builds ``(optimizer, scheduler or None)``
from an ``optim`` namespace (``torch.optim`` or ``nabla.nn.optim``) and the parameters.
"""

import math
from pathlib import Path

import numpy as np

STEPS = 20
HERE = Path(__file__).parent


def data():
    rng = np.random.default_rng(0)
    return {
        "w0": rng.standard_normal((3, 4)).astype(np.float32),
        "b0": rng.standard_normal(4).astype(np.float32) * 0.1,
        "xs": rng.standard_normal((STEPS, 8, 3)).astype(np.float32),
        "ys": rng.standard_normal((STEPS, 8, 4)).astype(np.float32),
    }


def _sched(opt, optim, name, *args, **kw):
    return opt, getattr(optim.lr_scheduler, name)(opt, *args, **kw)


def _swalr(optim, opt, swa_lr, anneal_epochs, strategy):
    """``SWALR`` lives in ``swa_utils`` (both libraries)."""
    return opt, optim.swa_utils.SWALR(opt, swa_lr, anneal_epochs, strategy)


CASES = {
    # optimizers
    "rmsprop_default": lambda o, p: (o.RMSprop(p), None),
    "rmsprop_momentum": lambda o, p: (o.RMSprop(p, lr=1e-2, momentum=0.9), None),
    "rmsprop_centered": lambda o, p: (o.RMSprop(p, lr=1e-2, centered=True), None),
    "rmsprop_full": lambda o, p: (
        o.RMSprop(p, lr=3e-3, alpha=0.9, eps=1e-6, weight_decay=0.1, momentum=0.5, centered=True),
        None,
    ),
    "adagrad_default": lambda o, p: (o.Adagrad(p), None),
    "adamax_default": lambda o, p: (o.Adamax(p), None),
    "adamax_full": lambda o, p: (o.Adamax(p, lr=0.02, betas=(0.8, 0.99), weight_decay=0.1), None),
    "nadam_default": lambda o, p: (o.NAdam(p), None),
    "nadam_full": lambda o, p: (
        o.NAdam(p, lr=0.01, betas=(0.85, 0.995), weight_decay=0.05, momentum_decay=0.01),
        None,
    ),
    "radam_default": lambda o, p: (o.RAdam(p), None),
    "radam_full": lambda o, p: (o.RAdam(p, lr=0.01, betas=(0.8, 0.9), weight_decay=0.05), None),
    "adadelta_default": lambda o, p: (o.Adadelta(p), None),
    "adadelta_full": lambda o, p: (o.Adadelta(p, lr=0.5, rho=0.8, weight_decay=0.1), None),
    "adagrad_full": lambda o, p: (
        o.Adagrad(
            p, lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.5, eps=1e-8
        ),
        None,
    ),
    "rprop_default": lambda o, p: (o.Rprop(p), None),
    "rprop_full": lambda o, p: (o.Rprop(p, lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-4, 0.1)), None),
    "asgd_default": lambda o, p: (o.ASGD(p), None),
    "asgd_full": lambda o, p: (
        o.ASGD(p, lr=0.05, lambd=0.01, alpha=0.5, t0=5, weight_decay=0.1),
        None,
    ),
    "adafactor_default": lambda o, p: (o.Adafactor(p), None),
    "adafactor_full": lambda o, p: (
        o.Adafactor(p, lr=0.05, beta2_decay=-0.5, eps=(1e-20, 1e-2), d=1.5, weight_decay=0.1),
        None,
    ),
    # schedulers driving SGD
    "step": lambda o, p: _sched(o.SGD(p, lr=0.1), o, "StepLR", step_size=3, gamma=0.5),
    "multistep": lambda o, p: _sched(o.SGD(p, lr=0.1), o, "MultiStepLR", [2, 5, 5, 9], gamma=0.3),
    "exponential": lambda o, p: _sched(o.SGD(p, lr=0.1), o, "ExponentialLR", gamma=0.9),
    "cosine": lambda o, p: _sched(
        o.SGD(p, lr=0.1, momentum=0.9), o, "CosineAnnealingLR", T_max=7, eta_min=0.01
    ),
    "linear": lambda o, p: _sched(
        o.SGD(p, lr=0.1), o, "LinearLR", start_factor=0.25, end_factor=1.0, total_iters=6
    ),
    "linear_default": lambda o, p: _sched(o.SGD(p, lr=0.1), o, "LinearLR"),
    "lambda": lambda o, p: _sched(o.SGD(p, lr=0.1), o, "LambdaLR", lambda e: 0.95**e),
    "onecycle_sgd": lambda o, p: _sched(
        o.SGD(p, lr=0.1, momentum=0.9), o, "OneCycleLR", max_lr=0.2, total_steps=STEPS
    ),
    "onecycle_adam_linear_3phase": lambda o, p: _sched(
        o.Adam(p, lr=1e-2),
        o,
        "OneCycleLR",
        max_lr=0.05,
        epochs=4,
        steps_per_epoch=5,
        pct_start=0.25,
        anneal_strategy="linear",
        three_phase=True,
    ),
    "onecycle_rmsprop": lambda o, p: _sched(
        o.RMSprop(p, lr=1e-2, momentum=0.5), o, "OneCycleLR", max_lr=0.01, total_steps=STEPS
    ),
    "steplr_adamw": lambda o, p: _sched(o.AdamW(p, lr=0.05), o, "StepLR", step_size=4, gamma=0.7),
    "exponential_adagrad": lambda o, p: _sched(o.Adagrad(p, lr=0.2), o, "ExponentialLR", gamma=0.8),
    "sequential": lambda o, p: _sequential(
        o,
        o.SGD(p, lr=0.1),
        [
            ("LinearLR", {"start_factor": 0.1, "total_iters": 4}),
            ("CosineAnnealingLR", {"T_max": 10}),
        ],
        [5],
    ),
    "constant": lambda o, p: _sched(o.SGD(p, lr=0.1), o, "ConstantLR", factor=0.5, total_iters=4),
    "swalr_cos": lambda o, p: _swalr(o, o.SGD(p, lr=0.1, momentum=0.5), 0.01, 5, "cos"),
    "swalr_linear": lambda o, p: _swalr(o, o.Adam(p, lr=0.02), 0.002, 3, "linear"),
    "cyclic_sgd": lambda o, p: _sched(
        o.SGD(p, lr=0.1, momentum=0.9),
        o,
        "CyclicLR",
        base_lr=0.01,
        max_lr=0.1,
        step_size_up=3,
        step_size_down=5,
    ),
    "cyclic_adam_triangular2": lambda o, p: _sched(
        o.Adam(p, lr=1e-2), o, "CyclicLR", 0.001, 0.01, step_size_up=4, mode="triangular2"
    ),
    "cyclic_exp_range": lambda o, p: _sched(
        o.SGD(p, lr=0.1),
        o,
        "CyclicLR",
        0.01,
        0.1,
        2,
        mode="exp_range",
        gamma=0.9,
        cycle_momentum=False,
    ),
    "polynomial": lambda o, p: _sched(
        o.SGD(p, lr=0.1), o, "PolynomialLR", total_iters=8, power=2.0
    ),
    "multiplicative": lambda o, p: _sched(
        o.SGD(p, lr=0.1), o, "MultiplicativeLR", lambda e: 0.9 if e % 2 else 0.97
    ),
    "warm_restarts": lambda o, p: _sched(
        o.SGD(p, lr=0.1, momentum=0.9), o, "CosineAnnealingWarmRestarts", 3, T_mult=2, eta_min=0.01
    ),
    "warm_restarts_1": lambda o, p: _sched(o.Adam(p, lr=0.05), o, "CosineAnnealingWarmRestarts", 4),
    "chained": lambda o, p: _chained(
        o,
        o.SGD(p, lr=0.1),
        [("ConstantLR", {"factor": 0.5, "total_iters": 3}), ("ExponentialLR", {"gamma": 0.9})],
    ),
    "plateau": lambda o, p: _sched(
        o.SGD(p, lr=0.1), o, "ReduceLROnPlateau", factor=0.5, patience=1, cooldown=1
    ),
    "plateau_max_abs": lambda o, p: _sched(
        o.SGD(p, lr=0.1, momentum=0.5),
        o,
        "ReduceLROnPlateau",
        mode="max",
        factor=0.3,
        patience=0,
        threshold=0.05,
        threshold_mode="abs",
        min_lr=0.01,
    ),
    "sequential3": lambda o, p: _sequential(
        o,
        o.SGD(p, lr=0.1, momentum=0.5),
        [
            ("LinearLR", {"start_factor": 0.5, "total_iters": 3}),
            ("ExponentialLR", {"gamma": 0.9}),
            ("StepLR", {"step_size": 2, "gamma": 0.5}),
        ],
        [3, 8],
    ),
}


def _chained(o, opt, specs):
    scheds = [getattr(o.lr_scheduler, name)(opt, **kw) for name, kw in specs]
    return opt, o.lr_scheduler.ChainedScheduler(scheds)


def advance(sched, loss) -> None:
    """The scheduler's step after the optimizer's: ``ReduceLROnPlateau`` is given the
    step's loss as its metric (for ``"max"`` mode, its negative)."""
    if type(sched).__name__ == "ReduceLROnPlateau":
        sched.step(float(loss) if sched.mode == "min" else -float(loss))
    elif sched is not None:
        sched.step()


def _sequential(o, opt, specs, milestones):
    scheds = [getattr(o.lr_scheduler, name)(opt, **kw) for name, kw in specs]
    return opt, o.lr_scheduler.SequentialLR(opt, scheds, milestones=milestones)


def main():
    import torch

    d = data()
    out = dict(d)
    for name, make in CASES.items():
        w = torch.tensor(d["w0"], requires_grad=True)
        b = torch.tensor(d["b0"], requires_grad=True)
        opt, sched = make(torch.optim, [w, b])
        params, lrs, moms = [], [], []
        for i in range(STEPS):
            opt.zero_grad()
            x, y = torch.tensor(d["xs"][i]), torch.tensor(d["ys"][i])
            loss = ((x @ w + b - y) ** 2).mean()
            loss.backward()
            opt.step()
            advance(sched, loss.item())
            group = opt.param_groups[0]
            params.append(np.concatenate([w.detach().numpy().ravel(), b.detach().numpy()]))
            lrs.append(group["lr"])
            mom = group["betas"][0] if "betas" in group else group.get("momentum", math.nan)
            moms.append(mom)
        out[f"{name}/params"] = np.stack(params)
        out[f"{name}/lr"] = np.array(lrs, np.float64)
        out[f"{name}/momentum"] = np.array(moms, np.float64)
    np.savez_compressed(HERE / "optim_sched.npz", **out)
    print(f"wrote {len(CASES)} cases to {HERE / 'optim_sched.npz'} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
