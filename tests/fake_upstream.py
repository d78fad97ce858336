"""A stand-in for a GPU embedding server: OpenAI-shaped answers after a fixed model time.

Run as a real process (``python -m tests.fake_upstream --port 0``); it prints
``listening on http://127.0.0.1:PORT/v1`` once ready. Each request of up to
``--batch`` texts holds one of ``--slots`` model slots for ``--delay``
seconds (``--slots 1`` is one busy GPU working one batch at a time), then
answers with deterministic unit vectors: each text's vector depends on the
text alone (SHA-256 seeded), so a test can recompute it with :func:`vectors`.

Written independently of the library's server so that a proxy test does not
compare the library with itself.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import socket
import sys

import numpy as np

MODEL = "fake-gpu-embed"


def vectors(texts: list[str], dim: int) -> np.ndarray:
    """The float32 unit vectors the fake upstream answers for ``texts``."""
    out = np.empty((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        row = np.random.default_rng(seed).normal(size=dim)
        out[i] = row / np.linalg.norm(row)
    return out


def make_app(dim: int, delay: float, batch: int, slots: int, fail_every: int = 0):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    gpu = asyncio.Semaphore(slots)
    served = {"n": 0}

    async def embeddings(request: Request) -> Response:
        body = json.loads(await request.body())
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        served["n"] += 1
        if fail_every and served["n"] % fail_every == 0:
            return JSONResponse({"error": {"message": "GPU out of memory"}}, status_code=500)
        if body.get("model") != MODEL:
            message = f"model {body.get('model')!r} not found"
            return JSONResponse({"error": {"message": message}}, status_code=404)
        n_batches = -(-len(texts) // batch)
        async with gpu:
            await asyncio.sleep(delay * n_batches)
        rows = vectors(texts, dim)
        if body.get("encoding_format") == "base64":
            data = [base64.b64encode(r.astype("<f4").tobytes()).decode() for r in rows]
        else:
            data = rows.tolist()
        answer = {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(data)
            ],
            "model": MODEL,
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }
        return Response(json.dumps(answer), media_type="application/json")

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--delay", type=float, default=0.1, help="seconds per batch")
    parser.add_argument("--batch", type=int, default=32, help="texts per model batch")
    parser.add_argument("--slots", type=int, default=1, help="batches the GPU runs at once")
    parser.add_argument("--fail-every", type=int, default=0, help="answer 500 every Nth request")
    args = parser.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    app = make_app(args.dim, args.delay, args.batch, args.slots, args.fail_every)
    config = uvicorn.Config(app, log_level="warning", access_log=False, backlog=1024)
    server = uvicorn.Server(config)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True)
    sys.stdout.flush()
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
