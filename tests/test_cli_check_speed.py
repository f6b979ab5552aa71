"""`shapec check` stays light: it never imports numba or z3 (pre-commit runs it on every commit), and
the whole stdlib checks as a process well within a pre-commit budget (benchmarks/bench_check.py
measures the 0.5 s target; the bound here is generous so a loaded machine cannot fail it)."""

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_check_imports_neither_numba_nor_z3():
    code = (
        "import sys, shapec.cli as c; rc = c.main(['check', '-q', 'shapec/stdlib', 'examples']); "
        "heavy = sorted(m for m in ('numba', 'z3', 'numpy') if m in sys.modules); "
        "assert not heavy, heavy; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_whole_stdlib_checks_as_a_process_in_under_two_seconds(tmp_path):
    env = {**os.environ, "SHAPEC_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "shapec.cli", "check", "-q", str(ROOT / "shapec" / "stdlib")]
    first = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)  # writes the grammar cache
    assert first.returncode == 0, first.stderr
    assert list((tmp_path / "cache" / "grammar").glob("shape-*.json"))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    assert min(times) < 2.0, times
