"""Tests for nabla.core.pytree (JAX-style pytree utilities)."""

from __future__ import annotations

import collections
import copy
import dataclasses
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

try:
    from nabla.core import pytree as pt
except Exception:  # noqa: BLE001  (package not assembled yet)
    import importlib.util
    import pathlib

    _p = pathlib.Path(__file__).resolve().parents[2] / "nabla" / "core" / "pytree.py"
    _s = importlib.util.spec_from_file_location("nabla_pytree", _p)
    pt = importlib.util.module_from_spec(_s)
    _s.loader.exec_module(pt)


# --------------------------------------------------------------------------------------------
# Fixtures / helper types
# --------------------------------------------------------------------------------------------

Point = collections.namedtuple("Point", ["x", "y"])


class TypedPoint(typing.NamedTuple):
    a: int
    b: typing.Any


@dataclasses.dataclass
class Params:
    w: typing.Any
    b: typing.Any = None
    scale: float = dataclasses.field(default=2.0, init=False)


@dataclasses.dataclass(frozen=True)
class Frozen:
    left: typing.Any
    right: typing.Any


class Leafy:
    """A plain object: must be a leaf."""

    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, Leafy) and other.v == self.v

    def __hash__(self):
        return hash(self.v)


class MyList(list):
    pass


class MyDict(dict):
    pass


class Custom:
    def __init__(self, name, children):
        self.name = name
        self.children = list(children)

    def __eq__(self, other):
        return (
            isinstance(other, Custom)
            and other.name == self.name
            and other.children == self.children
        )


pt.register_pytree_node(
    Custom,
    lambda c: (c.children, c.name),
    lambda name, children: Custom(name, children),
)


class KeyedCustom:
    def __init__(self, a, b):
        self.a, self.b = a, b


pt.register_pytree_node(
    KeyedCustom,
    lambda k: ((k.a, k.b), None),
    lambda aux, ch: KeyedCustom(*ch),
    flatten_with_keys_fn=lambda k: (((pt.GetAttrKey("a"), k.a), (pt.GetAttrKey("b"), k.b)), None),
)


@pt.register_pytree_node_class
class Box:
    def __init__(self, value, tag):
        self.value, self.tag = value, tag

    def tree_flatten(self):
        return (self.value,), self.tag

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], aux)


# --------------------------------------------------------------------------------------------
# Flatten / unflatten of every node kind
# --------------------------------------------------------------------------------------------


def roundtrip(tree, is_leaf=None):
    leaves, treedef = pt.tree_flatten(tree, is_leaf)
    assert treedef.num_leaves == len(leaves)
    return pt.tree_unflatten(treedef, leaves)


def test_leaf_scalars():
    for x in [1, 2.5, "s", b"b", Leafy(3), object]:
        leaves, treedef = pt.tree_flatten(x)
        assert leaves == [x]
        assert repr(treedef) == "PyTreeDef(*)"
        assert pt.treedef_is_leaf(treedef)
        assert treedef.num_nodes == 1


def test_tuple_list():
    tree = (1, [2, (3,)], ())
    leaves, treedef = pt.tree_flatten(tree)
    assert leaves == [1, 2, 3]
    assert repr(treedef) == "PyTreeDef((*, [*, (*,)], ()))"
    out = treedef.unflatten([4, 5, 6])
    assert out == (4, [5, (6,)], ())
    assert type(out[1]) is list and type(out[1][1]) is tuple


def test_dict_sorted_keys():
    tree = {"b": 1, "a": 2, "c": {"z": 3, "y": 4}}
    leaves, treedef = pt.tree_flatten(tree)
    assert leaves == [2, 1, 4, 3]
    assert repr(treedef) == "PyTreeDef({'a': *, 'b': *, 'c': {'y': *, 'z': *}})"
    out = treedef.unflatten(leaves)
    assert out == tree
    assert list(out) == ["a", "b", "c"]  # rebuilt in sorted order


def test_dict_equal_regardless_of_insertion_order():
    assert pt.tree_structure({"a": 1, "b": 2}) == pt.tree_structure({"b": 1, "a": 2})


def test_dict_mixed_unsortable_keys_sort_by_type_then_value():
    tree = {"x": 1, 2: 2, "a": 3}
    leaves, treedef = pt.tree_flatten(tree)
    assert leaves == [2, 3, 1]  # int keys, then str keys ("a", "x")
    assert treedef.unflatten(leaves) == tree


def test_ordered_dict_insertion_order():
    tree = collections.OrderedDict([("b", 1), ("a", 2)])
    leaves, treedef = pt.tree_flatten(tree)
    assert leaves == [1, 2]
    assert repr(treedef) == "PyTreeDef(OrderedDict({'b': *, 'a': *}))"
    out = treedef.unflatten([3, 4])
    assert type(out) is collections.OrderedDict
    assert list(out.items()) == [("b", 3), ("a", 4)]
    other = pt.tree_structure(collections.OrderedDict([("a", 1), ("b", 2)]))
    assert other != treedef


