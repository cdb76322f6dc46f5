"""The straight-line form of hot programs on the NumPy executor (backends/numpy/fast.py):
the interpreter's bits, scratch buffers that never escape, folding and dead-code removal,
the switch and the check mode. (Every program of the op, transform, runtime and nn suites
is compared with the interpreter bit for bit by the check mode tests/conftest.py turns on.)"""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import nabla as nb
from nabla.backends.numpy import compile_fast, compile_program, fast
from nabla.backends.numpy.lowerings import UFUNCS
from nabla.core.config import CONFIG
from nabla.core.device import CPU
from nabla.core.dtypes import DType
from nabla.core.ir import build_program
from nabla.runtime import executor

F32 = DType.float32


def _spec(*shape):
    return ((F32, shape),)


def _program():
    """x (3, 4), w (4, 5): a constant folded once, an elementwise chain, a matmul, a
    reduction, a view as an output, and an instruction nothing reads."""
    full = {"shape": (3, 4), "value": 0.5, "dtype": F32, "device": CPU()}
    steps = [
        ("full", (), full, _spec(3, 4)),  # 0: folded
        ("mul", (0, (0, 0)), {}, _spec(3, 4)),  # 1
        ("exp", ((1, 0),), {}, _spec(3, 4)),  # 2: in place over 1
        ("tanh", ((2, 0),), {}, _spec(3, 4)),  # 3: in place
        ("add", ((3, 0), (1, 0)), {}, _spec(3, 4)),  # 4
        ("matmul", ((4, 0), 1), {}, _spec(3, 5)),  # 5
        ("reduce_sum", ((5, 0),), {"axes": (1,), "keepdims": False}, _spec(3)),  # 6
        ("sin", (0,), {}, _spec(3, 4)),  # 7: dead
        ("neg", ((4, 0),), {}, _spec(3, 4)),  # 8
        ("transpose", ((8, 0),), {"perm": (1, 0)}, _spec(4, 3)),  # 9: a view of 8, returned
    ]
    inputs = [(F32, (3, 4), CPU()), (F32, (4, 5), CPU())]
    return build_program(("fast-test", id(steps)), inputs, steps, [(6, 0), (9, 0), (5, 0)])


def _inputs(rng):
    return [rng.standard_normal(shape).astype(np.float32) for shape in ((3, 4), (4, 5))]


def _bits(a):
    return (type(a), a.dtype, a.shape, np.ascontiguousarray(a).tobytes())


def test_same_bits_as_the_interpreter_with_folding_dead_code_and_in_place_chains(rng):
    program = _program()
    run = fast.lower(program)
    src = run.source
    assert "full" not in src and "sin" not in src  # folded once; dead
    assert "exp(v" in src and "out=b0" in src
    # the chain mul -> exp -> tanh runs in one buffer
    chain = [line for line in src.splitlines() if "= exp(" in line or "= tanh(" in line]
    assert len(chain) == 2 and chain[0].endswith("out=b1)") and chain[1].endswith("out=b1)"), src
    interp = compile_program(program)
    for _ in range(3):
        xs = _inputs(rng)
        want = interp(xs)
        got = run(xs)
        assert [_bits(g) for g in got] == [_bits(w) for w in want]


def test_a_call_on_inputs_of_another_layout_gives_the_interpreters_bits(rng):
    """NumPy lays a new result out in its operands' order, and a later lowering's bits may
    depend on that layout: a transposed input runs a variant lowered for it."""
    program = _program()
    run, interp = fast.lower(program), compile_program(program)
    assert "v0.flags.c_contiguous" in run.source
    x, w = _inputs(rng)
    wide = np.zeros((3, 8), np.float32)
    wide[:, ::2] = x  # strided, in C order: NumPy's results stay C-contiguous
    for xs in ([np.asfortranarray(x), w], [wide[:, ::2], w]):
        got, want = run(xs), interp(xs)
        assert [_bits(g) + (g.strides,) for g in got] == [_bits(a) + (a.strides,) for a in want]
    assert fast._c_ordered(wide[:, ::2]) and not fast._c_ordered(np.asfortranarray(x))


def test_outputs_are_never_scratch_and_inputs_are_never_written(rng):
    run = fast.lower(_program())
    xs = _inputs(rng)
    keep = [x.copy() for x in xs]
    first = run(xs)
    first_bits = [_bits(a) for a in first]
    second = run(_inputs(rng))  # reuses the scratch buffers of the first call
    assert [_bits(a) for a in first] == first_bits
    assert all(a is not b for a, b in zip(first, second))
    for x, k in zip(xs, keep):
        np.testing.assert_array_equal(x, k)


