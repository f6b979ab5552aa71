"""Hoisting: every reduction and band under a statement, computed once per group before it.

Each selection gets a buffer of its own (values, indices, count), shared by the reductions that
read the same values and mask; the order statistics share one sorted copy.
"""

from __future__ import annotations

from contextlib import nullcontext

from ...ir.nodes import Node, Op, TypeKind
from .emitter import Scope
from .helper_source import HELPER_FUNCTIONS
from .names import ShapecInternalError
from .schedule import fuse_block

ROLLOUT_VALUED = ("minmax", "centered", "rank")
HELPERS_READ = {"minmax": ("min", "max"), "centered": ("mean",)}  # the group reductions each is made of
SORTED_OPS = ("median", "mad", "quantile", "nth_largest")  # read a sorted selection (srt_* helpers)
MUTATING_HELPERS = {"k_sort": (0,), **{f"srt_{op}": (1,) for op in SORTED_OPS}}  # helper -> arrays it fills
REDUCTION_OPS = frozenset((*ROLLOUT_VALUED, *(f.split("_", 1)[1] for f in HELPER_FUNCTIONS if f.startswith(("red_", "srt_")))))


# reductions written as running values over the selected x, k of them before this one, in the
# order red_<op> reads its buffer: (initial value, update, finished value); FLAGGED ones are
# undefined (`undefined_when`) when nothing is selected or a selected x is missing. Group
# selections use them all, batch reductions those in BATCH_RUNNING.
RUNNING = {
    "sum": ("0.0", "{acc} += {x}", "{acc}"),
    "count": ("0.0", "{acc} = {acc} + 1.0 if {x} == 1.0 else {acc}", "{acc}"),
    "any": ("0.0", "{acc} = 1.0 if {x} == 1.0 else {acc}", "{acc}"),
    "all": ("1.0", "{acc} = 0.0 if {x} != 1.0 else {acc}", "{acc}"),
    "mean": ("0.0", "{acc} += {x}", "(nan if {undefined} else {acc} / {k})"),
    "min": ("nan", "{acc} = {x} if {k} == 0 or {x} < {acc} else {acc}", "(nan if {undefined} else {acc})"),
    "max": ("nan", "{acc} = {x} if {k} == 0 or {x} > {acc} else {acc}", "(nan if {undefined} else {acc})"),
    "argmin": ("nan", "{acc} = {x} if {k} == 0 or {x} < {acc} else {acc}",
               "(nan if {undefined} else float({best}))"),
    "argmax": ("nan", "{acc} = {x} if {k} == 0 or {x} > {acc} else {acc}",
               "(nan if {undefined} else float({best}))"),
}
FLAGGED = ("mean", "min", "max", "argmin", "argmax")
BATCH_RUNNING = ("sum", "mean", "count", "any", "all")


def undefined_when(count: str, missing: str | None) -> str:
    """When a flagged running reduction has no value: nothing selected, or a selected value missing."""
    return f"{count} == 0" + (f" or {missing}" if missing else "")


def _reduction(op: str) -> str:
    """A reduction's name, for a comment: only one the helpers implement."""
    if op not in REDUCTION_OPS:
        raise ShapecInternalError(f"lowering: unknown reduction {op!r}")
    return op


def _nested_breduces(nodes: list[Node]) -> list[Node]:
    """The batch reductions nearest below the operands of `nodes` (not those under them, which
    emitting each one emits first): a batch reduction runs its own loop over the groups, so one
    read by another is computed before it, never inside its loop."""
    found, stack = [], [a for n in nodes for a in reversed(n.args)]
    while stack:
        n = stack.pop()
        if n.op is Op.BREDUCE:
            found.append(n)
        else:
            stack.extend(reversed(n.args))
    return found


