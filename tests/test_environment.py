"""JAX's top-level names about devices, processes and staging (nabla/_environment.py)."""

import numpy as np
import pytest

import nabla as nb


def test_devices_and_processes_in_a_single_process():
    with nb.backend("numpy"):  # (the NumPy executor: the host only)
        assert nb.devices() == [nb.CPU()] and nb.local_devices() == [nb.CPU()]
        assert nb.device_count() == 1 and nb.local_device_count() == 1
        assert nb.default_backend() == "cpu"
    assert nb.devices("cpu") == [nb.CPU()]
    assert nb.process_index() == 0 and nb.process_count() == 1
    with pytest.raises(ValueError, match="devices: backend must be 'cpu', 'gpu' or None"):
        nb.devices("tpu")


def test_disable_jit_runs_the_python_op_by_op_and_leaves_the_cache_alone():
    seen = []

    @nb.compile
    def f(x, scale=2.0):
        seen.append(type(x).__name__)
        return x * scale

    f(np.ones(3, np.float32))
    f(np.ones(3, np.float32))
    assert f.stats.misses == 1 and f.stats.hits == 1 and len(seen) == 1
    with nb.disable_jit():
        out = f(np.ones(3, np.float32), scale=3.0)
        f(np.ones(3, np.float32))
    assert out.tolist() == [3.0] * 3 and seen[1:] == ["Tensor", "Tensor"]
    assert f.stats.misses == 1 and f.stats.hits == 1  # the cache was not consulted
    with nb.disable_jit(False):
        f(np.ones(3, np.float32))
    assert f.stats.hits == 2 and len(seen) == 3


def test_make_jaxpr_named_scope_and_make_mesh():
    shown = str(nb.make_jaxpr(lambda x: nb.sin(x) * 2.0)(np.ones(3, np.float32)))
    assert "sin" in shown and "mul" in shown
    program, shape = nb.make_jaxpr(lambda x, n: x * n, static_argnums=1, return_shape=True)(
        np.ones((2, 3), np.float32), 4
    )
    assert "mul" in str(program) and shape.shape == (2, 3)
    with nb.named_scope("block"):
        assert nb.named_call(nb.sin, name="s") is nb.sin
    with nb.ensure_compile_time_eval():
        assert (nb.ones(2) + 1).tolist() == [2.0, 2.0]
    mesh = nb.make_mesh((2, 2), ("dp", "tp"))
    assert mesh.shape == (2, 2) and mesh.axis_names == ("dp", "tp")
    assert isinstance(nb.ones(2), nb.Array)


def test_a_direct_run_hands_modules_over_as_themselves():
    """``disable_jit`` and a fallback call pass the caller's module itself (its running
    statistics update in place), with NumPy arrays as tensors."""
    x = np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32)
    bn = nb.nn.BatchNorm1d(3)
    step = nb.compile(lambda m, v: m(v))
    with nb.disable_jit():
        step(bn, x)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(0), rtol=1e-5, atol=1e-7)

    def reads_a_value(m, batch):
        out = m(batch["x"])
        out.sum().item()  # (a value read while traced: the call falls back)
        return out

    bn2 = nb.nn.BatchNorm1d(3)
    fallback = nb.compile(reads_a_value)
    for _ in range(2):
        fallback(bn2, {"x": x})
    assert fallback.stats.fallbacks == 2
    np.testing.assert_allclose(
        bn2.running_mean.numpy(), (1 - 0.9**2) * x.mean(0), rtol=1e-5, atol=1e-7
    )
