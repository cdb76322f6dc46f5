"""Conv1d, ConvTranspose2d, Upsample/interpolate, LSTM and GRU against PyTorch's results
recorded by ``data/make_conv_rnn.py`` (forward values and gradients; PyTorch's layouts are
channels first, ours channels last)."""

import os

import numpy as np
import pytest

import nabla as nb

nn, F = nb.nn, nb.nn.functional
HERE = os.path.dirname(os.path.abspath(__file__))
REF = np.load(os.path.join(HERE, "data", "conv_rnn.npz"))


def _configs():
    """The recorded configurations, read from the script's source (it imports torch)."""
    src = open(os.path.join(HERE, "data", "make_conv_rnn.py")).read()
    env = {}
    start, end = src.index("CONV1D = ["), src.index("\n\n\ndef main")
    exec(src[start:end], env)
    return env


CFG = _configs()
TOL = dict(rtol=1e-4, atol=1e-5)


def c(a):
    return nb.constant(np.ascontiguousarray(a))


def last(a):
    """Channels first (PyTorch) -> channels last."""
    return np.moveaxis(a, 1, -1)


def first(a):
    return np.moveaxis(np.asarray(a), -1, 1)


def close(actual, expected, **kw):
    np.testing.assert_allclose(np.asarray(actual), expected, **{**TOL, **kw})


# ------------------------------------------------------------------------------- conv1d
@pytest.mark.parametrize("i", range(3))
def test_conv1d_forward_and_grads_match_torch(i):
    cin, cout, k, s, p, d, g, _ = CFG["CONV1D"][i]
    r = {n: REF[f"c1_{i}_{n}"] for n in ("x", "w", "b", "ct", "y", "dx", "dw", "db")}
    x, w, b, ct = c(last(r["x"])), c(r["w"]), c(r["b"]), c(last(r["ct"]))
    close(first(F.conv1d(x, w, b, s, p, d, g).numpy()), r["y"])

    def loss(x, w, b):
        return (F.conv1d(x, w, b, s, p, d, g) * ct).sum()

    dx, dw, db = nb.grad(loss, argnums=(0, 1, 2))(x, w, b)
    close(first(dx.numpy()), r["dx"])
    close(dw.numpy(), r["dw"])
    close(db.numpy(), r["db"])


