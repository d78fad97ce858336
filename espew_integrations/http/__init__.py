"""OpenAI-compatible HTTP on both sides of the watermark, one module per job.

Install with ``pip install '.[http]'``.


- :mod:`.client`: :class:`~.client.OpenAIEndpoint`, a suspect's embeddings API queried as
  a ``verify()`` suspect (needs ``httpx``);
- :mod:`.app`: :func:`~.app.create_app`, any embedder, watermarked or not, served as
  ``POST /v1/embeddings`` (needs ``starlette``); :mod:`.serving` runs it in a supervised
  process (:func:`~.serving.serve`, needs ``uvicorn``; ``espew serve`` on the command
  line) and :mod:`.background` in a thread (:func:`~.background.running_server`), on the
  socket :mod:`.listen` binds; :mod:`.body` reads a request's body under its limits;
- :mod:`.protocol`: the OpenAI embeddings wire format, written once and shared by the
  server, the client, the upstream and the middleware;
- :mod:`.upstream`: :class:`~.upstream.AsyncUpstream`, the pooled async client of the
  server ``espew serve`` proxies (the ``openai:`` embedder);
- :mod:`.middleware`: :class:`~.middleware.ESpeWMiddleware`, an existing Starlette/FastAPI
  embeddings app watermarked in one line;
- :mod:`.metrics`: :class:`~.metrics.WatermarkMetrics`, what both count, served by
  :func:`~.metrics.create_metrics_app` on the operator's own listener, never on the API
  (``pip install '.[metrics]'``);
- :mod:`.tenants`: :class:`~.tenants.TenantKeys`, per-customer keys from a key ring;
  :mod:`.traffic`: the keyed sample of the texts answered;
- :mod:`.settings`: the setting checks the client and the upstream share.

The package itself defines and imports nothing: each name is imported from its module
(and ``OpenAIEndpoint``, ``AsyncUpstream`` and ``ESpeWMiddleware`` from the package root).
"""
