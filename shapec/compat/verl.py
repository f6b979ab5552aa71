"""verl: an advantage estimator that shapes each uid group's outcome rewards, then normalises.

    from shapec.compat.verl import register_advantage_estimator
    register_advantage_estimator("shapec_kimi", "kimi", shaper="kimi_length")
    # config: algorithm.adv_estimator=shapec_kimi

verl's reward loop scores one sample at a time; the advantage estimator is the first place that sees
whole groups (`index`, the uid of each prompt). The estimator reads each response's outcome reward
(the sum of its token-level rewards) and length (the sum of its response mask), shapes every group,
moves the change onto the response's last token, and hands the result to verl's own base estimator
(GRPO, or RLOO). Registration must happen in the process that computes advantages: inside verl's
Ray task runner (see docs/trainers.md for the recipe).
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Mapping

from ._groups import require, resolve_shaper, shape_by_group

WHERE = "shapec.compat.verl"
BASES = ("grpo", "rloo")


def register_advantage_estimator(name: str, spec: Any, *, shaper: str | None = None, params: Mapping | None = None,
                                 base: str = "grpo", backend: str | None = None) -> Callable:
    """Register `name` with verl's `register_adv_est` and return the estimator.

    The estimator keeps the shaper's metrics of its last call in `.last_metrics` (verl's estimator
    interface has no metrics channel).
    """
    if base not in BASES:
        close = difflib.get_close_matches(str(base), BASES, n=1)
        raise ValueError(f"base={base!r}; expected one of {', '.join(BASES)}"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))
    compiled = resolve_shaper(spec, shaper, backend)
    core_algos = require("verl.trainer.ppo.core_algos", "verl")
    torch = require("torch", "verl")
    base_fn = core_algos.get_adv_estimator_fn(base)

    def estimator(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        if index is None:
            raise ValueError(f"{WHERE}: estimator {name!r} needs the uid index of each response to form groups")
        scores = token_level_rewards.sum(dim=-1)
        lengths = response_mask.sum(dim=-1)
        shaped = shape_by_group(compiled, scores.detach().double().cpu().numpy(), list(index),
                                lengths=lengths.detach().double().cpu().numpy(), params=params,
                                where=f"{WHERE} ({name})")
        change = torch.as_tensor(shaped.rewards, device=scores.device, dtype=torch.float64) - scores.double()
        # the last response token of each row; verl's outcome estimators read only the sum per row
        last = response_mask.shape[-1] - 1 - response_mask.flip(-1).int().argmax(dim=-1)
        rows = torch.arange(len(scores), device=scores.device)
        moved = token_level_rewards.clone()
        moved[rows, last] += change.to(moved.dtype)
        extra = {}
        if base == "grpo":
            extra["norm_adv_by_std_in_grpo"] = config.get("norm_adv_by_std_in_grpo", True) if config is not None else True
        estimator.last_metrics = dict(shaped.metrics)
        return base_fn(token_level_rewards=moved, response_mask=response_mask, index=index, config=config, **extra)

    estimator.__name__ = f"shapec_{compiled.name}_{base}"
    estimator.last_metrics = {}
    core_algos.register_adv_est(name)(estimator)
    return estimator
