"""Matrix products: ``matmul`` (primitive), ``outer`` and ``einsum`` (composites); vector and
matrix ``norm``; and LAPACK's ``inv``, ``solve``, ``slogdet``, ``cholesky``, ``eigh``,
``svd``, ``qr`` and ``pinv`` (primitives run through NumPy on every backend; ``det`` from
``slogdet``)."""

from __future__ import annotations

import math
import numbers
import string
from typing import NamedTuple

import numpy as np

from ..core.dtypes import DType, get_default_dtype, promote_types, to_dtype
from ..core.ir import same_shape
from ..core.state import STATE
from ..runtime.tensor import Tensor
from . import batching, spmd
from ._util import as_tensor, norm_axis
from .base import Operation, OpError, describe
from .functions import fn, provide

__all__ = [
    "matmul",
    "bmm",
    "outer",
    "einsum",
    "dot",
    "tensordot",
    "norm",
    "inv",
    "solve",
    "slogdet",
    "det",
    "cholesky",
    "eigh",
    "eigvalsh",
    "svd",
    "qr",
    "pinv",
]


class MatmulOp(Operation):
    """``(..., m, k) @ (..., k, n)`` with identical leading dims (broadcast at the call), or
    ``(..., m, k) @ (k, n)``: a 2-D right operand without vmap levels is broadcast by every
    backend's kernel.

    Under vmap an unbatched 2-D right operand (a weight) is not broadcast over the batch
    levels: every backend's matmul broadcasts it. With such a weight the left operand may
    also be 1-D (NumPy's vector-matrix product), so ``vmap(lambda v: v @ w)`` is one GEMM,
    exactly what the hand-batched product costs.
    """

    name = "matmul"
    arity = 2
    bilinear = True

    def rebind(self, args, kwargs):
        return _mm(*args)

    def implicit_broadcast(self, index, impl):
        return index == 1 and not impl.levels and len(impl.shape) == 2

    def rules_take_unbatched(self, index, impl):
        # an unbatched weight on either side: the call itself keeps a left one unbatched
        # (``_mm``), and the rules go through ``_mm`` and fold its cotangent into one GEMM
        return not impl.levels and len(impl.shape) == 2

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        a, b = in_shapes
        batch = [(f"b{i}",) for i in range(len(a) - 2)]
        a_dims = batch + [("m",), ("k",)] if len(a) >= 2 else [("k",)]
        b_batch = []
        for i in range(len(b) - 2):  # b's batch dims, right-aligned with a's
            j = len(batch) - (len(b) - 2) + i
            same = j >= 0 and b[i] == a[j]
            b_batch.append(batch[j] if same else (f"bb{i}",))
        out = batch + ([("m",)] if len(a) >= 2 else []) + [("n",)]
        return spmd.FactorRule.parse_dims(
            [a_dims, b_batch + [("k",), ("n",)]], [out], in_shapes, out_shapes, {"k": "sum"}
        )

    def infer(self, shapes, dtypes, kwargs):
        a, b = shapes
        if len(b) >= 2 and a[-1] != b[-2]:  # (the call checked it; a compiled plan's new
            # sizes are checked here, as every op's are re-inferred)
            raise OpError(
                f"matmul: contracted dims differ: shapes {a} and {b} ({a[-1]} != {b[-2]})"
            )
        if len(a) == 1:
            return [(b[-1],)], [dtypes[0]]
        return [a[:-1] + (b[-1],)], [dtypes[0]]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x, y = primals
        ct = cotangents[0]
        return [_left_weight_cotangent(x, ct, y), _weight_cotangent(x, ct, y)]


def _plain_2d(a, b) -> bool:
    return a.ndim == b.ndim == 2 and not (a._impl.levels or b._impl.levels)


def _t_mm(a, b):
    """``a^T @ b``. For plain 2-D operands where ``b`` and the result together are smaller
    than ``a``, computed as ``(b^T @ a)^T``: the large operand (the weight of a
    matrix-vector product: HVPs, batch-1 layers) is never transposed. The NumPy interpreter
    transposes as a view, but MAX copies (a 1000x1000 weight: 4 MB per call)."""
    if (
        _plain_2d(a, b)
        and b.shape[0] * b.shape[1] + a.shape[1] * b.shape[1] < a.shape[0] * a.shape[1]
    ):
        return fn.swap_axes(_mm(fn.swap_axes(b, -1, -2), a), -1, -2)
    return _mm(fn.swap_axes(a, -1, -2), b)


def _mm_t(a, b):
    """``a @ b^T``; as ``(b @ a^T)^T`` when ``a`` and the result are smaller than ``b``
    (see ``_t_mm``)."""
    if (
        _plain_2d(a, b)
        and a.shape[0] * a.shape[1] + a.shape[0] * b.shape[0] < b.shape[0] * b.shape[1]
    ):
        return fn.swap_axes(_mm(b, fn.swap_axes(a, -1, -2)), -1, -2)
    return _mm(a, fn.swap_axes(b, -1, -2))


def _mm(a, b):
    """The matmul primitive, promoting a 1-D left operand unless the kernel takes it.

    An unbatched operand never meets vmap's batch as copies (spelled out in the branches):
    an unbatched 2-D left operand (a weight) times an operand batched by vmap is computed as
    ``(b^T @ a^T)^T``: the weight stays unbatched on the right, where every kernel
    broadcasts it, instead of being copied once per batch element (for a batched vector or
    column that is one GEMM with the batch as its rows: jacrev/jacfwd of ``W @ x``). An
    unbatched operand with leading dims of its own (einsum's batch indices, a grouped conv's
    weight) gets the other side's vmap batch folded into that side's rows."""
    if a._impl.sharding is not None or b._impl.sharding is not None:
        return _mm_sharded(a, b)
    if a.ndim > 2 and b.ndim == 2:
        # a stack times a matrix: the stack's leading dims are GEMM rows (one GEMM, and a
        # matrix batched by vmap, say per-example weights, is never copied across them)
        lead = a.shape[:-1]
        out = _mm(fn.reshape(a, (math.prod(lead), a.shape[-1])), b)
        return fn.reshape(out, lead + (b.shape[-1],))
    al, bl = a._impl.levels, b._impl.levels
    if (
        al != bl
        and min(a.ndim, b.ndim) >= 2
        and max(a.ndim, b.ndim) > 2
        and a.shape[:-2] == b.shape[:-2]
    ):
        if not bl and _batch_sum_ok(a, b):
            return _levels_into_rows(a, b)
        if not al and _batch_sum_ok(b, a):  # (b^T a^T)^T
            t = _levels_into_rows(fn.swap_axes(b, -1, -2), fn.swap_axes(a, -1, -2))
            return fn.swap_axes(t, -1, -2)
    if a.ndim == 2 and not al and bl and b.ndim <= 2:
        return _weight_times_batched(a, b)
    if a.ndim == 1 and (bl or b.ndim != 2):
        return _vector_times(a, b)
    return _matmul.bind([a, b], {})


def _weight_times_batched(w, b):
    """``w @ b`` for an unbatched 2-D ``w`` and a vector or matrix ``b`` batched by vmap, as
    ``(b^T @ w^T)^T``: the weight stays on the right, where the kernel broadcasts it."""
    wt = fn.swap_axes(w, -1, -2)
    if b.ndim == 1:
        return _matmul.bind([b, wt], {})
    if b.shape[-1] == 1:
        out = _matmul.bind([fn.reshape(b, b.shape[:-1]), wt], {})
        return fn.reshape(out, out.shape + (1,))
    return fn.swap_axes(_matmul.bind([fn.swap_axes(b, -1, -2), wt], {}), -1, -2)


def _vector_times(v, b):
    """``v @ b`` for a vector ``v`` the kernel does not take as it is: promoted to a row,
    and the row dim dropped again."""
    out = _matmul.bind([fn.reshape(v, (1,) + v.shape), b], {})
    return fn.reshape(out, out.shape[:-2] + out.shape[-1:])


def _mm_sharded(a, b):
    """``_mm`` on sharded operands. A block's buffer has mesh dims in front, so no kernel may
    broadcast one operand's leading dims: a 2-D unbatched operand (a weight) meets the other
    operand's vmap levels and leading dims folded into GEMM rows (never a copy of the weight
    per batch element); other leading dims are broadcast explicitly."""
    al, bl = a._impl.levels, b._impl.levels
    if al and not bl and not _batch_sum_ok(a, b):  # per-example gradients of b: its own copy
        b = batching.broadcast_levels(b, al)
    elif bl and not al and not _batch_sum_ok(b, a):
        a = batching.broadcast_levels(a, bl)
    if b.ndim == 2 and not b._impl.levels and (a._impl.levels or a.ndim != 2):
        return _rows_times(a, b)
    if a.ndim == 2 and not a._impl.levels and (b._impl.levels or b.ndim != 2):
        if b.ndim == 1:  # a @ v = v @ a^T
            return _rows_times(b, fn.swap_axes(a, -1, -2))
        bt = fn.swap_axes(b, -1, -2)
        return fn.swap_axes(_rows_times(bt, fn.swap_axes(a, -1, -2)), -1, -2)
    if b.ndim >= 2 and a.ndim > b.ndim:
        b = fn.broadcast_to(b, a.shape[:-2] + b.shape[-2:])
    if a.ndim == 1:
        return _vector_times(a, b)
    return _matmul.bind([a, b], {})


