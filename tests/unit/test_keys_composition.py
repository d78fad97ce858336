"""The key is built by composition (issue 52): the key room needs no escape from the type
checker, and the key and the ring are assembled from functions, not inherited mixins.

Parsed with :mod:`ast` and read as text (nothing imported), so it runs in the core-only
unit tier. A mixin reads fields of a class it cannot see, which is what made the key room
need a mypy override and ``type: ignore`` comments; both stay at zero.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
KEYS = REPOSITORY / "espew_integrations" / "core" / "keys"


def base_names(source: str, class_name: str) -> list[str]:
    """The base classes ``class_name`` names in ``source`` (dotted names as written)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return [ast.unparse(base) for base in node.bases]
    raise AssertionError(f"no class {class_name} in the source")


def test_base_names_reads_what_a_class_inherits():
    assert base_names("class K(Storage, mixins.Sealed): ...\n", "K") == [
        "Storage",
        "mixins.Sealed",
    ]
    assert base_names("class K: ...\n", "K") == []


def test_the_key_and_the_ring_inherit_nothing():
    assert base_names((KEYS / "key.py").read_text(encoding="utf-8"), "WatermarkKey") == []
    assert base_names((KEYS / "keyring.py").read_text(encoding="utf-8"), "KeyRing") == []


def test_the_key_room_has_no_type_ignore_and_no_mypy_override():
    ignored = [
        f"{path.name}:{number}"
        for path in sorted(KEYS.glob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "type: ignore" in line
    ]
    assert ignored == []
    assert mypy_overrides_of("espew_integrations.core.keys") == []


def mypy_overrides_of(prefix: str, text: str | None = None) -> list[str]:
    """The modules under ``prefix`` that a ``[[tool.mypy.overrides]]`` table of pyproject
    names (read as text: ``tomllib`` is not in Python 3.10's standard library)."""
    if text is None:
        text = (REPOSITORY / "pyproject.toml").read_text(encoding="utf-8")
    named = []
    for table in text.split("[[tool.mypy.overrides]]")[1:]:
        body = re.split(r"\n\[", table, maxsplit=1)[0]
        named += [m for m in re.findall(r'"([\w.*]+)"', body) if m.startswith(prefix)]
    return named


def test_mypy_overrides_of_finds_a_named_module():
    text = (
        '[tool.mypy]\n[[tool.mypy.overrides]]\nmodule = "pkg.keys.storage"\nx = ["a"]\n'
        '[tool.x]\ny = "pkg.keys.z"\n'
    )
    assert mypy_overrides_of("pkg.keys", text) == ["pkg.keys.storage"]
    assert mypy_overrides_of("pkg.keys", "[tool.mypy]\n") == []
