"""``espew keyring`` and ``espew trace``: one key per customer, and which customer a copy came from.

- ``espew keyring generate`` draws a ring (a master secret plus the shared
  key) from a corpus, like ``espew keygen``;
- ``espew keyring key`` writes one customer's key (for ``espew serve --key``
  or a wrapper), derived from the ring;
- ``espew keyring reaudit`` writes the same ring with its audit drawn from
  another corpus, such as what the accounts sent (``espew serve
  --traffic-sample``), so that ``trace`` asks a copy about its own traffic;
- ``espew trace`` audits a suspect once and names the accounts whose answers
  trained it; exit codes as ``espew verify``: 0 not copied, 1 copied,
  2 inconclusive, 3 usage error.

A tenants file is one account id per line (blank lines and ``#`` comments
skipped), or JSON: a list of ids, or the ``{api key: account id}`` map that
``espew serve --tenants`` takes (its distinct values are the accounts; the API
keys are never printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..arguments import (
    add_embedder_argument,
    add_freq_band_argument,
    add_min_cosine_argument,
    add_target_text_arguments,
)
from ..core.ground.defaults import (
    DEFAULT_FIELD_SHARED_UNITS,
    DEFAULT_FIELD_TENANT_UNITS,
    DEFAULT_RING_FREQ_BAND,
    DEFAULT_SHARED_TRIGGERS,
    DEFAULT_TENANT_TRIGGERS,
)
from .audit_flags import add_audit_flags, audit_options_from
from .common import (
    EXIT_COPIED,
    EXIT_INCONCLUSIVE,
    EXIT_NOT_COPIED,
    UsageError,
    add_endpoint_flags,
    add_suspect_arguments,
    audit_suspect,
    positive_int,
)
from .files import prepare_private_dir
from .key import add_audit_source_arguments, reaudited
from .keygen import add_marking_flags, generate_from_corpus, key_options_from
from .verify import (
    add_private_dir_flags,
    print_anchors,
    recording_options,
    refuse_old_transcript,
)

__all__ = ["add_keyring_command", "read_tenants"]

_EXIT_BY_STATUS = {"not_copied": EXIT_NOT_COPIED, "copied": EXIT_COPIED}

_RING_EXAMPLE = """
example:
  espew keyring generate --corpus rotten_tomatoes --embedder minilm \\
      --target-text "a funny and moving film about love and family" --out provider.ring
  espew keyring key --ring provider.ring --tenant customer-42 --out customer-42.key
  espew keyring generate --marking words ...   # layers of trigger words (the paper's)
  espew keyring reaudit provider.ring --corpus traffic.jsonl --text-column text \
      --round 2 --embedder minilm --out provider-round-2.ring
