"""With SHAPEC_REQUIRE_INTEGRATION=1 every skip in tests/integration is reported as a failure."""

import pytest

from .require import REQUIRE


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped under SHAPEC_REQUIRE_INTEGRATION=1: {report.longrepr}"
