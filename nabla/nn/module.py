"""``Module``: a container of parameters, buffers and submodules that is also a pytree.

Every subclass is registered as a pytree node when it is defined, so ``nb.grad``, ``nb.vmap``,
``nb.compile`` and ``nb.tree_map`` take modules directly. A module's leaves are its tensors
(parameters first, then buffers, then each submodule's leaves, in assignment order); everything
else set on it (ints, strings, ``training``, callables) is static data kept in the treedef.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..core.dtypes import DType, to_dtype
from ..core.pytree import GetAttrKey, register_pytree_node, tree_flatten
from ..core.state import STATE
from ..ops import creation, transfer, unary
from ..ops._util import device_arg, device_like
from ..ops.indexing import fits_in_place, rebind
from ..ops.spmd import reshard_to
from ..runtime.tensor import HookHandle, Tensor, TensorSet, foreign_array, owned, realize
from ..transforms._captures import KEYED_ARRAY_BYTES, KEYED_DEPTH, plain_object
from ..transforms.autodiff import detach

__all__ = [
    "Module",
    "ModuleDict",
    "ModuleList",
    "ParameterDict",
    "ParameterList",
    "Sequential",
    "loaded_tensor",
    "named_leaves",
    "rebind",
    "trainable_mask",
    "zero_grads",
]

_INTERNAL = ("_parameters", "_buffers", "_modules", "_frozen")


def _parametrization(d: dict, name: str):
    """The ``ParametrizationList`` computing attribute ``name`` of the module whose
    ``__dict__`` is ``d`` (nn/parametrize.py), or None."""
    modules = d.get("_modules")
    plists = modules.get("parametrizations") if modules else None
    if plists is None or name == "parametrizations":
        return None
    return plists.__dict__["_modules"].get(name)


class _Attributes:
    """A snapshot of a plain object's attributes (a config namespace a module holds), equal
    to that object while its attributes are equal to these."""

    __slots__ = ("cls", "items")

    def __init__(self, cls, items: dict):
        self.cls, self.items = cls, items

    def __eq__(self, other) -> bool:
        if isinstance(other, _Attributes):
            return self.cls is other.cls and _same(self.items, other.items)
        if type(other) is not self.cls or not plain_object(other):
            return False
        live = vars(other)
        return live.keys() == self.items.keys() and all(_same(self.items[k], live[k]) for k in live)

    __hash__ = None


def _snapshot(v, depth: int = 0):
    """``v`` with the lists, dicts, sets and NumPy arrays in it copied and a plain object's
    attributes taken (other objects kept): what a compiled function's cache key keeps of
    a module's static attribute, so that a later in-place change (``m.scales[0] = 10``,
    ``m.cfg.scale = 5``) makes the next call's key differ."""
    if isinstance(v, np.ndarray):  # (a larger one by identity, as compile's module guard)
        return v.copy() if v.nbytes <= KEYED_ARRAY_BYTES else v
    if depth > KEYED_DEPTH:  # (deeper values as they are; no cycle is followed)
        return v
    if type(v) in (list, set):
        return type(v)(_snapshot(x, depth + 1) for x in v)
    if type(v) is tuple:
        return tuple(_snapshot(x, depth + 1) for x in v)
    if type(v) is dict:
        return {k: _snapshot(x, depth + 1) for k, x in v.items()}
    if plain_object(v):
        return _Attributes(type(v), {k: _snapshot(x, depth + 1) for k, x in vars(v).items()})
    return v


def _changeable(v, depth: int = 0) -> bool:
    """Whether a hashable setting holds a plain object (whose attributes may change)."""
    if plain_object(v):
        return True
    if type(v) is tuple and depth <= KEYED_DEPTH:
        return any(_changeable(x, depth + 1) for x in v)
    return False


def _same(a, b) -> bool:
    if a is b:
        return True
    if isinstance(b, _Attributes):  # (a snapshot compares itself with a live object)
        a, b = b, a
    if isinstance(a, _Attributes):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):  # by value (NaN equal to NaN), as the key must be
        if a.shape != b.shape or a.dtype != b.dtype or a.nbytes > KEYED_ARRAY_BYTES:
            return False
        try:
            return bool(np.array_equal(a, b, equal_nan=True))
        except TypeError:  # (a dtype without NaN)
            return bool(np.array_equal(a, b))
    if type(a) in (list, tuple):  # item by item: an array in it compares as above
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # other values without a plain truth value
        return False


def _holds_tensor(value) -> bool:
    """Whether a plain list, tuple or dict attribute holds a tensor (one level deep)."""
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, list | tuple) and any(isinstance(v, Tensor) for v in value)


_HOOK_IDS = itertools.count()


class StateDictError(ValueError, RuntimeError):
    """What ``load_state_dict`` raises: a ``ValueError`` (as documented here) that is also
    PyTorch's ``RuntimeError``, so ``except RuntimeError`` in ported code catches it."""


@dataclass(slots=True, eq=False)  # equality and hash below: static values compare loosely
class _ModuleDef:
    """A module's static part (the treedef's node data): class, names and static attributes."""

    cls: type
    params: tuple
    buffers: tuple
    modules: tuple
    static: tuple  # of (name, value), in definition order
    frozen: frozenset

    def _key(self):
        return (self.cls, self.params, self.buffers, self.modules, self.frozen)

    def __eq__(self, other) -> bool:
        if not isinstance(other, _ModuleDef) or self._key() != other._key():
            return False
        if len(self.static) != len(other.static):
            return False
        return all(ka == kb and _same(a, b) for (ka, a), (kb, b) in zip(self.static, other.static))

    def __hash__(self) -> int:
        # a TypeError for an unhashable static value (a list, an array) or a plain object:
        # the treedef then hashes by its node types, and a cache key keeps a snapshot
        # (``__deepcopy__``) compared by value, never the user's object, which may change
        # in place
        if any(_changeable(v) for _, v in self.static):
            raise TypeError("a module setting whose attributes may change")
        return hash((self._key(), self.static))

    def __deepcopy__(self, memo) -> _ModuleDef:
        static = tuple((k, _snapshot(v)) for k, v in self.static)
        return _ModuleDef(self.cls, self.params, self.buffers, self.modules, static, self.frozen)

    def __repr__(self) -> str:
        def short(v) -> str:  # (a long setting, a table or an array, cut: this names a node)
            text = repr(v)
            return text if len(text) <= 40 else text[:37] + "..."

        settings = ", ".join(f"{k}={short(v)}" for k, v in self.static if k != "training")
        mode = "" if dict(self.static).get("training", True) else " (eval)"
        names = list(self.params + self.buffers + self.modules)
        return f"{self.cls.__name__}{names}{mode}" + (f" {{{settings}}}" if settings else "")


def _flatten(m: Module):
    d = m.__dict__
    children = (
        list(d["_parameters"].values())
        + list(d["_buffers"].values())
        + list(d["_modules"].values())
    )
    static = tuple((k, v) for k, v in d.items() if k not in _INTERNAL)
    aux = _ModuleDef(
        type(m),
        tuple(d["_parameters"]),
        tuple(d["_buffers"]),
        tuple(d["_modules"]),
        static,
        frozenset(d["_frozen"]),
    )
    return children, aux


