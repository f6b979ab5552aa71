"""Metadata fields no row of a file has, for `shapec run`.

A group whose row has no field for a `meta` declaration passes the metadata as absent, which is
how a prompt without a profile band looks. When no row of the whole file has the field, it is a
misspelt field (`budgt` for `budget`) or a file of another shape, and every group would be shaped
without it, silently: an error naming the field and the closest field the rows have. Where every
read of it is handled by design (a `??` fallback, a `missing()` test, a `count` over an absent
list: runtime/batch_reach.first_meta_read), absent everywhere is a valid file, so it is only a
warning, given when the rows have a field close to its name.
"""

from __future__ import annotations

import sys

from ..runtime.batch import declaration
from ..runtime.batch_reach import first_meta_read, where
from ..runtime.params import param_arrays
from .grouping import Chunk, absent_line, closest
from .spec import ToolError, stage_irs


WARN_CUTOFF = 0.6  # a warning for a field read by design as absent needs a likelier misspelling than an error


class MetaFields:
    """Which row fields of the declared metadata some row of the file has, chunk by chunk."""

    def __init__(self, shaper, plan, layout, group_key: str | None):
        self.shaper, self.plan = shaper, plan
        self.specs = {m.name: m for ir in stage_irs(shaper) for m in ir.metas}
        self.unseen = {field: name for name in self.specs for field in layout.meta_fields(name)}
        inputs = [name for ir in stage_irs(shaper) for name, _ in ir.inputs]
        # fields the run reads for something else are no misspelling of a metadata field
        self.read = {*self.unseen, "reward", *map(layout.field_of, inputs), group_key, layout.agent_key}
        self.names: list[str] | None = None  # the other fields of the first readable chunk, for hints

    def see(self, chunk: Chunk) -> None:
        """Strike the fields some row of this chunk has; the first readable chunk gives the hints."""
        block = chunk.block
        if not self.unseen or not block.readable():
            return
        if self.names is None:
            self.names = [f for f in block.field_names() if f not in self.read]
        for field in [f for f in self.unseen if block.has_field(f)]:
            del self.unseen[field]

    def check(self, rows: int) -> None:
        """At the end of the file: an error for every field no row has that a reward reads with nothing
        standing in for it, a warning for the others that are close to a field the rows have."""
        if not self.unseen or self.names is None:  # no readable row: the rows' own errors said so
            return
        errors = []
        scope = f"the file ({rows} rows)"
        for field, name in self.unseen.items():
            what = f"metadata {name!r} (`{declaration(self.specs[name])}`" \
                   + (f", read from {field!r})" if field != name else ")")
            line = absent_line(field, what, scope, self.names)
            read = self._read(name)
            if read is not None:
                errors.append(f"{line}; {read}, so no group would be shaped through it")
            elif closest(field, self.names, WARN_CUTOFF) is not None:
                print(f"shapec: warning: {line}; every read of it has a stand-in, so it is absent in every group",
                      file=sys.stderr)
        if errors:
            raise ToolError("\n".join(errors))

    def _read(self, name: str) -> str | None:
        """Where a stage reads metadata `name` with nothing standing in for it, under the config's
        params or any agent's overrides of them; None when no stage does."""
        base = self.plan.params(None)
        for ir in stage_irs(self.shaper):
            if all(m.name != name for m in ir.metas):
                continue
            params = base[ir.name] if self.shaper.is_pipeline else base
            overrides = (self.plan.agents.get(ir.name) or {}).values()
            for values in (params, *({**params, **(o or {})} for o in overrides)):
                found = first_meta_read(ir, param_arrays(ir, values, 1), name)
                if found is not None:
                    return f"shaper {ir.name!r} reads it with nothing standing in for it ({where(found)})"
        return None
