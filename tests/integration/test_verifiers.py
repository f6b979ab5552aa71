"""verifiers: `shape_episode` shapes the sibling attempts of one episode (best-of-n) on verifiers'
own Episode and Trace objects, and best-of-n's own `finalize` then ranks the shaped rewards."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import shapec
from shapec.compat.verifiers import shape_episode

from ..stdlib.test_hapo import MAX_LEN
from ..stdlib.test_hapo import step as hapo_step
from .require import need

vf = need("verifiers.v1", "verifiers")


def episode(reward: float, sampled: list[int], observed: list[int] = (), ok: bool = True, info: dict | None = None,
            task=None):
    """One trace: a prompt token, then each model turn's sampled tokens followed by an observation
    (tool output) of `observed[turn]` tokens; the last call reports the usage. With a verifiers
    `Task`, the trace records it as verifiers' rollout does (its key and hash)."""
    nodes, calls, next_id = [], [], 0

    def add(message, n: int, sampled_node: bool) -> None:
        nonlocal next_id
        nodes.append(vf.MessageNode(message=message, token_ids=list(range(next_id, next_id + n)),
                                    mask=[sampled_node] * n, logprobs=[0.0] * n, sampled=sampled_node,
                                    parent=len(nodes) - 1 if nodes else None))
        next_id += n

    add(vf.UserMessage(content="q"), 1, False)
    for turn, n in enumerate(sampled):
        add(vf.AssistantMessage(content="a"), n, True)
        if turn == len(sampled) - 1:
            usage = vf.Usage(prompt_tokens=1 + sum(observed), completion_tokens=sum(sampled))
            calls.append(vf.ModelCall(node=len(nodes) - 1, usage=usage))
        if turn < len(observed):
            add(vf.ToolMessage(content="t", tool_call_id="x"), observed[turn], False)
    recorded = vf.TraceTask(type="Task", data=vf.TaskData(idx=0, prompt=None)) if task is None else \
        vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash)
    trace = vf.Trace[vf.TaskData](task=recorded,
                                  agent=vf.AgentInfo(config=vf.AgentConfig()), nodes=nodes, calls=calls,
                                  rewards={"reward": vf.Reward(score=reward)}, ok=ok, info=info or {})
    return vf.Episode(env=vf.EnvInfo(id="env", name="env"), task=trace.task, group=vf.GroupInfo(id="group"),
                      traces=[trace])


def best_of_n(*attempts) -> object:
    """One episode holding every attempt's trace, as best-of-n's n runs leave it."""
    first = attempts[0]
    for other in attempts[1:]:
        first.traces.extend(other.traces)
    return first


def test_shaping_an_episode_gives_each_attempt_its_shaped_reward_and_metrics():
    lengths, rewards = [12, 30, 7, 18], [1.0, 1.0, 0.0, 1.0]
    ep = best_of_n(*(episode(r, [n]) for r, n in zip(rewards, lengths)))
    shaped = shape_episode(ep, "kimi", shaper="kimi_length")
    direct = shapec.load("kimi").kimi_length(rewards, group_size=4, channels={"length": lengths})
    assert [t.reward for t in ep.traces] == direct.rewards.tolist() == shaped.rewards.tolist()
    assert [t.rewards["reward"].score for t in ep.traces] == rewards  # the task's own rewards stay
    for trace in ep.traces:
        assert {k: v for k, v in trace.metrics.items() if k.startswith("shapec/")} == \
            {f"shapec/{k}": pytest.approx(v) for k, v in direct.metrics.items()}


