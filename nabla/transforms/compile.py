"""``compile``: trace a function once per signature and reuse the recorded graph.

A *trace* runs the function on its arguments with the op pipeline recording every node it
creates (creation order is a topological order). The nodes between the arguments and the
outputs become a ``Plan``: the ops with their logical kwargs, where each input comes from
(argument, captured constant, fresh random key, or an earlier node), and the output pytree
with any Python values in it.

On a cache hit the function is not run again:

- *fast path* (arguments with no autodiff history, tangents or vmap levels, and the traced
  shapes): one ``compiled_call`` node whose backend program is the plan's instructions;
  realizing it runs the whole plan as one program (compiled once by MAX under ``auto``/``max``).
  When every argument is already realized (and unsharded), nothing could join that node in
  a larger program, so the plan's program runs at the call and the results come back
  realized (``jax.jit``'s dispatch); a lazy argument keeps the node lazy.
  Random draws in the plan (host ops) that read only arguments, constants and other draws
  are re-bound first, with a fresh key per call, and feed the program as inputs. Under a
  vmap the trace did not see, a plan with draws takes the replay path (a key per element).
- *replay path* (otherwise, e.g. ``grad``/``jvp``/``vmap`` of a compiled function, or a
  captured tensor that requires grad): the recorded ops are re-bound through the ordinary
  pipeline on the new arguments, so every transform sees exactly the ops the function
  would have produced.

Sharded outputs: a result holding partial terms (a mean loss over a sharded batch) is
completed inside the plan, so it comes back replicated as ``jax.jit`` returns it; across
processes a call with sharded results runs at the call (``_dispatch_across``), so every
process runs it at the same point and one process alone can then read a replicated result.

Cache key: function identity, argument pytree structure, per tensor (shape with the dims
named by ``dynamic_dims`` as names, dtype, device, sharding; NumPy arrays count as tensors,
as in ``jax.jit``), and other non-tensor arguments (Python numbers, strings, and NumPy
scalars, which the ops take as Python numbers) by value.

Captured state: tensors the function reaches without receiving them (closures, globals,
``self``/module attributes) are inputs of the plan, read at every call
(``_Plan.call_inputs``), as ``torch.compile`` makes parameters graph inputs. In-place
updates (``opt.step()``, ``load_state_dict``, ``x[i] = v``) are seen; so is a rebound name,
found again through the path the trace recorded (``_captures.py``); a captured tensor of
another shape or dtype retraces, as a guard would. A tensor the function itself updates in
place with ``ops.indexing.rebind`` (a module's running statistics in training mode), captured
or an argument, is *written state*: its new value is an output of the plan, and every call
writes it back into the caller's tensor, as torch.compile replays input mutations.
Python numbers are baked in (``jax.jit``).
Small values computed only from the trace's own literals are *folded*: they run once when
the plan is built and become constants of it (``_fold_constants``).

Dynamic dims: the trace runs with those sizes as ``SymDim`` expressions (``n * 4``,
``n // 2`` stay symbolic in shapes and kwargs). Another size evaluates the plan there
(``_Plan.specialize``), checked once per size by re-inferring every op's shapes; a Python
decision on a size (``if n > 3``, ``int(n)``) while tracing makes the trace serve its own
sizes only, and each other size is traced (``by_size``), with the reason logged. A size of
0 or 1 is such a decision too (``_small_sizes``): a trace there serves its own sizes, a
generic plan does not serve them, and the first generic trace after a small one becomes
the plan.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import logging
import os
import threading
import time
import types
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..backends.numpy import LOWERINGS as NUMPY_LOWERINGS
from ..core.config import CONFIG
from ..core.debug import checking
from ..core.device import get_default_device
from ..core.dtypes import DEFAULTS_OPEN, get_default_dtype
from ..core.ir import (
    Program,
    SymDim,
    TensorImpl,
    build_program,
    has_symdim,
    nested_programs,
    substitute_dims,
)
from ..core.pytree import frozen, tree_flatten, tree_unflatten
from ..core.sharding import PROCESS
from ..core.state import (
    STATE,
    enable_grad,
    grad_cut,
    is_live,
    level_sizes,
    live_grad_levels,
    no_grad,
)
from ..ops._util import as_tensor, check_callable
from ..ops.base import Operation
from ..ops.collectives import complete_partial
from ..ops.creation import constant
from ..ops.indexing import rebind, write_through
from ..ops.pipeline import Call, emit
from ..ops.random import drawing_levels, global_key
from ..ops.unary import identity
from ..runtime.executor import input_names, name_outputs, run_program
from ..runtime.graph import GRAPH
from ..runtime.nans import check_outputs
from ..runtime.tensor import Tensor
from ._captures import ModuleGuard, Path, find_paths, walk
from ._records import PyOut, Recording, Ref, keep_nodes
from .autodiff import _same_spec

__all__ = ["compile", "CompiledFunction", "CompilationStats"]

log = logging.getLogger("nabla.compile")


def _show_explanations() -> None:
    """``NABLA_EXPLAIN_RETRACE=1`` asks to see why each trace happened: when no logging is
    configured, print the ``nabla.compile`` logger's INFO messages to stderr."""
    if log.handlers or logging.getLogger().handlers:
        log.setLevel(min(log.level or logging.INFO, logging.INFO))
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


class _PlanArgs(NamedTuple):
    """A plan's tensor arguments as traced: ``(dtype, shape, device)`` each, their vmap
    levels, and their buffers' shapes (a sharded argument's block shape is the program's
    input shape)."""

    specs: tuple
    levels: tuple
    buffers: tuple


