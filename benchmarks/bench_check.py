"""`shapec check` on the whole stdlib as a process, as pre-commit runs it: the median of 10 runs.

    python benchmarks/bench_check.py [--runs 10]

Each run is a fresh `python -m shapec.cli check -q shapec/stdlib/*.shape` (parse, check, the static
pass on every declared `ensure` clause). Two settings, after one warm-up run each that fills the
grammar cache and, for the first, Python's bytecode cache:

- installed: bytecode cached (in a private PYTHONPYCACHEPREFIX, so the checkout stays clean), as
  after `pip install`; the figure the 0.5 s budget is for;
- no .pyc writing: PYTHONDONTWRITEBYTECODE=1, as some development shells set it: modules of a
  checkout without `__pycache__` folders are compiled from source in every run (the Python library's
  and site-packages' bytecode is still read).

The grammar cache and the kernel cache go to a private temporary folder. Not a test: the machine
may be shared, so the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def median_seconds(env: dict, runs: int) -> tuple[float, float]:
    files = sorted((ROOT / "shapec" / "stdlib").glob("*.shape"))
    cmd = [sys.executable, "-m", "shapec.cli", "check", "-q", *map(str, files)]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)  # warm-up: grammar (and bytecode) caches
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
        base["SHAPEC_CACHE_DIR"] = str(Path(tmp) / "cache")
        settings = {
            "installed (bytecode cached)": {**base, "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pyc")},
            "no .pyc writing (PYTHONDONTWRITEBYTECODE=1)": {**base, "PYTHONDONTWRITEBYTECODE": "1"},
        }
        count = len(list((ROOT / "shapec" / "stdlib").glob("*.shape")))
        print(f"shapec check -q on the {count} stdlib files, median of {args.runs} whole-process runs "
              f"(load average {os.getloadavg()[0]:.2f})")
        for name, env in settings.items():
            med, best = median_seconds(env, args.runs)
            print(f"  {name:45} median {med:.3f} s   min {best:.3f} s")


if __name__ == "__main__":
    main()
