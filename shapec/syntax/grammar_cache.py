"""The grammar's LALR tables, cached as JSON in the user's cache folder (`<cache>/grammar/`).

Lark's own `cache=True` pickles them into the shared temporary folder under a name anyone can
predict, so another local user could plant the file first, and unpickling runs code. Here the
tables are Lark's serialised form written as JSON (reading it runs nothing), under a name keyed by
the grammar's text, the parser options and lark's version, written atomically (tools/atomic.py),
and read only from a folder and a file this user owns and no one else can write. A file that is
missing, foreign, stale or broken is rebuilt and written again; a folder that cannot be written
only costs the rebuild.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from lark import Lark
from lark import __version__ as LARK_VERSION
from lark.grammar import Rule
from lark.lark import _LOAD_ALLOWED_OPTIONS
from lark.lexer import TerminalDef

FORMAT = 1  # of the JSON below; a change makes every old file stale
PAIRS = "\0pairs"  # marks a dict with non-string keys, which JSON lacks (tuples load as lists, which lark accepts)


def load(grammar: Path, options: dict, runtime: dict) -> Lark:
    """The parser for `grammar`: from the cache when a trusted, current copy is there, else built
    (with `options`, which shape the tables) and cached. `runtime` holds the callbacks and the
    options Lark applies when it loads saved tables (lexer callbacks, postlex, positions)."""
    text = grammar.read_text(encoding="utf-8")
    key = hashlib.sha256(repr((FORMAT, LARK_VERSION, text, sorted(options.items()))).encode()).hexdigest()
    try:
        path = _folder() / f"shape-{key[:32]}.json"
    except RuntimeError:  # no home folder to put the cache in: build every time
        return Lark(text, **options, **runtime)
    cached = _read(path, key, runtime)
    if cached is not None:
        return cached
    parser = Lark(text, **options, **runtime)
    _write(path, key, parser)
    return parser


def _folder() -> Path:
    from ..compiler.cache import configured_dir

    return configured_dir() / "grammar"


def _private(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read(path: Path, key: str, runtime: dict) -> Lark | None:
    try:
        if not _private(os.stat(path.parent)):
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not (stat.S_ISREG(st.st_mode) and _private(st)):
                return None
            saved = json.loads(f.read(), object_hook=_decode)
        if saved.get("key") != key:
            return None
        return Lark._load_from_dict(saved["data"], saved["memo"], **runtime)
    except Exception:  # a broken or hand-edited file is rebuilt, whatever it holds
        return None


def _write(path: Path, key: str, parser: Lark) -> None:
    from ..tools.atomic import write_text
    from ..tools.spec import ToolError

    data, memo = parser.memo_serialize([TerminalDef, Rule])
    data["options"] = {k: v for k, v in data["options"].items() if k not in _LOAD_ALLOWED_OPTIONS}
    try:
        text = json.dumps(_encode({"key": key, "lark": LARK_VERSION, "data": data, "memo": memo}))
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if _private(os.stat(path.parent)):
            write_text(path, text, follow_links=False)  # a planted link never redirects the cache
            os.chmod(path, 0o600)  # whatever the umask, a file others can write is never read back
    except (TypeError, OSError, ToolError):  # no cache this time; the parser built above serves
        return


def _encode(o):
    if isinstance(o, dict):
        if all(isinstance(k, str) and not k.startswith("\0") for k in o):
            return {k: _encode(v) for k, v in o.items()}
        return {PAIRS: [[_encode(k), _encode(v)] for k, v in o.items()]}
    if isinstance(o, (list, tuple)):
        return [_encode(x) for x in o]
    if o is None or isinstance(o, (str, int, float, bool)):
        return o
    raise TypeError(f"cannot cache a {type(o).__name__}")


def _decode(d: dict):
    if PAIRS in d:
        return {k: v for k, v in d[PAIRS]}
    return d
