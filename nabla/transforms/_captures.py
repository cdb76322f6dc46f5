"""Where a compiled function finds the tensors it captured, so each call reads them anew.

A tensor that a function reaches without receiving it as an argument (a closure variable, a
global, a module's parameter through ``self``) is *captured state*: ``compile`` makes it an
input of the plan and reads it at every call, as ``torch.compile`` makes parameters graph
inputs. An in-place update (``opt.step()``, ``load_state_dict``, ``x[i] = v``) keeps the
tensor object and changes its value, so holding the object is enough for those. A *rebound
name* (``w = new_tensor``) replaces the object: to see it, the trace remembers the path from
the function to each captured tensor (a ``Path``) and follows it again at each call.

The search is a walk over plain Python objects: a function's closure cells, defaults and
the globals its code names, a bound method's ``__self__``, ``functools.partial`` parts, an
object's instance and slot attributes, the items of dicts, lists, tuples and deques, the
attributes of a Python module or class that the code met so far names (``cfg.W``,
``self.W`` for a class attribute), and a tensor's ``.grad``. It is bounded in depth and in
objects visited, except inside a module's own tables (parameters, buffers, submodules):
those steps are free, so a parameter ten modules deep is found however much other Python
data the model holds. Every name a captured tensor is found under is kept, up to
``_MAX_PATHS`` (a tied weight has several, a list of one tensor per layer as many as it is
long): when they no longer lead to one tensor, the function is traced again. A path
keeps the lengths of the lists, tuples and dicts it indexes: one that grew or shrank (a
captured list of tensors the function iterates over) retraces too. A closure variable or
global that is None has no path to follow: ``ModuleGuard`` watches those names.
"""

from __future__ import annotations

import collections
import functools
import types
from typing import NamedTuple

import numpy as np

from ..runtime.tensor import Tensor

__all__ = [
    "Path",
    "find_paths",
    "find_modules",
    "ModuleGuard",
    "walk",
    "plain_object",
    "KEYED_ARRAY_BYTES",
    "KEYED_DEPTH",
]

# the walk stops at this depth and after this many objects (a trace-time cost only); steps
# inside a module's tables count for neither
_MAX_DEPTH = 8
_MAX_VISITS = 20_000
_MAX_PATHS = 16  # names kept per captured tensor (a tied weight's, a list of one tensor)
_ATOMS = (str, bytes, int, float, complex, bool, type(None), range, slice)
_SIZED = (list, tuple, dict, collections.deque)  # a path's container lengths are kept
_MODULE_TABLES = ("_parameters", "_buffers", "_modules")


class Path(NamedTuple):
    """How to reach one captured object from the compiled function: a tuple of steps,
    each ``(kind, key)`` with kind ``"attr"``, ``"item"``, ``"cell"`` (a function's closure
    cell ``key``) or ``"global"`` (a function's global ``key``). ``sizes``: for each step,
    the length of the list, tuple or dict it indexes as traced (None for other steps), so
    that a container the function may iterate over (``sum(w * x for w in ws)``) is seen
    to grow or shrink."""

    steps: tuple
    sizes: tuple = ()

    def measured(self, root) -> Path:
        """This path with the lengths of the containers it indexes, as they are now."""
        sizes, obj = [], root
        for step in self.steps:
            sizes.append(len(obj) if isinstance(obj, _SIZED) else None)
            obj = Path((step,)).follow(obj)
        return Path(self.steps, tuple(sizes))

    def follow(self, root):
        """The object this path leads to from ``root`` now; raises LookupError if a step
        no longer exists, or a container along it has another length than traced."""
        obj = root
        sizes = self.sizes or (None,) * len(self.steps)
        try:
            for (kind, key), size in zip(self.steps, sizes):
                if size is not None and len(obj) != size:
                    raise LookupError(f"a container along it now holds {len(obj)}, not {size}")
                if kind == "attr":
                    obj = getattr(obj, key)
                elif kind == "item":
                    obj = obj[key]
                elif kind == "cell":
                    obj = obj.__closure__[key].cell_contents
                else:
                    obj = obj.__globals__[key]
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as e:
            raise LookupError(str(e)) from None
        return obj

    def describe(self, fun_name: str) -> str:
        """The path in Python spelling, for messages (``f.<closure m>._parameters['w']``)."""
        out = fun_name
        for kind, key in self.steps:
            if kind == "attr":
                out += f".{key}"
            elif kind == "item":
                out += f"[{key!r}]"
            elif kind == "cell":
                out += f".<closure {key}>"
            else:
                out += f".<global {key}>"
        return out


