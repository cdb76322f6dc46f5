"""cond, switch, while_loop, fori_loop, scan: forward, grad, jvp, vmap, compile, errors.

References are NumPy loops and central finite differences (float64); where JAX is installed
the same functions are also checked against ``jax.lax`` (those tests skip without it). MAX
parity is in tests/backends/test_max.py (``control_graph``).
"""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb
from nabla.runtime.graph import GRAPH, ConcretizationError

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 3)) * 0.5
XS = RNG.standard_normal((5, 3))
H0 = RNG.standard_normal(3)


def c(a):
    return nb.constant(np.asarray(a, dtype=np.float64))


def fd_grad(f, x, eps=1e-6):
    """Central differences of a scalar NumPy function."""
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# ----------------------------------------------------------------------------- references
def rnn_np(w, h0, xs, reverse=False):
    h, ys = h0, []
    order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    out = [None] * len(xs)
    for t in order:
        h = np.tanh(h @ w + xs[t])
        out[t] = (h * 2.0).sum()
    ys = np.array(out)
    return (h * h).sum() + ys.sum()


def rnn_nb(w, h0, xs, reverse=False):
    def step(h, x):
        h2 = nb.tanh(h @ w + x)
        return h2, (h2 * 2.0).sum()

    h, ys = nb.scan(step, h0, xs, reverse=reverse)
    return (h * h).sum() + ys.sum()


# ----------------------------------------------------------------------------- scan
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_forward_and_gradients_match_references(reverse):
    f = lambda w, h, x: rnn_nb(w, h, x, reverse)
    close(f(c(W), c(H0), c(XS)).item(), rnn_np(W, H0, XS, reverse), 1e-12)
    gw, gh, gx = nb.grad(f, argnums=(0, 1, 2))(c(W), c(H0), c(XS))
    close(gw.numpy(), fd_grad(lambda w: rnn_np(w, H0, XS, reverse), W))
    close(gh.numpy(), fd_grad(lambda h: rnn_np(W, h, XS, reverse), H0))
    close(gx.numpy(), fd_grad(lambda x: rnn_np(W, H0, x, reverse), XS))
    t = RNG.standard_normal((3, 3))
    _, tan = nb.jvp(f, (c(W), c(H0), c(XS)), (c(t), c(np.zeros(3)), c(np.zeros((5, 3)))))
    close(tan.item(), (fd_grad(lambda w: rnn_np(w, H0, XS, reverse), W) * t).sum())


def test_scan_ys_are_stacked_in_xs_order_and_pytrees_work():
    xs = {"a": c(np.arange(8.0).reshape(4, 2)), "b": c(np.arange(4.0))}

    def step(carry, x):
        s, n = carry
        s = s + x["a"] * x["b"]
        return (s, n + 1), {"s": s, "n": n}

    (s, n), ys = nb.scan(step, (c(np.zeros(2)), 0), xs, reverse=True)
    a, b = np.arange(8.0).reshape(4, 2), np.arange(4.0)
    acc, ref = np.zeros(2), np.zeros((4, 2))
    for t in range(3, -1, -1):
        acc = acc + a[t] * b[t]
        ref[t] = acc
    close(s.numpy(), acc)
    assert n.item() == 4 and n.dtype == nb.int32
    close(ys["s"].numpy(), ref)
    np.testing.assert_array_equal(ys["n"].numpy(), [3, 2, 1, 0])


def test_scan_without_xs_and_with_none_ys():
    carry, ys = nb.scan(lambda c_, _: (c_ * 2.0, None), c(1.0), None, length=5)
    assert ys is None
    assert carry.item() == 32.0
    with pytest.raises(ValueError, match="length is required"):
        nb.scan(lambda c_, _: (c_, None), c(1.0), None)


def test_scan_closure_over_weights_gets_gradients_and_hessian():
    def loss(w):
        return rnn_nb(w, c(H0), c(XS))

    g = nb.grad(loss)(c(W))
    close(g.numpy(), fd_grad(lambda w: rnn_np(w, H0, XS), W))
    h = nb.hessian(lambda h0: rnn_nb(c(W), h0, c(XS)))(c(H0))
    ref = np.stack(
        [
            fd_grad(lambda v: nb.grad(lambda q: rnn_nb(c(W), q, c(XS)))(c(v)).numpy()[i], H0)
            for i in range(3)
        ]
    )
    close(h.numpy(), ref, 1e-5)


def test_scan_under_vmap_keeps_an_unbatched_weight_unbatched():
    xs_b = RNG.standard_normal((4, 5, 3))
    h_b = RNG.standard_normal((4, 3))
    got = nb.vmap(rnn_nb, in_axes=(None, 0, 0))(c(W), c(h_b), c(xs_b))
    close(got.numpy(), [rnn_np(W, h_b[i], xs_b[i]) for i in range(4)], 1e-12)
    per_ex = nb.vmap(nb.grad(rnn_nb), in_axes=(None, 0, 0))(c(W), c(h_b), c(xs_b))
    for i in range(4):
        close(per_ex.numpy()[i], fd_grad(lambda w: rnn_np(w, h_b[i], xs_b[i]), W))
    # the scan node reads W with its own (absent) batch dims: never a per-example copy
    text = str(
        nb.trace(lambda hb, xb: nb.vmap(rnn_nb, in_axes=(None, 0, 0))(c(W), hb, xb))(
            c(h_b), c(xs_b)
        )
    )
    assert "broadcast_levels" not in text.split("scan")[0].split("\n")[-1]
    assert "f64[3,3]@" not in text


def test_scan_trace_does_not_grow_with_length():
    def run(n):
        rec = []
        from nabla.core.state import STATE

        old, STATE.recording = STATE.recording, rec
        try:
            carry, ys = nb.scan(lambda c_, x: (c_ * 0.5 + x, c_), c(0.0), c(np.ones(n)))
        finally:
            STATE.recording = old
        return rec, carry, ys

    small, _, _ = run(10)
    big, carry, ys = run(10_000)
    assert len(small) == len(big) == 1
    assert small[0].kwargs["body"].num_ops == big[0].kwargs["body"].num_ops
    assert ys.shape == (10_000,)
    close(carry.item(), 2.0 * (1 - 0.5**10_000))


# a batched recurrence whose step also works on x alone: that part is hoisted out of the
# loop (vmapped over the steps) and must give the same values and derivatives
W_IN = RNG.standard_normal((3, 3)) * 0.5
XS_B = RNG.standard_normal((5, 2, 3))
H0_B = RNG.standard_normal((2, 3))


def xwork_np(w, w_in, h0, xs, reverse=False):
    h, out = h0, [None] * len(xs)
    for t in range(len(xs) - 1, -1, -1) if reverse else range(len(xs)):
        u = np.tanh(xs[t] @ w_in) * 2.0
        h = np.tanh(h @ w + u)
        out[t] = (u * h).sum()
    return (h * h).sum() + np.array(out).sum()


def xwork_nb(w, w_in, h0, xs, reverse=False):
    def step(h, x):
        u = nb.tanh(x @ w_in) * 2.0  # reads x and a closure only: hoisted
        h = nb.tanh(h @ w + u)
        return h, (u * h).sum()

    h, ys = nb.scan(step, h0, xs, reverse=reverse)
    return (h * h).sum() + ys.sum()


def _recorded(f, *args) -> list:
    """The nodes ``f`` records at the top level, in order."""
    from nabla.core.state import STATE

    rec, old = [], STATE.recording
    STATE.recording = rec
    try:
        f(*args)
    finally:
        STATE.recording = old
    return rec


def _scan_bodies(f, *args):
    """The bodies of the scan nodes ``f`` records, in order."""
    return [n.kwargs["body"] for n in _recorded(f, *args) if n.op.name == "scan"]


def _ops(body) -> list:
    return [node.op.name for node in body.nodes]


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_hoists_carry_free_work_with_same_values_and_derivatives(reverse):
    args = (c(W), c(W_IN), c(H0_B), c(XS_B))
    f = lambda w, wi, h, x: xwork_nb(w, wi, h, x, reverse)  # noqa: E731
    ref = lambda w, wi, h, x: xwork_np(w, wi, h, x, reverse)  # noqa: E731
    (body,) = _scan_bodies(f, *args)
    assert _ops(body).count("matmul") == 1  # h @ w; x @ w_in ran once for every step
    assert "tanh" in _ops(body)
    close(f(*args).item(), ref(W, W_IN, H0_B, XS_B), 1e-12)
    close(nb.compile(f)(*args).item(), ref(W, W_IN, H0_B, XS_B), 1e-12)
    grads = nb.grad(f, argnums=(0, 1, 2, 3))(*args)
    want = [
        fd_grad(lambda v: ref(v, W_IN, H0_B, XS_B), W),
        fd_grad(lambda v: ref(W, v, H0_B, XS_B), W_IN),
        fd_grad(lambda v: ref(W, W_IN, v, XS_B), H0_B),
        fd_grad(lambda v: ref(W, W_IN, H0_B, v), XS_B),
    ]
    for g, w in zip(grads, want):
        close(g.numpy(), w)
    t = RNG.standard_normal((3, 3))
    _, tan = nb.jvp(f, args, (c(np.zeros((3, 3))), c(t), c(np.zeros((2, 3))), c(XS_B * 0)))
    close(tan.item(), (want[1] * t).sum())
    # second order through the hoisted scans (the backward scan is hoisted too)
    hv = nb.grad(lambda wi: (nb.grad(f, argnums=1)(c(W), wi, c(H0_B), c(XS_B)) ** 2).sum())
    g2 = lambda v: (nb.grad(f, argnums=1)(c(W), c(v), c(H0_B), c(XS_B)).numpy() ** 2).sum()  # noqa: E731
    close(hv(c(W_IN)).numpy(), fd_grad(g2, W_IN), 1e-5)


