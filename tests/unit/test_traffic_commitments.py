"""Issue 54: the traffic sample commits each account's pool, chained, as it collects it."""

from __future__ import annotations

import json
import os
import stat

import pytest

from espew_integrations.core.keys.keygen import corpus_digest
from espew_integrations.core.records.traffic_commitments import (
    CHAIN_START,
    CommitmentError,
    append_commitments,
    commitments_path,
    pool_tie,
    read_commitments,
)
from espew_integrations.core.records.traffic_sample import TrafficSample, read_traffic_texts


def texts(n: int, prefix: str = "text") -> list[str]:
    return [f"{prefix} number {i}" for i in range(n)]


def test_each_flush_commits_the_pools_that_changed_chained(tmp_path):
    sample = TrafficSample(tmp_path / "s.jsonl", capacity=50)
    sample.record(texts(80), account="acme")
    sample.record(texts(10, "other"), account="zeta")
    sample.flush()
    log = commitments_path(sample.path)
    assert log.name == "s.jsonl.commitments" and stat.S_IMODE(os.stat(log).st_mode) == 0o600
    first = read_commitments(log)
    assert [(r["account"], r["n_texts"], r["index"]) for r in first] == [
        ("acme", 50, 0),
        ("zeta", 10, 1),
    ]
    assert first[0]["prev"] == CHAIN_START and first[1]["prev"] == first[0]["digest"]
    for record in first:  # the digest with_audit records of the same texts
        assert record["pool_sha256"] == corpus_digest(
            read_traffic_texts(sample.path, record["account"])
        )

    sample.flush()  # nothing new: nothing committed
    assert len(read_commitments(log)) == 2
    sample.record(texts(5, "more"), account="zeta")
    sample.flush()  # only the pool that changed
    third = read_commitments(log)[2]
    assert (third["account"], third["n_texts"], third["prev"]) == ("zeta", 15, first[1]["digest"])


def test_an_edited_removed_or_reordered_record_breaks_the_chain(tmp_path):
    log = tmp_path / "s.jsonl.commitments"
    append_commitments(log, [("a", ["x", "y"]), ("b", ["z"])], "2026-01-01T00:00:00+00:00")
    append_commitments(log, [("a", ["x", "y", "w"])], "2026-01-02T00:00:00+00:00")
    lines = log.read_text().splitlines()

    edited = json.loads(lines[0])
    edited["time"] = "2025-01-01T00:00:00+00:00"  # back-dated
    log.write_text("\n".join([json.dumps(edited), *lines[1:]]) + "\n")
    with pytest.raises(CommitmentError, match="chain broken at record 0"):
        read_commitments(log)
    log.write_text("\n".join([lines[0], lines[2]]) + "\n")
    with pytest.raises(CommitmentError, match="chain broken at record 1"):
        read_commitments(log)
    log.write_text("\n".join([lines[1], lines[0], lines[2]]) + "\n")
    with pytest.raises(CommitmentError, match="chain broken at record 0"):
        read_commitments(log)
    with pytest.raises(CommitmentError, match="chain broken"):  # never extended
        append_commitments(log, [("c", ["q"])], "2026-01-03T00:00:00+00:00")
    log.write_text("not json\n")
    with pytest.raises(CommitmentError, match="record 0 is not a commitment"):
        read_commitments(log)


def test_pool_tie_needs_the_named_record_the_same_corpus_and_an_earlier_time(tmp_path):
    log = tmp_path / "s.jsonl.commitments"
    pool = ["x", "y", "z"]
    (entry,) = append_commitments(log, [("a", pool)], "2026-01-01T00:00:00+00:00")
    info = {
        "audit_corpus_sha256": corpus_digest(pool),
        "audit_pool": {"digest": entry["digest"], "account": "a"},
    }
    tie = pool_tie(info, log, started="2026-01-05T00:00:00+00:00")
    assert tie.tied and tie.entry["index"] == 0 and tie.later == 0
    append_commitments(log, [("a", [*pool, "w"])], "2026-01-02T00:00:00+00:00")
    assert pool_tie(info, log, started="2026-01-05T00:00:00+00:00").later == 1
    late = pool_tie(info, log, started="2025-12-31T00:00:00+00:00")
    assert not late.tied and "not before the audit began" in late.problem
    picked = pool_tie({**info, "audit_corpus_sha256": corpus_digest(["x"])}, log, "2026-02-01")
    assert not picked.tied and "not from the committed pool" in picked.problem
    unnamed = pool_tie({"audit_corpus_sha256": corpus_digest(pool)}, log, "2026-02-01")
    assert not unnamed.tied and "names no committed pool" in unnamed.problem
    forged = {**info, "audit_pool": {"digest": "sha256:" + "1" * 64}}
    assert "is not in the log" in pool_tie(forged, log, "2026-02-01").problem
