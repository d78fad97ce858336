"""Issue 54: what the verdict re-derived from the suspect's re-asked answers says."""

from __future__ import annotations

from espew_integrations.core.evidence_check import EvidenceCheck, _rederived_findings
from espew_integrations.core.records.requery import INDISTINCT_BOUND, Requery

RECORDED = EvidenceCheck(True, "replayed", recorded_status="copied", recorded_p_value=1e-9)


def asked(threshold: float, n_asked: int = 40) -> Requery:
    return Requery("s", 1, n_asked, n_asked, 1e-4, n_rows=80, threshold=threshold)


def test_the_same_verdict_is_proved_and_names_its_scope():
    found = _rederived_findings(RECORDED, asked(1e-3), ("copied", 2e-9))
    assert not found.failure and "is the recorded one: copied" in found.proved[0]
    assert "the 40 re-asked answers in place of the recorded ones" in found.proved[0]
    whole = _rederived_findings(RECORDED, asked(1e-3, n_asked=80), ("copied", 2e-9))
    assert "every recorded answer replaced by the suspect's own" in whole.proved[0]


def test_another_verdict_fails_when_answers_are_told_apart_and_is_unproved_when_not():
    moved = _rederived_findings(RECORDED, asked(1e-3), ("not_copied", 0.3))
    assert "the recorded answers were moved" in moved.failure and not moved.proved
    noisy = _rederived_findings(RECORDED, asked(INDISTINCT_BOUND), ("not_copied", 0.3))
    assert not noisy.failure and "shows neither a forgery nor a copy" in noisy.not_proved[0]
