"""The parser's tables (syntax/parser.py): built once into the private cache folder with Lark's own
`cache=`, read back only from a regular file this user alone may write, and built again when the
file is damaged, foreign, a link, or in a folder others could write."""

import os
import stat

import pytest

from shapec import files
from shapec.syntax import parser

SRC = "shaper s() requires binary produces real {\n  term t = -0.5 on reward > 0\n}\n"


@pytest.fixture
def grammar(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(files, "_FALLBACK", [])
    return tmp_path / "cache" / "grammar"


def build():
    """A fresh parser (not the process-wide one), and that it parses."""
    lark = parser._lark.__wrapped__()
    parser.GUARD.text = SRC
    try:
        assert lark.parse(SRC).data == "start"
    finally:
        parser.GUARD.text = ""
    return lark


def only_file(grammar):
    (path,) = grammar.glob("shape-*.lark")
    return path


def test_written_once_private_and_read_back(grammar):
    build()
    path = only_file(grammar)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(grammar.stat().st_mode) == 0o700
    stamp = path.stat().st_mtime_ns
    build()
    assert path.stat().st_mtime_ns == stamp  # read, not rewritten
    assert [p.name for p in grammar.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_damaged_file_is_built_again(grammar, damage):
    build()
    path = only_file(grammar)
    good = path.read_bytes()
    bad = {"garbage": b"not a pickle\n" * 3, "truncated": good[: len(good) // 2], "empty": b""}[damage]
    path.write_bytes(bad)
    build()
    assert path.read_bytes() != bad
    stamp = path.stat().st_mtime_ns
    build()  # the tables written again are read back
    assert path.stat().st_mtime_ns == stamp


@pytest.mark.parametrize("how", ["others can write it", "a symlink"])
def test_a_file_that_is_not_this_users_alone_is_never_read(grammar, tmp_path, how):
    build()
    path = only_file(grammar)
    marker = tmp_path / "PWNED"
    planted = b"x\n" + b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    if how == "a symlink":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.write_bytes(planted)
        path.unlink()
        path.symlink_to(elsewhere)
    else:
        path.write_bytes(planted)
        os.chmod(path, 0o666)
    build()
    assert not marker.exists() and not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_folder_others_can_write_is_neither_read_nor_written(grammar, caplog):
    grammar.parent.mkdir()
    os.chmod(grammar.parent, 0o777)
    build()
    assert not grammar.exists()
    assert "writable by others" in caplog.text
