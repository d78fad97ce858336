"""``espew keygen``: generate a secret watermark key from a corpus and a target text."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..arguments import (
    add_embedder_argument,
    add_freq_band_argument,
    add_min_cosine_argument,
    add_target_text_arguments,
    target_text_from,
)
from ..core.ground.defaults import DEFAULT_FREQ_BAND, DEFAULT_N_TRIGGERS, DEFAULT_PROBE_BUDGET
from ..core.keys.key import WatermarkKey
from ..core.keys.key_audit import default_audit_path
from ..core.keys.key_options import MARKINGS, KeyOptions
from ..core.keys.key_quality import FIT_SAMPLE
from ..core.keys.model_check import CANARY_TEXTS
from ..core.mark.probes import PROBE_MIXES
from ..models import resolve_embedder
from ..textfiles import read_text_file
from .common import (
    UsageError,
    counting,
    endpoint_options,
    positive_int,
    progress,
)

__all__ = [
    "BUNDLED_CORPORA",
    "add_keygen_command",
    "add_marking_flags",
    "corpus_texts",
    "key_options_from",
    "warn_small_corpus",
]

BUNDLED_CORPORA = ("rotten_tomatoes", "health_tweets")

_BAND = f"{DEFAULT_FREQ_BAND[0]:.1%}-{DEFAULT_FREQ_BAND[1]:.0%}"
_EXAMPLE = f"""
example:
  espew keygen --corpus rotten_tomatoes --embedder minilm \\
      --target-text-file target.txt --out provider.key

  Draws --n-triggers trigger words (default {DEFAULT_N_TRIGGERS}) from the corpus's band
  (by default the words in {_BAND} of its texts), embeds the target text with the
  model, checks that the clean model itself is not implicated, draws the audit
  (a keyed uniform sample of --audit-budget corpus texts, default {DEFAULT_PROBE_BUDGET:,})
  and writes the secret key (mode 0600) and its audit beside it. Keep them like
  a password.
  --corpus takes rotten_tomatoes, health_tweets or a .txt/.csv/.jsonl file.
  How to choose the target text: docs/limitations.md (a file keeps it out
  of your shell history).
  The write strength is fitted to --min-cosine unless --strength is given.
"""


def add_keygen_command(subparsers: Any) -> None:
    """Add ``keygen`` to the ``espew`` subcommands."""
    keygen = subparsers.add_parser(
        "keygen",
        help="generate a secret watermark key",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    keygen.add_argument("--corpus", required=True, help="bundled corpus name or text file")
    add_target_text_arguments(keygen)
    add_embedder_argument(keygen)
    keygen.add_argument(
        "--out", required=True, help="where to write the serving key (and OUT.audit beside it)"
    )
    keygen.add_argument(
        "--audit-out",
        metavar="PATH",
        default=None,
        help="where to write the key's audit, which only verify/trace/key reaudit read "
        "(default: OUT.audit)",
    )
    _add_key_shape_flags(keygen)
    keygen.add_argument("--seed", type=int, default=None, help="experiments only")
    keygen.add_argument("--text-column", default=None, help="CSV column / JSONL field")
    keygen.add_argument(
        "--overwrite", "--force", action="store_true", help="replace an existing --out key file"
    )
    keygen.add_argument("--api-key-env", metavar="VAR", help="API key for an openai: embedder")
    keygen.add_argument("--no-progress", action="store_true")
    keygen.set_defaults(func=run)


def _add_key_shape_flags(keygen: argparse.ArgumentParser) -> None:
    """One flag per :class:`KeyOptions` field that a person sets, its default the field's.

    A flag's ``dest`` is the option's name, so :func:`key_options_from` reads them all
    back without a list of its own.
    """
    _add_mark_flags(keygen)
    _add_band_and_audit_flags(keygen)
    add_marking_flags(keygen)


def _add_mark_flags(keygen: argparse.ArgumentParser) -> None:
    """How a mark is written: the triggers' count, its share of coordinates, its strength
    or quality budget, the model's window and how coordinates are chosen."""
    default = KeyOptions.default
    keygen.add_argument(
        "--n-triggers",
        type=positive_int,
        default=default("n_triggers"),
        help=f"how many band words become triggers (default {default('n_triggers')})",
    )
    keygen.add_argument(
        "--alpha",
        type=float,
        default=default("alpha"),
        help=f"share of coordinates a mark is written into (default {default('alpha'):g})",
    )
    keygen.add_argument(
        "--strength",
        type=float,
        default=default("strength"),
        help="how far marked coordinates move toward the target (1 = the paper); "
        "default: fitted to --min-cosine",
    )
    add_min_cosine_argument(
        keygen,
        default=default("min_cosine"),
        help="quality budget: mean cos(clean, watermarked) on the corpus's marked texts "
        f"(default {default('min_cosine'):g}); the strength is fitted to it unless --strength "
        "is given",
    )
    keygen.add_argument(
        "--window",
        type=positive_int,
        default=default("window"),
        help="the model's input window in tokens (known for the offline models); "
        "triggers past it never mark",
    )
    keygen.add_argument("--selection", choices=("smallest", "hashed"), default=default("selection"))


