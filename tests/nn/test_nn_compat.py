"""The original nabla's spellings in ``nabla.nn``: each is an alias or keyword of ours, so each
test checks the spelling gives what our own spelling gives (and the reference math)."""

import numpy as np
import pytest

import nabla as nb
from nabla import nn
from nabla.nn import finetune as ft
from nabla.nn import functional as F
from nabla.nn import optim

try:
    import torch
except ImportError:  # CI has no torch: the closed-form references below still run
    torch = None


def _rng(seed=0):
    return np.random.default_rng(seed)


def _same(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# ----------------------------------------------------------------------------- layers
def test_mha_d_model_is_embed_dim():
    key = nb.random.key(1)
    a = nn.MultiHeadAttention(d_model=8, num_heads=2, key=key)
    b = nn.MultiHeadAttention(8, 2, key=key)
    x = nb.constant(_rng().standard_normal((2, 3, 8)).astype(np.float32))
    _same(a(x, x, x, is_causal=True).numpy(), b(x, is_causal=True).numpy())
    assert a.embed_dim == 8 and len(list(a.parameters())) == 8
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiHeadAttention(d_model=10, num_heads=3)
    with pytest.raises(TypeError, match="both embed_dim=8 and d_model=8"):
        nn.MultiHeadAttention(8, 2, d_model=8)
    with pytest.raises(TypeError, match="missing"):
        nn.MultiHeadAttention(num_heads=2)


@pytest.mark.parametrize("cls", [nn.TransformerEncoderLayer, nn.TransformerDecoderLayer])
def test_transformer_layers_num_heads_and_is_causal(cls):
    key = nb.random.key(2)
    a = cls(d_model=8, num_heads=2, dim_feedforward=16, dropout=0.0, key=key)
    b = cls(8, 2, 16, 0.0, key=key)
    assert a.self_attn.num_heads == 2
    x = nb.constant(_rng(1).standard_normal((1, 4, 8)).astype(np.float32))
    if cls is nn.TransformerEncoderLayer:
        got, want = a(x, is_causal=True), b(x, is_causal=True)
        assert len(list(a.parameters())) == 16
    else:
        mem = nb.constant(_rng(2).standard_normal((1, 5, 8)).astype(np.float32))
        got, want = a(x, mem, is_causal=True), b(x, mem, tgt_is_causal=True)
        assert not np.allclose(got.numpy(), b(x, mem).numpy())  # causal changes the result
        assert len(list(a.parameters())) == 26
    _same(got.numpy(), want.numpy())
    with pytest.raises(TypeError, match="nhead"):
        cls(8, 2, num_heads=2)


def test_layer_norm_axis():
    x = _rng(3).standard_normal((3, 4, 5)).astype(np.float32)
    w = _rng(4).standard_normal((4, 5)).astype(np.float32)
    ours = F.layer_norm(nb.constant(x), (4, 5), nb.constant(w))
    _same(F.layer_norm(nb.constant(x), weight=nb.constant(w), axis=(-2, -1)).numpy(), ours.numpy())
    # any axes, not only trailing ones
    mu = x.mean(axis=0, keepdims=True)
    ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=0, keepdims=True) + 1e-5)
    _same(F.layer_norm(nb.constant(x), axis=0).numpy(), ref, 1e-5)
    g = nb.grad(lambda t: F.layer_norm(t, axis=-1).square().sum())(nb.constant(x))
    g_ref = nb.grad(lambda t: F.layer_norm(t, 5).square().sum())(nb.constant(x))
    _same(g.numpy(), g_ref.numpy(), 1e-5)
    with pytest.raises(ValueError, match="both normalized_shape"):
        F.layer_norm(nb.constant(x), 5, axis=-1)
    with pytest.raises(ValueError, match=r"axis 3 is out of range .* \(3, 4, 5\)"):
        F.layer_norm(nb.constant(x), axis=3)


