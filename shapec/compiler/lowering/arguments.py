"""Argument planning: the kernel's struct-of-arrays arguments, the names of its values, and where
each let or gate lives (a scalar, a row per group, a scratch array per rollout or item)."""

from __future__ import annotations

from ..arguments import plan_arguments
from ...ir.nodes import GROUP, PARAM, ROLLOUT, Node, Step, StepKind
from .emitter import Emitter


class Arguments:
    """The part of StageLowering (stage.py) that plans arguments, names and storage."""

    def plan_args(self) -> None:
        plan = plan_arguments(self.ir, self.namer, self.parallel)
        self.args += plan.args
        self.input_names, self.meta_names, self.band_names = plan.input_names, plan.meta_names, plan.band_names
        self.list_offsets, self.list_sizes, self.list_fields = plan.list_offsets, plan.list_sizes, plan.list_fields
        self.param_rows, self.param_band_rows = plan.param_rows, plan.param_band_rows
        self.state_names, self.prompt_state_rows = plan.state_names, plan.prompt_state_rows

    def signature(self) -> str:
        return "(" + ", ".join(a.numba_type for a in self.args) + ",)"

    # ------------------------------------------------------------ naming
    def fresh(self, kind: str) -> str:
        return self.namer.new(kind)

    def var(self, name: str) -> str:
        """The kernel name of a let, gate or channel."""
        if name not in self.var_names:
            self.var_names[name] = self.namer.new("v", name)
        return self.var_names[name]

    def note(self, text: str) -> str:
        """A comment of the generator's own text, registered for verify.py."""
        return self.namer.comment(text)

    def label(self, step: Step) -> str:
        """A statement's comment: its kind and its kernel name or index, never its spec name."""
        if step.kind in (StepKind.LET, StepKind.GATE, StepKind.GATERULES):
            return f"{step.kind.value} {self.var(step.name)}"
        if step.kind is StepKind.STATE:
            return f"state {self.state_names[step.name]}"
        if step.kind is StepKind.SKIP:
            return f"skip {self.ir.skip_reasons.index(step.name)}"
        index = {StepKind.TERM: self.ir.terms, StepKind.FACTOR: self.ir.factors}.get(step.kind)
        return f"{step.kind.value} {index.index(step.name)}" if index else step.kind.value

    def emitter(self, depth: int = 0) -> Emitter:
        out = Emitter(self.pending)
        out.depth = depth
        return out

    def key(self, node: Node) -> int:
        """Node.key() as a small number, computed without recursion: equal structure, equal number."""
        stack = [node]
        while stack:
            n = stack[-1]
            if id(n) in self.keys:
                stack.pop()
                continue
            todo = [a for a in n.args if id(a) not in self.keys]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            ident = (n.op, n.attr, tuple(self.keys[id(a)] for a in n.args))
            self.keys[id(n)] = self.interned.setdefault(ident, len(self.interned))
        return self.keys[id(node)]

    def storage(self, node: Node, name: str) -> str:
        """Where a let/gate value lives: a per-rollout value in group scratch unless a metric reads
        it (then a row of the batch); a per-group value in a local of the group loop, reset to
        missing at each group, unless a metric reads it after the loop (group_storage)."""
        ty = node.ty
        if ty.items:
            return f"item:{ty.items}"
        if ty.level == ROLLOUT:
            return "rollout" if name in self.metric_vars else "local"
        if ty.level in (PARAM, GROUP):
            return self.group_storage(name)
        return "scalar"

    def group_storage(self, name: str) -> str:
        """A per-group value (a let, gate or gate-rule block): a local of the group loop, or an
        array of G when a metric reads it after the loop."""
        return "group" if name in self.metric_vars else "group_local"

    def alloc(self, storage: str, name: str) -> None:
        if storage == "group_local":
            self.group_locals.append(name)
            return
        size = {"rollout": "n", "group": "G", "local": "width"}.get(storage)
        if size is None and storage.startswith("item:"):
            size = self.list_sizes[storage[5:]]
        if size is not None:
            # group scratch belongs to the function being emitted: a batch reduction's pass over the
            # groups runs in the kernel itself
            lines = self.chunk_arrays if storage == "local" and self.in_chunk else self.arrays
            lines.append(f"{name} = np.full({size}, nan)")
