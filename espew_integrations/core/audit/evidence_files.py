"""The public evidence bundle: ``report.json`` and ``summary.md``, safe to hand to the other side.

A verdict is only useful if a non-expert (a manager, a lawyer, the other
side) can see what was tested and how sure it is, but nothing handed to the
suspect's owner may help them find the triggers. Two leaks are closed here:

* **per-word scores**: a suspect that logged its own answers can match them
  to its queries and read the triggers off;
* **the probing oracle**: a suspect can withhold the answers to every audit
  text holding a band word of its choice (answer NaN) and then read the
  report it is handed. Any figure that depends on *which* band words were
  scored tells it whether that word is a trigger: the count of triggers
  scored, the smallest reachable p-value, the exact p-values (their tail is
  set by that count), the paper's trigger-versus-other metrics, the slope
  fitted over the scored words, the alignment's fit over the answered texts,
  and the per-statistic p-values (one can sit above the floor while the
  verdict's is below it).

So the public form (:func:`public_fields`, what ``report.to_dict()`` gives)
keeps only what the suspect's own actions determine (texts asked, texts it
failed) and the verdict, and publishes the verdict's p-value coarsened: at or below
:data:`PUBLIC_P_FLOOR` it is the floor itself with ``<key>_below_floor``
set to true (rendered "p < 1e-20"); above it, rounded to
:data:`PUBLIC_P_DIGITS` significant digits, never across the level. Both
files are built from :func:`public_report` alone. The private bundle (every
figure exact, the per-word scores, a plot) is
:func:`espew_integrations.evidence.save_private_evidence`, outside the core
because its plot needs matplotlib.

This module builds what the files hold and writes nothing: the records room
writes them (:func:`espew_integrations.core.records.evidence.save_evidence`, which
``report.save(directory)`` calls). Text that came from the suspect
(``report.errors``, ``report.reason``) goes through
:func:`~espew_integrations.core.ground.untrusted.printable` first.

>>> sorted(evidence_contents(report))   # doctest: +SKIP
['json', 'summary']
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Protocol

from ..ground.untrusted import counted, printable

__all__ = [
    "EVIDENCE_FILES",
    "PRIVATE_REPORT_KEYS",
    "PUBLIC_P_DIGITS",
    "PUBLIC_P_FLOOR",
    "PUBLIC_P_KEYS",
    "PUBLIC_REPORT_KEYS",
    "VERDICT_TITLES",
    "WITHHELD_REPORT_KEYS",
    "ReportLike",
    "evidence_contents",
    "format_public_p",
    "public_fields",
    "public_p_value",
    "public_report",
    "render_summary",
]


class ReportLike(Protocol):
    """What this module needs of a report: its full dict.

    :class:`~.report.VerificationReport` is one. The files are built from that
    dict alone, so this module never imports :mod:`.report` (which imports this
    one for the public form), not even for its type hints.
    """

    def to_dict(self, *, public: bool = True) -> dict[str, Any]: ...


#: The public files, safe to hand to the suspect's owner.
EVIDENCE_FILES = {"json": "report.json", "summary": "summary.md"}
#: The per-word report fields: they go only into the private bundle's files.
PRIVATE_REPORT_KEYS = ("trigger_scores", "benign_scores")
#: Every p-value is published no lower than this, the same for every key and audit:
#: below it the exact tail is set by how many triggers were scored, which a suspect
#: that withheld a word's answers could read back. Far below any sensible level.
PUBLIC_P_FLOOR = 1e-20
#: Significant digits of a published p-value above the floor: enough to read the
#: evidence, too few to carry one scored word's worth of the exact figure.
PUBLIC_P_DIGITS = 2
#: The report's published p-value, coarsened, with its ``<key>_below_floor`` flag. The
#: per-statistic p-values (raw, adjusted, directed) are withheld: one of them can sit
#: above the floor while the verdict sits below it, and compared with an audit the
#: suspect answered in full, it would move one way when a trigger is withheld and the
#: other way when another word is.
PUBLIC_P_KEYS = ("p_value",)
#: Report fields published as they are: the verdict, the audit's settings, the key's
#: public fingerprint, and counts the suspect's own actions determine (texts asked,
#: texts it failed, its errors), none of which moves with which band words were scored.
#: ``decided_by`` is published only above the floor, ``alignment`` coarsened.
PUBLIC_REPORT_KEYS = (
    "copied",
    "status",
    "level",
    "decision_rule",
    "key_id",
    "target_mode",
    "n_queries",
    "n_failed_queries",
    "n_words",
    "suspect_dim",
    "templates",
    "seed",
    "timestamp",
    "reason",
    "errors",
    "probes",
    "statistic",
    "decided_by",
    "next_step",
    "audit_round",
    "alignment",
    "suspect",
    "suspect_label",
    "key_commitment",
    "transcript_digest",
    "n_statistics",
    "reference_names",
    "references_sha256",
)
#: Report fields kept out of the public form (private forms keep them exactly): each
#: moves with which band words were scored, so it would tell a suspect that withheld
#: a word's answers whether that word is a trigger. A field in none of these lists is
#: withheld too (fail closed) until someone decides where it belongs.
WITHHELD_REPORT_KEYS = (
    *PRIVATE_REPORT_KEYS,
    "n_words_scored",
    "n_triggers_scored",
    "min_possible_p_value",
    "p_value_raw",
    "p_value_adjusted",
    "p_value_directed",
    "reference_slope",
    "ks_p_value",
    "delta_cos",
    "delta_l2",
)
#: The verdict as one word or two, for titles.
VERDICT_TITLES = {"copied": "COPIED", "not_copied": "NOT COPIED", "inconclusive": "INCONCLUSIVE"}
_ERRORS_SHOWN = 5

_INCONCLUSIVE_LINE = (
    "INCONCLUSIVE: no verdict could be reached, so this result is not evidence either way."
)
_NUMBERS = {1: "one", 2: "two", 3: "three"}


def public_p_value(value: float, level: float | None = None) -> tuple[float, bool]:
    """A p-value as the public forms give it: ``(published value, below the floor)``.

    At or below :data:`PUBLIC_P_FLOOR` the value is the floor and the flag is
    True. Above it, the value is rounded to :data:`PUBLIC_P_DIGITS`
    significant digits; with ``level`` given (the verdict's own p-value) the
    rounding never crosses the level, so "copied iff p < level" reads true of
    the published figure too. NaN (no test run) stays NaN.
    """
    value = float(value)
    if math.isnan(value):
        return value, False
    if value <= PUBLIC_P_FLOOR:
        return PUBLIC_P_FLOOR, True
    rounded = float(f"{value:.{PUBLIC_P_DIGITS - 1}e}")
    if level is not None and (value < level) != (rounded < level):
        # Rounding crossed the level: step to the grid point on the verdict's side.
        if value < level:
            step = 10.0 ** (math.floor(math.log10(value)) - (PUBLIC_P_DIGITS - 1))
            rounded = float(f"{math.floor(value / step) * step:.{PUBLIC_P_DIGITS - 1}e}")
        else:
            rounded = float(level)
    return max(rounded, PUBLIC_P_FLOOR), False


def format_public_p(value: float, below_floor: bool) -> str:
    """A published p-value as text: "p < 1e-20" at the floor, else "p = 0.0031"; "n/a" for NaN."""
    if below_floor:
        return f"p < {PUBLIC_P_FLOOR:g}"
    return "n/a" if not math.isfinite(value) else f"p = {value:.{PUBLIC_P_DIGITS}g}"


def public_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The public form of a report's full dict (``report.to_dict(public=False)``).

    Keeps :data:`PUBLIC_REPORT_KEYS`, coarsens the :data:`PUBLIC_P_KEYS` with
    :func:`public_p_value` (adding each ``<key>_below_floor`` flag and
    ``public_p_floor``), and drops everything else: the figures that move
    with which band words were scored (:data:`WITHHELD_REPORT_KEYS`) and any
    field not yet classified. ``decided_by`` is published only when the
    verdict's p-value is above the floor (below it, which statistic reached
    the smallest exact tail is again a figure of the scored words);
    ``alignment`` only says whether the answers were mapped, and by what kind
    of map, not how well it fitted over the answered texts.
    """
    out = {name: data[name] for name in PUBLIC_REPORT_KEYS if name in data}
    for name in PUBLIC_P_KEYS:
        if name in data:
            level = data.get("level") if name == "p_value" else None
            out[name], out[f"{name}_below_floor"] = public_p_value(data[name], level)
    out["public_p_floor"] = PUBLIC_P_FLOOR
    if out.get("p_value_below_floor"):
        out["decided_by"] = ""
    if "alignment" in out:
        out["alignment"] = public_alignment(out["alignment"] or "")
    return out


#: The kinds of map :mod:`..stats.align` fits, as its description names them.
_ALIGNMENT_KINDS = ("signed permutation", "orthonormal map")


def public_alignment(description: str) -> str:
    """Whether the answers were mapped, and by what kind of map: the fit's figures
    (mean cosines over the answered texts) are left out, as they move with which
    texts were answered."""
    if not description:
        return ""
    verb = "applied" if description.startswith("applied") else "not applied"
    kind = next((k for k in _ALIGNMENT_KINDS if k in description), "")
    return f"{verb}: through a {kind}" if kind and verb == "applied" else verb


def public_report(report: ReportLike) -> dict[str, Any]:
    """What may be shown to the other side: ``report.to_dict()`` (:func:`public_fields`).

    Suspect-supplied text (``reason``, ``errors``) is made printable. Building
    it from the full dict here keeps the public files safe whatever
    ``to_dict()`` itself carries.
    """
    data = public_fields(report.to_dict(public=False))
    if "reason" in data:
        data["reason"] = printable(data["reason"] or "", limit=500)
    if "errors" in data:
        data["errors"] = [printable(error) for error in data["errors"] or ()]
    return data


def evidence_contents(report: ReportLike) -> dict[str, tuple[str, bytes]]:
    """The public files' names and bytes by kind (``json``, ``summary``); nothing is written.

    Both are built from :func:`public_report` alone; the records room writes them
    (:func:`espew_integrations.core.records.evidence.save_evidence`).
    """
    data = public_report(report)
    return {
        "json": (EVIDENCE_FILES["json"], (json.dumps(data, indent=2) + "\n").encode("utf-8")),
        "summary": (EVIDENCE_FILES["summary"], render_summary(report).encode("utf-8")),
    }


# ---------------------------------------------------------------------- summary.md
def render_summary(report: ReportLike) -> str:
    """The plain-language Markdown summary, built from :func:`public_report` alone.

    Using only the public view makes it impossible for the summary to disclose
    a per-word score, whatever the report object carries.
    """
    data = public_report(report)
    status = data["status"]
    lines = [
        f"# Watermark check: {VERDICT_TITLES[status]}",
        "",
        verdict_sentence(data),
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


def verdict_sentence(data: dict[str, Any]) -> str:
    """The verdict in plain words, from the public dict: what the p-value means.

    A p-value is the chance that an innocent service shows evidence at least this
    strong, so that is what the sentence says, with the published figure ("below
    1e-20" at the floor), never a softer "very likely"."""
    status = data["status"]
    if status == "inconclusive":
        return _INCONCLUSIVE_LINE
    p_value, below = data["p_value"], bool(data.get("p_value_below_floor"))
    chance = f"below {PUBLIC_P_FLOOR:g}" if below else f"of {p_value:.{PUBLIC_P_DIGITS}g}"
    if status == "copied":
        return (
            "COPIED: the suspect's answers carry our watermark; an innocent service would "
            f"show this evidence with probability {chance}."
        )
    return (
        "NOT COPIED: the suspect's answers show no evidence of our watermark at the level "
        f"{data['level']:g}; an innocent service shows evidence this strong with probability "
        f"{chance}."
    )


def combination_sentence(data: dict[str, Any]) -> str:
    """How the one published p-value was combined, in one sentence (public dict only).

    The number of tests depends on the key and the mode alone (``n_statistics``),
    never on which words were scored, so it may be published."""
    n, rounds = int(data.get("n_statistics") or 0), int(data.get("audit_round") or 1)
    round_part = (
        f"by the audit round ({rounds}: the earlier rounds of this key count as tries)"
        if rounds > 1
        else "by the audit round (1: this key's first audit)"
    )
    if n > 1:
        return (
            f"The p-value is the smallest of {_NUMBERS.get(n, n)} exact rank tests (one per "
            f"kind of score), multiplied by {n} (Bonferroni) and {round_part}."
        )
    test = f"the {data.get('statistic')} scores'" if data.get("statistic") else "one"
    return f"The p-value is {test} exact rank test, multiplied {round_part}."


def _code(text: str) -> str:
    """``text`` as inline code, so that Markdown in a name or a spec is never rendered."""
    return "`" + str(text).replace("`", "'").replace("|", "/") + "`"


def _suspect_text(data: dict[str, Any]) -> str:
    spec, label = data.get("suspect") or "", data.get("suspect_label") or ""
    if not spec:
        return "not named (audited through the Python API without a name)"
    return f"{_code(spec)} ({_code(label)})" if label else _code(spec)


def _summary_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    level = data["level"]
    rounds = data.get("audit_round", 1)
    rows = [
        ("Verdict", f"**{VERDICT_TITLES[data['status']]}**"),
        ("Suspect", _suspect_text(data)),
        ("Checked on", f"{data['timestamp']} (UTC)"),
        ("Key", f"`{data['key_id']}` (a public fingerprint; the key itself is not disclosed)"),
    ]
    if data.get("key_commitment"):
        rows.append(("Key commitment", f"{_code(data['key_commitment'])} (published at keygen)"))
    rows += [
        ("Audit round", str(rounds)),
        ("p-value", f"{_public_p_text(data, 'p_value')}. {combination_sentence(data)}"),
        ("Texts answered", _answered_phrase(data)),
        (
            "Words probed",
            f"the {data['n_words']} words of the key's frequency band, the secret trigger "
            "words hidden among them",
        ),
    ]
    if data.get("transcript_digest"):
        rows.append(
            (
                "Audit transcript",
                f"{_code(data['transcript_digest'])}: the digest of the provider's private "
                "record of every text sent and every answer received, which an arbiter can "
                "check and replay",
            )
        )
    rows += [
        ("Level", f"copied if p-value < {level:g}"),
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
        for error, times in counted(errors)[:_ERRORS_SHOWN]:  # a repeat once, counted
            lines.append(_code_item(error) + (f" (x{times})" if times > 1 else ""))
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
        "logs they would reveal which words are the triggers. Nor is any figure that "
        "depends on which words could be scored (how many triggers were scored, the exact "
        "p-value below the public floor): a suspect that withheld its answers for one word "
        "could read from it whether that word is a trigger. So every p-value is published "
        f'no lower than {PUBLIC_P_FLOOR:g} (shown as "p < {PUBLIC_P_FLOOR:g}") and otherwise '
        f"to {PUBLIC_P_DIGITS} significant digits. The provider keeps every exact figure "
        "privately and can show it, with the key, to an arbiter.",
        "",
    ]


def _paper_metrics(data: dict[str, Any]) -> list[str]:
    del data  # the metrics compare trigger probes with the others: private forms only
    return [
        "## Paper metrics (for comparability only)",
        "",
        "The ESpeW paper's figures (KS test p-value, delta cos, delta l2) compare the "
        "trigger words' texts with the others', so they move with which trigger words the "
        "suspect answered. They do **not** decide the verdict, and they are kept in the "
        "provider's private records only.",
        "",
    ]


def _public_p_text(data: dict[str, Any], name: str) -> str:
    """A published p-value from the public dict, as text ("p < 1e-20" at the floor)."""
    return format_public_p(data.get(name, math.nan), bool(data.get(f"{name}_below_floor")))


def _one_in(level: float) -> str:
    if level <= 0 or not math.isfinite(level):
        return "never"
    return f"1 in {round(1 / level):,}"


def _code_item(text: str) -> str:
    """A list item showing ``text`` as code, so that Markdown in it is never rendered."""
    return "- `" + text.replace("`", "'") + "`"
