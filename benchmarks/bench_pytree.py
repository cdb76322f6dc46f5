"""Pytree flatten/unflatten: nabla's tree utilities beside optree (C++) and, when installed,
``jax.tree_util``, measured side by side in one run.

Trees: a 100-leaf parameter tree (25 layers, each a dict ``{"w", "b"}`` of tensors, inside a
dict with a list), a 100-leaf flat list, and the same parameter tree with a namedtuple and a
dataclass per layer (both nodes in nabla, as in the API; optree needs them registered, so the
optree column registers the two types first).

Run: ``python benchmarks/bench_pytree.py`` (about 10 s; ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import nabla as nb  # noqa: E402
from benchmarks._timing import median_seconds  # noqa: E402
from nabla.core import pytree as pt  # noqa: E402

Layer = collections.namedtuple("Layer", ["w", "b"])


@dataclasses.dataclass
class Block:
    w: object
    b: object


def trees():
    leaf = nb.constant([1.0])
    params = {"layers": [{"w": leaf, "b": leaf} for _ in range(25)], "head": [leaf] * 50}
    flat = [leaf] * 100
    mixed = {
        "layers": [Layer(leaf, leaf) for _ in range(25)],
        "blocks": [Block(leaf, leaf) for _ in range(25)],
    }
    return {"params dict (100 leaves)": params, "flat list (100)": flat, "mixed (100)": mixed}


def _optree():
    try:
        import optree
    except ImportError:
        return None
    optree.register_pytree_node(
        Block,
        lambda b: ((b.w, b.b), None, ("w", "b")),
        lambda _, c: Block(*c),
        namespace="bench",
    )
    return optree


def _jax():
    try:
        import jax
    except ImportError:
        return None
    jax.tree_util.register_pytree_node(Block, lambda b: ((b.w, b.b), None), lambda _, c: Block(*c))
    return jax.tree_util


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    reps = 200 if args.quick else 2000
    ot, jt = _optree(), _jax()
    print(
        "optree "
        + (ot.__version__ if ot else "not installed")
        + ", jax "
        + ("installed" if jt else "not installed")
    )
    cols = ["nabla"] + (["optree"] if ot else []) + (["jax"] if jt else [])
    print(f"{'tree':28s} {'op':10s} " + " ".join(f"{c:>9s}" for c in cols) + "   (us)")
    for name, tree in trees().items():
        leaves, spec = pt.tree_flatten(tree)
        row_f = [median_seconds(lambda: pt.tree_flatten(tree), reps)]
        row_u = [median_seconds(lambda: pt.tree_unflatten(spec, leaves), reps)]
        if ot:
            o_leaves, o_spec = ot.tree_flatten(tree, namespace="bench")
            assert len(o_leaves) == len(leaves), "optree and nabla disagree on the leaves"
            row_f.append(median_seconds(lambda: ot.tree_flatten(tree, namespace="bench"), reps))
            row_u.append(median_seconds(lambda: ot.tree_unflatten(o_spec, o_leaves), reps))
        if jt:
            j_leaves, j_spec = jt.tree_flatten(tree)
            row_f.append(median_seconds(lambda: jt.tree_flatten(tree), reps))
            row_u.append(median_seconds(lambda: jt.tree_unflatten(j_spec, j_leaves), reps))
        for op, row in (("flatten", row_f), ("unflatten", row_u)):
            print(f"{name:28s} {op:10s} " + " ".join(f"{1e6 * t:9.2f}" for t in row))


if __name__ == "__main__":
    main()
