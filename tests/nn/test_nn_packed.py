"""Packed sequences (``nn.utils.rnn``): the packing layout by its definition, and the
recurrent layers on a packed batch equal to each sequence run alone (checked against
PyTorch's when written: data, batch sizes, orders, outputs, final states, gradients)."""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb

nn = nb.nn
R = nn.utils.rnn
RNG = np.random.default_rng(9)
X = RNG.standard_normal((6, 4, 3)).astype(np.float32)  # (L, N, F)
LENGTHS = [4, 6, 2, 5]


def test_packing_layout_and_round_trip():
    packed = R.pack_padded_sequence(X, LENGTHS, enforce_sorted=False)
    order = [1, 3, 0, 2]  # longest first, stable
    assert packed.sorted_indices.numpy().tolist() == order
    assert packed.unsorted_indices.numpy().tolist() == [2, 0, 3, 1]
    assert packed.batch_sizes.numpy().tolist() == [4, 4, 3, 3, 2, 1]
    want = [X[t, n] for t in range(6) for n in order if LENGTHS[n] > t]
    np.testing.assert_array_equal(packed.data.numpy(), np.stack(want))
    padded, lengths = R.pad_packed_sequence(packed, batch_first=True, padding_value=-1.0)
    assert lengths.numpy().tolist() == LENGTHS
    for n, length in enumerate(LENGTHS):
        np.testing.assert_array_equal(padded.numpy()[n, :length], X[:length, n])
        assert (padded.numpy()[n, length:] == -1.0).all()
    seqs = [X[: LENGTHS[n], n] for n in (1, 3, 0, 2)]
    np.testing.assert_array_equal(R.pack_sequence(seqs).data.numpy(), packed.data.numpy())
    with pytest.raises(ValueError, match=r"not in decreasing order; sort them, or pass"):
        R.pack_padded_sequence(X, LENGTHS)
    with pytest.raises(ValueError, match=r"lengths \[4, 7, 2, 5\] do not fit"):
        R.pack_padded_sequence(X, [4, 7, 2, 5], enforce_sorted=False)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_layers_run_each_packed_sequence_as_alone(kind):
    layer = getattr(nn, kind)(3, 5, num_layers=2, bidirectional=True, key=nb.random.key(0))
    packed = R.pack_padded_sequence(X, LENGTHS, enforce_sorted=False)
    out, state = layer(packed)
    padded, _ = R.pad_packed_sequence(out)
    h_n = state[0] if kind == "LSTM" else state
    for n, length in enumerate(LENGTHS):
        alone, alone_state = layer(X[:length, n])  # unbatched (L, F)
        alone_h = alone_state[0] if kind == "LSTM" else alone_state
        np.testing.assert_allclose(padded.numpy()[:length, n], alone.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(h_n.numpy()[:, n], alone_h.numpy(), rtol=1e-5, atol=1e-6)

    # differentiable through packing, the masked scan and unpacking
    def total(x):
        o, _ = layer(R.pack_padded_sequence(x, LENGTHS, enforce_sorted=False))
        return nb.sum(o.data**2)

    g = nb.grad(total)(nb.constant(X)).numpy()
    for n, length in enumerate(LENGTHS):
        assert (g[length:, n] == 0).all() and np.abs(g[:length, n]).sum() > 0
