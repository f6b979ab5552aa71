"""The kernel and its group function: the kernel runs the batch code, then the group loop
(fused by schedule.py) as a function over groups g0..g1-1 with an explicit signature, called
once or on chunks of groups across threads, then the metrics."""

from __future__ import annotations

import ast
import builtins
import textwrap

from ..arguments import breakdown_always
from ...ir.nodes import Op, steps_nodes, walk, StepKind
from .conditions import conjuncts, never
from .emitter import Emitter, Scope
from .helper_source import HELPER_FUNCTIONS
from .names import MANGLED, ShapecInternalError
from .reductions import MUTATING_HELPERS
from .schedule import fuse_block
from .sinking import plan_sinking

PARALLEL_MIN_ROLLOUTS = 4096  # below this, waking threads costs more than it saves (benchmarks/)
# prange only: numba's other parallel rewrites would turn every np.full into a parfor (slow to compile, no gain)
PARALLEL_OPTION = (', parallel={"prange": True, "comprehension": False, "reduction": False, "inplace_binop": False, '
                   '"setitem": False, "numpy": False, "stencil": False, "fusion": False}')
_IMPORTS = ("np", "inf", "isnan", "nan", "njit", "nt", "prange")
MODULE_NAMES = frozenset((*_IMPORTS, *dir(builtins), *HELPER_FUNCTIONS))


def _names_by_context(code: str) -> tuple[set[str], set[str]]:
    """(names stored, names loaded) in a block of generated code."""
    tree = ast.parse(textwrap.dedent(code))
    stored, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (stored if isinstance(node.ctx, ast.Store) else loaded).add(node.id)
    return stored, loaded


def _names(code: str) -> set[str]:
    stored, loaded = _names_by_context(code)
    return stored | loaded



