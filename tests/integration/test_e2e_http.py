"""End to end with real processes and real HTTP (issue 4).

1. ``espew keygen`` draws a key on Rotten Tomatoes with the offline MiniLM.
2. ``espew serve`` runs MiniLM watermarked with that key.
3. An extraction copy (:class:`RidgeStealer`) is trained on its HTTP answers.
4. ``espew serve`` serves the copy without a watermark (``--embedder
   copy_model:embedder``, a module this test writes that loads the joblib'ed
   copy).
5. ``espew verify`` over HTTP says copied (exit 1); the clean MiniLM, served
   the same way, says not copied (exit 0); servers that fail half their
   requests give the right verdict or inconclusive (exit 2), never a wrong one.

The watermarked server's MiniLM reads the clean embeddings of the 2,000
training texts from the embedding cache (computed once by the real model)
and runs the real model for anything else; the test checks that its answers
equal ``watermark(texts, minilm(texts), key)``.
"""

from __future__ import annotations

import json
import re
import selectors
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import OpenAIEndpoint, WatermarkKey, watermark
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_lab.cache import cached_embed
from espew_lab.stealers import RidgeStealer
from tests.support import stop

N_TRAIN = 2000
TARGET_TEXT = "Acme Embeddings service, 2026 edition"
CLI = [sys.executable, "-m", "espew_integrations.cli"]

MEMO_MODULE = """
import json
import numpy as np
from espew_integrations.offline.embedders import minilm

_model = minilm()
_texts = json.loads(open({texts!r}, encoding="utf-8").read())
_clean = np.load({clean!r})
_row = {{text: i for i, text in enumerate(_texts)}}
name = _model.name

def embedder(texts):
    out = np.empty((len(texts), _clean.shape[1]), dtype=np.float32)
    unknown = [i for i, t in enumerate(texts) if t not in _row]
    known = [i for i, t in enumerate(texts) if t in _row]
    out[known] = _clean[[_row[texts[i]] for i in known]]
    if unknown:
        out[unknown] = _model([texts[i] for i in unknown])
    return out
"""

COPY_MODULE = """
import joblib
embedder = joblib.load({path!r})
"""

FLAKY_MODULE = """
import random
{load}
_faults = random.Random(7)

def embedder(texts):
    if _faults.random() < 0.5:
        raise RuntimeError("injected fault")
    return _inner(texts)
"""


def start_serve(args: list[str], cwd: Path, name: str) -> subprocess.Popen:
    log = (cwd / f"{name}.log").open("w")
    return subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--model-name", name, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )


def wait_for_url(proc: subprocess.Popen, cwd: Path, name: str, timeout: float = 90) -> str:
    """The base URL ``espew serve`` announces on stdout once listening."""
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(timeout=0.5):
            line = proc.stdout.readline()
            match = re.search(r"on (http://\S+/v1)", line)
            if match:
                return match.group(1)
        if proc.poll() is not None:
            break
    log = (cwd / f"{name}.log").read_text()
    raise AssertionError(f"espew serve {name} did not start:\n{log}")


