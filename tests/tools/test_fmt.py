"""`shapec fmt`: canonical layout from the pretty-printer, comments kept, idempotent, --check."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from shapec.syntax.parser import parse
from shapec.syntax.pretty import pretty
from shapec.tools.fmt import format_source

ROOT = Path(__file__).resolve().parents[2]
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
    assert f"1 file would be reformatted; to rewrite it: shapec fmt {path}" in proc.stderr
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


# ------------------------------------------------------------------------- escapes and comments, at random
from hypothesis import HealthCheck, assume, given, settings, strategies as st  # noqa: E402

from shapec.syntax import ast as A  # noqa: E402
from shapec.syntax.parser import _lark  # noqa: E402
from shapec.syntax.pretty import _body_brace  # noqa: E402
from shapec.syntax.source import ShapeError  # noqa: E402

HEADERED = ('import nemo_rl\nimport "lib/helpers.shape" as h\nfn f(x, y) = x + y\n\n'
            'shaper s(a: float >= 0 = 0.1, b: band = {1, 2, 0.5}, c: enum(x, y) = x) requires binary {\n'
            '  """Doc."""\n  input length: tokens\n  meta m: {a: float, b: float}\n  let l = f(a, 2)\n'
            '  gate g {\n    closed e when count(length > 0) == 0\n    open ok\n  }\n'
            '  term t = -a * length on g when length > 1\n  metric "odd name" = mean(length)\n  clamp >= 0\n}\n\n'
            'pipeline p = s(a=0.2) >> nemo_rl.length_penalty\n')


def header_comments(text: str) -> Counter:
    """Comments between `shaper` and the `{` of its body: among its params or contracts."""
    tree = parse(text)
    heads = [(it.span.start, _body_brace(it)) for it in tree.items if isinstance(it, A.Shaper)]
    return Counter(c.text for c in tree.comments if any(a <= c.span.start < b for a, b in heads))


def _roundtrips(src: str) -> None:
    """fmt keeps the meaning (same AST, same comments, header comments in the header) and is idempotent."""
    try:
        tree = parse(src)
    except ShapeError:
        assume(False)
    once = pretty(tree)
    assert parse(once) == tree
    assert comment_texts(once) == comment_texts(src)
    assert header_comments(once) == header_comments(src)
    assert pretty(parse(once)) == once


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.text(max_size=12), st.text(max_size=12), st.text(max_size=20), st.booleans())
def test_strings_survive_fmt_whatever_they_hold(path, metric, doc, ascii_only):
    assume('"""' not in doc and not doc.endswith('"'))
    src = (f'"""{doc}"""\nimport {json.dumps(path, ensure_ascii=ascii_only)}\n'
           f'shaper s() {{\n  metric {json.dumps(metric, ensure_ascii=ascii_only)} = 1\n}}\n')
    _roundtrips(src)


@pytest.mark.parametrize("src,value", [
    ('import "we\\"ird.shape"\n', 'we"ird.shape'), ('import "a\\\\nb.shape"\n', "a\\nb.shape"),
    ('import "tab\\there\\x00\\r"\n', "tab\there\x00\r")])
def test_import_paths_keep_their_exact_value(src, value):
    assert parse(src).items[0].target == value
    out = format_source(src)
    assert parse(out).items[0].target == value and format_source(out) == out


def test_metric_names_that_are_not_plain_names_stay_quoted():
    src = 'shaper s() {\n  metric "a\\nb" = 1\n  metric "shaper" = 2\n  metric "é" = 3\n  metric plain = 4\n}\n'
    out = format_source(src)
    assert out == 'shaper s() {\n  metric "a\\nb" = 1\n  metric "shaper" = 2\n  metric "é" = 3\n  metric plain = 4\n}\n'
    assert [m.name for m in parse(out).items[0].body] == ["a\nb", "shaper", "é", "plain"]


def _token_ends(src: str) -> list[int]:
    return sorted({tok.end_pos for tok in _lark().lex(src)})


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([HEADERED, MESSY, FORMATTED]), st.data())
def test_comments_anywhere_survive_fmt_and_check_passes_after_it(template, data):
    ends = _token_ends(template)
    spots = data.draw(st.lists(st.sampled_from(ends), min_size=1, max_size=6, unique=True))
    src = template
    for k, at in enumerate(sorted(spots, reverse=True)):
        # a comment runs to the end of its line: a newline follows it, and maybe a blank line
        ends_line = src[at:at + 1] == "\n"
        blank = data.draw(st.booleans())
        src = src[:at] + f"  # note {k}" + ("\n" if blank or not ends_line else "") + src[at:]
    _roundtrips(src)


