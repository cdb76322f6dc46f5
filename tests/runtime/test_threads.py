"""nabla from several Python threads, as JAX's jitted functions and PyTorch's eager ops are
used (inference servers, background loading): shared lazy values, first compiles beside
other threads' Python, and which settings are per thread (a ``default_dtype`` or
``debug_nans`` block) or per process (``nb.random.seed``, as PyTorch's)."""

import collections
import contextlib
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import nabla as nb
from nabla.core.config import CONFIG


@pytest.fixture
def switch_often():
    """Threads switch every microsecond, so races show within a few rounds."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_threads_reading_one_lazy_value(switch_often):
    """(A thread that found the value pending, then waited for the graph's lock while
    another computed it, walked a node that was gone: 5% of reads failed.)"""
    want = np.exp(np.arange(12, dtype=np.float32).reshape(3, 4) * 0.1).sum(0)
    with ThreadPoolExecutor(4) as pool:
        for _ in range(40):
            x = nb.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
            shared = nb.exp(x * 0.1).sum(axis=0)
            start = threading.Barrier(4)

            def read(shared=shared, start=start):
                start.wait()
                return shared.numpy()

            for got in [f.result(timeout=60) for f in [pool.submit(read) for _ in range(4)]]:
                np.testing.assert_allclose(got, want, rtol=1e-6)


class _Key:
    """A key whose hash runs Python code (an Enum member, a dataclass)."""

    def __init__(self, i):
        self.i = i

    def __hash__(self):
        return hash(self.i)

    def __eq__(self, other):
        return isinstance(other, _Key) and other.i == self.i


CACHE = collections.OrderedDict((_Key(i), i) for i in range(500))


def test_first_compile_while_another_thread_changes_what_it_reaches(switch_often):
    """A compile's first call walks what the function reaches (its captures); an
    OrderedDict it reads that another thread changes meanwhile made the walk fail
    ("mutated during iteration", or a KeyError) in 3 of 4 first calls."""
    stop = threading.Event()

    def churn():  # another thread using its LRU cache
        i = len(CACHE)
        while not stop.is_set():
            CACHE[_Key(i)] = i
            CACHE.popitem(last=False)
            i += 1

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    x = nb.constant(np.ones(3, np.float32))
    try:
        for _ in range(30):

            def f(v):
                _ = CACHE
                return v * 2.0

            np.testing.assert_array_equal(nb.compile(f)(x).numpy(), [2.0, 2.0, 2.0])
    finally:
        stop.set()
        worker.join()


@contextlib.contextmanager
def _meanwhile(work, block):
    """Run ``work()`` in another thread inside ``with block():``, and this block while that
    thread is still inside it (its errors are raised here after)."""
    inside, done, failed = threading.Event(), threading.Event(), []

    def other():
        try:
            with block():
                work()
                inside.set()
                done.wait(30)
        except BaseException as e:  # (reported by the test's thread)
            failed.append(e)
            inside.set()

    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(30)
        if failed:
            raise failed[0]
        yield
    finally:
        done.set()
        t.join()
    if failed:
        raise failed[0]


def test_a_compiled_function_follows_each_threads_default_dtype():
    """A thread inside ``default_dtype(float64)`` made the compiled function's fast entry;
    another thread, whose default is float32, was served it."""

    @nb.compile
    def f(x):
        return nb.zeros((3,)) + x  # the literal takes the default float dtype

    x = nb.constant(np.arange(3, dtype=np.int32))
    seen = []

    def other():
        seen.append(f(x).dtype)
        seen.append(f(x).dtype)  # the second call makes the fast entry

    with _meanwhile(other, lambda: nb.default_dtype(nb.float64)):
        assert f(x).dtype == nb.float32  # this thread's default
        assert f(x).dtype == nb.float32
    assert seen == [nb.float64, nb.float64]
    assert f(x).dtype == nb.float32


def test_a_debug_nans_block_is_its_threads_own():
    """As JAX's: a block sets its own thread's switch; the call sets the process's. A
    block in another thread made this one's ``log(-1)`` raise, and two overlapping blocks
    left the switch on for good."""
    bad = nb.constant(np.array([-1.0], np.float32))

    def other():
        with pytest.raises(FloatingPointError):
            nb.log(bad).numpy()

    with _meanwhile(other, nb.debug_nans):
        assert np.isnan(nb.log(bad).numpy()[0])  # not this thread's block

    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with nb.debug_nans():
            a_in.set()
            b_in.wait(30)
        a_out.set()

    def second():
        a_in.wait(30)
        with nb.debug_nans():
            b_in.set()
            a_out.wait(30)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not CONFIG.debug_nans and not CONFIG.debug_values
    assert np.isnan(nb.log(bad).numpy()[0])

    nb.debug_nans(True)  # the call form: every thread
    try:
        got = []

        def check():
            try:
                nb.log(bad).numpy()
            except FloatingPointError:
                got.append("raised")

        t = threading.Thread(target=check)
        t.start()
        t.join()
        assert got == ["raised"]
    finally:
        nb.debug_nans(False)


def test_seed_makes_every_threads_draws_reproducible():
    """``nb.random.seed`` seeds the process's generator, as ``torch.manual_seed`` does
    (each new thread had drawn from fresh OS entropy)."""

    def draw_in_thread():
        out = []
        t = threading.Thread(target=lambda: out.append(nb.uniform((3,)).numpy()))
        t.start()
        t.join()
        return out[0]

    nb.random.seed(0)
    a = draw_in_thread()
    nb.random.seed(0)
    b = draw_in_thread()
    np.testing.assert_array_equal(a, b)
    nb.random.seed(0)
    np.testing.assert_array_equal(nb.uniform((3,)).numpy(), a)  # one stream, any thread


def test_draws_from_many_threads_are_all_different():
    """One generator, a counter taken under a lock: no two draws share a stream."""
    nb.random.seed(1)
    with ThreadPoolExecutor(4) as pool:
        draws = list(pool.map(lambda _: nb.uniform((4,)).numpy().tobytes(), range(64)))
    assert len(set(draws)) == 64


def test_two_debug_nans_blocks_opened_at_once_leave_the_process_setting_as_it_was():
    """A block's call set the process's switch before its ``__enter__`` made it the
    thread's; a second thread's call in between saw that value as the one to put back."""
    made, entered, done = threading.Event(), threading.Event(), threading.Event()

    def first():
        block = nb.debug_nans()  # the call: the process's switch on for a moment
        made.set()
        entered.wait(30)
        with block:
            pass
        done.set()

    def second():
        made.wait(30)
        block = nb.debug_nans()  # sees the first's moment as the previous setting
        entered.set()
        done.wait(30)
        with block:
            pass

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not CONFIG.debug_nans and not CONFIG.debug_values


def test_another_threads_realize_all_never_computes_a_trace(switch_often):
    """``nb.realize()`` (every pending value) in a monitor thread while a compiled function
    traced for the first time had computed the trace's values, which the trace then took
    for constants: every later call of ``compile(grad(f))`` gave the first input's
    gradient, and a ``compile_step``'s loss stopped moving (10 of 10 trials)."""
    f = nb.compile(nb.grad(lambda v: (nb.sin(v) * v).sum()))
    xs = [nb.constant(np.full(3, k / 4, np.float32)) for k in range(6)]
    want = [np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy()) for x in xs]
    stop = threading.Event()

    def monitor():
        while not stop.is_set():
            nb.realize()

    watcher = threading.Thread(target=monitor)
    watcher.start()
    try:
        got = [f(x).numpy() for x in xs]
    finally:
        stop.set()
        watcher.join()
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    # once a trace is over, its call's outputs are pending like any value: nb.realize()
    # computes the first call's results too
    h = nb.compile(lambda v: nb.sin(v) * 2.0)
    y = h(xs[1])
    nb.realize()
    assert y._impl.buffer is not None


