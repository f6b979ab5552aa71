"""SkyRL: the registered estimator inside SkyRL's trainer, from a generator's output to advantages.

Each test runs SkyRL's own `RayPPOTrainer` methods in order: `postprocess_generator_output`
(per-token rewards, the zero-variance filter), `convert_to_training_input` (SkyRL's padded tensors,
its padding rows), then `compute_advantages_and_returns`, which calls `ppo_utils.
compute_advantages_and_returns` and so the registered estimator. The trainer is built without its
Ray workers: those methods read only its config, a tokenizer's pad id and the data-parallel size.
"""

import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import shapec
from shapec.compat.skyrl import register_advantage_estimator, with_batch

from ..stdlib.test_hapo import MAX_LEN
from ..stdlib.test_hapo import step as hapo_step
from .require import need

INSTALL = "pip install -e '.[skyrl]' && pip install --no-deps --ignore-requires-python skyrl-train==0.3.1"
UIDS = ["0", "1", "2", "0", "1", "2", "0", "1", "2"]  # SkyRL's uid: the dataset row; interleaved here
CORRECT = [1, 1, 0, 1, 0, 0, 1, 1, 1]
# multi-turn: each response is turns of the model's tokens (1) and the environment's observations (0)
TURNS = [[5], [3, 4, 2], [3], [2, 6, 5], [4], [3, 5, 2], [6], [2, 9, 1], [4, 3, 2]]
LENGTHS = [sum(turns[::2]) for turns in TURNS]  # the model's tokens: the loss mask's sum


def _skyrl():
    need("torch", "skyrl", INSTALL)
    return need("skyrl_train.trainer", "skyrl", INSTALL)


def _trainer(dp_size=1, **overrides):
    """A RayPPOTrainer on SkyRL's default config (with `overrides`), its compute_advantages_and_returns
    wrapped as docs/trainers.md says; no workers, a data-parallel size of `dp_size`."""
    trainer_module = _skyrl()
    hydra = need("hydra", "skyrl", INSTALL)
    config_dir = Path(need("skyrl_train", "skyrl", INSTALL).__file__).parent / "config"
    with hydra.initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = hydra.compose("ppo_base_config", overrides=[f"{key}={value}" for key, value in overrides.items()])

    class Trainer(trainer_module.RayPPOTrainer):
        def __init__(self):  # RayPPOTrainer's own builds dataloaders and reroutes logging
            self.cfg, self.all_metrics = cfg, {}
            self.tokenizer = SimpleNamespace(pad_token_id=0)
            self.policy_model = SimpleNamespace(actor_infos=[SimpleNamespace(rank=SimpleNamespace(dp_size=dp_size))])
            self.critic_model = self.ref_model = None

    Trainer.compute_advantages_and_returns = with_batch(trainer_module.RayPPOTrainer.compute_advantages_and_returns)
    return Trainer()


def _advantages(trainer, uids, correct, turns):
    """A generator's output (response-level rewards, multi-turn loss masks) through the trainer."""
    masks = [[int(t % 2 == 0)] * n for turns_ in turns for t, n in enumerate(turns_)]
    loss_masks, at = [], 0
    for turns_ in turns:
        loss_masks.append([m for mask in masks[at:at + len(turns_)] for m in mask])
        at += len(turns_)
    output = {"prompt_token_ids": [[7, 8] for _ in uids], "response_ids": [[9] * len(m) for m in loss_masks],
              "rewards": [float(c) for c in correct], "loss_masks": loss_masks, "rollout_logprobs": None,
              "rollout_metrics": None}
    output = trainer.postprocess_generator_output(output, list(uids))
    data = trainer.convert_to_training_input(output, list(uids))
    data["values"] = None  # what fwd_logprobs_values_reward sets without a critic
    return trainer.compute_advantages_and_returns(data)


def _grpo(x, norm_std=True):
    if len(x) == 1:  # SkyRL's GRPO: a single response's baseline is 0 and its std 1
        return x / (1 + 1e-6) if norm_std else x
    return (x - x.mean()) / (x.std(ddof=1) + 1e-6) if norm_std else x - x.mean()