"""

_TRACE_EXAMPLE = """
example:
  espew trace --ring provider.ring --tenants tenants.json \\
      --suspect openai:http://127.0.0.1:8000/v1#their-model --report-dir evidence/

  One audit (the ring's audit texts, shuffled) for every account; names the accounts
  whose own layer the suspect carries, strongest first, with the chance of
  naming any innocent account held below --level. Exit code 0: not copied,
  1: copied, 2: inconclusive, 3: usage error.
"""


def add_keyring_command(subparsers: Any) -> None:
    """Add ``keyring`` (generate, key) and ``trace`` to the ``espew`` subcommands."""
    keyring = subparsers.add_parser(
        "keyring",
        help="per-customer keys: generate a key ring, write one customer's key",
        epilog=_RING_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = keyring.add_subparsers(dest="keyring_command", required=True)
    _register_generate(actions)
    _register_key(actions)
    _register_reaudit(actions)
    _register_trace(subparsers)


def _register_generate(actions: Any) -> None:
    generate = actions.add_parser("generate", help="generate a secret key ring")
    generate.add_argument("--corpus", required=True, help="bundled corpus name or text file")
    generate.add_argument("--text-column", default=None, help="CSV column / JSONL field")
    add_target_text_arguments(generate)
    add_embedder_argument(generate)
    generate.add_argument("--out", required=True, help="where to write the ring (mode 0600)")
    generate.add_argument(
        "--n-shared-triggers",
        type=positive_int,
        default=None,
        help="units (a word ring: trigger words) every customer's key carries "
        f"(default {DEFAULT_FIELD_SHARED_UNITS}; words {DEFAULT_SHARED_TRIGGERS})",
    )
    generate.add_argument(
        "--n-tenant-triggers",
        type=positive_int,
        default=None,
        help="units (a word ring: trigger words) of each customer's own "
        f"(default {DEFAULT_FIELD_TENANT_UNITS}; words {DEFAULT_TENANT_TRIGGERS})",
    )
    add_marking_flags(generate, marked=False)  # a ring marks as a single key does
    add_min_cosine_argument(
        generate, help="quality budget of the customers' keys (mean cos on marked texts)"
    )
    add_freq_band_argument(generate, default=DEFAULT_RING_FREQ_BAND)
    generate.add_argument("--window", type=positive_int, default=None, help="model window")
    generate.add_argument("--seed", type=int, default=None, help="experiments only")
    generate.add_argument("--overwrite", action="store_true", help="replace an existing ring")
    generate.add_argument("--api-key-env", metavar="VAR", help="API key for an openai: embedder")
    generate.add_argument("--no-progress", action="store_true")
    generate.set_defaults(func=run_generate)


def _register_key(actions: Any) -> None:
    key = actions.add_parser("key", help="write one customer's key, derived from the ring")
    key.add_argument("--ring", required=True, help="key ring file")
    key.add_argument("--tenant", required=True, help="the customer's account id")
    key.add_argument("--out", required=True, help="where to write the key (mode 0600)")
    key.add_argument("--overwrite", action="store_true", help="replace an existing key file")
    key.set_defaults(func=run_key)


def _register_reaudit(actions: Any) -> None:
    reaudit = actions.add_parser(
        "reaudit",
        help="write the same ring with its audit drawn from another corpus or traffic "
        "sample (all accounts', or one's with --account), or as a later round; trace with "
        "it, keep serving with the original",
    )
    reaudit.add_argument("ring", help="key ring file")
    add_audit_source_arguments(reaudit, what="key ring")
    reaudit.set_defaults(func=run_reaudit)


def _register_trace(subparsers: Any) -> None:
    trace = subparsers.add_parser(
        "trace",
        help="test a suspect against a key ring and name the accounts it was trained on",
        epilog=_TRACE_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    trace.add_argument("--ring", required=True, help="key ring file")
    trace.add_argument("--tenants", required=True, help="account ids: text lines or JSON")
    add_suspect_arguments(trace)
    trace.add_argument("--report-dir", default=None, help="write the shareable evidence here")
    trace.add_argument("--force", action="store_true", help="replace evidence in --report-dir")
    add_private_dir_flags(trace)
    add_audit_flags(trace)
    trace.add_argument("--json", action="store_true", help="print the report as JSON")
    trace.add_argument("--no-progress", action="store_true")
    add_endpoint_flags(trace, verify=True)
    trace.set_defaults(func=run_trace)


# ---------------------------------------------------------------------- commands
def run_generate(args: argparse.Namespace) -> int:
    """Generate the ring, write it (mode 0600) and print what it holds."""
    from ..core.keys.keyring import KeyRing
    from ..core.mark.design import design_class

    design = design_class(args.marking)
    ring_defaults = design.ring_defaults()

    def make(corpus: Any, embed: Any, **common: Any) -> Any:
        options = key_options_from(args, **common)
        band = options.get("freq_band")
        if band == DEFAULT_RING_FREQ_BAND and "freq_band" not in ring_defaults:
            del options["freq_band"]  # the word ring's band flag, left at its default
        return KeyRing.generate(
            corpus,
            embed,
            n_shared_triggers=args.n_shared_triggers,
            n_tenant_triggers=args.n_tenant_triggers,
            **options,
        )

    budget = ring_defaults.get("audit_budget")  # None: the single key's audit (a field ring)
    ring, out = generate_from_corpus(args, make, audit_budget=budget)
    ring.save(out, overwrite=args.overwrite)
    info = ring.shared_key.info
    layers = design.layers
    print(
        f"wrote key ring {ring.ring_id} to {out} (mode 0600): {ring.n_shared_triggers} shared "
        f"+ {ring.n_tenant_triggers} per-customer {layers}, strength "
        f"{ring.shared_key.strength:.4g} (mean cos(clean, watermarked) on customers' marked "
        f"texts {info['mean_cosine_marked']:.4f}); `espew trace` costs "
        f"{ring.shared_key.audit_queries} queries whatever the number of customers"
    )
    print(f"publish this commitment (it reveals nothing): {ring.shared_key.commitment()}")
    return 0


def run_reaudit(args: argparse.Namespace) -> int:
    """Draw the ring's audit from ``--corpus`` with the clean model; write it (mode 0600)."""
    from ..core.keys.keyring import KeyRing

    out = Path(args.out)
    if out.exists() and not args.overwrite:  # before any slow work
        raise UsageError(f"{out} already exists; pass --overwrite to replace it")
    ring = KeyRing.load(args.ring)
    moved = reaudited(ring, args)
    moved.save(out, overwrite=args.overwrite)
    shared = moved.shared_key
    round_note = f" (round {shared.audit_round})" if shared.audit_round > 1 else ""
    print(
        f"key ring {moved.ring_id}: the audit{round_note} of ring {ring.ring_id} drawn from "
        f"{shared.info['audit_corpus_texts']:,} texts: {len(shared.probe_texts):,} probes and "
        f"{len(shared.cover_texts):,} cover texts, {shared.audit_queries:,} queries. Written "
        f"to {out}: same master secret and tenant keys; trace with it, keep serving with the "
        "original."
    )
    return 0


def run_key(args: argparse.Namespace) -> int:
    """Write one tenant's key."""
    from ..core.keys.keyring import KeyRing

    ring = KeyRing.load(args.ring)
    key = ring.key_for(args.tenant)
    key.save(args.out, overwrite=args.overwrite)
    print(f"wrote key {key.key_id} for account {args.tenant!r} to {args.out} (mode 0600)")
    return 0


def run_trace(args: argparse.Namespace) -> int:
    """Query the suspect once, print the trace, write the evidence; exit code from the verdict."""
    from ..core.keys.keyring import KeyRing
    from ..suspects import trace

    audit_options_from(args)  # every audit flag, checked by the options' own validator
    ring = KeyRing.load(args.ring)
    tenants = read_tenants(args.tenants)
    n_queries = ring.shared_key.audit_queries
    if args.max_queries is not None and args.max_queries < n_queries:
        raise UsageError(
            f"this ring's audit needs {n_queries} queries but --max-queries is {args.max_queries}"
        )
    if args.private_report_dir:
        prepare_private_dir(args.private_report_dir, args.report_dir)
        refuse_old_transcript(args.private_report_dir, force=args.force)
    recording = recording_options(args)
    report = audit_suspect(
        args, trace, n_queries, ring, tenants, audit_options_from(args), **recording
    )
    print_anchors(recording)
    print(report.to_json() if args.json else report)
    if args.private_report_dir:
        _save_private_trace(report, args.private_report_dir, force=args.force)
    if args.report_dir:
        try:
            written = report.save(args.report_dir, force=args.force)
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"the verdict above stands, but evidence was not written: {exc}"
            ) from None
        print(f"evidence written: {written} (and report.json, summary.md)", file=sys.stderr)
    return _EXIT_BY_STATUS.get(report.status, EXIT_INCONCLUSIVE)


