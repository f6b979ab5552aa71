"""The NeMo-RL drop-in counts tokens with a real Hugging Face tokenizer (a BPE trained here, nothing
downloaded) in one batched call, and every count is what `tokenizer.encode` gives text by text."""

import random

from shapec.compat.nemo_rl import apply_group_length_penalties
from shapec.run.nemo_gym_rows import token_counts

from .require import need

WORDS = ["alpha", "beta", "gamma", "δέλτα", "ε", "z", "long" * 7, "x1", "9", "é", " "]


def _tokenizer():
    tokenizers = need("tokenizers", "trl")
    transformers = need("transformers", "trl")
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(200)) for _ in range(50)]
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.train_from_iterator(corpus, tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>"]))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                                add_bos_token=True)


class EncodeOnly:
    """The same tokenizer, asked text by text (what a tokenizer without a batch call gets)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, text, add_special_tokens=True):
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)


def _text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)) if n else rng.choice(["", " ", "\n"])


def test_batched_counts_are_the_per_text_encode_counts():
    tok = _tokenizer()
    rng = random.Random(1)
    texts = [_text(rng, rng.randint(0, 300)) for _ in range(500)] + ["", "🙂 emoji", "a\tb\nc"]
    assert token_counts(tok, texts) == [len(tok.encode(t, add_special_tokens=False)) if t else 0 for t in texts]


def test_the_drop_in_shapes_the_same_with_the_batched_and_the_per_text_count():
    tok = _tokenizer()
    rng = random.Random(2)
    config = {"default": {"length_type": "tokens", "longest_total_penalty": 0.1, "total_bonus": 0.05,
                          "group_total_length_penalty_coeff": 0.1}}

    def results():
        rng.seed(3)
        return [{"full_result": {"reward": float(rng.random() < 0.6), "response": {"output": [
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": _text(rng, rng.randint(0, 400))}]},
                    {"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": _text(rng, rng.randint(0, 60))}]}]}},
                 "agent_ref": {"name": "math"}} for _ in range(64)]

    batched, per_text = results(), results()
    apply_group_length_penalties(batched, config, 8, tokenizer=tok)
    apply_group_length_penalties(per_text, config, 8, tokenizer=EncodeOnly(tok))
    shaped = [r["full_result"]["reward"] for r in batched]
    assert shaped == [r["full_result"]["reward"] for r in per_text]
    assert shaped != [r["full_result"]["reward"] for r in results()]  # the penalties did apply