def _batch_sum_ok(batched, w) -> bool:
    """May ``batched``'s vmap levels be folded into GEMM rows against the unbatched ``w``?
    Its cotangent then sums over that batch: right for a differentiation that began
    before those vmaps (the gradient of a vmapped loss), wrong for one inside them
    (``vmap(grad)``: per-example gradients, which had each come back as the batch's sum)."""
    return not batching.differentiated_inside(w._impl, min(batched._impl.levels))


def _levels_into_rows(a, w):
    """``a @ w`` for an operand ``w`` with leading (batch) dims and no vmap levels, where
    ``a`` has vmap levels and the same leading dims: the levels join ``a``'s rows (one
    batched GEMM over the leading dims), so ``w`` is never copied once per batch element."""
    levels = a._impl.levels
    p = a.ndim - 2  # where the levels go: after the leading dims, before the rows
    x = a
    for k, level in enumerate(levels):
        x = batching.from_batch(x, level, p + k)
    sizes = x.shape[p : p + len(levels)]
    rows = fn.reshape(x, a.shape[:-2] + (math.prod(sizes) * a.shape[-2], a.shape[-1]))
    out = _matmul.bind([rows, w], {})
    out = fn.reshape(out, a.shape[:-2] + sizes + (a.shape[-2], w.shape[-1]))
    for level in levels:
        out = batching.to_batch(out, p, level)
    return out


def _rows_times(a, w):
    """``a @ w`` for a 2-D unbatched ``w``: ``a``'s vmap levels and leading dims become the
    rows of one GEMM, then go back."""
    levels = a._impl.levels
    x = a
    for k, level in enumerate(levels):
        x = batching.from_batch(x, level, k)
    lead = x.shape[:-1]
    rows = fn.reshape(x, (math.prod(lead), x.shape[-1]))
    out = fn.reshape(_matmul.bind([rows, w], {}), lead + (w.shape[-1],))
    for level in levels:
        out = batching.to_batch(out, 0, level)
    return out


def _left_weight_cotangent(x, ct, y):
    """d/dx of ``x @ y`` (``ct @ y^T``). When ``x`` (a weight on the left: ``W @ h^T``) was
    broadcast over vmap levels that have finished, fold those batch dims into the
    contraction, as ``_weight_cotangent`` does on the right: ``sum_b ct_b @ y_b^T`` is one
    GEMM over every element's columns, not a batched product and a sum."""
    lv = y._impl.levels
    if (
        lv
        and not x._impl.levels
        and ct._impl.levels == lv
        and x.ndim == y.ndim == ct.ndim == 2
        and not any(level in STATE.active_vmap for level in lv)
    ):
        yl, cl = y, ct
        for i, level in enumerate(lv):
            yl = batching.from_batch(yl, level, i)
            cl = batching.from_batch(cl, level, i)
        yl = fn.reshape(fn.swap_axes(yl, -1, -2), (-1, x.shape[1]))
        cl = fn.reshape(fn.swap_axes(cl, -1, -2), (-1, x.shape[0]))
        return _matmul.bind([fn.swap_axes(cl, -1, -2), yl], {})
    dx = _mm_t(ct, y)
    if dx._impl.levels != x._impl.levels:
        dx = batching.sum_finished_levels(dx, x)
    return dx


def _weight_cotangent(x, ct, y):
    """d/dy of ``x @ y``. When ``y`` was broadcast over vmap levels that have finished, fold
    those batch dims into the contraction: one GEMM instead of a batched product + sum."""

    lv = x._impl.levels
    if (
        lv
        and not y._impl.levels
        and ct._impl.levels == lv
        and not any(level in STATE.active_vmap for level in lv)
    ):
        xl, cl = x, ct
        for i, level in enumerate(lv):
            xl = batching.from_batch(xl, level, i)
            cl = batching.from_batch(cl, level, i)
        xl = fn.reshape(xl, (-1, y.shape[0]))
        cl = fn.reshape(cl, (-1, y.shape[1]))
        return _matmul.bind([fn.swap_axes(xl, -1, -2), cl], {})
    if x.ndim == 1:
        dy = _mm(fn.reshape(x, x.shape + (1,)), fn.reshape(ct, (1,) + ct.shape))
    elif y.ndim == 2 and x.ndim > 2:
        # a matrix the kernel broadcast over x's leading dims: fold them into one GEMM
        x2 = fn.reshape(x, (-1, x.shape[-1]))
        dy = _mm(fn.swap_axes(x2, -1, -2), fn.reshape(ct, (-1, ct.shape[-1])))
    else:
        dy = _t_mm(x, ct)
    if dy._impl.levels != y._impl.levels:
        dy = batching.sum_finished_levels(dy, y)
    return dy


_matmul = MatmulOp()


def matmul(x, y):
    """Matrix product with NumPy semantics: 1-D operands are promoted (and the added dim
    removed), leading batch dims broadcast. Of bool operands, a bool product: True where
    some term is True, as JAX's.

    Raises:
        ValueError: when the contracted dims differ, naming both shapes.
    """

    x, y = _matmul_operands(x, y)
    if x.dtype.is_bool:  # JAX's: True where some k has x[i, k] and y[k, j]
        counts = matmul(fn.cast(x, "int32"), fn.cast(y, "int32"))
        return fn.not_equal(counts, 0)
    whole = x._impl.sharding is None and y._impl.sharding is None
    if x.ndim == 1 and y.ndim == 2 and not y._impl.levels and whole:
        _check_contracted(x, y)
        return _matmul.bind([x, y], {})  # vector @ matrix: the kernel takes it directly
    _check_contracted(x, y)
    squeeze_x = x.ndim == 1
    squeeze_y = y.ndim == 1
    if squeeze_x:
        x = fn.reshape(x, (1, x.shape[0]))
    if squeeze_y:
        y = fn.reshape(y, (y.shape[0], 1))
    try:
        batch = fn.broadcast_shapes("matmul", x.shape[:-2], y.shape[:-2])
    except OpError:
        raise OpError(
            f"matmul: batch dims of shapes {x.shape} and {y.shape} cannot be broadcast together"
        ) from None
    if x.shape[:-2] != batch:
        x = fn.broadcast_to(x, batch + x.shape[-2:])
    # a 2-D right operand is never broadcast: ``_mm`` folds x's leading dims into its rows
    # (sharded operands, whose blocks cannot be reshaped so, line up batch prefixes)
    if y.shape[:-2] != batch and (y.ndim > 2 or (y._impl.levels and not whole)):
        y = fn.broadcast_to(y, batch + y.shape[-2:])
    out = _mm(x, y)
    if not (squeeze_x or squeeze_y):
        return out
    # the dims added to 1-D operands go again
    rows = () if squeeze_x else (out.shape[-2],)
    cols = () if squeeze_y else (out.shape[-1],)
    return fn.reshape(out, batch + rows + cols)


def _matmul_operands(x, y):
    """``matmul``'s operands as tensors of one dtype (promoted only when they differ),
    validated."""
    if _differ(x, y):
        (x, y), _ = fn.promote_operands("matmul", [x, y], broadcast=False)
    else:
        x, y = as_tensor(x, op="matmul"), as_tensor(y, op="matmul")
    if x.ndim == 0 or y.ndim == 0:
        raise OpError(f"matmul: operands must be at least 1-D, got shapes {x.shape} and {y.shape}")
    return x, y


def _check_contracted(x, y):
    """The contracted dims agree (a 1-D ``y`` contracts its only dim), checked on the
    shapes the user passed."""
    k = y.shape[0] if y.ndim == 1 else y.shape[-2]
    if x.shape[-1] != k:
        raise OpError(
            f"matmul: contracted dims differ: shapes {x.shape} and {y.shape} ({x.shape[-1]} != {k})"
        )


def _differ(x, y):
    return not (isinstance(x, Tensor) and isinstance(y, Tensor) and x.dtype is y.dtype)


