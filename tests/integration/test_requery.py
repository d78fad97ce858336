"""Evidence an arbiter can check without trusting the auditor (issue 45), on synthetic
suspects: the commit record, a forged conviction, and re-asking the suspect."""

from __future__ import annotations

import hashlib
import json

import httpx
import numpy as np
import pytest

from espew_integrations import OpenAIEndpoint, verify
from espew_integrations.core.records.requery import (
    answer_distances,
    draw_requery,
    recorded_answers,
)
from espew_integrations.core.records.transcript import (
    TRANSCRIPT_DIGEST_HEADER,
    TRANSCRIPT_FILE,
    TranscriptRecorder,
    read_transcript,
)
from espew_integrations.evidence import check_evidence, save_private_evidence
from tests.forgery import forge_transcript
from tests.support import make_key
from tests.unit.test_verify import WordSpace

KEY = make_key(32, n_band=80, n_triggers=10, seed=4)


@pytest.fixture
def cleared(tmp_path):
    """An innocent suspect's audit, recorded: not copied."""
    innocent = WordSpace(KEY, seed=0)
    private = tmp_path / "private"
    report = verify(innocent, KEY, batch_size=16, transcript=private, suspect_name="spec:innocent")
    assert report.status == "not_copied"
    save_private_evidence(report, private, plot=False)
    return innocent, private


def test_the_commit_record_fixes_every_answer_before_the_verdict(cleared):
    _, private = cleared
    transcript = read_transcript(private / TRANSCRIPT_FILE)
    lines = (private / TRANSCRIPT_FILE).read_bytes().splitlines()
    assert [json.loads(line)["kind"] for line in lines[-2:]] == ["commit", "end"]
    assert transcript.commit["commitment"] == transcript.commitment
    assert transcript.commitment == "sha256:" + hashlib.sha256(lines[-3]).hexdigest()
    assert transcript.end["finished"] >= transcript.batches[-1]["received"]


def test_a_forged_conviction_fools_the_replay_but_not_the_requery(cleared, tmp_path):
    innocent, private = cleared
    watermarked = WordSpace(KEY, pull=3.0, seed=1)  # the auditor's own service
    forged = forge_transcript(private, watermarked, KEY)
    assert forged.status == "copied" and forged.p_value < 1e-6
    forged.save(tmp_path / "forged-public")

    fooled = check_evidence(private, KEY, public=tmp_path / "forged-public")
    assert fooled.holds and fooled.replayed_status == "copied"  # the limit, documented
    assert any("recorded answers are the suspect's" in line for line in fooled.not_proved)

    caught = check_evidence(private, KEY, requery=innocent, requery_seed=3)
    assert not caught.holds and caught.requery is not None
    assert "the recorded answers are not the suspect's" in caught.reason
    recorded = recorded_answers(read_transcript(private / TRANSCRIPT_FILE))
    asked = draw_requery(len(recorded.texts), "auto", seed=3)  # the default size
    assert caught.requery.mismatched == tuple(sorted(set(recorded.records[asked].tolist())))
    assert caught.requery.n_rows_mismatched == len(asked) == caught.requery.n_asked
    assert f"in records {caught.requery.mismatched[0]}" in caught.reason


def test_the_genuine_transcript_passes_the_requery(cleared):
    innocent, private = cleared
    check = check_evidence(private, KEY, requery=innocent, requery_size=None, requery_seed=5)
    assert check.holds, str(check)
    recorded = recorded_answers(read_transcript(private / TRANSCRIPT_FILE))
    assert check.requery.n_asked == len(recorded.texts)
    assert check.requery.largest_distance == 0.0
    assert any(line.startswith("answers re-asked and matched") for line in check.proved)
    assert "not proved:" in str(check) and "no timestamp" in str(check)


def test_one_answer_edited_within_noise_passes_and_beyond_the_tolerance_fails(cleared):
    innocent, private = cleared
    nudged = {}

    def nudge(scale):
        def edit(batches):
            record = batches[2]
            from espew_integrations.core.records.transcript import decode_answer, encode_answer

            values = decode_answer(record["answer"]).copy()
            values[0] *= 1 + scale
            record["answer"] = encode_answer(values)
            nudged["record"] = record["record"]

        return edit

    forge_transcript(private, innocent, KEY, edit=nudge(1e-6))
    assert check_evidence(private, KEY, requery=innocent, requery_size=None).holds
    forge_transcript(private, innocent, KEY, edit=nudge(1e-3))
    check = check_evidence(private, KEY, requery=innocent, requery_size=None)
    assert not check.holds and check.requery.mismatched == (nudged["record"],)


