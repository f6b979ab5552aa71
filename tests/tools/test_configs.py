"""Configs for run/explain/plot: per-shaper YAML, NeMo-RL's grpo blocks, --set, and their errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "SHAPEC_BACKEND": "interpreter"}


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=600)


def rows_file(tmp_path: Path, groups: list[tuple[str, str, list, list]]) -> Path:
    """(prompt_id, agent, rewards, totals): reasoning = total, answer = 0."""
    rows = [{"prompt_id": pid, "agent": agent, "reward": r, "reasoning": t, "answer": 0, "low_effort": False}
            for pid, agent, rewards, totals in groups for r, t in zip(rewards, totals)]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run(tmp_path, data, *args) -> tuple[subprocess.CompletedProcess, list[float]]:
    out = tmp_path / "out.jsonl"
    proc = cli("run", "nemo_rl", "--data", data, "--out", out, *args)
    rewards = [json.loads(line)["reward"] for line in out.read_text().splitlines()] if proc.returncode == 0 else []
    return proc, rewards


def test_shaper_params_from_yaml(tmp_path):
    data = rows_file(tmp_path, [("p", "a", [1, 1, 0], [10, 20, 5])])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("length_penalty:\n  longest_total_penalty: 0.2\n")
    proc, rewards = run(tmp_path, data, "--config", cfg)
    assert proc.returncode == 0, proc.stderr
    assert rewards == [1.0, 0.8, 0.0]  # the longer correct rollout (20) loses 0.2


def test_set_overrides_config_and_parses_yaml_values(tmp_path):
    data = rows_file(tmp_path, [("p", "a", [1, 1, 0], [10, 20, 5])])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("length_penalty:\n  longest_total_penalty: 0.2\n")
    proc, rewards = run(tmp_path, data, "--config", cfg, "--set", "length_penalty.longest_total_penalty=0.5",
                        "--set", "global_band_total=[10, 30, 0.5]", "--set", "profile_band_total=true")
    assert proc.returncode == 0, proc.stderr
    # row 1: 1 - 0.5 = 0.5, then the band at total 20: 1 - (20 - 10) / (30 - 10) * (1 - 0.5) = 0.75 -> 0.375
    assert rewards == [1.0, 0.375, 0.0]


def test_unknown_param_names_the_key_and_the_closest_one(tmp_path):
    data = rows_file(tmp_path, [("p", "a", [1, 1], [10, 20])])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("length_penalty:\n  longest_totl_penalty: 0.2\n")
    proc, _ = run(tmp_path, data, "--config", cfg)
    assert proc.returncode == 1
    assert (f"{cfg}: length_penalty: unknown param 'longest_totl_penalty' for shaper 'length_penalty'; "
            f"did you mean 'longest_total_penalty'?") in proc.stderr


def test_unknown_top_level_key_names_the_closest_shaper(tmp_path):
    data = rows_file(tmp_path, [("p", "a", [1, 1], [10, 20])])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("length_penalti:\n  longest_total_penalty: 0.2\n")
    proc, _ = run(tmp_path, data, "--config", cfg)
    assert proc.returncode == 1
    assert f"{cfg}: unknown key 'length_penalti'; did you mean 'length_penalty'?" in proc.stderr


def test_param_out_of_range_names_the_key(tmp_path):
    data = rows_file(tmp_path, [("p", "a", [1, 1], [10, 20])])
    proc, _ = run(tmp_path, data, "--set", "global_band_total=[30, 10, 0.5]")
    assert proc.returncode == 1
    assert "param 'global_band_total' of shaper 'length_penalty'" in proc.stderr and "b > a" in proc.stderr


def test_set_typo_names_the_closest_param(tmp_path):
    data = rows_file(tmp_path, [("p", "a", [1, 1], [10, 20])])
    proc, _ = run(tmp_path, data, "--set", "total_bonus=0.1", "--set", "longest_totl_penalty=0.2")
    assert proc.returncode == 1
    assert "unknown param 'longest_totl_penalty' for shaper 'length_penalty'; did you mean " \
           "'longest_total_penalty'?" in proc.stderr
    proc, _ = run(tmp_path, data, "--set", "longest_total_penalty")
    assert proc.returncode == 1 and "--set 'longest_total_penalty': expected key=value" in proc.stderr


def test_nemo_rl_block_as_is_with_agent_overrides_and_global_bands(tmp_path):
    data = rows_file(tmp_path, [("p1", "math", [1, 1, 0], [10, 20, 5]),
                                ("p2", "genrm", [1, 1, 0], [10, 20, 5]),
                                ("p3", "code", [1, 1, 0], [10, 20, 5])])
    cfg = tmp_path / "nemo.yaml"
    cfg.write_text("""\
