"""``espew evidence check``: re-derive an audit's verdict from its transcript, offline.

For the provider before a dispute, or for an arbiter handed the private directory
and the key: the transcript's chain must hold, its digest must be the one the
reports carry, and replaying its answers through the audit's own pipeline must
give the recorded verdict and p-value (:mod:`espew_integrations.core.evidence_check`).
An arbiter who distrusts the auditor adds ``--requery SUSPECT`` (the suspect is
asked a keyed random subset of the recorded texts again, and must answer as
recorded within its own repeat noise; the verdict is re-derived from its
answers) and ``--tsa-ca CA.pem`` (the timestamp taken before the verdict must be
over this transcript and signed by that TSA). The output ends with what was and
was not proved. Exit code 0: the evidence holds; 1: it does not (the reason is
printed: chain broken at a record, an answer changed, the p-value differs, the
suspect answers otherwise, the timestamp is over another transcript); 3: usage
error (no transcript, unreadable key). A public ``report.json`` given with
``--public`` must also follow the published JSON Schema
(``docs/schemas/report.schema.json``, shipped in the package), checked when
``jsonschema`` is installed.
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path
from typing import Any

from ..core.ground.defaults import DEFAULT_BATCH_SIZE
from .common import (
    UsageError,
    add_audit_argument,
    add_endpoint_flags,
    endpoint_options,
    load_key,
    positive_int,
    suspect_spec,
)

__all__ = ["EXIT_EVIDENCE_FAILS", "add_evidence_command", "public_report_problem", "report_schema"]

#: ``espew evidence check``'s exit code when the evidence does not hold.
EXIT_EVIDENCE_FAILS = 1

_EXAMPLE = """
example:
  espew verify --key provider.key --suspect openai:https://api.example.com/v1#their-model \\
      --report-dir public/ --private-report-dir private/
  espew evidence check private/ --key provider.key --public public/

  An arbiter who distrusts the auditor also re-asks the suspect and checks the
  timestamp taken before the verdict (espew verify --timestamp-url):
  espew evidence check private/ --key provider.key \
      --requery openai:https://api.example.com/v1#their-model \
      --tsa-ca tsa-ca.pem --require-timestamp

  Exit code 0: the transcript is intact, is this key's audit, replaying it gives
  the recorded verdict and p-value, and every check asked for agrees; 1: it does
  not (the reason says where); 3: usage error. A trace's transcript is checked with
  --ring instead of --key.
