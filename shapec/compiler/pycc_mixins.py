"""numba.pycc's C support code, compiled once per cache folder and linked into every extension.

pycc compiles six C files into each extension it builds (its module mixin, which includes
numba's helper library, the typed dict, list and set objects and the NRT): 2.4 s of gcc per
build, a third of a new spec's first compile, for objects that are the same every time but for
one name. The mixin's init function is called `pycc_init_<module>`, and the generated object
calls it by that name: `share_mixins` names it `pycc_init_shapec_mixin` for every extension,
so one set of objects serves them all. The linker keeps only `PyInit_<module>` exported, so the
shared name is never seen outside an extension.

A missing set is compiled while numba compiles the extension's exports (`share_mixins`).
The objects live in the cache folder, keyed by everything they are compiled from (the sources,
macros and flags, the compiler, Python's headers, numba and this CPU). Each is written under a
temporary name and renamed, their SHA-256 digests last; a set whose digests do not all match is
compiled again, so a torn or corrupt object is never linked.
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path

from . import cache

MIXIN_NAME = "shapec_mixin"


def share_mixins(cc, folder: Path) -> None:
    """Make this CC link the shared objects kept in `folder` instead of compiling its own. Missing
    ones start compiling now, on threads (a gcc each, on every core but one), while numba compiles
    the exports on this one: on two cores gcc ends before numba does, off the critical path."""
    cc._init_function = "pycc_init_" + MIXIN_NAME
    pending = _start(cc, folder)
    cc._compile_mixins = lambda build_dir: pending.result()


def _start(cc, folder: Path) -> Future:
    """A future of the objects' paths: done already when an intact set is in `folder`."""
    sources = cc._get_mixin_sources()
    macros = [(name, MIXIN_NAME if name == "PYCC_MODULE_NAME" else value) for name, value in cc._get_mixin_defines()]
    include_dirs = cc._toolchain.get_python_include_dirs()
    flags = list(cc._get_extra_cflags())
    if getattr(cc._toolchain._compiler, "compiler_type", "") == "unix":
        flags.append("-g0")  # after Python's own -g: debug info is a fifth of gcc's time, and nobody reads it
    key = _key(sources, macros, include_dirs, flags)
    targets = [folder / f"shapec_mixin_{key}_{i}.o" for i in range(len(sources))]
    manifest = folder / f"shapec_mixin_{key}.sha256"
    if _intact(targets, manifest):
        done: Future = Future()
        done.set_result([str(t) for t in targets])
        return done
    compile_one = partial(_compile_one, type(cc._toolchain), include_dirs, macros, flags)
    return _POOL.submit(_compile_all, compile_one, folder, sources, targets, manifest)


def _compile_all(compile_one, folder: Path, sources: list[str], targets: list[Path], manifest: Path) -> list[str]:
    # one core stays numba's: its compile is the build's critical path, and six gcc beside it on
    # two cores slowed it by half (the first, longest file starts first)
    workers = max(1, min(len(sources), _cores() - 1))
    with cache.build_folder(folder) as build_dir, ThreadPoolExecutor(workers) as pool:
        objects = list(pool.map(compile_one, sources, [build_dir / str(i) for i in range(len(sources))]))
        digests = []
        for built, target in zip(objects, targets):
            data = Path(built).read_bytes()
            cache.write_atomic(target, data)
            digests.append(hashlib.sha256(data).hexdigest())
    cache.write_atomic(manifest, "\n".join(digests).encode())
    return [str(t) for t in targets]


def _compile_one(toolchain, include_dirs: list, macros: list, flags: list, source: str, out: Path) -> str:
    """One C file into `out` with a toolchain of its own (distutils' compiler objects keep state)."""
    (obj,) = toolchain().compile_objects([source], str(out), include_dirs=include_dirs, macros=macros,
                                         extra_cflags=flags)
    return obj


_POOL = ThreadPoolExecutor(1, thread_name_prefix="shapec-pycc-mixins")  # one set at a time


def _cores() -> int:
    """The processors this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _intact(targets: list[Path], manifest: Path) -> bool:
    try:
        digests = manifest.read_text(encoding="ascii").split()
        return len(digests) == len(targets) and all(
            hashlib.sha256(t.read_bytes()).hexdigest() == d for t, d in zip(targets, digests))
    except (OSError, UnicodeDecodeError):
        return False


def _key(sources: list[str], macros: list, include_dirs: list, flags: list) -> str:
    """What the objects are compiled from; any change compiles them again."""
    from .build import host_fingerprint, numba_version

    parts = [numba_version(), sys.version, repr(macros), repr(include_dirs), repr(flags), host_fingerprint(),
             *(repr(sysconfig.get_config_var(v)) for v in ("CC", "CFLAGS", "CCSHARED", "CPPFLAGS")),
             *(os.environ.get(v, "") for v in ("CC", "CFLAGS", "CPPFLAGS"))]
    parts += [hashlib.sha256(Path(s).read_bytes()).hexdigest() for s in sources]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]
