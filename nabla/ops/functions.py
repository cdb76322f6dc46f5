"""``fn``: the op functions by name, the one way an op family calls another.

The families' rules call each other's ops: the gradient of a broadcast is a sum, the
gradient of a sum is a broadcast, a matmul's is a transpose. Importing each other would make
``ops/`` one circle of modules. Instead each family enters the functions it offers here when
it is imported (:func:`provide`, at the end of the module), and rules call them as
``fn.reshape(...)``, looked up when the rule runs. The pipeline below the families
(``_util``, ``pipeline``, ``spmd``, ``base``, ``batching``) reaches the few ops it needs
(``zeros_like``, ``cast``, ``reshape``, the collectives that reshard) the same way.
``nabla.ops`` imports every family, so the table is full before any op runs.

The order inside ``ops/`` (``docs/architecture.md``, "The op call pipeline"), each module
importing only those before it: ``functions`` → ``_util`` → ``pipeline`` → ``spmd`` → ``base`` →
``batching`` → the families (``creation``, ``unary``, ``binary``, ``view``, ``reduction``,
``indexing``, ``linalg``, ``nn``, ``random``, ``kernels``, ``transfer``, ``per_device`` →
``collectives``) → ``methods``. ``tests/test_layers.py`` checks it.
"""

from __future__ import annotations

__all__ = ["fn", "provide"]


class OpFunctions:
    """The table: one attribute per provided function (a plain attribute read, as cheap
    as the module attribute it replaces)."""

    def __getattr__(self, name):  # only reached for a name nobody provided
        raise AttributeError(
            f"no op function {name!r} is provided to nabla.ops.functions.fn: the family "
            "defining it must list it in its provide() call (and nabla.ops must be imported)"
        )


fn = OpFunctions()


def provide(namespace: dict, names, prefix: str = "") -> None:
    """Enter ``namespace[name]`` for each of ``names`` as ``fn.<prefix><name>``; a name
    another module provided already is an error (two families may not offer one name)."""
    for name in names:
        key = prefix + name
        value = namespace[name]
        have = fn.__dict__.get(key)
        if have is not None and have is not value:
            raise RuntimeError(f"two op functions provided as {key!r}: {have!r} and {value!r}")
        fn.__dict__[key] = value
