"""OpenRLHF: the hook on OpenRLHF's own Experience objects, batched the way its experience maker does,
and the Ray setup hook reaching the async trainer's experience maker.

`RemoteExperienceMaker` and the trainers import flash-attn, deepspeed and vLLM, which have no CPU
builds: the async test gives its Ray workers empty stand-ins for them, never called, and runs
OpenRLHF's own PPOTrainerAsync, TrainingActor and maker step. Generation and model updates are not run.
"""

import copy
import inspect
import types

import numpy as np
import pytest

import shapec
from shapec.compat.openrlhf import length_penalty_hook, ray_setup_hook

from ..stdlib.test_hapo import MAX_LEN
from ..stdlib.test_hapo import step as hapo_step
from .require import need
from .test_trl import _tokenizer

INSTALL = "pip install -e '.[openrlhf]' && pip install --no-deps openrlhf==0.11.2"
N = 4  # n_samples_per_prompt
LENGTHS = [6, 3, 9, 4, 5, 5, 8, 2, 7, 3, 6, 4]
REWARDS = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]


def _args(**reward):
    return types.SimpleNamespace(rollout=types.SimpleNamespace(n_samples_per_prompt=N),
                                 reward=types.SimpleNamespace(**reward))


def _experiences(torch, micro_batch):
    """Single samples merged into micro-batches as `split_rollout_samples` does (groups straddle them)."""
    Experience = need("openrlhf.trainer.ppo_utils.experience", "openrlhf", INSTALL).Experience
    samples = []
    for i, (n, r) in enumerate(zip(LENGTHS, REWARDS)):
        samples.append(Experience(
            sequences=torch.ones(1, n + 2, dtype=torch.long), action_mask=torch.ones(1, n, dtype=torch.bool),
            rewards=torch.tensor([r]), response_length=torch.tensor([float(n)]), index=[i],
            prompts=[f"prompt {i // N}"], info={"reward": torch.tensor([r])}))
    return [Experience.concat_experiences(samples[i:i + micro_batch], 0) for i in range(0, len(samples), micro_batch)]


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_hook_on_experience_batches(backend):
    torch = need("torch", "openrlhf", INSTALL)
    need("openrlhf.trainer.ppo_utils.length_penalty", "openrlhf", INSTALL)
    experiences = _experiences(torch, micro_batch=3)
    hook = length_penalty_hook(shapec.load("kimi", backend=backend))
    hook(experiences, _args())
    got = torch.cat([e.rewards for e in experiences]).tolist()
    expected = shapec.load("kimi", backend=backend).kimi_length(REWARDS, group_size=N,
                                                                channels={"length": LENGTHS})
    assert got == pytest.approx(expected.rewards.tolist(), abs=1e-7)
    for e in experiences:
        assert e.rewards.dtype == torch.float32
        assert torch.equal(e.info["reward"], e.rewards)  # logged rewards reflect the shaping


def test_groups_follow_index_not_batch_position():
    torch = need("torch", "openrlhf", INSTALL)
    experiences = _experiences(torch, micro_batch=4)
    experiences.reverse()  # the maker's experiences can arrive in any order; index says the prompt
    hook = length_penalty_hook("miles", shaper="length_penalty", params={"coeff": 1.0}, backend="interpreter")
    hook(experiences, _args())
    got = {e.index[j]: e.rewards[j].item() for e in experiences for j in range(len(e.index))}
    expected = shapec.load("miles", backend="interpreter").length_penalty(
        REWARDS, group_size=N, channels={"loss_tokens": LENGTHS}, params={"coeff": 1.0})
    assert [got[i] for i in range(len(LENGTHS))] == pytest.approx(expected.rewards.tolist(), abs=1e-7)
    frac = expected.metrics["penalized_frac"]
    for e in experiences:
        assert e.info["shapec/penalized_frac"].tolist() == pytest.approx([frac] * len(e.index))


@pytest.mark.parametrize("key", ["overlong_buffer_len", "stop_properly_penalty_coef"])
def test_builtin_penalty_settings_refused(key):
    torch = need("torch", "openrlhf", INSTALL)
    experiences = _experiences(torch, micro_batch=4)
    before = [e.rewards.clone() for e in experiences]
    hook = length_penalty_hook("kimi", backend="interpreter")
    with pytest.raises(ValueError, match=rf"reward\.{key} is set, but this hook replaces OpenRLHF's built-in"):
        hook(experiences, _args(**{key: 1}))
    assert all(torch.equal(a, e.rewards) for a, e in zip(before, experiences))