def test_defaultdict():
    tree = collections.defaultdict(list, {"b": 1, "a": (2, 3)})
    leaves, treedef = pt.tree_flatten(tree)
    assert leaves == [2, 3, 1]
    assert repr(treedef) == "PyTreeDef(defaultdict(list, {'a': (*, *), 'b': *}))"
    out = treedef.unflatten([7, 8, 9])
    assert type(out) is collections.defaultdict
    assert out.default_factory is list
    assert dict(out) == {"a": (7, 8), "b": 9}
    assert pt.tree_structure(collections.defaultdict(set, {"b": 1, "a": (2, 3)})) != treedef
    assert pt.tree_structure(dict(tree)) != treedef


def test_none_is_node_without_children():
    leaves, treedef = pt.tree_flatten(None)
    assert leaves == []
    assert repr(treedef) == "PyTreeDef(None)"
    assert treedef.num_leaves == 0
    assert treedef.num_nodes == 1
    assert pt.treedef_is_leaf(treedef)  # one node without children, as in JAX
    assert pt.treedef_is_leaf(pt.tree_structure(()))
    assert not pt.treedef_is_leaf(pt.tree_structure((None,)))
    assert treedef.unflatten([]) is None

    leaves, treedef = pt.tree_flatten((1, None, {"a": None, "b": 2}))
    assert leaves == [1, 2]
    assert repr(treedef) == "PyTreeDef((*, None, {'a': None, 'b': *}))"
    assert treedef.unflatten(["p", "q"]) == ("p", None, {"a": None, "b": "q"})


def test_none_vs_leaf_structures_differ():
    assert pt.tree_structure(None) != pt.tree_structure(0)
    assert pt.tree_structure((None,)) != pt.tree_structure((0,))


def test_namedtuple_rebuild():
    tree = Point(1, Point(2, [3]))
    leaves, treedef = pt.tree_flatten(tree)
    assert leaves == [1, 2, 3]
    assert repr(treedef) == "PyTreeDef(Point(x=*, y=Point(x=*, y=[*])))"
    out = treedef.unflatten([4, 5, 6])
    assert type(out) is Point and type(out.y) is Point
    assert out == Point(4, Point(5, [6]))


def test_typing_namedtuple_and_tuple_differ():
    tree = TypedPoint(1, (2, 3))
    out = roundtrip(tree)
    assert type(out) is TypedPoint and out == tree
    assert pt.tree_structure(tree) != pt.tree_structure((1, (2, 3)))
    assert pt.tree_structure(Point(1, 2)) != pt.tree_structure((1, 2))


def test_dataclass_rebuild():
    tree = Params(w=[1, 2], b=3)
    tree.scale = 99.0  # init=False, no array: node data, set again on the rebuilt object
    leaves, treedef = pt.tree_flatten(tree)
    assert leaves == [1, 2, 3]
    assert repr(treedef) == "PyTreeDef(Params(w=[*, *], b=*, scale=99.0))"
    out = treedef.unflatten([10, 20, 30])
    assert type(out) is Params
    assert out.w == [10, 20] and out.b == 30 and out.scale == 99.0
    assert roundtrip(tree) == tree
    assert pt.tree_structure(tree) != pt.tree_structure(Params(w=[1, 2], b=3))  # (scale 2.0)


def test_dataclass_with_none_field():
    leaves, treedef = pt.tree_flatten(Params(w=1))
    assert leaves == [1]
    assert repr(treedef) == "PyTreeDef(Params(w=*, b=None, scale=2.0))"


def test_frozen_dataclass():
    tree = Frozen(left=(1, 2), right=Frozen(3, None))
    leaves, treedef = pt.tree_flatten(tree)
    assert leaves == [1, 2, 3]
    out = treedef.unflatten([4, 5, 6])
    assert out == Frozen((4, 5), Frozen(6, None))


def test_dataclass_class_object_is_leaf():
    leaves, treedef = pt.tree_flatten(Params)
    assert leaves == [Params]
    assert pt.treedef_is_leaf(treedef)


def test_list_and_dict_subclasses_are_leaves():
    ml = MyList([1, 2])
    md = MyDict(a=1)
    assert pt.tree_leaves([ml, md]) == [ml, md]


def test_custom_node():
    tree = Custom("n", [1, Custom("m", [2, 3])])
    leaves, treedef = pt.tree_flatten(tree)
    assert leaves == [1, 2, 3]
    assert repr(treedef) == (
        "PyTreeDef(CustomNode(Custom['n'], [*, CustomNode(Custom['m'], [*, *])]))"
    )
    assert treedef.unflatten(leaves) == tree
    assert pt.tree_structure(Custom("other", [1, Custom("m", [2, 3])])) != treedef


def test_custom_unflatten_receives_aux_and_children():
    seen = []

    class Rec:
        def __init__(self, a, b):
            self.a, self.b = a, b

    def unflatten(aux, children):
        seen.append((aux, tuple(children)))
        return Rec(*children)

    pt.register_pytree_node(Rec, lambda r: ([r.a, r.b], "aux"), unflatten)
    out = pt.tree_map(lambda x: x * 2, Rec(1, 2))
    assert (out.a, out.b) == (2, 4)
    assert seen == [("aux", (2, 4))]


