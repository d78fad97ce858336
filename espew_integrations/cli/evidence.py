"""``espew evidence check``: re-derive an audit's verdict from its transcript, offline.

For the provider before a dispute, or for an arbiter handed the private directory
and the key: the transcript's chain must hold, its digest must be the one the
reports carry, and replaying its answers through the audit's own pipeline must
give the recorded verdict and p-value (:mod:`espew_integrations.core.evidence_check`).
Exit code 0: the evidence holds; 1: it does not (the reason is printed: chain
broken at a record, an answer changed, the p-value differs); 3: usage error
(no transcript, unreadable key).
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import UsageError, add_audit_argument, load_key

__all__ = ["EXIT_EVIDENCE_FAILS", "register"]

#: ``espew evidence check``'s exit code when the evidence does not hold.
EXIT_EVIDENCE_FAILS = 1

_EXAMPLE = """
example:
  espew verify --key provider.key --suspect openai:https://api.example.com/v1#their-model \\
      --report-dir public/ --private-report-dir private/
  espew evidence check private/ --key provider.key --public public/

  Exit code 0: the transcript is intact, is this key's audit, and replaying it gives
  the recorded verdict and p-value; 1: it does not (the reason says where); 3: usage
  error. A trace's transcript is checked with --ring instead of --key.
"""


def register(subparsers: Any) -> None:
    """Add ``evidence`` (with its ``check`` action) to the ``espew`` subcommands."""
    evidence = subparsers.add_parser(
        "evidence",
        help="check an audit's evidence: `espew evidence check PRIVATE_DIR --key KEY` replays "
        "its transcript",
    )
    actions = evidence.add_subparsers(dest="evidence_action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="re-derive the verdict and p-value from the transcript in PRIVATE_DIR; exit 0 if "
        "they match the recorded ones, 1 if anything was altered",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("private_dir", metavar="PRIVATE_DIR", help="the audit's private directory")
    which = check.add_mutually_exclusive_group(required=True)
    which.add_argument("--key", help="the key the audit used (file, or env:VAR)")
    which.add_argument("--ring", help="the key ring, for a trace's transcript")
    add_audit_argument(check)
    check.add_argument(
        "--public",
        metavar="PATH",
        default=None,
        help="the public report (report.json, or the --report-dir holding it) handed to the "
        "other side: its transcript_digest must be this transcript's",
    )
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Check the transcript, print what was found; exit 0 if the evidence holds."""
    from ..core.evidence_check import check_evidence
    from ..core.keyring import KeyRing
    from ..core.transcript import TRANSCRIPT_FILE

    if args.ring:
        key = KeyRing.load(args.ring)
    else:  # the replay sends the key's audit again, so the audit file is read now
        key = load_key(args.key, audit=args.audit, need_audit=True)
    try:
        result = check_evidence(args.private_dir, key, public=args.public)
    except FileNotFoundError:
        raise UsageError(
            f"no transcript in {args.private_dir} (the audit writes {TRANSCRIPT_FILE} into "
            "its --private-report-dir)"
        ) from None
    print(result)
    return 0 if result.holds else EXIT_EVIDENCE_FAILS
