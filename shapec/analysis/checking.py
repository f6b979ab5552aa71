"""`shapec check --prove`: every file checked, then every property of every shaper decided."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..syntax.source import ShapeError


def cmd_prove(files: list, args) -> int:
    try:
        import z3  # noqa: F401
    except ImportError:
        from .prove import MissingExtra

        print(f"shapec: error: {MissingExtra()}", file=sys.stderr)
        return 2
    from ..api import _Loader
    from .prove import analyse
    from .report import diagnostics, pipeline_warnings, text, to_json

    diags, verdicts = [], []
    folder = Path(args.counterexamples)
    for f in files:
        try:
            mod = _Loader().file(Path(f))
        except ShapeError as err:
            diags += err.diagnostics
            continue
        for ir in mod.shapers.values():
            found = analyse(ir, args.trials)
            verdicts += found
            diags += diagnostics(found, str(f), folder)
        for p in mod.pipelines.values():
            diags += pipeline_warnings(p)
    if args.format == "json":
        print(json.dumps({"diagnostics": [d.to_json() for d in diags],
                          "properties": [to_json(v) for v in verdicts]}, indent=2))
    else:
        for d in diags:
            print(d.render(), file=sys.stderr)
        if verdicts:
            print(text(verdicts))
    return 1 if any(d.severity == "error" for d in diags) else 0
