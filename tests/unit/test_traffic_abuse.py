"""The traffic sample under abuse: one client's junk and huge inputs never touch another
account's sample, every cap holds on the file and in memory, and the salt is made once."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import threading

import pytest

from espew_integrations.core.records.traffic_sample import (
    ANONYMOUS_ACCOUNT,
    TrafficSample,
    read_traffic_texts,
    stored_text,
    traffic_account_id,
)
from espew_integrations.core.records.traffic_store import TrafficSampleError, load_or_create_salt

CAPS = {"capacity": 300, "max_text_bytes": 512, "max_account_bytes": 48_000}
HUGE = 100_000  # characters in one abusive input


def real_texts(n: int) -> list[str]:
    return [f"victim asks question {i} about the weather in town {i % 37}" for i in range(n)]


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def twin(tmp_path, name: str, source, **caps) -> TrafficSample:
    """A sample at ``tmp_path/name`` with ``source``'s salt (the same priorities)."""
    shutil.copyfile(source.path.with_name(source.path.name + ".salt"), tmp_path / f"{name}.salt")
    return TrafficSample(tmp_path / name, **caps)


def test_junk_and_huge_inputs_leave_another_accounts_sample_exactly_as_it_was(tmp_path):
    """200,000 distinct junk texts and 100k-character inputs from one client (the issue's 1M
    junk texts scaled down; benchmarks/bench_traffic_abuse.py runs the full size): the
    victim's sample is the same record for record, and every cap holds."""
    caps = {**CAPS, "max_file_bytes": 4 * CAPS["max_account_bytes"]}
    abused = TrafficSample(tmp_path / "abused.jsonl", window=64, **caps)
    quiet = twin(tmp_path, "quiet.jsonl", abused, window=64, **caps)
    victim = real_texts(2_000)
    for start in range(0, len(victim), 100):
        abused.record(victim[start : start + 100], account="victim")
        quiet.record(victim[start : start + 100], account="victim")
        abused.record([f"junk {start} {i} {i * 7919 % 104729}" for i in range(10_000)], "mallory")
        abused.record([f"{start}-{i} " + "x" * HUGE for i in range(3)], "mallory")
        abused.record(["word " * (HUGE // 5)], "mallory")  # long, and past the window
    for sample in (abused, quiet):
        assert sample.stored_bytes <= caps["max_file_bytes"]
        assert sample.account_bytes("mallory") <= caps["max_account_bytes"]
        sample.flush()
    victim_rows = [r for r in records(abused.path) if r["account"] == "victim"]
    assert victim_rows == records(quiet.path)
    assert 200 < len(victim_rows) <= caps["capacity"]
    assert abused.path.stat().st_size <= caps["max_file_bytes"]
    mallory = [r for r in records(abused.path) if r["account"] == "mallory"]
    mallory_bytes = sum(len(json.dumps(r, ensure_ascii=False)) + 1 for r in mallory)
    assert mallory_bytes <= caps["max_account_bytes"]
    assert all(len(r["text"].encode()) <= caps["max_text_bytes"] for r in mallory)
    # A flush reads the file back and a re-audit's reader takes one account from it.
    assert abused.refused == 0
    abused.record(["one more after the abuse"], "victim")
    abused.flush()
    assert len(read_traffic_texts(abused.path, account="victim")) >= len(victim_rows)


def test_a_text_is_stored_as_far_as_the_window_reads_it_then_within_the_byte_cap():
    text = " ".join(f"w{i}" for i in range(1_000))
    assert stored_text(text, window=10, max_bytes=4096) == " ".join(f"w{i}" for i in range(8))
    assert stored_text(text, window=None, max_bytes=20) == text[:20]
    wide = "é" * 100  # two bytes a character: never cut inside one
    assert stored_text(wide, window=None, max_bytes=11) == "é" * 5
    assert stored_text("a\ud800b", window=None, max_bytes=64) == "a?b"  # lone surrogate


def test_texts_the_model_reads_alike_are_one_text(tmp_path):
    """Junk appended past the window makes no new text: the sample keeps what was read."""
    sample = TrafficSample(tmp_path / "s.jsonl", window=6, capacity=100)
    sample.record([f"the same four words {'and then ' * 10} tail {i}" for i in range(500)])
    assert sample.texts() == ["the same four words"]


def test_the_whole_file_cap_refuses_new_accounts_never_old_ones(tmp_path):
    """Clients inventing credentials fill the file; an account already in keeps its texts."""
    caps = {**CAPS, "max_file_bytes": 3 * CAPS["max_account_bytes"]}
    sample = TrafficSample(tmp_path / "s.jsonl", **caps)
    sample.record(real_texts(1_000), "victim")
    before = sample.texts("victim")
    for n in range(40):
        sample.record([f"filler {n} {i} " + "y" * 400 for i in range(200)], f"fake-{n}")
    assert sample.texts("victim") == before
    assert sample.refused > 0 and sample.stored_bytes <= caps["max_file_bytes"]
    sample.flush()
    assert sample.path.stat().st_size <= caps["max_file_bytes"]
    assert read_traffic_texts(sample.path, "victim") == before


def test_a_servers_accounts_are_keyed_hashes_of_credentials(tmp_path):
    sample = TrafficSample(tmp_path / "s.jsonl")
    acme = sample.account_for("sk-acme-0123456789")
    assert acme.startswith("key-") and "acme" not in acme
    assert acme == traffic_account_id(sample.path, "sk-acme-0123456789")
    assert acme != sample.account_for("sk-globex-9876543210")
    assert sample.account_for(None) == sample.account_for("  ") == ANONYMOUS_ACCOUNT
    other = TrafficSample(tmp_path / "other.jsonl")  # another salt, another id
    assert other.account_for("sk-acme-0123456789") != acme
    with pytest.raises(TrafficSampleError, match=r"salt .* does not exist"):
        traffic_account_id(tmp_path / "never.jsonl", "sk-acme-0123456789")


def test_bad_caps_are_named(tmp_path):
    for caps, message in (
        ({"max_text_bytes": 0}, "max_text_bytes must be a positive integer"),
        ({"max_text_bytes": 4096, "max_account_bytes": 4096}, "at least 8 x max_text_bytes"),
        ({"max_account_bytes": 10**6, "max_file_bytes": 10**5}, "at least max_account_bytes"),
        ({"window": 2}, "window must be"),
    ):
        with pytest.raises(TrafficSampleError, match=message):
            TrafficSample(tmp_path / "s.jsonl", **caps)


def test_a_line_longer_than_any_record_is_refused_not_read(tmp_path, monkeypatch):
    from espew_integrations.core.records import traffic_store

    monkeypatch.setattr(traffic_store, "MAX_RECORD_LINE_BYTES", 100)
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"text": "x" * 200, "priority": 0.5, "last_seen": 3}) + "\n")
    with pytest.raises(TrafficSampleError, match="line 1 is longer than any record"):
        read_traffic_texts(path)


def _start(path, barrier, queue) -> None:
    barrier.wait()
    try:
        queue.put(load_or_create_salt(path).hex())
    except Exception as exc:  # reported to the parent, which fails the test
        queue.put(f"error: {exc}")


def test_many_simultaneous_starts_all_read_one_whole_salt(tmp_path):
    """320 starts at once (40 processes, then 280 threads): one salt, never an empty one."""
    context = multiprocessing.get_context("fork")
    path = tmp_path / "race.jsonl.salt"
    barrier, queue = context.Barrier(40), context.Queue()
    workers = [context.Process(target=_start, args=(path, barrier, queue)) for _ in range(40)]
    for worker in workers:
        worker.start()
    seen = [queue.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    path2 = tmp_path / "race2.jsonl.salt"
    gate, lock, threads_seen = threading.Barrier(280), threading.Lock(), []

    def start_thread() -> None:
        gate.wait()
        salt = load_or_create_salt(path2).hex()
        with lock:
            threads_seen.append(salt)

    threads = [threading.Thread(target=start_thread) for _ in range(280)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == 1 and not seen[0].startswith("error"), set(seen)
    assert len(threads_seen) == 280 and len(set(threads_seen)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["race.jsonl.salt", "race2.jsonl.salt"]
