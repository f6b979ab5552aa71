"""Drop-in for NeMo-RL's `nemo_rl.utils.length_penalty`: same config, signature, rewards and metrics.

Switch with one import:

    from shapec.compat.nemo_rl import LengthPenaltyConfig, apply_group_length_penalties

This module only resolves the config (agent overrides, implicitly enabled global bands), turns
NeMo-Gym result dicts into arrays (`run/nemo_gym_rows.py`), and calls the compiled stdlib shaper
`shapec/stdlib/nemo_rl.shape::length_penalty`. Every algorithm lives in that spec.

The config accepts and rejects exactly what NeMo-RL's accepts. Where NeMo-RL accepts a value its
code then fails on, the result here is defined, fails closed and is warned about (`warnings`):

- `top_percentile` outside [0, 1]: where the top-scorer index falls past a group's correct rollouts
  (NeMo-RL: IndexError) the group has no top scorer, so no shortest bonus and no longest penalty;
  a value <= 0 keeps only the best score, as NeMo-RL does. NaN or inf: a ParamError when called.
- `profiled_length_min_samples` below 1 acts as 1: a prompt with no passing profiled rollout gets
  no profiled penalty (NeMo-RL: StatisticsError).

Bad rows fail the whole call with a BatchError (a ValueError) naming the row and field, and no
reward is changed: a row without `full_result`, `full_result.reward` or `agent_ref.name`, a reward
that is not a number (`"1"`, None), a text that is not a string, `profiled_rewards` or
`profiled_output_lengths` that are not lists of finite numbers, and a listed `profile_band` channel
that is not a band with finite a < b and 0 <= f <= 1 (NeMo-RL skips a malformed channel and applies
an f outside [0, 1] as given). `group_size` must be a positive integer (2.5 and True are errors);
the last group may be shorter, as in NeMo-RL's slicing.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel

from ..runtime.validate import BatchError
from ..run.nemo_gym_rows import CHANNELS, group_metadata, length_of, read_rows, response_texts, row_lengths
from ..run.nemo_rl_config import (LengthPenaltyConfig, LengthPenaltyParams, ProfileBandConfig, TimeEfficiencyConfig,
                                  agent_params, default_params, global_bands)
from ._time_efficiency import apply_time_efficiency_reward

__all__ = ["LengthPenaltyConfig", "LengthPenaltyParams", "ProfileBandConfig", "apply_group_length_penalties",
           "response_texts", "length_of", "length_penalty_shaper", "TimeEfficiencyConfig",
           "apply_time_efficiency_reward"]

logger = logging.getLogger(__name__)

METRICS = ("env_reward_mean", "reward_delta_mean", "wiped_correct_frac", "adjusted_frac",
           "skipped_non_binary_frac")


_NON_BINARY_WARNED_AGENTS: set[str] = set()
_WARNED_TOKENS = []  # non-empty once the tokens-without-tokenizer warning was given


def _warn_tokens_without_tokenizer() -> None:
    """NeMo-RL counts characters when length_type is tokens and no tokenizer is passed; say so, once."""
    if not _WARNED_TOKENS:
        _WARNED_TOKENS.append(True)
        warnings.warn("length_penalty length_type is 'tokens' but no tokenizer was passed: lengths are counted "
                      "in characters (as NeMo-RL does); pass tokenizer= to count tokens", stacklevel=3)


def length_penalty_shaper(backend: str | None = None, parallel: bool | None = None):
    """The compiled stdlib `nemo_rl.length_penalty`, compiled once per backend (default: SHAPEC_BACKEND)
    and parallel option (default: SHAPEC_PARALLEL)."""
    from ._stdlib import stdlib_shaper

    return stdlib_shaper("nemo_rl", "length_penalty", backend, parallel)


def _param_columns(per_group: list[dict[str, Any]], bands: dict[str, tuple]) -> dict[str, Any]:
    """Shaper params: a scalar where every group agrees, else one value per group."""
    params: dict[str, Any] = {}
    distinct = {id(p): p for p in per_group}
    for key in per_group[0]:
        if key == "length_type":
            continue
        values = {repr(p[key]) for p in distinct.values()}
        params[key] = per_group[0][key] if len(values) == 1 else [p[key] for p in per_group]
    for ch in CHANNELS:
        params[f"global_band_{ch}"] = bands.get(ch)
    return params


def _config(value: Any) -> LengthPenaltyConfig:
    """Ours as is; a dict, or another pydantic model of the block (NeMo-RL's own), validated.

    A foreign model is dumped with only the keys its user set, so implicit band enabling still
    sees which flags were written explicitly."""
    if isinstance(value, LengthPenaltyConfig):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_unset=True)
    return LengthPenaltyConfig.model_validate(value)


def _is_master_config(value: Any) -> bool:
    """A whole NeMo-RL config (a dict or a model with a `grpo` section), not its length_penalty block."""
    if isinstance(value, LengthPenaltyConfig):
        return False
    return "grpo" in value if isinstance(value, Mapping) else hasattr(value, "grpo")


def _from_master_config(master: Any, group_size: Any, tokenizer: Any) -> tuple[Any, int, Any]:
    """(length_penalty block, group size, tokenizer) of the older call `(results, master_config,
    tokenizer)`, whose third argument is the tokenizer."""
    def get(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)

    if group_size is not None and not isinstance(group_size, (int, np.integer)):
        if tokenizer is not None:
            raise TypeError("apply_group_length_penalties(results, master_config, tokenizer): got a tokenizer "
                            "twice (the third argument of this call is the tokenizer)")
        tokenizer, group_size = group_size, None
    grpo = get(master, "grpo")
    block = get(grpo, "length_penalty")
    if group_size is None:
        group_size = get(grpo, "num_generations_per_prompt")
        if group_size is None:
            raise KeyError("master_config: missing grpo.'num_generations_per_prompt'")
    return block, group_size, tokenizer


def apply_group_length_penalties(
    results: list[dict[str, Any]],
    length_penalty_config: LengthPenaltyConfig | dict[str, Any] | None,
    group_size: int | Any = None,
    tokenizer: Any = None,
) -> dict[str, float]:
    """Apply NeMo-RL's per-prompt-group length penalties; mutate `full_result["reward"]` in place.

    `group_size` contiguous rows form a group (the last may be shorter). Returns the five
    `length_penalty/*` per-row metrics, or {} when nothing is enabled or `results` is empty.
    The older call, `(results, master_config, tokenizer)`, is accepted too: the block is the
    master config's `grpo.length_penalty` and the group size its `grpo.num_generations_per_prompt`.
    """
    if _is_master_config(length_penalty_config):
        length_penalty_config, group_size, tokenizer = _from_master_config(length_penalty_config, group_size,
                                                                           tokenizer)
    if length_penalty_config is None:  # grpo.length_penalty not configured
        return {}
    cfg = _config(length_penalty_config)
    bands = global_bands(cfg)
    if not cfg.default.enabled and not cfg.agent_overrides and not bands:
        return {}
    if not results:
        return {}
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)):
        raise BatchError(f"group_size: expected a positive integer, got {group_size!r}")
    if group_size <= 0:
        raise BatchError("group_size must be greater than zero")
    group_size = int(group_size)

    rows = read_rows(results)
    fulls, rewards, row_agents = rows.fulls, rows.rewards, rows.agents
    n = len(results)
    starts = range(0, n, group_size)
    defaults = default_params(cfg, bands)
    agents = [row_agents[s] for s in starts]
    memo: dict[str, dict[str, Any]] = {}
    per_group = []
    for agent in agents:
        if cfg.agent_overrides is not None and agent not in cfg.agent_overrides:
            per_group.append(agent_params(agent, cfg, defaults))  # prints the warning per group
        else:
            if agent not in memo:
                memo[agent] = agent_params(agent, cfg, defaults)
            per_group.append(memo[agent])

    if tokenizer is None and any(p["enabled"] and p["length_type"] == "tokens" for p in per_group):
        _warn_tokens_without_tokenizer()
    if rows.deferred:
        raise rows.deferred[0]
    components, low_effort = rows.components, rows.low_effort
    reasoning, answer = row_lengths(results, starts, group_size, per_group, tokenizer, rows.chars)
    metadata = group_metadata(results, starts)

    out = length_penalty_shaper()(
        rewards, group_size=group_size, allow_short_last_group=True,  # NeMo-RL's slicing: the last may be short
        channels={"reasoning": reasoning, "answer": answer, "low_effort": low_effort},
        metadata=metadata, params=_param_columns(per_group, bands), reward_components=components,
        breakdown=cfg.verbose,  # only the verbose log reads the per-term values
    )
    # like NeMo-RL, every row of a group that passed the binary check gets its (float) reward back
    final = out.rewards.tolist()
    shaped_rows = np.repeat(~out.skipped, np.diff(out.offsets))
    for i in np.flatnonzero(shaped_rows | (out.rewards != rewards)).tolist():
        fulls[i]["reward"] = final[i]

    reasons = out.skip_reasons
    for g, agent in enumerate(agents):
        if reasons[g] == "non_binary" and agent not in _NON_BINARY_WARNED_AGENTS:
            _NON_BINARY_WARNED_AGENTS.add(agent)
            logger.warning(
                "length penalties require binary (0/1) single-reward env rewards; agent %s produced non-binary "
                "or multi-component rewards — skipping length penalties for its prompt groups", agent)
    if cfg.verbose:
        _print_breakdown(out, agents, per_group, reasoning, answer, rewards)
    return {f"length_penalty/{k}": float(out.metrics[k]) for k in METRICS}


def _print_breakdown(out, agents, per_group, reasoning, answer, env_rewards) -> None:
    """NeMo-RL's verbose per-group log, from the shaper's per-term outputs and gate reasons."""
    offsets = out.offsets
    terms, factors, gates = out.terms, out.factors, out.gates
    reasons = out.skip_reasons
    print(f"\n{'=' * 70}", flush=True)
    print(f"[Rollout] {len(env_rewards)} samples, {len(agents)} groups, "
          f"{int(np.sum(out.rewards != env_rewards))} rollouts adjusted", flush=True)
    for g, agent in enumerate(agents):
        params = per_group[g]
        status = reasons[g] or ("low_effort" if gates["full_effort"][g] == "closed" else "")
        head = f"\n  group {g} agent={agent}"
        if status:
            print(f"{head} [{status} — skipped]", flush=True)
        else:
            unit = "tok" if params["length_type"] == "tokens" else "chr"
            shown = " ".join(f"{k}={v}" for k, v in params.items() if k not in ("enabled", "length_type"))
            print(f"{head} length_type={unit} {shown}", flush=True)
            if params["group_length_penalty_profile_gate"]:
                print(f"    profile_gate channel={params['group_length_penalty_profile_gate_channel']}"
                      f" field={params['group_length_penalty_profile_gate_field']}"
                      f" positive_only={params['group_length_penalty_profile_gate_positive_only']}"
                      f" open={gates['profile_gate'][g].startswith('mean_gt')} reason={gates['profile_gate'][g]}",
                      flush=True)
        for k, i in enumerate(range(offsets[g], offsets[g + 1])):
            parts = [f"{name}={v[i]:+.4f}" for name, v in terms.items() if v[i] != 0]
            parts += [f"{name}=x{v[i]:.4f}" for name, v in factors.items() if v[i] != 1]
            print(f"    [{k}] reward={env_rewards[i]:.4f} reasoning_len={int(reasoning[i])}"
                  f" answer_len={int(answer[i])} total_len={int(reasoning[i] + answer[i])} "
                  f"{' '.join(parts)} final_reward={out.rewards[i]:.4f}", flush=True)
    print(f"{'=' * 70}\n", flush=True)
