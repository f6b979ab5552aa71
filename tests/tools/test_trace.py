"""`explain` writes IR expressions back as spec text: every op as the language spells it."""

from __future__ import annotations

import shapec
from shapec.ir.nodes import Op, walk
from shapec.tools.trace import node_text

SPEC = """shaper s(k: float = 1) requires binary produces real {
  input length: tokens
  input flag: bool
  gate right = reward > 0
  let pick = argmin(length where right and (length > 0 or not flag))
  let m = max(length where right)
  let f = flag ? k : -k ?? 2
  term t = float(m) * f on pick
}
"""


def test_an_expression_is_written_back_with_the_languages_operators():
    ir = shapec.compile_str(SPEC, backend="interpreter").ir("s")
    texts = {node_text(n) for step in ir.steps for n in walk(step.expr)}
    assert "argmin(length where right and ((length > 0) or (not flag)))" in texts
    assert not [t for t in texts if "Op." in t]
    ops = {n.op for step in ir.steps for n in walk(step.expr)}
    assert {Op.AND, Op.OR, Op.NOT, Op.REDUCE, Op.COND} <= ops
