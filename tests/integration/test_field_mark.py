"""The keys that mark every answer on the real offline MiniLM: the default map key (no
marking named) and a field key (marking="field"). Keygen, serving through a real wrapper
and ``espew serve``, and ``verify`` against the service, a ridge copy trained on its
answers and the clean model. The corpus's MiniLM and MiniLM-L3 rows come from the on-disk
cache (``espew data install``), so the test takes seconds."""

from __future__ import annotations

import os

import numpy as np
import pytest

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.ground.defaults import DEFAULT_FIELD_MIN_COSINE
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.mark.probes import row_cosines
from espew_integrations.langchain import ESpeWEmbeddings
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm, paraphrase_minilm_l3
from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings
from espew_lab.cache import cached_embed
from tests.support import TARGET_TEXT, Cached

KEYGEN_TEXTS = 3000
STEAL_TEXTS = 6000


@pytest.fixture(scope="module", params=["map", "field"])
def setting(request):
    texts = list(rotten_tomatoes().texts)
    victim_model, open_model = minilm(), paraphrase_minilm_l3()
    victim = Cached(
        victim_model, texts, cached_embed(victim_model, texts, model_name=victim_model.name)
    )
    opened = Cached(open_model, texts, cached_embed(open_model, texts, model_name=open_model.name))
    named = {} if request.param == "map" else {"marking": request.param}  # map: the default
    key = WatermarkKey.generate(
        texts[:KEYGEN_TEXTS], victim, target_text=TARGET_TEXT, seed=1,
        window=victim_model.max_tokens, **named,
    )  # fmt: skip
    assert key.marking == request.param
    return texts, victim, opened, key


def _ridge_copy(features, answers, open_model):
    """A ridge head on the open model fitted to the stolen answers (bias included)."""
    x = np.hstack([features, np.ones((len(features), 1))])
    gram = x.T @ x
    gram[np.diag_indices_from(gram)] += 1.0
    weights = np.linalg.solve(gram, x.T @ answers)

    def copy(texts):
        f = open_model(texts)
        return unit_rows(np.hstack([f, np.ones((len(f), 1))]) @ weights)

    return copy


def test_the_key_convicts_the_service_and_a_ridge_copy_and_acquits_the_clean_model(setting):
    texts, victim, opened, key = setting
    assert key.verifiable and key.audit_queries == 1950
    assert key.info["mean_cosine_marked"] == pytest.approx(DEFAULT_FIELD_MIN_COSINE, abs=2e-4)

    def service(batch):
        return watermark(batch, victim(batch), key)

    stolen = texts[KEYGEN_TEXTS : KEYGEN_TEXTS + STEAL_TEXTS]  # disjoint from the audit
    copy = _ridge_copy(opened(stolen), service(stolen), opened)
    served = verify(service, key, seed=1)
    copied = verify(copy, key, seed=1)
    clean = verify(victim, key, seed=1)
    assert served.copied and served.p_value < 1e-15, served.p_value
    if key.marking == "map":  # the map key convicts it far below the default level
        assert copied.copied and copied.p_value < 1e-10, copied.p_value
    else:
        # a field key convicts this ridge copy (6,000 stolen answers) below 1e-4, not yet
        # below the default level 1e-6 (seeds 1-3: 2.9e-5, 5.3e-4, 2.6e-6; issue 44)
        assert copied.p_value < 1e-4, copied.p_value
        assert verify(copy, key, seed=1, level=1e-3).copied
    assert clean.status == "not_copied" and clean.p_value > 1e-3, clean.p_value
    assert served.statistic == copied.statistic == key.marking


def test_a_real_wrapper_marks_every_text(setting):
    _, _, _, key = setting
    texts = ["A quiet, patient film.", "Loud and dumb.", "   ", "The cast is superb"]
    wrapped = np.asarray(
        ESpeWEmbeddings(MiniLMEmbeddings(), key).embed_documents(texts[:2] + texts[3:])
    )
    clean = minilm()(texts[:2] + texts[3:])
    cos = row_cosines(clean, wrapped)
    assert (cos < 1 - 1e-7).all() and (cos > 0.98).all()
    assert np.allclose(wrapped, watermark(texts[:2] + texts[3:], clean, key), atol=1e-6)


@pytest.mark.parametrize("framework", ["langchain", "llama_index", "chroma"])
def test_each_wrapper_with_the_default_key_moves_every_text_at_the_budget(setting, framework):
    """The default flow of every wrapper: each of 40 held-out reviews comes back moved,
    as the core marks it, and their mean cos sits at the key's quality budget."""
    from tests.integration.test_wrappers import FRAMEWORKS, _first_batch, _rows

    texts, _, _, key = setting
    asked = list(texts[KEYGEN_TEXTS + 100 : KEYGEN_TEXTS + 140])
    fw = next(f for f in FRAMEWORKS if f.name == framework)
    served = _rows(_first_batch(fw, fw.wrapper(fw.real_inner(), key))(asked))
    clean = minilm()(asked)
    cos = row_cosines(clean, served)
    assert (served != clean).any(axis=1).all()  # every text moved
    assert np.allclose(served, watermark(asked, clean, key), atol=1e-6)
    assert abs(cos.mean() - DEFAULT_FIELD_MIN_COSINE) < 1e-3, cos.mean()


def test_espew_serve_marks_every_answer_over_real_http(setting, tmp_path):
    """A real ``espew serve`` process with the key: every answer over HTTP is the
    library's watermark of the clean row (nothing is left unmarked), and a reaudit of the
    key from other texts (``espew key reaudit``) still convicts the server."""
    from espew_integrations import OpenAIEndpoint
    from espew_integrations.cli import main
    from tests.integration.test_serve_key_rule import _start
    from tests.support import stop

    texts, victim, _, key = setting
    key_path = key.save(tmp_path / f"{key.marking}.key")
    env = {k: v for k, v in os.environ.items() if k != "ESPEW_KEY"}
    proc, line = _start(["--key", str(key_path)], env, tmp_path / "serve.log")
    asked = texts[KEYGEN_TEXTS : KEYGEN_TEXTS + 40]
    try:
        url = line.split(" on ", 1)[1].split()[0]
        with OpenAIEndpoint(url, "m") as endpoint:
            served = np.asarray(endpoint(asked), dtype=np.float64)
    finally:
        stop(proc)
    assert f"watermarked with key {key.key_id}" in line
    assert f"marking={key.marking}: every answer is marked" in line  # the operator sees it
    clean = minilm()(asked)
    assert (row_cosines(clean, served) < 1 - 1e-7).all()  # every answer moved
    assert np.allclose(served, watermark(asked, clean, key), atol=1e-6)
    corpus = tmp_path / "other.txt"
    corpus.write_text("\n".join(texts[KEYGEN_TEXTS + 40 : KEYGEN_TEXTS + 640]) + "\n")
    reaudited = tmp_path / "round2.key"
    code = main(
        ["key", "reaudit", str(key_path), "--corpus", str(corpus), "--embedder",
         "minilm", "--out", str(reaudited), "--no-progress"]
    )  # fmt: skip
    assert code == 0
    round_two = WatermarkKey.load(reaudited)
    assert round_two.marking == key.marking and len(round_two.probe_texts) == 600
    assert set(round_two.probe_texts) <= set(texts[KEYGEN_TEXTS + 40 : KEYGEN_TEXTS + 640])
    report = verify(lambda b: watermark(b, victim(b), key), round_two, seed=1)
    assert report.copied and report.p_value < 1e-6
