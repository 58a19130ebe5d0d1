"""The shape of the library: imports flow one way (no cycle, lazy imports included), modules
stay short, and Hydra, omegaconf, Lightning and W&B appear in gradlab.app alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "gradlab"
MODULES = {
    ".".join(("gradlab", *p.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__"): p
    for p in sorted(SRC.rglob("*.py"))
}
FRAMEWORKS = ("hydra", "omegaconf", "lightning", "wandb", "wandb_workspaces")
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 350, 60


def _imports(path: Path, module: str) -> set[str]:
    """Every module `module` imports, anywhere in it (functions too), resolved to full names."""
    out = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base]) if base else ".".join(parts)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # from pkg import submodule
    return out


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        # `from gradlab.check import x` loads gradlab/check/__init__.py: an edge to the package,
        # so a module its own package imports cannot import the package back
        graph[name] = {d for d in _imports(path, name) if d in MODULES and d != name}
    return graph


def test_no_import_cycle_lazy_imports_included():
    graph, done, stack = _graph(), set(), []

    def visit(node: str) -> None:
        if node in stack:
            cycle = stack[stack.index(node) :] + [node]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if node in done:
            return
        stack.append(node)
        for dep in sorted(graph[node]):
            visit(dep)
        stack.pop()
        done.add(node)

    for module in graph:
        visit(module)


def test_frameworks_are_imported_in_app_only():
    for name, path in MODULES.items():
        if name.startswith("gradlab.app"):
            continue
        used = {i.split(".")[0] for i in _imports(path, name)} & set(FRAMEWORKS)
        assert not used, f"{name} imports {sorted(used)}"


def test_modules_and_functions_are_short():
    for name, path in MODULES.items():
        source = path.read_text()
        assert source.count("\n") <= MAX_MODULE_LINES, f"{name}: {source.count(chr(10))} lines"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                assert length <= MAX_FUNCTION_LINES, f"{name}.{node.name}: {length} lines"


def test_few_modules_in_the_package_root():
    root = sorted(p.name for p in SRC.glob("*.py"))
    assert len(root) <= 4, root
