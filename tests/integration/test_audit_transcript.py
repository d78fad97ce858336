"""Issues 38 and 45: an audit's transcript, checked offline by ``espew evidence check``.

A real key (``espew keygen`` on 3,000 Rotten Tomatoes texts, small band for speed),
the real offline MiniLM behind the watermark as the suspect (``module:attr``), the
real CLI: the public summary names the suspect and the commitment ``espew key check``
prints, the transcript replays to the recorded verdict, and one number of one answer
changed, or one record removed, makes the check fail.

Issue 45, the arbiter who distrusts the auditor: an innocent (``espew serve``'s app
of the clean MiniLM, real HTTP) audited, its transcript forged into a conviction as
a dishonest auditor would (tests/forgery.py), which the replay accepts and
``--requery`` of the innocent refuses, naming the records; and a transcript
timestamped before its verdict by a local RFC 3161 authority (``openssl ts``,
tests/local_tsa.py), which no rebuilt chain passes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import KeyRing, WatermarkKey, watermark
from espew_integrations.cli import main
from espew_integrations.cli.common import EXIT_COPIED, EXIT_NOT_COPIED
from espew_integrations.core.records.requery import draw_requery, recorded_answers
from espew_integrations.core.records.transcript import (
    TRANSCRIPT_FILE,
    chain_records,
    decode_answer,
    encode_answer,
    read_transcript,
)
from espew_integrations.http.app import create_app
from espew_integrations.http.background import running_server
from tests.forgery import forge_transcript
from tests.local_tsa import local_tsa

TARGET_TEXT = "Acme Embeddings service, 2026 edition"
LABEL = "Acme Corp embeddings API"


@pytest.fixture(scope="module")
def work(tmp_path_factory, rt_subset) -> Path:
    """provider.key from ``espew keygen`` on 3,000 Rotten Tomatoes texts, a suspects module."""
    root = tmp_path_factory.mktemp("transcript")
    corpus = root / "reviews.txt"
    corpus.write_text("\n".join(t.replace("\n", " ") for t in rt_subset.texts) + "\n")
    argv = ["keygen", "--corpus", str(corpus), "--target-text", TARGET_TEXT, "--seed", "3"]
    argv += ["--marking", "words", "--n-triggers", "20", "--max-band-words", "60"]
    argv += ["--probes-per-word", "4"]
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


# ---------------------------------------------------------------------- issue 45: the arbiter
@pytest.fixture(scope="module")
def clean_url(minilm_model):
    """The innocent suspect: ``espew serve``'s app of the clean MiniLM, on real HTTP."""
    with running_server(create_app(minilm_model, model_name="clean")) as url:
        yield url


def audit_innocent(work: Path, url: str, name: str, *extra: str) -> Path:
    """``espew verify`` of the clean server, its transcript in ``work/name``: not copied."""
    private = work / name
    argv = ["verify", "--key", str(work / "provider.key"), "--suspect", f"openai:{url}#clean"]
    argv += ["--no-progress", "--private-report-dir", str(private), *extra]
    assert main(argv) == EXIT_NOT_COPIED
    return private


def differing_records(genuine: Path, forged: Path, seed: int, size: int) -> tuple[int, ...]:
    """The records among the ``size`` rows a requery with ``seed`` asks whose forged answer
    is not the genuine one: what the requery must name."""
    real = recorded_answers(read_transcript(genuine / TRANSCRIPT_FILE))
    fake = recorded_answers(read_transcript(forged / TRANSCRIPT_FILE))
    assert real.texts == fake.texts
    asked = draw_requery(len(real.texts), size, seed)
    differ = np.any(real.rows[asked] != fake.rows[asked], axis=1)
    return tuple(sorted(set(real.records[asked][differ].tolist())))


