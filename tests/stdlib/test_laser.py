"""stdlib laser: LASER, LASER-D and LASER-DE against transcriptions of the authors' code
(hkust-nlp/Laser at c9e7c4e, `verl/utils/reward_score/length_penalty.py`:
`compute_length_reward_larse`, `_larse_d`, `_larse_de`), written from reading it, on random groups
of the code's scores (1, -0.5, -1) with lengths at and around the targets, on both backends."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

import shapec

LEVELS = ("high", "medium", "low")


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def laser(request):
    return shapec.load("laser", backend=request.param)


def larse(scores, lengths, target_length, scalar, reward_type):
    out = list(scores)
    for i in range(len(out)):
        if out[i] == 1.0:
            if reward_type in ("reward", "hybrid") and lengths[i] <= target_length:
                out[i] += scalar
            elif reward_type in ("penalty", "hybrid") and lengths[i] > target_length:
                out[i] -= scalar
    return out


def _dynamic_targets(scores, index, targets):
    """Each response's target, from its uid group's accuracy (the share of scores equal to 1)."""
    id2acc = defaultdict(list)
    for i, score in enumerate(scores):
        id2acc[index[i]].append(1 if score == 1.0 else 0)
    acc = {uid: sum(v) / len(v) for uid, v in id2acc.items()}
    out = []
    for i in range(len(scores)):
        a = acc[index[i]]
        out.append(targets["high"] if a >= (2 / 3) else targets["medium"] if a >= (1 / 3) else targets["low"])
    return out


def larse_d(scores, lengths, index, targets, scalar, reward_type):
    out = list(scores)
    for i, target in enumerate(_dynamic_targets(scores, index, targets)):
        out[i] = larse([out[i]], [lengths[i]], target, scalar, reward_type)[0]
    return out


def larse_de(scores, lengths, repeated, index, targets, scalar):
    out = list(scores)
    for i, target in enumerate(_dynamic_targets(scores, index, targets)):
        if out[i] == 1.0 and lengths[i] <= target:
            out[i] += scalar
        elif out[i] == -0.5 and lengths[i] > target and not repeated[i]:
            out[i] += scalar
    return out


def random_batch(rng: np.random.Generator, targets: list[float]):
    """Groups of 1-16 responses: all right, all wrong, mixed; lengths on, just past and far from targets."""
    sizes = rng.integers(1, 17, int(rng.integers(1, 5))).tolist()
    scores, lengths, index = [], [], []
    for g, k in enumerate(sizes):
        mix = rng.choice(["right", "wrong", "mixed"])
        p = {"right": [1, 0, 0], "wrong": [0, 0.7, 0.3], "mixed": [0.5, 0.3, 0.2]}[mix]
        scores += rng.choice([1.0, -0.5, -1.0], k, p=p).tolist()
        near = [t + d for t in targets for d in (-1, 0, 1)] + [0]
        lengths += [float(rng.choice(near)) if rng.random() < 0.6 else float(rng.integers(0, 3 * max(targets) + 2))
                    for _ in range(k)]
        index += [g] * k
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return scores, [max(0.0, x) for x in lengths], index, offsets


@pytest.mark.parametrize("seed", range(60))
def test_laser_matches_the_authors_code(laser, seed):
    rng = np.random.default_rng(seed)
    target = float(rng.choice([0, 1, 50, 8192]))
    scalar = float(rng.choice([0.5, 0.25, 1.0, 0.0, -0.5]))
    reward_type = str(rng.choice(["reward", "penalty", "hybrid"]))
    scores, lengths, _, offsets = random_batch(rng, [target])
    got = laser.laser(scores, offsets=offsets, channels={"length": lengths},
                      params={"target_length": target, "scalar": scalar, "reward_type": reward_type})
    assert got.rewards.tolist() == pytest.approx(larse(scores, lengths, target, scalar, reward_type), abs=1e-12)


@pytest.mark.parametrize("seed", range(60))
def test_laser_d_matches_the_authors_code(laser, seed):
    rng = np.random.default_rng(100 + seed)
    targets = dict(zip(LEVELS, (float(x) for x in rng.choice([0, 20, 50, 100, 8192], 3))))
    scalar = float(rng.choice([0.5, 0.25, 1.0, -0.5]))
    reward_type = str(rng.choice(["reward", "penalty", "hybrid"]))
    scores, lengths, index, offsets = random_batch(rng, list(targets.values()))
    params = {f"target_{k}": v for k, v in targets.items()} | {"scalar": scalar, "reward_type": reward_type}
    got = laser.laser_d(scores, offsets=offsets, channels={"length": lengths}, params=params)
    expected = larse_d(scores, lengths, index, targets, scalar, reward_type)
    assert got.rewards.tolist() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("seed", range(60))
def test_laser_de_matches_the_authors_code(laser, seed):
    rng = np.random.default_rng(200 + seed)
    targets = dict(zip(LEVELS, (float(x) for x in rng.choice([0, 20, 50, 100, 8192], 3))))
    scalar = float(rng.choice([0.5, 0.25, 1.0]))
    scores, lengths, index, offsets = random_batch(rng, list(targets.values()))
    repeated = rng.integers(0, 2, len(scores)).tolist()
    params = {f"target_{k}": v for k, v in targets.items()} | {"scalar": scalar}
    got = laser.laser_de(scores, offsets=offsets, channels={"length": lengths, "repeated": repeated}, params=params)
    expected = larse_de(scores, lengths, repeated, index, targets, scalar)
    assert got.rewards.tolist() == pytest.approx(expected, abs=1e-12)


def test_accuracy_exactly_two_thirds_and_one_third_take_the_higher_target(laser):
    # 2 of 3 right: high (200); 1 of 3: medium (150); 0 of 3: low (50); a length of exactly the target counts
    scores = [1.0, 1.0, -0.5, 1.0, -0.5, -0.5, -0.5, -1.0, -0.5]
    lengths = [200, 201, 0, 150, 0, 0, 50, 50, 51]
    params = {"target_high": 200, "target_medium": 150, "target_low": 50}
    got = laser.laser_d(scores, group_size=3, channels={"length": lengths}, params=params).rewards.tolist()
    assert got == [1.5, 1.0, -0.5, 1.5, -0.5, -0.5, -0.5, -1.0, -0.5]
    de = laser.laser_de(scores, group_size=3, channels={"length": lengths, "repeated": [0] * 9}, params=params)
    assert de.rewards.tolist() == [1.5, 1.0, -0.5, 1.5, -0.5, -0.5, -0.5, -1.0, 0.0]


def test_defaults_are_the_authors_config(laser):
    got = laser.laser([1.0, 1.0], group_size=2, channels={"length": [8192, 8193]})
    assert got.rewards.tolist() == [1.5, 1.0]
