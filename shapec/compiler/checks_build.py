"""The batch checks of runtime/fastcheck.py, loaded the way the kernels are: compiled ahead of time
(numba.pycc), so a warm process checks its batches in one pass each without importing numba;
numba's JIT versions where kernels are JIT (parallel, SHAPEC_AOT=0, no C compiler). Any failure
leaves the numpy validators alone in charge, which are the definition anyway: the fast checks
only say "clean" sooner.

A cache folder's first kernel extension carries the checks among its exports (`carry`), and a
note names it (`shapec_checks_<digest>_<cpu>.carrier`): a separate extension built first would
cost that first compile its own numba session and a link, over half its time. Only a process
that finds no checks and builds no kernel builds the standalone extension (`build_checks`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import logging
import re
import sys
import warnings
from pathlib import Path

from . import build, cache
from .cache import cache_dir

log = logging.getLogger("shapec")
EXPORTS = {  # name -> pycc signature; validate.py passes exactly these layouts
    "clean_values": "b1(f8[::1], b1, b1, b1)",
    "clean_flags": "b1(f8[::1], b1, f8[::1])",
    "clean_offsets": "b1(i8[::1], i8)",
    "band_rows": "b1(f8[:, ::1], f8[:, ::1])",
}


FASTCHECK = Path(__file__).resolve().parents[1] / "runtime" / "fastcheck.py"  # read, not imported: it imports numba


@functools.lru_cache(maxsize=None)
def _stem() -> str:
    """The checks' name, from what they are compiled from: a process asks up to three times per load."""
    parts = (FASTCHECK.read_text(encoding="utf-8"), repr(sorted(EXPORTS.items())), build.numba_version(), sys.version)
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return f"shapec_checks_{digest}_{build.host_fingerprint()}"


def checks_path() -> Path:
    """The standalone extension."""
    return cache_dir() / f"{_stem()}{importlib.machinery.EXTENSION_SUFFIXES[0]}"


def carrier_note() -> Path:
    """The file naming the kernel extension that carries these checks."""
    return cache_dir() / f"{_stem()}.carrier"


def load_checks(jit: bool):
    """The module whose functions validate.py calls, or None when this folder has none yet (none is
    built here: the next kernel extension built carries them)."""
    try:
        if jit:
            from ..runtime import fastcheck

            return fastcheck
        return build._load_extension(checks_path()) or _carrier()
    except Exception as err:  # never a reason to fail a call: the numpy validators decide alone
        log.debug("shapec: fast batch checks unavailable (%s: %s)", type(err).__name__, err)
        return None


def _carrier():
    """The noted kernel extension, if it is one of this CPU's, intact, and carries every check."""
    try:
        name = carrier_note().read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    # a bare file name of a kernel extension, never a path: the note only points inside this folder
    own = re.escape(f"_{build.host_fingerprint()}{importlib.machinery.EXTENSION_SUFFIXES[0]}")
    if not re.fullmatch(rf"shapec_aot_\w+{own}", name):
        return None
    module = build._load_extension(carrier_note().with_name(name))
    return module if carries(module) else None


def carries(module) -> bool:
    return module is not None and all(callable(getattr(module, name, None)) for name in EXPORTS)


def carry(cc) -> None:
    """Export the checks from this extension too."""
    from ..runtime import fastcheck

    for name, signature in EXPORTS.items():
        cc.export(name, signature)(getattr(fastcheck, name).py_func)


def note_carrier(so: Path) -> None:
    """Record that the extension `so` carries the checks, for the processes that load no kernel of its."""
    try:
        cache.write_atomic(carrier_note(), so.name.encode("ascii"))
    except OSError as err:  # a later process builds the standalone extension instead
        log.debug("shapec: could not note the batch checks' extension (%s)", err)


def build_checks():
    """The standalone extension, built if need be; None when it cannot be (the numpy validators decide)."""
    try:
        so = checks_path()
        module = build._load_extension(so)
        if module is None:
            _build(so)
            module = build._load_extension(so)
        return module
    except Exception as err:
        log.debug("shapec: fast batch checks unavailable (%s: %s)", type(err).__name__, err)
        return None


def _build(so: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc is "pending deprecation" in numba; see docs/lowering.md
        from numba.pycc import CC
    cc = CC(build._extension_name(so))
    cc.target_cpu = "host"
    build.share_mixins(cc, so.parent)  # gcc compiles them, if they are missing, while numba compiles the checks
    carry(cc)
    build._compile_into(cc, so)
