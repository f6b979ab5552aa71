"""Drop-in for miles' length penalties (`--length-penalty-coeff`) and its GRPO reward normalisation.

    from shapec.compat.miles import loss_tokens, shape_rewards, group_advantages, keep_groups

    L = loss_tokens(loss_masks, removed=removed)               # trainable tokens per rollout
    shaped = shape_rewards(raw, L, group_size=8, coeff=1.0)     # before normalisation
    keep = keep_groups(shaped, raw, group_size=8)               # the nonzero-std filter, per group
    advantages = group_advantages(shaped, raw, group_size=8)    # the advantage stage

Everything the documents specify lives in `shapec/stdlib/miles.shape` (`length_penalty`,
`grpo_advantage`, and the pipeline `grpo` of both); this module validates arguments, counts loss-mask
tokens, turns lists into arrays and writes the documented `Length penalty:` log lines.

Rewards are float64 throughout; miles normalises in float32 torch tensors, so its advantages carry
float32 rounding that these do not.

The hook `post_process_rewards(args, samples)`, for miles / slime's `--custom-reward-post-process-path`:

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
import numbers
import os
import warnings
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from ..runtime.validate import as_array, finite, flag, is_finite_number, numeric, show
from ._groups import resolve_shaper, shape_by_group
from ._stdlib import stdlib_shaper

logger = logging.getLogger(__name__)


def _check_coeff(coeff: Any) -> float:
    if not is_finite_number(coeff) or coeff < 0:
        raise ValueError(f"coeff must be a finite number >= 0, got {show(coeff)}")
    return float(coeff)


def _check_min_tokens(min_tokens: Any) -> int:
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, numbers.Integral) or min_tokens < 1:
        raise ValueError(f"min_tokens must be a positive integer, got {min_tokens!r}")
    return int(min_tokens)


def _is_sample_list(entry: Any) -> bool:
    """A rollout given as retained sibling samples: a non-empty list whose items are masks (lists,
    or numpy arrays or torch tensors of at least one dimension; a 0-d one is a mask's value)."""
    return (isinstance(entry, (list, tuple)) and len(entry) > 0
            and (isinstance(entry[0], (list, tuple)) or getattr(entry[0], "ndim", 0) >= 1))


def _mask_sum(mask: Any, where: str) -> int:
    arr = np.asarray(as_array(where, mask))
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "biuf"):
        raise ValueError(f"{where}: expected a 1-d loss mask of 0/1 values, got {arr.dtype} with shape {arr.shape}")
    bad = (arr != 0) & (arr != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{where}[{i}]: loss mask values are 0 or 1, got {arr[i].item()!r}")
    return int(np.count_nonzero(arr))


def loss_tokens(loss_masks: Sequence[Any], removed: Sequence[Any] | None = None) -> np.ndarray:
    """Each rollout's trainable-token count L: the sum of its final loss masks.

    `loss_masks[i]` is one final loss mask (0/1 per response token, after mask initialisation,
    which gives a sample without a mask all ones), or a list of the rollout's retained sibling
    samples' masks, whose sums add up: shared prefixes count once because the masks already carry
    training-mask ownership. `removed[i]` (a rollout's `remove_sample` flag, or one flag per sibling
    sample) makes that rollout or sample count 0 tokens.
    """
    if removed is not None and len(removed) != len(loss_masks):
        raise ValueError(f"removed has {len(removed)} entries for {len(loss_masks)} rollouts")
    out = np.zeros(len(loss_masks), dtype=np.float64)
    for i, entry in enumerate(loss_masks):
        siblings = _is_sample_list(entry)
        samples = list(entry) if siblings else [entry]
        flags = as_array(f"removed[{i}]", removed[i]) if removed is not None else False
        if isinstance(flags, (list, tuple)) or getattr(flags, "ndim", 0) >= 1:  # one flag per sibling sample
            if len(flags) != len(samples):
                raise ValueError(f"removed[{i}] has {len(flags)} flags for {len(samples)} samples")
            gone = [flag(f, f"removed[{i}][{k}]") for k, f in enumerate(flags)]
        else:
            gone = [flag(flags, f"removed[{i}]")] * len(samples)
        for k, (mask, skip) in enumerate(zip(samples, gone)):
            if not skip:
                out[i] += _mask_sum(mask, f"loss_masks[{i}][{k}]" if siblings else f"loss_masks[{i}]")
    return out


def shape_rewards(
    rewards: Sequence[float],
    loss_tokens: Sequence[float] | None,
    *,
    group_size: int | None = None,
    offsets: Sequence[int] | None = None,
    coeff: float = 0.0,
    min_tokens: int = 1,
    session_ids: Sequence[Any] | None = None,
    rollout_ids: Sequence[Any] | None = None,
) -> np.ndarray:
    """Length-shaped rewards: `max(1, L / max(min_tokens, L_min)) ** (-coeff)` on rewards exactly 1.0.

    `loss_tokens` is L per rollout (see `loss_tokens()`); `coeff` 0 disables shaping, which then
    counts no lengths (pass None) and logs nothing. With `session_ids` or `rollout_ids`, one INFO line
    `Length penalty: session_id=... rollout_id=... generated_tokens=... multiplier=...
    reward_reduction=... raw_reward=... shaped_reward=...` is logged per rollout (an id that was not
    given logs as None); incorrect rollouts report multiplier 1.
    """
    coeff = _check_coeff(coeff)
    min_tokens = _check_min_tokens(min_tokens)
    shaper = stdlib_shaper("miles", "length_penalty")
    params = {"coeff": coeff, "min_tokens": min_tokens}
    if coeff == 0:  # disabled: no lengths, no log lines; the rewards and groups are checked all the same
        values = numeric("rewards", rewards)
        return shaper(values, group_size=group_size, offsets=offsets, channels={"loss_tokens": np.zeros(len(values))},
                      params=params, breakdown=False).rewards
    if loss_tokens is None:
        raise ValueError("loss_tokens is required when coeff > 0")
    out = shaper(rewards, group_size=group_size, offsets=offsets, channels={"loss_tokens": loss_tokens}, params=params)
    if session_ids is not None or rollout_ids is not None:
        _log(out, numeric("loss_tokens", loss_tokens), session_ids, rollout_ids)
    return out.rewards


def _log(out, lengths: np.ndarray, session_ids, rollout_ids) -> None:
    n = len(out.rewards)
    for name, ids in (("session_ids", session_ids), ("rollout_ids", rollout_ids)):
        if ids is not None and len(ids) != n:
            raise ValueError(f"{name} has {len(ids)} entries for {n} rewards")
    raw = out.stages[0].reward_in
    multiplier = out.factors["power"]
    for i in range(n):
        logger.info(
            "Length penalty: session_id=%s rollout_id=%s generated_tokens=%d multiplier=%g "
            "reward_reduction=%g raw_reward=%g shaped_reward=%g",
            session_ids[i] if session_ids is not None else None,
            rollout_ids[i] if rollout_ids is not None else None,
            int(lengths[i]), multiplier[i], raw[i] - out.rewards[i], raw[i], out.rewards[i],
        )


def group_advantages(
    rewards: Sequence[float],
    raw_rewards: Sequence[float] | None = None,
    *,
    group_size: int | None = None,
    offsets: Sequence[int] | None = None,
    normalize_std: bool = True,
) -> np.ndarray:
    """GRPO advantages of shaped `rewards`, per group (`grpo_advantage` in miles.shape).

    `raw_rewards` (default: `rewards`) are the rewards before length shaping; a group whose raw
    rewards are all exactly 1.0 is mean-centred without std scaling. Other groups subtract the mean
    and, with `normalize_std`, more than one rollout and a std > 0, divide by the sample std + 1e-6.
    To normalise per training sample, repeat each rollout's shaped reward for its retained samples.
    """
    out = stdlib_shaper("miles", "grpo_advantage")(
        rewards, group_size=group_size, offsets=offsets, env_rewards=_raw(raw_rewards),
        params={"normalize_std": normalize_std}, breakdown=False,
    )
    return out.rewards


def _raw(raw_rewards: Sequence[float] | None) -> np.ndarray | None:
    """`raw_rewards` checked under its own name (the shaper would call it env_rewards)."""
    return None if raw_rewards is None else finite("raw_rewards", numeric("raw_rewards", raw_rewards))


def keep_groups(
    rewards: Sequence[float],
    raw_rewards: Sequence[float] | None = None,
    *,
    group_size: int | None = None,
    offsets: Sequence[int] | None = None,
) -> np.ndarray:
    """The nonzero-std sampling filter on shaped `rewards`: True for each group to keep.

    An all-correct group (raw rewards all exactly 1.0; `raw_rewards` defaults to `rewards`) is kept
    when its shaped range exceeds 1e-6; any other group when its sample std is > 0 (one-rollout
    groups have no std and are dropped).
    """
    shaper = stdlib_shaper("miles", "grpo_advantage")
    out = shaper(rewards, group_size=group_size, offsets=offsets, env_rewards=_raw(raw_rewards), breakdown=False)
    rules = next(step.rules for step in shaper.ir.steps if step.name == "keep")
    keeping = {reason for verdict, reason, _ in rules if verdict == "open"}
    return np.array([reason in keeping for reason in out.gates["keep"]], dtype=bool)


# ------------------------------------------------------------------------- the post-process hook
WHERE = "shapec.compat.miles.post_process_rewards"
NORMALISED = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
STD_NORMALISED = ("grpo", "gspo", "cispo")
SETTINGS = {"spec": "SHAPEC_SPEC", "shaper": "SHAPEC_SHAPER", "params": "SHAPEC_PARAMS"}
# Sample fields not every version has, read with a default: group_index (slime < 0.2), remove_sample
# (slime < 0.2.1) and the id sibling samples share: rollout_id (miles >= 0.1.0, slime >= 0.3.1), group_id in
# slime 0.3.0 (where reading rollout_id raises AttributeError), neither before.
SIBLING_IDS = ("rollout_id", "group_id")
_warned_one_group = False


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
                          removed=[[bool(getattr(samples[i], "remove_sample", False)) for i in rows]
                                   for rows in members])
    rewards = np.array([raw[rows[0]] for rows in members])
    shaped = shape_by_group(shaper, rewards, groups, lengths=lengths, columns=_metadata(samples, members),
                            params=_params(args), where=WHERE)
    if shaped.metrics:
        logger.info("shapec %s: %s", shaper.name, " ".join(f"{k}={v:g}" for k, v in shaped.metrics.items()))
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
    sibling samples share an id of `SIBLING_IDS` (or `index`)."""
    n = len(samples)
    given = [getattr(s, "group_index", None) is not None for s in samples]
    if any(given) and not all(given):
        raise ValueError(f"{WHERE}: sample {given.index(False)} has no group_index while sample {given.index(True)} "
                         f"has one; give every sample its prompt group, or none (then groups are contiguous "
                         f"n_samples_per_prompt blocks)")
    if all(given):
        group_of = [s.group_index for s in samples]  # any hashable id, as miles' group_by takes it
    elif n == args.n_samples_per_prompt * args.rollout_batch_size:
        group_of = [i // args.n_samples_per_prompt for i in range(n)]
    else:
        _warn_one_group(n, args)
        group_of = [0] * n
    rollouts: dict[tuple, list[int]] = {}
    for i, s in enumerate(samples):
        ids = [getattr(s, name, None) for name in SIBLING_IDS] + [s.index, ("row", i)]
        rid = next(v for v in ids if v is not None)
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


def _warn_one_group(n: int, args) -> None:
    """Once per process: the hook runs every rollout step, and the batch size rarely changes."""
    global _warned_one_group
    if not _warned_one_group:
        _warned_one_group = True
        full = args.n_samples_per_prompt * args.rollout_batch_size
        warnings.warn(f"{WHERE}: {n} samples without group_index, not n_samples_per_prompt x rollout_batch_size = "
                      f"{args.n_samples_per_prompt} x {args.rollout_batch_size} = {full}: the whole batch is shaped "
                      f"as one group, as miles then normalises it; give every sample its group_index to shape each "
                      f"prompt's group (warned once)", stacklevel=4)


def _metadata(samples: list, members: list[list[int]]) -> dict[str, list]:
    """Spec inputs and metadata from `sample.metadata` keys every sample has (first sibling's value)."""
    dicts = [samples[rows[0]].metadata for rows in members]
    if not all(isinstance(d, dict) for d in dicts):
        return {}
    keys = set.intersection(*(set(d) for d in dicts)) if dicts else set()
    return {k: [d[k] for d in dicts] for k in sorted(keys)}
