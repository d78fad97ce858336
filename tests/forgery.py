"""The dishonest auditor of issue 45, done honestly: forge a conviction from an innocent's
transcript with nothing but the package's public functions.

Take the transcript of an audit that cleared a suspect, replace every recorded answer
with another service's answers to the same texts (the auditor's own watermarked
service), compute the verdict those answers give with ``verify`` itself (as the
evidence check's replay will), write the end record, re-chain with
:func:`~espew_integrations.core.records.transcript.chain_records`, and rewrite the digest the
private report names (and, optionally, a public report to match). Nothing here is
secret or hard: that is the point the requery and the anchors answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from espew_integrations import verify
from espew_integrations.core.audit.recorder import utc_now
from espew_integrations.core.audit.subject import REPLAYED_SETTINGS
from espew_integrations.core.records.transcript import (
    TRANSCRIPT_FILE,
    chain_records,
    decode_answer,
    encode_answer,
    read_transcript,
)


def forge_transcript(
    private: Path,
    service: Callable[[list[str]], Any],
    key: Any,
    *,
    edit: Callable[[list[dict[str, Any]]], None] | None = None,
) -> Any:
    """Rewrite the transcript in ``private`` so that its answers are ``service``'s (or,
    with ``edit``, whatever ``edit`` makes of the batch records), its end record the
    verdict they give and its chain intact; returns that verdict's report."""
    genuine = read_transcript(private / TRANSCRIPT_FILE)
    batches = [dict(record) for record in genuine.batches]
    if edit is None:
        for record in batches:
            if "answer" in record:
                answer = np.asarray(service(list(record["texts"])), dtype=np.float32)
                record["answer"] = encode_answer(answer)
    else:
        edit(batches)
    report = _replayed_verdict(genuine.header, batches, key)
    end = {
        "kind": "end",
        "finished": utc_now(),
        "status": report.status,
        "p_value": report.p_value,
        "report": report.to_dict(public=False),
    }
    commit = [] if genuine.commit is None else [dict(genuine.commit)]
    data, digest = chain_records([genuine.header, *batches, *commit, end])
    (private / TRANSCRIPT_FILE).write_bytes(data)
    scores = private / "PRIVATE-word-scores.json"
    if scores.is_file():
        private_report = json.loads(scores.read_text())
        private_report["transcript_digest"] = digest
        scores.write_text(json.dumps(private_report))
    return _with_digest(report, digest)


def _replayed_verdict(header: dict[str, Any], batches: Sequence[dict[str, Any]], key: Any) -> Any:
    """The verdict ``verify`` gives on the recorded answers, asked in the recorded order."""
    answers = iter(batches)

    def recorded(texts: list[str]) -> np.ndarray:
        record = next(answers)
        assert record["texts"] == list(texts)
        return decode_answer(record["answer"])

    settings = {name: header["settings"].get(name) for name in REPLAYED_SETTINGS}
    settings.update(seed=int(header["shuffle_seed"]), deadline=None)
    names = header.get("suspect") or {}
    return verify(
        recorded,
        key,
        **settings,
        suspect_name=names.get("name", ""),
        suspect_label=names.get("label", ""),
    )


def _with_digest(report: Any, digest: str) -> Any:
    import dataclasses

    return dataclasses.replace(report, transcript_digest=digest)
