"""stdlib thinkprune and the binary-contract inference: {0, 1} factors and conditionals keep rewards binary."""

from __future__ import annotations

import random

import numpy as np
import pytest

import shapec

from ..helpers import assert_error, assert_ok, position, src


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def thinkprune(request):
    return shapec.load("thinkprune", backend=request.param)


def test_truncate_zeroes_correct_rollouts_past_the_limit(thinkprune):
    out = thinkprune.truncate([1, 1, 1, 0, 0], group_size=5, channels={"length": [3999, 4000, 4001, 9000, 10]})
    assert out.rewards.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    out = thinkprune.truncate([1, 1], group_size=2, channels={"length": [10, 11]}, params={"limit": 10})
    assert out.rewards.tolist() == [1.0, 0.0]


def test_truncate_is_proved_binary():
    assert shapec.load("thinkprune", backend="interpreter").ir("truncate").produces == "binary"


def test_truncate_then_a_binary_shaper_checks_and_runs(thinkprune):
    assert_ok("import thinkprune\nimport nemo_rl\npipeline p = thinkprune.truncate >> nemo_rl.length_penalty\n")
    text = "import thinkprune\nimport nemo_rl\npipeline p = thinkprune.truncate(limit=20) >> nemo_rl.length_penalty\n"
    mod = shapec.compile_str(text, "p.shape", "interpreter")
    out = mod.p([1, 1, 1], group_size=3, channels={"length": [10, 30, 15], "reasoning": [10, 30, 15],
                                                  "answer": [0, 0, 0], "low_effort": [0, 0, 0]},
                params={"length_penalty": {"longest_total_penalty": 0.2}})
    assert out.stage("truncate").rewards.tolist() == [1.0, 0.0, 1.0]
    assert out.rewards.tolist() == [1.0, 0.0, 0.8]


def test_the_wrong_order_suggests_the_order_that_passes():
    text = "import thinkprune\nimport nemo_rl\npipeline p = nemo_rl.length_penalty >> thinkprune.truncate\n"
    diag = assert_error(text, "E401", "thinkprune.truncate",
                        message="move 'length_penalty' after 'truncate'")
    assert diag.code == "E401"
    fixed = "import thinkprune\nimport nemo_rl\npipeline p = thinkprune.truncate >> nemo_rl.length_penalty\n"
    assert_ok(fixed)


def test_no_swap_is_suggested_when_neither_order_passes():
    text = src('''
        import nemo_rl
        shaper widen() requires binary produces real {
          term plus = 0.5
        }
        pipeline p = nemo_rl.length_penalty >> widen >> nemo_rl.length_penalty
    ''')
    diags = shapec.check_source(text)
    assert [d.code for d in diags] == ["E401", "E401"]
    first, second = diags
    assert (first.location()[:2]) == position(text, "widen >>")
    assert "no order of the two works" in first.message and "move" not in first.message
    assert "no order of the two works" in second.message


@pytest.mark.parametrize("factor", ["length > limit ? 0 : 1", "length > limit ? 0 : 1 when limit > 3",
                                    "min(1, length > limit ? 0 : 1)", "(length > limit ? 0 : 1) * (length > 2 ? 1 : 0)",
                                    "-(length > limit ? -1 : 0)"])
def test_zero_one_factors_keep_rewards_binary(factor):
    text = src(f'''
        shaper cut(limit: tokens > 0 = 5) requires binary produces binary {{
          input length: tokens
          factor keep = {factor}
        }}
    ''')
    assert_ok(text)


@pytest.mark.parametrize("result", ["length > limit ? 0 : reward", "length > limit ? reward : 0",
                                    "length > 9 ? 0 : length > limit ? 1 : reward", "min(reward, length > limit ? 0 : 1)",
                                    "reward * (length > limit ? 0 : 1)"])
def test_conditionals_on_a_binary_reward_keep_it_binary(result):
    text = src(f'''
        shaper cut(limit: tokens > 0 = 5) requires binary produces binary {{
          input length: tokens
          result = {result}
        }}
    ''')
    assert_ok(text)


