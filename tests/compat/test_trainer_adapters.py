"""The trainer adapters' shared mechanism, without any trainer: grouping, input filling, imports."""

import subprocess
import sys

import numpy as np
import pytest

import shapec
from shapec.compat._groups import group_order, require, resolve_shaper, shape_by_group
from shapec.compat.openrlhf import ray_setup_hook

KIMI = shapec.load("kimi", backend="interpreter").kimi_length


def test_importing_shapec_imports_no_trainer():
    code = ("import sys, shapec, shapec.compat, shapec.compat._groups, shapec.compat.trl, shapec.compat.verl, "
            "shapec.compat.openrlhf, shapec.compat.miles, shapec.compat.skyrl; "
            "print(sorted(m for m in ('trl', 'verl', 'openrlhf', 'skyrl_train', 'torch', 'ray', 'accelerate', "
            "'transformers') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_trainer_names_the_extra():
    with pytest.raises(ImportError, match=r"needs 'no_such_trainer_mod'.*pip install 'shapec\[verl\]'"):
        require("no_such_trainer_mod", "verl")


def test_group_order_is_stable_by_first_appearance():
    order, offsets = group_order(["b", "a", "b", "c", "a"])
    assert order.tolist() == [0, 2, 1, 4, 3]
    assert offsets.tolist() == [0, 2, 4, 5]


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_interleaved_groups_shaped_whole_and_written_back_in_place(backend):
    shaper = shapec.load("kimi", backend=backend).kimi_length
    keys = ["x", "y", "x", "y", "x", "y"]
    rewards = [1, 0, 1, 1, 0, 1]
    lengths = [10, 4, 30, 8, 20, 12]
    out = shape_by_group(shaper, rewards, keys, lengths=lengths)
    x = shaper([1, 1, 0], group_size=3, channels={"length": [10, 30, 20]}).rewards
    y = shaper([0, 1, 1], group_size=3, channels={"length": [4, 8, 12]}).rewards
    assert out.rewards.tolist() == [x[0], y[0], x[1], y[1], x[2], y[2]]
    assert out.offsets.tolist() == [0, 3, 6]


def test_columns_fill_inputs_and_metadata_by_name():
    l1 = shapec.load("l1", backend="interpreter").l1_exact
    out = shape_by_group(l1, [1, 1, 1, 1], [0, 0, 1, 1], lengths=[100, 200, 300, 50],
                         columns={"target": [100, 100, 60, 60], "other": ["a", "b", "c", "d"]})
    direct = l1([1, 1, 1, 1], group_size=2, channels={"length": [100, 200, 300, 50]},
                metadata={"target": [100, 60]})
    assert out.rewards.tolist() == direct.rewards.tolist()


def test_correct_bool_input_from_the_base_reward():
    short = shapec.load("short_rl", backend="interpreter").short_rl
    out = shape_by_group(short, [1, 0, 1, 1], [0, 0, 1, 1], lengths=[300, 100, 500, 200])
    direct = shapec.load("short_rl", backend="interpreter").short_rl(
        [1, 0, 1, 1], group_size=2, channels={"correct": [1, 0, 1, 1], "length": [300, 100, 500, 200]})
    assert out.rewards.tolist() == direct.rewards.tolist()


def test_input_without_source_names_it_and_the_columns():
    nemo = shapec.load("time_efficiency", backend="interpreter").time_efficiency
    with pytest.raises(ValueError, match=r"trainer X: the spec's input 'run_time' \(seconds\) has no source: give a "
                                         r"column named 'run_time' \(did you mean 'run_times'\?\); columns: run_times"):
        shape_by_group(nemo, [1, 1], [0, 0], lengths=[1, 2], columns={"run_times": [1, 2]}, where="trainer X")


def test_several_length_inputs_need_columns():
    prime = shapec.load("prime_rl", backend="interpreter").linear_length
    with pytest.raises(ValueError, match=r"several length inputs without a column \(output_tokens, input_tokens\)"):
        shape_by_group(prime, [1, 1], [0, 0], lengths=[1, 2], columns={"turns": [1, 1]})


def test_resolve_shaper_forms(tmp_path):
    assert resolve_shaper(KIMI) is KIMI
    assert resolve_shaper("kimi", backend="interpreter").name == "kimi_length"
    path = tmp_path / "k.shape"
    path.write_text((shapec.api.STDLIB / "kimi.shape").read_text())
    assert resolve_shaper(str(path), backend="interpreter").name == "kimi_length"
    with pytest.raises(ValueError, match=r"miles.shape defines length_penalty, grpo_advantage, grpo: pass shaper="):
        resolve_shaper("miles", backend="interpreter")
    with pytest.raises(ValueError, match=r"shaper='other' given with the compiled shaper 'kimi_length'"):
        resolve_shaper(KIMI, "other")
    with pytest.raises(TypeError, match=r"spec: expected a \.shape path, .* got int"):
        resolve_shaper(3)


def test_openrlhf_setup_hook_refuses_a_bad_spec_in_the_driver():
    with pytest.raises(ValueError, match=r"miles.shape defines length_penalty, grpo_advantage, grpo: pass shaper="):
        ray_setup_hook("miles", backend="interpreter")  # not in each Ray worker, where it would start


def test_lengths_and_keys_must_match_rewards():
    with pytest.raises(ValueError, match=r"shapec: 2 group keys, 3 lengths for 3 rewards"):
        shape_by_group(KIMI, [1, 1, 1], [0, 0], lengths=[1, 2, 3])
    with pytest.raises(ValueError, match=r"column 'length' has 1 values for 2 rollouts"):
        shape_by_group(KIMI, [1, 1], [0, 0], lengths=[1, 2], columns={"length": [1]})
    assert np.isfinite(shape_by_group(KIMI, [1, 1], [0, 0], lengths=[1, 2]).rewards).all()


def test_ray_engine_without_ray_names_the_extra(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text('{"prompt_id": "a", "reward": 1, "length": 10}\n')
    code = ("import sys; sys.modules['ray'] = None; from shapec import cli; "
            f"sys.exit(cli.main(['run', 'kimi', '--data', {str(data)!r}, '--out', {str(tmp_path / 'o.jsonl')!r}, "
            "'--engine', 'ray', '--backend', 'interpreter', '--no-progress']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr == "shapec: error: --engine ray needs Ray: pip install 'shapec[ray]'\n"
    assert not (tmp_path / "o.jsonl").exists()
