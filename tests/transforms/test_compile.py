"""compile: caching, dynamic dims, static args, mixed outputs, fullgraph, LRU, and
transparency to grad/jvp/vmap on the first call and on every cache hit."""

import logging
import warnings

import numpy as np
import pytest

import nabla as nb


def _arr(*shape, seed=0):
    return nb.constant(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_miss_then_hits_run_the_function_once():
    calls = []

    @nb.compile
    def f(x, y):
        calls.append(1)
        return nb.tanh(x @ y) + 1.0

    x, y = _arr(4, 3), _arr(3, 2, seed=1)
    want = np.tanh(x.numpy() @ y.numpy()) + 1
    for k in range(3):
        np.testing.assert_allclose(
            f(x * (k + 1), y).numpy(), np.tanh((x.numpy() * (k + 1)) @ y.numpy()) + 1, rtol=1e-5
        )
    np.testing.assert_allclose(f(x, y).numpy(), want, rtol=1e-5)
    assert len(calls) == 1
    assert f.stats["misses"] == 1 and f.stats["hits"] == 3 and f.stats["cache_size"] == 1


def test_dtype_or_shape_change_retraces():
    f = nb.compile(lambda x: x * 2)
    f(_arr(3))
    f(_arr(4))
    f(_arr(4).cast(nb.float64))
    assert f.stats["misses"] == 3


def test_dynamic_batch_dim_served_by_one_trace():
    calls = []

    @nb.compile(dynamic_dims={0: {0: "batch"}})
    def f(x, w):
        calls.append(1)
        return nb.relu(x @ w).sum(axis=1)

    w = _arr(3, 5, seed=2)
    for n in (2, 7, 1, 16):
        x = _arr(n, 3, seed=n)
        got = f(x, w)
        assert got.shape == (n,)
        np.testing.assert_allclose(
            got.numpy(), np.maximum(x.numpy() @ w.numpy(), 0).sum(1), rtol=1e-5
        )
    # one trace with the batch dim symbolic serves every size from 2 up, each a fast hit;
    # size 1 (where broadcasting differs) has its own
    assert len(calls) == 2
    assert f.stats["misses"] == 2 and f.stats["hits"] == 2 and f.stats["replays"] == 0


def test_dynamic_dim_with_derived_sizes_stays_exact():
    # the concatenation's n + n and the reshape(-1) of it stay symbolic: one trace
    g = nb.compile(lambda x: nb.concatenate([x, x]).reshape(-1) * 2, dynamic_dims={0: {0: "n"}})
    for n in (2, 3, 4, 3):
        x = nb.constant(np.arange(n, dtype=np.float32))
        np.testing.assert_allclose(g(x).numpy(), np.concatenate([x.numpy(), x.numpy()]) * 2)
    assert g.stats["misses"] == 1 and g.stats["hits"] == 3


def test_dynamic_dims_never_reuse_a_size_read_as_a_number():
    """mean's divisor and a reshape(-1) depend on the size: the second size's trace differs
    from the first, so each size is traced (the plan was replayed with stale values)."""
    m = nb.compile(nb.mean, dynamic_dims={0: {0: "n"}})
    got = [m(nb.arange(n, dtype=nb.float32)).item() for n in (2, 4, 7, 4)]
    assert got == pytest.approx([0.5, 1.5, 3.0, 1.5])
    flat = nb.compile(lambda x: x.reshape((-1,)), dynamic_dims={0: {0: "n"}})
    assert [flat(nb.ones((n, 2))).numpy().shape for n in (2, 3, 5)] == [(4,), (6,), (10,)]
    # the count is a value computed from the symbolic size: still one trace each
    assert m.stats.misses == 1 and flat.stats.misses == 1


@pytest.mark.parametrize(
    "name",
    [
        "[::-1]",
        "[::-2]",
        "[-2::-1]",
        "[:1:-1]",
        "[-1:-4:-1]",
        "[1:-1:2]",
        "[5:]",
        "[:10]",
        "[-10:]",
    ],
)
def test_dynamic_dims_slice_from_the_end_at_every_size(name):
    """Slices whose numbers depend on the size: backwards (the start is the size minus
    one), ends counted from the end, and ends past the dim (clamped) or empty. Each call's
    values are NumPy's at its own size, never the first trace's numbers (a backwards slice
    gave [3, 1] for every size). Those kept as expressions serve every size from one
    trace; a slice clamped or empty at its trace's size traces per size."""
    f = nb.compile(lambda a: eval(f"a{name}"), dynamic_dims={0: {0: "n"}})
    for n in (4, 5, 7, 12, 3, 1):
        a = np.arange(n, dtype=np.float32)
        got = f(nb.constant(a)).numpy()
        want = eval(f"a{name}")
        assert got.shape == want.shape and np.array_equal(got, want), (n, got, want)
    if name in ("[::-1]", "[::-2]", "[-2::-1]", "[1:-1:2]"):  # expressions at every size
        assert f.stats.misses == 2  # (one for every size from 2 up; size 1 has its own)
    elif name in ("[5:]", "[:10]", "[-10:]"):  # clamped or empty at the first size
        assert f.stats.misses == 6


def test_dynamic_dims_update_a_region_counted_from_the_end():
    """``x.at[-1].set``, ``x[-2:] = v`` and ``slice_tensor(stop=[-1])`` at every size: an
    indexed update's region went through slices again and lost its expressions (the second
    size wrote the first size's last position; a smaller one failed to broadcast)."""

    def assign(a):
        a = a * 1
        a[-2:] = 0.0
        return a

    cases = [
        (lambda a: a.at[-1].set(0.0), lambda a: np.concatenate([a[:-1], [0.0]])),
        (assign, lambda a: np.concatenate([a[:-2], [0.0, 0.0]])),
        (lambda a: a.at[::-2].add(1.0), lambda a: a + (np.arange(a.size)[::-1] % 2 == 0)),
        (lambda a: nb.slice_tensor(a, start=[0], stop=[-1]), lambda a: a[:-1]),
        (lambda a: nb.slice_update(a, 9.0, stop=[-2], step=[-1]), lambda a: _set(a, -1, -2)),
    ]
    for fun, want in cases:
        f = nb.compile(fun, dynamic_dims={0: {0: "n"}})
        for n in (4, 5, 3, 7):
            a = np.arange(1, n + 1, dtype=np.float32)
            np.testing.assert_array_equal(f(nb.constant(a)).numpy(), want(a))
        assert f.stats.misses == 1


def test_dynamic_dims_sizes_taken_as_numbers_are_never_reused():
    """Each of these takes a dynamic size as a plain number, in nabla's code or the user's
    (``linspace``'s step, ``hann_window``'s, ``n ** -0.5``, ``len(x)``, ``abs``, a
    Jacobian's identity basis, label smoothing's ``e / C``): every size gets its own
    values, as uncompiled (the first trace's numbers were served at every size)."""
    from nabla.nn import functional as F

    smooth = lambda z: F.cross_entropy_loss(z, nb.zeros((2,), dtype=nb.int32), label_smoothing=0.1)  # noqa: E731
    cases = [
        lambda a: nb.linspace(0.0, 1.0, a.shape[0]) + a,
        lambda a: nb.linspace(0.0, 1.0, a.shape[0], endpoint=False) * a,
        lambda a: nb.hann_window(a.shape[0]) + a,
        lambda a: nb.hann_window(a.shape[0], periodic=False) + a,
        lambda a: a * a.shape[0] ** -0.5,
        lambda a: a * len(a),
        lambda a: a + abs(a.shape[0] - 5) + (a.shape[0] >> 1),
        lambda a: nb.jacrev(lambda y: nb.cumsum(y * 2.0))(a),
        lambda a: nb.jacfwd(lambda y: y[::-1] * 2.0)(a),
        lambda a: smooth(nb.broadcast_to(a, (2, a.shape[0]))),
        # cumprod's derivatives run log2(n) rounds of a scan: a number of rounds per size;
        # prod's derivative a tree of pairwise products, its levels per size
        lambda a: nb.grad(lambda y: nb.sum(nb.cumprod(y * 1.5, axis=0)))(a),
        lambda a: nb.jvp(lambda y: nb.cumprod(y, 0), (a,), (a * 0.0 + 1.0,))[1],
        lambda a: nb.grad(lambda y: nb.prod(y + 2.0))(a),
        lambda a: nb.roll(a, 4),  # (no roll at n=4, one at the other sizes)
    ]
    for k, fun in enumerate(cases):
        f = nb.compile(fun, dynamic_dims={0: {0: "n"}})
        for n in (4, 5, 7, 2, 4):
            a = nb.constant(np.linspace(-1.0, 1.0, n, dtype=np.float32))
            np.testing.assert_allclose(
                f(a).numpy(), fun(a).numpy(), rtol=1e-6, atol=1e-6, err_msg=f"case {k}, n={n}"
            )


def _set(a, start, stop):
    a = a.copy()
    a[start:stop:-1] = 9.0
    return a


def test_two_dynamic_dims_whose_sizes_swap_do_not_hide_a_derived_size():
    """(2, 3) then (3, 2) give equal traces (the concatenation is 5 long both times): the
    plan is not taken for every size until sizes that all move one way agree too."""
    f = nb.compile(lambda a, b: nb.concatenate([a, b]), dynamic_dims={0: {0: "n"}, 1: {0: "m"}})
    for n, m in [(2, 3), (3, 2), (4, 4), (3, 2), (6, 9)]:
        out = f(nb.zeros((n,)), nb.ones((m,)))
        assert out.shape == (n + m,)
        np.testing.assert_array_equal(out.numpy(), [0.0] * n + [1.0] * m)
    assert f.stats.misses == 1  # the length is the expression n + m, not the number 5
    g = nb.compile(lambda a, b: a.sum() + b.sum(), dynamic_dims={0: {0: "n"}, 1: {0: "m"}})
    for n, m in [(2, 3), (3, 2), (4, 6), (7, 1), (5, 5)]:
        assert g(nb.ones((n,)), nb.ones((m,))).item() == n + m
    assert g.stats.misses == 2 and g.stats.hits == 3  # (m=1 has a trace of its own)


def test_same_dynamic_name_requires_equal_sizes():
    f = nb.compile(lambda a, b: a + b, dynamic_dims={0: {0: "n"}, 1: {0: "n"}})
    f(_arr(3), _arr(3))
    np.testing.assert_allclose(
        f(_arr(5), _arr(5, seed=1)).numpy(), _arr(5).numpy() + _arr(5, seed=1).numpy()
    )
    with pytest.raises(ValueError, match="dynamic dim 'n'"):
        f(_arr(3), _arr(4))


def test_static_argument_change_retraces_and_unhashable_is_an_error():
    calls = []

    @nb.compile
    def f(x, power):
        calls.append(power)
        return x**power

    x = _arr(3)
    f(x, 2)
    f(x, 2)
    f(x, 3)
    assert calls == [2, 3]
    np.testing.assert_allclose(f(x, 3).numpy(), x.numpy() ** 3, rtol=1e-5)
    with pytest.raises(TypeError, match="not hashable"):
        f(x, bytearray(b"12"))


def test_mixed_outputs_rebuilt_on_hits():
    @nb.compile
    def f(x):
        return {"y": x + 1, "n": 3, "tag": "ok", "pair": (x * 2, None)}

    for k in range(3):
        out = f(_arr(2, seed=k))
        assert out["n"] == 3 and out["tag"] == "ok" and out["pair"][1] is None
        np.testing.assert_allclose(out["y"].numpy(), _arr(2, seed=k).numpy() + 1)
        np.testing.assert_allclose(out["pair"][0].numpy(), _arr(2, seed=k).numpy() * 2)


def test_grad_of_compiled_function_on_first_call_and_hits():
    def loss(w, x):
        return (nb.tanh(x @ w) ** 2).mean()

    cl = nb.compile(loss)
    x = _arr(5, 3)
    for k in range(4):
        w = _arr(3, 2, seed=10 + k)
        g = nb.grad(cl)(w, x)
        g_ref = nb.grad(loss)(w, x)
        assert np.abs(g.numpy()).sum() > 0
        np.testing.assert_allclose(g.numpy(), g_ref.numpy(), rtol=1e-5, atol=1e-7)
    assert cl.stats["misses"] == 1


def test_compile_of_grad_and_jvp_of_compiled():
    f = lambda x: (nb.sin(x) * x).sum()  # noqa: E731
    cg = nb.compile(nb.grad(f))
    for k in range(3):
        x = _arr(4, seed=k)
        np.testing.assert_allclose(cg(x).numpy(), nb.grad(f)(x).numpy(), rtol=1e-6)
    assert cg.stats["misses"] == 1 and cg.stats["hits"] == 2
    cf = nb.compile(lambda x: nb.sin(x) * x)
    x, t = _arr(4), _arr(4, seed=1)
    for _ in range(2):
        _, tout = nb.jvp(cf, (x,), (t,))
        _, want = nb.jvp(lambda x: nb.sin(x) * x, (x,), (t,))
        np.testing.assert_allclose(tout.numpy(), want.numpy(), rtol=1e-6)


def test_vmap_of_compile_and_compile_of_vmap():
    f = lambda x: (x * x).sum()  # noqa: E731
    xs = _arr(6, 3)
    want = (xs.numpy() ** 2).sum(1)
    vc = nb.vmap(nb.compile(f))
    cv = nb.compile(nb.vmap(f))
    for _ in range(2):
        np.testing.assert_allclose(vc(xs).numpy(), want, rtol=1e-5)
        np.testing.assert_allclose(cv(xs).numpy(), want, rtol=1e-5)
    assert cv.stats["misses"] == 1 and cv.stats["hits"] == 1
    # a new batch size with the vmapped axis dynamic
    cvd = nb.compile(nb.vmap(f), dynamic_dims={0: {0: "b"}})
    for n in (2, 5, 7):
        x = _arr(n, 3, seed=n)
        np.testing.assert_allclose(cvd(x).numpy(), (x.numpy() ** 2).sum(1), rtol=1e-5)
    # one symbolic trace: every later size is a hit
    assert cvd.stats["misses"] == 1 and cvd.stats["hits"] == 2


def test_a_trace_made_under_vmap_serves_only_calls_batched_the_same_way():
    """A first call under vmap recorded the batched layout; a later plain call replayed it
    with the batch axes (an AxisError, a scan carry of the wrong shape, or, after a trace
    under two vmaps, gradients 9x too large)."""
    xs = nb.constant(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32))
    w = nb.constant(np.array([0.5, -0.3], np.float32))
    cf = nb.compile(lambda x, w: (x * w).sum())
    want = xs.numpy() @ w.numpy()
    outer = nb.vmap(nb.vmap(cf, in_axes=(0, None)), in_axes=(None, 0))(xs, xs)
    np.testing.assert_allclose(outer.numpy(), xs.numpy() @ xs.numpy().T, rtol=1e-6)
    np.testing.assert_allclose(cf(xs[1], w).numpy(), want[1], rtol=1e-6)
    np.testing.assert_allclose(nb.vmap(cf, in_axes=(0, None))(xs, w).numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(nb.grad(lambda v: cf(xs[1], v))(w).numpy(), xs.numpy()[1])
    carry, _ = nb.scan(lambda c, x: (c + cf(x, w), None), nb.constant(0.0), xs)
    np.testing.assert_allclose(carry.numpy(), want.sum(), rtol=1e-6)
    # the same batching again (new level ids) is a hit
    misses = cf.stats.misses
    nb.vmap(nb.vmap(cf, in_axes=(0, None)), in_axes=(None, 0))(xs, xs)
    assert cf.stats.misses == misses


def test_fullgraph_raises_and_fallback_is_counted():
    def f(x):
        if x.sum().item() > 0:  # realizes while traced
            return x * 2
        return x

    with pytest.raises(RuntimeError, match="fullgraph"):
        nb.compile(f, fullgraph=True)(nb.ones((2,)))
    c = nb.compile(f)
    np.testing.assert_allclose(c(nb.ones((2,))).numpy(), [2, 2])
    np.testing.assert_allclose(c(nb.ones((2,))).numpy(), [2, 2])
    assert c.stats["fallbacks"] == 2
    # a NumPy argument reaches the function as a tensor on every call, traced or not
    seen = []
    d = nb.compile(lambda x: (seen.append(type(x)), f(x))[1])
    for _ in range(3):
        assert isinstance(d(np.ones(2, np.float32)), nb.Tensor)
    assert seen == [nb.Tensor] * 3 and d.stats.fallbacks == 3


def test_lru_bound_and_clear_cache():
    f = nb.compile(lambda x: x + 1, max_cache_size=2)
    for n in (1, 2, 3):
        f(nb.ones((n,)))
    assert f.stats["cache_size"] == 2 and f.stats["evictions"] == 1
    with pytest.warns(UserWarning, match=r"dropped 2 traces at max_cache_size=2 \(4 traces"):
        f(nb.ones((1,)))  # evicted: traced again, and as many dropped as the cache holds
    assert f.stats["misses"] == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per function
        f(nb.ones((4,)))
    f.clear_cache()
    assert f.stats["cache_size"] == 0
    # least recently *used* goes first: a hit refreshes its trace (a, b, a, c evicts b)
    for n in (1, 2, 1, 3):
        f(nb.ones((n,)))
    misses = f.stats["misses"]
    f(nb.ones((1,)))
    assert f.stats["misses"] == misses
    f(nb.ones((2,)))
    assert f.stats["misses"] == misses + 1


def test_retrace_explanation_names_the_changed_field(caplog):
    f = nb.compile(lambda x, k: x * k)
    with caplog.at_level(logging.INFO, logger="nabla.compile"):
        f.explain = True
        f(nb.ones((2,)), 2)
        f(nb.ones((3,)), 2)
        f(nb.ones((3,)), 4)
    text = caplog.text
    assert "first trace" in text
    assert "retrace because leaf 0 changed" in text
    assert "retrace because leaf 1 changed" in text
    with caplog.at_level(logging.INFO, logger="nabla.compile"):
        with nb.debug_nans():  # (it read "the argument structure changed: T -> T")
            f(nb.ones((3,)), 4)
    assert "retrace because nb.debug_nans/debug_infs was switched on" in caplog.text
    # a compiled module has no __name__: its class names it (it raised AttributeError)
    lin = nb.compile(nb.nn.Linear(4, 4))
    with caplog.at_level(logging.INFO, logger="nabla.compile"):
        lin.explain = True
        lin(nb.ones((2, 4)))
        lin(nb.ones((3, 4)))
    assert "compile Linear: first trace" in caplog.text


def test_random_inside_compile_draws_fresh_values():
    f = nb.compile(lambda x: x + nb.uniform(x.shape))
    a = f(nb.zeros((4,))).numpy()
    b = f(nb.zeros((4,))).numpy()
    assert not np.allclose(a, b)
    assert f.stats["hits"] == 1


def test_compiled_training_step_matches_eager_with_one_trace():
    rng = np.random.default_rng(0)
    params = {
        "w1": nb.constant(rng.standard_normal((4, 8)).astype(np.float32) * 0.3),
        "b1": nb.zeros((8,)),
        "w2": nb.constant(rng.standard_normal((8, 1)).astype(np.float32) * 0.3),
    }
    x = nb.constant(rng.standard_normal((16, 4)).astype(np.float32))
    y = nb.constant(rng.standard_normal((16, 1)).astype(np.float32))

    def loss(p, x, y):
        h = nb.relu(x @ p["w1"] + p["b1"])
        return ((h @ p["w2"] - y) ** 2).mean()

    def step(p, x, y):
        value, g = nb.value_and_grad(loss)(p, x, y)
        return nb.tree_map(lambda a, b: a - 0.1 * b, p, g), value

    traces = []

    def counted(p, x, y):
        traces.append(1)
        return step(p, x, y)

    cstep = nb.compile(counted)
    pe, pc = params, params
    for _ in range(5):
        pe, le = step(pe, x, y)
        pc, lc = cstep(pc, x, y)
        np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-5)
    for k in pe:
        np.testing.assert_allclose(pc[k].numpy(), pe[k].numpy(), rtol=1e-5, atol=1e-6)
    assert len(traces) == 1 and cstep.stats["hits"] == 4
    assert lc.item() < loss(params, x, y).item()


