"""Import a trainer for an integration test, or skip naming the extra that installs it.

With SHAPEC_REQUIRE_INTEGRATION=1 (set by .ci/run) a missing trainer is a failure, not a skip.
"""

import importlib
import os

import pytest

REQUIRE = os.environ.get("SHAPEC_REQUIRE_INTEGRATION") == "1"


def need(module: str, extra: str):
    try:
        return importlib.import_module(module)
    except ImportError as err:
        message = f"needs {module} ({err}); install it with: pip install -e '.[{extra}]'"
        if REQUIRE:
            pytest.fail(f"{message} (SHAPEC_REQUIRE_INTEGRATION=1: a skipped integration test fails)")
        pytest.skip(message, allow_module_level=True)
