"""`shapec run` end to end, through a subprocess: formats, chunking, layouts, rejects and counts."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shapec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "data"
ENV = {**os.environ, "SHAPEC_BACKEND": "interpreter"}


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True, text=True,
                          env=ENV, cwd=cwd, timeout=600)


def read_rows(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def drop_nulls(value):
    """Parquet structs carry every field (absent ones as null); JSON objects only the present ones."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def counts(stdout: str) -> tuple[int, int, int]:
    m = re.search(r"rows: (\d+) in = (\d+) out \+ (\d+) rejected", stdout)
    assert m, stdout
    return tuple(int(x) for x in m.groups())


SHAPED_COLUMNS = ("reward", "env_reward")


def test_jsonl_and_parquet_inputs_and_outputs_agree(tmp_path):
    rows = read_rows(EXAMPLES / "rollouts.jsonl")
    parquet_in = tmp_path / "rollouts.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet_in)
    config = EXAMPLES / "nemo_rl_config.yaml"
    outs = {}
    for name, src, dst in (("j2j", EXAMPLES / "rollouts.jsonl", "a.jsonl"), ("p2j", parquet_in, "b.jsonl"),
                           ("j2p", EXAMPLES / "rollouts.jsonl", "c.parquet"), ("p2p", parquet_in, "d.parquet")):
        proc = cli("run", "nemo_rl", "--data", src, "--out", tmp_path / dst, "--config", config, "--chunk-rows", 20,
                   "--breakdown")
        assert proc.returncode == 0, proc.stderr
        assert counts(proc.stdout) == (48, 48, 0)
        outs[name] = [drop_nulls(r) for r in read_rows(tmp_path / dst)]
    assert outs["j2j"] == outs["p2j"] == outs["j2p"] == outs["p2p"]
    first = outs["j2j"][0]
    # the original row, then the shaped reward in place, env_reward, one column per term and factor
    assert list(first)[:8] == ["prompt_id", "sample", "reward", "reasoning", "answer", "low_effort",
                               "profile_band", "profiled"]
    assert "term.longest_total" in first and "factor.band_total_multiplier" in first
    assert any(r["reward"] != r["env_reward"] for r in outs["j2j"])


def _expected_rewards(rows: list[dict], params: dict) -> np.ndarray:
    """The API on the whole file as one batch: what run must write, however it chunks."""
    shaper = shapec.load("nemo_rl", backend="interpreter")["length_penalty"]
    keys = [r["prompt_id"] for r in rows]
    offsets = [0] + [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]] + [len(keys)]
    out = shaper([r["reward"] for r in rows], offsets=np.array(offsets),
                 channels={k: [r[k] for r in rows] for k in ("reasoning", "answer", "low_effort")},
                 metadata={"profile_band": [rows[s]["profile_band"] for s in offsets[:-1]],
                           "profiled": [rows[s]["profiled"] for s in offsets[:-1]]},
                 params=params)
    return out.rewards


@pytest.mark.parametrize("chunk_rows", [8, 9, 12, 20, 1000])
def test_chunks_never_split_a_group(tmp_path, chunk_rows):
    # Groups of 8; chunk boundaries at 9, 12 or 20 rows would fall inside groups. The longest-total
    # penalty is per group: a group cut in two would have two "longest" rollouts penalised.
    rows = read_rows(EXAMPLES / "rollouts.jsonl")
    out = tmp_path / "out.jsonl"
    proc = cli("run", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--out", out, "--chunk-rows", chunk_rows,
               "--set", "longest_total_penalty=0.25", "--set", "group_total_length_penalty_coeff=0.1", "--breakdown")
    assert proc.returncode == 0, proc.stderr
    expected = _expected_rewards(rows, {"longest_total_penalty": 0.25, "group_total_length_penalty_coeff": 0.1})
    got = np.array([r["reward"] for r in read_rows(out)])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    # six groups of eight: a chunk holds whole groups, at least ceil(chunk_rows / 8) of them
    chunks = int(re.search(r"\((\d+) chunks?\)", proc.stdout).group(1))
    assert chunks == math.ceil(48 / (8 * math.ceil(chunk_rows / 8)))
    penalised = [r for r in read_rows(out) if r["term.longest_total"] != 0]
    assert len(penalised) == len({r["prompt_id"] for r in penalised})  # one longest per group


