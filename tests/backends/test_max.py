"""MAX backend: parity with the NumPy backend for every op, caches, the auto tier, errors.

A cold MAX compile costs ~20 s per graph plus time for every new kernel, so each parity test
builds ONE large program (many ops, realized with one ``nb.realize``) and runs the same code
on both backends; the parity graphs are compiled ahead in subprocesses (see "prewarming").
``test_every_lowering_is_exercised`` checks that, together, the parity programs use every op
name in the NumPy lowering table (ops declared in ``UNSUPPORTED`` excepted). Cold (fresh
``HOME``) the module takes ~4 min on 2 cores; warm (``.mef`` cache filled) ~4 s.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

pytest.importorskip("max.graph")

import nabla as nb  # noqa: E402
from nabla.backends import max as mx  # noqa: E402
from nabla.backends.numpy import LOWERINGS as NP_LOWERINGS  # noqa: E402
from nabla.core.config import CONFIG  # noqa: E402
from nabla.runtime.graph import GRAPH  # noqa: E402

pytestmark = pytest.mark.max

if not mx.available():  # pragma: no cover
    pytest.skip("MAX is not importable", allow_module_level=True)

COVERED: set = set()
TOL = {
    "float64": (1e-9, 1e-10),
    "float32": (2e-5, 2e-6),
    "float16": (2e-3, 2e-3),
    "bfloat16": (2e-2, 2e-2),
}


# ----------------------------------------------------------------------------- prewarming
# A cold MAX compile is mostly single-threaded. The parity graphs are compiled ahead in
# subprocesses (NABLA_TEST_MAX_JOBS of them, default 3; 0 or 1: none) that fill the .mef
# cache; each parity test waits for its graph's file and then loads it (ms). Should a
# subprocess fail, the test compiles the graph itself and reports what went wrong.
GROUPS = {
    2: [
        ["float_graph", "dtype_graph", "sharded_graph"],
        ["int_graph", "gather_graph", "control_graph"],
    ],
    3: [
        ["float_graph"],
        ["int_graph", "control_graph", "sharded_graph"],
        ["gather_graph", "dtype_graph"],
    ],
}
JOBS = int(os.environ.get("NABLA_TEST_MAX_JOBS", "3"))
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def prewarm(names):
    """Compile the named parity graphs into the disk cache (run in a subprocess)."""
    for name in names:
        with nb.backend("max"):
            out = globals()[name]()
            nb.realize(*out.values())


def _env(**extra):
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, env.get("PYTHONPATH", "")])
    return env


PARITY_TESTS = {
    "test_float32_graph_matches_numpy": "float_graph",
    "test_int_bool_graph_matches_numpy": "int_graph",
    "test_gather_scatter_graph_matches_numpy": "gather_graph",
    "test_float64_float16_bfloat16_graph_matches_numpy": "dtype_graph",
    "test_control_flow_graph_matches_numpy": "control_graph",
    "test_sharded_graph_matches_numpy": "sharded_graph",
}


@pytest.fixture(scope="module", autouse=True)
def prewarm_jobs(request):
    procs = {}
    selected = {PARITY_TESTS.get(item.name) for item in request.session.items}
    if JOBS > 1:
        groups = GROUPS.get(JOBS) or [[n] for g in GROUPS[3] for n in g]
        for group in groups:
            group = [n for n in group if n in selected]
            if not group:
                continue
            code = f"import test_max; test_max.prewarm({group!r})"
            p = subprocess.Popen(
                [sys.executable, "-c", code],
                env=_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name in group:
                procs[name] = p
    yield procs
    for p in set(procs.values()):
        if p.poll() is None:
            p.kill()
            p.wait()


def _wait_for_prewarm(procs, name, prog):
    from nabla.backends.max import cache
    from nabla.backends.max.disk import DISK

    p = procs.get(name)
    digest = cache.program_digest(prog)
    if p is None or digest is None:
        return
    while not DISK.has(digest) and p.poll() is None:
        time.sleep(0.5)


# ----------------------------------------------------------------------------- helpers
def _last_program():
    return GRAPH.programs()[-1]


def run_both(build, tol=None, procs=None):
    """Run ``build() -> {name: Tensor}`` on NumPy and on MAX (one program each); compare."""
    with nb.backend("numpy"):
        ref = build()
        nb.realize(*ref.values())
        ref = {k: v.numpy() for k, v in ref.items()}
    if procs is not None:
        _wait_for_prewarm(procs, build.__name__, _last_program())
    before = mx.stats()
    with nb.backend("max"):
        got = build()
        nb.realize(*got.values())
        prog = _last_program()
        got = {k: v.numpy() for k, v in got.items()}
    after = mx.stats()
    made = (after["compiles"] - before["compiles"]) + (after["disk_hits"] - before["disk_hits"])
    made += after["memory_hits"] - before["memory_hits"]
    assert made == 1, "the parity graph must be one program"
    assert "max" in prog.executables
    COVERED.update(i.op for i in prog.instructions)
    bad = differences(ref, got, tol)
    assert not bad, "MAX differs from NumPy:\n" + "\n".join(bad)
    return prog


def differences(ref: dict, got: dict, tol=None) -> list:
    """Where the arrays ``got`` differ from ``ref`` (dtype, shape, exact for integers, within
    ``TOL`` or ``tol[name]`` for floats, NaN equal to NaN), one line each."""
    bad = []
    for k in ref:
        a, b = ref[k], got[k]
        if a.dtype != b.dtype or a.shape != b.shape:
            bad.append(f"{k}: numpy {a.dtype}{a.shape} vs max {b.dtype}{b.shape}")
            continue
        if a.dtype.kind in "biu":
            if not np.array_equal(a, b):
                bad.append(f"{k}: {a.ravel()[:8]} vs {b.ravel()[:8]}")
            continue
        rtol, atol = (tol or {}).get(k, TOL[a.dtype.name])
        if not np.allclose(
            a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True
        ):
            err = np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)))
            bad.append(f"{k}: max abs err {err:.3g}: {a.ravel()[:4]} vs {b.ravel()[:4]}")
    return bad


def c(a, dtype=None):
    return nb.constant(np.asarray(a) if dtype is None else np.asarray(a, dtype=dtype))


# ----------------------------------------------------------------------------- caches and tiers
SMALL_SRC = textwrap.dedent(
    """
    import numpy as np
    import nabla as nb

    def small(v):
        x = nb.constant(np.asarray(v, dtype=np.float32))
        return (nb.tanh(x * 3.0) + x).sum(axis=0)

    VALUES = [np.arange(10, dtype=np.float32).reshape(5, 2) / 7 + k for k in range(3)]
    """
)


def _small_ns():
    ns: dict = {}
    exec(SMALL_SRC, ns)
    return ns


def _small_ref(v):
    v = np.asarray(v, dtype=np.float32)
    return (np.tanh(v * 3.0) + v).sum(axis=0)


@pytest.fixture(scope="session")
def max_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("nabla_max_cache")


def test_background_compile_then_disk_cache_in_a_second_process(max_cache_dir, monkeypatch):
    from nabla.backends.max import session

    monkeypatch.setenv("NABLA_CACHE_DIR", str(max_cache_dir))
    monkeypatch.setattr(CONFIG, "background_compile", True)
    monkeypatch.setattr(CONFIG, "auto_threshold", 1)
    GRAPH.clear_cache()
    mx.clear_caches()
    ns = _small_ns()
    before = mx.stats()
    with nb.backend("auto"):
        out = ns["small"](ns["VALUES"][0])
        np.testing.assert_allclose(out.numpy(), _small_ref(ns["VALUES"][0]), rtol=1e-6)
        prog = _last_program()
        fut = session.pending_compile(prog)
        assert fut is not None, "the first auto call should start a background compile"
        assert "max" not in prog.executables  # served by NumPy meanwhile
        # (generous: on a machine whose Mojo caches are cold, this small compile shares two
        # cores with the parity graphs' prewarm compiles; it was seen to take 14 minutes)
        fut.result(timeout=2400)
        out = ns["small"](ns["VALUES"][1])
        np.testing.assert_allclose(out.numpy(), _small_ref(ns["VALUES"][1]), rtol=1e-5)
        assert "max" in prog.executables
    after = mx.stats()
    assert after["background_compiles"] == before["background_compiles"] + 1
    assert after["compiles"] == before["compiles"] + 1
    assert after["disk_writes"] == before["disk_writes"] + 1
    assert list(max_cache_dir.glob("*.mef"))

    script = SMALL_SRC + textwrap.dedent(
        """
        from nabla.backends import max as mx
        with nb.backend("max"):
            r = small(VALUES[2]).numpy()
        print(repr(r.tolist()), mx.stats()["disk_hits"], mx.stats()["compiles"])
        """
    )
    env = _env(NABLA_CACHE_DIR=str(max_cache_dir))
    res = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    vals, hits, compiles = res.stdout.strip().splitlines()[-1].rsplit(" ", 2)
    assert (int(hits), int(compiles)) == (1, 0), res.stdout
    np.testing.assert_allclose(eval(vals), _small_ref(ns["VALUES"][2]), rtol=1e-5)


def test_exit_never_waits_for_a_detached_compile(tmp_path):
    # With NABLA_COMPILE_DETACH=1 a compile in progress at exit is left to its worker
    # process, which caches the model for the next run: the exit itself is immediate and
    # clean (queued compiles are dropped; a thread inside MAX at interpreter finalization
    # used to abort the process, exit 134). By default the worker ends with the program
    # (test_compile_lifetime.py).
    script = SMALL_SRC + textwrap.dedent(
        """
        from nabla.core.config import CONFIG
        CONFIG.auto_threshold = 1
        import time
        from nabla.backends.max import session
        with nb.backend("auto"):
            small(VALUES[0]).numpy()  # starts a background compile
        while not session._CHILDREN:  # wait until the worker process runs, then exit
            time.sleep(0.001)
        print(next(iter(session._CHILDREN)))
        """
    )
    env = _env(
        NABLA_CACHE_DIR=str(tmp_path), NABLA_BACKGROUND_COMPILE="1", NABLA_COMPILE_DETACH="1"
    )
    res = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr
    worker = int(res.stdout.split()[-1])
    os.kill(worker, 0)  # still compiling: exit did not wait (ProcessLookupError otherwise)
    assert "finishing a background MAX compile" not in res.stderr
    assert "Error" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    deadline = time.monotonic() + 600
    while not list(tmp_path.glob("*.mef")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(tmp_path.glob("*.mef")), "the worker process should cache the model"


def test_second_evaluation_does_not_compile_again():
    ns = _small_ns()
    with nb.backend("max"):
        ns["small"](ns["VALUES"][0]).numpy()  # compiled, or loaded from a cache
        before = mx.stats()
        for v in ns["VALUES"]:
            out = ns["small"](v)
            np.testing.assert_allclose(out.numpy(), _small_ref(v), rtol=1e-5)
    after = mx.stats()
    for k in ("compiles", "disk_hits", "memory_hits", "background_compiles"):
        assert after[k] == before[k], k


def test_debug_nans_reruns_a_max_program_op_by_op():
    """The program runs on MAX; its NaN output is traced to the op that made it by running
    the same program again op by op (no new MAX graph: the small program's)."""
    ns = _small_ns()
    v = np.zeros((5, 2), np.float32)
    v[0, 1], v[1, 1] = np.inf, -np.inf  # the sum over axis 0 is inf + -inf
    with nb.backend("max"), nb.debug_nans():
        ns["small"](ns["VALUES"][0]).numpy()  # no NaN, no error
        with pytest.raises(FloatingPointError) as e:
            ns["small"](v).numpy()
    msg = str(e.value)
    assert msg.startswith("reduce_sum made NaN in 1 of 2 elements from operands without one")
    assert "<string>:7 in small" in msg and "operands: float32 (5, 2)" in msg
    program = next(p for p in GRAPH.programs() if p.output_specs[0][1] == (2,))
    assert "max" in program.executables  # the program itself ran on MAX


def test_executable_keeps_small_input_buffers_that_alias_the_array():
    """An input array that comes back keeps its Buffer (no wrap per call); the Buffer aliases
    the array, so a write to it between calls is seen, and a new array is wrapped anew."""
    ns = _small_ns()
    with nb.backend("max"):
        ns["small"](ns["VALUES"][0]).numpy()
    exe = _last_program().executables["max"]
    three = np.array(3.0, np.float32)
    v = ns["VALUES"][0].copy()
    np.testing.assert_allclose(exe([v, three])[0], _small_ref(v), rtol=1e-5)
    kept = exe._kept[0][1]
    v += 1.0  # in place: the same array object, new values
    np.testing.assert_allclose(exe([v, three])[0], _small_ref(v), rtol=1e-5)
    assert exe._kept[0][1] is kept
    w = ns["VALUES"][2]
    np.testing.assert_allclose(exe([w, three])[0], _small_ref(w), rtol=1e-5)
    assert exe._kept[0][0] is w
    strided = np.asfortranarray(ns["VALUES"][1])  # copied by the wrap: never kept
    np.testing.assert_allclose(exe([strided, three])[0], _small_ref(strided), rtol=1e-5)
    assert exe._kept[0][0] is w


def test_auto_switches_to_max_after_threshold(monkeypatch):
    monkeypatch.setattr(CONFIG, "background_compile", False)
    monkeypatch.setattr(CONFIG, "auto_threshold", 2)
    GRAPH.clear_cache()  # fresh Program objects ...
    mx.clear_caches()  # ... and no in-memory model: the switch must find or make one
    ns = _small_ns()
    vals = [v + 100 for v in ns["VALUES"]]  # new values, same structure
    with nb.backend("auto"):
        out = ns["small"](vals[0])
        np.testing.assert_allclose(out.numpy(), _small_ref(vals[0]), rtol=1e-5)
        prog = _last_program()
        before_seen = GRAPH.seen(prog)
        assert "max" not in prog.executables, "below the threshold auto interprets"
        out = ns["small"](vals[1])
        np.testing.assert_allclose(out.numpy(), _small_ref(vals[1]), rtol=1e-5)
        assert GRAPH.seen(prog) == before_seen + 1
        assert "max" in prog.executables, "at the threshold auto switches to MAX"
        exe = prog.executables["max"]
        out = ns["small"](vals[2])
        np.testing.assert_allclose(out.numpy(), _small_ref(vals[2]), rtol=1e-5)
        assert prog.executables["max"] is exe


def test_auto_races_max_against_the_interpreter_and_keeps_the_faster(monkeypatch):
    import weakref

    from nabla.runtime import executor
    from nabla.runtime.executor import Race

    # alone in its process: hot programs the suite settled before would bring in the
    # per-process choice (tests/runtime/test_graph.py tests it)
    monkeypatch.setattr(executor, "_SETTLED", {"max": weakref.WeakSet(), "host": weakref.WeakSet()})
    monkeypatch.setattr(CONFIG, "background_compile", False)
    monkeypatch.setattr(CONFIG, "auto_threshold", 1)
    GRAPH.clear_cache()
    ns = _small_ns()
    vals = [v - 7 for v in ns["VALUES"]]  # same structure, new values
    with nb.backend("auto"):
        # the threshold call, MAX's warm-up calls (at least Race.QUIET_S), then the timed
        # calls
        for v in itertools.islice(itertools.cycle(vals), 50_000):
            np.testing.assert_allclose(ns["small"](v).numpy(), _small_ref(v), rtol=1e-5)
            race = _last_program().executables.get("race")
            if race is not None and race.winner is not None:
                break
        prog = _last_program()
        race = prog.executables["race"]
        assert race.winner is not None
        assert len(race.times["max"]) == len(race.times["numpy"]) == Race.ROUNDS * Race.CALLS
        scores = {k: race.score(k) for k in race.times}
        assert race.winner == (
            "numpy" if scores["numpy"] <= (1 + Race.MARGIN) * scores["max"] else "max"
        )
        calls = {"max": 0, "numpy": 0}
        for name in calls:
            key = "numpy_fast" if name == "numpy" else name  # a hot program's NumPy form
            exe = prog.executables[key]
            prog.executables[key] = lambda xs, exe=exe, name=name: (
                calls.__setitem__(name, calls[name] + 1) or exe(xs)
            )
        for v in vals + vals[:1]:
            np.testing.assert_allclose(ns["small"](v).numpy(), _small_ref(v), rtol=1e-5)
    assert calls[race.winner] == 4 and sum(calls.values()) == 4
    assert nb.backend_stats()[f"races_won_by_{race.winner}"] >= 1


# ----------------------------------------------------------------------------- errors
def test_unsupported_op_raises_clear_error_and_auto_stays_on_numpy(monkeypatch):
    monkeypatch.setitem(mx.UNSUPPORTED, "bitwise_and", "test: pretend MAX cannot do it")
    a = c(np.array([6, 3, 5, 9, 12, 7, 1], np.int32))
    b = c(np.array([3, 5, 4, 8, 10, 1, 1], np.int32))
    with nb.backend("max"), pytest.raises(mx.UnsupportedOnMax) as info:
        nb.bitwise_and(a, b).numpy()
    msg = str(info.value)
    assert "op 'bitwise_and' with dtype int32 is not supported by the MAX backend on cpu:0" in msg
    assert isinstance(info.value, RuntimeError)
    monkeypatch.setattr(CONFIG, "auto_threshold", 1)
    before = mx.stats()
    with nb.backend("auto"):
        for _ in range(3):
            r = nb.bitwise_and(a, b).numpy()
            np.testing.assert_array_equal(r, np.bitwise_and(a.numpy(), b.numpy()))
    prog = _last_program()
    assert "max" not in prog.executables
    after = mx.stats()
    assert after["unsupported_programs"] == before["unsupported_programs"] + 1
    assert after["compiles"] == before["compiles"]


def test_lowering_failure_is_wrapped_without_mlir_text(monkeypatch):
    def broken(args, kw):
        raise ValueError("mo.graph<...> MLIR diagnostics that users should not see")

    monkeypatch.setitem(mx.LOWERINGS, "neg", broken)
    with nb.backend("max"), pytest.raises(mx.UnsupportedOnMax) as info:
        (-c(np.ones((3, 7), np.float32))).numpy()
    assert "op 'neg' with dtype float32" in str(info.value)
    assert "MLIR" not in str(info.value)


def test_unsupported_reason_on_accelerator_is_checked_up_front():
    gpu = nb.Accelerator(0)
    assert mx.unsupported_reason("matmul", [nb.int32], gpu) is not None
    assert mx.unsupported_reason("matmul", [nb.float32], gpu) is None
    assert mx.unsupported_reason("no_such_op", [nb.float32], nb.CPU()) is not None


def test_stats_keys():
    s = mx.stats()
    for k in (
        "compiles",
        "compile_seconds",
        "memory_hits",
        "disk_hits",
        "disk_load_seconds",
        "background_compiles",
        "unsupported_programs",
    ):
        assert k in s


def test_canonical_key_is_stable_and_refuses_unknown_objects():
    from nabla.backends.max import cache

    key = (("add", (("axis", 1), ("v", 0.1), ("d", nb.float32))), ((nb.CPU(), math.inf),))
    assert cache.canonical(key) == cache.canonical(key)
    assert "D:float32" in cache.canonical(key) and "V:cpu:0" in cache.canonical(key)
    assert cache.canonical((object(),)) is None


# ----------------------------------------------------------------------------- parity graphs
UNARY = {
    "abs": "x",
    "neg": "x",
    "exp": "x",
    "expm1": "e",
    "log": "p",
    "log1p": "p",
    "log2": "p",
    "log10": "p",
    "sin": "x",
    "cos": "x",
    "tan": "t",
    "asin": "u",
    "acos": "u",
    "atan": "w",
    "sinh": "e",
    "cosh": "x",
    "tanh": "x",
    "atanh": "u",
    "erf": "x",
    "sqrt": "p",
    "rsqrt": "p",
    "reciprocal": "p",
    "sigmoid": "x",
    "sign": "s",
    "floor": "s",
    "ceil": "s",
    "round": "s",
    "trunc": "s",
    "relu": "x",
    "is_nan": "s",
    "is_inf": "s",
    "stop_gradient": "x",
}
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "atan2"]
COMPARE = ["equal", "not_equal", "greater", "greater_equal", "less", "less_equal"]