def test_custom_flatten_may_return_generator():
    class Gen:
        def __init__(self, *xs):
            self.xs = xs

    pt.register_pytree_node(Gen, lambda g: ((x for x in g.xs), len(g.xs)), lambda n, ch: Gen(*ch))
    leaves, treedef = pt.tree_flatten(Gen(1, 2, 3))
    assert leaves == [1, 2, 3]
    assert treedef.unflatten([4, 5, 6]).xs == (4, 5, 6)
    assert pt.tree_map(lambda a, b: a + b, Gen(1, 2), Gen(10, 20)).xs == (11, 22)


def test_register_pytree_node_class():
    out = pt.tree_map(lambda x: x + 1, [Box(1, "t"), Box((2, 3), "u")])
    assert [b.tag for b in out] == ["t", "u"]
    assert out[0].value == 2 and out[1].value == (3, 4)


def test_register_twice_raises():
    class Once:
        pass

    pt.register_pytree_node(Once, lambda o: ((), None), lambda aux, ch: Once())
    with pytest.raises(ValueError, match="Duplicate"):
        pt.register_pytree_node(Once, lambda o: ((), None), lambda aux, ch: Once())
    with pytest.raises(ValueError, match="Duplicate"):
        pt.register_pytree_node(Custom, lambda c: ((), None), lambda aux, ch: None)


@pytest.mark.parametrize(
    "builtin", [tuple, list, dict, type(None), collections.OrderedDict, collections.defaultdict]
)
def test_register_builtin_raises(builtin):
    with pytest.raises(ValueError):
        pt.register_pytree_node(builtin, lambda x: ((), None), lambda aux, ch: None)


def test_register_non_type_raises():
    with pytest.raises(TypeError):
        pt.register_pytree_node("notatype", lambda x: ((), None), lambda aux, ch: None)


def test_register_refuses_functions_that_are_not_callable():
    """Checked at the registration: int registered with None functions broke every later
    flatten of an int (every transform's arguments) with an unrelated TypeError."""

    class Late:
        pass

    with pytest.raises(TypeError, match=r"register_pytree_node\(int\): flatten_fn must be"):
        pt.register_pytree_node(int, None, None)
    with pytest.raises(TypeError, match="unflatten_fn must be callable"):
        pt.register_pytree_node(Late, lambda x: ((), None), 3)
    with pytest.raises(TypeError, match="flatten_with_keys_fn must be callable"):
        pt.register_pytree_node(Late, lambda x: ((), None), lambda a, c: Late(), "keys")
    assert pt.tree_leaves((1, 2.0)) == [1, 2.0]  # nothing was registered
    pt.register_pytree_node(Late, lambda x: ((), None), lambda a, c: Late())  # still free


def test_registered_type_previously_seen_as_leaf():
    class Late:
        def __init__(self, v):
            self.v = v

    assert len(pt.tree_leaves([Late(1)])) == 1  # cached as a leaf type
    pt.register_pytree_node(Late, lambda x: ((x.v,), None), lambda aux, ch: Late(*ch))
    assert pt.tree_leaves([Late((1, 2))]) == [1, 2]


def test_explicit_registration_overrides_dataclass():
    @dataclasses.dataclass
    class DC:
        a: int
        b: int

    assert pt.tree_leaves(DC(1, 2)) == [1, 2]
    pt.register_pytree_node(DC, lambda d: ((d.b,), d.a), lambda a, ch: DC(a, ch[0]))
    assert pt.tree_leaves(DC(1, 2)) == [2]


# --------------------------------------------------------------------------------------------
# is_leaf
# --------------------------------------------------------------------------------------------


def test_is_leaf_stops_descent():
    tree = {"a": (1, 2), "b": [3, (4, 5)]}
    leaves, treedef = pt.tree_flatten(tree, is_leaf=lambda x: type(x) is tuple)
    assert leaves == [(1, 2), 3, (4, 5)]
    assert repr(treedef) == "PyTreeDef({'a': *, 'b': [*, *]})"
    assert treedef.unflatten(leaves) == tree


def test_is_leaf_on_none():
    leaves, treedef = pt.tree_flatten((1, None), is_leaf=lambda x: x is None)
    assert leaves == [1, None]
    assert repr(treedef) == "PyTreeDef((*, *))"


def test_is_leaf_on_root():
    leaves, treedef = pt.tree_flatten([1, 2], is_leaf=lambda x: isinstance(x, list))
    assert leaves == [[1, 2]]
    assert pt.treedef_is_leaf(treedef)


def test_is_leaf_in_tree_map_and_leaves():
    tree = [Point(1, 2), Point(3, 4)]

    def is_point(x):
        return isinstance(x, Point)

    assert pt.tree_leaves(tree, is_leaf=is_point) == tree
    out = pt.tree_map(lambda p: p.x + p.y, tree, is_leaf=is_point)
    assert out == [3, 7]


# --------------------------------------------------------------------------------------------
# tree_map
# --------------------------------------------------------------------------------------------


