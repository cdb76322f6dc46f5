"""Completeness: every public op has a registry entry (aliases count as their target), and
every op in ``nabla.ops.OPS`` is exercised, lowered on every backend and has its rules."""

import types

import numpy as np
import pytest
from _helpers import samples, to_nb
from op_registry import REGISTRY

import nabla as nb
from nabla.ops import OPS

NOT_OPS = {
    # constructors from data / evaluation / transforms / configuration, tested elsewhere
    "constant",
    "asarray",
    "as_tensor",
    "array",
    "from_dlpack",
    "realize",
    "realize_all",
    "set_backend",
    "backend",
    "get_backend_name",
    "default_dtype",
    "default_device",
    "get_default_dtype",
    "get_default_device",
    "promote_types",
    "CPU",
    "Accelerator",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    # PyTorch's names for constant, normal, uniform and the global seed:
    # tests/nn/test_nn_porting.py
    "tensor",
    "from_numpy",
    "randn",
    "rand",
    "manual_seed",
    "get_rng_state",
    "set_rng_state",
    # Mojo kernels: tests/backends/test_custom_kernels.py (NumPy references and MAX)
    "call_custom_kernel",
    "custom_op",
    # placement and collectives: tests/sharding/ (NumPy references, VJP/JVP, every op sharded)
    "shard",
    "reshard",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "ppermute",
    "axis_index",
    "pmean",
    "broadcast",
    "distributed_broadcast",
    "shard_map",
    "visualize_sharding",
    # Python-valued queries and JAX's placement helpers: tests/ops/test_array_functions.py
    "ndim",
    "shape",
    "size",
    "broadcast_shapes",
    "device_put",
    "device_get",
    "block_until_ready",
    # the original Nabla's placement functions (x.to(device)): tests/compat/test_module_paths.py
    "to_device",
    "transfer_to",
    "cpu",
    "gpu",
    "accelerator",
}
ALIASES = {
    "around": "round",
    "astype": "cast",
    "permute_dims": "permute",
    "matrix_transpose": "transpose",
    "negate": "neg",
    "subtract": "sub",
    "multiply": "mul",
    "divide": "div",
    "power": "pow",
    "concat": "concatenate",
    "cat": "concatenate",
    "absolute": "abs",
    "floor_divide": "floor_div",
    "remainder": "mod",
    "true_divide": "div",
    "swapaxes": "swap_axes",
    "arctan2": "atan2",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "arctanh": "atanh",
    "arcsinh": "asinh",
    "conjugate": "conj",
    "arccosh": "acosh",
    "negative": "neg",
    "amax": "max",
    "amin": "min",
    "expand_dims": "unsqueeze",
    "isnan": "is_nan",
    "isinf": "is_inf",
    "fix": "trunc",
    "clamp": "clip",
    "topk": "top_k",
    "index_select": "take",
    "radians": "deg2rad",
    "degrees": "rad2deg",
    "bitwise_invert": "bitwise_not",
    "invert": "bitwise_not",
    "bitwise_left_shift": "left_shift",
    "bitwise_right_shift": "right_shift",
}


def public_ops():
    out = []
    for name in dir(nb):
        if name.startswith("_") or name in NOT_OPS:
            continue
        obj = getattr(nb, name)
        if isinstance(obj, type | types.ModuleType):
            continue
        mod = getattr(obj, "__module__", "") or type(obj).__module__
        if isinstance(obj, nb.Operation) or (callable(obj) and mod.startswith("nabla.ops")):
            out.append(name)
    return out


def test_every_public_op_has_an_entry():
    missing = [n for n in public_ops() if ALIASES.get(n, n) not in REGISTRY]
    assert not missing, f"ops without a registry entry: {missing}"


def test_registry_entries_are_public():
    extra = {"gelu_tanh", "getitem", "setitem", "at_set", "at_add"}
    extra |= {"inv", "solve", "slogdet", "det", "cholesky", "eigh", "eigvalsh"}  # nb.linalg's
    extra |= {"svd", "qr", "pinv"}
    names = set(dir(nb)) | extra
    assert not [n for n in REGISTRY if n not in names]


