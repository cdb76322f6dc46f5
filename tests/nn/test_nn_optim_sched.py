"""RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta, Rprop, ASGD, Adafactor, the learning-rate
schedulers (SWALR too) and clip_grad_value_ against PyTorch, step by step over 20 steps:
the recorded trajectories of tests/nn/data/make_optim_sched.py (the parameters, the
learning rate and the momentum after each step), eager and through ``opt.compile_step``
(which must trace once however the scheduler changes the rate)."""

import math
import pickle

import numpy as np
import pytest
from _nnref import recorded

import nabla as nb

nn = nb.nn
optim = nn.optim
sched_mod = optim.lr_scheduler

make, REF = recorded("make_optim_sched", "optim_sched.npz")
STEPS = make.STEPS
NAMES = list(make.CASES)
# the cases run through compile_step as well: every optimizer, and schedulers that change the
# rate (and the momentum) at every step
COMPILED = [
    "rmsprop_full",
    "rmsprop_momentum",
    "adagrad_full",
    "adamax_full",
    "nadam_full",
    "radam_full",
    "adadelta_full",
    "rprop_full",
    "asgd_full",
    "adafactor_full",
    "cosine",
    "cyclic_sgd",
    "cyclic_adam_triangular2",
    "swalr_cos",
    "onecycle_sgd",
    "onecycle_adam_linear_3phase",
    "onecycle_rmsprop",
    "steplr_adamw",
    "exponential_adagrad",
    "sequential3",
    "warm_restarts",
    "plateau_max_abs",
    "chained",
]


def _loss(params, x, y):
    w, b = params
    return ((x @ w + b - y) ** 2).mean()


def _fresh(name):
    params = [nb.constant(REF["w0"].copy()), nb.constant(REF["b0"].copy())]
    for p in params:
        p.requires_grad_(True)
    opt, sched = make.CASES[name](optim, params)
    return params, opt, sched


def _momentum(opt):
    if hasattr(opt, "betas"):
        return opt.betas[0]
    return getattr(opt, "momentum", math.nan)


def _flat(params):
    return np.concatenate([params[0].numpy().ravel(), params[1].numpy()])


def _check_step(name, i, params, opt):
    np.testing.assert_allclose(
        _flat(params), REF[f"{name}/params"][i], rtol=2e-5, atol=2e-6, err_msg=f"{name} step {i}"
    )
    np.testing.assert_allclose(opt.lr, REF[f"{name}/lr"][i], rtol=1e-12, err_msg=name)
    np.testing.assert_allclose(_momentum(opt), REF[f"{name}/momentum"][i], rtol=1e-12, err_msg=name)


def _batch(i):
    return nb.constant(REF["xs"][i]), nb.constant(REF["ys"][i])


@pytest.mark.parametrize("name", NAMES)
def test_matches_pytorch_step_by_step_eager(name):
    params, opt, sched = _fresh(name)
    for i in range(STEPS):
        opt.zero_grad()
        loss = _loss(params, *_batch(i))
        loss.backward()
        opt.step()
        make.advance(sched, loss.item())
        if sched is not None:
            assert sched.get_last_lr() == [opt.lr]
        _check_step(name, i, params, opt)


@pytest.mark.parametrize("name", COMPILED)
def test_matches_pytorch_through_compile_step_without_retracing(name):
    """The rate (and a cycled momentum) reach the compiled step as tensor inputs: 20 steps
    with a new rate each step are one trace."""
    params, opt, sched = _fresh(name)
    step = opt.compile_step(_loss)
    for i in range(STEPS):
        loss = step(*_batch(i))
        make.advance(sched, loss.item())
        _check_step(name, i, params, opt)
    assert step.stats.misses == 1, step.stats
    assert step.stats.hits == STEPS - 1


