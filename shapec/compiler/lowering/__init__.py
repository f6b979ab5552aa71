"""Typed IR -> one readable Python module of numba @njit group kernels per shaper or pipeline.

The generated kernel mirrors runtime/interp.py statement by statement, but per group: batch
statements run first, then one loop over groups evaluates skips, lets, gates, terms, clamps and
factors with reductions over scratch buffers, and metrics run last. Every three-valued rule is a
small helper emitted into the module itself, so the module (and numba's on-disk cache of it)
depends on nothing else in shapec.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import math
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass

from .numba_helpers import HELPERS
from ..ir import CONST, GROUP, PARAM, ROLLOUT, Node, PipelineIR, ShaperIR, Step
from .names import MANGLED, TEMP, Namer, ShapecInternalError
from .schedule import fuse_block
from .verify import verify

SPILL_HEIGHT = 24  # deepest nesting of one emitted expression (at most 4 brackets a level; Python allows 200)


# ------------------------------------------------------------------ emitter
class Emitter:
    """Lines of Python with an indentation level.

    A temporary (names.TEMP) waiting in `pending` is written just before the first line that
    reads it, at that line's indentation: an expression can be split anywhere (its parts are
    pure) and each part still lands inside the loop that defines its indices.
    """

    def __init__(self, pending: dict[str, str] | None = None):
        self.lines: list[str] = []
        self.depth = 0
        self.pending = pending if pending is not None else {}

    def __call__(self, line: str = "") -> None:
        if self.pending and line and not line.startswith("#"):
            self.flush(line)
        self.lines.append(("    " * self.depth + line) if line else "")

    def flush(self, line: str) -> None:
        for name in TEMP.findall(line):
            code = self.pending.pop(name, None)
            if code is not None:
                self.flush(code)
                self.lines.append("    " * self.depth + f"{name} = {code}")

    @contextmanager
    def indented(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def lit(x: float) -> str:
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)


CMP_CODES = {"==": 0, "!=": 1, "<": 2, "<=": 3, ">": 4, ">=": 5}
UNARY_CALLS = {
    "abs": "abs({})", "exp": "np.exp({})", "log": "k_log({})", "sqrt": "k_sqrt({})",
    "sigmoid": "(1.0 / (1.0 + np.exp(-({}))))", "cos": "np.cos({})", "int": "np.trunc({})", "float": "({})",
    "missing": "k_flag(isnan({}))", "present": "k_flag(not isnan({}))",
}
BIN_OPS = ("+", "-", "*", "/", "**")
ROLLOUT_VALUED = ("minmax", "centered")
SORTED_OPS = ("median", "mad", "quantile", "nth_largest")  # read a sorted selection (srt_* helpers)
MUTATING_HELPERS = {"k_sort": (0,), **{f"srt_{op}": (1,) for op in SORTED_OPS}}  # helper -> arrays it fills


@dataclass(frozen=True)
class Arg:
    """One kernel argument: its name in the kernel, where it comes from, and its numba type."""

    name: str
    source: str  # rewards env_rewards offsets components use_components nthreads input meta band list_offsets list_field param state
    key: object = None
    numba_type: str = "nt.float64[::1]"


def _walk(node: Node):
    """Every node under node, parents first; a stack, not recursion, since expressions can be deep."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.args))


def _operands(node: Node) -> list[Node]:
    """The children an expression's code is made of (reductions and bands are names in scope)."""
    if node.op in ("reduce", "breduce", "bandfield"):
        return []
    return [x for x in node.args if x.ty.kind != "band"]


def _spills(root: Node) -> list[Node]:
    """The parts of an expression to write as temporaries, innermost first: every part whose
    code would nest SPILL_HEIGHT deep, counting from the last temporary below it."""
    height: dict[int, int] = {}
    out: list[Node] = []
    stack = [(root, False)]
    while stack:
        n, children_done = stack.pop()
        if id(n) in height:
            continue
        if not children_done:
            stack.append((n, True))
            stack.extend((c, False) for c in _operands(n) if id(c) not in height)
            continue
        h = 1 + max((height[id(c)] for c in _operands(n)), default=0)
        if h >= SPILL_HEIGHT and n is not root:
            out.append(n)
            h = 0
        height[id(n)] = h
    return out


