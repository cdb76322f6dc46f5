"""PyTorch weights into nabla modules whose layouts differ from PyTorch's, and back:
``nn.utils.from_torch_state_dict`` / ``to_torch_state_dict`` against recorded PyTorch
modules (tests/nn/data/make_torch_port.py: each module's state_dict, input and output in
eval mode). A square Linear or Conv2d is the case a plain ``load_state_dict`` cannot
catch: both layouts have the same shape."""

import numpy as np
import pytest
from _nnref import recorded

import nabla as nb

nn = nb.nn
make, REF = recorded("make_torch_port", "torch_port.npz")

NABLA = {  # the same architectures, PyTorch's sequence-first layout where PyTorch's default
    "linear": lambda: nn.Linear(5, 5),
    "conv2d": lambda: nn.Conv2d(3, 3, 3, padding=1),
    "encoder": lambda: nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=False),
    "encoder_pre_gelu": lambda: nn.TransformerEncoderLayer(
        8, 2, 16, 0.0, activation="gelu", batch_first=False, norm_first=True
    ),
    "decoder": lambda: nn.TransformerDecoderLayer(8, 2, 16, 0.0, batch_first=False),
    "stack": lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, 0.0), 2, norm=nn.LayerNorm(8)
    ),
    "transformer": lambda: nn.Transformer(8, 2, 2, 2, 16, 0.0),
}


def _torch_sd(name):
    head = f"{name}/sd/"
    return {k[len(head) :]: v for k, v in REF.items() if k.startswith(head)}


@pytest.mark.parametrize("name", list(make.CASES))
def test_pytorch_weights_load_and_give_pytorch_s_outputs(name):
    model = NABLA[name]().eval()
    torch_sd = _torch_sd(name)
    model.load_state_dict(nn.utils.from_torch_state_dict(model, torch_sd))
    args = [nb.constant(REF[f"{name}/in{i}"]) for i in range(2) if f"{name}/in{i}" in REF]
    if name == "conv2d":  # NCHW -> NHWC and back
        out = model(args[0].moveaxis(1, -1)).moveaxis(-1, 1)
    elif name == "transformer":  # a causal decoder, by PyTorch's float mask
        out = model(*args, tgt_mask=nn.Transformer.generate_square_subsequent_mask(4))
    else:
        out = model(*args)
    np.testing.assert_allclose(out.numpy(), REF[f"{name}/out"], rtol=1e-5, atol=2e-6)
    back = nn.utils.to_torch_state_dict(model)  # the inverse: PyTorch's names and layouts
    assert set(back) == set(torch_sd)
    for k, v in torch_sd.items():
        np.testing.assert_allclose(back[k], v, rtol=0, atol=0, err_msg=k)


def test_a_square_linear_loaded_raw_is_wrong_and_converted_is_right():
    """Why the conversion exists: a (5, 5) PyTorch weight loads as it is without an error,
    transposed; ``from_torch_state_dict`` lays it out as (in, out)."""
    sd = _torch_sd("linear")
    x = REF["linear/in0"]
    raw = nn.Linear(5, 5)
    raw.load_state_dict(sd)
    assert not np.allclose(raw(nb.constant(x)).numpy(), REF["linear/out"], atol=1e-3)
    m = nn.Linear(5, 5)
    m.load_state_dict(nn.utils.from_torch_state_dict(m, sd))
    np.testing.assert_allclose(m(nb.constant(x)).numpy(), REF["linear/out"], rtol=1e-5, atol=1e-6)


def test_tensors_true_gives_pytorch_tensors_that_load_bfloat16_too():
    torch = pytest.importorskip("torch")
    m = nn.Linear(4, 3).bfloat16()
    sd = nn.utils.to_torch_state_dict(m, tensors=True)
    mirror = torch.nn.Linear(4, 3).bfloat16()
    mirror.load_state_dict(sd)  # (torch.from_numpy cannot take ml_dtypes' bfloat16)
    got = mirror.weight.detach().float().numpy()
    np.testing.assert_array_equal(got, m.weight.numpy().astype(np.float32).T)


