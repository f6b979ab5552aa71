"""Source text -> AST. Lark does the parsing; this module only builds nodes and converts errors."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import threading
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Transformer_NonRecursive, v_args
from lark import __version__ as LARK_VERSION
from lark.exceptions import UnexpectedInput

from .. import files
from . import ast as A
from . import literals
from .depth import CHAIN_OPERATORS, MAX_EXPR_DEPTH, too_deep
from .source import BOM, Diagnostic, ShapeError, Source, Span
from .syntax_errors import SOURCE as GUARD
from .syntax_errors import GluedKeyword, KeywordGuard, glued_error, syntax_error

_comment_sink = threading.local()


def _collect_comment(token: Token) -> Token:
    """Lark skips comments; this lexer callback keeps them for the parse in progress."""
    sink = getattr(_comment_sink, "tokens", None)
    if sink is not None:
        sink.append(token)
    return token


GRAMMAR = Path(__file__).parent.parent / "grammar" / "shape.lark"


@lru_cache(maxsize=1)
def _lark() -> Lark:
    """The LALR parser. Its tables are saved (Lark's own `save`, with the lexer callback and the
    keyword guard by reference) in the private cache folder (files.py), where no other user can
    plant the pickle `Lark.load` reads back, in a file named by the grammar's digest and lark's
    version: a new grammar or lark gets a new file. A file that is not this user's alone is never
    read; a damaged one is built again (0.1 s). Without a usable folder the tables are built each time."""
    text = GRAMMAR.read_text(encoding="utf-8")
    try:
        folder = files.private_folder(files.cache_root() / "grammar")
    except OSError:
        return _built(text)
    digest = hashlib.sha256(f"{text}\0{sorted(LARK_OPTIONS.items())}\0{LARK_VERSION}".encode()).hexdigest()[:32]
    tables = folder / f"shape-{digest}.lark"
    saved = files.read_private(tables)
    if saved is not None:
        try:
            return Lark.load(io.BytesIO(saved))
        except Exception:  # noqa: BLE001 - damaged in any way a pickle can be: built again below
            pass
    parser = _built(text)
    data = io.BytesIO()
    parser.save(data)
    with contextlib.suppress(OSError):  # no tables kept this time: the next process builds them too
        files.write_atomic(tables, data.getvalue())
    return parser


LARK_OPTIONS = {"parser": "lalr", "maybe_placeholders": True, "propagate_positions": True}


def _built(text: str) -> Lark:
    return Lark(text, **LARK_OPTIONS, lexer_callbacks={"COMMENT": _collect_comment}, postlex=KeywordGuard())


def _doc(token: Token) -> str:
    return str(token)[3:-3]


def _nested(method):
    """Records how deep the expression a builder method makes is; one E104 where it passes the limit.

    A run of one associative operator is one level (`a + b + c` is as deep as its deepest operand
    plus one), so depth counts nesting, not length: the checker makes the run one n-ary IR node."""
    @functools.wraps(method)
    def build(self, meta, children):
        node = method(self, meta, children)
        inner = max((self.depth.get(id(c), 0) for c in children if c is not None), default=0)
        depth = inner
        if _extends_chain(node):
            depth = max(self.depth[id(node.left)], self.depth[id(node.right)] + 1)
        elif not isinstance(node, A.Arg):  # an argument is its value, not a level of its own
            depth += 1
        if depth > MAX_EXPR_DEPTH >= inner:
            self.diags.append(too_deep(node.span))
        self.depth[id(node)] = depth
        return node
    return build


def _extends_chain(node) -> bool:
    return (isinstance(node, A.Binary) and node.operator in CHAIN_OPERATORS
            and isinstance(node.left, A.Binary) and node.left.operator == node.operator)


@v_args(meta=True)
class _Builder(Transformer_NonRecursive):
    """Builds AST nodes with spans from Lark's meta information, bottom up without recursion
    (a 100,000-term sum is as safe as a short one), collecting literal and depth errors."""

    def __init__(self, src: Source):
        super().__init__()
        self.src = src
        self.diags: list[Diagnostic] = []
        self.depth: dict[int, int] = {}  # id(expression node) -> levels; every node stays alive while building

    def _string(self, tok: Token) -> str:
        value, diags = literals.string(self.src, tok.start_pos, tok.end_pos)
        self.diags.extend(diags)
        return value

    def _span(self, meta) -> Span:
        if getattr(meta, "empty", True):
            return Span(self.src, 0, 0)
        return Span(self.src, meta.start_pos, meta.end_pos)

    def _tok_span(self, tok: Token) -> Span:
        return Span(self.src, tok.start_pos, tok.end_pos)

    # module level
    def start(self, meta, children):
        doc = None
        items = list(children)
        if items and isinstance(items[0], tuple) and items[0][0] == "doc":
            doc = items.pop(0)[1]
        return A.Module(doc, tuple(items), self._span(meta))

    def docstring(self, meta, children):
        return ("doc", _doc(children[0]))

    def dotted(self, meta, children):
        return ".".join(str(c) for c in children)

    def import_(self, meta, children):
        target, alias = children[0], children[1]
        if isinstance(target, Token) and target.type == "STRING":
            return A.Import(self._string(target), True, str(alias) if alias else None, self._span(meta))
        return A.Import(str(target), False, str(alias) if alias else None, self._span(meta))

    def fn_def(self, meta, children):
        name, *rest = children
        body = rest[-1]
        params = tuple(str(p) for p in rest[:-1] if p is not None)
        return A.FnDef(str(name), params, body, self._span(meta))

    def shaper(self, meta, children):
        name = str(children[0])
        params, contracts, body, doc = [], [], [], None
        for c in children[1:]:
            if c is None:
                continue
            if isinstance(c, A.Param):
                params.append(c)
            elif isinstance(c, A.Contract):
                contracts.append(c)
            elif isinstance(c, tuple) and c[0] == "doc":
                doc = c[1]
            else:
                body.append(c)
        return A.Shaper(name, tuple(params), tuple(contracts), doc, tuple(body), self._span(meta))

    def contract(self, meta, children):
        kind, value = children
        return A.Contract(str(kind), str(value), self._span(meta))

    def param(self, meta, children):
        name, ptype, constraint, default = children
        return A.Param(str(name), ptype, constraint, default, self._span(meta))

    def ptype_named(self, meta, children):
        name, optional = children
        return A.PType(str(name), optional is not None, (), self._span(meta))

    def ptype_enum(self, meta, children):
        return A.PType("enum", False, tuple(str(c) for c in children), self._span(meta))

    def bound(self, meta, children):
        op, value = children
        return A.Constraint(str(op), value, None, self._span(meta))

    def range_(self, meta, children):
        lo, hi = children
        return A.Constraint("in", lo, hi, self._span(meta))

    # statements
    def input_decl(self, meta, children):
        return A.Input(str(children[0]), str(children[1]), self._span(meta))

    def meta_decl(self, meta, children):
        return A.Meta(str(children[0]), children[1], self._span(meta))

    def mtype_scalar(self, meta, children):
        return A.MetaType("scalar", str(children[0]), (), self._span(meta))

    def mtype_list(self, meta, children):
        return A.MetaType("list", "", tuple(children), self._span(meta))

    def mtype_record(self, meta, children):
        return A.MetaType("record", "", tuple(children), self._span(meta))

    def field(self, meta, children):
        return A.Field(str(children[0]), str(children[1]), self._span(meta))

    def channel(self, meta, children):
        return A.Channel(str(children[0]), children[1], self._span(meta))

    def let(self, meta, children):
        return A.Let(str(children[0]), children[1], self._span(meta))

    def gate(self, meta, children):
        return A.Gate(str(children[0]), children[1], self._span(meta))

    def gate_rules(self, meta, children):
        return A.GateRules(str(children[0]), tuple(children[1:]), self._span(meta))

    def gate_rule(self, meta, children):
        verdict, reason, when = children
        return A.GateRule(str(verdict), str(reason), when, self._span(meta))

    def skip(self, meta, children):
        return A.Skip(str(children[0]), str(children[1]), children[2], self._span(meta))

    def on_clause(self, meta, children):
        return ("on", children[0])

    def when_clause(self, meta, children):
        return ("when", children[0])

    def _clauses(self, rest):
        found = {"on": None, "when": None}
        for c in rest:
            if c is not None:
                found[c[0]] = c[1]
        return found["on"], found["when"]

    def term(self, meta, children):
        on, when = self._clauses(children[2:])
        return A.Term(str(children[0]), children[1], on, when, self._span(meta))

    def factor(self, meta, children):
        on, when = self._clauses(children[2:])
        return A.Factor(str(children[0]), children[1], on, when, self._span(meta))

    def clamp(self, meta, children):
        on, when = self._clauses(children[1:])
        return A.Clamp(children[0], on, when, self._span(meta))

    def state(self, meta, children):
        name, typ, per_prompt, init, update = children
        return A.State(str(name), str(typ), init, update, self._span(meta), per_prompt is not None)

    def per_prompt(self, meta, children):
        return True

    def metric(self, meta, children):
        name = children[0]
        text = self._string(name) if name.type == "STRING" else str(name)
        return A.Metric(text, children[1], self._span(meta))

    def result(self, meta, children):
        return A.Result(children[0], self._span(meta))

    def drop(self, meta, children):
        return A.Drop(children[0], self._span(meta))

    def ensure(self, meta, children):
        prop, shape, on, over, when = children
        lo, hi = shape if isinstance(shape, list) else (None, None)
        x = shape if isinstance(shape, str) else None
        return A.Ensure(str(prop), lo, hi, x, on and on[1], over, when and when[1], self._span(meta))

    def ensure_range(self, meta, children):
        return list(children)

    def ensure_arg(self, meta, children):
        return str(children[0])

    def ensure_over(self, meta, children):
        return str(children[0])

    def pipeline(self, meta, children):
        return A.Pipeline(str(children[0]), tuple(children[1:]), self._span(meta))

    def stage(self, meta, children):
        ref, *args = children
        if args == [None] or not args:
            return A.Stage(ref, None, self._span(meta))
        return A.Stage(ref, tuple(a for a in args if a is not None), self._span(meta))

    def kwarg(self, meta, children):
        return A.KwArg(str(children[0]), children[1], self._span(meta))

    # expressions
    @_nested
    def cond(self, meta, children):
        return A.Cond(*children, span=self._span(meta))

    @_nested
    def or_(self, meta, children):
        return A.Binary("or", children[0], children[1], self._span(meta))

    @_nested
    def and_(self, meta, children):
        return A.Binary("and", children[0], children[1], self._span(meta))

    @_nested
    def not_(self, meta, children):
        return A.Unary("not", children[0], self._span(meta))

    @_nested
    def compare(self, meta, children):
        left, op, right = children
        return A.Binary(str(op), left, right, self._span(meta))

    @_nested
    def fallback(self, meta, children):
        return A.Binary("??", children[0], children[1], self._span(meta))

    @_nested
    def binop(self, meta, children):
        left, op, right = children
        return A.Binary(str(op), left, right, self._span(meta))

    @_nested
    def neg(self, meta, children):
        return A.Unary("-", children[0], self._span(meta))

    @_nested
    def pow(self, meta, children):
        return A.Binary("**", children[0], children[1], self._span(meta))

    @_nested
    def getattr(self, meta, children):
        return A.GetAttr(children[0], str(children[1]), self._span(meta))

    @_nested
    def call(self, meta, children):
        func, *args = children
        return A.Call(func, tuple(a for a in args if a is not None), self._span(meta))

    @_nested
    def arg(self, meta, children):
        return A.Arg(children[0], children[1], self._span(meta))

    @_nested
    def number(self, meta, children):
        text = str(children[0])
        value, problem = literals.number(text, self._span(meta))
        if problem:
            self.diags.append(problem)
        return A.Number(value, text, self._span(meta))

    @_nested
    def string(self, meta, children):
        return A.String(self._string(children[0]), self._span(meta))

    @_nested
    def true(self, meta, children):
        return A.Bool(True, self._span(meta))

    @_nested
    def false(self, meta, children):
        return A.Bool(False, self._span(meta))

    @_nested
    def name(self, meta, children):
        return A.Name(str(children[0]), self._span(meta))

    @_nested
    def band_lit(self, meta, children):
        return A.BandLit(*children, span=self._span(meta))


def parse(text: str, path: str = "<string>") -> A.Module:
    """Parse source text into a Module, raising ShapeError with a coded diagnostic.

    A leading byte-order mark (what some editors save UTF-8 with, and Python accepts) is not part
    of the spec: positions count from after it, as an editor shows them."""
    text = text.removeprefix(BOM)
    src = Source(path, text)
    _comment_sink.tokens = tokens = []
    GUARD.text = text
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as err:
        raise ShapeError([syntax_error(_lark(), src, err)]) from None
    except GluedKeyword as err:
        raise ShapeError([glued_error(_lark(), src, err.token)]) from None
    finally:
        _comment_sink.tokens = None
        GUARD.text = ""
    builder = _Builder(src)
    module = builder.transform(tree)
    if builder.diags:
        raise ShapeError(sorted(builder.diags, key=lambda d: d.span.start))
    comments = tuple(A.Comment(str(t).rstrip(), Span(src, t.start_pos, t.end_pos)) for t in tokens)
    return dataclasses.replace(module, comments=comments)
