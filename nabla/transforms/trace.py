"""``trace(fn)(*args)``: the recorded graph of a call, printed like a jaxpr.

The inputs are wrapped in fresh traced identities, ``fn`` runs lazily (nothing is computed),
and the printer walks back from the outputs to those inputs: one line per op with output
shapes/dtypes and the op's keyword arguments. Works for any transform:
``print(nb.trace(nb.grad(f))(x))`` shows the forward and backward ops grad produced.
"""

from __future__ import annotations

from typing import NamedTuple

from ..core.pytree import tree_flatten, tree_unflatten
from ..core.state import grad_level
from ..ops import array_functions, reduction, unary
from ..runtime.tensor import Tensor
from .autodiff import _fresh

__all__ = ["trace", "Trace", "communication_report", "CommReport", "CommRecord"]

_HIDDEN_KWARGS = {"rule", "phys", "device", "saved", "residuals", "cap_slots"}
_SHORT = {
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "bool",
}


def _names():
    i = 0
    while True:
        n, s = i, ""
        while True:
            s = chr(ord("a") + n % 26) + s
            n = n // 26 - 1
            if n < 0:
                break
        yield s
        i += 1


class _Levels:
    """Renumbers transform levels 1, 2, ... in order of appearance, so a printed trace does
    not depend on how many transforms ran before it."""

    def __init__(self):
        self.ids: dict[int, int] = {}

    def __call__(self, level):
        return self.ids.setdefault(level, len(self.ids) + 1)

    def many(self, levels):
        return tuple(self(lv) for lv in levels)


def _type(impl, lv: _Levels) -> str:
    shape = ",".join(str(d) for d in impl.logical_shape)
    batch = f"@vmap{list(lv.many(impl.levels))}" if impl.levels else ""
    placed = ""
    spec = impl.sharding
    if spec is not None:  # where the blocks live: {axes per logical dim; partial axes}
        nb = len(impl.levels)
        if any(spec.dims[:nb]):  # batch dims split by vmap(spmd_axis_name=...)
            batch += "{" + ",".join("*".join(d) or "-" for d in spec.dims[:nb]) + "}"
        dims = ",".join("*".join(d) or "-" for d in spec.dims[nb:])
        part = "; " + ",".join(f"{a}:{k}" for a, k in spec.partial) if spec.partial else ""
        placed = f"{{{dims}{part}}}"
    return f"{_SHORT[impl.dtype.value]}[{shape}]{placed}{batch}"


def _fmt_kwargs(kwargs, lv: _Levels) -> str:
    items = []
    for k, v in kwargs.items():
        if k in _HIDDEN_KWARGS:
            continue
        if k == "level":
            v = lv(v)
        elif k in ("levels", "drop"):
            v = lv.many(v)
        elif hasattr(v, "value") and hasattr(v, "is_float"):
            v = v.value
        items.append(f"{k}={v}")
    return f"[{', '.join(items)}]" if items else ""


