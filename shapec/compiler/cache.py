"""The kernel cache folder on disk: where it is, writing into it safely, purging a bad entry,
and falling back to a private temporary folder when the user's folder cannot be written.

Build folders are named `shapec-build-<host>-<pid>-*`, so one left behind by a killed
process is recognised and swept by the next build (its pid is gone, or it is an hour old).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

log = logging.getLogger("shapec")

BUILD_PREFIX = "shapec-build-"
DISK_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
STALE_SECONDS = 3600  # a build folder of another host (or a reused pid) this old is abandoned
_PRIVATE: list[Path] = []  # the private cache this process fell back to, if any


class KernelCacheError(OSError):
    """Neither the kernel cache folder nor a private temporary one could be written (the disk, not shapec)."""


def configured_dir() -> Path:
    """SHAPEC_CACHE_DIR, else $XDG_CACHE_HOME/shapec, else ~/.cache/shapec."""
    if os.environ.get("SHAPEC_CACHE_DIR"):
        return Path(os.environ["SHAPEC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shapec"


def cache_dir() -> Path:
    """The folder kernels go to: the configured one, or this process's private one after a fall back."""
    return _PRIVATE[0] if _PRIVATE else configured_dir()


def fall_back(err: OSError) -> Path:
    """Switch this process to a private temporary cache, with one warning naming the folder and why."""
    if _PRIVATE:
        raise KernelCacheError(err.errno, f"cannot write compiled kernels to {configured_dir()} nor to the private "
                               f"cache {_PRIVATE[0]} ({_reason(err)}); free some space or set SHAPEC_CACHE_DIR") from err
    try:
        private = Path(tempfile.mkdtemp(prefix="shapec-cache-"))
    except OSError as again:
        raise KernelCacheError(again.errno, f"cannot write compiled kernels to {configured_dir()} ({_reason(err)}) "
                               f"nor create a private cache ({_reason(again)})") from err
    atexit.register(shutil.rmtree, private, True)
    _PRIVATE.append(private)
    log.warning("shapec: cannot write the kernel cache %s (%s); using the private temporary cache %s for this "
                "process (set SHAPEC_CACHE_DIR to a writable folder to keep kernels between runs)",
                configured_dir(), _reason(err), private)
    return private


def _reason(err: OSError) -> str:
    return err.strerror or (errno.errorcode.get(err.errno or 0) if err.errno else None) or str(err) or type(err).__name__


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary name in the same folder, then rename; a failed write leaves nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def purge(*paths: Path) -> None:
    """Delete cache entries and what Python and numba cached beside them (`__pycache__/<stem>.*`)."""
    for path in paths:
        for victim in (path, path.with_name(path.name + ".sha256"), *path.parent.glob(f"__pycache__/{path.stem}.*")):
            with contextlib.suppress(FileNotFoundError):
                victim.unlink()


@contextlib.contextmanager
def build_folder(parent: Path):
    """A private folder for one build, removed afterwards however the build ends; stale ones of
    killed processes are swept first."""
    parent.mkdir(parents=True, exist_ok=True)
    sweep(parent)
    folder = tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}{_host()}-{os.getpid()}-", dir=parent)
    try:
        yield Path(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sweep(parent: Path) -> None:
    """Remove build folders whose process is gone (on this host) or that are older than STALE_SECONDS."""
    for folder in parent.glob(f"{BUILD_PREFIX}*"):
        host, _, pid = folder.name[len(BUILD_PREFIX):].rpartition("-")[0].rpartition("-")
        try:
            old = time.time() - folder.stat().st_mtime > STALE_SECONDS
        except OSError:
            continue
        if old or (host == _host() and pid.isdigit() and not _alive(int(pid))):
            shutil.rmtree(folder, ignore_errors=True)


def _host() -> str:
    return "".join(c for c in socket.gethostname() if c.isalnum()) or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
