"""nb.debug_nans / nb.debug_infs: the op that made a NaN, named with the user's line."""

from __future__ import annotations

import numpy as np
import pytest

import nabla as nb
from nabla.core.config import CONFIG


@pytest.fixture(autouse=True)
def _switches_off():
    before = (CONFIG.debug_nans, CONFIG.debug_infs, CONFIG.debug_values)
    yield
    CONFIG.debug_nans, CONFIG.debug_infs, CONFIG.debug_values = before


def _raises(fn) -> str:
    with pytest.raises(FloatingPointError) as e:
        fn()
    return str(e.value)


def _messages(f, *args, mode: str) -> list[str]:
    """The error of ``f(*args)`` realized: eagerly, or under ``nb.compile`` twice (the
    first call traces; the second runs the compiled program and re-runs it op by op)."""

    def realize(out):
        return nb.tree_map(lambda t: t.numpy(), out)

    with nb.debug_nans():
        if mode == "eager":
            return [_raises(lambda: realize(f(*args)))]
        g = nb.compile(f)
        return [_raises(lambda: realize(g(*args))) for _ in range(2)]


MODES = ["eager", "compiled"]


@pytest.mark.parametrize("mode", MODES)
def test_forward_names_the_op_and_the_users_line(mode):
    def f(x):
        y = nb.log(x) * 0.0  # log(0) = -inf, then -inf * 0 = NaN
        return y

    x = nb.constant(np.array([1.0, 0.0, 2.0], np.float32))
    for msg in _messages(f, x, mode=mode):
        assert msg.startswith("mul made NaN in 1 of 3 elements")
        assert "test_debug_nans.py" in msg and "y = nb.log(x) * 0.0" in msg
        assert "float32 (3,) = np.float32(-inf)" in msg and "(0 * inf)" in msg
        assert "index (1,)" in msg


def test_debug_infs_stops_at_the_op_that_made_the_infinity():
    x = nb.constant(np.array([1.0, 0.0], np.float32))
    with nb.debug_infs():
        y = nb.log(x)
        msg = _raises(y.numpy)
    assert msg.startswith("log made inf") and "y = nb.log(x)" in msg


def test_debug_infs_alone_finds_the_infinity_a_later_nan_came_from():
    """log(0) * 0: the output holds a NaN, not an infinity; with debug_infs alone the
    search still runs and stops at the log (as docs/debugging.md shows). A NaN made from
    finite values (0 / 0) is not debug_infs' to report."""
    x = nb.constant(np.array([0.0, 1.0], np.float32))
    with nb.debug_infs():
        y = nb.log(x) * 0.0
        msg = _raises(y.numpy)
        assert msg.startswith("log made inf")
        z = (x / x).numpy()
    assert np.isnan(z[0]) and z[1] == 1.0


def test_a_nan_the_input_already_held_is_not_blamed_on_an_op():
    x = nb.constant(np.array([np.nan, 1.0], np.float32))
    with nb.debug_nans():
        y = (x * 2.0 + 1.0).numpy()
    assert np.isnan(y[0]) and y[1] == 3.0


def test_a_nan_the_input_held_does_not_hide_one_the_same_op_makes_elsewhere():
    """(One NaN in the data had turned the check off for every op it reached.)"""
    x = nb.constant(np.array([np.nan, -1.0, 2.0], np.float32))
    with nb.debug_nans():
        msg = _raises(lambda: nb.log(x).numpy())
        np.testing.assert_array_equal(nb.is_nan(nb.exp(x) * 2.0).numpy(), [True, False, False])
    assert msg.startswith("log made NaN in 1 of 3 elements where its operands had none")
    assert "at index (1,)" in msg and "(log of a negative number)" in msg


