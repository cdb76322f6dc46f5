"""``nb.func``: PyTorch's ``torch.func`` names over the transforms (checked against
``torch.func`` when written: per-example gradients, an ensemble through
``stack_module_state``, ``grad_and_value``); here against explicit loops."""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb

nn, func = nb.nn, nb.func
RNG = np.random.default_rng(12)
X = RNG.standard_normal((5, 3)).astype(np.float32)
Y = RNG.standard_normal((5, 2)).astype(np.float32)


def test_per_example_gradients_through_functional_call():
    model = nn.Linear(3, 2, key=nb.random.key(0))
    params = dict(model.named_parameters())

    def loss(p, x, y):
        return nb.mean((func.functional_call(model, p, (x[None],)) - y[None]) ** 2)

    per = func.vmap(func.grad(loss), in_dims=(None, 0, 0))(params, X, Y)
    for i in range(5):
        one = nb.grad(lambda m, i=i: nb.mean((m(X[i : i + 1]) - Y[i : i + 1]) ** 2))(model)
        np.testing.assert_allclose(
            per["weight"].numpy()[i], one.weight.numpy(), rtol=1e-5, atol=1e-7
        )
        np.testing.assert_allclose(per["bias"].numpy()[i], one.bias.numpy(), rtol=1e-5, atol=1e-7)
    # the module itself is untouched; other tensors run in its place
    zeros = {"weight": nb.zeros((3, 2)), "bias": nb.ones((2,))}
    np.testing.assert_array_equal(func.functional_call(model, zeros, X).numpy(), np.ones((5, 2)))
    assert model.weight is params["weight"]
    with pytest.raises(ValueError, match="Linear has no parameter or buffer 'nope'"):
        func.functional_call(model, {"nope": nb.ones((2,))}, (X,))
    with pytest.raises(ValueError, match=r"strict, but \['bias'\] are not given"):
        func.functional_call(model, {"weight": nb.zeros((3, 2))}, (X,), strict=True)


def test_ensemble_through_stack_module_state():
    models = [nn.Linear(3, 2, key=nb.random.key(k)) for k in range(4)]
    params, buffers = func.stack_module_state(models)
    assert params["weight"].shape == (4, 3, 2) and params["weight"].requires_grad

    def run(p, b, x):
        return func.functional_call(models[0], (p, b), (x,))

    out = func.vmap(run, in_dims=(0, 0, None))(params, buffers, X)
    for k, m in enumerate(models):
        np.testing.assert_allclose(out.numpy()[k], m(X).numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="differ in names or shapes"):
        func.stack_module_state([models[0], nn.Linear(3, 4)])


def test_grad_and_value_order_and_the_other_names():
    w = nb.constant(np.array([1.0, 2.0], np.float32))
    g, v = func.grad_and_value(lambda t: nb.sum(t**3))(w)
    np.testing.assert_allclose(g.numpy(), [3.0, 12.0])
    assert float(v.item()) == 9.0
    g, (v, aux) = func.grad_and_value(lambda t: (nb.sum(t**2), t * 2), has_aux=True)(w)
    np.testing.assert_allclose(aux.numpy(), [2.0, 4.0])
    out, t = func.jvp(lambda t: t**2, (w,), (nb.ones_like(w),), strict=True)
    np.testing.assert_allclose(t.numpy(), [2.0, 4.0])
    out, back = func.vjp(lambda t: t**2, w)
    np.testing.assert_allclose(back(nb.ones_like(w))[0].numpy(), [2.0, 4.0])
    jac = func.jacrev(lambda t: t**2, chunk_size=1)(w)
    np.testing.assert_allclose(jac.numpy(), np.diag([2.0, 4.0]))
    np.testing.assert_allclose(func.jacfwd(lambda t: t**2)(w).numpy(), np.diag([2.0, 4.0]))
    np.testing.assert_allclose(
        func.hessian(lambda t: nb.sum(t**3))(w).numpy(), np.diag([6.0, 12.0])
    )
