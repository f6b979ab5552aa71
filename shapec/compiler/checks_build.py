"""The batch checks of runtime/fastcheck.py, loaded the way the kernels are: from an extension
module built once per machine (numba.pycc), so a warm process checks its batches in one pass
each without importing numba; numba's JIT versions where kernels are JIT (parallel, SHAPEC_AOT=0,
no C compiler). Any failure leaves the numpy validators alone in charge, which are the definition
anyway: the fast checks only say "clean" sooner.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import logging
import sys
import warnings
from pathlib import Path

from . import build
from .cache import cache_dir

log = logging.getLogger("shapec")
EXPORTS = {  # name -> pycc signature; validate.py passes exactly these layouts
    "clean_values": "b1(f8[::1], b1, b1, b1)",
    "clean_flags": "b1(f8[::1], b1, f8[::1])",
    "clean_offsets": "b1(i8[::1], i8)",
    "band_rows": "b1(f8[:, ::1], f8[:, ::1])",
}


FASTCHECK = Path(__file__).resolve().parents[1] / "runtime" / "fastcheck.py"  # read, not imported: it imports numba


def checks_path() -> Path:
    parts = (FASTCHECK.read_text(encoding="utf-8"), repr(sorted(EXPORTS.items())), build.numba_version(), sys.version)
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return cache_dir() / f"shapec_checks_{digest}_{build.host_fingerprint()}{suffix}"


def load_checks(jit: bool):
    """The module whose functions validate.py calls, or None (numpy validators only)."""
    try:
        if jit:
            from ..runtime import fastcheck

            return fastcheck
        so = checks_path()
        module = build._load_extension(so)
        if module is None and _build(so):
            module = build._load_extension(so)
        return module
    except Exception as err:  # never a reason to fail a call: the numpy validators decide alone
        log.debug("shapec: fast batch checks unavailable (%s: %s)", type(err).__name__, err)
        return None


def _build(so: Path) -> bool:
    from ..runtime import fastcheck

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc is "pending deprecation" in numba; see docs/lowering.md
        from numba.pycc import CC
    cc = CC(build._extension_name(so))
    cc.target_cpu = "host"
    build.share_mixins(cc, so.parent)  # gcc compiles them, if they are missing, while numba compiles the checks
    for name, signature in EXPORTS.items():
        cc.export(name, signature)(getattr(fastcheck, name).py_func)
    build._compile_into(cc, so)
    return True