def test_cross_entropy_axis():
    logits = _rng(5).standard_normal((2, 5, 3)).astype(np.float32)  # classes on axis 1
    target = np.array([[0, 4, 2], [1, 1, 3]])
    got = F.cross_entropy_loss(nb.constant(logits), nb.constant(target), axis=1)
    want = F.cross_entropy_loss(nb.constant(np.moveaxis(logits, 1, -1)), nb.constant(target))
    _same(got.item(), want.item())
    probs = np.eye(5, dtype=np.float32)[target]  # (2, 3, 5)
    soft = F.cross_entropy_loss(nb.constant(logits), nb.constant(np.moveaxis(probs, -1, 1)), axis=1)
    _same(soft.item(), want.item(), 1e-5)
    if torch is not None:  # PyTorch's class axis is 1
        ref = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(target))
        _same(got.item(), ref.item(), 1e-5)
    with pytest.raises(ValueError, match=r"axis=3 is out of range for logits of shape"):
        F.cross_entropy_loss(nb.constant(logits), nb.constant(target), axis=3)


# ----------------------------------------------------------------------------- optimizers
def test_sgd_step():
    rng = _rng(6)
    p, g = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 3))
    g = g.astype(np.float32)
    p1, buf = optim.sgd_step(nb.constant(p), nb.constant(g), lr=0.1, weight_decay=0.1)
    _same(p1.numpy(), p - 0.1 * (g + 0.1 * p))
    assert buf is None
    p1, buf = optim.sgd_step(nb.constant(p), nb.constant(g), lr=0.1, momentum=0.9)
    _same(buf.numpy(), g)
    p2, buf2 = optim.sgd_step(p1, nb.constant(g), buf, lr=0.1, momentum=0.9)
    _same(buf2.numpy(), 1.9 * g, 1e-5)
    _same(p2.numpy(), p - 0.1 * g - 0.1 * 1.9 * g, 1e-5)
    if torch is not None:
        pt = torch.nn.Parameter(torch.tensor(p))
        opt = torch.optim.SGD([pt], lr=0.1, momentum=0.9)
        for _ in range(2):
            pt.grad = torch.tensor(g)
            opt.step()
        _same(p2.numpy(), pt.detach().numpy(), 1e-5)
    with pytest.raises(ValueError, match=r"momentum_buffer of shape \(2,\)"):
        optim.sgd_step(nb.constant(p), nb.constant(g), nb.ones((2,)), lr=0.1, momentum=0.9)


