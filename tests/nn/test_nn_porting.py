"""What a model ported from PyTorch reaches for besides layers: the losses as modules
(``nn.CrossEntropyLoss()``) and ``F.cross_entropy``, ``nn.init``'s in-place initializers,
``Module.apply``/``to``/``double``, ``nn.utils`` and ``Optimizer.param_groups``. References
are NumPy, written from PyTorch's documented formulas."""

import math

import numpy as np
import pytest

import nabla as nb

nn = nb.nn
F = nn.functional
rng = np.random.default_rng(3)


def t(a, dtype=np.float32):
    return nb.constant(np.asarray(a, dtype=dtype))


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _cross_entropy_ref(z, y, weight=None, ignore_index=-100, smoothing=0.0, reduction="mean"):
    """PyTorch's cross-entropy of class indices: the weighted NLL and the smoothing term,
    a "mean" divided by the summed weights of the counted targets."""
    lp = _log_softmax(z.astype(np.float64))
    classes = z.shape[-1]
    w = np.ones(classes) if weight is None else weight.astype(np.float64)
    counted = y != ignore_index
    safe = np.where(counted, y, 0)
    nll = -lp[np.arange(len(y)), safe] * w[safe]
    smooth = -(lp * w).sum(-1)
    loss = np.where(counted, (1 - smoothing) * nll + smoothing / classes * smooth, 0.0)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / np.where(counted, w[safe], 0.0).sum()


LOGITS = rng.standard_normal((7, 5)).astype(np.float32)
TARGET = np.array([0, 4, -100, 2, 1, 1, 3])
WEIGHT = (rng.random(5) + 0.5).astype(np.float32)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"weight": WEIGHT},
        {"label_smoothing": 0.2},
        {"weight": WEIGHT, "label_smoothing": 0.1},
        {"reduction": "sum"},
        {"reduction": "none", "weight": WEIGHT},
    ],
)
def test_cross_entropy_module_and_function_follow_pytorch(kw):
    ref = _cross_entropy_ref(
        LOGITS,
        TARGET,
        kw.get("weight"),
        smoothing=kw.get("label_smoothing", 0.0),
        reduction=kw.get("reduction", "mean"),
    )
    module = nn.CrossEntropyLoss(**kw)
    got = module(t(LOGITS), nb.constant(TARGET)).numpy()
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-7)
    fn = F.cross_entropy(t(LOGITS), nb.constant(TARGET), **kw).numpy()  # -100 ignored too
    np.testing.assert_allclose(fn, ref, rtol=2e-6, atol=1e-7)
    assert ("weight" in module.state_dict()) == ("weight" in kw)  # a buffer, as PyTorch's


def test_cross_entropy_gradient_and_compile():
    kw = {"weight": WEIGHT, "label_smoothing": 0.1}
    loss = nn.CrossEntropyLoss(**kw)
    g = nb.grad(lambda z: loss(z, nb.constant(TARGET)))(t(LOGITS, np.float64))
    eps, fd = 1e-6, np.zeros_like(LOGITS, dtype=np.float64)
    for i in np.ndindex(LOGITS.shape):
        up, down = LOGITS.astype(np.float64), LOGITS.astype(np.float64)
        up[i] += eps
        down[i] -= eps
        fd[i] = (
            _cross_entropy_ref(up, TARGET, WEIGHT, smoothing=0.1)
            - _cross_entropy_ref(down, TARGET, WEIGHT, smoothing=0.1)
        ) / (2 * eps)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-5, atol=1e-8)
    step = nb.compile(lambda z, y: loss(z, y))
    for _ in range(2):
        got = step(t(LOGITS), nb.constant(TARGET)).item()
    assert got == pytest.approx(_cross_entropy_ref(LOGITS, TARGET, WEIGHT, smoothing=0.1), 1e-6)
    assert step.stats.misses == 1


def test_cross_entropy_class_axis_and_probability_targets():
    z = rng.standard_normal((2, 5, 3)).astype(np.float32)  # PyTorch's (N, C, L)
    y = rng.integers(0, 5, (2, 3))
    ref = _cross_entropy_ref(np.moveaxis(z, 1, -1).reshape(-1, 5), y.reshape(-1))
    got = nn.CrossEntropyLoss(axis=1)(t(z), nb.constant(y)).item()
    assert got == pytest.approx(ref, rel=1e-6)
    probs = np.exp(_log_softmax(rng.standard_normal((7, 5))))
    soft = F.cross_entropy(t(LOGITS), t(probs)).item()  # ignore_index does not apply
    assert soft == pytest.approx(-(probs * _log_softmax(LOGITS)).sum(-1).mean(), rel=1e-5)


def test_nll_loss_weight_and_ignore_index():
    lp = _log_softmax(LOGITS)
    ref = _cross_entropy_ref(LOGITS, TARGET, WEIGHT)
    got = nn.NLLLoss(weight=WEIGHT)(t(lp), nb.constant(TARGET)).item()
    assert got == pytest.approx(ref, rel=1e-6)
    got_f = F.nll_loss(t(lp), nb.constant(TARGET), weight=t(WEIGHT), ignore_index=-100).item()
    assert got_f == pytest.approx(ref, rel=1e-6)
    assert F.nll_loss(t(lp), nb.constant(TARGET), weight=t(WEIGHT)).item() == got_f  # -100
    with pytest.raises(IndexError, match=r"class index -100 .*ignore_index=-100"):
        F.nll_loss(t(lp), nb.constant(TARGET), ignore_index=None)  # every target counts
    # PyTorch's positional form: the weights third
    assert F.nll_loss(t(lp), nb.constant(TARGET), t(WEIGHT)).item() == got_f
    assert F.nll_loss(t(lp), nb.constant(TARGET), WEIGHT.tolist()).item() == pytest.approx(got_f)
    with pytest.raises(TypeError, match="reduction must be a string, got Tensor"):
        F.nll_loss(t(lp), nb.constant(TARGET), t(WEIGHT), weight=t(WEIGHT))
    with pytest.raises(TypeError, match="reduction must be a string, got int"):
        F.nll_loss(t(lp), nb.constant(TARGET), 1)


def test_pointwise_loss_modules():
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    d = x - y
    cases = [
        (nn.MSELoss(), (d**2).mean()),
        (nn.L1Loss(reduction="sum"), np.abs(d).sum()),
        (
            nn.SmoothL1Loss(beta=0.5),
            np.where(np.abs(d) < 0.5, 0.5 * d**2 / 0.5, np.abs(d) - 0.25).mean(),
        ),
        (
            nn.HuberLoss(delta=0.7),
            np.where(np.abs(d) <= 0.7, 0.5 * d**2, 0.7 * (np.abs(d) - 0.35)).mean(),
        ),
    ]
    for module, ref in cases:
        assert module(t(x), t(y)).item() == pytest.approx(ref, rel=1e-5), module
    p = 1 / (1 + np.exp(-x))
    label = (y > 0).astype(np.float64)
    w = WEIGHT[:3].astype(np.float64)
    bce = -(w * (label * np.log(p) + (1 - label) * np.log(1 - p))).mean()
    assert nn.BCELoss(weight=w)(t(p), t(label)).item() == pytest.approx(bce, rel=1e-5)
    bcel = -(w * label * np.log(p) + (1 - label) * np.log(1 - p)).mean()
    assert nn.BCEWithLogitsLoss(pos_weight=w)(t(x), t(label)).item() == pytest.approx(
        bcel, rel=1e-5
    )
    lq, pq = _log_softmax(x), np.exp(_log_softmax(y))
    kl = (pq * (np.log(pq) - lq)).sum() / 4
    assert nn.KLDivLoss(reduction="batchmean")(t(lq), t(pq)).item() == pytest.approx(kl, 1e-5)
    with pytest.raises(ValueError, match=r"CrossEntropyLoss: reduction must be one of"):
        nn.CrossEntropyLoss(reduction="avg")
    assert "label_smoothing=0.1" in repr(nn.CrossEntropyLoss(label_smoothing=0.1))


# ----------------------------------------------------------------------------- nn.init
def test_in_place_initializers_keep_the_parameter():
    lin = nn.Linear(300, 200)
    w = lin.weight
    fan_in, fan_out = 300, 200
    cases = [
        (nn.init.xavier_uniform_, {}, math.sqrt(6 / (fan_in + fan_out)), None),
        (nn.init.xavier_normal_, {}, None, math.sqrt(2 / (fan_in + fan_out))),
        (nn.init.kaiming_uniform_, {"nonlinearity": "relu"}, math.sqrt(6 / fan_in), None),
        (nn.init.kaiming_normal_, {"a": 0.1}, None, math.sqrt(2 / 1.01 / fan_in)),
        (nn.init.kaiming_normal_, {"mode": "fan_out"}, None, math.sqrt(2 / 1.0001 / fan_out)),
        (nn.init.uniform_, {"a": -0.1, "b": 0.3}, None, 0.4 / math.sqrt(12)),
        (nn.init.normal_, {"mean": 1.0, "std": 0.02}, None, 0.02),
    ]
    for fn, kw, bound, std in cases:
        assert fn(w, **kw) is w and lin.weight is w and w.requires_grad
        v = w.numpy()
        if bound is not None:
            assert np.abs(v).max() <= bound and np.abs(v).max() > 0.98 * bound, fn
            std = bound / math.sqrt(3)
        assert abs(v.std() - std) < 0.03 * std, (fn, v.std(), std)
    nn.init.constant_(lin.bias, 0.5)
    np.testing.assert_array_equal(lin.bias.numpy(), np.full(200, 0.5, np.float32))
    nn.init.zeros_(lin.bias)
    assert not lin.bias.numpy().any()
    lin(t(rng.standard_normal((2, 300)))).sum().backward()  # still trainable
    assert lin.weight.grad.shape == (300, 200)
    e = nn.init.eye_(nb.zeros((3, 4)))
    np.testing.assert_array_equal(e.numpy(), np.eye(3, 4))
    for shape in ((4, 6), (6, 4), (3, 2, 2)):
        q = nn.init.orthogonal_(nb.zeros(shape), gain=2.0).numpy().reshape(shape[0], -1)
        small = min(q.shape)
        gram = q @ q.T if q.shape[0] == small else q.T @ q
        np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-5)
    with pytest.raises(ValueError, match="orthogonal_: needs a tensor of at least 2 dims"):
        nn.init.orthogonal_(nb.zeros((3,)))


def test_trunc_normal_and_gains():
    w = nn.init.trunc_normal_(nb.zeros((200, 300)), mean=0.0, std=1.0, a=-1.0, b=2.0)
    v = w.numpy()
    assert v.min() >= -1.0 and v.max() <= 2.0 and v.min() < -0.99 and v.max() > 1.99
    # the truncated normal's mean: (phi(a) - phi(b)) / (Phi(b) - Phi(a))
    phi = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    mean = (phi(-1.0) - phi(2.0)) / (cdf(2.0) - cdf(-1.0))
    assert abs(v.mean() - mean) < 0.01
    narrow = nn.init.trunc_normal_(nb.zeros((10000,)), std=1.0, a=-0.01, b=0.01).numpy()
    assert np.abs(narrow).max() <= 0.01 and abs(narrow.std() - 0.02 / math.sqrt(12)) < 2e-4
    k = nb.random.key(5)
    a = nn.init.trunc_normal_(nb.zeros((50,)), std=0.02, key=k).numpy()
    np.testing.assert_array_equal(a, nn.init.trunc_normal_(nb.zeros((50,)), std=0.02, key=k))
    with pytest.raises(ValueError, match="accepts too few draws"):
        nn.init.trunc_normal_(nb.zeros((10,)), a=60.0, b=80.0)
    assert nn.init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        nn.init.calculate_gain("swish")
    with pytest.raises(TypeError, match="zeros_: expected a Tensor to fill, got ndarray"):
        nn.init.zeros_(np.zeros(3))
    with pytest.raises(TypeError, match="normal_: expected a floating tensor"):
        nn.init.normal_(nb.zeros((3,), dtype=nb.int32))
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out'"):
        nn.init.kaiming_uniform_(nb.zeros((3, 3)), mode="fan")


# ----------------------------------------------------------------------------- Module
def test_apply_visits_children_first_and_to_casts_in_place():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    seen = []
    assert model.apply(lambda m: seen.append(type(m).__name__)) is model
    assert seen == ["Linear", "BatchNorm1d", "ReLU", "Linear", "Sequential"]
    w = model[0].weight
    before = w.numpy()
    assert model.double() is model and model[0].weight is w
    assert w.dtype == nb.float64 and w.requires_grad
    assert model[1].running_var.dtype == nb.float64
    assert model[1].num_batches_tracked.dtype == nb.int64  # only floating tensors are cast
    np.testing.assert_array_equal(w.numpy(), before)
    model(t(rng.standard_normal((5, 4)), np.float64)).sum().backward()
    assert w.grad.dtype == nb.float64
    model.to(nb.float32)
    assert w.dtype == nb.float32
    model.to("cpu", dtype="bfloat16")
    assert w.dtype == nb.bfloat16
    model.to(nb.zeros((1,), dtype=nb.float16))  # a tensor's dtype (and device)
    assert w.dtype == nb.float16
    model.float()
    assert model[3].bias.dtype == nb.float32
    with pytest.raises(TypeError, match=r"Sequential.to: dtype must be floating point"):
        model.to(nb.int32)
    with pytest.raises(TypeError, match=r"Sequential.to: unsupported dtype 3"):
        model.to(3)


