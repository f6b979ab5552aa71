"""`--map NAME=FIELD` and a config's `map:` block: inputs and metadata read from fields of other
names (dotted paths into objects and Parquet structs), a bool input derived from a number field,
and every mapping that cannot be used refused before a row is read."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shapec.run.fieldmap import MapError, Source, parse_source

from .test_run_command import ENV, EXAMPLES, read_rows

ROWS = [json.loads(line) for line in (EXAMPLES / "rollouts.jsonl").read_text().splitlines()]


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=600)


def write(rows: list[dict], path):
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rewards(path) -> list[float]:
    return [r["reward"] for r in read_rows(path)]


def test_a_derived_bool_input_shapes_as_the_field_it_stands_for(tmp_path):
    """short_rl's `correct` from `reward > 0` gives the rewards of the same rows with a `correct` field."""
    with_field = write([{**r, "correct": r["reward"] > 0} for r in ROWS], tmp_path / "with.jsonl")
    proc = cli("run", "short_rl", "--data", with_field, "--out", tmp_path / "a.jsonl")
    assert proc.returncode == 0, proc.stderr
    proc = cli("run", "short_rl", "--data", EXAMPLES / "rollouts.jsonl", "--out", tmp_path / "b.jsonl",
               "--map", "correct=reward > 0")
    assert proc.returncode == 0, proc.stderr
    assert rewards(tmp_path / "a.jsonl") == rewards(tmp_path / "b.jsonl")
    assert any(r != e for r, e in zip(rewards(tmp_path / "b.jsonl"), [r["reward"] for r in ROWS]))


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_inputs_and_metadata_read_from_nested_fields_shape_as_the_plain_ones(tmp_path, suffix):
    config = EXAMPLES / "nemo_rl_config.yaml"
    proc = cli("run", "nemo_rl", "--config", config, "--data", EXAMPLES / "rollouts.jsonl", "--out",
               tmp_path / "plain.jsonl")
    assert proc.returncode == 0, proc.stderr
    moved = []
    for r in copy.deepcopy(ROWS):
        r["info"] = {"think": r.pop("reasoning"), "band": r.pop("profile_band")}
        r["prof"] = r.pop("profiled")
        moved.append(r)
    data = write(moved, tmp_path / f"moved{suffix}")
    proc = cli("run", "nemo_rl", "--config", config, "--data", data, "--out", tmp_path / "shaped.jsonl",
               "--map", "reasoning=info.think", "--map", "profile_band=info.band", "--map", "profiled=prof")
    assert proc.returncode == 0, proc.stderr
    assert rewards(tmp_path / "shaped.jsonl") == rewards(tmp_path / "plain.jsonl")


def test_a_config_map_block_maps_and_map_overrides_it_name_by_name(tmp_path):
    rows = [{**r, "ok": r["reward"], "n": r["length"]} for r in ROWS]
    for r in rows:
        del r["length"]
    data = write(rows, tmp_path / "d.jsonl")
    config = tmp_path / "c.yaml"
    config.write_text("map:\n  correct: ok > 0\n  length: nothing_here\n")
    proc = cli("run", "short_rl", "--config", config, "--data", data, "--out", tmp_path / "a.jsonl")
    assert proc.returncode == 1
    assert "input 'length' (`input length: tokens`, read as 'nothing_here' by --map): no row" in proc.stderr
    proc = cli("run", "short_rl", "--config", config, "--data", data, "--out", tmp_path / "a.jsonl", "--map", "length=n")
    assert proc.returncode == 0, proc.stderr
    proc = cli("run", "short_rl", "--data", EXAMPLES / "rollouts.jsonl", "--out", tmp_path / "b.jsonl",
               "--map", "correct=reward > 0")
    assert rewards(tmp_path / "a.jsonl") == rewards(tmp_path / "b.jsonl")