def dot(x, y):
    """NumPy's and JAX's ``dot``: for vectors and matrices the vector dot product,
    matrix-vector and matrix products (``x @ y``); a 0-d operand multiplies; for higher ranks
    the sum over ``x``'s last dim and ``y``'s second-to-last, every other dim of both kept
    (``out[i, j, k, m] = sum(x[i, j, :] * y[k, :, m])``), where ``matmul`` would broadcast
    their batch dims instead.

    Args:
        x: a tensor, or a nested list or NumPy array.
        y: a tensor whose contracted dim (its last for a vector, else its second-to-last)
            matches ``x``'s last dim.

    Returns:
        The product: shape ``x.shape[:-1] + y.shape[:-2] + y.shape[-1:]``; a 0-d tensor for
        two vectors.

    Raises:
        ValueError: (:class:`nabla.OpError`) when the contracted dims differ, naming both
            shapes.
        TypeError: for bool operands.
    """
    x, y = as_tensor(x, op="dot"), as_tensor(y, op="dot")
    if x.ndim == 0 or y.ndim == 0:
        return x * y
    k = y.shape[-2] if y.ndim >= 2 else y.shape[-1]
    if x.shape[-1] != k:
        raise OpError(
            f"dot: the last dim of x (shape {x.shape}) must match "
            f"{'the second-to-last' if y.ndim >= 2 else 'the only'} dim of y (shape {y.shape})"
        )
    if y.ndim <= 2 or x.ndim == 1:  # (matmul's broadcasting agrees with dot's here)
        return matmul(x, y)
    flat = fn.reshape(fn.moveaxis(y, -2, 0), (k, -1))  # (k, y's other dims)
    out = matmul(x, flat)
    return fn.reshape(out, x.shape[:-1] + y.shape[:-2] + y.shape[-1:])


def tensordot(x, y, axes=2):
    """The sum of products over the given dims of ``x`` and ``y`` (NumPy's and JAX's
    ``tensordot``): ``axes`` an int ``n`` (``x``'s last ``n`` dims against ``y``'s first
    ``n``) or a pair of sequences of dims; the result has ``x``'s remaining dims, then
    ``y``'s.

    Args:
        x: a tensor, or a nested list or NumPy array.
        y: a tensor.
        axes: an int, or ``(x_dims, y_dims)`` of equal length (default 2).

    Returns:
        A tensor of shape ``x``'s free dims + ``y``'s free dims.

    Raises:
        ValueError: (:class:`nabla.OpError`) when the contracted dims' sizes differ, a dim
            is repeated, or an int ``axes`` is negative or more than a rank.
        IndexError: for a dim out of range.
    """
    x, y = as_tensor(x, op="tensordot"), as_tensor(y, op="tensordot")
    if isinstance(axes, numbers.Integral):
        if not 0 <= axes <= min(x.ndim, y.ndim):
            raise OpError(
                f"tensordot: axes={axes} needs that many dims in x (shape {x.shape}) and y "
                f"(shape {y.shape}), and is not negative"
            )
        xa, ya = list(range(x.ndim - axes, x.ndim)), list(range(axes))
    else:
        xa, ya = ([a] if isinstance(a, numbers.Integral) else list(a) for a in axes)
    xa = [norm_axis("tensordot", a, x.ndim, x.shape) for a in xa]
    ya = [norm_axis("tensordot", a, y.ndim, y.shape) for a in ya]
    for dims, v, name in ((xa, x, "x"), (ya, y, "y")):
        if len(set(dims)) != len(dims):
            raise OpError(f"tensordot: repeated dim in {dims} of {name} (shape {v.shape})")
    if len(xa) != len(ya) or any(x.shape[i] != y.shape[j] for i, j in zip(xa, ya)):
        raise OpError(
            f"tensordot: dims {xa} of x (shape {x.shape}) and {ya} of y (shape {y.shape}) "
            "must have the same sizes"
        )
    xf = [d for d in range(x.ndim) if d not in xa]
    yf = [d for d in range(y.ndim) if d not in ya]
    k = math.prod(x.shape[i] for i in xa)
    # the free sizes spelled out: a -1 cannot be inferred beside a contraction of size 0
    a = fn.reshape(fn.permute(x, xf + xa), (math.prod(x.shape[d] for d in xf), k))
    b = fn.reshape(fn.permute(y, ya + yf), (k, math.prod(y.shape[d] for d in yf)))
    out = matmul(a, b)
    return fn.reshape(out, tuple(x.shape[d] for d in xf) + tuple(y.shape[d] for d in yf))


def bmm(x, y):
    """PyTorch's ``bmm``: a batch of matrix products, ``(b, n, m) @ (b, m, p) -> (b, n, p)``,
    with no broadcasting (as PyTorch's: ``matmul`` broadcasts).

    Args:
        x: ``(b, n, m)``.
        y: ``(b, m, p)``, the same batch size ``b``.

    Returns:
        ``(b, n, p)``.

    Raises:
        ValueError: unless both are 3-D with one batch size and matching inner dims,
            naming the shapes.
    """
    x, y = as_tensor(x, op="bmm"), as_tensor(y, op="bmm")
    if x.ndim != 3 or y.ndim != 3 or x.shape[0] != y.shape[0] or x.shape[2] != y.shape[1]:
        raise OpError(
            f"bmm: expects (b, n, m) and (b, m, p) with one batch size b, got shapes "
            f"{x.shape} and {y.shape}"
        )
    return matmul(x, y)


def outer(x, y):
    """Outer product of two vectors (NumPy's ``outer``): ``out[i, j] = x[i] * y[j]``.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array; flattened first, like
            NumPy.
        y: the same forms, also flattened; the dtypes are promoted as in :func:`nabla.mul`.

    Returns:
        A tensor of shape ``(x.size, y.size)``.

    Example:
        >>> nb.outer(nb.constant([1, 2]), nb.constant([1, 10])).tolist()
        [[1, 10], [2, 20]]
    """

    x = as_tensor(x, op="outer")
    y = as_tensor(y, op="outer")
    return fn.reshape(x, (-1, 1)) * fn.reshape(y, (1, -1))


# ----------------------------------------------------------------------------- einsum
# "..." dims are spelled out with letters the equation does not use ("...A" must not
# become "AA", a diagonal): these first, then any other letters
_ELLIPSIS_LETTERS = string.ascii_uppercase + string.ascii_lowercase


def _parse(equation, operands):
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise OpError(f"einsum: equation {equation!r} has more than one '->'")
    bad = [c for c in eq.replace("...", "").replace("->", "") if c != "," and not c.isalpha()]
    if bad or not eq.isascii():
        got = bad[0] if bad else next(c for c in eq if not c.isascii())
        raise OpError(f"einsum: invalid index {got!r} in {equation!r}; indices must be letters")
    if "->" in eq:
        lhs, out = eq.split("->")
        explicit = True
    else:
        lhs, out, explicit = eq, "", False
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise OpError(
            f"einsum: equation {equation!r} has {len(terms)} operands, got {len(operands)} "
            f"(shapes {describe([o.shape for o in operands])})"
        )
    ell_rank = 0
    for t, x in zip(terms, operands):
        if "..." in t:
            ell_rank = max(ell_rank, x.ndim - (len(t) - 3))
    unused = [c for c in _ELLIPSIS_LETTERS if c not in eq]
    unused += [chr(c) for c in range(0x3B1, 0x3CA) if chr(c) not in eq]  # (Greek: 52 used)
    ell = "".join(unused[:ell_rank])
    new_terms = []
    for t, x in zip(terms, operands):
        if "..." in t:
            k = x.ndim - (len(t) - 3)
            if k < 0:
                raise OpError(f"einsum: term {t!r} does not fit operand of shape {x.shape}")
            t = t.replace("...", ell[ell_rank - k :])
        if len(t) != x.ndim:
            raise OpError(f"einsum: term {t!r} does not match operand of shape {x.shape}")
        new_terms.append(t)
    if explicit:
        out = out.replace("...", ell)
    else:
        counts = {}
        for t in new_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return new_terms, out, ell


def _diagonal(x, term):
    """Collapse repeated letters within one operand (e.g. 'ii' -> 'i')."""

    while True:
        dup = next((c for c in term if term.count(c) > 1), None)
        if dup is None:
            return x, term
        i = term.index(dup)
        j = term.index(dup, i + 1)
        n = x.shape[i]
        if x.shape[j] != n:
            raise OpError(f"einsum: repeated index {dup!r} has sizes {x.shape[i]} and {x.shape[j]}")
        x = fn.moveaxis(x, (i, j), (-2, -1))
        rest = x.shape[:-2]
        x = fn.reshape(x, rest + (n * n,))
        x = fn.slice_tensor(x, slices=[slice(None)] * len(rest) + [slice(0, None, n + 1)])
        term = "".join(c for k, c in enumerate(term) if k not in (i, j)) + dup