class Trace:
    """A printable recorded graph: ``inputs``, ``eqns`` (one per op node) and ``outputs``."""

    def __init__(self, inputs, outputs):
        self.inputs = [x._impl for x in inputs]
        self.out_tree_leaves = outputs
        in_ids = {id(i) for i in self.inputs}
        out_impls = [o._impl for o in outputs if isinstance(o, Tensor)]
        order, seen = [], set()
        stack = [(o.node, False) for o in out_impls if o.node is not None and id(o) not in in_ids]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                if id(node) not in seen:
                    seen.add(id(node))
                    order.append(node)
                continue
            if id(node) in seen:
                continue
            stack.append((node, True))
            for inp in node.inputs:
                if id(inp) not in in_ids and inp.node is not None and id(inp.node) not in seen:
                    stack.append((inp.node, False))
        self.eqns = order

    @property
    def num_ops(self) -> int:
        return len(self.eqns)

    def __str__(self) -> str:
        names = {}
        gen = _names()
        lv = _Levels()

        def name(impl):
            if id(impl) not in names:
                names[id(impl)] = next(gen)
            return names[id(impl)]

        ins = [f"{name(i)}:{_type(i, lv)}" for i in self.inputs]
        consts = []
        body = []
        for node in self.eqns:
            args = []
            for inp in node.inputs:
                if id(inp) not in names:
                    consts.append(f"{name(inp)}:{_type(inp, lv)}")
                args.append(names[id(inp)])
            outs = []
            for ref in node.outputs:
                impl = ref()
                outs.append(f"{name(impl)}:{_type(impl, lv)}" if impl is not None else "_")
            body.append(
                f"    {' '.join(outs)} = {node.op.name}{_fmt_kwargs(node.kwargs, lv)} "
                f"{' '.join(args)}".rstrip()
            )
            for v in node.kwargs.values():  # control-flow bodies, listed under their node
                for sub in v if isinstance(v, tuple) else (v,):
                    if hasattr(sub, "describe"):
                        body.extend("      " + line for line in sub.describe())
        outs = []
        for o in self.out_tree_leaves:
            if isinstance(o, Tensor):
                outs.append(names.get(id(o._impl)) or name(o._impl))
            else:
                outs.append(repr(o))
        head = f"{{ lambda {', '.join(consts)} ; {', '.join(ins)}. let"
        return "\n".join([head, *body, f"  in ({', '.join(outs)}) }}"])

    __repr__ = __str__

    def collectives(self) -> list[CommRecord]:
        """One :class:`CommRecord` per collective op of the graph, in execution order:
        those that propagation inserted and those the function calls, local slicing (no
        communication, 0 bytes) included."""
        records = []
        for node in self.eqns:
            op = node.op
            if not op.collective or not hasattr(op, "comm_bytes") or not node.inputs:
                continue
            src = node.inputs[0]
            out = node.outputs[0]() if node.outputs else None
            records.append(
                CommRecord(
                    op.name,
                    tuple(node.kwargs.get("axes", ())),
                    _spec_text(src.sharding),
                    _spec_text(out.sharding) if out is not None else "?",
                    float(op.comm_bytes(src, node.kwargs)),
                )
            )
        return records


def _spec_text(spec) -> str:
    return "whole" if spec is None else spec.short()


class CommRecord(NamedTuple):
    """One collective: the op, its mesh axes, the operand's and result's layouts (physical
    dims, vmap batch dims first: ``[dp, -]{tp:sum}``; ``whole`` for an unsharded value) and
    the bytes each device sends."""

    op: str
    axes: tuple
    input_spec: str
    output_spec: str
    bytes: float


