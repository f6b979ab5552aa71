"""A shaper's binder, generated: the one function that turns a call's arguments into a Batch.

A training loop calls a shaper every step, often on a handful of groups, so what a call costs
beside its kernel is Python: a loop over a plan, a closure per metadata field, a dispatch on each
field's kind. The binder of a shaper is therefore written once, when the shaper is compiled, as
straight-line Python for exactly the inputs and metadata it reads (built as `ast` nodes: its names
are the few below and its literals are the shaper's names and labels as constants, so no spec text
becomes code). It runs in the two steps batch.py describes:

1. every argument in array form (`numeric`, and the form readers below for metadata), a form
   that cannot be one named at once, in argument order;
2. every array's values checked by compiled passes (compiler/value_checks.py), several arrays a
   call, in the same order, the validators wording an error only when a pass fails; band tables
   last.

The generated code calls only the helpers of NAMESPACE; what it does for each kind of argument is
written in them, once, in plain Python.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.ma  # noqa: F401 - numba's typeof reads np.ma on a process's first call; imported here, under
# the import lock, so threads making their first calls at once never race into numpy's lazy import of it

from ..compiler import store, value_checks
from ..compiler.lowering.names import ShapecInternalError
from ..ir.nodes import MetaSpec, ShaperIR
from . import pycode as py
from .batch import NONNEG, Batch, MetaPlan, checked, hint, make_offsets, no_bands
from .validate import BatchError, as_array, band, band_table, check_offsets, exact, integers, numeric, show

_F64 = np.dtype(np.float64)
ARGUMENTS = ("rewards", "group_size", "offsets", "channels", "metadata", "reward_components",
             "allow_short_last_group")


# ------------------------------------------------------------------ helpers the generated code calls
def mapping(name: str, value: Any) -> Mapping:
    """`channels` or `metadata`: a mapping (None is an empty one)."""
    if type(value) is dict:  # the common case, before the slower ABC check
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BatchError(f"{name}: expected a mapping of names to values, got {type(value).__name__}")
    return value


def known_keys(metadata: Mapping, names: tuple[str, ...]) -> None:
    for key in metadata:
        if key not in names:
            raise BatchError(f"metadata: unknown key {key!r}{hint(key, names)}; "
                             f"the shaper's metadata: {', '.join(map(repr, names)) or 'none'}")


def missing_input(channels: Mapping, names: tuple[str, ...], name: str, typ: str):
    extra = [k for k in channels if k not in names]
    unknown = "".join(f"; got unknown channel {k!r}{hint(k, names)}" for k in extra)
    raise BatchError(f"channels: missing input {name!r} ({typ}, one value per rollout){unknown}")


def absent_names(metadata: Mapping, names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(m for m in names if m not in metadata)


def per_group(name: str, value: Any, G: int) -> list:
    """Per-group entries: a list, tuple or 1-d array of exactly G of them."""
    if isinstance(value, np.ndarray) and value.ndim == 1 or isinstance(value, (list, tuple)):
        if len(value) != G:
            raise BatchError(f"{name}: expected {G} entries (one per group), got {len(value)}")
        return list(value)
    raise BatchError(f"{name}: expected one entry per group ({G}), got {type(value).__name__}")


def _row_mapping(name: str, g: int, row: Any, fields: list[str]) -> Mapping | None:
    if row is None:
        return None
    if not isinstance(row, Mapping):
        raise BatchError(f"{name}: group {g}: expected a mapping with {fields} or None, got {show(row)}")
    for key in row:
        if key not in fields:
            raise BatchError(f"{name}: group {g}: unknown field {key!r}{hint(key, fields)}; fields: {fields}")
    return row


def scalar_column(name: str, value: Any, G: int) -> np.ndarray:
    """One number per group, NaN where a group has none (None, or the whole value None)."""
    value = as_array(name, value)
    if value is None:
        return np.full(G, math.nan)
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return numeric(name, value, G, "group")
    return numeric(name, [math.nan if v is None else v for v in per_group(name, value, G)], G, "group")


def band_column(name: str, value: Any, G: int) -> np.ndarray:
    """Per-group bands as a C-contiguous float64 (G, 3) or (G, 4) table for the compiled band check:
    a numeric array as given, or per-group {a, b, f} entries (None: no band), checked as read."""
    if (type(value) is np.ndarray and value.dtype == _F64 and value.ndim == 2 and value.shape[0] == G
            and value.shape[1] in (3, 4) and value.flags.c_contiguous):
        return value  # the common case: all_clean reads it and writes the kernel's rows elsewhere
    value = as_array(name, value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        if value.ndim != 2 or value.shape[0] != G or value.shape[1] not in (3, 4):
            raise BatchError(f"{name}: expected shape ({G}, 3) or ({G}, 4), got {value.shape}")
        if value.dtype.kind in "iu":
            exact(name, value)
        return np.ascontiguousarray(value, dtype=np.float64)
    out = no_bands(G)
    if value is not None:
        for g, block in enumerate(per_group(name, value, G)):
            if block is not None:
                out[g] = (*band(f"{name}: group {g}", block), 1.0)
    return out


def record_form(plan: MetaPlan, value: Any, G: int) -> Mapping:
    """A record as a mapping of field -> per-group column (what band_column and scalar_column read):
    a mapping as given, per-group rows (None or mappings) as one list per field, None as no fields."""
    if type(value) is dict and value.keys() <= plan.field_keys:
        return value  # the common case, before the checks below
    name, fields = plan.label, plan.names
    if value is None:
        return {}
    if isinstance(value, Mapping):
        for key in value:
            if key not in fields:
                raise BatchError(f"{name}: unknown field {key!r}{hint(key, fields)}; fields: {fields}")
        return value
    rows = [_row_mapping(name, g, row, fields) for g, row in enumerate(per_group(name, value, G))]
    for fname, ftype, _, label in plan.fields:
        if ftype == "band":  # a key left out is no band; a key set to null is a malformed one
            for g, row in enumerate(rows):
                if row is not None and fname in row and row[fname] is None:
                    raise BatchError(f"{label}: group {g}: null; a band key that is present "
                                     f"must hold a band {{a, b, f}} (leave the key out for no band)")
    return {fname: [row.get(fname) if row is not None else None for row in rows] for fname in fields}


def list_form(plan: MetaPlan, value: Any, G: int) -> Mapping:
    """List metadata as one flat mapping {"offsets": (G+1,) integers, field: values, ...}: as given,
    or from per group a record of equal-length lists (None or a partial record: no items; zip
    semantics, the shortest list decides), whose values are checked as read. list_offsets and
    list_items read it; the offsets are checked with the call's values (all_clean)."""
    if type(value) is dict and value.keys() == plan.expected_keys:
        return value  # the common case, before the checks below
    name, fields, expected = plan.label, plan.names, plan.expected
    if isinstance(value, Mapping):
        for key in expected:
            if key not in value:
                raise BatchError(f"{name}: missing {key!r}; expected {{'offsets': ..., "
                                 f"{', '.join(repr(f) + ': ...' for f in fields)}}}")
        for key in value:
            if key not in expected:
                raise BatchError(f"{name}: unknown key {key!r}{hint(key, expected)}; expected {expected}")
        return value
    rows = [None] * G if value is None else [_row_mapping(name, g, row, fields)
                                             for g, row in enumerate(per_group(name, value, G))]
    lengths, cols = [], {f: [] for f in fields}
    for g, row in enumerate(rows):
        lists = [row.get(f) if row is not None else None for f in fields]
        if any(v is None for v in lists):
            lengths.append(0)  # absent or partial: the group has no items
            continue
        arrays = [checked(f"{name}: group {g}, {f}", numeric(f"{name}: group {g}, {f}", v, None, "item"), t)
                  for (f, t), v in zip(plan.spec.fields, lists)]
        k = min(len(a) for a in arrays)
        lengths.append(k)
        for f, a in zip(fields, arrays):
            cols[f].append(a[:k])
    off = np.zeros(G + 1, dtype=np.int64)
    off[1:] = np.cumsum(lengths)
    return {"offsets": off, **{f: np.concatenate(cols[f]) if cols[f] else np.zeros(0) for f in fields}}


