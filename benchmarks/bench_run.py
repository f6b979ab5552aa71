"""`shapec run` on 10^6 rollouts (Parquet) against pyarrow plus the hand kernel, as whole processes.

    python benchmarks/bench_run.py [--rows 1000000] [--group-size 8] [--rounds 5] [--chunk 65536]
                                   [--chunk-rows 16384 65536 262144] [--backend numba] [--keep DIR]

Generates a flat-layout Parquet file (prompt_id, reward, reasoning, answer, low_effort and a
per-prompt profile_band), then:

1. checks that the baseline's shaped rewards equal `shapec run nemo_rl`'s bit for bit (and, with
   the breakdown on, every term and factor column of `shapec run --breakdown` too);
2. times, in fresh processes taking turns for --rounds rounds, `shapec run` and the baseline (and
   both with the breakdown), and prints the median wall time of each, the ratios and each child's
   peak RSS (os.wait4's rusage);
3. runs `shapec run` once per --chunk-rows and reports wall time, rows per second and peak RSS.

The baseline is this file's `baseline()` in a child process: it reads the same Parquet file with
pyarrow in chunks of the same size, finds the groups with pyarrow compute, builds the arrays of
benchmarks/hand_nemo_rl.py (as bench_limit.py's hand_args does), checks them as bench_limit.py's
run_hand does, calls the hand kernel and writes the input columns with the shaped reward and
env_reward (with --breakdown, the hand kernel's terms and factors too, the columns `shapec run
--breakdown` writes) to Parquet with pyarrow. Warm-up runs fill both kernel caches first (shapec's in
$SHAPEC_CACHE_DIR, numba's for the hand kernel in the work folder), so no compile is timed.
Not a test: the figures go to docs/performance.md ("shapec run").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARAMS = {"longest_total_penalty": 0.1, "group_total_length_penalty_coeff": 0.2, "profile_band_total": True,
          "group_length_penalty_profile_gate": True}
SETS = [a for k, v in PARAMS.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def make_rollouts(path: Path, rows: int, group_size: int, seed: int = 0) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

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


# ------------------------------------------------------------------------- the baseline (a child process)
def baseline(argv: list[str]) -> None:
    """pyarrow in, the hand kernel, pyarrow out: what `shapec run nemo_rl` does, written by hand."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    import hand_nemo_rl as hand

    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--chunk", type=int, required=True)
    ap.add_argument("--params", required=True, help=".npz with pv and gb (hand.param_vector)")
    ap.add_argument("--breakdown", help="JSON [terms, factors]: also write these columns")
    args = ap.parse_args(argv)
    prm = np.load(args.params)
    names = json.loads(args.breakdown) if args.breakdown else None
    writer = None
    last_key = None
    for batch in pq.ParquetFile(args.data).iter_batches(batch_size=args.chunk):
        table = pa.Table.from_batches([batch])
        n = table.num_rows
        keys = table.column("prompt_id").combine_chunks()
        if last_key is not None and keys[0].as_py() == last_key:
            raise SystemExit("a group crosses a chunk boundary: use a chunk size that the group size divides")
        last_key = keys[-1].as_py()
        starts = np.flatnonzero(pc.not_equal(keys[1:], keys[:-1]).to_numpy(zero_copy_only=False)) + 1
        offsets = np.concatenate([[0], starts, [n]]).astype(np.int64)
        G = len(offsets) - 1

        def floats(name):
            return table.column(name).to_numpy().astype(np.float64)

        rewards, reasoning, answer, low = floats("reward"), floats("reasoning"), floats("answer"), floats("low_effort")
        bands = np.full((3, G, 4), np.nan)
        bands[:, :, 3] = 0.0
        firsts = table.column("profile_band").combine_chunks().take(pa.array(offsets[:-1]))
        for c, channel in enumerate(("total", "reasoning", "answer")):
            if firsts.type.get_field_index(channel) >= 0:
                band = pc.struct_field(firsts, channel)
                present = band.is_valid().to_numpy(zero_copy_only=False)
                for k, f in enumerate("abf"):
                    bands[c, present, k] = pc.struct_field(band, f).to_numpy(zero_copy_only=False)[present]
                bands[c, present, 3] = 1.0
        if not (np.isfinite(rewards).all() and np.isfinite(reasoning).all() and np.isfinite(answer).all()
                and reasoning.min(initial=0) >= 0 and answer.min(initial=0) >= 0):
            raise SystemExit("bad batch")
        out = np.empty(n)
        terms = np.zeros((12, n)) if names else np.empty((12, 0))
        factors = np.ones((3, n)) if names else np.empty((3, 0))
        skip, gates, metrics = np.empty(G, np.int64), np.empty((3, G), np.int64), np.empty(5)
        hand.length_penalty(rewards, offsets, reasoning, answer, low, bands, np.zeros(G + 1, np.int64), np.zeros(0),
                            np.zeros(0), prm["pv"], prm["gb"], out, terms, factors, skip, gates, metrics, bool(names))
        env = table.column("reward")
        table = table.set_column(table.column_names.index("reward"), "reward", pa.array(out))
        table = table.append_column("env_reward", env)
        if names:
            for prefix, group, values in (("term", names[0], terms), ("factor", names[1], factors)):
                for name, column in zip(group, values):
                    table = table.append_column(f"{prefix}.{name}", pa.array(column))
        if writer is None:
            writer = pq.ParquetWriter(args.out, table.schema)
        writer.write_table(table)
    writer.close()
    print(f"rows: {pq.ParquetFile(args.out).metadata.num_rows} out")


