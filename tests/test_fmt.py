"""`shapec fmt`: canonical layout from the pretty-printer, comments kept, idempotent, --check."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from shapec.syntax.parser import parse
from shapec.syntax.pretty import pretty
from shapec.tools.fmt import format_source

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "shapec" / "stdlib").glob("*.shape")) + sorted((ROOT / "examples").rglob("*.shape"))

MESSY = '# Copyright header: stays above the docstring\n"""A messy spec."""\nimport nemo_rl\n# helper comment\nfn   half(x) = x/2   # trailing on a fn\n\nshaper demo(coeff: float >= 0 = 0.1,  # how hard to push\n     # the band used after the clamp\n     b: band = {100, 200, 0.5}) requires binary produces nonneg {\n  input length: tokens\n\n\n  # correct rollouts only\n  gate right = reward > 0\n  gate g {\n    # no rollouts, no verdict\n    closed empty when count(right) == 0\n    open ok   # the usual case\n  }\n  term t = -coeff * half(float(length)) / 100 on right when g\n  clamp >= 0\n  factor f = band(length, b) on right\n  # dangling comment at the end of the body\n}\npipeline p = demo # trailing on a pipeline\n# last words\n'

# comments stay where they were: above the docstring, above and at the end of items, statements,
# params and gate rules, at the end of a body and of the file; a blank line before a statement stays
FORMATTED = '# Copyright header: stays above the docstring\n"""A messy spec."""\n\nimport nemo_rl\n\n# helper comment\nfn half(x) = x / 2  # trailing on a fn\n\nshaper demo(\n  coeff: float >= 0 = 0.1,  # how hard to push\n  # the band used after the clamp\n  b: band = {100, 200, 0.5},\n) requires binary produces nonneg {\n  input length: tokens\n\n  # correct rollouts only\n  gate right = reward > 0\n  gate g {\n    # no rollouts, no verdict\n    closed empty when count(right) == 0\n    open ok  # the usual case\n  }\n  term t = -coeff * half(float(length)) / 100 on right when g\n  clamp >= 0\n  factor f = band(length, b) on right\n  # dangling comment at the end of the body\n}\n\npipeline p = demo  # trailing on a pipeline\n\n# last words\n'


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def comment_texts(text: str) -> Counter:
    return Counter(c.text for c in parse(text).comments)


def test_messy_file_formats_to_the_canonical_layout_with_every_comment():
    assert format_source(MESSY) == FORMATTED
    assert comment_texts(FORMATTED) == comment_texts(MESSY)
    assert parse(FORMATTED) == parse(MESSY)  # comments and layout are not part of the AST


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_fmt_is_idempotent_and_keeps_comments_on_every_spec(path):
    text = path.read_text()
    once = format_source(text)
    assert format_source(once) == once
    assert parse(once) == parse(text)
    assert comment_texts(once) == comment_texts(text)


def test_comments_do_not_change_the_ast():
    plain = "shaper s() {\n  input length: tokens\n  gate g = length > 0\n}\n"
    noted = "# a\nshaper s() {  # b\n  # c\n  input length: tokens  # d\n  gate g = length > 0\n  # e\n}\n# f\n"
    assert parse(noted) == parse(plain)
    assert len(parse(noted).comments) == 6 and parse(plain).comments == ()
    assert pretty(parse(plain)) == plain


def test_check_fails_with_a_diff_and_changes_nothing(tmp_path):
    path = tmp_path / "messy.shape"
    path.write_text(MESSY)
    proc = cli("fmt", "--check", path)
    assert proc.returncode == 1
    assert f"--- {path} (original)" in proc.stdout and f"+++ {path} (formatted)" in proc.stdout
    assert "-fn   half(x) = x/2   # trailing on a fn" in proc.stdout
    assert "+fn half(x) = x / 2  # trailing on a fn" in proc.stdout
    assert "1 file would be reformatted" in proc.stderr
    assert path.read_text() == MESSY


def test_fmt_rewrites_then_check_passes(tmp_path):
    path = tmp_path / "messy.shape"
    path.write_text(MESSY)
    proc = cli("fmt", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert path.read_text() == FORMATTED
    assert f"reformatted {path}" in proc.stderr
    proc = cli("fmt", "--check", path)
    assert proc.returncode == 0 and proc.stdout == ""


def test_syntax_error_exits_1_and_leaves_the_file(tmp_path):
    path = tmp_path / "broken.shape"
    path.write_text("shaper s( {\n}\n")
    proc = cli("fmt", path)
    assert proc.returncode == 1
    assert f"{path}:1:11: error[E101]" in proc.stderr
    assert path.read_text() == "shaper s( {\n}\n"
    assert cli("fmt", tmp_path / "missing.shape").returncode == 2


def test_fmt_imports_no_backend_or_data_library(tmp_path):
    (tmp_path / "s.shape").write_text(FORMATTED)
    code = ("import sys, shapec.cli as c; rc = c.main(['fmt', '--check', sys.argv[1]]); "
            "heavy = {'numba', 'pyarrow', 'rich', 'matplotlib'} & set(sys.modules); "
            "assert not heavy, heavy; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.shape")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
