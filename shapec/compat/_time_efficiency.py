"""Drop-in for NeMo-RL's `nemo_rl.utils.time_efficiency` (re-exported by `shapec.compat.nemo_rl`).

`TimeEfficiencyConfig` is the `grpo.time_efficiency` block; `apply_time_efficiency_reward` rewrites
the rewards of NeMo-Gym results in place and returns the `time_efficiency/*` metrics. This module only
reads the results into arrays; the reward and every metric come from the compiled stdlib shaper
`shapec/stdlib/time_efficiency.shape::time_efficiency`.
"""

from __future__ import annotations

import difflib
import math
import warnings
from typing import Annotated, Any, Literal, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, Field, model_validator

from ..runtime.validate import BatchError, as_array, flag, show
from ._stdlib import stdlib_shaper

PREFIX = "time_efficiency/"


class TimeEfficiencyConfig(BaseModel, extra="allow"):
    """`grpo.time_efficiency`: disabled by default; unknown keys are kept, as in NeMo-RL."""

    enabled: bool = False
    # per minute of openhands_run_time: a 60-minute rollout costs 1.0
    lambda_time: float = 1.0 / 60.0
    # "all" charges failures too; "correct" only resolved rollouts with a nonzero reward
    apply_to: Literal["all", "correct"] = "all"
    # saturating per-tool-call bonus, off at 0
    lambda_call_bonus: Annotated[float, Field(ge=0.0)] = 0.0
    # tool calls at which the bonus saturates; required and > 0 when the bonus is on
    call_bonus_ref: float | None = None
    # the adjusted reward is lifted to floor when it falls strictly below it
    floor: float | None = None

    @model_validator(mode="after")
    def _check_call_bonus_ref(self) -> "TimeEfficiencyConfig":
        if self.lambda_call_bonus > 0 and not (self.call_bonus_ref is not None and self.call_bonus_ref > 0):
            raise ValueError(
                "grpo.time_efficiency.call_bonus_ref must be a positive number of tool calls when "
                "lambda_call_bonus > 0")
        return self


def _warn_unknown_keys(config: TimeEfficiencyConfig) -> None:
    """NeMo-RL keeps and ignores unknown keys of this block; a typo then silently changes nothing, so warn."""
    known = list(TimeEfficiencyConfig.model_fields)
    for key in config.model_extra or {}:
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
        warnings.warn(f"grpo.time_efficiency: unknown key {key!r} ignored{hint}", stacklevel=3)


def rollout_seconds(result: Mapping[str, Any], index: int = 0) -> float:
    """`openhands_run_time` clipped at 0; missing, None or non-numeric counts 0 (numeric strings parse)."""
    seconds = result["full_result"].get("openhands_run_time")
    try:
        value = max(float(seconds), 0.0)
    except OverflowError:  # an integer past float range: as infinite as NeMo-RL's float() can't say
        value = math.inf if seconds > 0 else 0.0
    except (TypeError, ValueError):
        return 0.0
    if not math.isfinite(value):
        # NeMo-RL would write a NaN or -inf reward here; refuse instead
        raise ValueError(f"results[{index}].full_result.openhands_run_time is {show(seconds)}; expected a finite number")
    return value


def has_run_time(result: Mapping[str, Any]) -> bool:
    """Whether `openhands_run_time` is there and reads as a number (else the row is charged 0)."""
    try:
        float(result["full_result"].get("openhands_run_time"))
    except OverflowError:
        return True
    except (TypeError, ValueError):
        return False
    return True


_WARNED_MISSING: list[bool] = []  # warn once per process: a training loop calls this every step


def _count_missing_run_times(results: Sequence[Mapping[str, Any]]) -> int:
    """Rows charged 0 because their run time is missing; NeMo-RL does so silently, shapec says so once."""
    missing = sum(1 for result in results if not has_run_time(result))
    if missing and not _WARNED_MISSING:
        _WARNED_MISSING.append(True)
        warnings.warn(f"time efficiency: {missing} of {len(results)} rows have no usable "
                      "full_result.openhands_run_time and are charged 0 minutes (counted in "
                      f"{PREFIX}missing_run_time; this warning is shown once)", stacklevel=3)
    return missing


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


def rollout_calls(result: Mapping[str, Any]) -> int:
    """The number of `function_call` items in `full_result.response.output` (0 without a list)."""
    response = result["full_result"].get("response") or {}
    output = response.get("output") if isinstance(response, Mapping) else None
    if not isinstance(output, list):
        return 0
    return sum(1 for item in output if isinstance(item, dict) and item.get("type") == "function_call")


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
        _warn_unknown_keys(config)
    if config is None or not config.enabled or not results:
        return {}
    n = len(results)
    if mask_sample is not None and len(mask_sample) != n:
        raise ValueError(f"mask_sample has {len(mask_sample)} entries for {n} results")
    masked = np.array([flag(f, f"mask_sample[{i}]") for i, f in enumerate(mask_sample)] if mask_sample is not None
                      else [False] * n, dtype=bool)
    full = [result["full_result"] for result in results]
    resolved = np.array([flag(fr.get("resolved"), f"results[{i}].full_result.resolved") for i, fr in enumerate(full)],
                        dtype=bool)
    rewards = np.array([charged_reward(fr, i) for i, fr in enumerate(full)], dtype=np.float64)
    out = stdlib_shaper("time_efficiency", "time_efficiency")(
        rewards, offsets=np.array([0, n]),
        channels={
            "run_time": [rollout_seconds(result, i) for i, result in enumerate(results)],
            "calls": [rollout_calls(result) for result in results],
            "resolved": resolved,
            "masked": masked,
        },
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
    missing = _count_missing_run_times(results)
    if missing:  # only then: a complete batch reports exactly NeMo-RL's metrics
        metrics[PREFIX + "missing_run_time"] = float(missing)
    return metrics
