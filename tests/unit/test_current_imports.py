"""Guides and examples import from today's addresses (issue 55).

An old address still answers, with a DeprecationWarning and a date after which it stops
working: a reader who copies a guide should not learn it. The old addresses are read
from the shims themselves (``_MOVED`` of the package, the wrappers' ``__getattr__``), so
a name moved later is covered without touching this test. The pages' runnable blocks are
also run with DeprecationWarning as an error (tests/integration/test_docs_snippets.py);
this test covers every block, the examples' scripts and notebooks too, without running them.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRAPPERS = ("langchain", "llama_index", "chroma")
FENCE = re.compile(r"^[ \t]*```python[ \t]*\n(.*?)^[ \t]*```", re.S | re.M)


def old_addresses() -> set[tuple[str, str]]:
    """(module, name) pairs that only a deprecation shim answers."""
    from espew_integrations import _MOVED

    pairs = {("espew_integrations", name) for name in _MOVED}
    for wrapper in WRAPPERS:
        source = (ROOT / "espew_integrations" / f"{wrapper}.py").read_text(encoding="utf-8")
        shim = source[source.index("def __getattr__") :].split("\nclass ", 1)[0]
        assert "deprecated_address(" in shim, wrapper
        for name in re.findall(r'if name == "(\w+)"', shim):
            pairs.add((f"espew_integrations.{wrapper}", name))
    return pairs


def sources() -> dict[str, str]:
    """Python code a reader copies: the pages' blocks, the examples' scripts and cells."""
    found = {}
    pages = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("examples/**/*.md")]
    for page in pages:
        for i, block in enumerate(FENCE.findall(page.read_text(encoding="utf-8"))):
            found[f"{page.relative_to(ROOT)} block {i + 1}"] = block
    for script in ROOT.glob("examples/**/*.py"):
        found[str(script.relative_to(ROOT))] = script.read_text(encoding="utf-8")
    for notebook in ROOT.glob("examples/**/*.ipynb"):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "code":
                found[f"{notebook.relative_to(ROOT)} cell {i}"] = "".join(cell["source"])
    return found


def old_imports(code: str, old: set[tuple[str, str]]) -> list[str]:
    """``from M import N`` and ``M.N`` uses of an old address in ``code``."""
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return []  # a fragment: shown, not run
    used = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            used += [f"{node.module}.{a.name}" for a in node.names if (node.module, a.name) in old]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
            module = ast.unparse(node.value)
            if (module, node.attr) in old:
                used.append(f"{module}.{node.attr}")
    return used


def test_the_shims_are_found():
    old = old_addresses()
    assert ("espew_integrations.langchain", "MiniLMEmbeddings") in old
    assert ("espew_integrations.chroma", "MiniLMEmbeddingFunction") in old
    assert ("espew_integrations", "tokenize") in old


def test_no_guide_or_example_imports_an_old_address():
    old = old_addresses()
    code = sources()
    assert len(code) > 50 and any(".ipynb" in where for where in code)
    found = {where: used for where, text in code.items() if (used := old_imports(text, old))}
    assert not found, f"import these from their current address: {found}"


def test_an_old_import_is_caught():
    old = {("espew_integrations.langchain", "MiniLMEmbeddings")}
    code = (
        "from espew_integrations.langchain import ESpeWEmbeddings, MiniLMEmbeddings\n"
        "import espew_integrations.langchain\n"
        "m = espew_integrations.langchain.MiniLMEmbeddings()\n"
    )
    assert old_imports(code, old) == [
        "espew_integrations.langchain.MiniLMEmbeddings",
        "espew_integrations.langchain.MiniLMEmbeddings",
    ]
