"""Thread-local transform state shared by ops and transforms.

- ``new_level()`` hands out unique, increasing transform level ids (vmap, jvp, grad all draw
  from one counter, so an inner transform's level is always larger than an outer one's).
- ``level_sizes`` maps a vmap level id to its batch size.
- ``active_vmap`` lists the vmap levels whose function is currently running;
  ``shared_draw_levels`` those of them along which a global random draw is shared.
- ``hidden``: intervals of transform levels whose tangents ops ignore. A jvp rule for level L
  runs with ``[L, newest level so far]`` hidden, so it sees only outer tangents (no
  perturbation confusion), while transforms started inside the rule get newer, visible
  levels.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import threading
from typing import Any, NamedTuple

_counter = itertools.count(1)
_newest = [0]


class _State(threading.local):
    def __init__(self):
        self.active_vmap: list[int] = []
        # vmap levels that batch one evaluation's tangents (jacfwd's basis), not separate
        # evaluations: a global random draw is the same along them
        self.shared_draw_levels: frozenset = frozenset()
        self.hidden: tuple = ()
        # inside ``no_grad``: the newest level when the block began (levels up to it,
        # ``requires_grad``'s 0 among them, record no history); None outside
        self.no_grad: int | None = None
        # the innermost grad-mode block entered since a compile trace began: "off"
        # (``no_grad``), "on" (``enable_grad``) or None; recorded nodes keep it
        self.grad_block: str | None = None
        # set by compile while tracing: every new OpNode is appended (creation = topo order)
        self.recording: list | None = None
        # keys drawn from the global generator while recording (fresh per compiled call)
        self.recording_rng: list | None = None
        # tensors updated in place while recording (``ops.indexing.rebind``), as
        # ``ops.indexing.Write`` records; compile makes their new values outputs it writes back
        self.writes: list | None = None
        # set by compile while tracing with dynamic dims: where user code decided on a
        # symbolic size (``core.ir.SymDim``); such a trace serves only its own sizes
        self.size_reads: list | None = None
        # set by control flow while tracing a body: its placeholders' impl ids (a sharded
        # value none of them reaches was captured from outside, and enters the body whole)
        self.body_args: dict | None = None
        # set by control flow while tracing a body: (tensor, its impl before) of each
        # in-place update there, checked when the trace ends (a captured tensor's update
        # cannot happen once per step: it is refused)
        self.body_writes: list | None = None
        # set by checkpoint: the keys drawn from the global generator while its function
        # runs forward are logged (``key_log``), and its re-run for a derivative draws
        # those again, in order (``key_replay``): one dropout mask for both
        self.key_log: list | None = None  # of ``Drawn``
        self.key_replay: Replay | None = None
        # set by checkpoint while its function runs forward on detached copies: a gradient
        # hook registered there is registered by the re-run, which the backward pass walks
        self.remat_forward: bool = False
        # set by vmap while its function runs: (tensor, its impl before) of each in-place
        # update that gives a tensor batch levels it did not have (checked on return: a
        # tensor from outside the function cannot keep a batched value)
        self.vmap_writes: list | None = None
        # set by compile while tracing: id of each argument's placeholder impl -> the
        # caller's impl it stands for (``backward(inputs=[w])`` on an argument means ``w``)
        self.trace_args: dict | None = None
        # grad levels whose backward pass is running: the ops it records are never walked
        # back through at those levels again (only at outer ones)
        self.pulling_back: frozenset = frozenset()
        # the running vmaps' axis names (``vmap(axis_name=)``): name -> its level and size
        # (``transforms.vmap.NamedAxis``), for ``lax.psum`` and its kin over a vmapped axis
        self.vmap_names: dict = {}
        # set inside ``disable_jit()``: compiled functions run their Python directly
        self.jit_disabled: bool = False
        # set by compile while tracing: the impl of every tensor whose value was read
        # (``Tensor.numpy`` and what goes through it: ``item``, ``float``, ``bool``, ...);
        # a read of captured state made the trace depend on a value it cannot replay
        self.value_reads: list | None = None


STATE = _State()
level_sizes: dict[int, int] = {}
# shard_map: mesh axis name -> (vmap level, mesh) of the device axes whose body is running
# (a per-device value varies along an axis exactly when it carries that axis's level)
spmd_axes: dict = {}
# the levels of every shard_map whose mesh spans processes: level -> (axis name, mesh,
# ((axis, level), ...) of its call). Kept after the body returns (as ``level_sizes``):
# backward passes and compile replays meet these levels when no body is running.
mesh_levels: dict = {}


def new_level() -> int:
    level = next(_counter)
    _newest[0] = level
    return level


def newest_level() -> int:
    """The newest level made so far (levels made after this call are larger)."""
    return _newest[0]


class Drawn(NamedTuple):
    """A key drawn from the global generator: the generator's ``base`` key, the ``key`` as
    drawn (split into one key per lane of ``levels``, its vmap levels then)."""

    base: Any
    key: Any
    levels: tuple


class Replay(NamedTuple):
    """What a re-run (a checkpoint's, a 1F1B stage's) draws again, in order: ``drawn``, as
    its forward logged them. Levels newer than ``since`` (the newest when the forward began)
    were the forward's own vmaps: the re-run makes new ones, newer than ``now``."""

    drawn: list
    since: int
    now: int


