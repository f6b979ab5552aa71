"""A small generator of well-typed .shape source from the language's constructs, for the
differential tests (the kernels against the interpreter) and the tests built on them."""

from __future__ import annotations

import random

from hypothesis import strategies as st

class SpecWriter:
    """Writes a random well-typed shaper from the language's constructs.

    `pick(options)` and `coin()` come from hypothesis (so failures shrink) or from a seeded
    random.Random (for the fixed set compiled once). Every rollout expression is unitless
    (lengths enter through float(...)); terms are clipped so most batches stay finite.
    """

    def __init__(self, pick, depth: int = 2):
        self.pick = pick
        self.depth = depth
        self.lets_r: list[str] = []  # rollout-level numeric lets
        self.lets_g: list[str] = []  # group-level numeric lets
        self.masks: list[str] = ["right", "flag", "fx > 0"]
        self.gates_g: list[str] = []
        self.terms: list[str] = []

    def coin(self, p_true: float = 0.5) -> bool:
        return self.pick([True, False]) if p_true == 0.5 else self.pick([True] * int(p_true * 10) + [False] * (10 - int(p_true * 10)))

    def lit(self) -> str:
        return self.pick(["0", "1", "2", "0.5", "3", "1.5", "0.25"])

    # --- expressions (strict: certainly rollout-level, as reductions, masks and `on` need)
    def rollout(self, d: int, strict: bool = True) -> str:
        leaves = ["fx", "fy", "ft", "score", "reward", "env_reward"] + self.lets_r
        if not strict:
            leaves += [self.lit(), "c1", "c2"]
        if d <= 0:
            return self.pick(leaves)
        kind = self.pick(["leaf", "bin", "bin", "neg", "call", "cond", "fallback", "group", "minmax", "centered",
                          "rank", "position", "band", "pow"])
        if kind == "leaf":
            return self.pick(leaves)
        if kind == "bin":
            a, b = self.rollout(d - 1), self.rollout(d - 1, strict=False)
            a, b = (a, b) if self.coin() else (b, a)
            return f"({a} {self.pick(['+', '-', '*', '/'])} {b})"
        if kind == "neg":
            return f"-{self.rollout(d - 1, strict)}"
        if kind == "call":
            fn = self.pick(["abs", "sqrt", "log", "sigmoid", "cos", "int", "min", "max", "clip", "exp"])
            if fn in ("min", "max"):
                return f"{fn}({self.rollout(d - 1)}, {self.rollout(d - 1, strict=False)})"
            if fn == "clip":
                return f"clip({self.rollout(d - 1)}, 0, {self.lit()})"
            if fn == "exp":
                return f"exp(-abs({self.rollout(d - 1)}))"
            return f"{fn}({self.rollout(d - 1)})"
        if kind == "cond":
            return f"({self.rollout_bool(d - 1, strict=False)} ? {self.rollout(d - 1)} : {self.rollout(d - 1, strict=False)})"
        if kind == "fallback":
            return f"({self.rollout(d - 1)} ?? {self.rollout(d - 1, strict=False)})"
        if kind == "group" and not strict:
            return self.group(d - 1)
        if kind in ("minmax", "centered", "rank"):
            return f"{kind}({self.rollout(d - 1)} where {self.rollout_bool(d - 1)})"
        if kind == "position":
            return "position"
        if kind == "band":
            return f"band({self.rollout(d - 1)}, {self.band()})"
        return f"({self.rollout(d - 1)} ** {self.pick(['2', '0.5', '-1', 'c2'])})"

    def group(self, d: int) -> str:
        leaves = ["group_size", "c1", "c2", "lim", "(lim ?? c1)", "prof.cap", "float(count(right))"] + self.lets_g
        if d <= 0:
            return self.pick(leaves)
        kind = self.pick(["leaf", "reduce", "reduce", "reduce", "extra", "items", "bin", "bandfield", "cond"])
        if kind == "leaf":
            return self.pick(leaves)
        if kind == "reduce":
            op = self.pick(["sum", "mean", "median", "mad", "std", "min", "max"])
            return f"{op}({self.rollout(d - 1)} where {self.rollout_bool(d - 1)})"
        if kind == "extra":
            if self.coin():
                return f"quantile({self.rollout(d - 1)} where {self.rollout_bool(d - 1)}, {self.pick(['0', '0.25', '0.5', '1', 'q', '1.5'])})"
            return f"nth_largest({self.rollout(d - 1)} where {self.rollout_bool(d - 1)}, {self.pick(['0', '1', '2', 'int(c2)', '-1'])})"
        if kind == "items":
            op = self.pick(["mean", "count", "max", "std", "median", "sum"])
            if op == "count":
                return "float(count(hist.ok))"
            return f"{op}(hist.length where {self.pick(['hist.ok', 'hist.length > 1', 'not hist.ok'])})"
        if kind == "bin":
            return f"({self.group(d - 1)} {self.pick(['+', '-', '*', '/'])} {self.group(d - 1)})"
        if kind == "bandfield":
            # a scalar band meta's fields are reached through an expression; a constant literal's
            # fields crash the interpreter's lift (reported), so fields come from per-group bands only
            band = self.pick(["(pb ?? ob)", "tb", "(ob ?? tb)", "(prof.bd ?? ob ?? tb)", "{c2, c2 + 2, 0.25}"])
            return f"{band}.{self.pick(['a', 'b', 'f'])}"
        return f"({self.group_bool(d - 1)} ? {self.group(d - 1)} : {self.group(d - 1)})"

    def rollout_bool(self, d: int, strict: bool = True) -> str:
        leaves = list(self.masks) + ([] if strict else self.gates_g + ["true"])
        if d <= 0 or self.coin():
            return self.pick(leaves)
        kind = self.pick(["cmp", "and", "or", "not", "missing"])
        if kind == "cmp":
            return f"({self.rollout(d - 1)} {self.pick(['<', '<=', '>', '>=', '==', '!='])} {self.rollout(d - 1, strict=False)})"
        if kind in ("and", "or"):
            return f"({self.rollout_bool(d - 1)} {kind} {self.rollout_bool(d - 1, strict=False)})"
        if kind == "not":
            return f"not {self.rollout_bool(d - 1, strict)}"
        return f"{self.pick(['missing', 'present'])}({self.rollout(d - 1)})"

    def group_bool(self, d: int) -> str:
        kind = self.pick(["any", "all", "count", "cmp", "gate", "mode"])
        if kind in ("any", "all"):
            return f"{kind}({self.rollout_bool(d)})"
        if kind == "count":
            return f"count({self.rollout_bool(d)}) >= {self.pick(['1', '2', '3'])}"
        if kind == "gate" and self.gates_g:
            return self.pick(self.gates_g)
        if kind == "mode":
            return f'mode == "{self.pick(["up", "down"])}"'
        return f"({self.group(d)} {self.pick(['<', '>', '>=', '=='])} {self.group(d)})"

    def band(self) -> str:
        return self.pick(["pb", "tb", "(pb ?? tb)", "(ob ?? tb)", "(prof.bd ?? ob ?? tb)", "{1, 3, 0.5}",
                          "{c2, c2 + 2, 0.25}", "(any(flag) ? pb : tb)"])

    # --- the shaper
    def shaper(self, name: str) -> str:
        d = self.depth
        real = self.coin(0.3)
        body = [
            "input x: tokens", "input y: tokens", "input flag: bool", "input score: float",
            "meta lim: float", "meta pb: band", "meta prof: {cap: float, bd: band}",
            "meta hist: list(ok: bool, length: float)",
        ]
        if self.coin(0.3):
            body.append("skip off unless enabled")
        if self.coin(0.3):
            body.append(f"skip flagged when {self.pick(['any(flag)', 'all(flag)', 'count(flag) >= 2'])}")
        body += ["channel tot = x + y", "channel fx = float(x)", "channel fy = float(y)", "channel ft = float(tot)",
                 "gate right = reward > 0"]
        if self.coin(0.4):
            body += ["let acc = batch.mean(right)",
                     "state best: float = 0 update present(acc) ? max(best, acc) : best",
                     "gate stable = acc >= best - q"]
            self.gates_g.append("stable")
        if self.coin(0.3):  # its update, a group value (missing or not finite: kept), is drawn before it is read
            body.append(f"state seen: float per prompt = {self.lit()} update {self.group(d - 1)} + seen")
            self.lets_g.append("seen")
        for k in range(self.pick([1, 2, 3])):
            if self.coin():
                body.append(f"let lg{k} = {self.group(d)}")
                self.lets_g.append(f"lg{k}")
            else:
                body.append(f"let lr{k} = {self.rollout(d)}")
                self.lets_r.append(f"lr{k}")
        if self.coin():
            body.append(f"gate gg = {self.group_bool(d - 1)}")
            self.gates_g.append("gg")
        if self.coin(0.4):  # batch values over group values, chained through a rollout let
            op = self.pick(["sum", "mean", "min", "max"])
            body.append(f"let token_mean = batch.{op}({self.rollout(d, strict=False)} where {self.rollout_bool(1, strict=False)})")
            body.append(f"let deviation = {self.rollout(d - 1)} - token_mean")
            body.append(f"let token_var = batch.{self.pick(['sum', 'mean', 'max'])}(deviation * {self.group(1)} "
                        f"where {self.rollout_bool(1)})")
            self.lets_r.append("deviation")
            self.lets_g += ["token_mean", "token_var"]
        if self.coin():
            rules = [f"closed none when count({self.rollout_bool(1)}) == 0",
                     f"open high when {self.group_bool(d - 1)}", "closed low"]
            body.append("gate gr { " + " ".join(rules[: self.pick([1, 2, 3])]) + " }")
            self.gates_g.append("gr")
        for k in range(self.pick([1, 2, 3])):
            on = self.pick(["", " on right", f" on {self.rollout_bool(1)}",
                            f" on argmin({self.rollout(1)} where {self.rollout_bool(1)})",
                            f" on argmax({self.rollout(1)} where {self.rollout_bool(1)})"])
            when = self.pick(["", f" when {self.group_bool(1)}", f" when {self.rollout_bool(1, strict=False)}"])
            value = self.rollout(d, strict=False) if not self.terms or self.coin() else f"{self.terms[-1]} * 0.5"
            body.append(f"term t{k} = clip({value}, -{self.lit()}, {self.lit()}){on}{when}")
            self.terms.append(f"t{k}")
        if real and self.coin():
            body.append(f"result = clip({self.rollout(d)} + t0, -3, 3)")
        else:
            if not real or self.coin():
                body.append("clamp >= 0")
            if self.coin():
                body.append(f"clamp >= clip({self.group(1)}, 0, 1) on {self.rollout_bool(1)}")
            if not real:
                for k in range(self.pick([0, 1, 2])):
                    expr = self.pick([f"band(ft, {self.band()})", f"clip({self.rollout(d)}, 0, 1)",
                                      f"max(1, ft / max(1, {self.group(1)})) ** (-c2)", f"sigmoid({self.rollout(1)})"])
                    body.append(f"factor f{k} = {expr}{self.pick(['', ' on right', ' when ' + self.group_bool(1)])}")
        if self.coin(0.3):
            if self.coin():  # a let only the drop condition reads
                body.append(f"let leaving = {self.rollout_bool(d - 1, strict=False)}")
                body.append("drop when leaving")
            else:
                body.append(f"drop when {self.rollout_bool(d - 1, strict=False)}")
        body += [
            "metric delta = batch.mean(shaped - reward)",
            f"metric grouped = batch.mean({self.group(1)} where {self.rollout_bool(1)})",
            f"metric first_term = batch.sum({self.terms[0]})",
            'metric skipped_frac = batch.mean(skipped("non_binary"))',
            f"metric top = batch.max({self.rollout(1)})",
        ]
        params = ("c1: float = 1, c2: float >= 0 = 0.5, q: float in [0, 1] = 0.25, enabled: bool = true, "
                  "mode: enum(up, down) = up, tb: band = {2, 6, 0.5}, ob: band?")
        contract = "produces real" if real else "requires binary produces real"
        return f"shaper {name}({params}) {contract} {{\n  " + "\n  ".join(body) + "\n}\n"


