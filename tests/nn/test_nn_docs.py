"""Every public name of ``nb.nn`` and its submodules is documented, each parameter named, and
every public method of a public class documented too."""

import inspect
import types

import pytest
from test_docstrings import _doc_and_params

import nabla as nb

PACKAGES = ["nn", "nn.functional", "nn.init", "nn.optim", "nn.finetune", "nn.utils", "nn.data"]


def _module(path):
    obj = nb
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj


def _names():
    out = []
    for pkg in PACKAGES:
        mod = _module(pkg)
        if mod is None:
            continue
        for name in mod.__all__:
            if not isinstance(getattr(mod, name), types.ModuleType):
                out.append(f"{pkg}.{name}")
    return out


def _methods():
    out = []
    for qual in _names():
        obj = _module(qual)
        if isinstance(obj, type):
            for name, attr in vars(obj).items():
                if not name.startswith("_") and inspect.isfunction(attr):
                    out.append(f"{qual}.{name}")
    return out


def test_all_lists_what_the_package_exports():
    for pkg in PACKAGES:
        mod = _module(pkg)
        if mod is None:
            continue
        assert len(mod.__all__) == len(set(mod.__all__)), pkg
        assert all(hasattr(mod, n) for n in mod.__all__), pkg


@pytest.mark.parametrize("qual", _names())
def test_public_name_is_documented(qual):
    doc, params = _doc_and_params(_module(qual))
    assert doc and doc.strip(), f"nb.{qual} has no docstring"
    missing = [p for p in params if p not in doc]
    assert not missing, f"nb.{qual}: docstring does not explain parameter(s) {missing}"


@pytest.mark.parametrize("qual", _methods())
def test_public_method_is_documented(qual):
    doc, params = _doc_and_params(_module(qual))
    assert doc and doc.strip(), f"nb.{qual} has no docstring"
    missing = [p for p in params if p not in doc]
    assert not missing, f"nb.{qual}: docstring does not explain parameter(s) {missing}"
