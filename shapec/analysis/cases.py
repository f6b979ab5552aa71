"""One prompt group with everything a shaper reads: the unit of search, counterexamples and replay.

Values are drawn from small sets of round numbers first (so counterexamples read well) and then
at random; params only ever take values inside their declared ranges.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.nodes import Node, Op, ParamSpec, ShaperIR, every_node, walk

ROUND = {
    "tokens": (0, 1, 10, 100, 200, 1000, 5000), "chars": (0, 1, 10, 100, 1000, 5000),
    "seconds": (0, 60, 600, 3600, 5400, 7200), "calls": (0, 1, 2, 5, 10), "bool": (0, 1),
    "float": (0, 1, -1, 0.5, 2, 10), "int": (0, 1, 2, 10),
}
REWARDS = {"binary": (0.0, 1.0), "unit": (0.0, 1.0, 0.5, 0.25), "nonneg": (0.0, 1.0, 0.5, 2.0),
           "real": (0.0, 1.0, 0.5, -1.0, 2.0)}
PARAM_TRIES = (0, 1, 2, 0.5, -1, 10, 100, -10, 0.1, 1000, 1 / 60)


@dataclass
class Case:
    """A single group: rewards, each input (one value per rollout), per-group metadata, params."""

    rewards: list[float]
    inputs: dict[str, list[float]]
    metas: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    env_rewards: list[float] | None = None  # what `env_reward` reads; None: the rewards themselves

    @property
    def size(self) -> int:
        return len(self.rewards)

    def call(self, shaper):
        metadata = {name: [value] for name, value in self.metas.items()}
        return shaper(np.array(self.rewards, dtype=np.float64), group_size=self.size,
                      channels={k: np.array(v, dtype=np.float64) for k, v in self.inputs.items()},
                      metadata=metadata, params=self.params, env_rewards=self.env_rewards)

    def without(self, i: int) -> "Case":
        def drop(xs: list) -> list:
            return [x for j, x in enumerate(xs) if j != i]
        return Case(drop(self.rewards), {k: drop(v) for k, v in self.inputs.items()}, dict(self.metas),
                    dict(self.params), None if self.env_rewards is None else drop(self.env_rewards))


def param_values(spec: ParamSpec) -> list[Any]:
    """Candidate values of one param, inside its declared range; the default first."""
    out: list[Any] = []
    if spec.kind == "bool":
        out = [bool(spec.default) if spec.default is not None else False, True, False]
    elif spec.kind == "enum":
        out = [spec.default, *spec.members]
    elif spec.kind == "band":
        out = [spec.default, (100.0, 1000.0, 0.5), (10.0, 100.0, 0.0), (1000.0, 5000.0, 0.8)]
    else:
        cands = [spec.default] if spec.default is not None else []
        cands += [v for v in (spec.lo, spec.hi) if v is not None]
        cands += list(PARAM_TRIES)
        for v in cands:
            if v is None or not math.isfinite(v) or not in_range(spec, v):
                continue
            v = int(v) if spec.kind == "int" and float(v).is_integer() else v
            if spec.kind == "int" and not isinstance(v, int):
                continue
            out.append(v)
    if spec.optional:
        out.append(None)
    seen: list[Any] = []
    for v in out:
        if v not in seen:
            seen.append(v)
    return seen


def in_range(spec: ParamSpec, v: float) -> bool:
    if spec.lo is not None and (v < spec.lo or (spec.lo_strict and v == spec.lo)):
        return False
    return not (spec.hi is not None and (v > spec.hi or (spec.hi_strict and v == spec.hi)))


def boundary_params(ir: ShaperIR, when: Node | None) -> list[dict[str, Any]]:
    """Params on the edges, to try before any random value: each endpoint of each param's range and each
    constant the `when` condition compares a param with (and its nearest neighbours), one param at a
    time, then every param at its low end and every param at its high end together."""
    near: dict[str, list[float]] = {s.name: [] for s in ir.params if s.kind in ("int", "float")}
    for n in walk(when) if when is not None else ():
        if n.op is Op.CMP:
            for side, other in (n.args, reversed(n.args)):
                if side.op is Op.REF and side.attr[0] == "param" and other.op is Op.CONST and side.attr[1] in near:
                    c = float(other.attr)
                    near[side.attr[1]] += [c, math.nextafter(c, -math.inf), math.nextafter(c, math.inf)]
    out: list[dict[str, Any]] = []
    lows, highs = {}, {}
    for spec in ir.params:
        if spec.name not in near:
            continue
        lo = None if spec.lo is None else math.nextafter(spec.lo, math.inf) if spec.lo_strict else spec.lo
        hi = None if spec.hi is None else math.nextafter(spec.hi, -math.inf) if spec.hi_strict else spec.hi
        values = [v for v in (lo, hi, *near[spec.name]) if v is not None]
        if spec.kind == "int":
            values = [float(f(v)) for v in values for f in (math.floor, math.ceil)]
        values = [int(v) if spec.kind == "int" else v for v in dict.fromkeys(values)
                  if math.isfinite(v) and in_range(spec, v)]
        out += [{spec.name: v} for v in values]
        if values:
            lows[spec.name], highs[spec.name] = min(values), max(values)
    pinned = pinned_params(ir, when)
    edges = out + [d for d in (lows, highs) if len(d) > 1]
    return [{**d, **pinned} for d in edges if not set(d) & set(pinned)] + ([pinned] if pinned else [])


def pinned_params(ir: ShaperIR, when: Node | None) -> dict[str, Any]:
    """The params a `when` condition holds at one value (`p == c` joined by `and`), as a call passes them."""
    specs = {s.name: s for s in ir.params}
    out: dict[str, Any] = {}
    stack = [when] if when is not None else []
    while stack:
        n = stack.pop()
        if n.op is Op.AND:
            stack.extend(n.args)
        elif n.op is Op.CMP and n.attr == "==" and n.args[1].op is Op.CONST and n.args[0].op is Op.REF \
                and n.args[0].attr[0] == "param" and n.args[0].attr[1] in specs:
            spec, c = specs[n.args[0].attr[1]], float(n.args[1].attr)
            out[spec.name] = (spec.members[int(c)] if spec.kind == "enum" else bool(c) if spec.kind == "bool"
                              else int(c) if spec.kind == "int" else c)
    return out


def random_param(spec: ParamSpec, rng: random.Random) -> Any:
    values = param_values(spec)
    if spec.kind in ("int", "float") and rng.random() < 0.3:
        lo = spec.lo if spec.lo is not None else -100.0
        hi = spec.hi if spec.hi is not None else 100.0
        v = rng.uniform(lo, min(hi, lo + 200.0))
        v = int(round(v)) if spec.kind == "int" else v
        if in_range(spec, v):
            return v
    return rng.choice(values)


def random_value(typ: str, rng: random.Random) -> float:
    if rng.random() < 0.7:
        return float(rng.choice(ROUND.get(typ, ROUND["float"])))
    if typ == "bool":
        return float(rng.random() < 0.5)
    if typ in ("tokens", "chars", "calls", "int"):
        return float(rng.randint(0, 6000 if typ != "calls" else 20))
    if typ == "seconds":
        return round(rng.uniform(0, 7200), 1)
    return round(rng.uniform(-5, 5), 3)


def random_meta(spec, k: int, rng: random.Random) -> Any:
    if spec.kind == "scalar":
        if rng.random() < 0.2:
            return None
        return {"a": 100.0, "b": 1000.0, "f": 0.5} if spec.type == "band" else random_value(spec.type, rng)
    if spec.kind == "record":
        row = {}
        for name, typ in spec.fields:
            if rng.random() < 0.7:
                row[name] = ({"a": 100.0, "b": 1000.0, "f": rng.choice((0.0, 0.5, 0.8))} if typ == "band"
                             else random_value(typ, rng))
        return row
    n = rng.randint(0, 4)
    return {name: [random_value(typ, rng) for _ in range(n)] for name, typ in spec.fields}


def near_params(ir: ShaperIR, typ: str, params: dict[str, Any]) -> list[float]:
    """Values of an input around the params of its unit (a limit, the limit +- 1, twice and half it),
    so a threshold far beyond the round values is still crossed."""
    out = []
    for spec in ir.params:
        v = params.get(spec.name, spec.default)
        if spec.unit == typ and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out += [c for c in (v, v - 1, v + 1, 2 * v, round(v / 2)) if c >= 0]
    return [float(c) for c in out]


def random_case(ir: ShaperIR, k: int, domain: str, rng: random.Random, params: dict[str, Any]) -> Case:
    rewards = [float(rng.choice(REWARDS[domain])) if domain == "binary" or rng.random() < 0.8 else
               _random_reward(domain, rng) for _ in range(k)]
    inputs = {}
    for name, typ in ir.inputs:
        near = near_params(ir, typ, params)
        inputs[name] = [rng.choice(near) if near and rng.random() < 0.3 else random_value(typ, rng) for _ in range(k)]
    metas = {m.name: random_meta(m, k, rng) for m in ir.metas}
    env = None  # a later stage or a caller passing env_rewards= sees any reward there
    if reads_env_reward(ir) and rng.random() < 0.5:
        env = [float(rng.choice(REWARDS["real"])) if rng.random() < 0.8 else _random_reward("real", rng) for _ in range(k)]
    return Case(rewards, inputs, metas, dict(params), env)


def reads_env_reward(ir: ShaperIR) -> bool:
    return any(n.op is Op.REF and n.attr == ("builtin", "env_reward") for n in every_node(ir))


def _random_reward(domain: str, rng: random.Random) -> float:
    lo, hi = {"unit": (0, 1), "nonneg": (0, 3)}.get(domain, (-3, 3))
    return round(rng.uniform(lo, hi), 3)
