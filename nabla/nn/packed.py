"""Packed sequences, as ``torch.nn.utils.rnn``: a batch of sequences of different lengths
stored time step by time step, only the sequences still running at each step
(:class:`PackedSequence`), which ``LSTM``, ``GRU`` and ``RNN`` take in place of a padded
batch.

``data`` holds, for each step ``t``, the rows of the ``batch_sizes[t]`` sequences longer
than ``t``, longest first (``sorted_indices`` gives the batch order that sorting made,
``unsorted_indices`` its inverse; None when the input was sorted already). The lengths
must be known when packing (Python ints, or a tensor with a value, as PyTorch wants them
on the CPU); packing and unpacking are gathers, so gradients flow through both.

A recurrent layer runs a packed batch as its padded form, each sequence's state frozen
past its last step (a mask in the scan), so ``h_n`` holds each sequence's state at its
own last step, and the reverse direction of a bidirectional layer starts at it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..ops import creation, view
from ..ops._util import as_tensor, readable_now
from ..runtime.tensor import Tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pack_sequence"]


class PackedSequence(NamedTuple):
    """PyTorch's ``PackedSequence`` (see the module's docstring).

    Args:
        data: ``(sum(lengths), *features)``, step by step.
        batch_sizes: int64 ``(max_length,)``: the sequences running at each step.
        sorted_indices: int64 ``(N,)``: the batch order, longest first (None: as given).
        unsorted_indices: int64 ``(N,)``: its inverse (None: as given).
    """

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None


def _lengths(fn: str, lengths) -> np.ndarray:
    if isinstance(lengths, Tensor):
        if not readable_now(lengths):
            raise ValueError(
                f"{fn}: the lengths must be known when packing (here they are traced); pass "
                "them as Python ints or a tensor with a value"
            )
        lengths = lengths.numpy()
    out = np.asarray(lengths)
    if out.ndim != 1 or (out.size and not np.all(np.mod(out, 1) == 0)):
        raise ValueError(f"{fn}: lengths must be a 1-D list of ints, got {lengths!r}")
    return out.astype(np.int64)


def _padded_rows(sizes: np.ndarray, steps: int) -> np.ndarray:
    """Per (step, sequence) of the padded batch, its row in ``data``, or the row after the
    last (where the padding value is put) past the sequence's end."""
    n = int(sizes[0]) if sizes.size else 0
    starts = np.concatenate([[0], np.cumsum(sizes)])
    rows = np.full((steps, n), int(starts[-1]), np.int64)
    for t in range(len(sizes)):
        rows[t, : sizes[t]] = starts[t] + np.arange(sizes[t])
    return rows


def _unpacked(data: Tensor, sizes: np.ndarray, steps: int, fill) -> Tensor:
    """``data`` as the padded ``(steps, N, *features)`` batch (in the packed order)."""
    rows = _padded_rows(sizes, steps)
    pad = creation.full((1, *data.shape[1:]), fill, data.dtype)
    padded = view.concatenate([data, pad], 0)[rows.reshape(-1)]
    return padded.reshape((steps, rows.shape[1], *data.shape[1:]))


def _steps(lengths: np.ndarray) -> np.ndarray:
    """``batch_sizes``: how many of the (descending) lengths exceed each step."""
    longest = int(lengths.max()) if lengths.size else 0
    return np.array([(lengths > t).sum() for t in range(longest)], np.int64)


def pack_padded_sequence(input, lengths, batch_first: bool = False, enforce_sorted: bool = True):  # noqa: A002
    """Pack a padded batch (``torch.nn.utils.rnn.pack_padded_sequence``).

    Args:
        input: ``(L, N, *features)`` (``(N, L, *features)`` with ``batch_first``).
        lengths: each sequence's length, at least 1 and at most ``L``.
        batch_first: the input's batch dim comes first (default False).
        enforce_sorted: require lengths in decreasing order (default True); False sorts
            them and records the order.

    Returns:
        A :class:`PackedSequence`.

    Raises:
        ValueError: for lengths that do not fit the input, or unsorted with
            ``enforce_sorted``.
    """
    fn = "pack_padded_sequence"
    x = as_tensor(input, op=fn)
    if x.ndim < 2:
        raise ValueError(f"{fn}: input must have a time and a batch dim, got shape {x.shape}")
    if batch_first:
        x = view.swap_axes(x, 0, 1)
    steps, n = x.shape[0], x.shape[1]
    lengths = _lengths(fn, lengths)
    if lengths.shape != (n,) or (n and (lengths.min() < 1 or lengths.max() > steps)):
        raise ValueError(
            f"{fn}: lengths {lengths.tolist()} do not fit a batch of {n} sequences of up to "
            f"{steps} steps (each length in [1, {steps}])"
        )
    sorted_indices = unsorted_indices = None
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise ValueError(
                f"{fn}: lengths {lengths.tolist()} are not in decreasing order; sort them, or "
                "pass enforce_sorted=False"
            )
        order = np.arange(n)
    else:
        order = np.argsort(-lengths, kind="stable")
        sorted_indices = creation.constant(order.astype(np.int64))
        unsorted_indices = creation.constant(np.argsort(order).astype(np.int64))
    ranked = lengths[order]
    sizes = _steps(ranked)
    rows = np.concatenate([t * n + order[: sizes[t]] for t in range(len(sizes))]).astype(np.int64)
    flat = x.reshape((steps * n, *x.shape[2:]))
    data = flat[rows]
    return PackedSequence(data, creation.constant(sizes), sorted_indices, unsorted_indices)


