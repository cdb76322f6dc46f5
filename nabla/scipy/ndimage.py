"""``nb.scipy.ndimage``: JAX's ``map_coordinates`` (orders 0 and 1), with JAX's
conventions: order 0 rounds halves away from zero; each interpolation tap outside the
input takes its value by ``mode`` (``"constant"``: ``cval`` for that tap alone)."""

from __future__ import annotations

import itertools

from ..core.dtypes import DType, get_default_dtype
from ..ops import binary, creation, indexing, unary, view
from ..ops._util import as_tensor
from ..ops.base import OpError

__all__ = ["map_coordinates"]

_MODES = ("constant", "nearest", "wrap", "mirror", "reflect", "grid-wrap")


def _index(i, n: int, mode: str):
    """Integer taps ``i`` mapped into ``[0, n)`` by ``mode``, and where they are valid."""
    if mode == "constant":
        return binary.clip(i, 0, n - 1), binary.logical_and(i >= 0, i < n)
    if mode == "nearest":
        return binary.clip(i, 0, n - 1), None
    if mode in ("wrap", "grid-wrap"):
        return binary.mod(i, n), None
    if mode == "mirror":  # ... 2 1 | 0 1 2 ... n-1 | n-2 ...
        if n == 1:
            return creation.zeros_like(i), None
        j = binary.mod(i, 2 * (n - 1))
        return binary.where(j >= n, 2 * (n - 1) - j, j), None
    j = binary.mod(i, 2 * n)  # reflect: ... 1 0 | 0 1 ... n-1 | n-1 ...
    return binary.where(j >= n, 2 * n - 1 - j, j), None


def map_coordinates(input, coordinates, order: int, mode: str = "constant", cval=0.0):  # noqa: A002
    """SciPy's and JAX's ``map_coordinates``: ``input`` sampled at ``coordinates`` (one
    array per input dim, all of the output's shape) by nearest (``order=0``) or linear
    (``order=1``) interpolation; differentiable in ``input`` and, for order 1, in the
    coordinates.

    Args:
        input: the array sampled.
        coordinates: a sequence of ``input.ndim`` arrays of one shape.
        order: 0 or 1.
        mode: ``"constant"``, ``"nearest"``, ``"wrap"`` (``"grid-wrap"``), ``"mirror"`` or
            ``"reflect"``: how taps outside the input are taken.
        cval: the value of taps outside the input in ``"constant"`` mode.

    Returns:
        The samples, in the coordinates' shape.

    Raises:
        ValueError: (:class:`nabla.OpError`) for another order or mode, or coordinates that
            do not fit the input.
    """
    x = as_tensor(input, op="map_coordinates")
    if not x.dtype.is_float:
        x = unary.cast(x, get_default_dtype())
    if order not in (0, 1):
        raise OpError(f"map_coordinates: order must be 0 or 1 (as JAX's), got {order!r}")
    if mode not in _MODES:
        raise OpError(f"map_coordinates: mode must be one of {_MODES}, got {mode!r}")
    coords = [unary.cast(as_tensor(c, op="map_coordinates"), x.dtype) for c in coordinates]
    if len(coords) != x.ndim or len({tuple(c.shape) for c in coords}) > 1:
        raise OpError(
            f"map_coordinates: needs {x.ndim} coordinate arrays of one shape for an input of "
            f"shape {tuple(x.shape)}, got {[tuple(c.shape) for c in coords]}"
        )
    flat = view.reshape(x, (-1,))
    strides = [1] * x.ndim
    for d in range(x.ndim - 2, -1, -1):
        strides[d] = strides[d + 1] * x.shape[d + 1]
    if order == 0:  # halves away from zero, as JAX's
        taps = [[(unary.cast(unary.sign(c) * unary.floor(unary.abs(c) + 0.5), DType.int32), None)]
                for c in coords]  # fmt: skip
    else:
        taps = []
        for c in coords:
            lo = unary.floor(c)
            w = c - lo
            i = unary.cast(lo, DType.int32)
            taps.append([(i, 1.0 - w), (i + 1, w)])
    out = None
    for corner in itertools.product(*taps):
        flat_index, weight, valid = 0, None, None
        for d, (i, w) in enumerate(corner):
            j, ok = _index(i, x.shape[d], mode)
            flat_index = flat_index + j * strides[d]
            weight = w if weight is None else (weight if w is None else weight * w)
            if ok is not None:
                valid = ok if valid is None else binary.logical_and(valid, ok)
        value = indexing.take(flat, flat_index, axis=0)
        if valid is not None:
            value = binary.where(valid, value, creation.full_like(value, cval))
        term = value if weight is None else value * weight
        out = term if out is None else out + term
    return out
