"""Kernel benchmark: the numba kernel, the reference interpreter and a plain-Python loop, on one spec
with group reductions over three channels (min/max, mean/std and median).

    python benchmarks/bench_kernels.py            # 8,192 and 1,000,000 rollouts, compile and call costs
    python benchmarks/bench_kernels.py --quick    # skip the interpreter and Python loop at 1,000,000

Not part of the test suite. Every figure is one core except "parallel call", the same spec
compiled with parallel=True on all of numba's threads (NUMBA_NUM_THREADS, default: every core).
Results go in docs/performance.md under "Kernels".
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

SPEC = """
shaper three_channels(coeff: float >= 0 = 0.1, z_max: float = 1) requires binary produces nonneg {
  input reasoning: tokens
  input answer: tokens
  input tool: tokens
  gate right = reward > 0
  let rmin = min(reasoning where right)
  let rmax = max(reasoning where right)
  term reasoning_rel = -coeff * float(reasoning - rmin) / float(max(rmax - rmin, 1)) on right
  term answer_z = -coeff on right when (answer - mean(answer where right)) / std(answer where right) > z_max
  term tool_median = -coeff on right when tool > median(tool where right)
  clamp >= 0
}
"""
PARAMS = {"coeff": 0.2, "z_max": 1.0}


def python_loop(rewards, offsets, reasoning, answer, tool, coeff, z_max) -> list[float]:
    """The same spec, written as a plain Python loop over groups and rollouts."""
    out = list(rewards)
    for g in range(len(offsets) - 1):
        s, e = offsets[g], offsets[g + 1]
        if any(not (abs(r) <= 1e-6 or abs(r - 1.0) <= 1e-6) for r in rewards[s:e]):
            continue  # not binary: passed through
        right = [i for i in range(s, e) if rewards[i] > 0]
        if not right:
            continue
        rs = [reasoning[i] for i in right]
        rmin, rmax = min(rs), max(rs)
        ans = [answer[i] for i in right]
        mean = sum(ans) / len(ans)
        std = math.sqrt(sum((a - mean) ** 2 for a in ans) / (len(ans) - 1)) if len(ans) > 1 else math.nan
        tools = sorted(tool[i] for i in right)
        k = len(tools)
        median = tools[k // 2] if k % 2 else (tools[k // 2 - 1] + tools[k // 2]) / 2.0
        for i in right:
            t1 = -coeff * (reasoning[i] - rmin) / max(rmax - rmin, 1.0)
            z = (answer[i] - mean) / std if std == std and std != 0 else math.nan
            t2 = -coeff if z == z and z > z_max else 0.0
            t3 = -coeff if tool[i] > median else 0.0
            out[i] = max(rewards[i] + (t1 + t2 + t3), 0.0)
    return out


def make_batch(n: int, group_size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 2, n).astype(np.float64)
    channels = {c: rng.integers(0, 4000, n).astype(np.float64) for c in ("reasoning", "answer", "tool")}
    return rewards, channels


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def machine() -> str:
    model = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba

    return (f"{os.cpu_count()} CPUs ({model}), Linux {platform.release()}, Python {platform.python_version()}, "
            f"numba {numba.__version__}, NumPy {np.__version__}")


def subprocess_load(cache_dir: str) -> tuple[float, float, bool]:
    """In a new process: (seconds from start to a loaded shaper, seconds for the load after
    `import shapec`, whether numba got imported)."""
    code = textwrap.dedent(f"""
        import sys, time
        start = time.perf_counter()
        import shapec
        t = time.perf_counter()
        shaper = shapec.compile_str({SPEC!r}, backend="numba").three_channels.prepare()
        done = time.perf_counter()
        print(done - start, done - t, "numba" in sys.modules)
    """)
    env = {**os.environ, "SHAPEC_CACHE_DIR": cache_dir, "NUMBA_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    inside, load, numba_loaded = out.stdout.split()
    return float(inside), float(load), numba_loaded == "True"


def throughput(shaper_nb, shaper_par, shaper_in, n: int, group_size: int, slow: bool) -> dict:
    rewards, channels = make_batch(n, group_size)
    offsets = list(range(0, n + 1, group_size))
    kw = dict(group_size=group_size, channels=channels, params=PARAMS)
    shaped = shaper_nb(rewards, **kw).rewards
    row = {"n": n}
    repeat = 50 if n <= 100_000 else 5
    row["kernel_call"] = best_of(lambda: shaper_nb(rewards, **kw), repeat)
    assert np.array_equal(shaper_par(rewards, **kw).rewards, shaped)
    row["parallel_call"] = best_of(lambda: shaper_par(rewards, **kw), repeat)
    # the kernel alone, on arguments prepared once
    from shapec.runtime.binder import make_batch as mk

    ir = shaper_nb.ir
    batch = mk(None, rewards, group_size=group_size, channels=channels, inputs_needed=ir.inputs)
    kernel = shaper_nb._kernels[0]
    fn, packed = shaper_nb._bind(PARAMS).kernel_args(0, kernel, batch.groups)
    row["kernel_only"] = best_of(lambda: kernel.run(fn, batch, packed, {}, True), repeat)
    if slow:
        row["interpreter"] = best_of(lambda: shaper_in(rewards, **kw), 1 if n > 100_000 else 3)
        lists = [rewards.tolist(), offsets, channels["reasoning"].tolist(), channels["answer"].tolist(),
                 channels["tool"].tolist()]
        t = time.perf_counter()
        expected = python_loop(*lists, PARAMS["coeff"], PARAMS["z_max"])
        row["python_loop"] = time.perf_counter() - t
        np.testing.assert_allclose(shaped, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(shaper_in(rewards, **kw).rewards, shaped, rtol=1e-12, atol=1e-12)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the slow backends at 1,000,000 rollouts")
    args = ap.parse_args()
    print(machine(), f"numba threads for the parallel kernel: {os.environ.get('NUMBA_NUM_THREADS', os.cpu_count())}")

    with tempfile.TemporaryDirectory() as cache_dir:
        _, cold_load, _ = subprocess_load(cache_dir)
        warm_wall, warm_load, _ = subprocess_load(cache_dir)
        os.environ["SHAPEC_CACHE_DIR"] = cache_dir
        import shapec

        shaper_nb = shapec.compile_str(SPEC, backend="numba").three_channels
        shaper_in = shapec.compile_str(SPEC, backend="interpreter").three_channels
        shaper_par = shapec.compile_str(SPEC, backend="numba", parallel=True).three_channels
        print(f"cold compile (empty cache, new process): {cold_load:.2f} s")
        print(f"warm load (cache hit, new process):      {warm_load:.3f} s after `import shapec`, "
              f"{warm_wall:.3f} s from process start including imports")

        tiny_r, tiny_c = make_batch(4, 4)
        kw = dict(group_size=4, channels=tiny_c, params=PARAMS)
        for _ in range(200):
            shaper_nb(tiny_r, **kw)
        calls = 5000
        t = time.perf_counter()
        for _ in range(calls):
            shaper_nb(tiny_r, **kw)
        per_call = (time.perf_counter() - t) / calls
        print(f"per-call overhead (1 group of 4, full CompiledShaper call): {per_call * 1e6:.1f} us")

        for n, slow in ((8192, True), (1_000_000, not args.quick)):
            row = throughput(shaper_nb, shaper_par, shaper_in, n, 16, slow)
            print(f"\n{n:,} rollouts ({n // 16:,} groups of 16)")
            for key in ("kernel_only", "kernel_call", "parallel_call", "interpreter", "python_loop"):
                if key in row:
                    print(f"  {key:12s} {row[key] * 1e3:10.2f} ms  {n / row[key] / 1e6:10.2f} M rollouts/s")
            if slow:
                print(f"  kernel call vs Python loop: {row['python_loop'] / row['kernel_call']:.0f}x "
                      f"(parallel {row['python_loop'] / row['parallel_call']:.0f}x); "
                      f"vs interpreter: {row['interpreter'] / row['kernel_call']:.0f}x")


if __name__ == "__main__":
    main()
