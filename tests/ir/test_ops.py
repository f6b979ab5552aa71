"""What a node computes is an `Op` member and what a statement is a `StepKind` member, both compared
by identity: no module compares a node's op with a string or builds a node or a statement from one
(a misspelt one would never match), and comparing a member with a string raises."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shapec.ir.nodes import Op, StepKind

PACKAGE = Path(__file__).resolve().parents[2] / "shapec"


def _strings(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_strings(e) for e in node.elts)


def test_no_module_compares_an_op_with_a_string_or_builds_from_one():
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(isinstance(s, ast.Attribute) and s.attr == "op" for s in sides) and any(map(_strings, sides)):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Node", "Step") and node.args:
                if _strings(node.args[0]):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} ({node.func.id} built with a string)")
    assert found == []


def test_an_op_compared_with_a_string_raises():
    with pytest.raises(TypeError, match="is Op.CMP"):
        _ = Op.CMP == "cmp"
    with pytest.raises(TypeError):
        _ = Op.AND in ("and", "or")
    assert Op.CMP is Op("cmp") and Op.CMP in (Op.CMP, Op.AND) and Op.CMP != Op.AND


def test_a_step_kind_compared_with_a_string_raises():
    with pytest.raises(TypeError, match="is StepKind.TERM"):
        _ = StepKind.TERM == "term"
    with pytest.raises(TypeError):
        _ = StepKind.LET in ("let", "gate")
    assert StepKind.TERM is StepKind("term") and StepKind.TERM in (StepKind.TERM, StepKind.CLAMP)
