"""Optimizers vs hand-computed updates; schedules; clipping; both training styles."""

import math

import numpy as np
import pytest

import nabla as nb

nn = nb.nn
optim = nn.optim


def _p(v):
    return {"w": nb.constant(np.asarray(v, np.float32))}


def test_sgd_momentum_nesterov_weight_decay_by_hand():
    p, g = np.array([1.0, -2.0]), np.array([0.5, 0.25])
    lr, mu, wd = 0.1, 0.9, 0.01
    params, state = _p(p), optim.sgd_init(_p(p), momentum=mu)
    buf, ref = np.zeros(2), p.copy()
    for _ in range(3):
        params, state = optim.sgd_update(
            params, _p(g), state, lr=lr, momentum=mu, nesterov=True, weight_decay=wd
        )
        gg = g + wd * ref
        buf = mu * buf + gg
        ref = ref - lr * (gg + mu * buf)
    np.testing.assert_allclose(params["w"].numpy(), ref, rtol=1e-6)
    assert state["step"].item() == 3.0
    plain, plain_state = optim.sgd_update(_p(p), _p(g), lr=0.5)
    assert nb.tree_structure(plain_state) == nb.tree_structure(optim.sgd_init(_p(p)))
    np.testing.assert_allclose(plain["w"].numpy(), p - 0.5 * g, rtol=1e-6)


@pytest.mark.parametrize("decoupled", [False, True])
def test_adam_and_adamw_by_hand(decoupled):
    p, lr, b1, b2, eps, wd = np.array([0.5, -1.5, 2.0]), 0.01, 0.9, 0.99, 1e-8, 0.1
    grads = [np.array([0.1, -0.2, 0.3]), np.array([0.3, 0.1, -0.1]), np.array([-0.2, 0.0, 0.5])]
    update = optim.adamw_update if decoupled else optim.adam_update
    params, state = _p(p), optim.adam_init(_p(p))
    m, v, ref = np.zeros(3), np.zeros(3), p.copy()
    for i, g in enumerate(grads, 1):
        params, state = update(
            params, _p(g), state, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd
        )
        gg = g if decoupled else g + wd * ref
        m, v = b1 * m + (1 - b1) * gg, b2 * v + (1 - b2) * gg**2
        step = (m / (1 - b1**i)) / (np.sqrt(v / (1 - b2**i)) + eps)
        ref = (ref - lr * wd * ref if decoupled else ref) - lr * step
    np.testing.assert_allclose(params["w"].numpy(), ref, rtol=1e-5)


def test_sgd_dampening_and_adam_amsgrad_by_hand():
    """PyTorch's dampening (not applied to the first step's buffer) and AMSGrad (the
    largest second moment so far in the denominator), functional and as classes."""
    p, lr, mu, damp = np.array([1.0, -2.0]), 0.1, 0.9, 0.3
    grads = [np.array([0.5, 0.25]), np.array([-0.1, 0.4]), np.array([0.2, -0.3])]
    params, state = _p(p), optim.sgd_init(_p(p), momentum=mu)
    buf, ref = None, p.copy()
    for g in grads:
        params, state = optim.sgd_update(params, _p(g), state, lr, mu, dampening=damp)
        buf = g.copy() if buf is None else mu * buf + (1 - damp) * g
        ref = ref - lr * buf
    np.testing.assert_allclose(params["w"].numpy(), ref, rtol=1e-6)
    opt = optim.SGD(_p(p), 0.1, 0.9, 0.3)  # PyTorch's positional order
    for g in grads:
        opt.step(_p(g))
    np.testing.assert_allclose(opt.params["w"].numpy(), ref, rtol=1e-6)
    with pytest.raises(ValueError, match="Nesterov momentum needs dampening=0"):
        optim.SGD(_p(p), momentum=0.9, dampening=0.1, nesterov=True)
    b1, b2, eps = 0.9, 0.99, 1e-8
    grads = [np.array([1.0, -0.5]), np.array([0.1, 0.05]), np.array([0.01, -0.02])]
    opt = optim.Adam(_p(p), lr=0.01, betas=(b1, b2), amsgrad=True)
    m, v, v_max, ref = np.zeros(2), np.zeros(2), np.zeros(2), p.copy()
    for i, g in enumerate(grads, 1):
        opt.step(_p(g))
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g**2
        v_max = np.maximum(v_max, v)
        ref = ref - 0.01 * (m / (1 - b1**i)) / (np.sqrt(v_max / (1 - b2**i)) + eps)
    np.testing.assert_allclose(opt.params["w"].numpy(), ref, rtol=1e-5)
    assert sorted(opt.state) == ["mu", "nu", "nu_max", "step"]