def test_scan_backward_loop_keeps_only_the_carrys_pullback():
    """Reverse mode recomputes each step's forward from its saved carry; that work reads no
    cotangent, so it runs before the backward loop, and the xs' and weights' cotangents
    come after it from all steps at once. The loop keeps the carry's pullback: one matmul
    (``ct @ w^T``), none recomputing ``h @ w`` and none for ``w``'s cotangent."""
    args = (c(W), c(W_IN), c(H0_B), c(XS_B))
    fwd, bwd = _scan_bodies(nb.grad(xwork_nb, argnums=(0, 1)), *args)
    assert _ops(fwd).count("matmul") == 1
    assert _ops(bwd).count("matmul") == 1 and "tanh" not in _ops(bwd)


def _recorded_ops(f, *args) -> list:
    """The names of the ops ``f`` records at the top level, in order."""
    return [n.op.name for n in _recorded(f, *args)]


def _left_weight_nb(w, h0, xs):
    """A carry multiplied from the left by the weight (``w @ h``, h a (3, 2) matrix)."""

    def step(h, x):
        h = nb.tanh(w @ h + x.T)
        return h, ((h.T @ w.T) @ h).sum()

    h, ys = nb.scan(step, h0, xs)
    return (h * h).sum() + ys.sum()


def _left_weight_np(w, h0, xs):
    h, out = h0, []
    for x in xs:
        h = np.tanh(w @ h + x.T)
        out.append(((h.T @ w.T) @ h).sum())
    return (h * h).sum() + np.sum(out)


def test_reverse_mode_reads_each_step_s_product_from_the_forward_loop(monkeypatch):
    """A scan traced for reverse mode keeps each step's carry-dependent matrix product (its
    residual: ``h @ w``) as the forward loop computes it; the backward replay reads it
    (``matmul_residual``, differentiated as the product) instead of multiplying the saved
    carries by the weight again. Same derivatives, weight on either side, second order,
    per-example gradients and compile's replay path, with and without the residuals."""
    import nabla.transforms.control_flow as cf

    args = (c(W), c(W_IN), c(H0_B), c(XS_B))
    left = (c(W), c(H0_B.T), c(XS_B))
    grad_x = nb.grad(xwork_nb, argnums=(0, 1, 2, 3))
    grad_left = nb.grad(_left_weight_nb, argnums=(0, 1, 2))
    kept = _recorded_ops(grad_x, *args)
    assert "matmul_residual" in kept
    # a weight on the left stays unbatched in its residual, so its cotangent over all steps
    # is one GEMM of the weight's shape, not a product per step and a sum
    products = [n.out_specs[0][1] for n in _recorded(grad_left, *left) if n.op.name == "matmul"]
    assert W.shape in products and (len(XS_B), *W.shape) not in products, products

    def results():
        h0s = nb.stack([c(H0_B), c(H0_B * 2)])
        per_example = nb.vmap(nb.grad(xwork_nb), in_axes=(None, None, 0, None))
        hess = nb.hessian(lambda w: _left_weight_nb(w, c(H0_B.T), c(XS_B)))(c(W))
        compiled = nb.compile(grad_left)
        w = c(W).requires_grad_(True)  # (a second call takes compile's replay path)
        out = [*grad_x(*args), *grad_left(*left), hess, per_example(c(W), c(W_IN), h0s, c(XS_B))]
        out += [*compiled(*left), *compiled(w, *left[1:])]
        return [o.numpy() for o in out]

    with_residuals = results()
    monkeypatch.setattr(cf, "_SAVED_OPS", frozenset())
    recomputed = results()
    # without them each residual is a product again: of every saved carry by the weight
    again = _recorded_ops(grad_x, *args)
    assert "matmul_residual" not in again
    assert again.count("matmul") == kept.count("matmul") + kept.count("matmul_residual")
    for got, want in zip(with_residuals, recomputed, strict=True):
        close(got, want, 1e-12)
    close(with_residuals[4], fd_grad(lambda v: _left_weight_np(v, H0_B.T, XS_B), W))
    close(with_residuals[5], fd_grad(lambda v: _left_weight_np(W, v, XS_B), H0_B.T))


def _matches_loop(f, ref, a, b):
    """``f(a, b)`` and its gradients in both arguments equal the NumPy loop ``ref``'s (the
    gradients by central finite differences)."""
    close(f(c(a), c(b)).item(), ref(a, b), 1e-12)
    ga, gb = nb.grad(f, argnums=(0, 1))(c(a), c(b))
    close(ga.numpy(), fd_grad(lambda v: ref(v, b), a))
    close(gb.numpy(), fd_grad(lambda v: ref(a, v), b))


def test_scan_hoisting_under_vmap_and_with_mixed_ranks():
    """Under vmap the hoisted part maps over the steps inside the batch; a node whose
    per-step operands have fewer dims than another operand stays in the loop."""
    xs_b = RNG.standard_normal((4, 5, 2, 3))
    got = nb.vmap(xwork_nb, in_axes=(None, None, None, 0))(c(W), c(W_IN), c(H0_B), c(xs_b))
    close(got.numpy(), [xwork_np(W, W_IN, H0_B, xs_b[i]) for i in range(4)], 1e-12)
    per_ex = nb.vmap(nb.grad(xwork_nb, argnums=1), in_axes=(None, None, None, 0))(
        c(W), c(W_IN), c(H0_B), c(xs_b)
    )
    for i in range(4):
        close(per_ex.numpy()[i], fd_grad(lambda v: xwork_np(W, v, H0_B, xs_b[i]), W_IN))

    scale = RNG.standard_normal(5)

    def step(h, x):
        v, s = x
        u = nb.exp(v * s)  # (2, 3) * (): stays in the loop (its exp with it)
        w = nb.sin(v) + 1.0  # hoisted
        return h * u + w, u.sum()

    def f(xs, s):
        h, ys = nb.scan(step, c(H0_B), (xs, s))
        return h.sum() + ys.sum()

    def ref(xs, s):
        h, tot = H0_B, 0.0
        for t in range(5):
            u = np.exp(xs[t] * s[t])
            h, tot = h * u + np.sin(xs[t]) + 1.0, tot + u.sum()
        return h.sum() + tot

    (body,) = _scan_bodies(f, c(XS_B), c(scale))
    assert "exp" in _ops(body) and "sin" not in _ops(body)
    _matches_loop(f, ref, XS_B, scale)


def test_scan_with_a_nested_construct_on_x_keeps_it_in_the_loop():
    """A cond that reads only the step's x is carry-free but a nested construct: it stays in
    the loop (its recording is not replayed under the steps' vmap); the work around it is
    still hoisted, and values and gradients are the loop's."""

    def f(w, xs):
        def step(h, x):
            u = nb.cond(x.sum() > 0, lambda v: nb.sin(v), lambda v: v * 3.0, x)
            e = nb.exp(x * 0.5)  # hoisted
            h = nb.tanh(h @ w + u * e)
            return h, h.sum()

        h, ys = nb.scan(step, c(H0_B), xs)
        return (h * h).sum() + ys.sum()

    def ref(w, xs):
        h, tot = H0_B, 0.0
        for x in xs:
            u = np.sin(x) if x.sum() > 0 else x * 3.0
            h = np.tanh(h @ w + u * np.exp(x * 0.5))
            tot += h.sum()
        return (h * h).sum() + tot

    (body,) = _scan_bodies(f, c(W), c(XS_B))
    assert "cond" in _ops(body) and "exp" not in _ops(body)
    _matches_loop(f, ref, W, XS_B)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("unroll", [1, 3, True])
def test_scan_unroll_gives_identical_results(unroll, reverse):
    xs = c(RNG.standard_normal((10, 2)))
    f = lambda c_, x: (nb.sin(c_) + x, c_ * x)
    ref = nb.scan(f, c(np.ones(2)), xs, reverse=reverse)
    got = nb.scan(f, c(np.ones(2)), xs, reverse=reverse, unroll=unroll)
    close(got[0].numpy(), ref[0].numpy(), 1e-12)
    close(got[1].numpy(), ref[1].numpy(), 1e-12)