def test_tree_map_single():
    tree = {"a": [1, 2], "b": (3, None), "c": Point(4, 5)}
    out = pt.tree_map(lambda x: x * 10, tree)
    assert out == {"a": [10, 20], "b": (30, None), "c": Point(40, 50)}
    assert type(out["c"]) is Point


def test_tree_map_none_not_visited():
    calls = []
    out = pt.tree_map(lambda x: calls.append(x) or x, {"a": None, "b": 1})
    assert out == {"a": None, "b": 1}
    assert calls == [1]


def test_tree_map_multiple_trees():
    a = {"x": [1, 2], "y": 3}
    b = {"y": 30, "x": [10, 20]}
    c = {"x": [100, 200], "y": 300}
    assert pt.tree_map(lambda p, q, r: p + q + r, a, b, c) == {"x": [111, 222], "y": 333}


def test_tree_map_rest_may_have_subtrees_at_leaves():
    out = pt.tree_map(lambda x, y: (x, y), {"a": 1, "b": 2}, {"a": [1, 2], "b": {"c": None}})
    assert out == {"a": (1, [1, 2]), "b": (2, {"c": None})}


def test_tree_map_mismatch_raises_with_both_structures():
    with pytest.raises(ValueError) as info:
        pt.tree_map(lambda x, y: x, (1, [2, 3]), (1, [2, 3, 4]))
    msg = str(info.value)
    assert "PyTreeDef((*, [*, *]))" in msg
    assert "PyTreeDef((*, [*, *, *]))" in msg
    assert "[1]" in msg  # the failing path


def test_tree_map_mismatch_kinds():
    def f(*xs):
        return xs[0]

    with pytest.raises(ValueError, match="tuple"):
        pt.tree_map(f, (1, 2), [1, 2])
    with pytest.raises(ValueError, match="keys"):
        pt.tree_map(f, {"a": 1}, {"b": 1})
    with pytest.raises(ValueError):
        pt.tree_map(f, {"a": 1}, {"a": 1, "b": 2})
    with pytest.raises(ValueError):
        pt.tree_map(f, (None,), (1,))
    with pytest.raises(ValueError):
        pt.tree_map(f, Point(1, 2), (1, 2))
    with pytest.raises(ValueError, match="node data"):
        pt.tree_map(f, Custom("a", [1]), Custom("b", [1]))
    with pytest.raises(ValueError):
        pt.tree_map(f, Custom("a", [1]), Custom("a", [1, 2]))
    with pytest.raises(ValueError, match=r"tree 2"):
        pt.tree_map(lambda x, y, z: x, (1,), (1,), [1])


def test_tree_map_mismatch_path_through_nodes():
    with pytest.raises(ValueError) as info:
        pt.tree_map(lambda x, y: x, {"a": [Params(w=(1, 2))]}, {"a": [Params(w=(1,))]})
    assert "['a'][0].w" in str(info.value)


def test_flatten_up_to():
    treedef = pt.tree_structure((0, {"k": 0}))
    assert treedef.flatten_up_to(([1], {"k": (2, 3)})) == [[1], (2, 3)]
    with pytest.raises(ValueError, match="mismatch"):
        treedef.flatten_up_to((0, {"j": 0}))


def test_tree_map_with_path():
    out = pt.tree_map_with_path(lambda p, x, y: (pt.keystr(p), x + y), {"a": [1]}, {"a": [2]})
    assert out == {"a": [("['a'][0]", 3)]}


# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


def test_flatten_with_path_kinds():
    tree = {
        "a": [1, Params(w=2, b=None)],
        "p": Point(3, 4),
        "c": Custom("n", [5]),
        "k": KeyedCustom(6, 7),
        "o": collections.OrderedDict([("z", 8)]),
    }
    pairs, treedef = pt.tree_flatten_with_path(tree)
    assert treedef == pt.tree_structure(tree)
    assert [x for _, x in pairs] == pt.tree_leaves(tree)
    assert [pt.keystr(p) for p, _ in pairs] == [
        "['a'][0]",
        "['a'][1].w",
        "['c'][<flat index 0>]",
        "['k'].a",
        "['k'].b",
        "['o']['z']",
        "['p'].x",
        "['p'].y",
    ]
    assert pairs[1][0] == (pt.DictKey("a"), pt.SequenceKey(1), pt.GetAttrKey("w"))


def test_flatten_with_path_is_leaf():
    pairs, treedef = pt.tree_flatten_with_path({"a": (1, 2)}, is_leaf=lambda x: type(x) is tuple)
    assert pairs == [((pt.DictKey("a"),), (1, 2))]
    assert treedef.num_leaves == 1


def test_leaves_with_path_root_leaf():
    assert pt.tree_leaves_with_path(5) == [((), 5)]
    assert pt.keystr(()) == ""


def test_keystr_simple():
    path = (pt.GetAttrKey("layers"), pt.SequenceKey(0), pt.DictKey("weight"))
    assert pt.keystr(path) == ".layers[0]['weight']"
    assert pt.keystr(path, simple=True, separator=".") == "layers.0.weight"
    assert pt.keystr(path, simple=True, separator="/") == "layers/0/weight"


