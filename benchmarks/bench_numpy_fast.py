"""The NumPy executor's two forms of a hot program, side by side in one run: the
interpreter (one table-driven step per instruction) and the straight-line function
generated from the program (``nabla/backends/numpy/fast.py``).

For each workload (the HVP, per-example-gradient and transformer-block rows of
``bench_peers.py``, and the LSTM and BatchNorm-CNN steps of ``bench_nn.py``) it runs the
compiled function on the ``numpy`` backend, records the programs one call runs, and prints
per program its instruction count and the executor's time per call in each form (median
of ``--reps`` calls on the same inputs, best of 3 rounds), then the whole call with the
straight-line form switched off and on (``NABLA_FAST_NUMPY``, flipped in-process).

With ``--fusion``: the programs of the convolution workloads (the BatchNorm-CNN step, and
two 3x3 convolutions with ReLU, forward and both gradients, at three sizes) in the
straight-line form lowered with the rewrites of ``nabla/backends/numpy/fusion.py`` off and
on (``NABLA_NUMPY_FUSION``, flipped in-process before each lowering), their results
checked to agree, then timed side by side.

Run: ``python benchmarks/bench_numpy_fast.py [--reps N] [--only NAME] [--fusion]``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import bench_peers  # noqa: E402
from _timing import best_of_rounds_ms, blas_kernel  # noqa: E402

import nabla as nb  # noqa: E402
from nabla.backends import numpy as numpy_backend  # noqa: E402
from nabla.core.config import CONFIG  # noqa: E402
from nabla.runtime import executor  # noqa: E402

nn = nb.nn


def _peer(name):
    def make():
        _, nabla_fn, *_ = bench_peers.WORKLOADS[name]()
        fn, args = nabla_fn()
        compiled = nb.compile(fn)
        return lambda: nb.realize(compiled(*args))

    return make


def _lstm(seq=64, batch=32, hidden=256, features=256):
    x = np.random.default_rng(1).standard_normal((seq, batch, features)).astype(np.float32)
    lstm = nn.LSTM(features, hidden, key=nb.random.key(1))
    grad = nb.compile(nb.value_and_grad(lambda m, x: m(x)[0].sum()))
    xn, functional = nb.constant(x), nb.tree_map(nb.detach, lstm)

    def step():
        loss, g = grad(functional, xn)
        nb.realize(loss, *nb.tree_leaves(g))

    return step


def _cnn(batch=64, channels=16):
    from digits_cnn import DigitsCNN  # noqa: PLC0415 - the example's model, benchmarks only

    rng = np.random.default_rng(2)
    x = nb.constant(rng.random((batch, 8, 8, 1), dtype=np.float32))
    y = nb.constant(rng.integers(0, 10, batch).astype(np.int32))
    model = DigitsCNN(channels, key=nb.random.key(3))
    opt = nn.optim.Adam(model, lr=1e-3)
    step = opt.compile_step(lambda m, x, y: nn.functional.cross_entropy_loss(m(x), y))
    return lambda: step(x, y).numpy()


def _convs(batch, size, c_in, c_out):
    """Two 3x3 convolutions (padding 1) with ReLU: the gradients of both filters."""
    rng = np.random.default_rng(0)
    x = nb.constant(rng.standard_normal((batch, size, size, c_in)).astype(np.float32))
    w1 = nb.constant(0.1 * rng.standard_normal((3, 3, c_in, c_out)).astype(np.float32))
    w2 = nb.constant(0.1 * rng.standard_normal((3, 3, c_out, c_out)).astype(np.float32))

    def loss(w1, w2, x):
        h = nb.relu(nb.conv2d(x, w1, padding=1))
        h = nb.relu(nb.conv2d(h, w2, padding=1))
        return nb.mean(h * h)

    grad = nb.compile(nb.grad(loss, argnums=(0, 1)))
    return lambda: nb.realize(*grad(w1, w2, x))


CONV_WORKLOADS = {
    "BatchNorm CNN step": _cnn,
    "convs 16->32, 64 of 8x8": lambda: _convs(64, 8, 16, 32),
    "convs 32->32, 16 of 32x32": lambda: _convs(16, 32, 32, 32),
    "convs 64->64, 16 of 16x16": lambda: _convs(16, 16, 64, 64),
}


def _fusion_rows(args) -> None:
    """Each convolution workload's programs lowered with fusion.py's rewrites off and on."""
    print(f"{'workload / program':<34}{'ops':>6}{'as recorded':>13}{'rewritten':>11}{'ratio':>8}")
    for name, make in CONV_WORKLOADS.items():
        if args.only and args.only not in name:
            continue
        call = make()
        for _ in range(5):
            call()
        for k, (program, inputs) in enumerate(_programs(call)):
            forms = {}
            for on in (False, True):
                CONFIG.numpy_fusion = on
                forms[on] = numpy_backend.compile_fast(program)
            CONFIG.numpy_fusion = True
            for a, b in zip(forms[False](inputs), forms[True](inputs), strict=True):
                scale = max(float(np.max(np.abs(a))), 1e-30) if a.size else 1.0
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * scale)
            t = _side_by_side(
                {on: lambda f=f, x=inputs: f(x) for on, f in forms.items()}, args.reps
            )
            label = f"{name} #{k}"
            print(
                f"{label:<34}{program.num_ops:>6}{t[False]:>13.4f}{t[True]:>11.4f}"
                f"{t[False] / t[True]:>7.2f}x"
            )


WORKLOADS = {
    "HVP n=1000": _peer("HVP n=1000"),
    "per-example grads": _peer("per-example grads"),
    "transformer block": _peer("transformer block"),
    "LSTM fwd+bwd": _lstm,
    "BatchNorm CNN step": _cnn,
}


def _programs(call) -> list:
    """The (program, inputs) pairs one ``call`` runs through the executor."""
    seen = []
    run = executor._run

    def recording(program, n, inputs):
        seen.append((program, list(inputs)))
        return run(program, n, inputs)

    executor._run = recording
    try:
        call()
    finally:
        executor._run = run
    return seen


def _side_by_side(fns: dict, reps: int, rounds: int = 3) -> dict:
    """Per entry, the best over ``rounds`` of the median ms of ``reps`` calls; each round
    times every entry in turn (after a few untimed calls), so drifts in the machine's
    speed reach both alike."""
    return best_of_rounds_ms(fns, reps, rounds, warmup=max(5, reps // 4))


def _switched(call, on: bool):
    def run():
        CONFIG.fast_numpy = on
        call()

    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--only", default=None, help="run the workloads whose name contains this")
    ap.add_argument("--fusion", action="store_true", help="program rewrites off and on")
    args = ap.parse_args()
    nb.set_backend("numpy")
    print(
        f"load average {os.getloadavg()[0]:.2f}; numpy backend; median ms, best of 3 "
        f"rounds; {blas_kernel()}"
    )
    if args.fusion:
        _fusion_rows(args)
        return
    print(f"{'workload / program':<34}{'ops':>6}{'interpreter':>13}{'straight':>11}{'ratio':>8}")
    for name, make in WORKLOADS.items():
        if args.only and args.only not in name:
            continue
        call = make()
        for _ in range(5):  # past the auto threshold: hot
            call()
        for k, (program, inputs) in enumerate(_programs(call)):
            interp = numpy_backend.compile_program(program)
            straight = numpy_backend.compile_fast(program)
            for a, b in zip(interp(inputs), straight(inputs), strict=True):
                np.testing.assert_array_equal(a, b)
            t = _side_by_side(
                {"i": lambda f=interp, x=inputs: f(x), "s": lambda f=straight, x=inputs: f(x)},
                args.reps,
            )
            label = f"{name} #{k}"
            print(
                f"{label:<34}{program.num_ops:>6}{t['i']:>13.4f}{t['s']:>11.4f}"
                f"{t['i'] / t['s']:>7.2f}x"
            )
        whole = _side_by_side({on: _switched(call, on) for on in (False, True)}, args.reps)
        CONFIG.fast_numpy = True
        label = f"{name}: whole call"
        print(
            f"{label:<34}{'':>6}{whole[False]:>13.4f}{whole[True]:>11.4f}"
            f"{whole[False] / whole[True]:>7.2f}x"
        )


if __name__ == "__main__":
    main()
