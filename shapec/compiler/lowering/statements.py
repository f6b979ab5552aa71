"""Statement emission: channels, batch statements, skips, lets, gates, gate rules, terms,
clamps, factors (each behind its group-level guard, guards.py), a group's outputs and the metrics, each in
the order runtime/interp.py runs them."""

from __future__ import annotations

from ...ir.nodes import CONST, GROUP, Node, Op, PARAM, Step, StepKind, TypeKind
from ...ir.nodes import walk
from .conditions import always, conjuncts
from .emitter import Scope
from .reductions import BATCH_RUNNING


class Statements:
    """The part of StageLowering (stage.py) that writes one statement at a time."""

    def lower_channels(self, batch: Scope) -> None:
        """Channels for the whole batch up front when batch statements or metrics read them."""
        o = self.out
        names = {name for name, _ in self.ir.channels}
        outside = [*(s.expr for s in self.ir.batch_steps), *(m for _, m in self.ir.metrics)]
        self.global_channels = any(n.op is Op.REF and n.attr[0] == "var" and n.attr[1] in names
                                   for node in outside for n in walk(node))
        if not self.ir.channels or not self.global_channels:
            return
        o(self.note("channels"))
        o("for g in range(G):")
        with o.indented():
            mark = self.start_group(o)
            self.group_channels("rollout")
            self.read_params(o, mark)

    def group_channels(self, storage: str) -> None:
        o = self.out
        for name, _ in self.ir.channels:
            self.vars[name] = storage
            self.alloc(storage, self.var(name))
        o("for i in range(s, e):")
        with o.indented():
            for name, node in self.ir.channels:
                o(f"{self.read(storage, self.var(name), 'rollout')} = {self.ex(node, 'rollout', Scope())}")

    def lower_batch_steps(self, batch: Scope) -> None:
        o = self.out
        states = [n for n, _ in self.ir.states]
        for step in self.ir.batch_steps:
            o(self.note(self.label(step)))
            self.hoist(step.expr, batch, "batch")
            value = self.ex(step.expr, "batch", batch)
            if step.kind is StepKind.STATE:
                o(f"{self.state_names[step.name]} = k_state({self.state_names[step.name]}, {value})")
                o(f"state_out[{states.index(step.name)}] = {self.state_names[step.name]}")
            else:
                self.vars[step.name] = "scalar"
                o(f"{self.var(step.name)} = {value}")
        # constant lets and gates depend on nothing per group: compute them once, up front
        for step in self.ir.steps:
            if step.kind in (StepKind.LET, StepKind.GATE) and step.expr.ty.level == CONST and not step.expr.ty.items:
                self.hoist(step.expr, batch, "batch")
                self.vars[step.name] = "scalar"
                o(f"{self.var(step.name)} = {self.ex(step.expr, 'batch', batch)}")

    def lower_skips(self, scope: Scope) -> None:
        ir, o = self.ir, self.out
        o("code = 0")
        config = [s for s in ir.skips if s.expr.ty.level <= PARAM]
        data = [s for s in ir.skips if s.expr.ty.level > PARAM]

        def apply(steps):
            for step in steps:
                self.hoist(step.expr, scope, "group")
                v = self.truth(step.expr, "group", scope)
                hit = v if step.mode == "when" else f"not {v}"
                o(f"if code == 0 and {hit}:  " + self.note(self.label(step)))
                with o.indented():
                    o(f"code = {ir.skip_reasons.index(step.name)}")

        apply(config)
        if ir.requires == "binary":
            o("if code == 0:  " + self.note("binary rewards only"))
            with o.indented():
                o("for i in range(s, e):")
                with o.indented():
                    o("r = rewards[i]")
                    o("if not (abs(r) <= 1e-06 or abs(r - 1.0) <= 1e-06) or (use_components and components[i] > 0):")
                    with o.indented():
                        o(f"code = {ir.skip_reasons.index('non_binary')}")
                        o("break")
        apply(data)
        o("skip[g] = code")

    def rollout_loop(self, step: Step, scope: Scope) -> str:
        """The statement's value per rollout, with the reductions of its value, `on` and `when` hoisted."""
        for n in (step.expr, step.on, step.when):
            if n is not None:
                self.hoist(n, scope, "group")
        return self.ex(step.expr, "rollout", scope)

    def applies(self, step: Step, scope: Scope, skip_index: bool = False) -> str:
        """The `on` and `when` conditions as a prefix of `and`-ed tests (empty when there are none).

        Inside a statement's guard (`guarded`) its group-level conjuncts are known to be 1, and a
        1 leaves a three-valued `and` as the other operand is: only the other conjuncts are tested
        (and none that the params settled to 1, specialize.py).
        skip_index leaves out the test of an `on` index (`term_at_one_rollout` writes it there)."""
        parts = []
        if step.on is not None and not (skip_index and self.at_one_rollout(step)):
            parts.append(f"float(i - s) == {self.ex(step.on, 'rollout', scope)}" if step.on.ty.kind is TypeKind.INDEX
                         else self.truth(step.on, "rollout", scope))
        if step.when is not None:
            parts += [self.truth(c, "rollout", scope) for c in conjuncts(step.when)
                      if id(c) not in self.established and not always(c)]
        return "".join(f"({p}) and " for p in parts)

    def step_let(self, step: Step, scope: Scope) -> None:
        if step.name in self.vars:  # a constant, computed before the group loop
            return
        storage = self.storage(step.expr, step.name)
        self.vars[step.name] = storage
        self.alloc(storage, self.var(step.name))
        if step.name in self.sunk:  # only where a guarded statement that reads it can apply (sinking.py)
            self.emit_sunk_let(step, scope)
        else:
            self.let_value(step, scope)

    def let_value(self, step: Step, scope: Scope) -> None:
        o = self.out
        storage = self.vars[step.name]
        self.hoist(step.expr, scope, "group")
        if storage in ("group", "group_local"):
            o(f"{self.read(storage, self.var(step.name), 'group')} = {self.ex(step.expr, 'group', scope)}")
        elif storage in ("rollout", "local"):
            o("for i in range(s, e):")
            with o.indented():
                o(f"{self.read(storage, self.var(step.name), 'rollout')} = {self.ex(step.expr, 'rollout', scope)}")
        else:
            header, _, ctx, _ = self.select_loop(storage[5:])
            o(header)
            with o.indented():
                o(f"{self.var(step.name)}[j] = {self.ex(step.expr, ctx, scope)}")

    def step_gate(self, step: Step, scope: Scope) -> None:
        self.step_let(step, scope)
        if step.name in self.gate_index:
            value = self.read(self.vars[step.name], self.var(step.name), "group")
            self.out(f"gates[{self.gate_index[step.name]}, g] = k_gate_code({value})")

    def step_gaterules(self, step: Step, scope: Scope) -> None:
        o = self.out
        storage = self.vars[step.name] = self.group_storage(step.name)
        self.alloc(storage, self.var(step.name))
        target = self.read(storage, self.var(step.name), "group")
        reasons = self.ir.gate_reasons[step.name]
        for _, _, when in step.rules:
            if when is not None:
                self.hoist(when, scope, "group")
        o("decided = False")
        o(f"{target} = 0.0")
        o(f"gcode = {reasons.index('closed')}")
        for verdict, reason, when in step.rules:
            cond = "True" if when is None else self.truth(when, "group", scope)
            o(f"if not decided and {cond}:  " + self.note(f"{verdict}: reason {reasons.index(reason)}"))
            with o.indented():
                o(f"{target} = {1.0 if verdict == 'open' else 0.0}")
                o(f"gcode = {reasons.index(reason)}")
                o("decided = True")
        o(f"gates[{self.gate_index[step.name]}, g] = gcode")

    def constant(self, step: Step, kind: str, k: int) -> bool:
        """A dead statement (`dead_steps`, groups.py) whose value nothing stores per rollout: it reads as its literal
        (a term 0.0, still added in its place in the sum, so a -0.0 sum stays what it was)."""
        if self.breakdown_always or step.name not in self.dead_steps:
            return False
        self.constant_slots[kind, k] = "0.0" if kind == "term" else "1.0"
        return True

    def step_term(self, step: Step, scope: Scope) -> None:
        o = self.out
        k = self.ir.terms.index(step.name)
        if self.constant(step, "term", k):
            self.summed.append(k)
            return

        def body():
            value = self.rollout_loop(step, scope)
            slot = self.slot("term", k)
            if self.at_one_rollout(step):
                self.term_at_one_rollout(step, scope, k, value)
                return
            o("for i in range(s, e):")
            with o.indented():
                o(f"x = {value}")
                o(f"{slot} = x if {self.applies(step, scope)}not isnan(x) else 0.0")

        def off():
            o("for i in range(s, e):")
            with o.indented():
                o(f"{self.slot('term', k)} = 0.0")

        self.guarded(step, scope, body, off)
        self.summed.append(k)

    def at_one_rollout(self, step: Step) -> bool:
        """Whether the statement applies at most at one rollout of a group: `on` a group-level index."""
        return step.on is not None and step.on.ty.kind is TypeKind.INDEX and step.on.ty.level <= GROUP

    def term_at_one_rollout(self, step: Step, scope: Scope, k: int, value: str) -> None:
        """A term `on` an index (argmin, argmax): 0 everywhere, then its value at that one rollout."""
        o = self.out
        slot = self.slot("term", k)
        at = self.fresh("at")
        o(f"{at} = k_at({self.ex(step.on, 'group', scope)}, e - s)  " + self.note("-1: no rollout"))
        o("for i in range(s, e):")
        with o.indented():
            o(f"{slot} = 0.0")
        o(f"if {at} >= 0:")
        with o.indented():
            o(f"i = s + np.uint64({at})")
            o(f"x = {value}")
            o(f"{slot} = x if {self.applies(step, scope, skip_index=True)}not isnan(x) else 0.0")

    def slot(self, kind: str, k: int) -> str:
        """Where a term's or factor's value lives while its group is shaped: the output itself
        when a metric reads it after the group loop; else a scratch row of the group (in cache),
        which later statements read and `finish_group` copies to the breakdown when `keep`.

        Storing into the breakdown output beside the value, under `if keep:` in every rollout
        loop, cost the kernel a fifth of its time with keep off: the stores to a (T, n) array
        that may alias every input kept LLVM from holding the loops' values in registers."""
        if self.breakdown_always:
            return f"{kind}s[{k}, i]"
        if (kind, k) in self.constant_slots:
            return self.constant_slots[kind, k]
        names = self.term_slots if kind == "term" else self.factor_slots
        if k not in names:
            names[k] = self.fresh("tv" if kind == "term" else "fv")
            self.alloc("local", names[k])
        return f"{names[k]}[i - s]"

    def term_sum(self) -> str:
        """The group's term sum at a rollout as the interpreter adds it: every term so far, in
        order, a skipped one's 0.0 included (its row holds 0.0), so a -0.0 sum stays exact.

        Summed once where the running reward starts, not carried through every term's loop in
        a `tot` row: that load, add and store per term was a tenth of nemo_rl's kernel."""
        slots = " + ".join(self.slot("term", k) for k in self.summed)
        return f"({slots})" if len(self.summed) > 1 else slots

    def start_running(self) -> None:
        """The running reward: the input reward plus the term sum, from the first clamp or factor on."""
        if self.first_running:
            self.out(f"run[i - s] = rewards[i]{' + ' + self.term_sum() if self.summed else ''}")

    def step_clamp(self, step: Step, scope: Scope) -> None:
        o = self.out

        def body():
            lo = self.rollout_loop(step, scope)
            o("for i in range(s, e):")
            with o.indented():
                self.start_running()
                o(f"lo = {lo}")
                o(f"run[i - s] = lo if {self.applies(step, scope)}not isnan(lo) and run[i - s] < lo else run[i - s]")

        def off():
            if not self.first_running:
                o("pass")
                return
            o("for i in range(s, e):")
            with o.indented():
                self.start_running()

        self.guarded(step, scope, body, off)
        self.first_running = False

    def step_factor(self, step: Step, scope: Scope) -> None:
        o = self.out
        k = self.ir.factors.index(step.name)

        def preamble():
            self.start_running()
            if self.first_factor:
                o("base[i - s] = run[i - s]")

        if self.constant(step, "factor", k):
            if self.first_running or self.first_factor:  # the running reward and base still start here
                o("for i in range(s, e):")
                with o.indented():
                    preamble()
            self.first_running = False
            self.first_factor = False
            return

        def body():
            m = self.rollout_loop(step, scope)
            band = step.expr.args[1] if step.expr.op is Op.BAND and step.expr.args[1].ty.level <= GROUP else None
            if band is None:
                self.factor_loop(step, scope, k, m, preamble)
                return
            o(f"if {self.scoped(band, scope)[3]} == 1.0:")  # no band: the factor is missing, 1, everywhere
            with o.indented():
                self.factor_loop(step, scope, k, m, preamble)
            o("else:")
            with o.indented():
                off()

        def off():
            o("for i in range(s, e):")
            with o.indented():
                preamble()
                o(f"{self.slot('factor', k)} = 1.0")

        self.guarded(step, scope, body, off)
        self.first_running = False
        self.first_factor = False

    def factor_loop(self, step: Step, scope: Scope, k: int, m: str, preamble) -> None:
        """The factor's rollout loop, where it may apply in the group: `m` is its value per rollout."""
        o = self.out
        o("for i in range(s, e):")
        with o.indented():
            preamble()
            if any(n.op is Op.BAND for n in walk(step.expr)):  # a band lookup is worth skipping where it cannot apply
                o(f"applied = {self.applies(step, scope)}base[i - s] > 0.0")
                o(f"m = {m} if applied else 1.0")
                o("applied = applied and not isnan(m)")
            else:  # a cheap factor costs less computed everywhere than branched around
                o(f"m = {m}")
                o(f"applied = {self.applies(step, scope)}not isnan(m) and base[i - s] > 0.0")
            o(f"{self.slot('factor', k)} = m if applied else 1.0")
            o("run[i - s] = run[i - s] * m if applied else run[i - s]")

    def finish_group(self, scope: Scope) -> None:
        ir, o = self.ir, self.out
        o(self.note("the group's rewards; a skipped group passes through"))
        if ir.result is not None:  # fails closed: a missing result leaves the reward as it came in
            self.hoist(ir.result, scope, "group")
            final = self.ex(ir.result, "rollout", scope)
            if not self.definedness.defined(ir.result):
                final = f"k_fallback({final}, rewards[i])"
        elif not self.first_running:
            final = "run[i - s]"
        else:
            final = "rewards[i] + " + self.term_sum() if self.summed else "rewards[i]"
        if ir.drop is not None:
            self.hoist(ir.drop, scope, "group")
        o("if code == 0:")
        with o.indented():
            self.store_prompt_states(scope)
            o("for i in range(s, e):")
            with o.indented():
                o(f"out[i] = {final}")
                if ir.drop is not None:  # a missing condition drops nothing
                    o(f"kept[i] = not {self.truth(ir.drop, 'rollout', scope)}")
                o("if bad_i < 0 and not np.isfinite(out[i]):")
                with o.indented():
                    o("bad_i = np.int64(i)")
                    o("bad_g = g")
            if not self.breakdown_always:
                self.store_breakdown(lambda k: self.slot("term", k), lambda k: self.slot("factor", k))
        o("else:")
        with o.indented():
            o("for i in range(s, e):")
            with o.indented():
                o("out[i] = rewards[i]")
                if ir.drop is not None:
                    o("kept[i] = True")
            self.store_breakdown(lambda k: "0.0", lambda k: "1.0")
            for k in range(len(ir.gate_reasons)):
                o(f"gates[{k}, g] = -1")

    def store_breakdown(self, term, factor) -> None:
        """One loop over the group writing term(k) and factor(k) into the breakdown outputs: under
        `if keep:` unless they are always stored."""
        ir, o = self.ir, self.out

        def loop():
            o("for i in range(s, e):")
            with o.indented():
                for k in range(len(ir.terms)):
                    o(f"terms[{k}, i] = {term(k)}")
                for k in range(len(ir.factors)):
                    o(f"factors[{k}, i] = {factor(k)}")

        if not (ir.terms or ir.factors):
            return
        if self.breakdown_always:
            loop()
            return
        o("if keep:")
        with o.indented():
            loop()

    def lower_metrics(self, batch: Scope) -> None:
        o = self.out
        self.in_metrics = True
        self.metric_names = {k: v for k, v in self.stored.items() if v}
        streamed: dict[int, Node] = {}  # the metrics' running batch reductions, one pass for all
        for _, metric in self.ir.metrics:
            for n in walk(metric):
                if (n.op is Op.BREDUCE and n.attr in BATCH_RUNNING and self.key(n) not in batch.names
                        and not any(c.op is Op.BREDUCE for a in n.args for c in walk(a))):
                    streamed.setdefault(self.key(n), n)
        if len(streamed) > 1:
            self.emit_breduces(list(streamed.values()), batch)
        for k, (name, node) in enumerate(self.ir.metrics):
            o(self.note(f"metric {k}"))
            self.hoist(node, batch, "batch")
            o(f"metrics[{k}] = {self.ex(node, 'batch', batch)}")