def test_key_entries_eq_hash_repr():
    assert pt.DictKey("a") == pt.DictKey("a")
    assert pt.DictKey(0) != pt.SequenceKey(0)
    assert len({pt.SequenceKey(1), pt.SequenceKey(1), pt.GetAttrKey("x")}) == 2
    assert repr(pt.GetAttrKey("x")) == "GetAttrKey(name='x')"
    assert str(pt.FlattenedIndexKey(2)) == "[<flat index 2>]"


# --------------------------------------------------------------------------------------------
# broadcast_prefix
# --------------------------------------------------------------------------------------------


def test_broadcast_prefix_leaf_covers_everything():
    assert pt.broadcast_prefix(0, {"a": [1, 2], "b": 3}) == [0, 0, 0]
    assert pt.broadcast_prefix(0, 5) == [0]


def test_broadcast_prefix_none_covers_subtree():
    full = ([1, 2], {"a": 3, "b": (4, 5)}, 6)
    assert pt.broadcast_prefix((0, None, 1), full) == [0, 0, None, None, None, 1]
    assert pt.broadcast_prefix(None, full) == [None] * 6
    assert pt.broadcast_prefix((0, {"a": None, "b": 1}, None), full) == [0, 0, None, 1, 1, None]


def test_broadcast_prefix_full_none_has_no_leaves():
    assert pt.broadcast_prefix((0, 1), (None, [2])) == [1]


def test_broadcast_prefix_full_structure():
    full = {"x": [1, (2, 3)], "y": Point(4, 5)}
    assert pt.broadcast_prefix(full, full) == pt.tree_leaves(full)


def test_broadcast_prefix_nodes():
    full = [Params(w=(1, 2), b=3), Custom("c", [4, 5])]
    prefix = [Params(w=0, b=None), Custom("c", [1, 2])]
    assert pt.broadcast_prefix(prefix, full) == [0, 0, None, 1, 2]


def test_broadcast_prefix_is_leaf():
    full = {"a": (1, 2), "b": (3, 4)}

    def is_tuple(x):
        return type(x) is tuple

    assert pt.broadcast_prefix({"a": 0, "b": 1}, full, is_leaf=is_tuple) == [0, 1]


def test_broadcast_prefix_list_vs_tuple_error():
    with pytest.raises(ValueError) as info:
        pt.broadcast_prefix([0, 1], (1, 2), spec_name="vmap in_axes specification")
    msg = str(info.value)
    assert msg.startswith(
        "vmap in_axes specification must be a tree prefix of the corresponding value, got [0, 1]"
        " for value tree PyTreeDef((*, *))"
    )
    assert "list" in msg and "tuple" in msg
    assert "the root" in msg


def test_broadcast_prefix_error_names_path():
    full = (1, {"a": [2, 3], "b": 4})
    with pytest.raises(ValueError) as info:
        pt.broadcast_prefix((0, {"a": [0, 0, 0], "b": 0}), full)
    msg = str(info.value)
    assert "must be a tree prefix of the corresponding value" in msg
    assert "[1]['a']" in msg
    assert "PyTreeDef((*, {'a': [*, *], 'b': *}))" in msg


def test_broadcast_prefix_errors():
    with pytest.raises(ValueError, match="keys"):
        pt.broadcast_prefix({"a": 0}, {"a": 1, "b": 2})
    with pytest.raises(ValueError, match="leaf"):
        pt.broadcast_prefix((0, (1, 2)), (1, 2))
    with pytest.raises(ValueError):
        pt.broadcast_prefix((0, 1, 2), (1, 2))
    with pytest.raises(ValueError):
        pt.broadcast_prefix((0,), None)
    with pytest.raises(ValueError, match="node data"):
        pt.broadcast_prefix(Custom("a", [0]), Custom("b", [1]))


def test_broadcast_prefix_dict_orders():
    full = collections.OrderedDict([("b", 1), ("a", 2)])
    prefix = collections.OrderedDict([("a", 0), ("b", None)])
    assert pt.broadcast_prefix(prefix, full) == [None, 0]


# --------------------------------------------------------------------------------------------
# PyTreeDef behaviour
# --------------------------------------------------------------------------------------------


def test_treedef_eq_hash():
    t1 = pt.tree_structure((1, {"a": [2, 3]}))
    t2 = pt.tree_structure(("x", {"a": ["y", "z"]}))
    t3 = pt.tree_structure((1, {"a": (2, 3)}))
    assert t1 == t2 and hash(t1) == hash(t2)
    assert t1 != t3
    assert len({t1, t2, t3}) == 2
    assert t1 != "PyTreeDef"
    assert pt.tree_structure(Params(1)) == pt.tree_structure(Params(2))
    assert pt.tree_structure([1, 2]) != pt.tree_structure([1])