def test_a_short_row_broadcast_over_many_rows_runs_tiled_with_the_same_bits(rng):
    """A per-channel operand (a row of the last dim) against a C-ordered operand of the
    result's shape runs over rows of tiled copies of the row (``rowwise``), on either side,
    for floats, integers and comparisons, and for a broadcast view of such a row, with the
    interpreter's bits."""
    i32, b8 = DType.int32, DType.bool
    steps = [
        ("sub", (0, 1), {}, _spec(1024, 24)),  # 0: 24 channels, tiled twice (24576 = 512 * 48)
        ("mul", (2, (0, 0)), {}, _spec(1024, 24)),  # 1: the row first
        ("exp", ((1, 0),), {}, _spec(1024, 24)),  # 2
        ("add", (3, 4), {}, ((i32, (128, 8, 16)),)),  # 3: integers
        ("neg", ((3, 0),), {}, ((i32, (128, 8, 16)),)),  # 4
        ("mul", (5, 6), {}, _spec(128, 8, 16)),  # 5: a (1, 1, 16) row
        ("greater", ((5, 0), 6), {}, ((b8, (128, 8, 16)),)),  # 6: a comparison
        ("logical_not", ((6, 0),), {}, ((b8, (128, 8, 16)),)),  # 7
        ("broadcast_to", (6,), {"shape": (128, 8, 16)}, _spec(128, 8, 16)),  # 8: a view
        ("sub", ((5, 0), (8, 0)), {}, _spec(128, 8, 16)),  # 9: takes the view's row
        ("exp", ((9, 0),), {}, _spec(128, 8, 16)),  # 10
        ("mul", (7, 8), {}, _spec(8192, 1)),  # 11: one channel is a scalar: left as it is
        ("exp", ((11, 0),), {}, _spec(8192, 1)),  # 12
        ("mul", (9, 10), {}, _spec(512, 16)),  # 13: 512 rows are too few to pay
        ("exp", ((13, 0),), {}, _spec(512, 16)),  # 14
    ]
    shapes = [(1024, 24), (1, 24), (24,), (128, 8, 16), (16,), (128, 8, 16), (1, 1, 16)]
    shapes += [(8192, 1), (1,), (512, 16), (16,)]
    dtypes = [F32, F32, F32, i32, i32, F32, F32, F32, F32, F32, F32]
    inputs = [(d, s, CPU()) for d, s in zip(dtypes, shapes, strict=True)]
    outputs = [(2, 0), (4, 0), (7, 0), (10, 0), (12, 0), (14, 0)]
    program = build_program(("rowwise", id(steps)), inputs, steps, outputs)
    run = fast.lower(program)
    assert run.source.count("rowwise(") == 6, run.source
    assert "multiply(v7, v8" in run.source and "multiply(v9, v10" in run.source, run.source
    interp = compile_program(program)
    for _ in range(2):
        xs = [
            (rng.standard_normal(s) * 4).astype(d.numpy)
            for d, s in zip(dtypes, shapes, strict=True)
        ]
        assert [_bits(g) for g in run(xs)] == [_bits(w) for w in interp(xs)]


