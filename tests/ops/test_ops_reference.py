"""Every registry op vs its NumPy reference, on several shapes and dtypes (including
broadcasting, negative axes, 0-d and empty tensors)."""

import numpy as np
import pytest
from _helpers import as_list, samples, to_nb, tol
from op_registry import entries_with_ref

import nabla as nb

CASES = [
    pytest.param(
        e,
        dt,
        id=f"{e.name}-{dt}",
        marks=pytest.mark.xfail(strict=True, reason=e.xfail["reference"])
        if "reference" in e.xfail
        else (),
    )
    for e in entries_with_ref()
    for dt in e.dtypes
]


@pytest.mark.parametrize("entry,dtype", CASES)
def test_reference(entry, dtype):
    atol, rtol = tol(entry, dtype)
    for s in samples(entry, dtype):
        got = as_list(entry.fn(*[to_nb(a) for a in s.args], **s.kwargs))
        want = as_list(entry.ref(*s.args, **s.kwargs))
        assert len(got) == len(want), entry.name
        for g, w in zip(got, want):
            w = np.asarray(w)
            assert isinstance(g, nb.Tensor)
            assert g.shape == w.shape, (entry.name, s, g.shape, w.shape)
            if entry.out_dtype is None:
                expect = dtype
            else:
                expect = entry.out_dtype(dtype)
            if expect is not None:
                assert g.dtype == nb.DType[expect], (entry.name, s.kwargs, g.dtype, expect)
            gv = g.numpy()
            if w.dtype.kind == "f" or gv.dtype.kind == "f":
                np.testing.assert_allclose(
                    gv.astype(np.float64),
                    w.astype(np.float64),
                    atol=atol,
                    rtol=rtol,
                    err_msg=f"{entry.name} {s}",
                )
            else:
                np.testing.assert_array_equal(gv, w, err_msg=f"{entry.name} {s}")


def test_linspace_of_an_integer_dtype_rounds_toward_minus_infinity():
    """As NumPy 2 and JAX: -6.67 is -7 (a cast truncated it to -6), for number bounds and
    for array bounds."""
    np.testing.assert_array_equal(
        nb.linspace(-10, 0, 4, dtype=nb.int32).numpy(), np.linspace(-10, 0, 4, dtype=np.int32)
    )
    lo, hi = np.array([-10.0, 0.0]), np.array([0.0, -1.0])
    got = nb.linspace(nb.constant(lo), nb.constant(hi), 4, dtype=nb.int32).numpy()
    np.testing.assert_array_equal(got, np.linspace(lo, hi, 4, dtype=np.int32))


def test_softmax_over_a_tuple_of_axes_or_every_axis_as_jax_nn():
    """``axis=(0, 1)`` normalizes those axes together and ``axis=None`` every axis, as
    ``jax.nn.softmax``/``log_softmax`` (``nb.softmax`` and ``nn.functional``); the default
    stays the last axis. NumPy reference, gradients included."""
    x = np.random.default_rng(5).standard_normal((3, 4, 2)).astype(np.float64)

    def ref(v, axes):
        e = np.exp(v - v.max(axis=axes, keepdims=True))
        return e / e.sum(axis=axes, keepdims=True)

    F = nb.nn.functional
    for axis in [None, (0, 1), (0, 2), -1, 1]:
        want = ref(x, axis)
        for got in (nb.softmax(nb.constant(x), axis=axis), F.softmax(nb.constant(x), axis=axis)):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(
            F.log_softmax(nb.constant(x), axis=axis).numpy(), np.log(want), rtol=1e-10
        )
    np.testing.assert_allclose(F.softmax(nb.constant(x)).numpy(), ref(x, -1), rtol=1e-12)
    g = nb.grad(lambda v: (nb.softmax(v, axis=None) * nb.constant(x)).sum())(nb.constant(x))
    s = ref(x, None)
    np.testing.assert_allclose(g.numpy(), s * (x - (s * x).sum()), rtol=1e-10, atol=1e-14)
