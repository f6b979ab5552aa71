"""JSONL lines as rows: a line is a row (a JSON object) or a BadLine saying why it is not one.

A line that cannot be a row (invalid UTF-8, invalid JSON, an integer longer than Python reads,
nesting deeper than the JSON reader goes, a lone UTF-16 surrogate escape, a key that repeats in an
object, not an object) is kept as a BadLine in its place, so row numbers stay exact and the line
reaches the rejects file as it was.
"""

from __future__ import annotations

import codecs
import json
import math
import re
import sys
from typing import Any

MISSING = object()  # a field a row does not have


class BadLine:
    """A JSONL line that is not a usable row; `field` is where the problem is, when known, and
    `row` the object it parsed to when it did (so its group key is still known)."""

    def __init__(self, text: str, error: str, field: str = "<line>", row: dict | None = None):
        self.text = text
        self.error = error
        self.field = field
        self.row = row


def got(value: Any) -> str:
    """A value as an error message shows it: short, and never a float conversion that fails."""
    if value is MISSING:
        return "nothing (the field is missing)"
    if value is None:
        return "null"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**40:
        return f"an integer of {len(str(abs(value)))} digits"
    try:
        text = json.dumps(value) if isinstance(value, (str, bool, list, dict)) else repr(value)
    except (ValueError, RecursionError):  # a huge int or deep nesting inside a list or object
        text = f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


class _TooLong:
    """An integer literal longer than Python converts (sys.get_int_max_str_digits)."""

    def __init__(self, digits: str):
        self.digits = len(digits.lstrip("-"))


def _int_or_marker(digits: str):
    try:
        return int(digits)
    except ValueError:
        return _TooLong(digits)


def _child(path: str, key: str | int) -> str:
    """The dotted path of an object's key or a list's index under `path` (`a.b`, `a[2]`)."""
    return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else key)


def _find(value: Any, cls: type, path: str = "") -> tuple[str, Any] | None:
    """(dotted path, with list items as [i], and the value) of the first instance of cls in value."""
    if isinstance(value, cls):
        return path or "<line>", value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _find(v, cls, _child(path, k))
        if found is not None:
            return found
    return None


class _RepeatedKey(Exception):
    def __init__(self, key: str, times: int):
        super().__init__(key)
        self.key, self.times = key, times


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """An object's dict, refusing a key that repeats: `{"reward": 1, "reward": 0}` has no one reward."""
    out = dict(pairs)
    if len(out) != len(pairs):
        keys = [k for k, _ in pairs]
        key = next(k for k in keys if keys.count(k) > 1)
        raise _RepeatedKey(key, keys.count(key))
    return out


def _repeated(text: str, err: _RepeatedKey) -> BadLine:
    """The bad line of a key that repeats, with the row for its group: without that key at the top
    (when it is the group key, the group cannot be known, and the groups it may be in are rejected)."""
    try:
        value = json.loads(text, parse_int=_int_or_marker)
    except RecursionError:
        value = None
    row = {k: v for k, v in value.items() if k != err.key} if isinstance(value, dict) else None
    return BadLine(text, f"expected each key once in an object, got {err.key!r} {err.times} times "
                         "(a JSON reader keeps one of them; which one differs between readers)", err.key, row)


def parse_line(raw: bytes, offset: int) -> dict | BadLine | None:
    """One JSONL line (its first byte at `offset` in the file): a row, a BadLine, or None if blank.
    A byte order mark opening the file is not part of row 1 (editors on Windows write one)."""
    if offset == 0 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        shown = raw.decode("utf-8", errors="backslashreplace").strip()
        return BadLine(shown, f"not valid UTF-8 (byte 0x{raw[err.start]:02x} at byte offset {offset + err.start} "
                              "of the file)")
    if not text.strip():
        return None
    text = text.rstrip("\r\n")  # the line as it was, for the rejects file
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys)
    except _RepeatedKey as err:
        return _repeated(text, err)
    except json.JSONDecodeError as err:
        return BadLine(text, f"not valid JSON ({err.msg} at column {err.colno})")
    except RecursionError:
        return BadLine(text, "not readable: arrays or objects nested deeper than the JSON reader goes "
                             f"(about {sys.getrecursionlimit()} levels)")
    except ValueError:  # an integer literal past sys.get_int_max_str_digits()
        limit = sys.get_int_max_str_digits()
        try:
            value = json.loads(text, parse_int=_int_or_marker, object_pairs_hook=_unique_keys)
            where, marker = _find(value, _TooLong)
        except _RepeatedKey as err:
            return _repeated(text, err)
        except RecursionError:
            return BadLine(text, f"not readable: an integer of more than {limit} digits, nested deeply")
        return BadLine(text, f"expected a number, got an integer of {marker.digits} digits (more than the "
                             f"{limit} Python reads)", where, value if isinstance(value, dict) else None)
    if not isinstance(value, dict):
        return BadLine(text, f"expected a JSON object, got {type(value).__name__}")
    if _SURROGATE_ESCAPE.search(text):
        found = _surrogate(value)
        if found is not None:
            where, char = found
            return BadLine(text, f"expected Unicode text, got a lone surrogate \\u{ord(char):04x} (half of a "
                                 "UTF-16 pair, which UTF-8 and Parquet cannot hold)", where, _escaped(value))
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # json.loads decodes a pair to one character


def _surrogate(value: Any, path: str = "") -> tuple[str, str] | None:
    """(dotted path, shown escaped, and the character) of the first lone surrogate in a key or string."""
    if isinstance(value, str):
        bad = next((c for c in value if "\ud800" <= c <= "\udfff"), None)
        return None if bad is None else (_escaped(path) or "<line>", bad)
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        at = _child(path, k)
        found = _surrogate(k, at) if isinstance(k, str) else None
        found = found or _surrogate(v, at)
        if found is not None:
            return found
    return None


def _escaped(value: Any) -> Any:
    """value with every lone surrogate written as its escape (`\\ud800`), so messages, group keys
    and the rejects file can be printed and encoded; the rejects file keeps the line as it was."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


