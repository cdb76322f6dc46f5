"""The original Nabla's module paths and small spellings, each the object of ours itself:
``nabla.ops.communication``, ``nabla.ops.control_flow``, ``nabla.config``,
``nabla.core.trace``/``GRAPH``/``Tensor``, the op namespace ``nabla.ops``, ``trace(fn, *args)``,
``Tensor.numel()``, ``grad`` of a single-element output, ``nb._clear_caches()`` and the
conv/pool argument errors in the original's words."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import nabla as nb
from nabla.runtime.graph import GRAPH


def test_ops_communication_is_our_collectives():
    from nabla.ops import communication
    from nabla.ops.communication import (
        all_gather,
        all_reduce,
        all_to_all,
        axis_index,
        broadcast,
        gather_all_axes,
        pmean,
        ppermute,
        reduce_scatter,
        reshard,
        shard,
        to_device,
        transfer_to,
    )

    assert communication.ppermute is nb.ppermute is ppermute
    for ours, theirs in [
        (nb.all_gather, all_gather),
        (nb.all_reduce, all_reduce),
        (nb.all_to_all, all_to_all),
        (nb.axis_index, axis_index),
        (nb.broadcast, broadcast),
        (nb.pmean, pmean),
        (nb.reduce_scatter, reduce_scatter),
        (nb.reshard, reshard),
        (nb.shard, shard),
    ]:
        assert ours is theirs
    assert transfer_to is to_device and communication.gather_all_axes is gather_all_axes
    assert nb.ops.shard is nb.shard  # ``from nabla.ops import shard``


def test_gather_all_axes_makes_a_sharded_value_whole_on_every_device():
    from nabla.ops.communication import gather_all_axes

    mesh = nb.DeviceMesh("m", (2, 2), ("x", "y"))
    a = np.arange(24.0, dtype=np.float32).reshape(4, 6)
    t = nb.shard(nb.constant(a), mesh, nb.P("x", "y"))
    g = gather_all_axes(t)
    assert g.sharding == nb.shard(nb.constant(a), mesh, nb.P()).sharding  # replicated
    for s in g.addressable_shards:
        np.testing.assert_array_equal(s.data, a)
    np.testing.assert_array_equal(g.numpy(), a)
    plain = nb.constant(a)
    assert gather_all_axes(plain) is plain
    # differentiable: the gradient of a sum through the gather is all ones
    gx = nb.grad(lambda v: gather_all_axes(v).sum())(t)
    np.testing.assert_array_equal(gx.numpy(), np.ones_like(a))


def test_ops_control_flow_module():
    import nabla.ops.control_flow as cf
    from nabla.ops.control_flow import cond, scan, where, while_loop

    from nabla.ops import control_flow

    assert cf is control_flow is sys.modules["nabla.ops.control_flow"]
    assert (cond, scan, where, while_loop) == (nb.cond, nb.scan, nb.where, nb.while_loop)
    assert cf.fori_loop is nb.fori_loop and cf.switch is nb.switch
    out = while_loop(lambda c: c < 5, lambda c: c + 2, nb.constant(0))
    assert int(out.item()) == 6


def test_ops_namespace_holds_the_public_functions():
    from nabla import ops
    from nabla.ops import UnaryOperation, call_custom_kernel

    assert UnaryOperation is nb.UnaryOperation and call_custom_kernel is nb.call_custom_kernel
    for name in ("relu", "matmul", "reduce_sum", "where", "stack", "gather", "constant"):
        assert getattr(ops, name) is getattr(nb, name), name
    # random draws as at the top level; the key-based functions stay in ops.random
    assert ops.normal is nb.normal and ops.uniform is nb.uniform and ops.split is nb.split
    assert ops.random.split is not nb.split
    assert set(ops.__all__) <= set(dir(ops))


def test_core_trace_graph_and_tensor():
    from nabla.core import GRAPH as core_graph
    from nabla.core import Tensor, trace

    assert trace is nb.trace and core_graph is GRAPH and Tensor is nb.Tensor
    x, y = nb.ones((2,)), nb.ones((2,))

    def f(a, b):
        return nb.sin(a) * b

    # the original's form records at once; ours returns the recording function
    assert str(trace(f, x, y)) == str(nb.trace(f)(x, y))
    assert "sin" in str(trace(f, x, b=y))
    with pytest.raises(TypeError, match="keyword arguments"):
        nb.trace(f, b=y)


def test_nabla_config_reads_and_writes_our_settings():
    import nabla.config as nabla_config
    from nabla import config
    from nabla.core.config import CONFIG

    assert config is nabla_config
    old = CONFIG.eager_graph
    try:
        assert nabla_config.EAGER_MAX_GRAPH is old
        nabla_config.EAGER_MAX_GRAPH = True
        assert CONFIG.eager_graph is True
        y = nb.ones((2, 2)) @ nb.ones((2, 2))  # each op checked at the call
        np.testing.assert_array_equal(y.numpy(), np.full((2, 2), 2.0))
        nabla_config.EAGER_MAX_GRAPH = False
        assert CONFIG.eager_graph is False and nabla_config.EAGER_MAX_GRAPH is False
        with pytest.raises(TypeError, match="EAGER_MAX_GRAPH"):
            nabla_config.EAGER_MAX_GRAPH = "yes"
    finally:
        CONFIG.eager_graph = old
    assert nabla_config.get_backend_name is nb.get_backend_name


def test_the_paths_import_in_a_fresh_process():
    """``import nabla.ops.control_flow`` etc. as a script's first line, before ``nabla``."""
    code = (
        "import nabla.ops.control_flow as cf, nabla.config as c\n"
        "from nabla.core import trace, GRAPH\n"
        "from nabla.ops import communication, shard, UnaryOperation, call_custom_kernel\n"
        "import nabla as nb\n"
        "assert cf.scan is nb.scan and trace is nb.trace and shard is nb.shard\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_numel():
    assert nb.ones((2, 3, 4)).numel() == 24
    assert nb.constant(1.0).numel() == 1
    assert nb.zeros((0, 3)).numel() == 0


@pytest.mark.parametrize("shape", [(1,), (1, 1)])
def test_grad_of_a_single_element_output(shape):
    x = nb.constant(np.array([1.0, 2.0, 3.0], dtype=np.float32))

    def f(v):
        return nb.reshape((v * v).sum(), shape)

    np.testing.assert_allclose(nb.grad(f)(x).numpy(), [2.0, 4.0, 6.0])
    value, g = nb.value_and_grad(f)(x)
    assert value.shape == shape and float(value.numpy().ravel()[0]) == 14.0
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0, 6.0])
    # under vmap: per-example gradients of a (1,)-shaped output
    xs = nb.constant(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    np.testing.assert_allclose(nb.vmap(nb.grad(f))(xs).numpy(), 2 * xs.numpy())
    with pytest.raises(TypeError, match=r"single-element.*\(2,\)"):
        nb.grad(lambda v: v * 2.0)(nb.ones((2,)))


def test_clear_caches():
    y = nb.ones((3,)) + 1.0
    np.testing.assert_array_equal(y.numpy(), [2.0, 2.0, 2.0])
    assert GRAPH.cache
    nb._clear_caches()
    assert not GRAPH.cache
    np.testing.assert_array_equal(y.numpy(), [2.0, 2.0, 2.0])  # computed values stay
    np.testing.assert_array_equal((nb.ones((3,)) * 3.0).numpy(), [3.0, 3.0, 3.0])
    # JAX's nb.clear_caches() also forgets every compiled function's traces
    double = nb.compile(lambda v: v * 2)
    double(nb.ones((3,)))
    assert double.stats.cache_size == 1
    nb.clear_caches()
    assert double.stats.cache_size == 0 and not GRAPH.cache
    np.testing.assert_array_equal(double(nb.ones((3,))).numpy(), [2.0, 2.0, 2.0])


X = nb.ones((1, 5, 5, 3))
W = nb.ones((3, 3, 3, 4))


@pytest.mark.parametrize(
    "call,pattern",
    [
        (lambda: nb.conv2d(X, W, stride=(0, 1)), r"conv2d: stride values must be > 0"),
        (lambda: nb.conv2d(X, W, padding=(1, -1, 0, 0)), r"conv2d: padding values must be >= 0"),
        (lambda: nb.conv2d(X, nb.ones((3, 3, 2, 4))), r"conv2d: Input channels 3.*\(3, 3, 2, 4\)"),
        (lambda: nb.conv2d(X, W, bias=nb.ones((5,))), r"bias size 5 does not match 4 output"),
        (
            lambda: nb.conv2d_transpose(X, nb.ones((3, 3, 4, 3)), stride=(1, 0)),
            r"conv2d_transpose: stride values must be > 0",
        ),
        (
            lambda: nb.conv2d_transpose(X, nb.ones((3, 3, 4, 3)), padding=(0, -1, 0, 0)),
            r"conv2d_transpose: padding values must be >= 0",
        ),
        (
            lambda: nb.conv2d_transpose(X, nb.ones((3, 3, 3, 2)), bias=nb.ones((5,))),
            r"conv2d_transpose: bias size 5 does not match 2 output channels",
        ),
        (
            lambda: nb.avg_pool2d(X, kernel_size=(0, 2)),
            r"avg_pool2d: kernel_size values must be > 0",
        ),
        (lambda: nb.max_pool2d(X, 2, stride=(1, 0)), r"max_pool2d: stride values must be > 0"),
        (
            lambda: nb.avg_pool2d(X, 2, padding=(1, -1, 0, 0)),
            r"avg_pool2d: padding values must be >= 0",
        ),
    ],
)
def test_conv_and_pool_argument_errors_in_the_originals_words(call, pattern):
    """ValueErrors (``nb.OpError``) whose text holds the original's phrase and ours: the op,
    the bound and the value passed. Arguments are checked before shapes."""
    with pytest.raises(ValueError, match=pattern) as info:
        call()
    assert isinstance(info.value, nb.OpError)


def test_collective_keywords_of_the_original():
    mesh = nb.DeviceMesh("m", (4,), ("x",))
    a = np.arange(8.0, dtype=np.float32)
    t = nb.shard(nb.constant(a), mesh, nb.P("x"))
    perm = [(i, (i + 1) % 4) for i in range(4)]
    np.testing.assert_array_equal(
        nb.ppermute(t, permutation=perm).numpy(), nb.ppermute(t, perm).numpy()
    )
    np.testing.assert_array_equal(nb.pmean(t, axis_name="x").numpy(), nb.pmean(t, "x").numpy())
    with pytest.raises(TypeError, match="not both"):
        nb.ppermute(t, perm, permutation=perm)
    with pytest.raises(TypeError, match="not both"):
        nb.pmean(t, "x", axis_name="x")
    with pytest.raises(TypeError, match="missing"):
        nb.ppermute(t)


def test_to_numpy_all_and_adam_beta_spellings():
    a, b = nb.ones((2,)) * 2.0, nb.arange(3)
    x, y = nb.Tensor.to_numpy_all(a, b)
    assert x.tolist() == [2.0, 2.0] and y.tolist() == [0, 1, 2]
    opt = nb.nn.optim.AdamW({"w": nb.ones((2,))}, lr=1e-3, betas=(0.8, 0.95))
    assert (opt.beta1, opt.beta2) == (0.8, 0.95)


def test_max_dtypes_are_read_as_ours():
    """The original's users pass MAX's ``DType`` members: read by name as ours."""
    max_dtype = pytest.importorskip("max.dtype")
    t = nb.Tensor.constant(np.ones(3), dtype=max_dtype.DType.float16)
    assert t.dtype is nb.float16
    assert nb.cast(t, max_dtype.DType.int32).dtype is nb.int32
    assert nb.zeros((2,), dtype=max_dtype.DType.bool).dtype is nb.DType.bool
    with pytest.raises(TypeError, match="unsupported dtype float8_e5m2"):
        nb.ones((2,), dtype=max_dtype.DType.float8_e5m2)
    # and compared with ours as equal, both ways, with the same hash (the original's tests
    # set ``nb.DType = max.dtype.DType`` and assert ``w.dtype == nb.DType.float32``)
    mx = max_dtype.DType
    assert t.dtype == mx.float16 and mx.float16 == t.dtype and not (t.dtype != mx.float16)
    assert t.dtype != mx.float32 and mx.bool == nb.bool_ and nb.int32 != mx.int64
    assert {nb.float32: "f"}[mx.float32] == "f" and hash(mx.int8) == hash(nb.int8)


def test_original_sharding_spellings():
    mesh = nb.DeviceMesh("m", (2, 4), ("x", "y"))
    assert mesh.get_axis_size("y") == mesh.axis_size("y") == 4
    t = nb.shard(np.ones((4, 8), np.float32), mesh, [nb.DimSpec(["x"]), nb.DimSpec([])])
    assert not t.sharding.is_fully_replicated()
    assert nb.all_gather(t, 0).sharding.is_fully_replicated()
    assert t.sharding.dim_specs[0].axes == ["x"] and t.sharding.dim_specs[1].axes == []


def test_sharding_spec_module_path_and_the_original_s_sharding_spec_arguments():
    """``from nabla.core.sharding.spec import ...`` (the original's test helpers start so;
    33 of its unit-test files stopped at that import) and its ShardingSpec dataclass's
    fields: ``(mesh, dim_specs, replicated_axes, partial_sum_axes)``."""
    from nabla.core.sharding.spec import DeviceMesh, DimSpec, P, ShardingSpec

    assert DeviceMesh is nb.DeviceMesh and P is nb.P and ShardingSpec is nb.ShardingSpec
    assert DimSpec is nb.DimSpec
    mesh = nb.DeviceMesh("m", (2, 2), ("dp", "tp"))
    summed = ShardingSpec(mesh, [(), ()], partial_sum_axes={"tp"})
    assert summed.partial_kinds == {"tp": "sum"} and summed.partial_sum_axes == {"tp"}
    kept = ShardingSpec(mesh, [("dp",), ()], {"tp"})  # third: replicated axes, as there
    assert kept.fixed_replicated == ("tp",) and not kept.partial
    both = ShardingSpec(mesh, [("dp",), ()], set(), {"tp"})
    assert both.partial_sum_axes == {"tp"} and both != kept
    assert ShardingSpec(mesh, dim_specs=[(), ()]) == ShardingSpec(mesh, [(), ()])
    assert ShardingSpec(mesh, [(), ()], {"tp": "max"}).partial_kinds == {"tp": "max"}  # ours


def test_the_original_s_placement_functions_at_the_top_level():
    """``to_device``/``transfer_to`` (with the original's ``sharding=`` and no-device forms),
    ``cpu``, ``gpu`` and ``accelerator`` are in the original's ``__all__``."""
    x = nb.ones(3)
    assert nb.to_device is nb.transfer_to and nb.to_device(x) is x
    assert nb.cpu(x).device == nb.CPU() and nb.to_device(x, nb.CPU()) is x
    mesh = nb.DeviceMesh("m", (2,), ("d",))
    laid = nb.to_device(nb.ones(4), sharding=nb.ShardingSpec(mesh, [("d",)]))
    assert laid.sharding.dims == (("d",),)
    with pytest.raises(ValueError, match="device or sharding, not both"):
        nb.to_device(x, nb.CPU(), sharding=laid.sharding)
    try:
        on_gpu = nb.gpu(x)
    except RuntimeError as e:  # (a machine without one: the error says so)
        assert "accelerator" in str(e)
    else:
        assert on_gpu.device == nb.Accelerator(0) and nb.accelerator(x, 0).device == on_gpu.device
