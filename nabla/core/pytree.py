"""Pytrees: nested containers of leaves, with JAX semantics.

A *pytree* is a value built from registered container nodes whose ends are *leaves*. Transforms
(``grad``, ``vmap``, ``jit``...) flatten their inputs and outputs to a list of leaves plus a
:class:`PyTreeDef` describing the structure, work on the leaves and rebuild the containers.

Node kinds (checked by the exact ``type`` of a value, never by ``isinstance``):

* ``tuple`` and ``list``: children in order.
* ``dict``: children in sorted-key order (keys of several types that cannot be compared, e.g.
  ``int`` and ``str``, sorted by type name, then within each type; insertion order only when
  even that fails); rebuilt with the keys in that order.
* ``collections.OrderedDict``: children in insertion order.
* ``collections.defaultdict``: like ``dict``; the ``default_factory`` is kept as node data.
* namedtuples (any ``tuple`` subclass with ``_fields``): rebuilt as ``cls(*children)``.
* ``None``: a node with **no children**, so it holds zero leaves (as in JAX).
* dataclass instances whose class is not registered explicitly: children are the values of the
  fields with ``init=True`` in declaration order, then those of the ``init=False`` fields that
  hold arrays (the other ``init=False`` values are node data); rebuilt as ``cls(**kwargs)`` of
  the first, the ``init=False`` values then set on the object as they were. A dataclass made
  with ``init=False`` (its own ``__init__``) is a leaf, as every dataclass is in JAX.
* types registered with :func:`register_pytree_node`.

Everything else, including unregistered subclasses of ``list`` and ``dict``, is a leaf.

Invariants:

* ``tree_unflatten(tree_structure(t), tree_leaves(t))`` equals ``t`` (same node types, keys,
  field values) for every pytree ``t`` whose leaves compare equal to themselves.
* ``len(tree_leaves(t)) == tree_structure(t).num_leaves``, and leaves always come out in the
  same, deterministic order for equal structures.
* :class:`PyTreeDef` is immutable and hashable; two treedefs are equal iff they describe the
  same node types, node data and shapes. Custom node data that cannot be hashed (a list)
  hashes by its type alone and still compares by value; ``frozen`` copies such a treedef
  so that a key kept in a cache cannot change when the user's list does.
* The ``is_leaf`` predicate is consulted on every subtree (``None`` included) before the node
  registry; when it returns true the subtree is a single leaf.
* The registry is keyed by exact type and a type may be registered at most once.

Example:
    >>> leaves, treedef = tree_flatten((1, {"b": [2, 3], "a": None}))
    >>> leaves
    [1, 2, 3]
    >>> treedef
    PyTreeDef((*, {'a': None, 'b': [*, *]}))
    >>> tree_unflatten(treedef, [10, 20, 30])
    (10, {'a': None, 'b': [20, 30]})
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "Partial",
    "PyTreeDef",
    "SequenceKey",
    "all_leaves",
    "broadcast_prefix",
    "flatten_one_level",
    "keystr",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_pytree_with_keys_class",
    "register_static",
    "tree_all",
    "tree_broadcast",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_leaves",
    "tree_leaves_with_path",
    "tree_map",
    "tree_map_with_path",
    "tree_reduce",
    "tree_reduce_associative",
    "tree_structure",
    "tree_unflatten",
    "tree_transpose",
    "treedef_children",
    "treedef_is_leaf",
    "treedef_tuple",
]

IsLeafFn = Callable[[Any], bool]

_NoneType = type(None)
_MISSING: Any = object()

# Internal structure encoding (kept as plain tuples so equality and hashing are C-speed):
#   leaf      -> _LEAF (``None``; a real ``None`` value is the node ``_NONE_NODE`` instead)
#   container -> (nodetype, aux_data, children) with ``children`` a tuple of encoded nodes.
_LEAF = None
_NONE_NODE = (_NoneType, None, ())


# --------------------------------------------------------------------------------------------
# Path key entries
# --------------------------------------------------------------------------------------------


class _KeyEntry:
    """Base class of the path entries produced by :func:`tree_flatten_with_path`.

    An entry holds one value, in the attribute its subclass names in ``_field`` (JAX's
    names: ``idx``, ``key``, ``name``); entries are equal when of the same kind and value."""

    __slots__ = ()
    _field: str

    def _value(self) -> Any:
        return getattr(self, self._field)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._field}={self._value()!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._value() == self._value()

    def __hash__(self) -> int:
        return hash((type(self), self._value()))

    def _simple(self) -> str:
        return str(self._value())


class SequenceKey(_KeyEntry):
    """Path entry for a child of a tuple or list, printed as ``[idx]``."""

    __slots__ = ("idx",)
    _field = "idx"

    def __init__(self, idx: int):
        self.idx = idx

    def __str__(self) -> str:
        return f"[{self.idx!r}]"


class DictKey(_KeyEntry):
    """Path entry for a value of a dict-like node, printed as ``[key]`` (``['a']``)."""

    __slots__ = ("key",)
    _field = "key"

    def __init__(self, key: Hashable):
        self.key = key

    def __str__(self) -> str:
        return f"[{self.key!r}]"


class GetAttrKey(_KeyEntry):
    """Path entry for an attribute (namedtuple or dataclass field), printed as ``.name``."""

    __slots__ = ("name",)
    _field = "name"

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f".{self.name}"

    def _simple(self) -> str:
        return self.name


class FlattenedIndexKey(_KeyEntry):
    """Path entry for the i-th child of a custom node registered without key information."""

    __slots__ = ("key",)
    _field = "key"

    def __init__(self, key: int):
        self.key = key

    def __str__(self) -> str:
        return f"[<flat index {self.key}>]"


# --------------------------------------------------------------------------------------------
# Node registry
# --------------------------------------------------------------------------------------------


class _NodeHandler:
    """How to take apart and rebuild one node type.

    ``flatten(x) -> (children, aux)``, ``unflatten(aux, children_tuple) -> x``,
    ``flatten_with_keys(x) -> (list of (key, child), aux)`` and
    ``repr_node(aux, child_reprs) -> str``.
    """

    __slots__ = ("flatten", "flatten_with_keys", "nodetype", "repr_node", "unflatten")

    def __init__(self, nodetype, flatten, unflatten, flatten_with_keys, repr_node):
        self.nodetype = nodetype
        self.flatten = flatten
        self.unflatten = unflatten
        self.flatten_with_keys = flatten_with_keys
        self.repr_node = repr_node


def _dict_keys(d: dict) -> tuple:
    """Sorted keys of ``d``. Keys that are not mutually orderable (``1`` and ``"x"``) are
    sorted by their type's name first, then within each type, so that equal dicts flatten
    alike whatever their insertion order (insertion order had paired the leaves of
    ``{1: a, "x": b}`` and ``{"x": c, 1: d}`` wrongly; JAX refuses such keys); insertion
    order only when even that does not order them."""
    try:
        return tuple(sorted(d))
    except TypeError:
        pass
    try:
        return tuple(sorted(d, key=lambda k: (type(k).__qualname__, k)))
    except TypeError:
        return tuple(d)


def _seq_with_keys(x):
    return [(SequenceKey(i), c) for i, c in enumerate(x)], None


def _seq_repr(open_: str, close: str, single_comma: bool):
    def repr_node(aux, child_reprs):
        trailer = "," if single_comma and len(child_reprs) == 1 else ""
        return open_ + ", ".join(child_reprs) + trailer + close

    return repr_node


def _mapping_repr(keys, child_reprs) -> str:
    return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(keys, child_reprs)) + "}"


def _dict_flatten(d):
    keys = _dict_keys(d)
    return [d[k] for k in keys], keys


def _dict_flatten_with_keys(d):
    keys = _dict_keys(d)
    return [(DictKey(k), d[k]) for k in keys], keys


def _odict_flatten(d):
    keys = tuple(d)
    return [d[k] for k in keys], keys


def _odict_flatten_with_keys(d):
    keys = tuple(d)
    return [(DictKey(k), d[k]) for k in keys], keys


def _ddict_flatten(d):
    keys = _dict_keys(d)
    return [d[k] for k in keys], (d.default_factory, keys)


def _ddict_flatten_with_keys(d):
    keys = _dict_keys(d)
    return [(DictKey(k), d[k]) for k in keys], (d.default_factory, keys)


def _ddict_repr(aux, child_reprs) -> str:
    factory, keys = aux
    name = getattr(factory, "__name__", repr(factory))
    return f"defaultdict({name}, {_mapping_repr(keys, child_reprs)})"


_BUILTIN_HANDLERS: dict[type, _NodeHandler] = {
    tuple: _NodeHandler(
        tuple,
        lambda x: (x, None),
        lambda aux, children: tuple(children),
        _seq_with_keys,
        _seq_repr("(", ")", single_comma=True),
    ),
    list: _NodeHandler(
        list,
        lambda x: (x, None),
        lambda aux, children: list(children),
        _seq_with_keys,
        _seq_repr("[", "]", single_comma=False),
    ),
    dict: _NodeHandler(
        dict,
        _dict_flatten,
        lambda keys, children: dict(zip(keys, children)),
        _dict_flatten_with_keys,
        _mapping_repr,
    ),
    collections.OrderedDict: _NodeHandler(
        collections.OrderedDict,
        _odict_flatten,
        lambda keys, children: collections.OrderedDict(zip(keys, children)),
        _odict_flatten_with_keys,
        lambda keys, child_reprs: f"OrderedDict({_mapping_repr(keys, child_reprs)})",
    ),
    collections.defaultdict: _NodeHandler(
        collections.defaultdict,
        _ddict_flatten,
        lambda aux, children: collections.defaultdict(aux[0], zip(aux[1], children)),
        _ddict_flatten_with_keys,
        _ddict_repr,
    ),
    _NoneType: _NodeHandler(
        _NoneType,
        lambda x: ((), None),
        lambda aux, children: None,
        lambda x: ([], None),
        lambda aux, child_reprs: "None",
    ),
}

# Types registered through register_pytree_node (explicit registrations only).
_registry: dict[type, _NodeHandler] = {}

# Dispatch cache: exact type -> handler, or None for "this type is a leaf". Filled lazily for
# namedtuples, dataclasses and leaf types so that each class is classified only once.
_handlers: dict[type, _NodeHandler | None] = dict(_BUILTIN_HANDLERS)


def _named_fields_repr(cls: type, names: tuple[str, ...]):
    def repr_node(aux, child_reprs):
        inner = ", ".join(f"{n}={c}" for n, c in zip(names, child_reprs))
        return f"{cls.__name__}({inner})"

    return repr_node


def _namedtuple_handler(cls: type) -> _NodeHandler:
    fields = tuple(cls._fields)

    def flatten_with_keys(x):
        return [(GetAttrKey(f), c) for f, c in zip(fields, x)], None

    return _NodeHandler(
        cls,
        lambda x: (x, None),
        lambda aux, children: cls(*children),
        flatten_with_keys,
        _named_fields_repr(cls, fields),
    )


class _Unset:
    """A dataclass field with ``init=False`` that an object never set: kept unset by a
    rebuild (a leaf of its own, equal to itself)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


