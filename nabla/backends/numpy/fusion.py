"""Rewrites of a program's instruction list that both NumPy executors apply before they
run it, so the interpreter and the straight-line code (``fast.py``) compute the same bits.

One rewrite so far, ``col2im_of_product``: a convolution's input gradient. Differentiating
``conv2d`` (``windows`` then ``matmul``) gives ``windows_sum(dy @ w.T)``: a GEMM to the
``(..., OH, OW, KH*KW, C)`` stack of window gradients, then each of the ``KH*KW`` taps
added back into the image (col2im). For a stride of 1 the same values are a convolution
of the zero-padded ``dy`` with the flipped filter: ``windows(pad(dy)) @ flip(w)``, the
same multiply-adds, but the taps are copied (``O`` values per tap and position) instead
of added (``C`` values, read and written, per tap and position), and only the positions
a following ``slice`` keeps (the forward's padding cut off again) are computed. Measured
here, float32, one thread: 16 to 32 channels over 64 8x8 images, 340 us against 560 us;
64 to 64 over 16 32x32 images, 0.67x; 64 to 16 channels 0.46x. With many more output
than input channels the copy grows past the adds (3 to 32 channels: 2.7x, 16 to 64:
2x), so the rewrite is taken where ``O <= 2 C``.

A rewrite changes how a value is computed, never which value: the results differ from
the unfused program's only by float rounding (the order of the additions). A program run
one op at a time (``nans.py``) computes the unfused form; ``NABLA_NUMPY_FUSION=0`` turns
the rewrites off (``benchmarks/bench_numpy_fast.py --fusion`` times both).
"""

from __future__ import annotations

import math

import numpy as np

from ...core.config import CONFIG
from ...core.ir import Instruction, Program
from .lowerings import _windows, gemm

