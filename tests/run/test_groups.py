"""`shapec run` groups are never silently wrong: a row whose
group cannot be known takes every group it may belong to with it, a bad key is a bad row, memory
stays bounded by the chunk size, and no value in a row gives a traceback."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shapec
from shapec.run.grouping import Grouping, iter_chunks
from shapec.run.readers import RowsBlock
from shapec.run.spec import ToolError

from .test_files_whole_or_untouched import SPEC, counts, rows_of, run, write_jsonl

BACKENDS = ["interpreter", "numba"]


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "longest.shape"
    path.write_text(SPEC)
    return path


def clean_rewards(rows: list[dict], backend: str = "interpreter") -> list[float]:
    """The API on these rows alone (grouped by prompt_id): what run must write for them."""
    shaper = shapec.compile_str(SPEC, backend=backend)["longest"]
    keys = [r["prompt_id"] for r in rows]
    offsets = [0] + [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]] + [len(keys)]
    return list(shaper([r["reward"] for r in rows], offsets=np.array(offsets),
                       channels={"length": [r["length"] for r in rows]}).rewards)


def read(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


# ------------------------------------------------------------------------- 13: a missing or null key
@pytest.mark.parametrize("key", ["missing", "null"])
def test_a_row_without_a_key_between_groups_is_a_bad_row(tmp_path, spec, key):
    a, b, c = rows_of(1, 3, 0), rows_of(1, 3, 1), rows_of(1, 3, 2)
    stray = {"reward": 1, "length": 99} | ({} if key == "missing" else {"prompt_id": None})
    data = write_jsonl(tmp_path / "in.jsonl", a + [stray] + b + c)
    got = "nothing (the field is missing)" if key == "missing" else "null"
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 1 and err == f"shapec: error: row 4: prompt_id: expected the group key, got {got}\n"
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 0, err
    assert counts(stdout) == (10, 3, 7)  # it may belong to p0 or p1: both go; p2 is shaped alone
    shaped = read(tmp_path / "o.jsonl")
    assert [r["prompt_id"] for r in shaped] == ["p2"] * 3 and [r["reward"] for r in shaped] == clean_rewards(c)
    rejects = {r["row"]: r["reason"] for r in read(tmp_path / "o.rejects.jsonl")}
    assert rejects[4] == (f"row 4: prompt_id: expected the group key, got {got}; its group cannot be known, "
                          "so every group it may belong to is rejected")
    assert rejects[1] == rejects[5] == ("in a group row 4 may belong to (its group cannot be known): row 4: "
                                        f"prompt_id: expected the group key, got {got}")


def test_a_row_without_a_key_inside_a_group_rejects_that_group_only(tmp_path, spec):
    a, b = rows_of(1, 4, 0), rows_of(1, 3, 1)
    del a[2]["prompt_id"]
    data = write_jsonl(tmp_path / "in.jsonl", a + b)
    rc, stdout, _ = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 0 and counts(stdout) == (7, 3, 4)
    assert [r["reward"] for r in read(tmp_path / "o.jsonl")] == clean_rewards(b)


def test_a_parquet_null_key_is_a_bad_row(tmp_path, spec):
    rows = rows_of(3, 3)
    rows[3]["prompt_id"] = None  # the first row of p1
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    rc, _, err = run(spec, "--data", tmp_path / "in.parquet", "--out", tmp_path / "o.jsonl")
    assert rc == 1 and err == "shapec: error: row 4: prompt_id: expected the group key, got null\n"
    rc, stdout, _ = run(spec, "--data", tmp_path / "in.parquet", "--out", tmp_path / "o.parquet", "--on-bad-row", "skip")
    assert rc == 0 and counts(stdout) == (9, 3, 6)
    assert pq.read_table(tmp_path / "o.parquet").column("reward").to_pylist() == clean_rewards(rows[6:])


# ------------------------------------------------------------------------- 14: a line whose group is unknown
@pytest.mark.parametrize("chunk_rows", [4, 5, 1000])
def test_a_truncated_first_row_rejects_both_groups_it_may_belong_to(tmp_path, spec, chunk_rows):
    a, b, c = rows_of(1, 3, 0), rows_of(1, 3, 1), rows_of(1, 3, 2)
    lines = a + [json.dumps(b[0])[:20]] + b[1:] + c  # b's first row cut short
    data = write_jsonl(tmp_path / "in.jsonl", lines)
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip",
                          "--chunk-rows", chunk_rows)
    assert rc == 0, err
    assert counts(stdout) == (9, 3, 6) and "3 in, 1 shaped, 0 passed through, 2 rejected" in stdout
    assert [r["reward"] for r in read(tmp_path / "o.jsonl")] == clean_rewards(c)
    rejects = {r["row"]: r for r in read(tmp_path / "o.rejects.jsonl")}
    assert sorted(rejects) == [1, 2, 3, 4, 5, 6]
    why = "row 4: <line>: not valid JSON (Expecting property name enclosed in double quotes at column 21)"
    assert rejects[4]["reason"] == why + "; its group cannot be known, so every group it may belong to is rejected"
    assert rejects[4]["record"] == lines[3]
    assert rejects[2]["reason"] == rejects[6]["reason"] == \
        f"in a group row 4 may belong to (its group cannot be known): {why}"


# ------------------------------------------------------------------------- 15: keys no row has; bounded memory
def test_group_by_a_field_no_row_has_is_an_error_with_the_closest_field(tmp_path, spec):
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(3))
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--group-by", "promt_id")
    assert rc == 1 and not (tmp_path / "o.jsonl").exists()
    assert err == ("shapec: error: group key 'promt_id' (--group-by): no row of the first 12 has this field; "
                   "did you mean 'prompt_id'?\n")


def test_nemo_gym_rows_without_a_group_key_or_size_are_an_error(tmp_path):
    rows = [{"full_result": {"reward": 1.0, "response": {"output": []}}} for _ in range(4)]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    rc, _, err = run("nemo_rl", "--layout", "nemo-gym", "--length-type", "chars", "--data", data,
                     "--out", tmp_path / "o.jsonl")
    assert rc == 1
    assert err == ("shapec: error: group key 'prompt_id' (the default --group-by): no row of the first 4 has this "
                   "field; the rows have full_result, full_result.reward, full_result.response\n")


def _counted(blocks, pulled: list):
    for block in blocks:
        pulled[0] += len(block)
        yield block


@pytest.mark.parametrize("sizes", [[3] * 40, [1, 7, 2, 8, 8, 1, 5] * 6, [8] * 30])
def test_the_chunker_holds_at_most_three_chunks_of_rows(sizes):
    chunk_rows, block = 8, 5
    rows = [{"prompt_id": g, "reward": 1} for g, n in enumerate(sizes) for _ in range(n)]
    blocks = (RowsBlock(rows[i:i + block]) for i in range(0, len(rows), block))
    pulled, done = [0], 0
    for chunk in iter_chunks(_counted(blocks, pulled), Grouping(), chunk_rows):
        assert pulled[0] - done <= 3 * chunk_rows  # rows read but not yet handed on, this chunk included
        assert len(chunk.block) < 2 * chunk_rows
        done += len(chunk.block)
    assert done == len(rows)


def test_a_group_longer_than_the_chunk_is_an_error_before_memory_grows(tmp_path, spec):
    pulled = [0]
    blocks = (RowsBlock([{"prompt_id": "same", "reward": 1}] * 100) for _ in range(10**6))
    with pytest.raises(ToolError) as err:
        list(iter_chunks(_counted(blocks, pulled), Grouping(), 1000))
    assert str(err.value) == ("row 1: the group of prompt_id \"same\" starting here has more than 1000 rows "
                              "(--chunk-rows); a group must fit in one chunk: raise --chunk-rows, or check --group-by")
    assert pulled[0] <= 1100
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(1, 12))
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--chunk-rows", 8)
    assert rc == 1 and "row 1: the group of prompt_id \"p0\" starting here has more than 8 rows" in err


# ------------------------------------------------------------------------- 16: invalid UTF-8
def test_invalid_utf8_is_a_bad_row_naming_the_byte_offset(tmp_path, spec):
    rows = rows_of(2, 3)
    lines = [json.dumps(r).encode() for r in rows]
    lines[4] = lines[4].replace(b'"\\u00e9"', b'"\xff"')  # a carried field of p1's second row
    data = tmp_path / "in.jsonl"
    data.write_bytes(b"\n".join(lines) + b"\n")
    offset = sum(len(x) + 1 for x in lines[:4]) + lines[4].index(b"\xff")
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 1
    assert err == f"shapec: error: row 5: <line>: not valid UTF-8 (byte 0xff at byte offset {offset} of the file)\n"
    rc, stdout, _ = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 0 and counts(stdout) == (6, 3, 3)
    assert [r["note"] for r in read(tmp_path / "o.jsonl")] == ["é"] * 3  # nothing decoded with replacement
    bad = {r["row"]: r for r in read(tmp_path / "o.rejects.jsonl")}
    assert "\\xff" in bad[5]["record"]


def test_invalid_utf8_in_the_group_key_does_not_split_a_group(tmp_path, spec):
    rows = rows_of(2, 4)
    lines = [json.dumps(r).encode() for r in rows]
    lines[2] = lines[2].replace(b'"p0"', b'"p\xff0"')
    data = tmp_path / "in.jsonl"
    data.write_bytes(b"\n".join(lines) + b"\n")
    rc, stdout, _ = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 0 and counts(stdout) == (8, 4, 4)
    assert [r["reward"] for r in read(tmp_path / "o.jsonl")] == clean_rewards(rows[4:])


# ------------------------------------------------------------------------- 17: values that used to traceback
@pytest.mark.parametrize("line,field,message,known", [
    ('{"prompt_id": "p1", "reward": 1%s, "length": 3}' % ("0" * 400), "reward",
     "expected a number that a float64 holds exactly (at most 2**53), got an integer of 401 digits", True),
    ('{"prompt_id": "p1", "reward": 1, "length": 3, "extra": {"n": [1%s]}}' % ("0" * 5000), "extra.n[0]",
     "expected a number, got an integer of 5001 digits (more than the 4300 Python reads)", True),
    # a line that cannot be read has no known group: row 4 ends p1, so p2 (rows 5-6) may be its group too
    ('{"prompt_id": "p1", "reward": 1, "length": 3, "deep": %s}' % ("[" * 200_000 + "]" * 200_000), "<line>",
     "not readable: arrays or objects nested deeper than the JSON reader goes (about 1000 levels)", False),
])
def test_unusable_values_are_bad_rows_not_tracebacks(tmp_path, spec, line, field, message, known):
    rows = rows_of(3, 2)
    data = write_jsonl(tmp_path / "in.jsonl", rows[:3] + [line] + rows[4:])
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 1 and err == f"shapec: error: row 4: {field}: {message}\n"
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    kept = rows[:2] + rows[4:] if known else rows[:2]
    assert rc == 0 and counts(stdout) == (6, len(kept), 6 - len(kept)), err
    assert [r["reward"] for r in read(tmp_path / "o.jsonl")] == clean_rewards(kept)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_parquet_uint64_length_past_2_53_is_a_bad_row(tmp_path, spec, backend):
    rows = rows_of(3, 2)
    table = pa.Table.from_pylist(rows).set_column(
        2, "length", pa.array([r["length"] for r in rows[:3]] + [2**64 - 1] + [r["length"] for r in rows[4:]],
                              pa.uint64()))
    pq.write_table(table, tmp_path / "in.parquet")
    rc, _, err = run(spec, "--data", tmp_path / "in.parquet", "--out", tmp_path / "o.jsonl")
    assert rc == 1 and err == ("shapec: error: row 4: length: expected a number >= 0 (tokens) that a float64 holds "
                               "exactly (at most 2**53), got 18446744073709551615\n")
    rc, stdout, _ = run(spec, "--data", tmp_path / "in.parquet", "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip",
                        "--backend", backend)
    assert rc == 0 and counts(stdout) == (6, 4, 2)
    assert [r["reward"] for r in read(tmp_path / "o.jsonl")] == clean_rewards(rows[:2] + rows[4:], backend)


# ------------------------------------------------------------------------- 6 and #16: group sizes
def test_a_group_size_that_does_not_divide_the_rows_needs_the_flag(tmp_path, spec):
    rows = rows_of(5, 2)[:-1]
    for r in rows:
        del r["prompt_id"]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--group-size", 2)
    assert rc == 1 and not (tmp_path / "o.jsonl").exists()
    assert err == ("shapec: error: 9 rows are not a multiple of the group size 2 (--group-size): the last group, "
                   "rows 9-9, has 1 row; pass --allow-short-last-group to shape it as it is\n")
    rc, stdout, _ = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--group-size", 2,
                        "--allow-short-last-group")
    assert rc == 0 and counts(stdout) == (9, 9, 0) and "5 in, 5 shaped" in stdout


@pytest.mark.parametrize("size,message", [
    (8, 'rows 1 and 5: prompt_id "p0" and "p1" fall in one group of the group size 8 (--group-size)'),
    (2, 'rows 2 and 3: prompt_id "p0" spans two groups of the group size 2 (--group-size)')])
def test_prompt_ids_that_contradict_the_group_size_stop_the_run(tmp_path, spec, size, message):
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(4, 4))
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--group-size", size)
    assert rc == 1
    assert err == (f"shapec: error: {message}; the rows' prompt_id contradicts the group size (group with "
                   "--group-by prompt_id, or fix the group size)\n")
    rc, _, _ = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--group-size", 4)
    assert rc == 0


def test_the_config_group_size_is_checked_against_nemo_gym_prompt_ids(tmp_path):
    from .test_run_command import EXAMPLES

    rows = read(EXAMPLES / "nemo_gym_rollouts.jsonl")[:8]
    for i, r in enumerate(rows):
        r["prompt_id"] = f"q{i // 4}"  # four rollouts per prompt, as the bundled rows had once
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    config = tmp_path / "c.yaml"
    config.write_text("grpo:\n  num_generations_per_prompt: 8\n  length_penalty:\n    default:\n      length_type: chars\n")
    rc, _, err = run("nemo_rl", "--layout", "nemo-gym", "--data", data, "--out", tmp_path / "o.jsonl",
                     "--config", config)
    assert rc == 1
    assert err.startswith('shapec: error: rows 1 and 5: prompt_id "q0" and "q1" fall in one group of the group '
                          "size 8 (the config's grpo.num_generations_per_prompt)")


def test_approximate_is_only_said_when_chunks_were_combined(tmp_path, spec):
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(4))
    _, one, _ = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    _, many, _ = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--chunk-rows", 4)
    assert "(1 chunk)" in one and "(approximate" not in one
    assert "(4 chunks)" in many and "  m  " in many and "(approximate: combined over chunks)" in many