@pytest.mark.parametrize("args, status, message", [
    (["--map", "corect=x"], 2, "--map corect=x: 'short_rl' has no input or metadata 'corect'; did you mean 'correct'? "
                               "it reads 'correct', 'length'"),
    (["--map", "length=reward > 0"], 2, "--map length=reward > 0: a comparison gives a bool, but input 'length' is "
                                        "tokens; map it to a field"),
    (["--map", "reward=score"], 2, "--map reward=score: the reward is read from and written back to the field "
                                   "'reward'"),
    (["--map", "correct"], 2, "--map correct: expected NAME=FIELD"),
    (["--map", "correct=reward >> 0"], 2, "--map correct=reward >> 0: expected a field name, a dotted path"),
    (["--map", "correct=reward > inf"], 2, "--map correct=reward > inf: expected a finite number after '>', got 'inf'"),
    (["--map", "correct=reward > 0", "--layout", "nemo-gym"], 2, "--map reads flat rows"),
])
def test_a_mapping_that_cannot_be_used_is_refused_before_any_row(tmp_path, args, status, message):
    proc = cli("run", "short_rl", "--data", EXAMPLES / "rollouts.jsonl", "--out", tmp_path / "o.jsonl", *args)
    assert proc.returncode == status and message in proc.stderr, proc.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_a_config_map_that_cannot_be_used_names_its_key(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("map:\n  corect: reward > 0\n")
    proc = cli("run", "short_rl", "--config", config, "--data", EXAMPLES / "rollouts.jsonl", "--out", tmp_path / "o.jsonl")
    assert proc.returncode == 1 and "c.yaml: map.corect: 'short_rl' has no input or metadata 'corect'" in proc.stderr


def test_a_missing_input_says_how_to_map_it():
    proc = cli("explain", "short_rl", "--data", EXAMPLES / "rollouts.jsonl")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == ("to read an input from a field of another name: --map correct=FIELD, "
                                            "or derive a bool: --map correct='reward > 0'")


def test_a_row_whose_compared_field_is_not_a_number_is_a_bad_row_naming_the_field(tmp_path):
    rows = copy.deepcopy(ROWS)
    rows[3]["reward"] = "yes"
    data = write(rows, tmp_path / "d.jsonl")
    proc = cli("run", "short_rl", "--data", data, "--out", tmp_path / "o.jsonl", "--map", "correct=reward > 0")
    assert proc.returncode == 1 and 'row 4: reward: expected a number, got "yes"' in proc.stderr


def test_explain_and_plot_read_through_the_mapping(tmp_path):
    proc = cli("explain", "short_rl", "--data", EXAMPLES / "rollouts.jsonl", "--map", "correct=reward > 0",
               "--group", "gsm8k-0017", "--width", 120)
    assert proc.returncode == 0, proc.stderr
    assert "group gsm8k-0017  rows 1-8" in proc.stdout and "term length_reward" in proc.stdout
    proc = cli("plot", "short_rl", "--data", EXAMPLES / "rollouts.jsonl", "--map", "correct=reward > 0",
               "--out", tmp_path / "p.png")
    assert proc.returncode == 0, proc.stderr
    proc = cli("plot", "short_rl", "--map", "correct=reward > 0", "--out", tmp_path / "q.png")
    assert proc.returncode == 2 and "--map names the fields of --data; give --data too" in proc.stderr


@pytest.mark.parametrize("text, source", [
    ("is_right", Source("is_right")),
    (" info.num_tokens ", Source("info.num_tokens")),
    ("reward>0", Source("reward", ">", 0.0)),
    ("score >= 0.5", Source("score", ">=", 0.5)),
    ("a.b != -1e3", Source("a.b", "!=", -1000.0)),
])
def test_a_source_is_a_field_or_one_comparison(text, source):
    assert parse_source(text) == source


@pytest.mark.parametrize("text", ["", "a b", "reward > ", "reward > nan", "1abc", "a..b", 3])
def test_anything_else_is_no_source(text):
    with pytest.raises(MapError):
        parse_source(text)
