"""Functional layers and losses vs NumPy references; gradients vs finite differences."""

import math

import numpy as np
import pytest
from _nnref import fd_grad, t

import nabla as nb

nn = nb.nn
F = nb.nn.functional
rng = np.random.default_rng(0)


def _ln(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_linear_and_its_errors():
    x, w, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    np.testing.assert_allclose(F.linear(t(x), t(w), t(b)).numpy(), x @ w + b, rtol=1e-5)
    with pytest.raises(ValueError, match=r"linear: input of shape \(2, 5\) has 5 features"):
        F.linear(nb.ones((2, 5)), t(w))


def test_layer_norm_and_rms_norm_values_and_grads():
    x, w, b = rng.standard_normal((2, 5)), rng.standard_normal(5), rng.standard_normal(5)
    np.testing.assert_allclose(
        F.layer_norm(t(x), 5, t(w), t(b)).numpy(), _ln(x, w, b), rtol=1e-4, atol=1e-5
    )
    rms = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(
        F.rms_norm(t(x), (5,), t(w), eps=1e-6).numpy(), rms, rtol=1e-4, atol=1e-5
    )
    # eps defaults to the dtype's machine epsilon, as PyTorch: small inputs stay normalized
    tiny = x * 1e-4
    rms = tiny / np.sqrt((tiny**2).mean(-1, keepdims=True) + np.finfo(np.float32).eps)
    np.testing.assert_allclose(F.rms_norm(t(tiny), 5).numpy(), rms, rtol=1e-4)
    c = rng.standard_normal((2, 5))
    g = nb.grad(lambda v: (F.layer_norm(v, 5, t(w), t(b)) * t(c)).sum())(t(x, np.float64))
    ref = fd_grad(lambda v: (_ln(v, w, b) * c).sum(), x)
    np.testing.assert_allclose(g.numpy(), ref, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match=r"layer_norm: input of shape \(2, 5\) does not end"):
        F.layer_norm(t(x), 4)


def test_dropout_fresh_masks_scaling_and_eval():
    x = nb.ones((1000,))
    a, b = F.dropout(x, 0.25).numpy(), F.dropout(x, 0.25).numpy()
    assert np.allclose(np.unique(a), [0.0, 1.0 / 0.75])
    assert not np.array_equal(a, b)  # a fresh mask every call
    assert abs((a == 0).mean() - 0.25) < 0.06
    np.testing.assert_array_equal(F.dropout(x, 0.25, training=False).numpy(), 1.0)
    k = nb.random.key(3)
    np.testing.assert_array_equal(
        F.dropout(x, 0.5, key=k).numpy(), F.dropout(x, 0.5, key=k).numpy()
    )
    with pytest.raises(ValueError, match="p must be in"):
        F.dropout(x, 1.5)


def test_embedding():
    w = rng.standard_normal((6, 3))
    idx = np.array([[0, 5], [2, 2]])
    np.testing.assert_allclose(F.embedding(nb.constant(idx), t(w)).numpy(), w[idx], rtol=1e-6)
    g = nb.grad(lambda w_: F.embedding(nb.constant(idx), w_).sum())(t(w))
    np.testing.assert_allclose(g.numpy()[:, 0], [1, 0, 2, 0, 0, 1])
    with pytest.raises(TypeError, match="indices must be integers"):
        F.embedding(t([0.0]), t(w))


def _sdpa_ref(q, k, v, mask=None, causal=False):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -1e9)
    if mask is not None:
        s = np.where(mask, s, -1e9)
    w = np.exp(_log_softmax(s))
    return w @ v


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal):
    q, k, v = (rng.standard_normal((2, 4, 8)) for _ in range(3))
    mask = rng.random((2, 4, 4)) > 0.3
    out = F.scaled_dot_product_attention(t(q), t(k), t(v), nb.constant(mask), is_causal=causal)
    np.testing.assert_allclose(out.numpy(), _sdpa_ref(q, k, v, mask, causal), rtol=1e-4, atol=1e-5)
    g = nb.grad(
        lambda q_: F.scaled_dot_product_attention(
            q_, t(k, np.float64), t(v, np.float64), is_causal=causal
        ).sum()
    )(t(q, np.float64))
    ref = fd_grad(lambda q_: _sdpa_ref(q_, k, v, causal=causal).sum(), q)
    np.testing.assert_allclose(g.numpy(), ref, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="must share"):
        F.scaled_dot_product_attention(t(q), t(k[..., :4]), t(v))


def test_activations():
    x = rng.standard_normal(7)
    np.testing.assert_allclose(F.relu(t(x)).numpy(), np.maximum(x, 0), rtol=1e-6)
    np.testing.assert_allclose(
        F.leaky_relu(t(x), 0.1).numpy(), np.where(x > 0, x, 0.1 * x), rtol=1e-6
    )
    np.testing.assert_allclose(F.softmax(t(x)).numpy(), np.exp(_log_softmax(x)), rtol=1e-5)
    np.testing.assert_allclose(F.log_softmax(t(x)).numpy(), _log_softmax(x), rtol=1e-5)


