"""States kept per prompt (`state x: float per prompt = init update expr`): each group reads its
prompt's value as it entered the call, the update is kept after the body where the group was shaped
and the update is a finite number, `prompts=` names the groups' prompts, and checkpoints carry the
tables, on both backends."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import shapec
from shapec.runtime.batch import BatchError
from shapec.runtime.states import StateError

SPEC = """
shaper shortest(w: float = 1) requires binary produces real {
  input length: tokens
  gate right = reward > 0
  state best: float per prompt = 1000 update count(right) > 0 ? min(best, float(min(length where right))) : best
  state calls: int per prompt = 0 update calls + 1
  state ratio: float per prompt = 1 update float(max(length where right)) / total
  let total = float(sum(length where right))
  term gain = w * (1 - float(length) / best) on right
}
"""


@pytest.fixture(params=["interpreter", "numba"])
def shaper(request):
    return shapec.compile_str(SPEC, "shortest.shape", request.param).shortest


def call(shaper, rewards, lengths, prompts, **kwargs):
    return shaper(rewards, group_size=2, channels={"length": lengths}, prompts=prompts, **kwargs)


def test_each_group_reads_its_prompts_value_as_it_entered_the_call(shaper):
    first = call(shaper, [1, 1, 1, 0], [400, 500, 200, 100], ["a", "b"])
    assert first.rewards.tolist() == pytest.approx([1.6, 1.5, 1.8, 0.0])  # both enter at 1000
    assert shaper.state_dict()["shortest"]["best"] == {"a": 400.0, "b": 200.0}
    second = call(shaper, [1, 1, 1, 0], [100, 800, 200, 100], ["b", "c"])
    assert second.rewards.tolist() == pytest.approx([1.5, -2.0, 1.8, 0.0])  # b enters at 200, c at 1000
    assert shaper.state_dict()["shortest"] == {"best": {"a": 400.0, "b": 100.0, "c": 200.0},
                                               "calls": {"a": 1.0, "b": 2.0, "c": 1.0},
                                               "ratio": {"a": 5 / 9, "b": 8 / 9, "c": 1.0}}


def test_an_update_that_is_not_a_finite_number_keeps_the_value(shaper):
    call(shaper, [0, 0, 1, 1], [10, 20, 30, 60], ["none right", "both right"])
    ratio = shaper.state_dict()["shortest"]["ratio"]
    assert ratio == {"none right": 1.0, "both right": pytest.approx(60 / 90)}  # max / 0 is missing: kept


def test_a_skipped_group_and_a_call_not_in_training_leave_the_prompts_alone(shaper):
    call(shaper, [1, 1], [40, 50], ["a"])
    before = shaper.state_dict()
    skipped = call(shaper, [0.5, 1, 1, 1], [10, 20, 30, 60], ["a", "b"])  # a's rewards are graded: skipped
    assert skipped.stages[0].skip_reason(0) == "non_binary"
    assert shaper.state_dict()["shortest"]["best"] == {"a": 40.0, "b": 30.0}
    assert shaper.state_dict()["shortest"]["calls"]["a"] == before["shortest"]["calls"]["a"]
    call(shaper, [1, 1], [5, 5], ["a"], training=False)
    assert shaper.state_dict()["shortest"]["best"]["a"] == 40.0


@pytest.mark.parametrize("prompts", [["x", "y"], ("x", "y"), np.array(["x", "y"]), [3, 4], np.array([3, 4])])
def test_prompts_are_strings_or_integers_in_any_sequence(shaper, prompts):
    call(shaper, [1, 1, 1, 1], [10, 20, 30, 40], prompts)
    keys = list(shaper.state_dict()["shortest"]["best"])
    assert keys == [str(p) if isinstance(p, (str, np.str_)) else int(p) for p in list(prompts)]
    assert all(type(k) in (str, int) for k in keys)


@pytest.mark.parametrize("prompts,message", [
    (None, r"prompts: 'shortest' keeps shortest.best, shortest.calls, shortest.ratio per prompt; pass prompts="),
    (["a"], r"prompts: expected 2 keys \(one per group\), got 1"),
    (["a", "a"], r"prompts: 'a' names groups 0 and 1; a prompt's rollouts must be one group of the call"),
    (["a", 1.5], r"prompts\[1\]: expected a prompt's key \(a string or an integer\), got 1.5"),
    (["a", True], r"prompts\[1\]: expected a prompt's key"),
    ("ab", r"prompts: expected one key per group \(2\), got str"),
])
def test_bad_prompts_are_refused_and_nothing_changes(shaper, prompts, message):
    call(shaper, [1, 1, 1, 1], [10, 20, 30, 40], ["a", "b"])
    before = shaper.state_dict()
    with pytest.raises(BatchError, match=message):
        call(shaper, [1, 1, 1, 1], [1, 1, 1, 1], prompts)
    assert shaper.state_dict() == before


def test_a_checkpoint_taken_mid_run_resumes_with_the_same_rewards(shaper):
    rng = np.random.default_rng(0)
    steps = [(rng.integers(0, 2, 8).astype(float), rng.integers(1, 500, 8).astype(float),
              [f"p{k}" for k in rng.choice(6, 4, replace=False)]) for _ in range(6)]
    whole = [shaper(r, group_size=2, channels={"length": x}, prompts=p).rewards for r, x, p in steps]
    resumed = shapec.compile_str(SPEC, "shortest.shape", shaper.backend).shortest
    for r, x, p in steps[:3]:
        resumed(r, group_size=2, channels={"length": x}, prompts=p)
    saved = pickle.loads(pickle.dumps(resumed.state_dict()))
    again = shapec.compile_str(SPEC, "shortest.shape", shaper.backend).shortest
    again.load_state_dict(saved)
    later = pickle.loads(pickle.dumps(again))  # a pickled shaper carries its tables
    for k, (r, x, p) in enumerate(steps[3:], start=3):
        assert later(r, group_size=2, channels={"length": x}, prompts=p).rewards.tolist() == whole[k].tolist()


@pytest.mark.parametrize("state,message", [
    ({"shortest": {"best": 3.0, "calls": {}, "ratio": {}}},
     r"state shortest.best: kept per prompt, so expected a mapping of prompt -> value, got float"),
    ({"shortest": {"best": {"a": float("nan")}, "calls": {}, "ratio": {}}},
     r"state shortest.best\['a'\]: expected a finite number, got nan"),
    ({"shortest": {"best": {2.5: 1.0}, "calls": {}, "ratio": {}}},
     r"state shortest.best: expected a prompt's key \(a string or an integer\), got 2.5"),
    ({"shortest": {"best": {}, "calls": {}}}, r"state shortest.ratio: missing"),
])
def test_a_checkpoint_that_does_not_fit_is_refused_whole(shaper, state, message):
    call(shaper, [1, 1], [10, 20], ["a"])
    before = shaper.state_dict()
    with pytest.raises(StateError, match=message):
        shaper.load_state_dict(state)
    assert shaper.state_dict() == before


def test_prepare_and_pipelines_keep_a_table_per_stage(shaper):
    counted = "shaper counted() produces real {\n  state seen: float per prompt = 0 update seen + 1\n  term t = seen\n}\n"
    pipe = shapec.compile_str(SPEC + counted + "pipeline both = shortest >> counted\n", "shortest.shape",
                              shaper.backend).both
    bound = pipe.prepare({"shortest": {"w": 0.5}})
    for _ in range(2):
        out = bound([1, 1], group_size=2, channels={"length": [10, 20]}, prompts=["a"])
    assert out.rewards.tolist() == pytest.approx([2.0, 1.5])  # 1 + 0.5 * (1 - length / 10), then + a's seen, 1
    assert pipe.state_dict() == {"shortest": {"best": {"a": 10.0}, "calls": {"a": 2.0}, "ratio": {"a": 2 / 3}},
                                 "counted": {"seen": {"a": 2.0}}}


def test_a_shaper_without_one_checks_prompts_and_ignores_them():
    plain = shapec.compile_str("shaper plain() {\n  term t = 0.5 when reward > 0\n}\n", "plain.shape",
                               "interpreter").plain
    assert plain([1, 0], group_size=1, prompts=["a", "b"]).rewards.tolist() == [1.5, 0.0]
    with pytest.raises(BatchError, match="prompts: expected 2 keys"):
        plain([1, 0], group_size=1, prompts=["a"])
    assert plain.state_dict() == {}