def _steps_nodes(ir: ShaperIR):
    """Every expression of a shaper, with the statement it belongs to."""
    for _, node in ir.channels:
        yield node
    for step in (*ir.batch_steps, *ir.skips, *ir.steps):
        for n in (step.expr, step.on, step.when):
            if n is not None:
                yield n
        for _, _, w in step.rules:
            if w is not None:
                yield w
    if ir.result is not None:
        yield ir.result
    for _, node in ir.metrics:
        yield node


class Scope:
    """Reductions and band values already computed where the code is being emitted."""

    def __init__(self, names: dict | None = None):
        self.names: dict[tuple, object] = dict(names or {})


class StageLowering:
    """Lowers one shaper to one kernel function named `kernel_<prefix>`."""

    def __init__(self, ir: ShaperIR, fname: str, namer: Namer, parallel: bool = False):
        self.ir = ir
        self.fname = fname
        self.namer = namer
        self.parallel = parallel
        self.pending: dict[str, str] = {}  # temporaries not yet written (Emitter)
        self.out = self.emitter()
        self.var_names: dict[str, str] = {}
        self.keys: dict[int, int] = {}  # id(node) -> its structural identity as a small number
        self.interned: dict[tuple, int] = {}
        self.vars: dict[str, str] = {}  # var name -> storage: rollout, group, scalar, item:<list>, term:<k>, factor:<k>
        self.args: list[Arg] = []
        self.arrays: list[str] = []  # allocation lines for per-variable arrays of the whole batch
        self.chunk_arrays: list[str] = []  # ... and for group-sized scratch, one per chunk of groups
        self.plan_args()

    # ------------------------------------------------------------ arguments
    def plan_args(self) -> None:
        ir, new = self.ir, self.namer.new
        a = self.args
        a += [Arg("rewards", "rewards"), Arg("env_rewards", "env_rewards"),
              Arg("offsets", "offsets", numba_type="nt.int64[::1]"), Arg("components", "components"),
              Arg("use_components", "use_components", numba_type="nt.boolean")]
        if self.parallel:  # read in Python: numba.get_num_threads() inside a kernel defeats its cache
            a.append(Arg("nthreads", "nthreads", numba_type="nt.int64"))
        self.input_names = {}
        for name, _ in ir.inputs:
            self.input_names[name] = new("in", name)
            a.append(Arg(self.input_names[name], "input", name))
        metas, bands, lists = [], [], []
        for node in _steps_nodes(ir):
            for n in _walk(node):
                if n.op == "ref" and n.attr[0] == "meta" and n.attr[1] not in metas:
                    metas.append(n.attr[1])
                elif n.op == "bandref" and n.attr[0] == "meta" and n.attr[1] not in bands:
                    bands.append(n.attr[1])
                elif n.op == "ref" and n.attr[0] == "item":
                    lst = n.attr[1].split(".", 1)[0]
                    if lst not in lists:
                        lists.append(lst)
                elif n.op == "reduce" and n.attr[1] and n.attr[1] not in lists:
                    lists.append(n.attr[1])
        self.meta_names = {p: new("m", p) for p in metas}
        self.band_names = {p: new("bd", p) for p in bands}
        a += [Arg(v, "meta", p) for p, v in self.meta_names.items()]
        a += [Arg(v, "band", p, "nt.float64[:, ::1]") for p, v in self.band_names.items()]
        self.list_offsets: dict[str, str] = {}
        self.list_sizes: dict[str, str] = {}
        self.list_fields: dict[str, str] = {}
        spec = {m.name: m for m in ir.metas}
        for lst in lists:
            self.list_offsets[lst] = new("lo", lst)
            self.list_sizes[lst] = new("ni", lst)
            a.append(Arg(self.list_offsets[lst], "list_offsets", lst, "nt.int64[::1]"))
            for fld, _ in spec[lst].fields:
                self.list_fields[f"{lst}.{fld}"] = new("lf", f"{lst}_{fld}")
                a.append(Arg(self.list_fields[f"{lst}.{fld}"], "list_field", (lst, fld)))
        self.param_names = {}
        for ps in ir.params:
            self.param_names[ps.name] = new("p", ps.name)
            a.append(Arg(self.param_names[ps.name], "param", ps.name,
                         "nt.float64[:, ::1]" if ps.kind == "band" else "nt.float64[::1]"))
        self.state_names = {name: new("st", name) for name, _ in ir.states}
        a.append(Arg("state_in", "state"))
        # outputs, allocated by numpy (whose large arrays get transparent huge pages) and filled here
        a += [Arg("out", "out"), Arg("terms", "out_terms", numba_type="nt.float64[:, ::1]"),
              Arg("factors", "out_factors", numba_type="nt.float64[:, ::1]"),
              Arg("skip", "out_skip", numba_type="nt.int64[::1]"),
              Arg("gates", "out_gates", numba_type="nt.int64[:, ::1]"), Arg("metrics", "out_metrics")]

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
        if step.kind in ("let", "gate", "gaterules"):
            return f"{step.kind} {self.var(step.name)}"
        if step.kind == "state":
            return f"state {self.state_names[step.name]}"
        if step.kind == "skip":
            return f"skip {self.ir.skip_reasons.index(step.name)}"
        index = {"term": self.ir.terms, "factor": self.ir.factors}.get(step.kind)
        return f"{step.kind} {index.index(step.name)}" if index else step.kind

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
        """Where a let/gate value lives: per rollout values only metrics read stay in group scratch."""
        ty = node.ty
        if ty.items:
            return f"item:{ty.items}"
        if ty.level == ROLLOUT:
            return "rollout" if name in self.metric_vars else "local"
        if ty.level in (PARAM, GROUP):
            return "group"
        return "scalar"

    def alloc(self, storage: str, name: str) -> None:
        size = {"rollout": "n", "group": "G", "local": "width"}.get(storage)
        if size is None and storage.startswith("item:"):
            size = self.list_sizes[storage[5:]]
        if size is not None:
            lines = self.chunk_arrays if storage == "local" else self.arrays
            lines.append(f"{name} = np.full({size}, nan)")

    # ------------------------------------------------------------ expressions
    def index(self, ctx: str) -> str:
        return {"rollout": "i", "group": "g"}.get(ctx, "j")

    def read(self, storage: str, name: str, ctx: str) -> str:
        if storage == "scalar":
            return name
        if storage == "group":
            self.need_g(ctx)
            return f"{name}[g]"
        if storage.startswith("term:") or storage.startswith("factor:"):
            kind, k = storage.split(":")
            return f"{kind}s[{k}, i]"
        if storage == "rollout":
            return f"{name}[i]"
        if storage == "local":
            return f"{name}[i - s]"
        return f"{name}[j]"

    def need_g(self, ctx: str) -> None:
        if ctx == "batch":
            raise ShapecInternalError(f"shaper {self.ir.name!r}: a group value reached a batch-level statement")

    def ex(self, node: Node, ctx: str, scope: Scope) -> str:
        """node as one Python expression in ctx. Parts nested deeper than SPILL_HEIGHT become
        temporaries first, innermost first, so no line exceeds Python's nesting limit however
        long a chain the checker accepts, and no lowering recursion runs deeper than that."""
        memo: dict[int, str] = {}
        for part in _spills(node):
            name = self.fresh("t")
            self.pending[name] = self.ex_node(part, ctx, scope, memo)
            memo[id(part)] = name
        return self.ex_node(node, ctx, scope, memo)

    def ex_node(self, node: Node, ctx: str, scope: Scope, memo: dict[int, str]) -> str:
        if id(node) in memo:
            return memo[id(node)]
        op = node.op
        if op == "const":
            return lit(node.attr)
        if op == "ref":
            ns, name = node.attr
            if ns == "param":
                return self.read("group", self.param_names[name], ctx)
            if ns == "input":
                return f"{self.input_names[name]}[i]"
            if ns == "var":
                return self.read(self.vars[name], self.var(name), ctx)
            if ns == "state":
                return self.state_names[name]
            if ns == "meta":
                return self.read("group", self.meta_names[name], ctx)
            if ns == "item":
                return f"{self.list_fields[name]}[j]"
            if name == "reward":
                return "rewards[i]"
            if name == "env_reward":
                return "env_rewards[i]"
            if name == "group_size":
                self.need_g(ctx)
                return "float(offsets[g + 1] - offsets[g])"
            if name == "shaped":
                return "out[i]"
            raise ShapecInternalError(f"lowering: unknown reference {node.attr}")
        if op in ("reduce", "breduce", "bandfield"):
            return self.scoped(node, scope)
        a = [self.ex_node(x, ctx, scope, memo) for x in _operands(node)]
        if op == "neg":
            return f"(-{a[0]})"
        if op == "not":
            return f"(1.0 - {a[0]})"
        if op == "bin":
            if node.attr not in BIN_OPS:
                raise ShapecInternalError(f"lowering: unknown operator {node.attr!r}")
            return f"({a[0]} {node.attr} {a[1]})"
        if op == "cmp":
            return f"k_cmp({CMP_CODES[node.attr]}, {a[0]}, {a[1]})"
        if op == "and":
            return f"k_and({a[0]}, {a[1]})"
        if op == "or":
            return f"k_or({a[0]}, {a[1]})"
        if op == "cond":
            return f"k_cond({a[0]}, {a[1]}, {a[2]})"
        if op == "fallback":
            return f"k_fallback({a[0]}, {a[1]})"
        if op == "skipped":
            code = self.ir.skip_reasons.index(node.attr) if node.attr in self.ir.skip_reasons else -2
            return f"k_flag(skip[g] == {code})"
        if op == "band":
            return f"k_band({a[0]}, {', '.join(self.scoped(node.args[1], scope))})"
        if op == "call":
            fn = node.attr
            if fn in ("min", "max"):
                out = a[0]
                for k, x in enumerate(a[1:], 1):
                    if k % SPILL_HEIGHT == 0:  # a long fold nests like a long chain
                        out, self.pending[t] = (t := self.fresh("t")), out
                    out = f"k_{fn}({out}, {x})"
                return out
            if fn == "clip":
                return f"k_clip({a[0]}, {a[1]}, {a[2]})"
            return UNARY_CALLS[fn].format(a[0])
        raise ShapecInternalError(f"lowering: unknown node {op}")

    def scoped(self, node: Node, scope: Scope):
        """A value hoisted out of the current loop: a reduction, a batch reduction or a band."""
        key = self.key(node)
        if node.op == "bandfield":
            key = self.key(node.args[0])
            return scope.names[key]["abf".index(node.attr)]
        value = scope.names[key]
        return value

    # ------------------------------------------------------------ hoisting
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
                if n.op != "breduce":  # a batch reduction hoists its operands inside its own group loop
                    stack.extend((child, False) for child in reversed(n.args))
            elif n.op == "reduce":
                self.emit_reduce(n, scope)
            elif n.op == "breduce":
                self.emit_breduce(n, scope)
            elif n.ty.kind == "band" and n.op in ("bandref", "bandlit", "bandfallback", "bandcond"):
                self.emit_band(n, scope, level)

    def emit_band(self, node: Node, scope: Scope, level: str) -> None:
        o = self.out
        ctx = "group" if level == "group" else "batch"
        names = tuple(self.fresh("band") for _ in "abfp")
        if node.op == "bandref":
            ns, name = node.attr
            src = self.param_names[name] if ns == "param" else self.band_names[name]
            self.need_g(ctx)
            parts = [f"{src}[g, {c}]" for c in range(4)]
        elif node.op == "bandlit":
            parts = [self.ex(x, ctx, scope) for x in node.args] + ["1.0"]
        elif node.op == "bandfallback":
            x, y = (scope.names[self.key(n)] for n in node.args)
            parts = [f"{xc} if {x[3]} == 1.0 else {yc}" for xc, yc in zip(x, y)]
        else:
            c = self.ex(node.args[0], ctx, scope)
            x, y = (scope.names[self.key(n)] for n in node.args[1:])
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
        o(f"{k} = 0")
        o(header)
        with o.indented():
            # branch-free selection: write every value, advance past the selected ones only
            o(f"{vals}[{k}] = {self.ex(arg, ctx, scope)}")
            if indexed:
                o(f"{idx}[{k}] = {local}")
            unmasked = mask.op == "const" and mask.attr == 1.0
            o(f"{k} += 1" if unmasked else f"{k} += {self.ex(mask, ctx, scope)} == 1.0")
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

    def emit_reduce(self, node: Node, scope: Scope) -> None:
        o = self.out
        op, over = node.attr
        arg, mask, *extras = node.args
        header, _, ctx, _ = self.select_loop(over)
        name = self.fresh("r")
        vals, idx, k = self.selection(node, scope)
        if op in ROLLOUT_VALUED:
            storage = f"item:{over}" if over else ("rollout" if self.key(node) in self.stored else "local")
            self.alloc(storage, name)
            target = self.read(storage, name, ctx)
            value = self.ex(arg, ctx, scope)
            if op == "minmax":
                o(f"lo_ = red_min({vals}, {idx}, {k}, 0.0)")
                o(f"hi_ = red_max({vals}, {idx}, {k}, 0.0)")
                o(header)
                with o.indented():
                    o(f"{target} = nan if isnan(lo_) else (0.0 if hi_ == lo_ else ({value} - lo_) / (hi_ - lo_))")
            else:
                o(f"mean_ = red_mean({vals}, {idx}, {k}, 0.0)")
                o(header)
                with o.indented():
                    o(f"{target} = nan if isnan(mean_) else {value} - mean_")
            scope.names[self.key(node)] = target
            if self.key(node) in self.stored:
                self.stored[self.key(node)] = target
            return
        extra = self.ex(extras[0], "group", scope) if extras else "0.0"
        call = f"srt_{op}({vals}, tbuf, {k}, {extra})" if op in SORTED_OPS else f"red_{op}({vals}, {idx}, {k}, {extra})"
        if self.key(node) in self.stored:
            self.alloc("group", name)
            o(f"{name}[g] = {call}")
            scope.names[self.key(node)] = f"{name}[g]"
            self.stored[self.key(node)] = f"{name}[g]"
        else:
            o(f"{name} = {call}")
            scope.names[self.key(node)] = name

    def emit_breduce(self, node: Node, scope: Scope) -> None:
        o = self.out
        arg, mask = node.args
        name = self.fresh("b")
        o(self.note(f"batch.{_reduction(node.attr)}"))
        o("kb = 0")
        o("for g in range(G):")
        with o.indented():
            o("s = offsets[g]")
            o("e = offsets[g + 1]")
            inner = Scope(self.metric_names) if self.in_metrics else Scope()
            self.hoist(arg, inner, "group")
            self.hoist(mask, inner, "group")
            o("for i in range(s, e):")
            with o.indented():
                o(f"if {self.ex(mask, 'rollout', inner)} == 1.0:")
                with o.indented():
                    o(f"bbuf[kb] = {self.ex(arg, 'rollout', inner)}")
                    o("kb += 1")
        o(f"{name} = red_{node.attr}(bbuf, ibuf, kb, 0.0)")
        scope.names[self.key(node)] = name

    # ------------------------------------------------------------ statements
    def lower(self) -> str:
        ir = self.ir
        self.in_metrics = False
        metric_keys = {self.key(n) for _, m in ir.metrics for n in _walk(m) if n.op == "reduce"}
        self.metric_vars = {n.attr[1] for _, m in ir.metrics for n in _walk(m) if n.op == "ref" and n.attr[0] == "var"}
        self.stored: dict[int, str] = {k: "" for k in metric_keys}
        self.gate_index = {name: k for k, name in enumerate(ir.gate_reasons)}
        self.selection_ops: dict[tuple, list[str]] = {}  # selection -> the reductions reading it
        reductions = {self.key(n): n for node in _steps_nodes(ir) for n in _walk(node) if n.op == "reduce"}
        for n in reductions.values():
            self.selection_ops.setdefault(self.selection_key(n), []).append(n.attr[0])
        self.in_chunk = False
        for k, t in enumerate(ir.terms):
            self.vars[t] = f"term:{k}"
        for k, f in enumerate(ir.factors):
            self.vars[f] = f"factor:{k}"
        batch_code = self.out = self.emitter(1)
        batch = Scope()
        self.lower_channels(batch)
        self.lower_batch_steps(batch)
        groups = self.out = self.emitter(1)
        self.in_chunk = True
        self.lower_groups()
        groups.lines[1:] = fuse_block(groups.lines[1:], 2, MUTATING_HELPERS)
        self.in_chunk = False
        after = self.out = self.emitter(1)
        self.lower_metrics(batch)
        after("return state_out, bad_i, bad_g")
        if self.pending:
            raise ShapecInternalError(f"lowering: temporaries {sorted(self.pending)} were never written")
        chunk, free = self.chunk_function(groups.text())

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
                f"Fills out (n), terms ({len(ir.terms)}, n), factors ({len(ir.factors)}, n), skip (G), gates "
                f"({len(ir.gate_reasons)}, G) and metrics ({len(ir.metrics)}); returns the new state and the "
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
            scratch_used = _names(batch_code.text() + after.text())
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
        dispatch = self.emitter(1)
        self.dispatch_groups(dispatch, ", ".join(free))
        return chunk + "\n\n" + head.text() + batch_code.text() + dispatch.text() + after.text()

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
        head("tot = np.zeros(width)  " + self.note("the group's term sums"))
        head("run = np.zeros(width)  " + self.note("the group's running rewards"))
        head("base = np.zeros(width)  " + self.note("the reward entering the factors: they apply where it is > 0"))
        for line in self.chunk_arrays:
            head(line)
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

    def lower_channels(self, batch: Scope) -> None:
        """Channels for the whole batch up front when batch statements or metrics read them."""
        o = self.out
        names = {name for name, _ in self.ir.channels}
        outside = [*(s.expr for s in self.ir.batch_steps), *(m for _, m in self.ir.metrics)]
        self.global_channels = any(n.op == "ref" and n.attr[0] == "var" and n.attr[1] in names
                                   for node in outside for n in _walk(node))
        if not self.ir.channels or not self.global_channels:
            return
        o(self.note("channels"))
        o("for g in range(G):")
        with o.indented():
            o("s = offsets[g]")
            o("e = offsets[g + 1]")
            self.group_channels("rollout")

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
            if step.kind == "state":
                o(f"{self.state_names[step.name]} = {value}")
                o(f"state_out[{states.index(step.name)}] = {self.state_names[step.name]}")
            else:
                self.vars[step.name] = "scalar"
                o(f"{self.var(step.name)} = {value}")
        # constant lets and gates depend on nothing per group: compute them once, up front
        for step in self.ir.steps:
            if step.kind in ("let", "gate") and step.expr.ty.level == CONST and not step.expr.ty.items:
                self.hoist(step.expr, batch, "batch")
                self.vars[step.name] = "scalar"
                o(f"{self.var(step.name)} = {self.ex(step.expr, 'batch', batch)}")

    def lower_groups(self) -> None:
        ir, o = self.ir, self.out
        o("for g in range(g0, g1):")
        with o.indented():
            o("s = offsets[g]")
            o("e = offsets[g + 1]")
            scope = Scope()
            if self.ir.channels and not self.global_channels:
                o(self.note("channels"))
                self.group_channels("local")
            self.lower_skips(scope)
            for step in ir.batch_steps:
                if step.kind == "gate" and step.name in self.gate_index:
                    o(f"gates[{self.gate_index[step.name]}, g] = k_gate_code({self.var(step.name)})")
            self.first_running = True
            self.first_factor = True
            self.has_terms = False
            for step in ir.steps:
                o(self.note(self.label(step)))
                getattr(self, f"step_{step.kind}")(step, scope)
            self.finish_group(scope)

    def lower_skips(self, scope: Scope) -> None:
        ir, o = self.ir, self.out
        o("code = 0")
        config = [s for s in ir.skips if s.expr.ty.level <= PARAM]
        data = [s for s in ir.skips if s.expr.ty.level > PARAM]

        def apply(steps):
            for step in steps:
                self.hoist(step.expr, scope, "group")
                v = self.ex(step.expr, "group", scope)
                hit = f"{v} == 1.0" if step.mode == "when" else f"{v} != 1.0"
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

    def applies(self, step: Step, scope: Scope) -> str:
        """The `on` and `when` conditions as a prefix of `and`-ed tests (empty when there are none)."""
        parts = []
        if step.on is not None:
            on = self.ex(step.on, "rollout", scope)
            parts.append(f"float(i - s) == {on}" if step.on.ty.kind == "index" else f"{on} == 1.0")
        if step.when is not None:
            parts.append(f"{self.ex(step.when, 'rollout', scope)} == 1.0")
        return "".join(f"({p}) and " for p in parts)

    def step_let(self, step: Step, scope: Scope) -> None:
        o = self.out
        if step.name in self.vars:  # a constant, computed before the group loop
            return
        storage = self.storage(step.expr, step.name)
        self.vars[step.name] = storage
        self.alloc(storage, self.var(step.name))
        self.hoist(step.expr, scope, "group")
        if storage == "group":
            o(f"{self.var(step.name)}[g] = {self.ex(step.expr, 'group', scope)}")
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
        self.vars[step.name] = "group"
        self.alloc("group", self.var(step.name))
        reasons = self.ir.gate_reasons[step.name]
        for _, _, when in step.rules:
            if when is not None:
                self.hoist(when, scope, "group")
        o("decided = False")
        o(f"{self.var(step.name)}[g] = 0.0")
        o(f"gcode = {reasons.index('closed')}")
        for verdict, reason, when in step.rules:
            cond = "True" if when is None else f"{self.ex(when, 'group', scope)} == 1.0"
            o(f"if not decided and {cond}:  " + self.note(f"{verdict}: reason {reasons.index(reason)}"))
            with o.indented():
                o(f"{self.var(step.name)}[g] = {1.0 if verdict == 'open' else 0.0}")
                o(f"gcode = {reasons.index(reason)}")
                o("decided = True")
        o(f"gates[{self.gate_index[step.name]}, g] = gcode")

    def guarded(self, step: Step, scope: Scope, body, off) -> None:
        """Emit body() only for groups where every group-level conjunct of `when` is 1, else off().

        A conjunct that is 0 or missing makes the whole `when` not 1 (three-valued `and` is
        symmetric), so the statement cannot apply anywhere in the group: its reductions (sorts
        included) are skipped. Values hoisted inside the guard leave the scope with it, and a
        statement whose reductions a metric reads is never guarded.
        """
        conds = self.group_conjuncts(step.when)
        stored = any(self.key(n) in self.stored for x in (step.expr, step.on, step.when) if x is not None
                     for n in _walk(x))
        if not conds or stored:
            body()
            return
        o = self.out
        saved = dict(scope.names)
        guard = self.fresh("guard")  # a name of its own, so the scheduler can move it
        o(f"{guard} = True  " + self.note("the group-level conditions of when, cheapest first, while they hold"))
        for cond in conds:
            o(f"if {guard}:")
            with o.indented():
                self.hoist(cond, scope, "group")
                o(f"{guard} = {self.ex(cond, 'group', scope)} == 1.0")
        o(f"if {guard}:")
        with o.indented():
            body()
        o("else:")
        with o.indented():
            off()
        scope.names = saved

    def group_conjuncts(self, when: Node | None) -> list[Node]:
        """The conjuncts of `when` that hold or fail for a whole group, those without reductions first."""
        if when is None:
            return []
        out: list[Node] = []

        def flatten(n: Node) -> None:
            if n.op == "and":
                flatten(n.args[0])
                flatten(n.args[1])
            else:
                out.append(n)

        flatten(when)
        group = [c for c in out if c.ty.level <= GROUP and not c.ty.items]
        return sorted(group, key=lambda c: any(n.op in ("reduce", "breduce") for n in _walk(c)))

    def step_term(self, step: Step, scope: Scope) -> None:
        o = self.out
        k = self.ir.terms.index(step.name)
        total = "tot[i - s] + " if self.has_terms else ""

        def body():
            value = self.rollout_loop(step, scope)
            o("for i in range(s, e):")
            with o.indented():
                o(f"x = {value}")
                o(f"terms[{k}, i] = x if {self.applies(step, scope)}not isnan(x) else 0.0")
                o(f"tot[i - s] = {total}terms[{k}, i]")

        def off():
            o("for i in range(s, e):")
            with o.indented():
                o(f"terms[{k}, i] = 0.0")
                if not total:
                    o("tot[i - s] = 0.0")

        self.guarded(step, scope, body, off)
        self.has_terms = True

    def start_running(self) -> None:
        """The running reward: the input reward plus the term sum, from the first clamp or factor on."""
        if self.first_running:
            self.out(f"run[i - s] = rewards[i]{' + tot[i - s]' if self.has_terms else ''}")

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

        def body():
            m = self.rollout_loop(step, scope)
            o("for i in range(s, e):")
            with o.indented():
                preamble()
                o(f"m = {m}")
                o(f"applied = {self.applies(step, scope)}not isnan(m) and base[i - s] > 0.0")
                o(f"factors[{k}, i] = m if applied else 1.0")
                o("run[i - s] = run[i - s] * m if applied else run[i - s]")

        def off():
            o("for i in range(s, e):")
            with o.indented():
                preamble()
                o(f"factors[{k}, i] = 1.0")

        self.guarded(step, scope, body, off)
        self.first_running = False
        self.first_factor = False

    def finish_group(self, scope: Scope) -> None:
        ir, o = self.ir, self.out
        o(self.note("the group's rewards; a skipped group passes through"))
        if ir.result is not None:
            self.hoist(ir.result, scope, "group")
            final = self.ex(ir.result, "rollout", scope)
        elif not self.first_running:
            final = "run[i - s]"
        else:
            final = "rewards[i] + tot[i - s]" if self.has_terms else "rewards[i]"
        o("if code == 0:")
        with o.indented():
            o("for i in range(s, e):")
            with o.indented():
                o(f"out[i] = {final}")
                o("if bad_i < 0 and not np.isfinite(out[i]):")
                with o.indented():
                    o("bad_i = i")
                    o("bad_g = g")
        o("else:")
        with o.indented():
            o("for i in range(s, e):")
            with o.indented():
                o("out[i] = rewards[i]")
                for k in range(len(ir.terms)):
                    o(f"terms[{k}, i] = 0.0")
                for k in range(len(ir.factors)):
                    o(f"factors[{k}, i] = 1.0")
            for k in range(len(ir.gate_reasons)):
                o(f"gates[{k}, g] = -1")

    def lower_metrics(self, batch: Scope) -> None:
        o = self.out
        self.in_metrics = True
        self.metric_names = {k: v for k, v in self.stored.items() if v}
        for k, (name, node) in enumerate(self.ir.metrics):
            o(self.note(f"metric {k}"))
            self.hoist(node, batch, "batch")
            o(f"metrics[{k}] = {self.ex(node, 'batch', batch)}")


