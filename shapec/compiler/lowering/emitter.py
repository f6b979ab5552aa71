"""What every lowering pass shares: the Emitter that collects lines of generated code, number
literals, the kernel's argument records, the scope of hoisted values and walks over the IR."""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

from ..ir import Node, ShaperIR
from .names import TEMP


class Emitter:
    """Lines of Python with an indentation level.

    A temporary (names.TEMP) waiting in `pending` is written just before the first line that
    reads it, at that line's indentation: an expression can be split anywhere (its parts are
    pure) and each part still lands inside the loop that defines its indices.
    """

    def __init__(self, pending: dict[str, str] | None = None):
        self.lines: list[str] = []
        self.depth = 0
        self.pending = pending if pending is not None else {}

    def __call__(self, line: str = "") -> None:
        if self.pending and line and not line.startswith("#"):
            self.flush(line)
        self.lines.append(("    " * self.depth + line) if line else "")

    def flush(self, line: str) -> None:
        for name in TEMP.findall(line):
            code = self.pending.pop(name, None)
            if code is not None:
                self.flush(code)
                self.lines.append("    " * self.depth + f"{name} = {code}")

    @contextmanager
    def indented(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def lit(x: float) -> str:
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)


@dataclass(frozen=True)
class Arg:
    """One kernel argument: its name in the kernel, where it comes from, and its numba type."""

    name: str
    source: str  # rewards env_rewards offsets components use_components nthreads input meta band list_offsets list_field params (key: the names packed) state
    key: object = None
    numba_type: str = "nt.float64[::1]"


def walk(node: Node):
    """Every node under node, parents first; a stack, not recursion, since expressions can be deep."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.args))


def post_order(root, children, seen):
    """Every node under root after its children, each once: a stack, not recursion, since
    expressions can be deep. A node whose id is in `seen` (which the caller fills as each node is
    yielded) is skipped, with what is under it."""
    stack = [(root, False)]
    while stack:
        n, children_done = stack.pop()
        if id(n) in seen:
            continue
        if not children_done:
            stack.append((n, True))
            stack.extend((c, False) for c in children(n) if id(c) not in seen)
            continue
        yield n


def steps_nodes(ir: ShaperIR):
    """Every expression of a shaper, with the statement it belongs to."""
    for _, node in ir.channels:
        yield node
    for step in (*ir.batch_steps, *ir.skips, *ir.steps):
        for n in (step.expr, step.on, step.when):
            if n is not None:
                yield n
        for _, _, w in step.rules:
            if w is not None:
                yield w
    if ir.result is not None:
        yield ir.result
    for _, node in ir.metrics:
        yield node


class Scope:
    """Reductions and band values already computed where the code is being emitted."""

    def __init__(self, names: dict | None = None):
        self.names: dict[tuple, object] = dict(names or {})
