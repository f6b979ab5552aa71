"""The params and batches bench_limit.py checks and times `nemo_rl.length_penalty` on.

Two workloads:

  mixed  random batches that reach every branch: each algorithm on or off, lengths at three
         scales (tiny, small, realistic), graded and low-effort groups, band rows and profiled
         lists often missing or empty. Good for the bit-identity check, light on the algorithms
         that read metadata (many groups skip them).
  heavy  the common heavy run (issue #34): every algorithm on (ALL_ON, with the defaults
         top_percentile 0.5, n_std 1 and the profile gate on channel total, field a, positive only),
         reasoning 200-6000 and answer 20-1000 characters, 60% correct, no low-effort group, a band
         row on all three channels for every prompt given as (G, 4) tables [a, b, f, present], and
         8 profiled rollouts per prompt as a flat {"offsets", "reward", "length"} list.
"""

from __future__ import annotations

import numpy as np

import hand_nemo_rl as hand

CHANNELS = ("total", "reasoning", "answer")

ALL_ON = {"reasoning_bonus": 0.05, "answer_bonus": 0.05, "total_bonus": 0.05, "longest_reasoning_penalty": 0.05,
          "longest_answer_penalty": 0.05, "longest_total_penalty": 0.05,
          "group_reasoning_length_penalty_coeff": 0.05, "group_answer_length_penalty_coeff": 0.05,
          "group_total_length_penalty_coeff": 0.1, "reasoning_zmad_threshold": 2.5, "reasoning_zmad_penalty": 0.05,
          "answer_zmad_threshold": 2.5, "answer_zmad_penalty": 0.05, "total_zmad_threshold": 2.5,
          "total_zmad_penalty": 0.05, "profiled_length_penalty": 0.1, "profiled_length_min_samples": 2,
          "pass_rate_length_penalty_weight": 0.1, "profile_band_total": True, "profile_band_reasoning": True,
          "profile_band_answer": True, "group_length_penalty_profile_gate": True}

# the heavy run's params: ALL_ON with the settings the issue names written out (they are the defaults)
HEAVY = ALL_ON | {"top_percentile": 0.5, "profiled_length_n_std": 1.0,
                  "group_length_penalty_profile_gate_channel": "total",
                  "group_length_penalty_profile_gate_field": "a",
                  "group_length_penalty_profile_gate_positive_only": True}
HEAVY_BANDS = {"total": (2500.0, 6000.0, 0.9), "reasoning": (2000.0, 5000.0, 0.9), "answer": (300.0, 900.0, 0.9)}
HEAVY_PROFILED = 8  # profiled rollouts per prompt

FAMILIES = {  # the params each NeMo-RL algorithm family turns on (from ALL_ON)
    "nothing": (),
    "shortest bonuses": ("reasoning_bonus", "answer_bonus", "total_bonus"),
    "longest penalties": ("longest_reasoning_penalty", "longest_answer_penalty", "longest_total_penalty"),
    "group-relative scaling": ("group_reasoning_length_penalty_coeff", "group_answer_length_penalty_coeff",
                               "group_total_length_penalty_coeff", "group_length_penalty_profile_gate"),
    "zMAD": ("reasoning_zmad_threshold", "reasoning_zmad_penalty", "answer_zmad_threshold", "answer_zmad_penalty",
             "total_zmad_threshold", "total_zmad_penalty"),
    "profiled threshold": ("profiled_length_penalty", "profiled_length_min_samples"),
    "profile bands": ("profile_band_total", "profile_band_reasoning", "profile_band_answer"),
    "pass-rate penalty": ("pass_rate_length_penalty_weight",),
    "all": tuple(ALL_ON),
}


def random_params(rng: np.random.Generator) -> dict:
    """Each algorithm on or off, random gate settings, global bands sometimes."""
    p = {k: (v if rng.random() < 0.6 else type(v)(0)) for k, v in ALL_ON.items()}
    p["profiled_length_min_samples"] = int(rng.integers(1, 5))
    p["profiled_length_n_std"] = float(rng.choice([0.0, 0.5, 1.0, 2.0]))
    p["top_percentile"] = float(rng.choice([0.0, 0.25, 0.5, 1.0]))
    p["enabled"] = bool(rng.random() < 0.9)
    p["group_length_penalty_profile_gate_channel"] = str(rng.choice(["total", "reasoning", "answer"]))
    p["group_length_penalty_profile_gate_field"] = str(rng.choice(["a", "b", "f"]))
    p["group_length_penalty_profile_gate_positive_only"] = bool(rng.random() < 0.7)
    for name in hand.BANDS:
        if rng.random() < 0.3:
            a = float(rng.integers(100, 3000))
            p[name] = (a, a + float(rng.integers(1, 4000)), float(rng.choice([0.0, 0.5, 0.9, 1.0])))
    return p