PARALLEL_MIN_ROLLOUTS = 4096  # below this, waking threads costs more than it saves (benchmarks/)
# prange only: numba's other parallel rewrites would turn every np.full into a parfor (slow to compile, no gain)
PARALLEL_OPTION = (', parallel={"prange": True, "comprehension": False, "reduction": False, "inplace_binop": False, '
                   '"setitem": False, "numpy": False, "stencil": False, "fusion": False}')
_IMPORTS = ("np", "inf", "isnan", "nan", "njit", "nt", "prange")
HELPER_FUNCTIONS = tuple(b.split("def ", 1)[1].split("(", 1)[0] for b in HELPERS.split("\n\n\n") if "def " in b)
MODULE_NAMES = frozenset((*_IMPORTS, *dir(builtins), *HELPER_FUNCTIONS))
REDUCTION_OPS = frozenset((*ROLLOUT_VALUED, *(f.split("_", 1)[1] for f in HELPER_FUNCTIONS if f.startswith(("red_", "srt_")))))


def _reduction(op: str) -> str:
    """A reduction's name, for a comment: only one the helpers implement."""
    if op not in REDUCTION_OPS:
        raise ShapecInternalError(f"lowering: unknown reduction {op!r}")
    return op


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


def _header(body: str) -> str:
    return f"# shapec-sha256: {hashlib.sha256(body.encode()).hexdigest()}\n"


