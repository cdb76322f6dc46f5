"""Open/closed dims, priorities, P.UNCONSTRAINED and explicitly replicated axes: the spec
spellings and what factor propagation does with them (rule-level and end to end)."""

import numpy as np
import pytest

import nabla as nb
from nabla import DimSpec, P
from nabla.core.sharding import FactorRule, ShardingError, ShardingSpec, propagate

MESH = nb.DeviceMesh("m", (2, 2), ("x", "y"))
ADD = FactorRule.parse("i j, i j -> i j", [(4, 4), (4, 4)], [(4, 4)])
MATMUL = FactorRule.parse("m k, k n -> m n", [(4, 4), (4, 4)], [(4, 4)], reduce={"k": "sum"})


def spec(*dims, **kw):
    return ShardingSpec(MESH, dims, **kw)


def prop(rule, *specs, sizes=None):
    return propagate(rule, list(specs), sizes or [64.0] * len(specs), MESH)


# ----------------------------------------------------------------------------- spellings
def test_dimspec_defaults_and_keywords():
    d = DimSpec(["x"])
    assert (d.axes, d.is_open, d.priority) == (["x"], False, 0)  # a list, as the original's
    o = DimSpec("y", is_open=True, priority=2)
    assert (o.axes, o.is_open, o.priority) == (["y"], True, 2)
    o.axes.append("x")  # a copy: the DimSpec (hashable) does not change
    assert o.axes == ["y"] and o == DimSpec(("y",), is_open=True, priority=2)
    assert d != DimSpec(["x"], is_open=True)
    assert hash(d) == hash(DimSpec(("x",)))
    assert repr(o) == "DimSpec(['y'], is_open=True, priority=2)"
    assert DimSpec([]).is_replicated() and not d.is_replicated()


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"axes": [], "priority": 1}, "closed replicated dim cannot have a priority"),
        ({"axes": ["x"], "priority": -1}, "priority must be an int >= 0"),
        ({"axes": ["x"], "priority": True}, "priority must be an int >= 0"),
        ({"axes": ["x"], "is_open": "yes"}, "is_open must be a bool"),
        ({"axes": [1]}, "axes are mesh axis names"),
    ],
)
def test_dimspec_bad_arguments(kw, msg):
    with pytest.raises(ShardingError, match=msg):
        DimSpec(**kw)


def test_from_raw():
    assert DimSpec.from_raw(None) == DimSpec([])
    assert DimSpec.from_raw("x") == DimSpec(["x"])
    assert DimSpec.from_raw(("x", "y")) == DimSpec(["x", "y"])
    d = DimSpec(["x"], is_open=True)
    assert DimSpec.from_raw(d) is d
    assert DimSpec.from_raw(P.UNCONSTRAINED) == DimSpec([], is_open=True)
    assert [DimSpec.from_raw(e) for e in P("x", None)] == [DimSpec(["x"]), DimSpec([])]
    with pytest.raises(ShardingError, match="DimSpec.from_raw"):
        DimSpec.from_raw(3)


def test_sharding_spec_flags():
    plain = spec(("x",), ())
    closed = spec(DimSpec(["x"]), DimSpec([], is_open=True, priority=1))
    assert not plain.is_constrained and closed.is_constrained
    assert closed.open == (False, True) and closed.priority == (0, 1)
    assert closed.dim_specs == (DimSpec(["x"]), DimSpec([], is_open=True, priority=1))
    assert closed != plain and closed.same_layout(plain)
    assert closed.unconstrained() == plain
    # a P entry or open DimSpec at priority 0 is the plain spec
    assert spec(DimSpec(["x"], is_open=True), None) == plain
    assert "closed=[0]" in repr(closed) and "priority=[0, 1]" in repr(closed)
    r = spec((), (), replicated_axes={"y"})
    assert r.fixed_replicated == ("y",) and r.is_constrained
    with pytest.raises(ShardingError, match="explicitly replicated"):
        spec(("y",), (), replicated_axes={"y"})
    with pytest.raises(ShardingError, match="unknown mesh axis"):
        spec((), (), replicated_axes={"z"})


def test_unconstrained_entry():
    assert repr(P(P.UNCONSTRAINED, "x")) == "P(P.UNCONSTRAINED, 'x')"
    s = ShardingSpec.from_spec(MESH, P(P.UNCONSTRAINED, "y"), 2)
    assert s.dims == ((), ("y",)) and s.open == (True, True)
    # with the value's present layout, the dim keeps it (less axes other entries name)
    s = ShardingSpec.from_spec(MESH, P(P.UNCONSTRAINED, "y"), 2, current=(("x", "y"), ()))
    assert s.dims == (("x",), ("y",))


