"""Where a compiled function finds the tensors it captured, so each call reads them anew.

A tensor that a function reaches without receiving it as an argument (a closure variable, a
global, a module's parameter through ``self``) is *captured state*: ``compile`` makes it an
input of the plan and reads it at every call, as ``torch.compile`` makes parameters graph
inputs. An in-place update (``opt.step()``, ``load_state_dict``, ``x[i] = v``) keeps the
tensor object and changes its value, so holding the object is enough for those. A *rebound
name* (``w = new_tensor``) replaces the object: to see it, the trace remembers the path from
the function to each captured tensor (a ``Path``) and follows it again at each call.

The search is a bounded walk over plain Python objects: a function's closure cells and the
globals its code names, a bound method's ``__self__``, ``functools.partial`` parts, an
object's instance attributes, and the items of dicts, lists and tuples.
"""

from __future__ import annotations

import functools
import types
from typing import NamedTuple

__all__ = ["Path", "find_paths", "find_modules", "ModuleGuard"]

# the walk stops at this depth and after this many objects (a trace-time cost only)
_MAX_DEPTH = 8
_MAX_VISITS = 20_000
_ATOMS = (str, bytes, int, float, complex, bool, type(None), range, slice)


class Path(NamedTuple):
    """How to reach one captured object from the compiled function: a tuple of steps,
    each ``(kind, key)`` with kind ``"attr"``, ``"item"``, ``"cell"`` (a function's closure
    cell ``key``) or ``"global"`` (a function's global ``key``)."""

    steps: tuple

    def follow(self, root):
        """The object this path leads to from ``root`` now; raises LookupError if a step
        no longer exists."""
        obj = root
        try:
            for kind, key in self.steps:
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


def _function_children(fn):
    for i, cell in enumerate(fn.__closure__ or ()):
        try:
            yield ("cell", i), cell.cell_contents
        except ValueError:  # an empty cell
            continue
    g = fn.__globals__
    for name in _code_names(fn.__code__):
        if name in g:
            yield ("global", name), g[name]


def _method_children(m):
    yield ("attr", "__self__"), m.__self__
    yield ("attr", "__func__"), m.__func__


def _partial_children(p):
    yield ("attr", "func"), p.func
    yield ("attr", "args"), p.args
    yield ("attr", "keywords"), p.keywords


def _dict_children(d):
    for k, v in list(d.items()):
        if isinstance(k, str | int):
            yield ("item", k), v


def _sequence_children(seq):
    for i, v in enumerate(seq):
        yield ("item", i), v


def _object_children(obj):
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):
        # nabla's own objects (a compiled function, an optimizer) are walked through their
        # public attributes only: their caches hold old tensors; a module's parameter
        # tables (``_parameters``) are walked
        own = type(obj).__module__.startswith("nabla.") and "_parameters" not in d
        for k, v in list(d.items()):
            if isinstance(k, str) and not (own and k.startswith("_")):
                yield ("attr", k), v
    wrapped = getattr(obj, "__wrapped__", None)  # functools.wraps: the function inside
    if wrapped is not None and (d is None or "__wrapped__" not in d):
        yield ("attr", "__wrapped__"), wrapped


# how the walk descends into each kind of object (the first matching type wins)
_WALKERS = (
    (types.FunctionType, _function_children),
    (types.MethodType, _method_children),
    (functools.partial, _partial_children),
    (dict, _dict_children),
    (list | tuple, _sequence_children),
    (types.ModuleType | type | types.BuiltinFunctionType, lambda obj: ()),
)


def _children(obj):
    """(step, child) pairs of ``obj`` the walk descends into."""
    for kind, walk in _WALKERS:
        if isinstance(obj, kind):
            return walk(obj)
    return _object_children(obj)


@functools.lru_cache(maxsize=1024)
def _code_names(code) -> tuple:
    """The global names a code object (and the code nested in it) may read."""
    names = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.extend(_code_names(c))
    return tuple(dict.fromkeys(names))