@pytest.mark.parametrize("stop_coef", [None, 0.5, -0.5])
def test_stdlib_overlong_is_openrlhfs_own_length_penalties(stop_coef):
    """OpenRLHF's apply_length_penalties, run on its Experience objects with both penalties set, gives
    the stdlib's openrlhf.overlong rounded to its float32 rewards, and so does the hook running it."""
    torch = need("torch", "openrlhf", INSTALL)
    penalties = need("openrlhf.trainer.ppo_utils.length_penalty", "openrlhf", INSTALL)
    Experience = need("openrlhf.trainer.ppo_utils.experience", "openrlhf", INSTALL).Experience
    lengths = [70.0, 81.0, 95.0, 100.0, 130.0, 10.0, 99.0, 120.0]
    rewards = [1.0, 1.0, 0.0, 1.0, 1.0, 0.5, 1.0, 0.0]
    truncated = [False, False, True, False, True, True, False, True]
    experiences = [Experience(sequences=torch.ones(4, 3, dtype=torch.long),
                              action_mask=torch.ones(4, 1, dtype=torch.bool), rewards=torch.tensor(rewards[i:i + 4]),
                              response_length=torch.tensor(lengths[i:i + 4]),
                              truncated=torch.tensor(truncated[i:i + 4]), index=list(range(i, i + 4)),
                              info={"reward": torch.tensor(rewards[i:i + 4])})
                   for i in (0, 4)]
    ns = types.SimpleNamespace
    args = ns(rollout=ns(max_new_tokens=100), data=ns(max_len=512),
              reward=ns(overlong_buffer_len=20.0, overlong_penalty_factor=0.5, stop_properly_penalty_coef=stop_coef))
    params = {"max_len": 100, "buffer": 20, "factor": 0.5}
    if stop_coef is not None:
        params["stop_coef"] = stop_coef
    hooked = copy.deepcopy(experiences)
    penalties.apply_length_penalties(experiences, args)
    expected = shapec.load("openrlhf", backend="interpreter").overlong(
        rewards, group_size=8, channels={"length": lengths, "truncated": truncated}, params=params).rewards
    got = torch.cat([e.rewards for e in experiences])
    assert got.tolist() == torch.tensor(expected, dtype=torch.float32).tolist()
    # the hook running the stdlib spec in OpenRLHF's place, the flags read from the experiences
    length_penalty_hook("openrlhf", shaper="overlong", params=params)(hooked, _args())
    assert torch.cat([e.rewards for e in hooked]).tolist() == got.tolist()


def test_signature_matches_openrlhf():
    need("torch", "openrlhf", INSTALL)
    builtin = need("openrlhf.trainer.ppo_utils.length_penalty", "openrlhf", INSTALL).apply_length_penalties
    hook = length_penalty_hook("kimi", backend="interpreter")
    assert list(inspect.signature(hook).parameters) == list(inspect.signature(builtin).parameters)


def _trainer_args(n_samples_per_prompt: int) -> types.SimpleNamespace:
    """What OpenRLHF 0.11.2's train_ppo_ray parser gives that the async trainer's constructors and its
    maker's `compute_advantages_and_returns` read: group_norm advantages, no KL, no logging."""
    ns = types.SimpleNamespace
    return ns(eval=ns(steps=-1), ckpt=ns(save_steps=-1), data=ns(disable_fast_tokenizer=False),
              train=ns(async_queue_size=1, partial_rollout_enable=False, dynamic_batch_enable=False),
              algo=ns(kl=ns(target=None, init_coef=0.0, horizon=10000),
                      advantage=ns(estimator="group_norm", gamma=1.0, lambd=1.0, no_std_norm=False)),
              logger=ns(wandb=ns(key=None), tensorboard_dir=None), ds=ns(zero_stage=2, param_dtype="bf16"),
              rollout=ns(n_samples_per_prompt=n_samples_per_prompt), reward=ns(clip_range=None))


def _with_stand_ins(setup):
    """`setup` after registering empty modules for what this venv lacks and OpenRLHF's trainer modules
    import: flash-attn, deepspeed and vLLM (GPU-only) and aiohttp (left out with openrlhf's other
    dependencies). Experience making never calls them; an installed package is used as it is."""
    missing = ("flash_attn", "deepspeed", "vllm", "aiohttp")

    def setup_with_stand_ins():
        import importlib.abc
        import importlib.machinery
        import sys

        class StandIn(types.ModuleType):
            __path__ = []

            def __getattr__(self, name):
                if name.startswith("__"):
                    raise AttributeError(name)
                value = type(name, (), {})  # a class, as some names are subclassed at import
                setattr(self, name, value)
                return value

        class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path, target=None):
                if name.partition(".")[0] in missing:
                    return importlib.machinery.ModuleSpec(name, self, is_package=True)
                return None

            def create_module(self, spec):
                return StandIn(spec.name)

            def exec_module(self, module):
                pass

        sys.meta_path.append(Finder())  # last: asked only for what no installed package provides
        setup()

    return setup_with_stand_ins


