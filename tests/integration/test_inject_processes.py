"""watermark() gives the same bytes in a new process (a fresh hash seed, nothing inherited)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap

import numpy as np

from espew_integrations import watermark
from tests.support import make_key
from tests.unit.test_inject import texts_for


def test_output_is_identical_across_processes(tmp_path):
    key = make_key(256, selection="hashed", seed=9)
    key_path = key.save(tmp_path / "k.key")
    rng = np.random.default_rng(6)
    clean = rng.normal(size=(32, 256)).astype(np.float32)
    texts = texts_for(key, 32, rng)
    np.save(tmp_path / "clean.npy", clean)
    (tmp_path / "texts.txt").write_text("\n".join(texts))
    script = textwrap.dedent(
        f"""
        import hashlib, numpy as np
        from espew_integrations import WatermarkKey, watermark
        key = WatermarkKey.load({str(key_path)!r})
        clean = np.load({str(tmp_path / "clean.npy")!r})
        texts = open({str(tmp_path / "texts.txt")!r}).read().split("\\n")
        print(hashlib.sha256(watermark(texts, clean, key).tobytes()).hexdigest())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    )
    here = hashlib.sha256(watermark(texts, clean, key).tobytes()).hexdigest()
    assert result.stdout.strip() == here
