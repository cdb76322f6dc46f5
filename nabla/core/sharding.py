"""Sharding types and factor propagation (pure data and arithmetic; runs nothing).

- ``DeviceMesh(name, shape, axis_names)``: a named grid of devices (flat indices, row-major).
- ``PartitionSpec``/``P``: JAX's user-facing spec, one entry per leading dim (an axis name,
  ``None`` or a tuple of names); a spec shorter than the rank replicates the trailing dims.
- ``DimSpec``: the mesh axes one dim is split over, major to minor, whether propagation may
  change them (open) or not (closed), and its priority (lower numbers propagate first).
- ``ShardingSpec``: a mesh, one ``DimSpec`` per *physical* dim (vmap batch dims first) and
  the *partial* axes with their reduction kind (``sum``, ``max``, ``min``, ``prod``): over a
  partial axis each device holds a term whose reduction is the value.
- ``FactorRule``: an op's einsum-like sharding template (``"m k, k n -> m n"``), and
  ``propagate``: which mesh axes each factor gets, what each input must be resharded to, and
  the output's sharding and partial axes.
- ``collective_bytes``: the ring cost model (bytes each device sends).

Physical layout of a sharded value (the invariant the backends rely on): one buffer of shape
``mesh.local_mesh_shape + local_shape``, the leading mesh dims indexing the devices this
process holds (all of them in one process: ``local_mesh_shape == shape``); a dim split over axes
``(a, b)`` holds block ``i_a * size_b + i_b`` on device ``(.., i_a, .., i_b, ..)``; devices that
replicate a value hold equal copies. Splits are exact: a dim that its axes do not divide is
refused with an error naming the dim and the axes.
"""

from __future__ import annotations

import sys
from math import prod
from typing import NamedTuple

import numpy as np

__all__ = [
    "DeviceMesh",
    "PartitionSpec",
    "P",
    "DimSpec",
    "ShardingSpec",
    "ShardingError",
    "FactorRule",
    "propagate",
    "Propagation",
    "collective_bytes",
    "REDUCE_KINDS",
    "PROCESS",
]


class _Process:
    """This process's place among the processes running one SPMD program (set by
    ``nb.distributed.initialize``; one process of one by default). Pure data: the transport
    lives in ``nabla.backends.mpi``."""

    __slots__ = ("index", "count")

    def __init__(self):
        self.index = 0
        self.count = 1

    def set(self, index: int, count: int) -> None:
        if not 0 <= index < count:
            raise ValueError(f"process index {index} is not in [0, {count})")
        self.index, self.count = int(index), int(count)


PROCESS = _Process()

REDUCE_KINDS = ("sum", "max", "min", "prod")


class ShardingError(ValueError):
    """A bad mesh, spec or sharded operand (unknown axis, axis used twice, uneven split,
    tensors on different meshes, a collective over an axis the tensor is not sharded on)."""


