"""Inputs that used to traceback in parse or check: each is now a coded
diagnostic with a position, or passes. Depths up to MAX_EXPR_DEPTH always check cleanly."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from shapec import check_source
from shapec.syntax import depth
from shapec.syntax.depth import MAX_EXPR_DEPTH
from shapec.syntax.parser import parse
from shapec.syntax.pretty import pretty

from ..helpers import position

N = MAX_EXPR_DEPTH


def spec(stmt: str) -> str:
    return f"shaper s(k: float = 1) {{\n  input length: tokens\n  {stmt}\n}}\n"


def alternating(leaf: str, ops: tuple[str, str], levels: int) -> str:
    """`((leaf op0 leaf) op1 leaf) op0 ...`, `levels` deep: no two operators in a row are one run."""
    return "(" * (levels - 1) + leaf + "".join(f" {ops[i % 2]} {leaf})" for i in range(levels - 1))


# every form of nesting, at exactly `levels` levels deep (a leaf is one level)
FORMS = {
    "sum": lambda d: "let x = " + alternating("length", ("+", "-"), d),
    "product": lambda d: "let x = " + alternating("k", ("*", "/"), d),
    "neg": lambda d: "let x = " + "-" * (d - 1) + "k",
    "neg_parens": lambda d: "let x = " + "-(" * (d - 1) + "k" + ")" * (d - 1),
    "not": lambda d: "let x = " + "not " * (d - 1) + "true",
    "cond": lambda d: "let x = " + "true ? 1 : " * (d - 1) + "0",
    "call": lambda d: "let x = " + "abs(" * (d - 1) + "k" + ")" * (d - 1),
    "pow": lambda d: "let x = " + " ** ".join(["k"] * d),
    "fallback": lambda d: "let x = " + " ?? ".join(["k"] * d),
    "and": lambda d: "let x = " + alternating("true", ("and", "or"), d),
    "where": lambda d: "let x = count(length > 0 where " + alternating("length > 1", ("and", "or"), d - 2) + ")",
    "skip": lambda d: "skip big when any(" + alternating("length > 1", ("or", "and"), d - 2) + ")",
    "state": lambda d: "state st: float = 0 update " + alternating("st", ("+", "*"), d),
}

# a run of one operator is one level however long: these are 2 deep (a leaf, then the run)
RUNS = {
    "sum": "let x = " + " + ".join(["length"] * 5000),
    "product": "let x = " + " * ".join(["k"] * 5000),
    "and": "let x = " + " and ".join(["true"] * 5000),
    "or": "let x = " + " or ".join(["true"] * 5000),
    "where": "let x = count(length > 0 where " + " and ".join(["length > 1"] * 5000) + ")",
    "skip": "skip big when any(" + " or ".join(["length > 1"] * 5000) + ")",
    "state": "state st: float = 0 update " + " + ".join(["st"] * 5000),
}


@pytest.mark.parametrize("form", FORMS)
def test_depth_up_to_the_limit_checks_and_one_more_is_e104(form):
    assert check_source(spec(FORMS[form](N)), "f.shape") == []
    text = spec(FORMS[form](N + 1))
    [d] = check_source(text, "f.shape")
    assert d.code == "E104" and f"more than {N} levels" in d.message and "split it with `let`" in d.message
    assert d.location()[0] == 3 and "^" in d.render()


@pytest.mark.parametrize("form", RUNS)
def test_a_run_of_one_operator_far_past_the_limit_checks(form):
    assert check_source(spec(RUNS[form]), "f.shape") == []


def test_a_run_of_one_operator_is_a_level_where_it_nests_deeper():
    """`x + y + z` beside `x - y` or `x * y`, in parentheses, is one level more than its deepest operand."""
    within, past = (spec("let x = (" + alternating("k", ("*", "/"), d - 1) + " + k + k)") for d in (N, N + 1))
    assert check_source(within, "f.shape") == []
    assert [d.code for d in check_source(past, "f.shape")] == ["E104"]


def test_additions_and_subtractions_far_past_the_limit_are_one_e104_at_their_start():
    text = spec("term t = 1" + " + 1 - 1" * 2500)
    [d] = check_source(text, "f.shape")
    assert (d.code, d.location()[:2]) == ("E104", position(text, "1 + 1"))


@pytest.mark.parametrize("stmt", ["term t = " + "-" * 1000 + "1", "term t = (" + "not " * 1000 + "true) ? 1 : 0",
                                  "term t = " + "true ? " * 1000 + "1" + " : 0" * 1000,
                                  "term t = " + "abs(" * 1000 + "1" + ")" * 1000, "term t = " + "(" * 3000 + "1" + ")" * 3000])
def test_a_thousand_nested_levels_is_e104_or_passes(stmt):
    diags = check_source(spec(stmt), "f.shape")
    assert [d.code for d in diags] in ([], ["E104"])  # parentheses alone add no level
    assert diags or stmt.startswith("term t = ((")


def test_helpers_inlined_past_the_limit_are_e104_at_the_statement():
    fn = "fn f(x) = x" + " + 1 - 1" * 50 + "\nfn g(x) = f(f(f(x)))\n"
    text = fn + spec("let y = g(length)")
    [d] = check_source(text, "f.shape")
    assert (d.code, d.location()[:2]) == ("E104", position(text, "g(length)"))
    assert "once helpers are inlined" in d.message
    assert check_source(fn.replace("f(f(f(x)))", "f(f(x))") + spec("let y = g(length)"), "f.shape") == []


def test_running_out_of_stack_anyway_is_e104_not_a_traceback(monkeypatch):
    """The guard's last resort: with almost no stack to spare, the checker's RecursionError is
    reported at the statement it was checking."""
    monkeypatch.setattr(depth, "FRAMES_PER_LEVEL", 0)
    monkeypatch.setattr(depth, "MAX_EXPR_DEPTH", 0)
    text = spec("let y = " + "abs(" * 200 + "k" + ")" * 200)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 100)
    try:
        [d] = check_source(text, "f.shape")
    finally:
        sys.setrecursionlimit(old)
    assert (d.code, d.location()[:2]) == ("E104", position(text, "let y"))


@pytest.mark.parametrize("digits", [400, 5001])
def test_long_integer_literal_is_e107(digits):
    text = spec("term t = " + "1" * digits)
    [d] = check_source(text, "f.shape")
    assert (d.code, d.location()[:2]) == ("E107", position(text, "111"))
    assert d.message == "number too large (the largest is about 1.8e308)"


def test_numbers_at_the_edge_of_float64():
    assert check_source(spec("let x = 1" + "0" * 300 + " + 1e308 + 1e-400"), "f.shape") == []
    [d] = check_source(spec("let x = 1e309"), "f.shape")
    assert d.code == "E107"


@pytest.mark.parametrize("raw, name", [("\0", "U+0000"), ("\x01", "U+0001"), ("\x1b", "U+001B")])
def test_raw_control_character_in_a_string_is_e106(raw, name):
    text = spec(f'metric "a{raw}b" = 1')
    [d] = check_source(text, "f.shape")
    assert (d.code, d.location()[:2]) == ("E106", position(text, raw))
    assert name in d.message
    line = d.render().splitlines()[1]
    assert raw not in line and "\ufffd" in line  # shown, not interpreted by the terminal


def test_a_raw_cr_in_a_string_ends_its_line():
    """A lone CR is a line break, as in Python (imports.newlines): the string is unterminated."""
    text = spec('metric "a\rb" = 1')
    [d] = check_source(text, "f.shape")
    assert d.code == "E102" and "unterminated string" in d.message


@pytest.mark.parametrize("escape, problem", [
    ("\\x", "'\\x' needs 2 hex digits"), ("\\N{DASH}", "unknown escape '\\N'"), ("\\q", "unknown escape '\\q'"),
    ("\\u12", "'\\u' needs 4 hex digits"), ("\\ud800", "is not a Unicode character"),
    ("\\U00110000", "is not a Unicode character")])
def test_bad_escape_is_e105_at_the_escape(escape, problem):
    text = spec(f'metric "ab{escape}" = 1')
    [d] = check_source(text, "f.shape")
    assert (d.code, d.location()[:2]) == ("E105", position(text, escape))
    assert problem in d.message


@pytest.mark.parametrize("literal, value", [
    ('"a\\nb"', "a\nb"), ('"\\t\\r\\\\\\"\\\'"', "\t\r\\\"'"), ('"\\x41\\u00e9\\U0001F600"', "Aé😀"),
    ('"\\ud83d\\ude00"', "😀"), ('"\\b\\f\\0"', "\b\f\0"), ('"tab\there"', "tab\there")])
def test_escapes_decode_and_round_trip_through_the_formatter(literal, value):
    module = parse(f"shaper s() {{\n  metric {literal} = 1\n}}\n")
    assert module.items[0].body[0].name == value
    assert parse(pretty(module)) == module


def test_several_literal_errors_are_reported_together():
    text = spec('metric "\\q" = 1e999\n  metric "\0" = 2')
    assert [d.code for d in check_source(text, "f.shape")] == ["E105", "E107", "E106"]


def _let_chain(first: str, step: str, last: str, header: str = "shaper s() requires binary produces unit {") -> str:
    """30 lets, each using the one before twice: 2**30 paths from the last let to the first."""
    lines = [header, "  input length: tokens", "  gate right = reward > 0", f"  let a0 = {first}"]
    lines += [f"  let a{i + 1} = {step.format(p=f'a{i}')}" for i in range(30)]
    return "\n".join([*lines, f"  {last}", "}"]) + "\n"


@pytest.mark.parametrize("name, text, codes", [
    # the range analysis and the {0, 1} value sets walked every path through the lets
    ("values", _let_chain("length > 3 ? 0 : 1", "{p} * {p}", "factor f = a30",
                          "shaper s() requires binary produces binary {"), []),
    ("range", _let_chain("float(length)", "{p} * {p} / max({p})", "term t = -a30",
                         "shaper s() produces real {"), []),
    ("ratio", _let_chain("float(length)", "{p} + {p}", "factor f = 1 - alpha * a30 / max(a30) on right",
                         "shaper s(alpha: float = 0.5) requires binary produces unit {"), ["E503"]),
])
def test_lets_shared_along_many_paths_are_checked_once_each(name, text, codes):
    """Each analysis visits a let once, however many expressions reach it: these specs checked in
    2**30 steps (a pre-commit hook that never returns). Run apart, so a regression fails by its
    time-out instead of hanging the suite."""
    code = f"import shapec; print([d.code for d in shapec.check_source({text!r}, 'spec.shape')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == repr(codes)