def _lower_all(ir: ShaperIR | PipelineIR, parallel: bool = False) -> tuple[str, list[StageLowering]]:
    """The verified module and the lowering of each stage (whose args build.py reads)."""
    namer = Namer()
    o = Emitter()
    o(namer.string(f"Generated by shapec{' (parallel kernels)' if parallel else ''}. Do not edit."))
    o()
    o("import numpy as np")
    o("from math import inf, isnan, nan")
    o(f"from numba import {'njit, prange' if parallel else 'njit'}, types as nt")
    kernels = ""
    stages = []
    for shaper in [s for s, _ in ir.stages] if isinstance(ir, PipelineIR) else [ir]:
        low = StageLowering(shaper, namer.new("s", shaper.name), namer, parallel)
        code = low.lower()
        kernels += f"\n\n{namer.derived('SIG_', low.fname)} = {low.signature()}\n\n\n" + code
        stages.append(low)
    return verify(o.text() + _used_helpers(kernels) + kernels, namer), stages


def _used_helpers(code: str) -> str:
    """The helpers the kernels call, with the helpers those call (fewer dispatchers to load)."""
    blocks = [b for b in HELPERS.split("\n\n\n") if b.strip()]
    named = {b.split("def ", 1)[1].split("(", 1)[0]: b for b in blocks}
    wanted: set[str] = set()
    todo = [code]
    while todo:
        text = todo.pop()
        for name, block in named.items():
            if name not in wanted and f"{name}(" in text:
                wanted.add(name)
                todo.append(block.split("def ", 1)[1].split(":", 1)[1])
    return "\n\n\n".join(b for n, b in named.items() if n in wanted) + "\n"


def emit_python(ir: ShaperIR | PipelineIR, parallel: bool = False) -> str:
    """The generated module's source, verified, as written to the cache (without the hash header)."""
    return _lower_all(ir, parallel)[0]
