"""The CLI's files: a read-only file is refused even for root, no output is
a file the command reads or its other output under any name, a spec that is not UTF-8 is E102 in
check and fmt as in compile, and explain prints a group key as data, never as markup or a line break."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from shapec.cli import main

from .test_files_whole_or_untouched import SPEC, leftovers, rows_of, run, write_jsonl


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "longest.shape"
    path.write_text(SPEC)
    return path


def cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


UNFORMATTED = "shaper q() produces real {\n  input length: tokens   # x\n     term t = -1\n}\n"


# ------------------------------------------------------------------ read-only files, as root too
@pytest.mark.parametrize("mode", [0o444, 0o044, 0o400])
def test_a_read_only_output_is_refused_whoever_runs(tmp_path, spec, mode):
    """os.access lets root write anything, so the old check renamed over a chmod a-w file as root."""
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(2))
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    os.chmod(out, mode)
    rc, stdout, err = run(spec, "--data", data, "--out", out)
    assert (rc, stdout) == (2, "")
    assert err == f"shapec run: cannot write {out}: Permission denied (the file is read-only)\n"
    assert out.read_text() == "old\n" and stat.S_IMODE(out.stat().st_mode) == mode
    assert leftovers(tmp_path) == []


def test_a_read_only_rejects_file_is_refused_before_any_work(tmp_path, spec):
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(2))
    rejects = tmp_path / "out.rejects.jsonl"
    rejects.write_text("old\n")
    os.chmod(rejects, 0o444)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "out.jsonl")
    assert rc == 2 and err == f"shapec run: cannot write {rejects}: Permission denied (the file is read-only)\n"
    assert rejects.read_text() == "old\n" and not (tmp_path / "out.jsonl").exists()


def test_fmt_refuses_a_read_only_file_whoever_runs(tmp_path, capsys):
    target = tmp_path / "t.shape"
    target.write_text(UNFORMATTED)
    os.chmod(target, 0o444)
    rc, _, err = cli(capsys, "fmt", target)
    assert rc == 2 and err == f"shapec fmt: cannot write {target}: Permission denied (the file is read-only)\n"
    assert target.read_text() == UNFORMATTED and stat.S_IMODE(target.stat().st_mode) == 0o444


def test_a_writable_file_is_still_rewritten_with_its_mode(tmp_path, capsys):
    target = tmp_path / "t.shape"
    target.write_text(UNFORMATTED)
    os.chmod(target, 0o604)
    rc, _, err = cli(capsys, "fmt", target)
    assert rc == 0, err
    assert "     term" not in target.read_text() and stat.S_IMODE(target.stat().st_mode) == 0o604


# ------------------------------------------------------------------ no output is an input or the other output
@pytest.mark.parametrize("link_from", ["out", "rejects"])
def test_the_output_and_the_rejects_file_are_never_one_file(tmp_path, spec, link_from):
    """`out.jsonl -> out.rejects.jsonl` made both writers rename over one file: the rejects were lost."""
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(2) + ['{"prompt_id": "p9", "reward": "?", "length": 1}'])
    out, rejects = tmp_path / "out.jsonl", tmp_path / "out.rejects.jsonl"
    if link_from == "out":
        out.symlink_to(rejects.name)
        rejects.write_text("old\n")
        message = f"cannot write {rejects}: the rejects file is --out ({out})"
    else:
        rejects.symlink_to(out.name)
        out.write_text("old\n")
        message = f"cannot write {rejects}: the rejects file is --out ({out})"
    rc, stdout, err = run(spec, "--data", data, "--out", out, "--on-bad-row", "skip")
    assert (rc, stdout, err) == (2, "", f"shapec run: {message}\n")
    real = rejects if link_from == "out" else out
    assert real.read_text() == "old\n" and leftovers(tmp_path) == []


@pytest.mark.parametrize("what", ["spec", "config"])
@pytest.mark.parametrize("alias", ["same", "hardlink", "symlink"])
def test_run_never_writes_over_its_spec_or_config(tmp_path, what, alias):
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(2))
    source = tmp_path / ("spec.jsonl" if what == "spec" else "config.jsonl")
    source.write_text(SPEC if what == "spec" else "longest:\n  p: 0.5\n")
    before = source.read_bytes()
    out = source if alias == "same" else tmp_path / "out.jsonl"
    if alias == "hardlink":
        os.link(source, out)
    elif alias == "symlink":
        out.symlink_to(source)
    if what == "spec":
        rc, stdout, err = run(source, "--data", data, "--out", out)
    else:
        (tmp_path / "s.shape").write_text(SPEC)
        rc, stdout, err = run(tmp_path / "s.shape", "--data", data, "--out", out, "--config", source)
    assert (rc, stdout) == (2, "")
    assert err == f"shapec run: cannot write {out}: --out is the {what} file ({source})\n"
    assert source.read_bytes() == before


def test_plot_never_writes_over_its_data(tmp_path, spec, capsys):
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(2))
    before = data.read_bytes()
    out = tmp_path / "curve.png"
    out.symlink_to(data.name)
    rc, stdout, err = cli(capsys, "plot", spec, "--data", data, "--out", out, "--backend", "interpreter")
    assert (rc, stdout) == (2, "")
    assert err == f"shapec plot: cannot write {out}: --out is the input file ({data})\n"
    assert data.read_bytes() == before


# ------------------------------------------------------------------ a spec that is not UTF-8
@pytest.mark.parametrize("command", [["check"], ["fmt"], ["fmt", "--check"], ["compile"]])
def test_a_spec_that_is_not_utf8_is_e102_at_its_byte_in_every_command(tmp_path, capsys, command):
    """check and fmt said `cannot read (...codec can't decode...)`, exit 2, where compile says E102."""
    bad = tmp_path / "bad.shape"
    raw = b"shaper x() produces real {\n  input length: tokens\n  term t = 0\xff\n}\n"
    bad.write_bytes(raw)
    rc, stdout, err = cli(capsys, *command, bad)
    assert rc == 1 and "Traceback" not in err
    assert err.startswith(f"{bad}:3:13: error[E102]: byte 0xff is not UTF-8 text; a .shape spec is UTF-8 "
                          "(save it as UTF-8)\n"), err
    assert err.splitlines()[2] == " " * 12 + "^"
    assert bad.read_bytes() == raw


def test_check_reports_a_non_utf8_spec_and_checks_the_others(tmp_path, capsys):
    (tmp_path / "a.shape").write_bytes(b"\xfe")
    (tmp_path / "b.shape").write_text("shaper b() produces real {\n  input length: tokens\n  term t = nope\n}\n")
    rc, _, err = cli(capsys, "check", tmp_path)
    assert rc == 1
    assert [line.split(": ")[1] for line in err.splitlines() if ": error[" in line] == ["error[E102]", "error[E201]"]


# ------------------------------------------------------------------ explain prints keys as data
@pytest.mark.parametrize("key, label", [
    ("[/bold]", "[/bold]"),
    ("[red]x[/red]", "[red]x[/red]"),
    ("a\u001b[31mred", '"a\\u001b[31mred"'),
    ("\r\nfake line", '"\\r\\nfake line"'),
])
def test_explain_shows_a_key_as_text_never_as_markup_or_a_line_break(tmp_path, spec, capsys, key, label):
    """rich read `[/bold]` as markup (a MarkupError traceback) and printed escape codes as they came."""
    rows = [{"prompt_id": key, "reward": r, "length": 3} for r in (1, 0)]
    data = write_jsonl(tmp_path / "in.jsonl", rows + ['{"prompt_id": "z", "reward": "[/red]", "length": 3}'])
    rc, stdout, err = cli(capsys, "explain", spec, "--data", data, "--width", "100")
    assert (rc, err) == (0, "")
    assert f"group {label}  rows 1-2, 2 rollouts\n" in stdout
    assert 'rejected: row 3: reward: expected a number, got "[/red]"\n' in stdout
    assert "\x1b" not in stdout and "\r" not in stdout
    rc, stdout, err = cli(capsys, "explain", spec, "--data", data, "--group", label, "--width", "100")
    assert rc == 0 and f"group {label}  rows 1-2" in stdout and "group z" not in stdout


def test_explain_names_keys_of_other_types_as_json(tmp_path, spec, capsys):
    rows = [{"prompt_id": k, "reward": r, "length": 3} for k in (True, 1.0, "x") for r in (1, 0)]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    rc, stdout, _ = cli(capsys, "explain", spec, "--data", data, "--width", "100")
    assert rc == 0
    assert [line.split("  rows")[0] for line in stdout.splitlines() if line.startswith("group ")] == \
        ["group true", "group 1.0", "group x"]
    rc, stdout, _ = cli(capsys, "explain", spec, "--data", data, "--group", "true", "--width", "100")
    assert rc == 0 and json.dumps("group true")[1:-1] in stdout and "group 1.0" not in stdout


# ------------------------------------------------------------------ names in messages stay on one line
@pytest.mark.parametrize("line, shown", [
    ('{"prompt_id": "p", "reward": 1, "length": 3, "a\\nb": {"c\\u001b[2J": ' + "1" * 5000 + "}}",
     "a\\nb.c\\x1b[2J: expected a number, got an integer of 5000 digits"),
    ('{"prompt_id": "p", "reward": 1, "length": 3, "x\\ny": 1, "x\\ny": 2}', "x\\ny: expected each key once"),
])
def test_a_field_name_with_control_characters_is_escaped_in_the_error(tmp_path, spec, line, shown):
    """A key with a line break or an escape code split the error line and reached the terminal."""
    data = write_jsonl(tmp_path / "in.jsonl", [line, '{"prompt_id": "p", "reward": 0, "length": 3}'])
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl")
    assert rc == 1 and err.startswith(f"shapec: error: row 1: {shown}") and err.count("\n") == 1, err
    assert "\x1b" not in err
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", "--on-bad-row", "skip")
    assert rc == 0, err
    reason = json.loads((tmp_path / "o.rejects.jsonl").read_text().splitlines()[0])["reason"]
    assert reason.startswith(f"row 1: {shown}")


def test_a_parquet_field_that_does_not_fit_is_named_on_one_line(tmp_path, spec):
    rows = [{"prompt_id": "p", "reward": 1, "length": 3, "ex": {"a\nb": 1}},
            {"prompt_id": "q", "reward": 0, "length": 3, "ex": {"a\nb": "s"}}]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    rc, _, err = run(spec, "--data", data, "--out", tmp_path / "o.parquet")
    assert rc == 1 and err.count("\n") == 1
    assert err.startswith('shapec: error: row 2: ex.a\\nb: expected a value of type int64 (as other rows have it), '
                          'got "s"')


def test_file_names_with_control_characters_are_escaped_in_messages(tmp_path, spec):
    data = write_jsonl(tmp_path / "d\nx.jsonl", rows_of(1, 2))
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "no\x1b[2Jdir" / "o.jsonl")
    assert (rc, stdout) == (2, "")
    assert err == (f"shapec run: cannot write {tmp_path}/no\\x1b[2Jdir/o.jsonl: folder {tmp_path}/no\\x1b[2Jdir "
                   "does not exist\n")
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o\n.jsonl")
    assert rc == 0, err
    assert f"on {tmp_path}/d\\nx.jsonl\n" in stdout and f"wrote {tmp_path}/o\\n.jsonl\n" in stdout
    rc, _, err = run(spec, "--data", tmp_path / "no\nne.jsonl", "--out", tmp_path / "o.jsonl")
    assert (rc, err) == (2, f"shapec: error: --data {tmp_path}/no\\nne.jsonl: no such file\n")


# ------------------------------------------------------------------ command-line values
def test_a_spec_without_a_shaper_says_so(tmp_path, capsys):
    """`e.shape defines : choose one with --shaper NAME` was the message for an empty spec."""
    empty = tmp_path / "e.shape"
    empty.write_text("")
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(1, 2))
    rc, _, err = cli(capsys, "run", empty, "--data", data, "--out", tmp_path / "o.jsonl", "--backend", "interpreter")
    assert (rc, err) == (1, f"shapec: error: {empty} defines no shaper or pipeline\n")
    rc, _, err = cli(capsys, "explain", empty, "--data", data, "--shaper", "x")
    assert (rc, err) == (1, f"shapec: error: {empty} has no shaper or pipeline 'x' (it has none)\n")


@pytest.mark.parametrize("command, option, value, message", [
    ("run", "--set", "p=" + "[" * 3000, "--set 'p=" + "[" * 3000 + "': value is not valid YAML (nested too deeply)"),
    ("run", "--set", "p=[", "--set 'p=[': value is not valid YAML (expected the node content, but found "
                            "'<stream end>')"),
    ("plot", "--meta", "profile_band=" + "[" * 3000,
     "--meta profile_band: value is not valid YAML (nested too deeply)"),
    ("plot", "--meta", "profile_band=[", "--meta profile_band: value is not valid YAML (expected the node content, "
                                         "but found '<stream end>')"),
])
def test_a_yaml_value_that_cannot_be_read_is_one_line(tmp_path, capsys, command, option, value, message):
    """Deep nesting was a RecursionError traceback; --meta printed the YAML reader's snippet over four lines."""
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(1, 2))
    out = tmp_path / ("o.jsonl" if command == "run" else "o.png")
    args = ["--data", data] if command == "run" else []
    rc, _, err = cli(capsys, command, "nemo_rl", *args, "--out", out, option, value, "--backend", "interpreter")
    assert (rc, err) == (1, f"shapec: error: {message}\n")
    assert not out.exists()


