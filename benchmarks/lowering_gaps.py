"""Where the generated kernel of `nemo_rl.length_penalty` loses time to the hand kernel
(benchmarks/hand_nemo_rl.py) on bench_limit.py's heavy workload.

It takes the module shapec generates for the heavy params, rewrites it by hand the way a lowering
that fused more would write it, one finding per rewrite, checks that each rewrite gives the
original's outputs bit for bit on a heavy batch (breakdown included), and times the rewrites
interleaved with the original and the hand kernel (kernels alone, breakdown off):

  grouprel  group-relative scaling: the scaled values of all three channels and their means in
            one pass, the centring and the term in a second (4 passes and 3 more stored rows)
  profiled  the profiled list: count and sum in one item pass, the squares in a second (4 item
            passes today, a batch-sized flag array filled per call, the same selection copied
            twice, for std and for mean, and summed twice)
  blockadj  block_adjustment summed in term 10's own loop instead of a row of its own
  all       all three

(The top scorers, the three long lets and the selections of terms 0-5 in one pass was another,
`block`, until the lowering did it: the scheduler merges the `if`s of one gate, docs/lowering.md.
`tail`, the clamp and the three band factors in one pass, measured no faster and was dropped.)

Each rewrite matches the text today's lowering writes; one that no longer matches (the lowering
changed) is reported and left out.

Run: python benchmarks/lowering_gaps.py [--groups 512] [--repeat 31]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import tempfile
import textwrap

import numpy as np

import hand_nemo_rl as hand
import shapec
from bench_limit import interleaved, run_hand
from limit_workloads import HEAVY, hand_args, heavy_batch
from shapec.runtime.binder import make_batch
from shapec.runtime.params import validate_params


def cut(text: str, start: str, end: str, new: str) -> str:
    """text with the part from `start` up to (not including) `end` replaced by `new`; both begin a
    line, at their own indentation (a deeper copy of either is not them)."""
    a = text.index("\n" + start) + 1
    b = text.index("\n" + end, a) + 1
    return text[:a] + new + text[b:]


GREL = '''            lo_r = (nan if ksel14 == 0 else r29)
            hi_r = (nan if ksel14 == 0 else r28)
            lo_a = (nan if ksel16 == 0 else r35)
            hi_a = (nan if ksel16 == 0 else r34)
            lo_t = (nan if ksel18 == 0 else r41)
            hi_t = (nan if ksel18 == 0 else r40)
            for i in range(s, e):
                q_r = nan if isnan(lo_r) else (0.0 if hi_r == lo_r else (in0_reasoning[i] - lo_r) / (hi_r - lo_r))
                q_a = nan if isnan(lo_a) else (0.0 if hi_a == lo_a else (in1_answer[i] - lo_a) / (hi_a - lo_a))
                q_t = nan if isnan(lo_t) else (0.0 if hi_t == lo_t else (v0_total[i - s] - lo_t) / (hi_t - lo_t))
                r27[i - s] = q_r
                r33[i - s] = q_a
                r39[i - s] = q_t
                if (v2_right[i - s] == 1.0):
                    sel15 = (1.0 - q_r)
                    r31 = r31 or isnan(sel15)
                    r32 += sel15
                    ksel15 += 1
                    sel17 = (1.0 - q_a)
                    r37 = r37 or isnan(sel17)
                    r38 += sel17
                    ksel17 += 1
                    sel19 = (1.0 - q_t)
                    r43 = r43 or isnan(sel19)
                    r44 += sel19
                    ksel19 += 1
            mean_r = (nan if ksel15 == 0 or r31 else r32 / ksel15)
            mean_a = (nan if ksel17 == 0 or r37 else r38 / ksel17)
            mean_t = (nan if ksel19 == 0 or r43 else r44 / ksel19)
            for i in range(s, e):
                c_r = nan if isnan(mean_r) else (1.0 - r27[i - s]) - mean_r
                c_a = nan if isnan(mean_a) else (1.0 - r33[i - s]) - mean_a
                c_t = nan if isnan(mean_t) else (1.0 - r39[i - s]) - mean_t
                x = (((c_r * v15_coeff_reasoning) + (c_a * v16_coeff_answer)) + (c_t * v17_coeff_total))
                tv6[i - s] = x if ((v2_right[i - s] == 1.0)) and not isnan(x) else 0.0
'''

PROF = '''        # profiled, fused: one pass for the count and the sum, one for the squares
        if ((v1_full_effort == 1.0)):
            pc = 0
            psum = 0.0
            for j in range(lo0_profiled[g], lo0_profiled[g + 1]):
                if lf0_profiled_reward[j] > 0.0:
                    psum += lf1_profiled_length[j]
                    pc += 1
            v30_passing_count = float(pc)
            pmean = nan if pc == 0 else psum / pc
            r53 = nan
            if pc >= 2:
                ss = 0.0
                for j in range(lo0_profiled[g], lo0_profiled[g + 1]):
                    if lf0_profiled_reward[j] > 0.0:
                        d = lf1_profiled_length[j] - pmean
                        ss += d * d
                r53 = np.sqrt(ss / (pc - 1))
            v31_spread = (r53 if k_flag(v30_passing_count >= 2.0) == 1.0 else 0.0)
            v32_threshold = (pmean + (p16_profiled_length_n_std * v31_spread))
'''


def profiled(t: str) -> str:
    t = cut(t, "        # let v29_passing\n", "        # term 10\n", PROF)
    return t.replace("v29_passing = np.full(ni0_profiled, nan)", "v29_passing = np.full(0, nan)")


def blockadj(t: str) -> str:
    t = cut(t, "        # let v18_block_adjustment\n", "        # let v29_passing\n", "")
    return t.replace("((v18_block_adjustment[i - s] >= 0.0))", "(((((((((((tv0[i - s] + tv1[i - s]) + tv2[i - s])"
                     " + tv3[i - s]) + tv4[i - s]) + tv5[i - s]) + tv6[i - s]) + tv7[i - s]) + tv8[i - s])"
                     " + tv9[i - s]) >= 0.0))")


def grouprel(t: str) -> str:
    """GREL in place of term 6's three channels, at whatever depth the term's block is written."""
    found = re.search(r"\n( +)# selection sel14 for max/min \(running\)\n\1lo_ = ", t)
    if found is None:
        raise ValueError("term 6's selections not found")
    pad = found.group(1)
    new = textwrap.indent(GREL, " " * (len(pad) - 12))
    return cut(t, f"{pad}# selection sel14 for max/min (running)\n{pad}lo_ = ",
               f"{pad[:-4]}else:\n{pad}for i in range(s, e):\n{pad}    tv6[i - s] = 0.0", new)


REWRITES = {"grouprel": (grouprel,), "profiled": (profiled,), "blockadj": (blockadj,),
            "all": (blockadj, profiled, grouprel)}


def rewritten(src: str) -> dict[str, str]:
    out = {"original": src}
    for name, steps in REWRITES.items():
        t = src
        try:
            for step in steps:
                t = step(t)
        except ValueError:
            print(f"{name}: does not match today's generated code (the lowering changed?): left out")
            continue
        out[name] = t
    return out


def load_kernel(folder: str, name: str, text: str):
    path = os.path.join(folder, f"gap_{name}.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(f"gap_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel_s0_length_penalty


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=31)
    args = ap.parse_args()
    shaper = shapec.load("nemo_rl", backend="numba").length_penalty
    shaper.prepare(HEAVY)
    kernel = shaper._kernels[0]
    (fn,) = kernel.variants.values()
    with open(fn.py_func.__code__.co_filename) as f:
        src = f.read()
    b = heavy_batch(np.random.default_rng(7), args.groups, 16)
    batch = make_batch(shaper.ir, b["rewards"], group_size=16, channels=b["channels"], metadata=b["metadata"])
    packed = shaper._bind(HEAVY).kernel_args(0, kernel, batch.groups)[1]
    values = kernel.arguments(batch, packed, {}, np.zeros((0, 0)))
    n, G = batch.n, batch.groups
    T, F, NG, M = kernel.sizes

    def outs(keep: bool) -> tuple:
        return (np.empty(n), np.empty((T, n if keep else 0)), np.empty((F, n if keep else 0)),
                np.empty(G, np.int64), np.empty((NG, G), np.int64), np.empty(M))

    folder = tempfile.mkdtemp(prefix="shapec-gaps-")
    try:
        print(f"compiling {len(REWRITES) + 1} modules (a minute or two)")
        kernels = {name: load_kernel(folder, name, text) for name, text in rewritten(src).items()}
        ref = outs(True)
        kernels["original"](*values, True, *ref)
        for name, k in kernels.items():
            got = outs(True)
            k(*values, True, *got)
            if any(a.tobytes() != r.tobytes() for a, r in zip(got, ref)):
                raise SystemExit(f"{name}: outputs differ from the generated kernel's")
        print("every rewrite bit-identical to the generated kernel (rewards, terms, factors, skip, gates, metrics)")
        pv, gb = hand.param_vector(validate_params(shaper.ir, HEAVY))
        ha = hand_args(b)
        fns = {"hand": lambda: run_hand(ha, pv, gb, False)}
        for name, k in kernels.items():
            o = outs(False)
            fns[name] = lambda k=k, o=o: k(*values, False, *o)
        for f in fns.values():
            f()
        before = os.getloadavg()[0]
        t = interleaved(fns, args.repeat, max(1, 20 * 512 // args.groups))
        print(f"heavy workload, {args.groups} x 16, kernel alone, medians of {args.repeat} interleaved rounds "
              f"(load {before:.2f}, after {os.getloadavg()[0]:.2f}):")
        for name, v in t.items():
            print(f"  {name:9} {v * 1e6:9.1f} us | {v / t['hand']:5.2f}x hand | {v / t['original']:5.3f}x original")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