def float_graph():
    rng = np.random.default_rng(0)
    f = np.float32
    xa = rng.uniform(-3, 3, (4, 6)).astype(f)
    ya = rng.uniform(-3, 3, (4, 6)).astype(f)
    yy = np.where(np.abs(ya) < 0.3, ya + 1, ya).astype(f)
    small = [1e-7, -1e-6, 1e-3, 0.0, -30.0, 20.0, 0.5, -2.0]
    d = {
        "x": c(xa),
        "p": c(rng.uniform(0.1, 4, (4, 6)).astype(f)),
        "u": c(rng.uniform(-0.95, 0.95, (4, 6)).astype(f)),
        "t": c(rng.uniform(-1.3, 1.3, (4, 6)).astype(f)),
        "e": c(np.array(small + list(rng.uniform(-3, 3, 8)), f)),
        "w": c(np.array([1e-8, 0.3, 0.5, 1, 2, 3, 10, 1e4, -1e4, -0.7, 0.41, -2.5], f)),
        "s": c(np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.7, -3.7, 0, np.nan, np.inf, -np.inf], f)),
    }
    x, y, p = d["x"], c(ya), d["p"]
    o = {}
    for name, dom in UNARY.items():
        o[name] = getattr(nb, name)(d[dom])
    for name in BINARY:
        o[name] = getattr(nb, name)(x, y)
    o["pow"] = nb.pow(p, y)
    o["pow_scalar"] = x**2.0  # a 0-d scalar operand broadcasts implicitly
    o["add_row"] = x + c(ya[0])  # elementwise kernels broadcast NumPy-style
    o["maximum_col_row"] = nb.maximum(c(xa[:, :1]), nan_row := c(ya[:1]))
    o["atan2_bcast"] = nb.atan2(nan_row, x)
    o["pow_negbase"] = nb.pow(x, c(np.round(ya)))
    o["floor_div"] = nb.floor_div(x, c(yy))
    o["mod"] = nb.mod(x, c(yy))
    # NumPy's edges: a finite x over an infinite y, an infinite x
    ea = c(np.array([5, -5, np.inf, -np.inf, 5, 0, np.nan, 7.5, 0, -3], f))
    eb = c(np.array([np.inf, np.inf, 2, 2, -np.inf, 3, 2, -2, -np.inf, -np.inf], f))
    o["mod_edges"], o["floor_div_edges"] = nb.mod(ea, eb), nb.floor_div(ea, eb)
    nan_a = c(np.array([1.0, np.nan, 3.0, -1.0], f))
    nan_b = c(np.array([np.nan, 2.0, 1.0, -2.0], f))
    o["maximum_nan"] = nb.maximum(nan_a, nan_b)
    zx = c(np.array([1, 0, 0, -1, -1, -1, 2, 0.0], f))
    zy = c(np.array([0, 1, -1, 0, 1, -1, 3, 0.0], f))
    o["atan2_axes"] = nb.atan2(zy, zx)
    xr, yr = c(np.round(xa)), c(np.round(ya))
    for name in COMPARE:
        o[name] = getattr(nb, name)(xr, yr)
    o["where"] = nb.where(o["greater"], x, y)
    o["cast_i32"] = x.cast(nb.int32)
    o["cast_bool"] = xr.cast(nb.bool)
    o["cast_bool_nan"] = d["s"].cast(nb.bool)  # NaN is True (MAX folds x != 0 to a cast)
    # float -> int beyond the range saturates and NaN is 0 (as JAX), from float16 too
    edges = c(np.array([1e10, -1e10, np.nan, np.inf, -np.inf, 2.7, -2.7, 128, -129, 256, -0.5], f))
    for to in ("int8", "uint8", "int32", "int64"):
        o[f"cast_saturate_{to}"] = edges.cast(getattr(nb, to))
    o["cast_saturate_f16"] = edges.cast(nb.float16).cast(nb.int32)
    o["full"] = nb.full((2, 3), 1.5)
    o["arange_f"] = nb.arange(0.0, 5.0, 0.5)
    o["arange_i"] = nb.arange(2, 20, 3)
    # reductions (MAX keeps reduced axes; NaN propagates like NumPy)
    x3 = c(xa.reshape(2, 2, 6))
    o["sum_all"] = nb.sum(x)
    o["sum_axes_keep"] = nb.sum(x3, axis=(0, 2), keepdims=True)
    o["prod"] = nb.prod(p, axis=1)
    o["max_axes"] = nb.max(x3, axis=(1, 2))
    o["min_keep"] = nb.min(x, axis=1, keepdims=True)
    nanrow = c(np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -1.0]], f))
    o["max_nan"] = nb.max(nanrow, axis=1)
    o["argmax_nan"] = nb.argmax(nanrow, axis=1)
    o["argmax"] = nb.argmax(x, axis=1)
    o["argmin_keep"] = nb.argmin(x, axis=0, keepdims=True)
    o["argmax_ties"] = nb.argmax(c(np.array([[1, 3, 3, 0], [2, 2, 2, 2]], f)), axis=1)
    o["cumsum"] = nb.cumsum(x, axis=1)
    o["cumsum_excl_rev"] = nb.cumsum(x, axis=0, exclusive=True, reverse=True)
    xz = nb.where(c(np.abs(xa) < 0.6), 0.0, x)  # zeros: cumprod and its gradient stay exact
    o["cumprod"] = nb.cumprod(xz, axis=1)
    o["cumprod_excl_rev"] = nb.cumprod(x, axis=0, exclusive=True, reverse=True)
    o["cumprod_grad"] = nb.grad(lambda v: (nb.cumprod(v, axis=1) * y).sum())(xz)
    o["cumprod_f16"] = nb.cumprod(c(np.linspace(0.5, 1.6, 12).astype(np.float16)))
    # views
    o["reshape"] = x.reshape(3, 8)
    o["broadcast"] = nb.broadcast_to(c(rng.uniform(size=(1, 6)).astype(f)), (4, 6))
    o["permute"] = nb.permute(x3, (2, 0, 1))
    o["flip"] = nb.flip(x)
    o["slice"] = x[1:3, ::2]
    o["slice_neg"] = x[::-1, 5:0:-2]
    o["slice_update"] = nb.slice_update(x, nb.ones((2, 3)), start=[1, 0], stop=[3, 3])
    o["slice_update_strided"] = nb.slice_update(
        x, c(np.arange(6, dtype=f).reshape(2, 3)), slices=[slice(3, 1, -1), slice(None, None, -2)]
    )
    o["pad"] = nb.pad(x, ((1, 2), (0, 1)), value=0.5)
    o["concat"] = nb.concatenate([x, y, p], axis=1)
    for i, part in enumerate(nb.split(x, [1, 3, 2], axis=1)):
        o[f"split{i}"] = part
    o["matmul"] = nb.matmul(x3, c(ya.reshape(2, 6, 2)))
    w = c(ya.T[:, :2].copy())  # (6, 2)
    o["vecmat"] = x[0] @ w
    o["vmap_vecmat"] = nb.vmap(lambda v: v @ w)(x)  # one GEMM, weight not broadcast
    # a contraction over one element (K=1) is lowered as a broadcast multiply
    o["outer_k1"] = x[:, :1] @ y[:1]
    o["outer_k1_batched"] = c(xa.reshape(4, 6, 1)) @ c(ya.reshape(4, 1, 6))
    # devices, custom calls, vmap plumbing (transpose, broadcast_in_dim)
    o["transfer"] = x.to(nb.CPU(1))
    o["checkpoint_value"], o["checkpoint_grad"] = nb.value_and_grad(
        lambda a: nb.checkpoint(lambda b: b * b)(a).sum()
    )(p)
    o["vmap_bcast"] = nb.vmap(lambda a, b: a * b, in_axes=(1, None))(x, y[0, :4])
    # the traced call and a cache hit, each on a lazy argument: one compiled_call node each,
    # inlined (realized arguments would run the plan at the call, a program of its own)
    compiled = nb.compile(lambda a, b: nb.sin(a) * b + 1.0)
    o["compiled_trace"] = compiled(x * 0.5, y)
    o["compiled_call"] = compiled(y + 1.0, x)
    return o


