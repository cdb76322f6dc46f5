"""NABLA_EAGER_MAX_GRAPH=1: every op is realized at its call through the same evaluation path
and the backend's result is checked against the op's shape rule."""

import numpy as np
import pytest

import nabla as nb
from nabla.core.config import CONFIG


@pytest.fixture
def eager():
    old = CONFIG.eager_graph
    CONFIG.eager_graph = True
    try:
        yield
    finally:
        CONFIG.eager_graph = old


def test_ops_are_realized_at_the_call(eager):
    x = nb.constant(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    y = nb.exp(x) @ x.T
    assert y.is_realized
    np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()) @ x.numpy().T, rtol=1e-5)
    g = nb.grad(lambda a: (nb.tanh(a) * a).sum())(x)
    assert g.is_realized


def test_shape_rule_mismatch_is_reported(eager, monkeypatch):
    from nabla.backends.numpy import lowerings
    from nabla.runtime.graph import GRAPH

    GRAPH.clear_cache()  # cached programs hold the lowering they were built with
    monkeypatch.setitem(lowerings.LOWERINGS, "exp", lambda args, kw: [np.exp(args[0])[:1]])
    with pytest.raises(RuntimeError, match="op exp: backend produced"):
        nb.exp(nb.ones((2, 3)))
