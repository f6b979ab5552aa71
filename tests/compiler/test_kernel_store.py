"""The kernel store (compiler/store.py, files.py): kernels keyed by what the user wrote and what
shapec is, loaded warm without lowering, remembered failures, a cache folder that is private and
never trusted when it is not, writes that no planted link redirects, and a private fall back."""

from __future__ import annotations

import errno
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import shapec
from shapec import files
from shapec.compiler import store
from shapec.compiler.lowering.module import emit_python
from shapec.compiler.lowering.names import ShapecInternalError

from ..helpers import fresh_cache

ROOT = Path(__file__).resolve().parents[2]
SPEC = "shaper halve() {\n  term t = -0.5 when reward > 0\n}\n"
EXPECTED = [0.5, 0.0]
PROBE = f"""
    import sys
    import shapec
    from shapec.compiler import store
    s = shapec.compile_str({SPEC!r}, backend="numba").halve
    print(s([1.0, 0.0], group_size=2).rewards.tolist(), store.STATS["lowered"], "lowering.module" in str(sys.modules))
"""


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    return fresh_cache(tmp_path, monkeypatch)


def run_python(code: str, cache: Path, umask: int | None = None, user: int | None = None, **env):
    """`code` in a new process with SHAPEC_CACHE_DIR at `cache` (kernels go to cache/kernels)."""
    env = {**os.environ, "SHAPEC_CACHE_DIR": str(cache), **env}

    def as_asked():
        if umask is not None:
            os.umask(umask)
        if user is not None:
            os.setgid(user)
            os.setuid(user)

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600, preexec_fn=as_asked)


def halve(backend: str = "numba") -> list[float]:
    return shapec.compile_str(SPEC, backend=backend).halve([1.0, 0.0], group_size=2).rewards.tolist()