# ----------------------------------------------------------------------------- losses
def test_mse_loss_reductions():
    a, b = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    np.testing.assert_allclose(F.mse_loss(t(a), t(b)).item(), ((a - b) ** 2).mean(), rtol=1e-5)
    np.testing.assert_allclose(
        F.mse_loss(t(a), t(b), "sum").item(), ((a - b) ** 2).sum(), rtol=1e-5
    )
    assert F.mse_loss(t(a), t(b), "none").shape == (3, 2)
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.mse_loss(t(a), t(b), "avg")
    with pytest.raises(ValueError, match=r"mse_loss: input of shape \(3, 2\) and target"):
        F.mse_loss(t(a), t(b[:2]))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_indices_probabilities_and_grad(smoothing):
    z, y = rng.standard_normal((4, 5)), np.array([0, 3, 4, 1])
    p = np.eye(5)[y] * (1 - smoothing) + smoothing / 5
    ref = -(p * _log_softmax(z)).sum(-1)
    got = F.cross_entropy_loss(t(z), nb.constant(y), label_smoothing=smoothing)
    np.testing.assert_allclose(got.item(), ref.mean(), rtol=1e-5)
    soft = F.cross_entropy_loss(t(z), t(np.eye(5)[y]), label_smoothing=smoothing, reduction="none")
    np.testing.assert_allclose(soft.numpy(), ref, rtol=1e-5)
    g = nb.grad(lambda v: F.cross_entropy_loss(v, nb.constant(y), smoothing))(t(z, np.float64))
    fd = fd_grad(lambda v: -(p * _log_softmax(v)).sum(-1).mean(), z)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match=r"class-index target of shape \(3,\)"):
        F.cross_entropy_loss(t(z), nb.constant(y[:3]))


def test_nll_and_bce_with_logits():
    z, y = rng.standard_normal((4, 3)), np.array([2, 0, 1, 1])
    lp = _log_softmax(z)
    np.testing.assert_allclose(
        F.nll_loss(t(lp), nb.constant(y)).item(), -lp[np.arange(4), y].mean(), rtol=1e-5
    )
    x, target = rng.standard_normal(6) * 30, (rng.random(6) > 0.5).astype(np.float64)
    # -log(sigmoid(x)) = log(1 + exp(-x)), exactly where sigmoid(x) rounds to 1 (|x| > 37)
    ref = target * np.logaddexp(0, -x) + (1 - target) * np.logaddexp(0, x)
    got = F.binary_cross_entropy_with_logits(
        t(x, np.float64), t(target, np.float64), reduction="none"
    )
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6, atol=1e-12)
    assert np.isfinite(F.binary_cross_entropy_with_logits(t(x), t(target)).item())


def test_bce_pos_weight():
    x, target = rng.standard_normal(5), (rng.random(5) > 0.5).astype(np.float64)
    sig = 1 / (1 + np.exp(-x))
    ref = -(3.0 * target * np.log(sig) + (1 - target) * np.log(1 - sig)).mean()
    got = F.binary_cross_entropy_with_logits(
        t(x, np.float64), t(target, np.float64), pos_weight=3.0
    )
    np.testing.assert_allclose(got.item(), ref, rtol=1e-6)


def test_bce_and_l1_derivatives_are_pytorchs_at_the_edges():
    """BCE's derivative (p - t) / max(p (1 - p), 1e-12) stays finite where p is exactly 0 or
    1 (a saturated sigmoid; it was NaN); |d|'s derivative in the L1 losses is sign(d), 0 at
    0. Expected values are PyTorch's."""
    p = t(np.array([0.0, 1.0, 0.0, 1.0, 0.5], np.float32))
    target = nb.constant(np.array([0.3, 0.3, 0.0, 1.0, 1.0], np.float32))
    g = nb.grad(lambda a: F.binary_cross_entropy(a, target, reduction="sum"))(p)
    np.testing.assert_allclose(g.numpy(), [-3e11, 7e11, 0.0, 0.0, -2.0], rtol=1e-6)
    logits = t(np.array([20.0, -120.0, 0.3], np.float32))
    ones = nb.constant(np.array([1.0, 0.0, 1.0], np.float32))
    g = nb.grad(lambda a: F.binary_cross_entropy(nb.sigmoid(a), ones))(logits)
    np.testing.assert_allclose(g.numpy(), [0.0, 0.0, -0.14185], rtol=1e-4)
    # inside (0, 1): the exact derivative, in p, in the target, and a second derivative
    pv, tv = rng.uniform(0.05, 0.95, 4), rng.uniform(0, 1, 4)
    gp, gt = nb.grad(lambda a, b: F.binary_cross_entropy(a, b), argnums=(0, 1))(
        t(pv, np.float64), t(tv, np.float64)
    )
    np.testing.assert_allclose(gp.numpy(), (pv - tv) / (pv * (1 - pv)) / 4, rtol=1e-10)
    np.testing.assert_allclose(gt.numpy(), (np.log1p(-pv) - np.log(pv)) / 4, rtol=1e-10)
    h = nb.hessian(lambda a: F.binary_cross_entropy(a, t(tv, np.float64)))(t(pv, np.float64))
    np.testing.assert_allclose(np.diag(h.numpy()), (tv / pv**2 + (1 - tv) / (1 - pv) ** 2) / 4)
    z, y = np.array([0.0, 1.0, -2.0, 0.5]), np.array([0.0, 0.5, -2.0, 1.0])
    for loss in (F.l1_loss, lambda a, b: F.smooth_l1_loss(a, b, beta=0.0)):
        assert loss(t(z), t(y)).item() == pytest.approx(0.25)
        g = nb.grad(lambda a, loss=loss: loss(a, t(y)))(t(z))
        np.testing.assert_array_equal(g.numpy(), [0.0, 0.25, 0.0, -0.25])


def test_sdpa_float_mask_is_added():
    q, k, v = (rng.standard_normal((3, 4)) for _ in range(3))
    bias = rng.standard_normal((3, 3))
    s = q @ k.T / 2.0 + bias
    w = np.exp(_log_softmax(s))
    got = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(bias))
    np.testing.assert_allclose(got.numpy(), w @ v, rtol=1e-4, atol=1e-5)


