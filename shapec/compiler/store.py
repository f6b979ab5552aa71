"""The kernel store: a shaper's IR (and the facts its params settle) -> a compiled numba kernel.

Kernels are `@njit(cache=True)` functions in generated modules kept in the private cache folder
(files.py), so numba's own on-disk cache holds the machine code beside them. A module is named by
its *key*, a digest of everything that decides the code in it:

- the checked IR of the shaper, as text (what the spec and every module it imports say, without
  positions, comments or the file's name: the same spec loaded by another path shares its entry);
- what shapec is: its version and a digest of its own sources (an edited lowering is a new key);
- numba's version, Python's, and this machine's CPU (a shared home folder never hands one CPU's
  machine code to another), both from identity.py;
- whether the kernel is parallel, and the facts its params settle (compiler/specialize.py).

So a warm process works out the key, finds the module and imports it; numba then loads the machine
code from its index. Nothing is lowered or compiled again, and the spec itself is not parsed or
checked again either (spec_store.py keeps checked specs the same way). A compile that failed (a numba
error: a shapec bug) is remembered in a `.failed` entry beside the module's name, and a later
process with the same key raises at once with the remembered cause instead of trying again.

A module that does not load (edited, damaged, or numba's index beside it unreadable) is purged
and built again once in the same call; only a failure after that is a shapec bug.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import importlib.util
import os
import re
import stat
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path

from .. import files
from ..ir.nodes import Node, ShaperIR, post_order
from . import value_checks as value_checks_source
from .identity import host_identity, shapec_identity
from .lowering.names import ShapecInternalError, kernel_names

FORMAT = 1  # of the key and the entries; a change makes every old entry unreachable
_NAME_CHARS = 32  # of the shaper's name in a file name: enough to recognise it
STATS = {"lowered": 0, "imported": 0}  # modules this process generated and imported (tests read it)


def ir_text(ir: ShaperIR) -> str:
    """The checked IR as text: every field that decides the generated code, and nothing of where
    the spec was read from (its text, its file name, the positions of nodes). Expressions are
    written one node a line, children first, without recursion (a chain may be thousands deep)."""
    numbers: dict[int, int] = {}
    nodes: list[str] = []

    def plain(value) -> str:
        if isinstance(value, Node):
            for n in post_order(value, lambda x: x.args, numbers):
                numbers[id(n)] = len(nodes)
                nodes.append(f"{n.op} {n.attr!r} {n.ty!r} {[numbers[id(a)] for a in n.args]}")
            return f"#{numbers[id(value)]}"
        if dataclasses.is_dataclass(value):
            shown = (f for f in dataclasses.fields(value) if f.repr and f.name not in ("source", "filename"))
            return f"{type(value).__name__}({', '.join(f'{f.name}={plain(getattr(value, f.name))}' for f in shown)})"
        if isinstance(value, (tuple, list)):
            return f"({', '.join(map(plain, value))})"
        if isinstance(value, dict):
            return f"{{{', '.join(f'{k!r}: {plain(v)}' for k, v in value.items())}}}"
        return repr(value)

    head = plain(ir)
    return head + "\n" + "\n".join(nodes)


def kernel_key(ir: ShaperIR, parallel: bool, facts: tuple) -> str:
    parts = (str(FORMAT), shapec_identity(), host_identity(), ir_text(ir), repr(bool(parallel)), repr(facts))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def module_path(folder: Path, ir: ShaperIR, key: str) -> Path:
    return folder / f"{re.sub(r'[^A-Za-z0-9_]', '_', ir.name[:_NAME_CHARS])}_{key[:32]}.py"


def failed_path(module: Path) -> Path:
    return module.with_suffix(".failed")


_LOCK = threading.RLock()
_LOADED: dict[str, object] = {}  # key -> the compiled kernel, for every shaper of this process


@dataclasses.dataclass(frozen=True)
class Entry:
    """One generated module of the store: where it lives, what it is (for messages), how its
    source is made on a miss and what is compiled from it once it is imported."""
    folder: str  # under the cache root
    file: str
    what: str  # "shaper 'x' from f.shape", "the value checks"
    advice: str  # what a user does meanwhile when numba cannot compile it
    source: Callable[[], str]
    compile: Callable[[types.ModuleType], object]


def kernel(ir: ShaperIR, parallel: bool, facts: tuple, specialized: ShaperIR | None) -> object:
    """The compiled kernel of `ir` for `facts` (lowered from `specialized`, its IR with the facts
    folded in; None for the general kernel)."""
    key = kernel_key(ir, parallel, facts)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = stored(Entry("kernels", module_path(Path(), ir, key).name,
                                        f"shaper {ir.name!r} from {ir.filename or '<string>'}",
                                        "Use backend='interpreter' meanwhile. ",
                                        lambda: _lowered(ir, parallel, specialized), _compiler(ir)))
        return _LOADED[key]


def value_checks() -> types.SimpleNamespace:
    """The batch layer's value checks (value_checks.py) as machine code: one module for this shapec
    and this machine, made once, like a kernel."""
    key = _checks_key()

    def compile_all(module: types.ModuleType) -> types.SimpleNamespace:
        for name, signature in value_checks_source.SIGNATURES.items():
            _compile(getattr(module, name), signature)
        return types.SimpleNamespace(**{name: getattr(module, name) for name in value_checks_source.SIGNATURES})

    found = _LOADED.get(key)  # every call asks: a loaded module is returned without the lock
    if found is not None:
        return found
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = stored(Entry("checks", f"value_checks_{key[:32]}.py", "the value checks",
                                        "", _checks_source, compile_all))
        return _LOADED[key]


@functools.cache
def _checks_key() -> str:
    return hashlib.sha256(f"{FORMAT}\0value checks\0{shapec_identity()}\0{host_identity()}".encode()).hexdigest()


def _lowered(ir: ShaperIR, parallel: bool, specialized: ShaperIR | None) -> str:
    from .lowering.module import emit_python  # only on a miss: a warm process never imports the lowering

    STATS["lowered"] += 1
    return emit_python(ir, parallel, specialized)


def _compiler(ir: ShaperIR) -> Callable[[types.ModuleType], object]:
    def compile_kernel(module: types.ModuleType) -> object:
        STATS["imported"] += 1
        entry, signature = kernel_names(ir)
        fn = getattr(module, entry)
        _compile(fn, getattr(module, signature))
        return fn
    return compile_kernel


def _compile(fn, signature) -> None:
    """The function's machine code for `signature`, from numba's cache or compiled into it. Under
    NUMBA_DISABLE_JIT=1 `@njit` leaves plain Python functions, which run as they are (slowly, as the
    user asked): nothing to compile, and nothing to remember as failed."""
    if hasattr(fn, "compile"):
        fn.compile(signature)


def _checks_source() -> str:
    """value_checks.py's functions under `@njit`, with the imports they use."""
    parts = ["import math\n\nimport numpy as np\nfrom numba import njit\n"]
    for name in (*value_checks_source.SIGNATURES, *value_checks_source.HELPERS):
        parts.append("@njit(cache=True, nogil=True)\n" + inspect.getsource(getattr(value_checks_source, name)))
    return "\n\n".join(parts)