def test_float32_graph_matches_numpy(prewarm_jobs):
    prog = run_both(float_graph, tol={"tan": (1e-4, 1e-5)}, procs=prewarm_jobs)
    assert prog.num_ops > 90


def int_graph():
    rng = np.random.default_rng(1)
    i32 = np.int32
    a = c(rng.integers(-50, 50, (4, 6)).astype(i32))
    b = c(rng.integers(-7, 8, (4, 6)).astype(i32))
    b = nb.where(b == 3, 0, b)  # zero divisors on purpose (NumPy: 0, MAX must not trap)
    o = {}
    for name in ("add", "sub", "mul", "floor_div", "mod", "maximum", "minimum"):
        o[name] = getattr(nb, name)(a, b)
    o["int_min_div"] = nb.floor_div(c(np.array([-(2**31), 7, -7, 9], i32)), c([-1, -1, 0, 2]))
    o["int_min_mod"] = nb.mod(c(np.array([-(2**31), 7, -7, 9], i32)), c([-1, -1, 0, -2]))
    o["pow"] = nb.pow(c(np.array([2, 3, -2, 5, 0, 7], i32)), c(np.array([3, 2, 3, 0, 4, 1], i32)))
    for name in ("abs", "neg", "sign", "relu", "square"):
        o[name] = getattr(nb, name)(a)
    o["is_nan_int"] = nb.is_nan(a)
    for name in COMPARE:
        o[name] = getattr(nb, name)(a, b)
    o["where"] = nb.where(a > b, a, b)
    for dt, name in (("int32", "bitwise_and"), ("int64", "bitwise_or"), ("uint8", "bitwise_xor")):
        info = np.iinfo(dt)
        p = c(rng.integers(info.min, info.max, (2, 6), dtype=dt, endpoint=True))
        q = c(rng.integers(info.min, info.max, (6,), dtype=dt, endpoint=True))  # broadcasts
        o[f"{name}_{dt}"] = getattr(nb, name)(p, q)
        o[f"bitwise_not_{dt}"] = nb.bitwise_not(p)
    o["int8"] = c(np.array([100, -100, 5], np.int8)) * c(np.array([3, 2, -7], np.int8))
    bx = c(rng.random((4, 6)) > 0.5)
    by = c(rng.random((4, 6)) > 0.5)
    for name in ("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or"):
        o[name + "_bool"] = getattr(nb, name)(bx, by)
    o["logical_not"] = nb.logical_not(bx)
    o["bitwise_not_bool"] = nb.bitwise_not(bx)
    o["logical_not_int"] = nb.logical_not(a)
    o["add_bool"] = nb.add(bx, by)
    o["mul_bool"] = nb.mul(bx, by)
    o["max_bool"] = nb.maximum(bx, by)
    o["eq_bool"] = nb.equal(bx, by)
    o["where_bool"] = nb.where(bx, a, 7)
    o["where_0d_cond"] = nb.where(c(np.array(True)), a, b)
    o["and_scalar"] = nb.logical_and(bx, True)
    o["sum_int"] = nb.sum(a, axis=1)
    o["sum_bool"] = nb.sum(bx, axis=0)
    o["prod_int"] = nb.prod(b, axis=0)
    o["max_int"] = nb.max(a, axis=(0, 1))
    o["min_int_keep"] = nb.min(a, axis=0, keepdims=True)
    o["max_bool_red"] = nb.reduce_max(bx, axis=1)
    o["argmax_int"] = nb.argmax(a, axis=1)
    o["argmin_bool"] = nb.argmin(bx, axis=1)
    o["cumsum_int"] = nb.cumsum(a, axis=0, reverse=True)
    o["cumsum_bool"] = nb.cumsum(bx, axis=1, exclusive=True)
    o["cumprod_int"] = nb.cumprod(b, axis=1)
    o["cumprod_bool"] = nb.cumprod(bx, axis=0)
    # shifts: every count from -3 to 70 (NumPy: 0, or -1 for a negative value shifted right)
    for dt in ("int32", "int8", "int64", "uint8", "uint32", "uint64"):
        info = np.iinfo(dt)
        p = c(rng.integers(info.min, info.max, (74,), dtype=dt, endpoint=True))
        k = c(np.arange(-3, 71) if info.min else np.arange(0, 74), dt)
        o[f"left_shift_{dt}"], o[f"right_shift_{dt}"] = p << k, p >> k
    o["shift_scalar_bcast"] = (a << c(np.array([[1], [2], [0], [5]], i32))) >> 2
    # uint32: wrapping arithmetic, division, widening, comparison, casts both ways
    u = c(rng.integers(0, 2**32, (4, 6), dtype=np.uint32, endpoint=False))
    v = c(rng.integers(1, 2**32, (4, 6), dtype=np.uint32, endpoint=False))
    o["u32_arith"] = (u * v + 7) // (v % 1000 + 1)
    o["u32_mod_cmp"] = nb.where(u > v, u % v, v - u)
    o["u32_sum_cumsum"] = nb.cumsum(nb.sum(u, axis=1), axis=0)
    o["u16_sum"] = nb.sum(u.cast(nb.uint16), axis=0)  # uint16 sums in uint32
    o["u32_max_argmin"] = nb.max(u, axis=0) + nb.argmin(u, axis=1).cast(nb.uint32).sum()
    o["u32_to_f"] = u.cast(nb.float32)
    o["f_to_u32"] = c(np.array([-3.0, 2.7, 4e9, 1e20], np.float32)).cast(nb.uint32)
    o["u32_and_i64"] = u + c(np.array([-5], np.int64))
    o["u32_xor"] = nb.bitwise_xor(u, v)
    o["any"] = nb.any(a > 45)
    o["cast_f"] = a.cast(nb.float32)
    o["cast_b"] = a.cast(nb.bool)
    o["cast_i64"] = a.cast(nb.int64)
    o["bool_to_int"] = bx.cast(nb.int32)
    o["full_int"] = nb.full((2, 2), 7, dtype=nb.int32)
    o["full_bool"] = nb.full((3,), True)
    o["arange"] = nb.arange(-3, 9, 2)
    o["concat_bool"] = nb.concatenate([bx, by], axis=0)
    o["pad_bool"] = nb.pad(bx, ((1, 0), (0, 2)), value=True)
    o["flip_int"] = nb.flip(a, axis=1)
    o["slice_update_bool"] = nb.slice_update(bx, nb.zeros((2, 2), dtype=nb.bool), [0, 1], [2, 2])
    return o


