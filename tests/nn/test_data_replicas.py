"""DataLoader over several processes (num_replicas/rank): every process count sees the same
global batches, each replica its own consecutive part; resuming mid-epoch continues them."""

import numpy as np
import pytest

import nabla as nb
from nabla import nn


def data():
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    return x, np.arange(20)


def global_batches(replicas, epochs=2, **kw):
    """Each batch as the replicas' parts joined in rank order."""
    loaders = [nn.DataLoader(data(), num_replicas=replicas, rank=r, **kw) for r in range(replicas)]
    out = []
    for _ in range(epochs):
        for parts in zip(*loaders, strict=True):
            assert len({p[1].shape[0] for p in parts}) == 1
            out.append(np.concatenate([p[1].numpy() for p in parts]))
    return out


def test_every_process_count_sees_the_same_global_batches():
    kw = {"batch_size": 8, "shuffle": True, "seed": 3, "drop_last": True}
    one = global_batches(1, **kw)
    assert len(one) == 4 and not np.array_equal(one[0], np.arange(8))  # shuffled
    assert not np.array_equal(one[0], one[2])  # each epoch its own order
    for replicas in (2, 4):
        got = global_batches(replicas, **kw)
        for a, b in zip(got, one, strict=True):
            np.testing.assert_array_equal(a, b)
    # the last, smaller batch is cut too when the replicas divide it
    short = global_batches(2, epochs=1, batch_size=8)
    assert [len(b) for b in short] == [8, 8, 4]
    np.testing.assert_array_equal(np.concatenate(short), np.arange(20))


def test_resuming_mid_epoch_on_another_replica_count_continues_the_batches():
    kw = {"batch_size": 4, "shuffle": True, "seed": 7, "drop_last": True}
    want = global_batches(1, epochs=3, **kw)
    first = nn.DataLoader(data(), num_replicas=2, rank=0, **kw)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    assert state == {"epoch": 0, "batch": 3}
    loaders = [nn.DataLoader(data(), num_replicas=4, rank=r, **kw) for r in range(4)]
    for loader in loaders:
        loader.load_state_dict(state)
    got = []
    for _ in range(3):  # the rest of epoch 0, then two whole epochs
        for parts in zip(*loaders, strict=True):
            got.append(np.concatenate([p[1].numpy() for p in parts]))
    assert len(got) == len(want) - 3
    for a, b in zip(got, want[3:], strict=True):
        np.testing.assert_array_equal(a, b)
    assert loaders[0].state_dict() == {"epoch": 3, "batch": 0}


def test_bad_replica_settings_are_refused():
    with pytest.raises(ValueError, match=r"rank must be in \[0, num_replicas\), got rank=2"):
        nn.DataLoader(data(), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="a batch of 6 examples .* cannot be cut into 4"):
        nn.DataLoader(data(), batch_size=6, num_replicas=4, rank=0)
    with pytest.raises(ValueError, match="a batch of 2 examples .* drop_last=False"):
        nn.DataLoader(data(), batch_size=6, num_replicas=3, rank=0)
    nn.DataLoader(data(), batch_size=6, num_replicas=3, rank=0, drop_last=True)
    with pytest.raises(ValueError, match="epoch 0 and batch 9 are not a position"):
        nn.DataLoader(data(), batch_size=4).load_state_dict({"epoch": 0, "batch": 9})
    # not ints: refused, never truncated (2.5 replicas read as 2, rank 0.7 as 0)
    for kw in ({"num_replicas": 2.5, "rank": 0}, {"num_replicas": 2, "rank": 0.7}, {"seed": None}):
        name = next(k for k, v in kw.items() if not isinstance(v, int))
        with pytest.raises(TypeError, match=f"DataLoader: {name} must be an int"):
            nn.DataLoader(data(), batch_size=2, **kw)
    bad = ({"epoch": 0.5, "batch": 1}, {"epoch": True, "batch": 0}, {"epoch": 0, "batch": "2"})
    for state in bad:
        with pytest.raises(ValueError, match="expected {'epoch': int, 'batch': int}"):
            nn.DataLoader(data(), batch_size=2).load_state_dict(state)
    nn.DataLoader(data(), batch_size=2).load_state_dict({"epoch": np.int64(1), "batch": 1})


