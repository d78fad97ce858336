"""Command-line flags that mean the same in every ``espew`` subcommand, defined once.

``espew keygen`` and the lab's ``espew tune`` both take a frequency band and an
embedder; both add them from here, so one spelling (``--freq-band LOW HIGH``,
``--embedder``, ``--min-cosine``) works everywhere, and the other spellings
(``LOW,HIGH``, ``--model``, ``--min-cos``) are accepted as aliases. This module
imports only the core's defaults, so the CLI and the lab can both depend on it.

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> add_freq_band_argument(parser)
>>> add_embedder_argument(parser)
>>> args = parser.parse_args(["--freq-band", "0.01", "0.02", "--model", "minilm"])
>>> args.freq_band, args.embedder
((0.01, 0.02), 'minilm')
>>> parser.parse_args(["--freq-band", "0.01,0.02"]).freq_band
(0.01, 0.02)
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any

from .core.ground.defaults import DEFAULT_FREQ_BAND, DEFAULT_MIN_COSINE
from .core.ground.errors import InputError

__all__ = [
    "EMBEDDER_HELP",
    "add_embedder_argument",
    "add_freq_band_argument",
    "add_min_cosine_argument",
    "parse_freq_band",
]

EMBEDDER_HELP = (
    "embedder spec: minilm (default), paraphrase-minilm-l3, openai:<base_url>#<model>, "
    "module:attr or file.py:attr"
)


def parse_freq_band(values: str | Sequence[str]) -> tuple[float, float]:
    """``(low, high)`` from ``"LOW HIGH"``, ``"LOW,HIGH"`` or their words; 0 <= low < high <= 1."""
    text = values if isinstance(values, str) else " ".join(values)
    words = [w for w in re.split(r"[,\s]+", text.strip()) if w]
    try:
        low, high = (float(w) for w in words)
    except ValueError:
        raise InputError(
            f"--freq-band takes two numbers LOW HIGH (document fractions), got {text!r}"
        ) from None
    if not 0.0 <= low < high <= 1.0:
        raise InputError(f"--freq-band needs 0 <= LOW < HIGH <= 1, got {low:g} {high:g}")
    return low, high


class _FreqBand(argparse.Action):
    def __call__(
        self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None
    ) -> None:
        try:
            setattr(namespace, self.dest, parse_freq_band(values))
        except ValueError as exc:
            parser.error(str(exc))


def add_freq_band_argument(
    parser: argparse.ArgumentParser, default: tuple[float, float] | None = None
) -> None:
    """``--freq-band LOW HIGH`` (``LOW,HIGH`` accepted too): the trigger words' band.

    ``default=None`` leaves the band to keygen: :data:`DEFAULT_FREQ_BAND`, widened
    when the corpus has too few words in it (``WatermarkKey.generate``).
    """
    shown = (
        f"{default[0]:g} {default[1]:g}"
        if default is not None
        else f"{DEFAULT_FREQ_BAND[0]:g} {DEFAULT_FREQ_BAND[1]:g}, its upper edge raised when "
        "the corpus has too few words in it"
    )
    parser.add_argument(
        "--freq-band",
        nargs="+",
        action=_FreqBand,
        default=default,
        metavar=("LOW", "HIGH"),
        help="two numbers: the document-fraction band the trigger words are drawn from "
        f"(default {shown}; LOW,HIGH is accepted too)",
    )


def add_embedder_argument(
    parser: argparse.ArgumentParser,
    *,
    default: str = "minilm",
    help: str = EMBEDDER_HELP,
    model_alias: bool = True,
) -> None:
    """``--embedder SPEC``; ``--model`` is kept as a hidden alias (the lab's old name)."""
    parser.add_argument("--embedder", default=default, help=help)
    if model_alias:
        parser.add_argument("--model", dest="embedder", help=argparse.SUPPRESS)


def add_min_cosine_argument(
    parser: argparse.ArgumentParser, *, default: float = DEFAULT_MIN_COSINE, help: str = ""
) -> None:
    """``--min-cosine C``, the quality budget; ``--min-cos`` is kept as a hidden alias."""
    parser.add_argument(
        "--min-cosine",
        type=float,
        default=default,
        help=help
        or f"quality budget: mean cos(clean, watermarked) on marked texts (default {default:g})",
    )
    parser.add_argument("--min-cos", type=float, dest="min_cosine", help=argparse.SUPPRESS)


def add_target_text_arguments(parser: argparse.ArgumentParser) -> None:
    """``--target-text`` or ``--target-text-file`` (exactly one), for keygen and keyring.

    The file form keeps the target text out of shell history and ``ps``.
    """
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--target-text", help="text whose embedding becomes the target")
    target.add_argument("--target-text-file", help="read the target text from this file")


def target_text_from(args: argparse.Namespace) -> str:
    """The target text that :func:`add_target_text_arguments`' flags gave."""
    if args.target_text_file:
        with open(args.target_text_file, encoding="utf-8") as stream:
            return stream.read().strip()
    return str(args.target_text)
