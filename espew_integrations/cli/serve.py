"""``espew serve``: serve an embedder as an OpenAI-compatible API."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..arguments import add_embedder_argument
from ..core.ground.defaults import DEFAULT_BATCH_SIZE, DEFAULT_HOST, DEFAULT_KEY_VARIABLE
from ..models import resolve_embedder
from .common import (
    UsageError,
    add_endpoint_flags,
    endpoint_options,
    log_level,
    port,
    positive_int,
    positive_seconds,
    require_extra,
)

__all__ = ["add_serve_command"]

# What the server needs beyond the core: import name -> package (the [http] extra).
_SERVER_MODULES = {"starlette": "starlette", "uvicorn": "uvicorn", "httpx": "httpx"}
# What --metrics-port needs (the [metrics] extra).
_METRICS_MODULES = {"prometheus_client": "prometheus-client"}

_EXAMPLE = """
example:
  espew serve --embedder minilm --key provider.key --port 8000 \\
      --model-name acme-embed-1

  Serves POST /v1/embeddings (and /embeddings), GET /v1/models and
  GET /health on http://127.0.0.1:8000. The key is --key FILE, --key
  env:VAR or, without --key, $ESPEW_KEY (a key file path or the key's
  JSON), as for every espew command; with none of them serve refuses to
  start, and --no-watermark serves the model unmarked. --embedder takes
  minilm, module:attr, file.py:attr or openai:<base_url>#<model> (put
  ESpeW in front of another server).
  Binds to 127.0.0.1 unless --host says otherwise; require an API key with
  --api-key-env VAR when other machines can reach it.

  Prometheus metrics are for the operator only, on their own listener:
  --metrics-port 9464 serves GET /metrics on http://127.0.0.1:9464 (the
  whole server's counts, whatever --workers). The API port never serves
  them: the marked count would tell a client which of its requests
  carried a trigger.