def test_class_indices_out_of_range_are_refused():
    logits = nb.constant(np.zeros((2, 5), np.float32))
    for fn in (F.cross_entropy_loss, F.nll_loss):
        with pytest.raises(IndexError, match=r"class index 7 is out of range for 5 classes"):
            fn(logits, nb.constant(np.array([1, 7], np.int32)))
        with pytest.raises(IndexError, match=r"class index -1"):
            fn(logits, nb.constant(np.array([-1, 0], np.int32)))
    # a target known only when the program runs cannot raise at the call: its
    # out-of-range entries give NaN (they matched no class and counted as zero loss)
    bad, good = nb.constant([0, 7]), nb.constant([0, 3])
    for fn in (
        F.nll_loss,
        F.cross_entropy_loss,
        lambda lg, tg: F.cross_entropy_loss(lg, tg, label_smoothing=0.1),
    ):
        c = nb.compile(lambda lg, tg, fn=fn: fn(lg, tg))
        assert np.isnan(c(logits, bad).item()) and np.isfinite(c(logits, good).item())
    per = nb.vmap(lambda tg: F.cross_entropy_loss(logits[0], tg))(bad).numpy()
    assert np.isfinite(per[0]) and np.isnan(per[1])
    ignored = nb.compile(lambda lg, tg: F.cross_entropy_loss(lg, tg, ignore_index=-100))
    np.testing.assert_allclose(ignored(logits, nb.constant([-100, 1])).item(), np.log(5))
    # that NaN is made by a division, so debug_nans names it at the call's line (a NaN
    # constant selected in passed as data, unnamed)
    with nb.debug_nans(), pytest.raises(FloatingPointError, match="div made NaN"):
        nb.compile(F.cross_entropy_loss)(logits, bad).item()


def test_lazily_computed_class_indices_out_of_range_raise_naming_the_loss():
    """A target computed by ops outside compile (a promise, not yet a value) is computed at
    the call and checked like a concrete one, not turned into a NaN loss."""
    logits = nb.constant(np.zeros((2, 3), np.float32))
    lazy = nb.constant([0, 2]) + 3  # [3, 5]
    assert lazy._impl.buffer is None
    for fn, name in ((F.cross_entropy_loss, "cross_entropy_loss"), (F.nll_loss, "nll_loss")):
        with pytest.raises(
            IndexError,
            match=rf"{name}: class index 3 is out of range for 3 classes \(input of shape "
            r"\(2, 3\), target of shape \(2,\)\)",
        ):
            fn(logits, lazy)
    # ignore_index is followed: a computed -100 counts for nothing
    skipped = nb.constant([-50, 1]) * 2  # [-100, 2]
    got = F.cross_entropy_loss(logits, skipped, ignore_index=-100).item()
    np.testing.assert_allclose(got, np.log(3), rtol=1e-6)


