"""``to_device``: move a tensor between the CPU and accelerators (``x.to(dev)``, ``x.cpu()``).

One op, ``transfer``, with ``device`` as its only kwarg. Its output lives on that device; its
derivative moves the cotangent back to the input's device (and the tangent forward). Moving a
tensor to the device it already lives on returns it unchanged. The NumPy backend runs
transfers between CPU devices only; accelerators need the MAX backend (``ops.transfer_to``).
"""

from __future__ import annotations

import numpy as np

from ..core.device import CPU, Accelerator, Device
from ..core.pytree import tree_leaves, tree_map
from ..runtime.tensor import Tensor, realize
from . import spmd
from ._util import as_tensor, check_device
from .base import Operation
from .functions import fn

__all__ = [
    "to_device",
    "TransferOp",
    "device_put",
    "device_get",
    "block_until_ready",
    "cpu",
    "gpu",
    "accelerator",
]


class TransferOp(Operation):
    name = "transfer"
    data_movement = True
    linear = True

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return spmd.elementwise_rule(in_shapes, out_shapes)

    def infer(self, shapes, dtypes, kwargs):
        return [shapes[0]], [dtypes[0]]

    def device_of(self, impls, kwargs):
        return kwargs["device"]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        ct = cotangents[0]
        return [None if ct is None else to_device(ct, primals[0].device)]


_transfer = TransferOp()


def to_device(x, device: Device | None = None, *, sharding=None) -> Tensor:
    """``x`` on ``device`` (``nb.CPU()`` or ``nb.Accelerator(i)``); ``x`` itself if it is
    already there. Differentiable: gradients flow back to the input's device. The original
    Nabla's forms too: ``to_device(x)`` (where it is) and ``to_device(x, sharding=spec)``
    (laid out as a ``ShardingSpec`` says, as :func:`nabla.reshard`).

    Args:
        x: the tensor.
        device: the device (None: where ``x`` is).
        sharding: a ``ShardingSpec`` to lay ``x`` out as, instead of a device.

    Returns:
        The tensor on ``device`` (or laid out as ``sharding``).

    Raises:
        TypeError: for a ``device`` that is not a Device.
        ValueError: for both ``device`` and ``sharding``.

    Example:
        >>> y = x.to(nb.CPU())  # the public spelling of to_device(x, nb.CPU())
    """
    if sharding is not None:
        if device is not None:
            raise ValueError("to_device: pass device or sharding, not both")
        return fn.reshard(as_tensor(x, op="to_device"), sharding.mesh, sharding)
    if device is None:
        return as_tensor(x, op="to_device")
    if not isinstance(device, Device):
        raise TypeError(f"to_device expects a Device, got {type(device).__name__}")
    x = as_tensor(x, op="to_device")
    if x.device == device:
        return x
    check_device("to_device", device)
    return _transfer.bind([x], {"device": device})


def device_put(x, device: Device | None = None):
    """JAX's ``device_put``: every array leaf of the pytree ``x`` as a tensor on ``device``
    (default: where it is, or :func:`nabla.get_default_device` for a host array).

    Args:
        x: a pytree of tensors, arrays and numbers (other leaves are kept).
        device: the device to place them on.

    Returns:
        A pytree of the same structure.
    """

    def put(leaf):
        if isinstance(leaf, Tensor):
            return leaf if device is None else to_device(leaf, device)
        if isinstance(leaf, np.ndarray | np.generic | int | float | bool):
            return fn.asarray(leaf, device=device)
        return leaf

    return tree_map(put, x)


def device_get(x):
    """JAX's ``device_get``: every tensor leaf of the pytree ``x`` as a NumPy array (computed
    first); other leaves are kept.

    Args:
        x: a pytree.

    Returns:
        A pytree of the same structure.
    """
    leaves = [t for t in tree_leaves(x) if isinstance(t, Tensor)]
    realize(*leaves)
    return tree_map(lambda t: t.numpy() if isinstance(t, Tensor) else t, x)


def block_until_ready(x):
    """JAX's ``block_until_ready``: compute every tensor leaf of the pytree ``x`` and return
    ``x`` (a computed tensor is ready: nothing runs in the background).

    Args:
        x: a pytree.

    Returns:
        ``x``.
    """
    realize(*[t for t in tree_leaves(x) if isinstance(t, Tensor)])
    return x


def cpu(x) -> Tensor:
    """``x`` on the CPU (the original Nabla's ``cpu(x)``; ``x.cpu()``).

    Args:
        x: the tensor.

    Returns:
        The tensor on ``nb.CPU()``.
    """
    return to_device(x, CPU())


def accelerator(x, device_id: int = 0) -> Tensor:
    """``x`` on accelerator ``device_id`` (the original Nabla's ``accelerator(x)``).

    Args:
        x: the tensor.
        device_id: which accelerator (default 0).

    Returns:
        The tensor on ``nb.Accelerator(device_id)``.

    Raises:
        RuntimeError: where there is no such accelerator (as ``x.to(...)`` does).
    """
    return to_device(x, Accelerator(device_id))


def gpu(x) -> Tensor:
    """``x`` on the first accelerator (the original Nabla's ``gpu(x)``).

    Args:
        x: the tensor.

    Returns:
        The tensor on ``nb.Accelerator(0)``.
    """
    return accelerator(x, 0)
