"""Params: a pydantic model generated from each shaper's declarations, and per-group rows.

A param value may be one scalar for the whole batch or one value per group (an array of
length G), so per-agent overrides run in a single kernel call.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator
from pydantic_core import PydanticCustomError

from ..compiler.ir import ParamSpec, ShaperIR
from .validate import is_finite_number, show


class ParamError(ValueError):
    """A bad param: names the key, and the closest valid key for an unknown one."""


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
        else:
            ok = _is_number(value, kind)
            if ok and kind == "int" and not is_finite_number(value):  # a whole number every kernel reads as a float
                raise PydanticCustomError("param_type", "expected an integer within the float range, got {got}",
                                          {"got": show(value)})
        if not ok:
            raise PydanticCustomError("param_type", "expected {expected}, got {got}",
                                      {"expected": _NAMES[kind], "got": f"{value!r} ({type(value).__name__})"})
        return value

    return check


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


_MODELS: dict[int, tuple[ShaperIR, type[BaseModel]]] = {}  # by id; holding the IR keeps the id unique


def params_model(ir: ShaperIR) -> type[BaseModel]:
    """The pydantic model of a shaper's params: typed, ranged, unknown keys rejected."""
    if id(ir) in _MODELS:
        return _MODELS[id(ir)][1]
    fields = {spec.name: _field(spec, ir.name) for spec in ir.params}
    validators = {}
    for spec in ir.params:
        if spec.kind in _NAMES:
            validators[f"_type_{spec.name}"] = field_validator(spec.name, mode="before")(_type_check(spec.kind))
        if spec.kind == "band":
            validators[f"_check_{spec.name}"] = field_validator(spec.name)(_band_check)
    model = create_model(  # type: ignore[call-overload]
        f"{ir.name}_params", __config__=ConfigDict(extra="forbid", strict=False), __validators__=validators, **fields
    )
    _MODELS[id(ir)] = (ir, model)
    return model


def validate_params(ir: ShaperIR, values: Mapping[str, Any] | None, where: str = "") -> dict[str, Any]:
    """Validate scalar params; unknown keys name the closest valid one."""
    values = mapping_of_params(values, f"{where}params of shaper {ir.name!r}")
    names = [s.name for s in ir.params]
    for key in values:
        if key not in names:
            raise ParamError(f"{where}unknown param {key!r} for shaper {ir.name!r}{_suggest(key, names)}")
    try:
        model = params_model(ir).model_validate(values)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        got = f", got {first['input']!r}" if "input" in first and first["type"] not in ("missing", "param_type") else ""
        raise ParamError(f"{where}param {loc!r} of shaper {ir.name!r}: {first['msg']}{got}") from None
    return model.model_dump()


def param_arrays(ir: ShaperIR, params: Mapping[str, Any] | None, G: int) -> dict[str, np.ndarray]:
    """Scalars or per-group arrays -> float64 arrays of length G (bands: (G, 4); enums: member index).

    The same scalar params on the same number of groups return the same dict (shared: neither
    backend writes to it), so a training loop that passes one config every step pays for a dict
    lookup, and callers may cache what they derive from it by identity."""
    seen = seen_key(ir, params, G)
    if seen is not None and seen in _UNIFORM:
        return _UNIFORM[seen]
    params = mapping_of_params(params, f"params of shaper {ir.name!r}")
    specs = {s.name: s for s in ir.params}
    for key in params:
        if key not in specs:
            raise ParamError(f"unknown param {key!r} for shaper {ir.name!r}{_suggest(key, list(specs))}")
    per_group = {k: v for k, v in params.items() if _is_per_group(specs[k], v)}
    scalars = {k: v for k, v in params.items() if k not in per_group}
    key = None if per_group else _key(ir, scalars)
    if key is not None and (key, G) in _UNIFORM:
        return _UNIFORM[key, G]
    resolved = _validated_scalars(ir, scalars)
    out: dict[str, np.ndarray] = {}
    for spec in ir.params:
        if spec.name in per_group:
            column = list(per_group[spec.name])
            if len(column) != G:
                raise ParamError(f"param {spec.name!r}: expected {G} per-group values, got {len(column)}")
            memo: dict[Any, Any] = {}  # per-group columns repeat a few values: validate each once
            rows = []
            for g, v in enumerate(column):
                key = _typed(list(v) if isinstance(v, np.ndarray) else v)  # True is not 1 here either
                try:
                    hash(key)
                except TypeError:
                    raise ParamError(f"group {g}: param {spec.name!r} of shaper {ir.name!r}: expected "
                                     f"{_NAMES.get(spec.kind, 'a value')}, got {v!r}") from None
                if key not in memo:
                    memo[key] = _encode(spec, validate_params(ir, {spec.name: v}, f"group {g}: ")[spec.name])
                rows.append(memo[key])
            out[spec.name] = np.array(rows, dtype=np.float64).reshape((G, 4) if spec.kind == "band" else (G,))
        elif spec.kind == "band":
            out[spec.name] = np.tile(np.array(_encode(spec, resolved[spec.name]), dtype=np.float64), (G, 1))
        else:
            out[spec.name] = np.full(G, _encode(spec, resolved[spec.name]), dtype=np.float64)
    if key is not None:
        remember(_UNIFORM, (key, G), out)
        if seen is not None:
            remember(_UNIFORM, seen, out)
    return out