"""


def add_serve_command(subparsers: Any) -> None:
    """Add ``serve`` to the ``espew`` subcommands."""
    serve = subparsers.add_parser(
        "serve",
        help="serve an embedder as an OpenAI-compatible API",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_embedder_argument(serve, model_alias=False)
    _add_key_flags(serve)
    _add_listen_flags(serve)
    serve.add_argument(
        "--api-key-env", metavar="VAR", help="require clients to send the key held in $VAR"
    )
    serve.add_argument(
        "--upstream-api-key-env", metavar="VAR", help="API key for an openai: embedder"
    )
    _add_limit_flags(serve)
    serve.add_argument(
        "--log-level", type=log_level, default="warning", help="critical ... debug, trace"
    )
    serve.add_argument("--access-log", action="store_true")
    serve.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="N processes share the port, each with its own event loop (default 1); "
        "the watermark's CPU work then uses N cores",
    )
    _add_traffic_flags(serve)
    add_endpoint_flags(serve, verify=False)
    # Toward an upstream, base64 unless the operator says float (an upstream that
    # refuses base64): float answers of a large batch cost the proxy seconds each.
    serve.set_defaults(func=run, batch_size=DEFAULT_BATCH_SIZE, encoding_format="base64")


def _proxied(embed: Any, encoding_format: str) -> Any:
    """An ``openai:`` embedder as the proxy's async client of that upstream, asking for
    ``encoding_format`` answers (``--encoding-format``); any other embedder as it is."""
    from ..http.client import OpenAIEndpoint
    from ..http.upstream import AsyncUpstream

    if isinstance(embed, OpenAIEndpoint):
        return AsyncUpstream.from_endpoint(embed, encoding_format=encoding_format)
    return embed


def _add_traffic_flags(serve: argparse.ArgumentParser) -> None:
    from ..core.ground.defaults import (
        DEFAULT_SAMPLE_ACCOUNT_BYTES,
        DEFAULT_SAMPLE_FILE_BYTES,
        DEFAULT_SAMPLE_TEXT_BYTES,
    )
    from ..core.records.traffic_sample import DEFAULT_SAMPLE_CAPACITY, DEFAULT_SAMPLE_RETENTION_DAYS

    serve.add_argument(
        "--traffic-sample",
        default=None,
        metavar="FILE.jsonl",
        help="keep a keyed random sample of the texts answered (per tenant with --ring, "
        "otherwise per client API key) in FILE.jsonl (mode 0600), for audits drawn from "
        "what a suspect sent: "
        "espew key reaudit KEY --corpus FILE.jsonl --text-column text [--account ID]. "
        "It holds your clients' texts: see docs/key-management.md",
    )
    serve.add_argument(
        "--traffic-sample-size",
        type=positive_int,
        default=DEFAULT_SAMPLE_CAPACITY,
        metavar="N",
        help=f"texts kept per account (default {DEFAULT_SAMPLE_CAPACITY:,})",
    )
    serve.add_argument(
        "--traffic-sample-days",
        type=positive_seconds,
        default=DEFAULT_SAMPLE_RETENTION_DAYS,
        metavar="DAYS",
        help=f"drop texts not seen for DAYS days (default {DEFAULT_SAMPLE_RETENTION_DAYS})",
    )
    for flag, default, what in (
        ("text", DEFAULT_SAMPLE_TEXT_BYTES, "of one text, after the model's window"),
        ("account", DEFAULT_SAMPLE_ACCOUNT_BYTES, "for one account's texts"),
        ("file", DEFAULT_SAMPLE_FILE_BYTES, "for the whole sample (file and memory)"),
    ):
        serve.add_argument(
            f"--traffic-sample-{flag}-bytes",
            type=positive_int,
            default=default,
            metavar="BYTES",
            help=f"bytes kept {what} (default {default:,})",
        )


def _traffic_sample(args: argparse.Namespace, window: int | None) -> Any:
    """The --traffic-sample file as a TrafficSample, or None; a bad setting is a usage error.

    ``window``: the model's window in tokens, where known, so that a text is
    stored only as far as the model read it.
    """
    if args.traffic_sample is None:
        return None
    from ..core.records.traffic_sample import TrafficSample
    from ..core.records.traffic_store import TrafficSampleError

    try:
        return TrafficSample(
            args.traffic_sample,
            capacity=args.traffic_sample_size,
            retention_days=args.traffic_sample_days,
            window=window,
            max_text_bytes=args.traffic_sample_text_bytes,
            max_account_bytes=args.traffic_sample_account_bytes,
            max_file_bytes=args.traffic_sample_file_bytes,
        )
    except TrafficSampleError as exc:
        raise UsageError(str(exc)) from None


def _add_key_flags(serve: argparse.ArgumentParser) -> None:
    """Which key marks the answers: one key, none (said outright), or a ring's per tenant."""
    serve.add_argument(
        "--key",
        default=None,
        help="watermark with this key: a key file or env:VAR (default: the key $ESPEW_KEY "
        "holds, a path or the key's JSON)",
    )
    serve.add_argument(
        "--no-watermark",
        action="store_true",
        help="serve the model unmarked (never the default: without a key serve refuses)",
    )
    serve.add_argument(
        "--ring",
        default=None,
        metavar="RING",
        help="per-customer keys: watermark each client with its tenant's key from this key "
        "ring (needs --tenants)",
    )
    serve.add_argument(
        "--tenants",
        default=None,
        metavar="MAP.json",
        help="JSON object {client API key: tenant id} for --ring; an unknown API key gets 401",
    )


def _add_listen_flags(serve: argparse.ArgumentParser) -> None:
    """Where the API and the operator's metrics listen, and the model id clients send."""
    serve.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to bind (default {DEFAULT_HOST}: this machine only)",
    )
    serve.add_argument("--port", type=port, default=8000, help="0 picks a free port")
    serve.add_argument("--model-name", default=None, help="model id clients must send")
    serve.add_argument(
        "--metrics-port",
        type=port,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics for the operator on this port, apart from the API "
        "(0 picks a free one; default: no metrics listener). Never expose it to clients: "
        "its marked count reveals which requests carried a trigger",
    )
    serve.add_argument(
        "--metrics-host",
        default=DEFAULT_HOST,
        metavar="HOST",
        help=f"address of the metrics listener (default {DEFAULT_HOST}: this machine only); any "
        "other address needs --metrics-public",
    )
    serve.add_argument(
        "--metrics-public",
        action="store_true",
        help="allow a --metrics-host other machines can reach. Its exact marked count lets "
        "anyone who reads it tell which requests carried a trigger, and so recover the "
        "triggers: firewall it to your Prometheus alone",
    )


