"""Issue #14, compile latency: the kernel cache key is the spec's content (never the path it was
loaded from), shapec's, numba's and Python's versions and the CPU; a compile that takes over a
second says so on stderr in one line; explain and plot run the interpreter unless asked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import shapec
from shapec.compiler import build, cache
from shapec.compiler.lowering import emit_python

ROOT = Path(__file__).resolve().parents[1]
SPEC = "shaper halve() {\n  term t = -0.5 when reward > 0\n}\n"
NOTICE = "compiling {where}:halve (first use; cached in {folder})\n"


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEC_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(build, "_MODULES", {})
    monkeypatch.setattr(cache, "_PRIVATE", [])
    return tmp_path / "kernels"


def _spec_in(folder: Path) -> Path:
    (folder / "sub").mkdir(parents=True)
    path = folder / "sub" / "mine.shape"
    path.write_text(SPEC)
    return path


def test_the_same_spec_by_relative_path_absolute_path_and_string_shares_one_cache_entry(tmp_path, monkeypatch):
    path = _spec_in(tmp_path)
    monkeypatch.chdir(tmp_path / "sub")
    irs = [shapec.compile_file("mine.shape", backend="interpreter").ir("halve"),
           shapec.compile_file(path.resolve(), backend="interpreter").ir("halve"),
           shapec.compile_file(Path("..") / "sub" / "mine.shape", backend="interpreter").ir("halve"),
           shapec.compile_str(SPEC, filename="elsewhere/other.shape", backend="interpreter").ir("halve")]
    assert len({ir.filename for ir in irs}) == 4
    sources = {emit_python(ir) for ir in irs}
    assert len(sources) == 1
    assert len({build.module_path(ir, emit_python(ir)) for ir in irs}) == 1


def test_the_key_changes_with_the_cpu_the_versions_and_the_content(monkeypatch):
    source = emit_python(shapec.compile_str(SPEC, backend="interpreter").ir("halve"))
    key = build.cache_key(source)
    assert build.cache_key(source) == key
    assert build.cache_key(source + "\n") != key
    monkeypatch.setattr(build, "host_fingerprint", lambda: "another-cpu")
    assert build.cache_key(source) != key
    monkeypatch.undo()
    monkeypatch.setattr(build, "numba_version", lambda: "0.0.0")
    assert build.cache_key(source) != key
    monkeypatch.undo()
    monkeypatch.setattr(shapec, "__version__", "0.0.0")
    assert build.cache_key(source) != key


def test_a_second_load_by_another_path_builds_nothing_and_prints_nothing(kernels, tmp_path, monkeypatch, capfd):
    path = _spec_in(tmp_path)
    monkeypatch.chdir(tmp_path / "sub")
    monkeypatch.setattr(build, "NOTICE_AFTER", 0.0)  # this tiny kernel may build in under a second
    first = shapec.compile_file("mine.shape", backend="numba").halve
    assert first([1.0, 0.0], group_size=2).rewards.tolist() == [0.5, 0.0]
    assert capfd.readouterr().err == NOTICE.format(where="mine.shape", folder=kernels)
    written, built = build.STATS["written"], build.STATS["built"]
    monkeypatch.setattr(build, "NOTICE_AFTER", 1.0)
    again = shapec.compile_file(path.resolve(), backend="numba").halve
    assert again([1.0, 0.0], group_size=2).rewards.tolist() == [0.5, 0.0]
    assert (build.STATS["written"], build.STATS["built"]) == (written, built)
    assert capfd.readouterr().err == ""
    assert sorted(p.name for p in kernels.glob("halve_*.py")) == [build.module_path(again.ir, emit_python(again.ir)).name]


def test_a_warm_load_in_a_new_process_from_another_path_prints_no_notice(kernels, tmp_path):
    path = _spec_in(tmp_path)
    probe = textwrap.dedent("""
        import sys, shapec
        s = shapec.compile_file(sys.argv[1], backend="numba").halve
        print(s([1.0, 0.0], group_size=2).rewards.tolist())
    """)
    env = {**os.environ, "SHAPEC_CACHE_DIR": str(kernels)}
    run = lambda cwd, arg: subprocess.run([sys.executable, "-c", probe, arg], cwd=cwd, capture_output=True,
                                          text=True, env=env, timeout=600)
    cold = run(tmp_path / "sub", "mine.shape")
    assert cold.stdout == "[0.5, 0.0]\n", cold.stderr
    warm = run(tmp_path, str(path.resolve()))
    assert warm.stdout == "[0.5, 0.0]\n" and warm.stderr == ""
    assert len(list(kernels.glob("halve_*.py"))) == 1


@pytest.mark.parametrize("command", ["explain", "plot"])
def test_explain_and_plot_run_the_interpreter_unless_numba_is_asked_for(command, tmp_path):
    data = ROOT / "examples" / "data" / "rollouts.jsonl"
    extra = ["--out", str(tmp_path / "p.png")] if command == "plot" else ["--limit", "1"]
    probe = textwrap.dedent("""
        import sys
        from shapec import cli
        from shapec.tools import spec
        seen = []
        load = spec.load_module
        spec.load_module = lambda s, backend=None, parallel=None: seen.append(backend) or load(s, backend, parallel)
        try:
            cli.main(sys.argv[1:])
        except SystemExit:
            pass
        print("BACKEND", seen, "numba" in sys.modules, file=sys.stderr)
    """)
    env = {k: v for k, v in os.environ.items() if k != "SHAPEC_BACKEND"}
    env["SHAPEC_CACHE_DIR"] = str(tmp_path / "kernels")
    proc = subprocess.run([sys.executable, "-c", probe, command, "nemo_rl", "--data", str(data), *extra],
                          capture_output=True, text=True, env={**env, "SHAPEC_BACKEND": "numba"}, timeout=600)
    assert "BACKEND ['interpreter'] False" in proc.stderr, proc.stderr


def test_a_one_stage_pipeline_shares_its_shapers_kernel_module(kernels):
    module = shapec.compile_str(SPEC + "pipeline only = halve\n", backend="numba")
    assert emit_python(module.ir("only")) == emit_python(module.ir("halve"))
    one = module["halve"]([1.0, 0.0], group_size=2)
    two = module["only"]([1.0, 0.0], group_size=2)
    assert one.rewards.tolist() == two.rewards.tolist() == [0.5, 0.0]
    assert [p.name for p in kernels.glob("*.py")] == [build.module_path(module.ir("halve"), emit_python(module.ir("halve"))).name]
    assert len(list(kernels.glob("shapec_aot_*.so"))) == 1  # compiled once
