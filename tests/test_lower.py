"""Lowering to numba: the generated module, its on-disk cache, internal errors, pickling, the CLI."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import shapec
from shapec.cli import main
from shapec.compiler import build, lowering
from shapec.runtime.shaper import default_backend

ROOT = Path(__file__).resolve().parents[1]

OVERLONG = textwrap.dedent('''
    shaper overlong(limit: tokens > 0 = 10, cache: tokens > 0 = 4) produces real {
      input length: tokens
      let start = limit - cache
      term penalty = length <= start ? 0 : length <= limit ? (start - length) / cache : -1
    }
''')


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh, empty kernel cache directory, and no module remembered from earlier tests.

    Only for tests about the cache itself: building a kernel costs seconds, so the others share
    the session's cache."""
    monkeypatch.setenv("SHAPEC_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(build, "_MODULES", {})
    return tmp_path / "kernels"


def compiled(ir) -> list:
    """The kernels of a shaper or pipeline, compiled (load_kernels leaves that to each one's first call)."""
    kernels = build.load_kernels(ir)
    for kernel in kernels:
        kernel.prepare()
    return kernels


def run_python(code: str, cache_dir: Path) -> str:
    env = {**os.environ, "SHAPEC_CACHE_DIR": str(cache_dir)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


# ------------------------------------------------------------------ results
def test_overlong_by_hand():
    shaper = shapec.compile_str(OVERLONG, backend="numba").overlong
    out = shaper([1, 1, 1, 0], group_size=2, channels={"length": [5, 8, 12, 10]})
    # start = 10 - 4 = 6: length 5 -> 0; 8 -> (6 - 8) / 4 = -0.5; 12 -> -1; 10 -> (6 - 10) / 4 = -1
    assert out.terms["penalty"].tolist() == [0.0, -0.5, -1.0, -1.0]
    assert out.rewards.tolist() == [1.0, 0.5, 0.0, -1.0]


def test_nemo_rl_doc_example_on_numba():
    shaper = shapec.load("nemo_rl", backend="numba").length_penalty
    out = shaper([1, 1, 0], group_size=3, channels={"reasoning": [10, 30, 5], "answer": [0, 0, 0],
                                                    "low_effort": [0, 0, 0]}, params={"longest_total_penalty": 0.2})
    # two positive rollouts, both top scorers: the longer one (30 tokens) pays 0.2
    assert out.rewards.tolist() == [1.0, 0.8, 0.0]


def test_per_group_params_and_ragged_groups():
    shaper = shapec.compile_str(OVERLONG, backend="numba").overlong
    out = shaper([1, 1, 1, 1], offsets=[0, 1, 1, 4], channels={"length": [8, 8, 8, 20]},
                 params={"limit": [10, 20, 12], "cache": 4})
    # group 0: start 6, 8 -> -0.5; group 1 is empty; group 2: start 8, 8 -> 0 and 20 -> -1
    assert out.terms["penalty"].tolist() == [-0.5, 0.0, 0.0, -1.0]


def test_non_finite_reward_raises_like_the_interpreter():
    src = 'shaper ratio() produces real {\n  input length: tokens\n  term r = 1 / float(length)\n}\n'
    errors = []
    for backend in ("interpreter", "numba"):
        shaper = shapec.compile_str(src, backend=backend).ratio
        with pytest.raises(FloatingPointError) as err:
            shaper([1, 1, 1], group_size=1, channels={"length": [2, 0, 0]})
        errors.append(str(err.value))
    assert errors[0] == errors[1]
    assert "rollout 1 (group 1)" in errors[1]


def test_parallel_kernel_reports_the_first_non_finite_reward_across_chunks():
    src = 'shaper ratio() produces real {\n  input length: tokens\n  term r = 1 / float(length)\n}\n'
    shaper = shapec.compile_str(src, backend="numba", parallel=True).ratio
    n = 4 * lowering.PARALLEL_MIN_ROLLOUTS
    length = np.ones(n)
    length[[n - 5, n // 2 + 3]] = 0  # both in later chunks than the first
    with pytest.raises(FloatingPointError, match=rf"rollout {n // 2 + 3} \(group {(n // 2 + 3) // 8}\)"):
        shaper(np.ones(n), group_size=8, channels={"length": length})
    ok = shaper(np.ones(n), group_size=8, channels={"length": np.arange(1, n + 1)})
    np.testing.assert_array_equal(ok.rewards, 1 + 1 / np.arange(1, n + 1))


def test_parallel_is_an_option_and_an_environment_variable(monkeypatch):
    monkeypatch.setenv("SHAPEC_PARALLEL", "1")
    shaper = shapec.compile_str(OVERLONG).overlong
    assert shaper.parallel and "parallel" in repr(shaper)
    assert "prange(nchunks)" in lowering.emit_python(shaper.ir, parallel=True)
    assert "prange" not in lowering.emit_python(shaper.ir)
    assert not shapec.compile_str(OVERLONG, parallel=False).overlong.parallel
    monkeypatch.setenv("SHAPEC_PARALLEL", "0")
    assert pickle.loads(pickle.dumps(shaper)).parallel  # the option travels with the shaper
    monkeypatch.setenv("SHAPEC_PARALLEL", "yes")
    with pytest.raises(ValueError, match="SHAPEC_PARALLEL"):
        shapec.compile_str(OVERLONG)


def test_validation_mode_passes_rewards_through():
    shaper = shapec.compile_str(OVERLONG, backend="numba").overlong
    out = shaper([1, 0], group_size=2, channels={"length": [20, 20]}, training=False)
    assert out.rewards.tolist() == [1.0, 0.0]
    assert out.terms["penalty"].tolist() == [0.0, 0.0]
    assert out.stages[0].skip_reason(0) == "validation"


def test_numba_is_the_default_backend(monkeypatch):
    monkeypatch.delenv("SHAPEC_BACKEND", raising=False)
    assert default_backend() == "numba"
    monkeypatch.setenv("SHAPEC_BACKEND", "interpreter")
    assert shapec.compile_str(OVERLONG).overlong.backend == "interpreter"


# ------------------------------------------------------------------ the generated module
def test_generated_module_is_readable_python():
    ir = shapec.compile_str(OVERLONG, "overlong.shape", backend="interpreter").ir("overlong")
    source = lowering.emit_python(ir)
    compile(source, "generated.py", "exec")
    assert "def kernel_s0_overlong(" in source  # a mangled name: kind, index, sanitised suffix
    assert "# term 0" in source  # comments carry kinds and indices, never spec text
    assert 'cache=True, error_model="numpy"' in source
    assert "fastmath" not in source
    assert source.startswith("'Generated by shapec. Do not edit.'\n")
    assert "overlong.shape" not in source


def test_a_pipeline_compiles_a_module_per_stage_on_first_use(cache):
    mod = shapec.compile_file(ROOT / "shapec" / "stdlib" / "grpo_lead.shape", backend="interpreter")
    source = lowering.emit_python(mod.ir("grpo_lead"))  # what `shapec compile` prints: every stage
    assert "def kernel_s0_lead_reward(" in source and "def kernel_s1_lead_advantage(" in source
    kernels = build.load_kernels(mod.ir("grpo_lead"))
    assert [k.ir.name for k in kernels] == ["lead_reward", "lead_advantage"]
    assert not list(cache.glob("*.py"))  # nothing compiled before a call
    for kernel in kernels:
        kernel.prepare()
    assert sorted(p.name.split("_")[1] for p in cache.glob("*.py")) == ["advantage", "reward"]


# ------------------------------------------------------------------ the cache
def test_cache_file_lives_in_the_cache_dir_with_a_hash_header(cache):
    ir = shapec.compile_str(OVERLONG, backend="interpreter").ir("overlong")
    compiled(ir)
    (path,) = cache.glob("*.py")
    text = path.read_text()
    assert path.name.startswith("overlong_")
    assert text.startswith("# shapec-sha256: ") and text.endswith(lowering.emit_python(ir))


def test_default_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("SHAPEC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build.cache_dir() == tmp_path / "shapec"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert build.cache_dir() == Path.home() / ".cache" / "shapec"


def test_second_process_loads_the_compiled_extension_without_numba(cache):
    probe = '''
        import sys
        import shapec
        from shapec.compiler import build
        shaper = shapec.compile_str(%r, backend="numba").overlong
        out = shaper([1.0, 1.0], group_size=2, channels={"length": [5, 12]})
        print(build.STATS["written"], build.STATS["built"], "numba" in sys.modules, out.rewards.tolist())
    ''' % OVERLONG
    first = run_python(probe, cache).split(maxsplit=3)
    (path,) = cache.glob("*.py")
    (so,) = cache.glob("shapec_aot_overlong_*.so")
    assert f"_{build.host_fingerprint()}." in so.name  # compiled for this CPU, as numba's JIT would
    mtimes = path.stat().st_mtime_ns, so.stat().st_mtime_ns
    second = run_python(probe, cache).split(maxsplit=3)
    assert first[:3] == ["1", "1", "True"]  # written, built by numba
    assert second[:3] == ["0", "0", "False"]  # nothing written or built; numba not even imported
    assert (path.stat().st_mtime_ns, so.stat().st_mtime_ns) == mtimes
    assert first[3] == second[3] == "[1.0, 0.0]\n"


def test_jit_cache_is_used_when_aot_is_off(cache, monkeypatch):
    probe = '''
        import shapec
        shaper = shapec.compile_str(%r, backend="numba").overlong
        out = shaper([1.0, 1.0], group_size=2, channels={"length": [5, 12]})
        fn = shaper._kernels[0].prepare()
        print(sum(fn.stats.cache_hits.values()), sum(fn.stats.cache_misses.values()), out.rewards.tolist())
    ''' % OVERLONG
    monkeypatch.setenv("SHAPEC_AOT", "0")
    first = run_python(probe, cache).split(maxsplit=2)
    second = run_python(probe, cache).split(maxsplit=2)
    assert first[:2] == ["0", "1"]  # compiled
    assert second[:2] == ["1", "0"]  # loaded from numba's cache
    assert first[2] == second[2] == "[1.0, 0.0]\n"
    assert not list(cache.glob("shapec_aot_*.so"))


def test_corrupt_extension_is_rebuilt_never_loaded(cache):
    ir = shapec.compile_str(OVERLONG, backend="interpreter").ir("overlong")
    compiled(ir)
    (so,) = cache.glob("shapec_aot_*.so")
    good = so.read_bytes()
    build._MODULES.clear()
    broken = so.with_suffix(".broken")
    broken.write_bytes(good[: len(good) // 2])  # truncated; a new file, as the loaded one stays mapped
    os.replace(broken, so)
    built = build.STATS["built"]
    kernels = compiled(ir)
    assert build.STATS["built"] == built + 1
    assert so.read_bytes() != good[: len(good) // 2]
    shaper = shapec.compile_str(OVERLONG, backend="numba").overlong
    assert shaper._kernels[0].prepare() is kernels[0].prepare()
    assert shaper([1.0], group_size=1, channels={"length": [8]}).rewards.tolist() == [0.5]


@pytest.fixture
def compiler_check():
    """numba remembers for the process whether a C compiler works (an lru_cache): a test that
    hides the compiler starts and ends with that forgotten, so later builds find it again."""
    from numba.pycc.platform import external_compiler_works

    external_compiler_works.cache_clear()
    yield
    external_compiler_works.cache_clear()


def test_without_a_c_compiler_kernels_fall_back_to_the_jit_cache(cache, monkeypatch, caplog, compiler_check):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setattr(build, "_FELL_BACK", [])
    ir = shapec.compile_str(OVERLONG, backend="interpreter").ir("overlong")
    build_dirs = set(Path(tempfile.gettempdir()).glob("pycc-build-*"))
    kernels = compiled(ir)
    # numba finds no compiler when the toolchain is built, or (with that check cached) when compiling
    assert build._FELL_BACK and ("cannot build" in build._FELL_BACK[0] or "failed" in build._FELL_BACK[0])
    assert "JIT cache" in caplog.text
    assert set(Path(tempfile.gettempdir()).glob("pycc-build-*")) == build_dirs  # nothing left behind
    assert hasattr(kernels[0].prepare(), "stats")  # a numba dispatcher: same generated code, same results
    shaper = shapec.compile_str(OVERLONG, backend="numba").overlong
    assert shaper([1.0], group_size=1, channels={"length": [8]}).rewards.tolist() == [0.5]


def test_corrupt_cache_file_is_rebuilt(cache):
    ir = shapec.compile_str(OVERLONG, backend="interpreter").ir("overlong")
    compiled(ir)
    (path,) = cache.glob("*.py")
    good = path.read_text()
    tampered = good.replace("not isnan(x) else 0.0", "not isnan(x) else 99.0")
    assert tampered != good
    path.write_text(tampered)  # tampered body, stale header
    build._MODULES.clear()
    written = build.STATS["written"]
    kernels = compiled(ir)
    assert build.STATS["written"] == written + 1
    assert path.read_text() == good
    shaper = shapec.compile_str(OVERLONG, backend="numba").overlong
    assert shaper([1.0], group_size=1, channels={"length": [12]}).rewards.tolist() == [0.0]
    assert kernels[0].prepare() is shaper._kernels[0].prepare()


def test_truncated_cache_file_is_rebuilt(cache):
    ir = shapec.compile_str(OVERLONG, backend="interpreter").ir("overlong")
    path = build.module_path(ir, lowering.emit_python(ir))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xff\xfe garbage")
    compiled(ir)
    assert path.read_text().startswith("# shapec-sha256: ")


def test_changing_the_source_changes_the_key(cache):
    def path(src):
        ir = shapec.compile_str(src, backend="interpreter").ir("overlong")
        return build.module_path(ir, lowering.emit_python(ir))

    assert path(OVERLONG) == path(OVERLONG)
    assert path(OVERLONG) != path(OVERLONG.replace(": -1", ": -2"))
    # params are kernel arguments: a new default reuses the compiled kernel
    assert path(OVERLONG) == path(OVERLONG.replace("= 10", "= 11"))
    assert build.cache_key("x") != build.cache_key("y")


def test_the_key_covers_the_versions(monkeypatch):
    import numba

    assert build.numba_version() == numba.__version__  # read without importing numba
    before = build.cache_key("same source")
    monkeypatch.setattr(build, "numba_version", lambda: "0.0.1")
    assert build.cache_key("same source") != before
    monkeypatch.undo()
    monkeypatch.setattr(shapec, "__version__", "9.9.9")
    assert build.cache_key("same source") != before


# ------------------------------------------------------------------ internal errors
def test_numba_failure_is_an_internal_error_naming_spec_and_shaper(cache, monkeypatch):
    import numba
    from numba.core.errors import TypingError

    def broken_njit(*args, **kwargs):
        raise TypingError("Cannot unify float64 and array(float64, 1d, C)")

    monkeypatch.setattr(numba, "njit", broken_njit)
    with pytest.raises(lowering.ShapecInternalError) as err:
        shapec.compile_str(OVERLONG, "specs/overlong.shape", backend="numba").overlong([1.0], group_size=1,
                                                                                     channels={"length": [8]})
    message = str(err.value)
    assert "shaper 'overlong' from specs/overlong.shape" in message
    assert "internal error" in message and "TypingError" in message
    assert not isinstance(err.value, TypingError)  # never the raw numba error, never a silent fallback


# ------------------------------------------------------------------ pickling
STATEFUL = textwrap.dedent('''
    shaper running(tau: float in [0, 1] = 0.1) produces real {
      input correct: bool
      input length: tokens
      let acc = batch.mean(correct)
      state best: float = 0 update present(acc) ? max(best, acc) : best
      gate stable = acc >= best - tau
      term shorter = -0.001 * float(length - min(length where correct)) on correct when stable
    }
''')


def test_pickled_numba_shaper_gives_identical_results_and_keeps_state():
    shaper = shapec.compile_str(STATEFUL, backend="numba").running
    batch = dict(group_size=2, channels={"correct": [1, 1, 1, 0], "length": [10, 30, 20, 5]})
    shaper([1, 1, 1, 0], **batch)
    # accuracy 3/4 -> best = 0.75
    assert shaper.state_dict() == {"running": {"best": 0.75}}
    clone = pickle.loads(pickle.dumps(shaper))
    assert clone.backend == "numba" and clone.state_dict() == {"running": {"best": 0.75}}
    low = dict(group_size=2, channels={"correct": [1, 0, 0, 0], "length": [10, 30, 20, 5]})
    a, b = shaper([1, 0, 0, 0], **low), clone([1, 0, 0, 0], **low)
    # accuracy 1/4 < 0.75 - 0.1: the switch is off in both, and the best stays 0.75
    assert a.rewards.tolist() == b.rewards.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert clone.state_dict() == shaper.state_dict() == {"running": {"best": 0.75}}


def test_pickled_numba_shaper_runs_in_another_process(tmp_path):
    shaper = shapec.compile_str(STATEFUL, backend="numba").running
    batch = dict(group_size=2, channels={"correct": [1, 1, 1, 0], "length": [10, 30, 20, 5]})
    expected = shaper([1, 1, 1, 0], **batch)
    shaper.load_state_dict({"running": {"best": 0.0}})
    (tmp_path / "shaper.pkl").write_bytes(pickle.dumps(shaper))
    out = run_python(f'''
        import pickle
        shaper = pickle.loads(open({str(tmp_path / "shaper.pkl")!r}, "rb").read())
        out = shaper([1, 1, 1, 0], group_size=2, channels={{"correct": [1, 1, 1, 0], "length": [10, 30, 20, 5]}})
        print(shaper.backend, out.rewards.tolist(), shaper.state_dict())
    ''', build.cache_dir())
    assert out == f"numba {expected.rewards.tolist()} {{'running': {{'best': 0.75}}}}\n"
    # group 0: shortest correct 10, so 30 tokens pay 0.001 * 20; group 1: the only correct one pays 0
    np.testing.assert_allclose(expected.rewards, [1.0, 1.0 - 0.001 * 20, 1.0, 0.0], rtol=0, atol=1e-15)


# ------------------------------------------------------------------ CLI
def test_cli_compile_prints_the_module(capsys):
    path = ROOT / "shapec" / "stdlib" / "dapo.shape"
    assert main(["compile", str(path), "--shaper", "overlong", "--emit", "python"]) == 0
    printed = capsys.readouterr().out
    ir = shapec.compile_file(path, backend="interpreter").ir("overlong")
    assert printed == lowering.emit_python(ir)


def test_cli_compile_unknown_shaper(capsys):
    path = ROOT / "shapec" / "stdlib" / "dapo.shape"
    assert main(["compile", str(path), "--shaper", "overlng"]) == 2
    assert "has no shaper or pipeline 'overlng'; did you mean 'overlong'?" in capsys.readouterr().err


def test_cli_check_does_not_import_numba():
    code = ("import sys; from shapec.cli import main; main(['check', '-q', 'examples']); "
            "print('numba' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_a_repeated_stage_builds_an_extension_with_a_valid_module_name(cache, monkeypatch):
    """A pipeline's second `a` is the stage `a#2`; its module's file name is also the extension's
    C module name, so it is written with `_` (a `#` there failed gcc and turned the extension
    build off for the rest of the process)."""
    monkeypatch.setattr(build, "_FELL_BACK", [])
    source = OVERLONG + "pipeline twice = overlong >> overlong\n"
    shaper = shapec.compile_str(source, backend="numba").twice
    out = shaper([1.0, 1.0], group_size=2, channels={"length": [5, 12]})
    assert out.rewards.tolist() == [1.0, -1.0]
    assert not build._FELL_BACK and build.aot_enabled()
    names = sorted(p.name for p in cache.glob("shapec_aot_*.so"))
    assert len(names) == 2 and all(n.split(".")[0].isidentifier() for n in names)
    assert any(n.startswith("shapec_aot_overlong_2_") for n in names)
