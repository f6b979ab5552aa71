"""Generated kernel modules -> loaded kernels: the on-disk cache, numba's JIT, ahead-of-time
extension builds (numba.pycc). The loaded kernels and their arguments are kernel.py's."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import logging
import os
import platform
import re
import sys
import threading
import warnings
from pathlib import Path

from ..runtime.validate import compiled_checks, use_compiled_checks
from . import cache, checks_build
from .cache import cache_dir
from .ir import PipelineIR, ShaperIR
from .kernel import Kernel
from .lowering import Namer, ShapecInternalError, StageLowering, _header, _lower_all
from .lowering.groups import breakdown_always
from .pycc_mixins import share_mixins

log = logging.getLogger("shapec")


@functools.lru_cache(maxsize=None)
def numba_version() -> str:
    """Read from the package metadata: importing numba costs 0.2 s that a warm AOT load never pays
    (the metadata lookup itself 0.2 ms, once per process: every cache key asks)."""
    return importlib.metadata.version("numba")


def cache_key(source: str) -> str:
    """The generated module's text (never the spec's path: the same spec loaded as `mine.shape`
    and as an absolute path shares one entry), shapec's, numba's and Python's versions and the CPU."""
    from .. import __version__

    parts = (source, __version__, numba_version(), sys.version, host_fingerprint())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


STATS = {"written": 0, "imported": 0, "built": 0}  # cache files written, modules imported, extensions built
_MODULES: dict[str, object] = {}
_FELL_BACK: list[str] = []  # why ahead-of-time builds are off in this process (logged once)


def aot_enabled() -> bool:
    """SHAPEC_AOT=0 keeps kernels in numba's JIT cache instead of compiled extension modules."""
    value = os.environ.get("SHAPEC_AOT", "1")
    if value not in ("0", "1"):
        raise ValueError(f"SHAPEC_AOT={value!r}; expected 0 or 1")
    return value == "1" and not _FELL_BACK


_NAME_CHARS = 32  # of the shaper's name in a cache file name: enough to recognise it, bounded whatever the spec


def module_path(ir: ShaperIR | PipelineIR, source: str) -> Path:
    """Named by the first stage's shaper name, cut short (a name is an ASCII identifier of any length:
    the grammar's NAME), and the key, which alone identifies the module: a one-stage pipeline
    generates the same module as its shaper, and the two then share one file and one compile
    (`load("nemo_rl")` has both)."""
    first = ir.stages[0][0].name if isinstance(ir, PipelineIR) else ir.name
    # a repeated pipeline stage is named `a#2`: the file name is also the extension's C module name
    first = re.sub(r"\W", "_", first[:_NAME_CHARS])
    return cache_dir() / f"{first}_{cache_key(source)[:24]}.py"


@functools.lru_cache(maxsize=None)
def host_fingerprint() -> str:
    """This machine's CPU: extensions are compiled for it, so a cache directory shared between
    machines (an NFS home) never hands one CPU's machine code to another."""
    text = platform.machine() + platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags", "Features", "CPU part")):
                    text += line
                elif not line.strip():
                    break  # the first processor describes them all
    except OSError:
        pass
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def extension_path(path: Path) -> Path:
    """The compiled extension module next to a generated module, for this CPU."""
    return path.with_name(f"shapec_aot_{path.stem}_{host_fingerprint()}{importlib.machinery.EXTENSION_SUFFIXES[0]}")


def _extension_name(so: Path) -> str:
    """The module name pycc builds into the extension (and Python imports it by)."""
    return so.name.split(".", 1)[0]


def _digest_path(so: Path) -> Path:
    """Where the SHA-256 of an extension's bytes is kept."""
    return so.with_name(so.name + ".sha256")


def _ensure_file(path: Path, body: str) -> None:
    """Write the module unless an intact copy is there; a stale or corrupt file is replaced."""
    expected = _header(body) + body
    try:
        if path.read_text(encoding="utf-8") == expected:
            return
    except (OSError, UnicodeDecodeError):
        pass
    cache.write_atomic(path, expected.encode())
    STATS["written"] += 1
    _MODULES.pop(str(path), None)