class _Plan:
    """A recorded graph: ``RecordedNode``s over ``Ref``s to the arguments, the constants
    (captured tensors, literals, random keys) and earlier nodes."""

    def __init__(self, recording: Recording, out_tree, rng_slots, args: _PlanArgs):
        # outputs: a Ref per tensor output, a PyOut per Python value; consts: the constants'
        # impls as traced (realized): literals, random keys, and captured tensors, which
        # ``call_inputs`` replaces by their current values at each call
        self.nodes, self.outputs, self.consts = recording
        self.out_tree = out_tree
        self.rng_slots = rng_slots  # const indices that get a fresh key per call
        # the global keys the trace drew, in order (dead draws too), and which of them each
        # slot takes: a call draws as many as the function does uncompiled, so a seeded
        # stream goes on as it would (``_renew_keys``)
        self.rng_draws = len(rng_slots)
        self.rng_order = tuple(range(len(rng_slots)))
        self.arg_specs, self.arg_levels, self.arg_buffers = args
        # per tensor output: (global physical shape, ShardingSpec or None), as traced
        self.out_layouts = None
        nodes = self.nodes
        self.has_host_ops = any(op.host_only for op, *_ in nodes)
        # random draws (host ops) that read only arguments, constants and other draws run
        # before the plan's program on the fast path: their values are program inputs
        host = [k for k, (op, *_) in enumerate(nodes) if op.host_only]
        hoistable = all(
            r.kind != "node" or nodes[r.index].op.host_only for k in host for r in nodes[k].refs
        )
        self.host_nodes = tuple(host) if hoistable else None
        self._host_devices = None
        self._program = None
        self._call_layouts = None
        self.calls = 0  # fast-path calls run at the call (``run_now``): the auto tier's count
        # traced inside vmap: the recorded ops already split the random keys per element
        self.traced_in_vmap = False
        # an ``enable_grad`` block inside: a call under ``no_grad`` still records history
        self.enables_grad = any(n.cut == "on" for n in self.nodes)
        # captured state (``_Capture``): consts read anew at every call (``call_inputs``)
        self.captures = ()
        # outputs that eagerly are objects the call holds (``_eager_aliases``), made once
        self.aliases = None
        # written state: a ``_WriteTarget`` per tensor the function updated in place; their
        # new values end the outputs (``_write_back``)
        self.writes = ()
        # dynamic dims: where user code decided on a symbolic size while traced (then the
        # plan serves only its own sizes); each other size gets its own trace (``by_size``)
        self.size_reads: list = []
        self.by_size: dict = {}
        # the sizes of a trace kept to its own sizes only because a dynamic dim was 0 or 1
        # there (``_small_sizes``): the next generic trace replaces it as the plan
        self.small_sizes: tuple | None = None
        self._specialized: dict = {}  # sizes -> this plan evaluated there, or why it can't be
        # the arguments' traced shapes as ints, for the check on every call (``_same_shapes``)
        self.traced_shapes = [tuple(int.__int__(d) for d in s) for _, s, _ in self.arg_specs]

    @property
    def symbolic(self) -> bool:
        """Valid for every size of its dynamic dims: no Python decision on a size, and no
        nested program (a control-flow body) whose sizes are the trace's."""
        return (
            not self.size_reads
            and any(isinstance(d, SymDim) for _, shape, _ in self.arg_specs for d in shape)
            and _per_size_reason(self) is None
        )

    def specialize(self, sizes: dict, args: list):
        """This plan with its dynamic dims evaluated at ``sizes`` (cached per size), or a
        string saying why it does not hold there: each op's shapes are inferred again on
        arguments of the new sizes and must be the plan's symbolic shapes evaluated there
        (a size the function took as a plain number, such as a reshape to ``int(n) * 4``,
        would differ)."""
        key = tuple(sorted(sizes.items()))
        plan = self._specialized.get(key)
        if plan is None:
            sub = lambda v: substitute_dims(v, sizes)  # noqa: E731
            nodes = [
                n._replace(
                    kwargs=sub(n.kwargs), out_specs=sub(n.out_specs), phys_kwargs=sub(n.phys_kwargs)
                )
                for n in self.nodes
            ]
            at_sizes = _PlanArgs(sub(self.arg_specs), self.arg_levels, sub(self.arg_buffers))
            recording = Recording(nodes, self.outputs, self.consts)
            plan = _Plan(recording, self.out_tree, self.rng_slots, at_sizes)
            plan.rng_draws, plan.rng_order = self.rng_draws, self.rng_order
            plan.captures = self.captures
            plan.writes = self.writes
            plan.traced_in_vmap = self.traced_in_vmap
            plan.out_layouts = self.out_layouts and sub(self.out_layouts)
            plan = plan.check_shapes(args) or plan
            self._specialized[key] = plan
        return plan

    def check_shapes(self, args) -> str | None:
        """Re-bind the plan's ops on shape-only stand-ins for ``args`` (nothing runs) and
        compare every result's dtype and shape with the plan's: None when they all agree,
        else what differs."""
        stand_ins = []
        for t in args:
            impl = t._impl
            ph = TensorImpl(impl.shape, impl.dtype, impl.device, impl.levels)
            ph.sharding = impl.sharding
            stand_ins.append(Tensor._wrap(ph))
        old = STATE.recording
        STATE.recording = []  # nothing recorded here reaches an enclosing trace
        try:
            self.replay(stand_ins, self.consts, expect=True)
        except _ShapeMismatch as e:
            return str(e)
        except Exception as e:  # an op refused the new sizes: the trace does not hold there
            return f"an op refused the sizes ({type(e).__name__}: {e})"
        finally:
            STATE.recording = old
        return None

    # ------------------------------------------------------------------ replay path
    def replay(self, args: list[Tensor], const_impls: list, expect: bool = False) -> list:
        """Re-bind the recorded ops through the ordinary pipeline on ``args``; ``expect``
        raises ``_ShapeMismatch`` where a result's dtype or shape is not the recorded one
        (a shape check: the traced random keys stand, no key is drawn from the global
        generator)."""
        consts = [Tensor._wrap(c) for c in const_impls]
        if not expect:  # under a vmap the trace did not see: a key per element
            self._renew_keys(consts, batched=not self.traced_in_vmap)
        vals: list = []

        # the arguments' vmap levels at this call stand for those of the trace (a vmap or
        # shard_map around the call makes new levels each time)
        rename = {}
        for old, t in zip(self.arg_levels, args, strict=True):
            new = t._impl.levels
            if len(new) == len(old):
                rename.update((o, n) for o, n in zip(old, new, strict=True) if o != n)
        for op, kwargs, refs, specs, _phys, _site, cut in self.nodes:
            kw = _rename_levels(kwargs, rename) if rename and op.physical else kwargs
            ins = [r.lookup(args, consts, vals) for r in refs]
            # a ``no_grad``/``enable_grad`` block inside the function holds at each call
            # (outside them, the mode is the caller's)
            with _GRAD_BLOCKS[cut]():
                if hasattr(op, "replay"):
                    out = op.replay(ins, kw)
                else:  # (``rebind``: operands batched since the trace prepared as the call would)
                    out = op.rebind(ins, kw)
            outs = out if op.multiple_results else [out]
            if expect:
                got = [(o._impl.dtype, tuple(o._impl.shape)) for o in outs]
                want = [(dt, tuple(shape)) for dt, shape in specs]
                if got != want:
                    raise _ShapeMismatch(
                        f"{op.name} gives {_specs_str(got)} at these sizes where the trace "
                        f"says {_specs_str(want)} (a size taken as a plain number)"
                    )
            vals.append(outs)
        return [
            ref.value if type(ref) is PyOut else ref.lookup(args, consts, vals)
            for ref in self.outputs
        ]

    # ------------------------------------------------------------------ fast path
    def run_now(self, args: list, const_impls: list, fresh_keys: bool = True) -> list:
        """Run the plan's program on realized ``args`` at the call and return realized
        tensors, laid out as traced: what realizing one ``compiled_call`` node does, without
        building and looking up the one-node graph (~40 us a call; ~80 us for sharded
        arguments). The plan counts its own calls for the ``auto`` tier, as the graph
        cache counts a structure's evaluations. ``fresh_keys=False`` keeps the random keys
        in ``const_impls`` (the trace's own, for the call that traced it)."""
        shapes, dtypes, shardings = self.call_layouts()
        program = self.program()
        if self.rng_draws and fresh_keys:
            const_impls = [t._impl for t in self.call_consts(const_impls)]
        impls = [t._impl for t in args] + list(const_impls)
        device = _compiled_call.device_of(impls, {})
        with GRAPH.lock:
            self.calls += 1
            inputs = [im.buffer for im in impls]
            outs = run_program(program, self.calls, inputs, input_names(impls))
        if CONFIG.debug_values:  # nb.debug_nans: find the op
            check_outputs(program, inputs, outs, (), "compiled function")
        specs = shardings or [None] * len(shapes)
        results = [
            Tensor._from_buffer(shape, dt, device, out, spec)
            for shape, dt, spec, out in zip(shapes, dtypes, specs, outs, strict=True)
        ]
        name_outputs([t._impl for t in results], outs)
        return results

    def call_inputs(self, fun, flat=None):
        """The constants' impls for one call: each captured tensor as it is now (its
        path from ``fun`` followed again, so a rebound name is seen; an argument's
        ``.grad`` read from ``flat``, the call's leaves). Returns ``(impls, None)``, or
        ``(None, reason)`` when a captured value no longer matches the trace (another
        shape, dtype, device or sharding, or not a tensor): the function must be traced
        again."""
        if not self.captures:
            return self.consts, None
        impls = list(self.consts)
        for cap in self.captures:
            t = cap.tensor
            if cap.path is not None:
                through_args = type(cap.path) in _VIA_ARGS
                if through_args and flat is None:  # (the hot lane: such a plan takes none)
                    return None, "it reads a tensor through an argument"
                try:
                    now = cap.path.follow_from(flat) if through_args else cap.path.follow(fun)
                except LookupError:  # (what the function reads is gone: its trace says how)
                    return None, f"{cap.path.describe(_name(fun))} no longer exists"
                if now is not t:
                    if not isinstance(now, Tensor):
                        where = cap.path.describe(_name(fun))
                        return None, f"{where} is now a {type(now).__name__}, not a tensor"
                    t = now
                for other in cap.others:  # (a tied weight's other names, from fun)
                    try:
                        also = other.follow(fun)
                    except LookupError:
                        also = None
                    if also is not t:
                        return None, (
                            f"{cap.path.describe(_name(fun))} and {other.describe(_name(fun))}"
                            " were one tensor when traced and no longer are"
                        )
            impl = t._impl
            if impl is not impls[cap.index]:
                if _layout(impl) != cap.spec:
                    where = cap.path.describe(_name(fun)) if cap.path else "a captured tensor"
                    return None, (
                        f"{where} changed from {cap.spec.dtype.value}{list(cap.spec.shape)} to "
                        f"{impl.dtype.value}{list(impl.shape)}"
                    )
                impls[cap.index] = impl
        return impls, None

    def call_consts(self, const_impls, fresh_keys: bool = True) -> list:
        """The constants for one call as tensors: a fresh key in every random-key slot
        (unless ``fresh_keys`` is False)."""
        consts = [Tensor._wrap(c) for c in const_impls]
        if fresh_keys:
            self._renew_keys(consts, batched=False)  # an enclosing compile records them
        return consts

    def _renew_keys(self, consts: list, batched: bool) -> None:
        """A fresh global key in every random-key slot of ``consts``, drawn as the function
        draws uncompiled: one per draw the trace made, a dead one's included."""
        if not self.rng_draws:
            return
        keys = [global_key(batched=batched) for _ in range(self.rng_draws)]
        for j, k in zip(self.rng_slots, self.rng_order, strict=True):
            consts[j] = keys[k]

    def bind_host_nodes(self, args: list, consts: list) -> list:
        """Re-bind the plan's random draws on this call's inputs (they run with NumPy before
        the program); returns every output of every draw, in plan order."""
        vals: dict = {}
        outs = []
        for k in self.host_nodes:
            op, kwargs, refs, *_ = self.nodes[k]
            out = op.bind([r.lookup(args, consts, vals) for r in refs], kwargs)
            vals[k] = list(out) if op.multiple_results else [out]
            outs.extend(vals[k])
        if self._host_devices is None:
            self._host_devices = tuple(o.device for o in outs)
        return outs

    def call_layouts(self):
        """(shapes, dtypes, shardings or None) of the tensor outputs of a fast-path call,
        worked out once per plan (every call of the plan has the same)."""
        got = self._call_layouts
        if got is None:
            dtypes = [dt for dt, _ in self.tensor_output_specs()]
            shapes = [tuple(int(d) for d in shape) for shape, _ in self.out_layouts]
            shardings = [spec for _, spec in self.out_layouts]
            if all(sp is None for sp in shardings):
                shardings = None
            got = self._call_layouts = (shapes, dtypes, shardings)
        return got

    def tensor_output_specs(self):
        specs = []
        for ref in self.outputs:
            if type(ref) is PyOut:
                continue
            if ref.kind == "node":
                specs.append(self.nodes[ref.index].out_specs[ref.output])
            elif ref.kind == "arg":
                specs.append(self.arg_specs[ref.index][:2])
            else:
                c = self.consts[ref.index]
                specs.append((c.dtype, c.shape))
        return specs

    def program(self) -> Program:
        """The plan as a backend ``Program`` over (args, consts) -> tensor outputs.

        Dynamic dims stay ``SymDim``s in its shapes; ``symbolic`` is set when no Python
        decision on a size was recorded, so a backend may compile one model for every
        size."""
        if self._program is None:
            n_args = len(self.arg_specs)
            consts = tuple((c.dtype, c.buffer_shape, c.device) for c in self.consts)
            inputs = [
                (dt, buf, dev)
                for (dt, _, dev), buf in zip(self.arg_specs, self.arg_buffers, strict=True)
            ] + list(consts)
            host_slot = {}  # (node, output) of a random draw -> program input
            devices = iter(self._host_devices or ())
            for k in self.host_nodes or ():
                for i, (dt, shape) in enumerate(self.nodes[k].out_specs):
                    host_slot[(k, i)] = len(inputs)
                    inputs.append((dt, shape, next(devices)))
            step_of = {}  # plan node -> program step (draws are not steps)

            def ref(r):
                if r.kind == "arg":
                    return r.index
                if r.kind == "const":
                    return n_args + r.index
                slot = host_slot.get((r.index, r.output))
                return slot if slot is not None else (step_of[r.index], r.output)

            steps = []
            for k, (op, _kwargs, refs, specs, phys, *_) in enumerate(self.nodes):
                if (k, 0) in host_slot:
                    continue
                step_of[k] = len(steps)
                steps.append((op.backend_name, tuple(ref(r) for r in refs), phys, specs))
            outputs = [ref(r) for r in self.outputs if type(r) is not PyOut]
            self._program = build_program(
                ("plan", id(self)),
                tuple(inputs),
                steps,
                outputs,
                symbolic=self.symbolic,
            )
            self._program.sites[:] = [self.nodes[k].site for k in step_of]
        return self._program

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


def _leaked_value(fun, recorded: list, writes: list):
    """The ``Path`` from ``fun`` to a tensor that the trace computed and the function bound
    in Python state (a global, a closure's container, an attribute), or None. State updated
    in place (``writes``) is written at every call and does not count."""
    made = set()
    for node in recorded:
        for ref in node.outputs:
            o = ref()
            if o is not None:
                made.add(id(o))
    if not made:
        return None
    written = {id(w.tensor) for w in writes}
    for steps, obj, _cost in walk(fun):
        if isinstance(obj, Tensor) and id(obj._impl) in made and id(obj) not in written:
            return Path(steps)
    return None


def _reads_an_updated_leaf(writes: list, recorded: list) -> bool:
    """Did the trace update a ``requires_grad`` leaf in place and then read its new value?"""
    new_values = set()
    for k, w in enumerate(writes):
        if not w.before.requires_grad:
            continue
        later = next((v for v in writes[k + 1 :] if v.tensor is w.tensor), None)
        new_values.add(id(later.before if later is not None else w.tensor._impl))
    if not new_values:
        return False
    return any(id(i) in new_values for node in recorded for i in node.inputs)


# a recorded node's grad-mode block (``RecordedNode.cut``) as a replay enters it
_GRAD_BLOCKS = {None: contextlib.nullcontext, "off": no_grad, "on": enable_grad}


def _hooked(recorded, arguments) -> bool:
    """Does a value the trace recorded, or an argument's placeholder (a hook the function
    registers on its argument), carry ``register_hook``/``retain_grad`` marks?"""
    if any(isinstance(t, Tensor) and t._impl.hooks for t in arguments):
        return True
    for node in recorded:
        for ref in node.outputs:
            o = ref()
            if o is not None and o.hooks:
                return True
    return False


def _tagged_parts(parts) -> dict:
    """A call key's parts after its leaves', by what they record (``_RETRACE_WHY``)."""
    return {(p[0] if isinstance(p[0], str) else "defaults"): p for p in parts}


_RETRACE_WHY = {
    "vmap": lambda was, now: "the arguments' vmap batching changed",
    "debug_nans": lambda was, now: (
        f"nb.debug_nans/debug_infs was switched {'on' if 'debug_nans' in now else 'off'}"
    ),
    "defaults": lambda was, now: (
        f"the default dtype/device changed: {was.get('defaults')} -> {now.get('defaults')}"
    ),
    "modules": lambda was, now: (
        "a module it reads changed: train()/eval(), an attribute, or a submodule"
    ),
}


def _batching_key(batched: list) -> tuple:
    """The vmap batching of a call's tensor leaves (``(leaf index, levels)`` for each
    batched one) as a key part: each level by its rank among the call's levels (a vmap
    around the call makes new ids each time; their nesting order is what a trace depends
    on) and its size. A trace made under a vmap records the batched layout, so it serves
    only calls batched the same way."""
    ranks = {lv: r for r, lv in enumerate(sorted({lv for _, lvs in batched for lv in lvs}))}
    # which levels a differentiation began inside of (``vmap(grad(f))``): a construct's
    # result keeps per-lane derivatives there and is not narrowed to one lane
    inner = tuple(sorted(ranks[lv] for lv in ranks if any(g > lv for g in live_grad_levels)))
    return (
        "vmap",
        tuple((i, tuple((ranks[lv], level_sizes[lv]) for lv in lvs)) for i, lvs in batched),
        inner,
    )


