"""Sharding types and factor propagation (pure data and arithmetic; runs nothing).

- ``DeviceMesh(name, shape, axis_names)``: a named grid of devices (flat indices, row-major).
- ``PartitionSpec``/``P``: JAX's user-facing spec, one entry per leading dim (an axis name,
  ``None`` or a tuple of names); a spec shorter than the rank replicates the trailing dims.
- ``DimSpec``: the mesh axes one dim is split over, major to minor.
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
                or (isinstance(e, tuple | list) and all(isinstance(a, str) for a in e))
            )
            if not ok:
                raise ShardingError(
                    f"PartitionSpec: an entry is an axis name, None or a tuple of names; got {e!r}"
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


P = PartitionSpec


class DimSpec:
    """The mesh axes one dim is split over (major to minor); ``DimSpec([])`` replicates."""

    __slots__ = ("axes",)

    def __init__(self, axes=()):
        if axes is None:
            axes = ()
        elif isinstance(axes, str):
            axes = (axes,)
        self.axes = tuple(axes)

    def __eq__(self, other):
        return isinstance(other, DimSpec) and other.axes == self.axes

    def __hash__(self):
        return hash(self.axes)

    def __repr__(self):
        return f"DimSpec({list(self.axes)})"


def _entry_axes(entry) -> tuple:
    if entry is None:
        return ()
    if isinstance(entry, DimSpec):
        return entry.axes
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


class ShardingSpec:
    """How a value is laid out on a mesh. Mesh axes used by neither ``dims`` nor
    ``partial`` are replicated. Immutable and hashable.

    Args:
        mesh: the ``DeviceMesh``.
        dims: per dim, the mesh axes it is split over (a ``DimSpec``, a tuple/list of names,
            a name or None).
        partial: ``{axis: kind}`` (or pairs): over these axes each device holds a term, and
            the value is their reduction ``kind`` (``sum``, ``max``, ``min``, ``prod``).
        op: the op named in errors.
    """

    __slots__ = ("mesh", "dims", "partial", "_hash", "_splits")

    def __init__(self, mesh: DeviceMesh, dims, partial=(), *, op: str = "ShardingSpec"):
        if not isinstance(mesh, DeviceMesh):
            raise ShardingError(f"{op}: expected a DeviceMesh, got {type(mesh).__name__}")
        self.mesh = mesh
        self.dims = tuple(_entry_axes(d) for d in dims)
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
        self._hash = hash((mesh, self.dims, self.partial))
        # devices each dim is split over (read on every sharded op: computed once)
        self._splits = tuple(prod(mesh.axis_size(a) for a in d) for d in self.dims)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_spec(cls, mesh: DeviceMesh, spec, ndim: int, op: str = "shard") -> ShardingSpec:
        """A ``ShardingSpec`` for a rank-``ndim`` value from a ``P``, a list of ``DimSpec``/
        entries, or a ``ShardingSpec`` (whose mesh must be ``mesh``)."""
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
        dims = tuple(_entry_axes(e) for e in entries) + ((),) * (ndim - len(entries))
        return cls(mesh, dims, op=op)

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
    def partial_kinds(self) -> dict:
        """``{axis: kind}`` of the partial axes (``"sum"``, ``"max"``, ``"min"``, ``"prod"``)."""
        return dict(self.partial)

    @property
    def sharded_axes(self) -> tuple:
        """Every mesh axis some dim is split over, dim by dim."""
        return tuple(a for d in self.dims for a in d)

    @property
    def replicated_axes(self) -> tuple:
        """The mesh axes along which devices hold equal copies (neither split nor partial)."""
        used = set(self.sharded_axes) | set(self.partial_axes)
        return tuple(a for a in self.mesh.axis_names if a not in used)

    @property
    def is_replicated(self) -> bool:
        """True when every device holds the whole value."""
        return not self.partial and not any(self.dims)

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
                    f"{op}: dim {i} of shape {tuple(shape)} has size {s}, which mesh axes "
                    f"{axes} (size {n}) do not divide; uneven splits are refused, pad the dim "
                    f"to a multiple of {n}"
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
        """This spec without its first ``n`` dims (a value's vmap batch dims)."""
        return ShardingSpec(self.mesh, self.dims[n:], self.partial) if n else self

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
        )

    def __hash__(self):
        return self._hash

    def __repr__(self):
        parts = [repr(self.to_partition_spec())]
        if self.partial:
            parts.append("partial={" + ", ".join(f"{a!r}: {k!r}" for a, k in self.partial) + "}")
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
    """An operand's mesh axes offered for a factor: the operand's size (its global bytes),
    ``-index`` (earlier operands win ties), the axes, and the bytes of one device's block."""

    nbytes: float
    order: int
    axes: tuple
    local_bytes: float


class Propagation(NamedTuple):
    """What :func:`propagate` decided: per input the axes each of its dims must have, per
    output the same, and the partial axes ``{axis: kind}`` on the outputs."""

    input_dims: tuple
    output_dims: tuple
    partial: dict


def propagate(rule: FactorRule, in_specs, in_bytes, mesh: DeviceMesh) -> Propagation:
    """Choose mesh axes for every factor of ``rule`` from the inputs' shardings.

    ``in_specs`` holds each input's ``ShardingSpec`` (None: unsharded, free to slice
    locally). Priority, from the ring cost model: each factor takes the candidate axes (those
    of an operand split on it) that make the other operands move the fewest bytes to match
    (an ``all_gather`` of each operand split otherwise; ``in_bytes``: each operand's size);
    ties keep the larger operand in place, then the earlier one. Factors are decided largest
    operand first, and a mesh axis claimed twice stays with the first factor. A factor stays
    whole when it is blocked, reduced without a reduction kind, or not divisible by its axes.
    Only the major factor of a merged dim carries axes.

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
    """factor -> the ``_Candidate``s of the sharded operands whose dim it is major in."""
    cands: dict[str, list] = {}
    for i, spec in enumerate(in_specs):
        if spec is None:
            continue
        local = in_bytes[i] / prod(mesh.axis_size(a) for a in spec.sharded_axes)
        for d, axes in enumerate(spec.dims):
            factors = _major_factors(rule, rule.inputs[i][d]) if axes else ()
            if factors:
                cands.setdefault(factors[0], []).append(_Candidate(in_bytes[i], -i, axes, local))
    return cands


def _choose_axes(rule: FactorRule, cands: dict, mesh: DeviceMesh, in_outputs: set) -> dict:
    """factor -> the axes it takes: factors of the largest operands first, each the
    candidate whose adoption makes the others move the fewest bytes (``in_outputs``: the
    factors some output keeps)."""

    def size(axes):
        return prod(mesh.axis_size(a) for a in axes)

    def regather_cost(options, axes) -> float:
        """Bytes each device sends to bring the operands split otherwise to ``axes``."""
        return sum(
            collective_bytes("all_gather", o.local_bytes, size(o.axes))
            for o in options
            if o.axes != axes
        )

    chosen: dict[str, tuple] = {}
    used: set = set()
    order = sorted(
        cands.items(), key=lambda kv: max((c.nbytes, c.order) for c in kv[1]), reverse=True
    )
    for f, options in order:
        if f in rule.blocked or rule.reduce.get(f, f in in_outputs or None) is None:
            continue  # kept whole: blocked, or contracted with no (declared) reduction
        ranked = sorted(
            options, key=lambda o: (regather_cost(options, o.axes), -o.nbytes, -o.order)
        )
        for o in ranked:
            if used.intersection(o.axes) or rule.sizes.get(f, 1) % size(o.axes):
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