def einsum(
    equation: str,
    *operands,
    out=None,
    optimize="auto",
    precision=None,
    preferred_element_type=None,
):
    """Einstein summation, e.g. ``einsum("bij,bjk->bik", a, b)`` (NumPy's ``einsum``).

    Supports ``...`` for broadcast dims, repeated indices within one operand (diagonals) and
    the implicit form without ``->`` (the output takes the indices that appear once, sorted).
    Size-1 dims broadcast. Contractions run pairwise through ``matmul``, so they are as fast
    as batched matmuls. Operands of different dtypes are promoted.

    Args:
        equation: the subscripts, one comma-separated term per operand, optionally followed by
            ``->`` and the output term; spaces are ignored.
        *operands: the tensors (or one list/tuple of them).
        out: NumPy's, accepted as None only (tensors are values).
        optimize: NumPy's and JAX's contraction-order setting, accepted (contractions run
            pairwise in the order written).
        precision: JAX's, accepted (float32 products are float32 here).
        preferred_element_type: the dtype the operands are cast to and the result has
            (JAX's; e.g. an int8 contraction accumulated as int32); an integer type for
            float operands casts the float result instead.

    Returns:
        The result tensor, with the output term's dims in order.

    Raises:
        ValueError: (:class:`nabla.OpError`) when the number of terms and operands differ, a
            term does not match its operand's rank, an index has inconsistent sizes, or an
            output index appears in no input.

    Example:
        >>> nb.einsum("ij,jk->ik", nb.ones((2, 3)), nb.ones((3, 4))).shape
        (2, 4)
    """

    if not isinstance(equation, str):
        raise TypeError(
            f"einsum: the equation must be a string such as 'ij,jk->ik', got {equation!r} "
            f"({type(equation).__name__})"
        )
    if out is not None:
        raise TypeError("einsum: out= is not supported (tensors are values); use the result")
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    ops = [as_tensor(o, op="einsum") for o in operands]
    result_dtype = None
    if preferred_element_type is not None:  # computed in it, unless it would round floats
        want = to_dtype(preferred_element_type, "einsum")
        if not want.is_float and any(o.dtype.is_float for o in ops):
            result_dtype = want  # (JAX's: float products summed, the result cast)
        else:
            ops = [fn.cast(o, want) for o in ops]
    if len({o.dtype for o in ops}) > 1:
        ops, _ = fn.promote_operands("einsum", ops, broadcast=False)
        ops = list(ops)
    if result_dtype is not None:
        return fn.cast(einsum(equation, *ops), result_dtype)
    spec = _spec(equation, ops)
    # broadcast size-1 dims (only ellipsis dims can legitimately differ)
    ops = [_broadcast_term(x, t, spec.sizes) for x, t in zip(ops, spec.terms)]
    pairs = [_diagonal(x, t) for x, t in zip(ops, spec.terms)]
    for c in spec.out:
        if not any(c in t for _, t in pairs):
            raise OpError(
                f"einsum: output index {c!r} does not appear in the inputs of {equation!r}"
            )
        if spec.out.count(c) > 1:
            raise OpError(
                f"einsum: output index {c!r} appears more than once in {equation!r} (an "
                "output index names one dim)"
            )
    x, t = pairs[0]
    for k in range(1, len(pairs)):
        later = set(spec.out).union(*[set(u) for _, u in pairs[k + 1 :]])
        x, t = _contract((x, t), pairs[k], later, spec.sizes)
    x, t = _sum_unneeded(x, t, set(spec.out))
    if t != spec.out:
        x = fn.permute(x, [t.index(c) for c in spec.out])
    return x


class _Spec(NamedTuple):
    """An einsum equation fitted to its operands: one index term per operand (``...``
    spelled out), the output term and each index's size (the largest: size-1 dims
    broadcast)."""

    terms: list
    out: str
    sizes: dict


def _spec(equation, ops) -> _Spec:
    terms, out, ell = _parse(equation, ops)
    sizes = {}

    def inconsistent(c):
        what = "the dims of '...' have" if c in ell else f"index {c!r} has"
        return OpError(
            f"einsum: {what} inconsistent sizes in {equation!r} for shapes "
            f"{describe([o.shape for o in ops])}"
        )

    for t, x in zip(terms, ops):
        own = {}
        for c, d in zip(t, x.shape):
            if own.setdefault(c, d) != d:  # a diagonal's dims are equal: no broadcasting
                raise inconsistent(c)
            if c in sizes and sizes[c] != d and d != 1 and sizes[c] != 1:
                raise inconsistent(c)
            sizes[c] = max(sizes.get(c, d), d)
    return _Spec(terms, out, sizes)


def _broadcast_term(x, term, sizes):
    want = tuple(sizes[c] for c in term)
    return x if same_shape(want, x.shape) else fn.broadcast_to(x, want)


def _sum_unneeded(x, term, keep):
    """``x`` summed over the indices of ``term`` not in ``keep``, and its new term."""
    drop = tuple(i for i, c in enumerate(term) if c not in keep)
    if drop:
        summed = fn.reduce_sum(x, drop)
        # in the operands' dtype, as einsum's products are (sum widens bool and small
        # ints: 'ij->i' of bools gave counts, JAX's gives bools)
        x = summed if summed.dtype is x.dtype else fn.cast(summed, x.dtype)
        term = "".join(c for c in term if c in keep)
    return x, term


def _contract(a, b, later, sizes):
    """The product of two ``(tensor, term)`` operands as one ``matmul``, summing the
    indices that neither the other operand nor ``later`` (the operands still to come and the
    output) has first; returns ``(tensor, term)``: the batch, ``a``'s, then ``b``'s free
    indices."""
    x, t = _sum_unneeded(*a, later | set(b[1]))
    y, u = _sum_unneeded(*b, later | set(t))
    batch = [c for c in t if c in u and c in later]
    contract = [c for c in t if c in u and c not in later]
    fa = [c for c in t if c not in u]
    fb = [c for c in u if c not in t]
    xa = fn.permute(x, [t.index(c) for c in batch + fa + contract])
    yb = fn.permute(y, [u.index(c) for c in batch + contract + fb])
    nb_, na, nk, nbb = (math.prod(sizes[c] for c in cs) for cs in (batch, fa, contract, fb))
    if batch:
        r = matmul(fn.reshape(xa, (nb_, na, nk)), fn.reshape(yb, (nb_, nk, nbb)))
    else:  # a plain 2-D product, so an unbatched operand under vmap stays unbatched
        r = matmul(fn.reshape(xa, (na, nk)), fn.reshape(yb, (nk, nbb)))
    return fn.reshape(r, tuple(sizes[c] for c in batch + fa + fb)), "".join(batch + fa + fb)


def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002 - NumPy's and JAX's name
    """A vector or matrix norm (NumPy's and JAX's ``linalg.norm``; ``nb.linalg.norm``).

    With ``axis`` None: ``ord`` None is the Euclidean norm of all the elements (any rank);
    another ``ord`` takes a 1-D ``x`` as a vector and a 2-D one as a matrix. An int
    ``axis`` takes vectors along it; a pair, matrices over those two dims.

    Args:
        x: a tensor, or a Python scalar, nested list or NumPy array (integers as floats).
        ord: for vectors None or 2 (Euclidean), ``inf``/``-inf`` (largest/smallest
            magnitude), 0 (count of nonzeros), 1 or any other number ``p``
            (``sum(|x|**p)**(1/p)``); for matrices None or ``"fro"``, 1/-1 (largest/smallest
            column sum of magnitudes), ``inf``/``-inf`` (row sums), 2/-2 (largest/smallest
            singular value) and ``"nuc"`` (their sum).
        axis: None, an int, or a pair of ints.
        keepdims: keep the reduced dims as size 1.

    Returns:
        A float tensor. Gradients follow PyTorch where the norm has a kink: the
        gradient of a root (Euclidean, ``p``) at a zero total is zero, and a zero
        element's is zero for ``ord`` 1 and ``0 < p < 1`` (JAX's ``abs`` gives 1 there).

    Raises:
        ValueError: (:class:`nabla.OpError`) for an ``ord`` this rank does not take.
    """
    x = as_tensor(x, op="linalg.norm")
    if not x.dtype.is_float:
        x = fn.cast(x, get_default_dtype())
    if x.dtype in (DType.float16, DType.bfloat16):
        # summed in float32, as PyTorch's: float16 [300, 400]'s squares overflow, its norm
        # (500) does not
        return fn.cast(norm(fn.cast(x, DType.float32), ord, axis, keepdims), x.dtype)
    if axis is None:
        if ord is None:
            return _euclid(x, tuple(range(x.ndim)), keepdims)
        if x.ndim not in (1, 2):
            raise OpError(
                f"linalg.norm: ord={ord!r} needs a 1-D or 2-D x or an axis, got shape {x.shape}"
            )
        axis = tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    axes = tuple(norm_axis("linalg.norm", a, x.ndim, x.shape) for a in axes)
    if len(axes) == 1:
        return vector_norm(x, ord, axes, keepdims)
    if len(axes) != 2 or axes[0] == axes[1]:
        raise OpError(f"linalg.norm: axis must be an int or a pair of dims, got {axis!r}")
    if ord is None or ord == "fro":
        return _euclid(x, axes, keepdims)
    row, col = axes
    a = fn.abs(x)
    if ord in (1, -1):
        sums, over = fn.sum(a, row, True), col
    elif ord in (math.inf, -math.inf):
        sums, over = fn.sum(a, col, True), row
    elif ord in (2, -2, "nuc"):  # from the singular values
        rest = [d for d in range(x.ndim) if d not in axes]
        s = _svd.bind([fn.permute(x, (*rest, row, col))], {"full_matrices": False})[1]
        out = {2: fn.max, -2: fn.min, "nuc": fn.sum}[ord](s, -1)
        for d in sorted(axes) if keepdims else ():
            out = fn.unsqueeze(out, d)
        return out
    else:
        raise OpError(
            f"linalg.norm: matrix ord={ord!r} is not one of None/'fro', 'nuc', 1, -1, 2, -2, "
            "inf or -inf"
        )
    pick = fn.max if ord in (1, math.inf) else fn.min
    if x.shape[over] == 0:  # no column (row) sums: the largest is 0, the smallest none
        _no_smallest(x, ord, pick is fn.min)
        pick = fn.sum
    out = pick(sums, over, True)
    return out if keepdims else fn.squeeze(out, axes)


