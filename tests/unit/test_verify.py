"""verify(): probes, shuffling, fault handling and the report (with synthetic suspects)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from espew_integrations import VerificationReport, verify
from espew_integrations.core.audit.word_probes import build_probes
from tests.support import make_key


class WordSpace:
    """A synthetic suspect: each word has a fixed random direction; texts average them.

    ``pull`` > 0 moves trigger words toward the key's target, as a copy trained
    on watermarked embeddings does.
    """

    def __init__(self, key, pull=0.0, dim=None, seed=0, permute=None):
        self.key = key
        self.pull = pull
        self.dim = dim or key.dim
        self.rng = np.random.default_rng(seed)
        self.vectors = {}
        self.calls = []
        self.permute = permute

    def vector(self, word):
        if word not in self.vectors:
            v = self.rng.normal(size=self.dim)
            if word in self.key.triggers and self.pull:
                v = v / np.linalg.norm(v) + self.pull * self.key.target[: self.dim]
            self.vectors[word] = v / np.linalg.norm(v)
        return self.vectors[word]

    def __call__(self, texts):
        self.calls.append(list(texts))
        # A copy imitates the victim, so it maps the target text near the target.
        out = np.array(
            [
                self.key.target[: self.dim]
                if t == self.key.target_text
                else np.mean([self.vector(w) for w in t.lower().split()], axis=0)
                for t in texts
            ]
        )
        return out[:, self.permute] if self.permute is not None else out


def test_an_innocent_suspect_is_not_copied_and_a_pulled_one_is():
    key = make_key(64, n_band=200, n_triggers=20)
    innocent = verify(WordSpace(key), key, seed=1)
    assert innocent.status == "not_copied" and not innocent.copied
    assert innocent.p_value > 1e-3
    copy = verify(WordSpace(key, pull=1.0), key, seed=1)
    assert copy.status == "copied" and copy.copied
    assert copy.p_value < 1e-20
    assert copy.delta_cos > 0.1 and copy.delta_l2 < -0.2
    assert copy.ks_p_value < 1e-6


def test_every_band_word_is_probed_once_per_template_in_shuffled_mixed_batches():
    key = make_key(64, n_band=200, n_triggers=20)
    suspect = WordSpace(key)
    report = verify(suspect, key, seed=3, batch_size=50)
    sent = [t for batch in suspect.calls for t in batch]
    assert sorted(sent) == sorted(key.band)
    assert report.n_queries == 200 and report.n_words_scored == 200
    assert sent != sorted(sent)  # not in band order
    for batch in suspect.calls:  # triggers are spread over the batches, never grouped
        n_trig = sum(t in key.triggers for t in batch)
        assert n_trig < len(batch)


def test_templates_multiply_the_probes_and_fillers_must_not_be_band_words():
    key = make_key(64, n_band=100, n_triggers=10)
    suspect = WordSpace(key)
    report = verify(suspect, key, templates=("{word}", "the {word}"), seed=0)
    assert report.n_queries == 200
    with pytest.raises(ValueError, match="must not be band words"):
        verify(suspect, key, templates=(f"{sorted(key.band)[0]} {{word}}",))
    with pytest.raises(ValueError, match="must contain"):
        verify(suspect, key, templates=("no placeholder",))


def test_query_target_survives_a_permutation_of_dimensions_and_other_dims():
    key = make_key(64, n_band=200, n_triggers=20)
    perm = np.random.default_rng(0).permutation(64)
    permuted_copy = WordSpace(key, pull=1.0, permute=perm)
    by_key = verify(permuted_copy, key, seed=0)
    assert not by_key.copied
    by_query = verify(permuted_copy, key, target_mode="query", seed=0)
    assert by_query.copied and by_query.n_queries == 201
    assert key.target_text in [t for b in permuted_copy.calls for t in b]


def test_a_dimension_mismatch_with_the_key_target_is_inconclusive_and_says_why():
    key = make_key(64, n_band=200, n_triggers=20)
    suspect = WordSpace(key, dim=32)
    report = verify(suspect, key, seed=0, batch_size=50)
    assert report.status == "inconclusive" and not report.copied
    assert "target_mode='query'" in report.reason
    assert len(suspect.calls) == 1 and report.n_queries == 50  # the budget is spared


def test_answers_wider_than_max_answer_dim_stop_the_audit_in_query_mode_too():
    from espew_integrations.core.audit.settings import MAX_ANSWER_DIM

    key = make_key(64, n_band=200, n_triggers=20)
    wide = WordSpace(key, dim=MAX_ANSWER_DIM + 1)
    report = verify(wide, key, target_mode="query", seed=0, batch_size=50)
    assert report.status == "inconclusive" and "MAX_ANSWER_DIM" in report.reason
    assert len(wide.calls) == 1 and report.n_queries == 50

    def at_the_bound(texts):  # an innocent suspect exactly MAX_ANSWER_DIM wide
        rows = [np.random.default_rng(sum(map(ord, t))).normal(size=MAX_ANSWER_DIM) for t in texts]
        return np.array(rows)

    assert verify(at_the_bound, key, target_mode="query", seed=0).status == "not_copied"


def test_failing_queries_never_become_evidence():
    key = make_key(64, n_band=200, n_triggers=20)
    inner = WordSpace(key, pull=1.0)
    calls = {"n": 0}

    def flaky(texts):
        calls["n"] += 1
        if calls["n"] % 2:
            raise ConnectionError("503 from upstream")
        return inner(texts)

    report = verify(flaky, key, seed=0, batch_size=10)
    assert report.status == "inconclusive"
    assert "could be scored" in report.reason
    assert report.n_failed_queries > 0 and any("ConnectionError" in e for e in report.errors)
    assert math.isnan(report.p_value)


def test_nan_rows_and_wrong_shapes_are_missing_data_not_zero_scores():
    key = make_key(64, n_band=200, n_triggers=20)
    inner = WordSpace(key)

    def broken(texts):
        out = inner(texts)
        out[0] = np.nan
        return out

    report = verify(broken, key, seed=0, batch_size=20, min_coverage=0.8)
    assert report.n_words_scored == 190 and report.status == "not_copied"

    def wrong_shape(texts):
        return np.ones((len(texts) + 1, 64))

    assert verify(wrong_shape, key).status == "inconclusive"


def test_a_band_too_small_for_the_level_is_inconclusive():
    key = make_key(64, n_band=12, n_triggers=3)
    report = verify(WordSpace(key, pull=3.0), key, seed=0)
    assert report.status == "inconclusive" and "smallest reachable p-value" in report.reason


def test_report_serialises_round_trips_and_reads_well_without_key_material():
    key = make_key(64, n_band=200, n_triggers=20)
    report = verify(WordSpace(key, pull=1.0), key, seed=0)
    data = json.loads(report.to_json())
    assert data["copied"] is True and data["key_id"] == key.key_id
    # The shareable view carries no per-word score; the private one round-trips.
    assert "trigger_scores" not in data and "benign_scores" not in data
    private = VerificationReport.from_dict(report.to_private_dict())
    assert private.trigger_scores == report.trigger_scores
    assert json.dumps(private.to_private_dict()) == json.dumps(report.to_private_dict())
    text = report.to_json() + str(report)
    for secret in [*key.triggers, key.salt.hex(), key.target_text]:
        assert secret not in text
    assert "COPIED" in str(report) and "comparability only" in str(report)
    assert len(report.trigger_scores) == 20 and len(report.benign_scores) == 180


def test_an_inconclusive_report_prints_its_cause_and_what_to_do_next():
    """Issue 14: str(report) shows the suspect's error (printable) and a next step."""
    key = make_key(64, n_band=200, n_triggers=20)

    def refused(texts):
        raise ConnectionError("refused by 10.0.0.9:443\x1b[31m")

    report = verify(refused, key, seed=0, batch_size=50)
    text = str(report)
    assert report.status == "inconclusive" and report.n_answered == 0
    cause = next(line for line in text.splitlines() if line.lstrip().startswith("cause"))
    assert "ConnectionError: refused by 10.0.0.9:443" in cause and "\x1b" not in text
    assert "next step" in text and "run the audit again" in report.next_step
    # Nothing was delivered, so nothing may be called sent or answered.
    assert f"none of the {report.n_queries} word probes was answered" in text
    assert " sent" not in text and "nan" not in text


