"""The check behind ``nb.debug_nans`` / ``nb.debug_infs`` (``docs/debugging.md``).

After a program runs, while a switch is on, its outputs are checked. When one holds a bad
value the program is run again with NumPy, one instruction at a time
(``backends.numpy.nans``), to find the first instruction that made one out of operands
without any, and a ``FloatingPointError`` names that op, the user's line that called it
(or, for an op a gradient rule emitted, the forward op and its line), the construct and
step it ran in, the vmap batch element or the shard, and the operands' values there.
A bad value that came in with a program's inputs is not blamed on any op.
"""

from __future__ import annotations

import numpy as np

from ..backends import buffer_to_numpy
from ..backends.numpy.nans import Finding, bad_kind, find_first_bad
from ..core.debug import checking

__all__ = ["check_outputs", "describe_finding"]

_CONSTRUCTS = {
    "compiled_call": "compiled function",
    "cond": "cond branch",
    "while_loop": "while_loop",
    "scan": "scan",
}


def check_outputs(program, inputs, outputs, nodes, inside: str | None = None) -> None:
    """Raise ``FloatingPointError`` when an output of ``program`` (run on ``inputs``, its
    instructions made from the op ``nodes`` in order, or ``()`` when the program keeps its
    own ``sites``) holds a NaN (or an infinity) that an instruction made; ``inside`` names
    what ran the program (``"compiled function f"``)."""
    look = checking()  # (this thread's switches)
    # looking for infinities, a NaN in an output may have come from one (log(0) * 0): the
    # search for the op that made an infinity runs then too
    trigger = (look[0] or look[1], look[1])
    if not any(bad_kind(buffer_to_numpy(o), *trigger) for o in outputs):
        return
    finding = find_first_bad(program, [buffer_to_numpy(b) for b in inputs], *look)
    if finding is not None:
        raise FloatingPointError(describe_finding(finding, nodes, inside))


def describe_finding(finding: Finding, nodes, inside: str | None = None) -> str:
    """The error message: what made the bad value, where, and the operands there."""
    top = finding.path[0]
    node = nodes[top.index] if top.index < len(nodes) else None
    site, context = _site_and_context(finding, node)
    mask = np.isnan(finding.value) if finding.kind == "NaN" else np.isinf(finding.value)
    if finding.made is not None:  # (beside bad values its operands brought)
        mask = finding.made
    count, size = int(mask.sum()), int(mask.size)
    first = tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()
    name = finding.name
    made = f"{finding.kind} in {count} of {size} elements" if size > 1 else finding.kind
    source = (
        "from operands without one"
        if finding.made is None
        else f"where its operands had none (they brought {finding.kind} elsewhere)"
    )
    if site is not None and site.grad_of is not None:
        head = f"the gradient of {site.grad_of} made {made}: its rule's {name} made it {source}"
        where = f"{site.grad_of} was called at {site.where()}"
    else:
        head = f"{name} made {made} {source}"
        where = f"called at {site.where()}" if site is not None else _NO_SITE
    lines = [head, f"  {where}"]
    if inside:
        lines.append(f"  inside the {inside}")
    lines += [f"  {c}" for c in context]
    lines.append("  operands: " + _operands(finding, first) + _why(name, finding, first))
    where_in = _element(first, node, len(finding.path) == 1)
    if where_in:
        lines.append(f"  {where_in}")
    return "\n".join(lines)


_NO_SITE = (
    "(its call site was not recorded: the value was built before nb.debug_nans was on; "
    "turn it on before the computation runs)"
)


def _site_and_context(finding: Finding, node):
    """The innermost instruction's recorded site, and one line per enclosing construct."""
    context = []
    site = node.site if node is not None else None
    for depth, frame in enumerate(finding.path):
        prog = frame.program
        here = site if depth == 0 else None
        if (depth > 0 or here is None) and frame.index < len(prog.sites):
            here = prog.sites[frame.index]
        if depth + 1 < len(finding.path):
            name = prog.instructions[frame.index].op
            step = "" if frame.iteration is None else f", step {frame.iteration}"
            at = "" if here is None else f" called at {here.file}:{here.line}"
            context.append(f"inside the {_CONSTRUCTS.get(name, name)}{at}{step}")
        if here is not None:
            site = here
    return site, context


def _operands(finding: Finding, first: tuple) -> str:
    """Each operand's dtype and shape, and its value at the first bad element when it
    broadcasts to the output (elementwise ops)."""
    parts = []
    out_shape = finding.value.shape
    for a in finding.inputs:
        a = np.asarray(a)
        desc = f"{a.dtype} {tuple(a.shape)}"
        try:
            b = np.broadcast_to(a, out_shape)
        except ValueError:
            b = None
        if b is not None and first is not None and len(first) == b.ndim:
            desc += f" = {b[first]!r}" if b.ndim else f" = {b[()]!r}"
        parts.append(desc)
    return ", ".join(parts) if parts else "none"


def _why(name: str, finding: Finding, first: tuple) -> str:
    """The arithmetic that made the first bad element, when it is a classic one."""
    vals = []
    for a in finding.inputs:
        try:
            vals.append(float(np.broadcast_to(np.asarray(a), finding.value.shape)[first]))
        except (ValueError, TypeError, IndexError):
            return ""
    inf = [np.isinf(v) for v in vals]
    if name == "mul" and len(vals) == 2 and any(inf) and 0.0 in vals:
        return " (0 * inf)"
    if name == "div" and len(vals) == 2:
        if vals == [0.0, 0.0]:
            return " (0 / 0)"
        if all(inf):
            return " (inf / inf)"
    if name in ("add", "sub") and len(vals) == 2 and all(inf):
        return " (inf - inf)"
    if name in ("log", "sqrt", "log1p", "rsqrt", "pow") and vals and vals[0] < 0:
        return f" ({name} of a negative number)"
    return ""


def _element(first: tuple, node, top_level: bool) -> str:
    """Which vmap batch element or shard the first bad element belongs to."""
    if node is None or not top_level:
        return f"first at index {first}" if first else ""
    if not first:
        return ""
    impl = next((r() for r in node.outputs if r() is not None), None)
    if impl is None:
        return f"first at index {first}"
    words = []
    k = 0
    spec = impl.sharding
    if spec is not None:
        m = spec.mesh.ndim
        coords = ", ".join(f"{a}={c}" for a, c in zip(spec.mesh.axis_names, first[:m]))
        words.append(f"on the shard at mesh {spec.mesh.name!r} ({coords})")
        k = m
    nb = len(impl.levels)
    if nb:
        batch = first[k : k + nb]
        words.append(f"in vmap batch element {batch[0] if nb == 1 else batch}")
    if spec is not None:  # the index is the block's: name the block's shape, not the value's
        block = tuple(impl.buffer_shape[k + nb :])
        words.append(f"at index {first[k + nb :]} of its {block} block")
    else:
        words.append(f"at index {first[k + nb :]} of the {impl.logical_shape} value")
    return ", ".join(words)
