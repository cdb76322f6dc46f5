"""Checkpoints as safetensors files: ``save(state_dict, path)`` and ``load(path)``.

A checkpoint is a flat mapping name -> tensor (``model.state_dict()``, ``opt.state_dict()``, or
both merged under prefixes with :func:`merge_state_dicts`). Values round-trip bit for bit,
``bfloat16`` included. Writing goes to a temporary file that replaces ``path`` only once it is
complete, so an interrupted save never leaves a truncated checkpoint (the next save removes
such a leftover once its process is gone); reading checks the whole file before returning
anything.
"""

from __future__ import annotations

import contextlib
import errno
import json
import numbers
import os
import struct
from collections import OrderedDict
from collections.abc import Mapping

import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy

from ..ops import creation
from ..runtime.tensor import Tensor, realize

__all__ = ["load", "load_metadata", "merge_state_dicts", "save", "split_state_dict"]

# safetensors dtype names -> NumPy dtypes (the NumPy reader of safetensors lacks BF16)
_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U64": np.uint64,
    "U32": np.uint32,
    "U16": np.uint16,
    "U8": np.uint8,
    "BOOL": np.bool_,
}


def save(state_dict: Mapping, path, metadata: Mapping | None = None) -> None:
    """Write ``state_dict`` to ``path`` as a safetensors file.

    Args:
        state_dict: a mapping str -> Tensor (or NumPy array).
        path: the file to write (replaced atomically).
        metadata: optional str -> str annotations stored in the header.

    Raises:
        TypeError: for a ``state_dict`` that is not a mapping (a module's ``state_dict()``:
            name -> tensor), a key that is not a string or a value that is not a tensor or
            array.
        OSError: (``FileNotFoundError`` for a missing folder) naming ``path`` when it cannot
            be written.
    """
    if not isinstance(state_dict, Mapping):  # (it read "'list' object has no attribute")
        hint = " (a Module: pass module.state_dict())" if hasattr(state_dict, "state_dict") else ""
        raise TypeError(
            f"save: expects a mapping of names to tensors, got {type(state_dict).__name__}{hint}"
        )
    names, values = [], []
    for name, value in state_dict.items():
        if not isinstance(name, str):
            raise TypeError(f"save: keys must be strings, got {name!r}")
        if not isinstance(value, Tensor | np.ndarray):
            kind = type(value)
            shown = kind.__qualname__
            if kind.__module__ != "builtins":
                shown = f"{kind.__module__}.{shown}"
            hint = (
                "; a training checkpoint of several state dicts (PyTorch's {'epoch': ..., "
                "'model_state_dict': ..., 'optimizer_state_dict': ...}) is one flat state "
                "dict: nn.merge_state_dicts(model=..., optimizer=...), numbers as 0-d arrays "
                "(np.asarray(epoch)), or pickle it"
                if isinstance(value, Mapping | numbers.Number)
                else " (convert another framework's with nb.asarray)"
            )
            raise TypeError(
                f"save: {name!r} is a {shown}; a checkpoint holds nabla tensors and NumPy "
                f"arrays{hint}"
            )
        if isinstance(value, np.ndarray):
            check_storable("save", name, value.dtype)
        names.append(name)
        values.append(value)
    realize(*[v for v in values if isinstance(v, Tensor)])  # one evaluation for all of them
    arrays = {
        # np.asarray keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d)
        n: np.asarray(v.numpy() if isinstance(v, Tensor) else v, order="C")
        for n, v in zip(names, values)
    }
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    data = safetensors.numpy.save(arrays, metadata=meta or None)
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            errno.ENOENT, f"save: cannot write the checkpoint {path!r}: no folder {folder!r}"
        )
    _remove_orphans(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename: a crash leaves old or new
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):  # a failed write leaves no partial file behind
            os.remove(tmp)
        if isinstance(e, OSError) and e.errno is not None:  # name the path given, not tmp
            raise type(e)(
                e.errno, f"save: cannot write the checkpoint {path!r}: {e.strerror}"
            ) from None
        raise


