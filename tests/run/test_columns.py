"""`shapec run` works on whole Parquet columns: group starts, metadata and reward
components are computed with pyarrow compute and numpy, and give exactly what the row-by-row
rules give; a clean chunk is one shaper call; bad groups are found without one call per group."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shapec
from shapec.runtime.batch import BatchError
from shapec.runtime.binder import make_batch
from shapec.run import rundata
from shapec.tools.config import build_plan
from shapec.run.groupmeta import arrow_meta
from shapec.run.grouping import Grouping, _python_runs, iter_chunks, key_runs
from shapec.run.layouts import FlatLayout
from shapec.run.readers import ArrowBlock, RowsBlock

from .test_files_whole_or_untouched import counts, run

SPEC = """shaper t(p: float = 0.25) requires binary produces nonneg {
  input length: tokens
  meta m: float
  meta rec: {x: float, n: tokens, bd: band}
  meta lst: list(v: float, w: int)
  gate right = reward > 0
  term longest = -p * (m ?? 1) on argmax(length where right)
  term extra = 0.01 * (rec.x ?? 2) + 0.001 * sum(lst.w) + 0.002 * sum(lst.v)
  clamp >= 0
  factor fb = band(length, rec.bd) on right
}
"""
BAND = pa.struct([("a", pa.float64()), ("b", pa.float64()), ("f", pa.float64())])
REC = pa.struct([("x", pa.float64()), ("n", pa.int64()), ("bd", BAND)])
LST = pa.struct([("v", pa.list_(pa.float64())), ("w", pa.list_(pa.int64()))])


@pytest.fixture(scope="module")
def shaper():
    return shapec.compile_str(SPEC, backend="interpreter")["t"]


# ------------------------------------------------------------------------- group starts
KEYS = {
    "strings with nulls": pa.array(["a", "a", None, "b", "b", None, None, "c", "a"]),
    "floats with NaN": pa.array([1.0, 1.0, math.nan, 1.0, 2.0, None, -0.0, 0.0]),
    "floats with nulls": pa.array([1.0, None, 1.0, 2.0]),
    "no nulls": pa.array(["a", "a", "b", "c", "c"]),
    "ints": pa.array([3, 3, 4, 4, 4, 3], pa.int64()),
    "dictionary": pa.array(["x", "x", "y", None, "y", "x"]).dictionary_encode(),
    "binary": pa.array([b"k", b"k", b"j", None], pa.binary()),
    "bools": pa.array([True, True, False, None, False, True]),
    "large strings": pa.array(["a", None, "a", "b"], pa.large_string()),
    "structs (row by row)": pa.array([{"a": 1}, {"a": 1}, None, {"a": 2}]),
}


@pytest.mark.parametrize("name", list(KEYS))
def test_group_starts_from_arrow_compute_are_the_row_by_row_rule(name):
    keys = KEYS[name]
    table = pa.table({"prompt_id": keys})
    idx, change = key_runs(ArrowBlock(table), "prompt_id")
    ref_idx, ref_change = _python_runs(keys.to_pylist())
    assert idx.tolist() == ref_idx.tolist() and change.tolist() == ref_change.tolist()
    arrow = Grouping().starts(ArrowBlock(table), 0)
    rows = Grouping().starts(RowsBlock(table.to_pylist()), 0)
    assert arrow[0].tolist() == rows[0].tolist() and arrow[1].tolist() == rows[1].tolist()


def test_chunks_of_a_parquet_file_end_at_the_same_rows_as_jsonl_chunks():
    keys = [f"p{g}" for g in range(40) for _ in range(g % 5 + 1)]
    keys[17] = None
    table = pa.table({"prompt_id": pa.array(keys), "reward": np.ones(len(keys))})
    blocks = lambda wrap: (wrap(table.slice(i, 7)) for i in range(0, len(keys), 7))  # noqa: E731
    arrow = list(iter_chunks(blocks(ArrowBlock), Grouping(), 9))
    rows = list(iter_chunks(blocks(lambda t: RowsBlock(t.to_pylist())), Grouping(), 9))
    assert [(c.base, c.offsets.tolist(), c.unknown.tolist(), {i: str(e) for i, e in c.key_errors.items()})
            for c in arrow] == [(c.base, c.offsets.tolist(), c.unknown.tolist(),
                                 {i: str(e) for i, e in c.key_errors.items()}) for c in rows]


# ------------------------------------------------------------------------- metadata
def _band(a, b, f):
    return {"a": a, "b": b, "f": f}


VALID = {
    "absent": {},
    "nulls everywhere": {"m": pa.nulls(4, pa.float64()), "rec": pa.nulls(4, REC), "lst": pa.nulls(4, LST)},
    "numbers and bands": {
        "m": pa.array([0.5, None, 2, 3.5]),
        "rec": pa.array([{"x": 1.0, "n": 3, "bd": _band(1, 2, 0.5)}, None, {"x": None, "n": 1, "bd": None},
                         {"x": 2.0, "n": 0, "bd": _band(0, 10, 1)}], REC),
        "lst": pa.array([{"v": [1.0, 2.0], "w": [1, 2, 3]}, None, {"v": None, "w": [4]},
                         {"v": [5.0], "w": [6]}], LST)},
    "int bands and an undeclared null field": {
        "m": pa.array([1, 2, None, 4], pa.int32()),
        "rec": pa.array([{"x": 1.0, "bd": {"a": 1, "b": 3, "f": 1, "g": None}}] * 4,
                        pa.struct([("x", pa.float64()), ("bd", pa.struct([("a", pa.int64()), ("b", pa.int64()),
                                                                          ("f", pa.int64()), ("g", pa.int64())]))])),
        "lst": pa.array([{"v": [], "w": []}, {"v": [1.0, 2.0, 3.0], "w": [0, 0]}] * 2, LST)},
}
INVALID = {
    "b below a": {"rec": pa.array([{"bd": _band(1, 2, 0.5)}, {"bd": _band(3, 2, 0.5)}] * 2, REC)},
    "f above 1": {"rec": pa.array([{"bd": _band(1, 2, 1.5)}] * 4, REC)},
    "a null in a band": {"rec": pa.array([{"bd": {"a": None, "b": 2.0, "f": 1.0}}] * 4, REC)},
    "NaN in a band": {"rec": pa.array([{"bd": _band(math.nan, 2, 1)}] * 4, REC)},
    "a bool band": {"rec": pa.array([{"bd": {"a": True, "b": True, "f": True}}] * 4,
                                    pa.struct([("bd", pa.struct([(k, pa.bool_()) for k in "abf"]))]))},
    "an undeclared record field": {"rec": pa.array([{"x": 1.0, "zz": 1}] * 4,
                                                   pa.struct([("x", pa.float64()), ("zz", pa.int64())]))},
    "a record that is a string": {"rec": pa.array(["x", None, "y", None])},
    "a null list item": {"lst": pa.array([{"v": [None, 1.0], "w": [1]}] * 4, LST)},
    "a fractional int item": {"lst": pa.array([{"v": [1.0], "w": [1.5]}] * 4,
                                              pa.struct([("v", pa.list_(pa.float64())),
                                                         ("w", pa.list_(pa.float64()))]))},
    "an infinite list item": {"lst": pa.array([{"v": [math.inf], "w": [1]}] * 4, LST)},
    "a string metadata value": {"m": pa.array(["1", "2", "3", "4"])},
}


def _batches(shaper, table: pa.Table, starts: np.ndarray):
    """(arrow_meta per metadata, the batch from the rows, the batch from the columns or None)."""
    metas = {m.name: m for m in shaper.ir.metas}
    gms = {name: arrow_meta(ArrowBlock(table), starts, spec, spec.name) for name, spec in metas.items()}
    n = table.num_rows
    off = np.append(starts, n)

    def batch(metadata):
        return make_batch(shaper.ir, np.ones(n), offsets=off, channels={"length": np.ones(n)}, metadata=metadata)

    try:
        from_rows = batch({k: gm.rows for k, gm in gms.items()})
    except BatchError as err:
        from_rows = err
    columnar = all(gm.columns is not None for gm in gms.values())
    return gms, from_rows, batch({k: gm.take(None) for k, gm in gms.items()}) if columnar else None


def _same(a, b) -> bool:
    def arrays(batch):
        out = {f"meta {k}": v for k, v in batch.metas.items()} | {f"band {k}": v for k, v in batch.bands.items()}
        for k, (off, fields) in batch.lists.items():
            out |= {f"list {k}": off} | {f"list {k}.{f}": v for f, v in fields.items()}
        return out

    x, y = arrays(a), arrays(b)
    return x.keys() == y.keys() and all(x[k].dtype == y[k].dtype and x[k].tobytes() == y[k].tobytes() for k in x)


@pytest.mark.parametrize("name", list(VALID))
def test_valid_metadata_goes_columnar_and_gives_the_arrays_the_rows_give(shaper, name):
    table = pa.table({"reward": np.ones(8), **{k: v.take(pa.array([0, 0, 1, 1, 2, 2, 3, 3]))
                                              for k, v in VALID[name].items()}})
    starts = np.array([0, 2, 4, 6])
    gms, from_rows, from_columns = _batches(shaper, table, starts)
    assert not isinstance(from_rows, Exception) and from_columns is not None
    assert _same(from_rows, from_columns)
    for groups in ([1, 3], [0], [2, 3]):  # a subset of the groups (the rejects path) is the rows' subset
        g = np.array(groups)
        sub_off = np.append(np.arange(len(g)) * 2, 2 * len(g))
        one = {"channels": {"length": np.ones(2 * len(g))}, "offsets": sub_off}
        rows = make_batch(shaper.ir, np.ones(2 * len(g)), metadata={k: [m.rows[i] for i in g] for k, m in gms.items()},
                          **one)
        cols = make_batch(shaper.ir, np.ones(2 * len(g)), metadata={k: m.take(g) for k, m in gms.items()}, **one)
        assert _same(rows, cols)


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_metadata_goes_as_rows_so_the_shaper_words_the_error(shaper, name):
    table = pa.table({"reward": np.ones(4), **INVALID[name]})
    gms, from_rows, from_columns = _batches(shaper, table, np.arange(4))
    assert isinstance(from_rows, BatchError) and from_columns is None
    bad = [k for k, gm in gms.items() if gm.columns is None]
    assert bad and any(f"metadata['{k}" in str(from_rows) for k in bad)


CHECKED_AS_ROWS = {  # numbers go columnar even when bad: the shaper checks them as it checks the rows' numbers
    "a negative length": {"rec": pa.array([{"n": 1}, {"n": -1}] * 2, REC)},
    "an infinite value": {"m": pa.array([1.0, None, math.inf, 2.0])},
}


@pytest.mark.parametrize("name", list(CHECKED_AS_ROWS))
def test_bad_numbers_in_columns_give_the_error_the_rows_give(shaper, name):
    table = pa.table({"reward": np.ones(4), **CHECKED_AS_ROWS[name]})
    gms = {m.name: arrow_meta(ArrowBlock(table), np.arange(4), m, m.name) for m in shaper.ir.metas}
    errors = []
    for metadata in ({k: gm.rows for k, gm in gms.items()}, {k: gm.take(None) for k, gm in gms.items()}):
        with pytest.raises(BatchError) as err:
            make_batch(shaper.ir, np.ones(4), offsets=np.arange(5), channels={"length": np.ones(4)}, metadata=metadata)
        errors.append(str(err.value))
    assert errors[0] == errors[1] and ("index 1" in errors[0] or "index 2" in errors[0])


# ------------------------------------------------------------------------- whole chunks
def _chunk(table: pa.Table):
    return next(iter_chunks(iter([ArrowBlock(table)]), Grouping(), table.num_rows))


class _Counting:
    """The shaper, recording the metadata of every call."""

    def __init__(self, shaper, calls: list):
        self._shaper, self._calls = shaper, calls

    def __getattr__(self, name):
        return getattr(self._shaper, name)

    def __call__(self, *args, **kwargs):
        self._calls.append(kwargs["metadata"])
        return self._shaper(*args, **kwargs)


def _table(G: int, bands: dict[int, dict] | None = None) -> pa.Table:
    gid = np.repeat(np.arange(G), 2)
    rec = [{"x": 1.0, "n": g, "bd": (bands or {}).get(g, _band(1, 20, 0.5))} for g in range(G)]
    return pa.table({"prompt_id": pa.array([f"p{g:04d}" for g in gid]), "reward": np.tile([1.0, 0.0], G),
                     "length": (gid % 7).astype(np.int64), "rec": pa.array(rec, REC).take(pa.array(gid))})


def test_a_clean_chunk_is_one_call_with_columnar_metadata(shaper):
    calls: list = []
    plan = build_plan(shaper, {}, None, [])
    out = rundata.shape_chunk(_Counting(shaper, calls), plan, FlatLayout(), _chunk(_table(300)), "stop")
    assert len(calls) == 1 and len(out.good_rows) == 600 and not out.rejected
    assert isinstance(calls[0]["m"], np.ndarray) and calls[0]["rec"]["bd"].shape == (300, 4)
    assert set(calls[0]["lst"]) == {"offsets", "v", "w"}


def test_bad_groups_are_found_in_a_few_calls_with_the_messages_of_one_group_alone(shaper, tmp_path):
    bad = {3: _band(5, 2, 0.5), 100: _band(1, 2, 7.0), 257: _band(9, 9, 0)}
    calls: list = []
    plan = build_plan(shaper, {}, None, [])
    out = rundata.shape_chunk(_Counting(shaper, calls), plan, FlatLayout(), _chunk(_table(300, bad)), "skip")
    assert len(calls) <= 2 + 2 * len(bad) * math.ceil(math.log2(300))  # not one call per group
    reasons = dict(out.rejected)
    assert sorted(reasons) == [6, 7, 200, 201, 514, 515] and len(out.good_rows) == 594
    assert reasons[6] == ("in a group with a bad row: row 7 (first row of its group): metadata['rec.bd']: "
                          "group 0: band needs b > a, got a=5, b=2")
    assert reasons[515] == ("in a group with a bad row: row 515 (first row of its group): metadata['rec.bd']: "
                            "group 0: band needs b > a, got a=9, b=9")
    spec = tmp_path / "t.shape"
    spec.write_text(SPEC)
    pq.write_table(_table(300, bad), tmp_path / "in.parquet")
    rc, _, err = run(spec, "--data", tmp_path / "in.parquet", "--out", tmp_path / "o.parquet")
    assert rc == 1 and err == ("shapec: error: row 7 (first row of its group): metadata['rec.bd']: group 0: "
                               "band needs b > a, got a=5, b=2\n")
    rc, stdout, _ = run(spec, "--data", tmp_path / "in.parquet", "--out", tmp_path / "o.parquet",
                        "--on-bad-row", "skip", "--chunk-rows", 64)
    assert rc == 0 and counts(stdout) == (600, 594, 6)
    assert pq.read_table(tmp_path / "o.parquet").column("rec").to_pylist() == [
        r for i, r in enumerate(_table(300, bad).column("rec").to_pylist()) if i // 2 not in bad]


def test_prompt_ids_that_contradict_the_group_size_in_parquet_are_named_as_in_jsonl(tmp_path):
    spec = tmp_path / "t.shape"
    spec.write_text(SPEC)
    keys = ["p0", "p0", None, "p0", "p1", "p1", "p1", "p2"]
    pq.write_table(pa.table({"prompt_id": pa.array(keys), "reward": np.ones(8), "length": np.ones(8)}),
                   tmp_path / "in.parquet")
    for size, message in ((4, 'rows 5 and 8: prompt_id "p1" and "p2" fall in one group'),
                          (2, 'rows 2 and 4: prompt_id "p0" spans two groups')):
        rc, _, err = run(spec, "--data", tmp_path / "in.parquet", "--out", tmp_path / "o.parquet",
                         "--group-size", size, "--chunk-rows", size)
        assert rc == 1 and err.startswith(f"shapec: error: {message} of the group size {size} (--group-size)")


def test_dense_computed_columns_are_written_without_a_dictionary(tmp_path):
    spec = tmp_path / "t.shape"
    spec.write_text(SPEC)
    table = _table(3000, {g: _band(0, 2000, 0.5) for g in range(3000)})
    table = table.set_column(2, "length", pa.array(np.arange(6000) % 997, pa.int64()))
    pq.write_table(table, tmp_path / "in.parquet")
    rc, _, _ = run(spec, "--data", tmp_path / "in.parquet", "--out", tmp_path / "o.parquet", "--breakdown")
    assert rc == 0
    group = pq.ParquetFile(tmp_path / "o.parquet").metadata.row_group(0)
    encodings = {group.column(i).path_in_schema: group.column(i).encodings for i in range(group.num_columns)}
    assert not any("RLE_DICTIONARY" in encodings[c] for c in ("factor.fb", "reward"))  # 997 lengths: dense
    assert all("RLE_DICTIONARY" in encodings[c] for c in ("prompt_id", "rec.bd.a", "term.extra", "env_reward"))


def test_binary_values_to_jsonl_are_a_clear_error_and_leave_no_file(tmp_path):
    data = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt_id": pa.array([b"\xff", b"\xff"], pa.binary()), "reward": [1.0, 0.0],
                             "reasoning": [10.0, 20.0], "answer": [1.0, 2.0], "low_effort": [0.0, 0.0]}), data)
    out = tmp_path / "out.jsonl"
    rc, _, err = run("nemo_rl", "--data", data, "--group-by", "prompt_id", "--out", out)
    assert rc == 1 and "binary value cannot be written to JSONL" in err and "Traceback" not in err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["in.parquet"]
