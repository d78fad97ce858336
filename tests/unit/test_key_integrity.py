"""A key nobody could have cherry-picked, that loads safely and never leaks (issue 10)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import warnings

import numpy as np
import pytest

from espew_integrations import KeyFileError, KeyGenerationError, WatermarkKey, verify
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.ground.secret_files import canonical_json as _canonical
from espew_integrations.core.keys.key_storage import KeyFileWarning
from tests.support import make_key
from tests.unit.test_verify import WordSpace


def _rewrite(document: dict, edit) -> str:
    """Edit a saved key's payload and recompute its unkeyed checksum and key_id,
    as an attacker (or a dishonest provider) with the file can."""
    payload = document["key"]
    edit(payload)
    document["checksum"] = hashlib.sha256(_canonical(payload)).hexdigest()
    document["key_id"] = hashlib.sha256(b"espew-key-id\x00" + _canonical(payload)).hexdigest()[:16]
    return json.dumps(document)


def test_triggers_are_the_draw_the_salt_dictates(key64):
    assert key64.verifiable
    assert key64.triggers == draw_triggers(key64.salt, key64.band, len(key64.triggers))
    other = draw_triggers(bytes(32), key64.band, len(key64.triggers))
    assert other != key64.triggers  # a different salt draws different triggers


def test_load_refuses_hand_picked_triggers_even_with_recomputed_hashes(key64):
    document = json.loads(key64.to_json())
    non_triggers = sorted(set(key64.band) - key64.triggers)

    def swap_one(payload):
        payload["triggers"] = sorted([*payload["triggers"][1:], non_triggers[0]])

    with pytest.raises(KeyFileError, match="not the draw its salt dictates"):
        WatermarkKey.from_json(_rewrite(document, swap_one))


def test_a_hand_made_key_is_never_copied_but_keeps_its_p_value():
    key = make_key(64, n_band=200, n_triggers=20)
    chosen = sorted(key.band)[:20]
    hand_made = key.replace(triggers=chosen)
    assert not hand_made.verifiable
    report = verify(WordSpace(hand_made, pull=1.0), hand_made, seed=0)
    assert report.status == "inconclusive" and not report.copied
    assert "draw" in report.reason and report.p_value < 1e-10


def test_version_1_keys_load_mark_as_before_and_are_unverifiable(key64):
    document = json.loads(key64.replace(audit_layout="inline").to_json())  # one file, version 2
    payload = document["key"]
    for field in ("normalization", "window", "probes"):
        del payload[field]
    document["version"] = 1
    # Version 1 drew its triggers with numpy's generator, not from the salt.
    hand_drawn = sorted(key64.band)[:10]

    def old_draw(payload):
        payload["triggers"] = hand_drawn

    old = WatermarkKey.from_json(_rewrite(document, old_draw))
    assert old.normalization == "lower-v0" and not old.verifiable
    assert json.loads(old.to_json())["version"] == 1  # re-saved as it was
    word = hand_drawn[0]
    soft_hyphenated = word[:2] + "\u00ad" + word[2:]
    # The old rule (str.lower) marked exactly these rows, and still does.
    assert old.contains_trigger([word.upper(), soft_hyphenated]).tolist() == [True, False]
    assert old.replace(normalization="unicode-v1").contains_trigger(
        [word.upper(), soft_hyphenated]
    ).tolist() == [True, True]


def test_commitment_binds_the_whole_key_and_shows_no_secret(key64):
    line = key64.commitment()
    assert key64.key_id in line and key64.created in line
    digest = line.split("sha256=")[1].split()[0]
    assert len(digest) == 64 and int(digest, 16) >= 0
    for secret in [*key64.triggers, key64.salt.hex(), key64.target_text]:
        assert secret not in line
    assert key64.replace(strength=0.5).commitment() != line


@pytest.mark.parametrize(
    "wrap",
    [
        lambda text: text,
        lambda text: f'"{text}"',
        lambda text: f"'{text}'",
        lambda text: "\ufeff" + text,
        lambda text: base64.b64encode(text.encode()).decode(),
    ],
    ids=["plain", "double-quoted", "single-quoted", "bom", "base64"],
)
def test_from_env_reads_the_key_however_a_secret_manager_wraps_it(monkeypatch, key64, wrap):
    monkeypatch.setenv("ESPEW_KEY", wrap(key64.to_json()))
    assert WatermarkKey.from_env() == key64


@pytest.mark.parametrize(
    "value",
    [
        "{not json but XYZZY " + "x" * 80,
        '"{broken" + XYZZY',
        base64.b64encode(b"XYZZY-not-a-key" * 6).decode(),
        "/no/such/dir/XYZZY.key",
    ],
)
def test_from_env_errors_name_the_variable_never_its_value(monkeypatch, value):
    monkeypatch.setenv("ESPEW_KEY", value)
    with pytest.raises(KeyFileError) as info:
        WatermarkKey.from_env()
    message = str(info.value)
    assert "ESPEW_KEY" in message
    assert value not in message and "XYZZY" not in message and value[:12] not in message


def test_a_key_readable_by_others_warns_like_ssh(tmp_path, key64):
    path = key64.save(tmp_path / "provider.key")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        WatermarkKey.load(path)  # 0600: silent
    os.chmod(path, 0o644)
    with pytest.warns(KeyFileWarning, match="chmod 600"):
        WatermarkKey.load(path)


def test_the_target_cannot_be_made_writable(key64):
    with pytest.raises(ValueError):
        key64.target.setflags(write=True)
    with pytest.raises(ValueError):
        key64.target[0] = 0.0


def test_deeply_nested_key_json_is_a_key_file_error():
    with pytest.raises(KeyFileError, match="nested too deeply"):
        WatermarkKey.from_json("[" * 100_000 + "]" * 100_000)


def test_a_key_that_would_overwrite_no_coordinate_is_refused(key64):
    with pytest.raises(KeyGenerationError, match=r"floor\(alpha\*d\) = 0"):
        key64.replace(alpha=0.01)  # 0.01 * 64 < 1
    document = json.loads(key64.to_json())

    def tiny_alpha(payload):
        payload["alpha"] = 0.01

    with pytest.raises(KeyFileError, match="silently do nothing"):
        WatermarkKey.from_json(_rewrite(document, tiny_alpha))


def test_stored_probes_are_validated(key64):
    with pytest.raises(KeyGenerationError, match="differ in length"):
        key64.replace(probe_texts=("a text here",), probe_owner=(0, 1))
    with pytest.raises(KeyGenerationError, match="does not exist"):
        key64.replace(probe_texts=("a text here",), probe_owner=(10_000,))
    with pytest.raises(KeyGenerationError, match=r"\[-1, 1\]"):
        key64.replace(
            probe_texts=("a text here",), probe_owner=(0,), probe_reference=(float("nan"),)
        )


def test_keys_with_probes_round_trip_through_json(key64):
    band = list(key64.band)
    probed = key64.replace(
        probe_texts=tuple(f"a review about {w} indeed" for w in band),
        probe_owner=tuple(range(len(band))),
        probe_reference=tuple(np.linspace(-0.2, 0.3, len(band))),
        word_reference=tuple(np.linspace(0.1, 0.2, len(band))),
    )
    again = WatermarkKey.from_json(probed.to_json())
    assert again == probed and again.probe_texts == probed.probe_texts
    assert np.array_equal(again.probe_reference, probed.probe_reference)
