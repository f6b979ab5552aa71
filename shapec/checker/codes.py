"""Every stable diagnostic code, the one table diagnostics take their codes from and docs/errors.md is
generated from (python -m shapec.docgen). Tests assert these; never renumber, only add."""

CODES = {
    # E1xx syntax
    "E101": "unexpected token",
    "E102": "unexpected character",
    "E103": "unexpected end of input",
    "E104": "expression nested too deeply (see MAX_EXPR_DEPTH in shapec/syntax/depth.py)",
    "E105": "invalid escape in a string",
    "E106": "control character inside a string (write it as an escape)",
    "E107": "number too large for a float64",
    # E2xx names
    "E201": "unknown name",
    "E202": "duplicate definition",
    "E203": "unknown function",
    "E204": "wrong number of arguments",
    "E205": "import not found",
    "E206": "unknown shaper in pipeline",
    "E207": "recursive helper function",
    "E208": "unknown field",
    "E209": "skip condition uses a computed value",
    "E210": "import leaves the spec's folder tree (absolute path, `..`, symlink, NUL, or a spec without a file)",
    "E211": "import target is not a readable .shape spec",
    "E212": "import cycle",
    "E213": "helper calls expand to too many copies once inlined",
    # E3xx types, units and levels
    "E301": "unit mismatch",
    "E302": "type mismatch",
    "E303": "level mismatch",
    "E304": "`where` mask must be a rollout-level boolean",
    "E305": "unknown type or unit",
    "E306": "rollout values mixed with metadata list items",
    "E307": "unknown enum member",
    "E308": "value must be a constant",
    # E4xx binary-reward contract
    "E401": "binary-reward shaper after one that makes rewards continuous",
    "E402": "declared output contract cannot be proven",
    "E403": "unknown reward contract",
    # E5xx ordering, sign and multipliers
    "E501": "additive terms on a non-negative reward without a clamp at 0",
    "E502": "factor scales a possibly negative reward",
    "E503": "factor not provably within [0, 1]",
    "E504": "statement out of order (terms, then clamp, then factors)",
    "E505": "advantage stage must be the last stage",
    "E506": "result combined with clamp or factors",
    # E6xx params
    "E601": "unknown param",
    "E602": "param default outside its range",
    "E603": "invalid band",
    "E604": "param default of the wrong type",
}


# the property analysis (`ensure`, `shapec check --prove`): E7xx errors and W7xx warnings
PROPERTY_CODES = {
    "E701": "unknown property in `ensure`",
    "E702": "malformed `ensure` clause",
    "E703": "`ensure order_kept` refuted: a higher input reward can end strictly lower",
    "E704": "`ensure all_wrong_unchanged` refuted: an all-zero group is changed",
    "E705": "`ensure within` refuted: a shaped reward leaves the range",
    "E706": "`ensure shorter_not_worse` refuted: a smaller value ends lower",
    "W701": "order_kept does not hold (not declared)",
    "W702": "all_wrong_unchanged does not hold (not declared)",
    "W703": "continuous rewards feed a std-normalised advantage stage without a clip",
    "W704": "declared property could not be decided",
    "W705": "declared property does not hold at the defaults, which its `when` excludes",
}
REFUTED_ERROR = {"order_kept": "E703", "all_wrong_unchanged": "E704", "within": "E705",
                 "shorter_not_worse": "E706"}
REFUTED_WARNING = {"order_kept": "W701", "all_wrong_unchanged": "W702"}


def errors_md_section() -> str:
    """The docs/errors.md section for these codes (appended by docgen.py)."""
    lines = ["\n## E7xx and W7xx: Properties (`ensure`, `shapec check --prove`)\n",
             "Errors fail `shapec check`; warnings (`warning[W7xx]`, `\"severity\": \"warning\"` in JSON) are "
             "printed and leave the exit status 0. `E701` and `E702` come from every check; `E703`-`E705` from "
             "plain `shapec check` too when its static pass finds that no shaped reward can keep the clause, and "
             "otherwise, like `E706` and the warnings, from `shapec check --prove` with a counterexample group. "
             "See [What shapec proves about your shaper](proofs.md).\n",
             "| code | meaning |\n|---|---|"]
    lines += [f"| `{code}` | {text} |" for code, text in PROPERTY_CODES.items()]
    return "\n".join(lines) + "\n"
