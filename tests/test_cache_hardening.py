"""The kernel cache heals itself (issue #11, items 19-21): a bad entry is purged and rebuilt once
in the same call, an unwritable folder gives way to a private one with one warning, build
folders never outlive their build, and a fork after a parallel kernel works."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import shapec
from shapec.compiler import build, cache

SPEC = "shaper half() {\n  term t = -0.5 when reward > 0\n}\n"
EXPECTED = [0.5, 0.0]


def rewards(backend="numba", parallel=False) -> list[float]:
    shaper = shapec.compile_str(SPEC, backend=backend, parallel=parallel).half
    return shaper([1.0, 0.0], group_size=2).rewards.tolist()


def run_python(code: str, cache_dir: Path, **env) -> subprocess.CompletedProcess:
    env = {**os.environ, "SHAPEC_CACHE_DIR": str(cache_dir), **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=600)


PROBE = f"""
    import shapec
    s = shapec.compile_str({SPEC!r}, backend="numba").half
    print(s([1.0, 0.0], group_size=2).rewards.tolist())
"""


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """A fresh cache folder, nothing remembered in this process, no fall back from earlier tests."""
    monkeypatch.setenv("SHAPEC_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(build, "_MODULES", {})
    monkeypatch.setattr(cache, "_PRIVATE", [])
    return tmp_path / "kernels"


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_bad_numba_cache_files_are_purged_and_rebuilt_in_the_same_call(kernels, damage):
    first = run_python(PROBE, kernels, SHAPEC_AOT="0")
    assert first.stdout == f"{EXPECTED}\n", first.stderr
    index = list(kernels.glob("__pycache__/*.nbi")) + list(kernels.glob("__pycache__/*.nbc"))
    assert {p.suffix for p in index} == {".nbi", ".nbc"}
    for p in index:
        p.write_bytes(b"\x80\x04 not a pickle" if damage == "garbage" else p.read_bytes()[:7])
    second = run_python(PROBE, kernels, SHAPEC_AOT="0")
    assert second.returncode == 0 and second.stdout == f"{EXPECTED}\n", second.stderr
    assert "did not load" in second.stderr and "purged them" in second.stderr and "shapec bug" not in second.stderr
    third = run_python(PROBE, kernels, SHAPEC_AOT="0")  # healed for good: no warning any more
    assert third.stdout == f"{EXPECTED}\n" and "purged" not in third.stderr, third.stderr


def test_non_utf8_digest_sidecar_is_rebuilt(kernels):
    assert rewards() == EXPECTED
    (so,) = kernels.glob("shapec_aot_*.so")
    sidecar = so.with_name(so.name + ".sha256")
    sidecar.write_bytes(b"\xff\xfe\x00garbage")
    built = build.STATS["built"]
    build._MODULES.clear()
    assert rewards() == EXPECTED
    assert build.STATS["built"] == built + 1
    assert len(sidecar.read_text().strip()) == 64


def test_foreign_extension_with_a_matching_digest_is_replaced_and_loads_in_the_same_process(kernels, tmp_path):
    assert rewards() == EXPECTED
    (so,) = kernels.glob("shapec_aot_*.so")
    foreign = Path(np.random.mtrand.__file__).read_bytes()  # a real extension, of another module
    os.replace(_written(tmp_path / "foreign.so", foreign), so)
    _written(so.with_name(so.name + ".sha256"), __import__("hashlib").sha256(foreign).hexdigest().encode())
    build._MODULES.clear()
    built = build.STATS["built"]
    assert rewards() == EXPECTED  # this process had that path mapped already
    assert build.STATS["built"] == built + 1 and so.read_bytes() != foreign
    assert not list(kernels.glob(f"{cache.BUILD_PREFIX}*"))


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("how", ["read_only", "below_a_file"])
def test_unwritable_cache_folder_falls_back_to_a_private_one(kernels, monkeypatch, caplog, how):
    if how == "below_a_file":  # a real one, even for root: SHAPEC_CACHE_DIR under a regular file
        kernels.parent.joinpath("file").write_text("")
        kernels = kernels.parent / "file" / "kernels"
        monkeypatch.setenv("SHAPEC_CACHE_DIR", str(kernels))
        reason = "Not a directory"
    else:  # chmod does not stop root, so refuse writes the way a read-only mount does
        reason = "Read-only file system"
        real_mkdir = Path.mkdir

        def read_only(self, *args, **kwargs):
            if str(self).startswith(str(kernels)):
                raise OSError(errno.EROFS, reason, str(self))
            return real_mkdir(self, *args, **kwargs)

        monkeypatch.setattr(Path, "mkdir", read_only)
    with caplog.at_level(logging.WARNING, logger="shapec"):
        assert rewards() == EXPECTED
        assert shapec.compile_str(SPEC.replace("-0.5", "-0.25"), backend="numba").half(
            [1.0, 0.0], group_size=2).rewards.tolist() == [0.75, 0.0]
    warnings = [r.getMessage() for r in caplog.records if "kernel cache" in r.getMessage()]
    assert len(warnings) == 1 and str(kernels) in warnings[0] and reason in warnings[0]
    private = cache._PRIVATE[0]
    assert str(private) in warnings[0] and len(list(private.glob("shapec_aot_*.so"))) == 2
    assert "shapec bug" not in caplog.text


def test_full_disk_falls_back_once_and_leaves_no_temp_files(kernels, monkeypatch, caplog):
    real_open = open

    def full(path, *args, **kwargs):
        if str(path).startswith(str(kernels)) and "w" in (args[0] if args else kwargs.get("mode", "r")):
            real_open(path, *args, **kwargs).close()  # the file exists, as on a real full disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", full)
    with caplog.at_level(logging.WARNING, logger="shapec"):
        assert rewards() == EXPECTED
    monkeypatch.undo()
    [warning] = [r.getMessage() for r in caplog.records if "kernel cache" in r.getMessage()]
    assert str(kernels) in warning and "No space left on device" in warning
    assert "shapec bug" not in caplog.text
    assert [p for p in kernels.rglob("*") if p.is_file()] == []  # no 0-byte or half-written file left


def test_a_full_private_cache_too_is_a_disk_error_not_a_shapec_bug(kernels, monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(cache, "write_atomic", full)
    with pytest.raises(cache.KernelCacheError) as err:
        rewards()
    assert str(kernels) in str(err.value) and "No space left on device" in str(err.value)
    assert not isinstance(err.value, build.ShapecInternalError)


def test_build_folders_of_dead_processes_are_swept_and_none_outlive_a_build(kernels):
    kernels.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = kernels / f"{cache.BUILD_PREFIX}{cache._host()}-{dead.stdout.strip()}-abc123"
    live = kernels / f"{cache.BUILD_PREFIX}{cache._host()}-{os.getppid()}-def456"
    for folder in (stale, live):
        (folder / "pycc-build-x").mkdir(parents=True)
    system_tmp = set(Path(tempfile.gettempdir()).glob("pycc-build-*"))
    assert rewards() == EXPECTED  # builds an extension
    assert not stale.exists() and live.exists()
    assert set(Path(tempfile.gettempdir()).glob("pycc-build-*")) == system_tmp
    assert sorted(p.name for p in kernels.glob(f"{cache.BUILD_PREFIX}*")) == [live.name]


def test_killed_build_leaves_only_folders_the_next_build_sweeps(kernels):
    code = textwrap.dedent("""
        import os, signal
        from shapec.compiler import build
        real = build._TempfileIn.mkdtemp
        def die(self, *a, **k):
            real(self, *a, **k)
            os.kill(os.getpid(), signal.SIGKILL)  # kill -9 in the middle of numba's build
        build._TempfileIn.mkdtemp = die
    """) + textwrap.dedent(PROBE)
    system_tmp = set(Path(tempfile.gettempdir()).glob("pycc-build-*"))
    killed = run_python(code, kernels)
    assert killed.returncode == -9
    assert list(kernels.glob(f"{cache.BUILD_PREFIX}*"))  # left behind, recognisably
    assert set(Path(tempfile.gettempdir()).glob("pycc-build-*")) == system_tmp
    after = run_python(PROBE, kernels)
    assert after.stdout == f"{EXPECTED}\n", after.stderr
    assert not list(kernels.glob(f"{cache.BUILD_PREFIX}*"))


def test_fork_after_a_parallel_kernel_works():
    code = """
        import multiprocessing as mp
        import numpy as np
        import shapec
        spec = %r
        n = 8192  # past PARALLEL_MIN_ROLLOUTS: the threads do run
        r = np.tile([1.0, 0.0], n // 2)
        par = shapec.compile_str(spec, backend="numba", parallel=True).half
        assert par(r, group_size=2).rewards[:2].tolist() == %r
        import numba
        print(numba.threading_layer())

        def child(q):
            out = [shapec.compile_str(spec, backend=b, parallel=p).half(r, group_size=2).rewards[:2].tolist()
                   for b, p in (("interpreter", False), ("numba", False), ("numba", True))]
            q.put(out)

        q = mp.get_context("fork").Queue()
        p = mp.get_context("fork").Process(target=child, args=(q,))
        p.start()
        p.join(300)
        print(p.exitcode, q.get(timeout=5))
    """ % (SPEC, EXPECTED)
    done = run_python(code, Path(os.environ.get("SHAPEC_CACHE_DIR", tempfile.gettempdir())))
    assert done.returncode == 0, done.stderr
    layer, result = done.stdout.splitlines()
    assert layer in ("workqueue", "tbb")
    assert result == f"0 {[EXPECTED] * 3}"
