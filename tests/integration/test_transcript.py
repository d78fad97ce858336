"""The audit transcript's chain on synthetic data, and its replay (issue 38)."""

from __future__ import annotations

import base64
import dataclasses
import json
import stat

import httpx
import numpy as np
import pytest

from espew_integrations import OpenAIEndpoint, verify
from espew_integrations.core.evidence_check import check_transcript
from espew_integrations.core.records.transcript import (
    TRANSCRIPT_FILE,
    TranscriptError,
    TranscriptRecorder,
    chain_records,
    decode_answer,
    encode_answer,
    read_transcript,
)
from espew_integrations.evidence import save_private_evidence
from tests.support import make_key
from tests.unit.test_verify import WordSpace

KEY = make_key(32, n_band=80, n_triggers=10, seed=4)


def lines_of(directory) -> list[bytes]:
    return (directory / TRANSCRIPT_FILE).read_bytes().splitlines()


def write_lines(directory, lines: list[bytes]) -> None:
    (directory / TRANSCRIPT_FILE).write_bytes(b"\n".join(lines) + b"\n")


def rechained(lines: list[bytes]) -> list[bytes]:
    """The forger's move: every record renumbered and its ``prev`` recomputed after an edit
    (and the commit record's commitment with it), with the transcript module's own chaining."""
    chained, _ = chain_records([json.loads(line) for line in lines])
    return chained.splitlines()


def edited_answer(line: bytes, row: int = 0, column: int = 0) -> bytes:
    """The record ``line`` with one number of one answer changed (its last bit)."""
    record = json.loads(line)
    values = decode_answer(record["answer"]).copy()
    values[row, column] = np.nextafter(values[row, column], np.inf)
    record["answer"] = encode_answer(values)
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


@pytest.fixture
def audited(tmp_path):
    """A copied synthetic audit recorded into ``tmp_path/private``, batches of 16 texts."""
    private = tmp_path / "private"
    report = verify(
        WordSpace(KEY, pull=3.0), KEY, batch_size=16, transcript=private, suspect_name="spec:x"
    )
    assert report.status == "copied"
    return report, private


# ---------------------------------------------------------------------- answers
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_answers_are_recorded_exactly(dtype):
    rng = np.random.default_rng(0)
    values = rng.standard_normal((5, 7)).astype(dtype).astype(np.float64)
    values[1] = np.nan
    encoded = encode_answer(values)
    assert encoded["dtype"] == ("<f4" if dtype is np.float32 else "<f8")
    assert np.array_equal(decode_answer(encoded), values, equal_nan=True)
    with pytest.raises(ValueError):
        encode_answer([[1.0, 2.0], [3.0]])  # ragged: the audit counts it as a failed batch


# ---------------------------------------------------------------------- the chain
def test_the_recorded_transcript_is_intact_private_and_committed_to(audited):
    report, private = audited
    path = private / TRANSCRIPT_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    transcript = read_transcript(path)
    assert transcript.digest == report.transcript_digest
    header = transcript.header
    assert header["key_commitment"] == KEY.commitment()
    assert header["audit"] == "verify" and header["audit_round"] == 1
    assert header["settings"]["level"] == report.level and header["suspect"]["name"] == "spec:x"
    assert len(header["nonce"]) == 64 and header["package_version"]
    sent = [text for record in transcript.batches for text in record["texts"]]
    assert len(sent) == report.n_queries and all(len(r["texts"]) <= 16 for r in transcript.batches)
    assert all(r["sent"] <= r["received"] for r in transcript.batches)
    assert transcript.end["status"] == "copied" and transcript.end["p_value"] == report.p_value
    assert report.to_dict()["transcript_digest"] == transcript.digest  # the public form names it


@pytest.mark.parametrize("position", [0, 1, 3])
def test_editing_any_record_breaks_the_chain_at_the_next(audited, position):
    _, private = audited
    lines = lines_of(private)
    record = json.loads(lines[position])
    record["sent" if position else "started"] = "2020-01-01T00:00:00.000000+00:00"
    lines[position] = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    write_lines(private, lines)
    with pytest.raises(TranscriptError, match=f"chain broken at record {position + 1}"):
        read_transcript(private / TRANSCRIPT_FILE)


def test_removing_reordering_or_cutting_records_breaks_the_chain(audited, tmp_path):
    _, private = audited
    lines = lines_of(private)
    cases = {
        "removed": [*lines[:2], *lines[3:]],
        "reordered": [lines[0], lines[2], lines[1], *lines[3:]],
        "cut": lines[:-1],
    }
    for name, changed in cases.items():
        write_lines(private, changed)
        with pytest.raises(TranscriptError) as caught:
            read_transcript(private / TRANSCRIPT_FILE)
        expected = "no end record" if name == "cut" else "chain broken at record"
        assert expected in str(caught.value), name


def test_the_end_record_changes_the_digest(audited):
    report, private = audited
    lines = lines_of(private)
    end = json.loads(lines[-1])
    end["p_value"] = 1e-40
    lines[-1] = json.dumps(end, sort_keys=True, separators=(",", ":")).encode()
    write_lines(private, lines)
    assert read_transcript(private / TRANSCRIPT_FILE).digest != report.transcript_digest
    assert not check_transcript(private, KEY).holds  # the replay gives another p-value


