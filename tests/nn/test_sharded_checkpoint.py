"""save_sharded/load_sharded in one process with a simulated mesh (the multi-process cases
are in tests/distributed): round trips into other layouts, module and optimizer state,
atomic replacement, and the errors."""

import json
import os

import ml_dtypes
import numpy as np
import pytest

import nabla as nb
from nabla import P
from nabla.nn import sharded_checkpoint as sc


def values():
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((8, 12)).astype(np.float32),
        "terms": rng.standard_normal((8, 4)).astype(np.float32),
        "half": rng.standard_normal((4, 6)).astype(ml_dtypes.bfloat16),
    }


def state(mesh):
    v = values()
    return {
        "w": nb.shard(v["w"], mesh, P("dp", "tp")),
        "terms": nb.sum(nb.shard(v["terms"], mesh, P(("dp", "tp"))), axis=0),  # partial
        "half": nb.shard(nb.constant(v["half"]), mesh, P(None, "tp")),
        "ids": nb.constant(np.arange(5, dtype=np.int64)),
        "seen": np.array([3, 1], np.int32),
        "step": 12,
        "lr": 0.25,
        "name": "run-1",
        "none": None,
    }


def test_round_trip_into_other_layouts(tmp_path):
    mesh = nb.DeviceMesh("m", (2, 2), ("dp", "tp"))
    saved = state(mesh)
    assert saved["terms"].sharding.partial
    nb.nn.save_sharded(saved, tmp_path / "ck")
    index = json.loads((tmp_path / "ck" / "index.json").read_text())
    w = index["entries"]["w"]
    assert w["shape"] == [8, 12] and w["spec"] == [["dp"], ["tp"]]
    assert w["mesh"] == {"name": "m", "shape": [2, 2], "axes": ["dp", "tp"]}
    assert len(w["blocks"]) == 4  # one per distinct block
    assert len(index["entries"]["half"]["blocks"]) == 2  # replicas along dp stored once
    assert index["entries"]["terms"]["spec"] == [[]]  # completed before saving
    v = values()
    other = nb.DeviceMesh("o", (4,), ("x",))
    like = state(mesh)
    like.update(
        w=nb.shard(np.zeros((8, 12), np.float32), other, P(None, "x")),
        terms=nb.shard(np.zeros(4, np.float32), other, P("x")),
        half=nb.constant(np.zeros((4, 6), ml_dtypes.bfloat16)),
        step=0,
        lr=0.0,
        name="",
    )
    out = nb.nn.load_sharded(tmp_path / "ck", like)
    assert out["w"].sharding.to_partition_spec() == P(None, "x")
    for s in out["w"].addressable_shards:
        np.testing.assert_array_equal(s.data, v["w"][s.index])
    np.testing.assert_allclose(out["terms"].numpy(), v["terms"].sum(0), rtol=1e-6)
    assert out["half"].dtype == nb.bfloat16 and out["half"].sharding is None
    np.testing.assert_array_equal(out["half"].numpy(), v["half"])  # bit for bit
    np.testing.assert_array_equal(out["ids"].numpy(), np.arange(5))
    np.testing.assert_array_equal(out["seen"], [3, 1])
    assert (out["step"], out["lr"], out["name"], out["none"]) == (12, 0.25, "run-1", None)