def test_concurrent_calls_each_get_their_own_scratch(rng):
    program = _program()
    run, interp = fast.lower(program), compile_program(program)
    cases = [_inputs(rng) for _ in range(4)]
    wants = [[_bits(a) for a in interp(xs)] for xs in cases]
    errors = []

    def worker(xs, want):
        for _ in range(200):
            if [_bits(a) for a in run(xs)] != want:
                errors.append("differs")
                return

    threads = [threading.Thread(target=worker, args=c) for c in zip(cases, wants)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_scratch_kept_between_calls_stays_within_one_budget(rng, monkeypatch):
    """Each lowered function keeps its scratch set for its next call, but all together
    keep at most the budget (or twice the largest set), the least recently used giving
    theirs up first: one program per input size (variable-length batches) had each kept
    its own peak working set, 7 GB for an eager loop over 200 lengths."""
    monkeypatch.setattr(fast, "_SCRATCH_BUDGET", 1 << 20)
    monkeypatch.setattr(fast, "_KEPT", fast._Kept())

    def chain(n):
        steps = [
            ("mul", (0, 0), {}, _spec(n, 256)),
            ("exp", ((0, 0),), {}, _spec(n, 256)),
            ("reduce_sum", ((1, 0),), {"axes": (1,), "keepdims": False}, _spec(n)),
        ]
        return build_program(("budget", n), [(F32, (n, 256), CPU())], steps, [(2, 0)])

    runs = {}
    for n in range(64, 64 + 40):  # 40 programs of 64-103 KiB of scratch each
        program = chain(n)
        run = runs[n] = fast.lower(program)
        x = rng.standard_normal((n, 256)).astype(np.float32)
        for _ in range(2):
            np.testing.assert_array_equal(run([x])[0], compile_program(program)([x])[0])
        kept = run.raw.__globals__["take"].__self__
        assert kept.nbytes == n * 256 * 4 and len(kept.sets) == 1  # its own: kept
        assert fast._KEPT.nbytes <= max(1 << 20, 2 * fast._KEPT.largest)
    holding = [n for n, run in runs.items() if run.raw.__globals__["take"].__self__.sets]
    assert 8 <= len(holding) < 40 and holding == list(range(104 - len(holding), 104))
    assert fast._KEPT.nbytes == sum(n * 256 * 4 for n in holding)
    del run, kept
    runs.clear()  # the programs are gone: their kept sets go with them
    gc.collect()
    assert fast._KEPT.nbytes == 0 and fast._KEPT.sets == 0 and not fast._KEPT.order


def test_a_size_left_symbolic_stays_interpreted():
    steps = [("exp", (0,), {}, ((F32, ("n",)),))]
    program = build_program("symbolic", [(F32, ("n",), CPU())], steps, [(0, 0)])
    with pytest.raises(fast.CannotLower, match="'n'"):
        fast.lower(program)
    run = compile_fast(program)  # the interpreter, which takes any size
    assert not hasattr(run, "source")
    np.testing.assert_array_equal(run([np.zeros(3, np.float32)])[0], np.ones(3, np.float32))


def test_the_executor_runs_hot_programs_straight_line_unless_switched_off(monkeypatch, rng):
    monkeypatch.setattr(CONFIG, "backend", "numpy")
    monkeypatch.setattr(CONFIG, "fast_numpy_check", False)
    xs = _inputs(rng)
    cold = _program()
    executor.run_program(cold, 1, xs)  # seen once: interpreted
    assert "numpy" in cold.executables and "numpy_fast" not in cold.executables
    hot = _program()
    want = compile_program(hot)(xs)
    got = executor.run_program(hot, CONFIG.auto_threshold, xs)
    assert hasattr(hot.executables["numpy_fast"], "source")
    assert [_bits(a) for a in got] == [_bits(a) for a in want]
    monkeypatch.setattr(CONFIG, "fast_numpy", False)
    off = _program()
    executor.run_program(off, 100, xs)
    assert "numpy_fast" not in off.executables


def test_the_switch_is_read_from_the_environment():
    code = "from nabla.core.config import CONFIG; print(CONFIG.fast_numpy)"
    env = {**os.environ, "NABLA_FAST_NUMPY": "0"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.stdout.strip() == "False", res.stderr
    env["NABLA_FAST_NUMPY"] = "maybe"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode != 0 and "NABLA_FAST_NUMPY must be one of" in res.stderr


def test_debug_compile_shows_the_generated_source(monkeypatch, caplog):
    monkeypatch.setattr(CONFIG, "debug_compile", True)
    with caplog.at_level(logging.INFO, logger="nabla.numpy"):
        run = fast.lower(_program())
    assert run.source in caplog.text and "def raw(inputs):" in caplog.text


def test_check_mode_catches_a_lowering_that_differs(monkeypatch, rng):
    program = _program()
    monkeypatch.setitem(UFUNCS, "exp", np.expm1)  # a wrong straight-line lowering
    monkeypatch.setattr(CONFIG, "fast_numpy_check", True)
    run = compile_fast(program)
    with pytest.raises(fast.FastPathMismatch, match="differs from the interpreter at output"):
        run(_inputs(rng))


def test_compiled_calls_are_inlined_and_scan_bodies_lowered(monkeypatch):
    monkeypatch.setattr(CONFIG, "fast_numpy_check", True)
    with nb.backend("numpy"):
        inner = nb.compile(lambda a: nb.tanh(a) * 2.0)

        def step(c, x):
            c = c * 0.5 + x
            return c, nb.exp(c)

        x = nb.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
        for _ in range(3):
            y = inner(x + 1.0) + 1.0  # a compiled call inside a lazy graph
            carry, ys = nb.scan(step, nb.zeros((3,)), y)
            np.testing.assert_allclose(ys.numpy()[0], np.exp(np.tanh(x.numpy()[0] + 1) * 2 + 1))
            carry.numpy()


@pytest.mark.parametrize("dtype", [DType.float32, DType.float64, DType.float16])
def test_sigmoid_and_rsqrt_chains_in_scratch_give_the_lowerings_bits(dtype, rng):
    sig = lambda *shape: ((dtype, shape),)  # noqa: E731
    steps = [
        ("sigmoid", (0,), {}, sig(4, 6)),
        ("abs", (0,), {}, sig(4, 6)),
        ("rsqrt", ((1, 0),), {}, sig(4, 6)),
        ("mul", ((0, 0), (2, 0)), {}, sig(4, 6)),
        ("slice", (0,), {"slices": ((0, 1, 4), (1, 2, 3))}, sig(4, 3)),
        ("sigmoid", ((4, 0),), {}, sig(4, 3)),  # of a strided view
        ("exp", ((5, 0),), {}, sig(4, 3)),
    ]
    program = build_program(
        ("chains", id(steps)), [(dtype, (4, 6), CPU())], steps, [(3, 0), (6, 0)]
    )
    run = fast.lower(program)
    if dtype != DType.float16:  # float16 keeps the lowering
        assert "exp(" in run.source and "true_divide(1" in run.source
        assert "sigmoid" not in run.source
    x = (rng.standard_normal((4, 6)) * 30).astype(dtype.numpy)
    x[0, :2] = [0.0, np.nan]
    want = compile_program(program)([x])
    for _ in range(2):
        assert [_bits(a) for a in run([x])] == [_bits(a) for a in want]


def test_a_large_relu_inside_runs_the_blocked_max_into_scratch(rng):
    """A relu of 16 or more blocks that stays inside runs the interpreter's blocked max
    against 0 into a scratch buffer (a fresh array per call before), with its bits (NaN
    and -0.0 included); of a strided view, NumPy's own max into the buffer."""
    n = 16 * 4096
    steps = [
        ("neg", (0,), {}, _spec(8, 2 * n)),
        ("relu", ((0, 0),), {}, _spec(8, 2 * n)),  # in place over the neg
        ("mul", ((1, 0), (1, 0)), {}, _spec(8, 2 * n)),
        ("slice", ((2, 0),), {"slices": ((0, 1, 8), (0, 2, n))}, _spec(8, n)),
        ("relu", ((3, 0),), {}, _spec(8, n)),  # of a strided view
        ("reduce_sum", ((4, 0),), {"axes": (1,), "keepdims": False}, _spec(8)),
    ]
    program = build_program(("relu", id(steps)), [(F32, (8, 2 * n), CPU())], steps, [(5, 0)])
    run = fast.lower(program)
    relus = [line for line in run.source.splitlines() if "against_scalar(maximum" in line]
    assert len(relus) == 2 and relus[0].endswith("b0)"), run.source
    x = rng.standard_normal((8, 2 * n)).astype(np.float32)
    x[0, :5] = [np.nan, -0.0, 0.0, np.inf, -np.inf]
    want = compile_program(program)([x])
    for _ in range(2):
        assert [_bits(a) for a in run([x])] == [_bits(a) for a in want]


def test_common_subexpressions_merge_only_equal_bits():
    """Two instructions merge when op, operands and kwargs agree (``full`` of 0.0 and of
    -0.0 compare equal in Python and must not), and two outputs stay two arrays."""
    full = {"shape": (2,), "dtype": F32, "device": CPU()}
    steps = [
        ("full", (), {**full, "value": 0.0}, _spec(2)),
        ("full", (), {**full, "value": -0.0}, _spec(2)),
        ("full", (), {**full, "value": 0.0}, _spec(2)),
        ("exp", (0,), {}, _spec(2)),
        ("exp", (0,), {}, _spec(2)),
    ]
    program = build_program(
        ("cse", id(steps)), [(F32, (2,), CPU())], steps, [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0)]
    )
    run = fast.lower(program)
    x = np.array([0.5, -1.0], np.float32)
    got, want = run([x]), compile_program(program)([x])
    assert len({id(a) for a in got}) == len(got)
    steps = steps[:3] + [("exp", (0,), {}, _spec(2)), ("exp", (0,), {}, _spec(2))]
    steps += [("add", ((3, 0), (4, 0)), {}, _spec(2))]
    inner = build_program(("cse2", id(steps)), [(F32, (2,), CPU())], steps, [(5, 0)])
    assert fast.lower(inner).source.count("exp(") == 1
    assert [_bits(a) for a in got] == [_bits(a) for a in want]
    assert np.signbit(got[1]).all() and not np.signbit(got[0]).any()


def test_check_mode_checks_the_first_calls_of_each_program(rng):
    program = _program()
    interp = compile_program(program)
    calls = []
    run = fast.checked(program, fast.lower(program), lambda xs: calls.append(1) or interp(xs))
    xs = _inputs(rng)
    want = [_bits(a) for a in interp(xs)]
    for _ in range(fast.CHECKED_CALLS + 2):
        assert [_bits(a) for a in run(xs)] == want
    assert len(calls) == fast.CHECKED_CALLS


def test_a_stack_times_a_matrix_is_one_gemm_in_both_executors(rng, monkeypatch):
    """(T, m, k) @ (k, n) from a C-contiguous stack runs as one (T*m, k) GEMM, in a scratch
    buffer or as an output, with the interpreter's bits; a stack in another layout keeps
    NumPy's per-matrix loop."""
    from nabla.backends.numpy import lowerings

    steps = [
        ("matmul", (0, 1), {}, _spec(6, 4, 5)),  # an output
        ("matmul", (0, 2), {}, _spec(6, 4, 5)),  # into scratch: exp reads it
        ("exp", ((1, 0),), {}, _spec(6, 4, 5)),
    ]
    inputs = [(F32, (6, 4, 3), CPU()), (F32, (3, 5), CPU()), (F32, (3, 5), CPU())]
    program = build_program(("gemm", id(steps)), inputs, steps, [(0, 0), (2, 0)])
    run, interp = fast.lower(program), compile_program(program)
    assert "out=b0" in run.source
    calls = []
    real = np.matmul
    monkeypatch.setattr(
        lowerings.np, "matmul", lambda *a, **k: calls.append(a[0].shape) or real(*a, **k)
    )
    x, w = (
        rng.standard_normal((6, 4, 3)).astype(np.float32),
        rng.standard_normal((3, 5)).astype(np.float32),
    )
    other = np.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2)
    for xs in ([x, w, w + 1], [other, w, w + 1]):
        calls.clear()
        want = interp(xs)
        got = run(xs)
        assert [_bits(g) for g in got] == [_bits(a) for a in want]
        np.testing.assert_allclose(got[0], x @ w, rtol=1e-5, atol=1e-6)
        folded = xs[0].flags.c_contiguous
        assert set(calls) == ({(24, 3)} if folded else {xs[0].shape}), calls


