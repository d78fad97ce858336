"""``ESPEW_EMBED_CACHE``: the offline models' disk memo returns the model's exact bytes."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from espew_integrations.offline.embedders import OnnxSentenceEncoder, minilm_files
from espew_integrations.offline.embedding_store import EmbeddingStore, file_fingerprint

TEXTS = [
    "a funny and moving film about love",
    "the plot drags in the second half",
    "a funny and moving film about love",  # a repeat within the batch
    "Vac\u00adcíne TRIALS",
]


def fresh_encoder(store_dir):
    """A new MiniLM encoder object (minilm() is cached per process) with its own store."""
    return OnnxSentenceEncoder(*minilm_files(), name="minilm", store_dir=store_dir)


def test_stored_embeddings_are_the_models_bytes_in_this_and_another_process(tmp_path):
    plain = fresh_encoder(None)(TEXTS)
    stored = fresh_encoder(tmp_path)
    first, again = stored(TEXTS), stored(TEXTS)
    np.testing.assert_array_equal(first, plain)
    np.testing.assert_array_equal(again, plain)
    (path,) = tmp_path.glob("*.sqlite")
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0] == len(set(TEXTS))
    # Another process, told by the environment, reads the same rows back.
    script = (
        "import sys, numpy as np\n"
        "from espew_integrations.offline.embedders import minilm\n"
        "m = minilm()\n"
        "assert m._store is not None, 'the store was not switched on'\n"
        f"np.save(sys.argv[1], m({TEXTS!r}))\n"
    )
    out = tmp_path / "other.npy"
    env = {**os.environ, "ESPEW_EMBED_CACHE": str(tmp_path / "shared")}
    for _ in range(2):  # the first run fills the store, the second reads it
        subprocess.run([sys.executable, "-c", script, str(out)], check=True, env=env)
        np.testing.assert_array_equal(np.load(out), plain)


def test_another_model_or_revision_never_reads_these_rows(tmp_path):
    a = EmbeddingStore(tmp_path, fingerprint="aa" * 32, dim=4)
    b = EmbeddingStore(tmp_path, fingerprint="bb" * 32, dim=4)
    ones = a.embed(["x"], lambda texts: np.ones((len(texts), 4), np.float32))
    twos = b.embed(["x"], lambda texts: np.full((len(texts), 4), 2, np.float32))
    assert ones.tolist() == [[1, 1, 1, 1]] and twos.tolist() == [[2, 2, 2, 2]]
    # any Python str has a row, a lone surrogate included
    assert a.embed(["\ud800"], lambda texts: np.ones((1, 4), np.float32)).shape == (1, 4)
    assert a.path != b.path
    files = [tmp_path / "f1", tmp_path / "f2"]
    files[0].write_bytes(b"model")
    files[1].write_bytes(b"tokenizer")
    base = file_fingerprint(*files, revision="1")
    assert base != file_fingerprint(*files, revision="2")
    files[0].write_bytes(b"model, retrained")
    assert base != file_fingerprint(*files, revision="1")


def test_a_row_of_the_wrong_size_is_embedded_again(tmp_path):
    store = EmbeddingStore(tmp_path, fingerprint="cc" * 32, dim=4)
    calls = []

    def compute(texts):
        calls.append(list(texts))
        return np.arange(4 * len(texts), dtype=np.float32).reshape(len(texts), 4)

    store.embed(["x", "y"], compute)
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE embeddings SET vector = X'00'")  # truncated rows
    got = store.embed(["x", "y"], compute)
    assert calls == [["x", "y"], ["x", "y"]]
    assert got.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_store_that_cannot_be_opened_warns_once_and_the_model_still_computes(tmp_path, caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the store directory should be")
    with caplog.at_level(logging.WARNING, logger="espew_integrations.offline.embedding_store"):
        store = EmbeddingStore(blocker, fingerprint="dd" * 32, dim=2)
    assert "is off" in caplog.text
    got = store.embed(["x"], lambda texts: np.ones((len(texts), 2), np.float32))
    assert got.tolist() == [[1, 1]]
    assert "off" in repr(store)


@pytest.mark.parametrize("bad", [["ok", 3], "a single string"])
def test_bad_texts_are_refused_before_the_store_is_asked(tmp_path, bad):
    with pytest.raises(TypeError):
        fresh_encoder(tmp_path)(bad)
