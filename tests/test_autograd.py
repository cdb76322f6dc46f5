"""``nb.autograd``: ``torch.autograd``'s names, and the PyTorch tutorial lines around them,
checked against known answers (and against PyTorch where it is installed)."""

import numpy as np
import pytest

import nabla as nb

nn = nb.nn


def test_autograd_grad_returns_gradients_without_touching_grad():
    """``torch.autograd.grad`` as the gradient-penalty recipe uses it: the gradient with
    respect to the input, differentiable again, and no ``.grad`` changed by it."""
    w = nb.tensor([[0.5], [-1.0], [2.0]], requires_grad=True)
    x = nb.tensor([[1.0, 2.0, 3.0], [0.5, 0.1, -1.0]], requires_grad=True)
    (gx,) = nb.autograd.grad(nb.tanh(x @ w).sum(), x, create_graph=True)
    assert x.grad is None and w.grad is None
    h = np.tanh(x.numpy() @ w.numpy())
    np.testing.assert_allclose(gx.numpy(), (1 - h**2) @ w.numpy().T, rtol=1e-5)
    (gx**2).sum().backward()  # d/dw of sum_i (1 - h_i^2)^2 |w|^2 ...: against finite diffs
    eps, base = 1e-3, w.numpy().astype(np.float64)

    def penalty(wv):
        hv = np.tanh(x.numpy().astype(np.float64) @ wv)
        return (((1 - hv**2) @ wv.T) ** 2).sum()

    fd = [
        (penalty(base + eps * e) - penalty(base - eps * e)) / (2 * eps)
        for e in np.eye(3)[:, :, None]
    ]
    np.testing.assert_allclose(w.grad.numpy().ravel(), fd, rtol=2e-3)
    u = nb.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="not used in the graph"):
        nb.autograd.grad((w * 3).sum(), [w, u])
    gw, gu = nb.autograd.grad((w * 3).sum(), [w, u], allow_unused=True)
    assert gu is None and np.all(gw.numpy() == 3)
    (gu,) = nb.autograd.grad((w * 3).sum(), [u], materialize_grads=True)
    assert gu.numpy().tolist() == [0.0]
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        nb.autograd.grad(w * 3, w)
    (gv,) = nb.autograd.grad(w * 3, w, grad_outputs=nb.ones((3, 1)) * 2)
    assert np.all(gv.numpy() == 6)


def test_autograd_function_runs_its_backward():
    """``torch.autograd.Function`` (the tutorials' LegendrePolynomial3, with a backward
    scaled by 10 so it cannot pass by accident) under ``.backward()``, ``nb.grad`` and
    ``nb.vmap``; ``ctx.needs_input_grad`` and a non-tensor argument's None."""

    class Legendre3(nb.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.save_for_backward(x)
            ctx.scale = scale
            assert ctx.needs_input_grad == (True, False)
            return 0.5 * (5 * x**3 - 3 * x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 1.5 * (5 * x**2 - 1) * ctx.scale, None

    x = nb.tensor([0.3, -0.7], requires_grad=True)
    y = Legendre3.apply(x, 10.0)
    np.testing.assert_allclose(y.numpy(), 0.5 * (5 * x.numpy() ** 3 - 3 * x.numpy()), rtol=1e-6)
    y.sum().backward()
    want = 15.0 * (5 * x.numpy() ** 2 - 1)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5)
    g = nb.grad(lambda v: Legendre3.apply(v, 10.0).sum())(nb.tensor([0.3, -0.7]))
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5)
    per = nb.vmap(nb.grad(lambda v: Legendre3.apply(v, 10.0)))(nb.tensor([0.3, -0.7]))
    np.testing.assert_allclose(per.numpy(), want, rtol=1e-5)


def test_autograd_functional_matches_known_answers():
    f = lambda v: (v**3).sum()  # noqa: E731
    x = nb.tensor([1.0, 2.0])
    F = nb.autograd.functional
    np.testing.assert_allclose(F.hessian(f, x).numpy(), [[6.0, 0.0], [0.0, 12.0]])
    np.testing.assert_allclose(
        F.jacobian(nb.sin, x).numpy(), np.diag(np.cos([1.0, 2.0])), rtol=1e-6
    )
    value, hv = F.hvp(f, x, nb.tensor([1.0, 0.0]))
    assert value.item() == 9.0 and hv.numpy().tolist() == [6.0, 0.0]
    out, vj = F.vjp(nb.sin, x, nb.tensor([1.0, 2.0]))
    np.testing.assert_allclose(vj.numpy(), [np.cos(1.0), 2 * np.cos(2.0)], rtol=1e-6)
    out, jv = F.jvp(nb.sin, x, nb.tensor([1.0, 2.0]))
    np.testing.assert_allclose(jv.numpy(), [np.cos(1.0), 2 * np.cos(2.0)], rtol=1e-6)
    with pytest.raises(RuntimeError, match="v can only be None"):
        F.vjp(nb.sin, x)


