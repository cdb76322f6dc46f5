"""NumPy's and JAX's array functions composed of the ops (``ops/array_functions.py``),
against NumPy, and under ``vmap``, ``grad`` and ``compile`` where they differentiate."""

import re
import warnings

import numpy as np
import pytest

import nabla as nb

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4)).astype(np.float32)
T = RNG.standard_normal((2, 3, 4)).astype(np.float32)


def same(got, want):
    got = got.numpy() if isinstance(got, nb.Tensor) else np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name, args, kwargs",
    [
        ("ravel", (T,), {}),
        ("fliplr", (A,), {}),
        ("flipud", (T,), {}),
        ("rot90", (A,), {}),
        ("rot90", (T,), {"k": 3, "axes": (2, 0)}),
        ("rot90", (A,), {"k": -2}),
        ("diagonal", (A,), {}),
        ("diagonal", (A,), {"offset": 2}),
        ("diagonal", (A,), {"offset": -2}),
        ("diagonal", (T,), {"offset": 1, "axis1": 2, "axis2": 0}),
        ("diagonal", (A,), {"offset": 9}),
        ("count_nonzero", (np.array([[0, 1, 2], [0, 0, 3]]),), {}),
        ("count_nonzero", (np.array([[0, 1, 2], [0, 0, 3]]),), {"axis": 1, "keepdims": True}),
        ("diff", (T,), {}),
        ("diff", (T,), {"n": 2, "axis": 1}),
        ("diff", (A,), {"axis": 0, "prepend": 0.0, "append": A[-1:]}),
        ("diff", (np.array([True, False, False, True]),), {}),
        ("diff", (A,), {"n": 0}),
        ("vdot", (A, A * 2), {}),
        ("inner", (A, T), {}),
        ("inner", (2.0, A), {}),
        ("kron", (A, np.eye(2, dtype=np.float32)), {}),
        ("kron", (np.arange(3.0), T), {}),
        ("cross", (T[..., :3], A[:, :3]), {}),
        ("cross", (A[:, :2], A[:, 1:4]), {}),
        ("cross", (A[:, 1:4], A[:, :2]), {}),
        ("cross", (A[:, :2], A[:, 2:4]), {}),
        ("cross", (T[:, :, :3], T[:, :, 1:]), {"axis": 2}),
        ("cross", (np.moveaxis(T[..., :3], -1, 1), T[..., 1:]), {"axisa": 1, "axisc": 0}),
        ("searchsorted", (np.array([1.0, 2, 2, 3]), np.array([[2.0, 0], [5, 2.5]])), {}),
        ("searchsorted", (np.array([1.0, 2, 2, 3]), np.array([2.0, 3])), {"side": "right"}),
        ("searchsorted", (np.array([3.0, 1, 2]), np.array([2.5])), {"sorter": np.array([1, 2, 0])}),
    ],
)
@pytest.mark.filterwarnings("ignore:Arrays of 2-dimensional vectors:DeprecationWarning")
def test_against_numpy(name, args, kwargs):
    want = getattr(np, name)(*args, **kwargs)
    got = getattr(nb, name)(*args, **kwargs)
    same(got, want)
    assert np.asarray(got.numpy()).dtype.kind == np.asarray(want).dtype.kind


def test_atleast_and_array_split():
    for f in ("atleast_1d", "atleast_2d", "atleast_3d"):
        for x in (np.float32(2.0), np.arange(3.0), A, T):
            same(getattr(nb, f)(x), getattr(np, f)(x))
        got, want = getattr(nb, f)(1.0, A), getattr(np, f)(1.0, A)
        assert isinstance(got, list) and [g.shape for g in got] == [w.shape for w in want]
    for k in (3, 1, 5, [1, 3], [2, -1, 10], []):
        got, want = nb.array_split(np.arange(10.0), k), np.array_split(np.arange(10.0), k)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same(g, w)
    for g, w in zip(nb.array_split(T, 2, axis=2), np.array_split(T, 2, axis=2), strict=True):
        same(g, w)


def test_they_batch_differentiate_and_compile():
    same(nb.vmap(nb.diagonal)(T), np.stack([np.diagonal(t) for t in T]))
    same(nb.vmap(lambda t: nb.rot90(t))(T), np.stack([np.rot90(t) for t in T]))
    same(
        nb.vmap(nb.kron, in_axes=(0, None))(T, np.eye(2)),
        np.stack([np.kron(t, np.eye(2)) for t in T]),
    )
    # d/dx sum(diff(x)**2) and of the trace through diagonal
    x = A[0]
    want = np.zeros_like(x)
    d = np.diff(x)
    want[1:] += 2 * d
    want[:-1] -= 2 * d
    same(nb.grad(lambda v: (nb.diff(v) ** 2).sum())(x), want)
    same(nb.grad(lambda m: nb.diagonal(m, 1).sum())(A), np.eye(3, 4, 1))
    same(
        nb.compile(lambda a, b: nb.cross(a, b))(T[..., :3], A[:, 1:]),
        np.cross(T[..., :3], A[:, 1:]),
    )
    same(nb.compile(nb.searchsorted)(np.array([1.0, 2, 3]), np.array([2.5, 0])), [2, 0])


def test_bad_inputs_name_the_function_and_shapes():
    with pytest.raises(nb.OpError, match=r"fliplr: needs at least 2 dims, got shape \(3,\)"):
        nb.fliplr(np.arange(3.0))
    with pytest.raises(nb.OpError, match="rot90: axes must be two different dims"):
        nb.rot90(A, axes=(1, 1))
    with pytest.raises(nb.OpError, match="cross: the vectors need 2 or 3 components, got 4"):
        nb.cross(A, A)
    with pytest.raises(nb.OpError, match=r"searchsorted: a must be 1-D, got shape \(3, 4\)"):
        nb.searchsorted(A, 1.0)
    with pytest.raises(nb.OpError, match="diff: n must be a non-negative int"):
        nb.diff(A, -1)
    with pytest.raises(nb.OpError, match="array_split: the number of sections must be >= 1"):
        nb.array_split(A, 0)


def test_digitize_and_bincount():
    x, bins = np.array([0.2, 6.4, 3.0, 1.6, 1.0]), np.array([0.0, 1.0, 2.5, 4.0, 10.0])
    for right in (False, True):
        same(nb.digitize(x, bins, right), np.digitize(x, bins, right))
    v = np.array([0, 1, 1, 3, 2, 1, 7])
    same(nb.bincount(v), np.bincount(v))
    same(nb.bincount(v, minlength=10), np.bincount(v, minlength=10))
    w = np.linspace(0, 1, 7).astype(np.float32)
    got = nb.bincount(v, w)
    assert got.dtype == nb.float32  # the weights' dtype, as JAX's
    same(got, np.bincount(v, w))
    same(nb.bincount(v, length=4), np.bincount(v)[:4])  # JAX's: values past length dropped
    counts = nb.vmap(lambda r: nb.bincount(r, length=8))(np.stack([v, v[::-1]]))
    same(counts, np.stack([np.bincount(v, minlength=8)] * 2))
    same(nb.compile(lambda r: nb.bincount(r, length=8))(v), np.bincount(v, minlength=8))
    with pytest.raises(nb.OpError, match=r"bincount: x must be 1-D integers, got float32\[3\]"):
        nb.bincount(np.ones(3, np.float32))


