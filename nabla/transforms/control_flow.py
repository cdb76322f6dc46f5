"""Control flow with JAX's ``lax`` semantics: ``cond``, ``switch``, ``while_loop``,
``fori_loop``, ``scan``.

A body is *traced once*, never unrolled: the function runs on placeholders (tensors with
the operands' physical shapes, dtypes and vmap levels but no value) while the op pipeline
records the nodes it creates. Of those, nodes that depend on no placeholder are *hoisted*:
they stay in the enclosing graph and run once. Every tensor the body reads from outside
(closures, hoisted values) becomes an input of the control-flow node, so a closure over a
differentiated or batched tensor is differentiated and batched like any operand. The kept
nodes form a :class:`Body`:

- ``Body.program(...)``: the backend ``Program`` of the body, interned by its structure, so a
  new lambda with the same body is the same program (one cache entry, one MAX compile);
- ``Body.call(args, captured)``: the recorded ops re-bound on other tensors (what the
  differentiation rules and ``compile``'s replay path use).

One node per construct (``cond``, ``while_loop``, ``scan`` ops) carries its bodies in its
kwargs and their programs in its physical kwargs. The NumPy backend runs a Python loop over
the interpreted programs; MAX lowers them to its ``cond`` and ``while_loop`` ops.

Transforms:

- vmap: placeholders carry the operands' levels, so a body is traced batched; each operand
  keeps its own levels (an unbatched weight read by a batched loop is never copied per
  example), while carries, branch results and ``ys`` share one set of levels (a carry that
  becomes batched in the body is batched from the start: a fixed point). A batched ``cond``
  predicate runs every branch and selects; a batched ``while_loop`` predicate runs until
  every lane is done and leaves finished lanes unchanged.
- jvp: a new construct over (primals, tangents) whose body is the ``jvp`` of the old one.
- vjp: ``cond``/``switch`` pull back through a ``switch`` of the branches' pullbacks;
  ``scan`` saves the carry of every step when traced for reverse mode, with the step's
  carry-dependent matrix products (residuals, ``_residual_nodes``), and pulls back with a
  reverse ``scan`` that reads those (``ResidualOp``) and recomputes the rest of each step's
  forward from the saved carry; that recomputation reads no cotangent, so it runs before
  the loop for all steps at once, as any carry-free work of a scan body does;
  ``fori_loop`` with Python-int bounds is a ``scan``; ``while_loop`` raises JAX's error
  unless given ``max_steps``, which makes it a ``scan`` of at most that many steps.
"""

from __future__ import annotations

import numbers
import weakref
from typing import NamedTuple

import numpy as np

from ..core.dtypes import int32
from ..core.ir import TensorImpl, build_program
from ..core.pytree import keystr, tree_flatten, tree_flatten_with_path, tree_unflatten
from ..core.state import STATE, grad_cut, is_live, level_sizes, may_be_pulled_back
from ..ops import batching, binary, collectives, creation, per_device, reduction, unary, view
from ..ops._util import as_tensor, readable_now
from ..ops.base import OPS, Operation
from ..ops.indexing import restore, restore_and_refuse
from ..runtime.graph import ConcretizationError
from ..runtime.tensor import Tensor
from ._records import InSpec, LoopLayout, OutAval, Recording, Ref, ScanOutputs, keep_nodes
from .autodiff import jvp, vjp
from .custom import _run_recorded
from .trace import _HIDDEN_KWARGS, _SHORT
from .vmap import vmap

__all__ = ["cond", "switch", "while_loop", "fori_loop", "scan", "Body"]


# ----------------------------------------------------------------------------- bodies
class Body:
    """A function traced once: recorded nodes over placeholders and captured tensors.

    Attributes:
        what: the construct and role, for messages (``"scan body"``).
        in_specs: an ``InSpec`` per placeholder (dtype, physical shape, device, levels).
        nodes: ``RecordedNode``s in topological order, over ``Ref``s of kind ``"arg"``
            (a placeholder), ``"cap"`` (a captured tensor) or ``"node"``.
        outputs: refs of the flat outputs; ``out_tree`` their pytree structure.
        captured: the outer ``TensorImpl``s the body reads (inputs of the construct).
    """

    __slots__ = ("what", "in_specs", "nodes", "outputs", "out_tree", "captured", "out_impls")

    def __init__(self, what, in_specs, recording: Recording, out_tree, out_impls):
        self.what = what
        self.in_specs = in_specs
        self.nodes, self.outputs, self.captured = recording
        self.out_tree = out_tree
        # an OutAval per output: (dtype, physical shape, device, levels, logical shape)
        self.out_impls = out_impls

    def __repr__(self):
        return f"{{{len(self.nodes)} ops}}"

    @property
    def num_ops(self) -> int:
        return len(self.nodes)

    def describe(self) -> list[str]:
        """The body as jaxpr-like lines (``nb.trace`` prints them under the node)."""

        def ty(dtype, shape, levels=()):
            dims = ",".join(str(d) for d in shape[len(levels) :])
            return f"{_SHORT[dtype.value]}[{dims}]" + (f"@{len(levels)}b" if levels else "")

        ins = [f"a{i}:{ty(dt, sh, lv)}" for i, (dt, sh, _d, lv) in enumerate(self.in_specs)]
        caps = [f"k{j}:{ty(im.dtype, im.shape, im.levels)}" for j, im in enumerate(self.captured)]

        def name(r):
            if r.kind == "arg":
                return f"a{r.index}"
            if r.kind == "cap":
                return f"k{r.index}"
            if self.nodes[r.index].op.multiple_results:
                return f"v{r.index}_{r.output}"
            return f"v{r.index}"

        lines = [f"{{ lambda {' '.join(caps)} ; {' '.join(ins)}. let"]
        for k, (op, kwargs, refs, specs, *_) in enumerate(self.nodes):
            many = op.multiple_results
            outs = " ".join(
                f"{f'v{k}_{i}' if many else f'v{k}'}:{ty(dt, sh)}"
                for i, (dt, sh) in enumerate(specs)
            )
            shown = {
                key: v for key, v in kwargs.items() if key not in _HIDDEN_KWARGS and key != "levels"
            }
            kw = f"[{', '.join(f'{key}={v}' for key, v in shown.items())}]" if shown else ""
            lines.append(f"    {outs} = {op.name}{kw} {' '.join(name(r) for r in refs)}".rstrip())
            for v in kwargs.values():
                for sub in v if isinstance(v, tuple) else (v,):
                    if isinstance(sub, Body):
                        lines.extend("      " + line for line in sub.describe())
        lines.append(f"  in ({', '.join(name(r) for r in self.outputs)}) }}")
        return lines

    def call(self, args: list, captured: list, given: dict | None = None) -> list:
        """The body's flat outputs for other inputs: its recorded ops re-bound on ``args``
        (one per placeholder) and ``captured`` (one per captured tensor). ``given`` maps a
        node's index to its value, known already (a scan's residual): that node is bound as
        a ``ResidualOp`` of the value, differentiated as the node's op but not run again."""
        vals: list = []
        for i, node in enumerate(self.nodes):
            ins = [r.lookup(args, captured, vals) for r in node.refs]
            if given and i in given:
                vals.append(_bind_residual(node, ins, given[i]))
            else:
                vals.append(_rebind(node, ins))
        return [r.lookup(args, captured, vals) for r in self.outputs]

    def program(self, cap_slots: tuple, cap_specs: tuple):
        """The backend program over (placeholders, the construct's captured inputs):
        ``cap_slots[j]`` is where this body's captured tensor ``j`` sits among
        ``cap_specs``. Interned: equal structures give the same ``Program`` object."""
        n = len(self.in_specs)
        inputs = tuple((dt, shape, dev) for dt, shape, dev, _ in self.in_specs) + cap_specs

        def ref(r):
            if r.kind == "arg":
                return r.index
            if r.kind == "cap":
                return n + cap_slots[r.index]
            return (r.index, r.output)

        steps = tuple(
            (op.backend_name, tuple(ref(r) for r in refs), phys, specs)
            for op, _kw, refs, specs, phys, *_ in self.nodes
        )
        outputs = tuple(ref(r) for r in self.outputs)
        key = (
            "body",
            inputs,
            tuple((name, ins, tuple(phys.items()), specs) for name, ins, phys, specs in steps),
            outputs,
        )
        program = _PROGRAMS.get(key)
        if program is None:
            program = build_program(key, inputs, steps, outputs)
            _PROGRAMS[key] = program
        if self.nodes and self.nodes[0].site is not None:  # traced under nb.debug_nans
            program.sites[:] = [n.site for n in self.nodes]
        return program


_PROGRAMS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _placeholder(t: Tensor, levels=None) -> Tensor:
    """A valueless tensor standing for ``t`` (optionally batched at ``levels``)."""
    im = t._impl
    if levels is not None and levels != im.levels:
        logical = im.shape[len(im.levels) :]
        shape = tuple(level_sizes[lv] for lv in levels) + tuple(logical)
        return Tensor._wrap(TensorImpl(shape, im.dtype, im.device, levels))
    return Tensor._wrap(TensorImpl(im.shape, im.dtype, im.device, im.levels))


_DRAW_OUTSIDE = (
    "draw the numbers outside instead, all steps at once (e.g. nb.random.normal(key, "
    "(steps, *shape))), and pass them in as scan's xs or as operands (a fori_loop reads "
    "step i's with the loop index)"
)


class DrawInBody(ValueError):
    """A random draw in a traced body on a key the body receives or computes: the draws run
    on the host, before a program. ``scan`` answers it by running its steps as Python
    (``_scan_steps``); the other bodies raise it."""


def trace_body(
    fn, args: list, what: str, levels: list | None = None, out_levels=None, hoist: bool = True
) -> Body:
    """Trace ``fn(*placeholders)`` once into a :class:`Body`.

    Args:
        fn: a function of flat tensors returning a pytree of tensors (numbers allowed).
        args: example tensors; placeholders take their physical shape, dtype, device and
            levels (or ``levels[i]`` when given).
        what: named in error messages.
        out_levels: if given, every output is broadcast to these vmap levels.
        hoist: move the work that reads no placeholder (closed-over values only) to the
            enclosing graph, run once (a loop's invariants). A branch keeps it (False): it
            runs, and is differentiated, only when the branch is taken, as JAX's closure
            conversion does (``cond(x > 0, lambda: sqrt(x), ...)`` at x < 0 had a NaN
            gradient from the untaken branch).
    """
    phs = [_placeholder(a, None if levels is None else levels[i]) for i, a in enumerate(args)]
    arg_of = {id(p._impl): i for i, p in enumerate(phs)}
    outer, outer_rng, outer_args = STATE.recording, STATE.recording_rng, STATE.body_args
    outer_writes = STATE.body_writes
    STATE.recording, STATE.recording_rng, STATE.body_args = [], [], arg_of
    STATE.body_writes = []
    try:
        try:
            out = fn(*phs)
        except BaseException:  # the writes that would be refused are undone all the same
            restore(_captured_writes(STATE.body_writes, STATE.recording, arg_of, None))
            raise
        _refuse_captured_writes(what, STATE.body_writes, STATE.recording, arg_of, out)
        out_flat, out_tree = tree_flatten(out)
        out_flat = [_leaf_tensor(o, what) for o in out_flat]
        # control flow runs on whole values: one sharded inside the body (a partial sum
        # included) leaves it whole, as its operands entered it
        out_flat = [collectives.unshard(o) if o._impl.sharding else o for o in out_flat]
        if out_levels is not None:
            out_flat = [_at_levels(o, out_levels) for o in out_flat]
        recorded, rng = STATE.recording, STATE.recording_rng
    except ConcretizationError as e:
        raise ConcretizationError(f"{what}: {e}") from None
    finally:
        STATE.recording, STATE.recording_rng, STATE.body_args = outer, outer_rng, outer_args
        STATE.body_writes = outer_writes
    _refuse_draws(what, rng)
    kept, hoisted, dependent = _split_dependent(recorded, arg_of, what, hoist)
    if outer is not None:  # hoisted nodes belong to the enclosing trace (e.g. compile)
        outer.extend(hoisted)
    needed = _needed_nodes(out_flat, arg_of, dependent)
    recording = _body_records(kept, needed, arg_of, dependent, out_flat)
    in_specs = tuple(InSpec(p.dtype, p._impl.shape, p.device, p._impl.levels) for p in phs)
    out_impls = tuple(
        OutAval(o.dtype, o._impl.shape, o.device, o._impl.levels, o.shape) for o in out_flat
    )
    return Body(what, in_specs, recording, out_tree, out_impls)