# ------------------------------------------------------------------------- the parent
def run_child(cmd: list[str], env: dict) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in MiB (os.wait4's rusage) and stdout of one child process."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd[:6])} ... failed ({proc.returncode}):\n{err.read()}")
        return wall, usage.ru_maxrss // 1024, out.read()


def shapec_cmd(data: Path, out: Path, chunk: int, breakdown: bool = False) -> list[str]:
    return [sys.executable, "-m", "shapec.cli", "run", "nemo_rl", "--data", str(data), "--out", str(out),
            "--chunk-rows", str(chunk), "--no-progress", *SETS, *(["--breakdown"] if breakdown else [])]


def baseline_cmd(data: Path, out: Path, chunk: int, params: Path, breakdown: list | None) -> list[str]:
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_run; bench_run.baseline(sys.argv[1:])"
    extra = ["--breakdown", json.dumps(breakdown)] if breakdown else []
    return [sys.executable, "-c", code, str(data), str(out), "--chunk", str(chunk), "--params", str(params), *extra]


def helper(name: str, *args) -> str:
    """Run this file's function `name` in a child process and return what it prints: the parent
    imports neither NumPy nor pyarrow and holds no data, because a child's peak RSS (ru_maxrss)
    starts from its parent's at fork."""
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_run; bench_run.{name}(*sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], check=True, capture_output=True,
                          text=True).stdout


def make(path: str, rows: str, group_size: str, seed: str) -> None:
    make_rollouts(Path(path), int(rows), int(group_size), int(seed))


def hand_params(path: str) -> None:
    """Writes the hand kernel's params vector for PARAMS (resolved by shapec); prints the term and
    factor names."""
    import numpy as np

    import hand_nemo_rl as hand
    import shapec
    from shapec.runtime.params import validate_params

    ir = shapec.load("nemo_rl", backend="interpreter").length_penalty.ir
    pv, gb = hand.param_vector(validate_params(ir, PARAMS))
    np.savez(path, pv=pv, gb=gb)
    print(json.dumps([list(ir.terms), list(ir.factors)]))


