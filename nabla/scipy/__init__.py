"""``nb.scipy``: the names of JAX's ``jax.scipy`` (``special``, ``stats``, ``linalg``,
``signal``, ``fft`` (the real DCTs), ``ndimage``, ``integrate``, ``cluster``, ``optimize``,
``interpolate``), so ``jax.scipy.`` ports by renaming. Each is written with nabla's ops: it
differentiates, batches under ``vmap``, shards and compiles as those do, on every backend."""

from . import (
    cluster,
    fft,
    integrate,
    interpolate,
    linalg,
    ndimage,
    optimize,
    signal,
    special,
    stats,
)

__all__ = ["special", "stats", "linalg", "signal", "fft", "ndimage", "integrate", "cluster"]
__all__ += ["optimize", "interpolate"]