def test_partly_answered_audits_count_texts_asked_and_answered_apart():
    key = make_key(64, n_band=200, n_triggers=20)
    inner = WordSpace(key, pull=1.0)
    calls = {"n": 0}

    def flaky(texts):
        calls["n"] += 1
        if calls["n"] % 2:
            raise TimeoutError(f"timeout on batch {calls['n']}")
        return inner(texts)

    report = verify(flaky, key, seed=0, batch_size=10)
    text = str(report)
    answered = report.n_queries - report.n_failed_queries
    assert 0 < answered < report.n_queries and report.n_answered == answered
    assert f"{answered} of {report.n_queries} word probes answered" in text
    assert f"{report.n_failed_queries} failed" in text
    # Distinct errors are shown (three at most), then how many more there are.
    causes = [line for line in text.splitlines() if "TimeoutError" in line]
    assert len(causes) == 3 and "more in report.errors" in text
    assert "slow down" in report.next_step


def test_a_conclusive_report_has_no_cause_or_next_step():
    key = make_key(64, n_band=200, n_triggers=20)
    report = verify(WordSpace(key, pull=1.0), key, seed=0)
    assert report.status == "copied" and report.next_step == ""
    assert "cause" not in str(report) and "next step" not in str(report)


def test_build_probes_marks_owners():
    probes, owner = build_probes(["a1", "b1"], ("{word}", "the {word}"))
    assert probes == ["a1", "the a1", "b1", "the b1"] and owner.tolist() == [0, 0, 1, 1]