def _walk(root):
    """Breadth-first ``(steps, object)`` pairs for every object reachable from ``root``
    (each once, the shortest steps first), up to ``_MAX_DEPTH`` steps and about
    ``_MAX_VISITS`` objects; NumPy values are reached but not entered."""
    seen = {id(root)}
    frontier = [((), root)]
    visits = 0
    for _ in range(_MAX_DEPTH):
        nxt = []
        for steps, obj in frontier:
            for step, child in _children(obj):
                cid = id(child)
                if cid in seen or isinstance(child, _ATOMS):
                    continue
                seen.add(cid)
                visits += 1
                path = steps + (step,)
                yield path, child
                if type(child).__module__ != "numpy" and visits <= _MAX_VISITS:
                    nxt.append((path, child))
            if visits > _MAX_VISITS:
                return
        if not nxt:
            return
        frontier = nxt


def find_paths(root, targets: dict) -> dict:
    """Search from ``root`` for the objects in ``targets`` (id -> object): returns
    id -> ``Path`` for each one found (the shortest path; unreached ones are left out)."""
    found: dict = {}
    if not targets:
        return found
    for steps, obj in _walk(root):
        if targets.get(id(obj)) is obj:
            found[id(obj)] = Path(steps)
            if len(found) == len(targets):
                break
    return found


def find_modules(root) -> tuple:
    """The modules (objects with parameter tables and a ``training`` flag, as
    ``nabla.nn.Module``) reachable from ``root`` by the same walk, submodules included:
    their train/eval mode is Python state a compiled function reads while traced."""
    found = [root] if _is_module(root) else []
    found.extend(obj for _, obj in _walk(root) if _is_module(obj))
    return tuple(found)


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


def _keyed(value):
    """An attribute as the key holds it: numbers, strings and tuples of them by value,
    any other object by identity (a submodule, a callable)."""
    if isinstance(value, _VALUES):
        return ("=", type(value), repr(value) if isinstance(value, float) else value)
    if isinstance(value, tuple) and all(isinstance(v, _VALUES) for v in value):
        return ("=", tuple, tuple(_keyed(v) for v in value))
    return ("is", id(value))


class ModuleGuard:
    """What a compiled function's trace read of the modules it reaches, besides their
    tensors: their train/eval mode, their other Python attributes and which submodules
    they hold (as ``torch.compile`` guards on them). ``key()`` is part of the cache key
    and is the same object while nothing changed, so a trace is never served to a model
    whose dropout rate, activation or submodule was replaced after it was traced.

    Changes are seen by taking a snapshot of the modules' attribute values at each call
    (``_snapshot``, ~0.4 us a module); the modules themselves are found again (the whole
    walk) only when it differs, or when a module the function reaches through its closure
    or globals was rebound (each such root is reached by its ``Path``)."""

    __slots__ = ("fun", "modules", "dicts", "roots", "snapshot", "_key")

    def __init__(self, fun):
        self.fun = fun
        self._find()

    def _find(self):
        self.modules = find_modules(self.fun)
        inner = {id(s) for m in self.modules for s in m.__dict__.get("_modules", _NONE).values()}
        roots = {id(m): m for m in self.modules if id(m) not in inner and m is not self.fun}
        paths = find_paths(self.fun, roots)
        self.roots = tuple((paths[i], m) for i, m in roots.items() if i in paths)
        self.dicts = [m.__dict__ for m in self.modules]
        self.snapshot = _snapshot(self.dicts)
        self._key = tuple(
            (
                id(m),
                type(m),
                tuple((k, _keyed(v)) for k, v in d.items() if k not in _TABLES),
                tuple(map(id, d.get("_modules", _NONE).values())),
                frozenset(d.get("_frozen", ())),
            )
            for m, d in zip(self.modules, self.dicts)
        )

    def key(self):
        """The modules' state for the cache key (None without modules); the same object
        until something in it changed."""
        if not self.modules:
            return None
        for path, m in self.roots:
            try:
                if path.follow(self.fun) is not m:
                    self._find()
                    return self._key
            except LookupError:
                self._find()
                return self._key
        if not _same(_snapshot(self.dicts), self.snapshot):
            self._find()
        return self._key
