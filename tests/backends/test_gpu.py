"""The MAX backend on an NVIDIA GPU: the parity graphs of ``test_max.py`` built with every
tensor on ``nb.Accelerator(0)``, compared with the NumPy backend on the CPU; training, the
auto tier and a sharded program on the one GPU. Skipped (with the reason) on a machine
without an accelerator, which is where CI runs: run them on a GPU machine with
``python -m pytest -vv -m gpu tests/backends/test_gpu.py``. Cold, MAX compiles GPU programs
slowly (an H100 took 16-67 s for programs of 2-14 ops, and over 150 s for the 114-op float
parity graph): allow several minutes per parity graph on empty caches.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("max.graph")

import nabla as nb  # noqa: E402
from nabla.backends import max as mx  # noqa: E402

pytestmark = [
    pytest.mark.max,
    pytest.mark.gpu,
    pytest.mark.skipif(mx.accelerator_count() == 0, reason="needs an NVIDIA GPU that MAX sees"),
]

import test_max  # noqa: E402 - the parity graphs (tests/backends is on sys.path)

GPU = nb.Accelerator(0) if mx.accelerator_count() else None


def _host(t):
    return t.cpu().numpy() if t.device != nb.CPU() else t.numpy()


def run_on_gpu(build, tol=None, drop=()):
    """``build() -> {name: Tensor}`` on NumPy (CPU) and on MAX with every new tensor on
    the GPU (but the outputs named in ``drop``); the outputs must agree."""
    with nb.backend("numpy"):
        ref = build()
        nb.realize(*ref.values())
        ref = {k: v.numpy() for k, v in ref.items() if k not in drop}
    before = mx.stats()
    with nb.backend("max"), nb.default_device(GPU):
        got = {k: v for k, v in build().items() if k not in drop}
        on_gpu = [k for k, v in got.items() if v.device == GPU]
        nb.realize(*got.values())
        got = {k: _host(v) for k, v in got.items()}
    after = mx.stats()
    assert after["compiles"] + after["disk_hits"] > before["compiles"] + before["disk_hits"]
    assert on_gpu, "nothing ran on the GPU"
    bad = test_max.differences(ref, got, tol)
    assert not bad, "the GPU differs from NumPy:\n" + "\n".join(bad)


# GPU kernels may round transcendental functions differently from the CPU's
GPU_TOL = {"tan": (1e-4, 1e-5), "pow": (1e-4, 1e-5), "exp": (1e-5, 1e-5)}


@pytest.mark.parametrize(
    "graph", ["float_graph", "int_graph", "gather_graph", "control_graph", "sharded_graph"]
)
def test_parity_graph_on_the_gpu(graph):
    run_on_gpu(getattr(test_max, graph), tol=GPU_TOL)


def test_low_precision_graph_on_the_gpu():
    tol = {"cumsum_float16": (5e-3, 1e-2), "sum_float16": (5e-3, 1e-2)}
    tol.update({"cumsum_bfloat16": (3e-2, 5e-2), "sum_bfloat16": (3e-2, 5e-2)})
    tol.update({"matmul_bfloat16": (3e-2, 5e-2), "atan_float64": (1e-12, 1e-14)})
    tol.update({"ew_float64": (1e-12, 1e-12), "erf_float64": (1e-12, 1e-14)})
    # float64 sin has no NVIDIA kernel in MAX: refused up front (next test)
    run_on_gpu(test_max.dtype_graph, tol=tol, drop=("sin_float64",))


def test_float64_trigonometry_is_refused_on_the_gpu_by_name():
    x = nb.constant(np.linspace(0, 1, 8), device=GPU)
    with nb.backend("max"), pytest.raises(mx.UnsupportedOnMax, match="sin.*float64.*gpu"):
        nb.sin(x).cpu().numpy()


def test_training_on_the_gpu_equals_the_cpu():
    """A compiled MLP training step with parameters and data on the GPU: the losses of five
    steps equal the NumPy backend's on the CPU; the parameters stay on the GPU."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 32)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((32, 4)) * 0.3).astype(np.float32)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    y = rng.standard_normal((64, 4)).astype(np.float32)

    def loss_fn(p, x, y):
        return nb.mean((nb.tanh(x @ p[0]) @ p[1] - y) ** 2)

    @nb.compile
    def step(p, x, y):
        loss, g = nb.value_and_grad(loss_fn)(p, x, y)
        return [w - 0.1 * d for w, d in zip(p, g)], loss

    def train(device, backend):
        with nb.backend(backend):
            p = [nb.constant(w1, device=device), nb.constant(w2, device=device)]
            xs, ys = nb.constant(x, device=device), nb.constant(y, device=device)
            losses = []
            for _ in range(5):
                p, loss = step(p, xs, ys)
                losses.append(float(_host(loss)))
            return losses, p

    want, _ = train(nb.CPU(), "numpy")
    got, params = train(GPU, "max")
    assert all(w.device == GPU for w in params)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert got[-1] < got[0]


def test_auto_runs_gpu_values_on_max_and_moves_them_back():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with nb.backend("auto"):
        x = nb.constant(a).to(GPU)
        y = nb.softmax(x * 0.5, axis=1)
        assert y.device == GPU
        back = y.to(nb.CPU()) + 1.0
        e = np.exp(a * 0.5 - (a * 0.5).max(1, keepdims=True))
        np.testing.assert_allclose(back.numpy(), e / e.sum(1, keepdims=True) + 1, rtol=1e-5)


def test_nn_module_step_on_the_gpu():
    """``nn.Linear`` layers whose parameters live on the GPU, trained with AdamW."""
    nb.random.seed(0)
    with nb.default_device(GPU), nb.backend("max"):
        model = nb.nn.Sequential(nb.nn.Linear(8, 16), nb.nn.ReLU(), nb.nn.Linear(16, 1))
        assert all(p.device == GPU for p in model.parameters())
        opt = nb.nn.optim.AdamW(model, lr=1e-2)
        x = nb.constant(np.linspace(-1, 1, 32 * 8, dtype=np.float32).reshape(32, 8))
        y = nb.sin(x.sum(axis=1, keepdims=True))

        def loss_fn(m):
            return nb.mean((m(x) - y) ** 2)

        losses = []
        for _ in range(20):
            loss, grads = nb.value_and_grad(loss_fn)(model)
            opt.step(grads)
            losses.append(float(_host(loss)))
    assert losses[-1] < 0.5 * losses[0], losses


def test_custom_mojo_kernel_on_the_gpu():
    """The example's elementwise ``softplus`` kernel (written with ``foreach``, so it runs on
    any target) on GPU tensors; its gradient goes through the ``softplus_jvp`` kernel there."""
    import test_custom_kernels as kernels  # noqa: PLC0415 - defines the custom ops

    xn = kernels.X
    x = nb.constant(xn, device=GPU)
    with nb.backend("max"):
        y = kernels.softplus(x)
        g = nb.grad(lambda a: nb.sum(kernels.softplus(a) ** 2))(x)
        assert y.device == GPU and g.device == GPU
        got_y, got_g = _host(y), _host(g)
    sp = np.logaddexp(0, xn)
    np.testing.assert_allclose(got_y, sp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_g, 2 * sp / (1 + np.exp(-xn)), rtol=1e-5, atol=1e-6)
