"""Sinking: a let or gate that only guarded statements read is computed where one first needs it.

`nemo_rl.length_penalty` sorts every group's rewards for `let top`, and walks every group's
profile for `let spread`, yet with the algorithms that read them off no group ever needs them.
A let (or a gate that writes no gate code) is *sunk* when every statement that reads it is a
guarded term, clamp or factor (statements.py: `if guard<k>:`), or another sunk let: it is then
computed inside the guard of each reader, before the reader's own reductions, under a per-group
flag (`done<k>`) so a second reader in the same group reuses it. Lets have no effects and read
only values fixed before them (earlier lets, finished terms), so computing one later, or not at
all, changes no output: what is computed is the same value from the same inputs. A let a metric,
a skip, a gate-rule block, the result or an unguarded statement reads stays where it is.
"""

from __future__ import annotations

from ..ir import CONST, Step
from .emitter import Scope, walk


def _var_refs(nodes) -> list[str]:
    """The lets, gates and other vars read under these expressions, in first-read order."""
    out: list[str] = []
    for node in nodes:
        if node is None:
            continue
        for n in walk(node):
            if n.op == "ref" and n.attr[0] == "var" and n.attr[1] not in out:
                out.append(n.attr[1])
    return out


class Sinking:
    """The part of StageLowering (stage.py) that computes lets only where a guarded statement reads them."""

    def plan_sinking(self) -> None:
        """Which lets and gates are sunk (self.sunk: name -> its step)."""
        ir = self.ir
        candidates = {s.name: s for s in ir.steps if s.kind in ("let", "gate") and s.expr is not None
                      and s.name not in self.metric_vars and s.name not in self.gate_index
                      and not (s.expr.ty.level == CONST and not s.expr.ty.items)}
        readers: dict[str, set[str]] = {name: set() for name in candidates}  # let -> the sunk lets reading it
        blocked: set[str] = set()
        for step in ir.steps:
            reads = _var_refs((step.expr, step.on, step.when, *(w for _, _, w in step.rules)))
            for name in reads:
                if name not in candidates:
                    continue
                if step.name in candidates:
                    readers[name].add(step.name)
                elif not self.is_guarded(step):
                    blocked.add(name)
        others = (*(s.expr for s in (*ir.skips, *ir.batch_steps)), ir.result, *(m for _, m in ir.metrics))
        blocked.update(n for n in _var_refs(others) if n in candidates)
        changed = True
        while changed:  # a let read by a let that stays put stays put too
            changed = False
            for name, by in readers.items():
                if name not in blocked and by & blocked:
                    blocked.add(name)
                    changed = True
        self.sunk: dict[str, Step] = {name: s for name, s in candidates.items() if name not in blocked}
        self.sunk_flags: dict[str, str] = {name: self.fresh("done") for name in self.sunk}

    def is_guarded(self, step: Step) -> bool:
        """Whether a term, clamp or factor runs its body under a group-level guard (statements.guarded)."""
        if step.kind not in ("term", "clamp", "factor") or not self.group_conjuncts(step.when):
            return False
        return not any(self.key(n) in self.stored for x in (step.expr, step.on, step.when) if x is not None
                       for n in walk(x))

    def emit_sunk(self, nodes, scope: Scope, emitted: set[str]) -> None:
        """Compute the sunk lets these expressions read (theirs first), each at most once a group;
        `emitted` holds those already written in this guard, which need no second block."""
        for name in _var_refs(nodes):
            if name in self.sunk and name not in emitted:
                self.emit_sunk_let(self.sunk[name], scope, emitted)

    def emit_sunk_let(self, step: Step, scope: Scope, emitted: set[str]) -> None:
        self.emit_sunk((step.expr,), scope, emitted)
        emitted.add(step.name)
        o = self.out
        flag = self.sunk_flags[step.name]
        o(f"if not {flag}:  " + self.note(f"{step.kind} {self.var(step.name)}, first needed here"))
        with o.indented():
            # its reductions stay inside: another reader may find the flag set and skip this block
            self.let_value(step, Scope(scope.names))
            o(f"{flag} = True")

    def sunk_flag_lines(self) -> list[str]:
        return [f"{flag} = False" for flag in self.sunk_flags.values()]
