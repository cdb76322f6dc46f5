"""Devices: ``nb.CPU()`` and ``nb.Accelerator(id)``.

Invariants: devices are small immutable values compared by (kind, id); the default device is
a thread-local set with ``nb.default_device(dev)``.
"""

from __future__ import annotations

import contextlib
import threading

from .dtypes import defaults_block

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
    """Context manager: tensors created inside live on ``device`` (a Device, or a name as
    PyTorch spells it: ``"cpu"``, ``"cuda:0"``)."""
    named = device_like(device)
    if named is None:
        raise TypeError(
            f"default_device expects a Device or a device name, got {type(device).__name__} "
            f"{device!r}"
        )
    device = named
    old = getattr(_state, "device", None)
    with defaults_block():
        _state.device = device
        try:
            yield device
        finally:
            _state.device = old


def device_named(name: str):
    """``"cpu"``, ``"cpu:1"``, ``"cuda"``, ``"cuda:0"``, ``"gpu:1"`` as a Device; None for any
    other string (a dtype name, in ``x.to``)."""
    kind, _, index = name.lower().partition(":")
    if kind not in ("cpu", "cuda", "gpu") or (index and not index.isdigit()):
        return None
    n = int(index) if index else 0
    return CPU(n) if kind == "cpu" else Accelerator(n)


def device_like(arg):
    """``arg`` as a Device when it is one or names one (``"cpu"``, ``"gpu:1"``, a
    ``torch.device``, read by duck typing); None otherwise."""
    if isinstance(arg, Device):
        return arg
    if type(arg).__module__ == "torch" and type(arg).__name__ == "device":
        arg = str(arg)
    return device_named(arg) if isinstance(arg, str) else None


_CPU0 = CPU()
