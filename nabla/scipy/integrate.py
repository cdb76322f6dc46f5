"""``nb.scipy.integrate``: JAX's ``jax.scipy.integrate`` (``trapezoid``, the same function
as ``nb.trapezoid``)."""

from __future__ import annotations

from ..ops.array_functions import trapezoid

__all__ = ["trapezoid"]
