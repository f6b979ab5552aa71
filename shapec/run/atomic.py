"""Files that appear whole or not at all: written under a temporary name, renamed on success.

Every file `shapec run` and `shapec fmt` write goes through `AtomicFile`: the data goes to the
temporary file `files.temporary_beside` makes in the destination's own folder (so the rename never
crosses a file system), is flushed to disk, and `os.replace` puts it over the destination in one step.
On any exception, Ctrl-C included, the temporary file is removed and the destination keeps its
previous content. A process killed outright (kill -9, power loss) leaves the destination as it
was plus, at worst, a leftover temporary file that its name marks as never being output.

A destination that is a symlink is written through: the link stays and its target (created if the
link dangles) gets the content and keeps its mode and owner. A file the user may not write is
refused, not renamed over (renaming needs only the folder's permission); "may not write" is read
from the mode bits, since root passes every `os.access` check and would replace a read-only file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
from pathlib import Path
from typing import Iterator

from ..files import temporary_beside
from ..paths import path_kind, printable
from .spec import ToolError

class OutputError(ToolError):
    """A file cannot be written: `cannot write PATH: REASON` (exit status 2)."""

    def __init__(self, path: Path | str, reason: str):
        super().__init__(f"cannot write {printable(path)}: {reason}")
        self.path = path
        self.reason = reason


class Interrupted(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so the same cleanup runs."""


def reason_of(err: OSError) -> str:
    """An OSError as a short reason: 'No space left on device', 'Read-only file system', ..."""
    return err.strerror or (errno.errorcode.get(err.errno, "") if err.errno else "") or str(err)


def real_destination(path: Path) -> Path:
    """Where writing `path` lands: through every symlink (a dangling one names the file to create)."""
    return Path(os.path.realpath(path))


def same_file(a: Path, b: Path) -> bool:
    """Whether writing `a` writes `b`: one file under two names (a hard link, a symlink, `./x` and
    `x`, /proc/self/fd/N), or one name that does not exist yet (a dangling link to it included)."""
    try:
        if os.path.samefile(a, b):
            return True
    except (OSError, ValueError):  # either is missing, or a name the file system refuses
        pass
    try:
        return real_destination(a) == real_destination(b)
    except (OSError, ValueError):
        return False


def refuse_overwriting(outputs: list[tuple[Path, str]], reads: list[tuple[Path, str]]) -> None:
    """No output may be a file the command reads, nor another of its outputs, under any name:
    writing it would destroy what is being read, or one output would replace the other."""
    for i, (path, what) in enumerate(outputs):
        for other, name in [*reads, *outputs[:i]]:
            if same_file(path, other):
                raise OutputError(path, f"{what} is {name} ({printable(other)})")


def check_destination(path: Path, follow_links: bool = True) -> None:
    """Refuse, before any work, a destination that cannot be a regular file in an existing folder."""
    kind = path_kind(path)
    if kind == "dir":
        raise OutputError(path, "it is a directory")
    if kind == "other":
        raise OutputError(path, "it is not a regular file")
    if kind not in ("file", "missing"):
        raise OutputError(path, kind)
    real = real_destination(path)
    if kind == "file" and not _writable(real):
        raise OutputError(path, "Permission denied (the file is read-only)")
    parent = real.parent if follow_links and os.path.islink(path) else path.parent
    kind = path_kind(parent)
    if kind == "missing":
        raise OutputError(path, f"folder {printable(parent)} does not exist")
    if kind != "dir":
        raise OutputError(path, f"{printable(parent)} is not a folder" if kind in ("file", "other") else kind)


def _writable(path: Path) -> bool:
    """Whether the user may write this existing file: `os.access`, and for root (whom `os.access`
    always lets write) the mode bits too: a file without the write bit its owner would need
    (`chmod a-w`, or `u-w` on root's own file) is read-only for everyone."""
    try:
        st = os.stat(path)
    except OSError:
        return True  # gone since it was looked at: nothing to protect, the rename makes it anew
    needed = stat.S_IWUSR if st.st_uid == os.geteuid() else stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    return bool(st.st_mode & needed) and os.access(path, os.W_OK)