def test_decreasing_bins_nan_and_negative_counts_follow_numpy_and_jax():
    """digitize read decreasing bins as increasing ones ([4 3 2 2 1 0] came out as
    [0 1 2 2 3 4]); searchsorted and digitize put NaN first instead of last, where NumPy's
    sort puts it; bincount dropped a negative value, which JAX counts as 0."""
    x = np.array([-2.0, -1, 0, 0.2, 0.5, 3, np.nan])
    for bins in (np.array([2.0, 0.5, 0, -1]), np.array([-1.0, 0, 0.5, 2])):
        for right in (False, True):
            same(nb.digitize(x, bins, right), np.digitize(x, bins, right))
            # which way the bins go is read from their values: under compile too
            step = nb.compile(lambda v, b, right=right: nb.digitize(v, b, right))
            same(step(x, bins), np.digitize(x, bins, right))
    a, v = np.array([0.0, 1, np.nan]), np.array([np.nan, 0.5, 1])
    for side in ("left", "right"):
        same(nb.searchsorted(a, v, side), np.searchsorted(a, v, side))
    same(nb.bincount(np.array([-1, 0, 2, 2]), length=4), [2, 0, 2, 0])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_functions_and_quantiles():
    """The NaN-ignoring reductions against NumPy (an all-NaN row gives NaN), and ``quantile``
    / ``percentile`` / ``median`` (linear), ``ptp``; they batch and differentiate."""
    x = np.array([[1.0, np.nan, 3, 4], [np.nan] * 4, [2, 5, 1, 0]], np.float32)
    for name in ("nansum", "nanmean", "nanmax", "nanmin", "nanvar", "nanstd"):
        for axis in (None, 1, 0, (0, 1)):
            got = getattr(nb, name)(x, axis=axis).numpy()
            np.testing.assert_allclose(got, getattr(np, name)(x, axis=axis), atol=1e-6)
    same(nb.nanvar(x, 1, ddof=1, keepdims=True), np.nanvar(x, 1, ddof=1, keepdims=True))
    y = RNG.standard_normal((4, 5)).astype(np.float32)
    for q in (0.3, [0.1, 0.5, 1.0]):
        for axis in (None, 0, 1):
            same(nb.quantile(y, q, axis), np.quantile(y, q, axis=axis))
            same(
                nb.quantile(y, q, axis, keepdims=True), np.quantile(y, q, axis=axis, keepdims=True)
            )
    same(nb.percentile(y, [25, 75], 0), np.percentile(y, [25, 75], 0))
    same(nb.median(y, 1), np.median(y, 1))
    z = RNG.standard_normal((3, 4, 5)).astype(np.float32)  # several dims taken as one
    for axis in ((0, 2), (2, 0), (1,), (0, 1, 2)):
        same(nb.median(z, axis), np.median(z, axis=axis))
        same(
            nb.quantile(z, [0.2, 0.7], axis, True), np.quantile(z, [0.2, 0.7], axis, keepdims=True)
        )
    same(nb.percentile(z, 40, (1, 2)), np.percentile(z, 40, (1, 2)))
    same(nb.median(np.arange(5)), 2.0)
    assert np.isnan(nb.median(np.array([1.0, np.nan, 2.0])).item())  # as NumPy's and JAX's
    same(nb.ptp(y, 1), np.ptp(y, 1))
    same(nb.vmap(nb.median)(y), np.median(y, 1))
    # the median of 5 values is the third smallest: its gradient is one-hot there
    g = nb.grad(lambda v: nb.median(v))(y[0]).numpy()
    assert g.tolist() == (np.argsort(np.argsort(y[0])) == 2).astype(np.float32).tolist()
    same(nb.grad(lambda v: nb.nansum(v))(x[0]), [1.0, 0.0, 1.0, 1.0])
    with pytest.raises(nb.OpError, match="quantile: q must be a number or 1-D numbers"):
        nb.quantile(y, 1.5)
    with pytest.raises(nb.OpError, match="quantile: method must be one of"):
        nb.quantile(y, 0.5, method="inverted_cdf")
    # NumPy's other methods, and the NaN-skipping forms (NaN for an all-NaN slice)
    z = np.array([[3.0, np.nan, 1.0, 7.0, 2.0], [np.nan] * 5, [4.0, 0.5, np.nan, np.nan, 9.0]])
    for method in ("linear", "lower", "higher", "nearest", "midpoint"):
        for q in (0.0, 0.3, 0.5, 0.75, 1.0):
            same(nb.quantile(y, q, axis=1, method=method), np.quantile(y, q, axis=1, method=method))
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                want = np.nanquantile(z, q, axis=1, method=method)
            same(nb.nanquantile(z, q, axis=1, method=method), want)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        same(nb.nanmedian(z, 1), np.nanmedian(z, 1))
        same(nb.nanpercentile(z, [10, 90], 1), np.nanpercentile(z, [10, 90], 1))
    same(nb.nanprod(z, 1), np.nanprod(z, 1))
    g = nb.grad(lambda v: nb.nanmedian(v))(z[0]).numpy()  # (the middle of 4 values: 2, 3)
    assert g.tolist() == [0.5, 0.0, 0.0, 0.0, 0.5]


def test_average():
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    w = np.array([1.0, 2, 3, 4], np.float32)
    for kw in (
        {},
        {"axis": 1},
        {"axis": 1, "weights": w},
        {"axis": 1, "weights": w, "keepdims": True},
    ):
        same(nb.average(a, **kw), np.average(a, **kw))
    got, want = nb.average(a, 0, a + 1, returned=True), np.average(a, 0, a + 1, returned=True)
    same(got[0], want[0])
    same(got[1], want[1])
    assert nb.average(a, returned=True)[1].item() == 12.0
    same(nb.grad(lambda v: nb.average(v, weights=w))(a[0]), w / w.sum())
    with pytest.raises(nb.OpError, match=r"average: weights of shape \(4,\) for a of shape"):
        nb.average(a, weights=w)


def test_the_names_a_port_from_jax_reaches_for():
    """What a check of JAX programs ported by changing the import found missing: calling a
    dtype (``jnp.float32(x)``), dtype queries, ``newaxis``, the Python-valued shape
    queries, JAX's placement helpers, ``eval_shape``, ``logsumexp``'s ``b=`` and
    ``return_sign=``, and ``jit``'s donation hints."""
    assert nb.float32(3).dtype == nb.float32 and nb.float32(3).item() == 3.0
    assert nb.int32([1.7, -2.2]).tolist() == [1, -2]  # (truncated, as JAX's)
    assert nb.bfloat16(nb.constant([1.0, 2.0])).dtype == nb.bfloat16
    assert nb.finfo(nb.float32).eps == np.finfo(np.float32).eps
    assert float(nb.finfo(nb.bfloat16).eps) == 2.0**-7
    assert nb.finfo(nb.constant([1.0])).bits == 32 and nb.iinfo("int8").max == 127
    with pytest.raises(ValueError, match="finfo: nb.int32 is not a float dtype"):
        nb.finfo(nb.int32)
    assert nb.issubdtype(nb.float16, nb.floating) and nb.issubdtype(nb.bfloat16, nb.inexact)
    assert not nb.issubdtype(nb.int32, nb.floating) and nb.issubdtype(nb.uint8, nb.integer)
    assert nb.issubdtype(np.float32, nb.float32) and not nb.issubdtype(nb.float32, nb.float64)
    assert nb.result_type(nb.int8, 1.0) == nb.float32  # (a Python float is weak)
    assert nb.result_type(nb.int8, nb.uint8) == nb.int16
    assert nb.result_type(nb.ones((2,)), np.zeros(2)) == nb.float64
    x = nb.ones((2, 3))
    assert x[:, nb.newaxis].shape == (2, 1, 3)
    assert (nb.ndim(x), nb.shape([[1, 2]]), nb.size(x), nb.size(x, -1)) == (2, (1, 2), 6, 3)
    assert nb.broadcast_shapes((2, 1), (3,)) == (2, 3)
    with pytest.raises(ValueError, match=r"broadcast_shapes: shapes \[\(2,\), \(3,\)\]"):
        nb.broadcast_shapes((2,), (3,))
    got = nb.device_get({"a": x * 2, "b": [3, None]})
    assert isinstance(got["a"], np.ndarray) and got["a"].sum() == 12 and got["b"] == [3, None]
    y = x + 1
    assert nb.block_until_ready(y) is y and y._impl.buffer is not None
    put = nb.device_put({"w": np.ones(2, np.float32), "n": 3})
    assert isinstance(put["w"], nb.Tensor) and isinstance(put["n"], nb.Tensor)
    out = nb.eval_shape(
        lambda a, b: {"y": a @ b, "s": a.sum()},
        nb.ShapeDtypeStruct((4, 5), nb.float32),
        np.zeros((5, 2), np.float32),
    )
    assert out == {
        "y": nb.ShapeDtypeStruct((4, 2), nb.float32),
        "s": nb.ShapeDtypeStruct((), nb.float32),
    }
    a = np.float32([[1, 2, 3], [0, -1, 5]])
    b = np.float32([1, -0.5, 2])
    want = np.log((b * np.exp(a)).sum(1))
    np.testing.assert_allclose(nb.logsumexp(a, 1, b=b).numpy(), want, rtol=1e-6)
    val, sign = nb.logsumexp(a[0], b=-b, return_sign=True)
    assert sign.item() == -1.0 and val.item() == pytest.approx(np.log((b * np.exp(a[0])).sum()))
    g = nb.grad(lambda v: nb.logsumexp(v, b=b))(nb.constant(a[0])).numpy()
    np.testing.assert_allclose(g, b * np.exp(a[0]) / (b * np.exp(a[0])).sum(), rtol=1e-5)
    step = nb.jit(lambda p, v: p * v, donate_argnums=(0,), donate_argnames="p")
    assert step(x, 2.0).tolist() == [[2.0] * 3] * 2 and x.tolist() == [[1.0] * 3] * 2
    assert nb.radians(180.0).item() == pytest.approx(np.pi) and nb.fix(-1.5).item() == -1.0