def test_nested_scan_and_checkpoint_in_body():
    xs = RNG.standard_normal((3, 4, 2))

    def inner(h, row):
        return nb.scan(lambda a, x: (nb.tanh(a + x), a), h, row)[0], None

    def loss(h, ck):
        body = nb.checkpoint(inner) if ck else inner
        return (nb.scan(body, h, c(xs))[0] ** 2).sum()

    def ref(h):
        for r in xs:
            for x in r:
                h = np.tanh(h + x)
        return (h**2).sum()

    close(loss(c(H0[:2]), False).item(), ref(H0[:2]), 1e-12)
    g = nb.grad(lambda h: loss(h, False))(c(H0[:2]))
    gk = nb.grad(lambda h: loss(h, True))(c(H0[:2]))
    close(g.numpy(), fd_grad(ref, H0[:2]))
    close(gk.numpy(), g.numpy(), 1e-12)


def test_gradient_of_a_scan_over_differentiated_xs_inside_another_loop():
    """The inner scan's per-step work on its xs (``b * c``, reading the outer carry) was
    mapped over its steps by a vmap whose level then leaked into the outer loop's
    derivative: the gradient came out ``len(y)`` times too large per step (and, with other
    bodies, with a batch level nobody could read)."""
    y = np.array([0.3, 0.4, 0.1])

    def f(y, outer):
        def inner(k):
            return nb.scan(lambda d, b: (d + b * k, None), k, y)[0]

        if outer == "scan":
            return nb.scan(lambda k, _: (inner(k), None), c(0.5), None, length=2)[0]
        return nb.fori_loop(0, 2, lambda i, k: inner(k), c(0.5))

    def ref(y):
        k = 0.5
        for _ in range(2):
            k = k + k * y.sum()
        return k

    for outer in ("scan", "fori"):
        close(f(c(y), outer).item(), ref(y), 1e-12)
        close(nb.grad(lambda v: f(v, outer))(c(y)).numpy(), fd_grad(ref, y))
        close(nb.jacfwd(lambda v: f(v, outer))(c(y)).numpy(), fd_grad(ref, y))


def test_a_new_lambda_with_the_same_body_is_the_same_program():
    xs = c(np.arange(6.0))
    a = nb.scan(lambda s, x: (s + x * 2.0, s), c(0.0), xs)
    b = nb.scan(lambda s, x: (s + x * 2.0, s), c(0.0), xs)
    pa, pb = a[0]._impl.node.phys_kwargs["body"], b[0]._impl.node.phys_kwargs["body"]
    assert pa is pb
    a[0].realize()
    hits = GRAPH.stats["program_hits"]
    b[0].realize()
    assert GRAPH.stats["program_hits"] == hits + 1
    assert a[0].item() == b[0].item() == 30.0


def test_compiled_scan_traces_once_and_differentiates():
    @nb.compile
    def f(w, h, xs):
        return rnn_nb(w, h, xs)

    for _ in range(3):
        close(f(c(W), c(H0), c(XS)).item(), rnn_np(W, H0, XS), 1e-12)
    assert f.stats.misses == 1 and f.stats.hits == 2
    g = nb.grad(f)(c(W), c(H0), c(XS))
    close(g.numpy(), fd_grad(lambda w: rnn_np(w, H0, XS), W))
    step = nb.compile(nb.grad(rnn_nb))
    for _ in range(2):
        close(step(c(W), c(H0), c(XS)).numpy(), g.numpy(), 1e-12)
    assert step.stats.misses == 1


def test_scan_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"leading axis length; got xs\[0\]: 3, xs\[1\]: 4"):
        nb.scan(lambda s, x: (s, None), c(0.0), (c(np.ones(3)), c(np.ones(4))))
    with pytest.raises(TypeError, match=r"carry leaf 0 is float64\[\] in init but float64\[2\]"):
        nb.scan(lambda s, x: (s + x, None), c(0.0), c(np.ones((3, 2))))
    with pytest.raises(TypeError, match="structure of init"):
        nb.scan(lambda s, x: ((s, s), None), c(0.0), c(np.ones(3)))
    with pytest.raises(TypeError, match="pair"):
        nb.scan(lambda s, x: s, c(0.0), c(np.ones(3)))
    with pytest.raises(ConcretizationError, match="scan f: .*nb.cond"):
        nb.scan(lambda s, x: (s + 1.0 if x.item() > 0 else s, None), c(0.0), c(np.ones(3)))
    with pytest.raises(ValueError, match="global random generator.*draw the numbers outside"):
        nb.scan(lambda s, x: (s + nb.uniform(()), None), c(0.0), c(np.ones(3)))
    with pytest.raises(ValueError, match="fori_loop body_fun draws .* every step"):
        nb.fori_loop(0, 3, lambda i, v: v + nb.uniform(()), c(0.0))
    with pytest.raises(ConcretizationError, match="fori_loop body_fun: "):
        nb.fori_loop(0, 3, lambda i, v: v + 1.0 if v.item() > 0 else v, c(0.0))
    with pytest.raises(ValueError, match="cond true_fun draws .* on every call; draw them"):
        nb.cond(True, lambda v: v + nb.uniform(()), lambda v: v, c(0.0))
    keys = nb.random.split(nb.random.key(0), 3)
    with pytest.raises(ValueError, match="cond true_fun: op random_normal .*never inside cond"):
        nb.cond(True, lambda k: nb.random.normal(k, ()), lambda k: c(0.0), keys[0])
    with pytest.raises(ValueError, match="while_loop body_fun: op random_split"):
        nb.while_loop(lambda v: v[1] < 3, lambda v: (nb.random.split(v[0])[0], v[1] + 1),
                      (keys[0], c(0)))  # fmt: skip
    with pytest.raises(
        TypeError, match=r"carry leaf 0 is float32\[\] in init but float32\[2\] from f"
    ):
        nb.scan(lambda s, k: (s + nb.random.normal(k, (2,)), None), nb.constant(0.0), keys)


def test_a_scan_body_draws_from_the_keys_it_receives():
    """JAX's patterns: a key carried and split every step, or one key per step among the
    xs. Draws run on the host, so such a scan (and fori_loop) runs its steps one by one,
    each drawing from its own key: the same numbers as the loop written out, different for
    another key under compile (never baked in), differentiable and batched."""
    keys = nb.random.split(nb.random.key(0), 3)
    total, ys = nb.scan(lambda s, k: (s + nb.random.normal(k, ()), s), nb.constant(0.0), keys)
    by_hand = [nb.random.normal(k, ()).item() for k in keys]
    assert total.item() == pytest.approx(sum(by_hand), rel=1e-6)
    np.testing.assert_allclose(ys.numpy(), np.cumsum([0.0] + by_hand[:2]), rtol=1e-6)

    def body(key, _):
        key, sub = nb.random.split(key)
        return key, nb.random.normal(sub, (2,))

    _, draws = nb.scan(body, nb.random.key(7), None, length=3)
    key, want = nb.random.key(7), []
    for _ in range(3):
        key, sub = nb.random.split(key)
        want.append(nb.random.normal(sub, (2,)).numpy())
    np.testing.assert_array_equal(draws.numpy(), np.stack(want))
    _, back = nb.scan(body, nb.random.key(7), None, length=3, reverse=True)
    np.testing.assert_array_equal(back.numpy(), np.stack(want)[::-1])

    def loss(w, key):  # dropout in a recurrent loop
        def step(carry, x):
            h, key = carry
            key, sub = nb.random.split(key)
            h = nb.tanh(h * w + x) * nb.random.bernoulli(sub, 0.5, (3,))
            return (h, key), h.sum()

        return nb.scan(step, (nb.zeros((3,)), key), nb.ones((4, 3)))[1].sum()

    w = nb.constant(0.5)
    g = nb.grad(loss)(w, nb.random.key(2)).item()
    eps = 1e-3
    fd = (loss(w + eps, nb.random.key(2)).item() - loss(w - eps, nb.random.key(2)).item()) / 2e-3
    assert g == pytest.approx(fd, rel=1e-2)
    compiled = nb.compile(nb.grad(loss))
    assert compiled(w, nb.random.key(2)).item() == pytest.approx(g, rel=1e-6)
    assert compiled(w, nb.random.key(3)).item() != pytest.approx(g, rel=1e-3)
    batched = nb.vmap(lambda k: nb.scan(body, k, None, length=2)[1])(keys)
    assert batched.shape == (3, 2, 2)
    np.testing.assert_array_equal(
        batched.numpy()[1], nb.scan(body, keys[1], None, length=2)[1].numpy()
    )

    def fori_body(i, carry):
        key, acc = carry
        key, sub = nb.random.split(key)
        return key, acc + nb.random.normal(sub, ())

    _, none = nb.scan(body, nb.random.key(7), None, length=0)  # no step: ys of no rows
    assert none.shape == (0, 2) and none.dtype == nb.float32
    got = nb.fori_loop(0, 3, fori_body, (nb.random.key(7), nb.constant(0.0)))[1]
    key, acc = nb.random.key(7), 0.0
    for _ in range(3):
        key, sub = nb.random.split(key)
        acc += nb.random.normal(sub, ()).item()
    assert got.item() == pytest.approx(acc, rel=1e-6)


