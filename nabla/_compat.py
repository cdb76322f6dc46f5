"""The original Nabla's module paths whose objects live in a higher layer than the path.

The original kept graph tracing and control flow beside its core and ops; ours are
transforms (layer 4), and the evaluation state is the runtime's (layer 2). Neither
``nabla.core`` nor ``nabla.ops`` may import upward, so the top level, which sees every
layer, registers these spellings when ``nabla`` is imported (``nabla/README.md``):

- ``from nabla.core import trace, GRAPH, Tensor``: attributes set on the ``nabla.core``
  package (``nabla.trace``, the runtime's evaluation state, ``nabla.Tensor``);
- ``import nabla.ops.control_flow`` / ``from nabla.ops.control_flow import cond, scan,
  where, while_loop``: a module entered in ``sys.modules`` holding ``nabla.cond``,
  ``nabla.scan``, ``nabla.where``, ``nabla.while_loop``, ``nabla.fori_loop`` and
  ``nabla.switch``.

Every name is the object of ours itself; nothing here computes.
"""

from __future__ import annotations

import sys
import types

from . import core, ops
from .ops.binary import where
from .runtime.graph import GRAPH
from .runtime.tensor import Tensor
from .transforms.control_flow import cond, fori_loop, scan, switch, while_loop
from .transforms.trace import trace

__all__ = ["register"]

_CORE = {"trace": trace, "GRAPH": GRAPH, "Tensor": Tensor}
_CONTROL_FLOW = {
    "cond": cond,
    "fori_loop": fori_loop,
    "scan": scan,
    "switch": switch,
    "where": where,
    "while_loop": while_loop,
}


def register() -> None:
    """Enter the original's spellings: the attributes of ``nabla.core`` and the module
    ``nabla.ops.control_flow`` (idempotent)."""
    for name, obj in _CORE.items():
        setattr(core, name, obj)
    name = "nabla.ops.control_flow"
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(
            name, "Control flow under the original Nabla's module name: nabla's own functions."
        )
        module.__dict__.update(_CONTROL_FLOW)
        module.__all__ = sorted(_CONTROL_FLOW)
        sys.modules[name] = module
    ops.control_flow = module


register()
