"""A tour of automatic differentiation: grad, value_and_grad, vjp, jvp, jacobians, Hessians,
higher-order derivatives, per-example gradients and PyTorch-style ``backward``.

Run: python examples/autodiff_tour.py
"""

import numpy as np

import nabla as nb


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)

    def f(x):
        return (nb.sin(x) * x).sum()

    x = nb.constant([0.5, 1.0, 2.0])
    g = nb.grad(f)(x)  # sin(x) + x cos(x)
    say("grad        ", g.numpy())
    value, g2 = nb.value_and_grad(f)(x)
    say("value       ", value.item())

    # Reverse mode with an explicit cotangent, forward mode with a tangent.
    out, pullback = nb.vjp(nb.sin, x)
    (ct,) = pullback(nb.ones_like(out))
    say("vjp of sin  ", ct.numpy())
    _, tangent = nb.jvp(nb.sin, (x,), (nb.ones_like(x),))
    say("jvp of sin  ", tangent.numpy())

    # Jacobians and Hessians.
    say("jacrev      \n", nb.jacrev(nb.sin)(x).numpy().round(3))
    hess = nb.hessian(f)(x)
    say("hessian diag", np.diag(hess.numpy()).round(3))

    # Derivatives compose: d^3/dx^3 of x^4 at 2 is 24 * 2 = 48.
    third = nb.grad(nb.grad(nb.grad(lambda v: v**4)))(nb.constant(2.0))
    say("third deriv ", third.item())

    # Per-example gradients: vmap over grad.
    def loss(w, xi):
        return (nb.tanh(xi @ w) ** 2).sum()

    w = nb.constant(np.ones((3, 2), np.float32) * 0.1)
    xs = nb.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    per_example = nb.vmap(nb.grad(loss), in_axes=(None, 0))(w, xs)
    say("per-example grads", per_example.shape)

    # PyTorch style: requires_grad leaves and backward().
    p = nb.constant([1.0, -2.0])
    p.requires_grad = True
    ((p * p).sum() + p[0]).backward()
    say("p.grad      ", p.grad.numpy())

    expected = np.sin(x.numpy()) + x.numpy() * np.cos(x.numpy())
    return {
        "grad_ok": bool(np.allclose(g.numpy(), expected, rtol=1e-5)),
        "third": float(third.item()),
        "backward": p.grad.numpy().tolist(),
        "per_example_shape": per_example.shape,
    }


if __name__ == "__main__":
    main()
