"""`shapec run` never loses or mangles a value on the way to the output: every field of every row
reaches a Parquet output or is refused with its row and field; a lone surrogate, a key that
repeats in a JSONL object, a repeated Parquet column or a field run would overwrite is a
one-line error, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

SPEC = ("shaper s() requires binary produces unit {\n  input length: tokens\n  gate right = reward > 0\n"
        "  factor f = 1 - 0.5 * (length / max(length)) on right\n}\n")


@pytest.fixture
def spec(tmp_path) -> Path:
    path = tmp_path / "s.shape"
    path.write_text(SPEC)
    return path


def shapec(*args) -> tuple[int, str, str]:
    """`shapec ...` in a subprocess (the shapec on its path, so a PYTHONPATH checks another tree;
    stdout is UTF-8 as on a terminal): (exit status, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "SHAPEC_BACKEND": "interpreter", "PYTHONIOENCODING": "utf-8"},
                          timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def run(*args) -> tuple[int, str, str]:
    return shapec("run", *args, "--no-progress")


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def row(pid: str, reward, length, **extra) -> dict:
    return {"prompt_id": pid, "reward": reward, "length": length, **extra}


# ------------------------------------------------------------------------- B1: every field reaches Parquet
@pytest.mark.parametrize("chunk_rows", [1, 100])
def test_parquet_output_keeps_fields_the_first_row_lacks(tmp_path, spec, chunk_rows):
    rows = [row("p0", 1, 1), row("p1", 0, 2, note="keep me"), row("p2", 1, 3, m={"a": 1}),
            row("p3", 1, 4, m={"a": 1.5, "b": "z"})]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.parquet", "--chunk-rows", chunk_rows)
    assert rc == 0, err
    out = pq.read_table(tmp_path / "o.parquet").to_pylist()
    assert [r["note"] for r in out] == [None, "keep me", None, None]
    assert [r["m"] for r in out] == [None, None, {"a": 1.0, "b": None}, {"a": 1.5, "b": "z"}]


@pytest.mark.parametrize("chunk_rows", [1, 100])
@pytest.mark.parametrize("second, where, got", [
    ({"x": "s"}, "x", '"s"'),  # a string in a column of integers
    ({"m": {"a": 1.5, "b": "z"}}, "m.a", "1.5"),  # its float would be truncated to the first row's int
    ({"x": 2**63 + 3}, "x", str(2**63 + 3)),  # past int64
])
def test_a_value_that_does_not_fit_the_parquet_column_names_its_row_and_field(tmp_path, spec, chunk_rows,
                                                                               second, where, got):
    data = write_jsonl(tmp_path / "d.jsonl", [row("p0", 1, 1, x=1, m={"a": 1, "b": 1}), row("p1", 1, 1, **second)])
    out = tmp_path / "o.parquet"
    rc, _, err = run(spec, "--data", data, "--out", out, "--chunk-rows", chunk_rows)
    assert rc == 1 and "Traceback" not in err
    assert f"row 2: {where}: expected" in err and got in err and ".jsonl" in err, err
    assert not out.exists()


def test_a_value_of_no_arrow_type_is_named_not_dropped(tmp_path, spec):
    data = write_jsonl(tmp_path / "d.jsonl", [row("p0", 1, 1, t=[1, "a"])])
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.parquet")
    assert rc == 1 and 'row 1: t: expected values of one Arrow type, got [1, "a"]' in err, err


# ------------------------------------------------------------------------- B2: lone surrogates
SURROGATE = '{"prompt_id":"p\\ud800","reward":1,"length":1}'


def test_a_lone_surrogate_is_a_bad_row_naming_its_field(tmp_path, spec):
    data = write_jsonl(tmp_path / "d.jsonl", [row("p0", 1, 1), SURROGATE, row("p2", 1, 2, **{"k\udc00": 1})])
    out = tmp_path / "o.parquet"
    rc, _, err = run(spec, "--data", data, "--out", out)
    assert rc == 1 and err.strip().splitlines() == [
        "shapec: error: row 2: prompt_id: expected Unicode text, got a lone surrogate \\ud800 (half of a UTF-16 "
        "pair, which UTF-8 and Parquet cannot hold)"]
    rc, stdout, err = run(spec, "--data", data, "--out", out, "--on-bad-row", "skip")
    assert rc == 0, err
    assert [r["prompt_id"] for r in pq.read_table(out).to_pylist()] == ["p0"]
    rejects = [json.loads(line) for line in (tmp_path / "o.rejects.jsonl").read_text().splitlines()]
    assert [(r["row"], r["group"]) for r in rejects] == [(2, "p\\ud800"), (3, "p2")]
    assert rejects[0]["record"] == SURROGATE and "row 3: k\\udc00: expected Unicode text" in rejects[1]["reason"]


