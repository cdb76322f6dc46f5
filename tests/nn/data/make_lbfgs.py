"""Record PyTorch's L-BFGS runs for tests/nn/test_nn_lbfgs.py (needs torch):

    python tests/nn/data/make_lbfgs.py

Each case minimizes ``PROBLEMS[name]`` from a fixed start with ``torch.optim.LBFGS`` and
records, after each ``step(closure)``, the parameters, the loss ``step`` returned and the
optimizer's ``func_evals`` count. ``CASES`` is shared with the test.
"""

from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def data():
    rng = np.random.default_rng(0)
    return {
        "A": rng.standard_normal((20, 5)).astype(np.float32),
        "b": rng.standard_normal(20).astype(np.float32),
        "w0": rng.standard_normal(5).astype(np.float32),
        "rosen0": np.array([-1.5, 2.0, -1.2, 1.0], np.float32),
    }


def least_squares(x, d):
    """Least squares plus a quartic term on ``x = [w (5), c]``; any array library."""
    w, c = x[:5], x[5]
    r = d["A"] @ w + c - d["b"]
    return (r * r).mean() + 0.1 * (w**4).sum()


def rosenbrock(x, d):
    a = (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2
    return a + (1 - x[2]) ** 2 + 100 * (x[3] - x[2] ** 2) ** 2


# name -> (problem, start, steps, LBFGS keywords)
CASES = {
    "lsq_plain": (least_squares, "lsq", 3, {}),
    "lsq_wolfe": (least_squares, "lsq", 3, {"line_search_fn": "strong_wolfe"}),
    "lsq_short": (least_squares, "lsq", 4, {"max_iter": 4, "history_size": 2, "lr": 0.5}),
    "lsq_short_wolfe": (
        least_squares,
        "lsq",
        4,
        {"max_iter": 4, "history_size": 2, "lr": 0.5, "line_search_fn": "strong_wolfe"},
    ),
    # one iteration per step: every line search and history update visible
    "rosen_plain": (rosenbrock, "rosen", 20, {"max_iter": 1, "lr": 0.1}),
    "rosen_wolfe": (rosenbrock, "rosen", 20, {"max_iter": 1, "line_search_fn": "strong_wolfe"}),
}


def start(kind, d):
    if kind == "lsq":
        return np.concatenate([d["w0"], [np.float32(0.3)]]).astype(np.float32)
    return d["rosen0"].copy()


def main():
    import torch  # noqa: PLC0415

    d = data()
    dt = {k: torch.tensor(v) for k, v in d.items()}
    out = {}
    for name, (problem, kind, steps, kw) in CASES.items():
        x = torch.tensor(start(kind, d), requires_grad=True)
        opt = torch.optim.LBFGS([x], **kw)

        def closure(x=x, opt=opt, problem=problem):
            opt.zero_grad()
            loss = problem(x, dt)
            loss.backward()
            return loss

        xs, losses, evals = [], [], []
        for _ in range(steps):
            losses.append(float(opt.step(closure)))
            xs.append(x.detach().numpy().copy())
            evals.append(opt.state[x]["func_evals"])
        out[f"{name}.x"] = np.array(xs)
        out[f"{name}.loss"] = np.array(losses, np.float32)
        out[f"{name}.evals"] = np.array(evals)
    np.savez(HERE / "lbfgs.npz", **out)


if __name__ == "__main__":
    main()
