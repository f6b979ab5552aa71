"""The drop-ins shape through the Python API, so an integer past 2**53 (which a float64 would round)
is refused there too, naming the row; 2**53 itself is accepted."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.compat._groups import shape_by_group
from shapec.compat.nemo_rl import apply_group_length_penalties
from shapec.runtime.batch import BatchError

from .test_nemo_rl import row

BIG = 2 ** 53 + 1
EXACT = "expected a number that a float64 holds exactly (at most 2**53)"


def test_the_nemo_rl_drop_in_refuses_a_reward_past_2_53_naming_its_row():
    results = [row(1, answer=3), row(BIG, answer=5)]
    with pytest.raises(BatchError) as err:
        apply_group_length_penalties(results, {"default": {"length_type": "chars"}}, 2)
    assert str(err.value) == f"full_result.reward: index 1: {EXACT}, got {BIG}"
    results = [row(1, answer=3), row(2 ** 53, answer=5)]
    apply_group_length_penalties(results, {"default": {"length_type": "chars"}}, 2)


def test_the_trainer_adapters_grouping_refuses_a_reward_or_length_past_2_53_naming_its_row():
    shaper = shapec.compile_str("shaper s(p: float = 0.1) {\n  input length: tokens\n"
                                "  term t = -p when length > 3\n}\n", "t.shape", "interpreter").s
    with pytest.raises(BatchError) as err:
        shape_by_group(shaper, [1.0, BIG, 1.0], ["a", "a", "b"], lengths=[1, 2, 3])
    assert str(err.value) == f"rewards: index 1: {EXACT}, got {BIG}"
    with pytest.raises(BatchError) as err:
        shape_by_group(shaper, [1.0, 0.0, 1.0], ["a", "a", "b"], lengths=np.array([1, 2, BIG]))
    assert str(err.value) == f"channels['length']: index 2: {EXACT}, got {BIG}"
