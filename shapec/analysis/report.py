"""Verdicts as diagnostics (E7xx, W7xx), as text and JSON, and counterexamples `shapec explain` replays."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path

from ..ir.nodes import Op, PipelineIR, ShaperIR, StepKind
from ..syntax.source import Diagnostic, Span
from ..checker.codes import REFUTED_ERROR, REFUTED_WARNING
from .prove import Verdict, defaults_read

TIME_EFFICIENCY_ADVICE = ("the time-efficiency document: \"the continuous term is divided by the group's reward "
                          "spread and can explode\"; clip the continuous stage's output before the advantage stage")


def _num(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _yaml(v, exact: bool = False) -> str:
    """A param value as YAML: 6 significant digits to read, or every digit to replay (`exact`)."""
    if exact and isinstance(v, float):
        text = repr(v)
        mantissa, e, power = text.partition("e")
        return f"{mantissa}.0e{power}" if e and "." not in mantissa else text  # YAML reads 1e-05 as a string
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_num(float(x)) for x in v) + "]"
    return _num(v) if not isinstance(v, str) else v


def set_args(v: Verdict) -> list[str]:
    return [f"{k}={_yaml(p, exact=True)}" for k, p in v.found.case.params.items()]


def rows(v: Verdict) -> list[dict]:
    """The counterexample in the flat layout: group key, reward, inputs, metadata on the first row."""
    case, types = v.found.case, dict(v.shaper.inputs)
    out = []
    for i, r in enumerate(case.rewards):
        row = {"prompt_id": "counterexample", "reward": r}
        for name, values in case.inputs.items():
            row[name] = bool(values[i]) if types[name] == "bool" else values[i]
        if i == 0:
            row.update({k: m for k, m in case.metas.items() if m is not None})
        out.append(row)
    return out


def write_counterexample(v: Verdict, folder: Path) -> Path:
    """`SHAPER.PROPERTY.jsonl` in folder (`SHAPER.PROPERTY.defaults.jsonl` for W705), written to a
    temporary name and renamed on success."""
    folder.mkdir(parents=True, exist_ok=True)
    tag = ".defaults" if v.goal.at_defaults else ""
    dest = folder / f"{v.pipeline + '.' if v.pipeline else ''}{v.shaper.name}.{v.goal.prop}{tag}.jsonl"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        for row in rows(v):
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, dest)
    return dest


def replay_command(v: Verdict, spec: str, path: Path) -> str:
    """A line to paste into a shell: every word quoted, whatever the file or param is called."""
    words = ["shapec", "explain", spec, "--shaper", v.shaper.name, "--data", str(path)]
    for s in set_args(v):
        words += ["--set", s]
    return shlex.join(words)


def describe(v: Verdict) -> str:
    """One line: the group, the params, and the shaped rewards it produces."""
    case = v.found.case
    def seq(xs) -> str:
        return "[" + ", ".join(_num(float(x)) for x in xs) + "]"

    parts = [f"reward {seq(case.rewards)}"]
    if case.env_rewards is not None:
        parts.append(f"env_reward {seq(case.env_rewards)}")
    parts += [f"{k} {seq(vals)}" for k, vals in case.inputs.items()]
    parts += [f"{k} {json.dumps(m)}" for k, m in case.metas.items() if m is not None]
    params = ", ".join(f"{k}={_yaml(p)}" for k, p in case.params.items()) or "defaults"
    shaped = seq(v.found.shaped)
    who = " and ".join(f"rollout {i}" for i in v.found.rollouts)
    return f"group of {case.size}: {'; '.join(parts)}; params {params} -> shaped {shaped} ({who})"


def breaks_text(v: Verdict) -> str:
    out = []
    for name, (bad, good) in v.breaks.items():
        nums = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in bad + good)
        if not good:
            tried = ", ".join(_yaml(x) for x in bad) if len(bad) <= 4 else f"{len(bad)} values"
            out.append(f"breaks for every {name} tried ({tried})")
        elif nums and good and bad and max(good) < min(bad):
            out.append(f"holds for {name} <= {_num(max(good))} in the search")
        elif nums and good and bad and min(good) > max(bad):
            out.append(f"holds for {name} >= {_num(min(good))} in the search")
        else:
            out.append(f"holds for {name} = {', '.join(_yaml(x) for x in good)}; "
                       f"breaks for {', '.join(_yaml(x) for x in bad)}")
    return "with the other params as in the counterexample: " + "; ".join(out)


def _span_of(v: Verdict) -> Span:
    if v.at is not None:  # a stage: where the user's pipeline calls it, not the stage's own file
        return v.at
    if v.goal.declared:
        return v.goal.ensure.span
    if v.goal.at_defaults is not None:
        return v.goal.at_defaults.span
    st = v.blame
    if st == "result" and v.shaper.result is not None:
        return v.shaper.result.span
    if st is not None and st != "result" and st.expr is not None:
        return st.expr.span
    return v.shaper.result.span if v.shaper.result is not None else Span.none()


def _replay(v: Verdict, spec: str, folder: Path | None) -> str:
    """`; replay: shapec explain ...` for a counterexample written to `folder` (none without a folder,
    or for one with its own env_reward, which a file's rows cannot carry: their env_reward is their reward)."""
    if folder is None or v.found.case.env_rewards is not None:
        return ""
    path = write_counterexample(v, folder)
    return f"; replay: {replay_command(v, v.shaper.filename if v.pipeline else spec, path)}"


def diagnostics(verdicts: list[Verdict], spec: str, folder: Path | None) -> list[Diagnostic]:
    out = []
    for v in verdicts:
        if v.status == "refuted" and (v.goal.declared or v.goal.prop in REFUTED_WARNING and not v.goal.outside):
            where = _replay(v, spec, folder)
            code = REFUTED_ERROR[v.goal.prop] if v.goal.declared else REFUTED_WARNING[v.goal.prop]
            severity = "error" if v.goal.declared else "warning"
            out.append(Diagnostic(code, f"{v.who}: {v.goal.title()} refuted: {describe(v)}{where}",
                                  _span_of(v), severity))
            st = v.blame
            if v.goal.declared and st is not None and v.at is None:
                span = v.shaper.result.span if st == "result" else st.expr.span
                what = "the result" if st == "result" else f"{st.kind.value} {st.name}"
                out.append(Diagnostic(code, f"{what} breaks it: without it the counterexample keeps the property",
                                      span, "note"))
        elif v.status == "refuted" and v.goal.at_defaults is not None:
            where = _replay(v, spec, folder)
            read = ", ".join(f"{k} = {_yaml(p)}" for k, p in defaults_read(v.shaper, v.goal.at_defaults.when).items())
            out.append(Diagnostic("W705", f"{v.who}: {v.goal.title()} is declared under a `when` the defaults do "
                                  f"not meet ({read}), and at the defaults it is refuted: {describe(v)}{where}",
                                  _span_of(v), "warning"))
        elif v.status == "unknown" and v.goal.declared:
            s = v.stats
            out.append(Diagnostic("W704", f"{v.who}: {v.goal.title()} undecided: {v.how} "
                                  f"({s.trials} groups of {s.sizes[0]}-{s.sizes[1]} rollouts)", _span_of(v),
                                  "warning"))
    return out


def text(verdicts: list[Verdict]) -> str:
    lines = []
    for v in verdicts:
        kind = ("declared" if v.goal.declared else "at the defaults, which its `when` excludes"
                if v.goal.at_defaults is not None else "without its `when`" if v.goal.outside else "not declared")
        cond = " (under its `when` condition)" if v.goal.ensure.when is not None and v.goal.at_defaults is None else ""
        if v.arguments:
            called = ", ".join(f"{k}={_yaml(a)}" for k, a in v.arguments.items())
            cond = f" (under its `when`, called with {called})" if cond else f" (called with {called})"
        status = "undecided" if v.status == "unknown" else v.status
        head = f"{v.who}: {v.goal.title()} [{kind}{cond}]: {status}"
        if v.status == "proved":
            every = (" for every param value in range" if v.shaper.params and v.goal.ensure.when is None
                     and not v.arguments else "")
            lines.append(f"{head}{every} ({v.how})")
        elif v.status == "refuted":
            lines.append(f"{head}: {describe(v)}")
            if v.breaks:
                lines.append(f"    {breaks_text(v)}")
        else:
            s = v.stats
            lines.append(f"{head}: {v.how}; searched {s.trials} groups of {s.sizes[0]}-{s.sizes[1]} rollouts")
    return "\n".join(lines)


def summary(files: int, verdicts: list[Verdict]) -> str:
    """The last line: how many files, and how each property came out."""
    counts = {status: sum(v.status == status for v in verdicts) for status in ("proved", "refuted", "unknown")}
    told = ", ".join(f"{n} {'undecided' if status == 'unknown' else status}" for status, n in counts.items() if n)
    return f"{files} file{'s' if files != 1 else ''}: " + (f"{len(verdicts)} properties: {told}" if verdicts
                                                          else "no shaper or pipeline stage to prove")


def to_json(v: Verdict) -> dict:
    d = {"shaper": v.shaper.name, "pipeline": v.pipeline, "property": v.goal.title(), "declared": v.goal.declared,
         "status": v.status, "how": v.how}
    if v.found is not None:
        d["counterexample"] = {"rows": rows(v), "set": set_args(v), "shaped": v.found.shaped,
                               "rollouts": list(v.found.rollouts)}
        d["holds_for"] = breaks_text(v)
    if v.stats is not None:
        d["search"] = {"trials": v.stats.trials, "group_sizes": list(v.stats.sizes)}
    return d


# ------------------------------------------------------------------------- pipelines as a whole
def _std_normalised(ir: ShaperIR) -> bool:
    def walk(n) -> bool:
        if n.op is Op.BIN and n.attr == "/" and _reads_std(n.args[1]):
            return True
        return any(walk(a) for a in n.args)

    defs = {st.name: st.expr for st in ir.steps if st.kind is StepKind.LET}

    def _reads_std(n) -> bool:
        if n.op is Op.REDUCE and n.attr[0] == "std":
            return True
        if n.op is Op.REF and n.attr[0] == "var" and n.attr[1] in defs:
            return _reads_std(defs[n.attr[1]])
        return any(_reads_std(a) for a in n.args)

    return ir.produces == "advantage" and ir.result is not None and walk(ir.result)


def _clipped(ir: ShaperIR) -> bool:
    return ir.result is not None and ir.result.op is Op.CALL and ir.result.attr == "clip"


def pipeline_warnings(ir: PipelineIR) -> list[Diagnostic]:
    out = []
    stages = [s for s, _ in ir.stages]
    spans = ir.spans or tuple(s.result.span if s.result is not None else Span.none() for s in stages)
    for prev, stage, span in zip(stages, stages[1:], spans[1:]):
        if prev.produces not in ("binary", "advantage") and not _clipped(prev) and _std_normalised(stage):
            out.append(Diagnostic("W703", f"pipeline {ir.name!r}: {prev.name!r} produces continuous ({prev.produces}) "
                                  f"rewards and {stage.name!r} divides by their std without a clip; "
                                  + TIME_EFFICIENCY_ADVICE, span, "warning"))
    return out
