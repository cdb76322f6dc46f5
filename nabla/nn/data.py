"""``DataLoader``: minibatches of in-memory (or memory-mapped) arrays or of a map-style
dataset (PyTorch's ``__len__``/``__getitem__``), with seeded shuffling, each process of a
multi-process run reading only its slice of every batch, and resumable mid-epoch;
``Dataset``, ``TensorDataset`` and ``default_collate`` as ``torch.utils.data`` has them."""

from __future__ import annotations

import numbers
import sys
import types

import ml_dtypes
import numpy as np

from ..backends import mpi
from ..core.sharding import PROCESS
from ..ops import creation
from ..runtime.tensor import Tensor, foreign_array

__all__ = ["DataLoader", "Dataset", "Subset", "TensorDataset", "default_collate", "random_split"]


class Dataset:
    """A map-style dataset, as ``torch.utils.data.Dataset``: a subclass defines
    ``__len__`` and ``__getitem__(i)`` (one example: an array, a number, or a tuple or dict
    of them), and :class:`DataLoader` batches it."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} does not define __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} does not define __len__")

    # ``class Pairs(Dataset[tuple])``, as typed PyTorch code writes it
    __class_getitem__ = classmethod(types.GenericAlias)


class TensorDataset(Dataset):
    """Examples that are the rows of tensors sharing their first dim:
    ``TensorDataset(x, y)[i] == (x[i], y[i])``, each a tensor, as PyTorch's; ``.tensors``
    holds the tensors themselves (an in-place change of one, ``ds.tensors[0].sub_(m)``,
    is the dataset's, as in PyTorch), ``.arrays`` their values. A :class:`DataLoader`
    over it slices the values batch by batch.

    Args:
        *arrays: Tensors or arrays with the same first dim (arrays are copied in).

    Raises:
        ValueError: for no arrays or arrays of different lengths.
    """

    def __init__(self, *arrays):
        self.tensors = tuple(
            a if isinstance(a, Tensor) else creation.constant(np.asarray(a)) for a in arrays
        )
        shapes = [tuple(t.shape) for t in self.tensors]
        if not self.tensors or any(not s for s in shapes):
            raise ValueError(
                f"TensorDataset: needs arrays with a first (example) dim, got shapes {shapes}"
            )
        if len({s[0] for s in shapes}) != 1:
            raise ValueError(f"TensorDataset: arrays need the same first dim, got {shapes}")

    @property
    def arrays(self) -> list:
        """The tensors' current values, as read-only NumPy arrays."""
        return [t.numpy() for t in self.tensors]

    def __getitem__(self, index):
        return tuple(creation.constant(a[index]) for a in self.arrays)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


def _rng(seed: int, *more: int) -> np.random.Generator:
    """NumPy's generator for ``seed`` (and ``more`` entropy): a negative seed, as PyTorch
    takes, as its 64-bit pattern (NumPy's seeds are not negative)."""
    return np.random.default_rng((int(seed) % (1 << 64), *more))


def default_collate(samples: list):
    """Examples joined into a batch, as PyTorch's ``default_collate``: arrays, tensors and
    numbers stacked along a new first dim into one tensor; tuples, lists and dicts collated
    position by position (key by key); anything else (strings) kept as it came.

    Containers come out as PyTorch's do: a batch of tuples or lists is a list of fields
    (a namedtuple stays one), a dict keeps its type (an ``OrderedDict`` too), and a field
    of strings is the sequence of them (a tuple for a tuple's field, a list for a dict's
    and at the top).

    Args:
        samples: a list of examples of the same structure.

    Returns:
        The batch.
    """
    first = samples[0]
    if isinstance(first, tuple | list):
        for j, s in enumerate(samples):
            if len(s) != len(first):  # (a field would be dropped, or an IndexError)
                raise ValueError(
                    f"default_collate: every sample needs the same number of fields: sample 0 "
                    f"has {len(first)}, sample {j} has {len(s)}"
                )
        fields = [default_collate(field) for field in zip(*samples, strict=True)]
        if hasattr(first, "_fields"):  # a namedtuple takes its fields by position
            return type(first)(*fields)
        return fields
    if isinstance(first, dict):
        collated = {k: default_collate([s[k] for s in samples]) for k in first}
        try:
            return type(first)(collated)
        except TypeError:  # (a mapping type that takes no dict)
            return collated
    if isinstance(first, Tensor):
        return creation.constant(_stacked([s.numpy() for s in samples]))
    if not isinstance(first, np.ndarray | np.generic | str | bytes) and hasattr(first, "__array__"):
        # another library's array (a dataset returning torch tensors, bfloat16 or requiring
        # grad too): its values
        samples = [foreign_array(s) for s in samples]
        first = samples[0]
    numeric = isinstance(first, np.number | np.bool_ | int | float | bool) or (
        isinstance(first, np.ndarray)
        and (first.dtype.kind in "biufc" or first.dtype == ml_dtypes.bfloat16)
    )
    if numeric:
        return creation.constant(_stacked([np.asarray(s) for s in samples]))
    return samples  # strings (NumPy's too), None, other objects: as given


def _stacked(arrays: list) -> np.ndarray:
    """The samples' values stacked, or an error naming the first sample whose shape
    differs."""
    shape = arrays[0].shape
    for j, a in enumerate(arrays):
        if a.shape != shape:
            raise ValueError(
                f"default_collate: samples of one batch must have one shape: sample 0 has "
                f"{shape}, sample {j} has {a.shape}"
            )
    return np.stack(arrays)


def _is_dataset(data) -> bool:
    """A map-style dataset rather than arrays: indexable and sized, not an array, a tensor
    or a tuple/list of arrays."""
    if isinstance(data, list) and data and isinstance(data[0], tuple | list | dict):
        return True  # a list of samples, as PyTorch takes any sequence: ``list(zip(x, y))``
    if isinstance(data, list) and data and isinstance(data[0], int | float | str | np.generic):
        return True  # a list of plain samples (numbers, strings): columns would be arrays
    if isinstance(data, Tensor | np.ndarray | tuple | list) or hasattr(data, "__array__"):
        return False  # (a torch or JAX array too: an array, not a dataset of rows)
    return hasattr(data, "__getitem__") and hasattr(data, "__len__")


# PyTorch's loader settings about worker processes and memory pinning: nothing to do here
_TORCH_LOADER_OPTIONS = {
    "persistent_workers",
    "prefetch_factor",
    "timeout",
    "worker_init_fn",
    "pin_memory_device",
    "multiprocessing_context",
    "generator",
    "in_order",
}


class Subset(Dataset):
    """The examples of ``dataset`` at ``indices``, in that order
    (``torch.utils.data.Subset``).

    Args:
        dataset: a map-style dataset (or anything indexable with ``len``).
        indices: the positions kept.
    """

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, [int(i) for i in indices]

    def __getitem__(self, index):
        if isinstance(index, list | np.ndarray):
            return [self.dataset[self.indices[int(i)]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset, lengths, seed: int = 0, *, generator=None) -> list:
    """``dataset`` cut into non-overlapping random :class:`Subset`s of ``lengths``
    (``torch.utils.data.random_split``): a list of counts adding up to ``len(dataset)``, or
    fractions adding up to 1 (the remainder spread one by one from the first, as PyTorch).

    Args:
        dataset: a map-style dataset.
        lengths: counts or fractions, one per subset.
        seed: the seed of the permutation (default 0: the same split every run), or, in
            PyTorch's third place, a ``torch.Generator``.
        generator: a ``torch.Generator``: the permutation is ``torch.randperm``'s with it,
            so the split is PyTorch's own.

    Returns:
        A list of :class:`Subset`.

    Raises:
        ValueError: for lengths that do not add up.
    """
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(0 <= f <= 1 for f in lengths) and abs(sum(lengths) - 1) < 1e-9:
        counts = [int(np.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n or any(int(c) != c or c < 0 for c in lengths):
        raise ValueError(
            f"random_split: lengths {lengths} do not add up to the dataset's {n} examples"
        )
    if not isinstance(seed, numbers.Integral):  # ``random_split(ds, lengths, torch_gen)``
        if not hasattr(seed, "manual_seed"):
            raise TypeError(f"random_split: seed must be an int or a generator, got {seed!r}")
        seed, generator = 0, seed
    if generator is not None and type(generator).__module__.startswith("torch"):
        order = sys.modules["torch"].randperm(n, generator=generator).numpy()
    else:
        order = _rng(seed).permutation(n)
    out, start = [], 0
    for c in lengths:
        out.append(Subset(dataset, order[start : start + int(c)]))
        start += int(c)
    return out


class DataLoader:
    """Iterate over minibatches of one array or a tuple of arrays sharing their first dim.

    Each epoch (each ``iter``) draws a new order when ``shuffle`` is set; the orders come from
    ``seed`` and the epoch number only, so a run is reproducible and every process count
    sees the same global batches. Batches are tensors (a tuple of tensors for tuple data).
    Keep ``drop_last=True`` in a compiled loop: a smaller last batch is a new shape, so a
    second trace.

    Over several processes (``nb.distributed``), ``batch_size`` is the *global* batch: each
    global batch is cut into ``num_replicas`` equal consecutive parts and this process
    yields part ``rank`` only (``batch_size // num_replicas`` examples), which is what
    ``nb.distributed.from_process_local(part, mesh, P("dp"))`` takes to build the global
    batch. Only those rows are indexed, so data in a ``np.memmap`` is read per slice.

    ``state_dict()`` (the epoch and the batches already taken in it, two ints) and
    ``load_state_dict`` resume the iteration where it was: put it in a checkpoint, and the
    resumed run, on any process count, continues with the same global batches. (With a
    ``sampler`` or ``batch_sampler`` the batches skipped are those it yields again: a
    sampler that draws a new order per ``iter``, as torch's ``RandomSampler``, resumes
    into a new order.)

    ``data`` may also be a map-style dataset (an object with ``__len__`` and
    ``__getitem__``, such as a :class:`Dataset` subclass): each batch is then its examples
    at the batch's indices, joined by ``collate_fn``.

    The positional parameters are PyTorch's, in its order (``dataset, batch_size, shuffle,
    sampler, batch_sampler, num_workers, collate_fn, pin_memory, drop_last``); ours come
    after them, keyword only.

    Args:
        data: a Tensor or array (a torch or JAX array too), a tuple/list of them with the
            same length, or a map-style dataset.
        batch_size: examples per (global) batch (default 1, as PyTorch's).
        shuffle: reshuffle every epoch (default False).
        sampler: PyTorch's: an iterable of example indices (a torch ``Sampler`` too), read
            again each epoch as the batches are taken, giving the order instead of
            ``shuffle`` (without ``__len__``, the loader has no ``len`` either).
        batch_sampler: PyTorch's: an iterable of lists of indices, one per batch (an
            endless one too), instead of ``batch_size``, ``shuffle``, ``sampler`` and
            ``drop_last``.
        num_workers: accepted for PyTorch's calls (>= 0): batches are made in this process.
        collate_fn: joins a dataset's examples into a batch (default
            :func:`default_collate`); only for a dataset.
        pin_memory: accepted for PyTorch's calls; nothing to pin.
        drop_last: skip the last batch when it is smaller than ``batch_size`` (default False).
        seed: seed of the shuffling, an int (default 0).
        num_replicas: how many parts each batch is cut into, an int (default: the process
            count, ``nb.distributed.process_count()``).
        rank: which part this loader yields, an int (default:
            ``nb.distributed.process_index()``).
        **loader_options: PyTorch's ``persistent_workers``, ``prefetch_factor``,
            ``timeout``, ``worker_init_fn``, ``pin_memory_device``, ``multiprocessing_context``,
            ``generator`` and ``in_order``, accepted so its loader calls carry over (and
            kept as attributes where PyTorch has them): batches are made in
            this process, in memory (no workers, no pinning), and ``seed`` alone decides
            the order (a torch ``generator`` does not). Another keyword is a ``TypeError``.

    Raises:
        TypeError: for a ``batch_size``, ``seed``, ``num_replicas`` or ``rank`` that is not
            an int.
        RuntimeError: in a process an MPI launcher started among several, before
            ``nb.distributed.initialize()``, unless ``num_replicas`` and ``rank`` are given
            (each process would take whole batches).
        ValueError: for arrays of different lengths, ``batch_size < 1``,
            a rank outside ``[0, num_replicas)``, a batch (the last one too, unless
            ``drop_last``) that ``num_replicas`` does not divide, a negative
            ``num_workers``, or ``sampler``/``batch_sampler`` with the settings they replace
            (PyTorch's errors).

    Example:
        >>> loader = DataLoader((np.zeros((10, 2)), np.arange(10)), batch_size=4)
        >>> len(loader), [b[0].shape for b in loader]
        (3, [(4, 2), (4, 2), (2, 2)])
    """

    def __init__(
        self,
        data,
        batch_size: int = 1,
        shuffle=False,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last=False,
        *,
        seed=0,
        num_replicas: int | None = None,
        rank: int | None = None,
        **loader_options,
    ):
        unknown = sorted(set(loader_options) - _TORCH_LOADER_OPTIONS)
        if unknown:
            raise TypeError(f"DataLoader: unexpected keyword arguments {unknown}")
        if not isinstance(num_workers, numbers.Integral) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be an int >= 0, got {num_workers!r}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler is mutually exclusive with shuffle")
        if batch_sampler is not None and (
            batch_size != 1 or shuffle or sampler is not None or drop_last
        ):
            raise ValueError(
                "DataLoader: batch_sampler is mutually exclusive with batch_size, shuffle, "
                "sampler and drop_last"
            )
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.num_workers, self.pin_memory = int(num_workers), bool(pin_memory)
        if not isinstance(batch_size, numbers.Integral) or isinstance(batch_size, bool):
            raise TypeError(
                f"DataLoader: batch_size must be a positive int, got {batch_size!r} (unbatched "
                "loading, PyTorch's batch_size=None, is not supported: use batch_size=1)"
            )
        if isinstance(data, dict):
            raise TypeError(
                "DataLoader: data is a dict; pass a tuple of arrays (DataLoader((x, y), ...)) "
                "or a dataset (an object with __len__ and __getitem__)"
            )
        self.dataset = data if _is_dataset(data) else None
        if collate_fn is not None and not callable(collate_fn):  # (failed at the first batch)
            raise TypeError(f"DataLoader: collate_fn must be callable, got {collate_fn!r}")
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        self.generator = loader_options.get("generator")
        self.timeout = loader_options.get("timeout", 0)
        self.worker_init_fn = loader_options.get("worker_init_fn")
        self._sliced = type(data) is TensorDataset and collate_fn is None
        if self._sliced:  # its rows sliced batch by batch (its values read at each batch)
            self.is_tuple, self.arrays = True, []
            lengths = {len(data)}
        elif self.dataset is not None:
            self.is_tuple, self.arrays = False, []
            lengths = {len(data)}
        else:
            if collate_fn is not None:
                raise ValueError(
                    "DataLoader: collate_fn applies to a dataset (an object with __len__ and "
                    "__getitem__); arrays are batched by slicing"
                )
            if not isinstance(data, tuple | list | np.ndarray | Tensor) and not hasattr(
                data, "__array__"
            ):  # (an iterable-style dataset, a generator, a number)
                raise TypeError(
                    f"DataLoader: cannot load from a {type(data).__name__}: pass an array, a "
                    "tuple of arrays, or a map-style dataset (an object with __len__ and "
                    "__getitem__); iterable-style datasets are not supported"
                )
            self.is_tuple = isinstance(data, tuple | list)
            parts = list(data) if self.is_tuple else [data]
            # np.asarray keeps a memmap's pages on disk until rows are indexed
            self.arrays = [p.numpy() if isinstance(p, Tensor) else np.asarray(p) for p in parts]
            lengths = {a.shape[0] if a.ndim else None for a in self.arrays}
            if len(lengths) != 1 or None in lengths:
                shapes = [a.shape for a in self.arrays]
                raise ValueError(f"DataLoader: arrays need the same first dim, got {shapes}")
        if batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be at least 1, got {batch_size}")
        self.n = lengths.pop()
        if sampler is not None:  # the examples an epoch visits: the sampler's indices
            self.n = len(sampler) if hasattr(sampler, "__len__") else None
        self.batch_size, self.shuffle, self.drop_last = int(batch_size), shuffle, drop_last
        for name, value in (("seed", seed), ("num_replicas", num_replicas), ("rank", rank)):
            if value is None and name != "seed":
                continue
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise TypeError(f"DataLoader: {name} must be an int, got {value!r}")
        if (num_replicas is None or rank is None) and mpi.launched_by_mpi() and not mpi.active():
            raise RuntimeError(
                "DataLoader: this process is one of several an MPI launcher started, but "
                "nb.distributed.initialize() has not run, so every process would take whole "
                "batches: call nb.distributed.initialize() before making the loader, or pass "
                "num_replicas= and rank="
            )
        self.seed, self.epoch = int(seed), 0
        self.num_replicas = PROCESS.count if num_replicas is None else int(num_replicas)
        self.rank = PROCESS.index if rank is None else int(rank)
        if self.num_replicas < 1 or not 0 <= self.rank < self.num_replicas:
            raise ValueError(
                f"DataLoader: rank must be in [0, num_replicas), got rank={rank} and "
                f"num_replicas={num_replicas}"
            )
        last = self.n % self.batch_size if not drop_last and self.n is not None else 0
        # (a batch_sampler's batches are checked as they are made)
        for size in (self.batch_size, last) if batch_sampler is None else ():
            if size and size % self.num_replicas:
                raise ValueError(
                    f"DataLoader: a batch of {size} examples (batch_size={batch_size}, "
                    f"{self.n} examples, drop_last={drop_last}) cannot be cut into "
                    f"{self.num_replicas} equal parts (num_replicas); choose a batch_size "
                    "that num_replicas divides, or drop_last=True"
                )
        self._start = 0  # the batch the next iteration starts at (load_state_dict)
        self._taken: int | None = None  # batches taken in the epoch being iterated

    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        if self.n is None:
            raise TypeError(
                f"DataLoader: its sampler ({type(self.sampler).__name__}) has no len(), so "
                "neither has the loader"
            )
        if self.drop_last:
            return self.n // self.batch_size
        return -(-self.n // self.batch_size)

    def _length(self) -> int | None:
        """``len(self)``, or None for a sampler (or batch sampler) without a length."""
        try:
            return len(self)
        except TypeError:
            return None

    def state_dict(self) -> dict:
        """Where the iteration is: ``{"epoch": e, "batch": b}``, the epoch being iterated
        and the batches already taken from it (the next epoch and 0 between epochs)."""
        total = self._length()
        if self._taken is not None and (total is None or self._taken < total):
            return {"epoch": self.epoch - 1, "batch": self._taken}
        return {"epoch": self.epoch, "batch": self._start}

    def load_state_dict(self, state) -> None:
        """Continue from ``state`` (a :meth:`state_dict`): the next ``iter`` yields batch
        ``state["batch"]`` of epoch ``state["epoch"]`` and goes on from there.

        Raises:
            ValueError: naming the state when it is not an epoch >= 0 and a batch in
                ``[0, len(self)]``.
        """
        try:
            epoch, batch = state["epoch"], state["batch"]
            ints = all(
                isinstance(v, numbers.Integral | np.integer) and not isinstance(v, bool | np.bool_)
                for v in (epoch, batch)
            )
            if not ints:
                raise TypeError
            epoch, batch = int(epoch), int(batch)
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"DataLoader.load_state_dict: expected {{'epoch': int, 'batch': int}}, got "
                f"{state!r}"
            ) from None
        total = self._length()
        if epoch < 0 or batch < 0 or (total is not None and batch > total):
            raise ValueError(
                f"DataLoader.load_state_dict: epoch {epoch} and batch {batch} are not a "
                f"position of this loader ({total} batches per epoch)"
            )
        self.epoch, self._start, self._taken = epoch, batch, None

    def order(self, epoch: int) -> np.ndarray:
        """The example order of ``epoch`` (every process computes the same one): a
        ``sampler``'s indices as it yields them this epoch."""
        if self.sampler is not None:
            return np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
        if self.shuffle:
            return _rng(self.seed, epoch).permutation(self.n)
        return np.arange(self.n)

    def _batches(self, epoch: int):
        """The epoch's batches of example indices, made as they are taken: a sampler or
        batch sampler is read lazily, as PyTorch's (an endless one too)."""
        if self.batch_sampler is not None:
            for b in self.batch_sampler:
                yield np.asarray(list(b), dtype=np.int64)
            return
        size = self.batch_size
        if self.sampler is None:
            order = self.order(epoch)
            for b in range(len(self)):
                yield order[b * size : (b + 1) * size]
            return
        chunk: list = []
        for i in self.sampler:
            chunk.append(int(i))
            if len(chunk) == size:
                yield np.asarray(chunk, dtype=np.int64)
                chunk = []
        if chunk and not self.drop_last:
            yield np.asarray(chunk, dtype=np.int64)

    def __iter__(self):
        epoch, start = self.epoch, self._start
        self.epoch, self._start, self._taken = epoch + 1, 0, start
        for b, idx in enumerate(self._batches(epoch)):
            if b < start:  # (resumed: taken before the checkpoint)
                continue
            if len(idx) % self.num_replicas:
                raise ValueError(
                    f"DataLoader: batch {b} of {len(idx)} examples cannot be cut into "
                    f"{self.num_replicas} equal parts (num_replicas)"
                )
            part = len(idx) // self.num_replicas
            idx = idx[self.rank * part : (self.rank + 1) * part]
            if self.dataset is not None and not self._sliced:
                batch = self.collate_fn([self.dataset[int(i)] for i in idx])
            else:  # (a TensorDataset's values as they are now: its tensors may change)
                arrays = self.dataset.arrays if self._sliced else self.arrays
                made = tuple(creation.constant(a[idx]) for a in arrays)
                batch = (list(made) if self._sliced else made) if self.is_tuple else made[0]
            # counted once made: a dataset that raised has not given this batch, and a
            # resume from ``state_dict`` must see it again
            self._taken = b + 1
            yield batch
        self._taken = None  # the epoch ran out (its length may be unknown: a sampler's)
