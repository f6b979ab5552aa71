"""The batch checks ride with a cache folder's first kernel extension (compiler/checks_build.py):
no separate extension is built before the first kernel, later processes find them through the
note, a note that points anywhere else is ignored, and a process that builds no kernel and finds
no checks builds the standalone extension. Calls before the checks exist take the general path
and give the same rewards."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.compiler import build, checks_build
from shapec.runtime import fastcheck, validate

from .helpers import fresh_aot_cache

HALF = "shaper half() {\n  term t = -0.5 when reward > 0\n}\n"
THIRD = "shaper third(w: float = 0.25) produces real {\n  input length: tokens\n  term t = -w * float(length)\n}\n"
CALL = {"rewards": np.array([1.0, 0.0, 1.0]), "group_size": 3, "channels": {"length": np.array([2.0, 0.0, 4.0])}}


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache folder for ahead-of-time builds, and a process that has loaded no checks."""
    monkeypatch.setattr(validate, "_FAST", None)
    return fresh_aot_cache(tmp_path, monkeypatch)


def new_process(monkeypatch):
    """What a new process knows: nothing loaded."""
    monkeypatch.setattr(build, "_MODULES", {})
    monkeypatch.setattr(validate, "_FAST", None)


def assert_checks_work(module):
    assert module.clean_values(np.array([1.0, 2.0]), True, False, True)
    assert not module.clean_values(np.array([1.0, -2.0]), True, False, True)
    assert not module.clean_values(np.array([1.0, np.inf]), False, True, False)
    assert module.clean_offsets(np.array([0, 2, 3]), 3) and not module.clean_offsets(np.array([0, 3, 2]), 2)


def third(backend="numba"):
    return shapec.compile_str(THIRD, "third.shape", backend)["third"]


def test_the_first_kernel_extension_carries_the_checks_and_a_note_names_it(fresh):
    shaper = third()
    assert validate.compiled_checks() is None  # nothing built at load
    first = shaper(**CALL)
    assert first.rewards.tobytes() == third("interpreter")(**CALL).rewards.tobytes()
    assert list(fresh.glob("shapec_checks_*.so")) == []  # no standalone extension
    (carrier,) = fresh.glob("shapec_aot_third_*.so")
    assert checks_build.carrier_note().read_text() == carrier.name
    assert validate.compiled_checks() is build._MODULES[str(carrier)]
    assert_checks_work(validate.compiled_checks())
    assert shaper._lane.checks is None  # the first call went the general way
    again = shaper(**CALL)
    assert shaper._lane.checks is validate.compiled_checks()  # the lane took this one
    assert again.rewards.tobytes() == first.rewards.tobytes()


def test_a_later_process_finds_the_checks_through_the_note_and_carries_none(fresh, monkeypatch):
    third()(**CALL)
    new_process(monkeypatch)
    half = shapec.compile_str(HALF, "half.shape", "numba")["half"]
    carrier = validate.compiled_checks()
    assert carrier is not None and "third" in carrier.__name__  # found at load, before any kernel
    assert half([1.0, 0.0], group_size=2).rewards.tolist() == [0.5, 0.0]
    (extension,) = fresh.glob("shapec_aot_half_*.so")
    assert not checks_build.carries(build._MODULES[str(extension)])
    assert list(fresh.glob("shapec_checks_*.so")) == []
    assert validate.compiled_checks() is carrier


@pytest.mark.parametrize("note", ["../{name}", "/tmp/{name}", "{name}/../{name}", "shapec_aot_x.so", "",
                                  "shapec_aot_half", "{half}", "\xff"])
def test_a_note_naming_anything_but_an_intact_carrier_here_is_ignored(fresh, monkeypatch, note):
    """Only a bare file name of this CPU's kernel extension in the cache folder that exports every
    check is loaded; anything else leaves the numpy validators in charge until the standalone
    extension is built, by a process that loads a cached kernel which does not carry them."""
    third()(**CALL)
    half = lambda: shapec.compile_str(HALF, "half.shape", "numba")["half"]  # noqa: E731
    half()([1.0], group_size=1)
    (carrier,) = fresh.glob("shapec_aot_third_*.so")
    (plain,) = fresh.glob("shapec_aot_half_*.so")
    checks_build.carrier_note().write_bytes(note.format(name=carrier.name, half=plain.name).encode("latin-1"))
    new_process(monkeypatch)
    opened, real = [], build._load_extension
    monkeypatch.setattr(build, "_load_extension", lambda so: opened.append(so) or real(so))
    assert checks_build.load_checks(jit=False) is None
    # a name that is not this CPU's kernel extension is never even opened
    assert opened == [checks_build.checks_path()] + ([fresh / plain.name] if note == "{half}" else [])
    again = half()
    assert validate.compiled_checks() is None
    assert again([1.0, 0.0], group_size=2).rewards.tolist() == [0.5, 0.0]
    (standalone,) = fresh.glob("shapec_checks_*.so")
    assert validate.compiled_checks() is build._MODULES[str(standalone)]
    assert_checks_work(validate.compiled_checks())


def test_loading_the_carrier_mends_a_lost_note(fresh, monkeypatch):
    third()(**CALL)
    checks_build.carrier_note().unlink()
    new_process(monkeypatch)
    third()(**CALL)
    (carrier,) = fresh.glob("shapec_aot_third_*.so")
    assert checks_build.carrier_note().read_text() == carrier.name
    assert list(fresh.glob("shapec_checks_*.so")) == []


def test_a_carrier_that_is_gone_or_damaged_is_not_loaded(fresh, monkeypatch):
    third()(**CALL)
    (carrier,) = fresh.glob("shapec_aot_third_*.so")
    data = bytearray(carrier.read_bytes())
    data[len(data) // 2] ^= 0xFF
    carrier.unlink()  # a new file: this process has the old one mapped, and must not run damaged code
    carrier.write_bytes(bytes(data))
    new_process(monkeypatch)
    assert checks_build.load_checks(jit=False) is None
    carrier.unlink()
    assert checks_build.load_checks(jit=False) is None


def test_a_failed_extension_build_leaves_the_jit_checks(fresh, monkeypatch):
    """No extension (the build failed: kernels fall back to numba's JIT cache): the JIT checks serve."""
    def broken(cc, so):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(build, "_compile_into", broken)
    rewards = third()(**CALL).rewards
    assert rewards.tobytes() == third("interpreter")(**CALL).rewards.tobytes()
    assert validate.compiled_checks() is fastcheck
    assert list(fresh.glob("*.carrier")) == []