def _one(step, child):
    return ((step,), child, False)


def _function_children(fn, names):
    code = fn.__code__
    names.update(_code_names(code))
    for i, cell in enumerate(fn.__closure__ or ()):
        try:
            yield _one(("cell", i), cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    g = fn.__globals__
    for name in _code_names(code):
        if name in g:
            yield _one(("global", name), g[name])
    yield _one(("attr", "__defaults__"), fn.__defaults__)
    yield _one(("attr", "__kwdefaults__"), fn.__kwdefaults__)


def _method_children(m, names):
    if isinstance(m.__func__, types.FunctionType):  # (read before ``self``'s attributes)
        names.update(_code_names(m.__func__.__code__))
    yield _one(("attr", "__self__"), m.__self__)
    yield _one(("attr", "__func__"), m.__func__)


def _partial_children(p, names):
    yield _one(("attr", "func"), p.func)
    yield _one(("attr", "args"), p.args)
    yield _one(("attr", "keywords"), p.keywords)


def _items(d: dict) -> list:
    """``d``'s items now, read from the dict's own storage in C. (An OrderedDict's
    ``items()`` hashes each key, which may run Python code and let another thread mutate
    it: the walk of a compile's first call failed.) Listing makes a tuple per item, and a
    garbage collection those allocations start may run a finalizer that lets another
    thread in and change ``d``: then it is read again."""
    for _ in range(7):
        try:
            return list(dict.items(d))
        except RuntimeError:  # ("dictionary keys changed during iteration")
            continue
    return list(dict.items(d))


def _dict_children(d, names):
    for k, v in _items(d):
        yield _one(("item", k), v)


def _sequence_children(seq, names):
    for _ in range(8):  # a deque another thread changes meanwhile is read again
        try:
            items = list(seq)
            break
        except RuntimeError:
            continue
    else:
        items = []
    for i, v in enumerate(items):
        yield _one(("item", i), v)


_LIBRARY = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)


def _namespace_children(ns, names):
    """A Python module's or a class's attributes that code met so far reads (``cfg.W``):
    not the whole namespace (a library's), and not the modules, classes and functions in
    it."""
    table = vars(ns)
    for name in list(names):
        if name in table and not isinstance(table[name], _LIBRARY):
            yield _one(("attr", name), table[name])


def _tensor_children(t, names):
    grad = t._impl.grad
    if grad is not None:  # ``p.grad``: a new tensor after each ``zero_grad(); backward()``
        yield (("attr", "grad"),), grad, True


@functools.lru_cache(maxsize=1024)
def _slot_names(cls) -> tuple:
    out = []
    for c in cls.__mro__:
        slots = c.__dict__.get("__slots__", ())
        out += [slots] if isinstance(slots, str) else list(slots)
    return tuple(n for n in out if n not in ("__dict__", "__weakref__"))


def _object_children(obj, names):
    cls = type(obj)
    for meth in ("forward", "__call__"):  # what the object's own code reads (``self.W``)
        f = getattr(cls, meth, None)
        if isinstance(f, types.FunctionType):
            names.update(_code_names(f.__code__))
    d = getattr(obj, "__dict__", None)
    own = cls.__module__.startswith("nabla.")
    if isinstance(d, dict):
        if _is_module(obj):  # its tables' entries: free steps (a parameter at any depth)
            for table in _MODULE_TABLES:
                for k, v in _items(d.get(table, _NONE)):
                    yield (("attr", table), ("item", k)), v, True
            skip = _TABLES
        else:
            skip = ()
        # nabla's own objects (a compiled function, an optimizer) are walked through their
        # public attributes only: their caches hold old tensors
        own = own and "_parameters" not in d
        for k, v in _items(d):
            if isinstance(k, str) and k not in skip and not (own and k.startswith("_")):
                yield _one(("attr", k), v)
        done = set(d)
        for c in cls.__mro__[:-1]:  # a class attribute the code reads through the object
            table = vars(c)
            for name in names & table.keys():
                if name not in done and isinstance(table[name], Tensor):
                    done.add(name)
                    yield _one(("attr", name), table[name])
    for name in _slot_names(cls):
        if not (own and name.startswith("_")):
            try:
                yield _one(("attr", name), getattr(obj, name))
            except AttributeError:  # an unset slot
                continue
    try:  # functools.wraps: the function inside
        wrapped = getattr(obj, "__wrapped__", None)
    except Exception:  # noqa: BLE001 - a class's own __getattr__ may raise anything (KeyError)
        wrapped = None
    if wrapped is not None and (d is None or "__wrapped__" not in d):
        yield _one(("attr", "__wrapped__"), wrapped)


