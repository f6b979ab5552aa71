"""Python written at run time as `ast` nodes: the per-shaper binder and each kernel's argument list.

Generated code is made only of the names its generator chooses and of constants (`ast.Constant`
holds a shaper's names and labels as values), so no spec text ever becomes code. `function` compiles
one `def` against a namespace of the helpers it may call.
"""

from __future__ import annotations

import ast
from typing import Any


def name(id_: str, store: bool = False) -> ast.Name:
    return ast.Name(id_, ast.Store() if store else ast.Load())


def const(value: Any) -> ast.Constant:
    assert value is None or isinstance(value, (str, int, float, bool, tuple)), value
    return ast.Constant(value)


def call(fn: str, *args: ast.expr) -> ast.Call:
    return ast.Call(name(fn), list(args), [])


def method(obj: str, fn: str, *args: ast.expr) -> ast.Call:
    return ast.Call(attr(obj, fn), list(args), [])


def attr(obj: str, field: str) -> ast.Attribute:
    return ast.Attribute(name(obj), field, ast.Load())


def item(obj: ast.expr, key: Any) -> ast.Subscript:
    return ast.Subscript(obj, const(key), ast.Load())


def is_not_none(value: ast.expr) -> ast.Compare:
    return ast.Compare(value, [ast.IsNot()], [const(None)])


def target(to: str | list) -> ast.expr:
    """A name, or a (nested) tuple of names to unpack into."""
    if isinstance(to, str):
        return name(to, True)
    return ast.Tuple([target(t) for t in to], ast.Store())


def assign(to: str | list, value: ast.expr) -> ast.Assign:
    return ast.Assign([target(to)], value)


def dict_of(items: list[tuple[str, ast.expr]]) -> ast.Dict:
    return ast.Dict([const(k) for k, _ in items], [v for _, v in items])


def function(fn_name: str, args: tuple[str, ...], body: list[ast.stmt], namespace: dict[str, Any]):
    """`def fn_name(*args): body`, compiled and defined in a copy of `namespace`."""
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(a) for a in args], kwonlyargs=[], kw_defaults=[],
                              defaults=[])
    module = ast.fix_missing_locations(ast.Module([ast.FunctionDef(fn_name, arguments, body, [])], []))
    scope = dict(namespace)
    exec(compile(module, f"<shapec {fn_name}>", "exec"), scope)
    return scope[fn_name]
