"""/metrics of ``espew serve`` (real HTTP, real upstream process) and the drift warning."""

from __future__ import annotations

import logging
import os

import httpx
import numpy as np
import pytest

from espew_integrations.http.metrics import WatermarkMetrics, default_metrics
from espew_integrations.http.server import create_app, running_server
from espew_integrations.http.upstream import AsyncUpstream
from tests.fake_upstream import MODEL
from tests.integration.test_middleware import assert_no_secret
from tests.integration.test_proxy import DIM, texts_for, upstream_url  # noqa: F401  (fixture)
from tests.support import make_key, metric_values


@pytest.fixture()
def key_with_rate():
    key = make_key(DIM, seed=11)
    return key.replace(info={"marked_rate": 0.3})


def test_server_metrics_count_what_was_served(upstream_url, key_with_rate):  # noqa: F811
    key = key_with_rate
    app = create_app(AsyncUpstream(upstream_url, MODEL), key=key, model_name="acme")
    texts = texts_for(key, 15)
    with running_server(app) as url:
        for encoding in ("float", "base64"):
            body = {"model": "acme", "input": texts, "encoding_format": encoding}
            assert httpx.post(f"{url}/embeddings", json=body, timeout=30).status_code == 200
        refused = httpx.post(f"{url}/embeddings", json={"model": "acme", "input": [""]})
        assert refused.status_code == 400  # a client mistake is not counted as served
        exposition = httpx.get(url.removesuffix("/v1") + "/metrics").text
    values = metric_values(exposition)
    assert values["espew_requests_total"] == 2
    assert values["espew_texts_total"] == 30
    assert values["espew_marked_texts_total"] == 2 * key.contains_trigger(texts).sum()
    assert values["espew_expected_marked_rate"] == pytest.approx(0.3)
    assert values["espew_request_seconds_count"] == 2
    assert values["espew_upstream_errors_total"] == 0
    assert_no_secret(exposition, key)


def test_upstream_errors_are_counted(key_with_rate):
    # Nothing listens on this port: every call fails to connect.
    upstream = AsyncUpstream("http://127.0.0.1:9/v1", MODEL, max_retries=0, timeout=2)
    app = create_app(upstream, key=key_with_rate, model_name="acme")
    with running_server(app) as url:
        answer = httpx.post(f"{url}/embeddings", json={"model": "acme", "input": ["a b"]})
        assert answer.status_code == 502
        assert answer.json()["error"]["type"] == "server_error"
        values = metric_values(httpx.get(url.removesuffix("/v1") + "/metrics").text)
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