def _holds_arrays(v) -> bool:
    """Whether ``v`` is, or is a pytree holding, an array-like leaf (a ``shape`` and a
    ``dtype``: a tensor, a NumPy or a JAX array)."""
    return any(hasattr(leaf, "shape") and hasattr(leaf, "dtype") for leaf in tree_leaves(v))


def _dataclass_handler(cls: type) -> _NodeHandler | None:
    params = getattr(cls, "__dataclass_params__", None)
    if params is not None and not params.init:
        return None  # its own __init__ takes other arguments: a leaf, as in JAX
    fields = dataclasses.fields(cls)
    given = tuple(f.name for f in fields if f.init)
    # init=False fields, set after __init__: a rebuild by cls(**kwargs) had reset them to
    # their defaults, silently, in every transform. Those holding arrays are children after
    # the others; the rest is node data (static: kept as it is, compared by value)
    later = tuple(f.name for f in fields if not f.init)

    def split(x):
        kids = [getattr(x, n) for n in given]
        if not later:
            return kids, None, given
        arrays, static = [], []
        for n in later:
            v = getattr(x, n, _UNSET)
            if v is not _UNSET and _holds_arrays(v):
                arrays.append(n)
                kids.append(v)
            else:
                static.append((n, v))
        return kids, (tuple(arrays), tuple(static)), given + tuple(arrays)

    def flatten(x):
        kids, aux, _ = split(x)
        return kids, aux

    def flatten_with_keys(x):
        kids, aux, names = split(x)
        return [(GetAttrKey(n), c) for n, c in zip(names, kids)], aux

    def unflatten(aux, children):
        obj = cls(**dict(zip(given, children)))
        if aux is not None:
            arrays, static = aux
            rest = [*zip(arrays, children[len(given) :]), *static]
            for n, v in rest:
                if v is not _UNSET:
                    object.__setattr__(obj, n, v)  # (a frozen dataclass's too)
        return obj

    def repr_node(aux, child_reprs):
        names = given + (aux[0] if aux is not None else ())
        inner = ", ".join(f"{n}={c}" for n, c in zip(names, child_reprs))
        if aux is not None and aux[1]:
            inner += "".join(f", {n}={v!r}" for n, v in aux[1] if v is not _UNSET)
        return f"{cls.__name__}({inner})"

    return _NodeHandler(cls, flatten, unflatten, flatten_with_keys, repr_node)


def _classify(t: type) -> _NodeHandler | None:
    """Handler for a type not in the dispatch cache (namedtuple, dataclass or leaf)."""
    if issubclass(t, tuple) and hasattr(t, "_fields"):
        return _namedtuple_handler(t)
    if dataclasses.is_dataclass(t):
        return _dataclass_handler(t)
    return None


def _lookup(t: type) -> _NodeHandler | None:
    """Cached handler for exact type ``t``; ``None`` means values of ``t`` are leaves."""
    handler = _handlers.get(t, _MISSING)
    if handler is _MISSING:
        handler = _classify(t)
        _handlers[t] = handler
    return handler


