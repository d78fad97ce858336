"""A stand-in for a GPU embedding server: OpenAI-shaped answers after a fixed model time.

Run as a real process (``python -m tests.fake_upstream --port 0``); it prints
``listening on http://127.0.0.1:PORT/v1`` once ready. Each request of up to
``--batch`` texts holds one of ``--slots`` model slots for ``--delay``
seconds (``--slots 1`` is one busy GPU working one batch at a time), then
answers with deterministic unit vectors: each text's vector depends on the
text alone (SHA-256 seeded), so a test can recompute it with :func:`vectors`.

``--vectors table`` is for throughput benchmarks: each text's vector is a row
of one seeded table picked by the text's hash (:func:`table_vectors`), and a
base64 answer is joined from bytes, so that the fake's own CPU per row stays
far below the GPU time it stands for (a real GPU server makes its vectors on
the GPU, not on the CPU that answers).

Written independently of the library's server so that a proxy test does not
compare the library with itself.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import socket
import sys
from functools import lru_cache

import numpy as np

try:  # SIMD base64 where installed (the [http] extra); the same bytes as the stdlib's
    from pybase64 import b64encode
except ImportError:
    from base64 import b64encode

MODEL = "fake-gpu-embed"
TABLE_ROWS = 4096


def vectors(texts: list[str], dim: int) -> np.ndarray:
    """The float32 unit vectors the fake upstream answers for ``texts``."""
    out = np.empty((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        row = np.random.default_rng(seed).normal(size=dim)
        out[i] = row / np.linalg.norm(row)
    return out


@lru_cache(maxsize=4)
def _table(dim: int) -> np.ndarray:
    rows = np.random.default_rng(dim).normal(size=(TABLE_ROWS, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def table_vectors(texts: list[str], dim: int) -> np.ndarray:
    """The float32 unit vectors of ``--vectors table``: row ``hash(text) % 4096`` of a table."""
    picks = [
        int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little") % TABLE_ROWS
        for t in texts
    ]
    return _table(dim)[picks]


def base64_answer(rows: np.ndarray) -> bytes:
    """An OpenAI base64 answer for float32 ``rows``, joined from bytes once (no json.dumps)."""
    raw = np.ascontiguousarray(rows, dtype="<f4").data.cast("B")
    width = rows.shape[1] * 4
    pieces = [b'{"object":"list","data":[']
    for i in range(len(rows)):
        pieces += (
            b'{"object":"embedding","index":%d,"embedding":"' % i,
            b64encode(raw[i * width : (i + 1) * width]),
            b'"},',
        )
    pieces[-1] = b'"}],"model":"%b","usage":{"prompt_tokens":0,"total_tokens":0}}' % MODEL.encode()
    return b"".join(pieces)


def make_app(
    dim: int,
    delay: float,
    batch: int,
    slots: int,
    fail_every: int = 0,
    table: bool = False,
    float_only: bool = False,
):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    # Each slot's GPU time is booked when a request arrives (the earliest free slot,
    # first come first served), so that the CPU work of answering one request never
    # delays the next one's GPU time, as on a real GPU server.
    free_at = [0.0] * slots
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
        if float_only and body.get("encoding_format", "float") != "float":
            message = "encoding_format must be 'float' on this server"
            return JSONResponse({"error": {"message": message}}, status_code=400)
        n_batches = -(-len(texts) // batch)
        now = asyncio.get_running_loop().time()
        slot = min(range(slots), key=free_at.__getitem__)
        free_at[slot] = max(now, free_at[slot]) + delay * n_batches
        await asyncio.sleep(free_at[slot] - now)
        rows = (table_vectors if table else vectors)(texts, dim)
        if body.get("encoding_format") == "base64":
            return Response(base64_answer(rows), media_type="application/json")
        answer = {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": e}
                for i, e in enumerate(rows.tolist())
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
    parser.add_argument(
        "--vectors", choices=["seeded", "table"], default="seeded", help="see the module's doc"
    )
    parser.add_argument("--float-only", action="store_true", help="refuse base64 (HTTP 400)")
    args = parser.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    table = args.vectors == "table"
    app = make_app(
        args.dim, args.delay, args.batch, args.slots, args.fail_every, table, args.float_only
    )
    config = uvicorn.Config(app, log_level="warning", access_log=False, backlog=1024)
    server = uvicorn.Server(config)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True)
    sys.stdout.flush()
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
