"""The traffic sample under abuse (issue 45): what a client's junk and huge inputs do.

Two accounts share one sample, with the defaults ``espew serve --traffic-sample``
runs with on MiniLM (window 256, 20,000 texts and 32 MiB per account, 1 GiB in
all). The *victim* sends 6,000 real texts (Rotten Tomatoes); the *diluter* sends
6,000 other real texts plus ``J`` distinct junk texts in requests of 2,048, for
each ``J`` of ``--junk``. Then, in a fresh sample, one client sends ``--huge``
inputs of 100,000 four-byte characters (400 KB each) besides the victim.

Reported per run: the real texts the diluter's own sample keeps (what an audit
drawn from its account can use), whether the victim's sample is record for
record the one kept without the junk, the sample's bytes in memory and on disk,
the time per recorded text, the flush and the re-audit read (one account), and
the process's peak resident memory. The salt is fixed, so a run reproduces.

    nice .venv/bin/python benchmarks/bench_traffic_abuse.py \\
        --junk 0 10000 100000 1000000 --huge 2700
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from espew_integrations.core.records.traffic_sample import TrafficSample, read_traffic_texts
from espew_integrations.offline.corpora import rotten_tomatoes

WINDOW = 256  # MiniLM's, as espew serve --embedder minilm passes it
REQUEST = 2_048  # texts per request, the server's default --max-inputs
SALT = "5a" * 32


def new_sample(folder: Path, name: str) -> TrafficSample:
    (folder / f"{name}.salt").write_text(SALT + "\n")
    return TrafficSample(folder / name, window=WINDOW)


def victim_records(sample: TrafficSample) -> list[dict]:
    return [
        json.loads(line)
        for line in sample.path.read_text(encoding="utf-8").splitlines()
        if json.loads(line).get("account") == "victim"
    ]


def dilution_run(folder: Path, junk: int, victim: list[str], diluter: list[str]) -> dict:
    sample = new_sample(folder, f"junk-{junk}.jsonl")
    started, offered = time.perf_counter(), 0
    for start in range(0, len(victim), REQUEST):
        sample.record(victim[start : start + REQUEST], "victim")
        sample.record(diluter[start : start + REQUEST], "diluter")
        offered += len(victim[start : start + REQUEST]) + len(diluter[start : start + REQUEST])
    for start in range(0, junk, REQUEST):
        batch = [
            f"junk {i} q{i * 2654435761 % 4294967296}"
            for i in range(start, min(junk, start + REQUEST))
        ]
        sample.record(batch, "diluter")
        offered += len(batch)
    record_s = time.perf_counter() - started
    memory_bytes = sample.stored_bytes
    started = time.perf_counter()
    sample.flush()
    flush_s = time.perf_counter() - started
    started = time.perf_counter()
    kept = read_traffic_texts(sample.path, account="diluter")
    read_s = time.perf_counter() - started
    real = set(diluter)
    return {
        "junk": junk,
        "requests": -(-(len(diluter) + junk) // REQUEST),
        "diluter_kept": len(kept),
        "diluter_real_kept": sum(t in real for t in kept),
        "expected_real_kept": round(20_000 * len(diluter) / max(len(diluter) + junk, 20_000)),
        "victim_kept": len(victim_records(sample)),
        "memory_bytes": memory_bytes,
        "file_bytes": sample.path.stat().st_size,
        "us_per_text": 1e6 * record_s / offered,
        "flush_s": flush_s,
        "read_s": read_s,
        "sample": sample,
    }


def huge_run(folder: Path, count: int, victim: list[str]) -> dict:
    sample = new_sample(folder, "huge.jsonl")
    started, sent = time.perf_counter(), 0
    for i in range(count):
        # One 400 KB "word" (no space: one chunk the window keeps whole) every other
        # text, 100,000 characters of words past the window the others.
        text = f"{i} " + ("\U0001d518" * 100_000 if i % 2 else "word " * 20_000)
        sample.record([text], "abuser")
        sent += len(text.encode("utf-8"))
        if i < len(victim):
            sample.record([victim[i]], "victim")
    record_s = time.perf_counter() - started
    started = time.perf_counter()
    sample.flush()
    flush_s = time.perf_counter() - started
    started = time.perf_counter()
    read_traffic_texts(sample.path, account="abuser")
    return {
        "huge_inputs": count,
        "input_bytes": sent,
        "abuser_bytes": sample.account_bytes("abuser"),
        "largest_stored_text": max(len(t.encode()) for t in sample.texts("abuser")),
        "file_bytes": sample.path.stat().st_size,
        "ms_per_input": 1e3 * record_s / count,
        "flush_s": flush_s,
        "read_s": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junk", type=int, nargs="+", default=[0, 10_000, 100_000, 1_000_000])
    parser.add_argument("--huge", type=int, default=2_700)
    args = parser.parse_args()
    texts = list(rotten_tomatoes().texts)
    victim, diluter = texts[:6_000], texts[6_000:12_000]
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        baseline = None
        print(
            "| junk texts | requests | diluter keeps (real / expected) | victim's sample "
            "| memory MB | file MB | us/text | flush s | read s |"
        )
        print("|---:|---:|---|---|---:|---:|---:|---:|---:|")
        for junk in sorted(args.junk):
            row = dilution_run(folder, junk, victim, diluter)
            records = victim_records(row.pop("sample"))
            baseline = records if baseline is None else baseline
            same = "identical" if records == baseline else "CHANGED"
            print(
                f"| {junk:,} | {row['requests']:,} | {row['diluter_kept']:,} "
                f"({row['diluter_real_kept']:,} / {row['expected_real_kept']:,}) "
                f"| {row['victim_kept']:,}, {same} | {row['memory_bytes'] / 1e6:.1f} "
                f"| {row['file_bytes'] / 1e6:.1f} | {row['us_per_text']:.1f} "
                f"| {row['flush_s']:.2f} | {row['read_s']:.2f} |"
            )
        huge = huge_run(folder, args.huge, victim)
        print(
            f"\n{huge['huge_inputs']:,} inputs of 100,000 characters "
            f"({huge['input_bytes'] / 1e9:.2f} GB sent): the abuser's sample holds "
            f"{huge['abuser_bytes'] / 1e6:.1f} MB (largest text {huge['largest_stored_text']:,} "
            f"bytes), the file {huge['file_bytes'] / 1e6:.1f} MB; "
            f"{huge['ms_per_input']:.2f} ms per input, flush {huge['flush_s']:.2f} s, "
            f"read {huge['read_s']:.2f} s"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory of the whole run: {peak:.0f} MB")


if __name__ == "__main__":
    main()
