"""miles / slime: `post_process_rewards(args, samples)` for `--custom-reward-post-process-path`.

    --custom-reward-post-process-path shapec.compat.miles.post_process_rewards
    SHAPEC_SPEC=my.shape SHAPEC_SHAPER=length SHAPEC_PARAMS='{"alpha": 0.5}'   # or args.shapec_spec, ...

The hook replaces miles' `_post_process_rewards`: it returns `(raw_rewards, rewards)`, the raw rewards
for accuracy logging and the rewards to train on. It shapes each prompt group with the spec (one reward
per rollout; a rollout's length is the sum of the final loss masks of its retained samples, as miles'
length-penalty document says), then applies the group normalisation the hook replaces: with
`--rewards-normalization` and a grpo, gspo, cispo or reinforce_plus_plus_baseline estimator, the group
mean is subtracted, and for grpo, gspo and cispo with `--grpo-std-normalization` the result is divided by
the group std + 1e-6, except that an all-correct group is only mean-centred (the length differences
alone, so the spec keeps control of their size; `grpo_advantage` in stdlib miles.shape).
"""

from __future__ import annotations

import json
import logging
import os
from functools import lru_cache
from typing import Any

import numpy as np

from ..runtime.validate import as_array, is_finite_number, show
from ._groups import resolve_shaper, shape_by_group

logger = logging.getLogger(__name__)
WHERE = "shapec.compat.miles.post_process_rewards"
NORMALISED = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
STD_NORMALISED = ("grpo", "gspo", "cispo")
SETTINGS = {"spec": "SHAPEC_SPEC", "shaper": "SHAPEC_SHAPER", "params": "SHAPEC_PARAMS"}


def _setting(args, key: str) -> Any:
    """`args.shapec_<key>` when set, else the environment variable."""
    value = getattr(args, f"shapec_{key}", None)
    return value if value is not None else os.environ.get(SETTINGS[key])


def _params(args) -> dict:
    value = _setting(args, "params")
    if value is None or isinstance(value, dict):
        return dict(value or {})
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"{WHERE}: {SETTINGS['params']} / args.shapec_params is not JSON: {err}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{WHERE}: {SETTINGS['params']} / args.shapec_params must be a JSON object, got {value!r}")
    return parsed


@lru_cache(maxsize=None)
def _shaper(spec: str, name: str | None):
    """Compiled once per process, so a stateful spec keeps its state across rollout steps."""
    return resolve_shaper(spec, name)


def post_process_rewards(args, samples: list) -> tuple[list[float], list[float]]:
    """Shape and normalise: `(raw_rewards, rewards)`, one entry per sample."""
    from .miles import group_advantages, loss_tokens  # miles.py re-exports this function

    spec = _setting(args, "spec")
    if spec is None:
        raise ValueError(f"{WHERE}: no spec: set args.shapec_spec or the environment variable {SETTINGS['spec']}")
    shaper = _shaper(str(spec), _setting(args, "shaper"))
    if any(isinstance(s, (list, tuple)) for s in samples):
        raise TypeError(f"{WHERE}: expected a flat list of samples")
    raw = [_reward(args, s, i) for i, s in enumerate(samples)]
    rollouts = _rollouts(args, samples, raw)
    groups = [g for g, _ in rollouts]
    members = [rows for _, rows in rollouts]
    lengths = loss_tokens([[_mask(samples[i]) for i in rows] for rows in members],
                          removed=[[bool(samples[i].remove_sample) for i in rows] for rows in members])
    rewards = np.array([raw[rows[0]] for rows in members])
    shaped = shape_by_group(shaper, rewards, groups, lengths=lengths, columns=_metadata(samples, members),
                            params=_params(args), where=WHERE)
    logger.info("shapec: %s", " ".join(f"{k}={v:g}" for k, v in shaped.metrics.items()))
    per_rollout = shaped.rewards
    if args.advantage_estimator in NORMALISED and args.rewards_normalization:
        order = shaped.order
        grouped = group_advantages(shaped.rewards[order], rewards[order], offsets=shaped.offsets,
                                   normalize_std=args.advantage_estimator in STD_NORMALISED
                                   and bool(args.grpo_std_normalization))
        per_rollout = np.empty_like(grouped)
        per_rollout[order] = grouped
    out = [0.0] * len(samples)
    for value, rows in zip(per_rollout.tolist(), members):
        for i in rows:
            out[i] = value
    return raw, out


def _reward(args, sample, i: int) -> float:
    """The sample's reward value: one finite number (a numpy or torch scalar too), else an error naming it."""
    value = as_array(f"{WHERE}: sample {i}'s reward", sample.get_reward_value(args))
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if not is_finite_number(value):
        raise ValueError(f"{WHERE}: sample {i}'s reward is {show(value)}; expected a finite number")
    return float(value)


def _mask(sample) -> list[int]:
    """The final loss mask; miles initialises a missing one to all ones."""
    return sample.loss_mask if sample.loss_mask is not None else [1] * sample.response_length


def _rollouts(args, samples: list, raw: list[float]) -> list[tuple[int, list[int]]]:
    """(prompt group, sample rows) per rollout, grouped as miles groups rewards: by `group_index`,
    else contiguous `n_samples_per_prompt` blocks of a full batch, else one group; within a group,
    sibling samples share `rollout_id` (or `index`)."""
    n = len(samples)
    given = [s.group_index is not None for s in samples]
    if any(given) and not all(given):
        raise ValueError(f"{WHERE}: sample {given.index(False)} has no group_index while sample {given.index(True)} "
                         f"has one; give every sample its prompt group, or none (then groups are contiguous "
                         f"n_samples_per_prompt blocks)")
    if all(given):
        group_of = [s.group_index for s in samples]  # any hashable id, as miles' group_by takes it
    elif n == args.n_samples_per_prompt * args.rollout_batch_size:
        group_of = [i // args.n_samples_per_prompt for i in range(n)]
    else:
        group_of = [0] * n
    rollouts: dict[tuple, list[int]] = {}
    for i, s in enumerate(samples):
        rid = s.rollout_id if s.rollout_id is not None else s.index if s.index is not None else ("row", i)
        try:
            rollouts.setdefault((group_of[i], rid), []).append(i)
        except TypeError:
            raise ValueError(f"{WHERE}: sample {i}: group_index {show(group_of[i])} and rollout id {show(rid)} "
                             f"must be hashable ids") from None
    for (_, rid), rows in rollouts.items():
        if any(raw[i] != raw[rows[0]] for i in rows):
            raise ValueError(f"{WHERE}: the samples of rollout {rid!r} (rows {rows}) must share one reward, "
                             f"got {[raw[i] for i in rows]}")
    return [(g, rows) for (g, _), rows in rollouts.items()]


def _metadata(samples: list, members: list[list[int]]) -> dict[str, list]:
    """Spec inputs and metadata from `sample.metadata` keys every sample has (first sibling's value)."""
    dicts = [samples[rows[0]].metadata for rows in members]
    if not all(isinstance(d, dict) for d in dicts):
        return {}
    keys = set.intersection(*(set(d) for d in dicts)) if dicts else set()
    return {k: [d[k] for d in dicts] for k in sorted(keys)}