def test_cross_entropy_weight_and_ignore_index_as_pytorch():
    """PyTorch's weighted mean: each target's term scaled by its class weight, "mean"
    divides by the summed weights of the counted targets; ignored targets count nothing."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    y = np.array([0, 3, -100, 1, 2, -100])
    w = np.array([1.0, 2.0, 0.5, 3.0], np.float32)
    logp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    keep = y != -100
    yk = np.where(keep, y, 0)
    for e in (0.0, 0.1):
        probs = (1 - e) * np.eye(4)[yk] + e / 4
        per = -(probs * logp * w).sum(-1) * keep
        want = per.sum() / (w[yk] * keep).sum()
        got = F.cross_entropy_loss(
            nb.constant(x), nb.constant(y), e, weight=nb.constant(w), ignore_index=-100
        )
        np.testing.assert_allclose(got.item(), want, rtol=1e-5)
        none = F.cross_entropy_loss(
            nb.constant(x), nb.constant(y), e, "none", weight=w, ignore_index=-100
        )
        np.testing.assert_allclose(none.numpy(), per, rtol=1e-5, atol=1e-6)
    # without weights: the mean over counted targets
    got = F.cross_entropy_loss(nb.constant(x), nb.constant(y), ignore_index=-100).item()
    np.testing.assert_allclose(got, -(logp[keep, y[keep]]).mean(), rtol=1e-5)
    with pytest.raises(IndexError, match="ignore_index=-100"):
        F.cross_entropy_loss(nb.constant(x), nb.constant(y))
    with pytest.raises(IndexError, match="class index 7"):
        F.cross_entropy_loss(
            nb.constant(x), nb.constant(np.array([7, 0, 0, 0, 0, -100])), ignore_index=-100
        )
    with pytest.raises(TypeError, match="weight="):
        F.cross_entropy_loss(nb.constant(x), nb.constant(yk), nb.constant(w))


def test_softplus_beta_threshold_and_dropout_of_one_as_pytorch():
    x = np.array([-3.0, -0.5, 0.0, 0.7, 4.0, 30.0], np.float32)
    for beta, threshold in ((1.0, 20.0), (2.0, 20.0), (0.5, 1.0)):
        want = np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)
        got = F.softplus(nb.constant(x), beta, threshold)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(
            nb.nn.Softplus(beta, threshold)(nb.constant(x)).numpy(), want, rtol=1e-6
        )
    assert F.dropout(nb.constant(x), 1.0).numpy().tolist() == [0.0] * 6
    leaf = nb.tensor(x, requires_grad=True)  # (PyTorch's x * 0: a zero gradient, not an error)
    F.dropout(leaf, p=1.0).sum().backward()
    assert leaf.grad.tolist() == [0.0] * 6
    assert nb.nn.Dropout(1.0).eval()(nb.constant(x)).numpy().tolist() == x.tolist()
    with pytest.raises(ValueError, match="beta must be positive"):
        F.softplus(nb.constant(x), 0.0)


def test_masked_classes_at_minus_inf_leave_the_loss_finite():
    """A -inf logit (a masked class) that is not the target: PyTorch's finite loss, not
    ``0 * -inf = nan`` from a one-hot product; the gradient is zero at the masked class."""
    logits = np.array([[1.0, -np.inf, 0.5], [0.2, 0.1, -np.inf]], np.float32)
    target = np.array([0, 1])
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    want = -logp[[0, 1], target]
    got = F.cross_entropy_loss(t(logits), nb.constant(target), reduction="none")
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    w = np.array([1.0, 2.0, 3.0], np.float32)
    weighted = F.cross_entropy_loss(t(logits), nb.constant(target), weight=t(w))
    assert np.isclose(weighted.item(), (want * w[target]).sum() / w[target].sum())
    nll = F.nll_loss(t(logp), nb.constant(target), reduction="none")
    np.testing.assert_allclose(nll.numpy(), want, rtol=1e-6)
    g = nb.grad(lambda z: F.cross_entropy_loss(z, nb.constant(target)))(t(logits)).numpy()
    assert np.isfinite(g).all() and g[0, 1] == 0 and g[1, 2] == 0


def test_embedding_refuses_negative_indices_as_pytorch():
    table = nb.ones((6, 2))
    with pytest.raises(IndexError, match="embedding: index -1 is out of range for 6 rows"):
        F.embedding(nb.constant([0, -1]), table)
    with pytest.raises(IndexError, match=r"embedding: index 6 is out of range for 6 rows .*0 to 5"):
        F.embedding(nb.constant([6]), table)


_X = np.array([-100.0, -6, -3, -1, -0.5, 0, 0.5, 1, 3, 6, 7, 100], np.float32)


def _np_softplus(v):
    return np.logaddexp(0, v)


@pytest.mark.parametrize(
    "name, ref, module",
    [
        ("relu6", lambda v: np.clip(v, 0, 6), nn.ReLU6()),
        ("hardtanh", lambda v: np.clip(v, -1, 1), nn.Hardtanh()),
        ("elu", lambda v: np.where(v > 0, v, np.expm1(np.minimum(v, 0))), nn.ELU()),
        (
            "selu",
            lambda v: (
                1.0507009873554805
                * np.where(v > 0, v, 1.6732632423543772 * np.expm1(np.minimum(v, 0)))
            ),
            nn.SELU(),
        ),
        ("mish", lambda v: v * np.tanh(_np_softplus(v)), nn.Mish()),
        ("hardsigmoid", lambda v: np.clip(v / 6 + 0.5, 0, 1), nn.Hardsigmoid()),
        ("hardswish", lambda v: v * np.clip(v + 3, 0, 6) / 6, nn.Hardswish()),
        ("logsigmoid", lambda v: -_np_softplus(-v), nn.LogSigmoid()),
    ],
)
def test_more_activations_values_grads_and_modules(name, ref, module):
    fn = getattr(F, name)
    want = ref(_X.astype(np.float64))
    np.testing.assert_allclose(fn(t(_X)).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(module(t(_X)).numpy(), want, rtol=1e-5, atol=1e-6)
    inner = np.array([-2.5, -0.7, 0.3, 2.2], np.float64)  # away from the kinks
    g = nb.vmap(nb.grad(fn))(t(inner, np.float64)).numpy()
    fd = (ref(inner + 1e-6) - ref(inner - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)
    big = nb.vmap(nb.grad(fn))(t(_X)).numpy()
    assert np.isfinite(big).all()  # no inf * 0 from the unused branch


def test_kink_gradients_follow_pytorch():
    at = t(np.array([-3.0, -1.0, 0.0, 1.0, 3.0, 6.0], np.float32))
    assert nb.vmap(nb.grad(F.hardtanh))(at).tolist() == [0, 0, 1, 0, 0, 0]
    assert nb.vmap(nb.grad(F.relu6))(at).tolist() == [0, 0, 0, 1, 1, 0]
    assert nb.vmap(nb.grad(F.hardswish))(at).numpy()[[0, 4]].tolist() == [0.0, 1.0]


def test_more_losses_against_their_formulas():
    y = np.array([0.1, 2.0, -3.0, 0.4], np.float32)
    z = np.zeros(4, np.float32)
    d = np.abs(y)
    assert np.isclose(F.l1_loss(t(y), t(z)).item(), d.mean())
    sl1 = np.where(d < 0.5, 0.5 * d**2 / 0.5, d - 0.25).mean()
    assert np.isclose(F.smooth_l1_loss(t(y), t(z), beta=0.5).item(), sl1)
    assert np.isclose(F.smooth_l1_loss(t(y), t(z), beta=0.0).item(), d.mean())
    huber = np.where(d <= 0.5, 0.5 * d**2, 0.5 * (d - 0.25)).mean()
    assert np.isclose(F.huber_loss(t(y), t(z), delta=0.5).item(), huber)
    with pytest.raises(ValueError, match="huber_loss: delta must be > 0"):
        F.huber_loss(t(y), t(z), delta=0.0)
    with pytest.raises(ValueError, match=r"l1_loss: input of shape \(4,\) and target of shape"):
        F.l1_loss(t(y), t(z[:3]))
    lp = np.log(np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]], np.float32))
    tg = np.array([[0.0, 0.5, 0.5], [0.3, 0.3, 0.4]], np.float32)
    pointwise = np.where(tg > 0, tg * (np.log(np.where(tg > 0, tg, 1)) - lp), 0)
    assert np.isclose(F.kl_div(t(lp), t(tg)).item(), pointwise.mean())
    assert np.isclose(F.kl_div(t(lp), t(tg), reduction="batchmean").item(), pointwise.sum() / 2)
    logt = np.log(tg + 1e-3)
    as_log = F.kl_div(t(lp), t(logt), reduction="sum", log_target=True).item()
    assert np.isclose(as_log, (np.exp(logt) * (logt - lp)).sum(), rtol=1e-5)
    assert np.isfinite(nb.grad(lambda q: F.kl_div(q, t(tg)))(t(lp)).numpy()).all()
    p = np.array([0.0, 1e-8, 0.3, 0.5, 0.99, 1.0], np.float32)
    y01 = np.array([0.0, 1, 1, 0, 1, 0], np.float32)
    with np.errstate(divide="ignore"):  # log(0): clamped to -100, as PyTorch
        logs = np.maximum(np.log(p), -100), np.maximum(np.log1p(-p), -100)
    bce = -(y01 * logs[0] + (1 - y01) * logs[1])
    w = np.arange(1, 7, dtype=np.float32)
    got = F.binary_cross_entropy(t(p), t(y01), t(w), reduction="none").numpy()
    np.testing.assert_allclose(got, bce * w, rtol=1e-5)
    x = np.array([-2.0, 0.5, 3, -1, 0, 2], np.float32)
    with_logits = F.binary_cross_entropy_with_logits(t(x), t(y01), t(w), "none").numpy()
    plain = F.binary_cross_entropy_with_logits(t(x), t(y01), reduction="none").numpy()
    np.testing.assert_allclose(with_logits, plain * w, rtol=1e-6)  # weight third, as PyTorch


def test_losses_a_check_against_pytorch_found():
    """Values a check against PyTorch found: an integer input cast a float target down to
    it (l1 of [1, 2] against 0.5 scored as against 0); a NaN difference had a finite
    gradient in huber and smooth L1 (abs took its negative branch); kl_div gave 0 and no
    gradient for a negative target (PyTorch's xlogy gives NaN, gradient -target); an
    ignore_index with probability targets was dropped (PyTorch refuses it). Also
    PyTorch's elementwise ``weight=`` for mse, l1 and huber. Expected values PyTorch's."""
    ints, half = nb.constant([1, 2]), nb.constant([0.5, 0.5])
    assert F.l1_loss(ints, half).item() == 1.0
    assert F.smooth_l1_loss(ints, half).item() == 0.5625
    assert F.mse_loss(ints, half).item() == 1.25
    assert F.binary_cross_entropy_with_logits(ints, half).item() == pytest.approx(0.9700948)
    small = nb.constant(np.float16([1.0])), nb.constant(np.float32([1.0001]))
    got = F.l1_loss(*small)
    assert got.dtype == nb.float32 and got.item() == pytest.approx(1e-4, rel=1e-3)
    x, y = nb.constant([0.2, np.nan, 0.7]), nb.constant([0.0, 1.0, 1.0])
    for loss in (F.huber_loss, F.smooth_l1_loss):
        g = nb.grad(lambda a, loss=loss: loss(a, y, reduction="sum"))(x).numpy()
        np.testing.assert_allclose(g, [0.2, np.nan, -0.3], rtol=1e-6)
    inf = nb.grad(lambda a: F.huber_loss(a, y, reduction="sum"))(nb.constant([np.inf, 0, 1]))
    assert inf.numpy().tolist() == [1.0, -1.0, 0.0]  # no 0 * inf from the unused piece
    lp, tg = nb.constant([-1.0, -0.5]), nb.constant([-0.2, 0.4])
    got = F.kl_div(lp, tg, reduction="none").numpy()
    assert np.isnan(got[0]) and got[1] == pytest.approx(0.4 * (np.log(0.4) + 0.5))
    g = nb.grad(lambda a: F.kl_div(a, tg, reduction="sum"))(lp).numpy()
    np.testing.assert_allclose(g, [0.2, -0.4])
    probs = nb.constant([[0.3, 0.7]])
    with pytest.raises(ValueError, match=r"cross_entropy: ignore_index=1 needs class-index"):
        F.cross_entropy(nb.zeros((1, 2)), probs, ignore_index=1)
    assert F.cross_entropy(nb.zeros((1, 2)), probs, ignore_index=-1).item() == pytest.approx(
        np.log(2)
    )  # (a negative one is ignored, as PyTorch's)
    g = nb.grad(lambda t: F.kl_div(lp, t, reduction="sum"))(tg).numpy()
    assert np.isnan(g[0]) and np.isfinite(g[1])  # NaN loss, NaN gradient
    assert F.cross_entropy(nb.zeros((1, 2)), probs).item() == pytest.approx(np.log(2))
    a, z, w = nb.constant([1.0, 2.0, 3.0]), nb.zeros((3,)), nb.constant([1.0, 0.0, 2.0])
    assert F.mse_loss(a, z, weight=w).item() == pytest.approx(19 / 3)
    assert F.l1_loss(a, z, "sum", weight=w).item() == 7.0
    np.testing.assert_allclose(F.huber_loss(a, z, "none", 1.5, w).numpy(), [0.5, 0, 6.75])
    # a weighted mean, as PyTorch's mse and l1 (over the weights' sum: 4 here, not 3); its
    # huber divides by the element count
    w4 = nb.constant([1.0, 1.0, 2.0])
    assert F.mse_loss(a, z, weight=w4).item() == pytest.approx(23 / 4)
    assert F.l1_loss(a, z, weight=w4).item() == pytest.approx(9 / 4)
    assert F.huber_loss(a, z, delta=1.5, weight=w4).item() == pytest.approx(9.125 / 3)
    half = nb.constant(np.float16([-1.0, -2.0]))
    assert F.kl_div(half, nb.constant(np.float16([0.5, 0.5]))).dtype == nb.float16
    with pytest.raises(ValueError, match=r"mse_loss: weight of shape \(2,\) does not"):
        F.mse_loss(a, z, weight=nb.ones((2,)))


def test_max_pool_of_bools_is_any_per_window():
    x = nb.constant(np.eye(4, dtype=bool).reshape(1, 4, 4, 1))
    got = nb.max_pool2d(x, 2)
    assert got.dtype == nb.bool and got.numpy().ravel().tolist() == [True, False, False, True]


def test_functional_checks_found_against_pytorch():
    """cosine_similarity of inputs of different ranks reduced each input's own axis
    ``dim`` before broadcasting (wrong values); normalize with p < 1 had an infinite
    gradient at a zero element (PyTorch: 0); and several bad arguments went through
    silently: an out-of-range padding_idx (wrapped), one_hot of computed indices out of
    range (rows of zeros), hardtanh with min > max, a pool padding over half the window,
    a BCE weight that enlarges the loss."""
    F = nb.nn.functional
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 4)), rng.standard_normal((2, 4, 4))
    for dim in (0, 1, -1):
        got = F.cosine_similarity(nb.constant(a), nb.constant(b), dim=dim).numpy()
        aa, bb = np.broadcast_arrays(a, b)  # dim counts in the broadcast shape (2, 4, 4)
        norms = np.linalg.norm(aa, axis=dim) * np.linalg.norm(bb, axis=dim)
        want = (aa * bb).sum(dim) / norms
        np.testing.assert_allclose(got, want, rtol=1e-5)
    x = nb.constant(np.array([[0.0, 1.0, -2.0, 0.5]], np.float32))
    for p in (0.5, 1.0, 3.0):
        g = nb.grad(lambda v, p=p: (F.normalize(v, p=p, dim=1) * nb.arange(4.0)).sum())(x)
        assert np.isfinite(g.numpy()).all() and g.numpy()[0, 0] == 0.0
    with pytest.raises(ValueError, match=r"embedding: padding_idx 7 is out of range for 5"):
        F.embedding(nb.constant([0, 1]), nb.ones((5, 2)), padding_idx=7)
    with pytest.raises(ValueError, match=r"one_hot: class index 4 is out of range for 3"):
        F.one_hot(nb.constant([0, 1]) + 4, 3)
    with pytest.raises(ValueError, match=r"hardtanh: min_val 2.0 is greater than max_val"):
        F.hardtanh(nb.ones(3), 2.0, -1.0)
    with pytest.raises(ValueError, match=r"max_pool2d: padding \(2, 2\) of dim 1 is more than"):
        F.max_pool2d(nb.ones((1, 4, 4, 1)), 2, padding=2)
    with pytest.raises(ValueError, match=r"avg_pool2d: padding \(2, 2\) of dim 1 is more than"):
        F.avg_pool2d(nb.ones((1, 4, 4, 1)), 2, padding=2)
    with pytest.raises(ValueError, match=r"with_logits: weight of shape \(2, 4, 3\) does not"):
        F.binary_cross_entropy_with_logits(
            nb.zeros((4, 3)), nb.ones((4, 3)), weight=nb.ones((2, 4, 3))
        )
    with pytest.raises(ValueError, match=r"pos_weight of shape \(2, 1, 3\) does not broadcast"):
        F.binary_cross_entropy_with_logits(
            nb.zeros((4, 3)), nb.ones((4, 3)), pos_weight=nb.ones((2, 1, 3))
        )


def test_one_hot_is_pytorch_s_with_jax_s_dtype_on_request():
    """int64 as PyTorch's ``F.one_hot``; ``dtype=`` gives ``jax.nn.one_hot``'s float32."""
    idx = nb.constant([0, 2])
    assert nb.nn.functional.one_hot(idx, 3).dtype == nb.int64
    got = nb.nn.functional.one_hot(idx, 3, dtype=nb.float32)
    assert got.dtype == nb.float32 and got.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]


def test_more_activations_and_losses_against_their_formulas():
    """PyTorch's softsign, tanhshrink, softmin, celu, glu, threshold, pairwise_distance
    and its ranking, embedding and likelihood losses, against their formulas (the live
    comparison with PyTorch is the next test)."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    x = t(a)
    np.testing.assert_allclose(F.softsign(x).numpy(), a / (1 + np.abs(a)), rtol=1e-6)
    np.testing.assert_allclose(F.tanhshrink(x).numpy(), a - np.tanh(a), atol=1e-6)
    e = np.exp(-a)
    np.testing.assert_allclose(F.softmin(x, 0).numpy(), e / e.sum(0), rtol=1e-5)
    want = np.where(a > 0, a, 0.5 * np.expm1(a / 0.5))
    np.testing.assert_allclose(F.celu(x, 0.5).numpy(), want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(F.glu(x).numpy(), a[:, :3] / (1 + np.exp(-a[:, 3:])), rtol=1e-5)
    assert F.threshold(x, 0.1, -3.0).numpy().min() >= -3.0
    np.testing.assert_allclose(
        F.pairwise_distance(x, t(b)).numpy(), np.linalg.norm(a - b + 1e-6, axis=-1), rtol=1e-5
    )
    y = np.array([1.0, -1.0, 1.0, -1.0])
    s1, s2 = a[:, 0], b[:, 0]
    np.testing.assert_allclose(
        F.margin_ranking_loss(t(s1), t(s2), t(y), 0.3).item(),
        np.maximum(-y * (s1 - s2) + 0.3, 0).mean(),
        rtol=1e-6,
    )
    sign = np.sign(b)
    want = np.where(sign != 1, np.maximum(0.7 - a, 0), 0) + np.where(sign != -1, a, 0)
    np.testing.assert_allclose(
        F.hinge_embedding_loss(x, t(sign), 0.7).item(), want.mean(), rtol=1e-6
    )
    want = np.log1p(np.exp(-sign * a)).sum()
    np.testing.assert_allclose(F.soft_margin_loss(x, t(sign), "sum").item(), want, rtol=1e-5)
    cos = (a * b).sum(-1) / np.sqrt(((a * a).sum(-1) + 1e-12) * ((b * b).sum(-1) + 1e-12))
    want = np.where(y == 1, 1 - cos, np.maximum(cos - 0.2, 0))
    got = F.cosine_embedding_loss(x, t(b), t(y), 0.2, "none").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    counts = rng.poisson(3.0, (4, 6)).astype(np.float32)
    want = np.exp(a) - counts * a
    big = np.maximum(counts, 1)
    stirling = np.where(counts > 1, big * np.log(big) - big + 0.5 * np.log(2 * np.pi * big), 0)
    got = F.poisson_nll_loss(x, t(counts), full=True, reduction="none").numpy()
    np.testing.assert_allclose(got, want + stirling, rtol=1e-5, atol=1e-6)
    var = np.abs(b) + 0.1
    want = 0.5 * (np.log(var) + (a - b) ** 2 / var)
    got = F.gaussian_nll_loss(x, t(b), t(var), reduction="none").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    got = F.gaussian_nll_loss(x, t(b), t(var[:, 0])).item()  # one variance per sample
    want = (0.5 * (np.log(var[:, :1]) + (a - b) ** 2 / var[:, :1])).mean()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    with pytest.raises(ValueError, match="gaussian_nll_loss: var has negative entries"):
        F.gaussian_nll_loss(x, t(b), t(-var))
    c = rng.standard_normal((4, 6))
    d = lambda u, v: np.linalg.norm(u - v + 1e-6, axis=-1)  # noqa: E731
    want = np.maximum(d(a, b) - np.minimum(d(a, c), d(b, c)) + 0.5, 0).mean()
    got = F.triplet_margin_loss(x, t(b), t(c), margin=0.5, swap=True).item()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    labels = (b > 0).astype(np.float64)
    per = labels * np.log1p(np.exp(-a)) + (1 - labels) * np.log1p(np.exp(a))
    got = F.multilabel_soft_margin_loss(x, t(labels)).item()
    np.testing.assert_allclose(got, per.mean(-1).mean(), rtol=1e-5)
    assert nn.TripletMarginLoss(swap=True)(x, t(b), t(c)).shape == ()
    assert nn.GLU(0)(x).shape == (2, 6) and nn.Threshold(0.0, 1.0)(x).numpy().min() > 0


def test_more_activations_and_losses_match_torch_live_when_installed():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    rng = np.random.default_rng(5)
    a, b, c = (rng.standard_normal((4, 6)).astype(np.float32) for _ in range(3))
    y = np.array([1, -1, 1, -1], np.float32)
    T = torch.tensor
    v = np.abs(c)
    calls = [
        ("softsign", (a,), {}),
        ("celu", (a, 0.7), {}),
        ("glu", (a,), {}),
        ("cosine_embedding_loss", (a, b, y, 0.2), {}),
        ("triplet_margin_loss", (a, b, c), {"p": 1}),
        ("poisson_nll_loss", (a, np.abs(b)), {"full": True}),
        ("gaussian_nll_loss", (a, b, v), {}),
    ]
    for name, args, kw in calls:
        ours = getattr(F, name)(*[t(x) for x in args], **kw).numpy()
        theirs = getattr(tf, name)(*[T(x) for x in args], **kw).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=name)


# ----------------------------------------------------------------------------- extremes
def test_extreme_values_keep_values_and_gradients_finite_and_accurate():
    """Each case had a value or gradient far from PyTorch's and the float64 truth; the
    references below are the float64 truths (PyTorch's agree within the tolerances)."""
    f16, bf16 = nb.float16, nb.bfloat16
    # float16 softplus / logsigmoid / BCE-with-logits: a mean's cotangent divided by
    # 1 + e^x fell below float16's normal range first (1.63e-4 for 2.44e-4, up to 33% off)
    x = nb.full((4096,), 7.914, dtype=f16)
    truth = 1 / (1 + np.exp(-np.float64(np.float16(7.914)))) / 4096
    for loss in (
        lambda v: F.softplus(v).mean(),
        lambda v: -F.logsigmoid(-v).mean(),
        lambda v: F.binary_cross_entropy_with_logits(v, nb.zeros_like(v)),
    ):
        got = float(nb.grad(loss)(x).numpy()[0])
        assert got == pytest.approx(truth, rel=2e-3), got
    # softplus(x, beta) is x where beta * x passes the threshold, also where it overflows
    big = nb.constant(np.array([700.0, 60000.0], np.float16))
    np.testing.assert_array_equal(F.softplus(big, beta=100).numpy(), big.numpy())
    np.testing.assert_array_equal(nb.grad(lambda v: F.softplus(v, beta=100).sum())(big).numpy(), 1)
    assert F.softplus(nb.constant([3e38]), beta=2).item() == pytest.approx(3e38)
    # tanh-approximate gelu of a huge float16: its cubic overflowed, gradient NaN
    g = nb.grad(lambda v: F.gelu(v, approximate="tanh").sum())
    np.testing.assert_array_equal(g(nb.constant(np.array([1e4, -1e4], np.float16))).numpy(), [1, 0])
    # ELU's gradient exp(x) for x << 0: expm1's derivative was taken as expm1(x) + 1
    for dtype, at in ((bf16, -8.0), (f16, -11.0), (nb.float32, -17.0)):
        got = float(nb.grad(lambda v: F.elu(v).sum())(nb.full((1,), at, dtype=dtype)).numpy()[0])
        assert got == pytest.approx(np.exp(at), rel=2e-2), (dtype, got)
    # 16-bit norms and std in float32: squares past 65504 had given inf and zero gradients
    v = nb.constant(np.array([300.0, 400.0, 0.0], np.float16))
    assert nb.linalg.norm(v).item() == 500.0
    np.testing.assert_allclose(nb.grad(nb.linalg.norm)(v).numpy(), [0.6, 0.8, 0.0], rtol=1e-3)
    s = nb.std(nb.constant(np.array([3e4, 4e4, 1.0], np.float16)))
    assert s.dtype is f16 and s.item() == pytest.approx(16996.27, rel=1e-3)


def test_long_float32_sums_and_running_sums_stay_accurate():
    """NumPy adds value by value along a non-contiguous axis and in a running sum: a
    float32 column sum of 10^6 values of 0.1 was 1% high, a running sum of 10^7 8.8%."""
    tall = nb.full((1_000_000, 8), 0.1)
    np.testing.assert_allclose(tall.sum(axis=0).numpy(), 100000.0, rtol=1e-6)
    np.testing.assert_allclose(tall.mean(axis=0).numpy(), 0.1, rtol=1e-6)
    noisy = np.random.default_rng(0).normal(100.0, 1.0, (200_000, 2)).astype(np.float32)
    np.testing.assert_allclose(
        nb.var(nb.constant(noisy), axis=0).numpy(), noisy.astype(np.float64).var(0), rtol=1e-5
    )
    run = nb.cumsum(nb.full((10_000_000,), 0.1), axis=0).numpy()
    assert run.dtype == np.float32 and run[-1] == pytest.approx(1e6, rel=1e-6)


def test_sdpa_grouped_query_attention_as_pytorch():
    """enable_gqa: each key/value head serves Hq // Hkv consecutive query heads (PyTorch's
    repeat_interleave of the heads)."""
    q = rng.standard_normal((2, 6, 5, 4)).astype(np.float32)
    k = rng.standard_normal((2, 2, 7, 4)).astype(np.float32)
    v = rng.standard_normal((2, 2, 7, 3)).astype(np.float32)
    got = F.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=True, enable_gqa=True)
    want = F.scaled_dot_product_attention(
        t(q), t(np.repeat(k, 3, axis=1)), t(np.repeat(v, 3, axis=1)), is_causal=True
    )
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="with enable_gqa the query's heads"):
        F.scaled_dot_product_attention(
            t(q), t(k[:, :1].repeat(4, 1)), t(v[:, :1].repeat(4, 1)), enable_gqa=True
        )
    with pytest.raises(ValueError, match="batch and head dims"):  # without it: refused
        F.scaled_dot_product_attention(t(q), t(k), t(v))