def test_switch_as_function_and_off_by_default():
    assert not CONFIG.debug_nans
    x = nb.constant(np.array([0.0], np.float32))
    assert np.isnan((nb.log(x) * 0.0).numpy()[0])  # off: no check
    nb.debug_nans(True)
    assert CONFIG.debug_nans
    with pytest.raises(FloatingPointError):
        (nb.log(x) * 0.0).numpy()
    nb.debug_nans(False)
    assert not CONFIG.debug_nans


@pytest.mark.parametrize("mode", MODES)
def test_backward_names_the_forward_op_whose_gradient_made_it(mode):
    def f(x):
        r = nb.sqrt(x)
        return (r * 0.0).sum()

    x = nb.constant(np.array([4.0, 0.0, 1.0], np.float32))
    for msg in _messages(nb.grad(f), x, mode=mode):
        assert msg.startswith("the gradient of sqrt made NaN in 1 of 3 elements")
        assert "sqrt was called at" in msg and "r = nb.sqrt(x)" in msg


def test_backward_through_tensor_backward():
    x = nb.constant(np.array([0.0, 1.0], np.float32))
    x.requires_grad = True
    with nb.debug_nans():
        loss = (nb.sqrt(x) * 0.0).sum()
        msg = _raises(lambda: (loss.backward(), x.grad.numpy()))
    assert "the gradient of sqrt" in msg and "loss = (nb.sqrt(x) * 0.0).sum()" in msg


def test_a_custom_rule_is_named_by_the_users_function():
    """(It read "the gradient of custom_call".)"""

    @nb.custom_vjp
    def doubled(a):
        return a * 2.0

    doubled.defvjp(lambda a: (doubled(a), a), lambda r, g: (g * nb.log(r),))
    x = nb.constant(np.array([1.0, -1.0], np.float32))
    with nb.debug_nans():
        msg = _raises(lambda: nb.grad(lambda a: doubled(a).sum())(x).numpy())
    assert msg.startswith("the gradient of custom_vjp function doubled made NaN")


@pytest.mark.parametrize("mode", MODES)
def test_softmax_zero_over_zero(mode):
    def f(x):
        p = nb.softmax(x, axis=-1)
        return p

    x = nb.constant(np.array([[0.0, 1.0], [-np.inf, -np.inf]], np.float32))
    for msg in _messages(f, x, mode=mode):
        assert "made NaN" in msg and "p = nb.softmax(x, axis=-1)" in msg


@pytest.mark.parametrize("mode", MODES)
def test_vmap_names_the_batch_element(mode):
    xs = np.ones((64, 3), np.float32)
    xs[17, 1] = -1.0
    f = nb.vmap(lambda v: nb.sqrt(v) + 1.0)
    msgs = _messages(f, nb.constant(xs), mode=mode)
    for msg in msgs:
        assert msg.startswith("sqrt made NaN in 1 of 192 elements")
        assert "f = nb.vmap(lambda v: nb.sqrt(v) + 1.0)" in msg
        assert "(sqrt of a negative number)" in msg
    assert "vmap batch element 17" in msgs[0] and "at index (1,)" in msgs[0]
    if mode == "compiled":  # the compiled program's element: its physical index
        assert "first at index (17, 1)" in msgs[1]


@pytest.mark.parametrize("mode", MODES)
def test_scan_names_the_construct_and_the_step(mode):
    def body(c, x):
        c = c + nb.log(x)
        return c, c

    def f(xs):
        return nb.scan(body, nb.constant(np.float32(0.0)), xs)[1]

    xs = np.ones((10,), np.float32)
    xs[7] = -1.0
    for msg in _messages(f, nb.constant(xs), mode=mode):
        assert msg.startswith("log made NaN")
        assert "inside the scan called at" in msg and "step 7" in msg
        assert "c = c + nb.log(x)" in msg