class DeviceMesh:
    """A named grid of devices: ``DeviceMesh("mesh", (2, 2), ("dp", "tp"))``.

    ``devices`` holds the flat device indices in the mesh's shape (row-major). In one process
    the mesh is simulated: every device's buffer lives in it. Over several processes
    (``nb.distributed``), process ``p`` of ``P`` holds the flat devices
    ``[p * size / P, (p + 1) * size / P)``, which must form a box of the mesh
    (``local_box``): e.g. a ``(2, 2)`` mesh over 2 processes gives each a row.

    Args:
        name: the mesh's name (meshes are equal when name, shape and axis names are).
        shape: devices per mesh axis (an int for a 1-D mesh).
        axis_names: one distinct name per mesh axis.
    """

    def __init__(self, name: str, shape, axis_names):
        if isinstance(shape, int):
            shape = (shape,)
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        if not isinstance(shape, tuple | list):
            raise ShardingError(f"DeviceMesh {name!r}: shape must be positive ints, got {shape!r}")
        if not isinstance(axis_names, tuple | list):
            raise ShardingError(f"DeviceMesh {name!r}: axis names must be strings: {axis_names!r}")
        shape = tuple(shape)
        axis_names = tuple(axis_names)
        if not shape or not all(
            isinstance(s, int | np.integer) and not isinstance(s, bool) and s >= 1 for s in shape
        ):
            raise ShardingError(f"DeviceMesh {name!r}: shape must be positive ints, got {shape}")
        if len(axis_names) != len(shape):
            raise ShardingError(
                f"DeviceMesh {name!r}: {len(shape)} dims {shape} but {len(axis_names)} axis "
                f"names {axis_names}"
            )
        if not all(isinstance(a, str) and a for a in axis_names):
            raise ShardingError(f"DeviceMesh {name!r}: axis names must be strings: {axis_names}")
        if len(set(axis_names)) != len(axis_names):
            raise ShardingError(f"DeviceMesh {name!r}: axis names repeat: {axis_names}")
        self.name = str(name)
        self.shape = tuple(int(s) for s in shape)
        self.axis_names = axis_names
        self._key = (self.name, self.shape, self.axis_names)
        self._boxes: dict = {}

    @property
    def size(self) -> int:
        """The number of devices."""
        return prod(self.shape)

    # ------------------------------------------------------------------ processes
    def process_box(self, process: int, count: int | None = None) -> tuple:
        """``((start, size), ...)`` per mesh dim: the devices process ``process`` of
        ``count`` (default: the running processes) holds. A clear error when the mesh's
        devices cannot be dealt to the processes as equal boxes."""
        count = PROCESS.count if count is None else count
        key = (process, count)
        box = self._boxes.get(key)
        if box is not None:
            return box
        if self.size % count:
            raise ShardingError(
                f"DeviceMesh {self.name!r}{self.shape}: {self.size} devices cannot be dealt "
                f"evenly to {count} processes"
            )
        per = self.size // count
        sizes = [1] * self.ndim
        rest = per
        for k in range(self.ndim - 1, -1, -1):
            if rest % self.shape[k] == 0:
                sizes[k] = self.shape[k]
                rest //= self.shape[k]
                continue
            if self.shape[k] % rest:
                raise ShardingError(
                    f"DeviceMesh {self.name!r}{self.shape}: {per} devices per process (of "
                    f"{count}) do not form a box of the mesh; make the process count a "
                    "product of leading mesh axes (e.g. one process per row)"
                )
            sizes[k] = rest
            rest = 1
            break
        origin = np.unravel_index(process * per, self.shape)
        box = tuple((int(o), s) for o, s in zip(origin, sizes, strict=True))
        self._boxes[key] = box
        return box

    @property
    def local_box(self) -> tuple:
        """``((start, size), ...)`` per mesh dim: the devices this process holds."""
        return self.process_box(PROCESS.index)

    @property
    def local_mesh_shape(self) -> tuple:
        """The mesh dims of a sharded buffer in this process (``shape`` in one process)."""
        if PROCESS.count == 1:
            return self.shape
        return tuple(s for _, s in self.local_box)

    @property
    def spans_processes(self) -> bool:
        """True when the mesh's devices are dealt to several processes."""
        return PROCESS.count > 1

    @property
    def local_devices(self) -> tuple:
        """The flat indices of the devices this process holds (all in one process)."""
        if PROCESS.count == 1:
            return tuple(range(self.size))
        grid = self.devices[tuple(slice(o, o + s) for o, s in self.local_box)]
        return tuple(int(d) for d in grid.ravel())

    def process_of(self, device: int) -> int:
        """The process that holds flat device ``device``."""
        return device // (self.size // PROCESS.count)

    @property
    def ndim(self) -> int:
        """The number of mesh axes."""
        return len(self.shape)

    @property
    def devices(self) -> np.ndarray:
        """The flat device indices laid out in the mesh's shape."""
        return np.arange(self.size).reshape(self.shape)

    def axis(self, name: str, op: str = "DeviceMesh") -> int:
        """The position of mesh axis ``name``; a clear error for an unknown one."""
        try:
            return self.axis_names.index(name)
        except ValueError:
            raise ShardingError(
                f"{op}: unknown mesh axis {name!r}; mesh {self.name!r} has axes {self.axis_names}"
            ) from None

    def axis_size(self, name: str) -> int:
        """How many devices lie along mesh axis ``name``."""
        return self.shape[self.axis(name)]

    def get_axis_size(self, name: str) -> int:
        """``axis_size`` (the original Nabla's spelling)."""
        return self.axis_size(name)

    def coords(self, device: int) -> tuple:
        """The mesh coordinates of flat device index ``device``."""
        return tuple(int(c) for c in np.unravel_index(device, self.shape))

    def __eq__(self, other):
        return isinstance(other, DeviceMesh) and other._key == self._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return f"DeviceMesh({self.name!r}, {self.shape}, {self.axis_names})"


class PartitionSpec(tuple):
    """JAX's ``PartitionSpec``: one entry per leading dim (an axis name, ``None`` for
    replicated, or a tuple of names splitting one dim over several axes, major first)."""

    def __new__(cls, *entries):
        for e in entries:
            ok = (
                e is None
                or isinstance(e, str)
                or isinstance(e, _Unconstrained)
                or (isinstance(e, tuple | list) and all(isinstance(a, str) for a in e))
            )
            if not ok:
                raise ShardingError(
                    "PartitionSpec: an entry is an axis name, None, a tuple of names or "
                    f"P.UNCONSTRAINED; got {e!r}"
                )
        return super().__new__(cls, tuple(tuple(e) if isinstance(e, list) else e for e in entries))

    def _canonical(self) -> tuple:
        # a one-name tuple splits a dim exactly as the name does: P(("x",)) == P("x"), as JAX
        return tuple(e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in self)

    def __eq__(self, other):
        if isinstance(other, PartitionSpec):
            return self._canonical() == other._canonical()
        return tuple.__eq__(self, other)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash(self._canonical())

    def __repr__(self):
        return "P(" + ", ".join(repr(e) for e in self) + ")"

    def __getnewargs__(self):
        # pickle and copy rebuild a tuple subclass from these: the entries, one argument
        # each, as ``P(...)`` takes them (the whole tuple as one argument was refused)
        return tuple(self)


P = PartitionSpec


