"""vmap(op) equals stacking op over slices: in_axes 0, a non-zero axis, partial mapping
(unbatched operands are aligned by level), and nested twice."""

import numpy as np
import pytest
from _helpers import array_positions, as_list, entry_params, samples, to_nb
from op_registry import REGISTRY

import nabla as nb
from nabla.runtime.graph import GRAPH

ENTRIES = [e for e in REGISTRY.values() if e.batchable and e.ref is not None]
B = 3


def _batched_args(entry, dtype, sample_index, n):
    """n versions of one sample (same shapes, different values)."""
    return [samples(entry, dtype, seed=k)[sample_index] for k in range(n)]


def _check(entry, dtype, mode):
    base = samples(entry, dtype)
    for si, s in enumerate(base[:4]):
        pos = array_positions(s, "fiub")
        if not pos or any(0 in s.args[i].shape for i in pos):
            continue
        if mode == "partial":
            pos = pos[:1]
        versions = _batched_args(entry, dtype, si, B)
        for v in versions:
            assert [np.shape(a) for a in v.args] == [np.shape(a) for a in s.args]
        axis = -1 if mode == "last" else 0
        stacked = []
        in_axes = []
        for i, a in enumerate(s.args):
            if i in pos:
                arr = np.stack([v.args[i] for v in versions], axis=axis)
                stacked.append(nb.constant(arr))
                in_axes.append(axis)
            else:
                stacked.append(nb.constant(a) if isinstance(a, np.ndarray) else a)
                in_axes.append(None)

        def f(*args):
            return entry.fn(*args, **s.kwargs)

        got = as_list(nb.vmap(f, in_axes=tuple(in_axes))(*stacked))
        loops = []
        for k in range(B):
            args = [
                nb.constant(versions[k].args[i]) if i in pos else stacked[i]
                for i in range(len(s.args))
            ]
            loops.append(as_list(f(*args)))
        for j, g in enumerate(got):
            want = np.stack([lp[j].numpy() for lp in loops])
            np.testing.assert_allclose(
                g.numpy().astype(np.float64),
                want.astype(np.float64),
                atol=1e-5,
                rtol=1e-5,
                err_msg=f"{entry.name} {s}",
            )


@pytest.mark.parametrize("mode", ["axis0", "last", "partial"])
@pytest.mark.parametrize("entry", entry_params(ENTRIES, "vmap"))
def test_vmap_matches_loop(entry, mode):
    _check(entry, entry.dtypes[0], mode)


@pytest.mark.parametrize("entry", entry_params(ENTRIES, "vmap"))
def test_vmap_nested(entry):
    dtype = entry.dtypes[0]
    s = samples(entry, dtype)[min(1, len(samples(entry, dtype)) - 1)]
    pos = array_positions(s, "fiub")
    if not pos or any(0 in s.args[i].shape for i in pos):
        pytest.skip("no non-empty array argument")
    grid = [
        [
            samples(entry, dtype, seed=3 * a + b)[min(1, len(samples(entry, dtype)) - 1)]
            for b in range(3)
        ]
        for a in range(2)
    ]
    stacked = []
    for i, a in enumerate(s.args):
        if i in pos:
            stacked.append(
                nb.constant(np.stack([np.stack([g.args[i] for g in row]) for row in grid]))
            )
        else:
            stacked.append(nb.constant(a) if isinstance(a, np.ndarray) else a)
    axes = tuple(0 if i in pos else None for i in range(len(s.args)))

    def f(*args):
        return entry.fn(*args, **s.kwargs)

    got = as_list(nb.vmap(nb.vmap(f, in_axes=axes), in_axes=axes)(*stacked))
    for j, g in enumerate(got):
        want = np.stack(
            [
                np.stack(
                    [
                        as_list(
                            f(
                                *[
                                    nb.constant(c.args[i]) if i in pos else stacked[i]
                                    for i in range(len(s.args))
                                ]
                            )
                        )[j].numpy()
                        for c in row
                    ]
                )
                for row in grid
            ]
        )
        np.testing.assert_allclose(
            g.numpy().astype(np.float64), want.astype(np.float64), atol=1e-5, rtol=1e-5
        )


@pytest.mark.parametrize("entry", entry_params(ENTRIES, "vmap"))
def test_vmap_never_copies_an_unbatched_operand_per_example(entry, monkeypatch):
    """With one array operand batched and the others not, no unbatched operand is broadcast
    over the batch into anything larger than the op's own result: an unbatched weight, table
    or index array meets the batch inside the kernel (or the batch is folded into a GEMM's
    rows), never as B copies. (Where the result holds the operand per example, as
    ``concatenate`` or ``scatter`` into an unbatched array do, the copy is the result.)"""
    from nabla.ops import batching

    sizes = []
    real = batching.broadcast_levels

    def spy(x, levels):
        out = real(x, levels)
        if not x._impl.levels and out is not x:
            sizes.append((x.shape, int(np.prod(out._impl.shape))))
        return out

    monkeypatch.setattr(batching, "broadcast_levels", spy)
    dtype = entry.dtypes[0]
    for s in samples(entry, dtype)[:4]:
        pos = array_positions(s, "fiub")
        if len(pos) < 2 or any(0 in s.args[i].shape for i in pos):
            continue
        for b in pos:
            args = [to_nb(a) for a in s.args]
            args[b] = nb.constant(np.stack([s.args[b]] * B))
            in_axes = tuple(0 if i == b else None for i in range(len(args)))
            sizes.clear()
            outs = as_list(nb.vmap(lambda *xs: entry.fn(*xs, **s.kwargs), in_axes=in_axes)(*args))
            result = sum(int(np.prod(o._impl.shape)) for o in outs)
            for shape, size in sizes:
                assert size <= result, (
                    f"{entry.name}: vmap over operand {b} broadcast unbatched operand of shape "
                    f"{shape} to {size} elements, more than the result's {result} ({s})"
                )
            # and in the program that ran: no broadcast beyond the result and the inputs
            nb.realize(*outs)
            prog = GRAPH.programs()[-1]
            bound = max([result] + [int(np.prod(i.shape)) for i in prog.inputs])
            for ins in prog.instructions:
                if ins.op in ("broadcast_in_dim", "broadcast_to"):
                    size = int(np.prod(ins.out_specs[0][1]))
                    assert size <= bound, f"{entry.name}: {ins.op} to {ins.out_specs[0][1]} ({s})"
