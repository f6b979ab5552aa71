"""Params: a pydantic model generated from each shaper's declarations, and per-group rows.

A param value may be one scalar for the whole batch or one value per group (an array of
length G), so per-agent overrides run in a single kernel call.
"""

from __future__ import annotations

import difflib
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator
from pydantic_core import PydanticCustomError

from ..ir.nodes import Op, ParamSpec, ShaperIR, walk, StepKind
from .validate import INEXACT, as_array, is_finite_number, past_exact, show


class ParamError(ValueError):
    """A bad param: names the key, and the closest valid key for an unknown one. `required` names a
    param with no default that was not given, so a caller can say how its users give one."""

    def __init__(self, message: str, required: str | None = None):
        super().__init__(message)
        self.required = required


def _suggest(key: str, options) -> str:
    close = difflib.get_close_matches(key, list(options), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def mapping_of_params(values: Any, where: str = "params") -> dict[str, Any]:
    """A params mapping with string keys (None is no params); anything else names what is wrong."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ParamError(f"{where}: expected a mapping of param names to values, got {type(values).__name__}")
    for key in values:
        if not isinstance(key, str):
            raise ParamError(f"{where}: param names are strings, got the key {key!r}")
    return dict(values)


def _band_check(value):
    if value is None:
        return value
    a, b, f = (float(x) for x in value)
    if not all(map(math.isfinite, (a, b, f))):
        raise ValueError(f"band needs finite a, b and f, got a={a:g}, b={b:g}, f={f:g}")
    if not b > a:
        raise ValueError(f"band needs b > a, got a={a:g}, b={b:g}")
    if not 0 <= f <= 1:
        raise ValueError(f"band needs 0 <= f <= 1, got f={f:g}")
    return (a, b, f)


_NAMES = {"bool": "a bool (true or false)", "int": "an integer", "float": "a float", "band": "a band [a, b, f]"}


def _is_number(v: Any, kind: str) -> bool:
    """A number of this kind as written: a bool is not a number, a string never is, and an int
    param takes a float only when it is whole (3.0, not 3.5: pydantic names that case itself)."""
    if isinstance(v, (bool, np.bool_)):
        return False
    if kind == "int":
        return isinstance(v, (int, np.integer, float, np.floating))
    return isinstance(v, (int, float, np.integer, np.floating))


def _type_check(kind: str):
    """A before-validator that refuses the values pydantic's lax mode would coerce (true -> 1.0,
    "3" -> 3, 1 -> True): the docs promise a wrong type is an error, not a different reward."""

    def check(value):
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value.item()
        if value is None:
            return value  # optional params take None; a required one gets pydantic's own error
        if kind == "bool":
            ok = isinstance(value, (bool, np.bool_))
        elif kind == "band":
            items = list(value) if isinstance(value, (list, tuple, np.ndarray)) else None
            ok = items is not None and all(_is_number(x, "float") for x in items)
            _refuse_inexact(*(items or ()))
        else:
            ok = _is_number(value, kind)
            if ok and kind == "int" and not is_finite_number(value):  # a whole number every kernel reads as a float
                raise PydanticCustomError("param_type", "expected an integer within the float range, got {got}",
                                          {"got": show(value)})
            _refuse_inexact(value)
        if not ok:
            raise PydanticCustomError("param_type", "expected {expected}, got {got}",
                                      {"expected": _NAMES[kind], "got": f"{value!r} ({type(value).__name__})"})
        return value

    return check


def _refuse_inexact(*values: Any) -> None:
    """An int past 2**53 would reach the kernels rounded (they read params as float64): refused, as
    the same value in the data is."""
    for v in values:
        if past_exact(v):
            raise PydanticCustomError("param_type", INEXACT + ", got {got}", {"got": show(int(v))})


def _field(spec: ParamSpec, shaper: str):
    if spec.kind == "enum":
        typ: Any = Literal[spec.members]  # type: ignore[valid-type]
    elif spec.kind == "bool":
        typ = bool
    elif spec.kind == "band":
        typ = tuple[float, float, float]
    else:
        bounds = {}
        if spec.lo is not None:
            bounds["gt" if spec.lo_strict else "ge"] = spec.lo
        if spec.hi is not None:
            bounds["lt" if spec.hi_strict else "le"] = spec.hi
        base = int if spec.kind == "int" else float
        typ = Annotated[base, Field(allow_inf_nan=False, **bounds)] if base is float else Annotated[base, Field(**bounds)]
    if spec.optional:
        return (Optional[typ], spec.default)  # None unless the spec gives a default (`exceed: float? = -10`)
    if spec.required:
        return (typ, ...)
    if spec.kind in ("int", "float") and not math.isfinite(spec.default):
        # a literal such as 1e400 reads as inf: no value the model would accept
        raise ParamError(f"param {spec.name!r} of shaper {shaper!r}: default {spec.default!r} is not a finite number")
    return (typ, spec.default)


_MODELS: dict[tuple, tuple[ShaperIR, type[BaseModel]]] = {}  # by id; holding the IR keeps the id unique


def params_model(ir: ShaperIR, names: frozenset[str] | None = None) -> type[BaseModel]:
    """The pydantic model of a shaper's params (of only `names`, when given: per-group values are
    validated apart from the others): typed, ranged, unknown keys rejected."""
    if (id(ir), names) in _MODELS:
        return _MODELS[id(ir), names][1]
    specs = [spec for spec in ir.params if names is None or spec.name in names]
    fields = {spec.name: _field(spec, ir.name) for spec in specs}
    validators = {}
    for spec in specs:
        if spec.kind in _NAMES:
            validators[f"_type_{spec.name}"] = field_validator(spec.name, mode="before")(_type_check(spec.kind))
        if spec.kind == "band":
            validators[f"_check_{spec.name}"] = field_validator(spec.name)(_band_check)
    model = create_model(  # type: ignore[call-overload]
        f"{ir.name}_params", __config__=ConfigDict(extra="forbid", strict=False), __validators__=validators, **fields
    )
    _MODELS[id(ir), names] = (ir, model)
    return model


def _what(error: dict, shaper: str) -> str:
    """pydantic's first error in shapec's words: `expected ...`, the value given once, and a required
    param named as one (pydantic says `Field required`)."""
    loc = ".".join(str(x) for x in error["loc"])
    if error["type"] == "missing":
        return f"{loc!r} of shaper {shaper!r}: required (it has no default)"
    msg = error["msg"].replace("Input should be", "expected", 1)
    if error["type"] != "param_type" and "input" in error:  # the value given, once
        msg += f" ({error['input']!r})" if " got " in msg else f", got {error['input']!r}"
    return f"{loc!r} of shaper {shaper!r}: {msg}"


def validate_params(ir: ShaperIR, values: Mapping[str, Any] | None, where: str = "",
                    only: frozenset[str] | None = None) -> dict[str, Any]:
    """Validate scalar params (of `only` these, when given); unknown keys name the closest valid one."""
    values = mapping_of_params(values, f"{where}params of shaper {ir.name!r}")
    names = [s.name for s in ir.params]
    for key in values:
        if key not in names:
            raise ParamError(f"{where}unknown param {key!r} for shaper {ir.name!r}{_suggest(key, names)}")
    try:
        model = params_model(ir, only).model_validate(values)
    except ValidationError as err:
        first = err.errors()[0]
        required = str(first["loc"][0]) if first["type"] == "missing" else None
        raise ParamError(f"{where}param {_what(first, ir.name)}", required) from None
    return model.model_dump()


@dataclass(frozen=True)
class Resolved:
    """One stage's params, validated and encoded as the backends read them (floats; a band as
    (a, b, f, present); an enum as its member's index): one value per param, or one per group."""

    ir: ShaperIR
    uniform: dict[str, Any]
    per_group: dict[str, list]

    def check_groups(self, G: int) -> None:
        """Per-group values are for G groups, or a ParamError names the first param that is not."""
        for name, rows in self.per_group.items():
            if len(rows) != G:
                raise ParamError(f"param {name!r}: expected {G} per-group values, got {len(rows)}")

    def columns(self, G: int) -> dict[str, np.ndarray]:
        """Every param as an array of G values ((G, 4) for a band); per-group values must be G."""
        self.check_groups(G)
        out: dict[str, np.ndarray] = {}
        for spec in self.ir.params:
            if spec.name in self.per_group:
                rows = self.per_group[spec.name]
                out[spec.name] = np.array(rows, dtype=np.float64).reshape((G, 4) if spec.kind == "band" else (G,))
            elif spec.kind == "band":
                out[spec.name] = np.tile(np.array(self.uniform[spec.name], dtype=np.float64), (G, 1))
            else:
                out[spec.name] = np.full(G, self.uniform[spec.name], dtype=np.float64)
        return out


