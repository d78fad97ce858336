"""A small serving key and its audit in a file of its own, bound to each other (issue 38)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import KeyFileError, KeyGenerationError, WatermarkKey, watermark
from espew_integrations.core.ground.secret_files import canonical_json
from espew_integrations.core.keys.key_audit import default_audit_path
from espew_integrations.core.keys.model_check import CANARY_TEXTS, ModelFingerprint
from tests.support import make_key

FIXTURE = Path(__file__).parents[1] / "fixtures" / "key-v2-single-file.json"
#: What the code of commit a202553 printed when it wrote the fixture.
FIXTURE_KEY_ID = "2e587f1107134f32"


def _audited(dim: int = 64, n_band: int = 60, n_probes_per_word: int = 3) -> WatermarkKey:
    """A synthetic key with an audit as keygen stores one (probes, cover, int8 rows)."""
    key = make_key(dim, n_band=n_band)
    rng = np.random.default_rng(0)
    band = list(key.band)
    owner = [i for i in range(len(band)) for _ in range(n_probes_per_word)]
    return key.replace(
        probe_texts=tuple(
            f"a long review that mentions {band[i]} once, #{n}" for n, i in enumerate(owner)
        ),
        probe_owner=tuple(owner),
        probe_reference=tuple(rng.uniform(-0.2, 0.4, len(owner))),
        word_reference=tuple(rng.uniform(0.0, 0.3, len(band))),
        probe_embeddings=rng.normal(size=(len(owner), dim)),
        cover_texts=tuple(f"an ordinary text number {n}" for n in range(200)),
        cover_embeddings=rng.normal(size=(200, dim)),
        model_fingerprint=ModelFingerprint.measure(
            lambda texts: np.random.default_rng(len(texts)).normal(size=(len(texts), dim))
        ),
    )


def _batch(key: WatermarkKey) -> tuple[list[str], np.ndarray]:
    words = sorted(key.triggers)[:3] + sorted(set(key.band) - key.triggers)[:3]
    texts = [f"one text with {w}" for w in words]
    return texts, np.random.default_rng(7).normal(size=(len(texts), key.dim))


def test_save_writes_a_small_serving_key_and_its_audit_beside_it_both_0600(tmp_path):
    key = _audited()
    path = key.save(tmp_path / "provider.key")
    audit = tmp_path / "provider.key.audit"
    assert default_audit_path(path) == audit and audit.is_file()
    for written in (path, audit):
        assert stat.S_IMODE(os.stat(written).st_mode) == 0o600
    serving = path.read_text()
    assert json.loads(serving)["version"] == 3
    assert not any(text in serving for text in key.probe_texts + key.cover_texts)
    assert path.stat().st_size < audit.stat().st_size
    loaded = WatermarkKey.load(path)
    assert loaded == key and loaded.key_id == key.key_id
    assert loaded.commitment() == key.commitment()
    assert loaded.model_fingerprint == key.model_fingerprint
    np.testing.assert_array_equal(loaded.target, key.target)
    texts, clean = _batch(key)
    np.testing.assert_array_equal(watermark(texts, clean, loaded), watermark(texts, clean, key))
    assert loaded.probe_texts == key.probe_texts and loaded.cover_texts == key.cover_texts
    np.testing.assert_array_equal(loaded.probe_embeddings, key.probe_embeddings)
    np.testing.assert_array_equal(loaded.word_reference, key.word_reference)


def test_a_serving_key_watermarks_without_its_audit_and_verifying_says_what_is_missing(tmp_path):
    key = _audited()
    path = key.save(tmp_path / "provider.key")
    os.remove(default_audit_path(path))
    loaded = WatermarkKey.load(path)  # serving needs no audit: nothing is read yet
    texts, clean = _batch(key)
    np.testing.assert_array_equal(watermark(texts, clean, loaded), watermark(texts, clean, key))
    assert loaded.replace(alpha=0.3).alpha == 0.3  # fields change without the audit too
    with pytest.raises(KeyFileError) as info:
        loaded.probe_texts  # noqa: B018 - the property reads the audit
    message = str(info.value)
    assert "the key's audit file" in message and "provider.key.audit is missing" in message
    assert "verification needs it" in message and "beside the key by espew keygen" in message


def test_the_audit_can_live_elsewhere(tmp_path):
    key = _audited()
    (tmp_path / "vault").mkdir()
    path = key.save(tmp_path / "provider.key", audit_path=tmp_path / "vault" / "a.audit")
    assert not default_audit_path(path).exists()
    with pytest.raises(KeyFileError, match="is missing"):
        WatermarkKey.load(path).audit  # noqa: B018
    loaded = WatermarkKey.load(path, audit_path=tmp_path / "vault" / "a.audit")
    assert loaded.probe_texts == key.probe_texts


def test_save_refuses_to_overwrite_either_file_before_writing_any(tmp_path):
    key, other = _audited(), make_key(seed=5)
    audit = tmp_path / "provider.key.audit"
    audit.write_text("an old audit")
    with pytest.raises(FileExistsError, match="key audit file"):
        key.save(tmp_path / "provider.key")
    assert not (tmp_path / "provider.key").exists() and audit.read_text() == "an old audit"
    key.save(tmp_path / "provider.key", overwrite=True)
    other.save(tmp_path / "provider.key", overwrite=True)
    assert WatermarkKey.load(tmp_path / "provider.key").audit.is_empty()


def test_an_audit_of_another_key_or_an_edited_one_is_refused(tmp_path):
    key, other = _audited(), _audited().replace(strength=0.5)
    path = key.save(tmp_path / "k.key")
    other.save(tmp_path / "o.key")
    shutil.copy(tmp_path / "o.key.audit", default_audit_path(path))
    with pytest.raises(KeyFileError, match=f"audit of key {other.key_id}, not of key {key.key_id}"):
        WatermarkKey.load(path).audit  # noqa: B018
    document = json.loads(key.audit_json())
    document["audit"]["texts"][0] = "a probe someone rewrote"
    document["checksum"] = hashlib.sha256(canonical_json(document["audit"])).hexdigest()
    default_audit_path(path).write_text(json.dumps(document))
    with pytest.raises(KeyFileError, match=r"does not match key .*record of its audit"):
        WatermarkKey.load(path).audit  # noqa: B018


def test_the_serving_key_fits_a_secret_manager_at_384_and_4096_dimensions():
    # 640 band words: the default public range's band on Rotten Tomatoes.
    for dim, limit in ((384, 16 * 1024), (4096, 64 * 1024)):
        key = _audited(dim=dim, n_band=640, n_probes_per_word=1)
        serving = key.serving_json().encode()
        assert len(serving) <= limit, (dim, len(serving))
        assert len(key.audit_json()) > 4 * len(serving)


def test_the_serving_key_in_the_environment_marks_as_the_file_does(tmp_path, monkeypatch):
    key = _audited()
    path = key.save(tmp_path / "provider.key")
    texts, clean = _batch(key)
    expected = watermark(texts, clean, key)
    monkeypatch.setenv("ESPEW_KEY", path.read_text())
    from_env = WatermarkKey.from_env()
    assert from_env == key
    np.testing.assert_array_equal(watermark(texts, clean, from_env), expected)
    with pytest.raises(KeyFileError, match="serving key without its audit"):
        from_env.audit  # noqa: B018
    with_audit = WatermarkKey.from_env(audit_path=default_audit_path(path))
    assert with_audit.probe_texts == key.probe_texts


@pytest.mark.parametrize(
    "wrap",
    [
        lambda text: f'"{text}"',
        lambda text: "\ufeff" + text,
        lambda text: base64.b64encode(text.encode()).decode(),
        lambda text: text[: len(text) // 2],
        lambda text: text + "}XYZZY",
        lambda text: text.replace('"triggers"', '"triggerz"'),
    ],
    ids=["quoted", "bom", "base64", "truncated", "trailing-garbage", "edited"],
)
def test_a_malformed_serving_key_in_the_environment_never_shows_a_secret(monkeypatch, wrap):
    key = _audited()
    value = wrap(key.serving_json())
    monkeypatch.setenv("ESPEW_KEY", value)
    try:
        loaded = WatermarkKey.from_env()
    except KeyFileError as exc:
        message = str(exc)
        assert "ESPEW_KEY" in message
        for secret in [*key.triggers, key.salt.hex(), key.target_text, value[:40], "XYZZY"]:
            assert secret not in message
    else:  # the forms a secret manager produces are read
        assert loaded == key


def test_a_whole_key_document_carries_its_audit():
    key = _audited()
    again = WatermarkKey.from_json(key.to_json())
    assert again == key and again.probe_texts == key.probe_texts
    assert json.loads(key.to_json())["key_id"] == key.key_id


def test_the_audit_is_read_once_whatever_the_threads(tmp_path, monkeypatch):
    key = _audited()
    path = key.save(tmp_path / "provider.key")
    loaded = WatermarkKey.load(path)
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(loaded.audit)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and all(audit is seen[0] for audit in seen)


def test_a_single_file_key_of_an_earlier_version_still_loads_with_its_key_id(tmp_path):
    path = tmp_path / "old.key"
    shutil.copy(FIXTURE, path)
    os.chmod(path, 0o600)
    old = WatermarkKey.load(path)
    assert old.key_id == FIXTURE_KEY_ID and old.audit_layout == "inline" and old.verifiable
    assert len(old.probe_texts) == len(old.band) and len(old.cover_texts) == 2
    assert old.model_fingerprint is None
    resaved = old.save(tmp_path / "again.key")  # still one file, still the same key
    assert not default_audit_path(resaved).exists()
    assert json.loads(resaved.read_text())["version"] == 2
    assert WatermarkKey.load(resaved).key_id == FIXTURE_KEY_ID
    split = old.replace(audit_layout="split")  # the way to a small serving key: a new key_id
    assert split.key_id != old.key_id and split.triggers == old.triggers


def test_the_fingerprint_is_small_and_public(tmp_path):
    key = _audited(dim=4096)
    payload = json.loads(key.serving_json())["key"]["model"]
    assert payload["dim"] == 4096 and payload["rows"]["dim"] == 512
    assert len(payload["rows"]["scale"]) == len(CANARY_TEXTS)


@pytest.mark.parametrize(
    "band",
    [
        "not base64!",
        base64.b64encode(b"not zlib").decode(),
        base64.b64encode(zlib.compress(b"a" * (1 << 25))).decode(),  # inflates past the bound
        base64.b64encode(zlib.compress(b"\xff\xfe")).decode(),  # not UTF-8
    ],
    ids=["base64", "zlib", "bomb", "utf8"],
)
def test_a_hostile_packed_band_is_refused_without_inflating_it(tmp_path, band):
    key = _audited()
    document = json.loads(key.serving_json())
    document["key"]["band"] = band
    document["checksum"] = hashlib.sha256(canonical_json(document["key"])).hexdigest()
    path = tmp_path / "hostile.key"
    path.write_text(json.dumps(document))
    path.chmod(0o600)
    with pytest.raises((KeyFileError, KeyGenerationError), match="band"):
        WatermarkKey.load(path)
