"""Statement scheduling and loop fusion for the generated per-group code.

The lowering emits each statement of a shaper on its own: a term over a reduction becomes a
selection loop, the reduction and a rollout loop, so a shaper with three terms walks every
group some ten times. This pass reorders the statements of each block of generated code
(only as far as their data dependences allow) so that loops become adjacent, and fuses
adjacent loops over the same range whose iterations are independent of each other's other
iterations. `if`s of one test that no member changes (the statements under one gate) become one
`if`, whose blocks are then fused as a whole. No statement's arithmetic changes, so results stay
bit-identical.

It works on the generated text, not the IR, so it sees exactly what numba will compile:
every name a statement reads or writes, and every index it writes at.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field

INDENT = "    "


@dataclass
class Statement:
    """One top-level statement of a block, with the comment lines above it."""

    lines: list[str]  # the statement's own lines, at the block's indentation
    section: tuple[str, ...]  # the comment block it falls under (emitted once when it changes)
    node: ast.stmt = field(init=False)
    reads: set[str] = field(init=False, default_factory=set)
    writes: set[str] = field(init=False, default_factory=set)
    loop: str | None = field(init=False, default=None)  # "target in iter" for a fusable loop
    branch: str | None = field(init=False, default=None)  # the test of an `if` (with no elif)

    def analyse(self, mutating: dict[str, tuple[int, ...]]) -> None:
        self.node = ast.parse(textwrap.dedent("\n".join(self.lines))).body[0]
        self.reads, self.writes = _effects(self.node, mutating)
        node = self.node
        if (isinstance(node, ast.For) and isinstance(node.target, ast.Name) and not node.orelse
                and not any(isinstance(n, (ast.Break, ast.Continue, ast.For, ast.While)) for b in node.body
                            for n in ast.walk(b))):
            self.loop = f"{node.target.id} in {ast.unparse(node.iter)}"
        if isinstance(node, ast.If) and not any(line.startswith(self.pad + "elif ") for line in self.lines):
            self.branch = ast.unparse(node.test)

    @property
    def pad(self) -> str:
        """The indentation of the statement's first line: its block's."""
        return self.lines[0][:len(self.lines[0]) - len(self.lines[0].lstrip())]

    def blocks(self) -> tuple[list[str], list[str]]:
        """The lines of an `if`'s block and of its else block (none without one)."""
        cut = next((k for k, line in enumerate(self.lines) if line == self.pad + "else:"), len(self.lines))
        return self.lines[1:cut], self.lines[cut + 1:]


def _effects(node: ast.AST, mutating: dict[str, tuple[int, ...]]) -> tuple[set[str], set[str]]:
    """(names read, names written): an element store writes its array; a helper that fills an
    array argument (a sort, a scratch buffer) writes it."""
    reads, writes, updated = set(), set(), set()  # updated: `x += ...`, `a[i] += ...` read and write
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (writes if isinstance(n.ctx, ast.Store) else reads).add(n.id)
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name):
            writes.add(n.value.id)
        elif isinstance(n, ast.AugAssign):
            target = n.target.value if isinstance(n.target, ast.Subscript) else n.target
            if isinstance(target, ast.Name):
                updated.add(target.id)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            for k in mutating.get(n.func.id, ()):
                if k < len(n.args) and isinstance(n.args[k], ast.Name):
                    writes.add(n.args[k].id)
    stores = [n.value for n in ast.walk(node)
              if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)]
    # the array of an element store is written, not read, unless it is read elsewhere too
    store_ids = set(map(id, stores))
    loaded = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
              and id(n) not in store_ids}
    reads -= {array.id for array in stores} - loaded
    for n in ast.walk(node):
        if isinstance(n, ast.For) and isinstance(n.target, ast.Name):  # loop indices live in their loop
            reads.discard(n.target.id)
            writes.discard(n.target.id)
    return reads | updated, writes


def split(lines: list[str], depth: int) -> list[Statement]:
    """The top-level statements of a block whose lines are indented `depth` levels."""
    pad = INDENT * depth
    out: list[Statement] = []
    section: tuple[str, ...] = ()
    comments: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        top = line.startswith(pad) and not line[len(pad)].isspace()
        if top and line.lstrip().startswith("#"):
            comments.append(line[len(pad):])
            continue
        if top and not line.lstrip().startswith(("else:", "elif ")):
            if comments:
                section, comments = tuple(comments), []
            out.append(Statement([line], section))
        else:
            out[-1].lines.append(line)
    return out


def _conflict(a: Statement, b: Statement) -> bool:
    return bool(a.writes & (b.reads | b.writes) or a.reads & b.writes)


def _accesses(stmts: list[Statement], name: str) -> list[str | None]:
    """The index of every access to array `name` in these statements (None: the whole array)."""
    out: list[str | None] = []
    for s in stmts:
        subscripted = set()
        for n in ast.walk(s.node):
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == name:
                out.append(ast.unparse(n.slice))
                subscripted.add(id(n.value))
        for n in ast.walk(s.node):
            if isinstance(n, ast.Name) and n.id == name and id(n) not in subscripted:
                out.append(None)
    return out


def _own_element(index: str | None, var: str) -> str | None:
    """The per-iteration form of an index (`i`, `i - s`, or a constant row then one of those)."""
    if index is None:
        return None
    tree = ast.parse(index, mode="eval").body
    if isinstance(tree, ast.Tuple):
        if not all(isinstance(e, ast.Constant) for e in tree.elts[:-1]):
            return None
        tree = tree.elts[-1]
    text = ast.unparse(tree)
    return text if text in (var, f"{var} - s") else None


