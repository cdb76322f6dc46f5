"""Convolution and pooling (NHWC activations, HWIO filters).

All four are composites: ``conv2d`` gathers the ``KH*KW`` strided windows of the padded
input with one ``windows`` op (im2col) and contracts them in one ``matmul`` (an ``einsum``
per group when ``groups > 1``); ``conv2d_transpose`` dilates and pads its input and runs
``conv2d`` with the flipped filter; pooling reduces over the stacked windows (tap-major,
by a reshape and a transpose, where the windows tile the input). So they are
differentiable, batchable under ``vmap`` and lowered on every backend by construction.

``windows`` and its adjoint ``windows_sum`` (col2im: each window added back where it came
from) are the two primitives here, each the other's VJP: an input gradient is one
accumulation into one buffer, not a zero-filled ``slice_update`` per window summed.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from ..core.dtypes import DType
from . import spmd
from ._util import as_tensor
from .base import Operation, OpError
from .functions import fn, provide

__all__ = ["conv2d", "conv2d_transpose", "avg_pool2d", "max_pool2d"]


def _pair(v, name, op, minimum=1):
    """``v`` as a pair of ints, each at least ``minimum`` (strides, dilations and kernel sizes
    must be positive; paddings may be 0)."""
    given = v
    if isinstance(v, numbers.Integral):
        v = (int(v), int(v))
    elif isinstance(v, tuple | list) and all(isinstance(a, numbers.Integral) for a in v):
        v = tuple(int(a) for a in v)
    else:
        v = ()
    if len(v) != 2:
        raise OpError(f"{op}: {name} must be an int or a pair of ints, got {given!r}")
    if min(v) < minimum:  # the original Nabla's wording, and the bound
        rule = "> 0" if minimum == 1 else f">= {minimum}"
        raise OpError(f"{op}: {name} values must be {rule} (each >= {minimum}), got {given!r}")
    return v


def _padding(padding, op, k=None, d=None, s=None, size=None):
    """-> ((top, bottom), (left, right))."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return (0, 0), (0, 0)
        if mode == "SAME":
            out = []
            for i in range(2):
                eff = d[i] * (k[i] - 1) + 1
                o = -(-size[i] // s[i])
                total = max((o - 1) * s[i] + eff - size[i], 0)
                out.append((total // 2, total - total // 2))
            return tuple(out)
        raise OpError(f"{op}: padding must be 'SAME', 'VALID', an int or pairs, got {padding!r}")
    out = _explicit_padding(padding)
    if out is None:
        raise OpError(
            f"{op}: padding must be 'SAME', 'VALID', an int, a pair or ((top, bottom), "
            f"(left, right)) of ints, got {padding!r}"
        )
    if min(min(out[0]), min(out[1])) < 0:
        raise OpError(f"{op}: padding values must be >= 0, got {padding!r}")
    return out


def _explicit_padding(padding):
    """An int, a pair, ((top, bottom), (left, right)) or four ints as two pairs; None for
    anything else."""

    def ints(v, n):
        ok = isinstance(v, tuple | list) and len(v) == n
        return ok and all(isinstance(a, numbers.Integral) for a in v)

    if isinstance(padding, numbers.Integral):
        p = int(padding)
        return (p, p), (p, p)
    if ints(padding, 2):
        return (int(padding[0]),) * 2, (int(padding[1]),) * 2
    if isinstance(padding, tuple | list) and len(padding) == 2 and all(ints(p, 2) for p in padding):
        return tuple(int(a) for a in padding[0]), tuple(int(a) for a in padding[1])
    if ints(padding, 4):
        return (int(padding[0]), int(padding[1])), (int(padding[2]), int(padding[3]))
    return None


def _check_conv(op, x, weight, groups, layout="HWIO"):
    """Tensors for NHWC ``x`` and an HWIO filter whose channels match ``groups`` (``layout``
    names how the user's filter was given, for the error message)."""
    x = as_tensor(x, op=op)
    w = as_tensor(weight, op=op)
    if x.ndim != 4 or w.ndim != 4:
        raise OpError(
            f"{op}: expects x (N, H, W, C) and weight (KH, KW, C/groups, O), got "
            f"shapes {x.shape} and {w.shape}"
        )
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
        raise OpError(f"{op}: groups must be a positive int, got {groups!r}")
    c, (cg, o) = x.shape[3], w.shape[2:]
    if groups < 1 or c % groups or o % groups or cg != c // groups:
        want = f"(KH, KW, {c // max(groups, 1)}, O)"
        given = w.shape
        if layout == "HWOI":
            want, given = f"(KH, KW, O, {c})", given[:2] + given[2:][::-1]
        hint = ""
        if op == "conv2d_transpose" and layout == "HWIO" and given[3] == c:
            hint = "; a (KH, KW, O, C) filter, as the original Nabla's, needs filter_layout='HWOI'"
        why = []
        if c % groups:
            why.append(f"input channels {c} are not divisible by groups={groups}")
        if o % groups:
            why.append(f"output channels {o} are not divisible by groups={groups}")
        why = f" ({'; '.join(why)})" if why else ""
        raise OpError(
            f"{op}: Input channels {c}, filter {given} ({layout}) and groups={groups} do "
            f"not match{why} (filter needs shape {want}){hint}"
        )
    return x, w


class _WindowOp(Operation):
    """Shared by ``windows`` and ``windows_sum``. kwargs (each a pair of ints, for the two
    spatial dims): ``kernel``, ``stride``, ``dilation``, ``size`` (the input's H, W) and
    ``out`` (OH, OW). Dims are counted from the end (``(..., H, W, C)`` and
    ``(..., OH, OW, KH*KW, C)``), so vmap's batch prefix needs no kwargs of its own."""

    linear = True

    def _check(self, spatial, k, kwargs):
        """Raise unless the windows ``kwargs`` describe fit a ``spatial`` (H, W) with
        ``k`` taps per window."""
        (kh, kw), st, d = kwargs["kernel"], kwargs["stride"], kwargs["dilation"]
        size, out = kwargs["size"], kwargs["out"]
        ok = tuple(spatial) == tuple(size) and k == kh * kw
        ok = ok and all((out[i] - 1) * st[i] + ((kh, kw)[i] - 1) * d[i] < size[i] for i in range(2))
        if not ok or min(out) < 1:
            raise OpError(
                f"{self.name}: windows {kwargs} do not fit spatial size {tuple(spatial)} with "
                f"{k} taps per window"
            )

    def _rule(self, in_shapes, out_shapes, windows_in: bool):
        """Leading dims and channels are shared factors; the spatial and window dims stay
        whole (a window reaches across blocks)."""
        lead = len(in_shapes[0] if windows_in else out_shapes[0]) - 3
        shared = [(f"n{i}",) for i in range(lead)]
        image = [*shared, ("h",), ("w",), ("c",)]
        cols = [*shared, ("oh",), ("ow",), ("k",), ("c",)]
        ins, outs = (image, cols) if windows_in else (cols, image)
        return spmd.FactorRule.parse_dims(
            [ins], [outs], in_shapes, out_shapes, blocked={"h", "w", "oh", "ow", "k"}
        )


class WindowsOp(_WindowOp):
    """im2col: the ``KH*KW`` strided windows of ``(..., H, W, C)`` stacked as
    ``(..., OH, OW, KH*KW, C)`` (window tap ``i*KW + j`` at ``[oh*s + i*d, ow*s + j*d]``)."""

    name = "windows"
    data_movement = True

    def infer(self, shapes, dtypes, kwargs):
        shape = shapes[0]
        if len(shape) < 3:
            raise OpError(f"windows: expects (..., H, W, C), got shape {shape}")
        kh, kw = kwargs["kernel"]
        self._check(shape[-3:-1], kh * kw, kwargs)
        return [(*shape[:-3], *kwargs["out"], kh * kw, shape[-1])], [dtypes[0]]

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return self._rule(in_shapes, out_shapes, True)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [_WINDOWS_SUM.bind([cotangents[0]], kwargs)]


class WindowsSumOp(_WindowOp):
    """col2im, the adjoint of ``windows``: ``(..., OH, OW, KH*KW, C)`` -> ``(..., H, W, C)``,
    each window tap added at the position ``windows`` took it from (zeros elsewhere)."""

    name = "windows_sum"

    def infer(self, shapes, dtypes, kwargs):
        shape = shapes[0]
        if len(shape) < 4 or tuple(shape[-4:-2]) != tuple(kwargs["out"]):
            raise OpError(
                f"windows_sum: expects (..., OH, OW, KH*KW, C) with (OH, OW) = "
                f"{kwargs['out']}, got shape {shape}"
            )
        self._check(kwargs["size"], shape[-2], kwargs)
        return [(*shape[:-4], *kwargs["size"], shape[-1])], [dtypes[0]]

    def sharding_rule(self, in_shapes, out_shapes, kwargs):
        return self._rule(in_shapes, out_shapes, False)

    def vjp_rule(self, primals, cotangents, outputs, kwargs):
        return [_WINDOWS.bind([cotangents[0]], kwargs)]


_WINDOWS = WindowsOp()
_WINDOWS_SUM = WindowsSumOp()


def _windows_kwargs(xp, k, s, d, out_hw) -> dict:
    return {
        "kernel": tuple(k),
        "stride": tuple(s),
        "dilation": tuple(d),
        "size": tuple(xp.shape[1:3]),
        "out": tuple(out_hw),
    }


def _windows(xp, k, s, d, out_hw):
    """Stack the KH*KW strided windows of padded NHWC ``xp``: (N, OH, OW, KH*KW, C)."""
    return _WINDOWS.bind([xp], _windows_kwargs(xp, k, s, d, out_hw))


def _windows_sum(cols, size, k, s, d):
    """Add the KH*KW taps of ``cols`` (N, OH, OW, KH*KW, C) back where ``_windows`` took
    them from, in an image of spatial ``size``: (N, H, W, C)."""
    kwargs = {
        "kernel": tuple(k),
        "stride": tuple(s),
        "dilation": tuple(d),
        "size": tuple(size),
        "out": tuple(cols.shape[1:3]),
    }
    return _WINDOWS_SUM.bind([cols], kwargs)


def _out_size(size, k, s, d, p):
    return tuple(
        (size[i] + p[i][0] + p[i][1] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2)
    )


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation).

    Args:
        x: input ``(N, H, W, C)``.
        weight: filter ``(KH, KW, C // groups, O)``.
        bias: optional ``(O,)``.
        stride: int or pair.
        padding: int, pair, ``((top, bottom), (left, right))``, ``"SAME"`` or ``"VALID"``.
        dilation: int or pair: spacing between filter taps.
        groups: channel groups; ``C`` and ``O`` must be divisible by it.

    Returns:
        ``(N, OH, OW, O)``.

    Raises:
        ValueError: on rank, channel or size mismatches, naming the shapes.
    """

    s = _pair(stride, "stride", "conv2d")  # the arguments first, then the shapes
    d = _pair(dilation, "dilation", "conv2d")
    x, w = _check_conv("conv2d", x, weight, groups)
    n, h, wd, c = x.shape
    kh, kw, cg, o = w.shape
    p = _padding(padding, "conv2d", (kh, kw), d, s, (h, wd))
    oh, ow = _out_size((h, wd), (kh, kw), s, d, p)
    if oh <= 0 or ow <= 0:
        raise OpError(
            f"conv2d: input {x.shape} is too small for filter {w.shape} (dilation {d}, padding {p})"
        )
    xp = fn.pad(x, ((0, 0), p[0], p[1], (0, 0))) if any(p[0] + p[1]) else x
    win = _windows(xp, (kh, kw), s, d, (oh, ow))  # (N, OH, OW, K, C)
    kk = kh * kw
    if groups == 1:
        out = fn.matmul(fn.reshape(win, (n, oh, ow, kk * c)), fn.reshape(w, (kk * c, o)))
    else:
        g = groups
        win = fn.reshape(win, (n, oh, ow, kk, g, cg))
        win = fn.reshape(fn.permute(win, (0, 1, 2, 4, 3, 5)), (n, oh, ow, g, kk * cg))
        wg = fn.permute(fn.reshape(w, (kk * cg, g, o // g)), (1, 0, 2))
        out = fn.reshape(fn.einsum("nhwgk,gko->nhwgo", win, wg), (n, oh, ow, o))
    return _add_bias("conv2d", out, bias, f"weight {w.shape}")


def _add_bias(op: str, out, bias, weight: str):
    """``out`` plus a per-output-channel ``bias`` (None: none); a bias of another size is
    an error naming ``op``, the sizes and the ``weight`` described."""
    if bias is None:
        return out
    b = as_tensor(bias, out.dtype, op=op)
    o = out.shape[-1]
    if b.ndim != 1:
        raise OpError(f"{op}: bias must be 1-D ({o},), got shape {b.shape} ({weight})")
    if b.shape != (o,):
        raise _bias_size_error(op, b.shape, o, weight)
    return out + b


def _bias_size_error(op: str, shape: tuple, o: int, weight: str) -> OpError:
    """The error for a 1-D bias of ``shape`` against ``o`` output channels."""
    return OpError(
        f"{op}: bias size {shape[0]} does not match {o} output channels (bias of shape "
        f"{tuple(shape)}, {weight})"
    )


def conv2d_transpose(
    x,
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    dilation=1,
    groups=1,
    *,
    output_paddings=None,
    filter_layout=None,
):
    """Transposed 2-D convolution (the gradient of ``conv2d`` w.r.t. its input).

    ``out[n, h*s + i*d - p, w*s + j*d - p, o] += x[n, h, w, c] * weight[i, j, c, o]``.
    Computed as :func:`nabla.conv2d` of the stride-dilated, padded input with the spatially
    flipped filter.

    Two filter layouts: ``"HWIO"`` (the default; ``(KH, KW, C // groups, O)``, the input's
    channels first, as ``lax.conv_transpose`` and PyTorch) and ``"HWOI"`` (the original
    Nabla's: the forward ``conv2d``'s own weight ``(KH, KW, O // groups, C)``, so that
    ``conv2d_transpose(dy, w, filter_layout="HWOI", groups=g)`` is ``conv2d(x, w,
    groups=g)``'s input gradient).
    Passing the original's ``output_paddings=`` selects ``"HWOI"`` unless a layout is given.

    Args:
        x: input ``(N, H, W, C)``.
        weight: filter, ``(KH, KW, C // groups, O)`` or, with ``filter_layout="HWOI"``,
            ``(KH, KW, O // groups, C)``.
        bias: optional ``(O,)``, added to every output position.
        stride: int or pair: the upsampling factor (the stride of the forward ``conv2d``).
        padding: int, pair or ``((top, bottom), (left, right))``: rows/cols removed from each
            border of the full output (the padding of the forward ``conv2d``), or
            ``"VALID"`` (no padding). ``"SAME"`` is rejected.
        output_padding: int or pair: extra rows/cols added at the bottom/right.
        dilation: int or pair: the filter dilation.
        groups: channel groups, as in :func:`nabla.conv2d`.
        output_paddings: the original Nabla's name for ``output_padding``.
        filter_layout: ``"HWIO"`` or ``"HWOI"`` (see above).

    Returns:
        ``(N, (H-1)*s - pt - pb + d*(KH-1) + 1 + op, ..., O)``.

    Raises:
        ValueError: (:class:`nabla.OpError`) on rank or channel mismatches, naming the shapes
            and the layout; for an unknown ``filter_layout``; for padding that leaves no
            output, or an ``output_padding`` not smaller than the stride or the dilation.
        TypeError: for both ``output_padding`` and ``output_paddings``.
    """
    output_padding, layout = _transpose_layout(output_padding, output_paddings, filter_layout)
    # the arguments first, then the shapes
    s = _pair(stride, "stride", "conv2d_transpose")
    d = _pair(dilation, "dilation", "conv2d_transpose")
    op_ = _pair(output_padding, "output_padding", "conv2d_transpose", minimum=0)
    if any(op_[i] >= max(s[i], d[i]) for i in range(2)):
        # (PyTorch's rule) more would only append rows no input position reaches
        said = "output_padding" if output_paddings is None else "output_paddings"
        raise OpError(
            f"conv2d_transpose: {said} {output_padding!r} must be smaller than the "
            f"stride {s} or the dilation {d}, dim by dim"
        )
    _bias_fits_a_layout(weight, bias, groups, layout)
    same = isinstance(padding, str) and padding.upper() != "VALID"
    p = None if same else _padding(padding, "conv2d_transpose")
    if layout == "HWOI":
        weight = _hwoi_as_hwio(x, weight, groups)
    x, w = _check_conv("conv2d_transpose", x, weight, groups, layout)
    kh, kw = w.shape[:2]
    if same:
        raise OpError(
            f"conv2d_transpose: padding {padding!r} is not supported (use 'VALID', ints or "
            f"pairs); x {x.shape}, weight {w.shape}"
        )
    size = [
        (x.shape[1 + i] - 1) * s[i] - p[i][0] - p[i][1] + d[i] * ((kh, kw)[i] - 1) + 1 + op_[i]
        for i in range(2)
    ]
    if min(size) <= 0:
        raise OpError(
            f"conv2d_transpose: padding {p} leaves no output (size {tuple(size)}) for input "
            f"{x.shape}, filter {w.shape} ({layout}), stride {s}, dilation {d}"
        )
    # the full output needs d*(k-1) rows/cols on each side of the dilated input; the
    # padding takes rows/cols off them again, the output padding adds more at the end
    lo = [d[i] * ((kh, kw)[i] - 1) - p[i][0] for i in range(2)]
    hi = [d[i] * ((kh, kw)[i] - 1) - p[i][1] + op_[i] for i in range(2)]
    xd = _pad_or_crop(_dilate(x, s), lo, hi)
    out = conv2d(xd, fn.flip(w, (0, 1)), None, 1, 0, d, groups)
    return _add_bias("conv2d_transpose", out, bias, f"weight {w.shape} ({layout})")


def _bias_fits_a_layout(weight, bias, groups, layout) -> None:
    """A 1-D ``bias`` whose size is the output channels of neither filter layout is the
    error, before the channels are checked: it is wrong whichever layout was meant (the
    channel check's message is about the layout)."""
    if bias is None or not isinstance(groups, int):
        return
    w_shape = tuple(weight.shape) if hasattr(weight, "shape") else np.shape(weight)
    b_shape = tuple(bias.shape) if hasattr(bias, "shape") else np.shape(bias)
    if len(b_shape) != 1 or len(w_shape) != 4:
        return
    outs = {w_shape[3], groups * w_shape[2]}
    if b_shape[0] not in outs:
        o = w_shape[3] if layout == "HWIO" else groups * w_shape[2]
        raise _bias_size_error("conv2d_transpose", b_shape, o, f"weight {w_shape} ({layout})")


def _hwoi_as_hwio(x, weight, groups):
    """The forward ``conv2d``'s own filter ``(KH, KW, O // groups, C)`` (HWIO of the conv
    from O to C channels: ``conv2d_transpose``'s ``"HWOI"``) as ``conv2d_transpose``'s HWIO
    ``(KH, KW, C // groups, O)``: per group, its block of C inputs and O outputs swap."""
    x = as_tensor(x, op="conv2d_transpose")
    w = as_tensor(weight, op="conv2d_transpose")
    c = x.shape[-1] if x.ndim == 4 else None
    if (
        w.ndim != 4
        or c is None
        or isinstance(groups, bool)
        or not isinstance(groups, int)
        or groups < 1
        or w.shape[3] != c
        or c % groups
    ):
        raise OpError(
            f"conv2d_transpose: Input channels {c}, filter {w.shape} (HWOI) and groups={groups} "
            f"do not match (filter needs shape (KH, KW, O // groups, {c}): the forward "
            f"conv2d's own weight; input x {x.shape})"
        )
    kh, kw, og = w.shape[:3]
    blocks = fn.reshape(w, (kh, kw, og, groups, c // groups))
    return fn.reshape(fn.permute(blocks, (0, 1, 4, 3, 2)), (kh, kw, c // groups, groups * og))


def _transpose_layout(output_padding, output_paddings, filter_layout):
    """``conv2d_transpose``'s ``(output_padding, filter layout)``: the original Nabla's
    ``output_paddings=`` selects its ``"HWOI"`` filters unless a layout is given."""
    if output_paddings is not None:
        if output_padding != 0:
            raise TypeError("conv2d_transpose: pass output_padding or output_paddings, not both")
        output_padding = output_paddings
        filter_layout = filter_layout or "HWOI"
    layout = str(filter_layout or "HWIO").upper()
    if layout not in ("HWIO", "HWOI"):
        raise OpError(f"conv2d_transpose: filter_layout must be 'HWIO' or 'HWOI', got {layout!r}")
    return output_padding, layout


def _dilate(x, s):
    """NHWC ``x`` with ``s - 1`` zero rows/cols between its rows/cols (stride ``s``)."""
    if s == (1, 1):
        return x
    n, h, wd, c = x.shape
    # (N, H, 1, W, 1, C) padded to (N, H, s, W, s, C), then the trailing zeros cut
    xd = fn.reshape(x, (n, h, 1, wd, 1, c))
    xd = fn.pad(xd, ((0, 0), (0, 0), (0, s[0] - 1), (0, 0), (0, s[1] - 1), (0, 0)))
    xd = fn.reshape(xd, (n, h * s[0], wd * s[1], c))
    return fn.slice_tensor(
        xd, slices=[slice(None), slice(0, (h - 1) * s[0] + 1), slice(0, (wd - 1) * s[1] + 1)]
    )


def _pad_or_crop(x, lo, hi):
    """NHWC ``x`` with ``lo[i]``/``hi[i]`` rows (i=0) or cols (i=1) added before/after,
    zeros where positive, removed where negative."""
    x = fn.pad(x, ((0, 0), (max(lo[0], 0), max(hi[0], 0)), (max(lo[1], 0), max(hi[1], 0)), (0, 0)))
    if min(lo + hi) >= 0:
        return x
    hh, ww = x.shape[1], x.shape[2]
    return fn.slice_tensor(
        x,
        slices=[
            slice(None),
            slice(max(-lo[0], 0), hh - max(-hi[0], 0)),
            slice(max(-lo[1], 0), ww - max(-hi[1], 0)),
        ],
    )


def _ceil_extra(size, k, s, d, p) -> tuple:
    """PyTorch's ``ceil_mode``: the rows/columns to add after the padding so a last,
    partial window counts, unless it would start past the input and the leading padding.
    PyTorch's count rounds ``span - window`` up over the stride even when the window is the
    longer (a stride-1 window longer than the input has no output: the too-small error)."""
    extra = []
    for i in range(2):
        span = size[i] + p[i][0] + p[i][1]
        eff = d[i] * (k[i] - 1) + 1
        n = (span - eff + s[i] - 1) // s[i] + 1  # (floor division: toward -inf)
        if (n - 1) * s[i] >= size[i] + p[i][0]:
            n -= 1
        extra.append(max((n - 1) * s[i] + eff - span, 0) if n > 0 else 0)
    return tuple(extra)


class _PoolWindow(NamedTuple):
    """The windows a pooling op reduces over NHWC's (H, W), each field a pair: kernel size,
    stride, dilation, padding ``((top, bottom), (left, right))`` and the rows/cols
    ``ceil_mode`` adds after the padding."""

    kernel: tuple
    stride: tuple
    dilation: tuple
    padding: tuple
    extra: tuple


def _pool_window(op, x, kernel_size, stride, padding, dilation=1, ceil_mode=False):
    """The validated window of pooling op ``op`` over ``x``. Any padding, as the original
    Nabla's and JAX's ``reduce_window`` (a window wholly in it is the fill's: -inf for a
    max, 0 for a mean); ``F.max_pool2d``/``F.avg_pool2d`` keep PyTorch's limit
    (:func:`check_pool_padding`)."""
    if x.ndim != 4:
        raise OpError(f"{op}: expects x of shape (N, H, W, C), got {x.shape}")
    k = _pair(kernel_size, "kernel_size", op)
    s = k if stride is None else _pair(stride, "stride", op)
    d = _pair(dilation, "dilation", op)
    p = _padding(padding, op, k, d, s, x.shape[1:3])
    extra = _ceil_extra(x.shape[1:3], k, s, d, p) if ceil_mode else (0, 0)
    return _PoolWindow(k, s, d, p, extra)


def check_pool_padding(op, x, kernel_size, stride, padding, dilation=1) -> None:
    """PyTorch's rule for its pooling functions: no padding past half the window (a window
    could then lie wholly in the padding: a max of nothing or a mean of padding)."""
    x = as_tensor(x, op=op)
    window = _pool_window(op, x, kernel_size, stride, padding, dilation)
    for i in range(2):
        reach = (window.kernel[i] - 1) * window.dilation[i] + 1  # the extent, dilated
        if max(window.padding[i]) > reach // 2:
            raise OpError(
                f"{op}: padding {window.padding[i]} of dim {i + 1} is more than half the "
                f"window ({reach}: kernel {window.kernel[i]}, dilation {window.dilation[i]}) "
                f"for x of shape {x.shape}"
            )


def _pooled(op, x, window: _PoolWindow, fill):
    """The windows of ``x`` stacked: ``(N, OH, OW, KH*KW, C)``, padded with ``fill``."""
    k, s, d, p, extra = window
    full = tuple((p[i][0], p[i][1] + extra[i]) for i in range(2))
    oh, ow = _out_size(x.shape[1:3], k, s, d, full)
    if oh <= 0 or ow <= 0:
        raise OpError(f"{op}: input {x.shape} is too small for kernel {k}")
    if any(full[0] + full[1]):
        x = fn.pad(x, ((0, 0), full[0], full[1], (0, 0)), value=fill)
    return _windows(x, k, s, d, (oh, ow))


def _tiles(x, window: _PoolWindow):
    """For windows that tile ``x`` exactly (stride = kernel, no dilation, padding or
    ``ceil_mode`` rows, sizes divisible: the usual 2x2 pool), the windows stacked tap-major,
    ``(KH*KW, N, OH, OW, C)`` (tap ``i*KW + j`` first, as ``windows`` orders them), by a
    reshape and a transpose; else None. The reduction then runs over whole planes: with
    the taps as a middle axis of ``(N, OH, OW, KH*KW, C)``, NumPy's loops over a pool's
    taps (its max, the gradient's first-maximum mask and scatter) are one short loop per C
    channels, 2-4x slower."""
    k, s, d, p, extra = window
    n, h, w, c = x.shape
    if s != k or d != (1, 1) or any(p[0] + p[1]) or any(extra) or k == (1, 1):
        return None
    if not all(type(v) is int for v in (h, w)) or h % k[0] or w % k[1]:
        return None  # (a symbolic size: the general windows)
    if h < k[0] or w < k[1]:
        return None  # (no window: the general path's error)
    oh, ow = h // k[0], w // k[1]
    split = fn.reshape(x, (n, oh, k[0], ow, k[1], c))
    return fn.reshape(fn.permute(split, (2, 4, 0, 1, 3, 5)), (k[0] * k[1], n, oh, ow, c))


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over ``kernel_size`` windows of NHWC ``x`` (stride defaults to the kernel size).

    Padding is filled with ``-inf`` (float) or the dtype's minimum (integers), so it never
    wins. Where several elements of a window tie for the maximum, the gradient goes to the
    first of them in row-major order, as JAX's and PyTorch's max pooling (``nb.max``
    shares it evenly, as JAX's ``max``).

    Args:
        x: input ``(N, H, W, C)``.
        kernel_size: int or pair ``(KH, KW)``.
        stride: int, pair or None (default: ``kernel_size``).
        padding: int, pair, ``((top, bottom), (left, right))``, ``"SAME"`` or ``"VALID"``.
        dilation: int or pair: spacing between window elements.
        ceil_mode: round the output size up, as PyTorch: a last window that runs past the
            input (but starts inside it or its leading padding) counts.

    Returns:
        ``(N, OH, OW, C)``, of ``x``'s dtype.

    Raises:
        ValueError: (:class:`nabla.OpError`) if ``x`` is not 4-D or is smaller than the
            window.
    """

    x = as_tensor(x, op="max_pool2d")
    if x.dtype.is_bool:  # a window's max is whether any element is True
        win = max_pool2d(x.cast(DType.int8), kernel_size, stride, padding, dilation, ceil_mode)
        return win > 0
    fill = float("-inf") if x.dtype.is_float else np.iinfo(x.dtype.numpy).min
    window = _pool_window("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    tiles = _tiles(x, window)
    if tiles is not None:
        return fn.window_max(tiles, 0)
    return fn.window_max(_pooled("max_pool2d", x, window, fill), 3)


def avg_pool2d(
    x,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
    *,
    dilation=1,
):
    """Mean over ``kernel_size`` windows of NHWC ``x`` (stride defaults to the kernel size).
    The arguments are PyTorch's, in its order (``ceil_mode`` before ``count_include_pad``),
    and the original Nabla's ``dilation`` by keyword.

    Args:
        x: float input ``(N, H, W, C)``.
        kernel_size: int or pair ``(KH, KW)``.
        stride: int, pair or None (default: ``kernel_size``).
        padding: int, pair, ``((top, bottom), (left, right))``, ``"SAME"`` or ``"VALID"``;
            padded positions hold 0.
        ceil_mode: round the output size up, as PyTorch; what a last window has past the
            padding never counts toward its mean.
        count_include_pad: divide by the full window size (default, padding counts toward the
            mean) or, if False, by the number of non-padding elements in each window.
        divisor_override: a positive int that divides every window's sum instead (PyTorch's).
        dilation: int or pair: spacing between window elements (default 1; the original
            Nabla's keyword).

    Returns:
        ``(N, OH, OW, C)``, of ``x``'s dtype.

    Raises:
        TypeError: if ``x`` is not a float tensor.
        ValueError: (:class:`nabla.OpError`) if ``x`` is not 4-D or is smaller than the
            window.
    """

    x = as_tensor(x, op="avg_pool2d")
    if not x.dtype.is_float:
        raise TypeError(f"avg_pool2d: needs a float tensor, got {x.dtype}")
    if divisor_override is not None and (
        isinstance(divisor_override, bool)
        or not isinstance(divisor_override, numbers.Integral)
        or divisor_override <= 0
    ):
        raise OpError(
            f"avg_pool2d: divisor_override must be a positive int, got {divisor_override!r}"
        )
    window = _pool_window("avg_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    if divisor_override is not None:
        tiles = _tiles(x, window)
        total = fn.reduce_sum(tiles, 0) if tiles is not None else None
        if total is None:
            total = fn.reduce_sum(_pooled("avg_pool2d", x, window, 0.0), 3)
        return total * (1.0 / int(divisor_override))
    tiles = _tiles(x, window)
    if tiles is not None:  # (no padding: every window counts its whole size)
        return fn.reduce_sum(tiles, 0) * (1.0 / (window.kernel[0] * window.kernel[1]))
    total = fn.reduce_sum(_pooled("avg_pool2d", x, window, 0.0), 3)
    k, p = window.kernel, window.padding
    if not any(window.extra) and (count_include_pad or not any(p[0] + p[1])):
        return total * (1.0 / (k[0] * k[1]))
    # each window's count: the input, and the padding too with count_include_pad
    counted = fn.ones((1,) + x.shape[1:3] + (1,), dtype=x.dtype)
    if count_include_pad and any(p[0] + p[1]):
        counted = fn.pad(counted, ((0, 0), p[0], p[1], (0, 0)), value=1.0)
        window = window._replace(padding=((0, 0), (0, 0)))
    return total / fn.reduce_sum(_pooled("avg_pool2d", counted, window, 0.0), 3)


provide(globals(), __all__)