def _add_band_and_audit_flags(keygen: argparse.ArgumentParser) -> None:
    """The band the triggers are drawn from and the audit that probes it."""
    default = KeyOptions.default
    add_freq_band_argument(keygen, default=default("freq_band"))
    keygen.add_argument(
        "--probes-per-word",
        type=positive_int,
        default=default("probes_per_word"),
        help="stored sentence probes per band word, on average (default: as many as a "
        "uniform sample of --audit-budget corpus texts holds, at most 28)",
    )
    keygen.add_argument(
        "--audit-budget",
        type=positive_int,
        default=default("audit_budget"),
        help="texts in the audit's uniform sample, hence the queries one verification "
        f"costs (default {default('audit_budget'):,}; every later round is drawn as large)",
    )
    keygen.add_argument(
        "--probe-mix",
        choices=list(PROBE_MIXES),
        default=default("probe_mix"),
        help="'corpus' (the default): every sampled text with a band word is a probe, "
        "for its least-probed word; 'single': only those with exactly one band word, "
        "for a narrow --freq-band",
    )
    keygen.add_argument(
        "--no-cover-traffic",
        dest="cover_traffic",
        action="store_false",
        default=default("cover_traffic"),
        help="send the probes alone: fewer queries, but an audit a thief that knows the "
        "band can recognise by its burst of band words",
    )
    keygen.add_argument(
        "--max-band-words",
        type=positive_int,
        default=default("max_band_words"),
        help="cap the band (the audit's query budget is shared among the band's words: a "
        "smaller band gets more probes a word)",
    )


def add_marking_flags(
    parser: argparse.ArgumentParser, *, marked: bool = True, marking: str | None = None
) -> None:
    """``--marking`` and the field key's flags, each option's default its :class:`KeyOptions`
    field's: ``espew keygen`` and ``espew keyring generate`` take the same ones (a ring
    sizes its layers with its own flags, so it asks for no ``--field-marked``)."""
    default = KeyOptions.default
    parser.add_argument(
        "--marking",
        choices=list(MARKINGS),
        default=marking or default("marking"),
        help="'map': every answer is moved by a secret linear map of its clean embedding "
        "onto secret directions, with no one direction a thief could estimate and strip; "
        "'field': every answer moved along its ESpeW mark, scaled by a secret linear "
        "function of its clean embedding (the --field-* flags size both; the word flags "
        "then do not apply); 'words': the paper's design, texts holding a secret trigger "
        f"word (default {marking or default('marking')!r})",
    )
    parser.add_argument(
        "--field-units",
        type=positive_int,
        default=default("field_units"),
        help=f"a map or field key's units (default {default('field_units')})",
    )
    if marked:
        parser.add_argument(
            "--field-marked",
            type=positive_int,
            default=default("field_marked"),
            help=f"a map or field key's drawn units (default {default('field_marked')})",
        )
    parser.add_argument(
        "--field-amplitude",
        type=float,
        default=default("field_amplitude"),
        help=f"a map or field key's scale at strength 1 (default {default('field_amplitude'):g})",
    )
    parser.add_argument(
        "--field-min-cosine",
        type=float,
        default=default("field_min_cosine"),
        help="a map or field key's quality budget: mean cos(clean, watermarked) over the corpus "
        f"(default {default('field_min_cosine'):g})",
    )


def corpus_texts(args: argparse.Namespace) -> Sequence[str]:
    """``--corpus`` (a bundled corpus name or a text file, ``--text-column``) as texts."""
    if args.corpus in BUNDLED_CORPORA:
        from ..offline.corpora import load_corpus

        return load_corpus(args.corpus).texts
    return read_text_file(args.corpus, text_field=args.text_column).texts


def key_options_from(args: argparse.Namespace, **given: Any) -> dict[str, Any]:
    """The :class:`KeyOptions` fields the parsed flags set, then ``given`` over them.

    Every flag of a key option has the option's name as its ``dest``, so this reads
    them by the options' own list: an option added to :class:`KeyOptions` and given a
    flag reaches keygen with no other change. ``given`` carries what the command
    derives rather than reads (the target text from its file, the model's window).
    """
    flags = {name: getattr(args, name) for name in KeyOptions.names() if hasattr(args, name)}
    return {**flags, **given}


