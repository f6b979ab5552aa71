"""`shapec run` groups and Parquet columns: keys of different types are
different groups, a key that names no group (empty, infinite, NaN inside) is a bad row, a group
whose rows are not adjacent is an error, and a rejected row never gives an output column its type."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .test_groups import clean_rewards, read
from .test_files_whole_or_untouched import SPEC, counts, rows_of, run, write_jsonl


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "longest.shape"
    path.write_text(SPEC)
    return path


def keyed(keys: list[str]) -> list[str]:
    """JSONL lines with these prompt_id literals (as written in the file), rewards 1, 0, 1, ..."""
    return ['{"prompt_id": %s, "reward": %d, "length": %d}' % (k, i % 2, (i * 3) % 17 + 1) for i, k in enumerate(keys)]


# ------------------------------------------------------------------ keys of different types
@pytest.mark.parametrize("a, b", [("1", "1.0"), ('{"i": 1}', '{"i": true}'), ("[1]", "[1.0]"), ('"1"', "1"),
                                  ("0", "false")])
def test_keys_that_python_finds_equal_but_json_types_tell_apart_are_two_groups(tmp_path, spec, a, b):
    """1 == 1.0 and {"i": 1} == {"i": True} in Python, so the two runs were shaped as one group."""
    data = write_jsonl(tmp_path / "in.jsonl", keyed([a, a, b, b]))
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 0, err
    assert "groups: 2 in, 2 shaped" in stdout
    rows = read(tmp_path / "o.jsonl")
    assert [r["reward"] for r in rows] == clean_rewards([{**r, "prompt_id": i // 2} for i, r in enumerate(rows)])


# ------------------------------------------------------------------ keys that name no group
@pytest.mark.parametrize("key, shown", [
    ('""', '""'), ("1e999", "inf"), ("-Infinity", "-inf"), ("[NaN]", "[NaN]"), ('{"a": Infinity}', '{"a": Infinity}'),
    ("[]", "[]"), ("{}", "{}"), ("[" * 40 + "]" * 40, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[..."),
])
def test_a_key_that_names_no_group_is_a_bad_row(tmp_path, spec, key, shown):
    """1e999 and 2e999 both read as inf and were one group; an empty key was a group of its own."""
    data = write_jsonl(tmp_path / "in.jsonl", keyed(['"a"', '"a"', key, key, '"b"', '"b"', '"c"', '"c"']))
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert (rc, err) == (1, f"shapec: error: row 3: prompt_id: expected the group key, got {shown}\n")
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 0, err
    assert counts(stdout) == (8, 2, 6)  # rows 3-4 may belong to a or b: both go, c is shaped alone
    assert [r["prompt_id"] for r in read(tmp_path / "o.jsonl")] == ["c", "c"]


def test_infinite_keys_that_differ_in_the_file_are_not_merged(tmp_path, spec):
    data = write_jsonl(tmp_path / "in.jsonl", keyed(["1e999", "1e999", "2e999", "2e999"]))
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 0 and counts(stdout) == (4, 0, 4), err


@pytest.mark.parametrize("column, bad", [
    (pa.array(["a", "a", "", "", "b", "b", "c", "c"]), '""'),
    (pa.array([1.0, 1.0, float("inf"), float("inf"), 2.0, 2.0, 3.0, 3.0]), "inf"),
    (pa.array([b"a", b"a", b"", b"", b"b", b"b", b"c", b"c"]), "b''"),
])
def test_a_parquet_key_that_names_no_group_is_a_bad_row(tmp_path, spec, column, bad):
    data = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": column, "reward": [1, 0] * 4, "length": [1, 2, 3, 4, 5, 6, 7, 8]}), data)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.parquet")
    assert (rc, err) == (1, f"shapec: error: row 3: prompt_id: expected the group key, got {bad}\n")
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.parquet", "--on-bad-row", "skip")
    assert rc == 0 and counts(stdout) == (8, 2, 6), err


# ------------------------------------------------------------------ a group's rows must be adjacent
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("chunk_rows", [2, 3, 100])
@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_a_key_that_comes_back_after_other_groups_is_an_error(tmp_path, spec, fmt, chunk_rows, mode):
    """The rows of p0 before and after p1 were shaped as two groups, each with rewards no group has."""
    rows = rows_of(1, 2, 0) + rows_of(1, 2, 1) + rows_of(1, 2, 0) + rows_of(1, 2, 2)
    data = tmp_path / f"in.{fmt}"
    if fmt == "jsonl":
        write_jsonl(data, rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), data)
    out = tmp_path / f"o.{fmt}"
    out.write_bytes(b"old")
    rc, stdout, err = run(spec, "--data", data, "--out", out, "--chunk-rows", chunk_rows, "--on-bad-row", mode)
    assert (rc, stdout) == (1, "")
    assert err == ('shapec: error: rows 1 and 5: prompt_id "p0" comes back after other groups; a group\'s rows '
                   "must be adjacent (sort the rows by prompt_id, or group by position with --group-size N)\n")
    assert out.read_bytes() == b"old"


@pytest.mark.parametrize("key, again", [("1", "1.0"), ('"x"', '"x"')])
def test_explain_refuses_a_group_split_by_another(tmp_path, spec, capsys, key, again):
    from shapec.cli import main

    data = write_jsonl(tmp_path / "in.jsonl", keyed([key, key, '"y"', '"y"', again, again]))
    rc = main(["explain", str(spec), "--data", str(data)])
    _, err = capsys.readouterr()
    if key == again:
        assert rc == 1 and err.startswith('shapec: error: rows 1 and 5: prompt_id "x" comes back after other groups')
    else:
        assert (rc, err) == (0, "")  # 1 and 1.0 are two keys, so neither comes back


def test_a_prompt_id_that_comes_back_is_fine_when_grouping_by_position(tmp_path, spec):
    rows = rows_of(1, 2, 0) + rows_of(1, 2, 1) + rows_of(1, 2, 0)
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--group-size", 2)
    assert rc == 0 and counts(stdout) == (6, 6, 0), err


# ------------------------------------------------------------------ rejected rows and the Parquet schema
def _bad_first(extra_bad, extra_good) -> list:
    """Group p0's first row is bad (a string reward) and has `extra` of one type; p1 has none; p2 has
    `extra` of another type. p0 is rejected, so only p2 says what `extra` is."""
    return [{"prompt_id": "p0", "reward": "?", "length": 1, "extra": extra_bad},
            {"prompt_id": "p0", "reward": 0, "length": 2},
            {"prompt_id": "p1", "reward": 1, "length": 3}, {"prompt_id": "p1", "reward": 0, "length": 4},
            {"prompt_id": "p2", "reward": 1, "length": 5, "extra": extra_good},
            {"prompt_id": "p2", "reward": 0, "length": 6, "extra": extra_good}]


@pytest.mark.parametrize("chunk_rows", [2, 4, 100])
@pytest.mark.parametrize("bad, good, typ", [("s", 7, pa.int64()), (1.5, 7, pa.int64()), (7, "s", pa.string()),
                                            ({"a": 1}, [1, 2], pa.list_(pa.int64()))])
def test_a_rejected_row_never_gives_a_parquet_column_its_type(tmp_path, spec, chunk_rows, bad, good, typ):
    """The schema scanned over every input row kept the first type seen, a rejected row's, so the run
    stopped with a 'does not fit' error it did not need (or widened a good int column to float)."""
    data = write_jsonl(tmp_path / "in.jsonl", _bad_first(bad, good))
    out = tmp_path / "o.parquet"
    rc, stdout, err = run(spec, "--data", data, "--out", out, "--on-bad-row", "skip", "--chunk-rows", chunk_rows)
    assert rc == 0, err
    assert counts(stdout) == (6, 4, 2)
    table = pq.read_table(out)
    assert table.schema.field("extra").type == typ
    assert table.column("extra").to_pylist() == [None, None, good, good]
    assert table.column("prompt_id").to_pylist() == ["p1", "p1", "p2", "p2"]
    assert [json.loads(x)["row"] for x in (tmp_path / "o.rejects.jsonl").read_text().splitlines()] == [1, 2]


def test_a_field_only_rejected_rows_have_is_no_parquet_column(tmp_path, spec):
    rows = _bad_first("s", 7)
    for r in rows[4:]:
        del r["extra"]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.parquet", "--on-bad-row", "skip")
    assert rc == 0, err
    assert "extra" not in pq.read_table(tmp_path / "o.parquet").column_names


@pytest.mark.parametrize("chunk_rows", [2, 100])
def test_written_rows_that_disagree_are_still_refused_with_their_row(tmp_path, spec, chunk_rows):
    rows = _bad_first("s", 7)
    rows[0]["reward"] = 1  # p0 is good now: its "s" and p2's 7 cannot share a column
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.parquet"
    rc, _, err = run(spec, "--data", data, "--out", out, "--chunk-rows", chunk_rows)
    assert rc == 1 and not out.exists()
    assert err == ("shapec: error: row 5: extra: expected a value of type string (as other rows have it), got 7; "
                   "one Parquet column holds one type: make the rows agree, or write .jsonl instead\n")
