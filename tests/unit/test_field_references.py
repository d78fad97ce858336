"""Reference copies in the field audit (issue 44): verify_callable(..., references=...), the numpy
reference helpers (core/stats/references.py), their checks, their record in the
transcript and the replay; on test_field's small synthetic embedder (seconds)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from espew_integrations.core.audit.plan import plan_audit
from espew_integrations.core.evidence_check import check_transcript
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.ground.errors import InputError, OptionsError
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.keys.key import WatermarkKey
from espew_integrations.core.mark.field import (
    drawn_mask,
    field_scores,
    keyed_gaussian,
    reference_leans,
    scoring_projections,
    unit_names,
)
from espew_integrations.core.mark.inject import watermark
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from espew_integrations.core.stats.references import (
    bag_of_words_reference,
    hashed_word_counts,
    ridge_reference,
)
from espew_integrations.core.verify import verify_callable
from tests.support import make_key, secret_strings
from tests.unit.test_field import CORPUS, _bag_embedder, embed, innocent

BASE = _bag_embedder(np.random.default_rng(5).normal(size=(500, 64)))  # an "open" encoder


@pytest.fixture(scope="module")
def setting():
    key = WatermarkKey.generate(
        CORPUS, embed, target_text="acme licensed vectors", seed=3, marking="field",
        audit_budget=800,
    )  # fmt: skip
    audit = set(key.probe_texts)
    rest = [t for t in CORPUS if t not in audit]
    steal, own = rest[:800], rest[800:1600]  # the auditor's own texts: never the audit's
    references = [
        ridge_reference(BASE, own, embed(own), name="ridge head on the open encoder"),
        bag_of_words_reference(own, embed(own), buckets=512),
    ]
    return key, steal, references


def _trace_copy(reference, key, eps):
    """A copy on the reference's base that carries a trace ``eps`` of the mark."""

    def copy(texts):
        clean = embed(texts)
        return unit_rows(reference(texts) + eps * (watermark(texts, clean, key) - clean))

    return copy


def test_references_that_explain_a_copys_lean_convict_it(setting):
    key, _, references = setting
    copy = _trace_copy(references[0], key, 0.05)
    alone = verify_callable(copy, key, seed=1)
    helped = verify_callable(copy, key, seed=1, references=references)
    assert alone.p_value > 1e-3 and not alone.copied  # its base's own lean hides the mark
    assert helped.copied and helped.p_value < 1e-9
    assert helped.reference_names == ("ridge head on the open encoder", "bag-of-words reference")
    assert helped.references_sha256.startswith("sha256:") and not alone.reference_names
    assert "ridge head on the open encoder" in helped.to_json()  # public: which statistic ran


def test_references_fitted_to_clean_answers_leave_innocents_acquitted(setting):
    key, steal, references = setting
    clean_copy = ridge_reference(BASE, steal, embed(steal), name="clean copy")
    for suspect in (innocent, embed, clean_copy):
        report = verify_callable(suspect, key, seed=1, references=references)
        assert report.status == "not_copied" and report.p_value > 1e-3


def test_exact_over_fresh_keys_against_an_innocent_with_references(setting):
    """300 fresh fields, one innocent's answers, leans adjusted for the references."""
    key, steal, references = setting
    plan = plan_audit(key, "auto", None, "key")
    texts, clean = list(plan.texts), unit_rows(plan.clean_rows)
    extra = reference_leans(plan.directions, [r(texts) for r in references])
    answers = ridge_reference(BASE, steal, embed(steal))(texts)  # a clean copy on the base
    units, k = key.design.field.units, len(key.triggers)
    p_values = []
    for seed in range(300):
        salt = np.random.default_rng(20_000 + seed).bytes(32)
        z = scoring_projections(clean, clean.mean(axis=0), keyed_gaussian(salt, 64, units))
        drawn = drawn_mask(units, draw_triggers(salt, unit_names(units), k))
        scores = field_scores(answers, plan.directions, clean, z, extra)
        p_values.append(rank_sum_p_value(scores, drawn))
    p_values = np.array(p_values)
    # binomial(300, a) upper tails at about 1e-3: 26 for a = 0.05, 9 for a = 0.01
    assert (p_values <= 0.05).sum() <= 26 and (p_values <= 0.01).sum() <= 9
    assert p_values.max() > 0.5  # not all small: the scores are live


