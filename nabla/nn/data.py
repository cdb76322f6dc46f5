"""``DataLoader``: minibatches of in-memory arrays, with seeded shuffling."""

from __future__ import annotations

import numpy as np

from ..ops import creation
from ..runtime.tensor import Tensor

__all__ = ["DataLoader"]


class DataLoader:
    """Iterate over minibatches of one array or a tuple of arrays sharing their first dim.

    Each epoch (each ``iter``) draws a new order when ``shuffle`` is set; the orders come from
    ``seed``, so a run is reproducible. Batches are tensors (a tuple of tensors for tuple data).
    Keep ``drop_last=True`` in a compiled loop: a smaller last batch is a new shape, so a
    second trace.

    Args:
        data: a Tensor or array, or a tuple/list of them with the same length.
        batch_size: examples per batch (default 32).
        shuffle: reshuffle every epoch (default False).
        drop_last: skip the last batch when it is smaller than ``batch_size`` (default False).
        seed: seed of the shuffling (default 0).

    Raises:
        ValueError: for an empty dataset, arrays of different lengths, or ``batch_size < 1``.

    Example:
        >>> loader = DataLoader((np.zeros((10, 2)), np.arange(10)), batch_size=4)
        >>> len(loader), [b[0].shape for b in loader]
        (3, [(4, 2), (4, 2), (2, 2)])
    """

    def __init__(self, data, batch_size: int = 32, shuffle=False, drop_last=False, seed=0):
        self.is_tuple = isinstance(data, tuple | list)
        parts = list(data) if self.is_tuple else [data]
        self.arrays = [p.numpy() if isinstance(p, Tensor) else np.asarray(p) for p in parts]
        lengths = {a.shape[0] if a.ndim else 0 for a in self.arrays}
        if len(lengths) != 1 or 0 in lengths:
            shapes = [a.shape for a in self.arrays]
            raise ValueError(f"DataLoader: arrays need the same non-zero first dim, got {shapes}")
        if batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be at least 1, got {batch_size}")
        self.n = lengths.pop()
        self.batch_size, self.shuffle, self.drop_last = int(batch_size), shuffle, drop_last
        self.seed, self.epoch = int(seed), 0

    def __len__(self) -> int:
        if self.drop_last:
            return self.n // self.batch_size
        return -(-self.n // self.batch_size)

    def __iter__(self):
        if self.shuffle:
            order = np.random.default_rng((self.seed, self.epoch)).permutation(self.n)
        else:
            order = np.arange(self.n)
        self.epoch += 1
        for b in range(len(self)):
            idx = order[b * self.batch_size : (b + 1) * self.batch_size]
            batch = tuple(creation.constant(a[idx]) for a in self.arrays)
            yield batch if self.is_tuple else batch[0]