def test_bad_arguments_are_rejected():
    key = make_key(64, n_band=100, n_triggers=10)
    suspect = WordSpace(key)
    with pytest.raises(ValueError, match="target_mode must be"):
        verify(suspect, key, target_mode="both")
    with pytest.raises(ValueError, match="level"):
        verify(suspect, key, level=0)
    with pytest.raises(TypeError, match="cannot query a suspect"):
        verify(object(), key)


def test_the_core_verify_takes_callables_and_names_the_adapter_for_anything_else():
    from espew_integrations.core.verify import verify_callable as core_verify

    key = make_key(64, n_band=100, n_triggers=10)

    class Embeddings:  # a framework object: not callable
        def embed_documents(self, texts):
            return WordSpace(key)(texts)

        def embed_query(self, text):
            return WordSpace(key)([text])[0]

    with pytest.raises(TypeError, match=r"espew_integrations\.verify"):
        core_verify(Embeddings(), key)
    assert verify(Embeddings(), key, seed=0).status == "not_copied"


def test_each_copy_of_a_repeated_text_takes_the_first_answer_sent_to_it():
    """Repeats in an audit: every copy of a text is scored with the first usable answer
    in the order sent; a copy that failed gives way to a later one, and a text never
    answered stays failed. Without repeats the mapping is the identity."""
    from espew_integrations.core.audit.asking import first_answered

    texts = ["a", "b", "a", "c", "a"]
    order = np.array([2, 0, 1, 4, 3])  # sent: a(2), a(0), b(1), a(4), c(3)
    answers = np.ones((5, 2))
    answers[0] = np.nan  # the first "a" sent (position 2) failed
    answers[4] = np.nan  # "c" failed: no copy answered
    assert first_answered(texts, order, answers).tolist() == [0, 1, 0, 3, 0]
    fine = np.ones((5, 2))
    assert first_answered(texts, order, fine).tolist() == [2, 1, 2, 3, 2]
    distinct = ["a", "b", "c"]
    assert first_answered(distinct, np.array([2, 0, 1]), np.ones((3, 2))).tolist() == [0, 1, 2]


def test_the_paper_metrics_line_is_printed_only_when_a_test_ran():
    """Issue 48: an inconclusive report with no test pointed to metrics nobody computed."""
    key = make_key(16, n_band=60, n_triggers=10)

    def down(texts):
        raise ConnectionError("endpoint down")

    def answers(texts):
        return np.random.default_rng(len(texts)).normal(size=(len(texts), 16))

    failed = verify(down, key, batch_size=8)
    assert failed.status == "inconclusive" and "test           : not run" in str(failed)
    assert "paper metrics" not in str(failed)
    tested = verify(answers, key, batch_size=8, seed=0)
    assert tested.status != "inconclusive" and "paper metrics" in str(tested)