def differing(a: str, b: str, names: str) -> None:
    """Prints the columns of `names` (JSON) whose float64 bytes differ between two Parquet files."""
    import numpy as np
    import pyarrow.parquet as pq

    names = json.loads(names)
    ta, tb = pq.read_table(a, columns=names), pq.read_table(b, columns=names)
    print(json.dumps([c for c in names if ta.column(c).to_numpy().astype(np.float64).tobytes()
                      != tb.column(c).to_numpy().astype(np.float64).tobytes()]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds of shapec and the baseline, taking turns")
    ap.add_argument("--chunk", type=int, default=65536, help="chunk rows of the timed comparison")
    ap.add_argument("--chunk-rows", type=int, nargs="*", default=[16384, 65536, 262144],
                    help="chunk sizes of the RSS report (none: skip it)")
    ap.add_argument("--backend", default="numba", choices=("numba", "interpreter"))
    ap.add_argument("--keep", help="directory for the generated files (default: a temporary one)")
    args = ap.parse_args()
    if args.chunk % args.group_size:
        raise SystemExit("--chunk must be a multiple of --group-size (the baseline cuts chunks at fixed rows)")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="shapec-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SHAPEC_BACKEND": args.backend, "NUMBA_CACHE_DIR": str(work / "numba-cache")}
    try:
        data = work / "rollouts.parquet"
        t0 = time.perf_counter()
        helper("make", data, args.rows, args.group_size, 0)
        print(f"generated {args.rows} rollouts in {time.perf_counter() - t0:.1f} s "
              f"({data.stat().st_size / 2**20:.1f} MiB Parquet)")
        params = work / "hand_params.npz"
        names = json.loads(helper("hand_params", params))
        small = work / "small.parquet"
        helper("make", small, 4096, args.group_size, 1)
        warm = [shapec_cmd(small, work / "small.shapec.parquet", args.chunk),
                baseline_cmd(small, work / "small.hand.parquet", args.chunk, params, None),
                baseline_cmd(small, work / "small.full.parquet", args.chunk, params, names)]
        for cmd in warm:  # fills the kernel caches if they are empty
            run_child(cmd, env)
        fixed = [run_child(cmd, env)[:2] for cmd in warm]
        print(f"this process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB (a floor "
              "for every child's)")
        print(f"backend {args.backend}; a 4096-row run (start-up, imports, cached kernels): shapec {fixed[0][0]:.2f} s "
              f"{fixed[0][1]} MiB, baseline {fixed[1][0]:.2f} s {fixed[1][1]} MiB")

        outs = {"shapec": work / "shaped.parquet", "baseline": work / "hand.parquet",
                "shapec+breakdown": work / "shaped_full.parquet", "baseline+breakdown": work / "full.parquet"}
        cmds = {"shapec": shapec_cmd(data, outs["shapec"], args.chunk),
                "shapec+breakdown": shapec_cmd(data, outs["shapec+breakdown"], args.chunk, breakdown=True),
                "baseline": baseline_cmd(data, outs["baseline"], args.chunk, params, None),
                "baseline+breakdown": baseline_cmd(data, outs["baseline+breakdown"], args.chunk, params, names)}
        for cmd in cmds.values():
            run_child(cmd, env)
        columns = ["reward", "env_reward"]
        breakdown = [f"term.{t}" for t in names[0]] + [f"factor.{f}" for f in names[1]]
        bad = json.loads(helper("differing", outs["shapec"], outs["baseline"], json.dumps(columns)))
        bad += json.loads(helper("differing", outs["shapec+breakdown"], outs["baseline+breakdown"],
                                 json.dumps(columns + breakdown)))
        if bad:
            raise SystemExit(f"the baseline differs from shapec run in {sorted(set(bad))}")
        print(f"check: the baselines' reward and env_reward (and with the breakdown, all {len(breakdown)} term "
              f"and factor columns) equal shapec run's bit for bit on {args.rows} rows")

        load = os.getloadavg()
        print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; "
              f"{args.rounds} rounds, whole processes taking turns, --chunk-rows {args.chunk}")
        times: dict[str, list[float]] = {k: [] for k in cmds}
        rss: dict[str, list[int]] = {k: [] for k in cmds}
        for r in range(args.rounds):
            order = list(cmds) if r % 2 == 0 else list(reversed(cmds))
            for k in order:
                wall, peak, _ = run_child(cmds[k], env)
                times[k].append(wall)
                rss[k].append(peak)
        med = {k: statistics.median(v) for k, v in times.items()}
        for k in cmds:
            print(f"  {k:<19} median {med[k]:6.2f} s  (runs {', '.join(f'{t:.2f}' for t in times[k])})  "
                  f"peak RSS {max(rss[k])} MiB")
        print(f"  shapec / baseline            {med['shapec'] / med['baseline']:.2f}x (target <= 1.3x)")
        print(f"  shapec+breakdown / baseline+breakdown  {med['shapec+breakdown'] / med['baseline+breakdown']:.2f}x "
              "(run --breakdown: the term and factor columns too)")

        if args.chunk_rows:
            print(f"{'chunk rows':>10}  {'wall s':>7}  {'rows/s':>10}  {'peak RSS MiB':>12}")
        for chunk in args.chunk_rows:
            wall, peak, out = run_child(shapec_cmd(data, work / "shaped.parquet", chunk), env)
            assert f"rows: {args.rows} in = {args.rows} out + 0 rejected" in out, out
            print(f"{chunk:>10}  {wall:>7.1f}  {args.rows / wall:>10,.0f}  {peak:>12}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