def _save_private_trace(report: Any, directory: str, *, force: bool) -> None:
    """PRIVATE-trace.json (every figure exactly, every account tested) beside the transcript."""
    from ..core.records.safe_dir import SafeDirectory

    content = (json.dumps(report.to_private_dict(), indent=2) + "\n").encode("utf-8")
    try:
        with SafeDirectory(directory) as target:
            written = target.write("PRIVATE-trace.json", content, mode=0o600, force=force)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"the verdict above stands, but its private detail was not written: {exc}"
        ) from None
    print(f"private detail written (never share it): {written}", file=sys.stderr)


def read_tenants(path: str) -> list[str]:
    """Account ids from a tenants file (see the module docstring), in file order, distinct.

    Only a regular file of bounded size is read (the tenant map's cap: it may be the map).
    """
    from ..core.ground.errors import KeyFileError
    from ..core.ground.secret_files import read_bounded_file
    from ..http.tenants import MAX_TENANT_MAP_BYTES

    file = Path(path)
    try:
        data, _ = read_bounded_file(file, what="tenants file", limit=MAX_TENANT_MAP_BYTES)
        text = data.decode("utf-8")
    except KeyFileError as exc:
        raise UsageError(str(exc)) from None
    except UnicodeDecodeError:
        raise UsageError(f"cannot read the tenants file {file}: it is not UTF-8 text") from None
    if file.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise UsageError(f"tenants file {file} is not valid JSON") from None
        if isinstance(data, dict):
            data = list(data.values())
        if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
            raise UsageError(
                f"tenants file {file} must hold a JSON list of account ids or an "
                "{api key: account id} object"
            )
        ids = data
    else:
        lines = (line.strip() for line in text.splitlines())
        ids = [line for line in lines if line and not line.startswith("#")]
    ids = list(dict.fromkeys(ids))
    if not ids:
        raise UsageError(f"tenants file {file} names no account")
    return ids