def test_a_pending_write_is_computed_by_its_own_threads_next_evaluation():
    """An in-place write is computed with the writing thread's next evaluation, not
    another thread's: one thread's NaN write was computed inside another thread's
    ``debug_nans`` block, which raised for a NaN it never made."""
    x = nb.zeros((3,))
    ready, done = threading.Event(), threading.Event()

    def writer():
        x[0] = nb.log(nb.constant(-1.0))  # NaN, pending
        ready.set()
        done.wait()

    t = threading.Thread(target=writer)
    t.start()
    ready.wait()
    try:
        with nb.debug_nans():
            assert (nb.constant([1.0, 2.0]) * 3).sum().item() == 9.0
    finally:
        done.set()
        t.join()
    assert np.isnan(x.numpy()[0])


def test_backward_from_several_threads_adds_every_gradient(switch_often):
    """Hogwild-style ``backward`` calls on shared parameters from several threads add
    up, as PyTorch's do: each had read the old ``.grad`` and sums were lost."""
    lin = nb.nn.Linear(4, 2, key=nb.random.key(0))
    batches = [nb.constant(np.full((2, 4), k + 1.0, np.float32)) for k in range(4)]

    def work(x):
        for _ in range(25):
            lin(x).sum().backward()

    threads = [threading.Thread(target=work, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # d/dW of sum(x @ W + b) = column sums of x, per output: 2 rows of (k + 1), 25 times
    want = 25 * 2 * sum(k + 1.0 for k in range(4))
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.full((4, 2), want))
    np.testing.assert_allclose(lin.bias.grad.numpy(), np.full(2, 25 * 2 * 4.0))
