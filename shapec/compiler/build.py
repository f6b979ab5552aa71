"""Generated kernel modules -> loaded kernels: the on-disk cache, numba's JIT, ahead-of-time
extension builds (numba.pycc), and the argument recipe each kernel is called with."""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import logging
import os
import platform
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .ir import PipelineIR, ShaperIR
from .lower import Arg, ShapecInternalError, StageLowering, _header, _lower_all

log = logging.getLogger("shapec")


def cache_dir() -> Path:
    """SHAPEC_CACHE_DIR, else $XDG_CACHE_HOME/shapec, else ~/.cache/shapec."""
    if os.environ.get("SHAPEC_CACHE_DIR"):
        return Path(os.environ["SHAPEC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shapec"


def numba_version() -> str:
    """Read from the package metadata: importing numba costs 0.2 s that a warm AOT load never pays."""
    return importlib.metadata.version("numba")


def cache_key(source: str) -> str:
    from .. import __version__

    return hashlib.sha256("\0".join((source, __version__, numba_version(), sys.version)).encode()).hexdigest()


STATS = {"written": 0, "imported": 0, "built": 0}  # cache files written, modules imported, extensions built
_MODULES: dict[str, object] = {}
_FELL_BACK: list[str] = []  # why ahead-of-time builds are off in this process (logged once)


def aot_enabled() -> bool:
    """SHAPEC_AOT=0 keeps kernels in numba's JIT cache instead of compiled extension modules."""
    value = os.environ.get("SHAPEC_AOT", "1")
    if value not in ("0", "1"):
        raise ValueError(f"SHAPEC_AOT={value!r}; expected 0 or 1")
    return value == "1" and not _FELL_BACK


def module_path(ir: ShaperIR | PipelineIR, source: str) -> Path:
    return cache_dir() / f"{ir.name}_{cache_key(source)[:24]}.py"


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
        if path.read_text() == expected:
            return
    except (OSError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(expected)
    os.replace(tmp, path)
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
        except Exception as err:
            raise _internal_error(ir, path, err) from err
        fns.append(fn)
    return fns


def _load_extension(so: Path):
    """The extension module if it is intact (its recorded SHA-256 matches), else None."""
    key = str(so)
    if key in _MODULES:
        return _MODULES[key]
    try:
        if hashlib.sha256(so.read_bytes()).hexdigest() != _digest_path(so).read_text().strip():
            return None
        spec = importlib.util.spec_from_file_location(_extension_name(so), so)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (OSError, ImportError):
        return None
    _MODULES[key] = module
    return module


def _build_extension(path: Path, ir: ShaperIR | PipelineIR, stages: list[StageLowering], so: Path) -> bool:
    """Compile the kernels ahead of time into a CPython extension (numba.pycc), so that a later
    process loads them in milliseconds without importing numba. False when this machine cannot
    (no setuptools or no C compiler): the caller then uses numba's JIT cache, the same code."""
    module = _import(path, ir)
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
    except Exception as err:  # no compiler, no Python headers, an unwritable cache: not a shapec bug
        _fall_back(f"building {so.name} failed ({type(err).__name__}: {err})")
        return False
    STATS["built"] += 1
    return True


def _compile_into(cc, so: Path) -> None:
    """Build in a private directory beside the target, then move the extension and its digest
    into place, so that no reader ever sees half a file."""
    with tempfile.TemporaryDirectory(dir=so.parent) as tmp:
        cc.output_dir = tmp
        try:
            cc.compile()
        except Exception:  # numba leaves its build directory behind when the compiler fails
            for leftover in Path(tempfile.gettempdir()).glob(f"pycc-build-{_extension_name(so)}-*"):
                shutil.rmtree(leftover, ignore_errors=True)
            raise
        built = Path(tmp) / so.name
        digest = hashlib.sha256(built.read_bytes()).hexdigest()
        os.replace(built, so)
    sidecar = _digest_path(so)
    pending = sidecar.with_suffix(f".{os.getpid()}.tmp")
    pending.write_text(digest)
    os.replace(pending, sidecar)


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
    return [getattr(module, f"kernel_{low.fname}") for low in stages]


@dataclass
class Kernel:
    """One stage's compiled kernel with the recipe for its arguments."""

    ir: ShaperIR
    fn: object
    args: tuple[Arg, ...]

    def __post_init__(self):
        ir = self.ir
        self.sizes = (len(ir.terms), len(ir.factors), len(ir.gate_reasons), len(ir.metrics))
        self.getters = [_getter(a, tuple(s for s, _ in ir.states)) for a in self.args if not a.source.startswith("out")]

    def run(self, batch, params: dict[str, np.ndarray], state: dict[str, float], training: bool):
        from ..runtime.interp import StageOutput

        ir = self.ir
        n, G = batch.n, batch.groups
        if not training:
            skip = np.full(G, ir.skip_reasons.index("validation"), dtype=np.int64)
            return StageOutput(batch.rewards.copy(), {t: np.zeros(n) for t in ir.terms},
                               {f: np.ones(n) for f in ir.factors}, skip,
                               {g: np.full(G, -1, dtype=np.int64) for g in ir.gate_reasons}, {}, dict(state))
        T, F, NG, M = self.sizes
        out, terms, factors = np.empty(n), np.empty((T, n)), np.empty((F, n))
        skip, gates = np.empty(G, dtype=np.int64), np.empty((NG, G), dtype=np.int64)
        metrics = np.empty(M)
        values = [get(batch, params, state) for get in self.getters]
        state_out, bad_i, bad_g = self.fn(*values, out, terms, factors, skip, gates, metrics)
        if bad_i >= 0:
            raise FloatingPointError(
                f"shaper {ir.name!r} produced a non-finite reward for rollout {bad_i} (group {bad_g}); "
                "guard the division or reduction that can be undefined")
        return StageOutput(
            out, dict(zip(ir.terms, terms)), dict(zip(ir.factors, factors)), skip,
            dict(zip(ir.gate_reasons, gates)), {m: float(v) for (m, _), v in zip(ir.metrics, metrics)},
            {s: float(v) for (s, _), v in zip(ir.states, state_out)})


def _getter(a: Arg, states: tuple[str, ...]):
    """A function (batch, params, state) -> this argument's array, contiguous and of its dtype."""
    key = a.key
    return {
        "rewards": lambda b, p, s: _f64(b.rewards),
        "env_rewards": lambda b, p, s: _f64(b.env_rewards if b.env_rewards is not None else b.rewards),
        "offsets": lambda b, p, s: _i64(b.offsets),
        "components": lambda b, p, s: _f64(b.components) if b.components is not None else _EMPTY,
        "use_components": lambda b, p, s: b.components is not None,
        "nthreads": lambda b, p, s: sys.modules["numba"].get_num_threads(),  # parallel kernels are JIT: loaded
        "input": lambda b, p, s: _f64(b.inputs[key]),
        "meta": lambda b, p, s: _f64(b.metas[key]),
        "band": lambda b, p, s: _f64(b.bands[key]),
        "list_offsets": lambda b, p, s: _i64(b.lists[key][0]),
        "list_field": lambda b, p, s: _f64(b.lists[key[0]][1][key[1]]),
        "param": lambda b, p, s: _f64(p[key]),
        "state": lambda b, p, s: np.array([float(s[name]) for name in states], dtype=np.float64),
    }[a.source]


_EMPTY = np.zeros(0)


def _f64(x) -> np.ndarray:
    if type(x) is np.ndarray and x.dtype == _F64 and x.flags.c_contiguous:
        return x
    return np.ascontiguousarray(x, dtype=np.float64)


def _i64(x) -> np.ndarray:
    if type(x) is np.ndarray and x.dtype == _I64 and x.flags.c_contiguous:
        return x
    return np.ascontiguousarray(x, dtype=np.int64)


_F64, _I64 = np.dtype(np.float64), np.dtype(np.int64)


def load_kernels(ir: ShaperIR | PipelineIR, parallel: bool = False) -> list[Kernel]:
    """Generate, cache, import and compile the kernels of a shaper (one) or pipeline (one per stage).

    parallel=True runs chunks of groups on numba's threads (prange) for batches of at least
    PARALLEL_MIN_ROLLOUTS rollouts; the results are the same bit for bit, since each group is
    still computed by one thread in the same order.
    """
    source, stages = _lower_all(ir, parallel)
    path = module_path(ir, source)
    _ensure_file(path, source)
    fns = _aot_kernels(path, ir, stages) if not parallel and aot_enabled() else None
    if fns is None:  # parallel kernels need numba's threading layer, which pycc cannot build
        fns = _jit_kernels(path, ir, stages)
    return [Kernel(low.ir, fn, tuple(low.args)) for low, fn in zip(stages, fns)]