def snapshot(folder: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


# ------------------------------------------------------------------------- keys and warm loads
def test_a_warm_process_lowers_nothing_writes_nothing_and_prints_nothing(kernels):
    cold = run_python(PROBE, kernels.parent)
    assert cold.stdout == f"{EXPECTED} 1 True\n", cold.stderr
    before = snapshot(kernels)
    warm = run_python(PROBE, kernels.parent)
    assert warm.stdout == f"{EXPECTED} 0 False\n" and warm.stderr == ""  # the lowering is not even imported
    assert snapshot(kernels) == before


def test_the_same_spec_by_relative_path_absolute_path_and_string_shares_one_kernel(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "mine.shape"
    path.write_text(SPEC)
    monkeypatch.chdir(tmp_path / "sub")
    irs = [shapec.compile_file("mine.shape", backend="interpreter").ir("halve"),
           shapec.compile_file(path.resolve(), backend="interpreter").ir("halve"),
           shapec.compile_file(Path("..") / "sub" / "mine.shape", backend="interpreter").ir("halve"),
           shapec.compile_str("# another comment\n" + SPEC, filename="elsewhere/other.shape",
                              backend="interpreter").ir("halve")]
    assert len({ir.filename for ir in irs}) == 4
    assert len({store.kernel_key(ir, False, ()) for ir in irs}) == 1


def test_the_key_follows_the_ir_shapec_numba_the_cpu_parallel_and_the_facts(monkeypatch):
    ir = shapec.compile_str(SPEC, backend="interpreter").ir("halve")
    key = store.kernel_key(ir, False, ())
    assert store.kernel_key(ir, False, ()) == key
    other = shapec.compile_str(SPEC.replace("-0.5", "-0.25"), backend="interpreter").ir("halve")
    assert store.kernel_key(other, False, ()) != key
    assert store.kernel_key(ir, True, ()) != key
    assert store.kernel_key(ir, False, (1.0,)) != key
    for identity in ("shapec_identity", "host_identity"):
        monkeypatch.setattr(store, identity, lambda: "something else")
        assert store.kernel_key(ir, False, ()) != key
        monkeypatch.undo()


def test_shapecs_identity_covers_its_version_and_every_source_file(monkeypatch, tmp_path):
    identity = store.shapec_identity()
    store.shapec_identity.cache_clear()
    monkeypatch.setattr(shapec, "__version__", "0.0.0")
    assert store.shapec_identity() != identity
    store.shapec_identity.cache_clear()
    monkeypatch.undo()
    assert store.shapec_identity() == identity


def test_the_key_is_the_same_in_every_process():
    code = f"import shapec; from shapec.compiler import store; " \
           f"print(store.kernel_key(shapec.compile_str({SPEC!r}, backend='interpreter').ir('halve'), False, ()))"
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(keys) == 1 and len(keys.pop().strip()) == 64


def test_a_one_stage_pipeline_shares_its_shapers_kernel(kernels):
    module = shapec.compile_str(SPEC + "pipeline only = halve\n", backend="numba")
    assert module["halve"]([1.0, 0.0], group_size=2).rewards.tolist() == EXPECTED
    assert module["only"]([1.0, 0.0], group_size=2).rewards.tolist() == EXPECTED
    assert len(list(kernels.glob("*.py"))) == 1


def test_a_pipeline_compiles_one_module_per_stage_on_first_use(kernels):
    module = shapec.compile_file(ROOT / "shapec" / "stdlib" / "grpo_lead.shape", backend="numba")
    shaper = module["grpo_lead"]
    assert not kernels.exists() or not list(kernels.glob("*.py"))  # nothing compiled before a call
    shaper.prepare()
    assert sorted(p.name.split("_")[1] for p in kernels.glob("*.py")) == ["advantage", "reward"]


def test_a_repeated_stage_has_a_module_with_a_plain_file_name(kernels):
    """The pipeline's second `halve` is the stage `halve#2`: no `#` reaches a file or module name."""
    source = SPEC + "pipeline twice = halve >> halve\n"
    assert shapec.compile_str(source, backend="numba").twice([1.0, 0.0], group_size=2).rewards.tolist() == [0.0, 0.0]
    assert all(p.stem.isidentifier() for p in kernels.glob("*.py"))


def test_a_module_has_its_digest_on_its_first_line_and_is_private(kernels):
    assert halve() == EXPECTED
    (path,) = kernels.glob("*.py")
    ir = shapec.compile_str(SPEC, backend="interpreter").ir("halve")
    assert path.read_text() == store.header(emit_python(ir)) + emit_python(ir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(kernels.stat().st_mode) == 0o700


@pytest.mark.parametrize("damage", ["tampered", "truncated", "not utf-8"])
def test_a_damaged_module_is_written_again(kernels, damage):
    assert halve() == EXPECTED
    (path,) = kernels.glob("*.py")
    good = path.read_text()
    path.write_bytes({"tampered": good.replace("-0.5", "-9.5").encode(), "truncated": good.encode()[:100],
                      "not utf-8": b"\xff\xfe garbage"}[damage])
    store._LOADED.clear()
    lowered = store.STATS["lowered"]
    assert halve() == EXPECTED
    assert store.STATS["lowered"] == lowered + 1 and path.read_text() == good


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_numba_index_is_purged_and_rebuilt_in_the_same_call(kernels, damage):
    assert run_python(PROBE, kernels.parent).returncode == 0
    index = list(kernels.glob("__pycache__/*.nbi")) + list(kernels.glob("__pycache__/*.nbc"))
    assert {p.suffix for p in index} == {".nbi", ".nbc"}
    for p in index:
        p.write_bytes(b"\x80\x04 not a pickle" if damage == "garbage" else p.read_bytes()[:7])
    second = run_python(PROBE, kernels.parent)
    assert second.stdout.startswith(f"{EXPECTED} 1"), second.stderr
    assert "shapec bug" not in second.stderr
    third = run_python(PROBE, kernels.parent)  # healed for good
    assert third.stdout == f"{EXPECTED} 0 False\n" and third.stderr == ""


# ------------------------------------------------------------------------- failures
BROKEN_NUMBA = """
    import numba
    from numba.core.errors import TypingError
    from shapec.compiler import store
    store.value_checks()  # the batch layer's checks compile; the kernel will not
    def broken(*args, **kwargs):
        raise TypingError("Cannot unify float64 and array(float64, 1d, C)")
    numba.njit = broken
"""


REMEMBERED = f"""
    import shapec
    from shapec.compiler import store
    try:
        shapec.compile_str({SPEC!r}, backend="numba").halve([1.0, 0.0], group_size=2)
    except Exception as err:
        print(str(err).replace("\\n", " "), store.STATS["lowered"], store.STATS["imported"], sep="\\t")
"""


def test_numba_failure_is_an_internal_error_naming_spec_and_shaper(kernels, monkeypatch):
    import numba
    from numba.core.errors import TypingError

    def broken(*args, **kwargs):
        raise TypingError("Cannot unify float64 and array(float64, 1d, C)")

    store.value_checks()  # the batch layer's checks compile; the kernel will not
    monkeypatch.setattr(numba, "njit", broken)
    with pytest.raises(ShapecInternalError) as err:
        shapec.compile_str(SPEC, "specs/halve.shape", backend="numba").halve([1.0], group_size=1)
    message = str(err.value)
    assert "shaper 'halve' from specs/halve.shape" in message and "TypingError" in message
    assert "internal error" in message and "backend='interpreter'" in message


def test_a_failed_compile_is_remembered_and_not_retried_by_the_next_process(kernels):
    failed = run_python(BROKEN_NUMBA + PROBE, kernels.parent)
    assert failed.returncode == 1 and "TypingError" in failed.stderr
    (marker,) = kernels.glob("*.failed")
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    again = run_python(REMEMBERED, kernels.parent)  # numba works now, but the key is the same
    message, lowered, imported = again.stdout.strip().split("\t")
    assert "in an earlier run" in message and str(marker) in message and "TypingError" in message
    assert (lowered, imported) == ("0", "0") and not list(kernels.glob("__pycache__/*.nbi"))
    marker.unlink()  # as the message says: delete it to try again
    assert run_python(PROBE, kernels.parent).stdout.startswith(f"{EXPECTED} ")


class Stopped(BaseException):
    """A signal raised as an exception, as `shapec run` raises SIGTERM."""


def test_a_signal_during_a_compile_stops_it_and_is_not_remembered_as_a_failure(kernels, monkeypatch):
    store.value_checks()

    def stopped(fn, signature):
        raise Stopped()

    monkeypatch.setattr(store, "_compile", stopped)
    lowered = store.STATS["lowered"]
    with pytest.raises(Stopped):
        shapec.compile_str(SPEC, backend="numba").halve([1.0], group_size=1)
    assert not list(kernels.glob("*.failed")) and store.STATS["lowered"] == lowered + 1  # nor built again


# ------------------------------------------------------------------------- a private cache
def test_the_cache_is_private_under_umask_000(kernels):
    done = run_python(PROBE, kernels.parent, umask=0o000)
    assert done.returncode == 0, done.stderr
    entries = [kernels.parent, *kernels.parent.rglob("*")]
    assert {stat.S_IMODE(p.stat().st_mode) for p in entries if p.is_dir()} == {0o700}
    assert {stat.S_IMODE(p.stat().st_mode) for p in entries if p.is_file()} == {0o600}
    assert any(p.suffix == ".nbi" for p in entries) and any(p.suffix == ".lark" for p in entries)


PLANTED = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


def plant(kernels: Path, marker: Path) -> None:
    """A module under the very name shapec computes, and a numba index beside it, that would each
    leave `marker` behind if anything ran them."""
    ir = shapec.compile_str(SPEC, backend="interpreter").ir("halve")
    facts = shapec.compile_str(SPEC, backend="numba").halve._kernels[0].facts.of(None)
    path = store.module_path(kernels, ir, store.kernel_key(ir, False, facts))
    (kernels / "__pycache__").mkdir(parents=True, exist_ok=True)
    body = PLANTED.format(marker=str(marker))
    path.write_text(store.header(body) + body)
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."  # a pickle that runs a command
    for name in (f"{path.stem}.kernel_s0_halve-1.py311.nbi", f"{path.stem}.groups_s0_halve-1.py311.nbi"):
        (kernels / "__pycache__" / name).write_bytes(payload)


@pytest.mark.parametrize("how", ["world-writable folder", "group-writable folder", "another user's folder",
                                 "another user's files", "world-writable files"])
def test_nothing_planted_in_a_cache_others_could_write_is_ever_run(kernels, tmp_path, how):
    marker = tmp_path / "PWNED"
    plant(kernels, marker)
    others = 65534  # nobody
    if "another user" in how and os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    for p in [kernels.parent, kernels, *kernels.rglob("*")]:
        if how == "world-writable folder" and p.is_dir():
            p.chmod(0o777)
        elif how == "group-writable folder" and p == kernels.parent:
            p.chmod(0o770)
        elif how == "another user's folder" and p == kernels.parent:
            os.chown(p, others, others)
        elif how == "another user's files" and p.is_file():
            os.chown(p, others, others)
        elif how == "world-writable files" and p.is_file():
            p.chmod(0o666)
    done = run_python(PROBE, kernels.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{EXPECTED} 1"), done.stderr
    assert not marker.exists()
    if "folder" in how:  # refused whole: one warning naming it and why, and the private cache used
        warnings = [line for line in done.stderr.splitlines() if "not using the cache folder" in line]
        assert len(warnings) == 1 and str(kernels.parent) in warnings[0]
        assert ("owned by another user" if "another" in how else "writable by") in warnings[0]


def test_a_symlink_at_any_name_shapec_writes_never_redirects_a_write(kernels, tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    ir = shapec.compile_str(SPEC, backend="interpreter").ir("halve")
    facts = shapec.compile_str(SPEC, backend="numba").halve._kernels[0].facts.of(None)
    path = store.module_path(kernels, ir, store.kernel_key(ir, False, facts))
    kernels.mkdir(parents=True)
    kernels.parent.chmod(0o700)
    for name in (path.name, path.with_suffix(".failed").name, f"{path.name}.{os.getpid()}.tmp"):
        (kernels / name).symlink_to(victim)
    renamed = []
    real_replace, real_link = os.replace, os.link

    def checked(rename):
        def move(src, dst, *args, **kwargs):
            if Path(dst).parent == kernels:  # shapec's own files (numba renames its index files in __pycache__)
                st = os.lstat(src)  # what is about to become the file: a fresh regular file of ours alone
                assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and stat.S_IMODE(st.st_mode) == 0o600
                renamed.append(Path(dst).name)
            return rename(src, dst, *args, **kwargs)
        return move

    monkeypatch.setattr(os, "replace", checked(real_replace))
    monkeypatch.setattr(os, "link", checked(real_link))
    assert halve() == EXPECTED
    assert victim.read_text() == "precious" and path.name in renamed
    assert not path.is_symlink() and path.read_text().startswith("# shapec-sha256: ")


# ------------------------------------------------------------------------- a cache that cannot be written
@pytest.mark.parametrize("how", ["read_only", "below_a_file"])
def test_an_unwritable_cache_folder_gives_way_to_a_private_one_with_one_warning(kernels, monkeypatch, caplog, how):
    cache = kernels.parent
    if how == "below_a_file":  # real even for root: SHAPEC_CACHE_DIR under a regular file
        cache.parent.joinpath("file").write_text("")
        cache = cache.parent / "file" / "cache"
        monkeypatch.setenv("SHAPEC_CACHE_DIR", str(cache))
        reason = "Not a directory"
    else:  # chmod does not stop root: refuse writes the way a read-only mount does
        reason = "Read-only file system"
        real_mkdir = os.mkdir

        def read_only(path, *args, **kwargs):
            if str(path).startswith(str(cache)):
                raise OSError(errno.EROFS, reason, str(path))
            return real_mkdir(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", read_only)
    with caplog.at_level(logging.WARNING, logger="shapec"):
        assert halve() == EXPECTED
        quarter = shapec.compile_str(SPEC.replace("-0.5", "-0.25"), backend="numba").halve
        assert quarter([1.0, 0.0], group_size=2).rewards.tolist() == [0.75, 0.0]
    warnings = [r.getMessage() for r in caplog.records if "not using the cache folder" in r.getMessage()]
    assert len(warnings) == 1 and str(cache) in warnings[0] and reason in warnings[0]
    private = files._FALLBACK[0]
    assert str(private) in warnings[0] and len(list(private.glob("kernels/*.py"))) == 2
    assert "shapec bug" not in caplog.text


def test_a_full_disk_moves_to_a_private_cache_once_and_leaves_no_temporary_file(kernels, monkeypatch, caplog):
    real_open = open

    def full(path, *args, **kwargs):
        if str(path).startswith(str(kernels)) and "w" in (args[0] if args else kwargs.get("mode", "r")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", full)
    with caplog.at_level(logging.WARNING, logger="shapec"):
        assert halve() == EXPECTED
    monkeypatch.undo()
    [warning] = [r.getMessage() for r in caplog.records if "not using the cache folder" in r.getMessage()]
    assert "No space left on device" in warning and "shapec bug" not in caplog.text
    assert [p for p in kernels.rglob("*") if p.is_file()] == []  # no empty or half-written file left


def test_a_full_private_cache_too_is_a_disk_error_not_a_shapec_bug(kernels, monkeypatch):
    def full(path, data, replace=True):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(files, "write_atomic", full)
    with pytest.raises(files.CacheError) as err:
        halve()
    assert "No space left on device" in str(err.value) and not isinstance(err.value, ShapecInternalError)


def test_the_default_cache_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("SHAPEC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert files.configured_cache() == tmp_path / "shapec"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert files.configured_cache() == Path.home() / ".cache" / "shapec"


def test_numba_disable_jit_runs_the_python_functions_and_remembers_no_failure(kernels):
    """NUMBA_DISABLE_JIT=1 (a user debugging) leaves plain functions: both backends shape as usual,
    no `.failed` entry is written, and a later process compiles as if nothing had happened."""
    both = f"""
    import shapec
    for backend in ("interpreter", "numba"):
        s = shapec.compile_str({SPEC!r}, backend=backend).halve
        print(s([1.0, 0.0], group_size=2).rewards.tolist())
    """
    plain = run_python(both, kernels.parent, NUMBA_DISABLE_JIT="1")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split("\n")[:2] == [str(EXPECTED)] * 2
    assert not list(kernels.parent.rglob("*.failed"))
    assert run_python(PROBE, kernels.parent).stdout.startswith(f"{EXPECTED} ")