# ----------------------------------------------------------------------------- grad levels
# A tensor's ``traced`` set holds the differentiation levels it depends on. Level 0 stands
# for ``requires_grad`` leaves and is always live; a transform's level is live while the
# transform can still walk back through it.
REQUIRES_GRAD = 0
EMPTY: frozenset = frozenset()
live_grad_levels: set = {REQUIRES_GRAD}


def is_live(traced) -> bool:
    """True when some live differentiation may still walk back through the tensor."""
    return bool(traced) and not traced.isdisjoint(live_grad_levels)


def start_grad_level() -> int:
    level = new_level()
    live_grad_levels.add(level)
    return level


def end_grad_level(level: int) -> None:
    live_grad_levels.discard(level)


@contextlib.contextmanager
def grad_level():
    """A grad level live for the duration of the block."""
    level = start_grad_level()
    try:
        yield level
    finally:
        end_grad_level(level)


def visible(level: int) -> bool:
    for lo, hi in STATE.hidden:
        if lo <= level <= hi:
            return False
    return True


@contextlib.contextmanager
def hide_levels_from(level: int):
    """Hide tangents of ``level`` and of every level that exists now and is newer."""
    old = STATE.hidden
    STATE.hidden = old + ((level, _newest[0]),)
    try:
        yield
    finally:
        STATE.hidden = old


@contextlib.contextmanager
def spmd_axis(name: str, level: int, mesh):
    """Mark vmap ``level`` as mesh axis ``name`` while a shard_map body runs."""
    old = spmd_axes.get(name)
    spmd_axes[name] = (level, mesh)
    try:
        yield
    finally:
        if old is None:
            del spmd_axes[name]
        else:
            spmd_axes[name] = old


@contextlib.contextmanager
def vmap_level(level: int, size: int):
    level_sizes[level] = size
    STATE.active_vmap.append(level)
    try:
        yield level
    finally:
        STATE.active_vmap.pop()


@contextlib.contextmanager
def spmd_axes_as(snapshot: dict):
    """Run with the shard_map bodies' mesh axes as they were when ``snapshot``
    (``dict(spmd_axes)``) was taken: a rule that re-runs user code of a body after it
    returned (a checkpoint's recompute in the backward pass) must see the same per-device
    view (``axis_index``, collectives by axis name)."""
    old = dict(spmd_axes)
    spmd_axes.update(snapshot)
    try:
        yield
    finally:
        spmd_axes.clear()
        spmd_axes.update(old)


@contextlib.contextmanager
def _with_level(field: str, level: int):
    """Add ``level`` to the level set ``STATE.<field>`` for the block (restored after)."""
    old = getattr(STATE, field)
    setattr(STATE, field, old | {level})
    try:
        yield
    finally:
        setattr(STATE, field, old)


def shared_draws(level: int):
    """Within the body of vmap ``level``, make global random draws the same along it."""
    return _with_level("shared_draw_levels", level)


def pulling_back(level: int):
    """Mark ``level``'s backward pass as running (see ``_State.pulling_back``)."""
    return _with_level("pulling_back", level)


def may_be_pulled_back(traced) -> bool:
    """True when a live differentiation other than a backward pass now running may walk
    back through a value with ``traced`` levels (what a recorded op must keep residuals
    for)."""
    return is_live(traced - STATE.pulling_back if STATE.pulling_back else traced)


