"""Sinking: a let that only guarded statements read is computed only where one of them can apply.

`nemo_rl.length_penalty` sorts every group's rewards for `let top`, and walks every group's
profile for `let spread`, yet with the algorithms that read them off no group ever needs them.
A let (or a gate that writes no gate code) is *sunk* when every statement that reads it is a
guarded term, clamp or factor (statements.py: `if guard<k>:`), or another sunk let. It stays
where it is, written once, but under a condition: the `or`, over the guarded statements that
read it (through sunk lets too), of the `and` of each one's group-level conjuncts that can be
decided there already: reduction-free ones over params, metadata and lets and gates before it
(not sunk). Where a reader's guard holds at the reader, those conjuncts held here too (they read
only values fixed before the let), so the let was computed; where none can hold, nothing reads
it. A reader with no such conjunct keeps its let unconditional. Lets have no effects, so
computing one only where it is read changes no output; its reductions stay inside the `if`. A
sunk let nothing reads (a batch reduction inlines what it reads) is not computed at all.
A let a metric, a skip, a gate-rule block, the result, a drop condition, a per-prompt state's
update or an unguarded statement reads, or a gate with gate codes, is not sunk.
"""

from __future__ import annotations

from ...ir.nodes import CONST, Node, Op, ShaperIR, Step, StepKind, walk
from .conditions import always
from .emitter import Scope
from .guards import group_conjuncts


def _var_refs(nodes) -> list[str]:
    """The lets, gates and other vars read under these expressions, in first-read order."""
    out: list[str] = []
    for node in nodes:
        if node is None:
            continue
        for n in walk(node):
            if n.op is Op.REF and n.attr[0] == "var" and n.attr[1] not in out:
                out.append(n.attr[1])
    return out


def plan_sinking(ir: ShaperIR, held: set[str], dead: set[str], reduced: set[str]) -> dict[str, list[list[Node]]]:
    """Let name -> the clauses (lists of conjuncts, or-ed) under which it is computed.

    `held`: the names that must stay where they are whatever reads them (a metric reads them, or
    they are a gate with codes); `dead`: the statements that apply nowhere; `reduced`: the
    statements a metric reads a reduction of (they run for every group). Both are planned in
    groups.plan_statements."""
    position = {s.name: k for k, s in enumerate(ir.steps)}
    before_groups = {s.name for s in ir.batch_steps} | {name for name, _ in ir.channels}
    candidates = {s.name for s in ir.steps if s.kind in (StepKind.LET, StepKind.GATE) and s.expr is not None
                  and s.name not in held and not (s.expr.ty.level == CONST and not s.expr.ty.items)}
    readers: dict[str, list[Step]] = {name: [] for name in candidates}
    blocked: set[str] = set()
    for step in ir.steps:
        for name in _var_refs((step.expr, step.on, step.when, *(w for _, _, w in step.rules))):
            if name in candidates:
                readers[name].append(step)
                if step.name not in candidates and not _guarded(step, dead, reduced):
                    blocked.add(name)
    others = (*(s.expr for s in (*ir.skips, *ir.batch_steps)), ir.result, ir.drop, *(m for _, m in ir.metrics),
              *(update for _, _, update in ir.prompt_states))
    blocked.update(n for n in _var_refs(others) if n in candidates)

    def decidable(cond: Node, at: int, sunk: set[str]) -> bool:
        """Whether a conjunct has its value at statement `at` already: no reduction, and every let
        or gate it reads comes before and is computed unconditionally."""
        if any(n.op in (Op.REDUCE, Op.BREDUCE) for n in walk(cond)):
            return False
        return all(name in before_groups or (name not in sunk and position.get(name, at) < at)
                   for name in _var_refs((cond,)))

    def clauses_of(name: str, sunk: set[str]) -> list[list[Node]] | None:
        """One clause per guarded statement that reads the let (directly or through sunk lets):
        its conjuncts decidable at the let; None when a reader has none."""
        at = position[name]
        clauses: list[list[Node]] = []
        stack, seen = [name], {name}
        while stack:
            for reader in readers[stack.pop()]:
                if reader.name in sunk:
                    if reader.name not in seen:
                        seen.add(reader.name)
                        stack.append(reader.name)
                    continue
                if reader.name in dead:
                    continue  # applies nowhere: it reads nothing (Guards.guarded)
                conds = [c for c in group_conjuncts(reader.when) if not always(c) and decidable(c, at, sunk)]
                if not conds:
                    return None
                if conds not in clauses:
                    clauses.append(conds)
        return clauses

    while True:  # a let read by a let that stays put stays put too; so does one no clause can decide
        changed = False
        for name in candidates - blocked:
            if any(r.name in blocked for r in readers[name]):
                blocked.add(name)
                changed = True
        sunk: dict[str, list[list[Node]]] = {}
        for name in candidates - blocked:
            clauses = clauses_of(name, candidates - blocked)
            if clauses is None:
                blocked.add(name)
                changed = True
            else:
                sunk[name] = clauses
        if not changed:
            return sunk


def _guarded(step: Step, dead: set[str], reduced: set[str]) -> bool:
    """Whether a term, clamp or factor runs its body under a group-level guard (Guards.guarded)."""
    if step.kind not in (StepKind.TERM, StepKind.CLAMP, StepKind.FACTOR):
        return False
    if step.name in dead:
        return True
    return bool(group_conjuncts(step.when)) and step.name not in reduced


class Sinking:
    """The part of StageLowering (stage.py) that writes a sunk let under its readers' clauses."""

    def emit_sunk_let(self, step: Step, scope: Scope) -> None:
        """The let, under the `or` of its readers' clauses; its own reductions stay inside."""
        o = self.out
        clauses = self.sunk[step.name]
        if not clauses:  # no statement reads it (a batch reduction has its own copy of what it reads)
            o(self.note(f"{step.kind.value} {self.var(step.name)}: read nowhere, not computed"))
            return
        for cond in {id(c): c for clause in clauses for c in clause}.values():
            self.hoist(cond, scope, "group")  # reduction-free: at most a band's parts
        need = " or ".join("(" + " and ".join(self.truth(c, "group", scope) for c in clause) + ")"
                           for clause in clauses)
        o(f"if {need}:  " + self.note(f"{step.kind.value} {self.var(step.name)}: only where a statement reading it can apply"))
        with o.indented():
            self.let_value(step, Scope(scope.names))