def resolve(ir: ShaperIR, params: Mapping[str, Any] | None) -> Resolved:
    """Validate a stage's params (scalars, or a list or array of per-group values) and encode them."""
    params = mapping_of_params(params, f"params of shaper {ir.name!r}")
    specs = {s.name: s for s in ir.params}
    for key in params:
        if key not in specs:
            raise ParamError(f"unknown param {key!r} for shaper {ir.name!r}{_suggest(key, list(specs))}")
    per_group_values = {k: v for k, v in params.items() if _is_per_group(specs[k], v)}
    # the scalars by a model without the per-group params: a required one given per group is given
    scalars = validate_params(ir, {k: v for k, v in params.items() if k not in per_group_values}, "",
                              frozenset(specs.keys() - per_group_values.keys()) if per_group_values else None)
    uniform = {name: _encode(specs[name], value) for name, value in scalars.items() if name not in per_group_values}
    per_group: dict[str, list] = {}
    for name, column in per_group_values.items():
        memo: dict[Any, Any] = {}  # per-group columns repeat a few values: validate each once
        rows = []
        for g, v in enumerate(list(column)):
            key = _typed(list(v) if isinstance(v, np.ndarray) else v)  # True is not 1 here either
            try:
                hash(key)
            except TypeError:
                raise ParamError(f"group {g}: param {name!r} of shaper {ir.name!r}: expected "
                                 f"{_NAMES.get(specs[name].kind, 'a value')}, got {v!r}") from None
            if key not in memo:
                memo[key] = _encode(specs[name], validate_params(ir, {name: v}, f"group {g}: ", frozenset((name,)))[name])
            rows.append(memo[key])
        per_group[name] = rows
    for name in per_group.keys() & state_params(ir):
        raise ParamError(f"param {name!r} of shaper {ir.name!r}: a state update reads it, and a state is one "
                         f"number for the whole call: give one value, not one per group")
    return Resolved(ir, uniform, per_group)


