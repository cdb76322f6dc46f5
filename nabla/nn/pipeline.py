"""Pipeline parallelism over a mesh axis: GPipe and 1F1B schedules, built on ``shard_map``.

A model of ``S`` equal-shaped stages: ``stage_fn(stage_params, h) -> h`` (same shape), with
``params`` a pytree whose leaves stack the stages along dim 0 (``S`` rows, split over the
``pp`` mesh axis: each device holds its own stage). A batch is cut into ``M`` microbatches
that flow from stage to stage with ``ppermute``.

- ``pipeline_forward``: the model's output (GPipe's forward: ``M + S - 1`` steps).
- ``pipeline_value_and_grad``: the mean of ``loss_fn`` over the microbatches and its
  gradient with respect to ``params``, in the chosen schedule:
  - ``"gpipe"``: every forward, then the backward pass that differentiation derives from it;
  - ``"1f1b"``: the timetable of :class:`OneFOneB` runs explicitly, each stage alternating one
    forward and one backward in the steady state; a stage keeps at most ``S - s``
    activations, so each device's buffers hold ``S`` slots (reused, microbatch ``m`` in slot
    ``m % S``) whatever ``M`` is, where GPipe keeps all ``M``.
  Both give the unpipelined model's loss and gradients.
- ``GPipe`` / ``OneFOneB``: the timetables, with ``bubble_fraction`` (idle share of the
  stage-steps, forward and backward each one unit) and ``peak_activations``.

With ``data_axis`` the microbatches are also split over a data-parallel mesh axis (a 2-D
``(pp, dp)`` mesh); the loss and the gradients are averaged over it.

Every device runs the same program (SPMD): a stage that is idle in a step computes on zeros
and its result is masked out, as on real hardware where the step's slot is empty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.pytree import keystr, tree_flatten_with_path, tree_leaves, tree_map
from ..core.sharding import DeviceMesh, P, ShardingError
from ..core.state import STATE, Drawn, Replay, newest_level
from ..ops._util import as_tensor
from ..ops.binary import maximum, where
from ..ops.collectives import all_reduce, axis_index, pmean, ppermute
from ..ops.creation import constant, zeros_like
from ..ops.indexing import take
from ..ops.unary import stop_gradient
from ..ops.view import reshape, stack
from ..runtime.tensor import Tensor
from ..transforms.autodiff import value_and_grad, vjp
from ..transforms.shard_map import shard_map

__all__ = [
    "PipelineSchedule",
    "GPipe",
    "OneFOneB",
    "pipeline_forward",
    "pipeline_value_and_grad",
]


# ----------------------------------------------------------------------------- timetables
class PipelineSchedule:
    """A timetable: ``table[t][s]`` is ``("F", m)``, ``("B", m)`` or None (idle) for stage
    ``s`` at time ``t``, a forward and a backward each taking one unit."""

    name = ""

    def __init__(self, stages: int, microbatches: int):
        if stages < 1 or microbatches < 1:
            raise ValueError(f"{self.name}: needs stages >= 1 and microbatches >= 1")
        self.stages = stages
        self.microbatches = microbatches
        self.table = self._build()

    def _build(self) -> list:
        raise NotImplementedError

    @property
    def bubble_fraction(self) -> float:
        """Idle stage-steps over all stage-steps."""
        slots = len(self.table) * self.stages
        busy = sum(1 for row in self.table for cell in row if cell is not None)
        return 1.0 - busy / slots

    @property
    def peak_activations(self) -> list:
        """Per stage, the most microbatch activations held at once (forward done, backward
        not yet)."""
        out = []
        for s in range(self.stages):
            held = peak = 0
            for row in self.table:
                cell = row[s]
                if cell is not None:
                    held += 1 if cell[0] == "F" else -1
                    peak = max(peak, held)
            out.append(peak)
        return out

    def __str__(self):
        lines = [
            f"{self.name}: {self.stages} stages, {self.microbatches} microbatches, "
            f"bubble {self.bubble_fraction:.3f}"
        ]
        for s in range(self.stages):
            cells = [
                " . " if row[s] is None else f"{row[s][0]}{row[s][1]:<2d}" for row in self.table
            ]
            lines.append(f"stage {s}: " + " ".join(cells))
        return "\n".join(lines)

    __repr__ = __str__


def _simulate(stages, microbatches, order_of) -> list:
    """Run per-stage op orders (``order_of(s)``: a list of ("F"|"B", m)) as early as their
    dependencies allow: F(m, s) after F(m, s-1); B(m, s) after B(m, s+1) and F(m, s)."""
    done: dict = {}
    orders = [list(order_of(s)) for s in range(stages)]
    pos = [0] * stages
    table = []
    t = 0
    while any(pos[s] < len(orders[s]) for s in range(stages)):
        row = []
        for s in range(stages):
            cell = None
            if pos[s] < len(orders[s]):
                kind, m = orders[s][pos[s]]
                if kind == "F":
                    ready = s == 0 or done.get(("F", m, s - 1), t) < t
                else:
                    ready = done.get(("F", m, s), t) < t and (
                        s == stages - 1 or done.get(("B", m, s + 1), t) < t
                    )
                if ready:
                    cell = (kind, m)
            row.append(cell)
        for s, cell in enumerate(row):
            if cell is not None:
                done[(cell[0], cell[1], s)] = t
                pos[s] += 1
        table.append(row)
        t += 1
    return table


class GPipe(PipelineSchedule):
    """Every microbatch forward through every stage, then every backward (reverse order)."""

    name = "gpipe"

    def _build(self):
        S, M = self.stages, self.microbatches
        return _simulate(
            S, M, lambda s: [("F", m) for m in range(M)] + [("B", m) for m in reversed(range(M))]
        )


class OneFOneB(PipelineSchedule):
    """PipeDream-flush: stage ``s`` runs ``S - s - 1`` warm-up forwards, then alternates one
    forward and one backward, then drains its backwards."""

    name = "1f1b"

    def _build(self):
        S, M = self.stages, self.microbatches

        def order(s):
            warm = min(S - s - 1, M)
            ops = [("F", m) for m in range(warm)]
            f, b = warm, 0
            while f < M:
                ops.append(("F", f))
                f += 1
                ops.append(("B", b))
                b += 1
            ops += [("B", m) for m in range(b, M)]
            return ops

        return _simulate(S, M, order)


SCHEDULES = {"gpipe": GPipe, "1f1b": OneFOneB}


# ----------------------------------------------------------------------------- helpers
def _ring_size(table, stages, microbatches) -> int:
    """Slots per stage for the activations and cotangents 1F1B keeps: microbatch ``m`` uses
    slot ``m % K``. ``K = S`` when no two microbatches live in one buffer at once with the
    same slot (checked on the timetable: the schedule's bounded memory, made real), else M."""
    K = min(stages, microbatches)
    when = {}
    for t, row in enumerate(table):
        for s, cell in enumerate(row):
            if cell is not None:
                when[(cell[0], cell[1], s)] = t
    for s in range(stages):
        spans = []  # (microbatch, first step held, last step held) per buffer
        for m in range(microbatches):
            f, b = when[("F", m, s)], when[("B", m, s)]
            spans.append(("saved", m, f, b))
            if s > 0:
                spans.append(("act", m, when[("F", m, s - 1)] + 1, f))
            if s < stages - 1:
                spans.append(("ct", m, when[("B", m, s + 1)] + 1, b))
        for buf in ("saved", "act", "ct"):
            live = [(m, a, z) for kind, m, a, z in spans if kind == buf]
            for i, (m1, a1, z1) in enumerate(live):
                for m2, a2, z2 in live[i + 1 :]:
                    if m1 % K == m2 % K and a1 <= z2 and a2 <= z1:
                        return microbatches
    return K


def _check(mesh, axis, microbatches, x, data_axis, params=None):
    if not isinstance(mesh, DeviceMesh):
        raise ShardingError(f"pipeline: mesh must be a DeviceMesh, got {type(mesh).__name__}")
    S = mesh.shape[mesh.axis(axis, "pipeline")]
    if data_axis is not None:
        mesh.axis(data_axis, "pipeline")
        if data_axis == axis:
            raise ShardingError(
                f"pipeline: data_axis {data_axis!r} is the pipeline axis; name another mesh axis"
            )
    if not isinstance(microbatches, int | np.integer) or isinstance(microbatches, bool):
        raise ShardingError(f"pipeline: microbatches must be an int, got {microbatches!r}")
    if not x.shape:
        raise ShardingError(
            f"pipeline: the batch must have a leading batch dim, got shape {x.shape}"
        )
    for leaf in tree_leaves(params):
        shape = tuple(getattr(leaf, "shape", ()))
        if not shape or shape[0] != S:
            raise ShardingError(
                f"pipeline: every parameter stacks the {S} stages of mesh axis {axis!r} along "
                f"dim 0; got a parameter of shape {shape}"
            )
    if microbatches < 1 or x.shape[0] % microbatches:
        raise ShardingError(
            f"pipeline: the batch of shape {x.shape} does not split into {microbatches} "
            "microbatches"
        )
    mb = x.shape[0] // microbatches
    if data_axis is not None and mb % mesh.axis_size(data_axis):
        raise ShardingError(
            f"pipeline: a microbatch of {mb} rows does not split over the "
            f"{mesh.axis_size(data_axis)} devices of {data_axis!r}"
        )
    return S, mb


def _stage_out(run, q, inp):
    """``run.stage_fn(q, inp)``, which must hand the next stage a value like its input:
    a merge with the first stage's input (a select) would otherwise broadcast or promote
    it silently."""
    out = run.stage_fn(q, inp)
    if not isinstance(out, Tensor) or out.shape != inp.shape or out.dtype != inp.dtype:
        got = (
            f"{out.dtype.value}{list(out.shape)}" if isinstance(out, Tensor) else type(out).__name__
        )
        raise ValueError(
            f"pipeline: stage_fn must return a tensor of its input's shape and dtype (each "
            f"stage passes it on): got {got} for an input of {inp.dtype.value}"
            f"{list(inp.shape)} (per device). Embed tokens or change widths outside the "
            "pipeline, or pad every stage to one width"
        )
    return out


def _stage_loss(run, out, last, target):
    """``run.loss_fn`` of a stage's output, which counts on the last stage only: elsewhere
    its input is cut (a select, not a product), so a derivative that is infinite there
    (``log`` of a 0 the stage made) cannot meet the zero cotangent and make NaN."""
    lm = run.loss_fn(where(last, out, stop_gradient(out)), target)
    if not isinstance(lm, Tensor) or lm.size != 1:
        got = f"shape {lm.shape}" if isinstance(lm, Tensor) else type(lm).__name__
        raise ValueError(
            f"pipeline: loss_fn must return a scalar tensor (a mean over the microbatch's "
            f"rows), got {got}"
        )
    return lm.reshape(())


def _microbatches(x, microbatches):
    return reshape(x, (microbatches, x.shape[0] // microbatches) + tuple(x.shape[1:]))


def _stage_params(params):
    """Per device: its stage's parameters (the local block has one stage row)."""
    return tree_map(lambda leaf: reshape(leaf, leaf.shape[1:]), params)


@dataclass(frozen=True, slots=True)
class _Run:
    """A pipelined run's fixed parts, which the code each device runs reads: the stage
    function, the loss (None for a forward only), the mesh axes and the sizes."""

    stage_fn: Callable
    loss_fn: Callable | None
    mesh: DeviceMesh
    axis: str
    data_axis: str | None
    stages: int
    microbatches: int

    def specs(self, params):
        """``shard_map``'s specs: of ``params`` (stage rows over the pipeline axis) and of the
        stacked microbatches (rows over the data axis)."""
        return tree_map(lambda _: P(self.axis), params), P(None, self.data_axis)


def _forward_steps(run: _Run, p, xs):
    """GPipe's forward: returns the last stage's output per microbatch (valid there)."""
    S, M, axis = run.stages, run.microbatches, run.axis
    stage = axis_index(run.mesh, axis)
    first = stage == 0
    state = zeros_like(xs[0])
    outs = []
    send = [(i, i + 1) for i in range(S - 1)]
    for t in range(M + S - 1):
        inp = where(first, xs[t] if t < M else zeros_like(xs[0]), state)
        # an idle step (filling or draining) computes on zeros and its result is never
        # used: no gradient may flow through it (0 times an infinite derivative at zero
        # would be NaN), so its parameters and input are cut by a select, not a product
        active = (stage <= t) & (stage > t - M)
        q = tree_map(lambda leaf, active=active: where(active, leaf, stop_gradient(leaf)), p)
        inp = where(active, inp, stop_gradient(inp))
        out = _stage_out(run, q, inp)
        if t >= S - 1:
            outs.append(out)
        state = ppermute(out, send, axis_name=axis)
    return outs, stage


def pipeline_forward(stage_fn, params, x, *, mesh, axis="pp", microbatches=1, data_axis=None):
    """The pipelined model's output for batch ``x`` (rows split into ``microbatches``).

    Args:
        stage_fn: ``stage_fn(stage_params, h) -> h`` of one stage (same shape in and out).
        params: pytree; each leaf stacks the ``S`` stages along dim 0.
        x: the batch, ``(B, ...)``.
        mesh: a mesh with the ``axis`` (and ``data_axis``) axes.
        axis: the pipeline mesh axis (its size is the number of stages).
        microbatches: ``M``; ``B`` must divide by it.
        data_axis: an optional data-parallel mesh axis splitting each microbatch.

    Returns:
        The output batch, ``(B, ...)``.
    """
    S, _ = _check(mesh, axis, microbatches, x, data_axis, params)
    run = _Run(stage_fn, None, mesh, axis, data_axis, S, microbatches)
    p_spec, x_spec = run.specs(params)

    def body(params, xs):
        outs, stage = _forward_steps(run, _stage_params(params), xs)
        ys = stack(outs)
        # only the last stage's outputs are real: move them to every stage
        return all_reduce(where(stage == S - 1, ys, zeros_like(ys)), "sum", axes=axis)

    mapped = shard_map(body, mesh=mesh, in_specs=(p_spec, x_spec), out_specs=x_spec)
    ys = mapped(params, _microbatches(x, microbatches))
    return reshape(ys, tuple(x.shape[:1]) + tuple(ys.shape[2:]))


def pipeline_value_and_grad(
    stage_fn,
    loss_fn,
    params,
    x,
    y,
    *,
    mesh,
    axis="pp",
    microbatches=1,
    schedule="gpipe",
    data_axis=None,
):
    """The mean over microbatches of ``loss_fn(output, target)`` and its gradient with
    respect to ``params``, run as a pipeline.

    Args:
        stage_fn: ``stage_fn(stage_params, h) -> h`` of one stage (same shape in and out).
        loss_fn: ``loss_fn(output_microbatch, target_microbatch) -> scalar`` (a mean over the
            microbatch's rows, so the result equals the whole batch's mean loss).
        params: pytree; each leaf stacks the ``S`` stages along dim 0 (split over ``axis``).
        x: inputs ``(B, ...)``.
        y: targets ``(B, ...)``.
        mesh: a mesh with the ``axis`` (and ``data_axis``) axes.
        axis: the pipeline mesh axis.
        microbatches: ``M``.
        schedule: ``"gpipe"``, ``"1f1b"`` or a :class:`PipelineSchedule` class.
        data_axis: an optional data-parallel mesh axis: microbatches split over it, loss
            and gradients averaged over it.

    Returns:
        ``(loss, grads)``: grads has the structure of ``params`` (stage rows split over
        ``axis``).
    """
    S, _ = _check(mesh, axis, microbatches, x, data_axis, params)
    if tuple(y.shape[:1]) != tuple(x.shape[:1]):
        raise ShardingError(
            f"pipeline: the targets of shape {tuple(y.shape)} and the batch of shape "
            f"{tuple(x.shape)} have different numbers of rows"
        )
    for path, leaf in tree_flatten_with_path(params)[0]:
        if not as_tensor(leaf, op="pipeline").dtype.is_float:
            raise TypeError(
                f"pipeline: parameter {keystr(path) or 'params'} has dtype "
                f"{as_tensor(leaf).dtype.value}; only float parameters are differentiated"
            )
    kind = SCHEDULES.get(schedule, schedule) if isinstance(schedule, str) else schedule
    if kind not in (GPipe, OneFOneB):
        raise ValueError(f"pipeline: schedule must be 'gpipe' or '1f1b', got {schedule!r}")
    run = _Run(stage_fn, loss_fn, mesh, axis, data_axis, S, microbatches)
    xs, ys = _microbatches(x, microbatches), _microbatches(y, microbatches)
    if kind is GPipe:
        return _gpipe_value_and_grad(run, params, xs, ys)
    return _one_f_one_b_value_and_grad(run, params, xs, ys)


def _gpipe_value_and_grad(run: _Run, params, xs, ys):
    """GPipe: every forward, then the backward that differentiation derives from them."""
    S, M = run.stages, run.microbatches
    p_spec, x_spec = run.specs(params)

    def body(params, xs, ys):
        outs, stage = _forward_steps(run, _stage_params(params), xs)
        last = stage == S - 1
        total = sum(_stage_loss(run, outs[m], last, ys[m]) for m in range(M)) / M
        loss = all_reduce(where(stage == S - 1, total, zeros_like(total)), "sum", axes=run.axis)
        return pmean(loss, axes=run.data_axis) if run.data_axis is not None else loss

    mapped = shard_map(body, mesh=run.mesh, in_specs=(p_spec, x_spec, x_spec), out_specs=P())
    return value_and_grad(lambda p: mapped(p, xs, ys))(params)


def _one_f_one_b_value_and_grad(run: _Run, params, xs, ys):
    """1F1B: the timetable of :class:`OneFOneB` run step by step on every device."""
    table = OneFOneB(run.stages, run.microbatches).table
    slots = _ring_size(table, run.stages, run.microbatches)  # per stage: S, not M
    p_spec, x_spec = run.specs(params)

    def body(params, xs, ys):
        device = _OneFOneBDevice(run, _stage_params(params), xs, ys, slots)
        for row in table:
            device.step(row)
        return device.result()

    out_specs = (P(), p_spec)
    mapped = shard_map(body, mesh=run.mesh, in_specs=(p_spec, x_spec, x_spec), out_specs=out_specs)
    return mapped(params, xs, ys)


class _OneFOneBDevice:
    """One device's part of a 1F1B run: its stage's forwards and backwards, the ring buffers
    (``slots`` rows, microbatch ``m`` in row ``m % slots``) that activations and cotangents
    wait in, and the gradient and loss summed so far."""

    def __init__(self, run: _Run, p, xs, ys, slots: int):
        self.run, self.p, self.xs, self.ys = run, p, xs, ys
        self.stage = axis_index(run.mesh, run.axis)
        self.last = self.stage == run.stages - 1
        self.size = slots
        self.slots = constant(np.arange(slots, dtype=np.int32))
        ring = zeros_like(xs[:slots])
        self.recv_act = ring  # activations arrived from the previous stage, not yet run
        self.saved_in = ring  # forward inputs kept for the backward
        self.recv_ct = ring  # cotangents arrived from the next stage
        self.grads = tree_map(zeros_like, p)
        self.saved_keys = None  # (slots, keys drawn per forward, 2), when stage_fn draws
        self.total = None
        S = run.stages
        self.fwd = [(i, i + 1) for i in range(S - 1)]
        self.bwd = [(i + 1, i) for i in range(S - 1)]

    def _per_stage(self, values):
        """This device's entry of a per-stage table (an int32 scalar per device)."""
        return take(constant(np.asarray(values, dtype=np.int32)), self.stage)

    def _slot(self, ms):
        """This device's ring slot of microbatch ``ms[stage]`` (-1: none)."""
        return self._per_stage([m % self.size if m >= 0 else -1 for m in ms])

    @staticmethod
    def _pick(buf, k):
        """Row ``k`` of a stacked buffer (``k < 0``: idle, any row)."""
        return take(buf, maximum(k, 0), axis=0)

    def _put(self, buf, k, value):
        """``buf`` with row ``k`` replaced by ``value`` (``k < 0``: unchanged)."""
        hit = reshape(self.slots == k, (self.size,) + (1,) * (buf.ndim - 1))
        return where(hit, reshape(value, (1,) + tuple(value.shape)), buf)

    def step(self, row) -> None:
        """Run one time step of the timetable: its forward cells, then its backward cells."""
        f_of = [cell[1] if cell and cell[0] == "F" else -1 for cell in row]
        b_of = [cell[1] if cell and cell[0] == "B" else -1 for cell in row]
        if any(m >= 0 for m in f_of):
            self._forward(f_of)
        if any(m >= 0 for m in b_of):
            self._backward(b_of)

    def _forward(self, f_of) -> None:
        """The forward slot: stage ``s`` runs microbatch ``f_of[s]`` (idle stages compute on
        row 0); the last stage adds its loss."""
        run, S = self.run, self.run.stages
        mf = self._per_stage(f_of)
        kf = self._slot(f_of)
        inp = where(self.stage == 0, self._pick(self.xs, mf), self._pick(self.recv_act, kf))
        self.saved_in = self._put(self.saved_in, kf, inp)
        outer, STATE.key_log = STATE.key_log, []
        try:  # the random keys it draws (dropout), kept for the backward's re-run
            out = _stage_out(run, self.p, inp)
            keys = STATE.key_log
        finally:
            STATE.key_log = outer
        if outer is not None:
            outer.extend(keys)
        if keys:  # (as drawn: per device, its own)
            drawn = stack([d.key for d in keys])
            if self.saved_keys is None:
                self.saved_keys = zeros_like(stack([drawn] * self.size))
            self.saved_keys = self._put(self.saved_keys, kf, drawn)
        if f_of[S - 1] >= 0:  # the last stage finished a microbatch: its loss
            lm = _stage_loss(run, out, self.last, self.ys[f_of[S - 1]])
            lm = where(self.last, lm, zeros_like(lm))
            self.total = lm if self.total is None else self.total + lm
        sent = ppermute(out, self.fwd, axis_name=run.axis)
        self.recv_act = self._put(self.recv_act, self._slot([-1] + f_of[:-1]), sent)

    def _backward(self, b_of) -> None:
        """The backward slot: stage ``s`` differentiates microbatch ``b_of[s]`` from its
        saved input and sends the input's cotangent to the previous stage."""
        run = self.run
        mb = self._per_stage(b_of)
        busy = mb >= 0
        y_m = self._pick(self.ys, mb)

        kb = self._slot(b_of)
        # the forward's draws again: one dropout mask for the microbatch's forward and its
        # derivative (a fresh draw gave the gradient of another loss than the one returned)
        keys = [] if self.saved_keys is None else list(self._pick(self.saved_keys, kb))

        def through(q, a):
            outer = STATE.key_replay  # (no levels of their own: taken as they are)
            STATE.key_replay = Replay([Drawn(k, k, ()) for k in keys], 0, newest_level())
            try:
                h = _stage_out(run, q, a)
            finally:
                STATE.key_replay = outer
            return h, _stage_loss(run, h, self.last, y_m)

        (h, lm), pull = vjp(through, self.p, self._pick(self.saved_in, kb))
        # the last stage starts from the loss; the others from what arrived
        ct_h = where(self.last, zeros_like(h), self._pick(self.recv_ct, kb))
        ct_l = where(self.last, constant(1.0 / run.microbatches, dtype=lm.dtype), zeros_like(lm))
        gp, ga = pull((ct_h, ct_l))
        self.grads = tree_map(lambda g, d: g + where(busy, d, zeros_like(d)), self.grads, gp)
        sent = ppermute(ga, self.bwd, axis_name=run.axis)
        self.recv_ct = self._put(self.recv_ct, self._slot(b_of[1:] + [-1]), sent)

    def result(self):
        """``(loss, grads)`` of the whole run, averaged over the data axis if there is one."""
        run = self.run
        loss = all_reduce(self.total / run.microbatches, "sum", axes=run.axis)
        grads = tree_map(lambda g: reshape(g, (1,) + tuple(g.shape)), self.grads)
        if run.data_axis is not None:
            loss = pmean(loss, axes=run.data_axis)
            # the stage parameters are the same on every device along the data axis: their
            # gradients from the vjp inside the body come summed over it (shard_map's rule,
            # as JAX's), so the mean divides by its size
            n = run.mesh.axis_size(run.data_axis)
            grads = tree_map(lambda g: g / n, grads)
        return loss, grads
