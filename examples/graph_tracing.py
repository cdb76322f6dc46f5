"""See what a transform produced: ``nb.trace`` prints the recorded graph (jaxpr-like), for a
plain function, its gradient, a vmapped function and a model's training step.

Run: python examples/graph_tracing.py
"""

import nabla as nb

nn = nb.nn


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)

    def f(x):
        return nb.tanh(x * 2.0).sum()

    x = nb.ones((3,))
    forward = nb.trace(f)(x)
    backward = nb.trace(nb.grad(f))(x)
    batched = nb.trace(nb.vmap(lambda v: v @ v))(nb.ones((4, 3)))
    say("f:\n", forward, "\n\ngrad(f):\n", backward, "\n\nvmap(dot):\n", batched, sep="")

    model = nn.Sequential(nn.Linear(3, 4, key=nb.random.key(0)), nn.ReLU(), nn.Linear(4, 1))
    y = nb.zeros((2, 1))

    def loss_fn(m, x):
        return nn.functional.mse_loss(m(x), y)

    step = nb.trace(nb.grad(loss_fn))(model, nb.ones((2, 3)))
    text = str(step)
    say("\ngrad of an MLP's loss:\n", text, sep="")
    return {"forward": str(forward), "grad": str(backward), "mlp_grad": text}


if __name__ == "__main__":
    main()