def _internal_error(ir: ShaperIR | PipelineIR, path: Path, err: Exception) -> ShapecInternalError:
    kind = "pipeline" if isinstance(ir, PipelineIR) else "shaper"
    return ShapecInternalError(
        f"internal error: numba could not compile {kind} {ir.name!r} from {ir.filename or '<string>'} "
        f"(generated module {path}); this is a shapec bug, please report it. "
        f"Use backend='interpreter' meanwhile. Cause: {type(err).__name__}: {err}")


def _import(path: Path, ir: ShaperIR | PipelineIR):
    key = str(path)
    if key in _MODULES:
        return _MODULES[key]
    name = f"shapec_kernels_{path.stem}"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except OSError:  # the disk: load_kernels falls back to a private cache
        sys.modules.pop(name, None)
        raise
    except Exception as err:  # numba typing, lowering or any other failure: a shapec bug
        sys.modules.pop(name, None)
        raise _internal_error(ir, path, err) from err
    STATS["imported"] += 1
    _MODULES[key] = module
    return module


def _jit_kernels(path: Path, ir: ShaperIR | PipelineIR, stages: list[StageLowering]) -> list:
    """Kernels from numba's on-disk JIT cache (compiled on a miss)."""
    module = _import(path, ir)
    fns = []
    for low in stages:
        fn = getattr(module, f"kernel_{low.fname}")
        try:
            fn.compile(getattr(module, f"SIG_{low.fname}"))
        except OSError:
            raise
        except Exception as err:  # including an unreadable numba cache: load_kernels purges and retries once
            raise _internal_error(ir, path, err) from err
        fns.append(fn)
    return fns


_DLOPENED: set[str] = set()  # extension paths this process has loaded (or tried to)


def _load_extension(so: Path):
    """The extension module if it is intact (its recorded SHA-256 matches), else None."""
    key = str(so)
    if key in _MODULES:
        return _MODULES[key]
    try:
        data = so.read_bytes()
        if hashlib.sha256(data).hexdigest().encode() != _digest_path(so).read_bytes().strip():
            return None
        if key not in _DLOPENED:
            _DLOPENED.add(key)
            module = _exec_extension(so)
        else:  # the dynamic loader would hand back what it mapped from this path before: load a copy
            with cache.build_folder(so.parent) as folder:
                copy = folder / so.name
                copy.write_bytes(data)
                module = _exec_extension(copy)
    except (OSError, ImportError):
        return None
    _MODULES[key] = module
    return module


