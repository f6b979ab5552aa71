"""Imports stay inside the importing spec's folder tree, and no diagnostic quotes a file that is
not a spec being checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shapec import check_file, check_source, compile_file

SECRET = "TOP-SECRET-7f3a9c"
LIB = "fn twice(x) = 2 * x\nshaper lib_s() {\n  let y = 1\n}\n"
BODY = "shaper s() {\n  input length: tokens\n  let x = length\n}\n"


def cli_check(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shapec.cli", "check", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def tree(tmp_path):
    """tmp/outside/secret.* (outside the tree) and tmp/specs/ (the tree) with a helper library."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("secret.shape", "secret.txt"):
        (outside / name).write_text(f"shaper {SECRET} {{\n}}\n{SECRET}\n")
    specs = tmp_path / "specs"
    (specs / "lib").mkdir(parents=True)
    (specs / "lib" / "helpers.shape").write_text(LIB)
    return specs


def refused(specs, target: str, code: str, expect: str):
    """`shapec check` on a spec importing target: one diagnostic, this code, caret on the string,
    and the secret appears in no output format."""
    spec = specs / "main.shape"
    spec.write_text(f"import {json.dumps(target)}\n{BODY}")
    text = cli_check(spec)
    js = cli_check("--format", "json", spec)
    for proc in (text, js):
        assert proc.returncode == 1, proc.stderr
        assert SECRET not in proc.stdout + proc.stderr
    [d] = json.loads(js.stdout)
    assert (d["code"], d["line"], d["column"]) == (code, 1, 8), d
    assert expect in d["message"], d["message"]
    return d


def test_absolute_path_is_refused(tree, tmp_path):
    refused(tree, str(tmp_path / "outside" / "secret.shape"), "E210", "not absolute")


def test_proc_environ_is_never_echoed(tree, monkeypatch):
    monkeypatch.setenv("SHAPEC_TEST_SECRET", SECRET)
    d = refused(tree, "/proc/self/environ", "E210", "not absolute")
    assert "only" not in d["message"]


def test_dotdot_leaving_the_tree_is_refused(tree):
    refused(tree, "../outside/secret.shape", "E210", "`..` leads outside the spec's folder tree")


def test_symlink_leaving_the_tree_is_refused(tree, tmp_path):
    (tree / "link.shape").symlink_to(tmp_path / "outside" / "secret.shape")
    refused(tree, "link.shape", "E210", "a symlink leads outside")
    (tree / "linkdir").symlink_to(tmp_path / "outside")
    refused(tree, "linkdir/secret.shape", "E210", "a symlink leads outside")


def test_nul_in_the_path_is_refused(tree):
    refused(tree, "lib/helpers.shape\0../../outside/secret.shape", "E210", "NUL")


@pytest.mark.parametrize("name, content", [
    ("notes.txt", SECRET.encode()), ("tool.py", f"print({SECRET!r})".encode()),
    ("blob.shape", b"\xff\xfe" + SECRET.encode() + b"\x00\x80")])
def test_non_spec_file_inside_the_tree_is_not_quoted(tree, name, content):
    (tree / name).write_bytes(content)
    d = refused(tree, name, "E211", "only .shape specs" if not name.endswith(".shape") else "not UTF-8")
    assert name in d["message"]


def test_folder_and_fifo_are_not_read(tree):
    (tree / "dir.shape").mkdir()
    refused(tree, "dir.shape", "E211", "not a regular file")
    os.mkfifo(tree / "pipe.shape")  # reading it would block forever
    refused(tree, "pipe.shape", "E211", "not a regular file")


def test_missing_file_and_unknown_stdlib_module(tree):
    refused(tree, "lib/nope.shape", "E205", "no such file")
    spec = tree / "main.shape"
    spec.write_text(f"import nemo_rll\n{BODY}")
    [d] = check_file(spec)
    assert (d.code, d.location()[:2]) == ("E205", (1, 8)) and "available: " in d.message and "nemo_rl" in d.message


def test_imports_inside_the_tree_work(tree):
    (tree / "lib" / "helpers.shape").write_text('import "../base.shape"\n' + LIB)  # `..` that stays inside
    (tree / "base.shape").write_text("fn one() = 1\n")
    (tree / "main.shape").write_text(f'import "lib/../lib/helpers.shape"\nimport nemo_rl\n{BODY}')
    assert check_file(tree / "main.shape") == []
    (tree / "lib" / "helpers.shape").write_text(LIB)
    (tree / "alias.shape").symlink_to(tree / "lib" / "helpers.shape")  # a symlink that stays inside is fine
    (tree / "main.shape").write_text(f'import "alias.shape"\n{BODY}')
    assert check_file(tree / "main.shape") == []
    assert compile_file(tree / "main.shape", backend="interpreter").shapers == ("s",)


def test_nested_import_cannot_leave_the_top_level_tree(tree):
    """The tree is the top-level spec's folder: an imported spec cannot reach above it either."""
    (tree / "lib" / "helpers.shape").write_text('import "../../outside/secret.shape"\n' + LIB)
    (tree / "main.shape").write_text(f'import "lib/helpers.shape"\n{BODY}')
    [d] = check_file(tree / "main.shape")
    assert d.code == "E210" and d.path.endswith("helpers.shape") and d.location()[:2] == (1, 8)
    assert SECRET not in d.render()


def test_parse_error_inside_an_imported_spec_shows_that_spec(tree):
    (tree / "lib" / "helpers.shape").write_text("fn twice(x) = 2 * )\n")
    (tree / "main.shape").write_text(f'import "lib/helpers.shape"\n{BODY}')
    [d] = check_file(tree / "main.shape")
    assert d.code == "E101" and d.path.endswith("helpers.shape") and "fn twice(x) = 2 * )" in d.render()


def test_cycle_has_a_caret_on_the_import(tree):
    (tree / "a.shape").write_text('import "b.shape"\nfn fa(x) = x\n')
    (tree / "b.shape").write_text('\nimport "a.shape"\nfn fb(x) = x\n')
    [d] = check_file(tree / "a.shape")
    assert (d.code, d.path, d.location()[:2]) == ("E212", str(tree / "b.shape"), (2, 8))
    assert "import cycle through a.shape" in d.message


def test_spec_without_a_file_imports_from_the_current_directory_tree(tree, monkeypatch):
    monkeypatch.chdir(tree)
    assert check_source(f'import "lib/helpers.shape"\n{BODY}') == []
    [d] = check_source(f'import "../outside/secret.shape"\n{BODY}')
    assert d.code == "E210" and SECRET not in d.render()


@pytest.mark.parametrize("how", ["stdlib", "path", "folder"])
def test_a_name_too_long_for_the_file_system_is_a_coded_diagnostic(tree, how):
    """pathlib's is_file() and exists() raise for a name the file system refuses (ENAMETOOLONG):
    the import must still end in a diagnostic with its caret, never an exception."""
    long = "d" + "1" * 400 + "apo"
    target = {"stdlib": long, "path": json.dumps(long + ".shape"), "folder": json.dumps(f"{long}/x.shape")}[how]
    spec = tree / "main.shape"
    spec.write_text(f"import {target}\n{BODY}")
    [d] = check_file(spec)
    assert (d.code, d.location()[:2]) == (("E205" if how == "stdlib" else "E211"), (1, 8)), d.message
    assert how == "stdlib" or "File name too long" in d.message
    [d2] = check_source(f"import {target}\n{BODY}", "fuzz.shape")
    assert d2.code == d.code