def _no_smallest(x, ord, smallest: bool) -> None:  # noqa: A002
    """A minimum over nothing has no value (JAX raises too); a maximum of magnitudes over
    nothing is 0, as JAX's."""
    if smallest:
        raise OpError(
            f"linalg.norm: ord={ord!r} takes a minimum over a dim of size 0 (x of shape "
            f"{x.shape}), which has no value"
        )


def _euclid(x, axes, keepdims):
    """The Euclidean norm over ``axes``, with a zero gradient at zero (the root runs on 1
    there, so its infinite slope never meets the 0)."""
    total = fn.sum(x * x, axes, keepdims)
    zero = total == 0
    return fn.where(zero, 0.0, fn.sqrt(fn.where(zero, 1.0, total)))


def vector_norm(x, ord, axes: tuple, keepdims: bool):  # noqa: A002
    """The ``ord``-norm of the elements over ``axes`` taken as one vector (``norm``'s and
    ``Tensor.norm``'s); a root's gradient at a zero total is zero, and so is a zero
    element's for ``0 < ord < 1`` (where ``|x|**ord`` has an infinite slope)."""
    if ord is None or ord == 2:
        return _euclid(x, axes, keepdims)
    if isinstance(ord, str) or isinstance(ord, bool):
        raise OpError(f"linalg.norm: vector ord must be a number, got {ord!r}")
    a = fn.abs(x)
    if ord in (math.inf, -math.inf):
        if any(x.shape[i] == 0 for i in axes):
            _no_smallest(x, ord, ord < 0)
            return fn.sum(a, axes, keepdims)  # zeros: the largest magnitude of none
        return (fn.max if ord > 0 else fn.min)(a, axes, keepdims)
    if ord == 0:
        return fn.sum(fn.cast(a != 0, x.dtype), axes, keepdims)
    if ord == 1:
        return fn.sum(x * fn.sign(x), axes, keepdims)
    if 0 < ord < 1:  # |x|**ord has an infinite slope at 0: the zeros' own gradient is 0
        gone = a == 0  # (inf times a zero cotangent was NaN in reverse mode, 0 in forward)
        powered = fn.where(gone, 0.0, fn.where(gone, 1.0, a) ** ord)
    else:
        powered = a**ord
    total = fn.sum(powered, axes, keepdims)
    zero = total == 0  # (for ord < 0: no elements, or only infinite ones: the norm is inf)
    at_zero = math.inf if ord < 0 else 0.0
    return fn.where(zero, at_zero, fn.where(zero, 1.0, total) ** (1.0 / ord))


# ----------------------------------------------------------------------------- decompositions
# ``inv``, ``solve``, ``slogdet``, ``cholesky`` and ``eigh`` are ops of their own, run by
# LAPACK through NumPy (on every backend: MAX has no kernels for them, so they run on the host
# as sorting does); leading dims are a batch, as NumPy's and JAX's. Their rules are written with the
# ops themselves, so derivatives of any order follow.
def _matrix_rule(in_shapes, out_shapes):
    """Leading (batch) dims shared; each operand's and output's last two dims whole (a
    matrix's rows and columns are read together)."""
    names = string.ascii_lowercase
    blocked, ins, outs = set(), [], []
    lead = max(len(s) for s in in_shapes) - 2
    for group, shapes, tag in ((ins, in_shapes, "i"), (outs, out_shapes, "o")):
        for k, shape in enumerate(shapes):
            dims = [(f"b{names[i]}",) for i in range(min(lead, len(shape)))]
            tail = [(f"{tag}{k}m{j}",) for j in range(len(shape) - len(dims))]
            blocked.update(t[0] for t in tail)
            group.append(dims + tail)
    return spmd.FactorRule.parse_dims(ins, outs, in_shapes, out_shapes, blocked=blocked)


class _PerMatrixOp(Operation):
    """A LAPACK op on each matrix of its operands' last two dims: the leading dims are a
    batch, each matrix whole (``_matrix_rule``)."""

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return _matrix_rule(in_shapes, out_shapes)


class _MatrixToMatrixOp(_PerMatrixOp):
    """A float square matrix to one of its shape (``inv``, ``cholesky``)."""

    def infer(self, shapes, dtypes, kwargs):
        _square(self.name, shapes[0])
        _check_float(self.name, dtypes[0])
        return [shapes[0]], [dtypes[0]]


def _square(op: str, shape) -> None:
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise OpError(f"linalg.{op}: expects square matrices (..., n, n), got shape {tuple(shape)}")


def _check_float(op: str, dtype) -> None:
    if dtype.value not in ("float32", "float64"):
        raise OpError(f"linalg.{op}: takes float32 or float64 (LAPACK's), got {dtype.value}")


def _mT(x):  # noqa: N802 - NumPy's and JAX's name for the matrix transpose
    return fn.swap_axes(x, -1, -2)


class InvOp(_MatrixToMatrixOp):
    """The inverse of each square matrix of ``(..., n, n)``."""

    name = "inv"

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        t = _mT(outputs[0])  # d(A^-1) = -A^-1 dA A^-1
        return [fn.neg(fn.matmul(fn.matmul(t, cotangents[0]), t))]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if tangents[0] is None:
            return [None]
        inv_a = outputs[0]
        return [fn.neg(fn.matmul(fn.matmul(inv_a, tangents[0]), inv_a))]


class SolveOp(_PerMatrixOp):
    """``x`` with ``a @ x = b`` for ``a`` ``(..., n, n)`` and ``b`` ``(..., n, k)`` of the
    same leading dims."""

    name = "solve"
    arity = 2

    def implicit_broadcast(self, index, impl):
        # an unbatched ``a`` meets a vmapped ``b`` inside LAPACK's batched solve (NumPy
        # broadcasts the leading dims), not as a copy per example
        return index == 0 and not impl.levels

    def infer(self, shapes, dtypes, kwargs):
        a, b = shapes
        _square("solve", a)
        if len(b) != len(a) or tuple(b[:-2]) != tuple(a[:-2]) or b[-2] != a[-1]:
            raise OpError(f"linalg.solve: a {tuple(a)} and b {tuple(b)} do not fit")
        _check_float("solve", dtypes[0])
        return [tuple(b)], [dtypes[0]]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        a, _ = primals
        gb = _solve.bind([_mT(a), cotangents[0]], {})  # b's: a^-T g; a's: -b's x^T
        ga = fn.neg(fn.matmul(gb, _mT(outputs[0])))
        return [batching.sum_finished_levels(ga, a), gb]  # (a met the batch unbroadcast)

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        a, _ = primals
        da, db = tangents
        if da is None and db is None:
            return [None]
        rhs = db if da is None else fn.matmul(da, outputs[0])
        if da is not None:
            rhs = fn.neg(rhs) if db is None else db - rhs
        return [_solve.bind([a, rhs], {})]


