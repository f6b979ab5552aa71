"""Guards: a statement whose `when` has group-level conjuncts runs its reductions and rollout
loop only in the groups where those conjuncts are 1; elsewhere it writes its not-applied values."""

from __future__ import annotations

from ...ir.nodes import GROUP, Node, Op, Step, TypeKind
from ...ir.nodes import walk
from .conditions import always, conjuncts
from .emitter import Scope
from .reductions import ROLLOUT_VALUED


def _reductions(node: Node) -> list[Node]:
    """The group reductions under node."""
    return [n for n in walk(node) if n.op is Op.REDUCE]


class Guards:
    """The part of StageLowering (stage.py) that writes a statement's group-level guard."""

    established: frozenset[int] = frozenset()  # ids of the group-level conjuncts the enclosing guard tested to be 1

    def guarded(self, step: Step, scope: Scope, body, off) -> None:
        """Emit body() only for groups where every group-level conjunct of `when` is 1, else off().

        A conjunct that is 0 or missing makes the whole `when` not 1 (three-valued `and` is
        symmetric), so the statement cannot apply anywhere in the group: its reductions (sorts
        included) are skipped. Values hoisted inside the guard leave the scope with it, and a
        statement whose reductions a metric reads is never guarded.

        A first conjunct without reductions (a gate) is an `if` of its own: the scheduler merges
        the `if`s of the statements under one gate, so that their passes over the group fuse
        (schedule.py). The others are a chain of one flag, each evaluated while those before hold.
        """
        if step.name in self.dead_steps:  # a 0 the params settled (specialize.py)
            off()
            return
        conds = [c for c in group_conjuncts(step.when) if not always(c)]
        if not conds or step.name in self.reduced_steps:
            body()
            return
        o = self.out
        saved = dict(scope.names)
        if not _reductions(conds[0]):
            self.hoist(conds[0], scope, "group")
            o(f"if {self.truth(conds[0], 'group', scope)}:")
            with o.indented():
                self.guard_chain(conds, conds[1:], step, scope, body, off)
            o("else:")
            with o.indented():
                off()
        else:
            self.guard_chain(conds, conds, step, scope, body, off)
        scope.names = saved

    def guard_chain(self, conds: list[Node], chain: list[Node], step: Step, scope: Scope, body, off) -> None:
        """body() where each conjunct of `chain` holds in turn, else off(); `conds` are all of them."""
        o = self.out
        if not chain:
            self.established_body(conds, body)
            return
        guard = self.fresh("guard")  # a name of its own, so the scheduler can move it
        first_reducing = next((c for c in chain if _reductions(c)), None)

        def test(cond: Node) -> None:
            self.hoist(cond, scope, "group")
            if cond is first_reducing:
                self.hoist_passes_beside(cond, step, scope)
            o(f"{guard} = {self.truth(cond, 'group', scope)}")

        test(chain[0])
        for cond in chain[1:]:
            o(f"if {guard}:  " + self.note("the group-level conditions of when, cheapest first, while they hold"))
            with o.indented():
                test(cond)
        o(f"if {guard}:")
        with o.indented():
            self.established_body(conds, body)
        o("else:")
        with o.indented():
            off()

    def established_body(self, conds: list[Node], body) -> None:
        """body() with the conjuncts `conds` known to be 1, so its rollout loop tests only the rest."""
        self.established = frozenset(id(c) for c in conds)
        body()
        self.established = frozenset()

    def hoist_passes_beside(self, cond: Node, step: Step, scope: Scope) -> None:
        """The statement's other running reductions, hoisted beside the first conjunct's.

        When that conjunct's reductions are each one running pass, the statement's other
        one-pass reductions over the same rollouts or items (its argmax target, say) are
        computed with them, so the scheduler fuses them into one loop. They are pure, so
        computing them for a group the conjunct then rules out changes nothing but the time."""
        own = _reductions(cond)
        if not all(self.single_pass(n) for n in own):
            return
        ranges = {n.attr[1] for n in own}
        for part in (step.expr, step.on, step.when):
            for n in _reductions(part) if part is not None else ():
                if self.single_pass(n) and n.attr[1] in ranges:
                    self.hoist(n, scope, "group")

    def single_pass(self, node: Node) -> bool:
        """A reduction written as one running pass that hoists nothing else (no reduction or band under it)."""
        return (node.attr[0] not in ROLLOUT_VALUED and self.is_running(node)
                and not any(n.op in (Op.REDUCE, Op.BREDUCE) or n.ty.kind is TypeKind.BAND
                            for a in node.args for n in walk(a)))


def group_conjuncts(when: Node | None) -> list[Node]:
    """The conjuncts of `when` that hold or fail for a whole group, those without reductions first."""
    if when is None:
        return []
    group = [c for c in conjuncts(when) if c.ty.level <= GROUP and not c.ty.items]
    return sorted(group, key=lambda c: any(n.op in (Op.REDUCE, Op.BREDUCE) for n in walk(c)))
