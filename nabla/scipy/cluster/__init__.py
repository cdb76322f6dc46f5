"""``nb.scipy.cluster``: JAX's ``jax.scipy.cluster`` (``vq``)."""

from . import vq

__all__ = ["vq"]
