"""The audit's clocks against a real HTTP endpoint (issues 36 and 48): a server that
answers one request and then stalls every later one ends the audit inconclusive, at the
deadline when one is set and at the stall guard otherwise, long before the client's own
timeouts and retries would give up."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from espew_integrations import OpenAIEndpoint, verify
from espew_integrations.http.background import running_server
from tests.support import make_key

DIM = 16
N_BAND = 60
BATCH = 8


class OnceThenStall:
    """Answers the first request; every later one waits until ``release`` is set."""

    def __init__(self) -> None:
        self.requests = 0
        self.release = threading.Event()

    def app(self) -> Starlette:
        async def embeddings(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests += 1
            if self.requests > 1:
                while not self.release.is_set():  # stalls, but lets the server stop
                    await asyncio.sleep(0.05)
            rows = np.random.default_rng(self.requests).normal(size=(len(body["input"]), DIM))
            data = [
                {"object": "embedding", "index": i, "embedding": row}
                for i, row in enumerate(rows.tolist())
            ]
            return JSONResponse({"object": "list", "data": data, "model": body["model"]})

        return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])


@pytest.fixture
def stalling_url():
    server = OnceThenStall()
    with running_server(server.app()) as url:
        try:
            yield server, url
        finally:
            server.release.set()  # the abandoned request completes; the server can stop


def test_an_endpoint_that_answers_once_then_stalls_ends_the_audit_inconclusive(stalling_url):
    server, url = stalling_url
    key = make_key(DIM, n_band=N_BAND, n_triggers=10)
    # default per-request timeout and retries: only the deadline can end this audit early
    with OpenAIEndpoint(url, "m", batch_size=BATCH) as suspect:
        report = verify(suspect, key, batch_size=BATCH, seed=0, deadline=2)
    assert report.status == "inconclusive"
    assert report.reason.startswith("the audit's deadline of 2 s passed")
    assert f"{BATCH} of its {N_BAND} texts answered" in report.reason
    assert server.requests == 2  # the stalled request is the last one sent


def test_the_stall_guard_alone_ends_the_audit_of_an_endpoint_that_stops_answering(stalling_url):
    """No total deadline (the default): the stall guard ends the audit, here after 2 s
    without an answer, as it ends a real one DEFAULT_STALL_TIMEOUT seconds after a stall."""
    server, url = stalling_url
    key = make_key(DIM, n_band=N_BAND, n_triggers=10)
    with OpenAIEndpoint(url, "m", batch_size=BATCH) as suspect:
        started = time.monotonic()
        report = verify(suspect, key, batch_size=BATCH, seed=0, stall_timeout=2)
        waited = time.monotonic() - started
    assert report.status == "inconclusive"
    assert report.reason.startswith("the suspect sent no answer for 2 s (the audit's stall guard)")
    assert f"{BATCH} of its {N_BAND} texts answered" in report.reason
    assert server.requests == 2 and 2 <= waited < 30  # ended by the guard, not the client
