"""`shapec run --engine ray` writes what the local engine writes: rows, rejects and summary."""

import numpy as np
import pytest

from shapec import cli

from .require import need

ROWS = 3000
G = 8


@pytest.fixture(scope="module")
def ray():
    ray = need("ray", "ray")
    need("ray.data", "ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def _parquet(path, bad: bool = True):
    pa = need("pyarrow", "ray")
    pq = need("pyarrow.parquet", "ray")
    rng = np.random.default_rng(7)
    length = rng.integers(50, 4000, ROWS).astype(np.int64)
    if bad:
        length[[17, 1234, 2999]] = -5  # bad rows: their groups go to the rejects file
    table = pa.table({"prompt_id": [f"p{i // G:04d}" for i in range(ROWS)], "sample": np.arange(ROWS) % G,
                      "reward": rng.integers(0, 2, ROWS).astype(np.float64), "length": length})
    pq.write_table(table, path)


def _run(tmp_path, capsys, engine, *extra, spec="kimi"):
    out = tmp_path / f"{engine}.parquet"
    code = cli.main(["run", spec, "--data", str(tmp_path / "in.parquet"), "--out", str(out), "--chunk-rows", "700",
                     "--on-bad-row", "skip", "--no-progress", "--engine", engine, *extra])
    captured = capsys.readouterr()
    return code, out, captured.out.replace(str(out.with_suffix("")), "OUT"), captured.err


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
@pytest.mark.parametrize("scope, bad", [("group", True), ("batch", False)])
def test_ray_engine_matches_local_row_for_row(ray, tmp_path, capsys, backend, scope, bad):
    """Bad rows go to the rejects file alike; batch-level values (scope=batch, where skipping a bad
    group is refused) see the same chunks."""
    pq = need("pyarrow.parquet", "ray")
    _parquet(tmp_path / "in.parquet", bad)
    args = ("--backend", backend, "--set", f"scope={scope}")
    local = _run(tmp_path, capsys, "local", *args)
    remote = _run(tmp_path, capsys, "ray", *args)
    assert local[0] == remote[0] == 0, remote[3]
    assert remote[2] == local[2]  # the summary, metrics and counts included
    counts = "2976 out + 24 rejected" if bad else "3000 out + 0 rejected"
    assert f"rows: 3000 in = {counts}" in local[2] and "(5 chunks)" in local[2]
    assert pq.read_table(remote[1]).equals(pq.read_table(local[1]))
    if bad:
        assert (tmp_path / "ray.rejects.jsonl").read_text() == (tmp_path / "local.rejects.jsonl").read_text()


def test_skipping_under_batch_values_is_refused_as_local_does(ray, tmp_path, capsys):
    _parquet(tmp_path / "in.parquet")
    args = ("--backend", "interpreter", "--set", "scope=batch")
    local = _run(tmp_path, capsys, "local", *args)
    remote = _run(tmp_path, capsys, "ray", *args)
    assert local[0] == remote[0] == 1 and remote[3] == local[3]
    assert "row 18: length: expected a number >= 0 (tokens), got -5; --on-bad-row skip cannot leave" in local[3]
    assert not (tmp_path / "ray.parquet").exists()


def test_ray_engine_stops_at_the_first_bad_row_as_local_does(ray, tmp_path, capsys):
    _parquet(tmp_path / "in.parquet")
    args = ("--backend", "interpreter", "--on-bad-row", "stop")
    local = _run(tmp_path, capsys, "local", *args)
    remote = _run(tmp_path, capsys, "ray", *args)
    assert local[0] == remote[0] == 1
    assert remote[3] == local[3] and "row 18" in local[3]
    assert not (tmp_path / "ray.parquet").exists()


def test_stateful_spec_refused(ray, tmp_path, capsys):
    _parquet(tmp_path / "in.parquet")
    code, out, _, err = _run(tmp_path, capsys, "ray", "--backend", "interpreter", spec="short_rl")
    assert code == 1 and not out.exists()
    assert err.startswith("shapec: error: --engine ray: short_rl keeps state from one chunk to the next (short_rl.acc_max)")


def test_a_ray_run_prints_its_summary_and_none_of_rays_log_lines(tmp_path):
    """A run on a Ray cluster it starts: stdout is the summary alone; stderr has no Ray INFO line and
    no core-worker error about actor restarts (Ray's token-authentication notice comes from its
    core and stays)."""
    import os
    import subprocess
    import sys

    need("ray.data", "ray")
    _parquet(tmp_path / "in.parquet", bad=False)
    proc = subprocess.run([sys.executable, "-m", "shapec.cli", "run", "kimi", "--data", tmp_path / "in.parquet",
                           "--out", tmp_path / "out.parquet", "--backend", "interpreter", "--engine", "ray"],
                          capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("shapec run: ") and "rows: 3000 in = 3000 out + 0 rejected" in proc.stdout
    assert all(line.startswith("shapec run: ") or not line.startswith(("[", "20")) for line in proc.stdout.splitlines())
    noise = [line for line in proc.stderr.splitlines() if not line.startswith("Token authentication is enabled")]
    assert noise == [], proc.stderr
