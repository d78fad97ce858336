"""The framework-free core: numpy and scipy only."""

from .adapters import as_suspect, register_suspect_adapter
from .errors import (
    EmbeddingInputError,
    ESpeWError,
    KeyFileError,
    KeyGenerationError,
    SuspectError,
)
from .inject import select_positions, watermark
from .key import WatermarkKey
from .keyring import KeyRing
from .ranktest import min_p_value, rank_sum_p_value
from .trace import TraceReport, trace
from .verify import DEFAULT_LEVEL, DEFAULT_TEMPLATES, VerificationReport, build_probes, verify
from .words import TriggerMatcher, tokenize

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_TEMPLATES",
    "ESpeWError",
    "EmbeddingInputError",
    "KeyFileError",
    "KeyGenerationError",
    "KeyRing",
    "SuspectError",
    "TraceReport",
    "TriggerMatcher",
    "VerificationReport",
    "WatermarkKey",
    "as_suspect",
    "build_probes",
    "min_p_value",
    "rank_sum_p_value",
    "register_suspect_adapter",
    "select_positions",
    "tokenize",
    "trace",
    "verify",
    "watermark",
]