# how the walk descends into each kind of object (the first matching type wins)
_WALKERS = (
    (Tensor, _tensor_children),
    (types.FunctionType, _function_children),
    (types.MethodType, _method_children),
    (functools.partial, _partial_children),
    (dict, _dict_children),
    (list | tuple | collections.deque, _sequence_children),
    (types.ModuleType | type, _namespace_children),
    (types.BuiltinFunctionType, lambda obj, names: ()),
)


def _children(obj, names: set):
    """``(steps, child, free)`` for each child of ``obj`` the walk descends into: ``steps``
    from ``obj`` to it, ``free`` for a step inside a module's tables. ``names`` collects the
    names the code met so far reads (a namespace's attributes are walked only for them)."""
    for kind, walk in _WALKERS:
        if isinstance(obj, kind):
            return walk(obj, names)
    return _object_children(obj, names)


@functools.lru_cache(maxsize=1024)
def _code_names(code) -> tuple:
    """The global names a code object (and the code nested in it) may read."""
    names = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.extend(_code_names(c))
    return tuple(dict.fromkeys(names))


def walk(root, again: bool = False):
    """``(steps, object, cost)`` for every object reachable from ``root``, each once and by
    one of its cheapest paths first (``cost``: its steps outside modules' tables, which go
    first): up to ``_MAX_DEPTH`` such steps and about ``_MAX_VISITS`` objects. Past that
    many only modules and tensors are entered (their tables' and ``.grad``'s steps are
    free). NumPy values are reached but not entered. ``again``: a tensor met again by
    another path is yielded again (its other names), not entered."""
    names: set = set()
    seen = {id(root)}
    queue = collections.deque([((), root, 0)])
    visits = 0
    while queue:
        steps, obj, depth = queue.popleft()
        if visits >= _MAX_VISITS and not (isinstance(obj, Tensor) or _is_module(obj)):
            continue
        for sub, child, free in _children(obj, names):
            if isinstance(child, _ATOMS):
                continue
            path = steps + sub
            cid = id(child)
            if cid in seen:
                if again and isinstance(child, Tensor):
                    yield path, child, depth if free else depth + 1
                continue
            cost = depth if free else depth + 1
            if cost > _MAX_DEPTH:
                continue
            if not free:
                if visits >= _MAX_VISITS:
                    continue
                visits += 1
            seen.add(cid)
            yield path, child, cost
            if type(child).__module__ != "numpy":
                # (0-1 breadth-first: a free step's child before the next depth's)
                (queue.appendleft if free else queue.append)((path, child, cost))


def find_paths(root, targets: dict) -> dict:
    """Search from ``root`` for the objects in ``targets`` (id -> object): returns
    id -> tuple of ``Path`` for each one found, the cheapest first, with up to
    ``_MAX_PATHS`` names for an object reached by several (unreached ones are left out).
    Once every target is found, the walk goes on one step further for their other names,
    then stops."""
    found: dict = {}
    if not targets:
        return found
    stop = None
    for steps, obj, cost in walk(root, again=True):
        if stop is not None and cost > stop:
            break
        if targets.get(id(obj)) is obj:
            got = found.setdefault(id(obj), [])
            if len(got) < _MAX_PATHS:
                got.append(Path(steps).measured(root))
            if stop is None and len(found) == len(targets):
                stop = cost + 1
    return {k: tuple(v) for k, v in found.items()}


def find_modules(root) -> dict:
    """The modules (objects with parameter tables and a ``training`` flag, as
    ``nabla.nn.Module``) reachable from ``root`` by the same walk, submodules included
    (their train/eval mode is Python state a compiled function reads while traced): id ->
    ``(module, Path)``, ``root`` itself with no path."""
    found = {id(root): (root, None)} if _is_module(root) else {}
    for steps, obj, _ in walk(root):
        if _is_module(obj):
            found[id(obj)] = (obj, Path(steps))
    return found