def test_tutorial_lines_that_ported_badly():
    """``@nb.no_grad`` without parentheses (PyTorch 2's; it raised a TypeError about
    ``__init__``), ``w.data.uniform_(-0.1, 0.1)`` and ``normal_`` (no such methods),
    ``StepLR(opt, 1.0, gamma)`` (refused), and ``SequentialLR`` handing over to
    ``MultiplicativeLR`` (one step behind PyTorch at the milestone)."""

    @nb.no_grad
    def frozen(v):
        return (v * 2).requires_grad

    @nb.enable_grad
    def recorded(v):
        return (v * 2).requires_grad

    x = nb.ones((2,), requires_grad=True)
    assert frozen(x) is False and recorded(x) is True and frozen.__name__ == "frozen"
    emb = nn.Embedding(50, 8)
    emb.weight.data.uniform_(-0.1, 0.1)
    w = emb.weight.numpy()
    assert w.min() >= -0.1 and w.max() < 0.1 and w.std() > 0.03 and emb.weight.requires_grad
    z = nb.zeros((4000,))
    z.normal_(2.0, 0.5)
    assert abs(z.mean().item() - 2.0) < 0.05 and abs(z.std().item() - 0.5) < 0.05
    with pytest.raises(TypeError, match="uniform_: fills a float tensor"):
        nb.zeros((2,), dtype=nb.int32).uniform_()
    opt = nn.optim.SGD([nb.ones((2,))], lr=5.0)
    sched = nn.optim.lr_scheduler.StepLR(opt, 1.0, gamma=0.95)
    rates = []
    for _ in range(3):
        opt.step()
        sched.step()
        rates.append(round(sched.get_last_lr()[0], 6))
    assert rates == [4.75, 4.5125, 4.286875]
    opt = nn.optim.SGD([nb.ones((2,))], lr=0.1)
    S = nn.optim.lr_scheduler
    seq = S.SequentialLR(
        opt, [S.LinearLR(opt, 0.1, total_iters=5), S.MultiplicativeLR(opt, lambda e: 0.9)], [5]
    )
    got = []
    for _ in range(8):
        opt.step()
        seq.step()
        got.append(round(seq.get_last_lr()[0], 6))
    # PyTorch 2.14.1's values, run beside this once
    assert got == [0.028, 0.046, 0.064, 0.082, 0.0738, 0.06642, 0.059778, 0.0538]


def test_grad_fn_names_the_op_that_made_a_value():
    """PyTorch's ``grad_fn``: None for leaves and for values no ``requires_grad`` tensor
    reaches; else the op, with its inputs' nodes."""
    x = nb.ones((3,), requires_grad=True)
    y = (x * 2.0).sum()
    assert x.grad_fn is None and nb.ones((2,)).grad_fn is None
    assert y.grad_fn.name() == "ReduceSumBackward0" and repr(y.grad_fn).startswith("<")
    ((inner, _),) = y.grad_fn.next_functions
    assert inner.name() == "MulBackward0"
    assert all(f is None for f, _ in inner.next_functions)  # x: a leaf


def test_pytorch_s_checks_and_decorators_on_generators():
    """PyTorch's errors for a ``grad_outputs`` of another shape (it was broadcast: a wrong
    gradient) and for a ``Function.backward`` short of gradients (it was padded with
    zeros); trailing Nones past the arguments accepted; ``needs_input_grad`` False for a
    tensor nothing differentiates; ``@no_grad``/``@enable_grad`` on a generator function
    cover its body (they covered making the generator); ``@set_grad_enabled(False)``."""
    x = nb.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(
        RuntimeError, match=r"mismatch in shape: .*\(2,\) for an output of shape \(\)"
    ):
        nb.autograd.grad((x**2).sum(), x, grad_outputs=nb.ones((2,)))

    class Mul(nb.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            ctx.flags = ctx.needs_input_grad
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return (g * b,)  # short: the second gradient missing

    with pytest.raises(TypeError, match=r"incorrect number of gradients \(expected 2, got 1\)"):
        Mul.apply(x, nb.ones((3,))).sum().backward()

    class Scale(nb.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 2.0, None, None  # trailing Nones past the one argument

    x.grad = None
    Scale.apply(x).sum().backward()
    assert x.grad.numpy().tolist() == [2.0, 2.0, 2.0]
    seen = []

    class Flags(nb.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, k):
            seen.append(ctx.needs_input_grad)
            return a * b * k

        @staticmethod
        def backward(ctx, g):
            return g, g, None

    Flags.apply(x, nb.ones((3,)), 2.0)
    assert seen == [(True, False, False)]

    @nb.no_grad
    def frozen_steps():
        for _ in range(2):
            yield (x * 2).requires_grad, nb.is_grad_enabled()

    assert list(frozen_steps()) == [(False, False), (False, False)]
    assert nb.is_grad_enabled()

    @nb.enable_grad()
    def recorded_steps():
        yield (x * 2).requires_grad

    with nb.no_grad():
        assert list(recorded_steps()) == [True]

    @nb.set_grad_enabled(False)
    def off():
        return (x * 2).requires_grad

    assert off() is False and nb.is_grad_enabled()
    assert nb.nn.Transformer.generate_square_subsequent_mask(3).dtype is nb.float32
    with pytest.raises(ValueError, match="std must be >= 0"):
        nb.zeros((2,)).normal_(0.0, -1.0)
    w = nb.zeros((200,))
    w.uniform_(**{"from": 1.0, "to": 2.0})
    assert 1.0 <= w.numpy().min() and w.numpy().max() < 2.0