# ----------------------------------------------------------------------------- cond / switch
def cond_np(x, y):
    return (np.sin(x) * y).sum() if x.sum() > 0 else (x * x + y).sum()


def cond_nb(x, y):
    return nb.cond(
        x.sum() > 0, lambda a, b: (nb.sin(a) * b).sum(), lambda a, b: (a * a + b).sum(), x, y
    )


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_forward_grad_jvp(sign):
    x, y = sign * np.abs(RNG.standard_normal(3)), RNG.standard_normal(3)
    close(cond_nb(c(x), c(y)).item(), cond_np(x, y), 1e-12)
    gx, gy = nb.grad(cond_nb, argnums=(0, 1))(c(x), c(y))
    close(gx.numpy(), fd_grad(lambda v: cond_np(v, y), x))
    close(gy.numpy(), fd_grad(lambda v: cond_np(x, v), y))
    t = RNG.standard_normal(3)
    _, tan = nb.jvp(cond_nb, (c(x), c(y)), (c(t), c(np.zeros(3))))
    close(tan.item(), (fd_grad(lambda v: cond_np(v, y), x) * t).sum())


def test_cond_batched_predicate_selects_per_example():
    xb = RNG.standard_normal((6, 3))
    y = RNG.standard_normal(3)
    got = nb.vmap(lambda a: cond_nb(a, c(y)))(c(xb))
    close(got.numpy(), [cond_np(r, y) for r in xb], 1e-12)
    g = nb.vmap(nb.grad(lambda a: cond_nb(a, c(y))))(c(xb))
    for i, r in enumerate(xb):
        close(g.numpy()[i], fd_grad(lambda v: cond_np(v, y), r))


def test_cond_with_unbatched_predicate_under_vmap_and_pytrees():
    xb = c(RNG.standard_normal((4, 2)))
    out = nb.vmap(
        lambda a: nb.cond(True, lambda d: {"p": d["v"] * 2.0}, lambda d: {"p": -d["v"]}, {"v": a})
    )(xb)
    close(out["p"].numpy(), xb.numpy() * 2.0)


def test_switch_clamps_and_differentiates():
    branches = [lambda v: v * 1.0, lambda v: v * v, lambda v: nb.sin(v)]
    x = c(np.array([0.3, -1.2]))
    for i, ref in [(-3, x.numpy()), (1, x.numpy() ** 2), (7, np.sin(x.numpy()))]:
        close(nb.switch(i, branches, x).numpy(), ref, 1e-12)
    g = nb.grad(lambda v: nb.switch(nb.constant(1), branches, v).sum())(x)
    close(g.numpy(), 2 * x.numpy())
    idx = nb.constant(np.array([0, 1, 2, 5], np.int32))
    xb = c(RNG.standard_normal((4, 2)))
    got = nb.vmap(lambda i, v: nb.switch(i, branches, v))(idx, xb)
    v = xb.numpy()
    close(got.numpy(), np.stack([v[0], v[1] ** 2, np.sin(v[2]), np.sin(v[3])]), 1e-12)


def test_cond_errors_name_both_branches():
    x = c(np.ones(3))
    with pytest.raises(
        TypeError, match=r"\[0\] is float64\[3\] in false_fun but float64\[2\] in true_fun"
    ):
        nb.cond(True, lambda v: (v[:2],), lambda v: (v,), x)
    with pytest.raises(TypeError, match="same structure"):
        nb.cond(True, lambda v: (v, v), lambda v: v, x)
    with pytest.raises(TypeError, match=r"pred must be a scalar, got shape \(3,\)"):
        nb.cond(x > 0, lambda v: v, lambda v: v, x)
    with pytest.raises(TypeError, match="index must be an integer scalar"):
        nb.switch(c(1.0), [lambda v: v, lambda v: v], x)


# ----------------------------------------------------------------------------- while / fori
def test_while_loop_forward_jvp_and_pytrees():
    x = RNG.standard_normal(3)

    def body(s):
        return {"i": s["i"] + 1, "v": nb.sin(s["v"]) * 1.5}

    f = lambda v: nb.while_loop(lambda s: s["i"] < 4, body, {"i": 0, "v": v})["v"]

    def ref(v):
        for _ in range(4):
            v = np.sin(v) * 1.5
        return v

    close(f(c(x)).numpy(), ref(x), 1e-12)
    t = RNG.standard_normal(3)
    _, tan = nb.jvp(f, (c(x),), (c(t),))
    jac = np.stack([fd_grad(lambda v: ref(v)[i], x) for i in range(3)])
    close(tan.numpy(), jac @ t)
    close(nb.jacfwd(f)(c(x)).numpy(), jac)


def test_while_loop_reverse_mode_error_and_max_steps():
    x = c(RNG.standard_normal(3))
    f = lambda v: nb.while_loop(lambda s: s[0] < 4, lambda s: (s[0] + 1, nb.sin(s[1])), (0, v))[1]
    with pytest.raises(
        ValueError, match="Reverse-mode differentiation does not work for while_loop"
    ):
        nb.grad(lambda v: f(v).sum())(x)
    fm = lambda v: nb.while_loop(
        lambda s: s[0] < 4, lambda s: (s[0] + 1, nb.sin(s[1])), (0, v), max_steps=10
    )[1]
    close(fm(x).numpy(), f(x).numpy(), 1e-12)
    g = nb.grad(lambda v: fm(v).sum())(x)

    def ref(v):
        for _ in range(4):
            v = np.sin(v)
        return v.sum()

    close(g.numpy(), fd_grad(ref, x.numpy()))
    capped = nb.while_loop(lambda s: s < 100.0, lambda s: s + 1.0, c(0.0), max_steps=7)
    assert capped.item() == 7.0


def test_while_loop_read_by_its_predicate_alone_has_a_zero_derivative():
    """As JAX: a differentiated value the carry never depends on (only the predicate reads
    it, or the body through a comparison or an integer) gives the loop no derivative, so
    reverse mode works; a carry that depends on it is still refused."""
    x = c(np.array([0.5, 0.2, 0.3]))
    wl = nb.while_loop
    count = lambda a: wl(lambda k: k < a.sum() * 10, lambda k: k + 1.0, c(0.0))
    close(nb.grad(lambda a: count(a) * a[0])(x).numpy(), [10.0, 0.0, 0.0])
    close(nb.hessian(lambda a: count(a) * a[0] ** 2)(x).numpy()[0], [20.0, 0.0, 0.0])
    # per example: the batched loop masks its carry with the predicate, a comparison
    per_lane = lambda a: nb.vmap(lambda v: wl(lambda k: k < v * 10, lambda k: k + 1.0, c(0.0)) * v)
    close(nb.grad(lambda a: per_lane(a)(a).sum())(x).numpy(), [5.0, 2.0, 3.0])
    steps = lambda a: wl(lambda k: k < 5, lambda k: k + (a.sum() > 0).astype(nb.int32), 0)
    close(nb.grad(lambda a: steps(a).astype(nb.float64) * a[0])(x).numpy(), [5.0, 0.0, 0.0])
    # the carry reads it a step later, through another carry: refused
    chain = lambda a: wl(
        lambda s: s[2] < 3, lambda s: (s[0] + s[1], s[1] + a.sum(), s[2] + 1), (c(0.0), c(1.0), 0)
    )[0]
    with pytest.raises(ValueError, match="does not work for while_loop when its carry"):
        nb.grad(chain)(x)
    close(nb.jvp(chain, (x,), (c(np.ones(3)),))[1].item(), 9.0)  # a0 = 3 + 3 * sum(a)


def test_batched_predicate_runs_until_every_lane_is_done():
    ns = np.array([1, 3, 0, 5], np.int32)
    v = RNG.standard_normal((4, 2))
    got = nb.vmap(lambda n, x: nb.fori_loop(0, n, lambda i, a: a * 2.0 + i.cast(nb.float64), x))(
        nb.constant(ns), c(v)
    )
    ref = []
    for n, x in zip(ns, v):
        for i in range(n):
            x = x * 2.0 + i
        ref.append(x)
    close(got.numpy(), np.stack(ref), 1e-12)
    count = nb.vmap(lambda x: nb.while_loop(lambda s: s < x, lambda s: s + 1.0, c(0.0)))(
        c(np.array([0.5, 3.0, 0.0]))
    )
    close(count.numpy(), [1.0, 3.0, 0.0])