policy: {model_name: some/model}
grpo:
  num_generations_per_prompt: 3
  length_penalty:
    verbose: false
    default:
      enabled: true
      length_type: tokens
      longest_total_penalty: 0.2
    agent_overrides:
      genrm:
        enabled: false
      code:
        longest_total_penalty: 0.4
    profile_band:
      enabled: true
      defaults:
        total: {a: 10, b: 30, f: 0.5}
""")
    proc, rewards = run(tmp_path, data, "--config", cfg)
    assert proc.returncode == 0, proc.stderr
    # math: 1 - 0.2 = 0.8 for the longer correct (20), then the global band, enabled implicitly:
    #   1 - (20 - 10) / (30 - 10) * (1 - 0.5) = 0.75 -> 0.8 * 0.75; total 10 is at a -> 1.
    # genrm: disabled, passed through unchanged. code: its override replaces only the penalty: 0.6 * 0.75.
    assert rewards == [1.0, (1 - 0.2) * 0.75, 0.0, 1.0, 1.0, 0.0, 1.0, (1 - 0.4) * 0.75, 0.0]
    assert "passed through (disabled): 1 group" in proc.stdout


def test_nemo_rl_block_typo_names_the_closest_key(tmp_path):
    data = rows_file(tmp_path, [("p", "a", [1, 1], [10, 20])])
    cfg = tmp_path / "nemo.yaml"
    cfg.write_text("grpo:\n  length_penalty:\n    default:\n      group_total_length_coeff: 0.1\n")
    proc, _ = run(tmp_path, data, "--config", cfg)
    assert proc.returncode == 1
    assert "grpo.length_penalty.default" in proc.stderr
    assert "unknown key 'group_total_length_coeff'; did you mean 'group_total_length_penalty_coeff'?" in proc.stderr
    cfg.write_text("grpo:\n  length_penalty:\n    default:\n      length_type: token\n")
    proc, _ = run(tmp_path, data, "--config", cfg)
    assert proc.returncode == 1 and "grpo.length_penalty.default.length_type" in proc.stderr


def test_time_efficiency_block_on_the_nemo_gym_pipeline(tmp_path):
    rows = [{"prompt_id": "p", "reward": r, "reasoning": 0, "answer": 0, "low_effort": False, "run_time": s,
             "calls": 0, "resolved": bool(r), "masked": False} for r, s in ((1, 1800), (0, 3600))]
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp_path / "nemo.yaml"
    cfg.write_text("grpo:\n  time_efficiency:\n    enabled: true\n    lambda_time: 0.0333333333333333\n")
    out = tmp_path / "out.jsonl"
    proc = cli("run", "nemo_gym", "--data", data, "--out", out, "--config", cfg)
    assert proc.returncode == 0, proc.stderr
    # 30 and 60 minutes at 1/30 per minute: 1 - 1.0 = 0.0 and 0 - 2.0 = -2.0
    got = [json.loads(line)["reward"] for line in out.read_text().splitlines()]
    assert [round(x, 9) for x in got] == [0.0, -2.0]
    cfg.write_text("grpo:\n  time_efficiency:\n    enabled: true\n    lambda_call_bonus: 0.1\n")
    proc = cli("run", "nemo_gym", "--data", data, "--out", out, "--config", cfg)
    assert proc.returncode == 1 and "call_bonus_ref must be a positive number" in proc.stderr


def _plan(tmp_path, text):
    import pytest

    import shapec
    from shapec.tools.config import build_plan
    from shapec.run.spec import ToolError

    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    with pytest.raises(ToolError) as err:
        build_plan(shapec.load("nemo_rl", backend="interpreter").length_penalty, ("length_penalty",), path)
    return str(err.value), path


def test_yaml_syntax_error_names_the_file_line_and_column(tmp_path):
    message, path = _plan(tmp_path, "length_penalty:\n  longest_total_penalty: [0.2\n")
    assert message.startswith(f"{path}:3:1: not valid YAML: ") and "<unicode string>" not in message


def test_a_key_written_twice_is_an_error(tmp_path):
    message, path = _plan(tmp_path, "length_penalty:\n  total_bonus: 0.1\n  total_bonus: 0.2\n")
    assert message == f"{path}:3:3: not valid YAML: duplicate key 'total_bonus' (the later value would silently win)"


def test_every_error_of_a_nemo_rl_block_is_reported(tmp_path):
    message, path = _plan(tmp_path, "grpo:\n  length_penalty:\n    default:\n      top_percentile: lots\n"
                                    "      total_bonus: [1]\n")
    assert message.splitlines() == [
        f"{path}: grpo.length_penalty.default.top_percentile: Input should be a valid number, "
        f"unable to parse string as a number",
        f"{path}: grpo.length_penalty.default.total_bonus: Input should be a valid number"]


def _miles_plan_errors(tmp_path, text) -> tuple[list[str], Path]:
    import pytest

    import shapec
    from shapec.tools.config import build_plan, module_keys
    from shapec.run.spec import ToolError

    module = shapec.load("miles", backend="interpreter")
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    with pytest.raises(ToolError) as err:
        build_plan(module.length_penalty, module_keys(module), path)
    return str(err.value).splitlines(), path


def test_a_typo_in_another_shapers_block_is_an_error(tmp_path):
    lines, path = _miles_plan_errors(tmp_path, "length_penalty:\n  coeff: 1\ngrpo_advantage:\n  normalise_std: false\n")
    assert lines == [f"{path}: grpo_advantage.normalise_std: unknown param of 'grpo_advantage'; "
                     f"did you mean 'normalize_std'?; valid keys: normalize_std"]


def test_every_error_of_a_config_is_reported_at_once_with_its_key_path(tmp_path):
    lines, path = _miles_plan_errors(
        tmp_path, "length_penalty:\n  coeff: -1\nlength_penalti: {}\ngrpo_advantage:\n  normalise_std: false\n")
    assert lines[0] == (f"{path}: unknown key 'length_penalti'; did you mean 'length_penalty'?; "
                        f"valid keys: length_penalty, grpo_advantage, grpo, map")
    assert lines[1].startswith(f"{path}: grpo_advantage.normalise_std: unknown param")
    assert lines[2].startswith(f"{path}: length_penalty: ") and "coeff" in lines[2] and "-1" in lines[2]
    assert len(lines) == 3


def test_an_unknown_top_level_key_lists_every_accepted_key(tmp_path):
    lines, path = _miles_plan_errors(tmp_path, "zzz: {}\n")
    assert lines == [f"{path}: unknown key 'zzz'; valid keys: length_penalty, grpo_advantage, grpo, map"]


def test_a_required_param_never_given_says_how_to_give_it(tmp_path):
    spec = tmp_path / "req.shape"
    spec.write_text("shaper s(ratio: float) requires binary produces real {\n  input length: tokens\n"
                    "  term t = -ratio * float(length) / 1000 on reward > 0\n}\n")
    data = tmp_path / "in.jsonl"
    data.write_text('{"prompt_id": "p", "reward": 1, "length": 5}\n')
    proc = cli("run", spec, "--data", data, "--out", tmp_path / "o.jsonl", "--backend", "interpreter")
    assert (proc.returncode, proc.stderr) == (1, "shapec: error: params: s: param 'ratio' of shaper 's': required "
                                                 "(it has no default); give it with --set ratio=VALUE\n")
    proc = cli("run", spec, "--data", data, "--out", tmp_path / "o.jsonl", "--backend", "interpreter", "--set", "ratio=x")
    assert proc.stderr == "shapec: error: --set: s: param 'ratio' of shaper 's': expected a float, got 'x' (str)\n"


@pytest.mark.parametrize("how", ["config", "set"])
def test_a_top_percentile_nemo_rl_would_fail_on_is_warned_once_from_a_config_or_set(tmp_path, how):
    data = rows_file(tmp_path, [("p", "a", [1, 1, 0], [10, 20, 5])])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("grpo:\n  length_penalty:\n    default:\n      top_percentile: 5\n")
    proc, rewards = run(tmp_path, data, *(("--config", cfg) if how == "config" else ("--set", "top_percentile=5")))
    assert proc.returncode == 0 and len(rewards) == 3
    warned = [line for line in proc.stderr.splitlines() if line.startswith("shapec: warning: ")]
    assert warned == ["shapec: warning: length_penalty top_percentile 5.0 is outside [0, 1]: a group whose top-scorer "
                      "index falls past its correct rollouts (NeMo-RL raises IndexError there) gets no shortest bonus "
                      "and no longest penalty; a value <= 0 keeps only the best score, as in NeMo-RL"]


def test_a_top_percentile_in_range_is_not_warned(tmp_path):
    data = rows_file(tmp_path, [("p", "a", [1, 1, 0], [10, 20, 5])])
    proc, _ = run(tmp_path, data, "--set", "top_percentile=0.25")
    assert proc.returncode == 0 and "warning" not in proc.stderr
