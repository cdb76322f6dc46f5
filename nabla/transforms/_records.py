"""Named records for what a trace keeps: recorded nodes and where their inputs come from.

``compile``'s plans and control flow's bodies both keep the nodes a function recorded, over
inputs that are its arguments, captured values or earlier nodes. These records are what
crosses function boundaries between tracing, replaying and building programs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "Ref",
    "RecordedNode",
    "Recording",
    "PyOut",
    "InSpec",
    "OutAval",
    "LoopLayout",
    "LoopOperands",
    "ScanOutputs",
]


class Ref(NamedTuple):
    """Where a recorded value comes from.

    ``kind`` is ``"arg"`` (argument ``index``), ``"const"`` (a compiled plan's constant or
    captured tensor ``index``), ``"cap"`` (a body's captured tensor ``index``) or ``"node"``
    (output ``output`` of recorded node ``index``)."""

    kind: str
    index: int
    output: int = 0

    def lookup(self, args, outer, vals):
        """The value this names, given the arguments, the outer values (a body's captured
        tensors or a plan's constants) and the outputs of each earlier node."""
        if self.kind == "arg":
            return args[self.index]
        if self.kind == "node":
            return vals[self.index][self.output]
        return outer[self.index]


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
    site: Any = None  # the user's call (``core.debug.Site``) while nb.debug_nans is on
    cut: str | None = None  # recorded in a grad-mode block: "off"/"on" (``OpNode.cut``)


class Recording(NamedTuple):
    """What a trace keeps of a function: the ``RecordedNode``s it kept, the ``Ref`` of each
    flat output (a compiled plan's Python outputs are ``PyOut``s), and the outer
    ``TensorImpl``s it reads: a body's captured tensors (``"cap"`` refs), a plan's constants
    (``"const"`` refs)."""

    nodes: tuple | list
    outputs: tuple | list
    outer: list


def keep_nodes(recorded, needed: set, ref_of, index: dict) -> list:
    """The ``RecordedNode``s of the nodes of ``recorded`` whose ids are in ``needed``, in
    order, each input as ``ref_of(impl)``; ``index`` receives each kept node's position by
    id (what ``ref_of`` reads for an input an earlier kept node made)."""
    nodes = []
    for node in recorded:
        if id(node) in needed:
            refs = tuple(ref_of(i) for i in node.inputs)
            index[id(node)] = len(nodes)
            nodes.append(
                RecordedNode(
                    node.op,
                    node.kwargs,
                    refs,
                    node.out_specs,
                    node.phys_kwargs,
                    node.site,
                    node.cut,
                )
            )
    return nodes


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


class LoopOperands(NamedTuple):
    """A loop node's operands split by role (``LoopLayout.split``)."""

    carry: list
    xs: list
    consts: list
    captured: list

    @property
    def rest(self) -> list:
        """The consts and then the captured tensors: what every step reads unchanged."""
        return self.consts + self.captured


class ScanOutputs(NamedTuple):
    """A scan node's outputs split by role (``LoopLayout.outputs``)."""

    carry: list
    ys: list
    saved: list  # the carry entering each step, kept for reverse mode


class LoopLayout(NamedTuple):
    """How a ``while_loop``/``scan`` node lays out its operands, ``(*carry, *xs, *consts,
    *captured)``, and a scan its outputs, ``(*carry, *ys, *saved carries)``; read from the
    node's kwargs (``n_carry``, ``n_xs``, ``n_consts``, ``n_ys``) with ``of``."""

    n_carry: int
    n_xs: int
    n_consts: int
    n_ys: int

    @classmethod
    def of(cls, kwargs) -> LoopLayout:
        return cls(
            kwargs["n_carry"], kwargs.get("n_xs", 0), kwargs["n_consts"], kwargs.get("n_ys", 0)
        )

    def split(self, values) -> LoopOperands:
        """``values`` laid out as the node's operands, by role."""
        values = list(values)
        a = self.n_carry
        b = a + self.n_xs
        c = b + self.n_consts
        return LoopOperands(values[:a], values[a:b], values[b:c], values[c:])

    def split_rest(self, rest) -> tuple[list, list]:
        """A step's ``rest`` (consts then captured) as ``(consts, captured)``."""
        rest = list(rest)
        return rest[: self.n_consts], rest[self.n_consts :]

    def outputs(self, values) -> ScanOutputs:
        """A scan node's outputs (or their cotangents) by role."""
        values = list(values)
        a = self.n_carry
        b = a + self.n_ys
        return ScanOutputs(values[:a], values[a:b], values[b:])