@pytest.mark.parametrize("b2", [0.999, 0.99999])
def test_adam_bias_correction_keeps_float32_precision(b2):
    """1 - b2 ** t in float32 cancels (7e-4 relative error with b2 = 0.99999, every step);
    a constant gradient moves the weight by exactly lr per step, as in float64."""
    params, state = _p([0.0]), optim.adam_init(_p([0.0]))
    for _ in range(5):
        params, state = optim.adam_update(params, _p([1.0]), state, lr=1.0, betas=(0.9, b2))
    np.testing.assert_allclose(params["w"].numpy(), [-5.0], rtol=1e-6)


def test_schedules():
    warm = optim.linear_warmup(1.0, 4)
    assert [warm(s) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    cos = optim.cosine_decay(1.0, 10, final_lr=0.1)
    assert cos(0) == 1.0 and abs(cos(10) - 0.1) < 1e-12 and abs(cos(5) - 0.55) < 1e-12
    wc = optim.warmup_cosine(2.0, 2, 12)
    values = [wc(s) for s in range(14)]
    assert values[0] == 1.0 and values[2] == 2.0 and values[12] < 1e-12
    # tensors (inside compiled steps) give the same numbers
    tensor_values = [float(wc(nb.constant(float(s))).item()) for s in range(14)]
    np.testing.assert_allclose(tensor_values, values, atol=1e-6)
    # a schedule as lr: the first update uses lr(0)
    params, state = _p([1.0]), optim.sgd_init(_p([1.0]))
    params, state = optim.sgd_update(params, _p([1.0]), state, lr=optim.linear_warmup(1.0, 4))
    np.testing.assert_allclose(params["w"].numpy(), [0.75])


def test_clip_grad_norm():
    g = {"a": nb.constant(np.array([3.0, 0.0], np.float32)), "b": nb.constant(np.float32(4.0))}
    clipped, norm = optim.clip_grad_norm(g, 1.0)
    assert abs(norm.item() - 5.0) < 1e-6
    np.testing.assert_allclose(optim.global_norm(clipped).item(), 1.0, rtol=1e-5)
    same, _ = optim.clip_grad_norm(g, 10.0)
    np.testing.assert_allclose(same["a"].numpy(), [3.0, 0.0])
    m = nn.Linear(2, 1, key=nb.random.key(0))
    (m(nb.ones((4, 2))) * 100).sum().backward()
    before = optim.clip_grad_norm_(m, 0.5)
    assert before.item() > 0.5
    np.testing.assert_allclose(
        optim.global_norm([p.grad for p in m.parameters()]).item(), 0.5, rtol=1e-4
    )


def test_clipping_writes_each_grad_in_place_and_step_takes_a_closure():
    """As PyTorch: ``clip_grad_norm_``/``clip_grad_value_`` change the ``.grad`` tensors
    themselves (a reference held before sees the clipped values), and ``opt.step(closure)``
    calls the closure, steps on the ``.grad`` it leaves and returns its loss."""
    w = nb.tensor([3.0, 4.0], requires_grad=True)
    (w * w).sum().backward()
    held = w.grad
    optim.clip_grad_norm_([w], 1.0)
    assert held is w.grad
    np.testing.assert_allclose(held.numpy(), [0.6, 0.8], rtol=1e-6)
    optim.clip_grad_value_([w], 0.7)
    assert held is w.grad
    np.testing.assert_allclose(held.numpy(), [0.6, 0.7], rtol=1e-6)
    w = nb.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([w], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 5.0
    np.testing.assert_allclose(w.numpy(), [0.8, 1.6], rtol=1e-6)
    np.testing.assert_allclose(opt.step(closure=closure).item(), 0.8**2 + 1.6**2, rtol=1e-6)
    with pytest.raises(TypeError, match="grads or a closure, not both"):
        opt.step([w.grad], closure)


def test_clip_grad_norm_without_gradients_realizes_nothing_else():
    """A model with no gradients yet: nothing to clip, and nothing else pending is run (it
    realized every pending tensor, so an unrelated lazy error surfaced from it)."""
    m = nn.Linear(2, 1, key=nb.random.key(0))
    pending = nb.constant(np.ones(3, np.float32)) * 2.0
    assert optim.clip_grad_norm_(m, 1.0).item() == 0.0
    assert not pending.is_realized


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 3)).astype(np.float32)
    return nb.constant(x), nb.constant(x @ np.array([[1.0], [-2.0], [0.5]], np.float32))


