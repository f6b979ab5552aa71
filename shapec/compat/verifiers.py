"""verifiers: shape the sibling attempts of one episode (best-of-n), and the traces any trainer
built on verifiers scores as a group (prime-rl: compat/prime_rl.py).

    import shapec
    from verifiers.v1.envs.best_of_n import BestOfNEnv
    from shapec.compat.verifiers import shape_episode

    KIMI = shapec.load("kimi").kimi_length  # compiled once, not in every episode's finalize

    class ShortestCorrect(BestOfNEnv):
        async def finalize(self, task, episode):
            shape_episode(episode, KIMI)
            await super().finalize(task, episode)  # best and pass_at_n, on the shaped rewards

A training group usually spans episodes, which an environment never sees together; best-of-n's n
attempts are the traces of one episode, which its `finalize(task, episode)` sees whole. A trace's
reward is the sum of its named rewards (`Trace.reward`), so the shaping is recorded as one more
named reward, the shaped reward minus the trace's own, and every consumer of `trace.reward` reads
the shaped value.

A trace fills the spec's inputs by name: `output_tokens` (its `num_output_tokens`), `input_tokens`
(`num_total_tokens - num_output_tokens`, prompt and tool observations), `total_tokens` and `turns`
(`num_turns`); any other input, and metadata (one value per group), from `trace.info`. The one
length input that none of these fills takes the output tokens. A spec that keeps state per prompt
(`hapo.hapo_tracked`) keys it by `trace.task.key`, the stable task identity verifiers records on
every trace (the content hash of the task's data unless the Task class overrides `key`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ._groups import Shaped, no_prompt_key, resolve_shaper, shape_by_group, spec_inputs, spec_metas

WHERE = "shapec.compat.verifiers"
TRACE_COLUMNS: dict[str, Callable[[Any], float]] = {
    "output_tokens": lambda trace: trace.num_output_tokens,
    "input_tokens": lambda trace: trace.num_total_tokens - trace.num_output_tokens,
    "total_tokens": lambda trace: trace.num_total_tokens,
    "turns": lambda trace: trace.num_turns,
}


def shape_traces(shaper: Any, traces: Sequence, params: Mapping | None = None, where: str = WHERE) -> Shaped:
    """The traces' rewards shaped as one group, in their order."""
    columns = {}
    for name in [*spec_inputs(shaper), *spec_metas(shaper)]:
        if name in TRACE_COLUMNS:
            columns[name] = [TRACE_COLUMNS[name](trace) for trace in traces]
        elif any(name in trace.info for trace in traces):
            lacking = next((trace for trace in traces if name not in trace.info), None)
            if lacking is not None:
                raise ValueError(f"{where}: trace {lacking.id!r} has no info[{name!r}], which other traces of "
                                 f"its group have; every trace must carry it")
            columns[name] = [trace.info[name] for trace in traces]
    return shape_by_group(shaper, [trace.reward for trace in traces], [0] * len(traces),
                          lengths=[trace.num_output_tokens for trace in traces], columns=columns, params=params,
                          where=where, prompt_ids=_task_keys(shaper, traces, where) if shaper.prompt_states else None)


def _task_keys(shaper: Any, traces: Sequence, where: str) -> list[str]:
    """Each trace's `task.key`: verifiers' own name for the task across runs (a trace's and an
    episode's ids are new every time)."""
    lacking = next((trace for trace in traces if trace.task.key is None), None)
    if lacking is not None:
        raise no_prompt_key(shaper, where, f"trace {lacking.id!r} has no task.key, which verifiers records from "
                                           f"Task.key when it runs a task: build its TraceTask with key=")
    return [trace.task.key for trace in traces]


def shape_episode(episode: Any, spec: Any, *, shaper: str | None = None, params: Mapping | None = None,
                  reward: str = "shapec", backend: str | None = None) -> Shaped | None:
    """Shape the episode's traces without an error as one group: each gets the named reward
    `reward` (its shaped reward minus its own, weight 1) and each shaper metric as the metric
    `shapec/<metric>`. Traces with an error keep their rewards. None when no trace is left."""
    compiled = resolve_shaper(spec, shaper, backend)
    traces = [trace for trace in episode.traces if not trace.has_error]
    if not traces:
        return None
    if any(reward in trace.rewards for trace in traces):
        raise ValueError(f"{WHERE}: a trace already has a reward named {reward!r}: shaping an episode twice "
                         f"would shape the shaped rewards; pass reward= another name for a second shaper")
    shaped = shape_traces(compiled, traces, params)
    for trace, value in zip(traces, shaped.rewards.tolist(), strict=True):
        trace.record_reward(reward, value - trace.reward)
        trace.record_metrics({f"shapec/{name}": value for name, value in shaped.metrics.items()})
    return shaped