def _refuse_captured_writes(what, writes: list, recorded: list, arg_of: dict, out) -> None:
    """A body traced once cannot update a tensor from outside it in place (``H.add_(1)``,
    ``H[1:] = v`` on a captured ``H``): the update would happen once for the whole loop,
    both branches' would happen, or the tensor would keep a value of the trace. Updates
    of the body's own values (its arguments, values it computed) are ordinary. Such a
    tensor gets its value back and the call is refused."""
    bad = _captured_writes(writes, recorded, arg_of, out)
    if bad:
        restore_and_refuse(
            bad,
            lambda x: (
                f"{what}: a tensor from outside the body (shape {tuple(x.shape)}, dtype "
                f"{x.dtype.value}) is updated in place there; a body is traced once and runs "
                "as one op, so such an update cannot follow its steps or branches. Pass the "
                "tensor in (a carry or an operand) and return its new value"
            ),
        )


def _captured_writes(writes: list, recorded: list, arg_of: dict, out) -> list:
    """The ``(tensor, impl before)`` of ``writes`` that updated a tensor from outside the
    body (``out``: the body's result, whose tensors are its own; None when it raised)."""
    if not writes:
        return []
    made = {id(n) for n in recorded}
    results = {id(o) for o in tree_flatten(out)[0]} if out is not None else set()
    bad = []
    for ref, before in writes:
        x = ref()
        if x is None or id(x) in results or id(before) in arg_of:
            continue  # gone with the body, one of its results, or its argument
        if before.node is not None and id(before.node) in made:
            continue  # a value the body computed
        bad.append((x, before))
    return bad


def _refuse_draws(what, rng) -> None:
    """A body traced once cannot draw from the global generator (it would repeat)."""
    if not rng:
        return
    if what.startswith(("cond", "switch")):  # a branch: traced once for every call
        raise ValueError(
            f"{what} draws from nabla's global random generator, which would repeat the "
            "same numbers on every call; draw them outside (e.g. nb.random.normal(key, "
            "shape)) and pass them in as operands"
        )
    raise ValueError(
        f"{what} draws from nabla's global random generator, which would repeat the same "
        f"numbers every step; {_DRAW_OUTSIDE}"
    )


def _split_dependent(recorded, arg_of, what, hoist: bool = True):
    """The recorded nodes that depend on a placeholder (kept in the body) and the others
    (hoisted to the enclosing graph), and the ids of the impls that depend on one. Without
    ``hoist`` every node is kept but those a body cannot run: the host's (random draws on
    outside keys), collectives and ops on sharded values (a body runs on whole values)."""
    dependent = set(arg_of)
    kept, hoisted = [], []
    for node in recorded:
        inside = any(id(i) in dependent for i in node.inputs)
        outer_only = (
            node.op.host_only
            or getattr(node.op, "collective", False)
            or any(i.sharding is not None for i in node.inputs)
        )
        if inside or (not hoist and not outer_only):
            if node.op.host_only:
                raise DrawInBody(
                    f"{what}: op {node.op.name} (a random draw) cannot run on a key or bound "
                    "that is an operand or computed inside (draws run on the host, before "
                    "the program, never inside cond/switch/while_loop bodies; scan and "
                    f"fori_loop run such a body step by step); {_DRAW_OUTSIDE}"
                )
            kept.append(node)
            for r in node.outputs:
                o = r()
                if o is not None:
                    dependent.add(id(o))
        else:
            hoisted.append(node)
    return kept, hoisted, dependent


def _needed_nodes(out_flat, arg_of, dependent) -> set:
    """The ids of the kept nodes the outputs need (dead code is dropped)."""
    needed: set = set()
    stack = [o._impl for o in out_flat]
    while stack:
        im = stack.pop()
        node = im.node
        if id(im) in arg_of or node is None or id(im) not in dependent or id(node) in needed:
            continue
        needed.add(id(node))
        stack.extend(node.inputs)
    return needed


def _body_records(kept, needed, arg_of, dependent, out_flat) -> Recording:
    """The body's ``RecordedNode``s, its output ``Ref``s and the outer impls it reads."""
    captured, cap_of = [], {}
    node_index = {}

    def ref_of(im):
        i = arg_of.get(id(im))
        if i is not None:
            return Ref("arg", i)
        if id(im) in dependent:
            return Ref("node", node_index[id(im.node)], im.index)
        j = cap_of.get(id(im))
        if j is None:
            j = cap_of[id(im)] = len(captured)
            captured.append(im)
        return Ref("cap", j)

    nodes = keep_nodes(kept, needed, ref_of, node_index)
    outputs = tuple(ref_of(o._impl) for o in out_flat)
    return Recording(tuple(nodes), outputs, captured)


def _leaf_tensor(x, what):
    if isinstance(x, Tensor):
        return x
    if isinstance(x, numbers.Number | np.ndarray | np.generic):
        return as_tensor(x)
    raise TypeError(f"{what} must return tensors (or numbers), got {type(x).__name__}")


def _at_levels(x: Tensor, levels: tuple) -> Tensor:
    return x if x._impl.levels == levels else batching.broadcast_levels(x, levels)


def _union(*level_tuples) -> tuple:
    return tuple(sorted({lv for lvs in level_tuples for lv in lvs}))


def _narrowed(outs: list, natural: list) -> list:
    """Each of a construct's results without the vmap levels its own dataflow does not
    give it (``natural``: its levels as traced with every operand at its own). A node's
    results share one set of levels, so a result that is the same in every lane (a carry
    that never reads the batched or per-device part) comes out broadcast: take one lane,
    as JAX's batching and replication rules give such a result unbatched. A value
    replicated over a ``shard_map`` axis stays so (its ``out_specs`` may leave the axis
    out). A level of size 0 has no lane to take and stays."""
    out = []
    for x, keep in zip(outs, natural, strict=True):
        for lv in reversed(x._impl.levels):
            if lv not in keep and level_sizes[lv] > 0 and not _lanes_differentiated(x, lv):
                if per_device.is_spanning_level(lv):  # (the lanes are on several processes)
                    x = per_device.first_lane(x, lv)
                else:
                    x = batching.from_batch(x, lv, 0)[0]
        out.append(x)
    return out


def _lanes_differentiated(x: Tensor, level: int) -> bool:
    """Whether a differentiation that began inside the vmap (or ``shard_map``) of ``level``
    reaches ``x``: its lanes' values are equal, but not their derivatives (``vmap(grad)``
    with respect to an unbatched argument has a gradient per example, ``vmap(jvp)`` a
    batched tangent). Taking one lane there would give every lane that lane's derivative."""
    impl = x._impl
    if impl.tangents and any(t > level for t in impl.tangents):
        return True
    return batching.differentiated_inside(impl, level)


def _to_tensors(tree, what):
    flat, treedef = tree_flatten(tree)
    out = []
    for x in flat:
        if isinstance(x, Tensor):
            out.append(x)
        elif isinstance(x, numbers.Number | np.ndarray | np.generic):
            out.append(as_tensor(x))
        else:
            raise TypeError(f"{what} must hold tensors, arrays or numbers, got {type(x).__name__}")
    return out, treedef


def _weak_leaves(tree) -> list[bool]:
    """Which flat leaves are Python numbers: weakly typed, as in JAX (a Python bool is not:
    a bool carry the body makes an int is JAX's error, not a silent int carry)."""
    return [
        isinstance(x, int | float) and not isinstance(x, bool | np.generic)
        for x in tree_flatten(tree)[0]
    ]


def _kind(dtype) -> int:
    return 0 if dtype.is_bool else 1 if dtype.is_int else 2


def _promote_weak(flat, weak, carry_out, what, extra=()):
    """JAX's rule for a loop's initial carry: a leaf given as a Python number is weakly typed
    and takes the dtype the body returns for it, when that is of its kind or a higher one
    (``while_loop(c, lambda v: v * 1.5, 1)`` carries float32). ``carry_out(flat, extra)``
    gives the body's carry outputs; it is traced (not run) only when some leaf is weak."""
    if not any(weak):
        return flat
    n = len(flat)
    body = trace_body(lambda *a: carry_out(list(a[:n]), list(a[n:])), flat + list(extra), what)
    out = list(flat)
    for i, (w, (dt, logical)) in enumerate(zip(weak, _logical_avals(body))):
        t = out[i]
        if w and dt is not t.dtype and _kind(dt) >= _kind(t.dtype) and logical == t.shape:
            out[i] = unary.cast(t, dt)
    return out


def _aval(dtype, shape) -> str:
    return f"{dtype.value}{list(shape)}"


def _paths(treedef) -> list[str]:
    """Printable key paths of the leaves of ``treedef``."""
    dummy = tree_unflatten(treedef, list(range(treedef.num_leaves)))
    return [keystr(p) or "(the value)" for p, _ in tree_flatten_with_path(dummy)[0]]


class _Outs(NamedTuple):
    """One side of an output comparison: who produced it (for messages), its pytree
    structure and the logical ``(dtype, shape)`` of each leaf."""

    name: str
    tree: object
    avals: list


def _check_match(what, a: _Outs, b: _Outs):
    """Raise TypeError naming both sides unless the structures, shapes and dtypes agree."""
    a_name, a_tree, a_avals = a
    b_name, b_tree, b_avals = b
    if a_tree != b_tree:
        raise TypeError(
            f"{what}: {a_name} and {b_name} must have the same structure, got {a_tree} from "
            f"{a_name} and {b_tree} from {b_name}"
        )
    for path, (da, sa), (db, sb) in zip(_paths(a_tree), a_avals, b_avals):
        if da is not db or tuple(sa) != tuple(sb):
            raise TypeError(
                f"{what}: {a_name} and {b_name} must have the same shapes and dtypes: "
                f"{path} is {_aval(da, sa)} in {a_name} but {_aval(db, sb)} in {b_name}"
            )


def _logical_avals(body: Body):
    return [(dt, logical) for dt, _s, _d, _l, logical in body.out_impls]


def _zeros_for(t: Tensor) -> Tensor:
    return creation.zeros_like(t)


def _own_levels(ct: Tensor, primal: Tensor) -> Tensor:
    """The cotangent of ``primal`` without the batch dims of finished vmaps it lacks.

    A construct's results share one set of levels, so the cotangent of an input with fewer
    levels comes out broadcast over the others. Inside the rule's traced body the input's
    cotangent was already summed over finished levels (as every op's is), so each lane
    holds the whole sum: take one. Levels of a vmap still running stay (per-example
    cotangents, as JAX)."""
    have = set(primal._impl.levels)
    active = set(STATE.active_vmap)
    for lv in reversed(ct._impl.levels):
        if lv not in have and lv not in active:
            ct = batching.from_batch(ct, lv, 0)[0]
    return ct


def _invariant_like(cts: list, primals: list) -> list:
    """Each cotangent without the finished levels its primal output lacks (``_own_levels``),
    before a reverse step pulls it back. A construct's carries share one set of levels
    with its other results, so a reverse loop's carry cotangent can come broadcast over a
    level that the carry itself does not vary along. Its lanes are equal (it was summed
    over that level first, as the cotangent of every value without it is), but a
    ``shard_map`` device level reads as varying to a collective: ``all_reduce``'s
    transpose would sum the copies again (a gradient times the axis size)."""
    return [
        _own_levels(ct, p) if isinstance(ct, Tensor) else ct
        for ct, p in zip(cts, primals, strict=True)
    ]


def _wants_ct(t: Tensor) -> bool:
    return t.dtype.is_float and is_live(t._impl.traced)


def _live(tensors) -> bool:
    """May reverse mode walk back through a construct reading ``tensors``? (Then a scan
    keeps each step's carry.) A backward pass running now never walks its own ops again, and
    nothing is recorded for reverse mode under ``no_grad``."""
    return any(may_be_pulled_back(grad_cut(t._impl.traced)) for t in tensors)


