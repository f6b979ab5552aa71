"""Source text, spans and diagnostics: one format for every error shapec reports."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ..paths import printable

BOM = "\ufeff"  # a byte-order mark some editors save UTF-8 with: not part of a spec


@dataclass(frozen=True, slots=True)
class Source:
    """A named source text with a lazily built line table."""

    path: str
    text: str
    _starts: list[int] = field(default_factory=list, compare=False, repr=False)

    def line_starts(self) -> list[int]:
        if not self._starts:
            self._starts.append(0)
            self._starts.extend(i + 1 for i, ch in enumerate(self.text) if ch == "\n")
        return self._starts

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        starts = self.line_starts()
        line = bisect.bisect_right(starts, offset) - 1
        return line + 1, offset - starts[line] + 1

    def line_text(self, line: int) -> str:
        starts = self.line_starts()
        start = starts[line - 1]
        end = starts[line] - 1 if line < len(starts) else len(self.text)
        return self.text[start:end]


@dataclass(frozen=True, slots=True)
class Span:
    """Half-open character range [start, end) in a source."""

    source: Source | None
    start: int
    end: int

    @staticmethod
    def none() -> "Span":
        return Span(None, 0, 0)

    def cover(self, other: "Span") -> "Span":
        if self.source is None:
            return other
        if other.source is None:
            return self
        return Span(self.source, min(self.start, other.start), max(self.end, other.end))


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A coded error or warning tied to a span."""

    code: str
    message: str
    span: Span
    severity: str = "error"

    @property
    def path(self) -> str:
        return self.span.source.path if self.span.source else "<unknown>"

    def location(self) -> tuple[int, int, int, int]:
        src = self.span.source
        if src is None:
            return 1, 1, 1, 1
        line, col = src.position(self.span.start)
        end_line, end_col = src.position(max(self.span.start, self.span.end))
        return line, col, end_line, end_col

    def render(self) -> str:
        """`path:line:col: error[CODE]: message`, the source line, and a caret under the span."""
        line, col, end_line, end_col = self.location()
        # a file name or a message quoting one may hold a line break or an escape code: one line, as text
        head = printable(f"{self.path}:{line}:{col}: {self.severity}[{self.code}]: {self.message}")
        src = self.span.source
        if src is None:
            return head
        text = src.line_text(line)
        width = (end_col - col) if end_line == line else len(text) - col + 1
        caret = "".join("\t" if ch == "\t" else " " for ch in text[:col - 1]) + "^" * max(1, width)
        return f"{head}\n{_printable(text)}\n{caret}"

    def to_json(self) -> dict:
        line, col, end_line, end_col = self.location()
        return {
            "path": self.path,
            "line": line,
            "column": col,
            "end_line": end_line,
            "end_column": end_col,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
        }


def _printable(line: str) -> str:
    """The line as shown under a diagnostic: a control character (a stray CR, a NUL) would move
    the cursor or vanish, so each shows as one U+FFFD and the caret stays under its column."""
    return "".join(ch if ch == "\t" or ch.isprintable() else "\ufffd" for ch in line)


class ShapeError(Exception):
    """One or more diagnostics from parsing or checking a spec."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(d.render() for d in self.diagnostics))