def test_realizations_in_other_threads_never_turn_a_trace_into_a_fallback():
    import threading
    import time

    def body(a):
        out = a * 2.0
        time.sleep(0.02)  # other threads realize values while this trace is open
        return out + 1.0

    lazy = nb.compile(body)
    strict = nb.compile(body, fullgraph=True)
    errors = []

    def worker(i):
        try:
            x = np.arange(i + 1, dtype=np.float32)
            for _ in range(5):
                for f in (lazy, strict):
                    got = f(nb.constant(x)).numpy()  # shape (i+1,): each thread traces
                    np.testing.assert_allclose(got, x * 2.0 + 1.0)
                    nb.exp(nb.constant(x)).numpy()  # realizations between the traces
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert lazy.stats.fallbacks == 0 and strict.stats.fallbacks == 0
    assert lazy.stats.hits + lazy.stats.misses == 40


def test_a_seeded_stream_goes_on_as_uncompiled_past_a_draw_nobody_reads():
    """A compiled call draws as many global keys as the function does uncompiled, a draw
    whose value is unused (dead code in the plan) included, so a seeded run gives the same
    numbers with and without compile (the dead draw's key was skipped from the second call
    on, shifting every later draw)."""

    def read_one(x):
        nb.uniform((2,))  # drawn, never read
        return x + nb.uniform((2,))

    def read_none(x):
        nb.uniform((2,))
        return x * 2.0

    x = nb.zeros((2,))
    for fun in (read_one, read_none):
        runs = []
        for f in (fun, nb.compile(fun)):
            nb.random.seed(0)
            runs.append([f(x).numpy() for _ in range(3)] + [nb.uniform((2,)).numpy()])
        np.testing.assert_array_equal(np.array(runs[1]), np.array(runs[0]))


