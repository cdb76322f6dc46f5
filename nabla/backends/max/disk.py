"""The on-disk cache of compiled MAX models: verified, private, locked and bounded.

A compiled model is native code; a cache entry is loaded only when everything about it checks
out. Layout under the cache directory (``cache_dir()``):

- ``<name>.mef``: the model, written by ``CompiledModel.export_mef``;
- ``<name>.json``: its sidecar: format, the program's full digest, the MAX version, the input
  and output signature (dtypes and shapes, symbolic dims by name), the model's byte count and
  sha256. Both files are written to temporary names and renamed (readers never see a part);
- ``<name>.lock``: the entry's ``fcntl`` lock: one process compiles an entry while the others
  wait for it, then load it;
- ``quarantine/``: entries that failed verification, moved aside (never executed), newest
  ``QUARANTINE_KEEP`` kept;
- ``<kind>/<name>.json``: small notes about a program, such as its executor race's scores
  (``note_path`` in ``__init__.py``; ``runtime/race_records.py`` reads and writes them).

Verification before ``InferenceSession.load``: the sidecar parses and names this program's
digest, MAX version and signature; the model's size and sha256 match. After loading, MAX's own
view of the model's inputs and outputs must match the signature too. A failing entry is
quarantined with the reason logged once, and the caller recompiles.

Who may use the directory: it is created ``0700``; an existing one owned by another user, or
writable by group/others without the sticky bit, is refused with a warning naming the path and
the fix (the process then keeps compiled models in memory only). A directory that cannot be
written gets one warning per process. The cache is bounded: ``NABLA_CACHE_MAX_BYTES`` (default
2 GiB) with least-recently-used eviction (a load refreshes the entry's time). Temporary files
left by a killed writer (here or in a notes' folder) are removed after an hour.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import stat
import threading
import time
from pathlib import Path

from ...core.config import env_int
from .cache import max_version

__all__ = ["DiskCache", "DISK", "signature_of", "max_version"]

LOG = logging.getLogger("nabla.max")
FORMAT = 1
DEFAULT_MAX_BYTES = 2 << 30
QUARANTINE_KEEP = 16
STALE_TMP_SECONDS = 3600.0


def signature_of(program) -> dict:
    """The input/output signature a cache entry must match: dtypes and shapes (a symbolic
    dim by its name)."""

    def shape(s):
        return [d if isinstance(d, str) else int(d) for d in s]

    return {
        "inputs": [[spec.dtype.value, shape(spec.shape)] for spec in program.inputs],
        "outputs": [[dt.value, shape(sh)] for dt, sh in program.output_specs],
    }


def _max_bytes() -> int:
    return env_int("NABLA_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES, 0)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class EntryRejected(Exception):
    """A cache entry failed verification (the message says why)."""


class DiskCache:
    """The process's view of the on-disk cache (directory read from the environment at every
    use, so ``NABLA_CACHE_DIR`` may change, as tests do)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._checked: dict[Path, bool] = {}  # directory -> usable
        self._warned: set = set()

    # ------------------------------------------------------------------ the directory
    @staticmethod
    def default_dir() -> Path:
        return Path.home() / ".cache" / "nabla" / "max"

    def directory(self) -> Path | None:
        """The cache directory when it may be used, else None (after one warning)."""
        env = os.environ.get("NABLA_CACHE_DIR")
        path = Path(env) if env else self.default_dir()
        with self._lock:
            usable = self._checked.get(path)
            if usable is None:
                usable = self._checked[path] = self._check(path)
        return path if usable else None

    def _warn_once(self, key, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            LOG.warning("%s", message)

    def _check(self, path: Path) -> bool:
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = path.stat()
        except OSError as e:
            self._warn_once(
                ("dir", path),
                f"nabla: cannot use the compiled-model cache {path} ({e}); compiled models are "
                "kept in memory only. Set NABLA_CACHE_DIR to a writable directory of your own.",
            )
            return False
        if not stat.S_ISDIR(st.st_mode):
            self._warn_once(("dir", path), f"nabla: the cache path {path} is not a directory")
            return False
        if st.st_uid != os.geteuid():
            self._warn_once(
                ("dir", path),
                f"nabla: not using the compiled-model cache {path}: it belongs to uid "
                f"{st.st_uid}, not to you (uid {os.geteuid()}), and holds native code. Set "
                "NABLA_CACHE_DIR to a directory of your own; compiled models are kept in "
                "memory only meanwhile.",
            )
            return False
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            self._warn_once(
                ("dir", path),
                f"nabla: not using the compiled-model cache {path}: other users can write it, "
                f"and it holds native code. Fix it with: chmod go-w {path}",
            )
            return False
        self._clean_stale(path)
        return True

    @staticmethod
    def _clean_stale(path: Path) -> None:
        now = time.time()
        for tmp in [*path.glob(".*.tmp"), *path.glob("*/.*.tmp")]:  # and notes' folders
            with contextlib.suppress(OSError):
                if now - tmp.stat().st_mtime > STALE_TMP_SECONDS:
                    tmp.unlink()

    # ------------------------------------------------------------------ entries
    @staticmethod
    def _paths(directory: Path, name: str) -> tuple[Path, Path]:
        return directory / f"{name}.mef", directory / f"{name}.json"

    def has(self, digest: str) -> bool:
        directory = self.directory()
        return directory is not None and self._paths(directory, digest[:40])[0].exists()

    @contextlib.contextmanager
    def locked(self, digest: str):
        """Hold the entry's lock (other processes wanting it wait); yields the directory, or
        None when the disk cache is not usable (then nothing is locked)."""
        directory = self.directory()
        if directory is None:
            yield None
            return
        try:
            fd = os.open(directory / f"{digest[:40]}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        except OSError:
            yield directory  # a read-only directory: load without the lock, never write
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield directory
        finally:
            os.close(fd)  # closing releases the lock

    def load(self, directory: Path, digest: str, program, loader):
        """The verified model of ``digest`` (``loader(path)`` does the loading), or None when
        there is no entry or it was rejected (then it is quarantined)."""
        mef, side = self._paths(directory, digest[:40])
        if not mef.exists():
            return None
        try:
            self._verify(mef, side, digest, program)
            model = loader(str(mef))
            self._verify_loaded(model, program)
        except EntryRejected as e:
            self.quarantine(directory, digest, str(e))
            return None
        except Exception as e:  # noqa: BLE001 - MAX could not load it: never trust it again
            self.quarantine(directory, digest, f"MAX could not load it: {e}")
            return None
        with contextlib.suppress(OSError):
            os.utime(mef)  # least recently used eviction reads this
        return model

    @staticmethod
    def _verify(mef: Path, side: Path, digest: str, program) -> None:
        try:
            meta = json.loads(side.read_text())
        except FileNotFoundError:
            raise EntryRejected("it has no sidecar") from None
        except (OSError, ValueError) as e:
            raise EntryRejected(f"its sidecar is unreadable ({e})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise EntryRejected("its sidecar has an unknown format")
        if meta.get("digest") != digest:
            raise EntryRejected("it belongs to another program (digest mismatch)")
        if meta.get("max") != max_version():
            raise EntryRejected(f"it was built by MAX {meta.get('max')}, not {max_version()}")
        if meta.get("signature") != signature_of(program):
            raise EntryRejected("its input/output signature differs from the program's")
        size = mef.stat().st_size
        if meta.get("bytes") != size:
            raise EntryRejected(f"its size is {size} bytes, the sidecar says {meta.get('bytes')}")
        if meta.get("sha256") != _sha256(mef):
            raise EntryRejected("its checksum does not match (the file was altered)")

    @staticmethod
    def _verify_loaded(model, program) -> None:
        def matches(specs, expected):
            if len(specs) != len(expected):
                return False
            for spec, (dt, shape) in zip(specs, expected):
                if str(spec.dtype).rsplit(".", 1)[-1] != dt or len(spec.shape) != len(shape):
                    return False
                for d, want in zip(spec.shape, shape):
                    if isinstance(want, int) and isinstance(d, int) and d != want:
                        return False
            return True

        sig = signature_of(program)
        if not matches(model.input_metadata, sig["inputs"]) or not matches(
            model.output_metadata, sig["outputs"]
        ):
            raise EntryRejected("the loaded model's inputs/outputs differ from the program's")

    def quarantine(self, directory: Path, digest: str, reason: str) -> None:
        """Move an entry aside (never executed) and log why, once per entry."""
        name = digest[:40]
        qdir = directory / "quarantine"
        stamp = f"{time.time():.6f}"
        with contextlib.suppress(OSError):
            qdir.mkdir(mode=0o700, exist_ok=True)
            for p in self._paths(directory, name):
                if p.exists():
                    os.replace(p, qdir / f"{p.stem}.{stamp}{p.suffix}")
            kept = sorted(qdir.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
            for p in kept[2 * QUARANTINE_KEEP :]:
                p.unlink()
        self._warn_once(
            ("quarantine", name),
            f"nabla: cached MAX model {directory / name}.mef was rejected and moved to "
            f"{qdir}: {reason}. Recompiling.",
        )

    def store(self, directory: Path, digest: str, program, compiled) -> bool:
        """Write ``compiled`` and its sidecar atomically, then keep the cache under its size
        bound. False (after one warning per process) when the directory cannot be written."""
        mef, side = self._paths(directory, digest[:40])
        tag = f"{os.getpid()}.{threading.get_ident()}"
        tmp_mef = directory / f".{mef.name}.{tag}.tmp"
        tmp_side = directory / f".{side.name}.{tag}.tmp"
        try:
            compiled.export_mef(str(tmp_mef))
            meta = {
                "format": FORMAT,
                "digest": digest,
                "max": max_version(),
                "signature": signature_of(program),
                "bytes": tmp_mef.stat().st_size,
                "sha256": _sha256(tmp_mef),
            }
            tmp_side.write_text(json.dumps(meta))
            os.replace(tmp_mef, mef)
            os.replace(tmp_side, side)
        except Exception as e:  # noqa: BLE001 - a read-only or full disk must not break a run
            for tmp in (tmp_mef, tmp_side):
                with contextlib.suppress(OSError):
                    tmp.unlink()
            self._warn_once(
                ("write", directory),
                f"nabla: cannot write the compiled-model cache {directory} ({e}); compiled "
                "models of this process are kept in memory only.",
            )
            return False
        self.evict(directory, keep=mef)
        return True

    @staticmethod
    def evict(directory: Path, keep: Path | None = None) -> list[Path]:
        """Remove least recently used entries until the cache fits ``NABLA_CACHE_MAX_BYTES``;
        returns the models removed."""
        limit = _max_bytes()
        entries = []
        total = 0
        for mef in directory.glob("*.mef"):
            with contextlib.suppress(OSError):
                side = mef.with_suffix(".json")
                st = mef.stat()
                size = st.st_size + (side.stat().st_size if side.exists() else 0)
                entries.append((st.st_mtime, mef, size))
                total += size
        removed = []
        for _, mef, size in sorted(entries, key=lambda e: e[0]):
            if total <= limit:
                break
            if mef == keep:
                continue
            for p in (mef, mef.with_suffix(".json"), mef.with_suffix(".lock")):
                with contextlib.suppress(OSError):
                    p.unlink()
            total -= size
            removed.append(mef)
        return removed


DISK = DiskCache()
