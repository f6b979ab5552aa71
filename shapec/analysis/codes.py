"""Stable codes of the property analysis (E7xx errors, W7xx warnings). Never renumber, only add."""

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
}
REFUTED_ERROR = {"order_kept": "E703", "all_wrong_unchanged": "E704", "within": "E705",
                 "shorter_not_worse": "E706"}
REFUTED_WARNING = {"order_kept": "W701", "all_wrong_unchanged": "W702"}


def errors_md_section() -> str:
    """The docs/errors.md section for these codes (appended by tools/docgen.py)."""
    lines = ["\n## E7xx and W7xx: Properties (`ensure`, `shapec check --prove`)\n",
             "Errors fail `shapec check`; warnings (`warning[W7xx]`, `\"severity\": \"warning\"` in JSON) are "
             "printed and leave the exit status 0. `E701` and `E702` come from every check; `E703`-`E705` from "
             "plain `shapec check` too when its static pass finds that no shaped reward can keep the clause, and "
             "otherwise, like `E706` and the warnings, from `shapec check --prove` with a counterexample group. "
             "See [What shapec proves about your shaper](proofs.md).\n",
             "| code | meaning |\n|---|---|"]
    lines += [f"| `{code}` | {text} |" for code, text in PROPERTY_CODES.items()]
    return "\n".join(lines) + "\n"