def test_pytorch_style_and_functional_style_agree():
    x, y = _data()
    a = nn.Sequential(
        nn.Linear(3, 8, key=nb.random.key(0)), nn.Tanh(), nn.Linear(8, 1, key=nb.random.key(1))
    )
    b = nb.tree_map(lambda v: v + 0.0, a)  # a copy: a's optimizer updates a's tensors in place
    loss_fn = lambda m: nn.functional.mse_loss(m(x), y)  # noqa: E731
    opt = optim.AdamW(a, lr=0.05, weight_decay=0.1)
    ids = [id(p) for p in a.parameters()]
    state = optim.adamw_init(b)
    for _ in range(3):
        loss_fn(a).backward()
        out = opt.step()
        opt.zero_grad()
        assert out is a
        g = nb.grad(loss_fn)(b)
        b, state = optim.adamw_update(b, g, state, lr=0.05, weight_decay=0.1)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        # (two orders of float32 arithmetic: an entry near 0 differs in its last bits)
        np.testing.assert_allclose(pa.numpy(), pb.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)
        assert pa.requires_grad and pa.grad is None
    assert [id(p) for p in a.parameters()] == ids  # updated in place: same tensor objects
    # opt.step(grads) on a params tree returns the new tree
    params = {"w": nb.ones((2,))}
    sgd = optim.SGD(params, lr=0.5, momentum=0.9)
    new = sgd.step({"w": nb.ones((2,))})
    assert new is params
    np.testing.assert_allclose(new["w"].numpy(), [0.5, 0.5])


def test_frozen_parameters_and_buffers_are_not_updated():
    m = nn.Sequential(nn.Linear(2, 2, key=nb.random.key(0)), nn.Linear(2, 1))
    m[0].requires_grad_(False)
    frozen = m[0].weight.numpy().copy()
    opt = optim.SGD(m, lr=1.0)
    m(nb.ones((3, 2))).sum().backward()
    assert m[0].weight.grad is None
    opt.step()
    np.testing.assert_array_equal(m[0].weight.numpy(), frozen)
    assert len(opt.state_dict()) == 1  # step only: plain SGD has no moments


def test_step_without_grads_changes_nothing_as_pytorch():
    """PyTorch's ``step()`` skips parameters without a ``.grad`` (the scheduler demo loop
    ``opt.step(); sched.step()`` with no backward); it had raised."""
    m = nn.Linear(2, 2)
    opt = optim.Adam(m, lr=0.1)
    before = m.weight.numpy().copy()
    assert opt.step() is m
    np.testing.assert_array_equal(m.weight.numpy(), before)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    sched.step()
    assert sched.get_last_lr() == [0.05]


def test_optimizer_state_dict_round_trip():
    x, y = _data()
    m = nn.Linear(3, 1, key=nb.random.key(0))
    opt = optim.Adam(m, lr=0.1)
    nn.functional.mse_loss(m(x), y).backward()
    opt.step()
    sd = opt.state_dict()
    assert list(sd) == ["step", "mu.weight", "mu.bias", "nu.weight", "nu.bias"]
    other = optim.Adam(m, lr=0.1)
    other.load_state_dict(sd)
    assert other.state["step"].item() == 1.0
    np.testing.assert_array_equal(other.state["nu"][0].numpy(), sd["nu.weight"].numpy())
    with pytest.raises(ValueError, match="missing key 'mu.weight'.*nothing loaded"):
        other.load_state_dict({"step": sd["step"]})
    extra = dict(sd, bogus=sd["step"])
    with pytest.raises(ValueError, match="unexpected key 'bogus'"):
        other.load_state_dict(extra)
    wrong = dict(sd, **{"nu.bias": sd["nu.bias"].cast(nb.int32)})
    with pytest.raises(ValueError, match="nu.bias: dtype int32, expected float32"):
        other.load_state_dict(wrong)
    with pytest.raises(ValueError, match=r"Adam.load_state_dict: mu.bias: a str 'abcd' is not"):
        other.load_state_dict(dict(sd, **{"mu.bias": "abcd"}))
    assert math.isfinite(float(sd["mu.bias"].numpy()[0]))