def _none_names(fun) -> tuple:
    """The function's closure variables and the globals its code names that are None now:
    ``if B is not None: x = x + B`` was traced one way, and a tensor or module bound to
    ``B`` later must trace it again (its tensors and modules are found by their paths,
    but a None is not a path's end)."""
    fn = fun.__func__ if isinstance(fun, types.MethodType) else fun
    if not isinstance(fn, types.FunctionType):
        return ()
    out = []
    for i, cell in enumerate(fn.__closure__ or ()):
        try:
            if cell.cell_contents is None:
                out.append(Path((("cell", i),)))
        except ValueError:  # an empty cell
            continue
    g = fn.__globals__
    out += [Path((("global", n),)) for n in _code_names(fn.__code__) if n in g and g[n] is None]
    if fn is not fun:  # (a bound method's paths start at the method)
        out = [Path((("attr", "__func__"), *p.steps)) for p in out]
    return tuple(out)


def _is_module(obj) -> bool:
    d = getattr(obj, "__dict__", None)
    return isinstance(d, dict) and "_parameters" in d and isinstance(d.get("training"), bool)


_VALUES = (str, bytes, int, float, complex, bool, type(None), range)  # keyed by value
_NONE: dict = {}

# a module's own tables: its tensors are read anew at each call; the rest of its state is
# Python the trace read
_TABLES = ("_parameters", "_buffers", "_modules", "_frozen")


def _snapshot(dicts) -> tuple:
    """The Python state of the modules whose ``__dict__`` are ``dicts``, as it stands: each
    one's attribute values (``training``, a dropout's ``p``, an activation's choice) then
    its submodules. Cheap to take and to compare at every call (``_same``); an attribute
    added or removed changes the lengths. (Frozen names are not in it: freezing sets the
    parameter's ``requires_grad``, which the trace's key follows.)"""
    return tuple([(*d.values(), *d.get("_modules", _NONE).values()) for d in dicts])


def _same(a: tuple, b: tuple) -> bool:
    """Snapshots equal: compared in C, the same objects at once; an attribute whose
    comparison fails (an array) counts as changed."""
    try:
        return a == b
    except Exception:  # noqa: BLE001 - an attribute that does not compare: changed
        return False


_CONTAINERS = (list, dict, set)  # changed in place: keyed (and compared) by their contents
_MAX_KEYED_ITEMS = 256  # a longer container (a tokenizer's table) by identity and length
# bytes of a NumPy array keyed by its contents (a mask, scales), here and in the cache key
# of a module passed as an argument (``nn.module``); a larger one by identity
KEYED_ARRAY_BYTES = 1 << 16
KEYED_DEPTH = 4  # containers nested deeper by identity (and no cycle is followed)


def plain_object(value) -> bool:
    """An instance of a plain Python class (a config namespace or dataclass): its
    attributes are Python state a trace may read, changed in place (``m.cfg.scale = 5``)."""
    d = getattr(value, "__dict__", None)
    return (
        isinstance(d, dict)
        and not isinstance(value, type | types.ModuleType | types.FunctionType | Tensor)
        and not callable(value)
        and not _is_module(value)
        and type(value).__module__ != "numpy"
    )