def test_random_draws_take_the_fast_path_with_fresh_values_per_call():
    f = nb.compile(lambda x: x * 2.0 + nb.uniform((4,)))
    x = nb.ones((4,))
    draws = [f(x).numpy() - 2.0 for _ in range(4)]
    assert f.stats.misses == 1 and f.stats.hits == 3 and f.stats.replays == 0
    assert all(((0 <= d) & (d < 1)).all() for d in draws)
    assert len({d.tobytes() for d in draws}) == 4  # fresh on every call, compiled or not
    keyed = nb.compile(lambda key, v: nb.random.normal(key, (3,)) + v)
    key = nb.random.key(0)
    ref = nb.random.normal(key, (3,)).numpy()
    for _ in range(3):
        np.testing.assert_array_equal(keyed(key, nb.zeros((3,))).numpy(), ref)
    assert keyed.stats.replays == 0
    # a draw that reads a value computed in the graph cannot run first: the replay path
    derived = nb.compile(lambda key: nb.random.normal(key + 0, (2,)))
    for _ in range(2):
        np.testing.assert_array_equal(derived(key).numpy(), nb.random.normal(key, (2,)).numpy())
    assert derived.stats.replays == 1


def test_draws_of_a_compiled_function_stay_independent_under_vmap_and_an_outer_compile():
    """A cache hit under vmap draws per element (as the function run without compile), and a
    compiled function called from another renews its draws on every outer call."""
    f = nb.compile(lambda a: a + nb.normal(a.shape))
    x = nb.zeros((3, 2))
    f(x[0]), f(x[0])  # warm: the trace, then a plan hit
    rows = nb.vmap(f)(x).numpy()
    assert len({r.tobytes() for r in rows}) == 3
    outer = nb.compile(lambda a: f(a) * 1.0)
    assert len({outer(x[0]).numpy().tobytes() for _ in range(3)}) == 3
    mapped = nb.compile(lambda a: nb.vmap(f)(a))
    calls = [mapped(x).numpy() for _ in range(3)]
    assert len({c.tobytes() for c in calls}) == 3
    assert all(len({r.tobytes() for r in c}) == 3 for c in calls)