def test_split_parts_keep_their_layout_for_the_chains(rng):
    """A split's parts are slices of its operand: of a C-ordered value they stay in C order,
    so a sigmoid of each runs as the in-scratch chain, with the interpreter's bits (also on
    an input laid out otherwise, whose variant calls the lowering)."""
    steps = [
        ("exp", (0,), {}, _spec(4, 8)),
        ("split", ((0, 0),), {"sizes": (2, 6), "axis": 1}, _spec(4, 2) + _spec(4, 6)),
        ("sigmoid", ((1, 0),), {}, _spec(4, 2)),
        ("sigmoid", ((1, 1),), {}, _spec(4, 6)),
        ("add", ((2, 0), (2, 0)), {}, _spec(4, 2)),
        ("mul", ((3, 0), (3, 0)), {}, _spec(4, 6)),
    ]
    program = build_program(
        ("split-chain", id(steps)), [(F32, (4, 8), CPU())], steps, [(4, 0), (5, 0), (1, 1)]
    )
    run, interp = fast.lower(program), compile_program(program)
    assert "sigmoid" not in run.source and run.source.count("true_divide(1") == 2
    x = rng.standard_normal((4, 8)).astype(np.float32)
    for xs in ([x], [np.asfortranarray(x)]):
        got, want = run(xs), interp(xs)
        assert [_bits(g) + (g.strides,) for g in got] == [_bits(a) + (a.strides,) for a in want]
    parts = np.split(x, [2], axis=1)
    from nabla.backends.numpy.lowerings import LOWERINGS

    mine = LOWERINGS["split"]([x], {"sizes": (2, 6), "axis": 1})
    assert all(a.strides == b.strides and np.array_equal(a, b) for a, b in zip(mine, parts))


