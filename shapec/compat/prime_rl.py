"""prime-rl: an orchestrator algorithm that shapes each group's rewards with a spec, then gives each
trace GRPO's advantage (its shaped reward minus the group's mean).

    from prime_rl.orchestrator import algo
    from shapec.compat.prime_rl import grpo_algorithm
    algo.ALGORITHM_CLASSES["grpo"] = grpo_algorithm("prime_rl", shaper="linear_length")
    # in the orchestrator's process, before it builds its algorithms

prime-rl's orchestrator scores each finished group with `Algorithm.score_group(episodes)`
(`src/prime_rl/orchestrator/algo/`): the group's trainable traces (`iter_trainable_traces`, each a
verifiers `Trace`) get their advantages from `assign_advantages(trace, value)`. An algorithm is a
class in `ALGORITHM_CLASSES` keyed by the config's `algo.type`, and `build_algorithm` makes one per
environment: this one stands in for GRPO under GRPO's config (`[orchestrator.algo] type = "grpo"`),
whose own `length_penalty` must stay unset, since the spec holds the penalty (the stdlib's
`prime_rl.linear_length` is prime-rl's linear one).

A trace fills the spec's inputs as in compat/verifiers.py: `output_tokens`, `input_tokens`
(`num_total_tokens - num_output_tokens`, as prime-rl's GRPO counts them), `total_tokens`, `turns`,
and anything else from `trace.info`.

prime-rl is not on the package index; its tests here rebuild its `Algorithm` base and
`assign_advantages` from its source and drive them with verifiers' own `Episode` and `Trace`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ._groups import require, resolve_shaper
from .verifiers import shape_traces

WHERE = "shapec.compat.prime_rl"
INSTALL = "prime-rl's own install (it is not on the package index: github.com/PrimeIntellect-ai/prime-rl)"


def group_advantages(shaper: Any, traces: Sequence, params: Mapping | None = None) -> tuple[list[float], dict]:
    """Each trace's GRPO advantage once the group's rewards are shaped (every trace of the call is
    one group, as prime-rl's GRPO takes them), and the shaper's metrics."""
    if not traces:
        return [], {}
    shaped = shape_traces(shaper, traces, params, WHERE)
    return (shaped.rewards - shaped.rewards.mean()).tolist(), dict(shaped.metrics)


def grpo_algorithm(spec: Any, *, shaper: str | None = None, params: Mapping | None = None,
                   backend: str | None = None) -> type:
    """An `Algorithm` class for prime-rl's `ALGORITHM_CLASSES`: GRPO's credit on rewards shaped by
    the spec. Each instance keeps the shaper's metrics of its last group in `.last_metrics`
    (prime-rl's algorithms have no metrics channel). The spec is compiled here, so a bad one
    fails before the orchestrator starts."""
    compiled = resolve_shaper(spec, shaper, backend)
    base = require("prime_rl.orchestrator.algo.base", "prime-rl", INSTALL)
    routing = require("prime_rl.orchestrator.algo.routing", "prime-rl", INSTALL)

    class ShapedGRPOAlgorithm(base.Algorithm):
        __doc__ = f"GRPO's advantages on rewards shaped by shapec's {compiled.name!r}."

        def __init__(self, config, policy_pool):
            if getattr(config, "length_penalty", None) is not None:
                raise ValueError(f"{WHERE}: algo.length_penalty is set, but this algorithm shapes the rewards with "
                                 f"{compiled.name!r}: unset it and write the penalty in the spec (the stdlib's "
                                 f"prime_rl.linear_length is prime-rl's linear penalty)")
            super().__init__(config, policy_pool)
            self.shaper = compiled
            self.last_metrics: dict = {}

        async def score_group(self, episodes: list) -> None:
            traces = [trace for _, trace in base.iter_trainable_traces(episodes)]
            values, self.last_metrics = group_advantages(compiled, traces, params)
            for trace, value in zip(traces, values, strict=True):
                routing.assign_advantages(trace, value)

    ShapedGRPOAlgorithm.__name__ = ShapedGRPOAlgorithm.__qualname__ = f"Shaped_{compiled.name}_GRPOAlgorithm"
    return ShapedGRPOAlgorithm