def test_a_captured_requires_grad_tensor_gets_its_gradient_on_every_call():
    """PyTorch style: a parameter captured by closure with requires_grad=True gets its
    .grad from backward() on cache hits too (they replay instead of running the plan as
    constants), and a captured value folded into the plan before it required grad makes
    the next call trace again."""
    w = nb.constant([1.0, 2.0, 3.0])
    w.requires_grad = True
    f = nb.compile(lambda a: (a * w).sum())
    a = nb.ones((3,))
    for arg in (a, a, a + 0.0):
        w.grad = None
        f(arg).backward()
        np.testing.assert_array_equal(w.grad.numpy(), [1.0, 1.0, 1.0])
    v = nb.constant(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    g = nb.compile(lambda b: (b @ (v.T * 2.0)).sum())
    b = nb.ones((4, 3))
    g(b), g(b)  # v.T * 2.0 is folded into a constant of the plan
    v.requires_grad = True
    for _ in range(2):
        v.grad = None
        g(b).backward()
        np.testing.assert_array_equal(v.grad.numpy(), np.full((2, 3), 8.0))


def test_assigning_into_an_argument_updates_the_caller_s_tensor_as_eagerly():
    """``a[0] = v``, ``a += v`` and in-place methods on an argument reach the caller's tensor
    at every call, as without compile (a hit used to leave it as it was, after one warning
    at the trace)."""

    def f(a, b):
        a[0] = 7.0
        b.mul_(2.0)
        b += a  # (rebinds b, as a Python name: not an update of the argument)
        return a * b

    c = nb.compile(f)
    for _ in range(3):
        x, y = nb.ones((3,)), nb.arange(3, dtype=nb.float32)
        xe, ye = nb.ones((3,)), nb.arange(3, dtype=nb.float32)
        np.testing.assert_array_equal(c(x, y).numpy(), f(xe, ye).numpy())
        np.testing.assert_array_equal(x.numpy(), [7.0, 1.0, 1.0])
        np.testing.assert_array_equal(y.numpy(), ye.numpy())
    assert c.stats.hits == 2 and c.stats.fallbacks == 0


def test_numpy_arguments_are_traced_values_as_in_jax_jit():
    """jax.jit traces NumPy inputs; they used to be static keys (unhashable: TypeError)."""
    f = nb.compile(lambda x, s: (x * 2.0).sum() + s)
    a = np.ones(3, np.float32)
    assert f(a, 1.0).item() == 7.0
    assert f(a * 3, 1.0).item() == 19.0  # new values, same trace
    assert f.stats.misses == 1
    assert f(np.float32(2.0), 1.0).item() == 5.0  # a NumPy scalar reaches f as itself
    # ... and keys the trace by value, so the ops take it as uncompiled: weak, as a Python
    # number (x + np.float64(1) stays float32, where a traced float64 value widened it)
    add = nb.compile(lambda x, s: x + s)
    x = nb.ones((2,))
    for s in (np.float64(1), np.float64(2), np.int64(3)):
        got = add(x, s)
        assert got.dtype == nb.float32 and got.numpy().tolist() == [1.0 + s] * 2
    g = nb.compile(lambda p: p["w"] @ p["b"])
    out = g({"w": np.eye(2, dtype=np.float32), "b": np.array([1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0])
    # dynamic_dims name a NumPy argument's dims as they do a tensor's
    h = nb.compile(lambda x: (x * 2.0).sum(), dynamic_dims={0: {0: "n"}})
    assert h(np.ones(3, np.float32)).item() == 6.0 and h(np.ones(5, np.float32)).item() == 10.0
    assert h(np.ones(7, np.float32)).item() == 14.0
    assert h.stats.misses == 1 and h.stats.hits == 2


def test_a_compiled_function_first_called_inside_another_is_part_of_its_trace():
    """The inner function's first trace happens inside the outer's: its ops belong to the
    outer plan too (they were taken for constants: stale values, zero gradients)."""
    inner = nb.compile(lambda x: x * 2)
    outer = nb.compile(lambda x: inner(x) + 1)
    assert [outer(nb.constant(v)).item() for v in (1.0, 5.0)] == [3.0, 11.0]
    assert nb.grad(outer)(nb.constant(5.0)).item() == 2.0
    cube = nb.compile(lambda x: x**3)
    dcube = nb.compile(nb.grad(cube))
    assert [dcube(nb.constant(v)).item() for v in (3.0, 6.0)] == [27.0, 108.0]
    noisy = nb.compile(lambda x: x * nb.random.uniform(()))
    twice = nb.compile(lambda x: noisy(x) + 1)
    assert twice(nb.constant(1.0)).item() != twice(nb.constant(1.0)).item()  # fresh draws


def test_static_floats_are_keyed_by_their_bits():
    """-0.0 and 0.0 are different static values (they shared a trace); NaN hits its trace."""
    f = nb.compile(lambda x, s: nb.atan2(nb.constant(s), x))
    assert f(nb.constant(-1.0), 0.0).item() > 0 > f(nb.constant(-1.0), -0.0).item()
    for _ in range(3):
        f(nb.constant(-1.0), float("nan"))
    assert f.stats.misses == 3 and f.stats.hits == 2


def test_static_argnums_and_argnames_as_jax_jit():
    f = nb.compile(lambda x, n: x * n, static_argnums=(1,))
    assert [f(nb.constant(2.0), np.float32(v)).item() for v in (3.0, 4.0, 3.0)] == [6, 8, 6]
    assert f.stats.misses == 2 and f.stats.hits == 1  # keyed by value, not traced
    g = nb.compile(lambda x, *, mode="a": x * (2 if mode == "a" else 3), static_argnames="mode")
    assert g(nb.constant(1.0), mode="b").item() == 3.0
    with pytest.raises(TypeError, match="static argument 1 of <lambda> is a Tensor"):
        f(nb.constant(2.0), nb.constant(3.0))


def test_a_size_whose_trace_falls_back_runs_lazily_each_time():
    def f(x):
        if x.shape[0] > 2 and float(x.sum()) > 0:  # reads a value at larger sizes
            return x * 2
        return x * 3

    c = nb.compile(f, dynamic_dims={0: {0: "n"}})
    assert [c(nb.ones(n)).tolist()[0] for n in (2, 3, 3, 4, 2)] == [3, 2, 2, 2, 3]
    assert c.stats.fallbacks == 3 and c.stats.misses == 3


def test_ops_on_the_traces_own_constants_run_once_when_traced():
    """Small values computed only from constants the trace made itself (``nb.zeros(())``)
    are folded into the plan when it is traced. Captured tensors are inputs read at every
    call, so the ops on them stay in the plan, and random draws are never folded."""

    w_np = np.arange(6, dtype=np.float32).reshape(2, 3)
    w, big = nb.constant(w_np), nb.constant(np.ones(1 << 15, np.float32))
    f = nb.compile(lambda x: x @ (w.T * 2.0) + nb.exp(nb.zeros(())) + (big * 3.0).sum())
    noisy = nb.compile(lambda x: x + nb.uniform(()) * 2.0)
    x = nb.constant(np.ones((4, 3), np.float32))
    want = np.ones((4, 3)) @ (w_np.T * 2.0) + 1.0 + 3.0 * (1 << 15)
    with nb.backend("numpy"):
        np.testing.assert_allclose(f(x).numpy(), want)  # the trace
        np.testing.assert_allclose(f(x).numpy(), want)  # the plan
        plan = next(iter(f._cache.values())).program()
        a, b = noisy(x).numpy(), noisy(x).numpy()
    ops = sorted(ins.op for ins in plan.instructions)
    assert ops == ["add", "add", "matmul", "mul", "mul", "reduce_sum", "transpose"], ops
    assert not np.allclose(a, b)


def test_a_repeated_call_takes_the_hot_lane_and_anything_else_the_general_path():
    # the hot lane serves a call like the last one (same layouts, realized, plain); every
    # other call goes the general way, with the same results and counts as without it
    w = nb.constant(np.float32([1.0, 2.0, 3.0]))
    f = nb.compile(lambda a: a * w + 1)
    x = nb.constant(np.float32([1.0, 1.0, 1.0]))
    np.testing.assert_allclose(f(x).numpy(), [2.0, 3.0, 4.0])  # traced
    np.testing.assert_allclose(f(x).numpy(), [2.0, 3.0, 4.0])  # general path: hot lane set
    assert f._hot is not None
    np.testing.assert_allclose(f(x).numpy(), [2.0, 3.0, 4.0])  # hot
    np.testing.assert_allclose(f(x * 2).numpy(), [3.0, 5.0, 7.0])  # a promise: general path
    np.testing.assert_allclose(f(nb.constant(np.float32([0, 1, 2]))).numpy(), [1.0, 3.0, 7.0])
    w = nb.constant(np.float32([0.0, 0.0, 5.0]))  # a rebound capture is read anew
    np.testing.assert_allclose(f(x).numpy(), [1.0, 1.0, 6.0])
    assert f(nb.constant(np.ones((2, 3), np.float32))).shape == (2, 3)  # a new shape: traced
    np.testing.assert_allclose(f(x).numpy(), [1.0, 1.0, 6.0])
    np.testing.assert_allclose(f(nb.constant(np.float64([1, 1, 1]))).numpy(), [1.0, 1.0, 6.0])
    assert (f.stats.misses, f.stats.hits) == (3, 6)
    g = nb.grad(lambda v: f(v).sum())(x)  # a traced argument: the replay, with its gradient
    np.testing.assert_allclose(g.numpy(), [0.0, 0.0, 5.0])
    y = nb.vmap(f)(nb.constant(np.ones((2, 3), np.float32)))  # a batched argument
    np.testing.assert_allclose(y.numpy(), [[1.0, 1.0, 6.0]] * 2)
    np.testing.assert_allclose(f(x).numpy(), [1.0, 1.0, 6.0])


def test_pytrees_of_tensors_take_the_hot_lane_and_another_structure_does_not():
    # a JAX-style step(params, batch): the hot lane compares the arguments' structure,
    # then each leaf as for plain tensor arguments
    f = nb.compile(lambda p, batch: (p["w"] * batch[0] + p["b"], [batch[1] * 2.0]))
    p = {"w": nb.constant(np.float32([1, 2])), "b": nb.constant(np.float32([3, 4]))}
    batch = (nb.constant(np.float32([1, 1])), nb.constant(np.float32([5, 6])))
    for _ in range(3):  # traced, general path (hot lane set), hot
        y, (z,) = f(p, batch)
        np.testing.assert_allclose(y.numpy(), [4, 6])
        np.testing.assert_allclose(z.numpy(), [10, 12])
    assert f._hot is not None and f._hot.tree is not None
    assert (f.stats.misses, f.stats.hits) == (1, 2)
    # another structure with the same leaves: another trace, not the hot lane's program
    y, (z,) = f({"b": p["b"], "w": p["w"], "c": p["w"]}, batch)
    np.testing.assert_allclose(y.numpy(), [4, 6])
    assert f.stats.misses == 2
    f(p, batch)  # the first trace again (general path: hot lane set anew)
    y, _ = f(p, (nb.constant(np.float32([2, 2])), batch[1]))  # new values, same layouts
    np.testing.assert_allclose(y.numpy(), [5, 8])
    y, _ = f(p, (np.float32([2, 2]), batch[1]))  # a NumPy leaf: the general path
    np.testing.assert_allclose(y.numpy(), [5, 8])
    y, _ = f(p, (nb.constant(np.ones((3, 2), np.float32)), batch[1]))  # another shape
    assert y.shape == (3, 2) and f.stats.misses == 3
    np.testing.assert_allclose(y.numpy(), [[4, 6]] * 3)


def test_one_tensor_in_several_places_takes_the_hot_lane_only_in_the_same_places():
    # traced with x twice, the program reads one placeholder for both: the hot lane serves
    # calls that pass one tensor in the same places, and every other pattern is traced
    x, y = nb.constant(np.float32([1, 2])), nb.constant(np.float32([3, 4]))
    f = nb.compile(lambda a, b: a + b * 10)
    for _ in range(3):
        np.testing.assert_allclose(f(x, x).numpy(), [11, 22])
    assert f._hot is not None and f._hot.aliased == (0, 0)
    assert (f.stats.misses, f.stats.hits) == (1, 2)
    np.testing.assert_allclose(f(x, y).numpy(), [31, 42])  # two tensors: not one placeholder
    np.testing.assert_allclose(f(y, y).numpy(), [33, 44])
    np.testing.assert_allclose(f(y, x).numpy(), [13, 24])
    g = nb.compile(lambda xs: [v * 2 for v in xs])  # a list of one tensor (K collectives)
    for _ in range(3):
        out = g([x, x, y])
    assert g._hot is not None and g._hot.aliased == (0, 0, 2)
    assert [o.numpy().tolist() for o in g([x, y, x])] == [[2, 4], [6, 8], [2, 4]]
    assert [o.numpy().tolist() for o in g([y, y, x])] == [[6, 8], [6, 8], [2, 4]]
    assert [o.numpy().tolist() for o in out] == [[2, 4], [2, 4], [6, 8]]


def test_python_leaves_are_compared_by_value_on_the_hot_lane():
    # settings among the arguments (a step's learning-rate schedule flags, a treedef):
    # each compared as the cache key compares it, a float by its bits
    f = nb.compile(lambda p, cfg: p["w"] * cfg["scale"] + (1.0 if cfg["mode"] == "a" else 2.0))
    p = {"w": nb.constant(np.float32([1, -2]))}
    for _ in range(3):
        np.testing.assert_allclose(f(p, {"scale": 2.0, "mode": "a"}).numpy(), [3, -3])
    assert f._hot is not None and (f.stats.misses, f.stats.hits) == (1, 2)
    np.testing.assert_allclose(f(p, {"scale": 3.0, "mode": "a"}).numpy(), [4, -5])
    np.testing.assert_allclose(f(p, {"scale": 3.0, "mode": "b"}).numpy(), [5, -4])
    zero = f(p, {"scale": 0.0, "mode": "a"})
    f(p, {"scale": 0.0, "mode": "a"})  # hot lane set for 0.0
    neg = f(p, {"scale": -0.0, "mode": "a"})  # equal to 0.0, another key: traced
    assert f.stats.misses == 5
    np.testing.assert_allclose(zero.numpy(), neg.numpy())
    # a NumPy leaf is a traced value: the general path each time (never the hot lane)
    np.testing.assert_allclose(
        f({"w": np.float32([1, 1])}, {"scale": 2.0, "mode": "a"}).numpy(), [3, 3]
    )
    # an optimizer's compiled step passes Python settings and its params' treedef
    model = nb.nn.Linear(3, 2)
    opt = nb.nn.optim.SGD(model, lr=0.1)
    step = opt.compile_step(lambda m, x: (m(x) ** 2).mean())
    x = nb.constant(np.ones((4, 3), np.float32))
    losses = [float(step(x).item()) for _ in range(4)]
    assert step.compiled._hot is not None and losses[-1] < losses[0]


def test_a_call_on_sharded_realized_arguments_runs_at_the_call_laid_out_as_traced():
    # jax.jit's dispatch on a mesh: no lazy node around the plan; the outputs keep the
    # traced layouts (a partial sum comes back completed where the function reduces), and
    # a repeated call takes the hot lane, which checks each argument's sharding too
    mesh = nb.DeviceMesh("m", (2,), ("p",))
    x_np = np.arange(8, dtype=np.float32).reshape(4, 2)
    f = nb.compile(lambda v: (v * 2.0 + 1.0, nb.sum(v, axis=0)))
    x = nb.realize(nb.shard(x_np, mesh, nb.P("p")))
    for call in range(3):  # traced, then the plan at the call, then the hot lane
        y, s = f(x)
        for out in (y, s) if call else ():
            assert out._impl.node is None and out._impl.buffer is not None, call
        assert y.sharding == x.sharding and not s._impl.sharding.partial
        np.testing.assert_allclose(y.numpy(), x_np * 2 + 1)
        np.testing.assert_allclose(s.numpy(), x_np.sum(0))
    assert f._hot is not None and (f.stats.misses, f.stats.hits) == (1, 2)
    # the same shape laid out otherwise is another trace, never the hot lane's program
    by_cols = nb.realize(nb.shard(x_np, mesh, nb.P(None, "p")))
    y, s = f(by_cols)
    assert y.sharding == by_cols.sharding and f.stats.misses == 2
    np.testing.assert_allclose(y.numpy(), x_np * 2 + 1)
    np.testing.assert_allclose(s.numpy(), x_np.sum(0))
    # an unrealized sharded argument still joins its producer's program (one lazy node)
    lazy, _ = f(x * 1.0)
    assert lazy._impl.node is not None
    np.testing.assert_allclose(lazy.numpy(), x_np * 2 + 1)


def test_a_module_changed_after_tracing_is_never_served_the_old_trace():
    """As ``torch.compile`` guards on them: a submodule swapped (``m.act = ReLU()``, a
    Sequential's item), a Python attribute changed (a dropout's ``p``), a module rebound
    in a closure's dict and put in eval mode. Each was served the first trace (tanh
    after the swap, dropout masks after ``p = 0`` and after ``eval()``)."""

    class Net(nb.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nb.nn.Linear(3, 4, key=nb.random.key(0))
            self.act = nb.nn.Tanh()
            self.drop = nb.nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.act(self.lin(x)))

    x = nb.constant(np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3))
    m = Net()
    m.drop.p = 0.0
    for f in (nb.compile(m), nb.compile(lambda v: m(v))):
        m.act = nb.nn.Tanh()
        for _ in range(3):  # the hot lane too
            np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6)
        m.act = nb.nn.ReLU()
        for _ in range(3):
            np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6)
        assert (f(x).numpy() >= 0).all()
        m.drop.p = 0.5
        assert (f(x).numpy() == 0).any()  # masked now: the trace with p = 0 kept nothing
        m.drop.p = 0.0
    seq = nb.nn.Sequential(nb.nn.Linear(3, 4, key=nb.random.key(1)), nb.nn.Tanh())
    g = nb.compile(seq)
    g(x)
    seq[1] = nb.nn.ReLU()
    np.testing.assert_allclose(g(x).numpy(), seq(x).numpy(), rtol=1e-6)
    reg = {"m": nb.nn.Dropout(0.5)}
    h = nb.compile(lambda v: reg["m"](v))
    h(nb.ones((64,)))
    reg["m"] = nb.nn.Dropout(0.5)
    reg["m"].eval()
    for _ in range(3):
        np.testing.assert_array_equal(h(nb.ones((64,))).numpy(), np.ones(64))
    assert g.stats.misses == 2 and h.stats.misses == 2


