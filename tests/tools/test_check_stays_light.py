"""`shapec check` stays light: it never imports numba, z3 or numpy (pre-commit runs it on every commit).

Its time is measured by benchmarks/bench_check.py, not here: on the shared two-core machine a wall-clock
bound of even 2 s was missed at a load average of 5.6, so any bound would flake."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_check_imports_neither_numba_nor_z3():
    code = (
        "import sys, shapec.cli as c; rc = c.main(['check', '-q', 'shapec/stdlib', 'examples']); "
        "heavy = sorted(m for m in ('numba', 'z3', 'numpy') if m in sys.modules); "
        "assert not heavy, heavy; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