def test_the_jax_names_edges_a_check_found():
    """Found by a check of the functions above against JAX, NumPy and PyTorch: a zero
    ``b`` drops its term in ``logsumexp`` (an inf or NaN there gave NaN); ``sinc``'s
    curvature at 0; ``heaviside`` of NaN; the binary functions promote as the binary ops
    (Python numbers weak); ``cbrt(-0.0)``; JAX's clipping in ``unravel_index`` and the
    modes of ``ravel_multi_index``; ``eval_shape`` refuses to read values."""
    x, b = nb.constant([np.inf, 2.0]), nb.constant([0.0, 1.0])
    assert nb.logsumexp(x, b=b).item() == 2.0
    assert nb.logsumexp(nb.constant([np.nan, 1.0]), b=b).item() == 1.0
    g = nb.grad(lambda v: nb.logsumexp(v, b=b))(nb.constant([-np.inf, 0.0])).numpy()
    assert g.tolist() == [0.0, 1.0]
    assert nb.logsumexp(np.ones(2, np.float16), b=np.ones(2, np.float32)).dtype == nb.float32
    curvature = nb.grad(nb.grad(nb.sinc))(nb.constant(0.0)).item()
    assert curvature == pytest.approx(-(np.pi**2) / 3, rel=1e-6)
    assert nb.grad(nb.sinc)(nb.constant(0.0)).item() == 0.0 and nb.sinc(0.0).item() == 1.0
    assert np.isnan(nb.heaviside(nb.constant([np.nan]), 0.5).numpy()).all()
    f16, f64 = nb.ones((2,), dtype=nb.float16), nb.ones((2,), dtype=nb.float64)
    assert nb.copysign(nb.ones((2,)), f64).dtype == nb.float64
    assert nb.copysign(2, f16).dtype == nb.float16 and nb.logaddexp2(f16, 2).dtype == nb.float16
    assert nb.fmax(nb.ones((2,), dtype=nb.int8), 2).dtype == nb.int8
    assert nb.rint(nb.constant([1, 2])).dtype == nb.float32
    assert np.signbit(nb.cbrt(nb.constant([-0.0])).numpy()).all()
    rows, cols = nb.unravel_index(nb.constant([-1, 12, -13, 5]), (3, 4))
    assert rows.tolist() == [2, 2, 0, 1] and cols.tolist() == [3, 3, 0, 1]
    with pytest.raises(nb.OpError, match=r"unravel_index: shape \(0, 4\) has no element"):
        nb.unravel_index(nb.constant([0]), (0, 4))
    (flat,) = nb.unravel_index(nb.constant([3, 1]), 4)  # an int shape, as NumPy's
    assert flat.tolist() == [3, 1]
    r, c = nb.constant([1]), nb.constant([5])
    with pytest.raises(nb.OpError, match=r"coordinate 1 holds 5..5, out of range for dim 4"):
        nb.ravel_multi_index((r, c), (3, 4))
    assert nb.ravel_multi_index((r, c), (3, 4), mode="clip").tolist() == [7]
    assert nb.ravel_multi_index((r, c), (3, 4), mode="wrap").tolist() == [5]
    assert nb.column_stack([nb.constant(1.0), nb.constant(2.0)]).shape == (1, 2)
    assert nb.polyval(nb.zeros((0,)), nb.ones((3,))).tolist() == [0.0, 0.0, 0.0]
    assert nb.size(nb.ones((2, 3, 4)), (0, 2)) == 8
    # promotion as the binary ops' (a review found these differ): NumPy numbers weak, the
    # default float dtype for integers, a Python default or b or x weak
    i8, f16 = nb.ones((2,), dtype=nb.int8), nb.ones((2,), dtype=nb.float16)
    assert nb.fmax(i8, np.int64(2)).dtype == nb.int8
    assert nb.copysign(f16, np.float64(-1)).dtype == nb.float16
    with nb.default_dtype(nb.float64):
        assert nb.cbrt(nb.constant([8])).dtype == nb.float64
    assert nb.select([i8 > 0], [i8], 0).dtype == nb.int8
    assert nb.logsumexp(f16, b=2.0).dtype == nb.float16 and nb.polyval(f16, 2.0).dtype == nb.float16
    assert not nb.issubdtype(nb.float32, float) and nb.issubdtype(nb.float64, float)
    assert not nb.issubdtype(nb.int32, int) and not nb.issubdtype(nb.float32, nb.bfloat16)
    assert nb.empty_like(nb.ones((2, 3)), nb.int32).dtype == nb.int32
    assert nb.empty_like(nb.ones((2, 3)), shape=(4,)).shape == (4,)
    with pytest.raises(nb.OpError, match="nonzero: the number of nonzero elements"):
        nb.eval_shape(lambda v: nb.nonzero(v)[0], nb.ShapeDtypeStruct((4,), nb.float32))
    with pytest.raises(nb.ConcretizationError):
        nb.eval_shape(lambda v: v[: int(float(v.sum()))], nb.ShapeDtypeStruct((4,), nb.float32))
    key_draw = nb.eval_shape(lambda k: nb.random.normal(k, (3,)), nb.random.key(0))
    assert key_draw == nb.ShapeDtypeStruct((3,), nb.float32)


def test_linalg_decompositions_follow_jax():
    """``nb.linalg``'s LAPACK ops on what a check against JAX found: ``solve`` takes ``b``
    as a vector only when 1-D (NumPy 2's and JAX's rule), and names the shapes when the
    batches do not broadcast; ``cholesky(symmetrize_input=False)``'s reverse mode agrees
    with its forward mode (the rule had symmetrized); a singular ``slogdet`` is (0, -inf)
    and a matrix LAPACK refuses gives NaN."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 3, 3)) + 3 * np.eye(3)
    b = rng.standard_normal((3, 3))
    got = nb.linalg.solve(a, b).numpy()
    assert got.shape == (3, 3, 3)
    np.testing.assert_allclose(got, np.linalg.solve(a, b), rtol=1e-6)
    np.testing.assert_allclose(
        nb.linalg.solve(a, b[0]).numpy(), np.linalg.solve(a, b[0]), rtol=1e-6
    )
    with pytest.raises(nb.OpError, match=r"linalg.solve: the leading dims of a \(2, 3, 3\)"):
        nb.linalg.solve(np.ones((2, 3, 3)), np.ones((3, 3, 1)))
    with pytest.raises(nb.OpError, match=r"linalg.inv: expects square matrices"):
        nb.linalg.inv(np.ones((2, 3)))
    m = rng.standard_normal((3, 3))
    spd = m @ m.T + 3 * np.eye(3)
    x = nb.constant(spd)

    def f(v):
        return (nb.linalg.cholesky(v, symmetrize_input=False) ** 2).sum()

    rev = nb.grad(f)(x).numpy()
    fwd = nb.jacfwd(f)(x).numpy()
    np.testing.assert_allclose(rev, fwd, rtol=1e-6, atol=1e-9)
    assert not np.allclose(rev, rev.T)  # (the lower triangle is what it reads)
    sym = nb.grad(lambda v: (nb.linalg.cholesky(v) ** 2).sum())(x).numpy()
    np.testing.assert_allclose(sym, sym.T, atol=1e-12)
    sign, logabs = nb.linalg.slogdet(np.zeros((2, 2)))
    assert (sign.item(), logabs.item()) == (0.0, -np.inf)
    assert np.isnan(nb.linalg.cholesky(-np.eye(2)).numpy()).all()
    assert nb.linalg.det(np.eye(3) * 2).item() == pytest.approx(8.0)
    thresholded = nb.nn.functional.threshold(nb.constant([np.nan, 1.0, -1.0]), 0.1, 20.0)
    assert np.isnan(thresholded.numpy()[0]) and thresholded.numpy()[1:].tolist() == [1, 20]


def _adjugate_t(a):
    """The cofactor matrix (the adjugate's transpose) from its definition, in float64."""
    n = a.shape[-1]
    out = np.empty_like(a, np.float64)
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(a, i, 0), j, 1)
            out[i, j] = (-1) ** (i + j) * np.linalg.det(minor.astype(np.float64))
    return out