def _rename_levels(kwargs, rename):
    """vmap-plumbing kwargs with the trace's level ids replaced by this call's."""
    out = dict(kwargs)
    if "level" in out:
        out["level"] = rename.get(out["level"], out["level"])
    for key in ("levels", "drop"):
        if key in out:
            out[key] = tuple(sorted(rename.get(lv, lv) for lv in out[key]))
    return out


class _ShapeMismatch(Exception):
    """A re-bound op's result differs from the recorded one (``_Plan.check_shapes``)."""


def _specs_str(specs) -> str:
    return ", ".join(f"{dt.value}{list(shape)}" for dt, shape in specs)


class CompiledCallOp(Operation):
    """One node that runs a whole recorded plan (the compile fast path). It places its
    outputs itself (``collective``): the plan's program already works on the blocks of
    sharded arguments, and its outputs keep the layouts they had when traced."""

    name = "compiled_call"
    collective = True
    arity = None
    multiple_results = True
    physical = True
    differentiable = False

    def adapt_kwargs(self, kwargs, nb, batch_shape):
        # backends see only the plan's Program (never the plan itself)
        return {"program": kwargs["plan"].program()}

    def infer(self, shapes, dtypes, kwargs):
        specs = kwargs["plan"].tensor_output_specs()
        return [tuple(int(d) for d in s) for _, s in specs], [dt for dt, _ in specs]

    def bind_collective(self, args, kwargs):
        plan = kwargs["plan"]
        shapes, dtypes, shardings = plan.call_layouts()
        device = self.device_of([a._impl for a in args], kwargs)
        phys = self.adapt_kwargs(kwargs, 0, ())
        call = Call(self, args, kwargs)
        return emit(call.placed(phys, shapes, dtypes, [device] * len(shapes), shardings, ()))


_compiled_call = CompiledCallOp()


# ----------------------------------------------------------------------------- the transform
class _Call(NamedTuple):
    """One call of a compiled function, as its cache lookup and trace see it."""

    key: tuple  # (treedef, per-leaf entry, ...)
    flat: list  # the leaves (NumPy arrays made tensors)
    tree: object  # the treedef of (args, kwargs)
    sizes: dict  # dynamic dim name -> size at this call
    sym_shapes: dict  # leaf index -> shape with dynamic dims as names
    args: tuple  # as passed (a fallback runs the function on them)
    kwargs: dict


class _HotArgs(NamedTuple):
    """How the hot lane reads positional arguments that are not just tensors: their
    structure, each Python leaf's cache-key part, and where the tensor leaves sit."""

    tree: object  # the PyTreeDef of the positional arguments
    statics: tuple  # (leaf index, ``_static_key`` of the leaf) per Python leaf
    tensor_at: tuple  # the leaf index of each tensor argument, in order


class _Hot(NamedTuple):
    """The last hit that ran its plan at the call (``_Plan.run_now``), kept so the same call
    again skips the general path (the key, the lookup, the fast-path checks): the arguments'
    structure is compared with ``tree`` and each leaf checked against ``specs`` directly.
    Valid while its plan is the newest cache entry (any other lookup or store drops it)."""

    plan: _Plan
    tree: _HotArgs | None  # None: the positional arguments are the tensors themselves
    specs: tuple  # per argument leaf: (shape, dtype, device, sharding), as keyed
    modules: object  # the modules' state as keyed (``ModuleGuard.key``), or None
    program: Program
    layouts: tuple  # per tensor output: (shape, dtype, sharding)
    device: object  # where the outputs live
    single: bool  # the function returns its one tensor output itself (no tree to build)
    defaults: tuple  # the default dtype and device it was made under (``_defaults``)
    base: bool  # made with no ``default_dtype``/``default_device`` block open anywhere
    aliased: tuple | None  # one tensor in several places: ``_aliasing`` of the leaves


_COLD = object()  # a call the hot lane does not serve


