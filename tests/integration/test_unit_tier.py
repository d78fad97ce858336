"""The unit tier passes where only the core's dependencies and the test tools are installed.

``tests/unit`` runs in a new pytest process under ``tests/core_only.py``, which refuses
every installed package outside numpy, scipy and the test tools, as an environment
without them would (third-party plugin autoloading off, so no plugin imports a framework
first). One run of the tier, a few dozen CPU-seconds: the price of a promise that nothing
else checks, since in this suite's own processes the frameworks are always importable.
The lab's unit tests (``test_lab_*``) need the lab's extra and are left out.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def _unit_items_collected_here(session: pytest.Session) -> int | None:
    """How many core unit tests this session collected, when it collected the whole tier."""
    items = [Path(item.path) for item in session.items]
    modules = {path for path in items if path.parent == UNIT}
    everything = {path for path in UNIT.glob("test_*.py") if not path.match(LAB_TESTS)}
    if modules != everything:
        return None  # this run selected part of the tier (or none): no count to compare
    return sum(path in everything for path in items)


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


def test_the_unit_tier_passes_with_only_the_core_s_dependencies(request):
    returncode, output = _run(COMMAND)
    assert returncode == 0, output[-6000:]
    assert "core_only: " in output  # the guard was on
    summary = output.strip().splitlines()[-1]
    assert re.fullmatch(r"=* ?\d+ passed(, \d+ warnings?)? in .*", summary), output[-3000:]
    expected = _unit_items_collected_here(request.session)
    if expected is not None:  # the same tests ran there as here: none lost to the guard
        assert int(summary.strip("= ").split()[0]) == expected, summary
