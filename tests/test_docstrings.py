"""Every public name (``nabla.__all__``) and public ``Tensor`` attribute is documented, and a
callable's docstring names each of its parameters."""

from __future__ import annotations

import inspect
import types

import pytest

import nabla as nb

SKIP_PARAMS = {"self", "args", "kwargs", "cls"}


def _doc_and_params(obj):
    """(docstring, parameter names) of a public object; ops are documented by their class."""
    if isinstance(obj, nb.Operation):
        doc = type(obj).__doc__
        target = obj.__call__
    elif isinstance(obj, property):
        return obj.fget.__doc__ if obj.fget else None, []
    else:
        doc = getattr(obj, "__doc__", None)
        target = obj
    if isinstance(obj, type) and issubclass(obj, tuple | int | str):
        return doc, []  # enum/named-tuple style types: their constructors are not the API
    try:
        params = [
            p.name
            for p in inspect.signature(target).parameters.values()
            if p.name not in SKIP_PARAMS and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    return doc, params


def _public_names():
    return [n for n in nb.__all__ if not isinstance(getattr(nb, n), types.ModuleType)]


def _tensor_attrs():
    return [n for n in dir(nb.Tensor) if not n.startswith("_")]


def test_all_lists_exactly_the_public_names():
    exported = {n for n in dir(nb) if not n.startswith("_")}
    internal = {"annotations", "backends", "core", "ops", "runtime", "transforms"}
    assert set(nb.__all__) == exported - internal
    assert len(nb.__all__) == len(set(nb.__all__))


@pytest.mark.parametrize("name", _public_names())
def test_public_name_is_documented(name):
    if getattr(nb, name) is None:  # NumPy's constant None (x[:, nb.newaxis]): nothing to say
        assert name == "newaxis"
        return
    doc, params = _doc_and_params(getattr(nb, name))
    assert doc and doc.strip(), f"nb.{name} has no docstring"
    missing = [p for p in params if p not in doc]
    assert not missing, f"nb.{name}: docstring does not explain parameter(s) {missing}"


@pytest.mark.parametrize("name", _tensor_attrs())
def test_tensor_attribute_is_documented(name):
    attr = inspect.getattr_static(nb.Tensor, name)
    doc, params = _doc_and_params(attr)
    if not isinstance(attr, property):
        doc, params = _doc_and_params(getattr(nb.Tensor, name))
    assert doc and doc.strip(), f"Tensor.{name} has no docstring"
    # a method's first parameter is the tensor itself
    missing = [p for p in params[1:] if p not in doc]
    assert not missing, f"Tensor.{name}: docstring does not explain parameter(s) {missing}"