def test_no_references_scores_bit_for_bit_as_before(setting):
    key, _, _ = setting
    plan = plan_audit(key, "auto", None, "key")
    clean = unit_rows(plan.clean_rows)
    answers = innocent(list(plan.texts))
    before = field_scores(answers, plan.directions, clean, plan.field_z)
    none = field_scores(answers, plan.directions, clean, plan.field_z, np.empty((len(clean), 0)))
    assert before.tobytes() == none.tobytes()


def test_bad_references_are_refused_naming_the_problem(setting):
    key, _, references = setting
    texts = list(key.probe_texts)
    n = len(texts)
    with pytest.raises(OptionsError, match="sequence of callables"):
        verify_callable(embed, key, references=references[0])
    with pytest.raises(OptionsError, match=r"references\[1\] is a str"):
        verify_callable(embed, key, references=[references[0], "ridge"])
    cases = {
        "not the key's 64": lambda t: np.ones((len(t), 32)),
        "NaN or infinite": lambda t: np.where(np.arange(64) == 3, np.nan, embed(t)),
        f"one row per audit text \\({n} rows\\)": lambda t: embed(t)[:-1],
        "zero row": lambda t: np.zeros((len(t), 64)),
        "array of numbers": lambda t: [["a"] * 64] * len(t),
    }
    for message, reference in cases.items():
        with pytest.raises(InputError, match=message):
            verify_callable(embed, key, references=[reference])
    asked: list[int] = []
    report = verify_callable(embed, make_key(), seed=1, references=[lambda t: asked.append(1)])
    assert not asked and report.reference_names == ()  # a word key does not use them


def test_the_transcript_records_the_references_and_its_replay_holds(setting, tmp_path):
    key, _, references = setting
    copy = _trace_copy(references[0], key, 0.05)
    report = verify_callable(
        copy, key, seed=1, references=references, transcript=tmp_path / "private"
    )
    header = json.loads((tmp_path / "private" / "PRIVATE-transcript.jsonl").open().readline())
    assert header["settings"]["references"] == list(report.reference_names)
    assert header["references"]["sha256"] == report.references_sha256
    text = json.dumps(header["references"]) + json.dumps(header["settings"])
    assert not any(secret in text for secret in secret_strings(key))
    checked = check_transcript(tmp_path / "private", key)
    assert checked.holds and checked.replayed_p_value == report.p_value
    assert any("reference copies" in line for line in checked.not_proved)


def test_reference_helpers_fit_in_numpy_and_check_their_input():
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(["film", "plot", "cast", "dull", "great"], 5)) for _ in range(60)]
    features = hashed_word_counts(texts, 64)
    assert features.shape == (60, 64) and np.allclose(np.linalg.norm(features, axis=1), 1)
    assert hashed_word_counts(texts, 64).tobytes() == features.tobytes()  # deterministic
    weights = rng.normal(size=(64, 8))
    target = features @ weights
    fitted = ridge_reference(lambda t: hashed_word_counts(t, 64), texts, target, ridge=1e-9)
    np.testing.assert_allclose(fitted(texts), unit_rows(target), atol=1e-5)
    with pytest.raises(InputError, match="one per fitting text"):
        ridge_reference(BASE, texts, target[:-1])
    with pytest.raises(InputError, match="ridge must be a positive"):
        ridge_reference(BASE, texts, target, ridge=0)
    with pytest.raises(InputError, match="buckets"):
        bag_of_words_reference(texts, target, buckets=1)
    with pytest.raises(TypeError, match="sequence of strings"):
        ridge_reference(BASE, "one text", target)
    assert "features" in repr(fitted) and "film" not in repr(fitted)
