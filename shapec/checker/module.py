"""AST -> typed IR, the module-level driver. Collects every error in one pass; a poison type stops cascades.

A shaper body is checked in one walk (statements.py) that resolves names (scopes.py) and types
each expression (types.py, units and levels) as it goes; what is known of the values, intervals
and definitions, is contracts.ShaperFacts, which the walk asks about factors and which the order
and contract checks that follow it (ordering.py) read. The property analysis of `ensure` clauses
is shapec/analysis/.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from ..syntax import ast as A
from ..syntax.depth import recursion_guard
from ..syntax.source import Diagnostic, ShapeError, Span
from .shared import BAD, finite_const, suggest
from .import_names import bound_name
from ..ir.nodes import LEVEL_NAMES, MAX_EXACT_INT, Node, Op, POISON, ParamSpec, PipelineIR, ShaperIR
from ..ir.depth import deep_expressions
from .ordering import stage_order
from .statements import ShaperChecker
from .types import REDUCTIONS

class Checker:
    def __init__(self, loader: Callable[[str, bool, Span], "CheckedModule | None"] | None = None):
        self.diags: list[Diagnostic] = []
        self.loader = loader

    # ------------------------------------------------------------ diagnostics
    def error(self, code: str, message: str, span: Span) -> Node:
        self.diags.append(Diagnostic(code, message, span))
        return Node(Op.POISON, (), POISON, span=span)

    # ------------------------------------------------------------ module
    def module(self, mod: A.Module, source: str, filename: str) -> "CheckedModule":
        out = CheckedModule(filename=filename, doc=mod.doc)
        self.fns: dict[str, A.FnDef] = {}
        self.modules: dict[str, CheckedModule] = {}
        names: set[str] = set()
        for it in mod.items:
            if isinstance(it, A.Import):
                loaded = self.loader(it.target, it.is_path, it.span) if self.loader else None
                if loaded is None:
                    self.error("E205", f"cannot import {it.target!r}", it.span)
                    continue
                if isinstance(loaded, Diagnostic):  # refused or not found, with the loader's reason
                    self.diags.append(loaded)
                    continue
                alias = bound_name(it)
                self.modules[alias] = loaded
                for fname, fn in loaded.fns.items():
                    self.fns.setdefault(fname, fn)
            elif isinstance(it, A.FnDef):
                if it.name in self.fns and it.name not in names:
                    self.fns[it.name] = it
                elif it.name in names:
                    self.error("E202", f"{it.name!r} is already defined", it.span)
                self.fns[it.name] = it
                names.add(it.name)
        out.fns = {k: v for k, v in self.fns.items()}
        for it in mod.items:
            if isinstance(it, (A.Shaper, A.Pipeline)):
                if it.name in names:
                    self.error("E202", f"{it.name!r} is already defined", it.span)
                    continue
                names.add(it.name)
            if isinstance(it, A.Shaper):
                ir = ShaperChecker(self, it, source, filename).run()
                if ir is not None:
                    out.shapers[it.name] = ir
            elif isinstance(it, A.Pipeline):
                ir = self.pipeline(it, out, source, filename)
                if ir is not None:
                    out.pipelines[it.name] = ir
        return out

    def resolve_shaper(self, ref: str, local: "CheckedModule") -> ShaperIR | PipelineIR | None:
        if "." in ref:
            alias, name = ref.split(".", 1)
            mod = self.modules.get(alias)
            if mod is None:
                return None
            return mod.shapers.get(name) or mod.pipelines.get(name)
        found = local.shapers.get(ref) or local.pipelines.get(ref)
        if found is None:
            for mod in self.modules.values():
                found = mod.shapers.get(ref) or mod.pipelines.get(ref)
                if found is not None:
                    break
        return found

    def pipeline(self, p: A.Pipeline, local: "CheckedModule", source: str, filename: str) -> PipelineIR | None:
        stages: list[tuple[ShaperIR, dict, Span]] = []
        ok = True
        for st in p.stages:
            target = self.resolve_shaper(st.ref, local)
            if target is None:
                known = list(local.shapers) + [f"{a}.{n}" for a, m in self.modules.items() for n in m.shapers]
                self.error("E206", f"unknown shaper {st.ref!r}{suggest(st.ref, known)}", st.span)
                ok = False
                continue
            sub = [(s, dict(a)) for s, a in target.stages] if isinstance(target, PipelineIR) else [(target, {})]
            args = {}
            for kw in st.args or ():
                if len(sub) != 1:
                    self.error("E601", f"cannot pass params to pipeline {st.ref!r}", kw.span)
                    ok = False
                    continue
                shaper = sub[0][0]
                spec = {ps.name: ps for ps in shaper.params}
                if kw.name not in spec:
                    self.error("E601", f"unknown param {kw.name!r} for shaper {shaper.name!r}"
                               f"{suggest(kw.name, list(spec))}", kw.span)
                    ok = False
                    continue
                value = self.const_value(kw.value, spec[kw.name])
                if value is not BAD:
                    args[kw.name] = value
            for shaper, inherited in sub:
                stages.append((shaper, {**inherited, **args}, st.span))
        ok = stage_order(self, stages) and ok
        if not ok:
            return None
        return PipelineIR(p.name, _distinct_stage_names([(s, a) for s, a, _ in stages]), source, filename,
                          tuple(span for _, _, span in stages))

    def const_value(self, expr: A.Expr, spec: ParamSpec):
        """Evaluate a constant call argument or default against a param's declared type."""
        if spec.kind == "enum":
            if isinstance(expr, (A.Name, A.String)):
                member = expr.id if isinstance(expr, A.Name) else expr.value
                if member in spec.members:
                    return member
                self.error("E307", f"{member!r} is not one of {', '.join(spec.members)}", expr.span)
                return BAD
            self.error("E604", f"param {spec.name!r} takes one of {', '.join(spec.members)}", expr.span)
            return BAD
        if spec.kind == "band":
            if isinstance(expr, A.BandLit):
                vals = [finite_const(x, self.error) for x in (expr.a, expr.b, expr.f)]
                if BAD in vals:
                    return BAD
                if None in vals:
                    self.error("E308", "band values must be constants", expr.span)
                    return BAD
                if not self.check_band(*vals, expr.span):
                    return BAD
                return tuple(vals)
            self.error("E604", f"param {spec.name!r} takes a band {{a, b, f}}", expr.span)
            return BAD
        if spec.kind == "bool":
            if isinstance(expr, A.Bool):
                return expr.value
            self.error("E604", f"param {spec.name!r} takes true or false", expr.span)
            return BAD
        value = finite_const(expr, self.error)
        if value is BAD:
            return BAD
        if value is None:
            self.error("E308", f"param {spec.name!r} needs a constant number", expr.span)
            return BAD
        if spec.kind == "int" and (value != int(value) or abs(value) > MAX_EXACT_INT):
            whole = value == int(value)
            self.error("E604", f"param {spec.name!r} is an int" + (f" within +-{MAX_EXACT_INT} (2**53)" if whole else ""),
                       expr.span)
            return BAD
        if not _in_range(value, spec):
            self.error("E602", f"{value:g} is outside the range of param {spec.name!r}{_range_text(spec)}", expr.span)
            return BAD
        return int(value) if spec.kind == "int" else float(value)

    def check_band(self, a: float, b: float, f: float, span: Span) -> bool:
        if not b > a:
            self.error("E603", f"band needs b > a, got a={a:g}, b={b:g}", span)
            return False
        if not 0 <= f <= 1:
            self.error("E603", f"band needs 0 <= f <= 1, got f={f:g}", span)
            return False
        return True