def test_the_hot_lane_follows_a_modules_mode_and_writes_state_back():
    bn = nb.nn.BatchNorm1d(3)
    f = nb.compile(bn)
    x = nb.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    means = []
    for _ in range(4):  # training: every call updates the running mean, hot or not
        f(x)
        means.append(bn.running_mean.numpy().copy())
    assert all(np.all(b > a) for a, b in zip(means, means[1:]))
    bn.eval()
    out = f(x).numpy()
    for _ in range(2):
        np.testing.assert_allclose(f(x).numpy(), out)
    np.testing.assert_allclose(bn.running_mean.numpy(), means[-1])  # eval: no update
    bn.train()
    f(x)
    assert np.all(bn.running_mean.numpy() > means[-1])


def test_a_hit_under_vmap_replays_ops_the_trace_bound_without_batch_dims():
    """The trace of ``v @ m`` (a vector times a matrix) and ``a * b`` (ranks 1 and 2) bound
    their ops directly, as nothing was batched; replayed under vmap they keep NumPy's
    meaning (they had given a (5, 5, 3) product and a broadcasting error)."""
    rng = np.random.default_rng(5)
    v, ms = rng.random(4, dtype=np.float32), rng.random((5, 4, 3), dtype=np.float32)
    f = nb.compile(lambda v, m: v @ m)
    f(nb.constant(v), nb.constant(ms[0]))
    got = nb.vmap(f, in_axes=(None, 0))(nb.constant(v), nb.constant(ms)).numpy()
    np.testing.assert_allclose(got, np.einsum("k,bkn->bn", v, ms), rtol=1e-6)
    a, b = rng.random((5, 3), dtype=np.float32), rng.random((2, 3), dtype=np.float32)
    g = nb.compile(lambda a, b: a * b)
    g(nb.constant(a[0]), nb.constant(b))
    got = nb.vmap(g, in_axes=(0, None))(nb.constant(a), nb.constant(b)).numpy()
    np.testing.assert_allclose(got, a[:, None, :] * b[None], rtol=1e-6)


