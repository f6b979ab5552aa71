"""`shapec run` never loses a file: the input is never overwritten, outputs appear whole or not
at all, and any failure leaves the previous output and rejects byte for byte."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from shapec.cli import main
from shapec import files
from shapec.run import atomic, rundata, writers

SPEC = ("shaper longest(p: float = 0.25) requires binary produces nonneg {\n"
        "  input length: tokens\n  gate right = reward > 0\n"
        "  term longest = -p on argmax(length where right)\n  clamp >= 0\n"
        "  metric m = batch.mean(length where right)\n}\n")


def rows_of(groups: int, size: int = 4, start: int = 0) -> list[dict]:
    return [{"prompt_id": f"p{g}", "reward": (g + i) % 2, "length": (g * 7 + i * 3) % 17, "note": "é"}
            for g in range(start, start + groups) for i in range(size)]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def spec(tmp_path) -> Path:
    path = tmp_path / "longest.shape"
    path.write_text(SPEC)
    return path


def run(*args) -> tuple[int, str, str]:
    """`shapec run ... --backend interpreter` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["run", *map(str, args), "--backend", "interpreter", "--no-progress"])
    return rc, out.getvalue(), err.getvalue()


def counts(stdout: str) -> tuple[int, int, int]:
    m = re.search(r"rows: (\d+) in = (\d+) out \+ (\d+) rejected", stdout)
    assert m, stdout
    return tuple(int(x) for x in m.groups())


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if files.TMP_MARK in p.name)


# ------------------------------------------------------------------------- 9: the input is never an output
@pytest.mark.parametrize("alias", ["hardlink", "symlink", "dotted"])
def test_an_output_that_is_the_input_under_another_name_is_refused(tmp_path, spec, alias):
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(3))
    before = data.read_bytes()
    out = tmp_path / "out.jsonl"
    if alias == "hardlink":
        os.link(data, out)
    elif alias == "symlink":
        out.symlink_to(data)
    else:
        out = tmp_path / "." / "sub" / ".." / "in.jsonl"
        (tmp_path / "sub").mkdir()
    rc, stdout, err = run(spec, "--data", data, "--out", out)
    assert rc == 2 and stdout == ""
    assert err == f"shapec run: cannot write {out}: --out is the input file ({data})\n"
    assert data.read_bytes() == before


def test_a_rejects_file_that_is_the_input_is_refused(tmp_path, spec):
    data = write_jsonl(tmp_path / "x.rejects.jsonl", rows_of(3))
    before = data.read_bytes()
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "x.jsonl", "--on-bad-row", "skip")
    assert rc == 2
    assert err == f"shapec run: cannot write {data}: the rejects file is the input file ({data})\n"
    assert data.read_bytes() == before and not (tmp_path / "x.jsonl").exists()


# ------------------------------------------------------------------------- 10: whole or not at all
def _previous(tmp_path: Path, spec: Path, suffix: str = ".jsonl") -> tuple[Path, bytes, bytes]:
    """A good earlier run's output and rejects, to be left untouched by a failing run."""
    data = write_jsonl(tmp_path / "old.jsonl", rows_of(4) + ['{"prompt_id": "p4", "reward": "?", "length": 1}'])
    out = tmp_path / f"out{suffix}"
    rc, _, err = run(spec, "--data", data, "--out", out, "--on-bad-row", "skip")
    assert rc == 0, err
    return out, out.read_bytes(), (tmp_path / "out.rejects.jsonl").read_bytes()


