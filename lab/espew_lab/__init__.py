"""The robustness lab: does the watermark survive on YOUR model and data, and what does it cost?

Public API (heavy dependencies load lazily inside the functions):

- :func:`run_lab` (``espew lab --config <yaml>``): the grid of stealers x
  watermarks x attacks with the paper's metrics, resumable and seeded;
- :func:`tune` (``espew tune``): alpha and target text for a quality budget;
- :func:`load_config` (a validated, frozen :class:`LabConfig`), :func:`load_data`,
  :func:`build_watermark`, :func:`apply_attack`, the stealers and the embedding cache
  for custom studies;
- the wider threat model (``threats:`` in a config, :mod:`.threats`): the
  :class:`AuditRouter` thief, the :class:`ParaphraseThief` (WET) with its
  :class:`NeighbourParaphraser`, :func:`long_text_study` for RAG chunks, and
  the :class:`ErasingSuspect` that wipes the small coordinates it serves;
- :func:`find_displaced_rows` (:mod:`.spectral`): the thief's ICA search of its
  stolen answers for a component that splits the marked rows off.

>>> from espew_lab import run_lab
>>> results = run_lab("smoke", output="lab-results/smoke")  # doctest: +SKIP
"""

from .attacks import apply_attack, cse, parse_attack
from .cache import cache_dir, cached_embed
from .config import LabConfig, load_config
from .data import load_data
from .erasure import ErasingSuspect, erase_smallest
from .paraphrase import NeighbourParaphraser, ParaphraseThief
from .router import AuditHistory, AuditRouter, looks_like_audit
from .runner import LabDependencyError, run_lab
from .spectral import SpectralFinding, find_displaced_rows
from .stealers import FrozenMLPStealer, RidgeStealer, make_stealer
from .threats import long_text_study
from .tune import tune
from .watermarks import METHODS, build_watermark

__all__ = [
    "METHODS",
    "AuditHistory",
    "AuditRouter",
    "ErasingSuspect",
    "FrozenMLPStealer",
    "LabConfig",
    "LabDependencyError",
    "NeighbourParaphraser",
    "ParaphraseThief",
    "RidgeStealer",
    "SpectralFinding",
    "apply_attack",
    "build_watermark",
    "cache_dir",
    "cached_embed",
    "cse",
    "erase_smallest",
    "find_displaced_rows",
    "load_config",
    "load_data",
    "long_text_study",
    "looks_like_audit",
    "make_stealer",
    "parse_attack",
    "run_lab",
    "tune",
]