def test_det_gradient_is_the_cofactor_matrix_singular_or_not():
    """``det``'s derivative is the adjugate's transpose: ``det A^-T`` needs an inverse, and
    was NaN at a singular matrix (JAX gives the cofactors there)."""
    rng = np.random.default_rng(4)
    mats = [
        np.array([[1.0, 2.0], [2.0, 4.0]]),  # rank 1 of 2: cofactors non-zero
        np.array([[1.0, 2, 3], [4, 5, 6], [7, 8, 9]]),  # rank 2 of 3
        np.zeros((3, 3)),  # rank 0: all cofactors 0
        rng.standard_normal((3, 3)),
    ]
    for a in mats:
        for dt in (np.float32, np.float64):
            got = nb.grad(nb.linalg.det)(nb.constant(a.astype(dt))).numpy()
            assert np.isfinite(got).all() and got.dtype == dt
            np.testing.assert_allclose(got, _adjugate_t(a), rtol=1e-4, atol=1e-5)
            # forward mode: d det = <cofactors, dA>
            t = rng.standard_normal(a.shape)
            _, tan = nb.jvp(nb.linalg.det, (nb.constant(a),), (nb.constant(t),))
            assert tan.item() == pytest.approx(float((_adjugate_t(a) * t).sum()), abs=1e-9)
    # batched, and the second derivative of an invertible matrix as before
    stack = np.stack([mats[0], np.eye(2), 2 * np.eye(2)])
    got = nb.vmap(nb.grad(nb.linalg.det))(nb.constant(stack)).numpy()
    np.testing.assert_allclose(got, [_adjugate_t(m) for m in stack], atol=1e-12)
    a = mats[3]
    hess = nb.hessian(nb.linalg.det)(nb.constant(a)).numpy()
    eps = 1e-6
    for i, j in ((0, 0), (1, 2)):
        da = np.zeros_like(a)
        da[i, j] = eps
        want = (_adjugate_t(a + da) - _adjugate_t(a - da)) / (2 * eps)
        np.testing.assert_allclose(hess[:, :, i, j], want, atol=1e-6)


def test_svd_qr_and_pinv_rules_beyond_the_registry():
    """The registry checks ``svd``/``qr``/``pinv`` against NumPy with finite differences,
    the adjoint identity and vmap; here what it does not: the full/complete forms' refused
    derivatives name the fix, and ``pinv``'s closed-form derivative holds at repeated
    singular values (an orthogonal matrix), where the SVD's drops the rotations."""
    rng = np.random.default_rng(5)
    tall = rng.standard_normal((4, 3))
    u, s, vh = nb.linalg.svd(tall)  # (full_matrices=True by default, NumPy's and JAX's)
    assert (u.shape, s.shape, vh.shape) == ((4, 4), (3,), (3, 3))
    np.testing.assert_allclose(nb.linalg.svdvals(tall).numpy(), np.linalg.svd(tall)[1])
    with pytest.raises(nb.OpError, match=r"svd: no derivative for full_matrices=True .*\(4, 3\)"):
        nb.grad(lambda m: nb.linalg.svd(m)[0].sum())(tall)
    with pytest.raises(nb.OpError, match=r"qr: no derivative for mode='complete' .*\(4, 3\)"):
        nb.grad(lambda m: nb.linalg.qr(m, "complete")[0].sum())(tall)
    with pytest.raises(nb.OpError, match="mode must be 'reduced', 'complete' or 'r'"):
        nb.linalg.qr(tall, "raw")
    np.testing.assert_allclose(nb.linalg.qr(tall, "r").numpy(), np.linalg.qr(tall, "r"))
    q = np.linalg.qr(rng.standard_normal((3, 3)))[0]
    w = rng.standard_normal((3, 3))
    g = nb.grad(lambda m: (nb.linalg.pinv(m) * w).sum())(q).numpy()
    eps = 1e-6  # central differences of the pseudo-inverse itself
    fd = np.zeros_like(q)
    for i in np.ndindex(q.shape):
        d = np.zeros_like(q)
        d[i] = eps
        fd[i] = ((np.linalg.pinv(q + d) - np.linalg.pinv(q - d)) * w).sum() / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    low = np.diag([1.0, 1.0, 0.0]) @ rng.standard_normal((3, 3))  # rank 2
    np.testing.assert_allclose(nb.linalg.pinv(low).numpy(), np.linalg.pinv(low), atol=1e-12)
    assert nb.linalg.matrix_rank(low).item() == 2


def test_linalg_composites_match_numpy():
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    x, resid, rank, s = nb.linalg.lstsq(a, b)
    want = np.linalg.lstsq(a, b, rcond=None)
    for got, ref in zip((x, resid, rank, s), want, strict=True):
        np.testing.assert_allclose(np.asarray(got.numpy()), ref, rtol=1e-10)
    x1, resid1, _, _ = nb.linalg.lstsq(a, b[:, 0])  # a vector b: resid of shape (1,)
    assert x1.shape == (3,) and resid1.shape == (1,)
    wide = nb.linalg.lstsq(a.T, b[:3], numpy_resid=True)[1]
    assert wide.shape == (0,)  # (m <= n: NumPy's empty residuals)
    g = nb.grad(lambda m: nb.linalg.lstsq(m, b)[0].sum())(a).numpy()
    g_pinv = nb.grad(lambda m: (nb.linalg.pinv(m) @ b).sum())(a).numpy()
    np.testing.assert_allclose(g, g_pinv, rtol=1e-8)
    sq = rng.standard_normal((3, 3))
    for n in (0, 1, 2, 5, -1, -3):
        np.testing.assert_allclose(
            nb.linalg.matrix_power(sq, n).numpy(), np.linalg.matrix_power(sq, n), rtol=1e-8
        )
    with pytest.raises(TypeError, match="matrix_power: n must be an int"):
        nb.linalg.matrix_power(sq, 2.0)
    for p in (None, 2, -2, "fro", "nuc", 1, -1, np.inf):
        np.testing.assert_allclose(nb.linalg.cond(sq, p).numpy(), np.linalg.cond(sq, p))
    for o in (2, -2, "nuc"):
        np.testing.assert_allclose(nb.linalg.norm(a, o).numpy(), np.linalg.norm(a, o))
        got = nb.linalg.norm(rng.standard_normal((2, 4, 3)), o, axis=(2, 0), keepdims=True)
        assert got.shape == (1, 4, 1)
    vec = rng.standard_normal(3)
    chain = nb.linalg.multi_dot([vec, sq, sq, a.T])
    np.testing.assert_allclose(chain.numpy(), np.linalg.multi_dot([vec, sq, sq, a.T]))
    t = rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(nb.linalg.trace(t, offset=1).numpy(), np.trace(t, 1, -2, -1))
    np.testing.assert_allclose(nb.linalg.diagonal(t, offset=-1).numpy(), np.diagonal(t, -1, -2, -1))
    np.testing.assert_allclose(
        nb.linalg.vector_norm(t, axis=(0, 2), ord=3).numpy(),
        (np.abs(t) ** 3).sum((0, 2)) ** (1 / 3),
    )
    assert nb.linalg.vector_norm(t, keepdims=True).shape == (1, 1, 1)
    np.testing.assert_allclose(
        nb.linalg.matrix_norm(t, ord="nuc").numpy(), np.linalg.norm(t, "nuc", axis=(-2, -1))
    )
    v3, w3 = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    np.testing.assert_allclose(nb.linalg.cross(v3, w3).numpy(), np.cross(v3, w3))
    with pytest.raises(nb.OpError, match=r"linalg.cross: vectors of size 3 .* \(4, 2\)"):
        nb.linalg.cross(v3[:, :2], w3[:, :2])
    assert nb.linalg.matrix_transpose(t).shape == (2, 4, 3)


def test_tensorinv_and_tensorsolve_match_numpy():
    rng = np.random.default_rng(7)
    a = (5 * np.eye(24) + rng.standard_normal((24, 24))).reshape(4, 6, 8, 3)
    np.testing.assert_allclose(nb.linalg.tensorinv(a).numpy(), np.linalg.tensorinv(a), rtol=1e-10)
    np.testing.assert_allclose(
        nb.linalg.tensorinv(a.reshape(24, 24), ind=1).numpy(),
        np.linalg.inv(a.reshape(24, 24)),
        1e-9,
    )
    b = rng.standard_normal((4, 6))
    want = np.linalg.tensorsolve(a, b)
    np.testing.assert_allclose(nb.linalg.tensorsolve(a, b).numpy(), want, rtol=1e-10)
    c = np.moveaxis(a, 3, 0).copy()  # the unknowns' dims given by axes, as NumPy's
    got = nb.linalg.tensorsolve(c, b, axes=(0,)).numpy()
    np.testing.assert_allclose(got, np.linalg.tensorsolve(c, b, axes=(0,)), rtol=1e-10)
    # gradients against central differences of a few entries
    f = lambda m: (nb.linalg.tensorsolve(m, b) ** 2).sum()  # noqa: E731
    g = nb.grad(f)(a).numpy()
    for idx in ((0, 0, 0, 0), (1, 2, 3, 1), (3, 5, 7, 2)):
        step = np.zeros_like(a)
        step[idx] = 1e-6
        fd = (f(a + step).item() - f(a - step).item()) / 2e-6
        np.testing.assert_allclose(g[idx], fd, rtol=1e-5)
    with pytest.raises(nb.OpError, match=r"tensorinv: a of shape \(2, 3\) is no square map"):
        nb.linalg.tensorinv(np.ones((2, 3)), 1)
    with pytest.raises(nb.OpError, match=r"make 2 equations in 3 unknowns"):
        nb.linalg.tensorsolve(np.ones((2, 3)), np.ones(2))


