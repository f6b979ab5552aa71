"""prime-rl: shapec's GRPO algorithm scores groups of verifiers' own Episodes and Traces the way
prime-rl's orchestrator calls it, and gives the advantages of prime-rl's GRPO with its linear length
penalty.

prime-rl is not on the package index. Its `Algorithm` base, `iter_trainable_traces` and
`assign_advantages` (`src/prime_rl/orchestrator/algo/base.py` and `routing.py`, commit 559b447) are
rebuilt below as a stand-in package, and `GRPOAlgorithm.score_group` is transcribed in float32 as
the reference. verifiers is the real package.
"""

from __future__ import annotations

import asyncio
import sys
import types

import numpy as np
import pytest

import shapec
from shapec.compat.prime_rl import grpo_algorithm

from .test_verifiers import HAPO, TASKS, episode, hapo_rounds

WEIGHTS = {"output_weight": 0.25, "input_weight": 0.1, "turns_weight": 0.1}


# ------------------------------------------------------------------ prime-rl, rebuilt from its source
def iter_trainable_traces(episodes):
    for episode in episodes:
        for trace in episode.traces:
            if trace.has_error or not trace.agent.trainable:
                continue
            if any(any(node.mask) for node in trace.nodes):
                yield episode, trace


class Algorithm:
    def __init__(self, config, policy_pool):
        self.policy_pool = policy_pool


def assign_advantages(trace, values):
    nodes = [node for node in trace.nodes if any(node.mask)]
    total = sum(sum(node.mask) for node in nodes)
    advantages = [float(values)] * total
    offset = 0
    for node in nodes:
        end = offset + sum(node.mask)
        node.advantages = advantages[offset:end]
        offset = end


def grpo_reference(episodes, weights: dict | None) -> list[float]:
    """prime-rl's GRPOAlgorithm.score_group, its torch float32 arithmetic in numpy float32."""
    traces = [trace for _, trace in iter_trainable_traces(episodes)]
    rewards = np.array([t.reward for t in traces], dtype=np.float32)
    if weights is None:
        return (rewards - rewards.mean()).tolist()
    output = np.array([t.num_output_tokens for t in traces], dtype=np.float32)
    total = np.array([t.num_total_tokens for t in traces], dtype=np.float32)
    turns = np.array([t.num_turns for t in traces], dtype=np.float32)
    given = total - output
    one = np.float32(1)
    frac = (weights["output_weight"] * (output / np.maximum(output.max(), one))
            + weights["input_weight"] * (given / np.maximum(given.max(), one))
            + weights["turns_weight"] * (turns / np.maximum(turns.max(), one)))
    shaped = rewards - rewards.mean() * frac
    return (shaped - shaped.mean()).tolist()


@pytest.fixture(autouse=True)
def prime_rl(monkeypatch):
    """The stand-in package where the adapter imports prime-rl's algorithm runtime from."""
    names = ["prime_rl", "prime_rl.orchestrator", "prime_rl.orchestrator.algo"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    base = types.ModuleType("prime_rl.orchestrator.algo.base")
    base.Algorithm, base.iter_trainable_traces = Algorithm, iter_trainable_traces
    routing = types.ModuleType("prime_rl.orchestrator.algo.routing")
    routing.assign_advantages = assign_advantages
    monkeypatch.setitem(sys.modules, base.__name__, base)
    monkeypatch.setitem(sys.modules, routing.__name__, routing)


def random_group(rng: np.random.Generator, size: int) -> list:
    group = []
    for _ in range(size):
        turns = int(rng.integers(1, 4))
        group.append(episode(float(rng.random() < 0.6), [int(rng.integers(1, 40)) for _ in range(turns)],
                             [int(rng.integers(0, 30)) for _ in range(turns - 1)]))
    return group


def advantages(group: list) -> list[float | None]:
    """Each episode's assigned advantage, as prime-rl reads it back: on every sampled token."""
    out = []
    for ep in group:
        values = [v for node in ep.traces[0].nodes for v in (node.advantages or [])]
        assert len(set(values)) <= 1
        out.append(values[0] if values else None)
    return out


def score(algorithm, group: list) -> list[float | None]:
    asyncio.run(algorithm.score_group(group))
    return advantages(group)


@pytest.mark.parametrize("seed", range(8))
def test_the_linear_length_spec_gives_prime_rls_grpo_advantages(seed):
    rng = np.random.default_rng(seed)
    group = random_group(rng, int(rng.integers(2, 9)))
    cls = grpo_algorithm("prime_rl", shaper="linear_length", params=WEIGHTS)
    algo = cls(types.SimpleNamespace(length_penalty=None), policy_pool=None)
    got = score(algo, group)
    assert got == pytest.approx(grpo_reference(group, WEIGHTS), abs=1e-6)
    assert sum(got) == pytest.approx(0.0, abs=1e-9)  # float64 throughout: the group mean is exact


def test_traces_with_errors_are_left_out_of_the_group_and_unassigned():
    group = [episode(1.0, [10]), episode(1.0, [30], ok=False), episode(0.0, [20]), episode(1.0, [5, 5], [7])]
    algo = grpo_algorithm("prime_rl", shaper="linear_length", params=WEIGHTS)(
        types.SimpleNamespace(length_penalty=None), policy_pool=None)
    got = score(algo, group)
    assert got[1] is None
    expected = grpo_reference(group, WEIGHTS)
    assert [got[0], got[2], got[3]] == pytest.approx(expected, abs=1e-6)


def test_other_inputs_come_from_each_traces_info():
    spec = shapec.compile_str("shaper hinted(w: float = 0.01) {\n  input hint_tokens: tokens\n"
                              "  term t = -w * float(hint_tokens)\n}\n")
    group = [episode(1.0, [4], info={"hint_tokens": 10}), episode(0.0, [4], info={"hint_tokens": 30})]
    algo = grpo_algorithm(spec, shaper="hinted")(types.SimpleNamespace(length_penalty=None), policy_pool=None)
    # shaped 0.9 and -0.3, mean 0.3
    assert score(algo, group) == pytest.approx([0.6, -0.6], abs=1e-12)
    lacking = [episode(1.0, [4], info={"hint_tokens": 10}), episode(0.0, [4])]
    with pytest.raises(ValueError, match=r"trace '\w+' has no info\['hint_tokens'\], which other traces"):
        score(algo, lacking)


def test_prime_rls_own_length_penalty_set_beside_the_spec_is_refused():
    cls = grpo_algorithm("prime_rl", shaper="linear_length")
    with pytest.raises(ValueError, match=r"algo.length_penalty is set.*prime_rl.linear_length"):
        cls(types.SimpleNamespace(length_penalty=types.SimpleNamespace(num_output_tokens_weight=0.1)), None)


def test_hapo_tracked_keeps_each_tasks_history_across_groups():
    """The orchestrator scores each task's group on its own, round after round: the advantages are
    GRPO's on HAPO's rewards, with the history kept per task by the traces' task.key."""
    algo = grpo_algorithm("hapo", shaper="hapo_tracked", params=HAPO, backend="interpreter")(
        types.SimpleNamespace(length_penalty=None), policy_pool=None)
    for tasks in hapo_rounds(seed=12, attempts=4):
        for t, attempts in tasks:
            shaped = np.array([e for _, _, e in attempts])
            group = [episode(r, [n], task=TASKS[t]) for r, n, _ in attempts]
            assert score(algo, group) == pytest.approx((shaped - shaped.mean()).tolist(), abs=1e-9)