def register_pytree_node(
    nodetype: type,
    flatten_fn: Callable[[Any], tuple[Iterable[Any], Hashable]] | None = None,
    unflatten_fn: Callable[[Hashable, Iterable[Any]], Any] | None = None,
    flatten_with_keys_fn: Callable[[Any], tuple[Iterable[tuple[Any, Any]], Hashable]] | None = None,
    *,
    flatten_func=None,
    unflatten_func=None,
    flatten_with_keys_func=None,
) -> None:
    """Register ``nodetype`` as a pytree container node.

    Args:
        nodetype: the exact type to register (subclasses are not covered).
        flatten_fn: ``flatten_fn(node) -> (children, aux_data)``; ``children`` is an iterable of
            subtrees and ``aux_data`` hashable static data kept in the treedef.
        unflatten_fn: ``unflatten_fn(aux_data, children) -> node``; ``children`` is a tuple.
        flatten_with_keys_fn: optional ``f(node) -> (iterable of (key, child), aux_data)`` used by
            :func:`tree_flatten_with_path`; it must return the same ``aux_data`` and children as
            ``flatten_fn``. Without it, paths use :class:`FlattenedIndexKey`.
        flatten_func: JAX's keyword for ``flatten_fn``.
        unflatten_func: JAX's keyword for ``unflatten_fn``.
        flatten_with_keys_func: JAX's keyword for ``flatten_with_keys_fn``.

    Returns:
        None.

    Raises:
        TypeError: if ``nodetype`` is not a type, or a function given is not callable.
        ValueError: if ``nodetype`` is already registered or is a built-in node type.

    Example:
        >>> class Pair:
        ...     def __init__(self, a, b):
        ...         self.a, self.b = a, b
        >>> register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda _, ch: Pair(*ch))
        >>> tree_leaves(Pair(1, (2, 3)))
        [1, 2, 3]
    """
    if not isinstance(nodetype, type):
        raise TypeError(f"register_pytree_node expects a type, got {nodetype!r}")
    for ours, jax_name, given in (
        ("flatten_fn", "flatten_func", (flatten_fn, flatten_func)),
        ("unflatten_fn", "unflatten_func", (unflatten_fn, unflatten_func)),
        (
            "flatten_with_keys_fn",
            "flatten_with_keys_func",
            (flatten_with_keys_fn, flatten_with_keys_func),
        ),
    ):
        if None not in given:
            raise TypeError(f"register_pytree_node: {ours} given twice (and as {jax_name}=)")
    flatten_fn = flatten_fn if flatten_func is None else flatten_func
    unflatten_fn = unflatten_fn if unflatten_func is None else unflatten_func
    if flatten_with_keys_func is not None:
        flatten_with_keys_fn = flatten_with_keys_func
    # checked here: a registration that fails only when a value of the type is flattened
    # broke every later transform of any value of it (int with None functions: all of them)
    for name, f in (("flatten_fn", flatten_fn), ("unflatten_fn", unflatten_fn)):
        if not callable(f):
            raise TypeError(
                f"register_pytree_node({nodetype.__name__}): {name} must be callable, got {f!r}"
            )
    if flatten_with_keys_fn is not None and not callable(flatten_with_keys_fn):
        raise TypeError(
            f"register_pytree_node({nodetype.__name__}): flatten_with_keys_fn must be callable, "
            f"got {flatten_with_keys_fn!r}"
        )
    if nodetype in _registry or nodetype in _BUILTIN_HANDLERS:
        raise ValueError(f"Duplicate pytree node type registration for {nodetype!r}")

    if flatten_with_keys_fn is None:

        def flatten_with_keys(x):
            children, aux = flatten_fn(x)
            return [(FlattenedIndexKey(i), c) for i, c in enumerate(children)], aux

    else:

        def flatten_with_keys(x):
            keyed, aux = flatten_with_keys_fn(x)
            return list(keyed), aux

    def repr_node(aux, child_reprs):
        return f"CustomNode({nodetype.__name__}[{aux!r}], [{', '.join(child_reprs)}])"

    handler = _NodeHandler(nodetype, flatten_fn, unflatten_fn, flatten_with_keys, repr_node)
    _registry[nodetype] = handler
    _handlers[nodetype] = handler


def register_pytree_node_class(cls: type) -> type:
    """Class decorator registering ``cls`` via its ``tree_flatten``/``tree_unflatten`` methods.

    ``cls`` must define ``tree_flatten(self) -> (children, aux_data)`` and a classmethod
    ``tree_unflatten(cls, aux_data, children) -> instance``.

    Args:
        cls: the class to register.

    Returns:
        ``cls`` itself, so it can be used as a decorator.

    Raises:
        ValueError: if ``cls`` is already registered.

    Example:
        >>> @register_pytree_node_class
        ... class Box:
        ...     def __init__(self, v):
        ...         self.v = v
        ...     def tree_flatten(self):
        ...         return (self.v,), None
        ...     @classmethod
        ...     def tree_unflatten(cls, aux, children):
        ...         return cls(*children)
        >>> tree_leaves([Box(1), Box(2)])
        [1, 2]
    """
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def register_pytree_with_keys(
    nodetype: type,
    flatten_with_keys: Callable[[Any], tuple[Iterable[tuple[Any, Any]], Hashable]],
    unflatten_func: Callable[[Hashable, Iterable[Any]], Any],
    flatten_func: Callable[[Any], tuple[Iterable[Any], Hashable]] | None = None,
) -> None:
    """Register ``nodetype`` from its keyed flatten (JAX's form of
    :func:`register_pytree_node`).

    Args:
        nodetype: the exact type to register.
        flatten_with_keys: ``f(node) -> (iterable of (key, child), aux_data)``.
        unflatten_func: ``f(aux_data, children) -> node``.
        flatten_func: optional ``f(node) -> (children, aux_data)``, quicker than dropping
            the keys of ``flatten_with_keys``.

    Example:
        >>> class Two:
        ...     def __init__(self, a, b):
        ...         self.a, self.b = a, b
        >>> register_pytree_with_keys(
        ...     Two,
        ...     lambda t: (((GetAttrKey("a"), t.a), (GetAttrKey("b"), t.b)), None),
        ...     lambda _, ch: Two(*ch),
        ... )
        >>> keystr(tree_leaves_with_path(Two(1, 2))[1][0])
        '.b'
    """
    if flatten_func is None:

        def flatten_func(x):
            keyed, aux = flatten_with_keys(x)
            return [c for _, c in keyed], aux

    register_pytree_node(nodetype, flatten_func, unflatten_func, flatten_with_keys)


def register_pytree_with_keys_class(cls: type) -> type:
    """Class decorator: :func:`register_pytree_with_keys` through the class's
    ``tree_flatten_with_keys`` method and ``tree_unflatten`` classmethod (and its
    ``tree_flatten``, when it has one).

    Args:
        cls: the class to register.

    Returns:
        ``cls`` itself.
    """
    flatten = getattr(cls, "tree_flatten", None)
    register_pytree_with_keys(
        cls,
        lambda x: x.tree_flatten_with_keys(),
        cls.tree_unflatten,
        None if flatten is None else (lambda x: x.tree_flatten()),
    )
    return cls