def test_shrinks_and_prelu_as_pytorch():
    x = np.array([-1.0, -0.5, -0.3, 0.0, 0.3, 0.5, 0.7, 2.0], np.float32)
    for lambd in (0.5, 0.3):
        hard = np.where(np.abs(x) > lambd, x, 0.0)
        soft = np.where(x > lambd, x - lambd, np.where(x < -lambd, x + lambd, 0.0))
        np.testing.assert_allclose(F.hardshrink(t(x), lambd).numpy(), hard)
        np.testing.assert_allclose(nb.nn.Hardshrink(lambd)(t(x)).numpy(), hard)
        np.testing.assert_allclose(F.softshrink(t(x), lambd).numpy(), soft, rtol=1e-6)
        np.testing.assert_allclose(nb.nn.Softshrink(lambd)(t(x)).numpy(), soft, rtol=1e-6)
        grad = nb.grad(lambda v, lambd=lambd: F.softshrink(v, lambd).sum())(t(x)).numpy()
        np.testing.assert_array_equal(grad, (np.abs(x) > lambd).astype(np.float32))
    with pytest.raises(ValueError, match="softshrink: lambd must be >= 0"):
        F.softshrink(t(x), -1.0)
    w = np.array([0.1, 0.2, 0.3], np.float32)
    x2 = np.array([[-1.0, 0.0, 2.0], [3.0, -2.0, -0.5]], np.float32)
    np.testing.assert_allclose(F.prelu(t(x2), t(w)).numpy(), np.where(x2 > 0, x2, w * x2))
    gx, gw = nb.grad(lambda a, b: F.prelu(a, b).sum(), argnums=(0, 1))(t(x2), t(w))
    np.testing.assert_allclose(gx.numpy(), np.where(x2 > 0, 1.0, w + 0 * x2))  # slope at 0
    np.testing.assert_allclose(gw.numpy(), np.where(x2 > 0, 0.0, x2).sum(0))
    np.testing.assert_allclose(F.prelu(t(x2), t([0.25])).numpy(), np.where(x2 > 0, x2, 0.25 * x2))
    with pytest.raises(ValueError, match=r"prelu: weight of shape \(2,\) must hold one slope"):
        F.prelu(t(x2), t([0.1, 0.2]))
