"""Completeness: every public op has a registry entry (aliases count as their target)."""

import types

from op_registry import REGISTRY

import nabla as nb

NOT_OPS = {
    # constructors from data / evaluation / transforms / configuration, tested elsewhere
    "constant",
    "asarray",
    "from_dlpack",
    "realize",
    "realize_all",
    "set_backend",
    "backend",
    "get_backend_name",
    "default_dtype",
    "default_device",
    "get_default_dtype",
    "get_default_device",
    "promote_types",
    "CPU",
    "Accelerator",
    "no_grad",
}
ALIASES = {
    "negate": "neg",
    "subtract": "sub",
    "multiply": "mul",
    "divide": "div",
    "power": "pow",
    "concat": "concatenate",
    "swapaxes": "swap_axes",
}


def public_ops():
    out = []
    for name in dir(nb):
        if name.startswith("_") or name in NOT_OPS:
            continue
        obj = getattr(nb, name)
        if isinstance(obj, type | types.ModuleType):
            continue
        mod = getattr(obj, "__module__", "") or type(obj).__module__
        if isinstance(obj, nb.Operation) or (callable(obj) and mod.startswith("nabla.ops")):
            out.append(name)
    return out


def test_every_public_op_has_an_entry():
    missing = [n for n in public_ops() if ALIASES.get(n, n) not in REGISTRY]
    assert not missing, f"ops without a registry entry: {missing}"


def test_registry_entries_are_public():
    extra = {"gelu_tanh", "getitem", "setitem", "at_set", "at_add"}
    names = set(dir(nb)) | extra
    assert not [n for n in REGISTRY if n not in names]
