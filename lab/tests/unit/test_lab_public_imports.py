"""espew-lab imports only the public names of espew-integrations.

The lab is a distribution of its own, built on the plugin as any user builds on
it: every ``espew_integrations`` import of ``espew_lab`` (at load time, inside a
function or under ``TYPE_CHECKING`` alike) names the package root's ``__all__``
or a documented public module (a ``::: module`` page of docs/reference), and
from such a module only a name its ``__all__`` lists. No underscore module, no
underscore name, no undocumented module: the plugin may rearrange its insides
(the core's subpackages) without breaking the lab. Everything is read with
:mod:`ast`; nothing is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PACKAGE = "espew_integrations"
LAB_PACKAGE = REPO / "lab" / "espew_lab"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)


def module_file(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def literal_all(module: str) -> set[str] | None:
    """The module's literal ``__all__``, or None when it has none."""
    path = module_file(module)
    assert path is not None, f"{module} does not exist"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return set(ast.literal_eval(node.value))
    return None


def documented_modules() -> set[str]:
    """The modules docs/reference documents with a ``::: module`` directive."""
    found = set()
    for page in sorted((REPO / "docs" / "reference").glob("*.md")):
        for name in DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            if name.startswith(PACKAGE) and module_file(name) is not None:
                found.add(name)
    return found


def imports_of_the_plugin(source: str) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` of every absolute import of espew_integrations."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if _ours(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and _ours(node.module or ""):
            found += [(node.lineno, node.module or "", a.name) for a in node.names]
    return found


def _ours(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def violations(source: str, documented: set[str]) -> list[str]:
    wrong = []
    root_all = literal_all(PACKAGE) or set()
    for line, module, name in imports_of_the_plugin(source):
        where = f"line {line}: {module}" + (f" import {name}" if name else "")
        if module == PACKAGE:
            if name is not None and name not in root_all:
                wrong.append(f"{where}: not in {PACKAGE}.__all__")
            continue
        if any(part.startswith("_") for part in module.split(".")):
            wrong.append(f"{where}: a private module")
        elif module not in documented:
            wrong.append(f"{where}: not a documented public module (docs/reference)")
        elif name is not None and f"{module}.{name}" not in documented:
            public = literal_all(module)
            if name.startswith("_") or (public is not None and name not in public):
                wrong.append(f"{where}: not in {module}.__all__")
    return wrong


def test_the_lab_imports_only_public_names_of_the_plugin():
    documented = documented_modules()
    wrong = {
        str(path.relative_to(REPO)): found
        for path in sorted(LAB_PACKAGE.rglob("*.py"))
        if (found := violations(path.read_text(encoding="utf-8"), documented))
    }
    assert not wrong, (
        "espew_lab imports non-public names of espew_integrations (make the name public "
        f"at its owning module and document it in docs/reference): {wrong}"
    )


def test_the_lab_imports_the_plugin_at_all():
    """The scan reads real imports (a wrong path would pass by finding none)."""
    n = sum(
        len(imports_of_the_plugin(p.read_text(encoding="utf-8"))) for p in LAB_PACKAGE.rglob("*.py")
    )
    assert n >= 20


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("from espew_integrations import WatermarkKey", None),
        ("from espew_integrations import _MOVED", "not in espew_integrations.__all__"),
        ("from espew_integrations._optional import require", "a private module"),
        ("import espew_integrations._optional", "a private module"),
        ("from espew_integrations.core.keys.key import _digest", "not in espew_integrations.core"),
        ("from espew_integrations.core.keys.key import WatermarkKey", None),
        ("def f():\n    from espew_integrations.core.keys.key import _x", "not in"),
        ("from espew_integrations.no_such_doc import x", "not a documented public module"),
        ("from .cli import main", None),
    ],
)
def test_the_scan_catches_private_and_undocumented_imports(source, problem):
    found = violations(source, documented_modules())
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and problem in found[0], found
