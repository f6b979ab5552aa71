"""Expression emission: one IR expression as one Python expression over the kernel's names.

Parts that would nest deeper than SPILL_HEIGHT become temporaries (Emitter writes them just
before the first line that reads them), so no generated line reaches Python's parser limit.
"""

from __future__ import annotations

from ...ir.nodes import Node, Op, TypeKind
from ...ir.nodes import post_order
from .emitter import Scope, lit
from .names import ShapecInternalError

SPILL_HEIGHT = 24  # deepest nesting of one emitted expression (at most 4 brackets a level; Python allows 200)
CHAIN_PIECE = 64  # operands of one flat chain written on one line (Python's compiler recurses once per operand)
CMP_CODES = {"==": 0, "!=": 1, "<": 2, "<=": 3, ">": 4, ">=": 5}
UNARY_CALLS = {
    "abs": "abs({})", "exp": "np.exp({})", "log": "k_log({})", "sqrt": "k_sqrt({})",
    "sigmoid": "(1.0 / (1.0 + np.exp(-({}))))", "cos": "np.cos({})", "int": "np.trunc({})", "float": "({})",
    "missing": "k_flag(isnan({}))", "present": "k_flag(not isnan({}))",
}
BIN_OPS = ("+", "-", "*", "/", "**")
DEFINED_FORMS = (Op.CMP, Op.AND, Op.OR, Op.COND, Op.FALLBACK)  # written without the helper when no operand is missing


def _operands(node: Node) -> list[Node]:
    """The children an expression's code is made of (reductions and bands are names in scope)."""
    if node.op in (Op.REDUCE, Op.BREDUCE, Op.BANDFIELD):
        return []
    return [x for x in node.args if x.ty.kind is not TypeKind.BAND]


def _spills(root: Node) -> list[Node]:
    """The parts of an expression to write as temporaries, innermost first: every part whose
    code would nest SPILL_HEIGHT deep, counting from the last temporary below it."""
    height: dict[int, int] = {}
    out: list[Node] = []
    for n in post_order(root, _operands, height):
        h = 1 + max((height[id(c)] for c in _operands(n)), default=0)
        if h >= SPILL_HEIGHT and n is not root:
            out.append(n)
            h = 0
        height[id(n)] = h
    return out


