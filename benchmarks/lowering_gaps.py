"""Where the generated kernel of `nemo_rl.length_penalty` loses time to the hand kernel
(benchmarks/hand_nemo_rl.py) on bench_limit.py's heavy workload.

It takes the module shapec generates for the heavy params, rewrites it by hand the way a lowering
that fused more would write it, one finding per rewrite, checks that each rewrite gives the
original's outputs bit for bit on a heavy batch (breakdown included), and times the rewrites
interleaved with the original and the hand kernel (kernels alone, breakdown off):

  block     the top scorers, the three long lets and the selections of terms 0-5 in one pass
            (13 rollout passes today, each in its own `if` of the same group condition, which
            loop fusion does not look into)
  tail      the clamp and the three band factors in one pass (4 passes, one `if` per factor)
  grouprel  group-relative scaling: the scaled values of all three channels and their means in
            one pass, the centring and the term in a second (4 passes and 3 more stored rows)
  profiled  the profiled list: count and sum in one item pass, the squares in a second (4 item
            passes today, a batch-sized flag array filled per call, the same selection copied
            twice, for std and for mean, and summed twice)
  blockadj  block_adjustment summed in term 10's own loop instead of a row of its own
  all       all five

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

import numpy as np

import hand_nemo_rl as hand
import shapec
from bench_limit import interleaved, run_hand
from limit_workloads import HEAVY, hand_args, heavy_batch
from shapec.runtime.binder import make_batch
from shapec.runtime.params import validate_params


def cut(text: str, start: str, end: str, new: str) -> str:
    """text with the part from `start` up to (not including) `end` replaced by `new`."""
    a = text.index(start)
    b = text.index(end, a)
    return text[:a] + new + text[b:]


BLOCK = '''        # the block, fused: top scorers, the long lets and the selections of terms 0-5 in one pass
        if ((v3_block == 1.0)):
            ksel3 = 0
            isel1 = 0
            r6 = nan
            ksel4 = 0
            isel2 = 0
            r8 = nan
            ksel5 = 0
            isel3 = 0
            r10 = nan
            r12 = 0.0
            ksel7 = 0
            isel4 = 0
            r14 = nan
            r16 = 0.0
            ksel9 = 0
            isel5 = 0
            r18 = nan
            r20 = 0.0
            ksel11 = 0
            isel6 = 0
            r22 = nan
            for i in range(s, e):
                ts = k_and(v2_right[i - s], k_cmp(5, rewards[i], v4_top))
                v5_top_scorer[i - s] = ts
                lr = k_and(ts, k_flag(in0_reasoning[i] > 0.0))
                la = k_and(ts, k_flag(in1_answer[i] > 0.0))
                lt = k_and(ts, k_flag(v0_total[i - s] > 0.0))
                v6_long_reasoning[i - s] = lr
                v7_long_answer[i - s] = la
                v8_long_total[i - s] = lt
                if ((v2_right[i - s] == 1.0) and (in0_reasoning[i] > 0.0)):
                    sel3 = in0_reasoning[i]
                    isel1 = np.int64(i - s) if ksel3 == 0 or sel3 < r6 else isel1
                    r6 = sel3 if ksel3 == 0 or sel3 < r6 else r6
                    ksel3 += 1
                if ((v2_right[i - s] == 1.0) and (in1_answer[i] > 0.0)):
                    sel4 = in1_answer[i]
                    isel2 = np.int64(i - s) if ksel4 == 0 or sel4 < r8 else isel2
                    r8 = sel4 if ksel4 == 0 or sel4 < r8 else r8
                    ksel4 += 1
                if ((v2_right[i - s] == 1.0) and (v0_total[i - s] > 0.0)):
                    sel5 = v0_total[i - s]
                    isel3 = np.int64(i - s) if ksel5 == 0 or sel5 < r10 else isel3
                    r10 = sel5 if ksel5 == 0 or sel5 < r10 else r10
                    ksel5 += 1
                r12 = r12 + 1.0 if lr == 1.0 else r12
                if (lr == 1.0):
                    sel7 = in0_reasoning[i]
                    isel4 = np.int64(i - s) if ksel7 == 0 or sel7 > r14 else isel4
                    r14 = sel7 if ksel7 == 0 or sel7 > r14 else r14
                    ksel7 += 1
                r16 = r16 + 1.0 if la == 1.0 else r16
                if (la == 1.0):
                    sel9 = in1_answer[i]
                    isel5 = np.int64(i - s) if ksel9 == 0 or sel9 > r18 else isel5
                    r18 = sel9 if ksel9 == 0 or sel9 > r18 else r18
                    ksel9 += 1
                r20 = r20 + 1.0 if lt == 1.0 else r20
                if (lt == 1.0):
                    sel11 = v0_total[i - s]
                    isel6 = np.int64(i - s) if ksel11 == 0 or sel11 > r22 else isel6
                    r22 = sel11 if ksel11 == 0 or sel11 > r22 else r22
                    ksel11 += 1
                tv0[i - s] = 0.0
                tv1[i - s] = 0.0
                tv2[i - s] = 0.0
                tv3[i - s] = 0.0
                tv4[i - s] = 0.0
                tv5[i - s] = 0.0
            at0 = k_at((nan if ksel3 == 0 else float(isel1)), e - s)
            if at0 >= 0:
                i = s + np.uint64(at0)
                x = p1_reasoning_bonus
                tv0[i - s] = x if (True) and ((rewards[i] >= v4_top)) and not isnan(x) else 0.0
            at1 = k_at((nan if ksel4 == 0 else float(isel2)), e - s)
            if at1 >= 0:
                i = s + np.uint64(at1)
                x = p2_answer_bonus
                tv1[i - s] = x if (True) and ((rewards[i] >= v4_top)) and not isnan(x) else 0.0
            at2 = k_at((nan if ksel5 == 0 else float(isel3)), e - s)
            if at2 >= 0:
                i = s + np.uint64(at2)
                x = p3_total_bonus
                tv2[i - s] = x if (True) and ((rewards[i] >= v4_top)) and not isnan(x) else 0.0
            at3 = k_at((nan if ksel7 == 0 else float(isel4)), e - s)
            if r12 >= 2.0 and at3 >= 0:
                i = s + np.uint64(at3)
                x = (-p4_longest_reasoning_penalt)
                tv3[i - s] = x if (True) and not isnan(x) else 0.0
            at4 = k_at((nan if ksel9 == 0 else float(isel5)), e - s)
            if r16 >= 2.0 and at4 >= 0:
                i = s + np.uint64(at4)
                x = (-p5_longest_answer_penalty)
                tv4[i - s] = x if (True) and not isnan(x) else 0.0
            at5 = k_at((nan if ksel11 == 0 else float(isel6)), e - s)
            if r20 >= 2.0 and at5 >= 0:
                i = s + np.uint64(at5)
                x = (-p6_longest_total_penalty)
                tv5[i - s] = x if (True) and not isnan(x) else 0.0
        else:
            for i in range(s, e):
                tv0[i - s] = 0.0
                tv1[i - s] = 0.0
                tv2[i - s] = 0.0
                tv3[i - s] = 0.0
                tv4[i - s] = 0.0
                tv5[i - s] = 0.0
'''

TAIL = '''        # clamp and factors, fused
        pb = min(g, param_bands.shape[1] - 1)
        if guard13:
            own = bd1_profile_bandreasoning[g, 3] == 1.0
            band20 = bd1_profile_bandreasoning[g, 0] if own else param_bands[1, pb, 0]
            band21 = bd1_profile_bandreasoning[g, 1] if own else param_bands[1, pb, 1]
            band22 = bd1_profile_bandreasoning[g, 2] if own else param_bands[1, pb, 2]
            band23 = bd1_profile_bandreasoning[g, 3] if own else param_bands[1, pb, 3]
        if guard14:
            own = bd2_profile_bandanswer[g, 3] == 1.0
            band32 = bd2_profile_bandanswer[g, 0] if own else param_bands[2, pb, 0]
            band33 = bd2_profile_bandanswer[g, 1] if own else param_bands[2, pb, 1]
            band34 = bd2_profile_bandanswer[g, 2] if own else param_bands[2, pb, 2]
            band35 = bd2_profile_bandanswer[g, 3] if own else param_bands[2, pb, 3]
        for i in range(s, e):
            r_ = rewards[i] + (tv0[i - s] + tv1[i - s] + tv2[i - s] + tv3[i - s] + tv4[i - s] + tv5[i - s]
                               + tv6[i - s] + tv7[i - s] + tv8[i - s] + tv9[i - s] + tv10[i - s] + tv11[i - s])
            r_ = 0.0 if r_ < 0.0 else r_
            b_ = r_
            if guard12:
                m = k_band(v0_total[i - s], band8, band9, band10, band11)
                applied = ((v2_right[i - s] == 1.0)) and not isnan(m) and b_ > 0.0
                fv0[i - s] = m if applied else 1.0
                r_ = r_ * m if applied else r_
            else:
                fv0[i - s] = 1.0
            if guard13:
                m = k_band(in0_reasoning[i], band20, band21, band22, band23)
                applied = ((v2_right[i - s] == 1.0)) and not isnan(m) and b_ > 0.0
                fv1[i - s] = m if applied else 1.0
                r_ = r_ * m if applied else r_
            else:
                fv1[i - s] = 1.0
            if guard14:
                m = k_band(in1_answer[i], band32, band33, band34, band35)
                applied = ((v2_right[i - s] == 1.0)) and not isnan(m) and b_ > 0.0
                fv2[i - s] = m if applied else 1.0
                r_ = r_ * m if applied else r_
            else:
                fv2[i - s] = 1.0
            run[i - s] = r_
'''

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


def tail(t: str) -> str:
    return cut(t, "        # clamp\n", "        # the group's rewards", TAIL)


def blockadj(t: str) -> str:
    t = cut(t, "        # let v18_block_adjustment\n", "        # let v29_passing\n", "")
    return t.replace("((v18_block_adjustment[i - s] >= 0.0))", "(((((((((((tv0[i - s] + tv1[i - s]) + tv2[i - s])"
                     " + tv3[i - s]) + tv4[i - s]) + tv5[i - s]) + tv6[i - s]) + tv7[i - s]) + tv8[i - s])"
                     " + tv9[i - s]) >= 0.0))")


def block(t: str) -> str:
    return cut(t, "        # gate v5_top_scorer\n",
               "        # gaterules v14_profile_gate\n        # selection sel12 for count (running)\n        r23 = r24",
               BLOCK)


def grouprel(t: str) -> str:
    return cut(t, "            # selection sel14 for max/min (running)\n            lo_ = ",
               "        else:\n            for i in range(s, e):\n                tv6[i - s] = 0.0", GREL)


REWRITES = {"block": (block,), "tail": (tail,), "grouprel": (grouprel,), "profiled": (profiled,),
            "blockadj": (blockadj,), "all": (blockadj, tail, profiled, block, grouprel)}


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