def test_transformer_masks_layouts_and_errors():
    """``nn.Transformer``: PyTorch's causal mask helper, ``batch_first`` either way (the
    same model on transposed sequences), and shape errors naming both inputs."""
    mask = nn.Transformer.generate_square_subsequent_mask(3).numpy()
    assert mask.tolist() == [[0.0, -np.inf, -np.inf], [0.0, 0.0, -np.inf], [0.0, 0.0, 0.0]]
    seq = nn.Transformer(8, 2, 1, 1, 16, 0.0, key=nb.random.key(1))
    first = nn.Transformer(8, 2, 1, 1, 16, 0.0, batch_first=True, key=nb.random.key(1))
    rng = np.random.default_rng(0)
    src, tgt = rng.standard_normal((5, 2, 8)), rng.standard_normal((4, 2, 8))
    a = seq(nb.constant(src, dtype=nb.float32), nb.constant(tgt, dtype=nb.float32))
    b = first(
        nb.constant(src.swapaxes(0, 1), dtype=nb.float32),
        nb.constant(tgt.swapaxes(0, 1), dtype=nb.float32),
    )
    np.testing.assert_allclose(a.numpy(), b.numpy().swapaxes(0, 1), rtol=1e-5, atol=1e-6)
    with pytest.raises(
        ValueError, match=r"src \(5, 2, 8\) and tgt \(4, 3, 8\) must have one batch"
    ):
        seq(nb.zeros((5, 2, 8)), nb.zeros((4, 3, 8)))
    with pytest.raises(ValueError, match="must be d_model=8"):
        seq(nb.zeros((5, 2, 6)), nb.zeros((4, 2, 6)))


def test_pad_sequence_is_pytorch_s():
    """``nn.utils.rnn.pad_sequence`` (the tutorials' batching of variable-length
    sequences): padded to the longest, on either side, batch first or not; gradients
    reach each sequence's own positions."""
    seqs = [nb.constant(np.arange(n, dtype=np.float32) + 1) for n in (3, 5, 1)]
    out = nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=-1.0)
    assert out.numpy().tolist() == [
        [1, 2, 3, -1, -1],
        [1, 2, 3, 4, 5],
        [1, -1, -1, -1, -1],
    ]
    left = nn.utils.rnn.pad_sequence(seqs, padding_side="left")
    assert left.shape == (5, 3) and left.numpy()[:, 0].tolist() == [0, 0, 1, 2, 3]
    g = nb.grad(lambda s: (nn.utils.pad_sequence([s, seqs[1]]) * 2.0).sum())(seqs[0])
    assert g.numpy().tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(
        ValueError, match=r"dims after the first must agree, got \[\(3,\), \(2, 2\)\]"
    ):
        nn.utils.rnn.pad_sequence([seqs[0], nb.zeros((2, 2))])


def test_transformer_layers_without_bias_as_pytorch():
    """bias=False (PyTorch's ninth argument): no bias in the linear layers, the attention or
    the LayerNorms; the values are those of the same layer with every bias zero."""
    rng = np.random.default_rng(3)
    x, mem = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 3, 8))
    x, mem = nb.constant(x, dtype=nb.float32), nb.constant(mem, dtype=nb.float32)
    for layer_type, args in (
        (nn.TransformerEncoderLayer, (x,)),
        (nn.TransformerDecoderLayer, (x, mem)),
    ):
        plain = layer_type(8, 2, 16, 0.0, "relu", 1e-5, True, True, False, key=nb.random.key(2))
        assert not [n for n in plain.state_dict() if n.endswith("bias")]
        full = layer_type(8, 2, 16, 0.0, norm_first=True, key=nb.random.key(2))
        zeroed = {n: (v * 0 if n.endswith("bias") else v) for n, v in full.state_dict().items()}
        full.load_state_dict(zeroed)
        np.testing.assert_allclose(plain(*args).numpy(), full(*args).numpy(), rtol=1e-5, atol=1e-6)
    model = nn.Transformer(8, 2, 1, 1, 16, 0.0, bias=False, key=nb.random.key(1))
    assert not [n for n in model.state_dict() if n.endswith("bias")]
    assert model(nb.ones((4, 2, 8)), nb.ones((3, 2, 8))).shape == (3, 2, 8)