def test_compile_step_sees_a_hand_changed_lr_and_retraces_only_for_structure():
    """A new lr (set by hand) is an input, not a new trace; turning momentum on changes
    what the step computes: a trace with momentum, then one more when the state has gained
    its buffers (a new state structure), and none after that."""
    params = {"w": nb.constant(np.ones(3, np.float32))}
    opt = optim.SGD(params, lr=0.1)
    step = opt.compile_step(lambda p: (p["w"] ** 2).sum() / 2)  # grad = w
    step()
    np.testing.assert_allclose(params["w"].numpy(), 0.9, rtol=1e-6)
    opt.lr = 0.5
    step()
    np.testing.assert_allclose(params["w"].numpy(), 0.45, rtol=1e-6)
    assert step.stats.misses == 1
    opt.momentum = 0.9
    for _ in range(4):
        step()
    assert step.stats.misses == 3
    assert len(opt.state["momentum"]) == 1


def test_compile_step_reuses_a_settings_input_only_while_its_value_is_unchanged():
    """The lr tensor passed to the compiled step is made once per value: the same object
    while the value stays, a new one holding the new value when it changes (to 0.0 as well),
    and never shared between optimizers."""
    params = {"w": nb.constant(np.ones(3, np.float32))}
    opt = optim.Adam(params, lr=0.1, betas=(0.9, 0.999))
    first = opt._settings(traced=True)
    again = opt._settings(traced=True)
    assert again["lr"] is first["lr"] and again["betas"][0] is first["betas"][0]
    opt.lr = 0.25
    new = opt._settings(traced=True)
    assert new["lr"] is not first["lr"] and float(new["lr"].numpy()) == 0.25
    assert new["betas"][0] is first["betas"][0]
    opt.lr = 0
    assert float(opt._settings(traced=True)["lr"].numpy()) == 0.0
    other = optim.Adam(params, lr=0)
    assert other._settings(traced=True)["lr"] is not opt._settings(traced=True)["lr"]
    opt.betas = (0.8, 0.999)
    assert float(opt._settings(traced=True)["betas"][0].numpy()) == np.float32(0.8)
    opt.lr = nb.constant(np.float32(0.5))  # a tensor goes as it is
    assert opt._settings(traced=True)["lr"] is opt.lr


@pytest.mark.parametrize(
    "name",
    ["sequential3", "onecycle_adam_linear_3phase", "lambda", "warm_restarts", "chained", "plateau"],
)
def test_scheduler_state_dict_resumes_the_schedule(name, tmp_path):
    """Stop after 8 steps, save the optimizer (nn.save) and the scheduler (pickled, as
    torch.save would), restore both into fresh ones, and finish: the same trajectory as
    PyTorch's."""
    params, opt, sched = _fresh(name)
    for i in range(8):
        opt.zero_grad()
        loss = _loss(params, *_batch(i))
        loss.backward()
        opt.step()
        make.advance(sched, loss.item())
    nn.save(opt.state_dict(), tmp_path / "opt.safetensors")
    saved = pickle.dumps(sched.state_dict())
    params2 = [nb.constant(p.numpy().copy()) for p in params]
    for p in params2:
        p.requires_grad_(True)
    opt2, sched2 = make.CASES[name](optim, params2)
    opt2.load_state_dict(nn.load(tmp_path / "opt.safetensors"))
    sched2.load_state_dict(pickle.loads(saved))
    assert opt2.lr == REF[f"{name}/lr"][7]
    assert _momentum(opt2) == pytest.approx(REF[f"{name}/momentum"][7], nan_ok=True)
    for i in range(8, STEPS):
        opt2.zero_grad()
        loss = _loss(params2, *_batch(i))
        loss.backward()
        opt2.step()
        make.advance(sched2, loss.item())
        _check_step(name, i, params2, opt2)


def test_scheduler_before_optimizer_step_warns():
    opt = optim.SGD({"w": nb.ones((2,))}, lr=0.1)
    sched = sched_mod.StepLR(opt, step_size=1)
    with pytest.warns(UserWarning, match=r"StepLR.step\(\) was called before the optimizer"):
        sched.step()


