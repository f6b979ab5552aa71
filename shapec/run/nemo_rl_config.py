"""NeMo-RL's configuration blocks as pydantic models: `grpo.length_penalty` (with its per-agent
overrides and profile bands) and `grpo.time_efficiency`, and the shaper params they stand for.
Read by the NeMo-RL drop-ins (compat/nemo_rl.py) and by `shapec run --config` (tools/config.py)."""

from __future__ import annotations

import difflib
import math
import warnings
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .nemo_gym_rows import CHANNELS

class _Block(BaseModel):
    """A config block that rejects unknown keys and names the closest valid one."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key not in cls.model_fields:
                    close = difflib.get_close_matches(str(key), list(cls.model_fields), n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else f"; allowed: {sorted(cls.model_fields)}"
                    raise ValueError(f"unknown key {key!r}{hint}")
        return data


class LengthPenaltyParams(_Block):
    """`grpo.length_penalty.default` and each `agent_overrides.<agent>`; NeMo-RL's defaults."""

    enabled: bool = True
    length_type: Literal["tokens", "chars"] = "tokens"
    top_percentile: float = 0.5
    reasoning_bonus: float = 0.0
    answer_bonus: float = 0.0
    total_bonus: float = 0.0
    longest_reasoning_penalty: float = 0.0
    longest_answer_penalty: float = 0.0
    longest_total_penalty: float = 0.0
    group_reasoning_length_penalty_coeff: float = 0.0
    group_answer_length_penalty_coeff: float = 0.0
    group_total_length_penalty_coeff: float = 0.0
    reasoning_zmad_threshold: float = 0.0
    reasoning_zmad_penalty: float = 0.0
    answer_zmad_threshold: float = 0.0
    answer_zmad_penalty: float = 0.0
    total_zmad_threshold: float = 0.0
    total_zmad_penalty: float = 0.0
    profiled_length_penalty: float = 0.0
    profiled_length_n_std: float = 1.0
    profiled_length_min_samples: int = 2
    pass_rate_length_penalty_weight: float = 0.0
    profile_band_total: bool = False
    profile_band_reasoning: bool = False
    profile_band_answer: bool = False
    group_length_penalty_profile_gate: bool = False
    group_length_penalty_profile_gate_channel: Literal["total", "reasoning", "answer"] = "total"
    group_length_penalty_profile_gate_field: Literal["a", "b", "f"] = "a"
    group_length_penalty_profile_gate_positive_only: bool = True

    @model_validator(mode="after")
    def _warn_fail_closed(self) -> "LengthPenaltyParams":
        """NeMo-RL's config accepts these values and its code then fails at run time; say what happens here."""
        for message in fail_closed_values(self.top_percentile, self.profiled_length_min_samples):
            warnings.warn(message, stacklevel=2)
        return self


def fail_closed_values(tp: float, ms: int) -> list[str]:
    """What shapec does with the values NeMo-RL's config accepts and its code then fails on, one line each
    (the drop-in and `shapec run --config` warn them from the config, `--set` from its values)."""
    out = []
    if not math.isfinite(tp):
        out.append(f"length_penalty top_percentile {tp} is not a finite number: NeMo-RL fails on it at "
                   f"run time; the drop-in refuses it with a ParamError when called")
    elif not 0 <= tp <= 1:
        out.append(f"length_penalty top_percentile {tp} is outside [0, 1]: a group whose top-scorer index "
                   f"falls past its correct rollouts (NeMo-RL raises IndexError there) gets no shortest "
                   f"bonus and no longest penalty; a value <= 0 keeps only the best score, as in NeMo-RL")
    if ms < 1:
        out.append(f"length_penalty profiled_length_min_samples {ms} is below 1: it acts as 1 (a prompt "
                   f"without a passing profiled rollout gets no profiled penalty; NeMo-RL raises "
                   f"StatisticsError there)")
    return out


class ProfileBandChannel(_Block):
    """One global {a, b, f} band: multiplier 1 up to a, linear to f at b, f past b (finite, as every band)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    a: float
    b: float
    f: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _b_above_a(self) -> "ProfileBandChannel":
        if self.b <= self.a:
            raise ValueError(f"profile band requires b > a, got a={self.a}, b={self.b}")
        return self


class ProfileBandDefaults(_Block):
    total: Optional[ProfileBandChannel] = None
    reasoning: Optional[ProfileBandChannel] = None
    answer: Optional[ProfileBandChannel] = None


class ProfileBandConfig(_Block):
    """Global bands for datasets without per-row `profile_band` metadata."""

    enabled: bool = False
    defaults: ProfileBandDefaults = Field(default_factory=ProfileBandDefaults)


class LengthPenaltyConfig(_Block):
    """`grpo.length_penalty`. `agent_overrides.<agent>: null` keeps `default` for that agent."""

    verbose: bool = False
    default: LengthPenaltyParams = Field(default_factory=LengthPenaltyParams)
    agent_overrides: Optional[dict[str, Optional[LengthPenaltyParams]]] = None
    profile_band: Optional[ProfileBandConfig] = None


def global_bands(cfg: LengthPenaltyConfig) -> dict[str, tuple[float, float, float]]:
    """The channels listed under an enabled `profile_band.defaults`, as (a, b, f)."""
    pb = cfg.profile_band
    if pb is None or not pb.enabled:
        return {}
    return {ch: (block.a, block.b, block.f) for ch in CHANNELS if (block := getattr(pb.defaults, ch)) is not None}


def default_params(cfg: LengthPenaltyConfig, bands: dict[str, Any]) -> dict[str, Any]:
    """`default`, with global band channels enabled unless the user set their flag explicitly."""
    params = cfg.default.model_dump()
    for ch in bands:
        if f"profile_band_{ch}" not in cfg.default.model_fields_set:
            params[f"profile_band_{ch}"] = True
    return params


def agent_params(agent: str, cfg: LengthPenaltyConfig, defaults: dict[str, Any]) -> dict[str, Any]:
    """An agent's params: its override's explicitly set keys over the defaults."""
    overrides = cfg.agent_overrides
    if overrides is None:
        return defaults
    if agent not in overrides:
        print(f"[length_penalty] WARNING: agent '{agent}' not found in agent_overrides, falling back to defaults",
              flush=True)
        return defaults
    override = overrides[agent]
    if override is None:
        return defaults
    return {**defaults, **override.model_dump(exclude_unset=True)}


# ------------------------------------------------------------------------------------------ shaper


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


def warn_unknown_keys(config: TimeEfficiencyConfig) -> None:
    """NeMo-RL keeps and ignores unknown keys of this block; a typo then silently changes nothing, so warn."""
    known = list(TimeEfficiencyConfig.model_fields)
    for key in config.model_extra or {}:
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
        warnings.warn(f"grpo.time_efficiency: unknown key {key!r} ignored{hint}", stacklevel=3)