def _add_limit_flags(serve: argparse.ArgumentParser) -> None:
    from ..core.ground.defaults import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_REQUEST_CHARS

    serve.add_argument("--max-inputs", type=positive_int, default=2048)
    serve.add_argument(
        "--max-request-chars",
        type=positive_int,
        default=DEFAULT_MAX_REQUEST_CHARS,
        metavar="N",
        help="refuse (413) a request whose texts have more than N characters in all "
        f"(default {DEFAULT_MAX_REQUEST_CHARS:,}: bounds the model time one request takes)",
    )
    serve.add_argument(
        "--body-timeout",
        type=positive_seconds,
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="drop a request whose body has not fully arrived after SECONDS "
        f"(default {DEFAULT_BODY_TIMEOUT:g})",
    )


def _model_window(embed: Any, key: Any) -> int | None:
    """The model's input window in tokens: the embedder's own, else the key's, else None."""
    window = getattr(embed, "max_tokens", None)
    if isinstance(window, int) and not isinstance(window, bool) and window >= 3:
        return window
    return getattr(key, "window", None) if key is not None else None


def _check_metrics_host(args: argparse.Namespace) -> None:
    """A metrics listener off this machine needs --metrics-public, and is warned about."""
    from ..http.listen import is_loopback

    if args.metrics_port is None or is_loopback(args.metrics_host):
        return
    why = (
        "the metrics listener serves the exact marked count, from which anyone who reads it "
        "can tell which requests carried a trigger and recover the triggers"
    )
    if not args.metrics_public:
        raise UsageError(
            f"--metrics-host {args.metrics_host} is reachable from other machines, and {why}. "
            "Keep it on 127.0.0.1 (scrape through an SSH tunnel or a local agent), or pass "
            "--metrics-public and firewall it to your Prometheus alone"
        )
    print(
        f"espew serve: warning: metrics on {args.metrics_host} (--metrics-public): {why}; "
        "let only your Prometheus reach it",
        file=sys.stderr,
        flush=True,
    )


def _client_api_key(args: argparse.Namespace) -> str | None:
    if not args.api_key_env:
        return None
    api_key = os.environ.get(args.api_key_env)
    if not api_key:
        raise UsageError(f"environment variable {args.api_key_env} (--api-key-env) is not set")
    return api_key


def _tenant_keys(args: argparse.Namespace) -> Any:
    """The --ring/--tenants pair as TenantKeys, or None; refused with --key or --api-key-env."""
    if args.ring is None and args.tenants is None:
        return None
    if args.ring is None or args.tenants is None:
        raise UsageError("--ring and --tenants go together: the ring's keys, the clients' map")
    if args.key or args.api_key_env or args.no_watermark:
        raise UsageError(
            "--ring/--tenants give each client its own key and API key; drop --key, "
            "--api-key-env and --no-watermark"
        )
    from ..http.tenants import TenantKeys

    try:
        tenants = TenantKeys.load(args.ring, args.tenants)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return tenants


def _design(key: Any) -> str:
    """The key's marking, in the words an operator reads at startup."""
    return f"marking={key.marking}: {key.design.summary}"


