"""How far shapec's `nemo_rl.length_penalty` is from a hand-written numba kernel (benchmarks/hand_nemo_rl.py).

Two workloads (limit_workloads.py): `mixed`, random batches that reach every branch (every
algorithm on or off, missing bands, empty profiles, graded and low-effort groups, random gate
settings), and `heavy`, the common heavy run of issue #34 (all eight algorithms on, realistic
lengths, a band row on all three channels for every prompt as (G, 4) tables, 8 profiled rollouts
per prompt). For each, it first checks on random batches of that workload that the hand kernel's
rewards, metrics, terms, factors, skip and gate codes are bit-identical to the compiled shaper's
(the heavy check runs the kernel specialised for the heavy params, the one timed). Then it times,
interleaved in one process, the median of repeats of:

  hand      the hand kernel with a minimal validation of its inputs (finite rewards, finite
            non-negative lengths): the limit; with and without its breakdown
  kernel    the generated kernel alone, on arguments prepared beforehand, breakdown off
  call      the whole call: shaper(rewards, group_size=..., channels=..., metadata=..., params=...,
            breakdown=False), as the drop-ins and trainer adapters make it; and with the breakdown
  hand call the hand kernel behind a call written by hand that checks what shapec's call checks
            (benchmarks/hand_call.py): the floor of a validated call, beside shapec's; with and
            without the breakdown

at 512 x 16 and at 12,500 x 16 (200,000) rollouts, and the per-call time on one group of 4. If
NeMo-RL's own module is importable (nemo_rl.utils.length_penalty; it is not part of this
repository), that is said too.

With --families, it then times the kernel alone against the hand kernel at 512 x 16 with one
algorithm family on at a time (and none, and all), after checking each family's kernel against the
hand kernel on that batch, and what each family adds to the run with all eight on (all against all
but that family, for each kernel). The hand kernel is one kernel for every params (it tests each
family's params per group and always pays its shared passes: the first pass, zeroing its term
rows, the top reward's sort, the last pass), while each generated variant is compiled for its
params, so with one family on the generated kernel is far ahead; "all", and what each family adds
to it, are the like-for-like figures.

Run: python benchmarks/bench_limit.py [--workload mixed|heavy|both] [--check 300] [--repeat 30] [--families]
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
from limit_workloads import ALL_ON, FAMILIES, HEAVY, hand_args, heavy_batch, random_batch, random_params
from shapec.runtime.binder import make_batch
from shapec.runtime.params import validate_params
from shapec.runtime.shaper import CompiledShaper

SIZES = ((512, 16, 20), (12_500, 16, 4), (1, 4, 2000))  # groups, group size, calls per timed round


def batch_for(workload: str, rng: np.random.Generator, G: int, k: int) -> dict:
    return heavy_batch(rng, G, k) if workload == "heavy" else random_batch(rng, G, k)


def fresh(shaper):
    """The same shaper with kernels of its own: its first call compiles (or finds in the cache) the
    kernel specialised for that call's params (compiler/specialize.py)."""
    return CompiledShaper(shaper.ir, "numba")


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


def differences(shaper, b: dict, p: dict) -> list[str]:
    """What the hand kernel (and the hand call) gives differently from the shaper on batch b."""
    ir = shaper.ir
    res = shaper(b["rewards"], group_size=b["group_size"], channels=b["channels"], metadata=b["metadata"], params=p)
    pv, gb = hand.param_vector(validate_params(ir, p))
    out, terms, factors, skip, gates, metrics = run_hand(hand_args(b), pv, gb, True)
    st = res.stages[0]
    checks = {"rewards": same(res.rewards, out), "skip": same(st.skip_codes, skip),
              "metrics": same([st.metrics[m] for m, _ in ir.metrics], metrics),
              "terms": same(np.array([st.terms[t] for t in ir.terms]), terms),
              "factors": same(np.array([st.factors[f] for f in ir.factors]), factors),
              "gates": same(np.array([st.gate_codes[g] for g in ir.gate_reasons]), gates)}
    hc = HandCall(ir)(b["rewards"], b["group_size"], b["channels"], b["metadata"], p, breakdown=True)
    checks["hand call"] = (same(hc[0], out) and same(hc[1], skip) and same(hc[2], gates) and hc[3] == st.metrics
                           and all(same(hc[4][t], st.terms[t]) for t in ir.terms)
                           and all(same(hc[5][f], st.factors[f]) for f in ir.factors))
    return [k for k, ok in checks.items() if not ok]


def check(shaper, workload: str, trials: int, seed: int = 1) -> None:
    """mixed: random params and batches (the specialised, the shared and the general kernel);
    heavy: the heavy params on heavy batches of random sizes, 10% of band rows marked absent."""
    rng = np.random.default_rng(seed)
    for trial in range(trials):
        G, k = int(rng.integers(1, 40)), int(rng.integers(1, 17))
        if workload == "heavy":
            p, b = HEAVY, heavy_batch(rng, G, k, absent=0.1)
        else:
            p, b = random_params(rng), random_batch(rng, G % 11 + 1, k % 8 + 1)
        bad = differences(shaper, b, p)
        if bad:
            raise SystemExit(f"hand kernel differs from shapec on {workload} trial {trial} ({', '.join(bad)}); "
                             f"params {p}")
    print(f"{workload} check: hand kernel bit-identical to shapec on {trials} random batches "
          "(rewards, metrics, terms, factors, skip and gate codes; the hand call too, with its breakdown)")


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