class _Unconstrained:
    """``P.UNCONSTRAINED``: a dim whose layout is left open (JAX's meaning)."""

    __slots__ = ()

    def __repr__(self):
        return "P.UNCONSTRAINED"

    def __reduce__(self):
        return "UNCONSTRAINED"


UNCONSTRAINED = _Unconstrained()
PartitionSpec.UNCONSTRAINED = UNCONSTRAINED


class DimSpec:
    """The mesh axes one dim is split over (major to minor), and how propagation may treat
    the dim (Shardy's open/closed dims with priorities).

    Args:
        axes: the mesh axis names (a name, a tuple/list of names; ``[]`` or None: replicated).
        is_open: False (closed): ops that read the value keep exactly ``axes`` on this dim
            (propagation never adds axes to it, and the dim's factor takes ``axes``); True
            (open): propagation may extend or replace them (a replicated open dim is sliced
            to match another operand for free).
        priority: a non-negative int; lower numbers propagate first (their factors are
            decided, and claim their mesh axes, before those of higher numbers). A closed
            replicated dim has nothing to propagate: its priority must be 0.

    ``DimSpec(["x"])`` is closed; a ``P(...)`` entry is open (see ``ShardingSpec``).
    ``d.axes`` reads the names as a new list (the original Nabla's type: ``d.axes == ["x"]``);
    the ``DimSpec`` itself is immutable and hashable.
    """

    __slots__ = ("_axes", "is_open", "priority")

    def __init__(self, axes=(), is_open: bool = False, priority: int = 0):
        if axes is None:
            axes = ()
        elif isinstance(axes, str):
            axes = (axes,)
        if not isinstance(axes, tuple | list) or not all(isinstance(a, str) for a in axes):
            raise ShardingError(f"DimSpec: axes are mesh axis names; got {axes!r}")
        if not isinstance(is_open, bool | np.bool_):
            raise ShardingError(f"DimSpec: is_open must be a bool, got {is_open!r}")
        if isinstance(priority, bool) or not isinstance(priority, int | np.integer) or priority < 0:
            raise ShardingError(f"DimSpec: priority must be an int >= 0, got {priority!r}")
        if not axes and not is_open and priority:
            raise ShardingError(
                f"DimSpec: a closed replicated dim cannot have a priority (got {priority}); "
                "it has nothing to propagate"
            )
        self._axes = tuple(axes)
        self.is_open = bool(is_open)
        self.priority = int(priority)

    @property
    def axes(self) -> list:
        """The mesh axis names, major to minor (a new list; ``[]``: replicated)."""
        return list(self._axes)

    @staticmethod
    def from_raw(raw) -> DimSpec:
        """A ``DimSpec`` from a ``P`` entry: a ``DimSpec`` (returned as is), None
        (replicated), a name, or a tuple/list of names; closed (the ``DimSpec`` default);
        ``P.UNCONSTRAINED`` gives an open replicated dim."""
        if isinstance(raw, DimSpec):
            return raw
        if raw is UNCONSTRAINED:
            return DimSpec((), is_open=True)
        if raw is None or isinstance(raw, str | tuple | list):
            return DimSpec(raw)
        raise ShardingError(
            f"DimSpec.from_raw: expected None, a name, a tuple/list of names or a DimSpec; "
            f"got {raw!r}"
        )

    def is_replicated(self) -> bool:
        """True when the dim is split over no mesh axis."""
        return not self._axes

    def __eq__(self, other):
        return (
            isinstance(other, DimSpec)
            and other._axes == self._axes
            and other.is_open == self.is_open
            and other.priority == self.priority
        )

    def __hash__(self):
        return hash((self._axes, self.is_open, self.priority))

    def __repr__(self):
        extra = ", is_open=True" if self.is_open else ""
        extra += f", priority={self.priority}" if self.priority else ""
        return f"DimSpec({list(self._axes)}{extra})"


def _entry_axes(entry) -> tuple:
    if entry is None or entry is UNCONSTRAINED:
        return ()
    if isinstance(entry, DimSpec):
        return entry._axes
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


def _axis_names_only(value) -> bool:
    """Whether ``value`` is a set of axis names or a non-empty sequence of names (the
    original Nabla's replicated axes), not partial terms (a mapping, or pairs)."""
    if isinstance(value, set | frozenset):
        return True
    return (
        isinstance(value, list | tuple) and bool(value) and all(isinstance(a, str) for a in value)
    )


