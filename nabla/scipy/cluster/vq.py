"""``nb.scipy.cluster.vq``: JAX's vector quantization, ``vq``."""

from __future__ import annotations

from ...ops import binary, reduction, unary, view
from ...ops._util import as_tensor
from ...ops.base import OpError

__all__ = ["vq"]


def vq(obs, code_book, check_finite: bool = True):
    """SciPy's and JAX's ``vq``: each observation's nearest code (Euclidean) and the
    distance to it.

    Args:
        obs: ``(N, D)`` observations (or ``(N,)`` for ``D = 1``).
        code_book: ``(K, D)`` codes (or ``(K,)``).
        check_finite: accepted.

    Returns:
        ``(code, dist)``: int32 indices ``(N,)`` and the distances ``(N,)``.
    """
    x, c = as_tensor(obs, op="vq"), as_tensor(code_book, op="vq")
    if x.ndim == 1:
        x = view.unsqueeze(x, 1)
    if c.ndim == 1:
        c = view.unsqueeze(c, 1)
    if x.ndim != 2 or c.ndim != 2 or x.shape[1] != c.shape[1]:
        raise OpError(
            f"vq: obs (N, D) and code_book (K, D) do not fit: {tuple(x.shape)}, {tuple(c.shape)}"
        )
    diff = view.unsqueeze(x, 1) - view.unsqueeze(c, 0)  # (N, K, D)
    d2 = reduction.sum(diff * diff, -1)
    code = reduction.argmin(d2, -1)
    best = reduction.min(d2, -1)
    return unary.cast(code, "int32"), unary.sqrt(binary.maximum(best, 0.0))
