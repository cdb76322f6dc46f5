"""``nb.scipy.interpolate``: JAX's ``RegularGridInterpolator`` (linear or nearest on a
rectilinear grid of any number of dims), written with the ops, so it differentiates in the
grid's values and the query points, batches and compiles."""

from __future__ import annotations

import itertools

import numpy as np

from ..core.dtypes import DType, promote_types
from ..ops import array_functions, binary, creation, indexing, unary, view
from ..ops._util import as_tensor
from ..ops.base import OpError
from ..runtime.tensor import Tensor

__all__ = ["RegularGridInterpolator"]


class RegularGridInterpolator:
    """SciPy's and JAX's ``RegularGridInterpolator``: ``values`` given on the grid
    ``points`` (one increasing 1-D array per dim), interpolated at query points.

    Args:
        points: a tuple of ``ndim`` increasing 1-D arrays (at least 2 each).
        values: ``(*len(points[i]) ..., *trailing)``: the values at the grid's nodes.
        method: ``"linear"`` (default) or ``"nearest"``.
        bounds_error: False only (JAX's): a point outside the grid gets ``fill_value``.
        fill_value: the value outside the grid (NaN by default); None extrapolates.
    """

    def __init__(self, points, values, method="linear", bounds_error=False, fill_value=np.nan):
        if method not in ("linear", "nearest"):
            raise OpError(
                f"RegularGridInterpolator: method must be 'linear' or 'nearest', got {method!r}"
            )
        if bounds_error:
            raise OpError("RegularGridInterpolator: bounds_error=True is not supported (as JAX's)")
        self.values = as_tensor(values, op="RegularGridInterpolator")
        if not self.values.dtype.is_float:
            self.values = unary.cast(self.values, "float32")
        self.grid = tuple(
            unary.cast(as_tensor(p, op="RegularGridInterpolator"), self.values.dtype)
            for p in points
        )
        for d, g in enumerate(self.grid):
            if g.ndim != 1 or g.shape[0] < 2 or g.shape[0] != self.values.shape[d]:
                raise OpError(
                    f"RegularGridInterpolator: points[{d}] must be 1-D with 2 or more nodes, "
                    f"as many as values' dim {d} ({self.values.shape[d]}); got {tuple(g.shape)}"
                )
        self.method, self.fill_value = method, fill_value

    def __call__(self, xi, method=None) -> Tensor:
        """The interpolated values at ``xi``.

        Args:
            xi: ``(..., ndim)`` query points.
            method: ``"linear"`` or ``"nearest"`` (default: the constructor's).

        Returns:
            ``(..., *trailing)``.
        """
        method = self.method if method is None else method
        if method not in ("linear", "nearest"):
            raise OpError(
                f"RegularGridInterpolator: method must be 'linear' or 'nearest', got {method!r}"
            )
        nd = len(self.grid)
        x = as_tensor(xi, op="RegularGridInterpolator")
        x = unary.cast(
            x, promote_types(x.dtype, self.values.dtype) if x.dtype.is_float else self.values.dtype
        )
        if x.shape[-1] != nd:
            raise OpError(
                f"RegularGridInterpolator: xi must end in the grid's {nd} dims, got "
                f"{tuple(x.shape)}"
            )
        lead = tuple(x.shape[:-1])
        flat = view.reshape(x, (-1, nd))
        cells, fractions, outside = [], [], None
        for d, g in enumerate(self.grid):
            v = flat[:, d]
            n = g.shape[0]
            i = array_functions.searchsorted(g, v, side="right") - 1
            i = binary.clip(unary.cast(i, DType.int32), 0, n - 2)
            lo, hi = indexing.take(g, i, axis=0), indexing.take(g, i + 1, axis=0)
            cells.append(i)
            fractions.append((v - lo) / (hi - lo))
            off = binary.logical_or(v < g[0], v > g[n - 1])
            outside = off if outside is None else binary.logical_or(outside, off)
        strides = [1] * nd
        for d in range(nd - 2, -1, -1):
            strides[d] = strides[d + 1] * self.values.shape[d + 1]
        table = view.reshape(self.values, (-1, *self.values.shape[nd:]))
        trailing = (1,) * (self.values.ndim - nd)
        if method == "nearest":  # (SciPy's: the lower node up to halfway, inclusive)
            index = 0
            for d in range(nd):
                near = binary.where(fractions[d] <= 0.5, cells[d], cells[d] + 1)
                index = index + near * strides[d]
            out = indexing.take(table, index, axis=0)
        else:
            out = None
            for corner in itertools.product((0, 1), repeat=nd):
                index, weight = 0, None
                for d, bit in enumerate(corner):
                    index = index + (cells[d] + bit) * strides[d]
                    w = fractions[d] if bit else 1.0 - fractions[d]
                    weight = w if weight is None else weight * w
                term = indexing.take(table, index, axis=0) * view.reshape(weight, (-1, *trailing))
                out = term if out is None else out + term
        if self.fill_value is not None:
            fill = creation.full_like(out, self.fill_value)
            out = binary.where(view.reshape(outside, (-1, *trailing)), fill, out)
        return view.reshape(out, lead + tuple(self.values.shape[nd:]))