def test_int_bool_graph_matches_numpy(prewarm_jobs):
    run_both(int_graph, procs=prewarm_jobs)


def gather_graph():
    rng = np.random.default_rng(2)
    f = np.float32
    x = c(rng.normal(size=(3, 4, 5)).astype(f))
    xb = c(rng.normal(size=(6, 3, 4)).astype(f))
    idx = c(np.array([[2, 0], [1, 1], [2, 0]], np.int32))
    ib = c(rng.integers(0, 3, (6, 2)).astype(np.int32))
    o = {}
    for axis in (0, 1, 2):
        o[f"gather{axis}"] = nb.gather(x, idx, axis=axis)
    # a 0-d index (MAX's gather kernel has none: a 1-element one, the dim then dropped)
    o["gather_0d"] = nb.gather(x, c(np.int32(2)), axis=1)
    o["gather_0d_computed"] = x[:, nb.argmax(nb.sum(x, axis=(0, 2)))]
    # vmap: batch_dims on gather/scatter, with batched and unbatched indices
    o["vmap_gather"] = nb.vmap(lambda a, i: nb.gather(a, i, axis=1))(xb, ib)
    o["vmap_gather_unb_idx"] = nb.vmap(lambda a: nb.gather(a, idx, axis=0))(xb)
    o["vmap2_gather"] = nb.vmap(nb.vmap(lambda a, i: nb.gather(a, i, axis=0)))(
        x, c(rng.integers(0, 5, (3, 4, 2)).astype(np.int32))
    )
    upd = c(rng.normal(size=(3, 2, 5)).astype(f))
    o["scatter_set"] = nb.scatter(x, c(np.array([3, 0])), upd, axis=1)
    o["scatter_add_dup"] = nb.scatter(x, c(np.array([1, 1])), upd, axis=1, mode="add")
    o["vmap_scatter"] = nb.vmap(
        lambda a, i, u: nb.scatter(a, i, u, axis=0, mode="add"), in_axes=(0, 0, None)
    )(xb, ib, nb.ones((2, 4)))
    o["at_add"] = x.at[c([0, 0, 2])].add(1.0)
    for mode in ("mul", "min", "max"):  # every update at a repeated index takes part
        o[f"scatter_{mode}_dup"] = nb.scatter(x, c(np.array([1, 3, 1])), upd[:, :1], 1, mode)
    bools = c(np.array([True, False, False, True]))
    for mode in ("add", "mul", "max"):
        o[f"scatter_{mode}_bool"] = nb.scatter(bools, c([0, 0, 1]), c([False, True, True]), 0, mode)
    # convolution's windows (im2col) and, in its input gradient, their adjoint (col2im)
    img = c(rng.normal(size=(2, 6, 5, 3)).astype(f))
    filt = c(rng.normal(size=(3, 2, 3, 4)).astype(f))
    conv = lambda a: nb.conv2d(a, filt, stride=(2, 1), padding=1, dilation=(1, 2))  # noqa: E731
    o["conv"] = conv(img)
    o["conv_input_grad"] = nb.grad(lambda a: (conv(a) ** 2).sum())(img)
    return o


