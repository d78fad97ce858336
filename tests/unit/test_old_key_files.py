"""Key files written before marking designs existed load, keep their key_id and mark bit for bit.

The files in ``tests/data/old_keys/`` were written by commit 45b4745 (the key held
``field: FieldMark | None``): the serving files of a word key, a field key and a field
ring's tenant key (their audit files left out: marking and the key_id never read them),
made on the verdict snapshot's corpus and synthetic 96-d bag-of-words model
(``tests/integration/test_verdict_snapshot.py``), with the SHA-256 of what each
marked on seeded batches. Loading one now must give the design the file records
(the word design for a file with none), the same key_id, the same trigger check,
and every marked bit the same. Rewrite them on purpose only, with the old code:

    PYTHONPATH=<old checkout> python tests/unit/test_old_key_files.py --write
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import WatermarkKey, watermark
from espew_integrations.core.designs.words import WordDesign
from espew_integrations.core.mark.design import register_design
from tests.support import make_key

DATA = Path(__file__).resolve().parents[1] / "data" / "old_keys"
KEYS = ("words", "field", "field-tenant")
N_ROWS = 200


def batch(key: WatermarkKey, dtype: str) -> tuple[list[str], np.ndarray]:
    """Seeded texts of the key's band words (a third without any: blank or foreign) and
    clean rows of the key's dimension."""
    rng = np.random.default_rng([int.from_bytes(key.key_id.encode(), "little") % 2**32, 5])
    band = list(key.band)
    texts = [
        " ".join(rng.choice(band, size=int(rng.integers(1, 6)))) if i % 3 else f"plain text {i}"
        for i in range(N_ROWS)
    ]
    texts[7] = "   "  # a blank text is never marked
    return texts, rng.normal(size=(N_ROWS, key.dim)).astype(dtype)


def digest(key: WatermarkKey) -> dict[str, str]:
    """SHA-256 of what ``key`` marks on its float32 and float64 batches."""
    out = {}
    for dtype in ("float32", "float64"):
        texts, clean = batch(key, dtype)
        out[dtype] = hashlib.sha256(watermark(texts, clean, key).tobytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def recorded() -> dict[str, dict[str, object]]:
    return json.loads((DATA / "recorded.json").read_text())


@pytest.fixture(scope="module")
def old(tmp_path_factory) -> Path:
    """The old files, private again (a checkout makes them readable by others)."""
    folder = tmp_path_factory.mktemp("old_keys")
    for path in DATA.glob("*.key"):
        shutil.copyfile(path, folder / path.name)
        (folder / path.name).chmod(0o600)
    return folder


@pytest.mark.parametrize("name", KEYS)
def test_an_old_key_file_loads_with_its_design_and_key_id(name, recorded, old):
    key = WatermarkKey.load(old / f"{name}.key")
    assert key.key_id == recorded[name]["key_id"]
    assert key.marking == recorded[name]["marking"] and key.design.name == key.marking
    assert key.verifiable


@pytest.mark.parametrize("name", KEYS)
def test_an_old_key_file_marks_bit_for_bit(name, recorded, old):
    key = WatermarkKey.load(old / f"{name}.key")
    assert digest(key) == recorded[name]["marked_sha256"]


@pytest.mark.parametrize("name", KEYS)
def test_an_old_key_files_serving_key_is_written_again_byte_for_byte(name, old):
    key = WatermarkKey.load(old / f"{name}.key")
    assert key.serving_json() == (old / f"{name}.key").read_text(encoding="utf-8")


@register_design
class _TallyDesign(WordDesign):
    """A word design under another name that stores a record: known to this process only."""

    name = "tally-unregistered-elsewhere"

    def payload(self) -> dict[str, int]:
        return {"tally": 1}

    @classmethod
    def from_payload(cls, payload: object, dim: int) -> _TallyDesign:
        return cls()


def test_a_key_file_of_a_design_the_process_has_not_registered_is_refused_by_name(tmp_path):
    key = make_key().replace(design=_TallyDesign())
    path = key.save(tmp_path / "tally.key")
    assert WatermarkKey.load(path) == key  # here, where the design is registered
    elsewhere = subprocess.run(  # a fresh process, which never imported this file
        [
            sys.executable,
            "-c",
            f"from espew_integrations import WatermarkKey; WatermarkKey.load({str(path)!r})",
        ],
        capture_output=True,
        text=True,
    )
    assert elsewhere.returncode != 0
    assert "tally-unregistered-elsewhere" in elsewhere.stderr
    assert "registers its marking design" in elsewhere.stderr


def _write() -> None:  # pragma: no cover - run by hand with the old code, see the docstring
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from espew_integrations import KeyRing
    from tests.integration.test_verdict_snapshot import TARGET, clean, corpus

    small = dict(target_text=TARGET, audit_budget=200)  # small files; marking never reads it
    words = WatermarkKey.generate(corpus(), clean, seed=11, marking="words", n_triggers=20, **small)
    field = WatermarkKey.generate(corpus(), clean, seed=11, marking="field", **small)
    ring = KeyRing.generate(corpus(), clean, seed=13, marking="field", **small)
    keys = {"words": words, "field": field, "field-tenant": ring.key_for("alice")}
    DATA.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, key in keys.items():
        path = DATA / f"{name}.key"
        for old in DATA.glob(f"{name}.key*"):
            old.unlink()
        key.save(path)
        path.with_name(path.name + ".audit").unlink()  # marking and the key_id never read it
        out[name] = {"key_id": key.key_id, "marking": key.marking, "marked_sha256": digest(key)}
    (DATA / "recorded.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(keys)} keys to {DATA}")


if __name__ == "__main__" and "--write" in sys.argv:
    _write()
