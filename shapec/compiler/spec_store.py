"""Checked specs kept beside the kernels, so a warm process neither parses nor checks its spec again.

Checking a spec (parse, names, types, proofs, and importing the parser and the checker) takes a
warm `shapec run` a tenth of its time and decides nothing that a later process with the same files
could not read back. An entry is keyed by everything the check reads besides the imported files:
the spec's text (a file's, a string's, or an unpickled shaper's), its file name as given
(diagnostics and the IR carry it), where it and its imports resolve from, the imports a pickled
shaper carries, and what shapec is (identity.py). It holds the checked shapers and
pipelines and, for every import, what resolving it read. A hit resolves each import again (which
reads the file) and compares: an import that now finds another file or other text is a miss,
checked as if new. Only a spec that checks cleanly is kept; a spec with errors is checked, and
reported, every time.

Entries are pickles in the private cache folder, read only when this user alone could have written
them (files.read_private), as the kernels' modules are imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .. import files
from ..checker.imports import STDLIB, ImportKey, Target, newlines, read_spec, resolve
from ..syntax.source import Span
from .identity import shapec_identity

FORMAT = 1  # of the key and the entries


@dataclass(frozen=True)
class CheckedSpec:
    """What a compiled module needs of a spec's check: its shapers and pipelines, and its imports."""

    filename: str
    doc: str | None
    shapers: dict[str, Any]  # name -> ShaperIR
    pipelines: dict[str, Any]  # name -> PipelineIR
    imports: dict[ImportKey, Target]  # what a pickled shaper carries (runtime/shaper.py)
    reads: tuple[tuple[str, bool, Path, Path, Target], ...]  # each import resolved: its arguments and Target


def checked_file(path: Path) -> CheckedSpec:
    """The spec file at `path` checked, with everything it imports (see checked_source)."""
    path = Path(path)
    return checked_source(read_spec(path), str(path), path.parent)


def checked_source(text: str, filename: str, folder: Path,
                   pickled: Mapping[ImportKey, Target] | None = None) -> CheckedSpec:
    """Spec text checked as the loader checks it (checker/loader.py; `pickled`: the imports an
    unpickled shaper carries, read instead of the disk): from the store when nothing it read has
    changed, else checked now (raising ShapeError for a bad spec) and stored."""
    text = newlines(text)
    entry = _entry_path(_key(text, filename, Path(folder), pickled or {}))
    found = _stored(entry)
    if found is not None and all(resolve(target, is_path, where, root, Span.none()) == read
                                 for target, is_path, where, root, read in found.reads):
        return found
    from ..checker.loader import Loader  # only on a miss: a warm process never imports the parser or checker

    loader = Loader(pickled)
    checked = loader.source(text, filename, Path(folder))
    spec = CheckedSpec(checked.filename, checked.doc, checked.shapers, checked.pipelines, dict(loader.imports),
                       tuple(loader.reads))
    # a store that cannot be written, or IR nested too deep for pickle's recursion (a chain of hundreds
    # of operators), costs the next process a check, no more
    with contextlib.suppress(OSError, RecursionError):
        files.write_atomic(entry, pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL))
    return spec


def _key(text: str, filename: str, folder: Path, pickled: Mapping[ImportKey, Target]) -> str:
    """Everything the loader reads besides the files it resolves (those are in the entry's `reads`)."""
    root = folder.absolute().resolve()
    root = STDLIB if root.is_relative_to(STDLIB) else root
    real = Path(filename).absolute().resolve() if Path(filename).name.endswith(".shape") else None
    carried = sorted((key, str(t.shown), str(t.real), str(t.root), t.text) for key, t in pickled.items())
    parts = (str(FORMAT), shapec_identity(), filename, str(folder), str(real), str(root), repr(carried), text)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _entry_path(key: str) -> Path:
    while True:
        try:
            return files.private_folder(files.cache_root() / "specs") / f"{key[:32]}.pickle"
        except files.CacheError:
            raise
        except OSError as err:
            files.move_cache(err)  # raises CacheError when already on the private folder


def _stored(entry: Path) -> CheckedSpec | None:
    data = files.read_private(entry)
    if data is None:
        return None
    try:
        found = pickle.loads(data)
    except Exception:  # a damaged entry (a crash mid-write cannot make one: writes are atomic) is a miss
        return None
    return found if isinstance(found, CheckedSpec) else None
