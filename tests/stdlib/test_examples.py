"""examples/: only composition specs, and each runs as written on the bundled data with `shapec run`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import shapec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.shape"))
DATA = ROOT / "examples" / "data"
TARGETS = [(p, n) for p in EXAMPLES for n in shapec.compile_file(p, backend="interpreter").names()]


def test_examples_are_compositions_not_copies_of_the_stdlib():
    assert [p.name for p in EXAMPLES] == ["pruned_brevity.shape", "stable_brevity.shape"]
    for path in EXAMPLES:
        assert "import " in path.read_text()


@pytest.mark.parametrize("path,name", TARGETS, ids=[f"{p.stem}:{n}" for p, n in TARGETS])
def test_every_example_runs_on_the_bundled_rollouts(path, name, tmp_path):
    out = tmp_path / "shaped.jsonl"
    proc = subprocess.run([sys.executable, "-m", "shapec.cli", "run", str(path.relative_to(ROOT)), "--shaper", name,
                           "--data", "examples/data/rollouts.jsonl", "--out", str(out), "--backend", "interpreter",
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "rows: 48 in = 48 out + 0 rejected" in proc.stdout
    assert len(out.read_text().splitlines()) == 48


def test_the_bundled_rollouts_carry_what_the_length_shapers_read():
    rows = [json.loads(line) for line in (DATA / "rollouts.jsonl").read_text().splitlines()]
    for row in rows:
        assert row["length"] == row["reasoning"] + row["answer"]
        assert row["flagged"] == row["low_effort"]
        assert row["budget_band"] == (row["profile_band"] or {}).get("total")


def test_the_stdlib_length_shapers_run_on_the_bundled_rollouts(tmp_path):
    for module in ("kimi", "dapo", "cosine", "efficient", "grpo_lead", "thinkprune"):
        proc = subprocess.run([sys.executable, "-m", "shapec.cli", "run", module, "--data",
                               "examples/data/rollouts.jsonl", "--out", str(tmp_path / f"{module}.jsonl"),
                               "--backend", "interpreter", "--no-progress"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (module, proc.stderr)


def test_make_examples_reproduces_the_bundled_data(tmp_path):
    script = tmp_path / "make_examples.py"
    script.write_text((DATA / "make_examples.py").read_text())
    subprocess.run([sys.executable, str(script)], check=True, timeout=60)
    for name in ("rollouts.jsonl", "nemo_gym_rollouts.jsonl", "nemo_rl_config.yaml"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name