def test_a_ramp_of_zero_steps_keeps_its_start_factor_as_pytorch():
    # PyTorch 2.13: LinearLR(start_factor=0.25, total_iters=0) gives 0.25 at every step,
    # ConstantLR(factor=0.5, total_iters=0) 0.5 (the step that would end the ramp or restore
    # the rate is step 0, which starts it); the closed form (step(epoch)) agrees here
    for build, factor in (
        (lambda o: sched_mod.LinearLR(o, start_factor=0.25, total_iters=0), 0.25),
        (lambda o: sched_mod.ConstantLR(o, factor=0.5, total_iters=0), 0.5),
    ):
        opt = optim.SGD({"w": nb.ones((2,))}, lr=1.0)
        sched = build(opt)
        got = [opt.lr]
        for _ in range(3):
            opt.step({"w": nb.ones((2,))})
            sched.step()
            got.append(opt.lr)
        assert got == [factor] * 4
        with pytest.warns(UserWarning, match="deprecated"):
            sched.step(7)
        assert opt.lr == factor
    with pytest.raises(ValueError, match=r"LinearLR: invalid total_iters=-1 \(must be an int"):
        sched_mod.LinearLR(optim.SGD({"w": nb.ones((2,))}, lr=1.0), total_iters=-1)


def test_last_epoch_resumes_from_initial_lr():
    """last_epoch other than -1 needs optimizer.initial_lr (PyTorch's KeyError, as a clear
    ValueError); with it, the closed-form position continues."""
    opt = optim.SGD({"w": nb.ones((2,))}, lr=0.1)
    with pytest.raises(ValueError, match="StepLR: last_epoch=4 resumes a schedule"):
        sched_mod.StepLR(opt, step_size=2, last_epoch=4)
    opt.initial_lr = 0.1
    sched = sched_mod.StepLR(opt, step_size=2, gamma=0.5, last_epoch=4)
    assert sched.last_epoch == 5 and opt.lr == 0.1  # the constructor's step keeps the rate
    opt.step({"w": nb.ones((2,))})
    sched.step()
    assert sched.last_epoch == 6 and opt.lr == 0.05


def test_resumed_schedules_keep_the_rate_at_construction_and_find_their_place():
    """A schedule made with last_epoch >= 0 keeps the rate at its constructor's step (as
    ExponentialLR already did; MultiplicativeLR and PolynomialLR applied one factor too
    many), and warm restarts resumed periods ahead take the cycle's place (it had taken off
    one period only: 18, 16, 14, ... for last_epoch=20, T_0=3)."""

    def fresh():
        opt = optim.SGD({"w": nb.ones((2,))}, lr=0.1)
        opt.initial_lr = 0.1
        return opt

    for make in (
        lambda o: sched_mod.MultiplicativeLR(o, lambda e: 0.9, last_epoch=5),
        lambda o: sched_mod.PolynomialLR(o, total_iters=10, power=2.0, last_epoch=5),
    ):
        opt = fresh()
        make(opt)
        assert opt.lr == 0.1
    for last, want in ((5, [0.1, 0.0775, 0.0325, 0.1]), (20, [0.1, 0.0775, 0.0325, 0.1])):
        opt = fresh()
        sched = sched_mod.CosineAnnealingWarmRestarts(opt, T_0=3, eta_min=0.01, last_epoch=last)
        got = [opt.lr]
        for _ in range(3):
            opt.step({"w": nb.ones((2,))})
            sched.step()
            got.append(opt.lr)
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda o: sched_mod.StepLR(o, step_size=0), r"StepLR: invalid step_size=0"),
        (lambda o: sched_mod.StepLR(o, 2, gamma=float("nan")), r"StepLR: invalid gamma=nan"),
        (lambda o: sched_mod.MultiStepLR(o, [1, -2]), r"MultiStepLR: invalid milestones"),
        (lambda o: sched_mod.ExponentialLR(o, gamma="0.9"), r"ExponentialLR: invalid gamma"),
        (lambda o: sched_mod.CosineAnnealingLR(o, T_max=0), r"invalid T_max=0"),
        (lambda o: sched_mod.LinearLR(o, start_factor=0.0), r"LinearLR: invalid start_factor"),
        (lambda o: sched_mod.LinearLR(o, end_factor=1.5), r"LinearLR: invalid end_factor=1.5"),
        (lambda o: sched_mod.OneCycleLR(o, max_lr=0.1), r"OneCycleLR: invalid no length"),
        (
            lambda o: sched_mod.OneCycleLR(o, 0.1, total_steps=10, pct_start=1.5),
            r"pct_start=1.5",
        ),
        (
            lambda o: sched_mod.OneCycleLR(o, 0.1, total_steps=10, anneal_strategy="exp"),
            r"anneal_strategy='exp'",
        ),
        (
            lambda o: sched_mod.SequentialLR(o, [sched_mod.StepLR(o, 2)], milestones=[3]),
            r"SequentialLR: invalid milestones=\[3\] for 1 schedulers",
        ),
        (lambda o: sched_mod.StepLR(o, 2, last_epoch=-3), r"StepLR: invalid last_epoch=-3"),
        (lambda o: sched_mod.ConstantLR(o, factor=1.5), r"ConstantLR: invalid factor=1.5"),
        (lambda o: sched_mod.PolynomialLR(o, total_iters=0), r"PolynomialLR: invalid total_iters"),
        (
            lambda o: sched_mod.CosineAnnealingWarmRestarts(o, 2, T_mult=0),
            r"CosineAnnealingWarmRestarts: invalid T_mult=0",
        ),
        (lambda o: sched_mod.ReduceLROnPlateau(o, mode="best"), r"invalid mode='best'"),
        (lambda o: sched_mod.ReduceLROnPlateau(o, factor=1.0), r"invalid factor=1.0"),
        (lambda o: sched_mod.ChainedScheduler([]), r"ChainedScheduler: schedulers must be"),
    ],
)
def test_bad_scheduler_settings_are_clear_errors(build, match):
    opt = optim.SGD({"w": nb.ones((2,))}, lr=0.1)
    with pytest.raises(ValueError, match=match):
        build(opt)


