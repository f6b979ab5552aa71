"""Files shapec writes itself: whole or not at all, and, for its cache, private to the user.

Every file is first written under a temporary name in its destination's own folder, made by
`mkstemp` (O_CREAT | O_EXCL, mode 0600: a file or link another user planted at that name is never
opened, followed or reused), and renamed over the destination only once complete, so a reader sees
the old file or the new one, never half of one. `temporary_beside` is that one helper: the
output files of `shapec run` and `fmt` (run/atomic.py) and every cache file take their temporary
name from it.

The cache (compiled kernels, the grammar's parse tables) lives in SHAPEC_CACHE_DIR, else
$XDG_CACHE_HOME/shapec, else ~/.cache/shapec. What shapec reads back from it is code (a generated
module, numba's pickled index), so the folder must be this user's alone: it is made 0700 whatever
the umask, and one that another user owns, or that group or others may write, is refused. The
process then uses a private temporary folder instead, with one warning naming the folder and the
reason, and never reads from the refused one. A folder that cannot be written (read-only, full)
is handled the same way.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

log = logging.getLogger("shapec")

TMP_MARK = ".shapec-tmp-"
DISK_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def temporary_beside(path: Path) -> Path:
    """A new empty file (mode 0600) in `path`'s folder, named `.<name>.shapec-tmp-<pid>-<random>`
    so that a leftover of a killed process is recognisably never output."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}{TMP_MARK}{os.getpid()}-", dir=path.parent)
    os.close(fd)
    return Path(name)


def write_atomic(path: Path, data: bytes, replace: bool = True) -> bool:
    """Write `data` (mode 0600) to a temporary name beside `path`, then rename it into place. With
    `replace=False` an existing file is kept (hard-linked into place: no second writer changes a
    file another process may already be reading). True when this call's data is what `path` holds."""
    tmp = temporary_beside(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: a rename, which never leaves half a file either
            os.replace(tmp, path)
        return True
    finally:
        if tmp.exists():
            tmp.unlink()


# ------------------------------------------------------------------------- the private cache folder
class NotPrivate(OSError):
    """A cache folder or file that another user could have written: never read from."""


def configured_cache() -> Path:
    """SHAPEC_CACHE_DIR, else $XDG_CACHE_HOME/shapec, else ~/.cache/shapec."""
    if os.environ.get("SHAPEC_CACHE_DIR"):
        return Path(os.environ["SHAPEC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shapec"


def why_not_private(st: os.stat_result, what: str) -> str | None:
    """Why a file or folder with this status is not this user's alone (None: it is)."""
    if st.st_uid != os.geteuid():
        return f"{what} is owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'}"
    return None


def private_folder(path: Path) -> Path:
    """`path` as a folder only this user may write: made (0700, whatever the umask) if missing;
    an existing one must be a folder this user owns that group and others cannot write (NotPrivate
    otherwise). A symlink is followed only to such a folder."""
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # mkdir's mode passes through the umask, which may take bits from it too
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return private_folder(path)
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotPrivate(errno.ENOTDIR, "it is not a folder", str(path))
    reason = why_not_private(st, "the folder")
    if reason:
        raise NotPrivate(errno.EPERM, reason, str(path))
    return path


def read_private(path: Path) -> bytes | None:
    """A regular file's bytes if it is this user's alone (opened without following a link), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or why_not_private(st, "the file"):
            return None
        return f.read()


_FALLBACK: list[Path] = []  # the private temporary cache this process moved to, if any
_LOCK = threading.Lock()


def cache_root() -> Path:
    """The cache folder this process uses: the configured one if it is private, else (one warning)
    a private temporary one that goes when the process ends."""
    with _LOCK:
        if _FALLBACK:
            return _FALLBACK[0]
        folder = configured_cache()
        try:
            return private_folder(folder)
        except OSError as err:
            return _fall_back(folder, err)


def move_cache(err: OSError) -> Path:
    """The configured folder failed a write (read-only, full, refused): move this process to a private
    temporary cache, with one warning. Raises CacheError when that one failed too."""
    with _LOCK:
        if _FALLBACK:
            raise CacheError(err.errno, f"cannot write the private cache {_FALLBACK[0]} either ({reason(err)}); "
                             "free some space or set SHAPEC_CACHE_DIR") from err
        return _fall_back(Path(err.filename) if err.filename else configured_cache(), err)


class CacheError(OSError):
    """Neither the configured cache folder nor a private temporary one can be used (the disk, not shapec)."""


def _fall_back(folder: Path, err: OSError) -> Path:
    try:
        private = Path(tempfile.mkdtemp(prefix="shapec-cache-"))  # 0700, ours
    except OSError as again:
        raise CacheError(again.errno, f"cannot use the cache {folder} ({reason(err)}) nor create a private "
                         f"one ({reason(again)})") from err
    atexit.register(shutil.rmtree, private, True)
    _FALLBACK.append(private)
    log.warning("shapec: not using the cache folder %s (%s); this process uses the private temporary cache %s "
                "(set SHAPEC_CACHE_DIR to a folder of your own to keep compiled kernels between runs)",
                folder, reason(err), private)
    return private


def reason(err: OSError) -> str:
    """An OSError as a short reason: 'No space left on device', 'the folder is writable by others', ..."""
    return err.strerror or (errno.errorcode.get(err.errno or 0, "") if err.errno else "") or str(err) or type(err).__name__