# ----------------------------------------------------------------------------- propagation
def test_open_replicated_dim_is_sliced_like_today():
    plan = prop(ADD, spec(("x",), ()), spec((), ()))
    assert plan.input_dims == ((("x",), ()), (("x",), ()))
    assert plan == prop(ADD, spec(("x",), ()), spec(DimSpec([], is_open=True), None))


def test_closed_replicated_dim_is_never_split():
    plan = prop(ADD, spec(("x",), ()), spec(DimSpec([]), DimSpec([])))
    assert plan.input_dims == (((), ()), ((), ()))  # the open operand is gathered instead
    assert plan.output_dims == (((), ()),)


def test_closed_dim_keeps_its_axes_against_a_cheaper_candidate():
    big_open, small_closed = spec(("y",), ()), spec(DimSpec(["x"]), None)
    # open-only: the larger operand keeps its axes
    assert prop(ADD, big_open, spec(("x",), ()), sizes=[256.0, 64.0]).output_dims[0][0] == ("y",)
    plan = prop(ADD, big_open, small_closed, sizes=[256.0, 64.0])
    assert plan.input_dims == ((("x",), ()), (("x",), ()))
    assert plan.output_dims == ((("x",), ()),)


def test_closed_dim_is_not_extended():
    # the open operand's dim is split over (x, y); the closed one over x only: x it is
    plan = prop(ADD, spec(("x", "y"), ()), spec(DimSpec(["x"]), DimSpec([], is_open=True)))
    assert plan.input_dims[1] == (("x",), ())
    assert plan.output_dims == ((("x",), ()),)
    # an open x dim would have been extended to (x, y) (the larger split wins the cost model)
    plan = prop(ADD, spec(("x", "y"), ()), spec(DimSpec(["x"], is_open=True), None))
    assert plan.input_dims[1] == (("x", "y"), ())


def test_closed_contracting_dim_leaves_no_partial():
    # x splits k; w's k dim is closed replicated: no partial sum, x is gathered on k
    plan = prop(MATMUL, spec((), ("x",)), spec(DimSpec([]), DimSpec([], is_open=True)))
    assert plan.partial == {} and plan.input_dims[0] == ((), ())
    plan = prop(MATMUL, spec((), ("x",)), spec((), ()))
    assert plan.partial == {"x": "sum"}


def test_closed_dims_that_disagree_lowest_priority_wins():
    a = spec(DimSpec(["x"], priority=1), None)
    b = spec(DimSpec(["y"]), None)
    assert prop(ADD, a, b).output_dims == ((("y",), ()),)
    a = spec(DimSpec(["x"]), None)
    b = spec(DimSpec(["y"], priority=1), None)
    assert prop(ADD, a, b).output_dims == ((("x",), ()),)


def test_priority_orders_factors_claiming_one_axis():
    # both dims want x; by default the first factor met (operand 0's dim 0) takes it
    a, b = spec(("x",), ()), spec((), ("x",))
    assert prop(ADD, a, b).output_dims == ((("x",), ()),)
    # a lower priority number on b's dim 1 makes its factor propagate first
    b = spec(DimSpec([], is_open=True), DimSpec(["x"], is_open=True, priority=0))
    a = spec(DimSpec(["x"], is_open=True, priority=1), None)
    assert prop(ADD, a, b).output_dims == (((), ("x",)),)


def test_priority_ranks_open_candidates_before_cost():
    big = spec(DimSpec(["y"], is_open=True, priority=1), None)
    small = spec(DimSpec(["x"], is_open=True, priority=0), None)
    plan = prop(ADD, big, small, sizes=[256.0, 64.0])
    assert plan.output_dims == ((("x",), ()),)


def test_explicitly_replicated_axes_are_not_given_to_the_operand():
    plan = prop(ADD, spec(("x",), ()), spec((), (), replicated_axes={"x"}))
    assert plan.output_dims == (((), ()),)
    plan = prop(ADD, spec(("y",), ()), spec((), (), replicated_axes={"x"}))
    assert plan.output_dims == ((("y",), ()),)


# ----------------------------------------------------------------------------- end to end
def data(seed=0):
    return np.random.default_rng(seed).standard_normal((4, 4)).astype(np.float32)


