"""Named records for what a trace keeps: recorded nodes and where their inputs come from.

``compile``'s plans and control flow's bodies both keep the nodes a function recorded, over
inputs that are its arguments, captured values or earlier nodes. These records are what
crosses function boundaries between tracing, replaying and building programs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Ref", "RecordedNode", "PyOut", "InSpec", "OutAval"]


class Ref(NamedTuple):
    """Where a recorded value comes from.

    ``kind`` is ``"arg"`` (argument ``index``), ``"const"`` (a compiled plan's constant or
    captured tensor ``index``), ``"cap"`` (a body's captured tensor ``index``) or ``"node"``
    (output ``output`` of recorded node ``index``)."""

    kind: str
    index: int
    output: int = 0


class PyOut(NamedTuple):
    """A traced function's output that is a Python value, not a tensor."""

    value: Any


class RecordedNode(NamedTuple):
    """One recorded op application: the op, its logical kwargs (for rules and replays),
    its inputs as ``Ref``s, the physical ``(dtype, shape)`` of each output, and its
    physical kwargs (for backends)."""

    op: Any
    kwargs: dict
    refs: tuple
    out_specs: tuple
    phys_kwargs: dict


class InSpec(NamedTuple):
    """A traced body's placeholder: physical dtype, shape, device and vmap levels."""

    dtype: Any
    shape: tuple
    device: Any
    levels: tuple


class OutAval(NamedTuple):
    """A traced body's output as traced: physical dtype, shape, device, vmap levels, and
    the logical shape."""

    dtype: Any
    shape: tuple
    device: Any
    levels: tuple
    logical_shape: tuple
