"""Error messages: what a new user meets, through `shapec check` and the public API."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from shapec import check_source, compile_str
from shapec.runtime.validate import BatchError

from ..helpers import position

HEADER = "shaper s(limit: int = 10) {\n  input length: tokens\n  gate right = reward > 0\n"


def only(text: str):
    diags = check_source(text, "spec.shape")
    assert len(diags) == 1, [d.render() for d in diags]
    return diags[0]


def at(d, text: str, snippet: str):
    """The diagnostic's span is exactly the first occurrence of snippet after the shared header."""
    start = text.index(snippet, len(HEADER) if text.startswith(HEADER) else 0)
    line, col, end_line, end_col = d.location()
    assert (line, col) == position(text, snippet, text[:start].count(snippet)), d.render()
    assert (end_line, end_col - col) == (line, len(snippet)), d.render()


@pytest.mark.parametrize("stmt, typo, message", [
    ("fator truncate = 1 on right", "fator", "unknown statement 'fator'; did you mean 'factor'?"),
    ("lett x = 1", "lett", "unknown statement 'lett'; did you mean 'let'?"),
    ("trem t = 0", "trem", "unknown statement 'trem'; did you mean 'term'?"),
    ("gaet g = right", "gaet", "unknown statement 'gaet'; did you mean 'gate'?"),
    ("factor f = 1 whn right", "whn", "unexpected 'whn'; did you mean 'when'?"),
    ("factor f = 1 onn right", "onn", "unexpected 'onn'; did you mean 'on'?"),
    ("factor f = 1 onright", "onright", "unexpected 'onright'; did you mean 'on'?"),
    ("factor f = 1 on right whenn right", "whenn", "unexpected 'whenn'; did you mean 'when'?"),
    ("gate g = right andy right", "andy", "unexpected 'andy'; did you mean 'and'?"),
    ("letx = 1", "letx", "unknown statement 'letx'; did you mean 'let'?"),
])
def test_a_misspelt_keyword_names_the_closest_one_with_the_caret_on_the_typo(stmt, typo, message):
    text = HEADER + f"  {stmt}\n}}\n"
    d = only(text)
    assert (d.code, d.message) == ("E101", message)
    at(d, text, typo)


def test_a_keyword_glued_to_a_name_is_refused_even_where_the_rest_would_parse():
    # `a andb` once read as `a and b`: a keyword never silently eats the front of a longer word
    text = HEADER + "  gate g = right andright\n}\n"
    d = only(text)
    assert (d.code, d.message) == ("E101", "unexpected 'andright'; did you mean 'and'?")
    at(d, text, "andright")


@pytest.mark.parametrize("text, typo, message", [
    ("improt dapo\n", "improt", "unknown statement 'improt'; did you mean 'import'?"),
    ("shapr s() { }\n", "shapr", "unknown statement 'shapr'; did you mean 'shaper'?"),
    ("shaper s() requres binary { }\n", "requres", "unexpected 'requres'; did you mean 'requires'?"),
    ("shaper s() { }\npipelin p = s\n", "pipelin", "unknown statement 'pipelin'; did you mean 'pipeline'?"),
])
def test_top_level_and_header_typos(text, typo, message):
    d = only(text)
    assert (d.code, d.message) == ("E101", message)
    at(d, text, typo)


def test_a_name_far_from_any_keyword_keeps_the_expected_list():
    text = HEADER + "  zzz = 1\n}\n"
    d = only(text)
    assert d.code == "E101" and d.message.startswith("unexpected 'zzz'; expected ") and "did you mean" not in d.message
    at(d, text, "zzz")