def test_gather_scatter_graph_matches_numpy(prewarm_jobs):
    run_both(gather_graph, procs=prewarm_jobs)


def test_out_of_range_graph_indices_clamp_or_drop_on_max_and_raise_on_numpy():
    """An index computed in the graph, out of range when the program runs: a graph cannot
    raise, so MAX follows JAX (a gather clamps, a scatter drops the update; MAX's own
    scatter_nd leaves such a write undefined); the NumPy backend raises IndexError."""
    x = c(np.arange(4.0, dtype=np.float32))
    m = c(np.arange(12.0, dtype=np.float32).reshape(3, 4))

    def build():
        i = c(np.array([5, -5, 1, -9, -1])) + 0  # computed in the graph
        return {
            "gather": x[i],
            "set": x.at[i].set(10.0),
            "add": x.at[i].add(10.0),
            "max": x.at[i].max(10.0),
            "at_2d": m.at[c([0, 2]) + 0, c([5, 1]) + 0].add(100.0),  # x[0, 5] is not x[1, 1]
            "vmap_set": nb.vmap(lambda r, j: r.at[j].set(-1.0))(m, c([1, 7, -2]) + 0),
        }

    with nb.backend("max"):
        outs = build()
        nb.realize(*outs.values())  # one program
        got = {k: v.numpy() for k, v in outs.items()}
    want = {
        "gather": [3, 0, 1, 0, 3],
        "set": [0, 10, 2, 10],
        "add": [0, 11, 2, 13],
        "max": [0, 10, 2, 10],
        "at_2d": np.arange(12.0).reshape(3, 4) + np.eye(1, 12, 9).reshape(3, 4) * 100,
        "vmap_set": [[0, -1, 2, 3], [4, 5, 6, 7], [8, 9, -1, 11]],
    }
    for k, w in want.items():
        np.testing.assert_array_equal(got[k], np.asarray(w, np.float32), err_msg=k)
    with nb.backend("numpy"):
        for k, v in build().items():
            with pytest.raises(IndexError, match="out of (bounds|range of its dim)"):
                v.numpy()