def test_pad_takes_numpy_s_modes_and_per_side_settings():
    """Modes NumPy and JAX have beyond constant/reflect/edge/wrap, and per-side settings
    (they were "unknown mode" or a TypeError); integers round as NumPy's do (the mean to
    the nearest, the ramp down); the registry checks the float ones with gradients."""
    xi = RNG.integers(-5, 9, (3, 5)).astype(np.int32)
    for x in (A, xi):
        for w in (1, ((0, 2), (3, 1)), ((2, 2), (6, 7))):
            for mode in ("symmetric", "maximum", "minimum", "mean", "median", "linear_ramp"):
                same(nb.pad(x, w, mode=mode), np.pad(x, w, mode=mode))
            same(nb.pad(x, w, mode="median", stat_length=2), np.pad(x, w, "median", stat_length=2))
            ends = ((1, 2), (-3, 4))
            same(
                nb.pad(x, w, "linear_ramp", end_values=ends),
                np.pad(x, w, "linear_ramp", end_values=ends),
            )
            same(nb.pad(x, w, constant_values=(7, 9)), np.pad(x, w, constant_values=(7, 9)))
    same(nb.pad(A, 2, mode="empty"), np.pad(A, 2))
    with pytest.raises(nb.OpError, match="reflect_type='odd' padding wider than the dim"):
        nb.pad(A, 3, mode="reflect", reflect_type="odd")
    with pytest.raises(nb.OpError, match=r"pad: stat_length \(1, 2, 3\) is not one value"):
        nb.pad(A, 1, mode="mean", stat_length=(1, 2, 3))


def test_more_of_jnp_and_their_errors():
    """The names a port from jnp reached for next; the registry checks each against NumPy
    with vmap and gradients, here the errors and what the registry does not cover."""
    with pytest.raises(nb.OpError, match="geomspace: start and stop must be non-zero"):
        nb.geomspace(-1.0, 8.0, 4)
    with pytest.raises(nb.OpError, match=r"hsplit: 3 sections do not divide dim 1"):
        nb.hsplit(A, 3)
    with pytest.raises(nb.OpError, match=r"cumulative_sum: axis is required .* \(3, 4\)"):
        nb.cumulative_sum(A)
    with pytest.raises(nb.OpError, match="nanargmax: an all-NaN slice"):
        nb.nanargmax(np.array([[1.0, np.nan], [np.nan, np.nan]]), axis=1)
    with pytest.raises(nb.OpError, match="interp: period is not supported"):
        nb.interp(A, [0.0, 1.0], [1.0, 2.0], period=2.0)
    same(
        nb.interp(A, [0.0, 1.0], [1.0, 2.0], left=-7, right=9), np.interp(A, [0, 1], [1, 2], -7, 9)
    )
    same(nb.interp(A, [0.5], [3.0]), np.interp(A, [0.5], [3.0]))
    same(nb.modf(np.array([np.inf, -np.inf]))[0], np.modf(np.array([np.inf, -np.inf]))[0])
    # a copy is its own tensor: an in-place change of the original is not seen in it
    t = nb.constant(A.copy())
    c = nb.copy(t)
    t.add_(1.0)
    same(c, A)
    for got, want in zip(
        nb.indices((2, 3), sparse=True), np.indices((2, 3), sparse=True), strict=True
    ):
        same(got, want)
    same(nb.ix_(np.array([True, False, True]))[0], np.ix_(np.array([True, False, True]))[0])


def test_jnp_keywords_a_port_passes():
    """Keywords jax.numpy code passes that were a TypeError or an unknown mode: take's and
    take_along_axis' modes (JAX's answers: negatives to 0 under take's clip, from the end
    under take_along_axis'), repeat's total_repeat_length (the last element fills, as in
    JAX), reshape/ravel order="F", meshgrid sparse, concatenate/stack dtype, *_like shape,
    einsum's optimize and preferred_element_type, searchsorted's method."""
    x = np.arange(5.0, dtype=np.float32) * 10
    i = np.array([-7, -1, 0, 4, 5, 9])
    same(nb.take(x, i, mode="clip"), [0, 0, 0, 40, 40, 40])
    same(nb.take(x, i, mode="wrap"), [30, 40, 0, 40, 0, 40])
    same(nb.take(x, i, mode="fill"), [np.nan, 40, 0, 40, np.nan, np.nan])
    same(nb.take(x, i, mode="fill", fill_value=-3.0), [-3, 40, 0, 40, -3, -3])
    ints = nb.take(np.arange(5, dtype=np.int32), i, mode="fill").numpy()
    assert ints[0] == np.iinfo(np.int32).min and ints[1] == 4
    g = nb.grad(lambda t: nb.sum(nb.take(t, np.array([0, 7, -1]), mode="fill", fill_value=0.0)))
    same(g(x), [1, 0, 0, 0, 1])
    same(
        nb.vmap(lambda r: nb.take(r, np.array([0, 9]), mode="fill"))(A),
        [[v, np.nan] for v in A[:, 0]],
    )
    rows, idx = A, np.array([[0, 5], [-1, 2], [3, -9]])
    same(
        nb.take_along_axis(rows, idx, axis=1, mode="clip"),
        np.take_along_axis(A, np.array([[0, 3], [3, 2], [3, 0]]), 1),
    )
    filled = nb.take_along_axis(rows, idx, axis=1, mode="fill").numpy()
    assert np.isnan(filled[0, 1]) and np.isnan(filled[2, 1]) and filled[1, 0] == A[1, 3]
    same(nb.take_along_axis(A, np.array([1, 11]), axis=None), A.ravel()[[1, 11]])
    last = np.array([[2], [0], [3]])  # axis defaults to the last, as NumPy's and JAX's
    same(nb.take_along_axis(A, last), np.take_along_axis(A, last, -1))
    for reps, total, want in (
        ([1, 2, 0], 5, [0, 1, 1, 2, 2]),
        (2, 4, [0, 0, 1, 1]),
        (2, 7, [0, 0, 1, 1, 2, 2, 2]),
    ):
        same(nb.repeat(np.arange(3), reps, total_repeat_length=total), want)
    same(nb.reshape(T, (4, 6), order="F"), np.reshape(T, (4, 6), order="F"))
    same(nb.ravel(T, order="F"), np.ravel(T, order="F"))
    for got, want in zip(
        nb.meshgrid(np.arange(3), np.arange(4), sparse=True),
        np.meshgrid(np.arange(3), np.arange(4), sparse=True),
        strict=True,
    ):
        same(got, want)
    assert nb.concatenate([np.ones(2), np.zeros(2, np.int32)], dtype=nb.int32).dtype == nb.int32
    assert nb.stack([np.ones(2)], dtype=nb.float16).dtype == nb.float16
    assert nb.zeros_like(A, shape=(2, 5)).shape == (2, 5) and nb.ones_like(A, shape=()).shape == ()
    small = np.arange(6, dtype=np.int8).reshape(2, 3)
    got = nb.einsum("ij,kj->ik", small, small, optimize="greedy", preferred_element_type=nb.int32)
    assert got.dtype == nb.int32
    same(got, small.astype(np.int32) @ small.T.astype(np.int32))
    same(nb.searchsorted(np.arange(5.0), 2.5, method="compare_all"), 3)


def test_unique_under_compile_and_the_errors_of_the_value_shaped_functions():
    """unique with size runs under compile (one sort; JAX's fills); the functions whose
    result's length is their values' say so when the values are not known."""
    u = np.array([3, 1, 3, 2, 7, 1], np.int32)
    step = nb.compile(lambda v: nb.unique(v, size=6, return_counts=True))
    values, counts = step(u)
    same(values, [1, 2, 3, 7, 1, 1])
    same(counts, [2, 1, 2, 1, 0, 0])
    same(nb.unique(np.array([1.0, np.nan, np.nan])), [1.0, np.nan])
    with pytest.raises(IndexError, match="unique: axis 1 is out of range"):
        nb.unique(u, axis=1)
    with pytest.raises(nb.OpError, match="trim_zeros: the values must be known at the call"):
        nb.compile(nb.trim_zeros)(np.array([0.0, 1.0, 0.0]))
    with pytest.raises(nb.OpError, match=r"choose: indices 0\.\.5 are out of range for 2"):
        nb.choose(np.array([0, 5]), [np.zeros(2), np.ones(2)])
    with pytest.raises(nb.OpError, match="convolve: mode must be 'full', 'same' or 'valid'"):
        nb.convolve(np.ones(3), np.ones(2), mode="circular")


def test_trim_zeros_along_any_dims_as_numpy():
    rng = np.random.default_rng(4)
    for shape in ((7,), (4, 5), (3, 4, 5)):
        a = (rng.random(shape) > 0.7) * rng.integers(1, 5, shape)
        for axis in (None, 0, -1, tuple({0, len(shape) - 1})):
            for trim in ("f", "b", "fb"):
                same(nb.trim_zeros(a, trim, axis=axis), np.trim_zeros(a, trim, axis=axis))
    assert nb.trim_zeros(np.zeros((3, 3))).shape == (0, 0)
    with pytest.raises(nb.OpError, match="trim_zeros: trim must be 'f', 'b' or 'fb', got 'x'"):
        nb.trim_zeros(np.ones(3), "x")