@dataclass
class CompilationStats(Mapping):
    """Counters of one :class:`CompiledFunction` (``f.stats``).

    Attributes:
        hits: calls served by a cached trace (fast path or replay).
        misses: calls that traced the function.
        fallbacks: calls run as plain lazy code (the function realized a value while traced).
        evictions: traces dropped by the LRU bound.
        replays: hits that re-bound the recorded ops (under a transform, or a new size).
        compile_time_ms: total time spent tracing, in milliseconds.
        cache_size: cached traces now.

    Also a read-only mapping (``stats["hits"]``, ``dict(stats)``).
    """

    hits: int = 0
    misses: int = 0
    fallbacks: int = 0
    evictions: int = 0
    replays: int = 0
    compile_time_ms: float = 0.0
    cache_size: int = 0

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)``; 0.0 before the first call."""
        calls = self.hits + self.misses
        return self.hits / calls if calls else 0.0

    def __getitem__(self, name: str):
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self):
        return iter(self.__dataclass_fields__)

    def __len__(self) -> int:
        return len(self.__dataclass_fields__)


def _arrays_as_tensors(value):
    """``value`` with its NumPy arrays as tensors, through plain lists, tuples and dicts."""
    if isinstance(value, np.ndarray):
        return as_tensor(value)
    if type(value) in (list, tuple):
        return type(value)(_arrays_as_tensors(v) for v in value)
    if type(value) is dict:
        return {k: _arrays_as_tensors(v) for k, v in value.items()}
    return value


# every live compiled function, so nb.clear_caches() can forget all their traces
_LIVE: weakref.WeakSet = weakref.WeakSet()


def clear_all_traces() -> None:
    """Forget the traces of every live compiled function (``nb.clear_caches``)."""
    for fn in list(_LIVE):
        fn.clear_cache()


class CompiledFunction:
    """A function traced once per signature; made by :func:`compile` (see it for details).

    Args:
        fun: the function to compile.
        dynamic_dims: ``{arg_index: {dim: "name"}}``: dims of positional arguments that are
            symbolic, so one plan serves every size once a second size confirms it (None:
            none).
        fullgraph: raise RuntimeError if ``fun`` realizes a value while traced, instead of
            falling back to plain lazy execution.
        max_cache_size: LRU bound on the number of cached traces (default 64).
        static_argnums: positional arguments keyed by value (see :func:`compile`).
        static_argnames: keyword arguments keyed by value, by name.

    Raises:
        TypeError: for a malformed ``dynamic_dims``.
    """

    def __init__(
        self,
        fun,
        dynamic_dims=None,
        fullgraph=False,
        max_cache_size=64,
        static_argnums=None,
        static_argnames=None,
    ):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.dynamic_dims = _check_dynamic_dims(dynamic_dims)
        self.fullgraph = bool(fullgraph)
        self.max_cache_size = int(max_cache_size)
        if self.max_cache_size < 1:  # it failed at the first call, in the LRU's eviction
            raise ValueError(f"compile: max_cache_size must be at least 1, got {max_cache_size}")
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()  # the LRU is shared by every thread calling the function
        self._positions: dict = {}  # treedef -> {flat leaf index: positional arg index}
        self._tensor_trees: dict = {}  # n -> the treedef of ((n tensors), {})
        self._newest = None  # the plan at the LRU's end: a hit on it needs no reordering
        self._hot = None  # a _Hot for the newest plan's last call, or None
        self._last_key = None
        self.explain = os.environ.get("NABLA_EXPLAIN_RETRACE", "0") == "1"
        if self.explain:
            _show_explanations()
        self._stats = CompilationStats()
        self.static_argnums = _names_or_nums(static_argnums, int)
        self.static_argnames = _names_or_nums(static_argnames, str)
        # dynamic_dims and static arguments are checked against the first call's arguments
        self._unchecked = bool(self.dynamic_dims or self.static_argnums or self.static_argnames)
        # the modules the function reaches (found at the first call): their train/eval mode,
        # other attributes and submodules are part of the key, as torch.compile guards on them
        self._guard: ModuleGuard | None = None
        _LIVE.add(self)

    def _options(self) -> tuple:
        return (
            self.dynamic_dims,
            self.fullgraph,
            self.max_cache_size,
            self.static_argnums,
            self.static_argnames,
        )

    def __deepcopy__(self, memo) -> CompiledFunction:
        """The compile of a deep copy of the function (a compiled model in an EMA or
        target-network copy is the copy's), with the same options and no traces yet, as
        ``torch.compile``'s module is copied."""
        new = CompiledFunction(copy.deepcopy(self.fun, memo), *self._options())
        memo[id(self)] = new
        return new

    def __reduce__(self):
        # pickled as the function and the options; the traces are made again
        return (CompiledFunction, (self.fun, *self._options()))

    @property
    def stats(self) -> CompilationStats:
        """This function's :class:`CompilationStats` (a live view)."""
        self._stats.cache_size = len(self._cache)
        return self._stats

    def clear_cache(self) -> None:
        """Forget every trace (the next call of each signature traces again)."""
        with self._lock:
            self._cache.clear()
            self._newest = None
            self._hot = None
        self._last_key = None

    # ------------------------------------------------------------------ key
    def _signature(self, args, kwargs) -> _Call:
        """This call as a ``_Call``: its cache key, flat leaves, treedef, the dynamic dims'
        sizes and the symbolic shapes of the leaves that have them.

        The key is ``(treedef, per-leaf entry, ...)``; a tensor's entry is (shape with
        dynamic dims replaced by their names, dtype, device, sharding)."""
        dyn = self.dynamic_dims
        if not kwargs and all(type(a) is Tensor for a in args):
            # the usual call, tensors only: their structure is known without flattening
            flat = list(args)
            tree = self._tensor_trees.get(len(args))
            if tree is None:
                tree = self._tensor_trees[len(args)] = tree_flatten((args, kwargs))[1]
        else:
            flat, tree = tree_flatten((args, kwargs))
        positions = None
        if dyn:
            positions = self._positions.get(tree)
            if positions is None:
                positions = self._positions[tree] = _arg_leaf_positions(args)
        parts = [tree]
        sizes: dict[str, int] = {}
        sym_shapes = {}
        batched = None
        ids = []
        for i, leaf in enumerate(flat):
            if isinstance(leaf, np.ndarray) or _foreign(leaf):
                # NumPy arrays are traced values, as in ``jax.jit``; so are a JAX or
                # PyTorch array (as eager ops take them), read anew at every call. A NumPy
                # scalar is not: the ops take it as a Python number (weak: ``x +
                # np.float64(1)`` keeps x's dtype), so it keys the trace by value as one does
                leaf = flat[i] = constant(leaf)
            if isinstance(leaf, Tensor):
                impl = leaf._impl
                ids.append(id(leaf))
                shape = leaf.shape
                names = dyn.get(positions.get(i)) if dyn else None
                if names:
                    shape = self._symbolic(shape, names, sizes, positions.get(i))
                    sym_shapes[i] = shape
                parts.append((shape, impl.dtype, impl.device, impl.sharding))
                if impl.levels:
                    batched = (batched or []) + [(i, impl.levels)]
            else:
                try:
                    hash(leaf)
                except TypeError:
                    raise TypeError(
                        f"compile: static argument (leaf {i}) of type {type(leaf).__name__} is "
                        "not hashable; pass tensors, or hashable Python values"
                    ) from None
                parts.append(_static_key(leaf))
        if batched:
            parts.append(_batching_key(batched))
        if len(set(ids)) < len(ids):  # one tensor passed twice: traced as one (_trace)
            parts.append(("aliased", tuple(ids.index(k) for k in ids)))
        if CONFIG.debug_values and any(checking()):  # a trace that records the ops' lines
            parts.append(("debug_nans",))
        # what ``nb.ones(...)`` or a Python float becomes inside (``nb.default_dtype``)
        parts.append(_defaults())
        guard = self._guard
        if guard is not None and guard.watched:  # model.eval(), m.act = ReLU(), B = None
            parts.append(("modules", guard.key()))
        return _Call(tuple(parts), flat, tree, sizes, sym_shapes, args, kwargs)

    @staticmethod
    def _symbolic(shape, names, sizes, pos):
        sym = []
        for d, n in enumerate(shape):
            name = names.get(d, names.get(d - len(shape)))
            if name is None:
                sym.append(n)
                continue
            if sizes.get(name, n) != n:
                raise ValueError(
                    f"compile: dynamic dim {name!r} has size {sizes[name]} and {n} in the same "
                    f"call (argument {pos} of shape {shape})"
                )
            sizes[name] = n
            sym.append(name)
        return tuple(sym)

    def _explain(self, key):
        if self._last_key is None:
            log.info("compile %s: first trace", _name(self.fun))
            return
        old = self._last_key
        name = _name(self.fun)
        if old[0] != key[0]:
            log.info(
                "compile %s: retrace because the argument structure changed: %s -> %s",
                name,
                old[0],
                key[0],
            )
            return
        n = key[0].num_leaves  # the leaves' parts, then the call's tagged parts
        for i, (a, b) in enumerate(zip(old[1 : n + 1], key[1 : n + 1])):
            if a != b:
                log.info("compile %s: retrace because leaf %d changed: %r -> %r", name, i, a, b)
                return
        was, now = _tagged_parts(old[n + 1 :]), _tagged_parts(key[n + 1 :])
        for tag in sorted(set(was) | set(now)):
            if was.get(tag) != now.get(tag):
                log.info("compile %s: retrace because %s", name, _RETRACE_WHY[tag](was, now))
                return

    # ------------------------------------------------------------------ call
    def _check_arguments(self, args, kwargs):
        """Refuse, naming them, a ``dynamic_dims`` entry for an argument or dim the call
        does not have, and static argument numbers or names the function does not take
        (they would be silently ignored)."""
        name = _name(self.fun)
        try:
            params = list(inspect.signature(self.fun).parameters.values())
        except (TypeError, ValueError):  # a builtin without a signature: check the call only
            params = None
        kinds = {p.kind for p in params} if params is not None else set()
        if params is None or inspect.Parameter.VAR_POSITIONAL in kinds:
            n_pos = len(args)
        else:
            n_pos = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        for i in self.static_argnums:
            if not -n_pos <= i < n_pos:
                raise ValueError(
                    f"compile({name}): static_argnums names argument {i}, but {name} takes "
                    f"{n_pos} positional argument(s)"
                )
        if params is not None and inspect.Parameter.VAR_KEYWORD not in kinds:
            names = {p.name for p in params if p.kind is not p.POSITIONAL_ONLY}
            for arg in self.static_argnames:
                if arg not in names:
                    raise ValueError(
                        f"compile({name}): static_argnames names {arg!r}, which is not a "
                        f"parameter of {name} (its parameters: {sorted(names)})"
                    )
        for pos, dims in self.dynamic_dims.items():
            if not 0 <= pos < len(args):
                raise ValueError(
                    f"compile({name}): dynamic_dims names positional argument {pos}, but the "
                    f"call passed {len(args)} positional argument(s)"
                )
            a = args[pos]
            if not isinstance(a, Tensor | np.ndarray):
                raise TypeError(
                    f"compile({name}): dynamic_dims names argument {pos}, which is a "
                    f"{type(a).__name__}, not a tensor or array"
                )
            for d, dim_name in dims.items():
                if not -a.ndim <= d < a.ndim:
                    raise ValueError(
                        f"compile({name}): dynamic_dims gives dim {d} of argument {pos} the "
                        f"name {dim_name!r}, but that argument has shape {tuple(a.shape)}"
                    )
        self._unchecked = False

    def _static(self, args, kwargs):
        """The arguments named static, checked (hashable, not tensors or arrays) and NumPy
        scalars among them made Python numbers, so that they key the trace by value."""
        args, kwargs = list(args), dict(kwargs)

        def fix(v, where):
            if isinstance(v, Tensor | np.ndarray):
                raise TypeError(
                    f"compile: static argument {where} of {_name(self.fun)} is a "
                    f"{type(v).__name__}: static arguments must be hashable Python values"
                )
            return v.item() if isinstance(v, np.generic) else v

        for i in self.static_argnums:
            if -len(args) <= i < len(args):
                args[i] = fix(args[i], i)
        for name in self.static_argnames:
            if name in kwargs:
                kwargs[name] = fix(kwargs[name], repr(name))
        return args, kwargs

    def __get__(self, obj, objtype=None):
        """As a method (``@nb.compile`` on a ``def apply(self, x)`` in a class): bound to the
        instance, which is its first argument (static: keyed by its hash), as a
        ``jax.jit``-decorated method receives it."""
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args, **kwargs):
        if STATE.jit_disabled:  # (nb.disable_jit(): op by op, the caches left alone)
            return self._run_directly(args, kwargs)
        hot = self._hot
        if hot is not None and not kwargs:
            out = self._call_hot(hot, args)
            if out is not _COLD:
                return out
        if self._unchecked:
            self._check_arguments(args, kwargs)
        if self._guard is None:
            self._guard = ModuleGuard(self.fun)
        if self.static_argnums or self.static_argnames:
            args, kwargs = self._static(args, kwargs)
        call = self._signature(args, kwargs)
        out = self._call(call, args, kwargs)
        if PROCESS.count > 1:
            _dispatch_across(out)
        return out

    def _run_directly(self, args, kwargs):
        """The Python function on the arguments, NumPy arrays as tensors (as a traced call
        sees them): ``disable_jit`` and a call that falls back to plain lazy code. Only
        plain lists, tuples and dicts are rebuilt: a module or other object the function
        updates in place must reach it as itself."""
        return self.fun(*_arrays_as_tensors(args), **_arrays_as_tensors(kwargs))

    def _call(self, call, args, kwargs):
        entry = self._lookup(call.key)
        if entry is None:
            self._stats.misses += 1
            if self.explain or log.isEnabledFor(logging.DEBUG):
                self._explain(call.key)
            self._last_key = call.key
            return self._trace_and_store(call)
        if entry == "fallback":
            self._stats.fallbacks += 1
            return self._run_directly(args, kwargs)
        tensors = [leaf for leaf in call.flat if isinstance(leaf, Tensor)]
        plan = entry
        if call.sizes and not _same_shapes(plan, tensors):
            plan, out = self._plan_at_sizes(entry, call, tensors)
            if plan is None:  # this size's own trace ran (or fell back)
                return out
        const_impls, stale = plan.call_inputs(self.fun, call.flat)
        if stale is not None:  # a captured tensor changed shape or dtype: as a guard would
            self._stats.misses += 1
            self._log_retrace(f"retrace because {stale}")
            return self._trace_and_store(call)
        self._stats.hits += 1
        if _takes_fast_path(plan, tensors, const_impls):
            leaves = _run_fast(plan, tensors, const_impls)
            if (
                plan is entry
                and plan is self._newest
                and not kwargs
                and not (self.static_argnums or self.static_argnames)
            ):
                self._hot = self._hot_for(plan, args, tensors)
        else:
            self._stats.replays += 1
            leaves = plan.replay(tensors, const_impls)
        return self._outputs(plan, leaves, tensors)

    def _outputs(self, plan, leaves: list, tensors: list):
        """A call's outputs from the plan's output ``leaves``: the objects the call holds
        where eagerly it returns them (``_eager_aliases``), and the new values of the state
        the function updated in place written back."""
        aliases = _eager_aliases(plan)
        if aliases:
            _alias_outputs(aliases, leaves, tensors, self.fun)
        out = tree_unflatten(plan.out_tree, leaves)
        return _write_back(plan, out, tensors, self.fun) if plan.writes else out

    def _hot_for(self, plan, args: tuple, tensors: list) -> _Hot | None:
        """The hot lane for calls like this one (positional ``args``, whose tensor leaves are
        ``tensors``), or None: a leaf that is a NumPy value (traced, a new constant each
        call) or a tensor of a subclass takes the general path."""
        dynamic = bool(self.dynamic_dims)
        aliased = _aliasing(tensors)  # (one tensor passed twice: served only so again)
        if len(args) == len(tensors) and all(type(a) is Tensor for a in args):
            return _hot_lane(plan, tensors, self._guard, dynamic, aliased=aliased)
        leaves, tree = tree_flatten(args)
        statics, at = [], []
        for i, leaf in enumerate(leaves):
            if type(leaf) is Tensor:
                at.append(i)
            elif isinstance(leaf, Tensor | np.ndarray | np.generic) or _foreign(leaf):
                return None
            else:
                statics.append((i, _static_key(leaf)))
        if len(at) != len(tensors):
            return None
        hot_args = _HotArgs(frozen(tree), tuple(statics), tuple(at))
        return _hot_lane(plan, tensors, self._guard, dynamic, hot_args, aliased)

    def _call_hot(self, hot: _Hot, args: tuple):
        """Serve a call like the hot lane's last one (same argument structure, layouts and
        shardings, all realized and plain; nothing recording; the modules it reads
        unchanged): run the plan's program and wrap its outputs. ``_COLD`` when the call is not
        such a call."""
        shaped = hot.tree
        if shaped is not None:  # pytrees (a step's params, its settings, its batch)
            leaves, tree = tree_flatten(args)
            if tree != shaped.tree:
                return _COLD
            for i, key in shaped.statics:  # Python values, compared as the cache key does
                if _static_key(leaves[i]) != key:
                    return _COLD
            args = [leaves[i] for i in shaped.tensor_at] if shaped.statics else leaves
        specs = hot.specs
        if len(args) != len(specs) or CONFIG.debug_values or STATE.recording is not None:
            return _COLD
        if hot.aliased is not None:  # traced with one tensor in several places: the same
            if _aliasing(args) != hot.aliased:  # places again (one placeholder read them)
                return _COLD
        elif hot.plan.writes and len(set(map(id, args))) < len(args):
            return _COLD  # (an update of one seen through the other: a plan of its own)
        for a, (shape, dtype, device, sharding) in zip(args, specs):
            if type(a) is not Tensor:
                return _COLD
            impl = a._impl
            if (
                impl.buffer is None
                or impl.shape != shape
                or impl.dtype is not dtype
                or (impl.device is not device and impl.device != device)
                or (impl.sharding is not sharding and impl.sharding != sharding)
                or impl.levels
                or impl.tangents
                or (impl.traced and is_live(impl.traced))
            ):
                return _COLD
        if hot.modules is not None and self._guard.key() is not hot.modules:
            return _COLD
        # the defaults are part of the key; each thread has its own, and they need reading
        # only while some thread changed its own (``DEFAULTS_OPEN``)
        if (DEFAULTS_OPEN[0] or not hot.base) and _defaults() != hot.defaults:
            return _COLD
        plan = hot.plan
        consts = plan.consts
        if plan.captures:  # read anew at every call: as the general path does
            consts, stale = plan.call_inputs(self.fun)
            if stale is not None or not _plain_consts(plan, consts):
                return _COLD
            for cap in plan.captures:
                if consts[cap.index].buffer is None:
                    return _COLD
        self._stats.hits += 1
        inputs = [a._impl.buffer for a in args]
        inputs += [c.buffer for c in consts]
        made = None
        if PROCESS.count > 1:  # (the values' common names, for the processes' agreement)
            made = input_names([a._impl for a in args] + list(consts))
        with GRAPH.lock:
            plan.calls += 1
            outs = run_program(hot.program, plan.calls, inputs, made)
        device = hot.device
        wrapped = [
            Tensor._from_buffer(shape, dt, device, out, sharding)
            for (shape, dt, sharding), out in zip(hot.layouts, outs, strict=True)
        ]
        if made is not None:
            name_outputs([t._impl for t in wrapped], outs)
        aliases = _eager_aliases(plan)
        if hot.single and not aliases:
            out = wrapped[0]
        else:
            it = iter(wrapped)
            leaves = [r.value if type(r) is PyOut else next(it) for r in plan.outputs]
            if aliases:
                _alias_outputs(aliases, leaves, args, self.fun)
            out = tree_unflatten(plan.out_tree, leaves)
        return _write_back(plan, out, list(args), self.fun) if plan.writes else out

    def _lookup(self, key):
        """The cached trace under ``key`` (None on a miss), made the LRU's newest."""
        with self._lock:
            entry = self._cache.get(key)
            if entry is not None and entry is not self._newest:
                self._cache.move_to_end(key)
                self._newest = entry if entry != "fallback" else None
                self._hot = None
        return entry

    def _plan_at_sizes(self, plan, call, tensors):
        """The plan for new sizes of the dynamic dims: the symbolic plan evaluated at them
        (checked once per size by re-inferring its shapes), or this size's own trace when
        the function decided on a size in Python or a shape did not follow the symbols.
        Returns ``(plan, None)``, or ``(None, outputs)`` when this call traced the size
        (a miss, logged with its reason) or ran as plain lazy code (a fallback)."""
        size_key = tuple(sorted(call.sizes.items()))
        own = plan.by_size.get(size_key)
        if own == "fallback":
            self._stats.fallbacks += 1
            return None, self._run_directly(call.args, call.kwargs)
        if own is not None:
            return own, None
        reason = plan.size_reads[0] if plan.size_reads else _per_size_reason(plan)
        if reason is None:  # a generic plan does not serve a size of 0 or 1 either
            reason = _small_sizes(call.sizes)
        if reason is None:
            at = plan.specialize(call.sizes, tensors)
            if isinstance(at, _Plan):
                return at, None
            reason = at
        self._stats.misses += 1
        self._log_retrace(f"trace for sizes {dict(call.sizes)} because {reason}")
        value, out = self._trace(call)
        if (
            plan.small_sizes is not None
            and isinstance(value, _Plan)
            and not value.size_reads
            and _per_size_reason(value) is None
        ):
            # the plan was traced where a size was 0 or 1; this trace serves every size
            value.by_size = {**plan.by_size, plan.small_sizes: plan}
            self._store(call.key, value)
            return None, out
        if isinstance(value, _Plan):  # valid at this size only
            value.size_reads = value.size_reads or [reason]
        plan.by_size[size_key] = value
        return None, out

    def _log_retrace(self, message):
        if self.explain or log.isEnabledFor(logging.INFO):
            log.info("compile %s: %s", _name(self.fun), message)

    def _trace_and_store(self, call):
        value, out = self._trace(call)
        self._store(call.key, value)
        return out

    def _trace(self, call):
        """Run the function on placeholders, recording its ops: ``(plan, outputs)``, or
        ``("fallback", outputs)`` when it realized a value while traced.

        Where the plan's own run serves the call (``_run_at_trace``), the recorded nodes
        are dropped. Otherwise they join the pending set (``nb.realize()`` computes them:
        the call's outputs and written-back state) once the plan is made: before, another
        thread's ``nb.realize()`` would compute them, and the plan take them for
        constants (``ops.pipeline`` keeps a trace's nodes out of it meanwhile)."""
        traced = _Traced()
        served = False
        try:
            value, out = self._recorded_trace(call, traced)
            if traced.before is not None and isinstance(value, _Plan):
                leaves = self._run_at_trace(value, call, traced.before)
                if leaves is not None:
                    served = True
                    tensors = [leaf for leaf in call.flat if isinstance(leaf, Tensor)]
                    out = self._outputs(value, leaves, tensors)
            return value, out
        finally:
            if not served:  # the trace's own values are the call's
                for tensor, value in traced.arg_values:
                    _write_argument(tensor, value)
                if traced.nodes and STATE.trace_args is None and STATE.body_args is None:
                    for node in traced.nodes:
                        GRAPH.pending.add_node(node)

    def _run_at_trace(self, plan, call, before: dict) -> list | None:
        """The output leaves of the call just traced as ``plan``, served by the plan's
        program as the hits after it are (``jax.jit``'s first call runs the compiled
        program too): run at the call when the arguments are realized, else one lazy
        ``compiled_call`` node on them. None where the call keeps the trace's own lazy
        outputs.

        The trace's outputs are a graph of their own: reading one of them (``loss.item()``)
        computed only that one, the others (the new parameters) joined the next call's
        program, and only the call after ran the plan's. Under ``NABLA_BACKEND=max`` that
        was three programs compiled before a training loop's steady state, where one or
        two serve (the first call's program also computes the arguments still pending: a
        model's freshly initialized weights, or the gradients of ``opt.step()``, which
        every step's program computes that way).

        The state the trace updated in place (an optimizer's parameters and moments, a
        module's running statistics) holds the trace's values by now: the run reads it as
        it was before the call (``before``: id of the tensor -> its impl then), and writes
        the run's values into it, as a hit does. The run takes the random keys the trace
        drew, so the global generator moves on once per call, as uncompiled.

        Only for a plain call (not traced, differentiated or vmapped) whose hits would run
        the program at the call. Not under ``debug_nans``, whose lazy outputs name the op
        that made a NaN."""
        if (
            CONFIG.debug_values
            or STATE.recording is not None
            or STATE.trace_args is not None
            or STATE.body_args is not None
        ):
            return None
        tensors = [leaf for leaf in call.flat if isinstance(leaf, Tensor)]
        const_impls, stale = plan.call_inputs(self.fun, call.flat)
        if stale is not None:
            return None
        if before:  # (the values as the call found them, not the trace's)
            swap = {id(t._impl): impl for t, impl in before.values()}
            tensors = [
                Tensor._wrap(swap[id(t._impl)]) if id(t._impl) in swap else t for t in tensors
            ]
            const_impls = [swap.get(id(c), c) for c in const_impls]
        if not _takes_fast_path(plan, tensors, const_impls):
            return None
        return _run_fast(plan, tensors, const_impls, fresh_keys=False)

    def _recorded_trace(self, call, traced: _Traced):
        """``_trace``'s work; fills in ``traced``."""
        t0 = time.perf_counter()
        sym_shapes = call.sym_shapes
        placeholders = {}
        arg_grads: dict = {}  # id of an argument's .grad -> the argument's leaf index
        traced_flat = list(call.flat)
        first: dict = {}  # id of an argument tensor -> its placeholder
        k = 0  # (the leaf's position among the tensor leaves: the plan's argument slot)
        for i, leaf in enumerate(call.flat):
            if isinstance(leaf, Tensor):
                k += 1
                if id(leaf) in first:
                    # one tensor passed twice is one placeholder, as eagerly one object:
                    # ``a.add_(1)`` inside is seen through ``b`` (the call's key says so)
                    traced_flat[i] = first[id(leaf)]
                    continue
                ph = identity(leaf)
                _same_spec(ph, leaf)
                shape = sym_shapes.get(i, ())
                if any(isinstance(d, str) for d in shape):
                    ph._impl.shape = ph._impl.shape[: len(ph._impl.levels)] + tuple(
                        SymDim(n, s) if isinstance(s, str) else n for n, s in zip(leaf.shape, shape)
                    )
                placeholders[id(ph._impl)] = k - 1
                first[id(leaf)] = traced_flat[i] = ph
                grad = leaf._impl.grad
                if grad is not None:  # ``p.grad`` of an argument reads the caller's, each call
                    ph._impl.grad = grad
                    arg_grads[id(grad)] = i
        args, kwargs = tree_unflatten(call.tree, traced_flat)
        before = {i: t._impl for i, t in enumerate(traced_flat) if isinstance(t, Tensor)}
        epoch = GRAPH.thread_epoch  # this thread's: other threads may realize meanwhile
        old_rec, old_rng, old_reads = STATE.recording, STATE.recording_rng, STATE.size_reads
        old_writes, old_values = STATE.writes, STATE.value_reads
        old_block, STATE.grad_block = STATE.grad_block, None  # (blocks around the call)
        old_args = STATE.trace_args
        STATE.trace_args = {
            id(ph._impl): leaf._impl
            for ph, leaf in zip(traced_flat, call.flat, strict=True)
            if isinstance(leaf, Tensor)
        }
        STATE.recording, STATE.recording_rng, STATE.writes = [], [], []
        STATE.value_reads = []
        # a trace inside a dynamic-dims trace reports its size reads to it too (below)
        STATE.size_reads = [] if sym_shapes or old_reads is not None else None
        try:
            out = _complete_outputs(self.fun(*args, **kwargs))
            recorded, rng, reads = STATE.recording, STATE.recording_rng, STATE.size_reads
            writes, values_read = STATE.writes, STATE.value_reads
        finally:
            STATE.recording, STATE.recording_rng = old_rec, old_rng
            STATE.size_reads, STATE.writes = old_reads, old_writes
            STATE.value_reads = old_values
            STATE.grad_block, STATE.trace_args = old_block, old_args
        traced.nodes = recorded
        if old_writes is not None:  # an enclosing trace writes them back too
            old_writes.extend(writes)
        state = _written_state(writes, placeholders, recorded)
        before_call = _before_writes(writes, state, call.flat)
        assigned = [
            i
            for i, impl in before.items()
            if traced_flat[i]._impl is not impl and id(impl) not in state.written
        ]
        if assigned:  # ``x[...] = v`` on an argument: eagerly the caller's tensor changes
            self._warn_assigned(assigned[0])
        if old_rec is not None:
            # traced inside another recording (an outer compile, a loop body, a custom
            # rule): these ops are also the outer function's, which records the calls
            # below this one's; without them its plan took this trace's outputs for
            # constants (stale values, zero gradients). Its size decisions are the outer's too
            _report_to_outer(
                (old_rec, old_rng, old_reads, old_values), (recorded, rng, reads, values_read)
            )
        read_state = _read_captured(values_read)
        if GRAPH.thread_epoch != epoch or read_state is not None:
            if self.fullgraph:
                what = (
                    "realized a value"
                    if read_state is None
                    else f"read the value of a captured {read_state}"
                )
                raise RuntimeError(
                    f"compile(fullgraph=True): {_name(self.fun)} {what} while being traced "
                    "(e.g. .numpy(), .item(), float(), print or a Python branch on a tensor); "
                    "remove it (pass the tensor as an argument, or compute with it as a "
                    "tensor) or use fullgraph=False to fall back to lazy execution"
                )
            if read_state is not None:
                # ``float(w)`` of a captured realized tensor: a replay would keep the number
                # the trace read, where the eager call reads the tensor's value now
                log.debug(
                    "compile: %s reads the value of a captured %s: runs eagerly",
                    _name(self.fun),
                    read_state,
                )
            self._stats.fallbacks += 1
            return "fallback", _fell_back(out, call, traced_flat, before, state)
        if _hooked(recorded, traced_flat):
            # a gradient hook on a value the function computed, or registered on its
            # argument: a replay makes that value again without the hook, or does not
            # register it again (the backward pass outside would not call it)
            log.debug("compile: %s registers gradient hooks: runs eagerly", _name(self.fun))
            _hooks_to_arguments(call.flat, traced_flat)
            self._stats.fallbacks += 1
            return "fallback", _fell_back(out, call, traced_flat, before, state)
        if _reads_an_updated_leaf(writes, recorded):
            # ``w.mul_(s)`` on a requires_grad leaf, then ``w`` read: eagerly the later ops
            # read the leaf itself (``backward`` reaches it), a replay would read the update
            # (no gradient): run as written
            log.debug(
                "compile: %s updates a requires_grad leaf it then reads: runs eagerly",
                _name(self.fun),
            )
            self._stats.fallbacks += 1
            return "fallback", _fell_back(out, call, traced_flat, before, state)
        leaked = _leaked_value(self.fun, recorded, writes)
        if leaked is not None:
            # ``G = G + x`` (a global, a closure's list item, a new attribute): a replay
            # would not bind the name again, so later calls would read the trace's value
            log.debug(
                "compile: %s binds %s to a value it computed: runs eagerly",
                _name(self.fun),
                leaked.describe(_name(self.fun)),
            )
            self._stats.fallbacks += 1
            return "fallback", _fell_back(out, call, traced_flat, before, state)
        if state.targets:  # the new values are outputs too; the callers' tensors get them
            plan = _build_plan(
                recorded,
                placeholders,
                (out, state.values),
                rng,
                traced_flat,
                self.fun,
                state,
                arg_grads,
            )
            tensors = [leaf for leaf in call.flat if isinstance(leaf, Tensor)]
            traced.arg_values = [
                (tensors[target.index], value)
                for target, value in zip(plan.writes, state.values)
                if target.is_arg
            ]
            traced.before = before_call
        else:
            plan = _build_plan(
                recorded, placeholders, out, rng, traced_flat, self.fun, None, arg_grads
            )
            traced.before = before_call
        plan.traced_in_vmap = bool(drawing_levels())
        small = _small_sizes(call.sizes)
        if small:  # (its other size reads may be those of the small size alone)
            plan.small_sizes = tuple(sorted(call.sizes.items()))
            reads = [small, *(reads or [])]
        if reads:
            plan.size_reads = reads
            self._log_retrace(f"the trace serves only its own sizes: {reads[0]}")
        self._stats.compile_time_ms += 1000.0 * (time.perf_counter() - t0)
        return plan, _as_passed(out, call.flat, traced_flat, before)

    def _warn_assigned(self, leaf):
        warnings.warn(
            f"compile: {getattr(self.fun, '__name__', 'the function')} changes its tensor "
            f"argument (leaf {leaf}) in place (x[...] = v, x += v or an in-place method such "
            "as x.mul_(2)); under compile the caller's tensor is not updated (without compile "
            "it is): return the new value instead (x.at[...].set(v) gives it without "
            "assigning)",
            stacklevel=5,
        )

    def _store(self, key, value):
        key = (frozen(key[0]),) + key[1:]  # (custom node data the user may mutate: a copy)
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)  # a trace stored again under its key is the newest
            self._newest = value if value != "fallback" else None
            self._hot = None
            while len(self._cache) > self.max_cache_size:
                self._cache.popitem(last=False)
                self._stats.evictions += 1
                if self._stats.evictions == self.max_cache_size:
                    self._warn_thrashing()

    def _warn_thrashing(self):
        """Once, when the LRU has dropped as many traces as it holds: the calls' shapes (or
        static values) outnumber the cache, so a cycle through them retraces every call
        (torch.compile warns at its recompile limit as well)."""
        s = self._stats
        warnings.warn(
            f"compile: {getattr(self.fun, '__name__', 'the function')} has dropped "
            f"{s.evictions} traces at max_cache_size={self.max_cache_size} ({s.misses} "
            f"traces, {s.hits} hits): its calls take more distinct shapes or static values "
            "than the cache holds, and calls cycling through them trace every time; mark a "
            "varying size with dynamic_dims, pad the inputs to a few sizes, or raise "
            "max_cache_size",
            stacklevel=6,
        )