def register_dataclass(
    nodetype: type | None = None,
    data_fields: Sequence[str] | None = None,
    meta_fields: Sequence[str] | None = None,
    drop_fields: Sequence[str] = (),
):
    """Register a dataclass as a node whose ``data_fields`` are children and whose
    ``meta_fields`` are static node data (part of the treedef: a compiled function traces
    again when they change; ``grad`` never sees them). Unregistered dataclasses are nodes
    too, with every ``init`` field a child; this is how a field is made static.

    Without ``data_fields`` and ``meta_fields`` the fields marked
    ``dataclasses.field(metadata={"static": True})`` are meta, the others data. Usable as a
    decorator, bare or with arguments.

    Args:
        nodetype: the dataclass (or any class with those attributes).
        data_fields: names of the attributes that are subtrees.
        meta_fields: names of the attributes kept as node data (hashable values).
        drop_fields: ``init`` fields left out of both (rebuilt by their defaults).

    Returns:
        ``nodetype`` (or, with ``nodetype`` omitted, a decorator).

    Raises:
        TypeError: if only one of ``data_fields``/``meta_fields`` is given, or neither is
            given for a class that is not a dataclass.
        ValueError: if the fields do not cover the dataclass's ``init`` fields exactly.

    Example:
        >>> @register_dataclass
        ... @dataclasses.dataclass
        ... class Layer:
        ...     w: Any
        ...     width: int = dataclasses.field(default=4, metadata={"static": True})
        >>> leaves, treedef = tree_flatten(Layer(1.0, 8))
        >>> leaves, treedef.unflatten([2.0]).width
        ([1.0], 8)
    """
    if nodetype is None:
        return functools.partial(
            register_dataclass,
            data_fields=data_fields,
            meta_fields=meta_fields,
            drop_fields=drop_fields,
        )
    if (data_fields is None) != (meta_fields is None):
        raise TypeError(
            "register_dataclass: give both data_fields and meta_fields, or neither "
            f"(got data_fields={data_fields!r}, meta_fields={meta_fields!r})"
        )
    if data_fields is None:
        if not dataclasses.is_dataclass(nodetype):
            raise TypeError(
                f"register_dataclass: {nodetype!r} is not a dataclass; give data_fields and "
                "meta_fields"
            )
        data_fields, meta_fields = [], []
        for f in dataclasses.fields(nodetype):
            if f.init and f.name not in drop_fields:
                (meta_fields if f.metadata.get("static", False) else data_fields).append(f.name)
    data = tuple(data_fields)
    meta = tuple(meta_fields)
    if dataclasses.is_dataclass(nodetype):
        init = {f.name for f in dataclasses.fields(nodetype) if f.init}
        given = set(data) | set(meta) | set(drop_fields)
        if given != init:
            raise ValueError(
                f"register_dataclass: data_fields {list(data)}, meta_fields {list(meta)} and "
                f"drop_fields {list(drop_fields)} must name the init fields of "
                f"{nodetype.__name__} exactly: {sorted(init)}"
            )

    def flatten(x):
        return [getattr(x, n) for n in data], tuple(getattr(x, n) for n in meta)

    def flatten_with_keys(x):
        return [(GetAttrKey(n), getattr(x, n)) for n in data], tuple(getattr(x, n) for n in meta)

    def unflatten(aux, children):
        return nodetype(**dict(zip(data, children)), **dict(zip(meta, aux)))

    register_pytree_node(nodetype, flatten, unflatten, flatten_with_keys)
    return nodetype


def register_static(cls: type) -> type:
    """Register ``cls`` as a node without children: its instances are node data (kept in
    the treedef, hashed and compared), never leaves. Usable as a decorator.

    Args:
        cls: a class whose instances are hashable.

    Returns:
        ``cls`` itself.

    Example:
        >>> @register_static
        ... class Tag:
        ...     pass
        >>> tree_leaves([Tag(), 1])
        [1]
    """
    register_pytree_node(cls, lambda x: ((), x), lambda x, _: x)
    return cls


class Partial(functools.partial):
    """``functools.partial`` as a pytree: the bound arguments are children, the function is
    node data, so a partial can pass through ``compile``, ``vmap`` or ``tree_map``.

    Example:
        >>> f = Partial(lambda a, b: a + b, 1.0)
        >>> tree_leaves(f), f(2.0)
        ([1.0], 3.0)
    """

    def __new__(cls, func, *args, **kw):
        if isinstance(func, functools.partial):  # one level: the inner partial's arguments
            args = func.args + args
            kw = {**func.keywords, **kw}
            func = func.func
        return super().__new__(cls, func, *args, **kw)


register_pytree_node(
    Partial,
    lambda p: ((p.args, p.keywords), p.func),
    lambda func, children: Partial(func, *children[0], **children[1]),
)


# --------------------------------------------------------------------------------------------
# Core recursions
# --------------------------------------------------------------------------------------------


def _flatten(x: Any, leaves: list):
    """Append the leaves of ``x`` to ``leaves`` and return the encoded structure of ``x``.

    Hot path without ``is_leaf``: children whose type is already known to be a leaf type are
    handled inline, saving a recursive call per leaf.
    """
    t = type(x)
    if t is tuple or t is list:
        nodes = []
        for c in x:
            if _handlers.get(type(c), _MISSING) is None:
                leaves.append(c)
                nodes.append(_LEAF)
            else:
                nodes.append(_flatten(c, leaves))
        return (t, None, tuple(nodes))
    if t is dict:
        keys = _dict_keys(x)
        nodes = []
        for k in keys:
            c = x[k]
            if _handlers.get(type(c), _MISSING) is None:
                leaves.append(c)
                nodes.append(_LEAF)
            else:
                nodes.append(_flatten(c, leaves))
        return (dict, keys, tuple(nodes))
    if x is None:
        return _NONE_NODE
    handler = _handlers.get(t, _MISSING)
    if handler is _MISSING:
        handler = _lookup(t)
    if handler is None:
        leaves.append(x)
        return _LEAF
    children, aux = handler.flatten(x)
    return (t, aux, tuple([_flatten(c, leaves) for c in children]))


def _flatten_is_leaf(x: Any, leaves: list, is_leaf: IsLeafFn):
    """Like :func:`_flatten`, consulting ``is_leaf`` on every subtree first."""
    if is_leaf(x):
        leaves.append(x)
        return _LEAF
    t = type(x)
    if t is tuple or t is list:
        return (t, None, tuple([_flatten_is_leaf(c, leaves, is_leaf) for c in x]))
    if t is dict:
        keys = _dict_keys(x)
        return (dict, keys, tuple([_flatten_is_leaf(x[k], leaves, is_leaf) for k in keys]))
    if x is None:
        return _NONE_NODE
    handler = _lookup(t)
    if handler is None:
        leaves.append(x)
        return _LEAF
    children, aux = handler.flatten(x)
    return (t, aux, tuple([_flatten_is_leaf(c, leaves, is_leaf) for c in children]))


def _flatten_any(x: Any, leaves: list, is_leaf: IsLeafFn | None):
    if is_leaf is None:
        return _flatten(x, leaves)
    return _flatten_is_leaf(x, leaves, is_leaf)


def _unflatten(node, it):
    """Rebuild the value encoded by ``node`` taking leaves from iterator ``it``.

    Leaf children (``_LEAF is None``) are resolved inline with ``next(it)``.
    """
    if node is _LEAF:
        return next(it)
    t, aux, children = node
    if t is tuple:
        return tuple([next(it) if c is None else _unflatten(c, it) for c in children])
    if t is list:
        return [next(it) if c is None else _unflatten(c, it) for c in children]
    if t is dict:
        return dict(zip(aux, [next(it) if c is None else _unflatten(c, it) for c in children]))
    if t is _NoneType:
        return None
    values = tuple([next(it) if c is None else _unflatten(c, it) for c in children])
    return _handlers[t].unflatten(aux, values)