def test_unique_along_an_axis_compares_whole_slices():
    """NumPy's answers without size, JAX's fill with size, under vmap and compile too;
    slices with NaNs at the same places are one value (JAX's equal_nan; NumPy keeps each)."""
    rng = np.random.default_rng(3)
    a = rng.integers(0, 3, (40, 3)).astype(np.float32)
    flags = dict(return_index=True, return_inverse=True, return_counts=True)
    for axis in (0, 1, -1):
        want = np.unique(a, axis=axis, **flags)
        for got, ref in zip(nb.unique(a, axis=axis, **flags), want, strict=True):
            np.testing.assert_array_equal(got.numpy(), ref)
    a[5] = a[7] = [np.nan, 1.0, np.nan]
    values, counts = nb.unique(a, axis=0, return_counts=True)
    assert np.isnan(values.numpy()[-1, 0]) and counts.numpy()[-1] == 2
    assert len(values.numpy()) == len(np.unique(a, axis=0)) - 1
    b = rng.integers(0, 3, (3, 10, 2)).astype(np.int32)
    values, index, counts = nb.unique(
        b, axis=1, size=12, fill_value=-1, return_index=True, return_counts=True
    )
    ref_values, ref_index, ref_counts = np.unique(b, axis=1, return_index=True, return_counts=True)
    k = ref_values.shape[1]
    same(values[:, :k], ref_values)
    assert (values.numpy()[:, k:] == -1).all() and (counts.numpy()[k:] == 0).all()
    same(index[:k], ref_index)
    same(counts[:k], ref_counts)
    batched = nb.vmap(lambda r: nb.unique(r, axis=0, size=10, fill_value=0))(b).numpy()
    for row, got in zip(b, batched, strict=True):
        ref = np.unique(row, axis=0)
        np.testing.assert_array_equal(got[: len(ref)], ref)
    step = nb.compile(lambda v: nb.unique(v, axis=0, size=4, return_counts=True))
    values, counts = step(np.array([[1, 2], [0, 5], [1, 2]], np.int32))
    same(values, [[0, 5], [1, 2], [0, 5], [0, 5]])  # (past the values: the smallest, as JAX's)
    same(counts, [1, 2, 0, 0])


def test_take_diagonal_and_searchsorted_as_tensor_methods():
    """JAX's and PyTorch's x.take (flattened by default), x.diagonal (PyTorch's dim1/dim2
    too) and JAX's x.searchsorted."""
    x = nb.constant(A)
    same(x.take(np.array([1, 5])), A.ravel()[[1, 5]])
    same(x.take(np.array([0, 9]), axis=1, mode="clip"), A[:, [0, 3]])
    same(x.diagonal(1), np.diagonal(A, 1))
    same(x.diagonal(dim1=1, dim2=0), np.diagonal(A, 0, 1, 0))
    same(nb.constant(np.arange(5.0)).searchsorted(np.array([2.5, 0.0]), side="right"), [3, 1])


def test_the_new_functions_edges_a_check_found():
    """Found by checking this round's functions against JAX: correlate's "same" window
    when v is the longer one (NumPy slides the longer and reverses), pad's median with a
    NaN, bincount of negative values only, einsum's integer preferred type for floats,
    odd reflection up to one period, nanargmax of integers, geomspace with one array
    bound, unique of nothing with size, and repeat's traced counts under vmap."""
    for a, v in ((np.arange(1.0, 3.0), np.arange(6.0)), (np.arange(4.0), np.arange(7.0))):
        for mode in ("same", "full", "valid"):
            same(nb.correlate(a, v, mode), np.correlate(a, v, mode))
    g = nb.grad(lambda t: nb.sum(nb.correlate(t, np.arange(6.0), "same") * np.arange(6.0)))
    unit = np.eye(2)  # (linear in t: the gradient's entries are correlations of unit vectors)
    want = [np.correlate(e, np.arange(6.0), "same") @ np.arange(6.0) for e in unit]
    same(g(np.array([1.0, 2.0])), want)
    x = np.array([1.0, np.nan, 3.0, 4.0])
    same(nb.pad(x, 2, mode="median"), np.pad(x, 2, mode="median"))
    same(nb.bincount(np.array([-3, -1])), [2])
    pet = nb.einsum(
        "ij,jk->ik",
        np.full((1, 2), 0.6, np.float32),
        np.ones((2, 1), np.float32),
        preferred_element_type="int32",
    )
    assert pet.dtype == nb.int32 and pet.item() == 1
    for mode, width in (("symmetric", 3), ("reflect", 2), ("reflect", (1, 2))):
        got = nb.pad(np.array([0.0, 1.0, 4.0]), width, mode=mode, reflect_type="odd")
        same(got, np.pad(np.array([0.0, 1.0, 4.0]), width, mode=mode, reflect_type="odd"))
    same(nb.nanargmax(np.array([[3, 1], [0, 7]]), axis=1), [0, 1])
    same(nb.geomspace(np.array([1.0, 2.0]), 100.0, 3), np.geomspace(np.array([1.0, 2.0]), 100.0, 3))
    same(nb.unique(np.zeros(0, np.float32), size=3, fill_value=9.0), [9.0, 9.0, 9.0])
    reps = np.array([[1, 3], [3, 1]], np.int32)
    rows = np.array([[0.0, 2.0], [4.0, 5.0]], np.float32)
    got = nb.vmap(lambda r, k: nb.repeat(r, k, total_repeat_length=4))(rows, reps)
    same(got, [[0, 2, 2, 2], [4, 4, 4, 5]])
    same(nb.delete(np.arange(4), []), np.arange(4))
    for bad, match in (
        (lambda: nb.partition(np.arange(3), 3), "partition: kth=3 is out of range"),
        (lambda: nb.matvec(np.ones(2), np.ones(2)), "matvec: needs a matrix and a vector"),
        (lambda: nb.pad(np.ones(3), 1, "mean", stat_length=0), "pad: stat_length must be >= 1"),
        (lambda: nb.block([]), "block: an empty list"),
    ):
        with pytest.raises(nb.OpError, match=match):
            bad()


def test_put_fill_diagonal_and_the_grids():
    """JAX's functional put/put_along_axis/fill_diagonal (inplace=False, as JAX requires;
    in place is PyTorch's x[...] = v) and NumPy's mgrid/ogrid."""
    a = np.arange(6).reshape(2, 3)
    same(
        nb.put(a, np.array([0, 7, -1]), np.array([9, 8, 7]), inplace=False), [[9, 1, 2], [3, 4, 7]]
    )
    same(nb.put(a, np.array([1, 2, 3, 4]), np.array([9, 8]), inplace=False), [[0, 9, 8], [9, 8, 5]])
    with pytest.raises(ValueError, match="put: pass inplace=False"):
        nb.put(a, [0], 1)
    same(
        nb.put_along_axis(a, np.array([[1, 0, -1]]), 7, axis=0, inplace=False),
        [[0, 7, 2], [7, 4, 7]],
    )
    same(nb.fill_diagonal(np.zeros((3, 3, 3)), [1.0, 2.0, 3.0], inplace=False)[2, 2, 2], 3.0)
    same(nb.mgrid[0:2, 0:3], np.mgrid[0:2, 0:3])
    same(nb.mgrid[0:1:5j], np.mgrid[0:1:5j])
    for got, want in zip(nb.ogrid[0:2, 0:3], np.ogrid[0:2, 0:3], strict=True):
        same(got, want)


def test_a_review_s_edges():
    """put_along_axis with axis=None flattens, as NumPy's; partition's kth is one int."""
    a = np.arange(12.0).reshape(3, 4)
    want = a.copy()
    np.put_along_axis(want, np.array([1, 11]), 5.0, axis=None)
    same(nb.put_along_axis(a, np.array([1, 11]), 5.0, axis=None, inplace=False), want)
    with pytest.raises(nb.OpError, match=r"partition: kth must be one int .*\[1, 3\]"):
        nb.partition(np.arange(7), [1, 3])


