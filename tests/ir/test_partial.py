"""The one partial evaluator (ir/partial.py): param-level values from a call's param columns, by the
language's value rules; what it cannot know is unknown, never guessed."""

from __future__ import annotations

import math

import numpy as np

import shapec
from shapec.ir.partial import ParamValues

SPEC = """shaper s(a: float = 0, b: float = 1, on: bool = true, mode: enum(x, y) = x) produces real {
  input length: tokens
  let scale = on ? a : b
  let wide = a > 0 or length > 3
  term t = -scale * float(length) when a > 0 and b > 0
  term u = -0.5 when on and length > 2
  term w = 0.25 when mode == "y" or wide
}
"""


def evaluator(**columns):
    ir = shapec.compile_str(SPEC, backend="interpreter").ir("s")
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
    return ir, ParamValues(ir, lambda name: arrays.get(name))


def step(ir, name):
    return next(s for s in ir.steps if s.name == name)


def test_a_condition_of_params_is_known_in_every_group():
    ir, values = evaluator(a=[0.0, 2.0], b=[1.0, 1.0])
    assert values.of(step(ir, "t").when).tolist() == [0.0, 1.0]


def test_false_and_anything_is_false_and_true_or_anything_is_true():
    ir, values = evaluator(a=[0.0, 0.0], b=[1.0, 1.0], on=[0.0, 0.0], mode=[0.0, 0.0])
    assert values.always(step(ir, "u").when, 0.0)  # `on` false: the rollout part is never needed
    ir, values = evaluator(a=[1.0, 2.0], b=[1.0, 1.0], mode=[0.0, 0.0])
    assert values.always(step(ir, "w").when.args[1], 1.0)  # a param-level let that is an `or`


def test_a_param_level_let_and_a_conditional_are_followed():
    ir, values = evaluator(a=[3.0, 4.0], b=[5.0, 6.0], on=[1.0, 0.0])
    scale = step(ir, "t").expr.args[0].args[0]  # -scale * ...: the ref to the let
    assert values.of(scale).tolist() == [3.0, 6.0]


def test_what_depends_on_a_rollout_or_on_an_unknown_param_is_unknown():
    ir, values = evaluator(a=[0.5], b=[1.0])
    assert values.of(step(ir, "u").when) is None  # `on` not given
    ir, values = evaluator(a=[0.5], b=[1.0], on=[1.0])
    assert values.of(step(ir, "u").when) is None  # length > 2 is per rollout
    assert not values.always(step(ir, "u").when, 1.0)


def test_a_missing_param_value_stays_missing_not_false():
    ir, values = evaluator(a=[math.nan], b=[1.0])
    assert np.isnan(values.of(step(ir, "t").when)).all()
