"""Arrays as trainers hand them over (torch tensors that require grad, of any dtype, as offsets,
flags, state and group keys; numpy flags, masked arrays) read as their values, and drop-in
arguments that are not what they must be are named."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from shapec import compile_str
from shapec.compat.miles import group_advantages, keep_groups, loss_tokens, shape_rewards
from shapec.compat.nemo_rl import apply_group_length_penalties, apply_time_efficiency_reward
from shapec.runtime.batch import BatchError
from shapec.compat._groups import group_order
from shapec.compat.short_rl import ShortRL
from shapec.runtime.params import ParamError
from shapec.runtime.states import StateError

from ..helpers import src
from .require import need

torch = need("torch", "trl")

SPEC = src("""
    shaper s(n: int = 2) requires nonneg produces nonneg {
      input x: tokens
      meta m: float
      meta pb: {total: band}
      term t = float(n) + (m ?? 0)
      clamp >= 0
      factor fit = band(x, pb.total) on reward > 0
    }
""")


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def s(request):
    return compile_str(SPEC, backend=request.param).s


def grad(values, dtype=torch.float64):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True).to(dtype)


def test_torch_tensors_that_require_grad_are_read_as_their_values(s):
    expected = s([1.0, 0.0], group_size=2, channels={"x": [1.0, 3.0]}, metadata={"m": [0.5],
                 "pb": {"total": np.array([[0.0, 4.0, 0.5]])}})
    out = s(grad([1.0, 0.0]), group_size=2, channels={"x": grad([1.0, 3.0], torch.bfloat16)},
            metadata={"m": grad([0.5]), "pb": {"total": grad([[0.0, 4.0, 0.5]])}}, offsets=None)
    assert out.rewards.tolist() == expected.rewards.tolist() == [3.0625, 2.5]


def test_torch_offsets_and_a_list_of_tensors(s):
    out = s([1.0, 0.0], offsets=torch.tensor([0, 1, 2]), channels={"x": [torch.tensor(1.0), torch.tensor(3.0)]},
            metadata={"pb": None})
    assert out.offsets.tolist() == [0, 1, 2] and out.rewards.tolist() == [3.0, 2.0]


@pytest.mark.parametrize("kw, message", [
    ({"rewards": np.ma.array([1.0, 0.0], mask=[0, 1])}, r"^rewards: masked entry at index 1; expected a value"),
    ({"channels": {"x": [1.0, [2.0, 3.0]]}}, r"^channels\['x'\]: index 1: expected a number, got \[2\.0, 3\.0\]"),
    ({"channels": {"x": [1.0, grad([2.0])[0]]}}, r"^channels\['x'\]: index 1: expected a number, got tensor"),
    ({"rewards": torch.tensor([1.0, 0.0], dtype=torch.complex32)}, r"^rewards: expected numbers, got dtype torch\.complex32"),
])
def test_arrays_that_are_not_plain_numbers_are_named(s, kw, message):
    args = {"rewards": [1.0, 0.0], "group_size": 2, "channels": {"x": [1.0, 2.0]}, **kw}
    with pytest.raises(BatchError, match=message):
        s(args.pop("rewards"), **args)


def test_an_int_param_past_the_float_range_is_a_param_error(s):
    with pytest.raises(ParamError, match=r"^param 'n' of shaper 's': expected an integer within the float range, "
                                         r"got 1000.*\(401 chars\)$"):
        s([1.0], group_size=1, channels={"x": [1.0]}, params={"n": 10**400})


# ------------------------------------------------------------------ NeMo-RL drop-ins
def row(reward, text="a", top=None, **full):
    out = {"full_result": {"reward": reward, "response": {"output": [{"type": "message", "content": [{"text": text}]}]},
                           **full}, "agent_ref": {"name": "a"}}
    out.update(top or {})
    return out


CFG = {"default": {"longest_total_penalty": 0.25, "length_type": "chars"}}


@pytest.mark.parametrize("components, skipped", [
    (np.array([0.5, 0.5]), True), (torch.tensor([0.0]), True), (np.array([]), False), ([0.5], True), ({}, False),
])
def test_reward_components_of_any_array_type_skip_the_group_as_a_list_does(components, skipped):
    results = [row(1, "a", reward_components=components), row(1, "abcd")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metrics = apply_group_length_penalties(results, CFG, 2)
    assert metrics["length_penalty/skipped_non_binary_frac"] == (1.0 if skipped else 0.0)
    assert [r["full_result"]["reward"] for r in results] == ([1, 1] if skipped else [1.0, 0.75])


def test_a_flag_given_as_an_array_of_several_values_is_a_batch_error():
    results = [row(1, "a"), row(1, "abcd", top={"low_effort_applied": np.array([True, False])})]
    with pytest.raises(BatchError, match=r"^results\[1\]\.low_effort_applied: expected a flag \(true or false\), "
                                         r"got an array of shape \(2,\)$"):
        apply_group_length_penalties(results, CFG, 2)
    assert results[1]["full_result"]["reward"] == 1


@pytest.mark.parametrize("full, mask, message", [
    ({"resolved": np.array([True, False])}, None, r"^results\[0\]\.full_result\.resolved: expected a flag"),
    ({"reward": "x"}, None, r"^results\[0\]\.full_result\.reward: expected a finite number, got 'x'$"),
    ({"reward": np.array([1.0, 2.0])}, None, r"^results\[0\]\.full_result\.reward: expected a finite number"),
    ({"reward": math.nan}, None, r"^results\[0\]\.full_result\.reward: expected a finite number, got nan$"),
    ({}, [np.array([True, False])], r"^mask_sample\[0\]: expected a flag \(true or false\), got an array"),
])
def test_time_efficiency_names_the_row_and_field(full, mask, message):
    results = [{"full_result": {"reward": 1.0, "openhands_run_time": 60, **full}}]
    with pytest.raises(BatchError, match=message):
        apply_time_efficiency_reward(results, {"enabled": True}, mask_sample=mask)


def test_time_efficiency_reads_numpy_and_torch_scalars():
    results = [{"full_result": {"reward": np.array(1.0), "resolved": np.bool_(True), "openhands_run_time": 60}}]
    apply_time_efficiency_reward(results, {"enabled": True, "apply_to": "correct"}, mask_sample=torch.tensor([False]))
    assert results[0]["full_result"]["reward"] == pytest.approx(1 - 1 / 60)  # charged one minute


def test_a_run_time_past_the_float_range_is_named():
    results = [{"full_result": {"reward": 1.0, "openhands_run_time": 10**400}}]
    with pytest.raises(ValueError, match=r"^results\[0\]\.full_result\.openhands_run_time is 1000.*\(401 chars\); "
                                         r"expected a finite number$"):
        apply_time_efficiency_reward(results, {"enabled": True})


# ------------------------------------------------------------------ miles drop-in
def test_loss_masks_as_torch_tensors_of_any_kind():
    masks = [torch.tensor([1.0, 0.0, 1.0], requires_grad=True), torch.tensor([1, 1], dtype=torch.bfloat16),
             [torch.tensor([True, False]), torch.tensor([True, True])],  # sibling samples
             [torch.tensor(1), torch.tensor(0)]]  # one mask as a list of 0-d tensors
    removed = [False, torch.tensor(False), torch.tensor([False, True]), np.bool_(False)]
    assert loss_tokens(masks, removed=removed).tolist() == [2.0, 2.0, 1.0, 1.0]


def test_removed_flags_that_are_not_flags_are_named():
    with pytest.raises(BatchError, match=r"^removed\[0\]\[1\]: expected a flag \(true or false\), got an array"):
        loss_tokens([[[1, 0], [1, 1]]], removed=[[False, np.array([True, False])]])


@pytest.mark.parametrize("rewards, kw, message", [
    ([1.0, math.nan], {}, r"^rewards: NaN at index 1; expected a number$"),
    (["1", "0"], {}, r"^rewards: index 0: expected a number, got '1'$"),
    ([1.0, 1.0, 1.0], {}, r"^group_size: 3 rewards do not split into groups of 2"),
    ([[1.0], [1.0]], {}, r"^rewards: expected a 1-d array, got shape \(2, 1\)$"),
])
def test_disabled_length_shaping_still_checks_the_rewards_and_groups(rewards, kw, message):
    with pytest.raises(BatchError, match=message):
        shape_rewards(rewards, None, group_size=2, coeff=0, **kw)


def test_disabled_length_shaping_returns_the_rewards_unchanged():
    assert shape_rewards(np.array([1.0, 0.5]), None, group_size=2, coeff=0.0).tolist() == [1.0, 0.5]


@pytest.mark.parametrize("kw, error, message", [
    ({"coeff": 10**400}, ValueError, r"^coeff must be a finite number >= 0, got 1000.*\(401 chars\)$"),
    ({"coeff": 1.0, "min_tokens": 10**400}, ParamError, r"^param 'min_tokens' of shaper 'length_penalty': expected "
                                                        r"an integer within the float range"),
])
def test_miles_params_past_the_float_range_are_refused(kw, error, message):
    with pytest.raises(error, match=message):
        shape_rewards([1.0, 1.0], [1, 2], group_size=2, **kw)


def test_normalize_std_must_be_a_bool_not_a_truthy_string():
    with pytest.raises(ParamError, match=r"^param 'normalize_std' of shaper 'grpo_advantage': expected a bool"):
        group_advantages([1.0, 0.0], group_size=2, normalize_std="false")


@pytest.mark.parametrize("function", [group_advantages, keep_groups])
def test_raw_rewards_are_named_as_passed(function):
    with pytest.raises(BatchError, match=r"^raw_rewards: NaN at index 1; expected a number$"):
        function([1.0, 0.0], [1.0, math.nan], group_size=2)


BOOLS = src("""
    shaper s() produces real {
      input flag: bool
      meta m: bool
      meta h: list(ok: bool, x: float)
      term a = 1 when flag
      term b = 10 when m
      term c = 100 * count(h.ok)
    }