def test_quantile_of_a_tensor_q_is_differentiable_batched_and_traced_as_jax():
    """A tensor q stays a tensor: the derivative in q is the slope between the two sorted
    values around q (n - 1), times n - 1 (it was read as a number: 0, and vmap over q
    failed)."""
    x = nb.asarray(np.array([1.0, 2.0, 4.0, 8.0], np.float32))
    q = nb.asarray(np.float32(0.5))
    assert nb.grad(lambda q: nb.quantile(x, q))(q).item() == pytest.approx(6.0)
    assert nb.grad(lambda p: nb.percentile(x, p))(q * 100).item() == pytest.approx(0.06)
    _, t = nb.jvp(lambda q: nb.quantile(x, q), (q,), (nb.asarray(np.float32(1.0)),))
    assert t.item() == pytest.approx(6.0)
    qs = nb.asarray(np.array([0.0, 0.5, 1.0], np.float32))
    assert nb.vmap(lambda q: nb.quantile(x, q))(qs).tolist() == [1.0, 3.0, 8.0]
    assert nb.compile(lambda q: nb.quantile(x, q))(q).item() == 3.0
    m = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    levels = np.array([0.1, 0.5, 0.9], np.float32)
    for axis, keepdims in ((None, False), (0, False), (1, True), ((0, 1), False)):
        got = nb.quantile(nb.asarray(m), nb.asarray(levels), axis=axis, keepdims=keepdims)
        want = np.quantile(m, levels, axis=axis, keepdims=keepdims)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
        one = nb.quantile(nb.asarray(m), nb.asarray(np.float32(0.3)), axis=axis, keepdims=keepdims)
        np.testing.assert_allclose(
            one.numpy(), np.quantile(m, 0.3, axis=axis, keepdims=keepdims), rtol=1e-5, atol=1e-6
        )
    with pytest.raises(ValueError, match=r"q must be a number or 1-D numbers in \[0, 1\]"):
        nb.quantile(x, nb.asarray(np.float32(1.5)))


def test_cumulative_sum_grid_and_scalar_sort_dtypes_and_errors_as_jax():
    """cumulative_sum widens bools and narrow integers as JAX's (an int8 running sum
    overflowed at 128); mgrid/ogrid give int32 and the default float (NumPy's int64 and
    float64 leaked in); a 0-d tensor has no axis to sort along (it was accepted)."""
    got = nb.cumulative_sum(nb.asarray(np.array([100, 100], np.int8)))
    assert got.dtype == nb.int32 and got.tolist() == [100, 200]
    assert nb.cumulative_sum(nb.asarray(np.array([200, 200], np.uint8))).dtype == nb.uint32
    assert nb.cumulative_sum(nb.asarray(np.array([True, True]))).tolist() == [1, 2]
    assert nb.cumulative_sum(nb.asarray(np.array([1, 2], np.int8)), dtype=nb.int8).dtype == nb.int8
    assert nb.cumulative_sum(nb.asarray(np.array([1.0], np.float16))).dtype == nb.float16
    assert nb.mgrid[0:3].dtype == nb.int32 and nb.mgrid[0:1:3j].dtype == nb.float32
    assert [g.dtype for g in nb.ogrid[0:2, 0:3]] == [nb.int32, nb.int32]
    assert [g.dtype for g in nb.ogrid[0:2, 0:1:2j]] == [nb.float32, nb.float32]  # as NumPy
    np.testing.assert_array_equal(nb.mgrid[0:2, 0:3].numpy(), np.mgrid[0:2, 0:3])
    s = nb.asarray(np.float32(3.0))
    for call in (lambda: nb.sort(s), lambda: nb.argsort(s, axis=0), lambda: s.sort()):
        with pytest.raises(IndexError, match="out of range for a 0-d tensor"):
            call()
    assert nb.sort(s, axis=None).tolist() == [3.0]
    assert s.argsort(dim=-1).item() == 0  # PyTorch's form sorts it as it is


def test_a_dtype_in_jnp_s_third_place_is_the_dtype():
    """jnp's ``sum(a, axis, dtype)`` (and ``mean``, ``prod``, ``var``, ``std``,
    ``cumsum``, ``cumprod``) take the dtype third, where PyTorch's and ours take
    ``keepdims`` (``exclusive``): a dtype there had silently kept the dims in the input's
    dtype. A flag still reads as the flag."""
    i = np.arange(6, dtype=np.int32).reshape(2, 3)
    for name, ref in (("sum", np.sum), ("mean", np.mean), ("prod", np.prod)):
        got = getattr(nb, name)(i, 0, nb.float32)
        assert got.dtype == nb.float32 and got.shape == (3,), name
        np.testing.assert_allclose(got.numpy(), ref(i, 0, dtype=np.float32))
    assert nb.var(i, 1, nb.float64).dtype == nb.float64
    assert nb.std(i, 1, "float64").shape == (2,)
    got = nb.cumsum(i, 0, nb.float32)
    assert got.dtype == nb.float32 and got.tolist() == np.cumsum(i, 0).tolist()
    assert nb.cumprod(i, 1, nb.float64).dtype == nb.float64
    assert nb.sum(i, 0, True).shape == (1, 3) and nb.cumsum(i, 1, True).tolist()[0] == [0, 0, 1]
    with pytest.raises(TypeError, match="sum: keepdims must be a bool, got 'nope'"):
        nb.sum(i, 0, "nope")
    with pytest.raises(TypeError, match="dtype given twice"):
        nb.sum(i, 0, nb.float32, dtype=nb.float64)


