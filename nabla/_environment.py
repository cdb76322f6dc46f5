"""JAX's top-level names about where a program runs and how it is staged: ``devices``,
``device_count``, ``default_backend``, ``process_index``, ``named_scope``, ``disable_jit``,
``make_jaxpr``, ``make_mesh``, ``Array``, so JAX scripts port with ``jax.`` replaced by
``nb.``.

Devices are those a tensor can be placed on (``x.to(device)``): the host CPU, then each
accelerator MAX sees. ``disable_jit`` makes every ``compile``/``jit`` call run its Python
function directly, op by op, as JAX's does, for stepping through with a debugger.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .core.config import get_backend_name
from .core.device import CPU, Accelerator
from .core.sharding import DeviceMesh
from .core.state import STATE
from .distributed import process_count, process_index
from .ops._util import as_tensor
from .runtime.tensor import Tensor
from .transforms.abstract import eval_shape
from .transforms.trace import trace

__all__ = [
    "Array",
    "default_backend",
    "device_count",
    "devices",
    "disable_jit",
    "ensure_compile_time_eval",
    "local_device_count",
    "local_devices",
    "make_jaxpr",
    "make_mesh",
    "named_call",
    "named_scope",
    "process_count",
    "process_index",
]

Array = Tensor  # (isinstance(x, jax.Array) ports as isinstance(x, nb.Array))


def _accelerators() -> int:
    if get_backend_name() == "numpy":
        return 0
    from .backends.max import accelerator_count  # noqa: PLC0415 - imports MAX: only when asked

    return accelerator_count()


def devices(backend: str | None = None) -> list:
    """The devices tensors can be placed on (JAX's ``jax.devices``): the accelerators MAX
    sees, else the host CPU.

    Args:
        backend: ``"cpu"`` for the host, ``"gpu"`` for the accelerators, None for the
            default (the accelerators when there are any).

    Returns:
        A list of :class:`nabla.Device`.

    Raises:
        RuntimeError: for ``"gpu"`` on a machine without accelerators.
    """
    if backend not in (None, "cpu", "gpu", "cuda"):
        raise ValueError(f"devices: backend must be 'cpu', 'gpu' or None, got {backend!r}")
    n = 0 if backend == "cpu" else _accelerators()
    if backend in ("gpu", "cuda") and n == 0:
        raise RuntimeError("devices('gpu'): MAX sees no accelerator on this machine")
    return [Accelerator(i) for i in range(n)] if n else [CPU()]


def local_devices(process_index: int | None = None, backend: str | None = None) -> list:
    """This process's devices (JAX's ``jax.local_devices``; each process drives its own).

    Args:
        process_index: accepted (every process sees its own devices).
        backend: as :func:`devices`.

    Returns:
        A list of :class:`nabla.Device`.
    """
    return devices(backend)


def device_count(backend: str | None = None) -> int:
    """How many devices :func:`devices` lists, over every process (JAX's
    ``jax.device_count``).

    Args:
        backend: as :func:`devices`.

    Returns:
        A Python int.
    """
    return len(devices(backend)) * process_count()


def local_device_count(backend: str | None = None) -> int:
    """How many devices this process has (JAX's ``jax.local_device_count``).

    Args:
        backend: as :func:`devices`.

    Returns:
        A Python int.
    """
    return len(devices(backend))


def default_backend() -> str:
    """The platform default placements run on: ``"gpu"`` with an accelerator, else
    ``"cpu"`` (JAX's ``jax.default_backend``; :func:`nabla.get_backend_name` names the
    executor, NumPy or MAX)."""
    return "gpu" if _accelerators() else "cpu"


@contextlib.contextmanager
def named_scope(name: str):
    """JAX's ``jax.named_scope``: a name for the ops recorded inside, for profiles. Accepted
    so code that uses it runs; the ops are recorded as they are.

    Args:
        name: the scope's name.
    """
    if not isinstance(name, str):
        raise TypeError(f"named_scope: name must be a str, got {type(name).__name__}")
    yield


def named_call(fun, *, name: str | None = None):
    """JAX's ``jax.named_call``: ``fun`` under a name for profiles; returned as it is.

    Args:
        fun: the function.
        name: the name (accepted).

    Returns:
        ``fun``.
    """
    return fun


@contextlib.contextmanager
def disable_jit(disable: bool = True):
    """JAX's ``jax.disable_jit``: inside, ``compile``/``jit`` functions run their Python
    directly, op by op (values can be printed, a debugger steps through), and their caches
    are left alone.

    Args:
        disable: False leaves compilation on (for code that passes a flag through).
    """
    before = STATE.jit_disabled
    STATE.jit_disabled = bool(disable)
    try:
        yield
    finally:
        STATE.jit_disabled = before


@contextlib.contextmanager
def ensure_compile_time_eval():
    """JAX's ``jax.ensure_compile_time_eval``: values computed from constants inside a
    traced function are known at trace time. Nabla's tensors built from constants already
    have values when read, so this is accepted and does nothing."""
    yield


def make_jaxpr(fun, static_argnums=(), return_shape: bool = False):
    """JAX's ``jax.make_jaxpr``: a function that records ``fun``'s call and returns the
    printable program (:func:`nabla.trace`).

    Args:
        fun: the function.
        static_argnums: positions of arguments passed as they are (Python values).
        return_shape: also return the outputs' shapes and dtypes (``nb.eval_shape``'s).

    Returns:
        ``f(*args) -> Trace`` (or ``(Trace, shapes)`` with ``return_shape``).
    """
    statics = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    def traced(*args, **kwargs):
        def call(*dynamic):
            it = iter(dynamic)
            full = [args[i] if i in statics else next(it) for i in range(len(args))]
            return fun(*full, **kwargs)

        dynamic = [
            as_tensor(a) if isinstance(a, np.ndarray) else a
            for i, a in enumerate(args)
            if i not in statics
        ]
        program = trace(call)(*dynamic)
        if not return_shape:
            return program
        return program, eval_shape(call, *dynamic)

    return traced


def make_mesh(axis_shapes, axis_names, *, devices=None, axis_types=None) -> DeviceMesh:
    """JAX's ``jax.make_mesh``: a :class:`nabla.DeviceMesh` of that shape and axis names.

    Args:
        axis_shapes: the mesh's shape.
        axis_names: one name per mesh axis.
        devices: accepted (the mesh's devices are simulated on one device where there are
            fewer).
        axis_types: accepted.

    Returns:
        The mesh.
    """
    return DeviceMesh("mesh", tuple(axis_shapes), tuple(axis_names))
