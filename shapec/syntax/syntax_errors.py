"""Lark errors -> coded diagnostics, with the closest keyword where a word was misspelt."""

from __future__ import annotations

import difflib
import re
import threading
from functools import lru_cache

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.lark import PostLex

from .source import Diagnostic, Source, Span

_TERMINAL_NAMES = {
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": "a string",
    "LONG_STRING": "a docstring",
    "LPAR": "'('",
    "RPAR": "')'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "COLON": "':'",
    "EQUAL": "'='",
    "DOT": "'.'",
    "CMP_OP": "a comparison",
    "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*' or '/'",
    "MINUS": "'-'",
    "QMARK": "'?'",
    "OPTIONAL": "'?'",
    "GATE_VERDICT": "'open' or 'closed'",
    "SKIP_MODE": "'when' or 'unless'",
    "REQUIRES": "'requires'",
    "PRODUCES": "'produces'",
}
_WORD = re.compile(r"[A-Za-z0-9_]")

# What people bring from Python and C, and how the language writes it.
_FOREIGN_CHARACTERS = {
    "&": "write `and`",
    "|": "write `or`",
    "!": "write `not` (`!=` is not-equal)",
    "^": "write `**` for a power",
    ";": "a statement ends at the end of its line",
    "'": 'strings are written in double quotes',
}
_FOREIGN_WORDS = {
    "if": "a conditional is written `condition ? a : b`",
    "else": "a conditional is written `condition ? a : b`",
    "def": "a helper function is `fn name(x) = expr`; a shaper is `shaper name(...) { ... }`",
    "return": "a helper function is `fn name(x) = expr`, with no `return`",
}


class GluedKeyword(Exception):
    """A keyword the lexer cut off the front of a longer word (`onn` read as `on` + `n`)."""

    def __init__(self, token: Token):
        super().__init__(token.value)
        self.token = token


SOURCE = threading.local()  # .text: the spec this thread is parsing, which KeywordGuard reads


class KeywordGuard(PostLex):
    """Where a name cannot stand, Lark's contextual lexer matches a keyword at the start of a longer
    word, so `onn right` would read as `on n right` and `a andb` as `a and b`. This pass refuses a
    keyword that runs straight into a letter, digit or underscore of the same word. It keeps no state
    of its own (the text is SOURCE's), so it is saved with the parser's tables by reference."""

    def process(self, stream):
        text = getattr(SOURCE, "text", "")
        for tok in stream:
            if tok.type != "NAME" and tok.value.isidentifier() and _WORD.match(text, tok.end_pos or 0):
                raise GluedKeyword(tok)
            yield tok


def _pattern_words(pattern) -> tuple[str, ...]:
    """The keywords a terminal matches: 'on', or each word of an alternation like (?:open|closed)."""
    if pattern.type == "str":
        return (pattern.value,) if pattern.value.isidentifier() else ()
    inner = re.fullmatch(r"\(\?:([A-Za-z_|]+)\)", pattern.value)
    return tuple(w for w in inner.group(1).split("|") if w.isidentifier()) if inner else ()


@lru_cache(maxsize=1)
def _grammar_words(lark: Lark) -> tuple[dict[str, tuple[str, ...]], frozenset[str]]:
    """Keyword words by terminal, and the keywords that start a statement or a top-level item."""
    words = {t.name: _pattern_words(t.pattern) for t in lark.terminals}
    words = {k: v for k, v in words.items() if v and k != "NAME"}
    rules: dict[str, list] = {}
    for r in lark.rules:
        rules.setdefault(r.origin.name, []).append(r.expansion)
    starters = set()
    for holder in ("_stmt", "_item"):
        for (kind,) in rules.get(holder, ()):
            for expansion in rules.get(kind.name, ()):
                starters.update(words.get(expansion[0].name, ()))
    return words, frozenset(starters)


def _describe(lark: Lark, name: str) -> str:
    if name in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[name]
    if name == "$END":
        return "end of input"
    try:
        pattern = lark.get_terminal(name).pattern
    except KeyError:
        return name.lower()
    return f"'{pattern.value}'" if pattern.type == "str" else name.lower()


def _expected(lark: Lark, names: set[str]) -> str:
    words = sorted({_describe(lark, n) for n in names})
    if len(words) > 6:
        words = words[:6] + ["..."]
    return " or ".join(words)


def _misspelt(lark: Lark, src: Source, word: str, start: int, allowed: set[str] | None) -> Diagnostic | None:
    """'unknown statement 'fator'; did you mean 'factor'?' when a word is close to a keyword that may
    stand here (any keyword, when the parser's state is not known); the caret on the whole word."""
    words, starters = _grammar_words(lark)
    options = sorted({w for name, ws in words.items() if allowed is None or name in allowed for w in ws})
    close = difflib.get_close_matches(word, options, n=1)
    if not close:
        return None
    what = "unknown statement" if close[0] in starters else "unexpected"
    return Diagnostic("E101", f"{what} {word!r}; did you mean {close[0]!r}?", Span(src, start, start + len(word)))


def glued_error(lark: Lark, src: Source, tok: Token) -> Diagnostic:
    start = tok.start_pos or 0
    end = start
    while end < len(src.text) and _WORD.match(src.text, end):
        end += 1
    word = src.text[start:end]
    found = _misspelt(lark, src, word, start, None)
    if found is not None:
        return found
    return Diagnostic("E101", f"unexpected {word!r}; did you mean {tok.value!r}?", Span(src, start, end))


def syntax_error(lark: Lark, src: Source, err: UnexpectedInput) -> Diagnostic:
    """One function turns every Lark error into a coded diagnostic."""
    if isinstance(err, UnexpectedEOF):
        end = len(src.text)
        return Diagnostic("E103", "input ended unexpectedly", Span(src, end, end))
    if isinstance(err, UnexpectedToken):
        tok = err.token
        if tok.type == "$END":
            end = len(src.text)
            return Diagnostic("E103", f"input ended unexpectedly; expected {_expected(lark, err.expected)}",
                              Span(src, end, end))
        start = tok.start_pos if tok.start_pos is not None else 0
        if tok.type == "NAME" and tok.value in _FOREIGN_WORDS:
            return Diagnostic("E101", f"unexpected {tok.value!r}; {_FOREIGN_WORDS[tok.value]}",
                              Span(src, start, start + len(tok.value)))
        if tok.type == "NAME":
            found = _misspelt(lark, src, tok.value, start, set(err.expected))
            if found is not None:
                return found
        hint = ""
        if tok.type == "EQUAL" and err.expected == {"COLON"}:
            hint = "; a param needs a type, as in `coeff: float = 0.1`"
        return Diagnostic(
            "E101",
            f"unexpected {tok.value!r}; expected {_expected(lark, err.expected)}{hint}",
            Span(src, start, start + max(1, len(tok.value))),
        )
    if isinstance(err, UnexpectedCharacters):
        ch = src.text[err.pos_in_stream] if err.pos_in_stream < len(src.text) else ""
        message = f"unexpected character {ch!r}"
        if ch in _FOREIGN_CHARACTERS:
            message += f"; {_FOREIGN_CHARACTERS[ch]}"
        elif ch.isdigit():
            message += "; numbers are written with the digits 0-9"
        if ch == '"':
            message = "unterminated string: a string ends on the line it starts (write a line break as \\n)"
        return Diagnostic("E102", message, Span(src, err.pos_in_stream, err.pos_in_stream + 1))
    return Diagnostic("E101", str(err).splitlines()[0], Span(src, 0, 1))
