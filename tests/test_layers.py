"""The packages import only downwards, in the pipeline's order, and no module imports itself back
through others: every import of every module counts, those inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "shapec"

# lowest first; a module may import from its own layer and the layers below it
LAYERS = [
    ("shapec.paths", "shapec.files"),
    ("shapec.syntax",),
    ("shapec.ir",),
    ("shapec.checker",),
    ("shapec.compiler",),
    ("shapec.runtime",),
    ("shapec.api",),
    ("shapec.analysis",),
    ("shapec.run",),
    ("shapec.tools",),
    ("shapec.compat",),
    ("shapec", "shapec.cli", "shapec.docgen", "shapec.pygments_lexer"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> int:
    best = None
    for k, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + ".") and prefix != "shapec":
                if best is None or len(prefix) > best[1]:
                    best = (k, len(prefix))
    assert best is not None, f"{module} belongs to no layer: add it to LAYERS"
    return best[0]


def imports(module: str) -> set[str]:
    """Every shapec module `module` imports, at any depth of its code."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in MODULES and m != module}


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_belongs_to_a_layer():
    for module in MODULES:
        layer(module)


def test_no_module_imports_from_a_higher_layer():
    upward = [f"{m} -> {t}" for m, targets in GRAPH.items() for t in targets
              if layer(t) > layer(m) and not (m.startswith(t + ".") or t == "shapec")]
    assert upward == []


def test_no_import_cycle():
    """Depth-first search for a back edge; the cycle found is named whole."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(GRAPH[m]):
            if t == "shapec" or m.startswith(t + "."):  # a package's own __init__: imported before its modules
                continue
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
    assert cycles == []


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    assert "shapec.compiler.spec_store" in GRAPH["shapec.runtime.shaper"]  # inside _rebuilt
    assert "shapec.checker.loader" in GRAPH["shapec.api"]  # inside check_file
    assert "shapec.compiler.lowering.module" in GRAPH["shapec.compiler.store"]  # inside _import_kernel
    assert "shapec.files" in GRAPH["shapec.syntax.parser"]  # `from .. import files`
    assert layer("shapec.compiler.lowering.module") == layer("shapec.compiler.store") > layer("shapec.ir.nodes")
