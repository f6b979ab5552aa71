"""OpenRLHF: the hook on OpenRLHF's own Experience objects, batched the way its experience maker does.

What imports on CPU is tested: `Experience`, `concat_experiences`, the `length_penalty` module whose
`apply_length_penalties` the hook replaces. `RemoteExperienceMaker` itself imports flash-attn (no CPU
build), so its call of the hook and the reshape that follows are not run here.
"""

import types

import pytest

import shapec
from shapec.compat.openrlhf import length_penalty_hook

from .require import need

N = 4  # n_samples_per_prompt
LENGTHS = [6, 3, 9, 4, 5, 5, 8, 2, 7, 3, 6, 4]
REWARDS = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]


def _args(**reward):
    return types.SimpleNamespace(rollout=types.SimpleNamespace(n_samples_per_prompt=N),
                                 reward=types.SimpleNamespace(**reward))


def _experiences(torch, micro_batch):
    """Single samples merged into micro-batches as `split_rollout_samples` does (groups straddle them)."""
    Experience = need("openrlhf.trainer.ppo_utils.experience", "openrlhf").Experience
    samples = []
    for i, (n, r) in enumerate(zip(LENGTHS, REWARDS)):
        samples.append(Experience(
            sequences=torch.ones(1, n + 2, dtype=torch.long), action_mask=torch.ones(1, n, dtype=torch.bool),
            rewards=torch.tensor([r]), response_length=torch.tensor([float(n)]), index=[i],
            prompts=[f"prompt {i // N}"], info={"reward": torch.tensor([r])}))
    return [Experience.concat_experiences(samples[i:i + micro_batch], 0) for i in range(0, len(samples), micro_batch)]


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_hook_on_experience_batches(backend):
    torch = need("torch", "openrlhf")
    need("openrlhf.trainer.ppo_utils.length_penalty", "openrlhf")
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
    torch = need("torch", "openrlhf")
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
    torch = need("torch", "openrlhf")
    experiences = _experiences(torch, micro_batch=4)
    before = [e.rewards.clone() for e in experiences]
    hook = length_penalty_hook("kimi", backend="interpreter")
    with pytest.raises(ValueError, match=rf"reward\.{key} is set, but this hook replaces OpenRLHF's built-in"):
        hook(experiences, _args(**{key: 1}))
    assert all(torch.equal(a, e.rewards) for a, e in zip(before, experiences))


def test_signature_matches_openrlhf():
    need("torch", "openrlhf")
    import inspect

    builtin = need("openrlhf.trainer.ppo_utils.length_penalty", "openrlhf").apply_length_penalties
    hook = length_penalty_hook("kimi", backend="interpreter")
    assert list(inspect.signature(hook).parameters) == list(inspect.signature(builtin).parameters)