"""


def add_evidence_command(subparsers: Any) -> None:
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
    _add_arbiter_flags(check)
    _add_anchor_flags(check)
    add_endpoint_flags(check, verify=True)
    check.set_defaults(func=run_check, batch_size=DEFAULT_BATCH_SIZE)


def _requery_size(text: str) -> int | str | None:
    word = text.strip().lower()
    if word in ("all", "auto"):
        return None if word == "all" else word
    return positive_int(text)


def _tolerance(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _add_arbiter_flags(check: argparse.ArgumentParser) -> None:
    """The checks that do not rest on the auditor: re-asking the suspect, the timestamp."""
    from ..core.records.requery import DEFAULT_REQUERY_SIZE, DEFAULT_REQUERY_TOLERANCE

    check.add_argument(
        "--requery",
        metavar="SUSPECT",
        default=None,
        help="ask this suspect (the forms --suspect takes: openai:URL#MODEL, a URL with "
        "--model, module:attr, minilm) a random subset of the recorded texts again; its "
        "answers must be the recorded ones",
    )
    check.add_argument(
        "--model", default=None, metavar="NAME", help="the model, when --requery is a URL"
    )
    check.add_argument(
        "--requery-size",
        type=_requery_size,
        default=DEFAULT_REQUERY_SIZE,
        metavar="N",
        help="texts re-asked: a number, 'all', or 'auto' (the default: the fewest for which a "
        "forgery of 1%% of the answers escapes with probability at most 0.1%%, hypergeometric; "
        "the check prints the escape chance for the size used)",
    )
    check.add_argument(
        "--requery-seed",
        type=int,
        default=None,
        metavar="SEED",
        help="the arbiter's seed that draws which texts are re-asked (default: a fresh "
        "random one, printed)",
    )
    check.add_argument(
        "--requery-tolerance",
        type=_tolerance,
        default=DEFAULT_REQUERY_TOLERANCE,
        metavar="REL",
        help="the floor of the per-answer bound ||answer - recorded|| / ||recorded||: the "
        "bound is the larger of this and a margin over the suspect's own repeat noise, "
        f"measured by asking some texts twice (default {DEFAULT_REQUERY_TOLERANCE:g})",
    )


def _add_anchor_flags(check: argparse.ArgumentParser) -> None:
    """The checks of where the texts came from and when the records existed."""
    check.add_argument(
        "--pool-log",
        metavar="SAMPLE.commitments",
        default=None,
        help="the commitment log espew serve writes beside its traffic sample: an audit "
        "re-drawn from a corpus (key reaudit, key.with_audit) must have been drawn from a pool "
        "it committed before the audit began",
    )
    check.add_argument(
        "--accept-auditor-pool",
        action="store_true",
        help="take the auditor's word that a re-drawn audit's texts were chosen before any "
        "answer was seen (listed under 'not proved' instead of failing the check)",
    )
    check.add_argument(
        "--tsa-ca",
        metavar="CA.pem",
        default=None,
        help="the timestamp authority's CA certificate: the transcript's RFC 3161 timestamp "
        "must be signed by a TSA it certifies (uses the openssl command)",
    )
    check.add_argument(
        "--require-timestamp",
        action="store_true",
        help="fail unless the transcript holds a timestamp verified with --tsa-ca",
    )


def run_check(args: argparse.Namespace) -> int:
    """Check the transcript, print what was found; exit 0 if the evidence holds."""
    from ..core.keys.keyring import KeyRing
    from ..core.records.transcript import TRANSCRIPT_FILE
    from ..evidence import check_evidence

    if args.ring:
        key = KeyRing.load(args.ring)
    else:  # the replay sends the key's audit again, so the audit file is read now
        key = load_key(args.key, audit=args.audit, need_audit=True)
    transcript = Path(args.private_dir)
    if not (transcript.is_file() or (transcript / TRANSCRIPT_FILE).is_file()):
        raise UsageError(
            f"no transcript in {args.private_dir} (the audit writes {TRANSCRIPT_FILE} into "
            "its --private-report-dir)"
        )
    if args.pool_log and not Path(args.pool_log).is_file():
        raise UsageError(f"--pool-log: no commitment log at {args.pool_log}")
    if args.tsa_ca and not Path(args.tsa_ca).is_file():
        raise UsageError(f"--tsa-ca: no CA certificate at {args.tsa_ca}")
    suspect, name = None, ""
    if args.requery:
        from ..models import resolve_embedder

        spec = suspect_spec(argparse.Namespace(suspect=args.requery, model=args.model))
        suspect, _ = resolve_embedder(spec, **endpoint_options(args))
        name = spec
    try:
        result = check_evidence(
            args.private_dir,
            key,
            public=args.public,
            requery=suspect,
            requery_name=name,
            requery_size=args.requery_size,
            requery_seed=args.requery_seed,
            requery_tolerance=args.requery_tolerance,
            tsa_ca=args.tsa_ca,
            require_timestamp=args.require_timestamp,
            pool_log=args.pool_log,
            accept_auditor_pool=args.accept_auditor_pool,
        )
    finally:
        close = getattr(suspect, "close", None)
        if callable(close):
            close()
    print(result)
    problem = public_report_problem(args.public) if args.public else None
    if problem:
        print(f"the public report does not follow the published schema: {problem}")
        return EXIT_EVIDENCE_FAILS
    return 0 if result.holds else EXIT_EVIDENCE_FAILS


def report_schema() -> dict[str, Any]:
    """The published JSON Schema of the public ``report.json`` (docs/schemas/)."""
    text = resources.files("espew_integrations").joinpath("schemas/report.schema.json")
    return json.loads(text.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def public_report_problem(public: str | Path) -> str | None:
    """Why the public ``report.json`` at ``public`` (a file or its directory) breaks the schema.

    None when it follows it, when it is a trace's report (another shape) or when
    jsonschema is not installed: the schema is the arbiter's tool, the check runs
    where it can, and :func:`~espew_integrations.core.evidence_check.check_transcript`
    has already checked what the verdict rests on. A file that is not JSON is a
    problem (``check_evidence`` says so too).
    """
    try:
        import jsonschema
    except ImportError:
        return None
    path = Path(public)
    path = path / "report.json" if path.is_dir() else path
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return f"{path.name} is not JSON"
    if isinstance(data, dict) and "shared" in data:  # a trace's report
        return None
    validator = jsonschema.Draft202012Validator(report_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is None:
        return None
    from ..core.ground.untrusted import printable

    where = "/".join(str(part) for part in error.absolute_path) or "(the report)"
    return f"{path.name} at {printable(where)}: {printable(error.message)}"  # hostile text
