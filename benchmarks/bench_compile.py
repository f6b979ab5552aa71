"""Cold and warm kernel loads of the stdlib as whole processes; path independence.

    python benchmarks/bench_compile.py [--quick] [--modules nemo_rl l1 ...] [--repeat 1] [--warm-runs 3]
                                       [--no-paths]
    python benchmarks/bench_compile.py --modules nemo_rl:nemo_rl_length   # one pipeline, as `shapec run` loads it

For `nemo_rl` first, then every other stdlib module, each run is a fresh
`python -c "import shapec; m = shapec.load(NAME); m[n].prepare(PARAMS) ..."` over every shaper
and pipeline of the module, so that each one's kernels are compiled as its first call with the
default params would compile them (kernels are compiled on first use, for what the params turn
off: compiler/specialize.py); a param with no default (gfpo's k) at the least its range allows. Then `nemo_rl:length_penalty` again with one algorithm on
(`longest_total_penalty = 0.2`) and with all eight on (bench_limit's ALL_ON, the hand kernel's work):

- cold: an empty SHAPEC_CACHE_DIR (a new temporary folder per run): lowering, numba's compile,
  the modules and numba's index written;
- warm: the same command again on the folder its cold run filled (median of --warm-runs).

`--together` instead times one process compiling every shaper and pipeline of every stdlib module
for its first call's params, in an empty cache folder (together_code: the child uses only
`shapec.load` and `prepare`, so it runs unchanged on earlier shapecs too, for a comparison).

Then the counter-example for the compile target: the hand-written numba kernel of bench_limit
(benchmarks/hand_nemo_rl.py: the eight NeMo-RL algorithms, bit-identical to `length_penalty`)
compiled cold in a fresh process and an empty NUMBA_CACHE_DIR, with the same numba, on the same
machine, beside `nemo_rl`'s cold load: the compile time of the same work written by hand.

Then path independence: a copy of nemo_rl.shape compiled as `nemo_rl.shape` from its own folder,
then by its absolute path from another folder, sharing one cache folder. The second load must be
warm: it must add or rewrite no file in the folder; the script exits 1 otherwise. Each process is
timed with perf_counter around it; peak RSS is the child's (os.wait4).

Not a test: the machine may be shared, so every row carries the 1-minute load averages seen while it
ran. The figures go to docs/performance.md ("Compile latency").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import shapec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_limit import ALL_ON  # noqa: E402  (the params that turn every NeMo-RL algorithm on)

STDLIB = ROOT / "shapec" / "stdlib"
QUICK = ("nemo_rl", "efficient", "thinkprune", "short_rl")
LOADS: list[float] = []  # 1-minute load averages sampled before each child of the current row


@dataclass
class Run:
    seconds: float
    rss_mib: int
    stderr: str


def child_env(cache: Path) -> dict:
    """The caller's environment without anything that would move or change the kernels."""
    drop = ("SHAPEC_", "NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "SHAPEC_CACHE_DIR": str(cache)}


def run(code: str, env: dict, cwd: Path = ROOT) -> Run:
    """One `python -c code` process: wall seconds, peak RSS and stderr; exits if it fails."""
    LOADS.append(os.getloadavg()[0])
    with tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=env,
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read()
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): python -c {code!r}\n{text}")
    return Run(seconds, usage.ru_maxrss // 1024, text)


def least_required(ir) -> dict:
    """The params a shaper requires (no default), each at the least its declared range allows, so
    that the load is the first call of a config that sets only what it must (gfpo's k: 1)."""
    values = {}
    for p in ir.params:
        if p.required:
            if p.kind not in ("int", "float") or p.lo is None:
                raise SystemExit(f"bench_compile: no least value for the required param {p.name!r} of {ir.name!r}")
            values[p.name] = int(p.lo) + p.lo_strict if p.kind == "int" else p.lo
    return values


def prepare_args(module: str, names: tuple[str, ...] = (), params: dict | None = None) -> dict:
    """name -> what its first call passes: `params` (default: none, the defaults) on every stage,
    over the params a stage requires at their least; for `names`, or every name of the module."""
    m = shapec.load(module, backend="interpreter")
    args = {}
    for n in names or m.names():
        s = m[n]
        given = {st.name: {**least_required(st), **(params or {})} for st, _ in s.stages}
        args[n] = given if s.is_pipeline else given[s.stages[0][0].name]
    return args


def load_code(args: dict, module: str) -> str:
    """Load the module and compile each name's kernels for its first call's params (prepare_args):
    kernels are compiled on first use, for what the params turn off."""
    return f"import shapec; m = shapec.load({module!r})\nfor n, a in {args!r}.items():\n    m[n].prepare(a)"


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under folder, relative, with its size and mtime (to see a rewrite)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def generated_lines(folder: Path) -> tuple[int, int]:
    """(generated modules, their total lines) in a filled cache folder."""
    files = sorted(folder.glob("kernels/*.py"))
    return len(files), sum(len(p.read_text().splitlines()) for p in files)


def seconds(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if len(values) == 1 or hi - lo < 0.005 else f"{lo:.2f}-{hi:.2f}"


@dataclass
class Row:
    module: str
    names: int
    modules: int
    lines: int
    cold: list[float]
    warm: float
    rss: tuple[int, int]  # (cold, warm) peak RSS in MiB
    load: tuple[float, float]


def measure(target: str, repeat: int, warm_runs: int, params: dict | None = None, label: str = "") -> Row:
    """Cold runs (fresh folder each) and warm runs (on the last cold folder) of one module, or of
    some of its shapers (`module:name,name`), compiled for `params` (default: the defaults)."""
    LOADS.clear()
    module, _, only = target.partition(":")
    args = prepare_args(module, tuple(only.split(",")) if only else (), params)
    code = load_code(args, module)
    cold: list[float] = []
    for i in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
            env = child_env(Path(tmp))
            first = run(code, env)
            cold.append(first.seconds)
            if i < repeat - 1:
                continue
            counts = generated_lines(Path(tmp))
            warms = [run(code, env) for _ in range(warm_runs)]
    return Row(target + label, len(args), *counts, cold, statistics.median(w.seconds for w in warms),
               (first.rss_mib, max(w.rss_mib for w in warms)), (min(LOADS), max(LOADS)))


def path_independence() -> tuple[float, float, list[str]]:
    """Cold seconds of the relative load, warm seconds of the absolute one, and what went wrong."""
    with tempfile.TemporaryDirectory(prefix="bench-compile-paths-") as tmp:
        spec_dir, other, cache = Path(tmp) / "spec", Path(tmp) / "elsewhere", Path(tmp) / "cache"
        spec_dir.mkdir()
        other.mkdir()
        spec = spec_dir / "nemo_rl.shape"
        spec.write_text((STDLIB / "nemo_rl.shape").read_text())
        code = "import shapec; m = shapec.compile_file({!r}); [m[n].prepare() for n in m.names()]"
        env = child_env(cache)
        relative = run(code.format("nemo_rl.shape"), env, cwd=spec_dir)
        before = listing(cache)
        absolute = run(code.format(str(spec)), env, cwd=other)
        after = listing(cache)
        problems = [f"new file {f}" for f in sorted(set(after) - set(before))]
        problems += [f"rewritten {f}" for f in sorted(set(before) & set(after)) if before[f] != after[f]]
        return relative.seconds, absolute.seconds, problems


def together_code() -> str:
    """One process loading every stdlib module and compiling each name for its first call; it uses
    only `shapec.load` and `prepare`, so it runs unchanged on earlier shapecs too."""
    modules = sorted(p.stem for p in STDLIB.glob("*.shape"))
    calls = {m: prepare_args(m) for m in modules}
    return (f"import shapec\nfor module, args in {calls!r}.items():\n    m = shapec.load(module)\n"
            f"    for n, a in args.items():\n        m[n].prepare(a)\n")


HAND_CODE = """
import sys; sys.path.insert(0, "benchmarks")
import numpy as np, bench_limit as bl, hand_nemo_rl as hand, shapec
from shapec.runtime.params import validate_params
ir = shapec.load("nemo_rl", backend="interpreter").length_penalty.ir
b = bl.random_batch(np.random.default_rng(1), 4, 4)
pv, gb = hand.param_vector(validate_params(ir, dict(bl.ALL_ON)))
bl.run_hand(bl.hand_args(b), pv, gb, True)
"""


def hand_kernel_cold(repeat: int) -> tuple[list[float], tuple[float, float]]:
    """Seconds of whole processes compiling the hand kernel in an empty numba cache, and the load."""
    LOADS.clear()
    times = []
    for _ in range(max(repeat, 2)):
        with tempfile.TemporaryDirectory(prefix="bench-compile-hand-") as tmp:
            env = {**child_env(Path(tmp) / "shapec"), "NUMBA_CACHE_DIR": str(Path(tmp) / "numba")}
            times.append(run(HAND_CODE, env).seconds)
    return times, (min(LOADS), max(LOADS))


def baseline(code: str) -> float:
    """Median of three processes running code (interpreter start and imports only)."""
    with tempfile.TemporaryDirectory(prefix="bench-compile-base-") as tmp:
        env = child_env(Path(tmp))
        run(code, env)
        return statistics.median(run(code, env).seconds for _ in range(3))


def print_table(rows: list[Row]) -> None:
    head = f"{'module':32} {'names':>5} {'mods':>4} {'lines':>6} {'cold s':>10} {'warm s':>7} {'RSS MiB cold/warm':>18} {'load':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r.module:32} {r.names:5} {r.modules:4} {r.lines:6} {seconds(r.cold):>10} {r.warm:7.2f} "
              f"{f'{r.rss[0]}/{r.rss[1]}':>18} {r.load[0]:4.2f}-{r.load[1]:.2f}")
    print("-" * len(head))
    print(f"{'total':32} {sum(r.names for r in rows):5} {sum(r.modules for r in rows):4} "
          f"{sum(r.lines for r in rows):6} {sum(min(r.cold) for r in rows):10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", nargs="+",
                        help="stdlib modules, or module:name,name for some of their shapers (default: all)")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--repeat", type=int, default=1, help="cold runs per module (fresh folder each)")
    parser.add_argument("--warm-runs", type=int, default=3, help="warm runs per module (median)")
    parser.add_argument("--together", action="store_true",
                        help="only: every stdlib module compiled cold in one process (--repeat times)")
    parser.add_argument("--no-paths", action="store_true",
                        help="skip the path-independence check (two cold nemo_rl loads)")
    args = parser.parse_args()
    others = sorted(p.stem for p in STDLIB.glob("*.shape") if p.stem != "nemo_rl")
    modules = args.modules or (list(QUICK) if args.quick else ["nemo_rl", *others])
    start = time.perf_counter()
    if args.together:
        LOADS.clear()
        times = []
        code = together_code()
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="bench-compile-together-") as tmp:
                times.append(run(code, child_env(Path(tmp))).seconds)
        print(f"every stdlib module compiled cold in one process: {seconds(times)} s "
              f"(load {min(LOADS):.2f}-{max(LOADS):.2f})")
        return
    print(f"bench_compile: Python {sys.version.split()[0]}, numba {version('numba')}, shapec "
          f"{shapec.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    print(f"process baselines (median of 3): python -c 'import shapec' {baseline('import shapec'):.2f} s, "
          f"python -c 'import numba' {baseline('import numba'):.2f} s")
    rows = []
    for module in modules:
        rows.append(measure(module, args.repeat, args.warm_runs))
        print(f"  measured {module} ({time.perf_counter() - start:.0f} s so far)", flush=True)
    if "nemo_rl" in modules:  # one algorithm on (the shaper's doc example), then all eight (as the hand kernel)
        for params, label in (({"longest_total_penalty": 0.2}, " (1 on)"), (ALL_ON, " (all on)")):
            rows.append(measure("nemo_rl:length_penalty", args.repeat, args.warm_runs, params, label))
            print(f"  measured nemo_rl{label} ({time.perf_counter() - start:.0f} s so far)", flush=True)
    print()
    print_table(rows)
    print()
    if "nemo_rl" in modules:
        hand, load = hand_kernel_cold(args.repeat)
        ours = min(next(r for r in rows if r.module.endswith("(all on)")).cold)
        print(f"hand-written kernel (benchmarks/hand_nemo_rl.py), cold numba compile: {seconds(hand)} s "
              f"(load {load[0]:.2f}-{load[1]:.2f}); nemo_rl with all eight on, cold {ours:.2f} s = "
              f"{ours / min(hand):.2f}x of it")
    problems = []
    if not args.no_paths:
        LOADS.clear()
        cold, warm, problems = path_independence()
        print(f"path independence: nemo_rl.shape from its folder {cold:.2f} s (cold), then its absolute "
              f"path from another folder {warm:.2f} s ({'warm, no new file' if not problems else 'NOT warm'}; "
              f"load {min(LOADS):.2f}-{max(LOADS):.2f})")
    print(f"total {time.perf_counter() - start:.0f} s; load average {os.getloadavg()[0]:.2f} at the end")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
