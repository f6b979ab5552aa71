"""One exit status per outcome, the same in every command (docs/cli.md, "Exit status")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data" / "rollouts.jsonl"


def shapec(*args, cwd: Path) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("command", [
    ["check", "{spec}"], ["compile", "{spec}"], ["fmt", "{spec}"], ["plot", "{spec}", "--out", "p.png"],
    ["run", "{spec}", "--data", DATA, "--out", "o.jsonl"], ["explain", "{spec}", "--data", DATA],
])
@pytest.mark.parametrize("spec, says", [("nosuch.shape", "nosuch.shape: no such file"),
                                        ("nemorl", "did you mean 'nemo_rl'?")])
def test_a_spec_that_is_not_there_is_a_usage_error_in_every_command(tmp_path, command, spec, says):
    if command[0] == "fmt" and spec == "nemorl":  # fmt rewrites files and takes no stdlib name
        says = "nemorl: no such file or directory"
    rc, err = shapec(*[spec if a == "{spec}" else a for a in command], cwd=tmp_path)
    assert rc == 2 and says in err, err


@pytest.mark.parametrize("out, data", [("o.txt", DATA), ("o.jsonl", ROOT / "examples" / "data" / "nemo_rl_config.yaml")])
def test_a_file_type_run_cannot_read_or_write_is_a_usage_error_before_any_work(tmp_path, out, data):
    rc, err = shapec("run", "nemo_rl", "--data", data, "--out", out, cwd=tmp_path)
    assert rc == 2 and "unknown file type" in err and list(tmp_path.iterdir()) == []


def test_spec_errors_are_1_and_a_clean_check_is_0(tmp_path):
    (tmp_path / "bad.shape").write_text("shaper s() {\n  term t = nope\n}\n")
    assert shapec("check", "bad.shape", cwd=tmp_path)[0] == 1
    assert shapec("run", "bad.shape", "--data", DATA, "--out", "o.jsonl", cwd=tmp_path)[0] == 1
    assert shapec("check", "nemo_rl", cwd=tmp_path)[0] == 0