def _in_range(v: float, s: ParamSpec) -> bool:
    if s.lo is not None and (v < s.lo or (s.lo_strict and v == s.lo)):
        return False
    if s.hi is not None and (v > s.hi or (s.hi_strict and v == s.hi)):
        return False
    return True


def _range_text(s: ParamSpec) -> str:
    parts = []
    if s.lo is not None:
        parts.append(f"{'>' if s.lo_strict else '>='} {s.lo:g}")
    if s.hi is not None:
        parts.append(f"{'<' if s.hi_strict else '<='} {s.hi:g}")
    return f" ({' and '.join(parts)})" if parts else ""


@dataclass
class CheckedModule:
    """One checked file: its shapers and pipelines as IR, and its helper functions for importers."""

    filename: str
    doc: str | None
    shapers: dict[str, ShaperIR] = field(default_factory=dict)
    pipelines: dict[str, PipelineIR] = field(default_factory=dict)
    fns: dict[str, A.FnDef] = field(default_factory=dict)


def check_module(mod: A.Module, source: str, filename: str, loader=None) -> CheckedModule:
    """Check a parsed module; raise ShapeError with every diagnostic found."""
    checker = Checker(loader)
    with recursion_guard(mod.span):
        out = checker.module(mod, source, filename)
    diags = checker.diags + [d for ir in out.shapers.values() for d in deep_expressions(ir)]
    if diags:
        raise ShapeError(sorted(diags, key=lambda d: (d.path, d.span.start)))
    return out


__all__ = ["check_module", "CheckedModule", "Checker", "ShaperChecker", "REDUCTIONS", "LEVEL_NAMES"]


def _distinct_stage_names(stages: list[tuple[ShaperIR, dict]]) -> tuple[tuple[ShaperIR, dict], ...]:
    """A shaper that comes back in a pipeline is a stage of its own: `a >> b >> a` has stages a, b and
    a#2. State, params, metrics and results are kept by stage name, so two stages under one name
    would share one state and overwrite each other's metrics. `#` is in no shaper's name."""
    seen: dict[str, int] = {}
    out = []
    for shaper, args in stages:
        seen[shaper.name] = seen.get(shaper.name, 0) + 1
        if seen[shaper.name] > 1:
            shaper = replace(shaper, name=f"{shaper.name}#{seen[shaper.name]}")
        out.append((shaper, args))
    return tuple(out)