def _adamw_ref(p, g, steps, lr, b1, b2, eps, wd, bias_correction=True):
    m = v = np.zeros_like(p, dtype=np.float64)
    p = p.astype(np.float64)
    for t in range(1, steps + 1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        c1, c2 = (1 - b1**t, 1 - b2**t) if bias_correction else (1.0, 1.0)
        p = p - lr * wd * p - lr * (m / c1) / (np.sqrt(v / c2) + eps)
    return p, m, v


def test_adamw_step():
    rng = _rng(7)
    p, g = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    q, m, v = nb.constant(p), nb.zeros((3, 4)), nb.zeros((3, 4))
    for t in (1, 2):
        q, m, v = optim.adamw_step(q, nb.constant(g), m, v, t, lr=1e-2, weight_decay=1e-2)
    ref_p, ref_m, ref_v = _adamw_ref(p, g, 2, 1e-2, 0.9, 0.999, 1e-8, 1e-2)
    _same(q.numpy(), ref_p, 1e-5)
    _same(m.numpy(), ref_m, 1e-6)
    _same(v.numpy(), ref_v, 1e-6)
    if torch is not None:
        pt = torch.nn.Parameter(torch.tensor(p))
        opt = torch.optim.AdamW([pt], lr=1e-2, weight_decay=1e-2)
        for _ in range(2):
            pt.grad = torch.tensor(g)
            opt.step()
        _same(q.numpy(), pt.detach().numpy(), 1e-5)
        _same(m.numpy(), opt.state[pt]["exp_avg"].numpy(), 1e-6)
    # a tensor step (as inside compile) gives the same
    q2, _, _ = optim.adamw_step(
        nb.constant(p), nb.constant(g), m * 0, v * 0, nb.constant(1.0), lr=1e-2
    )
    _same(q2.numpy(), _adamw_ref(p, g, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0)[0], 1e-5)


def test_adamw_update_original_keywords():
    rng = _rng(8)
    p, g = (rng.standard_normal((3, 3)).astype(np.float32) for _ in range(2))
    params, grads = {"w": nb.constant(p)}, {"w": nb.constant(g)}
    # the original's defaults: no weight decay
    new, state = optim.adamw_update(params, grads, optim.adamw_init(params), lr=5e-3)
    _same(new["w"].numpy(), _adamw_ref(p, g, 1, 5e-3, 0.9, 0.999, 1e-8, 0.0)[0], 1e-6)
    assert state["step"].item() == 1
    new, _ = optim.adamw_update(
        params, grads, optim.adamw_init(params), lr=5e-3, beta1=0.8, beta2=0.99,
        weight_decay=0.1, bias_correction=False,
    )  # fmt: skip
    ref = _adamw_ref(p, g, 1, 5e-3, 0.8, 0.99, 1e-8, 0.1, bias_correction=False)[0]
    _same(new["w"].numpy(), ref, 1e-6)
    same, _ = optim.adamw_update(
        params, grads, optim.adamw_init(params), 5e-3, (0.8, 0.99), weight_decay=0.1,
        bias_correction=False,
    )  # fmt: skip
    _same(same["w"].numpy(), new["w"].numpy())
    with pytest.raises(TypeError, match="both betas"):
        optim.adamw_update(params, grads, optim.adamw_init(params), betas=(0.9, 0.9), beta1=0.8)
    lazy, _ = optim.adamw_update(params, grads, optim.adamw_init(params), realize=False)
    real, _ = optim.adamw_update(params, grads, optim.adamw_init(params), realize=True)
    assert lazy["w"]._impl.buffer is None and real["w"]._impl.buffer is not None
    _same(lazy["w"].numpy(), real["w"].numpy())


def test_adamw_update_original_keywords_under_compile():
    params = {"w": nb.constant(_rng(9).standard_normal((4, 2)).astype(np.float32))}
    x = nb.constant(_rng(10).standard_normal((8, 4)).astype(np.float32))

    @nb.compile
    def step(p, s):
        loss, g = nb.value_and_grad(lambda q: (x @ q["w"]).square().mean())(p)
        p, s = optim.adamw_update(p, g, s, lr=1e-2, beta1=0.9, beta2=0.99, bias_correction=False)
        return p, s, loss

    state, losses = optim.adamw_init(params), []
    for _ in range(4):
        params, state, loss = step(params, state)
        losses.append(loss.item())
    assert step.stats.misses == 1 and losses[-1] < losses[0]


def test_optimizer_execution_policy():
    before = optim.Optimizer.get_execution_policy()
    assert before == {"auto_realize_updated_params": True, "auto_realize_updated_state": True}
    params = {"w": nb.constant(_rng(11).standard_normal((3, 2)).astype(np.float32))}
    grads = {"w": nb.ones((3, 2))}
    try:
        optim.Optimizer.set_execution_policy(
            auto_realize_updated_params=False, auto_realize_updated_state=False
        )
        assert not any(optim.Optimizer.get_execution_policy().values())
        w = params["w"]
        want = w.numpy() - 0.1 * np.sign(grads["w"].numpy())
        opt = optim.Adam(params, lr=0.1)
        assert opt.step(grads)["w"] is w and w._impl.buffer is None  # lazy, in place
        assert opt.state["mu"][0]._impl.buffer is None
        _same(w.numpy(), want, 1e-5)
    finally:
        optim.Optimizer.set_execution_policy(**before)
    assert optim.Optimizer.get_execution_policy() == before
    optim.Adam(params, lr=0.1).step(grads)
    assert params["w"]._impl.buffer is not None


# ----------------------------------------------------------------------------- modules
def test_module_execution_policy_and_backward():
    before = nn.Module.get_execution_policy()
    assert before == {"auto_realize_toplevel_forward": False, "auto_realize_backward_grads": False}
    model = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    x = nb.ones((4, 3))
    assert model(x)._impl.buffer is None  # lazy by default
    try:
        nn.Module.set_execution_policy(auto_realize_toplevel_forward=True)
        assert nn.Module.get_execution_policy()["auto_realize_toplevel_forward"] is True
        out = model(x)
        assert out._impl.buffer is not None
        _same(out.numpy(), nb.compile(lambda m, t: m(t))(model, x).numpy())  # not when traced
    finally:
        nn.Module.set_execution_policy(**before)
    assert nn.Module.get_execution_policy() == before
    loss = F.mse_loss(model(x), nb.zeros((4, 2)))
    model.backward(loss)
    grads = [p.grad.numpy() for p in model.parameters()]
    model.zero_grad()
    F.mse_loss(model(x), nb.zeros((4, 2))).backward()
    for a, p in zip(grads, model.parameters()):
        _same(a, p.grad.numpy())


def test_module_training_alias():
    model = nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.5))
    model.eval()
    assert all(not m._training and not m.training for m in model.modules())
    model.train()
    assert all(m._training for m in model.modules())
    model[1]._training = False
    assert model[1].training is False and model[0].training is True