""")


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
@pytest.mark.parametrize("value", [0.5, -1.0, 2.0, 1.0])
def test_a_bool_is_any_non_zero_number_in_inputs_metadata_and_list_items(backend, value):
    """One rule wherever a bool is read: an input of 0.5 was true while metadata or a list item of 0.5
    was neither true nor false (the term was dropped, the item not counted), on both paths."""
    shaper = compile_str(BOOLS, backend=backend).s
    general = shaper([0.0, 0.0], group_size=2, channels={"flag": [value, 0]},
                     metadata={"m": [value], "h": [{"ok": [value, 1], "x": [1.0, 2.0]}]})
    lane = shaper(np.zeros(2), group_size=2, channels={"flag": np.array([value, 0.0])},
                  metadata={"m": np.array([value]),
                            "h": {"offsets": np.array([0, 2]), "ok": np.array([value, 1.0]), "x": np.array([1.0, 2.0])}})
    assert general.rewards.tolist() == lane.rewards.tolist() == [211.0, 210.0]
    missing = shaper([0.0, 0.0], group_size=2, channels={"flag": [0, 0]}, metadata={"m": [None], "h": [None]})
    assert missing.rewards.tolist() == [0.0, 0.0]  # an absent bool stays missing: the term is not applied


# ------------------------------------------------------------------ checkpoints and group keys

STATEFUL = src("""
    shaper t() produces real {
      state best: float = 0 update max(best, batch.mean(reward))
      term bonus = best
    }
