"""compile reads captured state at every call, and one symbolic trace serves every size.

Captured tensors (closures, globals, ``self``/module attributes) are inputs of the plan, as
``torch.compile`` makes parameters graph inputs: in-place updates, ``load_state_dict`` and a
rebound name are seen, and gradients reach them. Under ``dynamic_dims`` a size is a
symbolic expression (``n * 4``, ``n // 2``): one trace, checked once per new size."""

import logging

import numpy as np
import pytest

import nabla as nb
from nabla.nn import functional as F

X = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
Y = np.random.default_rng(1).standard_normal((8, 2)).astype(np.float32)
W0 = np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(4, 2)


def _model():
    m = nb.nn.Linear(4, 2)
    m.load_state_dict({"weight": W0, "bias": np.zeros(2, np.float32)})
    return m


def _pytorch_losses(style: str, steps: int = 4) -> list:
    """Losses of a PyTorch-style loop (forward, backward, SGD step, zero_grad)."""
    m = _model()
    # compile_step's loss takes what the optimizer was built on: the model itself
    opt = nb.nn.optim.SGD(m if style == "compile_step" else m.parameters(), lr=0.1, momentum=0.9)
    x, y = nb.constant(X), nb.constant(Y)
    if style == "compile_step":
        step = opt.compile_step(lambda model, a, b: F.mse_loss(model(a), b))
        return [float(step(x, y).item()) for _ in range(steps)]
    fwd = {"eager": m, "module": nb.compile(m), "lambda": nb.compile(lambda a: m(a))}[style]
    losses = []
    for _ in range(steps):
        loss = ((fwd(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.item()))
    if style != "eager":
        assert fwd.stats.misses == 1
    return losses


def test_pytorch_style_training_under_compile_matches_eager_step_for_step():
    eager = _pytorch_losses("eager")
    assert eager[0] > eager[-1]  # it trains
    for style in ("module", "lambda", "compile_step"):
        np.testing.assert_allclose(_pytorch_losses(style), eager, rtol=1e-5, err_msg=style)


@pytest.mark.max
def test_pytorch_style_training_under_compile_matches_eager_on_max():
    pytest.importorskip("max")
    # two steps (the second reads updated parameters); nb.compile(model) replays the same
    # graphs as the lambda, so it adds nothing on MAX but compile time
    with nb.backend("max"):
        eager = _pytorch_losses("eager", 2)
        for style in ("lambda", "compile_step"):
            np.testing.assert_allclose(_pytorch_losses(style, 2), eager, rtol=1e-4)


def test_compiled_output_follows_load_state_dict_in_place_updates_and_rebinding():
    m = _model()
    fwd = nb.compile(m)
    x = nb.constant(X)
    np.testing.assert_allclose(fwd(x).numpy(), X @ W0, rtol=1e-6)
    w1 = np.full((4, 2), 0.5, np.float32)
    m.load_state_dict({"weight": w1, "bias": np.ones(2, np.float32)})
    np.testing.assert_allclose(fwd(x).numpy(), X @ w1 + 1, rtol=1e-6)
    m.weight[0] = 5.0  # x[i] = v on a parameter
    w1[0] = 5.0
    np.testing.assert_allclose(fwd(x).numpy(), X @ w1 + 1, rtol=1e-6)
    m.weight = nb.constant(np.eye(4, 2, dtype=np.float32))  # a new tensor, same shape
    np.testing.assert_allclose(fwd(x).numpy(), X @ np.eye(4, 2) + 1, rtol=1e-6)
    assert fwd.stats.misses == 1 and fwd.stats.hits == 3
    replays = fwd.stats.replays  # parameters require grad: each call above replayed
    with nb.no_grad():  # an evaluation loop: nothing to record, the compiled fast path
        np.testing.assert_allclose(fwd(x).numpy(), X @ np.eye(4, 2) + 1, rtol=1e-6)
    assert fwd.stats.replays == replays

    w = nb.constant([1.0, 2.0])
    f = nb.compile(lambda a: a * w)  # a closure over a global-like name
    a = nb.constant([1.0, 1.0])
    assert f(a).tolist() == [1.0, 2.0]
    w[1] = 7.0
    assert f(a).tolist() == [1.0, 7.0]
    w = nb.constant([3.0, 3.0])  # rebinding the name: the new tensor is used
    assert f(a).tolist() == [3.0, 3.0]
    assert f.stats.misses == 1


_G = nb.constant([1.0, 1.0, 1.0])


def _uses_global(a):
    return a * _G


def test_a_rebound_global_or_attribute_of_another_shape_retraces(caplog):
    global _G
    f = nb.compile(lambda a: _uses_global(a).sum())
    assert f(nb.ones(3)).item() == 3.0
    _G = nb.constant([2.0, 2.0, 2.0])
    assert f(nb.ones(3)).item() == 6.0 and f.stats.misses == 1
    _G = nb.constant([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])  # a new shape: as a guard, retrace
    with caplog.at_level(logging.INFO, logger="nabla.compile"):
        assert f(nb.ones(3)).item() == 9.0
    assert f.stats.misses == 2
    assert "changed from float32[3] to float32[2, 3]" in caplog.text
    _G = nb.constant([1, 2, 3])  # a new dtype
    assert f(nb.ones(3)).item() == 6.0 and f.stats.misses == 3
    _G = nb.constant([1.0, 1.0, 1.0])


def test_gradients_reach_captured_tensors_by_backward_and_grad():
    w = nb.constant([1.0, 2.0, 3.0])
    w.requires_grad = True
    f = nb.compile(lambda a: (a * w).sum())
    x = nb.constant([4.0, 5.0, 6.0])
    for _ in range(3):
        f(x).backward()
        assert w.grad.tolist() == [4.0, 5.0, 6.0]
        w.grad = None
    # nb.grad through a captured slot rebound to the differentiated value (functional_call)
    params = {"w": nb.constant([1.0, 1.0, 1.0])}
    g = nb.compile(lambda a: (a * params["w"] ** 2).sum())

    def loss(v):
        params["w"] = v
        return g(x)

    for v in ([1.0, 2.0, 3.0], [0.5, 0.5, 0.5]):
        want = 2 * np.array(v) * [4.0, 5.0, 6.0]
        np.testing.assert_allclose(nb.grad(loss)(nb.constant(v)).numpy(), want)
    assert g.stats.misses == 1


def test_python_numbers_are_baked_in_at_trace_time():
    scale = 2.0
    f = nb.compile(lambda a: a * scale)
    assert f(nb.constant(1.0)).item() == 2.0
    scale = 3.0  # noqa: F841 - a Python number is part of the trace, as in jax.jit
    assert f(nb.constant(1.0)).item() == 2.0


# ----------------------------------------------------------------------------- dynamic dims
def _derived(x):
    n = x.shape[0]
    wide = nb.reshape(nb.broadcast_to(x[:, None], (n, 4)), (n * 4,))  # n * 4
    half = wide[: n // 2]  # slicing by n // 2
    tail = nb.concatenate([half, nb.zeros((n % 3,))])
    parts = nb.split(x, [n // 2, n - n // 2])
    padded = nb.pad(parts[1], [(1, n // 2)])  # a width derived from n
    total = tail.sum() + nb.arange(n).astype(nb.float32).sum() + x.mean()
    return total, tail, padded, x / n, nb.var(x, correction=1)


def _derived_ref(x):
    n = x.shape[0]
    wide = np.broadcast_to(x[:, None], (n, 4)).reshape(n * 4)
    tail = np.concatenate([wide[: n // 2], np.zeros(n % 3)])
    padded = np.pad(x[n // 2 :], (1, n // 2))
    total = tail.sum() + np.arange(n).sum() + x.mean()
    return total, tail, padded, x / n, np.var(x, ddof=1)


def test_one_symbolic_trace_serves_every_size_with_derived_sizes():
    c = nb.compile(_derived, dynamic_dims={0: {0: "n"}})
    for n in (6, 7, 9, 12, 5, 7):
        x = np.arange(n, dtype=np.float32) + 1
        got, want = c(nb.constant(x)), _derived_ref(x)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-6)
    assert c.stats.misses == 1 and c.stats.hits == 5 and c.stats.replays == 0


def test_a_python_decision_on_a_dynamic_size_traces_per_size_and_says_why(caplog):
    def f(x):
        return x * 2 if x.shape[0] > 3 else x  # decided in Python

    c = nb.compile(f, dynamic_dims={0: {0: "n"}})
    with caplog.at_level(logging.INFO, logger="nabla.compile"):
        got = [c(nb.ones(n)).tolist()[0] for n in (2, 5, 2, 5)]
    assert got == [1.0, 2.0, 1.0, 2.0]
    assert c.stats.misses == 2 and c.stats.hits == 2
    assert "a comparison of dynamic size n=2 at" in caplog.text
    assert "test_compile_state.py" in caplog.text
    g = nb.compile(lambda x: x.reshape((int(x.shape[0]), 1)), dynamic_dims={0: {0: "n"}})
    assert [g(nb.ones(n)).shape for n in (2, 3, 3)] == [(2, 1), (3, 1), (3, 1)]
    assert g.stats.misses == 2


def test_bad_dynamic_dims_are_named_at_the_first_call():
    f = nb.compile(lambda x: x * 2, dynamic_dims={1: {0: "n"}})
    with pytest.raises(ValueError, match="dynamic_dims names positional argument 1"):
        f(nb.ones(3))
    g = nb.compile(lambda x: x * 2, dynamic_dims={0: {2: "n"}})
    with pytest.raises(ValueError, match=r"dim 2 of argument 0 the name 'n'.*shape \(3,\)"):
        g(nb.ones(3))
    h = nb.compile(lambda x, k: x * k, dynamic_dims={1: {0: "n"}})
    with pytest.raises(TypeError, match="argument 1, which is a int"):
        h(nb.ones(3), 2)


def test_malformed_dynamic_dims_show_the_bad_entry_at_compile():
    with pytest.raises(
        TypeError, match=r"argument 0's entry 0: 5 does not \(in dynamic_dims=\{0: \{0: 5\}\}\)"
    ):
        nb.compile(lambda x: x * 2, dynamic_dims={0: {0: 5}})
    with pytest.raises(TypeError, match=r"the entry 0: 'n' is not an int argument index mapped"):
        nb.compile(lambda x: x * 2, dynamic_dims={0: "n"})
    with pytest.raises(TypeError, match=r"dynamic_dims must be .*, got \[0\]"):
        nb.compile(lambda x: x * 2, dynamic_dims=[0])


def test_bad_static_argnums_and_argnames_are_named_at_the_first_call():
    f = nb.compile(lambda x, k: x * k, static_argnums=(2,))
    with pytest.raises(ValueError, match="static_argnums names argument 2, but <lambda> takes 2"):
        f(nb.ones(3), 2)
    g = nb.compile(lambda x, *, k=1: x * k, static_argnames="kk")
    with pytest.raises(ValueError, match="static_argnames names 'kk'"):
        g(nb.ones(3), k=2)
    ok = nb.compile(lambda x, **kw: x * kw["k"], static_argnames="k")  # **kwargs takes any
    assert ok(nb.ones(1), k=3).item() == 3.0


def test_a_size_decision_inside_an_inner_compiled_function_limits_the_outer_trace():
    inner = nb.compile(lambda x: x * 2 if x.shape[0] > 3 else x)
    outer = nb.compile(lambda x: inner(x) + 1, dynamic_dims={0: {0: "n"}})
    assert [outer(nb.ones(n)).tolist()[0] for n in (2, 5, 2)] == [2.0, 3.0, 2.0]
    assert outer.stats.misses == 2


def test_control_flow_under_dynamic_dims_is_traced_per_size():
    """A scan body keeps its own recorded program, whose sizes are the trace's: the plan
    cannot be evaluated at another size by substitution, so each size is traced."""

    def f(x):
        def body(c, xi):
            return c + nb.broadcast_to(xi[:, None], (xi.shape[0], 2)).sum(), xi * 2

        return nb.scan(body, nb.zeros(()), nb.stack([x, x * 2]))

    c = nb.compile(f, dynamic_dims={0: {0: "n"}})
    for n in (4, 6, 6):
        x = np.arange(n, dtype=np.float32)
        (got_c, got_ys), (want_c, want_ys) = c(nb.constant(x)), f(nb.constant(x))
        np.testing.assert_allclose(got_c.numpy(), want_c.numpy())
        np.testing.assert_allclose(got_ys.numpy(), want_ys.numpy())
    assert c.stats.misses == 2 and c.stats.hits == 1


def test_train_and_eval_switch_a_compiled_module_and_each_mode_is_traced_once():
    m = nb.nn.Sequential(nb.nn.Linear(4, 8), nb.nn.Dropout(0.5), nb.nn.Linear(8, 2))
    x = nb.constant(X)
    for fwd in (nb.compile(m), nb.compile(lambda t: m(t))):
        m.train()
        fwd(x)
        m.eval()  # dropout off: the compiled forward must not keep the training trace
        np.testing.assert_allclose(fwd(x).numpy(), m(x).numpy(), rtol=1e-6)
        m.train()
        fwd(x)
        m.eval()
        np.testing.assert_allclose(fwd(x).numpy(), m(x).numpy(), rtol=1e-6)
        assert fwd.stats.misses == 2 and fwd.stats.hits == 2


def test_a_new_dynamic_size_draws_no_extra_key_from_the_global_generator():
    """The once-per-size shape check re-binds the plan's ops with the traced keys: a call
    at a new size draws one key, as a call at a known size does."""
    from nabla.ops import random as nb_random

    c = nb.compile(lambda x: x * nb.uniform(()), dynamic_dims={0: {0: "n"}})
    c(nb.ones(4))
    for n in (4, 6, 9):
        before = nb_random._GLOBAL.counter
        c(nb.ones(n))
        assert nb_random._GLOBAL.counter - before == 1, n


# --------------------------------------------------------------- found by name at any depth
class _Deep(nb.nn.Module):
    """Five levels of nesting, a list of 25,000 pairs (a tokenizer's merges) beside them,
    and Python settings in a list and a dict."""

    def __init__(self, depth=5):
        super().__init__()
        self.merges = [(f"a{i}", f"b{i}") for i in range(25_000)]
        self.body = nb.nn.Sequential(nb.nn.Linear(4, 4), nb.nn.ReLU())
        for _ in range(depth - 1):
            self.body = nb.nn.Sequential(self.body)
        self.scales = [1.0]
        self.opts = {"shift": 0.0}

    def forward(self, x):
        return self.body(x) * self.scales[0] + self.opts["shift"]


def _innermost(seq):
    while isinstance(seq[0], nb.nn.Sequential):
        seq = seq[0]
    return seq


def test_changes_deep_in_a_model_are_seen_whatever_else_it_holds():
    """A parameter replaced, a layer swapped and a list or dict setting changed in place,
    five modules deep beside 25,000 other Python objects: each call is the eager answer
    (the walk's bounds apply outside the model's own tables only)."""
    nb.random.seed(0)
    m = _Deep()
    x = nb.constant(X)
    for fun in (nb.compile(m), nb.compile(lambda a: m(a))):
        fun(x)
        inner = _innermost(m.body)
        inner[0].weight = nb.nn.Parameter(nb.full((4, 4), 0.5))
        np.testing.assert_allclose(fun(x).numpy(), m(x).numpy(), rtol=1e-6)
        inner[1] = nb.nn.Tanh()
        np.testing.assert_allclose(fun(x).numpy(), m(x).numpy(), rtol=1e-6)
        m.scales[0] = 3.0
        m.opts["shift"] = 1.5
        np.testing.assert_allclose(fun(x).numpy(), m(x).numpy(), rtol=1e-6)
        inner[1] = nb.nn.ReLU()
        m.scales[0], m.opts["shift"] = 1.0, 0.0


def test_a_gradient_read_inside_compile_is_this_steps():
    """``p.grad`` is a new tensor after ``zero_grad(); backward()``: a compiled gradient-norm
    logger and a hand-written compiled SGD step read the current one (the grad is found
    through its parameter), and one that is None again retraces into the eager error."""
    m = _model()
    params = list(m.parameters())
    norm = nb.compile(lambda: sum((p.grad**2).sum() for p in m.parameters()))

    def sgd():
        for p in params:
            p.sub_(0.1 * p.grad)

    step = nb.compile(sgd)
    x, y = nb.constant(X), nb.constant(Y)
    for i in range(3):
        m.zero_grad()
        F.mse_loss(m(x * (i + 1.0)), nb.constant(Y)).backward()
        want = sum(float((p.grad.numpy() ** 2).sum()) for p in params)
        np.testing.assert_allclose(norm().item(), want, rtol=1e-5)
        expected = [p.numpy() - 0.1 * p.grad.numpy() for p in params]
        step()
        for p, e in zip(params, expected):
            np.testing.assert_allclose(p.numpy(), e, rtol=1e-6, atol=1e-7)
    m.zero_grad()
    with pytest.raises(TypeError):
        norm()
    del y


def test_a_tied_weight_untied_retraces():
    """One tensor under two names is one input of the trace; once the names lead to two
    tensors the function is traced again and reads both."""
    w = nb.ones((2,))
    holder = {"a": w}
    b = w

    def f(x):
        return x * holder["a"] + x * b

    c = nb.compile(f)
    x = nb.ones((2,))
    np.testing.assert_array_equal(c(x).numpy(), [2.0, 2.0])
    holder["a"] = nb.full((2,), 100.0)
    np.testing.assert_array_equal(c(x).numpy(), f(x).numpy())
    assert c.stats.misses == 2


def test_captures_behind_slots_module_and_class_attributes_and_defaults():
    """A tensor held in a ``__slots__`` attribute, a dict under a tuple key, a deque, a
    Python module's attribute (``cfg.W``), a class attribute read through ``self`` and a
    default argument: rebinding each is seen."""
    import collections
    import types

    class Slotted:
        __slots__ = ("w",)

    s = Slotted()
    s.w = nb.ones((2,))
    keyed = {("k", 1): nb.ones((2,))}
    dq = collections.deque([nb.ones((2,))])
    cfg = types.ModuleType("cfg")
    cfg.W = nb.ones((2,))

    class K:
        W = nb.ones((2,))

        def f(self, x):
            return x * self.W

    k = K()

    def g(x, d=nb.ones((2,))):
        return x * d

    x = nb.ones((2,))
    cases = [
        (lambda x: x * s.w, lambda v: setattr(s, "w", v)),
        (lambda x: x * keyed[("k", 1)], lambda v: keyed.__setitem__(("k", 1), v)),
        (lambda x: x * dq[0], lambda v: dq.__setitem__(0, v)),
        (lambda x: x * cfg.W, lambda v: setattr(cfg, "W", v)),
        (k.f, lambda v: setattr(K, "W", v)),
        (g, lambda v: setattr(g, "__defaults__", (v,))),
    ]
    for i, (fun, rebind) in enumerate(cases):
        c = nb.compile(fun)
        c(x)
        rebind(nb.full((2,), float(i + 3)))
        np.testing.assert_array_equal(c(x).numpy(), fun(x).numpy(), err_msg=str(i))


def test_the_default_dtype_keys_the_trace():
    """``nb.ones`` inside follows ``nb.default_dtype`` as it does without compile, on the
    general path and on the hot lane."""
    f = nb.compile(lambda x: x + nb.ones((2,)))
    x = nb.ones((2,), dtype=nb.float64)
    assert f(x).dtype == nb.float64 and f(x).dtype == nb.float64
    y = nb.ones((2,), dtype=nb.float16)
    for _ in range(2):
        assert f(y).dtype == nb.float32
    with nb.default_dtype(nb.float64):
        assert f(y).dtype == nb.float64
    assert f(y).dtype == nb.float32


def test_compile_step_leaves_a_parameter_with_requires_grad_off_alone():
    """``p.requires_grad = False`` (PyTorch's way to freeze one tensor) before the first step
    or between steps: the compiled step no longer updates it, as ``backward(); step()``."""
    for when in ("before", "between"):
        m = nb.nn.Sequential(nb.nn.Linear(4, 4), nb.nn.Linear(4, 2))
        opt = nb.nn.optim.SGD(m, lr=0.1)
        step = opt.compile_step(lambda mm, a, b: F.mse_loss(mm(a), b))
        x, y = nb.constant(X), nb.constant(Y)
        if when == "between":
            step(x, y)
        for p in m[0].parameters():
            p.requires_grad = False
        frozen = m[0].weight.numpy().copy()
        trained = m[1].weight.numpy().copy()
        step(x, y)
        np.testing.assert_array_equal(m[0].weight.numpy(), frozen)
        assert not np.array_equal(m[1].weight.numpy(), trained)


def test_the_grad_of_an_argument_is_read_at_each_call():
    """``p.grad`` of a tensor passed in is the caller's current gradient (it was None
    inside: the argument is a fresh placeholder), and one that is None again retraces into
    the eager error."""
    m = _model()
    norm = nb.compile(lambda ps: sum((p.grad**2).sum() for p in ps))
    x = nb.constant(X)
    for i in range(3):
        m.zero_grad()
        F.mse_loss(m(x * (i + 1.0)), nb.constant(Y)).backward()
        params = list(m.parameters())
        want = sum(float((p.grad.numpy() ** 2).sum()) for p in params)
        np.testing.assert_allclose(norm(params).item(), want, rtol=1e-5)
    assert norm.stats.misses == 1
    m.zero_grad()
    with pytest.raises(TypeError):
        norm(list(m.parameters()))


def test_grad_mode_blocks_inside_a_compiled_function_hold_at_every_call():
    """A ``no_grad`` block inside held only at the trace: a replay differentiated through
    it (``w.grad`` [3, 4], then [6, 8], where eager code leaves it None). An ``enable_grad``
    block called under ``no_grad`` lost its history from the second call."""
    w = nb.constant([1.0, 2.0], requires_grad=True)
    v = nb.constant([3.0, 4.0], requires_grad=True)

    def f(x):
        with nb.no_grad():
            h = w * x
        return (h * v).sum()

    g = nb.compile(f)
    for _ in range(3):
        g(nb.constant([1.0, 1.0])).backward()
    assert w.grad is None and v.grad.tolist() == [3.0, 6.0]

    def sin_free(x):
        with nb.no_grad():
            h = nb.sin(x)
        return (h * x).sum()

    x = nb.constant([2.0, 4.0])
    cs = nb.compile(sin_free)
    cs(x)  # a plain call traces, the grad below replays
    np.testing.assert_allclose(nb.grad(cs)(x).numpy(), np.sin([2.0, 4.0]), rtol=1e-6)

    def on(x):
        with nb.enable_grad():
            return (w * x).sum()

    c = nb.compile(on)
    for _ in range(3):
        with nb.no_grad():
            assert c(nb.constant([1.0, 1.0])).requires_grad
    with nb.no_grad():  # and a trace made under no_grad holds none of it for later calls
        d = nb.compile(lambda x: (w * x).sum())
        assert not d(nb.constant([1.0, 1.0])).requires_grad
    assert d(nb.constant([1.0, 1.0])).requires_grad


def test_state_rebound_or_updated_inside_a_compiled_function_follows_every_call():
    """``self.count = self.count + 1`` on a module and ``p.grad = g`` (as
    ``clip_grad_norm_`` does) were done once, at the trace: later calls read the traced
    values again. A requires_grad leaf updated in place and then read lost its gradient
    from the second call (``backward`` raised)."""

    class Counter(nb.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", nb.zeros(()))

        def forward(self, x):
            self.count = self.count + 1.0
            return x * self.count

    m = Counter()
    f = nb.compile(m)
    assert [f(nb.ones((2,))).tolist() for _ in range(3)] == [[1, 1], [2, 2], [3, 3]]
    assert m.count.item() == 3.0

    def clipped_step(lin, opt, compiled):
        upd = lambda: (nb.nn.utils.clip_grad_norm_(lin.parameters(), 0.5), opt.step())[0]  # noqa: E731
        upd = nb.compile(upd) if compiled else upd
        norms = []
        for i in range(3):
            opt.zero_grad()
            (lin(nb.constant([[1.0, 2.0]]) * (i + 1)) ** 2).sum().backward()
            norms.append(upd().item())
        return norms, lin.weight.numpy().copy()

    runs = []
    for compiled in (False, True):
        lin = nb.nn.Linear(2, 1, key=nb.random.key(0))
        runs.append(clipped_step(lin, nb.nn.optim.SGD(lin, lr=0.1), compiled))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-6)
    np.testing.assert_allclose(runs[1][1], runs[0][1], rtol=1e-6)

    results = []
    for compiled in (False, True):
        w = nb.constant(np.ones((2, 2), np.float32), requires_grad=True)

        def body(x, w=w):
            with nb.no_grad():
                w[0].mul_(x)
            return (w * w).sum()

        g = nb.compile(body) if compiled else body
        got = []
        for _ in range(3):
            loss = g(nb.constant(0.5))
            loss.backward()
            got.append((loss.item(), w.grad.numpy().tolist()))
        results.append(got)
    assert results[1] == results[0]


def test_captured_state_written_outside_and_not_yet_computed_keeps_the_function_s_writes():
    """A captured tensor with a pending write from outside (``s.add_(1)``, ``s[2] = 10``,
    an eager BatchNorm forward) when the first call traced: computing that write while the
    plan was built also computed the trace's own write to the tensor (the pending write
    was kept as the tensor, not its value), which the plan then took for a constant. The
    first call returned the sum before the function's write, and every later call lost
    the write."""

    def run(compiled, before):
        s = nb.zeros((3,))

        def f(x):
            s.add_(x)
            return s.sum()

        g = nb.compile(f) if compiled else f
        x = nb.constant(np.array([1.0, 2.0, 3.0], np.float32))
        got = []
        for i in range(3):
            before(s, i)
            got.append((g(x).item(), s.numpy().tolist()))
        return got

    def add_one(s, i):
        s.add_(1.0)

    def set_once(s, i):
        if i == 0:
            s[2] = 10.0

    for before in (add_one, set_once):
        assert run(True, before) == run(False, before)

    def stats(compiled):
        bn = nb.nn.BatchNorm1d(3)
        bn.train()
        rng = np.random.default_rng(0)
        bn(nb.constant(rng.standard_normal((8, 3)).astype(np.float32)))  # eager, pending
        f = nb.compile(bn) if compiled else bn
        out = []
        for _ in range(3):
            f(nb.constant(rng.standard_normal((8, 3)).astype(np.float32)))
            out.append(bn.running_mean.numpy().copy())
        return out

    np.testing.assert_allclose(stats(True), stats(False), rtol=1e-6)


def test_a_compiled_function_under_vmap_updates_its_mapped_argument():
    """``vmap(compile(f))`` with ``f`` updating its argument in place: the caller's input
    takes each example's new value, as ``vmap(f)`` and ``torch.func.vmap`` give it (the
    batched placeholder's write was taken for an assignment, with a warning on the first
    call, and dropped on every call)."""
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    for f in (lambda x: (x.add_(1.0), x * 3.0)[1], lambda x: (x[1:].zero_(), x.sum())[1]):
        for axis in (0, 1):
            got = []
            for g in (f, nb.compile(f)):
                runs = []
                for k in range(3):  # the first call traces, the rest hit
                    x = nb.constant(base + k)
                    out = nb.vmap(g, in_axes=axis)(x)
                    runs.append((out.numpy().tolist(), x.numpy().tolist()))
                got.append(runs)
            assert got[1] == got[0]


_TOTAL = nb.zeros((2,))


def test_a_name_bound_to_a_computed_value_inside_runs_as_written():
    """``global G; G = G + x`` (or a closure's list item) was bound once, at the trace:
    later calls read the traced value. Such a function now runs uncompiled (counted in
    ``stats.fallbacks``), so each call binds the name as eagerly."""

    def accumulate(x):
        global _TOTAL
        _TOTAL = _TOTAL + x
        return _TOTAL * 1.0

    f = nb.compile(accumulate)
    assert [f(nb.ones((2,))).tolist() for _ in range(3)] == [[1, 1], [2, 2], [3, 3]]
    assert _TOTAL.tolist() == [3, 3] and f.stats.fallbacks >= 1
    box = [nb.zeros(())]

    def push(x):
        box[0] = box[0] + x
        return box[0] * 2.0

    g = nb.compile(push)
    assert [g(nb.constant(1.0)).item() for _ in range(3)] == [2.0, 4.0, 6.0]
    # state updated in place stays compiled
    acc = nb.zeros(())
    h = nb.compile(lambda x: acc.add_(x) * 1.0)
    assert [h(nb.constant(1.0)).item() for _ in range(3)] == [1.0, 2.0, 3.0]
    assert h.stats.fallbacks == 0


def test_a_plain_object_held_by_a_module_is_guarded_by_its_attributes():
    """``m.cfg.scale = 5.0`` on a config namespace a module holds was not seen: the trace's
    2.0 stayed (dicts and lists were guarded already)."""
    import types

    class Scaled(nb.nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = types.SimpleNamespace(scale=2.0, inner=types.SimpleNamespace(k=1.0))

        def forward(self, x):
            return x * self.cfg.scale * self.cfg.inner.k

    m = Scaled()
    f = nb.compile(m)
    x = nb.ones((1,))
    assert f(x).item() == 2.0
    m.cfg.scale = 5.0
    assert f(x).item() == 5.0
    m.cfg.inner.k = 3.0
    assert f(x).item() == 15.0
    assert f(x).item() == 15.0 and f.stats.misses == 3


def test_a_tensor_read_through_an_argument_object_follows_its_rebinding():
    """``self.w`` of a plain (non-Module) object passed in, or of a compiled plain method,
    kept the traced tensor after ``q.w = new``."""

    class Holder:
        def __init__(self, v):
            self.w = nb.ones((2,)) * v

        @nb.compile
        def forward(self, x):
            return x * self.w

    q = Holder(1.0)
    x = nb.ones((2,))
    assert q.forward(x).tolist() == [1.0, 1.0]
    q.w = nb.ones((2,)) * 10.0
    assert q.forward(x).tolist() == [10.0, 10.0]
    assert Holder(2.0).forward(x).tolist() == [2.0, 2.0]
    f = nb.compile(lambda obj, x: x * obj.w)
    assert f(q, x).tolist() == [10.0, 10.0]
    q.w = nb.ones((2,)) * 7.0
    assert f(q, x).tolist() == [7.0, 7.0]


def test_a_pytorch_array_argument_is_read_at_every_call():
    """A PyTorch (or JAX) array argument was keyed as a static, by identity: an in-place
    update of it hit the old trace (a JAX array was refused as unhashable)."""
    torch = pytest.importorskip("torch")
    f = nb.compile(lambda a: nb.sin(a) * 2.0)
    t = torch.tensor([0.0, 1.0, 2.0])
    f(t)
    t.add_(1.0)
    np.testing.assert_allclose(f(t).numpy(), np.sin(t.numpy()) * 2.0, rtol=1e-6)


def test_lists_that_grow_and_names_that_were_none_are_never_stale():
    """A captured list of tensors that grew kept the traced items; a closure or global that
    was None when traced and a tensor or module later was never noticed; an array-like
    argument (``__array__``, as JAX's and PyTorch's) was a static keyed by identity."""

    class ArrayLike:
        def __init__(self, values):
            self.values = np.asarray(values, np.float32)

        def __array__(self, dtype=None, copy=None):
            return self.values

    a = ArrayLike([0.0, 1.0])
    twice = nb.compile(lambda v: v * 2.0)
    twice(a)
    a.values += 1.0
    np.testing.assert_array_equal(twice(a).numpy(), [2.0, 4.0])
    items = [nb.constant([0.0, 1.0, 2.0])]
    total = nb.compile(lambda: nb.stack(items).sum(0))
    np.testing.assert_array_equal(total().numpy(), [0, 1, 2])
    items.append(nb.constant([0.0, 1.0, 2.0]))
    np.testing.assert_array_equal(total().numpy(), [0, 2, 4])

    bias = None
    layer = None

    def g(x):
        if layer is not None:
            x = layer(x)
        return x if bias is None else x + bias

    cg = nb.compile(g)
    x = nb.ones((3,))
    np.testing.assert_array_equal(cg(x).numpy(), [1, 1, 1])
    bias = nb.full((3,), 10.0)
    np.testing.assert_array_equal(cg(x).numpy(), [11, 11, 11])
    layer = nb.nn.Linear(3, 3, key=nb.random.key(0))
    np.testing.assert_allclose(cg(x).numpy(), (layer(x) + bias).numpy(), rtol=1e-6)
    layer.eval()  # (a module found since is guarded as any other)
    bias = None
    np.testing.assert_allclose(cg(x).numpy(), layer(x).numpy(), rtol=1e-6)


def test_outputs_are_the_objects_eager_code_returns_at_every_call():
    """A hit wrapped every output anew: a tensor returned twice came back as two objects, a
    returned captured tensor or argument as a copy (only the tracing call returned the
    objects themselves); and one tensor passed as two arguments, updated in place through
    one, was read through the other as it was before the update."""
    w = nb.ones((3,))
    dup = nb.compile(lambda a: (lambda y: (y, y))(a * 2.0))
    both = nb.compile(lambda a: (a * w, w, a))
    x = nb.arange(3, dtype=nb.float32)
    for _ in range(3):
        y0, y1 = dup(x)
        assert y0 is y1
        _, got_w, got_x = both(x)
        assert got_w is w and got_x is x

    def bump(a, b):
        a.add_(1.0)
        return b * 1.0

    cb = nb.compile(bump)
    t = nb.constant([0.0, 1.0])
    np.testing.assert_array_equal(cb(t, t).numpy(), [1.0, 2.0])  # the trace
    np.testing.assert_array_equal(cb(t, t).numpy(), [2.0, 3.0])  # a hit: t was updated
    np.testing.assert_array_equal(t.numpy(), [2.0, 3.0])
    u, v = nb.constant([0.0, 1.0]), nb.constant([5.0, 5.0])
    np.testing.assert_array_equal(cb(u, v).numpy(), [5.0, 5.0])  # (its own trace)
    np.testing.assert_array_equal(u.numpy(), [1.0, 2.0])


def test_a_module_s_list_or_array_setting_changed_in_place_retraces():
    """A compiled function that takes a module keeps a snapshot of its static settings in
    its cache key: a list or NumPy array changed in place (``m.scales[0] = 10``) is a new
    key, where the key had held the module's own list and the stale trace ran; unchanged,
    the calls hit."""

    class Scaled(nb.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nb.ones((2,))
            self.scales = [1.0, 1.0]
            self.mask = np.array([1.0, 2.0], np.float32)

        def forward(self, x):
            return x * self.w * self.scales[0] * nb.constant(self.mask)

    m, x = Scaled(), nb.ones((2,))
    f = nb.compile(lambda mm, xx: mm(xx))
    for _ in range(3):
        assert f(m, x).tolist() == [1.0, 2.0]
    m.scales[0] = 10.0
    assert f(m, x).tolist() == [10.0, 20.0]
    m.mask[1] = 3.0
    assert f(m, x).tolist() == [10.0, 30.0]
    misses = f.stats.misses
    for _ in range(3):
        assert f(m, x).tolist() == [10.0, 30.0]
    assert f.stats.misses == misses
    # two modules holding equal arrays have one structure: they stack (an ensemble)
    stacked = nb.tree_map(lambda a, b: nb.stack([a, b]), Scaled(), Scaled())
    assert stacked.w.shape == (2, 2)
    # the same module captured, and compiled itself: its array is keyed by its contents
    c = Scaled()
    closure, itself = nb.compile(lambda xx: c(xx)), nb.compile(c)
    for g in (closure, itself):
        for _ in range(3):
            g(x)
    c.mask[0] = 7.0
    assert closure(x).tolist() == [7.0, 2.0] and itself(x).tolist() == [7.0, 2.0]


def test_a_module_s_config_object_and_a_replaced_callable_retrace():
    """Two stale traces a probe found: a plain config object inside a module passed as an
    argument (``m.cfg.v = 3``: the key held the object itself, equal to itself), and a
    module's callable replaced by a new one that Python gave a freed one's id (keyed by
    the bare id, the new lambda hit the old lambda's trace)."""

    class Cfg:
        pass

    class M(nb.nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = Cfg()
            self.cfg.v = 1.0
            self.cfg.lst = [1.0]

        def forward(self, x):
            return x * self.cfg.v * self.cfg.lst[0]

    m, x = M(), nb.constant([1.0, 2.0])
    cf = nb.compile(lambda mm, xx: mm(xx))
    for _ in range(3):
        cf(m, x)
    m.cfg.v = 3.0
    assert cf(m, x).tolist() == [3.0, 6.0]
    m.cfg.lst[0] = 2.0
    assert cf(m, x).tolist() == [6.0, 12.0]
    misses = cf.stats.misses
    for _ in range(3):
        cf(m, x)
    assert cf.stats.misses == misses

    def scaler(k):
        return lambda t: t * k

    holder = nb.nn.Identity()
    cg = nb.compile(lambda xx: holder.act(holder(xx)))
    for k in range(1, 13):  # each old lambda freed: ids are reused
        holder.act = scaler(float(k))
        assert cg(x).tolist() == [k, 2.0 * k]


def test_a_module_s_list_of_arrays_hits_until_it_changes():
    """A list, tuple or dict of arrays among a module's settings compares item by item
    (each array by value): unchanged, every call hits (the snapshot never equalled the live
    list, so each call traced again and filled the cache); changed, it retraces."""

    class M(nb.nn.Module):
        def __init__(self, scales):
            super().__init__()
            self.w = nb.ones((3,))
            self.scales = scales

        def forward(self, x):
            first = self.scales["a"] if isinstance(self.scales, dict) else self.scales[0]
            return x * self.w * float(first[0])

    for scales in ([np.array([1.0, 2.0])], (np.array([1.0, 2.0]),), {"a": np.array([1.0])}):
        cf = nb.compile(lambda mm, xx: mm(xx))
        m = M(scales)
        for _ in range(4):
            cf(m, nb.ones((3,)))
        assert (cf.stats.hits, cf.stats.misses) == (3, 1)
        (scales["a"] if isinstance(scales, dict) else scales[0])[0] = 5.0
        assert cf(m, nb.ones((3,))).tolist() == [5.0, 5.0, 5.0]


def test_a_hook_the_function_registers_on_its_argument_is_the_argument_s():
    """As eagerly (and PyTorch): each call's ``x.register_hook`` adds a hook to ``x``
    itself. Compiled, the first call's hook stayed on the trace's placeholder and later
    calls, cache hits, registered none: gradients [4, 8], [2, 4], [2, 4] for eager's [4,
    8], [8, 16], [16, 32]."""

    def g(x):
        x.register_hook(lambda gr: gr * 2)
        return (x * x).sum()

    def grads(fn):
        w = nb.constant([1.0, 2.0])
        w.requires_grad = True
        out = []
        for _ in range(3):
            w.grad = None
            fn(w).backward()
            out.append(w.grad.tolist())
        return out

    assert grads(nb.compile(g)) == grads(g) == [[4.0, 8.0], [8.0, 16.0], [16.0, 32.0]]


def test_reading_a_captured_tensor_s_value_while_traced_runs_eagerly():
    """``float(w)``/``w.item()``/``w.numpy()`` of a captured, already realized tensor gave
    the trace a Python number that every later call kept, however ``w`` changed since (and
    ``fullgraph=True`` did not see it). Such a call now runs as plain lazy code, counted as
    a fallback, and ``fullgraph=True`` refuses it; a literal the function makes itself is
    read as before."""
    w = nb.constant(1.0)
    w.realize()
    x = nb.ones((2,))
    for read in (lambda: w.item(), lambda: float(w), lambda: w.numpy()[()]):
        f = nb.compile(lambda v, read=read: v * read())
        for value in (1.0, -3.0, 5.0):
            w[...] = value
            np.testing.assert_array_equal(f(x).numpy(), [value, value])
        assert f.stats.fallbacks == 3 and f.stats.hits == 0
    with pytest.raises(RuntimeError, match=r"read the value of a captured tensor \(float32"):
        nb.compile(lambda v: v * w.item(), fullgraph=True)(x)
    own = nb.compile(lambda v: v * nb.constant(2.0).item(), fullgraph=True)
    for _ in range(2):
        np.testing.assert_array_equal(own(x).numpy(), [2.0, 2.0])
    assert own.stats.fallbacks == 0 and own.stats.hits == 1


def test_an_object_whose_getattr_raises_is_walked_for_its_tensors():
    """The capture walk asked every object for ``__wrapped__`` and let a class's own
    ``__getattr__`` error (a KeyError here) escape from ``compile``."""

    class Config:
        def __getattr__(self, name):
            raise KeyError(name)

    cfg = Config()
    cfg.w = nb.ones((2,))
    f = nb.compile(lambda v: v * cfg.w)
    np.testing.assert_array_equal(f(nb.ones((2,))).numpy(), [1.0, 1.0])
    cfg.w = nb.full((2,), 3.0)
    np.testing.assert_array_equal(f(nb.ones((2,))).numpy(), [3.0, 3.0])


def test_a_compiled_call_inside_another_keeps_it_compiled_with_a_lazy_capture():
    """The inner function's plan computed its captured tensor's promise (``w = nb.ones``,
    never realized) while the outer one traced, which the outer took for its function
    realizing a value: it ran uncompiled at every call. A value the outer trace computed
    and the inner one captured still makes the outer run uncompiled (its plan cannot hold
    it as a constant)."""
    w = nb.ones((2,))
    inner = nb.compile(lambda v: v * w)
    outer = nb.compile(lambda v: inner(v) + 1.0)
    x = nb.ones((2,))
    for value in (1.0, 2.0, 3.0):
        w[...] = value
        np.testing.assert_array_equal(outer(x).numpy(), [value + 1.0] * 2)
    assert outer.stats.hits == 2 and outer.stats.fallbacks == 0

    def through(v):
        y = v * 2.0
        return nb.compile(lambda z: z + y)(v)

    c = nb.compile(through)
    for k in (1.0, 2.0):
        np.testing.assert_array_equal(c(nb.full((2,), k)).numpy(), [3.0 * k] * 2)
    assert c.stats.fallbacks == 2


def test_a_name_rebound_in_a_list_of_one_tensor_is_seen():
    """A tensor held six times (``[t] * 6``, a cache of one zero tensor per layer) kept
    only its first four names, so rebinding the sixth was missed: the call served the
    old tensor's value."""
    t = nb.ones((2,))
    layers = [t] * 6
    f = nb.compile(lambda v: v * layers[5])
    x = nb.ones((2,))
    np.testing.assert_array_equal(f(x).numpy(), [1.0, 1.0])
    layers[5] = nb.full((2,), 9.0)
    np.testing.assert_array_equal(f(x).numpy(), [9.0, 9.0])


def _programs_run(monkeypatch) -> list:
    """Every program run from now on (one entry per run), whichever path ran it."""
    import sys

    runs = []
    for name in ("nabla.transforms.compile", "nabla.runtime.graph"):
        module = sys.modules[name]
        original = module.run_program

        def counted(program, *args, _original=original, **kwargs):
            runs.append(program)
            return _original(program, *args, **kwargs)

        monkeypatch.setattr(module, "run_program", counted)
    return runs


def _calls_a_plan(program) -> bool:
    return any(instr.op == "compiled_call" for instr in program.instructions)


def _distinct(runs) -> int:
    return len({id(p) for p in runs})


def test_the_traced_call_is_served_by_the_program_its_hits_run(monkeypatch):
    # the trace's own outputs were a graph of their own: ``loss.item()`` computed the loss
    # alone, the new parameters joined the next call's program, and only the third call ran
    # the plan's (three MAX compiles before a loop's steady state)
    def loss_fn(p, x, y):
        h = nb.tanh(x @ p["w"]) * nb.random.bernoulli((8, 2), 0.75)
        return ((h - y) ** 2).mean()

    def train_step(p, x, y):
        loss, g = nb.value_and_grad(loss_fn)(p, x, y)
        return loss, {"w": p["w"] - 0.1 * g["w"]}

    def run(step, pending: bool) -> tuple:
        nb.random.seed(3)
        p = {"w": nb.constant(W0)}
        x, y = nb.constant(X), nb.constant(Y)
        if pending:  # (a freshly initialized model's weights are pending)
            p = {"w": p["w"] * 1.0}
        else:
            nb.realize(p["w"], x, y)
        losses = []
        for _ in range(4):
            loss, p = step(p, x, y)
            losses.append(loss.item())
        return losses, p["w"].numpy()

    for pending in (False, True):
        eager = run(train_step, pending)
        runs = _programs_run(monkeypatch)
        step = nb.compile(train_step)
        got = run(step, pending)
        monkeypatch.undo()
        # the same values, the same draws of the global generator (a key per call)
        assert got[0] == eager[0], pending
        np.testing.assert_array_equal(got[1], eager[1])
        assert step.stats.misses == 1 and step.stats.hits == 3
        # realized arguments: the plan's one program from the first call on; pending ones:
        # its program with them once, then the plan's
        assert _distinct(runs) == (2 if pending else 1), [p.num_ops for p in runs]
        assert runs[-1] is runs[-2] is runs[-3]


def _bn_model():
    # (no bias before the BatchNorm: its gradient is rounding noise, which Adam scales up)
    m = nb.nn.Sequential(nb.nn.Linear(4, 3, bias=False), nb.nn.BatchNorm1d(3), nb.nn.Linear(3, 2))
    m.load_state_dict(
        {
            "0.weight": np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3),
            "2.weight": W0[:3],
            "2.bias": np.ones(2, np.float32),
        },
        strict=False,
    )
    return m


def test_a_traced_step_that_updates_state_in_place_runs_its_plan_once(monkeypatch):
    # the first call's plan reads the state the trace updated in place as the call found
    # it, not as the trace left it, and the step's own program runs from the first call
    # on (compile_step computes the parameters and moments still pending first: a new
    # model's, the zero moments)
    def train(compiled: bool) -> tuple:
        m = _bn_model()
        opt = nb.nn.optim.Adam(m, lr=0.05)  # (its moments: lazy zeros, pending)
        x, y = nb.constant(X), nb.constant(Y)
        nb.realize(x, y)
        if compiled:  # (parameters, moments and running statistics updated each call)
            step = opt.compile_step(lambda model, a, b: F.mse_loss(model(a), b))
            out = [step(x, y).item() for _ in range(3)]
        else:
            out = []
            for _ in range(3):
                loss = F.mse_loss(m(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                out.append(loss.item())
        return out, m.state_dict()

    def forward(compiled: bool) -> tuple:
        m = _bn_model()
        nb.realize(*m.parameters())
        f = nb.compile(m) if compiled else m
        x = nb.constant(X)
        nb.realize(x)
        with nb.no_grad():  # (else a hit replays, for the parameters' gradients)
            out = [f(x * float(k)).sum().item() for k in (1, 2)]
        return out, m.state_dict()

    for run in (train, forward):
        eager, eager_state = run(False)
        runs = _programs_run(monkeypatch)
        got, state = run(True)
        monkeypatch.undo()
        np.testing.assert_allclose(got, eager, rtol=1e-5)
        for k, v in eager_state.items():
            np.testing.assert_allclose(
                np.asarray(state[k]), np.asarray(v), rtol=1e-5, atol=1e-6, err_msg=k
            )
        # (the step's programs: not the small ones of the loads and of x * k)
        big = [p for p in runs if p.num_ops > 20 or _calls_a_plan(p)]
        assert _distinct(big) == 1, (run.__name__, [p.num_ops for p in runs])
