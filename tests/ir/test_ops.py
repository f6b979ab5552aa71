"""What a node computes is an `Op` member, compared by identity: no module compares a node's op
with a string (a misspelt one would never match), and comparing one with a string raises."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shapec.ir.nodes import Op

PACKAGE = Path(__file__).resolve().parents[2] / "shapec"


def _strings(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_strings(e) for e in node.elts)


def test_no_module_compares_an_op_with_a_string():
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(isinstance(s, ast.Attribute) and s.attr == "op" for s in sides) and any(map(_strings, sides)):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Node" and node.args:
                if _strings(node.args[0]):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} (Node built with a string op)")
    assert found == []


def test_an_op_compared_with_a_string_raises():
    with pytest.raises(TypeError, match="is Op.CMP"):
        _ = Op.CMP == "cmp"
    with pytest.raises(TypeError):
        _ = Op.AND in ("and", "or")
    assert Op.CMP is Op("cmp") and Op.CMP in (Op.CMP, Op.AND) and Op.CMP != Op.AND
