"""A pytest plugin that lets a run import only what an install of the bare core has.

``tests/unit`` promises to run where only the core's dependencies (numpy, scipy) and
the test tools (pytest, pytest-xdist, hypothesis) are installed. This plugin makes a
full development environment behave like that one: from the moment it loads, importing
any other top-level package raises ``ModuleNotFoundError``, exactly as it would there, so
optional fallbacks (``try: import platformdirs``) take their core-only path and anything
else fails the test that needed it. Run it with third-party plugin autoloading off, so
that no plugin imports a framework before it loads (a package already imported cannot be
refused)::

    PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest tests/unit -p tests.core_only -p xdist

(``make test-fast``; ``tests/integration/test_unit_tier.py`` runs it in every ``make
test``). The allowed packages are computed, not listed: the standard library, this
repository's two packages, and every distribution that numpy, scipy and the test tools
require, recursively, as their installed metadata declares them.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import sys
import sysconfig
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

import pytest
from packaging.requirements import Requirement

#: What a core-only test environment installs: the core's dependencies and the test tools.
ROOTS = ("numpy", "scipy", "pytest", "pytest-xdist", "hypothesis")
#: This repository's own top-level packages, importable from its root.
OWN = ("espew_integrations", "tests")
#: What ``site`` imports from ``.pth`` files at start-up in any venv (setuptools' shim, an
#: editable install's finder, virtualenv's patch): there before any test, used by none.
SITE_HOOKS = ("_distutils_hack", "__editable__", "_virtualenv")


def _closure(roots: Sequence[str]) -> set[str]:
    """The distributions ``roots`` need on this interpreter, themselves included."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional dependency that is not installed: nothing to allow
        seen.add(name)
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def allowed_packages() -> frozenset[str]:
    """Top-level import names available in the core-only environment."""
    distributions = _closure(ROOTS)
    names = {
        package
        for package, owners in importlib.metadata.packages_distributions().items()
        if any(owner.lower().replace("_", "-") in distributions for owner in owners)
    }
    return frozenset(names | set(sys.stdlib_module_names) | set(OWN) | {"__main__"})


class CoreOnlyFinder(importlib.abc.MetaPathFinder):
    """Stands in for every other finder and finds no installed package outside ``allowed``.

    A refused package is not found at all (``find_spec`` answers None, ``import`` raises
    ``ModuleNotFoundError``), as where it is not installed, rather than found and made
    to fail: code that looks before it imports takes its core-only path, as it would.
    What no installed distribution provides and site-packages does not hold (the
    standard library, this repository, a module a test writes to a temporary directory)
    is found as usual.
    """

    def __init__(self, allowed: frozenset[str], finders: Sequence[Any]) -> None:
        self.allowed = set(allowed)
        # Names an installed distribution provides, wherever it lives (an editable install
        # of another distribution of this repository is refused too).
        self.distributed = frozenset(importlib.metadata.packages_distributions())
        self.finders = list(finders)
        self.refused: dict[str, str] = {}  # top-level name -> the first test that asked
        self.current = "(collection)"
        paths = sysconfig.get_paths()
        self._site = tuple({paths["purelib"], paths["platlib"]})

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        for finder in self.finders:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        top = fullname.partition(".")[0]
        installed = top in self.distributed or self._installed_package(spec)
        if top in self.allowed or not installed:
            return spec  # the core's own, the standard library's, or a test's module file
        self.refused.setdefault(top, self.current)
        return None

    def invalidate_caches(self) -> None:
        for finder in self.finders:
            if hasattr(finder, "invalidate_caches"):
                finder.invalidate_caches()

    def _installed_package(self, spec: ModuleSpec) -> bool:
        """Whether ``spec`` is a distribution's, installed in site-packages."""
        places = [spec.origin or "", *(spec.submodule_search_locations or ())]
        return any(str(place).startswith(self._site) for place in places)


def _install() -> CoreOnlyFinder:
    allowed = allowed_packages()
    present = sorted(
        top
        for top in {name.partition(".")[0] for name in sys.modules} - allowed
        if not top.startswith(SITE_HOOKS)
    )
    if present:
        raise RuntimeError(
            f"core_only: {present} were imported before the plugin loaded; run pytest with "
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 so that no third-party plugin imports them"
        )
    finder = CoreOnlyFinder(allowed, sys.meta_path)
    sys.meta_path[:] = [finder]
    return finder


FINDER = _install()


def pytest_runtest_setup(item: pytest.Item) -> None:
    FINDER.current = item.nodeid


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say that the guard was on, and name what it refused and where first: the cause of a
    failure, or an optional fallback the core took."""
    refused = ", ".join(f"{top} ({where})" for top, where in sorted(FINDER.refused.items()))
    terminalreporter.write_line(
        f"core_only: {len(FINDER.allowed)} top-level names importable; "
        f"installed but refused: {refused or 'none asked for'}"
    )
