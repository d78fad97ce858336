"""The traffic sample: a keyed bottom-k per account, bounded, mergeable across processes."""

from __future__ import annotations

import json
import os
import pickle
import stat

import pytest

from espew_integrations.core.ground.errors import InputTypeError
from espew_integrations.core.records.traffic_sample import (
    TrafficSample,
    read_traffic_texts,
    traffic_accounts,
)
from espew_integrations.core.records.traffic_store import TrafficSampleError

DAY = 86_400.0


class Clock:
    def __init__(self, now: float = 100 * DAY):
        self.now = now

    def __call__(self) -> float:
        return self.now


def texts(n: int, prefix: str = "text") -> list[str]:
    return [f"{prefix} number {i}" for i in range(n)]


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_keeps_the_capacity_lowest_priorities_and_each_text_once(tmp_path):
    sample = TrafficSample(tmp_path / "s.jsonl", capacity=50)
    stream = texts(500)
    sample.record(stream[:300])
    sample.record(stream[200:] + stream[:10])  # repeats are one text
    sample.flush()
    kept = records(tmp_path / "s.jsonl")
    assert len(kept) == 50
    assert len({r["text"] for r in kept}) == 50
    # The same sample fed the whole stream at once keeps the same texts:
    # which texts are kept depends on the salt and the set, not on the order.
    other = TrafficSample(tmp_path / "s.jsonl", capacity=50)
    other.record(list(reversed(stream)))
    assert set(other.texts()) == {r["text"] for r in kept}
    # A priority is a fixed function of the salt and the text; the threshold
    # sits above every kept one.
    priorities = sorted(r["priority"] for r in kept)
    assert priorities == [r["priority"] for r in kept]
    assert all(0.0 <= p < 1.0 for p in priorities)


def test_forked_workers_merge_into_the_sample_of_all_their_traffic(tmp_path):
    path = tmp_path / "s.jsonl"
    stream = texts(900)
    workers = [TrafficSample(path, capacity=40) for _ in range(3)]
    for i, worker in enumerate(workers):
        worker.record(stream[i::3])
    for worker in workers:
        worker.flush()
    alone = TrafficSample(tmp_path / "alone.jsonl", capacity=40)
    alone.record(stream)
    # Different salts (different files) draw different samples; compare with
    # one sample that uses the merged file's salt instead.
    same_salt = TrafficSample(path, capacity=40)
    same_salt.record(stream)
    assert {r["text"] for r in records(path)} == set(same_salt.texts())
    assert set(alone.texts()) != set(same_salt.texts())


def test_accounts_are_sampled_apart_and_read_back_by_account(tmp_path):
    path = tmp_path / "s.jsonl"
    sample = TrafficSample(path, capacity=10)
    sample.record(texts(30, "acme"), account="acme")
    sample.record(texts(5, "globex"), account="globex")
    sample.record(texts(3, "anon"))
    sample.flush()
    assert len(read_traffic_texts(path, account="acme")) == 10
    assert sorted(read_traffic_texts(path, account="globex")) == sorted(texts(5, "globex"))
    assert len(read_traffic_texts(path)) == 18
    with pytest.raises(TrafficSampleError, match=r"no text for account 'initech'.*acme, globex"):
        read_traffic_texts(path, account="initech")


def test_several_accounts_are_read_back_pooled_and_counted(tmp_path):
    path = tmp_path / "s.jsonl"
    sample = TrafficSample(path, capacity=10)
    sample.record(texts(30, "acme"), account="acme")
    sample.record(texts(5, "globex"), account="globex")
    sample.record([*texts(4, "initech"), texts(1, "globex")[0]], account="initech")
    sample.flush()
    pooled = read_traffic_texts(path, account=["acme", "globex", "acme"])
    assert len(pooled) == 15 and set(texts(5, "globex")) <= set(pooled)
    both = read_traffic_texts(path, account=["globex", "initech"])  # a shared text once
    assert len(both) == 9 and len(set(both)) == 9
    assert traffic_accounts(path) == {"acme": 10, "globex": 5, "initech": 5}
    with pytest.raises(TrafficSampleError, match=r"no text for accounts 'x', 'y'; it holds"):
        read_traffic_texts(path, account=["acme", "x", "y"])
    with pytest.raises(InputTypeError, match="accounts are non-empty strings"):
        read_traffic_texts(path, account=[])


def test_the_same_text_from_two_accounts_has_unrelated_priorities(tmp_path):
    sample = TrafficSample(tmp_path / "s.jsonl", capacity=5)
    stream = texts(200)
    sample.record(stream, account="a")
    sample.record(stream, account="b")
    assert set(sample.texts("a")) != set(sample.texts("b"))


def test_texts_not_seen_within_the_retention_leave_at_the_next_flush(tmp_path):
    clock = Clock()
    path = tmp_path / "s.jsonl"
    sample = TrafficSample(path, capacity=100, retention_days=7, clock=clock)
    sample.record(["old one", "seen again"])
    clock.now += 5 * DAY
    sample.record(["seen again", "newer"])
    clock.now += 3 * DAY
    sample.flush()
    assert sorted(read_traffic_texts(path)) == ["newer", "seen again"]


def test_flush_is_due_only_after_the_interval_with_something_new(tmp_path):
    clock = Clock()
    sample = TrafficSample(tmp_path / "s.jsonl", flush_seconds=60, clock=clock)
    assert not sample.flush_due()
    sample.record(["a"])
    assert not sample.flush_due()
    clock.now += 61
    assert sample.flush_due()
    sample.flush()
    clock.now += 61
    assert not sample.flush_due()


def test_files_are_private_and_the_salt_never_shows(tmp_path):
    path = tmp_path / "s.jsonl"
    sample = TrafficSample(path)
    sample.record(["a customer's text"], account="acme")
    sample.flush()
    salt = (tmp_path / "s.jsonl.salt").read_text().strip()
    for file in (path, tmp_path / "s.jsonl.salt"):
        assert stat.S_IMODE(os.stat(file).st_mode) == 0o600
    assert salt not in repr(sample) and "customer" not in repr(sample)
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(sample)
    assert salt not in path.read_text()


def test_bad_files_and_settings_are_named(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "fine", "priority": 0.5, "last_seen": 3}\n{"text": 5}\n')
    with pytest.raises(TrafficSampleError, match="line 2 is not a sample record"):
        read_traffic_texts(path)
    (tmp_path / "t.jsonl.salt").write_text("not hex\n")
    with pytest.raises(TrafficSampleError, match=r"salt .* corrupt"):
        TrafficSample(tmp_path / "t.jsonl")
    with pytest.raises(TrafficSampleError, match="does not exist"):
        read_traffic_texts(tmp_path / "missing.jsonl")
    with pytest.raises(TrafficSampleError, match=r"folder .* does not exist"):
        TrafficSample(tmp_path / "nowhere" / "s.jsonl")
    with pytest.raises(TrafficSampleError, match="capacity"):
        TrafficSample(tmp_path / "u.jsonl", capacity=0)
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    with pytest.raises(TrafficSampleError, match="holds no texts"):
        read_traffic_texts(empty)
