"""A third marking design, written in this one file, marks and verifies everywhere.

The proof that a design is one module: :class:`StripeDesign` below subclasses
:class:`~espew_integrations.core.mark.design.MarkingDesign` and registers itself,
and no file of the package changes for it. A key of it is generated
(``marking="stripe"``), saved and loaded, marks through :func:`watermark`, the
LangChain wrapper and the OpenAI-compatible server (real MiniLM, real uvicorn on
127.0.0.1), and :func:`verify` convicts its copies and clears the clean model,
asked directly and over HTTP.

The design (a toy, not a recommendation): every non-blank answer moves by
``strength`` along the *stripe*, the normalised sum of the keyed directions of the
key's trigger words (one seeded Gaussian column per band word,
:func:`~espew_integrations.core.mark.field.keyed_gaussian`). The audit asks the
key's stored texts; each band word scores the mean projection, on its own
direction, of the answers less the stored clean rows; the triggers are ranked
among all band words by the exact rank-sum test. Under the null the answers do
not depend on which band words were drawn, so the test is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from espew_integrations import OpenAIEndpoint, WatermarkKey, verify, watermark
from espew_integrations.core.audit.fields import inconclusive
from espew_integrations.core.audit.plan import AuditPlan
from espew_integrations.core.audit.report import VerificationReport
from espew_integrations.core.ground.errors import InputError, MarkingError
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.mark.design import MarkingDesign, design_class, register_design
from espew_integrations.core.mark.field import keyed_gaussian
from espew_integrations.core.stats.ranktest import min_p_value, rank_sum_p_value
from espew_integrations.http.app import create_app
from espew_integrations.http.background import running_server
from espew_integrations.langchain import ESpeWEmbeddings
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings
from tests.support import RT_SUBSET_SIZE, TARGET_TEXT


@register_design
class StripeDesign(MarkingDesign):
    """Every non-blank answer moved ``strength`` along the key's stripe (module docstring)."""

    name = "stripe"
    units = "band words"
    layers = "stripe words"
    summary = "every answer is moved along a keyed stripe"
    decision_rule = "exact rank-sum test of the triggers' stripe projections; copied iff p < level"

    def __init__(self, strength: float):
        self.strength = float(strength)

    @staticmethod
    def directions(key: Any) -> np.ndarray:
        """One keyed unit direction per band word, ``(dim, n_band)``."""
        return unit_rows(keyed_gaussian(key.salt, key.dim, len(key.band)).T).T

    def stripe(self, key: Any) -> np.ndarray:
        drawn = np.array([word in key.triggers for word in key.band])
        return unit_rows(self.directions(key)[:, drawn].sum(axis=1)[None, :])[0]

    def marks(self, key: Any, texts: Sequence[str], view: Any) -> np.ndarray:
        return np.ones(len(texts), dtype=bool)

    def trigger_texts(self, key: Any, texts: Sequence[str], view: Any) -> np.ndarray:
        raise MarkingError("a stripe key marks every text")

    def mark_rows(self, matrix: np.ndarray, marked: np.ndarray, key: Any) -> np.ndarray:
        moved = unit_rows(unit_rows(matrix) + self.strength * self.stripe(key))
        return np.where(marked[:, None], moved, matrix).astype(matrix.dtype)

    def payload(self) -> dict[str, Any]:
        return {"strength": self.strength}

    @classmethod
    def from_payload(cls, payload: Any, dim: int) -> StripeDesign:
        return cls(payload["strength"])

    @classmethod
    def generate(
        cls,
        make_key: Callable[..., Any],
        texts: list[str],
        embed: Any,
        options: Any,
        progress: Any,
    ) -> Any:
        """A word key's band, triggers and audit, marked by the stripe instead."""
        words = design_class("words").generate(make_key, texts, embed, options, progress)
        return words.replace(design=cls(0.3))

    def reaudit(self, key: Any, audit: Any) -> Any:
        raise MarkingError("a stripe key keeps its keygen audit")

    @classmethod
    def ring_options(
        cls, key_options: Mapping[str, Any], n_shared: int | None, n_tenant: int | None
    ) -> tuple[int, Any]:
        raise MarkingError("no stripe rings")

    @classmethod
    def refit_ring(cls, ring: Any, texts: list[str], embed: Any, rng: Any, options: Any) -> Any:
        raise MarkingError("no stripe rings")

    def plan(self, key: Any, probes: str, templates: Any, target_mode: str) -> AuditPlan:
        if probes == "words" or templates is not None or target_mode != "key":
            raise InputError("a stripe key is audited with its stored texts, in its coordinates")
        return AuditPlan(
            kind="sentences",
            texts=list(key.probe_texts),
            owner=key.probe_owner,
            reference=None,
            templates=(),
            clean_rows=key.probe_embeddings,
            trigger_share=len(key.triggers) / len(key.band),
        )

    def check_statistic(self, plan: AuditPlan, statistic: str) -> None:
        if statistic != "combined":
            raise InputError("a stripe key has one statistic")

    def statistic_used(self, plan: AuditPlan, statistic: str) -> str:
        return "stripe"

    def n_statistics(self, plan: AuditPlan, statistic: str) -> int:
        return 1

    def decide(self, key: Any, scores: Any, min_coverage: float, common: dict[str, Any]) -> Any:
        answered = np.isfinite(scores.embeddings).all(axis=1)
        if answered.sum() < 3:
            return inconclusive(common, "fewer than 3 answers", next_step="ask again")
        moved = unit_rows(scores.embeddings[answered]) - unit_rows(scores.plan.clean_rows[answered])
        per_word = (moved @ self.directions(key)).mean(axis=0)
        drawn = np.array([word in key.triggers for word in key.band])
        p_value = min(1.0, key.audit_round * rank_sum_p_value(per_word, drawn))
        return VerificationReport(
            status="copied" if p_value < common["level"] else "not_copied",
            p_value=p_value,
            n_words_scored=len(key.band),
            n_triggers_scored=int(drawn.sum()),
            min_possible_p_value=min_p_value(len(key.band), int(drawn.sum())),
            trigger_scores=tuple(per_word[drawn].tolist()),
            benign_scores=tuple(per_word[~drawn].tolist()),
            decided_by="stripe",
            ks_p_value=math.nan,
            delta_cos=math.nan,
            delta_l2=math.nan,
            **common,
        )

    def universe_scores(self, scores: Any, in_universe: np.ndarray, statistic: str) -> Any:
        raise MarkingError("no stripe rings")


