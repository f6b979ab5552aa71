"""`shapec check`: every file checked and the static pass run on every declared clause; with `--prove`,
every property of every shaper decided."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..syntax.source import Diagnostic, ShapeError


def _modules(files: list, diags: list[Diagnostic]):
    """Each file's loaded module; a file that does not load adds its diagnostics instead."""
    from ..checker.loader import Loader

    for f in files:
        try:
            yield f, Loader().file(Path(f))
        except ShapeError as err:
            diags += err.diagnostics


def check_files(files: list) -> list[Diagnostic]:
    """Plain `shapec check`: each file's diagnostics, plus an E7xx for a declared clause the static pass
    refutes. What it proves is not reported (--prove says how each clause is proved), and what it cannot
    decide is left to --prove, so valid files stay silent and nothing heavier than the checker loads."""
    from ..checker.ensure import title
    from ..checker.codes import REFUTED_ERROR
    from ..analysis.static import decide

    diags: list[Diagnostic] = []
    for _, mod in _modules(files, diags):
        for ir in mod.shapers.values():
            for e in ir.ensures:
                got = decide(ir, e)
                if got is not None and got[0] == "refuted":
                    diags.append(Diagnostic(REFUTED_ERROR[e.prop], f"{ir.name}: {title(e)} refuted: {got[1]}; "
                                            "`shapec check --prove` writes a counterexample group", e.span))
    return diags


def cmd_prove(files: list, args) -> int:
    try:
        import z3  # noqa: F401
    except ImportError:
        from ..analysis.prove import MissingExtra

        print(f"shapec: error: {MissingExtra()}", file=sys.stderr)
        return 2
    from ..analysis.prove import analyse, analyse_stages
    from ..analysis.report import diagnostics, pipeline_warnings, summary, text, to_json

    diags, verdicts = [], []
    folder = Path(args.counterexamples)
    for f, mod in _modules(files, diags):
        for ir in mod.shapers.values():
            found = analyse(ir, args.trials)
            verdicts += found
            diags += diagnostics(found, str(f), folder)
        for p in mod.pipelines.values():
            diags += pipeline_warnings(p)
            found = analyse_stages(p, args.trials, tuple(mod.shapers.values()))
            verdicts += found
            diags += diagnostics(found, str(f), folder)
    if args.format == "json":
        print(json.dumps({"diagnostics": [d.to_json() for d in diags],
                          "properties": [to_json(v) for v in verdicts]}, indent=2))
    else:
        for d in diags:
            print(d.render(), file=sys.stderr)
        if verdicts:
            print(text(verdicts))
        if not args.quiet:
            print(summary(len(files), verdicts))
    return 1 if any(d.severity == "error" for d in diags) else 0