def dtype_graph():
    rng = np.random.default_rng(3)
    o = {}
    for dt in ("float64", "float16", "bfloat16"):
        x = c(rng.uniform(-2, 2, (4, 8)), dt)
        y = c(rng.uniform(0.5, 2, (8, 3)), dt)
        o[f"ew_{dt}"] = nb.exp(nb.tanh(x)) * 2.0 + x * x
        o[f"log_{dt}"] = nb.log(y)
        o[f"sin_{dt}"] = nb.sin(x)
        o[f"atan_{dt}"] = nb.atan(x)
        o[f"erf_{dt}"] = nb.erf(x)
        o[f"sum_{dt}"] = nb.sum(x, axis=1)
        o[f"max_{dt}"] = nb.max(x, axis=0)
        if dt == "bfloat16":  # one low-precision GEMM (each matmul specialization costs ~20 s cold)
            o[f"matmul_{dt}"] = x @ y
        o[f"cast_{dt}"] = x.cast(nb.float32)
        o[f"cast_to_{dt}"] = x.cast(nb.float32).cast(dt) * 1.5
        o[f"cumsum_{dt}"] = nb.cumsum(x, axis=1)
        o[f"where_{dt}"] = nb.where(x > 0, x, 0.25)
    return o


def test_float64_float16_bfloat16_graph_matches_numpy(prewarm_jobs):
    tol = {"cumsum_float16": (5e-3, 1e-2), "sum_float16": (5e-3, 1e-2)}
    tol.update({"cumsum_bfloat16": (3e-2, 5e-2), "sum_bfloat16": (3e-2, 5e-2)})
    tol.update({"matmul_bfloat16": (3e-2, 5e-2)})
    tol.update({"atan_float64": (1e-12, 1e-14), "ew_float64": (1e-12, 1e-12)})
    run_both(dtype_graph, tol=tol, procs=prewarm_jobs)