# ----------------------------------------------------------------------------- the ops
class _ControlFlowOp(Operation):
    """Shared plumbing: every operand keeps its own vmap levels (the bodies were traced on
    them), all outputs share ``kwargs["levels"]`` and have the traced physical shapes."""

    # bodies are traced for whole operands: operands are gathered to whole values first
    runs_sharded = False

    arity = None
    multiple_results = True
    physical = True

    def implicit_broadcast(self, index, impl):
        return True

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return kwargs["phys"]

    def out_levels(self, impls, levels, kwargs):
        return kwargs["levels"]

    def infer(self, shapes, dtypes, kwargs):
        nb = len(kwargs["levels"])
        specs = kwargs["phys"]["out_specs"]
        return [tuple(s[nb:]) for _, s in specs], [dt for dt, _ in specs]

    def compute_physical_shape(self, impls, kwargs, levels, batch_shape):
        specs = kwargs["phys"]["out_specs"]
        dev = self.device_of(impls, kwargs)
        return [tuple(s) for _, s in specs], [dt for dt, _ in specs], [dev] * len(specs)


def _cap_layout(bodies):
    """The union of the bodies' captured tensors: (list of impls, per body slot tuple)."""
    caps, index = [], {}
    slots = []
    for b in bodies:
        s = []
        for im in b.captured:
            j = index.get(id(im))
            if j is None:
                j = index[id(im)] = len(caps)
                caps.append(im)
            s.append(j)
        slots.append(tuple(s))
    return caps, slots


def _out_avals(kwargs):
    """Logical (dtype, shape) of each output of a control-flow node."""
    nb = len(kwargs["levels"])
    return [(dt, tuple(s[nb:])) for dt, s in kwargs["phys"]["out_specs"]]


def _zero_cts(cotangents, kwargs):
    """Cotangents with None (an output nobody differentiated, or nobody holds) as zeros."""
    return [
        creation.zeros(shape, dtype=dt) if c is None else c
        for c, (dt, shape) in zip(cotangents, _out_avals(kwargs))
    ]


def _float_only(tangents, kwargs):
    return [t if dt.is_float else None for t, (dt, _) in zip(tangents, _out_avals(kwargs))]


def _jvp_some(f, primals: list, tangents: list):
    """``jvp`` of ``f(list of primals)`` with respect to the primals whose tangent is not
    None. The others (constants a body captured, operands nobody differentiates) get no
    tangent at all, as outside a construct: a zero tangent would make ``0 * inf`` (the
    exponent's term of ``x ** 2.0`` at a negative x, a division by a constant 0) NaN."""
    idx = [i for i, t in enumerate(tangents) if t is not None]

    def g(*chosen):
        full = list(primals)
        for i, v in zip(idx, chosen, strict=True):
            full[i] = v
        return f(full)

    return jvp(g, tuple(primals[i] for i in idx), tuple(tangents[i] for i in idx))


def _given(tangents: list, has: list) -> list:
    """The full tangent list from the given ones (``has[i]``: input i has one)."""
    it = iter(tangents)
    return [next(it) if h else None for h in has]


def _specs(impls) -> tuple:
    return tuple((im.dtype, im.shape, im.device) for im in impls)


# -------------------------------------------------------------------- cond / switch
class CondOp(_ControlFlowOp):
    """``switch``'s node: inputs ``(index, *operands, *captured)``; runs branch ``index``."""

    name = "cond"

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        no = kwargs["n_operands"]
        index, operands, caps = primals[0], primals[1 : 1 + no], primals[1 + no :]
        cts = _zero_cts(cotangents, kwargs)
        branches, slots = kwargs["branches"], kwargs["cap_slots"]

        # cotangents only for inputs a backward walk can use (the rest is dead code)
        want_o = [_wants_ct(p) for p in operands]
        want_k = [_wants_ct(p) for p in caps]

        def pullback(k):
            def bwd(ops_, caps_, cts_):
                def f(o, c):
                    return branches[k].call(list(o), [c[j] for j in slots[k]])

                _, pull = vjp(f, list(ops_), list(caps_))
                g_ops, g_caps = pull(list(cts_))
                g_ops = [g for g, w in zip(_fill(g_ops, ops_), want_o) if w]
                return g_ops, [g for g, w in zip(_fill(g_caps, caps_), want_k) if w]

            return bwd

        g_ops, g_caps = _switch(
            index,
            [pullback(k) for k in range(len(branches))],
            (list(operands), list(caps), cts),
            "cond (reverse mode)",
            tuple(f"the pullback of branch {k}" for k in range(len(branches))),
        )
        it_o, it_k = iter(g_ops), iter(g_caps)
        return (
            [None]
            + [_own_levels(next(it_o), p) if w else None for p, w in zip(operands, want_o)]
            + [_own_levels(next(it_k), p) if w else None for p, w in zip(caps, want_k)]
        )

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        no = kwargs["n_operands"]
        index, ins = primals[0], list(primals[1:])  # operands, then captured
        has = [t is not None for t in tangents[1:]]
        given = [t for t in tangents[1:] if t is not None]
        branches, slots = kwargs["branches"], kwargs["cap_slots"]

        def push(k):
            # everything the rule needs is an operand: a closure over an outer tensor here
            # would be wrapped by jvp outside the trace (its tangent would leak out)
            def fwd(ins_, given_):
                def f(full):
                    return branches[k].call(full[:no], [full[no:][j] for j in slots[k]])

                return _jvp_some(f, list(ins_), _given(given_, has))[1]

            return fwd

        outs = _switch(
            index,
            [push(k) for k in range(len(branches))],
            (ins, given),
            "cond (forward mode)",
            tuple(f"the pushforward of branch {k}" for k in range(len(branches))),
        )
        return _float_only(outs, kwargs)

    def replay(self, args, kwargs):
        no = kwargs["n_operands"]
        index, operands, caps = args[0], args[1 : 1 + no], args[1 + no :]
        branches, slots = kwargs["branches"], kwargs["cap_slots"]
        fns = [
            (lambda *o, k=k: branches[k].call(list(o), [caps[j] for j in slots[k]]))
            for k in range(len(branches))
        ]
        names = tuple(f"branches[{k}]" for k in range(len(fns)))
        return _switch(index, fns, tuple(operands), "switch", names)


_cond = CondOp()


def _fill(grads, like):
    """Cotangents with None (non-float inputs) replaced by zeros, so pytrees line up."""
    return [_zeros_for(p) if g is None else g for g, p in zip(grads, like)]


def _unfill(grads, like):
    return [g if p.dtype.is_float else None for g, p in zip(grads, like)]


def _carry_cotangents(grads, carry) -> list:
    """A loop's initial-carry cotangents as its rule returns them: None for a non-float
    carry, and without the finished levels the carry lacks (``_own_levels``): the loop's
    results share one set of levels, so a carry the same on every device came back
    broadcast over the device level, and leaving the ``shard_map`` summed the copies."""
    return [None if g is None else _own_levels(g, p) for g, p in zip(_unfill(grads, carry), carry)]


_UNSET = object()


def _named(op, given: dict, aliases: dict, extra: dict) -> tuple:
    """The parameters in ``given`` (``_UNSET`` where not passed) with those passed under
    their other names (``extra``; ``aliases`` maps each such name to its parameter): the
    names in nabla's API reference (``true_fn``, ``cond_fn``, ``init``, ``lo``...) beside
    JAX's (``true_fun``, ``cond_fun``, ``init_val``, ``lower``...)."""
    for name, value in extra.items():
        target = aliases.get(name)
        if target is None:
            raise TypeError(f"{op}() got an unexpected keyword argument {name!r}")
        if given[target] is not _UNSET:
            raise TypeError(f"{op}() got two values for {target!r} (one as {name!r})")
        given[target] = value
    missing = [k for k, v in given.items() if v is _UNSET]
    if missing:
        raise TypeError(f"{op}() missing required argument(s): {', '.join(missing)}")
    return tuple(given.values())