def _mode_for(path: Path) -> int:
    """The destination's current permissions, or what a new file gets under the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _keep_owner(tmp: Path, path: Path) -> None:
    """Give the new file the destination's owner and group, as far as the user may (root may give
    any; others their own groups): a file root rewrote stays its owner's to write."""
    try:
        st = os.stat(path)
    except OSError:
        return  # a new file: its creator owns it
    with contextlib.suppress(OSError):
        os.chown(tmp, st.st_uid if os.geteuid() == 0 else -1, st.st_gid)


class AtomicFile:
    """One destination file: `open()` makes the temporary file, `commit()` renames it over the
    destination, `discard()` removes it. `tmp` is the temporary path while one exists."""

    def __init__(self, path: Path, follow_links: bool = True):
        """`follow_links=False` replaces a symlink itself (for a cache that must not write elsewhere)."""
        self.path = Path(path)
        self.follow_links = follow_links
        self.tmp: Path | None = None

    @property
    def real(self) -> Path:
        """The file the rename replaces; `path` stays the name messages use."""
        return real_destination(self.path) if self.follow_links else self.path

    def open(self) -> Path:
        check_destination(self.path, self.follow_links)
        try:
            self.tmp = temporary_beside(self.real)
        except OSError as err:
            raise OutputError(self.path, reason_of(err)) from None
        return self.tmp

    def commit(self) -> None:
        """Flush the temporary file to disk and rename it over the destination."""
        assert self.tmp is not None, "commit() before open()"
        try:
            real = self.real
            _keep_owner(self.tmp, real)
            os.chmod(self.tmp, _mode_for(real))
            fd = os.open(self.tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self.tmp, real)
        except OSError as err:
            self.discard()
            raise OutputError(self.path, reason_of(err)) from None
        self.tmp = None
        with contextlib.suppress(OSError):  # the rename itself to disk; not every file system allows it
            dirfd = os.open(real.parent, os.O_RDONLY)
            try:
                os.fsync(dirfd)
            finally:
                os.close(dirfd)

    def discard(self) -> None:
        if self.tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                self.tmp.unlink()
            self.tmp = None


def write_text(path: Path, text: str, follow_links: bool = True) -> None:
    """Replace a text file's content atomically (through a symlink unless `follow_links` is off)."""
    out = AtomicFile(path, follow_links)
    tmp = out.open()
    try:
        try:
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
        except OSError as err:
            raise OutputError(path, reason_of(err)) from None
        out.commit()
    except BaseException:
        out.discard()
        raise


class Signals:
    """SIGINT and SIGTERM while a command runs (main thread only).

    Until the command starts renaming its files into place they raise KeyboardInterrupt and
    Interrupted, so it unwinds, removes its temporary files and leaves every destination as it was
    (exit status 130 or 143). `finishing()` marks that instant: from then on a signal is recorded,
    not raised, so the renames complete and the command ends as it would have; exit status 0 says the
    new files are in place, and `late` names the signal that came too late to stop it."""

    current: Signals | None = None  # the one installed, which finishing() reaches

    def __init__(self):
        self.late: str | None = None
        self.final = False

    def _handle(self, signum, frame):
        word = "terminated" if signum == signal.SIGTERM else "interrupted"
        if self.final:
            self.late = self.late or word
            return
        raise Interrupted() if signum == signal.SIGTERM else KeyboardInterrupt()

    @contextlib.contextmanager
    def installed(self, restore: bool = True) -> Iterator[Signals]:
        """Handle both signals within the block; `restore=False` keeps the handlers to the end of the
        process (the `shapec` command), where the block's end is final too, so no signal between it
        and the exit turns a finished command into a traceback."""
        try:
            previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread: leave the signals alone
            yield self
            return
        Signals.current = self
        try:
            yield self
        finally:
            self.final = True
            Signals.current = None
            if restore:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)


def finishing() -> None:
    """The command is about to rename its files into place: a signal from now on no longer stops it."""
    if Signals.current is not None:
        Signals.current.final = True