def pad_packed_sequence(
    sequence: PackedSequence, batch_first: bool = False, padding_value=0.0, total_length=None
):
    """Unpack a :class:`PackedSequence` to a padded batch in the original order
    (``torch.nn.utils.rnn.pad_packed_sequence``).

    Args:
        sequence: the packed batch.
        batch_first: return ``(N, L, *features)`` (default False: ``(L, N, ...)``).
        padding_value: the value past each sequence's end (default 0).
        total_length: pad to this length (at least the longest; default the longest).

    Returns:
        ``(padded, lengths)``, ``lengths`` int64 ``(N,)``.

    Raises:
        ValueError: for a ``total_length`` shorter than the longest sequence.
    """
    fn = "pad_packed_sequence"
    sizes = _lengths(fn, sequence.batch_sizes)
    n = int(sizes[0]) if sizes.size else 0
    steps = len(sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(
                f"{fn}: total_length {total_length} is shorter than the longest sequence "
                f"({steps} steps)"
            )
        steps = int(total_length)
    padded = _unpacked(sequence.data, sizes, steps, padding_value)
    lengths = np.array([(sizes > i).sum() for i in range(n)], np.int64)
    if sequence.unsorted_indices is not None:
        back = _lengths(fn, sequence.unsorted_indices)
        padded = padded[:, back.astype(np.int64)]
        lengths = lengths[back]
    if batch_first:
        padded = view.swap_axes(padded, 0, 1)
    return padded, creation.constant(lengths)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of sequences ``(L_i, *features)`` (``torch.nn.utils.rnn.pack_sequence``).

    Args:
        sequences: the tensors (or arrays).
        enforce_sorted: require them longest first (default True).

    Returns:
        A :class:`PackedSequence`.

    Raises:
        ValueError: for no sequences, or features that differ.
    """
    seqs = [as_tensor(s, op="pack_sequence") for s in sequences]
    if not seqs or len({tuple(s.shape[1:]) for s in seqs}) != 1:
        raise ValueError("pack_sequence: needs sequences whose dims after the first agree")
    longest = max(s.shape[0] for s in seqs)
    padded = [
        view.pad(s, [(0, longest - s.shape[0])] + [(0, 0)] * (s.ndim - 1))
        if s.shape[0] < longest
        else s
        for s in seqs
    ]
    lengths = [s.shape[0] for s in seqs]
    return pack_padded_sequence(view.stack(padded, 1), lengths, False, enforce_sorted)


def unpacked_for_rnn(x: PackedSequence):
    """``(padded time-major in the sorted order, mask (L, N, 1) bool, info)`` for a
    recurrent layer: ``info`` repacks its output (:func:`repacked`)."""
    sizes = _lengths("rnn", x.batch_sizes)
    n = int(sizes[0]) if sizes.size else 0
    lengths = np.array([(sizes > i).sum() for i in range(n)], np.int64)
    padded = _unpacked(x.data, sizes, len(sizes), 0.0)
    mask = np.arange(len(sizes))[:, None] < lengths[None, :]
    return padded, creation.constant(mask[..., None]), (x, sizes)


def repacked(y: Tensor, info) -> PackedSequence:
    """A recurrent layer's padded output ``(L, N, H)`` (sorted order) packed as its input."""
    x, sizes = info
    n = y.shape[1]
    rows = np.concatenate([t * n + np.arange(sizes[t]) for t in range(len(sizes))])
    data = y.reshape((y.shape[0] * n, *y.shape[2:]))[rows.astype(np.int64)]
    return PackedSequence(data, x.batch_sizes, x.sorted_indices, x.unsorted_indices)


def permuted(state: Tensor, indices: Tensor | None) -> Tensor:
    """``state`` ``(layers, N, H)`` with its batch dim reordered by ``indices`` (None: as
    it is)."""
    if indices is None:
        return state
    return state[:, _lengths("rnn", indices)]
