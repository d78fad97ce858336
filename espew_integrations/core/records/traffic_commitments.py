"""Commitments to each account's traffic sample, chained as they are collected.

Why: an audit's false-positive rate is exact only if its texts were chosen
without looking at the suspect's answers. The key's own audit is fixed by the
key's commitment, published at keygen before any suspect existed. A traffic
audit (``key.with_audit(texts, ..., audit_round=k)``) draws from a corpus the
auditor hands in, and an auditor that asked an innocent thousands of texts can
keep those whose answers lean its way and convict it. So the pool of a traffic
audit must be what the server itself collected, committed *while* it collected
it, and the audit drawn from that pool by a rule nobody can steer:

- **The commitment log.** At every flush, :class:`.traffic_sample.TrafficSample`
  appends one record per account whose sample changed to ``<sample>.commitments``
  (:func:`commitments_path`): the account, the number of texts, the digest of its
  distinct texts (:func:`..keys.keygen.corpus_digest`, what ``with_audit`` records of its
  corpus), the time, and the SHA-256 chain (each record's ``digest`` covers the
  previous one's), so no entry can be changed, removed or back-dated without
  rebuilding every later one.
- **The public draw.** :func:`.traffic_sample.with_committed_audit` takes an
  account's latest committed pool, checks it is the sample file's, and draws the
  audit from exactly that pool with the key's own keyed draw (the same pool and
  options always give the same audit); the key's ``info["audit_pool"]`` names the
  entry. The auditor's remaining choices: the round (paid for: a round-``k``
  p-value is multiplied by ``k``), the entry (the evidence check counts the
  account's later ones), and ``with_audit``'s options (the audit's size, the
  probe mix), which the key records but nothing yet fixes in advance.
- **The check.** :func:`pool_tie` says whether a key's re-drawn audit is tied to
  an entry of a chain that holds, committed before the audit began
  (:func:`..evidence_check.check_transcript` refuses a re-drawn audit it cannot tie,
  unless told to take the auditor's word).

What the chain alone does not prove: *when* its entries were written. The server
is the provider's, and the provider is the auditor; an anchor of the chain's head
(a timestamp, or the head sent to a third party) is what proves an entry predates
the audit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..ground.errors import ESpeWError
from ..keys.keygen import corpus_digest
from .findings import Findings

__all__ = [
    "CHAIN_START",
    "COMMITMENTS_SUFFIX",
    "CommitmentError",
    "PoolTie",
    "append_commitments",
    "commitments_path",
    "latest_pool",
    "pool_findings",
    "pool_tie",
    "read_commitments",
]

#: The log sits beside the sample: ``traffic.jsonl`` -> ``traffic.jsonl.commitments``.
COMMITMENTS_SUFFIX = ".commitments"
#: The ``prev`` of the chain's first record.
CHAIN_START = "sha256:" + "0" * 64
_FIELDS = ("kind", "index", "time", "account", "n_texts", "pool_sha256", "prev")


class CommitmentError(ESpeWError, ValueError):
    """A commitment log that is broken, or holds no commitment for what was asked."""


def commitments_path(sample: str | os.PathLike[str]) -> Path:
    """Where the commitment log of the traffic sample at ``sample`` is kept."""
    path = Path(sample)
    return path.with_name(path.name + COMMITMENTS_SUFFIX)


def _chained(record: Mapping[str, Any]) -> str:
    body = json.dumps({name: record[name] for name in _FIELDS}, sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(b"espew-pool-commitment\x00" + body).hexdigest()


def read_commitments(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record of the commitment log at ``path``, its chain checked.

    Raises :class:`CommitmentError` naming the first record where the chain breaks
    (edited, removed, reordered or back-dated), or ``OSError`` when it cannot be read.
    """
    records: list[dict[str, Any]] = []
    prev = CHAIN_START
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines):
            try:
                record = json.loads(line)
                ok = isinstance(record, dict) and all(name in record for name in _FIELDS)
            except ValueError:
                ok = False
            if not ok:
                raise CommitmentError(f"commitment log {path}: record {number} is not a commitment")
            if record["index"] != number or record["prev"] != prev:
                raise CommitmentError(
                    f"commitment log {path}: chain broken at record {number} (a record before "
                    "it was removed, reordered or rewritten)"
                )
            if record.get("digest") != _chained(record):
                raise CommitmentError(
                    f"commitment log {path}: chain broken at record {number} (its fields were "
                    "edited)"
                )
            prev = record["digest"]
            records.append(record)
    return records


def append_commitments(
    path: str | os.PathLike[str], pools: Iterable[tuple[str | None, Sequence[str]]], time: str
) -> list[dict[str, Any]]:
    """Append one chained record per ``(account, texts)`` pool that changed since the
    account's last commitment to the log at ``path`` (created 0600), at ``time``
    (ISO 8601, UTC). The caller holds the sample's lock.

    Returns the records appended. Raises :class:`CommitmentError` when the log's
    chain is already broken: a broken log is never extended.
    """
    path = Path(path)
    existing = read_commitments(path) if path.exists() else []
    prev = existing[-1]["digest"] if existing else CHAIN_START
    last = {record["account"]: record["pool_sha256"] for record in existing}
    added: list[dict[str, Any]] = []
    for account, texts in pools:
        distinct = set(texts)
        digest = corpus_digest(distinct)
        if last.get(account) == digest:  # unchanged since its last commitment
            continue
        record: dict[str, Any] = {
            "kind": "pool",
            "index": len(existing) + len(added),
            "time": time,
            "account": account,
            "n_texts": len(distinct),
            "pool_sha256": digest,
            "prev": prev,
        }
        record["digest"] = prev = _chained(record)
        added.append(record)
    if added:
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(descriptor, "a", encoding="utf-8") as log:
            log.writelines(json.dumps(record, sort_keys=True) + "\n" for record in added)
    return added


