"""Every ```python block in README.md and docs/ runs as pasted (issue 14).

The blocks of one page run in order, in ONE fresh interpreter (a subprocess of this
Python), in an empty temporary folder, with the real offline model: what a reader gets
who pastes a page top to bottom into one session. A block may opt out only with a
visible ``<!-- not run: reason -->`` line right before its fence; those are listed as
warnings in the test output, and at least 85% of all blocks must run.

Each page's pip line is checked too: every extra it names exists in pyproject.toml, and
together with the packages it names it covers every import on the page (the
distribution of each third-party module, and the extra each ``espew_integrations``
module needs). A page that needs the offline corpora shows the command that installs
them.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the copy pip carries
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "espew-integrations"
MIN_RUN_SHARE = 0.85
PAGE_TIMEOUT_S = 900

# What an espew_integrations module needs beyond the core (numpy + scipy): an extra, or
# "data" (the offline corpora, which a page must show how to get).
MODULE_NEEDS = {
    "espew_integrations.langchain": "langchain",
    "espew_integrations.llama_index": "llama-index",
    "espew_integrations.chroma": "chroma",
    "espew_integrations.http": "http",
    "espew_integrations.offline.embedders": "minilm",
    "espew_integrations.offline.corpora": "data",
}
# Names that the top-level package re-exports from a module that needs an extra.
NAME_NEEDS = {"OpenAIEndpoint": "http"}
# The robustness lab is a distribution of its own (lab/): a page installs it from the
# checkout, `pip install ./lab` (or './lab[torch]'), which installs espew-lab.
LAB_CHECKOUT, LAB_DISTRIBUTION = "./lab", "espew-lab"
# How a page shows the offline corpora's install (the data wheels, without their deps).
DATA_COMMAND = re.compile(r"espew data install\b")

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*$")
NOT_RUN = re.compile(r"^[ \t]*<!--[ \t]*not run:[ \t]*(?P<reason>\S.*?)[ \t]*-->[ \t]*$")
PIP_LINE = re.compile(r"pip install\s+([^`\n]+)")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # 1-based line of the first code line in the page
    source: str
    skip_reason: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def page_paths() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks(path: Path) -> list[Block]:
    """The page's ```python blocks, dedented, each with the reason it is not run, if any."""
    return python_blocks_of(path, ROOT)


