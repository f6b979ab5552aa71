"""A batch reduction may read group values (a group reduction, `group_size`, metadata, a let or
gate that reads them): the batch step computes them in a pass over the groups. What only the group
step makes (a term, a factor, a gate decided by rules) and a state's update, which runs before any
group is shaped, are still refused with E303 at the operand."""

from __future__ import annotations

import pytest

from shapec import check_source

from .test_messages import HEADER, at, only


@pytest.mark.parametrize("body", [
    "let spread = batch.sum(float(length) * (reward - mean(reward)))",
    "let size = batch.max(group_size where right)",
    "let centred = group_size == 1 ? reward : reward - mean(reward)\n"
    "  let token_mean = batch.sum(float(length) * centred) / float(batch.sum(length))\n"
    "  let deviation = centred - token_mean\n"
    "  let variance = batch.mean(deviation * deviation)\n"
    "  result = deviation / sqrt(variance + 1e-8)",
    "gate any_right = count(right) > 0\n  term t = 0.1 when batch.mean(any_right) > 0.5",
    "meta h: float\n  let known = batch.count(present(h) and right)",
    "let nested = batch.sum(reward - batch.mean(reward - mean(reward)))",
])
def test_a_batch_reduction_reads_group_values(body):
    assert check_source(HEADER + f"  {body}\n}}\n", "spec.shape") == []


@pytest.mark.parametrize("body, operand, why", [
    ("term t = 0.1 on right\n  let x = batch.mean(t * 2)", "t * 2", "term 't'"),
    ("factor f = 0.5 on right\n  let x = batch.mean(f * 2)", "f * 2", "factor 'f'"),
    ("gate g { open some when any(right) }\n  let x = batch.mean(g or right)", "g or right",
     "gate 'g' (decided by rules)"),
])
def test_what_the_group_step_makes_is_refused(body, operand, why):
    text = HEADER + f"  {body}\n}}\n"
    d = only(text)
    assert d.code == "E303"
    assert d.message == (f"{why} is made in the group step, after every batch value is known, so a batch "
                         "reduction cannot read it")
    at(d, text, operand)


def test_a_state_update_still_reads_no_group_values():
    text = HEADER + "  state s: float = 0 update batch.mean(reward - mean(reward))\n  term t = 0 * s\n}\n"
    d = only(text)
    assert d.code == "E303"
    assert d.message == ("state 's' updates before any group is shaped, so its batch reductions may use inputs, "
                         "channels, the reward and params, not group values")
    at(d, text, "reward - mean(reward)")
