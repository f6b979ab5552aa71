"""Import a trainer for an integration test, or skip naming the extra that installs it.

With SHAPEC_REQUIRE_INTEGRATION=1 (set by .ci/run) a missing trainer is a failure, not a skip.
"""

import importlib
import os

import pytest

REQUIRE = os.environ.get("SHAPEC_REQUIRE_INTEGRATION") == "1"


def need(module: str, extra: str, install: str | None = None):
    """`install`: the install command, where the extra alone does not bring the trainer."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        install = install or f"pip install -e '.[{extra}]'"
        message = f"needs {module} ({err}); install it with: {install}"
        if REQUIRE:
            pytest.fail(f"{message} (SHAPEC_REQUIRE_INTEGRATION=1: a skipped integration test fails)")
        pytest.skip(message, allow_module_level=True)
