"""Registry-driven: every op, with its float operands sharded over several specs on 1-D (4),
2-D (2x2, 2x3) and 3-D (2x2x2) meshes, equals the unsharded result, forward and under
grad; a gradient is laid out like its primal (no partial axes left)."""

import itertools

import numpy as np
import pytest
from _helpers import array_positions, as_list, entry_params, samples
from op_registry import REGISTRY

import nabla as nb
from nabla import P

MESHES = [
    nb.DeviceMesh("m4", (4,), ("x",)),
    nb.DeviceMesh("m22", (2, 2), ("a", "b")),
    nb.DeviceMesh("m23", (2, 3), ("a", "b")),
    nb.DeviceMesh("m222", (2, 2, 2), ("a", "b", "c")),
]


def _fits(mesh) -> bool:
    """The mesh's devices can be dealt to the running processes (this suite also runs under
    ``mpiexec``, from tests/distributed)."""
    try:
        mesh.process_box(0)
    except nb.ShardingError:
        return False
    return True


MESHES = [m for m in MESHES if _fits(m)]


def _has_operands(entry) -> bool:
    dtype = "float64" if "float64" in entry.dtypes else entry.dtypes[0]
    return any(array_positions(s, "fiub") for s in samples(entry, dtype))


# creation ops (zeros, arange, eye...) take no tensor operand: nothing to shard
ENTRIES = [e for e in REGISTRY.values() if e.ref is not None and _has_operands(e)]


def _specs(shape, mesh):
    """Up to three specs that split ``shape`` exactly: the first dim over the first axis
    that divides it, the last dim over the last axis that divides it, and a dim over two
    axes at once."""
    out = []
    names = mesh.axis_names
    for d in range(len(shape)):
        for a in names:
            if shape[d] % mesh.axis_size(a) == 0 and shape[d] > 1:
                entries = [None] * len(shape)
                entries[d] = a
                out.append(P(*entries))
                break
        if out:
            break
    for d in reversed(range(len(shape))):
        for a in reversed(names):
            if shape[d] % mesh.axis_size(a) == 0 and shape[d] > 1:
                entries = [None] * len(shape)
                entries[d] = a
                if P(*entries) not in out:
                    out.append(P(*entries))
                break
        else:
            continue
        break
    for d in range(len(shape)):
        for a, b in itertools.permutations(names, 2):
            n = mesh.axis_size(a) * mesh.axis_size(b)
            if shape[d] % n == 0 and shape[d] >= n:
                entries = [None] * len(shape)
                entries[d] = (a, b)
                out.append(P(*entries))
                break
        else:
            continue
        break
    return out


def _dtype(entry):
    return "float64" if "float64" in entry.dtypes else entry.dtypes[0]


def _cases(entry, kinds="fiub"):
    """(sample, array positions, mesh, spec per position) with at least one split dim."""
    picked = 0
    for s in samples(entry, _dtype(entry)):
        pos = array_positions(s, kinds)
        if not pos or any(0 in s.args[i].shape for i in pos):
            continue
        if not any(s.args[i].ndim for i in pos):
            continue
        picked += 1
        if picked > 3:
            return
        for mesh in MESHES:
            per_arg = [_specs(s.args[i].shape, mesh) or [P()] for i in pos]
            # the k-th spec of every operand (operands that differ exercise conflicts)
            for k in range(max(len(o) for o in per_arg)):
                specs = [o[min(k, len(o) - 1)] for o in per_arg]
                if all(sp == P() for sp in specs):
                    continue
                yield s, pos, mesh, specs


def _tol(t):
    # blocks sum in another order than the whole value
    return {"atol": 1e-9, "rtol": 1e-9} if t.dtype == nb.float64 else {"atol": 1e-5, "rtol": 1e-5}


def _args(s, pos, mesh, specs):
    args = [nb.constant(a) if isinstance(a, np.ndarray) else a for a in s.args]
    for i, spec in zip(pos, specs, strict=True):
        args[i] = nb.shard(args[i], mesh, spec)
    return args


@pytest.mark.parametrize("entry", entry_params(ENTRIES, "sharded"))
def test_sharded_forward_equals_unsharded(entry):
    n = 0
    for s, pos, mesh, specs in _cases(entry):
        want = as_list(
            entry.fn(
                *[nb.constant(a) if isinstance(a, np.ndarray) else a for a in s.args], **s.kwargs
            )
        )
        got = as_list(entry.fn(*_args(s, pos, mesh, specs), **s.kwargs))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(
                g.numpy(),
                w.numpy(),
                **_tol(w),
                err_msg=f"{entry.name} on {mesh} with {specs}",
            )
        n += 1
    if n == 0:
        pytest.skip(f"{entry.name}: no sample has a dim a mesh axis divides")


GRAD_ENTRIES = [e for e in ENTRIES if e.differentiable]


@pytest.mark.parametrize("entry", entry_params(GRAD_ENTRIES, "sharded_grad"))
def test_sharded_grad_equals_unsharded(entry):
    rng = np.random.default_rng(3)
    n = 0
    for s, pos, mesh, specs in _cases(entry, "f"):
        base = [nb.constant(a) if isinstance(a, np.ndarray) else a for a in s.args]
        outs = as_list(entry.fn(*base, **s.kwargs))
        weights = [rng.standard_normal(o.shape) for o in outs]

        def loss(*floats, args):
            a = list(args)
            for i, v in zip(pos, floats, strict=True):
                a[i] = v
            out = as_list(entry.fn(*a, **s.kwargs))
            return sum(nb.sum(o * nb.constant(w)) for o, w in zip(out, weights, strict=True))

        argn = tuple(range(len(pos)))
        want = nb.grad(loss, argnums=argn)(*[base[i] for i in pos], args=base)
        sharded = _args(s, pos, mesh, specs)
        got = nb.grad(loss, argnums=argn)(*[sharded[i] for i in pos], args=sharded)
        for g, w, i in zip(got, want, pos, strict=True):
            np.testing.assert_allclose(
                g.numpy(),
                w.numpy(),
                **_tol(w),
                err_msg=f"grad of {entry.name} on {mesh} with {specs}",
            )
            assert g.sharding == sharded[i].sharding, (entry.name, g.sharding)
        n += 1
    if n == 0:
        pytest.skip(f"{entry.name}: no sample has a dim a mesh axis divides")
