"""A provider's own FastAPI embeddings app, wrapped by ESpeWMiddleware in one line.

Run as a real process: ``python -m tests.middleware_app --key KEY --port 0``
prints ``listening on http://127.0.0.1:PORT/v1``; ``--metrics-port 0`` also serves
the middleware's operator metrics app on a second port and prints its
``http://127.0.0.1:PORT/metrics`` on the next line. ``--bare`` serves the same
app without the middleware (the benchmark's baseline). The "model" answers
:func:`tests.fake_upstream.vectors` after ``--delay`` seconds (a GPU's time),
or runs MiniLM with ``--minilm``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import socket
import time

import numpy as np
from fastapi import FastAPI
from pydantic import BaseModel

from espew_integrations import WatermarkKey
from espew_integrations.http.middleware import ESpeWMiddleware
from tests.fake_upstream import vectors

DIM = 64


class EmbeddingRequest(BaseModel):
    model: str
    input: str | list[str] | list[int]
    encoding_format: str = "float"


def build(model=None, dim: int = DIM, delay: float = 0.0) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/embeddings")
    def embeddings(request: EmbeddingRequest) -> dict:
        texts = [request.input] if isinstance(request.input, str) else request.input
        if texts and isinstance(texts[0], int):  # token ids: this app embeds their count
            texts = [f"{len(texts)} tokens"]
        if delay:
            time.sleep(delay)  # the model's time on a GPU, off this process's CPU
        rows = model(texts) if model is not None else vectors(texts, dim)
        rows = np.asarray(rows, dtype=np.float32)
        if request.encoding_format == "base64":
            data = [base64.b64encode(r.astype("<f4").tobytes()).decode() for r in rows]
        else:
            data = rows.tolist()
        return {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(data)
            ],
            "model": request.model,
            "usage": {"prompt_tokens": 7, "total_tokens": 7},
            "provider_extra": "kept",
        }

    @app.post("/v1/echo")
    def echo(payload: dict) -> dict:
        return {"echo": payload}

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": "acme", "object": "model"}]}

    @app.post("/v1/broken/embeddings")
    def broken() -> dict:
        return {"data": "not embeddings"}

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--key", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bare", action="store_true")
    parser.add_argument("--minilm", action="store_true")
    parser.add_argument("--delay", type=float, default=0.0, help="model seconds per request")
    parser.add_argument("--metrics-port", type=int, default=None, help="operator metrics port")
    args = parser.parse_args()
    model = None
    if args.minilm:
        from espew_integrations.offline.embedders import minilm

        model = minilm()
    key = WatermarkKey.load(args.key)
    app = build(model, key.dim, args.delay)
    if not args.bare:
        paths = ("/v1/embeddings", "/v1/broken/embeddings")
        app = ESpeWMiddleware(app, key=key, paths=paths, view=getattr(model, "view", None))
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    with contextlib.ExitStack() as stack:
        if args.metrics_port is not None and not args.bare:
            from espew_integrations.http.background import running_server

            url = stack.enter_context(running_server(app.metrics_app(), port=args.metrics_port))
            print(f"metrics on {url.removesuffix('/v1')}/metrics", flush=True)
        uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
