"""The public evidence bundle: ``report.json`` and ``summary.md``, safe to hand to the other side.

A verdict is only useful if a non-expert (a manager, a lawyer, the other
side) can see what was tested and how sure it is, but nothing handed to the
suspect's owner may help them find the triggers: with the per-word scores, a
suspect that logged its own answers can read the triggers off. So both files
are built from :func:`public_report` alone, which drops every per-word score.
The private bundle (per-word scores, a plot) is
:func:`espew_integrations.evidence.save_private_evidence`, outside the core
because its plot needs matplotlib.

This module lives in the core, next to :class:`~.report.VerificationReport`,
so that ``report.save(directory)`` needs nothing above the core: it is the
standard library plus :mod:`.safe_dir` and :mod:`.untrusted`. Text that came
from the suspect (``report.errors``, ``report.reason``) goes through
:func:`~.untrusted.printable` first.

>>> paths = save_evidence(report, "evidence/")   # doctest: +SKIP
>>> sorted(paths)
['json', 'summary']
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .safe_dir import SafeDirectory
from .untrusted import printable

if TYPE_CHECKING:  # types only: report.py imports this module to implement save()
    from .report import VerificationReport

__all__ = [
    "EVIDENCE_FILES",
    "PRIVATE_REPORT_KEYS",
    "VERDICT_TITLES",
    "evidence_paths",
    "public_report",
    "render_summary",
    "save_evidence",
]

#: The public files, safe to hand to the suspect's owner.
EVIDENCE_FILES = {"json": "report.json", "summary": "summary.md"}
#: Report fields that never go into a public file.
PRIVATE_REPORT_KEYS = ("trigger_scores", "benign_scores")
#: The verdict as one word or two, for titles.
VERDICT_TITLES = {"copied": "COPIED", "not_copied": "NOT COPIED", "inconclusive": "INCONCLUSIVE"}
# The public per-word plot earlier versions wrote next to report.json. It disclosed
# the scores, so it is no longer written, and a copy left from an earlier report is
# removed (with force) so the bundle never mixes two verifications.
_OLD_PLOT = "scores.png"
_PUBLIC_MODE = 0o644
_ERRORS_SHOWN = 5

_VERDICT_LINES = {
    "copied": "The suspect service carries this key's watermark: it was very likely "
    "trained on (copied from) embeddings produced with this key.",
    "not_copied": "No evidence that the suspect service learned this key's watermark.",
    "inconclusive": "No verdict could be reached, so this result is not evidence either way.",
}


def evidence_paths(directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Every path :func:`save_evidence` writes or (with ``force``) replaces in ``directory``.

    ``json`` and ``summary`` are written; ``old_plot`` is the public per-word
    plot of earlier versions, which is only ever removed. A caller that checks
    these paths before an audit (as ``espew verify --report-dir`` does) knows
    that saving afterwards will not fail on an existing file.
    """
    directory = Path(directory)
    paths = {kind: directory / name for kind, name in EVIDENCE_FILES.items()}
    paths["old_plot"] = directory / _OLD_PLOT
    return paths


def public_report(report: VerificationReport) -> dict[str, Any]:
    """What may be shown to the other side: ``report.to_dict()`` minus per-word scores.

    Suspect-supplied text (``reason``, ``errors``) is made printable. Dropping
    :data:`PRIVATE_REPORT_KEYS` here keeps the public files safe whether or not
    ``to_dict()`` itself still carries them.
    """
    data = {k: v for k, v in report.to_dict().items() if k not in PRIVATE_REPORT_KEYS}
    if "reason" in data:
        data["reason"] = printable(data["reason"] or "", limit=500)
    if "errors" in data:
        data["errors"] = [printable(error) for error in data["errors"] or ()]
    return data


def save_evidence(
    report: VerificationReport,
    directory: str | os.PathLike[str],
    *,
    force: bool = False,
    plot: bool | None = None,
) -> dict[str, Path]:
    """Write the public ``report.json`` and ``summary.md`` into ``directory`` (created if needed).

    Nothing in them lets the suspect's owner tell which probed words are the
    triggers (see the module docstring). Existing evidence files are replaced
    only with ``force=True``; otherwise :class:`FileExistsError` names them and
    nothing is written. With ``force``, a ``scores.png`` left by an earlier
    version is removed. ``plot`` is accepted for compatibility and ignored: the
    per-word plot is private now. Returns the written paths by kind.
    """
    del plot  # the plot disclosed per-word scores; only the private bundle draws it
    data = public_report(report)
    files = {
        "json": (EVIDENCE_FILES["json"], (json.dumps(data, indent=2) + "\n").encode("utf-8")),
        "summary": (EVIDENCE_FILES["summary"], render_summary(report).encode("utf-8")),
    }
    with SafeDirectory(directory) as target:
        target.refuse_existing([name for name, _ in files.values()] + [_OLD_PLOT], force=force)
        written = {
            kind: target.write(name, content, mode=_PUBLIC_MODE, force=force)
            for kind, (name, content) in files.items()
        }
        target.remove(_OLD_PLOT)
    return written


