"""safetensors checkpoints: exact round trips, optimizer state, bad files, the data loader."""

import os
import subprocess
import sys

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
    with pytest.raises(
        TypeError, match="is a float; a checkpoint holds nabla tensors and NumPy arrays"
    ):
        nn.save({"x": 1.0}, tmp_path / "bad.safetensors")
    with pytest.raises(TypeError, match=r"'model' is a collections.OrderedDict.*merge_state_dicts"):
        nn.save({"model": target.state_dict()}, tmp_path / "nested.safetensors")


def test_save_into_a_missing_folder_names_the_path_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        FileNotFoundError,
        match=r"save: cannot write the checkpoint 'no_such_dir/m.safetensors': no folder "
        r"'no_such_dir'",
    ) as e:
        nn.save({"x": nb.ones((2,))}, "no_such_dir/m.safetensors")
    assert ".tmp-" not in str(e.value)
    assert not os.path.exists("no_such_dir")


def test_save_removes_a_dead_process_s_leftover_tmp_file_but_not_a_live_one_s(tmp_path):
    """An interrupted save leaves ``path.tmp-PID``; the next save removes it once that
    process is gone, and leaves the file of a process that may be saving now."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = int(done.stdout)  # exited: its PID names no process now
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path = tmp_path / "m.safetensors"
        orphan = tmp_path / f"m.safetensors.tmp-{dead}"
        busy = tmp_path / f"m.safetensors.tmp-{live.pid}"
        other = tmp_path / f"other.safetensors.tmp-{dead}"
        for f in (orphan, busy, other):
            f.write_bytes(b"partial")
        nn.save({"x": nb.ones((2,))}, path)
        assert not orphan.exists()
        assert busy.exists() and other.exists()  # a live saver's; another checkpoint's
        np.testing.assert_array_equal(nn.load(path)["x"].numpy(), [1.0, 1.0])
    finally:
        live.kill()
        live.wait()


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
    with pytest.raises(ValueError, match="same first dim"):
        nn.DataLoader((x, y[:5]))
    empty = nn.DataLoader((x[:0], y[:0]), batch_size=4)  # as PyTorch's: no batches
    assert len(empty) == 0 and list(empty) == []


def test_unsigned_dtypes_round_trip(tmp_path):
    sd = {
        k: nb.constant(np.array([0, 1, np.iinfo(t).max], t))
        for k, t in (("u16", np.uint16), ("u32", np.uint32), ("u64", np.uint64))
    }
    nb.nn.save(sd, tmp_path / "u.safetensors")
    back = nb.nn.load(tmp_path / "u.safetensors")
    for k, v in sd.items():
        assert back[k].dtype is v.dtype
        np.testing.assert_array_equal(back[k].numpy(), v.numpy())


def test_default_collate_refuses_ragged_samples_and_keeps_strings():
    """Samples with different numbers of fields lost the extra fields silently; NumPy
    strings crashed the stack; a list of plain numbers or strings was read as columns
    (a misleading error); a shape mismatch named no sample."""
    with pytest.raises(ValueError, match=r"sample 0 has 2, sample 1 has 3"):
        nn.data.default_collate([[1, 2], [1, 2, 3], [4, 5, 6]])
    assert nn.data.default_collate([np.str_("a"), np.str_("bb")]) == ["a", "bb"]
    batches = list(nn.DataLoader(list(range(10)), batch_size=4))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert list(nn.DataLoader(["s0", "s1", "s2"], batch_size=2)) == [["s0", "s1"], ["s2"]]
    with pytest.raises(ValueError, match=r"sample 0 has \(3,\), sample 2 has \(4,\)"):
        nn.data.default_collate([np.zeros(3), np.ones(3), np.ones(4)])


def test_a_negative_seed_shuffles_as_any_other():
    """PyTorch takes a negative seed; the loader accepted one and failed at its first
    epoch (NumPy's seeds are not negative)."""
    a = list(nn.DataLoader(np.arange(10), batch_size=5, shuffle=True, seed=-1))
    b = list(nn.DataLoader(np.arange(10), batch_size=5, shuffle=True, seed=-1))
    got = np.concatenate([t.numpy() for t in a])
    assert sorted(got.tolist()) == list(range(10))
    np.testing.assert_array_equal(got, np.concatenate([t.numpy() for t in b]))
    parts = nn.data.random_split(np.arange(6), [3, 3], seed=-5)
    assert sorted(int(i) for p in parts for i in p.indices) == list(range(6))


def test_save_of_something_not_a_mapping_names_what_it_takes(tmp_path):
    with pytest.raises(TypeError, match="save: expects a mapping of names to tensors, got list"):
        nn.save([nb.ones(2)], tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match=r"got Linear \(a Module: pass module.state_dict\(\)\)"):
        nn.save(nn.Linear(2, 2), tmp_path / "x.safetensors")