def test_elementwise_pieces_are_written_into_their_concatenations_buffer(rng):
    """A concatenation of elementwise results nothing else reads (an LSTM's four gates'
    cotangents) is one buffer the pieces are written into with ``out=`` slices; a piece
    read elsewhere, an input, or a piece made otherwise (a matmul) is copied into its slice
    at the concatenation. The interpreter's bits, on both layouts of the input."""
    steps = [
        ("exp", (0,), {}, _spec(4, 3)),  # 0: a piece
        ("tanh", (0,), {}, _spec(4, 3)),  # 1: read again below: copied
        ("mul", ((1, 0), (1, 0)), {}, _spec(4, 3)),  # 2: a piece
        ("matmul", (0, 1), {}, _spec(4, 2)),  # 3: not elementwise: copied
        ("concatenate", ((0, 0), (1, 0), (2, 0), (3, 0), 0), {"axis": 1}, _spec(4, 14)),
        ("sin", ((4, 0),), {}, _spec(4, 14)),  # 5: reads the concatenation
        ("reduce_sum", ((5, 0),), {"axes": (1,), "keepdims": False}, _spec(4)),  # 6
        ("neg", ((1, 0),), {}, _spec(4, 3)),  # 7: the second reader of 1
        ("concatenate", ((7, 0), (7, 0)), {"axis": 0}, _spec(8, 3)),  # 8: one piece twice
    ]
    inputs = [(F32, (4, 3), CPU()), (F32, (3, 2), CPU())]
    program = build_program(("concat-pieces", id(steps)), inputs, steps, [(6, 0), (8, 0)])
    run, interp = fast.lower(program), compile_program(program)
    src = run.source
    assert src.count("concatenate") == 1, src  # only the one of a piece twice
    sliced = [line for line in src.splitlines() if "out=b" in line and "[:, " in line]
    assert len(sliced) == 2 and all("exp(" in ln or "multiply(" in ln for ln in sliced), src
    for copied in ("[:, 3:6] = v", "[:, 9:11] = v", "[:, 11:14] = v0"):
        assert src.count(copied) == 1, src
    for _ in range(2):
        x, w = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 2)))
        for xs in ([x, w], [np.asfortranarray(x), w]):
            got, want = run(xs), interp(xs)
            assert [_bits(g) for g in got] == [_bits(a) for a in want]


