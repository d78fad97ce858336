"""Replicas' traffic samples merge into exactly the sample one process would have kept."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from espew_integrations.core.records.traffic_sample import TrafficSample, merge_traffic_samples
from espew_integrations.core.records.traffic_store import TrafficSampleError

DAY = 86_400.0
# Small caps, so that both the count and the bytes bind, and texts of every length,
# so that the prefix rule (stop at the first text that does not fit) is exercised.
CAPS = {"capacity": 60, "max_text_bytes": 300, "max_account_bytes": 2_400 * 4}


def traffic(seed: int, n: int = 3_000) -> list[tuple[str, str]]:
    """(account, text) pairs: three accounts, repeats, lengths from 5 to 300 bytes."""
    rng = np.random.default_rng(seed)
    accounts = rng.choice(["acme", "globex", "initech"], size=n, p=[0.6, 0.3, 0.1])
    ids = rng.integers(0, n // 2, size=n)
    lengths = rng.integers(0, 290, size=n)
    return [
        (str(a), f"text {i} " + "z" * int(length))
        for a, i, length in zip(accounts, ids, lengths, strict=True)
    ]


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def replicas(tmp_path, n: int, clock=lambda: 100 * DAY) -> list[TrafficSample]:
    first = TrafficSample(tmp_path / "replica-0.jsonl", clock=clock, **CAPS)
    out = [first]
    for i in range(1, n):
        shutil.copyfile(tmp_path / "replica-0.jsonl.salt", tmp_path / f"replica-{i}.jsonl.salt")
        out.append(TrafficSample(tmp_path / f"replica-{i}.jsonl", clock=clock, **CAPS))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_three_replicas_merged_equal_one_process_that_saw_all_the_traffic(tmp_path, seed):
    parts = replicas(tmp_path, 3)
    shutil.copyfile(tmp_path / "replica-0.jsonl.salt", tmp_path / "alone.jsonl.salt")
    alone = TrafficSample(tmp_path / "alone.jsonl", clock=lambda: 100 * DAY, **CAPS)
    rng = np.random.default_rng(seed + 100)
    stream = traffic(seed)
    for start in range(0, len(stream), 25):  # a load balancer: each request to one replica
        batch = stream[start : start + 25]
        target = parts[int(rng.integers(0, 3))]
        for account in {a for a, _ in batch}:
            texts = [t for a, t in batch if a == account]
            target.record(texts, account)
            alone.record(texts, account)
    for sample in (*parts, alone):
        sample.flush()
    merged = merge_traffic_samples(
        [p.path for p in parts], tmp_path / "merged.jsonl", **_merge_caps()
    )
    assert lines(merged.path) == lines(alone.path)
    assert merged.accounts == 3 and merged.texts == len(lines(alone.path))
    assert merged.bytes == merged.path.stat().st_size
    # The byte cap bound somewhere, or this test would only prove plain bottom-k.
    assert any("cutoff" in r and r["account"] for r in lines(alone.path))
    # The merge is itself a sample with the same salt: merging it again changes nothing.
    again = merge_traffic_samples([merged.path], tmp_path / "again.jsonl", **_merge_caps())
    assert lines(again.path) == lines(alone.path)


def _merge_caps() -> dict:
    return {"capacity": CAPS["capacity"], "max_account_bytes": CAPS["max_account_bytes"]}


def test_samples_with_different_salts_are_refused_by_name(tmp_path):
    one = TrafficSample(tmp_path / "one.jsonl")
    two = TrafficSample(tmp_path / "two.jsonl")  # a salt of its own
    for sample in (one, two):
        sample.record(["a text"], "acme")
        sample.flush()
    with pytest.raises(TrafficSampleError, match=r"one.jsonl and .*two.jsonl were written with "):
        merge_traffic_samples([one.path, two.path], tmp_path / "merged.jsonl")
    assert not (tmp_path / "merged.jsonl").exists()


def test_a_merge_over_the_file_cap_or_onto_a_file_is_refused(tmp_path):
    parts = replicas(tmp_path, 2)
    for i, part in enumerate(parts):
        part.record([f"replica {i} text {j} " + "q" * 200 for j in range(100)], f"acct-{i}")
        part.flush()
    paths = [p.path for p in parts]
    with pytest.raises(TrafficSampleError, match="more than the cap of 9,600"):
        merge_traffic_samples(paths, tmp_path / "m.jsonl", **_merge_caps(), max_file_bytes=9_600)
    merge_traffic_samples(paths, tmp_path / "m.jsonl", **_merge_caps())
    with pytest.raises(TrafficSampleError, match="already exists"):
        merge_traffic_samples(paths, tmp_path / "m.jsonl", **_merge_caps())
    (tmp_path / "n.jsonl.salt").write_text("00" * 32 + "\n")
    with pytest.raises(TrafficSampleError, match="another salt"):
        merge_traffic_samples(paths, tmp_path / "n.jsonl", **_merge_caps())
