"""Checker: every error code, at the right place, and the corrected form passes."""

import pytest

from shapec import check_source
from shapec.checker.codes import CODES

from ..helpers import assert_error, assert_ok, codes, src

HEADER = "shaper s(coeff: float >= 0 = 0.1) requires binary {\n  input length: tokens\n  input run_time: seconds\n"


def body(*lines: str, header: str = HEADER) -> str:
    return header + "".join(f"  {line}\n" for line in lines) + "}\n"


def DOUBLING(levels: int) -> str:  # noqa: N802 (reads as a source constant in the table)
    """Helpers f0..f{levels} where each calls the one before twice: 2**levels copies once inlined."""
    return "fn f0(x) = x + 1\n" + "".join(f"fn f{i}(x) = f{i - 1}(x) + f{i - 1}(x)\n" for i in range(1, levels + 1))


# (code, bad source, snippet where the caret goes, corrected source)
CASES = [
    ("E201", body("let x = lenght + 1"), "lenght", body("let x = length + 1")),
    ("E202", body("let x = 1", "let x = 2"), "let x = 2", body("let x = 1", "let y = 2")),
    ("E203", body("let x = mediann(length)"), "mediann", body("let x = median(length)")),
    ("E204", body("let x = clip(length, 1)"), "clip(length, 1)", body("let x = clip(length, 1, 2)")),
    ("E104", body("let x = length" + " + length - length" * 150), "length + length",
     body("let x = length" + " + length - length" * 100 + " + " + " + ".join(["length"] * 300))),
    ("E105", body('metric "a\\qb" = 1'), "\\q", body('metric "a\\nb" = 1')),
    ("E106", body('metric "a\x1bb" = 1'), "\x1b", body('metric "a\\x1bb" = 1')),  # a raw CR ends the line (E102)
    ("E107", body("let x = 1" + "0" * 400), "1000", body("let x = 1e300")),
    ("E205", 'import "missing.shape"\n' + body("let x = 1"), '"missing.shape"', body("let x = 1")),
    ("E210", 'import "/etc/x.shape"\n' + body("let x = 1"), '"/etc/x.shape"', body("let x = 1")),
    ("E211", 'import "notes.txt"\n' + body("let x = 1"), '"notes.txt"', body("let x = 1")),
    ("E206", body("let x = 1") + "pipeline p = s >> t\n", "t\n", body("let x = 1") + "pipeline p = s >> s\n"),
    ("E207", "fn f(x) = f(x)\n" + body("let y = f(length)"), "= f(x)", "fn f(x) = x\n" + body("let y = f(length)")),
    ("E213", DOUBLING(20) + body("let y = f20(length)"), "f20(length)", DOUBLING(12) + body("let y = f12(length)")),
    ("E208", "shaper s() {\n  meta pb: {total: band}\n  let x = pb.totl.a\n}\n", "pb.totl",
     "shaper s() {\n  meta pb: {total: band}\n  let x = pb.total.a\n}\n"),
    ("E209", body("let typical = mean(length)", "skip long when typical > 10"),
     "typical > 10", body("let big = length > 10", "skip long when any(big) and mean(length) > 10")),
    ("E301", body("let x = length + run_time"), "length + run_time", body("let x = float(length) + float(run_time)")),
    ("E302", body("let x = length and reward > 0"), "length and", body("let x = length > 0 and reward > 0")),
    ("E303", body("let g = median(coeff)"), "coeff)", body("let g = median(length)")),
    ("E304", body("let x = mean(length where coeff > 0)"), "coeff > 0", body("let x = mean(length where length > 0)")),
    ("E305", body("input calls: call"), "input calls: call", body("input calls: calls")),
    ("E306", "shaper s() {\n  input length: tokens\n  meta h: list(x: tokens)\n  let y = h.x + length\n}\n",
     "h.x + length", "shaper s() {\n  input length: tokens\n  meta h: list(x: tokens)\n  let y = max(h.x) + length\n}\n"),
    ("E307", "shaper s(mode: enum(a, b) = a) {\n  let x = mode == \"c\"\n}\n", '"c"',
     "shaper s(mode: enum(a, b) = a) {\n  let x = mode == \"b\"\n}\n"),
    ("E308", "shaper s(k: float = length) {\n  let x = 1\n}\n", "length",
     "shaper s(k: float = 2 * 3) {\n  let x = 1\n}\n"),
    ("E401", "shaper cont() produces real {\n  term t = -0.5\n}\nshaper bin() requires binary {\n  let x = 1\n}\n"
             "pipeline p = cont >> bin\n", "bin\n",
     "shaper cont() produces real {\n  term t = -0.5\n}\nshaper bin() requires binary {\n  let x = 1\n}\n"
     "pipeline p = bin >> cont\n"),
    ("E402", "shaper s() requires binary produces binary {\n  term t = 0.5\n}\n", "produces binary",
     "shaper s() requires binary produces nonneg {\n  term t = 0.5\n}\n"),
    ("E403", "shaper s() requires boolean {\n  let x = 1\n}\n", "requires boolean",
     "shaper s() requires binary {\n  let x = 1\n}\n"),
    ("E501", body("term t = -coeff"), "term t = -coeff", body("term t = -coeff", "clamp >= 0")),
    ("E502", "shaper s() {\n  input length: tokens\n  factor f = band(length, {1, 2, 0.5})\n}\n",
     "factor f", "shaper s() {\n  input length: tokens\n  factor f = band(length, {1, 2, 0.5}) on reward > 0\n}\n"),
    ("E503", body("factor f = 1 + coeff on reward > 0"), "1 + coeff", body("factor f = clip(1 - coeff, 0, 1) on reward > 0")),
    ("E504", body("clamp >= 0", "term t = -coeff"), "term t = -coeff", body("term t = -coeff", "clamp >= 0")),
    ("E505", "shaper adv() produces advantage {\n  result = reward - mean(reward)\n}\n"
             "shaper keep() {\n  let x = 1\n}\npipeline p = adv >> keep\n", "adv >>",
     "shaper adv() produces advantage {\n  result = reward - mean(reward)\n}\n"
     "shaper keep() {\n  let x = 1\n}\npipeline p = keep >> adv\n"),
    ("E506", "shaper s() produces real {\n  result = reward * 2\n  clamp >= 0\n}\n", "clamp >= 0",
     "shaper s() produces real {\n  result = max(reward * 2, 0)\n}\n"),
    ("E601", body("let x = 1") + "pipeline p = s(cofef=0.2)\n", "cofef=0.2",
     body("let x = 1") + "pipeline p = s(coeff=0.2)\n"),
    ("E602", "shaper s(k: float in [0, 1] = 2) {\n  let x = k\n}\n", "2)",
     "shaper s(k: float in [0, 1] = 1) {\n  let x = k\n}\n"),
    ("E603", "shaper s() {\n  input length: tokens\n  factor f = band(length, {10, 5, 0.5}) on reward > 0\n}\n",
     "{10, 5, 0.5}", "shaper s() {\n  input length: tokens\n  factor f = band(length, {5, 10, 0.5}) on reward > 0\n}\n"),
    ("E604", "shaper s(on_: bool = 1) {\n  let x = 1\n}\n", "1)", "shaper s(on_: bool = true) {\n  let x = 1\n}\n"),
]


