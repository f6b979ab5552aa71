"""What a node computes is an `Op` member, what a statement is a `StepKind` member and what a value's
elements are a `TypeKind` member, all compared by identity: no module compares a node's op or a
type's kind with a string or builds a node, a statement or a type from one (a misspelt one would
never match), and comparing a member with a string raises. A `.kind` that is not a type's (a param's,
a metadata declaration's, a binding's) stays a string and is left alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shapec.ir.nodes import ROLLOUT, Op, StepKind, Type, TypeKind

PACKAGE = Path(__file__).resolve().parents[2] / "shapec"


def _strings(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_strings(e) for e in node.elts)


def _op_or_type_kind(node: ast.expr) -> bool:
    """`x.op`, or the kind of a type: `ty.kind`, `x.ty.kind`."""
    if not isinstance(node, ast.Attribute):
        return False
    if node.attr == "op":
        return True
    owner = node.value
    return node.attr == "kind" and (getattr(owner, "attr", None) == "ty" or getattr(owner, "id", None) == "ty")


def _string_uses(source: str) -> list[str]:
    """Where the source compares an op or a type's kind with a string, or builds a Node, Step or Type from one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(_op_or_type_kind, sides)) and any(map(_strings, sides)):
                found.append(f"{node.lineno}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Node", "Step", "Type"):
            kinds = [k.value for k in node.keywords if k.arg == "kind"]
            if any(map(_strings, [*node.args[:1], *kinds])):
                found.append(f"{node.lineno} ({node.func.id} built with a string)")
    return found


def test_no_module_compares_an_op_or_a_type_kind_with_a_string_or_builds_from_one():
    found = [f"{path.relative_to(PACKAGE)}:{where}" for path in PACKAGE.rglob("*.py")
             for where in _string_uses(path.read_text())]
    assert found == []


def test_the_scan_finds_every_string_use_and_only_those():
    source = "\n".join([
        'node.op == "cmp"',
        'ty.kind != "band"',
        'node.ty.kind in ("num", "bool")',
        'Node("const", (), ty)',
        'Step("let", "x")',
        'Type("num", ROLLOUT)',
        'Type(kind="num")',
        'spec.kind == "band"',  # a param's kind: a string
        'Type(TypeKind.NUM) if node.ty.kind is TypeKind.BOOL else None',
    ])
    assert [where.split()[0] for where in _string_uses(source)] == ["1", "2", "3", "4", "5", "6", "7"]


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


def test_a_type_kind_compared_with_a_string_raises_and_prints_as_its_name():
    with pytest.raises(TypeError, match="is TypeKind.BAND"):
        _ = TypeKind.BAND == "band"
    with pytest.raises(TypeError):
        _ = Type(TypeKind.NUM).kind in ("num", "bool")
    with pytest.raises(TypeError):
        _ = TypeKind.INDEX != "index"
    assert TypeKind.NUM is TypeKind("num") and TypeKind.BOOL in (TypeKind.NUM, TypeKind.BOOL)
    assert Type(TypeKind.NUM, ROLLOUT, "tokens").describe() == "rollout num tokens"  # as diagnostics print it
