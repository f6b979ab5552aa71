"""`shapec check` exit codes (0 valid, 1 errors, 2 usage or unreadable) and its JSON format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOOD = "shaper s() requires binary produces nonneg {\n  input length: tokens\n  factor f = band(length, {100, 200, 0.5})\n}\n"
BAD = "shaper s() {\n  input length: tokens\n  input run_time: seconds\n  let x = length + run_time\n}\n"


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_valid_files_exit_0(tmp_path):
    (tmp_path / "good.shape").write_text(GOOD)
    proc = cli("check", tmp_path / "good.shape", ROOT / "shapec" / "stdlib")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("files ok")
    assert cli("check", "-q", tmp_path).stdout == ""


def test_errors_exit_1_with_rendered_diagnostics(tmp_path):
    bad = tmp_path / "bad.shape"
    bad.write_text(BAD)
    proc = cli("check", bad)
    assert proc.returncode == 1
    # line 4, column 11: `length + run_time`
    assert f"{bad}:4:11: error[E301]:" in proc.stderr
    assert "  let x = length + run_time\n          ^^^^^^^^^^^^^^^^^" in proc.stderr


def test_json_format_keys(tmp_path):
    bad = tmp_path / "bad.shape"
    bad.write_text(BAD)
    proc = cli("check", "--format", "json", bad)
    assert proc.returncode == 1
    diags = json.loads(proc.stdout)
    assert len(diags) == 1
    d = diags[0]
    assert set(d) == {"path", "line", "column", "end_line", "end_column", "severity", "code", "message"}
    assert (d["path"], d["line"], d["column"], d["end_line"], d["end_column"], d["code"], d["severity"]) == (
        str(bad), 4, 11, 4, 28, "E301", "error")
    (tmp_path / "bad.shape").write_text(GOOD)
    proc = cli("check", "--format", "json", bad)
    assert proc.returncode == 0 and json.loads(proc.stdout) == []


def test_usage_and_unreadable_exit_2(tmp_path):
    proc = cli("check", tmp_path / "missing.shape")
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr
    proc = cli("check", "--format", "xml", tmp_path)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    binary = tmp_path / "binary.shape"
    binary.write_bytes(b"\xff\xfe\x00shaper")
    proc = cli("check", binary)
    assert proc.returncode == 2 and "cannot read" in proc.stderr