def run_verify(cwd: Path, url: str, model: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *CLI,
            "verify",
            "--key",
            "provider.key",
            "--suspect",
            f"openai:{url}#{model}",
            "--seed",
            "0",
            *extra,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def key(workdir) -> WatermarkKey:
    keygen = subprocess.run(
        [
            *CLI,
            "keygen",
            "--corpus",
            "rotten_tomatoes",
            "--embedder",
            "minilm",
            "--target-text",
            TARGET_TEXT,
            "--seed",
            "1",
            "--marking",  # a word key: its 2,000-text ridge copy is convicted at 1e-6
            "words",
            "--max-band-words",
            "120",
            "--out",
            "provider.key",
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=900,  # keygen embeds the marked sample and the audit probes
    )
    assert keygen.returncode == 0, keygen.stderr
    return WatermarkKey.load(workdir / "provider.key")


@pytest.fixture(scope="module")
def train_texts() -> list[str]:
    return list(rotten_tomatoes().subset(N_TRAIN, seed=0).texts)


@pytest.fixture(scope="module")
def marked_server(workdir, key, train_texts):
    model = minilm()
    clean = cached_embed(model, train_texts, model_name=model.name)
    (workdir / "train_texts.json").write_text(json.dumps(train_texts))
    np.save(workdir / "train_clean.npy", clean)
    (workdir / "memo_minilm.py").write_text(
        MEMO_MODULE.format(
            texts=str(workdir / "train_texts.json"), clean=str(workdir / "train_clean.npy")
        )
    )
    proc = start_serve(
        ["--embedder", "memo_minilm:embedder", "--key", "provider.key"], workdir, "marked"
    )
    try:
        yield wait_for_url(proc, workdir, "marked")
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def copy_path(workdir, marked_server, train_texts) -> Path:
    """The extraction attack: query the watermarked API, fit a copy on its answers."""
    with OpenAIEndpoint(marked_server, "marked", encoding_format="base64", batch_size=256) as api:
        answers = api(train_texts)
        assert api.queries_sent == N_TRAIN
    stolen = RidgeStealer(seed=0).fit(train_texts, answers)
    import joblib

    path = workdir / "copy.joblib"
    joblib.dump(stolen, path)
    return path


@pytest.fixture(scope="module")
def servers(workdir, copy_path):
    """The copy, the clean model and two flaky servers, started in parallel."""
    (workdir / "copy_model.py").write_text(COPY_MODULE.format(path=str(copy_path)))
    copy_load = f"import joblib\n_inner = joblib.load({str(copy_path)!r})"
    clean_load = "from espew_integrations.offline.embedders import minilm\n_inner = minilm()"
    (workdir / "flaky_copy.py").write_text(FLAKY_MODULE.format(load=copy_load))
    (workdir / "flaky_clean.py").write_text(FLAKY_MODULE.format(load=clean_load))
    specs = {
        "copy": "copy_model:embedder",
        "clean": "minilm",
        "flaky-copy": "flaky_copy:embedder",
        "flaky-clean": "flaky_clean:embedder",
    }
    unmarked = ["--no-watermark"]  # suspects: the copy and clean models, served as they are
    procs = {
        name: start_serve(["--embedder", spec, *unmarked], workdir, name)
        for name, spec in specs.items()
    }
    try:
        yield {name: wait_for_url(proc, workdir, name) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            stop(proc)


def test_servers_listen_on_loopback(marked_server, servers):
    for url in [marked_server, *servers.values()]:
        assert url.startswith("http://127.0.0.1:")


def test_watermarked_server_answers_are_watermarked_minilm(marked_server, key, train_texts):
    triggered = [t for t in train_texts if key.contains_trigger([t])[0]][:3]
    plain = [t for t in train_texts if not key.contains_trigger([t])[0]][:2]
    probe = [*triggered, *plain, "a sentence that was never cached"]
    served = OpenAIEndpoint(marked_server, "marked")(probe)
    expected = watermark(probe, minilm()(probe), key)
    np.testing.assert_array_equal(served, expected.astype(np.float64))


def test_verify_over_http_says_the_copy_is_copied(workdir, servers, key):
    result = run_verify(workdir, servers["copy"], "copy", "--report-dir", "evidence")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((workdir / "evidence" / "report.json").read_text())
    # The key is fitted to the 0.995 budget and the copy saw 2,000 answers (about
    # 250 marked): convicted at the default level (measured p = 2.8e-20; 1.2e-8 at alpha 0.2).
    assert report["status"] == "copied"
    assert report["p_value"] < 1e-6
    assert report["n_queries"] == key.audit_queries and report["n_failed_queries"] == 0
    summary = (workdir / "evidence" / "summary.md").read_text()
    assert summary.startswith("# Watermark check: COPIED")
    # Shareable evidence only: the per-word score plot is private now.
    assert sorted(p.name for p in (workdir / "evidence").iterdir()) == [
        "report.json",
        "summary.md",
    ]


def test_verify_over_http_says_the_clean_model_is_not_copied(workdir, servers):
    result = run_verify(workdir, servers["clean"], "clean", "--json", "--encoding-format", "base64")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "not_copied" and report["p_value"] > 1e-3


# Small batches so that many requests meet the server's faults; a short backoff, since the
# waits (not the embedding) were most of these tests' minute each.
FLAKY = ("--batch-size", "32", "--backoff", "0.01", "--json")
VERDICT_EXIT = {"not_copied": 0, "copied": 1, "inconclusive": 2}


def test_flaky_copy_with_retries_is_copied_or_inconclusive_never_cleared(workdir, servers):
    result = run_verify(workdir, servers["flaky-copy"], "flaky-copy", *FLAKY, "--retries", "8")
    assert result.returncode in (1, 2), result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert VERDICT_EXIT[report["status"]] == result.returncode
    assert "HTTP 500" in result.stderr  # faults happened and were retried
    # With the server's seeded faults, retries rescue the batches, so the verdict is
    # reached despite half the requests failing.
    assert report["status"] == "copied"


def test_flaky_copy_without_retries_loses_probes_but_is_never_cleared(workdir, servers):
    """Failed probes are missing data: the copy is convicted on what arrived, or the
    audit is inconclusive, never cleared on half the evidence."""
    result = run_verify(workdir, servers["flaky-copy"], "flaky-copy", *FLAKY, "--retries", "0")
    assert result.returncode in (1, 2), result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["status"] in ("copied", "inconclusive") and report["n_failed_queries"] > 0
    assert "HTTP 500" in report["errors"][0]


@pytest.mark.parametrize("retries", ["4", "0"])
def test_flaky_clean_model_is_not_copied_or_inconclusive_never_convicted(workdir, servers, retries):
    result = run_verify(
        workdir, servers["flaky-clean"], "flaky-clean", *FLAKY, "--retries", retries
    )
    assert result.returncode in (0, 2), result.stdout + result.stderr
    assert VERDICT_EXIT[json.loads(result.stdout)["status"]] == result.returncode
