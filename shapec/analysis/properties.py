"""The four properties: what each promises, and how an (input group, shaped group) pair breaks it."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..ir.nodes import Ensure, ShaperIR
from ..checker.ensure import title

TOL = 1e-9
MEANING = {
    "order_kept": "within a group, a rollout whose input reward is higher never ends strictly lower",
    "all_wrong_unchanged": "a group whose input rewards are all 0 leaves the shaper unchanged",
    "within": "every shaped reward stays in [lo, hi]",
    "shorter_not_worse": "among the rollouts in the mask, one with a smaller x and otherwise equal inputs "
                         "never ends lower",
}
OUTPUT_RANGE = {"binary": (0.0, 1.0), "unit": (0.0, 1.0), "nonneg": (0.0, math.inf)}


@dataclass(frozen=True)
class Goal:
    """One property to decide for one shaper: declared (an `ensure`) or the general form."""

    ensure: Ensure
    declared: bool
    outside: bool = False  # a declared clause without its `when`: which params break it
    at_defaults: Ensure | None = None  # the declared clause held at the defaults, which its `when` excludes (W705)

    @property
    def prop(self) -> str:
        return self.ensure.prop

    def title(self) -> str:
        return title(self.ensure)


def goals(ir: ShaperIR) -> list[Goal]:
    """The declared clauses, then the general form of every property the shaper did not declare."""
    out = [Goal(e, True) for e in ir.ensures]
    out += [Goal(replace(e, when=None), False, True) for e in ir.ensures if e.when is not None]
    declared = {e.prop for e in ir.ensures}
    general = [Ensure("order_kept", ir.requires), Ensure("all_wrong_unchanged", ir.requires)]
    if ir.produces in OUTPUT_RANGE:
        general.append(Ensure("within", ir.requires, *OUTPUT_RANGE[ir.produces]))
    out += [Goal(e, False) for e in general if e.prop not in declared]
    return out


def violation(ensure: Ensure, rewards: np.ndarray, out: np.ndarray, x=None, mask=None,
              same=None) -> tuple[int, ...] | None:
    """The rollouts (one or two indices) that break the property, or None.

    For shorter_not_worse, `x` holds the compared input, `mask` the clause's mask and `same[i][j]`
    whether rollouts i and j have equal inputs apart from x (and equal rewards).
    """
    k = len(rewards)
    if ensure.prop == "order_kept":
        for i in range(k):
            for j in range(k):
                if rewards[i] > rewards[j] and out[i] < out[j] - TOL * max(1.0, abs(out[j])):
                    return (i, j)
    elif ensure.prop == "all_wrong_unchanged":
        if np.all(rewards == 0):
            for i in range(k):
                if out[i] != 0:
                    return (i,)
    elif ensure.prop == "within":
        for i in range(k):
            if out[i] < ensure.lo - TOL or out[i] > ensure.hi + TOL:
                return (i,)
    else:
        for i in range(k):
            for j in range(k):
                if mask[i] == 1 and mask[j] == 1 and same[i][j] and x[i] < x[j] and \
                        out[i] < out[j] - TOL * max(1.0, abs(out[j])):
                    return (i, j)
    return None
