"""One-way layers: no module of ``nabla`` imports from a higher layer, not even in a function.

Layers, lowest first: core < backends < runtime < ops < transforms < nn < the top level
(``nabla/__init__.py``). Every ``import`` is read with ``ast``, wherever it stands. An import
inside a function must also be same-layer or downward and say why in a comment (on its line
or the line above).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "nabla"
LAYERS = ("core", "backends", "runtime", "ops", "transforms", "nn")
TOP = len(LAYERS)  # nabla/__init__.py and any top-level module


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    """(dotted module name, is a package __init__) of ``path`` under package ``root``."""
    parts = (root.name,) + path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _layer(module: str, root_name: str) -> int | None:
    """The layer of a module of the package, None outside it."""
    parts = module.split(".")
    if parts[0] != root_name:
        return None
    if len(parts) == 1:
        return TOP
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else TOP


def _targets(node, module: str, is_pkg: bool) -> list[str]:
    """Absolute names of the modules an import statement reads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = module.split(".") if is_pkg else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([node.module] if node.module else []))
    # ``from pkg import name`` may name a submodule: count it as that submodule
    return [f"{base}.{a.name}" for a in node.names] if node.module is None else [base]


def layering_violations(root: Path) -> list[str]:
    """Every upward import under package directory ``root``, and every import inside a
    function without a comment saying why."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        module, is_pkg = _module_name(path, root)
        own = _layer(module, root.name)
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        in_function = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            where = f"{path.relative_to(root.parent)}:{node.lineno}"
            inside = id(node) in in_function
            for target in _targets(node, module, is_pkg):
                layer = _layer(target, root.name)
                if layer is None:
                    continue
                if layer > own:
                    kind = "inside a function " if inside else ""
                    problems.append(f"{where}: {module} imports {target} {kind}(upward)")
                elif inside:
                    here = lines[node.lineno - 1]
                    above = lines[node.lineno - 2] if node.lineno > 1 else ""
                    if "#" not in here and not above.strip().startswith("#"):
                        problems.append(f"{where}: in-function import of {target} without a why")
    return problems


def test_no_upward_imports():
    problems = layering_violations(ROOT)
    assert not problems, "\n".join(problems)


def test_every_layer_package_exists_with_a_readme():
    for name in LAYERS:
        assert (ROOT / name / "__init__.py").exists(), name
        assert (ROOT / name / "README.md").exists(), f"nabla/{name}/README.md"


def _write(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


def test_the_check_catches_an_upward_import_inside_a_function(tmp_path):
    pkg = _write(
        tmp_path / "nabla",
        {
            "__init__.py": "from .ops import base\n",
            "core/__init__.py": "",
            "core/ir.py": "from . import dtypes\n",
            "core/dtypes.py": "",
            "ops/__init__.py": "",
            "ops/base.py": "from ..core import ir\n",
            "runtime/__init__.py": "",
            "runtime/tensor.py": """
                def f():
                    # deliberately hidden in a function
                    from ..ops.base import Operation
                    return Operation
            """,
        },
    )
    problems = layering_violations(pkg)
    assert len(problems) == 1, problems
    assert "nabla.runtime.tensor imports nabla.ops.base inside a function" in problems[0]


def test_the_check_catches_module_level_and_absolute_upward_imports(tmp_path):
    pkg = _write(
        tmp_path / "nabla",
        {
            "__init__.py": "",
            "core/__init__.py": "",
            "core/a.py": "import nabla.transforms.vmap\n",
            "core/b.py": "from .. import ops\n",
            "backends/__init__.py": "from nabla import Tensor\n",
        },
    )
    problems = layering_violations(pkg)
    assert any("core.a imports nabla.transforms.vmap" in p for p in problems), problems
    assert any("core.b imports nabla.ops" in p for p in problems), problems
    assert any("nabla.backends imports nabla (upward)" in p for p in problems), problems
    assert len(problems) == 3


def test_the_check_wants_a_reason_for_an_in_function_import(tmp_path):
    pkg = _write(
        tmp_path / "nabla",
        {
            "__init__.py": "",
            "ops/__init__.py": "",
            "ops/a.py": "def f():\n    from ..core import ir\n    return ir\n",
            "ops/b.py": "def f():\n    from ..core import ir  # start-up\n    return ir\n",
            "core/__init__.py": "",
            "core/ir.py": "",
        },
    )
    problems = layering_violations(pkg)
    assert len(problems) == 1 and "ops/a.py:2" in problems[0] and "why" in problems[0]


def package_import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same subpackage it imports (wherever the import stands)."""
    graph: dict[str, set[str]] = {}
    prefix = f"{root.name}.{package}."
    for path in sorted((root / package).glob("*.py")):
        module, is_pkg = _module_name(path, root)
        if is_pkg:
            continue
        deps = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(node, module, is_pkg):
                    if target.startswith(prefix) and target != module:
                        deps.add(prefix + target[len(prefix) :].split(".")[0])
    return graph


def import_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order), or None."""
    import graphlib

    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        return list(e.args[1])
    return None


def test_ops_modules_import_each_other_in_one_order():
    """Inside ``ops/`` the pipeline sits below the op families and no module imports one
    that imports it back: families reach each other through ``ops.functions.fn``."""
    graph = package_import_graph(ROOT, "ops")
    assert import_circle(graph) is None, " -> ".join(import_circle(graph))
    pipeline = {
        f"nabla.ops.{m}" for m in ("functions", "_util", "pipeline", "spmd", "base", "batching")
    }
    # namespaces over the families, imported by none of them: the Tensor methods, the
    # original Nabla's ``ops.communication`` (re-exports of the collectives) and JAX's
    # random distributions (compositions of the keyed draws and other families)
    namespaces = {"nabla.ops.methods", "nabla.ops.communication", "nabla.ops.distributions"}
    for module in graph.keys() - pipeline - namespaces:
        others = graph[module] - pipeline
        if module == "nabla.ops.collectives":  # one family in two modules
            others -= {"nabla.ops.per_device"}
        assert not others, f"{module} imports the families {sorted(others)} (use fn)"
    for module in pipeline:
        assert graph[module] <= pipeline, f"{module} imports {sorted(graph[module] - pipeline)}"


def test_the_circle_check_finds_a_circle(tmp_path):
    pkg = _write(
        tmp_path / "nabla",
        {
            "__init__.py": "",
            "ops/__init__.py": "",
            "ops/a.py": "from . import b\n",
            "ops/b.py": "def f():\n    from .c import g  # late\n",
            "ops/c.py": "from .a import x\n",
            "ops/d.py": "from . import a\n",
        },
    )
    circle = import_circle(package_import_graph(pkg, "ops"))
    assert circle is not None and set(circle) == {"nabla.ops.a", "nabla.ops.b", "nabla.ops.c"}