def test_treedef_immutable_and_not_constructible():
    treedef = pt.tree_structure((1, 2))
    with pytest.raises(AttributeError):
        treedef._node = None
    with pytest.raises(AttributeError):
        treedef.num_leaves = 3
    with pytest.raises(TypeError):
        pt.PyTreeDef()


def test_treedef_counts():
    treedef = pt.tree_structure((1, [2, None], {"a": 3}))
    assert treedef.num_leaves == 3
    # tuple, 1, list, 2, None, dict, 3
    assert treedef.num_nodes == 7


def test_treedef_children_and_node_data():
    treedef = pt.tree_structure((1, [2, 3], None))
    children = pt.treedef_children(treedef)
    assert children == [
        pt.tree_structure(0),
        pt.tree_structure([0, 0]),
        pt.tree_structure(None),
    ]
    assert [c.num_leaves for c in children] == [1, 2, 0]
    assert treedef.node_data() == (tuple, None)
    assert pt.tree_structure(0).node_data() is None
    assert pt.tree_structure(0).children() == []


def test_unflatten_wrong_leaf_count():
    treedef = pt.tree_structure((1, 2))
    with pytest.raises(ValueError, match="expected 2, got 3"):
        treedef.unflatten([1, 2, 3])
    with pytest.raises(ValueError, match="expected 2, got 1"):
        pt.tree_unflatten(treedef, [1])


def test_unflatten_accepts_iterables():
    treedef = pt.tree_structure([0, (0, 0)])
    assert treedef.unflatten(iter([1, 2, 3])) == [1, (2, 3)]
    assert treedef.unflatten(x for x in "abc") == ["a", ("b", "c")]


def test_treedef_copy_and_deepcopy():
    treedef = pt.tree_structure({"a": (1, Point(2, 3)), "b": None})
    assert copy.copy(treedef) == treedef
    clone = copy.deepcopy(treedef)
    assert clone == treedef and hash(clone) == hash(treedef)
    assert clone.unflatten([1, 2, 3]) == {"a": (1, Point(2, 3)), "b": None}


def test_flatten_returns_fresh_list():
    tree = [1, 2]
    leaves = pt.tree_leaves(tree)
    leaves.append(3)
    assert tree == [1, 2]


# --------------------------------------------------------------------------------------------
# Small reductions
# --------------------------------------------------------------------------------------------


def test_tree_all():
    assert pt.tree_all((True, [1, {"a": "x"}]))
    assert not pt.tree_all((True, [0]))
    assert pt.tree_all(None)
    assert pt.tree_all([[], ()])


def test_tree_reduce():
    assert pt.tree_reduce(lambda a, b: a + b, (1, [2, 3], {"z": 4})) == 10
    assert pt.tree_reduce(lambda a, b: a + b, [], initializer=5) == 5
    assert pt.tree_reduce(max, {"a": 4, "b": 9}, initializer=0) == 9
    with pytest.raises(TypeError):
        pt.tree_reduce(lambda a, b: a + b, None)
    assert pt.tree_reduce(lambda a, b: a + [b], [(1, 2)], [], is_leaf=lambda x: type(x) is tuple)


def test_tree_reduce_associative_pairs_the_leaves():
    calls = []

    def join(a, b):
        calls.append((a, b))
        return a + b

    assert pt.tree_reduce_associative(join, ["a", ("b", "c"), {"k": "d"}, ["e"]]) == "abcde"
    assert calls[:2] == [("a", "b"), ("c", "d")]  # pairs first: a balanced tree
    assert pt.tree_reduce_associative(join, [], identity="") == ""
    with pytest.raises(TypeError, match="no leaves and no identity"):
        pt.tree_reduce_associative(join, None)
    assert pt.tree_reduce_associative(max, [3, 9, 4]) == 9


# --------------------------------------------------------------------------------------------
# Property tests
# --------------------------------------------------------------------------------------------

_leaf_values = st.one_of(
    st.integers(-5, 5),
    st.text(max_size=2),
    st.floats(allow_nan=False, allow_infinity=False),
    st.builds(Leafy, st.integers(0, 3)),
)
_keys = st.text(alphabet="abcdefg", min_size=1, max_size=3)


def _extend(children):
    return st.one_of(
        st.lists(children, max_size=4).map(tuple),
        st.lists(children, max_size=4),
        st.dictionaries(_keys, children, max_size=4),
        st.lists(st.tuples(_keys, children), max_size=4).map(collections.OrderedDict),
        st.builds(Point, children, children),
        st.builds(Params, children, children),
        st.builds(Frozen, children, children),
        st.builds(Custom, _keys, st.lists(children, max_size=3)),
    )


pytrees = st.recursive(st.one_of(_leaf_values, st.none()), _extend, max_leaves=25)


def _same_tree(a, b):
    """Structural equality that also checks exact node types (``==`` ignores tuple vs Point)."""
    assert type(a) is type(b)
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_tree(x, y)
    elif isinstance(a, dict):
        assert list(a.keys()) == list(b.keys()) or set(a) == set(b)
        for k in a:
            _same_tree(a[k], b[k])
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same_tree(getattr(a, f.name), getattr(b, f.name))
    elif isinstance(a, Custom):
        assert a.name == b.name
        _same_tree(a.children, b.children)
    else:
        assert a == b


