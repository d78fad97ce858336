"""Issue 38's must-show: an audit's transcript, checked offline by ``espew evidence check``.

A real key (``espew keygen`` on 3,000 Rotten Tomatoes texts, small band for speed),
the real offline MiniLM behind the watermark as the suspect (``module:attr``), the
real CLI: the public summary names the suspect and the commitment ``espew key check``
prints, the transcript replays to the recorded verdict, and one number of one answer
changed, or one record removed, makes the check fail.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import KeyRing, WatermarkKey
from espew_integrations.cli import EXIT_COPIED, main
from espew_integrations.core.transcript import TRANSCRIPT_FILE, decode_answer, encode_answer

TARGET_TEXT = "Acme Embeddings service, 2026 edition"
LABEL = "Acme Corp embeddings API"


@pytest.fixture(scope="module")
def work(tmp_path_factory, rt_subset) -> Path:
    """provider.key from ``espew keygen`` on 3,000 Rotten Tomatoes texts, a suspects module."""
    root = tmp_path_factory.mktemp("transcript")
    corpus = root / "reviews.txt"
    corpus.write_text("\n".join(t.replace("\n", " ") for t in rt_subset.texts) + "\n")
    argv = ["keygen", "--corpus", str(corpus), "--target-text", TARGET_TEXT, "--seed", "3"]
    argv += ["--n-triggers", "20", "--max-band-words", "60", "--probes-per-word", "4"]
    argv += ["--probe-mix", "corpus", "--out", str(root / "provider.key"), "--no-progress"]
    assert main(argv) == 0
    key = WatermarkKey.load(root / "provider.key")
    ring = KeyRing(master=b"\x07" * 32, shared_key=key, n_tenant_triggers=10)
    ring.save(root / "provider.ring")
    (root / "tenants.txt").write_text("acct-0\nacct-1\n")
    (root / "suspects.py").write_text(
        "from espew_integrations import WatermarkKey, watermark\n"
        "from espew_integrations.offline.embedders import minilm\n"
        f"_key = WatermarkKey.load({str(root / 'provider.key')!r})\n"
        "_model = minilm()\n"
        "def marked(texts):\n"
        "    return watermark(texts, _model(texts), _key)\n"
    )
    return root


def commitment_printed(key_path: Path, capsys) -> str:
    assert main(["key", "check", str(key_path)]) == 0
    return capsys.readouterr().out.strip().splitlines()[-1]


def with_one_number_changed(private: Path, copy: Path) -> None:
    """``private`` copied to ``copy`` with the last bit of one number of one answer changed."""
    shutil.copytree(private, copy)
    lines = (copy / TRANSCRIPT_FILE).read_bytes().splitlines()
    record = json.loads(lines[2])
    values = decode_answer(record["answer"]).copy()
    values[3, 7] = np.nextafter(values[3, 7], np.inf)
    record["answer"] = encode_answer(values)
    lines[2] = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    (copy / TRANSCRIPT_FILE).write_bytes(b"\n".join(lines) + b"\n")


def with_one_record_removed(private: Path, copy: Path) -> None:
    shutil.copytree(private, copy)
    lines = (copy / TRANSCRIPT_FILE).read_bytes().splitlines()
    del lines[3]
    (copy / TRANSCRIPT_FILE).write_bytes(b"\n".join(lines) + b"\n")


def test_verify_records_a_transcript_that_evidence_check_replays(work, capsys):
    public, private = work / "public", work / "private"
    spec = f"{work / 'suspects.py'}:marked"
    argv = ["verify", "--key", str(work / "provider.key"), "--suspect", spec, "--no-progress"]
    argv += ["--report-dir", str(public), "--private-report-dir", str(private)]
    assert main([*argv, "--suspect-label", LABEL]) == EXIT_COPIED
    capsys.readouterr()
    summary = (public / "summary.md").read_text()
    assert spec in summary and LABEL in summary
    assert commitment_printed(work / "provider.key", capsys) in summary
    assert "COPIED: the suspect's answers carry our watermark" in summary
    report = json.loads((public / "report.json").read_text())
    assert report["suspect"] == spec and report["transcript_digest"].startswith("sha256:")
    assert report["transcript_digest"] in summary
    assert not {p.name for p in public.iterdir()} & {TRANSCRIPT_FILE}  # private only

    check = ["evidence", "check", str(private), "--key", str(work / "provider.key")]
    assert main([*check, "--public", str(public)]) == 0
    assert "EVIDENCE HOLDS" in capsys.readouterr().out

    with_one_number_changed(private, work / "edited")
    assert main(["evidence", "check", str(work / "edited"), "--key", str(work / "provider.key")])
    assert "chain broken at record 3" in capsys.readouterr().out
    with_one_record_removed(private, work / "removed")
    assert main(["evidence", "check", str(work / "removed"), "--key", str(work / "provider.key")])
    assert "chain broken at record 3" in capsys.readouterr().out


def test_trace_records_a_transcript_that_evidence_check_replays(work, capsys):
    public, private = work / "trace-public", work / "trace-private"
    spec = f"{work / 'suspects.py'}:marked"
    argv = ["trace", "--ring", str(work / "provider.ring"), "--tenants", str(work / "tenants.txt")]
    argv += ["--suspect", spec, "--no-progress", "--suspect-label", LABEL]
    argv += ["--report-dir", str(public), "--private-report-dir", str(private)]
    assert main(argv) == EXIT_COPIED
    capsys.readouterr()
    traced = json.loads((public / "trace.json").read_text())
    assert traced["shared"]["transcript_digest"].startswith("sha256:")
    assert traced["shared"]["suspect_label"] == LABEL
    assert sorted(p.name for p in private.iterdir()) == ["PRIVATE-trace.json", TRANSCRIPT_FILE]

    ring = str(work / "provider.ring")
    assert main(["evidence", "check", str(private), "--ring", ring, "--public", str(public)]) == 0
    assert "EVIDENCE HOLDS" in capsys.readouterr().out
    assert main(["evidence", "check", str(private), "--key", str(work / "provider.key")]) != 0
    assert "check it with the key ring" in capsys.readouterr().out
    with_one_number_changed(private, work / "trace-edited")
    assert main(["evidence", "check", str(work / "trace-edited"), "--ring", ring]) != 0
    assert "EVIDENCE DOES NOT HOLD" in capsys.readouterr().out