def load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def timings(shaper, workload: str, p: dict, repeat: int) -> None:
    """Hand, kernel, call and hand call, with and without the breakdown, at each of SIZES."""
    pv, gb = hand.param_vector(validate_params(shaper.ir, p))
    rng = np.random.default_rng(7)
    hand_call = HandCall(shaper.ir)
    print(f"{workload} workload, medians of {repeat} interleaved rounds on {os.cpu_count()} cores:")
    for G, k, inner in SIZES:
        b = batch_for(workload, rng, G, k)
        ha = hand_args(b)
        r, ch, md = b["rewards"], b["channels"], b["metadata"]
        fns = {
            "hand": lambda: run_hand(ha, pv, gb, False),
            "hand+bd": lambda: run_hand(ha, pv, gb, True),
            "kernel": kernel_call(shaper, b, p),
            "call": lambda: shaper(r, group_size=k, channels=ch, metadata=md, params=p, breakdown=False),
            "call+bd": lambda: shaper(r, group_size=k, channels=ch, metadata=md, params=p),
            "hand call": lambda: hand_call(r, k, ch, md, p),
            "hand call+bd": lambda: hand_call(r, k, ch, md, p, breakdown=True),
        }
        for fn in fns.values():
            fn()
        before = load()
        t = interleaved(fns, repeat, inner)
        us = {name: f"{v * 1e6:.1f} us" for name, v in t.items()}
        print(f"  {G} x {k} = {G * k} rollouts ({before}; after: {load()})\n"
              f"    breakdown off: hand {us['hand']} | kernel {t['kernel'] / t['hand']:5.2f}x | "
              f"call {t['call'] / t['hand']:5.2f}x ({us['call']}) | hand call {t['hand call'] / t['hand']:5.2f}x "
              f"({us['hand call']}) | call / hand call {t['call'] / t['hand call']:5.2f}x\n"
              f"    breakdown on:  hand {us['hand+bd']} | call {t['call+bd'] / t['hand+bd']:5.2f}x "
              f"({us['call+bd']}) | hand call {t['hand call+bd'] / t['hand+bd']:5.2f}x ({us['hand call+bd']}) | "
              f"call / hand call {t['call+bd'] / t['hand call+bd']:5.2f}x")


def families(shaper, workload: str, repeat: int) -> None:
    """The kernel alone against the hand kernel (no breakdown), one algorithm family on at a time,
    and what each family adds to the run with all eight on: all against all but that family, the
    hand kernel's and the generated kernel's (each kernel first checked against the hand kernel on
    the batch timed)."""
    b = batch_for(workload, np.random.default_rng(7), 512, 16)
    ha = hand_args(b)
    base = HEAVY if workload == "heavy" else ALL_ON

    def pair(p: dict) -> tuple:
        """(hand, kernel) timed callables for params p, the kernel compiled and checked for them."""
        pv, gb = hand.param_vector(validate_params(shaper.ir, p))
        own = fresh(shaper)  # compiled for these params, as a run with them would compile it
        bad = differences(own, b, p)
        if bad:
            raise SystemExit(f"{sorted(p)}: hand kernel differs from shapec ({', '.join(bad)})")
        return (lambda: run_hand(ha, pv, gb, False)), kernel_call(own, b, p)

    every = pair(base)
    print(f"{workload} workload, 512 x 16, no breakdown ({load()}): one family on (kernel / hand), "
          "and what the family adds to all eight on (all - all but it)")
    for name, keys in FAMILIES.items():
        alone = pair({key: v for key, v in base.items() if key in keys or key not in ALL_ON})
        but = pair({key: v for key, v in base.items() if key not in keys}) if name not in ("nothing", "all") else None
        fns = {"hand": alone[0], "kernel": alone[1]}
        if but:
            fns |= {"hand all": every[0], "kernel all": every[1], "hand but": but[0], "kernel but": but[1]}
        for fn in fns.values():
            fn()
        t = interleaved(fns, repeat, 20)
        line = (f"  {name:24} hand {t['hand'] * 1e6:7.1f} us | kernel {t['kernel'] * 1e6:7.1f} us | "
                f"{t['kernel'] / t['hand']:5.2f}x")
        if but:
            line += (f" | adds: hand {(t['hand all'] - t['hand but']) * 1e6:6.1f} us, "
                     f"kernel {(t['kernel all'] - t['kernel but']) * 1e6:6.1f} us")
        print(line)


def nemo_rl_reference():
    """NeMo-RL's own pure-Python module, when it is installed (it is not part of this repository)."""
    if importlib.util.find_spec("nemo_rl") is None or importlib.util.find_spec("nemo_rl.utils.length_penalty") is None:
        return None
    import nemo_rl.utils.length_penalty as lp

    return lp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=("mixed", "heavy", "both"), default="both")
    ap.add_argument("--check", type=int, default=300, help="random batches checked before timing, per workload")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--families", action="store_true", help="also time the kernel per algorithm family")
    args = ap.parse_args()
    shaper = shapec.load("nemo_rl", backend="numba").length_penalty
    for workload in ("mixed", "heavy") if args.workload == "both" else (args.workload,):
        p = HEAVY if workload == "heavy" else ALL_ON
        if workload == "mixed":
            check(shaper, workload, args.check)  # random params: the specialised, the shared and the general kernel
        shaper = fresh(shaper)
        shaper.prepare(p)  # timed with p: its kernel is the one its first call compiles
        if workload == "heavy":
            check(shaper, workload, args.check)
        timings(shaper, workload, p, args.repeat)
        if args.families:
            families(shaper, workload, args.repeat)
    if nemo_rl_reference() is None:
        print("NeMo-RL's nemo_rl.utils.length_penalty is not installed here: no ratio to its pure-Python function")


if __name__ == "__main__":
    main()
