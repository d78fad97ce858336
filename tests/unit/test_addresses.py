"""One address per name (issue 52): below the package root, a public name lives in one module.

A reader who meets ``create_app`` should find one module that defines it, not three that
answer it. Only the package root (``espew_integrations/__init__.py``, and the lab's own
``espew_lab/__init__.py``) gathers the public API from elsewhere; below it:

- a module's public names are its ``__all__`` where it has one, else its top-level
  definitions (``def``, ``class``, assignment) whose names do not start with an underscore;
- every name in an ``__all__`` is defined in that module, never imported into it (a
  re-export is a second address);
- no public name is public in two modules, even for two different things (one of
  them is then renamed to say which it is).

Every module is parsed with :mod:`ast`, nothing is imported, so the test runs where only the
core's dependencies are installed (``tests/core_only.py``).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
#: The packages scanned, each as (the directory its name is relative to, its name).
PACKAGES = ((REPOSITORY, "espew_integrations"), (REPOSITORY / "lab", "espew_lab"))


@dataclass(frozen=True)
class Surface:
    """What one module defines at its top level, and which of those names it makes public."""

    defined: frozenset[str]
    public: frozenset[str]


def _assigned(node: ast.stmt) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [node.target]
    return []


def _top_level(body: Iterable[ast.stmt]) -> Iterable[ast.stmt]:
    """The module's statements, those under a top-level ``if``/``try`` included."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            yield from _top_level([*node.body, *node.orelse])
            if isinstance(node, ast.Try):
                yield from _top_level([s for h in node.handlers for s in h.body])
                yield from _top_level(node.finalbody)


def surface(source: str, module: str = "<source>") -> Surface:
    """The :class:`Surface` of one module's source text.

    >>> sorted(surface("__all__ = ['f']\\ndef f(): ...\\ndef g(): ...").public)
    ['f']
    """
    defined: set[str] = set()
    exported: list[str] | None = None
    for node in _top_level(ast.parse(source).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        for target in _assigned(node):
            names = [target] if isinstance(target, ast.Name) else []
            if isinstance(target, (ast.Tuple, ast.List)):
                names = [t for t in target.elts if isinstance(t, ast.Name)]
            for name in names:
                if name.id != "__all__":
                    defined.add(name.id)
                    continue
                value = node.value
                if not isinstance(value, (ast.List, ast.Tuple)) or not all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
                ):
                    raise ValueError(f"{module}: __all__ is not a literal list of strings")
                listed = [e.value for e in value.elts if isinstance(e, ast.Constant)]
                extended = isinstance(node, ast.AugAssign)
                exported = [*(exported or []), *listed] if extended else listed
    public = exported if exported is not None else [n for n in defined if not n.startswith("_")]
    return Surface(defined=frozenset(defined), public=frozenset(public))


@dataclass(frozen=True)
class Findings:
    """What breaks the rule: names exported but not defined, and names at several addresses."""

    imported: list[str]  # "module.name" for each name in an __all__ its module does not define
    crowded: dict[str, list[str]]  # name -> the modules where it is public, when two or more


def scan(sources: Mapping[str, str]) -> Findings:
    """Check the rule on ``sources`` (module name -> source text), the root left out."""
    addresses: dict[str, list[str]] = defaultdict(list)
    imported = []
    for module, source in sorted(sources.items()):
        found = surface(source, module)
        for name in sorted(found.public):
            addresses[name].append(module)
            if name not in found.defined:
                imported.append(f"{module}.{name}")
    crowded = {name: where for name, where in sorted(addresses.items()) if len(where) > 1}
    return Findings(imported=imported, crowded=crowded)


def package_sources(base: Path, package: str) -> dict[str, str]:
    """Every module of ``package`` but its root ``__init__.py``: module name -> source."""
    found = {}
    for path in sorted((base / package).rglob("*.py")):
        if path == base / package / "__init__.py":
            continue
        parts = path.relative_to(base).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[module] = path.read_text(encoding="utf-8")
    return found


# ------------------------------------------------------------------ the scan itself, on fakes


def test_a_module_without_all_makes_its_top_level_definitions_public():
    found = surface("import os\nfrom x import y\nA = 1\n_b = 2\ndef f(): ...\nclass C: ...\n")
    assert found.public == {"A", "f", "C"}
    assert "os" not in found.defined and "y" not in found.defined


def test_a_module_with_all_makes_only_its_all_public():
    found = surface("__all__ = ['f']\n__all__ += ['g']\ndef f(): ...\ndef g(): ...\ndef h(): ...\n")
    assert found.public == {"f", "g"}


def test_the_scan_finds_a_re_export():
    findings = scan({"pkg.a": "def f(): ...\n", "pkg.b": "from .a import f\n__all__ = ['f']\n"})
    assert findings.imported == ["pkg.b.f"]
    assert findings.crowded == {"f": ["pkg.a", "pkg.b"]}


