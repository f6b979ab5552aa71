"""Lowering to numba: results of the generated kernels, the generated module, pickling, the CLI.
The store that keeps the kernels is tests/compiler/test_kernel_store.py's."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import shapec
from shapec import files
from shapec.cli import main
from shapec.compiler.lowering.groups import PARALLEL_MIN_ROLLOUTS
from shapec.compiler.lowering.module import emit_python
from shapec.runtime.shaper import default_backend

ROOT = Path(__file__).resolve().parents[2]

OVERLONG = textwrap.dedent('''
    shaper overlong(limit: tokens > 0 = 10, cache: tokens > 0 = 4) produces real {
      input length: tokens
      let start = limit - cache
      term penalty = length <= start ? 0 : length <= limit ? (start - length) / cache : -1
    }
''')


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
    n = 4 * PARALLEL_MIN_ROLLOUTS
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
    assert "prange(nchunks)" in emit_python(shaper.ir, parallel=True)
    assert "prange" not in emit_python(shaper.ir)
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
    source = emit_python(ir)
    compile(source, "generated.py", "exec")
    assert "def kernel_s0_overlong(" in source  # a mangled name: kind, index, sanitised suffix
    assert "# term 0" in source  # comments carry kinds and indices, never spec text
    assert 'cache=True, error_model="numpy"' in source
    assert "fastmath" not in source
    assert source.startswith("'Generated by shapec. Do not edit.'\n")
    assert "overlong.shape" not in source


def test_a_pipeline_module_has_a_kernel_per_stage():
    mod = shapec.compile_file(ROOT / "shapec" / "stdlib" / "grpo_lead.shape", backend="interpreter")
    source = emit_python(mod.ir("grpo_lead"))  # what `shapec compile` prints: every stage
    assert "def kernel_s0_lead_reward(" in source and "def kernel_s1_lead_advantage(" in source


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
    ''', files.cache_root())
    assert out == f"numba {expected.rewards.tolist()} {{'running': {{'best': 0.75}}}}\n"
    # group 0: shortest correct 10, so 30 tokens pay 0.001 * 20; group 1: the only correct one pays 0
    np.testing.assert_allclose(expected.rewards, [1.0, 1.0 - 0.001 * 20, 1.0, 0.0], rtol=0, atol=1e-15)


# ------------------------------------------------------------------ CLI
def test_cli_compile_prints_the_module(capsys):
    path = ROOT / "shapec" / "stdlib" / "dapo.shape"
    assert main(["compile", str(path), "--shaper", "overlong", "--emit", "python"]) == 0
    printed = capsys.readouterr().out
    ir = shapec.compile_file(path, backend="interpreter").ir("overlong")
    assert printed == emit_python(ir)


def test_cli_compile_unknown_shaper(capsys):
    path = ROOT / "shapec" / "stdlib" / "dapo.shape"
    assert main(["compile", str(path), "--shaper", "overlng"]) == 2
    assert "has no shaper or pipeline 'overlng'; did you mean 'overlong'?" in capsys.readouterr().err


def test_cli_check_does_not_import_numba():
    code = ("import sys; from shapec.cli import main; main(['check', '-q', 'examples']); "
            "print('numba' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_fork_after_a_parallel_kernel_works():
    code = """
        import multiprocessing as mp
        import numpy as np
        import shapec
        spec = "shaper half() {\\n  term t = -0.5 when reward > 0\\n}\\n"
        n = 8192  # past PARALLEL_MIN_ROLLOUTS: the threads do run
        r = np.tile([1.0, 0.0], n // 2)
        par = shapec.compile_str(spec, backend="numba", parallel=True).half
        assert par(r, group_size=2).rewards[:2].tolist() == [0.5, 0.0]
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
    """
    layer, result = run_python(code, files.cache_root()).splitlines()
    assert layer in ("workqueue", "tbb")
    assert result == f"0 {[[0.5, 0.0]] * 3}"
