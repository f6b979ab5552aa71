"""`shapec check` exit codes (0 valid, 1 errors, 2 usage or unreadable) and its JSON format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
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
    proc = cli("check", binary)  # not UTF-8: the spec's E102 at the byte, as compile says it
    assert proc.returncode == 1 and f"{binary}:1:1: error[E102]: byte 0xff is not UTF-8 text" in proc.stderr


ONCE_TRACEBACKED = {  # file: (statement, code, column of the caret)
    "sum486.shape": ("term t = 1" + " + 1 - 1" * 243, "E104", 12),
    "sum5000.shape": ("term t = " + " + ".join(["1"] * 5000), None, None),  # one run of + is one level
    "neg1000.shape": ("term t = " + "-" * 1000 + "1", "E104", 12 + 1000 - 256),
    "not1000.shape": ("term t = (" + "not " * 1000 + "true) ? 1 : 0", "E104", 13 + 4 * (1000 - 256)),
    "cond1000.shape": ("term t = " + "true ? " * 1000 + "1" + " : 0" * 1000, "E104", 12 + 7 * (1000 - 256)),
    "int400.shape": ("term t = " + "1" * 400, "E107", 12),
    "int5001.shape": ("term t = " + "1" * 5001, "E107", 12),
    "nul.shape": ('metric "a\0b" = 1', "E106", 12),
    "cr.shape": ('metric "a\rb" = 1', "E102", 10),  # a file's lone CR is a line break: the string is unterminated
    "cr_escape.shape": ('metric "a\\rb" = 1', None, None),
}


def test_inputs_that_once_tracebacked_give_coded_diagnostics(tmp_path):
    for name, (stmt, _, _) in ONCE_TRACEBACKED.items():
        (tmp_path / name).write_text(f"shaper s() {{\n  {stmt}\n}}\n", newline="")
    text = cli("check", tmp_path)
    assert text.returncode == 1 and "Traceback" not in text.stderr
    proc = cli("check", "--format", "json", tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    found = {Path(d["path"]).name: (d["code"], d["line"], d["column"]) for d in json.loads(proc.stdout)}
    assert found == {name: (code, 2, col) for name, (_, code, col) in ONCE_TRACEBACKED.items() if code}
    for name, (_, code, _) in ONCE_TRACEBACKED.items():
        assert (f"{name}:2:" in text.stderr and f"error[{code}]" in text.stderr) == (code is not None)
    assert "unterminated string: a string ends on the line it starts (write a line break as \\n)" in text.stderr


def test_specs_are_utf8_whatever_the_locale(tmp_path):
    """A spec is read as UTF-8 even where the locale says ASCII (a C locale with coercion off): a
    comment in another script neither makes the file unreadable nor changes under fmt."""
    import os

    spec = tmp_path / "cafe.shape"
    text = GOOD.replace("{\n", "{\n  # café, 長さ — a note\n", 1)
    spec.write_bytes(text.encode("utf-8"))
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    for args in (("check", spec), ("fmt", "--check", spec), ("fmt", spec)):
        proc = subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True,
                              text=True, env=env, timeout=300)
        assert proc.returncode == 0, (args, proc.stderr)
    assert spec.read_bytes() == text.encode("utf-8")


def test_a_byte_order_mark_is_not_part_of_the_spec(tmp_path):
    """Some editors save UTF-8 with a byte-order mark: the spec checks and compiles as without
    it, errors point where the editor shows the text, and fmt keeps the mark (and is stable)."""
    import shapec

    plain, marked = tmp_path / "plain.shape", tmp_path / "marked.shape"
    plain.write_text(GOOD, encoding="utf-8")
    marked.write_text("\ufeff" + GOOD, encoding="utf-8")
    assert cli("check", marked).returncode == 0
    rewards, lengths = np.array([1.0, 0.0, 1.0, 1.0]), np.array([50.0, 150.0, 250.0, 10.0])
    shaped = [shapec.compile_file(p, backend="interpreter").s(rewards, group_size=4, channels={"length": lengths})
              for p in (plain, marked)]
    assert np.array_equal(shaped[0].rewards, shaped[1].rewards)
    for name, text in (("syntax", "shaper s( {\n}\n"), ("name", BAD.replace("length + run_time", "lenght"))):
        diags = []
        for prefix in ("", "\ufeff"):
            (tmp_path / f"{name}.shape").write_text(prefix + text, encoding="utf-8")
            proc = cli("check", tmp_path / f"{name}.shape")
            assert proc.returncode == 1, proc.stderr
            diags.append(proc.stderr)
        assert diags[0] == diags[1], diags
    messy = tmp_path / "messy.shape"
    messy.write_text("\ufeff" + GOOD.replace("  input", "input"), encoding="utf-8")
    assert cli("fmt", messy).returncode == 0
    assert messy.read_text(encoding="utf-8") == "\ufeff" + GOOD
    assert cli("fmt", "--check", messy).returncode == 0