def latest_pool(
    records: Sequence[Mapping[str, Any]], account: str | None
) -> Mapping[str, Any] | None:
    """``account``'s latest commitment in ``records`` (None if it has none)."""
    mine = [record for record in records if record["account"] == account]
    return mine[-1] if mine else None


@dataclasses.dataclass(frozen=True)
class PoolTie:
    """What :func:`pool_tie` found: ``tied`` when the key's audit corpus is a pool the
    chain committed before ``started``; ``problem`` says why not; ``later`` counts the
    account's commitments after the one used and before the audit began."""

    tied: bool
    problem: str = ""
    entry: Mapping[str, Any] | None = None
    later: int = 0
    n_records: int = 0
    head: str = ""


def pool_tie(info: Mapping[str, Any], log: str | os.PathLike[str], started: str) -> PoolTie:
    """Whether the audit a key's ``info`` records was drawn from a pool the commitment
    log at ``log`` committed before ``started`` (the audit's first record, ISO 8601)."""
    try:
        records = read_commitments(log)
    except (CommitmentError, OSError) as exc:
        return PoolTie(False, f"the commitment log cannot be trusted: {exc}")
    head = records[-1]["digest"] if records else CHAIN_START
    found: dict[str, Any] = dict(n_records=len(records), head=head)
    named = info.get("audit_pool")
    if not isinstance(named, Mapping):
        return PoolTie(False, "the key's audit names no committed pool", **found)
    entry = next((r for r in records if r["digest"] == named.get("digest")), None)
    if entry is None:
        return PoolTie(
            False, f"the pool the key names ({named.get('digest')}) is not in the log", **found
        )
    if entry["pool_sha256"] != info.get("audit_corpus_sha256"):
        return PoolTie(
            False,
            f"the audit was drawn from corpus {info.get('audit_corpus_sha256')}, not from the "
            f"committed pool {entry['pool_sha256']} (record {entry['index']})",
            entry=entry,
            **found,
        )
    if not entry["time"] < started:
        return PoolTie(
            False,
            f"the pool was committed at {entry['time']}, not before the audit began ({started})",
            entry=entry,
            **found,
        )
    later = sum(
        1
        for record in records[entry["index"] + 1 :]
        if record["account"] == entry["account"] and record["time"] < started
    )
    return PoolTie(True, entry=entry, later=later, **found)


def pool_findings(
    key: Any,
    started: str,
    pool_log: str | os.PathLike[str] | None,
    accept_auditor_pool: bool,
) -> Findings:
    """Whether the audit ``key`` holds had its texts fixed before any answer was seen
    (the audit began at ``started``), and by what: the key's own commitment, or a pool
    committed in the log at ``pool_log``; without either it fails, unless
    ``accept_auditor_pool`` takes the auditor's word (then it is "not proved")."""
    shared = key
    info = shared.info
    if "audit_corpus_sha256" not in info:  # the key's own audit, drawn at keygen
        return Findings(
            proved=(
                "the audit's texts are the key's own (round 1), drawn at keygen and bound by "
                f"the key's commitment ({shared.commitment()})",
            ),
            not_proved=(
                "that the key's commitment was published before the suspect was asked: "
                "compare it with the one published (and timestamped) at keygen",
            ),
        )
    drawn = (
        f"the audit (round {shared.audit_round}) was drawn from a corpus of "
        f"{info.get('audit_corpus_texts')} texts (sha256 {info.get('audit_corpus_sha256')})"
    )
    if pool_log is None:
        why = (
            "no commitment log was given (--pool-log SAMPLE.commitments)"
            if "audit_pool" in info
            else "the key names no committed pool: the corpus was handed to key.with_audit, "
            "not drawn by with_committed_audit from a pool espew serve committed"
        )
    else:
        tie = pool_tie(info, pool_log, started)
        if tie.tied and tie.entry is not None:
            return _tied(drawn, tie, started)
        why = tie.problem
    text = (
        f"{drawn}, and nothing ties that corpus to a pool committed before the suspect was "
        f"asked ({why}); an auditor that has seen the suspect's answers can choose texts "
        "that lean its way, and the p-value is exact only if it did not"
    )
    if accept_auditor_pool:
        return Findings(
            not_proved=(
                f"that the audit's texts were fixed before any answer: taken on the auditor's "
                f"word (accept_auditor_pool): {text}",
            )
        )
    return Findings(
        failure=f"the audit's texts are not tied to a commitment: {text}. Give the server's "
        "commitment log (--pool-log), or --accept-auditor-pool to take the auditor's word"
    )


def _tied(drawn: str, tie: PoolTie, started: str) -> Findings:
    """What a re-drawn audit tied to a committed pool proves, and what it does not."""
    entry = tie.entry
    assert entry is not None
    return Findings(
        proved=(
            f"{drawn}: account {entry['account']!r}'s traffic pool, committed at "
            f"{entry['time']} (record {entry['index']} of a commitment log whose chain "
            f"holds, {tie.n_records} records, head {tie.head}), before the audit began "
            f"at {started}; the key's keyed draw takes the audit from exactly that pool",
        ),
        not_proved=(
            "when the commitment log's records were written: its chain is the server "
            "operator's (the provider's); an anchor of its head (a timestamp, or the "
            "head handed to a third party) is what proves the pool predates the audit",
            *(
                [
                    f"why that record: the account's pool was committed again {tie.later} "
                    "time(s) after it and before the audit began (the auditor chose "
                    "among them)"
                ]
                if tie.later
                else []
            ),
        ),
    )