def _dispatch_across(out) -> None:
    """Across processes, a step with sharded results runs at the call (``jax.jit``'s
    dispatch): every process calls it at the same point of the program, so every process
    runs the same program then, and a later read on one process alone (a replicated loss)
    finds the value computed and needs no other process. Not inside a trace, a vmap or a
    differentiation, where the outputs are not plain values."""
    if STATE.recording is not None:
        return
    impls = []
    for leaf in tree_flatten(out)[0]:
        if isinstance(leaf, Tensor):
            impl = leaf._impl
            if impl.levels or impl.tangents or is_live(impl.traced):
                return
            impls.append(impl)
    if any(impl.sharding is not None for impl in impls):
        GRAPH.evaluate(impls)


def _complete_outputs(out):
    """The function's outputs with their partial terms completed, as ``jax.jit`` returns
    them: a mean loss or a metric of a data-parallel step comes back replicated, so any one
    process can read it without the others (the reduction joins the step's own round of
    collectives instead of a later read's)."""
    flat, tree = tree_flatten(out)
    if not any(_is_partial(leaf) for leaf in flat):
        return out
    return tree_unflatten(tree, [complete_partial(v) if _is_partial(v) else v for v in flat])


def _is_partial(leaf) -> bool:
    return isinstance(leaf, Tensor) and bool(
        leaf._impl.sharding is not None and leaf._impl.sharding.partial
    )


