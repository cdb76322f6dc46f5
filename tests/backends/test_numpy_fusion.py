"""The NumPy executors' program rewrites (backends/numpy/fusion.py): a stride-1
convolution's input gradient computed as a convolution of the padded output gradient with
the flipped filter. Checked against the gradient's definition in NumPy, against the
unrewritten program, and (by the check mode tests/conftest.py turns on) the interpreter
against the straight-line code bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb
from nabla.backends.numpy import fusion
from nabla.core.config import CONFIG


def _input_grad(x_shape, w, g, stride, pad, dil):
    """d/dx of sum(conv2d(x, w) * g), by the definition: each output position's gradient
    spread over the taps of its window (NHWC, HWIO, ((top, bottom), (left, right)))."""
    n, h, wd, c = x_shape
    kh, kw = w.shape[:2]
    (pt, pb), (pl, pr) = pad
    dx = np.zeros((n, h + pt + pb, wd + pl + pr, c), np.float64)
    oh, ow = g.shape[1:3]
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dil, i * dil + stride * (oh - 1) + 1, stride)
            cols = slice(j * dil, j * dil + stride * (ow - 1) + 1, stride)
            dx[:, rows, cols, :] += np.einsum("nhwo,co->nhwc", g, w[i, j])
    return dx[:, pt : pt + h, pl : pl + wd, :]


@pytest.fixture
def fused_calls(monkeypatch):
    """How many times the rewritten op ran."""
    calls = []
    real = fusion.col2im_of_product

    def counted(*args, **kw):
        calls.append(kw)
        return real(*args, **kw)

    monkeypatch.setitem(fusion.FUSED, "col2im_of_product", lambda a, kw: [counted(*a, **kw)])
    return calls


CASES = [
    # (N, H, W, C, O, kernel, padding, dilation, stride, fused?)
    (4, 8, 8, 16, 32, (3, 3), ((1, 1), (1, 1)), 1, 1, True),  # the padding cut off again
    (3, 8, 7, 8, 8, (3, 3), ((0, 0), (0, 0)), 1, 1, True),  # no padding: nothing cut
    (2, 9, 9, 8, 16, (3, 3), ((2, 2), (2, 2)), 2, 1, True),  # dilated
    (2, 8, 8, 8, 8, (3, 2), ((1, 2), (0, 1)), 1, 1, True),  # asymmetric
    (2, 8, 8, 8, 16, (3, 3), ((1, 1), (1, 1)), 1, 2, False),  # stride 2: col2im
    (2, 8, 8, 3, 32, (3, 3), ((1, 1), (1, 1)), 1, 1, False),  # O > 2C: col2im is cheaper
]


@pytest.mark.parametrize("n,h,w,c,o,k,pad,dil,stride,fused", CASES)
def test_conv_input_grad(fused_calls, n, h, w, c, o, k, pad, dil, stride, fused):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    wt = rng.standard_normal((*k, c, o)).astype(np.float32)

    def f(x, wt):
        y = nb.conv2d(x, wt, padding=pad, stride=stride, dilation=dil)
        return nb.sum(y * g)

    oh = (h + sum(pad[0]) - dil * (k[0] - 1) - 1) // stride + 1
    ow = (w + sum(pad[1]) - dil * (k[1] - 1) - 1) // stride + 1
    g = nb.constant(rng.standard_normal((n, oh, ow, o)).astype(np.float32))
    step = nb.compile(nb.grad(f, argnums=(0, 1)))
    for _ in range(3):  # interpreted, then as straight-line code
        dx, dw = step(nb.constant(x), nb.constant(wt))
    gn = g.numpy().astype(np.float64)
    want = _input_grad(x.shape, wt.astype(np.float64), gn, stride, pad, dil)
    np.testing.assert_allclose(dx.numpy(), want, rtol=1e-4, atol=1e-4)
    assert bool(fused_calls) == fused


def test_same_values_as_the_unrewritten_program(monkeypatch):
    """Only the order of the additions changes: float32 rounding apart, the same values,
    and the filter gradient (not rewritten) bit for bit."""
    rng = np.random.default_rng(1)
    x = nb.constant(rng.standard_normal((8, 8, 8, 16)).astype(np.float32))
    wt = nb.constant(rng.standard_normal((3, 3, 16, 24)).astype(np.float32))

    def f(x, wt):
        return nb.sum(nb.tanh(nb.conv2d(x, wt, padding=1)))

    def grads():
        step = nb.compile(nb.grad(f, argnums=(0, 1)))
        for _ in range(3):
            out = step(x, wt)
        return [v.numpy() for v in out]

    dx, dw = grads()
    monkeypatch.setattr(CONFIG, "numpy_fusion", False)  # NABLA_NUMPY_FUSION=0
    dx0, dw0 = grads()
    assert not np.array_equal(dx, dx0)  # the rewrite ran: its additions round differently
    np.testing.assert_allclose(dx, dx0, rtol=1e-5, atol=1e-5 * np.abs(dx0).max())
    assert np.array_equal(dw, dw0)


def test_vmapped_and_per_example(fused_calls):
    """Under vmap the product's rows carry the batch dims first; the rewrite takes them."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 2, 6, 6, 8)).astype(np.float32)
    wt = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)

    def f(x, wt):
        return nb.sum(nb.conv2d(x, wt, padding=1) ** 2)

    step = nb.compile(nb.vmap(nb.grad(f), in_axes=(0, None)))
    for _ in range(3):
        dx = step(nb.constant(x), nb.constant(wt))
    for b in range(3):
        y = nb.conv2d(nb.constant(x[b]), nb.constant(wt), padding=1).numpy().astype(np.float64)
        want = _input_grad(x[b].shape, wt.astype(np.float64), 2 * y, 1, ((1, 1), (1, 1)), 1)
        np.testing.assert_allclose(dx.numpy()[b], want, rtol=1e-4, atol=1e-4)
    assert fused_calls and fused_calls[0]["lead"] == (3, 2)
