"""Number and string literals -> values, with a coded diagnostic for each one that has no value.

Strings are decoded here rather than by Python's literal_eval, so the escapes are the
language's own (the ones the formatter writes, and JSON's), and a bad one is a spec error
with a caret, never a Python exception.
"""

from __future__ import annotations

import math
import re

from .source import Diagnostic, Source, Span

_NAMED = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", "0": "\0"}
_HEX = {"x": 2, "u": 4, "U": 8}  # \xHH, \uHHHH (JSON-style surrogate pairs join), \UHHHHHHHH
ESCAPES = "\\\\ \\\" \\' \\n \\r \\t \\b \\f \\0 \\xHH \\uHHHH \\UHHHHHHHH"
_RAW_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f]")  # C0 controls other than tab must be escaped
_SURROGATE_PAIR = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def number(text: str, span: Span) -> tuple[int | float, Diagnostic | None]:
    """The value of a NUMBER token; a literal beyond float64's range is E107, not inf."""
    value = float(text)  # never raises for the grammar's NUMBER; too large gives inf
    if math.isinf(value):
        return 0, Diagnostic("E107", f"number too large (the largest is about {_MAX_TEXT})", span)
    if text.isdigit():
        return int(text), None  # at most 309 digits here, far below int()'s digit limit
    return value, None


_MAX_TEXT = "1.8e308"


def string(src: Source, start: int, end: int) -> tuple[str, list[Diagnostic]]:
    """The value of the STRING token at src.text[start:end] (quotes included)."""
    body_start = start + 1
    body = src.text[body_start:end - 1]
    diags = [Diagnostic("E106", f"control character {_show(m.group())} inside a string; write it as an escape "
                        f"(\\n, \\r, \\x00, ...)", Span(src, body_start + m.start(), body_start + m.end()))
             for m in _RAW_CONTROL.finditer(body)]
    out: list[str] = []
    i = 0
    while i < len(body):
        j = body.find("\\", i)
        if j < 0:
            out.append(body[i:])
            break
        out.append(body[i:j])
        value, width, problem = _escape(body, j)
        if problem:
            diags.append(Diagnostic("E105", problem, Span(src, body_start + j, body_start + j + width)))
        else:
            out.append(value)
        i = j + width
    return "".join(out), diags


def _escape(body: str, j: int) -> tuple[str, int, str | None]:
    """(value, width, problem) of the escape at body[j] (a backslash)."""
    kind = body[j + 1] if j + 1 < len(body) else ""
    if kind in _NAMED:
        return _NAMED[kind], 2, None
    if kind not in _HEX:
        shown = f"'\\{kind}'" if kind.isprintable() and kind else f"'\\' followed by {_show(kind)}"
        return "", 2, f"unknown escape {shown} in a string; the escapes are {ESCAPES}"
    if _SURROGATE_PAIR.match(body, j):
        hi, lo = int(body[j + 2:j + 6], 16), int(body[j + 8:j + 12], 16)
        return chr(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)), 12, None
    digits = _HEX[kind]
    text = body[j + 2:j + 2 + digits]
    if len(text) < digits or any(c not in "0123456789abcdefABCDEF" for c in text):
        return "", 2 + len(text), f"'\\{kind}' needs {digits} hex digits"
    code = int(text, 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        return "", 2 + digits, f"'\\{kind}{text}' is not a Unicode character"
    return chr(code), 2 + digits, None


def _show(ch: str) -> str:
    return f"U+{ord(ch):04X}" if ch else "end of string"
