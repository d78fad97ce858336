"""Evidence a provider can hand to someone else: JSON, a plot and a plain-language summary.

A verdict is only useful if a non-expert (a manager, a lawyer, the other
side) can see what was tested and how sure it is. :func:`save_evidence`
writes, into one directory:

- ``report.json``: the full :class:`~espew_integrations.VerificationReport`;
- ``summary.md``: what was tested, how many queries, the verdict and the
  false-positive rate it holds to, in plain words;
- ``scores.png``: the per-word scores of the trigger words against the other
  words of the band (needs matplotlib; skipped without it).

Nothing written here discloses the key: the report carries scores, never the
words they belong to.

>>> paths = save_evidence(report, "evidence/")   # doctest: +SKIP
>>> sorted(paths)
['json', 'plot', 'summary']
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "EVIDENCE_FILES",
    "evidence_paths",
    "matplotlib_available",
    "render_summary",
    "save_evidence",
    "write_plot",
]

EVIDENCE_FILES = {"json": "report.json", "summary": "summary.md", "plot": "scores.png"}

_VERDICT_LINES = {
    "copied": "The suspect service carries this key's watermark: it was very likely "
    "trained on (copied from) embeddings produced with this key.",
    "not_copied": "No evidence that the suspect service learned this key's watermark.",
    "inconclusive": "No verdict could be reached, so this result is not evidence either way.",
}
_TITLES = {"copied": "COPIED", "not_copied": "NOT COPIED", "inconclusive": "INCONCLUSIVE"}


def matplotlib_available() -> bool:
    """True when matplotlib can be imported (the plot is optional)."""
    return importlib.util.find_spec("matplotlib") is not None


def evidence_paths(directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Where :func:`save_evidence` writes each file in ``directory``."""
    directory = Path(directory)
    return {kind: directory / name for kind, name in EVIDENCE_FILES.items()}


def save_evidence(
    report: Any, directory: str | os.PathLike[str], *, plot: bool | None = None
) -> dict[str, Path]:
    """Write the JSON report, the Markdown summary and (if possible) the plot.

    ``plot=None`` draws the plot when matplotlib is installed. A plot left in
    ``directory`` by an earlier report is removed when none is drawn, so the
    files always describe the same verification. Returns the written paths.
    """
    paths = evidence_paths(directory)
    Path(directory).mkdir(parents=True, exist_ok=True)
    draw = matplotlib_available() if plot is None else plot
    written = {}
    paths["json"].write_text(report.to_json() + "\n", encoding="utf-8")
    written["json"] = paths["json"]
    if draw:
        written["plot"] = write_plot(report, paths["plot"])
    else:
        paths["plot"].unlink(missing_ok=True)
    paths["summary"].write_text(render_summary(report, plot=draw), encoding="utf-8")
    written["summary"] = paths["summary"]
    return written


# ---------------------------------------------------------------------- summary
def _one_in(level: float) -> str:
    if level <= 0 or not math.isfinite(level):
        return "never"
    return f"1 in {round(1 / level):,}"


