"""Evidence files: a public bundle for the other side, a private one for the provider.

A verdict is only useful if a non-expert (a manager, a lawyer, the other
side) can see what was tested and how sure it is. But whatever is handed to
the suspect's owner must not help them find the triggers: with the per-word
scores, a suspect that logged its own answers can match its own cosines to
them and read the triggers off (20 of 20 were recovered that way), and with
any figure that moves with which band words were scored (the number of
triggers scored, exact p-values), a suspect that withheld one word's answers
learns whether that word is a trigger. Hence two bundles:

:func:`~espew_integrations.core.records.evidence.save_evidence` writes the **public**
files, safe to share (``report.json`` and a plain-language ``summary.md``); it lives in
the core's records room (:mod:`espew_integrations.core.records.evidence`), which
``report.save()`` writes through; import it from there.

:func:`save_private_evidence` writes the **private** files, for the
provider's records or an arbiter who also gets the key, never for the other
side (their names start with ``PRIVATE-``):

- ``PRIVATE-word-scores.json``: every figure exactly (the counts of words and
  triggers scored, the exact p-values, the paper's metrics) and every per-word
  score;
- ``PRIVATE-scores.png``: the trigger words' scores against the other band
  words' (needs matplotlib; skipped without it);
- ``PRIVATE-transcript.jsonl``, written by the audit itself when asked
  (``verify(..., transcript=DIR)``, ``espew verify --private-report-dir``): every
  text sent and every answer received, SHA-256 chained
  (:mod:`espew_integrations.core.records.transcript`); :func:`check_evidence` replays it
  offline and re-derives the verdict (``espew evidence check``), re-asks the
  suspect a keyed random subset of its texts (``requery=``), and verifies the
  RFC 3161 timestamp taken over it before the verdict (``tsa_ca=``,
  :mod:`espew_integrations.timestamp`).

Both write through :class:`~espew_integrations.core.records.safe_dir.SafeDirectory`:
existing files are never replaced unless ``force=True``, the directory must
not be a symbolic link, and a link planted in it is replaced, never followed.

>>> paths = save_evidence(report, "evidence/")   # doctest: +SKIP
>>> sorted(paths)
['json', 'summary']
>>> save_private_evidence(report, "/secure/audits/2026-01")   # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ._optional import require
from .core.audit.evidence_files import (
    PRIVATE_REPORT_KEYS,
    VERDICT_TITLES,
)
from .core.audit.report import VerificationReport
from .core.evidence_check import EvidenceCheck, check_transcript
from .core.ground.untrusted import printable
from .core.records.requery import DEFAULT_REQUERY_SIZE, DEFAULT_REQUERY_TOLERANCE, RequerySize
from .core.records.safe_dir import SafeDirectory

__all__ = [
    "PRIVATE_FILES",
    "check_evidence",
    "matplotlib_available",
    "private_evidence_paths",
    "render_private_plot",
    "save_private_evidence",
]

#: The private files: per-word detail that lets a suspect find the triggers.
PRIVATE_FILES = {"scores": "PRIVATE-word-scores.json", "plot": "PRIVATE-scores.png"}
_PRIVATE_MODE = 0o600


def check_evidence(
    private_dir: str | os.PathLike[str],
    key: Any,
    *,
    public: str | os.PathLike[str] | None = None,
    requery: Any = None,
    requery_name: str = "",
    requery_size: RequerySize = DEFAULT_REQUERY_SIZE,
    requery_seed: int | None = None,
    requery_tolerance: float = DEFAULT_REQUERY_TOLERANCE,
    tsa_ca: str | os.PathLike[str] | None = None,
    require_timestamp: bool = False,
    pool_log: str | os.PathLike[str] | None = None,
    accept_auditor_pool: bool = False,
) -> EvidenceCheck:
    """Check an audit's transcript, as an arbiter who distrusts the auditor would.

    :func:`espew_integrations.core.evidence_check.check_transcript` (chain, digests,
    key, replay, where the texts came from: ``pool_log``, ``accept_auditor_pool``),
    plus: ``requery`` is any suspect ``verify`` takes (a callable, an
    :class:`~espew_integrations.OpenAIEndpoint`, a LangChain or LlamaIndex
    embedder...), re-asked ``requery_size`` texts ("auto": enough that a forgery of
    1% of the answers escapes with probability at most 0.1%; None: every one) and
    judged within its own repeat noise; a timestamp is verified, its signature
    against ``tsa_ca`` (the TSA's CA certificate, with the ``openssl`` command).
    ``str(result)`` lists what was and was not proved.

    >>> check_evidence("private/", key, requery=OpenAIEndpoint(url, "m"),   # doctest: +SKIP
    ...                tsa_ca="tsa-ca.pem").holds
    True
    """
    from .suspects import as_suspect
    from .timestamp import verify_timestamp

    def timestamp_check(anchor: dict[str, Any], commitment: str) -> Any:
        return verify_timestamp(anchor, commitment, tsa_ca)

    asked = None if requery is None else as_suspect(requery)
    if asked is not None and not requery_name:
        from .core.audit.subject import describe_suspect

        requery_name = describe_suspect(requery)
    return check_transcript(
        private_dir,
        key,
        public=public,
        requery_suspect=asked,
        requery_name=requery_name,
        requery_size=requery_size,
        requery_seed=requery_seed,
        requery_tolerance=requery_tolerance,
        timestamp_check=timestamp_check,
        require_timestamp=require_timestamp,
        pool_log=pool_log,
        accept_auditor_pool=accept_auditor_pool,
    )


def matplotlib_available() -> bool:
    """True when matplotlib can be imported (the private plot is optional)."""
    return importlib.util.find_spec("matplotlib") is not None


def private_evidence_paths(directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Where :func:`save_private_evidence` writes each file in ``directory``."""
    directory = Path(directory)
    return {kind: directory / name for kind, name in PRIVATE_FILES.items()}


def save_private_evidence(
    report: VerificationReport,
    directory: str | os.PathLike[str],
    *,
    force: bool = False,
    plot: bool | None = None,
) -> dict[str, Path]:
    """Write the per-word detail into ``PRIVATE-*`` files (mode 0600) in ``directory``.

    For the provider's records, or an arbiter who is also shown the key:
    whoever reads these files and has logged the suspect's answers can find
    the triggers, so never hand them to the other side, and keep them out of
    the directory you share. ``PRIVATE-word-scores.json`` is
    :meth:`~VerificationReport.to_private_dict`: every figure exactly (the
    public files floor them), ``trigger_scores`` and ``benign_scores``
    included, suspect-supplied text made printable; ``PRIVATE-scores.png`` is
    drawn when matplotlib is installed (``plot=None``) or when ``plot=True``.
    Existing files are replaced only with ``force=True``. Returns the written
    paths by kind.
    """
    data = report.to_private_dict()
    data["reason"] = printable(data["reason"] or "", limit=500)
    data["errors"] = [printable(error) for error in data["errors"] or ()]
    for name in PRIVATE_REPORT_KEYS:
        data[name] = [float(value) for value in data[name]]
    files = {
        "scores": (PRIVATE_FILES["scores"], (json.dumps(data, indent=2) + "\n").encode("utf-8"))
    }
    if matplotlib_available() if plot is None else plot:
        files["plot"] = (PRIVATE_FILES["plot"], render_private_plot(report))
    with SafeDirectory(directory) as target:
        target.refuse_existing([name for name, _ in files.values()], force=force)
        return {
            kind: target.write(name, content, mode=_PRIVATE_MODE, force=force)
            for kind, (name, content) in files.items()
        }


# ---------------------------------------------------------------------- private plot
def render_private_plot(report: VerificationReport) -> bytes:
    """PNG histogram of the trigger words' scores against the other band words'.

    PRIVATE: the histogram lets a reader who logged the suspect's answers read
    the trigger scores back, so it is written only by :func:`save_private_evidence`.
    """
    matplotlib = require("matplotlib", "plots", "the private evidence's score histogram")
    matplotlib.use("Agg", force=False)  # no display needed; a no-op if already Agg
    import matplotlib.pyplot as plt

    triggers = np.asarray(report.trigger_scores, dtype=float)
    benign = np.asarray(report.benign_scores, dtype=float)
    figure, axis = plt.subplots(figsize=(7, 4), dpi=110)
    try:
        if triggers.size + benign.size == 0:
            _draw_nothing_scored(axis, report)
        else:
            _draw_histograms(axis, triggers, benign)
        axis.set_title(
            f"PRIVATE  {VERDICT_TITLES[report.status]}  (p = {_fmt(report.p_value)}, "
            f"level {report.level:g}, key {report.key_id})",
            fontsize=10,
        )
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
    finally:
        plt.close(figure)
    return buffer.getvalue()


def _draw_nothing_scored(axis: Any, report: VerificationReport) -> None:
    reason = printable(report.reason or "no answers", limit=120)
    axis.text(
        0.5,
        0.5,
        f"no word could be scored\n({reason})",
        ha="center",
        va="center",
        wrap=True,
        transform=axis.transAxes,
    )
    axis.set_axis_off()


def _draw_histograms(axis: Any, triggers: np.ndarray, benign: np.ndarray) -> None:
    both = np.concatenate([triggers, benign])
    bins = np.linspace(both.min(), both.max() + 1e-9, 31)
    axis.hist(
        benign, bins=bins, alpha=0.6, color="tab:blue", label=f"other band words (n={benign.size})"
    )
    axis.hist(
        triggers, bins=bins, alpha=0.7, color="tab:red", label=f"trigger words (n={triggers.size})"
    )
    axis.set_xlabel("score: mean cosine of the word's probes to the target")
    axis.set_ylabel("number of words")
    axis.legend(loc="upper right")


def _fmt(value: float) -> str:
    return "n/a" if not math.isfinite(value) else format(value, ".3g")