def check_storable(op: str, name: str, dtype: np.dtype) -> None:
    """A NumPy array's dtype is one safetensors holds: bool, integers, float16/32/64 and
    bfloat16 (not strings, objects, complex numbers or dates)."""
    if dtype.kind in "biu" or (dtype.kind == "f" and dtype.itemsize <= 8):
        return
    if dtype.name == "bfloat16":
        return
    raise TypeError(
        f"{op}: {name!r} is a NumPy array of {dtype}; a checkpoint holds arrays of bool, "
        "integers, float16/32/64 and bfloat16"
    )


def _remove_orphans(path: str) -> None:
    """Remove ``path``'s temporary files (``path.tmp-PID``) left by an interrupted save of a
    process that is gone; a live process's file (it may be saving now) is left alone."""
    folder, base = os.path.split(path)
    prefix = base + ".tmp-"
    with contextlib.suppress(OSError), os.scandir(folder or ".") as entries:
        for entry in entries:
            pid = entry.name[len(prefix) :]
            if entry.name.startswith(prefix) and pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.remove(entry.path)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (signal 0 probes without sending)."""
    if pid == os.getpid() or os.name != "posix":  # (Windows' os.kill would end it)
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OverflowError, OSError):
        return True  # another user's process, or a PID we cannot probe: keep its file
    return True


def _read(path) -> bytes:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"load: no checkpoint at {path!r}")
    with open(path, "rb") as f:
        return f.read()


def load(path) -> OrderedDict:
    """Read a safetensors file written by :func:`save` (or any safetensors file).

    Args:
        path: the file.

    Returns:
        An ``OrderedDict`` name -> Tensor, sorted by name.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if the file is truncated, corrupt or holds an unsupported dtype.
    """
    data = _read(path)
    try:
        entries = safetensors.deserialize(data)
    except Exception as e:  # SafetensorError and malformed headers alike
        raise ValueError(f"load: {os.fspath(path)!r} is not a valid safetensors file: {e}") from e
    out = OrderedDict()
    for name, info in sorted(entries, key=lambda e: e[0]):
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(
                f"load: {name!r} in {os.fspath(path)!r} has unsupported dtype {info['dtype']}"
            )
        array = np.frombuffer(bytes(info["data"]), dtype=dtype).reshape(info["shape"])
        out[name] = creation.constant(array.copy())
    return out


def load_metadata(path) -> dict:
    """The str -> str metadata stored in a safetensors file's header.

    Args:
        path: the file.

    Returns:
        A dict (empty when the file has none).

    Raises:
        ValueError: if the header cannot be read.
    """
    data = _read(path)
    try:
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + n])
    except Exception as e:
        raise ValueError(f"load_metadata: {os.fspath(path)!r} has no readable header: {e}") from e
    return dict(header.get("__metadata__", {}))


def merge_state_dicts(**parts: Mapping) -> OrderedDict:
    """One flat state dict from named parts: ``merge_state_dicts(model=m.state_dict(),
    optimizer=opt.state_dict())`` has keys ``"model.<name>"`` and ``"optimizer.<name>"``.

    Args:
        parts: prefix -> state dict.

    Returns:
        An ``OrderedDict``.
    """
    out = OrderedDict()
    for prefix, sd in parts.items():
        for k, v in sd.items():
            out[f"{prefix}.{k}"] = v
    return out


def split_state_dict(state_dict: Mapping, prefix: str) -> OrderedDict:
    """The entries of ``state_dict`` under ``prefix + "."``, with the prefix removed (the
    inverse of :func:`merge_state_dicts` for one part).

    Args:
        state_dict: a flat state dict.
        prefix: the part's name.

    Returns:
        An ``OrderedDict``.
    """
    head = prefix + "."
    return OrderedDict((k[len(head) :], v) for k, v in state_dict.items() if k.startswith(head))
