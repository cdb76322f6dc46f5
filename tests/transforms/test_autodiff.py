"""Autodiff: grad/vjp/jvp/jacrev/jacfwd/hessian, custom rules, checkpoint, Tensor.backward,
and compositions with vmap (JAX semantics are the reference).

Expected values are analytic or computed with NumPy; JAX is never imported.
"""

from __future__ import annotations

import collections
import functools

import numpy as np
import pytest

import nabla as nb


def f32(a):
    return np.asarray(a, dtype=np.float32)


def close(got, want, rtol=1e-5, atol=1e-5):
    got = got.numpy() if isinstance(got, nb.Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ----------------------------------------------------------------------------- nesting
def test_perturbation_confusion_grad():
    # d/dx [x * d/dy (x*y)] = d/dx x^2 = 2x
    g = nb.grad(lambda x: x * nb.grad(lambda y: x * y)(x))(3.0)
    close(g, np.float32(6.0))
    # the inner derivative is taken at y = x but must not see the outer x
    g = nb.grad(lambda x: nb.grad(lambda y: x * y * y)(x))(3.0)  # d/dx 2xy|y=x = 4x
    close(g, np.float32(12.0))


def test_perturbation_confusion_jvp():
    # d/dx [x * d/dy (x*y)] = 2x with nested jvp of closures
    out, t = nb.jvp(lambda x: x * nb.jvp(lambda y: x * y, (2.0,), (1.0,))[1], (3.0,), (1.0,))
    close(out, np.float32(9.0))
    close(t, np.float32(6.0))
    # inner primal is the outer variable: d/dx [d/dy x*y^2 |y=x] = d/dx 2x^2 = 4x
    _, t = nb.jvp(lambda x: nb.jvp(lambda y: x * y * y, (x,), (1.0,))[1], (3.0,), (1.0,))
    close(t, np.float32(12.0))
    # mixed modes
    close(nb.grad(lambda x: nb.jvp(lambda y: x * y * y, (x,), (1.0,))[1])(3.0), np.float32(12.0))
    _, t = nb.jvp(lambda x: nb.grad(lambda y: x * y * y)(x), (3.0,), (1.0,))
    close(t, np.float32(12.0))


def test_third_order_derivatives():
    x = 0.7
    close(nb.grad(nb.grad(nb.grad(nb.sin)))(x), np.float32(-np.cos(x)))
    close(nb.grad(nb.grad(nb.grad(lambda x: x**4)))(1.5), np.float32(24 * 1.5))
    y = 0.5
    e = np.exp(y * y)
    close(
        nb.grad(nb.grad(nb.grad(lambda x: nb.exp(x * x))))(y), np.float32((12 * y + 8 * y**3) * e)
    )
    # forward-over-forward-over-forward and mixed
    close(nb.jacfwd(nb.jacfwd(nb.jacfwd(nb.sin)))(x), np.float32(-np.cos(x)))
    close(nb.jacfwd(nb.grad(nb.jacfwd(lambda x: x**4)))(1.5), np.float32(36.0))


def _hess_f(x):
    return (nb.sin(x) * x.sum()).sum() + (x**3).sum()


def _hess_np(x):
    s = x.sum()
    h = np.cos(x)[None, :] + np.cos(x)[:, None]
    h = h + np.diag(-s * np.sin(x) + 6 * x)
    return h


def test_hessians(rng):
    x = f32(rng.normal(size=(4,)))
    want = _hess_np(x.astype(np.float64))
    X = nb.constant(x)
    close(nb.jacfwd(nb.jacrev(_hess_f))(X), want, rtol=1e-4, atol=1e-4)
    close(nb.jacrev(nb.jacrev(_hess_f))(X), want, rtol=1e-4, atol=1e-4)
    close(nb.jacrev(nb.jacfwd(_hess_f))(X), want, rtol=1e-4, atol=1e-4)
    close(nb.hessian(_hess_f)(X), want, rtol=1e-4, atol=1e-4)


def test_hessian_of_matrix_input(rng):
    a = f32(rng.normal(size=(2, 3)))
    # f(A) = sum(A^3) -> H[i,j,k,l] = 6 A[i,j] delta
    h = nb.hessian(lambda a: (a**3).sum())(nb.constant(a))
    want = np.zeros((2, 3, 2, 3), np.float32)
    for i in range(2):
        for j in range(3):
            want[i, j, i, j] = 6 * a[i, j]
    close(h, want, rtol=1e-5)


# ----------------------------------------------------------------------------- per-example
def _mlp_loss(params, x, y):
    h = nb.tanh(x @ params["w1"] + params["b1"])
    return ((h @ params["w2"] - y) ** 2).sum()


def _mlp_grad_np(p, x, y):
    h = np.tanh(x @ p["w1"] + p["b1"])
    r = 2 * (h @ p["w2"] - y)
    dh = (p["w2"] @ r) * (1 - h * h)
    return {"w1": np.outer(x, dh), "b1": dh, "w2": np.outer(h, r)}


def test_per_example_gradients_vmap_vs_loop(rng):
    p = {
        "w1": f32(rng.normal(size=(3, 5)) * 0.5),
        "b1": f32(rng.normal(size=(5,))),
        "w2": f32(rng.normal(size=(5, 2)) * 0.5),
    }
    xs = f32(rng.normal(size=(6, 3)))
    ys = f32(rng.normal(size=(6, 2)))
    params = {k: nb.constant(v) for k, v in p.items()}
    g = nb.vmap(nb.grad(_mlp_loss), in_axes=(None, 0, 0))(params, nb.constant(xs), nb.constant(ys))
    loop = [nb.grad(_mlp_loss)(params, nb.constant(xs[i]), nb.constant(ys[i])) for i in range(6)]
    for k in p:
        assert g[k].shape == (6,) + p[k].shape
        close(g[k], np.stack([lg[k].numpy() for lg in loop]), rtol=1e-5, atol=1e-6)
        close(g[k], np.stack([_mlp_grad_np(p, xs[i], ys[i])[k] for i in range(6)]), 1e-4, 1e-5)


# ----------------------------------------------------------------------------- indexing ops
def test_grad_through_integer_indexing(rng):
    a = f32(rng.normal(size=(3, 4)))
    g = nb.grad(lambda x: x[1].sum() * 2.0 + x[-1, 2] * x[0, 0])(nb.constant(a))
    want = np.zeros_like(a)
    want[1] += 2
    want[2, 2] += a[0, 0]
    want[0, 0] += a[2, 2]
    close(g, want)


def test_grad_gather_with_duplicates(rng):
    a = f32(rng.normal(size=(3, 4)))
    idx = nb.constant(np.array([0, 2, 2], np.int32))
    g = nb.grad(lambda x: (nb.gather(x, idx, axis=1) ** 2).sum())(nb.constant(a))
    want = np.zeros_like(a)
    for j in [0, 2, 2]:
        want[:, j] += 2 * a[:, j]
    close(g, want)


def test_grad_scatter_add_and_set(rng):
    a = f32(rng.normal(size=(3, 4)))
    u = f32(rng.normal(size=(3, 3)))
    idx = nb.constant(np.array([0, 2, 2], np.int32))

    def loss_add(x, u):
        return (nb.scatter(x, idx, u, axis=1, mode="add") ** 2).sum()

    y = a.copy()
    for k, j in enumerate([0, 2, 2]):
        y[:, j] += u[:, k]
    gx, gu = nb.grad(loss_add, argnums=(0, 1))(nb.constant(a), nb.constant(u))
    close(gx, 2 * y)
    close(gu, 2 * y[:, [0, 2, 2]])

    idx2 = nb.constant(np.array([3, 0], np.int32))
    u2 = f32(rng.normal(size=(3, 2)))

    def loss_set(x, u):
        return (nb.scatter(x, idx2, u, axis=1) ** 2).sum()

    y = a.copy()
    y[:, [3, 0]] = u2
    gx, gu = nb.grad(loss_set, argnums=(0, 1))(nb.constant(a), nb.constant(u2))
    want_x = 2 * y
    want_x[:, [3, 0]] = 0
    close(gx, want_x)
    close(gu, 2 * u2)


def test_grad_where(rng):
    a = f32(rng.normal(size=(3, 4)))
    g = nb.grad(lambda x: nb.where(x > 0, x**2, nb.sin(x)).sum())(nb.constant(a))
    close(g, np.where(a > 0, 2 * a, np.cos(a)))
    # gradient w.r.t. both branches
    b = f32(rng.normal(size=(3, 4)))
    gx, gy = nb.grad(lambda x, y: (nb.where(x > y, x, y) * 3.0).sum(), argnums=(0, 1))(
        nb.constant(a), nb.constant(b)
    )
    close(gx, 3.0 * (a > b))
    close(gy, 3.0 * (a <= b))


def test_grad_max_ties_split_evenly():
    t = f32([1.0, 3.0, 3.0, 2.0])
    close(nb.grad(lambda x: nb.max(x))(nb.constant(t)), f32([0, 0.5, 0.5, 0]))
    close(nb.grad(lambda x: nb.min(x))(nb.constant(-t)), f32([0, 0.5, 0.5, 0]))
    m = f32([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    w = nb.constant(f32([1.0, 2.0]))
    g = nb.grad(lambda x: (nb.max(x, axis=1) * w).sum())(nb.constant(m))
    close(g, f32([[0, 0.5, 0.5], [2 / 3, 2 / 3, 2 / 3]]))


def test_grad_maximum_minimum_clip_as_jax_at_ties_and_nan():
    """Ties split evenly; a NaN result gives neither operand any gradient (the second
    operand got it all), forward and reverse, as JAX's."""
    nan = float("nan")
    x = nb.constant(f32([2.0, 1.0, 1.0, 1.0, nan]))
    y = nb.constant(f32([1.0, 2.0, 1.0, nan, 1.0]))
    for op, first in ((nb.maximum, [1, 0, 0.5, 0, 0]), (nb.minimum, [0, 1, 0.5, 0, 0])):
        gx, gy = nb.grad(lambda a, b, op=op: op(a, b).sum(), argnums=(0, 1))(x, y)
        (
            close(gx, f32(first)),
            close(gy, f32([1 - v if v != 0.5 else 0.5 for v in first[:3]] + [0, 0])),
        )
        _, t = nb.jvp(op, (x, y), (nb.ones(5), nb.ones(5)))
        close(t, f32([1, 1, 1, 0, 0]))
    lo, hi = nb.constant(-1.0), nb.constant(1.0)
    grads = nb.grad(lambda v, a, b: nb.clip(v, a, b), argnums=(0, 1, 2))(nb.constant(nan), lo, hi)
    assert [float(g.item()) for g in grads] == [0.0, 0.0, 0.0]


def test_grad_at_set_and_add(rng):
    a = f32(rng.normal(size=(3, 4)))
    g = nb.grad(lambda x: (x.at[1].set(5.0) ** 2).sum())(nb.constant(a))
    want = 2 * a
    want[1] = 0
    close(g, want)

    def f(x, u):
        return (x.at[1:3, 0].add(u) ** 2).sum()

    gx, gu = nb.grad(f, argnums=(0, 1))(nb.constant(a), nb.constant(f32([1.0, -1.0])))
    y = a.copy()
    y[1:3, 0] += [1.0, -1.0]
    close(gx, 2 * y)
    close(gu, 2 * y[1:3, 0])


# ----------------------------------------------------------------------------- backward()
def test_a_square_s_two_equal_cotangents_are_one_doubled_term(rng):
    """``x * x``'s VJP gives ``x`` the doubled product once (the second operand none), the
    same bits as adding its two equal terms; both orders of a second derivative agree."""
    from nabla.ops import OPS

    x = nb.constant(f32(rng.standard_normal((4, 5))))
    ct = nb.constant(f32(rng.standard_normal((4, 5))))
    dx, dy = OPS["mul"].vjp_rule([x, x], [ct], [x * x], {})
    assert dy is None
    term = ct.numpy() * x.numpy()
    np.testing.assert_array_equal(dx.numpy(), term + term)
    g = nb.grad(lambda v: (v.square() * ct).sum())(x)
    np.testing.assert_array_equal(g.numpy(), term + term)
    h = nb.jacfwd(nb.grad(lambda v: (v * v).sum()))(nb.constant(f32([1.5, -2.0])))
    close(h, 2 * np.eye(2))


def test_a_broadcast_divisor_s_cotangent_is_summed_before_it_is_divided(rng):
    """``x / y`` with ``y`` broadcast along rows (a softmax's row sum, a norm's deviation):
    the divisor's cotangent is ``-sum(ct * out) / y``, a division of the summed values, so
    the rule makes two passes over the cotangent's shape. The values match the quotient
    rule for a broadcast, a full and a scalar divisor, batched on either side, and a
    second derivative."""
    from nabla.ops import OPS
    from nabla.runtime.graph import GRAPH

    a = f32(rng.standard_normal((6, 8)))
    rows = f32(rng.uniform(0.5, 2.0, (6, 1)))
    ct = f32(rng.standard_normal((6, 8)))
    x, y, c = nb.constant(a), nb.constant(rows), nb.constant(ct)
    with nb.backend("numpy"):
        dx, dy = OPS["div"].vjp_rule([x, y], [c], [x / y], {})
        nb.realize(dx, dy)
        program = GRAPH.programs()[-1]
    close(dx, ct / rows)
    close(dy, -(ct * a / rows**2).sum(1, keepdims=True))
    # passes over the whole shape: the forward's x / y, then ct / y and ct * out (the rule
    # as partials, ct * (1 / y) and ct * (-out / y), made four)
    whole = [ins.op for ins in program.instructions if ins.out_specs[0][1] == (6, 8)]
    assert whole == ["div", "div", "mul"], whole

    full = f32(rng.uniform(0.5, 2.0, (6, 8)))
    for div_by, summed in ((rows, (1,)), (full, ()), (f32(1.7), (0, 1))):
        gx, gy = nb.grad(lambda u, v: ((u / v) * c).sum(), argnums=(0, 1))(x, nb.constant(div_by))
        close(gx, ct / div_by)
        terms = -ct * a / div_by**2
        close(gy, terms.sum(summed, keepdims=True).reshape(div_by.shape))
    per_row = nb.vmap(nb.grad(lambda u, v: (u / v).sum(), argnums=1), in_axes=(0, None))
    close(per_row(x, nb.constant(f32(1.5))), -a.sum(1) / 1.5**2, rtol=1e-4)
    vs = f32(rng.uniform(0.5, 2.0, 6))
    per_divisor = nb.vmap(nb.grad(lambda u, v: (u / v).sum(), argnums=1), in_axes=(None, 0))
    close(per_divisor(nb.constant(a[0]), nb.constant(vs)), -a[0].sum() / vs**2, rtol=1e-4)
    d2 = nb.grad(nb.grad(lambda v: (x / v).sum()))(nb.constant(f32(2.0)))
    close(d2, 2 * a.sum() / 8.0, rtol=1e-4)


def test_assigning_into_a_parameter_keeps_it_the_leaf_backward_reaches():
    """``w[i] = v`` on a ``requires_grad`` leaf (a parameter) changes its value and keeps it
    that leaf, with its ``.grad``, as under PyTorch's ``no_grad``: ``backward`` had skipped
    it (``.grad`` None) and a manual SGD step ``w[...] = w.detach() - lr * w.grad`` had
    turned ``requires_grad`` off. Eager and compiled alike."""
    for compiled in (False, True):
        lin = nb.nn.Linear(2, 1, key=nb.random.key(0))
        f = nb.compile(lin) if compiled else lin
        x = nb.constant(f32([[1.0, 2.0]]))
        lin.weight[0] = nb.constant(f32([5.0]))
        assert lin.weight.requires_grad
        f(x).sum().backward()
        close(lin.weight.grad, f32([[1.0], [2.0]]))
        close(lin.weight, f32([[5.0], [lin.weight.numpy()[1, 0]]]))
        for _ in range(2):  # manual SGD: the parameter stays a leaf with its gradient
            lin.weight[...] = lin.weight.detach() - 0.5 * lin.weight.grad
            assert lin.weight.requires_grad and lin.weight.grad is not None
            lin.weight.grad = None
            f(x).sum().backward()
            close(lin.weight.grad, f32([[1.0], [2.0]]))


def test_a_parameter_updated_in_place_keeps_one_gradient_for_graphs_before_and_after():
    """As PyTorch: a graph built before ``w[0] = v`` (under ``no_grad``) and one built after
    both reach the same ``w.grad`` (the earlier one's part was dropped); the SGD idiom
    ``with no_grad(): w -= lr * w.grad`` keeps ``w`` the leaf (``-=`` had rebound it to a
    new tensor that no longer required grad), while ``x += 1`` on any other tensor gives a
    new value, as JAX; and ``backward()`` of a one-element (1,) output needs no gradient."""
    w = nb.constant(f32([1.0, 2.0, 3.0]))
    w.requires_grad = True
    y = (w * 3.0).sum()
    with nb.no_grad():
        w[0] = 10.0
    z = (w * w).sum()
    (y + z).backward()
    close(w.grad, f32([23.0, 7.0, 9.0]))

    p = nb.constant(f32([1.0, 2.0]))
    p.requires_grad = True
    same = p
    for _ in range(2):
        p.grad = None
        (p * p).sum().backward()
        g = p.grad.numpy()
        with nb.no_grad():
            p -= 0.25 * p.grad
        assert p is same and p.requires_grad
    close(p, g / 2 * 0.5)  # p <- p - 0.25 * 2p = p / 2, twice: [0.25, 0.5]
    with pytest.raises(ValueError, match=r"-=: the in-place result float32\[2, 2\]"):
        p -= nb.ones((2, 2))

    x = nb.constant(f32([1.0, 2.0]))
    alias = x
    x += 1.0
    close(x, f32([2.0, 3.0]))
    close(alias, f32([1.0, 2.0]))

    q = nb.constant(f32([2.0]))
    q.requires_grad = True
    (q * q).backward()
    close(q.grad, f32([4.0]))


def test_a_compiled_function_writes_back_captured_state_it_assigns_into():
    """``w[0] = v`` on a captured tensor inside a compiled function updates ``w`` at each
    call, as the function does uncompiled (the trace's write was dropped: ``w`` kept its
    first value); an argument assigned into is not written back (warned at the trace)."""
    w = nb.constant(f32([1.0, 2.0]))

    def f(x):
        w[0] = x.sum()
        return w * 1.0

    c = nb.compile(f)
    for k in range(3):
        close(c(nb.constant(f32([k, 1.0]))), f32([k + 1.0, 2.0]))
        close(w, f32([k + 1.0, 2.0]))


def test_backward_accumulates_and_resets():
    x = nb.constant(f32([1.0, 2.0, 3.0]))
    x.requires_grad = True
    (x * x).sum().backward()
    close(x.grad, f32([2, 4, 6]))
    (x * x).sum().backward()
    close(x.grad, f32([4, 8, 12]))
    x.grad = None
    assert x.grad is None
    (nb.sin(x).sum() * 2.0).backward()
    close(x.grad, 2 * np.cos(f32([1, 2, 3])))


def test_backward_finds_leaves_through_graph_and_detach():
    a = nb.constant(f32([1.0, 2.0]))
    c = nb.constant(f32([3.0, 4.0]))
    a.requires_grad = True
    c.requires_grad = True
    b = a * 2.0  # intermediate
    (b * b * c).sum().backward()
    close(a.grad, 8 * f32([1, 2]) * f32([3, 4]))
    close(c.grad, 4 * f32([1, 2]) ** 2)
    assert b.grad is None
    # detach stops the gradient through a
    a.grad = None
    c.grad = None
    (a.detach() * c + a).sum().backward()
    close(a.grad, f32([1, 1]))
    close(c.grad, f32([1, 2]))
    assert not a.detach().requires_grad


def test_retain_grad_hooks_and_backward_inputs_as_pytorch():
    """PyTorch's ``retain_grad``, ``register_hook`` and ``backward(inputs=...)``."""
    x = nb.constant(f32([1.0, 2.0, 3.0]), requires_grad=True)
    y = x * 2.0
    y.retain_grad()
    z = (y**2).sum()
    z.retain_grad()
    z.backward()
    close(x.grad, 8 * f32([1, 2, 3]))
    close(y.grad, 4 * f32([1, 2, 3]))
    close(z.grad, 1.0)
    assert y.retains_grad and not y.is_leaf
    (y**2).sum().backward()  # a second backward accumulates, as into a leaf's
    close(y.grad, 8 * f32([1, 2, 3]))
    x.grad = None
    handle = x.register_hook(lambda g: g * 10.0)  # a leaf's: before .grad accumulates it
    (x * x).sum().backward()
    close(x.grad, 20 * f32([1, 2, 3]))
    handle.remove()
    handle.remove()  # (a second remove does nothing)
    x.grad = None
    (x * x).sum().backward()
    close(x.grad, 2 * f32([1, 2, 3]))
    x.grad = None
    seen = []
    y = x * 3.0
    y.register_hook(seen.append)  # None: observes
    y.register_hook(lambda g: nb.ones_like(g))  # replaces what flows on to x
    (y * y).sum().backward()
    close(seen[0], 6 * f32([1, 2, 3]))
    close(x.grad, f32([3, 3, 3]))
    w = nb.constant(f32([1.0, 1.0, 1.0]), requires_grad=True)
    x.grad = None
    y = x * w
    (y * y).sum().backward(inputs=[w])  # only w's .grad
    assert x.grad is None
    close(w.grad, 2 * f32([1, 4, 9]))
    y = x * w
    ((y * 2.0) ** 2).sum().backward(inputs=y)  # a computed tensor: its gradient alone
    close(y.grad, 8 * f32([1, 2, 3]))
    close(w.grad, 2 * f32([1, 4, 9]))  # unchanged
    x.grad = None  # an input the output does not depend on gets no gradient, as PyTorch
    (x * 2.0).sum().backward(inputs=[x, w])
    close(x.grad, f32([2, 2, 2]))
    close(w.grad, 2 * f32([1, 4, 9]))  # unchanged
    with pytest.raises(RuntimeError, match=r"input of shape \(2,\) does not require grad"):
        (x * 2.0).sum().backward(inputs=[nb.ones((2,))])
    with pytest.raises(RuntimeError, match="register_hook: .* does not require grad"):
        nb.ones((2,)).register_hook(print)
    with pytest.raises(RuntimeError, match="returned int 3 for a gradient of shape"):
        v = x * 1.0
        v.register_hook(lambda g: 3)
        v.sum().backward()
    with pytest.raises(RuntimeError, match="returned a float64 tensor .* dtype float32"):
        v = x * 1.0
        v.register_hook(lambda g: g.cast(nb.float64))  # (PyTorch refuses another dtype)
        v.sum().backward()
    p = nb.constant(f32([2.0]), requires_grad=True)
    p.register_hook(lambda g: g * 0.5)
    with nb.no_grad():
        p.mul_(3.0)  # (an optimizer's update): the hook stays with the parameter
    (p * p).sum().backward()
    close(p.grad, f32([6.0]))


def test_hooks_follow_pytorch_through_in_place_updates_compile_and_checkpoint():
    x = nb.constant(f32([1.0, 2.0, 3.0]), requires_grad=True)
    seen = []
    y = x * 2.0
    y.register_hook(lambda g: (seen.append(g), g * 10.0)[1])  # on this version of y
    y.mul_(3.0)
    (y * y).sum().backward()
    assert len(seen) == 1  # once (it had run on both versions: 10x too much)
    close(seen[0], 36 * f32([1, 2, 3]))
    close(x.grad, 720 * f32([1, 2, 3]))
    assert not seen[0].requires_grad  # no history without create_graph
    w = nb.constant(f32([1.0]), requires_grad=True)
    calls = []
    w.register_hook(lambda g: (calls.append(g.item()), nb.minimum(g, 1.0))[1])
    a = (w * 2.0).sum()
    with nb.no_grad():
        w.add_(1.0)  # an optimizer's update: a leaf's hook sees the total over versions
    ((w * 3.0).sum() + a).backward()
    assert calls == [5.0]
    close(w.grad, f32([1.0]))
    x.grad = None
    v = x * w
    v.retain_grad()
    (v * v).sum().backward(inputs=[w, w])  # named twice: one gradient; v is kept too
    close(v.grad, 2 * 2 * f32([1, 2, 3]))
    assert x.grad is None
    close(w.grad, f32([2.0]))  # 1 + the clipping hook's 1 (56 before it)

    @nb.compile
    def hooked(a):  # a hook inside a compiled function: it runs eagerly (a replay lost it)
        h = a * a
        h.register_hook(lambda g: g * 5.0)
        return h.sum()

    for _ in range(3):
        x.grad = None
        hooked(x).backward()
        close(x.grad, 10 * f32([1, 2, 3]))

    @nb.compile
    def step(p, q):
        loss = (p * q).sum()
        loss.backward(inputs=[p])  # p is the caller's tensor, on the tracing call too
        return loss

    for _ in range(2):
        w2 = nb.constant(f32([0.5, 0.6, 0.7]), requires_grad=True)
        step(w2, x)
        close(w2.grad, f32([1, 2, 3]))
    with pytest.raises(RuntimeError, match="register_hook inside a scan"):

        def body(c, xi):
            c.register_hook(print)
            return c * xi, c

        nb.scan(body, x.sum(), x)
    ck = []

    def inner(p, q):  # the checkpoint's re-run registers it: called once
        h = nb.sin(p * q)
        h.register_hook(lambda g: (ck.append(1), g * 5.0)[1])
        return h * q

    w3 = nb.constant(f32([0.5, 0.6, 0.7]), requires_grad=True)
    (nb.checkpoint(inner)(w3, x) ** 2).sum().backward()
    xs, ws = f32([1, 2, 3]), f32([0.5, 0.6, 0.7])
    h = np.sin(ws * xs)
    close(w3.grad, 5 * 2 * h * xs * np.cos(ws * xs) * xs * xs, rtol=1e-5)
    assert ck == [1]


def test_detach_of_a_realized_value_is_a_plain_handle_on_its_buffer():
    """A realized leaf detaches without an op: same values, no requires_grad, no history;
    a gradient does not flow through it, and inside a trace detach stays an op."""
    a = nb.constant(f32([1.0, 2.0]))
    a.requires_grad = True
    d = a.detach()
    assert not d.requires_grad and d._impl is not a._impl and d._impl.node is None
    np.testing.assert_array_equal(d.numpy(), f32([1.0, 2.0]))
    (a * d).sum().backward()
    close(a.grad, f32([1.0, 2.0]))
    g = nb.grad(lambda x: (x * x.detach()).sum())(nb.constant(f32([3.0, 4.0])))
    close(g, f32([3.0, 4.0]))
    c = nb.compile(lambda x: (x * x.detach()).sum())
    close(nb.grad(c)(nb.constant(f32([3.0, 4.0]))), f32([3.0, 4.0]))


def test_nonleaf_requires_grad_like_pytorch():
    a = nb.constant(f32([1.0, 2.0]))
    a.requires_grad = True
    assert (a * 2.0).requires_grad


def test_requires_grad_of_a_computed_tensor_is_not_changed_silently():
    """As PyTorch: marking a value computed from a leaf had made it a leaf of its own, so
    ``backward`` stopped there and the real leaf got no gradient."""
    x = nb.constant(f32([1.0, 2.0]), requires_grad=True)
    y = x * 2.0
    for value in (True, False):
        with pytest.raises(RuntimeError, match=r"leaf.*shape \(2,\).*detach"):
            y.requires_grad = value
    assert y.requires_grad_() is y  # already requires grad: nothing to change
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)
    (y * y).sum().backward()
    close(x.grad, f32([8.0, 16.0]))


def test_no_grad():
    a = nb.constant(f32([1.0, 2.0]))
    a.requires_grad = True
    with nb.no_grad():
        d = a * 3.0
        loss = (a * a).sum()
    assert not d.requires_grad
    with pytest.raises(RuntimeError):
        loss.backward()
    # d is a constant for later differentiation
    (d * a).sum().backward()
    close(a.grad, 3 * f32([1, 2]))


def test_transforms_begun_under_no_grad_differentiate_as_torch_func():
    """``no_grad`` cuts ``Tensor.backward``'s history and that of transforms begun before
    it; a ``grad`` begun inside differentiates (``torch.func.grad`` under ``no_grad``). It
    had returned zeros, and a compiled gradient traced there kept them."""
    x = nb.constant(f32([1.0, 2.0]))
    cube = lambda t: (t**3).sum()  # noqa: E731
    with nb.no_grad():
        close(nb.grad(cube)(x), f32([3.0, 12.0]))
        close(nb.value_and_grad(cube)(x)[1], f32([3.0, 12.0]))
        close(nb.vjp(lambda t: t**3, x)[1](nb.ones_like(x))[0], f32([3.0, 12.0]))
        close(nb.jacrev(lambda t: t**3)(x), np.diag(f32([3.0, 12.0])))
        assert not nb.is_grad_enabled()
        with nb.enable_grad():
            assert nb.is_grad_enabled()
    g = nb.compile(nb.grad(lambda t: (t**2).sum()))
    with nb.no_grad():
        close(g(x), f32([2.0, 4.0]))
    close(g(x), f32([2.0, 4.0]))

    # no_grad inside a differentiated function: its values are constants there
    def f(t):
        with nb.no_grad():
            c = t * t
        return (c * t).sum()

    close(nb.grad(f)(x), f32([1.0, 4.0]))
    # set_grad_enabled: at once as a call, for the block in a with; no_grad as a decorator
    a = nb.constant(f32([1.0, 2.0]), requires_grad=True)
    nb.set_grad_enabled(False)
    try:
        assert not (a * 2.0).requires_grad
    finally:
        nb.set_grad_enabled(True)
    with nb.set_grad_enabled(False):
        assert not (a * 2.0).requires_grad
    assert (a * 2.0).requires_grad

    @nb.no_grad()
    def evaluate(t, depth):
        return evaluate(t, depth - 1) if depth else t * 2.0

    assert not evaluate(a, 2).requires_grad and nb.is_grad_enabled()
    # a compiled training step first called under no_grad still trains
    m = nb.nn.Linear(2, 1)
    opt = nb.nn.optim.SGD(m, lr=0.1)
    step = opt.compile_step(lambda mm, u, v: ((mm(u) - v) ** 2).mean())
    u, v = nb.constant(f32([[1.0, 2.0]])), nb.constant(f32([[1.0]]))
    before = m.weight.numpy().copy()
    with nb.no_grad():
        step(u, v)
    assert not np.allclose(m.weight.numpy(), before)


# ----------------------------------------------------------------------------- API
def test_grad_argnums_int_tuple_and_kwargs():
    def f(a, b, c=1.0):
        return a * b * c + a

    close(nb.grad(f)(2.0, 3.0, c=4.0), np.float32(13.0))
    close(nb.grad(f, argnums=1)(2.0, 3.0, c=4.0), np.float32(8.0))
    close(nb.grad(f, argnums=-1)(2.0, 3.0), np.float32(2.0))
    ga, gb = nb.grad(f, argnums=(0, 1))(2.0, 3.0, c=4.0)
    close(ga, np.float32(13.0))
    close(gb, np.float32(8.0))
    (ga,) = nb.grad(f, argnums=(0,))(2.0, 3.0)
    close(ga, np.float32(4.0))


def test_value_and_grad_and_has_aux():
    v, g = nb.value_and_grad(lambda x: x**3)(2.0)
    close(v, np.float32(8.0))
    close(g, np.float32(12.0))
    (v, aux), g = nb.value_and_grad(lambda a, b: (a * b, {"a": a}), argnums=1, has_aux=True)(
        2.0, 3.0
    )
    close(v, np.float32(6.0))
    close(g, np.float32(2.0))
    close(aux["a"], np.float32(2.0))
    g, aux = nb.grad(lambda x: ((x * x).sum(), x * 2), has_aux=True)(nb.constant(f32([1, 2])))
    close(g, f32([2, 4]))
    close(aux, f32([2, 4]))


Point = collections.namedtuple("Point", "a b")


def test_grad_pytree_arguments():
    g = nb.grad(lambda p: (p.a * p.b).sum())(Point(nb.constant(2.0), nb.constant(3.0)))
    assert isinstance(g, Point)
    close(g.a, np.float32(3.0))
    close(g.b, np.float32(2.0))
    g = nb.grad(lambda d: d["u"] ** 2 + d["v"][0] * d["v"][1])({"u": 1.0, "v": [2.0, 3.0]})
    assert set(g) == {"u", "v"} and isinstance(g["v"], list)
    close(g["u"], np.float32(2.0))
    close(g["v"][0], np.float32(3.0))
    close(g["v"][1], np.float32(2.0))
    g = nb.grad(lambda t: t[0] * t[1][0])((nb.constant(2.0), (nb.constant(5.0),)))
    assert isinstance(g, tuple) and isinstance(g[1], tuple)
    close(g[0], np.float32(5.0))
    close(g[1][0], np.float32(2.0))


def test_grad_errors():
    with pytest.raises(TypeError, match="scalar"):
        nb.grad(lambda x: x * 2.0)(nb.ones((3,)))
    with pytest.raises(TypeError, match="float"):
        nb.grad(lambda x: x * 2)(nb.constant(3))
    with pytest.raises(TypeError, match="float"):
        nb.grad(lambda x: x * 2)(3)


def test_vjp_returns_pullback_tuple():
    out, pb = nb.vjp(lambda a, b: a * b, 2.0, 3.0)
    close(out, np.float32(6.0))
    cts = pb(nb.constant(1.0))
    assert isinstance(cts, tuple) and len(cts) == 2
    close(cts[0], np.float32(3.0))
    close(cts[1], np.float32(2.0))
    (ct,) = nb.vjp(nb.sin, nb.constant(f32([0.0, 1.0])))[1](nb.constant(f32([2.0, 3.0])))
    close(ct, f32([2.0, 3 * np.cos(1.0)]))
    # pytree outputs and has_aux
    out, pb, aux = nb.vjp(
        lambda x: ({"s": x.sum(), "t": x * 3.0}, x[0]), nb.ones((2,)), has_aux=True
    )
    (g,) = pb({"s": nb.constant(2.0), "t": nb.constant(f32([1.0, -1.0]))})
    close(g, f32([5.0, -1.0]))
    close(aux, np.float32(1.0))


def test_jvp_with_has_aux_and_pytrees():
    out, t, aux = nb.jvp(lambda a: (a * a, a + 1.0), (3.0,), (1.0,), has_aux=True)
    close(out, np.float32(9.0))
    close(t, np.float32(6.0))
    close(aux, np.float32(4.0))
    out, t = nb.jvp(
        lambda d: d["x"] * d["y"],
        ({"x": nb.constant(f32([1, 2])), "y": nb.constant(f32([3, 4]))},),
        ({"x": nb.ones((2,)), "y": nb.zeros((2,))},),
    )
    close(out, f32([3, 8]))
    close(t, f32([3, 4]))
    # an output that does not depend on the input gets a zero tangent
    (_, c), (_, tc) = nb.jvp(lambda x: (x * 2.0, nb.ones((2,))), (nb.ones((3,)),), (nb.ones((3,)),))
    close(tc, np.zeros(2))


def test_jvp_aux_has_no_tangent():
    _, _, aux = nb.jvp(lambda a: (a * a, a + 1.0), (3.0,), (1.0,), has_aux=True)
    assert "has_tangent" not in repr(aux)


def test_jacfwd_integer_input_errors():
    with pytest.raises(TypeError, match="float"):
        nb.jacfwd(lambda x: x * 2)(nb.constant([3, 4]))


def test_jacrev_integer_input_errors():
    with pytest.raises(TypeError, match="float"):
        nb.jacrev(lambda x: x * 2)(nb.constant([3, 4]))


def test_jacrev_integer_output_errors():
    with pytest.raises(TypeError):
        nb.jacrev(lambda x: nb.argmax(x))(nb.constant(f32([3.0, 4.0])))


def test_jacobian_layout_argnums_and_pytree_outputs(rng):
    a = f32(rng.normal(size=(2,)))
    b = f32(rng.normal(size=(3, 1)))

    def f(x, y):
        return {"p": x * y, "q": x.sum()}  # p: (3, 2)

    for jac in (nb.jacrev, nb.jacfwd):
        J = jac(f, argnums=(0, 1))(nb.constant(a), nb.constant(b))
        assert set(J) == {"p", "q"} and isinstance(J["p"], tuple)
        assert J["p"][0].shape == (3, 2, 2)
        assert J["p"][1].shape == (3, 2, 3, 1)
        assert J["q"][0].shape == (2,)
        assert J["q"][1].shape == (3, 1)
        want_p0 = np.einsum("ij,jk->ijk", np.broadcast_to(b, (3, 2)), np.eye(2))
        want_p1 = np.zeros((3, 2, 3, 1), np.float32)
        for i in range(3):
            for j in range(2):
                want_p1[i, j, i, 0] = a[j]
        close(J["p"][0], want_p0)
        close(J["p"][1], want_p1)
        close(J["q"][0], np.ones(2))
        close(J["q"][1], np.zeros((3, 1)))
        # default argnums=0, single (not tuple) result
        J0 = jac(f)(nb.constant(a), nb.constant(b))
        close(J0["p"], want_p0)


def test_jacrev_and_hessian_nonzero_int_argnums():
    def f(a, b):
        return (a * b * b).sum()

    a, b = nb.constant(np.float32(2.0)), nb.constant(f32([3.0, 4.0]))
    close(nb.jacfwd(f, argnums=1)(a, b), 2 * 2.0 * f32([3.0, 4.0]))
    close(nb.jacrev(f, argnums=1)(a, b), 2 * 2.0 * f32([3.0, 4.0]))
    (g,) = nb.jacrev(f, argnums=(1,))(a, b)
    close(g, 2 * 2.0 * f32([3.0, 4.0]))
    close(nb.hessian(f, argnums=1)(a, b), 2 * 2.0 * np.eye(2))


def test_jacobian_matrix_functions(rng):
    A = f32(rng.normal(size=(3, 4)))
    v = f32(rng.normal(size=(4,)))
    z = A @ v
    want_v = (1 - np.tanh(z) ** 2)[:, None] * A
    want_A = np.einsum("i,ik,l->ikl", 1 - np.tanh(z) ** 2, np.eye(3), v)
    for jac in (nb.jacrev, nb.jacfwd):
        jv, jA = jac(lambda v, A: nb.tanh(A @ v), argnums=(0, 1))(nb.constant(v), nb.constant(A))
        close(jv, want_v, rtol=1e-4, atol=1e-5)
        close(jA, want_A, rtol=1e-4, atol=1e-5)


def test_jacobian_has_aux():
    v = nb.constant(f32([0.1, 0.2, 0.3]))
    for jac in (nb.jacrev, nb.jacfwd):
        J, aux = jac(lambda x: (nb.sin(x), x.sum()), has_aux=True)(v)
        close(J, np.diag(np.cos(f32([0.1, 0.2, 0.3]))))
        close(aux, np.float32(0.6), rtol=1e-6)
    # Python values in the aux come back as they are, as JAX's (jacfwd's went through its
    # basis vmap and came back as tensors)
    for jac in (nb.jacrev, nb.jacfwd, nb.hessian):
        _, aux = jac(lambda x: (nb.sum(x**3), {"n": 2, "s": 1.5, "t": x.sum()}), has_aux=True)(v)
        assert aux["n"] == 2 and type(aux["n"]) is int and type(aux["s"]) is float
        close(aux["t"], np.float32(0.6), rtol=1e-6)


def test_stop_gradient():
    g = nb.grad(lambda x: (nb.stop_gradient(x) * x).sum())(nb.constant(f32([1.0, 2.0])))
    close(g, f32([1, 2]))
    g = nb.grad(lambda x: nb.stop_gradient(x * x) + x)(3.0)
    close(g, np.float32(1.0))
    _, t = nb.jvp(lambda x: nb.stop_gradient(x) * x, (3.0,), (1.0,))
    close(t, np.float32(3.0))


# ----------------------------------------------------------------------------- custom rules
def test_custom_vjp_bwd_is_used():
    calls = {"fwd": 0, "bwd": 0}

    @nb.custom_vjp
    def f(x):
        return nb.sin(x)

    def fwd(x):
        calls["fwd"] += 1
        return nb.sin(x), nb.cos(x)

    def bwd(res, g):
        calls["bwd"] += 1
        return (g * res * 10.0,)  # deliberately not the true derivative

    f.defvjp(fwd, bwd)
    close(f(nb.constant(0.5)), np.float32(np.sin(0.5)))
    assert calls == {"fwd": 0, "bwd": 0}  # no differentiation: plain call
    close(nb.grad(f)(0.5), np.float32(10 * np.cos(0.5)))
    assert calls == {"fwd": 1, "bwd": 1}
    close(nb.grad(lambda x: f(x) * x)(0.5), np.float32(np.sin(0.5) + 10 * np.cos(0.5) * 0.5))
    close(nb.vmap(nb.grad(f))(nb.constant(f32([0.1, 0.2]))), 10 * np.cos(f32([0.1, 0.2])))
    with pytest.raises(TypeError, match="custom_jvp"):
        nb.jvp(f, (0.5,), (1.0,))


def test_custom_vjp_multiple_args_and_residual_pytree():
    @nb.custom_vjp
    def f(x, y):
        return x * y

    def fwd(x, y):
        return x * y, {"x": x, "y": y}

    def bwd(res, g):
        return (g * res["y"] * 2.0, g * res["x"] * 3.0)

    f.defvjp(fwd, bwd)
    gx, gy = nb.grad(f, argnums=(0, 1))(2.0, 5.0)
    close(gx, np.float32(10.0))
    close(gy, np.float32(6.0))


def test_custom_vjp_second_order(rng):
    @nb.custom_vjp
    def f(x):
        return x * nb.sin(x)

    f.defvjp(
        lambda x: (x * nb.sin(x), x),
        lambda x, g: (g * (nb.sin(x) + x * nb.cos(x)),),
    )
    u = f32(rng.normal(size=(4,)))
    # d/du sum(sin u + u cos u) = 2 cos u - u sin u
    g2 = nb.grad(lambda w: nb.grad(lambda v: f(v).sum())(w).sum())(nb.constant(u))
    close(g2, 2 * np.cos(u) - u * np.sin(u), rtol=1e-5)


def test_custom_vjp_under_forward_over_reverse_is_jax_s(rng):
    """``hessian`` (``jacfwd`` of ``jacrev``), ``jvp`` of ``grad`` and their vmapped and
    compiled forms differentiate a custom_vjp function as JAX does: the reverse level takes
    the rule, and the forward level differentiates ``fwd`` and ``bwd`` as ordinary code.
    Forward mode straight on the function is JAX's error, also under an outer grad."""

    @nb.custom_vjp
    def f(a, b):
        return nb.sin(a) * b

    f.defvjp(
        lambda a, b: (nb.sin(a) * b, (a, b)),
        lambda r, g: (g * nb.cos(r[0]) * r[1], g * nb.sin(r[0])),
    )
    x, y = rng.normal(size=3), rng.normal(size=3)

    def loss(a, b):
        return nb.sum(f(a, b) * a * b)

    # d2/da2 of sum(sin(a) a b^2) = b^2 (2 cos a - a sin a); d2/dadb = 2 b (sin a + a cos a)
    h_aa = np.diag(y**2 * (2 * np.cos(x) - x * np.sin(x)))
    h_ab = np.diag(2 * y * (np.sin(x) + x * np.cos(x)))
    got = nb.hessian(loss, argnums=(0, 1))(x, y)
    close(got[0][0], h_aa, rtol=1e-10)
    close(got[0][1], h_ab, rtol=1e-10)
    close(nb.compile(nb.hessian(loss))(x, y), h_aa, rtol=1e-10)
    close(nb.jvp(nb.grad(loss), (x, y), (y, x))[1], h_aa @ y + h_ab @ x, rtol=1e-10)
    stacked = nb.vmap(nb.hessian(loss))(np.stack([x, y]), np.stack([y, x]))
    close(stacked[1], np.diag(x**2 * (2 * np.cos(y) - y * np.sin(y))), rtol=1e-10)
    for straight in (
        lambda: nb.jvp(f, (x, y), (y, x)),
        lambda: nb.jacfwd(lambda a: f(a, y))(x),
        lambda: nb.grad(lambda a: nb.jvp(f, (a, y), (y, x))[1].sum())(x),
    ):
        with pytest.raises(TypeError, match="forward-mode differentiation on custom_vjp"):
            straight()


def test_custom_jvp_forward_and_derived_reverse():
    calls = {"jvp": 0}

    @nb.custom_jvp
    def g(x):
        return nb.log1p(nb.exp(x))

    @g.defjvp
    def g_jvp(primals, tangents):
        calls["jvp"] += 1
        (x,), (t,) = primals, tangents
        return g(x), t * nb.sigmoid(x) * 3.0  # deliberately scaled

    sig = 1 / (1 + np.exp(-0.5))
    out, t = nb.jvp(g, (0.5,), (1.0,))
    close(out, np.float32(np.log1p(np.exp(0.5))))
    close(t, np.float32(3 * sig))
    assert calls["jvp"] == 1
    close(nb.grad(g)(0.5), np.float32(3 * sig))  # reverse mode transposes the rule
    assert calls["jvp"] == 2
    close(nb.grad(nb.grad(g))(0.5), np.float32(3 * sig * (1 - sig)), rtol=1e-5)
    close(nb.vmap(nb.grad(g))(nb.constant(f32([0.5, 1.0]))), 3 / (1 + np.exp(-f32([0.5, 1.0]))))


def test_custom_jvp_rule_not_linear_in_its_tangents_is_an_error_in_reverse_mode():
    """Reverse mode transposes the rule at zero tangents: a rule whose tangent is not
    linear in the tangents (``cos(x) * t * t``) has no transpose, and pulling it back at
    zero would give 0. JAX fails on it too; forward mode runs the rule as written. A
    linear rule whose factors depend on the primals (a where on x, a stop_gradient)
    still differentiates, to second order."""

    @nb.custom_jvp
    def f(x):
        return nb.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return nb.sin(x), nb.cos(x) * t * t

    _, t = nb.jvp(f, (nb.constant(1.0),), (nb.constant(2.0),))
    close(t, np.float32(4 * np.cos(1.0)))
    with pytest.raises(TypeError, match="custom_jvp rule of f is not linear in its tangents"):
        nb.grad(f)(nb.constant(1.0))
    with pytest.raises(TypeError, match="not linear"):
        nb.vjp(f, nb.constant([1.0, 2.0]))[1](nb.ones((2,)))

    @nb.custom_jvp
    def g(x, y):
        return nb.sin(x) * y

    @g.defjvp
    def g_jvp(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        gate = nb.where(x > 0, nb.cos(x) * y * tx, 0.0)
        return g(x, y), gate + nb.sin(x) * ty / 2 - nb.stop_gradient(x) * ty

    gx, gy = nb.grad(g, argnums=(0, 1))(nb.constant(1.0), nb.constant(2.0))
    close(gx, np.float32(2 * np.cos(1.0)), rtol=1e-6)
    close(gy, np.float32(np.sin(1.0) / 2 - 1.0), rtol=1e-6)
    second = nb.grad(lambda x: nb.grad(g)(x, nb.constant(2.0)))(nb.constant(1.0))
    close(second, np.float32(-2 * np.sin(1.0)), rtol=1e-5)


def test_numpy_outputs_are_constants_and_custom_rules_are_checked_as_jax():
    """As JAX: a NumPy array or scalar a differentiated function returns is a constant
    (zero tangent, zero Jacobian, zero gradient; it was None, or a TypeError); JAX's
    ``float0`` tangent of an integer primal counts as none; a custom_jvp rule's primal and
    tangent outputs must share a structure, ``defjvps`` refuses ``nondiff_argnums``, and a
    custom_vjp cotangent for a Python-number argument must be a scalar."""
    x = nb.constant(f32([1.0, 2.0]))
    c = f32([5.0, 6.0])

    def f(a):
        return a * 2, c

    np.testing.assert_array_equal(nb.jacfwd(f)(x)[1].numpy(), np.zeros((2, 2)))
    np.testing.assert_array_equal(nb.jacrev(f)(x)[1].numpy(), np.zeros((2, 2)))
    np.testing.assert_array_equal(nb.jvp(f, (x,), (x,))[1][1].numpy(), np.zeros(2))
    for const in (np.float32(3.0), np.array(3.0, np.float32)):
        np.testing.assert_array_equal(nb.grad(lambda a, k=const: k)(x).numpy(), np.zeros(2))
    float0 = np.zeros((), np.dtype([("float0", np.void, 0)]))
    k = nb.constant(np.int32(3))
    _, t = nb.jvp(lambda a, n: a * n, (x, k), (x, float0))
    np.testing.assert_array_equal(t.numpy(), [3.0, 6.0])
    with pytest.raises(TypeError, match="float0 tangent is for integer and bool primals"):
        nb.jvp(lambda a: a, (x,), (np.zeros((2,), float0.dtype),))

    @nb.custom_jvp
    def g(a):
        return a * 2

    @g.defjvp
    def g_jvp(p, t):
        return (p[0] * 2, p[0]), t[0] * 2

    with pytest.raises(TypeError, match="primal and tangent outputs of the same structure"):
        nb.jvp(g, (x,), (x,))

    h = functools.partial(nb.custom_jvp, nondiff_argnums=(0,))(lambda n, a: nb.sin(a) * n)
    with pytest.raises(TypeError, match="defjvps cannot be used with nondiff_argnums"):
        h.defjvps(lambda t, ans, n, a: nb.cos(a) * n * t)

    @nb.custom_vjp
    def scaled(a, s):
        return a * s

    scaled.defvjp(lambda a, s: (a * s, (a, s)), lambda r, ct: (ct * r[1], ct * r[0]))
    with pytest.raises(ValueError, match=r"cotangent of shape \(2,\) for the Python number 3.0"):
        nb.grad(lambda a: scaled(a, 3.0).sum())(x)


def test_checkpoint_same_values_and_grads_and_reruns():
    n = [0]

    def h(x):
        n[0] += 1
        return nb.sin(nb.cos(x)) * x

    hc = nb.checkpoint(h)
    x = nb.constant(f32([0.3, 0.7]))
    xn = f32([0.3, 0.7])
    want = np.sin(np.cos(xn)) * xn
    want_g = np.cos(np.cos(xn)) * -np.sin(xn) * xn + np.sin(np.cos(xn))
    close(hc(x), want)
    n[0] = 0
    close(nb.grad(lambda x: hc(x).sum())(x), want_g, rtol=1e-5)
    assert n[0] == 2  # forward + re-run during backward
    n[0] = 0
    close(nb.grad(lambda x: h(x).sum())(x), want_g, rtol=1e-5)
    assert n[0] == 1
    _, t1 = nb.jvp(hc, (x,), (nb.ones((2,)),))
    close(t1, want_g, rtol=1e-5)
    close(nb.hessian(lambda x: hc(x).sum())(x), nb.hessian(lambda x: h(x).sum())(x).numpy())
    assert nb.remat is nb.checkpoint


def test_checkpoint_of_a_function_closing_over_differentiated_values():
    """Its re-run saw only its arguments: a closed-over value's part of the derivative was
    dropped (a layer closing over its weights), or was 0 inside a loop body or a compiled
    function. Such a function now runs without rematerialization, as JAX's values say."""
    c = nb.constant
    close(nb.grad(lambda w: nb.checkpoint(lambda x: x * w)(w))(c(3.0)), 6.0)
    close(nb.jvp(lambda w: nb.checkpoint(lambda x: x * w)(w), (c(3.0),), (c(1.0),))[1], 6.0)

    def through_scan(w):
        step = lambda k, _: (nb.checkpoint(lambda k: k * w)(k), None)  # noqa: E731
        return nb.scan(step, c(1.0), None, length=3)[0]

    close(nb.grad(through_scan)(c(2.0)), 12.0)
    close(nb.grad(nb.compile(lambda w: nb.checkpoint(lambda v: v * w)(c(2.0))))(c(3.0)), 2.0)
    f = lambda w: nb.fori_loop(0, 3, lambda i, k: nb.checkpoint(lambda k: k * w)(k), c(1.0))  # noqa: E731
    close(nb.jacfwd(f)(c(2.0)), 12.0)
    lin = nb.nn.Linear(3, 3)
    x = c(f32([[0.1, 0.2, 0.3]]))
    (nb.checkpoint(lambda h: nb.tanh(lin(h)))(x) ** 2).sum().backward()
    want = lin.weight.grad.numpy().copy()
    lin.zero_grad()
    (nb.tanh(lin(x)) ** 2).sum().backward()
    close(want, lin.weight.grad.numpy(), rtol=1e-6)


def test_custom_rules_refuse_differentiation_through_a_closed_over_value():
    """As JAX: the rules give derivatives for the arguments only; the closed-over value's
    part had been dropped silently."""

    def with_vjp(a):
        @nb.custom_vjp
        def g(x):
            return nb.sin(x) * a

        g.defvjp(lambda x: (g(x), x), lambda x, ct: (ct * nb.cos(x) * a,))
        return g(a * 1.0)

    def with_jvp(a):
        @nb.custom_jvp
        def g(x):
            return nb.sin(x) * a

        g.defjvp(lambda p, t: (g(p[0]), nb.cos(p[0]) * a * t[0]))
        return g(a * 1.0)

    a = nb.constant(0.7)
    for f in (with_vjp, with_jvp, nb.compile(with_vjp)):
        with pytest.raises(TypeError, match=r"reverse-mode .* closes over \(float32\[\]"):
            nb.grad(f)(a)
        close(f(a), np.sin(0.7) * 0.7, rtol=1e-6)  # not differentiated: fine
    with pytest.raises(TypeError, match="forward-mode .* closes over"):
        nb.jvp(with_jvp, (a,), (nb.constant(1.0),))

    def constant_argument(w):  # only the closed-over value is differentiated
        @nb.custom_vjp
        def g(x):
            return x * w

        g.defvjp(lambda x: (g(x), None), lambda _, ct: (ct * w,))
        return g(nb.constant([2.0, -1.0])).sum()

    # eagerly it had differentiated the primal, bypassing the rule; compiled, it raised
    for f in (constant_argument, nb.compile(constant_argument)):
        with pytest.raises(TypeError, match=r"reverse-mode .* closes over"):
            nb.grad(f)(nb.constant([1.5, 2.0]))
    # a closed-over constant, or a value of another differentiation, is fine
    w = nb.constant(2.0)

    @nb.custom_vjp
    def scaled(x):
        return x * w

    scaled.defvjp(lambda x: (scaled(x), None), lambda _, ct: (ct * w,))
    close(nb.grad(scaled)(a), 2.0)
    close(nb.grad(lambda v: nb.grad(lambda x: scaled(x) * v)(a))(nb.constant(3.0)), 2.0)


# ----------------------------------------------------------------------------- compositions
def _h(x):  # elementwise h(x) = sin(x) * x
    return nb.sin(x) * x


def _h1(x):
    return np.cos(x) * x + np.sin(x)


def _h2(x):
    return -np.sin(x) * x + 2 * np.cos(x)


def _h3(x):
    return -np.cos(x) * x - 3 * np.sin(x)


def test_vmap_jacfwd_grad(rng):
    a = f32(rng.normal(size=(3, 4)))
    out = nb.vmap(nb.jacfwd(nb.grad(lambda r: _h(r).sum())))(nb.constant(a))
    want = np.stack([np.diag(_h2(row)) for row in a])
    close(out, want, rtol=1e-4, atol=1e-5)


def test_jacrev_vmap_grad(rng):
    a = f32(rng.normal(size=(3, 4)))
    out = nb.jacrev(nb.vmap(nb.grad(lambda r: _h(r).sum())))(nb.constant(a))
    want = np.einsum("ij,ik,jl->ijkl", _h2(a), np.eye(3), np.eye(4))
    close(out, want, rtol=1e-4, atol=1e-5)


def test_grad_jvp_grad():
    g = nb.grad(lambda x: nb.jvp(nb.grad(_h), (x,), (1.0,))[1])(0.3)
    close(g, np.float32(_h3(0.3)), rtol=1e-5)


def test_jacfwd_jacrev_vmap(rng):
    v = f32(rng.normal(size=(4,)))
    out = nb.jacfwd(nb.jacrev(nb.vmap(_h)))(nb.constant(v))
    want = np.einsum("i,ij,ik->ijk", _h2(v), np.eye(4), np.eye(4))
    close(out, want, rtol=1e-4, atol=1e-5)


def test_more_depth3_compositions(rng):
    a = f32(rng.normal(size=(3, 4)))
    A = nb.constant(a)
    # vmap(vmap(grad))
    close(nb.vmap(nb.vmap(nb.grad(_h)))(A), _h1(a), rtol=1e-5)
    # jvp(vmap(grad)) with tangent ones: d/dt grad(h)(a + t) = h''(a)
    out, t = nb.jvp(nb.vmap(nb.grad(lambda r: _h(r).sum())), (A,), (nb.ones((3, 4)),))
    close(out, _h1(a), rtol=1e-5)
    close(t, _h2(a), rtol=1e-4, atol=1e-5)
    # vjp(vmap(jvp)): f(x) = jvp(h, x, x)[1] = h'(x) x, pullback of ones = h''(x) x + h'(x)
    (g,) = nb.vjp(lambda x: nb.vmap(lambda r: nb.jvp(_h, (r,), (r,))[1])(x), A)[1](nb.ones((3, 4)))
    close(g, _h2(a) * a + _h1(a), rtol=1e-4, atol=1e-5)
    # grad(grad(vmap)) with a scalar parameter: d2/ds2 sum sin(r s) = -sum r^2 sin(r s)
    r = np.arange(3, dtype=np.float32)
    s = 0.4
    g2 = nb.grad(nb.grad(lambda s: nb.vmap(lambda q: nb.sin(q * s))(nb.constant(r)).sum()))(s)
    close(g2, np.float32(-(r**2 * np.sin(r * s)).sum()), rtol=1e-5)
    # vmap(hessian)
    H = nb.vmap(nb.hessian(lambda r: _h(r).sum()))(A)
    close(H, np.stack([np.diag(_h2(row)) for row in a]), rtol=1e-4, atol=1e-5)
    # vmap(jvp(grad)) : per-example Hessian-vector products with an unbatched primal
    w = f32(rng.normal(size=(4,)))
    hv = nb.vmap(lambda t: nb.jvp(nb.grad(lambda u: _h(u).sum()), (nb.constant(w),), (t,))[1])(A)
    close(hv, _h2(w) * a, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- trace
def test_trace_prints_graph():
    tr = nb.trace(lambda x: nb.sin(x) @ x)(nb.ones((2, 2)))
    s = str(tr)
    assert "f32[2,2]" in s
    assert "sin" in s and "matmul" in s
    assert "in (" in s
    assert tr.num_ops == 2
    tg = nb.trace(nb.grad(lambda x: (nb.sin(x) @ x).sum()))(nb.ones((2, 2)))
    sg = str(tg)
    assert "f32[2,2]" in sg and "cos" in sg and "matmul" in sg and "in (" in sg
    assert tg.num_ops > tr.num_ops
    assert repr(tg) == sg


@pytest.mark.parametrize("jac", ["jacrev", "jacfwd"])
def test_jacobians_never_copy_an_unbatched_weight_per_basis_element(jac):
    # jacrev/jacfwd batch their basis with vmap; W @ v with v batched must be one GEMM with
    # the batch as rows, never W broadcast to (n, n, n) and n separate mat-vecs
    from nabla.runtime.graph import GRAPH

    rng = np.random.default_rng(0)
    n = 64
    w_np = rng.standard_normal((n, n)).astype(np.float32) / 8
    x_np = rng.standard_normal(n).astype(np.float32)
    w = nb.constant(w_np)
    jac_fn = getattr(nb, jac)(lambda v: nb.tanh(w @ v))
    with nb.backend("numpy"):
        got = jac_fn(nb.constant(x_np)).numpy()
        program = GRAPH.programs()[-1]
    y = np.tanh(w_np @ x_np)
    np.testing.assert_allclose(got, (1 - y**2)[:, None] * w_np, rtol=1e-4, atol=1e-5)
    sizes = [int(np.prod(shape)) for ins in program.instructions for _, shape in ins.out_specs]
    assert max(sizes) <= n * n, f"an intermediate of {max(sizes)} elements (n = {n})"


@pytest.mark.parametrize("kind", ["hvp", "jacrev", "vjp"])
def test_derivatives_of_a_matrix_vector_product_never_transpose_the_weight(kind):
    # MAX copies a transpose (a 1000x1000 weight: 4 MB per call), so the weight of W @ x
    # must reach every GEMM untransposed: the VJP transposes the vector and the result
    # instead, and a transpose of a transpose folds away
    from nabla.runtime.graph import GRAPH

    rng = np.random.default_rng(0)
    w_np = rng.standard_normal((5, 7)).astype(np.float32) / 3
    x_np, v_np = rng.standard_normal(7).astype(np.float32), rng.standard_normal(7)
    w, x, v = nb.constant(w_np), nb.constant(x_np), nb.constant(v_np.astype(np.float32))
    y = np.tanh(w_np @ x_np)
    if kind == "hvp":
        g = nb.grad(lambda z: nb.tanh(w @ z).sum())
        fn, want = (
            (lambda: nb.jvp(g, (x,), (v,))[1]),
            w_np.T @ (-2 * y * (1 - y**2) * (w_np @ v_np)),
        )
    elif kind == "jacrev":
        fn, want = (lambda: nb.jacrev(lambda z: nb.tanh(w @ z))(x)), (1 - y**2)[:, None] * w_np
    else:
        fn, want = (lambda: nb.grad(lambda z: nb.tanh(w @ z).sum())(x)), w_np.T @ (1 - y**2)
    with nb.backend("numpy"):
        got = fn().numpy()
        program = GRAPH.programs()[-1]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    transposed = [
        ins
        for ins in program.instructions
        if ins.op == "transpose" and ins.out_specs[0][1] == (7, 5)
    ]
    assert not transposed, str(nb.trace(fn)())


def test_a_transpose_of_a_transpose_is_one_transpose_or_none():
    x = nb.constant(np.arange(24.0, dtype=np.float32).reshape(2, 3, 4))
    assert nb.permute(nb.permute(x, (1, 2, 0)), (2, 0, 1))._impl is x._impl
    z = nb.permute(nb.permute(x, (1, 2, 0)), (1, 0, 2))
    assert z._impl.node.inputs == (x._impl,) and z._impl.node.kwargs["perm"] == (2, 1, 0)
    np.testing.assert_array_equal(z.numpy(), x.numpy().transpose(2, 1, 0))
    g = nb.grad(lambda a: (nb.swap_axes(nb.swap_axes(a, 0, 1), 0, 1) * a).sum())(x)
    np.testing.assert_allclose(g.numpy(), 2 * x.numpy())
    with nb.no_grad():  # a new op there cuts the trace; folding to x would not
        assert nb.swap_axes(nb.swap_axes(x))._impl is not x._impl


def test_custom_vjp_fwd_may_call_the_function_itself():
    """JAX's usual pattern ``def f_fwd(x): return f(x), res``: inside its fwd the function
    is its primal computation, not a second use of the rule (which recursed forever)."""

    @nb.custom_vjp
    def f(x):
        return nb.sin(x)

    f.defvjp(lambda x: (f(x), nb.cos(x)), lambda res, g: (10.0 * res * g,))
    x = nb.constant(np.array([0.1, 0.2], np.float32))
    want = 10.0 * np.cos(x.numpy())
    np.testing.assert_allclose(nb.grad(lambda v: f(v).sum())(x).numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(nb.vmap(nb.grad(f))(x).numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(f(x).numpy(), np.sin(x.numpy()), rtol=1e-6)


def test_custom_vjp_called_in_its_own_fwd_keeps_its_rule_for_outer_levels():
    """Inside fwd the function is its primal computation for the level fwd runs for only:
    ``grad(grad(f))`` differentiates the ``f(x)`` in fwd by the rule, as JAX does. The
    plain code's derivative had made a stable sigmoid's second derivative NaN at -100, a
    toy rule's 12 where JAX gives 8, and the custom-derivative tutorial's implicit
    ``fixed_point`` fail in its while_loop."""

    @nb.custom_vjp
    def sigmoid(x):
        return 1.0 / (1.0 + nb.exp(-x))  # its own derivative overflows at -100

    sigmoid.defvjp(lambda x: (sigmoid(x), sigmoid(x)), lambda y, g: (g * y * (1.0 - y),))
    assert nb.grad(nb.grad(sigmoid))(-100.0).item() == 0.0
    s = 1 / (1 + np.exp(-0.5))
    assert nb.grad(nb.grad(sigmoid))(0.5).item() == pytest.approx(s * (1 - s) * (1 - 2 * s))

    @nb.custom_vjp
    def cube(x):
        return x**3

    # the rule says d cube/dx = cube(x): 8 at 2, and the derivative of that is again 8
    # (the outer level differentiates the residual cube(x) by the rule; 12 by x**3's code)
    cube.defvjp(lambda x: (cube(x), cube(x)), lambda y, g: (g * y,))
    assert nb.grad(cube)(2.0).item() == 8.0
    assert nb.grad(nb.grad(cube))(2.0).item() == 8.0

    @functools.partial(nb.custom_vjp, nondiff_argnums=(0,))
    def fixed_point(f, a, x0):
        def body(carry):
            return carry[1], f(a, carry[1])

        return nb.while_loop(lambda c: nb.abs(c[0] - c[1]) > 1e-6, body, (x0, f(a, x0)))[1]

    def fwd(f, a, x0):
        x = fixed_point(f, a, x0)
        return x, (a, x)

    def rev_iter(f, packed, u):
        a, x, x_bar = packed
        return x_bar + nb.vjp(lambda v: f(a, v), x)[1](u)[0]

    def bwd(f, res, x_bar):
        a, x = res
        (a_bar,) = nb.vjp(lambda v: f(v, x), a)[1](
            fixed_point(functools.partial(rev_iter, f), (a, x, x_bar), x_bar)
        )
        return a_bar, nb.zeros_like(x)

    fixed_point.defvjp(fwd, bwd)

    def newton_sqrt(a):
        return fixed_point(lambda a, x: 0.5 * (x + a / x), a, a)

    assert nb.grad(newton_sqrt)(2.0).item() == pytest.approx(0.5 * 2**-0.5, rel=1e-6)
    assert nb.grad(nb.grad(newton_sqrt))(2.0).item() == pytest.approx(-0.25 * 2**-1.5, rel=1e-5)


def test_linear_transpose_jacobian_and_checkpoint_policies_are_jax_s():
    """``linear_transpose`` (the transpose of a linear function, from example arguments or
    ``ShapeDtypeStruct``s), ``jacobian`` (``jacrev``), and ``checkpoint_policies`` /
    ``checkpoint_name``, which the remat tutorial passes and which change no value."""

    def f(x, y):
        return {"a": 2.0 * x + y.sum(), "b": 3.0 * y}

    f_t = nb.linear_transpose(f, nb.zeros((3,)), nb.ShapeDtypeStruct((2,), nb.float32))
    gx, gy = f_t({"a": nb.ones((3,)), "b": nb.ones((2,))})
    np.testing.assert_array_equal(gx.numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(gy.numpy(), [6.0, 6.0])
    x = nb.constant(np.array([0.3, -1.2], np.float32))
    np.testing.assert_array_equal(nb.jacobian(nb.sin)(x).numpy(), nb.jacrev(nb.sin)(x).numpy())
    policies = nb.checkpoint_policies
    for policy in (
        policies.dots_saveable,
        policies.nothing_saveable,
        policies.everything_saveable,
        policies.save_only_these_names("h"),
        policies.save_from_both_policies(policies.dots_saveable, policies.checkpoint_dots),
    ):
        g = nb.checkpoint(lambda v: nb.sin(nb.checkpoint_name(v * 2.0, "h")), policy=policy)
        np.testing.assert_allclose(
            nb.grad(lambda v: g(v).sum())(x).numpy(), 2 * np.cos(2 * x.numpy()), rtol=1e-6
        )
    with pytest.raises(TypeError, match="name must be a string"):
        nb.checkpoint_name(x, 3)


def test_custom_rules_give_an_unused_output_a_zero_cotangent():
    """An output of a custom_vjp/custom_jvp/checkpoint function that the loss never uses
    reaches the rule as zeros of its shape (it failed making zeros of None)."""

    @nb.custom_vjp
    def f(x):
        return nb.sin(x), x * 2.0

    f.defvjp(lambda x: ((nb.sin(x), x * 2.0), nb.cos(x)), lambda c, g: (g[0] * c + g[1] * 2.0,))

    @nb.custom_jvp
    def h(x):
        return nb.sin(x), x * 2.0

    @h.defjvp
    def _h_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return h(x), (t * nb.cos(x), t * 2.0)

    ck = nb.checkpoint(lambda y: (nb.sin(y), y * 2.0))
    x = nb.constant(np.array([0.1, 0.2], np.float32))
    for fn in (f, h, ck):
        g = nb.grad(lambda v, fn=fn: fn(v)[0].sum())(x)
        np.testing.assert_allclose(g.numpy(), np.cos(x.numpy()), rtol=1e-6)
    jac = nb.jacrev(lambda v: f(v)[0])(x)
    np.testing.assert_allclose(jac.numpy(), np.diag(np.cos(x.numpy())), rtol=1e-6)


def test_softplus_derivative_is_sigmoid_also_at_zero():
    xs = np.array([0.0, 1e-8, -1e-8, 1.0, -1.0, 30.0, -30.0], np.float32)
    sigmoid = 1 / (1 + np.exp(-xs.astype(np.float64)))
    g = nb.vmap(nb.grad(nb.softplus))(nb.constant(xs))
    np.testing.assert_allclose(g.numpy(), sigmoid, rtol=1e-6)
    t = nb.jvp(nb.softplus, (nb.constant(0.0),), (nb.constant(1.0),))[1]
    assert float(t.numpy()) == 0.5  # JAX: 0.5 (it was 0: abs'(0) = 1 cancelled max's 0.5)


def test_stop_gradient_maps_over_a_pytree():
    x = nb.constant(np.array([1.0, 2.0], np.float32))
    out = nb.stop_gradient({"a": x, "b": (x, 3.0)})
    assert set(out) == {"a", "b"} and isinstance(out["b"], tuple)
    np.testing.assert_array_equal(out["b"][0].numpy(), x.numpy())
    g = nb.grad(lambda v: (nb.stop_gradient({"w": v})["w"] * v).sum())(x)
    np.testing.assert_array_equal(g.numpy(), x.numpy())  # d/dv (c * v) with c = v stopped


def test_custom_jvp_defjvps_sums_one_rule_per_argument():
    @nb.custom_jvp
    def f(x, y):
        return x * nb.sin(y)

    # a deliberately wrong factor 10 on y's rule shows the rules are used
    f.defjvps(lambda tx, out, x, y: tx * nb.sin(y), lambda ty, out, x, y: 10.0 * ty * x * nb.cos(y))
    x, y = nb.constant(2.0), nb.constant(0.5)
    gx, gy = nb.grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(
        [float(gx.numpy()), float(gy.numpy())], [np.sin(0.5), 20 * np.cos(0.5)], rtol=1e-6
    )
    t = nb.jvp(f, (x, y), (nb.constant(1.0), nb.constant(1.0)))[1]
    np.testing.assert_allclose(float(t.numpy()), np.sin(0.5) + 20 * np.cos(0.5), rtol=1e-6)


def test_divmod_and_fori_loop_unroll_as_in_jax():
    a = nb.constant(np.array([7, -7], np.int32))
    q, r = divmod(a, 3)
    np.testing.assert_array_equal(q.numpy(), [2, -3])
    np.testing.assert_array_equal(r.numpy(), [1, 2])
    q, r = divmod(7, nb.constant(np.array([2, -2], np.int32)))
    np.testing.assert_array_equal(q.numpy(), [3, -4])
    np.testing.assert_array_equal(r.numpy(), [1, -1])
    out = nb.fori_loop(0, 4, lambda i, v: v + i, nb.constant(0), unroll=2)
    assert int(out.numpy()) == 6


def test_custom_vjp_nondiff_argnums_reach_bwd_first():
    import functools

    @functools.partial(nb.custom_vjp, nondiff_argnums=(0,))
    def apply(f, x):
        return f(x)

    apply.defvjp(lambda f, x: (apply(f, x), x), lambda f, x, g: (10.0 * g,))
    x = nb.constant(np.array([1.0, 2.0], np.float32))
    g = nb.grad(lambda v: apply(nb.sin, v).sum())(x)
    np.testing.assert_array_equal(g.numpy(), [10.0, 10.0])
    scale = nb.custom_vjp(lambda s, v: v * s, nondiff_argnums=(0,))
    scale.defvjp(lambda s, v: (v * s, None), lambda s, res, ct: (ct, ct))
    with pytest.raises(TypeError, match="2 cotangents for 1 differentiable arguments"):
        nb.grad(lambda v: scale(3.0, v).sum())(x)


def test_misuse_raises_jax_s_exception_types():
    x = nb.constant([1.0, 2.0])
    with pytest.raises(TypeError, match="Python bool True"):  # was a None gradient
        nb.grad(lambda a: a * 2.0)(True)
    with pytest.raises(TypeError, match="float output, got the Python int 1"):  # was 0.0
        nb.grad(lambda a: 1)(2.0)
    assert nb.grad(lambda a: 1.0)(2.0).item() == 0.0  # a float constant: zero, as JAX
    listed = nb.custom_vjp(lambda v: v * 2.0)
    listed.defvjp(lambda v: (v * 2.0, None), lambda res, ct: [ct * 3.0])  # a list, as JAX
    assert nb.grad(lambda v: listed(v).sum())(x).tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match="grad: argnums 3 is out of range for a call with 1 "):
        nb.grad(lambda a: a.sum(), argnums=3)(x)
    with pytest.raises(TypeError, match=r"jacrev: argnums \(0, 2\) .* with 1 positional arg"):
        nb.jacrev(lambda a: a, argnums=(0, 2))(x)
    with pytest.raises(TypeError, match="has_aux=True"):
        nb.grad(lambda a: a.sum(), has_aux=True)(x)
    with pytest.raises(TypeError, match="tangents structure"):
        nb.jvp(lambda a, b: a, (x, x), (x,))
    with pytest.raises(ValueError, match="shapes must be equal"):
        nb.jvp(lambda a: a, (x,), (nb.ones((3,)),))
    with pytest.raises(ValueError, match="Reverse-mode differentiation"):
        nb.grad(lambda a: nb.while_loop(lambda c: c < 3.0, lambda c: c * 2.0, a))(nb.constant(1.0))


def test_custom_rules_take_keyword_arguments_and_custom_jvp_nondiff_argnums():
    """As JAX: keyword arguments are resolved to positions for custom_vjp/custom_jvp and
    checkpoint; custom_jvp's nondiff_argnums reach the rule first."""
    import functools

    x = nb.constant(2.0)

    @nb.custom_vjp
    def scaled(a, b=3.0):
        return a * b

    scaled.defvjp(lambda a, b: (a * b, (a, b)), lambda res, g: (g * res[1] * 10, g * res[0]))
    assert nb.grad(lambda a: scaled(a, b=nb.constant(4.0)))(x).item() == 40.0

    @nb.custom_jvp
    def twice(a, scale=2.0):
        return a * scale

    twice.defjvp(lambda p, t: (twice(*p), t[0] * p[1] * 100))
    assert nb.jvp(lambda a: twice(a, scale=3.0), (x,), (nb.constant(1.0),))[1].item() == 300.0

    @functools.partial(nb.custom_jvp, nondiff_argnums=(0,))
    def apply(fn, a):
        return fn(a)

    @apply.defjvp
    def apply_jvp(fn, primals, tangents):
        (a,), (t,) = primals, tangents
        return fn(a), t * 7.0

    assert nb.grad(lambda a: apply(nb.sin, a))(x).item() == 7.0
    power = nb.checkpoint(lambda a, n=2: a**n, static_argnums=(1,))
    assert nb.grad(lambda a: power(a, n=3))(x).item() == 12.0
    with pytest.raises(TypeError, match="static_argnums but is a tensor"):
        power(x, nb.constant(2))


def test_custom_vjp_under_vmap_sums_the_cotangent_of_an_unbatched_input():
    """``bwd`` runs per element of a vmap; when the vmap has finished (``grad`` of a function
    that vmaps the custom function), an input the vmap did not batch gets the sum over the
    elements, as with any op. Under a vmap around the grad it stays per element."""

    @nb.custom_vjp
    def f(x, w):
        return x * w

    f.defvjp(lambda x, w: (x * w, (x, w)), lambda r, g: (g * r[1], g * r[0]))
    xs = nb.constant(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    w = nb.ones(3)
    close(nb.grad(lambda w: nb.sum(nb.vmap(lambda x: f(x, w))(xs)))(w), [3.0, 5.0, 7.0])
    jac = nb.jacrev(lambda w: nb.vmap(lambda x: f(x, w))(xs))(w)
    close(jac, xs.numpy()[:, :, None] * np.eye(3, dtype=np.float32))
    cube = xs.reshape(2, 3, 1) * nb.ones((2, 3, 3))
    close(nb.grad(lambda w: nb.sum(nb.vmap(nb.vmap(lambda x: f(x, w)))(cube)))(w), [15.0] * 3)
    per_example = nb.vmap(nb.grad(lambda w, x: nb.sum(f(x, w))), in_axes=(None, 0))(w, xs)
    close(per_example, xs.numpy())


def test_custom_vjp_bwd_cotangents_none_for_a_whole_argument_and_shapes_checked():
    """As JAX: None stands for a zero cotangent of every leaf under it; a cotangent whose
    shape is not its input's is refused, naming the function."""

    @nb.custom_vjp
    def g(d, y):
        return d["a"] * y

    g.defvjp(lambda d, y: (g(d, y), y), lambda r, c: (None, c * 5.0))
    ones = nb.ones(3)
    gd, gy = nb.grad(lambda d, y: nb.sum(g(d, y)), argnums=(0, 1))({"a": ones, "b": ones}, ones)
    close(gd["a"], [0.0] * 3), close(gd["b"], [0.0] * 3), close(gy, [5.0] * 3)
    pair = collections.namedtuple("pair", "a b")

    @nb.custom_vjp
    def h(p, y):
        return p.a * y

    h.defvjp(lambda p, y: (h(p, y), y), lambda r, c: (pair(None, c * 2.0), c * 5.0))
    gp, _ = nb.grad(lambda p, y: nb.sum(h(p, y)), argnums=(0, 1))(pair(ones, ones), ones)
    assert isinstance(gp, pair)
    close(gp.a, [0.0] * 3), close(gp.b, [2.0] * 3)

    @nb.custom_vjp
    def bad(x):
        return x * 2

    bad.defvjp(lambda x: (x * 2, None), lambda r, c: (nb.ones(5),))
    with pytest.raises(ValueError, match=r"bwd of bad returned a cotangent of shape \(5,\)"):
        nb.grad(lambda x: nb.sum(bad(x)))(ones)
    # a fwd that returns its output alone is named (it was unpacked by rows: a (2, 3)
    # input's error blamed bwd, a (2,) one's was "too many values to unpack")
    bad.defvjp(lambda x: x * 2, lambda r, c: (c * 2,))
    for shape in ((2, 3), (2,), (3,)):
        with pytest.raises(TypeError, match=r"fwd of bad must return a pair \(output, resid"):
            nb.grad(lambda x: nb.sum(bad(x)))(nb.ones(shape))


def test_custom_vjp_bwd_cotangents_must_have_the_arguments_structure():
    """As JAX: cotangents are matched to the arguments by structure, not by position: a
    dict with another key, or a list for a dict, is a TypeError naming both structures."""

    @nb.custom_vjp
    def f(p):
        return p["a"] * 2.0

    ones = nb.ones(3)
    for wrong in (lambda r, g: ({"b": g * 2.0},), lambda r, g: ([g * 2.0],)):
        f.defvjp(lambda p: (f(p), None), wrong)
        with pytest.raises(TypeError, match=r"structure PyTreeDef\(\{'a': \*\}\)"):
            nb.grad(lambda p: nb.sum(f(p)))({"a": ones})
    f.defvjp(lambda p: (f(p), None), lambda r, g: ({"a": g * 2.0},))
    close(nb.grad(lambda p: nb.sum(f(p)))({"a": ones})["a"], [2.0] * 3)


def test_custom_rules_fill_in_defaults_and_number_arguments_get_zero_tangents():
    """As JAX: an omitted argument's default reaches fwd/bwd and the jvp rule as a
    positional argument, and a Python-number argument has a zero tangent in the rule."""
    x = nb.constant(3.0)
    h = nb.custom_vjp(lambda a, c=2.0: a * c)
    h.defvjp(lambda a, c=2.0: (a * c, c), lambda c, g: (g * c * 10.0, None))
    assert nb.grad(lambda a: h(a))(x).item() == 20.0
    k = nb.custom_jvp(lambda a, c=2.0: a * c)
    k.defjvp(lambda p, t: (p[0] * p[1], t[0] * p[1] * 10))
    assert nb.grad(lambda a: k(a))(x).item() == 20.0
    m = nb.custom_jvp(lambda a, c: a * c)
    m.defjvp(lambda p, t: (p[0] * p[1], t[0] * p[1] + t[1] * p[0]))
    assert nb.grad(lambda a: m(a, 2.0))(x).item() == 2.0
    assert nb.jvp(lambda a: m(a, 2.0), (x,), (nb.constant(1.0),))[1].item() == 2.0


def test_python_number_outputs_are_zero_derivative_arrays():
    """As JAX, a Python number a differentiated function returns is a 0-d array whose
    derivative is zero, in every transform and through checkpoint and custom_vjp."""
    x = nb.ones(3)
    close(nb.jacrev(lambda a: (a, 2.0))(x)[1], np.zeros(3))
    close(nb.jacfwd(lambda a: (a, 2.0))(x)[1], np.zeros(3))
    out, tan = nb.jvp(lambda a: (a, 2.0), (x,), (x,))
    assert out[1].item() == 2.0 and tan[1].item() == 0.0
    close(nb.grad(lambda a: nb.sum(nb.checkpoint(lambda z: (z * 2, 1.0))(a)[0]))(x), [2.0] * 3)
    c = nb.custom_vjp(lambda a: (a * 2, 1.0))
    c.defvjp(lambda a: ((a * 2, 1.0), None), lambda r, g: (g[0] * 2,))
    close(nb.grad(lambda a: nb.sum(c(a)[0]))(x), [2.0] * 3)


def test_has_aux_takes_a_list_pair_and_argnums_a_numpy_integer():
    """As JAX: ``[out, aux]`` is a pair too, and ``argnums`` may be a NumPy integer; a
    float ``argnums`` is a TypeError that says what it takes."""
    x = nb.constant(f32([1.0, 2.0, 3.0]))
    g, aux = nb.grad(lambda a: [nb.sum(a**2), a], has_aux=True)(x)
    close(g, [2.0, 4.0, 6.0]), close(aux, [1.0, 2.0, 3.0])
    _, t, aux = nb.jvp(lambda a: [a * 2.0, a], (x,), (x,), has_aux=True)
    close(t, [2.0, 4.0, 6.0])
    close(nb.grad(lambda a, b: nb.sum(a * b), argnums=np.int64(1))(x, x * 2.0), [1.0, 2.0, 3.0])
    ga, gb = nb.grad(lambda a, b: nb.sum(a * b), argnums=np.array([0, 1]))(x, x)
    close(ga, [1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="argnums must be an int or a sequence of ints"):
        nb.grad(lambda a: nb.sum(a), argnums=1.0)(x)


def test_forward_mode_has_aux_needs_a_pair_and_argnums_must_be_distinct():
    x = nb.ones(2)
    with pytest.raises(TypeError, match="needs the function to return a pair"):
        nb.jvp(lambda a: a * 2, (x,), (x,), has_aux=True)
    with pytest.raises(TypeError, match="needs the function to return a pair"):
        nb.jacfwd(lambda a: a * 2, has_aux=True)(x)
    for bad, msg in [((0, 0), "names an argument twice"), ((), "argnums is empty")]:
        for transform in (nb.grad, nb.jacrev, nb.jacfwd):
            with pytest.raises(ValueError, match=msg):
                transform(lambda a, b: nb.sum(a * b), argnums=bad)(x, x)


def test_pow_with_a_known_exponent_differentiates_as_a_product():
    """``x ** 2``'s derivative is ``2 * x``, one multiply (as JAX's integer_pow), with no
    guarded pow; an exponent that a transform traces keeps the general rule, so mixed and
    exponent derivatives stay right."""
    text = str(nb.trace(nb.grad(lambda a: (a**2).sum()))(nb.constant([1.0, 2.0])))
    assert "pow" not in text and "where" not in text
    x = nb.constant(np.array([0.0, 1.5, -2.0], np.float32))
    for c, want in [(2, 2 * x.numpy()), (3, 3 * x.numpy() ** 2), (0, 0 * x.numpy())]:
        np.testing.assert_allclose(nb.grad(lambda a, c=c: (a**c).sum())(x).numpy(), want)
    half = nb.constant(np.array([0.25, 4.0], np.float32))
    np.testing.assert_allclose(nb.grad(lambda a: (a**0.5).sum())(half).numpy(), [1.0, 0.25])
    # d/dy d/dx x ** y = x ** (y - 1) * (1 + y * log x): the exponent is traced
    mixed = nb.grad(lambda y: nb.grad(lambda a: a**y)(nb.constant(2.0)))(nb.constant(3.0))
    np.testing.assert_allclose(mixed.item(), 4.0 * (1 + 3.0 * np.log(2.0)), rtol=1e-6)
    # ... at y = 0 too: x ** -1 (the rule's guard had made it a constant 0 there)
    at0 = nb.hessian(lambda a, y: a**y, argnums=(0, 1))(nb.constant(2.0), nb.constant(0.0))
    np.testing.assert_allclose(at0[0][1].item(), 0.5, rtol=1e-6)
    np.testing.assert_allclose(at0[1][0].item(), 0.5, rtol=1e-6)
    per_y = nb.vmap(lambda y: nb.grad(lambda a: a**y)(nb.constant(2.0)))(nb.constant([2.0, 3.0]))
    np.testing.assert_allclose(per_y.numpy(), [4.0, 12.0])
    powf = nb.compile(nb.grad(lambda a, y: (a**y).sum()))
    for y in (2.0, 0.0):
        np.testing.assert_allclose(
            powf(x, nb.constant(y)).numpy(), nb.grad(lambda a, y=y: (a**y).sum())(x).numpy()
        )


def test_scatter_multiply_hessian_with_a_zero_update_is_symmetric():
    """The product of the other updates at a position holding one zero update was a
    constant 0 for the nonzero ones: its derivative with respect to the zero was lost."""
    x = nb.constant(np.array([1.5, 2.0], np.float32))
    idx = nb.constant(np.array([0, 0, 0]))

    def f(u):  # x0 * u0 * u1 * u2 + x1
        return nb.sum(x.at[idx].multiply(u))

    u = np.array([0.0, 3.0, 0.5], np.float32)
    want = 1.5 * np.array([[0, 0.5, 3.0], [0.5, 0, 0], [3.0, 0, 0]], np.float32)
    np.testing.assert_allclose(nb.hessian(f)(nb.constant(u)).numpy(), want, rtol=1e-6)
    two_zeros = np.array([0.0, 0.0, 2.0], np.float32)  # d2/du0 du1 = x0 * u2 = 3
    h = nb.hessian(f)(nb.constant(two_zeros)).numpy()
    np.testing.assert_allclose(h, 1.5 * np.array([[0, 2, 0], [2, 0, 0], [0, 0, 0]]), rtol=1e-6)


def test_higher_derivatives_at_zeros_as_jax():
    """prod's rule is built from multiplies only (its hessian at a zero was asymmetric),
    x ** n has no 0 * inf at its (n+1)-th derivative at 0, and softplus is smooth (its
    second derivative at 0 was 0, not sigmoid'(0) = 0.25)."""
    h = nb.hessian(lambda a: nb.prod(a))(nb.constant(np.array([0.0, 2.0, 3.0], np.float32)))
    np.testing.assert_array_equal(h.numpy(), [[0, 3, 2], [3, 0, 0], [2, 0, 0]])
    h2 = nb.hessian(lambda a: nb.prod(a))(nb.constant(np.array([0.0, 0.0, 3.0], np.float32)))
    np.testing.assert_array_equal(h2.numpy(), [[0, 3, 0], [3, 0, 0], [0, 0, 0]])
    x = nb.constant(np.array([[1.0, 0.0, 2.0], [3.0, 4.0, 0.5]], np.float32))
    g = nb.grad(lambda a: nb.prod(a, axis=(0, 1)))(x).numpy()
    np.testing.assert_allclose(g, [[0, 12, 0], [0, 0, 0]])
    z = nb.constant(np.float32(0.0))
    assert nb.grad(nb.grad(lambda a: a**1))(z).item() == 0.0
    assert nb.grad(nb.grad(nb.grad(lambda a: a**2)))(z).item() == 0.0
    assert nb.grad(nb.grad(nb.grad(lambda a: a**3)))(z).item() == 6.0
    third = nb.jacfwd(nb.hessian(lambda a: nb.sum(a**2)))(nb.constant([0.0, 1.0]))
    assert np.array_equal(third.numpy(), np.zeros((2, 2, 2)))
    hs = nb.hessian(lambda a: nb.sum(nb.softplus(a)))(nb.constant([0.0, 1.0])).numpy()
    np.testing.assert_allclose(np.diag(hs), [0.25, 0.19661193], rtol=1e-6)
    big = nb.constant(np.array([-200.0, 50.0, 1e4], np.float32))
    np.testing.assert_allclose(nb.softplus(big).numpy(), [0.0, 50.0, 1e4])
    assert np.isfinite(nb.vmap(nb.grad(nb.grad(nb.softplus)))(big).numpy()).all()


def test_prod_over_an_empty_axis_differentiates_to_empty_and_softmax_of_empty_is_empty():
    """As JAX: ``prod`` over an empty axis is 1 with an empty (zero-size) gradient and a
    zero tangent (the pairwise-product tree recursed forever there), and softmax over an
    empty axis is the empty input."""
    e = nb.constant(np.zeros((0,), np.float32))
    assert nb.grad(lambda a: nb.prod(a))(e).shape == (0,)
    g = nb.grad(lambda a: nb.sum(nb.prod(a, axis=1)))(nb.constant(np.zeros((3, 0), np.float32)))
    assert g.shape == (3, 0)
    out, t = nb.jvp(lambda a: nb.prod(a), (e,), (e,))
    assert out.item() == 1.0 and t.item() == 0.0
    for shape, axis in [((3, 0), -1), ((0, 3), 0), ((0, 3), 1)]:
        x = nb.constant(np.zeros(shape, np.float32))
        assert nb.softmax(x, axis=axis).shape == shape
        assert nb.logsoftmax(x, axis=axis).shape == shape


def test_backward_create_graph_keeps_gradients_differentiable():
    """PyTorch's ``backward(create_graph=True)``: ``x.grad`` keeps its history, so a second
    ``backward`` through it gives the second derivative, and a gradient penalty on an
    input's gradient reaches the weights (reference: PyTorch 2.14's
    ``autograd.grad(..., create_graph=True)``: [0.3327, 0.0285])."""
    x = nb.constant(f32([1.0, 2.0, 3.0]), requires_grad=True)
    (x**3).sum().backward(create_graph=True)
    g = x.grad
    close(g, [3.0, 12.0, 27.0])
    assert g.requires_grad
    x.grad = None
    g.sum().backward()
    close(x.grad, [6.0, 12.0, 18.0])
    w = nb.constant(f32([0.5, -1.0]), requires_grad=True)
    inp = nb.constant(f32([1.0, 2.0]), requires_grad=True)
    nb.tanh(w * inp).sum().backward(create_graph=True)
    w.grad = None
    (inp.grad**2).sum().backward()
    close(w.grad, [0.33268052, 0.02851276], rtol=1e-5)


def test_rematerialized_draws_are_the_forward_s_under_nesting_vmap_and_shard_map():
    """With a loss linear in ``w`` at ``w = 1``, ``dL/dw == L`` exactly when the backward
    differentiates the forward's masks. A checkpoint running inside another's re-run logged
    no keys (fresh masks); a vmap inside a checkpoint replayed keys of its old level (every
    lane got the sum of all lanes)."""
    drop = nb.nn.functional.dropout
    x = nb.constant(np.arange(1, 21, dtype=np.float32))
    inner = nb.checkpoint(lambda w, v: drop(v * w, 0.5))
    outer = nb.checkpoint(lambda w: inner(w, x).sum())
    value, g = nb.value_and_grad(outer)(nb.ones(()))
    close(g, value.numpy())
    per_lane = nb.checkpoint(lambda w: nb.vmap(lambda wi: (drop(x, 0.5) * wi).sum())(w))
    y, pull = nb.vjp(per_lane, nb.ones((4,)))
    close(pull(nb.ones((4,)))[0], y.numpy())
    mesh = nb.DeviceMesh("remat", (2, 2), ("dp", "tp"))
    body = nb.shard_map(
        lambda w, v: nb.all_reduce((drop(v, 0.5) * w).sum(), axes=("dp", "tp")),
        mesh=mesh,
        in_specs=(nb.P(), nb.P("dp", "tp")),
        out_specs=nb.P(),
    )
    xs = nb.constant(np.arange(1.0, 17.0, dtype=np.float32).reshape(4, 4))
    value, g = nb.value_and_grad(nb.checkpoint(lambda w: body(w, xs)))(nb.ones(()))
    close(g, value.numpy())


def test_checkpoint_replays_its_draws_and_transforms_keep_in_place_updates():
    """checkpoint's re-run drew a new dropout mask from the global generator, so the
    gradient belonged to another mask than the forward's (PyTorch's checkpoint restores
    the RNG state); a function closing over its weights draws the same keys as without
    checkpoint. A BatchNorm module passed to checkpoint or vjp updated its running
    statistics on the transform's copies only (vjp: the count moved, the statistics not)."""
    x = nb.constant(np.linspace(1.0, 2.0, 8, dtype=np.float32))
    drop = nb.nn.Dropout(0.5)

    def f(v):
        return drop(v) * v

    for how in ("grad", "backward"):
        nb.manual_seed(3)
        if how == "grad":
            g = nb.grad(lambda v: nb.checkpoint(f)(v).sum())(x)
        else:
            v = nb.constant(x.numpy())
            v.requires_grad_(True)
            out = nb.checkpoint(f)(v)
            out.sum().backward()
            g = v.grad
        nb.manual_seed(3)
        mask = (drop(x) != 0).numpy()
        kept = g.numpy() != 0
        np.testing.assert_array_equal(kept, mask, err_msg=how)

    layer = nb.nn.Linear(8, 8, key=nb.random.key(0))

    def closing(v):  # closes over the layer's weights: runs without rematerialization
        return drop(layer(v))

    grads = []
    for wrap in (lambda fn: fn, nb.checkpoint):
        nb.manual_seed(5)
        grads.append(nb.grad(lambda w: wrap(closing)(x * w).sum())(nb.constant(1.0)).item())
    assert grads[0] == grads[1]

    batch = nb.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    want = nb.nn.BatchNorm1d(4)
    want(batch)
    for run in (
        lambda m: nb.checkpoint(lambda mm, b: mm(b))(m, batch),
        lambda m: nb.vjp(lambda mm: mm(batch), m),
    ):
        bn = nb.nn.BatchNorm1d(4)
        run(bn)
        assert bn.num_batches_tracked.item() == 1
        np.testing.assert_allclose(bn.running_mean.numpy(), want.running_mean.numpy())
        np.testing.assert_allclose(bn.running_var.numpy(), want.running_var.numpy())


def test_grad_names_the_leaf_that_cannot_be_differentiated():
    """grad over a whole BatchNorm model refuses its integer count; the error had named
    'argument 0' only, not which leaf of the module."""
    model = nb.nn.Sequential(nb.nn.Linear(2, 2), nb.nn.BatchNorm1d(2))
    with pytest.raises(TypeError, match=r"argument 0 at \.1\.num_batches_tracked of grad must"):
        nb.grad(lambda m: m(nb.ones((3, 2))).sum())(model)
    with pytest.raises(TypeError, match=r"argument 0 at \['a'\] of grad must have a float"):
        nb.grad(lambda d: d["a"].sum())({"a": nb.arange(3)})


def test_create_graph_through_loops_views_after_no_grad_updates_and_checked_grads():
    """backward(create_graph=True) through a scan/fori_loop/GRU, then a second backward,
    raised 'reverse mode reached a scan that saved no carries' (the first walk ran as a
    backward pass no one walks again); a view of a requires_grad leaf updated in place
    under no_grad lost its history (its term dropped from w.grad silently); a .grad
    assigned with another shape or dtype was accumulated into as if it fitted."""
    xs = np.array([0.3, -0.2, 0.5], np.float32)

    def loss(x):
        c, _ = nb.scan(lambda c, r: (nb.tanh(c * r + x), None), x, nb.ones((4, 3)))
        return (c**2).sum()

    x = nb.constant(xs)
    x.requires_grad_(True)
    loss(x).backward(create_graph=True)
    (x.grad**2).sum().backward()
    second = nb.grad(lambda v: (nb.grad(loss)(v) ** 2).sum())(nb.constant(xs)).numpy()
    want = second + nb.grad(loss)(nb.constant(xs)).numpy()  # and the first backward's part
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5)

    w = nb.constant([1.0, 2.0, 3.0], requires_grad=True)
    v = w[:2]
    with nb.no_grad():
        w.mul_(10.0)
    assert v.requires_grad
    ((w**2).sum() + (v**3).sum()).backward()
    np.testing.assert_allclose(w.grad.numpy(), [20 + 300, 40 + 1200, 60])

    p = nb.constant([1.0, 2.0, 3.0], requires_grad=True)
    assert (p * 2).requires_grad and not (p > 0).requires_grad  # (no gradient for a bool)
    assert not p.argmax().requires_grad
    with pytest.raises(ValueError, match=r"grad: the gradient of a float32\[3\] tensor must"):
        p.grad = nb.zeros((3, 1))
    with pytest.raises(ValueError, match=r"must be float32\[3\], got float64\[3\]"):
        p.grad = nb.zeros(3, dtype=nb.float64)


def test_ops_of_derivative_zero_pass_no_cotangent_as_jax_and_zeros_to_a_leaf_as_pytorch():
    """sign, floor, ceil, round and trunc multiplied their cotangent by 0: where a later op
    was singular (``sqrt`` at 0), ``0 * inf`` made the gradient NaN, where JAX's symbolic
    zero gives 0. Their rules now give no cotangent or tangent; ``backward()`` still gives a
    leaf reached only through them zeros (PyTorch's), and one behind a comparison or argmax
    none (no edge there in PyTorch's graph)."""
    for op in (nb.sign, nb.floor, nb.ceil, nb.round, nb.trunc):
        g = nb.grad(lambda a, op=op: nb.sqrt(op(a) * 0.0))(nb.constant(0.7))
        assert g.item() == 0.0, op
        t = nb.jvp(lambda a, op=op: nb.sqrt(op(a) * 0.0), (nb.constant(0.7),), (nb.constant(1.0),))
        assert t[1].item() == 0.0, op
    g = nb.grad(lambda a: nb.std(nb.tile(nb.sign(a), (2,))))(nb.constant(-0.3))
    assert g.item() == 0.0

    x = nb.constant([0.7, -1.2])
    x.requires_grad = True
    nb.floor(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
    a = nb.constant([1.0, 2.0])
    a.requires_grad = True
    y = nb.constant([0.7, -1.2])
    y.requires_grad = True
    (nb.where(y > 0, a, a * 2.0).sum() + (a * y.argmax()).sum()).backward()
    assert y.grad is None
    np.testing.assert_array_equal(a.grad.numpy(), [1.0 + 0.0, 2.0 + 0.0])
    with pytest.raises(RuntimeError, match="does not depend on any tensor with requires_grad"):
        (y > 0).cast(nb.float32).sum().backward()


def test_a_numpy_function_on_a_differentiated_tensor_is_an_error():
    """As JAX's TracerArrayConversionError: ``np.exp(t)`` inside ``nb.grad`` gave a NumPy
    constant, and the gradient through it was silently lost ([2.7, 7.4] for the true
    e^t (1 + t) = [5.4, 22.2]); NumPy arrays as constants, and NumPy on a parameter outside
    a transform (``np.testing.assert_allclose(w, ...)``), still work."""
    x = nb.constant(f32([1.0, 2.0]))
    with pytest.raises(TypeError, match="cannot convert a tensor that nb.grad/vjp/jacrev"):
        nb.grad(lambda t: (np.exp(t) * t).sum())(x)
    with pytest.raises(TypeError, match="to a NumPy array inside the differentiated function"):
        nb.vjp(lambda t: nb.constant(np.asarray(t)), x)
    g = nb.grad(lambda t: (t * f32([1.0, 2.0]) + np.ones(2, np.float32)).sum())(x)
    np.testing.assert_array_equal(g.numpy(), [1.0, 2.0])
    w = nb.ones((2,))
    w.requires_grad = True
    np.testing.assert_allclose(w, [1.0, 1.0])


def test_linearize_is_jax_s():
    """``linearize(f, *primals)``: the value and the JVP at the point as a function of the
    tangents (known answers: d/dx sin(x) x = cos(x) x + sin(x))."""
    x = np.array([0.0, 1.0, -2.0], np.float32)
    out, f_jvp = nb.linearize(lambda v: nb.sin(v) * v, nb.constant(x))
    np.testing.assert_allclose(out.numpy(), np.sin(x) * x, rtol=1e-6)
    t = np.array([1.0, 2.0, 0.5], np.float32)
    np.testing.assert_allclose(
        f_jvp(nb.constant(t)).numpy(), (np.cos(x) * x + np.sin(x)) * t, rtol=1e-6
    )
    a, b = np.float32(2.0), np.array([1.0, 3.0], np.float32)
    out, f_jvp, aux = nb.linearize(lambda p, q: (p * q, q.sum()), a, b, has_aux=True)
    np.testing.assert_allclose(out.numpy(), a * b)
    assert aux.item() == 4.0
    np.testing.assert_allclose(f_jvp(np.float32(1.0), np.zeros(2, np.float32)).numpy(), b)
    with pytest.raises(TypeError, match="takes 2 tangent"):
        f_jvp(np.float32(1.0))


def test_an_in_place_write_under_no_grad_keeps_a_computed_tensor_s_history():
    """PyTorch's unrecorded in-place op: under ``no_grad``, ``y.mul_()``, ``y.clamp_()``,
    ``y[i] = v`` and a view's ``zero_()`` on a computed tensor change its value and keep its
    history, so gradients pass straight through to ``x`` (the answers are PyTorch's). They
    had cut ``y`` off: its gradient was lost, or ``backward`` found nothing to reach."""
    x = nb.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    with nb.no_grad():
        y.mul_(5)
    assert y.requires_grad and y.tolist() == [5.0, 10.0]
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]
    x = nb.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    with nb.no_grad():
        y.clamp_(max=4.0)
    (y * 1.0 + x).sum().backward()
    assert y.tolist() == [3.0, 4.0] and x.grad.tolist() == [4.0, 4.0]
    x = nb.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    with nb.no_grad():
        y[0] = 10.0
    (y * x).sum().backward()
    assert x.grad.tolist() == [13.0, 12.0]
    x = nb.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 3
    with nb.no_grad():
        y[0].zero_()
        y[1:].mul_(2)
    (y * x).sum().backward()
    assert y.tolist() == [0.0, 12.0, 18.0] and x.grad.tolist() == [3.0, 18.0, 27.0]
    x = nb.tensor([1.0, np.inf], requires_grad=True)  # the value exactly, inf included
    y = x * -1.0
    with nb.no_grad():
        y.mul_(0.0)
    assert y.tolist()[0] == 0.0 and np.signbit(y.numpy()[0]) and np.isnan(y.tolist()[1])
