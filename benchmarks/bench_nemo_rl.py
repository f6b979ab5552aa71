"""NeMo-RL length penalties on 512 groups x 16 rollouts, all eight algorithms on, lengths in characters.

Times three things in one process:
  array    the compiled stdlib shaper on prepared arrays (numba backend unless SHAPEC_BACKEND says otherwise),
           one core, and compiled with parallel=True on all of numba's threads
  drop-in  shapec.compat.nemo_rl.apply_group_length_penalties on NeMo-Gym result dicts (text extraction included)
  python   a plain-Python implementation of the same algorithm, written below, as the baseline

Run: python benchmarks/bench_nemo_rl.py [--groups 512] [--size 16] [--repeat 20]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

import numpy as np

from shapec.compat import nemo_rl
from shapec.run.nemo_gym_rows import group_metadata

CONFIG = {
    "default": {
        "length_type": "chars",
        "reasoning_bonus": 0.05, "answer_bonus": 0.05, "total_bonus": 0.05,
        "longest_reasoning_penalty": 0.05, "longest_answer_penalty": 0.05, "longest_total_penalty": 0.05,
        "group_reasoning_length_penalty_coeff": 0.05, "group_answer_length_penalty_coeff": 0.05,
        "group_total_length_penalty_coeff": 0.1,
        "reasoning_zmad_threshold": 2.5, "reasoning_zmad_penalty": 0.05,
        "answer_zmad_threshold": 2.5, "answer_zmad_penalty": 0.05,
        "total_zmad_threshold": 2.5, "total_zmad_penalty": 0.05,
        "profiled_length_penalty": 0.1, "profiled_length_n_std": 1.0, "profiled_length_min_samples": 2,
        "pass_rate_length_penalty_weight": 0.1,
        "profile_band_total": True, "profile_band_reasoning": True, "profile_band_answer": True,
        "group_length_penalty_profile_gate": True,
    },
}


# a typical run turns a few algorithms on (examples/data/nemo_rl_config.yaml): the kernel skips
# the statements whose group-level `when` is off, reductions and sorts included
TYPICAL = {"default": {"length_type": "chars", "longest_total_penalty": 0.1, "group_total_length_penalty_coeff": 0.2,
                       "group_length_penalty_profile_gate": True, "profiled_length_penalty": 0.1,
                       "profile_band_total": True}}


def make_results(groups: int, size: int, seed: int = 0) -> list[dict]:
    """NeMo-Gym-shaped rows: one reasoning item and one assistant message each, per-row prompt metadata."""
    rng = random.Random(seed)
    results = []
    for _ in range(groups):
        profiled = [rng.randint(500, 6000) for _ in range(8)]
        meta = {
            "profiled_rewards": [rng.randint(0, 1) for _ in range(8)],
            "profiled_output_lengths": profiled,
            "profile_band": {"total": {"a": 2500.0, "b": 6000.0, "f": 0.9},
                             "reasoning": {"a": 2000.0, "b": 5000.0, "f": 0.9},
                             "answer": {"a": 300.0, "b": 900.0, "f": 0.9}},
        }
        for _ in range(size):
            reasoning = "r" * rng.randint(200, 6000)
            answer = "a" * rng.randint(20, 1000)
            results.append({
                "full_result": {
                    "reward": float(rng.random() < 0.6),
                    "response": {"output": [
                        {"type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}]},
                        {"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": answer}]},
                    ]},
                },
                "agent_ref": {"name": "math_with_judge_simple_agent"},
                **meta,
            })
    return results


# ------------------------------------------------------------------------------ plain-Python baseline
def python_baseline(results: list[dict], p: dict, size: int) -> list[float]:
    """The guide's algorithm, one group at a time, in plain Python (chars, one agent, no overrides)."""
    n = len(results)
    out = [r["full_result"]["reward"] for r in results]
    chans = ("reasoning", "answer", "total")
    for s in range(0, n, size):
        rows = range(s, min(s + size, n))
        rew = [results[i]["full_result"]["reward"] for i in rows]
        if any(not (abs(v) <= 1e-6 or abs(v - 1) <= 1e-6) for v in rew):
            continue
        L = {"reasoning": [], "answer": []}
        for i in rows:
            rt = at = ""
            for item in results[i]["full_result"]["response"]["output"]:
                if item["type"] == "reasoning":
                    rt += "".join(x["text"] for x in item["summary"])
                elif item["type"] == "message" and item.get("role") in (None, "assistant"):
                    at += "".join(x["text"] for x in item["content"])
            L["reasoning"].append(len(rt))
            L["answer"].append(len(at))
        L["total"] = [a + b for a, b in zip(L["reasoning"], L["answer"])]
        k = len(rew)
        pos = [j for j in range(k) if rew[j] > 0]
        band = results[s].get("profile_band") or {}
        coeff = {ch: p[f"group_{ch}_length_penalty_coeff"] for ch in chans}
        if p["group_length_penalty_profile_gate"]:
            limit = (band.get(p["group_length_penalty_profile_gate_channel"]) or {}).get(
                p["group_length_penalty_profile_gate_field"])
            lens = L[p["group_length_penalty_profile_gate_channel"]]
            pool = pos if p["group_length_penalty_profile_gate_positive_only"] else range(k)
            if limit is None or not pool or not sum(lens[j] for j in pool) / len(pool) > limit:
                coeff = dict.fromkeys(chans, 0.0)
        delta = [0.0] * k
        if len(pos) >= 2:
            top = sorted((rew[j] for j in pos), reverse=True)[max(0, int(len(pos) * p["top_percentile"]) - 1)]
            for ch in chans:
                cands = [j for j in pos if L[ch][j] > 0]
                if p[f"{ch}_bonus"] > 0 and cands:
                    j = min(cands, key=lambda j: L[ch][j])
                    if rew[j] >= top:
                        delta[j] += p[f"{ch}_bonus"]
            for ch in chans:
                cands = [j for j in pos if rew[j] >= top and L[ch][j] > 0]
                if p[f"longest_{ch}_penalty"] > 0 and len(cands) >= 2:
                    delta[max(cands, key=lambda j: L[ch][j])] -= p[f"longest_{ch}_penalty"]
            if any(c > 0 for c in coeff.values()):
                for j in pos:
                    adj = 0.0
                    for ch in chans:
                        xs = [L[ch][q] for q in pos]
                        lo, hi = min(xs), max(xs)
                        if hi > lo:
                            raw = [1 - (x - lo) / (hi - lo) for x in xs]
                            adj += (1 - (L[ch][j] - lo) / (hi - lo) - sum(raw) / len(raw)) * coeff[ch]
                    delta[j] += adj
            for ch in chans:
                thr, pen = p[f"{ch}_zmad_threshold"], p[f"{ch}_zmad_penalty"]
                if thr > 0 and pen != 0:
                    xs = [L[ch][q] for q in pos]
                    med = statistics.median(xs)
                    mad = statistics.median([abs(x - med) for x in xs])
                    if mad > 0 and mad / max(med, 1e-9) >= 0.015:
                        for j in pos:
                            if 0.6745 * (L[ch][j] - med) / mad > thr:
                                delta[j] -= pen
        extra = [0.0] * k
        pr, pl = results[s].get("profiled_rewards"), results[s].get("profiled_output_lengths")
        if p["profiled_length_penalty"] > 0 and pr is not None and pl is not None:
            passing = [x for r, x in zip(pr, pl) if r > 0]
            if passing and len(passing) >= p["profiled_length_min_samples"]:
                thr = statistics.mean(passing) + p["profiled_length_n_std"] * (
                    statistics.stdev(passing) if len(passing) > 1 else 0.0)
                for j in range(k):
                    if L["total"][j] >= thr and delta[j] >= 0:
                        extra[j] -= p["profiled_length_penalty"]
        if p["pass_rate_length_penalty_weight"] > 0 and pos:
            lmax = max(L["total"][j] for j in pos)
            if lmax > 0:
                for j in pos:
                    extra[j] -= p["pass_rate_length_penalty_weight"] * len(pos) / k * L["total"][j] / lmax
        for j, i in enumerate(rows):
            base = max(rew[j] + delta[j] + extra[j], 0.0)
            if rew[j] > 0 and base > 0:
                for ch in chans:
                    blk = band.get(ch)
                    if p[f"profile_band_{ch}"] and blk and blk["b"] > blk["a"]:
                        x, a, b, f = L[ch][j], blk["a"], blk["b"], blk["f"]
                        base *= 1.0 if x <= a else f if x >= b else 1 - (x - a) / (b - a) * (1 - f)
            out[i] = base
    return out