# ----------------------------------------------------------------------------- nn.utils
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf, "inf"])
def test_clip_grad_norm_orders(norm_type):
    grads = [rng.standard_normal((3, 4)) * 3, rng.standard_normal(5)]
    params = [nb.zeros(g.shape, dtype=nb.float64) for g in grads]
    for p, g in zip(params, grads):
        p.grad = t(g, np.float64)
    flat = np.concatenate([g.ravel() for g in grads])
    total = (
        np.abs(flat).max()
        if float(norm_type) == math.inf  # ("inf" as PyTorch takes it too)
        else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    )
    norm = nn.utils.clip_grad_norm_(params, 1.5, norm_type=norm_type)
    assert norm.item() == pytest.approx(total, rel=1e-12)
    scale = min(1.5 / (total + 1e-6), 1.0)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-12)


def test_utils_errors_and_flat_vectors():
    p = nb.zeros((2,))
    p.grad = t([np.inf, 1.0])
    with pytest.raises(RuntimeError, match="total norm of order 2.0 .* is inf"):
        nn.utils.clip_grad_norm_(p, 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="clip_grad_norm_: norm_type must be a number > 0"):
        nn.utils.clip_grad_norm_(p, 1.0, norm_type=0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    vec = nn.utils.parameters_to_vector(model.parameters())
    assert vec.shape == (26,)
    want = np.concatenate([q.numpy().ravel() for q in model.parameters()])
    np.testing.assert_array_equal(vec.numpy(), want)
    w = model[0].weight
    nn.utils.vector_to_parameters(vec * 2.0, model)
    assert model[0].weight is w and w.requires_grad
    np.testing.assert_array_equal(nn.utils.parameters_to_vector(model).numpy(), 2 * want)
    with pytest.raises(ValueError, match=r"vec of shape \(3,\) for 4 parameters of 26 values"):
        nn.utils.vector_to_parameters(vec[:3], model)


# ----------------------------------------------------------------------------- param_groups
def test_param_groups_view_drives_the_optimizer():
    model = nn.Linear(3, 2)
    opt = nn.optim.Adam([{"params": model, "lr": 0.05, "betas": [0.8, 0.9]}], lr=1e-3)
    assert opt.lr == 0.05 and opt.betas == (0.8, 0.9) and opt.model is model
    (group,) = opt.param_groups
    flags = ["maximize", "foreach", "fused", "capturable", "differentiable"]  # PyTorch's keys
    assert list(group) == ["params", "lr", "betas", "eps", "weight_decay", "amsgrad", *flags]
    assert group["maximize"] is False and group["foreach"] is None
    assert len(group["params"]) == 2
    for g in opt.param_groups:
        g["lr"] = 0.01
    assert opt.lr == 0.01 and opt.param_groups[0]["lr"] == 0.01
    with pytest.raises(KeyError, match="no setting 'momentum'"):
        group["momentum"] = 0.9
    with pytest.raises(ValueError, match="2 parameter groups given; .* one optimizer per group"):
        nn.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "lr": 0.1}], lr=0.1)
    with pytest.raises(ValueError, match=r"unknown settings \['foo'\]"):
        nn.optim.SGD([{"params": [model.weight], "foo": 1}], lr=0.1)


def test_maximize_switched_between_steps_takes_effect_eagerly_and_compiled():
    # the compiled update read maximize from the optimizer inside its trace: a switch after
    # the first step was baked out, silently
    for compiled in (False, True):
        w = nb.constant(np.array([1.0, -2.0], np.float32))
        w.requires_grad = True
        opt = nn.optim.SGD([w], lr=0.1)
        step = opt.compile_step(lambda p, x: nb.sum(p[0] * x)) if compiled else None
        x = nb.constant(np.ones(2, np.float32))
        for k in range(4):
            if k == 2:
                opt.param_groups[0]["maximize"] = True  # two steps down, two back up
            if compiled:
                step(x)
            else:
                opt.zero_grad()
                nb.sum(w * x).backward()
                opt.step()
        np.testing.assert_allclose(w.numpy(), [1.0, -2.0], rtol=1e-6)
        assert opt.maximize is True


def test_initial_lr_through_param_groups_resumes_a_schedule_as_pytorch():
    """PyTorch's idiom before a scheduler made with ``last_epoch >= 0``: the group's
    ``initial_lr`` (``setdefault`` gives the rate when none is set)."""
    model = nn.Linear(3, 2)
    opt = nn.optim.SGD(model, lr=0.1)
    assert "initial_lr" not in opt.param_groups[0]
    opt.param_groups[0]["initial_lr"] = 0.4
    assert opt.initial_lr == 0.4 and opt.param_groups[0]["initial_lr"] == 0.4
    sched = nn.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5, last_epoch=4)
    assert sched.last_epoch == 5 and opt.lr == 0.1  # (PyTorch 2.14: the same)
    with pytest.warns(UserWarning, match="before the optimizer's step"):
        sched.step()  # epoch 6: the step's boundary, the current rate times gamma
    assert opt.lr == pytest.approx(0.05)
    other = nn.optim.SGD(model, lr=0.2)
    assert other.param_groups[0].setdefault("initial_lr", 0.2) == 0.2 and other.initial_lr == 0.2


def test_a_rate_set_through_param_groups_reaches_a_compiled_step_without_a_retrace():
    model = nn.Linear(3, 1, bias=False)
    opt = nn.optim.SGD([{"params": model, "lr": 0.1}])
    step = opt.compile_step(lambda m, x: (m(x) ** 2).sum())
    x = rng.standard_normal((4, 3)).astype(np.float32)
    w = model.weight.numpy().astype(np.float64)
    for lr in (0.1, 0.1, 0.02, 0.005):
        for g in opt.param_groups:
            g["lr"] = lr
        step(t(x))
        w = w - lr * (2 * x.T @ (x @ w))  # d/dw sum((x w)^2)
        np.testing.assert_allclose(model.weight.numpy(), w, rtol=1e-5, atol=1e-6)
    assert step.stats.misses == 1


# ----------------------------------------------------------------------------- data
class _Examples(nn.data.Dataset):
    def __init__(self, n):
        self.x = rng.standard_normal((n, 3)).astype(np.float32)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "label": int(i % 3), "name": f"ex{i}"}


def test_a_map_style_dataset_batches_like_its_arrays():
    ds = _Examples(10)
    labels = np.arange(10) % 3
    by_arrays = nn.DataLoader((ds.x, labels), batch_size=4, shuffle=True, seed=2)
    by_items = nn.DataLoader(ds, batch_size=4, shuffle=True, seed=2)
    assert len(by_items) == 3
    order = by_items.order(0)
    for b, ((x, y), batch) in enumerate(zip(by_arrays, by_items, strict=True)):
        np.testing.assert_array_equal(batch["x"].numpy(), x.numpy())
        np.testing.assert_array_equal(batch["label"].numpy(), y.numpy())
        assert batch["label"].dtype == nb.int64  # Python ints, as PyTorch's default_collate
        names = [f"ex{i}" for i in order[4 * b : 4 * b + 4]]
        assert batch["name"] == names  # a dict's field of strings: a list (PyTorch's)
    # each of 2 processes reads its half of every global batch of a dataset too
    halves = [
        [
            b["x"].numpy()
            for b in nn.DataLoader(ds, 4, True, drop_last=True, seed=2, num_replicas=2, rank=r)
        ]
        for r in (0, 1)
    ]
    whole = [x.numpy() for x, _ in nn.DataLoader((ds.x, labels), 4, True, drop_last=True, seed=2)]
    for h0, h1, w in zip(*halves, whole, strict=True):
        np.testing.assert_array_equal(np.concatenate([h0, h1]), w)
    pairs = nn.data.TensorDataset(np.arange(6.0).reshape(3, 2), np.array([1, 2, 3]))
    assert pairs[1][1] == 2 and len(pairs) == 3
    import collections

    Pair = collections.namedtuple("Pair", "x y")
    batch = nn.data.default_collate([Pair(np.ones(2), 1), Pair(np.zeros(2), 2)])
    assert type(batch) is Pair and batch.x.shape == (2, 2) and batch.y.tolist() == [1, 2]
    sizes = list(nn.DataLoader(pairs, batch_size=2, collate_fn=len))
    assert sizes == [2, 1]
    with pytest.raises(ValueError, match="collate_fn applies to a dataset"):
        nn.DataLoader(np.zeros(3), collate_fn=len)


# ----------------------------------------------------------------------------- functional
def test_functional_pytorch_spellings():
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    np.testing.assert_allclose(F.softmax(t(x), dim=1).numpy().sum(1), np.ones((2, 5, 4)), rtol=1e-6)
    np.testing.assert_allclose(
        F.log_softmax(t(x), dim=-1).numpy(), _log_softmax(x.astype(np.float64)), atol=1e-5
    )
    with pytest.raises(TypeError, match="softmax: pass axis or dim, not both"):
        F.softmax(t(x), 1, dim=1)
    assert nn.Softmax(dim=1)(t(x)).numpy().sum(1) == pytest.approx(np.ones((2, 5, 4)))
    # F.pad: pairs from the last dim backwards; negative amounts crop
    np.testing.assert_array_equal(
        F.pad(t(x), (1, 2, -1, 3)).numpy(),
        np.pad(x[:, :, 1:, :], ((0, 0), (0, 0), (0, 3), (1, 2))),
    )
    np.testing.assert_array_equal(
        F.pad(t(x), (1, 2, 2, 1), mode="reflect").numpy(),
        np.pad(x, ((0, 0), (0, 0), (2, 1), (1, 2)), mode="reflect"),
    )
    np.testing.assert_array_equal(
        F.pad(t(x), (1, 1), mode="circular").numpy(),
        np.pad(x, ((0, 0), (0, 0), (0, 0), (1, 1)), mode="wrap"),
    )
    with pytest.raises(ValueError, match=r"pad: pad=\(1,\) needs two ints per padded dim"):
        F.pad(t(x), (1,))
    for p in (2.0, 1.0, math.inf):
        norm = np.linalg.norm(x, ord=p, axis=1, keepdims=True)
        np.testing.assert_allclose(F.normalize(t(x), p=p).numpy(), x / norm, rtol=1e-5)
    y = rng.standard_normal((1, 3, 5, 4)).astype(np.float32)
    cos = (x * y).sum(1) / np.sqrt((x * x).sum(1) * (y * y).sum(1))
    np.testing.assert_allclose(F.cosine_similarity(t(x), t(y)).numpy(), cos, rtol=1e-5)
    idx = np.array([[0, 3], [2, 1]])
    hot = F.one_hot(nb.constant(idx))
    assert hot.dtype == nb.int64
    np.testing.assert_array_equal(hot.numpy(), np.eye(4, dtype=np.int64)[idx])
    with pytest.raises(ValueError, match="class index 3 is out of range for 2 classes"):
        F.one_hot(nb.constant(idx), 2)


def _adaptive_ref(img, oh, ow):
    n, h, w, c = img.shape
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            r0, r1 = i * h // oh, -(-(i + 1) * h // oh)
            c0, c1 = j * w // ow, -(-(j + 1) * w // ow)
            out[:, i, j] = img[:, r0:r1, c0:c1].mean((1, 2))
    return out


@pytest.mark.parametrize("size", [1, (3, 4), (7, 5), (2, None)])
def test_adaptive_avg_pool2d_bins(size):
    img = rng.standard_normal((2, 7, 10, 3)).astype(np.float32)
    oh, ow = (size, size) if isinstance(size, int) else size
    ref = _adaptive_ref(img, oh, 10 if ow is None else ow)
    np.testing.assert_allclose(nn.AdaptiveAvgPool2d(size)(t(img)).numpy(), ref, atol=1e-6)


def test_small_layers_and_parameter():
    x = rng.standard_normal((4, 3)).astype(np.float32)
    pr = nn.PReLU(3, init=0.1)
    np.testing.assert_allclose(pr(t(x)).numpy(), np.where(x > 0, x, 0.1 * x), rtol=1e-6)
    assert [n for n, _ in pr.named_parameters()] == ["weight"]
    with pytest.raises(ValueError, match=r"PReLU\(3\): input of shape \(4, 5\) needs 3"):
        pr(nb.zeros((4, 5)))
    assert nn.Unflatten(1, (3, 1))(t(x)).shape == (4, 3, 1)
    drop = nn.Dropout2d(0.5)
    out = drop(nb.ones((64, 4, 4, 8))).numpy()
    assert (out == out[:, :1, :1, :]).all()  # one draw per image and channel
    assert set(np.unique(out)) == {0.0, 2.0} and abs((out > 0).mean() - 0.5) < 0.1
    assert (drop.eval()(t(x[None, None])).numpy() == x).all()

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(nb.ones((3,)))
            self.frozen = nn.Parameter(nb.ones((3,)), requires_grad=False)

        def forward(self, v):
            return v * self.w * self.frozen

    m = Scale()
    assert [n for n, _ in m.named_parameters()] == ["w", "frozen"]
    m(t(x)).sum().backward()
    np.testing.assert_allclose(m.w.grad.numpy(), x.sum(0), rtol=1e-6)


