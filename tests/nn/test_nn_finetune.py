"""LoRA and QLoRA: adapter math, merge/unmerge, NF4 quantization, adapter-only training."""

import collections

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
    # the published float32 table, which the paper's construction gives within a few ulps
    np.testing.assert_allclose(lv, ft._nf4_levels(), rtol=0, atol=2e-7)
    assert lv[14] == np.float32(0.7229568362236023)  # (the derivation's was 2 ulps off)
    on_levels = np.tile(lv, 4).reshape(8, 8)  # a weight on the levels round-trips exactly
    back = ft.dequantize_nf4(ft.quantize_nf4(on_levels, block_size=16)).numpy()
    np.testing.assert_array_equal(back, on_levels)


def test_finetune_checks_what_it_is_given():
    """An inf or NaN had turned its NF4 block to NaN (and flipped -inf); NumPy adapters
    failed in merge with an AttributeError; an integer weight took a truncated update; a
    bfloat16 input came out float32 from qlora_linear."""
    with pytest.raises(ValueError, match=r"non-finite float32 value \(first at index \(0,\)\)"):
        ft.quantize_nf4(np.array([-np.inf, 1.0, 0.5, 0.2], np.float32), block_size=4)
    with pytest.raises(ValueError, match="non-finite"):
        ft.quantize_nf4(np.array([1e300, 1.0]))  # beyond float32
    with pytest.raises(TypeError, match="block_size must be an int"):
        ft.quantize_nf4(np.ones((4, 4), np.float32), 2.5)
    w = np.ones((4, 3), np.float32)
    q = ft.quantize_nf4(w)
    with pytest.raises(TypeError, match="already an NF4Weight"):
        ft.quantize_nf4(q)
    ad = {"A": np.ones((4, 2), np.float32), "B": np.ones((2, 3), np.float32)}
    np.testing.assert_allclose(ft.merge_lora_weight(w, ad, 2.0).numpy(), w + 2.0)
    np.testing.assert_allclose(ft.unmerge_lora_weight(w, ad, 2.0).numpy(), w - 2.0)
    with pytest.raises(TypeError, match="merge_lora_weight: the weight must be float"):
        ft.merge_lora_weight(np.zeros((4, 3), np.int32), ad)
    with pytest.raises(TypeError, match="merge into dequantize_nf4"):
        ft.merge_lora_weight(q, ad)
    with pytest.raises(TypeError, match="rank must be an int"):
        ft.init_lora_adapter(w, 2.0)
    with pytest.raises(TypeError, match="init_lora_adapter: the weight must be float"):
        ft.init_lora_adapter(np.zeros((4, 3), np.int32), 1)
    x = nb.ones((2, 4), dtype=nb.bfloat16)
    adapter = ft.init_lora_adapter(q, 2)  # float32
    assert ft.qlora_linear(x, q, adapter).dtype == nb.bfloat16
    assert ft.qlora_linear(x, q, ad, bias=np.zeros(3, np.float32)).dtype == nb.bfloat16


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
    assert opt_state["step"].item() == 60.0 and meta["user_metadata"] == {"rank": 4}


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


def test_checkpoints_keep_none_leaves_and_want_the_optimizer_state_a_template_asks_for(tmp_path):
    """``adamw_init`` keeps None for a non-float leaf: saving its state raised a TypeError;
    an optimizer template on a file without optimizer state quietly gave None."""
    from collections import OrderedDict

    ad = {"l": {"A": nb.ones((2, 1)), "B": nb.ones((1, 2))}, "n": nb.constant(np.int32(3))}
    state = nn.optim.adamw_init(ad)
    path = tmp_path / "ft.safetensors"
    ft.save_finetune_checkpoint(path, ad, state, {"rank": 1})
    _, opt, meta = ft.load_finetune_checkpoint(path)
    assert opt["mu"][2] is None and meta["user_metadata"] == {"rank": 1}
    _, opt, _ = ft.load_finetune_checkpoint(path, lora_template=ad, optimizer_template=state)
    assert opt["nu"][2] is None and opt["nu"][0].shape == (2, 1)
    bare = tmp_path / "bare.safetensors"
    ft.save_finetune_checkpoint(bare, ad)
    with pytest.raises(ValueError, match="holds no optimizer state"):
        ft.load_finetune_checkpoint(bare, optimizer_template=state)
    tree = OrderedDict(l=ad["l"])
    assert type(ft.tree_lora_delta(tree)) is OrderedDict
    with pytest.raises(ValueError, match="is_leaf marked a dict that is not an adapter"):
        ft.tree_lora_delta(
            {"x": {"lora_A": 1}}, is_leaf=lambda n: isinstance(n, dict) and "lora_A" in n
        )


def test_qlora_dtypes_bfloat16_weights_and_namedtuple_adapters(tmp_path):
    """What a probe found: an integer input or compute dtype truncated the dequantized
    weight and the adapter to integers (0.7 became 0: a silent wrong product); bfloat16
    weights, QLoRA's usual base, were refused as not float; a namedtuple adapter saved
    fine and crashed at load with a template; an empty save wrote a file load refused."""
    import ml_dtypes  # noqa: PLC0415 - NumPy's bfloat16, a dependency of nabla

    ft = nb.nn.finetune
    q = ft.quantize_nf4(np.full((4, 2), 0.7, np.float32), 8)
    adapter = {"A": nb.full((4, 1), 0.5), "B": nb.full((1, 2), 0.5)}
    got = ft.qlora_linear(nb.ones((1, 4), dtype=nb.int32), q, adapter)
    np.testing.assert_allclose(got.numpy(), [[3.8, 3.8]], rtol=1e-2)
    with pytest.raises(TypeError, match="qlora_linear: compute_dtype must be a float dtype"):
        ft.qlora_linear(nb.ones((1, 4)), q, adapter, compute_dtype=nb.int32)
    with pytest.raises(TypeError, match="dequantize_nf4: dtype must be a float dtype"):
        ft.dequantize_nf4(q, nb.int32)
    with pytest.raises(ValueError, match="init_lora_adapter: init_std must be a number >= 0"):
        ft.init_lora_adapter(nb.ones((4, 4)), 2, init_std=-1.0)
    w = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    for weight in (nb.constant(w).cast(nb.bfloat16), w.astype(ml_dtypes.bfloat16)):
        back = ft.dequantize_nf4(ft.quantize_nf4(weight, 8)).numpy()
        np.testing.assert_allclose(back, w, atol=0.15)  # (half the widest NF4 step)
    ab = collections.namedtuple("AB", "A B")
    adapters = {"l": ab(nb.ones((8, 2)), nb.zeros((2, 4)))}
    path = str(tmp_path / "nt.safetensors")
    ft.save_finetune_checkpoint(path, adapters)
    loaded, _, _ = ft.load_finetune_checkpoint(path, lora_template=adapters)
    assert type(loaded["l"]) is ab and loaded["l"].A.shape == (8, 2)
    with pytest.raises(ValueError, match="save_finetune_checkpoint: the adapters hold no tensors"):
        ft.save_finetune_checkpoint(str(tmp_path / "empty.safetensors"), {})
