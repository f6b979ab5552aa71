"""Random and mutated source through parser and checker: only coded diagnostics come out."""

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shapec import check_source
from shapec.checker.codes import CODES, PROPERTY_CODES
from shapec.checker.imports import newlines

ROOT = Path(__file__).resolve().parents[2]
CORPUS = [p.read_text() for p in sorted(ROOT.glob("shapec/stdlib/*.shape")) + sorted(ROOT.glob("examples/*.shape"))]
TOKENS = [
    "shaper", "pipeline", "fn", "import", "input", "meta", "channel", "let", "gate", "skip", "term", "factor",
    "clamp", "state", "metric", "result", "on", "when", "unless", "where", "and", "or", "not", "open", "closed",
    "requires", "produces", "binary", "real", "(", ")", "{", "}", "[", "]", ",", ":", "=", "==", ">=", "<",
    "+", "-", "*", "/", "**", "??", "?", ">>", ".", "x", "reward", "length", "tokens", "seconds", "band",
    "enum", "list", "count", "mean", "argmin", "1", "0.5", "1e-6", '"a"', "true", "\n", " ", "#c\n",
    # what broke it once: raw NUL and CR, escapes, long numbers, deep nesting
    "\0", "\r", '"a\0b"', '"a\rb"', '"a\\nb"', '"\\x"', '"\\N{DASH}"', '"\\u00e9"', '"\\', "1" * 400,
    "9" * 5001, "1e999", "-" * 300, "not " * 300, "abs(" * 300, "true ? " * 300, " + 1" * 300,
]


def assert_only_coded(text: str) -> None:
    for d in check_source(text, "fuzz.shape"):
        assert d.code in CODES or d.code in PROPERTY_CODES, d
        line, col, end_line, end_col = d.location()
        assert 1 <= line <= newlines(text).count("\n") + 1 and col >= 1  # CRLF and a lone CR end lines too
        d.render()  # rendering never fails either


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_random_token_soup(tokens):
    assert_only_coded(" ".join(tokens))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(CORPUS))), st.data())
def test_mutated_specs(index, data):
    text = CORPUS[index]
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 12)))
        insert = data.draw(st.sampled_from(TOKENS + [""]))
        text = text[:i] + insert + text[j:]
    assert_only_coded(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_arbitrary_text(text):
    assert_only_coded(text)


WORDS = sorted({w for text in CORPUS for w in __import__("re").findall(r"[A-Za-z_][A-Za-z0-9_]*|\d+\.?\d*", text)})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(CORPUS))), st.data())
def test_swapped_words_reach_the_checker(index, data):
    """Replacing words keeps most programs parseable, so the checker sees ill-typed trees."""
    import re

    text = CORPUS[index]
    spans = [m.span() for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*|\d+\.?\d*", text)]
    for _ in range(data.draw(st.integers(1, 4))):
        i, j = data.draw(st.sampled_from(spans))
        text = text[:i] + data.draw(st.sampled_from(WORDS)) + text[j:]
        spans = [m.span() for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*|\d+\.?\d*", text)]
    assert_only_coded(text)


NESTINGS = ["-{}", "not {}", "({})", "abs({})", "true ? {} : 0", "1 + {}", "{} + 1", "{} ?? 1", "2 ** {}",
            "count({} where true)", "{{{}, 1, 0.5}}", "f({})", "{}.a"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(NESTINGS), min_size=200, max_size=700), st.sampled_from(["1", "length", '"s"']))
def test_deep_mixed_nesting(layers, leaf):
    """Any mix of nested forms, up to past MAX_EXPR_DEPTH: a diagnostic or a pass, never a traceback."""
    expr = leaf
    for layer in layers:
        expr = layer.format(expr)
    assert_only_coded(f"fn f(x) = x + 1\nshaper s() {{\n  input length: tokens\n  term t = {expr}\n}}\n")