def _small_sizes(sizes: dict) -> str | None:
    """Why a trace at these dynamic sizes serves only its own: a size of 0 or 1, where
    broadcasting (a size-1 dim against another) and empty axes take other paths than at
    every other size. None when every size is 2 or more."""
    for name, n in sorted(sizes.items()):
        if n <= 1:
            return (
                f"dynamic dim {name!r} has size {n} at this trace (sizes 0 and 1 are traced "
                "per size: broadcasting and empty axes differ there)"
            )
    return None


def _per_size_reason(plan) -> str | None:
    """Why a plan cannot be evaluated at other sizes by substitution: a control-flow body
    or a nested compiled call keeps its own recorded program, whose sizes stay those of
    the trace. None when it has none."""
    for node in plan.nodes:
        if nested_programs(node.phys_kwargs):
            return f"its {node.op.name} node holds a program of its own (traced per size)"
    return None


def _read_captured(impls) -> str | None:
    """How to name the captured tensor (a value the caller holds, which may change before
    the next call) whose value one of ``impls``, the values a trace read, is; or None when
    the trace read only values of its own (literals it made)."""
    for impl in impls or ():
        t = _captured_tensor(impl)
        if t is not None:
            return f"tensor ({t.dtype.value} of shape {t.shape})"
    return None


def _report_to_outer(outer, inner) -> None:
    """Add what a trace recorded (nodes, random keys, size reads) to the enclosing
    recording's lists (None where the enclosing one keeps none)."""
    for mine, theirs in zip(outer, inner, strict=True):
        if mine is not None and theirs:
            mine.extend(theirs)


def _foreign(leaf) -> bool:
    """Another framework's array (a JAX or PyTorch one: it has ``__array__``), which a
    compiled function takes as a traced value, as eager ops take it (keyed as a static it
    would be hashed by identity, and an in-place update of it missed)."""
    return not isinstance(leaf, Tensor | np.generic) and hasattr(type(leaf), "__array__")


def _static_key(leaf) -> tuple:
    """A Python leaf's part of the cache key: by value, a float by its bits (-0.0 is not
    0.0 for atan2 or 1/x, and NaN equals itself)."""
    return ("static", type(leaf), leaf.hex() if type(leaf) is float else leaf)


def _takes_fast_path(plan, tensors, const_impls) -> bool:
    """Can this hit run the plan's program (else it replays the recorded ops)? Only with
    arguments and captured tensors free of autodiff history, tangents and vmap levels, and
    random draws that can be bound before the program (and not per element of a vmap the
    trace did not see)."""
    if not _plain(tensors) or (plan.has_host_ops and plan.host_nodes is None):
        return False
    if plan.captures and not _plain_consts(plan, const_impls):
        return False  # a captured requires_grad (or traced) value: replay, so it flows
    return not (plan.rng_slots and not plan.traced_in_vmap and drawing_levels())


def _hooks_to_arguments(flat, traced_flat) -> None:
    """Hooks the function registered on an argument (its placeholder while traced) go to
    the caller's tensor, as eagerly ``x.register_hook`` registers them on ``x``: each call
    adds its own, and they see the argument's whole gradient."""
    for leaf, ph in zip(flat, traced_flat, strict=True):
        if isinstance(ph, Tensor) and ph is not leaf and ph._impl.hooks:
            hooks, ph._impl.hooks = ph._impl.hooks, None
            leaf._impl.hooks = (leaf._impl.hooks or []) + hooks


def _fell_back(out, call, traced_flat, before: dict, state) -> object:
    """The outputs of a trace that ran as plain lazy code (a fallback), with what it updated
    in place on its arguments (a module's running statistics) written into the caller's
    tensors, as the eager call updates them (updates of captured state went to the
    captured tensors themselves)."""
    tensors = [leaf for leaf in call.flat if isinstance(leaf, Tensor)]
    for target, value in zip(state.targets, state.values, strict=True):
        if target.is_arg:
            _write_argument(tensors[target.index], value)
    return _as_passed(out, call.flat, traced_flat, before)


def _as_passed(out, flat, traced_flat, before: dict):
    """A trace's outputs with each argument it returned as it is (its placeholder, not
    updated in place) replaced by the caller's tensor, as eager code returns it (and a
    hit, ``_eager_aliases``)."""
    back = {
        id(ph): flat[i]
        for i, ph in enumerate(traced_flat)
        if isinstance(ph, Tensor) and ph._impl is before.get(i)
    }
    leaves, tree = tree_flatten(out)
    if not any(id(leaf) in back for leaf in leaves):
        return out
    return tree_unflatten(tree, [back.get(id(leaf), leaf) for leaf in leaves])


def _eager_aliases(plan) -> tuple:
    """``(output, kind, what)`` for each tensor output that eagerly is an object the call
    already holds: an argument returned as it is (``"arg"``, its position), a captured
    tensor (``"capture"``, its ``_Capture``) or an earlier output (``"dup"``, its
    position). The trace's own call returns those objects; a hit hands them back too,
    so ``r[0] is r[1]`` and a later in-place update of a returned tensor read through the
    result hold at every call (made once per plan)."""
    got = plan.aliases
    if got is None:
        caps = {cap.index: cap for cap in plan.captures if type(cap.path) not in _VIA_ARGS}
        # the new values of written state come last (``_write_back``); an output that is
        # one of them is, eagerly, the written tensor itself (``w.mul_(x); return w``)
        n_user = len(plan.outputs) - len(plan.writes or ())
        written = {}
        for k, r in enumerate(plan.outputs[n_user:]):
            if type(r) is not PyOut:
                written.setdefault(r, plan.writes[k])
        seen, out, to_written = {}, [], set()
        for j, r in enumerate(plan.outputs):
            if type(r) is PyOut:
                continue
            if r in seen:
                if j < n_user or seen[r] not in to_written:  # (written: the program's)
                    out.append((j, "dup", seen[r]))
                continue
            seen[r] = j
            if j < n_user and r in written:
                out.append((j, "written", written[r]))
                to_written.add(j)
            elif r.kind == "arg":
                out.append((j, "arg", r.index))
            elif r.kind == "const" and r.index in caps:
                out.append((j, "capture", caps[r.index]))
        got = plan.aliases = tuple(out)
    return got


def _alias_outputs(aliases, leaves: list, tensors, fun) -> None:
    """Put the objects ``_eager_aliases`` names into a hit's output ``leaves``."""
    for j, kind, what in aliases:
        if kind == "arg":
            leaves[j] = tensors[what]
        elif kind == "dup":
            leaves[j] = leaves[what]
        elif kind == "written":  # (``_write_back`` gives it its new value)
            leaves[j] = _target_tensor(what, tensors, fun)
        else:  # the captured tensor as the call read it (a rebound name's new one)
            leaves[j] = _followed(what.tensor, what.path, fun)


def _run_fast(plan, tensors, const_impls, fresh_keys: bool = True) -> list:
    """The output leaves of a fast-path hit: the plan's program run at the call, or one
    lazy ``compiled_call`` node (with the random draws bound first). ``fresh_keys=False``
    runs on the random keys the trace drew (``_Plan.run_now``)."""
    outs = []
    if _nonempty(plan):
        if _runs_now(plan, tensors, const_impls):
            outs = plan.run_now(tensors, const_impls, fresh_keys)
        else:
            consts = plan.call_consts(const_impls, fresh_keys)
            drawn = plan.bind_host_nodes(tensors, consts) if plan.has_host_ops else []
            outs = _compiled_call.bind(tensors + consts + drawn, {"plan": plan})
    it = iter(outs)
    return [ref.value if type(ref) is PyOut else next(it) for ref in plan.outputs]