def test_attention_in_transformer_layers_starts_as_pytorch_s():
    """PyTorch's MultiheadAttention._reset_parameters: the query, key and value weights
    Xavier-uniform as one packed (3E, E) matrix, their biases and the output bias 0. The
    layers' separate projections had a Linear's init (nonzero biases) and nn.Transformer
    Xavier on each (E, E) matrix (twice the variance)."""
    e = 64
    packed = np.sqrt(6.0 / (4 * e))
    layer = nn.TransformerDecoderLayer(e, 4, 128, key=nb.random.key(0))
    model = nn.Transformer(e, 4, 1, 1, 128, key=nb.random.key(1))
    attns = [layer.self_attn, layer.cross_attn, model.encoder.layers[0].self_attn]
    for attn in attns:
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            w = np.abs(proj.weight.numpy())
            assert 0.95 * packed < w.max() <= packed
            assert not proj.bias.numpy().any()
        assert not attn.out_proj.bias.numpy().any()
    out = np.abs(layer.self_attn.out_proj.weight.numpy()).max()  # a Linear's: 1 / sqrt(E)
    assert 0.95 / np.sqrt(e) < out <= 1 / np.sqrt(e)


MHA, MHA_REF = recorded("make_mha_functional", "mha_functional.npz")


@pytest.mark.parametrize("name", list(MHA.CASES))
def test_multi_head_attention_forward_as_pytorch_s(name):
    """``F.multi_head_attention_forward`` against PyTorch's (recorded by
    tests/nn/data/make_mha_functional.py): output, weights and gradients, with the extra
    key positions, both kinds of mask, separate projections and an unbatched call."""
    case, a = MHA.CASES[name], MHA.arrays()
    sep = case.get("separate", False)
    w_name = "q_proj_weight" if sep else "in_proj_weight"
    probe = a["probe"][:, 0] if case.get("unbatched") else a["probe"]

    def loss(q, k, w):
        y, _ = MHA.call(nn.functional, nb.constant, a, case, q, k, w)
        return (y * nb.constant(probe)).sum()

    q, k, w = (nb.constant(a[n]) for n in ("query", "key_k" if sep else "key", w_name))
    y, weights = MHA.call(nn.functional, nb.constant, a, case, q, k, w)
    np.testing.assert_allclose(y.numpy(), MHA_REF[f"{name}/out"], rtol=1e-5, atol=1e-5)
    if case.get("need_weights", True):
        want = MHA_REF[f"{name}/weights"]
        np.testing.assert_allclose(weights.numpy(), want, rtol=1e-5, atol=1e-6)
    else:
        assert weights is None
    grads = nb.compile(nb.grad(loss, argnums=(0, 1, 2)))(q, k, w)
    for g, part in zip(grads, ("query", "key", "w"), strict=True):
        want = MHA_REF[f"{name}/grad_{part}"]
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-4, atol=1e-5)


def test_multi_head_attention_forward_refuses_what_it_cannot_do():
    F = nn.functional
    x, w = nb.ones((4, 2, 8)), nb.ones((24, 8))
    with pytest.raises(ValueError, match="does not have embed_dim_to_check=6 features"):
        F.multi_head_attention_forward(x, x, x, 6, 2, w, None, None, None, False, 0.0, w, None)
    with pytest.raises(ValueError, match=r"missing \['k_proj_weight', 'v_proj_weight'\]"):
        F.multi_head_attention_forward(
            x, x, x, 8, 2, None, None, None, None, False, 0.0, nb.ones((8, 8)), None,
            use_separate_proj_weight=True, q_proj_weight=nb.ones((8, 8)),
        )  # fmt: skip
    with pytest.raises(ValueError, match="is_causal is a hint"):
        F.multi_head_attention_forward(
            x, x, x, 8, 2, w, None, None, None, False, 0.0, nb.ones((8, 8)), None, is_causal=True
        )
    with pytest.raises(NotImplementedError, match="static_k and static_v are not supported"):
        F.multi_head_attention_forward(
            x, x, x, 8, 2, w, None, None, None, False, 0.0, nb.ones((8, 8)), None, static_k=x
        )
