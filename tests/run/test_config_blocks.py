"""`shapec run --config` with a config the chosen shaper reads nothing from (a block named as a
later NeMo-RL names it, a config for other shapers) is an error naming the blocks the config has
and the closest key the shaper reads, never a run with the defaults in silence."""

from __future__ import annotations

from pathlib import Path

from .test_files_whole_or_untouched import run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "data"


def shape(tmp_path, config_text: str, *args):
    config = tmp_path / "c.yaml"
    config.write_text(config_text)
    rc, out, err = run("nemo_rl", "--data", EXAMPLES / "rollouts.jsonl", "--out", tmp_path / "o.jsonl",
                       "--config", config, *args)
    return rc, out, err.replace(str(config), "c.yaml")


def test_a_grpo_length_bonus_block_is_an_error_naming_length_penalty(tmp_path):
    rc, out, err = shape(tmp_path, "grpo:\n  num_generations_per_prompt: 8\n  length_bonus:\n    default:\n"
                                   "      longest_total_penalty: 0.1\n")
    assert rc == 1 and out == "" and not (tmp_path / "o.jsonl").exists()
    assert err == ("shapec: error: c.yaml: 'nemo_rl_length' reads nothing from this config, which has "
                   "grpo.num_generations_per_prompt, grpo.length_bonus; did you mean 'grpo.length_penalty' for "
                   "'grpo.length_bonus'?\n")


def test_a_config_for_other_shapers_only_is_an_error_naming_what_the_shaper_reads(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("l1_exact:\n  alpha: 0.001\n")
    rc, _, err = run("l1", "--shaper", "l1_max", "--data", EXAMPLES / "rollouts.jsonl", "--out", tmp_path / "o.jsonl",
                     "--config", config)
    assert rc == 1
    assert err == f"shapec: error: {config}: 'l1_max' reads nothing from this config, which has l1_exact; it reads " \
                  "'l1_max'\n"
    rc, _, err = shape(tmp_path, "grpo:\n  policy_loss: {}\n")
    assert rc == 1
    assert err == ("shapec: error: c.yaml: 'nemo_rl_length' reads nothing from this config, which has "
                   "grpo.policy_loss; it reads 'length_penalty', 'grpo.length_penalty'\n")


def test_a_config_the_shaper_reads_runs(tmp_path):
    for text in ("grpo:\n  length_penalty:\n    default:\n      longest_total_penalty: 0.1\n",
                 "length_penalty:\n  longest_total_penalty: 0.1\n",
                 "length_penalty:\n",  # named, with its defaults
                 ""):  # an empty file sets nothing and says so by being empty
        rc, out, err = shape(tmp_path, text)
        assert rc == 0, (text, err)
