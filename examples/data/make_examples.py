"""Generate the bundled example rollouts (deterministic): `python examples/data/make_examples.py`.

rollouts.jsonl            flat layout: prompt_id, reward, reasoning/answer lengths in tokens,
                          low_effort, and per-prompt profile_band / profiled metadata; for the
                          examples and the stdlib's length shapers also length (reasoning + answer),
                          flagged (= low_effort), budget_band (the total band) and history
                          (profiled, as passed/length)
nemo_gym_rollouts.jsonl   NeMo-Gym result rows: full_result.reward and full_result.response.output
                          (reasoning and message items), metadata at the row's top level
nemo_rl_config.yaml       a NeMo-RL `grpo.length_penalty` block to run them with

The groups are chosen so every path of the nemo_rl stdlib shows up: a profile gate that opens
and one that stays closed (mean below the band's a), a group without a profile band, an
all-wrong group, a low-effort group, and profiled lengths that set a threshold.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
SEED = 20240611
WORDS = ("so the sum is", "check the base case", "which gives", "now substitute", "therefore",
         "consider the parity", "by symmetry", "the remainder is", "so x equals", "wait, recompute")

# (prompt_id, group size, accuracy, typical reasoning tokens, profile band or None, low effort)
GROUPS = [
    ("gsm8k-0017", 8, 0.75, 2400, {"total": {"a": 1800.0, "b": 3600.0, "f": 0.8}}, False),
    ("gsm8k-0042", 8, 0.5, 900, {"total": {"a": 2500.0, "b": 5000.0, "f": 0.8}}, False),
    ("math-0311", 8, 0.875, 6200, None, False),
    ("math-0509", 8, 0.0, 7400, {"total": {"a": 6000.0, "b": 9000.0, "f": 0.7}}, False),
    ("aime-0007", 8, 0.375, 11800, {"total": {"a": 9000.0, "b": 14000.0, "f": 0.6},
                                    "reasoning": {"a": 8500.0, "b": 13000.0, "f": 0.7}}, False),
    ("gsm8k-0099", 8, 1.0, 1500, {"total": {"a": 1200.0, "b": 2400.0, "f": 0.9}}, True),
]


def _lengths(rng: random.Random, typical: float) -> tuple[int, int]:
    reasoning = int(rng.lognormvariate(0, 0.35) * typical)
    answer = int(rng.lognormvariate(0, 0.5) * max(60.0, typical * 0.08))
    return reasoning, answer


def _profiled(rng: random.Random, typical: float, accuracy: float) -> dict:
    rewards = [1 if rng.random() < max(accuracy, 0.3) else 0 for _ in range(8)]
    lengths = [int(rng.lognormvariate(0, 0.25) * typical * 1.1) for _ in range(8)]
    return {"reward": rewards, "length": lengths}


def flat_rows(rng: random.Random) -> list[dict]:
    rows = []
    for pid, size, acc, typical, band, low_effort in GROUPS:
        correct = round(acc * size)
        rewards = [1] * correct + [0] * (size - correct)
        rng.shuffle(rewards)
        profiled = _profiled(rng, typical, acc) if band is not None else None
        for k in range(size):
            reasoning, answer = _lengths(rng, typical * (1.15 if rewards[k] == 0 else 1.0))
            rows.append({
                "prompt_id": pid, "sample": k, "reward": rewards[k], "reasoning": reasoning, "answer": answer,
                "low_effort": low_effort and k == 0, "profile_band": band, "profiled": profiled,
                **_example_columns(reasoning + answer, low_effort and k == 0, band, profiled),
            })
    return rows


def _example_columns(length: int, flagged: bool, band: dict | None, profiled: dict | None) -> dict:
    """The columns examples/*.shape and the stdlib's length shapers read, derived without drawing."""
    history = None if profiled is None else {"passed": [r > 0 for r in profiled["reward"]],
                                             "length": profiled["length"]}
    return {"length": length, "flagged": flagged, "budget_band": None if band is None else band["total"],
            "history": history}


def _text(rng: random.Random, chars: int) -> str:
    out = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def nemo_gym_rows(rng: random.Random) -> list[dict]:
    """Four prompts of GYM_GROUP rollouts; lengths here are characters (NeMo-RL without a tokenizer)."""
    rows = []
    for pid, _, acc, typical, band, low_effort in GROUPS[:4]:
        profiled = _profiled(rng, typical, acc) if band is not None else None
        for k in range(GYM_GROUP):
            reward = 1.0 if rng.random() < max(acc, 0.25) else 0.0
            reasoning, answer = _lengths(rng, typical / 4)
            output = [
                {"type": "reasoning", "id": f"rs_{pid}_{k}",
                 "summary": [{"type": "summary_text", "text": _text(rng, reasoning)}]},
                {"type": "message", "role": "assistant", "id": f"msg_{pid}_{k}",
                 "content": [{"type": "output_text", "text": _text(rng, answer)}]},
            ]
            row = {
                "prompt_id": pid,
                "responses_create_params": {"input": [{"role": "user", "content": f"Solve problem {pid}."}]},
                "agent_ref": {"name": "math_with_judge_simple_agent"},
                "full_result": {"reward": reward, "response": {"output": output}},
                "low_effort_applied": low_effort,
            }
            if band is not None:
                row["profile_band"] = {ch: {k2: v / 4 if k2 != "f" else v for k2, v in b.items()}
                                       for ch, b in band.items()}
                row["profiled_rewards"] = profiled["reward"]
                row["profiled_output_lengths"] = [x // 4 for x in profiled["length"]]
            rows.append(row)
    return rows


GYM_GROUP = 8  # rollouts per prompt, as the bundled config's num_generations_per_prompt

CONFIG = """\
# A NeMo-RL config block, accepted as it is by `shapec run --config`.
grpo:
  num_generations_per_prompt: 8
  length_penalty:
    default:
      enabled: true
      length_type: tokens
      longest_total_penalty: 0.1
      group_total_length_penalty_coeff: 0.2
      group_length_penalty_profile_gate: true
      profiled_length_penalty: 0.1
      profile_band_total: true
"""


def main() -> None:
    rng = random.Random(SEED)
    with open(HERE / "rollouts.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in flat_rows(rng))
    with open(HERE / "nemo_gym_rollouts.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in nemo_gym_rows(rng))
    (HERE / "nemo_rl_config.yaml").write_text(CONFIG)


if __name__ == "__main__":
    main()
