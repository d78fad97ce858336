"""ESpeWEmbedding inside LlamaIndex's pipelines: it crosses processes by the key's location.

``IngestionPipeline(num_workers=2)`` pickles its transformations into spawned worker
processes, and LlamaIndex saves components with ``to_dict``. Both carry the key's
location (a key file path or an environment variable name) and its public key_id,
never the key; the real offline MiniLM runs in every process (issue 48).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from llama_index.core.ingestion.pipeline import get_transformation_hash
from llama_index.core.schema import TextNode

from espew_integrations import ESpeWError, KeyFileError, watermark
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.llama_index import ESpeWEmbedding
from espew_integrations.offline.frameworks.llama_index import MiniLMEmbedding
from tests.support import REPO, secret_strings


@pytest.fixture(scope="module")
def expected(key, texts) -> np.ndarray:
    return watermark(texts, MiniLMEmbedding().get_text_embedding_batch(texts), key)


@pytest.fixture
def in_key_dir(key, tmp_path, monkeypatch):
    """The key file as ``provider.key`` in the working directory (a relative location)."""
    key.save(tmp_path / "provider.key")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _assert_no_secret(text: str, key) -> None:
    assert not any(secret in text for secret in secret_strings(key))
    assert not any(f'"{trigger}"' in text for trigger in key.triggers)


PIPELINE = """
import json, sys
from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from espew_integrations.llama_index import ESpeWEmbedding
from espew_integrations.offline.frameworks.llama_index import MiniLMEmbedding

texts = json.load(open("texts.json"))
embed_model = ESpeWEmbedding(MiniLMEmbedding(), key_path="provider.key")
documents = [Document(text=text, id_=f"doc-{i}") for i, text in enumerate(texts)]
out = {}
for workers in (1, 2):
    pipeline = IngestionPipeline(transformations=[embed_model])  # its own, empty cache
    nodes = pipeline.run(documents=documents, num_workers=workers)
    out[workers] = {node.ref_doc_id or node.node_id: node.embedding for node in nodes}
json.dump(out, open("vectors.json", "w"))
"""


def test_a_two_worker_ingestion_pipeline_gives_the_one_worker_vectors(
    key, texts, expected, in_key_dir
):
    # In a process of its own, with a deadline: a worker that fails to start leaves
    # multiprocessing.Pool waiting forever, which must fail this test, not hang the suite.
    (in_key_dir / "texts.json").write_text(json.dumps(texts))
    done = subprocess.run(
        [sys.executable, "-c", PIPELINE],
        cwd=in_key_dir,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    vectors = json.loads((in_key_dir / "vectors.json").read_text())
    ids = [f"doc-{i}" for i in range(len(texts))]
    assert sorted(vectors["1"]) == sorted(vectors["2"]) == sorted(ids)
    one = np.array([vectors["1"][i] for i in ids])
    two = np.array([vectors["2"][i] for i in ids])
    assert np.array_equal(two, one)
    assert np.array_equal(one, expected)  # the core's watermark of the clean model's vectors
    marked = key.contains_trigger(texts)
    clean = np.array(MiniLMEmbedding().get_text_embedding_batch(texts))
    assert marked.any() and not np.allclose(one[marked], clean[marked])


def test_pickling_carries_the_key_location_never_the_key(key, texts, expected, in_key_dir):
    wrapped = ESpeWEmbedding(MiniLMEmbedding(), key_path="provider.key", embed_batch_size=7)
    blob = pickle.dumps(wrapped)
    _assert_no_secret(blob.decode("latin-1"), key)
    assert b"provider.key" in blob
    back = pickle.loads(blob)
    assert back.key_id == key.key_id and back.embed_batch_size == 7
    assert back.view == wrapped.view is not None
    assert np.array_equal(back.get_text_embedding_batch(texts), expected)


def test_pickling_by_environment_variable_and_a_swapped_key_is_refused(
    key, texts, expected, monkeypatch, tmp_path
):
    monkeypatch.setenv("ESPEW_TEST_KEY", key.to_json())
    blob = pickle.dumps(ESpeWEmbedding(MiniLMEmbedding(), key_env="ESPEW_TEST_KEY"))
    assert b"ESPEW_TEST_KEY" in blob
    _assert_no_secret(blob.decode("latin-1"), key)
    assert np.array_equal(pickle.loads(blob).get_text_embedding_batch(texts), expected)
    salt = bytes(32)  # a genuine other key (its triggers are its salt's draw)
    other = key.replace(salt=salt, triggers=draw_triggers(salt, key.band, len(key.triggers)))
    monkeypatch.setenv("ESPEW_TEST_KEY", other.to_json())
    with pytest.raises(KeyFileError, match=r"\$ESPEW_TEST_KEY has key_id .* restore the original"):
        pickle.loads(blob)


def test_to_dict_round_trips_through_json_by_location(key, texts, expected, in_key_dir):
    wrapped = ESpeWEmbedding(MiniLMEmbedding(), key_path="provider.key", view=None)
    data = wrapped.to_dict()
    assert data["key_path"] == "provider.key" and data["key_id"] == key.key_id
    assert data["view"] == "off" and data["embed_model"]["class_name"] == "ESpeWMiniLMEmbedding"
    text = json.dumps(data)
    _assert_no_secret(text, key)
    back = ESpeWEmbedding.from_dict(json.loads(text))
    assert back.key_id == key.key_id and back.view is None
    assert np.array_equal(
        back.get_text_embedding_batch(texts), wrapped.get_text_embedding_batch(texts)
    )
    # The default view is the inner model's, found again on the rebuilt model.
    default = ESpeWEmbedding.from_dict(
        ESpeWEmbedding(MiniLMEmbedding(), key_path="provider.key").to_dict()
    )
    assert default.view is not None
    assert np.array_equal(default.get_text_embedding_batch(texts), expected)


def test_a_dict_of_an_in_memory_key_names_none_and_from_dict_asks_for_one(key, in_key_dir):
    data = ESpeWEmbedding(MiniLMEmbedding(), key).to_dict()
    assert data["key_id"] == key.key_id and not {"key_path", "key_env"} & set(data)
    with pytest.raises(ESpeWError, match=r"names no key location.*key_path="):
        ESpeWEmbedding.from_dict(data)
    assert ESpeWEmbedding.from_dict(data, key_path="provider.key").key_id == key.key_id


def test_two_keys_never_share_the_ingestion_cache(key, in_key_dir, monkeypatch):
    salt = bytes(32)
    other = key.replace(salt=salt, triggers=draw_triggers(salt, key.band, len(key.triggers)))
    monkeypatch.setenv("ESPEW_OTHER_KEY", other.to_json())
    ours = ESpeWEmbedding(MiniLMEmbedding(), key_path="provider.key")
    theirs = ESpeWEmbedding(MiniLMEmbedding(), key_env="ESPEW_OTHER_KEY")
    nodes = [TextNode(text="a fine film")]
    # The pipeline's cache is keyed by this hash: equal hashes would hand back the
    # vectors marked with the other key.
    assert get_transformation_hash(nodes, ours) != get_transformation_hash(nodes, theirs)
