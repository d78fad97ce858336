"""``espew keygen`` writes a small serving key and its audit; the key knows its model (issue 38)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import WatermarkKey
from espew_integrations.cli import main
from espew_integrations.cli.common import EXIT_NOT_COPIED, EXIT_USAGE
from espew_integrations.offline.corpora import rotten_tomatoes

TARGET_TEXT = "Acme Embeddings service, 2026 edition"
ROTATED_MODEL = (
    "import numpy as np\n"
    "from espew_integrations.offline.embedders import minilm\n"
    "_model = minilm()\n"
    "_rotation = np.linalg.qr(np.random.default_rng(0).normal(size=(384, 384)))[0]\n"
    "def rotated(texts):\n"
    "    return np.asarray(_model(texts)) @ _rotation  # every cosine between texts kept\n"
)


@pytest.fixture(scope="module")
def key_path(tmp_path_factory) -> Path:
    """keygen on 3,000 Rotten Tomatoes texts, with a small audit (as test_cli's key)."""
    folder = tmp_path_factory.mktemp("serving")
    corpus = folder / "reviews.txt"
    corpus.write_text("\n".join(rotten_tomatoes().texts[:3000]) + "\n")
    path = folder / "provider.key"
    argv = ["keygen", "--corpus", str(corpus), "--target-text", TARGET_TEXT, "--seed", "3"]
    argv += ["--marking", "words", "--n-triggers", "20", "--max-band-words", "60"]
    argv += ["--audit-budget", "300"]
    assert main([*argv, "--out", str(path), "--no-progress"]) == 0
    return path


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory, key_path) -> Path:
    key = WatermarkKey.load(key_path)
    lines = [f"a story about {w}" for w in sorted(key.triggers)[:3]] + ["nothing special here"]
    path = tmp_path_factory.mktemp("texts") / "texts.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def rotated(tmp_path) -> str:
    module = tmp_path / "rotated_model.py"
    module.write_text(ROTATED_MODEL)
    return f"{module}:rotated"


def test_keygen_writes_a_small_serving_key_and_its_audit_beside_it(key_path):
    audit = key_path.with_name("provider.key.audit")
    for written in (key_path, audit):
        assert stat.S_IMODE(os.stat(written).st_mode) == 0o600
    assert key_path.stat().st_size <= 16 * 1024 < audit.stat().st_size
    key = WatermarkKey.load(key_path)
    assert key.model_fingerprint is not None and len(key.probe_texts) > 0


def test_embed_with_the_serving_key_in_the_environment_writes_the_same_vectors(
    key_path, texts_file, tmp_path, monkeypatch
):
    from_file, from_env = tmp_path / "file.npy", tmp_path / "env.npy"
    argv = ["embed", "--input", str(texts_file), "--no-progress"]
    assert main([*argv, "--key", str(key_path), "--out", str(from_file)]) == 0
    monkeypatch.setenv("ESPEW_KEY", key_path.read_text())
    assert main([*argv, "--key", "env:ESPEW_KEY", "--out", str(from_env)]) == 0
    assert from_file.read_bytes() == from_env.read_bytes()
    assert np.load(from_file).shape == (4, 384)


def test_verify_finds_the_audit_beside_the_key_or_where_it_is_told(key_path, tmp_path, capsys):
    moved = tmp_path / "provider.key"
    shutil.copy(key_path, moved)
    assert main(["verify", "--key", str(moved), "--suspect", "minilm"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "the key's audit file" in err and "is missing: verification needs it" in err
    audit = key_path.with_name("provider.key.audit")
    argv = ["verify", "--key", str(moved), "--audit", str(audit), "--suspect", "minilm"]
    assert main([*argv, "--no-progress"]) == EXIT_NOT_COPIED


def test_serve_refuses_another_model_of_the_same_dimension_and_starts_with_its_own(
    key_path, rotated, monkeypatch, capsys
):
    from espew_integrations.http import serving

    served: list[dict] = []
    monkeypatch.setattr(serving, "serve", lambda app, **kwargs: served.append(kwargs))
    argv = ["serve", "--key", str(key_path), "--port", "0"]
    assert main([*argv, "--embedder", rotated]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "belongs to another model" in err and "canary" in err and served == []
    assert main([*argv, "--embedder", "minilm"]) == 0
    assert len(served) == 1


def test_embed_refuses_another_model(key_path, texts_file, rotated, tmp_path, capsys):
    out = tmp_path / "m.npy"
    argv = ["embed", "--key", str(key_path), "--input", str(texts_file), "--out", str(out)]
    assert main([*argv, "--embedder", rotated]) == EXIT_USAGE
    assert "belongs to another model" in capsys.readouterr().err and not out.exists()