def test_custom_node_with_unhashable_data_compiles_and_retraces_when_it_changes():
    """As ``jax.jit``: a registered node whose data is a list (unhashable) is keyed by
    value; the key keeps a copy, so a list the user changes in place traces again."""

    class Named:
        def __init__(self, v, names):
            self.v, self.names = v, names

    nb.register_pytree_node(Named, lambda a: ((a.v,), a.names), lambda aux, c: Named(c[0], aux))
    f = nb.compile(lambda p: p.v * len(p.names))
    names, x = ["w"], nb.ones(3)
    np.testing.assert_allclose(f(Named(x, names)).numpy(), [1.0] * 3)
    np.testing.assert_allclose(f(Named(x, names)).numpy(), [1.0] * 3)
    assert f.stats.misses == 1
    names.append("b")
    np.testing.assert_allclose(f(Named(x, names)).numpy(), [2.0] * 3)
    assert f.stats.misses == 2
    assert hash(nb.tree_structure(Named(1, ["w"]))) == hash(nb.tree_structure(Named(2, ["w"])))


def test_dynamic_dims_literal_sizes_equal_to_the_trace_size_stay_literal():
    """A literal that happens to equal the dynamic size at the trace (``x[:3]`` traced at
    n=3) is not the size: each later size gets the literal's answer, as uncompiled. And
    an int index counted from the end stays an offset from the end; one out of range at a
    later size is the IndexError uncompiled code raises."""
    cases = [
        (lambda a: a[:3], (3, 4, 6)),
        (lambda a: nb.sum(a[:2]), (2, 5)),
        (lambda a: nb.reshape(a, (2, -1)), (2, 4, 6)),
        (lambda a: nb.broadcast_to(a[:2], (2,)) * 2.0, (2, 3)),
        (lambda a: a[-1] + a[0], (3, 1, 5)),
    ]
    for k, (fun, sizes) in enumerate(cases):
        f = nb.compile(fun, dynamic_dims={0: {0: "n"}})
        for n in sizes:
            a = nb.constant(np.arange(1.0, n + 1.0, dtype=np.float32))
            np.testing.assert_allclose(f(a).numpy(), fun(a).numpy(), err_msg=f"case {k}, n={n}")
    f = nb.compile(lambda a: a[2], dynamic_dims={0: {0: "n"}})
    f(nb.ones(3))
    with pytest.raises(IndexError, match="index 2 is out of bounds for axis 0 with size 2"):
        f(nb.ones(2))
    g = nb.compile(lambda a: a[-1], dynamic_dims={0: {0: "n"}})
    g(nb.ones(3))
    with pytest.raises(IndexError, match="index -1 is out of bounds for axis 0 with size 0"):
        g(nb.ones(0))