def test_a_forward_running_sum_keeps_its_layout_and_a_reverse_one_does_not(rng):
    """A forward cumsum's result is a new C-ordered array, so a per-channel scale of it
    goes into a scratch buffer (and runs tiled, ``rowwise``, once there are many rows); a
    reverse one is a flipped view, which claims no layout: NumPy lays the product out.
    Both give the interpreter's bits and strides."""
    shape = (64, 4, 16)
    steps = []
    for reverse in (False, True):
        at = len(steps)
        kw = {"axis": 1, "exclusive": False, "reverse": reverse}
        steps += [
            ("cumsum", (0,), kw, _spec(*shape)),
            ("mul", ((at, 0), 1), {}, _spec(*shape)),
            ("reduce_sum", ((at + 1, 0),), {"axes": (1,), "keepdims": False}, _spec(64, 16)),
        ]
    program = build_program(
        ("cumsum-layout", id(steps)),
        [(F32, shape, CPU()), (F32, (16,), CPU())],
        steps,
        [(2, 0), (5, 0), (3, 0)],
    )
    run, interp = fast.lower(program), compile_program(program)
    into_scratch = [ln for ln in run.source.splitlines() if "multiply(" in ln and "out=b" in ln]
    assert len(into_scratch) == 1 and "cumsum" not in into_scratch[0]
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)
    got, want = run([x, w]), interp([x, w])
    assert [_bits(g) + (g.strides,) for g in got] == [_bits(a) + (a.strides,) for a in want]


