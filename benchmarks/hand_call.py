"""The per-call floor: the hand kernel (hand_nemo_rl.py) behind a call written by hand for this
one shaper that checks what shapec's call checks, and nothing more (bench_limit.py times it).

Its arguments are the user's: rewards, a group size, the three channels, `profile_band` as three
(G, 3) tables (three NaNs: no band) or (G, 4) ones (a, b, f, present 0 or 1) and `profiled` as a flat
list, a params dict. It checks their types, shapes and
values (finite rewards, finite non-negative lengths, valid band rows, list offsets that slice the
items), turns the low-effort flags into 0/1, packs the bands, remembers the params by value and
type, allocates the outputs and returns what the result holds (rewards, skip and gate codes,
metrics as a dict, and with `breakdown` the terms and factors as dicts of rows). It words no error
(a bad call raises one ValueError) and knows no other form of any argument: shapec's call, with all
of that, is measured against it. Its
checks are one-pass numba loops, one call per array: its own (below), and shapec's for list offsets.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

import hand_nemo_rl as hand
from shapec.compiler import store
from shapec.runtime.params import validate_params

_F64, _I64 = np.dtype(np.float64), np.dtype(np.int64)
CHANNELS = ("total", "reasoning", "answer")


@njit(cache=True, nogil=True)
def clean(arr, nonneg):
    """Every value finite, and >= 0 when nonneg."""
    bad = 0
    for i in range(arr.shape[0]):
        v = arr[i]
        bad += (not (v - v) == 0.0) | (nonneg & (v < 0.0))
    return bad == 0


@njit(cache=True, nogil=True)
def band_rows(table, out):
    """(G, 3) rows (three NaNs: absent) or (G, 4) rows (last column 1: present, 0: absent) -> (G, 4)
    rows a, b, f, present; False on a bad present row or flag."""
    flagged = table.shape[1] == 4
    for g in range(table.shape[0]):
        a, b, f = table[g, 0], table[g, 1], table[g, 2]
        if flagged and table[g, 3] != 0.0 and table[g, 3] != 1.0:
            return False
        if (table[g, 3] == 0.0) if flagged else (math.isnan(a) and math.isnan(b) and math.isnan(f)):
            out[g, 0], out[g, 1], out[g, 2], out[g, 3] = math.nan, math.nan, math.nan, 0.0
        elif math.isfinite(a) and math.isfinite(b) and math.isfinite(f) and b > a and 0.0 <= f <= 1.0:
            out[g, 0], out[g, 1], out[g, 2], out[g, 3] = a, b, f, 1.0
        else:
            return False
    return True


class HandCall:
    def __init__(self, ir):
        self.ir = ir
        self.term_names, self.factor_names = tuple(ir.terms), tuple(ir.factors)
        self.clean_offsets = store.value_checks().clean_offsets
        self.params: dict = {}
        self.metric_names = tuple(m for m, _ in ir.metrics)

    def _array(self, value, length: int, dtype=_F64) -> np.ndarray:
        if (type(value) is not np.ndarray or value.dtype != dtype or value.ndim != 1 or len(value) != length
                or not value.flags.c_contiguous):
            raise ValueError("bad array")
        return value

    def __call__(self, rewards, group_size: int, channels: dict, metadata: dict, params: dict, breakdown=False):
        n = len(rewards)
        r = self._array(rewards, n).copy()
        if type(group_size) is not int or group_size <= 0 or n % group_size or not clean(r, False):
            raise ValueError("bad rewards or group size")
        G = n // group_size
        offsets = np.arange(0, n + 1, group_size, dtype=np.int64)
        reasoning = self._array(channels["reasoning"], n)
        answer = self._array(channels["answer"], n)
        low = self._array(channels["low_effort"], n)
        if not (clean(reasoning, True) and clean(answer, True) and clean(low, False)):
            raise ValueError("bad channel")
        low = (low != 0).astype(np.float64)
        bands = np.empty((3, G, 4))
        tables = metadata["profile_band"]
        for c, name in enumerate(CHANNELS):
            table = tables.get(name)
            if (type(table) is not np.ndarray or table.dtype != _F64 or table.ndim != 2
                    or table.shape[0] != G or table.shape[1] not in (3, 4) or not table.flags.c_contiguous
                    or not band_rows(table, bands[c])):
                raise ValueError("bad band table")
        prof = metadata["profiled"]
        m = len(prof["reward"])
        p_off = self._array(prof["offsets"], G + 1, _I64)
        p_reward, p_length = self._array(prof["reward"], m), self._array(prof["length"], m)
        if not (self.clean_offsets(p_off, m) and clean(p_reward, False) and clean(p_length, True)):
            raise ValueError("bad profiled list")
        key = (tuple(params.items()), tuple(map(type, params.values())))
        if key not in self.params:
            self.params[key] = hand.param_vector(validate_params(self.ir, params))
        pv, gb = self.params[key]
        out = np.empty(n)
        skip, gates, metrics = np.empty(G, np.int64), np.empty((3, G), np.int64), np.empty(5)
        terms = np.zeros((12, n)) if breakdown else np.empty((12, 0))
        factors = np.ones((3, n)) if breakdown else np.empty((3, 0))
        hand.length_penalty(r, offsets, reasoning, answer, low, bands, p_off, p_reward, p_length, pv, gb, out,
                            terms, factors, skip, gates, metrics, breakdown)
        result = (out, skip, gates, dict(zip(self.metric_names, metrics.tolist())))
        if breakdown:
            result += (dict(zip(self.term_names, terms)), dict(zip(self.factor_names, factors)))
        return result