_LEAF_TREE = tree_flatten(0)[1]


def _aliasing(tensors) -> tuple | None:
    """Per tensor leaf the position of its first occurrence, when one tensor is passed
    in several places (as the call's key records it); None when every leaf is its own."""
    first: dict = {}
    places = tuple(first.setdefault(id(t), i) for i, t in enumerate(tensors))
    return places if len(first) < len(places) else None


def _hot_lane(plan, tensors, guard, dynamic: bool, tree=None, aliased=None) -> _Hot | None:
    """A ``_Hot`` for a call that just ran ``plan`` at the call with ``tensors`` as the
    tensor leaves of its positional arguments (read as ``tree`` says; None: the arguments
    are the tensors), or None when such calls need the general path: dynamic dims, random
    draws, or a call that did not run at the call."""
    if dynamic or plan.rng_draws or plan.has_host_ops or not _nonempty(plan):
        return None
    if any(type(cap.path) in _VIA_ARGS for cap in plan.captures):
        return None  # (the general path reads the call's arguments' grads)
    shapes, dtypes, shardings = plan.call_layouts()
    if STATE.recording is not None or CONFIG.debug_values:
        return None
    specs = []
    for t in tensors:
        impl = t._impl
        if impl.buffer is None:
            return None
        specs.append((impl.shape, impl.dtype, impl.device, impl.sharding))
    program = plan.program()
    consts = plan.consts
    impls = [t._impl for t in tensors] + list(consts)
    device = _compiled_call.device_of(impls, {})
    single = (
        plan.out_tree == _LEAF_TREE
        and len(plan.outputs) == 1
        and type(plan.outputs[0]) is not PyOut
    )
    modules = guard.key() if guard is not None and guard.watched else None
    layouts = tuple(zip(shapes, dtypes, shardings or [None] * len(shapes), strict=True))
    base = not DEFAULTS_OPEN[0]
    return _Hot(
        plan,
        tree,
        tuple(specs),
        modules,
        program,
        layouts,
        device,
        single,
        _defaults(),
        base,
        aliased,
    )


def _defaults() -> tuple:
    """The default dtype and device a trace made its literals with: part of the key."""
    return (get_default_dtype(), get_default_device())


def _runs_now(plan, tensors, const_impls) -> bool:
    """Does this fast-path call run at the call (``_Plan.run_now``)? Only when nothing
    would join its node in a larger program anyway: every argument (and captured tensor)
    realized, no random draws to bind first, and no trace recording it. Sharded arguments
    and results are fine: their buffers hold the blocks the plan's program was traced on,
    and across processes ``run_program`` agrees on that program as it would on the
    one-node graph around it."""
    if plan.has_host_ops or STATE.recording is not None:
        return False
    for t in tensors:
        if t._impl.buffer is None:
            return False
    if plan.captures:
        for cap in plan.captures:
            if const_impls[cap.index].buffer is None:
                return False
    return True


def _plain_consts(plan, const_impls) -> bool:
    """Are the captured tensors of this call free of autodiff history, tangents and vmap
    levels (else the call replays, so their derivatives and batching flow)? Under
    ``nb.no_grad()`` a parameter's ``requires_grad`` records nothing, so an evaluation
    loop over ``nb.compile(model)`` takes the fast path (unless the function has an
    ``enable_grad`` block)."""
    cut = STATE.no_grad is not None and not plan.enables_grad
    for cap in plan.captures:
        impl = const_impls[cap.index]
        if impl.levels or impl.tangents or is_live(grad_cut(impl.traced) if cut else impl.traced):
            return False
    return True


def _nonempty(plan):
    return any(type(ref) is not PyOut for ref in plan.outputs)


def _plain(tensors) -> bool:
    for t in tensors:
        impl = t._impl
        if impl.levels or impl.tangents or is_live(impl.traced):
            return False
    return True


def _same_shapes(plan, tensors) -> bool:
    for shape, t in zip(plan.traced_shapes, tensors):
        if shape != t.shape:
            return False
    return True


def _arg_leaf_positions(args) -> dict:
    """flat leaf index (of (args, kwargs)) -> positional argument index, for tensor args."""
    out = {}
    i = 0
    for pos, a in enumerate(args):
        n = len(tree_flatten(a)[0])
        if n == 1 and isinstance(a, Tensor | np.ndarray):
            out[i] = pos
        i += n
    return out


def _needed_nodes(out_flat, node_index, placeholders, folded=frozenset()) -> set:
    """The ids of the recorded nodes the outputs need (dead code is dropped); a folded
    node's outputs are constants, so what only it reads is dropped too."""
    needed = set()
    stack = [o._impl for o in out_flat if isinstance(o, Tensor)]
    while stack:
        impl = stack.pop()
        if id(impl) in placeholders or impl.node is None or id(impl.node) not in node_index:
            continue
        nid = id(impl.node)
        if nid in needed or nid in folded:
            continue
        needed.add(nid)
        stack.extend(impl.node.inputs)
    return needed


# outputs up to this many elements are folded: a constant subgraph of small values (a
# seed of ones, an exponent minus one) runs once, while a large constant (a broadcast fill,
# a captured weight's transpose) stays an op rather than a second copy held by the plan
_FOLD_LIMIT = 1 << 14
# ops that run programs of their own or code outside the lowering table are never folded
_NOT_FOLDED = frozenset({"compiled_call", "cond", "while_loop", "scan", "custom_kernel"})


def _fold_constants(recorded, needed, placeholders, rng_ids, written=()) -> set:
    """Run now, once, the needed nodes that read only the trace's own host constants
    (literals made while tracing, never captured state, which is read at every call) or
    other such nodes, and give small unbatched host values; their outputs become the
    plan's constants, so a call does not recompute them. Returns the folded node ids.

    They run on the interpreter's lowerings whatever the backend: the values are small,
    and a MAX compile for each would cost seconds."""
    folded = set()
    for node in recorded:  # recording order is topological
        if id(node) not in needed or not _foldable_op(node):
            continue
        if not all(
            _is_constant(i, placeholders, rng_ids, needed, folded, written) for i in node.inputs
        ):
            continue
        outs = [ref() for ref in node.outputs]
        if not _small_host_values(node, outs):
            continue
        with np.errstate(all="ignore"):  # IEEE results, as the interpreter's programs
            values = NUMPY_LOWERINGS[node.op.backend_name](
                [i.buffer for i in node.inputs], node.phys_kwargs
            )
            values = [np.asarray(v, dtype=dt.numpy) for v, (dt, _) in zip(values, node.out_specs)]
        for impl, value in zip(outs, values, strict=True):
            if impl is not None and impl.buffer is None:
                impl.buffer = value
        folded.add(id(node))
    return folded


def _foldable_op(node) -> bool:
    """Could this node's op run once at trace time: an ordinary interpreted op (no host
    draw, collective or program of its own) whose kwargs hold no dynamic size?"""
    op = node.op
    return not (
        op.host_only
        or op.collective
        or op.backend_name in _NOT_FOLDED
        or op.backend_name not in NUMPY_LOWERINGS
        or has_symdim(node.kwargs)  # a dynamic size: its value changes per call
    )


def _small_host_values(node, outs) -> bool:
    """Are the node's outputs small, static-shaped, unbatched and unsharded on the CPU?"""
    for _, shape in node.out_specs:
        if int(np.prod(shape)) > _FOLD_LIMIT or any(isinstance(d, SymDim) for d in shape):
            return False
    return not any(
        o is not None and (o.levels or o.sharding is not None or not o.device.is_cpu) for o in outs
    )


def _is_constant(impl, placeholders, rng_ids, needed, folded, written=()) -> bool:
    """A host value the plan holds fixed: not an argument, a fresh random key or written
    state, and captured already realized or made by a folded node (not by a node the
    program runs)."""
    if id(impl) in placeholders or id(impl) in rng_ids or impl.levels or id(impl) in written:
        return False
    if is_live(impl.traced):  # a requires_grad value: its derivative must reach it
        return False
    if _captured_tensor(impl) is not None:  # captured state: read at every call
        return False
    if impl.sharding is not None or type(impl.buffer) is not np.ndarray:
        return False
    node = impl.node
    return node is None or id(node) in folded or id(node) not in needed


class _Capture(NamedTuple):
    """A captured tensor: the plan's const ``index`` is read from ``tensor`` at every call,
    or from what ``path`` (from the compiled function) leads to now when that is another
    tensor; ``spec`` is its ``_Layout`` as traced: another one retraces. ``others``: the
    other names the tensor had (a tied weight); when one of them no longer leads to the
    same tensor, the function is traced again."""

    index: int
    tensor: Tensor
    path: Path | None
    spec: _Layout
    others: tuple = ()


class _Layout(NamedTuple):
    """What a captured tensor must keep for its plan to stand (``_layout``)."""

    shape: tuple
    dtype: object
    device: object
    sharding: object


def _captured_tensor(impl):
    """The live ``Tensor`` whose value ``impl`` is, or None: an impl a user-held tensor
    holds is captured state, while one nothing holds any more was made during the trace (a
    literal) and stays a constant of the plan."""
    ref = impl.wrapper
    t = ref() if ref is not None else None
    return t if t is not None and t._impl is impl else None


def _evaluate_constant(impl) -> None:
    """Compute a constant's promise while a plan is built. Inside an enclosing trace (this
    compiled function called by another while that one traces), a promise made before
    that trace began (``w = nb.ones(2)`` captured, never computed) depends on none of its
    placeholders: computing it is not the enclosing function realizing a value, which
    would make it run uncompiled at every call. A promise the enclosing trace made (from
    its arguments) is, and counts as one."""
    outer = STATE.recording
    if outer is None or any(node is impl.node for node in outer):
        GRAPH.evaluate([impl])
    else:
        GRAPH.evaluate_unobserved([impl])


def _name(fun) -> str:
    return getattr(fun, "__name__", None) or type(fun).__name__


def _build_plan(
    recorded, placeholders, out, rng_impls, traced_flat, fun=None, state=None, arg_grads=None
):
    out_flat, out_tree = tree_flatten(out)
    node_index = {id(n): i for i, n in enumerate(recorded)}
    needed = _needed_nodes(out_flat, node_index, placeholders)
    rng_ids = {id(r) for r in rng_impls}
    written = state.written if state is not None else {}
    folded = _fold_constants(recorded, needed, placeholders, rng_ids, written)
    if folded:
        needed = _needed_nodes(out_flat, node_index, placeholders, folded)
    consts, const_idx = [], {}
    rng_slots = []
    captured = {}  # const index -> the Tensor holding it

    def ref_of(impl):
        if id(impl) in placeholders:
            return Ref("arg", placeholders[id(impl)])
        node = impl.node
        if node is not None and id(node) in node_index and id(node) in needed:
            return Ref("node", kept_index[id(node)], impl.index)
        j = const_idx.get(id(impl))
        if j is None:
            if impl.buffer is None:
                _evaluate_constant(impl)
            j = const_idx[id(impl)] = len(consts)
            consts.append(impl)
            if id(impl) in rng_ids:
                rng_slots.append(j)
            elif not impl.levels and not impl.tangents:
                t = _captured_tensor(impl)
                if t is None:
                    t = written.get(id(impl))
                if t is not None:
                    captured[j] = t
        return Ref("const", j)

    kept_index = {}
    nodes = keep_nodes(recorded, needed, ref_of, kept_index)
    outputs = [ref_of(o._impl) if isinstance(o, Tensor) else PyOut(o) for o in out_flat]
    tensors = [t for t in traced_flat if isinstance(t, Tensor)]
    args = _PlanArgs(
        tuple((t.dtype, t._impl.shape, t.device) for t in tensors),
        tuple(t._impl.levels for t in tensors),
        tuple(t._impl.buffer_shape for t in tensors),
    )
    plan = _Plan(Recording(nodes, outputs, consts), out_tree, rng_slots, args)
    order = {id(r): k for k, r in enumerate(rng_impls)}
    plan.rng_draws = len(rng_impls)
    plan.rng_order = tuple(order[id(consts[j])] for j in rng_slots)
    plan.captures = _captures(fun, captured, consts, arg_grads or {}, traced_flat)
    if state is not None:
        plan.writes = _write_targets(fun, state.targets)
    plan.out_layouts = tuple(
        (o._impl.shape, o._impl.sharding) for o in out_flat if isinstance(o, Tensor)
    )
    return plan