def cond(pred, true_fun=_UNSET, false_fun=_UNSET, *operands, **names):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)`` (``jax.lax.cond``).

    Both branches are traced once (never run in Python per call) and must return the same
    pytree structure, shapes and dtypes; only the chosen one runs. Differentiable in both
    modes; under ``vmap`` a batched ``pred`` runs both branches and selects per example.

    Args:
        pred: a scalar boolean (or integer: nonzero is true), Python or tensor.
        true_fun: function of ``*operands`` (also accepted as ``true_fn=``).
        false_fun: function of ``*operands`` (also ``false_fn=``).
        *operands: pytrees of tensors passed to the branch.

    Returns:
        The chosen branch's output pytree.

    Raises:
        TypeError: for a non-scalar or floating ``pred``, or branches whose outputs differ
            (naming the leaf and both shapes/dtypes).

    Example:
        >>> nb.cond(x.sum() > 0, lambda v: v * 2.0, lambda v: -v, x)
    """
    true_fun, false_fun = _named(
        "cond",
        {"true_fun": true_fun, "false_fun": false_fun},
        {"true_fn": "true_fun", "false_fn": "false_fun"},
        names,
    )
    if not callable(true_fun) or not callable(false_fun):
        raise TypeError("cond: true_fun and false_fun must be callables")
    p = as_tensor(pred, op="cond")
    if p.shape != ():
        raise TypeError(f"cond: pred must be a scalar, got shape {p.shape} ({p.dtype.value})")
    if not (p.dtype.is_bool or p.dtype.is_int):  # JAX refuses a float predicate too
        raise TypeError(
            f"cond: pred must be a bool or integer scalar, got {p.dtype.value} (compare it "
            "first, e.g. x > 0)"
        )
    index = unary.cast(p if p.dtype.is_bool else binary.not_equal(p, 0), int32)
    return _switch(
        index, (false_fun, true_fun), operands, "cond", ("false_fun", "true_fun"), narrow=True
    )


def switch(index, branches, *operands):
    """``branches[index](*operands)`` (``jax.lax.switch``); ``index`` is clamped to
    ``[0, len(branches) - 1]``.

    Args:
        index: a scalar integer, Python or tensor.
        branches: a sequence of functions of ``*operands`` with matching outputs.
        *operands: pytrees of tensors passed to the branch.

    Returns:
        The chosen branch's output pytree.

    Raises:
        TypeError: for a non-scalar or non-integer ``index``, no branches, or branches whose
            outputs differ.
    """
    branches = tuple(branches)
    if not branches or not all(callable(b) for b in branches):
        raise TypeError("switch: branches must be a non-empty sequence of callables")
    i = as_tensor(index, op="switch")
    if i.shape != () or not i.dtype.is_int:  # (a bool too, as JAX: use cond for a predicate)
        raise TypeError(
            f"switch: index must be an integer scalar, got {i.dtype.value} of shape {i.shape}"
            + (" (for a bool predicate, use nb.cond)" if i.dtype.is_bool else "")
        )
    if i.dtype is not int32:
        i = unary.cast(i, int32)
    if len(branches) > 1:
        i = binary.clip(i, 0, len(branches) - 1)
    names = tuple(f"branches[{k}]" for k in range(len(branches)))
    return _switch(i, branches, operands, "switch", names, narrow=True)


def _lanes_taking(index, k, flat):
    """The operands as branch ``k`` sees them under a batched index (JAX's rule): a
    differentiated operand passes through a select that is live only in the lanes taking
    branch ``k``, so no derivative reaches a lane's untaken branch (where ``0 * inf``, e.g.
    ``sqrt`` of a negative, would be NaN)."""
    hit = None
    out = []
    # inside a body being traced, whether an operand will be differentiated is not known
    # yet (a loop's reverse pass replays the body): every float operand is masked
    tracing = STATE.body_args is not None
    for x in flat:
        if x.dtype.is_float and (tracing or is_live(x._impl.traced) or x._impl.tangents):
            if hit is None:
                hit = binary.equal(index, k)
            x = binary.where(hit, x, unary.stop_gradient(x))
        out.append(x)
    return out


def _switch(index, branches, operands, what, names, narrow: bool = False):
    """Branch ``index`` of ``branches`` on ``operands``. ``narrow``: give each result its
    own levels (``_narrowed``; the public functions do, a rule or replay wants the node's
    results as they are)."""
    if len(branches) == 1:
        return branches[0](*operands)
    flat, tree = _to_tensors(operands, f"{what} operands")

    def flat_fn(k):
        return lambda *a: branches[k](*tree_unflatten(tree, list(a)))

    fns = [flat_fn(k) for k in range(len(branches))]
    if index._impl.levels:  # a batched index: every branch runs, results are selected
        return _select_branches(index, fns, flat, what, names)
    return _cond_node(index, fns, flat, what, names, narrow)


def _branch_on_lanes(index, k, fn, flat, what):
    """Branch ``k`` run on its operands masked to the lanes taking it (``_lanes_taking``).
    A branch that reads differentiated values it closes over (``lambda: sqrt(x)``) runs
    again traced, its closed-over values masked as its operands are, as JAX's closure
    conversion makes them operands: their untaken lanes get no derivative (``0 * inf``,
    NaN)."""
    masked = _lanes_taking(index, k, flat)
    out, reads = _run_recorded(lambda: fn(*masked))
    own = {id(m._impl) for m in masked}
    if not any(
        im.dtype.is_float and (is_live(im.traced) or im.tangents) and id(im) not in own
        for im in reads
    ):
        return out
    body = trace_body(fn, masked, what, hoist=False)
    caps = _lanes_taking(index, k, [Tensor._wrap(c) for c in body.captured])
    return tree_unflatten(body.out_tree, body.call(masked, caps))


def _select_branches(index, fns, flat, what, names):
    """Every branch run on the lanes taking it, the results selected per lane by ``index``."""
    results, sides = [], []
    for k, fn in enumerate(fns):
        o_flat, o_tree = tree_flatten(_branch_on_lanes(index, k, fn, flat, f"{what} {names[k]}"))
        o_flat = [_leaf_tensor(o, what) for o in o_flat]
        results.append(o_flat)
        sides.append(_Outs(names[k], o_tree, [(o.dtype, o.shape) for o in o_flat]))
    result = results[0]
    for k in range(1, len(fns)):
        _check_match(what, sides[0], sides[k])
        hit = binary.equal(index, k)
        result = [binary.where(hit, b, a) for a, b in zip(result, results[k])]
    return tree_unflatten(sides[0].tree, result)


def _cond_node(index, fns, flat, what, names, narrow: bool = False):
    """One ``cond`` node running branch ``index``, its branches traced into bodies whose
    results share one set of vmap levels (each result its own again with ``narrow``)."""

    def branch_outs(k, body):
        return _Outs(names[k], body.out_tree, _logical_avals(body))

    bodies = [trace_body(fn, flat, f"{what} {names[k]}", hoist=False) for k, fn in enumerate(fns)]
    for k in range(1, len(bodies)):
        _check_match(what, branch_outs(0, bodies[0]), branch_outs(k, bodies[k]))
    natural = [_union(*[o.levels for o in outs]) for outs in zip(*[b.out_impls for b in bodies])]
    levels = _union(*natural)
    if any(o.levels != levels for b in bodies for o in b.out_impls):
        bodies = [
            trace_body(fn, flat, f"{what} {names[k]}", out_levels=levels, hoist=False)
            for k, fn in enumerate(fns)
        ]
    caps, slots = _cap_layout(bodies)
    cap_specs = _specs(caps)
    programs = tuple(b.program(s, cap_specs) for b, s in zip(bodies, slots))
    out_specs = tuple((dt, shape) for dt, shape, _d, _l, _lg in bodies[0].out_impls)
    kwargs = {
        "branches": tuple(bodies),
        "cap_slots": tuple(slots),
        "n_operands": len(flat),
        "levels": levels,
        "phys": {"branches": programs, "out_specs": out_specs},
    }
    if not out_specs:
        return tree_unflatten(bodies[0].out_tree, [])
    outs = list(_cond.bind([index, *flat, *[Tensor._wrap(c) for c in caps]], kwargs))
    return tree_unflatten(bodies[0].out_tree, _narrowed(outs, natural) if narrow else outs)


def _float_path_outputs(body: Body, args: set, caps: set) -> set:
    """The indices of ``body``'s outputs a derivative can reach from its placeholders
    ``args`` and captured tensors ``caps``: along float values through differentiable ops
    (a comparison, an integer result or ``stop_gradient`` ends a path)."""
    reached: dict = {}  # node index -> its output indices a path reaches

    def on_path(r: Ref) -> bool:
        if r.kind == "arg":
            return r.index in args
        if r.kind == "cap":
            return r.index in caps
        return r.kind == "node" and r.output in reached.get(r.index, ())

    for k, node in enumerate(body.nodes):
        if node.op.differentiable and node.cut != "off" and any(map(on_path, node.refs)):
            reached[k] = {i for i, (dt, _shape) in enumerate(node.out_specs) if dt.is_float}
    return {i for i, r in enumerate(body.outputs) if on_path(r)}


def _carry_derivative(body: Body, args: set, caps: set, n_carry: int) -> bool:
    """Whether a loop's carry can carry a derivative: ``args`` (placeholder indices:
    carries, then consts) and ``caps`` (the body's captured tensors) are the float inputs
    that depend on a differentiated value; a carry the body's output reaches is one the
    next step reads, until nothing changes."""
    args = set(args)
    while True:
        reached = {i for i in _float_path_outputs(body, args, caps) if i < n_carry}
        if reached <= args:
            return any(i < n_carry for i in args)
        args |= reached


# -------------------------------------------------------------------- while_loop
class WhileOp(_ControlFlowOp):
    """``while_loop``'s node: inputs ``(*carry, *consts, *captured)``; runs ``body`` while
    ``cond`` holds. Both bodies take ``(*carry, *consts)`` placeholders."""

    name = "while_loop"

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        ops = LoopLayout.of(kwargs).split(primals)
        body = kwargs["body"]

        def live(ts):
            return {i for i, t in enumerate(ts) if t.dtype.is_float and is_live(t._impl.traced)}

        args = live(ops.carry + ops.consts)
        caps = live([ops.captured[j] for j in kwargs["cap_slots"][1]])
        if not _carry_derivative(body, args, caps, len(ops.carry)):
            # only the predicate (or a path through a comparison, a cast to an integer,
            # stop_gradient...) reads a differentiated value: the result is piecewise
            # constant in it, its derivative zero (JAX's answer: the carry has no tangent)
            return [None] * len(primals)
        raise ValueError(
            "Reverse-mode differentiation does not work for while_loop when its carry "
            "depends on a differentiated value (nor for fori_loop with traced bounds): the "
            "number of steps is unknown when the loop is traced. Give while_loop(..., "
            "max_steps=N) (or fori_loop Python-int bounds) to make it a reverse-"
            "differentiable scan, or use jvp/jacfwd"
        )

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        layout = LoopLayout.of(kwargs)
        n = layout.n_carry
        ops, t_ops = layout.split(primals), layout.split(tangents)
        # a carry's tangent is loop state (zeros to start with); a const or captured tensor
        # without one gets none (``_jvp_some``)
        zt = [_zeros_for(p) if t is None else t for p, t in zip(ops.carry, t_ops.carry)]
        m = len(ops.rest)
        has = [t is not None for t in t_ops.rest]
        given = [t for t in t_ops.rest if t is not None]
        cond_b, body_b = kwargs["cond"], kwargs["body"]
        cs, bs = kwargs["cap_slots"]

        def cond2(c, k):
            consts, caps = layout.split_rest(k[:m])
            return cond_b.call(list(c[:n]) + consts, [caps[j] for j in cs])[0]

        def body2(c, k):
            def f(full):
                consts, caps = layout.split_rest(full[n:])
                return body_b.call(full[:n] + consts, [caps[j] for j in bs])

            out, t_out = _jvp_some(f, list(c[:n]) + list(k[:m]), list(c[n:]) + _given(k[m:], has))
            return list(out) + list(t_out)

        res = _while_flat(cond2, body2, ops.carry + zt, "while_loop", consts=ops.rest + given)
        return _float_only(res[n:], kwargs)

    def replay(self, args, kwargs):
        ops = LoopLayout.of(kwargs).split(args)
        carry, consts, caps = ops.carry, ops.consts, ops.captured
        cond_b, body_b = kwargs["cond"], kwargs["body"]
        cs, bs = kwargs["cap_slots"]

        def c_fn(c, k):
            return cond_b.call(list(c) + list(k), [caps[j] for j in cs])[0]

        def b_fn(c, k):
            return body_b.call(list(c) + list(k), [caps[j] for j in bs])

        if kwargs["max_steps"] is not None and not consts:
            return _counted_while(c_fn, b_fn, carry, kwargs["max_steps"])
        return _while_flat(c_fn, b_fn, carry, "while_loop", consts, kwargs["max_steps"])


_while = WhileOp()


def while_loop(cond_fun=_UNSET, body_fun=_UNSET, init_val=_UNSET, *, max_steps=None, **names):
    """Run ``body_fun`` while ``cond_fun`` holds (``jax.lax.while_loop``)::

        val = init_val
        while cond_fun(val):
            val = body_fun(val)

    Both functions are traced once; the loop runs in the backend (a Python loop over the
    interpreted body on NumPy, MAX's ``while_loop`` op when compiled). Forward-mode
    differentiable; under ``vmap`` a batched predicate runs until every example is done.

    Args:
        cond_fun: ``val -> scalar bool`` (also accepted as ``cond_fn=``).
        body_fun: ``val -> val`` with the same structure, shapes and dtypes (also
            ``body_fn=``).
        init_val: the initial pytree of tensors (numbers become tensors; also ``init=``).
        max_steps: optional Python int: at most this many iterations run. With it the loop
            is also reverse-differentiable (it becomes a ``scan`` of ``max_steps`` guarded
            steps when traced for reverse mode), which JAX's while_loop is not.

    Returns:
        The final value (same pytree as ``init_val``).

    Raises:
        TypeError: if ``body_fun`` changes the structure, a shape or a dtype, or
            ``cond_fun`` does not return a boolean scalar.
        ValueError: for reverse-mode differentiation without ``max_steps`` of a loop whose
            carry depends on a differentiated value (JAX's error; a value only
            ``cond_fun`` reads gets a zero derivative, as in JAX).

    Example:
        >>> nb.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))
    """
    cond_fun, body_fun, init_val = _named(
        "while_loop",
        {"cond_fun": cond_fun, "body_fun": body_fun, "init_val": init_val},
        {"cond_fn": "cond_fun", "body_fn": "body_fun", "init": "init_val"},
        names,
    )
    if not callable(cond_fun) or not callable(body_fun):
        raise TypeError("while_loop: cond_fun and body_fun must be callables")
    flat, tree = _to_tensors(init_val, "while_loop init_val")

    def c_fn(c, _k):
        return cond_fun(tree_unflatten(tree, list(c)))

    def b_fn(c, _k):
        out = body_fun(tree_unflatten(tree, list(c)))
        out_flat, out_tree = tree_flatten(out)
        if out_tree != tree:
            raise TypeError(
                f"while_loop: body_fun must return the structure of init_val: got {out_tree}, "
                f"init_val is {tree}"
            )
        return out_flat

    flat = _promote_weak(flat, _weak_leaves(init_val), lambda c, _x: b_fn(c, []), "while_loop")

    if max_steps is not None:
        if not isinstance(max_steps, numbers.Integral) or max_steps < 0:
            raise TypeError(f"while_loop: max_steps must be a non-negative int, got {max_steps!r}")
        return tree_unflatten(tree, _bounded_while(c_fn, b_fn, flat, int(max_steps)))
    return tree_unflatten(tree, _while_flat(c_fn, b_fn, flat, "while_loop", narrow=True))


def _while_flat(c_fn, b_fn, flat, what, consts=(), max_steps=None, narrow=False):
    """The core: ``c_fn(carry, consts) -> bool``, ``b_fn(carry, consts) -> carry`` (lists).
    ``max_steps`` is recorded for a loop whose ``c_fn`` already bounds it (see
    ``_counted_while``), so that a replay under reverse mode can become a scan.
    ``narrow``: each carry comes back with its own levels (``_narrowed``)."""
    n = len(flat)
    consts = list(consts)
    if not flat:  # nothing to carry: the body changes nothing, but cond_fun is checked
        pred = c_fn([], consts)
        ok = isinstance(pred, bool | np.bool_) or (
            isinstance(pred, Tensor) and pred.dtype.is_bool and pred.shape == ()
        )
        if not ok:
            shown = _aval(pred.dtype, pred.shape) if isinstance(pred, Tensor) else repr(pred)
            raise TypeError(f"{what}: cond_fun must return a boolean scalar, got {shown}")
        return []
    own = [t._impl.levels for t in flat]  # each carry's levels, widened by the body
    k_levels = [k._impl.levels for k in consts]

    def c_traced(*a):
        return c_fn(list(a[:n]), list(a[n:]))

    def b_traced(*a):
        return b_fn(list(a[:n]), list(a[n:]))

    while True:
        lv = own + k_levels
        cond_b = trace_body(c_traced, flat + consts, f"{what} cond_fun", levels=lv)
        if len(cond_b.out_impls) != 1:
            raise TypeError(f"{what}: cond_fun must return one boolean scalar")
        dt, _s, _d, c_levels, logical = cond_b.out_impls[0]
        if not dt.is_bool or logical != ():
            raise TypeError(
                f"{what}: cond_fun must return a boolean scalar, got {_aval(dt, logical)}"
            )
        if c_levels:  # a batched predicate: loop until every lane is done
            lanes = _until_all_lanes(c_fn, b_fn, what)
            return _while_flat(*lanes, flat, what, consts, max_steps, narrow)
        body_b = trace_body(b_traced, flat + consts, f"{what} body_fun", levels=lv)
        if len(body_b.out_impls) != n:
            raise TypeError(
                f"{what}: body_fun returned {len(body_b.out_impls)} carry leaves for {n}"
            )
        wider = [_union(lvs, o.levels) for lvs, o in zip(own, body_b.out_impls)]
        if wider == own:
            break
        own = wider
    in_avals = [(t.dtype, t.shape) for t in flat]
    _check_carry(what, "init_val", in_avals, "body_fun", _logical_avals(body_b))
    levels = _union(*own)  # the node's carries share these
    if any(lvs != levels for lvs in own):
        lv = [levels] * n + k_levels

        def c_unbatched(*a):  # (the predicate read no carry's levels, only their copies)
            return _narrowed([c_traced(*a)], [()])[0]

        cond_b = trace_body(c_unbatched, flat + consts, f"{what} cond_fun", levels=lv)
    if any(o.levels != levels for o in body_b.out_impls):
        body_b = trace_body(
            b_traced, flat + consts, f"{what} body_fun", levels=lv, out_levels=levels
        )
    caps, (cs, bs) = _cap_layout([cond_b, body_b])
    cap_specs = _specs(caps)
    carry = [_at_levels(t, levels) for t in flat]
    kwargs = {
        "cond": cond_b,
        "body": body_b,
        "cap_slots": (cs, bs),
        "n_carry": n,
        "n_consts": len(consts),
        "max_steps": max_steps,
        "levels": levels,
        "phys": {
            "cond": cond_b.program(cs, cap_specs),
            "body": body_b.program(bs, cap_specs),
            "n_carry": n,
            "out_specs": tuple((t.dtype, t._impl.shape) for t in carry),
        },
    }
    outs = list(_while.bind([*carry, *consts, *[Tensor._wrap(c) for c in caps]], kwargs))
    return _narrowed(outs, own) if narrow else outs


def _check_carry(what, a_name, a_avals, b_name, b_avals):
    for k, ((da, sa), (db, sb)) in enumerate(zip(a_avals, b_avals)):
        if da is not db or tuple(sa) != tuple(sb):
            raise TypeError(
                f"{what}: {b_name} must return the carry with the shapes and dtypes of "
                f"{a_name}: carry leaf {k} is {_aval(da, sa)} in {a_name} but "
                f"{_aval(db, sb)} from {b_name}"
            )


def _until_all_lanes(c_fn, b_fn, what) -> tuple:
    """A loop with a batched predicate as one with an unbatched one: it runs while any lane's
    ``c_fn`` holds, and a lane whose own has stopped keeps its carry. The body's carry is
    checked before the lanes are merged: ``where`` would broadcast or promote it (a body
    that summed a (3,) carry to a scalar came back (3,), filled)."""

    def any_lane(c, k):
        p = c_fn(c, k)
        for lv in reversed(p._impl.levels):
            p = batching.from_batch(p, lv, 0)
        return reduction.any(p)

    def masked_body(c, k):
        p = c_fn(c, k)
        new = b_fn(c, k)
        if len(new) != len(c):
            raise TypeError(f"{what}: body_fun returned {len(new)} carry leaves for {len(c)}")
        avals = [[(t.dtype, t.shape) for t in leaves] for leaves in (c, new)]
        _check_carry(what, "init_val", avals[0], "body_fun", avals[1])
        return [binary.where(p, a, b) for a, b in zip(new, c)]

    return any_lane, masked_body


def _bounded_while(c_fn, b_fn, flat, max_steps):
    """At most ``max_steps`` iterations of ``c_fn``/``b_fn`` (carry, consts) on ``flat``."""
    limit = creation.constant(max_steps, dtype=int32)

    def c2(c, k):
        return binary.logical_and(binary.less(c[0], limit), c_fn(c[1:], k))

    def b2(c, k):
        return [c[0] + 1, *b_fn(c[1:], k)]

    i0 = creation.constant(0, dtype=int32)
    return _counted_while(c2, b2, [i0, *flat], max_steps)[1:]


def _counted_while(c_fn, b_fn, flat, max_steps):
    """A loop whose ``c_fn`` bounds it to ``max_steps`` iterations (a step counter in the
    carry): a ``while_loop`` node remembering ``max_steps``, or, when traced for reverse
    mode, a ``scan`` of ``max_steps`` guarded steps (then differentiable)."""
    probe_c = trace_body(lambda *c: c_fn(list(c), []), flat, "while_loop cond_fun")
    probe_b = trace_body(lambda *c: b_fn(list(c), []), flat, "while_loop body_fun")
    captured = [Tensor._wrap(c) for c in probe_c.captured + probe_b.captured]
    if not _live(flat) and not _live(captured):
        return _while_flat(c_fn, b_fn, flat, "while_loop", max_steps=max_steps, narrow=True)

    def step(c, _x):
        go = c_fn(list(c), [])
        out = _switch(
            unary.cast(go, int32),
            (lambda *v: list(v), lambda *v: list(b_fn(list(v), []))),
            tuple(c),
            "while_loop",
            ("the finished branch", "body_fun"),
        )
        return out, None

    carry, _ = scan(step, list(flat), None, length=max_steps)
    return list(carry)


def _concrete_bound(b):
    """A bound whose value can be known now as a Python int: an unbatched integer scalar
    tensor that is realized, or lazy outside any trace (``compile``, a body). The loop is
    then a reverse-differentiable scan, as JAX does with concrete bounds. A traced or
    batched bound stays a tensor."""
    if (
        isinstance(b, Tensor)
        and b.shape == ()
        and b.dtype.is_int
        and not b.dtype.is_bool
        and readable_now(b)
    ):
        return int(b.item())
    return b


def fori_loop(
    lower=_UNSET, upper=_UNSET, body_fun=_UNSET, init_val=_UNSET, *, unroll=None, **names
):
    """``for i in range(lower, upper): val = body_fun(i, val)`` (``jax.lax.fori_loop``).

    With Python-int bounds, or tensor bounds whose value can be known at the call (outside
    ``compile`` and loop bodies, as JAX's concrete bounds), the loop is a ``scan``
    (reverse-differentiable); with traced tensor bounds a ``while_loop`` (forward-mode
    only; batched bounds under ``vmap`` run until every example's loop is done).

    Args:
        lower: start index (int or integer scalar tensor; also accepted as ``lo=``).
        upper: end index, exclusive (also ``hi=``).
        body_fun: ``(i, val) -> val``; ``i`` is an int32 scalar tensor (also ``body=``),
            not weakly typed as JAX's: a narrower integer carry adds ``i.astype(dtype)``.
        init_val: the initial pytree (also ``init=``).
        unroll: accepted for JAX compatibility (how many iterations XLA fuses into one);
            ignored: the result is the same.

    Returns:
        The final value.

    Raises:
        TypeError: for non-integer bounds, or a ``body_fun`` that changes the carry's
            structure, shapes or dtypes.
        OverflowError: for a bound outside int32, the index's dtype.
    """
    lower, upper, body_fun, init_val = _named(
        "fori_loop",
        {"lower": lower, "upper": upper, "body_fun": body_fun, "init_val": init_val},
        {"lo": "lower", "hi": "upper", "body": "body_fun", "init": "init_val"},
        names,
    )
    lower, upper = _concrete_bound(lower), _concrete_bound(upper)
    static = all(
        isinstance(b, numbers.Integral) and not isinstance(b, bool) for b in (lower, upper)
    )
    if static:
        lo, hi = int(lower), int(upper)
        for name, b in (("lower", lo), ("upper", hi)):
            if not -(2**31) <= b < 2**31:  # (the index is an int32 scalar)
                raise OverflowError(
                    f"fori_loop: {name} bound {b} is out of range for the int32 index "
                    f"(lower={lo}, upper={hi})"
                )

        def step(c, _x):
            i, val = c
            return (i + 1, _fori_body(body_fun, i, val, init_val)), None

        i0 = creation.constant(lo, dtype=int32)
        spec = _ScanSpec(max(hi - lo, 0), False, what="fori_loop", fn_name="body_fun")
        (_, val), _ = _scan_tree(step, (i0, init_val), None, spec)
        return val
    lo = as_tensor(lower, op="fori_loop")
    hi = as_tensor(upper, op="fori_loop")
    if not lo.dtype.is_int or not hi.dtype.is_int:
        raise TypeError(
            f"fori_loop: lower and upper must be integers, got {lo.dtype.value} and "
            f"{hi.dtype.value}"
        )
    lo, hi = unary.cast(lo, int32), unary.cast(hi, int32)

    def c_fn(state):
        return binary.less(state[0], hi)

    def b_fn(state):
        i, val = state
        return (i + 1, _fori_body(body_fun, i, val, init_val))

    _, val = while_loop(c_fn, b_fn, (lo, init_val))
    return val


def _fori_body(body_fun, i, val, init_val):
    """``body_fun(i, val)``, its carry checked against ``val`` leaf by leaf (by key path:
    the loop's own index, carried beside it, is not the user's) where ``init_val`` gave a
    tensor; a narrow integer leaf widened by the int32 index is told how to keep it."""
    out = body_fun(i, val)
    ins, tree = tree_flatten(val)
    outs, out_tree = tree_flatten(out)
    if out_tree != tree:
        return out  # (the loop's structure check names both)
    given = [isinstance(v, Tensor) for v in tree_flatten(init_val)[0]]
    for path, gave, a, b in zip(_paths(tree), given, ins, outs):
        if not gave or not isinstance(b, Tensor) or (a.dtype, a.shape) == (b.dtype, b.shape):
            continue
        hint = ""
        if a.dtype.is_int and b.dtype is int32 and a.shape == b.shape:
            hint = (
                f" (the index i is an int32 tensor, not weakly typed as JAX's: "
                f"write i.astype(nb.{a.dtype.value}))"
            )
        raise TypeError(
            "fori_loop: body_fun must return the carry with the shapes and dtypes of "
            f"init_val: val{path if path != '(the value)' else ''} is "
            f"{_aval(a.dtype, a.shape)} in init_val but {_aval(b.dtype, b.shape)} from "
            f"body_fun{hint}"
        )
    return out


# -------------------------------------------------------------------- scan
class _ScanSpec(NamedTuple):
    """How a scan runs: ``length`` steps (None until ``xs`` gives it), from the end of
    ``xs`` with ``reverse``, ``unroll`` steps per loop iteration; ``what`` and ``fn_name``
    name the construct and its function in errors (a ``fori_loop`` with static bounds runs
    as a scan of its ``body_fun``)."""

    length: int | None
    reverse: bool
    unroll: int | bool = 1
    what: str = "scan"
    fn_name: str = "f"

    @classmethod
    def of(cls, kwargs) -> _ScanSpec:
        """The spec of a scan node, from its kwargs."""
        return cls(kwargs["length"], kwargs["reverse"])

    def reversed(self) -> _ScanSpec:
        """The same steps, run the other way."""
        return self._replace(reverse=not self.reverse)


class ScanOp(_ControlFlowOp):
    """``scan``'s node: inputs ``(*carry, *xs, *consts, *captured)``; outputs ``(*carry,
    *ys, *saved carries)``. The body takes ``(*carry, *x slices, *consts)`` placeholders."""

    name = "scan"

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        layout = LoopLayout.of(kwargs)
        n, nx = layout.n_carry, layout.n_xs
        ops, t_ops = layout.split(primals), layout.split(tangents)
        # a carry's tangent is loop state (zeros to start with); xs, consts and captured
        # tensors without one get none (``_jvp_some``)
        zt = [_zeros_for(p) if t is None else t for p, t in zip(ops.carry, t_ops.carry)]
        has_x = [t is not None for t in t_ops.xs]
        given_x = [t for t in t_ops.xs if t is not None]
        has_k = [t is not None for t in t_ops.rest]
        given_k = [t for t in t_ops.rest if t is not None]
        body = kwargs["body"]
        rest = ops.rest
        r = len(rest)

        def step(c, x, k):
            def f(full):
                consts, caps = layout.split_rest(full[n + nx :])
                return body.call(full[: n + nx] + consts, caps)

            out, t_out = _jvp_some(
                f,
                list(c[:n]) + list(x[:nx]) + list(k[:r]),
                list(c[n:]) + _given(x[nx:], has_x) + _given(k[r:], has_k),
            )
            return list(out[:n]) + list(t_out[:n]), list(out[n:]) + list(t_out[n:])

        c, ys = _scan_flat(
            step, ops.carry + zt, ops.xs + given_x, _ScanSpec.of(kwargs), consts=rest + given_k
        )
        m = len(ys) // 2
        return _float_only(c[n:] + ys[m:], kwargs)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        layout = LoopLayout.of(kwargs)
        n, nx, ny = layout.n_carry, layout.n_xs, layout.n_ys
        if not kwargs["saves"]:
            raise RuntimeError("scan: reverse mode reached a scan that saved no carries")
        ops = layout.split(primals)
        carry, xs, rest = ops.carry, ops.xs, ops.rest
        cts = _zero_cts(cotangents, kwargs)
        # the carries entering each step, then the residuals: each step's kept products,
        # which the backward replay reads instead of computing them again (a residual's
        # own cotangent is never needed: ``ResidualOp``)
        kept = kwargs.get("residuals", ())
        saved_all = [Tensor._wrap(im) for im in kwargs["saved"]]
        saved, res = saved_all[:n], saved_all[n:]
        body = kwargs["body"]
        # cotangents only for inputs a backward walk can use (the rest is dead code)
        want_x = [_wants_ct(x) for x in xs]
        want_k = [_wants_ct(k) for k in rest]
        acc_init = [_zeros_for(k) for k, w in zip(rest, want_k) if w]
        # a saved carry is the carry entering its step: its cotangent joins that step's
        # (only reached by higher-order reverse mode through this rule's own scan)
        ct_saved = layout.outputs(cotangents).saved[:n]
        with_saved = any(c is not None for c in ct_saved)
        ct_carry, ct_ys, ct_saves = layout.outputs(cts)
        extra = ct_saves[:n] if with_saved else []
        spec = _ScanSpec.of(kwargs).reversed()
        if (any(want_x) or any(want_k)) and _steps_map(
            body, layout, saved, xs, rest, spec, (kept, res)
        ):
            return self._vjp_after_loop(
                layout,
                body,
                spec,
                (carry, xs, rest),
                (saved, kept, res),
                (ct_carry, ct_ys, extra),
                want_x,
                want_k,
            )
        nr = len(res)

        def step(c, x, k):
            g_c, g_k = c[:n], c[n:]
            c_t, x_t = x[:n], x[n : n + nx]
            ct_y, ct_s = x[n + nx : n + nx + ny], x[n + nx + ny : len(x) - nr]
            given = dict(zip(kept, x[len(x) - nr :]))

            def f(cc, xx, kk):
                consts, caps = layout.split_rest(kk)
                out = body.call(list(cc) + list(xx) + consts, caps, given)
                return out[:n], out[n : n + ny]

            (out_c, out_y), pull = vjp(f, list(c_t), list(x_t), list(k))
            d_c, d_x, d_k = pull((_invariant_like(g_c, out_c), _invariant_like(ct_y, out_y)))
            d_k = [d for d, w in zip(d_k, want_k) if w]
            acc = [a if d is None else a + d for a, d in zip(g_k, d_k)]
            d_c = _fill(d_c, c_t)
            if ct_s:
                d_c = [d + e if d.dtype.is_float else d for d, e in zip(d_c, ct_s)]
            return d_c + acc, [d for d, w in zip(d_x, want_x) if w]

        c, ct_xs_w = _scan_flat(
            step,
            ct_carry + acc_init,
            saved + xs + ct_ys + extra + res,
            _ScanSpec.of(kwargs).reversed(),
            consts=rest,
        )
        it_x, it_k = iter(ct_xs_w), iter(c[n:])
        ct_xs = [_own_levels(next(it_x), x) if w else None for x, w in zip(xs, want_x)]
        ct_rest = [_own_levels(next(it_k), k) if w else None for k, w in zip(rest, want_k)]
        return _carry_cotangents(c[:n], carry) + ct_xs + ct_rest

    @staticmethod
    def _vjp_after_loop(layout, body, spec, operands, saves, cts, want_x, want_k):
        """Reverse mode with only the carry's cotangent in the loop: each backward step
        pulls back through its step's carry alone and also outputs the cotangent its
        step's outputs got; after the loop, one ``vjp`` of the body ``vmap``-ed over every
        step gives the xs' and the constants' cotangents at once (a weight's is one GEMM
        over all steps' rows, not a product per step added to a carry). ``saves``: the
        saved carries, the residuals' node indices and their stacked values."""
        n, nx, ny = layout.n_carry, layout.n_xs, layout.n_ys
        carry, xs, rest = operands
        ct_carry, ct_ys, extra = cts
        saved, kept, res = saves
        nr = len(res)

        def step(c, x, k):
            c_t, x_t = x[:n], x[n : n + nx]
            ct_y, ct_s = x[n + nx : n + nx + ny], x[n + nx + ny : len(x) - nr]
            given = dict(zip(kept, x[len(x) - nr :]))

            def f(cc):
                consts, caps = layout.split_rest(k)
                out = body.call(list(cc) + list(x_t) + consts, caps, given)
                return out[:n], out[n : n + ny]

            (out_c, out_y), pull = vjp(f, list(c_t))
            (d_c,) = pull((_invariant_like(c, out_c), _invariant_like(ct_y, out_y)))
            d_c = _fill(d_c, c_t)
            if ct_s:
                d_c = [d + e if d.dtype.is_float else d for d, e in zip(d_c, ct_s)]
            return d_c, list(c)  # the cotangent of this step's carry output

        d_c, g_out = _scan_flat(step, ct_carry, saved + xs + ct_ys + extra + res, spec, consts=rest)

        def every_step(*chosen):
            it = iter(chosen)
            xs_ = [next(it) if w else x for x, w in zip(xs, want_x)]
            rest_ = [next(it) if w else k for k, w in zip(rest, want_k)]
            out = vmap(
                lambda c_t, x_t, k, r: _replay_step(
                    body, layout, c_t, x_t, k, given=dict(zip(kept, r))
                ),
                in_axes=(0, 0, None, 0),
                axis_size=spec.length,
            )(saved, xs_, rest_, res)
            return out[:n], out[n : n + ny]

        wanted = [x for x, w in zip(xs, want_x) if w] + [k for k, w in zip(rest, want_k) if w]
        (out_c, out_y), pull = vjp(every_step, *wanted)
        got = iter(pull((_invariant_like(g_out, out_c), _invariant_like(ct_ys, out_y))))
        ct_xs = [_own_levels(next(got), x) if w else None for x, w in zip(xs, want_x)]
        ct_rest = [_own_levels(next(got), k) if w else None for k, w in zip(rest, want_k)]
        return _carry_cotangents(d_c, carry) + ct_xs + ct_rest

    def replay(self, args, kwargs):
        layout = LoopLayout.of(kwargs)
        n, ny = layout.n_carry, layout.n_ys
        body = kwargs["body"]
        ops = layout.split(args)
        caps = ops.captured

        def step(c, x, k):
            out = body.call(list(c) + list(x) + list(k), caps)
            return out[:n], out[n : n + ny]

        # the recorded node's outputs, saved carries included when it had them; its
        # residuals (which the new trace might pick differently) computed again from the
        # saved carries, all steps at once
        spec = _ScanSpec.of(kwargs)
        out = _scan_node(
            step, ops.carry, ops.xs, spec, ops.consts, saves=kwargs["saves"], residuals=False
        )
        kept = kwargs.get("residuals", ())
        if not kept:
            return out.carry + out.ys + out.saved
        res = vmap(
            lambda c_t, x_t, k: _node_values(body, layout, c_t, x_t, k, kept),
            in_axes=(0, 0, None),
            axis_size=spec.length,
        )(out.saved, ops.xs, ops.rest)
        return out.carry + out.ys + out.saved + list(res)


_scan = ScanOp()


def scan(f, init, xs=None, length=None, reverse=False, unroll=1):
    """Loop ``f`` over the leading axis of ``xs``, carrying state (``jax.lax.scan``)::

        carry = init; ys = []
        for x in xs:                      # from the end with reverse=True
            carry, y = f(carry, x)
            ys.append(y)
        return carry, stack(ys)           # ys in the order of xs

    ``f`` is traced once whatever the length (the trace does not grow with it); the loop
    runs in the backend. Differentiable in both modes (reverse mode saves each step's carry
    and matrix products, and recomputes the rest of each step's forward for the backward
    loop); batches under ``vmap``. A body
    that draws random numbers from a key it receives (carried and split each step, or one
    per step among ``xs``, as JAX code does) runs its steps one by one instead: draws run on
    the host, each step from its own key (under ``compile`` the program grows with the
    length).

    Args:
        f: ``(carry, x) -> (carry, y)``; ``y`` may be any pytree, or None.
        init: the initial carry pytree.
        xs: a pytree of tensors sharing a leading axis (or None with ``length``).
        length: the number of steps; required when ``xs`` is None, checked otherwise.
        reverse: scan from the end of ``xs`` to the start.
        unroll: steps per loop iteration (an int >= 1, or True for the whole length): the
            body is traced with that many copies of ``f``, so there are fewer, larger
            iterations; results are identical.

    Returns:
        ``(final carry, ys)``; each ``ys`` leaf has the leading axis ``length``.

    Raises:
        ValueError: for xs leaves of different lengths, or a ``length`` that disagrees.
        TypeError: if ``f`` changes the carry's structure, shapes or dtypes.

    Example:
        >>> final, ys = nb.scan(lambda c, x: (c + x, c * x), nb.zeros((3,)), xs)
    """
    return _scan_tree(f, init, xs, _ScanSpec(length, reverse, unroll))


def _scan_tree(f, init, xs, spec: _ScanSpec):
    """``scan`` over pytrees; ``spec.length`` is checked against ``xs`` (or taken from
    it)."""
    what, fn_name = spec.what, spec.fn_name
    if not callable(f):
        raise TypeError(f"{what}: {fn_name} must be callable")
    c_flat, c_tree = _to_tensors(init, f"{what} init")
    x_flat, x_tree = _to_tensors(xs, f"{what} xs") if xs is not None else ([], None)
    n_steps = _scan_length(x_flat, x_tree, spec.length)
    unroll = spec.unroll
    if isinstance(unroll, bool):
        unroll = max(n_steps, 1) if unroll else 1
    if not isinstance(unroll, numbers.Integral) or unroll < 1:
        raise TypeError(f"{what}: unroll must be a positive int or a bool, got {unroll!r}")
    spec = spec._replace(length=n_steps, unroll=int(unroll))
    y_tree_box = []

    def step(c, x, _k):
        xv = None if x_tree is None else tree_unflatten(x_tree, list(x))
        out = f(tree_unflatten(c_tree, list(c)), xv)
        if not (isinstance(out, tuple | list) and len(out) == 2):  # (a list too, as JAX)
            raise TypeError(f"{what}: {fn_name} must return a pair (carry, y)")
        new_c, y = out
        nc_flat, nc_tree = tree_flatten(new_c)
        if nc_tree != c_tree:
            raise TypeError(
                f"{what}: {fn_name} must return the carry with the structure of init: got "
                f"{nc_tree}, init is {c_tree}"
            )
        y_flat, y_tree = tree_flatten(y)
        y_tree_box[:] = [y_tree]
        return nc_flat, y_flat

    try:
        c_flat = _promote_weak(
            c_flat,
            _weak_leaves(init),
            lambda c, x: step(c, x, [])[0],
            what,
            [_slice_aval(x) for x in x_flat],
        )
        if spec.unroll > 1 and n_steps > 1:
            c_out, ys = _scan_unrolled(step, c_flat, x_flat, spec)
        else:
            c_out, ys = _scan_flat(step, c_flat, x_flat, spec, narrow=True)
    except DrawInBody:
        c_out, ys = _scan_steps(step, c_flat, x_flat, spec)
    if not y_tree_box:  # f never ran (no carry and no xs): trace it once for ys's structure
        step(c_flat, [_slice_aval(x) for x in x_flat], [])
    return tree_unflatten(c_tree, c_out), tree_unflatten(y_tree_box[0], ys)


def _scan_steps(step, carry: list, xs: list, spec: _ScanSpec) -> tuple:
    """The scan as a Python loop over its steps, for a body that draws random numbers from
    a key it receives or computes (``jax.random.split`` of the carried key, a key per step
    among ``xs``): each step's draws run on the host as eager ones do, with the step's own
    key. Under ``compile`` the steps are traced one after the other (the program grows
    with the length); gradients and ``vmap`` go through the steps as through any code.
    The carry keeps its structure, shapes and dtypes, as the traced loop requires."""
    avals = [(c.dtype, tuple(c.shape)) for c in carry]
    if spec.length == 0:  # no step: one run on zeros tells the ys' shapes (as JAX's trace)
        _, probe = step(carry, [creation.zeros(tuple(x.shape[1:]), dtype=x.dtype) for x in xs], [])
        ys = [as_tensor(y) for y in probe]
        return carry, [creation.zeros((0, *y.shape), dtype=y.dtype) for y in ys]
    order = range(spec.length - 1, -1, -1) if spec.reverse else range(spec.length)
    per_step: dict = {}
    for i in order:
        carry, y = step(carry, [x[i] for x in xs], [])
        _check_carry(
            spec.what, "init", avals, spec.fn_name, [(c.dtype, tuple(c.shape)) for c in carry]
        )
        per_step[i] = y
    ys = [
        view.stack([as_tensor(per_step[i][j]) for i in range(spec.length)], 0)
        for j in range(len(per_step[0]))
    ]
    return carry, ys


def _scan_length(x_flat, x_tree, length):
    sizes = []
    for t in x_flat:
        if t.ndim == 0:
            raise ValueError(
                f"scan: every xs leaf needs a leading axis, got a {t.dtype.value} scalar"
            )
        sizes.append(t.shape[0])
    if length is not None:
        if not isinstance(length, numbers.Integral) or length < 0:
            raise TypeError(f"scan: length must be a non-negative int, got {length!r}")
        length = int(length)
    if sizes:
        if len(set(sizes)) != 1 or (length is not None and sizes[0] != length):
            desc = ", ".join(f"xs{p}: {s}" for p, s in zip(_paths(x_tree), sizes))
            want = f" and length={length}" if length is not None else ""
            raise ValueError(
                f"scan: xs leaves must share the leading axis length{want}; got {desc}"
            )
        return sizes[0]
    if length is None:
        raise ValueError("scan: length is required when xs is None (or has no leaves)")
    return length


def _slice_aval(t: Tensor) -> Tensor:
    """An example of one step of ``t`` (its leading logical axis gone), valueless."""
    im = t._impl
    nb = len(im.levels)
    shape = im.shape[:nb] + im.shape[nb + 1 :]
    return Tensor._wrap(TensorImpl(shape, im.dtype, im.device, im.levels))


class _ScanTrace(NamedTuple):
    """A scan's body as traced: its vmap levels (those of carry and ys), how many ys it
    outputs, whether it also outputs each step's carry (traced for reverse mode), and the
    levels each carry and y has of its own (``_narrowed``)."""

    body: Body
    levels: tuple
    n_ys: int
    saves: bool
    natural: tuple
    residuals: tuple = ()  # the body nodes whose per-step values it also outputs


def _scan_flat(step, carry, xs, spec: _ScanSpec, consts=(), narrow: bool = False):
    """The core: ``step(carry, x, consts) -> (carry, ys)`` (lists) over ``spec.length``
    steps. ``narrow``: each carry and y with its own levels (``_narrowed``)."""
    out = _scan_node(step, carry, xs, spec, consts, narrow=narrow)
    return out.carry, out.ys


def _scan_node(
    step, carry, xs, spec: _ScanSpec, consts=(), saves=False, narrow=False, residuals=True
):
    """The scan node's outputs by role (``ScanOutputs``; its ``saved`` are the saved
    carries, then the residuals). ``saves``: output each step's carry even where nothing
    is differentiated now (a compiled plan replays a node traced for reverse mode, whose
    saved carries its later nodes read). ``narrow``: carries and ys with their own levels
    (``_narrowed``; the saved carries stay the node's). ``residuals``: False keeps none
    (``_residual_nodes``)."""
    consts = list(consts)
    traced = _trace_scan(step, carry, xs, consts, spec, saves, residuals)
    mapped = _map_hoisted(traced, len(carry), xs, consts, spec)
    if mapped is not None:  # the body again, without its carry-free part
        step, xs = mapped
        # (its results' own levels are the whole body's: the replayed nodes were traced
        # at the shared levels and broadcast every result to them)
        natural = traced.natural
        traced = _trace_scan(step, carry, xs, consts, spec, saves, residuals)
        traced = traced._replace(natural=natural)
    body, levels, ny, saves, natural, kept = traced
    n, nx = len(carry), len(xs)
    caps, (slots,) = _cap_layout([body])
    out_specs = _scan_out_specs(traced, n, spec.length)
    reverse = bool(spec.reverse)
    kwargs = {
        "body": body,
        "n_carry": n,
        "n_xs": nx,
        "n_consts": len(consts),
        "n_ys": ny,
        "saves": saves,
        "residuals": kept,
        "length": spec.length,
        "reverse": reverse,
        "levels": levels,
        "phys": {
            "body": body.program(slots, _specs(caps)),
            "n_carry": n,
            "n_xs": nx,
            "length": spec.length,
            "reverse": reverse,
            "x_axes": tuple(len(x._impl.levels) for x in xs),
            "y_axis": len(levels),
            "out_specs": out_specs,
        },
    }
    if not out_specs:
        return ScanOutputs([], [], [])
    init = [_at_levels(t, levels) for t in carry]
    outs = list(_scan.bind([*init, *xs, *consts, *[Tensor._wrap(c) for c in caps]], kwargs))
    if saves:  # the node keeps its saved carries alive for its vjp (nobody else holds them)
        kwargs["saved"] = tuple(o._impl for o in outs[n + ny :])
    c_out, ys = outs[:n], outs[n : n + ny]
    if narrow:
        c_out, ys = _narrowed(c_out, natural[:n]), _narrowed(ys, natural[n:])
    return ScanOutputs(c_out, ys, outs[n + ny :])


# how a scan body's node depends on the step's inputs (``_map_hoisted``)
_INVARIANT, _PER_STEP, _CARRIED = 0, 1, 2


def _map_hoisted(traced: _ScanTrace, n: int, xs: list, consts: list, spec: _ScanSpec):
    """Hoist the carry-free part of a scan body out of the loop, mapped over every step at
    once: ``(new step, new xs)``, or None when there is none.

    A body node that depends on the step's ``xs`` but not on the carry (a backward scan's
    recomputed forward, which reads the saved carries as xs; any work on ``x`` alone) gives
    the same values whether it runs step by step or for all steps at once. Here it runs
    once, ``vmap``-ed over the steps (one large matmul instead of ``length`` small ones,
    one elementwise pass instead of ``length`` Python-dispatched ones), and the loop reads
    its results as extra ``xs``. The new body replays the recorded nodes that depend on
    the carry; nothing is traced from the user's function again.

    Only nodes whose recording means the same with a batch dim more are hoisted (the
    recording is replayed under the new vmap level): not vmap plumbing or nested
    constructs (``physical`` ops, ops with their own ``replay``), and not a node whose
    per-step operands have fewer dims than another operand (an op wrapper aligned those
    ranks only where it saw batch dims); such a node stays in the loop. Under
    ``nb.debug_nans`` the body stays whole, so a NaN is reported at its step."""
    body, nx, nk = traced.body, len(xs), len(consts)
    if spec.length < 2 or not nx or not _has_per_step_work(body, n, nx):
        return None
    if STATE.body_args is not None:
        # inside another construct's body the mapped xs would enter it as captured values
        # batched by this vmap, whose level then leaks into that body's derivatives (a
        # nested scan's gradient came out len(xs) times too large per level): run whole
        return None
    if body.nodes[0].site is not None:  # nb.debug_nans names the step a NaN came from
        return None
    kind: list = []
    caps = [Tensor._wrap(im) for im in body.captured]
    outputs = list(body.outputs)

    def of(r):
        if r.kind == "arg":
            return _CARRIED if r.index < n else _PER_STEP if r.index < n + nx else _INVARIANT
        return _INVARIANT if r.kind == "cap" else kind[r.index]

    def per_step(*a):  # one step's hoisted values from its x slices and the consts
        args = [None] * n + list(a)
        vals: list = []
        for node in body.nodes:
            k = max((of(r) for r in node.refs), default=_INVARIANT)
            out = None
            if k != _CARRIED:
                ins = [r.lookup(args, caps, vals) for r in node.refs]
                if k == _PER_STEP and not _maps_cleanly(node, ins, [of(r) for r in node.refs]):
                    k = _CARRIED
                else:
                    out = _rebind(node, ins)
            kind.append(k)
            vals.append(out)
        # the hoisted values the loop still reads: operands of its nodes, body outputs
        readers = [r for node, k in zip(body.nodes, kind) if k == _CARRIED for r in node.refs]
        for r in readers + outputs:
            if r.kind == "node" and kind[r.index] == _PER_STEP and (r.index, r.output) not in b:
                b.append((r.index, r.output))
        kept_x.extend(
            sorted({r.index - n for r in readers + outputs if r.kind == "arg" and n <= r.index})
        )
        return [vals[i][o] for i, o in b]

    b: list = []  # (node, output) of each hoisted value the loop reads
    kept_x: list = []  # the xs (and consts) the loop still reads
    stacked = vmap(per_step, in_axes=(0,) * nx + (None,) * nk)(*xs, *consts)
    if not b:
        return None
    kept_x = [i for i in kept_x if i < nx]
    given_of: dict = {}
    for j, (i, o) in enumerate(b):
        given_of.setdefault(i, {})[o] = j

    def step(c, x, k):
        full_x: list = [None] * nx
        for j, xi in enumerate(kept_x):
            full_x[xi] = x[j]
        hoisted = x[len(kept_x) :]
        args = list(c) + full_x + list(k)
        vals: list = []
        for i, node in enumerate(body.nodes):
            if kind[i] == _PER_STEP:
                at = given_of.get(i, {})
                width = len(node.out_specs)
                vals.append([hoisted[at[o]] if o in at else None for o in range(width)])
                continue
            vals.append(_rebind(node, [r.lookup(args, caps, vals) for r in node.refs]))
        outs = [r.lookup(args, caps, vals) for r in outputs]
        return outs[:n], outs[n : n + traced.n_ys]

    return step, [xs[i] for i in kept_x] + list(stacked)


def _has_per_step_work(body: Body, n: int, nx: int) -> bool:
    """Does a body node that reads the step's xs but not the carry feed the rest of the
    loop (what ``_map_hoisted`` could take out)?"""
    per_step = set()
    for i, node in enumerate(body.nodes):
        carried = any(
            (r.kind == "arg" and r.index < n) or (r.kind == "node" and r.index not in per_step)
            for r in node.refs
        )
        if not carried and any(
            (r.kind == "arg" and n <= r.index < n + nx) or r.kind == "node" for r in node.refs
        ):
            per_step.add(i)
    return bool(per_step)


class ResidualOp(Operation):
    """A value a scan's forward loop kept (a residual) of an ``op`` node of its body,
    standing for that node when reverse mode replays the body: inputs ``(*the node's
    operands, value)``, output ``value``. It runs nothing (``pass_through``); its
    derivatives are ``op``'s rules on those operands, so cotangents and tangents still
    reach them (and through them the carry) while the node's work, a matrix product per
    step, is not done again. The value itself gets no cotangent: the node's operands carry
    its derivative. The operands are aligned to the call's vmap levels as ``op``'s own
    call would align them, which is what its rules expect. One per op (``name``: the op's
    with ``_residual``)."""

    backend_name = "pass_through"
    arity = None
    runs_sharded = False

    def __init__(self, op: Operation):
        self.name = f"{op.name}_residual"
        self.op = op
        super().__init__()

    @staticmethod
    def kwargs_for(node) -> dict:
        """The kwargs of the residual standing for recorded ``node`` (hashable, as a node's
        structural key needs: the node's own kwargs as sorted items)."""
        return {"n_skip": len(node.refs), "op_kwargs": tuple(sorted(node.kwargs.items()))}

    def implicit_broadcast(self, index, impl):
        return index < self.op.arity and self.op.rules_take_unbatched(index, impl)

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        return {"n_skip": kwargs["n_skip"]}

    def infer(self, shapes, dtypes, kwargs):
        return [shapes[-1]], [dtypes[-1]]

    def described(self, kwargs):
        return self.op.described(dict(kwargs["op_kwargs"]))

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        out = [primals[-1] if o is None else o for o in outputs]  # (an output nobody kept)
        rule = self.op.vjp_rule(primals[:-1], cotangents, out, dict(kwargs["op_kwargs"]))
        return [*rule, None]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        return self.op.jvp(primals[:-1], tangents[:-1], outputs, dict(kwargs["op_kwargs"]))


def _bind_residual(node, ins: list, value) -> list:
    """Recorded ``node``'s output as its kept ``value`` (``ResidualOp``) over ``ins``."""
    return [_RESIDUALS[node.op.name].bind([*ins, value], ResidualOp.kwargs_for(node))]


def _rebind(node, ins: list) -> list:
    """A recorded node's op on ``ins`` (through its ``replay`` where it has one, else its
    ``rebind``, which prepares operands vmap batched as the op's call would: as
    ``Body.call``), as a list of outputs."""
    run = getattr(node.op, "replay", None)
    out = run(ins, node.kwargs) if run is not None else node.op.rebind(ins, node.kwargs)
    return out if node.op.multiple_results else [out]


class _Unmappable(Exception):
    """A recorded node that cannot be replayed with a batch dim more (``_maps_cleanly``)."""


def _replay_step(
    body: Body, layout, c_t, x_t, rest, check: bool = False, given: dict | None = None
) -> list:
    """The body's outputs for one step's carry ``c_t``, xs ``x_t`` and ``rest`` (consts,
    then captured), replayed under a vmap over the steps. With ``check``, a node
    ``_maps_cleanly`` refuses raises ``_Unmappable``. ``given``: as ``Body.call``'s."""
    n, nx = layout.n_carry, layout.n_xs
    consts, caps = layout.split_rest(rest)
    args = list(c_t) + list(x_t) + consts
    mapped: list = []

    def is_mapped(r):
        if r.kind == "arg":
            return r.index < n + nx
        return r.kind == "node" and mapped[r.index]

    vals: list = []
    for node in body.nodes:
        ins = [r.lookup(args, caps, vals) for r in node.refs]
        kinds = [_PER_STEP if is_mapped(r) else _INVARIANT for r in node.refs]
        m = _PER_STEP in kinds
        if check and m and not _maps_cleanly(node, ins, kinds):
            raise _Unmappable(node.op.name)
        if given and len(vals) in given:
            vals.append(_bind_residual(node, ins, given[len(vals)]))
        else:
            vals.append(_rebind(node, ins))
        mapped.append(m)
    return [r.lookup(args, caps, vals) for r in body.outputs]


def _node_values(body: Body, layout, c_t, x_t, rest, kept: tuple) -> list:
    """The values of the body's nodes ``kept`` for one step's carry ``c_t``, xs ``x_t``
    and ``rest`` (consts, then captured)."""
    consts, caps = layout.split_rest(rest)
    args = list(c_t) + list(x_t) + consts
    vals: list = []
    for node in body.nodes[: max(kept) + 1]:
        vals.append(_rebind(node, [r.lookup(args, caps, vals) for r in node.refs]))
    return [vals[i][0] for i in kept]


def _steps_map(body: Body, layout, saved, xs, rest, spec: _ScanSpec, residuals) -> bool:
    """May reverse mode take the xs' and constants' cotangents after the loop, from the
    body replayed for every step at once (``residuals``: the kept nodes' indices and
    stacked values)? Not under ``nb.debug_nans`` (which names a NaN's step), nor where a
    node would not replay with a batch dim more."""
    if spec.length < 2 or not body.nodes or body.nodes[0].site is not None:
        return False
    kept, res = residuals
    try:
        vmap(
            lambda c_t, x_t, k, r: _replay_step(
                body, layout, c_t, x_t, k, check=True, given=dict(zip(kept, r))
            ),
            in_axes=(0, 0, None, 0),
            axis_size=spec.length,
        )(saved, xs, rest, res)
    except _Unmappable:
        return False
    return True


def _maps_cleanly(node, ins: list, kinds: list) -> bool:
    """May ``node`` be replayed with a batch dim more on its per-step operands?"""
    op = node.op
    if op.physical or hasattr(op, "replay"):
        return False
    rank = max(t.ndim for t in ins)
    return all(t.ndim == rank for t, k in zip(ins, kinds) if k == _PER_STEP)


def _trace_scan(
    step, carry, xs, consts, spec: _ScanSpec, saves: bool = False, residuals: bool = True
) -> _ScanTrace:
    """Trace ``step`` once into a scan body: at the carry's vmap levels, widened until the
    body adds none (the carry is batched from the start when a step makes it so), and also
    outputting the carry entering each step when reverse mode may walk back through it,
    with the step's residuals (``_residual_nodes``) unless ``residuals`` is False."""
    traced = f"{spec.what} {spec.fn_name}"
    n, nx = len(carry), len(xs)
    x_ex = [_slice_aval(x) for x in xs]
    live = _live(carry) or _live(xs) or _live(consts)
    saves = [saves]
    ny_box = [0]

    def body_fn(*a):
        c, y = step(list(a[:n]), list(a[n : n + nx]), list(a[n + nx :]))
        ny_box[0] = len(y)
        c = [_leaf_tensor(v, traced) for v in c]
        y = [_leaf_tensor(v, traced) for v in y]
        return c + y + (list(a[:n]) if saves[0] else [])

    own = [t._impl.levels for t in carry]  # each carry's levels, widened by the body
    k_levels = [x._impl.levels for x in x_ex] + [k._impl.levels for k in consts]
    while True:
        lv = own + k_levels
        body = trace_body(body_fn, list(carry) + x_ex + consts, traced, levels=lv)
        if not saves[0] and (live or _live([Tensor._wrap(c) for c in body.captured])):
            saves[0] = True  # traced for reverse mode: also output each step's carry
            continue
        if len(body.out_impls) < n:
            raise TypeError(
                f"{spec.what}: {spec.fn_name} returned fewer carry leaves than init has"
            )
        wider = [_union(lvs, o.levels) for lvs, o in zip(own, body.out_impls)]
        if wider == own:
            break
        own = wider
    init_avals = [(t.dtype, t.shape) for t in carry]
    _check_carry(spec.what, "init", init_avals, spec.fn_name, _logical_avals(body)[:n])
    ny = ny_box[0]
    natural = own + [o.levels for o in body.out_impls[n : n + ny]]
    levels = _union(*natural)  # the node's carries and ys share these
    if any(o.levels != levels for o in body.out_impls):
        lv = [levels] * n + k_levels
        body = trace_body(
            body_fn, list(carry) + x_ex + consts, traced, levels=lv, out_levels=levels
        )
    kept = _residual_nodes(body, n, levels) if saves[0] and residuals else ()
    if kept:
        body = _with_residuals(body, kept)
    return _ScanTrace(body, levels, ny, saves[0], tuple(natural), kept)


# the ops whose per-step results a scan traced for reverse mode keeps (JAX's
# ``dots_saveable``): the backward loop reads the kept matrix products instead of
# recomputing them from the saved carries. Elementwise work is recomputed (one pass over
# every step at once, ``_map_hoisted``); a product is the costly part of a recurrent step
# (an LSTM's ``h @ W_hh``: 6 ms of a 70 ms step at 64 steps, batch 32, hidden 256).
_SAVED_OPS = frozenset({"matmul"})
_RESIDUALS = {name: ResidualOp(OPS[name]) for name in _SAVED_OPS}


def _residual_nodes(body: Body, n: int, levels: tuple) -> tuple:
    """The indices of the body's nodes whose values a scan keeps for reverse mode: products
    (``_SAVED_OPS``) that depend on the carry. None under a vmap (a residual then need not
    have the carry's levels), inside another construct's body (whose own reverse mode
    replays this one), or under ``nb.debug_nans``."""
    if levels or STATE.body_args is not None or not body.nodes or body.nodes[0].site:
        return ()
    carried: set = set()
    kept = []
    for i, node in enumerate(body.nodes):
        if not any(
            (r.kind == "arg" and r.index < n) or (r.kind == "node" and r.index in carried)
            for r in node.refs
        ):
            continue
        carried.add(i)
        if node.op.name in _SAVED_OPS and _plain_operands(body, node):
            kept.append(i)
    return tuple(kept)


def _plain_operands(body: Body, node) -> bool:
    """Is ``node`` one result of matrices (2-D operands) with hashable kwargs? Its
    residual's derivative rules see the operands as recorded, while a replay under a vmap
    would have prepared some first (a vector times a matrix is promoted)."""
    if node.op.multiple_results:
        return False
    try:
        hash(tuple(node.kwargs.items()))
    except TypeError:
        return False

    def ndim(r):
        if r.kind == "arg":
            return len(body.in_specs[r.index].shape)
        if r.kind == "cap":
            return len(body.captured[r.index].shape)
        return len(body.nodes[r.index].out_specs[r.output][1])

    return all(ndim(r) == 2 for r in node.refs)


def _with_residuals(body: Body, kept: tuple) -> Body:
    """``body`` also outputting the values of its nodes ``kept``."""
    refs = [Ref("node", i, 0) for i in kept]
    device = body.out_impls[0].device
    avals = [
        OutAval(dt, tuple(shape), device, (), tuple(shape))
        for dt, shape in (body.nodes[i].out_specs[0] for i in kept)
    ]
    outputs = list(body.outputs) + refs
    recording = Recording(body.nodes, outputs, body.captured)
    out_tree = tree_flatten(list(range(len(outputs))))[1]
    return Body(body.what, body.in_specs, recording, out_tree, tuple(body.out_impls) + tuple(avals))


def _scan_out_specs(traced: _ScanTrace, n: int, length: int) -> tuple:
    """The scan node's physical ``(dtype, shape)`` per output: the ``n`` carries as the body
    returns them; ys and saved carries stacked, the step axis after the batch dims."""
    nb = len(traced.levels)
    return tuple(
        (dt, shape if k < n else shape[:nb] + (length,) + shape[nb:])
        for k, (dt, shape, _d, _l, _lg) in enumerate(traced.body.out_impls)
    )


def _scan_unrolled(step, carry, xs, spec: _ScanSpec):
    """``spec.unroll`` steps per loop iteration: xs reshaped to (length // unroll, unroll,
    ...), then the remainder as a second scan."""
    length, reverse, unroll = spec.length, spec.reverse, spec.unroll
    main = (length // unroll) * unroll
    rest = length - main

    def block(c, xb, k):
        ys_b = {}
        order = range(unroll - 1, -1, -1) if reverse else range(unroll)
        for j in order:
            c, ys_b[j] = step(c, [x[j] for x in xb], k)
        per_leaf = list(zip(*[ys_b[j] for j in range(unroll)]))
        return c, [view.stack(list(leaf), 0) for leaf in per_leaf]

    if reverse:  # the last `main` steps run first, then the first `rest`
        main_x = [x[rest:] for x in xs]
        tail_x = [x[:rest] for x in xs]
    else:
        main_x = [x[:main] for x in xs]
        tail_x = [x[main:] for x in xs]
    blocked = [x.reshape((main // unroll, unroll) + x.shape[1:]) for x in main_x]
    c, ys_b = _scan_flat(block, carry, blocked, spec._replace(length=main // unroll), narrow=True)
    ys_main = [y.reshape((main,) + y.shape[2:]) for y in ys_b]
    if not rest:
        return c, ys_main
    c, ys_tail = _scan_flat(step, c, tail_x, spec._replace(length=rest), narrow=True)
    pairs = zip(ys_tail, ys_main) if reverse else zip(ys_main, ys_tail)
    return c, [view.concatenate([a, b], 0) for a, b in pairs]
