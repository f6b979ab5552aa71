"""Reference interpreter of the typed IR: plain NumPy over the whole batch.

It is the oracle the numba kernels are tested against, so it favours the obvious
formulation: sums and means accumulate left to right in rollout order, exactly as the
kernels do, and every three-valued rule is written out once in `ops`.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field

import numpy as np

from ..ir.nodes import BATCH, CONST, GROUP, Node, Op, PARAM, ROLLOUT, ShaperIR, Type, StepKind, TypeKind
from .batch import Batch
from ..ir.powers import c_pow
from ..ir.values import band_multiplier, k_and, k_cmp, k_or, reduce_values, seq_sum, state_update

NAN = math.nan


@dataclass(slots=True)
class StageOutput:
    rewards: np.ndarray
    terms: dict[str, np.ndarray]
    factors: dict[str, np.ndarray]
    skip_codes: np.ndarray  # (G,) index into ir.skip_reasons; 0 = shaped
    gate_codes: dict[str, np.ndarray]  # name -> (G,) index into ir.gate_reasons[name]; -1 = group skipped
    metrics: dict[str, float]
    state: dict[str, float] = field(default_factory=dict)
    kept: np.ndarray | None = None  # (n,) bool, False where `drop when` holds; None: the shaper drops nothing
    prompt_state: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (G,) each group's prompt's next value


_ELEMENTWISE_POW = np.frompyfunc(c_pow, 2, 1)


def power(a, b) -> np.ndarray:
    """Elementwise C pow (ir/powers.py says why not np.power) of two broadcastable float arrays, as float64."""
    return np.asarray(_ELEMENTWISE_POW(a, b), dtype=np.float64)


ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": np.true_divide, "**": power}


class Interpreter:
    def __init__(self, ir: ShaperIR, batch: Batch, params: dict[str, np.ndarray], state: dict[str, float],
                 call_params: dict[str, float] | None = None, prompt_state: dict[str, np.ndarray] | None = None):
        """`params`: each param's column of G values; `call_params`: the call's one value of each
        param (params.Resolved.uniform), which a state update reads even on a call of no groups;
        `prompt_state`: each per-prompt state's (G,) values, as each group's prompt entered the call."""
        self.ir = ir
        self.b = batch
        self.P = params
        self.call_params = call_params or {}
        self.state = dict(state)
        self.prompt_state = prompt_state or {}
        self.G = batch.groups
        self.gidx = batch.group_index()
        self.local = np.arange(batch.n) - batch.offsets[:-1][self.gidx]
        self.items = {name: (off, np.repeat(np.arange(self.G), np.diff(off))) for name, (off, _) in batch.lists.items()}
        self.env: dict[str, np.ndarray | float] = {}
        self.cache: dict[tuple, np.ndarray | float] = {}

    # ----------------------------------------------------------- shapes
    def shape_of(self, ty: Type):
        if ty.level in (CONST, BATCH):
            return None
        if ty.level in (PARAM, GROUP):
            return "group"
        return ty.items or "rollout"

    def lift(self, v, src: Type, dst: Type):
        s, d = self.shape_of(src), self.shape_of(dst)
        if np.ndim(v) == 0:
            s = None
        if s == d:
            return v
        if s is None:
            if d is None:
                return v
            size = {"group": self.G, "rollout": self.b.n}.get(d)
            if size is None:
                size = int(self.items[d][0][-1])
            return np.full(size, float(v))
        if s == "group":
            return v[self.gidx] if d == "rollout" else v[self.items[d][1]]
        raise AssertionError(f"cannot lift {s} to {d}")

    def at(self, node: Node, dst: Type):
        return self.lift(self.eval(node), node.ty, dst)

    # ----------------------------------------------------------- expressions
    def eval(self, node: Node):
        op = node.op
        if op in (Op.REDUCE,):
            key = node.key()
            if key not in self.cache:
                self.cache[key] = self.reduce(node)
            return self.cache[key]
        ty = node.ty
        if op is Op.CONST:
            return float(node.attr)
        if op is Op.REF:
            ns, name = node.attr
            if ns == "param":
                return self.P[name]
            if ns == "input":
                return self.b.inputs[name]
            if ns in ("var",):
                return self.env[name]
            if ns == "state":
                return self.state[name]
            if ns == "prompt_state":
                return self.prompt_state[name]
            if ns == "meta":
                return self.b.metas[name]
            if ns == "item":
                lst, fld = name.split(".", 1)
                return self.b.lists[lst][1][fld]
            if name == "reward":
                return self.b.rewards
            if name == "env_reward":
                return self.b.env_rewards if self.b.env_rewards is not None else self.b.rewards
            if name == "group_size":
                return np.diff(self.b.offsets).astype(np.float64)
            if name == "position":
                return self.local.astype(np.float64)
            if name == "shaped":
                return self.env["__shaped__"]
        if op is Op.NEG:
            return -self.eval(node.args[0])
        if op is Op.NOT:
            return 1.0 - self.eval(node.args[0])
        if op is Op.BREDUCE:
            return self.batch_reduce(node)
        if op is Op.SKIPPED:
            codes = self.env["__skip_codes__"]
            wanted = self.ir.skip_reasons.index(node.attr) if node.attr in self.ir.skip_reasons else -2
            return (codes[self.gidx] == wanted).astype(np.float64)
        if op is Op.BANDFIELD:
            band = self.band(node.args[0], ty)
            return band[..., "abf".index(node.attr)]
        args = [self.at(a, ty) if a.ty.kind is not TypeKind.BAND else None for a in node.args]
        if op is Op.BIN:  # a chain of + or * is the left fold of its args
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return functools.reduce(ARITHMETIC[node.attr], args)
        if op is Op.CMP:
            return k_cmp(node.attr, *[self.at(a, ty) for a in node.args])
        if op is Op.AND:
            return functools.reduce(k_and, args)
        if op is Op.OR:
            return functools.reduce(k_or, args)
        if op is Op.COND:
            c, a, b = args
            return np.where(c == 1, a, np.where(c == 0, b, NAN))
        if op is Op.FALLBACK:
            a, b = args
            return np.where(np.isnan(a), b, a)
        if op is Op.CALL:
            return self.call(node.attr, args)
        if op is Op.BAND:
            x = args[0]
            band = self.band(node.args[1], ty)
            return band_multiplier(x, band[..., 0], band[..., 1], band[..., 2], band[..., 3])
        raise AssertionError(f"interpreter: unknown node {op}")

    def band(self, node: Node, dst: Type) -> np.ndarray:
        """A band value as an array of (a, b, f, present) rows, lifted to dst's shape."""
        op = node.op
        if op is Op.BANDREF:
            ns, name = node.attr
            rows = self.P[name] if ns == "param" else self.b.bands[name]
        elif op is Op.BANDLIT:
            parts = [self.at(a, Type(TypeKind.NUM, max(a.ty.level, PARAM))) for a in node.args]
            rows = np.stack(parts + [np.ones(self.G)], axis=-1)
        elif op is Op.BANDFALLBACK:
            a = self.band(node.args[0], Type(TypeKind.BAND, GROUP))
            b = self.band(node.args[1], Type(TypeKind.BAND, GROUP))
            rows = np.where((a[:, 3] == 1)[:, None], a, b)
        elif op is Op.BANDCOND:
            c = self.at(node.args[0], Type(TypeKind.NUM, GROUP))
            a = self.band(node.args[1], Type(TypeKind.BAND, GROUP))
            b = self.band(node.args[2], Type(TypeKind.BAND, GROUP))
            none = np.tile([NAN, NAN, NAN, 0.0], (self.G, 1))
            rows = np.where((c == 1)[:, None], a, np.where((c == 0)[:, None], b, none))
        else:
            raise AssertionError(f"interpreter: unknown band node {op}")
        shape = self.shape_of(dst)
        if shape is None:  # a constant or batch-level band: every group holds the same row
            return rows[0] if len(rows) else np.array([NAN, NAN, NAN, 0.0])
        if shape == "rollout":
            return rows[self.gidx]
        if shape not in (None, "group"):
            return rows[self.items[shape][1]]
        return rows

    def call(self, fn: str, args):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # ties keep the left operand (k_min, k_max, k_clip): 0.0 and -0.0 are equal, and
            # np.minimum/np.maximum leave which of them comes out to the platform
            if fn == "min":
                out = args[0]
                for a in args[1:]:
                    out = np.where(np.isnan(out) | np.isnan(a), NAN, np.where(out <= a, out, a))
                return out
            if fn == "max":
                out = args[0]
                for a in args[1:]:
                    out = np.where(np.isnan(out) | np.isnan(a), NAN, np.where(out >= a, out, a))
                return out
            if fn == "clip":
                x, lo, hi = args
                y = np.where(x >= lo, x, lo)
                return np.where(np.isnan(x) | np.isnan(lo) | np.isnan(hi), NAN, np.where(y <= hi, y, hi))
            x = args[0]
            if fn == "abs":
                return np.abs(x)
            if fn == "exp":
                return np.exp(x)
            if fn == "log":
                return np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), NAN)
            if fn == "sqrt":
                return np.where(x >= 0, np.sqrt(np.where(x >= 0, x, 0.0)), NAN)
            if fn == "sigmoid":
                return 1.0 / (1.0 + np.exp(-x))
            if fn == "cos":
                return np.cos(x)
            if fn == "int":
                return np.trunc(x)
            if fn == "float":
                return x
            if fn == "missing":
                return np.isnan(x).astype(np.float64)
            if fn == "present":
                return (~np.isnan(x)).astype(np.float64)
        raise AssertionError(f"interpreter: unknown builtin {fn}")

    def reduce(self, node: Node):
        op, over = node.attr
        arg = self.eval(node.args[0])
        elem_ty = node.args[0].ty
        arg = self.lift(arg, elem_ty, elem_ty)
        mask = self.lift(self.eval(node.args[1]), node.args[1].ty, elem_ty)
        extras = [self.lift(self.eval(e), e.ty, Type(TypeKind.NUM, GROUP)) for e in node.args[2:]]
        offsets = self.b.offsets if not over else self.items[over][0]
        if op in ("minmax", "centered", "rank"):
            out = np.full(len(arg), NAN)
        else:
            out = np.full(self.G, NAN)
        with np.errstate(over="ignore", invalid="ignore"):  # as reduce_values: minmax and centered may overflow
            for g in range(self.G):
                s, e = offsets[g], offsets[g + 1]
                sel = arg[s:e][mask[s:e] == 1]
                if op == "minmax":  # (x - min) / (max - min), with the language's min and max (first of equal values)
                    lo, hi = reduce_values("min", sel, ()), reduce_values("max", sel, ())
                    if not math.isnan(lo):
                        out[s:e] = 0.0 if hi == lo else (arg[s:e] - lo) / (hi - lo)
                elif op == "centered":
                    if len(sel) and not np.isnan(sel).any():
                        out[s:e] = arg[s:e] - seq_sum(sel) / len(sel)
                elif op == "rank":  # ascending, equal values in rollout order; missing outside the mask
                    if len(sel) and not np.isnan(sel).any():
                        ranks = np.empty(len(sel))
                        ranks[np.argsort(sel, kind="stable")] = np.arange(len(sel))
                        out[s:e][mask[s:e] == 1] = ranks
                else:
                    out[g] = reduce_values(op, sel, tuple(float(x[g]) for x in extras))
                    if op in ("argmin", "argmax") and not np.isnan(out[g]):
                        # an index into the group (or item list), not into the masked selection
                        out[g] = float(np.flatnonzero(mask[s:e] == 1)[int(out[g])])
        return out

    def batch_reduce(self, node: Node) -> float:
        arg = self.at(node.args[0], Type(TypeKind.NUM, ROLLOUT))
        mask = self.at(node.args[1], Type(TypeKind.NUM, ROLLOUT))
        return reduce_values(node.attr, arg[mask == 1], ())

    def state_value(self, node: Node) -> float:
        """A state update's value: the params it reads are one value for the whole call
        (params.state_params), so it is evaluated as for one group with the call's own values
        where given (a call of no groups has no column of them), else the first group's."""
        columns, groups = self.P, self.G
        self.P = {**columns, **{name: np.array([v], dtype=np.float64) for name, v in self.call_params.items()}}
        self.G = max(groups, 1)
        try:
            value = self.eval(node)
        finally:
            self.P, self.G = columns, groups
        return float(np.ravel(value)[0]) if np.ndim(value) else float(value)

    # ----------------------------------------------------------- statements
    def gate_code(self, value) -> np.ndarray:
        """open 0, closed 1, missing 2: the codes of a simple gate's reasons."""
        v = np.broadcast_to(np.asarray(value, dtype=np.float64), (self.G,))
        return np.where(v == 1, 0, np.where(v == 0, 1, 2)).astype(np.int64)

    def run(self, training: bool = True) -> StageOutput:
        ir, b, G, n = self.ir, self.b, self.G, self.b.n
        skip_codes = np.zeros(G, dtype=np.int64)
        gate_codes = {name: np.full(G, -1, dtype=np.int64) for name in ir.gate_reasons}
        if not training:
            skip_codes[:] = ir.skip_reasons.index("validation")
            return StageOutput(b.rewards.copy(), {t: np.zeros(n) for t in ir.terms},
                               {f: np.ones(n) for f in ir.factors}, skip_codes, gate_codes, {}, dict(self.state),
                               prompt_state=dict(self.prompt_state))
        for name, node in ir.channels:
            self.env[name] = self.eval(node)
        for step in ir.batch_steps:
            if step.kind is StepKind.STATE:
                self.state[step.name] = state_update(self.state[step.name], self.state_value(step.expr))
                continue
            value = self.env[step.name] = self.eval(step.expr)
            if step.kind is StepKind.GATE:
                gate_codes[step.name] = self.gate_code(value)
        self.decide_skips(skip_codes)
        # sums and products of finite terms and factors may pass float64: a non-finite reward is refused below
        with np.errstate(over="ignore", invalid="ignore"):
            shaped = self.shape(gate_codes)
        live = (skip_codes == 0)[self.gidx]
        rewards = np.where(live, shaped["rewards"], b.rewards)
        terms = {t: np.where(live, v, 0.0) for t, v in shaped["terms"].items()}
        factors = {f: np.where(live, v, 1.0) for f, v in shaped["factors"].items()}
        for codes in gate_codes.values():
            codes[skip_codes != 0] = -1
        bad = live & ~np.isfinite(rewards)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FloatingPointError(
                f"shaper {ir.name!r} produced a non-finite reward for rollout {i} (group {int(self.gidx[i])}); "
                "guard the division or reduction that can be undefined")
        self.env["__shaped__"] = rewards
        self.env["__skip_codes__"] = skip_codes
        self.env.update(terms)
        self.env.update(factors)
        metrics = {name: float(self.eval(node)) for name, node in ir.metrics}
        dropped = None if ir.drop is None else self.at(ir.drop, Type(TypeKind.NUM, ROLLOUT)) == 1
        kept = None if dropped is None else ~(live & dropped)  # missing: kept
        return StageOutput(rewards, terms, factors, skip_codes, gate_codes, metrics, dict(self.state), kept,
                           self.prompt_updates(skip_codes == 0))

    def prompt_updates(self, shaped: np.ndarray) -> dict[str, np.ndarray]:
        """Each per-prompt state's next value per group: its update where the group was shaped and the
        update is a finite number, else the value the prompt entered with (all updates read those)."""
        out = {}
        for name, _, update in self.ir.prompt_states:
            with np.errstate(all="ignore"):
                new = np.asarray(self.at(update, Type(TypeKind.NUM, GROUP)), dtype=np.float64)
            old = self.prompt_state[name]
            out[name] = np.where(shaped & np.isfinite(new), new, old)
        return out

    def decide_skips(self, codes: np.ndarray) -> None:
        ir, b = self.ir, self.b
        order = [(s, ir.skip_reasons.index(s.name)) for s in ir.skips]
        config = [(s, c) for s, c in order if s.expr.ty.level <= PARAM]
        data = [(s, c) for s, c in order if s.expr.ty.level > PARAM]

        def apply(steps):
            for step, code in steps:
                v = np.broadcast_to(self.lift(self.eval(step.expr), step.expr.ty, Type(TypeKind.NUM, GROUP)), (self.G,))
                hit = (v == 1) if step.mode == "when" else (v != 1)
                codes[(codes == 0) & hit] = code

        apply(config)
        if ir.requires == "binary":
            r = b.rewards
            bad = ~((np.abs(r) <= 1e-6) | (np.abs(r - 1.0) <= 1e-6))
            if b.components is not None:
                bad |= b.components > 0
            per_group = np.zeros(self.G, dtype=bool)
            np.logical_or.at(per_group, self.gidx, bad)
            codes[(codes == 0) & per_group] = ir.skip_reasons.index("non_binary")
        apply(data)

    def shape(self, gate_codes) -> dict:
        ir, b = self.ir, self.b
        rollout = Type(TypeKind.NUM, ROLLOUT)
        terms: dict[str, np.ndarray] = {}
        factors: dict[str, np.ndarray] = {}
        total = None  # sum of terms, accumulated left to right
        r = None  # the running reward, from the first clamp or factor on
        base = None

        def settled(running):
            """The running reward: reward + the term sum once the terms are done."""
            if running is not None:
                return running
            return b.rewards + total if total is not None else b.rewards.copy()

        for step in ir.steps:
            if step.kind is StepKind.LET:
                self.env[step.name] = self.eval(step.expr)
            elif step.kind is StepKind.GATE:
                value = self.eval(step.expr)
                self.env[step.name] = value
                if step.name in gate_codes:
                    gate_codes[step.name] = self.gate_code(self.lift(value, step.expr.ty, Type(TypeKind.NUM, GROUP)))
            elif step.kind is StepKind.GATERULES:
                self.gate_rules(step, gate_codes)
            elif step.kind is StepKind.TERM:
                value = self.at(step.expr, rollout)
                applied = self.applies(step) & ~np.isnan(value)
                arr = np.where(applied, value, 0.0)
                terms[step.name] = arr
                self.env[step.name] = arr
                total = arr.copy() if total is None else total + arr
            elif step.kind is StepKind.CLAMP:
                r = settled(r)
                lo = self.at(step.expr, rollout)
                hit = self.applies(step) & ~np.isnan(lo) & (r < lo)
                r = np.where(hit, lo, r)
            elif step.kind is StepKind.FACTOR:
                r = settled(r)
                if base is None:  # factors apply where the reward entering them is > 0
                    base = r.copy()
                m = self.at(step.expr, rollout)
                applied = self.applies(step) & ~np.isnan(m) & (base > 0)
                factors[step.name] = np.where(applied, m, 1.0)
                self.env[step.name] = factors[step.name]
                r = np.where(applied, r * m, r)
        if ir.result is not None:  # fails closed: a missing result leaves the reward as it came in
            r = self.at(ir.result, rollout)
            r = np.where(np.isnan(r), self.b.rewards, r)
        else:
            r = settled(r)
        return {"rewards": r, "terms": terms, "factors": factors}

    def applies(self, step) -> np.ndarray:
        n = self.b.n
        sel = np.ones(n, dtype=bool)
        if step.on is not None:
            if step.on.ty.kind is TypeKind.INDEX:
                idx = self.lift(self.eval(step.on), step.on.ty, Type(TypeKind.NUM, ROLLOUT))
                sel = self.local == idx
            else:
                sel = self.at(step.on, Type(TypeKind.NUM, ROLLOUT)) == 1
        if step.when is not None:
            sel = sel & (self.at(step.when, Type(TypeKind.NUM, ROLLOUT)) == 1)
        return sel

    def gate_rules(self, step, gate_codes) -> None:
        G = self.G
        decided = np.zeros(G, dtype=bool)
        value = np.zeros(G)
        codes = np.full(G, -1, dtype=np.int64)
        reasons = self.ir.gate_reasons[step.name]
        for verdict, reason, when in step.rules:
            hit = np.ones(G, dtype=bool) if when is None else (
                np.broadcast_to(self.lift(self.eval(when), when.ty, Type(TypeKind.NUM, GROUP)), (G,)) == 1)
            new = hit & ~decided
            value[new] = 1.0 if verdict == "open" else 0.0
            codes[new] = reasons.index(reason)
            decided |= new
        codes[~decided] = reasons.index("closed")
        self.env[step.name] = value
        gate_codes[step.name] = codes
