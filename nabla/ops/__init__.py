"""Ops (layer 3): the ``Operation`` pipeline (``base``), one module per op family, and
``OPS``, the registry of every op (filled as each op singleton is made).

The package also holds every family's public functions and op classes (``ops.relu``,
``ops.shard``, ``ops.UnaryOperation``, ``ops.call_custom_kernel``, ...): the namespace the
original Nabla's ``from nabla import ops`` gives, the same objects as ``nabla.relu`` etc.
Random draws are named as at the top level (``ops.normal(shape)``, ``ops.uniform(shape)``);
the key-based functions stay in ``ops.random``. ``ops.communication`` holds the
collectives under the original's module name; ``ops.segment_sum`` and its kin are JAX's
``jax.ops`` functions.
"""

from . import (  # noqa: F401 - importing the families registers their ops in OPS
    binary,
    callback,
    collectives,
    communication,
    creation,
    indexing,
    kernels,
    linalg,
    methods,
    nn,
    random,
    reduction,
    transfer,
    unary,
    view,
)
from .array_functions import segment_max, segment_min, segment_prod, segment_sum
from .base import OPS, Operation, OpError
from .random import bernoulli, randint
from .random import normal_ as gaussian
from .random import normal_ as normal
from .random import uniform_ as uniform

_FAMILIES = (
    binary,
    callback,
    collectives,
    creation,
    indexing,
    kernels,
    linalg,
    nn,
    reduction,
    transfer,
)
_FAMILIES += (unary, view)
_PUBLIC = {name: getattr(m, name) for m in _FAMILIES for name in m.__all__}
globals().update(_PUBLIC)

__all__ = ["OPS", "Operation", "OpError", "bernoulli", "randint", "gaussian", "normal"]
__all__ += ["uniform", "communication", *sorted(_PUBLIC)]
# JAX's ``jax.ops`` names
__all__ += ["segment_sum", "segment_prod", "segment_max", "segment_min"]
