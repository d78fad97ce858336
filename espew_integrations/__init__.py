"""espew-integrations: ESpeW copyright watermarks for embeddings, where users already are.

What a user imports is re-exported here; nothing is defined in this module.
Framework adapters live in submodules (``espew_integrations.langchain``,
``.llama_index``, ``.chroma``, ``.http``) so importing the package never
imports a framework. Building blocks for analysis and tests (the word
tokenizer, the rank test, probe building...) are imported from their own
modules under :mod:`espew_integrations.core`.
"""

from . import _blas_threads  # noqa: F401  (one BLAS thread for a batch's products, if installed)
from .core.audit.options import AuditOptions
from .core.audit.report import VerificationReport
from .core.ground.defaults import DEFAULT_LEVEL
from .core.ground.errors import (
    EmbeddingInputError,
    ESpeWError,
    KeyFileError,
    KeyGenerationError,
    KeyModelMismatchError,
    SuspectError,
)
from .core.keys.key import WatermarkKey
from .core.keys.keyring import KeyRing
from .core.mark.inject import watermark
from .core.trace import TraceReport
from .suspects import as_suspect, trace, verify

__version__ = "0.1.0"


#: Names the root exported before it kept to what a user imports: name -> its module.
#: Still answered, with a DeprecationWarning naming the module to import from.
_MOVED = {
    "DEFAULT_TEMPLATES": "espew_integrations.core.audit.word_probes",
    "MAX_ANSWER_DIM": "espew_integrations.core.audit.settings",
    "build_probes": "espew_integrations.core.audit.word_probes",
    "min_p_value": "espew_integrations.core.stats.ranktest",
    "rank_sum_p_value": "espew_integrations.core.stats.ranktest",
    "select_positions": "espew_integrations.core.mark.inject",
    "tokenize": "espew_integrations.core.mark.words",
    "TriggerMatcher": "espew_integrations.core.mark.words",
}


def __getattr__(name: str) -> object:
    # Lazy: OpenAIEndpoint lives with the HTTP tools; importing the package
    # must not import them (nor httpx).
    if name == "OpenAIEndpoint":
        from .http.client import OpenAIEndpoint

        return OpenAIEndpoint
    if name == "AsyncUpstream":
        from .http.upstream import AsyncUpstream

        return AsyncUpstream
    if name == "ESpeWMiddleware":
        from .http.middleware import ESpeWMiddleware

        return ESpeWMiddleware
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(
            f"espew_integrations.{name} is deprecated; import it from {_MOVED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_LEVEL",
    "AsyncUpstream",
    "AuditOptions",
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
    "VerificationReport",
    "WatermarkKey",
    "__version__",
    "as_suspect",
    "trace",
    "verify",
    "watermark",
]