@pytest.mark.parametrize("line, key", [
    ('{"prompt_id":"p1","reward":1,"reward":0,"length":1}', "reward"),
    ('{"prompt_id":"p1","reward":1,"length":1,"m":{"a":1,"a":2}}', "a"),
    ('{"prompt_id":"p1","reward":1,"length":1,"n":' + "1" * 5000 + ',"n":2}', "n"),  # and a too-long integer
    ('{"prompt_id":"p1","m":{"a":1,"a":2},"reward":1,"length":1,"n":' + "1" * 5000 + '}', "a"),
], ids=["top", "nested", "long_int_first", "long_int_after"])
def test_a_key_that_repeats_in_an_object_is_a_bad_row(tmp_path, spec, line, key):
    data = write_jsonl(tmp_path / "d.jsonl", [row("p0", 1, 1), line, row("p2", 0, 2)])
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 1 and "Traceback" not in err and err.startswith("shapec: error: row 2: "), err
    assert f"got {key!r} 2 times" in err
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 0, err
    out = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["prompt_id"] for r in out] == ["p0", "p2"]  # the bad row's group is known: the others stay


def test_explain_shows_a_lone_surrogate_row_as_rejected(tmp_path, spec):
    rc, stdout, err = shapec("explain", spec, "--data", write_jsonl(tmp_path / "d.jsonl", [SURROGATE]))
    assert rc == 0 and "Traceback" not in err, err
    assert "row 1: prompt_id: expected Unicode text" in stdout


# ------------------------------------------------------------------------- B3: repeated Parquet columns
@pytest.mark.parametrize("names, shown", [
    (["prompt_id", "reward", "length", "reward"], "'reward' appears 2 times"),
    (["prompt_id", "reward", "length", "note", "note", "note"], "'note' appears 3 times"),
])
def test_repeated_parquet_column_names_are_refused(tmp_path, spec, names, shown):
    data = tmp_path / "dup.parquet"
    arrays = [pa.array(["p"]), pa.array([1.0]), pa.array([1.0])] + [pa.array([float(i)]) for i in range(len(names) - 3)]
    pq.write_table(pa.Table.from_arrays(arrays, names=names), data)
    for out in ("o.jsonl", "o.parquet"):
        rc, _, err = run(spec, "--data", data, "--out", tmp_path / out)
        assert rc == 1 and err.strip().splitlines() == [
            f"shapec: error: {data}: column {shown}; column names must be unique: rename or drop the copies"]


def test_a_repeated_struct_field_is_refused(tmp_path, spec):
    data = tmp_path / "dup.parquet"
    meta = pa.StructArray.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    pq.write_table(pa.table({"prompt_id": ["p"], "reward": [1.0], "length": [1.0], "meta": meta}), data)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 1 and "column 'meta.a' appears 2 times" in err, err


# ------------------------------------------------------------------------- B10: files of bad lines only
@pytest.mark.parametrize("content, message", [
    (b"garbage\n", "row 1: <line>: not valid JSON (Expecting value at column 1)"),
    ('{"prompt_id": "p0", "reward": 1, "length": 1}\n'.encode("utf-16"), "row 1: <line>: not valid UTF-8"),
    (b'{"prompt_id":"p0","reward":1,"length":1}\r{"prompt_id":"p0","reward":1,"length":1}\r',
     "row 1: <line>: not valid JSON (Extra data"),
])
def test_a_file_without_readable_rows_gets_the_rows_error(tmp_path, spec, content, message):
    data = tmp_path / "d.jsonl"
    data.write_bytes(content)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--chunk-rows", 1)
    assert rc == 1 and message in err and "group key" not in err, err


def test_a_byte_order_mark_opening_a_file_is_not_part_of_row_1(tmp_path, spec):
    data = tmp_path / "d.jsonl"
    rows = [row("p0", 1, 1), row("p0", 0, 2)]
    data.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows).encode())
    rc, out, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 0 and "rows: 2 in = 2 out + 0 rejected" in out, err
    assert [json.loads(x)["prompt_id"] for x in (tmp_path / "o.jsonl").read_text().splitlines()] == ["p0", "p0"]


def test_a_byte_order_mark_inside_a_file_is_a_bad_line(tmp_path, spec):
    data = tmp_path / "d.jsonl"
    first, second = (json.dumps(row("p0", r, n)).encode() for r, n in ((1, 1), (0, 2)))
    data.write_bytes(first + b"\n\xef\xbb\xbf" + second)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 1 and "row 2: <line>: not valid JSON" in err, err


def test_a_missing_group_key_is_still_named_after_bad_lines(tmp_path, spec):
    data = write_jsonl(tmp_path / "d.jsonl", ["garbage", {"reward": 1, "length": 1}])
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--chunk-rows", 1)
    assert rc == 1 and "group key 'prompt_id' (the default --group-by): no row of the first 2 has this field" in err