# ------------------------------------------------------------------------------ timing
def best_of(fn, repeat: int, reset=None) -> float:
    """Fastest wall time of fn() in seconds (reset() runs untimed before each call); the minimum is the
    figure least disturbed by other processes on a shared machine."""
    times = []
    for _ in range(repeat):
        if reset:
            reset()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=512)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    results = make_results(args.groups, args.size)
    original = [r["full_result"]["reward"] for r in results]

    def reset():
        for r, v in zip(results, original):
            r["full_result"]["reward"] = v

    cfg = nemo_rl.LengthPenaltyConfig.model_validate(CONFIG)
    params = nemo_rl.default_params(cfg, {})
    shaper = nemo_rl.length_penalty_shaper(parallel=False)
    parallel = nemo_rl.length_penalty_shaper(parallel=True)

    # the array path: the same arrays the drop-in builds, prepared once
    n = len(results)
    texts = [nemo_rl.response_texts(r) for r in results]
    channels = {"reasoning": np.array([len(r) for r, _ in texts], dtype=np.float64),
                "answer": np.array([len(a) for _, a in texts], dtype=np.float64),
                "low_effort": np.zeros(n)}
    metadata = group_metadata(results, range(0, n, args.size))
    shaper_params = {k: v for k, v in params.items() if k != "length_type"}
    rewards = np.array(original)

    def array_path():
        return shaper(rewards, group_size=args.size, channels=channels, metadata=metadata, params=shaper_params)

    typical = {k: v for k, v in nemo_rl.default_params(nemo_rl.LengthPenaltyConfig.model_validate(TYPICAL), {}).items()
               if k != "length_type"}

    def array_typical():
        return shaper(rewards, group_size=args.size, channels=channels, metadata=metadata, params=typical)

    def array_parallel():
        return parallel(rewards, group_size=args.size, channels=channels, metadata=metadata, params=shaper_params)

    def drop_in():
        return nemo_rl.apply_group_length_penalties(results, cfg, args.size)

    def baseline():
        return python_baseline(results, params, args.size)

    array_path(), drop_in(), reset()  # compile and warm up
    expected = baseline()
    got = array_path().rewards
    drop_in()
    shaped = [r["full_result"]["reward"] for r in results]
    assert np.allclose(got, expected, rtol=0, atol=1e-12), "array path disagrees with the baseline"
    assert np.array_equal(array_parallel().rewards, got), "the parallel kernel disagrees with the sequential one"
    assert np.allclose(shaped, expected, rtol=0, atol=1e-12), "drop-in disagrees with the baseline"
    adjusted = sum(a != b for a, b in zip(expected, original))

    t_array = best_of(array_path, args.repeat * 10)
    t_parallel = best_of(array_parallel, args.repeat * 10)
    t_typical = best_of(array_typical, args.repeat * 10)
    t_drop = best_of(drop_in, args.repeat, reset)
    t_py = best_of(baseline, max(3, args.repeat // 4), reset)
    print(f"machine: {platform.processor() or platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, numpy {np.__version__}, backend {shaper.backend}")
    print(f"batch: {args.groups} groups x {args.size} rollouts = {n} rows, {adjusted} rewards adjusted")
    print(f"array path      {t_array * 1e3:9.3f} ms")
    print(f"array, parallel {t_parallel * 1e3:9.3f} ms ({parallel.backend}, parallel={parallel.parallel})")
    print(f"array, typical  {t_typical * 1e3:9.3f} ms (longest total, group total + profile gate, profiled, "
          f"total band; one core)")
    print(f"drop-in         {t_drop * 1e3:9.3f} ms")
    print(f"python baseline {t_py * 1e3:9.3f} ms")
    print(f"baseline / array   {t_py / t_array:8.1f}x")
    print(f"baseline / drop-in {t_py / t_drop:8.1f}x")
    print(f"NeMo-RL (~85 ms on this machine) / array {85e-3 / t_array:8.1f}x, / drop-in {85e-3 / t_drop:6.1f}x")


if __name__ == "__main__":
    main()