def test_transformer_stacks_copy_their_layer():
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0)
    enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16))
    assert len(enc.layers) == 2 and enc.layers[0].linear1.weight is not layer.linear1.weight
    np.testing.assert_array_equal(
        enc.layers[1].linear1.weight.numpy(), layer.linear1.weight.numpy()
    )
    x = t(rng.standard_normal((2, 5, 16)))
    want = enc.norm(enc.layers[1](enc.layers[0](x, is_causal=True), is_causal=True))
    np.testing.assert_allclose(enc(x, is_causal=True).numpy(), want.numpy(), rtol=1e-6)
    # the copies train apart
    opt = nn.optim.SGD(enc, lr=0.1)
    (enc(x) * t(rng.standard_normal((2, 5, 16)))).sum().backward()  # (a norm's square: no grad)
    opt.step()
    assert not np.array_equal(
        enc.layers[0].linear1.weight.numpy(), enc.layers[1].linear1.weight.numpy()
    )
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0), 2)
    assert dec(x, enc(x), tgt_is_causal=True).shape == (2, 5, 16)
    with pytest.raises(ValueError, match="num_layers must be a positive int"):
        nn.TransformerEncoder(layer, 0)
    assert len(nn.TransformerEncoder(encoder_layer=layer, num_layers=3).layers) == 3


# ----------------------------------------------------------------------------- copies
def test_deepcopy_and_pickle_of_modules_and_tensors():
    import copy
    import pickle

    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))  # lazy initial values
    twin = copy.deepcopy(model)
    assert twin[0].weight is not model[0].weight and twin[0].weight.requires_grad
    x = t(rng.standard_normal((5, 3)))
    np.testing.assert_array_equal(twin(x).numpy(), model(x).numpy())
    opt = nn.optim.SGD(model, lr=0.1)
    model(x).sum().backward()
    opt.step()
    assert not np.array_equal(twin[0].weight.numpy(), model[0].weight.numpy())
    back = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(back(x).numpy(), model(x).numpy())
    assert back[0].weight.requires_grad and back[1].__class__ is nn.ReLU
    for copied in (twin, back):  # their parameters are leaves that backward reaches
        copied(x).sum().backward()
        assert copied[0].weight.grad is not None and copied[2].bias.grad is not None
    v = nb.constant(np.arange(4.0, dtype=np.float32)) * 2  # pending
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(v)).numpy(), [0, 2, 4, 6])
    assert pickle.loads(pickle.dumps(nb.zeros((2,), dtype=nb.bfloat16))).dtype == nb.bfloat16
    np.testing.assert_array_equal(copy.deepcopy(v).numpy(), v.numpy())
    # an optimizer after a step (holding its compiled update) copies and pickles too
    twin_opt = copy.deepcopy(opt)
    twin_opt.step(nb.tree_map(nb.ones_like, twin_opt.params))  # traces its own update
    assert twin_opt._step_count == opt._step_count + 1
    assert pickle.loads(pickle.dumps(opt)).lr == opt.lr


# ----------------------------------------------------------------------------- in place
def test_in_place_methods():
    x = nb.constant(np.arange(4.0, dtype=np.float32))
    alias = x
    assert x.add_(1.0) is x and alias is x
    x.mul_(2).sub_(nb.ones((4,)), alpha=0.5)
    np.testing.assert_array_equal(x.numpy(), [1.5, 3.5, 5.5, 7.5])
    x.clamp_(min=2.0, max=6.0).div_(2)
    np.testing.assert_array_equal(x.numpy(), [1.0, 1.75, 2.75, 3.0])
    x.zero_().add_(nb.full((4,), 2.0, dtype=nb.float64))  # a float64 result cast back
    assert x.dtype == nb.float32 and (x.numpy() == 2).all()
    x.fill_(3).copy_(nb.constant([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(x.numpy(), [1, 2, 3, 4])
    with pytest.raises(ValueError, match=r"div_: the in-place result float32\[3\] does not fit"):
        nb.constant(np.arange(3)).div_(2)
    # an EMA of a model's parameters, as PyTorch code writes it
    import copy

    m = nn.Linear(3, 2)
    ema = copy.deepcopy(m)
    nn.init.zeros_(ema.weight)
    with nb.no_grad():
        for pe, p in zip(ema.parameters(), m.parameters()):
            pe.mul_(0.9).add_(p, alpha=0.1)
    np.testing.assert_allclose(ema.weight.numpy(), 0.1 * m.weight.numpy(), rtol=1e-6)
    assert ema.weight.requires_grad

    def f(v):
        w = v * 2
        w.add_(v)  # an intermediate updated in place keeps its history: w = 3 v
        return (w * w).sum()

    np.testing.assert_allclose(nb.grad(f)(t([1.0, 2.0])).numpy(), [18.0, 36.0])
    assert [c.shape for c in x.chunk(2, dim=0)] == [(2,), (2,)]


def test_in_place_changes_of_a_view_reach_the_tensor_it_was_read_from():
    """As PyTorch's views: ``w[pad].zero_()``, ``w.grad[0].zero_()`` and ``x.view(-1)[0] =
    v`` had changed only a temporary, silently."""
    w = nb.constant(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), requires_grad=True)
    with nb.no_grad():
        w[0].fill_(0.0)
    np.testing.assert_array_equal(w.numpy(), [[0, 0], [3, 4]])
    assert w.requires_grad and w._impl.requires_grad  # still the leaf
    w.data[1].mul_(2)
    np.testing.assert_array_equal(w.numpy(), [[0, 0], [6, 8]])
    (w * w).sum().backward()
    w.grad[0].add_(1.0)
    np.testing.assert_array_equal(w.grad.numpy(), [[1, 1], [12, 16]])
    emb = nn.Embedding(4, 3)
    with nb.no_grad():
        emb.weight[2].zero_()
    assert not emb.weight.numpy()[2].any() and emb.weight.numpy()[[0, 1, 3]].all()
    a = nb.constant(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    a[:, 1].mul_(2)
    a.view(-1)[0] = 9.0
    a.T[0, 1] = 7.0  # a[1, 0]
    np.testing.assert_array_equal(a.numpy(), [[9, 4], [7, 8]])
    x = nb.constant(np.arange(24.0, dtype=np.float32).reshape(2, 3, 4))
    x.permute(2, 0, 1)[1].fill_(-1.0)
    assert (x.numpy()[:, :, 1] == -1).all() and (x.numpy()[:, :, 0] >= 0).all()
    y = nb.constant(np.arange(6.0, dtype=np.float32))
    v = y[1:4]
    v[0:2].zero_()  # a view of a view: both follow
    np.testing.assert_array_equal(y.numpy(), [0, 0, 0, 3, 4, 5])
    np.testing.assert_array_equal(v.numpy(), [0, 0, 3])
    # an integer-tensor index or a mask reads a copy, as PyTorch; += gives a new value
    a[nb.constant(np.array([0]))].zero_()
    a[a > 100].zero_()
    row = a[0]
    row += 100.0
    np.testing.assert_array_equal(a.numpy(), [[9, 4], [7, 8]])
    # a view changed inside a compiled function reaches captured state, at every call
    state = nb.constant(np.array([1.0, 2.0, 3.0], np.float32))

    @nb.compile
    def bump(s):
        state[1:].add_(s)
        return state.sum()

    bump(nb.constant(1.0))
    np.testing.assert_array_equal(bump(nb.constant(1.0)).numpy(), 10.0)
    np.testing.assert_array_equal(state.numpy(), [1, 4, 5])


def test_views_share_their_base_both_ways_as_pytorch_views_share_storage():
    """A view sees later in-place changes of its base and of sibling views (views had
    been snapshots: a write through a stale view brought back values the base had since
    changed); two transposes that fold into one write to the right places (``x.T.T[0]``,
    a second write through ``x.T`` had scrambled ``x``); a 0-d integer tensor indexes as an
    int (a view: in-place writes in a ``fori_loop`` body reach the carry); PyTorch's
    ``reshape`` of a transposed tensor is a copy (``view`` stays a view); and ``grad`` of a
    function that updates its argument in place differentiates at the value passed in."""
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = nb.constant(a)
    v, col = x[0], x[:, 1]
    x.mul_(2.0)
    np.testing.assert_array_equal(v.numpy(), 2 * a[0])
    v.add_(1.0)
    np.testing.assert_array_equal(col.numpy(), [3.0, 10.0, 18.0])  # the sibling sees it
    x.mul_(2.0)
    v.add_(1.0)  # the base's change is not lost: v had it
    np.testing.assert_array_equal(x.numpy()[0], (2 * a[0] + 1) * 2 + 1)
    x = nb.constant(a)
    p, q = x[:, :3], x[:, 1:]
    p.zero_()
    q.add_(1.0)
    np.testing.assert_array_equal(x.numpy(), [[0, 1, 1, 4], [0, 1, 1, 8], [0, 1, 1, 12]])

    x = nb.constant(a)
    x.T.T[0].zero_()
    np.testing.assert_array_equal(x.numpy(), np.concatenate([np.zeros((1, 4)), a[1:]]))
    y = nb.constant(a) * 1.0
    y.T[0].fill_(-1.0)
    y.T[2].mul_(10.0)
    want = a.copy()
    want[:, 0], want[:, 2] = -1.0, a[:, 2] * 10
    np.testing.assert_array_equal(y.numpy(), want)
    c = nb.constant(np.arange(27.0, dtype=np.float32).reshape(3, 3, 3))
    c.permute(1, 2, 0).permute(1, 2, 0)[0].zero_()
    assert (c.numpy()[:, :, 0] == 0).all() and (c.numpy()[:, :, 1:] != 0).all()

    x = nb.constant(a)
    x[nb.constant(np.int32(1))].fill_(5.0)
    assert (x.numpy()[1] == 5).all()

    def double_row(i, c):
        c[i % 3].mul_(2.0)
        return c

    rows = nb.fori_loop(0, 4, double_row, nb.constant(a) * 1.0)
    np.testing.assert_array_equal(rows.numpy(), a * np.array([[4.0], [2.0], [2.0]]))

    y = nb.constant(a) * 1.0
    z, w = y.T.reshape(-1), y.T.view(-1)
    y[0].zero_()
    np.testing.assert_array_equal(z.numpy(), a.T.reshape(-1))  # a copy, as PyTorch's
    assert (w.numpy()[::3] == 0).all()  # a view

    x = nb.constant(a)
    rows = [x[i] for i in range(3)]
    for i, r in enumerate(rows):  # a write to one row leaves the others' values as they are
        r.add_(float(i + 1))
    x.mul_(2.0)
    for i, r in enumerate(rows):
        np.testing.assert_array_equal(r.numpy(), (a[i] + i + 1) * 2)
    np.testing.assert_array_equal(x.numpy(), (a + np.array([[1.0], [2.0], [3.0]])) * 2)

    def f(t):
        t.mul_(2.0)
        return (t**2).sum()

    g = nb.grad(f)(nb.constant(np.array([1.0, 2.0], np.float32)))
    np.testing.assert_array_equal(g.numpy(), [8.0, 16.0])
    with pytest.raises(TypeError, match=r"view: reading the bits of a float32 tensor as nb.int32"):
        x.view(nb.int32)


def test_every_transform_updates_an_argument_the_function_updates_in_place():
    """``grad``/``vjp`` did already; ``jvp`` and ``vmap`` updated only their own copies. A
    ``vmap``ped argument takes each example's new value at its place along the mapped axis,
    as ``torch.func.vmap``'s input does."""
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)

    def double_sum(t):
        t.mul_(2.0)
        return (t**2).sum()

    x = nb.constant(a[0])
    out, tan = nb.jvp(double_sum, (x,), (nb.ones_like(x),))
    assert out.item() == 20.0 and tan.item() == 24.0  # at the value passed in
    np.testing.assert_array_equal(x.numpy(), 2 * a[0])

    x = nb.constant(a)
    np.testing.assert_array_equal(nb.vmap(double_sum)(x).numpy(), [20.0, 200.0])
    np.testing.assert_array_equal(x.numpy(), 2 * a)
    x = nb.constant(a)
    nb.vmap(lambda col: col.mul_(2.0).sum(), in_axes=1)(x)  # axis 1
    np.testing.assert_array_equal(x.numpy(), 2 * a)

    def first_to_five(r):
        r[0] = 5.0
        return r.sum()

    x = nb.constant(a)
    nb.vmap(first_to_five)(x)
    np.testing.assert_array_equal(x.numpy(), [[5, 1, 2], [5, 4, 5]])
    x = nb.constant(a)
    nb.vmap(lambda r: r.zero_())(x)  # one value for every example
    assert not x.numpy().any()
    x = nb.constant(a)
    nb.vmap(nb.vmap(lambda e: e.add_(1.0)))(x)
    np.testing.assert_array_equal(x.numpy(), a + 1)


# ----------------------------------------------------------------------------- .grad and .data
def test_grad_is_one_tensor_that_in_place_changes_and_backward_accumulates_into():
    lin = nn.Linear(3, 4)
    lin(nb.ones((1, 3))).sum().backward()
    g = lin.weight.grad
    assert lin.weight.grad is g  # the same object on every read
    assert lin.weight.grad.zero_() is g and lin.weight.grad.numpy().sum() == 0.0
    lin.bias.grad.mul_(0.5)
    np.testing.assert_array_equal(lin.bias.grad.numpy(), np.full(4, 0.5, np.float32))
    lin(nb.ones((1, 3))).sum().backward()  # accumulates into the held tensor
    assert lin.weight.grad is g and g.numpy().sum() == 12.0
    np.testing.assert_array_equal(lin.bias.grad.numpy(), np.full(4, 1.5, np.float32))
    opt = nn.optim.SGD(lin, lr=0.1)
    opt.zero_grad(set_to_none=False)
    assert lin.weight.grad is g and not g.numpy().any()
    lin.zero_grad()
    assert lin.weight.grad is None
    with pytest.raises(TypeError, match="grad: expected a Tensor or None"):
        lin.weight.grad = np.zeros((3, 4))


def test_data_handle_updates_its_tensor_in_place():
    lin = nn.Linear(2, 3)
    w = lin.weight
    before = w.numpy().copy()
    lin.weight.data.mul_(2.0)
    np.testing.assert_array_equal(w.numpy(), 2 * before)
    lin.weight.data[0, 0] = 5.0
    assert w.numpy()[0, 0] == 5.0 and w.requires_grad and lin.weight is w
    lin.weight.data = nb.zeros((2, 3))
    assert not w.numpy().any() and w.requires_grad
    assert not lin.bias.data.requires_grad
    lin(nb.ones((1, 2))).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.ones((2, 3)))


def test_a_held_data_handle_follows_its_tensor():
    """PyTorch's ``.data`` shares storage both ways: a handle taken before an in-place
    change of its tensor (``x[i] = v``, ``add_``, an optimizer's step, eager or compiled)
    holds the new value, and so do views read from the handle."""
    x = nb.constant(np.zeros(3, np.float32))
    d = x.data
    first = d[0]
    x.add_(1.0)
    x[0] = 5.0
    np.testing.assert_array_equal(d.numpy(), [5.0, 1.0, 1.0])
    assert first.item() == 5.0
    d.mul_(2.0)  # and back: the handle's change reaches x, once
    np.testing.assert_array_equal(x.numpy(), [10.0, 2.0, 2.0])
    np.testing.assert_array_equal(d.numpy(), [10.0, 2.0, 2.0])

    lin = nn.Linear(2, 1)
    held = lin.weight.data
    opt = nn.optim.SGD(lin, lr=1.0)
    lin(nb.ones((1, 2))).sum().backward()
    opt.step()
    np.testing.assert_array_equal(held.numpy(), lin.weight.numpy())
    step = opt.compile_step(lambda m, v: m(v).sum())
    for _ in range(2):
        step(nb.ones((1, 2)))
    np.testing.assert_array_equal(held.numpy(), lin.weight.numpy())
    assert not held.requires_grad and lin.weight.requires_grad


def test_aliases_a_probe_found_share_storage_as_pytorch_s():
    """Against PyTorch: a write through ``.data`` of a view reaches the view's base
    (``x[1:].data.add_(v)`` changed the view alone); the reshape of a one-element view
    (``x[1, 1].reshape(-1)``) is a view, not a copy; a compiled function that updates its
    argument in place, given a view, writes through to the base, as uncompiled; and one
    that updates a tensor in place and returns it returns that tensor, at every call."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = nb.constant(a)
    x[1:].data.add_(100.0)
    x.T.data.mul_(2.0)
    x[2].data[0] = -5.0
    want = a.copy()
    want[1:] += 100.0
    want *= 2.0
    want[2, 0] = -5.0
    np.testing.assert_array_equal(x.numpy(), want)

    y = nb.constant(a[:2, :3])
    r = y[1, 1].reshape(-1)
    r.add_(100.0)
    assert y.numpy()[1, 1] == a[1, 1] + 100.0
    flat = y[0, 2].flatten()
    y.mul_(2.0)
    np.testing.assert_array_equal(flat.numpy(), [2.0 * a[0, 2]])

    f = nb.compile(lambda v: (v.add_(10.0), v * 2.0)[1])
    z = nb.constant(a)
    for view in (z[1:], z.T, z[:, 1], z[0]):  # the first call traces, the rest hit
        f(view)
    want = a.copy()
    want[1:] += 10.0
    want += 10.0
    want[:, 1] += 10.0
    want[0] += 10.0
    np.testing.assert_array_equal(z.numpy(), want)

    w = nb.constant(np.array([1.0, 2.0], np.float32))

    def scale(s):
        w.mul_(s)
        return w, w * 1.0, w

    g = nb.compile(scale)
    for k in range(3):
        got = g(nb.constant(np.array([2.0, 3.0], np.float32)))
        assert got[0] is w and got[2] is w
        np.testing.assert_array_equal(got[1].numpy(), [2.0 ** (k + 1), 2.0 * 3.0 ** (k + 1)])
    h = nb.compile(lambda v: v.mul_(2.0))
    b = nb.constant(np.ones(2, np.float32))
    assert h(b) is b and h(b) is b
    np.testing.assert_array_equal(b.numpy(), [4.0, 4.0])


def test_a_data_write_on_a_computed_tensor_keeps_its_history():
    """PyTorch does not record a write through ``.data``: a computed tensor keeps its
    history and gradients pass straight through to what it was computed from (it took the
    handle's value without history: ``nb.grad`` gave zeros, ``backward`` raised)."""
    xs, ws = np.full((2, 2), 2.0, np.float32), np.full((2, 2), 3.0, np.float32)

    def f(x, w):
        y = x * w
        y.data[0] = 0.0
        return (y * y).sum()

    gx, gw = nb.grad(f, argnums=(0, 1))(nb.constant(xs), nb.constant(ws))
    np.testing.assert_array_equal(gx.numpy(), [[0, 0], [36, 36]])  # 2 y w, row 0 written
    np.testing.assert_array_equal(gw.numpy(), [[0, 0], [24, 24]])
    x = nb.constant(np.ones(3, np.float32), requires_grad=True)
    y = x * 2.0
    y.data.mul_(3.0)
    assert y.requires_grad
    np.testing.assert_array_equal(y.numpy(), [6.0, 6.0, 6.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_a_recorded_overwrite_keeps_a_computed_tensor_in_the_graph():
    """PyTorch records ``y.fill_(3)`` on a computed ``y``: it still requires grad and its
    gradient through the write is zero (it had left the graph: ``backward`` raised)."""
    for write in (
        lambda y: y.fill_(3.0),
        lambda y: y.zero_(),
        lambda y: y.__setitem__(slice(None), 1.0),
    ):
        x = nb.constant(np.ones((2, 2), np.float32), requires_grad=True)
        y = x * 2.0
        write(y)
        assert y.requires_grad
        (y * y).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 2)))
    x = nb.constant(np.ones((2, 2), np.float32), requires_grad=True)
    y = x * 2.0
    y[0] = 5.0  # a part: the rest keeps its gradient
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0], [8, 8]])