def test_fori_loop_static_bounds_is_reverse_differentiable():
    x = RNG.standard_normal(2)
    f = lambda v: nb.fori_loop(2, 6, lambda i, a: a * nb.cos(a) + i.cast(nb.float64), v).sum()

    def ref(v):
        for i in range(2, 6):
            v = v * np.cos(v) + i
        return v.sum()

    close(f(c(x)).item(), ref(x), 1e-12)
    close(nb.grad(f)(c(x)).numpy(), fd_grad(ref, x))
    assert nb.fori_loop(5, 2, lambda i, a: a + 1.0, c(0.0)).item() == 0.0


def test_while_loop_errors():
    with pytest.raises(TypeError, match=r"carry leaf 0 is float64\[\] in init_val but float32\[\]"):
        nb.while_loop(lambda s: s < 3.0, lambda s: s.cast(nb.float32), c(0.0))
    with pytest.raises(TypeError, match="boolean scalar"):
        nb.while_loop(lambda s: s, lambda s: s + 1.0, c(0.0))
    with pytest.raises(TypeError, match="structure of init_val"):
        nb.while_loop(lambda s: s[0] < 3.0, lambda s: s[0], (c(0.0),))
    with pytest.raises(TypeError, match="lower and upper must be integers"):
        nb.fori_loop(c(0.0), c(3.0), lambda i, a: a, c(0.0))


# ----------------------------------------------------------------------------- vs JAX
def test_against_jax_lax():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    jax.config.update("jax_enable_x64", True)

    def rnn_jax(w, h0, xs):
        def step(h, x):
            h2 = jnp.tanh(h @ w + x)
            return h2, (h2 * 2.0).sum()

        h, ys = jax.lax.scan(step, h0, xs)
        return (h * h).sum() + ys.sum()

    close(nb.grad(rnn_nb)(c(W), c(H0), c(XS)).numpy(), jax.grad(rnn_jax)(W, H0, XS), 1e-10)
    hb, xb = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 5, 3))
    close(
        nb.vmap(nb.grad(rnn_nb), in_axes=(None, 0, 0))(c(W), c(hb), c(xb)).numpy(),
        jax.vmap(jax.grad(rnn_jax), in_axes=(None, 0, 0))(W, hb, xb),
        1e-10,
    )
    xs = RNG.standard_normal((6, 3))
    jc = jax.vmap(
        jax.grad(
            lambda a: jax.lax.cond(
                a.sum() > 0, lambda v: (jnp.sin(v) * 2).sum(), lambda v: (v * v).sum(), a
            )
        )
    )(xs)
    nc = nb.vmap(
        nb.grad(
            lambda a: nb.cond(
                a.sum() > 0, lambda v: (nb.sin(v) * 2).sum(), lambda v: (v * v).sum(), a
            )
        )
    )(c(xs))
    close(nc.numpy(), jc, 1e-10)
    ns = np.array([1, 4, 2], np.int32)
    jw = jax.vmap(lambda n, v: jax.lax.fori_loop(0, n, lambda i, a: jnp.sin(a) + i, v))(ns, xs[:3])
    nw = nb.vmap(lambda n, v: nb.fori_loop(0, n, lambda i, a: nb.sin(a) + i.cast(nb.float64), v))(
        nb.constant(ns), c(xs[:3])
    )
    close(nw.numpy(), jw, 1e-10)


def test_branches_closing_over_different_tensors_get_their_gradients():
    a, b = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    v = np.array([0.5, 0.7])
    refs = [
        lambda a, b: (v * a).sum(),
        lambda a, b: (np.sin(v) * b).sum(),
        lambda a, b: (v * a * b).sum(),
    ]

    def f(a, b, i):
        branches = [lambda u: u * a, lambda u: nb.sin(u) * b, lambda u: u * a * b]
        return nb.switch(i, branches, c(v)).sum()

    for i, ref in enumerate(refs):
        ga, gb = nb.grad(f, argnums=(0, 1))(c(a), c(b), i)
        close(ga.numpy(), fd_grad(lambda x: ref(x, b), a))
        close(gb.numpy(), fd_grad(lambda x: ref(a, x), b))
    _, t = nb.jvp(lambda x: f(x, c(b), 2), (c(a),), (c(np.ones(2)),))
    close(t.item(), (v * b).sum())
    sel = nb.vmap(lambda ai: nb.cond(ai > 1.5, lambda: ai * c(b), lambda: -c(b)))(c(a))
    close(sel.numpy(), [-b, 2.0 * b])


def test_second_order_reverse_mode_through_scan_and_bounded_while():
    g2 = nb.grad(nb.grad(lambda v: nb.scan(lambda s, _: (s * s, None), v, None, length=1)[0]))
    assert g2(c(3.0)).item() == 2.0
    f = lambda v: nb.while_loop(
        lambda s: s[0] < 2, lambda s: (s[0] + 1, s[1] * s[1]), (0, v), max_steps=5
    )[1]
    assert nb.grad(nb.grad(f))(c(3.0)).item() == 108.0  # v**4
    x = RNG.standard_normal(3)
    h = nb.jacrev(nb.grad(lambda h0: rnn_nb(c(W), h0, c(XS))))(c(x))
    close(h.numpy(), nb.hessian(lambda h0: rnn_nb(c(W), h0, c(XS)))(c(x)).numpy(), 1e-10)


def test_grad_of_vmapped_loops_wrt_unbatched_inputs_sums_over_examples():
    w, X = np.array([1.0, 2.0, 3.0]), np.arange(6.0).reshape(2, 3)
    zero = c(np.zeros(3))

    def by_closure(w, X):
        step = lambda s, x: (s + x * w, None)
        return nb.vmap(lambda x: nb.scan(step, zero, nb.stack([x, x * 2]))[0])(X).sum()

    def by_xs(w, X):
        return nb.vmap(
            lambda x: nb.scan(lambda s, v: (s + v * x, None), zero, nb.stack([w, w * 2]))[0]
        )(X).sum()

    for f in (by_closure, by_xs):
        close(nb.grad(f)(c(w), c(X)).numpy(), 3 * X.sum(0), 1e-12)
    per_example = nb.vmap(nb.grad(lambda w_, x: by_closure(w_, x[None])), in_axes=(None, 0))
    close(per_example(c(w), c(X)).numpy(), 3 * X, 1e-12)
    gc = nb.grad(
        lambda w_, X_: nb.vmap(
            lambda x: nb.cond(x.sum() > 4, lambda: (x * w_).sum(), lambda: (x + w_).sum())
        )(X_).sum()
    )(c(w), c(X))
    close(gc.numpy(), 1.0 + X[1], 1e-12)


def test_a_compiled_bounded_while_is_differentiable_after_a_plain_call():
    cf = nb.compile(
        lambda v: nb.while_loop(
            lambda s: s[0] < 2, lambda s: (s[0] + 1, s[1] * s[1]), (0, v), max_steps=5
        )[1].sum()
    )
    x = c(np.array([1.5, 2.0]))
    close(cf(x).item(), (x.numpy() ** 4).sum(), 1e-12)
    close(nb.grad(cf)(x).numpy(), 4 * x.numpy() ** 3, 1e-12)


def test_no_residuals_are_kept_under_no_grad():
    w = c(np.ones(3))
    w.requires_grad = True
    with nb.no_grad():
        out, _ = nb.scan(lambda s, x: (s + x * w, None), c(np.zeros(3)), c(np.ones((4, 3))))
    assert out._impl.node.kwargs["saves"] is False
    close(out.numpy(), np.full(3, 4.0))


# ----------------------------------------------------------------- rules inside bodies
def _custom_sin():
    @nb.custom_jvp
    def f(x):
        return nb.sin(x)

    f.defjvp(lambda p, t: (nb.sin(p[0]), 10.0 * t[0]))
    return f


def _clipped_identity():
    @nb.custom_vjp
    def clipg(x):
        return x

    clipg.defvjp(lambda x: (x, None), lambda r, g: (nb.clip(g, -0.5, 0.5),))
    return clipg