@settings(max_examples=200, deadline=None)
@given(pytrees)
def test_property_roundtrip(tree):
    leaves, treedef = pt.tree_flatten(tree)
    assert treedef.num_leaves == len(leaves)
    _same_tree(treedef.unflatten(leaves), tree)
    assert pt.tree_structure(treedef.unflatten(leaves)) == treedef
    pairs, treedef2 = pt.tree_flatten_with_path(tree)
    assert treedef2 == treedef and hash(treedef2) == hash(treedef)
    assert [x for _, x in pairs] == leaves
    assert len({pt.keystr(p) for p, _ in pairs}) == len(pairs)


@settings(max_examples=200, deadline=None)
@given(pytrees)
def test_property_map_and_prefix(tree):
    leaves, treedef = pt.tree_flatten(tree)
    mapped = pt.tree_map(Leafy, tree)
    assert pt.tree_structure(mapped) == treedef
    assert pt.tree_leaves(mapped) == [Leafy(x) for x in leaves]
    assert pt.tree_leaves(pt.tree_map(lambda x, y: y, tree, tree)) == leaves
    # A tree is a prefix of itself; a single leaf (or None) is a prefix of anything.
    assert pt.broadcast_prefix(tree, tree) == leaves
    assert pt.broadcast_prefix(7, tree) == [7] * len(leaves)
    assert pt.broadcast_prefix(None, tree) == [None] * len(leaves)
    # Replacing every leaf with a subtree keeps the original tree a valid prefix.
    deeper = pt.tree_map(lambda x: [x, (x,)], tree)
    assert pt.tree_map(lambda x, y: y, tree, deeper) == deeper
    assert pt.broadcast_prefix(tree, deeper) == [x for x in leaves for _ in range(2)]


# --------------------------------------------------------------------------------------------
# The rest of jax.tree_util (each expected value is what JAX 0.10 returns)
# --------------------------------------------------------------------------------------------


def test_tree_transpose_with_and_without_the_inner_structure():
    outer, inner = pt.tree_structure([0, 0]), pt.tree_structure((0, 0))
    assert pt.tree_transpose(outer, inner, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])
    assert pt.tree_transpose(outer, None, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])
    d = pt.tree_transpose(pt.tree_structure({"a": 0, "b": 0}), None, {"a": [1, 2], "b": [3, 4]})
    assert d == [{"a": 1, "b": 3}, {"a": 2, "b": 4}]
    with pytest.raises(TypeError, match="an inner tree has structure"):
        pt.tree_transpose(outer, inner, [(1, 2), (3,)])
    with pytest.raises(TypeError, match=r"structure PyTreeDef\(\(\(\*, \*\), \*\)\)"):
        pt.tree_transpose(outer, inner, [((1, 9), 2), (3, 4)])  # (deeper: JAX's mismatch)


def test_tree_broadcast_repeats_prefix_leaves_and_none_is_a_node():
    assert pt.tree_broadcast((0, 1), ([1, 2], {"a": 3})) == ([0, 0], {"a": 1})
    assert pt.tree_broadcast(7, {"a": (1, 2)}) == {"a": (7, 7)}
    with pytest.raises(ValueError):
        pt.tree_broadcast((0, None), ([1, 2], {"a": 3}))


def test_all_leaves_flatten_one_level_and_treedef_tuple():
    assert pt.all_leaves([1, "a", 2.0])
    assert not pt.all_leaves([1, (2,)]) and not pt.all_leaves([None])
    assert pt.all_leaves([(1,)], is_leaf=lambda x: isinstance(x, tuple))
    assert pt.flatten_one_level({"b": 1, "a": (2, 3)}) == (((2, 3), 1), ("a", "b"))
    with pytest.raises(ValueError, match="can't tree-flatten"):
        pt.flatten_one_level(1)
    t = pt.treedef_tuple([pt.tree_structure((1, 2)), pt.tree_structure(3)])
    assert t == pt.tree_structure(((1, 2), 3)) and t.num_leaves == 3


def test_register_dataclass_splits_data_and_static_fields():
    @pt.register_dataclass
    @dataclasses.dataclass
    class Layer:
        w: typing.Any
        width: int = dataclasses.field(default=4, metadata={"static": True})

    leaves, treedef = pt.tree_flatten(Layer([1.0, 2.0], 8))
    assert leaves == [1.0, 2.0]
    assert treedef.unflatten([3.0, 4.0]) == Layer([3.0, 4.0], 8)
    assert pt.tree_structure(Layer(0, 8)) != pt.tree_structure(Layer(0, 9))

    @dataclasses.dataclass
    class Pair:
        a: typing.Any
        b: typing.Any

    pt.register_dataclass(Pair, data_fields=["b"], meta_fields=["a"])
    assert pt.tree_leaves(Pair("static", 5)) == [5]
    with pytest.raises(ValueError, match="init fields"):

        @dataclasses.dataclass
        class Three:
            a: int
            b: int
            c: int

        pt.register_dataclass(Three, data_fields=["a"], meta_fields=["b"])
    with pytest.raises(TypeError, match="both data_fields and meta_fields"):
        pt.register_dataclass(Pair, data_fields=["a"])