# ----------------------------------------------------------------------------- probe fixes
def test_normalize_and_cosine_of_a_zero_vector_have_finite_gradients():
    x = t([[3.0, 4.0], [0.0, 0.0]])
    g = nb.grad(lambda v: F.normalize(v, dim=1).sum())(x).numpy()
    np.testing.assert_allclose(g[1], [1e12, 1e12], rtol=1e-6)  # 1 / eps, as PyTorch
    np.testing.assert_allclose(g[0], [0.032, -0.024], rtol=1e-5)
    assert np.isfinite(nb.grad(lambda v: F.normalize(v, p=1.0).sum())(x).numpy()).all()
    # each norm clamped at eps by itself
    assert F.cosine_similarity(t([[1e-10, 0.0]]), t([[100.0, 0.0]])).item() == pytest.approx(
        0.01, rel=1e-5
    )
    gc = nb.grad(lambda v: F.cosine_similarity(v, t([[1.0, 2.0], [3.0, 4.0]])).sum())(x)
    np.testing.assert_allclose(gc.numpy()[1], [6e7, 8e7], rtol=1e-5)


def test_pytorch_checks_on_bad_settings_and_inputs():
    with pytest.raises(ValueError, match="MaxPool2d: padding 2 is more than half of the window"):
        nn.MaxPool2d(2, padding=2)
    with pytest.raises(ValueError, match="AvgPool2d: padding 2 is more than half"):
        nn.AvgPool2d(2, padding=2)
    nn.MaxPool2d(3, stride=2, padding=1, dilation=1)  # at most half: fine
    with pytest.raises(ValueError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(t([1.5]), t([1.0]))
    with pytest.raises(ValueError, match="all elements of target should be between 0 and 1"):
        nn.BCELoss()(t([0.5]), t([2.0]))
    with pytest.raises(ValueError, match=r"more than 1 spatial element .*\(2, 1, 1, 3\)"):
        nn.InstanceNorm2d(3)(nb.ones((2, 1, 1, 3)))
    model = nn.Linear(2, 2)
    for cls in (nn.optim.SGD, nn.optim.Adam, nn.optim.RMSprop, nn.optim.Adagrad):
        opt = cls(model, lr=0.1)
        with pytest.raises(ValueError, match=r"invalid lr=nan"):
            opt.param_groups[0]["lr"] = float("nan")
        assert opt.lr == 0.1  # the bad value is not kept
    with pytest.raises(ValueError, match="Adam: got an empty parameter list"):
        nn.optim.Adam([])
    with pytest.raises(ValueError, match=r"Adam: invalid lr=-1.0"):
        nn.optim.Adam([{"params": model, "lr": -1.0}])


def test_module_registration_methods():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 3)
            self.register_buffer("cache", nb.zeros((3,)), persistent=False)
            self.register_buffer("kept", nb.ones((1,)))
            self.register_parameter("scale", nb.ones((3,)))
            self.add_module("act", nn.ReLU())

        def forward(self, x):
            return self.act(self.lin(x) * self.scale + self.cache)

    m = M()
    assert list(m.state_dict()) == ["scale", "kept", "lin.weight", "lin.bias"]
    assert [n for n, _ in m.named_buffers()] == ["cache", "kept"]
    assert m.scale.requires_grad and m.get_submodule("lin") is m.lin and m.get_submodule("") is m
    with pytest.raises(AttributeError, match="lin has no submodule 'foo'"):
        m.get_submodule("lin.foo")
    m.load_state_dict(m.state_dict())  # the non-persistent buffer is not expected
    assert nb.compile(lambda mod, x: mod(x))(m, nb.ones((1, 2))).shape == (1, 3)
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    emb = nn.Embedding.from_pretrained(table)
    np.testing.assert_array_equal(emb(nb.constant([1, 3])).numpy(), table[[1, 3]])
    assert not emb.weight.requires_grad and not nn.optim.trainable_mask(emb)[0]
    assert nn.Embedding.from_pretrained(table, freeze=False).weight.requires_grad
    norm = nn.RMSNorm(3, elementwise_affine=False)
    assert list(norm.state_dict()) == [] and norm(nb.ones((2, 3))).shape == (2, 3)