@pytest.mark.parametrize("body", ["factor half = length > limit ? 0.5 : 1",
                                  "result = length > limit ? 0.5 : reward",
                                  "term minus = length > limit ? -1 : 0\n  clamp >= 0",
                                  "result = length > limit ? 0 : reward + 1"])
def test_other_values_are_not_binary(body):
    text = src(f'''
        shaper cut(limit: tokens > 0 = 5) requires binary produces binary {{
          input length: tokens
          {body}
        }}
    ''')
    assert_error(text, "E402", "produces binary", message="only known")


def test_a_conditional_on_an_unconstrained_reward_is_not_binary():
    text = src('''
        shaper cut(limit: tokens > 0 = 5) requires unit produces binary {
          input length: tokens
          result = length > limit ? 0 : reward
        }
    ''')
    assert_error(text, "E402", "produces binary")


@pytest.mark.parametrize("expr", ["1 - alpha * (length / max(length))", "1 - alpha * (float(length) / float(max(length)))",
                                  "1 - alpha * (total / max(total))",
                                  # the same share however the product is written (left-associative * and /)
                                  "1 - alpha * length / max(length)", "1 - length * alpha / max(length)",
                                  "1 - alpha * total / max(total)", "1 - alpha * 0.5 * length / max(length)",
                                  "length / (2 * max(length))", "length / (max(length) + 1)",
                                  # relations the group's extremes give: min(x) <= x <= max(x)
                                  "1 - (length - min(length)) / (max(length) - min(length) + 1e-5)",
                                  "(length - min(length)) / (max(length) - min(length))",
                                  "min(length) / length", "min(length) / (length + answer)",
                                  "1 - alpha * (total - min(total)) / (max(total) - min(total) + 1e-5)"])
def test_a_share_of_the_group_maximum_is_within_zero_one(expr):
    text = src(f'''
        shaper share(alpha: float in [0, 1] = 0.5) requires binary produces unit {{
          input length: tokens
          input answer: tokens
          channel total = length + answer
          gate right = reward > 0
          factor shrink = {expr} on right
        }}
    ''')
    assert_ok(text)


@pytest.mark.parametrize("expr", ["1 - alpha * (length / max(length where right))", "1 - alpha * (score / max(score))",
                                  "1 - alpha * (length / max(answer))", "1 - 2 * (length / max(length))",
                                  "1 - 2 * alpha * length / max(length)", "1 - alpha * length / max(length) * 2",
                                  "1 - alpha * length / max(length where right)", "1 - length / (max(length) - 1)",
                                  "1 - (length - min(length)) / (max(length) - min(answer))",
                                  "max(length) / length", "(length - mean(length)) / max(length)",
                                  "1 - alpha * score / max(score)", "(length - min(length)) / (max(length) - 2 * min(length))"])
def test_ratios_that_may_leave_zero_one_are_still_e503(expr):
    text = src(f'''
        shaper share(alpha: float in [0, 1] = 0.5) requires binary produces unit {{
          input length: tokens
          input answer: tokens
          input score: float
          gate right = reward > 0
          factor shrink = {expr} on right
        }}
    ''')
    assert_error(text, "E503", expr.split(" on")[0])


@pytest.mark.parametrize("seed", range(3))
def test_matches_generation_capped_at_max_tokens(thinkprune, seed):
    # verl's vLLM rollout stops at max_tokens = limit: `limit` tokens complete, `limit + 1` are cut and score 0
    rng = random.Random(seed)
    limit = rng.choice([1, 2000, 3000, 4000])
    sizes = [rng.choice([1, 2, 5, 16]) for _ in range(6)]
    n = sum(sizes)
    rewards = [float(rng.randint(0, 1)) for _ in range(n)]
    lengths = [rng.choice([limit - 1, limit, limit + 1, rng.randint(0, 2 * limit)]) for _ in range(n)]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    out = thinkprune.truncate(rewards, offsets=offsets, channels={"length": lengths}, params={"limit": limit})
    assert out.rewards.tolist() == [r if x <= limit else 0.0 for r, x in zip(rewards, lengths)]
