"""Tensor members spelled as the original Nabla spells them: ``real`` (is realized),
``is_sharded``, ``op_kwargs``, ``is_traced``/``trace()`` and ``gather()`` (the whole value on
every device of the mesh)."""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb

A = np.arange(8, dtype=np.float32).reshape(2, 4)


@pytest.fixture
def mesh():
    return nb.DeviceMesh("members_mesh", (2,), ("x",))


def test_real_is_realized():
    x = nb.Tensor(A)
    assert x.real is True
    y = x + 1
    assert y.real is False and y.real == y.is_realized
    y.realize()
    assert y.real is True


def test_is_sharded(mesh):
    x = nb.Tensor(A)
    assert x.is_sharded is False
    xs = x.shard(mesh, nb.P(None, "x"))
    assert xs.is_sharded is True
    assert (xs * 2).is_sharded
    assert xs.gather().is_sharded  # replicated on the mesh, still held per device


def test_op_kwargs():
    x = nb.Tensor(A)
    assert x.op_kwargs == {}  # a leaf
    y = x.sum(axis=1, keepdims=True)
    kw = y.op_kwargs
    assert kw["keepdims"] is True
    kw["keepdims"] = False  # a copy: the op's record is unchanged
    assert y.op_kwargs["keepdims"] is True
    z = x.at[:, 1:3].set(5.0)
    assert "slices" in z.op_kwargs
    y.realize()
    assert y.op_kwargs == {}  # realized without autodiff history: the op is dropped
    w = nb.Tensor(A).requires_grad_()
    s = (w * 2).sum(axis=0)
    s.realize()
    assert s.op_kwargs["axes"] == (0,)  # kept while backward may walk through it


def test_is_traced_follows_autodiff_history():
    x = nb.Tensor(A)
    assert x.is_traced is False and (x * 2).is_traced is False
    w = nb.Tensor(A).requires_grad_()
    assert w.is_traced and (w * x).is_traced
    with nb.no_grad():
        assert (w * x).is_traced is False
    assert w.detach().is_traced is False

    seen = []

    def f(t):
        seen.append((t.is_traced, x.is_traced))
        return (t * t).sum()

    nb.grad(f)(nb.Tensor(A))
    assert seen == [(True, False)]


def test_trace_marks_and_returns_self():
    x = nb.Tensor(A)
    assert x.trace() is x
    assert x.is_traced is True
    s = x.sum(axis=0)
    assert s.is_traced
    s.realize()
    assert s.is_traced and s.op_kwargs["axes"] == (0,)  # the graph is kept after realizing
    y = x * 2
    # marked, not a leaf whose gradient backward fills
    w = nb.Tensor(np.ones(4, np.float32)).requires_grad_()
    (y * w).sum().backward()
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), (2 * A).sum(0))


def test_setitem_on_traced_tensor():
    # the original's test: an in-place update of a traced tensor stays traced
    x = nb.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).trace()
    x[:, 1:3] = nb.Tensor(np.array([[10.0, 11.0], [12.0, 13.0]], np.float32))
    nb.testing.assert_allclose(x, [[0.0, 10.0, 11.0], [3.0, 12.0, 13.0]])
    assert x.is_traced is True


def test_is_traced_setter():
    x = nb.Tensor(A)
    x.is_traced = True
    assert x.is_traced
    x.is_traced = False
    assert not x.is_traced and not (x * 2).is_traced
    w = nb.Tensor(A).requires_grad_()
    h = w * 3
    h.is_traced = False  # cut from the backward graph in place, as PyTorch's detach_()
    assert not h.is_traced
    assert not (h + 1).is_traced
    w.is_traced = False  # a leaf stops requiring grad too
    assert not w.requires_grad


def test_is_traced_setter_keeps_a_running_transform():
    def f(t):
        t.is_traced = False  # only the backward graph's mark goes; grad still sees t
        return (t * t).sum()

    g = nb.grad(f)(nb.Tensor(A))
    np.testing.assert_allclose(g.numpy(), 2 * A)


def test_gather_unsharded_is_identity():
    x = nb.Tensor(A)
    assert x.gather() is x


def test_gather_split_dims(mesh):
    xs = nb.Tensor(A).shard(mesh, nb.P(None, "x"))
    g = xs.gather()
    assert g.sharding.mesh == mesh and g.sharding.dims == ((), ())
    assert not g.sharding.partial
    assert all(s.data.shape == (2, 4) for s in g.addressable_shards)
    for s in g.addressable_shards:
        np.testing.assert_array_equal(np.asarray(s.data), A)
    text = str(nb.trace(lambda t: t.gather())(xs))
    assert "all_gather" in text


def test_gather_completes_partial_sums(mesh):
    xs = nb.Tensor(A).shard(mesh, nb.P(None, "x"))
    ws = nb.Tensor(np.ones((4, 3), np.float32)).shard(mesh, nb.P("x", None))
    y = xs @ ws
    assert y.sharding.partial
    g = y.gather()
    assert not g.sharding.partial
    for s in g.addressable_shards:
        np.testing.assert_allclose(np.asarray(s.data), A @ np.ones((4, 3)))
    text = str(nb.trace(lambda a, b: (a @ b).gather())(xs, ws))
    assert "all_reduce" in text


def test_gather_under_transforms(mesh):
    xs = nb.Tensor(A).shard(mesh, nb.P(None, "x"))
    g = nb.grad(lambda t: (t.gather() ** 2).sum())(xs)
    nb.testing.assert_allclose(g, 2 * A)
    v = nb.vmap(lambda r: r.gather() * 2)(xs)
    nb.testing.assert_allclose(v, 2 * A)
    assert v.sharding.dims == ((), ())
    c = nb.compile(lambda t: t.gather() + 1)
    nb.testing.assert_allclose(c(xs), A + 1)
    nb.testing.assert_allclose(c(xs), A + 1)


def test_gather_with_arguments_is_pytorchs_gather():
    """``x.gather()`` is the original's gather of blocks; with ``(dim, index)`` it is
    PyTorch's (``take_along_axis``); other arguments are a TypeError."""
    idx = np.zeros((1,) + np.asarray(A).shape[1:], np.int32)
    got = nb.Tensor(A).gather(0, nb.Tensor(idx))
    np.testing.assert_array_equal(got.numpy(), np.take_along_axis(np.asarray(A), idx, 0))
    with pytest.raises(TypeError, match=r"PyTorch's x\.gather\(dim, index\)"):
        nb.Tensor(A).gather("rows")


def test_the_functions_gather_and_take_without_indices_collect_as_the_original_s(mesh):
    """The original's latest gather(x) (and take = gather) without indices: the method's
    collection, as a function (it was a TypeError naming NoneType)."""
    xs = nb.Tensor(A).shard(mesh, nb.P(None, "x"))
    ws = nb.Tensor(np.ones((4, 3), np.float32)).shard(mesh, nb.P("x", None))
    for collect in (nb.gather, nb.take):
        g = collect(xs)
        assert g.sharding.dims == ((), ()) and not g.sharding.partial
        np.testing.assert_array_equal(g.numpy(), A)
        total = collect(xs @ ws)
        assert not total.sharding.partial
        np.testing.assert_allclose(total.numpy(), A @ np.ones((4, 3)))
    plain = nb.Tensor(A)
    assert nb.gather(plain) is plain
    np.testing.assert_array_equal(
        nb.take(plain, [1], axis=1).numpy(), A[:, [1]]
    )  # (axis 0 by default)
    np.testing.assert_array_equal(nb.take(plain, [1]).numpy(), A[[1]])
