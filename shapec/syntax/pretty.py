"""AST -> canonical .shape source. `parse(pretty(parse(s))) == parse(s)` for every spec."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from . import ast as A

_BINARY_PREC = {
    "or": 2, "and": 3,
    "==": 5, "!=": 5, "<": 5, "<=": 5, ">": 5, ">=": 5,
    "??": 6, "+": 7, "-": 7, "*": 8, "/": 8, "**": 10,
}
_COMPARE = {"==", "!=", "<", "<=", ">", ">="}
_WIDTH = 88
_BODY_WIDTH = _WIDTH - 2  # statements sit two spaces into a shaper


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def string_literal(value: str) -> str:
    """A STRING token that decodes (the parser uses ast.literal_eval) back to exactly `value`:
    backslash, quote, newline, CR and tab escaped by name, any other unprintable char by code."""
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


@lru_cache(maxsize=1)
def _keywords() -> frozenset[str]:
    """The grammar's keywords: a metric named like one is printed quoted."""
    grammar = (Path(__file__).resolve().parent.parent / "grammar" / "shape.lark").read_text(encoding="utf-8")
    return frozenset(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"', grammar))


def _bare_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None and name not in _keywords()


def _prec(e: A.Expr) -> int:
    match e:
        case A.Cond():
            return 1
        case A.Binary(operator=op):
            return _BINARY_PREC[op]
        case A.Unary(operator="not"):
            return 4
        case A.Unary(operator="-"):
            return 9
        case A.GetAttr() | A.Call():
            return 11
        case _:
            return 12


def expr(e: A.Expr, need: int = 0) -> str:
    """Print an expression, adding parentheses only where precedence needs them."""
    text = _expr(e)
    return f"({text})" if _prec(e) < need else text


def _expr(e: A.Expr) -> str:
    match e:
        case A.Number(text=text):
            return text
        case A.String(value=value):
            return string_literal(value)
        case A.Bool(value=value):
            return "true" if value else "false"
        case A.Name(id=name):
            return name
        case A.GetAttr(obj=obj, attr=attr):
            return f"{expr(obj, 11)}.{attr}"
        case A.Call(func=func, args=args):
            return f"{expr(func, 11)}({', '.join(_arg(a) for a in args)})"
        case A.Unary(operator="not", operand=x):
            return f"not {expr(x, 4)}"
        case A.Unary(operator="-", operand=x):
            return f"-{expr(x, 9)}"
        case A.Binary(operator="**", left=left, right=right):
            return f"{expr(left, 11)} ** {expr(right, 9)}"
        case A.Binary(operator=op, left=left, right=right) if op in _COMPARE:
            return f"{expr(left, 6)} {op} {expr(right, 6)}"
        case A.Binary():  # a chain at one precedence, printed without recursion (it may be long)
            p, ops, operands = _chain(e)
            return expr(operands[0], p) + "".join(f" {op} {expr(x, p + 1)}" for op, x in zip(ops, operands[1:]))
        case A.Cond(test=test, then=then, orelse=orelse):  # a conditional in the middle keeps its parentheses
            return f"{expr(test, 2)} ? {expr(then, 2)} : {expr(orelse, 1)}"
        case A.BandLit(a=a, b=b, f=f):
            return "{" + f"{expr(a)}, {expr(b)}, {expr(f)}" + "}"
    raise TypeError(f"pretty: unknown expression node {type(e).__name__}")


def _arg(a: A.Arg) -> str:
    return expr(a.value) if a.where is None else f"{expr(a.value)} where {expr(a.where)}"


def _param(p: A.Param) -> str:
    if p.type.name == "enum":
        text = f"{p.name}: enum({', '.join(p.type.members)})"
    else:
        text = f"{p.name}: {p.type.name}{'?' if p.type.optional else ''}"
    if p.constraint is not None:
        c = p.constraint
        text += f" in [{expr(c.lo)}, {expr(c.hi)}]" if c.operator == "in" else f" {c.operator} {expr(c.lo)}"
    if p.default is not None:
        text += f" = {expr(p.default)}"
    return text


def _chain(e: A.Expr):
    """A left-associative chain at e's precedence: (precedence, operators, operands)."""
    if not isinstance(e, A.Binary) or e.operator in _COMPARE or e.operator == "**":
        return None
    p = _BINARY_PREC[e.operator]
    ops, operands, node = [], [], e
    while isinstance(node, A.Binary) and node.operator not in _COMPARE and node.operator != "**" and _BINARY_PREC[node.operator] == p:
        ops.append(node.operator)
        operands.append(node.right)
        node = node.left
    operands.append(node)
    return p, ops[::-1], operands[::-1]


def _branches(e: A.Cond) -> tuple[str, list[str]]:
    """A chain of conditionals (`a ? b : c ? d : e`): its first branch and the continuations."""
    first, rest, node = f"{expr(e.test, 2)} ? {expr(e.then, 2)}", [], e.orelse
    while isinstance(node, A.Cond):
        rest.append(f": {expr(node.test, 2)} ? {expr(node.then, 2)}")
        node = node.orelse
    return first, rest + [f": {expr(node, 1)}"]


def _wrap(head: str, e: A.Expr, width: int, cont: str = "  ", tail: str = "", need: int = 0) -> list[str]:
    """`head + expr(e, need) + tail`, broken when too wide: inside its parentheses, inside a
    one-argument call, before each branch of a chain of conditionals, or before the operators of
    its loosest chain, packing operands while they fit. An operand too wide for a line of its own
    is broken the same way, one level deeper; a parenthesized one opens on the line before."""
    text = head + expr(e, need) + tail
    if len(text) <= width:
        return [text]
    if _prec(e) < need:
        return _wrap(head + "(", e, width, cont, ")" + tail)
    if isinstance(e, A.Call) and len(e.args) == 1 and e.args[0].where is None:
        return _wrap(f"{head}{expr(e.func, 11)}(", e.args[0].value, width, cont, ")" + tail)
    if isinstance(e, A.Cond):
        first, rest = _branches(e)
        return [head + first, *(cont + piece for piece in rest[:-1]), cont + rest[-1] + tail]
    chain = _chain(e)
    if chain is None:
        return [text]
    p, ops, operands = chain
    lines = _wrap(head, operands[0], width, cont, "", p)
    for op, x in zip(ops, operands[1:]):
        piece = f"{op} {expr(x, p + 1)}"
        if len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        elif _prec(x) < p + 1 and len(lines[-1]) + len(op) + 3 < width:
            lines[-1:] = _wrap(f"{lines[-1]} {op} (", x, width, cont, ")")
        elif len(cont) + len(piece) <= width:
            lines.append(cont + piece)
        else:
            lines += _wrap(f"{cont}{op} ", x, width, cont + "  ", "", p + 1)
    lines[-1] += tail
    return lines


def _applied(head: str, e: A.Expr, on: A.Expr | None, when: A.Expr | None, width: int) -> list[str]:
    """A term, factor or clamp; `on` and `when` move to continuation lines when they do not fit."""
    lines = _wrap(head, e, width)
    for keyword, x in (("on", on), ("when", when)):
        if x is None:
            continue
        clause = _wrap(f"{keyword} ", x, width - 2)
        if len(clause) == 1 and len(lines[-1]) + 1 + len(clause[0]) <= width:
            lines[-1] += " " + clause[0]
        else:
            lines += ["  " + line for line in clause]
    return lines


def _doc(doc: str, indent: str) -> list[str]:
    return [f'{indent}"""{doc}"""']


class _Comments:
    """Source comments handed out in source order: before the node they precede, or at the end
    of the line they share with a node. A comment inside a multi-line node moves in front of the
    next node; none is ever dropped."""

    def __init__(self, module: A.Module):
        self.items = sorted(module.comments, key=lambda c: c.span.start)
        self.i = 0

    def before(self, start: int, indent: str = "") -> list[str]:
        lines = []
        while self.i < len(self.items) and self.items[self.i].span.start < start:
            lines.append(indent + self.items[self.i].text)
            self.i += 1
        return lines

    def ends_line_of(self, node_span, limit: float = float("inf")) -> bool:
        """Whether the next comment sits on the node's last line, after it, and before `limit`
        (the end of the enclosing header or block: a comment past it is not the node's)."""
        if self.i == len(self.items) or node_span.source is None:
            return False
        c = self.items[self.i]
        return (node_span.end <= c.span.start < limit
                and "\n" not in node_span.source.text[node_span.end:c.span.start])

    def trailing(self, node_span, limit: float = float("inf")) -> str:
        if not self.ends_line_of(node_span, limit):
            return ""
        self.i += 1
        return "  " + self.items[self.i - 1].text

    def pending(self, end: int) -> bool:
        return self.i < len(self.items) and self.items[self.i].span.start < end

    def rest(self, indent: str = "") -> list[str]:
        return self.before(float("inf"), indent)


def _blank_before(prev_end: int | None, node, notes: _Comments | None) -> bool:
    """Whether the source had a blank line between the previous node and this one (or its comments)."""
    src = node.span.source
    if prev_end is None or src is None:
        return False
    start = node.span.start
    if notes is not None and notes.pending(start):
        start = notes.items[notes.i].span.start
    gap = src.text[prev_end:start]
    return gap.count("\n") >= 2


def _with_notes(render, node, notes: _Comments | None, indent: str, limit: float = float("inf")) -> list[str]:
    """`render()`'s lines with the node's leading comments in front and its trailing comment
    on the last line (leading ones are taken first: rendering hands out the node's inner ones);
    a trailing comment must start before `limit`, the end of the enclosing header or block."""
    if notes is None:
        return render()
    lead = notes.before(node.span.start, indent)
    lines = render()
    return lead + lines[:-1] + [lines[-1] + notes.trailing(node.span, limit)]


def stmt(s: A.Stmt, notes: _Comments | None = None) -> list[str]:
    match s:
        case A.Input(name=name, type=typ):
            return [f"input {name}: {typ}"]
        case A.Meta(name=name, type=mt):
            if mt.kind == "scalar":
                return [f"meta {name}: {mt.type}"]
            fields = ", ".join(f"{f.name}: {f.type}" for f in mt.fields)
            return [f"meta {name}: list({fields})" if mt.kind == "list" else f"meta {name}: {{{fields}}}"]
        case A.Channel(name=name, expr=e):
            return _wrap(f"channel {name} = ", e, _BODY_WIDTH)
        case A.Let(name=name, expr=e):
            return _wrap(f"let {name} = ", e, _BODY_WIDTH)
        case A.Gate(name=name, expr=e):
            return _wrap(f"gate {name} = ", e, _BODY_WIDTH)
        case A.GateRules(name=name, rules=rules):
            lines = [f"gate {name} {{"]
            for r in rules:
                rule = [f"{r.verdict} {r.reason}"] if r.when is None else _wrap(
                    f"{r.verdict} {r.reason} when ", r.when, _BODY_WIDTH - 2)
                lines += _with_notes(lambda: [f"  {line}" for line in rule], r, notes, "  ", s.span.end - 1)
            return lines + (notes.before(s.span.end, "  ") if notes else []) + ["}"]
        case A.Skip(reason=reason, mode=mode, cond=cond):
            return _wrap(f"skip {reason} {mode} ", cond, _BODY_WIDTH)
        case A.Term(name=name, expr=e, on=on, when=when):
            return _applied(f"term {name} = ", e, on, when, _BODY_WIDTH)
        case A.Factor(name=name, expr=e, on=on, when=when):
            return _applied(f"factor {name} = ", e, on, when, _BODY_WIDTH)
        case A.Clamp(lo=lo, on=on, when=when):
            return _applied("clamp >= ", lo, on, when, _BODY_WIDTH)
        case A.State(name=name, type=typ, init=init, update=update, per_prompt=per_prompt):
            return _wrap(f"state {name}: {typ}{' per prompt' if per_prompt else ''} = {expr(init)} update ", update,
                         _BODY_WIDTH)
        case A.Metric(name=name, expr=e):
            shown = name if _bare_name(name) else string_literal(name)
            return _wrap(f"metric {shown} = ", e, _BODY_WIDTH)
        case A.Result(expr=e):
            return _wrap("result = ", e, _BODY_WIDTH)
        case A.Drop(cond=e):
            return _wrap("drop when ", e, _BODY_WIDTH)
        case A.Ensure(prop=prop, lo=lo, hi=hi, x=x, on=on, over=over, when=when):
            head = f"ensure {prop}" + (f" [{expr(lo)}, {expr(hi)}]" if lo is not None else "")
            head += (f"({x})" if x is not None else "") + (f" on {expr(on)}" if on is not None else "")
            head += f" over {over}" if over is not None else ""
            if when is None:
                return [head]
            clause = _wrap("when ", when, _BODY_WIDTH - 2)
            if len(clause) == 1 and len(head) + 1 + len(clause[0]) <= _BODY_WIDTH:
                return [f"{head} {clause[0]}"]
            return [head] + ["  " + line for line in clause]
    raise TypeError(f"pretty: unknown statement node {type(s).__name__}")


def _body_brace(s: A.Shaper) -> int:
    """Offset of the `{` that opens the shaper's body: the first `{` outside the param list's
    parentheses (band literals sit inside them), skipping strings and comments."""
    text, i, depth = s.span.source.text, s.span.start, 0
    while i < s.span.end:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < s.span.end and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch == "#":
            i = text.find("\n", i)
            if i < 0:
                break
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "{" and depth == 0:
            return i
        i += 1
    return s.span.end


def _shaper(s: A.Shaper, notes: _Comments | None = None) -> list[str]:
    contracts = "".join(f" {c.kind} {c.value}" for c in s.contracts)
    params = [_param(p) for p in s.params]
    one_line = f"shaper {s.name}({', '.join(params)}){contracts} {{"
    # a comment anywhere in the header (among the params or the contracts) needs the
    # one-param-per-line layout to stay in the header, next to its param
    header_end = _body_brace(s) if notes is not None and s.span.source is not None else s.span.start
    commented = notes is not None and notes.pending(header_end)
    if len(one_line) <= _WIDTH and not commented:
        lines = [one_line]
    else:
        lines = [f"shaper {s.name}("]
        for p, text in zip(s.params, params):
            lines += _with_notes(lambda: [f"  {text},"], p, notes, "  ", header_end)
        if notes is not None:
            lines += notes.before(header_end, "  ")  # after the last param, or among the contracts
        lines.append(f"){contracts} {{")
    if s.doc is not None:
        lines += _doc(s.doc, "  ")
    prev_end = None
    for st in s.body:
        if _blank_before(prev_end, st, notes):
            lines.append("")
        lines += [f"  {line}" if line else "" for line in _with_notes(lambda: stmt(st, notes), st, notes, "",
                                                                      s.span.end - 1)]
        prev_end = st.span.end
    if notes is not None:
        lines += notes.before(s.span.end, "  ")
    return lines + ["}"]


def item(it: A.Item, notes: _Comments | None = None) -> list[str]:
    match it:
        case A.Import(target=target, is_path=is_path, alias=alias):
            text = f"import {string_literal(target)}" if is_path else f"import {target}"
            return [text + (f" as {alias}" if alias else "")]
        case A.FnDef(name=name, params=params, body=body):
            return _wrap(f"fn {name}({', '.join(params)}) = ", body, _WIDTH)
        case A.Shaper():
            return _shaper(it, notes)
        case A.Pipeline(name=name, stages=stages):
            parts = []
            for st in stages:
                args = "" if st.args is None else "(" + ", ".join(f"{a.name}={expr(a.value)}" for a in st.args) + ")"
                parts.append(st.ref + args)
            lines = [f"pipeline {name} = {parts[0]}"]
            for part in parts[1:]:
                if len(lines[-1]) + 4 + len(part) <= _WIDTH:
                    lines[-1] += f" >> {part}"
                else:
                    lines.append(f"  >> {part}")
            return lines
    raise TypeError(f"pretty: unknown item node {type(it).__name__}")


def pretty(module: A.Module) -> str:
    """Canonical source for a module: one blank line between items, two-space indents.

    Comments come back in front of the item or statement they preceded (or at the end of the
    line they ended); a blank line the source had before a statement or a comment is kept.
    """
    notes = _Comments(module)
    blocks: list[str] = []
    if module.doc is not None:
        blocks += notes.before(module.span.start)
        blocks.append(f'"""{module.doc}"""')
    prev = None
    for it in module.items:
        # imports and fns sit together; shapers and pipelines get a blank line around them
        blank = type(it) is not type(prev) or isinstance(it, A.Shaper) or _blank_before(
            prev.span.end if prev is not None else None, it, notes)
        text = "\n".join(_with_notes(lambda: item(it, notes), it, notes, ""))
        if blocks and blank:
            blocks.append("")
        blocks.append(text)
        prev = it
    tail = notes.rest()
    if tail:
        blocks += ([""] if blocks else []) + tail
    return "\n".join(blocks) + "\n"
