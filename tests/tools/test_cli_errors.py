"""Bad input to the CLI is one `shapec: error:` line, never a traceback, a no-op or a different reward."""

from __future__ import annotations

import os

import numpy as np
import pytest

import shapec
from shapec.cli import main
from shapec.runtime.params import ParamError, validate_params

SPEC = """shaper s() requires binary produces unit {
  input length: tokens
  gate right = reward > 0
  factor f = 1 - 0.5 * (length / max(length)) on right
}
"""
PARAMS = """shaper p(alpha: float in [0, 1] = 0.5, n: int >= 0 = 3, on: bool = true) produces real {
  input length: tokens
  term t = alpha + n
}
"""
ROWS = '{"prompt_id":"p0","reward":1,"length":1}\n{"prompt_id":"p0","reward":0,"length":2}\n'
UNFORMATTED = "shaper q() produces real {\n  input length: tokens   # x\n  term t = -1\n}\n"


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEC_BACKEND", "interpreter")
    (tmp_path / "s.shape").write_text(SPEC)
    (tmp_path / "p.shape").write_text(PARAMS)
    (tmp_path / "d.jsonl").write_text(ROWS)
    return tmp_path


def shapec_cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def one_error(err: str, *parts: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for part in parts:
        assert part in err, err


# ------------------------------------------------------------------ B5: config YAML
@pytest.mark.parametrize("text, message", [
    (b"s:\n  {a: 1}: 2\n", ":2:3: not valid YAML: a key must be a name or a number, not a dict"),
    (b"? [1, 2]\n: 3\n", ":1:3: not valid YAML: a key must be a name or a number, not a list"),
    (b"\xff\n", "cannot read config: not UTF-8 (byte 0xff at offset 0)"),
    (b"s:\n  a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "not valid YAML: nested too deeply"),
    (b"1: 2\ntrue: 3\n", "duplicate key 'true', equal to the earlier key '1'"),
    (b"s:\n  1: 2\n", "param names are strings, got the key 1"),
    (b"- 1\n", "expected a mapping of shaper names to params, got list"),
    (b"5\n", "expected a mapping of shaper names to params, got int"),
])
@pytest.mark.parametrize("command", ["run", "explain", "plot"])
def test_bad_config_yaml_is_one_error_line(files, capsys, command, text, message):
    config = files / "c.yaml"
    config.write_bytes(text)
    extra = {"run": ["--data", files / "d.jsonl", "--out", files / "o.jsonl"],
             "explain": ["--data", files / "d.jsonl"], "plot": ["--out", files / "p.png"]}[command]
    rc, _, err = shapec_cli(capsys, command, files / "s.shape", "--config", config, *extra)
    assert rc == 1
    one_error(err, f"shapec: error: {config}", message)


def test_empty_config_and_merge_keys_are_fine(files, capsys):
    (files / "c.yaml").write_text("")
    assert shapec_cli(capsys, "run", files / "p.shape", "--config", files / "c.yaml", "--data", files / "d.jsonl",
                      "--out", files / "o.jsonl")[0] == 0
    (files / "c.yaml").write_text("p: &b\n  alpha: 0.25\n")  # an anchor on a block of its own shaper
    assert shapec_cli(capsys, "run", files / "p.shape", "--config", files / "c.yaml", "--data", files / "d.jsonl",
                      "--out", files / "o.jsonl")[0] == 0
    assert '"reward": 3.25' in (files / "o.jsonl").read_text().replace(":3.25", ": 3.25")


# ------------------------------------------------------------------ B7 / B11: numeric options
@pytest.mark.parametrize("command, option, value, message", [
    ("plot", "--max-length", "inf", "--max-length: expected a finite number > 0, got inf"),
    ("plot", "--max-length", "nan", "--max-length: expected a finite number > 0, got nan"),
    ("plot", "--max-length", "1e400", "--max-length: expected a finite number > 0, got 1e400"),
    ("plot", "--max-length", "0", "--max-length: expected a finite number > 0, got 0"),
    ("explain", "--width", "-5", "--width: expected an integer >= 40, got -5"),
    ("explain", "--limit", "-1", "--limit: expected a positive integer, got -1"),
    ("explain", "--limit", "0", "--limit: expected a positive integer, got 0"),
    ("explain", "--group-size", "-2", "--group-size: expected a positive integer, got -2"),
    ("plot", "--group-size", "0", "--group-size: expected a positive integer, got 0"),
    ("run", "--chunk-rows", "-3", "--chunk-rows: expected a positive integer, got -3"),
    ("check", "--trials", "0", "--trials: expected a positive integer, got 0"),
])
def test_numeric_options_are_checked_at_parse_time(files, capsys, command, option, value, message):
    extra = {"run": ["--data", files / "d.jsonl", "--out", files / "o.jsonl"],
             "explain": ["--data", files / "d.jsonl"], "plot": ["--out", files / "p.png"], "check": []}[command]
    rc, out, err = shapec_cli(capsys, command, files / "s.shape", option, value, *extra)
    assert rc == 2 and out == ""
    one_error(err, f"shapec: error: {message}")
    assert not (files / "p.png").exists() and not (files / "o.jsonl").exists()


def test_explain_limit_counts_the_groups_not_shown(files, capsys):
    rc, out, _ = shapec_cli(capsys, "explain", files / "s.shape", "--data", files / "d.jsonl", "--limit", "1")
    assert rc == 0 and "not shown" not in out and "p0" in out


# ------------------------------------------------------------------ B13: param types
@pytest.mark.parametrize("setting, message", [
    ("alpha=true", "param 'alpha' of shaper 'p': expected a float, got True (bool)"),
    ("alpha='0.1'", "param 'alpha' of shaper 'p': expected a float, got '0.1' (str)"),
    ('n="3"', "param 'n' of shaper 'p': expected an integer, got '3' (str)"),
    ("n=true", "param 'n' of shaper 'p': expected an integer, got True (bool)"),
    ("n=3.5", "param 'n' of shaper 'p'"),
    ("on=1", "param 'on' of shaper 'p': expected a bool (true or false), got 1 (int)"),
    ('on="yes"', "param 'on' of shaper 'p': expected a bool (true or false), got 'yes' (str)"),
])
def test_a_param_of_the_wrong_type_is_refused(files, capsys, setting, message):
    rc, _, err = shapec_cli(capsys, "run", files / "p.shape", "--data", files / "d.jsonl", "--out",
                            files / "o.jsonl", "--set", setting)
    assert rc == 1 and not (files / "o.jsonl").exists()
    one_error(err, message)


def test_params_api_refuses_wrong_types_and_keeps_right_ones():
    s = shapec.compile_str(PARAMS, "t.shape", "interpreter")
    ir = s.ir("p")
    for bad in ({"alpha": True}, {"alpha": "0.1"}, {"alpha": np.bool_(True)}, {"n": "3"}, {"on": 1},
                {"on": "yes"}, {"n": 2.5}):
        with pytest.raises(ParamError, match=f"param '{next(iter(bad))}' of shaper 'p'"):
            validate_params(ir, bad)
    good = {"alpha": 1, "n": 3.0, "on": np.bool_(False)}
    assert validate_params(ir, good) == {"alpha": 1.0, "n": 3, "on": False}
    assert validate_params(ir, {"alpha": np.float64(0.2), "n": np.int64(2), "on": np.array(True)}) == \
        {"alpha": 0.2, "n": 2, "on": True}
    assert validate_params(ir, {"alpha": np.array(0.3)})["alpha"] == 0.3


BAND = '''shaper b(w: band = {1, 3, 0.5}) requires binary produces unit {
  input length: tokens
  factor f = band(length, w) on reward > 0
}
'''


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_remembered_params_never_let_an_equal_ill_typed_value_through(backend):
    """The params memos (params.seen_key, the fast lane's) key on every item's type: (1, 3, True) is
    equal to (1, 3, 1.0) and hashes alike, but only the second is a band."""
    shaper = shapec.compile_str(BAND, "t.shape", backend)["b"]
    rewards, length = np.array([1.0, 1.0]), np.array([1.0, 2.0])
    good = shaper(rewards, group_size=2, channels={"length": length}, params={"w": (1.0, 3.0, 1.0)})
    for bad in ((1.0, 3.0, True), [1.0, 3.0, True], (1.0, True, 1.0)):
        with pytest.raises(ParamError, match="param 'w' of shaper 'b': expected a band"):
            shaper(rewards, group_size=2, channels={"length": length}, params={"w": bad})
    again = shaper(rewards, group_size=2, channels={"length": length}, params={"w": (1.0, 3.0, 1.0)})
    assert again.rewards.tobytes() == good.rewards.tobytes()


@pytest.mark.parametrize("w", [(float("-inf"), 3.0, 1.0), (1.0, float("inf"), 0.5),  # a band is finite
                               [(1.0, 3.0, 0.5), (-float("inf"), 3.0, 0.5)],  # per group too
                               [(1.0, 3.0, 1.0), (1.0, 3.0, True)]])  # and typed per group: True == 1.0
def test_infinite_bands_and_ill_typed_per_group_values_are_refused(w):
    shaper = shapec.compile_str(BAND, "t.shape", "interpreter")["b"]
    with pytest.raises(ParamError, match="param 'w' of shaper 'b'"):
        shaper(np.array([1.0, 1.0]), group_size=1, channels={"length": np.array([1.0, 2.0])}, params={"w": w})


def test_plot_meta_the_shaper_refuses_is_one_error_line(tmp_path, capsys):
    rc, _, err = shapec_cli(capsys, "plot", "l1", "--shaper", "l1_exact", "--out", tmp_path / "p.png",
                            "--meta", "target=-5")
    assert rc == 1 and err.strip() == ("shapec: error: cannot shape the plotted group: metadata['target']: "
                                       "negative length at index 0; tokens must be >= 0"), err
    assert not (tmp_path / "p.png").exists()


# ------------------------------------------------------------------ B9: symlinks, modes, read-only files
def test_fmt_writes_through_a_symlink(files, capsys):
    target = files / "t.shape"
    target.write_text(UNFORMATTED)
    os.chmod(target, 0o640)
    link = files / "l.shape"
    link.symlink_to("t.shape")
    rc, _, err = shapec_cli(capsys, "fmt", link)
    assert rc == 0, err
    assert link.is_symlink() and "   #" not in target.read_text()
    assert target.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("dangling", [False, True])
def test_run_out_writes_through_a_symlink(files, capsys, dangling):
    (files / "real").mkdir()
    target = files / "real" / "o.jsonl"
    if not dangling:
        target.write_text("old\n")
    link = files / "o.jsonl"
    link.symlink_to(target)
    rc, _, err = shapec_cli(capsys, "run", files / "s.shape", "--data", files / "d.jsonl", "--out", link)
    assert rc == 0, err
    assert link.is_symlink() and target.read_text().count("\n") == 2


def test_run_out_to_a_link_to_a_folder_or_a_missing_folder_is_refused(files, capsys):
    (files / "dirlink.jsonl").symlink_to(files)
    rc, _, err = shapec_cli(capsys, "run", files / "s.shape", "--data", files / "d.jsonl", "--out",
                            files / "dirlink.jsonl")
    assert rc == 2 and err.endswith("it is a directory\n")
    (files / "far.jsonl").symlink_to(files / "nowhere" / "x.jsonl")
    rc, _, err = shapec_cli(capsys, "run", files / "s.shape", "--data", files / "d.jsonl", "--out",
                            files / "far.jsonl")
    assert rc == 2 and err.endswith(f"folder {files / 'nowhere'} does not exist\n")


def test_a_file_the_user_cannot_write_is_refused(files, capsys, monkeypatch):
    target = files / "t.shape"
    target.write_text(UNFORMATTED)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if mode == os.W_OK and str(p) == str(target)
                        else real_access(p, mode, **kw))  # root may write anything: pretend not
    rc, _, err = shapec_cli(capsys, "fmt", target)
    assert rc == 2 and err == f"shapec fmt: cannot write {target}: Permission denied (the file is read-only)\n"
    assert target.read_text() == UNFORMATTED


# ------------------------------------------------------------------ S2: plot --out as run --out
@pytest.mark.parametrize("name, reason", [
    ("dd", "it is a directory"),
    ("missing/p.png", "folder {} does not exist"),
    ("noext", "expected an image file name ending in .png, .svg or .pdf"),
])
def test_plot_out_is_refused_as_run_refuses(files, capsys, name, reason):
    (files / "dd").mkdir()
    out = files / name
    rc, stdout, err = shapec_cli(capsys, "plot", files / "s.shape", "--out", out)
    assert rc == 2 and stdout == ""
    one_error(err, f"shapec plot: cannot write {out}: {reason.format(files / 'missing')}")
    assert sorted(p.name for p in files.iterdir()) == ["d.jsonl", "dd", "p.shape", "s.shape"]
    assert list((files / "dd").iterdir()) == []


def test_plot_writes_exactly_the_file_it_reports(files, capsys):
    out = files / "curve.svg"
    rc, stdout, _ = shapec_cli(capsys, "plot", files / "s.shape", "--out", out)
    assert rc == 0 and stdout == f"wrote {out}\n" and out.read_text().lstrip().startswith("<?xml")
