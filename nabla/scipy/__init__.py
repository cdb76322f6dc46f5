"""``nb.scipy``: the names of JAX's ``jax.scipy`` (``special``, ``stats``, ``linalg``), so
``jax.scipy.`` ports by renaming. Each is written with nabla's ops: it differentiates,
batches under ``vmap``, shards and compiles as those do, on every backend."""

from . import linalg, special, stats

__all__ = ["special", "stats", "linalg"]
