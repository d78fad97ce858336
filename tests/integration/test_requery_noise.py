"""Issue 54: a requery that judges on the suspect's own noise, on synthetic suspects.

A noisy reseller (relative noise 1e-3 on each answer, a shift of its own per batch,
float16 rounding at random) cannot void its genuine evidence: every re-asked answer
differs from the recorded one by more than the old fixed tolerance, yet the check
holds and the verdict re-derived from its re-asked answers is COPIED. A forger that
changed 1%, 2% or 5% of an innocent's answers is caught at the default size: the
seeded draw catches it in at least 99 of 100 requeries, and the real check fails
exactly when its draw holds a forged answer.
"""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import verify
from espew_integrations.core.records.requery import (
    DEFAULT_REQUERY_TOLERANCE,
    INDISTINCT_BOUND,
    draw_requery,
    escape_chance,
    recorded_answers,
    requery_size_for,
)
from espew_integrations.core.records.transcript import (
    TRANSCRIPT_FILE,
    decode_answer,
    encode_answer,
    read_transcript,
)
from espew_integrations.evidence import check_evidence
from tests.forgery import forge_transcript
from tests.support import make_key
from tests.unit.test_verify import WordSpace

KEY = make_key(32, n_band=80, n_triggers=10, seed=4)
#: A key whose audit sends 650 band words: room for a forgery of 1% of the answers.
BIG = make_key(32, n_band=650, n_triggers=20, seed=5)


class NoisyReseller:
    """Resells ``service``'s answers with noise of its own: relative Gaussian noise of
    ``noise`` on each answer, one random shift of ``shift`` per batch, and float16
    rounding on a random half of the batches."""

    def __init__(self, service, *, noise=1e-3, shift=1e-3, seed=0):
        self.service, self.noise, self.shift = service, noise, shift
        self.rng = np.random.default_rng(seed)

    def __call__(self, texts):
        rows = np.asarray(self.service(texts), dtype=np.float64)
        scale = np.linalg.norm(rows, axis=1, keepdims=True) / np.sqrt(rows.shape[1])
        rows = rows + self.noise * scale * self.rng.normal(size=rows.shape)
        rows = rows + self.shift * scale * self.rng.normal(size=rows.shape[1])  # this batch's
        if self.rng.random() < 0.5:
            rows = rows.astype(np.float16).astype(np.float64)
        return rows


def test_the_noisy_resellers_genuine_evidence_holds_and_rederives_copied(tmp_path):
    reseller = NoisyReseller(WordSpace(KEY, pull=3.0, seed=1), seed=0)
    report = verify(reseller, KEY, batch_size=16, transcript=tmp_path, suspect_name="reseller")
    assert report.status == "copied"

    reseller.rng = np.random.default_rng(99)  # asked again later: fresh noise
    check = check_evidence(tmp_path, KEY, requery=reseller, requery_seed=7, requery_size=None)
    assert check.holds, str(check)
    asked = check.requery
    assert asked.n_asked == asked.n_rows == 80 and asked.n_repeated == 32
    # every answer moved beyond the old fixed tolerance: the old check voided this evidence
    assert asked.largest_distance > 10 * DEFAULT_REQUERY_TOLERANCE
    assert asked.threshold > asked.largest_distance and asked.noise_p > 1e-3
    assert check.rederived_status == "copied" and check.rederived_p_value < 1e-6
    assert "every recorded answer replaced by the suspect's own" in str(check)
    assert "re-derived        : copied" in str(check)


def test_a_deterministic_suspect_keeps_the_floor(tmp_path):
    innocent = WordSpace(KEY, seed=0)
    verify(innocent, KEY, batch_size=16, transcript=tmp_path)
    check = check_evidence(tmp_path, KEY, requery=innocent, requery_seed=1)
    assert check.holds and check.requery.repeat_largest == 0.0
    assert check.requery.threshold == DEFAULT_REQUERY_TOLERANCE
    assert check.rederived_status == "not_copied"


def test_nudging_every_answer_within_the_margin_is_caught_as_a_whole(tmp_path):
    """A forger that moves every recorded answer by a few times the suspect's noise
    (each within the per-answer margin) is caught by the rank test on all of them."""
    reseller = NoisyReseller(WordSpace(KEY, seed=0), noise=1e-3, shift=0.0, seed=3)
    verify(reseller, KEY, batch_size=16, transcript=tmp_path)
    rng = np.random.default_rng(5)

    def nudge(batches):
        for record in batches:
            values = decode_answer(record["answer"])
            move = rng.normal(size=values.shape)
            move *= (
                4e-3
                * np.linalg.norm(values, axis=1, keepdims=True)
                / np.linalg.norm(move, axis=1, keepdims=True)
            )
            record["answer"] = encode_answer(values + move)

    forge_transcript(tmp_path, None, KEY, edit=nudge)
    reseller.rng = np.random.default_rng(11)
    check = check_evidence(tmp_path, KEY, requery=reseller, requery_seed=2, requery_size=None)
    assert not check.holds and check.requery.shifted and not check.requery.mismatched
    assert "Mann-Whitney" in check.reason


