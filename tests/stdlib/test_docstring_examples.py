"""Every `>>>` example in a stdlib shaper's docstring runs, on every available backend."""

from __future__ import annotations

import doctest
import functools
import importlib.util

import pytest

import shapec
from shapec.api import STDLIB

BACKENDS = ["interpreter"] + (["numba"] if importlib.util.find_spec("shapec.compiler.lowering") else [])


def _docstrings():
    """(id, docstring) for each stdlib module and shaper whose docstring holds an example."""
    out = []
    for path in sorted(STDLIB.glob("*.shape")):
        mod = shapec.load(path.stem, backend="interpreter")
        docs = [(path.stem, mod.doc)] + [(f"{path.stem}.{name}", mod.ir(name).doc) for name in mod.shapers]
        out += [(name, doc) for name, doc in docs if doc and ">>>" in doc]
    return out


DOCSTRINGS = _docstrings()


def test_nemo_rl_has_examples():
    assert "nemo_rl.length_penalty" in [name for name, _ in DOCSTRINGS]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, doc", DOCSTRINGS, ids=[name for name, _ in DOCSTRINGS])
def test_docstring_examples(name, doc, backend):
    globs = {"load": functools.partial(shapec.load, backend=backend)}
    test = doctest.DocTestParser().get_doctest(doc, globs, name, f"stdlib/{name.split('.')[0]}.shape", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries > 0