def list_offsets(name: str, value: Any, G: int) -> np.ndarray:
    """A list's offsets: G + 1 integers (all_clean checks that they slice its items)."""
    off = integers(name, value)
    if len(off) != G + 1:
        raise BatchError(f"{name}: expected {G + 1} values (groups + 1), got {len(off)}")
    return off


def list_items(name: str, value: Any, total: int, first: str, fresh: bool) -> np.ndarray:
    """A list field past the first: its items as numeric reads them, as many as the first field's."""
    items = numeric(name, value, None, "item", fresh)
    if len(items) != total:
        raise BatchError(f"{name}: expected {total} items (as many as {first!r}), got {len(items)}")
    return items


def bad_call(offsets: tuple, ends: tuple, offset_names: tuple, arrays: tuple, checks: tuple, tables: tuple,
             table_names: tuple) -> None:
    """all_clean found a bad value: the validators look again, in the same order (offsets, arrays,
    band tables), and word the first (checks: each array's label, type and whether NaN is allowed)."""
    for off, end, (name, what) in zip(offsets, ends, offset_names):
        check_offsets(name, off, end, what)
    for arr, (name, typ, allow_nan) in zip(arrays, checks):
        checked(name, arr, typ, allow_nan)
    for table, name in zip(tables, table_names):
        band_table(name, table, len(table))
    raise ShapecInternalError("internal error: the compiled value checks refused a call that the validators "
                              "accept; this is a shapec bug, please report it")


