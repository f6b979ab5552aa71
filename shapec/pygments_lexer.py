"""Pygments lexer for .shape specs (entry point `pygments.lexers: shape`), used by the docs."""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups, words
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Text, Whitespace

_DECLARATIONS = ("shaper", "pipeline", "fn", "import", "as")
_STATEMENTS = ("input", "meta", "channel", "let", "gate", "skip", "term", "factor", "clamp", "state",
               "update", "metric", "result", "drop", "requires", "produces")
_CLAUSES = ("on", "when", "unless", "where", "open", "closed", "in", "and", "or", "not")
_TYPES = ("bool", "int", "float", "band", "enum", "list", "tokens", "chars", "seconds", "calls",
          "binary", "unit", "nonneg", "real", "advantage")
_BUILTINS = ("count", "any", "all", "sum", "mean", "median", "std", "mad", "min", "max", "argmin", "argmax",
             "quantile", "nth_largest", "minmax", "centered", "rank", "abs", "exp", "log", "sqrt", "sigmoid", "cos",
             "clip", "missing", "present", "skipped", "group_size", "position", "reward", "shaped", "env_reward", "batch",
             "prompt", "param")


class ShapeLexer(RegexLexer):
    name = "Shape"
    aliases = ["shape", "shapec"]
    filenames = ["*.shape"]
    mimetypes = ["text/x-shape"]

    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"#.*?$", Comment.Single),
            (r'"""(.|\n)*?"""', String.Doc),
            (r'"([^"\\\n]|\\.)*"', String),
            (r"(shaper|pipeline|fn)(\s+)([A-Za-z_]\w*)", bygroups(Keyword.Declaration, Whitespace, Name.Function)),
            (words(_DECLARATIONS, suffix=r"\b"), Keyword.Declaration),
            (words(_STATEMENTS, suffix=r"\b"), Keyword),
            (words(_CLAUSES, suffix=r"\b"), Operator.Word),
            (words(("true", "false"), suffix=r"\b"), Keyword.Constant),
            (words(_TYPES, suffix=r"\b"), Keyword.Type),
            (words(_BUILTINS, suffix=r"\b"), Name.Builtin),
            (r"(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", Number),
            (r"\?\?|>>|\*\*|==|!=|<=|>=|[-+*/<>=?]", Operator),
            (r"[(){}\[\],.:]", Punctuation),
            (r"[A-Za-z_]\w*", Name),
            (r".", Text),
        ],
    }