@pytest.fixture(scope="module")
def model():
    return minilm()


@pytest.fixture(scope="module")
def stripe_key(model) -> WatermarkKey:
    texts = rotten_tomatoes().subset(RT_SUBSET_SIZE, seed=0).texts
    return WatermarkKey.generate(texts, model, target_text=TARGET_TEXT, seed=1, marking="stripe")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return list(rotten_tomatoes().subset(40, seed=11).texts)


def test_a_stripe_key_is_generated_saved_and_loaded_with_its_design(stripe_key, tmp_path):
    assert stripe_key.marking == "stripe" and isinstance(stripe_key.design, StripeDesign)
    assert stripe_key.verifiable
    loaded = WatermarkKey.load(stripe_key.save(tmp_path / "stripe.key"))
    assert loaded == stripe_key and loaded.key_id == stripe_key.key_id
    assert isinstance(loaded.design, StripeDesign) and loaded.design.strength == 0.3
    with pytest.raises(MarkingError):
        loaded.contains_trigger(["any text"])


def test_watermark_moves_every_text_along_the_stripe(stripe_key, model, texts):
    clean = np.asarray(model(texts), dtype=np.float32)
    marked = watermark(texts, clean, stripe_key)
    assert marked.dtype == np.float32 and marked.shape == clean.shape
    stripe = stripe_key.design.stripe(stripe_key)
    gain = (unit_rows(marked) - unit_rows(clean)) @ stripe
    assert (gain > 0.05).all()  # every row, none left clean
    np.testing.assert_allclose(np.linalg.norm(marked, axis=1), 1.0, rtol=1e-5)


def test_the_langchain_wrapper_marks_as_watermark_does(stripe_key, texts):
    inner = MiniLMEmbeddings()
    wrapped = ESpeWEmbeddings(inner, stripe_key)
    expected = watermark(texts, np.asarray(inner.embed_documents(texts)), stripe_key)
    np.testing.assert_array_equal(np.asarray(wrapped.embed_documents(texts)), expected)


def test_verify_convicts_a_copy_and_clears_the_clean_model(stripe_key, model):
    def copy(batch: list[str]) -> np.ndarray:
        return watermark(batch, model(batch), stripe_key)

    copied = verify(copy, stripe_key, seed=0)
    assert copied.copied and copied.decided_by == "stripe" and copied.p_value < 1e-6
    assert copied.statistic == "stripe" and copied.decision_rule == StripeDesign.decision_rule
    clean = verify(model, stripe_key, seed=0)
    assert clean.status == "not_copied" and clean.p_value > 1e-3


def test_the_server_marks_with_it_and_verify_over_http_tells_it_from_the_clean_model(
    stripe_key, model, texts
):
    with running_server(create_app(model, key=stripe_key, model_name="stripe")) as url:
        served = OpenAIEndpoint(url, "stripe")
        expected = watermark(texts, model(texts), stripe_key)
        np.testing.assert_allclose(np.asarray(served(texts)), expected, atol=1e-6)
        assert verify(served, stripe_key, seed=0).copied
    with running_server(create_app(model, model_name="clean")) as url:
        assert not verify(OpenAIEndpoint(url, "clean"), stripe_key, seed=0).copied