def test_a_reshape_that_copies_a_transpose_is_a_new_c_ordered_array(rng):
    """A transpose of a new array, reshaped where NumPy cannot make a view (a 2x2 pool's
    taps moved first), is copied into a new C-contiguous array: what follows still goes
    into scratch buffers, with the interpreter's bits and strides. A reshape NumPy makes
    as a view of the transpose claims no layout."""
    steps = [
        ("exp", (0,), {}, _spec(4, 2, 6)),
        ("reshape", ((0, 0),), {"shape": (2, 2, 2, 6)}, _spec(2, 2, 2, 6)),
        ("transpose", ((1, 0),), {"perm": (2, 0, 1, 3)}, _spec(2, 2, 2, 6)),
        ("reshape", ((2, 0),), {"shape": (4, 2, 6)}, _spec(4, 2, 6)),  # a copy
        ("mul", ((3, 0), (3, 0)), {}, _spec(4, 2, 6)),
        ("reshape", ((2, 0),), {"shape": (2, 4, 6)}, _spec(2, 4, 6)),  # a view
        ("mul", ((5, 0), (5, 0)), {}, _spec(2, 4, 6)),
        ("reduce_sum", ((4, 0),), {"axes": (0,), "keepdims": False}, _spec(2, 6)),
    ]
    program = build_program(
        ("transpose-copy", id(steps)), [(F32, (4, 2, 6), CPU())], steps, [(7, 0), (6, 0)]
    )
    run, interp = fast.lower(program), compile_program(program)
    lines = run.source.splitlines()
    assert any("v5 = multiply(v4, v4, out=b" in ln for ln in lines), run.source
    assert any(ln.strip() == "v7 = multiply(v6, v6)" for ln in lines), run.source
    x = rng.standard_normal((4, 2, 6)).astype(np.float32)
    for _ in range(2):
        got, want = run([x]), interp([x])
        assert [_bits(g) + (g.strides,) for g in got] == [_bits(a) + (a.strides,) for a in want]
    source, perm, f32 = (2, 2, 2, 6), (2, 0, 1, 3), (np.dtype(np.float32), None)
    assert fast._copying_reshape((source, perm), f32, (4, 2, 6))
    assert not fast._copying_reshape((source, perm), f32, (2, 4, 6))
    assert not fast._copying_reshape(None, f32, (4, 2, 6))


def test_a_power_by_an_input_exponent_keeps_the_chain_in_scratch(rng):
    """Layer norm's ``(x - mean) ** 2`` takes its exponent as a program input, so the power
    runs through its lowering (``x * x`` for 2). Its result is C-ordered like its operands,
    so what follows (the division by the root of the variance) still goes into scratch,
    with the interpreter's bits."""
    shape = (16, 64, 128)
    steps = [
        ("sub", (0, 1), {}, _spec(*shape)),
        ("pow", ((0, 0), 2), {}, _spec(*shape)),
        ("reduce_sum", ((1, 0),), {"axes": (2,), "keepdims": True}, _spec(16, 64, 1)),
        ("sqrt", ((2, 0),), {}, _spec(16, 64, 1)),
        ("div", ((0, 0), (3, 0)), {}, _spec(*shape)),
        ("reduce_sum", ((4, 0),), {"axes": (0,), "keepdims": False}, _spec(64, 128)),
    ]
    program = build_program(
        ("pow-layout", id(steps)),
        [(F32, shape, CPU()), (F32, (16, 64, 1), CPU()), (F32, (), CPU())],
        steps,
        [(5, 0)],
    )
    run, interp = fast.lower(program), compile_program(program)
    assert any("divide(" in ln and "out=b" in ln for ln in run.source.splitlines())
    xs = [rng.standard_normal(s).astype(np.float32) for s in (shape, (16, 64, 1))]
    for two in (2.0, 3.0):
        inputs = [*xs, np.float32(two)]
        got, want = run(inputs), interp(inputs)
        assert [_bits(g) + (g.strides,) for g in got] == [_bits(a) + (a.strides,) for a in want]


def test_a_scans_stacked_outputs_are_c_ordered_for_what_follows(monkeypatch, rng):
    """A scan's ys are new arrays the loop fills, so products of them go into scratch (an
    LSTM's gates after its loop); its carries come back as the body made them and claim
    nothing. The check mode compares every call with the interpreter."""
    monkeypatch.setattr(CONFIG, "fast_numpy_check", True)
    seen = []
    real = executor._run

    def recording(program, n, inputs):
        seen.append(program)
        return real(program, n, inputs)

    monkeypatch.setattr(executor, "_run", recording)
    with nb.backend("numpy"):

        def step(c, x):
            c = nb.tanh(c * 0.5 + x)
            return c, c * 2.0

        def f(xs, w):
            carry, ys = nb.scan(step, nb.zeros((8, 16)), xs)
            return ((ys * w) * ys).sum(axis=0), carry * w

        g = nb.compile(f)
        xs = nb.constant(rng.standard_normal((5, 8, 16)).astype(np.float32))
        w = nb.constant(rng.standard_normal(16).astype(np.float32))
        for _ in range(4):
            out, carry = g(xs, w)
            out.numpy()
    program = max(seen, key=lambda p: p.num_ops)
    lines = fast.lower(program).source.splitlines()
    assert any("scan" in ln for ln in lines)
    assert sum("multiply(" in ln and "out=b" in ln for ln in lines) >= 2


