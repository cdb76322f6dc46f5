"""PyTorch's lazy modules (``LazyLinear``, ``LazyConv2d``, ``LazyBatchNorm1d``, ...): the
input size (``in_features``, ``in_channels``, ``num_features``: the input's last dim, as
every layer here is channels last) is read from the first input, and the module then
becomes the ordinary layer (its class changes, as PyTorch's ``cls_to_become``), with that
layer's initialization.

Until then it has no parameters, so build the optimizer after a first call (PyTorch's dry
run). The first call must be eager: inside ``compile``, ``vmap`` over the module's creation
or another trace, the parameters would be made of traced values, so it is refused there.
"""

from __future__ import annotations

from ..core.state import STATE
from .layers import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    Linear,
)
from .module import Module
from .normalization import (
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
)

__all__ = [
    "LazyModuleMixin",
    "LazyLinear",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyInstanceNorm1d",
    "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
]


class LazyModuleMixin(Module):
    """A module whose first constructor argument (the input's size) comes from its first
    input; ``cls_to_become`` is the layer it then becomes."""

    cls_to_become: type = Module

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.__dict__["_lazy_args"] = (args, kwargs)

    def has_uninitialized_params(self) -> bool:
        """Whether the parameters still wait for the first input (PyTorch's name)."""
        return True

    def initialize_parameters(self, x) -> None:
        """Make the parameters for inputs like ``x`` (size: its last dim) and become
        ``cls_to_become``.

        Args:
            x: an input (its last dim is the size).

        Raises:
            RuntimeError: inside a trace (``compile`` and the like).
        """
        name = type(self).__name__
        if STATE.recording is not None:
            raise RuntimeError(
                f"{name}: its parameters are made from the first input, which must be an "
                "eager call: call the module once outside compile (PyTorch's dry run) first"
            )
        shape = getattr(x, "shape", None)
        if not shape:
            raise ValueError(f"{name}: the first input needs a last dim (its size), got {x!r}")
        lazy_class, lazy_args = type(self), self.__dict__.pop("_lazy_args")
        target = lazy_class.cls_to_become
        training = self.training  # (hooks registered meanwhile stay in the module's dict)
        self.__class__ = target  # (its __init__ calls super() on an instance of it)
        try:
            target.__init__(self, int(shape[-1]), *lazy_args[0], **lazy_args[1])
        except BaseException:
            self.__class__ = lazy_class
            self.__dict__["_lazy_args"] = lazy_args
            raise
        self.train(training)

    def __call__(self, *args, **kwargs):
        if args:
            self.initialize_parameters(args[0])
        return Module.__call__(self, *args, **kwargs)

    def extra_repr(self) -> str:
        """The configuration shown by ``repr`` (the size still to come)."""
        args, kwargs = self.__dict__["_lazy_args"]
        shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
        return ", ".join(["<uninitialized>", *shown])


def _lazy(target: type, doc: str) -> type:
    cls = type(f"Lazy{target.__name__}", (LazyModuleMixin,), {"cls_to_become": target})
    cls.__doc__ = (
        f"PyTorch's ``Lazy{target.__name__}``: :class:`{target.__name__}` with its "
        f"``{doc}`` read from the first input's last dim. Takes {target.__name__}'s other "
        "arguments, in its order."
    )
    cls.__module__ = __name__
    return cls


LazyLinear = _lazy(Linear, "in_features")
LazyConv1d = _lazy(Conv1d, "in_channels")
LazyConv2d = _lazy(Conv2d, "in_channels")
LazyConv3d = _lazy(Conv3d, "in_channels")
LazyConvTranspose1d = _lazy(ConvTranspose1d, "in_channels")
LazyConvTranspose2d = _lazy(ConvTranspose2d, "in_channels")
LazyConvTranspose3d = _lazy(ConvTranspose3d, "in_channels")
LazyBatchNorm1d = _lazy(BatchNorm1d, "num_features")
LazyBatchNorm2d = _lazy(BatchNorm2d, "num_features")
LazyBatchNorm3d = _lazy(BatchNorm3d, "num_features")
LazyInstanceNorm1d = _lazy(InstanceNorm1d, "num_features")
LazyInstanceNorm2d = _lazy(InstanceNorm2d, "num_features")
LazyInstanceNorm3d = _lazy(InstanceNorm3d, "num_features")
