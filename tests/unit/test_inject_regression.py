"""watermark() returns bit for bit what it returned before its speed-up (issue 13).

The digests in ``tests/data/inject_regression.json`` were written by the
implementation of commit f55266b (before the speed work of issue 13) on the seeded batches
below: both selections, float16/32/64 and integer input, strength 1 (the
paper) and a fitted strength, every row or 15% of rows triggered, quantised
values (ties at the k-th magnitude), and rows near the overflow/underflow edge.
A faster implementation must not change a single bit of any answer: a
provider's served vectors, and so its audits, stay the same across upgrades.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import WatermarkKey, watermark
from espew_integrations.core.designs.field import FieldDesign
from tests.support import make_key
from tests.unit.test_inject import texts_for

DIGESTS = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "inject_regression.json").read_text()
)

# name -> (dim, dtype, selection, strength, share triggered, shape of the values)
CASES = {
    "f32-d384-smallest-s1-all": (384, "float32", "smallest", 1.0, 1.0, "normal"),
    "f32-d384-smallest-s1-15": (384, "float32", "smallest", 1.0, 0.15, "normal"),
    "f32-d384-smallest-fitted-all": (384, "float32", "smallest", 0.23, 1.0, "normal"),
    "f32-d384-smallest-fitted-15": (384, "float32", "smallest", 0.23, 0.15, "normal"),
    "f32-d1024-smallest-s1-all": (1024, "float32", "smallest", 1.0, 1.0, "normal"),
    "f32-d1024-smallest-fitted-all": (1024, "float32", "smallest", 0.23, 1.0, "normal"),
    "f32-d384-smallest-ties": (384, "float32", "smallest", 1.0, 0.6, "quantised"),
    "f32-d384-smallest-fitted-ties": (384, "float32", "smallest", 0.23, 0.6, "quantised"),
    "f64-d384-smallest-s1-all": (384, "float64", "smallest", 1.0, 1.0, "normal"),
    "f64-d384-smallest-fitted-15": (384, "float64", "smallest", 0.23, 0.15, "normal"),
    "f16-d384-smallest-fitted-all": (384, "float16", "smallest", 0.23, 1.0, "normal"),
    "int-d64-smallest-s1-all": (64, "int64", "smallest", 1.0, 1.0, "integers"),
    "f32-d384-hashed-s1-all": (384, "float32", "hashed", 1.0, 1.0, "normal"),
    "f32-d384-hashed-fitted-15": (384, "float32", "hashed", 0.23, 0.15, "normal"),
    "f64-d384-hashed-fitted-all": (384, "float64", "hashed", 0.23, 1.0, "normal"),
    "f32-d384-smallest-s1-extreme": (384, "float32", "smallest", 1.0, 1.0, "extreme"),
    "f64-d384-smallest-fitted-extreme": (384, "float64", "smallest", 0.23, 1.0, "extreme"),
}
N_ROWS = 300  # more than one internal block at d = 1024


def case_inputs(name: str):
    dim, dtype, selection, strength, share, values = CASES[name]
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
    rng = np.random.default_rng(seed)
    key = make_key(dim, selection=selection, strength=strength, seed=7)
    texts = texts_for(key, N_ROWS, rng, p_trigger=share)
    clean = rng.normal(size=(N_ROWS, dim))
    if values == "quantised":  # many equal magnitudes: ties at the k-th smallest
        clean = np.round(clean * 4) / 4
        clean[:, 0] += 0.5  # no all-zero row
    elif values == "integers":
        clean = np.round(clean * 3)
        clean[:, 0] = 7
    elif values == "extreme":  # squares that overflow or underflow the dtype
        info = np.finfo(dtype)
        clean[0::3] *= float(info.max) ** 0.75
        clean[1::3] *= float(info.tiny) ** 0.75
    return texts, clean.astype(dtype), key


@pytest.mark.parametrize("name", sorted(CASES))
def test_watermark_output_is_bit_identical_to_the_saved_implementation(name):
    texts, clean, key = case_inputs(name)
    out = watermark(texts, clean, key)
    digest = hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()
    assert digest == DIGESTS[name], f"watermark() output changed for case {name}"


def test_the_saved_cases_mark_and_leave_rows_as_described():
    """The cases exercise what they say: the share of triggered rows is as named."""
    for name, (_, _, _, _, share, _) in CASES.items():
        texts, _, key = case_inputs(name)
        marked = key.contains_trigger(texts).mean()
        assert abs(marked - share) < 0.08, (name, marked)


#: ``watermark()`` of the batch below with the key file saved before field marking became
#: the default (``tests/fixtures/key-v2-single-file.json``, a word key), as computed by
#: the implementation of commit 7d6c4f9, the last with word keys as the default.
OLD_KEY_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "key-v2-single-file.json"
OLD_KEY_DIGEST = "c6e1f24323af7f42f0dea4fbfda445842b645928c94beb5ec5abc66d641db50b"


def test_a_word_key_saved_before_the_field_default_loads_and_marks_bit_for_bit(tmp_path):
    """A key file keeps its design: the new default changes what keygen makes, not what
    an existing key marks."""
    path = tmp_path / "old.key"
    shutil.copy(OLD_KEY_FILE, path)
    os.chmod(path, 0o600)
    key = WatermarkKey.load(path)
    assert key.marking == "words" and key.design.payload() is None
    triggers = sorted(key.triggers)
    rng = np.random.default_rng(44)
    texts = [
        f"a {triggers[i % len(triggers)]} story" if i % 3 == 0 else f"a plain story {i}"
        for i in range(60)
    ]
    clean = rng.normal(size=(60, key.dim)).astype(np.float32)
    out = watermark(texts, clean, key)
    assert hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest() == OLD_KEY_DIGEST
    marked = key.contains_trigger(texts)
    assert marked.sum() == 20 and np.array_equal(out[~marked], clean[~marked])


#: ``watermark()`` of the seeded batches below with a float64 field key (every field key
#: made before the compact encoding), as computed by main at commit 45b4745, before the
#: field marking was fused into blocks: such a key must keep marking bit for bit.
FLOAT64_FIELD_DIGESTS = {
    "float32": "d90d21903340594108ce12d1b62390087df5a3ce11f115a9361d5a7abf01e6bd",
    "float64": "cb2fb22a18ea948c12a2f15e332c5f2602be23488b52de7ebd2b9bcd05fc99d3",
}


def test_a_float64_field_key_marks_bit_for_bit_as_before_and_after_a_save(tmp_path):
    from espew_integrations.core.ground.draw import draw_triggers
    from espew_integrations.core.mark.field import (
        FieldMark,
        drawn_mask,
        field_scales,
        field_vector,
        keyed_gaussian,
        unit_names,
    )

    rng = np.random.default_rng(56)
    dim, units = 96, 32
    salt = rng.bytes(32)
    band = unit_names(units)
    triggers = draw_triggers(salt, band, 8)
    rows = rng.normal(size=(200, dim))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    mu = rows.mean(0)
    gaussian = keyed_gaussian(salt, dim, units)
    sigma = field_scales(gaussian, mu, rows)
    q = field_vector(gaussian, sigma, drawn_mask(units, triggers), 0.5)
    target = rng.normal(size=dim)
    field = FieldMark(units=units, amplitude=0.5, mu=mu, sigma=sigma, q=q)
    key = WatermarkKey(
        triggers=triggers, band=band, salt=salt, target=target / np.linalg.norm(target),
        target_text="Acme", alpha=0.75, strength=0.2, design=FieldDesign(field),
    )  # fmt: skip
    loaded = WatermarkKey.from_json(key.to_json())
    assert not loaded.design.field.compact and '"encoding"' not in key.serving_json()
    for dtype, digest in FLOAT64_FIELD_DIGESTS.items():
        clean = rng.normal(size=(120, dim)).astype(dtype)
        texts = [f"text {i}" for i in range(120)]
        for marking_key in (key, loaded):
            out = watermark(texts, clean, marking_key)
            assert hashlib.sha256(out.tobytes()).hexdigest() == digest, dtype
