"""Evidence files: a public bundle for the other side, a private one for the provider.

A verdict is only useful if a non-expert (a manager, a lawyer, the other
side) can see what was tested and how sure it is. But whatever is handed to
the suspect's owner must not help them find the triggers: with the per-word
scores, a suspect that logged its own answers can match its own cosines to
them and read the triggers off (20 of 20 were recovered that way). Hence two
bundles:

:func:`save_evidence` writes the **public** files, safe to share:

- ``report.json``: the public view of the report (``report.to_dict()``
  without any per-word score);
- ``summary.md``: what was tested, how many queries, the verdict and the
  false-positive rate it holds to, in plain words, derived from that view only.

:func:`save_private_evidence` writes the **private** files, for the
provider's records or an arbiter who also gets the key, never for the other
side (their names start with ``PRIVATE-``):

- ``PRIVATE-word-scores.json``: the public view plus every per-word score;
- ``PRIVATE-scores.png``: the trigger words' scores against the other band
  words' (needs matplotlib; skipped without it).

Both write safely into a directory that may hold files someone else planted:
existing files are never replaced unless ``force=True`` (:class:`FileExistsError`
otherwise, before anything is written); the directory itself must not be a
symbolic link, and a link planted in it is replaced, never followed (files are
created with ``O_EXCL | O_NOFOLLOW`` relative to the opened directory, written
to a temporary name and renamed or hard-linked into place, so a reader never
sees half a file). Text that came from the suspect (``report.errors``,
``report.reason``) goes through
:func:`~espew_integrations.core.untrusted.printable` first.

>>> paths = save_evidence(report, "evidence/")   # doctest: +SKIP
>>> sorted(paths)
['json', 'summary']
>>> save_private_evidence(report, "/secure/audits/2026-01")   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import io
import json
import math
import os
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .core.untrusted import printable

__all__ = [
    "EVIDENCE_FILES",
    "PRIVATE_FILES",
    "PRIVATE_REPORT_KEYS",
    "evidence_paths",
    "matplotlib_available",
    "private_evidence_paths",
    "public_report",
    "render_private_plot",
    "render_summary",
    "save_evidence",
    "save_private_evidence",
]

#: The public files, safe to hand to the suspect's owner.
EVIDENCE_FILES = {"json": "report.json", "summary": "summary.md"}
#: The private files: per-word detail that lets a suspect find the triggers.
PRIVATE_FILES = {"scores": "PRIVATE-word-scores.json", "plot": "PRIVATE-scores.png"}
#: Report fields that never go into a public file.
PRIVATE_REPORT_KEYS = ("trigger_scores", "benign_scores")
# The public per-word plot earlier versions wrote next to report.json. It disclosed
# the scores, so it is no longer written, and a copy left from an earlier report is
# removed (with force) so the bundle never mixes two verifications.
_OLD_PLOT = "scores.png"

_PUBLIC_MODE = 0o644
_PRIVATE_MODE = 0o600
_ERRORS_SHOWN = 5

_VERDICT_LINES = {
    "copied": "The suspect service carries this key's watermark: it was very likely "
    "trained on (copied from) embeddings produced with this key.",
    "not_copied": "No evidence that the suspect service learned this key's watermark.",
    "inconclusive": "No verdict could be reached, so this result is not evidence either way.",
}
_TITLES = {"copied": "COPIED", "not_copied": "NOT COPIED", "inconclusive": "INCONCLUSIVE"}


def matplotlib_available() -> bool:
    """True when matplotlib can be imported (the private plot is optional)."""
    return importlib.util.find_spec("matplotlib") is not None


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


def private_evidence_paths(directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Where :func:`save_private_evidence` writes each file in ``directory``."""
    directory = Path(directory)
    return {kind: directory / name for kind, name in PRIVATE_FILES.items()}


