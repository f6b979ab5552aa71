"""What every lowering pass shares: the Emitter that collects lines of generated code, number
literals and the scope of hoisted values."""

from __future__ import annotations

import math
from contextlib import contextmanager

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
        """Writes the temporaries line reads, each after those it reads in turn (a stack, not
        recursion: a long chain is a long run of temporaries, each reading the one before)."""
        stack: list[tuple[str, str | None]] = [(name, None) for name in reversed(TEMP.findall(line))]
        while stack:
            name, code = stack.pop()
            if code is not None:
                self.lines.append("    " * self.depth + f"{name} = {code}")
                continue
            code = self.pending.pop(name, None)
            if code is not None:
                stack.append((name, code))
                stack.extend((inner, None) for inner in reversed(TEMP.findall(code)))

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


class Scope:
    """Reductions and band values already computed where the code is being emitted."""

    def __init__(self, names: dict | None = None):
        self.names: dict[tuple, object] = dict(names or {})
