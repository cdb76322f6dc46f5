"""Python overhead of nabla's lazy op pipeline, and of realizing a small elementwise graph.

(a) Recording one lazy op (no realization): ``x + y`` on same-shape float32 tensors, a lazy
    unary op, an op with a Python scalar, and a few other common call shapes. Reported as
    microseconds per call: the median (and min) over batches of calls.
(b) A 20-op elementwise chain on a (256, 256) float32 tensor, built lazily and realized with
    the ``numpy`` backend: *cold* (program-cache miss: key + program built, interpreter
    prepared) and *warm* (program-cache hit), beside NumPy running the same 20 ops directly.
    The chain is also split into "record 20 lazy ops" and "evaluate".
(c) A cache hit of a compiled tiny function (``nb.compile``), no realization.

Issue target: under 15 us per lazy binary op.

Run: ``python benchmarks/bench_overhead.py`` (about 10 s; ``--quick`` for a 2 s smoke run).
``--profile`` adds a cProfile breakdown of ``x + y`` and ``x * 2.0`` (the pipeline in
``Operation.bind``, ``Tensor._wrap``, argument normalization). ``--max`` also times the chain
on the MAX backend when it is installed (its cold number includes a MAX compile).

Timings on a loaded machine are noisy: compare the min column between runs.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import nabla as nb  # noqa: E402
from nabla.runtime.graph import GRAPH  # noqa: E402

TARGET_US = 15.0
SHAPE = (256, 256)
N_CHAIN = 20


# ----------------------------------------------------------------------------- helpers
def per_call_us(fn, batch: int, batches: int) -> tuple[float, float]:
    """(median, min) microseconds per call of ``fn()`` over ``batches`` batches of ``batch``."""
    for _ in range(batch):  # warm up
        fn()
    times = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            times.append((time.perf_counter() - t0) / batch)
    finally:
        if gc_was:
            gc.enable()
    return 1e6 * statistics.median(times), 1e6 * min(times)


def cpu_us(fn, batch: int, batches: int) -> float:
    """The best over ``batches`` of the CPU time of this thread per call of ``fn()``, in
    microseconds: on a loaded machine the wall clock also counts the time the thread waited
    for a core, and that differs between two runs more than what is measured."""
    for _ in range(batch):
        fn()
    best = float("inf")
    for _ in range(batches):
        t0 = time.thread_time()
        for _ in range(batch):
            fn()
        best = min(best, (time.thread_time() - t0) / batch)
    return 1e6 * best


def timed_ms(fn, reps: int, setup=None) -> tuple[float, float]:
    """(median, min) milliseconds of ``fn()``; ``setup()`` runs untimed before each rep."""
    times = []
    for _ in range(reps):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times), 1e3 * min(times)


def table(title, header, rows):
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")
    line = "  ".join(str(h).ljust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


# ----------------------------------------------------------------------------- (a) lazy ops
def bench_lazy_ops(quick: bool):
    rng = np.random.default_rng(0)
    x = nb.constant(rng.standard_normal(SHAPE).astype(np.float32))
    y = nb.constant(rng.standard_normal(SHAPE).astype(np.float32))
    row = nb.constant(rng.standard_normal(SHAPE[1:]).astype(np.float32))
    cases = [
        ("x + y  (binary, same shape)", lambda: x + y, True),
        ("nb.add(x, y)", lambda: nb.add(x, y), False),
        ("nb.exp(x)  (unary)", lambda: nb.exp(x), False),
        ("-x  (unary operator)", lambda: -x, False),
        ("x * 2.0  (Python scalar)", lambda: x * 2.0, False),
        ("x + row  (broadcast (256,))", lambda: x + row, False),
        ("x.sum(axis=0)  (reduction)", lambda: x.sum(axis=0), False),
        ("x.reshape(-1)  (view)", lambda: x.reshape(-1), False),
    ]
    batch, batches = (100, 10) if quick else (200, 60)
    rows = []
    results = {}
    for name, fn, has_target in cases:
        med, mn = per_call_us(fn, batch, batches)
        results[name] = med
        verdict = ("ok" if med < TARGET_US else "ABOVE") if has_target else ""
        rows.append(
            (name, f"{med:7.2f}", f"{mn:7.2f}", f"< {TARGET_US:g}" if has_target else "", verdict)
        )
    table(
        f"(a) lazy op call overhead, no realization  [{SHAPE} float32]",
        ("call", "median us", "min us", "target", ""),
        rows,
    )
    return results


# ----------------------------------------------------------------------------- (c) compile hit
def bench_compile_hit(quick: bool):
    """A cache hit of a compiled tiny function: signature, lookup, one ``compiled_call``
    node (no realization)."""
    f = nb.compile(lambda a, b: a * b + 1.0)
    a, b = nb.ones((4,)), nb.ones((4,))
    f(a, b)
    batch, batches = (100, 10) if quick else (200, 60)
    med, mn = per_call_us(lambda: f(a, b), batch, batches)
    table(
        "(c) nb.compile cache hit, tiny function, no realization",
        ("call", "median us", "min us"),
        [("f(a, b) = a * b + 1.0, hit", f"{med:7.2f}", f"{mn:7.2f}")],
    )
    return med


# ----------------------------------------------------------------------------- (d) tiny call
def _tiny_pieces(f, x, batch, batches) -> list:
    """The pieces of one realized hit of ``f(x)``, each timed alone on the code the call
    runs: the signature (cache key), the plan lookup with its captured-input and fast-path
    checks, the executor (backend choice and the program run), the result wrapping."""
    from nabla.core.ir import TensorImpl
    from nabla.runtime.executor import run_program

    compile_mod = sys.modules["nabla.transforms.compile"]  # the package exports the function

    plan = f._lookup(f._signature((x,), {}).key)
    program = plan.program()
    consts, _ = plan.call_inputs(f.fun)
    buffers = [x._impl.buffer] + [c.buffer for c in consts]
    shapes, dtypes, _ = plan.call_layouts()
    out = run_program(program, plan.calls, buffers)
    device = x.device

    def lookup():
        entry = f._lookup(key)
        impls, _ = entry.call_inputs(f.fun)
        compile_mod._takes_fast_path(entry, [x], impls)
        compile_mod._runs_now(entry, [x], impls)

    def wrap():
        leaves = [
            nb.Tensor._wrap(TensorImpl(sh, dt, device, (), None, 0, o))
            for sh, dt, o in zip(shapes, dtypes, out)
        ]
        return nb.tree_unflatten(plan.out_tree, leaves)

    key = f._signature((x,), {}).key
    pieces = [
        ("signature (cache key)", lambda: f._signature((x,), {})),
        ("plan lookup + checks", lookup),
        ("executor (choice + run)", lambda: run_program(program, plan.calls, buffers)),
        ("result wrapping", wrap),
    ]
    return [(name, _both(fn, batch, batches)) for name, fn in pieces]


def _both(fn, batch, batches) -> tuple[float, float]:
    """(median wall us, best CPU us) per call."""
    return per_call_us(fn, batch, batches)[0], cpu_us(fn, batch, batches)


def bench_tiny_call(quick: bool):
    """``x * 2 + 1`` on 8 floats, compiled, realized at every call: the whole call beside
    ``jax.jit`` and NumPy, and the call piece by piece (the executor is the settled one of
    the backend in force: under ``auto``, after MAX's compile and the race). Two columns:
    the median wall time, and the best CPU time of the calling thread (steadier on a loaded
    machine; JAX's runtime threads are not counted in it)."""
    batch, batches = (200, 10) if quick else (500, 40)
    xa = np.arange(8, dtype=np.float32)
    x = nb.constant(xa)
    f = nb.compile(lambda a: a * 2 + 1)
    np.testing.assert_allclose(f(x).numpy(), xa * 2 + 1)
    _settle_tiny(f, x)

    def row(name, us):
        return (name, f"{us[0]:7.2f}", f"{us[1]:7.2f}")

    whole = _both(lambda: f(x), batch, batches)
    rows = [row("nb.compile: f(x), realized", whole)]
    pieces = _tiny_pieces(f, x, batch, batches)
    rows += [row(f"  {name}", us) for name, us in pieces]
    rows.append(row("  sum of the pieces", [sum(us[i] for _, us in pieces) for i in (0, 1)]))
    rows.append(row("numpy: xa * 2 + 1", _both(lambda: xa * 2 + 1, batch, batches)))
    # a JAX-style step's arguments: a pytree of parameters beside the batch
    params = {"w": nb.constant(xa), "b": nb.constant(xa + 1)}
    fp = nb.compile(lambda p, a: a * p["w"] + p["b"])
    np.testing.assert_allclose(fp(params, x).numpy(), xa * xa + xa + 1)
    _settle_tiny(fp, params, x)
    tree = _both(lambda: fp(params, x), batch, batches)
    rows.append(row("nb.compile: f(params, x), params a dict of 2", tree))
    try:
        import jax
        import jax.numpy as jnp
    except Exception:  # noqa: BLE001 - any import problem: no JAX row
        jax = None
    if jax is not None:
        fj = jax.jit(lambda a: a * 2 + 1)
        xj = jnp.asarray(xa)
        fj(xj).block_until_ready()
        jax_us = _both(lambda: fj(xj).block_until_ready(), batch, batches)
        rows.append(row("jax.jit: f(x), block_until_ready", jax_us))
        ratio = [whole[i] / jax_us[i] for i in (0, 1)]
        rows.append(("ratio nb.compile / jax.jit", f"{ratio[0]:6.2f}x", f"{ratio[1]:6.2f}x"))
        fpj = jax.jit(lambda p, a: a * p["w"] + p["b"])
        pj = {"w": jnp.asarray(xa), "b": jnp.asarray(xa + 1)}
        fpj(pj, xj).block_until_ready()
        jax_tree = _both(lambda: fpj(pj, xj).block_until_ready(), batch, batches)
        rows.append(row("jax.jit: f(params, x), block_until_ready", jax_tree))
        ratio = [tree[i] / jax_tree[i] for i in (0, 1)]
        rows.append(("ratio, params a dict", f"{ratio[0]:6.2f}x", f"{ratio[1]:6.2f}x"))
    table(
        f"(d) tiny compiled call, x * 2 + 1 on 8 float32, backend={nb.get_backend_name()}, "
        f"load average {os.getloadavg()[0]:.1f}",
        ("what", "median us", "best cpu us"),
        rows,
    )


def _settle_tiny(f, *args, timeout=120.0):
    """Under ``auto``, call until the tiny program's MAX compile and race are over."""
    if nb.get_backend_name() != "auto":
        return
    from nabla.backends import max_available

    deadline = time.monotonic() + timeout
    plan = f._lookup(f._signature(args, {}).key)
    while time.monotonic() < deadline:
        f(*args)
        ex = plan.program().executables
        race = ex.get("race")
        if race is not None and race.winner is not None:
            return
        if not max_available() or plan.calls > 50 and "max" not in ex and not _compiling(plan):
            return
        time.sleep(0.001)


def _compiling(plan) -> bool:
    from nabla.backends.max import session

    return session.pending_compile(plan.program()) is not None


# ----------------------------------------------------------------------------- (b) chain
def nabla_chain(x, w):
    for _ in range(N_CHAIN // 4):
        x = x * w
        x = x + 0.5
        x = nb.tanh(x)
        x = x - w
    return x


def numpy_chain(x, w):
    for _ in range(N_CHAIN // 4):
        x = x * w
        x = x + np.float32(0.5)
        x = np.tanh(x)
        x = x - w
    return x


def bench_chain(backend: str, quick: bool, reps_warm: int | None = None):
    rng = np.random.default_rng(1)
    xa = rng.standard_normal(SHAPE).astype(np.float32)
    wa = (rng.random(SHAPE) + 0.5).astype(np.float32)
    x, w = nb.constant(xa), nb.constant(wa)
    expected = numpy_chain(xa, wa)

    def run():
        return nabla_chain(x, w).numpy()

    def record_only():
        return nabla_chain(x, w)

    saved = dict(GRAPH.cache)
    rows = []
    with nb.backend(backend):
        GRAPH.clear_cache()
        t0 = time.perf_counter()
        out = run()
        first_ms = 1e3 * (time.perf_counter() - t0)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
        reps_cold = 1 if backend == "max" else (5 if quick else 30)
        if reps_cold > 1:
            cold = timed_ms(run, reps_cold, setup=GRAPH.clear_cache)
        else:
            cold = (first_ms, first_ms)
        run()  # make sure the structure is cached
        reps = reps_warm or (10 if quick else 100)
        warm = timed_ms(run, reps)
        rec = timed_ms(record_only, reps)
        pending = []

        def setup_eval():
            pending[:] = [record_only()]

        evl = timed_ms(lambda: pending[0].realize(), reps, setup=setup_eval)
    GRAPH.cache.update(saved)
    npy = timed_ms(lambda: numpy_chain(xa, wa), 10 if quick else 100)

    rows.append((f"nabla/{backend}: first call in process", f"{first_ms:8.3f}", ""))
    rows.append(
        (f"nabla/{backend}: cold (program-cache miss)", f"{cold[0]:8.3f}", f"{cold[1]:8.3f}")
    )
    rows.append(
        (f"nabla/{backend}: warm (program-cache hit)", f"{warm[0]:8.3f}", f"{warm[1]:8.3f}")
    )
    rows.append(("  of which: record 20 lazy ops", f"{rec[0]:8.3f}", f"{rec[1]:8.3f}"))
    rows.append(("  of which: evaluate (cache hit)", f"{evl[0]:8.3f}", f"{evl[1]:8.3f}"))
    rows.append(("numpy: same 20 ops directly", f"{npy[0]:8.3f}", f"{npy[1]:8.3f}"))
    over = (warm[0] - npy[0]) * 1e3 / N_CHAIN
    rows.append(("warm overhead vs numpy, per op (us)", f"{over:8.2f}", ""))
    table(
        f"(b) {N_CHAIN}-op elementwise chain on {SHAPE} float32, backend={backend}",
        ("what", "median ms", "min ms"),
        rows,
    )


# ----------------------------------------------------------------------------- profile
def profile_lazy_ops(n: int = 20000):
    x = nb.constant(np.ones(SHAPE, np.float32))
    y = nb.constant(np.ones(SHAPE, np.float32))
    for label, fn in [("x + y", lambda: x + y), ("x * 2.0", lambda: x * 2.0)]:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n):
            fn()
        prof.disable()
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf).sort_stats("tottime")
        stats.print_stats(14)
        text = buf.getvalue()
        start = text.find("   ncalls")
        print(f"\ncProfile of {n} x `{label}` (sorted by own time; profiler inflates times ~2x)")
        print(text[start:].rstrip())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="few repetitions (smoke test)")
    p.add_argument("--profile", action="store_true", help="cProfile the lazy-op pipeline")
    p.add_argument("--max", action="store_true", help="also time the chain on MAX")
    args = p.parse_args(argv)

    print(f"nabla {nb.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}")
    res = bench_lazy_ops(args.quick)
    bench_compile_hit(args.quick)
    bench_tiny_call(args.quick)
    bench_chain("numpy", args.quick)
    if args.max:
        from nabla.backends import max_available

        if max_available():
            bench_chain("max", args.quick, reps_warm=10 if args.quick else 50)
        else:
            print("\n(MAX is not installed: skipping --max)")
    if args.profile:
        profile_lazy_ops(2000 if args.quick else 20000)
    binary = res["x + y  (binary, same shape)"]
    status = "meets" if binary < TARGET_US else "MISSES"
    print(f"\nlazy binary op: {binary:.2f} us/call median -> {status} the {TARGET_US:g} us target")


if __name__ == "__main__":
    main()