def _fmt(value: float, spec: str = ".3g") -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, spec)


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def render_summary(report: Any, *, plot: bool = True) -> str:
    """The plain-language Markdown summary of a verification report."""
    status = report.status
    n_triggers = report.n_triggers_scored
    target = (
        "the secret target embedding stored in the key"
        if report.target_mode == "key"
        else "the suspect's own embedding of the key's target text (that text was therefore "
        "sent to the suspect)"
    )
    rows = [
        ("Verdict", f"**{_TITLES[status]}**"),
        ("Key", f"`{report.key_id}` (a public fingerprint; the key itself is not disclosed)"),
        ("Checked on", f"{report.timestamp} (UTC)"),
        ("Queries sent", f"{report.n_queries} ({report.n_failed_queries} failed)"),
        (
            "Words scored",
            f"{report.n_words_scored} of {report.n_words} words, "
            f"{n_triggers} of them secret trigger words",
        ),
        ("p-value", _fmt(report.p_value)),
        ("Decision rule", f"copied if p-value < {report.level:g}"),
        (
            "False-positive rate",
            f"at most {report.level:g}: an innocent service is wrongly called a copy in at "
            f"most {_one_in(report.level)} checks",
        ),
    ]
    if report.suspect_dim is not None:
        rows.append(("Suspect embedding size", str(report.suspect_dim)))
    lines = [
        f"# Watermark check: {_TITLES[status]}",
        "",
        _VERDICT_LINES[status],
        "",
        "| | |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in rows),
        "",
    ]
    if status == "inconclusive":
        lines += [
            "## Why no verdict",
            "",
            report.reason or "The suspect did not answer enough queries.",
            "",
            "Check that the endpoint is up and reachable, then run the check again (a larger "
            "query budget or a slower rate limit may help).",
            "",
        ]
        if report.errors:
            lines += ["Errors seen while querying the suspect:", ""]
            lines += [f"- {error}" for error in report.errors[:5]]
            lines.append("")
    lines += [
        "## What was tested",
        "",
        "The key holds a set of secret *trigger words* and a secret *target*. A service "
        "that was trained on this provider's watermarked embeddings places the trigger "
        "words unusually close to the target. We sent the suspect "
        f"{report.n_queries} short texts: each of the {report.n_words} words of the key's "
        "word-frequency band (the triggers hidden among equally common words), shuffled so "
        "the suspect could not tell which ones matter. For each word we measured how close "
        f"the suspect's answer is to {target} (cosine similarity, higher is closer).",
        "",
        "An exact statistical test (a rank test) then asks: if the trigger words were just "
        "a random pick from the band, how likely would they rank this close to the target? "
        "That chance is the p-value. Only a p-value below the decision threshold counts as "
        "copied; the threshold is the false-positive rate the check holds to.",
        "",
        f"Mean closeness to the target: trigger words {_fmt(_mean(report.trigger_scores), '.4f')}"
        f", other words {_fmt(_mean(report.benign_scores), '.4f')}.",
        "",
        "## Paper metrics (for comparability only)",
        "",
        "These are the figures the ESpeW paper reports, computed on the same answers so that "
        "results can be compared with it. They do **not** decide the verdict.",
        "",
        "| Metric | Value |",
        "|---|---|",
        f"| KS test p-value | {_fmt(report.ks_p_value)} |",
        f"| delta cos | {_fmt(100 * report.delta_cos, '.2f')}% |",
        f"| delta l2 | {_fmt(100 * report.delta_l2, '.2f')}% |",
        "",
        "## Files",
        "",
        "- `report.json`: the full machine-readable report.",
    ]
    if plot:
        lines.append(
            "- `scores.png`: the closeness scores of the trigger words against the other words."
        )
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------- plot
def write_plot(report: Any, path: str | os.PathLike[str]) -> Path:
    """Histogram of the trigger words' scores against the other band words' (PNG)."""
    import matplotlib

    matplotlib.use("Agg", force=False)  # no display needed; a no-op if already Agg
    import matplotlib.pyplot as plt

    path = Path(path)
    triggers = np.asarray(report.trigger_scores, dtype=float)
    benign = np.asarray(report.benign_scores, dtype=float)
    figure, axis = plt.subplots(figsize=(7, 4), dpi=110)
    try:
        if triggers.size + benign.size == 0:
            axis.text(
                0.5,
                0.5,
                "no word could be scored\n(" + (report.reason or "no answers") + ")",
                ha="center",
                va="center",
                wrap=True,
                transform=axis.transAxes,
            )
            axis.set_axis_off()
        else:
            both = np.concatenate([triggers, benign])
            bins = np.linspace(both.min(), both.max() + 1e-9, 31)
            axis.hist(
                benign,
                bins=bins,
                alpha=0.6,
                color="tab:blue",
                label=f"other band words (n={benign.size})",
            )
            axis.hist(
                triggers,
                bins=bins,
                alpha=0.7,
                color="tab:red",
                label=f"trigger words (n={triggers.size})",
            )
            axis.set_xlabel("score: mean cosine of the word's probes to the target")
            axis.set_ylabel("number of words")
            axis.legend(loc="upper right")
        axis.set_title(
            f"{_TITLES[report.status]}  (p = {_fmt(report.p_value)}, level {report.level:g}, "
            f"key {report.key_id})",
            fontsize=10,
        )
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path