def test_optimizer_on_model_parameters_updates_in_place():
    x, y = _data()
    m = nn.Linear(3, 1, key=nb.random.key(0))
    w = m.weight  # a reference held across steps sees the updates
    before = w.numpy().copy()
    opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    assert m.weight is w and w.requires_grad and w.grad is not None
    assert not np.array_equal(w.numpy(), before)
    g = w.grad.numpy()
    opt.zero_grad()
    assert w.grad is None and g.shape == (3, 1)


def test_stateful_step_with_a_grads_module():
    x, y = _data()
    m = nn.Sequential(nn.Linear(3, 4, key=nb.random.key(0)), nn.Linear(4, 1))
    ref = nb.tree_map(lambda v: v + 0.0, m)
    opt = optim.AdamW(m, lr=0.05)
    ref_state = optim.adamw_init(ref)
    loss_fn = lambda mod: nn.functional.mse_loss(mod(x), y)  # noqa: E731
    for _ in range(2):
        assert opt.step(nb.grad(loss_fn)(m)) is m
        ref, ref_state = optim.adamw_update(
            ref, nb.grad(loss_fn)(ref), ref_state, lr=0.05, weight_decay=0.01
        )
    for pa, pb in zip(m.parameters(), ref.parameters()):
        np.testing.assert_allclose(pa.numpy(), pb.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="grads have 1 leaves but params have 4"):
        opt.step([nb.ones((3, 4))])


def test_compile_step_is_one_graph_and_matches_backward_step():
    x, y = _data()
    make = lambda: nn.Sequential(
        nn.Linear(3, 8, key=nb.random.key(0)),
        nn.Tanh(),  # noqa: E731
        nn.Linear(8, 1, key=nb.random.key(1)),
    )
    a, b = make(), make()
    loss_fn = lambda m, x, y: nn.functional.mse_loss(m(x), y)  # noqa: E731
    opt_a = optim.AdamW(a, lr=optim.warmup_cosine(0.05, 2, 10))
    step = opt_a.compile_step(loss_fn)
    opt_b = optim.AdamW(b, lr=optim.warmup_cosine(0.05, 2, 10))
    w = a[0].weight
    for _ in range(4):
        la = step(x, y)
        opt_b.zero_grad()
        lb = loss_fn(b, x, y)
        lb.backward()
        opt_b.step()
        np.testing.assert_allclose(la.item(), lb.item(), rtol=1e-5)
    assert step.stats.misses == 1 and step.stats.replays == 0
    assert a[0].weight is w and w.requires_grad  # in place, as opt.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        np.testing.assert_allclose(pa.numpy(), pb.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("make", [lambda m: optim.SGD(m, lr=0.1), lambda m: optim.Adam(m)])
def test_compile_step_compiles_once_for_every_optimizer(make):
    x, y = _data()
    m = nn.Sequential(nn.Linear(3, 4, key=nb.random.key(0)), nn.ReLU(), nn.Linear(4, 1))
    step = make(m).compile_step(lambda m, x, y: nn.functional.mse_loss(m(x), y))
    losses = [step(x, y).item() for _ in range(4)]
    assert step.stats.misses == 1 and losses[-1] < losses[0]


