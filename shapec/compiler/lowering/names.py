"""The one source of identifiers, strings and comments in generated code.

Generated modules are built only from names this module mangles, literals it writes with
repr(), and text of the generator's own. Spec text (names, strings, file names) never reaches
the output: a spec name contributes at most a sanitised suffix after a unique index, so two
names can never collide and no character outside [A-Za-z0-9_] gets through. verify.py checks
the finished module against what was registered here.
"""

from __future__ import annotations

import re

from ...ir.nodes import ShaperIR

# kind -> what it names; a mangled name is the kind, its index in the module, then `_<suffix>`
KINDS = {
    "in": "a rollout input", "v": "a let, gate or channel", "st": "a state",
    "m": "a scalar metadata field", "bd": "a metadata band", "lo": "a metadata list's offsets",
    "ni": "a metadata list's item count", "lf": "a metadata list's field", "s": "a shaper (stage)",
    "r": "a reduction", "b": "a batch reduction", "band": "a band's parts", "guard": "a statement's guard",
    "tv": "a term's values in its group", "at": "the one rollout a term's index names",
    "fv": "a factor's values in its group",
    "low": "the least of a minmax's selection", "high": "the greatest of it",
    "centre": "the mean a centered value subtracts",
    "sel": "a selection's values", "isel": "a selection's indices", "ksel": "a selection's size",
    "t": "a temporary that keeps an expression's nesting within Python's parser limit",
    "ps": "a per-prompt state's update in its group",
    "p": "a param's value in its group",
}
DERIVED = ("SIG_", "SIG_groups_", "kernel_", "groups_")  # module-level names built from a stage's name
MANGLED = re.compile(r"(?P<kind>[a-z]+)(?P<index>[0-9]+)(_[A-Za-z0-9_]*)?")
TEMP = re.compile(r"\bt[0-9]+\b")  # the temporaries; nothing else can match (mangled kinds are letter runs)
SUFFIX_LENGTH = 24
COMMENT_TEXT = re.compile(r"[A-Za-z0-9 _.,:;()/+*=<>'-]*")  # printable ASCII: nothing ends a comment early


class ShapecInternalError(RuntimeError):
    """A kernel the checker accepted could not be generated or compiled: a shapec bug, never the user's."""


class Namer:
    """Mangles names and records every identifier, string and comment one module may contain."""

    def __init__(self):
        self.names: set[str] = set()
        self.strings: set[str] = set()
        self.comments: set[str] = set()
        self.counts: dict[str, int] = {}

    def new(self, kind: str, hint: str = "") -> str:
        """A fresh name of a kind: unique by its index; the hint only makes it readable."""
        if kind not in KINDS:
            raise ShapecInternalError(f"lowering: unknown name kind {kind!r}")
        k = self.counts.get(kind, 0)
        self.counts[kind] = k + 1
        suffix = re.sub(r"[^A-Za-z0-9_]", "", hint)[:SUFFIX_LENGTH]
        name = f"{kind}{k}_{suffix}" if suffix else f"{kind}{k}"
        self.names.add(name)
        return name

    def derived(self, prefix: str, name: str) -> str:
        """A fixed prefix on a mangled name (kernel_s0_x): unique because the name is."""
        if prefix not in DERIVED or name not in self.names or not MANGLED.fullmatch(name):
            raise ShapecInternalError(f"lowering: {prefix!r} + {name!r} is not a mangled name")
        out = prefix + name
        self.names.add(out)
        return out

    def string(self, text: str) -> str:
        """A string constant, written with repr()."""
        self.strings.add(text)
        return repr(text)

    def comment(self, text: str) -> str:
        """A comment of the generator's own (kinds, counts, mangled names), checked to be one line."""
        if not COMMENT_TEXT.fullmatch(text):
            raise ShapecInternalError(f"lowering: comment {text!r} has characters a comment may not carry")
        out = f"# {text}"
        self.comments.add(out)
        return out


def kernel_names(ir: ShaperIR) -> tuple[str, str]:
    """The names of a one-shaper module's kernel function and of its numba signature."""
    namer = Namer()
    stage = namer.new("s", ir.name)  # as lower_module (module.py) names its first stage
    return namer.derived("kernel_", stage), namer.derived("SIG_", stage)
