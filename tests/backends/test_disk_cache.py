"""The on-disk compiled-model cache (``nabla.backends.max.disk``) without compiling anything:
verification and quarantine, who may use the directory, the size bound, stale files.

The end-to-end cases (a corrupted entry recompiled with correct results, four processes
compiling once) need MAX and live in ``test_max.py``.
"""

from __future__ import annotations

import json
import logging
import os
import time
import types

import pytest

from nabla.backends.max import disk
from nabla.core.device import CPU
from nabla.core.dtypes import DType
from nabla.core.ir import build_program

DIGEST_A = "a" * 64
DIGEST_B = "b" * 64


def _program(n_inputs=1, shape=(4,)):
    spec = (DType.float32, shape, CPU())
    return build_program(
        "k", [spec] * n_inputs, [("sin", (0,), {}, ((DType.float32, shape),))], [(0, 0)]
    )


class _Compiled:
    def __init__(self, payload: bytes):
        self.payload = payload

    def export_mef(self, path):
        with open(path, "wb") as f:
            f.write(self.payload)


def _metadata(program):
    def specs(sig):
        return [types.SimpleNamespace(dtype=f"DType.{dt}", shape=list(shape)) for dt, shape in sig]

    sig = disk.signature_of(program)
    return types.SimpleNamespace(
        input_metadata=specs(sig["inputs"]), output_metadata=specs(sig["outputs"])
    )


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("NABLA_CACHE_DIR", str(d))
    c = disk.DiskCache()
    assert c.directory() == d
    assert (d.stat().st_mode & 0o777) == 0o700, "created private"
    return c, d


def _store(c, d, digest=DIGEST_A, program=None, payload=b"model-bytes" * 100):
    program = program or _program()
    assert c.store(d, digest, program, _Compiled(payload))
    return program


def _load(c, d, program, digest=DIGEST_A, metadata=None):
    loaded = []

    def loader(path):
        loaded.append(path)
        return metadata or _metadata(program)

    return c.load(d, digest, program, loader), loaded


def test_a_verified_entry_loads(cache):
    c, d = cache
    prog = _store(c, d)
    model, loaded = _load(c, d, prog)
    assert model is not None and loaded == [str(d / f"{DIGEST_A[:40]}.mef")]
    meta = json.loads((d / f"{DIGEST_A[:40]}.json").read_text())
    assert meta["digest"] == DIGEST_A and meta["bytes"] == 1100 and len(meta["sha256"]) == 64
    assert not list(d.glob(".*.tmp")), "no temporary file is left behind"


def _flip_bits(path):
    data = bytearray(path.read_bytes())
    for i in range(8):
        data[len(data) // 2 + i] ^= 1 << i
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[:100])


def _drop_sidecar(path):
    path.with_suffix(".json").unlink()


def _edit_sidecar(**changes):
    def edit(path):
        side = path.with_suffix(".json")
        meta = json.loads(side.read_text())
        meta.update(changes)
        side.write_text(json.dumps(meta))

    return edit