def _flatten_with_keys(m: Module):
    children, aux = _flatten(m)
    names = aux.params + aux.buffers + aux.modules
    return [(GetAttrKey(n), c) for n, c in zip(names, children)], aux


def _unflatten(aux: _ModuleDef, children) -> Module:
    m = aux.cls.__new__(aux.cls)
    d = m.__dict__
    children = list(children)
    np_, nb_ = len(aux.params), len(aux.buffers)
    d["_parameters"] = dict(zip(aux.params, children[:np_]))
    d["_buffers"] = dict(zip(aux.buffers, children[np_ : np_ + nb_]))
    d["_modules"] = dict(zip(aux.modules, children[np_ + nb_ :]))
    d["_frozen"] = set(aux.frozen)
    d.update(aux.static)
    return m


def set_policy(owner: type, attrs: dict, settings: dict) -> None:
    """Store an execution policy's settings on the class that shares them.

    Args:
        owner: the class whose attributes hold the policy (one setting for all subclasses).
        attrs: each setting's name -> the class attribute holding it.
        settings: each setting's name -> its new value (None: unchanged).
    """
    for name, value in settings.items():
        if value is not None:
            setattr(owner, attrs[name], bool(value))


def get_policy(owner: type, attrs: dict) -> dict:
    """The execution policy :func:`set_policy` stores on ``owner``.

    Args:
        owner: the class whose attributes hold the policy.
        attrs: each setting's name -> the class attribute holding it.

    Returns:
        Each setting's name -> its value.
    """
    return {name: getattr(owner, attr) for name, attr in attrs.items()}