@pytest.mark.parametrize("option", ["--group-by", "--agent-by"])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_field_option_is_a_usage_error_not_the_default(tmp_path, spec, option, value):
    """`--group-by ""` quietly grouped by prompt_id, the default it is meant to replace."""
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(1, 2))
    rc, stdout, err = run(spec, "--data", data, "--out", tmp_path / "o.jsonl", option, value)
    assert (rc, stdout) == (2, "")
    assert err == (f"shapec: error: {option}: expected a field name or a dotted path such as agent_ref.name, "
                   f"got {value!r}\n")
    assert not (tmp_path / "o.jsonl").exists()


def test_a_file_root_rewrites_keeps_its_owner(tmp_path, spec, capsys):
    """The temporary file renamed over the destination was root's, so its owner lost it (the suite
    runs as root, as CI does: only root may give a file to another owner)."""
    target = tmp_path / "t.shape"
    target.write_text(UNFORMATTED)
    os.chown(target, 1234, 2345)
    os.chmod(target, 0o640)
    rc, _, err = cli(capsys, "fmt", target)
    assert rc == 0, err
    st = target.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 2345, 0o640)
    assert "     term" not in target.read_text()


@pytest.mark.parametrize("command", [["check"], ["fmt"], ["fmt", "--check"]])
def test_a_folder_is_searched_for_regular_spec_files_only(tmp_path, command):
    """A FIFO named a.shape in a checked folder made check and fmt wait forever; a link to
    /dev/zero would never end; a folder named b.shape was 'cannot read'."""
    os.mkfifo(tmp_path / "a.shape")
    (tmp_path / "b.shape").mkdir()
    (tmp_path / "z.shape").symlink_to("/dev/zero")
    (tmp_path / "c.shape").write_text(SPEC)
    proc = subprocess.run([sys.executable, "-m", "shapec.cli", *command, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)  # a hang fails the test instead of stalling the suite
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == ("1 file ok\n" if command == ["check"] else "")


# ------------------------------------------------------------------ interruptions outside run
@pytest.mark.parametrize("how, status, word", [("ctrl-c", 130, "interrupted"), ("sigterm", 143, "terminated")])
def test_an_interrupted_fmt_is_one_line_and_leaves_its_files(tmp_path, capsys, monkeypatch, how, status, word):
    """Ctrl-C printed a KeyboardInterrupt traceback in every command but run, and SIGTERM killed fmt
    without removing its temporary file."""
    import signal

    from shapec.tools import fmt

    target = tmp_path / "t.shape"
    target.write_text(UNFORMATTED)
    real = fmt.write_text

    def stopped(path, text, *args, **kw):
        if how == "ctrl-c":
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGTERM)
        return real(path, text, *args, **kw)

    monkeypatch.setattr(fmt, "write_text", stopped)
    rc, stdout, err = cli(capsys, "fmt", target)
    assert (rc, stdout, err) == (status, "", f"shapec fmt: {word}\n")
    assert target.read_text() == UNFORMATTED and leftovers(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def _alias_bomb(levels: int) -> str:
    """YAML whose nested aliases stand for 10**levels values in a few lines."""
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nlongest:\n  p: *a{levels - 1}\n"


@pytest.mark.parametrize("source", ["config", "set", "meta"])
def test_yaml_aliases_that_stand_for_too_many_values_are_refused(tmp_path, capsys, source):
    """Nine lines of aliases (a billion values) made run walk them for ever, and a 10**6 one printed
    every value in the error; a list that holds itself is refused the same way."""
    spec = tmp_path / "longest.shape"
    spec.write_text(SPEC)
    data = write_jsonl(tmp_path / "in.jsonl", rows_of(1, 2))
    config = tmp_path / "bomb.yaml"
    config.write_text(_alias_bomb(9))
    too_many = "the YAML stands for more than 1,000,000 values (its aliases repeat values, or a value holds itself)"
    if source == "config":
        args, where = ["run", spec, "--data", data, "--out", tmp_path / "o.jsonl", "--config", config], str(config)
    elif source == "set":
        args, where = ["run", spec, "--data", data, "--out", tmp_path / "o.jsonl", "--set", "p=&a [*a]"], \
            "--set 'p=&a [*a]'"
    else:
        args, where = ["plot", "nemo_rl", "--out", tmp_path / "o.png", "--meta", "profile_band=&a {x: *a}"], \
            "--meta profile_band"
    rc, stdout, err = cli(capsys, *args, "--backend", "interpreter")
    assert (rc, stdout, err) == (1, "", f"shapec: error: {where}: {too_many}; write the values out\n")


def test_a_spec_diagnostic_names_its_file_on_one_line(tmp_path, capsys):
    """The compiler's diagnostics escape a file name too: a line break or an escape code in it would
    split the `file:line:col` line or drive the terminal."""
    bad = tmp_path / "a\nb\x1b[31m.shape"
    bad.write_text("shaper s() {\n  let x = 1 +\n}\n")
    rc, stdout, err = cli(capsys, "check", str(bad))
    assert rc == 1
    head = f"{tmp_path}/a\\nb\\x1b[31m.shape:3:1: error[E101]: unexpected '}}'"
    assert (stdout + err).splitlines()[0].startswith(head)
    assert "\x1b" not in stdout + err


@pytest.mark.parametrize("command", ["run", "plot"])
def test_no_output_is_a_spec_the_spec_imports(tmp_path, capsys, command):
    """--out reaching an imported helper spec through a link would have replaced it with rows or a
    picture: the command reads it, so it is refused like the spec itself, and the helper is kept."""
    helper = tmp_path / "helper.shape"
    helper.write_text("shaper h() produces real {\n  term t = 1\n}\n")
    spec = tmp_path / "main.shape"
    spec.write_text('import "helper.shape"\npipeline p = helper.h\n')
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt_id": "a", "reward": 1}\n{"prompt_id": "a", "reward": 0}\n')
    out = tmp_path / "out.jsonl"
    out.symlink_to(helper)
    before = helper.read_bytes()
    extra = ["--data", data] if command == "run" else []
    rc, _, err = cli(capsys, command, spec, "--backend", "interpreter", *extra, "--out", out)
    assert rc == 2
    assert err == f"shapec {command}: cannot write {out}: --out is a spec the spec imports ({helper})\n"
    assert helper.read_bytes() == before and out.is_symlink()
