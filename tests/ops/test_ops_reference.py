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
