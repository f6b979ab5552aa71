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
"""

from __future__ import annotations

import logging
import numbers
from typing import Any, Sequence

import numpy as np

from ..runtime.validate import as_array, finite, flag, is_finite_number, numeric, show
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


from .miles_hook import post_process_rewards  # noqa: E402