def test_custom_rules_hold_inside_every_construct():
    """A custom_jvp/custom_vjp function called in a branch or loop body keeps its rule in
    both modes (the body used to differentiate the plain implementation: cos x, 3)."""
    f, clipg = _custom_sin(), _clipped_identity()
    x = c([1.0, -2.0, 3.0])
    ones = nb.ones((3,), dtype=nb.float64)
    bodies = {
        "cond": lambda g, v: nb.cond(True, g, lambda u: u, v),
        "switch": lambda g, v: nb.switch(1, [lambda u: u, g], v),
        "scan": lambda g, v: nb.scan(lambda cc, _: (g(cc), None), v, None, length=1)[0],
        "fori_loop": lambda g, v: nb.fori_loop(0, 1, lambda i, cc: g(cc), v),
        "while_loop": lambda g, v: nb.while_loop(
            lambda s: s[0] < 1, lambda s: (s[0] + 1, g(s[1])), (0, v)
        )[1],
    }
    for name, run in bodies.items():
        close(nb.jvp(lambda v: run(f, v), (x,), (ones,))[1].numpy(), [10.0] * 3)
        if name != "while_loop":  # reverse mode: while_loop needs max_steps
            close(nb.grad(lambda v: run(f, v).sum())(x).numpy(), [10.0] * 3)
            close(nb.grad(lambda v: (run(clipg, v) * 3.0).sum())(x).numpy(), [0.5] * 3)
    # the rule survives vmap and compile around the construct
    close(
        nb.vmap(nb.grad(lambda v: bodies["scan"](f, v).sum()))(nb.stack([x, x])).numpy(),
        [[10.0] * 3] * 2,
    )
    step = nb.compile(nb.grad(lambda v: (bodies["cond"](clipg, v) * 3.0).sum()))
    close(step(x).numpy(), [0.5] * 3)
    close(step(x).numpy(), [0.5] * 3)


def test_forward_mode_gives_constants_in_a_body_no_tangent():
    """A constant read by a body (a Python scalar, a closed-over tensor) has no tangent, as
    outside a construct: a zero tangent made 0 * log(-2) and 0 * inf NaN."""
    x = c([1.0, -2.0, 0.0, 3.0])
    t = nb.ones((4,), dtype=nb.float64)
    e = c(2.0)
    fns = {
        "cond": lambda body: lambda v: nb.cond(True, body, lambda u: u, v),
        "scan": lambda body: (
            lambda v: nb.scan(lambda cc, _: (body(cc), None), v, None, length=1)[0]
        ),
        "fori_loop": lambda body: lambda v: nb.fori_loop(0, 1, lambda i, cc: body(cc), v),
        "while_loop": lambda body: (
            lambda v: nb.while_loop(lambda s: s[0] < 1, lambda s: (s[0] + 1, body(s[1])), (0, v))[1]
        ),
    }
    xv = np.array([1.0, -2.0, 0.0, 3.0])
    for name, wrap in fns.items():
        close(nb.jvp(wrap(lambda u: u**2), (x,), (t,))[1].numpy(), 2 * xv, 1e-12)
        close(nb.jvp(wrap(lambda u: u**3.0), (x,), (t,))[1].numpy(), 3 * xv**2, 1e-12)
        close(nb.jvp(wrap(lambda u: u**e), (x,), (t,))[1].numpy(), 2 * xv, 1e-12)
        with np.errstate(divide="ignore"):
            got = nb.jvp(wrap(lambda u: u / 0.0), (x,), (t,))[1].numpy()
        assert np.all(np.isinf(got)), (name, got)
    h = nb.hessian(lambda v: nb.cond(True, lambda u: (u**3).sum(), lambda u: u.sum(), v))
    close(h(c([1.0, -2.0, 3.0])).numpy(), np.diag([6.0, -12.0, 18.0]), 1e-12)
    # a scan's xs and consts without tangents get none either
    ys = nb.jvp(
        lambda v: nb.scan(lambda cc, xx: (cc * xx**2.0, cc), v, c([-1.0, 2.0]))[0],
        (c(3.0),),
        (c(1.0),),
    )
    close(ys[1].numpy(), 4.0, 1e-12)


def test_a_batched_predicate_keeps_the_untaken_branch_out_of_derivatives():
    """JAX's rule: under vmap with a batched predicate, a lane's untaken branch gets no
    derivative, so sqrt of a negative lane does not make its gradient NaN."""
    fn = lambda s: nb.cond(s > 0, lambda u: nb.sqrt(u), lambda u: u * 2.0, s)  # noqa: E731
    x = c([1.0, -2.0, 3.0, 0.0])
    want = [0.5, 2.0, 0.5 / np.sqrt(3.0), 2.0]
    close(nb.grad(lambda v: nb.vmap(fn)(v).sum())(x).numpy(), want, 1e-12)
    close(nb.vmap(nb.grad(fn))(x).numpy(), want, 1e-12)
    close(nb.jacrev(nb.vmap(fn))(x).numpy(), np.diag(want), 1e-12)
    close(nb.jvp(nb.vmap(fn), (x,), (nb.ones((4,), dtype=nb.float64),))[1].numpy(), want, 1e-12)
    sw = lambda i, s: nb.switch(i, [lambda u: u * 2.0, nb.sqrt, nb.log], s)  # noqa: E731
    idx = nb.constant(np.array([0, 1, 2, 0], np.int32))
    got = nb.grad(lambda v: nb.vmap(sw)(idx, v).sum())(c([-1.0, 4.0, 2.0, -3.0]))
    close(got.numpy(), [2.0, 0.25, 0.5, 2.0], 1e-12)


def test_custom_rules_survive_a_compile_traced_without_derivatives():
    """compile traces once; a later call under grad or jvp replays the trace, which must
    keep the custom rule (it replayed the plain implementation: 2 cos x)."""
    f, clipg = _custom_sin(), _clipped_identity()
    x = c([1.0, 2.0])
    cf = nb.compile(lambda v: f(v) * 2.0)
    close(cf(x).numpy(), 2 * np.sin([1.0, 2.0]))
    close(nb.grad(lambda v: cf(v).sum())(x).numpy(), [20.0, 20.0])
    close(nb.jvp(cf, (x,), (nb.ones((2,), dtype=nb.float64),))[1].numpy(), [20.0, 20.0])
    cg = nb.compile(lambda v: clipg(v) * 3.0)
    close(cg(x).numpy(), [3.0, 6.0])
    close(nb.grad(lambda v: cg(v).sum())(x).numpy(), [0.5, 0.5])
    # a compiled gradient of a compiled custom_jvp function (its replay used to raise)
    g = nb.compile(nb.grad(lambda v: cf(v).sum()))
    close(g(x).numpy(), [20.0, 20.0])
    close(g(x).numpy(), [20.0, 20.0])


def test_fori_loop_names_the_user_s_carry_leaf_and_the_index_s_dtype():
    """fori_loop carries its index beside the user's value: a mismatch names the user's
    leaf by key path (it counted the index as leaf 0), and a narrow integer carry widened
    by the int32 index (JAX's index is weakly typed) is told the cast that keeps it."""
    pair = (nb.ones((2,)), nb.ones((3,)))
    for hi in (3, nb.constant(3)):  # a scan, then a while_loop (a traced bound)
        with pytest.raises(TypeError, match=r"val\[0\] is float32\[2\] in init_val but int32"):
            nb.fori_loop(0, hi, lambda i, v: (v[0].astype(nb.int32), v[1]), pair)
        with pytest.raises(TypeError, match=r"val is int8\[2\] .* write i.astype\(nb.int8\)"):
            nb.fori_loop(0, hi, lambda i, v: v + i, nb.ones((2,), dtype=nb.int8))
    named = {"a": nb.ones((2,)), "b": nb.ones((3,))}
    with pytest.raises(TypeError, match=r"val\['b'\] is float32\[3\]"):
        nb.fori_loop(0, 3, lambda i, v: {"a": v["a"], "b": v["b"].astype(nb.int32)}, named)
    out = nb.fori_loop(0, 3, lambda i, v: v + i.astype(nb.int8), nb.ones((2,), dtype=nb.int8))
    assert out.dtype == nb.int8 and out.numpy().tolist() == [4, 4]


def test_a_python_number_in_the_initial_carry_takes_the_body_s_dtype():
    """JAX's weak typing: a carry leaf given as a Python number takes the dtype the body
    returns for it (these raised a carry dtype mismatch)."""
    out = nb.while_loop(lambda v: v < 10, lambda v: v * 1.5, 1)
    assert out.dtype == nb.float32 and out.item() == 11.390625
    assert nb.fori_loop(0, 3, lambda i, v: v * 1.5, 1).item() == 3.375
    assert nb.fori_loop(0, nb.constant(3), lambda i, v: v * 1.5, 1).item() == 3.375
    carry, ys = nb.scan(lambda v, x: (v * 1.5, v), 1, None, length=2)
    assert carry.dtype == nb.float32 and ys.numpy().tolist() == [1.0, 1.5]
    carry, ys = nb.scan(lambda v, x: (v + x, v), 0, nb.constant([1.5, 2.0]))
    assert carry.item() == 3.5 and ys.numpy().tolist() == [0.0, 1.5]
    i, v = nb.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] + 0.5), (0, 0))
    assert (i.dtype, i.item(), v.dtype, v.item()) == (nb.int32, 3, nb.float32, 1.5)
    # a tensor keeps its dtype, and a weak float is not narrowed to an int
    with pytest.raises(TypeError, match="carry leaf 0 is int32"):
        nb.while_loop(lambda v: v < 10, lambda v: v * 1.5, nb.constant(1))
    with pytest.raises(TypeError, match="carry leaf 0 is float32"):
        nb.while_loop(lambda v: v < 10, lambda v: (v * 1.5).cast(nb.int32), 1.0)