class SlogdetOp(_PerMatrixOp):
    """The sign and the log of the absolute determinant of each square matrix."""

    name = "slogdet"
    multiple_results = True

    def infer(self, shapes, dtypes, kwargs):
        _square("slogdet", shapes[0])
        _check_float("slogdet", dtypes[0])
        lead = tuple(shapes[0][:-2])
        return [lead, lead], [dtypes[0], dtypes[0]]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        ct = cotangents[1]  # the sign has no derivative
        if ct is None:
            return [None]
        grad = _mT(_inv.bind([primals[0]], {}))  # d log|det A| = tr(A^-1 dA)
        return [fn.unsqueeze(fn.unsqueeze(ct, -1), -1) * grad]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if tangents[0] is None:
            return [None, None]
        d = _solve.bind([primals[0], tangents[0]], {})
        return [fn.zeros_like(outputs[0]), einsum("...ii->...", d)]


def _det_slope(a, det):
    """``d det(A) / dA``, the adjugate's transpose: ``det A^-T`` where ``A`` is invertible,
    and from the SVD ``A = U S Vh`` where ``det`` is 0, ``det(U) det(Vh) U diag(prod_(j != i)
    s_j) Vh``, finite and exact there (a rank ``n - 1`` matrix has a non-zero adjugate).
    The SVD form is constant to autodiff (its own derivative is NaN at repeated singular
    values), so a second derivative at a singular matrix is NaN, as before."""
    invertible = fn.unsqueeze(fn.unsqueeze(det, -1), -1) * _mT(_inv.bind([a], {}))
    u, s, vh = _svd.bind([a], {"full_matrices": False})
    others = fn.cumprod(s, -1, exclusive=True) * fn.cumprod(s, -1, exclusive=True, reverse=True)
    turn = _slogdet.bind([u], {})[0] * _slogdet.bind([vh], {})[0]
    singular = fn.unsqueeze(fn.unsqueeze(turn, -1), -1) * fn.matmul(
        u * fn.unsqueeze(others, -2), vh
    )
    at_zero = fn.unsqueeze(fn.unsqueeze(det == 0, -1), -1)
    return fn.where(at_zero, fn.stop_gradient(singular), invertible)


class DetOp(_PerMatrixOp):
    """The determinant of each square matrix (LAPACK's LU through NumPy); its derivative
    is the adjugate's transpose, finite at a singular matrix too (``_det_slope``)."""

    name = "det"

    def infer(self, shapes, dtypes, kwargs):
        _square("det", shapes[0])
        _check_float("det", dtypes[0])
        return [tuple(shapes[0][:-2])], [dtypes[0]]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        ct = fn.unsqueeze(fn.unsqueeze(cotangents[0], -1), -1)
        return [ct * _det_slope(primals[0], outputs[0])]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if tangents[0] is None:
            return [None]
        return [einsum("...ij,...ij->...", _det_slope(primals[0], outputs[0]), tangents[0])]


def _phi(x):
    """The lower triangle of ``x`` with its diagonal halved (the Cholesky rules' ``Phi``)."""
    n = x.shape[-1]
    return fn.tril(x) - 0.5 * x * fn.eye(n, dtype=x.dtype)


class CholeskyOp(_MatrixToMatrixOp):
    """The lower Cholesky factor ``L`` of each symmetric positive-definite matrix
    (``A = L L^T``); NaN where a matrix is not positive definite, as JAX's."""

    name = "cholesky"

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        # L^-T Phi(L^T G) L^-1: the JVP's transpose (Phi is its own); ``cholesky``
        # symmetrizes its input first by default, and that symmetrizes this too
        low = outputs[0]
        inv_l = _inv.bind([low], {})
        return [fn.matmul(fn.matmul(_mT(inv_l), _phi(fn.matmul(_mT(low), cotangents[0]))), inv_l)]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if tangents[0] is None:
            return [None]
        low = outputs[0]
        inv_l = _inv.bind([low], {})
        return [fn.matmul(low, _phi(fn.matmul(fn.matmul(inv_l, tangents[0]), _mT(inv_l))))]


class EighOp(_PerMatrixOp):
    """The eigenvalues (ascending) and eigenvectors (columns) of each symmetric matrix, from
    its lower triangle (LAPACK's ``syevd``)."""

    name = "eigh"
    multiple_results = True

    def infer(self, shapes, dtypes, kwargs):
        _square("eigh", shapes[0])
        _check_float("eigh", dtypes[0])
        return [tuple(shapes[0][:-1]), shapes[0]], [dtypes[0], dtypes[0]]

    def _gaps(self, w):
        """``F[i, j] = 1 / (w[j] - w[i])`` off the diagonal, 0 on it (equal eigenvalues
        have no defined vectors' derivative: their entries are inf, as JAX's)."""
        n = w.shape[-1]
        diff = fn.unsqueeze(w, -2) - fn.unsqueeze(w, -1)
        eye = fn.eye(n, dtype=w.dtype)
        return fn.where(eye > 0, fn.zeros_like(diff), 1.0 / fn.where(eye > 0, 1.0, diff))

    def _outputs(self, primals, outputs):
        """``(w, v)``; computed again when one was not kept (an output nothing read)."""
        if outputs[0] is None or outputs[1] is None:
            return tuple(_eigh.bind([primals[0]], {}))
        return tuple(outputs)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        w, v = self._outputs(primals, outputs)
        ct_w, ct_v = cotangents
        inner = None
        if ct_v is not None:
            inner = self._gaps(w) * fn.matmul(_mT(v), ct_v)
        if ct_w is not None:
            diag = fn.unsqueeze(ct_w, -1) * fn.eye(w.shape[-1], dtype=w.dtype)
            inner = diag if inner is None else inner + diag
        if inner is None:
            return [None]
        return [fn.matmul(fn.matmul(v, inner), _mT(v))]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if tangents[0] is None:
            return [None, None]
        w, v = self._outputs(primals, outputs)
        rotated = fn.matmul(fn.matmul(_mT(v), tangents[0]), v)
        dw = einsum("...ii->...i", rotated)
        return [dw, fn.matmul(v, self._gaps(w) * rotated)]


_inv, _solve, _slogdet, _cholesky = InvOp(), SolveOp(), SlogdetOp(), CholeskyOp()
_det = DetOp()
_eigh = EighOp()


def _or_zeros(ct, like):
    return fn.zeros_like(like) if ct is None else ct


def _svd_shapes(shape, full: bool) -> tuple:
    *lead, m, n = shape
    k = min(m, n)
    lead = tuple(lead)
    if full:
        return lead + (m, m), lead + (k,), lead + (n, n)
    return lead + (m, k), lead + (k,), lead + (k, n)


class SvdOp(_PerMatrixOp):
    """The singular value decomposition of each matrix: ``(u, s, vh)`` with
    ``a = u diag(s) vh``, ``s`` descending (LAPACK's ``gesdd``); ``full_matrices`` gives
    square ``u`` and ``vh``. The derivative is the thin decomposition's (the columns a full
    one adds to a non-square matrix are not determined by it: refused, as JAX refuses), and
    needs distinct nonzero singular values for the vectors' part (pairs of equal ones are
    left out, as JAX's)."""

    name = "svd"
    multiple_results = True

    def infer(self, shapes, dtypes, kwargs):
        if len(shapes[0]) < 2:
            raise OpError(f"linalg.svd: expects matrices (..., m, n), got shape {tuple(shapes[0])}")
        _check_float("svd", dtypes[0])
        return list(_svd_shapes(shapes[0], kwargs["full_matrices"])), [dtypes[0]] * 3

    def _thin(self, primals, outputs, kwargs):
        """``(u, s, v)`` of the thin decomposition (the full one's leading columns)."""
        a = primals[0]
        m, n = a.shape[-2:]
        if kwargs["full_matrices"] and m != n:
            raise OpError(
                f"linalg.svd: no derivative for full_matrices=True of a non-square matrix "
                f"(shape {tuple(a.shape)}): the added columns are not determined by a; use "
                "full_matrices=False"
            )
        u, s, vh = outputs
        if u is None or s is None or vh is None:
            u, s, vh = _svd.bind([a], {"full_matrices": False})
        return u, s, _mT(vh)

    @staticmethod
    def _gaps(s):
        """``F[i, j] = 1 / (s_j^2 - s_i^2)``, 0 where that is 0 (the diagonal, ties)."""
        row = fn.unsqueeze(s, -2)
        diff = (row + _mT(row)) * (row - _mT(row))
        zero = diff == 0
        return fn.where(zero, 0.0, 1.0 / fn.where(zero, 1.0, diff))

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if tangents[0] is None:
            return [None, None, None]
        u, s, v = self._thin(primals, outputs, kwargs)
        da = tangents[0]
        m, n = primals[0].shape[-2:]
        k = fn.matmul(fn.matmul(_mT(u), da), v)  # u^T da v: (..., k, k)
        ds = einsum("...ii->...i", k)
        row, col = fn.unsqueeze(s, -2), fn.unsqueeze(s, -1)
        gaps = self._gaps(s)
        du = fn.matmul(u, gaps * (k * row + col * _mT(k)))
        dv = fn.matmul(v, gaps * (col * k + _mT(k) * row))
        if m > n:  # the part of da outside u's columns
            du = du + (fn.matmul(da, v) - fn.matmul(u, k)) / row
        if n > m:
            dv = dv + (fn.matmul(_mT(da), u) - fn.matmul(v, _mT(k))) / row
        return [du, ds, _mT(dv)]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        u, s, v = self._thin(primals, outputs, kwargs)
        ct_u, ct_s, ct_vh = cotangents
        m, n = primals[0].shape[-2:]
        row = fn.unsqueeze(s, -2)
        gaps = self._gaps(s)
        inner = fn.zeros_like(gaps)
        if ct_s is not None:
            inner = inner + fn.unsqueeze(ct_s, -1) * fn.eye(s.shape[-1], dtype=s.dtype)
        out = None
        if ct_u is not None:
            g = gaps * fn.matmul(_mT(u), ct_u)
            inner = inner + (g + _mT(g)) * row
            if m > n:
                out = fn.matmul((ct_u - fn.matmul(u, fn.matmul(_mT(u), ct_u))) / row, _mT(v))
        if ct_vh is not None:
            ct_v = _mT(ct_vh)
            g = gaps * fn.matmul(_mT(v), ct_v)
            inner = inner + _mT(row) * (g + _mT(g))
            if n > m:
                rest = (ct_v - fn.matmul(v, fn.matmul(_mT(v), ct_v))) / row
                term = fn.matmul(u, _mT(rest))
                out = term if out is None else out + term
        full = fn.matmul(fn.matmul(u, inner), _mT(v))
        return [full if out is None else full + out]


