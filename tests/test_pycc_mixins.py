"""pycc's C support objects are compiled once per cache folder and linked into every extension
(compiler/pycc_mixins.py): a second extension compiles no C file, extensions sharing them load
side by side in one process and compute what the interpreter computes, and a damaged object is
compiled again, never linked."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.compiler import build, pycc_mixins

from .helpers import fresh_aot_cache

HALF = "shaper half() {\n  term t = -0.5 when reward > 0\n}\n"
THIRD = "shaper third(w: float = 0.25) produces real {\n  input length: tokens\n  term t = -w * float(length)\n}\n"


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    return fresh_aot_cache(tmp_path, monkeypatch)


@pytest.fixture
def compiles(monkeypatch):
    """The C files compiled in this test, by every pycc toolchain."""
    from numba.pycc.platform import Toolchain

    seen = []
    real = Toolchain.compile_objects
    monkeypatch.setattr(Toolchain, "compile_objects",
                        lambda self, sources, *a, **k: seen.extend(sources) or real(self, sources, *a, **k))
    return seen


def both(source: str, name: str, **call):
    """The shaper's rewards from the numba backend (an extension) and from the interpreter."""
    fast = shapec.compile_str(source, f"{name}.shape", "numba")[name](**call).rewards
    slow = shapec.compile_str(source, f"{name}.shape", "interpreter")[name](**call).rewards
    return fast.tobytes(), slow.tobytes()


def mixins(folder):
    return sorted(folder.glob("shapec_mixin_*.o"))


def test_the_second_extension_compiles_no_c_file_and_both_load_in_one_process(kernels, compiles):
    fast, slow = both(HALF, "half", rewards=[1.0, 0.0], group_size=2)
    assert fast == slow
    objects = mixins(kernels)
    assert len(objects) == len(set(compiles)) > 1  # the first build compiled them, once each
    stamps = [p.stat().st_mtime_ns for p in objects]
    compiles.clear()
    built = build.STATS["built"]
    fast, slow = both(THIRD, "third", rewards=np.array([1.0, 0.0, 1.0]), group_size=3,
                      channels={"length": np.array([2.0, 0.0, 4.0])})
    assert fast == slow
    assert build.STATS["built"] == built + 1 and compiles == []
    assert [p.stat().st_mtime_ns for p in mixins(kernels)] == stamps
    assert len(list(kernels.glob("shapec_aot_*.so"))) == 2
    again = shapec.compile_str(HALF, "half.shape", "numba")["half"]([1.0, 0.0], group_size=2).rewards.tolist()
    assert again == [0.5, 0.0]  # the first extension still answers beside the second


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "digests"])
def test_a_damaged_object_is_compiled_again_not_linked(kernels, compiles, damage):
    assert both(HALF, "half", rewards=[1.0, 0.0], group_size=2)[0] == np.array([0.5, 0.0]).tobytes()
    victim = mixins(kernels)[0]
    if damage == "flip":
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
    elif damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:100])
    elif damage == "delete":
        victim.unlink()
    else:
        next(kernels.glob("shapec_mixin_*.sha256")).write_text("not a digest")
    compiles.clear()
    fast, slow = both(THIRD, "third", rewards=np.array([1.0, 1.0]), group_size=2,
                      channels={"length": np.array([3.0, 1.0])})
    assert fast == slow
    assert len(compiles) == len(mixins(kernels))  # every object compiled again
    compiles.clear()
    both(THIRD.replace("0.25", "0.5"), "third", rewards=np.array([1.0]), group_size=1,
         channels={"length": np.array([3.0])})
    assert compiles == []  # and intact from then on


def test_the_key_follows_what_the_objects_are_compiled_from():
    sources = [pycc_mixins.__file__]
    key = pycc_mixins._key(sources, [("A", 1)], ["/inc"], [])
    assert key == pycc_mixins._key(sources, [("A", 1)], ["/inc"], [])
    assert key != pycc_mixins._key(sources, [("A", 0)], ["/inc"], [])
    assert key != pycc_mixins._key(sources, [("A", 1)], ["/other"], [])
    assert key != pycc_mixins._key(sources, [("A", 1)], ["/inc"], ["-O0"])
    assert key != pycc_mixins._key([build.__file__], [("A", 1)], ["/inc"], [])


@pytest.mark.parametrize("cores", [2, 4])
def test_a_missing_set_compiles_on_other_threads_leaving_numba_a_core(kernels, monkeypatch, cores):
    """The C files are compiled off the calling thread, which meanwhile compiles the exports with
    numba: the build waits for gcc only at the link. They take every core but one (numba's), and
    are compiled without debug info."""
    import threading

    from numba.pycc.platform import Toolchain

    threads, flags = [], []
    real = Toolchain.compile_objects

    def spy(self, sources, *a, **k):
        threads.append(threading.current_thread())
        flags.append(k["extra_cflags"])
        return real(self, sources, *a, **k)

    monkeypatch.setattr(Toolchain, "compile_objects", spy)
    monkeypatch.setattr(pycc_mixins, "_cores", lambda: cores)
    fast, slow = both(HALF, "half", rewards=[1.0, 0.0], group_size=2)
    assert fast == slow
    assert len(threads) == len(mixins(kernels)) > cores
    assert threading.main_thread() not in threads and len(set(threads)) == cores - 1
    assert all(f[-1] == "-g0" for f in flags)