def grad_cut(traced):
    """``traced`` less the levels ``no_grad`` cuts: ``requires_grad``'s and those of every
    transform begun before the block. A transform begun inside it differentiates as
    anywhere (``torch.func.grad`` under ``torch.no_grad``), and ``no_grad`` inside a
    differentiated function makes its values constants for it (as ``stop_gradient``)."""
    upto = STATE.no_grad
    if upto is None or not traced:
        return traced
    return frozenset([lv for lv in traced if lv > upto])


def _cut_from_now() -> int:
    upto = _newest[0]
    return upto if STATE.no_grad is None else max(STATE.no_grad, upto)


class no_grad(contextlib.ContextDecorator):  # noqa: N801 - torch's spelling
    """Ops inside record no history for ``Tensor.backward`` (``torch.no_grad``), as a
    context manager or a decorator; a ``grad``/``vjp`` begun inside still differentiates
    (as ``torch.func.grad`` does)."""

    _enabled = False

    def __new__(cls, *fun):
        if len(fun) == 1 and callable(fun[0]):
            # ``@nb.no_grad`` / ``@nb.enable_grad`` without parentheses, as PyTorch's
            return cls()(fun[0])
        if fun:
            raise TypeError(
                f"{cls.__name__}() takes no arguments (or a function to decorate), got "
                f"{fun!r}; set_grad_enabled(mode) takes a flag"
            )
        return super().__new__(cls)

    def __init__(self, *fun):
        self._previous: list = []  # a stack: a decorated function may recurse

    def __call__(self, func):
        """Decorate ``func``; a generator function runs each step of its body inside the
        block (PyTorch's): a plain wrapper would cover only making the generator."""
        if not inspect.isgeneratorfunction(func):
            return super().__call__(func)

        @functools.wraps(func)
        def generator(*args, **kwargs):
            gen = func(*args, **kwargs)
            try:
                with self:
                    response = gen.send(None)
                while True:
                    try:
                        request = yield response
                    except GeneratorExit:
                        with self:
                            gen.close()
                        raise
                    except BaseException as exc:  # (thrown in by the caller: passed on)
                        with self:
                            response = gen.throw(exc)
                    else:
                        with self:
                            response = gen.send(request)
            except StopIteration as stop:
                return stop.value

        return generator

    def __enter__(self):
        self._previous.append((STATE.no_grad, STATE.grad_block))
        STATE.no_grad = None if self._enabled else _cut_from_now()
        STATE.grad_block = "on" if self._enabled else "off"
        return self

    def __exit__(self, *exc) -> None:
        STATE.no_grad, STATE.grad_block = self._previous.pop()


class enable_grad(no_grad):  # noqa: N801 - torch's spelling
    """Record history again inside a ``no_grad`` block (``torch.enable_grad``), as a
    context manager or a decorator."""

    _enabled = True


class inference_mode(no_grad):  # noqa: N801 - torch's spelling
    """``torch.inference_mode``: :class:`no_grad` (``mode=True``), as a context manager or
    a decorator; ``mode=False`` records as usual. Tensors made inside are ordinary ones
    (PyTorch's inference tensors refuse later autograd use; these do not need to).

    Args:
        mode: record nothing (True, the default) or as usual (False).
    """

    def __new__(cls, mode=True):
        if callable(mode):  # ``@nb.inference_mode`` without parentheses, as PyTorch's
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True):
        super().__init__()
        self._enabled = not mode


class set_grad_enabled:  # noqa: N801 - torch's spelling
    """Turn recording for ``Tensor.backward`` off (``False``, as :class:`no_grad`) or back
    on (``True``): at once when called, and for the block alone when used in a ``with``
    (``torch.set_grad_enabled``).

    Args:
        mode: False cuts history as ``no_grad`` does; True records it again.
    """

    def __init__(self, mode: bool):
        self._previous = (STATE.no_grad, STATE.grad_block)
        self._mode = bool(mode)
        STATE.no_grad = None if mode else _cut_from_now()
        STATE.grad_block = "on" if mode else "off"

    def __call__(self, func):
        """``@nb.set_grad_enabled(mode)``: the mode set at the call is undone, and ``func``
        runs with it (PyTorch's)."""
        STATE.no_grad, STATE.grad_block = self._previous
        return (no_grad if not self._mode else enable_grad)()(func)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        STATE.no_grad, STATE.grad_block = self._previous


def is_grad_enabled() -> bool:
    """False inside ``no_grad`` (``torch.is_grad_enabled``)."""
    return STATE.no_grad is None
