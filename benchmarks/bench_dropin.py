"""The NeMo-RL drop-in against a floor written by hand, on 512 prompts x 16 NeMo-Gym result dicts.

The workload (character lengths): total bonus, longest total penalty, group-relative total and
reasoning coefficients behind the profile gate, total zMAD, profiled length with 4 profiled
rollouts per prompt, pass-rate penalty, per-row total bands.

  drop-in  shapec.compat.nemo_rl.apply_group_length_penalties(results, config, 16): reads the dicts,
           validates them, shapes, writes every reward back
  floor    by hand: one Python pass over the dicts for rewards and character lengths, one over the
           groups for their metadata, the hand numba kernel of the same algorithms
           (hand_nemo_rl.py), one pass writing rewards back. It checks nothing.

the same in tokens when transformers is installed (a BPE tokenizer trained on the spot; the floor
counts every text in one batched call, as the drop-in does), and the time-efficiency drop-in
(apply_time_efficiency_reward, default config: every rollout
charged lambda_time per minute of openhands_run_time) against its floor: one pass over the dicts for
rewards, run times and function calls, the charge and the metrics in numpy, one pass writing back.

Both must write identical rewards (checked first); then the median of interleaved rounds, in one
process. Run: python benchmarks/bench_dropin.py [--groups 512] [--size 16] [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import numpy as np

import hand_nemo_rl as hand
import shapec
from shapec.compat import nemo_rl
from shapec.run.nemo_rl_config import TimeEfficiencyConfig
from shapec.runtime.params import validate_params

DEFAULT = {
    "length_type": "chars", "total_bonus": 0.05, "longest_total_penalty": 0.05,
    "group_total_length_penalty_coeff": 0.1, "group_reasoning_length_penalty_coeff": 0.05,
    "group_length_penalty_profile_gate": True, "total_zmad_threshold": 2.5, "total_zmad_penalty": 0.05,
    "profiled_length_penalty": 0.1, "profiled_length_n_std": 1.0, "profiled_length_min_samples": 2,
    "pass_rate_length_penalty_weight": 0.1, "profile_band_total": True,
}
CONFIG = {"default": DEFAULT}


def make_results(groups: int, size: int, seed: int = 0) -> list[dict]:
    """NeMo-Gym rows: one reasoning item and one assistant message, a total band and 4 profiled rollouts per prompt."""
    rng = random.Random(seed)
    results = []
    for _ in range(groups):
        meta = {"profiled_rewards": [rng.randint(0, 1) for _ in range(4)],
                "profiled_output_lengths": [rng.randint(500, 6000) for _ in range(4)],
                "profile_band": {"total": {"a": 2500.0, "b": 6000.0, "f": 0.9}}}
        for _ in range(size):
            results.append({
                "full_result": {"reward": float(rng.random() < 0.6), "response": {"output": [
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r" * rng.randint(200, 6000)}]},
                    {"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": "a" * rng.randint(20, 1000)}]}]}},
                "agent_ref": {"name": "math_with_judge_simple_agent"}, **meta})
    return results


class Floor:
    """The same rewards by hand: no checks, the hand kernel, params resolved once; with a tokenizer,
    the texts counted in one batched call."""

    def __init__(self, size: int, tokenizer=None):
        ir = shapec.load("nemo_rl", backend="numba").length_penalty.ir
        params = {k: v for k, v in DEFAULT.items() if k != "length_type"}
        self.pv, self.gb = hand.param_vector(validate_params(ir, params))
        self.size = size
        self.tokenizer = tokenizer

    def __call__(self, results: list[dict]) -> None:
        n, k = len(results), self.size
        rewards = np.empty(n)
        texts = []
        for i, row in enumerate(results):
            full = row["full_result"]
            rewards[i] = full["reward"]
            r, a = [], []
            for item in full["response"]["output"]:
                if item["type"] == "reasoning":
                    r += [part["text"] for part in item["summary"]]
                elif item["type"] == "message":
                    a += [part["text"] for part in item["content"]]
            texts += ["".join(r), "".join(a)]
        if self.tokenizer is None:
            counts = np.array([len(t) for t in texts], dtype=np.float64)
        else:
            ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
            counts = np.array([len(x) for x in ids], dtype=np.float64)
        reasoning, answer = counts[0::2].copy(), counts[1::2].copy()
        G = n // k
        bands = np.full((3, G, 4), np.nan)
        bands[:, :, 3] = 0.0
        p_off, p_reward, p_length = np.zeros(G + 1, np.int64), [], []
        for g in range(G):
            first = results[g * k]
            t = first["profile_band"]["total"]
            bands[0, g] = (t["a"], t["b"], t["f"], 1.0)
            pr, pl = first["profiled_rewards"], first["profiled_output_lengths"]
            p_reward += pr
            p_length += pl
            p_off[g + 1] = p_off[g] + len(pr)
        out = np.empty(n)
        hand.length_penalty(rewards, np.arange(0, n + 1, k, dtype=np.int64), reasoning, answer, np.zeros(n), bands,
                            p_off, np.array(p_reward, dtype=np.float64), np.array(p_length, dtype=np.float64),
                            self.pv, self.gb, out, np.empty((12, 0)), np.empty((3, 0)), np.empty(G, np.int64),
                            np.empty((3, G), np.int64), np.empty(5), False)
        for row, value in zip(results, out.tolist()):
            row["full_result"]["reward"] = value


def words_tokenizer():
    """A Hugging Face BPE tokenizer trained here on the benchmark's letters (nothing downloaded), or
    None without transformers."""
    try:
        import tokenizers
        import transformers
    except ImportError:
        return None
    rng = random.Random(5)
    corpus = ["".join(rng.choice("ra ") for _ in range(2000)) for _ in range(50)]
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.train_from_iterator(corpus, tokenizers.trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>"]))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def make_agent_results(n: int, seed: int = 1) -> list[dict]:
    """NeMo-Gym agent rows: a reward, a run time and 0-6 function calls each."""
    rng = random.Random(seed)
    return [{"full_result": {"reward": float(rng.random() < 0.5), "resolved": rng.random() < 0.5,
                             "openhands_run_time": rng.uniform(10, 5000),
                             "response": {"output": [{"type": "function_call"}] * rng.randint(0, 6)
                                          + [{"type": "message", "content": "done"}]}}}
            for _ in range(n)]


def time_floor(results: list[dict], lambda_time: float) -> dict[str, float]:
    """apply_time_efficiency_reward's rewards and metrics on this workload (apply_to all, no bonus,
    no floor, no mask), by hand."""
    n = len(results)
    rewards, seconds, calls = np.empty(n), np.empty(n), np.empty(n)
    for i, row in enumerate(results):
        full = row["full_result"]
        rewards[i] = float(full["reward"] or 0.0)
        seconds[i] = max(float(full["openhands_run_time"]), 0.0)
        calls[i] = sum(1 for item in full["response"]["output"] if item["type"] == "function_call")
    minutes = seconds / 60
    shaped = rewards + 0.0 + -lambda_time * minutes
    deduction = rewards - shaped
    metrics = {"minutes/mean": minutes.mean(), "minutes/max": minutes.max(), "deduction/mean": deduction.mean(),
               "deduction/max": deduction.max(), "calls/mean": calls.mean(), "bonus/mean": 0.0,
               "seconds_per_call": minutes.sum() * 60 / max(calls.sum(), 1), "bonus_saturated_frac": 0.0,
               "floored_frac": 0.0, "group_has_signal": float(n > 1 and deduction.max() - deduction.min() > 1e-6)}
    for row, value in zip(results, shaped.tolist()):
        row["full_result"]["reward"] = value
    return metrics


def interleaved(runs: dict, reset, repeat: int) -> dict[str, float]:
    times = {name: [] for name in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            reset()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def compare(title: str, results: list[dict], runs: dict, repeat: int) -> None:
    """Identical rewards first, then the medians of interleaved rounds."""
    original = [r["full_result"]["reward"] for r in results]

    def reset():
        for r, v in zip(results, original):
            r["full_result"]["reward"] = v

    shaped = {}
    for name, fn in runs.items():
        reset()
        fn()
        shaped[name] = [r["full_result"]["reward"] for r in results]
    if shaped["drop-in"] != shaped["floor"]:
        raise SystemExit(f"{title}: the floor's rewards differ from the drop-in's")
    med = interleaved(runs, reset, repeat)
    reset()  # the next workload starts from the rows as they were made
    print(f"{title}: drop-in {med['drop-in'] * 1e3:7.1f} ms | floor {med['floor'] * 1e3:7.1f} ms | "
          f"drop-in / floor {med['drop-in'] / med['floor']:.2f}x (rewards identical)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=512)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    print(f"medians of {args.repeat} interleaved rounds, load {os.getloadavg()[0]:.2f}")
    results = make_results(args.groups, args.size)
    floor = Floor(args.size)
    compare(f"length penalties, {args.groups} x {args.size} NeMo-Gym dicts", results,
            {"drop-in": lambda: nemo_rl.apply_group_length_penalties(results, CONFIG, args.size),
             "floor": lambda: floor(results)}, args.repeat)
    tokenizer = words_tokenizer()
    if tokenizer is None:
        print("token lengths: not measured (needs transformers and tokenizers: pip install -e '.[trl]')")
    else:
        token_config = {"default": {**DEFAULT, "length_type": "tokens"}}
        token_floor = Floor(args.size, tokenizer)
        compare(f"length penalties in tokens (a BPE tokenizer), {args.groups} x {args.size} NeMo-Gym dicts", results,
                {"drop-in": lambda: nemo_rl.apply_group_length_penalties(results, token_config, args.size,
                                                                          tokenizer=tokenizer),
                 "floor": lambda: token_floor(results)}, max(3, args.repeat // 8))
    agents = make_agent_results(args.groups * args.size)
    config = TimeEfficiencyConfig(enabled=True)
    compare(f"time efficiency, {len(agents)} NeMo-Gym agent dicts", agents,
            {"drop-in": lambda: nemo_rl.apply_time_efficiency_reward(agents, config),
             "floor": lambda: time_floor(agents, config.lambda_time)}, args.repeat)


if __name__ == "__main__":
    main()