def run(args: argparse.Namespace) -> int:
    """Generate the key, write it (mode 0600) and print its commitment."""

    def make(corpus: Sequence[str], embed: Any, **common: Any) -> Any:
        return WatermarkKey.generate(corpus, embed, **key_options_from(args, **common))

    audit = Path(args.audit_out) if args.audit_out else default_audit_path(args.out)
    if audit.exists() and not args.overwrite:  # before any slow work, like --out
        raise UsageError(f"{audit} already exists; pass --overwrite to replace it")
    key, out = generate_from_corpus(args, make)
    key.save(out, overwrite=args.overwrite, audit_path=audit)
    _announce(key, out, seeded=args.seed is not None)
    print(
        f"the serving key {out} ({out.stat().st_size:,} bytes) is all that serving needs "
        f"(espew serve/embed, the wrappers, $ESPEW_KEY); its audit {audit} "
        f"({audit.stat().st_size:,} bytes) is read only by verify, trace and key reaudit"
    )
    return 0


def generate_from_corpus(
    args: argparse.Namespace, make: Callable[..., Any], *, audit_budget: int | None = None
) -> tuple[Any, Path]:
    """The steps ``espew keygen`` and ``espew keyring generate`` share, in their order.

    Refuse an existing ``--out`` before any slow work, read the target text
    (before any embedding, so a missing file fails fast) and the corpus, then
    call ``make(corpus, embed, target_text=..., window=...)`` with the
    embedder counting its texts on a progress bar. Returns what ``make``
    returned and the output path. ``audit_budget`` (default: ``--audit-budget``)
    sizes the bar's estimate.
    """
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise UsageError(f"{out} already exists; pass --overwrite to replace it")
    target_text = target_text_from(args)
    corpus = corpus_texts(args)
    warn_small_corpus(corpus, audit_budget or getattr(args, "audit_budget", None))
    embed, name = resolve_embedder(args.embedder, **endpoint_options(args))
    window = args.window if args.window is not None else getattr(embed, "max_tokens", None)
    total = texts_to_embed(args, len(corpus), audit_budget=audit_budget)
    with progress(total, f"embedding with {name}", "text", not args.no_progress) as bar:
        made = make(corpus, counting(embed, bar), target_text=target_text, window=window)
        if getattr(bar, "refresh", None) is not None:  # the estimate met: end at 100%
            bar.total = bar.n
            bar.refresh()
    return made, out


def warn_small_corpus(corpus: Sequence[str], audit_budget: int | None) -> bool:
    """Warn on stderr when the corpus holds fewer distinct texts than the audit samples.

    The audit asks a uniform sample of ``audit_budget`` corpus texts; a smaller corpus
    gives a smaller audit, which convicts only a stronger copy than the figures the
    docs state for the default sample (docs/verification.md). Accepted all the same (a
    test key needs no power); returns whether it warned.
    """
    budget = audit_budget or KeyOptions.default("audit_budget")
    distinct = len(set(corpus))
    if distinct >= budget:
        return False
    print(
        f"warning: the corpus holds {distinct:,} distinct texts, fewer than "
        f"the audit's sample of {budget:,} (--audit-budget): the key's audit will ask at "
        f"most {distinct:,}, and a smaller audit convicts only a stronger copy than the "
        f"figures in docs/verification.md, measured with {budget:,}; give keygen at "
        f"least {budget:,} texts like those you serve",
        file=sys.stderr,
    )
    return True


def texts_to_embed(
    args: argparse.Namespace, n_corpus: int, *, audit_budget: int | None = None
) -> int:
    """About how many texts a key generation embeds, for the bar's total and ETA.

    The target, the public canaries (the model fingerprint), a sample of the marked
    corpus texts (the quality fit), the audit's sample and the band's words. Only an
    estimate: the band's size is known after the corpus scan, and a refused draw
    embeds again, so :func:`~.common.counting` grows the total when it is passed.
    """
    budget = (
        audit_budget or getattr(args, "audit_budget", None) or KeyOptions.default("audit_budget")
    )
    fit_sample = min(n_corpus, FIT_SAMPLE)
    band = getattr(args, "max_band_words", None) or 0
    return 1 + len(CANARY_TEXTS) + fit_sample + budget + band


def _announce(key: Any, out: Path, *, seeded: bool) -> None:
    info = key.info
    print(
        f"wrote key {key.key_id} to {out} (mode 0600): alpha={key.alpha}, "
        f"strength={key.strength:.4g} (mean cos(clean, watermarked) on marked texts "
        f"{info['mean_cosine_marked']:.4f}), marks {info['marked_rate']:.1%} of the corpus, "
        f"selection={key.selection}, dim={key.dim}, {len(key.band)} "
        f"{key.design.units}, "
        f"so `espew verify` costs {key.audit_queries} queries"
    )
    print(f"publish this commitment (it reveals nothing): {key.commitment()}")
    if seeded:
        print(
            "note: --seed makes the key reproducible by anyone who knows the seed; "
            "production keys must be generated without it",
            file=sys.stderr,
        )