def test_register_static_partial_and_keyed_registration():
    @pt.register_static
    class Tag:
        pass

    tag = Tag()
    leaves, treedef = pt.tree_flatten([tag, 1])
    assert leaves == [1] and treedef.unflatten([2])[0] is tag

    p = pt.Partial(lambda a, b, c=0: a + b + c, 1.0, c=2.0)
    leaves, treedef = pt.tree_flatten(p)
    assert leaves == [1.0, 2.0]
    q = treedef.unflatten([10.0, 20.0])
    assert isinstance(q, pt.Partial) and q(3.0) == 33.0

    class Two:
        def __init__(self, a, b):
            self.a, self.b = a, b

    pt.register_pytree_with_keys(
        Two,
        lambda t: (((pt.GetAttrKey("a"), t.a), (pt.GetAttrKey("b"), t.b)), None),
        lambda _, ch: Two(*ch),
    )
    paths = [pt.keystr(path) for path, _ in pt.tree_leaves_with_path(Two(1, 2))]
    assert paths == [".a", ".b"] and pt.tree_leaves(Two(1, 2)) == [1, 2]


def test_nb_tree_names_the_same_functions_as_jax_tree():
    import nabla as nb

    assert nb.tree.map(lambda a: a + 1, {"a": 1}) == {"a": 2}
    assert nb.tree.leaves([1, (2,)]) == [1, 2]
    leaves, treedef = nb.tree.flatten({"b": 1, "a": 2})
    assert nb.tree.unflatten(treedef, leaves) == {"a": 2, "b": 1}
    assert nb.tree.reduce(lambda a, b: a + b, [1, 2, 3]) == 6
    assert nb.tree.structure((1, 2)) == pt.tree_structure((0, 0))
    assert nb.tree.all([1, True]) and nb.tree.broadcast(0, [1, 2]) == [0, 0]


def test_dataclass_fields_not_in_init_are_kept_and_own_init_dataclasses_are_leaves():
    """A field with init=False was rebuilt to its default (compile gave 2.0 for 10.0, grad
    and vmap likewise); a dataclass with its own __init__ failed to rebuild at all."""

    @dataclasses.dataclass
    class Scaled:
        w: object
        scale: float = dataclasses.field(init=False, default=1.0)

    np = pytest.importorskip("numpy")
    nb = pytest.importorskip("nabla")  # (the rest of this file runs on the module alone)

    s = Scaled(nb.constant(np.float32(2.0)))
    s.scale = 5.0
    assert nb.compile(lambda s: s.w * s.scale)(s).item() == 10.0
    assert nb.grad(lambda s: s.w * s.scale)(s).w.item() == 5.0
    assert pt.tree_map(lambda v: v, s).scale == 5.0  # node data: kept as it is
    s.scale = nb.constant(np.float32(3.0))  # an array in it: a child, transformed too
    assert nb.grad(lambda s: s.w * s.scale)(s).scale.item() == 2.0
    assert nb.compile(lambda s: s.w * s.scale)(s).item() == 6.0

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        a: object
        b: object = dataclasses.field(init=False, default=0)

    f = Frozen(1)
    object.__setattr__(f, "b", np.array(7))
    doubled = pt.tree_map(lambda v: v * 2, f)
    assert doubled.a == 2 and doubled.b == 14

    @dataclasses.dataclass(init=False)
    class Own:
        w: object

        def __init__(self, value):
            self.w = value

    tree = {"cfg": Own(1), "p": 2}
    assert pt.tree_leaves(tree)[0] is tree["cfg"]  # a leaf, as JAX's
    assert pt.tree_map(lambda v: v, tree)["cfg"] is tree["cfg"]


def test_dicts_with_keys_of_several_types_flatten_alike_whatever_their_order():
    """Insertion order had paired the leaves of two equal dicts wrongly."""
    a, b = {1: "one", "x": "ex"}, {"x": "EX", 1: "ONE"}
    assert pt.tree_leaves(a) == ["one", "ex"] and pt.tree_leaves(b) == ["ONE", "EX"]
    assert pt.tree_structure(a) == pt.tree_structure(b)
    assert pt.tree_unflatten(pt.tree_structure(a), pt.tree_leaves(b)) == b


def test_jax_s_keyword_names_for_registration_and_keystr():
    class Box:
        def __init__(self, v):
            self.v = v

    pt.register_pytree_node(
        Box, flatten_func=lambda b: ((b.v,), None), unflatten_func=lambda aux, ch: Box(*ch)
    )
    assert pt.tree_leaves(Box(3)) == [3]
    assert pt.keystr(keys=(pt.DictKey("a"), pt.SequenceKey(0))) == "['a'][0]"
    with pytest.raises(TypeError, match="flatten_fn given twice"):
        pt.register_pytree_node(dict, lambda d: d, lambda a, c: c, flatten_func=lambda d: d)