def test_a_bad_row_in_the_first_chunk_leaves_the_previous_output(tmp_path, spec):
    out, old, old_rejects = _previous(tmp_path, spec)
    data = write_jsonl(tmp_path / "in.jsonl", [{"prompt_id": "p0", "reward": None, "length": 1}] + rows_of(3))
    rc, _, err = run(spec, "--data", data, "--out", out)
    assert rc == 1
    assert err == "shapec: error: row 1: reward: expected a number, got null\n"
    assert out.read_bytes() == old and (tmp_path / "out.rejects.jsonl").read_bytes() == old_rejects
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize("failure", [KeyboardInterrupt, atomic.Interrupted, RuntimeError])
def test_an_interruption_at_a_later_chunk_leaves_the_previous_output(tmp_path, spec, monkeypatch, suffix, failure):
    out, old, old_rejects = _previous(tmp_path, spec, suffix)
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(10))
    calls = []

    def shape_then_fail(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # two chunks are already in the temporary file
            raise failure()
        return real(*args, **kwargs)

    real = rundata.shape_chunk
    monkeypatch.setattr(rundata, "shape_chunk", shape_then_fail)
    if failure is RuntimeError:
        with pytest.raises(RuntimeError):
            run(spec, "--data", data, "--out", out, "--chunk-rows", 8)
    else:
        rc, stdout, err = run(spec, "--data", data, "--out", out, "--chunk-rows", 8)
        word, status = ("interrupted", 130) if failure is KeyboardInterrupt else ("terminated", 143)
        assert (rc, stdout, err) == (status, "", f"shapec run: {word}; {out} was left as it was\n")
    assert out.read_bytes() == old and (tmp_path / "out.rejects.jsonl").read_bytes() == old_rejects
    if suffix == ".parquet":
        assert pq.read_table(out).num_rows == 16  # the footer is intact: the old file reads whole
    assert leftovers(tmp_path) == []


def _big_input(path: Path, groups: int) -> Path:
    with open(path, "w") as fh:
        for g in range(groups):
            for i in range(4):
                fh.write(f'{{"prompt_id": "p{g}", "reward": {(g + i) % 2}, "length": {(g + i * 5) % 23}}}\n')
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_killed_run_leaves_the_previous_output(tmp_path, spec, sig):
    out, old, _ = _previous(tmp_path, spec)
    data = _big_input(tmp_path / "big.jsonl", 60_000)
    proc = subprocess.Popen([sys.executable, "-m", "shapec.cli", "run", str(spec), "--data", str(data), "--out",
                             str(out), "--chunk-rows", "40", "--backend", "interpreter"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not leftovers(tmp_path) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)  # well inside the shaping: some chunks are in the temporary file
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert out.read_bytes() == old
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        # no rename happened; what is left is marked as a temporary file of that process
        assert all(re.fullmatch(rf"\.out(\.rejects)?\.jsonl\.shapec-tmp-{proc.pid}-\w+", n)
                   for n in leftovers(tmp_path)) and leftovers(tmp_path)
    else:
        word, status = ("interrupted", 130) if sig == signal.SIGINT else ("terminated", 143)
        assert (proc.returncode, stdout, stderr) == (status, "", f"shapec run: {word}; {out} was left as it was\n")
        assert leftovers(tmp_path) == []


@pytest.mark.parametrize("sig, word", [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated")])
@pytest.mark.parametrize("at", ["rejects", "output"])
def test_a_signal_once_the_renames_begin_completes_the_run_and_exit_0_says_so(tmp_path, spec, monkeypatch, sig,
                                                                             word, at):
    """From the first rename on, a signal no longer stops the run: both files are the new ones, exit 0."""
    out, old, old_rejects = _previous(tmp_path, spec)
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(6) + ['{"prompt_id": "p9", "reward": "?", "length": 1}'])
    owner = writers.RejectsWriter if at == "rejects" else writers.Writer
    real = owner.commit

    def signalled_commit(self):
        os.kill(os.getpid(), sig)
        for _ in range(1000):  # give the handler its bytecode boundaries
            pass
        real(self)

    monkeypatch.setattr(owner, "commit", signalled_commit)
    rc, stdout, err = run(spec, "--data", data, "--out", out, "--on-bad-row", "skip")
    assert rc == 0 and err == f"shapec run: {word} after its files were written; it completed\n"
    assert "rows: 25 in = 24 out + 1 rejected" in stdout
    assert out.read_bytes() != old and len(out.read_text().splitlines()) == 24
    assert (tmp_path / "out.rejects.jsonl").read_bytes() != old_rejects
    assert leftovers(tmp_path) == []


def test_the_shapec_command_interrupted_just_after_its_last_rename_exits_0_with_the_new_output(tmp_path, spec):
    """The process as users run it (entry()), signalled after the output's rename: no traceback, no -2."""
    out, old, _ = _previous(tmp_path, spec)
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(6))
    script = ("import os, signal, sys\n"
              "from shapec.cli import entry\n"
              "from shapec.run import writers\n"
              "real = writers.Writer.commit\n"
              "def commit(self):\n"
              "    real(self)\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "writers.Writer.commit = commit\n"
              "sys.argv = ['shapec', *sys.argv[1:]]\n"
              "entry()\n")
    proc = subprocess.run([sys.executable, "-c", script, "run", str(spec), "--data", str(data), "--out", str(out),
                           "--backend", "interpreter"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "shapec run: interrupted after its files were written; it completed\n")
    assert out.read_bytes() != old and len(out.read_text().splitlines()) == 24


def test_a_signal_before_the_renames_leaves_both_previous_files(tmp_path, spec, monkeypatch):
    """The last instant a signal still stops the run: just before the renames, nothing is replaced."""
    out, old, old_rejects = _previous(tmp_path, spec)
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(6) + ['{"prompt_id": "p9", "reward": "?", "length": 1}'])
    real = rundata.finishing

    def signal_first():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
        real()

    monkeypatch.setattr(rundata, "finishing", signal_first)
    rc, stdout, err = run(spec, "--data", data, "--out", out, "--on-bad-row", "skip")
    assert (rc, stdout, err) == (130, "", f"shapec run: interrupted; {out} was left as it was\n")
    assert out.read_bytes() == old and (tmp_path / "out.rejects.jsonl").read_bytes() == old_rejects
    assert leftovers(tmp_path) == []


# ------------------------------------------------------------------------- 12: output errors
def test_a_missing_output_folder_is_one_line_and_exit_2_even_when_every_row_is_rejected(tmp_path, spec):
    data = write_jsonl(tmp_path / "in.jsonl", [{"prompt_id": "p0", "reward": "bad", "length": 1}])
    out = tmp_path / "nowhere" / "out.jsonl"
    rc, stdout, err = run(spec, "--data", data, "--out", out, "--on-bad-row", "skip")
    assert (rc, stdout) == (2, "")
    assert err == f"shapec run: cannot write {out}: folder {out.parent} does not exist\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "longest.shape"]


def test_an_output_that_is_a_directory_is_refused(tmp_path, spec):
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(2))
    (tmp_path / "out.jsonl").mkdir()
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "out.jsonl")
    assert rc == 2 and err == f"shapec run: cannot write {tmp_path / 'out.jsonl'}: it is a directory\n"


