"""One table of diagnostic codes (checker/codes.py): every code a diagnostic carries is in it, once,
and docs/errors.md lists each with the table's meaning."""

from __future__ import annotations

import ast
from pathlib import Path

from shapec.checker.codes import CODES, PROPERTY_CODES, REFUTED_ERROR, REFUTED_WARNING

ROOT = Path(__file__).resolve().parents[2]


def codes_in_the_code() -> dict[str, list[str]]:
    """Every string literal shaped like a code (E123, W123) in the package, with where it stands."""
    found: dict[str, list[str]] = {}
    for path in (ROOT / "shapec").rglob("*.py"):
        if path.name == "codes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) == 4
                    and node.value[0] in "EW" and node.value[1:].isdigit()):
                found.setdefault(node.value, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_code_a_diagnostic_carries_is_in_the_table():
    table = {**CODES, **PROPERTY_CODES}
    assert {code: where for code, where in codes_in_the_code().items() if code not in table} == {}
    assert not set(CODES) & set(PROPERTY_CODES)


def test_every_code_in_the_table_is_given_by_some_diagnostic():
    used = {*codes_in_the_code(), *REFUTED_ERROR.values(), *REFUTED_WARNING.values()}  # refutations by property
    assert [code for code in (*CODES, *PROPERTY_CODES) if code not in used] == []


def test_the_error_reference_lists_every_code_with_its_meaning():
    text = (ROOT / "docs" / "errors.md").read_text()
    for code, meaning in {**CODES, **PROPERTY_CODES}.items():
        assert f"| `{code}` | {meaning} |" in text, code