def test_views_nothing_reads_are_not_made(rng):
    """A per-channel row broadcast to full size and then combined with a full-size value
    runs tiled through the row (``rowwise``): the broadcast view itself, read by nothing
    else, is left out of the code; the bits stay the interpreter's."""
    shape = (64, 8, 8, 16)
    steps = [
        ("broadcast_to", (1,), {"shape": shape}, _spec(*shape)),
        ("mul", (0, (0, 0)), {}, _spec(*shape)),
        ("exp", ((1, 0),), {}, _spec(*shape)),
        ("reduce_sum", ((2, 0),), {"axes": (0,), "keepdims": False}, _spec(8, 8, 16)),
    ]
    program = build_program(
        ("dead-view", id(steps)), [(F32, shape, CPU()), (F32, (16,), CPU())], steps, [(3, 0)]
    )
    run, interp = fast.lower(program), compile_program(program)
    assert "rowwise(" in run.source and "broadcast_to(" not in run.source
    xs = [rng.standard_normal(shape).astype(np.float32), rng.standard_normal(16).astype(np.float32)]
    got, want = run(xs), interp(xs)
    assert [_bits(g) for g in got] == [_bits(a) for a in want]


def test_the_straight_line_form_frees_dead_intermediates_as_the_interpreter_does(
    monkeypatch,
):
    """Its fresh arrays (a chain after a checkpoint's output, whose layout is not known, makes
    one per op) lived until the function returned: the gradient of 8 checkpointed blocks held
    150 arrays where the interpreter held ~22."""
    import tracemalloc

    x = nb.constant(np.random.default_rng(0).standard_normal(1 << 19).astype(np.float32))
    block = nb.checkpoint(lambda h: nb.tanh(nb.sin(h) * 1.1 + h) * 0.9 + h * 0.1)

    def loss(h):
        for _ in range(8):
            h = block(h)
        return h.sum()

    def peak(fast_on: bool) -> int:
        monkeypatch.setattr(CONFIG, "fast_numpy", fast_on)
        monkeypatch.setattr(CONFIG, "fast_numpy_check", False)
        nb.grad(loss)(x).numpy()  # (the program made, and hot from here on)
        tracemalloc.start()
        try:
            for _ in range(3):
                nb.grad(loss)(x).numpy()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    interpreted, lowered = peak(False), peak(True)
    assert lowered <= 2 * interpreted, (lowered >> 20, interpreted >> 20)


def test_c_order_wins_when_an_elementwise_op_mixes_layouts(rng):
    """An elementwise op on a C-ordered operand of its result's shape and a transposed one
    (an RNN step's ``(W @ h^T)^T`` added to its input projection) gives a C-contiguous
    result in NumPy (C order wins a conflict between the operands' strides), so it goes
    into a scratch buffer, and what follows keeps buffers; with a dim of 1 the layout is
    left to NumPy. The interpreter's bits and strides either way."""
    for rows in (4, 1):
        steps = [
            ("transpose", (1,), {"perm": (1, 0)}, _spec(3, rows)),  # 0: h^T
            ("matmul", (2, (0, 0)), {}, _spec(5, rows)),  # 1: W @ h^T
            ("transpose", ((1, 0),), {"perm": (1, 0)}, _spec(rows, 5)),  # 2: its transpose
            ("add", (0, (2, 0)), {}, _spec(rows, 5)),  # 3: C + transposed
            ("tanh", ((3, 0),), {}, _spec(rows, 5)),  # 4
            ("mul", ((4, 0), 0), {}, _spec(rows, 5)),  # 5
            ("reduce_sum", ((5, 0),), {"axes": (1,), "keepdims": False}, _spec(rows)),  # 6
        ]
        inputs = [(F32, (rows, 5), CPU()), (F32, (rows, 3), CPU()), (F32, (5, 3), CPU())]
        program = build_program(("mixed-layouts", rows), inputs, steps, [(5, 0), (6, 0)])
        run, interp = fast.lower(program), compile_program(program)
        buffered = [ln for ln in run.source.splitlines() if "out=b" in ln and "matmul" not in ln]
        assert len(buffered) == (2 if rows > 1 else 0), run.source  # (add, tanh; mul escapes)
        gx, h, w = (rng.standard_normal(s[1]).astype(np.float32) for s in inputs)
        got, want = run([gx, h, w]), interp([gx, h, w])
        assert [_bits(g) + (g.strides,) for g in got] == [_bits(a) + (a.strides,) for a in want]