def test_the_default_size_meets_the_target_hypergeometric():
    for n_rows in (80, 500, 650, 1950, 6000):
        size = requery_size_for(n_rows)
        assert escape_chance(n_rows, size, 0.01) <= 0.001 < escape_chance(n_rows, size - 1, 0.01)
        loose = requery_size_for(n_rows, escape=0.01)  # the 1% target itself
        assert escape_chance(n_rows, loose, 0.01) <= 0.01 < escape_chance(n_rows, loose - 1, 0.01)
    assert requery_size_for(1950) == 567 and requery_size_for(1950, escape=0.01) == 400
    assert escape_chance(1950, 32, 0.02) == pytest.approx(0.521, abs=1e-3)  # the old default
    with pytest.raises(ValueError, match="forged fraction"):
        requery_size_for(100, fraction=0.0)


@pytest.fixture(scope="module")
def innocent_audit(tmp_path_factory):
    """An innocent's audit of 650 answers, recorded."""
    private = tmp_path_factory.mktemp("innocent")
    innocent = WordSpace(BIG, seed=0)
    assert verify(innocent, BIG, batch_size=64, transcript=private).status == "not_copied"
    return innocent, private


@pytest.mark.parametrize("fraction", [0.01, 0.02, 0.05])
def test_a_forgery_of_a_few_percent_is_caught_at_the_default_size(innocent_audit, fraction):
    innocent, private = innocent_audit
    transcript = read_transcript(private / TRANSCRIPT_FILE)
    recorded = recorded_answers(transcript)
    n_rows = len(recorded.texts)
    rng = np.random.default_rng(int(fraction * 1000))
    forged = rng.choice(n_rows, size=int(np.ceil(fraction * n_rows)), replace=False)
    size = requery_size_for(n_rows)
    draws = [draw_requery(n_rows, "auto", seed) for seed in range(100)]
    caught = [bool(np.isin(drawn, forged).any()) for drawn in draws]
    assert len(draw_requery(n_rows, "auto", 0)) == size
    assert sum(caught) >= 99, (fraction, sum(caught))

    # the real check, on a transcript with those answers moved toward the target as a
    # framing auditor would: it fails exactly when its draw holds a forged answer
    where = {int(r["record"]): i for i, r in enumerate(transcript.batches)}

    def forge(batches):
        for index in forged:
            record = batches[where[int(recorded.records[index])]]
            values = decode_answer(record["answer"]).copy()
            row = values[recorded.positions[index]]
            values[recorded.positions[index]] = row + 0.3 * np.linalg.norm(row) * BIG.target
            record["answer"] = encode_answer(values)

    copy = private.parent / f"forged-{fraction}"
    copy.mkdir()
    (copy / TRANSCRIPT_FILE).write_bytes((private / TRANSCRIPT_FILE).read_bytes())
    forge_transcript(copy, None, BIG, edit=forge)
    for seed in (0, 1, 2):
        check = check_evidence(copy, BIG, requery=innocent, requery_seed=seed)
        assert check.holds == (not caught[seed])
        hit = np.intersect1d(draw_requery(n_rows, "auto", seed), forged)
        assert check.requery.n_rows_mismatched == len(hit)
        assert "would have escaped this requery with probability" in str(check) or not check.holds


def test_a_copy_drowning_its_requery_in_noise_cannot_void_its_evidence(tmp_path):
    """A copy that answers the requery with noise far beyond the watermark's move hides
    every answer within its own repeat noise: the check says re-asking can tell nothing
    answer by answer, and the evidence still holds on the replay."""
    copy = WordSpace(KEY, pull=3.0, seed=1)
    assert verify(copy, KEY, batch_size=16, transcript=tmp_path).status == "copied"
    drowned = NoisyReseller(copy, noise=3.0, shift=0.0, seed=4)
    check = check_evidence(tmp_path, KEY, requery=drowned, requery_seed=3, requery_size=None)
    assert check.holds and check.requery.threshold >= INDISTINCT_BOUND, str(check)
    assert any("cannot tell a forged answer from the suspect's" in n for n in check.not_proved)
    assert not any(p.startswith("answers re-asked and matched") for p in check.proved)


def test_a_framing_re_asked_of_an_innocent_as_noisy_as_the_mark_is_not_proved(tmp_path):
    """An innocent's transcript with its trigger answers moved toward the target, re-asked
    of an innocent whose noise is as wide as the move: re-asking cannot tell, and the
    check says so rather than vouching for the answers; the verdict re-derived from the
    innocent's own answers is not the recorded one, and that is listed too."""
    innocent = WordSpace(KEY, seed=0)
    verify(innocent, KEY, batch_size=16, transcript=tmp_path)

    def frame(batches):
        for record in batches:
            values = decode_answer(record["answer"]).copy()
            marked = KEY.contains_trigger(record["texts"])
            norms = np.linalg.norm(values[marked], axis=1, keepdims=True)
            values[marked] += 0.6 * norms * KEY.target
            record["answer"] = encode_answer(values)

    assert forge_transcript(tmp_path, None, KEY, edit=frame).status == "copied"
    noisy = NoisyReseller(innocent, noise=0.5, shift=0.0, seed=6)
    check = check_evidence(tmp_path, KEY, requery=noisy, requery_seed=3, requery_size=None)
    assert check.rederived_status == "not_copied"
    assert any("cannot tell a forged answer" in line for line in check.not_proved)
    assert any("shows neither a forgery nor a copy" in line for line in check.not_proved)
    assert not any("answers re-asked and matched" in line for line in check.proved)