def _exec_extension(so: Path):
    spec = importlib.util.spec_from_file_location(_extension_name(so), so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_extension(path: Path, ir: ShaperIR | PipelineIR, stages: list[StageLowering], so: Path) -> bool:
    """Compile the kernels ahead of time into a CPython extension (numba.pycc), so that a later
    process loads them in milliseconds without importing numba. False when this machine cannot
    (no setuptools or no C compiler): the caller then uses numba's JIT cache, the same code."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pycc is "pending deprecation" in numba; see docs/lowering.md
            from numba.pycc import CC
        from numba import types as nt
        from numba.core.errors import NumbaError
    except ImportError as err:
        _fall_back(f"numba.pycc is unavailable ({err})")
        return False
    try:
        cc = CC(_extension_name(so))  # looks for a C compiler
    except Exception as err:
        _fall_back(f"numba.pycc cannot build here ({type(err).__name__}: {err})")
        return False
    cc.target_cpu = "host"  # as numba's JIT does; the file name carries this machine's CPU fingerprint
    share_mixins(cc, so.parent)  # gcc compiles them, if they are missing, while numba compiles the kernels
    if compiled_checks() is None:  # none in this folder yet: this extension carries them (checks_build.py)
        checks_build.carry(cc)
    module = _import(path, ir)
    returns = nt.Tuple((nt.float64[::1], nt.int64, nt.int64))
    for low in stages:
        # pycc compiles its exports with Python's error model: export a call into the
        # kernel, which keeps NumPy's (1 / 0 is inf, not an exception)
        names = ", ".join(a.name for a in low.args)
        scope = {"kernel": getattr(module, f"kernel_{low.fname}")}
        exec(f"def entry({names}):\n    return kernel({names})\n", scope)
        cc.export(f"kernel_{low.fname}", returns(*getattr(module, f"SIG_{low.fname}")))(scope["entry"])
    try:
        _compile_into(cc, so)
    except NumbaError as err:
        raise _internal_error(ir, path, err) from err
    except OSError as err:
        if err.errno in cache.DISK_ERRNOS:  # load_kernels moves to a private cache
            raise
        _fall_back(f"building {so.name} failed ({type(err).__name__}: {err})")
        return False
    except Exception as err:  # no compiler, no Python headers: not a shapec bug
        _fall_back(f"building {so.name} failed ({type(err).__name__}: {err})")
        return False
    STATS["built"] += 1
    return True


_BUILD_LOCK = threading.Lock()


class _TempfileIn:
    """numba.pycc makes its build folder with tempfile.mkdtemp(); this puts it inside ours, so it
    goes when ours does (or, after a kill -9, when the next build sweeps ours)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def mkdtemp(self, suffix=None, prefix=None, dir=None):
        import tempfile

        return tempfile.mkdtemp(suffix, prefix, str(self.folder))

    def __getattr__(self, name):
        import tempfile

        return getattr(tempfile, name)


def _compile_into(cc, so: Path) -> None:
    """Build in a private folder beside the target, then move the extension and its digest
    into place, so that no reader ever sees half a file."""
    import numba.pycc.cc as pycc

    with _BUILD_LOCK, cache.build_folder(so.parent) as tmp, _patched(pycc, "tempfile", _TempfileIn(tmp)):
        cc.output_dir = str(tmp)
        cc.compile()
        built = tmp / so.name
        digest = hashlib.sha256(built.read_bytes()).hexdigest()
        os.replace(built, so)
    cache.write_atomic(_digest_path(so), digest.encode())


@contextlib.contextmanager
def _patched(module, name: str, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def _fall_back(reason: str) -> None:
    if not _FELL_BACK:
        log.warning("shapec: %s; kernels stay in numba's JIT cache (same code, slower first load)", reason)
    _FELL_BACK.append(reason)


def _aot_kernels(path: Path, ir: ShaperIR | PipelineIR, stages: list[StageLowering]) -> list | None:
    so = extension_path(path)
    module = _load_extension(so)
    if module is None:
        if not _build_extension(path, ir, stages, so):
            return None
        module = _load_extension(so)
        if module is None:
            raise ShapecInternalError(f"internal error: the extension just built for {ir.name!r} ({so}) does not load")
    try:
        kernels = [getattr(module, f"kernel_{low.fname}") for low in stages]
    except AttributeError as err:  # a foreign extension under this name: load_kernels purges and rebuilds
        raise ShapecInternalError(f"internal error: {so} is not the extension of {ir.name!r} ({err})") from err
    _adopt_checks(module, so)
    return kernels


def _adopt_checks(module, so: Path) -> None:
    """A process still without batch checks takes the ones this extension carries (and notes it for
    the processes that load no kernel of its), else builds the standalone ones: a folder whose
    carrier was purged, or filled by an older shapec."""
    if compiled_checks() is not None:
        return
    if checks_build.carries(module):
        use_compiled_checks(module)
        checks_build.note_carrier(so)
    else:
        use_compiled_checks(checks_build.build_checks())


def load_kernels(ir: ShaperIR | PipelineIR, parallel: bool = False) -> list[Kernel]:
    """The kernels of a shaper (one) or pipeline (one per stage), each compiled on its first call.

    A kernel is compiled for what its first call's params decide (specialize.py): the algorithms
    they turn off are left out, so the first compile takes seconds instead of a minute. A later
    call whose params break one of those facts compiles a more general kernel (kernel.py); all of
    them take the same arguments and give the same outputs. `Shaper.prepare` compiles ahead.

    parallel=True runs chunks of groups on numba's threads (prange) for batches of at least
    PARALLEL_MIN_ROLLOUTS rollouts; the results are the same bit for bit, since each group is
    still computed by one thread in the same order.
    """
    if parallel:
        fork_safe_threading()
    if compiled_checks() is None:  # until found: any cache folder's copy checks the same way
        use_compiled_checks(checks_build.load_checks(jit=parallel or not aot_enabled()))  # one pass per batch array
    shapers = [s for s, _ in ir.stages] if isinstance(ir, PipelineIR) else [ir]
    kernels = []
    for shaper in shapers:
        low = StageLowering(shaper, "s0", Namer(), parallel)  # the arguments every specialisation takes
        kernels.append(Kernel(shaper, functools.partial(compile_stage, shaper, parallel), tuple(low.args),
                              parallel, breakdown_always(shaper)))
    return kernels


def compile_stage(ir: ShaperIR, parallel: bool, specialized: ShaperIR | None = None):
    """The compiled kernel of one shaper, lowered from `specialized` (its IR with facts folded in).

    A cache entry that does not load (a garbage module, numba index or extension) is purged and
    built again once; only a failure after that is a shapec bug. A cache folder that cannot be
    written (read-only, full, not ours) is replaced by a private temporary one, with a warning."""
    source, stages = _lower_all(ir, parallel, specialized)
    for _ in range(2):  # the configured folder, then (once) a private one
        try:
            with compile_notice(ir):
                return _healed_kernels(ir, source, stages, parallel)[0]
        except cache.KernelCacheError:
            raise
        except OSError as err:
            cache.fall_back(err)  # raises KernelCacheError when already on the private folder
    raise AssertionError("unreachable: fall_back raises on the private folder")


NOTICE_AFTER = 1.0  # seconds: a warm load takes milliseconds, a first compile up to a minute


@contextlib.contextmanager
def compile_notice(ir: ShaperIR | PipelineIR):
    """One stderr line when loading the kernels takes over NOTICE_AFTER seconds (a compile), printed
    while it runs, so a first use that takes a minute does not look like a hang."""
    where = f"{ir.filename or '<string>'}:{ir.name}"
    timer = threading.Timer(NOTICE_AFTER, lambda: print(
        f"compiling {where} (first use; cached in {cache_dir()})", file=sys.stderr, flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _healed_kernels(ir, source: str, stages: list[StageLowering], parallel: bool) -> list:
    path = module_path(ir, source)
    try:
        return _kernels(path, ir, source, stages, parallel)
    except ShapecInternalError as err:
        log.warning("shapec: the cached kernels of %r (%s) did not load (%s); purged them and building again",
                    ir.name, path.name, err.__cause__ or err)
        _forget(path)
        cache.purge(path, extension_path(path))
        return _kernels(path, ir, source, stages, parallel)


def _kernels(path: Path, ir, source: str, stages: list[StageLowering], parallel: bool) -> list:
    _ensure_file(path, source)
    fns = _aot_kernels(path, ir, stages) if not parallel and aot_enabled() else None
    if fns is None:  # parallel kernels need numba's threading layer, which pycc cannot build
        fns = _jit_kernels(path, ir, stages)
        if compiled_checks() is None:  # this process's extension build failed: the JIT checks, as its kernels
            use_compiled_checks(checks_build.load_checks(jit=True))
    return fns


def _forget(path: Path) -> None:
    """Drop this process's copies of a cache entry, so the next load reads the rebuilt one."""
    _MODULES.pop(str(path), None)
    _MODULES.pop(str(extension_path(path)), None)
    sys.modules.pop(f"shapec_kernels_{path.stem}", None)


def fork_safe_threading() -> None:
    """Parallel kernels run on a threading layer that survives fork(): tbb when installed, else
    numba's workqueue (GNU OpenMP kills a child forked after it ran). NUMBA_THREADING_LAYER, when
    set, is the user's choice and is kept. See docs/lowering.md, "Threads and fork"."""
    import numba

    if os.environ.get("NUMBA_THREADING_LAYER") or numba.config.THREADING_LAYER not in ("default", ""):
        return
    numba.config.THREADING_LAYER = "tbb" if importlib.util.find_spec("tbb") else "workqueue"