def python_blocks_of(path: Path, root: Path) -> list[Block]:
    """:func:`python_blocks` of a page under ``root``, named relative to it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(root).as_posix()
    blocks, i = [], 0
    while i < len(lines):
        opened = FENCE_OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        indent = opened["indent"]
        start, j = i + 1, i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        if j == len(lines):
            raise AssertionError(f"{page}:{i + 1}: ```python fence is never closed")
        body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[start:j]]
        before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = NOT_RUN.match(before)
        blocks.append(
            Block(page, start + 1, "\n".join(body) + "\n", marker["reason"] if marker else None)
        )
        i = j + 1
    return blocks


def pages_with_blocks() -> list[Path]:
    return [p for p in page_paths() if python_blocks(p)]


def page_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# The runner: executes the blocks in one namespace, as one pasted session. Blocks are
# compiled under the page's own path, padded so that tracebacks name the page's lines.
RUNNER = r"""
import json, sys, traceback, warnings
# A page teaches nothing that is on its way out: a DeprecationWarning the page's own code
# sets off (an old import address, a renamed argument) stops the page. Third-party
# packages' own deprecations inside their code are theirs (pyproject's filterwarnings).
warnings.filterwarnings("error", category=DeprecationWarning)
for noisy in THIRD_PARTY_DEPRECATIONS:
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=noisy)
blocks = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
for block in blocks:
    print(f"\n===== {block['where']} =====", flush=True)
    code = compile("\n" * (block["line"] - 1) + block["source"], block["path"], "exec")
    try:
        exec(code, namespace)
    except BaseException:
        traceback.print_exc()
        print(f"\nBLOCK FAILED: {block['where']}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.stdout.flush()
print("\nALL BLOCKS RAN", flush=True)
"""


#: Modules whose own DeprecationWarnings the runner lets pass (as pyproject's
#: filterwarnings does for the suite): raised inside those packages, not by a page.
THIRD_PARTY = (r"chromadb(\..*)?", r"pydantic(\..*)?")
RUNNER = RUNNER.replace("THIRD_PARTY_DEPRECATIONS", repr(THIRD_PARTY))


def fresh_user_env() -> dict[str, str]:
    """A fresh user's environment: no key variable left over from the caller.

    The run's embedding store (``ESPEW_EMBED_CACHE``, tests/conftest.py) stays: it
    changes no vector (tests/integration/test_embedding_store.py) and spares each
    page embedding again the corpus texts other tests already embedded.
    """
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ESPEW_") or k == "ESPEW_EMBED_CACHE"
    }


STAND_IN_MODEL = "text-embedding-3-small"


@contextlib.contextmanager
def openai_stand_in(tmp_path: Path) -> Iterator[str]:
    """A local OpenAI-compatible endpoint serving the offline MiniLM as STAND_IN_MODEL."""
    log = (tmp_path / "stand-in.log").open("w")
    serve = ["serve", "--embedder", "minilm", "--model-name", STAND_IN_MODEL, "--port", "0"]
    serve.append("--no-watermark")  # a stand-in for someone else's clean service
    proc = subprocess.Popen(
        [sys.executable, "-m", "espew_integrations.cli", *serve],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://\S+/v1)", line)
        assert match, f"the stand-in did not start: {line!r}"
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def run_blocks(
    page: Path, blocks: list[Block], tmp_path: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The blocks run by RUNNER in one fresh interpreter, in an empty folder under ``tmp_path``."""
    spec = tmp_path / "blocks.json"
    spec.write_text(
        json.dumps(
            [
                {"where": b.where, "line": b.line, "source": b.source, "path": str(page)}
                for b in blocks
            ]
        ),
        encoding="utf-8",
    )
    work = tmp_path / "work"  # the reader's empty folder
    work.mkdir()
    return subprocess.run(
        [sys.executable, "-c", RUNNER, str(spec)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT_S,
    )


@pytest.mark.parametrize("page", pages_with_blocks(), ids=page_id)
def test_page_runs_as_pasted(page: Path, tmp_path: Path):
    blocks = python_blocks(page)
    for block in blocks:
        if block.skip_reason:
            warnings.warn(f"not run: {block.where}: {block.skip_reason}", stacklevel=1)
    to_run = [b for b in blocks if not b.skip_reason]
    if not to_run:
        pytest.skip(f"every block on {page_id(page)} is marked not run")
    env = fresh_user_env()
    env.pop("PYTHONPATH", None)
    with contextlib.ExitStack() as stack:
        if any("langchain_openai" in b.source for b in to_run):
            # The production-embedder blocks reach OpenAI through the environment; here a
            # local `espew serve` of the offline model stands in for it.
            env["OPENAI_BASE_URL"] = stack.enter_context(openai_stand_in(tmp_path))
            env["OPENAI_API_KEY"] = "sk-local-stand-in"
        done = run_blocks(page, to_run, tmp_path, env)
    assert done.returncode == 0, (
        f"{page_id(page)}: a block failed\n--- stdout (tail)\n{done.stdout[-4000:]}"
        f"\n--- stderr (tail)\n{done.stderr[-6000:]}"
    )
    assert done.stdout.rstrip().endswith("ALL BLOCKS RAN"), done.stdout[-2000:]


def test_a_block_with_a_deprecated_import_fails_the_page(tmp_path: Path):
    """The old address of the LangChain demo model warns; on a page that warning is an error."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nfrom espew_integrations.langchain import MiniLMEmbeddings\n```\n",
        encoding="utf-8",
    )
    env = fresh_user_env()
    env.pop("PYTHONPATH", None)
    done = run_blocks(page, python_blocks_of(page, tmp_path), tmp_path, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DeprecationWarning" in done.stderr and "stops working after" in done.stderr
    assert "BLOCK FAILED" in done.stderr


def test_at_least_85_percent_of_blocks_run():
    blocks = [b for p in page_paths() for b in python_blocks(p)]
    skipped = [b for b in blocks if b.skip_reason]
    for block in skipped:
        warnings.warn(f"not run: {block.where}: {block.skip_reason}", stacklevel=1)
    assert len(blocks) >= 10, f"only {len(blocks)} python blocks found: is the parser broken?"
    share = 1 - len(skipped) / len(blocks)
    assert share >= MIN_RUN_SHARE, (
        f"only {share:.0%} of {len(blocks)} blocks run; not run: "
        + "; ".join(f"{b.where} ({b.skip_reason})" for b in skipped)
    )


def test_the_parser_sees_markers_and_indented_fences(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- not run: needs a live suspect -->\n```python\nx = 1\n```\n\n"
        "- item\n\n    ```python\n    y = 2\n    ```\n\n```bash\nz\n```\n",
        encoding="utf-8",
    )
    blocks = python_blocks(page)
    assert [(b.line, b.source, b.skip_reason) for b in blocks] == [
        (5, "x = 1\n", "needs a live suspect"),
        (11, "y = 2\n", None),
    ]


# --- the pip line of each page -----------------------------------------------------------


@cache
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def requirement_names(reqs: list[str], extra: str = "") -> set[str]:
    """Distribution names of requirement strings whose marker holds for ``extra``."""
    names = set()
    for text in reqs:
        req = Requirement(text)
        if req.marker and not req.marker.evaluate({"extra": extra}):
            continue
        names.add(canonicalize_name(req.name))
        if canonicalize_name(req.name) == PROJECT:
            names |= project_closure(frozenset(req.extras))
    return names


@cache
def project_closure(extras: frozenset[str]) -> set[str]:
    """The project's direct requirements with these extras (its own extras expanded)."""
    project = pyproject()["project"]
    names = requirement_names(project["dependencies"])
    optional = project["optional-dependencies"]
    for extra in extras:
        names |= requirement_names(optional[extra])
    return names - {PROJECT}


@cache
def expand_extras(extras: frozenset[str]) -> set[str]:
    """The extras named and those they pull in (``cli`` brings ``minilm`` and ``http``)."""
    optional = pyproject()["project"]["optional-dependencies"]
    seen, todo = set(), list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen or extra not in optional:
            continue
        seen.add(extra)
        for text in optional[extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == PROJECT:
                todo.extend(req.extras)
    return seen


@cache
def installed_closure(name: str) -> frozenset[str]:
    """A distribution and everything it requires, from the installed metadata."""
    seen, todo = set(), [canonicalize_name(name)]
    while todo:
        dist = todo.pop()
        if dist in seen:
            continue
        seen.add(dist)
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        todo.extend(requirement_names(requires) - seen)
    return frozenset(seen)


def pip_lines(text: str) -> list[str]:
    return [m.group(1).strip() for m in PIP_LINE.finditer(text)]


def named_on_pip_lines(lines: list[str]) -> tuple[set[str], set[str]]:
    """(extras of this project, other packages) that the page's pip lines install."""
    extras, packages = set(), set()
    for line in lines:
        for token in line.split("#")[0].split():
            token = token.strip("'\"\\")
            if not token or token.startswith("-") or "://" in token:
                continue
            base, _, rest = token.partition("[")
            names = {e.strip() for e in rest.rstrip("]").split(",") if e.strip()}
            if base.rstrip("/") == LAB_CHECKOUT:
                packages.add(LAB_DISTRIBUTION)
            elif base in (".", PROJECT) or canonicalize_name(base) == PROJECT:
                extras |= names
            elif re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*", base):
                packages.add(canonicalize_name(re.split(r"[<>=!~;]", base)[0]))
    return extras, packages


def page_imports(blocks: list[Block]) -> tuple[set[str], set[str]]:
    """(top-level third-party modules, espew_integrations needs) imported by the blocks."""
    modules, needs = set(), set()
    for block in blocks:
        try:
            tree = ast.parse(block.source)
        except SyntaxError as error:
            raise AssertionError(f"{block.where}: not valid Python: {error}") from error
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [(alias.name, []) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [(node.module, [alias.name for alias in node.names])]
            else:
                continue
            for module, imported in names:
                if module.split(".")[0] == "espew_integrations":
                    for prefix, need in MODULE_NEEDS.items():
                        if module == prefix or module.startswith(prefix + "."):
                            needs.add(need)
                    needs |= {NAME_NEEDS[n] for n in imported if n in NAME_NEEDS}
                    # `from espew_integrations import langchain` imports the submodule.
                    for n in imported:
                        needs |= {v for k, v in MODULE_NEEDS.items() if k == f"{module}.{n}"}
                else:
                    modules.add(module)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    return {m for m in modules if m.split(".")[0] not in stdlib}, needs


def distributions_of(module: str) -> set[str]:
    """The installed distributions that provide a (dotted) module. For a namespace shared
    by several distributions (``llama_index``), only those whose files hold the module."""
    top = module.split(".")[0]
    candidates = metadata.packages_distributions().get(top, [])
    if len(candidates) > 1 and "." in module:
        path = module.replace(".", "/")
        candidates = [
            d
            for d in candidates
            if any(
                str(f).startswith(path + "/") or str(f) == path + ".py"
                for f in metadata.distribution(d).files or []
            )
        ]
    return {canonicalize_name(d) for d in candidates}


def pip_pages() -> list[Path]:
    return [p for p in page_paths() if python_blocks(p) or pip_lines(p.read_text("utf-8"))]


@pytest.mark.parametrize("page", pip_pages(), ids=page_id)
def test_page_pip_line_covers_its_imports(page: Path):
    text = page.read_text(encoding="utf-8")
    lines = pip_lines(text)
    extras, packages = named_on_pip_lines(lines)
    known = set(pyproject()["project"]["optional-dependencies"])
    assert extras <= known, (
        f"{page_id(page)} names extras that pyproject.toml lacks: {sorted(extras - known)} "
        f"(it has {sorted(known)})"
    )
    modules, needs = page_imports(python_blocks(page))
    if "data" in needs:
        assert DATA_COMMAND.search(text), (
            f"{page_id(page)} uses espew_integrations.offline.corpora but never shows "
            "`espew data install`, "
            "the command that installs the offline corpora"
        )
        needs.discard("data")
    missing_extras = needs - expand_extras(frozenset(extras))
    assert not missing_extras, (
        f"{page_id(page)} imports modules that need extras {sorted(missing_extras)}, but its "
        f"pip line{'s' if len(lines) != 1 else ''} {lines or '(none)'} name only {sorted(extras)}"
    )
    installed = set(project_closure(frozenset(extras)))
    installed |= {canonicalize_name(PROJECT)} | packages
    covered = set().union(*(installed_closure(name) for name in installed))
    uncovered = {}
    for module in sorted(modules):
        dists = distributions_of(module)
        assert dists, f"{page_id(page)} imports {module!r}, which no installed package provides"
        if not dists & covered:
            uncovered[module] = sorted(dists)
    assert not uncovered, (
        f"{page_id(page)} imports modules that its pip line {lines or '(none)'} does not "
        f"install: {uncovered}"
    )


def test_pip_line_parser():
    extras, packages = named_on_pip_lines(
        ["'espew-integrations[langchain,minilm]' langchain-openai>=0.3", "-U .[dev]"]
    )
    assert extras == {"langchain", "minilm", "dev"}
    assert packages == {"langchain-openai"}
    assert named_on_pip_lines(["'espew-integrations[cli]'  # the offline MiniLM"]) == (
        {"cli"},
        set(),
    )
    assert named_on_pip_lines(["./lab", "'./lab[torch]'  # the neural thief"]) == (
        set(),
        {"espew-lab"},
    )
    assert {"minilm", "http", "cli"} <= expand_extras(frozenset({"cli"}))
    assert "langchain-chroma" in project_closure(frozenset({"all"}))
    assert "chromadb" in installed_closure("langchain-chroma")
    assert distributions_of("llama_index.vector_stores.chroma") == {
        "llama-index-vector-stores-chroma"
    }
    assert distributions_of("llama_index.no_such_module") == set()


# --- docs/cli.md against `espew --help` ---------------------------------------------------

CLI_DOC = ROOT / "docs" / "cli.md"
# The lab's own flags are documented on its page; cli.md points there.
CLI_DOC_EXTRA = {"lab": [ROOT / "docs" / "lab.md"], "tune": [ROOT / "docs" / "lab.md"]}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Flags of other tools that cli.md may show (pip's, in an install line).
NOT_ESPEW_FLAGS = {"--no-deps", "--index-url", "--help"}


@cache
def espew_help(*command: str) -> str:
    script = Path(sys.executable).with_name("espew")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "espew_integrations.cli"]
    done = subprocess.run(
        [*argv, *command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert done.returncode == 0, f"espew {' '.join(command)} --help failed: {done.stderr[-2000:]}"
    return done.stdout


def help_subcommands(text: str) -> list[str]:
    """Subcommands listed under 'positional arguments' (argparse indents them by 4)."""
    section = text.split("positional arguments:", 1)[1] if "positional arguments:" in text else ""
    section = re.split(r"\n(?:options|optional arguments):", section)[0]
    return re.findall(r"^    ([a-z][\w-]*)(?:\s{2,}|$)", section, flags=re.MULTILINE)


def help_flags(text: str) -> set[str]:
    """The long options a help text lists (option lines, not prose or examples)."""
    flags = set()
    for line in text.splitlines():
        if re.match(r"^\s{2,}-", line):
            flags |= set(FLAG.findall(line.split("  ", 2)[1] if "  " in line.strip() else line))
    return flags - {"--help"}


@cache
def cli_commands() -> list[tuple[str, ...]]:
    found, todo = [], [()]
    while todo:
        command = todo.pop(0)
        subcommands = help_subcommands(espew_help(*command))
        if command:
            found.append(command)
        todo.extend((*command, sub) for sub in subcommands)
    return found


def all_cli_flags() -> set[str]:
    return set().union(*(help_flags(espew_help(*c)) for c in [(), *cli_commands()]))


def test_cli_md_documents_every_flag_of_every_command():
    """One test for all commands (discovered by running --help, so not at collection)."""
    commands = cli_commands()
    assert {("keygen",), ("verify",), ("serve",), ("key", "check")} <= set(commands), commands
    missing = {}
    for command in commands:
        docs = CLI_DOC.read_text(encoding="utf-8") + "".join(
            p.read_text(encoding="utf-8") for p in CLI_DOC_EXTRA.get(command[0], [])
        )
        undocumented = help_flags(espew_help(*command)) - set(FLAG.findall(docs))
        if undocumented:
            missing[f"espew {' '.join(command)}"] = sorted(undocumented)
    assert not missing, f"flags that --help lists and docs/cli.md never names: {missing}"


def test_every_flag_cli_md_names_exists():
    named = set(FLAG.findall(CLI_DOC.read_text(encoding="utf-8"))) - NOT_ESPEW_FLAGS
    unknown = named - all_cli_flags()
    assert not unknown, f"docs/cli.md names flags that no `espew` command has: {sorted(unknown)}"


def test_cli_help_parsers():
    text = (
        "usage: espew [-h] COMMAND ...\n\npositional arguments:\n  COMMAND\n"
        "    keygen    make a key\n    key       inspect\n\noptions:\n"
        "  -h, --help  show this help message and exit\n"
        "  --freq-band LOW,HIGH\n                  the band; e.g. --not-a-flag here\n"
        "  --min-cosine C, --min-cos C  budget\n"
    )
    assert help_subcommands(text) == ["keygen", "key"]
    assert help_flags(text) == {"--freq-band", "--min-cosine", "--min-cos"}


def shape(text: str) -> str:
    """Output with its variable parts (hex ids, numbers, times) replaced by placeholders."""
    text = re.sub(r"\b[0-9a-f]{16,}\b", "HEX", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d\d:\d\d|Z)?", "TIME", text)
    text = re.sub(r"\d[\d,]*(?:\.\d+)?", "N", text)
    return " ".join(text.split())


def doc_sample_output(command: str) -> str:
    """The commented output that docs/cli.md shows after ``command`` in a bash block."""
    lines = CLI_DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(command))
    i = start + 1
    while lines[i - 1].rstrip().endswith("\\"):
        i += 1
    out = []
    while i < len(lines) and lines[i].startswith("# "):
        out.append(lines[i][2:])
        i += 1
    assert out, f"docs/cli.md shows no output after `{command}`"
    return " ".join(out)


def test_cli_md_sample_output_is_what_keygen_and_key_check_print(tmp_path: Path):
    from espew_integrations.offline.corpora import rotten_tomatoes

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(rotten_tomatoes().subset(400).texts) + "\n", encoding="utf-8")
    (tmp_path / "target.txt").write_text("a funny and moving film about love and family\n")
    script = Path(sys.executable).with_name("espew")
    env = fresh_user_env()

    def espew(*args: str) -> str:
        done = subprocess.run(
            [str(script), *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    printed = espew(
        "keygen",
        "--corpus",
        "corpus.txt",
        "--embedder",
        "minilm",
        "--target-text-file",
        "target.txt",
        "--out",
        "provider.key",
        "--no-progress",
    )
    assert shape(printed) == shape(doc_sample_output("espew keygen ")), printed
    checked = espew("key", "check", "provider.key")
    assert shape(checked) == shape(doc_sample_output("espew key check ")), checked