def stored(entry: Entry) -> object:
    """What `entry.compile` makes of the entry's module, from the cache or built into it. A cache
    folder that cannot be written moves the process to a private one (files.move_cache) and the
    module is built there."""
    while True:
        try:
            folder = files.private_folder(files.cache_root() / entry.folder)
            files.private_folder(folder / "__pycache__")  # numba's index and Python's bytecode
            return _load(folder / entry.file, entry)
        except files.CacheError:
            raise
        except OSError as err:
            files.move_cache(err)  # raises CacheError when already on the private folder


def _load(path: Path, entry: Entry):
    failed = files.read_private(failed_path(path))
    if failed is not None:
        raise ShapecInternalError(
            f"internal error: numba could not compile {entry.what} in an earlier run (remembered in "
            f"{failed_path(path)}; delete it to try again); this is a shapec bug, please report it. "
            f"{entry.advice}Cause: {failed.decode(errors='replace')}")
    try:
        return _import(path, entry)
    except ShapecInternalError:
        purge(path)  # damaged, edited, or numba's index unreadable: build it once more
    try:
        return _import(path, entry)
    except ShapecInternalError as err:
        cause = err.__cause__ or err
        files.write_atomic(failed_path(path), f"{type(cause).__name__}: {cause}".encode())
        raise


def _import(path: Path, entry: Entry):
    _drop_untrusted(path)
    body = files.read_private(path)
    if body is None or not intact(body):
        source = entry.source()
        # a new entry is linked into place, so a process that wrote the same module first keeps its
        # file (and numba's index of it, which records the file's time); a bad one is replaced
        files.write_atomic(path, (header(source) + source).encode(), replace=path.exists())
    name = f"shapec_{path.parent.name}_{path.stem}"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # numba's cache finds a function's module by name when it loads it
        spec.loader.exec_module(module)
        compiled = entry.compile(module)
    except BaseException as err:
        sys.modules.pop(name, None)
        if isinstance(err, OSError) or not isinstance(err, Exception):
            raise  # a disk error, or a signal or exit (Ctrl-C, `shapec run`'s SIGTERM): nothing to remember
        # numba typing or lowering, a damaged index: a shapec bug unless a rebuild mends it
        raise ShapecInternalError(
            f"internal error: numba could not compile {entry.what} (generated module {path}); this is a shapec "
            f"bug, please report it. {entry.advice}Cause: {type(err).__name__}: {err}") from err
    _make_private(path)
    return compiled


def header(body: str) -> str:
    return f"# shapec-sha256: {hashlib.sha256(body.encode()).hexdigest()}\n"


def intact(data: bytes) -> bool:
    """A module file whose first line is the digest of the rest (anything else is rebuilt)."""
    first, _, body = data.partition(b"\n")
    try:
        return first.decode("ascii") == header(body.decode("utf-8")).rstrip("\n")
    except UnicodeDecodeError:
        return False


def purge(path: Path) -> None:
    """Delete a module and what Python and numba cached beside it."""
    for victim in (path, *path.parent.glob(f"__pycache__/{path.stem}.*")):
        with contextlib.suppress(FileNotFoundError):
            victim.unlink()


def _drop_untrusted(path: Path) -> None:
    """Delete the module's numba index and machine code, or a module, that is not this user's
    alone (a link, another owner, writable by others): never read, numba builds them again."""
    for candidate in (path, *path.parent.glob(f"__pycache__/{path.stem}.*")):
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode) or files.why_not_private(st, "the file"):
            candidate.unlink()


def _make_private(path: Path) -> None:
    """numba writes its index and machine code under the umask; inside a 0700 folder no one else
    can reach them, and 0600 keeps them so if the folder is ever opened up."""
    for written in path.parent.glob(f"__pycache__/{path.stem}.*"):
        with contextlib.suppress(OSError):
            if written.stat().st_mode & 0o077:
                os.chmod(written, 0o600)
