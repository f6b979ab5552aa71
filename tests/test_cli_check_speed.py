"""`shapec check` stays light: it never imports numba (pre-commit runs it on every commit)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_check_does_not_import_numba():
    code = (
        "import sys, shapec.cli as c; rc = c.main(['check', '-q', 'shapec/stdlib', 'examples']); "
        "assert 'numba' not in sys.modules, 'numba imported'; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
