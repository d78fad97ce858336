"""Issue 54: every malformed RFC 3161 token is a ``TimestampError``, never a parser's crash.

A real token from a local authority (``openssl ts -reply``, tests/local_tsa.py) over a
known commitment; then the token an attacker crafts (an empty AlgorithmIdentifier in
the message imprint, which crashed the hand-written DER parser with IndexError) and a
seeded fuzzed set (byte flips, truncations, insertions, deletions, most of them inside
the TSTInfo, where the parser reads). Each is either a token that still parses or a
``TimestampError``; ``verify_timestamp`` (what ``check_evidence`` calls) reports
every one as a failure with the authority's CA, and raises for none.
"""

from __future__ import annotations

import base64
import hashlib
import random
from pathlib import Path

import pytest

from espew_integrations.timestamp import (
    TimestampError,
    _token_of_reply,
    parse_token,
    timestamp_request,
    verify_timestamp,
)
from tests.local_tsa import _openssl, make_authority

DIGEST = hashlib.sha256(b"an audit's transcript").digest()
COMMITMENT = "sha256:" + DIGEST.hex()
NONCE = 5454
N_FUZZED = 300


@pytest.fixture(scope="module")
def authority(tmp_path_factory) -> tuple[bytes, bytes, Path]:
    """(the TSA's reply, its token, the CA certificate) for a request over ``DIGEST``."""
    folder = tmp_path_factory.mktemp("tsa")
    ca = make_authority(folder)
    (folder / "query.tsq").write_bytes(timestamp_request(DIGEST, NONCE))
    reply = _openssl("ts", "-reply", "-config", "tsa.cnf", "-queryfile", "query.tsq", cwd=folder)
    return reply, _token_of_reply(reply), ca


def _der(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


def _elements(data: bytes) -> list[tuple[int, bytes]]:
    """The DER elements of ``data`` (well formed: the test's own token), (tag, content)."""
    at, found = 0, []
    while at < len(data):
        tag, first = data[at], data[at + 1]
        at += 2
        size = first
        if first >= 0x80:
            size = int.from_bytes(data[at : at + (first & 0x7F)], "big")
            at += first & 0x7F
        found.append((tag, data[at : at + size]))
        at += size
    return found


def _swapped(data: bytes, old: bytes, new: bytes) -> bytes:
    """``data`` with the DER element ``old`` replaced by ``new``, every length above it
    re-encoded (the token's TSTInfo sits inside an OCTET STRING: descended too)."""
    out = b""
    for tag, content in _elements(data):
        whole = _der(tag, content)
        if whole == old:
            out += new
        elif old in content:
            out += _der(tag, _swapped(content, old, new))
        else:
            out += whole
    return out


def crafted_token(token: bytes) -> bytes:
    """The issue's token: its message imprint's AlgorithmIdentifier an empty SEQUENCE."""
    imprint = _der(0x30, bytes.fromhex("300d06096086480165030402010500") + _der(0x04, DIGEST))
    assert imprint in token
    return _swapped(token, imprint, _der(0x30, _der(0x30, b"") + _der(0x04, DIGEST)))


def fuzzed(token: bytes, count: int, seed: int) -> list[bytes]:
    """``count`` seeded mutations of ``token``, each different from it; seven in ten
    inside its TSTInfo (the 32-byte digest is where it starts to be found)."""
    rng = random.Random(seed)
    start = token.index(DIGEST) - 40
    out: list[bytes] = []
    while len(out) < count:
        data = bytearray(token)
        low, high = (start, start + 160) if rng.random() < 0.7 else (0, len(data))
        at = rng.randrange(low, high)
        kind = rng.randrange(4)
        if kind == 0:  # flip one to three bits
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(low, high)] ^= 1 << rng.randrange(8)
        elif kind == 1:  # truncate
            del data[at:]
        elif kind == 2:  # delete a few bytes
            del data[at : at + rng.randint(1, 4)]
        else:  # insert a few bytes
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        if bytes(data) != token:
            out.append(bytes(data))
    return out


def anchor_of(token: bytes) -> dict[str, str]:
    return {"token": base64.b64encode(token).decode("ascii"), "url": "http://127.0.0.1/tsr"}


def test_the_genuine_token_parses_and_verifies(authority):
    _, token, ca = authority
    said = parse_token(token)
    assert said["digest"] == DIGEST.hex() and said["nonce"] == NONCE
    assert said["gen_time"].endswith("+00:00") and int(said["serial"], 16) >= 1
    found = verify_timestamp(anchor_of(token), COMMITMENT, ca)
    assert not found.failure and "signature verified against ca.crt" in found.proved[0]


def test_the_request_is_the_der_the_rfc_declares():
    request = timestamp_request(DIGEST, NONCE)
    sha256 = "300d06096086480165030402010500"  # AlgorithmIdentifier sha256, NULL parameters
    assert request.hex() == "303d020101" + "3031" + sha256 + "0420" + DIGEST.hex() + (
        "0202154e" + "0101ff"  # nonce 5454, certReq TRUE
    )


def test_an_empty_algorithm_identifier_is_a_timestamp_error(authority):
    _, token, ca = authority
    crafted = crafted_token(token)
    with pytest.raises(TimestampError, match="not an RFC 3161 TimeStampToken"):
        parse_token(crafted)
    found = verify_timestamp(anchor_of(crafted), COMMITMENT, ca)  # reports, never raises
    assert found.failure.startswith("the recorded timestamp is not a token")


def test_every_fuzzed_token_parses_or_is_a_timestamp_error(authority):
    _, token, _ = authority
    errors = 0
    for mutated in fuzzed(token, N_FUZZED, seed=54):
        try:
            parse_token(mutated)
        except TimestampError:
            errors += 1
    assert errors >= N_FUZZED // 2  # most mutations break the structure the parser reads


def test_no_fuzzed_token_verifies_and_none_raises(authority):
    _, token, ca = authority
    for mutated in fuzzed(token, N_FUZZED // 3, seed=55):
        found = verify_timestamp(anchor_of(mutated), COMMITMENT, ca)
        assert found.failure and not found.proved, mutated.hex()


def test_every_fuzzed_reply_gives_a_token_or_a_timestamp_error(authority):
    reply, token, _ = authority
    assert _token_of_reply(reply) == token
    errors = 0
    for mutated in fuzzed(reply, N_FUZZED, seed=56):
        try:
            assert isinstance(_token_of_reply(mutated), bytes)
        except TimestampError:
            errors += 1
    assert errors >= N_FUZZED // 2


def test_a_refusal_names_its_status():
    refused = bytes.fromhex("3005" + "3003" + "020102")  # PKIStatus rejection, no token
    with pytest.raises(TimestampError, match=r"refused the request \(PKIStatus rejection\)"):
        _token_of_reply(refused)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x30", b"\x30\x80" * 5000, b"\x30\x84\xff\xff\xff\xff", b"\x04\x00"],
    ids=["empty", "a lone tag", "nested indefinite lengths", "a 4 GB length", "not a sequence"],
)
def test_hostile_structures_are_timestamp_errors(data):
    with pytest.raises(TimestampError):
        parse_token(data)
    with pytest.raises(TimestampError):
        _token_of_reply(data)
