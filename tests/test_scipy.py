"""``nb.scipy``: the special functions, distributions and linear algebra of ``jax.scipy``,
checked against SciPy itself (the reference JAX's versions follow), with finite
differences for the gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.special as sp
import scipy.stats as ss

import nabla as nb

S = nb.scipy
X = np.array(
    [-30, -10.5, -3.3, -2.5, -1.5, -0.5, -1e-3, 1e-8, 1e-3, 0.1, 0.5, 0.9, 1, 1.5, 2, 2.5, 3,
     4.5, 7, 10, 30, 100, 1e3, 1e5]
)  # fmt: skip
P = np.array([1e-300, 1e-30, 1e-10, 1e-5, 0.001, 0.02, 0.1, 0.3, 0.5, 0.7, 0.95, 0.999, 1 - 1e-9])


def close(got, want, rtol, atol=0.0):
    np.testing.assert_allclose(np.asarray(got.numpy()), want, rtol=rtol, atol=atol)


# name, SciPy's, domain, float64 rtol (the documented accuracy)
FUNCTIONS = [
    ("gammaln", sp.gammaln, X, 1e-13),
    ("digamma", sp.digamma, X[X < 1e5], 1e-12),
    ("gamma", sp.gamma, X[np.abs(X) < 100], 1e-12),
    ("erfc", sp.erfc, X[np.abs(X) < 20], 2e-7),
    ("erfcx", sp.erfcx, X[X > -5], 2e-7),
    ("ndtr", sp.ndtr, X[np.abs(X) < 30], 2e-7),
    ("log_ndtr", sp.log_ndtr, X[X < 1e3], 2e-7),
    ("ndtri", sp.ndtri, P, 2e-8),
    ("erfinv", sp.erfinv, 2 * P - 1, 2e-8),
    ("logit", sp.logit, P[2:], 1e-12),
    ("expit", sp.expit, X, 1e-12),
    ("entr", sp.entr, np.abs(X), 1e-12),
    ("gammasgn", sp.gammasgn, X, 0),
    ("i0", sp.i0, X[np.abs(X) < 700], 5e-15),
    ("i0e", sp.i0e, X, 5e-15),
    ("i1", sp.i1, X[np.abs(X) < 700], 5e-15),
    ("i1e", sp.i1e, X, 5e-15),
    ("exp1", sp.exp1, X, 1e-14),
    ("expi", sp.expi, X, 1e-13),
]


@pytest.mark.parametrize("name, ref, domain, rtol", FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_special_functions_match_scipy_in_float64_and_float32(name, ref, domain, rtol):
    fn = getattr(S.special, name)
    want = ref(domain)
    close(fn(domain), want, rtol, atol=1e-300)
    d32 = domain.astype(np.float32)
    got32 = fn(d32).numpy()
    assert got32.dtype == np.float32
    want = ref(d32.astype(np.float64))  # (the float32 inputs' own values)
    finite = np.isfinite(want) & (np.abs(want) < 1e30) & (np.abs(want) > 1e-30)
    np.testing.assert_allclose(got32[finite], want[finite], rtol=5e-5, atol=2e-6)


def test_special_functions_edges_follow_scipy_and_jax():
    poles = np.array([0.0, -1.0, -4.0])
    assert np.isinf(S.special.gammaln(poles).numpy()).all()
    assert S.special.gamma(0.0).item() == math.inf
    assert np.isnan(S.special.gamma(-2.0).numpy()) and np.isnan(S.special.digamma(-3.0).numpy())
    assert S.special.gammaln(1.0).item() == 0.0 and S.special.gammaln(2.0).item() == 0.0
    # loggamma is the real log of gamma: NaN for x <= 0 (SciPy's and JAX's; 0 too, as JAX's)
    x = np.array([-0.5, -1.0, -2.5, 0.0, 0.3, 3.0, 40.5])
    got = S.special.loggamma(x).numpy()
    assert np.isnan(got[:4]).all()
    close(S.special.loggamma(x[4:]), sp.loggamma(x[4:]), 1e-13)
    assert nb.grad(S.special.loggamma)(-0.5).item() == 0.0
    x = np.array([0.5, 1.0, 2.0, 0.0, -1.0, 1e-9, 3.7])
    for lmbda in (0.0, 0.5, -1.3, 1e-6, -2e-5, 3.0):
        for name in ("boxcox", "boxcox1p"):
            got = getattr(S.special, name)(x, lmbda).numpy()
            np.testing.assert_allclose(got, getattr(sp, name)(x, lmbda), rtol=1e-13)
    # the derivative in lmbda at 0 is the limit's, log(x)^2 / 2
    close(nb.grad(lambda lm: S.special.boxcox(2.0, lm))(0.0), math.log(2.0) ** 2 / 2, 1e-6)
    np.testing.assert_allclose(S.special.bernoulli(30).numpy(), sp.bernoulli(30), rtol=1e-7)
    with pytest.raises(ValueError, match="bernoulli: n must be a non-negative int"):
        S.special.bernoulli(-1)
    close(nb.grad(S.special.loggamma)(2.5), sp.digamma(2.5), 1e-6)
    ends = S.special.ndtri(np.array([0.0, 1.0, -0.5, 2.0])).numpy()
    assert ends[0] == -math.inf and ends[1] == math.inf and np.isnan(ends[2:]).all()
    inv = S.special.erfinv(np.array([-1.0, 1.0, 1.5], np.float32)).numpy()
    assert inv[0] == -math.inf and inv[1] == math.inf and np.isnan(inv[2])
    a, b = np.array([1.1, 0.6, 3.1, 100.1, 1e5 + 0.1]), np.array([10.1, 30.1, 7.1, 0.2, 0.1])
    close(S.special.betaln(a, b), sp.betaln(a, b), 1e-9)  # (the large-argument form)
    close(S.special.betaln(a.astype(np.float32), b.astype(np.float32)), sp.betaln(a, b), 2e-6)
    close(S.special.beta(a[:3], b[:3]), sp.beta(a[:3], b[:3]), 1e-9)
    q, r = np.array([0, 0, 1, 2, 0.5, -1, 3.0]), np.array([0, 1, 0, 3, 0.2, 1, -2.0])
    for name in ("xlogy", "xlog1py", "rel_entr", "kl_div"):
        close(getattr(S.special, name)(q, r), getattr(sp, name)(q, r), 1e-12)
    close(S.special.multigammaln(np.array([3.0, 7.5]), 3), sp.multigammaln([3.0, 7.5], 3), 1e-12)
    n, k = np.array([5.0, 10, 3, 4]), np.array([2.0, 3, 5, -1])
    close(S.special.comb(n, k), sp.comb(n, k), 1e-10)
    close(S.special.factorial(np.array([-1.0, 0, 5])), sp.factorial([-1.0, 0, 5]), 1e-12)
    close(
        S.special.poch(np.array([2.5, 3.0]), np.array([1.5, 4.0])),
        sp.poch([2.5, 3], [1.5, 4]),
        1e-12,
    )
    y = np.random.default_rng(0).standard_normal((2, 3))
    close(S.special.softmax(y), sp.softmax(y), 1e-12)  # (every element by default)
    close(S.special.log_softmax(y, axis=1), sp.log_softmax(y, axis=1), 1e-12)
    with pytest.raises(NotImplementedError, match="exact=True"):
        S.special.factorial(3, exact=True)


@pytest.mark.parametrize(
    "name",
    ["gammaln", "digamma", "erfc", "ndtr", "log_ndtr", "ndtri", "erfinv", "i0", "i1e", "expi"],
)
def test_special_gradients_are_finite_differences(name):
    fn = getattr(S.special, name)
    pts = (
        np.array([0.05, 0.3, 0.7, 0.95])
        if name in ("ndtri", "erfinv")
        else np.array([-2.7, -0.3, 0.4, 1.7, 4.2, 12.0])
    )
    g = nb.vmap(nb.grad(fn))(pts).numpy()
    eps = 1e-6
    fd = (fn(pts + eps).numpy() - fn(pts - eps).numpy()) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=2e-6, atol=1e-8)
    # xlogy: the derivative in x at x = 0 is log(y), not a masked 0
    assert nb.grad(lambda v: S.special.xlogy(v, 2.0))(0.0).item() == pytest.approx(math.log(2.0))


def test_distributions_match_scipy_stats():
    x = np.array([-3, -1, -0.2, 0.3, 0.5, 1, 2.5, 7.0])
    q = np.array([1e-6, 0.1, 0.5, 0.9, 0.999])
    for name in ("norm", "uniform", "expon", "laplace", "logistic", "cauchy"):
        ours, theirs = getattr(S.stats, name), getattr(ss, name)
        for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"):
            if hasattr(ours, f):
                close(getattr(ours, f)(x, 0.5, 2.0), getattr(theirs, f)(x, 0.5, 2.0), 3e-7)
        for f in ("ppf", "isf"):
            if hasattr(ours, f):
                close(getattr(ours, f)(q, 0.5, 2.0), getattr(theirs, f)(q, 0.5, 2.0), 1e-8)
    close(S.stats.norm.logcdf(-40.0), ss.norm.logcdf(-40.0), 1e-7)  # (finite, far out)
    close(S.stats.t.logpdf(x, 3.5, 0.2, 1.5), ss.t.logpdf(x, 3.5, 0.2, 1.5), 1e-12)
    close(S.stats.gamma.logpdf(x, 2.5, -0.5, 1.5), ss.gamma.logpdf(x, 2.5, -0.5, 1.5), 1e-12)
    close(S.stats.chi2.logpdf(np.abs(x), 3.0), ss.chi2.logpdf(np.abs(x), 3.0), 1e-12)
    close(S.stats.beta.logpdf(x / 8 + 0.4, 2.0, 0.7), ss.beta.logpdf(x / 8 + 0.4, 2.0, 0.7), 1e-12)
    k = np.array([-1, 0, 1, 2, 3.5, 7, 20])
    close(S.stats.poisson.logpmf(k, 3.0), ss.poisson.logpmf(k, 3.0), 1e-12)
    close(S.stats.bernoulli.logpmf(k, 0.3), ss.bernoulli.logpmf(k, 0.3), 1e-12)
    rng = np.random.default_rng(1)
    m = rng.standard_normal((3, 3))
    cov, pts, mean = m @ m.T + np.eye(3), rng.standard_normal((4, 3)), rng.standard_normal(3)
    close(
        S.stats.multivariate_normal.logpdf(pts, mean, cov),
        ss.multivariate_normal.logpdf(pts, mean, cov),
        1e-12,
    )
    with pytest.raises(ValueError, match=r"cov must be \(d, d\) .* \(4, 3\)"):
        S.stats.multivariate_normal.logpdf(pts, mean, np.eye(2))
    # a density's gradient in its parameters: the score of the normal
    g = nb.grad(lambda mu: S.stats.norm.logpdf(x, mu, 2.0).sum())(0.5).item()
    assert g == pytest.approx(((x - 0.5) / 4.0).sum())


# shapes and limits across the series / continued-fraction switch and both tails
A = np.array([0.05, 0.5, 1.0, 2.5, 7.0, 30.0, 200.0, 1500.0])
XS = np.array([1e-6, 0.02, 0.9, 2.0, 6.0, 35.0, 180.0, 1600.0])


def test_incomplete_gamma_and_beta_match_scipy():
    a, x = np.meshgrid(A, XS)
    # (shape 1500: x^a e^-x / gamma(a) cancels logs of 1e4, so ~1e-12 relative there)
    close(S.special.gammainc(a, x), sp.gammainc(a, x), 5e-12, 1e-300)
    close(S.special.gammaincc(a, x), sp.gammaincc(a, x), 5e-12, 1e-300)
    got = S.special.gammainc(a.astype(np.float32), x.astype(np.float32))
    assert got.dtype == nb.float32
    close(got, sp.gammainc(a, x).astype(np.float32), 1e-5, 1e-30)
    b = np.array([0.1, 0.7, 3.0, 40.0])
    y = np.array([0.0, 1e-4, 0.2, 0.5, 0.93, 1.0])
    a3, b3, y3 = np.meshgrid(A[:6], b, y)
    close(S.special.betainc(a3, b3, y3), sp.betainc(a3, b3, y3), 1e-11, 1e-300)
    # outside the domains: NaN, as SciPy's
    assert np.isnan(S.special.gammainc(-1.0, 2.0).numpy())
    assert np.isnan(S.special.gammaincc(2.0, -1.0).numpy())
    assert np.isnan(S.special.betainc(1.0, 2.0, 1.5).numpy())


def test_incomplete_gamma_and_beta_derivatives_are_finite_differences():
    a, x = np.array([0.4, 3.0, 25.0]), np.array([0.7, 2.0, 30.0])
    ga, gx = nb.grad(lambda a, x: nb.sum(S.special.gammainc(a, x)), argnums=(0, 1))(a, x)
    h = 1e-6
    close(ga, (sp.gammainc(a + h, x) - sp.gammainc(a - h, x)) / (2 * h), 1e-6, 1e-9)
    close(gx, (sp.gammainc(a, x + h) - sp.gammainc(a, x - h)) / (2 * h), 1e-6, 1e-9)
    gq = nb.grad(lambda x: nb.sum(S.special.gammaincc(a, x)))(x)
    close(gq, -gx.numpy(), 1e-12)
    b, y = np.array([2.0, 0.5, 4.0]), np.array([0.3, 0.6, 0.9])
    grads = nb.grad(lambda *v: nb.sum(S.special.betainc(*v)), argnums=(0, 1, 2))(a, b, y)
    for i, g in enumerate(grads):
        step = [h * (i == j) for j in range(3)]
        up = sp.betainc(a + step[0], b + step[1], y + step[2])
        down = sp.betainc(a - step[0], b - step[1], y - step[2])
        close(g, (up - down) / (2 * h), 1e-6, 1e-9)
    # forward mode, vmap and compile agree; a second derivative in a shape refuses
    _, t = nb.jvp(lambda x: S.special.gammainc(3.0, x), (x,), (np.ones(3),))
    close(
        t, gx.numpy() * 0 + nb.grad(lambda x: nb.sum(S.special.gammainc(3.0, x)))(x).numpy(), 1e-12
    )
    close(nb.vmap(lambda v: S.special.gammainc(3.0, v))(x), sp.gammainc(3.0, x), 1e-12)
    close(nb.compile(lambda v: S.special.betainc(2.0, 3.0, v))(y), sp.betainc(2.0, 3.0, y), 1e-12)
    with pytest.raises(nb.OpError, match="second derivative through the shape parameters"):
        nb.grad(nb.grad(lambda a: S.special.gammainc(a, 2.0)))(3.0)
    # elementwise on a mesh: sharded in, sharded out, the same values
    mesh = nb.DeviceMesh("scipy_m", (2,), ("dp",))
    xs = nb.shard(nb.constant(np.linspace(0.1, 5.0, 8)), mesh, nb.PartitionSpec("dp"))
    got = S.special.gammaincc(2.0, xs)
    assert got.sharding is not None and got.sharding.mesh.name == "scipy_m"
    close(got, sp.gammaincc(2.0, np.linspace(0.1, 5.0, 8)), 1e-12)


def test_cdfs_through_the_incomplete_functions_match_scipy_stats():
    st = S.stats
    x = np.array([-1.0, 0.1, 1.0, 3.0, 10.0, 40.0])
    close(st.gamma.cdf(x, 2.5, 0.1, 1.5), ss.gamma.cdf(x, 2.5, 0.1, 1.5), 1e-12, 1e-300)
    close(st.gamma.sf(x, 2.5), ss.gamma.sf(x, 2.5), 1e-12, 1e-300)
    close(st.chi2.cdf(x, 3.0), ss.chi2.cdf(x, 3.0), 1e-12, 1e-300)
    close(st.chi2.sf(x, 3.0), ss.chi2.sf(x, 3.0), 1e-12, 1e-300)
    y = np.array([-0.5, 0.1, 0.5, 0.9, 1.2])
    close(st.beta.cdf(y, 2.0, 3.0), ss.beta.cdf(y, 2.0, 3.0), 1e-12, 1e-300)
    close(st.beta.sf(y, 2.0, 3.0), ss.beta.sf(y, 2.0, 3.0), 1e-12, 1e-300)
    z = np.array([-30.0, -3.0, -0.5, 0.0, 0.7, 4.0, 30.0])
    close(st.t.cdf(z, 4.0, 0.2, 1.3), ss.t.cdf(z, 4.0, 0.2, 1.3), 1e-11, 1e-300)
    close(st.t.sf(z, 4.0), ss.t.sf(z, 4.0), 1e-11, 1e-300)
    k = np.array([-1.0, 0.0, 2.0, 2.5, 10.0, 40.0])
    close(st.poisson.cdf(k, 3.0), ss.poisson.cdf(k, 3.0), 1e-12, 1e-300)
    close(st.poisson.sf(k, 3.0), ss.poisson.sf(k, 3.0), 1e-12, 1e-300)


def test_scipy_linalg_matches_scipy():
    rng = np.random.default_rng(2)
    low = np.tril(rng.standard_normal((4, 4))) + 3 * np.eye(4)
    b = rng.standard_normal((4, 2))
    for trans in (0, 1, "T"):
        for lower in (True, False):
            a = low if lower else low.T.copy()
            want = sla.solve_triangular(a, b, trans=trans, lower=lower)
            close(S.linalg.solve_triangular(a, b, trans=trans, lower=lower), want, 1e-12)
    noisy = low + np.triu(np.ones((4, 4)), 1)  # (the other triangle is never read)
    want = sla.solve_triangular(noisy, b[:, 0], lower=True, unit_diagonal=True)
    close(S.linalg.solve_triangular(noisy, b[:, 0], lower=True, unit_diagonal=True), want, 1e-12)
    g = nb.grad(lambda a: S.linalg.solve_triangular(a, b, lower=True).sum())(noisy).numpy()
    assert (np.triu(g, 1) == 0).all()  # only the triangle it reads
    spd = low @ low.T
    for lower in (True, False):
        close(S.linalg.cholesky(spd, lower=lower), sla.cholesky(spd, lower=lower), 1e-12)
        close(
            S.linalg.cho_solve(S.linalg.cho_factor(spd, lower=lower), b), sla.solve(spd, b), 1e-10
        )
    blocks = (np.ones((2, 2)), 3.0, np.arange(3.0))
    close(S.linalg.block_diag(*blocks), sla.block_diag(*blocks), 0)
    close(S.linalg.solve(spd, b[:, 0], assume_a="pos"), sla.solve(spd, b[:, 0]), 1e-10)
    q, r = S.linalg.qr(low)
    close(q @ r, low, 1e-12, atol=1e-14)
    assert len(S.linalg.qr(low, mode="r")) == 1
    close(S.linalg.eigh(spd, eigvals_only=True), sla.eigh(spd, eigvals_only=True), 1e-10)
    with pytest.raises(nb.OpError, match="trans must be"):
        S.linalg.solve_triangular(low, b, trans=3)


def _close_with_infs(got, want, rtol):
    got = np.asarray(got.numpy(), np.float64)
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=1e-12)


def test_more_distributions_match_scipy_stats():
    x = np.linspace(-3.0, 7.0, 21)
    for name, params in (("gumbel_r", (0.5, 1.5)), ("gumbel_l", (0.5, 1.5)),
                         ("pareto", (2.5, 0.5, 1.5)), ("truncnorm", (-1.0, 2.0, 0.5, 1.5)),
                         ("truncnorm", (3.0, 9.0, -4.0, 1.0))):  # fmt: skip
        ours, theirs = getattr(S.stats, name), getattr(ss, name)
        for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"):
            want = getattr(theirs, f)(x, *params)
            # (truncnorm through log_ndtr: about 1e-7, its documented accuracy)
            rtol = 3e-7 if name == "truncnorm" else 1e-9
            _close_with_infs(getattr(ours, f)(x, *params), want, rtol)
    q = np.array([0.01, 0.3, 0.9])
    for name, params in (("gumbel_r", (0.5, 1.5)), ("gumbel_l", (0.5, 1.5)), ("pareto", (2.5,))):
        close(getattr(S.stats, name).ppf(q, *params), getattr(ss, name).ppf(q, *params), 1e-12)
    k = np.array([-1.0, 0, 1, 3, 5, 6])
    _close_with_infs(
        S.stats.binom.logpmf(k, 5, 0.3, loc=1), ss.binom.logpmf(k, 5, 0.3, loc=1), 1e-12
    )
    _close_with_infs(S.stats.nbinom.logpmf(k, 5, 0.3), ss.nbinom.logpmf(k, 5, 0.3), 1e-12)
    _close_with_infs(S.stats.betabinom.logpmf(k, 5, 2, 3), ss.betabinom.logpmf(k, 5, 2, 3), 1e-10)
    _close_with_infs(S.stats.geom.logpmf(k, 0.3), ss.geom.logpmf(k, 0.3), 1e-12)
    counts, p = np.array([[1, 2, 3], [2, 2, 2], [1, 1, 1]]), np.array([0.2, 0.3, 0.5])
    want = np.array([ss.multinomial.logpmf(c, 6, p) for c in counts[:2]] + [-np.inf])
    _close_with_infs(S.stats.multinomial.logpmf(counts, 6, p), want, 1e-12)
    with pytest.raises(ValueError, match="multinomial.logpmf: x and n must be integers"):
        S.stats.multinomial.logpmf(counts.astype(float), 6, p)
    close(S.stats.vonmises.logpdf(x, 2.0), ss.vonmises.logpdf(x, 2.0), 1e-12)
    _close_with_infs(S.stats.wrapcauchy.logpdf(x, 0.3), ss.wrapcauchy.logpdf(x, 0.3), 1e-12)
    close(S.stats.gennorm.logpdf(x, 1.5), ss.gennorm.logpdf(x, 1.5), 1e-12)
    close(S.stats.gennorm.cdf(x, 1.5), ss.gennorm.cdf(x, 1.5), 1e-10)
    alpha, pts = np.array([1.0, 2.0, 3.0]), np.array([[0.2, 0.1], [0.3, 0.4], [0.5, 0.5]])
    close(S.stats.dirichlet.logpdf(pts, alpha), ss.dirichlet.logpdf(pts, alpha), 1e-12)
    assert S.stats.dirichlet.logpdf(np.array([0.2, 0.3, 0.6]), alpha).item() == -np.inf
    a = np.random.default_rng(0).standard_normal((5, 4))
    close(S.stats.sem(a), ss.sem(a), 1e-12)
    close(S.stats.sem(a, axis=None, ddof=0), ss.sem(a, axis=None, ddof=0), 1e-12)
    a[1, 2] = np.nan
    close(S.stats.sem(a, nan_policy="omit"), ss.sem(a, nan_policy="omit"), 1e-12)
    # a density's gradient in a parameter: d/dkappa of the von Mises log density
    g = nb.grad(lambda kap: S.stats.vonmises.logpdf(x, kap).sum())(2.0).item()
    fd = (ss.vonmises.logpdf(x, 2.0 + 1e-6).sum() - ss.vonmises.logpdf(x, 2.0 - 1e-6).sum()) / 2e-6
    assert g == pytest.approx(fd, rel=1e-6)


def test_expm_matches_scipy_eagerly_compiled_and_differentiated():
    rng = np.random.default_rng(4)
    for scale in (0.01, 1.0, 20.0):
        a = rng.standard_normal((4, 4)) * scale
        want = sla.expm(a)
        close(S.linalg.expm(a), want, 1e-11)
        close(nb.compile(S.linalg.expm)(a), want, 1e-11)  # (squarings chosen while it runs)
    batch = rng.standard_normal((3, 5, 5))
    close(nb.vmap(S.linalg.expm)(batch), np.stack([sla.expm(m) for m in batch]), 1e-12)
    a, w = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    g = nb.grad(lambda m: (S.linalg.expm(m) * w).sum())(a).numpy()
    e = np.zeros((3, 3))
    e[1, 2] = 1e-6
    fd = ((sla.expm(a + e) * w).sum() - (sla.expm(a - e) * w).sum()) / 2e-6
    assert g[1, 2] == pytest.approx(fd, rel=1e-6)
    with pytest.raises(ValueError, match=r"expm: needs square matrices"):
        S.linalg.expm(np.ones((2, 3)))


def test_structured_matrices_and_polar_match_scipy():
    c, r = np.array([1.0, 2.0, 3.0]), np.array([9.0, 5.0, 6.0, 7.0])
    close(S.linalg.toeplitz(c, r), sla.toeplitz(c, r), 0)
    close(S.linalg.toeplitz(c), sla.toeplitz(c), 0)
    close(S.linalg.hankel(c, r), sla.hankel(c, r), 0)
    close(S.linalg.hankel(c), sla.hankel(c), 0)
    close(S.linalg.circulant(c), sla.circulant(c), 0)
    close(S.linalg.companion(np.array([2.0, 3.0, 4.0, 5.0])), sla.companion([2, 3, 4, 5]), 1e-15)
    close(S.linalg.hilbert(4), sla.hilbert(4), 1e-15)
    m = np.random.default_rng(5).standard_normal((4, 3))
    for side in ("right", "left"):
        u, p = S.linalg.polar(m, side)
        want_u, want_p = sla.polar(m, side)
        close(u, want_u, 1e-12, 1e-12)
        close(p, want_p, 1e-12, 1e-12)


def test_the_special_matrices_match_scipy():
    """Exact integers rounded once (JAX's pascal and invpascal are off by 5e-7 in float32);
    the matrices built from vectors differentiate in them."""
    L = S.linalg
    for n in range(1, 8):
        close(L.invhilbert(n), sla.invhilbert(n), 1e-6)
        for kind in ("symmetric", "lower", "upper"):
            close(L.pascal(n, kind), sla.pascal(n, kind).astype(np.float64), 0)
            close(L.invpascal(n, kind), sla.invpascal(n, kind).astype(np.float64), 0)
        for full in (False, True):
            close(L.helmert(n, full), sla.helmert(n, full), 1e-6, 1e-7)
    for n in (1, 2, 8):
        np.testing.assert_array_equal(L.hadamard(n).numpy(), sla.hadamard(n))
    with pytest.raises(nb.OpError, match="hadamard: n must be a positive power of 2, got 6"):
        L.hadamard(6)
    f, s = np.array([0.1, 2.0, 1.5, 0.3]), np.array([0.2, 0.8, 0.5])
    close(L.leslie(f, s), sla.leslie(f, s), 0)
    close(L.fiedler(f), sla.fiedler(f), 0)
    for k in range(1, 8):
        coef = np.random.default_rng(k).standard_normal(k + 1) + 2.0
        close(L.fiedler_companion(coef), sla.fiedler_companion(coef), 1e-14)
    for m, n in ((1, 4), (3, 2), (3, 7), (5, 5)):
        a = np.arange(1.0, m + 1)
        for mode in ("full", "same", "valid"):
            close(L.convolution_matrix(a, n, mode), sla.convolution_matrix(a, n, mode), 0)
    g = nb.grad(lambda v: nb.sum(L.convolution_matrix(v, 4) ** 2))(np.array([1.0, 2.0]))
    close(g, 2 * 4 * np.array([1.0, 2.0]), 0)  # each entry of v sits in 4 cells
    g = nb.grad(lambda v: nb.sum(L.fiedler_companion(v)))(np.array([2.0, 3.0, 4.0]))
    close(g, [7.0 / 4.0, -0.5, -0.5], 1e-12)  # the sum is 1 - (v1 + v2) / v0
    with pytest.raises(nb.OpError, match="leslie: f of length 4 needs s of length 3, got 2"):
        L.leslie(f, s[:2])


def test_signal_convolutions_match_scipy():
    import scipy.signal as sig

    rng = np.random.default_rng(6)
    for s1, s2 in (((7,), (3,)), ((3,), (7,)), ((5, 6), (2, 3)), ((4, 5, 3), (2, 2, 2))):
        a, b = rng.standard_normal(s1), rng.standard_normal(s2)
        for mode in ("full", "same", "valid"):
            close(S.signal.convolve(a, b, mode), sig.convolve(a, b, mode, method="direct"), 1e-10)
            close(S.signal.correlate(a, b, mode), sig.correlate(a, b, mode, method="direct"), 1e-10)
    a, b = rng.standard_normal((5, 6)), rng.standard_normal((3, 2))
    for mode in ("full", "same", "valid"):
        close(S.signal.convolve2d(a, b, mode), sig.convolve2d(a, b, mode), 1e-10)
        close(S.signal.correlate2d(a, b, mode), sig.correlate2d(a, b, mode), 1e-10)
    ints = S.signal.convolve(np.array([1, 2, 3]), np.array([0, 1, 5]))
    assert ints.dtype == nb.int64 and ints.tolist() == [0, 1, 7, 13, 15]
    trend = rng.standard_normal((4, 9)) + np.arange(9) * 0.7
    close(S.signal.detrend(trend), sig.detrend(trend), 1e-10)
    close(S.signal.detrend(trend, 0, "constant"), sig.detrend(trend, 0, "constant"), 1e-12)
    with pytest.raises(ValueError, match="for mode 'valid' one input must be at least as large"):
        S.signal.convolve(np.ones((3, 2)), np.ones((2, 3)), "valid")


def test_dcts_vq_trapezoid_and_map_coordinates():
    import scipy.cluster.vq as svq
    import scipy.fft as sfft
    import scipy.ndimage as snd

    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 8))
    for norm in (None, "ortho", "forward"):
        close(S.fft.dct(x, norm=norm), sfft.dct(x, norm=norm), 1e-12)
        close(S.fft.idct(x, norm=norm), sfft.idct(x, norm=norm), 1e-12)
        close(S.fft.dctn(x, s=(4, 6), norm=norm), sfft.dctn(x, s=(4, 6), norm=norm), 1e-12)
        close(S.fft.idctn(x, norm=norm), sfft.idctn(x, norm=norm), 1e-12)
    close(S.fft.dct(x, n=5, axis=0), sfft.dct(x, n=5, axis=0), 1e-12)
    with pytest.raises(ValueError, match="dct: only type 2 is supported"):
        S.fft.dct(x, type=3)
    obs, book = rng.standard_normal((10, 3)), rng.standard_normal((4, 3))
    code, dist = S.cluster.vq.vq(obs, book)
    want_code, want_dist = svq.vq(obs, book)
    assert code.tolist() == want_code.tolist()
    close(dist, want_dist, 1e-12)
    close(S.integrate.trapezoid(x, dx=0.5), np.trapezoid(x, dx=0.5), 1e-12)
    img = rng.standard_normal((5, 6))
    coords = [rng.uniform(-2, 7, (4, 3)), rng.uniform(-2, 8, (4, 3))]
    for mode in ("nearest", "mirror", "reflect"):  # (where SciPy's and JAX's agree)
        want = snd.map_coordinates(img, coords, order=1, mode=mode)
        close(S.ndimage.map_coordinates(img, coords, 1, mode=mode), want, 1e-12)
    # JAX's constant mode: each tap outside the input is cval by itself
    line = np.arange(5.0) * 1.5 + 1.0
    got = S.ndimage.map_coordinates(line, [np.array([-0.6, 4.2, -0.5, 4.5])], 1, cval=-9.0)
    close(got, [0.6 * -9.0 + 0.4 * 1.0, 0.8 * 7.0 + 0.2 * -9.0, -4.0, -1.0], 1e-12)
    nearest = S.ndimage.map_coordinates(line, [np.array([-0.5, 0.5, 2.5, 4.5])], 0, cval=-9.0)
    assert nearest.tolist() == [-9.0, 2.5, 5.5, -9.0]  # (halves round away from zero)


def test_minimize_bfgs_reaches_the_minimum_eagerly_compiled_and_batched():
    def rosen(x):
        return nb.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    res = S.optimize.minimize(rosen, np.zeros(4), method="BFGS")
    assert res.success.item() and res.status.item() == 0 and res.nit.item() < 100
    close(res.x, np.ones(4), 1e-6, 1e-6)
    assert res.jac.numpy().max() <= 1e-5 and res.fun.item() < 1e-10
    # a quadratic: the minimum solves A x = b, and H approaches A^-1
    a, b = np.array([[3.0, 1.0], [1.0, 2.0]]), np.array([1.0, -1.0])

    def quad(x, a, b):
        return 0.5 * nb.sum(x * (nb.constant(a) @ x)) - nb.sum(x * b)

    res = S.optimize.minimize(quad, np.ones(2), args=(a, b), method="BFGS")
    close(res.x, np.linalg.solve(a, b), 1e-5, 1e-5)
    close(res.hess_inv, np.linalg.inv(a), 1e-2, 1e-2)
    short = S.optimize.minimize(rosen, np.zeros(4), method="BFGS", options={"maxiter": 5})
    assert not short.success.item() and short.status.item() == 1 and short.nit.item() == 5
    solve = nb.compile(lambda x0: S.optimize.minimize(rosen, x0, method="BFGS").x)
    close(solve(np.zeros(3)), np.ones(3), 1e-6, 1e-6)
    close(solve(np.full(3, 0.5)), np.ones(3), 1e-6, 1e-6)
    starts = np.stack([np.zeros(3), np.full(3, -1.0)])
    batched = nb.vmap(lambda x0: S.optimize.minimize(rosen, x0, method="BFGS").x)(starts)
    close(batched, np.ones((2, 3)), 1e-6, 1e-6)
    with pytest.raises(ValueError, match="minimize: method must be 'BFGS'"):
        S.optimize.minimize(rosen, np.zeros(2), method="Nelder-Mead")


def test_rankdata_and_mode_match_scipy():
    a = np.random.default_rng(8).integers(0, 5, (4, 7))
    for method in ("average", "min", "max", "dense", "ordinal"):
        for axis in (None, 0, 1):
            got = S.stats.rankdata(a, method, axis=axis)
            assert got.dtype == nb.float32  # (floats for every method, as JAX's)
            close(got, ss.rankdata(a, method, axis=axis), 0)
    for axis in (None, 0, 1):
        got, want = S.stats.mode(a, axis=axis), ss.mode(a, axis=axis)
        assert got.mode.tolist() == want.mode.tolist()
        assert got.count.tolist() == want.count.tolist()
    assert S.stats.mode(a, axis=1, keepdims=True).mode.shape == (4, 1)
    with pytest.raises(ValueError, match="rankdata: method must be one of"):
        S.stats.rankdata(a, "first")


def test_lu_factorizations_match_scipy():
    rng = np.random.default_rng(9)
    for shape in ((4, 4), (5, 3), (3, 5)):
        a = rng.standard_normal(shape)
        for got, want in zip(S.linalg.lu(a), sla.lu(a), strict=True):
            close(got, want, 1e-12, 1e-12)
        close(S.linalg.lu(a, permute_l=True)[0], sla.lu(a, permute_l=True)[0], 1e-12, 1e-12)
    a, b = rng.standard_normal((5, 5)), rng.standard_normal((5, 2))
    packed, piv = S.linalg.lu_factor(a)
    want_packed, want_piv = sla.lu_factor(a)
    close(packed, want_packed, 1e-12, 1e-12)
    assert piv.tolist() == want_piv.tolist()
    for trans in (0, 1):
        want = sla.lu_solve((want_packed, want_piv), b, trans=trans)
        close(S.linalg.lu_solve((packed, piv), b, trans=trans), want, 1e-10, 1e-10)
    compiled = nb.compile(lambda m, v: S.linalg.lu_solve(S.linalg.lu_factor(m), v))
    close(compiled(a, b), np.linalg.solve(a, b), 1e-10, 1e-10)
    with pytest.raises(ValueError, match=r"lu_factor: needs a square matrix, got shape \(5, 3\)"):
        S.linalg.lu_factor(np.ones((5, 3)))


def test_gaussian_kde_matches_scipy():
    rng = np.random.default_rng(10)
    data, w = rng.standard_normal(50), rng.uniform(0.5, 2.0, 50)
    x = np.linspace(-3.0, 3.0, 7)
    for bw in (None, "silverman", 0.3):
        for weights in (None, w):
            ours, theirs = (
                S.stats.gaussian_kde(data, bw, weights),
                ss.gaussian_kde(data, bw, weights),
            )
            close(ours(x), theirs(x), 1e-10)
            close(ours.logpdf(x), theirs.logpdf(x), 1e-10)
            close(ours.covariance, theirs.covariance, 1e-12)
    pts = rng.standard_normal((2, 40))
    ours, theirs = S.stats.gaussian_kde(pts), ss.gaussian_kde(pts)
    far = rng.standard_normal((2, 5)) * 20  # (log densities stay finite far out)
    close(ours.logpdf(far), theirs.logpdf(far), 1e-10)
    close(
        S.stats.gaussian_kde(data).integrate_box_1d(-1.0, 0.5),
        ss.gaussian_kde(data).integrate_box_1d(-1.0, 0.5),
        1e-9,
    )
    draws = S.stats.gaussian_kde(data).resample(nb.random.key(0), (4000,)).numpy()
    assert draws.shape == (1, 4000)
    spread = np.sqrt(data.var() + ss.gaussian_kde(data).covariance[0, 0])
    assert abs(draws.std() - spread) < 0.05 and abs(draws.mean() - data.mean()) < 0.05


def test_regular_grid_interpolator_matches_scipy():
    import scipy.interpolate as sint

    rng = np.random.default_rng(14)
    grid = (np.sort(rng.uniform(0, 5, 6)), np.sort(rng.uniform(-2, 2, 5)))
    values = rng.standard_normal((6, 5, 3))
    xi = np.stack([rng.uniform(-0.5, 5.5, 20), rng.uniform(-2.5, 2.5, 20)], -1).reshape(4, 5, 2)
    for method in ("linear", "nearest"):
        for fill in (np.nan, None, 0.0):
            ours = S.interpolate.RegularGridInterpolator(grid, values, method, fill_value=fill)
            want = sint.RegularGridInterpolator(
                grid, values, method, bounds_error=False, fill_value=fill
            )(xi)
            got = ours(xi).numpy()
            assert got.shape == (4, 5, 3)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
    # differentiable in the values: the weights of a linear interpolation sum to 1
    interp = S.interpolate.RegularGridInterpolator(grid, values[..., 0], fill_value=None)
    g = nb.grad(lambda v: nb.sum(S.interpolate.RegularGridInterpolator(grid, v)(xi[0])))(
        values[..., 0]
    )
    inside = np.all((xi[0] >= [grid[0][0], grid[1][0]]) & (xi[0] <= [grid[0][-1], grid[1][-1]]), 1)
    assert g.numpy().sum() == pytest.approx(inside.sum())
    assert interp(xi).shape == (4, 5)


def test_zeta_and_polygamma_match_scipy():
    x = np.array([2.0, 3.0, 1.5, 1.0001, 30.0, 5.0, 2.0, 3.0])
    q = np.array([1.0, 0.5, 3.0, 1.0, 0.1, 100.0, -0.5, -2.5])
    close(S.special.zeta(x, q), sp.zeta(x, q), 1e-13)
    edges = S.special.zeta(np.array([1.0, 0.5, 2.0]), np.array([2.0, 2.0, 0.0])).numpy()
    assert np.isinf(edges[0]) and np.isnan(edges[1]) and np.isinf(edges[2])
    xs = np.array([0.3, 1.0, 2.5, 10.0, 50.0])
    for n in (0, 1, 2, 5):
        close(S.special.polygamma(n, xs), sp.polygamma(n, xs), 1e-12)
    close(
        S.special.polygamma(np.array([0, 1, 2]), np.full(3, 2.5)),
        sp.polygamma([0, 1, 2], 2.5),
        1e-12,
    )
    g = nb.grad(lambda v: nb.sum(S.special.zeta(3.0, v)))(np.array([0.7, 2.0]))
    close(g, -3.0 * sp.zeta(4.0, np.array([0.7, 2.0])), 1e-12)  # d/dq zeta(s, q) = -s zeta(s+1, q)
    with pytest.raises(ValueError, match="polygamma: n must be non-negative integers"):
        S.special.polygamma(1.5, xs)


def test_special_edges_keep_nan_inf_and_slopes():
    """NaN in is NaN out, infinities as SciPy's, and exact values keep their slope."""
    ns = nb.scipy.special
    # gammaln is exactly 0 at 1 and 2, and its gradient there is still digamma's
    x = np.array([1.0, 2.0], np.float32)
    assert ns.gammaln(x).tolist() == [0.0, 0.0]
    got = nb.grad(lambda v: ns.gammaln(v).sum())(nb.asarray(x)).numpy()
    np.testing.assert_allclose(got, sp.digamma(x), rtol=1e-5)
    got = nb.grad(lambda v: ns.gamma(v).sum())(nb.asarray(x)).numpy()
    np.testing.assert_allclose(got, sp.digamma(x) * sp.gamma(x), rtol=1e-5)
    # gammaln/gamma at +inf are inf; gammasgn of NaN is NaN
    assert ns.gammaln(np.array([np.inf], np.float32)).tolist() == [np.inf]
    assert ns.gamma(np.array([np.inf], np.float32)).tolist() == [np.inf]
    assert np.isnan(ns.gammasgn(np.array([np.nan], np.float32)).numpy()).all()
    # entr and erfinv of NaN are NaN
    v = np.array([np.nan, 0.0, -1.0, 0.5], np.float32)
    np.testing.assert_array_equal(ns.entr(v).numpy(), sp.entr(v))
    v = np.array([np.nan, 1.0, -1.0, 2.0, 0.5], np.float32)
    np.testing.assert_allclose(ns.erfinv(v).numpy(), sp.erfinv(v), rtol=1e-6)
    # erfc's slope at +-inf is 0, not 0 * inf
    v = np.array([np.inf, -np.inf, 50.0], np.float32)
    assert nb.grad(lambda t: ns.erfc(t).sum())(nb.asarray(v)).tolist() == [0.0, 0.0, 0.0]
    assert ns.erfc(v).tolist() == [0.0, 2.0, 0.0]


def test_stats_at_nan_inf_and_outside_the_unit_interval():
    """A NaN point gives NaN (it gave 0 or -inf, as if outside the support), the CDFs
    through the incomplete gamma function reach 1 at +inf (they gave NaN), a density is 0
    at the infinities, and a quantile of a probability outside [0, 1] is NaN."""
    st = nb.scipy.stats
    x = np.array([np.nan, -1.0, 0.5, np.inf], np.float32)
    for dist, args in (
        ("uniform", ()), ("expon", ()), ("gamma", (2.0,)), ("chi2", (3.0,)), ("beta", (2.0, 3.0)),
        ("pareto", (2.0,)), ("truncnorm", (-1.0, 2.0)),
    ):  # fmt: skip
        for fname in ("logpdf", "pdf", "cdf", "sf"):
            f = getattr(getattr(st, dist), fname, None)
            if f is None:
                continue
            got = f(x, *args).numpy()
            assert np.isnan(got[0]), (dist, fname, got)
            want = getattr(getattr(ss, dist), fname)(x[1:3], *args)
            np.testing.assert_allclose(got[1:3], want, rtol=1e-5, atol=1e-7)
        assert getattr(st, dist).pdf(x, *args).numpy()[3] == 0.0
    for dist, args in (("gamma", (2.0,)), ("chi2", (3.0,)), ("gennorm", (1.5,))):
        assert getattr(st, dist).cdf(np.float32(np.inf), *args).item() == 1.0
        if hasattr(getattr(st, dist), "sf"):
            assert getattr(st, dist).sf(np.float32(np.inf), *args).item() == 0.0
    assert nb.scipy.special.gammainc(2.0, np.inf).item() == 1.0
    assert nb.scipy.special.gammaincc(2.0, np.inf).item() == 0.0
    assert np.isnan(st.bernoulli.cdf(np.float32(np.nan), 0.3).item())
    q = np.array([-0.1, 0.5, 1.5], np.float32)
    for dist, args in (("expon", ()), ("pareto", (2.0,))):
        got = getattr(st, dist).ppf(q, *args).numpy()
        assert np.isnan(got[[0, 2]]).all() and np.isfinite(got[1])


def test_expn_against_scipy_and_its_derivative():
    """``expn`` across its series and continued-fraction ranges, orders 0 to 30, at 0 and
    outside its domain, and its derivative ``-E_(n-1)``."""
    x = np.array([0.0, 1e-8, 0.01, 0.3, 1.0, 1.4, 1.6, 2.5, 5.0, 20.0, 100.0, 700.0])
    for n in (0, 1, 2, 3, 5, 10, 30):
        np.testing.assert_allclose(
            nb.scipy.special.expn(n, x).numpy(), sp.expn(n, x), rtol=1e-12, atol=0
        )
        got32 = nb.scipy.special.expn(n, x.astype(np.float32)).numpy()
        assert got32.dtype == np.float32
        np.testing.assert_allclose(got32, sp.expn(n, x), rtol=5e-6, atol=1e-37)  # (underflow)
    both = nb.scipy.special.expn(np.array([1, 2, 3]), np.array([[0.5], [2.0]])).numpy()
    np.testing.assert_allclose(both, sp.expn([1, 2, 3], [[0.5], [2.0]]), rtol=1e-12)
    assert np.isnan(nb.scipy.special.expn(np.array([-1, 2]), np.array([1.0, -1.0])).numpy()).all()
    v = np.array([0.5, 2.0])
    got = nb.grad(lambda t: nb.scipy.special.expn(3, t).sum())(nb.constant(v)).numpy()
    np.testing.assert_allclose(got, -sp.expn(2, v), rtol=1e-10)