class _Same:
    """An object in a key by identity, held: a key of its bare ``id`` matched another
    object Python later gave the same id, once the first was freed (a module's activation
    replaced by a new lambda hit the old lambda's trace)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        return type(other) is _Same and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _keyed(value, depth: int = 0):
    """An attribute as the key holds it: numbers and strings by value; NumPy arrays of up
    to ``KEYED_ARRAY_BYTES`` bytes by their contents; tuples, lists, dicts, sets and a plain
    object's attributes by their items, each keyed so (``self.scales[0] = 2.0`` and
    ``self.cfg.scale = 5.0`` change the key), except a container of more than
    ``_MAX_KEYED_ITEMS`` or one nested deeper than ``KEYED_DEPTH`` (by identity and
    length: the snapshot is taken at every call); any other object, a larger array too, by
    identity (a submodule, a callable)."""
    if isinstance(value, _VALUES):
        return ("=", type(value), repr(value) if isinstance(value, float) else value)
    if isinstance(value, np.ndarray) and value.nbytes <= KEYED_ARRAY_BYTES:
        # a small array changed in place (``m.mask[1] = 3``): by its contents
        return ("=", np.ndarray, value.dtype.str, value.shape, value.tobytes())
    if depth < KEYED_DEPTH and plain_object(value):
        value_dict = value.__dict__
        if len(value_dict) <= _MAX_KEYED_ITEMS:
            items = tuple((k, _keyed(v, depth + 1)) for k, v in value_dict.items())
            return ("=", type(value), id(value), items)
    if not isinstance(value, tuple | list | dict | set):
        return ("is", _Same(value))
    if len(value) > _MAX_KEYED_ITEMS or depth >= KEYED_DEPTH:
        return ("is", _Same(value), len(value))
    if isinstance(value, tuple | list):
        return ("=", type(value), tuple(_keyed(v, depth + 1) for v in value))
    if isinstance(value, dict):
        return ("=", dict, tuple((k, _keyed(v, depth + 1)) for k, v in _items(value)))
    return ("=", set, frozenset(_keyed(v, depth + 1) for v in value))


class ModuleGuard:
    """What a compiled function's trace read of the modules it reaches, besides their
    tensors: their train/eval mode, their other Python attributes and which submodules
    they hold (as ``torch.compile`` guards on them), and which of the function's closure
    variables and globals were None (``_none_names``). ``key()`` is part of the cache key
    and is the same object while nothing changed, so a trace is never served to a model
    whose dropout rate, activation or submodule was replaced after it was traced.

    Changes are seen by taking a snapshot of the modules' attribute values at each call
    (``_snapshot``, ~0.4 us a module); the modules themselves are found again (the whole
    walk) only when it differs, or when a module the function reaches through its closure
    or globals was rebound (each such root is reached by its ``Path``)."""

    __slots__ = ("fun", "modules", "dicts", "roots", "contained", "snapshot", "nones", "_key")

    def __init__(self, fun):
        self.fun = fun
        self._find()

    @property
    def watched(self) -> bool:
        """Whether :meth:`key` has anything to follow (modules, or names that were None)."""
        return bool(self.modules or self.nones)

    def _find(self):
        self.nones = _none_names(self.fun)
        found = find_modules(self.fun)
        self.modules = tuple(m for m, _ in found.values())
        inner = {id(s) for m in self.modules for s in m.__dict__.get("_modules", _NONE).values()}
        self.roots = tuple(
            (path, m) for i, (m, path) in found.items() if i not in inner and m is not self.fun
        )
        self.dicts = [m.__dict__ for m in self.modules]
        # lists, dicts and sets among the attributes: changed in place, the snapshot holds
        # their contents too (most modules have none)
        self.contained = tuple(
            (d, k)
            for d in self.dicts
            for k, v in d.items()
            if k not in _TABLES and (isinstance(v, _CONTAINERS + (np.ndarray,)) or plain_object(v))
        )
        self.snapshot = self._snapshot()
        self._key = tuple(
            (
                id(m),
                type(m),
                tuple((k, _keyed(v)) for k, v in d.items() if k not in _TABLES),
                tuple(map(id, d.get("_modules", _NONE).values())),
                frozenset(d.get("_frozen", ())),
            )
            for m, d in zip(self.modules, self.dicts)
        ) + (("None", tuple(p.steps for p in self.nones)),)

    def key(self):
        """The modules' state (and which names were None) for the cache key (None with
        neither); the same object until something in it changed."""
        if not self.modules and not self.nones:
            return None
        for path in self.nones:  # (``B = None`` at the trace, a tensor or module now)
            try:
                if path.follow(self.fun) is not None:
                    self._find()
                    return self._key
            except LookupError:
                pass
        if not self.modules:
            return self._key
        for path, m in self.roots:
            try:
                if path.follow(self.fun) is not m:
                    self._find()
                    return self._key
            except LookupError:
                self._find()
                return self._key
        if not _same(self._snapshot(), self.snapshot):
            self._find()
        return self._key

    def _snapshot(self) -> tuple:
        got = _snapshot(self.dicts)
        if self.contained:
            got += (tuple(_keyed(d.get(k)) for d, k in self.contained),)
        return got