# ----------------------------------------------------------------------------- nabla.ops.OPS
# Primitives no public-op entry binds, and where each is tested instead.
TESTED_ELSEWHERE = {
    "to_batch": "vmap plumbing (tests/transforms/test_vmap.py)",
    "from_batch": "vmap plumbing (tests/transforms/test_vmap.py)",
    "broadcast_levels": "vmap plumbing (tests/transforms/test_vmap.py)",
    "sum_levels": "vmap plumbing (tests/transforms/test_vmap.py)",
    "stack_examples": "collectives over a named vmap (tests/transforms/test_lax.py)",
    "unstack_examples": "collectives over a named vmap (tests/transforms/test_lax.py)",
    "transfer": "x.to(device) (tests/core/test_tensor.py)",
    "random_split": "tests/ops/test_random.py",
    "random_uniform": "tests/ops/test_random.py",
    "random_normal": "tests/ops/test_random.py",
    "random_randint": "tests/ops/test_random.py",
    "random_fold_in": "tests/ops/test_random.py",
    "random_gamma_grad": "the gamma draws' derivative (tests/ops/test_random.py)",
    "igamma": "gammainc/gammaincc (tests/test_scipy.py)",
    "igamma_grad_a": "gammainc's derivative in a (tests/test_scipy.py)",
    "betainc": "betainc (tests/test_scipy.py)",
    "betainc_grad_ab": "betainc's derivatives in a and b (tests/test_scipy.py)",
    "custom_call": "custom_vjp/custom_jvp/checkpoint (tests/transforms/test_autodiff.py)",
    "custom_kernel": "call_custom_kernel / custom_op (tests/backends/test_custom_kernels.py)",
    "compiled_call": "compile's fast path (tests/transforms/test_compile.py)",
    "windows_sum": "the VJP of conv2d's and pooling's windows (tests/ops/test_windows.py)",
    "cond": "cond/switch (tests/transforms/test_control_flow.py)",
    "scan": "scan/fori_loop (tests/transforms/test_control_flow.py)",
    "matmul_residual": "a scan's kept products in reverse mode (tests/transforms/"
    "test_control_flow.py)",
    **{
        name: "placement and collectives (tests/sharding/test_collectives.py)"
        for name in (
            "shard",
            "unshard",
            "all_gather",
            "shard_slice",
            "all_to_all",
            "reduce_scatter",
            "all_reduce",
            "mesh_relabel",
            "ppermute",
            "axis_index",
            "broadcast",
            "distributed_broadcast",
        )
    },
    "mesh_to_local": "shard_map's entry (tests/sharding/test_shard_map.py)",
    "shard_constrain": "open/closed dims re-labelled by shard (tests/sharding/test_dimspec.py)",
    "mesh_from_local": "shard_map's exit (tests/sharding/test_shard_map.py)",
}


def _ops_bound_by(entry) -> set:
    """Names of the primitives the entry's samples bind (recorded as compile records)."""
    from nabla.core.state import STATE

    bound = set()
    for dtype in entry.dtypes:
        for s in samples(entry, dtype):
            old, STATE.recording = STATE.recording, []
            try:
                entry.fn(*[to_nb(a) for a in s.args], **s.kwargs)
                bound.update(node.op.name for node in STATE.recording)
            except nb.OpError as e:  # a shape that depends on the values cannot be recorded
                assert "size=" in str(e), e  # (nonzero without size)
            finally:
                STATE.recording = old
    return bound


def test_every_registered_op_is_exercised():
    import nabla.transforms.compile  # noqa: F401 - registers compiled_call
    import nabla.transforms.control_flow  # noqa: F401 - registers cond, while_loop, scan
    import nabla.transforms.custom  # noqa: F401 - registers custom_call

    bound = set()
    for entry in REGISTRY.values():
        if entry.samples is not None:
            bound |= _ops_bound_by(entry)
    missing = [n for n in OPS if n not in bound and n not in TESTED_ELSEWHERE]
    assert not missing, f"ops no registry entry exercises: {missing}"
    stale = [n for n in TESTED_ELSEWHERE if n not in OPS or n in bound]
    assert not stale, f"TESTED_ELSEWHERE names ops that are not (or no longer) elsewhere: {stale}"


def test_every_op_has_a_lowering_on_every_backend():
    from nabla.backends.max.lowerings import LOWERINGS as MAX_LOWERINGS
    from nabla.backends.max.lowerings import UNSUPPORTED
    from nabla.backends.numpy import LOWERINGS as NUMPY_LOWERINGS

    no_numpy = [op.name for op in OPS.values() if op.backend_name not in NUMPY_LOWERINGS]
    assert not no_numpy, f"ops without a numpy lowering: {no_numpy}"
    no_max = [
        op.name
        for op in OPS.values()
        if op.backend_name not in MAX_LOWERINGS and op.backend_name not in UNSUPPORTED
    ]
    assert not no_max, f"ops without a MAX lowering or an UNSUPPORTED reason: {no_max}"


def test_differentiable_ops_have_both_rules():
    for op in OPS.values():
        if op.differentiable:
            assert op.has_vjp, f"op {op.name} is differentiable but has no vjp_rule"
            assert op.jvp_source is not None, f"op {op.name} is differentiable but has no JVP"