def test_compile_step_retraces_when_the_module_s_python_state_changes():
    """The parameters reach the compiled step as leaves plus their treedef, a static
    argument: a module attribute the forward reads (part of the treedef) retraces, as it did
    when the module itself was the argument, and the step still updates in place."""

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 1, key=nb.random.key(0))
            self.scale = 1.0

        def forward(self, x):
            return self.lin(x) * self.scale

    x, y = _data()
    m = Scaled()
    step = optim.SGD(m, lr=0.1).compile_step(lambda m, x, y: nn.functional.mse_loss(m(x), y))
    step(x, y)
    step(x, y)
    assert step.stats.misses == 1
    m.scale = 0.0  # the loss no longer depends on the weights: they stay as they are
    w = m.lin.weight.numpy().copy()
    step(x, y)
    assert step.stats.misses == 2
    np.testing.assert_array_equal(m.lin.weight.numpy(), w)
    m.scale = 1.0
    step(x, y)
    assert step.stats.misses == 2  # the first trace again
    assert not np.array_equal(m.lin.weight.numpy(), w)


def test_settings_are_checked_and_sgd_defaults_to_pytorch_s_lr():
    p = _p([1.0])
    assert optim.SGD(p).lr == 1e-3
    np.testing.assert_allclose(optim.sgd_update(p, _p([1.0]))[0]["w"].numpy(), [0.999])
    for bad, match in (
        (lambda: optim.SGD(p, lr=-0.1), "lr=-0.1"),
        (lambda: optim.SGD(p, nesterov=True), "nesterov=True with momentum=0"),
        (lambda: optim.Adam(p, betas=(0.9, 1.0)), r"betas\[1\]=1.0"),
        (lambda: optim.AdamW(p, eps=-1.0, weight_decay=-0.1), "eps=-1.0.*weight_decay=-0.1"),
        (lambda: optim.adam_update(p, p, optim.adam_init(p), lr=-1.0), "adam_update: invalid lr"),
    ):
        with pytest.raises(ValueError, match=match):
            bad()


def test_nan_inf_and_non_numeric_settings_are_refused_by_every_optimizer():
    """As PyTorch's ``Invalid learning rate: nan``: a NaN setting would make the weights NaN
    after one step. Schedules and tensors are not checked."""
    p, nan, inf = _p([1.0]), float("nan"), float("inf")
    for bad, match in (
        (lambda: optim.Adam(p, lr=nan), r"Adam: invalid lr=nan \(must be a finite number >= 0\)"),
        (lambda: optim.AdamW(p, lr=inf), r"AdamW: invalid lr=inf"),
        (lambda: optim.SGD(p, lr="0.1"), r"SGD: invalid lr='0.1' \(must be a number\)"),
        (lambda: optim.SGD(p, momentum=nan), r"SGD: invalid momentum=nan"),
        (lambda: optim.SGD(p, momentum=0.9, dampening=nan), r"SGD: invalid dampening=nan"),
        (lambda: optim.SGD(p, weight_decay=nan), r"SGD: invalid weight_decay=nan"),
        (lambda: optim.Adam(p, betas=(nan, 0.9)), r"betas\[0\]=nan \(must be a finite number in"),
        (lambda: optim.Adam(p, betas=(0.9,)), r"betas=\(0.9,\) \(must be a pair"),
        (lambda: optim.Adam(p, eps=nan), r"Adam: invalid eps=nan"),
        (lambda: optim.adamw_update(p, p, optim.adam_init(p), lr=nan), "adamw_update: invalid lr"),
        (lambda: optim.sgd_update(p, p, lr=nan), "sgd_update: invalid lr=nan"),
    ):
        with pytest.raises(ValueError, match=match):
            bad()
    optim.Adam(p, lr=optim.linear_warmup(0.1, 10))
    optim.Adam(p, lr=nb.constant(0.1), eps=0.0, weight_decay=0.0)
    optim.SGD(p, lr=np.float32(0.5), momentum=np.float64(0.9))