class Hoisting:
    """The part of StageLowering (stage.py) that emits reductions, selections and bands."""

    def hoist(self, node: Node, scope: Scope, level: str) -> None:
        """Emit every reduction and band under node, innermost first, unless already in scope.

        level is "group" inside a group loop, "batch" outside it.
        """
        stack = [(node, False)]  # a stack, not recursion: expressions can be deep
        while stack:
            n, children_done = stack.pop()
            if self.key(n) in scope.names:
                continue
            if not children_done:
                stack.append((n, True))
                if n.op is not Op.BREDUCE:  # a batch reduction hoists its operands inside its own group loop
                    stack.extend((child, False) for child in reversed(n.args))
            elif n.op is Op.REDUCE:
                self.emit_reduce(n, scope)
            elif n.op is Op.BREDUCE and self.in_chunk:
                self.hoist_to_batch(n, scope)
            elif n.op is Op.BREDUCE:
                self.emit_breduce(n, scope)
            elif n.ty.kind is TypeKind.BAND and n.op in (Op.BANDREF, Op.BANDLIT, Op.BANDFALLBACK, Op.BANDCOND):
                self.emit_band(n, scope, level)

    def hoist_to_batch(self, node: Node, scope: Scope) -> None:
        """A batch reduction in a group statement: computed once, with the batch statements, before
        the group loop (it reads only inputs, channels, rewards and params, so it is the same for
        every group), and read there as an argument of the group function."""
        key = self.key(node)
        if key not in self.batch_scope.names:
            out, self.out, self.in_chunk = self.out, self.batch_out, False
            try:
                self.emit_breduce(node, self.batch_scope)
            finally:
                self.out, self.in_chunk = out, True
        scope.names[key] = self.batch_scope.names[key]

    def emit_band(self, node: Node, scope: Scope, level: str) -> None:
        o = self.out
        ctx = "group" if level == "group" else "batch"
        names = tuple(self.fresh("band") for _ in "abfp")
        if node.op is Op.BANDREF:
            ns, name = node.attr
            self.need_g(ctx)
            if ns == "param":
                column = "min(g, param_bands.shape[1] - 1)"  # one column: the same band for every group
                parts = [f"param_bands[{self.param_band_rows[name]}, {column}, {c}]" for c in range(4)]
            else:
                parts = [f"{self.band_names[name]}[g, {c}]" for c in range(4)]
        elif node.op is Op.BANDLIT:
            parts = [self.ex(x, ctx, scope) for x in node.args] + ["1.0"]
        elif node.op is Op.BANDFALLBACK:
            x, y = (scope.names[self.key(n)] for n in node.args)
            parts = [f"{xc} if {x[3]} == 1.0 else {yc}" for xc, yc in zip(x, y)]
        else:
            c = self.ex(node.args[0], ctx, scope)
            x, y = (scope.names[self.key(n)] for n in node.args[1:])
            if self.definedness.defined(node.args[0]) and self.definedness.clean(node.args[0]):  # certainly 0 or 1
                parts = [f"{xc} if {c} == 1.0 else {yc}" for xc, yc in zip(x, y)]
            else:
                parts = [f"k_cond({c}, {xc}, {yc})" for xc, yc in zip(x[:3], y[:3])]
                parts.append(f"{x[3]} if {c} == 1.0 else ({y[3]} if {c} == 0.0 else 0.0)")
        o(self.note(f"band {node.op}"))
        for name, part in zip(names, parts):
            o(f"{name} = {part}")
        scope.names[self.key(node)] = names

    def select_loop(self, over: str):
        """(loop header, index variable, context, local index expression) over one group."""
        if over:
            off = self.list_offsets[over]
            return f"for j in range({off}[g], {off}[g + 1]):", "j", "item", f"j - {off}[g]"
        return "for i in range(s, e):", "i", "rollout", "i - s"

    def selection(self, node: Node, scope: Scope) -> tuple[str, str, str]:
        """(values, indices, count) of a reduction's selection in this group.

        Reductions over the same values and mask share one copy per group, kept in a buffer of
        its own (so the scheduler may fill several in one pass); the order statistics share one
        sorted copy.
        """
        op, over = node.attr
        arg, mask = node.args[:2]
        key = self.selection_key(node)
        if key in scope.names:
            return scope.names[key]
        o = self.out
        ops = self.selection_ops[key]
        vals, idx, k = self.fresh("sel"), self.fresh("isel"), self.fresh("ksel")
        self.alloc_scratch(vals, "np.empty(width)")
        indexed = "argmin" in ops or "argmax" in ops
        if not indexed:
            idx = "ibuf"  # passed along, never read
        else:
            self.alloc_scratch(idx, "np.zeros(width, np.int64)")
        header, _, ctx, local = self.select_loop(over)
        o(self.note(f"selection {vals} for {'/'.join(sorted(set(map(_reduction, ops))))} "
                    f"({'items of ' + self.list_offsets[over] if over else 'rollouts'}{', sorted' if key[3] else ''})"))
        o(f"{k} = np.int64(0)  " + self.note("not a literal 0: numba would compile each helper it reaches twice"))
        o(header)
        with o.indented():
            # branch-free selection: write every value, advance past the selected ones only
            o(f"{vals}[{k}] = {self.ex(arg, ctx, scope)}")
            if indexed:
                o(f"{idx}[{k}] = {local}")
            unmasked = mask.op is Op.CONST and mask.attr == 1.0
            o(f"{k} += 1" if unmasked else f"{k} += {self.truth(mask, ctx, scope)}")
        if key[3]:
            o(f"k_sort({vals}, {k})")
        scope.names[key] = (vals, idx, k)
        return vals, idx, k

    def selection_key(self, node: Node) -> tuple:
        """What a reduction reads: its values, its mask, the list it runs over, and whether sorted."""
        op, over = node.attr
        return (self.key(node.args[0]), self.key(node.args[1]), over, op in SORTED_OPS)

    def alloc_scratch(self, name: str, init: str) -> None:
        """A group-sized buffer in the function being emitted (the chunk function or the kernel)."""
        lines = self.chunk_arrays if self.in_chunk else self.arrays
        line = f"{name} = {init}"
        if line not in lines:
            lines.append(line)

    def running(self, node: Node, scope: Scope) -> dict[str, str]:
        """op -> the finished value, for a selection whose every reduction is a running one.

        One pass over the group keeps, per reduction, what red_<op> would compute from the
        buffer, updated in the buffer's order with the helper's comparisons, so each result is
        the helper's to the bit; no buffer is written and no helper called."""
        key = self.selection_key(node)
        if key in scope.names:
            return scope.names[key]
        o = self.out
        ops = self.selection_parts(key)
        arg, mask = node.args[:2]
        header, _, ctx, local = self.select_loop(node.attr[1])
        k, x = self.fresh("ksel"), self.fresh("sel")
        o(self.note(f"selection {x} for {'/'.join(map(_reduction, ops))} (running)"))
        o(f"{k} = 0")
        finish, updates = {}, []
        missing = None  # no flag to keep: no flagged reduction, or no selected value can be missing
        if any(op in FLAGGED for op in ops) and not self.definedness.defined(arg):
            missing = self.fresh("r")
            o(f"{missing} = False  " + self.note("True once a selected value is missing"))
            updates.append(f"{missing} = {missing} or isnan({x})")
        for op in ops:
            acc = self.fresh("r")
            init, update, done = RUNNING[op]
            if op in ("argmin", "argmax"):
                best = self.fresh("isel")
                o(f"{best} = 0")
                better = "<" if op == "argmin" else ">"
                # a rollout's index is unsigned (groups.py, start_group): mixed with best's 0, numba makes a float64
                updates.append(f"{best} = np.int64({local}) if {k} == 0 or {x} {better} {acc} else {best}")
            else:
                best = None
            o(f"{acc} = {init}")
            updates.append(update.format(acc=acc, x=x, k=k))
            finish[op] = done.format(acc=acc, k=k, undefined=undefined_when(k, missing), best=best)
        o(header)
        with o.indented():
            unmasked = mask.op is Op.CONST and mask.attr == 1.0
            if not unmasked:
                o(f"if {self.truth(mask, ctx, scope)}:")
            with o.indented() if not unmasked else nullcontext():
                o(f"{x} = {self.ex(arg, ctx, scope)}")
                for line in updates:
                    o(line)
                o(f"{k} += 1")
        scope.names[key] = finish
        return finish

    def selection_parts(self, key: tuple) -> list[str]:
        """The group reductions a selection's readers are made of (minmax: min and max)."""
        return sorted({part for op in self.selection_ops[key] for part in HELPERS_READ.get(op, (op,))})

    def is_running(self, node: Node) -> bool:
        key = self.selection_key(node)
        return not key[3] and all(part in RUNNING for part in self.selection_parts(key))

    def emit_reduce(self, node: Node, scope: Scope) -> None:
        o = self.out
        op, over = node.attr
        arg, mask, *extras = node.args
        name = self.fresh("r")
        running = self.is_running(node)
        if op not in ROLLOUT_VALUED and running:
            self.store_reduce(node, name, self.running(node, scope)[op], scope)
            return
        header, _, ctx, _ = self.select_loop(over)
        if running:
            done = self.running(node, scope)
            reads = {part: done[part] for part in HELPERS_READ[op]}
        else:
            vals, idx, k = self.selection(node, scope)
            reads = {part: f"red_{part}({vals}, {idx}, {k}, 0.0)" for part in HELPERS_READ.get(op, ())}
        if op in ROLLOUT_VALUED:
            storage = f"item:{over}" if over else ("rollout" if self.key(node) in self.stored else "local")
            self.alloc(storage, name)
            target = self.read(storage, name, ctx)
            value = self.ex(arg, ctx, scope)
            if op == "minmax":  # names of their own, so the scheduler may fuse several (schedule.py)
                lo, hi = self.fresh("low"), self.fresh("high")
                o(f"{lo} = {reads['min']}")
                o(f"{hi} = {reads['max']}")
                o(header)
                with o.indented():
                    o(f"{target} = nan if isnan({lo}) else (0.0 if {hi} == {lo} else ({value} - {lo}) / ({hi} - {lo}))")
            elif op == "centered":
                mean = self.fresh("centre")
                o(f"{mean} = {reads['mean']}")
                o(header)
                with o.indented():
                    o(f"{target} = nan if isnan({mean}) else {value} - {mean}")
            else:  # rank: the t-th selected rollout's place in the selection, missing outside it
                o(f"usable_ = k_usable({vals}, {k})")
                o("t_ = 0")
                o(header)
                with o.indented():
                    o(f"if {self.truth(mask, ctx, scope)}:")
                    with o.indented():
                        o(f"{target} = k_rank({vals}, {k}, t_) if usable_ else nan")
                        o("t_ += 1")
                    o("else:")
                    with o.indented():
                        o(f"{target} = nan")
            scope.names[self.key(node)] = target
            if self.key(node) in self.stored:
                self.stored[self.key(node)] = target
            return
        extra = self.ex(extras[0], "group", scope) if extras else "0.0"
        call = f"srt_{op}({vals}, tbuf, {k}, {extra})" if op in SORTED_OPS else f"red_{op}({vals}, {idx}, {k}, {extra})"
        self.store_reduce(node, name, call, scope)

    def store_reduce(self, node: Node, name: str, call: str, scope: Scope) -> None:
        """name = call, in a group array when a metric reads it after the group loop."""
        o = self.out
        if self.key(node) in self.stored:
            self.alloc("group", name)
            o(f"{name}[g] = {call}")
            scope.names[self.key(node)] = f"{name}[g]"
            self.stored[self.key(node)] = f"{name}[g]"
        else:
            o(f"{name} = {call}")
            scope.names[self.key(node)] = name

    def emit_breduce(self, node: Node, scope: Scope) -> None:
        self.emit_breduces([node], scope)

    def emit_breduces(self, nodes: list[Node], scope: Scope) -> None:
        """Batch reductions in one loop over every group's selected rollouts. sum, mean, count, any
        and all accumulate as they go, in the order red_<op> would read its buffer, so the result
        is the helper's to the bit; the others fill the batch buffer and call the helper. Several
        (running ones only: they share no buffer) have their rollout loops fused where the
        scheduler allows; each keeps its own accumulators, so each adds in its own order."""
        if len(nodes) > 1 and any(n.attr not in BATCH_RUNNING for n in nodes):
            raise ShapecInternalError("lowering: batch reductions sharing the batch buffer in one loop")
        o = self.out
        inner = Scope(self.metric_names) if self.in_metrics else Scope()
        for nested in _nested_breduces(nodes):  # each its own loop over the groups, before this one
            if self.key(nested) not in scope.names:
                self.emit_breduce(nested, scope)
            inner.names[self.key(nested)] = scope.names[self.key(nested)]
        o(self.note(", ".join(f"batch.{_reduction(n.attr)}" for n in nodes)))
        plans = [self._breduce_start(n) for n in nodes]
        o("for g in range(G):")
        with o.indented():
            mark = self.start_group(o)
            for node, plan in zip(nodes, plans):
                self._breduce_group(node, plan, Scope(inner.names))
            if len(nodes) > 1:
                o.lines[mark:] = fuse_block(o.lines[mark:], o.depth, MUTATING_HELPERS)
            self.read_params(o, mark)
        for node, plan in zip(nodes, plans):
            self._breduce_finish(node, plan, scope)

    def _breduce_start(self, node: Node) -> tuple:
        """(result, count, missing flag or None, selected value, running update or None), the
        running ones initialised; every name is the reduction's own, so loops can fuse."""
        o = self.out
        name = self.fresh("b")
        if node.attr not in BATCH_RUNNING:
            o("kb = 0")
            return name, "kb", None, None, None
        count, value = self.fresh("b"), self.fresh("b")
        init, update, _ = RUNNING[node.attr]
        o(f"{count} = 0")
        o(f"{name} = {init}")
        missing = self.fresh("b") if node.attr in FLAGGED and not self.definedness.defined(node.args[0]) else None
        if missing:
            o(f"{missing} = False  " + self.note("True once a selected value is missing"))
        return name, count, missing, value, update.format(acc=name, x=value, k=count)

    def _breduce_group(self, node: Node, plan: tuple, inner: Scope) -> None:
        """One group's part of a batch reduction: the group values its operands read (hoisted into
        `inner`, which holds the batch values computed before it), then its rollouts."""
        o = self.out
        arg, mask = node.args
        name, count, missing, value, update = plan
        self.hoist(arg, inner, "group")
        self.hoist(mask, inner, "group")
        o("for i in range(s, e):")
        with o.indented():
            o(f"if {self.truth(mask, 'rollout', inner)}:")
            with o.indented():
                if update is None:
                    o(f"bbuf[kb] = {self.ex(arg, 'rollout', inner)}")
                else:
                    o(f"{value} = {self.ex(arg, 'rollout', inner)}")
                    o(update)
                    if missing:
                        o(f"{missing} = {missing} or isnan({value})")
                o(f"{count} += 1")

    def _breduce_finish(self, node: Node, plan: tuple, scope: Scope) -> None:
        name, count, missing, _, update = plan
        if update is None:
            self.out(f"{name} = red_{node.attr}(bbuf, ibuf, kb, 0.0)")
        else:
            done = RUNNING[node.attr][2].format(acc=name, k=count, undefined=undefined_when(count, missing))
            if done != name:
                self.out(f"{name} = {done}")
        scope.names[self.key(node)] = name
