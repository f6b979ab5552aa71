"""What a pickled shaper carries, and the kernel call path."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from shapec import compile_file, compile_str

from ..helpers import src

TOP = src("""
    import "lib/mid.shape"
    shaper top(k: float = 1) produces real {
      term bonus = k * scale()
      result = reward + bonus
    }
""")
MID = src("""
    import "leaf.shape"
    fn scale() = 2 * base()
""")
LEAF = "fn base() = 1.5\n"


def _tree(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "top.shape").write_text(TOP)
    (tmp_path / "lib" / "mid.shape").write_text(MID)
    (tmp_path / "lib" / "leaf.shape").write_text(LEAF)
    return tmp_path / "top.shape"


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
@pytest.mark.parametrize("change", ["edit", "delete"])
def test_a_pickled_shaper_carries_every_imported_spec(tmp_path, backend, change):
    shaper = compile_file(_tree(tmp_path), backend=backend).top
    data = pickle.dumps(shaper)
    leaf = tmp_path / "lib" / "leaf.shape"
    if change == "edit":  # a helper edited after the pickle was made (a Ray worker unpickles later)
        leaf.write_text("fn base() = 100\n")
    else:
        leaf.unlink()
        (tmp_path / "lib" / "mid.shape").unlink()
    clone = pickle.loads(data)
    assert clone([0.0, 1.0], group_size=2).rewards.tolist() == [3.0, 4.0]


def test_a_pickled_shaper_of_a_string_spec_keeps_its_imports_whatever_the_working_folder(tmp_path, monkeypatch):
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    shaper = compile_str(TOP, backend="interpreter").top
    data = pickle.dumps(shaper)
    monkeypatch.chdir(tmp_path / "lib")  # "lib/mid.shape" does not exist from here
    assert pickle.loads(data)([0.0], group_size=1).rewards.tolist() == [3.0]


def test_a_pickled_shaper_unpickles_in_a_process_that_cannot_see_its_imports(tmp_path):
    shaper = compile_file(_tree(tmp_path), backend="interpreter").top
    pkl = tmp_path / "shaper.pkl"
    pkl.write_bytes(pickle.dumps(shaper))
    for f in ("top.shape", "lib/mid.shape", "lib/leaf.shape"):
        (tmp_path / f).unlink()
    code = f"import pickle; s = pickle.loads(open({str(pkl)!r}, 'rb').read()); print(s([1.0], group_size=1).rewards[0])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4.0"


def test_a_pickle_without_imports_still_reads_them_from_disk(tmp_path):
    """A pickle made before imports travelled with it (six arguments) unpickles as it did."""
    from shapec.runtime.shaper import _rebuilt

    path = _tree(tmp_path)
    shaper = _rebuilt(path.read_text(), str(path), "top", "interpreter", {}, False)
    assert shaper([0.0], group_size=1).rewards.tolist() == [3.0]


# ------------------------------------------------------------------ the kernel call path
LANE_SPEC = src("""
    shaper t(k: float = 1) requires nonneg produces nonneg {
      input x: tokens
      meta m: float
      meta rec: {w: float, pb: band}
      meta h: list(reward: float, length: tokens)
      term bonus = k * (m ?? 0) + (rec.w ?? 0) + float(mean(h.length where h.reward > 0) ?? 0)
      clamp >= 0
      factor fit = band(x, rec.pb) on reward > 0
    }
""")


CRASH = """
import dataclasses, sys
import numpy as np
from shapec import compile_str
from shapec.runtime import kernel as kernel_module

real = kernel_module.plan_arguments
def renamed(ir, namer, parallel):  # a kernel out of step with its IR: it reads a column the IR does not declare
    plan = real(ir, namer, parallel)
    plan.args[:] = [dataclasses.replace(a, key="ghost") if a.source == "meta" else a for a in plan.args]
    return plan
kernel_module.plan_arguments = renamed
shaper = compile_str(sys.argv[1], backend="numba").t
try:
    shaper(np.array([1.0, 0.0]), group_size=2, channels={"x": np.array([1.0, 2.0])}, metadata={"m": np.array([0.5]), "rec": None})
except KeyError as err:
    print("KeyError", err)
"""


def test_a_kernel_out_of_step_with_its_ir_is_never_handed_a_missing_argument(tmp_path):
    """Handed a None, a compiled kernel may read it as an array and the process die: a kernel whose
    arguments name a column the batch does not hold gets an error naming it, before it runs."""
    out = subprocess.run([sys.executable, "-c", CRASH, LANE_SPEC], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.split("\n")[:1] == ["KeyError 'ghost'"]


# ------------------------------------------------------------------ state checkpoints
STATEFUL = src("""
    shaper t() produces real {
      state best: float = 0 update max(best, batch.mean(reward))
      term bonus = best
    }
""")


