"""`shapec run` on 10^6 rollouts (Parquet): throughput and peak RSS of the child process.

    python benchmarks/bench_run.py [--rows 1000000] [--group-size 8] [--chunk-rows 16384 65536 262144]
                                   [--backend numba] [--keep DIR]

Generates a flat-layout Parquet file (prompt_id, reward, reasoning, answer, low_effort and a
per-prompt profile_band), then runs `shapec run nemo_rl` on it once per chunk size, each in a
fresh process, and reports wall time, rows per second and the child's peak RSS (os.wait4's
rusage). A warm-up run on a small file fills the kernel cache first, so compile time is not
counted. Not a test: the figures go to docs/performance.md ("shapec run").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

PARAMS = ["--set", "longest_total_penalty=0.1", "--set", "group_total_length_penalty_coeff=0.2",
          "--set", "profile_band_total=true", "--set", "group_length_penalty_profile_gate=true"]


def make_rollouts(path: Path, rows: int, group_size: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    groups = rows // group_size
    n = groups * group_size
    gid = np.repeat(np.arange(groups), group_size)
    typical = np.repeat(rng.lognormal(8.0, 0.6, groups), group_size)
    reasoning = (typical * rng.lognormal(0, 0.35, n)).astype(np.int64)
    answer = (rng.lognormal(5.5, 0.5, n)).astype(np.int64)
    accuracy = np.repeat(rng.uniform(0, 1, groups), group_size)
    reward = (rng.uniform(0, 1, n) < accuracy).astype(np.int64)
    a = typical[::group_size] * 0.9
    band = pa.StructArray.from_arrays(
        [pa.StructArray.from_arrays([pa.array(a), pa.array(a * 1.8), pa.array(np.full(groups, 0.8))],
                                    names=["a", "b", "f"])], names=["total"])
    table = pa.table({
        "prompt_id": pa.array([f"p{g:07d}" for g in gid]),
        "reward": reward,
        "reasoning": reasoning,
        "answer": answer,
        "low_effort": np.zeros(n, dtype=bool),
        "profile_band": band.take(pa.array(gid)),
    })
    pq.write_table(table, path, row_group_size=65536)


def run_child(args: list[str], env: dict) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in MiB and stdout of one `shapec run` process."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "shapec.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"shapec run failed ({proc.returncode}):\n{err}")
    return wall, usage.ru_maxrss // 1024, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--chunk-rows", type=int, nargs="+", default=[16384, 65536, 262144])
    ap.add_argument("--backend", default="numba", choices=("numba", "interpreter"))
    ap.add_argument("--keep", help="directory for the generated files (default: a temporary one)")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="shapec-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SHAPEC_BACKEND": args.backend}
    try:
        data = work / "rollouts.parquet"
        t0 = time.perf_counter()
        make_rollouts(data, args.rows, args.group_size)
        print(f"generated {args.rows} rollouts in {time.perf_counter() - t0:.1f} s "
              f"({data.stat().st_size / 2**20:.1f} MiB Parquet)")
        small = work / "small.parquet"
        make_rollouts(small, 4096, args.group_size, seed=1)
        small_run = ["run", "nemo_rl", "--data", str(small), "--out", str(work / "small.out.parquet"), *PARAMS]
        cold, _, _ = run_child(small_run, env)  # fills the kernel cache if it is empty
        wall, baseline, _ = run_child(small_run, env)
        print(f"backend {args.backend}; a 4096-row run (start-up, imports, cached kernels): {wall:.2f} s, "
              f"peak RSS {baseline} MiB (the first run, which may have compiled: {cold:.1f} s)")
        print(f"{'chunk rows':>10}  {'wall s':>7}  {'rows/s':>10}  {'peak RSS MiB':>12}")
        for chunk in args.chunk_rows:
            wall, rss, out = run_child(["run", "nemo_rl", "--data", str(data), "--out", str(work / "shaped.parquet"),
                                        "--chunk-rows", str(chunk), *PARAMS], env)
            assert f"rows: {args.rows} in = {args.rows} out + 0 rejected" in out, out
            print(f"{chunk:>10}  {wall:>7.1f}  {args.rows / wall:>10,.0f}  {rss:>12}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
