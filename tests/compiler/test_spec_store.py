"""The store of checked specs (compiler/spec_store.py): a spec file checked once is read back by a
later process without parsing or checking it, until the spec or anything it imports changes; a spec
with errors is never kept; an entry others could have written is never unpickled."""

from __future__ import annotations

import pickle
import stat
from pathlib import Path

import pytest

import shapec
from shapec.checker.loader import Loader
from shapec.compiler import spec_store
from shapec.syntax.source import ShapeError

from ..helpers import fresh_cache
from .test_kernel_store import run_python

MAIN = 'import "helper.shape"\n\npipeline main = helper.step\n'
HELPER = "shaper step() {\n  term t = -0.25 when reward > 0\n}\n"
OTHER = HELPER.replace("0.25", "0.5")


@pytest.fixture
def spec(tmp_path, monkeypatch) -> Path:
    fresh_cache(tmp_path, monkeypatch)
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "helper.shape").write_text(HELPER)
    (folder / "main.shape").write_text(MAIN)
    return folder / "main.shape"


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """The file name of every spec the loader checks from here on."""
    seen: list[str] = []
    real = Loader.source

    def counted(self, text, filename, folder):
        seen.append(Path(filename).name)
        return real(self, text, filename, folder)

    monkeypatch.setattr(Loader, "source", counted)
    return seen


def reward(path: Path) -> float:
    return float(shapec.compile_file(path, backend="interpreter").main([1.0], group_size=1).rewards[0])


def entries(spec: Path) -> list[Path]:
    return sorted((spec.parents[1] / "cache" / "specs").glob("*.pickle"))


def test_a_spec_checked_once_is_read_back_without_checking_it_again(spec, checks):
    assert reward(spec) == 0.75 and checks == ["main.shape"]
    assert reward(spec) == 0.75 and checks == ["main.shape"]
    [entry] = entries(spec)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_a_warm_process_imports_neither_the_parser_nor_the_checker(spec):
    probe = f"""
        import sys
        import shapec
        print(shapec.compile_file({str(spec)!r}, backend="interpreter").main([1.0], group_size=1).rewards.tolist(),
              "shapec.syntax.parser" in sys.modules, "shapec.checker.module" in sys.modules)
    """
    cache = spec.parents[1] / "cache"
    assert run_python(probe, cache).stdout == "[0.75] True True\n"
    warm = run_python(probe, cache)
    assert warm.stdout == "[0.75] False False\n" and warm.stderr == ""


@pytest.mark.parametrize("change", ["the spec", "an import's text", "an import's target"])
def test_any_change_to_what_the_check_read_checks_again(spec, checks, change):
    assert reward(spec) == 0.75
    if change == "the spec":
        spec.write_text(MAIN.replace("helper.step", "helper.step >> helper.step"))
    elif change == "an import's text":
        (spec.parent / "helper.shape").write_text(OTHER)
    else:  # the same name now leads to another file with other text
        (spec.parent / "other.shape").write_text(OTHER)
        (spec.parent / "helper.shape").unlink()
        (spec.parent / "helper.shape").symlink_to("other.shape")
    expected = 0.5  # two steps of 0.25, or one of 0.5
    assert reward(spec) == expected and checks == ["main.shape", "main.shape"]
    assert reward(spec) == expected and len(checks) == 2  # and the new check is kept


def test_a_spec_with_errors_is_checked_and_reported_every_time(spec, checks):
    spec.write_text(MAIN.replace("helper.step", "helper.stop"))
    for _ in range(2):
        with pytest.raises(ShapeError, match="stop"):
            reward(spec)
    assert checks == ["main.shape", "main.shape"] and entries(spec) == []


def test_an_import_that_no_longer_resolves_is_reported(spec):
    assert reward(spec) == 0.75
    (spec.parent / "helper.shape").unlink()
    with pytest.raises(ShapeError, match="E205"):
        reward(spec)


def test_a_damaged_entry_is_checked_again_and_replaced(spec, checks):
    assert reward(spec) == 0.75
    [entry] = entries(spec)
    entry.write_bytes(entry.read_bytes()[:40])
    assert reward(spec) == 0.75 and len(checks) == 2
    assert reward(spec) == 0.75 and len(checks) == 2


@pytest.mark.parametrize("how", ["world-writable file", "group-writable file", "a link"])
def test_an_entry_others_could_have_written_is_never_unpickled(spec, checks, tmp_path, how):
    assert reward(spec) == 0.75
    [entry] = entries(spec)
    marker = tmp_path / "PWNED"
    planted = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."  # a pickle that runs a command
    if how == "a link":
        (tmp_path / "planted.pickle").write_bytes(planted)
        entry.unlink()
        entry.symlink_to(tmp_path / "planted.pickle")
    else:
        entry.write_bytes(planted)
        entry.chmod(0o666 if how == "world-writable file" else 0o660)
    assert reward(spec) == 0.75 and len(checks) == 2
    assert not marker.exists()
    assert not entry.is_symlink() and stat.S_IMODE(entry.stat().st_mode) == 0o600  # replaced by a private one


def test_a_shaper_read_back_pickles_with_the_text_of_every_spec_it_imports(spec, checks):
    assert reward(spec) == 0.75
    module = shapec.compile_file(spec, backend="interpreter")  # from the store
    data = pickle.dumps(module.main)
    (spec.parent / "helper.shape").write_text(OTHER)
    assert len(checks) == 1 and module.imported_files() == ((spec.parent / "helper.shape").resolve(),)
    assert pickle.loads(data)([1.0], group_size=1).rewards.tolist() == [0.75]  # the helper as it was read


def test_the_stdlib_is_kept_like_any_spec(spec, checks):
    assert shapec.load("nemo_rl").names() == shapec.load("nemo_rl").names()
    assert checks.count("nemo_rl.shape") == 1
    assert spec_store.checked_file(shapec.api.STDLIB / "nemo_rl.shape").filename.endswith("nemo_rl.shape")


def test_a_string_and_an_unpickled_shaper_are_read_back_too(spec, checks, monkeypatch):
    monkeypatch.chdir(spec.parent)  # a string's imports resolve from the current folder
    text = spec.read_text()
    for _ in range(2):
        assert shapec.compile_str(text, backend="interpreter").main([1.0], group_size=1).rewards.tolist() == [0.75]
    data = pickle.dumps(shapec.compile_file(spec, backend="interpreter").main)
    for _ in range(2):
        assert pickle.loads(data)([1.0], group_size=1).rewards.tolist() == [0.75]
    assert checks == ["<string>", "main.shape", "main.shape"]  # the string, the file, its pickle's text: once each


def test_a_spec_too_deep_for_pickle_is_checked_every_time_instead(spec, checks):
    deep = "shaper deep() produces real {\n  input x: float\n  term t = x" + " + x - x" * 125 + "\n}\n"
    spec.write_text(deep)
    for _ in range(2):
        out = shapec.compile_file(spec, backend="interpreter").deep([0.0], group_size=1, channels={"x": [0.5]})
        assert out.rewards.tolist() == [0.5]
    assert checks == ["main.shape", "main.shape"] and entries(spec) == []