def test_compile_reruns_the_compiled_program_op_by_op():
    @nb.compile
    def step(x):
        h = x * 2.0
        return nb.log(h - 2.0).sum()

    x = nb.constant(np.array([3.0, 0.5], np.float32))
    step(x).numpy()  # NaN, not checked: the switch is off
    with nb.debug_nans():
        first = _raises(lambda: step(x).numpy())  # traced again, recording the lines
        again = _raises(lambda: step(x).numpy())  # the compiled program, re-run op by op
    for msg in (first, again):
        assert msg.startswith("log made NaN") and "return nb.log(h - 2.0).sum()" in msg
    assert "inside the compiled function" in again and "(0.0 - 2.0)" not in again


@pytest.mark.parametrize("mode", MODES)
def test_sharded_names_the_shard(mode):
    def f(x):
        y = nb.sqrt(x)
        return y

    mesh = nb.DeviceMesh("m", (4,), ("d",))
    xs = np.ones((8,), np.float32)
    xs[5] = -1.0
    x = nb.shard(nb.constant(xs), mesh, nb.P("d"))
    msgs = _messages(f, x, mode=mode)
    for msg in msgs:
        assert msg.startswith("sqrt made NaN") and "y = nb.sqrt(x)" in msg
    # -1 is element 5 of the value: element 1 of shard d=2's (2,) block, and said so (the
    # block's index had been given against the value's (8,) shape)
    assert "on the shard at mesh 'm' (d=2), at index (1,) of its (2,) block" in msgs[0]


@pytest.mark.parametrize("mode", MODES)
def test_while_loop_names_the_step(mode):
    def f(x):
        def body(c):
            i, v = c
            v = nb.log(v - 0.5)  # 2 -> 0.405 -> nan at the second step
            return i + 1, v

        return nb.while_loop(lambda c: c[0] < 4, body, (nb.constant(np.int32(0)), x))[1]

    x = nb.constant(np.float32(2.0))
    for msg in _messages(f, x, mode=mode):
        assert msg.startswith("log made NaN") and "v = nb.log(v - 0.5)" in msg
        assert "inside the while_loop called at" in msg and "step 1" in msg


@pytest.mark.parametrize("mode", MODES)
def test_cond_names_the_branch_op(mode):
    def f(p, x):
        def neg(v):
            w = nb.sqrt(v - 3.0)
            return w

        return nb.cond(p, neg, lambda v: v, x)

    x = nb.constant(np.array([1.0, 4.0], np.float32))
    for msg in _messages(f, nb.constant(True), x, mode=mode):
        assert msg.startswith("sqrt made NaN in 1 of 2 elements") and "w = nb.sqrt(v - 3.0)" in msg
        assert "inside the cond branch" in msg


def test_a_mean_of_nothing_is_blamed_and_a_nan_fill_is_data():
    """The NaN of a mean over no elements (or a variance with ``n - ddof = 0``) is made by
    a division, which is named (it came in as a NaN constant: unchecked, as data); a NaN
    or -inf the user writes as a fill (``full``, ``pad``) is data, eagerly as under
    ``compile`` (the eager ``full`` was blamed, the compiled one was not)."""
    with nb.debug_nans():
        with pytest.raises(FloatingPointError, match="div made NaN"):
            nb.mean(nb.zeros((0,))).numpy()
        with pytest.raises(FloatingPointError, match="div made NaN"):
            nb.var(nb.ones((1,)), ddof=1).numpy()
        nan = float("nan")
        x = nb.ones((2,))
        assert np.isnan(nb.full((2,), nan).numpy()).all()
        assert np.isnan(nb.full_like(x, nan).numpy()).all()
        assert np.isnan(nb.pad(x, (1, 1), constant_values=nan).numpy()[[0, 3]]).all()
        assert np.isnan(nb.compile(lambda v: nb.full_like(v, nan))(x).numpy()).all()
    with nb.debug_infs():
        ones = nb.ones((3, 3))
        masked = nb.where(nb.tril(ones) > 0, ones, nb.full_like(ones, -float("inf")))
        assert masked.numpy()[0, 2] == -np.inf
    assert np.isnan(nb.mean(nb.zeros((0,))).numpy())
