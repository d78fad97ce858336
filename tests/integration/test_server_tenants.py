"""espew serve --ring RING --tenants map.json: each API key gets its tenant's watermark.

Real processes and real HTTP: the fake upstream, and ``espew serve`` in front
of it with a key ring. Each client's answers must equal
``watermark(texts, upstream(texts), ring.key_for(its tenant))``; an unknown or
missing API key gets a 401 in OpenAI's error shape; no API key from the map
ever shows in the server's output.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import pytest

from espew_integrations import KeyRing, OpenAIEndpoint, watermark
from espew_integrations.http.tenants import TenantKeys
from tests.fake_upstream import MODEL, vectors
from tests.integration.test_proxy import DIM, ROOT, start, upstream_url, wait_for_url  # noqa: F401
from tests.support import make_key, stop

API_KEYS = {"sk-acme-0123456789": "acme-corp", "sk-globex-9876543210": "globex"}


@pytest.fixture(scope="module")
def ring():
    shared = make_key(DIM, n_band=80, n_triggers=10, seed=31)
    return KeyRing(
        master=np.random.default_rng(31).bytes(32), shared_key=shared, n_tenant_triggers=8
    )


@pytest.fixture(scope="module")
def ring_files(tmp_path_factory, ring):
    tmp = tmp_path_factory.mktemp("tenants")
    ring_path = tmp / "provider.ring"
    ring.save(ring_path)
    map_path = tmp / "tenants.json"
    map_path.write_text(json.dumps(API_KEYS))
    return ring_path, map_path


@pytest.fixture(scope="module")
def tenant_server(tmp_path_factory, ring_files, upstream_url):  # noqa: F811
    log = tmp_path_factory.mktemp("tenant-serve") / "serve.log"
    proc = start(ring_serve_args(ring_files, upstream_url), log)
    try:
        yield wait_for_url(proc, log), log
    finally:
        stop(proc)


def ring_serve_args(ring_files, url: str, *extra: str) -> list[str]:
    """``espew serve`` of the fake upstream with the ring and the tenants map, plus ``extra``."""
    ring_path, map_path = ring_files
    return [
        "-m",
        "espew_integrations.cli",
        "serve",
        "--embedder",
        f"openai:{url}#{MODEL}",
        "--ring",
        str(ring_path),
        "--tenants",
        str(map_path),
        "--port",
        "0",
        "--model-name",
        "acme-embed",
        *extra,
    ]


def texts_with_every_trigger(ring) -> list[str]:
    words = sorted(ring.shared_key.band)
    return [f"a review that mentions {w} once" for w in words] + ["nothing to see here"]


def test_each_api_key_gets_its_tenants_watermark(tenant_server, ring):
    url, _ = tenant_server
    texts = texts_with_every_trigger(ring)
    clean = vectors(texts, DIM)
    answers = {}
    for api_key, tenant in API_KEYS.items():
        with OpenAIEndpoint(url, "acme-embed", api_key, encoding_format="base64") as client:
            answers[tenant] = client(texts).astype(np.float32)
        np.testing.assert_array_equal(
            answers[tenant], watermark(texts, clean, ring.key_for(tenant))
        )
    # The tenant layers differ, so the two customers' answers differ on some texts.
    differs = (answers["acme-corp"] != answers["globex"]).any(axis=1)
    assert 0 < differs.sum() < len(texts)


@pytest.mark.parametrize(
    "header", [None, "Bearer sk-unknown-0000000", "Bearer  x", "sk-acme-0123456789"]
)
def test_unknown_or_missing_api_keys_get_401(tenant_server, header):
    url, _ = tenant_server
    headers = {"Authorization": header} if header is not None else {}
    answer = httpx.post(
        f"{url}/embeddings", json={"model": "acme-embed", "input": ["hi"]}, headers=headers
    )
    assert answer.status_code == 401
    error = answer.json()["error"]
    assert error["code"] == "invalid_api_key"
    assert error["type"] == "invalid_request_error"


def test_no_api_key_shows_in_the_server_output(tenant_server):
    url, log = tenant_server
    httpx.post(
        f"{url}/embeddings",
        json={"model": "acme-embed", "input": ["hi"]},
        headers={"Authorization": "Bearer sk-acme-0123456789"},
    )
    on_api = httpx.get(url.removesuffix("/v1") + "/metrics")
    assert on_api.status_code == 404  # no marked count per tenant for clients (issue 36)
    exposition = on_api.text
    for api_key in API_KEYS:
        assert api_key not in log.read_text()
        assert api_key not in exposition


def test_ring_and_tenants_go_together_and_refuse_key(ring_files, tmp_path):
    ring_path, map_path = ring_files
    base = [sys.executable, "-m", "espew_integrations.cli", "serve", "--port", "0"]
    for extra, message in (
        (["--ring", str(ring_path)], "go together"),
        (["--ring", str(ring_path), "--tenants", str(map_path), "--api-key-env", "X"], "drop"),
    ):
        done = subprocess.run(
            [*base, *extra], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert done.returncode != 0
        assert message in done.stderr


def test_a_bad_map_is_refused_without_quoting_it(tmp_path, ring):
    bad = tmp_path / "map.json"
    bad.write_text('{"sk-secret-abcdefgh": "acme",')
    with pytest.raises(ValueError, match="not valid JSON") as info:
        _load(tmp_path, ring, bad)
    assert "sk-secret" not in str(info.value)
    with pytest.raises(ValueError, match="at least 8"):
        TenantKeys(ring, {"short": "acme"})
    keys = TenantKeys(ring, API_KEYS)
    assert "sk-" not in repr(keys)
    assert keys.key_for_api_key("sk-globex-9876543210").key_id == ring.key_for("globex").key_id
    assert keys.key_for_api_key("sk-nobody-000000000") is None


def _load(tmp_path, ring, map_path):
    ring_path = tmp_path / "r.ring"
    ring.save(ring_path)
    return TenantKeys.load(ring_path, map_path)


def test_traffic_sample_keeps_each_tenants_answered_texts_across_workers(
    ring_files,
    upstream_url,  # noqa: F811
    tmp_path,
):
    """Two forked workers sample what they answer; on SIGTERM both merge into one file."""
    sample_path = tmp_path / "traffic.jsonl"
    args = ring_serve_args(
        ring_files,
        upstream_url,
        *("--workers", "2", "--traffic-sample", str(sample_path)),
        *("--traffic-sample-size", "25"),
    )
    proc = start(args, tmp_path / "serve.log")
    sent: dict[str, list[str]] = {tenant: [] for tenant in API_KEYS.values()}
    try:
        url = wait_for_url(proc, tmp_path / "serve.log")
        for batch in range(12):
            for api_key, tenant in API_KEYS.items():
                batch_texts = [f"{tenant} request {batch} text {i}" for i in range(5)]
                # A new connection per request, so both workers answer some.
                with OpenAIEndpoint(url, "acme-embed", api_key) as client:
                    client(batch_texts)
                sent[tenant] += batch_texts
        refused = httpx.post(
            f"{url}/embeddings",
            json={"model": "acme-embed", "input": ["never answered"]},
            headers={"Authorization": "Bearer sk-unknown-0000000"},
        )
        assert refused.status_code == 401
    finally:
        stop(proc)
    rows = [json.loads(line) for line in sample_path.read_text().splitlines()]
    assert {r["account"] for r in rows} == set(API_KEYS.values())
    for tenant, texts in sent.items():
        kept = [r["text"] for r in rows if r["account"] == tenant]
        assert len(kept) == 25 and set(kept) <= set(texts)
    assert "never answered" not in sample_path.read_text()
    for api_key in API_KEYS:
        assert api_key not in sample_path.read_text()
    assert oct(sample_path.stat().st_mode & 0o777) == "0o600"
    # issue 54: each worker's flush committed each tenant's pool, chained, as it collected
    from espew_integrations.core.keys.keygen import corpus_digest
    from espew_integrations.core.records.traffic_commitments import (
        commitments_path,
        latest_pool,
        read_commitments,
    )

    log = commitments_path(sample_path)
    commitments = read_commitments(log)  # the chain holds across both workers' writes
    for tenant in sent:
        kept = [r["text"] for r in rows if r["account"] == tenant]
        assert latest_pool(commitments, tenant)["pool_sha256"] == corpus_digest(kept)
    assert "request" not in log.read_text() and oct(log.stat().st_mode & 0o777) == "0o600"


def test_without_a_ring_each_api_key_is_an_account_of_its_own(ring, upstream_url, tmp_path):  # noqa: F811
    """A real espew serve with one key and no ring: each client's credential is an account
    (a keyed hash, never the key), requests without one share "anonymous", and a client's
    huge inputs are stored cut to the text cap."""
    from espew_integrations.core.records.traffic_sample import traffic_account_id

    key_path, sample_path = tmp_path / "provider.key", tmp_path / "traffic.jsonl"
    ring.shared_key.save(key_path)
    args = ["-m", "espew_integrations.cli", "serve", "--embedder", f"openai:{upstream_url}#{MODEL}"]
    args += ["--key", str(key_path), "--port", "0", "--model-name", "acme-embed"]
    args += ["--traffic-sample", str(sample_path), "--traffic-sample-text-bytes", "1000"]
    proc = start(args, tmp_path / "serve.log")
    clients = {"sk-acme-0123456789": "acme", "sk-globex-9876543210": "globex", None: "anon"}
    try:
        url = wait_for_url(proc, tmp_path / "serve.log")
        for credential, who in clients.items():
            headers = {} if credential is None else {"Authorization": f"Bearer {credential}"}
            for batch in range(3):
                texts = [f"{who} request {batch} text {i}" for i in range(4)]
                if who == "globex":
                    texts.append(f"{batch} " + "g" * 99_990)  # the server's per-text limit
                answer = httpx.post(
                    f"{url}/embeddings",
                    json={"model": "acme-embed", "input": texts},
                    headers=headers,
                    timeout=60,
                )
                assert answer.status_code == 200
    finally:
        stop(proc)
    rows = [json.loads(line) for line in sample_path.read_text().splitlines()]
    by_account: dict[str, set[str]] = {}
    for row in rows:
        by_account.setdefault(row["account"], set()).add(row["text"])
    ids = {traffic_account_id(sample_path, c) if c else "anonymous": w for c, w in clients.items()}
    assert set(by_account) == set(ids)
    for account, who in ids.items():
        plain = {t for t in by_account[account] if len(t) < 100}
        assert plain == {f"{who} request {b} text {i}" for b in range(3) for i in range(4)}
    huge = by_account[next(a for a, w in ids.items() if w == "globex")] - {
        f"globex request {b} text {i}" for b in range(3) for i in range(4)
    }
    assert len(huge) == 3 and all(len(t.encode()) == 1000 for t in huge)
    for credential in clients:
        if credential:
            assert credential not in sample_path.read_text()


def test_a_field_ring_marks_every_answer_per_account(tmp_path, upstream_url):  # noqa: F811
    """``espew serve --ring`` with a field ring (issue 44): each account's answers are its
    own tenant key's field marks, on every text, and differ between accounts."""
    corpus = [f"client text {i} about topic {i % 37} and more" for i in range(1200)]
    field_ring = KeyRing.generate(
        corpus, lambda t: vectors(list(t), DIM), target_text="acme field ring", seed=44,
        marking="field", audit_budget=300,
    )  # fmt: skip
    ring_path = field_ring.save(tmp_path / "field.ring")
    map_path = tmp_path / "tenants.json"
    map_path.write_text(json.dumps(API_KEYS))
    log = tmp_path / "serve.log"
    proc = start(ring_serve_args((ring_path, map_path), upstream_url), log)
    try:
        url = wait_for_url(proc, log)
        texts = ["a review with no trigger word at all", "another one", "a third text"]
        clean = vectors(texts, DIM)
        answers = {}
        for api_key, tenant in API_KEYS.items():
            with OpenAIEndpoint(url, "acme-embed", api_key, encoding_format="base64") as client:
                answers[tenant] = client(texts).astype(np.float32)
            expected = watermark(texts, clean, field_ring.key_for(tenant))
            np.testing.assert_array_equal(answers[tenant], expected)
            assert (answers[tenant] != clean).any(axis=1).all()  # every answer is marked
        assert (answers["acme-corp"] != answers["globex"]).any(axis=1).all()
    finally:
        stop(proc)
