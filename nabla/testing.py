"""``nb.testing``: compare results across Nabla, JAX, PyTorch and NumPy in tests.

- :func:`assert_allclose` compares two values leaf by leaf: Nabla tensors (sharded ones by
  their global value), JAX arrays, PyTorch tensors, NumPy arrays, Python scalars, and pytrees
  of them (lists, tuples, dicts, modules, registered nodes). A failure names the path of the
  leaf, both shapes and dtypes, how many elements differ, and the largest absolute and
  relative errors with where they are.
- :func:`batch_realize` computes every pending Nabla tensor in some pytrees in one graph
  (:func:`nabla.realize`), so comparing many results runs one evaluation, not one per leaf.

Neither JAX nor PyTorch is imported here: a PyTorch tensor is recognized only when ``torch``
is already loaded (it must be, to have made one); JAX arrays convert through ``__array__``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from .core.pytree import keystr, tree_flatten_with_path, tree_structure
from .runtime.tensor import Tensor
from .runtime.tensor import realize as _realize

__all__ = ["assert_allclose", "batch_realize"]


def batch_realize(*objs: Any) -> None:
    """Compute all pending Nabla tensors in ``objs`` in one evaluation.

    A thin alias of :func:`nabla.realize` for the original Nabla's spelling: one graph runs
    for everything, instead of one per tensor when each is converted in turn. With no
    arguments it does nothing (``nb.realize()`` realizes every pending tensor).

    Args:
        *objs: pytrees (tensors, lists, tuples, dicts, modules, ...); leaves that are not
            Nabla tensors (JAX arrays, NumPy arrays, numbers) are ignored.
    """
    if objs:
        _realize(*objs)


def assert_allclose(
    actual: Any,
    expected: Any,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    equal_nan: bool = False,
    realize: bool = True,
) -> None:
    """Assert that ``actual`` and ``expected`` are equal within tolerance, leaf by leaf.

    Each pair of leaves must satisfy ``|actual - expected| <= atol + rtol * |expected|``
    elementwise (NumPy's ``assert_allclose``); shapes must match, except that a scalar is
    compared with every element of the other side. Dtypes may differ (they are named in a
    failure): values are compared in float64 (complex128 for complex values).

    Args:
        actual: the value computed: a Nabla tensor, JAX array, PyTorch tensor (detached, moved
            to the CPU), NumPy array, Python scalar, or a pytree of these.
        expected: the reference value, of the same kinds and pytree structure: dicts must have
            the same keys, lists and tuples the same lengths (a list matches a tuple); a list
            or tuple compared with an array is read as an array (as NumPy would).
        rtol: relative tolerance.
        atol: absolute tolerance.
        equal_nan: True to count NaNs at the same places as equal.
        realize: True (default) to compute every pending Nabla tensor on both sides first in
            one evaluation (:func:`batch_realize`); False when the caller has already done so
            (any tensor still pending is then computed on its own when it is read).

    Raises:
        AssertionError: naming the path of the first leaf that differs (``[0]['w']``), its
            shapes, dtypes, the number of differing elements and the largest absolute and
            relative errors; or a pytree structure that does not match.
    """
    if realize:
        batch_realize(actual, expected)
    tol = (float(rtol), float(atol), bool(equal_nan))
    _compare(actual, expected, "", tol)


# ----------------------------------------------------------------------------- the walk
def _is_node(x: Any) -> bool:
    """True for a container compared part by part (not an array-like leaf)."""
    if isinstance(x, Mapping | list | tuple):
        return True
    if x is None or _is_arraylike(x):
        return False
    return tree_structure(x).node_data() is not None  # (a node, even one without children)


def _is_arraylike(x: Any) -> bool:
    return (
        isinstance(x, Tensor | np.ndarray | np.generic | bool | int | float | complex)
        or _is_torch(x)
        or hasattr(x, "__array__")
    )


def _is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _where(path: str) -> str:
    return f"at {path}" if path else "at the root"


def _compare(a: Any, e: Any, path: str, tol) -> None:
    if a is None or e is None:
        if a is not e:
            raise AssertionError(
                f"assert_allclose: {_where(path)}: actual is {_kind(a)}, expected {_kind(e)}"
            )
        return
    a_node, e_node = _is_node(a), _is_node(e)
    if not a_node and not e_node:
        _compare_leaves(a, e, path, tol)
        return
    if isinstance(a, Mapping) and isinstance(e, Mapping):
        missing = [k for k in e if k not in a]
        extra = [k for k in a if k not in e]
        if missing or extra:
            raise AssertionError(
                f"assert_allclose: {_where(path)}: dict keys differ: actual lacks "
                f"{missing}, has extra {extra}"
            )
        for k in e:
            _compare(a[k], e[k], f"{path}[{k!r}]", tol)
        return
    if isinstance(a, list | tuple) and isinstance(e, list | tuple):
        if len(a) != len(e):
            raise AssertionError(
                f"assert_allclose: {_where(path)}: lengths differ: actual is a "
                f"{type(a).__name__} of {len(a)}, expected a {type(e).__name__} of {len(e)}"
            )
        for i, (x, y) in enumerate(zip(a, e, strict=True)):
            _compare(x, y, f"{path}[{i}]", tol)
        return
    if isinstance(a, list | tuple) and not e_node:
        _compare_leaves(_stacked(a, path, "actual"), e, path, tol)
        return
    if isinstance(e, list | tuple) and not a_node:
        _compare_leaves(a, _stacked(e, path, "expected"), path, tol)
        return
    # other pytree nodes (modules, named tuples, registered classes): the same leaf paths
    if a_node and e_node and type(a) is type(e):
        a_leaves, _ = tree_flatten_with_path(a)
        e_leaves, _ = tree_flatten_with_path(e)
        a_paths = [keystr(p) for p, _ in a_leaves]
        e_paths = [keystr(p) for p, _ in e_leaves]
        if a_paths == e_paths:
            for p, (_, x), (_, y) in zip(a_paths, a_leaves, e_leaves, strict=True):
                _compare(x, y, path + p, tol)
            return
        raise AssertionError(
            f"assert_allclose: {_where(path)}: {type(a).__name__} leaves differ: actual has "
            f"{a_paths}, expected {e_paths}"
        )
    raise AssertionError(
        f"assert_allclose: {_where(path)}: structures differ: actual is {_kind(a)}, expected "
        f"{_kind(e)}"
    )


def _kind(x: Any) -> str:
    if x is None:
        return "None"
    if isinstance(x, list | tuple):
        return f"a {type(x).__name__} of {len(x)}"
    if isinstance(x, Mapping):
        return f"a {type(x).__name__} with keys {list(x)}"
    if _is_node(x):
        return f"a {type(x).__name__}"
    return f"an array-like {type(x).__name__}"


def _stacked(seq, path: str, side: str) -> np.ndarray:
    """A list/tuple compared with an array: its leaves as one NumPy array."""

    def conv(x):
        if isinstance(x, list | tuple):
            return [conv(v) for v in x]
        if _is_node(x) or x is None:
            raise AssertionError(
                f"assert_allclose: {_where(path)}: {side} is a {type(seq).__name__} holding "
                f"{_kind(x)}, compared with an array"
            )
        return _to_numpy(x)

    try:
        return np.asarray(conv(seq))
    except ValueError as err:
        raise AssertionError(
            f"assert_allclose: {_where(path)}: {side} is a ragged {type(seq).__name__}, "
            f"compared with an array ({err})"
        ) from None


# ----------------------------------------------------------------------------- leaves
def _to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, Tensor):
        arr = np.asarray(x)
    elif _is_torch(x):
        t = x.detach().cpu()
        if t.dtype.is_floating_point and t.dtype.itemsize < 4:  # bfloat16 has no NumPy twin
            t = t.float()
        arr = t.numpy()
    else:
        arr = np.asarray(x)
    if arr.dtype.kind not in "biufc":  # bfloat16 from ml_dtypes and the like
        try:
            arr = arr.astype(np.float32)
        except (TypeError, ValueError):
            raise TypeError(
                f"assert_allclose: cannot compare values of dtype {arr.dtype} ({type(x).__name__})"
            ) from None
    return arr


def _dtype_name(x: Any, arr: np.ndarray) -> str:
    if isinstance(x, Tensor):
        return x.dtype.name
    d = getattr(x, "dtype", None)
    if d is not None:
        return str(d).replace("torch.", "")
    return type(x).__name__  # a Python scalar


def _compare_leaves(a: Any, e: Any, path: str, tol) -> None:
    rtol, atol, equal_nan = tol
    an, en = _to_numpy(a), _to_numpy(e)
    head = f"assert_allclose: {_where(path)}"
    dtypes = f"dtype {_dtype_name(a, an)} vs {_dtype_name(e, en)}"
    if an.shape != en.shape and an.ndim and en.ndim:
        raise AssertionError(f"{head}: shapes differ: actual {an.shape}, expected {en.shape}")
    complex_ = an.dtype.kind == "c" or en.dtype.kind == "c"
    wide = np.complex128 if complex_ else np.float64
    af, ef = np.broadcast_arrays(an.astype(wide), en.astype(wide))
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isclose(af, ef, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if close.all():
        return
    bad = ~close
    n_bad, n = int(bad.sum()), close.size
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        err = np.abs(af - ef)
        rel = err / np.abs(ef)
    lines = [
        f"{head}: not close (rtol={rtol:g}, atol={atol:g}): {n_bad} of {n} elements differ "
        f"({100.0 * n_bad / n:.3g}%)",
        f"  shape {an.shape} vs {en.shape}, {dtypes}",
    ]
    finite = bad & np.isfinite(err)
    if finite.any():
        i = np.unravel_index(np.argmax(np.where(finite, err, -1.0)), err.shape)
        lines.append(
            f"  max abs error {err[i]:.6g} at index {_index(i)}: actual {_val(af[i])}, "
            f"expected {_val(ef[i])}"
        )
        rel_ok = finite & np.isfinite(rel)
        if rel_ok.any():
            j = np.unravel_index(np.argmax(np.where(rel_ok, rel, -1.0)), rel.shape)
            lines.append(f"  max rel error {rel[j]:.6g} at index {_index(j)}")
    nonfinite = bad & ~np.isfinite(err)
    if nonfinite.any():
        k = np.unravel_index(np.argmax(nonfinite), err.shape)
        lines.append(
            f"  {int(nonfinite.sum())} mismatch(es) involve NaN/Inf; first at index "
            f"{_index(k)}: actual {_val(af[k])}, expected {_val(ef[k])}"
            + ("" if equal_nan else " (equal_nan=True counts NaNs in the same places as equal)")
        )
    raise AssertionError("\n".join(lines))


def _index(i: tuple) -> tuple:
    return tuple(int(v) for v in i)


def _val(v) -> str:
    return f"{v.item():.9g}"