# ---------------------------------------------------------------------- public view
def public_report(report: Any) -> dict[str, Any]:
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
    report: Any,
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
    per-word plot is private now (:func:`save_private_evidence`).
    Returns the written paths by kind.
    """
    del plot  # the plot disclosed per-word scores; it is written only by save_private_evidence
    data = public_report(report)
    files = {
        "json": (EVIDENCE_FILES["json"], (json.dumps(data, indent=2) + "\n").encode("utf-8")),
        "summary": (EVIDENCE_FILES["summary"], render_summary(report).encode("utf-8")),
    }
    with _Directory(directory) as target:
        target.refuse_existing([name for name, _ in files.values()] + [_OLD_PLOT], force=force)
        written = {
            kind: target.write(name, content, mode=_PUBLIC_MODE, force=force)
            for kind, (name, content) in files.items()
        }
        target.remove(_OLD_PLOT)
    return written


def save_private_evidence(
    report: Any,
    directory: str | os.PathLike[str],
    *,
    force: bool = False,
    plot: bool | None = None,
) -> dict[str, Path]:
    """Write the per-word detail into ``PRIVATE-*`` files (mode 0600) in ``directory``.

    For the provider's records, or an arbiter who is also shown the key:
    whoever reads these files and has logged the suspect's answers can find
    the triggers, so never hand them to the other side, and keep them out of
    the directory you share. ``PRIVATE-word-scores.json`` is the public view
    plus ``trigger_scores`` and ``benign_scores``; ``PRIVATE-scores.png`` is
    drawn when matplotlib is installed (``plot=None``) or when ``plot=True``.
    Existing files are replaced only with ``force=True``. Returns the written
    paths by kind.
    """
    data = public_report(report)
    for name in PRIVATE_REPORT_KEYS:
        data[name] = [float(value) for value in getattr(report, name)]
    files = {
        "scores": (PRIVATE_FILES["scores"], (json.dumps(data, indent=2) + "\n").encode("utf-8"))
    }
    if matplotlib_available() if plot is None else plot:
        files["plot"] = (PRIVATE_FILES["plot"], render_private_plot(report))
    with _Directory(directory) as target:
        target.refuse_existing([name for name, _ in files.values()], force=force)
        return {
            kind: target.write(name, content, mode=_PRIVATE_MODE, force=force)
            for kind, (name, content) in files.items()
        }


# ---------------------------------------------------------------------- safe writing
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FD = (
    _O_NOFOLLOW != 0
    and _O_DIRECTORY != 0
    and {os.open, os.stat, os.unlink, os.replace, os.link} <= os.supports_dir_fd
)
# Hard links unsupported by the file system: fall back to check-then-rename.
_NO_LINK = {errno.EPERM, errno.EXDEV, errno.EMLINK, getattr(errno, "ENOTSUP", -1)}


class _Directory:
    """An evidence directory, opened once without following a link; files are made inside it.

    Where the platform allows (Linux, macOS), every operation is relative to
    the opened directory's descriptor, so swapping the directory for a link
    after the check changes nothing.
    """

    def __init__(self, directory: str | os.PathLike[str]):
        self.path = Path(directory)
        self.fd: int | None = None

    def __enter__(self) -> _Directory:
        path = self.path
        if path.is_symlink():
            raise NotADirectoryError(
                f"evidence directory {path} is a symbolic link; evidence is never written "
                "through a link (give the real directory)"
            )
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(f"evidence directory {path} exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)
        if _DIR_FD:
            try:
                self.fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link meanwhile
                    raise NotADirectoryError(
                        f"evidence directory {path} is a symbolic link or not a directory; "
                        "evidence is never written through a link"
                    ) from None
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _where(self, name: str) -> tuple[str, dict[str, Any]]:
        if self.fd is not None:
            return name, {"dir_fd": self.fd}
        return str(self.path / name), {}

    def exists(self, name: str) -> bool:
        """True if ``name`` is there, as anything: a dangling link counts too."""
        where, kw = self._where(name)
        try:
            os.stat(where, follow_symlinks=False, **kw)
        except FileNotFoundError:
            return False
        return True

    def refuse_existing(self, names: Iterable[str], *, force: bool) -> None:
        """Without ``force``, raise before writing anything if any of ``names`` exists."""
        if force:
            return
        present = [str(self.path / name) for name in names if self.exists(name)]
        if present:
            raise FileExistsError(
                f"evidence already exists: {', '.join(present)}; it is never overwritten "
                "(pass force=True, or --force, to replace it, or choose another directory)"
            )

    def write(self, name: str, content: bytes, *, mode: int, force: bool) -> Path:
        """Create ``name`` atomically with ``content``; a link there is replaced, not followed."""
        temp = f".{name}.{secrets.token_hex(8)}.tmp"
        temp_where, kw = self._where(temp)
        final_where, _ = self._where(name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
        fd = os.open(temp_where, flags, mode, **kw)
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(content)
                stream.flush()
                os.fsync(stream.fileno())
            self._place(temp_where, final_where, kw, force=force)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_where, **kw)
        return self.path / name

    def _place(self, temp: str, final: str, kw: dict[str, Any], *, force: bool) -> None:
        move = {"src_dir_fd": self.fd, "dst_dir_fd": self.fd} if self.fd is not None else {}
        if force:
            os.replace(temp, final, **move)  # replaces a planted link itself, never its target
            return
        try:
            os.link(temp, final, follow_symlinks=False, **move)  # fails if anything is there
        except FileExistsError:
            raise FileExistsError(
                f"{self.path / final.rsplit('/', 1)[-1]} appeared while writing evidence; "
                "it is never overwritten (pass force=True, or --force, to replace it)"
            ) from None
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            if self.exists(Path(final).name):
                raise FileExistsError(
                    f"{self.path / Path(final).name} already exists; evidence is never "
                    "overwritten (pass force=True, or --force, to replace it)"
                ) from None
            os.replace(temp, final, **move)

    def remove(self, name: str) -> None:
        """Remove ``name`` if present (a link is removed itself, its target untouched)."""
        where, kw = self._where(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(where, **kw)


# ---------------------------------------------------------------------- summary
def _one_in(level: float) -> str:
    if level <= 0 or not math.isfinite(level):
        return "never"
    return f"1 in {round(1 / level):,}"


def _fmt(value: float | None, spec: str = ".3g") -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, spec)


def render_summary(report: Any) -> str:
    """The plain-language Markdown summary, built from :func:`public_report` alone.

    Using only the public view makes it impossible for the summary to disclose
    a per-word score, whatever the report object carries.
    """
    data = public_report(report)
    status = data["status"]
    target = (
        "the secret target embedding stored in the key"
        if data["target_mode"] == "key"
        else "the suspect's own embedding of the key's target text (that text was therefore "
        "sent to the suspect)"
    )
    level = data["level"]
    rows = [
        ("Verdict", f"**{_TITLES[status]}**"),
        ("Key", f"`{data['key_id']}` (a public fingerprint; the key itself is not disclosed)"),
        ("Checked on", f"{data['timestamp']} (UTC)"),
        ("Queries sent", f"{data['n_queries']} ({data['n_failed_queries']} failed)"),
        (
            "Words scored",
            f"{data['n_words_scored']} of {data['n_words']} words, "
            f"{data['n_triggers_scored']} of them secret trigger words",
        ),
        ("p-value", _fmt(data["p_value"])),
        ("Decision rule", f"copied if p-value < {level:g}"),
        (
            "False-positive rate",
            f"at most {level:g}: an innocent service is wrongly called a copy in at "
            f"most {_one_in(level)} checks",
        ),
    ]
    if data.get("suspect_dim") is not None:
        rows.append(("Suspect embedding size", str(data["suspect_dim"])))
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
            data.get("reason") or "The suspect did not answer enough queries.",
            "",
            "Check that the endpoint is up and reachable, then run the check again (a larger "
            "query budget or a slower rate limit may help).",
            "",
        ]
        errors: Sequence[str] = data.get("errors") or ()
        if errors:
            lines += ["Errors seen while querying the suspect (as the suspect sent them):", ""]
            lines += [_code_item(error) for error in errors[:_ERRORS_SHOWN]]
            lines.append("")
    lines += [
        "## What was tested",
        "",
        "The key holds a set of secret *trigger words* and a secret *target*. A service "
        "that was trained on this provider's watermarked embeddings places the trigger "
        "words unusually close to the target. We sent the suspect "
        f"{data['n_queries']} short texts: each of the {data['n_words']} words of the key's "
        "word-frequency band (the triggers hidden among equally common words), shuffled so "
        "the suspect could not tell which ones matter. For each word we measured how close "
        f"the suspect's answer is to {target} (cosine similarity, higher is closer).",
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
        "## Files",
        "",
        "- `report.json`: the machine-readable report (the same public content).",
        "",
    ]
    return "\n".join(lines)


def _code_item(text: str) -> str:
    """A list item showing ``text`` as code, so that Markdown in it is never rendered."""
    return "- `" + text.replace("`", "'") + "`"


def _percent(value: float | None) -> float | None:
    return None if value is None else 100 * value


# ---------------------------------------------------------------------- private plot
def render_private_plot(report: Any) -> bytes:
    """PNG histogram of the trigger words' scores against the other band words'.

    PRIVATE: the histogram lets a reader who logged the suspect's answers read
    the trigger scores back, so it is written only by :func:`save_private_evidence`.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)  # no display needed; a no-op if already Agg
    import matplotlib.pyplot as plt

    triggers = np.asarray(report.trigger_scores, dtype=float)
    benign = np.asarray(report.benign_scores, dtype=float)
    figure, axis = plt.subplots(figsize=(7, 4), dpi=110)
    try:
        if triggers.size + benign.size == 0:
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
            f"PRIVATE  {_TITLES[report.status]}  (p = {_fmt(report.p_value)}, "
            f"level {report.level:g}, key {report.key_id})",
            fontsize=10,
        )
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
    finally:
        plt.close(figure)
    return buffer.getvalue()
