"""Stable diagnostic codes. Tests assert these; never renumber, only add."""

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
