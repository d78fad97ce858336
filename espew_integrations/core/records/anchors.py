"""What a transcript's commit record and its anchors prove: when the records existed.

The commit record holds the commitment (the chain's head over every text and
answer) written before anything was scored, and what each anchor was told: a
timestamp authority's token over it, the digest sent to the suspect.
:func:`anchor_findings` says what they prove to an arbiter, or why they fail.
"""

from __future__ import annotations

from collections.abc import Callable

from .findings import Findings
from .transcript import Transcript

__all__ = ["TimestampCheck", "anchor_findings"]

#: Verifies a commit record's ``timestamp`` anchor against the commitment.
TimestampCheck = Callable[[dict, str], Findings]


def anchor_findings(
    transcript: Transcript, timestamp_check: TimestampCheck | None, require_timestamp: bool
) -> Findings:
    """What the commit record and its anchors prove, or why they fail."""
    commit = transcript.commit
    if commit is None:
        missing = Findings(
            not_proved=(
                "that the answers were fixed before the verdict: the transcript has no commit "
                "record (written by an older version)",
            )
        )
        return missing + _required(require_timestamp, "it has no commit record")
    anchors = commit.get("anchors") or {}
    found = Findings(
        proved=(
            f"the commitment {transcript.commitment} over every text and answer is recorded "
            "before the verdict (by the auditor's own code: an anchor below proves it to others)",
        )
    )
    stamp = anchors.get("timestamp")
    if not isinstance(stamp, dict):
        found += Findings(
            not_proved=(
                "when the records existed: no timestamp (espew verify --timestamp-url URL); "
                "records could have been rewritten and the chain rebuilt at any time",
            )
        )
        found += _required(require_timestamp, "no timestamp was taken")
    elif "error" in stamp:
        found += Findings(
            not_proved=(f"when the records existed: the timestamp failed: {stamp['error']}",)
        )
        found += _required(require_timestamp, "its timestamp failed")
    elif timestamp_check is None:
        found += Findings(
            not_proved=(
                "when the records existed: a timestamp is recorded but was not verified "
                "(espew_integrations.evidence.check_evidence or espew evidence check do)",
            )
        )
        found += _required(require_timestamp, "its timestamp was not verified")
    else:
        checked = timestamp_check(stamp, transcript.commitment)
        found += checked
        if not checked.proved and not checked.failure:
            found += _required(require_timestamp, "its timestamp's signature was not checked")
    return found + _suspect_anchor(transcript, anchors.get("suspect"))


def _required(require_timestamp: bool, why: str) -> Findings:
    if not require_timestamp:
        return Findings()
    return Findings(failure=f"a verified timestamp is required, and {why}")


def _suspect_anchor(transcript: Transcript, sent: object) -> Findings:
    """What the digest sent to the suspect proves (only the suspect's logs can confirm it)."""
    if not isinstance(sent, dict):
        return Findings(
            not_proved=(
                "that the suspect was told the commitment: it was not sent (--send-digest)",
            )
        )
    if sent.get("digest") != transcript.commitment:
        return Findings(
            failure=f"the digest recorded as sent to the suspect ({sent.get('digest')!r}) is not "
            "this transcript's commitment: records were edited after it was sent"
        )
    if "error" in sent:
        return Findings(
            not_proved=(
                f"that the suspect was told the commitment: sending failed: {sent['error']}",
            )
        )
    return Findings(
        not_proved=(
            f"that the suspect received the commitment: the transcript says it was sent in "
            f"the {sent.get('header')} header at {sent.get('sent')}; only the suspect's own "
            "logs can confirm it",
        )
    )
