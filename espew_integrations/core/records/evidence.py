"""The public evidence on disk: ``report.json`` and ``summary.md``, and a trace's ``trace.json``.

What the files hold is the audit's (:mod:`..audit.evidence_files`: the public
form, nothing that tells the suspect's owner which words are the triggers); this
module only writes it, through :class:`~.safe_dir.SafeDirectory`: the directory
is created if needed and must not be a link, a link planted in it is replaced,
never followed, and existing files are kept unless ``force=True``.

``report.save(directory)`` calls :func:`save_evidence`: the audit writes no file,
so the report's ``save`` reaches this writer through
:func:`~..audit.report.install_evidence_writer`, which ``espew_integrations.core``
calls with it when it loads.

>>> paths = save_evidence(report, "evidence/")   # doctest: +SKIP
>>> sorted(paths)
['json', 'summary']
"""

from __future__ import annotations

import os
from pathlib import Path

from ..audit.evidence_files import EVIDENCE_FILES, ReportLike, evidence_contents
from ..audit.report import VerificationReport, install_evidence_writer
from .safe_dir import SafeDirectory

__all__ = ["TRACE_FILE", "evidence_paths", "save_evidence", "save_trace_evidence"]

#: The shareable trace report's file name (next to the shared layer's report.json).
TRACE_FILE = "trace.json"
# The public per-word plot earlier versions wrote next to report.json. It disclosed
# the scores, so it is no longer written, and a copy left from an earlier report is
# removed (with force) so the bundle never mixes two verifications.
_OLD_PLOT = "scores.png"
_PUBLIC_MODE = 0o644


def evidence_paths(directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Every path :func:`save_evidence` writes or (with ``force``) replaces in ``directory``.

    ``json`` and ``summary`` are written; ``old_plot`` is the public per-word
    plot of earlier versions, which is only ever removed. A caller that checks
    these paths before an audit (as ``espew verify --report-dir`` does) knows
    that saving afterwards will not fail on an existing file.

    >>> sorted(evidence_paths("evidence/"))
    ['json', 'old_plot', 'summary']
    """
    directory = Path(directory)
    paths = {kind: directory / name for kind, name in EVIDENCE_FILES.items()}
    paths["old_plot"] = directory / _OLD_PLOT
    return paths


def save_evidence(
    report: ReportLike,
    directory: str | os.PathLike[str],
    *,
    force: bool = False,
    plot: bool | None = None,
) -> dict[str, Path]:
    """Write the public ``report.json`` and ``summary.md`` into ``directory`` (created if needed).

    Nothing in them lets the suspect's owner tell which probed words are the
    triggers (:mod:`..audit.evidence_files`). Existing evidence files are replaced
    only with ``force=True``; otherwise :class:`FileExistsError` names them and
    nothing is written. With ``force``, a ``scores.png`` left by an earlier
    version is removed. ``plot`` is accepted for compatibility and ignored: the
    per-word plot is private now. Returns the written paths by kind.
    """
    del plot  # the plot disclosed per-word scores; only the private bundle draws it
    files = evidence_contents(report)
    with SafeDirectory(directory) as target:
        target.refuse_existing([name for name, _ in files.values()] + [_OLD_PLOT], force=force)
        written = {
            kind: target.write(name, content, mode=_PUBLIC_MODE, force=force)
            for kind, (name, content) in files.items()
        }
        target.remove(_OLD_PLOT)
    return written


def save_trace_evidence(
    shared: VerificationReport,
    trace_json: str,
    directory: str | os.PathLike[str],
    *,
    force: bool = False,
) -> Path:
    """Write a trace's ``trace.json`` (``trace_json``, its public form) next to the shared
    layer's ``report.json`` and ``summary.md`` (:func:`save_evidence`); returns its path.

    Existing files are kept unless ``force=True``, and nothing is written if any of
    them is in the way.

    >>> save_trace_evidence(report.shared, report.to_json(), "evidence/")  # doctest: +SKIP
    PosixPath('evidence/trace.json')
    """
    with SafeDirectory(directory) as folder:
        folder.refuse_existing([TRACE_FILE, *EVIDENCE_FILES.values()], force=force)
        save_evidence(shared, directory, force=force)
        return folder.write(TRACE_FILE, trace_json.encode(), mode=_PUBLIC_MODE, force=force)


install_evidence_writer(save_evidence)