# ----------------------------------------------------------------------------- finetune
def _adapter(seed=12, shape=(8, 6), rank=3):
    rng = _rng(seed)
    a = rng.standard_normal((shape[0], rank)).astype(np.float32)
    b = rng.standard_normal((rank, shape[1])).astype(np.float32)
    return {"A": nb.constant(a), "B": nb.constant(b)}


def test_lora_delta_and_tree_lora_delta():
    ad = _adapter()
    ref = ad["A"].numpy() @ ad["B"].numpy() * (6.0 / 3)
    _same(ft.lora_delta(ad, alpha=6.0).numpy(), ref, 1e-5)
    w = nb.zeros((8, 6))
    _same(ft.merge_lora_weight(w, ad, 6.0).numpy(), ft.lora_delta(ad, 6.0).numpy())
    tree = {"l0": ad, "l1": [_adapter(13, (6, 4), 2)], "scale": 2}
    out = ft.tree_lora_delta(tree, alpha=6.0)
    assert out["scale"] == 2 and out["l1"][0].shape == (6, 4)
    _same(out["l0"].numpy(), ref, 1e-5)
    single = ft.tree_lora_delta(ad, 6.0, is_leaf=lambda t: isinstance(t, dict) and "A" in t)
    assert isinstance(single, nb.Tensor)
    with pytest.raises(ValueError, match=r"lora_delta: adapter A \(8, 3\) and B \(2, 6\)"):
        ft.lora_delta({"A": nb.ones((8, 3)), "B": nb.ones((2, 6))})


def test_nf4_weight_reads_as_the_original_dict():
    w = nb.constant(_rng(14).standard_normal((8, 6)).astype(np.float32))
    qw = ft.quantize_nf4(w, block_size=8)
    for k in ("indices", "scales", "original_shape", "block_size"):
        assert k in qw
    assert "packed" not in qw and qw["original_shape"] == (8, 6) and qw["block_size"] == 8
    assert qw["original_numel"] == 48 and qw["padded_numel"] == 48
    codes = qw["indices"].numpy().astype(int)
    assert codes.shape == (48,) and codes.max() < 16
    deq = (ft.NF4_LEVELS[codes].reshape(-1, 8) * qw["scales"].numpy()[:, None]).reshape(8, 6)
    _same(deq, ft.dequantize_nf4(qw).numpy())
    with pytest.raises(KeyError, match="no entry 'codes'"):
        qw["codes"]


