"""Where the flat layout reads each input and metadata value: `--map NAME=FIELD`.

A spec names its inputs and metadata for what they mean (`correct`, `length`); a user's rows
name them as the trainer wrote them (`is_right`, `num_tokens`, `info.budget`). A mapping reads
NAME from FIELD (a top-level field, else a dotted path into nested objects or Parquet structs, as
`--group-by` reads one), and a bool input may instead be derived from a number field by one
comparison: `--map correct='reward > 0'`. A config carries the same under a top-level `map:`
block; `--map` overrides it name by name. A name the shaper does not read, a field that is no
path, or a comparison for anything but a bool input is refused before any row is read.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass

from .grouping import closest
from .spec import stage_irs

OPS = {">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
       "<": operator.lt}
_PATH = r"[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*"
_FIELD = re.compile(rf"\s*({_PATH})\s*")
_DERIVED = re.compile(rf"\s*({_PATH})\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*")


class MapError(ValueError):
    """A mapping that cannot be used: the caller says which option or config key gave it."""


@dataclass(frozen=True)
class Source:
    """What one input or metadata value is read from: a field, or a field compared with a number."""

    path: str
    op: str | None = None
    number: float = 0.0

    def describe(self) -> str:
        return self.path if self.op is None else f"{self.path} {self.op} {self.number:g}"

    def derive(self, values):
        """A derived bool column from the field's numbers (0/1 floats); others as they are."""
        return values if self.op is None else OPS[self.op](values, self.number).astype(float)


def parse_source(text: str) -> Source:
    """`FIELD` or `FIELD OP NUMBER` (OP one of > >= < <= == !=), or a MapError saying what it takes."""
    if not isinstance(text, str):
        raise MapError(f"expected a field name, got {text!r}")
    m = _FIELD.fullmatch(text)
    if m:
        return Source(m.group(1))
    m = _DERIVED.fullmatch(text)
    if m:
        try:
            number = float(m.group(3))
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise MapError(f"expected a finite number after {m.group(2)!r}, got {m.group(3)!r}")
        return Source(m.group(1), m.group(2), number)
    raise MapError(f"expected a field name, a dotted path such as info.num_tokens, or a comparison such as "
                   f"'reward > 0', got {text!r}")


def read_map(shaper, entries: list[tuple[str, str, object]]) -> dict[str, Source]:
    """The mapping from (where, name, field) entries, config first then --map (the later wins).
    `where` prefixes each MapError (`--map correct=...`, `config.yaml: map.correct`)."""
    inputs = {name: typ for ir in stage_irs(shaper) for name, typ in ir.inputs}
    metas = {m.name for ir in stage_irs(shaper) for m in ir.metas}
    known = [*inputs, *sorted(metas)]
    out: dict[str, Source] = {}
    for where, name, text in entries:
        if name == "reward":
            raise MapError(f"{where}: the reward is read from and written back to the field 'reward'; --map "
                           f"names the spec's inputs and metadata")
        if name not in inputs and name not in metas:
            close = closest(name, known, cutoff=0.6)
            hint = f"did you mean {close!r}? " if close else ""
            raise MapError(f"{where}: {shaper.name!r} has no input or metadata {name!r}; {hint}"
                           f"it reads {', '.join(map(repr, known)) or 'nothing from the rows'}")
        try:
            source = parse_source(text)
        except MapError as err:
            raise MapError(f"{where}: {err}") from None
        if source.op is not None and inputs.get(name) != "bool":
            what = f"input {name!r} is {inputs[name]}" if name in inputs else f"{name!r} is metadata"
            raise MapError(f"{where}: a comparison gives a bool, but {what}; map it to a field")
        out[name] = source
    return out


def map_entry(text: str) -> tuple[str, str]:
    """One `--map NAME=FIELD` argument as (name, field)."""
    name, eq, field = text.partition("=")
    if not eq or not name.strip():
        raise MapError(f"--map {text}: expected NAME=FIELD, such as correct=is_right or correct='reward > 0'")
    return name.strip(), field