def _expected(shaper, base="grpo", norm_std=True, lengths=LENGTHS, correct=CORRECT, trained=None):
    """The shaper on each uid group of the responses that train, then SkyRL's GRPO (or RLOO) in numpy."""
    trained = np.ones(len(UIDS), dtype=bool) if trained is None else trained
    out = np.zeros(len(UIDS))
    for uid in dict.fromkeys(UIDS):
        rows = [i for i, u in enumerate(UIDS) if u == uid and trained[i]]
        if not rows:
            continue
        shaped = shaper([correct[i] for i in rows], group_size=len(rows),
                        channels={"length": [lengths[i] for i in rows]}).rewards
        k = len(rows)
        out[rows] = (shaped - shaped.mean()) * k / (k - 1) if base == "rloo" else _grpo(shaped, norm_std)
    return out


def _per_row(data):
    """Each row's advantage (SkyRL's outcome estimators give one value over the response mask)."""
    advantages, mask = data["advantages"], data["response_mask"]
    value = (advantages * mask).sum(-1) / mask.sum(-1)
    assert advantages.allclose(value[:, None] * mask, atol=1e-6)
    return value.numpy()


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
@pytest.mark.parametrize("base,norm_std", [("grpo", True), ("grpo", False), ("rloo", True)])
def test_estimator_through_the_trainers_compute_advantages_and_returns(backend, base, norm_std):
    name = f"shapec_test_{backend}_{base}_{norm_std}"
    trainer = _trainer(**{"trainer.algorithm.advantage_estimator": name,
                          "trainer.algorithm.grpo_norm_by_std": norm_std})
    estimator = register_advantage_estimator(name, shapec.load("kimi", backend=backend), base=base)
    data = _advantages(trainer, UIDS, CORRECT, TURNS)
    shaper = shapec.load("kimi", backend=backend).kimi_length
    np.testing.assert_allclose(_per_row(data), _expected(shaper, base, norm_std), rtol=1e-5, atol=1e-5)
    assert data["returns"].equal(data["advantages"])
    assert estimator.last_metrics == {}  # kimi declares no metrics
    assert need("skyrl_train.utils.ppo_utils", "skyrl").AdvantageEstimatorRegistry.get(name) is estimator


def test_lengths_are_the_loss_masks_not_the_response_masks_with_the_observations():
    trainer = _trainer(**{"trainer.algorithm.advantage_estimator": "shapec_test_lengths"})
    register_advantage_estimator("shapec_test_lengths", "kimi", shaper="kimi_length", backend="interpreter")
    data = _advantages(trainer, UIDS, CORRECT, TURNS)
    shaper = shapec.load("kimi", backend="interpreter").kimi_length
    assert data["response_mask"].sum(-1).tolist() == [sum(t) for t in TURNS]
    assert data["loss_mask"].sum(-1).tolist() == LENGTHS
    np.testing.assert_allclose(_per_row(data), _expected(shaper), rtol=1e-5, atol=1e-5)
    with_observations = _expected(shaper, lengths=[sum(t) for t in TURNS])
    assert not np.allclose(_per_row(data), with_observations, atol=1e-3)


def test_metrics_reach_the_trainers_metrics_and_a_bad_base_is_named():
    trainer = _trainer(**{"trainer.algorithm.advantage_estimator": "shapec_test_miles"})
    estimator = register_advantage_estimator("shapec_test_miles", "miles", shaper="length_penalty",
                                             params={"coeff": 1.0}, backend="interpreter")
    _advantages(trainer, UIDS, CORRECT, TURNS)
    assert set(estimator.last_metrics) == {"penalized_frac"} and 0 < estimator.last_metrics["penalized_frac"] < 1
    assert trainer.all_metrics["shapec/penalized_frac"] == estimator.last_metrics["penalized_frac"]
    with pytest.raises(ValueError, match=r"base='grp'; expected one of grpo, rloo \(did you mean 'grpo'\?\)"):
        register_advantage_estimator("shapec_test_bad", "kimi", base="grp")


