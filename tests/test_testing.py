"""``nb.testing``: ``assert_allclose`` across Nabla/JAX/PyTorch/NumPy pytrees, with messages
that name the failing leaf, and ``batch_realize`` (one evaluation for many tensors)."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import nabla as nb

A = np.arange(6, dtype=np.float32).reshape(2, 3)


def _t(a=A):
    return nb.Tensor(a)


def _fails(actual, expected, *patterns, **kw):
    with pytest.raises(AssertionError) as info:
        nb.testing.assert_allclose(actual, expected, **kw)
    msg = str(info.value)
    for p in patterns:
        assert re.search(p, msg), f"{p!r} not in:\n{msg}"
    return msg


def _evaluations():
    return nb.backend_stats()["evaluations"]


# ----------------------------------------------------------------------------- passing cases
def test_exported():
    assert nb.testing.__all__ == ["assert_allclose", "batch_realize"]
    assert "testing" in nb.__all__


def test_tensor_against_numpy_scalars_and_lists():
    x = _t()
    nb.testing.assert_allclose(x * 2, A * 2)
    nb.testing.assert_allclose(x.sum(), 15.0)  # a Python scalar
    nb.testing.assert_allclose(nb.Tensor(np.float32(3.0)), np.float32(3.0))
    nb.testing.assert_allclose(x * 0 + 1, 1.0)  # a scalar is compared with every element
    nb.testing.assert_allclose(A, x)  # either side may be the tensor
    nb.testing.assert_allclose([x[0], x[1]], A)  # a list compared with an array stacks
    nb.testing.assert_allclose(A.tolist(), x)
    nb.testing.assert_allclose(nb.Tensor(np.array([1, 2], np.int32)), [1, 2])
    nb.testing.assert_allclose(nb.Tensor(np.array([True, False])), np.array([1, 0]))


def test_tolerances_and_nan():
    x = _t()
    nb.testing.assert_allclose(x + 1e-3, A, atol=2e-3)
    nb.testing.assert_allclose(x * 1.001 + 1, A + 1, rtol=2e-3)
    _fails(x + 1e-3, A, "not close", atol=1e-4)
    n = nb.Tensor(np.array([np.nan, 1.0], np.float32))
    nb.testing.assert_allclose(n, [np.nan, 1.0], equal_nan=True)
    _fails(n, [np.nan, 1.0], "NaN/Inf", r"equal_nan=True")
    nb.testing.assert_allclose(nb.Tensor(np.array([np.inf], np.float32)), [np.inf])
    _fails(nb.Tensor(np.array([np.inf], np.float32)), [-np.inf], "NaN/Inf")


def test_rtol_is_relative_to_expected_as_numpy():
    # |a - e| <= atol + rtol * |e|: the reference scales the tolerance, as np.testing
    nb.testing.assert_allclose(_t(np.array([1.0], np.float32)), [1.1], rtol=0.1, atol=0)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose([1.1], [1.0], rtol=0.09, atol=0)
    _fails(_t(np.array([1.1], np.float32)), [1.0], "not close", rtol=0.09, atol=0)


def test_pytrees():
    x = _t()
    actual = {"w": x, "layers": [x + 1, (x * 2, 3.0)], "none": None}
    expected = {"w": A, "layers": ((A + 1, A * 2), [np.float64(3.0)]), "none": None}
    expected["layers"] = [A + 1, (A * 2, 3.0)]
    nb.testing.assert_allclose(actual, expected)
    # a list matches a tuple, as NumPy reads both as arrays
    nb.testing.assert_allclose((x, x), [A, A])
    point = collections.namedtuple("point", "a b")
    nb.testing.assert_allclose(point(x, x + 1), point(A, A + 1))


def test_modules_compare_by_parameter_path():
    m1 = nb.nn.Linear(3, 2)
    m2 = nb.nn.Linear(3, 2)
    nb.testing.assert_allclose(m1, m1)
    _fails(m1, m2, r"at \.weight", "max abs error")
    _fails(
        m1, nb.nn.Linear(4, 2), r"at \.weight: shapes differ: actual \(3, 2\), expected \(4, 2\)"
    )
    _fails(m1, nb.nn.Linear(3, 2, bias=False), "Linear leaves differ")


def test_sharded_tensor_compares_its_global_value():
    mesh = nb.DeviceMesh("testing_mesh", (2,), ("x",))
    b = np.arange(8, dtype=np.float32).reshape(2, 4)
    xs = nb.Tensor(b).shard(mesh, nb.P(None, "x"))
    w = nb.Tensor(np.ones((4, 3), np.float32)).shard(mesh, nb.P("x", None))
    nb.testing.assert_allclose(xs, b)
    y = xs @ w  # partial sums on "x": compared by their total
    assert y.sharding.partial
    nb.testing.assert_allclose(y, b @ np.ones((4, 3)), rtol=1e-6)


def test_vmap_and_grad_results():
    f = nb.vmap(lambda r: (r * r).sum())
    nb.testing.assert_allclose(f(_t()), (A * A).sum(1))
    nb.testing.assert_allclose(nb.grad(lambda x: (x * x).sum())(_t()), 2 * A)


# ----------------------------------------------------------------------------- messages
def test_message_names_path_shapes_dtypes_and_errors():
    x = _t()
    expected = A.astype(np.float64)
    expected[1, 2] += 0.5
    msg = _fails(
        {"p": [x, x]},
        {"p": [A, expected]},
        r"at \['p'\]\[1\]",
        r"1 of 6 elements differ",
        r"shape \(2, 3\) vs \(2, 3\), dtype float32 vs float64",
        r"max abs error 0\.5 at index \(1, 2\): actual 5, expected 5\.5",
        r"max rel error 0\.0909",
        r"rtol=1e-05, atol=1e-08",
    )
    assert "['p'][0]" not in msg


def test_structure_mismatches():
    x = _t()
    _fails({"a": x}, {"b": A}, r"dict keys differ: actual lacks \['b'\], has extra \['a'\]")
    _fails([x], [A, A], r"lengths differ: actual is a list of 1, expected a list of 2")
    _fails(
        {"a": [x]}, {"a": [None]}, r"at \['a'\]\[0\]: actual is an array-like Tensor, expected None"
    )
    _fails(x, A.T, r"shapes differ: actual \(2, 3\), expected \(3, 2\)")
    _fails(nb.nn.Linear(2, 2), [A], "structures differ: actual is a Linear")
    _fails([x, [x]], A, "ragged list")


def test_uncomparable_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="cannot compare values of dtype <U3"):
        nb.testing.assert_allclose(_t(), "abc")


# ----------------------------------------------------------------------------- realization
def test_realize_true_runs_one_evaluation_for_all_leaves():
    x = _t()
    tree = {"a": x + 1, "b": [x * 2, x - 3], "c": (x.sum(), x.max())}
    ref = {"a": A + 1, "b": [A * 2, A - 3], "c": (A.sum(), A.max())}
    before = _evaluations()
    nb.testing.assert_allclose(tree, ref)
    assert _evaluations() - before == 1


def test_realize_false_leaves_realization_to_each_read():
    x = _t()
    ys = [x + 1, x * 2, x - 3]
    before = _evaluations()
    nb.testing.assert_allclose(ys, [A + 1, A * 2, A - 3], realize=False)
    assert _evaluations() - before == 3  # one per leaf, as read

    # the pattern ``realize=False`` is for: one batch_realize, then cheap comparisons
    ys = [x + 1, x * 2, x - 3]
    before = _evaluations()
    nb.testing.batch_realize(ys)
    nb.testing.assert_allclose(ys, [A + 1, A * 2, A - 3], realize=False)
    assert _evaluations() - before == 1


def test_batch_realize():
    x = _t()
    a, b = x + 1, {"k": [x * 2], "skip": np.ones(2), "n": 3}
    assert not a.is_realized and not b["k"][0].is_realized
    before = _evaluations()
    assert nb.testing.batch_realize(a, b) is None
    assert _evaluations() - before == 1
    assert a.is_realized and b["k"][0].is_realized
    pending = x + 5
    nb.testing.batch_realize()  # no arguments: nothing happens (unlike nb.realize())
    assert not pending.is_realized
    m = nb.nn.Linear(2, 2)
    nb.testing.batch_realize(m)  # modules are pytrees
    assert m.weight.is_realized


# ----------------------------------------------------------------------------- other libraries
def test_against_torch():
    torch = pytest.importorskip("torch")
    x = _t()
    nb.testing.assert_allclose(x * 2, torch.from_numpy(A) * 2)
    w = torch.ones(2, 3, requires_grad=True)
    nb.testing.assert_allclose(torch.from_numpy(A) * w, x)  # detached for the comparison
    bf = torch.ones(3, dtype=torch.bfloat16)
    nb.testing.assert_allclose(bf, nb.ones((3,), dtype=nb.bfloat16))
    _fails({"w": x}, {"w": torch.zeros(2, 3)}, r"at \['w'\]", "dtype float32 vs float32")


def test_against_jax():
    jnp = pytest.importorskip("jax.numpy")
    x = _t()
    nb.testing.assert_allclose(nb.exp(x), jnp.exp(jnp.asarray(A)), rtol=1e-6)
    nb.testing.assert_allclose([x, {"s": x.sum()}], [jnp.asarray(A), {"s": jnp.sum(A)}])
    _fails(x, jnp.zeros((2, 3)), "max abs error 5")