def test_freezing_or_unfreezing_after_the_optimizer_is_made_keeps_each_leaf_s_moments():
    """Moments are kept per params leaf (None until a leaf trains): after freezing layer 0,
    layer 2 goes on from its own moments (it was handed layer 0's: wrong values, or a
    broadcast error for other shapes); unfreezing a leaf gives it fresh zeros."""
    x, y = nb.ones((4, 3)), nb.ones((4, 2))
    m = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))
    opt = optim.Adam(m, lr=0.05)

    def loss(model):
        return nn.functional.mse_loss(model(x), y)

    opt.step(nb.grad(loss)(m))
    mu_before = opt.state["mu"][2].numpy()  # leaves: 0.weight 0.bias 2.weight 2.bias
    m[0].requires_grad_(False)
    frozen = m[0].weight.numpy().copy()
    g = nb.grad(loss)(m)
    opt.step(g)
    np.testing.assert_allclose(
        opt.state["mu"][2].numpy(), 0.9 * mu_before + 0.1 * g[2].weight.numpy(), rtol=1e-6
    )
    np.testing.assert_array_equal(m[0].weight.numpy(), frozen)
    assert "mu.0.weight" in opt.state_dict()  # its moments are kept while frozen
    late = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))
    late[0].requires_grad_(False)
    opt2 = optim.AdamW(late, lr=0.05)
    assert opt2.state["mu"][0] is None and "mu.0.weight" not in opt2.state_dict()
    late[0].requires_grad_(True)
    before = late[0].weight.numpy().copy()
    opt2.step(nb.grad(loss)(late))
    assert not np.array_equal(late[0].weight.numpy(), before)
    opt2.load_state_dict(opt.state_dict())  # moments for every leaf: all are taken
    with pytest.raises(ValueError, match=r"grads of structure .*'v'.* for params .*'w'"):
        optim.sgd_update({"w": nb.ones(2)}, {"v": nb.ones(2)}, lr=0.1)  # silently applied
    with pytest.raises(ValueError, match=r"gradient of params leaf 1 has shape \(1,\)"):
        optim.sgd_update({"a": nb.ones(2), "b": nb.ones((5, 2))}, [nb.ones(2), nb.ones(1)], lr=0.1)


def test_requires_grad_toggles_parameters_in_place():
    """Freezing keeps the parameter tensors (PyTorch's identity): an optimizer made from
    ``model.parameters()`` before a freeze and an unfreeze still updates them."""
    m = nn.Linear(2, 2, key=nb.random.key(0))
    opt = optim.SGD(m.parameters(), lr=0.1)
    w = m.weight
    m.requires_grad_(False)
    assert m.weight is w and not w.requires_grad
    assert not m(nb.ones((1, 2))).sum().requires_grad
    m.requires_grad_(True)
    before = w.numpy().copy()
    m(nb.ones((1, 2))).sum().backward()
    opt.step()
    assert m.weight is w
    np.testing.assert_allclose(w.numpy(), before - 0.1, rtol=1e-6)


def test_optimizer_load_state_dict_casts_and_lays_out_as_module_load_state_dict():
    """A float64 moment and an integer step load (cast, as Module.load_state_dict casts:
    they had been refused), and a sharded parameter's moments come back sharded as the
    parameter is (they had come back whole)."""
    mesh = nb.DeviceMesh("m", (2, 2), ("dp", "tp"))
    lin = nb.nn.Linear(4, 8)
    lin.weight = nb.shard(lin.weight, mesh, nb.P(None, "tp"))
    opt = nb.nn.optim.Adam(lin, lr=1e-2)
    x = nb.shard(nb.ones((4, 4)), mesh, nb.P("dp"))
    (lin(x) ** 2).mean().backward()
    opt.step()
    sd = {k: v.numpy().astype(np.float64) for k, v in opt.state_dict().items()}
    sd["step"] = 7
    again = nb.nn.optim.Adam(lin, lr=1e-2)
    again.load_state_dict(sd)
    assert again.state["step"].item() == 7.0 and again.state["step"].dtype is nb.float32
    mu = again.state["mu"][0]
    assert mu.dtype is nb.float32 and mu.sharding == lin.weight.sharding
    np.testing.assert_array_equal(mu.numpy(), opt.state["mu"][0].numpy())
    with pytest.raises(ValueError, match=r"mu.weight: dtype int32, expected float32"):
        again.load_state_dict({**sd, "mu.weight": np.zeros((4, 8), np.int32)})


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: optim.Adam(ps, lr=0.1),
        lambda ps: optim.AdamW(ps, lr=0.1),
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5),
        lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.5),
    ],
)
def test_each_parameter_counts_its_own_updates_as_pytorch(make, tmp_path):
    """A parameter without a gradient on some steps (frozen, then unfrozen; or unused) had
    the optimizer-wide count: Adam's bias correction for t=4 at its first update (0.058
    where PyTorch's first update is lr * sign(g) = 0.1), SGD's dampening applied to its
    first buffer, Adagrad's rate decayed. Reference: PyTorch's per-parameter counts, by
    hand (b's first update is its step 1, whatever the optimizer's step)."""
    x, y = nb.constant([[1.0, 2.0]]), nb.constant([[5.0]])
    w, b = nb.ones((2, 1)), nb.zeros((1,))
    w.requires_grad_(True)
    opt = make([w, b])
    fresh_w, fresh_b = nb.ones((2, 1)), nb.zeros((1,))
    fresh_w.requires_grad_(True)
    fresh_b.requires_grad_(True)
    alone = make([fresh_b])  # b trained from its own first step: the reference
    for i in range(6):
        if i == 3:
            b.requires_grad_(True)
        opt.zero_grad()
        ((x @ w + b - y) ** 2).mean().backward()
        if i == 4:  # one step where b is unused: its count stays
            b.grad = None
        if i >= 3 and i != 4:
            alone.zero_grad()
            fresh_b.grad = b.grad
            alone.step()
        opt.step()
        if i == 3:
            np.testing.assert_allclose(b.numpy(), fresh_b.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), fresh_b.numpy(), rtol=1e-6)
    # the counts go through a checkpoint, and an optimizer whose leaves are in step has none
    sd = opt.state_dict()
    assert "steps.1" in sd and sd["steps.1"].item() == 2.0 and sd["step"].item() == 6.0
    again = make([w, b])
    again.load_state_dict(sd)
    assert again.state["steps"][1].item() == 2.0 and again.state["steps"][0] is None
    assert not any(k.startswith("steps.") for k in alone.state_dict())