def test_padding_rows_and_the_zero_variance_filters_groups_stay_out():
    """dp_size 4 pads 9 rows to 12 (uids pad0..pad2, loss mask zeros); the filter masks uid 2's group
    (all correct here). Neither is shaped or counted in a group, and each gets advantage 0."""
    correct = [1, 1, 1, 0, 0, 1, 1, 1, 1]
    trainer = _trainer(dp_size=4, **{"trainer.algorithm.advantage_estimator": "shapec_test_pad",
                                     "trainer.algorithm.zero_variance_filter": True})
    register_advantage_estimator("shapec_test_pad", "kimi", shaper="kimi_length", backend="interpreter")
    data = _advantages(trainer, UIDS, correct, TURNS)
    trained = np.array([u != "2" for u in UIDS])
    expected = _expected(shapec.load("kimi", backend="interpreter").kimi_length, correct=correct, trained=trained)
    assert data.metadata["uids"][9:] == ["pad0", "pad1", "pad2"]
    advantages = _per_row(data)
    np.testing.assert_allclose(advantages[:9], expected, rtol=1e-5, atol=1e-5)
    assert advantages[9:].tolist() == [0, 0, 0]


def test_the_rollouts_a_shaper_drops_leave_the_group_and_the_loss():
    """gfpo keeps each group's two shortest: GRPO's statistics are over those alone, and a dropped
    response has advantage 0 and a loss mask of zeros in the batch SkyRL's policy loss reads."""
    trainer = _trainer(**{"trainer.algorithm.advantage_estimator": "shapec_test_gfpo"})
    gfpo = shapec.load("gfpo", backend="interpreter").gfpo
    params = {"k": 2, "scale": "none"}
    register_advantage_estimator("shapec_test_gfpo", gfpo, params=params)
    data = _advantages(trainer, UIDS, CORRECT, TURNS)
    kept, expected = np.zeros(len(UIDS), dtype=bool), np.zeros(len(UIDS))
    for uid in dict.fromkeys(UIDS):
        rows = [i for i, u in enumerate(UIDS) if u == uid]
        out = gfpo([CORRECT[i] for i in rows], group_size=len(rows), channels={"length": [LENGTHS[i] for i in rows]},
                   params=params)
        mine = [i for i, keep in zip(rows, out.kept) if keep]
        kept[mine] = True
        expected[mine] = _grpo(out.rewards[out.kept])
    assert data["loss_mask"].sum(-1).gt(0).numpy().tolist() == kept.tolist()
    np.testing.assert_allclose(_per_row(data), expected, rtol=1e-5, atol=1e-5)


HAPO = {"w_lr": 1.0, "type_lr": "cosine"}
STEPS = [["10", "11", "12"], ["12", "13", "10"], ["11", "10", "14", "12"]]  # dataset rows: prompts recur


@pytest.mark.parametrize("backend,mode", [("interpreter", "min"), ("numba", "mean")])
def test_hapo_tracked_keeps_each_prompts_history_across_steps_by_its_uid(backend, mode):
    """Three steps through the trainer: SkyRL's uid is the dataset row, the same at every step, so it
    keys HAPO's history; the rewards are HAPO's training loop's."""
    name = f"shapec_test_hapo_{backend}_{mode}"
    trainer = _trainer(**{"trainer.algorithm.advantage_estimator": name})
    estimator = register_advantage_estimator(name, shapec.load("hapo", backend=backend).hapo_tracked,
                                             params={**HAPO, "mode": mode})
    rng = np.random.default_rng(7)
    prompts_all = sorted({p for chosen in STEPS for p in chosen})
    lens, counts = {p: MAX_LEN for p in prompts_all}, {p: 0 for p in prompts_all}
    for chosen in STEPS:
        prompts = [p for p in chosen for _ in range(3)]
        rng.shuffle(prompts)
        correct = (rng.random(len(prompts)) < 0.7).astype(int).tolist()
        lengths = rng.integers(2, 40, len(prompts)).tolist()
        shaped, _ = hapo_step(lens, counts, prompts, correct, lengths, HAPO["w_lr"], HAPO["type_lr"], mode)
        data = _advantages(trainer, prompts, correct, [[n] for n in lengths])
        expected = np.zeros(len(prompts))
        for p in chosen:
            rows = [i for i, q in enumerate(prompts) if q == p]
            expected[rows] = _grpo(np.array([shaped[i] for i in rows], dtype=float))
        np.testing.assert_allclose(_per_row(data), expected, rtol=1e-5, atol=1e-5)
    history = estimator.shaper.state_dict()["hapo_tracked"]["history"]
    assert history == {p: float(lens[p]) for p in prompts_all} and any(lens[p] < MAX_LEN for p in history)