def test_reductions_take_where_and_initial_as_numpy_s():
    """NumPy's and JAX's ``where=`` (a mask of the elements that count) and ``initial=``
    on the reductions, ``logsumexp`` and the softmaxes; a max/min mask needs ``initial``
    (no identity), as JAX's. A row with nothing selected is NaN for the mean and variance,
    and its elements get no gradient."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4))
    m = rng.random((3, 4)) > 0.4
    m[0, 0] = True
    for ax in (None, 0, 1):
        same(nb.sum(x, ax, where=m, initial=2.0), np.sum(x, ax, where=m, initial=2.0))
        same(nb.prod(x, ax, where=m), np.prod(x, ax, where=m))
        same(nb.max(x, ax, where=m, initial=-5.0), np.max(x, ax, where=m, initial=-5.0))
        same(nb.min(x, ax, initial=0.1), np.min(x, ax, initial=0.1))
        same(nb.all(x > 0, ax, where=m), np.all(x > 0, ax, where=m))
        same(nb.any(x > 0, ax, where=m), np.any(x > 0, ax, where=m))
    for ax in (None, 1):  # (every row keeps an element)
        same(nb.mean(x, ax, where=m), np.mean(x, ax, where=m))
        same(nb.var(x, ax, where=m), np.var(x, ax, where=m))
        same(nb.std(x, ax, where=m, ddof=1), np.std(x, ax, where=m, ddof=1))
        want = np.log(np.sum(np.exp(x), ax, where=m))
        same(nb.logsumexp(x, ax, where=m), want)
    p = nb.nn.functional.softmax(x, where=m).numpy()
    e = np.where(m, np.exp(x), 0.0)
    np.testing.assert_allclose(p, e / e.sum(-1, keepdims=True), rtol=1e-12)
    lp = nb.nn.functional.log_softmax(x, where=m).numpy()
    assert np.isneginf(lp[~m]).all()
    np.testing.assert_allclose(np.exp(lp[m]), p[m], rtol=1e-12)
    same(nb.tensor(x).sum(1, where=m), np.sum(x, 1, where=m))
    empty = m.copy()
    empty[1] = False
    got = nb.mean(x, 1, where=empty).numpy()
    assert np.isnan(got[1]) and not np.isnan(got[[0, 2]]).any()
    g = nb.grad(lambda v: nb.var(v, 1, where=empty)[0])(x).numpy()
    assert np.isfinite(g).all() and (g[~empty] == 0).all()
    with pytest.raises(ValueError, match="max: a where= mask needs initial="):
        nb.max(x, where=m)
    with pytest.raises(nb.OpError, match=r"sum: where= of shape \(2,\) does not broadcast"):
        nb.sum(x, where=np.array([True, False]))


def test_cov_and_corrcoef_take_numpy_s_options():
    rng = np.random.default_rng(8)
    m, y = rng.standard_normal((3, 6)), rng.standard_normal((2, 6))
    fw, aw = np.array([1, 2, 1, 3, 1, 1]), rng.random(6)
    for kw in ({}, {"bias": True}, {"ddof": 2}, {"fweights": fw}, {"aweights": aw},
               {"fweights": fw, "aweights": aw}, {"rowvar": False}):  # fmt: skip
        a = m.T if kw.get("rowvar") is False else m
        same(nb.cov(a, **kw), np.cov(a, **kw))
    same(nb.cov(m, y), np.cov(m, y))
    same(nb.corrcoef(m, y), np.corrcoef(m, y))
    assert nb.cov(m[0]).shape == () and nb.real(m).shape == (3, 6)
    assert nb.imag(m).numpy().sum() == 0 and nb.conj(m).numpy().tolist() == m.tolist()
    with pytest.raises(nb.OpError, match=r"cov: fweights must have one weight per observation"):
        nb.cov(m, fweights=[1, 2])


def test_set_operations_eager_and_with_jax_s_size():
    a = np.array([5, 1, 3, 3, 7, 1, 9], np.int32)
    b = np.array([3, 4, 9, 9, 2], np.int32)
    for name in ("union1d", "intersect1d", "setdiff1d", "setxor1d"):
        assert getattr(nb, name)(a, b).tolist() == getattr(np, name)(a, b).tolist(), name
    # with size: padded (JAX's fills), and traceable
    assert nb.setdiff1d(a, b, size=5).tolist() == [1, 5, 7, 0, 0]
    f = nb.compile(lambda x, y: nb.intersect1d(x, y, size=3, fill_value=-1))
    assert f(a, b).tolist() == [3, 9, -1]
    got = nb.vmap(lambda x: nb.union1d(x, np.array([0, 1], np.int32), size=4))(
        np.array([[2, 3], [1, 1]], np.int32)
    )
    assert got.tolist() == [[0, 1, 2, 3], [0, 1, 0, 0]]
    with pytest.raises(NotImplementedError, match="return_indices"):
        nb.intersect1d(a, b, return_indices=True)


def test_gradient_polyfit_piecewise_refuse_bad_inputs_at_the_call():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    with pytest.raises(nb.OpError, match="gradient: edge_order must be 1 or 2, got 3"):
        nb.gradient(x, edge_order=3)
    with pytest.raises(nb.OpError, match=r"gradient: axis 0 of shape \(2, 3\) needs at least 3"):
        nb.gradient(x, axis=0, edge_order=2)
    with pytest.raises(nb.OpError, match=r"gradient: coordinates of axis 1 must be \(3,\)"):
        nb.gradient(x, np.arange(4.0), axis=1)
    with pytest.raises(nb.OpError, match=r"gradient: give no spacing, one, or one per axis"):
        nb.gradient(x, 1.0, 2.0, 3.0)
    with pytest.raises(nb.OpError, match="polyfit: full=True and cov=True are not supported"):
        nb.polyfit(x[0], x[1], 1, full=True)
    with pytest.raises(nb.OpError, match=r"polyfit: x \(M,\) and y \(M,\) or \(M, K\)"):
        nb.polyfit(x[0], x, 1)
    with pytest.raises(nb.OpError, match="piecewise: 1 conditions need 1 or 2 functions, got 3"):
        nb.piecewise(x, x > 1, [0.0, 1.0, 2.0])


def test_gradient_with_traced_coordinates_differentiates_in_them():
    # the coordinates are tensors too: their derivative is the definition's
    f = np.array([1.0, 4.0, 2.0, 5.0])

    def total(c):
        return nb.sum(nb.gradient(f, c, edge_order=2) ** 2)

    c = np.array([0.0, 0.7, 1.5, 3.0])
    eps, fd = 1e-6, []
    for i in range(4):
        d = np.zeros(4)
        d[i] = eps
        hi = float(np.sum(np.gradient(f, c + d, edge_order=2) ** 2))
        lo = float(np.sum(np.gradient(f, c - d, edge_order=2) ** 2))
        fd.append((hi - lo) / (2 * eps))
    np.testing.assert_allclose(np.asarray(nb.grad(total)(c)), fd, rtol=1e-5)


def test_segment_reductions_follow_jax_ops():
    data = np.arange(12.0, dtype=np.float32).reshape(6, 2)
    ids = np.array([0, 2, 2, -1, 7, 0], np.int32)  # -1 and 7 fall outside: dropped
    np.testing.assert_array_equal(
        nb.segment_sum(data, ids, num_segments=4).numpy(),
        [[10, 12], [0, 0], [6, 8], [0, 0]],
    )
    got = nb.segment_max(data, ids, 4).numpy()
    assert got[1].tolist() == [-np.inf, -np.inf] and got[2].tolist() == [4.0, 5.0]
    assert nb.segment_min(data.astype(np.int32), ids, 4).numpy()[3].tolist() == [2**31 - 1] * 2
    assert nb.segment_prod(data, ids, 3).numpy()[0].tolist() == [0.0, 11.0]
    assert nb.segment_sum(data, ids).shape == (8, 2)  # max(ids) + 1, read at the call
    assert nb.ops.segment_sum is nb.segment_sum
    with pytest.raises(nb.OpError, match="segment_sum: num_segments is needed under compile"):
        nb.compile(lambda d, i: nb.segment_sum(d, i))(data, ids)
    with pytest.raises(nb.OpError, match=r"segment_sum: segment_ids must be 1-D integers"):
        nb.segment_sum(data, ids[:3], 4)


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda a, b, k: nb.geomspace(a, b), "geomspace: shapes (2, 3), (4,)"),
        (lambda a, b, k: nb.nextafter(a, b), "nextafter: shapes (2, 3), (4,)"),
        (lambda a, b, k: nb.ldexp(a, np.ones(4, np.int32)), "ldexp: shapes (2, 3), (4,)"),
        (lambda a, b, k: nb.gcd(np.ones((2, 3), np.int32), np.ones(4, np.int32)), "gcd: shapes"),
        (lambda a, b, k: nb.logsumexp(a, b=b), "logsumexp: shapes (2, 3), (4,)"),
        (lambda a, b, k: nb.scipy.special.gammainc(a, b), "gammainc: shapes (2, 3), (4,)"),
        (lambda a, b, k: nb.random.beta(k, a, b), "random.beta: shapes (2, 3), (4,)"),
        (lambda a, b, k: nb.random.truncated_normal(k, a, b), "random.truncated_normal: shapes"),
        (lambda a, b, k: nb.asarray(a).masked_select(b > 0), "masked_select: shapes (2, 3), (4,)"),
        (lambda a, b, k: nb.delete(a, b), "delete: the indices must be integers, got float32"),
    ],
)
def test_shapes_that_do_not_broadcast_name_the_function(call, words):
    """Each of these once raised NumPy's own message from deep inside, naming no function."""
    a, b = np.ones((2, 3), np.float32), np.ones(4, np.float32)
    with pytest.raises(nb.OpError, match=re.escape(words)):
        call(a, b, nb.random.key(0))


def test_nanargmax_axis_out_of_range_names_it():
    with pytest.raises(IndexError, match=r"nanargmax: axis 5 is out of range for a tensor"):
        nb.nanargmax(np.ones((2, 3), np.float32), axis=5)


def test_a_concrete_0d_integer_tensor_is_a_size():
    """As JAX takes a concrete integer array and PyTorch an integer tensor as a size; a
    traced one (inside ``compile``) is refused with a message that says why."""
    n = nb.asarray(3)
    assert nb.zeros(n).shape == (3,) and nb.ones((2, n)).shape == (2, 3)
    assert nb.eye(n).shape == (3, 3) and nb.tri(n).shape == (3, 3)
    assert nb.arange(n).tolist() == [0, 1, 2] and nb.hanning(n).shape == (3,)
    assert nb.ones(6).reshape(n, -1).shape == (3, 2)
    assert nb.random.normal(nb.random.key(0), (n,)).shape == (3,)
    with pytest.raises(TypeError, match=r"zeros: shape must be a sequence of ints"):
        nb.zeros(nb.asarray(2.0))  # a float is never a size
    traced = nb.compile(lambda k: nb.zeros((k, 2)))
    with pytest.raises(TypeError, match=r"zeros: .*a size must be known where the function is"):
        traced(n)


def test_nan_reductions_and_var_take_numpy_s_dtype():
    """``dtype=`` (and a dtype as the third positional argument, NumPy's and JAX's place
    for it) on ``nansum``/``nanmean``/``nanvar``/``nanstd`` and ``var``/``std``."""
    x = np.array([[1.0, np.nan, 3.0], [2.0, 4.0, 6.5]], np.float32)
    for name in ("nansum", "nanmean", "nanvar", "nanstd"):
        f, ref = getattr(nb, name), getattr(np, name)
        for dt in (np.float16, np.float64):
            for got in (f(x, 1, dtype=dt), f(x, 1, dt)):
                assert got.dtype == getattr(nb, np.dtype(dt).name)
                np.testing.assert_allclose(got.numpy(), ref(x, 1, dtype=dt), rtol=2e-3)
    assert nb.nansum(x, None, dtype=np.int32).tolist() == 16  # (NaN as 0, then 6.5 as 6)
    assert nb.nanmean(x, 1, dtype=np.int32).dtype == nb.int32
    np.testing.assert_allclose(nb.nanvar(x, 1, 1).numpy(), np.nanvar(x, 1, ddof=1))
    with pytest.raises(TypeError, match=r"nanstd: dtype must be a float dtype, got int32"):
        nb.nanstd(x, dtype=np.int32)
    y = np.nan_to_num(x)
    for name in ("var", "std"):
        got = getattr(nb, name)(y, 0, dtype=np.float64)
        assert got.dtype == nb.float64
        np.testing.assert_allclose(got.numpy(), getattr(np, name)(y, 0, dtype=np.float64))
