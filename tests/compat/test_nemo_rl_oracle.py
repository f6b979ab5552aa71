"""The NeMo-RL drop-in against an independent oracle: the guide and the issue read plainly, one
group at a time, on random batches and configs (rows and helpers from test_compat_nemo_rl.py)."""

from __future__ import annotations

import copy
import statistics

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shapec.compat import nemo_rl
from shapec.compat.nemo_rl import apply_group_length_penalties

from .test_nemo_rl import backend, rewards, row  # noqa: F401  (backend: the autouse fixture)


# ------------------------------------------------------------------------------------- oracle
PARAM_DEFAULTS = {field: info.default for field, info in nemo_rl.LengthPenaltyParams.model_fields.items()}


def oracle(results, cfg, group_size):
    """The guide and the issue read plainly, one group at a time, on characters.

    Returns (final rewards, metrics), or None when the config enables nothing.
    """
    default = {**PARAM_DEFAULTS, **cfg.get("default", {})}
    overrides = cfg.get("agent_overrides")
    pb = cfg.get("profile_band") or {}
    global_band = {ch: v for ch, v in (pb.get("defaults") or {}).items() if v is not None} if pb.get("enabled") else {}
    if not default["enabled"] and not overrides and not global_band:
        return None
    for ch in global_band:
        if f"profile_band_{ch}" not in cfg.get("default", {}):
            default[f"profile_band_{ch}"] = True

    def texts(res):
        reasoning = answer = ""
        for item in res["full_result"]["response"]["output"]:
            if item["type"] == "reasoning":
                reasoning += "".join(s["text"] for s in item["summary"])
            elif item["type"] == "message" and item.get("role") in (None, "assistant"):
                answer += "".join(c["text"] for c in item["content"])
        return len(reasoning), len(answer)

    def band_value(first, ch):
        own = first.get("profile_band")
        if own and ch in own:
            return own[ch]
        return global_band.get(ch)

    def multiplier(length, blk):
        if not blk or any(blk.get(k) is None for k in "abf") or blk["b"] <= blk["a"]:
            return 1.0
        a, b, f = blk["a"], blk["b"], blk["f"]
        return 1.0 if length <= a else f if length >= b else 1.0 - (length - a) / (b - a) * (1.0 - f)

    n = len(results)
    orig = [r["full_result"]["reward"] for r in results]
    final = list(orig)
    verified = [False] * n
    skipped = 0
    for start in range(0, n, group_size):
        rows = list(range(start, min(start + group_size, n)))
        first = results[start]
        agent = first["agent_ref"]["name"]
        p = dict(default)
        if overrides is not None and overrides.get(agent) is not None:
            p.update(overrides[agent])
        if not p["enabled"]:
            continue
        if any(not (abs(orig[i]) <= 1e-6 or abs(orig[i] - 1) <= 1e-6) or results[i]["full_result"].get(
                "reward_components") for i in rows):
            skipped += len(rows)
            continue
        for i in rows:
            verified[i] = True
        if any(results[i].get("low_effort_applied") for i in rows):
            for i in rows:
                final[i] = max(orig[i], 0.0)
            continue
        lens = {i: texts(results[i]) for i in rows}
        L = {"reasoning": {i: lens[i][0] for i in rows}, "answer": {i: lens[i][1] for i in rows},
             "total": {i: lens[i][0] + lens[i][1] for i in rows}}
        pos = [i for i in rows if orig[i] > 0]
        coeff = {ch: p[f"group_{ch}_length_penalty_coeff"] for ch in ("reasoning", "answer", "total")}
        if p["group_length_penalty_profile_gate"]:
            blk = band_value(first, p["group_length_penalty_profile_gate_channel"])
            limit = blk.get(p["group_length_penalty_profile_gate_field"]) if isinstance(blk, dict) else None
            pool = pos if p["group_length_penalty_profile_gate_positive_only"] else rows
            chan = L[p["group_length_penalty_profile_gate_channel"]]
            if not isinstance(limit, (int, float)) or not pool or not sum(chan[i] for i in pool) / len(pool) > limit:
                coeff = dict.fromkeys(coeff, 0.0)
        delta = dict.fromkeys(rows, 0.0)
        if len(pos) >= 2:
            top = sorted((orig[i] for i in pos), reverse=True)[max(0, int(len(pos) * p["top_percentile"]) - 1)]
            for ch in ("reasoning", "answer", "total"):
                cands = [i for i in pos if L[ch][i] > 0]
                if p[f"{ch}_bonus"] > 0 and cands:
                    best = min(cands, key=lambda i: L[ch][i])
                    if orig[best] >= top:
                        delta[best] += p[f"{ch}_bonus"]
            for ch in ("reasoning", "answer", "total"):
                cands = [i for i in pos if orig[i] >= top and L[ch][i] > 0]
                if p[f"longest_{ch}_penalty"] > 0 and len(cands) >= 2:
                    delta[max(cands, key=lambda i: L[ch][i])] -= p[f"longest_{ch}_penalty"]
            if any(c > 0 for c in coeff.values()):
                weights = {}
                for ch in ("reasoning", "answer", "total"):
                    lo, hi = min(L[ch][i] for i in pos), max(L[ch][i] for i in pos)
                    raw = {i: 1.0 if hi == lo else 1.0 - (L[ch][i] - lo) / (hi - lo) for i in pos}
                    mean = sum(raw.values()) / len(pos)
                    weights[ch] = {i: raw[i] - mean for i in pos}
                for i in pos:
                    delta[i] += sum(weights[ch][i] * coeff[ch] for ch in ("reasoning", "answer", "total"))
            for ch in ("reasoning", "answer", "total"):
                thr, pen = p[f"{ch}_zmad_threshold"], p[f"{ch}_zmad_penalty"]
                if thr <= 0 or pen == 0:
                    continue
                xs = [L[ch][i] for i in pos]
                med = statistics.median(xs)
                mad = statistics.median(abs(x - med) for x in xs)
                if mad == 0 or mad / max(med, 1e-9) < 0.015:
                    continue
                for i in pos:
                    if 0.6745 * (L[ch][i] - med) / mad > thr:
                        delta[i] -= pen
        profiled, pass_rate = dict.fromkeys(rows, 0.0), dict.fromkeys(rows, 0.0)
        pr, pl = first.get("profiled_rewards"), first.get("profiled_output_lengths")
        if p["profiled_length_penalty"] > 0 and pr is not None and pl is not None:
            passing = [length for r, length in zip(pr, pl) if r > 0]
            if passing and len(passing) >= p["profiled_length_min_samples"]:
                spread = statistics.stdev(passing) if len(passing) > 1 else 0.0
                threshold = statistics.mean(passing) + p["profiled_length_n_std"] * spread
                for i in rows:
                    if L["total"][i] >= threshold and delta[i] >= 0:
                        profiled[i] = -p["profiled_length_penalty"]
        w = p["pass_rate_length_penalty_weight"]
        if w > 0 and pos:
            rho = len(pos) / len(rows)
            longest = max(L["total"][i] for i in pos)
            if longest > 0:
                for i in pos:
                    pass_rate[i] = -w * rho * L["total"][i] / longest
        for i in rows:
            # NeMo-RL adds one delta to the reward: (group adjustments + profiled + pass rate)
            base = max(orig[i] + (delta[i] + profiled[i] + pass_rate[i]), 0.0)
            if orig[i] > 0 and base > 0:
                for ch in ("total", "reasoning", "answer"):
                    if p[f"profile_band_{ch}"]:
                        base *= multiplier(L[ch][i], band_value(first, ch))
            final[i] = base
    metrics = {
        "length_penalty/env_reward_mean": sum(orig) / n,
        "length_penalty/reward_delta_mean": sum(f - o for f, o in zip(final, orig)) / n,
        "length_penalty/wiped_correct_frac": sum(verified[i] and orig[i] > 0 and final[i] <= 0 for i in range(n)) / n,
        "length_penalty/adjusted_frac": sum(f != o for f, o in zip(final, orig)) / n,
        "length_penalty/skipped_non_binary_frac": skipped / n,
    }
    return final, metrics


