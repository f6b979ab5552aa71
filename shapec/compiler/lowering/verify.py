"""The last pass before a generated module is returned, written or imported: it fails closed.

Every identifier must be one the lowering mangled (names.Namer) or one of the fixed vocabulary
below; every string constant and every comment must be one the lowering registered or one of
the helpers'; only the statement and expression forms the lowering writes may appear; and the
only imports are its own three. Anything else means spec text reached the code, and the module
is refused with ShapecInternalError before anyone can run it.
"""

from __future__ import annotations

import ast
import io
import tokenize

from .helper_source import HELPERS
from .names import Namer, ShapecInternalError

IMPORTS = {"numpy": "np"}  # import x as y
FROM_IMPORTS = {"math": {"inf", "isnan", "nan"}, "numba": {"njit", "prange", "types"}}
# names the lowering writes literally: kernel arguments, loop indices, scratch, locals, builtins
FIXED_NAMES = frozenset("""
    np nt njit prange inf isnan nan float int abs min max range
    rewards env_rewards offsets components use_components nthreads params param_bands state_in
    prompt_state_in prompt_state_out
    out terms factors keep kept skip gates metrics n G state_out bad_i bad_g width g g0 g1 i j s e
    ibuf tbuf bbuf rows kb run base code r x lo m applied decided gcode usable_ t_
    nchunks bad c bad_c
""".split())
FIXED_ATTRIBUTES = frozenset("""
    full empty zeros int64 uint64 float64 boolean exp cos trunc isfinite log sqrt floor shape copy
""".split())
FIXED_KEYWORDS = frozenset(("cache", "error_model", "parallel"))
FIXED_STRINGS = frozenset(("numpy", "prange", "comprehension", "reduction", "inplace_binop", "setitem",
                           "stencil", "fusion"))
STATEMENTS = (ast.Module, ast.FunctionDef, ast.Assign, ast.AugAssign, ast.For, ast.While, ast.If,
              ast.Return, ast.Break, ast.Pass, ast.Import, ast.ImportFrom, ast.Expr)
EXPRESSIONS = (ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple, ast.Dict, ast.Call, ast.BinOp,
               ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Constant, ast.keyword, ast.arg,
               ast.arguments, ast.alias, ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def _vocabulary(code: str) -> tuple[set[str], set[str], set[str]]:
    """(identifiers, strings, comments) of a fixed piece of generator text."""
    idents, strings = set(), set()
    for node in ast.walk(ast.parse(code)):
        idents.update(_identifiers(node))
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
    return idents, strings, set(_comments(code))


def _identifiers(node: ast.AST) -> list[str]:
    match node:
        case ast.Name(id=x) | ast.arg(arg=x) | ast.FunctionDef(name=x) | ast.Attribute(attr=x):
            return [x]
        case ast.keyword(arg=x) if x is not None:
            return [x]
        case ast.alias(name=x, asname=y):
            return [x] + ([y] if y else [])
    return []


def _comments(code: str) -> list[tuple[int, str]]:
    return [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(code).readline)
            if t.type == tokenize.COMMENT]


HELPER_NAMES, HELPER_STRINGS, HELPER_COMMENTS = _vocabulary("\n\n\n".join(HELPERS.values()))


def verify(source: str, namer: Namer) -> str:
    """source if it is made only of what the generator registered; else ShapecInternalError."""
    try:
        tree = ast.parse(source)
        comments = _comments(source)
    except (SyntaxError, tokenize.TokenError, ValueError) as err:
        raise _refuse(f"it does not parse ({type(err).__name__}: {err})") from None
    names = namer.names | FIXED_NAMES | HELPER_NAMES
    for node in ast.walk(tree):
        _check_node(node, names, namer)
    for line, text in comments:
        if text not in namer.comments and text not in HELPER_COMMENTS:
            raise _refuse(f"line {line} has a comment the generator did not write: {text[:60]!r}")
    return source


def _check_node(node: ast.AST, names: set[str], namer: Namer) -> None:
    line = getattr(node, "lineno", "?")
    if not isinstance(node, STATEMENTS + EXPRESSIONS):
        raise _refuse(f"line {line} has a {type(node).__name__}, which the generator never writes")
    if isinstance(node, ast.Import):
        if [(a.name, a.asname) for a in node.names] not in ([(k, v)] for k, v in IMPORTS.items()):
            raise _refuse(f"line {line} imports something other than {', '.join(IMPORTS)}")
    elif isinstance(node, ast.ImportFrom):
        allowed = FROM_IMPORTS.get(node.module or "")
        if node.level or allowed is None or any(a.name not in allowed for a in node.names):
            raise _refuse(f"line {line} imports from {node.module!r}, or names it does not hold")
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, str):
            if value not in namer.strings and value not in FIXED_STRINGS and value not in HELPER_STRINGS:
                raise _refuse(f"line {line} has a string the generator did not write: {value[:60]!r}")
        elif type(value) not in (int, float, bool):
            raise _refuse(f"line {line} has a constant of type {type(value).__name__}")
    allowed = names
    if isinstance(node, ast.Attribute):
        allowed = FIXED_ATTRIBUTES | HELPER_NAMES
    elif isinstance(node, ast.keyword):
        allowed = FIXED_KEYWORDS
    elif isinstance(node, ast.alias):
        allowed = {*IMPORTS, *IMPORTS.values(), *(n for v in FROM_IMPORTS.values() for n in v), "nt"}
    for ident in _identifiers(node):
        if ident not in allowed:
            raise _refuse(f"line {line} uses the identifier {ident[:60]!r}, which the generator did not make")


def _refuse(why: str) -> ShapecInternalError:
    return ShapecInternalError(f"internal error: a generated module was refused because {why}; "
                               "nothing was written or imported. This is a shapec bug, please report it.")
