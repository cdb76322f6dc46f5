"""Sharded checkpoints: ``save_sharded(state, directory)`` and ``load_sharded(directory, like)``.

A checkpoint is a directory. Every process writes only the blocks of the tensors its devices
own (a block held by several devices, a replicated value, is written once, by the device
with replica id 0), as one safetensors file per process; one index (``index.json``) lists
every value of the state pytree by its path (``model.0.weight``, ``opt.mu.2``, ``step``): a
tensor's global shape, dtype, mesh and spec, and which file holds each block; Python values
(step counters, learning rates) are stored in the index itself.

    ckpt/
      index.json                              the commit: written last, renamed into place
      data-<save id>/process-00000-of-00002.safetensors
      data-<save id>/process-00001-of-00002.safetensors

Atomic: a save writes its files into a new ``data-<save id>`` folder, waits for every
process (a barrier), then process 0 writes the index next to it and renames it over the old
one, so a checkpoint becomes visible only once every process has finished. A kill at any
moment leaves the previous index and the folder it names intact; the next save removes the
folders no index names (leftovers of an interrupted save) and, after its commit, the one the
previous index named. Only folders a save made are ever removed: named exactly
``data-<save id>`` and holding the save's mark file, so other files in the directory stay;
a directory whose ``index.json`` is not a checkpoint's is refused. Partial sums are
completed before saving (a collective).

Loading reads only what this process needs: ``like`` (a pytree of the same structure) gives
each tensor's layout, on any mesh and process count; for each of its devices a process
reads, from each stored block that overlaps that device's block, only the overlap (memory
mapped byte ranges), and builds its blocks directly, with no process holding a whole value
it does not own. With one process and a simulated mesh it is the same code, one file.

Every process must call both (they are collectives over processes); the directory must be
one every process sees (one host, or a shared file system).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import os
import re
import shutil
import struct
import time
from typing import NamedTuple

import numpy as np
import safetensors
import safetensors.numpy

from ..backends import mpi
from ..core.device import get_default_device
from ..core.dtypes import DType
from ..core.pytree import keystr, tree_flatten_with_path, tree_unflatten
from ..core.sharding import PROCESS, DeviceMesh, ShardingSpec
from ..ops import creation
from ..ops.collectives import complete_partial
from ..runtime.tensor import Tensor, realize
from .checkpoint import check_storable

__all__ = ["save_sharded", "load_sharded"]

FORMAT = "nabla.sharded_checkpoint"
VERSION = 1
INDEX = "index.json"
_DATA = "data-"
# A data folder's name is exactly ``data-<save id>``, and the folder holds ``_MARK``: only
# such folders are ever removed, so a user's own ``data-raw/`` beside a checkpoint stays.
_DATA_NAME = re.compile(r"data-\d{8}-\d{6}-\d+-\d{9}")
_MARK = ".nabla-checkpoint-data"
_SCALARS = (bool, int, float, str, type(None))


class _Block(NamedTuple):
    """One stored block of a tensor: where it starts in the global value, its shape, and
    the flat mesh device that owns it (its process writes it)."""

    start: tuple
    shape: tuple
    device: int


def _blocks(spec: ShardingSpec | None, shape: tuple) -> list:
    """Every distinct block of a value of global ``shape`` laid out as ``spec`` (partial
    axes completed), each with the device that owns it: the one holding it with replica id
    0 (coordinate 0 along every mesh axis no dim is split over)."""
    if spec is None:
        return [_Block((0,) * len(shape), tuple(shape), 0)]
    mesh = spec.mesh
    local = spec.local_shape(shape)
    out = []
    for index in itertools.product(*(range(spec.splits(d)) for d in range(len(shape)))):
        coords = [0] * mesh.ndim
        for d, axes in enumerate(spec.dims):
            b = index[d]
            for a in reversed(axes):  # block i_a * size_b + i_b is on (.., i_a, .., i_b, ..)
                k = mesh.axis(a)
                coords[k] = b % mesh.shape[k]
                b //= mesh.shape[k]
        device = int(np.ravel_multi_index(coords, mesh.shape))
        start = tuple(i * n for i, n in zip(index, local, strict=True))
        out.append(_Block(start, tuple(local), device))
    return out


def _owner(spec: ShardingSpec | None, block: _Block) -> int:
    """The process that writes ``block``."""
    return 0 if spec is None else spec.mesh.process_of(block.device)


def _key(name: str, start: tuple) -> str:
    return f"{name}@{','.join(map(str, start))}"


def _file(process: int, count: int) -> str:
    return f"process-{process:05d}-of-{count:05d}.safetensors"


def _names(state, op: str) -> list:
    """``(name, leaf)`` for every leaf of ``state``, named by its path; an error naming the
    path for a leaf a checkpoint cannot hold, or two paths with one name."""
    out, seen = [], set()
    for path, leaf in tree_flatten_with_path(state)[0]:
        name = keystr(path, simple=True, separator=".") or "value"
        if name in seen:
            raise ValueError(f"{op}: two values of the state are both named {name!r}")
        seen.add(name)
        if not isinstance(leaf, (Tensor, np.ndarray, np.generic, *_SCALARS)):
            raise TypeError(
                f"{op}: {name!r} is a {type(leaf).__name__}; a checkpoint holds tensors, "
                "NumPy arrays and Python scalars (bool, int, float, str, None)"
            )
        out.append((name, leaf))
    return out


# ----------------------------------------------------------------------------- save
def save_sharded(state, directory) -> None:
    """Save a pytree of (sharded) tensors, arrays and Python scalars as a sharded checkpoint.

    Every process calls it with the same structure; each writes only the blocks its devices
    own, replicated values once. Partial sums are completed first. Atomic across processes:
    the checkpoint in ``directory`` is replaced only once every process has written its
    part (see the module docstring), so a kill at any moment leaves the previous one
    loadable.

    Args:
        state: a pytree (dicts, lists, modules, optimizer states) whose leaves are Tensors,
            NumPy arrays or Python scalars (step counters and RNG keys included, so a
            resumed run continues exactly).
        directory: the checkpoint's folder (made if missing; parent folders too).

    Raises:
        TypeError: naming the path of a leaf that is not a tensor, array or scalar.
        ValueError: when two paths of ``state`` give one name, or ``directory`` holds an
            ``index.json`` that is not a checkpoint's.
        OSError: naming the path that cannot be written, or the folder a process does not
            see (``directory`` must be one every process sees).
        DistributedError: on every process, naming the first path where the processes'
            states differ (structure, shape, dtype, layout, a scalar's or a NumPy array's
            value), or when they pass different directories.
    """
    op = "save_sharded"
    directory = os.fspath(directory)
    leaves = _names(state, op)
    tensors = [
        complete_partial(v) if isinstance(v, Tensor) and _partial(v) else v for _, v in leaves
    ]
    realize(*[t for t in tensors if isinstance(t, Tensor)])  # one evaluation for them all
    me, count = PROCESS.index, PROCESS.count
    entries, mine = {}, {}
    for (name, _), value in zip(leaves, tensors, strict=True):
        if isinstance(value, _SCALARS) and not isinstance(value, np.generic):
            entries[name] = {"kind": type(value).__name__, "value": value}
            continue
        if isinstance(value, np.ndarray | np.generic):  # (np.float64 is a float too)
            array = np.asarray(value)
            check_storable(op, name, array.dtype)
            entries[name] = _tensor_entry(name, array.shape, str(array.dtype), None, count)
            entries[name]["kind"] = "ndarray"
            if me == 0:  # stored in native byte order (safetensors has no other)
                native = array.astype(array.dtype.newbyteorder("="), copy=False)
                mine[_key(name, (0,) * array.ndim)] = np.ascontiguousarray(native)
            continue
        impl = value._impl
        if impl.levels:
            raise ValueError(f"{op}: {name!r} is batched by vmap; save outside vmap")
        spec = impl.sharding
        entries[name] = _tensor_entry(name, tuple(impl.shape), impl.dtype.value, spec, count)
        held = None
        for block in _blocks(spec, tuple(impl.shape)):
            if _owner(spec, block) != me:
                continue
            if held is None:
                held = {s.device: s.data for s in value.addressable_shards}
            data = held[block.device] if spec is not None else value.numpy()
            mine[_key(name, block.start)] = np.ascontiguousarray(data)
    index = {"format": FORMAT, "version": VERSION, "processes": count, "entries": entries}
    if count > 1:  # every process must save the same structure, shapes, layouts and values
        lines = {n: json.dumps(e, sort_keys=True, default=str) for n, e in entries.items()}
        for name, value in zip((n for n, _ in leaves), tensors, strict=True):
            if isinstance(value, np.ndarray | np.generic):  # (kept by process 0 only)
                data = np.ascontiguousarray(value).tobytes()
                lines[name] += f" values {hashlib.sha256(data).hexdigest()[:32]}"
        _agree(op, directory, lines)
    token = mpi.broadcast_object(
        f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{time.time_ns() % 10**9:09d}",
        f"{op} {directory!r}: the save's name",
    )
    data_dir = os.path.join(directory, _DATA + token)
    if me == 0:
        _guard(op, directory, lambda: os.makedirs(directory, exist_ok=True))
        _remove_leftovers(directory, keep=_committed_data(directory, op))
        _guard(op, data_dir, lambda: _make_data_dir(data_dir))
    mpi.barrier(f"{op} {directory!r}: folder made")
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(
            errno.ENOENT,
            f"{op}: process {me} does not see the folder {data_dir!r} process 0 made: the "
            "checkpoint directory must be one every process sees (one host, or a shared "
            "file system), by the same path",
        )
    if mine:
        path = os.path.join(data_dir, _file(me, count))
        _guard(op, path, lambda: _write_file(path, mine))
    mpi.barrier(f"{op} {directory!r}: every process wrote its blocks")
    if me == 0:
        old = _committed_data(directory, op)
        index["data"] = _DATA + token
        _guard(op, directory, lambda: _commit_index(directory, index))
        if old is not None and old != index["data"] and _ours(os.path.join(directory, old)):
            _remove_data(os.path.join(directory, old))
    mpi.barrier(f"{op} {directory!r}: committed")


def _partial(t: Tensor) -> bool:
    spec = t._impl.sharding
    return spec is not None and bool(spec.partial)


def _tensor_entry(name, shape, dtype, spec, count) -> dict:
    """The index's record of one tensor: its global shape and dtype, mesh and spec, and
    where each of its blocks is."""
    entry = {"kind": "tensor", "shape": list(shape), "dtype": dtype, "mesh": None, "spec": None}
    if spec is not None:
        mesh = spec.mesh
        entry["mesh"] = {
            "name": mesh.name,
            "shape": list(mesh.shape),
            "axes": list(mesh.axis_names),
        }
        entry["spec"] = [list(axes) for axes in spec.dims]
    entry["blocks"] = [
        {
            "file": _file(_owner(spec, b), count),
            "key": _key(name, b.start),
            "start": list(b.start),
            "shape": list(b.shape),
        }
        for b in _blocks(spec, tuple(shape))
    ]
    return entry


def _guard(op: str, path: str, fn):
    """Run ``fn``; an OSError names ``path`` and ``op``."""
    try:
        return fn()
    except OSError as e:
        raise type(e)(e.errno, f"{op}: cannot write {path!r}: {e.strerror}") from None


def _write_file(path: str, arrays: dict) -> None:
    """One process's blocks as a safetensors file, flushed to disk before the commit."""
    try:
        safetensors.numpy.save_file(arrays, path)  # straight to the file, no bytes between
    except safetensors.SafetensorError as e:  # (its I/O errors are not OSErrors)
        raise OSError(errno.EIO, str(e)) from None
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _commit_index(directory: str, index: dict) -> None:
    """Write the index beside the data and rename it into place: the one atomic step."""
    tmp = os.path.join(directory, f"{INDEX}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(index, f, separators=(",", ":"), sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, INDEX))
    with contextlib.suppress(OSError):  # make the rename itself durable where supported
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _make_data_dir(path: str) -> None:
    os.makedirs(path)
    with open(os.path.join(path, _MARK), "w"):
        pass


def _remove_data(folder: str) -> None:
    """Remove a data folder a save made, its mark last: a kill midway leaves the rest still
    marked as ours, for the next save to remove (``shutil.rmtree`` may take the mark
    first, and then no save would ever claim the folder again)."""
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if entry.name == _MARK:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(entry.path)
    with contextlib.suppress(OSError):
        os.remove(os.path.join(folder, _MARK))
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def _ours(folder: str) -> bool:
    """Whether ``folder`` (a path) is a data folder a save made: its name and its mark."""
    name = os.path.basename(folder)
    return _DATA_NAME.fullmatch(name) is not None and os.path.isfile(os.path.join(folder, _MARK))


def _committed_data(directory: str, op: str) -> str | None:
    """The data folder the committed index names (None without an index, or with one that
    an interrupted write left unreadable). A readable ``index.json`` that is not a
    checkpoint's is another program's file: refused, not overwritten."""
    path = os.path.join(directory, INDEX)
    try:
        with open(path) as f:
            index = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError(
            f"{op}: {directory!r} holds an {INDEX} that is not a {FORMAT} index; save the "
            "checkpoint into its own folder"
        )
    data = index.get("data")
    return data if isinstance(data, str) and _DATA_NAME.fullmatch(data) else None


def _remove_leftovers(directory: str, keep: str | None) -> None:
    """Remove what interrupted saves left: data folders no index names (only folders a
    save made: ``_ours``), index temp files."""
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if entry.name != keep and entry.is_dir() and _ours(entry.path):
                _remove_data(entry.path)
            elif re.fullmatch(rf"{re.escape(INDEX)}\.tmp-\d+", entry.name):
                with contextlib.suppress(OSError):
                    os.remove(entry.path)


# ----------------------------------------------------------------------------- load
def load_sharded(directory, like):
    """Load a checkpoint written by :func:`save_sharded`, laid out as ``like``.

    Every process calls it. ``like`` has the structure of the saved state; each of its
    tensors gives the layout the loaded value gets (its mesh and spec, or unsharded), on any
    mesh and any process count, whatever the layout it was saved with. Each process reads
    only the parts of the stored blocks its own devices need. One tensor in several places
    of ``like`` (a module used twice: tied weights) is loaded once, from its first path, and
    stays one tensor in all of them.

    Args:
        directory: the checkpoint's folder.
        like: a pytree of the saved structure: Tensors (their shape, dtype and layout),
            NumPy arrays and scalars, and Python scalars (placeholders of the saved kind:
            the saved values come back, a NumPy scalar as one).

    Returns:
        A pytree of ``like``'s structure holding the saved values.

    Raises:
        FileNotFoundError: when ``directory`` holds no committed checkpoint.
        KeyError: listing the paths ``like`` has that the checkpoint lacks, and the reverse.
        ValueError: naming a path whose shape or dtype differs from ``like``'s, or the
            index or data file that is unreadable, truncated or not a checkpoint's.
        TypeError: naming a path where ``like`` has another kind of leaf than was saved
            (a tensor, a NumPy array or scalar, a Python scalar), or a NumPy integer
            placeholder for a saved value it would truncate.
        DistributedError: on every process, naming the first path where the processes'
            ``like`` differ (kind, shape, dtype or layout).
    """
    op = "load_sharded"
    directory = os.fspath(directory)
    index = _read_index(directory, op)
    entries = index["entries"]
    leaves = _names(like, op)
    names = [n for n, _ in leaves]
    missing = sorted(set(names) - set(entries))
    extra = sorted(set(entries) - set(names))
    if missing or extra:
        raise KeyError(
            f"{op}: the checkpoint in {directory!r} does not match the structure of `like`: "
            f"missing from the checkpoint {missing}, not in `like` {extra}"
        )
    if PROCESS.count > 1:  # a collective: every process must load into the same layouts
        _agree(op, directory, {n: _layout(leaf) for n, leaf in leaves})
    files = _Files(os.path.join(directory, index["data"]), op)
    out, loaded = [], {}
    try:
        for name, leaf in leaves:
            # one tensor in several places of `like` (tied weights) is loaded once, from its
            # first path, and stays one tensor: one parameter, updated once
            key = id(leaf) if isinstance(leaf, Tensor) else None
            if key not in loaded:
                value = _load_leaf(op, name, leaf, entries[name], files)
                if key is None:
                    out.append(value)
                    continue
                loaded[key] = value
            out.append(loaded[key])
    finally:
        files.close()
    return tree_unflatten(tree_flatten_with_path(like)[1], out)


def _layout(leaf) -> str:
    """What a process loads a leaf of `like` as: its kind, and a tensor's shape, dtype and
    layout (every process must give the same)."""
    if not isinstance(leaf, Tensor):
        return type(leaf).__name__
    spec = leaf._impl.sharding
    where = "unsharded" if spec is None else f"{spec.mesh.name}{tuple(spec.mesh.shape)} {spec}"
    return f"Tensor {tuple(leaf.shape)} {leaf.dtype.value} {where}"


def _agree(op: str, directory: str, lines: dict) -> None:
    """Every process is at this save or load with the same ``lines`` (a path's record
    each): one agreement on their digest; a difference is an error naming the first path
    that differs, as each process has it."""
    text = "\n".join(f"{name}: {line}" for name, line in lines.items())
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    mpi.agree(
        f"{op} {directory!r} (structure, shapes, layouts and values: digest {digest})",
        lambda: [f"{name}: {line}" for name, line in lines.items()],
    )


def _read_index(directory: str, op: str) -> dict:
    path = os.path.join(directory, INDEX)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{op}: no committed checkpoint in {directory!r} (no {INDEX}; a save that was "
            "interrupted before its commit leaves none)"
        )
    try:
        with open(path) as f:
            index = json.load(f)
    except ValueError as e:
        raise ValueError(f"{op}: {path!r} is not a readable checkpoint index: {e}") from None
    got = index if isinstance(index, dict) else {}
    if got.get("format") != FORMAT or got.get("version") != VERSION:
        raise ValueError(
            f"{op}: {path!r} is not a {FORMAT} index of version {VERSION} "
            f"(format {got.get('format')!r}, version {got.get('version')!r})"
        )
    data = index.get("data")
    if not isinstance(data, str) or _DATA_NAME.fullmatch(data) is None:
        raise ValueError(f"{op}: {path!r} names no data folder of this checkpoint ({data!r})")
    return index


def _load_leaf(op, name, leaf, entry, files):
    kind = entry["kind"]
    if kind == "ndarray" and entry["shape"] == [] and isinstance(leaf, bool | int | float):
        leaf = np.zeros((), entry["dtype"])[()]  # a NumPy scalar saved (np.float64 is a float)
    _check_kind(op, name, leaf, kind, entry)
    if kind not in ("tensor", "ndarray"):
        value = entry["value"]
        if not isinstance(leaf, np.generic):
            return value
        try:
            got = type(leaf)(value)
        except (TypeError, ValueError, OverflowError):
            got = None
        # an integer placeholder never truncates: 2.7 into an np.int64 is refused
        if got is None or (isinstance(got, np.integer | np.bool_) and got != value):
            raise TypeError(
                f"{op}: {name!r} was saved as the {kind} {value!r}, which a NumPy "
                f"{type(leaf).__name__} placeholder cannot hold; give a placeholder of the "
                "saved kind"
            )
        return got
    shape, dtype = tuple(entry["shape"]), entry["dtype"]
    if isinstance(leaf, Tensor):
        want = (tuple(leaf.shape), leaf.dtype.value)
    elif isinstance(leaf, np.ndarray | np.generic):
        want = (np.shape(leaf), str(np.asarray(leaf).dtype))
    else:
        want = None
    if want is not None and want != (shape, dtype):
        raise ValueError(
            f"{op}: {name!r} was saved with shape {shape} and dtype {dtype}, but `like` has "
            f"shape {want[0]} and dtype {want[1]}"
        )
    np_dtype = DType(dtype).numpy if kind == "tensor" else np.dtype(dtype)
    native = np_dtype.newbyteorder("=")  # (as stored)
    stored = [(b["file"], b["key"], tuple(b["start"]), tuple(b["shape"])) for b in entry["blocks"]]

    def region(sel: tuple) -> np.ndarray:
        return _read_region(files, stored, sel, shape, native)

    whole = tuple(slice(0, n) for n in shape)
    if not isinstance(leaf, Tensor):
        array = region(whole).astype(np_dtype, copy=False)
        return array[()] if isinstance(leaf, np.generic) else array
    spec = leaf._impl.sharding
    if spec is None:
        out = creation.constant(region(whole), dtype=leaf.dtype)
    else:
        if spec.partial:  # the loaded value is whole: its terms are already summed
            spec = spec.with_partial(())
        out = _build_sharded(spec, shape, leaf.dtype, region)
    if leaf._impl.requires_grad:  # a trainable placeholder (a parameter) gives one
        out.requires_grad = True
    return out


def _check_kind(op, name, leaf, kind, entry) -> None:
    """A placeholder of ``like`` is what was saved there: a tensor for a tensor, a NumPy
    array or scalar for an array, a Python scalar (or a NumPy scalar) for a scalar."""
    if isinstance(leaf, Tensor):
        ok = kind == "tensor"
    elif isinstance(leaf, np.ndarray):
        ok = kind == "ndarray"
    elif isinstance(leaf, np.generic):  # a NumPy scalar: saved as one, or as a Python scalar
        ok = kind != "tensor"
    else:
        ok = kind not in ("tensor", "ndarray")
    if not ok:
        scalar = kind == "ndarray" and entry.get("shape") == []
        saved = {
            "tensor": "a tensor",
            "ndarray": "a NumPy scalar" if scalar else "a NumPy array",
            "int": "an int",
        }.get(kind, f"a {kind}")
        raise TypeError(
            f"{op}: {name!r} was saved as {saved}, but `like` has a {type(leaf).__name__} "
            "there; give a placeholder of the saved kind"
        )


def _build_sharded(spec: ShardingSpec, shape: tuple, dtype: DType, region) -> Tensor:
    """A tensor laid out as ``spec`` whose blocks on this process's devices are read with
    ``region`` (one read per distinct block: replicas share it)."""
    mesh: DeviceMesh = spec.mesh
    local = spec.local_shape(shape)
    slab = np.empty(mesh.local_mesh_shape + tuple(local), dtype=dtype.numpy)
    origin = [o for o, _ in mesh.local_box] if mesh.spans_processes else [0] * mesh.ndim
    read: dict = {}
    for d in mesh.local_devices:
        sel = spec.block_index(d, shape)
        key = tuple((s.start, s.stop) for s in sel)
        if key not in read:
            read[key] = region(sel)
        coords = mesh.coords(d)
        slab[tuple(c - o for c, o in zip(coords, origin, strict=True))] = read[key]
    return Tensor._from_buffer(tuple(shape), dtype, get_default_device(), slab, spec)


def _read_region(files, stored, sel, shape, dtype) -> np.ndarray:
    """The part ``sel`` (slices with start and stop) of the global value, copied from the
    stored blocks that overlap it (each read as a memory map: only those bytes are read)."""
    sel = tuple(slice(*s.indices(n)[:2]) for s, n in zip(sel, shape, strict=True))
    out = np.empty(tuple(s.stop - s.start for s in sel), dtype=dtype)
    for file, key, start, bshape in stored:
        lo = [max(s.start, b) for s, b in zip(sel, start, strict=True)]
        hi = [min(s.stop, b + n) for s, b, n in zip(sel, start, bshape, strict=True)]
        if any(h <= low for low, h in zip(lo, hi, strict=True)):
            continue
        src = tuple(slice(low - b, h - b) for low, h, b in zip(lo, hi, start, strict=True))
        dst = tuple(
            slice(low - s.start, h - s.start) for low, h, s in zip(lo, hi, sel, strict=True)
        )
        out[dst] = files.array(file, key, bshape, dtype)[src]
    return out


class _Files:
    """The safetensors files of one checkpoint, opened on demand: each file's header read
    once, each block memory mapped (nothing is read until sliced)."""

    def __init__(self, folder: str, op: str):
        self.folder, self.op = folder, op
        self.headers: dict = {}

    def array(self, file: str, key: str, shape: tuple, dtype) -> np.ndarray:
        path = os.path.join(self.folder, file)
        header = self.headers.get(file)
        if header is None:
            header = self.headers[file] = _header(path, self.op)
        base, entries = header
        info = entries.get(key)
        if info is None:
            raise ValueError(f"{self.op}: {path!r} lacks the block {key!r} its index names")
        begin, end = info["data_offsets"]
        if end - begin != int(np.prod(shape)) * np.dtype(dtype).itemsize:
            raise ValueError(f"{self.op}: the block {key!r} in {path!r} has the wrong size")
        if begin == end:
            return np.zeros(shape, dtype=dtype)
        try:
            return np.memmap(path, dtype=dtype, mode="r", offset=base + begin, shape=shape)
        except ValueError:  # (NumPy's "mmap length is greater than file size")
            size = os.path.getsize(path)
            raise ValueError(
                f"{self.op}: {path!r} is truncated: the block {key!r} ends at byte "
                f"{base + end}, the file has {size}"
            ) from None

    def close(self) -> None:
        self.headers.clear()


def _header(path: str, op: str) -> tuple:
    """``(offset of the data, {key: entry})`` of a safetensors file."""
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
    except FileNotFoundError:
        raise FileNotFoundError(f"{op}: the checkpoint's file {path!r} is missing") from None
    except (struct.error, ValueError, OverflowError, MemoryError) as e:
        # (a corrupt header length: larger than the file, or than memory)
        raise ValueError(f"{op}: {path!r} is not a valid safetensors file: {e}") from None
    header.pop("__metadata__", None)
    return 8 + n, header