class Expressions:
    """The part of StageLowering (stage.py) that writes expressions and reads stored values."""

    def index(self, ctx: str) -> str:
        return {"rollout": "i", "group": "g"}.get(ctx, "j")

    def read(self, storage: str, name: str, ctx: str) -> str:
        if storage == "scalar":
            return name
        if storage == "group":
            self.need_g(ctx)
            return f"{name}[g]"
        if storage == "group_local":
            self.need_g(ctx)
            return name
        if storage.startswith("term:") or storage.startswith("factor:"):
            kind, k = storage.split(":")
            return self.slot(kind, int(k))
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
        if op is Op.CONST:
            return lit(node.attr)
        if op is Op.REF:
            ns, name = node.attr
            if ns == "param":
                if ctx == "batch":  # a state update's param: one value for the whole call (params.state_params)
                    return f"params[{self.param_rows[name]}, 0]"
                return self.param_local(name)  # read once per group (groups.py, read_params)
            if ns == "input":
                return f"{self.input_names[name]}[i]"
            if ns == "var":
                return self.read(self.vars[name], self.var(name), ctx)
            if ns == "state":
                return self.state_names[name]
            if ns == "prompt_state":  # as the group's prompt entered the call
                self.need_g(ctx)
                return f"prompt_state_in[{self.prompt_state_rows[name]}, g]"
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
            if name == "position":
                return "float(i - s)"
            if name == "shaped":
                return "out[i]"
            raise ShapecInternalError(f"lowering: unknown reference {node.attr}")
        if op in (Op.REDUCE, Op.BREDUCE, Op.BANDFIELD):
            return self.scoped(node, scope)
        a = [self.ex_node(x, ctx, scope, memo) for x in _operands(node)]
        if op is Op.NEG:
            return f"(-{a[0]})"
        if op is Op.NOT:
            return f"(1.0 - {a[0]})"
        if op is Op.BIN:
            if node.attr not in BIN_OPS:
                raise ShapecInternalError(f"lowering: unknown operator {node.attr!r}")
            return f"k_pow({a[0]}, {a[1]})" if node.attr == "**" else self.flat_chain(a, f" {node.attr} ")
        defined = [self.definedness.defined(x) for x in _operands(node)] if op in DEFINED_FORMS else []
        if op is Op.CMP:
            if all(defined):
                return f"k_flag({a[0]} {node.attr} {a[1]})"
            return f"k_cmp({CMP_CODES[node.attr]}, {a[0]}, {a[1]})"
        if op in (Op.AND, Op.OR):  # numba walks the blocks of a short-circuit test recursively: a long one folds
            if all(defined) and len(a) <= SPILL_HEIGHT:
                joiner, test = (" and ", "{} != 0.0") if op is Op.AND else (" or ", "{} == 1.0")
                return "k_flag(" + joiner.join(test.format(x) for x in a) + ")"
            return self.nested_fold("k_and" if op is Op.AND else "k_or", a)
        if op is Op.COND:
            if defined[0] and self.definedness.clean(node.args[0]):  # certainly 0 or 1
                return f"({a[1]} if {a[0]} == 1.0 else {a[2]})"
            return f"k_cond({a[0]}, {a[1]}, {a[2]})"
        if op is Op.FALLBACK:
            return a[0] if defined[0] else f"k_fallback({a[0]}, {a[1]})"
        if op is Op.SKIPPED:
            code = self.ir.skip_reasons.index(node.attr) if node.attr in self.ir.skip_reasons else -2
            return f"k_flag(skip[g] == {code})"
        if op is Op.BAND:
            return f"k_band({a[0]}, {', '.join(self.scoped(node.args[1], scope))})"
        if op is Op.CALL:
            fn = node.attr
            if fn in ("min", "max"):
                return self.nested_fold(f"k_{fn}", a)
            if fn == "clip":
                return f"k_clip({a[0]}, {a[1]}, {a[2]})"
            if fn in ("missing", "present") and self.definedness.defined(node.args[0]):
                return "0.0" if fn == "missing" else "1.0"
            return UNARY_CALLS[fn].format(a[0])
        raise ShapecInternalError(f"lowering: unknown node {op}")

    def flat_chain(self, parts: list[str], operator: str) -> str:
        """`(a + b + c)`, which Python evaluates as the left fold `((a + b) + c)`, as the IR does; a
        long chain in pieces of CHAIN_PIECE operands, each a temporary the next piece starts from."""
        while len(parts) > CHAIN_PIECE:
            piece = self.fresh("t")
            self.pending[piece] = "(" + operator.join(parts[:CHAIN_PIECE]) + ")"
            parts = [piece, *parts[CHAIN_PIECE:]]
        return "(" + operator.join(parts) + ")"

    def nested_fold(self, fn: str, parts: list[str]) -> str:
        """`fn(fn(a, b), c)`: a long fold nests like a long chain, so every SPILL_HEIGHT calls the
        fold so far becomes a temporary."""
        out = parts[0]
        for k, x in enumerate(parts[1:], 1):
            if k % SPILL_HEIGHT == 0:
                out, self.pending[t] = (t := self.fresh("t")), out
            out = f"{fn}({out}, {x})"
        return out

    def param_local(self, name: str) -> str:
        """The local that holds a param's value in the group being shaped."""
        if name not in self.param_locals:
            self.param_locals[name] = self.namer.new("p", name)
        return self.param_locals[name]

    def scoped(self, node: Node, scope: Scope):
        """A value hoisted out of the current loop: a reduction, a batch reduction or a band."""
        key = self.key(node)
        if node.op is Op.BANDFIELD:
            key = self.key(node.args[0])
            return scope.names[key]["abf".index(node.attr)]
        value = scope.names[key]
        return value
