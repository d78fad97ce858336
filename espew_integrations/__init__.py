"""espew-integrations: ESpeW copyright watermarks for embeddings, where users already are.

The public API is re-exported here; nothing is defined in this module.
Framework adapters live in submodules (``espew_integrations.langchain``,
``.llama_index``, ``.chroma``, ``.http``) so importing the package never
imports a framework.
"""

from .core import (
    DEFAULT_LEVEL,
    DEFAULT_TEMPLATES,
    MAX_ANSWER_DIM,
    EmbeddingInputError,
    ESpeWError,
    KeyFileError,
    KeyGenerationError,
    KeyModelMismatchError,
    KeyRing,
    SuspectError,
    TraceReport,
    TriggerMatcher,
    VerificationReport,
    WatermarkKey,
    build_probes,
    min_p_value,
    rank_sum_p_value,
    select_positions,
    tokenize,
    watermark,
)
from .suspects import as_suspect, trace, verify

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Lazy: OpenAIEndpoint lives with the HTTP tools; importing the package
    # must not import them (nor httpx).
    if name == "OpenAIEndpoint":
        from .http.client import OpenAIEndpoint

        return OpenAIEndpoint
    if name in ("AsyncUpstream", "ESpeWMiddleware"):
        from . import http

        return getattr(http, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_TEMPLATES",
    "MAX_ANSWER_DIM",
    "AsyncUpstream",
    "ESpeWError",
    "ESpeWMiddleware",
    "EmbeddingInputError",
    "KeyFileError",
    "KeyGenerationError",
    "KeyModelMismatchError",
    "KeyRing",
    "OpenAIEndpoint",
    "SuspectError",
    "TraceReport",
    "TriggerMatcher",
    "VerificationReport",
    "WatermarkKey",
    "__version__",
    "as_suspect",
    "build_probes",
    "min_p_value",
    "rank_sum_p_value",
    "select_positions",
    "tokenize",
    "trace",
    "verify",
    "watermark",
]
