"""The guard that keeps the unit tier pure is not a no-op.

``make test`` and ``make test-fast`` run ``tests/unit`` once under ``tests/core_only.py``,
which refuses every installed package outside numpy, scipy and the test tools, as an
environment without them would (third-party plugin autoloading off, so no plugin imports
a framework first): a unit test that imports a framework fails there. This file proves
the guard itself: under it, a test that imports httpx fails and the core loads.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support import REPO

UNIT = REPO / "tests" / "unit"
LAB_TESTS = "test_lab_*.py"
COMMAND = [
    sys.executable,
    "-m",
    "pytest",
    "tests/unit",
    "-p",
    "tests.core_only",
    "-p",
    "no:cacheprovider",
    f"--ignore-glob=tests/unit/{LAB_TESTS}",
    "-q",
    "-rfEs",
]


def _run(command: list[str]) -> tuple[int, str]:
    done = subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    return done.returncode, done.stdout + done.stderr


GUARDED = """
import importlib.util
import numpy, scipy.stats  # the core's dependencies

def test_a_framework_is_not_installed_here():
    assert importlib.util.find_spec("httpx") is None  # looked up: absent, as it would be
    import httpx  # imported: ModuleNotFoundError, this test's failure

def test_the_core_and_its_dependencies_are():
    import espew_integrations, tests.support
    assert espew_integrations.WatermarkKey and tests.support.make_key and numpy and scipy
"""


def test_the_guard_refuses_a_framework_and_allows_the_core(tmp_path):
    """The guard is not a no-op: a test that imports httpx fails under it, the core loads."""
    (tmp_path / "test_guarded.py").write_text(GUARDED)
    returncode, output = _run([*COMMAND[:3], str(tmp_path), *COMMAND[4:]])
    assert returncode == 1, output[-3000:]
    assert "1 failed, 1 passed" in output, output[-3000:]
    assert "No module named 'httpx'" in output
    first_asked_by = r"refused: .*httpx \(\S*::test_a_framework_is_not_installed_here\)"
    assert re.search(first_asked_by, output), output[-3000:]
