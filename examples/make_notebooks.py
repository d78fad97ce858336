"""Build each example notebook from its plain script, so the two never drift apart.

The scripts are the source of truth. They use the "percent" cell format that
VS Code, Spyder and Jupytext understand: a line ``# %%`` starts a code cell and
``# %% [markdown]`` starts a Markdown cell whose lines are comments (``# text``).
This tool turns every such script in ``examples/`` into an ``.ipynb`` with no
outputs and no execution counts, which is how notebooks are committed.

    python examples/make_notebooks.py           # rewrite the notebooks
    python examples/make_notebooks.py --check   # exit 1 if a notebook is stale

``tests/integration/test_examples.py`` runs ``--check``, so a script edited without
regenerating its notebook fails the suite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

EXAMPLES = Path(__file__).resolve().parent
CELL_MARKER = "# %%"
MARKDOWN_MARKER = "# %% [markdown]"


def example_scripts(directory: Path = EXAMPLES) -> list[Path]:
    """The example scripts: every ``.py`` in ``directory`` that contains cell markers."""
    return sorted(
        path
        for path in directory.glob("*.py")
        if path.name != Path(__file__).name
        and any(line.startswith(CELL_MARKER) for line in path.read_text("utf-8").splitlines())
    )


def _markdown_source(lines: list[str]) -> str:
    out = []
    for line in lines:
        if line in ("#", ""):
            out.append("")
        elif line.startswith("# "):
            out.append(line[2:])
        else:
            raise ValueError(f"a Markdown cell line must start with '# ', got {line!r}")
    return "\n".join(out).strip("\n")


def script_to_notebook(source: str) -> nbformat.NotebookNode:
    """Split a percent-format script into notebook cells (text before the first marker is dropped).

    >>> nb = script_to_notebook("# %% [markdown]\\n# # Title\\n\\n# %%\\nprint(1)\\n")
    >>> [cell.cell_type for cell in nb.cells]
    ['markdown', 'code']
    """
    cells: list[tuple[str, list[str]]] = []
    for line in source.splitlines():
        if line.startswith(MARKDOWN_MARKER):
            cells.append(("markdown", []))
        elif line.startswith(CELL_MARKER):
            cells.append(("code", []))
        elif cells:
            cells[-1][1].append(line)
    if not cells:
        raise ValueError("the script has no '# %%' cell markers")
    notebook = nbformat.v4.new_notebook()
    notebook.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    for index, (kind, lines) in enumerate(cells):
        # Stable ids keep regenerated notebooks byte-identical (nbformat would draw random ones).
        cell_id = f"cell-{index:02d}"
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(_markdown_source(lines), id=cell_id)
        else:
            cell = nbformat.v4.new_code_cell("\n".join(lines).strip("\n"), id=cell_id)
        notebook.cells.append(cell)
    nbformat.validate(notebook)
    return notebook


def notebook_text(script: Path) -> str:
    """The committed text of the notebook built from ``script``."""
    return nbformat.writes(script_to_notebook(script.read_text("utf-8"))) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale notebooks")
    args = parser.parse_args(argv)
    stale = []
    for script in example_scripts():
        target = script.with_suffix(".ipynb")
        text = notebook_text(script)
        if target.exists() and target.read_text("utf-8") == text:
            continue
        stale.append(target)
        if not args.check:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(EXAMPLES.parent)}")
    if args.check and stale:
        names = ", ".join(str(p.relative_to(EXAMPLES.parent)) for p in stale)
        print(f"stale notebooks: {names}; run python examples/make_notebooks.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