def test_pytorch_s_common_optimizer_keywords_run_unchanged():
    """``maximize`` ascends (the step of the negated gradient, eager and compiled);
    ``foreach``/``fused``/``capturable`` pick among PyTorch's implementations and change
    nothing here (they had been a TypeError); ``differentiable=True`` and unknown keywords
    are refused."""
    x = nb.constant([[1.0, 2.0]])

    def run(maximize, compiled):
        w = nb.constant([[0.5], [-1.0]])
        w.requires_grad_(True)
        opt = optim.Adam([w], lr=0.1, maximize=maximize, foreach=False, fused=None)
        loss = lambda ps, x: (x @ ps[0]).sum() * (1.0 if maximize else -1.0)  # noqa: E731
        step = opt.compile_step(loss) if compiled else None
        for _ in range(3):
            if compiled:
                step(x)
            else:
                opt.zero_grad()
                loss([w], x).backward()
                opt.step()
        return w.numpy()

    want = run(False, False)  # descending -f is ascending f
    for compiled in (False, True):
        np.testing.assert_allclose(run(True, compiled), want, rtol=1e-6)
    assert optim.SGD([nb.ones(2)], lr=0.1, capturable=False).maximize is False
    with pytest.raises(ValueError, match=r"Adam: differentiable=True .* is not supported"):
        optim.Adam([nb.ones(2)], differentiable=True)
    with pytest.raises(TypeError, match=r"RMSprop.__init__\(\) got an unexpected keyword"):
        optim.RMSprop([nb.ones(2)], bogus=1)