def state_params(ir: ShaperIR) -> set[str]:
    """The params a state update reads: one value for the whole call each (the kernels read its first column)."""
    return {n.attr[1] for step in ir.batch_steps if step.kind is StepKind.STATE for n in walk(step.expr)
            if n.op is Op.REF and n.attr[0] == "param"}


def param_arrays(ir: ShaperIR, params: Mapping[str, Any] | None, G: int) -> dict[str, np.ndarray]:
    """Scalars or per-group arrays -> float64 arrays of length G (bands: (G, 4); enums: member index)."""
    return resolve(ir, params).columns(G)


def _typed(value: Any) -> tuple:
    """A value with its type, and its items' (a band (1, 3, True) is not (1, 3, 1.0): equal, and it
    hashes alike, but only one of them is valid); lists become tuples, so the key is hashable.
    A float zero carries its sign: -0.0 == 0.0, but `-coeff * x` is a zero of the other sign."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_typed(v) for v in value))
    if isinstance(value, (float, np.floating)) and value == 0.0:
        return (type(value).__name__, value, math.copysign(1.0, value))
    return (type(value).__name__, value)


def _is_per_group(spec: ParamSpec, value: Any) -> bool:
    """A list or array is one value per group, except a band's own (a, b, f)."""
    if isinstance(value, np.ndarray):
        return value.ndim == (2 if spec.kind == "band" else 1)
    if isinstance(value, list):
        return spec.kind != "band" or all(v is None or isinstance(v, (list, tuple)) for v in value)
    return False


def _encode(spec: ParamSpec, value: Any):
    if spec.kind == "band":
        return (math.nan, math.nan, math.nan, 0.0) if value is None else (*map(float, value), 1.0)
    if value is None:
        return math.nan
    if spec.kind == "enum":
        return float(spec.members.index(value))
    return float(value)


# ------------------------------------------------------------------------- the key of a call's params
_SCALARS = frozenset({float, int, bool, str, type(None), np.float64, np.float32, np.float16, np.int64, np.int32,
                      np.int16, np.int8, np.uint64, np.uint32, np.uint16, np.uint8, np.bool_})


class _Uncacheable(Exception):
    """A value the key cannot capture (an object array, an unhashable type): resolved on every call."""


def params_key(params: Any) -> tuple | None:
    """The params of a call by value, as a dict key (None: not keyable): equal keys resolve to equal
    param arrays. A number's type is part of it (1, 1.0 and True validate differently) and so is a
    zero's sign (-0.0 == 0.0, but `-coeff * x` is a zero of the other sign), in every float width.

    A flat dict of scalars, what a training loop passes every step, is keyed by its items as they
    are; anything else (per-group arrays, a pipeline's nested dicts, tensors) by its values' bits."""
    if params is None:
        return ()
    if type(params) is dict:
        values = tuple(params.values())  # names and values as two flat tuples: no pair per item to build and hash
        types = tuple(map(type, values))
        if _SCALARS.issuperset(types):
            signs = tuple(math.copysign(1.0, v) for v in values if v == 0) if 0 in values else ()
            return tuple(params), values, types, signs
    try:
        key = _bits(params)
        hash(key)
    except (_Uncacheable, TypeError):
        return None
    return key


def _bits(value: Any):
    kind = type(value)
    if kind in _SCALARS:
        return (kind, struct.pack("<d", float(value))) if isinstance(value, (float, np.floating)) else (kind, value)
    if isinstance(value, (list, tuple)):
        return (kind, tuple(_bits(v) for v in value))
    if isinstance(value, Mapping):
        return (dict, tuple((k, _bits(v)) for k, v in value.items()))
    value = as_array("params", value)
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        return (np.ndarray, value.dtype.str, value.shape, value.tobytes())
    raise _Uncacheable
