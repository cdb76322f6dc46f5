"""The user-facing ``Tensor`` API: metadata, conversion, realization, operators and methods."""

from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

import nabla as nb
from nabla.runtime.graph import GRAPH


@pytest.fixture(autouse=True)
def _numpy_backend():
    with nb.backend("numpy"):
        yield


def arr(*shape, dtype=np.float32, start=0):
    return (np.arange(int(np.prod(shape))) + start).reshape(shape).astype(dtype)


def close(t, expected, **kw):
    assert isinstance(t, nb.Tensor)
    got = t.numpy()
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, **kw)


# ----------------------------------------------------------------------------- metadata
def test_metadata():
    t = nb.constant(arr(2, 3))
    assert t.shape == (2, 3)
    assert type(t.shape) is tuple and all(type(d) is int for d in t.shape)
    assert t.dtype is nb.float32
    assert t.device == nb.CPU()
    assert t.ndim == 2 and t.rank == 2
    assert t.size == 6 and type(t.size) is int
    s = nb.constant(1.5)
    assert s.shape == () and s.ndim == 0 and s.size == 1


def test_shape_of_promise_is_python_ints():
    t = (nb.constant(arr(2, 3)) + 1).reshape(np.int64(3), np.int64(2))
    assert not t.is_realized
    assert t.shape == (3, 2) and all(type(d) is int for d in t.shape)
    assert t.sum(axis=0).shape == (2,)


# ----------------------------------------------------------------------------- conversion
def test_numpy_item_tolist():
    a = arr(2, 3)
    t = nb.constant(a)
    assert isinstance(t.numpy(), np.ndarray)
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(t.to_numpy(), a)
    assert t.tolist() == a.tolist()
    v = nb.constant([[2.5]]).item()
    assert v == 2.5 and type(v) is float
    i = nb.constant(7).item()
    assert i == 7 and type(i) is int
    b = nb.constant([True]).item()
    assert b is True
    assert float(nb.constant(3)) == 3.0 and int(nb.constant(3.7)) == 3


def test_repr_shows_values_dtype_shape():
    t = nb.constant(np.array([[1.5, 2.0], [3.0, 4.0]], np.float32))
    r = repr(t)
    assert "1.5" in r and "4." in r
    assert "float32" in r and "(2, 2)" in r
    assert str(t) == r
    # a promise prints its computed value
    r2 = repr(nb.constant(np.array([1, 2], np.int64)) * 3)
    assert "3" in r2 and "6" in r2 and "int64" in r2 and "(2,)" in r2


def test_print(capsys):
    print(nb.constant([1.0, 2.0]) + 1)
    out = capsys.readouterr().out
    assert "2." in out and "3." in out and "float32" in out


def test_array_protocol():
    t = nb.constant(arr(2, 3)) * 2
    a = np.asarray(t)
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    np.testing.assert_array_equal(a, arr(2, 3) * 2)
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), arr(2, 3, dtype=np.float64) * 2)
    assert np.array(t).shape == (2, 3)


def test_dlpack_round_trip():
    t = nb.constant(arr(2, 3)) + 1
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(a, arr(2, 3) + 1)
    src = np.arange(5, dtype=np.int64)
    u = nb.from_dlpack(src)
    assert isinstance(u, nb.Tensor) and u.dtype is nb.int64 and u.shape == (5,)
    np.testing.assert_array_equal(u.numpy(), src)
    # nabla -> numpy -> nabla
    back = nb.from_dlpack(np.from_dlpack(nb.constant(arr(3, dtype=np.float64))))
    assert back.dtype is nb.float64
    np.testing.assert_array_equal(back.numpy(), arr(3, dtype=np.float64))


def test_tensors_never_share_memory_a_caller_can_write():
    """As JAX: ``constant``/``Tensor`` copy a NumPy array (a later write changes neither the
    tensor nor a lazy op reading it) and ``.numpy()`` is read-only; ``np.array(t)`` is a
    writable copy and ``from_dlpack`` shares, as documented."""
    src = arr(3)
    t, lazy, made = nb.constant(src), nb.constant(src) + 1, nb.Tensor(src)
    src[:] = 99
    assert t.tolist() == [0, 1, 2] and lazy.tolist() == [1, 2, 3] and made.tolist() == [0, 1, 2]
    view = t.numpy()
    with pytest.raises(ValueError, match="read-only"):
        view[0] = -1
    copy = np.array(t)
    copy[0] = -1
    assert t.tolist() == [0, 1, 2] and np.asarray(t).flags.writeable is False
    shared = np.arange(3, dtype=np.float32)
    d = nb.from_dlpack(shared)
    shared[0] = 7
    assert d.tolist() == [7, 1, 2]


# ----------------------------------------------------------------------------- realization
def test_promise_tensors_are_lazy():
    x = nb.constant(arr(3))
    assert x.is_realized
    before = GRAPH.stats["evaluations"]
    y = x * 2 + 1
    assert not y.is_realized
    assert y.shape == (3,) and y.dtype is nb.float32  # metadata without computing
    assert GRAPH.stats["evaluations"] == before
    assert y.realize() is y
    assert y.is_realized
    assert GRAPH.stats["evaluations"] == before + 1
    y.realize()  # already realized: nothing to do
    y.numpy()
    assert GRAPH.stats["evaluations"] == before + 1


def test_realize_several_in_one_evaluation():
    x = nb.constant(arr(4))
    a, b, c = x + 1, x * 2, nb.exp(x)
    before = GRAPH.stats["evaluations"]
    out = nb.realize(a, b, c)
    assert GRAPH.stats["evaluations"] == before + 1
    assert out == (a, b, c)
    assert a.is_realized and b.is_realized and c.is_realized
    close(a, arr(4) + 1)
    close(b, arr(4) * 2)
    close(c, np.exp(arr(4)), rtol=1e-6)
    assert nb.realize(a) is a
    assert nb.realize_all is nb.realize


def test_realize_pytree():
    x = nb.constant(arr(2))
    tree = {"a": x + 1, "b": [x * 3, (x - 1,)]}
    before = GRAPH.stats["evaluations"]
    nb.realize(tree)
    assert GRAPH.stats["evaluations"] == before + 1
    assert all(t.is_realized for t in nb.tree_leaves(tree))


def test_realize_without_args_realizes_all_pending():
    # (a dead tensor an earlier test left in a reference cycle, such as one whose program
    # raised, kept by its traceback, is pending until the cycle is collected)
    gc.collect()
    x = nb.constant(arr(3))
    a = x + 10
    b = (x * x).sum()
    assert not a.is_realized and not b.is_realized
    before = GRAPH.stats["evaluations"]
    assert nb.realize() is None
    assert a.is_realized and b.is_realized
    assert GRAPH.stats["evaluations"] == before + 1
    assert len([i for i in GRAPH.pending if i.buffer is None]) == 0
    close(a, arr(3) + 10)
    assert b.item() == 5.0


# ----------------------------------------------------------------------------- operators
NP = arr(2, 3, start=1)
OTHER = arr(2, 3, start=2) / 3


@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: a + b,
        lambda a, b: a - b,
        lambda a, b: a * b,
        lambda a, b: a / b,
        lambda a, b: a // b,
        lambda a, b: a % b,
        lambda a, b: a**b,
    ],
    ids=["add", "sub", "mul", "truediv", "floordiv", "mod", "pow"],
)
def test_arithmetic_operators(op):
    x, y = nb.constant(NP), nb.constant(OTHER)
    close(op(x, y), op(NP, OTHER), rtol=1e-5)
    # Python scalars on either side
    close(op(x, 2.0), op(NP, np.float32(2.0)), rtol=1e-5)
    close(op(3.0, x), op(np.float32(3.0), NP), rtol=1e-5)
    # NumPy arrays on either side (the reflected operator must win over ndarray's)
    r = op(OTHER, x)
    assert isinstance(r, nb.Tensor)
    close(r, op(OTHER, NP), rtol=1e-5)
    close(op(x, OTHER), op(NP, OTHER), rtol=1e-5)