def test_an_existing_transcript_is_replaced_only_with_force(audited):
    _, private = audited
    with pytest.raises(FileExistsError):
        verify(WordSpace(KEY, pull=3.0), KEY, transcript=private)
    recorder = TranscriptRecorder(private, force=True)
    report = verify(WordSpace(KEY, pull=3.0), KEY, transcript=recorder)
    assert read_transcript(private / TRANSCRIPT_FILE).digest == report.transcript_digest


# ---------------------------------------------------------------------- the replay
def test_the_replay_re_derives_the_verdict_and_p_value(audited):
    report, private = audited
    check = check_transcript(private, KEY)
    assert check.holds, str(check)
    assert check.replayed_p_value == report.p_value and check.replayed_status == "copied"
    assert check.digest == report.transcript_digest and check.n_records == len(lines_of(private))


def test_a_rechained_forgery_is_caught_by_the_reports_digest(audited, tmp_path):
    report, private = audited
    save_private_evidence(report, private, plot=False)
    report.save(tmp_path / "public")
    lines = lines_of(private)
    write_lines(private, rechained([lines[0], edited_answer(lines[1]), *lines[2:]]))
    assert read_transcript(private / TRANSCRIPT_FILE)  # the chain itself holds again
    check = check_transcript(private, KEY)
    assert not check.holds and "PRIVATE-word-scores.json names the transcript" in check.reason
    (private / "PRIVATE-word-scores.json").unlink()
    check = check_transcript(private, KEY, public=tmp_path / "public")
    assert not check.holds and "report.json names the transcript" in check.reason


def test_a_rechained_transcript_with_other_answers_or_texts_does_not_replay(audited):
    _, private = audited
    lines = lines_of(private)
    first = json.loads(lines[1])
    first["texts"] = list(reversed(first["texts"]))
    swapped = json.dumps(first, sort_keys=True, separators=(",", ":")).encode()
    write_lines(private, rechained([lines[0], swapped, *lines[2:]]))
    check = check_transcript(private, KEY)
    assert not check.holds and "record 1: its texts are not the ones" in check.reason
    assert json.loads(lines[-2])["kind"] == "commit"  # the batches end before it
    write_lines(private, rechained([*lines[:-3], *lines[-2:]]))  # the last batch dropped
    check = check_transcript(private, KEY)
    assert not check.holds and "answers were removed" in check.reason
    write_lines(private, rechained([*lines[:-2], lines[1], *lines[-2:]]))  # a batch added
    check = check_transcript(private, KEY)
    assert not check.holds and "(records added)" in check.reason


def test_another_key_is_refused(audited):
    _, private = audited
    other = make_key(32, n_band=80, n_triggers=10, seed=5)
    check = check_transcript(private, other)
    assert not check.holds and "not the key this audit used" in check.reason


def test_an_audit_stopped_by_its_deadline_replays_as_inconclusive(tmp_path):
    import threading

    stall = threading.Event()
    inner = WordSpace(KEY, pull=3.0)
    calls = []

    def stalls(texts):
        calls.append(len(texts))
        if len(calls) > 2:
            stall.wait(5)  # past the deadline: abandoned
        return inner(texts)

    report = verify(stalls, KEY, batch_size=16, deadline=0.5, transcript=tmp_path)
    stall.set()
    assert report.status == "inconclusive" and "deadline" in report.reason
    transcript = read_transcript(tmp_path / TRANSCRIPT_FILE)
    assert transcript.batches[-1]["kind"] == "deadline"
    check = check_transcript(tmp_path, KEY)
    assert check.holds and check.replayed_status == "inconclusive", str(check)


def test_an_http_suspect_is_recorded_as_the_client_saw_it(tmp_path):
    space = WordSpace(KEY, pull=3.0)

    def answer(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        rows = np.asarray(space(texts), dtype="<f4")
        data = [
            {"index": i, "embedding": base64.b64encode(row.tobytes()).decode()}
            for i, row in enumerate(rows)
        ]
        body = {"data": data, "model": "their-model-v2"}
        headers = {"server": "acme-gateway/1.4", "set-cookie": "session=secret"}
        return httpx.Response(200, json=body, headers=headers)

    endpoint = OpenAIEndpoint("http://suspect.test/v1", "their-model", encoding_format="base64")
    endpoint._client = httpx.Client(transport=httpx.MockTransport(answer))
    report = verify(endpoint, KEY, transcript=tmp_path)
    transcript = read_transcript(tmp_path / TRANSCRIPT_FILE)
    assert report.suspect == "openai:http://suspect.test/v1#their-model"
    assert transcript.header["endpoint"]["model"] == "their-model"
    seen = transcript.batches[0]["responses"][0]
    assert seen["model"] == "their-model-v2" and seen["headers"]["server"] == "acme-gateway/1.4"
    assert "set-cookie" not in seen["headers"]
    assert transcript.batches[0]["answer"]["dtype"] == "<f4"  # float32 bytes, as sent
    assert endpoint.response_observer is None  # the hook is released after the audit
    assert check_transcript(tmp_path, KEY).holds
    assert dataclasses.replace(report, transcript_digest="").copied