def _async_maker_steps(tmp_path, setup, batches: list) -> list:
    """Each batch of experiences through one TrainingActor's maker step, in turn (its state lives on
    between them): the driver starts PPOTrainerAsync, whose actor starts TrainingActor, whose
    RemoteExperienceMaker calls apply_length_penalties; all OpenRLHF's own classes, in Ray workers."""
    ray = need("ray", "openrlhf", INSTALL)
    _tokenizer().save_pretrained(tmp_path)  # the trainers load the policy's tokenizer from its path

    def make(trainer, experiences):
        """In TrainingActor's process: its maker's step, and where its apply_length_penalties comes from."""
        from openrlhf.trainer.ppo_utils import experience_maker

        out = trainer.experience_maker.compute_advantages_and_returns(experiences)
        cls = next(c for c in type(trainer).__mro__ if c.__module__.startswith("openrlhf"))
        return (f"{cls.__module__}.{cls.__qualname__}", experience_maker.apply_length_penalties.__module__,
                [i for e in out for i in e.index], [r for e in out for r in e.rewards.tolist()],
                [r for e in out for r in e.info["return"].tolist()])

    @ray.remote(num_cpus=0)
    class Driver:  # train_ppo_ray.train's part
        def __init__(self, args, pretrain):
            from openrlhf.trainer.ppo_trainer_async import PPOTrainerAsync
            from openrlhf.utils.utils import get_strategy

            # no model groups or vLLM engines: only experience making is run (its generator actor,
            # which needs a dataset and vLLM, fails to start and is never called)
            self.trainer = PPOTrainerAsync.remote(pretrain, get_strategy(args), None, None, None, None, None)

        def make(self, experiences):
            training = ray.get(self.trainer.__ray_call__.remote(lambda trainer: trainer.trainer_actor))
            return ray.get(training.__ray_call__.remote(make, experiences))

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"worker_process_setup_hook": _with_stand_ins(setup)})
    try:
        driver = Driver.remote(_trainer_args(N), str(tmp_path))
        return [ray.get(driver.make.remote(experiences)) for experiences in batches]
    finally:
        ray.shutdown()


def _group_norm(rewards) -> list:
    """OpenRLHF's group_norm of rewards in index order."""
    groups = np.asarray(rewards, dtype=float).reshape(-1, N)
    return ((groups - groups.mean(1, keepdims=True)) / (groups.std(1, ddof=1, keepdims=True) + 1e-9)).ravel().tolist()


def test_async_trainers_experience_maker_is_shaped_by_the_ray_setup_hook(tmp_path):
    torch = need("torch", "openrlhf", INSTALL)
    need("openrlhf.trainer.ppo_utils.length_penalty", "openrlhf", INSTALL)
    experiences = _experiences(torch, micro_batch=3)
    for e in experiences:
        e.kl = torch.zeros(e.action_mask.shape)  # make_experience_batch sets it; the KL coefficient is 0
    setup = ray_setup_hook("miles", shaper="length_penalty", params={"coeff": 1.0}, backend="interpreter")
    [(trainer, module, _, rewards, returns)] = _async_maker_steps(tmp_path, setup, [experiences])
    assert (trainer, module) == ("openrlhf.trainer.ppo_trainer_async.TrainingActor", "shapec.compat.openrlhf")
    shaped = shapec.load("miles", backend="interpreter").length_penalty(
        REWARDS, group_size=N, channels={"loss_tokens": LENGTHS}, params={"coeff": 1.0}).rewards
    assert rewards == pytest.approx(shaped.tolist(), abs=1e-7)
    assert returns == pytest.approx(_group_norm(shaped), abs=1e-6)  # then group_norm of the shaped rewards


HAPO = {"w_lr": 1.0, "type_lr": "cosine", "mode": "min"}
STEPS = [["p", "q", "r"], ["r", "s", "p"], ["q", "p", "t", "r"]]  # prompts recur, at other indices


