"""`--on-bad-row skip` never changes another group's rewards: a shaper whose rewards read a
batch-level value (a `batch.mean`, a state, a batch gate) would give the other groups other rewards
without the bad group, so skipping is refused there with the row and the value named; where the
batch value feeds only metrics, or a branch the params turn off, the bad group is left out."""

from __future__ import annotations

import contextlib
import io

import pytest

import shapec
from shapec.cli import main
from shapec.ir.nodes import BATCH, Op
from shapec.runtime.batch_reach import first_batch_read
from shapec.runtime.params import param_arrays

from .test_groups import read
from .test_files_whole_or_untouched import counts, run, write_jsonl

SPEC = """shaper centred(scope: enum(group, batch) = group, w: float = 0.001, extra: bool = false) produces real {
  input length: tokens
  let m = scope == "group" ? mean(length) : batch.mean(length)
  let spread = max(length) - min(length)
  term t = w * (m - length) / max(length)
  term u = extra and spread > 0 ? w * batch.max(length) / max(length) : 0
  metric seen = batch.mean(length)
}
"""


def _rows(bad_group: int | None = None) -> list[dict]:
    rows = [{"prompt_id": f"p{g}", "reward": float(i % 2), "length": (g * 7 + i * 5) % 23 + 1}
            for g in range(4) for i in range(3)]
    if bad_group is not None:
        rows[3 * bad_group + 1]["length"] = -5  # a negative length: a bad row
    return rows


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "centred.shape"
    path.write_text(SPEC)
    return path


@pytest.mark.parametrize("sets", [(), ("--set", "scope=group"), ("--set", "extra=false", "--set", "scope=group")])
def test_a_batch_value_no_reward_reads_lets_the_bad_group_go(tmp_path, spec, sets):
    data = write_jsonl(tmp_path / "in.jsonl", _rows(bad_group=1))
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip", *sets)
    assert rc == 0, err
    assert counts(stdout) == (12, 9, 3)
    clean = write_jsonl(tmp_path / "clean.jsonl", [r for r in _rows() if r["prompt_id"] != "p1"])
    rc, _, err = run(spec, "--data", clean, "--out", tmp_path / "c.jsonl", *sets)
    assert rc == 0, err
    assert read(tmp_path / "o.jsonl") == read(tmp_path / "c.jsonl")


@pytest.mark.parametrize("sets, shown", [
    (("--set", "scope=batch"), "batch.mean(length) at {spec}:3:45"),
    (("--set", "extra=true"), "batch.max(length) at {spec}:6:39"),
])
def test_skipping_is_refused_where_a_batch_value_reaches_the_rewards(tmp_path, spec, sets, shown):
    """Before, the other groups were shaped with the batch mean of the good groups alone."""
    data = write_jsonl(tmp_path / "in.jsonl", _rows(bad_group=1))
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip", *sets)
    assert rc == 1
    assert err == ("shapec: error: row 5: length: expected a number >= 0 (tokens), got -5; --on-bad-row skip "
                   "cannot leave its group out: shaper 'centred' reads a batch-level value "
                   f"({shown.format(spec=spec)}) that reaches the other groups' rewards, so shaping them "
                   "without this group would change them; fix or remove the row\n")
    assert not (tmp_path / "o.jsonl").exists()
    rc, _, err = run(spec, "--data", write_jsonl(tmp_path / "ok.jsonl", _rows()), "--out", tmp_path / "o.jsonl",
                     "--on-bad-row", "skip", *sets)
    assert rc == 0, err  # a file without bad rows is shaped as ever


