"""``espew verify``: test whether a suspect copied your watermarked model."""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any

from ..core.ground.untrusted import tally
from .audit_flags import add_audit_flags, add_target_flag, audit_options_from
from .common import (
    EXIT_COPIED,
    EXIT_INCONCLUSIVE,
    EXIT_NOT_COPIED,
    UsageError,
    add_audit_argument,
    add_endpoint_flags,
    add_suspect_arguments,
    audit_suspect,
    load_key,
    suspect_spec,
)
from .files import prepare_private_dir, prepare_report_dir
from .redact import scrub, secret_values

__all__ = ["add_verify_command"]

_EXIT_BY_STATUS = {"not_copied": EXIT_NOT_COPIED, "copied": EXIT_COPIED}

_EXAMPLE = """
example:
  espew verify --key provider.key \\
      --suspect openai:http://127.0.0.1:8000/v1#their-model \\
      --max-queries 2500 --rate-limit 5 --report-dir evidence/

  Sends the key's audit (a keyed uniform sample of its corpus, shuffled;
  key.audit_queries texts) to the suspect and runs an exact rank test.
  Exit code 0: not copied, 1: copied, 2: inconclusive, 3: usage error.
  --report-dir writes report.json and summary.md (safe to share);
  --private-report-dir the PRIVATE-* per-word detail and the audit's transcript
  (never share them; `espew evidence check DIR --key KEY` replays the transcript).
  --suspect also takes an endpoint's URL with --model (--suspect
  http://127.0.0.1:8000/v1 --model their-model), module:attr (a Python
  embedder) or minilm.
"""