def test_check_cli_shows_the_hint_and_caret(tmp_path):
    path = tmp_path / "typo.shape"
    path.write_text(HEADER + "  factor truncate = 0.5 onn right\n}\n")
    proc = subprocess.run([sys.executable, "-m", "shapec.cli", "check", str(path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1
    head, line, caret = proc.stderr.strip().splitlines()[:3]
    assert head == f"{path}:4:25: error[E101]: unexpected 'onn'; did you mean 'on'?"
    assert line == "  factor truncate = 0.5 onn right" and caret == " " * 24 + "^^^"


@pytest.mark.parametrize("expr, op, operand, hint", [
    ("right / group_size", "/", "right", "; count(right) is the number of rollouts where it holds, "
                                    "(right ? 1 : 0) is 1 where it holds and 0 elsewhere"),
    ("(reward > 0) * 2", "*", "reward > 0", "; count(reward > 0) is the number of rollouts where it holds, "
                                       "(reward > 0 ? 1 : 0) is 1 where it holds and 0 elsewhere"),
    ("1 - any(right)", "-", "any(right)", "; (any(right) ? 1 : 0) is 1 where it holds and 0 elsewhere"),
])
def test_arithmetic_on_a_boolean_says_how_to_make_it_a_number(expr, op, operand, hint):
    text = HEADER + f"  let x = {expr}\n}}\n"
    d = only(text)
    assert d.code == "E302" and d.message.endswith(hint), d.message
    assert d.message.startswith(f"'{op}' needs numbers; this is a bool")
    at(d, text, operand)


def test_the_suggested_rewrites_check():
    for expr in ("count(right) / group_size", "(right ? 1 : 0) / group_size", "(reward > 0 ? 1 : 0) * 2"):
        assert check_source(HEADER + f"  let x = {expr}\n  term t = 0 * x\n}}\n") == [], expr


@pytest.mark.parametrize("decl, bad, message", [
    ("shaper s(limit: token = 10) {", "token", "unknown param type 'token'"),
    ("shaper s() {\n  input limit: tokn", "tokn", "unknown type 'tokn'"),
    ("shaper s() {\n  meta limit: band2", "band2", "unknown metadata type 'band2'"),
])
def test_an_unknown_type_is_one_error_not_a_cascade(decl, bad, message):
    text = f"{decl}\n  input length: tokens\n  gate right = reward > 0\n" \
           "  let y = limit.a + limit\n  factor f = length < limit ? 1 : 0 on right\n}\n"
    d = only(text)
    assert d.code == "E305" and d.message.startswith(message), d.render()
    line, _, _, _ = d.location()
    assert line == position(text, bad)[0]


def test_unknown_type_suggests_the_closest():
    d = only("shaper s(limit: token = 10) { }\n")
    assert d.message.endswith("; did you mean 'tokens'?") and d.location()[:2] == (1, 17)
    d = only("shaper s() {\n  input length: tokn\n}\n")
    assert d.message.endswith("; did you mean 'tokens'?") and d.location()[:2] == (2, 3)


@pytest.mark.parametrize("update, words", [
    ("max(best, reward)", "this is one number per rollout; reduce it over the batch with batch.mean(...), "
                          "batch.max(...) or batch.sum(...)"),
    ("mean(reward)", "this is one number per group; a state updates before groups are shaped, so it may use "
                     "batch reductions of inputs, channels, the reward and params, not group values"),
    ("batch.any(right)", "this is one boolean for the whole batch"),
])
def test_a_state_update_of_the_wrong_level_says_so_in_words(update, words):
    text = HEADER + f"  state best: float = 0 update {update}\n  term t = 0 * best\n}}\n"
    d = only(text)
    assert d.code == "E303"
    assert d.message == ("state 'best' keeps one number from batch to batch, so its update must be one number "
                         f"for the whole batch; {words}")
    assert "rollout num" not in d.message
    at(d, text, update)


@pytest.mark.parametrize("update, words", [
    ("float(length)", "this is one number per rollout"),
    ("count(right) > 0", "this is one boolean per group"),
])
def test_a_per_prompt_update_must_be_one_number_per_group(update, words):
    text = HEADER + f"  state best: float per prompt = 0 update {update}\n  term t = 0 * best\n}}\n"
    d = only(text)
    assert d.code == "E303"
    assert d.message == f"state 'best' keeps one number per prompt, so its update must be one number per group; {words}"
    at(d, text, update)


def test_a_per_prompt_update_reads_any_statement_of_the_body_and_every_state_as_it_entered():
    text = (HEADER + "  state best: float per prompt = 1e9 update min(best, shortest)\n"
            "  state calls: int per prompt = 0 update calls + best * 0\n"
            "  let shortest = float(min(length where right))\n  term t = 0.1 * calls when best < shortest\n}\n")
    assert check_source(text, "spec.shape") == []


def test_a_batch_state_cannot_read_a_per_prompt_state():
    text = HEADER + "  state h: float per prompt = 0 update h + 1\n  state b: float = 0 update b + h\n  term t = 0 * b\n}\n"
    d = only(text)
    assert d.code == "E303" and d.message.startswith("state 'b' keeps one number from batch to batch")


def test_range_errors_name_the_param_and_the_value():
    mod = compile_str(HEADER.replace("limit: int = 10", "limit: int > 0 = 10") + "  term t = 0 * limit\n}\n",
                      backend="interpreter")
    with pytest.raises(ValueError) as err:
        mod.s([1.0, 0.0], group_size=2, channels={"length": [1, 2]}, params={"limit": -3})
    assert "'limit'" in str(err.value) and "-3" in str(err.value) and "greater than 0" in str(err.value)


def test_a_misspelt_channel_names_the_unknown_key_and_the_closest_input():
    mod = compile_str(HEADER + "  term t = 0 * float(length)\n}\n", backend="interpreter")
    with pytest.raises(BatchError) as err:
        mod.s(np.array([1.0, 0.0]), group_size=2, channels={"lenght": np.array([1.0, 2.0])})
    text = str(err.value)
    assert "missing input 'length'" in text and "'lenght'" in text and "did you mean 'length'?" in text


@pytest.mark.parametrize("body, snippet, message", [
    ("  gate g = right && length < 10", "&", "unexpected character '&'; write `and`"),
    ("  gate g = right || length < 10", "|", "unexpected character '|'; write `or`"),
    ("  gate g = !right", "!", "unexpected character '!'; write `not` (`!=` is not-equal)"),
    ("  let x = length ^ 2", "^", "unexpected character '^'; write `**` for a power"),
    ("  let x = length;", ";", "unexpected character ';'; a statement ends at the end of its line"),
    ("  metric 'm' = 1", "'", "unexpected character \"'\"; strings are written in double quotes"),
    ("  term t = 1 if right else 0", "if", "unexpected 'if'; a conditional is written `condition ? a : b`"),
])
def test_python_and_c_spellings_say_how_the_language_writes_them(body, snippet, message):
    text = HEADER + body + "\n}\n"
    d = only(text)
    assert d.code in ("E101", "E102") and d.message == message
    at(d, text, snippet)


def test_a_param_without_a_type_says_that_it_needs_one():
    text = "shaper s(coeff = 0.1) {\n  input length: tokens\n}\n"
    d = only(text)
    assert (d.code, d.message) == ("E101", "unexpected '='; expected ':'; a param needs a type, as in "
                                           "`coeff: float = 0.1`")
    at(d, text, "=")


def test_a_factor_unbounded_by_a_param_without_a_range_names_the_param():
    text = HEADER.replace("limit: int = 10", "coeff: float = 0.1") + "  factor f = 1 - coeff * length / max(length) on right\n}\n"
    d = only(text)
    assert d.code == "E503"
    assert d.message.endswith("; param 'coeff' declares no range (e.g. `coeff: float in [0, 1]`)")
    ranged = text.replace("coeff: float = 0.1", "coeff: float in [0, 1] = 0.1")
    assert check_source(ranged, "spec.shape") == []


@pytest.mark.parametrize("call", ["meidan(length where right)", "meidan(length)", "cnt(right where right)"])
def test_a_misspelt_function_is_unknown_with_or_without_where(call):
    text = HEADER + f"  let m = {call}\n}}\n"
    d = only(text)
    assert d.code == "E203" and "did you mean" in d.message, d.render()
    at(d, text, call.split("(")[0])


def test_where_in_a_known_elementwise_function_says_it_only_goes_in_a_reduction():
    d = only(HEADER + "  let m = abs(length where right)\n}\n")
    assert d.code == "E302" and "only goes inside a reduction, not in abs()" in d.message


def test_an_unbounded_factor_names_the_unbounded_value_not_a_param_whose_range_is_declared():
    text = ("shaper s(slope: float >= 1 = 1, target: tokens > 0 = 1000) requires binary produces real {\n"
            "  input length: tokens\n  clamp >= 0\n  factor f = 1 / (length / target) ** slope\n}\n")
    d = only(text)
    assert d.code == "E503" and d.message.endswith("; `length / target` may range over [0, inf]"), d.message
    assert "slope" not in d.message


def test_a_factor_unbounded_by_a_param_with_one_bound_names_the_missing_bound():
    text = HEADER.replace("limit: int = 10", "coeff: float >= 1 = 1") + "  factor f = 1 - coeff on right\n}\n"
    d = only(text)
    assert d.code == "E503" and d.message.endswith("; param 'coeff' declares no upper bound"), d.message


def test_on_with_a_group_condition_suggests_when():
    text = HEADER + "  gate easy = mean(reward) > 0.5\n  term t = -0.1 on easy\n}\n"
    d = only(text)
    assert d.code == "E303" and d.message == ("`on` selects rollouts; this is a group bool: to apply the statement to "
                                              "whole groups where it holds, write `when easy`"), d.message
    assert d.location()[:2] == (5, 20)
    assert check_source(text.replace("on easy", "when easy"), "spec.shape") == []
