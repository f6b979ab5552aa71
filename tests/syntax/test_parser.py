"""Parser: AST shape, spans, and syntax errors with codes and positions."""

from pathlib import Path

import pytest

from shapec.syntax import ast as A
from shapec.syntax.parser import parse
from shapec.syntax.pretty import pretty
from shapec.syntax.source import ShapeError

from ..helpers import position, src

ROOT = Path(__file__).resolve().parents[2]
TRACKED = sorted(ROOT.glob("shapec/stdlib/*.shape")) + sorted(ROOT.glob("examples/**/*.shape"))


def test_parses_a_shaper_into_structure():
    m = parse(src('''
        """module doc"""
        shaper s(coeff: float >= 0 = 0.5, mode: enum(a, b) = a, cap: band?) requires binary {
          input length: tokens
          gate right = reward > 0
          term t = -coeff on argmin(length where right) when count(right) >= 2
        }
    '''))
    assert m.doc == "module doc"
    (shaper,) = m.items
    assert shaper.name == "s"
    assert [p.name for p in shaper.params] == ["coeff", "mode", "cap"]
    assert shaper.params[0].constraint == A.Constraint(">=", A.Number(0, "0"))
    assert shaper.params[1].type == A.PType("enum", False, ("a", "b"))
    assert shaper.params[2].type.optional
    term = shaper.body[2]
    assert isinstance(term, A.Term)
    assert term.expr == A.Unary("-", A.Name("coeff"))
    assert term.on == A.Call(A.Name("argmin"), (A.Arg(A.Name("length"), A.Name("right")),))


def test_precedence_and_associativity():
    (fn,) = parse("fn f(a, b, c) = a - b - c * 2 ** -a ?? b").items
    # ?? binds looser than arithmetic: (a - b - c * 2 ** -a) ?? b
    assert fn.body.operator == "??"
    left = fn.body.left
    assert left == A.Binary("-", A.Binary("-", A.Name("a"), A.Name("b")),
                            A.Binary("*", A.Name("c"), A.Binary("**", A.Number(2, "2"), A.Unary("-", A.Name("a")))))


def test_spans_point_at_source():
    text = "fn f(x) = x + 1\n"
    (fn,) = parse(text).items
    assert text[fn.body.span.start:fn.body.span.end] == "x + 1"


def test_comments_and_docstrings_are_ignored_by_structure():
    a = parse('shaper s() {\n  # a comment\n  let x = 1 # trailing\n}\n')
    b = parse("shaper s() { let x = 1 }")
    assert a == b


@pytest.mark.parametrize("text, snippet, message", [
    ("shaper s( {", "{", "unexpected '{'"),
    ("shaper s() { let x = 1 + }", "}", "unexpected '}'"),
    ("shaper s() { let = 1 }", "=", "expected a name"),
    ("pipeline p = a >> ", None, "input ended unexpectedly"),
])
def test_syntax_errors_have_codes_and_positions(text, snippet, message):
    with pytest.raises(ShapeError) as err:
        parse(text, "spec.shape")
    (d,) = err.value.diagnostics
    assert d.code in ("E101", "E103")
    assert message in d.message
    line, col, _, _ = d.location()
    if snippet is None:
        assert d.code == "E103" and (line, col) == (1, len(text) + 1)
    else:
        assert d.code == "E101" and (line, col) == position(text, snippet)


def test_unexpected_character_is_e102():
    text = "shaper s() {\n  let x = 1 $ 2\n}"
    with pytest.raises(ShapeError) as err:
        parse(text)
    (d,) = err.value.diagnostics
    assert d.code == "E102" and d.location()[:2] == (2, 13)


def test_rendered_error_has_path_caret_and_code():
    with pytest.raises(ShapeError) as err:
        parse("shaper s() {\n  let x = (1 + \n}", "bad.shape")
    text = err.value.diagnostics[0].render()
    head, line, caret = text.splitlines()
    assert head.startswith("bad.shape:3:1: error[E101]: unexpected '}'")
    assert line == "}" and caret == "^"


@pytest.mark.parametrize("path", TRACKED, ids=lambda p: p.name)
def test_pretty_printer_round_trips(path):
    tree = parse(path.read_text(), str(path))
    assert parse(pretty(tree)) == tree
    # and the canonical form is a fixed point
    assert pretty(parse(pretty(tree))) == pretty(tree)


def test_pretty_parenthesises_only_where_needed():
    from shapec.syntax.pretty import expr

    text = "(a + b) * (a - (b - a)) ** 2 > -(a ?? b) and not (a > b or b > a)"
    (fn,) = parse(f"fn f(a, b) = {text}").items
    assert expr(fn.body) == text
    (fn,) = parse("fn f(a, b) = ((a + b)) - ((a * b)) - (-(a))").items
    assert expr(fn.body) == "a + b - a * b - -a"