def seen_key(ir: ShaperIR, params: Any, G: int) -> tuple | None:
    """The exact params as passed (values and their types, in order), when they are all hashable
    scalars or tuples (a list is per-group values: not remembered)."""
    if type(params) is not dict:
        return None
    types = tuple(map(type, params.values()))
    if list in types:
        return None
    try:
        key = (id(ir), G, tuple((k, _typed(v)) for k, v in params.items()) if tuple in types
               else (tuple(params.items()), types, _zero_signs(params.values())
                     if 0.0 in params.values() else ()))
        hash(key)
    except TypeError:
        return None
    return key


def _typed(value: Any) -> tuple:
    """A value with its type, and its items' (a band (1, 3, True) is not (1, 3, 1.0): equal, and it
    hashes alike, but only one of them is valid); lists become tuples, so the key is hashable.
    A float zero carries its sign: -0.0 == 0.0, but `-coeff * x` is a zero of the other sign."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_typed(v) for v in value))
    if isinstance(value, float) and value == 0.0:
        return (type(value).__name__, value, math.copysign(1.0, value))
    return (type(value).__name__, value)


def _zero_signs(values) -> tuple:
    """The signs of the float zeros among values (what equality and hashing leave out)."""
    return tuple(math.copysign(1.0, v) for v in values if isinstance(v, float) and v == 0.0)


# Arrays of params that are the same for every group, by (params, G): a training loop passes the
# same params every step, and building 30 arrays per call cost a third of a small call. The
# kernels and the interpreter only read them.
_UNIFORM: dict[tuple, dict[str, np.ndarray]] = {}


def _key(ir: ShaperIR, scalars: dict[str, Any]) -> tuple | None:
    """A hashable key of scalar params (None when a value is not hashable: then nothing is remembered)."""
    try:
        # the type is part of the key: 1, 1.0 and True are equal (and hash alike) but validate differently
        key = (id(ir), tuple(sorted((k, _typed(v)) for k, v in scalars.items())))
        hash(key)
    except TypeError:
        return None
    params_model(ir)  # holds the IR, so its id stays unique while an entry lives
    return key


def remember(memo: dict, key: tuple, value) -> None:
    """memo[key] = value in a memo kept to about a thousand entries (cleared when it grows past)."""
    if len(memo) > 1024:
        memo.clear()
    memo[key] = value


_VALIDATED: dict[tuple, dict[str, Any]] = {}  # a training loop passes the same params every step


def _validated_scalars(ir: ShaperIR, scalars: dict[str, Any]) -> dict[str, Any]:
    """validate_params, remembered for hashable inputs so a repeated call skips pydantic."""
    key = _key(ir, scalars)
    if key is None:
        return validate_params(ir, scalars)
    if key not in _VALIDATED:
        remember(_VALIDATED, key, validate_params(ir, scalars))
    return _VALIDATED[key]


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