def test_scheduler_needs_a_number_lr_and_an_optimizer():
    with pytest.raises(TypeError, match="StepLR: the optimizer's lr is a schedule"):
        sched_mod.StepLR(optim.SGD({"w": nb.ones((2,))}, lr=lambda s: 0.1), 2)
    with pytest.raises(TypeError, match="StepLR: optimizer must be a nabla.nn.optim optimizer"):
        sched_mod.StepLR(object(), 2)
    adagrad = optim.Adagrad({"w": nb.ones((2,))})
    with pytest.raises(ValueError, match="cycle_momentum=True with Adagrad"):
        sched_mod.OneCycleLR(adagrad, 0.1, total_steps=10)
    other = optim.SGD({"w": nb.ones((2,))}, lr=0.1)
    with pytest.raises(ValueError, match="drives another optimizer"):
        sched_mod.SequentialLR(adagrad, [sched_mod.StepLR(other, 2)], milestones=[])


def test_onecycle_past_total_steps_is_an_error():
    opt = optim.SGD({"w": nb.ones((2,))}, lr=0.1, momentum=0.9)
    sched = sched_mod.OneCycleLR(opt, 0.1, total_steps=3)
    for _ in range(3):
        opt.step({"w": nb.ones((2,))})
        sched.step()
    with pytest.raises(ValueError, match="OneCycleLR: stepped 4 times, past total_steps=3"):
        sched.step()


def test_load_state_dict_checks_keys_first():
    opt = optim.SGD({"w": nb.ones((2,))}, lr=0.1)
    sched = sched_mod.StepLR(opt, 2)
    sd = sched.state_dict()
    with pytest.raises(ValueError, match=r"missing key 'gamma'; unexpected key 'nope'"):
        sched.load_state_dict({**{k: v for k, v in sd.items() if k != "gamma"}, "nope": 1})
    assert sched.state_dict() == sd


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda p: optim.RMSprop(p, alpha=-0.1), r"RMSprop: invalid alpha=-0.1"),
        (lambda p: optim.RMSprop(p, lr=float("inf")), r"RMSprop: invalid lr=inf"),
        (lambda p: optim.RMSprop(p, momentum=-1), r"RMSprop: invalid momentum=-1"),
        (lambda p: optim.Adagrad(p, lr_decay=-1.0), r"Adagrad: invalid lr_decay=-1.0"),
        (
            lambda p: optim.Adagrad(p, initial_accumulator_value=float("nan")),
            r"Adagrad: invalid initial_accumulator_value=nan",
        ),
        (lambda p: optim.Adagrad(p, eps=-1e-10), r"Adagrad: invalid eps=-1e-10"),
        (
            lambda p: optim.rmsprop_update(p, p, None, weight_decay=-1.0),
            r"rmsprop_update: invalid weight_decay=-1.0",
        ),
        (lambda p: optim.adagrad_update(p, p, None, lr="a"), r"adagrad_update: invalid lr='a'"),
    ],
)
def test_bad_optimizer_settings_are_clear_errors(build, match):
    with pytest.raises(ValueError, match=match):
        build({"w": nb.ones((2,))})