def test_the_requery_draw_is_keyed_uniform_and_reported():
    assert np.array_equal(draw_requery(100, 10, 7), draw_requery(100, 10, 7))
    assert not np.array_equal(draw_requery(100, 10, 7), draw_requery(100, 10, 8))
    assert len(draw_requery(5, 10, 1)) == 5 and len(draw_requery(50, None, 1)) == 50
    hits = np.zeros(40)
    for seed in range(2000):
        hits[draw_requery(40, 4, seed)] += 1
    assert hits.min() > 140 and hits.max() < 260  # every record alike: 200 expected
    with pytest.raises(ValueError, match="requery size"):
        draw_requery(10, 0, 1)


def test_answer_distances_is_relative_l2_and_inf_where_rows_cannot_match():
    recorded = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 0.0]])
    answers = np.array([[3.0, 4.5], [1.0, 0.0], [0.0, 0.0]])
    assert answer_distances(recorded, answers).tolist() == [0.1, 0.0, np.inf]
    assert np.isinf(answer_distances(recorded, answers[:, :1])).all()


def test_a_suspect_that_cannot_be_asked_proves_nothing(cleared):
    _, private = cleared

    def down(texts):
        raise ConnectionError("refused")

    check = check_evidence(private, KEY, requery=down)
    assert not check.holds and "could not be asked" in check.reason and "refused" in check.reason


def test_an_http_suspect_receives_the_commitment_in_a_header(tmp_path):
    space = WordSpace(KEY, seed=0)
    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        seen.append((request.headers.get(TRANSCRIPT_DIGEST_HEADER), list(texts)))
        rows = np.asarray(space(texts), dtype=np.float32).tolist()
        data = [{"index": i, "embedding": row} for i, row in enumerate(rows)]
        return httpx.Response(200, json={"data": data, "model": "m"})

    endpoint = OpenAIEndpoint("http://suspect.test/v1", "m", batch_size=64)
    endpoint._client = httpx.Client(transport=httpx.MockTransport(answer))
    recorder = TranscriptRecorder(tmp_path, send_digest=True)
    verify(endpoint, KEY, batch_size=16, transcript=recorder)
    transcript = read_transcript(tmp_path / TRANSCRIPT_FILE)
    headers = [header for header, _ in seen]
    assert headers[:-1] == [None] * (len(seen) - 1)  # only the last request carries it
    assert headers[-1] == transcript.commitment == recorder.commitment
    assert seen[-1][1] == [transcript.batches[-1]["texts"][-1]]  # the audit's last text again
    sent = transcript.commit["anchors"]["suspect"]
    assert sent["digest"] == transcript.commitment and "error" not in sent
    check = check_evidence(tmp_path, KEY)
    assert check.holds and any("only the suspect's own logs" in n for n in check.not_proved)
    with pytest.raises(ValueError, match="transcript digest"):
        endpoint.send_transcript_digest("sha256:not-hex\r\nX-Evil: 1", "text")


def test_a_digest_sent_then_rechained_over_is_caught(tmp_path):
    space = WordSpace(KEY, seed=0)

    def answer(request: httpx.Request) -> httpx.Response:
        rows = np.asarray(space(json.loads(request.content)["input"]), np.float32).tolist()
        return httpx.Response(200, json={"data": [{"index": i, "embedding": r}
                                                  for i, r in enumerate(rows)]})  # fmt: skip

    endpoint = OpenAIEndpoint("http://suspect.test/v1", "m")
    endpoint._client = httpx.Client(transport=httpx.MockTransport(answer))
    verify(endpoint, KEY, transcript=TranscriptRecorder(tmp_path, send_digest=True))
    forge_transcript(tmp_path, WordSpace(KEY, pull=3.0, seed=1), KEY)
    check = check_evidence(tmp_path, KEY)
    assert not check.holds and "records were edited after it was sent" in check.reason
