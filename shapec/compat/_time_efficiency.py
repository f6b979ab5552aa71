"""Drop-in for NeMo-RL's `nemo_rl.utils.time_efficiency` (re-exported by `shapec.compat.nemo_rl`).

`TimeEfficiencyConfig` is the `grpo.time_efficiency` block; `apply_time_efficiency_reward` rewrites
the rewards of NeMo-Gym results in place and returns the `time_efficiency/*` metrics. This module only
reads the results into arrays; the reward and every metric come from the compiled stdlib shaper
`shapec/stdlib/time_efficiency.shape::time_efficiency`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from ..runtime.validate import BatchError, as_array, flag, plain_number, show
from ..run.nemo_gym_rows import has_run_time, rollout_calls, rollout_seconds
from ..run.nemo_rl_config import TimeEfficiencyConfig, warn_unknown_keys
from ._stdlib import stdlib_shaper

PREFIX = "time_efficiency/"
_WARNED_MISSING: list[bool] = []  # warn once per process: a training loop calls this every step


def _warn_missing_run_times(missing: int, n: int) -> None:
    """Rows charged 0 because their run time is missing; NeMo-RL does so silently, shapec says so once."""
    if missing and not _WARNED_MISSING:
        _WARNED_MISSING.append(True)
        warnings.warn(f"time efficiency: {missing} of {n} rows have no usable "
                      "full_result.openhands_run_time and are charged 0 minutes (counted in "
                      f"{PREFIX}missing_run_time; this warning is shown once)", stacklevel=3)


def read_rows(results: Sequence[dict[str, Any]]) -> tuple[list[dict], np.ndarray, np.ndarray, list, list, int]:
    """One pass over the rows: (full results, resolved flags, charged rewards, run times in seconds,
    function calls, rows without a usable run time). Plain values are read in place; any other goes
    to flag, charged_reward and rollout_seconds, and the first error of each is raised after the pass
    in the order NeMo-RL reads them (resolved, rewards, run times)."""
    n = len(results)
    full, rewards, seconds, calls = [], [], [], []
    resolved = np.zeros(n, dtype=bool)
    errors: list[Exception | None] = [None, None, None]
    missing = 0
    for i, result in enumerate(results):
        fr = result["full_result"]
        full.append(fr)
        done = fr.get("resolved")
        if done is True or (done is not None and done is not False and errors[0] is None and _read(
                errors, 0, lambda: flag(done, f"results[{i}].full_result.resolved"))):
            resolved[i] = True
        reward = fr.get("reward")
        if type(reward) is not float or reward - reward != 0.0:  # a finite float is the common case
            reward = plain_number(reward)
            if reward is None and errors[1] is None:
                reward = _read(errors, 1, lambda: charged_reward(fr, i))
        rewards.append(reward or 0.0)
        run_time = fr.get("openhands_run_time")
        if type(run_time) is not float or run_time - run_time != 0.0:
            run_time = plain_number(run_time)
            if run_time is None:
                missing += not has_run_time(result)
                run_time = _read(errors, 2, lambda: rollout_seconds(result, i)) if errors[2] is None else 0.0
        seconds.append(max(run_time or 0.0, 0.0))
        calls.append(rollout_calls(result))
    for err in errors:
        if err is not None:
            raise err
    return full, resolved, np.array(rewards, dtype=np.float64), seconds, calls, missing


def _read(errors: list, k: int, read):
    """read(), or None with its error kept in errors[k] (the first of its kind)."""
    try:
        return read()
    except ValueError as err:  # BatchError included
        errors[k] = err
        return None


def charged_reward(full: Mapping[str, Any], index: int) -> float:
    """`float(reward or 0)`, as NeMo-RL reads a reward it charges; numpy and torch scalars too, and
    anything that is not one number is a BatchError naming the row."""
    value = as_array(f"results[{index}].full_result.reward", full.get("reward"))
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    try:
        reward = float(value or 0.0)
    except (TypeError, ValueError, OverflowError):
        reward = math.nan
    if not math.isfinite(reward):
        raise BatchError(f"results[{index}].full_result.reward: expected a finite number, got {show(value)}")
    return reward


def apply_time_efficiency_reward(
    results: Sequence[dict[str, Any]],
    config: TimeEfficiencyConfig | Mapping[str, Any] | None,
    *,
    mask_sample: Sequence[Any] | None = None,
) -> dict[str, float]:
    """Charge each charged rollout's `full_result["reward"]` for its wall time, in place.

    Returns {} and touches nothing when `config` is None or disabled or `results` is empty.
    `mask_sample` (one flag per result) exempts rollouts the env flagged while
    `env.should_mask_flagged_samples` is on. Rows that are not charged keep their reward untouched
    (even a None); charged rows get `float(reward or 0) + bonus - lambda_time * minutes`, floored.
    Rows without a usable `openhands_run_time` are charged 0 minutes, as in NeMo-RL; shapec warns
    once and adds `time_efficiency/missing_run_time` (their count) to the metrics when there are any.
    """
    if isinstance(config, Mapping):
        config = TimeEfficiencyConfig.model_validate(config)
    if config is not None:
        warn_unknown_keys(config)
    if config is None or not config.enabled or not results:
        return {}
    n = len(results)
    if mask_sample is not None and len(mask_sample) != n:
        raise ValueError(f"mask_sample has {len(mask_sample)} entries for {n} results")
    masked = np.array([flag(f, f"mask_sample[{i}]") for i, f in enumerate(mask_sample)] if mask_sample is not None
                      else [False] * n, dtype=bool)
    full, resolved, rewards, seconds, calls, missing = read_rows(results)
    out = stdlib_shaper("time_efficiency", "time_efficiency")(
        rewards, offsets=np.array([0, n]),
        channels={"run_time": seconds, "calls": calls, "resolved": resolved, "masked": masked},
        params={
            "lambda_time": config.lambda_time,
            "apply_to": config.apply_to,
            "lambda_call_bonus": config.lambda_call_bonus,
            # the reference reads call_bonus_ref only when the bonus is on
            "call_bonus_ref": config.call_bonus_ref if config.lambda_call_bonus > 0 else None,
            # a NaN or -inf floor never lifts anything in NeMo-RL (`new < floor` is false): no floor
            "floor": None if config.floor is None or math.isnan(config.floor) or config.floor == -math.inf
            else config.floor,
        },
        breakdown=False,
    )
    # the rows the shaper's `charged` gate selects: only these are rewritten
    charged = ~masked & ((config.apply_to == "all") | (resolved & (rewards != 0)))
    for fr, new, hit in zip(full, out.rewards, charged):
        if hit:
            fr["reward"] = float(new)
    metrics = {PREFIX + name: value for name, value in out.metrics.items()}
    _warn_missing_run_times(missing, n)
    if missing:  # only then: a complete batch reports exactly NeMo-RL's metrics
        metrics[PREFIX + "missing_run_time"] = float(missing)
    return metrics
