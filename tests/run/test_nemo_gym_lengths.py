"""`--layout nemo-gym` counts the response texts in tokens with a tokenizer and in characters
without one. Characters never reach a `tokens` input unless the user says the lengths are
characters: the error names the input, its unit and both fixes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapec.tools import commands

from .test_files_whole_or_untouched import run, write_jsonl

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "data"
FIX = ("give --tokenizer NAME (a Hugging Face tokenizer) to count tokens, or --length-type chars to shape with "
       "character counts\n")
BOTH = "input 'reasoning' (`input reasoning: tokens`) and input 'answer' (`input answer: tokens`) read tokens"


def gym(tmp_path, *args):
    return run("nemo_rl", "--layout", "nemo-gym", "--group-size", 8, "--data", EXAMPLES / "nemo_gym_rollouts.jsonl",
               "--out", tmp_path / "o.jsonl", *args)


def test_characters_reaching_a_tokens_input_are_an_error_naming_the_inputs_and_the_fixes(tmp_path):
    rc, out, err = gym(tmp_path)
    assert rc == 2 and out == "" and not (tmp_path / "o.jsonl").exists()
    assert err == f"shapec: error: --layout nemo-gym: {BOTH}, but without --tokenizer the lengths are characters; {FIX}"


@pytest.mark.parametrize("how", ["flag", "config"])
def test_length_type_tokens_without_a_tokenizer_is_the_same_error_naming_where_it_was_said(tmp_path, how):
    config = tmp_path / "c.yaml"
    config.write_text("grpo:\n  length_penalty:\n    default:\n      length_type: tokens\n")
    rc, _, err = gym(tmp_path, *(("--length-type", "tokens") if how == "flag" else ("--config", config)))
    said = "--length-type tokens" if how == "flag" else "the config's length_type is tokens"
    assert rc == 2
    assert err == f"shapec: error: --layout nemo-gym: {BOTH}, but without --tokenizer ({said}) the lengths are " \
                  f"characters; {FIX}"


@pytest.mark.parametrize("how", ["flag", "config"])
def test_saying_the_lengths_are_characters_shapes_with_character_counts(tmp_path, how):
    config = tmp_path / "c.yaml"
    config.write_text("grpo:\n  length_penalty:\n    default:\n      length_type: chars\n")
    rc, out, err = gym(tmp_path, *(("--length-type", "chars") if how == "flag" else ("--config", config)))
    assert rc == 0 and err == "", err
    assert "groups: 4 in, 4 shaped" in out


def test_a_chars_spec_needs_no_word(tmp_path):
    spec = tmp_path / "c.shape"
    spec.write_text("shaper c(p: float = 0.1) requires binary produces nonneg {\n  input reasoning: chars\n"
                    "  input answer: chars\n  gate right = reward > 0\n"
                    "  term longest = -p on argmax(reasoning + answer where right)\n  clamp >= 0\n}\n")
    rc, _, err = run(spec, "--layout", "nemo-gym", "--group-size", 8, "--data", EXAMPLES / "nemo_gym_rollouts.jsonl",
                     "--out", tmp_path / "o.jsonl")
    assert rc == 0 and err == "", err


class Words:
    """A tokenizer that counts words."""

    def encode(self, text, add_special_tokens=False):
        return text.split()


def test_a_tokenizer_alone_counts_tokens(tmp_path, monkeypatch):
    monkeypatch.setattr(commands, "_load_tokenizer", lambda name: Words())
    rows = [{"prompt_id": "p", "full_result": {"reward": 1.0, "response": {"output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}}}
        for text in ("one-very-long-word", "a b c")]  # longer in characters, longer in words
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    rc, _, err = run("nemo_rl", "--layout", "nemo-gym", "--group-size", 2, "--data", data, "--out",
                     tmp_path / "o.jsonl", "--tokenizer", "words", "--set", "longest_total_penalty=0.5", "--breakdown")
    assert rc == 0, err
    shaped = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["term.longest_total"] for r in shaped] == [0.0, -0.5]  # three words beat one


@pytest.mark.parametrize("how", ["flag", "config"])
def test_a_tokenizer_with_lengths_said_to_be_characters_is_refused_naming_both(tmp_path, how):
    config = tmp_path / "c.yaml"
    config.write_text("grpo:\n  length_penalty:\n    default:\n      length_type: chars\n")
    rc, out, err = gym(tmp_path, "--tokenizer", "some/tokenizer",
                       *(("--length-type", "chars") if how == "flag" else ("--config", config)))
    said = "--length-type chars" if how == "flag" else "the config's length_type is chars"
    assert (rc, out) == (2, "") and not (tmp_path / "o.jsonl").exists()
    assert err == f"shapec: error: --tokenizer some/tokenizer counts tokens, but {said}; give one of the two\n"


class BatchedWords(Words):
    """A Hugging Face-style tokenizer: called on a list of texts, it counts words; the calls are kept."""

    def __init__(self):
        self.calls = []

    def __call__(self, texts, add_special_tokens=False):
        self.calls.append(list(texts))
        return {"input_ids": [self.encode(t) for t in texts]}


def _answer_rows(texts, prompts):
    return [{"prompt_id": p, "full_result": {"reward": 1.0, "response": {"output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}}}
        for text, p in zip(texts, prompts)]


def test_the_texts_of_a_chunk_are_counted_in_one_tokenizer_call_as_the_drop_in_counts_them(tmp_path, monkeypatch):
    tokenizer = BatchedWords()
    monkeypatch.setattr(commands, "_load_tokenizer", lambda name: tokenizer)
    texts = ("one-very-long-word", "a b c", "wordy-word", "x y z", "", "k l")  # longer in characters, in words
    data = write_jsonl(tmp_path / "in.jsonl", _answer_rows(texts, "ppqqrr"))
    rc, _, err = run("nemo_rl", "--layout", "nemo-gym", "--group-size", 2, "--data", data, "--out",
                     tmp_path / "o.jsonl", "--tokenizer", "words", "--set", "longest_total_penalty=0.5", "--breakdown")
    assert rc == 0, err
    # one call for the chunk; an empty text is 0 tokens, never encoded
    assert tokenizer.calls == [["one-very-long-word", "a b c", "wordy-word", "x y z", "k l"]]
    shaped = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["term.longest_total"] for r in shaped] == [0.0, -0.5, 0.0, -0.5, 0.0, 0.0]


def test_an_unreadable_text_is_its_rows_error_and_leaves_other_groups_shaped(tmp_path):
    rows = _answer_rows(("long answer here", "short", "longer answer", "tiny"), "ppqq")
    rows[2]["full_result"]["response"]["output"][0]["content"][0]["text"] = 7
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    args = ("nemo_rl", "--layout", "nemo-gym", "--group-size", 2, "--data", data, "--out", tmp_path / "o.jsonl",
            "--length-type", "chars", "--set", "longest_total_penalty=0.5")
    rc, out, err = run(*args)
    assert rc != 0 and not (tmp_path / "o.jsonl").exists()
    assert err == "shapec: error: row 3: reasoning: full_result.response.output[0].content[0].text: expected a string, got 7\n"
    rc, out, err = run(*args, "--on-bad-row", "skip")
    assert rc == 0, err
    shaped = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    rejected = [json.loads(line) for line in (tmp_path / "o.rejects.jsonl").read_text().splitlines()]
    assert [r["full_result"]["reward"] for r in shaped] == [0.5, 1.0]  # the good group: its longest answer penalised
    assert [(r["row"], r["record"]["full_result"]["response"]["output"][0]["content"][0]["text"]) for r in rejected] \
        == [(3, 7), (4, "tiny")]
