"""Watermark metrics for the operator only (issue 36): real HTTP, real processes.

The marked count is a trigger oracle: read before and after a request that
holds one band word, it says whether that word is a trigger. So the API port
serves no count at all (``GET /metrics`` is a 404), and the operator's own
listener (``espew serve --metrics-port``, ``create_metrics_app``) counts
exactly. The counter attack of the issue is run against both: it finds nothing
on the API port and every trigger on the operator's (which is why that one
must stay private).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import httpx
import numpy as np
import pytest

from espew_integrations.http.app import create_app
from espew_integrations.http.background import running_server
from espew_integrations.http.metrics import WatermarkMetrics, create_metrics_app, default_metrics
from espew_integrations.http.serving import serve
from espew_integrations.http.upstream import AsyncUpstream
from tests.fake_upstream import MODEL
from tests.integration.test_middleware import assert_no_secret
from tests.integration.test_proxy import (  # noqa: F401  (upstream_url is a fixture)
    DIM,
    ROOT,
    serve_proxy,
    texts_for,
    upstream_url,
)
from tests.support import make_key, metric_values, stop


@pytest.fixture()
def key_with_rate():
    key = make_key(DIM, seed=11)
    return key.replace(info={"marked_rate": 0.3})


def origin(url: str) -> str:
    return url.removesuffix("/v1")


def test_the_api_serves_no_count_and_the_operator_app_counts_exactly(upstream_url, key_with_rate):  # noqa: F811
    key = key_with_rate
    app = create_app(AsyncUpstream(upstream_url, MODEL), key=key, model_name="acme")
    texts = texts_for(key, 15)
    marked = int(key.contains_trigger(texts).sum())
    assert 0 < marked < len(texts)
    with running_server(app) as url, running_server(app.state.metrics.asgi_app()) as operator:
        for encoding in ("float", "base64"):
            body = {"model": "acme", "input": texts, "encoding_format": encoding}
            assert httpx.post(f"{url}/embeddings", json=body, timeout=30).status_code == 200
        refused = httpx.post(f"{url}/embeddings", json={"model": "acme", "input": [""]})
        assert refused.status_code == 400  # a client mistake is not counted as served
        on_api = httpx.get(origin(url) + "/metrics")
        exposition = httpx.get(origin(operator) + "/metrics")
        elsewhere = [httpx.get(origin(operator) + path).status_code for path in ("/", "/v1")]
        posted = httpx.post(origin(operator) + "/metrics").status_code
        head = httpx.head(origin(operator) + "/metrics")
    assert on_api.status_code == 404
    assert "espew_" not in on_api.text
    assert exposition.status_code == 200
    assert exposition.headers["content-type"].startswith("text/plain")
    assert elsewhere == [404, 404] and posted == 405
    assert head.status_code == 200 and head.content == b""
    values = metric_values(exposition.text)
    assert values["espew_requests_total"] == 2
    assert values["espew_texts_total"] == 30
    assert values["espew_marked_texts_total"] == 2 * marked
    assert values["espew_expected_marked_rate"] == pytest.approx(0.3)
    assert values["espew_request_seconds_count"] == 2
    assert values["espew_upstream_errors_total"] == 0
    assert_no_secret(exposition.text, key)


def test_espew_serve_counts_on_the_operator_port_only(tmp_path, upstream_url):  # noqa: F811
    key = make_key(DIM, seed=12)
    proc, url, log, metrics_url = serve_proxy(tmp_path, key, upstream_url)
    try:
        assert metrics_url.startswith("http://127.0.0.1:")  # loopback unless told otherwise
        assert origin(metrics_url) != origin(url)
        batches = [texts_for(key, n) for n in (7, 12, 3)]
        for texts in batches:
            body = {"model": "acme-embed", "input": texts, "encoding_format": "base64"}
            assert httpx.post(f"{url}/embeddings", json=body, timeout=30).status_code == 200
        on_api = httpx.get(origin(url) + "/metrics")
        exposition = httpx.get(metrics_url).text
    finally:
        stop(proc)
    assert on_api.status_code == 404
    assert on_api.json()["error"]["type"] == "invalid_request_error"
    values = metric_values(exposition)
    served = [text for texts in batches for text in texts]
    assert values["espew_texts_total"] == len(served)
    assert values["espew_marked_texts_total"] == key.contains_trigger(served).sum()
    assert 0 < values["espew_marked_texts_total"] < len(served)
    for text in (exposition, on_api.text, log.read_text()):
        assert_no_secret(text, key)


def counter_attack(client: httpx.Client, url: str, scrape: str, band: list[str]) -> tuple:
    """The issue's attack: each band word alone, the counter read before and after.

    Returns (the words whose request raised the counter, the statuses and bodies
    of every scrape).
    """
    flagged, answers = [], set()
    for word in band:
        before = client.get(scrape)
        embedded = client.post(f"{url}/embeddings", json={"model": "acme-embed", "input": [word]})
        assert embedded.status_code == 200
        after = client.get(scrape)
        answers.add((before.status_code, after.status_code))
        if before.status_code == after.status_code == 200:
            count = "espew_marked_texts_total"
            if metric_values(after.text)[count] > metric_values(before.text)[count]:
                flagged.append(word)
    return flagged, answers


def test_the_counter_attack_finds_nothing_on_the_api_port(tmp_path, upstream_url):  # noqa: F811
    key = make_key(DIM, seed=13)
    band = sorted(key.band)
    proc, url, log, metrics_url = serve_proxy(tmp_path, key, upstream_url)
    try:
        with httpx.Client(timeout=30) as client:
            flagged_api, answers_api = counter_attack(client, url, origin(url) + "/metrics", band)
            # The same attack on the operator's listener: the oracle is real, so
            # that port must stay where clients cannot reach it.
            flagged_operator, answers_operator = counter_attack(client, url, metrics_url, band)
    finally:
        stop(proc)
    assert answers_api == {(404, 404)}
    assert flagged_api == []
    assert answers_operator == {(200, 200)}
    assert sorted(flagged_operator) == sorted(key.triggers)
    assert len(key.triggers) == 10 and len(band) == 60
    assert_no_secret(log.read_text(), key)


def test_the_metrics_port_must_differ_from_the_api_port(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "espew_integrations.cli",
            "serve",
            "--port",
            "8123",
            "--metrics-port",
            "8123",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3
    assert "--metrics-port must differ from --port" in done.stderr
    app = create_metrics_app(WatermarkMetrics())
    with pytest.raises(ValueError, match="metrics port must differ"):
        serve(object(), port=8123, metrics_app=app, metrics_port=8123)
    with pytest.raises(TypeError, match="WatermarkMetrics"):
        create_metrics_app(object())


def test_upstream_errors_are_counted(key_with_rate):
    # Nothing listens on this port: every call fails to connect.
    upstream = AsyncUpstream("http://127.0.0.1:9/v1", MODEL, max_retries=0, timeout=2)
    app = create_app(upstream, key=key_with_rate, model_name="acme")
    with running_server(app) as url:
        answer = httpx.post(f"{url}/embeddings", json={"model": "acme", "input": ["a b"]})
        assert answer.status_code == 502
        assert answer.json()["error"]["type"] == "server_error"
    values = metric_values(app.state.metrics.render()[0].decode())
    assert values["espew_upstream_errors_total"] == 1
    assert values["espew_requests_total"] == 0


@pytest.mark.parametrize(
    ("marked", "warned"), [(10, False), (19, False), (21, True), (6, False), (4, True)]
)
def test_drift_warning_past_twice_or_half_the_expected_rate(caplog, marked, warned):
    metrics = WatermarkMetrics(0.1, window=100)
    with caplog.at_level(logging.WARNING, logger="espew_integrations.http.metrics"):
        metrics.observe(60, marked, 0.01)  # the window is not full yet: no verdict
        assert not caplog.records
        metrics.observe(40, 0, 0.01)
    assert bool(caplog.records) is warned
    if warned:
        assert "marked rate" in caplog.records[0].getMessage()


def test_no_expected_rate_means_no_warning_and_no_gauge(caplog):
    metrics = default_metrics(make_key(DIM))
    with caplog.at_level(logging.WARNING):
        metrics.observe(10_000, 10_000, 0.01)
    assert not caplog.records
    assert b"espew_expected_marked_rate" not in metrics.render()[0]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="expected_marked_rate"):
        WatermarkMetrics(1.5)
    with pytest.raises(ValueError, match="drift_factor"):
        WatermarkMetrics(0.1, drift_factor=1.0)
    assert np.isfinite(WatermarkMetrics(0.2).expected)


def test_forked_workers_add_up_in_every_scrape():
    """Each forked worker counts in its own shared row; any process renders the sum."""
    metrics = WatermarkMetrics(0.3)
    metrics.observe(4, 1, 0.02)  # the parent's own traffic, before the fork
    children = []
    for n_texts in (10, 20, 30):
        pid = os.fork()
        if pid == 0:  # a worker: serve some traffic, then leave without cleanup
            code = 1
            try:
                for _ in range(5):
                    metrics.observe(n_texts, n_texts // 10, 0.2)
                metrics.upstream_error()
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    for pid in children:
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    values = metric_values(metrics.render()[0].decode())
    assert values["espew_requests_total"] == 1 + 15
    assert values["espew_texts_total"] == 4 + 5 * (10 + 20 + 30)
    assert values["espew_marked_texts_total"] == 1 + 5 * (1 + 2 + 3)
    assert values["espew_upstream_errors_total"] == 3
    assert values['espew_request_seconds_bucket{le="0.025"}'] == 1
    assert values['espew_request_seconds_bucket{le="0.25"}'] == 16
    assert values["espew_request_seconds_sum"] == pytest.approx(0.02 + 15 * 0.2)


def test_a_metrics_host_off_this_machine_needs_metrics_public(capsys):
    """The listener serves the exact marked count (a trigger oracle): an address other
    machines reach is refused before anything loads, unless --metrics-public says so."""
    import argparse

    from espew_integrations.cli import main
    from espew_integrations.cli.common import EXIT_USAGE
    from espew_integrations.cli.serve import _check_metrics_host

    argv = ["serve", "--embedder", "minilm", "--metrics-port", "0", "--metrics-host", "0.0.0.0"]
    assert main(argv) == EXIT_USAGE
    error = capsys.readouterr().err
    assert "--metrics-public" in error and "recover the triggers" in error
    for host in ("127.0.0.1", "::1", "localhost"):
        _check_metrics_host(argparse.Namespace(metrics_port=0, metrics_host=host))
    public = argparse.Namespace(metrics_port=9464, metrics_host="10.0.0.5", metrics_public=True)
    _check_metrics_host(public)
    assert "warning: metrics on 10.0.0.5 (--metrics-public)" in capsys.readouterr().err
