"""The grammar cache (syntax/grammar_cache.py): written once, read back only when this user owns it
and no one else can write it, and rebuilt whenever it is foreign, broken or stale."""

import json
import os

import pytest

from shapec.syntax import parser

SRC = "shaper s() requires binary produces real {\n  term t = -0.5 on reward > 0\n}\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEC_CACHE_DIR", str(tmp_path))
    return tmp_path / "grammar"


def build():
    """A fresh parser (not the process-wide one), and that it parses."""
    lark = parser._lark.__wrapped__()
    parser._keyword_guard.local.text = SRC
    try:
        assert lark.parse(SRC).data == "start"
    finally:
        parser._keyword_guard.local.text = ""
    return lark


def only_file(cache):
    (path,) = cache.glob("shape-*.json")
    return path


def test_written_once_private_and_read_back(cache):
    build()
    path = only_file(cache)
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(cache.stat().st_mode & 0o777) == "0o700"
    stamp = path.stat().st_mtime_ns
    build()
    assert path.stat().st_mtime_ns == stamp  # read, not rewritten
    assert json.loads(path.read_text())["key"]


@pytest.mark.parametrize("damage", ["garbage", "other key", "truncated"])
def test_a_broken_or_stale_file_is_rebuilt(cache, damage):
    build()
    path = only_file(cache)
    good = path.read_text()
    bad = {"garbage": "not json", "truncated": good[: len(good) // 2],
           "other key": json.dumps({**json.loads(good), "key": "0" * 64})}[damage]
    path.write_text(bad)
    build()
    assert json.loads(path.read_text())["key"] == json.loads(good)["key"]


def test_a_file_others_can_write_is_never_read(cache, monkeypatch):
    build()
    path = only_file(cache)
    path.write_text("planted")
    os.chmod(path, 0o666)
    build()
    assert path.read_text() != "planted" and path.stat().st_mode & 0o777 == 0o600


def test_a_symlink_is_not_followed(cache, tmp_path):
    build()
    path = only_file(cache)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(path.read_text())
    path.unlink()
    path.symlink_to(elsewhere)
    build()
    assert not path.is_symlink() and elsewhere.read_text()


def test_a_folder_others_can_write_is_neither_read_nor_written(cache):
    cache.mkdir()
    os.chmod(cache, 0o777)
    build()
    assert list(cache.iterdir()) == []
