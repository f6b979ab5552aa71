"""`shapec run` on a file of another shape than the spec's says so, never shapes nothing in silence:
a declared metadata field no row of the file has is an error naming it and the closest field the
rows have (a warning where every read of it has a stand-in by design), and an input no row has is
reported with every other missing one, the rows' fields listed with a count of the rest."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .test_files_whole_or_untouched import run, write_jsonl

SPEC = ("shaper budgeted(p: float = 0.5) {\n"
        "  input length: tokens\n  meta budget: tokens\n"
        "  term over = -p when length > budget\n}\n"
        "shaper fallback(p: float = 0.5) {\n"
        "  input length: tokens\n  meta budget: tokens\n"
        "  term over = -p when length > (budget ?? 2)\n}\n"
        "shaper switched(on: bool = false) {\n"
        "  input length: tokens\n  meta budget: tokens\n"
        "  term over = -0.5 when on and length > budget\n}\n")


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "b.shape"
    path.write_text(SPEC)
    return path


def rows(field: str = "budgt", groups: int = 3) -> list[dict]:
    return [{"prompt_id": f"p{g}", "reward": 1, "length": 1 + 2 * i, field: 2} for g in range(groups) for i in range(2)]


def data_file(tmp_path, rows: list[dict], suffix: str):
    if suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
        return tmp_path / "in.parquet"
    return write_jsonl(tmp_path / "in.jsonl", rows)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_metadata_field_no_row_has_is_an_error_naming_the_closest_field(tmp_path, spec, suffix):
    data = data_file(tmp_path, rows(), suffix)
    rc, out, err = run(spec, "--shaper", "budgeted", "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 1 and out == "" and not (tmp_path / "o.jsonl").exists()
    assert err == ("shapec: error: metadata 'budget' (`meta budget: tokens`): no row of the file (6 rows) has this "
                   "field; did you mean 'budgt'?; shaper 'budgeted' reads it with nothing standing in for it "
                   f"(budget at {spec}:4:32), so no group would be shaped through it\n")


def test_a_metadata_field_only_a_later_chunk_has_is_no_error(tmp_path, spec):
    later = rows("budgt", 3) + [{"prompt_id": "p3", "reward": 1, "length": 3, "budget": 2}]
    data = write_jsonl(tmp_path / "in.jsonl", later)
    rc, out, err = run(spec, "--shaper", "budgeted", "--data", data, "--out", tmp_path / "o.jsonl", "--chunk-rows", 2)
    assert rc == 0 and err == "", err
    assert "groups: 4 in, 4 shaped" in out and "(4 chunks)" in out


def test_a_metadata_field_every_read_of_which_falls_back_is_a_warning_naming_the_closest_field(tmp_path, spec):
    data = write_jsonl(tmp_path / "in.jsonl", rows())
    rc, out, err = run(spec, "--shaper", "fallback", "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 0 and (tmp_path / "o.jsonl").exists()
    assert err == ("shapec: warning: metadata 'budget' (`meta budget: tokens`): no row of the file (6 rows) has this "
                   "field; did you mean 'budgt'?; every read of it has a stand-in, so it is absent in every group\n")
    data = write_jsonl(tmp_path / "in.jsonl", rows("unrelated"))  # nothing close: an optional field, no word
    rc, _, err = run(spec, "--shaper", "fallback", "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 0 and err == ""


def test_a_read_the_config_turns_off_is_a_warning_and_one_it_turns_on_an_error(tmp_path, spec):
    data = write_jsonl(tmp_path / "in.jsonl", rows())
    rc, _, err = run(spec, "--shaper", "switched", "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 0 and err.startswith("shapec: warning: metadata 'budget'"), err
    rc, _, err = run(spec, "--shaper", "switched", "--data", data, "--out", tmp_path / "o.jsonl", "--set", "on=true")
    assert rc == 1 and f"shaper 'switched' reads it with nothing standing in for it (budget at {spec}:14:41)" in err


def test_nemo_gym_rows_without_profiled_lengths_name_that_field(tmp_path):
    """`profiled` is read from two fields of a NeMo-Gym row; a misspelt one is named as it is."""
    row = {"prompt_id": "q", "full_result": {"reward": 1.0, "response": {"output": []}},
           "profiled_rewards": [1, 1, 1], "profiled_output_length": [5, 6, 7]}
    data = write_jsonl(tmp_path / "in.jsonl", [row] * 4)
    rc, _, err = run("nemo_rl", "--layout", "nemo-gym", "--group-size", 4, "--length-type", "chars",
                     "--data", data, "--out", tmp_path / "o.jsonl", "--set", "profiled_length_penalty=0.1",
                     "--set", "profiled_length_min_samples=0")
    assert rc == 1, err
    warning, err = err.split("\n", 1)  # min_samples 0 is warned as the drop-in warns it
    assert warning.startswith("shapec: warning: length_penalty profiled_length_min_samples 0 is below 1")
    assert err.startswith("shapec: error: metadata 'profiled' (`meta profiled: list(reward: float, length: tokens)`, "
                          "read from 'profiled_output_lengths'): no row of the file (4 rows) has this field; did you "
                          "mean 'profiled_output_length'?; shaper 'length_penalty' reads it with nothing standing in "
                          "for it (mean(profiled.length where passing) at "), err
    assert "profile_band" not in err  # read by design as absent, and no field is close to it


def test_every_input_no_row_has_is_reported_not_only_the_first(tmp_path):
    spec = tmp_path / "two.shape"
    spec.write_text("shaper two(p: float = 0.5) {\n  input reasoning: tokens\n  input answer: tokens\n"
                    "  term t = -p when reasoning + answer > 3\n}\n")
    data = write_jsonl(tmp_path / "in.jsonl", [{"prompt_id": "p", "reward": 1, "reasonin": 1, "ans": 2}])
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 1
    assert err == ("shapec: error: input 'reasoning' (`input reasoning: tokens`): no row of the first 1 has this "
                   "field; did you mean 'reasonin'?\n"
                   "input 'answer' (`input answer: tokens`): no row of the first 1 has this field; did you mean "
                   "'ans'?\n"
                   "to read an input from a field of another name: --map reasoning=reasonin\n")


def test_the_fields_listed_for_a_missing_field_say_how_many_more_there_are(tmp_path):
    spec = tmp_path / "one.shape"
    spec.write_text("shaper one(p: float = 0.5) {\n  input length: tokens\n  term t = -p when length > 3\n}\n")
    extra = {f"f{k:02}": k for k in range(18)}  # 20 fields with prompt_id and reward, none close to `length`
    data = write_jsonl(tmp_path / "in.jsonl", [{"prompt_id": "p", "reward": 1, **extra}])
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 1
    assert err == ("shapec: error: input 'length' (`input length: tokens`): no row of the first 1 has this field; "
                   "the rows have prompt_id, reward, f00, f01, f02, f03, f04, f05, ... and 12 more\n"
                   "to read an input from a field of another name: --map length=FIELD\n")
