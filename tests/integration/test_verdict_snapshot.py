"""Same verdicts, byte for byte: verify, trace and a small null study against a snapshot.

A refactor (modules moved into rooms, options gathered into one object, errors
re-parented) must not move a single p-value. The snapshot in
``tests/data/verdict_snapshot.json`` holds, as ``float.hex``, the p-values of a
seeded word key, a seeded field key, a seeded map key and a seeded key ring against a synthetic
bag-of-words service, a noisy copy of it and the clean model, plus three fresh
keys against the clean model (a null study in miniature). A change that is meant
to move verdicts (a new statistic, a new default) rewrites the snapshot on
purpose, and says so in its commit:

    python -m tests.integration.test_verdict_snapshot --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from espew_integrations import KeyRing, WatermarkKey, trace, verify, watermark

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "verdict_snapshot.json"
DIM = 96
TARGET = "Acme Embeddings API: licensed vectors"
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70: letters only, as words
VOCABULARY = [a + b for a in SYLLABLES for b in SYLLABLES][:1500]


@cache
def _word_vector(word: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(DIM)


def clean(texts: list[str]) -> np.ndarray:
    """A bag-of-words encoder: the mean of fixed random word vectors, unit length."""
    rows = np.stack([np.mean([_word_vector(w) for w in t.split()], axis=0) for t in texts])
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@lru_cache(maxsize=1)
def corpus() -> tuple[str, ...]:
    rng = np.random.default_rng(7)
    weights = 1.0 / np.arange(1, len(VOCABULARY) + 1)  # Zipf: a band of mid-frequency words
    weights /= weights.sum()
    return tuple(
        " ".join(rng.choice(VOCABULARY, size=rng.integers(6, 14), p=weights)) for _ in range(1200)
    )


def served(key: WatermarkKey):
    def service(texts: list[str]) -> np.ndarray:
        return watermark(texts, clean(list(texts)), key)

    return service


def noisy(suspect):
    """A copy: the suspect's answers plus noise fixed per text."""

    def copy(texts: list[str]) -> np.ndarray:
        out = np.asarray(suspect(texts), dtype=np.float64)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            out[i] += 0.02 * np.random.default_rng(seed).standard_normal(DIM)
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    return copy


def _key(marking: str, seed: int) -> WatermarkKey:
    words = {"n_triggers": 20} if marking == "words" else {}  # a unit key takes no triggers
    return WatermarkKey.generate(
        corpus(), clean, target_text=TARGET, seed=seed, marking=marking, **words
    )


def measure() -> dict[str, str]:
    """Every snapshotted p-value, as float.hex, by name."""
    out: dict[str, str] = {}
    for marking in ("words", "field", "map"):
        key = _key(marking, seed=11)
        for name, suspect in {
            "service": served(key),
            "copy": noisy(served(key)),
            "clean": clean,
        }.items():
            out[f"verify/{marking}/{name}"] = float(verify(suspect, key, seed=1).p_value).hex()
        for seed in range(100, 103):
            fresh = _key(marking, seed=seed)
            out[f"null/{marking}/{seed}"] = float(verify(clean, fresh, seed=2).p_value).hex()
    ring = KeyRing.generate(corpus(), clean, target_text=TARGET, seed=13, marking="words")
    for account in ("alice", "bob"):
        report = trace(
            noisy(served(ring.key_for(account))), ring, ["alice", "bob", "carol"], seed=1
        )
        for tenant, p in sorted(report.tenant_p_values.items()):
            out[f"trace/copy-of-{account}/{tenant}"] = float(p).hex()
    return out


def test_every_verdict_matches_the_snapshot_bit_for_bit():
    expected = json.loads(SNAPSHOT.read_text())
    got = measure()
    assert got.keys() == expected.keys()
    changed = {
        k: (float.fromhex(expected[k]), float.fromhex(v))
        for k, v in got.items()
        if v != expected[k]
    }
    assert not changed, f"p-values moved (snapshot, now): {changed}"


if __name__ == "__main__" and "--write" in sys.argv:
    SNAPSHOT.write_text(json.dumps(measure(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