CORRUPTIONS = {
    "bit_flips": (_flip_bits, "checksum"),
    "truncated": (_truncate, "size"),
    "no_sidecar": (_drop_sidecar, "no sidecar"),
    "other_max": (_edit_sidecar(max="0.0.1"), "built by MAX 0.0.1"),
    "other_signature": (
        _edit_sidecar(signature={"inputs": [], "outputs": []}),
        "signature differs",
    ),
    "garbage_sidecar": (lambda p: p.with_suffix(".json").write_text("{nope"), "unreadable"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_a_damaged_entry_is_quarantined_never_loaded(cache, case, caplog):
    c, d = cache
    prog = _store(c, d)
    damage, reason = CORRUPTIONS[case]
    damage(d / f"{DIGEST_A[:40]}.mef")
    with caplog.at_level(logging.WARNING, logger="nabla.max"):
        model, loaded = _load(c, d, prog)
    assert model is None and loaded == [], "a rejected entry must never reach MAX"
    assert not (d / f"{DIGEST_A[:40]}.mef").exists()
    assert list((d / "quarantine").glob("*.mef")), "moved aside, not deleted"
    assert reason in caplog.text and "Recompiling" in caplog.text


def test_another_programs_entry_under_this_name_is_rejected(cache, caplog):
    c, d = cache
    prog = _store(c, d, DIGEST_B)  # a valid entry of program B ...
    for suffix in (".mef", ".json"):  # ... copied under A's name, sidecar included
        os.replace(d / f"{DIGEST_B[:40]}{suffix}", d / f"{DIGEST_A[:40]}{suffix}")
    with caplog.at_level(logging.WARNING, logger="nabla.max"):
        model, loaded = _load(c, d, prog)
    assert model is None and not loaded
    assert "another program" in caplog.text


def test_a_model_whose_real_inputs_differ_is_rejected_after_loading(cache, caplog):
    c, d = cache
    prog = _store(c, d)
    other = _metadata(_program(n_inputs=2))  # what MAX reports for a forged entry
    with caplog.at_level(logging.WARNING, logger="nabla.max"):
        model, loaded = _load(c, d, prog, metadata=other)
    assert model is None and len(loaded) == 1
    assert "inputs/outputs differ" in caplog.text
    assert list((d / "quarantine").glob("*.mef"))


def test_a_loader_failure_quarantines(cache, caplog):
    c, d = cache
    prog = _store(c, d)

    def broken(path):
        raise RuntimeError("bad model")

    with caplog.at_level(logging.WARNING, logger="nabla.max"):
        assert c.load(d, DIGEST_A, prog, broken) is None
    assert "MAX could not load it: bad model" in caplog.text


def test_quarantine_keeps_only_the_newest(cache):
    c, d = cache
    for i in range(disk.QUARANTINE_KEEP + 5):
        _store(c, d)
        c.quarantine(d, DIGEST_A, f"test {i}")
    assert len(list((d / "quarantine").iterdir())) == 2 * disk.QUARANTINE_KEEP


def test_the_cache_is_bounded_least_recently_used_first(cache, monkeypatch):
    c, d = cache
    prog = _program()
    names = ["1" * 64, "2" * 64, "3" * 64]
    for i, name in enumerate(names):
        _store(c, d, name, prog, payload=b"x" * 1000)
        os.utime(d / f"{name[:40]}.mef", (time.time() - 100 + i, time.time() - 100 + i))
    _load(c, d, prog, names[0])  # a load makes the oldest the most recently used
    entry = (d / f"{names[0][:40]}.mef").stat().st_size + (
        d / f"{names[0][:40]}.json"
    ).stat().st_size
    monkeypatch.setenv("NABLA_CACHE_MAX_BYTES", str(2 * entry))
    removed = c.evict(d)
    assert [p.name[:1] for p in removed] == ["2"]
    assert sorted(p.name[:1] for p in d.glob("*.mef")) == ["1", "3"]
    monkeypatch.setenv("NABLA_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="NABLA_CACHE_MAX_BYTES"):
        c.evict(d)


def test_stale_temporary_files_are_removed(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    old, fresh = d / ".x.mef.1.2.tmp", d / ".y.mef.1.2.tmp"
    old.write_bytes(b"partial")
    fresh.write_bytes(b"being written")
    os.utime(old, (time.time() - 2 * disk.STALE_TMP_SECONDS,) * 2)
    monkeypatch.setenv("NABLA_CACHE_DIR", str(d))
    assert disk.DiskCache().directory() == d
    assert not old.exists() and fresh.exists()


def test_a_world_writable_directory_is_refused(tmp_path, monkeypatch, caplog):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    monkeypatch.setenv("NABLA_CACHE_DIR", str(d))
    c = disk.DiskCache()
    with caplog.at_level(logging.WARNING, logger="nabla.max"):
        assert c.directory() is None
        assert c.directory() is None
    assert caplog.text.count("other users can write it") == 1, "warned once"
    assert f"chmod go-w {d}" in caplog.text
    d.chmod(0o1777)  # the sticky bit (as /tmp) makes it acceptable
    assert disk.DiskCache().directory() == d


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory away")
def test_a_directory_owned_by_another_user_is_refused(tmp_path, monkeypatch, caplog):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 12345, 12345)
    monkeypatch.setenv("NABLA_CACHE_DIR", str(d))
    with caplog.at_level(logging.WARNING, logger="nabla.max"):
        assert disk.DiskCache().directory() is None
    assert "belongs to uid 12345" in caplog.text and "NABLA_CACHE_DIR" in caplog.text


def test_an_unusable_directory_warns_once(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("NABLA_CACHE_DIR", str(blocker / "cache"))
    c = disk.DiskCache()
    with caplog.at_level(logging.WARNING, logger="nabla.max"):
        assert c.directory() is None and c.directory() is None
    assert caplog.text.count("cannot use the compiled-model cache") == 1


def test_a_failed_write_warns_once_and_leaves_nothing(cache, caplog):
    c, d = cache

    class Failing:
        def export_mef(self, path):
            with open(path, "wb") as f:
                f.write(b"half")
            raise OSError("No space left on device")

    with caplog.at_level(logging.WARNING, logger="nabla.max"):
        assert not c.store(d, DIGEST_A, _program(), Failing())
        assert not c.store(d, DIGEST_B, _program(), Failing())
    assert caplog.text.count("cannot write the compiled-model cache") == 1
    assert not list(d.iterdir())


def test_the_entry_lock_serializes_holders(cache):
    import threading

    c, d = cache
    order = []

    def holder(tag):
        with c.locked(DIGEST_A):
            order.append(f"{tag} in")
            time.sleep(0.05)
            order.append(f"{tag} out")

    threads = [threading.Thread(target=holder, args=(t,)) for t in "xy"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order[0][0] == order[1][0] and order[2][0] == order[3][0], order