class _Traced:
    """What a trace leaves to its caller besides the plan and the outputs
    (``_recorded_trace`` fills it in): the recorded nodes; once a plan is made, per tensor
    the caller holds that the trace updated in place, that tensor and its impl before the
    call (``_before_writes``); and the arguments' new values, which go into the caller's
    tensors unless the plan's own run serves the call (``_run_at_trace``)."""

    def __init__(self):
        self.nodes: list | None = None
        self.before: dict | None = None
        self.arg_values: list = []


def _before_writes(writes, state, flat) -> dict:
    """id of each tensor the caller holds that the trace updated in place -> ``(tensor,
    its impl before the call)``: an argument's as passed (the trace updated only its
    placeholder), captured state's before its first write."""
    out = {}
    tensors = [leaf for leaf in flat if isinstance(leaf, Tensor)]
    firsts = {}
    for entry in writes:
        firsts.setdefault(id(entry.tensor), entry.before)
    for target in state.targets:
        if target.is_arg:
            t = tensors[target.index]
            out[id(t)] = (t, t._impl)
        else:
            t = target.tensor
            out[id(t)] = (t, firsts[id(t)])
    return out


class _WriteTarget(NamedTuple):
    """A tensor the caller holds that a trace updated in place: the call's tensor argument
    ``index``, or captured ``tensor``, found again at each call by ``path`` from the
    function (``_write_targets``; None where the walk found none)."""

    index: int | None  # the argument's position among the call's tensors; None: captured
    tensor: Tensor | None = None
    path: tuple | None = None

    @property
    def is_arg(self) -> bool:
        return self.index is not None


class _Written(NamedTuple):
    """What a trace updated in place (``_written_state``)."""

    targets: list  # a ``_WriteTarget`` per written tensor (no paths yet)
    values: tuple  # their new values (the tensors themselves, as they are after the trace)
    written: dict  # id(impl before the update) -> tensor


def _written_state(writes, placeholders, recorded) -> _Written:
    """The tensors the trace updated in place (``writes``: ``ops.indexing.Write`` records in
    update order) that the caller holds: an argument (its placeholder was updated) or captured
    state (a value that existed before the trace). A tensor made during the trace (a copy
    inside ``grad``, a module built by the function) is the function's own: not written
    back."""
    first = {}
    for entry in writes:
        first.setdefault(id(entry.tensor), entry)
    node_ids = {id(n) for n in recorded}
    targets, values, written = [], [], {}
    for entry in first.values():
        t, impl = entry.tensor, entry.before
        if t._impl is impl or impl.tangents:
            continue
        if impl.levels and id(impl) not in placeholders:
            continue
        if id(impl) in placeholders:  # (x[i] = v, x += v, x.add_(v) on an argument too)
            targets.append(_WriteTarget(placeholders[id(impl)]))
        elif impl.node is not None and id(impl.node) in node_ids:
            continue
        else:
            targets.append(_WriteTarget(None, t))
        written[id(impl)] = t
        values.append(t)
    return _Written(targets, tuple(values), written)


def _write_targets(fun, targets) -> tuple:
    """``plan.writes``: each captured target with the path from ``fun`` to it (None where
    the walk finds none), so a rebound name is written too."""
    held = {id(tg.tensor): tg.tensor for tg in targets if not tg.is_arg}
    paths = find_paths(fun, held) if fun is not None and held else {}
    return tuple(
        tg if tg.is_arg else tg._replace(path=paths.get(id(tg.tensor), (None,))[0])
        for tg in targets
    )


def _write_back(plan, out, tensors, fun):
    """A hit's outputs without the written state, which goes into the caller's tensors:
    the arguments of this call, or the captured tensors (found again by their paths)."""
    out, values = out
    for target, value in zip(plan.writes, values, strict=True):
        t = _target_tensor(target, tensors, fun)
        if target.is_arg:
            _write_argument(t, value)
        else:
            rebind(t, value)
    return out


def _target_tensor(target, tensors, fun) -> Tensor:
    """The caller's tensor a plan's write ``target`` names at this call: the argument, or
    the captured tensor (its path from ``fun`` followed again: a rebound name's new one)."""
    if target.is_arg:
        return tensors[target.index]
    return _followed(target.tensor, target.path, fun)


def _followed(t: Tensor, path, fun) -> Tensor:
    """Captured tensor ``t`` as the call finds it: ``path`` from ``fun`` followed again (a
    rebound name's new tensor), or ``t`` where there is no path or it leads elsewhere."""
    if path is None:
        return t
    try:
        now = path.follow(fun)
    except LookupError:
        return t
    return now if isinstance(now, Tensor) else t


def _write_argument(t: Tensor, value) -> None:
    """An argument the function updated in place takes the new value, and a view passed
    as the argument (``f(x[1:])``, ``f(x.T)``) writes it through to its base, as the eager
    call's in-place update does (the trace updated a placeholder, not a view)."""
    rebind(t, value)
    write_through(t)


class _ArgGrad(NamedTuple):
    """The path to a captured tensor that is an argument's ``.grad`` (leaf ``leaf`` of the
    call's flat arguments): read from the call's argument at each call."""

    leaf: int

    def follow_from(self, flat):
        """The tensor this path leads to in the call's flat arguments ``flat``."""
        return flat[self.leaf]._impl.grad

    def describe(self, fun_name: str) -> str:
        return f"the .grad of argument leaf {self.leaf} of {fun_name}"


class _ArgPath(NamedTuple):
    """The path to a captured tensor through a static argument (``self`` of a compiled
    plain method, an object passed in): ``path`` followed from leaf ``leaf`` of the call's
    flat arguments at each call, so an attribute rebound on it is seen."""

    leaf: int
    path: Path

    def follow_from(self, flat):
        """The object this path leads to in the call's flat arguments ``flat`` (raises
        LookupError if a step no longer exists)."""
        return self.path.follow(flat[self.leaf])

    def describe(self, fun_name: str) -> str:
        return self.path.describe(f"<argument leaf {self.leaf} of {fun_name}>")


_VIA_ARGS = (_ArgGrad, _ArgPath)  # a capture reached through the call's arguments


def _captures(fun, captured: dict, consts: list, arg_grads: dict, flat=()) -> tuple:
    """A ``_Capture`` per captured tensor (const index -> tensor), with the path from
    ``fun`` to it where the walk finds one, else from a static argument of the call
    (``flat``), or the argument whose ``.grad`` it is."""
    if not captured:
        return ()
    rest = {id(t): t for t in captured.values() if id(t) not in arg_grads}
    paths = find_paths(fun, rest) if fun is not None else {}
    via_args: dict = {}
    missing = {k: t for k, t in rest.items() if k not in paths}
    for i, leaf in enumerate(flat):
        if not missing:
            break
        if isinstance(leaf, Tensor) or leaf is None or isinstance(leaf, int | float | str):
            continue
        for k, found in find_paths(leaf, missing).items():
            via_args[k] = (_ArgPath(i, found[0]),)
            del missing[k]
    out = []
    for j, t in captured.items():
        if id(t) in arg_grads:
            out.append(_Capture(j, t, _ArgGrad(arg_grads[id(t)]), _layout(consts[j])))
            continue
        found = paths.get(id(t)) or via_args.get(id(t), (None,))
        out.append(_Capture(j, t, found[0], _layout(consts[j]), found[1:]))
    return tuple(out)


def _layout(impl) -> _Layout:
    """A tensor's shape, dtype, device and sharding: a captured tensor whose layout is no
    longer the traced one retraces."""
    return _Layout(impl.shape, impl.dtype, impl.device, impl.sharding)


def _check_dynamic_dims(dd):
    """``dd`` checked to be ``{arg_index: {dim: "name"}}``; a bad entry is shown as given."""
    if dd is None:
        return {}
    form = "{arg_index: {dim: 'name'}}, e.g. {0: {0: 'batch'}}"
    if not isinstance(dd, dict):
        raise TypeError(f"compile: dynamic_dims must be {form}, got {dd!r}")
    for k, v in dd.items():
        if not isinstance(k, int) or not isinstance(v, dict):
            raise TypeError(
                f"compile: dynamic_dims must be {form}; the entry {k!r}: {v!r} is not "
                "an int argument index mapped to a dict"
            )
        for d, name in v.items():
            if not isinstance(d, int) or not isinstance(name, str):
                raise TypeError(
                    f"compile: dynamic_dims entries map an int dim to a str name; argument "
                    f"{k}'s entry {d!r}: {name!r} does not (in dynamic_dims={dd!r})"
                )
    return dd


def compile(  # noqa: A001
    fun=None,
    *,
    dynamic_dims=None,
    fullgraph=False,
    max_cache_size=64,
    static_argnums=None,
    static_argnames=None,
    donate_argnums=None,
    donate_argnames=None,
):
    """Trace ``fun`` once per argument signature and reuse the recorded graph.

    Args:
        fun: the function (or use ``@nb.compile`` / ``@nb.compile(...)``).
        dynamic_dims: ``{arg_index: {dim: "name"}}`` indexed by *positional argument*: those
            dims are symbolic, so one plan serves every size once a trace at a second size
            confirms it (if ``fun`` reads a size as a Python number, as ``mean`` does, each
            size is traced instead); the same name on two arguments requires equal sizes.
        fullgraph: raise if ``fun`` realizes a value while traced, or reads the value of a
            tensor it captured (``float(w)``, ``w.item()``: a replay would keep the number
            read); otherwise such a call falls back to plain lazy execution (counted in
            ``stats['fallbacks']``).
        max_cache_size: LRU bound on cached traces.
        static_argnums: as ``jax.jit``'s: positional arguments keyed by value (a new value
            traces again). Python values and NumPy scalars (which the ops take as Python
            numbers) are static already, and a tensor or array is
            refused (not hashable). Any other object among the arguments is static too,
            keyed by its hash (its identity, for most objects): as in ``jax.jit``, its
            Python values (numbers, flags) are read as they were when traced, so pass those
            as arguments; the tensors it holds are read at each call (``obj.w = new`` is
            seen), as captured tensors are.
        static_argnames: the same for keyword arguments, by name.
        donate_argnums: ``jax.jit``'s hint that these arguments' buffers may be reused for
            the outputs: accepted, with no effect (the arguments stay valid: a
            compiled program here writes its outputs to new buffers).
        donate_argnames: the same by name.

    Returns:
        A :class:`CompiledFunction` with ``.stats`` and ``.clear_cache()``. Set
        ``NABLA_EXPLAIN_RETRACE=1`` (or enable the ``nabla.compile`` logger at INFO) to log
        which key field changed on each retrace.

    Raises:
        TypeError: for an unhashable static argument (named in the message).
    """
    _names_or_nums(donate_argnums, int)  # (a hint only: nothing is reused in place)
    _names_or_nums(donate_argnames, str)
    if fun is None:
        return functools.partial(
            compile,
            dynamic_dims=dynamic_dims,
            fullgraph=fullgraph,
            max_cache_size=max_cache_size,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
        )
    check_callable("compile", fun)
    return CompiledFunction(
        fun, dynamic_dims, fullgraph, max_cache_size, static_argnums, static_argnames
    )


def _names_or_nums(value, kind) -> tuple:
    if value is None:
        return ()
    return (value,) if isinstance(value, kind) else tuple(value)