@pytest.mark.parametrize("code, bad, snippet, good", CASES, ids=[c[0] for c in CASES])
def test_error_code_position_and_fix(code, bad, snippet, good):
    if snippet.startswith("= "):  # the caret goes after the "= " marker
        snippet = snippet[2:]
        bad_pos = bad.index("= " + snippet) + 2
        snippet, nth = snippet, bad[:bad_pos].count(snippet)
        assert_error(bad, code, snippet, nth)
    else:
        assert_error(bad, code, snippet)
    assert_ok(good)


def test_every_code_is_documented_and_tested():
    tested = {c[0] for c in CASES} | {"E101", "E102", "E103"} | {"E212"}  # cycles need files: test_imports.py
    assert tested == set(CODES)


# ---------------------------------------------------------------- the issue's named cases
def test_adding_seconds_to_tokens():
    d = assert_error(body("let x = length + run_time"), "E301", "length + run_time")
    assert "cannot add tokens and seconds" in d.message


def test_rollout_value_where_group_value_is_needed():
    text = src("""
        shaper s() {
          input length: tokens
          gate g {
            open long when length > 100
            closed short
          }
        }
    """)
    d = assert_error(text, "E303", "length > 100")
    assert "per rollout" in d.message


def test_factor_on_possibly_negative_reward():
    text = "shaper s() requires real {\n  input length: tokens\n  factor f = band(length, {1, 2, 0.5})\n}\n"
    d = assert_error(text, "E502", "factor f")
    assert "negative" in d.message