def test_a_state_that_reaches_the_rewards_refuses_skipping(tmp_path):
    """Short-RL's running best accuracy is a batch value: without the bad group it is another."""
    rows = [{"prompt_id": f"p{g}", "reward": 1.0, "correct": i % 2, "length": 10 + g + i} for g in range(3)
            for i in range(4)]
    rows[5]["correct"] = "yes"
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    rc, _, err = run("short_rl", "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 1 and "--on-bad-row skip cannot leave its group out: shaper 'short_rl'" in err, err


def test_a_bad_group_found_by_validation_is_refused_too(tmp_path):
    """Band metadata is checked when the call validates its batch, after the rows were read."""
    spec = tmp_path / "b.shape"
    spec.write_text("shaper b() produces real {\n  input length: tokens\n  meta bd: band\n"
                    "  term t = 0.01 * (batch.mean(length) - length) / max(length)\n"
                    "  clamp >= 0\n  factor f = band(length, bd)\n}\n")
    rows = [{"prompt_id": f"p{g}", "reward": 1.0, "length": 3 + g + i, "bd": [1, 9 if g != 1 else 0, 0.5]}
            for g in range(3) for i in range(2)]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 1, err
    assert err.startswith("shapec: error: row 3 (first row of its group): metadata['bd']: group 0: band needs b > a")
    assert "cannot leave its group out: shaper 'b' reads a batch-level value (batch.mean(length) at" in err


# ------------------------------------------------------------------ the analysis itself
def _ir():
    return shapec.compile_str(SPEC, backend="interpreter")["centred"].ir


@pytest.mark.parametrize("params, found", [
    ({}, None), ({"scope": "batch"}, Op.BREDUCE), ({"extra": True}, Op.BREDUCE),
    ({"scope": ["group", "batch", "group"]}, Op.BREDUCE),  # one group's override is enough
    ({"extra": [False, True, False]}, Op.BREDUCE),
])
def test_param_columns_decide_which_branch_is_followed(params, found):
    ir = _ir()
    node = first_batch_read(ir, param_arrays(ir, params, 3))
    assert (node.op if node is not None else None) is found
    if node is not None:
        assert node.ty.level == BATCH


def test_the_stdlib_shapers_that_read_batch_values_are_exactly_these():
    reached = {}
    for module in ("kimi", "short_rl", "nemo_rl", "miles", "dapo", "l1", "cosine", "time_efficiency"):
        m = shapec.load(module, backend="interpreter")
        for name in m.shapers:
            shaper = getattr(m, name)
            if shaper.is_pipeline:
                continue
            reached[f"{module}.{name}"] = first_batch_read(shaper.ir, param_arrays(shaper.ir, {}, 2)) is not None
    assert {k for k, v in reached.items() if v} == {"short_rl.short_rl"}
    kimi = shapec.load("kimi", backend="interpreter").kimi_length.ir
    assert first_batch_read(kimi, param_arrays(kimi, {"scope": "batch"}, 2)) is not None


@pytest.mark.parametrize("command", ["explain", "plot"])
def test_explain_and_plot_stop_where_run_would(tmp_path, spec, command):
    """They shape chunks as `run --on-bad-row skip` does: no group is shown with a batch value that
    left a bad group out."""
    data = write_jsonl(tmp_path / "in.jsonl", _rows(bad_group=1))
    extra = ("--out", str(tmp_path / "p.png"), "--channel", "length") if command == "plot" else ()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([command, str(spec), "--data", str(data), "--set", "scope=batch", "--backend", "interpreter",
                   *extra])
    assert rc == 1, err.getvalue()
    assert "--on-bad-row skip cannot leave its group out: shaper 'centred'" in err.getvalue()
    assert not (tmp_path / "p.png").exists()


def test_a_pipeline_is_refused_by_the_stage_whose_rewards_read_a_batch_value(tmp_path):
    """Each stage is followed under its own params, a repeated stage (`a` twice) included."""
    spec = tmp_path / "p.shape"
    spec.write_text(SPEC + """shaper a(w: float = 0.1) produces real {
  input length: tokens
  term t = w * (mean(length) - length) / max(length)
}
pipeline p = a >> centred >> a(w = 0.2)
""")
    data = write_jsonl(tmp_path / "in.jsonl", _rows(bad_group=1))
    rc, stdout, err = run(spec, "--shaper", "p", "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 0 and counts(stdout) == (12, 9, 3), err
    rc, _, err = run(spec, "--shaper", "p", "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip",
                     "--set", "centred.scope=batch")
    assert rc == 1 and "cannot leave its group out: shaper 'centred' reads a batch-level value" in err, err
