"""TRL: a real GRPOTrainer trains 2 steps on CPU with the adapter as its reward function.

The model is a 1-layer Llama built from a config, the tokenizer a character-level one built with
`tokenizers`: nothing is downloaded.
"""

import json

import numpy as np
import pytest

import shapec
from shapec.compat.trl import reward_func
from shapec.runtime.shaper import CompiledShaper

from .require import need

G = 4
CHARS = list("abcdefgh ")


def _tokenizer():
    tokenizers = need("tokenizers", "trl")
    transformers = need("transformers", "trl")
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
    tok.decoder = tokenizers.decoders.Fuse()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                                unk_token="<unk>")


def _model(vocab_size):
    transformers = need("transformers", "trl")
    transformers.set_seed(0)
    config = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                      max_position_embeddings=64, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return transformers.LlamaForCausalLM(config)


def correct(prompts, completions, **kwargs):
    """Binary correctness: the completion contains the prompt's target letter."""
    return [1.0 if target in c else 0.0 for c, target in zip(completions, kwargs["target"])]


def _trainer(trl, datasets, tmp_path, reward, **config):
    """A GRPOTrainer drawing two prompts of `G` generations per step, for 2 steps (unless `config` says)."""
    data = datasets.Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"], "target": ["a", "c", "e", "g"]})
    args = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2 * G, num_generations=G,
                          max_completion_length=8, logging_steps=1, report_to=[], use_cpu=True,
                          **{"max_steps": 2, "save_strategy": "no", "seed": 0, "temperature": 1.0, "bf16": False,
                             "fp16": False, **config})
    tokenizer = _tokenizer()
    return trl.GRPOTrainer(model=_model(len(tokenizer)), reward_funcs=[reward], args=args, train_dataset=data,
                           processing_class=tokenizer)


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_grpo_trainer_two_steps(backend, tmp_path, monkeypatch):
    trl = need("trl", "trl")
    datasets = need("datasets", "trl")
    calls, seen = [], []
    real_call = CompiledShaper.__call__

    def spy(self, rewards, **kw):  # records what the shaper is handed, then runs it
        calls.append((np.array(rewards), np.array(kw["offsets"]), {k: np.array(v) for k, v in kw["channels"].items()}))
        return real_call(self, rewards, **kw)

    def base(prompts, completions, completion_ids, **kwargs):
        seen.append((list(prompts), [len(ids) for ids in completion_ids]))
        return correct(prompts, completions, **kwargs)

    monkeypatch.setattr(CompiledShaper, "__call__", spy)
    spec = shapec.load("miles", backend=backend)
    shaped = reward_func(spec, base, shaper="length_penalty", params={"coeff": 1.0}, num_generations=G,
                         name="shaped")
    trainer = _trainer(trl, datasets, tmp_path, shaped)
    trainer.train()
    monkeypatch.undo()

    assert len(calls) == 2 and len(seen) == 2  # one shaper call per generation batch, on the whole batch
    logged = [entry for entry in trainer.state.log_history if "rewards/shaped/mean" in entry]
    assert len(logged) == 2
    independent = shapec.load("miles", backend=backend).length_penalty
    for (rewards, offsets, channels), (batch_prompts, lengths), entry in zip(calls, seen, logged):
        assert offsets.tolist() == list(range(0, 2 * G + 1, G))  # whole groups of num_generations
        for start in range(0, 2 * G, G):
            assert len(set(batch_prompts[start:start + G])) == 1  # each group is one prompt's completions
        assert channels["loss_tokens"].tolist() == lengths
        expected = independent(rewards, group_size=G, channels={"loss_tokens": lengths}, params={"coeff": 1.0})
        assert entry["rewards/shaped/mean"] == pytest.approx(float(np.mean(expected.rewards)), rel=1e-6, abs=1e-7)
        assert entry["shapec/penalized_frac"] == pytest.approx(expected.metrics["penalized_frac"], abs=1e-7)


def test_num_generations_below_the_trainers_is_refused(tmp_path):
    """The trainer makes G completions per prompt; an adapter told G / 2 would shape each group as two halves."""
    trl = need("trl", "trl")
    datasets = need("datasets", "trl")
    shaped = reward_func("miles", correct, shaper="length_penalty", params={"coeff": 1.0}, num_generations=G // 2,
                         backend="interpreter")
    trainer = _trainer(trl, datasets, tmp_path, shaped)
    with pytest.raises(ValueError, match=rf"^shapec\.compat\.trl: every prompt spans consecutive groups of "
                                         rf"num_generations={G // 2}: runs of {G} completions share one prompt \(the "
                                         rf"first is completions 0-{G - 1}\), so the trainer makes {G} per prompt and "
                                         rf"each of its groups would be shaped in parts; set num_generations={G}, "):
        trainer.train()