class ShardingSpec:
    """How a value is laid out on a mesh, and how propagation may treat that layout. Mesh
    axes used by neither ``dims`` nor ``partial`` are replicated. Immutable and hashable.

    Each dim is open or closed, with a priority (``DimSpec``): an entry given as a
    ``DimSpec`` keeps its ``is_open``/``priority``; a name, tuple, None or
    ``P.UNCONSTRAINED`` entry is open at priority 0, which is how ops treat every layout
    they produce (see ``propagate``).

    Args:
        mesh: the ``DeviceMesh``.
        dims: per dim, the mesh axes it is split over (a ``DimSpec``, a tuple/list of names,
            a name, None or ``P.UNCONSTRAINED``).
        partial: ``{axis: kind}`` (or pairs): over these axes each device holds a term, and
            the value is their reduction ``kind`` (``sum``, ``max``, ``min``, ``prod``).
        replicated_axes: mesh axes the value is explicitly replicated over (Shardy's
            ``replicated={...}``): propagation never splits one of its dims over them. An
            axis here may not split a dim or be partial.
        partial_sum_axes: the original Nabla's: axes partial with kind ``sum``. Its
            positional order, ``ShardingSpec(mesh, dim_specs, replicated_axes,
            partial_sum_axes)``, is taken too: a set of axis names (or names) third is
            ``replicated_axes``, as ``partial`` is a mapping or ``(axis, kind)`` pairs.
        op: the op named in errors.
        dim_specs: the original Nabla's keyword for ``dims``.
    """

    __slots__ = (
        "mesh",
        "dims",
        "partial",
        "open",
        "priority",
        "fixed_replicated",
        "_hash",
        "_splits",
    )

    def __init__(
        self,
        mesh: DeviceMesh,
        dims=None,
        partial=(),
        partial_sum_axes=None,
        *,
        replicated_axes=(),
        op: str = "ShardingSpec",
        dim_specs=None,
    ):
        if not isinstance(mesh, DeviceMesh):
            raise ShardingError(f"{op}: expected a DeviceMesh, got {type(mesh).__name__}")
        if dim_specs is not None:
            if dims is not None:
                raise TypeError(f"{op}: dims given twice (and as dim_specs=)")
            dims = dim_specs
        if dims is None:
            raise TypeError(f"{op}: missing dims (one entry per dim)")
        if _axis_names_only(partial):  # the original's third: replicated axes, not terms
            if replicated_axes:
                raise TypeError(f"{op}: replicated axes given twice (and replicated_axes=)")
            partial, replicated_axes = (), tuple(partial)
        if partial_sum_axes:
            summed = {
                a: "sum"
                for a in (
                    (partial_sum_axes,) if isinstance(partial_sum_axes, str) else partial_sum_axes
                )
            }
            partial = {**dict(partial.items() if isinstance(partial, dict) else partial), **summed}
        self.mesh = mesh
        dims = tuple(dims)
        self.dims = tuple(_entry_axes(d) for d in dims)
        self.open = tuple(d.is_open if isinstance(d, DimSpec) else True for d in dims)
        self.priority = tuple(d.priority if isinstance(d, DimSpec) else 0 for d in dims)
        if isinstance(replicated_axes, str):
            replicated_axes = (replicated_axes,)
        fixed = set(replicated_axes or ())
        for a in fixed:
            mesh.axis(a, op)
        self.fixed_replicated = tuple(a for a in mesh.axis_names if a in fixed)
        part = dict(partial.items() if isinstance(partial, dict) else partial)
        for ax, kind in part.items():
            mesh.axis(ax, op)
            if kind not in REDUCE_KINDS:
                raise ShardingError(f"{op}: partial kind {kind!r} is not one of {REDUCE_KINDS}")
        self.partial = tuple((a, part[a]) for a in mesh.axis_names if a in part)
        used = [a for d in self.dims for a in d] + [a for a, _ in self.partial]
        for a in used:
            mesh.axis(a, op)
        dup = sorted({a for a in used if used.count(a) > 1})
        if dup:
            raise ShardingError(f"{op}: mesh axis {dup[0]!r} is used twice in {self}")
        clash = [a for a in self.fixed_replicated if a in used]
        if clash:
            raise ShardingError(
                f"{op}: mesh axis {clash[0]!r} is explicitly replicated but also splits a dim "
                f"or is partial in {self}"
            )
        self._hash = hash((mesh, self.dims, self.partial) + self._constraints())
        # devices each dim is split over (read on every sharded op: computed once)
        self._splits = tuple(prod(mesh.axis_size(a) for a in d) for d in self.dims)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_spec(
        cls,
        mesh: DeviceMesh,
        spec,
        ndim: int,
        op: str = "shard",
        *,
        current=None,
        replicated_axes=(),
    ) -> ShardingSpec:
        """A ``ShardingSpec`` for a rank-``ndim`` value from a ``P``, a list of ``DimSpec``/
        entries, or a ``ShardingSpec`` (whose mesh must be ``mesh``).

        ``current``: the value's present per-dim axes (or None): a ``P.UNCONSTRAINED`` entry
        keeps them (less the axes other entries name), as JAX leaves an unconstrained dim as
        it is; without ``current`` it is replicated. ``replicated_axes``: see the class."""
        if isinstance(spec, ShardingSpec):
            if spec.mesh != mesh:
                raise ShardingError(f"{op}: spec is on {spec.mesh}, not on {mesh}")
            if len(spec.dims) != ndim:
                raise ShardingError(
                    f"{op}: spec {spec} has {len(spec.dims)} dims, value has {ndim}"
                )
            return spec
        if spec is None:
            entries = ()
        elif isinstance(spec, str | DimSpec):
            entries = (spec,)
        elif isinstance(spec, tuple | list):
            entries = tuple(spec)
        else:
            raise ShardingError(
                f"{op}: a spec is a P(...), a list of entries or a ShardingSpec; got {spec!r}"
            )
        for e in entries:
            ok = (
                e is None
                or e is UNCONSTRAINED
                or isinstance(e, str | DimSpec)
                or (isinstance(e, tuple | list) and all(isinstance(a, str) for a in e))
            )
            if not ok:
                raise ShardingError(
                    f"{op}: spec {_show(spec)}: an entry is an axis name, None or a tuple of "
                    f"names; got {e!r}"
                )
        if len(entries) > ndim:
            raise ShardingError(
                f"{op}: spec {_show(spec)} has {len(entries)} entries but the value has rank {ndim}"
            )
        entries = entries + (None,) * (ndim - len(entries))
        if current is not None and any(e is UNCONSTRAINED for e in entries):
            named = {a for e in entries for a in _entry_axes(e)}
            entries = tuple(
                DimSpec(tuple(a for a in current[i] if a not in named), is_open=True)
                if e is UNCONSTRAINED
                else e
                for i, e in enumerate(entries)
            )
        return cls(mesh, entries, replicated_axes=replicated_axes, op=op)

    @classmethod
    def replicated(cls, mesh: DeviceMesh, ndim: int) -> ShardingSpec:
        """The spec of an ``ndim``-dim value every device of ``mesh`` holds whole."""
        return cls(mesh, ((),) * ndim)

    # ------------------------------------------------------------------ queries
    @property
    def ndim(self) -> int:
        """The number of dims the spec places (physical: vmap batch dims included)."""
        return len(self.dims)

    @property
    def partial_axes(self) -> tuple:
        """The mesh axes over which devices hold terms still to be reduced."""
        return tuple(a for a, _ in self.partial)

    @property
    def partial_sum_axes(self) -> frozenset:
        """The axes partial with kind ``sum`` (the original Nabla's attribute)."""
        return frozenset(a for a, kind in self.partial if kind == "sum")

    @property
    def partial_kinds(self) -> dict:
        """``{axis: kind}`` of the partial axes (``"sum"``, ``"max"``, ``"min"``, ``"prod"``)."""
        return dict(self.partial)

    @property
    def sharded_axes(self) -> tuple:
        """Every mesh axis some dim is split over, dim by dim."""
        return tuple(a for d in self.dims for a in d)

    @property
    def replicated_axes(self) -> tuple:
        """The mesh axes along which devices hold equal copies (neither split nor partial;
        the explicitly replicated ``fixed_replicated`` among them)."""
        used = set(self.sharded_axes) | set(self.partial_axes)
        return tuple(a for a in self.mesh.axis_names if a not in used)

    @property
    def is_replicated(self) -> bool:
        """True when every device holds the whole value."""
        return not self.partial and not any(self.dims)

    def is_fully_replicated(self) -> bool:
        """``is_replicated`` (the original Nabla's spelling, a method there)."""
        return self.is_replicated

    @property
    def dim_specs(self) -> tuple:
        """One ``DimSpec`` per dim: its axes, ``is_open`` and ``priority``."""
        return tuple(
            DimSpec(d, is_open=o, priority=p)
            for d, o, p in zip(self.dims, self.open, self.priority, strict=True)
        )

    @property
    def is_constrained(self) -> bool:
        """True when a dim is closed, has a priority, or an axis is explicitly replicated
        (a layout ops produce is never constrained)."""
        return bool(self.fixed_replicated) or not all(self.open) or any(self.priority)

    def _constraints(self) -> tuple:
        return (self.open, self.priority, self.fixed_replicated) if self.is_constrained else ()

    def same_layout(self, other: ShardingSpec) -> bool:
        """True when ``other`` places the value the same way (mesh, dims, partial axes),
        whatever either's open/closed dims and priorities."""
        return (
            isinstance(other, ShardingSpec)
            and other.mesh == self.mesh
            and other.dims == self.dims
            and other.partial == self.partial
        )

    def unconstrained(self) -> ShardingSpec:
        """This layout with every dim open at priority 0 (how ops' outputs are placed)."""
        return ShardingSpec(self.mesh, self.dims, self.partial) if self.is_constrained else self

    def dim_of(self, axis: str) -> int | None:
        """The dim split over mesh ``axis`` (None if none)."""
        for i, d in enumerate(self.dims):
            if axis in d:
                return i
        return None

    def splits(self, dim: int) -> int:
        """Into how many blocks ``dim`` is cut (the product of its axes' sizes)."""
        return self._splits[dim]

    def local_shape(self, shape) -> tuple:
        """The block each device holds of a value of (global, physical) ``shape``."""
        return tuple(s // n for s, n in zip(shape, self._splits, strict=True))

    def buffer_shape(self, shape) -> tuple:
        """The physical buffer: the mesh dims this process holds, then the local block."""
        return self.mesh.local_mesh_shape + self.local_shape(shape)

    def check_shape(self, shape, op: str = "shard") -> None:
        """Refuse a spec whose rank differs from ``shape``'s or that splits a dim unevenly."""
        if len(shape) != len(self.dims):
            raise ShardingError(
                f"{op}: spec {self} has {len(self.dims)} dims but the value's shape is "
                f"{tuple(shape)}"
            )
        for i, (s, axes) in enumerate(zip(shape, self.dims, strict=True)):
            n = self.splits(i)
            if s % n:
                raise ShardingError(
                    f"{op}: dim {i} of shape {tuple(shape)} has size {s}, not divisible by "
                    f"mesh axes {axes} (size {n}); uneven splits are refused, pad the dim to a "
                    f"multiple of {n}"
                )

    def block_index(self, device: int, shape) -> tuple:
        """The slices of the global value that ``device`` (flat index) holds."""
        coords = self.mesh.coords(device)
        out = []
        for i, s in enumerate(shape):
            b = 0
            for a in self.dims[i]:
                k = self.mesh.axis(a)
                b = b * self.mesh.shape[k] + coords[k]
            n = s // self.splits(i)
            out.append(slice(b * n, (b + 1) * n))
        return tuple(out)

    # ------------------------------------------------------------------ derived specs
    def with_dims(self, dims) -> ShardingSpec:
        """This spec with other per-dim axes (the same mesh and partial axes)."""
        return ShardingSpec(self.mesh, dims, self.partial)

    def with_partial(self, partial) -> ShardingSpec:
        """This spec with other partial axes (``((axis, kind), ...)``)."""
        return ShardingSpec(self.mesh, self.dims, partial)

    def drop_prefix(self, n: int) -> ShardingSpec:
        """This spec without its first ``n`` dims (a value's vmap batch dims); the other
        dims keep their open/closed flags and priorities."""
        if not n:
            return self
        return ShardingSpec(
            self.mesh,
            self.dim_specs[n:] if self.is_constrained else self.dims[n:],
            self.partial,
            replicated_axes=self.fixed_replicated,
        )

    def with_prefix(self, dims) -> ShardingSpec:
        """This spec behind leading (open) dims split over ``dims`` (vmap batch dims)."""
        if not dims:
            return self
        body = self.dim_specs if self.is_constrained else self.dims
        return ShardingSpec(
            self.mesh,
            tuple(dims) + tuple(body),
            self.partial,
            replicated_axes=self.fixed_replicated,
        )

    @property
    def spec(self) -> PartitionSpec:
        """The placement as a ``PartitionSpec`` (JAX's ``NamedSharding.spec``); trailing
        replicated dims are left out, so ``P(None)`` reads back as ``P()``."""
        return self.to_partition_spec()

    def to_partition_spec(self) -> PartitionSpec:
        """The placement as a ``PartitionSpec`` (see :attr:`spec`)."""
        entries = [None if not d else d[0] if len(d) == 1 else d for d in self.dims]
        while entries and entries[-1] is None:
            entries.pop()
        return PartitionSpec(*entries)

    def __eq__(self, other):
        return (
            isinstance(other, ShardingSpec)
            and other._hash == self._hash
            and other.mesh == self.mesh
            and other.dims == self.dims
            and other.partial == self.partial
            and other._constraints() == self._constraints()
        )

    def __hash__(self):
        return self._hash

    def __repr__(self):
        parts = [repr(self.to_partition_spec())]
        if self.partial:
            parts.append("partial={" + ", ".join(f"{a!r}: {k!r}" for a, k in self.partial) + "}")
        if self.is_constrained:
            closed = [i for i, o in enumerate(self.open) if not o]
            if closed:
                parts.append(f"closed={closed}")
            if any(self.priority):
                parts.append(f"priority={list(self.priority)}")
            if self.fixed_replicated:
                parts.append(f"replicated_axes={list(self.fixed_replicated)}")
        return f"ShardingSpec({self.mesh.name!r}{self.mesh.shape}, {', '.join(parts)})"

    def short(self) -> str:
        """A compact form for traces: ``[dp, -]{tp:sum}``."""
        dims = ", ".join("-" if not d else "*".join(d) for d in self.dims)
        part = "".join(f"{{{a}:{k}}}" for a, k in self.partial)
        return f"[{dims}]{part}"


def _show(spec) -> str:
    return repr(spec) if isinstance(spec, PartitionSpec) else str(spec)


# ----------------------------------------------------------------------------- propagation
class FactorRule:
    """An op's sharding template: for each input and output, per dim, the factors it is made
    of (major first; a reshape merges several into one dim), their sizes, how a factor that
    appears in no output is reduced (``sum``/``max``/``min``/``prod``; ``None`` or absent: it
    must not be sharded), and ``blocked`` factors that must stay whole (a sliced, padded,
    flipped or scanned dim).

    ``FactorRule.parse("m k, k n -> m n", in_shapes, out_shapes, reduce={"k": "sum"})``
    builds one from text; ``(a b)`` writes a dim made of factors ``a`` and ``b``.
    """

    __slots__ = ("inputs", "outputs", "sizes", "reduce", "blocked")

    def __init__(self, inputs, outputs, sizes, reduce=None, blocked=()):
        self.inputs = tuple(tuple(tuple(d) for d in dims) for dims in inputs)
        self.outputs = tuple(tuple(tuple(d) for d in dims) for dims in outputs)
        self.sizes = dict(sizes)
        self.reduce = dict(reduce or {})
        self.blocked = frozenset(blocked)

    @classmethod
    def parse(cls, text, in_shapes, out_shapes, reduce=None, blocked=()) -> FactorRule:
        lhs, rhs = text.split("->")

        def side(part, shapes):
            groups = [g.strip() for g in part.split(",")] if part.strip() else []
            out = []
            for g, shape in zip(groups, shapes, strict=True):
                dims = []
                tok = g.replace("(", " ( ").replace(")", " ) ").split()
                i = 0
                while i < len(tok):
                    if tok[i] == "(":
                        j = tok.index(")", i)
                        dims.append(tuple(tok[i + 1 : j]))
                        i = j + 1
                    else:
                        dims.append((tok[i],))
                        i += 1
                if len(dims) != len(shape):
                    raise ValueError(f"rule {text!r}: {g!r} does not match shape {shape}")
                out.append(dims)
            return out

        ins, outs = side(lhs, in_shapes), side(rhs, out_shapes)
        return cls.parse_dims(ins, outs, in_shapes, out_shapes, reduce, blocked)

    @classmethod
    def parse_dims(cls, ins, outs, in_shapes, out_shapes, reduce=None, blocked=()):
        """A rule from per-dim factor tuples; factor sizes are read off the shapes."""
        sizes: dict = {}
        for dims, shapes in ((ins, in_shapes), (outs, out_shapes)):
            for ds, shape in zip(dims, shapes, strict=True):
                for fs, n in zip(ds, shape, strict=True):
                    if len(fs) == 1:
                        sizes.setdefault(fs[0], n)
        for dims, shapes in ((ins, in_shapes), (outs, out_shapes)):
            for ds, shape in zip(dims, shapes, strict=True):
                for fs, n in zip(ds, shape, strict=True):
                    unknown = [f for f in fs if f not in sizes]
                    if len(unknown) == 1:
                        known = prod(sizes[f] for f in fs if f in sizes)
                        sizes[unknown[0]] = n // known if known else n
        return cls(ins, outs, sizes, reduce, blocked)

    def __str__(self):
        def side(groups):
            return ", ".join(
                " ".join(d[0] if len(d) == 1 else "(" + " ".join(d) + ")" for d in dims)
                for dims in groups
            )

        return f"{side(self.inputs)} -> {side(self.outputs)}"

    __repr__ = __str__


class _Candidate(NamedTuple):
    """An operand's mesh axes offered for a factor: the operand's dim priority (lower
    first), the operand's size (its global bytes), ``-index`` (earlier operands win ties),
    the axes, and the bytes of one device's block."""

    priority: int
    nbytes: float
    order: int
    axes: tuple
    local_bytes: float


class _Offers(NamedTuple):
    """What the inputs say about one factor: the candidates of the dims split on it, the
    closed dims on it (``_Candidate``s, axes maybe empty), and the mesh axes some operand
    holding it explicitly replicates (``forbidden``)."""

    cands: list
    closed: list
    forbidden: set


class Propagation(NamedTuple):
    """What :func:`propagate` decided: per input the axes each of its dims must have, per
    output the same, and the partial axes ``{axis: kind}`` on the outputs."""

    input_dims: tuple
    output_dims: tuple
    partial: dict


def propagate(rule: FactorRule, in_specs, in_bytes, mesh: DeviceMesh) -> Propagation:
    """Choose mesh axes for every factor of ``rule`` from the inputs' shardings.

    ``in_specs`` holds each input's ``ShardingSpec`` (None: unsharded, free to slice
    locally). Each input dim is open or closed with a priority (``DimSpec``; every layout
    an op produces, and every ``P`` entry, is open at priority 0).

    Open dims, by the ring cost model: each factor takes the candidate axes (those of an
    operand dim split on it) that make the other operands move the fewest bytes to match
    (an ``all_gather`` of each operand split otherwise; ``in_bytes``: each operand's size);
    ties keep the larger operand in place, then the earlier one. An open dim accepts what
    its factor takes: a replicated one is sliced to it (free), a split one resharded.

    Closed dims: a factor that is the major factor of a closed dim takes exactly that dim's
    axes (none, for a closed replicated dim: the other operands are gathered on it), so a
    closed dim is never split further nor resharded. When closed dims disagree on a factor,
    the one of lowest priority number wins, then the larger operand, then the earlier; the
    others are resharded (an op cannot honour both). If the closed axes cannot be taken (the
    factor is blocked, reduced without a kind, not divisible by them, or an earlier factor
    claimed one of them) the factor stays whole.

    Priorities: a factor's priority is the lowest among the dims on it (split or closed);
    factors are decided in priority order, then largest operand first, and a mesh axis
    claimed twice stays with the first factor, so lower numbers propagate first. Among a
    factor's open candidates the lowest priority number wins before the cost model.

    Explicitly replicated axes (``ShardingSpec(..., replicated_axes=...)``) are never given
    to a factor of that operand. A factor stays whole when it is blocked, reduced without a
    reduction kind, or not divisible by its axes. Only the major factor of a merged dim
    carries axes. With every dim open at priority 0 this is the plain cost-model rule.

    Returns a :class:`Propagation` ``(input_dims, output_dims, partial)``: per input the axes
    each of its dims must have (the inputs are resharded to these), per output the same, and
    the partial axes ``{axis: kind}`` contracted sharded factors leave on the outputs.
    """
    in_outputs = {f for groups in rule.outputs for fs in groups for f in fs}
    chosen = _choose_axes(rule, _candidates(rule, in_specs, in_bytes, mesh), mesh, in_outputs)
    # a merged dim keeps the axes of its major factor only: the other factors stay whole
    for groups in rule.inputs + rule.outputs:
        for fs in groups:
            for f in _major_factors(rule, fs)[1:]:
                chosen.pop(f, None)
    partial = {}
    for f, axes in chosen.items():
        if f not in in_outputs:
            for a in axes:
                partial[a] = rule.reduce[f]
    return Propagation(
        tuple(_dims_of(rule, groups, chosen) for groups in rule.inputs),
        tuple(_dims_of(rule, groups, chosen) for groups in rule.outputs),
        partial,
    )


def _major_factors(rule: FactorRule, factors) -> list:
    """The factors of one dim that are not of size 1, major first."""
    return [f for f in factors if rule.sizes.get(f, 1) != 1]


def _candidates(rule: FactorRule, in_specs, in_bytes, mesh: DeviceMesh) -> dict:
    """factor -> the ``_Offers`` of the operands whose dim it is major in."""
    offers: dict[str, _Offers] = {}
    for i, spec in enumerate(in_specs):
        if spec is None:
            continue
        local = in_bytes[i] / prod(mesh.axis_size(a) for a in spec.sharded_axes)
        for d, axes in enumerate(spec.dims):
            factors = _major_factors(rule, rule.inputs[i][d])
            if not factors:
                continue
            closed = not spec.open[d]
            if not (axes or closed or spec.fixed_replicated):
                continue
            o = offers.setdefault(factors[0], _Offers([], [], set()))
            c = _Candidate(spec.priority[d], in_bytes[i], -i, axes, local)
            if axes:
                o.cands.append(c)
            if closed:
                o.closed.append(c)
            o.forbidden.update(spec.fixed_replicated)
    return offers


def _choose_axes(rule: FactorRule, offers: dict, mesh: DeviceMesh, in_outputs: set) -> dict:
    """factor -> the axes it takes: factors in priority order, then those of the largest
    operands first, each the closed dim's axes when it has one, else the candidate whose
    adoption makes the others move the fewest bytes (``in_outputs``: the factors some output
    keeps)."""

    def size(axes):
        return prod(mesh.axis_size(a) for a in axes)

    def regather_cost(options, axes) -> float:
        """Bytes each device sends to bring the operands split otherwise to ``axes``."""
        return sum(
            collective_bytes("all_gather", o.local_bytes, size(o.axes))
            for o in options
            if o.axes != axes
        )

    def rank(kv):
        entries = kv[1].cands + kv[1].closed
        best = max((c.nbytes, c.order) for c in entries)
        return (min(c.priority for c in entries), -best[0], -best[1])

    chosen: dict[str, tuple] = {}
    used: set = set()
    order = sorted(((f, o) for f, o in offers.items() if o.cands or o.closed), key=rank)
    for f, offer in order:
        if f in rule.blocked or rule.reduce.get(f, f in in_outputs or None) is None:
            continue  # kept whole: blocked, or contracted with no (declared) reduction
        options = offer.cands
        if offer.closed:  # the winning closed dim's axes, or nothing
            win = min(offer.closed, key=lambda c: (c.priority, -c.nbytes, -c.order))
            ranked = [win] if win.axes else []
        else:
            ranked = sorted(
                options,
                key=lambda o: (o.priority, regather_cost(options, o.axes), -o.nbytes, -o.order),
            )
        for o in ranked:
            if (
                used.intersection(o.axes)
                or offer.forbidden.intersection(o.axes)
                or rule.sizes.get(f, 1) % size(o.axes)
            ):
                continue
            chosen[f] = o.axes
            used.update(o.axes)
            break
    return chosen


def _dims_of(rule: FactorRule, groups, chosen: dict) -> tuple:
    """Per dim (its factor group), the axes its major factor took."""
    out = []
    for fs in groups:
        major = _major_factors(rule, fs)
        out.append(chosen[major[0]] if major and major[0] in chosen else ())
    return tuple(out)


# ----------------------------------------------------------------------------- cost model
def collective_bytes(kind: str, nbytes: int, n: int) -> float:
    """Bytes each device sends for a collective over ``n`` devices on a ring, where
    ``nbytes`` is the size of one device's buffer before the collective (for all_gather: its
    shard; for the others: its whole local value).

    all_reduce 2(n-1)/n·B, all_gather (n-1)·B, reduce_scatter (n-1)/n·B,
    all_to_all (n-1)/n·B, ppermute B, broadcast (n-1)/n·B (pipelined ring); 0 when n is 1.
    """
    if n <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n * nbytes
    if kind == "all_gather":
        return float((n - 1) * nbytes)
    if kind in ("reduce_scatter", "all_to_all", "broadcast"):
        return (n - 1) / n * nbytes
    if kind == "ppermute":
        return float(nbytes)
    return 0.0


# The original Nabla's module path for these classes (``nabla.core.sharding.spec``, a module
# of its ``sharding`` package): ``from nabla.core.sharding.spec import DeviceMesh, P`` in
# code written for it imports this module's objects.
sys.modules.setdefault(__name__ + ".spec", sys.modules[__name__])