def test_best_of_n_ranks_the_shaped_rewards():
    """Two correct attempts tie on the task's reward; shaped, the shorter one is the best."""
    from verifiers.v1.envs.best_of_n import BestOfNEnv, BestOfNEnvConfig

    kimi = shapec.load("kimi").kimi_length

    class ShortestCorrect(BestOfNEnv):
        async def finalize(self, task, episode):
            shape_episode(episode, kimi)
            await super().finalize(task, episode)

    env = ShortestCorrect.__new__(ShortestCorrect)  # finalize reads only the config: no taskset to load
    env.config = BestOfNEnvConfig(n=3)
    ep = best_of_n(episode(1.0, [40]), episode(1.0, [10]), episode(0.0, [5]))
    asyncio.run(env.finalize(None, ep))
    assert [t.reward for t in ep.traces] == pytest.approx([0.5, 1.357142857142857, 0.0])
    assert [t.metrics["best"] for t in ep.traces] == [0.0, 1.0, 0.0]
    assert [t.metrics["pass_at_n"] for t in ep.traces] == [1.0, 1.0, 1.0]


def test_attempts_with_an_error_keep_their_rewards_and_stay_out_of_the_group():
    ep = best_of_n(episode(1.0, [12]), episode(1.0, [3], ok=False), episode(1.0, [30]))
    shape_episode(ep, "kimi", shaper="kimi_length")
    direct = shapec.load("kimi").kimi_length([1.0, 1.0], group_size=2, channels={"length": [12, 30]})
    assert [ep.traces[0].reward, ep.traces[2].reward] == direct.rewards.tolist()
    assert ep.traces[1].reward == 1.0 and "shapec" not in ep.traces[1].rewards


def test_an_episode_is_not_shaped_twice_under_one_name():
    ep = best_of_n(episode(1.0, [12]), episode(1.0, [30]))
    shape_episode(ep, "kimi", shaper="kimi_length")
    with pytest.raises(ValueError, match="already has a reward named 'shapec'"):
        shape_episode(ep, "kimi", shaper="kimi_length")
    assert np.isfinite([t.reward for t in ep.traces]).all()


HAPO = {"w_lr": 1.0, "type_lr": "cosine", "mode": "min"}
STEPS = [[0, 1, 2], [2, 3, 0], [1, 0, 4, 2]]  # tasks recur, in another order
TASKS = [vf.Task(vf.TaskData(idx=i, prompt=f"question {i}")) for i in range(5)]


def hapo_rounds(seed: int, attempts: int):
    """Three rounds of `attempts` attempts at each chosen task, and HAPO's training loop's reward of
    each attempt, the history kept per task (HCY123902/HAPO's table, transcribed in tests/stdlib)."""
    rng = np.random.default_rng(seed)
    lens, counts = {t: MAX_LEN for t in range(5)}, {t: 0 for t in range(5)}
    for chosen in STEPS:
        keys = [t for t in chosen for _ in range(attempts)]
        correct = (rng.random(len(keys)) < 0.7).astype(float).tolist()
        lengths = rng.integers(2, 40, len(keys)).tolist()
        expected = hapo_step(lens, counts, keys, correct, lengths, HAPO["w_lr"], HAPO["type_lr"], HAPO["mode"])[0]
        yield [(t, [(correct[i], lengths[i], expected[i]) for i in range(len(keys)) if keys[i] == t])
               for t in chosen]
    assert any(lens[t] < MAX_LEN for t in range(5))  # a history formed, so later rounds were shaped by it


def test_hapo_tracked_follows_each_task_by_its_key_across_episodes():
    hapo = shapec.load("hapo", backend="interpreter").hapo_tracked
    for tasks in hapo_rounds(seed=11, attempts=3):
        for t, attempts in tasks:
            ep = best_of_n(*(episode(r, [n], task=TASKS[t]) for r, n, _ in attempts))
            shape_episode(ep, hapo, params=HAPO)
            assert [trace.reward for trace in ep.traces] == pytest.approx([e for _, _, e in attempts], abs=1e-9)
    assert set(hapo.state_dict()["hapo_tracked"]["history"]) == {task.key for task in TASKS}


def test_a_trace_without_a_task_key_is_named():
    ep = best_of_n(episode(1.0, [12]), episode(1.0, [30]))
    with pytest.raises(ValueError, match=r"^shapec\.compat\.verifiers: 'hapo_tracked' keeps hapo_tracked\.history, "
                                         r"hapo_tracked\.seen per prompt, .*trace '\w+' has no task\.key"):
        shape_episode(ep, "hapo", shaper="hapo_tracked")
