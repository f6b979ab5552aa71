"""How deep an expression may nest, and the guard that keeps deep ones from becoming tracebacks.

MAX_EXPR_DEPTH is the contract between the front end and the backends: every expression the
checker accepts is at most this many operators, calls and conditionals deep (after helper
functions are inlined), and every backend handles that depth. A run of one associative operator
(CHAIN_OPERATORS) is one level, however long: `a + b + c` is one n-ary IR node, evaluated as the
left fold `(a + b) + c` (the order float arithmetic gives), so the IR is no deeper than the
nesting. Deeper specs get E104 with a hint to split them with `let`.
"""

from __future__ import annotations

import contextlib
import sys
import traceback

from .source import Diagnostic, ShapeError, Span

MAX_EXPR_DEPTH = 256
CHAIN_OPERATORS = ("+", "*", "and", "or")
FRAMES_PER_LEVEL = 8  # Python frames the checker may use per level (measured: 4, for nested calls)


def too_deep(span: Span) -> Diagnostic:
    return Diagnostic("E104", f"expression nested too deeply (more than {MAX_EXPR_DEPTH} levels of operators, calls "
                      "and conditionals); split it with `let`", span)


@contextlib.contextmanager
def recursion_guard(fallback: Span):
    """Room on the stack for MAX_EXPR_DEPTH levels, and E104 instead of a RecursionError beyond.

    The span reported is the outermost expression being worked on when the stack ran out
    (found in the traceback), else `fallback`.
    """
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, _stack_depth() + MAX_EXPR_DEPTH * FRAMES_PER_LEVEL + 200))
    try:
        yield
    except RecursionError as err:
        raise ShapeError([too_deep_at(err, fallback)]) from None
    finally:
        sys.setrecursionlimit(old)


def _stack_depth() -> int:
    frame, n = sys._getframe(), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


def too_deep_at(err: RecursionError, fallback: Span) -> Diagnostic:
    """E104 at the statement being checked when the stack ran out (the outermost frame holding
    one), else at the outermost expression or param, else at fallback."""
    from . import ast as A

    stmts = (A.Input, A.Meta, A.Channel, A.Let, A.Gate, A.GateRules, A.Skip, A.Term, A.Factor, A.Clamp, A.State,
             A.Metric, A.Result, A.Drop, A.FnDef)
    others = (A.Param, A.Number, A.String, A.Bool, A.Name, A.GetAttr, A.Call, A.Unary, A.Binary, A.Cond, A.BandLit)
    frames = [frame.f_locals for frame, _ in traceback.walk_tb(err.__traceback__)]
    for kinds in (stmts, others):
        for values in frames:
            for value in values.values():
                if isinstance(value, kinds) and value.span.source is not None:
                    return too_deep(value.span)
    return too_deep(fallback)
