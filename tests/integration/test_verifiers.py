"""verifiers: `shape_episode` shapes the sibling attempts of one episode (best-of-n) on verifiers'
own Episode and Trace objects, and best-of-n's own `finalize` then ranks the shaped rewards."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import shapec
from shapec.compat.verifiers import shape_episode

from .require import need

vf = need("verifiers.v1", "verifiers")


def episode(reward: float, sampled: list[int], observed: list[int] = (), ok: bool = True, info: dict | None = None):
    """One trace: a prompt token, then each model turn's sampled tokens followed by an observation
    (tool output) of `observed[turn]` tokens; the last call reports the usage."""
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
    trace = vf.Trace[vf.TaskData](task=vf.TraceTask(type="Task", data=vf.TaskData(idx=0, prompt=None)),
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