def test_tied_weights_take_their_total_gradient_in_every_update_path():
    """An embedding shared with the output layer appears at two leaves of the module's
    pytree. compile_step detached each leaf apart and nb.grad gave each its own part, so
    the last leaf's update won: training diverged from eager's (0.37 after 3 SGD steps).
    Every path now updates the tensor once with the total gradient, as PyTorch."""

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 3, key=nb.random.key(0))
            self.out = nn.Linear(3, 5, bias=False, key=nb.random.key(1))
            self.out.weight = self.emb.weight

        def forward(self, i):
            return self.emb(i) @ self.out.weight.T

    ids = nb.constant(np.array([0, 2, 4], np.int32))
    loss = lambda m, i: (m(i) ** 2).mean()  # noqa: E731
    w0 = Tied().emb.weight.numpy()
    total = nb.grad(  # the loss as a function of the one shared table
        lambda w: ((nb.take(w, ids, axis=0) @ w.T) ** 2).mean()
    )(nb.constant(w0))
    for make in (lambda m: optim.SGD(m, lr=0.1), lambda m: optim.Adam(m, lr=0.1)):
        ends = []
        for how in ("eager", "compile_step", "functional"):
            m = Tied()
            opt = make(m)
            step = opt.compile_step(loss) if how == "compile_step" else None
            for k in range(3):
                if how == "eager":
                    opt.zero_grad()
                    loss(m, ids).backward()
                    opt.step()
                elif how == "compile_step":
                    step(ids)
                else:
                    opt.step(nb.grad(loss)(m, ids))
                if k == 0 and isinstance(opt, optim.SGD):
                    np.testing.assert_allclose(
                        m.emb.weight.numpy(), w0 - 0.1 * total.numpy(), rtol=1e-5
                    )
            assert m.emb.weight is m.out.weight
            ends.append(m.emb.weight.numpy())
        np.testing.assert_allclose(ends[1], ends[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ends[2], ends[0], rtol=1e-5, atol=1e-6)


def test_a_none_leaf_in_params_is_skipped_by_every_update():
    """``nb.grad`` of a tree holding None gives None there: the optimizers had counted the
    leaves differently and refused the gradient of the tree they were given."""
    params = {"w": nb.ones((3,)), "b": None}
    grads = nb.grad(lambda p: (p["w"] ** 2).sum())(params)
    new, _ = nb.nn.optim.sgd_update(params, grads, None, lr=0.1)
    assert new["b"] is None
    np.testing.assert_allclose(new["w"].numpy(), [0.8, 0.8, 0.8], rtol=1e-6)
    state = nb.nn.optim.adamw_init(params)
    new, _ = nb.nn.optim.adamw_update(params, grads, state, lr=0.1)
    assert new["b"] is None and new["w"].shape == (3,)


def test_pytorch_optimizers_not_here_say_so():
    """A ported script's ``lr_scheduler.SWALR`` names where it is (it was a bare
    AttributeError); ``_LRScheduler`` is PyTorch's older base-class name. Every optimizer of
    ``torch.optim`` is here."""
    for name in ("Adadelta", "Adafactor", "Adagrad", "Adam", "Adamax", "AdamW", "ASGD",
                 "LBFGS", "NAdam", "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam"):  # fmt: skip
        assert issubclass(getattr(nb.nn.optim, name), object)
    with pytest.raises(AttributeError, match=r"has no SWALR: it is nabla.nn.optim.swa_utils"):
        nb.nn.optim.lr_scheduler.SWALR  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        nb.nn.optim.Nothing  # noqa: B018
    assert nb.nn.optim.lr_scheduler._LRScheduler is nb.nn.optim.lr_scheduler.LRScheduler


def test_sparse_adam_moves_only_the_rows_a_gradient_reaches():
    rng = np.random.default_rng(3)
    table = rng.standard_normal((6, 3)).astype(np.float32)
    emb = nb.nn.Embedding(6, 3, sparse=True)
    emb.weight = nb.constant(table.copy())
    opt = nb.nn.optim.SparseAdam(emb.parameters(), lr=0.1)
    w, mu, nu = table.astype(np.float64), np.zeros((6, 3)), np.zeros((6, 3))
    for t, ids in enumerate(([0, 2, 2], [1, 5], [2, 3]), start=1):
        opt.zero_grad()
        nb.sum(emb(np.array(ids)) ** 2).backward()
        opt.step()
        g = np.zeros((6, 3))
        np.add.at(g, ids, 2 * w[ids])  # d/dW of the looked-up rows' squares
        hit = np.abs(g).sum(1) > 0
        mu[hit] = 0.9 * mu[hit] + 0.1 * g[hit]
        nu[hit] = 0.999 * nu[hit] + 0.001 * g[hit] ** 2
        size = 0.1 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        w[hit] -= size * mu[hit] / (np.sqrt(nu[hit]) + 1e-8)
    np.testing.assert_allclose(emb.weight.numpy(), w, rtol=1e-5, atol=1e-6)
    assert emb.weight.numpy()[4].tolist() == table[4].tolist()  # (never looked up)
