"""`shapec explain` tables and `shapec plot` figures, end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from matplotlib import image

ROOT = Path(__file__).resolve().parents[2]
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


def test_explain_marks_the_rollouts_a_shaper_drops(tmp_path):
    rows = [{"prompt_id": "p", "reward": r, "length": n} for r, n in ((1, 300), (1, 100), (0, 50), (1, 200))]
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = cli("explain", "gfpo", "--data", data, "--set", "k=2")
    assert proc.returncode == 0, proc.stderr
    table = [line.split() for line in proc.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [cells[-1] for cells in table] == ["dropped", "yes", "yes", "dropped"]  # the two shortest stay


def test_explain_unknown_group_exits_1_and_lists_some_ids():
    proc = cli("explain", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--group", "nope")
    assert proc.returncode == 1
    assert proc.stderr == (f"shapec: error: no group 'nope' in {EXAMPLES / 'rollouts.jsonl'}; its groups: "
                           "'gsm8k-0017', 'gsm8k-0042', 'math-0311', 'math-0509', 'aime-0007', ... (6 groups)\n")


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
    assert "--channel 'low_effort': not a length input or channel of 'nemo_rl_length' " \
        "(lengths: reasoning, answer, total)" in proc.stderr


def test_explain_shows_the_values_a_gate_compared_and_the_group_metadata():
    proc = cli("explain", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--config",
               EXAMPLES / "nemo_rl_config.yaml", "--group", "gsm8k-0042")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # correct rollouts 10, 11, 15, 16: totals 788, 828, 850, 597 -> mean 765.75 against the band's a = 2500
    assert ("  gate profile_gate: closed (mean_le_limit): limit = 2500, count(gate_pool) = 4, "
            "mean(gate_length where gate_pool) = 765.8") in lines
    values = lines[lines.index("  group values:") + 1:]
    table = dict(line.strip().rsplit(None, 1) for line in values[:values.index(next(
        v for v in values if v.startswith("  meta ")))] if not line.strip().startswith("argm"))
    assert table["count(right)"] == "4" and table["limit"] == "2500" and table["block"] == "true"
    assert table["longest_correct = max(total where right)"] == "850"
    # the profiled threshold: mean + 1 sample std of the passing profiled lengths 1454, 1225, 1063, 1422
    assert table["mean(profiled.length where passing)"] == "1291"
    assert table["threshold"] == "1473.6"
    assert "    argmax(total where long_total)" in proc.stdout and "row 15" in proc.stdout
    assert '  meta profile_band: {"total": {"a": 2500.0, "b": 5000.0, "f": 0.8}}' in lines
    assert ('  meta profiled: {"reward": [1, 1, 0, 0, 0, 1, 1, 0], '
            '"length": [1454, 1225, 1102, 638, 1035, 1063, 1422, 960]}') in lines


def test_explain_never_prints_a_shaped_reward_as_an_exact_one(tmp_path):
    spec = tmp_path / "tiny.shape"
    spec.write_text("shaper tiny(eps: float = 4.88e-05) produces real {\n  term nudge = eps\n}\n")
    data = tmp_path / "in.jsonl"
    data.write_text('{"prompt_id": "p", "reward": 1}\n{"prompt_id": "p", "reward": 0}\n')
    proc = cli("explain", spec, "--data", data)
    assert proc.returncode == 0, proc.stderr
    row1 = next(line.split() for line in proc.stdout.splitlines() if line.strip().startswith("1 "))
    assert row1 == ["1", "1", "4.88e-05", "1.00005"]
    proc = cli("explain", spec, "--data", data, "--digits", "9")
    row1 = next(line.split() for line in proc.stdout.splitlines() if line.strip().startswith("1 "))
    assert row1 == ["1", "1", "4.88000000e-05", "1.0000488"]


def test_fmt_number_keeps_distinct_values_distinct():
    from shapec.tools.explain import fmt_number

    assert fmt_number(0.99999) == "0.99999" and fmt_number(2815.4) == "2815.4"
    assert fmt_number(0.8589123) == "0.8589" and fmt_number(-0.1) == "-0.1" and fmt_number(3.0) == "3"
    assert fmt_number(1.23456789, digits=7) == "1.234568" and fmt_number(float("nan")) == "missing"


def test_explain_rejects_digits_out_of_range():
    proc = cli("explain", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--digits", "0")
    assert proc.returncode == 1 and "--digits: expected 1 to 17 significant digits, got 0" in proc.stderr


def test_explain_unknown_group_names_the_closest_ids():
    proc = cli("explain", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--group", "gsm8k-042")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"shapec: error: no group 'gsm8k-042' in {EXAMPLES / 'rollouts.jsonl'}; "
                                  "closest: 'gsm8k-0042'")


def test_explain_keeps_every_line_within_the_width_asked_for():
    for width in (60, 140):
        proc = cli("explain", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--config",
                   EXAMPLES / "nemo_rl_config.yaml", "--limit", 6, "--width", width)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert len(lines) > 50 and max(map(len, lines)) == width