def test_module_and_optimizer_state_resume_exactly(tmp_path):
    def loss_fn(model, x):
        return nb.mean(model(x) ** 2)

    nb.random.seed(0)
    model = nb.nn.Sequential(nb.nn.Linear(4, 8), nb.nn.Tanh(), nb.nn.Linear(8, 2))
    opt = nb.nn.optim.adamw_init(model)
    x = nb.constant(np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32))

    def step(model, opt):
        grads = nb.grad(loss_fn)(model, x)
        return nb.nn.optim.adamw_update(model, grads, opt, lr=0.01)

    for _ in range(2):
        model, opt = step(model, opt)
    nb.nn.save_sharded({"model": model, "opt": opt, "step": 2}, tmp_path / "ck")
    straight = (model, opt)
    for _ in range(3):
        straight = step(*straight)
    back = nb.nn.load_sharded(tmp_path / "ck", {"model": model, "opt": opt, "step": 0})
    assert back["step"] == 2
    resumed = (back["model"], back["opt"])
    for _ in range(3):
        resumed = step(*resumed)
    for a, b in zip(nb.tree_leaves(resumed), nb.tree_leaves(straight), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_partial_value_saves_the_bits_it_reads_as(tmp_path):
    """A sum over rows split over two mesh axes is a partial value of 4 terms. Reading it
    (``.numpy()``) reduced one mesh axis at a time and its ``all_reduce`` (the save's, an
    op's) all four in device order: the last bits differed."""
    mesh = nb.DeviceMesh("m", (2, 2), ("dp", "tp"))
    rows = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    s = nb.sum(nb.shard(rows, mesh, P(("dp", "tp"))), axis=0)
    before = s.numpy()
    np.testing.assert_array_equal((s + 0.0).numpy(), before)
    nb.nn.save_sharded({"s": s}, tmp_path / "ck")
    np.testing.assert_array_equal(
        nb.nn.load_sharded(tmp_path / "ck", {"s": s})["s"].numpy(), before
    )


def test_big_endian_arrays_trainable_placeholders_and_unstorable_values(tmp_path):
    """A big-endian array came back byte-swapped (safetensors stores native order; the index
    named the big-endian dtype); a model loaded into its own parameters lost
    ``requires_grad``; an array of strings failed inside safetensors, naming no path."""
    saved = {"b": np.array([1.5, 2.5, -3.0], ">f4"), "i": np.array([1, 2, 3], ">i8")}
    nb.nn.save_sharded(saved, tmp_path / "be")
    back = nb.nn.load_sharded(tmp_path / "be", saved)
    for k, v in saved.items():
        assert back[k].dtype == v.dtype
        np.testing.assert_array_equal(back[k], v)

    nb.random.seed(0)
    model = nb.nn.Linear(4, 2)
    nb.nn.save_sharded({"model": model, "frozen": nb.zeros((2,))}, tmp_path / "m")
    out = nb.nn.load_sharded(tmp_path / "m", {"model": model, "frozen": nb.zeros((2,))})
    assert [p.requires_grad for p in out["model"].parameters()] == [True, True]
    assert not out["frozen"].requires_grad
    nb.sum(out["model"](nb.ones((3, 4)))).backward()
    assert out["model"].weight.grad is not None

    with pytest.raises(TypeError, match=r"save_sharded: 'opt.names' is a NumPy array of <U1"):
        nb.nn.save_sharded({"opt": {"names": np.array(["w", "b"])}}, tmp_path / "s")
    with pytest.raises(TypeError, match=r"save: 'names' is a NumPy array of complex128"):
        nb.nn.save({"names": np.zeros(2, complex)}, tmp_path / "s.safetensors")
    nb.nn.save_sharded({"run": {"name": "abc", "big": 10**20}}, tmp_path / "p")
    for like, path in (
        ({"name": np.float32(0), "big": 0}, "name"),
        ({"name": "", "big": np.int64(0)}, "big"),
    ):
        with pytest.raises(TypeError, match=f"load_sharded: 'run.{path}' was saved as the"):
            nb.nn.load_sharded(tmp_path / "p", {"run": like})


def test_an_interrupted_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    mesh = nb.DeviceMesh("m", (2, 2), ("dp", "tp"))
    directory = tmp_path / "ck"
    nb.nn.save_sharded({"w": nb.shard(np.ones((4, 4), np.float32), mesh, P("dp"))}, directory)

    def killed(*args):
        raise KeyboardInterrupt("killed before the commit")

    monkeypatch.setattr(sc, "_commit_index", killed)
    with pytest.raises(KeyboardInterrupt):
        nb.nn.save_sharded({"w": nb.shard(np.zeros((4, 4), np.float32), mesh, P())}, directory)
    assert len([f for f in os.listdir(directory) if f.startswith("data-")]) == 2
    like = {"w": nb.constant(np.zeros((4, 4), np.float32))}
    np.testing.assert_array_equal(nb.nn.load_sharded(directory, like)["w"].numpy(), 1)
    monkeypatch.undo()
    nb.nn.save_sharded({"w": nb.constant(np.full((4, 4), 2, np.float32))}, directory)
    assert len([f for f in os.listdir(directory) if f.startswith("data-")]) == 1
    np.testing.assert_array_equal(nb.nn.load_sharded(directory, like)["w"].numpy(), 2)

    # a kill while the old folder is being removed leaves it marked (its mark goes last),
    # so the next save removes the rest
    (old,) = [f for f in os.listdir(directory) if f.startswith("data-")]
    removed = []
    monkeypatch.setattr(sc.os, "remove", lambda p: removed.append(p) or os.unlink(p))
    nb.nn.save_sharded({"w": nb.constant(np.full((4, 4), 3, np.float32))}, directory)
    assert removed[-1].endswith(sc._MARK) and not (directory / old).exists()


def test_a_save_removes_only_what_saves_made(tmp_path):
    """Folders the user keeps beside a checkpoint (``data-raw/``) survive a save; an
    ``index.json`` that is not a checkpoint's is refused, never overwritten, and an index
    naming a folder outside the checkpoint is never followed."""
    directory = tmp_path / "ck"
    (directory / "data-raw").mkdir(parents=True)
    (directory / "data-raw" / "train.csv").write_text("1,2\n")
    (directory / "data-20240101-000000-1-000000001").mkdir()  # that name, not made by a save
    w = {"w": nb.constant(np.ones(2, np.float32))}
    nb.nn.save_sharded(w, directory)
    nb.nn.save_sharded(w, directory)
    assert (directory / "data-raw" / "train.csv").exists()
    assert (directory / "data-20240101-000000-1-000000001").exists()
    assert len([f for f in os.listdir(directory) if sc._DATA_NAME.fullmatch(f)]) == 2

    other = tmp_path / "other"
    (other / "images").mkdir(parents=True)
    (other / "index.json").write_text(json.dumps({"data": "images"}))
    with pytest.raises(ValueError, match=r"save_sharded: .* holds an index.json that is not"):
        nb.nn.save_sharded(w, other)
    assert (other / "images").exists()
    with pytest.raises(ValueError, match=r"load_sharded: .* is not a nabla.sharded_checkpoint"):
        nb.nn.load_sharded(other, w)

    victim = tmp_path / "victim"
    victim.mkdir()
    index = json.loads((directory / "index.json").read_text())
    index["data"] = str(victim)
    (directory / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"load_sharded: .* names no data folder"):
        nb.nn.load_sharded(directory, w)
    nb.nn.save_sharded(w, directory)
    assert victim.exists()

    (directory / "index.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"load_sharded: .* is not a readable checkpoint index"):
        nb.nn.load_sharded(directory, w)
    nb.nn.save_sharded(w, directory)  # an unreadable index: a write that was cut short
    folder = directory / json.loads((directory / "index.json").read_text())["data"]
    (path,) = [p for p in folder.iterdir() if p.name != sc._MARK]
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(ValueError, match=r"load_sharded: .* is truncated: the block 'w"):
        nb.nn.load_sharded(directory, w)


def test_errors_name_the_values(tmp_path):
    with pytest.raises(
        TypeError, match=r"save_sharded: 'a.f' is a builtin_function_or_method; a checkpoint holds"
    ):
        nb.nn.save_sharded({"a": {"f": len}}, tmp_path / "x")
    with pytest.raises(FileNotFoundError, match="load_sharded: no committed checkpoint"):
        nb.nn.load_sharded(tmp_path / "none", {})
    nb.nn.save_sharded({"a": nb.constant(np.zeros(3, np.float32)), "n": 1}, tmp_path / "ck")
    with pytest.raises(
        KeyError, match=r"missing from the checkpoint \['b'\], not in `like` \['n'\]"
    ):
        nb.nn.load_sharded(tmp_path / "ck", {"a": nb.constant(np.zeros(3, np.float32)), "b": 1})
    with pytest.raises(ValueError, match=r"'a' was saved with shape \(3,\) and dtype float32"):
        nb.nn.load_sharded(tmp_path / "ck", {"a": nb.constant(np.zeros(4, np.float32)), "n": 0})


def test_placeholders_are_of_the_saved_kind_and_numpy_scalars_come_back_as_such(tmp_path):
    """A tensor, an array and a scalar each need a placeholder of their kind (a Python
    scalar where a tensor was saved returned a bare array, a tensor where an int was saved
    returned the int); a NumPy scalar comes back with its dtype, not as a Python float."""
    saved = {
        "t": nb.constant(np.ones(2, np.float32)),
        "a": np.ones(2),
        "n": 3,
        "x": np.float64(2.5),
    }
    nb.nn.save_sharded(saved, tmp_path / "ck")
    like = {"t": nb.zeros((2,)), "a": np.zeros(2), "n": 0, "x": np.float64(0)}
    out = nb.nn.load_sharded(tmp_path / "ck", like)
    assert type(out["x"]) is np.float64 and out["x"] == 2.5 and out["n"] == 3
    for path, wrong, saved_as in (
        ("t", 0.0, "a tensor"),
        ("a", nb.zeros((2,)), "a NumPy array"),
        ("n", nb.zeros(()), "an int"),
        ("x", nb.zeros(()), "a NumPy scalar"),
    ):
        with pytest.raises(TypeError, match=f"'{path}' was saved as {saved_as}, but `like` has"):
            nb.nn.load_sharded(tmp_path / "ck", {**like, path: wrong})
    # np.float64 is a float: a Python float placeholder takes the saved NumPy scalar back
    out = nb.nn.load_sharded(tmp_path / "ck", {**like, "x": 0.0})
    assert type(out["x"]) is np.float64 and out["x"] == 2.5
    # a NumPy integer placeholder never truncates a saved float (it took 2.7 as 2)
    nb.nn.save_sharded({"lr": 2.7, "k": 3}, tmp_path / "ck2")
    with pytest.raises(TypeError, match=r"'lr' was saved as the float 2.7, which a NumPy int64"):
        nb.nn.load_sharded(tmp_path / "ck2", {"lr": np.int64(0), "k": 0})
    out = nb.nn.load_sharded(tmp_path / "ck2", {"lr": np.float32(0), "k": np.int64(0)})
    assert out == {"lr": np.float32(2.7), "k": 3} and type(out["k"]) is np.int64


def test_tied_weights_load_as_one_tensor_and_train_as_the_uninterrupted_run(tmp_path):
    """A module used in two places is one set of weights: loaded into it, it stays one
    tensor per weight (two, as saved), so the resumed run matches the uninterrupted one."""
    nb.random.seed(0)
    shared = nb.nn.Linear(4, 4)
    model = nb.nn.Sequential(shared, nb.nn.Tanh(), shared)
    x = nb.constant(np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32))

    def step(model):
        grads = nb.grad(lambda m: nb.mean(m(x) ** 2))(model)
        return nb.tree_map(lambda p, g: p - 0.1 * g, model, grads)

    nb.nn.save_sharded({"model": model}, tmp_path / "ck")
    back = nb.nn.load_sharded(tmp_path / "ck", {"model": model})["model"]
    assert back[0].weight is back[2].weight and len(list(back.parameters())) == 2
    straight, resumed = model, back
    for _ in range(3):
        straight, resumed = step(straight), step(resumed)
    for a, b in zip(nb.tree_leaves(resumed), nb.tree_leaves(straight), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_write_error_is_an_os_error_naming_the_file(tmp_path, monkeypatch):
    """safetensors' own I/O errors are not OSErrors: a failed write is one, naming the
    file (as a folder some process cannot see gives)."""
    import safetensors.numpy

    def fail(arrays, path):
        raise safetensors.SafetensorError("Error while serializing: I/O error")

    monkeypatch.setattr(safetensors.numpy, "save_file", fail)
    with pytest.raises(OSError, match=r"save_sharded: cannot write '.*process-00000-of-00001"):
        nb.nn.save_sharded({"a": np.zeros(2)}, tmp_path / "ck")


def test_a_device_reads_only_the_stored_blocks_its_block_overlaps(tmp_path):
    """Saved as 4 row blocks: reading rows 2:4 touches one stored block, a region across
    rows 1:5 and columns 3:6 the three it overlaps, each as a memory map."""
    mesh = nb.DeviceMesh("m", (4,), ("x",))
    w = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    nb.nn.save_sharded({"w": nb.shard(w, mesh, P("x"))}, tmp_path / "ck")
    index = json.loads((tmp_path / "ck" / "index.json").read_text())
    blocks = index["entries"]["w"]["blocks"]
    stored = [(b["file"], b["key"], tuple(b["start"]), tuple(b["shape"])) for b in blocks]
    files = sc._Files(str(tmp_path / "ck" / index["data"]), "test")
    read = []
    array = files.array
    files.array = lambda file, key, shape, dtype: read.append(key) or array(file, key, shape, dtype)
    got = sc._read_region(files, stored, (slice(2, 4), slice(0, 6)), (8, 6), np.float32)
    np.testing.assert_array_equal(got, w[2:4])
    assert read == ["w@2,0"]  # one of the four blocks
    read.clear()
    got = sc._read_region(files, stored, (slice(1, 5), slice(3, 6)), (8, 6), np.float32)
    np.testing.assert_array_equal(got, w[1:5, 3:])
    assert read == ["w@0,0", "w@2,0", "w@4,0"]
    assert isinstance(
        array("process-00000-of-00001.safetensors", "w@0,0", (2, 6), np.float32), np.memmap
    )