NAMESPACE = {f.__name__: f for f in (numeric, make_offsets, mapping, known_keys, missing_input, absent_names,
                                     scalar_column, band_column, record_form, list_form, list_offsets, list_items,
                                     bad_call)}
# all_clean's spare slots, past a call's own: nothing to check (NO_ROWS: a call without band tables)
NAMESPACE.update(np=np, EMPTY=np.zeros(0), NO_TABLE=np.zeros((0, 3)), NO_OFFSETS=np.zeros(1, dtype=np.int64),
                 NO_ROWS=np.zeros((0, 0, 4)))


# ------------------------------------------------------------------ the generator
def _checks(fn: str, *args: ast.expr) -> ast.Call:
    return py.method("checks", fn, *args)


def _filled(items: list[ast.expr], spare: ast.expr, size: int) -> list[ast.expr]:
    """A chunk's arguments of one kind, the slots past its own given `spare`."""
    return items + [spare] * (size - len(items))


def _tuple(items: list[ast.expr]) -> ast.Tuple:
    return ast.Tuple(items, ast.Load())


class _Plan:
    """The statements of one binder: forms first, then the checks of every value (all_clean, one
    compiled call for up to value_checks' ARRAYS arrays, TABLES band tables and LISTS lists), then
    the Batch."""

    def __init__(self):
        self.forms: list[ast.stmt] = []
        self.checked: list[tuple[ast.expr, tuple[str, str, bool]]] = []  # (array, (label, type, allow NaN))
        self.tables: list[tuple[str, str]] = []  # (variable, label) of each band table
        self.lists: list[tuple[str, str, tuple[str, str]]] = []  # (offsets, first field, (label, what))
        self.constants: dict[str, Any] = {}  # the rules of each check, by name
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def check(self, var: ast.expr | str, label: str, typ: str, allow_nan: bool) -> None:
        """Check an array's values (a bool column then becomes 0/1 flags)."""
        self.checked.append((py.name(var) if isinstance(var, str) else var, (label, typ, allow_nan)))

    def band(self, var: str, label: str) -> None:
        self.tables.append((var, label))

    def offsets(self, var: str, first_field: str, label: str, what: str) -> None:
        self.lists.append((var, first_field, (label, what)))

    def checks(self) -> list[ast.stmt]:
        """`if not checks.all_clean(...): bad_call(...)` per chunk, each band table then its (G, 4) rows.
        The arrays go to the compiled call one by one; the tuples bad_call reads are built only when
        it fails."""
        out = []
        sizes = (value_checks.ARRAYS, value_checks.TABLES, value_checks.LISTS)
        kinds = (self.checked, self.tables, self.lists)
        for chunk in range(max(-(-len(x) // n) for x, n in zip(kinds, sizes))):
            arrays, tables, lists = (x[chunk * n:(chunk + 1) * n] for x, n in zip(kinds, sizes))
            rules, rows = self.fresh("RULES_"), self.fresh("rows_") if tables else "NO_ROWS"
            self.constants[rules] = np.array(
                [(typ in NONNEG, allow_nan, typ == "int", typ == "bool") for _, (_, typ, allow_nan) in arrays],
                dtype=np.int64).reshape(-1, 4)
            offsets = [py.name(o) for o, _, _ in lists]
            ends = [py.call("len", py.name(f)) for _, f, _ in lists]
            values = [a for a, _ in arrays]
            bands = [py.name(v) for v, _ in tables]
            if tables:
                shape = ast.Tuple([py.const(len(tables)), py.name("G"), py.const(4)], ast.Load())
                out.append(py.assign(rows, py.method("np", "empty", shape)))
            call = _checks("all_clean", *_filled(offsets, py.name("NO_OFFSETS"), sizes[2]),
                           *_filled(ends, py.const(0), sizes[2]), *_filled(values, py.name("EMPTY"), sizes[0]),
                           py.name(rules), *_filled(bands, py.name("NO_TABLE"), sizes[1]), py.name(rows))
            fail = py.call("bad_call", _tuple(offsets), _tuple(ends), py.const(tuple(w for _, _, w in lists)),
                           _tuple(values), py.const(tuple(c for _, c in arrays)), _tuple(bands),
                           py.const(tuple(label for _, label in tables)))
            out.append(ast.If(ast.UnaryOp(ast.Not(), call), [ast.Expr(fail)], []))
            # each table is a row of the checked rows (indexed: unpacking an array iterates it, slowly)
            out += [py.assign(v, py.item(py.name(rows), i)) for i, (v, _) in enumerate(tables)]
        return out


def binder_body(inputs: tuple[tuple[str, str], ...], metas: tuple[MetaSpec, ...]) -> tuple[list[ast.stmt], dict]:
    """The binder's statements (the body of `bind`) and the MetaPlans and check rules it reads by name."""
    plan, plans = _Plan(), {}
    input_names, meta_names = tuple(n for n, _ in inputs), tuple(m.name for m in metas)
    forms = plan.forms
    forms += [py.assign("rewards", py.call("numeric", py.const("rewards"), py.name("rewards"))),
              py.assign("n", py.call("len", py.name("rewards"))),
              py.assign("offsets", py.call("make_offsets", *map(py.name, ("n", "group_size", "offsets",
                                                                            "allow_short_last_group")))),
              py.assign("G", ast.BinOp(py.call("len", py.name("offsets")), ast.Sub(), py.const(1))),
              py.assign("channels", py.call("mapping", py.const("channels"), py.name("channels"))),
              py.assign("metadata", py.call("mapping", py.const("metadata"), py.name("metadata"))),
              ast.Expr(py.call("known_keys", py.name("metadata"), py.const(meta_names)))]
    plan.check("rewards", "rewards", "float", False)
    inputs_dict = []
    for input_name, typ in inputs:
        var, label = plan.fresh("input_"), f"channels[{input_name!r}]"
        read = py.call("numeric", py.const(label), py.item(py.name("channels"), input_name), py.name("n"),
                       py.const("rollout"), py.const(typ == "bool"))  # only a bool column is written (0/1)
        missing = py.call("missing_input", py.name("channels"), py.const(input_names), py.const(input_name),
                          py.const(typ))
        given = ast.Compare(py.const(input_name), [ast.In()], [py.name("channels")])
        forms.append(py.assign(var, ast.IfExp(given, read, missing)))
        plan.check(var, label, typ, False)
        inputs_dict.append((input_name, py.name(var)))
    forms.append(ast.If(py.is_not_none(py.name("reward_components")), [
        py.assign("reward_components", py.call("numeric", py.const("reward_components"), py.name("reward_components"),
                                               py.name("n")))], []))
    plan.check(ast.IfExp(py.is_not_none(py.name("reward_components")), py.name("reward_components"),
                         py.name("EMPTY")), "reward_components", "components", False)
    forms.append(py.assign("absent", ast.IfExp(
        ast.Compare(py.call("len", py.name("metadata")), [ast.Eq()], [py.const(len(meta_names))]), py.const(()),
        py.call("absent_names", py.name("metadata"), py.const(meta_names)))))
    metas_dict, bands_dict, lists_dict = [], [], []
    for spec in metas:
        meta = MetaPlan.of(spec)
        given = py.method("metadata", "get", py.const(spec.name))
        if spec.kind == "list":  # its form, then the offsets and each field, straight-line
            plans[plan_name := plan.fresh("plan_")] = meta
            form, off = plan.fresh("list_"), plan.fresh("list_offsets_")
            fields = [plan.fresh("list_field_") for _ in spec.fields]
            forms.append(py.assign(form, py.call("list_form", py.name(plan_name), given, py.name("G"))))
            forms.append(py.assign(off, py.call("list_offsets", py.const(meta.offsets_label),
                                                py.item(py.name(form), "offsets"), py.name("G"))))
            first = spec.fields[0][0]
            for k, (var, (f, t), label) in enumerate(zip(fields, spec.fields, meta.item_labels)):
                value, fresh = py.item(py.name(form), f), py.const(t == "bool")  # a bool field is written (0/1)
                read = (py.call("numeric", py.const(label), value, py.const(None), py.const("item"), fresh) if k == 0
                        else py.call("list_items", py.const(label), value, py.call("len", py.name(fields[0])),
                                     py.const(first), fresh))
                forms.append(py.assign(var, read))
                plan.check(var, label, t, False)
            plan.offsets(off, fields[0], meta.offsets_label, f"{first!r} items")
            columns = py.dict_of([(f, py.name(v)) for (f, _), v in zip(spec.fields, fields)])
            lists_dict.append((spec.name, ast.Tuple([py.name(off), columns], ast.Load())))
            continue
        if spec.kind == "record":  # its form, then each field, straight-line
            plans[plan_name := plan.fresh("plan_")] = meta
            form = plan.fresh("record_")
            forms.append(py.assign(form, py.call("record_form", py.name(plan_name), given, py.name("G"))))
            columns = [(plan.fresh("field_"), ftype, path, label) for _, ftype, path, label in meta.fields]
            for (var, ftype, _, label), fname in zip(columns, meta.names):
                reader = "band_column" if ftype == "band" else "scalar_column"
                forms.append(py.assign(var, py.call(reader, py.const(label), py.method(form, "get", py.const(fname)),
                                                    py.name("G"))))
        else:
            var = plan.fresh("meta_")
            reader = "band_column" if spec.type == "band" else "scalar_column"
            forms.append(py.assign(var, py.call(reader, py.const(meta.label), given, py.name("G"))))
            columns = [(var, spec.type, spec.name, meta.label)]
        for var, ftype, path, label in columns:
            if ftype == "band":
                plan.band(var, label)
                bands_dict.append((path, py.name(var)))
            else:
                plan.check(var, label, ftype, True)  # NaN: missing for that group
                metas_dict.append((path, py.name(var)))
    batch = ast.Call(py.name("Batch"), [], [
        ast.keyword(k, v) for k, v in (
            ("rewards", py.name("rewards")), ("offsets", py.name("offsets")), ("inputs", py.dict_of(inputs_dict)),
            ("metas", py.dict_of(metas_dict)), ("bands", py.dict_of(bands_dict)), ("lists", py.dict_of(lists_dict)),
            ("components", py.name("reward_components")), ("absent", py.name("absent")))])
    body = [py.assign("checks", py.call("value_checks")), *forms, *plan.checks(), ast.Return(batch)]
    return body, {**plans, **plan.constants}


@functools.lru_cache(maxsize=256)
def binder(inputs: tuple[tuple[str, str], ...], metas: tuple[MetaSpec, ...]):
    """The compiled binder for these inputs and metadata: bind(rewards, group_size, offsets,
    channels, metadata, reward_components, allow_short_last_group) -> Batch. One per distinct
    pair of declarations (a shaper's, or a tool's), made once."""
    body, plans = binder_body(inputs, metas)
    return py.function("bind", ARGUMENTS, body, {**NAMESPACE, **plans, "Batch": Batch,
                                                 "value_checks": store.value_checks})


def make_batch(
    ir: ShaperIR | None,
    rewards: Any,
    *,
    group_size: int | None = None,
    offsets: Any = None,
    channels: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    reward_components: Any = None,
    inputs_needed: tuple[tuple[str, str], ...] = (),
    metas_needed: tuple[MetaSpec, ...] = (),
    allow_short_last_group: bool = False,
) -> Batch:
    """A Batch of the given inputs and metadata (a shaper's, when `ir` is given), as a call makes it."""
    bind = binder(tuple(inputs_needed or (ir.inputs if ir else ())), tuple(metas_needed or (ir.metas if ir else ())))
    return bind(rewards, group_size, offsets, channels, metadata, reward_components, allow_short_last_group)


def channel_arrays(channels: Mapping[str, Any], inputs_needed: tuple[tuple[str, str], ...], n: int
                   ) -> dict[str, np.ndarray]:
    """Each input a shaper reads, from `channels`: n values checked against its type (a bool as 0/1)."""
    bind = binder(tuple(inputs_needed), ())
    return bind(np.zeros(n), None, np.array([0, n]), channels, None, None, False).inputs
