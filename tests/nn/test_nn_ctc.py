"""``F.ctc_loss`` / ``nn.CTCLoss`` against CTC's definition: the probability of a target is
the sum, over every path of classes through time that collapses to it (repeats merged,
then blanks dropped), of the product of the path's probabilities; enumerated here for
small sizes. (Checked against PyTorch's values, and its gradients through a log_softmax,
when written.)"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import nabla as nb

nn, F = nb.nn, nb.nn.functional


def _collapse(path, blank):
    out, prev = [], None
    for c in path:
        if c != prev and c != blank:
            out.append(c)
        prev = c
    return tuple(out)


def _brute(lp, target, blank):
    """``(-log P(target), d(-log P)/d lp)`` for one sequence ``lp`` ``(T, C)``."""
    steps, classes = lp.shape
    total, grad = 0.0, np.zeros_like(lp)
    for path in itertools.product(range(classes), repeat=steps):
        if _collapse(path, blank) == tuple(target):
            p = np.exp(sum(lp[t, c] for t, c in enumerate(path)))
            total += p
            for t, c in enumerate(path):
                grad[t, c] -= p
    if total == 0:
        return np.inf, np.zeros_like(lp)
    return -np.log(total), grad / total


RNG = np.random.default_rng(5)
T, N, C = 5, 4, 3
LOGITS = RNG.standard_normal((T, N, C))
LP = LOGITS - np.log(np.exp(LOGITS).sum(-1, keepdims=True))  # float64 log-softmax
TARGETS = np.array([[1, 2, 0], [2, 2, 0], [1, 0, 0], [1, 1, 2]])  # padded; repeats
TARGET_LENGTHS = np.array([2, 2, 0, 3])
INPUT_LENGTHS = np.array([5, 4, 3, 3])  # the last cannot align: "1 1 2" needs 4 steps


def _reference(blank=0):
    losses, grads = [], np.zeros_like(LP)
    for i in range(N):
        n = INPUT_LENGTHS[i]
        loss, g = _brute(LP[:n, i], TARGETS[i, : TARGET_LENGTHS[i]], blank)
        losses.append(loss)
        grads[:n, i] = g
    return np.array(losses), grads


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_ctc_loss_against_its_definition(reduction):
    losses, grads = _reference()
    assert np.isinf(losses[3]) and np.isfinite(losses[:3]).all()
    got = F.ctc_loss(LP, TARGETS, INPUT_LENGTHS, TARGET_LENGTHS, reduction=reduction)
    want = {
        "none": losses,
        "mean": np.mean(losses / np.maximum(TARGET_LENGTHS, 1)),
        "sum": losses.sum(),
    }[reduction]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)
    # with zero_infinity the impossible sequence counts 0, its gradient too; the others'
    # gradients are the alignments' posterior (negated), exactly
    scale = {"none": np.ones(N), "mean": 1 / (N * np.maximum(TARGET_LENGTHS, 1)), "sum": np.ones(N)}
    loss = nn.CTCLoss(reduction=reduction, zero_infinity=True)

    def f(lp):
        out = loss(lp, TARGETS, INPUT_LENGTHS, TARGET_LENGTHS)
        return nb.sum(out) if reduction == "none" else out

    g = nb.grad(f)(nb.constant(LP)).numpy()
    np.testing.assert_allclose(g, grads * scale[reduction][None, :, None], atol=1e-12)


def test_ctc_loss_forms_of_the_targets_blank_and_one_sequence():
    losses, _ = _reference()
    flat = np.concatenate([TARGETS[i, : TARGET_LENGTHS[i]] for i in range(N)])
    got = F.ctc_loss(LP, flat, INPUT_LENGTHS, TARGET_LENGTHS, reduction="none")
    np.testing.assert_allclose(got.numpy(), losses, rtol=1e-10)
    one = F.ctc_loss(LP[:, 0], TARGETS[0, :2], 5, 2, reduction="none")
    np.testing.assert_allclose(one.numpy(), losses[0], rtol=1e-10)
    # blank 2: the class indices are the targets', the blank another one
    t2 = np.array([[1, 0, 0], [0, 0, 0], [1, 0, 0], [1, 1, 0]])
    want = [_brute(LP[: INPUT_LENGTHS[i], i], t2[i, : TARGET_LENGTHS[i]], 2)[0] for i in range(N)]
    got = F.ctc_loss(LP, t2, INPUT_LENGTHS, TARGET_LENGTHS, blank=2, reduction="none")
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)


def test_ctc_loss_gradient_through_log_softmax_compiled():
    """Through a log_softmax the logits' gradient is softmax minus the posterior (as
    PyTorch's, whose own gradient in log_probs differs from the true one by the softmax,
    which the log_softmax's backward removes); the same under compile."""
    _, grads = _reference()
    x = LOGITS.astype(np.float32)

    def f(z):
        lp = F.log_softmax(z, -1)
        loss = F.ctc_loss(
            lp, TARGETS, INPUT_LENGTHS, TARGET_LENGTHS, reduction="none", zero_infinity=True
        )
        return loss.sum()

    soft = np.exp(LP)
    live = np.arange(T)[:, None] < INPUT_LENGTHS[None, :]  # (T, N): the steps each reads
    live[:, 3] = False  # the impossible sequence: zeroed, gradient too
    want = np.where(live[..., None], soft + grads, 0.0)
    for g in (nb.grad(f)(nb.constant(x)), nb.compile(nb.grad(f))(nb.constant(x))):
        np.testing.assert_allclose(g.numpy(), want, atol=2e-6)


def test_ctc_loss_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"ctc_loss: log_probs must be float \(T, N, C\)"):
        F.ctc_loss(np.zeros((5,), np.float32), TARGETS, INPUT_LENGTHS, TARGET_LENGTHS)
    with pytest.raises(ValueError, match=r"input_lengths must have shape \(4,\)"):
        F.ctc_loss(LP, TARGETS, INPUT_LENGTHS[:3], TARGET_LENGTHS)
    with pytest.raises(ValueError, match=r"blank must be a class index in \[0, 3\)"):
        F.ctc_loss(LP, TARGETS, INPUT_LENGTHS, TARGET_LENGTHS, blank=3)
    with pytest.raises(
        ValueError, match="concatenated targets have 6 entries, target_lengths sum to 7"
    ):
        F.ctc_loss(LP, np.ones(6, np.int64), INPUT_LENGTHS, TARGET_LENGTHS)
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.ctc_loss(LP, TARGETS, INPUT_LENGTHS, TARGET_LENGTHS, reduction="avg")
