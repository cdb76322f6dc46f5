"""Ops (layer 3): the ``Operation`` pipeline (``base``), one module per op family, and
``OPS``, the registry of every op (filled as each op singleton is made)."""

from . import (  # noqa: F401 - importing the families registers their ops in OPS
    binary,
    creation,
    indexing,
    linalg,
    methods,
    nn,
    random,
    reduction,
    transfer,
    unary,
    view,
)
from .base import OPS, Operation, OpError

__all__ = ["OPS", "Operation", "OpError"]