class Module:
    """Base class of layers and models: holds parameters, buffers and submodules.

    Assigning a float :class:`~nabla.Tensor` to an attribute registers it as a parameter
    (``requires_grad=True`` unless the module is frozen); :meth:`register_buffer` registers a
    tensor that is state but not trained (running statistics, masks); assigning a ``Module``
    (or a list of modules, which becomes a :class:`ModuleList`, or a dict of them, a
    :class:`ModuleDict`) registers a submodule; assigning anything but a module (or None) to
    a submodule's name is a ``TypeError``, as PyTorch's. Every other attribute is static
    configuration; a compiled function that takes the module retraces when one changes,
    also in place (``m.scales[0] = 10``, an array's element).

    A module is a pytree whose leaves are its tensors, so both training styles work::

        loss, grads = nb.value_and_grad(loss_fn)(model, x, y)   # grads: a Module like model
        loss = loss_fn(model, x, y); loss.backward()             # fills p.grad

    Subclasses call ``super().__init__()`` first and define ``forward``; ``module(x)`` calls it.

    Example:
        >>> class Affine(Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = nb.ones((2,))
        ...     def forward(self, x):
        ...         return x * self.w
        >>> [name for name, _ in Affine().named_parameters()]
        ['w']
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register_pytree_node(cls, _flatten, _unflatten, _flatten_with_keys)

    def __init__(self):
        d = self.__dict__
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_modules"] = {}
        d["_frozen"] = set()
        d["training"] = True

    # ------------------------------------------------------------------ attributes
    def _dicts(self):
        d = self.__dict__
        if "_parameters" not in d:
            raise RuntimeError(
                f"{type(self).__name__}: call super().__init__() before assigning attributes"
            )
        return d["_parameters"], d["_buffers"], d["_modules"]

    def __setattr__(self, name: str, value) -> None:
        plist = _parametrization(self.__dict__, name)
        if plist is not None and isinstance(value, Tensor):  # its originals, as PyTorch's
            plist.right_inverse(value)
            return
        params, buffers, modules = self._dicts()
        if (name in params or name in buffers) and not isinstance(value, Tensor | type(None)):
            # (an array over ``m.weight`` had unregistered the parameter: it stopped training)
            kind = "parameter" if name in params else "buffer"
            raise TypeError(
                f"{type(self).__name__}.{name}: cannot assign a {type(value).__name__} to "
                f"{kind} {name!r}: a Tensor (or None) is expected, e.g. nb.constant(value); "
                f"del the {kind} first to use the name otherwise"
            )
        if name in modules and not isinstance(value, Module | type(None)):
            # (PyTorch's error: the submodule and its parameters had silently gone)
            raise TypeError(
                f"{type(self).__name__}.{name}: cannot assign a {type(value).__name__} as "
                f"child module {name!r}: a Module (or None) is expected; del the submodule "
                "first to use the name otherwise"
            )
        if isinstance(value, list | tuple) and value and all(isinstance(v, Module) for v in value):
            value = ModuleList(value)
        elif type(value) is dict and value and all(isinstance(v, Module) for v in value.values()):
            value = ModuleDict(value)  # (as a list of modules becomes a ModuleList)
        elif _holds_tensor(value):
            raise TypeError(
                f"{type(self).__name__}.{name}: a {type(value).__name__} of tensors would be "
                "static data, not parameters; use nn.ParameterList/ParameterDict (as in "
                "PyTorch), assign each tensor to its own attribute, or use submodules in a "
                "ModuleList/ModuleDict"
            )
        if value is None and (name in buffers or name in params or name in modules):
            # (PyTorch's: a parameter, buffer or submodule reset to None keeps its slot, so
            # a value given again later keeps its place in the order)
            for table in (params, buffers, modules):
                if name in table:
                    table[name] = None
            return
        if STATE.writes is not None and isinstance(value, Tensor):
            old = params.get(name, buffers.get(name))
            if fits_in_place(old, value):
                # ``self.count = self.count + 1`` while ``compile`` traces: the tensor takes
                # the new value in place, which the compiled function then writes at every
                # call (a plain rebinding would be done once, at the trace, and go stale)
                rebind(old, value, item=True)
                return
        if isinstance(value, Tensor):
            target = buffers if name in buffers else params
        else:
            target = modules if isinstance(value, Module) else None
        for table in (params, buffers, modules):
            # a name given a value of its own kind again keeps its place in the order
            # (PyTorch's: parameters(), state_dict() and an optimizer's state by position)
            if name in table and table is not target:
                del table[name]
        if isinstance(value, Tensor) and name in buffers:
            buffers[name] = value
        elif isinstance(value, Tensor):
            self.__dict__.pop(name, None)
            if value in _FROZEN_PARAMETERS or _was_frozen(params.get(name)):
                # ``nn.Parameter(x, requires_grad=False)``, or a value given to a parameter
                # frozen with ``p.requires_grad = False``: a frozen parameter the optimizers
                # skip (making it trainable had trained it)
                self._frozen.add(name)
            if value.dtype.is_float and name not in self._frozen:
                impl = value._impl
                if not impl.requires_grad and impl.traced == {0} and STATE.recording is None:
                    # computed from parameters outside any transform (``m.w = nb.shard(m.w,
                    # mesh, spec)``): a parameter of its own, as ``nn.Parameter(x)`` (a
                    # value with history stopped training after the first optimizer step).
                    # A transform's traced value (``m.w = w`` under ``nb.grad``) stays.
                    value = detach(value)
                if not value.requires_grad:
                    value.requires_grad = True
            params[name] = value
            if self._in_pytorch_layout(name):
                PYTORCH_LAYOUT.add(value)
        elif isinstance(value, Module):
            self.__dict__.pop(name, None)
            modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def _in_pytorch_layout(self, name: str) -> bool:
        """Whether this module's parameter ``name`` is laid out as PyTorch's (see
        ``PYTORCH_LAYOUT``); a layer holding such weights says which."""
        return False

    def __setstate__(self, state) -> None:
        # ``copy.deepcopy`` and ``pickle`` fill ``__dict__`` directly: the copied parameters
        # get this module's layout marks again
        self.__dict__.update(state)
        for name, p in state.get("_parameters", {}).items():
            if p is not None and self._in_pytorch_layout(name):
                PYTORCH_LAYOUT.add(p)

    def __getattr__(self, name: str):
        d = self.__dict__
        for table in _INTERNAL[:3]:
            if table in d and name in d[table]:
                return d[table][name]
        plist = _parametrization(d, name)
        if plist is not None:  # a parametrized tensor (nn/parametrize.py): computed
            return plist()
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for table in self._dicts():
            if name in table:
                del table[name]
                hidden = self.__dict__.get("_non_persistent", frozenset())
                if name in hidden:  # (a name given again later is saved again)
                    if len(hidden) > 1:
                        object.__setattr__(self, "_non_persistent", hidden - {name})
                    else:
                        self.__dict__.pop("_non_persistent", None)
                return
        object.__delattr__(self, name)

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Register ``tensor`` as a buffer: module state that is not trained, saved in
        ``state_dict`` unless ``persistent=False`` (then it is still a pytree leaf, moved by
        ``to`` and seen by ``compile``, as PyTorch's non-persistent buffers).

        Args:
            name: the attribute name.
            tensor: a Tensor (or array-like, converted), or None to reserve the name.
            persistent: whether ``state_dict`` (and so checkpoints) include it.

        Raises:
            KeyError: if ``name`` is already a parameter or a submodule, or is not a
                non-empty string without a dot.
        """
        params, buffers, modules = self._dicts()
        _check_name(self, "register_buffer", name)
        if name in params or name in modules:
            raise KeyError(f"{type(self).__name__}: {name!r} is already a parameter or submodule")
        if tensor is not None and not isinstance(tensor, Tensor):
            tensor = creation.constant(np.asarray(tensor))
        self.__dict__.pop(name, None)
        buffers[name] = tensor
        hidden = set(self.__dict__.get("_non_persistent", ()))
        hidden.discard(name)
        if not persistent:
            hidden.add(name)
        # a static attribute (part of the treedef), absent while every buffer persists
        if hidden:
            object.__setattr__(self, "_non_persistent", frozenset(hidden))
        else:
            self.__dict__.pop("_non_persistent", None)

    def register_parameter(self, name: str, param) -> None:
        """Register ``param`` (a float tensor, or None to reserve the name) as a parameter,
        as PyTorch's ``register_parameter``; assigning ``self.name = tensor`` does the same.

        Args:
            name: the attribute name.
            param: the tensor, or None.

        Raises:
            KeyError: if ``name`` is already a buffer or a submodule, or is not a
                non-empty string without a dot.
            TypeError: for a value that is not a tensor or None.
        """
        params, buffers, modules = self._dicts()
        _check_name(self, "register_parameter", name)
        if name in buffers or name in modules:
            raise KeyError(f"{type(self).__name__}: {name!r} is already a buffer or submodule")
        if param is None:
            self.__dict__.pop(name, None)
            params[name] = None
            return
        if not isinstance(param, Tensor):
            raise TypeError(
                f"{type(self).__name__}.register_parameter: {name!r} must be a Tensor or None, "
                f"got {type(param).__name__}"
            )
        setattr(self, name, param)

    def register_module(self, name: str, module) -> None:
        """PyTorch's other name for :meth:`add_module`.

        Args:
            name: the attribute name.
            module: a Module, or None.
        """
        self.add_module(name, module)

    def add_module(self, name: str, module) -> None:
        """Register ``module`` (or None) as the submodule ``name`` (PyTorch's ``add_module``;
        ``self.name = module`` does the same).

        Args:
            name: the attribute name.
            module: a Module, or None.

        Raises:
            TypeError: for a value that is not a Module or None.
            KeyError: for a name that is not a non-empty string without a dot, or that is
                already an attribute of another kind (``training``), as PyTorch's.
        """
        _check_name(self, "add_module", name)
        if name not in self._dicts()[2] and name in self.__dict__:
            raise KeyError(f"{type(self).__name__}.add_module: attribute {name!r} already exists")
        if module is not None and not isinstance(module, Module):
            raise TypeError(
                f"{type(self).__name__}.add_module: {name!r} must be a Module or None, got "
                f"{type(module).__name__}"
            )
        if module is None:
            self._dicts()[2][name] = None
            return
        setattr(self, name, module)

    def get_submodule(self, target: str) -> Module:
        """The submodule at the dotted path ``target`` (``""``: this module), as PyTorch's.

        Args:
            target: a qualified name such as ``"layers.0.self_attn"``.

        Returns:
            The submodule.

        Raises:
            AttributeError: naming the first part of the path that is not a submodule.
        """
        m = self
        if not target:
            return m
        for i, part in enumerate(target.split(".")):
            child = m.__dict__["_modules"].get(part)
            if child is None:
                walked = ".".join(target.split(".")[:i]) or type(self).__name__
                raise AttributeError(f"{walked} has no submodule {part!r} (path {target!r})")
            m = child
        return m

    def get_parameter(self, target: str) -> Tensor:
        """The parameter at the dotted path ``target`` (``"layers.0.weight"``), as PyTorch's.

        Raises:
            AttributeError: naming the path when no such parameter exists.
        """
        return self._get_tensor(target, "_parameters", "parameter")

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at the dotted path ``target`` (``"bn.running_mean"``), as PyTorch's.

        Raises:
            AttributeError: naming the path when no such buffer exists.
        """
        return self._get_tensor(target, "_buffers", "buffer")

    def _get_tensor(self, target: str, table: str, what: str) -> Tensor:
        module_path, _, leaf = target.rpartition(".")
        owner = self.get_submodule(module_path)
        found = owner.__dict__[table].get(leaf)
        if found is None:
            raise AttributeError(f"{type(self).__name__} has no {what} {target!r}")
        return found

    # ------------------------------------------------------------------ calling
    def forward(self, *args, **kwargs):
        """The computation of the module; subclasses define it.

        Raises:
            NotImplementedError: on the base class.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    #: the execution policy (see :meth:`set_execution_policy`), shared by all modules
    _auto_realize_forward: bool = False
    _auto_realize_grads: bool = False
    #: each policy setting's class attribute
    _policy_attrs = {
        "auto_realize_toplevel_forward": "_auto_realize_forward",
        "auto_realize_backward_grads": "_auto_realize_grads",
    }
    _call_depth: int = 0  # module calls in progress (the outermost is the user's)

    def __call__(self, *args, **kwargs):
        d = self.__dict__
        pre, post = d.get("_forward_pre_hooks"), d.get("_forward_hooks")
        if not (pre or post or Module._auto_realize_forward):
            return self.forward(*args, **kwargs)
        for hook in list(pre.values()) if pre else ():
            got = hook(self, args)
            if got is not None:  # PyTorch's: new positional arguments
                args = got if isinstance(got, tuple) else (got,)
        Module._call_depth += 1
        try:
            out = self.forward(*args, **kwargs)
        finally:
            Module._call_depth -= 1
        for hook in list(post.values()) if post else ():
            got = hook(self, args, out)
            if got is not None:  # PyTorch's: a new output
                out = got
        if Module._auto_realize_forward and Module._call_depth == 0 and STATE.recording is None:
            pending = [t for t in tree_flatten(out)[0] if isinstance(t, Tensor)]
            if pending:
                realize(*pending)
        return out

    def register_forward_hook(self, hook) -> HookHandle:
        """Call ``hook(module, args, output)`` after each forward, as PyTorch's; a result
        other than None replaces the output. Under ``compile`` hooks run while tracing, so
        what they compute is part of the trace (adding or removing one retraces).

        Args:
            hook: the function.

        Returns:
            A handle whose ``remove()`` unregisters the hook.
        """
        return self._add_hook("_forward_hooks", hook)

    def register_forward_pre_hook(self, hook) -> HookHandle:
        """Call ``hook(module, args)`` before each forward, as PyTorch's; a result other
        than None replaces the positional arguments (a tuple, or one argument).

        Args:
            hook: the function.

        Returns:
            A handle whose ``remove()`` unregisters the hook.
        """
        return self._add_hook("_forward_pre_hooks", hook)

    def _add_hook(self, table: str, hook) -> HookHandle:
        if not callable(hook):
            raise TypeError(f"{type(self).__name__}: a hook must be callable, got {hook!r}")
        # a static attribute: the treedef holds the hooks, so a change retraces a compile
        hooks = dict(self.__dict__.get(table, {}))
        key = next(_HOOK_IDS)
        hooks[key] = hook
        object.__setattr__(self, table, hooks)
        return HookHandle(lambda: self._remove_hook(table, key))

    def _remove_hook(self, table: str, key: int) -> None:
        hooks = dict(self.__dict__.get(table, {}))
        if hooks.pop(key, None) is not None:
            if hooks:
                object.__setattr__(self, table, hooks)
            else:
                self.__dict__.pop(table, None)

    @classmethod
    def set_execution_policy(
        cls,
        *,
        auto_realize_toplevel_forward: bool | None = None,
        auto_realize_backward_grads: bool | None = None,
    ) -> None:
        """The original nabla's execution policy of modules (one setting for all modules).

        Args:
            auto_realize_toplevel_forward: compute the output of a module called by the user
                (not one called by another module's forward) at once instead of leaving it
                lazy (default False; never while ``compile`` traces). None: unchanged.
            auto_realize_backward_grads: realize the gradients :meth:`backward` writes. They
                are always realized here (``Tensor.backward`` computes the loss and all
                gradients as one graph), so this only records the setting. None: unchanged.
        """
        settings = {
            "auto_realize_toplevel_forward": auto_realize_toplevel_forward,
            "auto_realize_backward_grads": auto_realize_backward_grads,
        }
        set_policy(Module, Module._policy_attrs, settings)

    @classmethod
    def get_execution_policy(cls) -> dict:
        """The policy :meth:`set_execution_policy` sets.

        Returns:
            ``{"auto_realize_toplevel_forward": bool, "auto_realize_backward_grads": bool}``.
        """
        return get_policy(Module, Module._policy_attrs)

    def backward(self, loss, gradient=None, retain_graph=None, *, realize_grads=None) -> None:
        """``loss.backward(gradient)``: accumulate the gradient of ``loss`` into ``.grad`` of
        every parameter it depends on (the original nabla's ``Module.backward``).

        Args:
            loss: a scalar tensor computed from this module's parameters (any tensor with
                ``gradient``).
            gradient: the cotangent of ``loss`` (default 1 for a scalar).
            retain_graph: accepted as ``Tensor.backward`` does (the graph is always kept).
            realize_grads: accepted for the original's signature; the gradients are always
                realized.
        """
        loss.backward(gradient, retain_graph)

    @property
    def _training(self) -> bool:
        """The original nabla's name of :attr:`training` (this module's mode only)."""
        return self.__dict__["training"]

    @_training.setter
    def _training(self, mode: bool) -> None:
        self.__dict__["training"] = bool(mode)

    # ------------------------------------------------------------------ traversal
    def named_children(self) -> Iterator[tuple[str, Module]]:
        """Direct submodules as ``(name, module)``.

        Returns:
            An iterator of pairs in assignment order.
        """
        seen = set()
        for name, m in self.__dict__["_modules"].items():
            # (a None slot is skipped; a module under two names is listed once, as PyTorch)
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        """Direct submodules, in assignment order.

        Returns:
            An iterator of modules.
        """
        for _, m in self.named_children():
            yield m

    def named_modules(
        self, prefix: str = "", memo=None, *, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first, with qualified names (``""`` for
        this one, ``"layers.0"`` for a nested one); a module reached twice (tied, or shared
        between blocks) is listed once, under its first name, as PyTorch does.

        Args:
            prefix: prepended to every name.
            memo: the modules listed already (PyTorch's argument; None starts afresh).
            remove_duplicate: False lists a module reached twice under each of its names
                (PyTorch's keyword).

        Returns:
            An iterator of ``(name, module)``.
        """
        if not remove_duplicate:
            yield prefix, self
            for name, m in self._dicts()[2].items():
                if m is None:
                    continue
                yield from m.named_modules(
                    f"{prefix}.{name}" if prefix else name, remove_duplicate=False
                )
            return
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self.named_children():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self) -> Iterator[Module]:
        """This module and every submodule, depth first.

        Returns:
            An iterator of modules.
        """
        for _, m in self.named_modules():
            yield m

    def _named(self, tables: tuple, prefix: str, recurse: bool):
        """Each module's own entries of ``tables`` in turn, then its children's (PyTorch's
        order, and the pytree's)."""
        for table in tables:
            for name, t in self.__dict__[table].items():
                if t is not None:
                    yield (f"{prefix}.{name}" if prefix else name), t
        if recurse:  # (every name, a shared module under each: ``_unique`` drops repeats)
            for name, m in self.__dict__["_modules"].items():
                if m is not None:
                    yield from m._named(tables, f"{prefix}.{name}" if prefix else name, True)

    @staticmethod
    def _unique(named, remove_duplicate: bool):
        """A tensor reached twice (a module used in two places) is listed once, under its
        first name, as PyTorch does."""
        seen = set()
        for name, t in named:
            if remove_duplicate:
                if id(t) in seen:
                    continue
                seen.add(id(t))
            yield name, t

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate=True):
        """Parameters with qualified names (``"layers.0.weight"``).

        Args:
            prefix: prepended to every name.
            recurse: include the parameters of submodules (default True).
            remove_duplicate: list a parameter shared by several submodules once, under its
                first name (default True, as in PyTorch).

        Returns:
            An iterator of ``(name, Tensor)``.
        """
        named = self._named(("_parameters",), prefix, recurse)
        yield from self._unique(named, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every parameter tensor.

        Args:
            recurse: include the parameters of submodules (default True).

        Returns:
            An iterator of tensors, in the order of :meth:`named_parameters`.
        """
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate=True):
        """Buffers with qualified names.

        Args:
            prefix: prepended to every name.
            recurse: include the buffers of submodules (default True).
            remove_duplicate: list a shared buffer once (default True, as in PyTorch).

        Returns:
            An iterator of ``(name, Tensor)``.
        """
        yield from self._unique(self._named(("_buffers",), prefix, recurse), remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer tensor.

        Args:
            recurse: include the buffers of submodules (default True).

        Returns:
            An iterator of tensors.
        """
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def num_parameters(self) -> int:
        """The total number of scalar parameters.

        Returns:
            The sum of the parameters' sizes.
        """
        return sum(int(np.prod(p.shape)) for p in self.parameters())

    # ------------------------------------------------------------------ state
    def state_dict(self, *, prefix: str = "", keep_vars: bool = False) -> OrderedDict:
        """Parameters and buffers by qualified name (what checkpoints store), in PyTorch's
        order: each module's parameters, then its buffers, then its submodules'. A tensor
        shared by several submodules appears under each name, as in PyTorch.

        Args:
            prefix: prepended to every name (PyTorch's keyword).
            keep_vars: accepted for PyTorch's signature: the values are the module's own
                tensors either way (a tensor here has no separate ``.data`` copy to give).

        Returns:
            An ``OrderedDict`` name -> Tensor.
        """
        return OrderedDict(
            (prefix + name, t)
            for name, t in self._named(("_parameters", "_buffers"), "", True)
            if not self._hidden(name)
        )

    def _hidden(self, qualified: str) -> bool:
        """Whether the buffer ``qualified`` was registered with ``persistent=False``."""
        *path, leaf = qualified.split(".")
        m = self
        for part in path:
            m = m.__dict__["_modules"][part]
        return leaf in m.__dict__.get("_non_persistent", ())

    def _owner(self, qualified: str) -> tuple[Module, str]:
        *path, leaf = qualified.split(".")
        m = self
        for part in path:
            m = m.__dict__["_modules"][part]
        return m, leaf

    def load_state_dict(
        self, state_dict, strict: bool = True, assign: bool = False
    ) -> IncompatibleKeys:
        """Copy tensors from ``state_dict`` into this module's parameters and buffers.

        Every entry is checked first (names, shapes, dtypes); on any problem nothing is
        modified and one error lists them all.

        Args:
            state_dict: a mapping qualified name -> Tensor or NumPy array.
            strict: when True (default), keys missing from ``state_dict`` and keys the module
                does not have are errors; when False they are skipped.
            assign: PyTorch's: the module takes the loaded values as new tensors with their
                own dtypes (a float64 checkpoint makes float64 parameters), instead of
                copying them into the current ones, cast to their dtypes (default False).

        Returns:
            ``IncompatibleKeys(missing_keys, unexpected_keys)``, PyTorch's named tuple: the
            keys skipped with ``strict=False`` (both empty after a strict load).

        Raises:
            ValueError: listing missing/unexpected keys and shape or dtype mismatches (a
                ``StateDictError``, also a ``RuntimeError`` as PyTorch's).
            TypeError: for a ``state_dict`` that is not a mapping.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"{type(self).__name__}.load_state_dict: expected a mapping of names to "
                f"tensors, got {type(state_dict).__name__}"
            )
        own = self.state_dict()
        problems = []
        # a checkpoint from before BatchNorm counted its batches (PyTorch's version 1, and
        # any file without PyTorch's metadata, such as safetensors): the count stays
        missing = [k for k in own if k not in state_dict and not k.endswith("num_batches_tracked")]
        unexpected = [k for k in state_dict if k not in own]
        if strict:
            if missing:
                problems.append(f"missing keys {missing}")
            if unexpected:
                problems.append(f"unexpected keys {unexpected}")
        updates = []
        for name, old in own.items():
            if name not in state_dict:
                continue
            new, problem = loaded_tensor(name, state_dict[name])
            if problem is None and tuple(old.shape) == () and tuple(new.shape) == (1,):
                new = new.reshape(())  # a 0-d value saved as (1,) (PyTorch reads it so)
            if problem is not None:
                problems.append(problem)
            elif tuple(new.shape) != tuple(old.shape):
                problems.append(f"{name}: shape {tuple(new.shape)}, expected {tuple(old.shape)}")
            elif assign:
                updates.append((name, new))
            elif new.dtype is not old.dtype and not castable(new.dtype, old.dtype):
                problems.append(f"{name}: dtype {new.dtype}, expected {old.dtype}")
            else:  # (a float value into a float of another width, as PyTorch's copy_)
                updates.append((name, new if new.dtype is old.dtype else new.cast(old.dtype)))
        if problems:
            raise StateDictError(
                f"{type(self).__name__}.load_state_dict: "
                + "; ".join(problems)
                + " (nothing loaded)"
            )
        for name, new in updates:
            if assign:  # a new tensor of its own dtype in the slot, as PyTorch's assign=True
                owner, leaf = self._owner(name)
                setattr(owner, leaf, detach(owned(new)))
            else:
                self._assign(name, new)
        return IncompatibleKeys(missing, unexpected)

    def _assign(self, qualified: str, value: Tensor) -> None:
        """Give the parameter or buffer ``qualified`` the value of ``value``, in place."""
        owner, leaf = self._owner(qualified)
        d = owner.__dict__
        table = d["_buffers"] if leaf in d["_buffers"] else d["_parameters"]
        old = table[leaf]
        value = owned(value)  # (not another library's memory, which it may write to)
        if old is None:
            table[leaf] = detach(value)
        elif value is not old:
            rebind(old, detach(laid_out_like(old, value)))

    def train(self, mode: bool = True) -> Module:
        """Set training mode (``.training``) on this module and every submodule.

        Args:
            mode: True for training (dropout active), False for evaluation.

        Returns:
            This module.
        """
        if not isinstance(mode, bool | np.bool_):
            raise ValueError(f"{type(self).__name__}.train: mode must be a bool, got {mode!r}")
        self.__dict__["training"] = bool(mode)
        for m in self.children():  # (each child's own train: an override is kept, as PyTorch)
            m.train(bool(mode))
        return self

    def eval(self) -> Module:
        """Evaluation mode: ``train(False)``.

        Returns:
            This module.
        """
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset ``.grad`` of every parameter: to None (default, as PyTorch's), or to zeros
        in place with ``set_to_none=False``.

        Args:
            set_to_none: drop the gradients instead of zeroing them.
        """
        zero_grads(self.parameters(), set_to_none)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Make every parameter trainable (True) or frozen (False); optimizers skip frozen
        parameters and ``backward`` does not fill their ``.grad``.

        Args:
            requires_grad: the new setting.

        Returns:
            This module.
        """
        for m in self.modules():
            d = m.__dict__
            for name, p in d["_parameters"].items():
                if requires_grad:
                    d["_frozen"].discard(name)
                else:
                    d["_frozen"].add(name)
                if p is None or not p.dtype.is_float:
                    continue
                if requires_grad:
                    p.requires_grad = True
                elif p._impl.requires_grad:
                    p.requires_grad = False  # in place: the tensor keeps its identity
                elif p.requires_grad:
                    d["_parameters"][name] = detach(p)  # a leaf with no backward history
        return self

    def apply(self, fn) -> Module:
        """Call ``fn(module)`` on every submodule, then on this one (PyTorch's order), e.g.
        to initialize weights by layer type.

        Args:
            fn: a function of a module; its result is ignored.

        Returns:
            This module.

        Example:
            >>> def init(m):
            ...     if isinstance(m, nn.Linear):
            ...         nn.init.xavier_uniform_(m.weight)
            >>> model.apply(init)
        """
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def to(self, *args, device=None, dtype=None) -> Module:
        """Move every parameter and buffer to ``device`` and cast the floating ones to
        ``dtype``, in place (each tensor keeps its identity, ``requires_grad`` and
        ``.grad``), as PyTorch's ``module.to``. Make the optimizer afterwards: its state was
        made for the old tensors.

        Args:
            *args: a device (``nb.CPU()``, ``"cpu"``, ``"cuda:0"``), a dtype (``nb.float64``,
                ``"bfloat16"``, ...) or a tensor whose device and dtype to take, in any order.
            device: the device, by keyword.
            dtype: a float dtype, by keyword.

        Returns:
            This module.

        Raises:
            TypeError: for an argument that is none of these, or a dtype that is not
                floating point.
        """
        for arg in args:
            if isinstance(arg, Tensor):
                device, dtype = arg.device, arg.dtype if arg.dtype.is_float else dtype
            elif device_like(arg) is not None:
                device = arg
            else:
                dtype = arg
        device = device_arg(f"{type(self).__name__}.to", device)
        if dtype is not None:
            try:
                dtype = to_dtype(dtype)
            except TypeError as err:
                raise TypeError(f"{type(self).__name__}.to: {err}") from None
            if not dtype.is_float:
                raise TypeError(
                    f"{type(self).__name__}.to: dtype must be floating point, got {dtype} "
                    "(only floating parameters and buffers are cast)"
                )
        return self._convert(device, dtype)

    def _convert(self, device, dtype) -> Module:
        """Every parameter and buffer on ``device`` (None: where it is), the floating ones
        cast to ``dtype`` (None: as they are), in place."""
        for m in self.modules():
            d = m.__dict__
            for t in list(d["_parameters"].values()) + list(d["_buffers"].values()):
                if t is None:
                    continue
                new = t
                if dtype is not None and t.dtype.is_float and t.dtype is not dtype:
                    new = unary.cast(new, dtype)
                if device is not None and t.device != device:
                    new = transfer.to_device(new, device)
                if new is not t:
                    grad = t.grad
                    rebind(t, detach(new))
                    if grad is not None and (grad.dtype, grad.device) != (t.dtype, t.device):
                        # (PyTorch's ``_apply`` converts ``.grad`` too)
                        t.grad = detach(grad.to(t.device, t.dtype))
        return self

    def float(self) -> Module:  # noqa: A003 - PyTorch name
        """``to(nb.float32)``."""
        return self._convert(None, DType.float32)

    def double(self) -> Module:
        """``to(nb.float64)``."""
        return self._convert(None, DType.float64)

    def half(self) -> Module:
        """``to(nb.float16)``."""
        return self._convert(None, DType.float16)

    def bfloat16(self) -> Module:
        """``to(nb.bfloat16)``."""
        return self._convert(None, DType.bfloat16)

    def cpu(self) -> Module:
        """``to("cpu")``."""
        return self._convert(device_arg("Module.cpu", "cpu"), None)

    # ------------------------------------------------------------------ printing
    def extra_repr(self) -> str:
        """The text inside this module's parentheses in ``repr`` (its configuration).

        Returns:
            A string; empty by default.
        """
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, t in list(self.__dict__["_parameters"].items()) + list(
            self.__dict__["_buffers"].items()
        ):
            if t is not None and not self.__dict__["_modules"]:
                continue  # a leaf layer's tensors are described by extra_repr
            if t is not None:
                lines.append(f"({name}): {t.dtype.name} {tuple(t.shape)}")
        for name, m in self.__dict__["_modules"].items():
            if m is None:
                continue
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {sub}")
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


def zero_grads(params, set_to_none: bool = True) -> None:
    """``zero_grad`` of the tensors ``params`` (a module's and an optimizer's): each
    ``.grad`` to None, or zeroed in place (a held ``.grad`` tensor sees the zeros)."""
    for p in params:
        if set_to_none or p.grad is None:
            p.grad = None
        else:
            p.grad.zero_()


def trainable_mask(tree) -> list[bool]:
    """One bool per leaf of ``tree`` (in ``tree_leaves`` order): True for a float tensor that
    an optimizer should update (a module's buffers and frozen parameters are False).

    Args:
        tree: a Module or any pytree of tensors.

    Returns:
        A list of bools.
    """
    if isinstance(tree, Module):
        d = tree.__dict__
        out = [
            p is not None and n not in d["_frozen"] and p.dtype.is_float
            for n, p in d["_parameters"].items()
            if p is not None
        ]
        out += [False for b in d["_buffers"].values() if b is not None]
        for m in d["_modules"].values():
            out += trainable_mask(m)
        return out
    leaves, _ = tree_flatten(tree, is_leaf=lambda x: isinstance(x, Module))
    out = []
    for leaf in leaves:
        if isinstance(leaf, Module):
            out += trainable_mask(leaf)
        else:
            out.append(isinstance(leaf, Tensor) and leaf.dtype.is_float)
    return out


def castable(got, want) -> bool:
    """Whether a loaded value of dtype ``got`` goes into a tensor of dtype ``want`` by a
    cast, as PyTorch's ``load_state_dict`` copies: float into float, integer into integer
    (a float64 or bfloat16 checkpoint into a float32 model; an int32 count into int64)."""
    return (got.is_float and want.is_float) or (got.is_int and want.is_int)


def laid_out_like(old: Tensor, value: Tensor) -> Tensor:
    """``value`` laid out as ``old`` is (its mesh and spec, or whole): a loaded value takes
    the parameter's layout, as PyTorch copies into a DTensor's placement and Orbax restores
    into the target's sharding (a tensor-parallel weight stays split)."""
    spec, cur = old._impl.sharding, value._impl.sharding
    if spec is None:
        return value if cur is None else creation.constant(value.numpy(), dtype=value.dtype)
    if cur is not None and cur.mesh != spec.mesh:
        value = creation.constant(value.numpy(), dtype=value.dtype)
    return reshard_to(value, spec.with_partial(()) if spec.partial else spec, "load_state_dict")


# ``nn.Parameter(x, requires_grad=False)``'s tensors: set on a module, frozen parameters
_FROZEN_PARAMETERS = TensorSet()

# the parameters laid out as PyTorch's ``(out, in, *kernel)`` (or an embedding table's
# ``(num, dim)``) rather than ours ``(..., in, out)``: the in-place initializers
# (``nn.init``) take their fans as PyTorch does. Marked when set on a module whose
# ``_in_pytorch_layout(name)`` says so, and again on a copy or unpickled module (a mark is
# by identity: a deep-copied Conv1d's weight had lost it and got ``(..., in, out)`` fans)
PYTORCH_LAYOUT = TensorSet()


def mark_frozen_parameter(t: Tensor) -> None:
    """Record ``t`` as a parameter not to train, once set on a module."""
    _FROZEN_PARAMETERS.add(t)


def _was_frozen(old) -> bool:
    """A float parameter whose tensor was frozen directly (``p.requires_grad = False``):
    no ``requires_grad`` and no history at all (a transform's traced copy has some)."""
    return (
        isinstance(old, Tensor)
        and old.dtype.is_float
        and not old._impl.requires_grad
        and not old._impl.traced
    )


def _check_name(module, method: str, name) -> None:
    """A registered name is a non-empty string without a dot (``state_dict`` joins the
    names of nested modules with dots: ``"a.b"`` could not be told from a submodule's)."""
    if not isinstance(name, str) or not name or "." in name:
        raise KeyError(
            f"{type(module).__name__}.{method}: the name must be a non-empty string without "
            f"'.', got {name!r}"
        )
    tables = [module.__dict__.get(t, {}) for t in _INTERNAL[:3]]
    if not any(name in t for t in tables) and (
        name in module.__dict__ or hasattr(type(module), name)
    ):
        # PyTorch's KeyError: a setting (``in_features``), ``training`` or a method would
        # be replaced by the tensor or module, and the layer fail later, unclearly
        raise KeyError(f"{type(module).__name__}.{method}: attribute {name!r} already exists")


def host_array(value) -> np.ndarray:
    """A state-dict value as a NumPy array: a nabla tensor's value, or what NumPy reads of
    another (a PyTorch tensor through its ``detach``: one that requires grad has no NumPy
    view of its own)."""
    if isinstance(value, Tensor):
        return value.numpy()
    return foreign_array(value)


def loaded_tensor(key: str, value) -> tuple[Tensor | None, str | None]:
    """``(tensor, None)`` for a state dict entry (a Tensor, NumPy array, nested list, or
    another framework's tensor that NumPy reads, a PyTorch parameter included), or
    ``(None, problem)`` naming ``key`` when it cannot be a tensor (a string, an object
    array)."""
    if isinstance(value, Tensor):
        return value, None
    try:
        return creation.constant(host_array(value)), None
    except (TypeError, ValueError, RuntimeError) as e:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return None, f"{key}: a {type(value).__name__} {shown} is not a tensor ({e})"


def named_leaves(tree, prefix: str = "") -> list[str]:
    """Qualified names of the leaves of ``tree`` in ``tree_leaves`` order: a module's tensors
    by attribute path (``"layers.0.weight"``), other leaves by their index.

    Args:
        tree: a Module or any pytree.
        prefix: prepended to every name.

    Returns:
        A list of strings, one per leaf.
    """
    join = lambda a, b: f"{a}.{b}" if a else str(b)  # noqa: E731
    if isinstance(tree, Module):
        d = tree.__dict__
        out = [join(prefix, n) for n, p in d["_parameters"].items() if p is not None]
        out += [join(prefix, n) for n, b in d["_buffers"].items() if b is not None]
        for n, m in d["_modules"].items():
            out += named_leaves(m, join(prefix, n))
        return out
    leaves, _ = tree_flatten(tree, is_leaf=lambda x: isinstance(x, Module))
    out = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Module):
            out += named_leaves(leaf, join(prefix, i))
        else:
            out.append(join(prefix, i))
    return out


class IncompatibleKeys(NamedTuple):
    """What :meth:`Module.load_state_dict` skipped (PyTorch's ``_IncompatibleKeys``)."""

    missing_keys: list
    unexpected_keys: list


class _ModuleSequence:
    """The list operations of :class:`ModuleList` and :class:`Sequential`, as PyTorch's:
    ``append``, ``extend``, ``insert``, ``pop``, ``seq[i] = module``, ``del seq[i]``.
    Inserting or removing numbers the entries ``"0"``, ``"1"``, ... again."""

    def _check(self, module, op):
        if not isinstance(module, Module):
            raise TypeError(
                f"{type(self).__name__}.{op}: expected a Module, got {type(module).__name__}"
            )

    def _renumber(self, modules) -> None:
        table = self.__dict__["_modules"]
        table.clear()
        for i, m in enumerate(modules):
            table[str(i)] = m

    def append(self, module: Module):
        """Add ``module`` at the end.

        Args:
            module: the module.

        Returns:
            This container.
        """
        self._check(module, "append")
        self.__dict__["_modules"][str(len(self.__dict__["_modules"]))] = module
        return self

    def extend(self, modules):
        """Add every module of ``modules`` at the end.

        Args:
            modules: an iterable of modules.

        Returns:
            This container.
        """
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module):
        """Insert ``module`` before position ``index`` (negative counts from the end).

        Args:
            index: the position.
            module: the module.

        Returns:
            This container (as PyTorch's ``Sequential.insert``).
        """
        self._check(module, "insert")
        mods = list(self.__dict__["_modules"].values())
        mods.insert(index, module)
        self._renumber(mods)
        return self

    def __add__(self, other):
        """A new container of this kind holding this one's modules, then ``other``'s
        (PyTorch's ``Sequential + Sequential``, ``ModuleList + ModuleList``)."""
        if not isinstance(other, type(self)):
            return NotImplemented
        mods = list(self) + list(other)
        return self._of_items([(str(i), m) for i, m in enumerate(mods)])

    def __iadd__(self, modules):
        """``seq += modules``: :meth:`extend`."""
        return self.extend(modules)

    def pop(self, index: int = -1) -> Module:
        """Remove and return the module at ``index`` (default: the last).

        Args:
            index: the position.

        Returns:
            The removed module.
        """
        mods = list(self.__dict__["_modules"].values())
        m = mods.pop(index)
        self._renumber(mods)
        return m

    def __setitem__(self, index: int, module: Module) -> None:
        self._check(module, "__setitem__")
        keys = list(self.__dict__["_modules"])
        self.__dict__["_modules"][keys[index]] = module

    def __delitem__(self, index) -> None:
        mods = list(self.__dict__["_modules"].values())
        del mods[index]
        self._renumber(mods)

    def __len__(self) -> int:
        return len(self.__dict__["_modules"])

    def __iter__(self):
        return iter(self.__dict__["_modules"].values())

    def __getitem__(self, i):
        items = list(self.__dict__["_modules"].items())
        if isinstance(i, slice):
            return self._of_items(items[i])
        return items[i][1]

    def _of_items(self, items):
        """A new container of this kind holding the ``(name, module)`` pairs ``items``."""
        raise NotImplementedError


class ModuleList(_ModuleSequence, Module):
    """A list of submodules, named ``"0"``, ``"1"``, ... in qualified names.

    Args:
        modules: an iterable of modules (default empty).

    Example:
        >>> layers = ModuleList([Sequential(), Sequential()])
        >>> len(layers)
        2
    """

    def __init__(self, modules: Iterable[Module] = ()):
        super().__init__()
        for m in modules:
            self.append(m)

    def _of_items(self, items):
        return ModuleList(m for _, m in items)


class ModuleDict(Module):
    """A dict of submodules with string keys (qualified names use the keys).

    Args:
        modules: a mapping or iterable of ``(name, module)`` (default empty).
    """

    def __init__(self, modules=()):
        super().__init__()
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self[k] = m

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict: expected a Module for {key!r}, got {type(module)}")
        _check_name(self, "__setitem__", str(key))  # (a dotted key broke state_dict later)
        self.__dict__["_modules"][str(key)] = module

    def __getitem__(self, key: str) -> Module:
        return self.__dict__["_modules"][key]

    def __len__(self) -> int:
        return len(self.__dict__["_modules"])

    def __iter__(self):
        return iter(self.__dict__["_modules"])

    def keys(self):
        """The keys, in insertion order."""
        return self.__dict__["_modules"].keys()

    def items(self):
        """``(key, module)`` pairs, in insertion order."""
        return self.__dict__["_modules"].items()

    def values(self):
        """The modules, in insertion order."""
        return self.__dict__["_modules"].values()

    def __delitem__(self, key: str) -> None:
        del self.__dict__["_modules"][key]

    def update(self, modules) -> None:
        """Add or replace the entries of ``modules`` (a mapping or ``(key, module)``
        pairs), as PyTorch's ``ModuleDict.update``."""
        for key, module in dict(modules).items():
            self[key] = module

    def pop(self, key: str) -> Module:
        """Remove ``key`` and return its module."""
        return self.__dict__["_modules"].pop(key)

    def clear(self) -> None:
        """Remove every entry."""
        self.__dict__["_modules"].clear()


def _as_parameter(value) -> Tensor:
    """A ``ParameterList``/``ParameterDict`` entry: a tensor as it is, anything else (an
    array, a number) as a new tensor; a float one becomes a parameter when set."""
    return value if isinstance(value, Tensor) else creation.constant(value)


class ParameterList(Module):
    """PyTorch's ``nn.ParameterList``: parameters named ``"0"``, ``"1"``, ... in qualified
    names (a plain list of tensors on a module would be static data, not parameters).

    Args:
        values: an iterable of tensors (arrays and numbers become tensors; float ones are
            trained, as any float tensor set on a module).

    Example:
        >>> scales = ParameterList([nb.ones(2), nb.zeros(3)])
        >>> [p.shape for p in scales], len(scales)
        ([(2,), (3,)], 2)
    """

    def __init__(self, values: Iterable = ()):
        super().__init__()
        for v in values:
            self.append(v)

    def _table(self) -> dict:
        return self.__dict__["_parameters"]

    def _name(self, index) -> str:
        n = len(self)
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise TypeError(f"ParameterList: indices are ints or slices, got {index!r}")
        if not -n <= index < n:
            raise IndexError(f"ParameterList: index {index} is out of range for {n} parameters")
        return str(int(index) % n)

    def __len__(self) -> int:
        return len(self._table())

    def __iter__(self) -> Iterator[Tensor]:
        return iter(list(self._table().values()))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ParameterList(list(self)[index])  # (the same tensors, as PyTorch's)
        return self._table()[self._name(index)]

    def __setitem__(self, index, value) -> None:
        setattr(self, self._name(index), _as_parameter(value))

    def append(self, value) -> ParameterList:
        """Add ``value`` at the end (returns the list, as PyTorch's)."""
        setattr(self, str(len(self)), _as_parameter(value))
        return self

    def extend(self, values: Iterable) -> ParameterList:
        """Add each of ``values`` at the end (returns the list)."""
        for v in values:
            self.append(v)
        return self

    __iadd__ = extend


class ParameterDict(Module):
    """PyTorch's ``nn.ParameterDict``: parameters under string keys (qualified names use
    the keys).

    Args:
        parameters: a mapping or iterable of ``(key, tensor)`` (default empty); arrays and
            numbers become tensors.

    Raises:
        KeyError: for a key that is not a non-empty string without a dot, or that names an
            attribute every module has (``"training"``).
    """

    def __init__(self, parameters=()):
        super().__init__()
        self.update(parameters)

    def _table(self) -> dict:
        return self.__dict__["_parameters"]

    def __setitem__(self, key: str, value) -> None:
        _check_name(self, "__setitem__", key)  # (also refuses "training", a method's name)
        setattr(self, key, _as_parameter(value))

    def __getitem__(self, key: str) -> Tensor:
        return self._table()[key]

    def __delitem__(self, key: str) -> None:
        del self._table()[key]

    def __contains__(self, key) -> bool:
        return key in self._table()

    def __len__(self) -> int:
        return len(self._table())

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._table()))

    def keys(self):
        """The keys, in insertion order."""
        return self._table().keys()

    def values(self):
        """The parameters, in insertion order."""
        return self._table().values()

    def items(self):
        """``(key, parameter)`` pairs, in insertion order."""
        return self._table().items()

    def get(self, key: str, default=None):
        """The parameter under ``key``, or ``default``."""
        return self._table().get(key, default)

    def update(self, parameters) -> None:
        """Add or replace the entries of ``parameters`` (a mapping or ``(key, value)``
        pairs): a plain dict's in sorted key order, an ``OrderedDict``'s, a
        ``ParameterDict``'s or pairs' as given, as PyTorch's (so ``state_dict`` orders
        match)."""
        if isinstance(parameters, OrderedDict | ParameterDict):
            items = list(parameters.items())
        elif isinstance(parameters, Mapping):
            items = sorted(parameters.items())
        else:
            items = parameters
        for key, value in items:
            self[key] = value

    def pop(self, key: str) -> Tensor:
        """Remove ``key`` and return its parameter."""
        return self._table().pop(key)

    def clear(self) -> None:
        """Remove every entry."""
        self._table().clear()


class Sequential(_ModuleSequence, Module):
    """Modules applied in order: ``Sequential(Linear(4, 8), ReLU(), Linear(8, 1))``.

    Args:
        modules: the modules, or one ``OrderedDict`` name -> module (names then appear in
            qualified names instead of ``"0"``, ``"1"``, ...).

    Example:
        >>> len(Sequential(ModuleList(), ModuleList()))
        2
    """

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            items = list(modules[0].items())
        else:
            items = [(str(i), m) for i, m in enumerate(modules)]
        for name, m in items:
            if not isinstance(m, Module):
                raise TypeError(
                    f"Sequential: entry {name!r} is a {type(m).__name__}, expected a Module"
                )
            self.__dict__["_modules"][name] = m

    def forward(self, x):
        """Apply every module in order.

        Args:
            x: the input of the first module.

        Returns:
            The output of the last one.
        """
        for m in self.__dict__["_modules"].values():  # (a module held twice runs twice)
            if m is not None:
                x = m(x)
        return x

    def __getitem__(self, i):
        if isinstance(i, str):
            return self.__dict__["_modules"][i]
        return super().__getitem__(i)

    def _of_items(self, items):
        return Sequential(OrderedDict(items))