class QrOp(_PerMatrixOp):
    """The QR decomposition of each matrix (LAPACK's Householder ``geqrf``): ``q`` with
    orthonormal columns, ``r`` upper triangular, ``a = q r``; ``complete`` gives square
    ``q``. The derivative needs ``r``'s leading square block invertible; for a tall matrix
    with ``complete`` it is refused (the added columns are not determined by ``a``)."""

    name = "qr"
    multiple_results = True

    def infer(self, shapes, dtypes, kwargs):
        shape = tuple(shapes[0])
        if len(shape) < 2:
            raise OpError(f"linalg.qr: expects matrices (..., m, n), got shape {shape}")
        _check_float("qr", dtypes[0])
        *lead, m, n = shape
        k = m if kwargs["complete"] else min(m, n)
        return [(*lead, m, k), (*lead, k, n)], [dtypes[0]] * 2

    def _check(self, a, kwargs):
        m, n = a.shape[-2:]
        if kwargs["complete"] and m > n:
            raise OpError(
                f"linalg.qr: no derivative for mode='complete' of a tall matrix (shape "
                f"{tuple(a.shape)}): the added columns of q are not determined by a; use "
                "mode='reduced'"
            )

    def _outputs(self, primals, outputs, kwargs):
        """``(q, r)``; computed again when one was not kept (an output nothing read)."""
        if outputs[0] is None or outputs[1] is None:
            return tuple(_qr.bind([primals[0]], kwargs))
        return tuple(outputs)

    @staticmethod
    def _right_solve(x, r):
        """``x r^-1`` for square upper-triangular ``r``."""
        return _mT(_solve.bind([_mT(r), _mT(x)], {}))

    def _square_jvp(self, q, r, dx):
        """``(dq, dr)`` for ``x = q r`` with ``r`` square and invertible."""
        x_rinv = self._right_solve(dx, r)
        c = fn.matmul(_mT(q), x_rinv)
        low = fn.tril(c, -1)
        omega = low - _mT(low)  # q^T dq: skew-symmetric
        return fn.matmul(q, omega - c) + x_rinv, fn.matmul(c - omega, r)

    def _square_vjp(self, q, r, ct_q, ct_r):
        """The cotangent of ``x`` for ``x = q r`` with ``r`` square and invertible: the
        transpose of ``_square_jvp``."""
        m = fn.matmul(ct_r, _mT(r)) - fn.matmul(_mT(q), ct_q)
        c_bar = m - fn.tril(m - _mT(m), -1)
        return self._right_solve(ct_q + fn.matmul(q, c_bar), _mT(r))

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if tangents[0] is None:
            return [None, None]
        x, dx = primals[0], tangents[0]
        self._check(x, kwargs)
        q, r = self._outputs(primals, outputs, kwargs)
        m, n = x.shape[-2:]
        if m >= n:
            return list(self._square_jvp(q, r, dx))
        # wide: x = q [r1 r2] with r1 square; r2 = q^T x2
        dq, dr1 = self._square_jvp(q, r[..., :, :m], dx[..., :, :m])
        x2, dx2 = x[..., :, m:], dx[..., :, m:]
        dr2 = fn.matmul(_mT(dq), x2) + fn.matmul(_mT(q), dx2)
        return [dq, fn.concatenate([dr1, dr2], -1)]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        x = primals[0]
        self._check(x, kwargs)
        q, r = self._outputs(primals, outputs, kwargs)
        ct_q, ct_r = _or_zeros(cotangents[0], q), _or_zeros(cotangents[1], r)
        m, n = x.shape[-2:]
        if m >= n:
            return [self._square_vjp(q, r, ct_q, ct_r)]
        x2, ct_r1, ct_r2 = x[..., :, m:], ct_r[..., :, :m], ct_r[..., :, m:]
        ct_q = ct_q + fn.matmul(x2, _mT(ct_r2))  # (r2 = q^T x2)
        ct_x1 = self._square_vjp(q, r[..., :, :m], ct_q, ct_r1)
        return [fn.concatenate([ct_x1, fn.matmul(q, ct_r2)], -1)]


class PinvOp(_PerMatrixOp):
    """The Moore-Penrose pseudo-inverse of each matrix, singular values at or below
    ``rtol`` times the largest taken as zero. Its derivative is Golub and Pereyra's closed
    form (exact where the rank does not change), not the SVD's, which has no derivative at
    repeated singular values (an orthogonal matrix's)."""

    name = "pinv"

    def infer(self, shapes, dtypes, kwargs):
        shape = tuple(shapes[0])
        if len(shape) < 2:
            raise OpError(f"linalg.pinv: expects matrices (..., m, n), got shape {shape}")
        _check_float("pinv", dtypes[0])
        return [shape[:-2] + (shape[-1], shape[-2])], [dtypes[0]]

    def jvp_rule(self, primals, tangents, outputs, kwargs):
        if tangents[0] is None:
            return [None]
        a, da, p = primals[0], tangents[0], outputs[0]
        m, n = a.shape[-2:]
        left = fn.eye(m, dtype=a.dtype) - fn.matmul(a, p)  # (I - a p): m x m
        right = fn.eye(n, dtype=a.dtype) - fn.matmul(p, a)  # (I - p a): n x n
        dat = _mT(da)
        out = fn.neg(fn.matmul(fn.matmul(p, da), p))
        out = out + fn.matmul(fn.matmul(fn.matmul(p, _mT(p)), dat), left)
        return [out + fn.matmul(fn.matmul(right, dat), fn.matmul(_mT(p), p))]

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        a, ct, p = primals[0], cotangents[0], outputs[0]
        m, n = a.shape[-2:]
        left = fn.eye(m, dtype=a.dtype) - fn.matmul(a, p)
        right = fn.eye(n, dtype=a.dtype) - fn.matmul(p, a)
        ctt = _mT(ct)
        out = fn.neg(fn.matmul(fn.matmul(_mT(p), ct), _mT(p)))
        out = out + fn.matmul(fn.matmul(left, ctt), fn.matmul(p, _mT(p)))
        return [out + fn.matmul(fn.matmul(fn.matmul(_mT(p), p), ctt), right)]


_svd, _qr, _pinv = SvdOp(), QrOp(), PinvOp()


def _linalg_operand(op: str, x) -> Tensor:
    x = as_tensor(x, op=f"linalg.{op}")
    if not x.dtype.is_float:
        x = fn.cast(x, get_default_dtype())
    return x


def inv(a) -> Tensor:
    """The inverse of each square matrix (NumPy's and JAX's ``linalg.inv``).

    Args:
        a: ``(..., n, n)``, float32 or float64 (integers in the default float dtype).

    Returns:
        A tensor like ``a``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for a shape that is not square matrices.
    """
    return _inv.bind([_linalg_operand("inv", a)], {})


