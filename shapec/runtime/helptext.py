"""What `help(shaper)` and `shaper.__doc__` say about one compiled shaper or pipeline.

`help()` documents an instance through its type, so every compiled shaper gets a class of its own
(a subclass of CompiledShaper) whose docstring is written here from the checked IR: the spec's
docstring, each param with its type, range and default, the inputs and metadata with their units,
the metrics, and the contracts.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..ir.nodes import MetaSpec, ParamSpec, PipelineIR, ShaperIR


def _num(v: float) -> str:
    return f"{v:g}"


def param_range(spec: ParamSpec) -> str:
    """`in [0, 1]`, `>= 0`, `< 5`, or '' when the param is unbounded (as the grammar declares bounds)."""
    if spec.lo is not None and spec.hi is not None:
        return f"in [{_num(spec.lo)}, {_num(spec.hi)}]"
    if spec.lo is not None:
        return f"{'>' if spec.lo_strict else '>='} {_num(spec.lo)}"
    if spec.hi is not None:
        return f"{'<' if spec.hi_strict else '<='} {_num(spec.hi)}"
    return ""


def _value(spec: ParamSpec, value: Any) -> str:
    if spec.kind == "bool":
        return "true" if value else "false"
    if spec.kind == "band":
        return "{" + ", ".join(_num(v) for v in value) + "}"
    if spec.kind == "enum":
        return str(value)
    return _num(value)


def param_line(spec: ParamSpec, bound: dict[str, Any] | None = None) -> str:
    """`tau_acc: float in [0, 1] = 0.05`, as the param is declared (or as a pipeline binds it)."""
    kind = f"enum({', '.join(spec.members)})" if spec.kind == "enum" else spec.unit or spec.kind
    text = f"{spec.name}: {kind}{'?' if spec.optional else ''}"
    bounds = param_range(spec)
    if bounds:
        text += f" {bounds}"
    if bound and spec.name in bound:
        return f"{text} = {_value(spec, bound[spec.name])} (set by the pipeline)"
    if spec.default is not None:
        return f"{text} = {_value(spec, spec.default)}"
    return f"{text} (optional: missing unless given)" if spec.optional else f"{text} (required)"


def _input_line(name: str, typ: str) -> str:
    what = {"bool": "a boolean", "int": "a number", "float": "a number"}.get(typ, f"a length in {typ}")
    return f"{name}: {typ}, {what} per rollout"


def _meta_line(m: MetaSpec) -> str:
    fields = ", ".join(f"{n}: {t}" for n, t in m.fields)
    if m.kind == "list":
        return f"{m.name}: list({fields}), a list of records per group"
    if m.kind == "record":
        return f"{m.name}: {{{fields}}}, one record per group"
    return f"{m.name}: {m.type}, one value per group (may be absent)"


def _section(title: str, lines: list[str]) -> list[str]:
    return [f"{title}:", *(f"    {line}" for line in lines), ""] if lines else []


def _stage_lines(ir: ShaperIR, bound: dict[str, Any] | None = None) -> list[str]:
    lines = [f"{ir.name}: requires {ir.requires} rewards, produces {ir.produces} rewards", ""]
    if ir.doc:
        lines += [*(line.rstrip() for line in inspect.cleandoc(ir.doc).strip("\n").splitlines()), ""]
    lines += _section("Params (params={...})", [param_line(p, bound) for p in ir.params])
    lines += _section("Inputs (channels={...})", [_input_line(n, t) for n, t in ir.inputs])
    lines += _section("Metadata (metadata={...})", [_meta_line(m) for m in ir.metas])
    lines += _section("Terms and factors (Result.terms, Result.factors)",
                      [f"term {t}" for t in ir.terms] + [f"factor {f}" for f in ir.factors])
    lines += _section("Metrics (Result.metrics)", [name for name, _ in ir.metrics])
    lines += _section("State (state_dict())", [f"{n} (starts at {_num(v)})" for n, v in ir.states]
                      + [f"{n}, per prompt (starts at {_num(v)}; calls pass prompts=)" for n, v, _ in ir.prompt_states])
    return lines


def shaper_doc(ir: ShaperIR | PipelineIR) -> str:
    """The docstring of one compiled shaper or pipeline."""
    call = ["Call: shaper(rewards, group_size=..., channels={...}, metadata={...}, params={...}) -> Result"]
    if isinstance(ir, ShaperIR):
        return "\n".join(_stage_lines(ir) + call) + "\n"
    names = " >> ".join(s.name for s, _ in ir.stages)
    lines = [f"pipeline {ir.name} = {names}", "",
             "Params go per stage: params={'<stage>': {...}}.", ""]
    for stage, bound in ir.stages:
        lines += [f"Stage {stage.name}", "-" * (6 + len(stage.name)), *_stage_lines(stage, bound)]
    return "\n".join(lines + call) + "\n"


def documented(base: type, ir: ShaperIR | PipelineIR) -> type:
    """A subclass of `base` for this one shaper, so help() and __doc__ show the shaper's own text."""
    kind = "pipeline" if isinstance(ir, PipelineIR) else "shaper"
    call = inspect.signature(base.__call__)
    # help() prints the class's signature: show how the shaper is called, not how it is built
    signature = call.replace(parameters=list(call.parameters.values())[1:])
    return type(f"{kind} {ir.name}", (base,), {"__doc__": shaper_doc(ir), "__module__": base.__module__,
                                               "__qualname__": f"{kind} {ir.name}",
                                               "__signature__": signature})