__all__ = ["FUSED", "instructions"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _dtype(dt) -> np.dtype:
    return np.dtype(getattr(dt, "numpy", dt))


def col2im_of_product(a, b, *, kernel, dilation, lead, out, rows, cols):
    """``windows_sum(reshape(a @ b))`` for stride 1, cut to ``rows`` x ``cols`` (half-open
    ranges of the image's H and W), computed as a convolution of the padded ``a`` (as
    ``(*lead, OH, OW, O)``) with ``b`` (``(O, KH*KW*C)``) flipped."""
    (kh, kw), (dh, dw), (oh, ow) = kernel, dilation, out
    o, c = a.shape[-1], b.shape[1] // (kh * kw)
    ph, pw = dh * (kh - 1), dw * (kw - 1)
    h, w = rows[1] - rows[0], cols[1] - cols[0]
    # padded row z holds dy's row z + r0 - ph (zeros outside dy)
    padded = np.zeros((*lead, h + ph, w + pw, o), a.dtype)
    dy = a.reshape(*lead, oh, ow, o)
    z0, z1 = max(0, ph - rows[0]), min(h + ph, oh + ph - rows[0])
    x0, x1 = max(0, pw - cols[0]), min(w + pw, ow + pw - cols[0])
    if z1 > z0 and x1 > x0:
        r, s = rows[0] - ph, cols[0] - pw
        padded[..., z0:z1, x0:x1, :] = dy[..., z0 + r : z1 + r, x0 + s : x1 + s, :]
    taps = _windows(
        padded,
        kernel=kernel,
        stride=(1, 1),
        dilation=dilation,
        size=(h + ph, w + pw),
        out=(h, w),
    )
    flipped = b.reshape(o, kh, kw, c)[:, ::-1, ::-1, :].transpose(1, 2, 0, 3)
    flipped = np.ascontiguousarray(flipped).reshape(kh * kw * o, c)
    return gemm(taps.reshape(-1, kh * kw * o), flipped).reshape(*lead, h, w, c)


FUSED: dict = {
    "col2im_of_product": lambda args, kw: [col2im_of_product(*args, **kw)],
}


def instructions(program: Program) -> list:
    """``program``'s own instructions (nested programs are rewritten on their own) with
    every match of a rewrite replaced by one ``Instruction`` of a ``FUSED`` op. The
    program's outputs are never removed. ``NABLA_NUMPY_FUSION=0`` (``CONFIG.numpy_fusion``,
    read as a program is bound) leaves the instructions as they are."""
    steps = list(program.instructions)
    if not CONFIG.numpy_fusion or not any(s.op == "windows_sum" for s in steps):
        return steps
    shapes = {i: tuple(spec.shape) for i, spec in enumerate(program.inputs)}
    for step in steps:
        shapes.update((o, tuple(shape)) for o, (_, shape) in zip(step.outputs, step.out_specs))
    outputs = program.outputs
    producer, reads = {}, {}
    for k, (_, ins, _, outs, _) in enumerate(steps):
        for o in outs:
            producer[o] = k
        for i in ins:
            reads[i] = reads.get(i, 0) + 1
    for o in outputs:
        reads[o] = reads.get(o, 0) + 1
    drop: set = set()
    replace: dict = {}
    for k, step in enumerate(steps):
        if step[0] == "windows_sum":
            found = _col2im_match(k, steps, producer, reads, shapes.__getitem__)
            if found is not None:
                dropped, at, fused = found
                drop.update(dropped)
                replace[at] = Instruction(*fused)
    if not replace:
        return steps
    return [replace.get(k, s) for k, s in enumerate(steps) if k not in drop or k in replace]


def _only_reader(slot, reads) -> bool:
    """Is ``slot`` read once (by one step, or only as an output)?"""
    return reads.get(slot, 0) == 1


def _col2im_match(k, steps, producer, reads, shape_of):
    """``(steps dropped, the step replaced, the fused step)`` for the ``windows_sum`` at
    ``k`` when it adds up a matrix product (through reshapes only) at stride 1, or None."""
    _, (x,), kw, (result,), specs = steps[k]
    if tuple(kw["stride"]) != (1, 1) or _dtype(specs[0][0]) not in _FLOATS:
        return None
    chain = []
    slot = x
    while True:  # back through reshapes read by nothing else, to the product
        j = producer.get(slot)
        if j is None or not _only_reader(slot, reads):
            return None
        chain.append(j)
        op, ins = steps[j][0], steps[j][1]
        if op == "matmul":
            break
        if op != "reshape":
            return None
        slot = ins[0]
    a, b = steps[chain[-1]][1]
    a_shape, b_shape, x_shape = shape_of(a), shape_of(b), shape_of(x)
    if not all(type(d) is int for d in (*a_shape, *b_shape, *x_shape)):
        return None  # a symbolic size
    kh, kw_ = kw["kernel"]
    c, taps = x_shape[-1], x_shape[-2]
    if len(a_shape) < 2 or len(b_shape) != 2 or taps != kh * kw_ or taps < 2:
        return None  # (a stack of rows times one matrix: vmap's batch dims lead the rows)
    if b_shape[1] != taps * c or math.prod(a_shape[:-1]) != math.prod(x_shape[:-2]):
        return None
    if a_shape[-1] > 2 * c:  # the copy would outgrow the adds (see the module's docstring)
        return None
    lead = tuple(x_shape[:-4])
    h, w = kw["size"]
    rows, cols, at, out_slot, out_specs = (0, h), (0, w), k, result, specs
    reader = _single_reader(result, steps, k, reads)
    if reader is not None and steps[reader][0] == "slice":
        cut = _spatial_cut(steps[reader][2]["slices"], lead, (h, w, c))
        if cut is not None:
            rows, cols = cut
            chain.append(k)
            at, out_slot, out_specs = reader, steps[reader][3][0], steps[reader][4]
    fused_kw = {
        "kernel": tuple(kw["kernel"]),
        "dilation": tuple(kw["dilation"]),
        "lead": lead,
        "out": tuple(kw["out"]),
        "rows": rows,
        "cols": cols,
    }
    return chain, at, ("col2im_of_product", (a, b), fused_kw, (out_slot,), out_specs)


def _single_reader(slot, steps, after, reads):
    """The one step after ``after`` reading ``slot`` when nothing else does (an output
    counts as a reader), or None."""
    if reads.get(slot, 0) != 1:
        return None
    for j in range(after + 1, len(steps)):
        if slot in steps[j][1]:
            return j
    return None


def _spatial_cut(slices, lead: tuple, hwc) -> tuple | None:
    """The ``(rows, cols)`` ranges a slice keeps of ``(*lead, H, W, C)`` when it cuts only
    H and W, with step 1; else None."""
    if len(slices) != len(lead) + 3:
        return None
    for (start, step, length), n in zip(slices, lead):
        if (start, step, length) != (0, 1, n):
            return None
    (hs, hstep, hn), (ws, wstep, wn), (cs, cstep, cn) = slices[len(lead) :]
    h, w, c = hwc
    if hstep != 1 or wstep != 1 or (cs, cstep, cn) != (0, 1, c) or hn < 1 or wn < 1:
        return None
    if hs < 0 or ws < 0 or hs + hn > h or ws + wn > w:
        return None
    return (hs, hs + hn), (ws, ws + wn)