def test_pytorch_multihead_attention_keeps_its_parameters_defaults_and_call():
    torch_style = nn.MultiheadAttention(8, 2)  # sequence first, (out, weights) returned
    shapes = {k: v.shape for k, v in torch_style.state_dict().items()}
    assert shapes == {
        "in_proj_weight": (24, 8),
        "in_proj_bias": (24,),
        "out_proj.weight": (8, 8),
        "out_proj.bias": (8,),
    }
    ours = nn.MultiHeadAttention(8, 2)
    w = torch_style.in_proj_weight.numpy()
    b = torch_style.in_proj_bias.numpy()
    state = {}
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        state[f"{name}.weight"] = t(w[8 * i : 8 * (i + 1)].T)  # (out, in) -> (in, out)
        state[f"{name}.bias"] = t(b[8 * i : 8 * (i + 1)])
    state["out_proj.weight"] = t(torch_style.out_proj.weight.numpy().T)
    state["out_proj.bias"] = torch_style.out_proj.bias
    ours.load_state_dict(state)
    q = rng.standard_normal((3, 4, 8)).astype(np.float32)  # (N, L, E)
    mask = np.triu(np.ones((4, 4), bool), 1)
    want, want_w = ours(t(q), attn_mask=nb.constant(mask), need_weights=True)
    seq_first = t(q.transpose(1, 0, 2))
    got, got_w = torch_style(seq_first, seq_first, seq_first, attn_mask=nb.constant(mask))
    np.testing.assert_allclose(got.numpy().transpose(1, 0, 2), want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_w.numpy(), want_w.numpy(), rtol=1e-5, atol=1e-7)
    out, none = torch_style(seq_first, seq_first, seq_first, need_weights=False)
    assert none is None and out.shape == (4, 3, 8)
    cross = nn.MultiheadAttention(8, 2, kdim=6, vdim=6, batch_first=True)
    assert "q_proj_weight" in cross.state_dict() and cross.k_proj_weight.shape == (8, 6)
    kv = t(rng.standard_normal((3, 5, 6)))
    assert cross(t(q), kv, kv)[0].shape == (3, 4, 8)
    g = nb.grad(lambda x: torch_style(x, x, x)[0].sum())(seq_first)
    assert g.shape == seq_first.shape and np.isfinite(g.numpy()).all()


def test_multihead_attention_add_bias_kv_and_add_zero_attn_as_pytorch_defines_them():
    """The learned ``bias_k``/``bias_v`` position, then a zero one, appended to every
    sequence's projected keys and values; the masks widened by them (attendable)."""
    e, heads, n, length, source = 8, 2, 2, 3, 4
    mha = nn.MultiheadAttention(e, heads, add_bias_kv=True, add_zero_attn=True, batch_first=True)
    assert list(mha.state_dict()) == [
        "in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "out_proj.weight", "out_proj.bias"
    ]  # fmt: skip
    assert mha.bias_k.shape == (1, 1, e)
    q = rng.standard_normal((n, length, e)).astype(np.float32)
    kv = rng.standard_normal((n, source, e)).astype(np.float32)
    pad = np.zeros((n, source), bool)
    pad[0, -1] = True
    out, weights = mha(t(q), t(kv), t(kv), key_padding_mask=nb.constant(pad))
    w, b = mha.in_proj_weight.numpy(), mha.in_proj_bias.numpy()
    proj = [
        x @ w[i * e : (i + 1) * e].T + b[i * e : (i + 1) * e] for i, x in enumerate((q, kv, kv))
    ]
    zeros = np.zeros((n, 1, e), np.float32)
    keys = np.concatenate([proj[1], np.broadcast_to(mha.bias_k.numpy(), (n, 1, e)), zeros], 1)
    values = np.concatenate([proj[2], np.broadcast_to(mha.bias_v.numpy(), (n, 1, e)), zeros], 1)
    hd = e // heads
    split = lambda x: x.reshape(n, -1, heads, hd).transpose(0, 2, 1, 3)  # noqa: E731
    scores = split(proj[0]) @ split(keys).transpose(0, 1, 3, 2) / np.sqrt(hd)
    masked = np.concatenate([pad, np.zeros((n, 2), bool)], 1)[:, None, None, :]
    scores = np.where(masked, -np.inf, scores)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    mixed = (probs @ split(values)).transpose(0, 2, 1, 3).reshape(n, length, e)
    want = mixed @ mha.out_proj.weight.numpy().T + mha.out_proj.bias.numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights.numpy(), probs.mean(1), rtol=1e-5, atol=1e-7)
    assert weights.shape == (n, length, source + 2)