def test_a_read_only_folder_is_one_line_and_exit_2(tmp_path, spec, monkeypatch):
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(2))

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(files.tempfile, "mkstemp", read_only)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "out.jsonl")
    assert rc == 2 and err == f"shapec run: cannot write {tmp_path / 'out.jsonl'}: Read-only file system\n"
    assert not (tmp_path / "out.jsonl").exists()


def test_a_full_disk_is_one_line_exit_2_and_leaves_the_previous_output(tmp_path, spec, monkeypatch):
    out, old, _ = _previous(tmp_path, spec)
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(10))

    class FullDisk(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writers, "open", lambda *a, **k: FullDisk(), raising=False)
    rc, _, err = run(spec, "--data", data, "--out", out, "--chunk-rows", 8)
    assert rc == 2 and err == f"shapec run: cannot write {out}: No space left on device\n"
    assert out.read_bytes() == old and leftovers(tmp_path) == []


# ------------------------------------------------------------------------- property: interrupted anywhere
def _batch(draw_groups: list[tuple[int, int | None]]) -> list:
    """Groups of the given sizes; a bad row (a string reward) at the given position, if any."""
    lines: list = []
    for g, (size, bad) in enumerate(draw_groups):
        for i in range(size):
            row = {"prompt_id": f"g{g}", "reward": (g + i) % 2, "length": (g * 5 + i * 3) % 13}
            if bad == i:
                row["reward"] = "oops"
            lines.append(row)
    return lines


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.tuples(st.integers(1, 5), st.none() | st.integers(0, 4)), min_size=1, max_size=12),
       chunk_rows=st.integers(5, 12), fail_at=st.none() | st.integers(1, 6),
       failure=st.sampled_from([KeyboardInterrupt, OSError, ValueError]), previous=st.booleans(),
       suffix=st.sampled_from([".jsonl", ".parquet"]))
def test_output_is_the_previous_file_or_a_complete_one(spec, groups, chunk_rows, fail_at, failure, previous, suffix):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        lines = _batch(groups)
        data = write_jsonl(folder / "in.jsonl", lines)
        out, rejects = folder / f"out{suffix}", folder / "out.rejects.jsonl"
        if previous:
            pq.write_table(pa.table({"old": [1]}), out) if suffix == ".parquet" else out.write_text("old\n")
            rejects.write_text("old rejects\n")
        before = (out.read_bytes() if previous else None, rejects.read_bytes() if previous else None)
        calls = []
        real = rundata.shape_chunk

        def maybe_fail(*args, **kwargs):
            calls.append(1)
            if len(calls) == fail_at:
                raise failure("injected")
            return real(*args, **kwargs)

        rundata.shape_chunk = maybe_fail
        try:
            try:
                rc, stdout, _ = run(spec, "--data", data, "--out", out, "--on-bad-row", "skip",
                                    "--chunk-rows", chunk_rows)
            except (OSError, ValueError):
                rc, stdout = None, ""
        finally:
            rundata.shape_chunk = real
        assert leftovers(folder) == []
        if rc != 0:
            assert fail_at is not None and len(calls) == fail_at
            assert (out.read_bytes() if out.exists() else None, rejects.read_bytes() if rejects.exists() else None) \
                == before
            return
        rows_in, rows_out, rejected = counts(stdout)
        got = pq.read_table(out).to_pylist() if suffix == ".parquet" else \
            [json.loads(x) for x in out.read_text().splitlines()]
        bad = [json.loads(x) for x in rejects.read_text().splitlines()] if rejected else []
        assert rows_in == len(lines) == rows_out + rejected and len(got) == rows_out and len(bad) == rejected
        assert rejected == sum(size for size, at in groups if at is not None and at < size)
        if not rejected:  # another run's rejects file is left as it was, and the report says whose it is
            assert (rejects.read_bytes() if rejects.exists() else None) == before[1]
            assert ("is not from this run" in stdout) == previous