def test_dynamic_dims_iteration_second_size_1_operands_narrow_values_and_contractions():
    """Four ways a symbolic plan went wrong at another size: ``for row in x`` kept the
    traced number of rows (no decision recorded); a dynamic size that was 1 did not
    broadcast when it came second (``(6,) * (m=1,)`` raised); a size used as an int8 value
    wrapped where eager code raises; a matmul's contracted dims were not checked again
    (NumPy's own error)."""
    rows = nb.compile(lambda x: nb.stack([r for r in x]).sum(0), dynamic_dims={0: {0: "n"}})
    for n in (3, 5, 8):
        x = np.arange(2.0 * n, dtype=np.float32).reshape(n, 2)
        np.testing.assert_array_equal(rows(x).numpy(), x.sum(0))

    mul = nb.compile(lambda a, b: a * b, dynamic_dims={0: {0: "n"}, 1: {0: "m"}})
    for n, m in ((3, 3), (5, 5), (6, 1), (1, 6)):
        a, b = np.arange(n, dtype=np.float32), np.full((m,), 2.0, np.float32)
        np.testing.assert_array_equal(mul(a, b).numpy(), a * b)
    y = np.arange(5, dtype=np.float32)
    late = nb.compile(
        lambda x: nb.where(nb.constant(y) > 2, nb.constant(y), x), dynamic_dims={0: {0: "n"}}
    )
    np.testing.assert_array_equal(late(np.zeros(1, np.float32)).numpy(), [0, 0, 0, 3, 4])

    narrow = nb.compile(lambda x: x + x.shape[0] * 40, dynamic_dims={0: {0: "n"}})
    assert narrow(nb.zeros((3,), dtype=nb.int8)).tolist() == [120] * 3
    with pytest.raises(OverflowError, match="the value 160 is out of range for int8"):
        narrow(nb.zeros((4,), dtype=nb.int8))

    w = nb.ones((4, 2))
    mm = nb.compile(lambda x: x @ w, dynamic_dims={0: {1: "k"}})
    mm(nb.ones((3, 4)))
    with pytest.raises(nb.OpError, match=r"matmul: contracted dims differ: .*\(5 != 4\)"):
        mm(nb.ones((3, 5)))


