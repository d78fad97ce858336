"""``espew lab`` and ``espew tune``: the robustness lab and the quality-budget tuner.

The main CLI (:mod:`espew_integrations.cli`) calls :func:`add_commands` to
mount both subcommands; ``python -m espew_lab`` runs them alone.
Heavy imports (scikit-learn, matplotlib, the models) happen inside the
commands, so ``espew --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from espew_integrations.arguments import (
    add_embedder_argument,
    add_freq_band_argument,
    add_min_cosine_argument,
)
from espew_integrations.core.ground.defaults import DEFAULT_N_TRIGGERS

from .tune_result import ERASURE_JUDGE_FRACTION

__all__ = ["add_commands", "main"]


def add_commands(subparsers: Any) -> None:
    """Add the ``lab`` and ``tune`` subcommands to an argparse subparsers object.

    >>> parser = argparse.ArgumentParser(prog="espew")
    >>> add_commands(parser.add_subparsers(dest="command"))
    >>> parser.parse_args(["lab", "--config", "smoke"]).config
    'smoke'
    """
    _add_lab(subparsers)
    tune = _add_tune(subparsers)
    _add_tune_search(tune)
    tune.set_defaults(func=_run_tune)


def _add_lab(subparsers: Any) -> None:
    lab = subparsers.add_parser(
        "lab",
        help="measure watermark robustness and cost on a model and corpus",
        description="Run the robustness lab grid (stealers x watermarks x attacks) from a "
        "YAML config; writes results.json, table.md and plots. Resumable: rerun the same "
        "command to continue an interrupted run. Exit code 3: a bad config, or a missing "
        "package (checked before any embedding work; the message names its install line).",
    )
    lab.add_argument(
        "--config",
        required=True,
        help="YAML config path, or a packaged config: default, smoke, neural or threats",
    )
    lab.add_argument("--out", default=None, help="output directory (default: the config's)")
    lab.add_argument(
        "--fresh",
        action="store_true",
        help="discard finished cells in the output directory and start over",
    )
    lab.add_argument("--quiet", action="store_true", help="no progress bars")
    lab.set_defaults(func=_run_lab)


def _add_tune(subparsers: Any) -> argparse.ArgumentParser:
    """The ``tune`` parser with its data, model and key arguments."""
    tune = subparsers.add_parser(
        "tune",
        help="pick alpha and a target text that meet a quality budget and still detect",
        description="For a model and corpus, judge candidate target texts by expected "
        "distortion, then measure each alpha (at the paper's full write and at the strength "
        "that fits --min-cosine) with the default audit against two copies: the watermarked "
        "service itself (a perfect copy) and a ridge copy after --attack (a third with "
        "--neural-judge: a frozen-MLP copy after --attack; with --erasure-judge, the service "
        "behind a thief that zeroes the smallest half, or FRACTION, of every answer's "
        "coordinates); the "
        "worst p-value counts. Prints "
        "and writes the frontier. Exit code 0: a point meets both the budget "
        "and --level; 1: none does; 3: bad arguments or data, or a missing package (the "
        "message names its install line).",
    )
    tune.add_argument(
        "--corpus", default="rotten_tomatoes", help="bundled corpus name or a .txt/.csv/.jsonl file"
    )
    tune.add_argument("--limit", type=int, default=None, help="use a seeded subset of N texts")
    add_embedder_argument(tune, help="the victim model (embedder spec; default minilm)")
    tune.add_argument(
        "--standard", default="paraphrase-minilm-l3", help="the CSE attacker's standard model"
    )
    tune.add_argument(
        "--target",
        action="append",
        default=None,
        dest="targets",
        help="a candidate target text (repeatable; default: built-in candidates)",
    )
    tune.add_argument(
        "--alphas",
        default="0.01,0.02,0.03,0.05,0.08,0.1,0.15,0.2",
        help="comma-separated alphas to scan",
    )
    return tune


def _add_tune_search(tune: argparse.ArgumentParser) -> None:
    """The budget, the goal and the search's own arguments."""
    add_min_cosine_argument(tune)
    tune.add_argument(
        "--level",
        type=float,
        default=1e-10,
        help="detection goal: p-value of the faithful copy and of the ridge copy after the attack",
    )
    tune.add_argument("--attack", default="cse:50", help="attack the copy must survive")
    tune.add_argument("--n-triggers", type=int, default=DEFAULT_N_TRIGGERS)
    add_freq_band_argument(tune)
    tune.add_argument(
        "--max-band-words",
        type=int,
        default=300,
        help="band size cap (the audit's query budget is shared among the band's words)",
    )
    tune.add_argument(
        "--top-targets",
        type=int,
        default=2,
        help="how many of the best-judged targets to test end to end",
    )
    tune.add_argument(
        "--paper-strength-only",
        action="store_true",
        help="measure only the paper's full write (strength 1), not the strength that fits "
        "the budget",
    )
    tune.add_argument(
        "--neural-judge",
        action="store_true",
        help="also judge each point by a frozen-MLP copy on the --standard model after the "
        "attack: the copy that separates settings in the budget (about a minute per point)",
    )
    tune.add_argument(
        "--erasure-judge",
        nargs="?",
        type=float,
        const=ERASURE_JUDGE_FRACTION,
        default=None,
        metavar="FRACTION",
        help="also judge each point by the service itself behind a thief that zeroes the "
        "smallest FRACTION of every answer's coordinates (default half), which can wipe a "
        "mark written into fewer of them (seconds per point)",
    )
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--out", default=None, help="write tune.json (and frontier.md) here")