def test_fori_loop_with_known_tensor_bounds_is_a_reverse_differentiable_scan():
    """JAX turns concrete bounds into a scan; a realized scalar bound does here too, while a
    traced one (inside compile) stays a while_loop and a batched one runs per example."""
    g = nb.grad(lambda v: nb.fori_loop(0, nb.constant(3), lambda i, cc: nb.sin(cc), v).sum())
    a = 1.0
    want = np.cos(a) * np.cos(np.sin(a)) * np.cos(np.sin(np.sin(a)))
    close(g(c([a])).numpy(), [want], 1e-12)
    lazy = nb.constant(1) + 2  # not realized yet: read at the call, outside any trace
    h = nb.grad(lambda v: nb.fori_loop(0, lazy, lambda i, cc: nb.sin(cc), v).sum())
    close(h(c([a])).numpy(), [want], 1e-12)
    out = nb.vmap(lambda n, v: nb.fori_loop(0, n, lambda i, x: x * 2.0, v))(
        nb.constant([1, 3]), c([1.0, 1.0])
    )
    close(out.numpy(), [2.0, 8.0])
    f = nb.compile(lambda n, v: nb.fori_loop(0, n, lambda i, x: x * 2.0, v))
    close(f(nb.constant(3), c(1.0)).numpy(), 8.0)
    close(f(nb.constant(4), c(1.0)).numpy(), 16.0)
    assert f.stats.misses == 1


def test_api_reference_and_jax_keyword_names_both_work():
    """The documented names (true_fn, cond_fn, body_fn, init, lo, hi, body) and JAX's (true_fun,
    cond_fun, body_fun, init_val, lower, upper) are both accepted as keywords."""
    x = nb.constant(2.0)
    assert nb.cond(True, true_fn=lambda: x * 2, false_fn=lambda: x).item() == 4.0
    assert nb.cond(False, true_fun=lambda: x * 2, false_fun=lambda: x).item() == 2.0
    grow = {"cond_fn": lambda c: c < 10, "body_fn": lambda c: c * 2}
    assert nb.while_loop(**grow, init=x).item() == 16.0
    assert nb.while_loop(lambda c: c < 10, lambda c: c * 2, init_val=x).item() == 16.0
    assert nb.fori_loop(lo=0, hi=3, body=lambda i, c: c + i, init=x).item() == 5.0
    assert nb.fori_loop(0, 3, body_fun=lambda i, c: c + i, init_val=x).item() == 5.0
    with pytest.raises(TypeError, match="two values for 'init_val'"):
        nb.fori_loop(0, 3, lambda i, c: c, x, init=x)
    with pytest.raises(TypeError, match="missing required argument.*init_val"):
        nb.fori_loop(0, 3, lambda i, c: c)
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        nb.while_loop(lambda c: c < 1, lambda c: c, x, foo=1)


def test_compiled_grad_of_scan_replays_with_its_saved_carries():
    """``nb.compile(nb.grad(f))`` over a scan, called again with an argument that requires
    grad (the replay path): the scan node traced for reverse mode is replayed with its
    saved carries, which the transposed scan after it reads."""
    w = nb.ones((3, 3)).requires_grad_(True)
    xs = nb.ones((5, 2, 3))

    def f(w, xs):
        _, ys = nb.scan(lambda c, x: (nb.tanh(c @ w + x), c), nb.zeros((2, 3)), xs)
        return ys.sum()

    want = nb.grad(f)(w, xs).numpy()
    g = nb.compile(nb.grad(f))
    for _ in range(3):
        np.testing.assert_allclose(g(w, xs).numpy(), want, rtol=1e-6)
    assert g.stats.misses == 1


# ------------------------------------------------------------ recorded ops replayed batched
_RNG = np.random.default_rng(11)
_XS = _RNG.standard_normal((5, 4, 3)).astype(np.float32)
_V = _RNG.standard_normal(4).astype(np.float32)


def test_a_vector_times_each_steps_matrix_is_hoisted_with_numpys_meaning():
    """``w @ x`` (a constant vector, a per-step matrix) runs for all steps at once outside
    the loop: the recorded vector-matrix product, replayed on the batched slices, keeps
    NumPy's meaning (it had given a (3,) carry of the wrong values, or failed as ys)."""
    w = nb.constant(_V)
    carry, ys = nb.scan(lambda c, x: (c + nb.sum(w @ x), w @ x), 0.0, nb.constant(_XS))
    want = np.einsum("k,tkn->tn", _V, _XS)
    assert carry.shape == () and ys.shape == (5, 3)
    np.testing.assert_allclose(carry.numpy(), want.sum(), rtol=1e-5)
    np.testing.assert_allclose(ys.numpy(), want, rtol=1e-5)


def test_reverse_mode_through_a_readout_vector_times_the_carry():
    """An RNN-style readout ``v @ c`` of a (4, 3) carry: its gradient (the backward scan's
    hoisted replay) against finite differences."""
    xs = nb.constant(_XS)

    def loss(v):
        def step(c, x):
            c = nb.tanh(c * 0.9 + x)
            return c, nb.sum(nb.sin(v @ c))

        return nb.sum(nb.scan(step, nb.zeros((4, 3)), xs)[1])

    got = nb.grad(loss)(nb.constant(_V)).numpy()
    eps, num = 1e-3, np.zeros(4)
    for i in range(4):
        d = np.zeros(4, np.float32)
        d[i] = eps
        up = loss(nb.constant(_V.astype(np.float64) + d)).item()
        down = loss(nb.constant(_V.astype(np.float64) - d)).item()
        num[i] = (up - down) / (2 * eps)
    np.testing.assert_allclose(got, num, rtol=1e-3, atol=1e-4)


def test_vmapped_vectors_against_unbatched_steps_and_their_gradient():
    """A vmapped vector times each step's matrix, and the gradient with respect to the
    (unbatched) xs of a vmapped scan whose carry the vector batches: each against the
    per-row loop."""
    xs_np = _RNG.standard_normal((6, 3, 4)).astype(np.float32)
    wb = _RNG.standard_normal((5, 4)).astype(np.float32)

    def per_row(w):
        return nb.scan(lambda c, x: (c + nb.sum(x @ w), c), 0.0, nb.constant(xs_np))[0]

    got = nb.vmap(per_row)(nb.constant(wb)).numpy()
    np.testing.assert_allclose(got, np.einsum("tij,bj->b", xs_np, wb), rtol=1e-4)

    steps = _RNG.standard_normal((6, 4)).astype(np.float32)

    def loss(xs):
        def per(w):
            return nb.scan(lambda c, x: (c * w + nb.sum(x), nb.sum(c)), nb.zeros((4,)), xs)[1]

        return nb.sum(nb.vmap(per)(nb.constant(wb)))

    def loop(xs):  # the same in NumPy: d loss / d xs[t] summed over rows and lanes
        total = 0.0
        for w in wb.astype(np.float64):
            c = np.zeros(4)
            for x in xs:
                total += c.sum()
                c = c * w + x.sum()
        return total

    g = nb.grad(loss)(nb.constant(steps)).numpy()
    eps, num = 1e-3, np.zeros_like(steps, dtype=np.float64)
    for t in range(6):
        for j in range(4):
            d = np.zeros_like(steps, dtype=np.float64)
            d[t, j] = eps
            num[t, j] = (loop(steps + d) - loop(steps - d)) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=1e-3, atol=1e-3)


def test_a_bool_switch_index_is_an_error_as_in_jax():
    with pytest.raises(TypeError, match="switch: index must be an integer.*use nb.cond"):
        nb.switch(True, [lambda a: a, lambda a: -a], nb.ones((2,)))


def test_a_body_refuses_to_update_a_tensor_from_outside_it_in_place():
    """``H.add_(1)`` on a captured ``H`` inside a loop body ran once for five steps, a
    ``cond`` applied both branches' updates, and a ``scan`` left a value of its trace in
    ``H`` (a misleading error at the next read). Refused, naming the construct, with ``H``
    as it was; updates of the body's own values (a carry, a value it made) still work."""
    h = nb.constant(np.zeros(3, np.float32))

    def bump(i, c):
        h[1:].add_(1.0)
        return c + 1.0

    with pytest.raises(ValueError, match=r"fori_loop body_fun: a tensor from outside the body"):
        nb.fori_loop(0, 5, bump, nb.zeros(()))
    with pytest.raises(ValueError, match=r"cond true_fun: a tensor from outside the body"):
        nb.cond(nb.constant(True), lambda x: h.add_(x) * 1.0, lambda x: x * 1.0, nb.ones(3))
    with pytest.raises(ValueError, match=r"scan .*: a tensor from outside the body"):
        nb.scan(lambda c, x: (h.mul_(x) * 0.0 + c, c), nb.zeros(3), nb.ones((2, 3)))
    np.testing.assert_array_equal(h.numpy(), [0, 0, 0])

    def own(i, c):
        t = nb.zeros(3)
        t[i % 3] = 1.0  # a value the body made
        c[0].add_(t.sum())  # its carry
        return c

    np.testing.assert_array_equal(nb.fori_loop(0, 4, own, nb.zeros(2)).numpy(), [4.0, 0.0])


