"""A unit key's serving key is compact (issue 56): at most 16 KiB at d = 1,536 and 64 KiB at
d = 3,072, and it marks bit for bit like the whole key, from a file or from ``ESPEW_KEY``;
for the default map key and for a field key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import WatermarkKey, watermark
from espew_integrations.cli import main

#: A synthetic bag-of-words embedder of any dimension: a text is the sum of its words' rows.
EMBEDDER = """
import zlib
import numpy as np

_BASIS = np.random.default_rng({dim}).normal(size=(4096, {dim})).astype(np.float32)

def embed(texts):
    rows = np.stack([
        _BASIS[[zlib.crc32(w.encode()) % 4096 for w in t.split()] or [0]].sum(axis=0)
        for t in texts
    ])
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)
"""
WORDS = [f"w{i}" for i in range(3000)]
LIMITS = {1536: 16 * 1024, 3072: 64 * 1024}


@pytest.fixture(scope="module", params=[(d, m) for d in sorted(LIMITS) for m in (None, "field")])
def keygen(request, tmp_path_factory) -> tuple[int, Path, str]:
    """``espew keygen`` (the default marking, map, or ``--marking field``) with a synthetic
    ``dim``-d embedder."""
    dim, marking = request.param
    folder = tmp_path_factory.mktemp(f"compact{dim}{marking}")
    (folder / "synthetic.py").write_text(EMBEDDER.format(dim=dim))
    corpus = folder / "corpus.txt"
    rng = np.random.default_rng(1)
    corpus.write_text("\n".join(" ".join(rng.choice(WORDS, 10)) for _ in range(1200)) + "\n")
    embedder = f"{folder / 'synthetic.py'}:embed"
    path = folder / "provider.key"
    argv = ["keygen", "--corpus", str(corpus), "--target-text", "Acme licensed vectors"]
    argv += ["--embedder", embedder, "--seed", "5", "--audit-budget", "400"]
    argv += [] if marking is None else ["--marking", marking]
    assert main([*argv, "--out", str(path), "--no-progress"]) == 0
    return dim, path, embedder


def test_the_serving_key_fits_a_secret_manager(keygen):
    dim, path, _ = keygen
    assert path.stat().st_size <= LIMITS[dim]
    key = WatermarkKey.load(path)
    assert key.marking in ("map", "field") and key.dim == dim
    assert key.marking == "map" or key.design.field.compact
    stored = json.loads(path.read_text())["key"]
    assert set(stored["target"]) == {"float16"} and stored[key.marking]["encoding"]


def test_the_serving_key_marks_bit_for_bit_like_the_whole_key(keygen):
    dim, path, _ = keygen
    serving = WatermarkKey.load(path)
    whole = WatermarkKey.from_json(serving.to_json())  # the audit inside
    assert whole.verifiable and whole.design == serving.design
    rng = np.random.default_rng(2)
    texts = [" ".join(rng.choice(WORDS, 8)) for _ in range(64)]
    for dtype in (np.float32, np.float64):
        clean = rng.normal(size=(64, dim)).astype(dtype)
        marked = watermark(texts, clean, serving)
        assert marked.dtype == dtype and not np.array_equal(marked, clean)
        assert marked.tobytes() == watermark(texts, clean, whole).tobytes()


def test_espew_key_holding_the_serving_key_serves_the_same_vectors(keygen, tmp_path, monkeypatch):
    dim, path, embedder = keygen
    texts = tmp_path / "texts.txt"
    texts.write_text("w1 w2 w3 w4\nw10 w20 w30\nw7 w8 w9 w11 w12\n")
    from_file, from_env = tmp_path / "file.npy", tmp_path / "env.npy"
    argv = ["embed", "--input", str(texts), "--embedder", embedder, "--no-progress"]
    assert main([*argv, "--key", str(path), "--out", str(from_file)]) == 0
    monkeypatch.setenv("ESPEW_KEY", path.read_text())
    assert main([*argv, "--key", "env:ESPEW_KEY", "--out", str(from_env)]) == 0
    assert from_file.read_bytes() == from_env.read_bytes()
    assert np.load(from_file).shape == (3, dim)
