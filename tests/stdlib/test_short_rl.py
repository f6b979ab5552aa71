"""Short-RL: RightGate, SlackBand, StableSwitch and the running best that persists (stdlib/short_rl.shape)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shapec
from shapec.compat.short_rl import ShortRL
from shapec.runtime.states import StateError

EPS = 1e-5


def beta(length, l_min, l_max, tau_l=200):
    """The official rule, written out: 0.5 inside the slack band, linear decay past it."""
    return 0.5 if length <= l_min + tau_l else 0.5 - (length - l_min) / (l_max - l_min + EPS)


def batch(accuracy_hits: int, n: int = 20):
    """n rollouts in groups of 4, the first `accuracy_hits` correct, all 100 tokens long."""
    correct = [1] * accuracy_hits + [0] * (n - accuracy_hits)
    return [float(c) for c in correct], correct, [100] * n


# ------------------------------------------------------------------------------ one step
def test_gates_and_slack_band_in_one_group():
    # correct lengths 100, 500, 300: l_min 100, l_max 500; band edge 100 + 200 = 300 (inclusive)
    # 500 > 300 -> 0.5 - 400 / (400 + 1e-5); the wrong rollout (RightGate) gets nothing
    shaper = ShortRL()
    out = shaper([2.0, 2.0, 2.0, -1.5], [1, 1, 1, 0], [100, 500, 300, 50], group_size=4)
    assert out.tolist() == [2.0 + 0.5, 2.0 + (0.5 - 400 / (400 + EPS)), 2.0 + 0.5, -1.5]
    # acc = 3/4 is the first best: the switch is on
    assert shaper.acc_max == 0.75 and shaper.switch_on


def test_group_statistics_are_per_group_over_correct_rollouts_only():
    # group 0: correct 10 and 1000 (the wrong 5 is not l_min); group 1: correct 400, 900, 650
    lengths = [10, 1000, 5, 400, 900, 650]
    out = ShortRL()([1, 1, 0, 1, 1, 1], [1, 1, 0, 1, 1, 1], lengths, offsets=[0, 3, 6])
    assert out.tolist() == [
        1 + beta(10, 10, 1000), 1 + beta(1000, 10, 1000), 0.0,
        1 + beta(400, 400, 900), 1 + beta(900, 400, 900), 1 + beta(650, 400, 900),
    ]
    assert out[1] == pytest.approx(1 - 0.5, abs=1e-7)  # the longest correct: beta about 0.5 - 1
    assert out[5] == 1 + 0.5 - 250 / (500 + EPS)


def test_alpha_and_tau_l_scale_and_widen_the_band():
    # tau_l = 50: 200 > 100 + 50 -> 0.5 - 100 / (100 + 1e-5); alpha 2 doubles it
    out = ShortRL(tau_l=50, alpha=2.0)([1, 1], [1, 1], [100, 200], group_size=2)
    assert out.tolist() == [1 + 2.0 * 0.5, 1 + 2.0 * (0.5 - 100 / (100 + EPS))]


def test_groups_without_a_correct_rollout_are_unchanged():
    out = ShortRL()([0.0, -1.0, 1.0, 1.0], [0, 0, 1, 1], [10, 500, 100, 100], group_size=2)
    assert out.tolist() == [0.0, -1.0, 1.5, 1.5]


# ------------------------------------------------------------------------------ StableSwitch over steps
def test_the_switch_turns_off_and_on_across_steps():
    shaper = ShortRL(tau_acc=0.05)
    seen = []
    for hits in (10, 5, 9, 15, 14, 13):
        rewards, correct, lengths = batch(hits)
        out = shaper(rewards, correct, lengths, group_size=4)
        shaped = [r + 0.5 * c for r, c in zip(rewards, correct)]  # every correct length is its group's l_min
        assert out.tolist() == (shaped if shaper.switch_on else rewards)
        seen.append((hits / 20, shaper.acc_max, shaper.switch_on))
    assert seen == [
        (0.5, 0.5, True),     # first step: acc_max 0 -> 0.5, on
        (0.25, 0.5, False),   # 0.25 < 0.5 - 0.05: off
        (0.45, 0.5, True),    # 0.45 >= 0.5 - 0.05 (equal): on again
        (0.75, 0.75, True),   # new best, updated before the check
        (0.7, 0.75, True),    # 0.7 >= 0.75 - 0.05 (equal)
        (0.65, 0.75, False),  # 0.65 < 0.7: off
    ]


def test_state_dict_restores_the_running_best():
    trained = ShortRL()
    trained(*batch(16), group_size=4)  # acc_max 0.8
    state = trained.state_dict()
    assert state == {"acc_max": 0.8}

    resumed = ShortRL()
    resumed.load_state_dict(state)
    rewards, correct, lengths = batch(10)  # acc 0.5 < 0.8 - 0.05
    assert resumed(rewards, correct, lengths, group_size=4).tolist() == rewards
    assert not resumed.switch_on and resumed.acc_max == 0.8

    # what the official code does on resume: a fresh best of 0, so the same batch is shaped
    fresh = ShortRL()
    assert fresh(rewards, correct, lengths, group_size=4).tolist() != rewards
    assert fresh.switch_on and fresh.acc_max == 0.5


def test_instances_keep_separate_state():
    a, b = ShortRL(), ShortRL()
    a(*batch(20), group_size=4)
    assert (a.acc_max, b.acc_max) == (1.0, 0.0)


def test_an_empty_step_leaves_the_best_unchanged():
    shaper = ShortRL()
    shaper(*batch(12), group_size=4)
    assert shaper([], [], [], group_size=4).tolist() == []
    assert shaper.acc_max == 0.6 and not shaper.switch_on


def test_validation_calls_do_not_move_the_best():
    shaper = shapec.load("short_rl").short_rl
    rewards, correct, lengths = batch(18)
    out = shaper(rewards, group_size=4, channels={"correct": correct, "length": lengths}, training=False)
    assert out.rewards.tolist() == rewards
    assert shaper.state_dict() == {"short_rl": {"acc_max": 0.0}}


def test_shaper_reports_terms_gates_and_metrics():
    shaper = shapec.load("short_rl").short_rl
    out = shaper([1.0, 1.0, 0.0, 0.0], group_size=2, channels={"correct": [1, 1, 0, 0], "length": [100, 400, 9, 9]})
    assert out.terms["length_reward"].tolist() == [0.5, 0.5 - 300 / (300 + EPS), 0.0, 0.0]
    assert out.gates["stable_switch"] == ["open", "open"]
    assert out.metrics["acc"] == 0.5 and out.metrics["acc_max"] == 0.5
    assert out.metrics["length_reward_mean"] == (0.5 + (0.5 - 300 / (300 + EPS))) / 2


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_matches_the_official_rule_over_random_steps(data):
    tau_l = data.draw(st.sampled_from([0, 100, 200]))
    shaper, best = ShortRL(tau_l=tau_l), 0.0
    for _ in range(data.draw(st.integers(1, 4))):
        sizes = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
        n = sum(sizes)
        correct = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
        lengths = data.draw(st.lists(st.integers(0, 2000), min_size=n, max_size=n))
        rewards = [3.0 if c else -0.5 for c in correct]
        offsets = [0]
        for size in sizes:
            offsets.append(offsets[-1] + size)
        acc = sum(correct) / n
        best = max(best, acc)
        expected = list(rewards)
        if acc >= best - 0.05:
            for s, e in zip(offsets[:-1], offsets[1:]):
                right = [L for c, L in zip(correct[s:e], lengths[s:e]) if c]
                for i in range(s, e):
                    if correct[i]:
                        expected[i] += beta(lengths[i], min(right), max(right), tau_l)
        out = shaper(rewards, correct, lengths, offsets=offsets)
        assert out.tolist() == expected
        assert shaper.acc_max == best and shaper.switch_on == (acc >= best - 0.05)


# ------------------------------------------------------------------------------ arguments
@pytest.mark.parametrize("kwargs, name", [
    ({"tau_l": -1}, "tau_l"), ({"tau_acc": 1.5}, "tau_acc"), ({"tau_acc": -0.1}, "tau_acc"),
    ({"alpha": -1.0}, "alpha"), ({"alpha": float("nan")}, "alpha"),
])
def test_invalid_arguments_name_the_param(kwargs, name):
    with pytest.raises(ValueError, match=rf"param '{name}' of shaper 'short_rl'"):
        ShortRL(**kwargs)


def test_load_state_dict_rejects_unknown_keys():
    with pytest.raises(StateError, match="unknown Short-RL state \\['max_acc'\\]; expected 'acc_max'"):
        ShortRL().load_state_dict({"max_acc": 0.5})


@pytest.mark.parametrize("state, message", [
    ({"acc_max": math.nan}, r"state acc_max: expected a finite number, got nan"),
    ({"acc_max": math.inf}, r"state acc_max: expected a finite number, got inf"),
    ({"acc_max": 7.0}, r"state acc_max: expected an accuracy in \[0, 1\], got 7.0"),
    ({"acc_max": -0.1}, r"state acc_max: expected an accuracy in \[0, 1\], got -0.1"),
    ({"acc_max": "0.5"}, r"state acc_max: expected a finite number, got '0.5'"),
    ({"acc_max": True}, r"state acc_max: expected a finite number, got True"),
    ({"acc_max": None}, r"state acc_max: expected a finite number, got None"),
    ({"acc_max": 10**400}, r"state acc_max: expected a finite number"),
    ({}, r"Short-RL state: missing 'acc_max'"),
    (None, r"Short-RL state: expected a mapping \{'acc_max': float\}, got NoneType"),
    ([0.5], r"Short-RL state: expected a mapping \{'acc_max': float\}, got list"),
])
def test_load_state_dict_validates_and_keeps_the_old_state(state, message):
    shaper = ShortRL()
    shaper(*batch(16), group_size=4)  # acc_max 0.8
    with pytest.raises(StateError, match=message):
        shaper.load_state_dict(state)
    assert shaper.acc_max == 0.8


def test_load_state_dict_accepts_the_accuracy_range_ends():
    shaper = ShortRL()
    for value in (0, 1, 0.25):
        shaper.load_state_dict({"acc_max": value})
        assert shaper.acc_max == value


def test_lengths_must_match_the_rewards():
    with pytest.raises(ValueError, match=r"channels\['length'\]: expected 2 values \(one per rollout\), got 1"):
        ShortRL()([1, 1], [1, 1], [100], group_size=2)


def test_metrics_of_the_last_step_are_exposed_for_logging():
    shaper = ShortRL()
    assert shaper.metrics == {}
    shaper(*batch(16), group_size=4)  # every correct length is its group's shortest: beta 0.5
    assert shaper.metrics == {"acc": 0.8, "acc_max": 0.8, "length_reward_mean": 0.5}
    shaper(*batch(10), group_size=4)
    assert shaper.metrics == {"acc": 0.5, "acc_max": 0.8, "length_reward_mean": 0.0}
