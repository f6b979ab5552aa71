"""How far shapec's `nemo_rl.length_penalty` is from a hand-written numba kernel (benchmarks/hand_nemo_rl.py).

First checks, on random batches (every algorithm on or off, missing bands, empty profiles, graded
and low-effort groups, random gate settings), that the hand kernel's rewards, metrics, terms,
factors, skip and gate codes are bit-identical to the compiled shaper's. Then times, interleaved
in one process, the median of repeats of:

  hand      the hand kernel with a minimal validation of its inputs (finite rewards, finite
            non-negative lengths), breakdown off: the limit
  kernel    the generated kernel alone, on arguments prepared beforehand
  call      the whole call: shaper(rewards, group_size=..., channels=..., metadata=..., params=...,
            breakdown=False), as the drop-ins and trainer adapters make it; and with the breakdown,
            against the hand kernel with its breakdown
  hand call the hand kernel behind a call written by hand that checks what shapec's call checks
            (benchmarks/hand_call.py): the floor of a validated call, beside shapec's

at 512 x 16 and at 200,000 rollouts, and the per-call time on one group of 4. If NeMo-RL's own
module is importable (nemo_rl.utils.length_penalty; it is not part of this repository), its ratio
is printed too.

With --families, it then times the kernel alone against the hand kernel at 512 x 16 with one
algorithm family on at a time (and none, and all): where the gap is.

Run: python benchmarks/bench_limit.py [--check 300] [--repeat 30] [--families]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time

import numpy as np

import hand_nemo_rl as hand
import shapec
from hand_call import HandCall
from shapec.runtime.binder import make_batch
from shapec.runtime.params import validate_params
from shapec.runtime.shaper import CompiledShaper

ALL_ON = {"reasoning_bonus": 0.05, "answer_bonus": 0.05, "total_bonus": 0.05, "longest_reasoning_penalty": 0.05,
          "longest_answer_penalty": 0.05, "longest_total_penalty": 0.05,
          "group_reasoning_length_penalty_coeff": 0.05, "group_answer_length_penalty_coeff": 0.05,
          "group_total_length_penalty_coeff": 0.1, "reasoning_zmad_threshold": 2.5, "reasoning_zmad_penalty": 0.05,
          "answer_zmad_threshold": 2.5, "answer_zmad_penalty": 0.05, "total_zmad_threshold": 2.5,
          "total_zmad_penalty": 0.05, "profiled_length_penalty": 0.1, "profiled_length_min_samples": 2,
          "pass_rate_length_penalty_weight": 0.1, "profile_band_total": True, "profile_band_reasoning": True,
          "profile_band_answer": True, "group_length_penalty_profile_gate": True}


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


def families(shaper, repeat: int) -> None:
    """The kernel alone against the hand kernel (no breakdown), one algorithm family on at a time."""
    b = random_batch(np.random.default_rng(7), 512, 16)
    ha = hand_args(b)
    print("512 x 16, kernel alone / hand kernel, one algorithm family on:")
    for name, keys in FAMILIES.items():
        p = {k: ALL_ON[k] for k in keys}
        pv, gb = hand.param_vector(validate_params(shaper.ir, p))
        shaper = fresh(shaper)  # compiled for this family, as a run with these params would compile it
        fns = {"hand": lambda: run_hand(ha, pv, gb, False), "kernel": kernel_call(shaper, b, p)}
        for fn in fns.values():
            fn()
        t = interleaved(fns, repeat, 20)
        print(f"  {name:24} hand {t['hand'] * 1e6:8.1f} us | kernel {t['kernel'] * 1e6:8.1f} us | "
              f"{t['kernel'] / t['hand']:5.2f}x")


def fresh(shaper):
    """The same shaper with kernels of its own: its first call compiles (or finds in the cache) the
    kernel specialised for that call's params (compiler/specialize.py)."""
    return CompiledShaper(shaper.ir, "numba")


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
    """Binary rewards (some groups graded), lengths with zeros and ties, metadata often missing."""
    n = G * k
    rewards = (rng.random(n) < rng.choice([0.2, 0.6, 0.9])).astype(np.float64)
    graded = np.repeat(rng.random(G) < 0.05, k)
    rewards[graded] = np.round(rng.random(int(graded.sum())), 2)
    scale = rng.choice([5, 50, 6000])
    reasoning = rng.integers(0, scale, n).astype(np.float64)
    answer = rng.integers(0, max(2, scale // 5), n).astype(np.float64)
    low = np.repeat(rng.random(G) < 0.1, k).astype(np.float64)
    bands = {}
    for c, (lo, hi) in zip(("total", "reasoning", "answer"), ((0, 7000), (0, 6000), (0, 1200))):
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


def hand_args(b: dict) -> tuple:
    """The hand kernel's arrays: what a caller would hand it (bands as (3, G, 4) with a present column)."""
    G = len(b["rewards"]) // b["group_size"]
    bands = np.empty((3, G, 4))
    for c, name in enumerate(("total", "reasoning", "answer")):
        t = b["metadata"]["profile_band"][name]
        bands[c, :, :3] = t
        bands[c, :, 3] = (~np.isnan(t).all(axis=1)).astype(np.float64)
    prof = b["metadata"]["profiled"]
    ch = b["channels"]
    offsets = np.arange(0, len(b["rewards"]) + 1, b["group_size"], dtype=np.int64)
    return (b["rewards"], offsets, ch["reasoning"], ch["answer"], ch["low_effort"], bands,
            prof["offsets"], prof["reward"], prof["length"])


def run_hand(args: tuple, pv, gb, breakdown: bool):
    """The hand kernel with a minimal validation of its inputs."""
    rewards, offsets, reasoning, answer = args[:4]
    n, G = len(rewards), len(offsets) - 1
    if not (np.isfinite(rewards).all() and len(reasoning) == n and len(answer) == n
            and np.isfinite(reasoning).all() and np.isfinite(answer).all()
            and reasoning.min(initial=0) >= 0 and answer.min(initial=0) >= 0):
        raise ValueError("bad batch")
    out = np.empty(n)
    terms = np.zeros((12, n)) if breakdown else np.empty((12, 0))
    factors = np.ones((3, n)) if breakdown else np.empty((3, 0))
    skip = np.empty(G, np.int64)
    gates = np.empty((3, G), np.int64)
    metrics = np.empty(5)
    hand.length_penalty(*args, pv, gb, out, terms, factors, skip, gates, metrics, breakdown)
    return out, terms, factors, skip, gates, metrics


def same(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def check(shaper, trials: int, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    ir = shaper.ir
    for trial in range(trials):
        p = random_params(rng)
        b = random_batch(rng, int(rng.integers(1, 12)), int(rng.integers(1, 9)))
        res = shaper(b["rewards"], group_size=b["group_size"], channels=b["channels"], metadata=b["metadata"],
                     params=p)
        pv, gb = hand.param_vector(validate_params(ir, p))
        out, terms, factors, skip, gates, metrics = run_hand(hand_args(b), pv, gb, True)
        st = res.stages[0]
        checks = {"rewards": same(res.rewards, out), "skip": same(st.skip_codes, skip),
                  "metrics": same([st.metrics[m] for m, _ in ir.metrics], metrics),
                  "terms": same(np.array([st.terms[t] for t in ir.terms]), terms),
                  "factors": same(np.array([st.factors[f] for f in ir.factors]), factors),
                  "gates": same(np.array([st.gate_codes[g] for g in ir.gate_reasons]), gates)}
        hc = HandCall(ir)(b["rewards"], b["group_size"], b["channels"], b["metadata"], p)
        checks["hand call"] = (same(hc[0], out) and same(hc[1], skip) and same(hc[2], gates)
                               and hc[3] == st.metrics)
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise SystemExit(f"hand kernel differs from shapec on trial {trial} ({', '.join(bad)}); params {p}")
    print(f"check: hand kernel bit-identical to shapec on {trials} random batches "
          "(rewards, metrics, terms, factors, skip and gate codes; the hand call too)")


def kernel_call(shaper, b: dict, p: dict):
    """The generated kernel on arguments prepared beforehand, breakdown off (what the call adds is measured apart)."""
    kernel = shaper._kernels[0]
    batch = make_batch(shaper.ir, b["rewards"], group_size=b["group_size"], channels=b["channels"],
                       metadata=b["metadata"])
    fn, packed = shaper._bind(p).kernel_args(0, kernel, batch.groups)  # the kernel a call with these params runs
    values = kernel.arguments(batch, packed, {}, np.zeros((0, 0)))  # no state kept per prompt
    n, G = batch.n, batch.groups
    T, F, NG, M = kernel.sizes
    outs = (np.empty(n), np.empty((T, 0)), np.empty((F, 0)), np.empty(G, np.int64), np.empty((NG, G), np.int64),
            np.empty(M))
    return lambda: fn(*values, False, *outs)


def interleaved(fns: dict, repeat: int, inner: int) -> dict[str, float]:
    """Median over `repeat` rounds of each fn's mean time over `inner` calls, the fns taking turns."""
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times[k].append((time.perf_counter() - t0) / inner)
    return {k: statistics.median(v) for k, v in times.items()}


def nemo_rl_reference():
    """NeMo-RL's own pure-Python module, when it is installed (it is not part of this repository)."""
    if importlib.util.find_spec("nemo_rl") is None or importlib.util.find_spec("nemo_rl.utils.length_penalty") is None:
        return None
    import nemo_rl.utils.length_penalty as lp

    return lp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", type=int, default=300, help="random batches checked before timing")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--families", action="store_true", help="also time the kernel per algorithm family")
    args = ap.parse_args()
    shaper = shapec.load("nemo_rl", backend="numba").length_penalty
    check(shaper, args.check)  # random params: the specialised, the shared and the general kernel
    shaper = fresh(shaper)  # timed with ALL_ON, its first call's params
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; "
          f"medians of {args.repeat} interleaved rounds")
    p = {k: v for k, v in ALL_ON.items()}
    pv, gb = hand.param_vector(validate_params(shaper.ir, p))
    rng = np.random.default_rng(7)
    hand_call = HandCall(shaper.ir)
    for G, k, inner in ((512, 16, 20), (12_500, 16, 4), (1, 4, 2000)):
        b = random_batch(rng, G, k)
        ha = hand_args(b)
        fns = {
            "hand": lambda: run_hand(ha, pv, gb, False),
            "hand+breakdown": lambda: run_hand(ha, pv, gb, True),
            "kernel": kernel_call(shaper, b, p),
            "call": lambda: shaper(b["rewards"], group_size=k, channels=b["channels"], metadata=b["metadata"],
                                   params=p, breakdown=False),
            "call+breakdown": lambda: shaper(b["rewards"], group_size=k, channels=b["channels"],
                                             metadata=b["metadata"], params=p),
            "hand call": lambda: hand_call(b["rewards"], k, b["channels"], b["metadata"], p),
        }
        for fn in fns.values():
            fn()
        t = interleaved(fns, args.repeat, inner)
        print(f"{G} x {k} = {G * k} rollouts: hand {t['hand'] * 1e6:9.1f} us | "
              f"hand+breakdown {t['hand+breakdown'] / t['hand']:5.2f}x | kernel {t['kernel'] / t['hand']:5.2f}x | "
              f"call {t['call'] / t['hand']:5.2f}x ({t['call'] * 1e6:.1f} us) | "
              f"call+breakdown {t['call+breakdown'] / t['hand+breakdown']:5.2f}x of hand+breakdown | "
              f"hand call {t['hand call'] / t['hand']:5.2f}x ({t['hand call'] * 1e6:.1f} us), "
              f"call / hand call {t['call'] / t['hand call']:5.2f}x")
    if args.families:
        families(shaper, args.repeat)
    if nemo_rl_reference() is None:
        print("NeMo-RL's nemo_rl.utils.length_penalty is not installed here: no ratio to its pure-Python function")


if __name__ == "__main__":
    main()
