"""stdlib prime_rl: prime-rl's linear length penalty and its own unit tests (tests/unit/orchestrator)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def linear(request):
    return shapec.load("prime_rl", backend=request.param).linear_length


def code(rewards, out, inp, turns, wo=0.25, wi=0.1, wt=0.1):
    """GRPOAlgorithm.score_group's shaped rewards (before the baseline), for one group."""
    share = lambda xs: [x / max(max(xs), 1) for x in xs]  # noqa: E731
    frac = [wo * a + wi * b + wt * c for a, b, c in zip(share(out), share(inp), share(turns))]
    mean = sum(rewards) / len(rewards)
    return [r - mean * f for r, f in zip(rewards, frac)]


def shaped(fn, rewards, out, inp, turns, **params):
    return fn(rewards, group_size=len(rewards), params=params,
              channels={"output_tokens": out, "input_tokens": inp, "turns": turns}).rewards


def advantages(x):
    return np.asarray(x) - np.mean(x)


def test_prime_rl_equal_lengths_reduce_to_plain_grpo(linear):
    got = shaped(linear, [1.0, 0.0, 1.0], [10, 10, 10], [1, 1, 1], [2, 2, 2])
    np.testing.assert_allclose(advantages(got), advantages([1.0, 0.0, 1.0]), atol=1e-6)


def test_prime_rl_completion_term_penalizes_longer(linear):
    got = shaped(linear, [1.0, 1.0, 1.0], [10, 20, 30], [1, 1, 1], [1, 1, 1], input_weight=0, turns_weight=0)
    adv = advantages(got)
    assert adv[0] > adv[1] > adv[2] and abs(adv.sum()) < 1e-6
    np.testing.assert_allclose(got, [1 - 0.25 / 3, 1 - 0.5 / 3, 0.75], atol=1e-12)


def test_prime_rl_context_term_penalizes_more_context(linear):
    got = shaped(linear, [1.0, 1.0], [10, 10], [1, 101], [1, 1], output_weight=0, input_weight=0.25, turns_weight=0)
    adv = advantages(got)
    assert adv[0] > adv[1] and abs(adv.sum()) < 1e-6


def test_prime_rl_turns_term_penalizes_more_turns(linear):
    got = shaped(linear, [1.0, 1.0], [100, 100], [1, 1], [1, 4], output_weight=0, input_weight=0, turns_weight=0.25)
    np.testing.assert_allclose(got, [1 - 0.25 / 4, 0.75], atol=1e-12)


def test_all_wrong_groups_are_not_penalised(linear):
    assert shaped(linear, [0.0, 0.0], [10, 500], [3, 9], [1, 5]).tolist() == [0.0, 0.0]


def test_all_zero_quantities_add_nothing(linear):
    # the code floors each max at 1, so an all-zero column divides 0 by 1
    assert shaped(linear, [1.0, 1.0], [0, 0], [0, 0], [0, 0]).tolist() == [1.0, 1.0]


def test_a_group_of_one_pays_the_full_weights(linear):
    assert shaped(linear, [1.0], [7], [3], [2]).tolist() == pytest.approx([1 - 0.45], abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_matches_the_code(linear, seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 8) for _ in range(5)]
    n = sum(sizes)
    rewards = [rng.choice([0.0, 1.0, 0.5, -1.0]) for _ in range(n)]
    out = [float(rng.randint(0, 3000)) for _ in range(n)]
    inp = [float(rng.randint(0, 2)) for _ in range(n)]
    turns = [float(rng.randint(0, 6)) for _ in range(n)]
    w = dict(wo=rng.random(), wi=rng.random(), wt=rng.random())
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    got = linear(rewards, offsets=offsets, channels={"output_tokens": out, "input_tokens": inp, "turns": turns},
                 params={"output_weight": w["wo"], "input_weight": w["wi"], "turns_weight": w["wt"]}).rewards
    want, start = [], 0
    for k in sizes:
        sl = slice(start, start + k)
        want += code(rewards[sl], out[sl], inp[sl], turns[sl], **w)
        start += k
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def code_f32(rewards, out, inp, turns, wo=0.25, wi=0.1, wt=0.1):
    """score_group's shaped rewards in the code's float32 tensors (python-float weights times float32 shares)."""
    r, o, i, t = (np.asarray(x, dtype=np.float32) for x in (rewards, out, inp, turns))

    def share(x):
        return x / max(x.max(), np.float32(1))
    frac = np.float32(wo) * share(o) + np.float32(wi) * share(i) + np.float32(wt) * share(t)
    return r - r.mean(dtype=np.float32) * frac


@pytest.mark.parametrize("seed", range(4))
def test_matches_the_codes_float32_arithmetic(linear, seed):
    # groups of one, all wrong, all right, tied lengths, all-zero quantities; the code computes in float32
    rng = random.Random(seed)
    sizes, rewards, out, inp, turns = [], [], [], [], []
    for _ in range(8):
        n = rng.choice([1, 2, 3, 8])
        kind = rng.choice(["mixed", "right", "wrong", "graded"])
        rewards += [{"mixed": float(rng.randint(0, 1)), "right": 1.0, "wrong": 0.0, "graded": rng.random()}[kind]
                    for _ in range(n)]
        tie, none = float(rng.randint(1, 4000)), rng.random() < 0.3
        out += [rng.choice([tie, float(rng.randint(0, 4000))]) for _ in range(n)]
        inp += [0.0 if none else float(rng.randint(0, 900)) for _ in range(n)]
        turns += [0.0 if none else float(rng.randint(1, 5)) for _ in range(n)]
        sizes.append(n)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    got = linear(rewards, offsets=offsets, channels={"output_tokens": out, "input_tokens": inp, "turns": turns}).rewards
    want = np.concatenate([code_f32(rewards[a:b], out[a:b], inp[a:b], turns[a:b]) for a, b in zip(offsets, offsets[1:])])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