def test_reflected_operators_keep_operand_order():
    x = nb.constant(np.array([1.0, 2.0, 4.0], np.float32))
    close(10 - x, [9.0, 8.0, 6.0])
    close(8 / x, [8.0, 4.0, 2.0])
    close(9 // x, [9.0, 4.0, 2.0])
    close(7 % x, [0.0, 1.0, 3.0])
    close(2**x, [2.0, 4.0, 16.0])
    close(np.array([10.0, 10.0, 10.0], np.float32) - x, [9.0, 8.0, 6.0])


def test_integer_operators():
    a = nb.constant([7, -7, 9])
    b = nb.constant([2, 2, 4])
    assert (a // b).tolist() == [3, -4, 2]
    assert (a % b).tolist() == [1, 1, 1]  # Python/NumPy sign convention
    assert (a**2).tolist() == [49, 49, 81] and (a**2).dtype is nb.int32
    assert (a / b).dtype is nb.float32


def test_matmul_operator():
    a = arr(2, 3)
    b = arr(3, 4)
    close(nb.constant(a) @ nb.constant(b), a @ b)
    close(nb.constant(a) @ b, a @ b)
    close(a @ nb.constant(b), a @ b)
    close(nb.constant(arr(3)) @ nb.constant(b), arr(3) @ b)


def test_unary_operators():
    x = nb.constant(np.array([-1.5, 0.0, 2.0], np.float32))
    close(-x, [1.5, 0.0, -2.0])
    close(+x, x.numpy())
    close(abs(x), [1.5, 0.0, 2.0])


def test_comparisons():
    x = nb.constant(np.array([1.0, 2.0, 3.0], np.float32))
    y = nb.constant(np.array([3.0, 2.0, 1.0], np.float32))
    cases = {
        "eq": (x == y, [False, True, False]),
        "ne": (x != y, [True, False, True]),
        "lt": (x < y, [True, False, False]),
        "le": (x <= y, [True, True, False]),
        "gt": (x > y, [False, False, True]),
        "ge": (x >= 2, [False, True, True]),
        "rlt": (2 < x, [False, False, True]),
        "np": (np.array([1.0, 5.0, 3.0]) == x, [True, False, True]),
    }
    for name, (t, expected) in cases.items():
        assert isinstance(t, nb.Tensor), name
        assert t.dtype is nb.bool, name
        assert t.tolist() == expected, name


def test_bitwise_and_logical_operators():
    b = nb.constant([True, True, False, False])
    c = nb.constant([True, False, True, False])
    assert (b & c).tolist() == [True, False, False, False]
    assert (b | c).tolist() == [True, True, True, False]
    assert (b ^ c).tolist() == [False, True, True, False]
    assert (~b).tolist() == [False, False, True, True]
    assert (b & True).dtype is nb.bool and (False | c).tolist() == c.tolist()
    i = nb.constant([1, 2, 3, 12])
    j = nb.constant([3, 3, 1, 10])
    assert (i & j).tolist() == [1, 2, 1, 8]
    assert (i | j).tolist() == [3, 3, 3, 14]
    assert (i ^ j).tolist() == [2, 1, 2, 6]
    assert (~i).tolist() == [-2, -3, -4, -13]
    assert (6 & i).tolist() == [0, 2, 2, 4]
    assert (i & j).dtype is nb.int32
    # a Python int is a weak scalar: the small int dtype stays (as JAX)
    small = nb.constant(np.array([3, 5], np.int8))
    for got, want in [(small & 2, [2, 0]), (1 | small, [3, 5]), (small ^ True, [2, 4])]:
        assert got.dtype is nb.int8 and got.tolist() == want
    assert (nb.constant(np.array([2], np.uint8)) | 1).dtype is nb.uint8


# ----------------------------------------------------------------------------- methods
def test_unary_methods():
    a = np.array([[0.5, 1.0, 2.0]], np.float32)
    x = nb.constant(a)
    for name, ref in [
        ("exp", np.exp),
        ("log", np.log),
        ("sqrt", np.sqrt),
        ("sin", np.sin),
        ("cos", np.cos),
        ("tanh", np.tanh),
        ("abs", np.abs),
        ("floor", np.floor),
        ("neg", np.negative),
        ("square", np.square),
        ("reciprocal", np.reciprocal),
        ("relu", lambda v: np.maximum(v, 0)),
        ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
    ]:
        close(getattr(x, name)(), ref(a), rtol=1e-6, err_msg=name)
    close(x.gelu(approximate="tanh"), nb.gelu(x, approximate="tanh").numpy())
    close(x.clip(0.7, 1.5), np.clip(a, 0.7, 1.5))


def test_reduction_methods():
    a = arr(2, 3)
    x = nb.constant(a)
    assert x.sum().item() == a.sum()
    close(x.sum(axis=0), a.sum(0))
    close(x.sum(1, keepdims=True), a.sum(1, keepdims=True))
    close(x.mean(axis=1), a.mean(1))
    close(x.max(axis=0), a.max(0))
    close(x.min(), a.min())
    close(x.prod(axis=1), a.prod(1))
    close(x.var(), a.var(), rtol=1e-6)
    close(x.std(axis=0), a.std(0), rtol=1e-6)
    assert x.argmax().item() == 5 and x.argmax().dtype is nb.int64
    close(x.argmin(axis=1), a.argmin(1))
    close(x.cumsum(axis=1), a.cumsum(1))
    close(x.softmax(axis=-1), np.exp(a) / np.exp(a).sum(-1, keepdims=True), rtol=1e-6)
    log_p = a - np.log(np.exp(a).sum(0, keepdims=True))
    close(x.log_softmax(dim=0), log_p, rtol=1e-5)  # PyTorch's method name
    close(x.logsoftmax(0), log_p, rtol=1e-5)
    assert (x > 2).any().item() is True and (x > 2).all().item() is False


def test_shape_methods():
    a = arr(2, 3)
    x = nb.constant(a)
    close(x.T, a.T)
    close(nb.constant(arr(2, 3, 4)).T, arr(2, 3, 4).T)
    assert x.reshape(3, 2).shape == (3, 2)
    assert x.reshape((3, 2)).shape == (3, 2)
    assert x.reshape([6]).shape == (6,)
    assert x.reshape(-1, 2).shape == (3, 2)
    close(x.view(3, 2), a.reshape(3, 2))
    close(x.view((6,)), a.reshape(6))
    close(x.flatten(), a.reshape(-1))
    assert nb.constant(arr(2, 3, 4)).flatten(1).shape == (2, 12)
    assert x.unsqueeze(0).shape == (1, 2, 3)
    assert x.unsqueeze(0).squeeze(0).shape == (2, 3)
    close(x.permute(1, 0), a.T)
    close(x.transpose(0, 1), a.T)
    b = arr(2, 3, 4)  # NumPy's and JAX's spelling: one sequence, the full permutation
    close(nb.transpose(nb.constant(b), (2, 0, 1)), b.transpose(2, 0, 1))
    close(nb.constant(b).transpose([1, 2, 0]), b.transpose(1, 2, 0))
    with pytest.raises(TypeError, match=r"transpose: pass either a permutation or two dims"):
        nb.transpose(nb.constant(b), (2, 0, 1), 0)
    with pytest.raises(ValueError, match=r"transpose: axes \(0, 1\) do not match"):
        nb.transpose(nb.constant(b), (0, 1))
    with pytest.raises(IndexError, match="transpose"):  # errors name the function called
        nb.transpose(nb.constant(b), 3, 0)
    with pytest.raises(IndexError, match="swap_axes"):
        nb.swap_axes(nb.constant(b), 3, 0)
    close(x.flip(1), a[:, ::-1])
    assert x.broadcast_to((4, 2, 3)).shape == (4, 2, 3)
    assert nb.constant(arr(1, 3)).expand(5, -1).shape == (5, 3)
    assert nb.constant(arr(3, 1)).expand(2, -1, 4).shape == (2, 3, 4)
    with pytest.raises(ValueError, match="expand: -1 keeps an existing dim's size"):
        nb.constant(arr(3, 1)).expand(-1, 3, 4)  # as PyTorch: a new dim has no size to keep


def test_jax_and_numpy_array_methods():
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = nb.constant(a)
    assert x.item(5) == 5.0 and x.item(1, 2) == 6.0  # a flat index, or coordinates
    with pytest.raises(IndexError, match=r"item\(13,\): index 13 is out of bounds .* \(3, 4\)"):
        x.item(13)
    c = x.copy()
    c[0, 0] = 100.0  # a copy is its own tensor
    assert x.item(0) == 0.0 and c.item(0) == 100.0
    close(nb.grad(lambda v: nb.sum(v.copy() * 2))(x), np.full((3, 4), 2.0))
    close(x.conj(), a)
    close(x.conjugate(), a)
    close(x.ptp(0), np.ptp(a, 0))
    b = np.random.default_rng(0).permutation(12).reshape(4, 3).astype(np.float32)
    got = np.take_along_axis(b, nb.constant(b).argpartition(1, axis=0).numpy(), 0)
    assert (got[1] == np.sort(b, 0)[1]).all() and (got[:1] <= got[1]).all()
    assert (got[2:] >= got[1]).all()
    close(x.compress([True, False, True], axis=0), a.compress([True, False, True], axis=0))
    choices = np.array([[1, 2], [3, 4]])
    assert nb.constant([0, 1]).choose(choices).tolist() == np.array([0, 1]).choose(choices).tolist()


def test_pytorch_method_spellings():
    a = np.array([[1.5, -2.0], [0.0, 3.0]], np.float32)
    x = nb.constant(a)
    floats = [("float", nb.float32), ("double", nb.float64), ("half", nb.float16)]
    for name, dtype in floats + [("bfloat16", nb.bfloat16)]:
        assert getattr(x, name)().dtype is dtype
    for name, dtype in [("int", nb.int32), ("long", nb.int64), ("bool", nb.bool)]:
        assert getattr(x, name)().dtype is dtype
    assert x.int().tolist() == [[1, -2], [0, 3]]
    assert x.type_as(nb.zeros((1,), dtype=nb.int64)).dtype is nb.int64
    assert x.dim() == 2 and x.contiguous() is x and x.is_contiguous()
    assert x.view_as(nb.zeros(4)).shape == (4,) and x.reshape_as(nb.zeros((4, 1))).shape == (4, 1)
    assert x[:1].expand_as(x).shape == (2, 2)
    close(x.masked_fill(x > 0, -1), np.where(a > 0, -1, a))
    close(x.masked_fill(nb.constant([True, False]), 9), np.where([True, False], 9, a))
    with pytest.raises(TypeError, match=r"masked_fill: the mask must be a bool tensor, got int32"):
        x.masked_fill(nb.constant([1, 0]), 9)  # (PyTorch refuses an integer mask too)
    assert x.new_zeros(3).dtype is nb.float32 and x.new_zeros((2, 3)).shape == (2, 3)
    assert x.new_ones(2, 2).tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert x.new_full((2,), 7).tolist() == [7.0, 7.0]
    assert x.new_zeros(2, dtype=nb.int32).dtype is nb.int32
    assert x.eq(0.0).tolist() == (a == 0).tolist() and x.le(0).tolist() == (a <= 0).tolist()
    assert x.gt(0).tolist() == (a > 0).tolist() and x.ne(3).tolist() == (a != 3).tolist()
    assert x.isnan().tolist() == [[False, False], [False, False]]
    c = x.clone()
    c[0, 0] = 100.0  # a clone is its own tensor
    assert x.tolist()[0][0] == 1.5 and c.tolist()[0][0] == 100.0
    close(nb.grad(lambda v: nb.sum(v.clone() * 2))(x), np.full((2, 2), 2.0))
    close(nb.grad(lambda v: nb.sum(v.masked_fill(v > 0, 0.0)))(x), (a <= 0).astype(np.float32))


def test_dtype_conversion_methods():
    x = nb.constant(np.array([1.7, -2.5], np.float32))
    assert x.astype(nb.int32).dtype is nb.int32
    assert x.astype(nb.int32).tolist() == [1, -2]  # truncation toward zero
    assert x.cast(nb.float16).dtype is nb.float16
    assert x.to(nb.float64).dtype is nb.float64
    assert x.to("bfloat16").dtype is nb.bfloat16
    assert x.astype(np.int64).dtype is nb.int64
    assert x.cast(float).dtype is nb.float32 and x.cast(bool).dtype is nb.bool
    assert x.astype(nb.float32) is x  # no-op cast returns the tensor itself
    assert x.to(nb.CPU()).device == nb.CPU()


# ----------------------------------------------------------------------------- indexing
def test_getitem():
    a = arr(3, 4)
    x = nb.constant(a)
    close(x[1], a[1])
    close(x[-1, 2], a[-1, 2])
    close(x[:, 1:3], a[:, 1:3])
    close(x[::2, ::-1], a[::2, ::-1])
    close(x[..., None], a[..., None])
    close(x[nb.constant([2, 0])], a[[2, 0]])
    close(x[[0, 2], [1, 3]], a[[0, 2], [1, 3]])
    close(x[x > 5], a[a > 5])


def test_at_set_add_are_functional():
    a = arr(2, 3)
    x = nb.constant(a)
    y = x.at[0].set(9.0)
    z = x.at[1, 2].add(100.0)
    w = x.at[:, 1].set(nb.constant([7.0, 8.0]))
    close(x, a)  # x unchanged
    e = a.copy()
    e[0] = 9.0
    close(y, e)
    e = a.copy()
    e[1, 2] += 100.0
    close(z, e)
    e = a.copy()
    e[:, 1] = [7.0, 8.0]
    close(w, e)
    close(nb.constant(arr(4)).at[nb.constant([1, 1, 3])].add(1.0), [0.0, 3.0, 2.0, 4.0])


def test_at_multiply_min_max_combine_every_update_at_a_repeated_index():
    """JAX's scatter multiply/min/max: each update at a repeated index takes part (one
    gather-combine-scatter kept only the last), with negative indices, several index
    arrays, a slice beside them, gradients, and inside compile, also where the indices are
    traced (compile and vmap arguments)."""
    x = nb.constant(np.full(4, 5.0, np.float32))
    i = np.array([1, -3, 1, 2])
    v = nb.constant(np.array([3.0, 1.0, 4.0, 9.0], np.float32))
    close(x.at[i].multiply(v), [5.0, 60.0, 45.0, 5.0])
    close(x.at[i].min(v), [5.0, 1.0, 5.0, 5.0])
    close(x.at[i].max(v * 2.0), [5.0, 8.0, 18.0, 5.0])
    close(nb.constant(np.ones((2, 4), np.float32)).at[:, [1, 1]].multiply(3.0), [[1, 9, 1, 1]] * 2)
    m = nb.constant(arr(3, 4))
    want = arr(3, 4)
    want[0, 1], want[2, 3] = 60.0, 11.0
    close(m.at[[0, 0, 2], [1, 1, -1]].max(nb.constant([50.0, 60.0, 7.0])), want)
    grad = nb.grad(lambda u: x.at[i].multiply(u).sum())(v)
    close(grad, [20.0, 60.0, 15.0, 5.0])  # 5 * the other updates at the same index
    f = nb.compile(lambda a, u: a.at[np.array([1, 1, 1, 2])].multiply(u))
    close(f(x, v), [5.0, 60.0, 45.0, 5.0])
    close(f(x, v), [5.0, 60.0, 45.0, 5.0])
    assert f.stats.misses == 1 and f.stats.fallbacks == 0
    traced = nb.compile(lambda a, j, u: (a.at[j].multiply(u), a.at[j].min(u), a.at[j].max(u)))
    for got, want in zip(
        traced(x, nb.constant(i), v), ([5, 60, 45, 5], [5, 1, 5, 5], [5, 5, 9, 5])
    ):
        close(got, want)
    per_row = nb.vmap(lambda j: x.at[j].max(v * 2.0))(nb.constant(np.stack([i, i[::-1]])))
    close(per_row, [[5.0, 8.0, 18.0, 5.0], [5.0, 18.0, 6.0, 5.0]])
    grad = nb.compile(nb.grad(lambda u, j: x.at[j].multiply(u).sum()))(v, nb.constant(i))
    close(grad, [20.0, 60.0, 15.0, 5.0])


def test_at_subtract_divide_power_follow_jax():
    """JAX's ``subtract``, ``divide`` and ``power``: a repeated index takes every update
    (``np.subtract.at``/``np.multiply.at`` semantics), ``divide`` of ints gives floats,
    and gradients flow to ``x`` and the values."""
    a = np.array([2.0, 3.0, 4.0, 5.0], np.float32)
    i = np.array([1, -1, 1])
    v = np.array([2.0, 0.5, 3.0], np.float32)
    x = nb.constant(a)
    want = a.copy()
    np.subtract.at(want, i, v)
    close(x.at[i].subtract(nb.constant(v)), want)
    scale = np.ones(4, np.float32)
    np.multiply.at(scale, i, v)
    close(x.at[i].divide(nb.constant(v)), a / scale)
    close(x.at[i].power(nb.constant(v)), a**scale)
    close(x.at[1:3].subtract(1.0), [2.0, 2.0, 3.0, 5.0])
    q = nb.constant(np.array([4, 9], np.int32)).at[0].divide(2)
    assert q.dtype == nb.float32
    close(q, [2.0, 9.0])
    g = nb.grad(lambda u: x.at[i].divide(u).sum())(nb.constant(v))
    # d/dv_k of a[j] / prod(v at j): -a[j] / (prod * v_k) for each update k at j
    close(g, [-3.0 / 12.0, -20.0, -3.0 / 18.0])


def test_setitem_rebinds_only_that_handle():
    a = arr(2, 3)
    x = nb.constant(a)
    alias = x
    other = x + 0  # a different tensor built from the old value
    x[0, 1] = 50.0
    x[1] = nb.constant([1.0, 2.0, 3.0])
    e = a.copy()
    e[0, 1] = 50.0
    e[1] = [1.0, 2.0, 3.0]
    close(x, e)
    close(alias, e)  # same Python object
    close(other, a)  # built before the update: unchanged


def test_iteration_and_len():
    a = arr(3, 2)
    x = nb.constant(a)
    assert len(x) == 3
    rows = list(x)
    assert len(rows) == 3 and all(isinstance(r, nb.Tensor) for r in rows)
    for r, e in zip(rows, a):
        close(r, e)
    assert [v.item() for v in nb.constant([4, 5, 6])] == [4, 5, 6]


# ----------------------------------------------------------------------------- dtypes
def test_constant_dtype_inference():
    assert nb.constant(True).dtype is nb.bool
    assert nb.constant(3).dtype is nb.int32
    assert nb.constant(3.0).dtype is nb.float32
    assert nb.constant([True, False]).dtype is nb.bool
    assert nb.constant([1, 2]).dtype is nb.int32
    assert nb.constant([[1.0, 2], [3, 4]]).dtype is nb.float32
    assert nb.constant(np.array([1.0])).dtype is nb.float64
    assert nb.constant(np.array([1])).dtype is nb.int64
    assert nb.constant(np.array([1], np.int16)).dtype is nb.int16
    assert nb.constant(np.float64(2.0)).dtype is nb.float64
    assert nb.constant(np.int64(2)).dtype is nb.int64
    assert nb.constant([1, 2], dtype=nb.float16).dtype is nb.float16
    assert nb.constant(np.array([1.0]), dtype="int8").dtype is nb.int8


def test_default_dtype_context():
    assert nb.get_default_dtype() is nb.float32
    with nb.default_dtype(nb.float64):
        assert nb.get_default_dtype() is nb.float64
        assert nb.constant(1.0).dtype is nb.float64
        assert nb.constant([1.0, 2.0]).dtype is nb.float64
        assert nb.ones((2,)).dtype is nb.float64
        assert nb.zeros((2,)).dtype is nb.float64
        assert nb.arange(3.0).dtype is nb.float64
        assert nb.constant(1).dtype is nb.int32  # ints are unaffected
        assert (nb.constant([1, 2]) / 2).dtype is nb.float64
        assert nb.exp(nb.constant([1, 2])).dtype is nb.float64
    assert nb.get_default_dtype() is nb.float32
    assert nb.constant(1.0).dtype is nb.float32


ALL_DTYPES = [
    nb.bool,
    nb.uint8,
    nb.uint16,
    nb.uint32,
    nb.uint64,
    nb.int8,
    nb.int16,
    nb.int32,
    nb.int64,
    nb.float16,
    nb.bfloat16,
    nb.float32,
    nb.float64,
]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.value)
def test_every_dtype_round_trips(dtype):
    assert set(ALL_DTYPES) == set(nb.DType)
    values = np.array([[0, 1, 1], [1, 0, 1]]).astype(dtype.numpy)
    t = nb.constant(values)
    assert t.dtype is dtype
    out = t.numpy()
    assert out.dtype == dtype.numpy
    np.testing.assert_array_equal(out, values)
    u = nb.constant([[0, 1, 1], [1, 0, 1]], dtype=dtype)
    assert u.dtype is dtype and u.numpy().dtype == dtype.numpy
    # through a computation (a promise) as well
    v = nb.stop_gradient(t)
    assert not v.is_realized
    assert v.numpy().dtype == dtype.numpy
    np.testing.assert_array_equal(v.numpy(), values)


def test_low_precision_floats():
    bf = nb.constant(np.array([1.5, -2.25], dtype=ml_dtypes.bfloat16))
    assert bf.dtype is nb.bfloat16
    assert nb.bfloat16.numpy == np.dtype(ml_dtypes.bfloat16)
    assert (bf * 2).dtype is nb.bfloat16
    assert (bf * 2).numpy().astype(np.float32).tolist() == [3.0, -4.5]
    h = nb.constant(np.array([0.5, 4.0], np.float16))
    assert (h + h).numpy().dtype == np.float16
    assert (h + h).tolist() == [1.0, 8.0]


def test_dtype_aliases():
    assert nb.DType.float32 is nb.float32
    assert nb.DType.bool is nb.bool
    assert nb.DType.bfloat16 is nb.bfloat16
    assert nb.float64.is_float and nb.int8.is_int and nb.bool.is_bool
    assert nb.float32.itemsize == 4 and nb.bfloat16.itemsize == 2
    assert repr(nb.float32) == "nb.float32"


def test_pytorch_spellings_dim_keepdim_device_names_and_foreign_arrays():
    """PyTorch's ``dim=``/``keepdim=`` on reduction methods (``x.max(dim=d)`` gives values
    and indices, as PyTorch), ``.to("cpu")``, and JAX/PyTorch arrays converted with their
    dtype (through ``__array__``)."""
    a = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    x = nb.constant(a)
    close(x.sum(dim=1), a.sum(1), rtol=1e-6)
    close(x.mean(dim=-1, keepdim=True), a.mean(-1, keepdims=True), rtol=1e-6)
    close(x.argmax(dim=-1, keepdim=True), a.argmax(-1)[..., None])
    close(x.cumsum(dim=1), np.cumsum(a, 1), rtol=1e-6)
    close(x.softmax(dim=0).sum(0), np.ones((3, 4)), rtol=1e-6)
    values, indices = x.max(dim=1)
    close(values, a.max(1)), close(indices, a.argmax(1))
    assert x.min(dim=2, keepdim=True).indices.shape == (2, 3, 1)
    assert x.max(axis=1).shape == (2, 4)  # NumPy's spelling: the values only
    with pytest.raises(TypeError, match="either dim= or axis="):
        x.sum(dim=1, axis=1)
    assert x.to("cpu").device == nb.CPU() and x.to("CPU:1").device == nb.CPU(1)
    assert x.to("float64").dtype == nb.float64

    class Foreign:  # any array-like: JAX and PyTorch arrays convert through __array__
        def __array__(self, dtype=None, copy=None):
            return np.ones(2, np.int16)

    assert nb.constant(Foreign()).dtype == nb.int16 and nb.asarray(Foreign()).dtype == nb.int16


def test_numpy_and_jax_conveniences():
    """Small JAX/NumPy behaviours: NumPy float scalars make arange a float range; one
    (low, high) pair pads every dim; x[[]] is an empty integer index; == None is False;
    a 0-d tensor formats like its value; a 0-d boolean index is a clear IndexError."""
    r = nb.arange(0, 5, np.float32(1.5))
    assert r.dtype == nb.float32 and r.numpy().tolist() == [0.0, 1.5, 3.0, 4.5]
    assert nb.arange(np.float32(3)).dtype == nb.float32
    m = nb.constant(arr(2, 3))
    for pads in ((1, 2), ((1, 2),)):
        close(nb.pad(m, pads), np.pad(arr(2, 3), pads))
    close(nb.pad(m, ((1, 0), (0, 2))), np.pad(arr(2, 3), ((1, 0), (0, 2))))
    assert m[[]].shape == (0, 3)
    x = nb.constant(arr(3))
    assert (x == None) is False and (x != None) is True  # noqa: E711
    assert f"{nb.constant(2.5):.2f}" == "2.50" and f"{nb.constant(7):03d}" == "007"
    with pytest.raises(TypeError):
        f"{x:.2f}"  # noqa: B018 - as NumPy: no format spec for arrays
    with pytest.raises(IndexError, match="0-d boolean index"):
        m[np.array(True)]
    b = nb.ones((3, 4), dtype=nb.bfloat16)
    assert (b.itemsize, b.nbytes, m.nbytes) == (2, 24, 24)
    # NumPy's reductions on tensors (they call t.sum(axis=..., dtype=..., out=...)), round()
    assert isinstance(np.sum(m), nb.Tensor) and np.sum(m).item() == 15.0
    close(np.mean(m, axis=0), arr(2, 3).mean(0))
    assert np.max(m).item() == 5.0 and np.sum(m, dtype=np.float64).dtype == nb.float64
    assert m.sum(0, True).shape == (1, 3)
    with pytest.raises(TypeError, match="out= is not supported"):
        np.sum(m, out=np.zeros(()))
    assert round(nb.constant(2.567), 2).item() == pytest.approx(2.57)
    assert round(nb.constant(2.5)).item() == 2.0  # half to even, as NumPy


def test_creation_with_array_values_as_jax():
    """``linspace`` with array bounds (``axis``, ``retstep``, differentiable), ``full`` and
    ``pad`` with a tensor value (an input: its gradient sums over the copies), and
    ``concatenate(axis=None)`` joining flattened inputs."""
    lo, hi = np.zeros(2, np.float32), np.array([1.0, 2.0], np.float32)
    close(nb.linspace(lo, hi, 3, axis=1), np.linspace(lo, hi, 3, axis=1))
    close(nb.linspace(0.0, hi, 4, endpoint=False), np.linspace(0.0, hi, 4, endpoint=False))
    values, step = nb.linspace(0, 1, 5, retstep=True)
    assert step.item() == 0.25 and values.shape == (5,)
    assert np.isnan(nb.linspace(0, 1, 1, retstep=True)[1].item())  # no spacing: NaN, as JAX
    _, steps = nb.linspace(lo, hi, 3, retstep=True)
    close(steps, np.array([0.5, 1.0], np.float32))
    g = nb.grad(lambda s: nb.linspace(s, nb.constant(hi), 4).sum())(nb.constant(lo))
    close(g, np.full(2, 2.0, np.float32))  # d/dstart: (1 - i/3) summed over i < 3
    with pytest.raises(IndexError, match="linspace"):
        nb.linspace(lo, hi, 3, axis=2)
    with pytest.raises(nb.OpError, match="linspace.*\\(2,\\), \\(3,\\)"):
        nb.linspace(lo, np.ones(3), 3)
    close(nb.full((2, 3), np.array([1.0, 2.0, 3.0])), np.full((2, 3), [1.0, 2.0, 3.0]))
    assert nb.grad(lambda a: nb.full((2, 3), a).sum())(nb.constant(2.0)).item() == 6.0
    assert nb.grad(lambda a: nb.full_like(nb.ones(3), a).sum())(nb.constant(2.0)).item() == 3.0
    batched = nb.vmap(lambda a: nb.full((3,), a))(nb.constant([1.0, 2.0]))
    close(batched, np.repeat(np.array([[1.0], [2.0]], np.float32), 3, 1))
    assert nb.full((2,), nb.constant(2.7), dtype=nb.int32).tolist() == [2, 2]
    with pytest.raises(nb.OpError, match="full"):
        nb.full((2, 3), np.array([1.0, 2.0]))
    # pad's value as a tensor is an input too: its gradient counts the padded cells
    padv = nb.grad(lambda v: nb.pad(nb.constant(arr(2, 3)), ((1, 0), (0, 2)), value=v).sum())
    assert padv(nb.constant(3.0)).item() == 9.0  # (3 x 5) - (2 x 3) cells
    close(nb.pad(nb.constant(arr(2)), 1, value=nb.constant(9.0)), np.array([9, 0, 1, 9]))
    joined = nb.concatenate([nb.constant(arr(2, 2)), nb.constant(arr(3))], axis=None)
    close(joined, np.concatenate([arr(2, 2), arr(3)], axis=None))


def test_constant_of_tensors_stays_in_the_graph():
    """``constant``/``asarray`` of a tensor with a dtype or device, or of a nested list
    holding tensors, builds graph ops (as ``jnp.asarray``): gradients flow (they were
    silently zero: the values were read out) and ``vmap`` works; numbers take the tensors'
    dtype."""
    x = nb.constant(3.0)
    assert nb.grad(lambda a: nb.constant([[a, 1.0], [2.0, a]]).sum())(x).item() == 2.0
    assert nb.grad(lambda a: nb.sum([a, 2 * a]))(x).item() == 3.0
    g = nb.grad(lambda a: nb.constant(a, dtype=nb.float64).astype(nb.float32) * 2)(x)
    assert g.item() == 2.0
    assert (
        nb.grad(lambda a: nb.asarray([a], dtype=nb.float64).sum().astype(nb.float32))(x).item()
        == 1.0
    )
    close(nb.constant([[x, 1.0], [2, x]]), np.array([[3, 1], [2, 3]], np.float32))
    assert nb.constant([nb.constant(1), 2]).dtype == nb.int32
    assert nb.constant([nb.constant(1.0, dtype=nb.float16), 2.5]).dtype == nb.float16
    assert nb.constant([nb.constant(1), 2.5]).dtype == nb.float32
    batched = nb.vmap(lambda a: nb.constant([a, 2 * a]))(nb.constant([1.0, 2.0]))
    close(batched, np.array([[1, 2], [2, 4]], np.float32))
    with pytest.raises(ValueError, match=r"ragged list: shapes \[\(\), \(2,\)\]"):
        nb.constant([x, nb.ones(2)])


def test_an_index_known_only_when_the_program_runs_names_the_op():
    """Checked when the program runs, an index out of range is reported as the user's
    indexing (the op, the tensor's shape, the dims indexed), not as the gather or scatter
    from a flattened value it became."""
    table = nb.constant(arr(4, 2))
    msg = r"getitem on a tensor of shape \(4, 2\), with array indices into dims \(0,\): an"
    with pytest.raises(IndexError, match=msg + r" index is out of range.*JAX clamps"):
        nb.vmap(lambda i: table[i])(nb.constant([1, 7, 2])).numpy()
    with pytest.raises(IndexError, match=r"setitem on a tensor of shape \(4,\).*JAX drops"):
        nb.vmap(lambda i: nb.zeros(4).at[i].set(1.0))(nb.constant([1, 7])).numpy()
    # below -n: counted from the end once (NumPy would wrap it a second time)
    x, i = nb.constant(arr(4)), nb.constant([-5, 1])
    with pytest.raises(IndexError, match=r"getitem on a tensor of shape \(4,\)"):
        x[i + 0].numpy()
    with pytest.raises(IndexError, match=r"x.at\[...\] on a tensor of shape \(4,\).*JAX drops"):
        x.at[i + 0].add(10.0).numpy()
    with pytest.raises(IndexError, match=r"getitem on a tensor of shape \(4,\)"):
        nb.vmap(lambda j: x[j])(nb.constant([-5, -8])).numpy()
    close(x[nb.constant([-4, -1]) + 0], arr(4)[[0, 3]])
    # out of range in one dim of several: never another element of the flattened dims
    m = nb.constant(arr(3, 4))
    msg = r"on a tensor of shape \(3, 4\), with array indices into dims \(0, 1\)"
    with pytest.raises(IndexError, match="getitem " + msg):
        m[nb.constant([0]) + 0, nb.constant([5]) + 0].numpy()
    with pytest.raises(IndexError, match="setitem " + msg):
        m.at[nb.constant([0]) + 0, nb.constant([5]) + 0].set(1.0).numpy()
    close(m[nb.constant([2]) + 0, nb.constant([-1]) + 0], arr(3, 4)[[2], [-1]])
    # a gather called as such keeps NumPy's own words
    with pytest.raises(IndexError, match=r"gather: index 9 is out of bounds for axis 0"):
        nb.gather(x, nb.constant([9]) + 0).numpy()


def test_logsumexp_of_nothing_is_minus_inf_and_eye_refuses_negative_sizes():
    """As JAX: the log of an empty sum (max has no identity to start from), and eye's
    sizes are dimensions (JAX: negative dimensions are not allowed)."""
    empty = nb.constant(np.zeros((0, 3), np.float32))
    assert nb.logsumexp(empty, axis=0).tolist() == [-np.inf] * 3
    assert nb.logsumexp(empty, axis=0, keepdims=True).shape == (1, 3)
    assert nb.logsumexp(empty).item() == -np.inf and nb.logsumexp(empty, axis=1).shape == (0,)
    for args in [(-1,), (2, -1)]:
        with pytest.raises(ValueError, match="eye: [nm] must be a non-negative int"):
            nb.eye(*args)
    assert nb.eye(2, 0).shape == (2, 0)


def test_any_and_all_of_empty_input_as_numpy():
    empty = nb.constant(np.zeros((0,), bool))
    assert nb.any(empty).item() is False and nb.all(empty).item() is True
    assert nb.any(nb.constant(np.zeros((0, 3))), axis=0).tolist() == [False] * 3
    assert nb.all(nb.constant(np.zeros((2, 0))), axis=1, keepdims=True).shape == (2, 1)
    with pytest.raises(IndexError, match="cannot index a 0-d tensor"):  # not a bool error
        nb.constant(np.float32(3))[nb.constant(np.array(True))]


def test_set_at_repeated_indices_differentiates_only_the_written_update():
    """As JAX: of updates to one position only the one written (the last) gets the
    cotangent (each got it), with concrete, computed and batched indices."""
    w = nb.constant(np.array([1.0, 10, 100, 1000], np.float32))
    b = nb.constant(np.array([1.0, 2.0, 3.0], np.float32))

    def loss(upd, idx):
        return (nb.zeros(4).at[idx].set(upd) * w).sum()

    idx = nb.constant(np.array([1, 1, 1]))
    assert nb.grad(loss)(b, idx).tolist() == [0.0, 0.0, 10.0]
    assert nb.grad(loss)(b, idx + 0).tolist() == [0.0, 0.0, 10.0]  # a computed index
    assert nb.grad(loss)(b, nb.constant(np.array([3, 0, 2]))).tolist() == [1000.0, 1.0, 100.0]
    batched = nb.vmap(lambda i: nb.grad(loss)(b[:2], i))(nb.constant([[1, 1], [0, 2]]))
    assert batched.tolist() == [[0.0, 10.0], [1.0, 100.0]]


@pytest.mark.parametrize(
    "key, vshape",
    [
        ((slice(None), None), (3, 1, 4)),
        ((Ellipsis, None), (3, 4, 1)),
        ((slice(None), 1, None), (3, 1)),
        ((np.array([0, 2]), None), (2, 1, 4)),
        ((slice(None), np.array([0, 3]), None), (3, 2, 1)),
        (None, (1, 3, 4)),
        # array indices separated by None: their dims come first
        ((np.array([0, 2]), None, np.array([1, 3])), (2, 1)),
        ((None, np.array([2, 0, 1]), None, np.array([3, 3, 0])), (3, 1, 1)),
        # an int among array indices is one too: None separates it from them
        ((np.array([0, 2]), None, 1), (2, 1)),
        ((2, None, np.array([1, 3])), (2, 1)),
    ],
)
def test_setitem_takes_a_value_shaped_like_x_key_with_new_axes(key, vshape):
    """As NumPy: ``y[:, None] = v`` with ``v`` of ``y[:, None]``'s shape (only leading 1s
    were dropped before, so this raised)."""
    want = np.zeros((3, 4), np.float32)
    v = np.arange(np.prod(vshape), dtype=np.float32).reshape(vshape) + 1
    want[key] = v
    y = nb.constant(np.zeros((3, 4), np.float32))
    y[key] = nb.constant(v)
    np.testing.assert_array_equal(y.numpy(), want)
    at = nb.constant(np.zeros((3, 4), np.float32)).at[key].add(nb.constant(v))
    np.testing.assert_array_equal(at.numpy(), want)


_AT_X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _np_moded(key_entries, shape, mode):
    """Each index of ``key_entries`` (int or array, one per dim) brought in range as JAX's
    ``mode`` does, and a mask of the positions whose every index was in range."""
    out, ok = [], True
    for k, n in zip(key_entries, shape):
        k = np.asarray(k)
        valid = (k >= -n) & (k < n)
        k = np.where(k < 0, k + n, k)
        out.append(np.clip(k, 0, n - 1))
        ok = ok & valid
    return tuple(out), ok


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_at_methods_take_jaxs_out_of_bounds_modes(dtype):
    """``mode="clip"`` clamps, ``"fill"`` reads ``fill_value`` (JAX's defaults: NaN, an
    integer dtype's lowest), ``"drop"`` leaves the update out, for ints and arrays,
    negative indices among them; ``indices_are_sorted``/``unique_indices`` are accepted."""
    x = _AT_X.astype(dtype)
    rows, cols = np.array([0, 2, -1, 5]), np.array([1, 9, -2, 3])
    idx, ok = _np_moded((rows, cols), x.shape, "fill")
    t = nb.constant(x)
    key = (nb.constant(rows), nb.constant(cols))
    np.testing.assert_array_equal(t.at[key].get(mode="clip").numpy(), x[idx])
    fill = np.nan if dtype == np.float32 else np.iinfo(dtype).min
    want = np.where(ok, x[idx], fill)
    np.testing.assert_array_equal(t.at[key].get(mode="fill").numpy(), want)
    np.testing.assert_array_equal(
        t.at[key].get(mode="fill", fill_value=-7).numpy(), np.where(ok, x[idx], -7)
    )
    dropped = x.copy()
    np.add.at(dropped, (idx[0][ok], idx[1][ok]), 100)
    got = t.at[key].add(100, mode="drop", indices_are_sorted=True, unique_indices=True)
    np.testing.assert_array_equal(got.numpy(), dropped)
    clipped = x.copy()
    clipped[idx] = 100
    np.testing.assert_array_equal(t.at[key].set(100, mode="clip").numpy(), clipped)
    np.testing.assert_array_equal(t.at[1, 7].set(5, mode="drop").numpy(), x)  # a static int
    np.testing.assert_array_equal(t.at[1, 7].get(mode="clip").numpy(), x[1, 3])
    with pytest.raises(ValueError, match="at: mode must be one of"):
        t.at[0].get(mode="wrap")


def test_at_modes_are_differentiable():
    """The fill slot is padding: the gradient of a filled read reaches only the positions
    read, and a dropped update's value gets none."""
    i = nb.constant(np.array([0, 7, 2]))
    g = nb.grad(lambda x: x.at[i].get(mode="fill", fill_value=0.0).sum())(
        nb.constant(np.ones(4, np.float32))
    )
    np.testing.assert_array_equal(g.numpy(), [1.0, 0.0, 1.0, 0.0])
    gv = nb.grad(lambda v: nb.zeros((4,)).at[i].add(v, mode="drop").sum())(
        nb.constant(np.ones(3, np.float32))
    )
    np.testing.assert_array_equal(gv.numpy(), [1.0, 0.0, 1.0])


def test_take_along_axis_never_reads_another_row_for_an_index_out_of_range():
    """An index known only when the program runs and out of range in its dim is an error,
    not the next row's element (it is one gather from the flattened value)."""
    x = nb.constant(np.arange(12.0, dtype=np.float32).reshape(3, 4))
    ok = nb.constant(np.array([[3], [0], [1]])) + 0
    assert nb.take_along_axis(x, ok, 1).numpy().ravel().tolist() == [3.0, 4.0, 9.0]
    bad = nb.constant(np.array([[4], [0], [1]])) + 0
    with pytest.raises(IndexError, match=r"take_along_axis on a tensor of shape \(3, 4\)"):
        nb.take_along_axis(x, bad, 1).numpy()


def test_round_method_takes_decimals_as_numpy_jax_and_pytorch():
    x = nb.constant(np.array([0.5, 1.5, 2.345, -2.5], np.float32))
    np.testing.assert_array_equal(x.round().numpy(), np.round(x.numpy()))
    np.testing.assert_allclose(x.round(2).numpy(), np.round(x.numpy(), 2))
    np.testing.assert_allclose(x.round(decimals=1).numpy(), np.round(x.numpy(), 1))
    np.testing.assert_allclose(round(x, 1).numpy(), np.round(x.numpy(), 1))


@pytest.mark.parametrize(
    "key",
    [
        (slice(None), 0, Ellipsis, np.array([1, 3])),
        (np.array([1, 0]), Ellipsis, np.array([3, 2])),
        (slice(None), np.array([0, 2]), Ellipsis, 1),
        (np.array([1, 0]), Ellipsis),
        (Ellipsis, 1, np.array([3, 2])),
    ],
)
def test_an_ellipsis_covering_no_dim_still_separates_array_indices(key):
    """As NumPy and JAX: ``...`` between two advanced indices (an int among them counts)
    separates them even where it covers no dim, so their dims go first, in reads, writes
    and ``.at`` updates alike (they were kept in place: transposed values)."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    want = a[key]
    got = nb.constant(a)[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    v = np.arange(want.size, dtype=np.float32).reshape(want.shape) + 100
    ref = a.copy()
    ref[key] = v
    y = nb.constant(a)
    y[key] = nb.constant(v)
    np.testing.assert_array_equal(y.numpy(), ref)
    added = a.copy()
    added[key] += v
    np.testing.assert_array_equal(nb.constant(a).at[key].add(v).numpy(), added)


def test_python_bool_keys_write_as_numpy_and_narrow_takes_a_0d_tensor_start():
    """``x[True] = v`` writes through a new axis of one, ``x[False] = v`` writes nothing
    (the value must still fit the empty region), as NumPy and PyTorch; ``narrow``'s start
    may be a 0-d integer tensor (PyTorch's), concrete or traced."""
    for key in (True, np.True_, False, (True, 0), (0, False)):
        want = np.zeros((2, 3), np.float32)
        want[key] = 1.0
        x = nb.constant(np.zeros((2, 3), np.float32))
        x[key] = 1.0
        np.testing.assert_array_equal(x.numpy(), want)
        np.testing.assert_array_equal(nb.zeros((2, 3)).at[key].add(1.0).numpy(), want)
    with pytest.raises(ValueError, match=r"value of shape \(5,\) cannot be broadcast"):
        x[False] = nb.ones((5,))
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = nb.constant(a)
    start = nb.constant(np.int32(1))
    np.testing.assert_array_equal(t.narrow(1, start, 2).numpy(), a[:, 1:3])
    np.testing.assert_array_equal(t.narrow(1, np.int64(-2), 2).numpy(), a[:, 1:3])
    f = nb.compile(lambda v, s: v.narrow(1, s, 2))
    np.testing.assert_array_equal(f(t, start).numpy(), a[:, 1:3])
    np.testing.assert_array_equal(f(t, nb.constant(np.int32(0))).numpy(), a[:, 0:2])


def test_python_bool_index_is_a_new_axis_of_one_or_zero_as_numpy():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = nb.constant(a)
    for key in [True, False, (0, True), (Ellipsis, False), (slice(None), np.bool_(True), 1)]:
        got = x[key]
        assert got.shape == a[key].shape, key
        np.testing.assert_array_equal(got.numpy(), a[key])
    assert nb.constant(np.float32(3.0))[True].shape == (1,)
    np.testing.assert_array_equal(nb.grad(lambda t: t[True].sum())(x).numpy(), np.ones((2, 3)))
    with pytest.raises(IndexError, match="a Python bool among array indices"):
        x[[0, 1], True]


def test_creation_and_conversion_edges_as_numpy_jax_and_pytorch():
    """Each case had differed: ``arange`` with an integer dtype and float bounds, a
    ``hann_window`` of an integer dtype (silently float32), ``dtype=None`` (float64),
    lists of NumPy scalars (int32), big-endian arrays (refused), ``np.array(t, dtype,
    copy=False)`` (a copy), PyTorch's ``to`` forms, ``default_device("cpu")``."""
    for args in [(0, 2, 0.5), (1.5, 5, 1.5), (-1.7, 3, 0.9), (2.9, 0, -0.7), (0, 10, 3)]:
        np.testing.assert_array_equal(
            nb.arange(*args, dtype=nb.int32).numpy(), np.arange(*args, dtype=np.int32)
        )
    with pytest.raises(TypeError, match="hann_window: dtype must be a float dtype"):
        nb.hann_window(4, dtype=nb.int32)
    with pytest.raises(ValueError, match="hann_window: window_length must be >= 0"):
        nb.hann_window(-1)
    x = nb.constant([1, 2])
    with pytest.raises(TypeError, match="dtype None names no dtype"):
        x.astype(None)
    with pytest.raises(TypeError, match="dtype None"), nb.default_dtype(None):
        pass
    with nb.default_dtype(nb.float64):
        assert x.astype(float).dtype == nb.float64  # a Python float's dtype: the default
    assert nb.constant([np.uint8(1), np.uint8(2)]).dtype == nb.uint8
    assert nb.constant([[np.float64(1.5)]]).dtype == nb.float64
    assert nb.constant([np.float32(1.0), 2.0]).dtype == nb.float32  # a Python float beside
    big = np.array([1.0, 2.0], ">f4")
    np.testing.assert_array_equal(nb.constant(big).numpy(), [1.0, 2.0])
    np.testing.assert_array_equal((nb.ones(2) + big).numpy(), [2.0, 3.0])
    t = nb.constant([1.0, 2.0])
    with pytest.raises(ValueError, match="without a copy"):
        np.array(t, dtype=np.float64, copy=False)
    assert np.array(t, copy=False).dtype == np.float32
    m = nb.ones((3, 3))
    np.testing.assert_array_equal(m.triu(1).numpy(), np.triu(np.ones((3, 3)), 1))
    np.testing.assert_array_equal(m.tril(diagonal=-1).numpy(), np.tril(np.ones((3, 3)), -1))
    assert t.to("cpu", nb.float16).dtype == nb.float16
    assert t.to(dtype=nb.float64, device="cpu").dtype == nb.float64
    assert t.to(nb.constant([1], dtype=nb.int8)).dtype == nb.int8  # another tensor's
    with pytest.raises(TypeError, match="missing the target"):
        t.to()
    with nb.default_device("cpu"):
        assert nb.zeros(2).device == nb.CPU()


def test_deepcopy_keeps_the_gradient_and_like_ops_keep_the_layout():
    import copy

    w = nb.constant([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    twin = copy.deepcopy(w)  # as PyTorch's: a copy of .grad comes along
    np.testing.assert_array_equal(twin.grad.numpy(), [2.0, 4.0])
    assert twin.grad is not w.grad
    mesh = nb.DeviceMesh("like", (2, 2), ("a", "b"))
    x = nb.shard(nb.constant(np.arange(8.0, dtype=np.float32).reshape(4, 2)), mesh, nb.P("a"))
    for made in (nb.zeros_like(x), nb.ones_like(x), nb.full_like(x, 3.0)):
        assert made.sharding == x.sharding  # as JAX's
    y = nb.shard(nb.ones((4, 4)), mesh, nb.P(None, "a")) @ nb.shard(
        nb.ones((4, 2)), mesh, nb.P("a", None)
    )
    assert y.sharding.partial and not nb.zeros_like(y).sharding.partial
    np.testing.assert_array_equal(nb.zeros_like(y).numpy(), np.zeros((4, 2)))


def test_copies_and_pickles_keep_the_layout_and_refuse_non_leaves():
    """``copy.copy`` and pickling of a sharded tensor kept only the whole value (a
    tensor-parallel weight came back unsharded, a partial sum completed); ``P`` with two
    entries did not pickle at all; a compiled function and a ``custom_vjp`` one did not
    deep-copy; a deep copy of a tensor computed from a ``requires_grad`` one came back
    detached (PyTorch refuses it)."""
    import copy
    import pickle

    for spec in (nb.P("dp", None), nb.P(None, "tp"), nb.P(("dp", "tp")), nb.P("dp"), nb.P()):
        for again in (pickle.loads(pickle.dumps(spec)), copy.copy(spec), copy.deepcopy(spec)):
            assert again == spec and repr(again) == repr(spec)
    mesh = nb.DeviceMesh("copies", (2, 2), ("dp", "tp"))
    a = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    x = nb.shard(nb.constant(a), mesh, nb.P("dp", "tp"))
    part = nb.shard(nb.ones((2, 4)), mesh, nb.P(None, "tp")) @ nb.shard(
        nb.constant(a), mesh, nb.P("tp")
    )
    assert part.sharding.partial
    for t in (x, part):
        for again in (copy.copy(t), pickle.loads(pickle.dumps(t))):
            assert again.sharding == t.sharding
            np.testing.assert_array_equal(again.numpy(), t.numpy())
    w = nb.constant([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    shallow = copy.copy(w)
    assert shallow.requires_grad and shallow.grad is None  # as PyTorch's copy and pickle
    with pytest.raises(RuntimeError, match=r"not a leaf, shape \(2,\)"):
        copy.deepcopy(w * 2)
    loaded = pickle.loads(pickle.dumps(w * 2))  # PyTorch's: a leaf that requires grad
    assert loaded.requires_grad and not pickle.loads(pickle.dumps(w.argmax())).requires_grad
    loaded.sum().backward()
    np.testing.assert_array_equal(loaded.grad.numpy(), [1.0, 1.0])

    model = nb.nn.Linear(2, 2, key=nb.random.key(0))
    fast = nb.compile(model)
    inputs = nb.ones((1, 2))
    fast(inputs)
    twin = copy.deepcopy(fast)  # a target network: the copy's own parameters
    twin.fun.weight[0, 0] = 100.0
    assert float(model.weight[0, 0].item()) != 100.0
    np.testing.assert_allclose(twin(inputs).numpy(), twin.fun(inputs).numpy(), rtol=1e-6)
    assert not np.allclose(twin(inputs).numpy(), fast(inputs).numpy())
    again = pickle.loads(pickle.dumps(fast))
    np.testing.assert_allclose(again(inputs).numpy(), fast(inputs).numpy(), rtol=1e-6)

    @nb.custom_vjp
    def f(v):
        return v * 2.0

    f.defvjp(lambda v: (v * 2.0, None), lambda res, g: (g * 2.0,))
    assert copy.deepcopy(f) is f  # a function, as Python's functions are copied


def test_pytorch_method_forms_give_pytorch_s_answers():
    """PyTorch's calls, answered as PyTorch answers them (references written from its
    documentation): ``gather`` with an index smaller than ``x`` (its shape is the result's;
    it was broadcast), ``index_select`` of a 0-d index keeps the dim, ``std(d, True)`` is
    the unbiased estimator (True was taken as keepdims) and so is ``std(d, keepdim=...)``,
    ``max(d, keepdim=...)`` the pair, an empty ``dim`` reduces every dim (``all``/``any``:
    none), ``v in x``, ``div(rounding_mode=)`` and the operators' named forms."""
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    x = nb.constant(a)
    assert x.gather(0, nb.constant(np.array([[1]]))).tolist() == [[4.0]]
    assert x.gather(1, nb.constant(np.array([[0, 1]]))).tolist() == [[1.0, 2.0]]
    assert x.gather(1, nb.constant(np.array([[2, 0], [1, 1]]))).tolist() == [[3.0, 1.0], [5.0, 5.0]]
    with pytest.raises(ValueError, match=r"gather: index of shape \(1, 4\)"):
        x.gather(0, nb.constant(np.array([[1, 0, 0, 0]])))
    assert x.index_select(0, nb.constant(np.array(1))).shape == (1, 3)
    np.testing.assert_allclose(x.std(0, True).numpy(), a.std(0, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(x.var(0, False).numpy(), a.var(0), rtol=1e-6)
    assert x.std(0, True, True).shape == (1, 3)
    np.testing.assert_allclose(x.std(-1, keepdim=True).numpy(), a.std(-1, ddof=1, keepdims=True))
    np.testing.assert_allclose(x.std(1).numpy(), a.std(1), rtol=1e-6)  # NumPy's, as before
    values, indices = x.max(-1, keepdim=True)
    assert values.tolist() == [[3.0], [6.0]] and indices.tolist() == [[2], [2]]
    assert x.max(-1).tolist() == [3.0, 6.0]
    for name in ("sum", "mean", "amax", "std"):
        assert getattr(x, name)(dim=[]).shape == (), name
    assert x.all(dim=[]).shape == (2, 3) and x.sum(axis=()).shape == (2, 3)
    assert nb.sum(x, dim=()).shape == () and x.norm(dim=[]).shape == ()
    assert 2.0 in x and 7.0 not in x and 1.0 in nb.constant(1.0)
    with pytest.raises(ValueError, match="norm: p must be a number, 'fro' or 'nuc'"):
        x.norm("max")
    nuc = np.linalg.norm(a, "nuc")  # (PyTorch's x.norm("nuc"): the singular values' sum)
    np.testing.assert_allclose(x.norm("nuc").numpy(), nuc, rtol=1e-5)
    with pytest.raises(ValueError, match="p='nuc' takes a matrix"):
        x.norm("nuc", dim=0)
    ints = nb.constant(np.array([-7, -6, 7, 6, 5], np.int32))
    by = nb.constant(np.array([2, -4, -2, 4, 5], np.int32))
    assert ints.div(by, rounding_mode="floor").tolist() == [-4, 1, -4, 1, 1]
    assert ints.div(by, rounding_mode="trunc").tolist() == [-3, 1, -3, 1, 1]
    assert ints.div(3, rounding_mode="trunc").tolist() == [-2, -2, 2, 2, 1]
    f = nb.constant(np.array([-7.0, 7.0], np.float32))
    assert f.div(2.0, rounding_mode="trunc").tolist() == [-3.0, 3.0]
    f.div_(4, rounding_mode="floor")
    assert f.tolist() == [-2.0, 1.0]
    assert x.add(1, alpha=2).tolist()[0] == [3.0, 4.0, 5.0] and x.sub(1).tolist()[0][0] == 0.0
    assert x.mul(2).tolist()[1][0] == 8.0 and x.div(2).tolist()[0][0] == 0.5


def test_creation_keeps_the_dtypes_and_ends_numpy_keeps():
    """An integer linspace is computed from float64 points, as NumPy's and PyTorch's (int64
    ends were lost in float32: 2**40 + 1 came out 2**40); a list of typed arrays keeps
    their dtype, as NumPy's and JAX's (float16 arrays gave float32, bfloat16 ones were
    refused); asarray takes NumPy's copy= and refuses copy=False where it copies."""
    import ml_dtypes  # noqa: PLC0415 - NumPy's bfloat16, a dependency of nabla

    assert nb.linspace(0, 2**40 + 1, 2, dtype=nb.int64).tolist() == [0, 2**40 + 1]
    want = np.linspace(0, 2**31 - 1, 3, dtype=np.int32).tolist()
    assert nb.linspace(0, 2**31 - 1, 3, dtype=nb.int32).tolist() == want
    assert (
        nb.linspace(-10, 10, 7, dtype=nb.int32).tolist()
        == np.linspace(-10, 10, 7, dtype=np.int32).tolist()
    )
    with pytest.raises(TypeError, match="linspace: num must be an int"):
        nb.linspace(0, 1, 2.0)
    half = np.ones(2, np.float16)
    assert nb.constant([half, half]).dtype == nb.float16
    assert nb.constant([np.arange(2, dtype=np.int8)] * 2).dtype == nb.int8
    assert nb.constant([np.ones(2, ml_dtypes.bfloat16)] * 2).dtype == nb.bfloat16
    assert nb.constant([nb.ones((2,), dtype=nb.float16)] * 2).dtype == nb.float16
    assert nb.constant([1, 2.5]).dtype == nb.float32 and nb.constant([[1, 2]]).dtype == nb.int32
    a = np.ones(3)
    assert nb.asarray(a, copy=True).dtype == nb.float64
    t = nb.ones((2,))
    assert nb.asarray(t, copy=False) is t
    with pytest.raises(ValueError, match="asarray: copy=False"):
        nb.asarray(a, copy=False)


def test_an_accelerator_this_machine_lacks_is_refused_at_the_creation():
    """As PyTorch's ``device="cuda"`` without a GPU: the creation call fails, naming the op
    (it made the tensor and failed later, where its value was computed)."""
    from nabla.backends import max_backend

    mx = max_backend()
    if mx is not None and mx.accelerator_count() > 0:
        pytest.skip("this machine has an accelerator")
    for make, name in (
        (lambda: nb.ones((2,), device=nb.Accelerator()), "ones"),
        (lambda: nb.zeros(3, device="cuda"), "zeros"),
        (lambda: nb.constant([1.0], device="gpu:0"), "constant"),
        (lambda: nb.arange(3, device="cuda"), "arange"),
    ):
        with pytest.raises(RuntimeError, match=rf"^{name}\(Accelerator\(0\)\)"):
            make()
    assert nb.ones((2,), device="cpu").device == nb.CPU()


def test_module_level_functions_take_pytorch_s_keywords():
    """``torch.flip(x, dims=)``, ``roll(shifts=, dims=)``, ``squeeze``/``unsqueeze``/
    ``chunk``/``unbind``/``argsort(dim=)`` and ``var``/``std(unbiased=)`` as the Tensor
    methods took them (the functions raised TypeError). Values from PyTorch's docs' rules."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(nb.flip(a, dims=(1,)).numpy(), a[:, ::-1])
    np.testing.assert_array_equal(nb.roll(a, shifts=1, dims=2).numpy(), np.roll(a, 1, 2))
    assert nb.squeeze(nb.ones((2, 1, 3)), dim=1).shape == (2, 3)
    assert nb.squeeze(nb.ones((2, 1, 3)), dim=0).shape == (2, 1, 3)  # PyTorch's: left
    assert nb.unsqueeze(a, dim=0).shape == (1, 2, 3, 4)
    assert [c.shape for c in nb.chunk(a, 2, dim=2)] == [(2, 3, 2), (2, 3, 2)]
    np.testing.assert_array_equal(nb.unbind(a, dim=1)[2].numpy(), a[:, 2])
    np.testing.assert_array_equal(
        nb.argsort(a, dim=1, descending=True).numpy(), np.argsort(-a, 1, kind="stable")
    )
    np.testing.assert_allclose(nb.var(a, dim=1, unbiased=False).numpy(), a.var(1), rtol=1e-6)
    np.testing.assert_allclose(nb.std(a, 1, unbiased=True).numpy(), a.std(1, ddof=1), rtol=1e-6)
    with pytest.raises(ValueError, match="not two of them"):
        nb.var(a, unbiased=True, ddof=0)


def test_pytorch_s_and_numpy_s_other_spellings_of_max_clip_and_linspace():
    """``torch.max(a, b)`` (elementwise), ``np.clip(x, a_min=, a_max=)`` and
    ``torch.linspace(0, 1, steps=5)``: each raised."""
    a, b = nb.constant([1.0, 5.0]), nb.constant([3.0, 2.0])
    assert nb.max(a, b).tolist() == [3.0, 5.0] and nb.min(a, b).tolist() == [1.0, 2.0]
    assert nb.max(a, np.array([4.0, 4.0])).tolist() == [4.0, 5.0]
    assert nb.max(a).item() == 5.0 and nb.max(nb.ones((2, 3)), 1).shape == (2,)
    assert nb.clip(a, a_min=2.0, a_max=4.0).tolist() == [2.0, 4.0]
    assert nb.linspace(0, 1, steps=5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_nonzero_counts_at_the_call_or_takes_a_size_as_jax():
    """NumPy's and JAX's ``nonzero``/``argwhere``/one-argument ``where``, PyTorch's
    ``x.nonzero()`` (rows) and ``x.nonzero(as_tuple=True)``; inside ``compile`` or ``vmap``
    the count is not known, so ``size=`` is required, as JAX's ``jit`` requires it."""
    x = np.array([[0, 3, 0], [1, 0, 2]], np.float32)
    assert [t.tolist() for t in nb.nonzero(x)] == [[0, 1, 1], [1, 0, 2]]
    assert [t.tolist() for t in nb.where(x > 0)] == [[0, 1, 1], [1, 0, 2]]
    assert nb.constant(x).nonzero().tolist() == [[0, 1], [1, 0], [1, 2]]
    assert [t.tolist() for t in nb.constant(x).nonzero(as_tuple=True)] == [[0, 1, 1], [1, 0, 2]]
    padded = nb.nonzero(x, size=5, fill_value=-1)
    assert [t.tolist() for t in padded] == [[0, 1, 1, -1, -1], [1, 0, 2, -1, -1]]
    assert nb.compile(lambda v: nb.nonzero(v, size=2)[1])(nb.constant(x)).tolist() == [1, 0]
    assert nb.vmap(lambda v: nb.nonzero(v, size=2)[0])(nb.constant(x)).tolist() == [[1, 0], [0, 2]]
    with pytest.raises(nb.OpError, match="pass size="):
        nb.compile(lambda v: nb.nonzero(v)[0])(nb.constant(x))
    with pytest.raises(nb.OpError, match="0-d"):
        nb.nonzero(3.0)


def test_torch_gather_order_at_module_level():
    """``torch.gather(x, dim, index)`` ported as ``nb.gather(x, 1, idx)`` (an int, then the
    indices: our ``gather(x, indices, axis)`` cannot take those) is PyTorch's gather."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    idx = np.array([[2, 0], [1, 1]])
    assert nb.gather(a, 1, idx).tolist() == [[2.0, 0.0], [4.0, 4.0]]  # PyTorch's answer
    assert nb.gather(a, [2, 0], axis=1).tolist() == [[2.0, 0.0], [5.0, 3.0]]  # NumPy's take


def test_linalg_norm_is_numpy_s():
    """``nb.linalg.norm`` against ``np.linalg.norm``: vector and matrix orders, axes,
    keepdims; a zero vector's gradient is zero; the orders that need singular values are
    refused by name."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t = rng.standard_normal((2, 3, 4)).astype(np.float32)
    cases = [(a[0], {}), (a[0], {"ord": 1}), (a[0], {"ord": np.inf}), (a[0], {"ord": 0})]
    cases += [(a[0], {"ord": 3}), (a, {}), (a, {"ord": "fro"}), (a, {"ord": 1})]
    cases += [(a, {"ord": -np.inf}), (a, {"axis": 0, "keepdims": True}), (t, {})]
    cases += [(t, {"axis": (2, 1), "ord": np.inf, "keepdims": True}), (a, {"axis": -1, "ord": 0.5})]
    for x, kw in cases:
        want = np.linalg.norm(x, **kw)
        got = nb.linalg.norm(x, **kw).numpy()
        assert got.shape == np.shape(want), kw
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=str(kw))
    assert nb.grad(lambda v: nb.linalg.norm(v))(nb.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    np.testing.assert_allclose(nb.grad(nb.linalg.norm)(nb.constant([3.0, 4.0])).numpy(), [0.6, 0.8])
    # 0 < p < 1: |x|**p has an infinite slope at 0; reverse mode gave NaN at the zero
    # vector (forward mode 0, as documented); a zero element's gradient is zero
    for p in (0.5, 0.3):
        half = lambda v, p=p: nb.linalg.norm(v, ord=p)  # noqa: E731
        assert nb.grad(half)(nb.zeros(2)).tolist() == [0.0, 0.0]
        assert nb.jvp(half, (nb.zeros(2),), (nb.ones(2),))[1].item() == 0.0
        g = nb.grad(half)(nb.constant([0.0, 1.0, -2.0])).numpy()
        total = 1.0 + 2.0**p
        want = [0.0, total ** (1 / p - 1), -(total ** (1 / p - 1)) * 2.0 ** (p - 1)]
        np.testing.assert_allclose(g, want, rtol=1e-5)
    for o in (2, -2, "nuc"):  # (from the singular values)
        np.testing.assert_allclose(nb.linalg.norm(a, ord=o).numpy(), np.linalg.norm(a, o))
    with pytest.raises(nb.OpError, match="matrix ord=3 is not one of"):
        nb.linalg.norm(a, ord=3)


def test_empty_and_infinite_edges_are_jax_s():
    """Found by an edge-case check against JAX: ``tensordot`` over a contraction of size 0
    (zeros, as matmul's); a negative vector ord over nothing is inf (0 ** (1/p)); the
    largest magnitude over nothing is 0, and a smallest over nothing an error naming
    ``linalg.norm``; a +inf logit makes ``logsoftmax``'s row nan, as ``softmax``'s."""
    got = nb.tensordot(np.ones((3, 0), np.float32), np.ones((0, 4), np.float32), axes=1)
    assert got.shape == (3, 4) and not got.numpy().any()
    assert nb.tensordot(nb.zeros((0,)), nb.zeros((0,)), axes=1).item() == 0.0
    assert nb.tensordot(nb.zeros((2, 0)), nb.zeros((2, 0)), axes=2).item() == 0.0
    empty, rows = nb.zeros((0,)), nb.zeros((3, 0))
    for p in (-1, -2, -0.5):
        assert nb.linalg.norm(empty, ord=p).item() == np.inf
        assert nb.linalg.norm(rows, ord=p, axis=1).tolist() == [np.inf] * 3
    assert nb.linalg.norm(nb.constant([np.inf, np.inf]), ord=-1).item() == np.inf
    assert nb.linalg.norm(nb.constant([0.0, 2.0]), ord=-1).item() == 0.0
    assert nb.linalg.norm(empty, ord=np.inf).item() == 0.0
    assert nb.linalg.norm(rows, ord=np.inf, axis=1).tolist() == [0.0] * 3
    for shape in ((0, 4), (3, 0)):
        assert nb.linalg.norm(nb.zeros(shape), ord=np.inf).item() == 0.0
        assert nb.linalg.norm(nb.zeros(shape), ord=1).item() == 0.0
    with pytest.raises(nb.OpError, match=r"linalg.norm: ord=-inf .* \(0,\)"):
        nb.linalg.norm(empty, ord=-np.inf)
    with pytest.raises(nb.OpError, match=r"linalg.norm: ord=-1 .* \(3, 0\)"):
        nb.linalg.norm(rows, ord=-1)
    assert np.isnan(nb.logsoftmax(nb.constant([np.inf, 1.0])).numpy()).all()
    assert np.isnan(nb.logsoftmax(nb.constant([-np.inf, -np.inf])).numpy()).all()
    assert nb.logsoftmax(nb.constant([-np.inf, 1.0])).tolist() == [-np.inf, 0.0]


def test_the_new_forms_rough_edges():
    """Found by a check of this round's functions against JAX and PyTorch: torch's
    ``gather(x, dim=, index=)`` and a NumPy-int ``dim``; a per-dim ``fill_value``; a 0-d
    ``argwhere``; ``choice`` from nothing; exact ``log10`` at powers of ten; a positional
    argument and its PyTorch keyword both given is an error; ``ParameterDict`` of a dict
    sorts its keys, as PyTorch's."""
    a = np.arange(15, dtype=np.float32).reshape(3, 5)
    idx = np.array([[0], [0], [0]])
    assert nb.gather(a, dim=1, index=idx).tolist() == [[0.0], [5.0], [10.0]]
    assert nb.gather(a, np.int64(1), idx).tolist() == [[0.0], [5.0], [10.0]]
    m = np.array([[0, 1], [1, 0]])
    got = nb.nonzero(m, size=4, fill_value=(-1, -2))
    assert [t.tolist() for t in got] == [[0, 1, -1, -1], [1, 0, -2, -2]]  # JAX's
    assert nb.argwhere(np.float32(3.0)).shape == (1, 0) and nb.argwhere(0.0).shape == (0, 0)
    assert nb.random.choice(nb.random.key(0), 0, (0,)).shape == (0,)
    with pytest.raises(ValueError, match="no candidates"):
        nb.random.choice(nb.random.key(0), 0, (2,))
    assert nb.log10(np.array([100.0, 1000.0, 1e5, 0.01], np.float32)).tolist() == [2, 3, 5, -2]
    x = nb.ones((2, 1, 3))
    for call in (
        lambda: nb.squeeze(x, 0, dim=1),
        lambda: nb.roll(x, 1, shifts=2),
        lambda: nb.flip(x, 0, dims=1),
        lambda: nb.linspace(0, 1, 5, steps=3),
        lambda: nb.clip(x, 0, 3, a_min=5),
    ):
        with pytest.raises(TypeError, match="not both"):
            call()
    params = nb.nn.ParameterDict({"b": nb.ones(1), "a": nb.ones(1)})
    assert list(params.keys()) == ["a", "b"]
    plist = nb.nn.ParameterList([nb.ones(1)])
    plist += [nb.ones(2)]
    assert len(plist) == 2


def test_fmod_and_logaddexp_keep_their_small_results():
    """Found by a low-precision check against JAX, wrong in every float dtype: ``fmod``
    subtracted ``b`` from ``mod``'s rounded result where the signs differ (``fmod(-1,
    65504)`` was 0 in float16, ``fmod(-1, inf)`` NaN), and ``logaddexp`` rounded ``1 + e``
    before its log (``logaddexp(-20, 0)`` was 0 in float32). The expected values are
    NumPy's (exact for these)."""
    for dt, a, b in [
        (np.float16, -1.0, 65504.0),
        (np.float16, -1.0, np.inf),
        (np.float32, -1e-8, 1.0),
        (np.float32, -3.0, 1e8),
        (np.float32, 1.0, -np.inf),
        (np.float64, -1e-20, 1.0),
        (np.float32, -7.5, 2.0),
        (np.float32, -6.0, 3.0),
    ]:
        got = nb.fmod(nb.constant(np.array(a, dt)), nb.constant(np.array(b, dt))).numpy()
        want = np.fmod(np.array(a, dt), np.array(b, dt))
        assert got == want and np.signbit(got) == np.signbit(want), (dt, a, b)
    bf = nb.fmod(nb.constant(-1.0).cast(nb.bfloat16), nb.constant(65536.0).cast(nb.bfloat16))
    assert float(bf.numpy()) == -1.0
    assert nb.grad(lambda a: nb.fmod(a, 2.0))(nb.constant(0.0)).item() == 1.0
    da, db = nb.grad(nb.fmod, argnums=(0, 1))(nb.constant(-7.5), nb.constant(2.0))
    assert (da.item(), db.item()) == (1.0, 3.0)  # d/db = -trunc(a / b)
    assert nb.fmod(nb.constant(np.array([-128], np.int8)), 3).tolist() == [-2]
    for dt, a, want in [
        (np.float32, -20.0, 2.0611537e-09),
        (np.float64, -40.0, 4.248354255291589e-18),
    ]:
        got = nb.logaddexp(nb.constant(np.array(a, dt)), nb.constant(np.array(0.0, dt))).item()
        assert got == pytest.approx(want, rel=1e-6)
    assert float(nb.logaddexp(nb.constant(-7.0).cast(nb.bfloat16), 0.0).numpy()) > 9e-4
    inf = np.inf
    got = nb.logaddexp(nb.constant([inf, -inf, inf, 1.0]), nb.constant([inf, -inf, -inf, 1.0]))
    assert got.tolist()[:3] == [inf, -inf, inf] and got.tolist()[3] == pytest.approx(1 + np.log(2))
    assert nb.grad(lambda a: nb.logaddexp(a, 1.0))(nb.constant(1.0)).item() == 0.5


def test_logaddexp_has_the_smooth_second_derivative_at_a_tie():
    """Found by a check of derivatives at special points against JAX: at a == b the
    second derivative was 0 (maximum's even split and abs's zero slope at 0, each
    piecewise linear); the smooth function's is sigma(0) (1 - sigma(0)) = 1/4, as JAX's
    and PyTorch's, and as nabla's own a hair away from the tie."""

    def f(x):
        return nb.logaddexp(x, 1.0)

    x = nb.constant(1.0)
    assert nb.grad(f)(x).item() == 0.5
    assert nb.grad(nb.grad(f))(x).item() == pytest.approx(0.25)
    assert nb.hessian(f)(x).item() == pytest.approx(0.25)
    near = nb.grad(nb.grad(f))(nb.constant(1.001)).item()
    assert near == pytest.approx(0.25, abs=1e-4)
    h = nb.hessian(lambda v: nb.logaddexp(v[0], v[1]))(nb.constant([2.0, 2.0])).numpy()
    np.testing.assert_allclose(h, [[0.25, -0.25], [-0.25, 0.25]], rtol=1e-6)
    da, db = nb.grad(nb.logaddexp, argnums=(0, 1))(nb.constant(-3.0), nb.constant(-3.0))
    assert (da.item(), db.item()) == (0.5, 0.5)


def test_einsum_pad_and_trace_edges_a_check_against_jax_found():
    """einsum keeps its operands' dtype through a reduction alone (bool counts had come
    back int32); pad wraps an integer fill into the dtype, as JAX (it failed when the
    program ran) and takes ``(n,)`` and tensor widths; ``nb.trace`` of a tensor is
    ``jnp.trace``."""
    b = nb.constant(np.array([[True, False], [False, False]]))
    got = nb.einsum("ij->i", b)
    assert got.dtype == nb.bool and got.tolist() == [True, False]
    i8 = nb.constant(np.full((2, 150), 1, np.int8))
    assert nb.einsum("ij->", i8).dtype == nb.int8 and nb.einsum("ij->", i8).item() == 44
    assert nb.pad(nb.zeros((2,), nb.int8), 1, constant_values=300).tolist() == [44, 0, 0, 44]
    assert nb.pad(nb.zeros((2,), nb.uint8), 1, constant_values=-1).tolist() == [255, 0, 0, 255]
    x = nb.zeros((2, 3))
    assert nb.pad(x, (1,)).shape == (4, 5)
    assert nb.pad(x, nb.constant(np.array([[1, 2], [0, 1]]))).shape == (5, 4)
    # nb.trace of an array is jnp.trace's diagonal sum (of a function, the recorder)
    t = np.arange(24.0).reshape(2, 3, 4)
    assert nb.trace(nb.ones((2, 2))).item() == 2.0
    assert nb.trace(t, 1, 1, 2).tolist() == np.trace(t, 1, 1, 2).tolist()
    # transpose: jnp's axes= and a vector's transpose as it is; linspace's endpoint third
    assert nb.transpose(t, axes=(2, 0, 1)).shape == (4, 2, 3)
    assert nb.transpose(nb.ones(3)).shape == (3,)
    assert nb.linspace(0, 1, 4, False).tolist() == [0.0, 0.25, 0.5, 0.75]
