"""Record PyTorch's cumprod values and derivatives at inputs holding zeros (run with torch
installed: ``python tests/ops/data/make_cumprod.py``; writes ``cumprod.npz`` beside it)."""

import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (3, 6))
    x[0, 2] = 0.0  # one zero
    x[1, 1] = x[1, 4] = 0.0  # two zeros
    x[2, 0] = 0.0  # a zero first
    ct = rng.normal(size=x.shape)
    tan = rng.normal(size=x.shape)
    tx = torch.tensor(x, requires_grad=True)
    out = torch.cumprod(tx, 1)
    (vjp,) = torch.autograd.grad(out, tx, torch.tensor(ct))
    _, jvp = torch.func.jvp(lambda v: torch.cumprod(v, 1), (torch.tensor(x),), (torch.tensor(tan),))
    row = torch.tensor([0.5, 0.0, 2.0, 0.0, -1.5])
    hess = torch.autograd.functional.hessian(
        lambda v: (torch.cumprod(v, 0) ** 2).sum(), row.double()
    )
    np.savez(
        os.path.join(HERE, "cumprod.npz"),
        x=x,
        ct=ct,
        tan=tan,
        out=out.detach().numpy(),
        vjp=vjp.numpy(),
        jvp=jvp.numpy(),
        row=row.double().numpy(),
        hess=hess.numpy(),
    )


if __name__ == "__main__":
    main()