def test_functional_forms_match_the_classes_and_compile():
    """rmsprop_update / adagrad_update inside nb.compile, with a schedule lr, against the
    stateful classes (whose results match PyTorch above)."""
    name_cls = [
        ("rmsprop", optim.RMSprop, {"momentum": 0.9, "centered": True, "weight_decay": 0.1}),
        ("adagrad", optim.Adagrad, {"lr_decay": 0.1, "initial_accumulator_value": 0.2}),
    ]
    for name, cls, kw in name_cls:
        init = getattr(optim, f"{name}_init")
        update = getattr(optim, f"{name}_update")
        params = [nb.constant(REF["w0"]), nb.constant(REF["b0"])]
        state = (
            init(params, *[kw[k] for k in kw if k in ("momentum", "centered")])
            if (name == "rmsprop")
            else init(params, kw["initial_accumulator_value"])
        )

        @nb.compile
        def train(params, state, x, y, update=update, kw=kw):
            grads = nb.grad(_loss)(params, x, y)
            return update(params, grads, state, lr=0.01, **kw)

        ref = [nb.constant(REF["w0"]), nb.constant(REF["b0"])]
        opt = cls(ref, lr=0.01, **kw)
        for i in range(5):
            params, state = train(params, state, *_batch(i))
            opt.step(nb.grad(_loss)(ref, *_batch(i)))
            np.testing.assert_allclose(_flat(params), _flat(ref), rtol=1e-6, atol=1e-7)
        assert train.stats.misses == 1
        assert set(opt.state_dict()) >= {"step"}


def test_state_dicts_hold_pytorch_state_names_and_round_trip():
    model = nn.Linear(2, 3, key=nb.random.key(0))
    grads = nb.grad(lambda m: m(nb.ones((4, 2))).sum())(model)
    opt = optim.RMSprop(model, momentum=0.9, centered=True)
    opt.step(grads)
    kinds = ("square_avg", "momentum_buffer", "grad_avg")
    assert set(opt.state_dict()) == {"step"} | {
        f"{k}.{n}" for k in kinds for n in ("weight", "bias")
    }
    ada = optim.Adagrad(model, initial_accumulator_value=0.3)
    assert set(ada.state_dict()) == {"step", "sum.weight", "sum.bias"}
    np.testing.assert_allclose(ada.state_dict()["sum.weight"].numpy(), 0.3)
    again = optim.RMSprop(nn.Linear(2, 3, key=nb.random.key(1)), momentum=0.9, centered=True)
    again.load_state_dict(opt.state_dict())
    for k, v in opt.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[k].numpy(), v.numpy())


def test_bfloat16_params_stay_bfloat16_under_a_scheduled_compiled_step():
    params = {"w": nb.constant(np.ones(4, np.float32)).cast(nb.bfloat16)}
    opt = optim.RMSprop(params, lr=0.01, momentum=0.5)
    sched = sched_mod.OneCycleLR(opt, 0.01, total_steps=5)
    step = opt.compile_step(lambda p: (p["w"].cast(nb.float32) ** 2).sum())
    for _ in range(3):
        step()
        sched.step()
    assert params["w"].dtype == nb.bfloat16
    assert all(v.dtype == nb.bfloat16 for v in opt.state["square_avg"])


