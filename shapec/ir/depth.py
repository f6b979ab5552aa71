"""The depth limit on the typed IR: helpers are inlined, so a spec whose every expression is
within MAX_EXPR_DEPTH can still build a deeper one (`f(f(f(x)))`); both backends get only IR
within the limit."""

from __future__ import annotations

from ..syntax.depth import MAX_EXPR_DEPTH
from ..syntax.source import Diagnostic
from .nodes import Node, ShaperIR, roots


def deep_expressions(ir: ShaperIR) -> list[Diagnostic]:
    """E104 for each statement of the shaper whose IR is deeper than MAX_EXPR_DEPTH."""
    memo: dict[int, int] = {}
    return [Diagnostic("E104", f"expression nested too deeply once helpers are inlined (more than {MAX_EXPR_DEPTH} "
                       "levels); split it with `let`", root.span)
            for root in roots(ir) if _depth(root, memo) > MAX_EXPR_DEPTH]


def _depth(root: Node, memo: dict[int, int]) -> int:
    """Levels of the tree under root, without recursion (memo is keyed by id: nodes are shared)."""
    stack = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        kids = [a for a in node.args if isinstance(a, Node)]
        if ready:
            memo[id(node)] = 1 + max((memo[id(a)] for a in kids), default=0)
        else:
            stack.append((node, True))
            stack.extend((a, False) for a in kids if id(a) not in memo)
    return memo[id(root)]
