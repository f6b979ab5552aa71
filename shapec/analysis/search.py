"""Randomised search for a group that breaks a property, on the reference interpreter, and the
minimiser that turns what it finds into the smallest group with the roundest numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

import numpy as np

from ..ir.nodes import ROLLOUT, Ensure, ShaperIR, Type, TypeKind
from ..runtime.batch import BatchError
from ..runtime.binder import make_batch
from ..runtime.interp import Interpreter
from ..runtime.params import ParamError, param_arrays
from .cases import (REWARDS, ROUND, Case, boundary_params, in_range, param_values, pinned_params, random_case,
                    random_param)
from .properties import violation

SIZES = (2, 2, 3, 3, 4, 5, 6, 8, 1, 12)


@dataclass
class Found:
    case: Case
    shaped: list[float]
    rollouts: tuple[int, ...]  # the rollouts that break the property


@dataclass
class SearchStats:
    trials: int = 0
    sizes: tuple[int, int] = (0, 0)
    rejected: int = 0  # groups the shaper refused (params outside the `when` condition, bad data)


def evaluate(ir: ShaperIR, ensure: Ensure, case: Case) -> Found | None | bool:
    """The violation this case shows, None if it keeps the property, False if it is out of scope."""
    try:
        batch = make_batch(ir, np.array(case.rewards, dtype=np.float64), group_size=case.size,
                           channels={k: np.array(v, dtype=np.float64) for k, v in case.inputs.items()},
                           metadata={name: [value] for name, value in case.metas.items()})
        if case.env_rewards is not None:
            batch.env_rewards = np.array(case.env_rewards, dtype=np.float64)
        params = param_arrays(ir, case.params, 1)
    except (BatchError, ParamError, ValueError):
        return False
    entering = {name: np.full(batch.groups, init) for name, init, _ in ir.prompt_states}  # a prompt seen first
    it = Interpreter(ir, batch, params, dict(ir.states), prompt_state=entering)
    if ensure.when is not None and float(np.ravel(it.eval(ensure.when))[0]) != 1:
        return False
    try:
        out = it.run()
    except FloatingPointError:
        return False
    x = mask = same = None
    if ensure.prop == "shorter_not_worse":
        x = batch.inputs[ensure.x_name]
        mask = (np.ones(case.size) if ensure.on is None else
                np.broadcast_to(it.at(ensure.on, Type(TypeKind.NUM, ROLLOUT)), (case.size,)))
        others = [np.array(v) for k, v in batch.inputs.items() if k != ensure.x_name]
        r = batch.rewards
        same = [[r[i] == r[j] and all(o[i] == o[j] for o in others) for j in range(case.size)]
                for i in range(case.size)]
    hit = violation(ensure, batch.rewards, out.rewards, x, mask, same)
    return None if hit is None else Found(case, [float(v) for v in out.rewards], hit)


def search(ir: ShaperIR, ensure: Ensure, trials: int, seed: int = 0,
           fixed: dict | None = None) -> tuple[Found | None, SearchStats]:
    rng = random.Random(seed)
    stats = SearchStats(sizes=(min(SIZES), max(SIZES)))
    edges = boundary_params(ir, ensure.when) if fixed is None else []
    pinned = pinned_params(ir, ensure.when)
    for t in range(trials):
        stats.trials = t + 1
        edge = t < min(trials // 2, 8 * len(edges))  # the edges first, each with several random groups
        case = _trial_case(ir, ensure, rng, edges[t % len(edges)] if edge else fixed, pinned)
        got = evaluate(ir, ensure, case)
        if got is False:
            stats.rejected += 1
        elif got is not None:
            return minimise(ir, ensure, got), stats
    return None, stats


def _trial_case(ir: ShaperIR, ensure: Ensure, rng: random.Random, fixed: dict | None,
                pinned: dict | None = None) -> Case:
    """A random group; fixed: these params and no other; pinned: these params whatever else is drawn."""
    params = dict(fixed) if fixed is not None else {}  # fixed: every other param stays as given
    if fixed is None and rng.random() > 0.2:
        params = {s.name: random_param(s, rng) for s in ir.params if rng.random() < 0.5}
    params.update(pinned or {})
    case = random_case(ir, rng.choice(SIZES), ensure.over, rng, params)
    if ensure.prop == "all_wrong_unchanged":
        case.rewards = [0.0] * case.size
    if ensure.prop == "shorter_not_worse" and case.size >= 2:
        for j in range(1, case.size, 2):  # a twin of the rollout before it, with a different x
            for k in case.inputs:
                if k != ensure.x_name:
                    case.inputs[k][j] = case.inputs[k][j - 1]
            case.rewards[j] = case.rewards[j - 1]
    return case


# ------------------------------------------------------------------------- minimising
def _rounder(v: float, typ: str) -> list[float]:
    """Values to try in place of v, roundest first, each strictly rounder than v (smaller in magnitude,
    or its positive twin), so minimising cannot go round in circles."""
    out = [0.0, 1.0] + [float(c) for c in ROUND.get(typ, ROUND["float"])]
    mag = 10.0 ** math.floor(math.log10(abs(v))) if v != 0 and math.isfinite(v) else 0.0
    if mag > 0:  # 0 below the smallest normal power of ten
        out += [math.copysign(mag, v), round(v / mag) * mag, float(round(v))]
    return [c for c in dict.fromkeys(out) if abs(c) < abs(v) or (abs(c) == abs(v) and c > v)]


def _rounder_param(spec, v) -> list:
    """Rounder values of a numeric param inside its range; each strictly rounder than v (smaller in
    magnitude, or its positive twin), so minimising cannot go round in circles."""
    if spec.kind not in ("int", "float") or not isinstance(v, (int, float)) or isinstance(v, bool):
        return []
    out = []
    for c in _rounder(float(v), "float"):
        if in_range(spec, c) and (spec.kind == "float" or float(c).is_integer()):
            out.append(int(c) if spec.kind == "int" else c)
    return out


def minimise(ir: ShaperIR, ensure: Ensure, found: Found) -> Found:
    """The smallest group, default params where they do not matter, then round values."""
    def still(case: Case) -> Found | None:
        got = evaluate(ir, ensure, case)
        return got if isinstance(got, Found) else None

    best = found
    specs = {p.name: p for p in ir.params}
    changed = True
    while changed:
        changed = False
        for i in range(best.case.size - 1, -1, -1):
            if best.case.size > 1 and (got := still(best.case.without(i))):
                best, changed = got, True
        for name in list(best.case.params):
            trial = replace(best.case, params={k: v for k, v in best.case.params.items() if k != name})
            if got := still(trial):
                best, changed = got, True
        for name, value in list(best.case.params.items()):
            for c in _rounder_param(specs[name], value):
                trial = replace(best.case, params={**best.case.params, name: c})
                if got := still(trial):
                    best, changed = got, True
                    break
        types = dict(ir.inputs)
        for name, values in best.case.inputs.items():
            for i, v in enumerate(values):
                for c in _rounder(v, types[name]):
                    trial = replace(best.case, inputs={**best.case.inputs, name: values[:i] + [c] + values[i + 1:]})
                    if got := still(trial):
                        best, changed, values = got, True, trial.inputs[name]
                        break
        for i, r in enumerate(best.case.rewards):
            allowed = REWARDS[ensure.over]  # roundest first; never leave the reward domain
            for c in allowed[:allowed.index(r)] if r in allowed else allowed:
                trial = replace(best.case, rewards=best.case.rewards[:i] + [c] + best.case.rewards[i + 1:])
                if got := still(trial):
                    best, changed = got, True
                    break
        if best.case.env_rewards is not None:  # the rewards themselves are the simplest env rewards
            trial = replace(best.case, env_rewards=None)
            if got := still(trial):
                best, changed = got, True
            else:
                for i, v in enumerate(best.case.env_rewards):
                    for c in _rounder(v, "float"):
                        env = best.case.env_rewards
                        trial = replace(best.case, env_rewards=env[:i] + [c] + env[i + 1:])
                        if got := still(trial):
                            best, changed = got, True
                            break
        for name, value in best.case.metas.items():
            if value not in (None, {}):
                trial = replace(best.case, metas={**best.case.metas, name: None})
                if got := still(trial):
                    best, changed = got, True
    return best


# ------------------------------------------------------------------------- which params break it
def breaking_values(ir: ShaperIR, ensure: Ensure, found: Found, trials: int = 60) -> dict[str, tuple[list, list]]:
    """Per param worth reporting: (values that break the property, values that kept it in the search);
    the second list is empty when every value tried breaks it."""
    out = {}
    pinned = pinned_params(ir, ensure.when)  # a pipeline's arguments: not the user's to vary
    for spec in ir.params:
        if spec.name in pinned:
            continue
        if spec.kind not in ("enum", "bool") and not spec.optional and spec.name not in found.case.params:
            continue
        bad, good = [], []
        for v in param_values(spec):
            params = {**found.case.params, spec.name: v}
            direct = evaluate(ir, ensure, replace(found.case, params=params))
            broke = isinstance(direct, Found) or search(ir, ensure, trials, seed=1, fixed=params)[0] is not None
            (bad if broke else good).append(v)
        if bad:
            out[spec.name] = (bad, good)
    return out
