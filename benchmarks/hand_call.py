"""The per-call floor: the hand kernel (hand_nemo_rl.py) behind a call written by hand for this
one shaper that checks what shapec's call checks, and nothing more (bench_limit.py times it).

Its arguments are the user's: rewards, a group size, the three channels, `profile_band` as three
(G, 3) tables and `profiled` as a flat list, a params dict. It checks their types, shapes and
values (finite rewards, finite non-negative lengths, valid band rows, list offsets that slice the
items), turns the low-effort flags into 0/1, packs the bands, remembers the params by value and
type, allocates the outputs and returns what the result holds (rewards, skip and gate codes,
metrics as a dict). It words no error (a bad call raises one ValueError), knows no other form of
any argument, and keeps no breakdown: shapec's call, with all of that, is measured against it. Its
checks are one-pass numba loops of its own (below).
"""

from __future__ import annotations

import numpy as np

import hand_nemo_rl as hand
from shapec.compiler import store
from shapec.runtime.params import validate_params

_F64, _I64 = np.dtype(np.float64), np.dtype(np.int64)
CHANNELS = ("total", "reasoning", "answer")


class HandCall:
    def __init__(self, ir):
        self.ir = ir
        self.checks = store.value_checks()
        self.params: dict = {}
        self.metric_names = tuple(m for m, _ in ir.metrics)

    def _array(self, value, length: int, dtype=_F64) -> np.ndarray:
        if (type(value) is not np.ndarray or value.dtype != dtype or value.ndim != 1 or len(value) != length
                or not value.flags.c_contiguous):
            raise ValueError("bad array")
        return value

    def __call__(self, rewards, group_size: int, channels: dict, metadata: dict, params: dict):
        clean = self.checks.clean_values
        n = len(rewards)
        r = self._array(rewards, n).copy()
        if type(group_size) is not int or group_size <= 0 or n % group_size or not clean(r, False, False, False):
            raise ValueError("bad rewards or group size")
        G = n // group_size
        offsets = np.arange(0, n + 1, group_size, dtype=np.int64)
        reasoning = self._array(channels["reasoning"], n)
        answer = self._array(channels["answer"], n)
        low = self._array(channels["low_effort"], n)
        if not (clean(reasoning, True, False, False) and clean(answer, True, False, False)
                and clean(low, False, False, False)):
            raise ValueError("bad channel")
        low = (low != 0).astype(np.float64)
        bands = np.empty((3, G, 4))
        tables = metadata["profile_band"]
        for c, name in enumerate(CHANNELS):
            table = tables.get(name)
            if type(table) is not np.ndarray or table.shape != (G, 3) or not self.checks.band_rows(table, bands[c]):
                raise ValueError("bad band table")
        prof = metadata["profiled"]
        m = len(prof["reward"])
        p_off = self._array(prof["offsets"], G + 1, _I64)
        p_reward, p_length = self._array(prof["reward"], m), self._array(prof["length"], m)
        if not (self.checks.clean_offsets(p_off, m) and clean(p_reward, False, False, False)
                and clean(p_length, True, False, False)):
            raise ValueError("bad profiled list")
        key = (tuple(params.items()), tuple(map(type, params.values())))
        if key not in self.params:
            self.params[key] = hand.param_vector(validate_params(self.ir, params))
        pv, gb = self.params[key]
        out = np.empty(n)
        skip, gates, metrics = np.empty(G, np.int64), np.empty((3, G), np.int64), np.empty(5)
        hand.length_penalty(r, offsets, reasoning, answer, low, bands, p_off, p_reward, p_length, pv, gb, out,
                            np.empty((12, 0)), np.empty((3, 0)), skip, gates, metrics, False)
        return out, skip, gates, dict(zip(self.metric_names, metrics.tolist()))