class _StructureMismatch(Exception):
    """Internal: raised deep in a walk; ``path`` collects key entries innermost-first."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail
        self.path: list = []

    def keypath(self) -> tuple:
        return tuple(reversed(self.path))


def _type_name(t: type) -> str:
    return "None" if t is _NoneType else t.__name__


def _flatten_up_to(node, x: Any, out: list) -> None:
    """Append to ``out`` the subtrees of ``x`` that sit at the leaves of ``node``."""
    if node is _LEAF:
        out.append(x)
        return
    t, aux, children = node
    if type(x) is not t:
        raise _StructureMismatch(
            f"expected a {_type_name(t)} node, got a value of type {_type_name(type(x))}"
        )
    if t is tuple or t is list:  # the common case, inline
        if len(x) != len(children):
            raise _StructureMismatch(
                f"expected a {t.__name__} of length {len(children)}, got length {len(x)}"
            )
        values = x
    elif t is _NoneType:
        return
    else:
        values = _matching_children(t, aux, len(children), x)
    i = 0
    try:
        for i, c in enumerate(children):
            if c is _LEAF:
                out.append(values[i])
            else:
                _flatten_up_to(c, values[i], out)
    except _StructureMismatch as e:
        e.path.append(_child_key(t, aux, x, i))
        raise


def _matching_children(t: type, aux: Any, n: int, x: Any) -> Sequence:
    """The children of ``x``, a dict or custom node of type ``t``, in the order of an encoded
    node with node data ``aux`` and ``n`` children; ``_StructureMismatch`` when they differ.
    (Tuples and lists, the common case, are checked inline by :func:`_flatten_up_to`.)"""
    if t is dict:
        if len(x) != len(aux) or any(k not in x for k in aux):
            raise _StructureMismatch(
                f"expected a dict with keys {list(aux)!r}, got keys {list(_dict_keys(x))!r}"
            )
        return [x[k] for k in aux]
    x_children, x_aux = _handlers[t].flatten(x)
    x_children = tuple(x_children)
    if len(x_children) != n:
        raise _StructureMismatch(
            f"expected a {t.__name__} node with {n} children, got {len(x_children)}"
        )
    if x_aux != aux:
        raise _StructureMismatch(f"{t.__name__} node data differs: expected {aux!r}, got {x_aux!r}")
    return x_children


def _child_key(t: type, aux: Any, x: Any, i: int) -> _KeyEntry:
    """The path entry of child ``i`` of ``x``, a value of node type ``t`` whose encoded node
    has node data ``aux`` (worked out only for an error's path)."""
    if t is tuple or t is list:
        return SequenceKey(i)
    if t is dict:
        return DictKey(aux[i])
    return _handlers[t].flatten_with_keys(x)[0][i][0]


def _flatten_with_path(x: Any, path: tuple, out: list, is_leaf: IsLeafFn | None):
    """Like :func:`_flatten` but appends ``(path, leaf)`` pairs."""
    if is_leaf is not None and is_leaf(x):
        out.append((path, x))
        return _LEAF
    handler = _lookup(type(x))
    if handler is None:
        out.append((path, x))
        return _LEAF
    keyed, aux = handler.flatten_with_keys(x)
    return (
        type(x),
        aux,
        tuple([_flatten_with_path(c, path + (k,), out, is_leaf) for k, c in keyed]),
    )


def _node_repr(node) -> str:
    if node is _LEAF:
        return "*"
    t, aux, children = node
    handler = _handlers.get(t) or _lookup(t)
    return handler.repr_node(aux, [_node_repr(c) for c in children])


def _count_nodes(node) -> int:
    if node is _LEAF:
        return 1
    return 1 + sum(_count_nodes(c) for c in node[2])


def _count_leaves(node) -> int:
    if node is _LEAF:
        return 1
    return sum(_count_leaves(c) for c in node[2])


# --------------------------------------------------------------------------------------------
# PyTreeDef
# --------------------------------------------------------------------------------------------


def _make_treedef(node, num_leaves: int) -> PyTreeDef:
    treedef = object.__new__(PyTreeDef)
    object.__setattr__(treedef, "_node", node)
    object.__setattr__(treedef, "_num_leaves", num_leaves)
    object.__setattr__(treedef, "_hash", None)
    return treedef


class PyTreeDef:
    """Immutable, hashable description of a pytree's structure (everything but the leaves).

    Obtain one from :func:`tree_flatten` or :func:`tree_structure`; do not construct directly.

    Example:
        >>> treedef = tree_structure((1, {"a": 2, "b": [3, 4]}))
        >>> treedef
        PyTreeDef((*, {'a': *, 'b': [*, *]}))
        >>> treedef.num_leaves, treedef.num_nodes
        (4, 7)
        >>> treedef.unflatten("wxyz")
        ('w', {'a': 'x', 'b': ['y', 'z']})
    """

    __slots__ = ("_hash", "_node", "_num_leaves")

    def __init__(self, *args, **kwargs):
        raise TypeError("PyTreeDef cannot be constructed directly; use tree_structure()")

    def __setattr__(self, name, value):
        raise AttributeError("PyTreeDef is immutable")

    def __delattr__(self, name):
        raise AttributeError("PyTreeDef is immutable")

    def __reduce__(self):
        return (_make_treedef, (self._node, self._num_leaves))

    @property
    def num_leaves(self) -> int:
        """Number of leaves of trees with this structure."""
        return self._num_leaves

    @property
    def num_nodes(self) -> int:
        """Number of nodes, counting leaves and ``None`` nodes (JAX convention)."""
        return _count_nodes(self._node)

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        """Build a tree of this structure from ``leaves``.

        Args:
            leaves: iterable of exactly ``num_leaves`` values, in flattening order.

        Returns:
            The rebuilt pytree.

        Raises:
            ValueError: if the number of leaves does not match ``num_leaves``.

        Example:
            >>> tree_structure([0, (0, 0)]).unflatten([1, 2, 3])
            [1, (2, 3)]
        """
        if not isinstance(leaves, (list, tuple)):
            leaves = list(leaves)
        if len(leaves) != self._num_leaves:
            raise ValueError(
                f"Wrong number of leaves for {self!r}: expected {self._num_leaves}, "
                f"got {len(leaves)}"
            )
        return _unflatten(self._node, iter(leaves))

    def flatten_up_to(self, tree: Any) -> list:
        """Flatten ``tree`` only down to the leaves of this structure.

        Args:
            tree: a pytree whose structure has this treedef as a prefix; where this treedef has a
                leaf, ``tree`` may have a whole subtree, which is returned as one entry.

        Returns:
            A list of ``num_leaves`` subtrees of ``tree``.

        Raises:
            ValueError: if ``tree`` does not match this structure; the message names the path
                and both structures.

        Example:
            >>> tree_structure((0, 0)).flatten_up_to(([1, 2], {"a": 3}))
            [[1, 2], {'a': 3}]
        """
        out: list = []
        try:
            _flatten_up_to(self._node, tree, out)
        except _StructureMismatch as e:
            raise ValueError(
                f"Tree structure mismatch at {_where(e.keypath())}: {e.detail}. "
                f"Expected a tree matching {self!r} down to its leaves, "
                f"got a tree with structure {tree_structure(tree)!r}"
            ) from None
        return out

    def children(self) -> list[PyTreeDef]:
        """Treedefs of the immediate children of the root node (empty for a leaf).

        Example:
            >>> tree_structure((1, [2, 3])).children()
            [PyTreeDef(*), PyTreeDef([*, *])]
        """
        if self._node is _LEAF:
            return []
        return [_make_treedef(c, _count_leaves(c)) for c in self._node[2]]

    def node_data(self) -> tuple[type, Any] | None:
        """``(node_type, aux_data)`` of the root node, or ``None`` for a leaf.

        Example:
            >>> tree_structure({"b": 1, "a": 2}).node_data()
            (<class 'dict'>, ('a', 'b'))
        """
        if self._node is _LEAF:
            return None
        return (self._node[0], self._node[1])

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, PyTreeDef):
            return NotImplemented
        return self._num_leaves == other._num_leaves and self._node == other._node

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            try:
                h = hash(self._node)
            except TypeError:  # unhashable custom node data (a list): by the node types
                h = _loose_hash(self._node)
            object.__setattr__(self, "_hash", h)
        return h

    def __repr__(self) -> str:
        return f"PyTreeDef({_node_repr(self._node)})"


def _loose_hash(node) -> int:
    """A hash of an encoded structure whose custom node data cannot be hashed: such data
    count by their type alone (equal treedefs still hash equal; equality decides)."""
    if node is _LEAF:
        return hash(None)
    nodetype, aux, children = node
    try:
        aux_hash = hash(aux)
    except TypeError:
        aux_hash = hash(type(aux))
    return hash((nodetype, aux_hash, tuple(_loose_hash(c) for c in children)))