# ----------------------------------------------------------------------------- clipping
def test_step_with_an_epoch_and_foreach_as_pytorch():
    """``scheduler.step(epoch)`` (deprecated in PyTorch, still working there) raised a bare
    TypeError; ``clip_grad_*_(..., foreach=...)`` was refused."""
    w = nb.nn.Parameter(nb.ones((2,)))
    opt = nb.nn.optim.SGD([w], lr=0.1)
    sched = nb.nn.optim.lr_scheduler.StepLR(opt, 3, gamma=0.1)
    opt.step()
    with pytest.warns(UserWarning, match=r"StepLR.step\(epoch\) is deprecated"):
        sched.step(7)
    assert sched.get_last_lr() == pytest.approx([0.001]) and opt.lr == pytest.approx(0.001)
    sched.step()
    assert sched.last_epoch == 8
    with pytest.raises(ValueError, match="epoch must be an int >= 0"):
        sched.step(-1)
    w.grad = nb.constant([3.0, -4.0])
    nb.nn.utils.clip_grad_norm_([w], 1.0, foreach=True)
    nb.nn.utils.clip_grad_value_([w], 0.5, foreach=False)
    np.testing.assert_allclose(w.grad.numpy(), [0.5, -0.5])


def test_clip_grad_value_in_place_as_pytorch():
    w = nb.constant(np.array([[1.0, -3.0], [0.5, 2.0]], np.float32))
    b = nb.constant(np.array([0.1, -0.2], np.float32))
    frozen = nb.constant(np.ones(2, np.float32))
    for p in (w, b):
        p.requires_grad_(True)
    (w**3).sum().backward()
    (b * 10.0).sum().backward()
    ret = optim.clip_grad_value_([w, b, frozen], clip_value=2.5)
    assert ret is None and frozen.grad is None
    # PyTorch: torch.nn.utils.clip_grad_value_ clamps each element into [-2.5, 2.5]
    np.testing.assert_allclose(w.grad.numpy(), [[2.5, 2.5], [0.75, 2.5]])
    np.testing.assert_allclose(b.grad.numpy(), [2.5, 2.5])
    optim.clip_grad_value_(b, 1.0)  # one tensor
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 1.0])
    lin = nn.Linear(2, 2, key=nb.random.key(0))
    lin(nb.ones((1, 2)) * 100.0).sum().backward()
    optim.clip_grad_value_(lin, 0.5)
    assert all(float(abs(p.grad).max().item()) <= 0.5 for p in lin.parameters())
    clipped = optim.clip_grad_value({"a": nb.constant(np.array([-9.0, 0.1], np.float32))}, 1)
    np.testing.assert_allclose(clipped["a"].numpy(), [-1.0, 0.1])
    for bad in (-1.0, float("nan"), "1"):
        with pytest.raises(ValueError, match="clip_grad_value_: invalid clip_value"):
            optim.clip_grad_value_([w], bad)


def test_clip_grad_value_live_against_torch():
    torch = pytest.importorskip("torch")
    g = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32) * 3
    tp = torch.zeros(3, 5, requires_grad=True)
    tp.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_value_([tp], 1.3)
    p = nb.zeros((3, 5))
    p.requires_grad_(True)
    (p * nb.constant(g)).sum().backward()
    optim.clip_grad_value_([p], 1.3)
    np.testing.assert_array_equal(p.grad.numpy(), tp.grad.numpy())


def _scheduler_api():
    out = []
    for name in sched_mod.__all__:
        cls = getattr(sched_mod, name)
        out.append((name, cls))
        out += [
            (f"{name}.{m}", f)
            for m, f in vars(cls).items()
            if not m.startswith("_") and callable(f)
        ]
    return out


