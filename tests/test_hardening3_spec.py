"""Third red-team pass on the spec side: specs that check must compile and run the same on both
backends, whatever constants they hold."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.compiler.lowering import emit_python


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
