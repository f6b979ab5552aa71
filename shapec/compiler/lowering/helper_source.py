"""The helpers' source as generated modules carry it: each function of numba_helpers.py under
the one decorator they share, in the order they are defined, and only those a module calls."""

from __future__ import annotations

import inspect

from . import numba_helpers

DECORATOR = '@njit(error_model="numpy", cache=True)\n'
HELPERS: dict[str, str] = {
    fn.__name__: DECORATOR + inspect.getsource(fn).rstrip("\n")
    for fn in sorted((f for f in vars(numba_helpers).values()
                      if inspect.isfunction(f) and f.__module__ == numba_helpers.__name__),
                     key=lambda f: f.__code__.co_firstlineno)
}
HELPER_FUNCTIONS = tuple(HELPERS)


def used_helpers(code: str) -> str:
    """The helpers the kernels call, with the helpers those call (fewer dispatchers to load)."""
    wanted: set[str] = set()
    todo = [code]
    while todo:
        text = todo.pop()
        for name, source in HELPERS.items():
            if name not in wanted and f"{name}(" in text:
                wanted.add(name)
                todo.append(source.split("\n", 2)[2])  # the body: below the decorator and the def line
    text = "\n\n\n".join(source for name, source in HELPERS.items() if name in wanted)
    # one blank line before the first helper and after the last, where the helpers' old pasted
    # string had them: generated modules, and so every kernel cache key, stay as they were
    first, last = HELPER_FUNCTIONS[0] in wanted, HELPER_FUNCTIONS[-1] in wanted
    return ("\n" if first else "") + text + ("\n" if last else "") + "\n"