def test_declared_linear_ops_derive_their_jvp():
    linear = {n for n, op in OPS.items() if op.jvp_source == "linear"}
    assert {"reshape", "transpose", "slice", "reduce_sum", "concatenate", "neg"} <= linear
    assert OPS["matmul"].jvp_source == "bilinear"
    # a derived rule is the op applied to the tangents: jvp of reshape is a reshape
    x = nb.constant(np.arange(6.0, dtype=np.float32))
    _, t = nb.jvp(lambda v: v.reshape(2, 3), (x,), (nb.ones_like(x),))
    np.testing.assert_array_equal(t.numpy(), np.ones((2, 3), np.float32))


def test_arity_is_checked_at_bind():
    x = nb.constant([1.0, 2.0])
    with pytest.raises(TypeError, match="op add takes 2 tensors, got 1"):
        OPS["add"].bind([x], {})


def test_one_op_per_name():
    from nabla.ops.base import Operation

    class Clash(Operation):
        name = "reshape"

    with pytest.raises(RuntimeError, match="two ops named 'reshape'"):
        Clash()
    assert type(OPS["reshape"]).__name__ == "ReshapeOp"


def test_var_and_std_take_numpy_s_ddof():
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4) ** 1.5
    t = nb.constant(x)
    np.testing.assert_allclose(nb.var(t, axis=1, ddof=1).numpy(), x.var(1, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(nb.std(t, ddof=1).numpy(), x.std(ddof=1), rtol=1e-6)
    np.testing.assert_allclose(t.var(axis=0, ddof=1).numpy(), x.var(0, ddof=1), rtol=1e-6)
    with pytest.raises(ValueError, match="ddof or correction"):
        nb.var(t, ddof=1, correction=1)


def test_axis_none_runs_over_the_flattened_array_as_numpy_s():
    """cumsum, cumprod, take, sort and argsort with ``axis=None`` flatten first (NumPy's
    and JAX's); their default axes are unchanged."""
    x = np.arange(1.0, 7.0, dtype=np.float32).reshape(2, 3)
    t = nb.constant(x)
    np.testing.assert_array_equal(nb.cumsum(t, axis=None).numpy(), np.cumsum(x, axis=None))
    np.testing.assert_array_equal(nb.cumprod(t, axis=None).numpy(), np.cumprod(x, axis=None))
    np.testing.assert_array_equal(nb.cumsum(t).numpy(), np.cumsum(x, axis=-1))
    np.testing.assert_array_equal(nb.take(t, [5, 0, -2], axis=None).numpy(), [6.0, 1.0, 5.0])
    assert nb.cumsum(nb.constant(2.0), axis=None).shape == (1,)
    g = nb.grad(lambda v: (nb.cumsum(v, axis=None) * nb.arange(6.0)).sum())(t)
    np.testing.assert_array_equal(g.numpy(), np.cumsum(np.arange(6.0)[::-1])[::-1].reshape(2, 3))


def test_a_float_to_a_python_int_power_its_dtype_cannot_hold_keeps_the_int():
    """As JAX's integer power: an odd exponent that rounds to an even one in the base's
    dtype (bfloat16 from 257, float16 from 2049, float32 from 2**24 + 1) keeps its parity
    and value (``-1 ** 2049`` was 1 in float16); the gradient follows."""
    import ml_dtypes  # noqa: PLC0415 - NumPy's bfloat16, a dependency of nabla

    h = nb.constant(np.array([-1.0, -2.0, 0.999], np.float16))
    got = (h**2049).numpy()
    assert got[0] == -1.0 and got[1] == -np.inf
    np.testing.assert_allclose(got[2], np.float16(np.float32(np.float16(0.999)) ** 2049), rtol=1e-3)
    b = nb.constant(np.array([-1.0, 0.99], ml_dtypes.bfloat16))
    want = np.float32(np.array(0.99, ml_dtypes.bfloat16)) ** 257
    np.testing.assert_allclose(nb.pow(b, 257).numpy().astype(np.float32), [-1.0, want], rtol=1e-2)
    assert (nb.constant(np.array([-1.0], np.float32)) ** (2**24 + 1)).numpy()[0] == -1.0
    big = nb.constant(np.array([-1.0, 0.5], np.float64)) ** (2**60 + 1)
    np.testing.assert_array_equal(big.numpy(), [-1.0, 0.0])
    g = nb.grad(lambda v: (v**2049).sum())(nb.constant(np.array([0.9995], np.float32)))
    np.testing.assert_allclose(g.numpy(), 2049 * np.float64(0.9995) ** 2048, rtol=1e-4)
    with pytest.raises(TypeError, match=r"left_shift: .*a bool tensor is refused"):
        nb.constant([True]) << nb.constant(np.array([1], np.int8))


@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc"])
def test_rounding_returns_integer_and_bool_inputs_unchanged(name):
    """JAX keeps the dtype (and the values) of integer and bool inputs to rounding ops."""
    fn = getattr(nb, name)
    for a in (
        np.array([1, -2, 7], np.int32),
        np.array([3, 250], np.uint8),
        np.array([True, False]),
    ):
        t = nb.constant(a)
        got = fn(t)
        assert got.dtype == t.dtype
        np.testing.assert_array_equal(got.numpy(), a)


def test_abs_of_bool_is_the_input_as_jax_s():
    """``jnp.abs`` of a bool array is that array (bool); negation of bools stays refused."""
    a = np.array([True, False])
    got = nb.abs(nb.constant(a))
    assert got.dtype == nb.bool
    np.testing.assert_array_equal(got.numpy(), a)
    assert abs(nb.constant(a)).dtype == nb.bool
    with pytest.raises(TypeError, match="neg"):
        nb.neg(nb.constant(a))


def test_repeat_takes_one_count_per_element():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    t = nb.constant(x)
    np.testing.assert_array_equal(
        nb.repeat(t, [1, 0, 2], axis=1).numpy(), np.repeat(x, [1, 0, 2], 1)
    )
    np.testing.assert_array_equal(nb.repeat(t, (2, 1), axis=0).numpy(), np.repeat(x, (2, 1), 0))
    np.testing.assert_array_equal(nb.repeat(t, np.arange(6)).numpy(), np.repeat(x, np.arange(6)))
    g = nb.grad(lambda v: nb.repeat(v, [1, 0, 2], axis=1).sum())(t)
    np.testing.assert_array_equal(g.numpy(), [[1, 0, 2], [1, 0, 2]])
    with pytest.raises(nb.OpError, match=r"repeats \[1, 2\] for axis 1 of size 3"):
        nb.repeat(t, [1, 2], axis=1)
    with pytest.raises(TypeError, match="1-D sequence of ints"):
        nb.repeat(t, [1.5, 2, 3], axis=1)


@pytest.mark.parametrize("name", ["sum", "prod", "reduce_sum"])
def test_narrow_integer_sums_and_products_widen_to_32_bits(name):
    """JAX's rule: int8/int16 (and bool) sums and products accumulate in int32 and
    uint8/uint16 ones in uint32, so 200 ones of uint8 sum to 200 instead of wrapping at 255;
    32- and 64-bit integers keep their dtype."""
    fn = getattr(nb, name)
    for dt, big, to in (
        (np.int8, 100, nb.int32),
        (np.int16, 300, nb.int32),
        (np.uint8, 200, nb.uint32),
        (np.uint16, 70000, nb.uint32),
    ):
        a = np.full((2, big), 2 if name == "prod" else 1, dt)
        if name == "prod":
            a = a[:, :10]
        want = np.prod(a.astype(np.int64), axis=1) if name == "prod" else a.sum(1, dtype=np.int64)
        got = fn(nb.constant(a), axis=1)
        assert got.dtype == to, (dt, got.dtype)
        np.testing.assert_array_equal(got.numpy(), want)
        assert getattr(nb.constant(a), "sum" if name != "prod" else "prod")().dtype == to
    for dt in (np.int32, np.uint32, np.int64, np.uint64):
        assert fn(nb.constant(np.ones(3, dt))).dtype == nb.DType(np.dtype(dt).name)
    assert fn(nb.constant(np.ones(3, bool))).dtype == nb.int32


def test_x_to_the_python_int_zero_is_ones_with_a_zero_derivative():
    """JAX's integer power: a polynomial sum of c_k * x ** k differentiates at 0 (the general
    rule gave 0 * 0 ** -1 = NaN there); a float exponent keeps the general rule."""
    poly = lambda v: sum(c * v**k for k, c in enumerate([1.0, 2.0, 3.0]))  # noqa: E731
    assert nb.grad(poly)(nb.constant(0.0)).item() == 2.0
    assert nb.grad(lambda v: v**0)(nb.constant(0.0)).item() == 0.0
    np.testing.assert_array_equal(nb.vmap(nb.grad(poly))(nb.constant([0.0, 1.0])).numpy(), [2, 8])
    got = nb.constant(np.array([2, 3], np.int16)) ** 0
    assert got.dtype == nb.int16 and got.numpy().tolist() == [1, 1]
    assert nb.jvp(lambda v: v**0, (nb.constant(0.0),), (nb.constant(1.0),))[1].item() == 0.0