def test_the_estimator_pickles_as_skyrls_registry_sends_it_to_its_ray_actor():
    """Once Ray runs, SkyRL's registry pickles every estimator into a Ray actor and the trainer's
    process unpickles it from there: the copy shapes the same."""
    ppo_utils = need("skyrl_train.utils.ppo_utils", "skyrl", INSTALL)
    estimator = register_advantage_estimator("shapec_test_pickled", "kimi", shaper="kimi_length", backend="numba")
    ppo_utils.AdvantageEstimatorRegistry.unregister("shapec_test_pickled")
    ppo_utils.AdvantageEstimatorRegistry.register("shapec_test_pickled", pickle.loads(ppo_utils.cloudpickle.dumps(
        estimator)))
    trainer = _trainer(**{"trainer.algorithm.advantage_estimator": "shapec_test_pickled"})
    data = _advantages(trainer, UIDS, CORRECT, TURNS)
    np.testing.assert_allclose(_per_row(data), _expected(estimator.shaper), rtol=1e-5, atol=1e-5)


def test_step_wise_training_and_an_unwrapped_trainer_are_refused():
    ppo_utils = need("skyrl_train.utils.ppo_utils", "skyrl", INSTALL)
    register_advantage_estimator("shapec_test_refused", "kimi", shaper="kimi_length", backend="interpreter")
    trainer = _trainer(**{"trainer.algorithm.advantage_estimator": "shapec_test_refused"})
    trainer.cfg.generator.step_wise_trajectories = True
    with pytest.raises(ValueError, match=r"^shapec\.compat\.skyrl \(shapec_test_refused\): step-wise training "
                                         r"\(generator\.step_wise_trajectories=true\) .* a mask of ones"):
        trainer.compute_advantages_and_returns(_batch_of(trainer, step_wise=True))
    trainer.cfg.generator.step_wise_trajectories = False
    data = _batch_of(trainer)
    with pytest.raises(ValueError, match=r"\(shapec_test_refused\): SkyRL hands an estimator the response mask, "
                                         r"which in a multi-turn run also covers the environment's observation "
                                         r"tokens, .* = with_batch\(RayPPOTrainer\.compute_advantages_and_returns\)"):
        ppo_utils.compute_advantages_and_returns(data["rewards"], data["response_mask"], data.metadata["uids"],
                                                 "shapec_test_refused", trainer.cfg.trainer.algorithm)


def _batch_of(trainer, step_wise=False):
    """The batch `convert_to_training_input` makes (with is_last_step for step-wise training)."""
    output = {"prompt_token_ids": [[7, 8] for _ in UIDS], "response_ids": [[9] * n for n in LENGTHS],
              "rewards": [[0.0] * (n - 1) + [float(c)] for n, c in zip(LENGTHS, CORRECT)],
              "loss_masks": [[1] * n for n in LENGTHS], "rollout_logprobs": None}
    if step_wise:
        output["is_last_step"] = [True] * len(UIDS)
        output["trajectory_ids"] = [SimpleNamespace(to_string=lambda i=i: f"t{i}") for i in range(len(UIDS))]
    data = trainer.convert_to_training_input(output, list(UIDS))
    data["values"] = None
    return data


def test_a_spec_with_inputs_the_batch_does_not_carry_is_named():
    trainer = _trainer(**{"trainer.algorithm.advantage_estimator": "shapec_test_nemo"})
    register_advantage_estimator("shapec_test_nemo", "nemo_rl", shaper="length_penalty", backend="interpreter")
    with pytest.raises(ValueError, match=r"\(shapec_test_nemo\): the spec has several length inputs without a "
                                         r"column \(reasoning, answer\)"):
        _advantages(trainer, UIDS, CORRECT, TURNS)