class CommReport:
    """The collectives of one call of a function and what they send (ring cost model).

    ``entries`` lists the collectives that move data (bytes > 0) in execution order;
    ``local`` counts the layout ops that only slice locally. Print it for a table.
    """

    def __init__(self, records, bandwidth=None):
        self.entries = [r for r in records if r.bytes > 0]
        self.local = len(records) - len(self.entries)
        self.bandwidth = bandwidth

    @property
    def total_bytes(self) -> float:
        """Bytes each device sends over the whole call."""
        return sum(r.bytes for r in self.entries)

    def estimated_seconds(self, bandwidth=None) -> float:
        """``total_bytes`` over ``bandwidth`` (bytes/s per device link; default: the
        report's): a lower bound that ignores latency and overlap with compute."""
        bandwidth = self.bandwidth if bandwidth is None else bandwidth
        if not bandwidth or bandwidth <= 0:
            raise ValueError(f"estimated_seconds needs a positive bandwidth, got {bandwidth!r}")
        return self.total_bytes / bandwidth

    def __len__(self) -> int:
        return len(self.entries)

    def __str__(self) -> str:
        head = ["op", "axes", "input", "output", "bytes/device"]
        if self.bandwidth:
            head.append("seconds")
        rows = []
        for r in self.entries:
            row = [r.op, ",".join(r.axes) or "-", r.input_spec, r.output_spec, f"{r.bytes:,.0f}"]
            if self.bandwidth:
                row.append(f"{r.bytes / self.bandwidth:.3g}")
            rows.append(row)
        total = ["total", "", "", "", f"{self.total_bytes:,.0f}"]
        if self.bandwidth:
            total.append(f"{self.estimated_seconds():.3g}")
        widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, total, strict=True)]
        # numbers right-aligned, text left-aligned
        right = {4, 5}

        def line(cells):
            return "  ".join(
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        out = [line(head), line(["-" * w for w in widths])]
        out += [line(r) for r in rows]
        out.append(line(total))
        if self.local:
            out.append(f"({self.local} local layout op(s) without communication not listed)")
        return "\n".join(out)

    __repr__ = __str__


def _diagonal_sum(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """NumPy's and JAX's ``trace``: the sum of ``a``'s diagonal in the plane of ``axis1``
    and ``axis2``, shifted by ``offset``."""
    if out is not None:
        raise TypeError("trace: out= is not supported (as in JAX)")
    total = reduction.sum(array_functions.diagonal(a, offset, axis1, axis2), -1)
    return total if dtype is None else unary.cast(total, dtype)


def trace(fn, *args, **kwargs):
    """Return a function that records ``fn(*args)`` and returns a printable :class:`Trace`.

    ``trace(fn, *args, **kwargs)``, the original Nabla's form (``nabla.core.trace``), records
    the call at once and returns its :class:`Trace`: ``trace(fn)(*args, **kwargs)``.

    Args:
        fn: the function to record (any transform of one works too).
        *args: when given, the arguments to record ``fn`` with right away.
        **kwargs: keyword arguments of that call (only with ``args``).

    Given an array instead of a function, ``trace(a, offset=0, axis1=0, axis2=1,
    dtype=None)`` is NumPy's and JAX's: the sum of ``a``'s diagonal.

    Raises:
        TypeError: for keyword arguments without positional ones.

    Example:
        >>> print(nb.trace(lambda x: nb.sin(x) * 2.0)(nb.ones((3,))))
        { lambda b:f32[] ; a:f32[3]. let
            c:f32[3] = sin a
            d:f32[3] = mul c b
          in (d) }
    """

    if not callable(fn):  # an array: jnp.trace, the sum of a diagonal
        return _diagonal_sum(fn, *args, **kwargs)

    def traced(*args, **kwargs):
        flat, tree = tree_flatten(args)
        with grad_level() as level:
            ins = [_fresh(x, level) if isinstance(x, Tensor) else x for x in flat]
            out = fn(*tree_unflatten(tree, ins), **kwargs)
            return Trace([x for x in ins if isinstance(x, Tensor)], tree_flatten(out)[0])

    if args:
        return traced(*args, **kwargs)
    if kwargs:
        raise TypeError(
            f"trace: keyword arguments {sorted(kwargs)} without positional ones; call "
            "trace(fn)(**kwargs)"
        )
    return traced


def communication_report(fn, *, bandwidth=None):
    """Return a function that records ``fn(*args, **kwargs)`` (nothing is computed) and
    returns a :class:`CommReport` of its collectives: each op with its mesh axes, the
    operand's and result's layouts and the bytes each device sends under the ring cost model
    (``all_reduce`` 2(n-1)/n of the local block, ``all_gather`` (n-1) blocks, ...).

    Args:
        fn: a function of (sharded) tensors; any transform of one works too, e.g.
            ``nb.grad(loss)`` reports the backward pass's gradient reductions.
        bandwidth: bytes per second of one device's link; when given, the report also
            estimates each collective's time (bytes over bandwidth, no latency).

    Example:
        >>> mesh = nb.DeviceMesh("m", (2,), ("x",))
        >>> x = nb.shard(nb.ones((4, 4)), mesh, nb.P("x"))
        >>> nb.communication_report(lambda v: v @ v)(x).total_bytes  # gathers one operand
        32.0
    """

    def report(*args, **kwargs):
        return CommReport(trace(fn)(*args, **kwargs).collectives(), bandwidth)

    return report