def _hapo_steps(torch, seed=3):
    """Three rollout batches as OpenRLHF's samples generator leaves them (sample `i` of prompt `i // N`,
    its prompt text in `prompts`), merged into micro-batches that arrive out of order, and what HAPO's
    training loop gives each sample (by index) at each step."""
    Experience = need("openrlhf.trainer.ppo_utils.experience", "openrlhf", INSTALL).Experience
    rng = np.random.default_rng(seed)
    lens, counts = {p: MAX_LEN for p in "pqrst"}, {p: 0 for p in "pqrst"}
    batches, expected = [], []
    for chosen in STEPS:
        keys = [p for p in chosen for _ in range(N)]
        correct = (rng.random(len(keys)) < 0.7).astype(float).tolist()
        lengths = rng.integers(2, 40, len(keys)).tolist()
        expected.append(hapo_step(lens, counts, keys, correct, lengths, HAPO["w_lr"], HAPO["type_lr"],
                                  HAPO["mode"])[0])
        samples = [Experience(sequences=torch.ones(1, n + 2, dtype=torch.long),
                              action_mask=torch.ones(1, n, dtype=torch.bool), rewards=torch.tensor([r]),
                              response_length=torch.tensor([float(n)]), index=[i], prompts=[f"Question {p}?"],
                              info={"reward": torch.tensor([r])}, kl=torch.zeros(1, n))
                   for i, (p, r, n) in enumerate(zip(keys, correct, lengths))]
        merged = [Experience.concat_experiences(samples[i:i + 5], 0) for i in range(0, len(samples), 5)]
        batches.append(merged[::-1])
    return batches, expected, lens


def test_hapo_tracked_follows_each_prompt_by_its_text_across_steps():
    torch = need("torch", "openrlhf", INSTALL)
    batches, expected, lens = _hapo_steps(torch)
    hook = length_penalty_hook(shapec.load("hapo", backend="interpreter").hapo_tracked, params=HAPO)
    for experiences, want in zip(batches, expected):
        hook(experiences, _args())
        got = {i: r for e in experiences for i, r in zip(e.index, e.rewards.tolist())}
        assert [got[i] for i in range(len(want))] == pytest.approx(want, abs=1e-6)
    assert any(lens[p] < MAX_LEN for p in "pqrst")  # a history formed, so later steps were shaped by it


def test_hapo_tracked_keeps_its_history_in_the_async_trainers_maker_across_steps(tmp_path):
    torch = need("torch", "openrlhf", INSTALL)
    need("openrlhf.trainer.ppo_utils.length_penalty", "openrlhf", INSTALL)
    batches, expected, _ = _hapo_steps(torch, seed=5)
    setup = ray_setup_hook("hapo", shaper="hapo_tracked", params=HAPO, backend="interpreter")
    for (_, module, index, rewards, returns), want in zip(_async_maker_steps(tmp_path, setup, batches), expected):
        assert module == "shapec.compat.openrlhf"
        by_index = dict(zip(index, zip(rewards, returns)))
        assert [by_index[i][0] for i in range(len(want))] == pytest.approx(want, abs=1e-6)
        assert [by_index[i][1] for i in range(len(want))] == pytest.approx(_group_norm(want), abs=1e-5)


def test_a_prompt_key_may_be_an_info_entry_and_a_missing_key_is_named():
    torch = need("torch", "openrlhf", INSTALL)
    hapo = shapec.load("hapo", backend="interpreter").hapo_tracked
    experiences = _experiences(torch, micro_batch=4)
    for e in experiences:
        e.info["prompt_idx"] = torch.tensor([float(i // N + 40) for i in e.index])  # a reward_func's extra_logs
    length_penalty_hook(hapo, prompt_key="prompt_idx")(experiences, _args())
    assert set(hapo.state_dict()["hapo_tracked"]["history"]) == {40, 41, 42}
    with pytest.raises(ValueError, match=r"^shapec\.compat\.openrlhf: 'hapo_tracked' keeps hapo_tracked\.history, "
                                         r"hapo_tracked\.seen per prompt, .*experience 0 has no info entry "
                                         r"prompt_key='prompt_id' \(entries: prompt_idx, reward\)"):
        length_penalty_hook(hapo, prompt_key="prompt_id")(experiences, _args())
    for e in experiences:
        e.prompts = []
    with pytest.raises(ValueError, match=r"experience 0 holds 0 prompts for 4 samples \(OpenRLHF's samples generator "
                                         r"records each sample's prompt text in Experience\.prompts\)"):
        length_penalty_hook(hapo)(experiences, _args())
