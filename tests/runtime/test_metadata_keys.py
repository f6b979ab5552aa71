"""Metadata keys a call gets wrong are refused, never shaped through as absent: an unknown key names
the closest declared one, and a declared key left out that a reward reads with nothing standing in
for it names the key and the read. None says "in no group" and is always accepted."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.runtime.batch import BatchError
from shapec.runtime.shaper import AbsentMetadata

from ..helpers import src

SPEC = src("""
    shaper budgeted(p: float = 0.5) {
      input length: tokens
      meta budget: tokens
      term over = -p when length > budget
    }

    shaper fallback(p: float = 0.5) {
      input length: tokens
      meta budget: tokens
      term over = -p when length > (budget ?? 2)
    }

    shaper tested(p: float = 0.5) {
      input length: tokens
      meta budget: tokens
      term over = present(budget) ? -p : 0 when length > 2
    }

    shaper switched(on: bool = true) {
      input length: tokens
      meta budget: tokens
      term over = -0.5 when on and length > budget
    }

    shaper profiled(p: float = 0.5, min_samples: int >= 0 = 2) {
      input length: tokens
      meta prof: list(reward: float, length: tokens)
      let passing = prof.reward > 0
      let k = count(passing)
      term long = -p when k >= min_samples and length > mean(prof.length where passing)
    }
""")

REWARDS = [1.0, 1.0, 1.0, 1.0]
LENGTHS = {"length": [1, 3, 1, 3]}


@pytest.fixture(scope="module")
def m():
    return shapec.compile_str(SPEC, "t.shape", "interpreter")


def test_an_unknown_metadata_key_is_an_error_naming_the_closest_declared_key(m):
    with pytest.raises(BatchError) as err:
        m.budgeted(REWARDS, group_size=2, channels=LENGTHS, metadata={"budgt": [2, 2]})
    assert str(err.value) == "metadata: unknown key 'budgt' (did you mean 'budget'?); the shaper's metadata: 'budget'"


@pytest.mark.parametrize("metadata", [None, {}], ids=["no metadata=", "an empty mapping"])
def test_leaving_out_metadata_a_reward_reads_is_an_error_naming_the_key_and_the_read(m, metadata):
    with pytest.raises(AbsentMetadata) as err:
        m.budgeted(REWARDS, group_size=2, channels=LENGTHS, metadata=metadata)
    assert err.value.name == "budget"
    assert str(err.value) == (
        "metadata: missing 'budget' (`meta budget: tokens`): shaper 'budgeted' reads it (budget at t.shape:4:32) "
        "with nothing standing in for it, so left out it would shape no group through it; give it, one entry per "
        "group (None where a group has none), or give None to say no group has it")
    assert isinstance(err.value, BatchError)  # what callers catch for bad data


def test_none_for_a_key_says_no_group_has_it_and_is_accepted(m):
    out = m.budgeted(REWARDS, group_size=2, channels=LENGTHS, metadata={"budget": None})
    assert out.rewards.tolist() == REWARDS
    out = m.budgeted(REWARDS, group_size=2, channels=LENGTHS, metadata={"budget": [2, None]})
    assert out.rewards.tolist() == [1.0, 0.5, 1.0, 1.0]


@pytest.mark.parametrize("shaper", ["fallback", "tested"])
def test_metadata_read_behind_a_fallback_or_a_presence_test_may_be_left_out(m, shaper):
    out = m[shaper](REWARDS, group_size=2, channels=LENGTHS)
    assert out.rewards.tolist() == ([1.0, 0.5, 1.0, 0.5] if shaper == "fallback" else REWARDS)


def test_a_count_over_an_absent_list_is_zero_not_a_read_so_it_guards_what_follows(m):
    out = m.profiled(REWARDS, group_size=2, channels=LENGTHS)  # count(passing) = 0 < 2: the term is off
    assert out.rewards.tolist() == REWARDS


def test_a_mean_over_an_absent_list_is_a_read_when_the_params_let_it_reach_the_rewards(m):
    with pytest.raises(AbsentMetadata, match=r"missing 'prof' .*reads it \(mean\(prof.length where passing\) at "
                                             r"t.shape:\d+:\d+\)"):
        m.profiled(REWARDS, group_size=2, channels=LENGTHS, params={"min_samples": 0})
    with pytest.raises(AbsentMetadata, match="missing 'prof'"):  # one group's params are enough
        m.profiled(REWARDS, group_size=2, channels=LENGTHS, params={"min_samples": [2, 0]})
    out = m.profiled(REWARDS, group_size=2, channels=LENGTHS, metadata={"prof": None}, params={"min_samples": 0})
    assert out.rewards.tolist() == REWARDS


def test_metadata_only_a_branch_the_params_turn_off_reads_may_be_left_out(m):
    out = m.switched(REWARDS, group_size=2, channels=LENGTHS, params={"on": False})
    assert out.rewards.tolist() == REWARDS
    with pytest.raises(AbsentMetadata, match="missing 'budget'"):
        m.switched(REWARDS, group_size=2, channels=LENGTHS, params={"on": [False, True]})


def test_a_pipeline_refuses_what_any_stage_reads_and_names_the_stage():
    m = shapec.compile_str(SPEC + src("""
        pipeline both = fallback >> budgeted
    """), "t.shape", "interpreter")
    with pytest.raises(AbsentMetadata, match="shaper 'budgeted' reads it"):
        m.both(REWARDS, group_size=2, channels=LENGTHS)


def test_the_nemo_rl_shaper_needs_no_profile_metadata():
    """Its profile bands fall back to the global ones, and `count(passing) >= min_samples` keeps the
    profiled-length term off a prompt without profiled rollouts."""
    shaper = shapec.load("nemo_rl", backend="interpreter").length_penalty
    channels = {"reasoning": [10, 30, 5], "answer": [0, 0, 0], "low_effort": [0, 0, 0]}
    out = shaper([1, 1, 0], group_size=3, channels=channels,
                 params={"profiled_length_penalty": 0.1, "group_length_penalty_profile_gate": True,
                         "group_total_length_penalty_coeff": 0.2})
    assert out.gates["profile_gate"] == ["missing_profile_limit"]
    assert np.isfinite(out.rewards).all()
