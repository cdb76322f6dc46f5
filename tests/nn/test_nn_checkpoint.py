"""safetensors checkpoints: exact round trips, optimizer state, bad files, the data loader."""

import numpy as np
import pytest

import nabla as nb

nn = nb.nn


def _model():
    return nn.Sequential(
        nn.Linear(3, 4, key=nb.random.key(0)),
        nn.LayerNorm(4),
        nn.Linear(4, 2, key=nb.random.key(1)),
    )


def test_state_dict_round_trip_is_bit_exact(tmp_path):
    m = _model()
    m.register_buffer("counts", nb.constant(np.arange(3, dtype=np.int64)))
    path = tmp_path / "model.safetensors"
    nn.save(m.state_dict(), path, metadata={"epoch": 3})
    loaded = nn.load(path)
    assert sorted(loaded) == sorted(m.state_dict())
    for k, v in m.state_dict().items():
        assert loaded[k].dtype is v.dtype
        np.testing.assert_array_equal(loaded[k].numpy(), v.numpy())
    other = _model()
    other.register_buffer("counts", nb.zeros((3,), dtype=nb.int64))
    other.load_state_dict(loaded)
    x = nb.ones((2, 3))
    np.testing.assert_array_equal(other(x).numpy(), m(x).numpy())
    assert nn.load_metadata(path) == {"epoch": "3"}


@pytest.mark.parametrize("dtype", [nb.bfloat16, nb.float16, nb.float64, nb.int8, nb.uint8, nb.bool])
def test_dtypes_round_trip(tmp_path, dtype):
    value = nb.constant(np.array([[0.0, 1.5, -2.25], [3.0, 0.0, 1.0]])).cast(dtype)
    nn.save({"v": value}, tmp_path / "v.safetensors")
    back = nn.load(tmp_path / "v.safetensors")["v"]
    assert back.dtype is dtype
    np.testing.assert_array_equal(back.numpy(), value.numpy())


def test_model_and_optimizer_in_one_checkpoint(tmp_path):
    m = _model()
    opt = nn.optim.AdamW(m, lr=1e-2)
    nn.functional.mse_loss(m(nb.ones((2, 3))), nb.zeros((2, 2))).backward()
    opt.step()
    sd = nn.merge_state_dicts(model=m.state_dict(), optimizer=opt.state_dict())
    nn.save(sd, tmp_path / "ckpt.safetensors")
    back = nn.load(tmp_path / "ckpt.safetensors")
    m2 = _model()
    assert m2.load_state_dict(nn.split_state_dict(back, "model")) == ([], [])
    opt2 = nn.optim.AdamW(m2, lr=1e-2)
    opt2.load_state_dict(nn.split_state_dict(back, "optimizer"))
    assert opt2.state["step"].item() == 1.0
    np.testing.assert_array_equal(opt2.state["mu"][0].numpy(), opt.state["mu"][0].numpy())


def test_bad_files_give_clear_errors_and_no_partial_model(tmp_path):
    m = _model()
    path = tmp_path / "m.safetensors"
    nn.save(m.state_dict(), path)
    data = path.read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:-10])
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        nn.load(tmp_path / "cut.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"hello")
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        nn.load(tmp_path / "junk.safetensors")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        nn.load(tmp_path / "missing.safetensors")
    wide = nn.Sequential(nn.Linear(3, 5), nn.LayerNorm(5), nn.Linear(5, 2))
    target = _model()
    before = [p.numpy().copy() for p in target.parameters()]
    nn.save(wide.state_dict(), tmp_path / "wide.safetensors")
    with pytest.raises(ValueError, match=r"0.weight: shape \(3, 5\), expected \(3, 4\)"):
        target.load_state_dict(nn.load(tmp_path / "wide.safetensors"))
    nn.save({"other": nb.ones((2,))}, tmp_path / "keys.safetensors")
    with pytest.raises(ValueError, match="missing keys"):
        target.load_state_dict(nn.load(tmp_path / "keys.safetensors"))
    for p, b in zip(target.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), b)
    with pytest.raises(TypeError, match="holds tensors only"):
        nn.save({"x": 1.0}, tmp_path / "bad.safetensors")


def test_data_loader():
    x, y = np.arange(20).reshape(10, 2).astype(np.float32), np.arange(10)
    loader = nn.DataLoader((x, y), batch_size=4, shuffle=True, seed=1)
    assert len(loader) == 3
    epoch1 = [b[1].numpy().tolist() for b in loader]
    epoch2 = [b[1].numpy().tolist() for b in loader]
    assert sorted(sum(epoch1, [])) == list(range(10)) and epoch1 != epoch2
    again = nn.DataLoader((x, y), batch_size=4, shuffle=True, seed=1)
    assert [b[1].numpy().tolist() for b in again] == epoch1
    dropped = nn.DataLoader(nb.constant(x), batch_size=4, drop_last=True)
    assert len(dropped) == 2 and [b.shape for b in dropped] == [(4, 2), (4, 2)]
    with pytest.raises(ValueError, match="same non-zero first dim"):
        nn.DataLoader((x, y[:5]))
