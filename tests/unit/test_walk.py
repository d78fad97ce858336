"""A key's walk through ``verify`` stays short: the functions it enters and their returns.

The walk is counted statically by ``benchmarks/walk_count.py`` (its docstring defines it:
the functions of ``core/verify.py``, ``core/audit/pipeline.py``, and those of
``core/audit/`` and ``core/designs/`` that a call hands the key, its design or the plan;
stays are those functions, returns their ``return`` statements). The ceilings are
today's walks: a change that lengthens one fails here, and a change that shortens one
lowers its ceiling.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "walk_count.py"
_SPEC = importlib.util.spec_from_file_location("walk_count", _SCRIPT)
assert _SPEC and _SPEC.loader
walk_count = importlib.util.module_from_spec(_SPEC)
sys.modules["walk_count"] = walk_count  # dataclasses resolve the module by name
_SPEC.loader.exec_module(walk_count)

#: (stays, returns) at most, per design. The default design's stays are within the
#: issue's ceiling of 22.
CEILINGS = {"map": (19, 25), "field": (20, 26), "words": (25, 30)}
#: The module tour's (stays, returns to a module already visited) at most, per design.
TOUR_CEILINGS = {"map": (31, 20), "field": (33, 21), "words": (39, 26)}


@pytest.mark.parametrize("design", sorted(CEILINGS))
def test_a_keys_walk_through_verify_stays_within_its_ceiling(design):
    found = walk_count.walk(design)
    stays, returns = CEILINGS[design]
    walked = "\n".join(f"  {f} ({n})" for f, n in found.steps)
    assert found.stays <= stays and found.returns <= returns, (
        f"{design}: {found.stays} stays / {found.returns} returns, ceiling {stays} / "
        f"{returns}:\n{walked}"
    )


@pytest.mark.parametrize("design", sorted(TOUR_CEILINGS))
def test_a_keys_module_tour_stays_within_its_ceiling(design):
    found = walk_count.walk(design)
    stays, returns = TOUR_CEILINGS[design]
    assert found.module_stays <= stays and found.module_returns <= returns, found.tour


def test_the_default_designs_walk_is_at_most_22_stays():
    assert walk_count.walk("map").stays <= 22


def test_the_walk_goes_from_verify_through_the_pipeline_to_the_designs_decision():
    names = [str(f) for f, _ in walk_count.walk("map").steps]
    assert names[:2] == ["verify.verify_callable", "audit.pipeline.run_audit"]
    assert {"designs.map.MapDesign.plan", "designs.map.MapDesign.decide"} <= set(names)
    assert "audit.asking.interrogate" in names
    assert "audit.subject.audit_subject" not in names  # handed neither key, design nor plan


def _walker(sources: dict[str, str], tmp_path: Path) -> list[str]:
    root = tmp_path / "espew_integrations"
    for name, source in sources.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    found = walk_count.walk("toy", root=root)
    return [f"{f} ({n})" for f, n in found.steps]


def test_the_walk_follows_the_key_its_design_and_the_plan_only(tmp_path):
    """A toy package: calls handed the key are followed, others are not; the design's
    methods are resolved through its class; each function is entered once."""
    sources = {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/audit/__init__.py": "",
        "core/designs/__init__.py": "",
        "core/verify.py": (
            "from .audit.pipeline import run\n"
            "def verify_callable(suspect, key):\n    return run(suspect, key)\n"
        ),
        "core/audit/pipeline.py": (
            "from .steps import ask, log\n"
            "def run(suspect, key):\n"
            "    log(suspect)\n"
            "    plan = key.design.plan(key)\n"
            "    answers = ask(suspect, plan)\n"
            "    ask(suspect, plan)\n"
            "    return key.design.decide(key, answers)\n"
        ),
        "core/audit/steps.py": (
            "def log(suspect):\n    return 1\n"
            "def ask(suspect, p):\n    if not p:\n        return None\n    return suspect(p)\n"
        ),
        "core/designs/toy.py": (
            "class Base:\n"
            "    def decide(self, key, answers):\n        return self.rule(answers)\n"
            "class Toy(Base):\n"
            "    name = 'toy'\n"
            "    def plan(self, key):\n        return [key]\n"
            "    def rule(self, answers):\n        def inner():\n            return 0\n"
            "        return answers\n"
        ),
    }
    assert _walker(sources, tmp_path) == [
        "verify.verify_callable (1)",
        "audit.pipeline.run (1)",
        "designs.toy.Toy.plan (1)",
        "audit.steps.ask (2)",
        "designs.toy.Base.decide (1)",
        "designs.toy.Toy.rule (1)",
    ]


def test_returns_count_the_functions_own_return_statements():
    tree = ast.parse(
        "def f(x):\n    if x:\n        return 1\n    g = lambda: 2\n"
        "    def h():\n        return 3\n    return 4\n"
    )
    assert walk_count.returns(tree.body[0]) == 2