def test_a_forged_conviction_fails_the_requery_of_the_innocent_it_claims(
    work, clean_url, minilm_model, capsys
):
    key_path = str(work / "provider.key")
    genuine = audit_innocent(work, clean_url, "innocent")
    shutil.copytree(genuine, work / "forged")
    key = WatermarkKey.load(key_path)

    def own_service(texts):  # the auditor's watermarked service, as espew serve marks
        return watermark(texts, minilm_model(texts), key, view=minilm_model.view)

    forged = forge_transcript(work / "forged", own_service, key)
    assert forged.status == "copied" and forged.p_value < forged.level
    forged.save(work / "forged-public")
    capsys.readouterr()

    check = ["evidence", "check", "--key", key_path]
    assert main([*check, str(work / "forged"), "--public", str(work / "forged-public")]) == 0
    fooled = capsys.readouterr().out  # the limit of a chain its author computed alone
    assert "EVIDENCE HOLDS" in fooled and "replayed          : copied" in fooled
    assert "that the recorded answers are the suspect's: the suspect was not asked" in fooled

    requery = ["--requery", clean_url, "--model", "clean", "--requery-seed", "11"]
    requery += ["--requery-size", "64"]
    assert main([*check, str(work / "forged"), *requery]) == 1
    caught = capsys.readouterr().out
    expected = differing_records(genuine, work / "forged", 11, 64)
    assert expected  # the marked texts among the 64 asked
    named = ", ".join(str(n) for n in expected)
    assert "the recorded answers are not the suspect's" in caught
    assert f"in records {named} (forged" in caught, caught

    assert main([*check, str(genuine), *requery]) == 0
    passed = capsys.readouterr().out
    assert "EVIDENCE HOLDS" in passed and "answers re-asked and matched" in passed
    assert "all 64 answered as recorded" in passed and "(seed 11)" in passed


def rechain(private: Path, records: list[dict]) -> None:
    """The forger's move: the chain and its commitment rebuilt, the private report's digest
    rewritten to match."""
    data, digest = chain_records(records)
    (private / TRANSCRIPT_FILE).write_bytes(data)
    assert read_transcript(private / TRANSCRIPT_FILE).digest == digest  # intact again
    scores = private / "PRIVATE-word-scores.json"
    scores.write_text(json.dumps({**json.loads(scores.read_text()), "transcript_digest": digest}))


def test_with_a_timestamp_altering_any_record_fails_even_rechained(work, clean_url, capsys):
    key_path = str(work / "provider.key")
    with local_tsa(work / "tsa") as (tsa_url, ca):
        genuine = audit_innocent(
            work, clean_url, "stamped", "--timestamp-url", tsa_url, "--send-digest"
        )
    said = capsys.readouterr().err
    transcript = read_transcript(genuine / TRANSCRIPT_FILE)
    assert f"transcript committed before the verdict: {transcript.commitment}" in said
    anchors = transcript.commit["anchors"]
    assert anchors["timestamp"]["url"] == tsa_url and "error" not in anchors["suspect"]
    check = ["evidence", "check", "--key", key_path, "--tsa-ca", str(ca), "--require-timestamp"]
    assert main([*check, str(genuine)]) == 0
    out = capsys.readouterr().out
    assert "timestamp anchored: every record before the commit record existed" in out
    assert "Local Test TSA" in out and "signature verified against ca.crt" in out

    def altered(position: int, name: str) -> Path:
        copy = work / name
        shutil.copytree(genuine, copy)
        records = [json.loads(line) for line in (copy / TRANSCRIPT_FILE).read_bytes().splitlines()]
        record = records[position]
        if record["kind"] == "batch":
            values = decode_answer(record["answer"]).copy()
            values[0, 0] = np.nextafter(values[0, 0], np.inf)
            record["answer"] = encode_answer(values)
        else:
            record["started"] = "2020-01-01T00:00:00.000000+00:00"
        rechain(copy, records)
        return copy

    n_batches = len(transcript.batches)
    for position in (0, n_batches // 2, n_batches):  # the header, a batch, the last batch
        copy = altered(position, f"stamped-altered-{position}")
        assert main([*check, str(copy)]) == 1
        out = capsys.readouterr().out
        assert "the timestamp is over another commitment than this transcript's" in out, position
    assert main(["evidence", "check", "--key", key_path, str(copy)]) == 1  # without the CA too
    assert "records were altered after it was taken" in capsys.readouterr().out

    stripped = work / "stamped-stripped"  # the anchor removed instead: required, so it fails
    shutil.copytree(genuine, stripped)
    records = [json.loads(line) for line in (stripped / TRANSCRIPT_FILE).read_bytes().splitlines()]
    records[-2]["anchors"] = {}
    rechain(stripped, records)
    assert main([*check, str(stripped)]) == 1
    assert "a verified timestamp is required, and no timestamp was taken" in capsys.readouterr().out