def _serving_key(args: argparse.Namespace, ring: bool) -> tuple[Any, str]:
    """The key to watermark with and where it came from; (None, why) when unmarked.

    The rule every command shares (:mod:`~espew_integrations.core.keys.key_source`):
    ``--key FILE``, ``--key env:VAR``, or ``$ESPEW_KEY`` when ``--key`` is not
    given. Unmarked serving is only ever asked for (``--no-watermark``): a key
    given in any form is used, or refused with an error naming the form, so a
    provider who set the variable never serves unmarked vectors by mistake.
    """
    from ..core.keys.key_source import find_key_source

    if args.no_watermark:
        if args.key:
            raise UsageError("--no-watermark and --key contradict each other: drop one of them")
        if os.environ.get(DEFAULT_KEY_VARIABLE) is not None:
            print(
                f"espew serve: --no-watermark: ${DEFAULT_KEY_VARIABLE} is set and not used",
                file=sys.stderr,
            )
        return None, "WITHOUT watermark (--no-watermark)"
    if ring:  # each tenant's key comes from the ring; --key was refused with it
        return None, ""
    source = find_key_source(args.key)
    if source is None:
        raise UsageError(
            "espew serve needs a key to watermark with: pass --key FILE or --key env:VAR, or "
            f"set {DEFAULT_KEY_VARIABLE} to a key file path or the key's JSON; to serve the "
            "model unmarked, say so with --no-watermark"
        )
    key = source.load()
    return key, f"watermarked with key {key.key_id} (from {source.describe()}; {_design(key)})"


def _checked_listening(args: argparse.Namespace) -> str:
    """The extras installed and the listening flags checked; returns the log level.

    Everything is checked before anything listens, so a bad setting is one clear
    message and exit 3, never a server that fails every request.
    """
    require_extra("http", _SERVER_MODULES, "espew serve")
    if args.metrics_port is not None:
        require_extra("metrics", _METRICS_MODULES, "espew serve --metrics-port")
    from ..http.listen import check_serve_settings

    try:
        level = check_serve_settings(port=args.port, log_level=args.log_level)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.metrics_port is not None and args.metrics_port == args.port != 0:
        raise UsageError(
            "--metrics-port must differ from --port: the marked count must not be reachable "
            "by clients"
        )
    _check_metrics_host(args)
    return level


def run(args: argparse.Namespace) -> int:
    """Check every setting, build the app, then listen until interrupted."""
    level = _checked_listening(args)
    from ..http import serving
    from ..http.app import check_embedder, create_app

    tenants = _tenant_keys(args)
    key, mark = _serving_key(args, ring=tenants is not None)
    options = endpoint_options(args)
    options["api_key_env"] = args.upstream_api_key_env
    embed, name = resolve_embedder(args.embedder, **options)
    api_key = _client_api_key(args)
    model_name = args.model_name or name
    check_key = key if tenants is None else tenants.shared_key
    sample = _traffic_sample(args, _model_window(embed, check_key))
    if check_key is not None:
        try:
            check_embedder(embed, check_key)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    app = create_app(
        _proxied(embed, args.encoding_format),
        key=key,
        model_name=model_name,
        api_key=api_key,
        max_inputs=args.max_inputs,
        max_request_chars=args.max_request_chars,
        body_timeout=args.body_timeout,
        tenants=tenants,
        traffic_sample=sample,
    )
    if tenants is not None:
        mark = f"watermarked per tenant ({len(tenants.tenants)} tenants, ring {tenants.ring_id})"

    def announce(base_url: str) -> None:
        auth = "API key required" if api_key or tenants is not None else "no API key required"
        print(f"espew serve: model {model_name!r} {mark}, {auth}, on {base_url}", flush=True)
        if sample is not None:
            print(f"espew serve: sampling answered texts into {sample.path}", flush=True)

    def announce_metrics(url: str) -> None:
        print(f"espew serve: metrics for the operator only on {url}", flush=True)

    metrics = app.state.metrics if args.metrics_port is not None else None
    serving.serve(
        app,
        host=args.host,
        port=args.port,
        log_level=level,
        access_log=args.access_log,
        on_ready=announce,
        workers=args.workers,
        metrics_app=metrics.asgi_app() if metrics is not None else None,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port or 0,
        on_metrics_ready=announce_metrics,
    )
    return 0
