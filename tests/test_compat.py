"""Code written for the original Nabla (and hand-offs with NumPy, JAX and PyTorch) runs
unchanged: DLPack in both directions, the original's spellings, and the checks it expects.

JAX and PyTorch cases run where those packages are installed; the NumPy ones always run.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import nabla as nb

HAS_JAX = importlib.util.find_spec("jax") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None
DTYPES = ["float32", "float64", "float16", "int32", "int64", "int8", "uint8", "bool"]


def _values(dtype, shape=(2, 3)):
    a = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) - 2
    return (a > 0) if dtype == "bool" else a.astype(dtype)


# ----------------------------------------------------------------------------- DLPack
@pytest.mark.parametrize("dtype", DTYPES)
def test_dlpack_round_trip_with_numpy(dtype):
    a = _values(dtype)
    t = nb.Tensor.from_dlpack(a)  # the original's spelling, beside nb.from_dlpack
    assert t.dtype == nb.DType[dtype] and t.shape == a.shape
    back = np.from_dlpack(t)
    np.testing.assert_array_equal(back, a)
    np.testing.assert_array_equal(np.from_dlpack(nb.from_dlpack(back)), a)


def test_dlpack_keeps_0d_tensors_0d_and_exports_views():
    s = nb.constant(np.float32(3.5))
    assert np.from_dlpack(s).shape == ()
    x = nb.constant(_values("float32", (3, 4)))
    for view, want in (
        (x.T, _values("float32", (3, 4)).T),
        (x[:, ::2], _values("float32", (3, 4))[:, ::2]),
    ):
        np.testing.assert_array_equal(np.from_dlpack(view), want)  # non-contiguous results


def test_dlpack_exports_a_copy_unless_the_consumer_asks_for_none():
    """A tensor's value is read-only; PyTorch ignores DLPack 1.0's read-only flag, and
    ``torch.from_dlpack(t)[0] = v`` had changed the tensor (and a lazy op reading it)."""
    ro = _values("float32")
    ro.flags.writeable = False
    t = nb.constant(ro)
    got = np.from_dlpack(t)
    got[0, 0] = 100.0  # a writable copy: the tensor keeps its value
    np.testing.assert_array_equal(t.numpy(), ro)
    shared = np.from_dlpack(t, copy=False)  # zero-copy, read-only
    assert not shared.flags.writeable and np.shares_memory(shared, t.numpy())
    cap = t.__dlpack__(max_version=(1, 0))
    assert type(cap).__name__ == "PyCapsule"
    with pytest.raises(BufferError, match=r"bfloat16 tensor .*cast first"):
        np.from_dlpack(t.cast(nb.bfloat16))
    g = nb.grad(lambda v: (v * 1.0).sum())(t)  # a gradient passing a cotangent through
    np.testing.assert_array_equal(np.from_dlpack(g), np.ones_like(ro))


def test_copies_of_a_tensor_sharing_an_array_own_their_memory():
    """``from_dlpack`` shares the producer's array; ``clone``, ``nb.copy``, ``copy.copy``,
    ``copy.deepcopy`` and a loaded ``state_dict`` copy it at the call, as PyTorch's do, so a
    later write to the array (a reused staging buffer, a model trained on) changes none of
    them. They shared it before and followed every write."""
    import copy

    src = np.arange(4, dtype=np.float32)
    s = nb.from_dlpack(src)
    assert np.shares_memory(s.numpy(), src)
    view = s.reshape(2, 2).realize()  # a view of the array: shared too
    copies = [s.clone(), nb.copy(s), copy.copy(s), copy.deepcopy(s), view.clone()]
    copies += [s.reshape(2, 2).clone(), s[0:4].clone(), s.data.clone()]  # lazy views: now
    staged = []
    for i in range(3):  # one staging buffer, refilled per batch
        src[:] = i
        staged.append(s.clone())
    src[0] = 99.0
    for c in copies:
        np.testing.assert_array_equal(c.numpy().ravel(), [0.0, 1.0, 2.0, 3.0])
    assert [float(b.numpy()[1]) for b in staged] == [0.0, 1.0, 2.0]
    assert s.numpy()[0] == 99.0  # the shared tensor itself follows, as documented

    w = nb.from_dlpack(src.reshape(2, 2))
    w.requires_grad = True
    g = nb.grad(lambda v: (v.clone() * 3.0).sum())(w)  # clone stays differentiable
    np.testing.assert_array_equal(g.numpy(), np.full((2, 2), 3.0))

    lin = nb.nn.Linear(2, 1)
    weight, bias = np.ones((2, 1), np.float32), np.zeros(1, np.float32)  # (in, out)
    lin.load_state_dict({"weight": nb.from_dlpack(weight), "bias": nb.from_dlpack(bias)})
    weight[:] = 5.0
    bias[:] = 1.0
    np.testing.assert_array_equal(lin(nb.ones((1, 2))).numpy(), [[2.0]])


def test_numpy_views_of_a_tensor_cannot_be_made_writeable():
    """``t.numpy()``, ``np.asarray(t)`` and a shard's ``.data`` are read-only views, and
    ``setflags(write=True)`` is refused, as on JAX's arrays: it was accepted, and a write
    then changed the tensor, its copies and a deep-copied model."""
    import ml_dtypes

    t = nb.constant(np.arange(4, dtype=np.float32))
    mesh = nb.DeviceMesh("m", (2,), ("d",))
    views = [t.numpy(), np.asarray(t), t.T.numpy(), nb.shard(t, mesh, nb.P("d"))]
    views[-1] = views[-1].addressable_shards[0].data
    views.append(t.cast(nb.bfloat16).numpy())
    for v in views:
        with pytest.raises(ValueError, match="WRITEABLE"):
            v.setflags(write=True)
    assert views[-1].dtype == ml_dtypes.bfloat16 and views[0].base is not None
    np.testing.assert_array_equal(t.numpy(), [0.0, 1.0, 2.0, 3.0])


@pytest.mark.skipif(not HAS_JAX, reason="jax is not installed")
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool", "float16"])
def test_dlpack_round_trip_with_jax(dtype):
    import jax.numpy as jnp

    a = jnp.asarray(_values(dtype))
    t = nb.from_dlpack(a)  # a read-only import
    back = jnp.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(a))
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(t.T)), np.asarray(a).T)
    assert jnp.from_dlpack(nb.constant(np.float32(2.0))).shape == ()
    if dtype == "float32":
        g = nb.grad(lambda v: (v * 3.0).sum())(t)
        np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(g)), np.full((2, 3), 3.0))


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_dlpack_round_trip_with_torch(dtype):  # pragma: no cover - needs torch
    import torch

    a = torch.from_numpy(_values(dtype))
    t = nb.Tensor.from_dlpack(a)
    np.testing.assert_array_equal(torch.from_dlpack(t).numpy(), a.numpy())
    np.testing.assert_array_equal(torch.from_dlpack(t[:, ::2]).numpy(), a.numpy()[:, ::2])
    assert torch.from_dlpack(nb.constant(np.float32(2.0))).shape == ()
    if dtype == "float32":
        torch.from_dlpack(t)[0, 0] = 100.0  # a copy: PyTorch ignores the read-only flag
        np.testing.assert_array_equal(t.numpy(), a.numpy())
        bf = torch.arange(4, dtype=torch.bfloat16) / 3
        got = nb.constant(bf)  # its bits: NumPy cannot read a PyTorch bfloat16 tensor
        assert got.dtype == nb.bfloat16
        np.testing.assert_array_equal(got.numpy().astype(np.float32), bf.float().numpy())
        with pytest.raises(TypeError, match=r"from_dlpack: NumPy cannot import bfloat16"):
            nb.from_dlpack(bf)


# ----------------------------------------------------------------------------- spellings
def test_transforms_are_importable_as_functions():
    from nabla.transforms import compile, grad, vmap

    assert compile is nb.compile and grad is nb.grad and vmap is nb.vmap
    f = compile(lambda x: x * 2.0)
    np.testing.assert_array_equal(f(nb.constant([1.0, 2.0])).numpy(), [2.0, 4.0])


def test_split_and_unbind_return_tuples_chunk_a_list_as_the_original():
    x = nb.arange(12).reshape(4, 3)
    assert isinstance(nb.split(x, 2), tuple) and isinstance(x.split(2), tuple)
    assert isinstance(nb.chunk(x, 2), list)
    parts = nb.unbind(x)
    assert isinstance(parts, tuple) and [p.shape for p in parts] == [(3,)] * 4


def test_tensor_constant_constructor():
    t = nb.Tensor.constant([1.0, 2.0], dtype=nb.float64)
    assert t.dtype == nb.float64 and t.tolist() == [1.0, 2.0]


# ----------------------------------------------------------------------------- checks
@pytest.mark.parametrize(
    "call,words",
    [
        (lambda: nb.conv2d(nb.ones((1, 5, 5, 1)), nb.ones((3, 3, 1, 1)), stride=0), "stride"),
        (lambda: nb.conv2d(nb.ones((1, 5, 5, 1)), nb.ones((3, 3, 1, 1)), dilation=0), "dilation"),
        (
            lambda: nb.conv2d_transpose(nb.ones((1, 5, 5, 1)), nb.ones((3, 3, 1, 1)), stride=0),
            "stride",
        ),
        (lambda: nb.max_pool2d(nb.ones((1, 5, 5, 1)), 0), "kernel_size"),
        (lambda: nb.avg_pool2d(nb.ones((1, 5, 5, 1)), 2, stride=0), "stride"),
        (lambda: nb.avg_pool2d(nb.ones((1, 5, 5, 1)), (2, 0)), "kernel_size"),
    ],
)
def test_zero_strides_dilations_and_kernels_are_clear_errors(call, words):
    with pytest.raises(nb.OpError, match=words) as info:
        call()
    assert ">= 1" in str(info.value)


def test_a_boolean_mask_must_match_the_indexed_dims():
    x = nb.arange(3)
    with pytest.raises(IndexError, match=r"boolean mask of shape \(2,\).*\(3,\)"):
        x[nb.constant([True, False])]
    with pytest.raises(IndexError, match="boolean mask"):
        x.at[nb.constant([True, False])].set(5)
    m = nb.arange(6).reshape(2, 3)
    with pytest.raises(IndexError, match=r"\(2, 2\).*\(2, 3\)"):
        m[nb.constant([[True, False], [False, True]])]
    # a matching mask, also after an ellipsis, still works
    np.testing.assert_array_equal(x[nb.constant([True, False, True])].numpy(), [0, 2])
    np.testing.assert_array_equal(
        m[..., nb.constant([False, True, True])].numpy(), [[1, 2], [4, 5]]
    )


def test_the_originals_keywords():
    x = nb.arange(12).reshape(2, 6)
    a, b, c = nb.split(x, num_splits=3, axis=1)
    assert a.shape == b.shape == c.shape == (2, 2)
    assert nb.permute(x, order=(1, 0)).shape == (6, 2)
    assert nb.permute(x, (1, 0)).shape == nb.permute(x, 1, 0).shape == (6, 2)
    with pytest.raises(TypeError, match="not both"):
        nb.permute(x, 1, 0, order=(1, 0))
    v = nb.constant([1.0, 2.0])
    value, g = nb.value_and_grad(lambda t: (t * t).sum(), realize=True)(v)
    assert value.is_realized and g.is_realized and g.tolist() == [2.0, 4.0]
    assert nb.grad(lambda t: (t * t).sum(), realize=True)(v).is_realized
    assert not nb.grad(lambda t: (t * t).sum())(v).is_realized  # lazy by default


def test_slice_tensor_and_slice_update_take_start_and_size():
    x = nb.arange(16).reshape(4, 4)
    part = nb.slice_tensor(x, [1, 2], [2, 2])  # the original: start and size (not stop)
    assert part.shape == (2, 2)
    np.testing.assert_array_equal(part.numpy(), np.arange(16).reshape(4, 4)[1:3, 2:4])
    np.testing.assert_array_equal(
        nb.slice_tensor(x, start=[1, 2], stop=[3, 4]).numpy(), part.numpy()
    )
    out = nb.slice_update(x, nb.zeros((2, 2), dtype=nb.int32), [1, 2], [2, 2])
    want = np.arange(16).reshape(4, 4)
    want[1:3, 2:4] = 0
    np.testing.assert_array_equal(out.numpy(), want)
    with pytest.raises(TypeError, match="not both"):
        nb.slice_tensor(x, [0, 0], [1, 1], stop=[1, 1])
    with pytest.raises(TypeError, match="one entry per dim"):
        nb.slice_tensor(x, [0, 0], [1])
    # a sequence of slice objects in start's place is the slices (one reading only)
    np.testing.assert_array_equal(
        nb.slice_tensor(x, (slice(1, 3), slice(2, 4))).numpy(), part.numpy()
    )
    np.testing.assert_array_equal(
        nb.slice_update(x, nb.zeros((2, 2), dtype=nb.int32), [slice(1, 3), slice(2, 4)]).numpy(),
        want,
    )
    with pytest.raises(TypeError, match=r"slice_update: start mixes slices and indices"):
        nb.slice_update(x, 0, [slice(1, 3), 2], [2, 1])


def test_chunk_sizes_and_minmax_as_the_original():
    x = nb.arange(10)
    assert [c.shape[0] for c in nb.chunk(x, 3)] == [4, 3, 3]
    assert [c.shape[0] for c in nb.chunk(nb.arange(2), 3)] == [1, 1]
    np.testing.assert_array_equal(nb.concatenate(nb.chunk(x, 4)).numpy(), np.arange(10))
    got = nb.minmax(nb.constant([[3.0, -1.0], [7.0, 2.0]]))  # a dict, as the original's
    assert isinstance(got, dict) and list(got) == ["min", "max"]
    lo, hi = got["min"], got["max"]
    assert (lo.item(), hi.item()) == (-1.0, 7.0) and lo.shape == hi.shape == ()


def test_conv2d_transpose_takes_the_originals_filter_layout():
    rng = np.random.default_rng(0)
    x = nb.constant(rng.standard_normal((2, 7, 7, 3)).astype(np.float32))
    w = nb.constant(rng.standard_normal((3, 3, 3, 5)).astype(np.float32))  # conv2d's HWIO
    y, pullback = nb.vjp(lambda t: nb.conv2d(t, w, stride=2, padding=1), x)
    dy = nb.constant(rng.standard_normal(y.shape).astype(np.float32))
    (dx,) = pullback(dy)
    # the original: the forward conv's own weight (KH, KW, O, C) gives the input gradient
    got = nb.conv2d_transpose(dy, w, stride=2, padding=1, filter_layout="HWOI")
    np.testing.assert_allclose(got.numpy(), dx.numpy(), rtol=1e-4, atol=1e-4)
    # its output_paddings= keyword implies that layout; output_padding 0 gives (7, 7) here
    same = nb.conv2d_transpose(dy, w, stride=2, padding=1, output_paddings=0)
    np.testing.assert_allclose(same.numpy(), dx.numpy(), rtol=1e-4, atol=1e-4)
    # ours (HWIO, the input's channels first) is the same filter transposed
    ours = nb.conv2d_transpose(dy, nb.permute(w, (0, 1, 3, 2)), stride=2, padding=1)
    np.testing.assert_allclose(ours.numpy(), dx.numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(nb.OpError, match="filter_layout='HWOI'"):
        nb.conv2d_transpose(dy, w, stride=2, padding=1)  # an HWOI filter read as HWIO
    with pytest.raises(TypeError, match="not both"):
        nb.conv2d_transpose(dy, w, output_padding=1, output_paddings=1)
    # errors name the keyword the caller used, and a bias wrong for either layout is named
    # as such before the channels are checked (the original's tests match those words)
    with pytest.raises(nb.OpError, match="output_paddings"):
        nb.conv2d_transpose(dy, w, output_paddings=(1, 0))
    with pytest.raises(nb.OpError, match=r"output_padding \(1, 0\)"):
        nb.conv2d_transpose(dy, nb.permute(w, (0, 1, 3, 2)), output_padding=(1, 0))
    with pytest.raises(nb.OpError, match="bias size 4 does not match 5 output channels"):
        nb.conv2d_transpose(dy, w, bias=nb.zeros((4,)))
    # a bias right for the original's layout still gets the layout hint
    with pytest.raises(nb.OpError, match="filter_layout='HWOI'"):
        nb.conv2d_transpose(dy, w, bias=nb.zeros((3,)))


@pytest.mark.parametrize("groups", [2, 3])
def test_conv2d_transpose_hwoi_takes_a_grouped_forward_weight(groups):
    """With groups, the forward conv's weight is (KH, KW, C // groups, O): "HWOI" of the
    transpose from O channels back to C, each group's block of inputs and outputs swapped."""
    rng = np.random.default_rng(1)
    x = nb.constant(rng.standard_normal((2, 7, 7, 6)).astype(np.float32))
    w = nb.constant(rng.standard_normal((3, 3, 6 // groups, 2 * groups)).astype(np.float32))
    y, pullback = nb.vjp(lambda v: nb.conv2d(v, w, stride=2, padding=1, groups=groups), x)
    dy = nb.constant(rng.standard_normal(y.shape).astype(np.float32))
    (dx,) = pullback(dy)
    got = nb.conv2d_transpose(
        dy, w, stride=2, padding=1, groups=groups, filter_layout="HWOI", output_padding=0
    )
    np.testing.assert_allclose(got.numpy(), dx.numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(nb.OpError, match=r"filter needs shape \(KH, KW, O // groups, 5\)"):
        nb.conv2d_transpose(nb.zeros((1, 4, 4, 5)), w, groups=groups, filter_layout="HWOI")


def test_jax_numpy_spellings_and_call_forms():
    """What JAX code writes without a name change beyond ``jnp.`` -> ``nb.``: positional
    dtypes, ``round(x, decimals)``, ``pad(constant_values=)``, ``isnan``/``isfinite``/
    ``expand_dims``/``arctan2``/``array``, the constants, ``x.ravel()``,
    ``x.block_until_ready()``, ``tree_reduce``, ``jax.nn``'s names in ``nn.functional``,
    and ``@nb.compile`` on a method."""
    assert nb.zeros(3, nb.float16).dtype == nb.float16
    assert nb.ones((2,), nb.int32).dtype == nb.int32
    assert nb.full((2,), 7, nb.int8).dtype == nb.int8
    assert nb.arange(0, 4, 1, nb.float32).dtype == nb.float32
    assert nb.eye(2, 2, 0, nb.float64).dtype == nb.float64
    x = np.array([1.2345, 2.5, -0.125, 15.0], np.float32)
    np.testing.assert_allclose(nb.round(nb.constant(x), 2).numpy(), np.round(x, 2), rtol=1e-6)
    assert nb.round(nb.constant([15, 25]), -1).tolist() == np.round([15, 25], -1).tolist()
    assert nb.pad(nb.ones((2,)), ((1, 1),), constant_values=5).tolist() == [5, 1, 1, 5]
    v = nb.constant([1.0, np.inf, np.nan, -2.5])
    assert nb.isfinite(v).tolist() == [True, False, False, True]
    assert nb.isnan(v).tolist() == [False, False, True, False]
    assert nb.isinf(v).tolist() == [False, True, False, False]
    assert nb.expand_dims(nb.ones((2,)), 0).shape == (1, 2)
    assert nb.arctan2 is nb.atan2 and nb.array([1.0, 2.0]).tolist() == [1.0, 2.0]
    assert nb.inf == np.inf and np.isnan(nb.nan) and nb.pi == np.pi and nb.e == np.e
    assert nb.ones((2, 3)).ravel().shape == (6,)
    assert nb.ones((2,)).block_until_ready().shape == (2,)
    assert nb.tree_reduce(lambda a, b: a + b, (1, [2, 3])) == 6
    F = nb.nn.functional
    assert F.swish is F.silu and F.log_sigmoid is F.logsigmoid
    # jax.nn's hard_tanh: PyTorch's hardtanh's values, JAX's gradient 1 at the bounds
    edges = nb.constant([-2.0, -1.0, 0.5, 1.0, 2.0])
    assert F.hard_tanh(edges).tolist() == F.hardtanh(edges).tolist() == [-1, -1, 0.5, 1, 1]
    assert nb.grad(lambda v: F.hard_tanh(v).sum())(edges).tolist() == [0, 1, 1, 1, 0]
    assert nb.grad(lambda v: F.hardtanh(v).sum())(edges).tolist() == [0, 0, 1, 0, 0]
    np.testing.assert_allclose(F.logsumexp(nb.zeros((2,)), axis=0).item(), np.log(2.0), rtol=1e-6)

    class Model:
        def __init__(self):
            self.w = nb.constant([2.0])

        @nb.compile
        def apply(self, x):
            return x * self.w

    m = Model()
    assert m.apply(nb.constant([3.0])).tolist() == [6.0]
    assert m.apply(nb.constant([4.0])).tolist() == [8.0] and m.apply.stats.misses == 1


def test_random_permutation_and_categorical():
    """JAX's ``random.permutation`` (of ``range(n)`` or of slices along an axis, with a key
    or the global generator) and ``random.categorical`` (frequencies of 20,000 draws within
    0.02 of ``softmax(logits)``)."""
    k = nb.random.key(0)
    p = nb.random.permutation(k, 10)
    assert (
        sorted(p.tolist()) == list(range(10))
        and p.tolist() == nb.random.permutation(k, 10).tolist()
    )
    x = nb.constant(np.arange(12.0).reshape(3, 4))
    cols = nb.random.permutation(k, x, axis=1).numpy()
    assert (
        sorted(cols[0].tolist()) == [0, 1, 2, 3]
        and (cols - cols[:1] == np.array([[0], [4], [8]])).all()
    )
    assert sorted(nb.random.permutation(x).numpy()[:, 0].tolist()) == [0.0, 4.0, 8.0]
    probs = np.array([0.1, 0.2, 0.7], np.float32)
    draws = nb.random.categorical(k, nb.constant(np.log(probs))[None], shape=(20000, 1)).numpy()
    assert draws.shape == (20000, 1) and draws.dtype == np.int32
    np.testing.assert_allclose(
        np.bincount(draws.ravel(), minlength=3) / draws.size, probs, atol=0.02
    )
    assert nb.random.categorical(k, nb.zeros((2, 5))).shape == (2,)
    assert nb.random.categorical(k, nb.zeros((1, 3)), shape=(5, 4)).shape == (5, 4)
    assert nb.random.categorical(k, nb.zeros((3, 2)), axis=0).shape == (2,)


def test_transpose_takes_a_whole_order_as_numpy_and_two_dims_as_the_api():
    x = nb.ones((2, 3, 4))
    assert x.transpose(1, 0, 2).shape == (3, 2, 4) and x.transpose((2, 0, 1)).shape == (4, 2, 3)
    assert x.transpose(0, 2).shape == (4, 3, 2) and x.transpose().shape == (2, 4, 3)
    assert nb.ones((2, 3)).transpose(0, 1).shape == (3, 2)  # two dims: swapped