def test_group_size_grouping_with_chunk_boundaries_inside_groups(tmp_path):
    rows = read_rows(EXAMPLES / "rollouts.jsonl")
    for r in rows:
        del r["prompt_id"]  # groups come from --group-size alone
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    proc = cli("run", "nemo_rl", "--data", data, "--out", out, "--group-size", 8, "--chunk-rows", 12,
               "--set", "longest_total_penalty=0.25")
    assert proc.returncode == 0, proc.stderr
    assert "(3 chunks)" in proc.stdout  # 12 rows -> cut at the next group start, 16
    by_key = read_rows(EXAMPLES / "rollouts.jsonl")
    expected = _expected_rewards(by_key, {"longest_total_penalty": 0.25})
    np.testing.assert_allclose([r["reward"] for r in read_rows(out)], expected, rtol=0, atol=1e-12)


def _group(pid, rewards, reasoning, answer=None):
    answer = answer or [0] * len(rewards)
    return [{"prompt_id": pid, "reward": r, "reasoning": x, "answer": a, "low_effort": False}
            for r, x, a in zip(rewards, reasoning, answer)]


def _bad_rows_data(tmp_path: Path) -> Path:
    good_a = _group("good-a", [1, 1, 0], [10, 30, 5])
    missing = _group("missing", [1, 1, 0], [10, 30, 5])
    del missing[1]["answer"]
    wrong_type = _group("wrong-type", [1, 1, 0], [10, 30, 5])
    wrong_type[2]["reward"] = "1"
    negative = _group("negative", [1, 1, 0], [10, 30, 5])
    negative[0]["reasoning"] = -4
    good_b = _group("good-b", [1, 1, 1], [40, 20, 60])
    lines = [json.dumps(r) for r in good_a + missing + wrong_type + negative]
    nan_row = _group("nan", [1, 1], [10, 12])
    # a line that is not JSON between two rows of one group: it can only belong to that group
    lines += [json.dumps(nan_row[0]).replace('"reward": 1', '"reward": NaN'), "{not json", json.dumps(nan_row[1])]
    lines += [json.dumps(r) for r in good_b]
    return write_jsonl(tmp_path / "bad.jsonl", lines)


def test_bad_row_stops_with_row_number_and_field(tmp_path):
    data = _bad_rows_data(tmp_path)
    proc = cli("run", "nemo_rl", "--data", data, "--out", tmp_path / "out.jsonl")
    assert proc.returncode == 1
    assert "row 5: answer: expected a number >= 0 (tokens), got nothing (the field is missing)" in proc.stderr


def test_bad_rows_skip_reject_whole_groups_and_counts_reconcile(tmp_path):
    data = _bad_rows_data(tmp_path)
    out = tmp_path / "shaped.jsonl"
    proc = cli("run", "nemo_rl", "--data", data, "--out", out, "--on-bad-row", "skip", "--chunk-rows", 4,
               "--set", "longest_total_penalty=0.2")
    assert proc.returncode == 0, proc.stderr
    # 3 + 3 + 3 + 3 + 2 + 1 + 3 = 18 rows in; good-a and good-b (6 rows) out; 12 rejected
    assert counts(proc.stdout) == (18, 6, 12)
    assert "6 in, 2 shaped, 0 passed through, 4 rejected" in proc.stdout
    rejects = read_rows(tmp_path / "shaped.rejects.jsonl")
    assert len(rejects) == 12
    by_row = {r["row"]: r for r in rejects}
    assert by_row[5]["reason"] == "row 5: answer: expected a number >= 0 (tokens), got nothing (the field is missing)"
    assert by_row[4]["reason"].startswith("in a group with a bad row: row 5: answer")
    assert by_row[9]["reason"] == 'row 9: reward: expected a number, got "1"'
    assert by_row[10]["reason"] == "row 10: reasoning: expected a number >= 0 (tokens), got -4"
    assert by_row[13]["reason"] == "row 13: reward: expected a number, got NaN"
    assert by_row[14]["reason"].startswith("row 14: <line>: not valid JSON")
    assert by_row[14]["reason"].endswith("; its group cannot be known, so every group it may belong to is rejected")
    assert by_row[14]["record"] == "{not json"
    assert by_row[15]["reason"] == "in a group with a bad row: row 13: reward: expected a number, got NaN"
    assert by_row[4]["record"]["prompt_id"] == "missing" and by_row[4]["group"] == "missing"
    shaped = read_rows(out)
    # good-a: longest total 30 of the two correct loses 0.2 -> [1, 0.8, 0];
    # good-b: all correct, longest total 60 -> [1, 1, 0.8]; neither sees the bad groups
    assert [r["reward"] for r in shaped] == [1.0, 0.8, 0.0, 1.0, 1.0, 0.8]
    assert [r["prompt_id"] for r in shaped] == ["good-a"] * 3 + ["good-b"] * 3


