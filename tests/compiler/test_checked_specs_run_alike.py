"""Specs that check must compile and run the same on both
backends, whatever constants they hold."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.compiler.lowering.module import emit_python


def both(source: str, name: str = "s") -> list:
    return [shapec.compile_str(source, "t.shape", backend)[name] for backend in ("interpreter", "numba")]


# ------------------------------------------------------------------ constant powers
CONSTANT_POWERS = '''shaper s() produces real {
  input length: tokens
  let k = 0 - 1
  term literal = (-8) ** 0.5
  term folded = (0 - 2) ** (1 / 3)
  term through_let = k ** 2.5
  term kept = 2 ** 0.5 + (-2) ** 2
  metric m = batch.mean((0 - 1) ** 0.5 ?? 7)
}
'''


def test_a_power_of_constants_with_a_negative_base_compiles_on_numba_and_is_missing():
    """numba folded `(-8.0) ** 0.5` with Python's `**`, a complex number, and the kernel did not
    compile (ShapecInternalError); the interpreter's np.power gives nan, a missing term."""
    assert shapec.check_source(CONSTANT_POWERS, "t.shape") == []
    outs = [s(np.array([0.0, 1.0, 1.0, 0.0]), group_size=2, channels={"length": [1, 2, 3, 4]}) for s in both(
        CONSTANT_POWERS)]
    for out in outs:
        assert out.terms["literal"].tolist() == [0.0] * 4  # missing: not applied
        assert out.terms["folded"].tolist() == [0.0] * 4 and out.terms["through_let"].tolist() == [0.0] * 4
        assert out.terms["kept"].tolist() == [2 ** 0.5 + 4] * 4
        assert out.metrics == {"m": 7.0}
    assert outs[1].rewards.tobytes() == outs[0].rewards.tobytes()
    assert "k_pow(" in emit_python(shapec.compile_str(CONSTANT_POWERS, "t.shape", "interpreter").ir("s"))


# ------------------------------------------------------------------ numbers are ASCII, like names
@pytest.mark.parametrize("number, digit", [("１２", "１"), ("٣", "٣"), ("1٣.5", "٣"), ("2 * १", "१")])
def test_a_number_with_a_digit_outside_0_to_9_is_e102_at_that_digit(number, digit):
    """NUMBER was \\d, any Unicode digit: '１２' and '٣' checked as 12 and 3, though a name with a
    fullwidth letter is refused and Python reads neither as a number."""
    text = f"shaper s() produces real {{\n  term t = {number}\n}}\n"
    [d] = shapec.check_source(text, "f.shape")
    assert (d.code, d.location()[:2]) == ("E102", (2, 12 + number.index(digit)))
    assert d.message == f"unexpected character {digit!r}; numbers are written with the digits 0-9"
    assert shapec.check_source(text.replace(number, "12"), "f.shape") == []


# ------------------------------------------------------------------ constants a param, band or state needs
SHAPER = "shaper s({params}) produces real {{\n  input length: tokens\n  term t = 1\n{body}}}\n{tail}"
INF, NAN = "1e308 * 10", "1e308 * 10 - 1e308 * 10"


@pytest.mark.parametrize("params, body, tail, col, value", [
    (f"x: int = {INF}", "", "", 19, "inf"),  # was an OverflowError traceback from check
    (f"x: int = {NAN}", "", "", 19, "nan"),  # was a ValueError traceback
    (f"x: float = {INF}", "", "", 21, "inf"),  # checked, then every call raised ParamError
    ("x: int = 1", "", f"pipeline p = s(x={INF})\n", 18, "inf"),  # was an OverflowError traceback
    ("x: float = 1", "", f"pipeline p = s(x={NAN})\n", 18, "nan"),
    (f"x: float in [0, {NAN}] = 1", "", "", 26, "nan"),  # was no upper bound at all
    (f"b: band = {{0, {INF}, 0.5}}", "", "", 24, "inf"),
    ("", f"  state st: float = {INF} update st\n", "", 21, "inf"),  # a state no checkpoint could load
    ("", f"  let k = band(length, {{0, {INF}, 1}})\n", "", 28, "inf"),
])
def test_a_constant_past_float64_where_a_number_is_required_is_e107(params, body, tail, col, value):
    text = SHAPER.format(params=params, body=body, tail=tail)
    [d] = shapec.check_source(text, "f.shape")
    line = 1 if params and not tail else text.count("\n", 0, text.index(INF)) + 1
    assert (d.code, d.location()[:2]) == ("E107", (line, col))
    assert d.message == f"this constant comes to {value}, not a finite number (the largest is about 1.8e308)"


@pytest.mark.parametrize("params, code, message", [
    ("b: bool >= 1 = true", "E302", "param 'b' is a bool; only number params take a bound"),
    ("e: enum(a, b) in [0, 1] = a", "E302", "param 'e' is an enum; only number params take a bound"),
    ("d: band > 0 = {1, 2, 0.5}", "E302", "param 'd' is a band; only number params take a bound"),
    ("x: int in [5, 1]", "E602", "the range [5, 1] of param 'x' holds no value"),
    ("x: float in [1, 0.5] = 1", "E602", "the range [1, 0.5] of param 'x' holds no value"),
    ("x: int >= 0.5 = 1", "E302", "param 'x' is an int; its bounds are whole numbers within +-9007199254740992 (2**53)"),
    ("x: int in [0.5, 0.7]", "E302", "param 'x' is an int; its bounds are whole numbers within +-9007199254740992 (2**53)"),
    ("x: int <= 1e20 = 5", "E302", "param 'x' is an int; its bounds are whole numbers within +-9007199254740992 (2**53)"),
    ("x: int = 1e300", "E604", "param 'x' is an int within +-9007199254740992 (2**53)"),
    ("e: enum(a, b, a) = a", "E202", "enum member 'a' is listed twice"),
])
def test_a_param_no_call_could_satisfy_is_refused_by_check(params, code, message):
    """Each of these checked clean; every call then failed (a pydantic SchemaError traceback for
    the int bounds, 'Field required' for the empty ranges) or the bound was silently ignored."""
    text = SHAPER.format(params=params, body="", tail="")
    [d] = shapec.check_source(text, "f.shape")
    assert (d.code, d.message) == (code, message)
    assert d.location()[0] == 1


def test_int_params_at_the_edge_still_check_and_run():
    text = SHAPER.format(params="x: int in [-9007199254740992, 9007199254740992] = 9007199254740992, y: float in [1, 1] = 1",
                         body="", tail="")
    assert shapec.check_source(text, "f.shape") == []
    out = shapec.compile_str(text, "f.shape", "interpreter").s([0.0], group_size=1, channels={"length": [1]},
                                                                 params={"x": 3})
    assert out.rewards.tolist() == [1.0]


def test_an_int_state_starts_at_a_whole_number():
    text = SHAPER.format(params="", body="  state st: int = 0.5 update st\n", tail="")
    [d] = shapec.check_source(text, "f.shape")
    assert (d.code, d.location()[:2], d.message) == ("E604", (4, 19), "state 'st' is an int; its initial value 0.5 is not")
    assert shapec.check_source(text.replace("0.5", "2"), "f.shape") == []