def frozen(treedef: PyTreeDef) -> PyTreeDef:
    """``treedef`` itself when its node data are hashable, else a deep copy of it: a
    treedef kept as a cache key must not change when the user mutates a list it holds."""
    try:
        hash(treedef._node)
    except TypeError:
        return copy.deepcopy(treedef)
    return treedef


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    """Whether ``treedef`` is a structure of one node without children, as in JAX: a single
    leaf, ``None`` or an empty container.

    Args:
        treedef: a treedef.

    Returns:
        True iff ``treedef.num_nodes == 1``.

    Example:
        >>> treedef_is_leaf(tree_structure(1)), treedef_is_leaf(tree_structure(None))
        (True, True)
        >>> treedef_is_leaf(tree_structure((1,)))
        False
    """
    return treedef._node is _LEAF or not treedef._node[2]


def treedef_tuple(treedefs: Iterable[PyTreeDef]) -> PyTreeDef:
    """The structure of a tuple whose children have the structures ``treedefs``.

    Args:
        treedefs: the children's treedefs, in order.

    Returns:
        A treedef of a tuple node.

    Example:
        >>> treedef_tuple([tree_structure((1, 2)), tree_structure(3)])
        PyTreeDef(((*, *), *))
    """
    treedefs = list(treedefs)
    node = (tuple, None, tuple(t._node for t in treedefs))
    return _make_treedef(node, sum(t._num_leaves for t in treedefs))


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    """Treedefs of the root's children; see :meth:`PyTreeDef.children`.

    Args:
        treedef: a treedef.

    Returns:
        List of child treedefs (empty for a leaf or ``None``).

    Example:
        >>> treedef_children(tree_structure((1, 2)))
        [PyTreeDef(*), PyTreeDef(*)]
    """
    return treedef.children()


# --------------------------------------------------------------------------------------------
# Public tree functions
# --------------------------------------------------------------------------------------------


def tree_flatten(tree: Any, is_leaf: IsLeafFn | None = None) -> tuple[list, PyTreeDef]:
    """Flatten a pytree into its leaves and structure.

    Args:
        tree: the pytree.
        is_leaf: optional predicate; subtrees for which it returns True are leaves.

    Returns:
        ``(leaves, treedef)`` with ``leaves`` a new list.

    Raises:
        Whatever a custom ``flatten_fn`` or ``is_leaf`` raises.

    Example:
        >>> tree_flatten({"x": 1, "y": (2, None)})
        ([1, 2], PyTreeDef({'x': *, 'y': (*, None)}))
    """
    leaves: list = []
    node = _flatten(tree, leaves) if is_leaf is None else _flatten_is_leaf(tree, leaves, is_leaf)
    return leaves, _make_treedef(node, len(leaves))


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable[Any]) -> Any:
    """Rebuild a pytree from a treedef and leaves.

    Args:
        treedef: the structure, from :func:`tree_flatten` or :func:`tree_structure`.
        leaves: iterable of ``treedef.num_leaves`` leaves.

    Returns:
        The rebuilt pytree.

    Raises:
        ValueError: if the number of leaves is wrong.

    Example:
        >>> tree_unflatten(tree_structure((0, [0])), ["a", "b"])
        ('a', ['b'])
    """
    return treedef.unflatten(leaves)


def tree_leaves(tree: Any, is_leaf: IsLeafFn | None = None) -> list:
    """Leaves of a pytree, in flattening order.

    Args:
        tree: the pytree.
        is_leaf: optional predicate marking extra leaves.

    Returns:
        A new list of leaves.

    Raises:
        Whatever a custom ``flatten_fn`` or ``is_leaf`` raises.

    Example:
        >>> tree_leaves([1, {"b": 3, "a": 2}, None])
        [1, 2, 3]
    """
    leaves: list = []
    _flatten_any(tree, leaves, is_leaf)
    return leaves


def tree_structure(tree: Any, is_leaf: IsLeafFn | None = None) -> PyTreeDef:
    """Structure (treedef) of a pytree.

    Args:
        tree: the pytree.
        is_leaf: optional predicate marking extra leaves.

    Returns:
        The :class:`PyTreeDef` of ``tree``.

    Raises:
        Whatever a custom ``flatten_fn`` or ``is_leaf`` raises.

    Example:
        >>> tree_structure([1, (2, 3)])
        PyTreeDef([*, (*, *)])
    """
    return tree_flatten(tree, is_leaf)[1]


def _where(path: tuple) -> str:
    return f"path {keystr(path)}" if path else "the root"


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeafFn | None = None) -> Any:
    """Apply ``f`` to corresponding leaves of one or more pytrees.

    Args:
        f: function taking ``1 + len(rest)`` arguments.
        tree: the pytree that fixes the output structure.
        *rest: further pytrees, each with ``tree``'s structure at least down to ``tree``'s leaves
            (where ``tree`` has a leaf they may have any subtree, passed to ``f`` whole).
        is_leaf: optional predicate marking extra leaves of ``tree``.

    Returns:
        A pytree with ``tree``'s structure whose leaves are ``f(leaf, *corresponding)``.

    Raises:
        ValueError: if a tree in ``rest`` does not match ``tree``; the message names the path and
            both structures.

    Example:
        >>> tree_map(lambda x, y: x + y, (1, [2]), (10, [20]))
        (11, [22])
        >>> tree_map(lambda x, y: (x, y), (1, 2), ([3], {"a": 4}))
        ((1, [3]), (2, {'a': 4}))
    """
    leaves: list = []
    node = _flatten(tree, leaves) if is_leaf is None else _flatten_is_leaf(tree, leaves, is_leaf)
    if not rest:
        return _unflatten(node, iter([f(x) for x in leaves]))
    all_leaves = [leaves]
    for position, other in enumerate(rest, start=1):
        out: list = []
        try:
            _flatten_up_to(node, other, out)
        except _StructureMismatch as e:
            treedef = _make_treedef(node, len(leaves))
            raise ValueError(
                f"tree_map: tree {position} does not match the structure of the first tree at "
                f"{_where(e.keypath())}: {e.detail}. First tree structure: {treedef!r}; "
                f"tree {position} structure: {tree_structure(other)!r}"
            ) from None
        all_leaves.append(out)
    return _unflatten(node, iter([f(*xs) for xs in zip(*all_leaves)]))


def tree_flatten_with_path(
    tree: Any, is_leaf: IsLeafFn | None = None
) -> tuple[list[tuple[tuple, Any]], PyTreeDef]:
    """Flatten a pytree, pairing each leaf with its key path.

    Path entries are :class:`SequenceKey` (tuple/list index), :class:`DictKey` (dict-like key),
    :class:`GetAttrKey` (namedtuple/dataclass field) or :class:`FlattenedIndexKey` (custom
    node without key information). Format a path with :func:`keystr`.

    Args:
        tree: the pytree.
        is_leaf: optional predicate marking extra leaves.

    Returns:
        ``([(path, leaf), ...], treedef)``; ``treedef`` equals ``tree_structure(tree, is_leaf)``.

    Raises:
        Whatever a custom flatten function or ``is_leaf`` raises.

    Example:
        >>> pairs, _ = tree_flatten_with_path({"a": [1, 2]})
        >>> [(keystr(p), x) for p, x in pairs]
        [("['a'][0]", 1), ("['a'][1]", 2)]
    """
    out: list = []
    node = _flatten_with_path(tree, (), out, is_leaf)
    return out, _make_treedef(node, len(out))


