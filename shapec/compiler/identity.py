"""What decides compiled code besides the spec: shapec itself, and the machine and numba it runs on.

Both stores key their entries with these (store.py, spec_store.py). Neither imports numba or numpy,
so `shapec check` (which imports the spec store through the API) stays light.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import platform
import sys
from pathlib import Path

@functools.cache
def shapec_identity() -> str:
    """shapec's version and the digest of its sources and grammar: the code that decides a kernel."""
    from .. import __version__

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(__version__.encode())
    for path in sorted([*root.rglob("*.py"), *root.glob("grammar/*.lark")]):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def host_identity() -> str:
    """numba's and Python's versions and this machine's CPU."""
    text = f"{importlib.metadata.version('numba')}\0{sys.version}\0{platform.machine()}"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith(("model name", "flags", "Features", "CPU part")):
                text += line
            elif not line.strip():
                break  # the first processor describes them all
    return hashlib.sha256(text.encode()).hexdigest()