# ---------------------------------------------------------------------- summary.md
def render_summary(report: VerificationReport) -> str:
    """The plain-language Markdown summary, built from :func:`public_report` alone.

    Using only the public view makes it impossible for the summary to disclose
    a per-word score, whatever the report object carries.
    """
    data = public_report(report)
    status = data["status"]
    lines = [
        f"# Watermark check: {VERDICT_TITLES[status]}",
        "",
        _VERDICT_LINES[status],
        "",
        "| | |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in _summary_rows(data)),
        "",
    ]
    if status == "inconclusive":
        lines += _why_no_verdict(data)
    lines += _what_was_tested(data) + _paper_metrics(data)
    lines += [
        "## Files",
        "",
        "- `report.json`: the machine-readable report (the same public content).",
        "",
    ]
    return "\n".join(lines)


def _summary_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    level = data["level"]
    rows = [
        ("Verdict", f"**{VERDICT_TITLES[data['status']]}**"),
        ("Key", f"`{data['key_id']}` (a public fingerprint; the key itself is not disclosed)"),
        ("Checked on", f"{data['timestamp']} (UTC)"),
        ("Texts answered", _answered_phrase(data)),
        (
            "Words scored",
            f"{data['n_words_scored']} of {data['n_words']} words, "
            f"{data['n_triggers_scored']} of them secret trigger words",
        ),
        ("p-value", _fmt(data["p_value"])),
    ]
    rounds = data.get("audit_round", 1)
    if rounds > 1:
        rows.append(
            (
                "Audit round",
                f"{rounds}: the p-value is {rounds} times this round's own, so the earlier "
                "rounds of this key count as tries",
            )
        )
    rows += [
        ("Decision rule", f"copied if p-value < {level:g}"),
        (
            "False-positive rate",
            f"at most {level:g}: an innocent service is wrongly called a copy in at "
            f"most {_one_in(level)} checks",
        ),
    ]
    if data.get("suspect_dim") is not None:
        rows.append(("Suspect embedding size", str(data["suspect_dim"])))
    if data.get("alignment", "").startswith("applied"):
        rows.append(("Answers mapped onto the key's coordinates", data["alignment"]))
    return rows


def _answered_phrase(data: dict[str, Any]) -> str:
    """How many texts the suspect answered, never calling unanswered texts 'sent'."""
    asked, failed = data["n_queries"], data["n_failed_queries"]
    if asked == failed:
        return f"none of the {asked} texts the check asked for was answered"
    return f"{asked - failed} of {asked} ({failed} failed)"


def _why_no_verdict(data: dict[str, Any]) -> list[str]:
    lines = [
        "## Why no verdict",
        "",
        data.get("reason") or "The suspect did not answer enough queries.",
        "",
        data.get("next_step")
        or "Check that the endpoint is up and reachable, then run the check again.",
        "",
    ]
    errors: Sequence[str] = data.get("errors") or ()
    if errors:
        lines += ["Errors seen while querying the suspect (as the suspect sent them):", ""]
        lines += [_code_item(error) for error in errors[:_ERRORS_SHOWN]]
        lines.append("")
    return lines


def _what_was_tested(data: dict[str, Any]) -> list[str]:
    target = (
        "the secret target embedding stored in the key"
        if data["target_mode"] == "key"
        else "the suspect's own embedding of the key's target text (that text was therefore "
        "sent to the suspect)"
    )
    return [
        "## What was tested",
        "",
        "The key holds a set of secret *trigger words* and a secret *target*. A service "
        "that was trained on this provider's watermarked embeddings places the trigger "
        "words unusually close to the target. The check asked the suspect to embed "
        f"{data['n_queries']} short texts: texts standing for each of the {data['n_words']} "
        "words of the key's word-frequency band (the triggers hidden among equally common "
        "words), shuffled so the suspect could not tell which ones matter. For each word we "
        f"measured how close the suspect's answers are to {target} (cosine similarity, "
        "higher is closer).",
        "",
        "An exact statistical test (a rank test) then asks: if the trigger words were just "
        "a random pick from the band, how likely would they rank this close to the target? "
        "That chance is the p-value. Only a p-value below the decision threshold counts as "
        "copied; the threshold is the false-positive rate the check holds to.",
        "",
        "The per-word scores are not part of this summary: together with the suspect's own "
        "logs they would reveal which words are the triggers. The provider keeps them "
        "privately and can show them, with the key, to an arbiter.",
        "",
    ]


def _paper_metrics(data: dict[str, Any]) -> list[str]:
    return [
        "## Paper metrics (for comparability only)",
        "",
        "These are the figures the ESpeW paper reports, computed on the same answers so that "
        "results can be compared with it. They do **not** decide the verdict.",
        "",
        "| Metric | Value |",
        "|---|---|",
        f"| KS test p-value | {_fmt(data.get('ks_p_value'))} |",
        f"| delta cos | {_fmt(_percent(data.get('delta_cos')), '.2f')}% |",
        f"| delta l2 | {_fmt(_percent(data.get('delta_l2')), '.2f')}% |",
        "",
    ]


def _one_in(level: float) -> str:
    if level <= 0 or not math.isfinite(level):
        return "never"
    return f"1 in {round(1 / level):,}"


def _fmt(value: float | None, spec: str = ".3g") -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, spec)


def _code_item(text: str) -> str:
    """A list item showing ``text`` as code, so that Markdown in it is never rendered."""
    return "- `" + text.replace("`", "'") + "`"


def _percent(value: float | None) -> float | None:
    return None if value is None else 100 * value
