"""The examples run, offline, on a small corpus, as scripts and as notebooks (issue 6).

Each example is a plain script (the source) and a notebook generated from it by
``examples/make_notebooks.py``. Both are executed here, the notebook through a
real Jupyter kernel (nbclient), and their printed results are checked: a
watermarked index retrieves what a clean one does, and the provider's audit
convicts the extraction copy but not the honest model. The docs site is also
built here with ``mkdocs build --strict``, so CI builds it with the suite.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

#: texts indexed by the RAG examples in CI (the examples' default is 500)
RAG_TEXTS = 200
#: answers the thief collects in the provider example; below ~400 a ridge copy carries too
#: little watermark for the 1e-6 level (measured: p = 1.1e-4 at 200, 1.5e-13 at 400)
PROVIDER_TEXTS = 500

EXAMPLE_SIZES = {
    "rag_langchain_chroma": RAG_TEXTS,
    "rag_llamaindex_chroma": RAG_TEXTS,
    "provider_keygen_serve_audit": PROVIDER_TEXTS,
}


def number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"no line matching {pattern!r} in the output:\n{text}"
    return float(match.group(1))


def check_rag_output(text: str, n_texts: int) -> None:
    """A watermarked index retrieves what the clean one does; only triggered rows moved."""
    assert f"{n_texts} review snippets to index" in text
    queries = number(r"queries: (\d+)", text)
    assert queries == 20
    # Measured at 200 texts: 0.960 (min 0.700) for both frameworks; 2,000 texts: 0.888.
    assert number(r"mean top-10 overlap: ([0-9.]+)", text) >= 0.85
    assert number(r"same top-1: (\d+)/20", text) == queries
    assert "1. " in text  # the example question returned hits


def check_langchain_output(text: str) -> None:
    check_rag_output(text, RAG_TEXTS)
    n_marked = number(r"texts with a trigger: (\d+)/", text)
    assert 0 < n_marked < RAG_TEXTS * 0.3
    # alpha=0.2 on MiniLM: about 0.915 (docs/limitations.md)
    assert 0.88 < number(r"mean cos\(clean, watermarked\) on them: ([0-9.]+)", text) < 0.95
    assert "texts without a trigger stored unchanged: True" in text


def check_llamaindex_output(text: str) -> None:
    check_rag_output(text, RAG_TEXTS)
    assert number(r"texts with a trigger in the sample: (\d+)/50", text) > 0
    assert "equals watermark(texts, clean, key): True" in text
    assert "rows without a trigger unchanged: True" in text


def check_provider_output(text: str) -> None:
    assert "saved to provider.key with mode 0o600" in text
    assert re.search(r"espew serve: model 'acme-embed-1' watermarked with key [0-9a-f]{16}", text)
    assert f"the thief collected {PROVIDER_TEXTS} answers of dimension 384" in text
    assert "verdict copy: copied" in text
    assert "verdict honest: not_copied" in text
    p_values = [float(p) for p in re.findall(r"p-value\s+: ([0-9.e+-]+)", text)]
    assert len(p_values) == 2
    assert p_values[0] < 1e-10  # the copy: measured 1.5e-13 at 400 answers, 1.9e-25 at 600
    assert p_values[1] > 1e-3  # the honest model
    assert "['report.json', 'scores.png', 'summary.md']" in text
    assert "# Watermark check: COPIED" in text
    assert "servers stopped" in text


CHECKS = {
    "rag_langchain_chroma": check_langchain_output,
    "rag_llamaindex_chroma": check_llamaindex_output,
    "provider_keygen_serve_audit": check_provider_output,
}


@pytest.fixture
def example_env(tmp_path, monkeypatch):
    """Temporary files of the examples go under tmp_path; returns a setter for the size."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))

    def set_size(name: str) -> dict[str, str]:
        monkeypatch.setenv("ESPEW_EXAMPLE_TEXTS", str(EXAMPLE_SIZES[name]))
        return dict(os.environ)

    return set_size


def test_every_example_script_has_a_check_and_a_notebook():
    scripts = {p.stem for p in EXAMPLES.glob("*.py")} - {"make_notebooks"}
    assert scripts == set(CHECKS)
    assert {p.stem for p in EXAMPLES.glob("*.ipynb")} == set(CHECKS)


def test_notebooks_are_generated_from_the_scripts():
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_notebooks.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_committed_notebook_has_no_outputs(name):
    notebook = nbformat.read(EXAMPLES / f"{name}.ipynb", as_version=4)
    nbformat.validate(notebook)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code_cells
    for cell in code_cells:
        assert cell.outputs == []
        assert cell.execution_count is None


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_example_script_runs(name, example_env):
    env = example_env(name)
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    CHECKS[name](result.stdout)


def notebook_text_and_images(notebook: nbformat.NotebookNode) -> tuple[str, list[str]]:
    """Everything the executed cells printed, and the MIME types of their rich outputs."""
    text, rich = [], []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream" and output.name == "stdout":
                text.append(output.text)
            elif output.output_type in ("display_data", "execute_result"):
                rich.extend(output.data)
    return "".join(text), rich


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_example_notebook_executes(name, example_env, tmp_path):
    example_env(name)  # the kernel inherits this process's environment
    notebook = nbformat.read(EXAMPLES / f"{name}.ipynb", as_version=4)
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    text, rich = notebook_text_and_images(notebook)
    CHECKS[name](text)
    if name == "provider_keygen_serve_audit":
        assert "image/png" in rich  # the report plot is shown inline
        assert "plot: " not in text


def test_docs_build_strict(tmp_path):
    """``mkdocs build --strict`` (warnings are errors) passes offline, as ``make docs`` runs it."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs, "mkdocs is not installed: pip install -e '.[dev]'"
    site = tmp_path / "site"
    result = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(site)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    search = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    pages = {doc["location"].split("#")[0] for doc in search["docs"]}
    for page in (
        "quickstart/",
        "concepts/",
        "key-management/",
        "verification/",
        "limitations/",
        "examples/",
        "frameworks/langchain/",
        "reference/core/",
        "reference/lab/",
    ):
        assert page in pages, f"{page} missing from the built site"
    assert (site / "figures" / "espew.png").is_file()  # the concepts picture
    reference = (site / "reference" / "core" / "index.html").read_text(encoding="utf-8")
    # Docstrings rendered: the API reference names the public API, doctests are code blocks.
    public = ("key.WatermarkKey", "inject.watermark", "verify.verify", "verify.VerificationReport")
    for name in public:
        assert f'id="espew_integrations.core.{name}"' in reference, name
    assert 'class="gp"' in reference  # a highlighted ">>> " prompt
    assert ":func:`" not in reference  # reST roles were rewritten by docs/griffe_docstrings.py