class Groups:
    """The part of StageLowering (stage.py) that assembles the kernel and its group function."""

    def lower(self) -> str:
        """The stage's passes, in order; the kernel and its group function as module text."""
        self.plan_statements()
        batch_code = self.lower_batch()
        groups = self.lower_group_loop()
        after = self.lower_after_groups()
        chunk, free = self.chunk_function(groups)
        batch = batch_code.text()
        head = self.kernel_head(batch + after)
        dispatch = self.emitter(1)
        self.dispatch_groups(dispatch, ", ".join(free))
        return chunk + "\n\n" + head + batch + dispatch.text() + after

    def plan_statements(self) -> None:
        """What the emitting passes consult: the reductions and lets metrics read, the gates with codes,
        the reductions reading each selection, where each term's and factor's values live."""
        ir = self.ir
        self.in_metrics = False
        metric_keys = {self.key(n) for _, m in ir.metrics for n in walk(m) if n.op is Op.REDUCE}
        self.metric_vars = {n.attr[1] for _, m in ir.metrics for n in walk(m) if n.op is Op.REF and n.attr[0] == "var"}
        self.stored: dict[int, str] = {k: "" for k in metric_keys}
        self.gate_index = {name: k for k, name in enumerate(ir.gate_reasons)}
        # the statements a metric reads a reduction of (their reductions run for every group), and
        # those that apply nowhere: a conjunct of their `when` is a 0 the params settled (specialize.py)
        self.reduced_steps = {s.name for s in ir.steps if any(
            self.key(n) in metric_keys for x in (s.expr, s.on, s.when) if x is not None for n in walk(x))}
        self.dead_steps = {s.name for s in ir.steps if s.when is not None and s.name not in self.reduced_steps
                           and any(never(c) for c in conjuncts(s.when))}
        self.selection_ops: dict[tuple, list[str]] = {}  # selection -> the reductions reading it
        reductions = {self.key(n): n for node in steps_nodes(ir) for n in walk(node) if n.op is Op.REDUCE}
        for n in reductions.values():
            self.selection_ops.setdefault(self.selection_key(n), []).append(n.attr[0])
        self.in_chunk = False
        # a metric that reads a term or factor needs every group's values after the loop: then the
        # breakdown is always stored; otherwise only when the caller passes keep (breakdown=True)
        self.breakdown_always = breakdown_always(ir)
        self.term_slots: dict[int, str] = {}
        self.factor_slots: dict[int, str] = {}
        self.constant_slots: dict[tuple[str, int], str] = {}  # a dead term's 0.0, a dead factor's 1.0
        for k, t in enumerate(ir.terms):
            self.vars[t] = f"term:{k}"
        for k, f in enumerate(ir.factors):
            self.vars[f] = f"factor:{k}"

    def lower_batch(self) -> Emitter:
        """The code before the group loop: channels computed for the whole batch, batch statements."""
        batch_code = self.out = self.batch_out = self.emitter(1)
        batch = self.batch_scope = Scope()
        self.lower_channels(batch)
        self.lower_batch_steps(batch)
        return batch_code

    def lower_group_loop(self) -> str:
        """The group loop: sinking planned (sinking.py), every statement emitted, then fused (schedule.py)."""
        groups = self.out = self.emitter(1)
        self.in_chunk = True
        self.sunk = plan_sinking(self.ir, self.metric_vars | set(self.gate_index), self.dead_steps, self.reduced_steps)
        self.lower_groups()
        groups.lines[1:] = fuse_block(groups.lines[1:], 2, MUTATING_HELPERS)
        self.in_chunk = False
        return groups.text()

    def lower_after_groups(self) -> str:
        """The metrics, after every group is shaped, and the kernel's return."""
        after = self.out = self.emitter(1)
        self.lower_metrics(self.batch_scope)
        after("return state_out, bad_i, bad_g")
        if self.pending:
            raise ShapecInternalError(f"lowering: temporaries {sorted(self.pending)} were never written")
        return after.text()

    def kernel_head(self, body: str) -> str:
        """The kernel's decorator, arguments and set-up: sizes, the scratch `body` (the code outside
        the group function) uses, states and batch-wide arrays."""
        ir = self.ir
        head = self.emitter()
        sig, kernel = self.namer.derived("SIG_", self.fname), self.namer.derived("kernel_", self.fname)
        head(f"@njit(cache=True, error_model=\"numpy\"{PARALLEL_OPTION if self.parallel else ''})  "
             + self.note(f"compiled for {sig}"))
        head(f"def {kernel}(")
        with head.indented():
            for k in range(0, len(self.args), 6):
                head(", ".join(a.name for a in self.args[k:k + 6]) + ",")
        head("):")
        with head.indented():
            head(self.namer.string(
                f"Fills out (n), terms ({len(ir.terms)}, n) and factors ({len(ir.factors)}, n) when keep, "
                f"skip (G), gates ({len(ir.gate_reasons)}, G) and metrics ({len(ir.metrics)}); returns the new state and the "
                "first non-finite reward (rollout, group) or -1."))
            head("n = rewards.shape[0]")
            head("G = offsets.shape[0] - 1")
            head("state_out = state_in.copy()")
            head("bad_i = -1")
            head("bad_g = -1")
            head("width = 1")
            head("for g in range(G):")
            with head.indented():
                head("width = max(width, offsets[g + 1] - offsets[g])")
            for lst, off in self.list_offsets.items():
                head(f"{self.list_sizes[lst]} = {off}[G]")
                head("for g in range(G):")
                with head.indented():
                    head(f"width = max(width, {off}[g + 1] - {off}[g])")
            scratch_used = _names(body)
            if "ibuf" in scratch_used:
                head("ibuf = np.zeros(width, np.int64)")
            if "tbuf" in scratch_used:
                head("tbuf = np.empty(width)")
            if "bbuf" in scratch_used:
                head("bbuf = np.empty(n)")
            for k, (name, _) in enumerate(ir.states):
                head(f"{self.state_names[name]} = state_in[{k}]")
            for line in self.arrays:
                head(line)
        return head.text()

    def chunk_function(self, groups: str) -> tuple[str, list[str]]:
        """The group loop as its own function over groups g0..g1-1, with its own scratch.

        Chunks of groups then run one after another, or in parallel (prange) with no shared scratch.
        Its other arguments are exactly the names the loop reads but does not define.
        """
        head = self.emitter(1)
        head("bad_i = -1")
        head("bad_g = -1")
        used = _names(groups)
        for scratch, init in (("ibuf", "np.zeros(width, np.int64)"), ("tbuf", "np.empty(width)")):
            if scratch in used:
                head(f"{scratch} = {init}")
        head("run = np.zeros(width)  " + self.note("the group's running rewards"))
        head("base = np.zeros(width)  " + self.note("the reward entering the factors: they apply where it is > 0"))
        scratch = [line.split(" = ", 1) for line in self.chunk_arrays]
        scratch = [(name, init) for name, init in scratch if name in used]  # none for a let left unread (specialize.py)
        rows = [name for name, init in scratch if init == "np.full(width, nan)"]
        if len(rows) > 1:  # one allocation, not one per let: on a small call each cost about 30 ns
            head(f"rows = np.full(({len(rows)}, width), nan)  " + self.note("a row of missing values per let"))
            for j, name in enumerate(rows):
                head(f"{name} = rows[{j}]")
        else:
            rows = []
        for name, init in scratch:
            if name not in rows:
                head(f"{name} = {init}")
        body = head.text() + groups + "    return bad_i, bad_g\n"
        stored, loaded = _names_by_context(body)
        order = [a.name for a in self.args]
        free = sorted(loaded - stored - MODULE_NAMES - {"g0", "g1"},
                      key=lambda n: (order.index(n) if n in order else len(order), n))
        fn = self.emitter()
        types = ", ".join(["nt.int64", "nt.int64", *(self.free_type(name) for name in free)])
        sig, groups_fn = self.namer.derived("SIG_groups_", self.fname), self.namer.derived("groups_", self.fname)
        fn(f"{sig} = ({types},)")
        fn()
        fn()
        fn(f"@njit({sig}, cache=True, error_model=\"numpy\")")
        fn(f"def {groups_fn}(")
        with fn.indented():
            names = ["g0", "g1", *free]
            for k in range(0, len(names), 6):
                fn(", ".join(names[k:k + 6]) + ",")
        fn("):")
        with fn.indented():
            fn(self.namer.string("Groups g0..g1-1; returns the first non-finite reward (rollout, group) or -1."))
        return fn.text() + body, free

    def store_prompt_states(self, scope: Scope) -> None:
        """A shaped group's per-prompt state updates, each kept where it is a finite number (the
        output holds the values the prompts entered with: runtime/kernel.py)."""
        o = self.out
        for name, _, update in self.ir.prompt_states:
            self.hoist(update, scope, "group")
            value = self.fresh("ps")
            o(f"{value} = {self.ex(update, 'group', scope)}")
            o(f"if np.isfinite({value}):")
            with o.indented():
                o(f"prompt_state_out[{self.prompt_state_rows[name]}, g] = {value}")

    def free_type(self, name: str) -> str:
        """The numba type of a batch-level name the group loop reads (an explicit signature compiles
        it once, not once per literal argument type)."""
        args = {a.name: a.numba_type for a in self.args}
        arrays = {line.split(" = ", 1)[0] for line in self.arrays}
        if name in args:
            return args[name]
        if name in arrays or name == "state_out":
            return "nt.float64[::1]"
        mangled = MANGLED.fullmatch(name)
        if name in ("n", "G", "width") or name in self.list_sizes.values():
            return "nt.int64"
        if mangled and mangled["kind"] in ("v", "st", "r", "b", "band"):  # batch lets, states, reductions, bands
            return "nt.float64"
        raise ShapecInternalError(f"shaper {self.ir.name!r}: the group loop reads {name!r}, of no known type")

    def dispatch_groups(self, o: Emitter, free: str) -> None:
        """Call the chunk function on all groups at once, or on chunks of groups across threads."""
        call = self.namer.derived("groups_", self.fname)
        if not self.parallel:
            o(f"bad_i, bad_g = {call}(0, G, {free})")
            return
        o(self.note(f"in parallel from {PARALLEL_MIN_ROLLOUTS} rollouts: a few chunks of groups per thread"))
        o(f"nchunks = min(G, 4 * nthreads) if n >= {PARALLEL_MIN_ROLLOUTS} else 1")
        o("if nchunks <= 1:")
        with o.indented():
            o(f"bad_i, bad_g = {call}(0, G, {free})")
        o("else:")
        with o.indented():
            o("bad = np.full((nchunks, 2), -1, np.int64)")
            o("for c in prange(nchunks):")
            with o.indented():
                o(f"bad_c = {call}(c * G // nchunks, (c + 1) * G // nchunks, {free})")
                o("bad[c, 0] = bad_c[0]")
                o("bad[c, 1] = bad_c[1]")
            o("for c in range(nchunks):  " + self.note("the first bad chunk holds the first bad reward"))
            with o.indented():
                o("if bad[c, 0] >= 0:")
                with o.indented():
                    o("bad_i = bad[c, 0]")
                    o("bad_g = bad[c, 1]")
                    o("break")

    def start_group(self, o: Emitter) -> int:
        """A group's bounds, its rollouts being i in range(s, e); returns where its code starts (read_params).

        They are unsigned: numba indexes an array by a signed integer through a wrap-around for
        negative ones (a compare, an add and a select on the array's length, which then stays in a
        register), which LLVM cannot drop, not knowing that offsets are never negative; an unsigned
        index is used as it is. Offsets are never negative, so every index is the same. Where an
        index meets a signed integer the code casts one side (np.int64, np.uint64): numba would
        make the mixed value a float64."""
        o("s = np.uint64(offsets[g])")
        o("e = np.uint64(offsets[g + 1])")
        return len(o.lines)

    def read_params(self, o: Emitter, mark: int) -> None:
        """At o.lines[mark], the start of a group's code, a read of each param that code reads.

        A param holds one value per group, so it is read once into a local (expressions.py,
        param_local). Read in place, inside a rollout loop, it was read again at every rollout,
        its column and 2-D offset with it: LLVM cannot tell that the loop's stores (to scratch rows
        that may alias any array) leave the params alone, so it cannot hoist the read."""
        _, loaded = _names_by_context("\n".join(o.lines[mark:]))
        column = "min(g, params.shape[1] - 1)"  # one column: the same params for every group
        o.lines[mark:mark] = ["    " * o.depth + f"{local} = params[{self.param_rows[name]}, {column}]"
                              for name, local in self.param_locals.items() if local in loaded]

    def lower_groups(self) -> None:
        ir, o = self.ir, self.out
        o("for g in range(g0, g1):")
        with o.indented():
            mark, depth = self.start_group(o), o.depth
            scope = Scope()
            if self.ir.channels and not self.global_channels:
                o(self.note("channels"))
                self.group_channels("local")
            self.lower_skips(scope)
            for step in ir.batch_steps:
                if step.kind is StepKind.GATE and step.name in self.gate_index:
                    o(f"gates[{self.gate_index[step.name]}, g] = k_gate_code({self.var(step.name)})")
            self.first_running = True
            self.first_factor = True
            self.summed: list[int] = []  # the terms emitted so far, in order (term_sum)
            for step in ir.steps:
                o(self.note(self.label(step)))
                getattr(self, f"step_{step.kind.value}")(step, scope)
            self.finish_group(scope)
            # each group starts with its lets and gates missing, as a fresh array slot would be (those
            # read somewhere: a let the params left unread is never computed, specialize.py)
            _, loaded = _names_by_context("\n".join(o.lines[mark - 3:]))
            o.lines[mark:mark] = ["    " * depth + f"{name} = nan" for name in self.group_locals if name in loaded]
            self.read_params(o, mark)