@pytest.mark.parametrize("src", [
    "shaper s(\n  a: float = 1,\n  # after the last param\n) {\n  input x: tokens\n}\n",
    "shaper s(a: float  # inside a param\n  = 1) {\n  input x: tokens\n}\n",
    "shaper s() # among the contracts\n  requires binary {\n  input x: tokens\n}\n",
    "shaper s(  # in an empty list\n) {\n  input x: tokens\n}\n"])
def test_a_comment_in_the_header_stays_in_the_header(src):
    out = format_source(src)
    header = out[: out.index("{")]
    assert "#" in header and format_source(out) == out
    assert parse(out) == parse(src)


def test_fmt_writes_through_a_temporary_file_and_keeps_the_original_on_failure(tmp_path, monkeypatch):
    import errno
    import io

    from shapec import files
    from shapec.tools.fmt import format_files

    path = tmp_path / "messy.shape"
    path.write_text(MESSY)
    real_open = open

    def full_disk(file, mode="r", *args, **kwargs):
        fh = real_open(file, mode, *args, **kwargs)
        if "w" in mode and files.TMP_MARK in str(file):
            fh.write(FORMATTED[:40])  # half the file gets out, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return fh

    monkeypatch.setattr("builtins.open", full_disk)
    err = io.StringIO()
    assert format_files([path], False, io.StringIO(), err) == 2
    monkeypatch.undo()
    assert err.getvalue() == f"shapec fmt: cannot write {path}: No space left on device\n"
    assert path.read_text() == MESSY  # untouched, byte for byte
    assert [p.name for p in tmp_path.iterdir()] == ["messy.shape"]  # no temporary file left


def test_every_spec_of_the_repository_is_in_canonical_layout():
    """What the repository's own shapec-fmt hook and CI hold it to."""
    specs = [*sorted((ROOT / "shapec" / "stdlib").glob("*.shape")), *sorted((ROOT / "examples").glob("*.shape"))]
    assert len(specs) > 10
    for path in specs:
        assert format_source(path.read_text(), str(path)) == path.read_text(), path


def test_a_conditional_inside_a_conditional_keeps_its_parentheses():
    source = "shaper s() {\n  result = reward > 0 ? (reward > 1 ? 1 : 2) : 0\n}\n"
    assert pretty(parse(source)) == source


def test_a_wide_parenthesized_operand_breaks_inside_its_parentheses():
    source = ("shaper s(w: float = 1) {\n  input aaaaaaaaaaaa: tokens\n  input bbbbbbbbbbbb: tokens\n"
              "  term t = -w * (float(aaaaaaaaaaaa) / 1000 + float(bbbbbbbbbbbb) / 1000 + float(aaaaaaaaaaaa) / 2000"
              " + float(bbbbbbbbbbbb) / 2000)\n}\n")
    lines = pretty(parse(source)).splitlines()
    assert lines[3] == "  term t = -w * (float(aaaaaaaaaaaa) / 1000 + float(bbbbbbbbbbbb) / 1000"
    assert lines[4] == "    + float(aaaaaaaaaaaa) / 2000 + float(bbbbbbbbbbbb) / 2000)"
    assert parse(pretty(parse(source))) == parse(source)


@pytest.mark.parametrize("joiner", [" + ", " * ", " and ", " or "])
def test_a_thousand_term_chain_formats_in_lines_that_fit_and_formats_the_same_again(joiner):
    """The printer walks a chain without recursion, and adds no parentheses: the operators are the same."""
    chain = joiner.join(["x"] * 1000)
    text = f"shaper s() {{\n  input x: float\n  let v = {chain}\n}}\n"
    formatted = format_source(text)
    assert format_source(formatted) == formatted
    assert max(map(len, formatted.splitlines())) <= 88 and len(formatted.splitlines()) > 40
    assert f"let v = {chain} }}" in " ".join(formatted.split())