# ------------------------------------------------------------------------- S1: fields run writes
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("field, flags", [("env_reward", ()), ("factor.f", ("--breakdown",))])
def test_a_field_run_writes_is_refused_not_overwritten(tmp_path, spec, fmt, field, flags):
    rows = [row("p0", 1, 1), row("p1", 1, 2, **{field: 0.25})]
    data = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        write_jsonl(data, rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows, schema=pa.Table.from_pylist(rows[::-1]).schema), data)
    first = 1 if fmt == "parquet" else 2  # a Parquet column is in every row
    for out, mode in (("o.jsonl", "stop"), ("o.parquet", "skip")):
        rc, _, err = run(spec, "--data", data, "--out", tmp_path / out, "--on-bad-row", mode, *flags)
        assert rc == 1 and f"row {first}: {field}: expected no such field: run writes" in err, err
        assert not (tmp_path / out).exists()


def test_shaping_an_output_again_is_refused(tmp_path, spec):
    data = write_jsonl(tmp_path / "d.jsonl", [row("p0", 1, 1), row("p0", 0, 2)])
    assert run(spec, "--data", data, "--out", tmp_path / "once.jsonl")[0] == 0
    rc, _, err = run(spec, "--data", tmp_path / "once.jsonl", "--out", tmp_path / "twice.jsonl")
    assert rc == 1 and "row 1: env_reward: expected no such field" in err and "already shaped" in err


# ------------------------------------------------------------------------- group keys and agent names
def test_a_true_key_is_not_the_group_of_1(tmp_path):
    """JSON's true is not 1 (Python's True == 1 == 1.0 merged the two runs into one group); nor is
    1.0 or "1" (a key that comes back after other groups is an error, test_hardening3_cli_groups)."""
    rows = [row(k, 1, n) for k, n in ((1, 100), (True, 300), (0, 100), (False, 300), (1.0, 100), ("1", 300))]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    spec = tmp_path / "g.shape"
    spec.write_text("shaper g() requires binary produces real {\n  input length: tokens\n"
                    "  term n = float(count(reward > 0)) on reward > 0\n}\n")
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 0, err
    assert "groups: 6 in" in stdout
    assert [json.loads(x)["reward"] for x in (tmp_path / "o.jsonl").read_text().splitlines()] == [2.0] * 6


def test_an_agent_name_that_is_not_a_string_is_a_bad_row(tmp_path):
    nemo = {"reasoning": 5, "answer": 1, "low_effort": False}
    rows = [{"prompt_id": p, "reward": r, "agent": a, **nemo}
            for p, r, a in (("p0", 1, "a"), ("p0", 0, "a"), ("p1", 1, ["x"]), ("p1", 1, ["x"]))]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    config = tmp_path / "c.yaml"
    config.write_text("grpo:\n  length_penalty:\n    default: {group_total_length_penalty_coeff: 0.2}\n"
                      "    agent_overrides:\n      a: {longest_total_penalty: 0.3}\n")
    args = ("nemo_rl", "--data", data, "--config", config, "--out", tmp_path / "o.jsonl")
    rc, _, err = run(*args)
    assert rc == 1 and err.strip().splitlines()[-1] == (
        "shapec: error: row 3: agent: expected the agent's name (a string), got [\"x\"]"), err
    rc, _, err = run(*args, "--on-bad-row", "skip")
    assert rc == 0 and "Traceback" not in err, err
    assert [json.loads(x)["prompt_id"] for x in (tmp_path / "o.jsonl").read_text().splitlines()] == ["p0", "p0"]


# ------------------------------------------------------------------------- the rollouts a shaper drops
@pytest.mark.parametrize("out_name", ["o.jsonl", "o.parquet"])
@pytest.mark.parametrize("data_name", ["d.jsonl", "d.parquet"])
def test_the_rollouts_a_shaper_drops_are_written_as_a_kept_column(tmp_path, data_name, out_name):
    rows = [row("p0", 1, 30), row("p0", 1, 10), row("p0", 0, 20), row("p1", 1, 5), row("p1", 0, 50)]
    data = tmp_path / data_name
    if data_name.endswith(".jsonl"):
        write_jsonl(data, rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), data)
    out = tmp_path / out_name
    rc, _, err = run("gfpo", "--data", data, "--out", out, "--set", "k=2", "--set", "scale=none")
    assert rc == 0, err
    written = (pq.read_table(out).to_pylist() if out_name.endswith(".parquet")
               else [json.loads(line) for line in out.read_text().splitlines()])
    assert [r["kept"] for r in written] == [False, True, True, True, True]  # p0 keeps its two shortest
    assert [r["reward"] for r in written] == [0.0, 0.5, -0.5, 0.5, -0.5]