def random_batch(rng: np.random.Generator, G: int, k: int) -> dict:
    """The mixed workload: binary rewards (some groups graded), lengths with zeros and ties,
    metadata often missing, bands as (G, 3) tables (three NaNs: no band)."""
    n = G * k
    rewards = (rng.random(n) < rng.choice([0.2, 0.6, 0.9])).astype(np.float64)
    graded = np.repeat(rng.random(G) < 0.05, k)
    rewards[graded] = np.round(rng.random(int(graded.sum())), 2)
    scale = rng.choice([5, 50, 6000])
    reasoning = rng.integers(0, scale, n).astype(np.float64)
    answer = rng.integers(0, max(2, scale // 5), n).astype(np.float64)
    low = np.repeat(rng.random(G) < 0.1, k).astype(np.float64)
    bands = {}
    for c, (lo, hi) in zip(CHANNELS, ((0, 7000), (0, 6000), (0, 1200))):
        a = rng.integers(lo, hi, G).astype(np.float64)
        table = np.stack([a, a + rng.integers(1, 3000, G), rng.choice([0.0, 0.5, 0.9, 1.0], G)], axis=1)
        table[rng.random(G) < 0.3] = np.nan
        bands[c] = table
    sizes = rng.integers(0, 9, G)
    sizes[rng.random(G) < 0.2] = 0
    off = np.zeros(G + 1, np.int64)
    off[1:] = np.cumsum(sizes)
    m = int(off[-1])
    profiled = {"offsets": off, "reward": (rng.random(m) < 0.6).astype(np.float64),
                "length": rng.integers(1, scale + 2, m).astype(np.float64)}
    return {"rewards": rewards, "group_size": k,
            "channels": {"reasoning": reasoning, "answer": answer, "low_effort": low},
            "metadata": {"profile_band": bands, "profiled": profiled}}


def heavy_batch(rng: np.random.Generator, G: int, k: int, absent: float = 0.0) -> dict:
    """The heavy workload: a band row for every prompt on every channel as (G, 4) tables with a
    present column (`absent`: the fraction of rows marked absent, their a, b, f left as junk, for
    the check), and HEAVY_PROFILED profiled rollouts per prompt."""
    n = G * k
    rewards = (rng.random(n) < 0.6).astype(np.float64)
    reasoning = rng.integers(200, 6001, n).astype(np.float64)
    answer = rng.integers(20, 1001, n).astype(np.float64)
    bands = {}
    for c, row in HEAVY_BANDS.items():
        table = np.empty((G, 4))
        table[:] = (*row, 1.0)
        out = rng.random(G) < absent
        table[out, 3] = 0.0
        table[out, :3] = rng.choice([np.nan, -1.0, 7.0], (int(out.sum()), 3))
        bands[c] = table
    m = G * HEAVY_PROFILED
    profiled = {"offsets": np.arange(0, m + 1, HEAVY_PROFILED, dtype=np.int64),
                "reward": (rng.random(m) < 0.6).astype(np.float64),
                "length": (rng.integers(200, 6001, m) + rng.integers(20, 1001, m)).astype(np.float64)}
    return {"rewards": rewards, "group_size": k,
            "channels": {"reasoning": reasoning, "answer": answer, "low_effort": np.zeros(n)},
            "metadata": {"profile_band": bands, "profiled": profiled}}


def band_rows(table: np.ndarray) -> np.ndarray:
    """A (G, 3) table (three NaNs: absent) or a (G, 4) one (last column 1 or 0) as (G, 4) rows
    a, b, f, present, absent rows NaN, NaN, NaN, 0 (as shapec reads them)."""
    if table.shape[1] == 4:
        present = table[:, 3] == 1.0
    else:
        present = ~np.isnan(table).all(axis=1)
    rows = np.full((len(table), 4), np.nan)
    rows[:, 3] = present.astype(np.float64)
    rows[present, :3] = table[present, :3]
    return rows


def hand_args(b: dict) -> tuple:
    """The hand kernel's arrays: what a caller would hand it (bands as (3, G, 4) with a present column)."""
    bands = np.stack([band_rows(b["metadata"]["profile_band"][name]) for name in CHANNELS])
    prof = b["metadata"]["profiled"]
    ch = b["channels"]
    offsets = np.arange(0, len(b["rewards"]) + 1, b["group_size"], dtype=np.int64)
    return (b["rewards"], offsets, ch["reasoning"], ch["answer"], ch["low_effort"], bands,
            prof["offsets"], prof["reward"], prof["length"])
