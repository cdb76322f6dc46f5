"""LoRA and QLoRA: adapter math, merge/unmerge, NF4 quantization, adapter-only training."""

import numpy as np
import pytest

import nabla as nb

nn = nb.nn
ft = nn.finetune
rng = np.random.default_rng(0)


def test_nf4_levels_are_the_normal_float_table():
    lv = ft.NF4_LEVELS
    assert lv.shape == (16,) and lv[0] == -1.0 and lv[-1] == 1.0 and lv[7] == 0.0
    assert np.all(np.diff(lv) > 0)
    np.testing.assert_allclose(lv[[1, 8, 14]], [-0.6962, 0.0796, 0.7230], atol=1e-4)


def test_lora_linear_merge_unmerge():
    w = nb.constant(rng.standard_normal((6, 4)).astype(np.float32))
    ad = ft.init_lora_adapter(w, 2, key=nb.random.key(0))
    assert ad["A"].shape == (6, 2) and ad["B"].shape == (2, 4)
    x = nb.constant(rng.standard_normal((3, 6)).astype(np.float32))
    np.testing.assert_allclose(ft.lora_linear(x, w, ad).numpy(), (x @ w).numpy(), rtol=1e-6)
    ad = {"A": ad["A"], "B": nb.constant(rng.standard_normal((2, 4)).astype(np.float32))}
    ref = x.numpy() @ w.numpy() + 0.5 * 4 * (x.numpy() @ ad["A"].numpy()) @ ad["B"].numpy() / 2
    np.testing.assert_allclose(ft.lora_linear(x, w, ad, alpha=2.0).numpy(), ref, rtol=1e-5)
    merged = ft.merge_lora_weight(w, ad, alpha=2.0)
    np.testing.assert_allclose((x @ merged).numpy(), ref, rtol=1e-5)
    np.testing.assert_allclose(
        ft.unmerge_lora_weight(merged, ad, 2.0).numpy(), w.numpy(), atol=1e-6
    )
    with pytest.raises(ValueError, match="does not match the weight"):
        ft.lora_linear(x, w, {"A": nb.ones((5, 2)), "B": nb.ones((2, 4))})
    with pytest.raises(ValueError, match="rank 9"):
        ft.init_lora_adapter(w, 9)


@pytest.mark.parametrize("shape", [(64, 32), (7, 5)])
def test_nf4_quantization_packs_and_round_trips(shape):
    w = rng.standard_normal(shape).astype(np.float32)
    q = ft.quantize_nf4(nb.constant(w), block_size=16)
    size = w.size
    assert q.packed.dtype is nb.uint8 and q.packed.shape == (-(-size // 2),)
    assert q.scales.shape == (-(-size // 16),)
    assert q.nbytes < w.nbytes / 3
    deq = ft.dequantize_nf4(q).numpy()
    assert deq.shape == shape
    # a NumPy decode of the same codes agrees exactly
    packed = q.packed.numpy()
    codes = np.stack([packed >> 4, packed & 15], -1).reshape(-1)[:size]
    scales = np.repeat(q.scales.numpy(), 16)[:size]
    np.testing.assert_array_equal(deq.reshape(-1), ft.NF4_LEVELS[codes] * scales)
    # every value went to its nearest level
    blocks_err = np.abs(deq - w).reshape(-1)
    gaps = np.diff(ft.NF4_LEVELS).max() / 2 * scales
    assert np.all(blocks_err <= gaps + 1e-6)
    assert np.abs(deq - w).mean() < 0.1 * np.abs(w).mean() + 0.05
    # exact for values on the levels
    exact = ft.quantize_nf4(ft.NF4_LEVELS.reshape(4, 4) * 3.0, block_size=16)
    np.testing.assert_allclose(
        ft.dequantize_nf4(exact).numpy().reshape(-1), ft.NF4_LEVELS * 3.0, rtol=1e-6
    )


def test_qlora_adapter_trains_on_a_frozen_base(tmp_path):
    w_true = rng.standard_normal((8, 4)).astype(np.float32)
    base = w_true + 0.5 * rng.standard_normal((8, 4)).astype(np.float32)
    q = ft.quantize_nf4(base, block_size=32)
    x = nb.constant(rng.standard_normal((64, 8)).astype(np.float32))
    y = x @ nb.constant(w_true)
    adapter = ft.init_lora_adapter(q, 4, key=nb.random.key(0))
    state = nn.optim.adamw_init(adapter)

    @nb.compile
    def step(adapter, state, q, x, y):
        loss_fn = lambda a: nn.functional.mse_loss(ft.qlora_linear(x, q, a, alpha=4.0), y)  # noqa
        loss, g = nb.value_and_grad(loss_fn)(adapter)
        adapter, state = nn.optim.adamw_update(adapter, g, state, lr=0.05, weight_decay=0.0)
        return adapter, state, loss

    losses = []
    packed = q.packed.numpy().copy()
    for _ in range(60):
        adapter, state, loss = step(adapter, state, q, x, y)
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 5, losses[::10]
    assert step.stats.misses == 1
    np.testing.assert_array_equal(q.packed.numpy(), packed)  # the base never changes
    path = tmp_path / "adapter.safetensors"
    ft.save_finetune_checkpoint(path, {"layer": adapter}, state, metadata={"rank": 4})
    back, opt_state, meta = ft.load_finetune_checkpoint(path)
    np.testing.assert_array_equal(back["layer"]["B"].numpy(), adapter["B"].numpy())
    assert isinstance(opt_state["mu"], list) and len(opt_state["mu"]) == 2
    assert opt_state["step"].item() == 60.0 and meta == {"rank": "4"}


def test_dtypes_and_names_stay_as_documented(tmp_path):
    """A bfloat16 weight merged with an NF4 base's float32 adapter stays bfloat16, as does
    a QLoRA output with a float32 bias under ``compute_dtype`` (the float32 parts promoted
    them); an adapter key holding '/' or two values of one name in a finetune checkpoint
    are errors (they were split into levels, or one was dropped, silently)."""
    w = nb.ones((4, 3), dtype=nb.bfloat16)
    ad = {"A": nb.full((4, 2), 0.5), "B": nb.full((2, 3), 0.25)}
    assert ft.merge_lora_weight(w, ad).dtype == nb.bfloat16
    assert ft.unmerge_lora_weight(w, ad).dtype == nb.bfloat16
    np.testing.assert_allclose(
        ft.merge_lora_weight(w, ad).cast(nb.float32).numpy(), 1 + 2 * 0.5 * 0.25 / 2, rtol=1e-2
    )
    q = ft.quantize_nf4(nb.ones((8, 4)), block_size=8)
    qad = {"A": nb.zeros((8, 2)), "B": nb.zeros((2, 4))}
    y = ft.qlora_linear(nb.ones((2, 8)), q, qad, bias=nb.ones((4,)), compute_dtype=nb.bfloat16)
    assert y.dtype == nb.bfloat16
    path = tmp_path / "a.safetensors"
    with pytest.raises(ValueError, match="'model/q_proj' under 'adapters' holds a '/'"):
        ft.save_finetune_checkpoint(path, {"model/q_proj": ad})
    with pytest.raises(ValueError, match="both named 'adapters/0/A'"):
        ft.save_finetune_checkpoint(path, {"0": ad, 0: ad})