COUNTED = """
shaper counted() produces real {
  state steps: float = 0 update steps + 1
  term bump = 0.5 * steps
}
"""


def _counted():
    return reward_func(shapec.compile_str(COUNTED, "counted.shape", "interpreter").counted, correct,
                       num_generations=G, name="counted")


def _call(reward, step: int) -> list[float]:
    """The reward function as TRL calls it at global step `step`: two prompts, G completions each."""
    transformers = need("transformers", "trl")
    prompts = ["ab"] * G + ["cd"] * G
    completions = ["a", "b", "ab", "x", "c", "cc", "d", "dd"]
    return reward(prompts=prompts, completions=completions, completion_ids=[[3] * len(c) for c in completions],
                  target=["a"] * G + ["c"] * G, trainer_state=transformers.TrainerState(global_step=step))


def test_the_state_advances_once_per_global_step_and_repeated_calls_get_the_same_rewards():
    reward = _counted()
    first = _call(reward, 3)
    assert _call(reward, 3) == first and reward.shaper.state_dict() == {"counted": {"steps": 1.0}}
    assert _call(reward, 4) == [r + 0.5 for r in first]  # the next step reads the advanced state
    assert _call(reward, 4) == [r + 0.5 for r in first] and reward.shaper.state_dict() == {"counted": {"steps": 2.0}}


def test_with_the_callback_an_evaluation_at_a_step_not_yet_trained_leaves_the_state_alone():
    transformers = need("transformers", "trl")
    reward = _counted()
    callback = reward.callback()
    callback.on_step_begin(None, transformers.TrainerState(global_step=7), transformers.TrainerControl())
    trained = _call(reward, 7)
    evaluated = _call(reward, 8)  # TRL evaluates after the update, at the next global step
    assert evaluated == [r + 0.5 for r in trained] and reward.shaper.state_dict() == {"counted": {"steps": 1.0}}
    callback.on_step_begin(None, transformers.TrainerState(global_step=8), transformers.TrainerControl())
    assert _call(reward, 8) == evaluated and reward.shaper.state_dict() == {"counted": {"steps": 2.0}}


def test_a_checkpoint_saves_the_shaper_state_and_resuming_restores_it(tmp_path):
    trl = need("trl", "trl")
    datasets = need("datasets", "trl")

    def trainer(reward, steps):
        t = _trainer(trl, datasets, tmp_path, reward, max_steps=steps, save_strategy="steps", save_steps=1)
        t.add_callback(reward.callback())
        return t

    reward = _counted()
    trainer(reward, 2).train()
    assert reward.shaper.state_dict() == {"counted": {"steps": 2.0}}  # one advance per step
    saved = json.loads((tmp_path / "checkpoint-1" / "trainer_state.json").read_text())["stateful_callbacks"]
    assert saved["ShapecState"]["attributes"]["shapec"]["state"] == {"counted": {"steps": 1.0}}
    resumed = _counted()  # a new process: the shaper starts from its declared state
    trainer(resumed, 3).train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert resumed.shaper.state_dict() == {"counted": {"steps": 3.0}}  # 2 restored, then one more step


TRACKED = """
shaper tracked() produces real {
  state seen: float per prompt = 0 update seen + 1
  term bump = 0.5 * seen
}
"""


@pytest.mark.parametrize("prompt_id", [None, "idx"])
def test_a_state_kept_per_prompt_follows_each_prompt_by_its_text_or_a_column(prompt_id):
    transformers = need("transformers", "trl")
    reward = reward_func(shapec.compile_str(TRACKED, "tracked.shape", "interpreter").tracked, correct,
                         num_generations=G, name="tracked", prompt_id=prompt_id)
    answers = {"ab": ["a", "b", "ab", "x"], "cd": ["c", "cc", "d", "dd"]}

    def call(prompts: list[str], step: int) -> list[float]:
        completions = [c for p in prompts for c in answers[p]]
        return reward(prompts=[p for p in prompts for _ in range(G)], completions=completions,
                      completion_ids=[[3] * len(c) for c in completions],
                      target=[p[0] for p in prompts for _ in range(G)], idx=[ord(p[0]) for p in prompts for _ in range(G)],
                      trainer_state=transformers.TrainerState(global_step=step))

    first = call(["ab", "cd"], 1)
    assert call(["cd"], 2) == [r + 0.5 for r in first[G:]]  # cd was seen once; ab is not in this batch
    keys = ("ab", "cd") if prompt_id is None else ("97", "99")  # a column's ids as strings: JSON checkpoints
    assert reward.shaper.state_dict() == {"tracked": {"seen": {keys[0]: 1.0, keys[1]: 2.0}}}