def test_the_scan_finds_two_different_things_under_one_name():
    findings = scan({"pkg.a": "class Key: ...\n", "pkg.b": "Key = str\n", "pkg.c": "_Key = 1\n"})
    assert findings.imported == []
    assert findings.crowded == {"Key": ["pkg.a", "pkg.b"]}


def test_the_scan_passes_one_definition_imported_privately():
    findings = scan({"pkg.a": "def f(): ...\n", "pkg.b": "from .a import f\n\ndef g(): f()\n"})
    assert findings == Findings(imported=[], crowded={})


def test_an_all_the_scan_cannot_read_is_an_error():
    with pytest.raises(ValueError, match=r"pkg\.a: __all__ is not a literal"):
        surface("__all__ = names()\n", "pkg.a")


def test_a_package_is_read_without_its_root(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("from .sub.m import f\n__all__ = ['f']\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text('"""The sub package."""\n')
    (tmp_path / "pkg" / "sub" / "m.py").write_text("def f(): ...\n")
    assert sorted(package_sources(tmp_path, "pkg")) == ["pkg.sub", "pkg.sub.m"]


# ------------------------------------------------------------------ the packages


@pytest.mark.parametrize(("base", "package"), PACKAGES, ids=[p for _, p in PACKAGES])
def test_every_exported_name_is_defined_where_it_is_exported(base, package):
    sources = package_sources(base, package)
    assert len(sources) > 20  # the package was found
    imported = scan(sources).imported
    assert not imported, f"{len(imported)} names exported from a module that imports them: " + (
        ", ".join(imported)
    )


@pytest.mark.parametrize(("base", "package"), PACKAGES, ids=[p for _, p in PACKAGES])
def test_no_public_name_has_two_addresses_below_the_root(base, package):
    crowded = scan(package_sources(base, package)).crowded
    listed = "\n".join(f"  {name}: {', '.join(where)}" for name, where in crowded.items())
    assert not crowded, f"{len(crowded)} public names at two or more addresses:\n{listed}"


# ------------------------------------------------------------------ the importers

#: Where code that uses the packages lives; each file's absolute imports are checked.
IMPORTER_DIRS = ("espew_integrations", "lab", "tests", "benchmarks", "examples", "docs")


def wrong_addresses(
    importer: str, sources: Mapping[str, str], surfaces: dict[str, Surface] | None = None
) -> list[str]:
    """``from <module> import <name>`` lines in ``importer`` (source text) whose module is
    one of ``sources`` (module name -> source) but does not define the name.

    A name that is a submodule of the package imported from is an address too; the
    package roots (absent from ``sources``) and modules outside them are not checked.
    ``surfaces`` keeps each module's :class:`Surface` across calls, so a module imported
    from many files is parsed once.
    """
    surfaces = {} if surfaces is None else surfaces
    wrong = []
    for node in ast.walk(ast.parse(importer)):
        if not isinstance(node, ast.ImportFrom) or node.level or node.module not in sources:
            continue
        if node.module not in surfaces:
            surfaces[node.module] = surface(sources[node.module], node.module)
        found = surfaces[node.module]
        for alias in node.names:
            if alias.name not in found.defined and f"{node.module}.{alias.name}" not in sources:
                wrong.append(f"from {node.module} import {alias.name} (line {node.lineno})")
    return wrong


def test_an_import_through_a_module_that_does_not_define_the_name_is_found():
    sources = {"pkg.a": "def f(): ...\n", "pkg.b": "from .a import f\n", "pkg.sub": ""}
    importer = (
        "from pkg.b import f\nfrom pkg.a import f\nfrom pkg import sub\nfrom pkg.sub import a\n"
    )
    assert wrong_addresses(importer, sources) == [
        "from pkg.b import f (line 1)",
        "from pkg.sub import a (line 4)",
    ]


def test_every_import_names_the_module_that_defines_the_name():
    sources = {
        module: source
        for base, package in PACKAGES
        for module, source in package_sources(base, package).items()
    }
    wrong: list[str] = []
    surfaces: dict[str, Surface] = {}
    for directory in IMPORTER_DIRS:
        for path in sorted((REPOSITORY / directory).rglob("*.py")):
            if ".venv" in path.parts or "build" in path.parts:
                continue
            found = wrong_addresses(path.read_text(encoding="utf-8"), sources, surfaces)
            wrong += [f"{path.relative_to(REPOSITORY)}: {line}" for line in found]
    pages = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").rglob("*.md"))]
    for page in pages:  # the pages' Python blocks, which tests/integration runs as pasted
        for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            found = wrong_addresses(block, sources, surfaces)
            wrong += [f"{page.relative_to(REPOSITORY)}: {line}" for line in found]
    assert not wrong, f"{len(wrong)} imports through a second address:\n" + "\n".join(wrong)