""")


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_state_numbers_saved_as_0d_arrays_or_tensors_load_as_numbers(backend):
    shaper = compile_str(STATEFUL, backend=backend).t
    for value in (torch.tensor(0.5, requires_grad=True), np.array(0.5), torch.tensor(0.5, dtype=torch.bfloat16)):
        shaper.load_state_dict({"t": {"best": value}})
        assert shaper.state_dict() == {"t": {"best": 0.5}}
        assert type(shaper.state_dict()["t"]["best"]) is float
    for bad, shown in [(torch.tensor(True), "True"), (np.array([0.5]), r"array\(\[0\.5\]\)"),
                       (torch.tensor(math.nan), "nan")]:
        with pytest.raises(StateError, match=rf"^state t\.best: expected a finite number, got {shown}$"):
            shaper.load_state_dict({"t": {"best": bad}})
    assert shaper.state_dict() == {"t": {"best": 0.5}}


def test_short_rl_loads_a_tensor_checkpoint():
    shaper = ShortRL()
    shaper.load_state_dict({"acc_max": torch.tensor(0.25)})
    assert shaper.acc_max == 0.25


def test_group_keys_are_groups_by_value_and_kind():
    """A bool is not the prompt 1 (True == 1 in Python), numpy and torch scalars are their values (a
    0-d array or tensor hashes by identity), and a NaN key, equal to nothing, is refused."""
    order, offsets = group_order([True, 1, 1.0, np.int64(1), torch.tensor(1), np.array(1), "a", np.str_("a"), False])
    assert offsets.tolist() == [0, 1, 6, 8, 9] and order.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    with pytest.raises(ValueError, match=r"^group key of rollout 1 is NaN; a group key names one prompt group$"):
        group_order(["a", float("nan"), "a"])
    with pytest.raises(ValueError, match=r"^group key of rollout 0 is NaN"):
        group_order([np.float32("nan")])