def _private(body: list[ast.stmt], name: str) -> bool:
    """Whether every iteration assigns name before reading it (a temporary of the loop body)."""
    for stmt in body:
        mentioned = any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt))
        if not mentioned:
            continue
        return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == name
                and not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt.value)))
    return False


def fusable(first: list[Statement], then: Statement) -> bool:
    """Whether loop `then` can run inside the iterations of the loops `first` (run in that order).

    Iteration i of `then` may only meet what `first` does at iteration i: every array both
    touch (one writing) is indexed at the iteration's own element everywhere; every scalar both
    touch (one writing) is a temporary the reading loop assigns before it reads.
    """
    var = then.node.target.id
    fw = set().union(*(s.writes for s in first))
    fr = set().union(*(s.reads for s in first))
    shared = (fw & (then.reads | then.writes)) | (fr & then.writes)
    for name in shared:
        accesses = _accesses([*first, then], name)
        if any(a is not None for a in accesses):  # an array
            forms = {_own_element(a, var) for a in accesses}
            if None in forms or len(forms) != 1:
                return False
        else:
            if name in fw and not _private(then.node.body, name):
                return False
            if name in then.writes and name in fr and not all(
                    _private(s.node.body, name) for s in first if name in s.reads | s.writes):
                return False
    return True


def _joins(run: list[Statement], then: Statement) -> bool:
    """Whether `then` may join the run: a loop over the same range that may run inside its
    iterations (fusable), or an `if` of the same test that no member changes."""
    if then.loop is not None:
        return then.loop == run[0].loop and fusable(run, then)
    if then.branch is None or then.branch != run[0].branch:
        return False
    test = {n.id for n in ast.walk(run[0].node.test) if isinstance(n, ast.Name)}
    return not any(test & s.writes for s in (*run, then))


def schedule(stmts: list[Statement]) -> list[list[Statement]]:
    """An order of the statements in runs: a run of several is one fused loop, or one `if`.

    Statements that are neither fusable loops nor `if`s go first as soon as their inputs are
    ready (they are what the next loops wait for); then the first ready statement starts a run,
    which takes every later ready statement that may join it (_joins).
    """
    preds = {id(b): {id(a) for a in stmts[:k] if _conflict(a, b)} for k, b in enumerate(stmts)}
    done: set[int] = set()
    remaining = list(stmts)
    runs: list[list[Statement]] = []

    def ready(s: Statement, extra: set[int] = frozenset()) -> bool:
        return preds[id(s)] <= done | extra

    while remaining:
        plain = next((s for s in remaining if s.loop is None and s.branch is None and ready(s)), None)
        if plain is not None:
            runs.append([plain])
            remaining.remove(plain)
            done.add(id(plain))
            continue
        run = [next(s for s in remaining if ready(s))]
        remaining.remove(run[0])
        members = {id(run[0])}
        while True:
            nxt = next((s for s in remaining if ready(s, members) and _joins(run, s)), None)
            if nxt is None:
                break
            run.append(nxt)
            remaining.remove(nxt)
            members.add(id(nxt))
        runs.append(run)
        done |= members
    return runs


def fuse_block(lines: list[str], depth: int, mutating: dict[str, tuple[int, ...]]) -> list[str]:
    """Schedule and fuse the statements of a block, and of the blocks nested in its `if`s."""
    stmts = split(lines, depth)
    for s in stmts:
        if s.lines[0].lstrip().startswith("if "):
            s.lines = _fuse_branches(s.lines, depth, mutating)
        s.analyse(mutating)
    pad = INDENT * depth
    out: list[str] = []
    shown: tuple[str, ...] = ()
    for run in schedule(stmts):
        if len(run) == 1:
            if run[0].section != shown:
                out += [pad + c for c in run[0].section]
                shown = run[0].section
            out += run[0].lines
            continue
        shown = run[-1].section
        if run[0].loop is None:
            out += _fuse_branches(_merged_if(run, pad), depth, mutating)
            continue
        out.append(run[0].lines[0])  # a fused loop: each member's comments go inside it
        inner: tuple[str, ...] = ()
        for s in run:
            if s.section != inner:
                out += [pad + INDENT + c for c in s.section]
                inner = s.section
            out += s.lines[1:]
    return out


def _merged_if(run: list[Statement], pad: str) -> list[str]:
    """The `if`s of one test as one: their blocks in order, then their else blocks in order,
    each member's comments inside."""
    then: list[str] = []
    other: list[str] = []
    for s in run:
        body, orelse = s.blocks()
        then += [pad + INDENT + c for c in s.section] + body
        other += ([pad + INDENT + c for c in s.section] + orelse) if orelse else []
    return [run[0].lines[0], *then, *([pad + "else:", *other] if other else [])]


def _fuse_branches(lines: list[str], depth: int, mutating: dict[str, tuple[int, ...]]) -> list[str]:
    """An `if` statement with each branch's block scheduled and fused."""
    pad = INDENT * depth
    out: list[str] = []
    body: list[str] = []
    for line in lines:
        header = line.startswith(pad) and line.strip() and not line[len(pad)].isspace() \
            and not line.lstrip().startswith("#")
        if header:
            out += fuse_block(body, depth + 1, mutating) if body else []
            out.append(line)
            body = []
        else:
            body.append(line)
    out += fuse_block(body, depth + 1, mutating) if body else []
    return out
