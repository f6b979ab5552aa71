"""Equivalences of `shapec run` for a group-level shaper (no batch values, no state): a row's reward is
the one the Python API gives its group, whatever the input and output formats, the chunking, the
backend, the order of the groups, the bad groups skipped around it and the grouping option."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shapec

from .test_run_matches_the_api import AGENT_PARAMS, OVERRIDES, api_rewards, cli, nemo_rows, write

# a reward that reads every kind of metadata (a record band, a list, a scalar) and a group mean
SPEC = '''shaper eq(w: float >= 0 = 0.001, gb: band?) requires binary produces real {
  """Each term reads its group's data, so a reward computed with a neighbour's data differs."""
  input length: tokens
  meta budget: {total: band}
  meta hist: list(ok: bool, length: tokens)
  meta target: tokens
  gate right = reward > 0
  let past = mean(float(hist.length) where hist.ok)
  term near = -w * float(abs(target - length)) on right
  term past_mean = -w * (float(length) - past) on right
  term spread = -w * (float(length) - mean(float(length))) on right
  clamp >= 0
  factor within = band(length, budget.total ?? gb) on right
}
'''
PARAMS = {"w": 0.001, "gb": [50, 350, 0.5]}
METAS = ("budget", "hist", "target")
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spec")
    (folder / "eq.shape").write_text(SPEC)
    (folder / "eq.yaml").write_text(yaml.safe_dump({"eq": PARAMS}))
    return folder / "eq.shape"


def groups_from(seed: int, count: int) -> list[list[dict]]:
    """`count` groups of 1-4 rows, each with its own metadata (some absent, but each field in some row:
    a field no row has is an error of its own), its first row carrying it."""
    rng = random.Random(seed)
    groups = []
    for g in range(count):
        meta = {"budget": rng.choice([None, {"total": {"a": 20.0 * g, "b": 20.0 * g + 300, "f": 0.25}}]),
                "hist": rng.choice([None, {"ok": [True, False, True], "length": [10 * g, 7, 3 * g + 1]}]),
                "target": rng.choice([None, 15 * g])}
        if g == count - 1:  # the reads with no stand-in (budget has `?? gb`)
            meta["hist"] = meta["hist"] or {"ok": [True], "length": [5]}
            meta["target"] = 15 * g
        rows = [{"prompt_id": f"g{g}", "uid": f"{g}.{s}", "reward": rng.choice([0, 1, 1]),
                 "length": rng.randint(0, 400)} for s in range(rng.randint(1, 4))]
        rows[0].update({k: v for k, v in meta.items() if v is not None})
        groups.append(rows)
    return groups


def api(spec, groups: list[list[dict]], backend: str) -> dict[str, float]:
    """uid -> reward from one call of the Python API over these groups."""
    rows = [r for g in groups for r in g]
    offsets = np.cumsum([0] + [len(g) for g in groups])
    out = shapec.compile_file(spec, backend=backend).eq(
        np.array([float(r["reward"]) for r in rows]), offsets=offsets,
        channels={"length": np.array([float(r["length"]) for r in rows])},
        metadata={k: [g[0].get(k) for g in groups] for k in METAS}, params=PARAMS)
    return dict(zip((r["uid"] for r in rows), out.rewards.tolist()))



def run(spec, tmp_path, capsys, rows, fin="jsonl", fout="jsonl", backend="interpreter", chunk_rows=65536,
        extra=()):
    data, out = write(tmp_path / f"in.{fin}", rows), tmp_path / f"out.{fout}"
    rc, _, err = cli(capsys, "run", spec, "--config", spec.with_suffix(".yaml"), "--data", data, "--out", out,
                     "--backend", backend, "--chunk-rows", chunk_rows, "--no-progress", *extra)
    assert rc == 0, err
    if fout == "parquet":
        import pyarrow.parquet as pq

        shaped = pq.read_table(out).to_pylist()
    else:
        shaped = [json.loads(line) for line in out.read_text().splitlines()]
    rejects = out.with_name(out.stem + ".rejects.jsonl")
    rejected = [json.loads(line) for line in rejects.read_text().splitlines()] if rejects.exists() else []
    return {r["uid"]: r["reward"] for r in shaped}, [r["uid"] for r in shaped], rejected


@given(seed=st.integers(0, 10**6), count=st.integers(1, 8), fin=st.sampled_from(["jsonl", "parquet"]),
       fout=st.sampled_from(["jsonl", "parquet"]), backend=st.sampled_from(["interpreter", "numba"]),
       slack=st.integers(0, 5))
@SETTINGS
def test_run_gives_every_row_its_groups_api_reward(spec, tmp_path_factory, capsys, seed, count, fin, fout, backend,
                                                   slack):
    """Chunks of one group (chunk_rows = the largest group) up to the whole file, in any format."""
    groups = groups_from(seed, count)
    chunk_rows = max(map(len, groups)) + slack
    got, order, _ = run(spec, tmp_path_factory.mktemp("r"), capsys, [r for g in groups for r in g], fin, fout,
                        backend, chunk_rows)
    want = api(spec, groups, backend)
    assert order == list(want) and got == want


@given(seed=st.integers(0, 10**6), count=st.integers(2, 8), fin=st.sampled_from(["jsonl", "parquet"]))
@SETTINGS
def test_shuffling_whole_groups_permutes_the_rows_and_keeps_every_reward(spec, tmp_path_factory, capsys, seed,
                                                                         count, fin):
    groups = groups_from(seed, count)
    shuffled = random.Random(seed).sample(groups, len(groups))
    tmp = tmp_path_factory.mktemp("s")
    got, _, _ = run(spec, tmp, capsys, [r for g in groups for r in g], fin, chunk_rows=5)
    again, order, _ = run(spec, tmp, capsys, [r for g in shuffled for r in g], fin, chunk_rows=5)
    assert order == [r["uid"] for g in shuffled for r in g] and again == got == api(spec, groups, "interpreter")


BAD = {"negative length": ("length", -1), "no reward": ("reward", None), "bad band": ("budget", {"total": {"a": 5.0}})}


@given(seed=st.integers(0, 10**6), count=st.integers(2, 9), fin=st.sampled_from(["jsonl", "parquet"]),
       bad=st.lists(st.tuples(st.integers(0, 8), st.sampled_from(sorted(BAD))), min_size=1, max_size=4),
       slack=st.integers(0, 4))
@SETTINGS
def test_skipped_groups_leave_the_others_as_a_file_without_them(spec, tmp_path_factory, capsys, seed, count, fin,
                                                               bad, slack):
    """Every row of every bad group in the rejects file once; the good groups' rewards, metadata
    and order as in a run of the file without the bad groups, across chunk boundaries."""
    groups = groups_from(seed, count)
    broken = set()
    for g, kind in bad:
        g %= count
        field, value = BAD[kind]
        row = groups[g][0] if field == "budget" else groups[g][-1]
        row[field] = value
        broken.add(g)
    rows = [r for g in groups for r in g]
    got, order, rejected = run(spec, tmp_path_factory.mktemp("k"), capsys, rows, fin, chunk_rows=4 + slack,
                               extra=["--on-bad-row", "skip"])
    good = [g for i, g in enumerate(groups) if i not in broken]
    assert sorted(r["record"]["uid"] for r in rejected) == sorted(r["uid"] for i in broken for r in groups[i])
    assert [r["row"] for r in rejected] == sorted(r["row"] for r in rejected)
    want = api(spec, good, "interpreter") if good else {}
    assert order == list(want) and got == want


def test_group_size_and_group_by_shape_equal_groups_alike(spec, tmp_path, capsys):
    groups = [[dict(g[0], uid=f"{i}.{s}", length=40 * s + i) for s in range(3)] for i, g in enumerate(groups_from(7, 6))]
    rows = [r for g in groups for r in g]
    by_key, _, _ = run(spec, tmp_path, capsys, rows, chunk_rows=4)
    by_size, _, _ = run(spec, tmp_path, capsys, rows, "parquet", "jsonl", "interpreter", 4,
                         extra=["--group-size", 3])
    assert by_key == by_size == api(spec, groups, "interpreter")


@given(seed=st.integers(0, 10**6), count=st.integers(2, 8), fin=st.sampled_from(["jsonl", "parquet"]),
       chunk_rows=st.integers(4, 9))
@SETTINGS
def test_each_group_gets_its_own_agents_params_after_skipped_groups_and_across_chunks(tmp_path_factory, capsys,
                                                                                     seed, count, fin, chunk_rows):
    """NeMo-RL agent_overrides become per-group param columns: a group never gets a neighbour's."""
    rng = random.Random(seed)
    agents = [rng.choice(["alpha", "beta"]) for _ in range(count)]
    rows = nemo_rows(agents, [rng.randint(1, 4) for _ in range(count)], lambda a: {"agent": a})
    broken = {f"p{g}" for g in range(count) if rng.random() < 0.3}
    for r in rows:
        r["uid"] = f"{r['prompt_id']}.{r['info']['sample']}"
        r["reasoning"] = -1 if r["prompt_id"] in broken and r["info"]["sample"] == 0 else r["reasoning"]
    tmp = tmp_path_factory.mktemp("a")
    (tmp / "nemo.yaml").write_text(yaml.safe_dump(OVERRIDES))
    data, out = write(tmp / f"in.{fin}", rows), tmp / "out.jsonl"
    rc, _, err = cli(capsys, "run", "nemo_rl", "--config", tmp / "nemo.yaml", "--data", data, "--out", out,
                     "--backend", "interpreter", "--chunk-rows", chunk_rows, "--on-bad-row", "skip", "--no-progress")
    assert rc == 0, err
    good = [r for r in rows if r["prompt_id"] not in broken]
    firsts = [r["agent"] for i, r in enumerate(good) if i == 0 or r["prompt_id"] != good[i - 1]["prompt_id"]]
    want = api_rewards(good, [AGENT_PARAMS[a] for a in firsts]) if good else []
    assert [json.loads(line)["reward"] for line in out.read_text().splitlines()] == want
