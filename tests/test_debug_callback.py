"""``nb.debug.print``/``callback`` (JAX's ``jax.debug``): values printed now, per example
under ``vmap`` in order, at every call of a compiled function, and a clear error in a loop
body."""

import numpy as np
import pytest

import nabla as nb


def test_print_eagerly_per_example_and_in_compiled_calls(capsys):
    x = nb.constant(np.arange(3, dtype=np.float32))
    nb.debug.print("x={x} total={}", x.sum(), x=x)
    assert capsys.readouterr().out == "x=[0. 1. 2.] total=3.0\n"
    nb.vmap(nb.vmap(lambda v: nb.debug.print("{}", v)))(np.arange(4.0).reshape(2, 2))
    assert capsys.readouterr().out.split() == ["0.0", "1.0", "2.0", "3.0"]

    @nb.compile
    def f(v):
        nb.debug.print("y={}", v * 2)
        return v + 1

    for start in (1.0, 3.0):
        f(np.full(2, start, np.float32))
    assert capsys.readouterr().out == "y=[2. 2.]\ny=[6. 6.]\n"
    nb.grad(lambda v: (nb.debug.print("primal {}", v), nb.sum(v * v))[1])(np.ones(2))
    assert capsys.readouterr().out == "primal [1. 1.]\n"


def test_callback_gets_numpy_values_and_python_ones():
    seen = []
    nb.debug.callback(lambda a, tag=None: seen.append((type(a), tag)), nb.ones(2), tag="t")
    assert seen == [(np.ndarray, "t")]
    shardings = []
    nb.debug.inspect_array_sharding(nb.ones(2), callback=shardings.append)
    assert shardings == [None]


def test_inside_a_loop_body_it_says_what_to_do_instead():
    def body(c, v):
        nb.debug.print("{}", v)
        return c + v, v

    with pytest.raises(RuntimeError, match="inside a scan, while_loop, fori_loop or cond body"):
        nb.scan(body, 0.0, np.arange(3.0))