@st.composite
def shaper_sources(draw, depth: int = 2):
    return SpecWriter(lambda options: draw(st.sampled_from(options)), depth).shaper("generated")


def fixed_specs(count: int) -> list[str]:
    """A fixed set of generated specs (seeded), compiled once and reused by many batches."""
    out = []
    for seed in range(count):
        rng = random.Random(1000 + seed)
        out.append(SpecWriter(rng.choice, depth=2 + seed % 2).shaper(f"generated_{seed}"))
    return out


# Every reduction and combinator at least once, whatever the seeds above happen to draw.
EVERY_CONSTRUCT = """
shaper generated_all(c1: float = 1, c2: float >= 0 = 0.5, q: float in [0, 1] = 0.25, enabled: bool = true,
                     mode: enum(up, down) = up, tb: band = {2, 6, 0.5}, ob: band?) requires binary produces real {
  input x: tokens
  input y: tokens
  input flag: bool
  input score: float
  meta lim: float
  meta pb: band
  meta prof: {cap: float, bd: band}
  meta hist: list(ok: bool, length: float)
  skip off unless enabled
  skip flagged when count(flag) >= 3
  channel tot = x + y
  channel ft = float(tot)
  gate right = reward > 0
  let acc = batch.mean(right)
  state best: float = 0 update present(acc) ? max(best, acc) : best
  gate stable = acc >= best - q
  let spread = mad(ft where right) / max(median(ft where right), 1e-9)
  let z = (ft - mean(ft where right)) / std(ft where right)
  let upper = quantile(ft where right, q) ?? nth_largest(ft where right, int(c2 * 4))
  let typical = median(hist.length where hist.ok) ?? lim ?? prof.cap
  let centred = ft - mean(ft where right)
  let token_mean = batch.sum(float(x) * centred) / float(batch.sum(x) + 1)
  let deviation = centred - token_mean
  let token_var = batch.mean(deviation * deviation * (typical ?? 1) where right)
  gate enough = count(right) >= 2 and any(flag) or all(right)
  gate history {
    closed no_history when count(hist.ok) == 0
    open long when upper > typical
    closed short
  }
  let chosen = mode == "up" ? (pb ?? ob ?? tb) : (prof.bd ?? tb)
  term shortest = c1 on argmin(ft where right and ft > 0) when enough
  term longest = -c1 on argmax(ft where right) when stable and history
  term relative = clip(centered(1 - minmax(ft where right) where right) * c2, -1, 1) on right
  term kept = c1 * (rank(-ft where right) ?? position) / group_size when rank(ft) < 2
  let leaving = rank(ft where right) >= 2 or lim > 3
  drop when leaving
  term outlier = -0.5 on right when present(z) and 0.6745 * z > spread and not missing(upper)
  term whitened = clip(deviation / sqrt(token_var ?? 1), -1, 1) on right when (batch.min(spread where right) ?? 0) < 1
  term gap = clip(-abs(score - float(sum(x where flag)) / group_size) ** 0.5, -2, 0) when shortest + longest >= 0
  clamp >= 0
  clamp >= clip(chosen.a / 10, 0, 0.5) on flag when mode == "down"
  factor fit = band(ft, chosen) on right
  factor power = max(1, ft / max(1, min(ft where right))) ** (-c2) on right
  factor smooth = sigmoid(exp(-abs(z)) + log(ft + 1) + cos(ft) + sqrt(ft)) when enough
  metric delta = batch.mean(shaped - reward)
  metric grouped = batch.mean(spread where right)
  metric longest_sum = batch.sum(longest)
  metric non_binary = batch.mean(skipped("non_binary"))
  metric lowest = batch.min(ft where right)
  metric any_flag = batch.any(flag)
}
"""

# States kept per prompt, read before the statements their updates read (calls pass prompts=).
PER_PROMPT = """
shaper generated_prompts(c1: float = 1, q: float in [0, 1] = 0.25) requires binary produces real {
  input x: tokens
  input flag: bool
  meta lim: float
  channel fx = float(x)
  gate right = reward > 0
  state shortest: float per prompt = 1e9 update count(right) > 0 ? min(shortest, min(fx where right)) : shortest
  state rounds: int per prompt = 0 update rounds + 1
  state level: float per prompt = 0.5 update spread ?? level
  state budget: float = 100 update budget * 0.9
  let spread = std(fx where right) / mean(fx where right)
  gate known = shortest < 1e9
  term shorter = clip(c1 * (1 - fx / shortest), -1, 1) on right when known
  term steady = -0.1 * rounds * level on flag when lim ?? 0 >= 0
  term budgeted = -0.01 * min(fx / budget, 1) on right
  clamp >= 0
  let leaving = rank(fx where right) >= 3
  drop when leaving
  metric known_frac = batch.mean(known)
}
"""
