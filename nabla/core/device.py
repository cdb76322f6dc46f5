"""Devices: ``nb.CPU()`` and ``nb.Accelerator(id)``.

Invariants: devices are small immutable values compared by (kind, id); the default device is
a thread-local set with ``nb.default_device(dev)``.
"""

from __future__ import annotations

import contextlib
import threading

from .dtypes import DEFAULTS_EPOCH

__all__ = ["CPU", "Accelerator", "Device", "default_device", "get_default_device"]


class Device:
    """A place where tensors live and kernels run; make one with :func:`nabla.CPU` or
    :func:`nabla.Accelerator`.

    Devices are small immutable values compared by ``(kind, id)``.

    Args:
        kind: ``"cpu"`` or ``"gpu"`` (an accelerator).
        id: the device index among those of its kind (default 0).
    """

    __slots__ = ("kind", "id", "_hash")

    def __init__(self, kind: str, id: int = 0):  # noqa: A002
        self.kind = kind
        self.id = int(id)
        self._hash = hash((kind, self.id))

    @property
    def is_cpu(self) -> bool:
        """Whether this is the host CPU (else an accelerator)."""
        return self.kind == "cpu"

    def __eq__(self, other):
        return isinstance(other, Device) and (self.kind, self.id) == (other.kind, other.id)

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return "CPU()" if self.kind == "cpu" else f"Accelerator({self.id})"

    def __str__(self):
        return f"{self.kind}:{self.id}"


def CPU(id: int = 0) -> Device:  # noqa: N802, A002 - public constructor name
    """The host CPU, as a :class:`nabla.Device`.

    Args:
        id: the device index (default 0; the host is one device).

    Returns:
        ``Device("cpu", id)``.
    """
    return Device("cpu", id)


def Accelerator(id: int = 0) -> Device:  # noqa: N802, A002
    """An accelerator (NVIDIA GPU) driven by the MAX backend, as a :class:`nabla.Device`.

    Args:
        id: the accelerator index (default 0). It is checked when a tensor is moved there:
            ``x.to(nb.Accelerator(1))`` raises RuntimeError if MAX sees fewer accelerators.

    Returns:
        ``Device("gpu", id)``.
    """
    return Device("gpu", id)


_state = threading.local()


def get_default_device() -> Device:
    """The device new tensors are created on: ``nb.CPU()`` unless set by
    :func:`nabla.default_device` (per thread)."""
    return getattr(_state, "device", None) or _CPU0


@contextlib.contextmanager
def default_device(device: Device):
    """Context manager: tensors created inside live on ``device``."""
    if not isinstance(device, Device):
        raise TypeError(f"default_device expects a Device, got {type(device).__name__}")
    old = getattr(_state, "device", None)
    _state.device = device
    DEFAULTS_EPOCH[0] += 1
    try:
        yield device
    finally:
        _state.device = old
        DEFAULTS_EPOCH[0] += 1


_CPU0 = CPU()