def control_graph():
    """cond/switch, while_loop and scan (forward, reverse, batched, differentiated): MAX's
    region ops with bodies that read outer values, gather/scatter of per-step slices."""
    rng = np.random.default_rng(4)
    f = np.float32
    w = c((rng.normal(size=(3, 3)) * 0.5).astype(f))
    xs = c(rng.normal(size=(5, 3)).astype(f))
    # a batch of 2 states: the reverse scan takes its carry-free part out of the loop
    h0 = c(rng.normal(size=(2, 3)).astype(f))

    def loss(w, h0):
        def step(h, x):
            h2 = nb.tanh(h @ w + x)
            return h2, (h2 * 2.0).sum()

        h, ys = nb.scan(step, h0, xs)
        h = nb.cond(h.sum() > 0, lambda v: v * 2.0, lambda v: v - 1.0, h)
        return (h * h).sum() + ys.sum()

    o = {}
    o["loss"], (o["grad_w"], o["grad_h0"]) = nb.value_and_grad(loss, argnums=(0, 1))(w, h0)
    o["rev_carry"], o["rev_ys"] = nb.scan(lambda s, x: (s * 0.5 + x, s), h0, xs, reverse=True)
    o["steps"], o["while"] = nb.while_loop(
        lambda s: s[0] < 3, lambda s: (s[0] + 1, nb.sin(s[1]) @ w), (0, h0)
    )
    o["switch"] = nb.switch(2, [lambda v: v, lambda v: v * v, lambda v: -v], h0)
    hb = c(rng.normal(size=(4, 3)).astype(f))
    o["vmap_scan"] = nb.vmap(lambda h: nb.scan(lambda s, x: (nb.tanh(s @ w + x), s), h, xs)[1])(hb)
    return o


def test_control_flow_graph_matches_numpy(prewarm_jobs):
    prog = run_both(control_graph, procs=prewarm_jobs)
    assert {"cond", "while_loop", "scan"} <= {i.op for i in prog.instructions}


def sharded_graph():
    """A simulated 2x2 mesh: a Megatron MLP (forward and grad), every collective and the
    layout changes propagation inserts, in one program over every device's block."""
    from nabla.ops.collectives import unshard

    rng = np.random.default_rng(5)
    f = np.float32
    mesh = nb.DeviceMesh("mesh", (2, 2), ("dp", "tp"))
    P = nb.P
    x = nb.shard(c(rng.normal(size=(8, 6)).astype(f)), mesh, P("dp"))
    w1 = nb.shard(c(rng.normal(size=(6, 8)).astype(f)), mesh, P(None, "tp"))
    w2 = nb.shard(c(rng.normal(size=(8, 6)).astype(f)), mesh, P("tp"))

    def loss(w1, w2):
        h = nb.relu(x @ w1) @ w2  # partial over tp: one all_reduce before the softmax
        return (nb.softmax(h, axis=1) * h).sum()

    o = {}
    o["loss"], (o["grad_w1"], o["grad_w2"]) = nb.value_and_grad(loss, argnums=(0, 1))(w1, w2)
    y = nb.shard(c(rng.normal(size=(4, 8)).astype(f)), mesh, P("dp", "tp"))
    o["all_gather"] = nb.all_gather(y, 1)
    o["all_to_all"] = nb.all_to_all(y, 0, 1)
    o["reshard_slice"] = nb.reshard(nb.all_gather(y, 0), mesh, P(("tp", "dp")))
    o["sum_blocks"] = nb.all_reduce(y, "sum", axes="tp")
    o["max_blocks"] = nb.all_reduce(y, "max", axes="dp")
    part = nb.shard(c(rng.normal(size=(4, 6)).astype(f)), mesh, P(None, "tp")) @ nb.shard(
        c(rng.normal(size=(6, 4)).astype(f)), mesh, P("tp")
    )
    o["reduce_scatter"] = nb.reduce_scatter(part, 0)
    o["unshard_partial"] = unshard(part)
    o["ring"] = nb.ppermute(y, [(0, 1), (1, 3), (3, 2), (2, 0)])
    o["broadcast"] = nb.broadcast(y, root=1, axes="tp")
    o["axis_index"] = nb.axis_index(mesh, "tp")
    # shard_map: blocks in and out (a replicated axis dropped on entry, copied on exit)
    o["shard_map"] = nb.shard_map(
        lambda a, b: nb.all_reduce(a * b.sum(), "sum", axes="tp"),
        mesh=mesh,
        in_specs=(P("dp", "tp"), P("dp")),
        out_specs=P("dp"),
    )(y, c(rng.normal(size=(4,)).astype(f)))
    # compile over sharded arguments: the trace, then a hit (one compiled_call on blocks)
    step = nb.compile(lambda a, b: nb.tanh(a @ b))
    o["compiled_trace"] = step(x, w1)
    o["compiled_call"] = step(x, w1 * 2.0)
    return o


def test_sharded_graph_matches_numpy(prewarm_jobs):
    prog = run_both(sharded_graph, procs=prewarm_jobs)
    assert {"mesh_shard", "mesh_reduce", "mesh_permute"} <= {i.op for i in prog.instructions}


# ----------------------------------------------------------------------------- coverage
def test_every_lowering_is_exercised():
    needed = {n for n in NP_LOWERINGS if n not in mx.UNSUPPORTED}
    needed.discard("custom_kernel")  # needs a Mojo package: tests/backends/test_custom_kernels.py
    missing = sorted(n for n in needed if n not in mx.LOWERINGS)
    assert not missing, f"no MAX lowering (and not declared in UNSUPPORTED) for: {missing}"
    if not {"matmul", "gather", "bitwise_and", "exp"} <= COVERED:
        pytest.skip("the parity graphs did not all run")
    assert not sorted(needed - COVERED), f"not exercised on MAX: {sorted(needed - COVERED)}"


# ----------------------------------------------------------------------------- accelerators
def _gpu_count():
    return mx.accelerator_count()


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_count() == 0, reason="no accelerator")
def test_accelerator_roundtrip_and_grad():  # pragma: no cover - needs a GPU
    dev = nb.Accelerator(0)
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    x = nb.constant(a, device=dev)
    assert x.device == dev
    y = nb.exp(x) * 2.0 + x
    assert y.device == dev
    np.testing.assert_allclose(y.cpu().numpy(), np.exp(a) * 2 + a, rtol=1e-5)
    g = nb.grad(lambda t: (t.to(dev) ** 2).sum())(nb.constant(a))
    assert g.device == nb.CPU()
    np.testing.assert_allclose(g.numpy(), 2 * a, rtol=1e-5)