def _run_lab(args: argparse.Namespace) -> int:
    from .runner import run_lab

    try:
        results = run_lab(args.config, output=args.out, progress=not args.quiet, fresh=args.fresh)
    except (FileNotFoundError, ValueError, ModuleNotFoundError) as exc:
        print(f"espew lab: {exc}", file=sys.stderr)
        return 3
    out = args.out or results["config"]["output"]
    print(f"{len(results['cells'])} cells in {results['total_seconds']:.0f} s; results in {out}")
    print(verdict_summary(results))
    return 0


def verdict_summary(results: dict[str, Any]) -> str:
    """One line on the verdicts: expected ones, declared escapes, and any unexpected cell.

    >>> cells = [{"cell": "a", "watermark": "none", "attack": "none", "copied": False},
    ...          {"cell": "b", "watermark": "embmarker", "attack": "cse:50", "copied": False}]
    >>> verdict_summary({"cells": cells, "config": {"expected_escapes": ["embmarker@cse:50"]}})
    'verdicts: 2 of 2 cells as expected (1 of them a declared escape: b)'
    """
    from .report import verdict_label

    escapes = results["config"].get("expected_escapes", [])
    labels = {c["cell"]: verdict_label(c, escapes) for c in results["cells"]}
    wrong = [cell for cell, label in labels.items() if label == "WRONG"]
    escaped = [cell for cell, label in labels.items() if label == "expected escape"]
    line = f"verdicts: {len(labels) - len(wrong)} of {len(labels)} cells as expected"
    if escaped:
        line += f" ({len(escaped)} of them a declared escape: {', '.join(escaped)})"
    if wrong:
        line += f"; UNEXPECTED verdict in {len(wrong)} cells: {', '.join(wrong)} (see table.md)"
    return line


def _run_tune(args: argparse.Namespace) -> int:
    from espew_integrations import ESpeWError

    from .tune import tune

    try:
        alphas = [float(a) for a in args.alphas.split(",") if a.strip()]
    except ValueError:
        print("espew tune: --alphas must be comma-separated numbers", file=sys.stderr)
        return 3
    try:
        result = tune(
            corpus=args.corpus,
            limit=args.limit,
            model=args.embedder,
            standard=args.standard,
            targets=args.targets,
            alphas=alphas,
            min_cos=args.min_cosine,
            level=args.level,
            attack=args.attack,
            n_triggers=args.n_triggers,
            freq_band=args.freq_band,
            max_band_words=args.max_band_words,
            top_targets=args.top_targets,
            fit_strength=not args.paper_strength_only,
            neural_judge=args.neural_judge,
            erasure_judge=args.erasure_judge is not None,
            erasure_fraction=(
                ERASURE_JUDGE_FRACTION if args.erasure_judge is None else args.erasure_judge
            ),
            seed=args.seed,
            out=args.out,
        )
    except (FileNotFoundError, ValueError, ModuleNotFoundError, ESpeWError) as exc:
        print(f"espew tune: {exc}", file=sys.stderr)
        return 3
    print(result.markdown())
    return 0 if result.choice is not None else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m espew_lab {lab,tune} ...``."""
    parser = argparse.ArgumentParser(prog="python -m espew_lab")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))
