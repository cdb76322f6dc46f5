"""For every differentiable registry op, in float64: JVP vs central finite differences,
the adjoint identity <vjp(ct), t> == <ct, jvp(t)>, and vmap(grad) vs a loop of grads."""

import numpy as np
import pytest
from _helpers import array_positions, as_list, entry_params, samples
from op_registry import REGISTRY

import nabla as nb

ENTRIES = [e for e in REGISTRY.values() if e.differentiable and e.ref is not None]


def _usable(s):
    pos = array_positions(s, "f")
    return pos and not any(0 in s.args[i].shape for i in pos)


def _fn_of_floats(entry, s, pos):
    def f(*floats):
        args = list(s.args)
        for i, v in zip(pos, floats):
            args[i] = v
        args = [nb.constant(a) if isinstance(a, np.ndarray) else a for a in args]
        return entry.fn(*args, **s.kwargs)

    return f


@pytest.mark.parametrize("entry", entry_params(ENTRIES, "jvp_fd"))
def test_jvp_matches_finite_differences(entry):
    rng = np.random.default_rng(1)
    for s in samples(entry, "float64"):
        if not _usable(s):
            continue
        pos = array_positions(s, "f")
        f = _fn_of_floats(entry, s, pos)
        prim = [nb.constant(s.args[i]) for i in pos]
        tans = [nb.constant(rng.standard_normal(s.args[i].shape)) for i in pos]
        _, tout = nb.jvp(f, tuple(prim), tuple(tans))
        eps = entry.fd_eps
        plus = as_list(f(*[nb.constant(s.args[i] + eps * t.numpy()) for i, t in zip(pos, tans)]))
        minus = as_list(f(*[nb.constant(s.args[i] - eps * t.numpy()) for i, t in zip(pos, tans)]))
        for t, p, m in zip(as_list(tout), plus, minus):
            fd = (p.numpy() - m.numpy()) / (2 * eps)
            np.testing.assert_allclose(
                t.numpy(), fd, atol=1e-5, rtol=1e-4, err_msg=f"{entry.name} {s}"
            )


@pytest.mark.parametrize("entry", entry_params(ENTRIES, "adjoint"))
def test_adjoint_identity(entry):
    rng = np.random.default_rng(2)
    for s in samples(entry, "float64"):
        if not _usable(s):
            continue
        pos = array_positions(s, "f")
        f = _fn_of_floats(entry, s, pos)
        prim = [nb.constant(s.args[i]) for i in pos]
        tans = [nb.constant(rng.standard_normal(s.args[i].shape)) for i in pos]
        _, tout = nb.jvp(f, tuple(prim), tuple(tans))
        out, pullback = nb.vjp(f, *prim)
        outs = as_list(out)
        cts = [nb.constant(rng.standard_normal(o.shape)) for o in outs]
        ct_in = pullback(nb.tree_unflatten(nb.tree_structure(out), cts))
        lhs = sum(float((c.numpy() * t.numpy()).sum()) for c, t in zip(ct_in, tans))
        rhs = sum(float((c.numpy() * t.numpy()).sum()) for c, t in zip(cts, as_list(tout)))
        assert np.isclose(lhs, rhs, rtol=1e-7, atol=1e-8), (entry.name, s, lhs, rhs)


@pytest.mark.parametrize("entry", entry_params(ENTRIES, "vmap_grad"))
def test_vmap_of_grad_matches_loop(entry):
    s = next((s for s in samples(entry, "float64") if _usable(s)), None)
    if s is None:
        pytest.skip("no float sample")
    pos = array_positions(s, "f")[:1]
    f = _fn_of_floats(entry, s, pos)
    rng = np.random.default_rng(3)
    w = [nb.constant(rng.standard_normal(o.shape)) for o in as_list(f(nb.constant(s.args[pos[0]])))]

    def loss(x):
        return sum((o * wi).sum() for o, wi in zip(as_list(f(x)), w))

    xs = np.stack([s.args[pos[0]] + 0.01 * k for k in range(3)])
    got = nb.vmap(nb.grad(loss))(nb.constant(xs)).numpy()
    want = np.stack([nb.grad(loss)(nb.constant(x)).numpy() for x in xs])
    np.testing.assert_allclose(got, want, atol=1e-10, rtol=1e-8)