@pytest.mark.parametrize(
    "mode, np_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")]
)
def test_conv_padding_modes_pad_before_the_convolution(mode, np_mode):
    x = rng.standard_normal((2, 6, 7, 3)).astype(np.float32)
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1, padding_mode=mode)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode=np_mode)
    want = F.conv2d(t(padded), conv.weight, conv.bias, 2, 0)
    np.testing.assert_allclose(conv(t(x)).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    conv1 = nn.Conv1d(3, 4, 3, padding=2, padding_mode=mode)
    seq = x[:, 0]
    padded1 = np.pad(seq, ((0, 0), (2, 2), (0, 0)), mode=np_mode)
    want1 = F.conv1d(t(padded1), conv1.weight, conv1.bias)
    np.testing.assert_allclose(conv1(t(seq)).numpy(), want1.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=f"padding_mode='{mode}' takes int padding"):
        nn.Conv2d(3, 4, 3, padding=(1.5, 1), padding_mode=mode)


def test_unbatched_pooling_and_softmax_dtype():
    img = rng.standard_normal((6, 6, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        nn.MaxPool2d(2)(t(img)).numpy(), nn.MaxPool2d(2)(t(img[None])).numpy()[0]
    )
    assert F.softmax(nb.constant([1, 2, 3]), dim=0, dtype=nb.float64).dtype == nb.float64
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")


def test_forward_hooks_and_pre_hooks():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    x = t(rng.standard_normal((5, 3)))
    plain = model(x).numpy()
    seen = {}
    handle = model[1].register_forward_hook(lambda m, args, out: seen.__setitem__("relu", out))
    model(x)
    assert seen["relu"].shape == (5, 4) and (seen["relu"].numpy() >= 0).all()
    zero_in = model[2].register_forward_pre_hook(lambda m, args: (args[0] * 0.0,))
    np.testing.assert_allclose(model(x).numpy(), np.broadcast_to(model[2].bias.numpy(), (5, 2)))
    zero_in.remove()
    zero_in.remove()  # a second remove does nothing
    np.testing.assert_array_equal(model(x).numpy(), plain)
    doubled = model.register_forward_hook(lambda m, args, out: out * 2.0)
    step = nb.compile(lambda mod, v: mod(v))
    np.testing.assert_allclose(step(model, x).numpy(), 2 * plain, rtol=1e-6)
    doubled.remove()  # the hooks are part of the trace's key: a retrace
    np.testing.assert_allclose(step(model, x).numpy(), plain, rtol=1e-6)
    assert step.stats.misses == 2
    handle.remove()
    assert "_forward_hooks" not in model[1].__dict__
    with pytest.raises(TypeError, match="a hook must be callable"):
        model.register_forward_hook(3)


def test_tensor_methods_in_pytorchs_call_forms():
    """What ported code writes: ``x.split(size)`` (parts of that size, as torch.split; the
    function nb.split(x, n) stays JAX's count), ``x.max(dim=d)`` whose gradient goes to the
    index it returns, ``x.max(other)`` elementwise, and the shape methods' keywords."""
    x = nb.constant(np.arange(6, dtype=np.float32))
    assert [p.tolist() for p in x.split(4)] == [[0, 1, 2, 3], [4, 5]]
    assert [p.tolist() for p in x.split([1, 5], dim=0)] == [[0], [1, 2, 3, 4, 5]]
    assert len(nb.split(x, 2)) == 2
    m = nb.constant(np.array([[1.0, 5.0, 5.0, 0.0], [7.0, 2.0, 7.0, 7.0]], np.float32))
    values, indices = m.max(dim=1)
    assert values.tolist() == [5.0, 7.0] and indices.tolist() == [1, 0]
    g = nb.grad(lambda a: a.max(dim=1).values.sum())(m)
    assert g.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]
    g = nb.grad(lambda a: a.min(dim=1)[0].sum())(m)
    assert g.tolist() == [[0, 0, 0, 1], [0, 1, 0, 0]]
    assert m.max(1).tolist() == [5.0, 7.0]  # positional: NumPy's and JAX's axis
    assert m.max(nb.full((2, 4), 3.0)).tolist() == [[3, 5, 5, 3], [7, 3, 7, 7]]
    t = nb.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(t.flip(0, 2).numpy(), a[::-1, :, ::-1])
    np.testing.assert_array_equal(t.flip(dims=(1,)).numpy(), a[:, ::-1])
    np.testing.assert_array_equal(t.roll(shifts=1, dims=2).numpy(), np.roll(a, 1, 2))
    assert t.permute(dims=(2, 0, 1)).shape == (4, 2, 3)
    assert t.transpose(dim0=0, dim1=2).shape == (4, 3, 2)
    assert t.squeeze(dim=0).shape == (2, 3, 4)  # not size 1: as it is, as PyTorch
    assert t.unsqueeze(dim=1).shape == (2, 1, 3, 4)
    assert t.tile(1, 2, 1).shape == (2, 6, 4)
    assert [u.shape for u in t.unbind(dim=1)] == [(2, 4)] * 3
    np.testing.assert_allclose(t.std(dim=1, unbiased=True).numpy(), a.std(1, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(t.var(dim=2, unbiased=False).numpy(), a.var(2), rtol=1e-6)
    assert t.to(dtype=nb.float64).dtype == nb.float64


def test_sorting_in_numpys_jaxs_and_pytorchs_forms():
    """``nb.sort``/``argsort``/``top_k``/``take_along_axis`` (NumPy's and JAX's; stable,
    NaN last ascending), ``x.sort(axis)`` the values, ``x.sort(dim=, descending=)`` and
    ``x.topk(k, dim, largest)`` PyTorch's ``(values, indices)``; gradients go back to
    where each value came from."""
    x = np.array([[3.0, 1.0, 2.0, 1.0], [0.0, 5.0, -1.0, 5.0]], np.float32)
    t = nb.constant(x)
    np.testing.assert_array_equal(nb.argsort(t, axis=1).numpy(), np.argsort(x, 1, kind="stable"))
    np.testing.assert_array_equal(nb.sort(t, axis=0).numpy(), np.sort(x, 0))
    np.testing.assert_array_equal(t.sort().numpy(), np.sort(x, -1))
    np.testing.assert_array_equal(nb.sort(t, axis=None).numpy(), np.sort(x, axis=None))
    np.testing.assert_array_equal(
        nb.argsort(t, axis=None).numpy(), np.argsort(x, axis=None, kind="stable")
    )
    values, indices = t.sort(dim=1, descending=True)
    assert values.tolist() == [[3, 2, 1, 1], [5, 5, 0, -1]]
    assert indices.tolist() == [[0, 2, 1, 3], [1, 3, 0, 2]]  # equal values keep their order
    v, i = nb.top_k(t, 2)
    assert v.tolist() == [[3, 2], [5, 5]] and i.tolist() == [[0, 2], [1, 3]]
    v, i = t.topk(1, dim=0, largest=False)
    assert v.tolist() == [[0, 1, -1, 1]] and i.tolist() == [[1, 0, 1, 0]]
    idx = np.array([[1, 0], [3, 2]])
    np.testing.assert_array_equal(
        nb.take_along_axis(t, nb.constant(idx), 1).numpy(), np.take_along_axis(x, idx, 1)
    )
    g = nb.grad(lambda a: (nb.sort(a, axis=1) * nb.arange(4.0)).sum())(t)
    want = np.zeros_like(x)
    np.put_along_axis(want, np.argsort(x, 1, kind="stable"), np.arange(4.0)[None], 1)
    np.testing.assert_array_equal(g.numpy(), want)
    with pytest.raises(ValueError, match=r"top_k: k must be an int in \[0, 4\]"):
        nb.top_k(t, 5)


# ----------------------------------------------------------------------------- tutorial idioms
def test_pytorch_tutorial_spellings_run_and_match():
    """What PyTorch's tutorials write, beyond the layers: ``inplace=True`` activations and
    dropout (accepted; the result is a new tensor), ``x.std(dim=)`` with PyTorch's
    unbiased default, ``logits[range(n), labels]``, module-level ``dim=``, ``nb.cat`` and
    ``zeros(3, 4)``. Values from PyTorch 2.14 / NumPy."""
    model = nn.Sequential(
        nn.Linear(3, 4),
        nn.ReLU(True),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Dropout(0.5, inplace=True),
        nn.ELU(inplace=True),
        nn.Hardtanh(-2.0, 2.0, True),
        nn.Identity(54, unused_argument=0.1),
    ).eval()
    x = t(rng.standard_normal((2, 3)))
    assert model(x).shape == (2, 4)
    F = nn.functional
    v = nb.constant(np.array([-1.0, 2.0], np.float32))
    assert F.relu(v, inplace=True).tolist() == [0.0, 2.0]
    assert F.leaky_relu(v, 0.5, True).tolist() == [-0.5, 2.0]
    assert F.dropout(v, 0.5, False, inplace=True).tolist() == [-1.0, 2.0]
    with pytest.raises(TypeError, match="inplace must be a bool"):
        nn.ReLU(inplace="yes")

    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    m = nb.constant(a)
    np.testing.assert_allclose(m.std(dim=1).numpy(), a.std(axis=1, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(m.var(dim=(0, 1)).numpy(), 13.0)  # torch: 13.0
    np.testing.assert_allclose(m.std(dim=1, unbiased=False).numpy(), a.std(axis=1), rtol=1e-6)
    np.testing.assert_allclose(m.std().numpy(), a.std(), rtol=1e-6)  # NumPy's and JAX's
    labels = nb.constant(np.array([1, 0, 3]))
    assert m[range(3), labels].tolist() == [1.0, 4.0, 11.0]

    assert nb.argmax(m, dim=1).tolist() == [3, 3, 3]
    assert nb.sum(m, dim=1, keepdim=True).shape == (3, 1)
    np.testing.assert_allclose(nb.mean(m, dim=0).numpy(), a.mean(0))
    assert nb.softmax(m, dim=0).shape == (3, 4) and nb.cumsum(m, dim=0).shape == (3, 4)
    assert nb.cat([m, m], dim=1).shape == (3, 8) and nb.stack([m, m], dim=-1).shape == (3, 4, 2)
    with pytest.raises(TypeError, match="sum: pass axis or dim, not both"):
        nb.sum(m, axis=0, dim=1)
    # every module-level reduction takes them (they raised TypeError); torch.max(x, dim=)
    # is the (values, indices) pair, torch.std(x, dim=) the unbiased estimate
    values, indices = nb.max(m, dim=0)
    assert values.tolist() == [8, 9, 10, 11] and indices.tolist() == [2, 2, 2, 2]
    assert nb.min(m, dim=1, keepdim=True).values.shape == (3, 1)
    np.testing.assert_allclose(nb.std(m, dim=1).numpy(), a.std(axis=1, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(nb.var(m, dim=1, correction=0).numpy(), a.var(axis=1), rtol=1e-6)
    np.testing.assert_allclose(nb.prod(m + 1, dim=0).numpy(), (a + 1).prod(0), rtol=1e-6)
    lse = nb.logsumexp(m, dim=1, keepdim=True).numpy()
    np.testing.assert_allclose(lse, np.log(np.exp(a).sum(1, keepdims=True)), rtol=1e-6)
    assert nb.all(m >= 0, dim=0).tolist() == [True] * 4 and nb.any(m > 10, dim=1).shape == (3,)
    logp = nb.logsoftmax(m, axis=-1)  # PyTorch's ignore_index default: -100
    want = -(logp.numpy()[0, 1] + logp.numpy()[2, 3]) / 2
    got = nn.functional.nll_loss(logp, nb.constant(np.array([1, -100, 3])))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    x = nb.tensor(np.array([1.0, -2.0], np.float32), requires_grad=True)
    y = x * 2.0
    assert x.is_leaf and not y.is_leaf and nb.tensor([1.0]).is_leaf
    assert nb.nn.clip_grad_value_ is nn.utils.clip_grad_value_  # API.md's nn names
    assert nb.nn.clip_grad_norm_ is nn.utils.clip_grad_norm_
    assert x.clamp_min(0.0).tolist() == [1, 0] and x.clamp_max(0.0).tolist() == [0, -2]
    for made in (
        nb.arange(3.0, requires_grad=True),
        nb.eye(2, requires_grad=True),
        nb.zeros_like(x, requires_grad=True),
        nb.ones_like(x, requires_grad=True),
        nb.full_like(x, 3.0, requires_grad=True),
    ):
        assert made.requires_grad and made.is_leaf
    copy = nb.tensor(m)  # torch.tensor(t): a new tensor, without history
    copy[0, 0] = 100.0
    assert copy is not m and m.numpy()[0, 0] == 0 and not nb.tensor(y).requires_grad
    assert nb.zeros(3, 4).shape == (3, 4) and nb.ones(2, 3, 4, nb.int32).dtype is nb.int32
    with pytest.raises(TypeError, match="give the shape as one tuple"):
        nb.zeros((2, 3), 4)


def test_pytorch_tensor_methods_and_data_utilities_from_tutorials():
    """``x.t()``, ``x.type(dtype)``, ``x.is_floating_point()``, ``x.norm(p, dim)`` (values
    from PyTorch 2.14), and ``random_split``/``Subset`` feeding a ``DataLoader`` that takes
    PyTorch's worker settings."""
    a = np.arange(-3.0, 3.0, dtype=np.float32).reshape(2, 3)
    x = nb.constant(a)
    assert x.t().shape == (3, 2) and x.type(nb.int32).dtype is nb.int32
    assert x.type() == "float32" and x.is_floating_point() and not x.long().is_floating_point()
    for p, whole, rows in [
        ("fro", 4.358899, [3.741657, 2.236068]),
        (1, 9.0, [6.0, 3.0]),
        (float("inf"), 3.0, [3.0, 2.0]),
        (0, 5.0, [3.0, 2.0]),
        (3, 3.556893, [3.301927, 2.080084]),
    ]:
        assert x.norm(p).item() == pytest.approx(whole, rel=1e-5)
        np.testing.assert_allclose(x.norm(p, dim=1).numpy(), rows, rtol=1e-5)
    # PyTorch's gradients at a zero row (PyTorch 2.14: 0, where a plain root gave NaN)
    for p in ("fro", 2, 3, 1):
        z = nb.constant(np.array([[0.0, 0.0], [3.0, 4.0]], np.float32), requires_grad=True)
        z.norm(p, dim=1).sum().backward()
        assert not z.grad.numpy()[0].any() and np.isfinite(z.grad.numpy()).all()
    with pytest.raises(ValueError, match="t: expects a tensor of at most 2 dims"):
        nb.zeros((2, 2, 2)).t()

    ds = nn.data.TensorDataset(np.arange(10, dtype=np.float32)[:, None], np.arange(10))
    train, val = nn.data.random_split(ds, [0.8, 0.2])
    assert (len(train), len(val)) == (8, 2)
    assert sorted(train.indices + val.indices) == list(range(10))
    again = nn.data.random_split(ds, [0.8, 0.2])  # the same split every run (seed 0)
    assert again[0].indices == train.indices and again[1].indices == val.indices
    loader = nn.DataLoader(train, batch_size=4, shuffle=True, num_workers=2, pin_memory=True)
    seen = sorted(v for _, y in loader for v in y.tolist())
    assert seen == sorted(train.indices)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['workers'\]"):
        nn.DataLoader(train, batch_size=4, workers=2)
    with pytest.raises(ValueError, match="do not add up to the dataset's 10 examples"):
        nn.data.random_split(ds, [3, 3])


def test_creation_requires_grad_and_repeat_interleave_as_pytorch():
    """``torch.zeros(..., requires_grad=True)``, ``torch.tensor(data, requires_grad=True)``
    and ``torch.full``'s: leaves whose gradient ``backward`` accumulates (a tensor given to
    ``constant`` is copied, its own flags kept); ``x.repeat_interleave`` is NumPy's repeat."""
    a = nb.zeros(3, requires_grad=True)
    b = nb.constant([1.0, 2.0, 3.0], requires_grad=True)
    c = nb.full((3,), 2.0, requires_grad=True)
    d = nb.ones((3,), requires_grad=True)
    ((a + 1) * b * c * d).sum().backward()
    assert a.grad.tolist() == [2.0, 4.0, 6.0] and b.grad.tolist() == [2.0, 2.0, 2.0]
    assert c.grad.tolist() == [1.0, 2.0, 3.0] and d.grad.tolist() == [2.0, 4.0, 6.0]
    plain = nb.ones(3)
    assert nb.constant(plain, requires_grad=True).requires_grad and not plain.requires_grad
    with pytest.raises(TypeError, match="requires_grad needs a float tensor"):
        nb.zeros(3, dtype=nb.int32, requires_grad=True)
    x = nb.constant(np.array([[1, 2], [3, 4]]))
    assert x.repeat_interleave(2).tolist() == [1, 1, 2, 2, 3, 3, 4, 4]
    assert x.repeat_interleave([1, 2], dim=1).tolist() == [[1, 2, 2], [3, 4, 4]]


def test_pytorch_creation_names():
    """``torch.manual_seed``/``randn``/``rand``/``tensor``/``from_numpy`` as their tutorials
    write them: seeded draws repeat, sizes one by one or as a tuple, leaves that require
    grad."""
    nb.manual_seed(3)
    a = nb.randn(2, 3)
    nb.manual_seed(3)
    b = nb.randn((2, 3))
    assert a.shape == (2, 3) and np.array_equal(a.numpy(), b.numpy())
    u = nb.rand(1000).numpy()
    assert u.shape == (1000,) and u.min() >= 0.0 and u.max() < 1.0
    w = nb.randn((), requires_grad=True)
    (w * w).backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy())
    t = nb.tensor([[1.0, 2.0]], requires_grad=True)
    assert t.requires_grad and t.dtype is nb.float32
    arr = np.arange(3)
    assert nb.from_numpy(arr).dtype is nb.int64 and nb.from_numpy(arr).tolist() == [0, 1, 2]
    with pytest.raises(TypeError, match="from_numpy: expected a NumPy array"):
        nb.from_numpy([1, 2])
    with pytest.raises(TypeError, match="randn: sizes must be ints"):
        nb.randn(2.5)


def test_bad_inputs_that_gave_wrong_answers_are_refused_at_the_call():
    """Each of these ran to a wrong answer or failed deep inside: an integer attention mask
    (added to the scores as a bias), Flatten's out-of-range dims, a float or over-cropping
    F.pad, a fractional batch size, a negative max_norm (it flipped every gradient), grad
    of a string argument (None), Conv2d's strided 'same'."""
    q = nb.ones((2, 4, 5, 8))
    keep = nb.constant(np.tril(np.ones((5, 5), np.int32)))
    with pytest.raises(TypeError, match="attn_mask must be bool .* got int32"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    mha = nn.MultiHeadAttention(8, 2, batch_first=True)
    x = nb.ones((2, 5, 8))
    with pytest.raises(TypeError, match="attn_mask must be bool"):
        mha(x, x, x, attn_mask=keep)
    with pytest.raises(TypeError, match="key_padding_mask must be bool"):
        mha(x, x, x, key_padding_mask=nb.zeros((2, 5), dtype=nb.int32))
    k = nb.ones((2, 3, 6, 8))
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: the batch and head"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=nb.ones((5, 6)) > 0)
    x3 = nb.ones((2, 3, 4))
    for bad in (lambda: nn.Flatten(2, 1)(x3), lambda: nn.Flatten(1, 5)(x3)):
        with pytest.raises((IndexError, ValueError), match="flatten"):
            bad()
    with pytest.raises(IndexError, match="Unflatten: dim 5"):
        nn.Unflatten(5, (2, 2))(nb.ones((2, 4)))
    with pytest.raises(ValueError, match=r"Unflatten: unflattened_size \(2, 2\)"):
        nn.Unflatten(1, (2, 2))(nb.ones((2, 6)))
    a = nb.ones((2, 3))
    with pytest.raises(TypeError, match="pad: pad=.* must hold ints"):
        F.pad(a, (1.5, 1))
    with pytest.raises(ValueError, match="crops dim 1 of size 3"):
        F.pad(a, (-2, -2))
    with pytest.raises(ValueError, match="negative pad .* mode 'reflect'"):
        F.pad(a, (-1, 2), mode="reflect")
    assert F.pad(a, (-1, 2)).shape == (2, 4)
    with pytest.raises(TypeError, match="batch_size must be a positive int"):
        nn.DataLoader(np.zeros((4, 2)), batch_size=2.5)
    with pytest.raises(TypeError, match="data is a dict"):
        nn.DataLoader({"a": np.zeros((4, 2))}, batch_size=2)
    with pytest.raises(ValueError, match="TensorDataset: needs arrays with a first"):
        nn.data.TensorDataset(nb.constant(1.0))
    lin = nn.Linear(2, 1)
    with pytest.raises(TypeError, match="load_state_dict: expected a mapping"):
        lin.load_state_dict(None)
    lin(nb.ones((1, 2))).sum().backward()
    with pytest.raises(ValueError, match="max_norm must be >= 0"):
        nn.utils.clip_grad_norm_(lin.parameters(), -1.0)
    with pytest.raises(TypeError, match="argument 1 of grad holds a str"):
        nb.grad(lambda u, s: u * 2.0, argnums=1)(nb.constant(1.0), "abc")
    with pytest.raises(ValueError, match="padding='same' needs stride 1"):
        nn.Conv2d(3, 8, 3, padding="same", stride=2)
    # errors that named the inner op (add, mul) now name the function and its argument
    with pytest.raises(ValueError, match=r"linear: bias of shape \(4,\) for 3 output"):
        F.linear(nb.ones((2, 3)), nb.ones((3, 3)), nb.ones((4,)))
    with pytest.raises(ValueError, match=r"layer_norm: weight of shape \(3,\)"):
        F.layer_norm(nb.ones((2, 4)), (4,), weight=nb.ones((3,)))
    with pytest.raises(TypeError, match="LSTM.*h_0 is int32 but the input is float32"):
        h0 = nb.zeros((1, 2, 5), dtype=nb.int32)
        nn.LSTM(4, 5)(nb.ones((3, 2, 4)), (h0, nb.zeros((1, 2, 5))))


def test_values_and_gradients_at_extremes_stay_finite_and_right():
    """``logaddexp``'s gradient at a tie was (0, 1); a causal mask filled with -1e9 let
    masked keys take a row's weight when its scores were all below it; Huber and smooth L1
    losses and ``hardswish`` had NaN gradients at an infinite input (0 * inf)."""
    ga, gb = nb.grad(lambda a, b: nb.logaddexp(a, b), argnums=(0, 1))(
        nb.constant(1.0), nb.constant(1.0)
    )
    assert (ga.item(), gb.item()) == (0.5, 0.5)
    a = np.array([1.0, -np.inf, np.inf, 1e30, 3.0], np.float32)
    b = np.array([2.0, -np.inf, np.inf, 1e30, -np.inf], np.float32)
    np.testing.assert_allclose(nb.logaddexp(a, b).numpy(), np.logaddexp(a, b), rtol=1e-6)
    q = np.array([[[[1.0, 0.0], [0.0, 1.0]]]], np.float32)
    k = np.array([[[[-1e10, 0.0], [0.0, 1.0]]]], np.float32)
    v = np.array([[[[1.0, 1.0], [100.0, 100.0]]]], np.float32)
    for dtype, low in ((nb.float32, -1e10), (nb.float16, -5e4)):
        k[0, 0, 0, 0] = low
        args = [nb.constant(t).astype(dtype) for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*args, is_causal=True, scale=1.0)
        np.testing.assert_allclose(out.numpy().astype(np.float32)[0, 0, 0], [1.0, 1.0])
    big = nb.constant(np.array([60000.0, 0.5], np.float16))
    zero = nb.zeros((2,), dtype=nb.float16)
    for loss in (F.huber_loss, F.smooth_l1_loss):
        g = nb.grad(lambda u, loss=loss: loss(u, -big))(big).numpy().astype(np.float32)
        np.testing.assert_allclose(g, [0.5, 0.5], rtol=1e-3)
        assert np.isfinite(nb.grad(lambda u, loss=loss: loss(u, zero))(big).numpy()).all()
    x = nb.constant(np.array([-np.inf, -4.0, 0.0, 4.0, np.inf], np.float32))
    np.testing.assert_allclose(
        nb.grad(lambda t: F.hardswish(t).sum())(x).numpy(), [0.0, 0.0, 0.5, 1.0, 1.0]
    )


def test_half_precision_statistics_and_norms_are_computed_in_float32():
    """In float16 a square overflows above 256: layer_norm, batch_norm, normalize and
    clip_grad_norm_ gave zeros or inf where PyTorch (accumulating in float32) does not."""
    row = np.array([[300.0, -300.0, 10.0, -10.0]], np.float32)
    want = (row - row.mean()) / np.sqrt(row.var() + 1e-5)
    x = nb.constant(row).astype(nb.float16)
    for got in (F.layer_norm(x, (4,)), nb.nn.LayerNorm(4)(x)):
        assert got.dtype == nb.float16
        np.testing.assert_allclose(got.numpy().astype(np.float32), want, rtol=2e-3, atol=2e-3)
    bn = nb.nn.BatchNorm1d(1)
    col = nb.constant(row.T).astype(nb.float16)
    np.testing.assert_allclose(bn(col).numpy().astype(np.float32), want.T, rtol=2e-3, atol=2e-3)
    v = nb.constant(np.array([[300.0, 400.0, 0.0]], np.float16))
    got = F.normalize(v).numpy().astype(np.float32)
    np.testing.assert_allclose(got, [[0.6, 0.8, 0.0]], rtol=1e-3)
    lin = nn.Linear(2, 1, dtype=nb.float16)  # (a gradient has its parameter's dtype)
    lin(nb.ones((1, 2), dtype=nb.float16)).sum().backward()
    lin.weight.grad = nb.constant(np.array([[300.0], [400.0]], np.float16))
    lin.bias.grad = nb.zeros((1,), dtype=nb.float16)
    assert nn.utils.clip_grad_norm_([lin.weight, lin.bias], 1.0).item() == pytest.approx(500.0)
    got = lin.weight.grad.numpy().astype(np.float32).ravel()
    np.testing.assert_allclose(got, [0.6, 0.8], rtol=1e-3)


def test_attention_runs_in_bfloat16_and_float16_round_scales_in_float32():
    """bfloat16 attention raised NumPy's "not inexact" (its masks' fill read np.finfo);
    float16 ``round(x, 2)`` overflowed past 655 (JAX scales in float32)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 3, 8)).astype(np.float32)
    want = F.scaled_dot_product_attention(nb.constant(q), nb.constant(q), nb.constant(q))
    qb = nb.constant(q).astype(nb.bfloat16)
    got = F.scaled_dot_product_attention(qb, qb, qb, is_causal=True)
    assert got.dtype == nb.bfloat16
    got = F.scaled_dot_product_attention(qb, qb, qb)
    np.testing.assert_allclose(got.numpy().astype(np.float32), want.numpy(), atol=0.05)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).bfloat16()
    assert mha(qb, qb, qb)[0].dtype == nb.bfloat16
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0).bfloat16()
    assert layer(qb).dtype == nb.bfloat16
    v = nb.constant(np.array([1000.123, 655.55, 2.675], np.float16))
    got = nb.round(v, 2)
    assert got.dtype == nb.float16
    np.testing.assert_allclose(got.numpy().astype(np.float32), [1000.0, 655.5, 2.68], rtol=1e-3)


def test_more_pytorch_spellings_from_everyday_code():
    """``x.gather(dim, index)``, a DataLoader over a list of samples, ``lerp_`` (an EMA),
    ``masked_fill_``, ``index_select``, ``narrow`` (a view) and ``triu(diagonal=)``."""
    x = nb.constant(np.arange(12.0, dtype=np.float32).reshape(4, 3))
    idx = nb.constant(np.array([[0], [2], [1], [0]]))
    assert x.gather(1, idx).numpy().ravel().tolist() == [0.0, 5.0, 7.0, 9.0]
    assert x.gather(dim=0, index=nb.constant(np.array([[3, 0, 1]]))).tolist() == [[9, 1, 5]]
    xs, ys = np.arange(12.0, dtype=np.float32).reshape(6, 2), np.arange(6)
    batches = list(nn.DataLoader(list(zip(xs, ys)), batch_size=3))
    assert [(a.shape, b.shape) for a, b in batches] == [((3, 2), (3,))] * 2
    ema = nb.zeros((2,))
    ema.lerp_(nb.ones((2,)), 0.1)
    np.testing.assert_allclose(ema.numpy(), [0.1, 0.1], rtol=1e-6)
    m = nb.constant([1.0, 2.0, 3.0])
    m.masked_fill_(m > 1, 0.0)
    assert m.tolist() == [1.0, 0.0, 0.0]
    assert x.index_select(1, nb.constant(np.array([0, 2]))).tolist()[1] == [3.0, 5.0]
    x.narrow(0, 1, 2).zero_()
    assert x.numpy()[1:3].sum() == 0 and x.numpy()[0].sum() == 3
    with pytest.raises(ValueError, match="narrow: start 3 and length 2"):
        x.narrow(0, 3, 2)
    assert nb.triu(nb.ones((3, 3)), diagonal=1).numpy().sum() == 3


def test_same_padding_with_a_padding_mode_pads_as_pytorch():
    """padding='same' with padding_mode='reflect' (or replicate, circular) was refused;
    PyTorch pads dilation * (kernel - 1) in that mode, the extra one after."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 7, 6, 2)).astype(np.float32)
    for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
        for k, d in ((3, 1), (4, 1), (3, 2)):
            same = nn.Conv2d(2, 3, k, padding="same", padding_mode=mode, dilation=d)
            valid = nn.Conv2d(2, 3, k, padding=0, dilation=d)
            valid.weight, valid.bias = same.weight, same.bias
            t = d * (k - 1)
            pads = ((0, 0), (t // 2, t - t // 2), (t // 2, t - t // 2), (0, 0))
            want = valid(nb.constant(np.pad(x, pads, mode=np_mode))).numpy()
            got = same(nb.constant(x)).numpy()
            assert got.shape == (1, 7, 6, 3)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    conv1 = nn.Conv1d(2, 3, 4, padding="same", padding_mode="reflect")
    assert conv1(nb.ones((1, 9, 2))).shape == (1, 9, 3)


def test_bad_inputs_to_nn_fail_at_the_call_as_pytorch_s_do():
    """Each had been a silent wrong answer, a silent loss of training, or an error from
    deep inside naming no layer."""
    emb = nn.Embedding(4, 2)
    neg = nb.constant(np.array([-1]))
    with pytest.raises(IndexError, match="Embedding"):
        nb.compile(lambda i: emb(i))(neg).numpy()  # it read the last row
    with pytest.raises(IndexError, match="Embedding"):
        nb.vmap(lambda i: emb(i))(nb.constant(np.array([-1, -2]))).numpy()
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    q = nb.ones((2, 3, 8))
    with pytest.raises(ValueError, match=r"3-D attn_mask must be \(batch \* num_heads, L, S\)"):
        mha(q, q, q, attn_mask=nb.constant(np.zeros((2, 3, 3), bool)))  # read per head
    with pytest.raises(TypeError, match=r"True = may not attend"):
        mha(q, q, q, attn_mask=nb.zeros((3, 3), dtype=nb.int32))
    for e, h in ((8, 0), (8, -2), (0, 2)):
        with pytest.raises(ValueError, match="must be a positive int"):
            nn.MultiHeadAttention(e, h)
    lin = nn.Linear(3, 2)
    with pytest.raises(TypeError, match=r"cannot assign a ndarray to parameter 'weight'"):
        lin.weight = np.ones((3, 2), np.float32)  # it had unregistered the parameter
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    for name in ("a.b", "", 3):
        with pytest.raises(KeyError, match="non-empty string without '.'"):
            nn.Module().register_buffer(name, nb.ones(1))
    with pytest.raises(ValueError, match="clip_grad_norm: max_norm must be >= 0"):
        nn.optim.clip_grad_norm({"w": nb.constant([3.0, 4.0])}, -1.0)
    with pytest.raises(TypeError, match="SGD: params holds a float, not a tensor"):
        nn.optim.SGD([nb.ones(2), 3.0], lr=0.1)
    with pytest.raises(TypeError, match="SGD: params must be a Module"):
        nn.optim.SGD(3, lr=0.1)
    with pytest.raises(ValueError, match=r"conv_transpose2d: the output would be -6 x -6"):
        nn.ConvTranspose2d(3, 8, 3, padding=5)(nb.ones((1, 2, 2, 3)))
    with pytest.raises(ValueError, match=r"rms_norm: weight of shape \(3,\)"):
        F.rms_norm(nb.ones((2, 4)), 4, weight=nb.ones((3,)))
    np.testing.assert_allclose(  # PyTorch's 0-"norm": the count of non-zeros
        F.normalize(nb.constant([[1.0, 0.0, 2.0]]), p=0).numpy(), [[0.5, 0.0, 1.0]]
    )
    with pytest.raises(TypeError, match="DataLoader: cannot load from a int"):
        nn.DataLoader(3, batch_size=1)


def test_the_names_a_port_from_pytorch_reaches_for():
    """What porting PyTorch programs found missing: the scatter family of methods (not
    ``nb.scatter``, which is JAX's slice scatter), ``masked_select``, ``torch.topk``/
    ``index_select``/``clamp``/``long``/``as_tensor``/``inference_mode``, ``dim=`` on
    ``nb.sort``/``nb.split``, and the transformer stacks' fast-path keywords. Expected
    values are PyTorch 2.14's."""
    idx = nb.constant(np.array([[0, 1], [2, 3], [1, 1]]))
    src = nb.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    got = nb.zeros((3, 4)).scatter(1, idx, src)
    assert got.tolist() == [[0, 1, 0, 0], [0, 0, 4, 5], [0, 9, 0, 0]]
    assert nb.zeros((3, 4)).scatter(1, idx, value=7.0).numpy().sum() == 35.0
    assert nb.zeros((3, 4)).scatter(1, idx, src, reduce="add").tolist()[2] == [0, 17, 0, 0]
    inplace = nb.zeros((3, 4))
    inplace.scatter_(1, idx, src)
    assert inplace.tolist() == got.tolist()
    added = nb.ones((3, 4)).scatter_add(0, nb.constant(np.array([[0, 1, 2, 0]])), src)
    assert added.tolist() == [[1, 1, 1, 4], [1, 2, 1, 1], [1, 1, 3, 1]]
    rows = nb.zeros((5, 3)).index_add(0, nb.constant([0, 4, 0]), nb.ones((3, 3)), alpha=2)
    assert rows.tolist() == [[4] * 3, [0] * 3, [0] * 3, [0] * 3, [2] * 3]
    a = nb.constant(np.arange(6.0).reshape(2, 3))
    assert a.masked_select(nb.constant([True, False, True])).tolist() == [0, 2, 3, 5]
    with pytest.raises(ValueError, match=r"scatter: index of shape \(3,\) \(int32\) must be"):
        nb.zeros((3, 4)).scatter(1, nb.constant([0, 1, 2]), src)
    with pytest.raises(TypeError, match="scatter: give exactly one of src and value"):
        nb.zeros((3, 4)).scatter(1, idx)
    # PyTorch's refusals (a review found them accepted): an index from the end, another
    # dtype, an integer mask (it indexed: a gather); inference_mode as a bare decorator
    with pytest.raises(IndexError, match=r"scatter: index values -1..-1 are out of range"):
        nb.zeros((2, 3)).scatter(1, nb.constant([[-1]]), 5.0)
    with pytest.raises(TypeError, match="scatter: src is float32 but x is int32"):
        nb.zeros((3, 4), dtype=nb.int32).scatter(1, idx, src)
    with pytest.raises(TypeError, match="index_add: source is float32 but x is int32"):
        nb.zeros((2, 3), dtype=nb.int32).index_add(0, nb.constant([0]), nb.ones((1, 3)))
    with pytest.raises(TypeError, match=r"masked_select: mask must be bool, got int32\[3\]"):
        nb.constant([1.0, 2.0, 3.0]).masked_select(nb.constant([1, 0, 1]))

    @nb.inference_mode
    def doubled(v):
        return v * 2

    assert doubled(nb.constant([1.0])).tolist() == [2.0]
    g = nb.grad(lambda s: nb.zeros((3, 4)).scatter(1, idx, s).sum())(src).numpy()
    assert g[0].tolist() == [1, 1, 0, 0] and g[1].tolist() == [1, 1, 0, 0]
    x = nb.constant([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    values, indices = nb.topk(x, 2)
    assert values.tolist() == [[3, 2], [5, 4]] and indices.tolist() == [[0, 2], [1, 2]]
    assert nb.topk(x, 1, dim=0, largest=False)[0].tolist() == [[0, 1, 2]]
    assert nb.index_select(x, 1, nb.constant([2, 0])).tolist() == [[2, 3], [4, 0]]
    assert nb.clamp(x, 1, 3).tolist() == [[3, 1, 2], [1, 3, 3]]
    assert nb.long == nb.int64 and nb.as_tensor([1, 2]).dtype == nb.int32
    assert nb.sort(x, dim=0).tolist() == [[0, 1, 2], [3, 5, 4]]
    assert [p.shape for p in nb.split(x, [1, 2], dim=1)] == [(2, 1), (2, 2)]
    w = nb.ones((2,), requires_grad=True)
    with nb.inference_mode():
        assert not (w * 2).sum().requires_grad
    with nb.inference_mode(False):
        assert (w * 2).sum().requires_grad
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False, mask_check=False)
    assert enc(nb.zeros((2, 3, 8))).shape == (2, 3, 8)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), 1)
    assert dec(nb.zeros((2, 3, 8)), nb.zeros((2, 4, 8)), memory_is_causal=False).shape == (2, 3, 8)


def test_a_module_of_gradients_has_one_tensor_per_parameter():
    """Found by a check of the recurrent layers: two parameters whose cotangent is one
    tensor (an LSTM's two biases; ``x + a + b``) got that one object, so the gradient
    module looked tied and ``named_parameters`` dropped a name (3 of an LSTM's 4). Each
    gets its own tensor; a parameter passed twice (truly tied) keeps one."""

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nb.zeros((3,)), nb.zeros((3,))

        def forward(self, x):
            return x + self.a + self.b

    g = nb.grad(lambda m: m(nb.ones((3,))).sum())(Two())
    assert g.a is not g.b and [k for k, _ in g.named_parameters()] == ["a", "b"]
    lstm = nn.LSTM(2, 4)
    g = nb.grad(lambda m: m(nb.ones((1, 3, 2)))[0].sum())(lstm)
    names = [k for k, _ in lstm.named_parameters()]
    assert [k for k, _ in g.named_parameters()] == names and len(names) == 4
    np.testing.assert_array_equal(g.bias_ih_l0.numpy(), g.bias_hh_l0.numpy())
    w = nb.ones((2,))
    g1, g2 = nb.grad(lambda p, q: (p + q).sum(), argnums=(0, 1))(w, w)
    assert g1.tolist() == g2.tolist() == [1.0, 1.0]
    # an input of another dtype than the weights is PyTorch's clear error (a float32 input
    # to a float64 LSTM failed inside its scan; a float64 one to a float32 GRU ran in float64)
    with pytest.raises(TypeError, match=r"LSTM\(2, 4\): input dtype float64 does not match"):
        lstm(nb.ones((1, 3, 2), dtype=nb.float64))


def test_data_loading_ports_from_torch_utils_data():
    """What a PyTorch script's data code does, unchanged: samplers without a length, and
    endless batch samplers, read lazily (they were read whole first, which never ended);
    ``Dataset[...]`` in a class statement; ``TensorDataset.tensors`` and tensor items;
    PyTorch's batch containers (a list of fields, a tuple of strings, an ``OrderedDict``
    kept); an empty dataset giving no batches; ``in_order``."""
    import collections
    import itertools

    data = nn.data

    class Evens:
        def __iter__(self):
            return iter(range(0, 10, 2))

    rows = np.arange(100, 110)
    loader = nn.DataLoader(rows.tolist(), batch_size=2, sampler=Evens())
    assert [b.numpy().tolist() for b in loader] == [[100, 102], [104, 106], [108]]
    with pytest.raises(TypeError, match="has no len"):
        len(loader)

    class Sliding:  # an endless batch sampler, as iteration-based training uses
        def __iter__(self):
            return ([i, i + 1] for i in itertools.count())

    endless = nn.DataLoader(rows.tolist(), batch_sampler=Sliding())
    first = [b.numpy().tolist() for b in itertools.islice(endless, 3)]
    assert first == [[100, 101], [101, 102], [102, 103]]

    class Pairs(data.Dataset[tuple]):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            d = collections.OrderedDict(v=float(i))
            return i, f"s{i}", d

    batch = next(iter(nn.DataLoader(Pairs(), batch_size=3, in_order=False)))
    assert type(batch) is list and batch[1] == ("s0", "s1", "s2")
    assert type(batch[2]) is collections.OrderedDict and batch[2]["v"].dtype == nb.float64
    batch[0] = batch[0] * 2  # (a list: PyTorch's scripts assign into it)

    ds = data.TensorDataset(np.arange(6.0).reshape(3, 2), np.arange(3))
    assert isinstance(ds[1][0], nb.Tensor) and ds[1][0].unsqueeze(0).shape == (1, 2)
    assert ds.tensors[0].shape == (3, 2) and isinstance(ds.tensors[1], nb.Tensor)
    got = list(nn.DataLoader(ds, batch_size=2))
    assert type(got[0]) is list and [b[1].numpy().tolist() for b in got] == [[0, 1], [2]]
    assert list(nn.DataLoader(data.Subset(ds, []), batch_size=2)) == []


def test_random_split_takes_a_torch_generator_in_its_third_place():
    torch = pytest.importorskip("torch")
    ds = list(range(10))
    ours = nn.data.random_split(ds, [7, 3], torch.Generator().manual_seed(42))
    theirs = torch.utils.data.random_split(ds, [7, 3], torch.Generator().manual_seed(42))
    assert [list(s.indices) for s in ours] == [list(s.indices) for s in theirs]
    with pytest.raises(TypeError, match="an int or a generator"):
        nn.data.random_split(ds, [7, 3], 1.5)


def test_diagonal_is_a_view_as_pytorch_s():
    """``x.diagonal()`` shares storage in PyTorch: ``cov.diagonal().add_(eps)`` changes
    ``cov``, and an in-place change of ``x`` reaches the diagonal read before (it had been
    a copy, and the write was lost silently). Offsets and other planes too; the gradient
    passes through the in-place write."""
    x = nb.ones((3, 3))
    x.diagonal().zero_()
    assert x.tolist() == [[0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
    x = nb.ones((3, 3))
    d = x.diagonal()
    x.mul_(2)
    assert d.tolist() == [2.0, 2.0, 2.0]
    t = nb.zeros((2, 3, 4))
    t.diagonal(1, 1, 2).add_(5)
    want = np.zeros((2, 3, 4), np.float32)
    want[:, [0, 1, 2], [1, 2, 3]] = 5
    assert t.numpy().tolist() == want.tolist()
    below = nb.constant(np.arange(9.0, dtype=np.float32).reshape(3, 3))
    below.diagonal(-1)[0] = -1.0  # (an assignment into the view)
    assert below.numpy()[1, 0] == -1.0 and below.diagonal(-1).tolist() == [-1.0, 7.0]
    w = nb.tensor(np.eye(3, dtype=np.float32), requires_grad=True)
    y = w * 2
    y.diagonal().add_(1.0)
    y.sum().backward()
    assert w.grad.tolist() == [[2.0] * 3] * 3


def test_more_tensor_methods_from_pytorch_code():
    """Methods PyTorch code reaches for that a check against PyTorch found missing, with
    PyTorch's meanings (NumPy references here): products with ``beta``/``alpha``,
    ``where``, ``addcmul``/``addcdiv`` (Adam written by hand), the lower ``median`` and
    ``kthvalue`` with their indices, the special functions, ``index_fill``/``index_copy``
    and the in-place forms (``x.relu_()``, ``x.pow_(2)``, ``x.tril_()``, ...)."""
    rng = np.random.default_rng(4)
    a_, b_, c_ = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4, 5), (3, 5)))
    a, b, c = nb.tensor(a_), nb.tensor(b_), nb.tensor(c_)
    close = np.testing.assert_allclose
    close(a.mm(b).numpy(), a_ @ b_, rtol=1e-5)
    close(c.addmm(a, b, beta=0.5, alpha=2).numpy(), 0.5 * c_ + 2 * a_ @ b_, rtol=1e-5)
    close(a.mv(b[:, 0]).numpy(), a_ @ b_[:, 0], rtol=1e-5)
    with pytest.raises(
        ValueError, match=r"mm: expects two matrices, got shapes \(3, 4\) and \(4,\)"
    ):
        a.mm(b[:, 0])
    close(a.where(a > 0, 7.0).numpy(), np.where(a_ > 0, a_, 7.0))
    close(a.addcdiv(a, a + 3, value=2).numpy(), a_ + 2 * a_ / (a_ + 3), rtol=1e-6)
    assert a.unflatten(1, (2, -1)).shape == (3, 2, 2) and a.movedim(0, 1).shape == (4, 3)
    m_ = rng.standard_normal((4, 6)).astype(np.float32)
    m = nb.tensor(m_)
    lower = np.sort(m_, 1)[:, 2]  # (the lower of the two middle values of 6)
    got = m.median(1)
    close(got.values.numpy(), lower)
    assert got.indices.numpy().tolist() == np.argsort(m_, 1, kind="stable")[:, 2].tolist()
    assert m.median().item() == np.sort(m_.ravel())[11]
    values, indices = m.kthvalue(2, 0, keepdim=True)
    assert (
        values.shape == (1, 6) and indices.numpy().ravel().tolist() == np.argsort(m_, 0)[1].tolist()
    )
    p = np.array([0.1, 0.5, 0.9], np.float32)
    close(nb.tensor(p).logit(eps=0.2).numpy(), np.log([0.2 / 0.8, 1.0, 0.8 / 0.2]), rtol=1e-6)
    close(nb.tensor([1.0, 4.0]).lgamma().numpy(), [0.0, np.log(6.0)], atol=1e-6)
    close(nb.tensor([-2.5, 2.5]).frac().numpy(), [-0.5, 0.5])
    idx = nb.tensor(np.array([2, 0]))
    want = a_.copy()
    want[:, [2, 0]] = -1.0
    close(a.index_fill(1, idx, -1.0).numpy(), want)
    src = rng.standard_normal((3, 2)).astype(np.float32)
    want = a_.copy()
    want[:, [2, 0]] = src
    close(a.index_copy(1, idx, nb.tensor(src)).numpy(), want)
    x = nb.tensor(a_)
    x.relu_().pow_(2)
    close(x.numpy(), np.maximum(a_, 0) ** 2, rtol=1e-6)
    x = nb.tensor(a_)
    x.tril_(1)
    close(x.numpy(), np.tril(a_, 1))
    x = nb.ones((3, 3))
    x.fill_diagonal_(5.0)
    assert x.numpy().trace() == 15.0
    assert a.equal(a) and not a.equal(a + 1) and a.allclose(a + 1e-9)
    assert (a.nelement(), a.ndimension(), a.element_size()) == (12, 2, 4)
    assert a.new_tensor([1, 2]).dtype == nb.float32
    w = nb.tensor(m_, requires_grad=True)
    w.median(1).values.sum().backward()  # (the gradient reaches the chosen element)
    want = np.zeros_like(m_)
    want[np.arange(4), np.argsort(m_, 1, kind="stable")[:, 2]] = 1
    assert w.grad.numpy().tolist() == want.tolist()
