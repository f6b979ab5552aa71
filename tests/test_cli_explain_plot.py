"""`shapec explain` tables and `shapec plot` figures, end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from matplotlib import image

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "data"
ENV = {**os.environ, "SHAPEC_BACKEND": "interpreter"}


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=600)


def test_explain_shows_closed_gate_reasons_terms_and_final_rewards():
    proc = cli("explain", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--config",
               EXAMPLES / "nemo_rl_config.yaml", "--group", "gsm8k-0042", "--group", "math-0311")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # gsm8k-0042's correct rollouts average below its band's a = 2500: the profile gate stays closed
    assert "group gsm8k-0042  rows 9-16, 8 rollouts" in out
    first, second = out.split("group math-0311")
    assert "gate profile_gate: closed (mean_le_limit)" in first
    # math-0311 has no profile band and the config sets no global one
    assert "gate profile_gate: closed (missing_profile_limit)" in second
    assert "gate block: open" in first
    # the longest correct total of gsm8k-0042 (row 15: 819 + 31) loses longest_total_penalty = 0.1
    row15 = next(line for line in first.splitlines() if line.strip().startswith("15 "))
    assert row15.split()[-2:] == ["-0.1", "0.9"]
    assert "term longest_total" in first and "no effect in this group:" in first


def test_explain_marks_skipped_and_rejected_groups(tmp_path):
    rows = [{"prompt_id": "graded", "reward": r, "reasoning": 10 * (k + 1), "answer": 0, "low_effort": False}
            for k, r in enumerate([0.5, 1, 0])]
    rows += [{"prompt_id": "broken", "reward": 1, "reasoning": -1, "answer": 0, "low_effort": False}]
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = cli("explain", "nemo_rl", "--data", data)
    assert proc.returncode == 0, proc.stderr
    assert "passed through unchanged: skipped (non_binary)" in proc.stdout
    assert "gate profile_gate: not evaluated (group skipped)" in proc.stdout
    assert "rejected: row 4: reasoning: expected a number >= 0 (tokens), got -1" in proc.stdout


def test_explain_unknown_group_exits_1():
    proc = cli("explain", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--group", "nope")
    assert proc.returncode == 1 and "no group 'nope'" in proc.stderr


def test_plot_writes_a_png(tmp_path):
    out = tmp_path / "curve.png"
    proc = cli("plot", "nemo_rl", "--out", out, "--set", "longest_total_penalty=0.1",
               "--set", "group_total_length_penalty_coeff=0.2", "--set", "global_band_total=[1000, 3000, 0.6]",
               "--set", "profile_band_total=true")
    assert proc.returncode == 0, proc.stderr
    pixels = image.imread(out)
    assert pixels.shape[0] >= 400 and pixels.shape[1] >= 800  # 8 x 4.5 inches at 110 dpi
    assert pixels.std() > 0.05  # not a blank canvas


def test_plot_with_data_adds_the_length_distributions(tmp_path):
    out = tmp_path / "both.png"
    proc = cli("plot", "nemo_rl", "--out", out, "--data", EXAMPLES / "rollouts.jsonl",
               "--config", EXAMPLES / "nemo_rl_config.yaml")
    assert proc.returncode == 0, proc.stderr
    pixels = image.imread(out)
    assert pixels.shape[0] >= 900  # two panels stacked: 9 inches at 110 dpi


def test_plot_rejects_a_non_length_channel(tmp_path):
    proc = cli("plot", "nemo_rl", "--out", tmp_path / "x.png", "--channel", "low_effort")
    assert proc.returncode == 1
    assert "--channel 'low_effort': not a length input of 'nemo_rl_length' (length inputs: reasoning, answer)" \
        in proc.stderr