def test_a_clean_run_leaves_a_rejects_file_it_did_not_write_and_says_so(tmp_path):
    out = tmp_path / "shaped.jsonl"
    other = tmp_path / "shaped.rejects.jsonl"  # another run's: an earlier one, or one writing this output now
    other.write_text("{}\n")
    proc = cli("run", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--out", out, "--on-bad-row", "skip")
    assert proc.returncode == 0, proc.stderr
    assert other.read_text() == "{}\n"
    assert f"rejects: none; {other} is not from this run and was left as it was" in proc.stdout.splitlines()


def _nemo_gym_group_size(rows: list[dict]) -> int:
    """Rollouts per prompt in the bundled NeMo-Gym rows (run checks the group size against it)."""
    return sum(1 for r in rows if r["prompt_id"] == rows[0]["prompt_id"])


def test_nemo_gym_layout_matches_the_nemo_rl_drop_in(tmp_path):
    from shapec.compat.nemo_rl import apply_group_length_penalties

    rows = read_rows(EXAMPLES / "nemo_gym_rollouts.jsonl")
    size = _nemo_gym_group_size(rows)
    config = tmp_path / "nemo.yaml"
    config.write_text(
        f"grpo:\n  num_generations_per_prompt: {size}\n  length_penalty:\n    default:\n      length_type: chars\n"
        "      longest_total_penalty: 0.1\n      group_total_length_penalty_coeff: 0.2\n"
        "      group_length_penalty_profile_gate: true\n      profiled_length_penalty: 0.1\n"
        "      profile_band_total: true\n")
    out = tmp_path / "out.jsonl"
    proc = cli("run", "nemo_rl", "--layout", "nemo-gym", "--data", EXAMPLES / "nemo_gym_rollouts.jsonl",
               "--out", out, "--config", config)
    assert proc.returncode == 0, proc.stderr
    assert counts(proc.stdout) == (len(rows), len(rows), 0)
    reference = copy.deepcopy(rows)
    metrics = apply_group_length_penalties(reference, {"default": {
        "length_type": "chars", "longest_total_penalty": 0.1, "group_total_length_penalty_coeff": 0.2,
        "group_length_penalty_profile_gate": True, "profiled_length_penalty": 0.1, "profile_band_total": True}},
        group_size=size)
    shaped = read_rows(out)
    assert [r["full_result"]["reward"] for r in shaped] == [r["full_result"]["reward"] for r in reference]
    assert [r["env_reward"] for r in shaped] == [r["full_result"]["reward"] for r in rows]
    assert any(r["full_result"]["reward"] != r["env_reward"] for r in shaped)
    for key, value in metrics.items():
        line = re.search(rf"{key.split('/')[-1]}\s+(\S+)", proc.stdout)
        assert float(line.group(1)) == pytest.approx(value, abs=1e-5), key


def test_nemo_gym_missing_reward_is_a_bad_row(tmp_path):
    rows = read_rows(EXAMPLES / "nemo_gym_rollouts.jsonl")
    size = _nemo_gym_group_size(rows)
    del rows[5]["full_result"]["reward"]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    proc = cli("run", "nemo_rl", "--layout", "nemo-gym", "--length-type", "chars", "--group-size", size,
               "--data", data, "--out", tmp_path / "o.jsonl")
    assert proc.returncode == 1
    assert "row 6: full_result.reward: expected a number, got nothing (the field is missing)" in proc.stderr
    proc = cli("run", "nemo_rl", "--layout", "nemo-gym", "--length-type", "chars", "--group-size", size,
               "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert proc.returncode == 0, proc.stderr
    assert counts(proc.stdout) == (len(rows), len(rows) - size, size)  # row 6's group goes to the rejects


def test_usage_errors_exit_2(tmp_path):
    proc = cli("run", "nemo_rl", "--data", tmp_path / "nope.jsonl", "--out", tmp_path / "o.jsonl")
    assert proc.returncode == 2 and "--data" in proc.stderr and "no such file" in proc.stderr
    proc = cli("run", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--out", tmp_path / "o.csv")
    assert proc.returncode == 2 and "expected .jsonl or .parquet" in proc.stderr
    proc = cli("run", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--out", tmp_path / "o.jsonl",
               "--group-size", 4, "--group-by", "prompt_id")
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr


def test_parallel_numba_run_matches_the_interpreter(tmp_path):
    spec = tmp_path / "longest.shape"
    spec.write_text("shaper longest(p: float = 0.25) requires binary produces nonneg {\n"
                    "  input length: tokens\n  gate right = reward > 0\n"
                    "  term longest = -p on argmax(length where right)\n  clamp >= 0\n}\n")
    rng = np.random.default_rng(3)
    n = 12_000  # chunks of 6,000 rows: both above the kernels' parallel threshold
    data = write_jsonl(tmp_path / "in.jsonl", [
        {"prompt_id": i // 12, "reward": float(rng.integers(0, 2)), "length": int(rng.integers(0, 50))}
        for i in range(n)])
    got = {}
    for backend, extra in (("interpreter", ()), ("numba", ("--parallel",))):
        out = tmp_path / f"{backend}.jsonl"
        proc = cli("run", spec, "--data", data, "--out", out, "--backend", backend, "--chunk-rows", 6000, *extra)
        assert proc.returncode == 0, proc.stderr
        got[backend] = [r["reward"] for r in read_rows(out)]
    assert got["numba"] == got["interpreter"]
    assert sum(1 for r in got["numba"] if r == 0.75) > 500


def test_bundled_nemo_gym_rows_agree_with_the_bundled_config(tmp_path):
    """The config's 8 generations per prompt are the rows' groups, one prompt each."""
    rows = read_rows(EXAMPLES / "nemo_gym_rollouts.jsonl")
    out = tmp_path / "o.jsonl"
    proc = cli("run", "nemo_rl", "--layout", "nemo-gym", "--config", EXAMPLES / "nemo_rl_config.yaml",
               "--length-type", "chars", "--data", EXAMPLES / "nemo_gym_rollouts.jsonl", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert counts(proc.stdout) == (32, 32, 0)
    assert "groups: 4 in, 4 shaped" in proc.stdout
    ids = [r["prompt_id"] for r in rows]
    assert all(len(set(ids[k:k + 8])) == 1 for k in range(0, len(ids), 8))


def test_without_breakdown_run_writes_the_same_rewards_and_no_term_columns(tmp_path):
    lean, full = tmp_path / "lean.jsonl", tmp_path / "full.jsonl"
    for out, extra in ((lean, ()), (full, ("--breakdown",))):
        proc = cli("run", "nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--out", out,
                   "--set", "longest_total_penalty=0.25", *extra)
        assert proc.returncode == 0, proc.stderr
    lean_rows, full_rows = read_rows(lean), read_rows(full)
    assert [r["reward"] for r in lean_rows] == [r["reward"] for r in full_rows]
    assert not any(k.startswith(("term.", "factor.")) for r in lean_rows for k in r)
    assert any(k.startswith("term.") for k in full_rows[0])


def test_breakdown_columns_never_hold_a_negative_zero(tmp_path):
    """`-0.5 * float(n)` on n = 0 is -0.0 in the kernel, which reads as a penalty that applied;
    the file says 0."""
    spec = tmp_path / "s.shape"
    spec.write_text("shaper s() {\n  input n: int\n  term t = -0.5 * float(n)\n}\n")
    data, out = tmp_path / "d.jsonl", tmp_path / "out.jsonl"
    data.write_text("".join(json.dumps({"prompt_id": "p", "reward": 1.0, "n": n}) + "\n" for n in (0, 2)))
    proc = cli("run", spec, "--data", data, "--out", out, "--breakdown")
    assert proc.returncode == 0, proc.stderr
    assert [r["term.t"] for r in read_rows(out)] == [0.0, -1.0]
    assert math.copysign(1.0, read_rows(out)[0]["term.t"]) == 1.0