def add_verify_command(subparsers: Any) -> None:
    """Add ``verify`` to the ``espew`` subcommands."""
    verify = subparsers.add_parser(
        "verify",
        help="test whether a suspect copied your watermarked model",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument(
        "--key", default=None, help="key file or env:VAR (default: the key $ESPEW_KEY names)"
    )
    add_audit_argument(verify)
    add_suspect_arguments(verify)
    add_target_flag(verify)
    verify.add_argument(
        "--report-dir",
        default=None,
        help="write the evidence here (checked before the first query)",
    )
    add_private_dir_flags(verify)
    verify.add_argument(
        "--force", action="store_true", help="replace evidence already in --report-dir"
    )
    add_audit_flags(verify)
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument("--no-progress", action="store_true")
    add_endpoint_flags(verify, verify=True)
    verify.set_defaults(func=run)


def add_private_dir_flags(parser: argparse.ArgumentParser) -> None:
    """``--private-report-dir`` and ``--suspect-label``, shared by verify and trace.

    The private directory receives the per-word detail and the audit's transcript
    (:mod:`~espew_integrations.core.records.transcript`), which ``espew evidence check``
    replays; the label is the suspect's human name in the reports.
    """
    parser.add_argument(
        "--private-report-dir",
        default=None,
        help="write the per-word detail and the audit's transcript here (PRIVATE-* files: "
        "never hand them to the suspect's side); must differ from --report-dir",
    )
    parser.add_argument(
        "--suspect-label",
        default="",
        metavar="NAME",
        help="a human name for the suspect (e.g. 'Acme Corp embeddings API'), shown beside "
        "the --suspect spec in the reports",
    )
    parser.add_argument(
        "--timestamp-url",
        default=None,
        metavar="URL",
        help="an RFC 3161 timestamp authority: once every answer is in, and before the "
        "verdict is computed, the transcript's commitment is timestamped there (needs "
        "--private-report-dir; `espew evidence check --tsa-ca` verifies it)",
    )
    parser.add_argument(
        "--send-digest",
        action="store_true",
        help="also send the commitment to an HTTP suspect, in the X-ESpeW-Transcript-Digest "
        "header of one last request (the audit's last text again), so its own logs hold it",
    )


def recording_options(args: argparse.Namespace) -> dict[str, Any]:
    """The audit's naming and transcript options from the command line: the suspect as
    given, its label, and a transcript in --private-report-dir when there is one (with
    its anchors: --timestamp-url, --send-digest)."""
    from ..core.records.transcript import TranscriptRecorder

    options: dict[str, Any] = {
        "suspect_name": suspect_spec(args),
        "suspect_label": args.suspect_label,
    }
    anchored = args.timestamp_url or args.send_digest
    if anchored and not args.private_report_dir:
        raise UsageError(
            "--timestamp-url and --send-digest anchor the audit's transcript: give "
            "--private-report-dir DIR, where it is written"
        )
    if args.private_report_dir:
        anchors = []
        if args.timestamp_url:
            from ..timestamp import TimestampAnchor

            try:
                anchors.append(TimestampAnchor(args.timestamp_url))
            except ValueError as exc:
                raise UsageError(f"--timestamp-url: {exc}") from None
        options["transcript"] = TranscriptRecorder(
            args.private_report_dir, force=args.force, anchors=anchors, send_digest=args.send_digest
        )
    return options


def print_anchors(options: dict[str, Any]) -> None:
    """On stderr: the commitment fixed before the verdict, and what each anchor made of it."""
    recorder = options.get("transcript")
    if recorder is None or not recorder.anchored:
        return
    print(f"transcript committed before the verdict: {recorder.commitment}", file=sys.stderr)
    for name, anchor in recorder.anchored.items():
        if "error" in anchor:
            print(f"  {name}: FAILED: {anchor['error']}", file=sys.stderr)
        elif name == "timestamp":
            print(f"  timestamp: {anchor['gen_time']} by {anchor['url']}", file=sys.stderr)
        else:
            print(f"  sent to the suspect in the {anchor['header']} header", file=sys.stderr)


def _check_before_querying(args: argparse.Namespace, key: Any) -> int:
    """Every setting and directory is checked before the first query; returns the query count."""
    n_queries = key.audit_queries + (1 if args.target_mode == "query" else 0)
    if args.max_queries is not None and args.max_queries < n_queries:
        raise UsageError(
            f"this key's test needs {n_queries} queries but --max-queries is "
            f"{args.max_queries}; raise --max-queries, or make a key with a smaller "
            "--audit-budget (espew keygen)"
        )
    audit_options_from(args)  # every audit flag, checked by the options' own validator
    if args.report_dir:
        prepare_report_dir(args.report_dir, force=args.force)
    if args.private_report_dir:
        prepare_private_dir(args.private_report_dir, args.report_dir)
        refuse_old_transcript(args.private_report_dir, force=args.force)
    return n_queries


def refuse_old_transcript(directory: str, *, force: bool) -> None:
    """An earlier audit's transcript is replaced only with --force (checked before asking)."""
    from ..core.records.transcript import TRANSCRIPT_FILE

    old = Path(directory) / TRANSCRIPT_FILE
    if (old.exists() or old.is_symlink()) and not force:
        raise UsageError(f"{old} already exists; pass --force to replace the transcript")


def run(args: argparse.Namespace) -> int:
    """Query the suspect, print the report, write the evidence; exit code from the verdict."""
    from ..suspects import verify

    key = load_key(args.key, audit=args.audit, need_audit=True)
    n_queries = _check_before_querying(args, key)
    if args.target_mode == "query":
        print("note: --target query sends the key's target text to the suspect", file=sys.stderr)
    recording = recording_options(args)
    report = audit_suspect(
        args,
        verify,
        n_queries,
        key,
        audit_options_from(args),
        **recording,
    )
    print_anchors(recording)
    _print_report(report, args)
    _write_evidence(report, args)
    return _EXIT_BY_STATUS.get(report.status, EXIT_INCONCLUSIVE)


def _print_report(report: Any, args: argparse.Namespace) -> None:
    """The report on stdout, the suspect's errors on stderr (where scripts read them).

    An error that every batch hit is shown once with its count (x5), not five times.
    """
    print(report.to_json() if args.json else report)
    if report.status == "inconclusive" and report.errors:
        print("errors from the suspect:", file=sys.stderr)
        secrets = secret_values(args)
        for error in tally(scrub(str(error), secrets) for error in report.errors)[:5]:
            print(f"  {error}", file=sys.stderr)


def _write_evidence(report: Any, args: argparse.Namespace) -> None:
    if args.report_dir:
        written = _save_evidence(report, args.report_dir, force=args.force)
        print(f"evidence written: {', '.join(str(p) for p in written)}", file=sys.stderr)
    if args.private_report_dir:
        written = _save_private(report, args.private_report_dir, force=args.force)
        print(
            f"private detail written (never share it): {', '.join(str(p) for p in written)}",
            file=sys.stderr,
        )


def _save_private(report: Any, directory: str, *, force: bool) -> list[Path]:
    from ..evidence import save_private_evidence

    try:
        written = save_private_evidence(report, directory, force=force)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"the verdict above stands, but its private detail could not be written: {exc}"
        ) from None
    return [Path(p) for p in written.values()]


def _save_evidence(report: Any, directory: str, *, force: bool) -> list[Path]:
    """Write the evidence; ``force`` reaches ``save_evidence`` when it takes one."""
    from ..core.records.evidence import save_evidence

    options: dict[str, Any] = {}
    if "force" in inspect.signature(save_evidence).parameters:
        options["force"] = force
    try:
        written = save_evidence(report, directory, **options)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"the verdict above stands, but its evidence could not be written: {exc}"
        ) from None
    return [Path(p) for p in written.values()]
