"""Python help: help(), __doc__ and dir() of compiled modules and shapers."""

from __future__ import annotations

import inspect
import pickle
import pydoc

import pytest

from shapec import compile_str, load
from shapec.runtime.shaper import CompiledShaper

SPEC = '''
"""A module of two shapers and a pipeline."""

shaper brevity_bonus(
  alpha: float in [0, 1] = 0.2,
  budget: tokens > 0 = 4000,
  cap: float < 2 = 1,
  mode: enum(total, answer) = total,
  band_p: band = {100, 200, 0.5},
  strict: bool = false,
  extra: band?,
  need: int,
) requires binary produces unit {
  """Correct rollouts shorter than the budget keep more of their reward."""
  input length: tokens
  input correct: bool
  meta target: band
  meta history: list(passed: bool, length: tokens)
  gate right = reward > 0
  factor shrink = 1 - alpha * clip(length / budget, 0, 1) on right
  metric right_frac = batch.mean(right)
}

shaper names() {
  """A shaper named like a module attribute."""
}

shaper __import__() {
}

pipeline both = brevity_bonus(alpha=0.5, need=3) >> names
'''


def text_of(obj) -> str:
    return pydoc.render_doc(obj, renderer=pydoc.plaintext)


@pytest.fixture(scope="module")
def mod():
    return compile_str(SPEC, backend="interpreter")


def test_help_shows_the_shapers_own_docstring_params_inputs_and_metadata(mod):
    shaper = mod.brevity_bonus
    text = text_of(shaper)
    assert "Correct rollouts shorter than the budget keep more of their reward." in text
    assert "A shaper or pipeline compiled for one backend" not in text.split("Methods inherited")[0]
    body = [line.removeprefix(" |  ") for line in text.splitlines()]
    assert "brevity_bonus: requires binary rewards, produces unit rewards" in body
    for line in (
        "alpha: float in [0, 1] = 0.2",
        "budget: tokens > 0 = 4000",
        "cap: float < 2 = 1",
        "mode: enum(total, answer) = total",
        "band_p: band = {100, 200, 0.5}",
        "strict: bool = false",
        "extra: band? (optional: missing unless given)",
        "need: int (required)",
        "length: tokens, a length in tokens per rollout",
        "correct: bool, a boolean per rollout",
        "target: band, one value per group (may be absent)",
        "history: list(passed: bool, length: tokens), a list of records per group",
        "factor shrink",
        "right_frac",
    ):
        assert f"    {line}" in body, line
    assert shaper.__doc__ == type(shaper).__doc__ and "alpha: float in [0, 1] = 0.2" in shaper.__doc__


def test_help_shows_how_the_shaper_is_called_not_how_it_is_built(mod):
    shaper = mod.brevity_bonus
    sig = inspect.signature(shaper)
    assert list(sig.parameters)[:3] == ["rewards", "group_size", "offsets"]
    header = text_of(shaper).splitlines()[3]
    assert header.removeprefix(" |  ").startswith("shaper brevity_bonus(rewards: 'Any', *, group_size:")
    assert isinstance(shaper, CompiledShaper)


def test_a_pipeline_documents_each_stage_and_the_params_it_binds(mod):
    doc = mod.both.__doc__
    assert doc.startswith("pipeline both = brevity_bonus >> names\n")
    assert "alpha: float in [0, 1] = 0.5 (set by the pipeline)" in doc
    assert "need: int = 3 (set by the pipeline)" in doc
    assert "A shaper named like a module attribute." in doc


def test_stdlib_shapers_document_their_published_params():
    text = text_of(load("short_rl", backend="interpreter").short_rl)
    assert "shaped = reward + alpha * beta on correct rollouts" in text
    assert "tau_acc: float in [0, 1] = 0.05" in text and "acc_max (starts at 0)" in text


def test_dir_lists_shapers_and_pipelines(mod):
    listing = dir(mod)
    assert {"brevity_bonus", "names", "both", "__import__"} <= set(listing)
    assert "filename" in listing and listing == sorted(listing)


def test_names_that_shadow_attributes_stay_reachable_by_key(mod):
    assert callable(mod.names) and mod.names() == ("brevity_bonus", "names", "__import__", "both")
    assert mod["names"].name == "names" and isinstance(mod["names"], CompiledShaper)
    assert mod.__import__.name == "__import__" and mod["__import__"] is mod.__import__
    with pytest.raises(AttributeError):
        mod.__nothing__
    with pytest.raises(AttributeError, match="did you mean 'brevity_bonus'"):
        mod.brevity_bonu
    assert "mod[\"names\"]" in type(mod).__doc__


def test_a_documented_shaper_still_shapes_and_pickles(mod):
    shaper = mod.brevity_bonus
    out = shaper([1.0, 0.0], group_size=2, channels={"length": [1000, 3000], "correct": [1, 0]},
                 params={"need": 1})
    assert out.rewards.tolist() == [1.0 - 0.2 * 0.25, 0.0]
    again = pickle.loads(pickle.dumps(shaper))
    assert type(again).__doc__ == type(shaper).__doc__ and again.name == "brevity_bonus"