def test_conv1d_module_loads_torch_weights_and_compiles():
    cin, cout, k, s, p, d, g, _ = CFG["CONV1D"][2]
    m = nn.Conv1d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g)
    assert list(m.state_dict()) == ["weight", "bias"] and m.weight.shape == (cout, cin // g, k)
    m.load_state_dict({"weight": c(REF["c1_2_w"]), "bias": c(REF["c1_2_b"])})
    x = c(last(REF["c1_2_x"]))
    close(first(m(x).numpy()), REF["c1_2_y"])
    close(first(nb.compile(lambda m, x: m(x))(m, x).numpy()), REF["c1_2_y"])
    # unbatched (L, C) and vmap over the batch give the same rows
    close(m(x[1]).numpy(), last(REF["c1_2_y"])[1])
    close(first(nb.vmap(m)(x).numpy()), REF["c1_2_y"])


def test_conv1d_errors_name_the_layer_and_shapes():
    m = nn.Conv1d(4, 6, 3)
    with pytest.raises(ValueError, match=r"Conv1d\(4, 6.*\(2, 10, 5\).*\(N, L, 4\)"):
        m(nb.ones((2, 10, 5)))
    with pytest.raises(ValueError, match="padding='same' needs stride 1"):
        nn.Conv1d(4, 6, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="divisible by groups=4"):
        nn.Conv1d(4, 6, 3, groups=4)
    # refused when the layer is made, as PyTorch's (not at its first call)
    for kw, what in (
        ({"padding": -1}, "padding must be an int >= 0, got -1"),
        ({"padding": "bogus"}, "padding must be an int, 'same' or 'valid', got 'bogus'"),
        ({"stride": 0}, "stride must be an int >= 1, got 0"),
        ({"dilation": 0}, "dilation must be an int >= 1, got 0"),
    ):
        with pytest.raises(ValueError, match=f"Conv1d: {what}"):
            nn.Conv1d(4, 6, 3, **kw)
    with pytest.raises(ValueError, match=r"conv1d: input of shape \(2, 10, 4\).*\(6, 2, 3\)"):
        F.conv1d(nb.ones((2, 10, 4)), nb.ones((6, 2, 3)))
    with pytest.raises(ValueError, match="conv1d: padding must be"):
        F.conv1d(nb.ones((2, 10, 4)), nb.ones((6, 4, 3)), padding="full")
    with pytest.raises(ValueError, match="shorter than the filter"):
        F.conv1d(nb.ones((2, 2, 4)), nb.ones((6, 4, 3)))


# --------------------------------------------------------------------- conv_transpose2d
@pytest.mark.parametrize("i", range(4))
def test_conv_transpose2d_forward_and_grads_match_torch(i):
    cin, cout, k, s, p, op, g, d = CFG["CONVT"][i]
    r = {n: REF[f"ct_{i}_{n}"] for n in ("x", "w", "b", "ct", "y", "dx", "dw", "db")}
    x, w, b, ct = c(last(r["x"])), c(r["w"]), c(r["b"]), c(last(r["ct"]))
    close(first(F.conv_transpose2d(x, w, b, s, p, op, g, d).numpy()), r["y"])

    def loss(x, w, b):
        return (F.conv_transpose2d(x, w, b, s, p, op, g, d) * ct).sum()

    dx, dw, db = nb.grad(loss, argnums=(0, 1, 2))(x, w, b)
    close(first(dx.numpy()), r["dx"])
    close(dw.numpy(), r["dw"])
    close(db.numpy(), r["db"])


def test_conv_transpose2d_module_loads_torch_weights():
    cin, cout, k, s, p, op, g, d = CFG["CONVT"][1]
    m = nn.ConvTranspose2d(cin, cout, k, s, p, op, g, dilation=d)
    assert m.weight.shape == (cin, cout // g, k, k)
    m.load_state_dict({"weight": c(REF["ct_1_w"]), "bias": c(REF["ct_1_b"])})
    x = c(last(REF["ct_1_x"]))
    close(first(m(x).numpy()), REF["ct_1_y"])
    # output_size picks the output padding (here the recorded one)
    m0 = nn.ConvTranspose2d(cin, cout, k, s, p, 0, g, dilation=d)
    m0.load_state_dict(m.state_dict())
    close(first(m0(x, output_size=REF["ct_1_y"].shape[2:]).numpy()), REF["ct_1_y"])
    close(first(nb.compile(lambda m, x: m(x))(m, x).numpy()), REF["ct_1_y"])
    close(first(nb.vmap(m)(x).numpy()), REF["ct_1_y"])
    dw = nb.grad(lambda m: (m(x) * c(last(REF["ct_1_ct"]))).sum())(m).weight
    close(dw.numpy(), REF["ct_1_dw"])


def test_conv_transpose2d_errors():
    m = nn.ConvTranspose2d(4, 6, 3, stride=2)
    with pytest.raises(ValueError, match=r"ConvTranspose2d\(4, 6.*\(2, 5, 5, 3\)"):
        m(nb.ones((2, 5, 5, 3)))
    with pytest.raises(ValueError, match="output_size .* cannot be reached"):
        m(nb.ones((2, 5, 5, 4)), output_size=(20, 20))
    # a whole channels-last shape gives the spatial sizes; PyTorch's (N, C, H, W) is
    # refused (its (C, H) read as (H, W) was a silent wrong shape)
    x = nb.ones((2, 5, 5, 4))
    assert m(x, output_size=(2, 12, 12, 6)).shape == (2, 12, 12, 6)
    assert m(x[0], output_size=(12, 11, 6)).shape == (12, 11, 6)
    with pytest.raises(ValueError, match=r"output_size \(2, 6, 12, 12\) is neither 2 spatial"):
        m(x, output_size=(2, 6, 12, 12))
    # PyTorch's positional order: padding_mode right after bias (dilation for transposed)
    assert nn.Conv2d(3, 4, 3, 1, 1, 1, 1, True, "reflect").padding_mode == "reflect"
    assert nn.Conv1d(3, 4, 3, 1, 1, 1, 1, False, "circular").padding_mode == "circular"
    nn.ConvTranspose2d(4, 6, 3, 2, 0, 0, 1, True, 1, "zeros")
    with pytest.raises(ValueError, match="ConvTranspose2d: only padding_mode='zeros'"):
        nn.ConvTranspose2d(4, 6, 3, padding_mode="reflect")
    m1 = nn.ConvTranspose1d(4, 3, 3, stride=3)
    assert m1(nb.ones((2, 5, 4)), output_size=16).shape == (2, 16, 3)
    assert m1(nb.ones((2, 5, 4)), output_size=(2, 17, 3)).shape == (2, 17, 3)
    with pytest.raises(ValueError, match="output_padding 2 must be smaller"):
        F.conv_transpose2d(nb.ones((1, 5, 5, 4)), nb.ones((4, 6, 3, 3)), stride=2, output_padding=2)
    with pytest.raises(ValueError, match=r"conv_transpose2d: input of shape .* weight of shape"):
        F.conv_transpose2d(nb.ones((1, 5, 5, 4)), nb.ones((6, 4, 3, 3)))


# ----------------------------------------------------------------------------- interpolate
@pytest.mark.parametrize(
    "prefix, i",
    [("up", i) for i in range(len(CFG["INTERP"]))]
    + [("up2", i) for i in range(len(CFG["INTERP_MORE"]))],  # bicubic and area
)
def test_interpolate_forward_and_grad_match_torch(prefix, i):
    mode, ac, size, sf = CFG["INTERP" if prefix == "up" else "INTERP_MORE"][i]
    x, ct = c(last(REF[f"{prefix}_{i}_x"])), c(last(REF[f"{prefix}_{i}_ct"]))

    def up(x):
        return F.interpolate(x, size=size, scale_factor=sf, mode=mode, align_corners=ac)

    close(first(up(x).numpy()), REF[f"{prefix}_{i}_y"])
    dx = nb.grad(lambda x: (up(x) * ct).sum())(x)
    scales = (sf, sf) if isinstance(sf, int | float) else sf
    if (
        mode == "bicubic"
        and size is None
        and all(int(n * s) == n for n, s in zip(REF[f"{prefix}_{i}_x"].shape[2:], scales))
    ):
        # every axis keeps its size: PyTorch's forward resamples it, its backward copies
        # the cotangent (not its forward's derivative). Ours is the forward's adjoint:
        # <up(v), ct> = <v, dx> for the recorded input and for ones (kept as ones)
        y_ref, x_np, ct_np = REF[f"{prefix}_{i}_y"], REF[f"{prefix}_{i}_x"], first(ct.numpy())
        got = first(dx.numpy())
        np.testing.assert_allclose((x_np * got).sum(), (y_ref * ct_np).sum(), rtol=1e-4)
        np.testing.assert_allclose(got.sum(), ct_np.sum(), rtol=1e-4)
        assert np.abs(got - ct_np).max() > 0.1  # (not PyTorch's copy)
    else:
        close(first(dx.numpy()), REF[f"{prefix}_{i}_dx"])
    got = nn.Upsample(size=size, scale_factor=sf, mode=mode, align_corners=ac)(x)
    close(first(got.numpy()), REF[f"{prefix}_{i}_y"])


def test_nearest_reads_what_pytorch_reads_on_a_kept_or_doubled_axis():
    """PyTorch 2.14's 2-D nearest kernel copies an axis the scale keeps (5 * 1.1 -> 5) and
    reads ``i // 2`` on one it doubles (5 * 2.1 -> 10); its 1-D and 3-D kernels resample
    both with the scale. The expected indices are PyTorch's outputs on ``arange(5)``."""
    line = np.arange(5, dtype=np.float32)
    torch_2d = {1.1: [0, 1, 2, 3, 4], 2.1: [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]}
    torch_1d_3d = {1.1: [0, 0, 1, 2, 3], 2.1: [0, 0, 0, 1, 1, 2, 2, 3, 3, 4]}
    for s in (1.1, 2.1):
        x2 = c(np.broadcast_to(line[None, :, None, None], (1, 5, 3, 1)))
        y2 = F.interpolate(x2, scale_factor=(s, 1.0), mode="nearest").numpy()
        assert y2[0, :, 0, 0].tolist() == torch_2d[s] and y2.shape[2] == 3
        y1 = F.interpolate(c(line[None, :, None]), scale_factor=s, mode="nearest").numpy()
        assert y1[0, :, 0].tolist() == torch_1d_3d[s]
        x3 = c(line[None, :, None, None, None])
        y3 = F.interpolate(x3, scale_factor=(s, 1.0, 1.0), mode="nearest").numpy()
        assert y3[0, :, 0, 0, 0].tolist() == torch_1d_3d[s]
    # nearest-exact keeps its own rule in 2-D too: floor((i + 0.5) / 1.1)
    y = F.interpolate(
        c(np.arange(35, dtype=np.float32).reshape(1, 5, 7, 1)),
        scale_factor=1.1,
        mode="nearest-exact",
    ).numpy()
    assert y[0, :, 0, 0].tolist() == [0.0, 7.0, 14.0, 21.0, 28.0]


def test_prelu_derivative_at_zero_is_the_slope_as_pytorch():
    m = nn.PReLU(init=0.25)
    x = c(np.array([-1.0, 0.0, 2.0], np.float32))
    dx = nb.grad(lambda x: m(x).sum())(x)
    assert dx.tolist() == [0.25, 0.25, 1.0]  # PyTorch's: x > 0 ? 1 : w
    dw = nb.grad(lambda m: m(x).sum())(m).weight
    assert dw.tolist() == [-1.0]
    assert m(x).tolist() == [-0.25, 0.0, 2.0]


def test_upsample_module_under_vmap_and_compile():
    mode, ac, size, sf = CFG["INTERP"][8]
    m = nn.Upsample(size=size, scale_factor=sf, mode=mode, align_corners=ac)
    x = c(last(REF["up_8_x"]))
    close(first(nb.vmap(lambda im: m(im[None])[0])(x).numpy()), REF["up_8_y"])
    close(first(nb.compile(m)(x).numpy()), REF["up_8_y"])
    # 1-D linear and 3-D nearest on channels-last inputs
    seq = nb.constant(np.arange(8, dtype=np.float32).reshape(1, 4, 2))
    close(
        F.interpolate(seq, size=7, mode="linear", align_corners=True).numpy()[0, :, 0],
        np.linspace(0, 6, 7),
    )
    vol = nb.ones((1, 2, 3, 4, 5))
    assert F.interpolate(vol, scale_factor=2).shape == (1, 4, 6, 8, 5)


def test_linear_modes_copy_an_axis_the_scale_keeps_the_size_of():
    """6 * 1.1 floors to 6: PyTorch's linear kernels copy such an axis unchanged, whatever
    the scale (we resampled it with 1 / 1.1); nearest resamples it, as PyTorch's does."""
    seq = nb.constant(np.arange(6, dtype=np.float32).reshape(1, 6, 1))
    lin = F.interpolate(seq, scale_factor=1.1, mode="linear")
    np.testing.assert_array_equal(lin.numpy()[0, :, 0], np.arange(6))
    near = F.interpolate(seq, scale_factor=1.1, mode="nearest")
    np.testing.assert_array_equal(near.numpy()[0, :, 0], [0, 0, 1, 2, 3, 4])  # PyTorch's
    img = nb.constant(np.arange(120, dtype=np.float32).reshape(1, 6, 20, 1))
    out = F.interpolate(img, scale_factor=1.1, mode="bilinear")
    assert out.shape == (1, 6, 22, 1)
    np.testing.assert_array_equal(out.numpy()[0, :, 0, 0], np.arange(6) * 20)
    dx = nb.grad(lambda v: F.interpolate(v, scale_factor=1.1, mode="linear").sum())(seq)
    np.testing.assert_array_equal(dx.numpy(), np.ones((1, 6, 1)))


def test_reflect_and_circular_padding_longer_than_the_input_are_errors():
    """NumPy reflects or wraps again where PyTorch refuses: the result was a value PyTorch
    never gives."""
    x = nb.ones((1, 4, 1))
    for mode, pad, words in (("reflect", 4, "less than"), ("circular", 5, "at most")):
        conv = nn.Conv1d(1, 1, 3, padding=pad, padding_mode=mode)
        with pytest.raises(ValueError, match=f"Conv1d: padding_mode='{mode}' pads {pad} .*{words}"):
            conv(x)
    assert nn.Conv1d(1, 1, 3, padding=3, padding_mode="reflect")(x).shape == (1, 8, 1)
    assert nn.Conv1d(1, 1, 3, padding=4, padding_mode="circular")(x).shape == (1, 10, 1)
    with pytest.raises(ValueError, match="Conv2d: padding_mode='reflect' pads 2 along"):
        nn.Conv2d(1, 1, 3, padding=2, padding_mode="reflect")(nb.ones((1, 2, 5, 1)))
    # F.pad as PyTorch's too (NumPy's modes, nb.pad's, repeat past the limit)
    x3 = nb.constant(np.array([[[1.0, 2.0, 3.0]]]))
    with pytest.raises(ValueError, match=r"pad: reflect padding \(4, 0\) of dim 2 .* at most 2"):
        F.pad(x3, (4, 0), mode="reflect")
    with pytest.raises(ValueError, match=r"pad: circular padding \(0, 4\) .* at most 3"):
        F.pad(x3, (0, 4), mode="circular")
    assert F.pad(x3, (2, 2), mode="reflect").tolist() == [[[3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]]]


def test_interpolate_errors():
    x = nb.ones((1, 4, 4, 3))
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="align_corners can only be set"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(ValueError, match=r"mode='bilinear' needs an input \(N, H, W, C\)"):
        F.interpolate(nb.ones((1, 4, 3)), scale_factor=2, mode="bilinear")
    with pytest.raises(ValueError, match="mode must be one of"):
        nn.Upsample(scale_factor=2, mode="lanczos")
    with pytest.raises(ValueError, match=r"mode='bicubic' needs an input \(N, H, W, C\)"):
        F.interpolate(nb.ones((1, 4, 3)), scale_factor=2, mode="bicubic")
    with pytest.raises(ValueError, match="align_corners can only be set with a linear or cubic"):
        F.interpolate(x, scale_factor=2, mode="area", align_corners=False)
    with pytest.raises(ValueError, match="size must be"):
        F.interpolate(x, size=(2, 3, 4))


# ------------------------------------------------------------------------------ LSTM, GRU
def _loaded(i):
    kind, batch_first = CFG["RNN"][i]
    m = getattr(nn, kind)(5, 7, num_layers=2, bidirectional=True, batch_first=batch_first)
    prefix = f"rnn_{i}_p_"
    sd = {k[len(prefix) :]: c(REF[k]) for k in REF.files if k.startswith(prefix)}
    assert list(m.state_dict()) == [k for k in sd]  # PyTorch's names, in PyTorch's order
    m.load_state_dict(sd)
    return kind, m


def _rnn_loss(kind, m, x, h0, c0, ct):
    if kind == "LSTM":
        y, (h, cn) = m(x, (h0, c0))
        return (y * ct).sum() + h.sum() + (cn * cn).sum()
    y, h = m(x, h0)
    return (y * ct).sum() + h.sum()


@pytest.mark.parametrize("i", range(4))
def test_rnn_from_torch_state_dict_forward_and_grads(i):
    kind, m = _loaded(i)
    r = {n: c(REF[f"rnn_{i}_{n}"]) for n in ("x", "h0", "c0", "ct")}
    out = m(r["x"], (r["h0"], r["c0"])) if kind == "LSTM" else m(r["x"], r["h0"])
    y, h = out[0], out[1][0] if kind == "LSTM" else out[1]
    close(y.numpy(), REF[f"rnn_{i}_y"])
    close(h.numpy(), REF[f"rnn_{i}_h"])
    if kind == "LSTM":
        close(out[1][1].numpy(), REF[f"rnn_{i}_c"])
    grads = nb.grad(
        lambda m, x, h0, c0: _rnn_loss(kind, m, x, h0, c0, r["ct"]), argnums=(0, 1, 2, 3)
    )(m, r["x"], r["h0"], r["c0"])
    gm, dx, dh0, dc0 = grads
    close(dx.numpy(), REF[f"rnn_{i}_dx"])
    close(dh0.numpy(), REF[f"rnn_{i}_dh0"])
    if kind == "LSTM":
        close(dc0.numpy(), REF[f"rnn_{i}_dc0"])
    for name, g in gm.state_dict().items():
        close(g.numpy(), REF[f"rnn_{i}_dp_{name}"], err_msg=name)


@pytest.mark.parametrize("i", [0, 3])
def test_rnn_backward_compile_and_vmap(i):
    kind, m = _loaded(i)
    r = {n: c(REF[f"rnn_{i}_{n}"]) for n in ("x", "h0", "c0", "ct")}
    # PyTorch style: loss.backward() fills .grad
    _rnn_loss(kind, m, r["x"], r["h0"], r["c0"], r["ct"]).backward()
    close(m.weight_hh_l1_reverse.grad.numpy(), REF[f"rnn_{i}_dp_weight_hh_l1_reverse"])
    # compiled forward (twice: the second call replays) and compiled gradient
    fwd = nb.compile(lambda m, x, h0, c0: _rnn_loss(kind, m, x, h0, c0, r["ct"]))
    eager = float(_rnn_loss(kind, m, r["x"], r["h0"], r["c0"], r["ct"]))
    for _ in range(2):
        assert abs(float(fwd(m, r["x"], r["h0"], r["c0"])) - eager) < 1e-3
    gfn = nb.compile(nb.grad(lambda m: _rnn_loss(kind, m, r["x"], r["h0"], r["c0"], r["ct"])))
    detached = nb.tree_map(nb.detach, m)  # see test_compiled_grad_of_scan_replays below
    for _ in range(2):
        close(gfn(detached).weight_ih_l0.numpy(), REF[f"rnn_{i}_dp_weight_ih_l0"])
    # vmap over a stack of sequences equals one call per sequence
    xs = nb.stack([r["x"], r["x"] * 0.5])
    ys = nb.vmap(lambda x: m(x)[0])(xs)
    close(ys.numpy()[1], m(r["x"] * 0.5)[0].numpy())


def test_rnn_defaults_unbatched_and_dropout():
    lstm = nn.LSTM(3, 4, key=nb.random.key(1))
    assert list(lstm.state_dict()) == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    assert lstm.weight_ih_l0.shape == (16, 3) and nn.GRU(3, 4).weight_hh_l0.shape == (12, 4)
    x = nb.random.normal(nb.random.key(2), (6, 2, 3))
    y, (h, cn) = lstm(x)  # zero initial states when omitted
    y1, (h1, _) = lstm(x[:, 1])  # unbatched (L, input_size)
    assert y.shape == (6, 2, 4) and h.shape == cn.shape == (1, 2, 4) and h1.shape == (1, 4)
    close(y1.numpy(), y.numpy()[:, 1])
    close(y.numpy()[-1], h.numpy()[0])
    gru = nn.GRU(3, 4, num_layers=3, dropout=0.5, bias=False, key=nb.random.key(3))
    assert not any("bias" in k for k in gru.state_dict())
    gru.eval()
    close(gru(x)[0].numpy(), gru(x)[0].numpy())
    gru.train()
    a, b = gru(x)[0].numpy(), gru(x)[0].numpy()
    assert np.abs(a - b).max() > 0  # fresh dropout masks between layers
    k = nb.random.key(4)
    close(gru(x, dropout_key=k)[0].numpy(), gru(x, dropout_key=k)[0].numpy())


def test_each_gap_between_rnn_layers_draws_its_own_mask(monkeypatch):
    """One ``dropout_key`` gave every gap between layers the same mask (PyTorch draws each
    anew); the key is split per gap."""
    seen = []
    real = F.dropout

    def spy(v, p, training=True, key=None):
        out = real(v, p, training, key)
        seen.append((out.numpy() == 0) | (v.numpy() == 0))
        return out

    monkeypatch.setattr(F, "dropout", spy)
    gru = nn.GRU(8, 64, num_layers=3, dropout=0.5, key=nb.random.key(3))
    gru(nb.random.normal(nb.random.key(2), (6, 2, 8)), dropout_key=nb.random.key(4))
    assert len(seen) == 2
    agree = (seen[0] == seen[1]).mean()
    assert 0.35 < agree < 0.65, agree


def test_rnn_errors_name_the_layer_and_shapes():
    lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True)
    with pytest.raises(
        ValueError,
        match=r"LSTM\(3, 4, num_layers=2, batch_first=True\).*\(2, 6, 5\).*\(N, L, input_size\)",
    ):
        lstm(nb.ones((2, 6, 5)))
    with pytest.raises(ValueError, match=r"h_0 of shape \(1, 2, 4\) should be \(2, 2, 4\)"):
        lstm(nb.ones((2, 6, 3)), (nb.zeros((1, 2, 4)), nb.zeros((2, 2, 4))))
    with pytest.raises(TypeError, match="hx must be a pair"):
        lstm(nb.ones((2, 6, 3)), nb.zeros((2, 2, 4)))
    with pytest.raises(TypeError, match="must be floating point"):
        nn.GRU(3, 4)(nb.ones((6, 2, 3), dtype=nb.int32))
    # a sequence of no steps, as PyTorch refuses it (an empty batch is fine)
    with pytest.raises(ValueError, match=r"LSTM\(3, 4.*\(2, 0, 3\) has no time steps"):
        lstm(nb.ones((2, 0, 3)))
    with pytest.raises(ValueError, match=r"GRU\(3, 4\).*\(0, 3\) has no time steps"):
        nn.GRU(3, 4)(nb.ones((0, 3)))
    assert lstm(nb.ones((0, 6, 3)))[0].shape == (0, 6, 4)
    with pytest.raises(ValueError, match="GRU: dropout must be in"):
        nn.GRU(3, 4, dropout=1.5)
    with pytest.raises(ValueError, match="GRU: hidden_size must be a positive int"):
        nn.GRU(3, 0)
    # PyTorch's positional proj_size: 0 (none) is accepted, a projection is refused
    assert nn.LSTM(3, 4, 1, True, False, 0.0, False, 0).hidden_size == 4
    with pytest.raises(NotImplementedError, match="LSTM: proj_size .* not supported.*=2"):
        nn.LSTM(3, 4, proj_size=2)


def test_rnn_matches_torch_live_when_installed():
    torch = pytest.importorskip("torch")
    t = torch.nn.GRU(4, 5, num_layers=2, batch_first=True)
    m = nn.GRU(4, 5, num_layers=2, batch_first=True)
    m.load_state_dict({k: c(v.detach().numpy()) for k, v in t.state_dict().items()})
    x = np.random.default_rng(5).standard_normal((3, 7, 4)).astype(np.float32)
    ty, th = t(torch.tensor(x))
    y, h = m(c(x))
    close(y.numpy(), ty.detach().numpy())
    close(h.numpy(), th.detach().numpy())


# --------------------------------------------------------------- RNN and the one-step cells
def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _np_rnn(m, x, act):
    """``nn.RNN``'s recurrence in NumPy from the module's weights (time-major ``x``)."""
    p = {k: v.numpy().astype(np.float64) for k, v in m.state_dict().items()}
    finals = []
    for layer in range(m.num_layers):
        outs = []
        for suffix in ("", "_reverse")[: 2 if m.bidirectional else 1]:
            tag = f"l{layer}{suffix}"
            w_ih, w_hh = p[f"weight_ih_{tag}"], p[f"weight_hh_{tag}"]
            b = p[f"bias_ih_{tag}"] + p[f"bias_hh_{tag}"] if m.bias else 0.0
            h, ys = np.zeros((x.shape[1], m.hidden_size)), [None] * x.shape[0]
            steps = range(x.shape[0] - 1, -1, -1) if suffix else range(x.shape[0])
            for t in steps:
                h = act(x[t] @ w_ih.T + b + h @ w_hh.T)
                ys[t] = h
            outs.append(np.stack(ys))
            finals.append(h)
        x = np.concatenate(outs, -1)
    return x, np.stack(finals)


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_rnn_and_the_cells_against_their_recurrences(nonlinearity):
    """``nn.RNN`` (Elman, as PyTorch's: the same signature, names and layout) and
    ``RNNCell``/``LSTMCell``/``GRUCell`` against their formulas in NumPy; the RNN's
    gradient against finite differences in float64."""
    act = np.tanh if nonlinearity == "tanh" else (lambda v: np.maximum(v, 0.0))
    rng = np.random.default_rng(3)
    m = nn.RNN(3, 4, 2, nonlinearity, batch_first=True, bidirectional=True, key=nb.random.key(1))
    names = [k for k, _ in m.named_parameters()]
    assert names[:4] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    assert len(names) == 16 and m.weight_ih_l1.shape == (4, 8)
    x = rng.standard_normal((2, 5, 3)).astype(np.float32)
    y, h = m(c(x))
    want_y, want_h = _np_rnn(m, x.transpose(1, 0, 2).astype(np.float64), act)
    close(y.numpy(), want_y.transpose(1, 0, 2))
    close(h.numpy(), want_h)
    y1, h1 = m(c(x[0]))  # unbatched
    close(y1.numpy(), want_y[:, 0])
    assert h1.shape == (4, 4)
    small = nn.RNN(2, 3, nonlinearity=nonlinearity, dtype=nb.float64, key=nb.random.key(2))
    xs = rng.standard_normal((4, 1, 2))

    def loss(v):
        return (small(v)[0] ** 2).sum()

    g = nb.grad(loss)(nb.constant(xs)).numpy()
    eps, fd = 1e-6, np.zeros_like(xs)
    for idx in np.ndindex(xs.shape):
        d = np.zeros_like(xs)
        d[idx] = eps
        fd[idx] = (loss(nb.constant(xs + d)).item() - loss(nb.constant(xs - d)).item()) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)
    # the cells: one step each
    xb, hb, cb = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (2, 4), (2, 4)))
    cell = nn.RNNCell(3, 4, nonlinearity=nonlinearity, key=nb.random.key(3))
    p = {k: v.numpy() for k, v in cell.state_dict().items()}
    want = act(xb @ p["weight_ih"].T + p["bias_ih"] + hb @ p["weight_hh"].T + p["bias_hh"])
    close(cell(c(xb), c(hb)).numpy(), want)
    close(cell(c(xb[0])).numpy(), act(xb[0] @ p["weight_ih"].T + p["bias_ih"] + p["bias_hh"]))
    lstm = nn.LSTMCell(3, 4, key=nb.random.key(4))
    p = {k: v.numpy() for k, v in lstm.state_dict().items()}
    gates = xb @ p["weight_ih"].T + p["bias_ih"] + hb @ p["weight_hh"].T + p["bias_hh"]
    i, f, g_, o = np.split(gates, 4, axis=-1)
    c_new = _sig(f) * cb + _sig(i) * np.tanh(g_)
    h_new, c_got = lstm(c(xb), (c(hb), c(cb)))
    close(c_got.numpy(), c_new)
    close(h_new.numpy(), _sig(o) * np.tanh(c_new))
    gru = nn.GRUCell(3, 4, bias=False, key=nb.random.key(5))
    p = {k: v.numpy() for k, v in gru.state_dict().items()}
    assert list(p) == ["weight_ih", "weight_hh"]
    xr, xz, xn = np.split(xb @ p["weight_ih"].T, 3, axis=-1)
    hr, hz, hn = np.split(hb @ p["weight_hh"].T, 3, axis=-1)
    r, z = _sig(xr + hr), _sig(xz + hz)
    close(gru(c(xb), c(hb)).numpy(), (1 - z) * np.tanh(xn + r * hn) + z * hb)
    with pytest.raises(ValueError, match="RNN: nonlinearity must be 'tanh' or 'relu'"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match=r"LSTMCell\(3, 4\): c of shape \(2, 5\)"):
        lstm(c(xb), (c(hb), nb.zeros((2, 5))))


def test_rnn_and_cells_match_torch_live_when_installed():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(6).standard_normal((3, 7, 4)).astype(np.float32)
    t = torch.nn.RNN(4, 5, 2, "relu", batch_first=True, bidirectional=True)
    m = nn.RNN(4, 5, 2, "relu", batch_first=True, bidirectional=True)
    m.load_state_dict({k: c(v.detach().numpy()) for k, v in t.state_dict().items()})
    ty, th = t(torch.tensor(x))
    y, h = m(c(x))
    close(y.numpy(), ty.detach().numpy())
    close(h.numpy(), th.detach().numpy())
    for ours, theirs in ((nn.LSTMCell, torch.nn.LSTMCell), (nn.GRUCell, torch.nn.GRUCell)):
        tc, mc = theirs(4, 5), ours(4, 5)
        mc.load_state_dict({k: c(v.detach().numpy()) for k, v in tc.state_dict().items()})
        got, want = mc(c(x[:, 0])), tc(torch.tensor(x[:, 0]))
        for a, b in zip(nb.tree_leaves(got), want if isinstance(want, tuple) else (want,)):
            close(a.numpy(), b.detach().numpy())