def test_an_untaken_branch_gives_no_nan_through_closures_batched_predicates_or_loops():
    """A branch closing over x (``cond(x > 0, lambda: sqrt(x), ...)``) had its work moved
    out of the branch, run and differentiated always: at x <= 0 the gradient was NaN (JAX:
    0). Under vmap with a batched predicate, closed-over values were not masked to the
    lanes taking the branch; inside a loop body, no operand was masked. Also an index a
    branch guards is only read when the branch runs."""

    def closure(x):
        return nb.cond(x > 0, lambda: nb.sqrt(x), lambda: x * 0.0)

    for v, want in ((-1.0, 0.0), (0.0, 0.0), (4.0, 0.25)):
        assert nb.grad(closure)(nb.constant(v)).item() == want
    assert (
        nb.grad(lambda x: nb.switch(nb.constant(0), [lambda: x * 2, lambda: nb.log(x)]))(
            nb.constant(0.0)
        ).item()
        == 2.0
    )
    xs = nb.constant([2.0, -1.0, 0.0, 4.0])
    g = nb.grad(lambda v: nb.vmap(closure)(v).sum())(xs).numpy()
    np.testing.assert_allclose(g, [0.5 / np.sqrt(2.0), 0.0, 0.0, 0.25], rtol=1e-6)

    def looped(x):
        def step(c, r):
            return c + nb.cond(r > 0, lambda t: nb.sqrt(t), lambda t: t * 0.0, r), None

        return nb.scan(step, nb.zeros(()), x * nb.ones(2))[0]

    g = nb.grad(lambda v: nb.vmap(looped)(v).sum())(nb.constant([-1.0, 0.0])).numpy()
    assert np.isfinite(g).all() and (g == 0).all()

    table = nb.constant([1.0, 2.0, 3.0, 4.0])

    @nb.compile
    def guarded(k):
        return nb.cond(k < 4, lambda: table[k], lambda: nb.constant(-1.0))

    assert guarded(nb.constant(7)).item() == -1.0
    assert guarded(nb.constant(2)).item() == 3.0


@pytest.mark.parametrize("construct", ["scan", "fori_loop", "cond"])
def test_an_unbatched_result_under_vmap_keeps_per_example_derivatives(construct):
    """A result that never reads batched data comes out unbatched (as JAX's batching rule
    gives it), but not where a differentiation inside the vmap reaches it: taking one lane
    there gave every example the first one's gradient (``vmap(grad)`` with respect to an
    unbatched argument) or tangent (``vmap(jvp)`` with batched tangents)."""
    xs = np.array([0.5, -1.0, 2.0], np.float32)
    w = np.float32(0.7)

    def f(a, w):
        if construct == "cond":
            p, q = nb.cond(w > 0, lambda a, w: (a * w, w * w), lambda a, w: (a, w), a, w)
        elif construct == "scan":
            (p, q), _ = nb.scan(
                lambda c, _: ((c[0] * c[1], c[1] * w), None), (a, w), None, length=2
            )
        else:
            p, q = nb.fori_loop(0, 2, lambda i, c: (c[0] * c[1], c[1] * w), (a, w))
        return p + q

    per_example = [nb.grad(f, argnums=1)(xs[i], w).item() for i in range(3)]
    got = nb.vmap(nb.grad(f, argnums=1), in_axes=(0, None))(xs, w)
    np.testing.assert_allclose(got.numpy(), per_example, rtol=1e-6)

    def second(a, w):
        return nb.cond(w > 0, lambda a, w: (a * w, w * w), lambda a, w: (a, w), a, w)[1]

    tw = np.array([1.0, 2.0, -3.0], np.float32)
    t = nb.vmap(lambda a, w, t: nb.jvp(lambda w: second(a, w), (w,), (t,))[1], (0, None, 0))(
        xs, w, tw
    )
    np.testing.assert_allclose(t.numpy(), 2 * w * tw, rtol=1e-6)
    cf = nb.compile(f)  # a trace made under vmap alone is not served under vmap(grad)
    nb.vmap(cf, in_axes=(0, None))(xs, w)
    got = nb.vmap(nb.grad(cf, argnums=1), in_axes=(0, None))(xs, w)
    np.testing.assert_allclose(got.numpy(), per_example, rtol=1e-6)


def test_a_scan_whose_per_step_work_is_hoisted_keeps_each_result_s_levels():
    """The scan's carry-free work (``b * x``) runs once for all steps; the loop replayed the
    body traced at the shared levels, which broadcast every result to them: a carry that
    reads only the inner vmap's data came out batched by the outer one too."""
    b = np.array([0.3, -0.6], np.float32)
    c = np.array([1.0, 2.0, 3.0], np.float32)
    xs = np.array([0.5, 1.5, -2.0, 1.0], np.float32)

    def f(b, c):
        return nb.scan(lambda cr, x: ((cr[0] + b * x, cr[1] + c), None), (b, c), xs)[0]

    inner = lambda b: nb.vmap(f, in_axes=(None, 0))(b, c)  # noqa: E731
    p, r = nb.vmap(inner, in_axes=0, out_axes=(0, None))(b)
    assert p.shape == (2, 3) and r.shape == (3,)
    np.testing.assert_allclose(r.numpy(), c * (1 + len(xs)), rtol=1e-6)
    np.testing.assert_allclose(p.numpy(), np.repeat((b * (1 + xs.sum()))[:, None], 3, 1), rtol=1e-6)


def test_control_flow_arguments_as_jax_takes_them():
    """A Python bool carry is not weakly typed (a body that makes it an int is JAX's
    error; it was silently an int carry); fori_loop's bounds must fit its int32 index (a
    2**31 bound started a scan of 2**31 steps, an int64 tensor bound failed naming
    ``constant``); a scan body may return its pair as a list."""
    with pytest.raises(TypeError, match="carry leaf 0 is bool"):
        nb.while_loop(lambda c: c < 10, lambda c: c + 1, True)
    with pytest.raises(TypeError, match="carry leaf 0 is bool"):
        nb.scan(lambda c, x: (c + 1.5, None), True, None, length=2)
    assert nb.while_loop(lambda c: c, lambda c: nb.logical_not(c), True).item() is False
    assert nb.while_loop(lambda c: c < 3, lambda c: c * 1.5 + 1, 1).dtype == nb.float32
    with pytest.raises(OverflowError, match="fori_loop: upper bound 2147483648"):
        nb.fori_loop(0, 2**31, lambda i, c: c + 1, 0)
    big = nb.constant(np.int64(2**31 + 1))
    with pytest.raises(OverflowError, match="fori_loop: lower bound 2147483649"):
        nb.fori_loop(big, big + 2, lambda i, c: c + 1, nb.constant(np.int32(0)))
    carry, ys = nb.scan(lambda c, x: [c + x, c], 0.0, nb.arange(3.0))
    assert carry.item() == 3.0 and ys.tolist() == [0.0, 0.0, 1.0]
    # an empty carry: nothing changes, but cond_fun's result is checked (it was never called)
    with pytest.raises(TypeError, match="cond_fun must return a boolean scalar, got 1.5"):
        nb.while_loop(lambda c: 1.5, lambda c: c, ())
    assert nb.while_loop(lambda c: False, lambda c: c, ()) == ()


@pytest.mark.parametrize("which", ["cond", "scan", "while_loop"])
def test_a_body_that_raises_leaves_captured_tensors_as_they_were(which):
    """A body that updated a tensor from outside it and then raised left the tensor bound
    to a value of the trace, unreadable for the rest of the process (the same update
    without the error is refused and undone)."""
    buf = nb.zeros((3,))

    def body(t):
        buf.add_(t.sum())
        raise KeyError("a bug later in the body")

    calls = {
        "cond": lambda: nb.cond(nb.constant(True), body, lambda t: t, nb.ones((3,))),
        "scan": lambda: nb.scan(lambda c, x: (c + body(x).sum(), c), 0.0, nb.ones((2, 3))),
        "while_loop": lambda: nb.while_loop(lambda c: c.sum() < 9, body, nb.ones((3,))),
    }
    with pytest.raises(KeyError):
        calls[which]()
    np.testing.assert_array_equal(buf.numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal((buf + 1.0).numpy(), [1.0, 1.0, 1.0])
