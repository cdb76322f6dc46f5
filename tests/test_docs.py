"""The Python in README.md and docs/*.md runs as written.

Each file's ```python blocks run in order in one namespace (a guide builds on its earlier
blocks), in a scratch directory, on the test suite's backend, with ``nb`` and ``np``
imported. What a block leaves to the
reader (the data ``X``, a ``loss_fn``) comes from an HTML comment just above it, which
renders as nothing:

    <!-- docs-test: setup
    X = ...
    -->

and a block that cannot run inside the suite says why in one:

    <!-- docs-test: skip (launched with mpiexec; tests/distributed runs it) -->

A block's own ``assert``s and printed values are its checks; every block either runs or
names its reason.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import nabla as nb
from nabla.core.config import CONFIG

ROOT = Path(__file__).resolve().parent.parent
FILES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/*.md"))]

_BLOCK = re.compile(
    r"(?:<!-- docs-test: (?P<kind>setup|skip)(?P<note>[^\n]*?)(?:\n(?P<setup>.*?))?-->\s*)?"
    r"^(?P<indent>[ ]*)```python[^\n]*\n(?P<code>.*?)^(?P=indent)```",
    re.S | re.M,
)


def _blocks(name: str) -> list:
    """``(line, code, setup, skip reason or None)`` per ```python block of ``name``."""
    text = (ROOT / name).read_text()
    out = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("code"))
        skip = m["note"].strip(" ()") if m["kind"] == "skip" else None
        if m["kind"] == "skip" and not skip:
            raise AssertionError(f"{name}:{line}: a skipped block must give its reason")
        setup = (m["setup"] or "") if m["kind"] == "setup" else ""
        out.append((line, textwrap.dedent(m["code"]), setup, skip))
    return out


def test_every_block_is_found():
    """Each ```python fence is one block here (a fence the pattern missed would go
    unchecked)."""
    for name in FILES:
        fences = len(re.findall(r"^ *```python", (ROOT / name).read_text(), re.M))
        assert len(_blocks(name)) == fences, name


@pytest.mark.parametrize("name", [f for f in FILES if _blocks(f)])
def test_doc_runs(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks that save files write here
    # the two imports every guide takes as read
    namespace: dict = {"__name__": f"docs:{name}", "nb": nb, "np": np}
    # a guide turns the NaN check on for the process ("from here on"): the suite's setting
    # comes back after
    before = (CONFIG.debug_nans, CONFIG.debug_infs)
    try:
        for line, code, setup, skip in _blocks(name):
            if skip is not None:
                continue
            # line numbers of the markdown file in a traceback
            source = "\n" * (line - setup.count("\n")) + setup + code
            try:
                exec(compile(source, str(ROOT / name), "exec"), namespace)
            except Exception as e:
                raise AssertionError(f"{name}:{line + 1}: the block fails: {e!r}") from e
    finally:
        nb.debug_nans(before[0])
        nb.debug_infs(before[1])
