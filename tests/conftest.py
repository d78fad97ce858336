"""Fixtures for the whole suite: a real offline model, a real corpus, small synthetic keys.

Tests under ``tests/unit`` are marked ``unit`` (no real model, server or process, and
nothing the bare core does not install: ``tests/core_only.py``); tests under
``tests/integration`` are marked ``integration`` (the real MiniLM, real servers and
frameworks). ``make test-fast`` runs the first, ``make test`` both. Helpers that tests
import live in ``tests/support.py``. This file is imported by the unit tier too: at
module level it imports only the core; the real model and corpus load inside fixtures.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from espew_integrations import WatermarkKey
from tests.support import RT_SUBSET_SIZE, MemoEmbedder, make_key

_TESTS = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    """One embedding store for the whole run, shared by every worker and subprocess.

    The offline models embed each text on its own, so the store
    (``ESPEW_EMBED_CACHE``, see ``offline.embedding_store``) changes no result:
    every text is still embedded by the real model once per run, and the
    examples, notebooks, CLI processes and doc pages that keygen on the same
    corpus read it back instead of embedding it again. A fresh directory per
    run keeps a stale store from ever standing in for the model; the process
    that made it removes it at the end. Set ``ESPEW_EMBED_CACHE`` yourself to
    keep one across runs.
    """
    if os.environ.get("ESPEW_EMBED_CACHE"):
        return  # set by the user, or inherited from the run's controller by an xdist worker
    directory = Path(tempfile.mkdtemp(prefix="espew-embed-cache-"))
    os.environ["ESPEW_EMBED_CACHE"] = str(directory)
    config.stash[_STORE_MADE_HERE] = directory


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = config.stash.get(_STORE_MADE_HERE, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


_STORE_MADE_HERE = pytest.StashKey[Path]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by the folder it lives in, so ``-m unit`` / ``-m integration`` select.

    Only this tree's: the lab's tests (``lab/tests``) are marked by their own conftest.
    """
    mark_by_folder(items, _TESTS)
    n_integration = sum(item.get_closest_marker("integration") is not None for item in items)
    config.stash[_WARM_STORE] = n_integration >= _WARM_STORE_FROM


def mark_by_folder(items: list[pytest.Item], root: Path) -> None:
    """Mark the items under ``root/unit`` and ``root/integration`` ``unit`` / ``integration``."""
    for item in items:
        path = Path(item.path).resolve()
        if not path.is_relative_to(root):
            continue
        kind = path.relative_to(root).parts[0]
        if kind in ("unit", "integration"):
            item.add_marker(getattr(pytest.mark, kind))


#: Runs that select at least this many integration tests (``make test``) warm the store.
_WARM_STORE_FROM = 200
_WARM_STORE = pytest.StashKey[bool]()


@pytest.fixture(scope="session", autouse=True)
def _warm_embedding_store(request: pytest.FixtureRequest) -> None:
    """Before a worker's first test of a full run, put the whole corpus in the run's store.

    Nearly every real-model test, example, notebook, CLI process and doc page keygens
    on or audits Rotten Tomatoes texts, each with its own salt, so each embeds a
    different few thousand of them (a run without it embeds 12,742 of the 12,752).
    Embedding the whole corpus into the run's store once (each xdist worker a
    disjoint share, in parallel) turns all of that into reads. It changes no
    result: the store holds the model's own rows, bit for bit.

    Session-scoped, so it runs before the module fixtures of a worker's first test
    (a real keygen there would otherwise embed texts of the other worker's share
    while that worker embeds them too). A worker done with its share then works
    through the others' shares from their far end, where the store skips what is
    already there: each worker starts its tests only once the whole corpus is in,
    so no test's subprocess embeds a text a worker is still about to embed, and a
    worker slowed by the machine is helped rather than waited for.
    """
    if not request.config.stash.get(_WARM_STORE, False):
        return
    from espew_integrations.offline.embedders import minilm

    texts = list(request.getfixturevalue("rt_corpus").texts)
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    n_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    others = [texts[w::n_workers] for w in range(n_workers) if w != worker]
    chunks = _chunks(texts[worker::n_workers], 256)
    chunks += [chunk for share in others for chunk in reversed(_chunks(share, 64))]
    for chunk in chunks:
        minilm()(chunk)


def _chunks(texts: list[str], size: int) -> list[list[str]]:
    return [texts[start : start + size] for start in range(0, len(texts), size)]


@pytest.fixture
def key64() -> WatermarkKey:
    return make_key()


@pytest.fixture(scope="session")
def minilm_model():
    from espew_integrations.offline.embedders import minilm

    return MemoEmbedder(minilm())


@pytest.fixture(scope="session")
def rt_corpus():
    from espew_integrations.offline.corpora import rotten_tomatoes

    return rotten_tomatoes()


@pytest.fixture(scope="session")
def rt_subset(rt_corpus):
    return rt_corpus.subset(RT_SUBSET_SIZE, seed=0)


@pytest.fixture(scope="session")
def rt_subset_embeddings(rt_subset, minilm_model):
    from espew_lab.cache import cached_embed

    return cached_embed(minilm_model, rt_subset.texts, model_name=minilm_model.name)