def test_a_loader_made_before_initialize_in_an_mpi_job_is_refused(monkeypatch):
    """Started by mpiexec among several processes, before nb.distributed.initialize(): the
    loader would give every process whole batches (PyTorch's DistributedSampler raises
    too). Given num_replicas and rank, it is made."""
    from nabla.backends import mpi

    monkeypatch.setenv("PMI_SIZE", "2")
    # (not initialized in this process: an earlier test, a docs example, may have run it)
    monkeypatch.setattr(mpi, "active", lambda: False)
    with pytest.raises(RuntimeError, match=r"initialize\(\) has not run"):
        nn.DataLoader(data(), batch_size=2)
    assert nn.DataLoader(data(), batch_size=2, num_replicas=2, rank=1).rank == 1


def test_a_batch_the_dataset_failed_to_make_is_not_counted_as_taken():
    """(``state_dict`` counted a batch whose ``__getitem__`` raised: a resume skipped it.)"""

    class Flaky:
        def __init__(self):
            self.fail = True

        def __len__(self):
            return 10

        def __getitem__(self, i):
            if i == 4 and self.fail:
                raise OSError("a bad file")
            return np.float32(i)

    data = Flaky()
    loader = nn.DataLoader(data, batch_size=2)
    got = []
    with pytest.raises(OSError):
        for batch in loader:
            got.append(batch.tolist())
    assert got == [[0.0, 1.0], [2.0, 3.0]]
    assert loader.state_dict() == {"epoch": 0, "batch": 2}
    data.fail = False
    again = nn.DataLoader(data, batch_size=2)
    again.load_state_dict(loader.state_dict())
    assert next(iter(again)).tolist() == [4.0, 5.0]


class _ForeignArray:
    """Another library's array (a torch tensor, a JAX array): it has ``__array__``, and an
    ``__getitem__``/``__len__`` that made it look like a dataset of rows."""

    def __init__(self, a):
        self.a = np.asarray(a)

    def __array__(self, dtype=None, copy=None):
        return self.a if dtype is None else self.a.astype(dtype)

    def __len__(self):
        return len(self.a)

    def __getitem__(self, i):
        return _ForeignArray(self.a[i])


def test_pytorch_s_positional_order_samplers_and_foreign_arrays():
    """As torch.utils.data: the positional parameters are PyTorch's (a sampler in the 4th
    place had been taken as drop_last), ``sampler``/``batch_sampler`` give the order and
    the batches, their conflicts are PyTorch's errors, the default batch is 1, and
    another library's array is an array (its rows had been collated into a list)."""
    x = np.arange(10)
    assert [b.tolist() for b in nn.DataLoader(x, 4, False, [9, 8, 7, 6, 5])] == [
        [9, 8, 7, 6],
        [5],
    ]
    assert len(nn.DataLoader(x)) == 10  # PyTorch's default batch_size of 1
    batches = nn.DataLoader(x, batch_sampler=[[0, 1, 2], [7], [3, 3]])
    assert len(batches) == 3 and [b.tolist() for b in batches] == [[0, 1, 2], [7], [3, 3]]
    assert [b.tolist() for b in nn.DataLoader(x, 2, sampler=range(3), drop_last=True)] == [[0, 1]]
    with pytest.raises(ValueError, match="sampler is mutually exclusive with shuffle"):
        nn.DataLoader(x, 2, True, [1, 2])
    with pytest.raises(ValueError, match="batch_sampler is mutually exclusive"):
        nn.DataLoader(x, 2, batch_sampler=[[0]])
    with pytest.raises(ValueError, match="num_workers must be an int >= 0"):
        nn.DataLoader(x, num_workers=-1)
    loader = nn.DataLoader(x, 2, False, None, None, 2, None, True)  # PyTorch's positions
    assert loader.num_workers == 2 and loader.pin_memory and len(loader) == 5
    foreign = _ForeignArray(np.arange(8.0).reshape(4, 2))
    got = list(nn.DataLoader(foreign, batch_size=2))
    assert isinstance(got[0], nb.Tensor) and got[0].tolist() == [[0.0, 1.0], [2.0, 3.0]]

    class Rows(nn.data.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return _ForeignArray([i, i + 1.0]), i

    x_batch, y_batch = next(iter(nn.DataLoader(Rows(), batch_size=3)))
    assert x_batch.shape == (3, 2) and y_batch.tolist() == [0, 1, 2]
