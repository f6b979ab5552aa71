"""A path the file system refuses outright (a name too long for it, a folder on the way that is a
file) gets the CLI's one-line error and its exit status, never a traceback, wherever the command
line names a path: specs to check, format, compile or run, data, and outputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import shapec
from shapec.paths import not_a_file, path_kind

LONG = "a" * 300
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stable_brevity.shape"


def cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


@pytest.fixture
def data(tmp_path) -> Path:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt_id": "p", "reward": 1.0, "length": 3}\n')
    return rows


@pytest.mark.parametrize("args, status", [
    (("check", f"{LONG}.shape"), 2),
    (("check", f"dir{LONG}/x.shape"), 2),
    (("check", LONG), 2),
    (("fmt", f"{LONG}.shape"), 2),
    (("fmt", "--check", f"file.txt/{LONG}.shape"), 2),
    (("compile", f"{LONG}.shape"), 2),
    (("run", f"{LONG}.shape", "--data", "DATA", "--out", "out.jsonl"), 2),
    (("run", str(EXAMPLE), "--data", f"{LONG}.jsonl", "--out", "out.jsonl"), 2),
    (("run", str(EXAMPLE), "--data", "DATA", "--out", f"{LONG}.jsonl"), 2),
    (("run", str(EXAMPLE), "--data", "DATA", "--out", "file.txt/out.jsonl"), 2),
])
def test_refused_paths_are_errors_not_tracebacks(tmp_path, data, args, status):
    (tmp_path / "file.txt").write_text("not a folder\n")
    proc = cli(*[str(data) if a == "DATA" else a for a in args], cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == status, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(("shapec: error:", "shapec run: ")), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "rows.jsonl"]  # nothing written


def test_path_kind_names_what_is_there_or_why_not(tmp_path):
    (tmp_path / "f").write_text("x")
    assert [path_kind(tmp_path / "f"), path_kind(tmp_path), path_kind(tmp_path / "nope"),
            path_kind(tmp_path / "f" / "below"), path_kind("/dev/null")] == ["file", "dir", "missing", "missing", "other"]
    assert path_kind(tmp_path / LONG) == "File name too long"
    assert path_kind("a\0b") not in ("file", "dir", "other", "missing")
    assert not_a_file("dir") == "a directory, not a file" and not_a_file("File name too long") == "File name too long"


def test_an_unknown_stdlib_name_of_any_length_is_a_key_error():
    with pytest.raises(KeyError, match="no stdlib module"):
        shapec.load(LONG)