DYNAMIC_SRC = textwrap.dedent(
    """
    import numpy as np
    import nabla as nb
    from nabla.backends import max as mx

    f = nb.compile(lambda x: (nb.tanh(x) * 2.0 + x).sum(axis=1), dynamic_dims={0: {0: "n"}})
    rng = np.random.default_rng(0)

    def check(sizes):
        with nb.backend("max"):
            for n in sizes:
                x = rng.standard_normal((n, 4)).astype(np.float32)
                np.testing.assert_allclose(
                    f(nb.constant(x)).numpy(), (np.tanh(x) * 2 + x).sum(1), rtol=1e-5
                )
    """
)


def test_dynamic_dims_compile_one_max_model_for_every_size(tmp_path, monkeypatch):
    # nb.compile with dynamic_dims: the trace call runs an ordinary program; the next
    # size on, one MAX model with a symbolic dim serves every size, and it is
    # kept in the .mef disk cache: a new process compiles nothing.
    monkeypatch.setenv("NABLA_CACHE_DIR", str(tmp_path))
    mx.clear_caches()
    ns: dict = {}
    exec(DYNAMIC_SRC, ns)
    ns["check"]((2, 3))
    before = mx.stats()["compiles"]
    ns["check"]((5, 11, 17, 5, 8))  # (not 1: sizes 0 and 1 are traced per size)
    assert mx.stats()["compiles"] - before <= 1  # one symbolic model for sizes 5..8
    f = ns["f"]
    assert f.stats.misses == 1 and f.stats.replays == 0 and f.stats.hits == 6

    script = DYNAMIC_SRC + 'check((2, 3, 9, 30))\nprint(mx.stats()["compiles"])\n'
    env = _env(NABLA_CACHE_DIR=str(tmp_path))
    res = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[-1] == "0", res.stdout


def test_derived_dynamic_sizes_compile_one_max_model(tmp_path, monkeypatch):
    # sizes derived from a dynamic dim (n * 4, n // 2, n - 1), a slice by one, an iota of n
    # and a mean over n (a size as a value): one trace, and one MAX model for every size
    monkeypatch.setenv("NABLA_CACHE_DIR", str(tmp_path))
    mx.clear_caches()

    def f(x):
        n = x.shape[0]
        wide = nb.reshape(nb.broadcast_to(x[:, None], (n, 4)), (n * 4,))
        half = wide[: n // 2] * 2.0
        return half, x[1:] + nb.arange(n - 1).astype(nb.float32), x.mean()

    c = nb.compile(f, dynamic_dims={0: {0: "n"}})
    with nb.backend("max"):
        for k, n in enumerate((4, 6, 9, 13, 6)):
            if k == 2:
                before = mx.stats()["compiles"]
            x = np.arange(n, dtype=np.float32) * 0.5
            half, tail, mean = c(nb.constant(x))
            wide = np.repeat(x, 4)
            np.testing.assert_allclose(half.numpy(), wide[: n // 2] * 2.0)
            np.testing.assert_allclose(tail.numpy(), x[1:] + np.arange(n - 1))
            np.testing.assert_allclose(mean.numpy(), x.mean(), rtol=1e-6)
    assert c.stats.misses == 1 and c.stats.hits == 4
    assert mx.stats()["compiles"] == before  # sizes 9, 13, 6: the symbolic model from size 6


# ----------------------------------------------------------------------------- the disk cache
def _fresh_max_run(fn, x):
    """``fn(x)`` on MAX with the in-memory caches emptied (so the disk cache is consulted)."""
    GRAPH.clear_cache()
    mx.clear_caches()
    with nb.backend("max"):
        return fn(nb.constant(x)).numpy()


def test_damaged_or_swapped_disk_entries_are_recompiled_with_correct_results(tmp_path, monkeypatch):
    from nabla.backends.max import cache

    monkeypatch.setenv("NABLA_CACHE_DIR", str(tmp_path))
    x = np.linspace(-2.0, 2.0, 4, dtype=np.float32)
    f_a = lambda t: nb.sin(t) * t + 1.0  # noqa: E731
    f_b = lambda t: nb.cos(t) * t - 0.5  # noqa: E731
    want_a = np.sin(x) * x + 1.0
    _fresh_max_run(f_a, x)
    (entry_a,) = list(tmp_path.glob("*.mef"))
    _fresh_max_run(f_b, x)
    (entry_b,) = [p for p in tmp_path.glob("*.mef") if p != entry_a]

    # 8 flipped bits: once this made every later process die in Model.execute
    data = bytearray(entry_a.read_bytes())
    for i in range(8):
        data[len(data) // 2 + i] ^= 1 << i
    entry_a.write_bytes(bytes(data))
    before = cache.stats()["compiles"]
    np.testing.assert_allclose(_fresh_max_run(f_a, x), want_a, rtol=1e-6)
    assert cache.stats()["compiles"] == before + 1, "rejected and recompiled"
    assert len(list((tmp_path / "quarantine").glob("*.mef"))) == 1

    # a valid entry of another program under A's name: once this returned cos(x)*x-0.5
    for suffix in (".mef", ".json"):
        entry_b.with_suffix(suffix).replace(entry_a.with_suffix(suffix))
    np.testing.assert_allclose(_fresh_max_run(f_a, x), want_a, rtol=1e-6)
    assert cache.stats()["compiles"] == before + 2
    assert len(list((tmp_path / "quarantine").glob("*.mef"))) == 2

    # truncated, then a sidecar claiming another signature: each detected and recompiled
    entry_a.write_bytes(entry_a.read_bytes()[:1000])
    np.testing.assert_allclose(_fresh_max_run(f_a, x), want_a, rtol=1e-6)
    side = entry_a.with_suffix(".json")
    meta = json.loads(side.read_text())
    meta["signature"]["inputs"].append(["float32", [7]])  # one input too many
    side.write_text(json.dumps(meta))
    np.testing.assert_allclose(_fresh_max_run(f_a, x), want_a, rtol=1e-6)
    assert cache.stats()["compiles"] == before + 4
    assert len(list((tmp_path / "quarantine").glob("*.mef"))) == 4

    # the rewritten entry now loads from disk without compiling
    before = cache.stats()
    np.testing.assert_allclose(_fresh_max_run(f_a, x), want_a, rtol=1e-6)
    after = cache.stats()
    assert after["compiles"] == before["compiles"]
    assert after["disk_hits"] == before["disk_hits"] + 1


def test_concurrent_processes_compile_a_program_once(tmp_path):
    script = textwrap.dedent(
        """
        import numpy as np
        import nabla as nb
        from nabla.backends import max as mx
        x = nb.constant(np.arange(6, dtype=np.float32))
        with nb.backend("max"):
            out = (nb.exp(x * 0.25) - nb.tanh(x) * 3.0).numpy()
        np.testing.assert_allclose(out, np.exp(np.arange(6) * 0.25) - np.tanh(np.arange(6)) * 3,
                                   rtol=1e-5)
        s = mx.stats()
        print(s["compiles"], s["disk_hits"])
        """
    )
    env = _env(NABLA_CACHE_DIR=str(tmp_path))
    procs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0
        results.append(tuple(int(v) for v in out.split()[-2:]))
    assert sum(c for c, _ in results) == 1, results
    assert sum(h for _, h in results) == 3, results