def tree_leaves_with_path(tree: Any, is_leaf: IsLeafFn | None = None) -> list[tuple[tuple, Any]]:
    """``(path, leaf)`` pairs of a pytree; see :func:`tree_flatten_with_path`.

    Args:
        tree: the pytree.
        is_leaf: optional predicate marking extra leaves.

    Returns:
        List of ``(path_tuple, leaf)``.

    Example:
        >>> [keystr(p) for p, _ in tree_leaves_with_path((1, {"w": 2}))]
        ['[0]', "[1]['w']"]
    """
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_map_with_path(
    f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeafFn | None = None
) -> Any:
    """Like :func:`tree_map` but calls ``f(path, leaf, *corresponding_leaves)``.

    Args:
        f: function taking the key path followed by ``1 + len(rest)`` values.
        tree: the pytree that fixes the output structure.
        *rest: further pytrees with ``tree``'s structure down to ``tree``'s leaves.
        is_leaf: optional predicate marking extra leaves of ``tree``.

    Returns:
        A pytree with ``tree``'s structure.

    Raises:
        ValueError: if a tree in ``rest`` does not match ``tree``.

    Example:
        >>> tree_map_with_path(lambda p, x: keystr(p), {"a": (1, 2)})
        {'a': ("['a'][0]", "['a'][1]")}
    """
    pairs, treedef = tree_flatten_with_path(tree, is_leaf)
    paths = [p for p, _ in pairs]
    leaves = [x for _, x in pairs]
    all_leaves = [leaves]
    for position, other in enumerate(rest, start=1):
        try:
            all_leaves.append(treedef.flatten_up_to(other))
        except ValueError as e:
            raise ValueError(f"tree_map_with_path: tree {position}: {e}") from None
    return treedef.unflatten([f(p, *xs) for p, *xs in zip(paths, *all_leaves)])


def keystr(
    path: Iterable[Any] = None, *, simple: bool = False, separator: str = "", keys=None
) -> str:
    """Format a key path.

    Args:
        path: sequence of key entries, as produced by :func:`tree_flatten_with_path`.
        keys: JAX's keyword for ``path``.
        simple: if True, print bare keys (``a``, ``0``, ``w``) instead of ``['a']``, ``[0]``,
            ``.w``; handy for names like ``layers.0.weight``.
        separator: string placed between entries (typically used with ``simple=True``).

    Returns:
        The formatted path, e.g. ``"['a'][0].w"``; ``""`` for the empty path.

    Example:
        >>> keystr((DictKey("a"), SequenceKey(0), GetAttrKey("w")))
        "['a'][0].w"
        >>> keystr((GetAttrKey("layers"), SequenceKey(0)), simple=True, separator=".")
        'layers.0'
    """
    if keys is not None:
        if path is not None:
            raise TypeError("keystr: the path given twice (and as keys=)")
        path = keys
    if path is None:
        raise TypeError("keystr: missing the path (a sequence of key entries)")
    if simple:
        return separator.join(k._simple() if isinstance(k, _KeyEntry) else str(k) for k in path)
    return separator.join(str(k) for k in path)


# --------------------------------------------------------------------------------------------
# Prefix broadcasting
# --------------------------------------------------------------------------------------------


def _broadcast_prefix(prefix: Any, full: Any, is_leaf: IsLeafFn | None, out: list) -> None:
    handler = None
    if prefix is not None and (is_leaf is None or not is_leaf(prefix)):
        handler = _lookup(type(prefix))
    if handler is None:  # prefix leaf (None included) covers the whole subtree
        count: list = []
        _flatten_any(full, count, is_leaf)
        out.extend([prefix] * len(count))
        return
    for key, p_child, f_child in _paired_children(handler, prefix, full, is_leaf):
        try:
            _broadcast_prefix(p_child, f_child, is_leaf, out)
        except _StructureMismatch as e:
            e.path.append(key)
            raise


def _paired_children(handler, prefix: Any, full: Any, is_leaf: IsLeafFn | None) -> list:
    """``(key, prefix child, value child)`` per child of the prefix node ``prefix`` (whose
    node type ``handler`` flattens) and the value node ``full``, in the value's order;
    ``_StructureMismatch`` when the two nodes differ."""
    t = type(prefix)
    if is_leaf is not None and is_leaf(full):
        raise _StructureMismatch(f"the prefix has a {t.__name__} node where the value has a leaf")
    if type(full) is not t:
        raise _StructureMismatch(
            f"the prefix has a {t.__name__} node where the value has a "
            f"{_type_name(type(full))}" + ("" if _lookup(type(full)) is not None else " leaf")
        )
    p_keyed, p_aux = handler.flatten_with_keys(prefix)
    f_keyed, f_aux = handler.flatten_with_keys(full)
    if t is dict or t is collections.OrderedDict or t is collections.defaultdict:
        return _paired_by_key(t, p_keyed, f_keyed)
    if len(p_keyed) != len(f_keyed):
        raise _StructureMismatch(
            f"the prefix has a {t.__name__} with {len(p_keyed)} children where the value "
            f"has {len(f_keyed)}"
        )
    if p_aux != f_aux:
        raise _StructureMismatch(
            f"{t.__name__} node data differs: prefix has {p_aux!r}, value has {f_aux!r}"
        )
    return [(k, pc, fc) for (k, pc), (_, fc) in zip(p_keyed, f_keyed)]


def _paired_by_key(t: type, p_keyed: list, f_keyed: list) -> list:
    """A dict-like node's children paired by key, in the value's order (the order of its
    leaves); ``_StructureMismatch`` when the key sets differ."""
    p_by_key = {k.key: c for k, c in p_keyed}
    if len(p_keyed) != len(f_keyed) or any(k.key not in p_by_key for k, _ in f_keyed):
        raise _StructureMismatch(
            f"the prefix has a {t.__name__} with keys {[k.key for k, _ in p_keyed]!r} "
            f"where the value has keys {[k.key for k, _ in f_keyed]!r}"
        )
    return [(k, p_by_key[k.key], c) for k, c in f_keyed]


def _short_repr(x: Any, limit: int = 200) -> str:
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def broadcast_prefix(
    prefix_tree: Any,
    full_tree: Any,
    is_leaf: IsLeafFn | None = None,
    *,
    spec_name: str = "prefix tree",
) -> list:
    """Broadcast a prefix tree over the leaves of a full tree (vmap ``in_axes`` semantics).

    Each leaf of ``prefix_tree`` covers the whole corresponding subtree of ``full_tree``.
    ``None`` in ``prefix_tree`` is a *leaf* here (e.g. "not mapped") and covers a whole subtree.
    Nodes of the prefix must match the full tree's nodes exactly: same type (a list never
    matches a tuple), same dict keys, same length and node data.

    Args:
        prefix_tree: the prefix, e.g. ``(0, None, {"w": 1})``.
        full_tree: the full value tree.
        is_leaf: optional predicate marking extra leaves, applied to both trees; the result
            is aligned with ``tree_leaves(full_tree, is_leaf)``.
        spec_name: what to call the prefix in error messages, e.g. ``"vmap in_axes
            specification"``.

    Returns:
        A list with one entry per leaf of ``full_tree``: the prefix leaf that covers it.

    Raises:
        ValueError: if ``prefix_tree`` is not a tree prefix of ``full_tree``; the message says
            ``"<spec_name> must be a tree prefix of the corresponding value, got ... for value
            tree ..."`` and names the failing path.

    Example:
        >>> broadcast_prefix((0, None), ([1, 2], {"a": 3, "b": 4}))
        [0, 0, None, None]
        >>> broadcast_prefix(1, {"a": (1, 2)})
        [1, 1]
    """
    out: list = []
    try:
        _broadcast_prefix(prefix_tree, full_tree, is_leaf, out)
    except _StructureMismatch as e:
        raise ValueError(
            f"{spec_name} must be a tree prefix of the corresponding value, got "
            f"{_short_repr(prefix_tree)} for value tree "
            f"{tree_structure(full_tree, is_leaf)!r} (mismatch at {_where(e.keypath())}: "
            f"{e.detail})"
        ) from None
    return out