def solve(a, b) -> Tensor:
    """``x`` with ``a @ x = b`` (NumPy 2's and JAX's ``linalg.solve``): ``b`` a vector
    ``(n,)`` or matrices ``(..., n, k)``, the leading dims broadcast with ``a``'s.

    Args:
        a: ``(..., n, n)``.
        b: ``(n,)`` (one right-hand side for every matrix) or ``(..., n, k)``.

    Returns:
        ``x`` of ``b``'s shape (after broadcasting).

    Raises:
        ValueError: (:class:`nabla.OpError`) for shapes that do not fit.
    """
    a, b = _linalg_operand("solve", a), _linalg_operand("solve", b)
    if a.dtype is not b.dtype:  # (promoted, as NumPy's: float32 with float64 is float64)
        dtype = promote_types(a.dtype, b.dtype)
        a, b = fn.cast(a, dtype), fn.cast(b, dtype)
    _square("solve", a.shape)
    vector = b.ndim == 1  # (NumPy 2's and JAX's rule; NumPy 1 also took a.ndim - 1 dims)
    if vector:
        b = fn.unsqueeze(b, -1)
    if b.ndim < 2:
        raise OpError(f"linalg.solve: b of shape {tuple(b.shape)} is not (n,) or (..., n, k)")
    try:
        lead = tuple(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
    except ValueError:
        raise OpError(
            f"linalg.solve: the leading dims of a {tuple(a.shape)} and b {tuple(b.shape)} do "
            "not broadcast"
        ) from None
    a = fn.broadcast_to(a, lead + tuple(a.shape[-2:]))
    b = fn.broadcast_to(b, lead + tuple(b.shape[-2:]))
    x = _solve.bind([a, b], {})
    return fn.squeeze(x, -1) if vector else x


def slogdet(a) -> tuple:
    """The sign and the natural log of the absolute determinant of each square matrix
    (NumPy's and JAX's ``linalg.slogdet``): ``(sign, logabsdet)``; a singular matrix gives
    sign 0 and ``-inf``.

    Args:
        a: ``(..., n, n)``.

    Returns:
        ``SlogdetResult(sign, logabsdet)``: tensors of ``a``'s leading shape.
    """
    return SlogdetResult(*_slogdet.bind([_linalg_operand("slogdet", a)], {}))


def det(a) -> Tensor:
    """The determinant of each square matrix (NumPy's and JAX's ``linalg.det``). Its
    gradient is the adjugate's transpose, finite at a singular matrix too, as JAX's.

    Args:
        a: ``(..., n, n)``.

    Returns:
        A tensor of ``a``'s leading shape.
    """
    return _det.bind([_linalg_operand("det", a)], {})


def cholesky(a, *, upper: bool = False, symmetrize_input: bool = True) -> Tensor:
    """The Cholesky factor of each symmetric positive-definite matrix (NumPy's and JAX's
    ``linalg.cholesky``): lower ``L`` with ``a = L L^T`` (``upper=True``: ``L^T``). As JAX's,
    the input is symmetrized first (``(a + a^T) / 2``) and a matrix that is not positive
    definite gives NaN.

    Args:
        a: ``(..., n, n)``.
        upper: return the upper factor.
        symmetrize_input: use ``(a + a^T) / 2`` (default True, JAX's).

    Returns:
        A tensor like ``a``.
    """
    a = _linalg_operand("cholesky", a)
    _square("cholesky", a.shape)
    if symmetrize_input:
        a = 0.5 * (a + _mT(a))
    low = _cholesky.bind([a], {})
    return _mT(low) if upper else low


def eigh(a, UPLO=None, symmetrize_input: bool = True) -> tuple:  # noqa: N803 - NumPy's name
    """The eigenvalues (ascending) and eigenvectors (the columns of ``v``) of each symmetric
    matrix (NumPy's and JAX's ``linalg.eigh``): ``(w, v)`` with ``a v = v diag(w)``. As
    JAX's, the input is symmetrized first; the vectors' derivative needs distinct
    eigenvalues.

    Args:
        a: ``(..., n, n)``.
        UPLO: NumPy's ``"L"`` (the default; ``"U"`` reads the upper triangle, the same
            after symmetrizing).
        symmetrize_input: use ``(a + a^T) / 2`` (default True, JAX's).

    Returns:
        ``EighResult(eigenvalues, eigenvectors)``: ``(..., n)`` and ``(..., n, n)``.
    """
    a = _linalg_operand("eigh", a)
    _square("eigh", a.shape)
    if UPLO not in (None, "L", "U"):
        raise OpError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    if UPLO == "U":
        a = _mT(a)
    if symmetrize_input:
        a = 0.5 * (a + _mT(a))
    return EighResult(*_eigh.bind([a], {}))


def eigvalsh(a, UPLO=None) -> Tensor:  # noqa: N803 - NumPy's name
    """The eigenvalues (ascending) of each symmetric matrix (NumPy's and JAX's
    ``linalg.eigvalsh``).

    Args:
        a: ``(..., n, n)``.
        UPLO: NumPy's ``"L"`` (default) or ``"U"``.

    Returns:
        ``(..., n)``.
    """
    return eigh(a, UPLO)[0]


class EighResult(NamedTuple):
    """``linalg.eigh``'s result (NumPy's and JAX's field names)."""

    eigenvalues: Tensor
    eigenvectors: Tensor


class SlogdetResult(NamedTuple):
    """``linalg.slogdet``'s result (NumPy's and JAX's field names)."""

    sign: Tensor
    logabsdet: Tensor


class SVDResult(NamedTuple):
    """``linalg.svd``'s result (NumPy's and JAX's field names)."""

    U: Tensor
    S: Tensor
    Vh: Tensor


class QRResult(NamedTuple):
    """``linalg.qr``'s result (NumPy's and JAX's field names)."""

    Q: Tensor
    R: Tensor


def svd(a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False):
    """The singular value decomposition of each matrix (NumPy's and JAX's ``linalg.svd``):
    ``(U, S, Vh)`` with ``a = U @ (S[..., None] * Vh)``, ``S`` descending.

    Args:
        a: ``(..., m, n)``, float32 or float64 (integers in the default float dtype).
        full_matrices: square ``U`` ``(..., m, m)`` and ``Vh`` ``(..., n, n)`` (the
            default, NumPy's and JAX's); else ``(..., m, k)`` and ``(..., k, n)``,
            ``k = min(m, n)``.
        compute_uv: False returns ``S`` alone.
        hermitian: accepted (NumPy's); the general decomposition is computed.

    Returns:
        ``SVDResult(U, S, Vh)``, or ``S`` of shape ``(..., k)``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for fewer than 2 dims; when differentiating
            ``full_matrices=True`` of a non-square matrix.
    """
    a = _linalg_operand("svd", a)
    u, s, vh = _svd.bind([a], {"full_matrices": bool(full_matrices and compute_uv)})
    return SVDResult(u, s, vh) if compute_uv else s


def qr(a, mode: str = "reduced"):
    """The QR decomposition of each matrix (NumPy's and JAX's ``linalg.qr``).

    Args:
        a: ``(..., m, n)``, float32 or float64.
        mode: ``"reduced"`` (``Q`` ``(..., m, k)``, ``R`` ``(..., k, n)``, ``k = min(m,
            n)``), ``"complete"`` (``Q`` ``(..., m, m)``, ``R`` ``(..., m, n)``) or ``"r"``
            (``R`` alone).

    Returns:
        ``QRResult(Q, R)``, or ``R`` for ``mode="r"``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for another mode or fewer than 2 dims.
    """
    if mode not in ("reduced", "complete", "r"):
        raise OpError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    a = _linalg_operand("qr", a)
    q, r = _qr.bind([a], {"complete": mode == "complete"})
    return r if mode == "r" else QRResult(q, r)


def pinv(a, rtol=None, hermitian: bool = False, *, rcond=None) -> Tensor:
    """The Moore-Penrose pseudo-inverse of each matrix (NumPy's and JAX's ``linalg.pinv``),
    singular values at or below ``rtol`` times the largest taken as zero.

    Args:
        a: ``(..., m, n)``.
        rtol: the cutoff (default JAX's: ``10 * max(m, n) * eps`` of the dtype).
        hermitian: accepted (NumPy's); the general decomposition is computed.
        rcond: the older name of ``rtol``.

    Returns:
        ``(..., n, m)``.

    Raises:
        ValueError: (:class:`nabla.OpError`) for both ``rtol`` and ``rcond``.
    """
    if rcond is not None:
        if rtol is not None:
            raise OpError("linalg.pinv: give rtol or rcond, not both")
        rtol = rcond
    a = _linalg_operand("pinv", a)
    if rtol is None:
        rtol = 10.0 * max(a.shape[-2:], default=1) * float(np.finfo(a.dtype.numpy).eps)
    return _pinv.bind([a], {"rtol": float(rtol)})


provide(globals(), __all__)