@pytest.mark.parametrize(
    "qual, obj", _scheduler_api(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_scheduler_api_is_documented(qual, obj):
    from test_docstrings import _doc_and_params

    doc, params = _doc_and_params(obj)
    assert doc and doc.strip(), f"lr_scheduler.{qual} has no docstring"
    missing = [p for p in params if p not in doc]
    assert not missing, f"lr_scheduler.{qual}: docstring does not explain {missing}"


def test_functional_updates_under_vmap_match_a_loop():
    """An ensemble of parameter sets updated by one vmapped rmsprop/adagrad step."""
    ps = nb.constant(np.arange(6, dtype=np.float32).reshape(3, 2) + 1)
    gs = nb.constant(np.random.default_rng(2).standard_normal((3, 2)).astype(np.float32))

    def one(p, g):
        p, _ = optim.rmsprop_update({"w": p}, {"w": g}, None, lr=0.01, momentum=0.9, centered=True)
        p, _ = optim.adagrad_update(p, {"w": g}, None, lr=0.1, lr_decay=0.1)
        return p["w"]

    looped = np.stack([one(ps[i], gs[i]).numpy() for i in range(3)])
    np.testing.assert_allclose(nb.vmap(one)(ps, gs).numpy(), looped, rtol=1e-6)


def test_warm_restarts_take_a_fractional_epoch_as_pytorch():
    """``sched.step(epoch + i / iters)`` inside an epoch (PyTorch's documented use): the
    rate at a fractional position of the period, from PyTorch 2.14's values."""
    opt = optim.SGD({"w": nb.ones((2,))}, lr=0.1)
    sched = sched_mod.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2, eta_min=0.0)
    opt.step({"w": nb.ones((2,))})
    want = {0.5: 0.085355339, 1.25: 0.030865828, 2.5: 0.096193977, 7.0: 0.096193977}
    for epoch, lr in want.items():
        sched.step(epoch)
        assert opt.lr == pytest.approx(lr, abs=1e-9), epoch
    with pytest.raises(ValueError, match="epoch must be a number >= 0"):
        sched.step(-1)


def test_a_scheduler_stepped_every_step_makes_no_new_program():
    """The new rate is data: it was a ``full`` op's number, part of the update program's
    structure, so a scheduler stepped every step made every step a program never cached
    (601 misses in 600 steps, the update interpreted forever)."""
    nb.random.seed(0)  # (an unseeded init could start near the zero loss, and wander)
    model = nb.nn.Sequential(nb.nn.Linear(4, 8), nb.nn.ReLU(), nb.nn.Linear(8, 1))
    opt = nb.nn.optim.AdamW(model.parameters(), lr=1e-2)
    sched = nb.nn.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=50)
    x, y = nb.ones((16, 4)), nb.full((16, 1), 3.0)

    def step():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step()
        return loss.item()

    for _ in range(3):
        step()
    before = nb.backend_stats()["program_misses"]
    losses = [step() for _ in range(20)]
    assert nb.backend_stats()["program_misses"] == before
    assert losses[-1] < losses[0]


def test_a_cycled_setting_resumes_bit_identically_in_eager_steps():
    """Adam under OneCycleLR (betas[0] cycled), loss.backward() and opt.step(): a fresh
    optimizer loaded from the state dicts takes the same precision path at every step. The
    path followed the first step() of the object (a resumed one saw the cycled value
    first), and the weights drifted by an ulp at some resume points, then apart."""
    x = nb.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = nb.ones((2, 1))

    def make(seed):
        m = nn.Linear(3, 1, key=nb.random.key(seed))
        opt = nn.optim.Adam(m, lr=0.01)
        return m, opt, sched_mod.OneCycleLR(opt, max_lr=0.05, total_steps=20)

    def step(m, opt, sched):
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        sched.step()

    for n in (2, 5):
        m, opt, sched = make(0)
        for _ in range(n):
            step(m, opt, sched)
        saved = [{k: v.numpy().copy() for k, v in o.state_dict().items()} for o in (m, opt)]
        saved_sched = sched.state_dict()
        for _ in range(3):
            step(m, opt, sched)
        m2, opt2, sched2 = make(1)
        m2.load_state_dict(saved[0])
        opt2.load_state_dict(saved[1])
        sched2.load_state_dict(saved_sched)
        for _ in range(3):
            step(m2, opt2, sched2)
        assert np.array_equal(m.weight.numpy(), m2.weight.numpy()), n
        assert np.array_equal(m.bias.numpy(), m2.bias.numpy()), n