def test_shard_carries_flags_and_ops_honour_them():
    a, b = data(0), data(1)
    xa = nb.shard(a, MESH, P("x"))
    closed = nb.shard(b, MESH, [DimSpec([]), DimSpec([])])
    opened = nb.shard(b, MESH, [DimSpec([], is_open=True), DimSpec([], is_open=True)])
    assert closed.sharding.open == (False, False)
    assert opened.sharding == ShardingSpec(MESH, ((), ()))
    out_c, out_o = xa + closed, xa + opened
    assert out_c.sharding.dims == ((), ()) and out_o.sharding.dims == (("x",), ())
    assert not out_c.sharding.is_constrained  # outputs are open
    np.testing.assert_allclose(np.asarray(out_c), a + b, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out_o), a + b, rtol=1e-6)


def test_shard_relabels_an_equal_layout_and_keywords():
    a = data(2)
    x = nb.shard(a, MESH, P("x"))
    y = nb.shard(x, MESH, [DimSpec(["x"]), DimSpec([])])
    assert y.sharding.open == (False, False) and y.sharding.same_layout(x.sharding)
    np.testing.assert_array_equal(np.asarray(y), a)
    z = nb.shard(a, MESH, dim_specs=[DimSpec(["y"]), None])
    assert z.sharding.dims == (("y",), ())
    with pytest.raises(TypeError, match="spec or dim_specs, not both"):
        nb.shard(a, MESH, P("x"), dim_specs=[DimSpec([])])
    r = nb.shard(a, MESH, P(), replicated_axes={"x"})
    assert r.sharding.fixed_replicated == ("x",)
    assert (x + r).sharding.dims == ((), ())
    np.testing.assert_allclose(np.asarray(x + r), 2 * a, rtol=1e-6)
    with pytest.raises(ShardingError, match="explicitly replicated"):
        nb.shard(a, MESH, P("x"), replicated_axes={"x"})


def test_shard_unconstrained_keeps_the_present_axes():
    a = data(3)
    x = nb.shard(a, MESH, P("x"))
    y = nb.shard(x, MESH, P(P.UNCONSTRAINED, "y"))
    assert y.sharding.dims == (("x",), ("y",))
    np.testing.assert_array_equal(np.asarray(y), a)


def test_closed_spec_under_grad_compile_and_vmap():
    a, b = data(4), data(5)

    def f(u, v):
        return nb.sum(nb.matmul(u, v) * u)

    ref_ga = np.asarray(nb.grad(f)(nb.asarray(a), nb.asarray(b)))
    xa = nb.shard(a, MESH, P("x"))
    wb = nb.shard(b, MESH, [DimSpec([]), DimSpec(["y"])])
    g = nb.grad(f)(xa, wb)
    np.testing.assert_allclose(np.asarray(g), ref_ga, rtol=1e-5, atol=1e-5)
    gc = nb.compile(nb.grad(f))(xa, wb)
    np.testing.assert_allclose(np.asarray(gc), ref_ga, rtol=1e-5, atol=1e-5)

    def row(u):
        return nb.shard(u, MESH, [DimSpec(["y"])]) * 2.0

    out = nb.vmap(row)(nb.asarray(a))
    np.testing.assert_allclose(np.asarray(out), 2 * a, rtol=1e-6)


def test_priorities_decide_the_same_under_compile_trace_and_grad():
    """A compiled function's or a trace's copy of an argument took the default flags, so
    the lower priority number of the other operand lost: compile laid ``x + y`` out as
    ``x``, where eager code takes ``y``'s layout."""
    mesh = nb.DeviceMesh("m1", (2,), ("d",))
    a = data(6)
    x = nb.shard(a, mesh, [DimSpec(["d"], priority=1), DimSpec([], is_open=True)])
    y = nb.shard(a, mesh, [DimSpec([], is_open=True), DimSpec(["d"], priority=0)])
    want = (x + y).sharding.spec
    assert want == P(None, "d")
    assert nb.compile(lambda p, q: p + q)(x, y).sharding.spec == want
    assert "all_to_all" in str(nb.trace(lambda p, q: p + q)(x, y)).split("\n")[1]
    assert "{-,d}" in str(nb.trace(lambda p, q: p + q)(x, y)).split("\n")[-2]
    g = nb.grad(lambda p, q: ((p + q) * 1.0).sum(), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(np.asarray(g[0]), np.ones((4, 4)), rtol=1e-6)
