"""nabla beside JAX and PyTorch on the workloads of the Jacobian/per-example-grad issue,
measured side by side in one run; every workload is checked against a NumPy reference
before it is timed. JAX and PyTorch columns appear when those packages import.

Columns: the NumPy reference written by hand (where it is a plain computation: the
transformer's reference also differentiates numerically, so it has none), nabla lazy
(program cache) and ``nb.compile``, both on ``--backend`` (default ``auto``; timed once
MAX compiles and the executor races have settled), JAX with ``jit``, PyTorch eager. Every
column is timed after at least 60 untimed calls and 0.5 s of them (steady state), in
three rounds over all columns, keeping each column's best round: the machine's speed
drifts, and each column then shows its steady state in a quiet stretch. The ratio is
nabla compile over the fastest of JAX and PyTorch.

Run: ``python benchmarks/bench_peers.py [--backend numpy|max|auto] [--reps N]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _timing import best_of_rounds_ms, blas_kernel  # noqa: E402

import nabla as nb  # noqa: E402

try:  # optional peers
    import jax
    import jax.numpy as jnp
except Exception:  # noqa: BLE001 - any import problem: no JAX column
    jax = None
try:
    import torch
except Exception:  # noqa: BLE001
    torch = None

RNG = np.random.default_rng(0)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# ----------------------------------------------------------------------------- workloads
def mlp_step(sizes=(784, 512, 512, 10), batch=128):
    ws = [f32(a, b, scale=1 / np.sqrt(a)) for a, b in zip(sizes[:-1], sizes[1:])]
    x, y = f32(batch, sizes[0]), f32(batch, sizes[-1])

    def ref():
        hs, h = [x], x
        for i, w in enumerate(ws):
            h = h @ w
            if i < len(ws) - 1:
                h = np.maximum(h, 0)
            hs.append(h)
        g = 2 * (h - y) / h.size
        grads = []
        for i in range(len(ws) - 1, -1, -1):
            grads.append(hs[i].T @ g)
            g = g @ ws[i].T
            if i > 0:
                g = g * (hs[i] > 0)
        return [w - 0.01 * d for w, d in zip(ws, grads[::-1])]

    def loss(params, x, y, relu, mean):
        h = x
        for i, w in enumerate(params):
            h = h @ w
            if i < len(params) - 1:
                h = relu(h)
        return mean((h - y) ** 2)

    def nabla_fn():
        def step(params, x, y):
            g = nb.grad(lambda p: loss(p, x, y, nb.relu, nb.mean))(params)
            return [p - 0.01 * d for p, d in zip(params, g)]

        return step, ([nb.constant(w) for w in ws], nb.constant(x), nb.constant(y))

    def jax_fn():
        def step(params, x, y):
            g = jax.grad(lambda p: loss(p, x, y, jax.nn.relu, jnp.mean))(params)
            return [p - 0.01 * d for p, d in zip(params, g)]

        return jax.jit(step), ([jnp.asarray(w) for w in ws], jnp.asarray(x), jnp.asarray(y))

    def torch_fn():
        def step(params, x, y):
            params = [p.detach().requires_grad_() for p in params]
            loss(params, x, y, torch.relu, torch.mean).backward()
            return [p.detach() - 0.01 * p.grad for p in params]

        return step, ([torch.from_numpy(w) for w in ws], torch.from_numpy(x), torch.from_numpy(y))

    return ref, nabla_fn, jax_fn, torch_fn


def per_example_grads(d_in=64, d_h=128, batch=64):
    w1, w2 = f32(d_in, d_h, scale=0.1), f32(d_h, 1, scale=0.1)
    xs, ys = f32(batch, d_in), f32(batch, 1)

    def ref():
        h = np.tanh(xs @ w1)
        r = 2 * (h @ w2 - ys)  # (B, 1)
        return np.einsum("bi,bj->bij", xs, (r @ w2.T) * (1 - h**2))

    def nabla_fn():
        g = nb.grad(lambda w, x, y: ((nb.tanh(x @ w) @ nb.constant(w2) - y) ** 2).sum())
        return nb.vmap(g, in_axes=(None, 0, 0)), (nb.constant(w1), nb.constant(xs), nb.constant(ys))

    def jax_fn():
        w2j = jnp.asarray(w2)
        g = jax.grad(lambda w, x, y: ((jnp.tanh(x @ w) @ w2j - y) ** 2).sum())
        return jax.jit(jax.vmap(g, in_axes=(None, 0, 0))), (
            jnp.asarray(w1),
            jnp.asarray(xs),
            jnp.asarray(ys),
        )

    def torch_fn():
        from torch.func import grad, vmap

        w2t = torch.from_numpy(w2)
        g = grad(lambda w, x, y: ((torch.tanh(x @ w) @ w2t - y) ** 2).sum())
        return vmap(g, in_dims=(None, 0, 0)), tuple(map(torch.from_numpy, (w1, xs, ys)))

    return ref, nabla_fn, jax_fn, torch_fn


def jacobian(kind, n=256):
    w, x = f32(n, n, scale=1 / np.sqrt(n)), f32(n)

    def ref():
        return (1 - np.tanh(w @ x) ** 2)[:, None] * w

    def nabla_fn():
        wt = nb.constant(w)
        return getattr(nb, kind)(lambda v: nb.tanh(wt @ v)), (nb.constant(x),)

    def jax_fn():
        wj = jnp.asarray(w)
        return jax.jit(getattr(jax, kind)(lambda v: jnp.tanh(wj @ v))), (jnp.asarray(x),)

    def torch_fn():
        from torch.func import jacfwd, jacrev

        wt = torch.from_numpy(w)
        fn = {"jacrev": jacrev, "jacfwd": jacfwd}[kind](lambda v: torch.tanh(wt @ v))
        return fn, (torch.from_numpy(x),)

    return ref, nabla_fn, jax_fn, torch_fn


def elementwise(n=1 << 22):
    x = f32(n)

    def chain(v, tanh, exp):
        return exp(tanh(v)) * 2.0 + v * v - 1.0

    return (
        lambda: chain(x, np.tanh, np.exp),
        lambda: (lambda v: chain(v, nb.tanh, nb.exp), (nb.constant(x),)),
        lambda: (jax.jit(lambda v: chain(v, jnp.tanh, jnp.exp)), (jnp.asarray(x),)),
        lambda: (lambda v: chain(v, torch.tanh, torch.exp), (torch.from_numpy(x),)),
    )


def matmul(n=1024):
    a, b = f32(n, n), f32(n, n)
    return (
        lambda: a @ b,
        lambda: (lambda p, q: p @ q, (nb.constant(a), nb.constant(b))),
        lambda: (jax.jit(lambda p, q: p @ q), (jnp.asarray(a), jnp.asarray(b))),
        lambda: (lambda p, q: p @ q, (torch.from_numpy(a), torch.from_numpy(b))),
    )


def hvp(n=1000):
    w, x, v = f32(n, n, scale=1 / np.sqrt(n)), f32(n), f32(n)

    def ref():  # f(x) = sum(tanh(W x)): H v = W^T diag(-2 t (1 - t^2)) W v
        t = np.tanh(w @ x)
        return w.T @ (-2 * t * (1 - t**2) * (w @ v))

    def nabla_fn():
        wt = nb.constant(w)
        g = nb.grad(lambda z: nb.tanh(wt @ z).sum())
        return (lambda z, u: nb.jvp(g, (z,), (u,))[1]), (nb.constant(x), nb.constant(v))

    def jax_fn():
        wj = jnp.asarray(w)
        g = jax.grad(lambda z: jnp.tanh(wj @ z).sum())
        return jax.jit(lambda z, u: jax.jvp(g, (z,), (u,))[1]), (jnp.asarray(x), jnp.asarray(v))

    def torch_fn():
        from torch.func import grad, jvp

        wt = torch.from_numpy(w)
        g = grad(lambda z: torch.tanh(wt @ z).sum())
        return (lambda z, u: jvp(g, (z,), (u,))[1]), (torch.from_numpy(x), torch.from_numpy(v))

    return ref, nabla_fn, jax_fn, torch_fn


def transformer_block(batch=16, seq=64, d=128, heads=4, ff=512):
    """A pre-norm transformer block (4-head attention, ReLU MLP), loss ``mean(out ** 2)``,
    forward and gradients of every weight. Checked against NumPy: the loss, and the
    gradient along a random direction against a float64 central difference of the loss."""
    shapes = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d)}
    shapes.update({"w1": (d, ff), "w2": (ff, d), "g1": (d,), "g2": (d,)})
    names = sorted(shapes)
    params = {
        k: f32(*s, scale=1 / np.sqrt(s[0])) if len(s) == 2 else 1 + f32(*s, scale=0.1)
        for k, s in shapes.items()
    }
    x = f32(batch, seq, d)
    direction = {k: f32(*s) for k, s in shapes.items()}
    dh = d // heads

    def block(p, x, m):
        def norm(v, g):
            mu = m.mean(v, -1)
            var = m.mean((v - mu) ** 2, -1)
            return (v - mu) / m.sqrt(var + 1e-5) * g

        def split(v):  # (B, T, D) -> (B, H, T, Dh)
            return m.swap(m.reshape(v, (batch, seq, heads, dh)), 1, 2)

        h = norm(x, p["g1"])
        q, k, v = split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"])
        att = m.softmax((q @ m.swap(k, 2, 3)) * (1.0 / np.sqrt(dh)))
        o = m.reshape(m.swap(att @ v, 1, 2), (batch, seq, d)) @ p["wo"]
        x = x + o
        x = x + m.relu(norm(x, p["g2"]) @ p["w1"]) @ p["w2"]
        return m.mean(x * x, None)

    def np_softmax(v):
        e = np.exp(v - v.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    npm = _Ops(
        mean=lambda v, a: v.mean() if a is None else v.mean(a, keepdims=True),
        sqrt=np.sqrt,
        swap=np.swapaxes,
        reshape=np.reshape,
        softmax=np_softmax,
        relu=lambda v: np.maximum(v, 0),
    )

    def ref():
        loss = block(params, x, npm)
        p64 = {k: v.astype(np.float64) for k, v in params.items()}
        eps = 1e-4
        plus = block({k: p64[k] + eps * direction[k] for k in names}, x.astype(np.float64), npm)
        minus = block({k: p64[k] - eps * direction[k] for k in names}, x.astype(np.float64), npm)
        return [loss, (plus - minus) / (2 * eps)]

    def check(got, want):
        loss, grads = got[0], got[1:]
        along = sum(
            float((g.astype(np.float64) * direction[k]).sum()) for k, g in zip(names, grads)
        )
        np.testing.assert_allclose(loss, want[0], rtol=1e-4, err_msg="transformer loss")
        np.testing.assert_allclose(along, want[1], rtol=5e-3, err_msg="transformer gradient")

    def nabla_fn():
        m = _Ops(
            mean=lambda v, a: nb.mean(v) if a is None else nb.mean(v, axis=a, keepdims=True),
            sqrt=nb.sqrt,
            swap=nb.swap_axes,
            reshape=nb.reshape,
            softmax=lambda v: nb.softmax(v, axis=-1),
            relu=nb.relu,
        )

        def step(p, x):
            loss, g = nb.value_and_grad(lambda p: block(p, x, m))(p)
            return [loss] + [g[k] for k in names]

        return step, ({k: nb.constant(v) for k, v in params.items()}, nb.constant(x))

    def jax_fn():
        m = _Ops(
            mean=lambda v, a: jnp.mean(v) if a is None else jnp.mean(v, a, keepdims=True),
            sqrt=jnp.sqrt,
            swap=jnp.swapaxes,
            reshape=jnp.reshape,
            softmax=lambda v: jax.nn.softmax(v, axis=-1),
            relu=jax.nn.relu,
        )

        def step(p, x):
            loss, g = jax.value_and_grad(lambda p: block(p, x, m))(p)
            return [loss] + [g[k] for k in names]

        return jax.jit(step), ({k: jnp.asarray(v) for k, v in params.items()}, jnp.asarray(x))

    def torch_fn():
        m = _Ops(
            mean=lambda v, a: v.mean() if a is None else v.mean(a, keepdim=True),
            sqrt=torch.sqrt,
            swap=torch.transpose,
            reshape=torch.reshape,
            softmax=lambda v: torch.softmax(v, -1),
            relu=torch.relu,
        )

        def step(p, x):
            p = {k: v.detach().requires_grad_() for k, v in p.items()}
            loss = block(p, x, m)
            loss.backward()
            return [loss.detach()] + [p[k].grad for k in names]

        return step, ({k: torch.from_numpy(v) for k, v in params.items()}, torch.from_numpy(x))

    return ref, nabla_fn, jax_fn, torch_fn, check


class _Ops:
    """The few functions a workload spells differently in each framework."""

    def __init__(self, **fns):
        self.__dict__.update(fns)


WORKLOADS = {
    "MLP train step": mlp_step,
    "per-example grads": per_example_grads,
    "jacrev tanh(Wx)": lambda: jacobian("jacrev"),
    "jacfwd tanh(Wx)": lambda: jacobian("jacfwd"),
    "elementwise 4M": elementwise,
    "matmul 1024": matmul,
    "HVP n=1000": hvp,
    "transformer block": transformer_block,
}


# ----------------------------------------------------------------------------- running
def _numpy(out):
    if isinstance(out, list | tuple):
        return [_numpy(o) for o in out]
    if isinstance(out, nb.Tensor):
        return out.numpy()
    if torch is not None and isinstance(out, torch.Tensor):
        return out.detach().numpy()
    return np.asarray(out)


def _plans(fn) -> list:
    """The plans of a compiled function (a hit on realized arguments runs its plan's
    program at the call, without the graph cache)."""
    cache = getattr(fn, "_cache", None)
    return [p for p in (cache or {}).values() if hasattr(p, "program")]


def _settle(call, backend, fn=None, timeout=900.0):
    """Under ``auto``, call until every program the call runs is past its MAX compile (or
    known to stay on NumPy) and its executor race (``nabla.runtime.executor.Race``), so the
    timing sees the steady state rather than the interpreter sharing the cores with a
    background compile. ``fn``: the function called, whose compiled plans count too."""
    if backend != "auto":
        return
    from nabla.backends.max import session
    from nabla.core.config import CONFIG
    from nabla.runtime.graph import GRAPH

    races = getattr(CONFIG, "auto_race", False)  # older nabla: no race to wait for

    def settled(p):
        race = p.executables.get("race")
        if race is not None and race.winner is not None:
            return True  # raced (or settled from an earlier run's race: no MAX model then)
        if session.pending_compile(p):
            return False
        if "max" not in p.executables:
            return session.ident(p) in session._UNSUPPORTED
        return not races

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = {id(e.program): e.seen for e in GRAPH.cache.values()}
        calls = {id(p): getattr(p, "calls", 0) for p in _plans(fn)}
        call()
        used = [e.program for e in GRAPH.cache.values() if e.seen != before.get(id(e.program))]
        used += [p.program() for p in _plans(fn) if getattr(p, "calls", 0) != calls.get(id(p))]
        if all(settled(p) for p in used):
            return
        if any(session.pending_compile(p) for p in used):
            time.sleep(0.05)  # leave the cores to the compile; a race runs back to back
    print("  (timed out waiting for MAX compiles)")


def _warm(call, calls=60, seconds=0.5):
    """Calls before timing, for every column alike, until both ``calls`` calls and
    ``seconds`` have passed: MAX's calls after a load (and the first calls of any runtime)
    run several times slower for tens of calls, and a runtime whose worker threads parked
    during the pause before the column needs a stretch of calls to speed up again (JAX's
    per-example-gradient call: 0.2-0.3 ms for the first few hundred calls after a 0.2 s
    pause, 0.08 ms from there on, on this 2-core machine)."""
    deadline = time.perf_counter() + seconds
    done = 0
    while done < calls or time.perf_counter() < deadline:
        call()
        done += 1


def _check(name, got, want):
    for g, w in zip(
        got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]
    ):
        np.testing.assert_allclose(g, w, rtol=2e-3, atol=2e-4, err_msg=name)


def _best_of_rounds_ms(calls: dict, reps: int, rounds: int = 3) -> dict:
    """Per column, the best over ``rounds`` rounds of the median ms of ``reps`` calls; each
    round times every column in turn, each after at least 60 untimed calls and 0.5 s of
    them (``_warm``). This machine's speed drifts by up to 2x over seconds: repeating the
    rounds gives every column its steady state in a quiet stretch, so the ratios hold
    within one run. Blocks rather than alternating calls, each after a pause: a runtime's
    threads keep spinning for a while after its calls (OpenBLAS's for ~0.1 s, slowing MAX's
    calls 3-5x on 2 cores) and would slow the next column's calls."""

    def before(call):
        time.sleep(0.2)  # the last column's spinning threads park (OpenBLAS: ~0.1 s)
        _warm(call)

    return best_of_rounds_ms(calls, reps, rounds, warmup=0, before=before)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="auto", choices=["auto", "numpy", "max"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default=None, help="run the workloads whose name contains this")
    args = ap.parse_args()
    nb.set_backend(args.backend)
    cols = ["NumPy", "nabla lazy", "nabla compile", "JAX jit", "PyTorch"]
    print(
        f"backend={args.backend}; best of 3 rounds of the median ms of {args.reps} calls; "
        f"ratio = compile / fastest peer (load average {os.getloadavg()[0]:.1f} at start)"
    )
    print(blas_kernel())
    print(f"{'workload':<20}" + "".join(f"{c:>15}" for c in cols) + f"{'ratio':>8}")
    for name, make in WORKLOADS.items():
        if args.only and args.only not in name:
            continue
        ref, nabla_fn, jax_fn, torch_fn, *custom = make()
        check = custom[0] if custom else (lambda got, want, name=name: _check(name, got, want))
        want = _numpy(ref())
        calls = {}
        if not custom:  # the by-hand NumPy reference is itself a baseline
            calls["NumPy"] = ref
        fn, fargs = nabla_fn()
        compiled = nb.compile(fn)
        for col, f in (("nabla lazy", fn), ("nabla compile", compiled)):
            check(_numpy(f(*fargs)), want)
            _settle(lambda f=f: nb.realize(f(*fargs)), args.backend, f)
            calls[col] = lambda f=f: nb.realize(f(*fargs))
        if jax is not None:
            jf, jargs = jax_fn()
            check(_numpy(jf(*jargs)), want)
            calls["JAX jit"] = lambda: jax.block_until_ready(jf(*jargs))
        if torch is not None:
            tf, targs = torch_fn()
            check(_numpy(tf(*targs)), want)
            calls["PyTorch"] = lambda: tf(*targs)
        row = _best_of_rounds_ms(calls, args.reps)
        peers = [row[c] for c in ("JAX jit", "PyTorch") if c in row]
        ratio = f"{row['nabla compile'] / min(peers):7.2f}x" if peers else "      -"
        cells = "".join(f"{row[c]:>15.3f}" if c in row else f"{'-':>15}" for c in cols)
        print(f"{name:<20}{cells}{ratio}  [load {os.getloadavg()[0]:.1f}]", flush=True)


if __name__ == "__main__":
    main()
