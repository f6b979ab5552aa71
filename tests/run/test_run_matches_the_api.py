"""`shapec run` must give every row the reward the Python API gives its group,
whatever the input format, the chunking, the backend and the bad groups skipped around it."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import shapec
from shapec.cli import main


def cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def write(path, rows: list[dict]):
    """JSONL, or Parquet with the schema of every row (from_pylist would read the first row's keys only)."""
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_struct_array(pa.array(rows)), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rewards_of(path) -> list[float]:
    if path.suffix == ".parquet":
        return pq.read_table(path).column("reward").to_pylist()
    return [json.loads(line)["reward"] for line in path.read_text().splitlines()]


def nemo_rows(agents: list[str], sizes: list[int], agent_field) -> list[dict]:
    rows = []
    for g, (agent, size) in enumerate(zip(agents, sizes)):
        for s in range(size):
            rows.append({"prompt_id": f"p{g}", "info": {"id": f"k{g}", "sample": s}, "reward": 1,
                         "reasoning": 100 * (s + 1) + 7 * g, "answer": 10 * s, "low_effort": False,
                         **agent_field(agent)})
    return rows


OVERRIDES = {"grpo": {"length_penalty": {
    "default": {"enabled": True, "longest_total_penalty": 0.0, "group_total_length_penalty_coeff": 0.1},
    "agent_overrides": {"alpha": {"longest_total_penalty": 0.5}, "beta": {"group_total_length_penalty_coeff": 0.7}}}}}


def api_rewards(rows: list[dict], per_group: list[dict], backend: str = "interpreter") -> list[float]:
    keys = [r["prompt_id"] for r in rows]
    starts = [i for i, k in enumerate(keys) if i == 0 or k != keys[i - 1]]
    params = {k: [p.get(k, 0.0) for p in per_group] for k in ("longest_total_penalty", "group_total_length_penalty_coeff")}
    out = shapec.load("nemo_rl", backend=backend).length_penalty(
        np.array([r["reward"] for r in rows], float), offsets=np.array(starts + [len(rows)]),
        channels={k: np.array([float(r[k]) for r in rows]) for k in ("reasoning", "answer", "low_effort")},
        params=params)
    return out.rewards.tolist()


AGENT_PARAMS = {"alpha": {"longest_total_penalty": 0.5, "group_total_length_penalty_coeff": 0.1},
                "beta": {"longest_total_penalty": 0.0, "group_total_length_penalty_coeff": 0.7}}


# ------------------------------------------------------------------ dotted paths in a Parquet file
@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_a_dotted_agent_by_reads_a_parquet_struct_as_it_reads_jsonl(tmp_path, capsys, suffix):
    """`--agent-by agent_ref.name` on a flat Parquet file looked for a column named 'agent_ref.name',
    found none, and gave every group the defaults (a warning about agent None), silently unlike the
    same rows in JSONL; the struct's field is now read as get_path reads the JSON object."""
    agents = ["alpha", "beta", "alpha", "beta"]
    rows = nemo_rows(agents, [3, 2, 4, 3], lambda a: {"agent_ref": {"name": a}})
    config = tmp_path / "nemo.yaml"
    config.write_text(yaml.safe_dump(OVERRIDES))
    data, out = write(tmp_path / f"in.{suffix}", rows), tmp_path / "out.jsonl"
    rc, _, err = cli(capsys, "run", "nemo_rl", "--config", config, "--data", data, "--out", out,
                     "--agent-by", "agent_ref.name", "--backend", "interpreter", "--chunk-rows", 4, "--no-progress")
    assert (rc, err) == (0, "")
    assert rewards_of(out) == api_rewards(rows, [AGENT_PARAMS[a] for a in agents])


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_a_dotted_group_by_groups_a_parquet_file_as_jsonl(tmp_path, capsys, suffix):
    """`--group-by info.id` was refused on a Parquet file (no column of that name) while the same
    JSONL rows ran: the key is the struct's field, and prompt_id (one value for all) plays no part."""
    rows = nemo_rows(["alpha"] * 3, [3, 2, 4], lambda a: {})
    for r in rows:
        r["prompt_id"] = "one"
    data, out = write(tmp_path / f"in.{suffix}", rows), tmp_path / "out.jsonl"
    rc, stdout, err = cli(capsys, "run", "nemo_rl", "--set", "group_total_length_penalty_coeff=0.3", "--data", data,
                          "--out", out, "--group-by", "info.id", "--backend", "interpreter", "--no-progress")
    assert (rc, err) == (0, "")
    assert "groups: 3 in, 3 shaped" in stdout
    for r, k in zip(rows, [0] * 3 + [1] * 2 + [2] * 4):
        r["prompt_id"] = f"k{k}"
    assert rewards_of(out) == api_rewards(rows, [{"group_total_length_penalty_coeff": 0.3}] * 3)


# ------------------------------------------------------------------ a key that comes back, across chunks
@pytest.mark.parametrize("chunk_rows", [2, 4, 100])
def test_a_string_key_coming_back_in_a_chunk_of_mixed_key_types_stops_the_run(tmp_path, capsys, chunk_rows):
    """Keys were remembered by hash(key) in a chunk of strings only and by hash(key_identity(key)) in
    a chunk of mixed types, so "a" in chunk 1 was not known again in chunk 2 (keys 5 and "a"): its
    two runs were shaped as two groups, silently (--chunk-rows 4). Every chunking stops the run."""
    rows = [{"prompt_id": k, "reward": 1, "length": 10 + 10 * s} for k in ["a", "b", 5, "a"] for s in range(2)]
    data, out = write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    rc, stdout, err = cli(capsys, "run", "kimi", "--data", data, "--out", out, "--backend", "interpreter",
                          "--chunk-rows", chunk_rows, "--no-progress")
    assert (rc, stdout) == (1, "")
    assert err == ('shapec: error: rows 1 and 7: prompt_id "a" comes back after other groups; a group\'s rows must '
                   "be adjacent (sort the rows by prompt_id, or group by position with --group-size N)\n")
    assert not out.exists()


# ------------------------------------------------------------------ explain names each group once
def test_explain_tells_a_string_key_from_the_number_or_bool_it_spells(tmp_path, capsys):
    """The string "1" and the integer 1 were both labelled `1` (and "true" and true `true`): two
    headers read alike and `--group 1` showed both groups. A string that reads as JSON is quoted."""
    rows = [{"prompt_id": k, "reward": 1, "length": 10 + 10 * s} for k in ["1", 1, "true", True, "x"] for s in range(2)]
    data = write(tmp_path / "in.jsonl", rows)
    rc, stdout, err = cli(capsys, "explain", "kimi", "--data", data, "--width", 100)
    assert (rc, err) == (0, "")
    assert [line.split("  rows")[0] for line in stdout.splitlines() if line.startswith("group ")] == \
        ['group "1"', "group 1", 'group "true"', "group true", "group x"]
    for wanted, shown in [("1", ['group "1"  rows 1-2', "group 1  rows 3-4"]), ('"1"', ['group "1"  rows 1-2']),
                          ("true", ['group "true"  rows 5-6', "group true  rows 7-8"]),
                          ('"true"', ['group "true"  rows 5-6'])]:
        rc, stdout, err = cli(capsys, "explain", "kimi", "--data", data, "--group", wanted, "--width", 100)
        assert (rc, err) == (0, "")
        assert [line for line in stdout.splitlines() if line.startswith("group ")] == \
            [f"{header}, 2 rollouts" for header in shown]


def test_a_numeric_string_id_is_named_as_written(tmp_path, capsys):
    """Prompt ids such as "12345" are shown quoted (they read as JSON), and --group 12345 names them."""
    rows = [{"prompt_id": k, "reward": 1, "length": 10 + 10 * s} for k in ["12345", "777"] for s in range(2)]
    data = write(tmp_path / "in.jsonl", rows)
    rc, stdout, err = cli(capsys, "explain", "kimi", "--data", data, "--group", "777", "--width", 100)
    assert (rc, err) == (0, "")
    assert [line for line in stdout.splitlines() if line.startswith("group ")] == ['group "777"  rows 3-4, 2 rollouts']
    rc, _, err = cli(capsys, "explain", "kimi", "--data", data, "--group", "778", "--width", 100)
    assert rc == 1 and "no group '778'" in err


# ------------------------------------------------------------------ reward components in a Parquet struct
@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_flat_parquet_reward_components_count_the_fields_a_row_has(tmp_path, capsys, suffix):
    """A struct column of components counted every field of its type for every row, so a row's {}
    (no components) counted 1 beside a row's {"fmt": 0.5}: every group passed through as non-binary
    in Parquet, while the same JSONL rows shaped two of three. A null field is absent, as struct_fields reads it."""
    rows = [{"prompt_id": f"p{g}", "reward": 1, "length": 10 + 10 * s, "reward_components": comp}
            for g, comp in enumerate([{}, {"fmt": 0.5}, {}]) for s in range(2)]
    data, out = write(tmp_path / f"in.{suffix}", rows), tmp_path / "out.jsonl"
    rc, stdout, _ = cli(capsys, "run", "kimi", "--data", data, "--out", out, "--backend", "interpreter", "--no-progress")
    assert rc == 0
    assert "groups: 3 in, 2 shaped, 1 passed through, 0 rejected (1 chunk)" in stdout
    assert rewards_of(out) == [1.5, 0.5, 1.0, 1.0, 1.5, 0.5]


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_nemo_gym_parquet_reward_components_count_the_fields_a_row_has(tmp_path, capsys, suffix):
    """The NeMo-Gym layout reads Parquet rows as dicts whose structs carry every field (absent ones as
    None): len() of full_result.reward_components counted them all, as in the flat layout."""
    text = lambda n: {"response": {"output": [{"type": "message", "role": "assistant",
                                               "content": [{"type": "output_text", "text": "x" * n}]}]}}
    rows = [{"prompt_id": f"p{g}", "full_result": {"reward": 1.0, "reward_components": comp, **text(10 + 10 * s)}}
            for g, comp in enumerate([{}, {"fmt": 0.5}, {}]) for s in range(2)]
    data, out = write(tmp_path / f"in.{suffix}", rows), tmp_path / "out.jsonl"
    rc, stdout, _ = cli(capsys, "run", "nemo_rl", "--layout", "nemo-gym", "--length-type", "chars", "--group-by",
                        "prompt_id", "--set", "longest_total_penalty=0.5", "--data", data, "--out", out, "--backend", "interpreter",
                        "--no-progress")
    assert rc == 0
    assert "groups: 3 in, 2 shaped, 1 passed through, 0 rejected (1 chunk)" in stdout
    assert [json.loads(line)["full_result"]["reward"] for line in out.read_text().splitlines()] == \
        [1.0, 0.5, 1.0, 1.0, 1.0, 0.5]
