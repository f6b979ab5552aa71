"""Spec text is read one way everywhere (strict UTF-8, Python's newline rule), fmt keeps a file's line
endings, an import name is defined once, and cache file names stay short whatever the spec says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import shapec
from shapec.compiler import store
from shapec.syntax.source import ShapeError

LIB = b"shaper lib() produces real {\n  input length: tokens\n  # note\r  term t = -1\n}\n"


def cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shapec.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def reward(shaper) -> float:
    return shaper([1.0], group_size=1, channels={"length": [1]}).rewards.tolist()[0]


def test_a_lone_cr_ends_a_line_however_the_spec_is_loaded(tmp_path):
    (tmp_path / "lib.shape").write_bytes(LIB)
    (tmp_path / "main.shape").write_text('import "lib.shape" as l\npipeline p = l.lib\n')
    direct = shapec.compile_file(tmp_path / "lib.shape", backend="interpreter").lib
    imported = shapec.compile_file(tmp_path / "main.shape", backend="interpreter").p
    given = shapec.compile_str(LIB.decode(), str(tmp_path / "lib.shape"), "interpreter").lib
    assert [reward(direct), reward(imported), reward(given)] == [0.0, 0.0, 0.0]  # the term is live


@pytest.mark.parametrize("eol", ["\r", "\r\n"])
def test_positions_after_a_cr_count_it_as_a_line_break(tmp_path, eol):
    text = f"shaper s() produces real {{{eol}  input length: tokens{eol}  term t = nope{eol}}}{eol}"
    (tmp_path / "s.shape").write_bytes(text.encode())
    for diags in (shapec.check_file(tmp_path / "s.shape"), shapec.check_source(text, "s.shape")):
        assert [(d.code, d.location()[:2]) for d in diags] == [("E201", (3, 12))]
        assert "\r" not in diags[0].render()


def test_fmt_keeps_crlf_and_check_reports_every_byte_it_would_change(tmp_path):
    messy = tmp_path / "crlf.shape"
    messy.write_bytes(b"shaper s() produces real {\r\n  input length: tokens   # x\r\n  term t = -1\r\n}\r\n")
    assert cli("fmt", messy, cwd=tmp_path).returncode == 0
    data = messy.read_bytes()
    assert b"tokens  # x" in data and data.count(b"\r\n") == data.count(b"\n") == 4  # CRLF kept
    assert cli("fmt", "--check", messy, cwd=tmp_path).returncode == 0
    lone = tmp_path / "lib.shape"
    lone.write_bytes(LIB)
    proc = cli("fmt", "--check", lone, cwd=tmp_path)
    assert proc.returncode == 1 and "line 3 ends with CR" in proc.stderr and lone.read_bytes() == LIB
    assert cli("fmt", lone, cwd=tmp_path).returncode == 0
    assert lone.read_bytes() == LIB.replace(b"\r", b"\n")
    assert cli("fmt", "--check", lone, cwd=tmp_path).returncode == 0


BAD8 = b"shaper s() produces real {\n  input length: tokens # \xff\n  term t = -1\n}\n"


def test_a_spec_that_is_not_utf8_gets_a_coded_error_at_the_byte(tmp_path):
    (tmp_path / "bad8.shape").write_bytes(BAD8)
    with pytest.raises(ShapeError) as err:
        shapec.compile_file(tmp_path / "bad8.shape", backend="interpreter")
    (d,) = err.value.diagnostics
    assert (d.code, d.location()[:2]) == ("E102", (2, 26)) and "0xff" in d.message
    (tmp_path / "d.jsonl").write_text('{"prompt_id": "p", "reward": 1, "length": 1}\n')
    for args in (["compile", "bad8.shape"], ["run", "bad8.shape", "--data", "d.jsonl", "--out", "o.jsonl",
                                             "--backend", "interpreter"]):
        proc = cli(*args, cwd=tmp_path)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "bad8.shape:2:26: error[E102]" in proc.stderr


def test_an_imported_spec_that_is_not_utf8_is_refused_where_it_is_imported(tmp_path):
    (tmp_path / "bad8.shape").write_bytes(BAD8)
    (d,) = shapec.check_source('import "bad8.shape" as b\n', str(tmp_path / "main.shape"))
    assert (d.code, d.location()[:2]) == ("E211", (1, 8)) and "line 2, column 26" in d.message


PEN = "shaper pen() produces real {\n  input length: tokens\n  term t = %s\n}\n"


@pytest.mark.parametrize("main, caret", [
    ('import "one.shape" as lib\nimport "two.shape" as lib\npipeline p = lib.pen\n', (2, 23)),
    ('import "one.shape"\nimport "sub/one.shape"\npipeline p = one.pen\n', (2, 8)),
    ('import "one.shape" as pen\n' + PEN % "0" + "pipeline p = pen.pen\n", (1, 23)),
])
def test_an_import_name_that_is_already_defined_is_e202(tmp_path, main, caret):
    (tmp_path / "sub").mkdir()
    (tmp_path / "one.shape").write_text(PEN % "-0.5")
    (tmp_path / "two.shape").write_text(PEN % "-0.25")
    (tmp_path / "sub" / "one.shape").write_text(PEN % "-0.25")
    (tmp_path / "main.shape").write_text(main)
    diags = shapec.check_file(tmp_path / "main.shape")
    assert [(d.code, d.location()[:2]) for d in diags] == [("E202", caret)], [d.render() for d in diags]
    assert "already defined" in diags[0].message or "also defined" in diags[0].message
    with pytest.raises(ShapeError):
        shapec.compile_file(tmp_path / "main.shape", backend="interpreter")


@pytest.mark.parametrize("name", ["x" * 300, "_" * 250, "a_" + "9" * 400])
def test_cache_file_names_are_short_whatever_the_shaper_is_called(name):
    ir = shapec.compile_str(f"shaper {name}() produces real {{\n  term t = 0.5\n}}\n", "t.shape",
                            "interpreter").ir(name)
    path = store.module_path(Path("kernels"), ir, store.kernel_key(ir, False, ()))
    assert len(path.name) <= 72 and path.stem.isidentifier(), path.name