# --------------------------------------------------------------------------------------------
# Small reductions
# --------------------------------------------------------------------------------------------


def tree_all(tree: Any, *, is_leaf: IsLeafFn | None = None) -> bool:
    """Whether every leaf of ``tree`` is truthy (True for a tree without leaves).

    Args:
        tree: the pytree.
        is_leaf: optional predicate marking extra leaves.

    Returns:
        ``all(tree_leaves(tree, is_leaf))``.

    Example:
        >>> tree_all((True, [1, None])), tree_all({"a": 0})
        (True, False)
    """
    return all(tree_leaves(tree, is_leaf))


def tree_reduce(
    function: Callable[[Any, Any], Any],
    tree: Any,
    initializer: Any = _MISSING,
    is_leaf: IsLeafFn | None = None,
) -> Any:
    """Fold ``function`` over the leaves of ``tree`` (``functools.reduce`` on the leaves).

    Args:
        function: binary function ``f(accumulated, leaf)``.
        tree: the pytree.
        initializer: optional start value.
        is_leaf: optional predicate marking extra leaves.

    Returns:
        The reduced value.

    Raises:
        TypeError: if ``tree`` has no leaves and no ``initializer`` is given.

    Example:
        >>> tree_reduce(lambda a, b: a + b, (1, [2, 3]))
        6
        >>> tree_reduce(max, {"a": 4, "b": 9}, initializer=0)
        9
    """
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _MISSING:
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_reduce_associative(
    operation: Callable[[Any, Any], Any],
    tree: Any,
    *,
    identity: Any = _MISSING,
    is_leaf: IsLeafFn | None = None,
) -> Any:
    """Combine the leaves of ``tree`` with the associative ``operation``, pairwise in a
    balanced tree (JAX's ``tree_util.tree_reduce_associative``): ``log2(n)`` levels, so a
    sum of many tensors builds a shallow graph.

    Args:
        operation: an associative binary function.
        tree: the pytree.
        identity: the result for a tree without leaves.
        is_leaf: optional predicate marking extra leaves.

    Returns:
        The combined value.

    Raises:
        TypeError: if ``tree`` has no leaves and no ``identity`` is given.

    Example:
        >>> tree_reduce_associative(lambda a, b: a + b, (1, [2, 3], {"k": 4}))
        10
    """
    leaves = tree_leaves(tree, is_leaf)
    if not leaves:
        if identity is _MISSING:
            raise TypeError("tree_reduce_associative: the tree has no leaves and no identity")
        return identity
    while len(leaves) > 1:
        paired = [operation(a, b) for a, b in zip(leaves[::2], leaves[1::2], strict=False)]
        leaves = paired + leaves[len(paired) * 2 :]
    return leaves[0]


def all_leaves(iterable: Iterable[Any], is_leaf: IsLeafFn | None = None) -> bool:
    """Whether every element of ``iterable`` is a leaf (``None`` is a node, so not one).

    Args:
        iterable: the values to test.
        is_leaf: optional predicate marking extra leaves.

    Returns:
        True iff each element flattens to itself alone.

    Example:
        >>> all_leaves([1, "a"]), all_leaves([1, (2,)]), all_leaves([None])
        (True, False, False)
    """
    for x in iterable:
        if is_leaf is not None and is_leaf(x):
            continue
        if _lookup(type(x)) is not None:  # a node (``None`` included)
            return False
    return True


def flatten_one_level(tree: Any) -> tuple[tuple, Any]:
    """The children and node data of ``tree``'s root node.

    Args:
        tree: a pytree whose root is a node.

    Returns:
        ``(children, node_data)``: children as a tuple, in flattening order.

    Raises:
        ValueError: if ``tree`` is a leaf.

    Example:
        >>> flatten_one_level({"b": 1, "a": (2, 3)})
        (((2, 3), 1), ('a', 'b'))
    """
    handler = _lookup(type(tree))
    if handler is None:
        raise ValueError(f"flatten_one_level: can't tree-flatten type {type(tree)!r} (a leaf)")
    children, aux = handler.flatten(tree)
    return tuple(children), aux


def tree_transpose(
    outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None, pytree_to_transpose: Any
) -> Any:
    """Swap the outer and inner levels of a tree of trees: an ``outer`` of ``inner``s
    becomes an ``inner`` of ``outer``s (a list of pairs to a pair of lists).

    Args:
        outer_treedef: the structure of the outer level.
        inner_treedef: the structure of each inner tree; None: that of the first one.
        pytree_to_transpose: a tree of ``outer_treedef`` whose leaves are inner trees.

    Returns:
        The transposed tree.

    Raises:
        ValueError: if the outer level does not have ``outer_treedef``'s structure.
        TypeError: if an inner tree is not exactly of ``inner_treedef``'s structure (JAX's).

    Example:
        >>> tree_transpose(tree_structure([0, 0]), tree_structure((0, 0)), [(1, 2), (3, 4)])
        ([1, 3], [2, 4])
    """
    inners = outer_treedef.flatten_up_to(pytree_to_transpose)
    if inner_treedef is None:
        if not inners:
            raise ValueError("tree_transpose: inner_treedef=None needs at least one inner tree")
        inner_treedef = tree_structure(inners[0])
    for t in inners:  # each inner tree exactly of inner_treedef, as JAX checks (a deeper one
        got = tree_structure(t)  # was taken up to inner_treedef's leaves)
        if got != inner_treedef:
            raise TypeError(
                f"tree_transpose: an inner tree has structure {got}, not inner_treedef "
                f"{inner_treedef}"
            )
    columns = [inner_treedef.flatten_up_to(t) for t in inners]
    per_inner_leaf = [
        outer_treedef.unflatten([col[j] for col in columns])
        for j in range(inner_treedef.num_leaves)
    ]
    return inner_treedef.unflatten(per_inner_leaf)


def tree_broadcast(prefix_tree: Any, full_tree: Any, is_leaf: IsLeafFn | None = None) -> Any:
    """``prefix_tree`` with each leaf repeated over the corresponding subtree of
    ``full_tree``: a tree of ``full_tree``'s structure. Unlike :func:`broadcast_prefix`
    (``vmap``'s ``in_axes``, where ``None`` is a leaf), ``None`` here is a node, as in JAX.

    Args:
        prefix_tree: a tree prefix of ``full_tree``.
        full_tree: the tree whose structure the result has.
        is_leaf: optional predicate marking extra leaves.

    Returns:
        The broadcast tree.

    Raises:
        ValueError: if ``prefix_tree`` is not a prefix of ``full_tree``.

    Example:
        >>> tree_broadcast((0, 1), ([1, 2], {"a": 3}))
        ([0, 0], {'a': 1})
    """
    leaves, prefix_def = tree_flatten(prefix_tree, is_leaf)
    subtrees = prefix_def.flatten_up_to(full_tree)
    return prefix_def.unflatten(
        [tree_map(lambda _, v=v: v, sub, is_leaf=is_leaf) for v, sub in zip(leaves, subtrees)]
    )
