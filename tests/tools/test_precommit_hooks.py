"""The repository's pre-commit hooks, installed by pre-commit itself from this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GOOD = "shaper s() requires binary produces nonneg {\n  input length: tokens\n  factor f = band(length, {100, 200, 0.5})\n}\n"
BAD = "shaper s() {\n  input length: tokens\n  input run_time: seconds\n  let x = length+run_time\n}\n"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def try_repo(repo: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "SHAPEC_BACKEND": "interpreter"}
    return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), *args, "--color", "never"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=1200)


def test_hook_definitions():
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert hooks["shapec-check"]["entry"] == "shapec check"
    assert hooks["shapec-fmt"]["entry"] == "shapec fmt --check"
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["files"] == r"\.shape$"


@pytest.mark.slow
def test_hooks_fail_on_the_bad_spec_and_pass_on_the_good_one(tmp_path):
    repo = tmp_path / "specs"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "good.shape").write_text(GOOD)
    (repo / "bad.shape").write_text(BAD)
    (repo / "notes.txt").write_text("let x = length+run_time\n")  # not a spec: the hooks skip it
    git(repo, "add", ".")
    proc = try_repo(repo, tmp_path / "home", "--all-files")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    check, fmt = out.split("shapec fmt", 1)
    assert "shapec check" in check and "Failed" in check
    assert "bad.shape:4:11: error[E301]: cannot add tokens and seconds" in check
    assert "good.shape" not in check and "notes.txt" not in out
    assert "Failed" in fmt
    assert "-  let x = length+run_time\n+  let x = length + run_time" in fmt
    assert "good.shape" not in fmt and "1 file would be reformatted; to rewrite it: shapec fmt bad.shape" in fmt

    (repo / "bad.shape").unlink()
    git(repo, "add", "-A")
    proc = try_repo(repo, tmp_path / "home", "--all-files")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "shapec check" in proc.stdout and "shapec fmt" in proc.stdout and "Failed" not in proc.stdout
