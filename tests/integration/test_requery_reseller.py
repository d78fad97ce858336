"""Issue 54, end to end: a noisy reseller of the watermarked offline MiniLM cannot void
its own genuine evidence through ``espew evidence check --requery``.

The reseller (a ``module:attr`` suspect, the real model behind it) adds relative
noise of 1e-3 to each answer, a shift of its own to each batch, and rounds a random
half of its batches to float16. ``espew verify`` convicts it; the arbiter's
requery at the default size finds every answer off the record by more than the old
fixed tolerance, yet within the reseller's own repeat noise, re-derives COPIED
from its re-asked answers, prints the escape chance for the size used, and holds.
"""

from __future__ import annotations

import re

from espew_integrations.cli import main
from espew_integrations.cli.common import EXIT_COPIED
from espew_integrations.core.records.requery import DEFAULT_REQUERY_TOLERANCE

RESELLER = """
import numpy as np
from espew_integrations import WatermarkKey, watermark
from espew_integrations.offline.embedders import minilm

_key = WatermarkKey.load({key!r})
_model = minilm()
_rng = np.random.default_rng(0)

def noisy(texts):
    rows = watermark(texts, _model(texts), _key)
    scale = np.linalg.norm(rows, axis=1, keepdims=True) / np.sqrt(rows.shape[1])
    rows = rows + 1e-3 * scale * _rng.normal(size=rows.shape)
    rows = rows + 1e-3 * scale * _rng.normal(size=rows.shape[1])
    if _rng.random() < 0.5:
        rows = rows.astype(np.float16).astype(np.float64)
    return rows
"""


def test_the_noisy_resellers_genuine_evidence_holds_under_the_requery(key, tmp_path, capsys):
    key.save(tmp_path / "provider.key")
    module = tmp_path / "reseller.py"
    module.write_text(RESELLER.format(key=str(tmp_path / "provider.key")))
    spec = f"{module}:noisy"
    private = tmp_path / "private"
    argv = ["verify", "--key", str(tmp_path / "provider.key"), "--suspect", spec]
    assert main([*argv, "--private-report-dir", str(private), "--no-progress"]) == EXIT_COPIED
    capsys.readouterr()

    check = ["evidence", "check", str(private), "--key", str(tmp_path / "provider.key")]
    assert main([*check, "--requery", spec, "--requery-seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "EVIDENCE HOLDS" in out, out
    assert re.search(r"re-derived\s+: copied, p = ", out)
    largest = float(re.search(r"largest distance ([0-9.e-]+)", out).group(1))
    assert largest > 10 * DEFAULT_REQUERY_TOLERANCE  # the old fixed tolerance voided it
    assert "a forgery of 1% of the answers would have escaped this requery with probability" in out
    asked, rows = map(int, re.search(r"(\d+) of (\d+) recorded texts re-asked", out).groups())
    assert asked < rows and "32 texts asked twice" in out
