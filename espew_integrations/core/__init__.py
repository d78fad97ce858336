"""The framework-free core: the standard library, numpy and scipy only.

Its :func:`verify` takes a callable suspect; the package root's
:func:`espew_integrations.verify` also takes framework objects (see
:mod:`espew_integrations.suspects`).
"""

from .audit import AuditOptions
from .errors import (
    EmbeddingInputError,
    ESpeWError,
    KeyFileError,
    KeyGenerationError,
    KeyModelMismatchError,
    SuspectError,
)
from .inject import select_positions, watermark
from .key import WatermarkKey
from .keyring import KeyRing
from .ranktest import min_p_value, rank_sum_p_value
from .report import VerificationReport
from .trace import TraceReport, trace
from .verify import DEFAULT_LEVEL, DEFAULT_TEMPLATES, MAX_ANSWER_DIM, build_probes, verify
from .words import TriggerMatcher, tokenize

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_TEMPLATES",
    "MAX_ANSWER_DIM",
    "AuditOptions",
    "ESpeWError",
    "EmbeddingInputError",
    "KeyFileError",
    "KeyGenerationError",
    "KeyModelMismatchError",
    "KeyRing",
    "SuspectError",
    "TraceReport",
    "TriggerMatcher",
    "VerificationReport",
    "WatermarkKey",
    "build_probes",
    "min_p_value",
    "rank_sum_p_value",
    "select_positions",
    "tokenize",
    "trace",
    "verify",
    "watermark",
]