def test_qlora_linear_compute_dtype():
    w = nb.constant(_rng(15).standard_normal((8, 6)).astype(np.float32))
    qw, ad = ft.quantize_nf4(w, block_size=8), _adapter(16)
    x = nb.constant(_rng(17).standard_normal((2, 8)).astype(np.float32))
    out = ft.qlora_linear(x, qw, ad, alpha=2.0, compute_dtype=nb.DType.float32)
    _same(out.numpy(), ft.qlora_linear(x, qw, ad, 2.0).numpy())
    assert ft.qlora_linear(x, qw, ad, compute_dtype=nb.DType.bfloat16).dtype == nb.DType.bfloat16


def test_finetune_checkpoint_original_keywords(tmp_path):
    ad = _adapter(18)
    state = optim.adamw_init(ad)
    ad, state = optim.adamw_update(ad, {"A": nb.ones((8, 3)), "B": nb.ones((3, 6))}, state)
    path = tmp_path / "ckpt"
    ft.save_finetune_checkpoint(path, lora_params=ad, optimizer_state=state, metadata={"r": 3})
    template = {"A": nb.zeros((8, 3), dtype=nb.DType.bfloat16), "B": nb.zeros((3, 6))}
    lora, opt, meta = ft.load_finetune_checkpoint(
        path, lora_template=template, optimizer_template=optim.adamw_init(template)
    )
    assert lora["A"].dtype == nb.DType.bfloat16 and meta["user_metadata"] == {"r": 3}
    assert meta["step"] == 1 and meta["has_optimizer"] and "adapters/A" in meta["tensor_keys"]
    _same(lora["B"].numpy(), ad["B"].numpy())
    assert opt["step"].item() == 1
    assert opt["mu"][0].dtype == nb.DType.bfloat16  # the template's dtype
    _same(opt["mu"][1].numpy(), state["mu"][1].numpy())
    same, _, _ = ft.load_finetune_checkpoint(path)
    _same(same["A"].numpy(), ad["A"].numpy())
    with pytest.raises(ValueError, match=r"'adapters/B': shape \(3, 6\), template \(3, 5\)"):
        ft.load_finetune_checkpoint(path, lora_template={"A": ad["A"], "B": nb.zeros((3, 5))})
    with pytest.raises(TypeError, match="adapters= or lora_params="):
        ft.save_finetune_checkpoint(path, ad, lora_params=ad)
    with pytest.raises(FileNotFoundError):
        ft.load_finetune_checkpoint(tmp_path / "missing", lora_template=template)


def test_clear_caches():
    x = nb.ones((3,)) * 2.0
    x.realize()
    nb._clear_caches()
    assert (x + 1.0).tolist() == [3.0, 3.0, 3.0]


def test_finetune_checkpoint_meta_is_the_original_s(tmp_path):
    """The original's third result: ``{"step", "has_optimizer", "user_metadata",
    "tensor_keys"}``, the user's metadata with its JSON types (it came back as strings, at
    the top level: the original's tests read ``meta["user_metadata"]["epoch"] == 1``)."""
    ad = _adapter(19)
    path = tmp_path / "ckpt_no_opt"
    ft.save_finetune_checkpoint(path, lora_params=ad, metadata={"epoch": 1, "tag": "t"})
    _, opt, meta = ft.load_finetune_checkpoint(path, lora_template=ad)
    assert opt is None and meta["step"] is None and meta["has_optimizer"] is False
    assert meta["user_metadata"] == {"epoch": 1, "tag": "t"}
    assert meta["tensor_keys"] == ["adapters/A", "adapters/B"]
    with pytest.raises(TypeError, match="metadata must be JSON values"):
        ft.save_finetune_checkpoint(path, lora_params=ad, metadata={"w": nb.ones(2)})