def test_dynamic_dims_sizes_0_and_1_are_traced_per_size():
    """A trace where a dynamic size is 0 or 1 serves only that size (a size-1 dim that
    broadcasts, an empty axis: other paths than at every other size), and a generic plan
    does not serve 0 or 1 either: traced at n=1, a gradient through a broadcast was never
    summed at n=3 (var's gradient came out (n-1)/n of the answer); traced at n=0, arange
    and any() stayed empty and False; traced at n=3, x.at[-1].set at n=0 answered where
    eager code raises. The first generic trace becomes the plan for every later size."""
    cases = [
        (lambda a: nb.grad(lambda s: (s + a).sum())(nb.ones((1, 2))), (1, 3, 4)),
        (lambda a: nb.grad(lambda y: nb.var(y, axis=0).sum())(a), (1, 2, 5)),
        (lambda a: nb.arange(a.shape[0]) * 1.0 + a[:, 0].sum(), (0, 3, 4)),
        (lambda a: nb.any(a > 0, axis=0), (0, 2, 3)),
        (lambda a: nb.logsumexp(a, axis=0), (0, 2, 5)),
        (lambda a: a[a.shape[0] - 2 :], (1, 2, 4)),
        (lambda a: nb.squeeze(a[:, :1]), (3, 1, 4)),
        (lambda a: nb.pad(a, ((a.shape[0] - 1, 0), (0, 0))), (1, 3, 4)),
    ]
    for k, (fun, sizes) in enumerate(cases):
        f = nb.compile(fun, dynamic_dims={0: {0: "n"}})
        for n in sizes:
            a = nb.constant(np.arange(1.0, 2.0 * n + 1.0, dtype=np.float32).reshape(n, 2))
            got, want = f(a), fun(a)
            assert got.shape == want.shape, (k, n)
            np.testing.assert_allclose(got.numpy(), want.numpy(), err_msg=f"case {k}, n={n}")
        assert f.stats.misses == 2, (k, f.stats)  # the small size, then one generic trace
    # a size derived from the dynamic one (n // 4) that is 1 at the trace: the operand's
    # 1 broadcasts against it at the other sizes, and its gradient is summed there
    fun = lambda a: nb.grad(lambda s: (s + a[: a.shape[0] // 4]).sum())(nb.ones((1, 2)))  # noqa: E731
    f = nb.compile(fun, dynamic_dims={0: {0: "n"}})
    for n in (4, 8, 12):
        a = nb.ones((n, 2))
        np.testing.assert_allclose(f(a).numpy(), fun(a).numpy())
    assert f.stats.misses == 1
    g = nb.compile(lambda a: a.at[-1].set(5.0), dynamic_dims={0: {0: "n"}})
    g(nb.ones((3, 2)))
    with pytest.raises(IndexError, match="index -1 is out of bounds for axis 0 with size 0"):
        g(nb.ones((0, 2)))
