"""``to_device``: move a tensor between the CPU and accelerators (``x.to(dev)``, ``x.cpu()``).

One op, ``transfer``, with ``device`` as its only kwarg. Its output lives on that device; its
derivative moves the cotangent back to the input's device (and the tangent forward). Moving a
tensor to the device it already lives on returns it unchanged. The NumPy backend runs
transfers between CPU devices only; accelerators need the MAX backend (``ops.transfer_to``).
"""

from __future__ import annotations

from ..core.device import Device
from ..runtime.tensor import Tensor
from . import spmd
from ._util import as_tensor, check_device
from .base import Operation

__all__ = ["to_device", "TransferOp"]


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


def to_device(x, device: Device) -> Tensor:
    """``x`` on ``device`` (``nb.CPU()`` or ``nb.Accelerator(i)``); ``x`` itself if it is
    already there. Differentiable: gradients flow back to the input's device.

    Example:
        >>> y = x.to(nb.CPU())  # the public spelling of to_device(x, nb.CPU())
    """
    if not isinstance(device, Device):
        raise TypeError(f"to_device expects a Device, got {type(device).__name__}")
    x = as_tensor(x, op="to_device")
    if x.device == device:
        return x
    check_device("to_device", device)
    return _transfer.bind([x], {"device": device})