@pytest.mark.parametrize("requires", ["", "requires real "])
def test_a_clamp_at_0_before_a_factor_is_what_e502_asks_for(requires):
    """E502 says "clamp at 0 first": a clamp >= 0 makes every reward entering the factors >= 0,
    whatever the shaper requires (it was still E502 without `requires` or with `requires real`)."""
    assert_ok(f"shaper s() {requires}produces real {{\n  input length: tokens\n  clamp >= 0\n"
              "  factor f = band(length, {100, 200, 0.5})\n}\n")


def test_factor_not_provably_in_unit_interval():
    d = assert_error(body("factor f = 2 * coeff on reward > 0"), "E503", "2 * coeff")
    assert "[0, 1]" in d.message
    # a power of a value >= 1 with a non-positive exponent is provably in [0, 1]
    assert_ok(body("factor f = max(1, float(length) / 100) ** (-coeff) on reward > 0"))


def test_binary_shaper_after_continuous_names_both():
    bad = CASES[[c[0] for c in CASES].index("E401")][1]
    d = assert_error(bad, "E401", "bin\n")
    assert "'bin' requires binary" in d.message and "'cont'" in d.message and "move 'cont' after 'bin'" in d.message


def test_band_literal_checks():
    text = "shaper s() {\n  input length: tokens\n  factor f = band(length, {1, 2, 1.5}) on reward > 0\n}\n"
    d = assert_error(text, "E603", "{1, 2, 1.5}")
    assert "0 <= f <= 1" in d.message
    d = assert_error("shaper s(b: band = {3, 3, 0.5}) {\n  let x = 1\n}\n", "E603", "{3, 3, 0.5}")
    assert "b > a" in d.message


def test_unknown_param_key_suggests_closest():
    d = assert_error(body("let x = 1") + "pipeline p = s(cofef=0.2)\n", "E601", "cofef=0.2")
    assert "did you mean 'coeff'" in d.message


def test_all_errors_reported_in_one_run_without_cascades():
    text = body("let a = lenght + 1", "let b = a * 2", "let c = length + run_time", "let d = c + 1",
                "term t = -coeff")
    # a poisoned `a` does not make `b` an error, and `c`'s unit error does not cascade into `d`
    assert codes(text) == ["E201", "E301", "E501"]


def test_binary_shapers_must_clamp_or_declare_real():
    assert_ok(body("term t = -coeff") .replace("requires binary {", "requires binary produces real {"))
    assert_ok(body("term bonus = coeff"))  # a bonus cannot push the reward below 0


def test_stdlib_and_examples_are_valid():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for path in list(root.glob("shapec/stdlib/*.shape")) + list(root.glob("examples/**/*.shape")):
        assert check_source(path.read_text(), str(path)) == [], path


def test_missing_required_param_in_call():
    from shapec import compile_str
    from shapec.runtime.params import ParamError

    mod = compile_str("shaper s(k: float) {\n  term t = k\n}\n", backend="interpreter")
    with pytest.raises(ParamError, match="'k'"):
        mod.s([1.0], group_size=1)
