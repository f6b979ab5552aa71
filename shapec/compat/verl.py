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

A rollout the shaper drops (`drop when`, as the stdlib's gfpo does) leaves the group: the base
estimator's group statistics are over the kept rollouts alone, and the dropped one gets advantage
0 and a response mask of zeros, written into the batch's own `response_mask`, which verl's loss
reads (it leaves a fully masked response out of every loss mode).

verl hands an estimator only tensors and the uid, so a spec input that is not the one length (a
second length, a flag) or its metadata comes from the batch's `non_tensor_batch` through
`with_columns`, which wraps verl's `compute_advantage`. So does the prompt key of a spec that keeps
state per prompt (`hapo.hapo_tracked`): the uid is drawn afresh for every prompt at every step, so
the key is the dataset row's `extra_info["index"]`, which verl's data preprocessing writes and
every sample of the batch carries to the advantage step.
"""

from __future__ import annotations

import contextvars
import difflib
import functools
from typing import Any, Callable, Mapping

import numpy as np

from ._groups import no_prompt_key, require, resolve_shaper, shape_by_group, spec_inputs, spec_metas

WHERE = "shapec.compat.verl"
BASES = ("grpo", "rloo")
# the non_tensor_batch of the DataProto whose advantages with_columns' compute_advantage is computing
_BATCH_COLUMNS: contextvars.ContextVar[Mapping | None] = contextvars.ContextVar("shapec_verl_columns", default=None)


def with_columns(compute_advantage: Callable) -> Callable:
    """verl's `compute_advantage` (of `verl.trainer.ppo.ray_trainer`), with each sample's
    `non_tensor_batch` entries visible to shapec's estimators as columns: an entry named like a
    spec input or metadata fills it (metadata: every sample of a uid group the same). verl forwards
    no per-sample data to a custom estimator; assign the result where the trainer looks it up (see
    docs/trainers.md)."""
    @functools.wraps(compute_advantage)
    def compute_advantage_with_columns(data, *args, **kwargs):
        token = _BATCH_COLUMNS.set(data.non_tensor_batch)
        try:
            return compute_advantage(data, *args, **kwargs)
        finally:
            _BATCH_COLUMNS.reset(token)

    return compute_advantage_with_columns


def _columns(compiled) -> dict[str, list]:
    """The spec's inputs and metadata found in the batch's non_tensor_batch (with_columns); one
    value per sample each, which shape_by_group checks."""
    batch = _BATCH_COLUMNS.get() or {}
    names = [*spec_inputs(compiled), *spec_metas(compiled)]
    return {name: list(batch[name]) for name in names if name in batch}


def _prompt_ids(compiled, key: str, where: str) -> list:
    """Each sample's prompt: its `extra_info[key]`, else the batch's column `key` (an entry a
    `compute_score` returns, say). Not the column `index`: verl's dataset fills it with 0 for a row
    whose extra_info has none, which would make every prompt one."""
    batch = _BATCH_COLUMNS.get()
    if batch is None:
        raise no_prompt_key(compiled, where, "verl hands an estimator only the uid, which is new at every step: "
                                             "wrap verl's compute_advantage with with_columns, as for columns "
                                             "(docs/trainers.md, verl), so that it reads each sample's extra_info")
    infos = batch.get("extra_info")
    if infos is not None and len(infos) and all(isinstance(info, Mapping) and key in info for info in infos):
        return [_as_key(info[key]) for info in infos]
    if key in batch and key != "index":
        return [_as_key(value) for value in batch[key]]
    found = "the batch has no extra_info"
    if infos is not None and len(infos):
        lacking = next(i for i, info in enumerate(infos) if not (isinstance(info, Mapping) and key in info))
        found = f"sample {lacking}'s extra_info has no {key!r}"
    found += (" (verl's dataset then numbers the row 0, so the column 'index' names no prompt)" if key == "index"
              else f", and the batch has no column {key!r} (columns: {', '.join(sorted(batch))})")
    raise no_prompt_key(compiled, where, f"{found}: give "
                                         f"every dataset row extra_info={{'{key}': <the row's number>}}, as verl's "
                                         f"data preprocessing scripts do, or pass prompt_key= an extra_info entry "
                                         f"or non_tensor_batch column naming the prompt")


def _as_key(value: Any) -> str | int:
    """A prompt key as the shaper's state table holds it: a string or an integer as it is, any other
    value (a float index, a list of messages) as its repr, which is the same at every step."""
    if isinstance(value, (str, int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return value
    return repr(value)


def register_advantage_estimator(name: str, spec: Any, *, shaper: str | None = None, params: Mapping | None = None,
                                 base: str = "grpo", backend: str | None = None, prompt_key: str = "index") -> Callable:
    """Register `name` with verl's `register_adv_est` and return the estimator.

    The estimator keeps the shaper's metrics of its last call in `.last_metrics` (verl's estimator
    interface has no metrics channel). A spec with a state kept per prompt keys it by each sample's
    `extra_info[prompt_key]` (or a non_tensor_batch column of that name), read through `with_columns`.
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
        where = f"{WHERE} ({name})"
        shaped = shape_by_group(compiled, scores.detach().double().cpu().numpy(), list(index),
                                lengths=lengths.detach().double().cpu().numpy(), params=params,
                                columns=_columns(compiled), where=where,
                                prompt_ids=_prompt_ids(compiled, prompt_key, where) if compiled.prompt_states else None)
        change = torch.as_tensor(shaped.rewards, device=scores.device, dtype=torch.float64) - scores.double()
        # the last response token of each row; verl's outcome estimators read only the sum per row
        last = response_mask.shape[-1] - 1 - response_mask.flip(-1).int().argmax(dim=-1)
        rows = torch.arange(len(scores), device=scores.device)
        moved = token_level_rewards.clone()
        moved[rows, last] += change.to(moved.dtype)
        if shaped.result.drops:  # kept-only group statistics; a dropped row: advantage 0 and no loss
            dropped = ~shaped.kept
            response_mask[torch.as_tensor(dropped, device=response_mask.device)] = 0  # the batch's own mask
            index = [("shapec dropped", i) if drop else uid for i, (uid, drop) in enumerate(zip(index, dropped))]
        extra = {}
        if base == "grpo":
            extra["norm_adv_by_std_in_grpo"] = config.get("norm_adv_by_std_in_grpo", True) if config is not None else True
        estimator.last_metrics = dict(shaped.metrics)
        return base_fn(token_level_rewards=moved, response_mask=response_mask, index=index, config=config, **extra)

    estimator.__name__ = f"shapec_{compiled.name}_{base}"
    estimator.last_metrics = {}
    estimator.shaper = compiled  # its state_dict() is what a checkpoint of the run would keep
    core_algos.register_adv_est(name)(estimator)
    return estimator