def test_oracle_agrees_with_hand_computed_example():
    results = [row(1, 10), row(1, 20), row(0, 50), row(1, 40)]
    final, _ = oracle(results, {"default": {"pass_rate_length_penalty_weight": 0.2}}, 4)
    assert final == pytest.approx([1 - 0.0375, 1 - 0.075, 0, 1 - 0.15])


REWARDS = st.sampled_from([0, 0, 1, 1, 1, 1.0, 0.0, 0.9999995, 1e-7, -5e-7, 0.5])
band_block = st.fixed_dictionaries({"a": st.integers(0, 20), "b": st.integers(5, 40),
                                    "f": st.sampled_from([0.0, 0.5, 0.9, 1.0])})
valid_band = band_block.filter(lambda b: b["b"] > b["a"])
# a listed row channel must be a valid band (a malformed one is a BatchError, tested above)
row_band = st.dictionaries(st.sampled_from(["total", "reasoning", "answer"]), valid_band, max_size=3)
params = st.fixed_dictionaries({}, optional={
    "top_percentile": st.sampled_from([0.25, 0.5, 1.0]),
    "reasoning_bonus": st.sampled_from([0.0, 0.1]), "answer_bonus": st.sampled_from([0.0, 0.2]),
    "total_bonus": st.sampled_from([0.0, 0.05]),
    "longest_reasoning_penalty": st.sampled_from([0.0, 0.2]), "longest_answer_penalty": st.sampled_from([0.0, 0.1]),
    "longest_total_penalty": st.sampled_from([0.0, 0.3]),
    "group_reasoning_length_penalty_coeff": st.sampled_from([0.0, 0.1]),
    "group_answer_length_penalty_coeff": st.sampled_from([0.0, 0.2]),
    "group_total_length_penalty_coeff": st.sampled_from([0.0, 0.3]),
    "reasoning_zmad_threshold": st.sampled_from([0.0, 0.5, 2.0]), "reasoning_zmad_penalty": st.sampled_from([0.0, 0.1]),
    "answer_zmad_threshold": st.sampled_from([0.0, 1.0]), "answer_zmad_penalty": st.sampled_from([0.0, 0.1]),
    "total_zmad_threshold": st.sampled_from([0.0, 0.5]), "total_zmad_penalty": st.sampled_from([0.0, 0.2]),
    "profiled_length_penalty": st.sampled_from([0.0, 0.3]), "profiled_length_n_std": st.sampled_from([0.0, 0.5, 1.0]),
    "profiled_length_min_samples": st.sampled_from([1, 2, 3]),
    "pass_rate_length_penalty_weight": st.sampled_from([0.0, 0.2]),
    "profile_band_total": st.booleans(), "profile_band_reasoning": st.booleans(), "profile_band_answer": st.booleans(),
    "group_length_penalty_profile_gate": st.booleans(),
    "group_length_penalty_profile_gate_channel": st.sampled_from(["total", "reasoning", "answer"]),
    "group_length_penalty_profile_gate_field": st.sampled_from(["a", "b", "f"]),
    "group_length_penalty_profile_gate_positive_only": st.booleans(),
    "enabled": st.sampled_from([True, True, True, False]),
})
configs = st.fixed_dictionaries({"default": params}, optional={
    "agent_overrides": st.dictionaries(st.sampled_from(["math", "code"]), st.one_of(st.none(), params), max_size=2),
    "profile_band": st.fixed_dictionaries({"enabled": st.booleans()}, optional={
        "defaults": st.fixed_dictionaries({}, optional={"total": valid_band, "reasoning": valid_band,
                                                        "answer": valid_band})}),
})
rows = st.builds(
    lambda reward, r, a, agent, low, comps, band, profiled: row(
        reward, r, a, agent, **({"low_effort_applied": True} if low else {}),
        **({"reward_components": [0.5]} if comps else {}), **({"profile_band": band} if band is not None else {}),
        **({"profiled_rewards": [x for x, _ in profiled], "profiled_output_lengths": [y for _, y in profiled]}
           if profiled is not None else {})),
    REWARDS, st.integers(0, 30), st.integers(0, 12), st.sampled_from(["math", "code"]),
    st.sampled_from([False] * 12 + [True]), st.sampled_from([False] * 15 + [True]), st.one_of(st.none(), row_band),
    st.one_of(st.none(), st.lists(st.tuples(st.sampled_from([0, 1]), st.integers(0, 40)), max_size=5)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(results=st.lists(rows, min_size=1, max_size=12), cfg=configs, group_size=st.integers(1, 5))
def test_drop_in_matches_oracle(results, cfg, group_size):
    expected = oracle(copy.deepcopy(results), cfg, group_size)
    metrics = apply_group_length_penalties(results, copy.deepcopy(cfg), group_size)
    if expected is None:
        assert metrics == {}
        return
    final, expected_metrics = expected
    assert rewards(results) == pytest.approx(final, abs=1e-12)
    assert metrics == pytest.approx(expected_metrics, abs=1e-12)


def test_no_config_block_touches_nothing():
    from shapec.compat.nemo_rl import apply_group_length_penalties as apply_

    rows = [{"full_result": {"reward": 1.0, "response": {"output": []}}, "agent_ref": {"name": "a"}}]
    assert apply_(rows, None, 1) == {}
    assert rows[0]["full_result"]["reward"] == 1.0


def test_rows_of_shaped_groups_get_float_rewards_back():
    from shapec.compat.nemo_rl import apply_group_length_penalties as apply_

    rows = [{"full_result": {"reward": r, "response": {"output": []}}, "agent_ref": {"name": "a"}} for r in (1, 0)]
    rows.append({"full_result": {"reward": 1, "response": {"output": []}, "reward_components": {"x": 1}},
                 "agent_ref": {"name": "a"}})
    apply_(rows, {"default": {"longest_total_penalty": 0.1}}, 2)
    # the binary-checked group is written back as floats (values unchanged); the skipped one is untouched
    assert [type(r["full_result"]["reward"]) for r in rows] == [float, float, int]


def test_a_foreign_pydantic_config_is_accepted_with_its_set_keys():
    from pydantic import BaseModel

    from shapec.compat.nemo_rl import apply_group_length_penalties as apply_

    class Default(BaseModel):
        enabled: bool = True
        longest_total_penalty: float = 0.0

    class Foreign(BaseModel):
        default: Default = Default()

    def rows():
        return [{"full_result": {"reward": 1.0, "response": {"output": [
            {"type": "message", "content": "x" * n}]}}, "agent_ref": {"name": "a"}} for n in (10, 20)]

    ours, theirs = rows(), rows()
    apply_(ours, {"default": {"longest_total_penalty": 0.2}}, 2)
    apply_(theirs, Foreign(default=Default(longest_total_penalty=0.2)), 2)
    assert [r["full_result"]["reward"] for r in theirs] == [r["full_result"]["reward"] for r in ours] == [1.0, 0.8]
