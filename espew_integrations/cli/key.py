"""``espew key check``: re-check a key file and print its commitment.

``espew key reaudit``: the same key with its audit drawn from another corpus
(:meth:`..core.keys.key.WatermarkKey.with_audit`), for a suspect whose traffic is not like the
keygen corpus.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..arguments import add_embedder_argument
from .common import (
    UsageError,
    add_audit_argument,
    advancing,
    endpoint_options,
    load_key,
    positive_int,
    progress,
)

__all__ = [
    "accounts_note",
    "add_audit_source_arguments",
    "add_key_command",
    "audit_corpus",
    "audit_options",
    "reaudited",
]


def add_key_command(subparsers: Any) -> None:
    """Add ``key`` (with its ``check`` action) to the ``espew`` subcommands."""
    key_cmd = subparsers.add_parser(
        "key", help="inspect a key file: `espew key check KEY` re-checks it, prints its commitment"
    )
    key_actions = key_cmd.add_subparsers(dest="key_action", metavar="ACTION", required=True)
    check = key_actions.add_parser(
        "check",
        help="validate a key (checksum, key_id, trigger draw) and print its commitment; "
        "exit 0 if verifiable, 2 if not",
    )
    check.add_argument("key", help="key file path, or env:VAR")
    add_audit_argument(check)
    check.set_defaults(func=run_check)
    _register_reaudit(key_actions)


def _register_reaudit(key_actions: Any) -> None:
    reaudit = key_actions.add_parser(
        "reaudit",
        help="write the same key with its audit (probes, cover texts, clean references) "
        "drawn from another corpus, or as a later round: for a suspect whose traffic is not "
        "like your keygen corpus, or one you audited before; needs your clean model, as "
        "keygen did",
    )
    reaudit.add_argument("key", help="key file path, or env:VAR")
    add_audit_source_arguments(reaudit, what="key file")
    reaudit.set_defaults(func=run_reaudit)


def add_audit_source_arguments(reaudit: argparse.ArgumentParser, *, what: str) -> None:
    """The options of a re-audit (``key reaudit``, ``keyring reaudit``): where its texts
    come from, the clean model, the probes' shape and the round; declared once here."""
    reaudit.add_argument(
        "--corpus",
        required=True,
        help="texts like the suspect's traffic: bundled name, text file, or a traffic sample "
        "(espew serve --traffic-sample)",
    )
    reaudit.add_argument("--text-column", default=None, help="CSV column / JSONL field")
    accounts = reaudit.add_mutually_exclusive_group()
    accounts.add_argument(
        "--account",
        action="append",
        default=None,
        metavar="ID",
        help="--corpus is a traffic sample (espew serve --traffic-sample): draw the audit "
        "from this account's texts; repeat it to pool several accounts into one audit (one "
        "exact test: a thief that split its traffic over accounts is judged on all of it)",
    )
    accounts.add_argument(
        "--all-accounts",
        action="store_true",
        help="--corpus is a traffic sample: draw the audit from every account's texts, "
        "pooled (one exact test)",
    )
    add_embedder_argument(reaudit)
    reaudit.add_argument("--out", required=True, help=f"where to write the re-audited {what}")
    _add_reaudit_shape_flags(reaudit)
    reaudit.add_argument(
        "--overwrite", "--force", action="store_true", help=f"replace an existing --out {what}"
    )
    reaudit.add_argument("--api-key-env", metavar="VAR", help="API key for an openai: embedder")
    reaudit.add_argument("--no-progress", action="store_true")


def _add_reaudit_shape_flags(reaudit: argparse.ArgumentParser) -> None:
    """The re-drawn audit's shape: its probes, cover texts, round and size."""
    reaudit.add_argument(
        "--probes-per-word",
        type=positive_int,
        default=None,
        help="stored sentence probes per band word (default: as keygen's)",
    )
    reaudit.add_argument(
        "--probe-mix",
        choices=["single", "corpus"],
        default=None,
        help="how the probes hold band words, as for keygen (default: the key's own)",
    )
    reaudit.add_argument(
        "--no-cover-traffic",
        dest="cover_traffic",
        action="store_false",
        help="send the probes alone, as for keygen",
    )
    reaudit.add_argument(
        "--round",
        dest="audit_round",
        type=positive_int,
        default=1,
        metavar="K",
        help="draw audit round K, a sample independent of every other round's, for a later "
        "audit of a suspect that may have logged the earlier one; verify multiplies its "
        "p-value by K (default: 1, keygen's own draw)",
    )
    reaudit.add_argument(
        "--audit-budget",
        type=positive_int,
        default=None,
        metavar="N",
        help="texts in this audit (default: the key's own size); a larger audit has more "
        "power against a weak copy and costs N queries. From a traffic sample it can be as "
        "large as the sample",
    )


def run_check(args: argparse.Namespace) -> int:
    """Re-check a key file and print its commitment (for an arbiter, or before publishing)."""
    from ..core.ground.errors import KeyAuditMissingError

    key = load_key(args.key, audit=args.audit)
    try:
        stored = f"{len(key.probe_texts)} stored probes, {len(key.cover_texts)} cover texts"
    except KeyAuditMissingError as missing:
        # A serving key is complete without its audit: check what it holds and say so.
        stored = "a serving key: its audit file is not here, and serving needs none"
        print(f"note: {missing}", file=sys.stderr)
    if not key.verifiable:
        print(
            f"key {key.key_id}: UNVERIFIABLE: its triggers are not the draw its salt dictates "
            "(a version 1 key); it still watermarks, but no verdict can rest on it",
            file=sys.stderr,
        )
        print(key.commitment())
        return 2
    units = key.design.units
    print(
        f"key {key.key_id}: OK (marking={key.marking}; format valid, checksum and key_id match, "
        f"triggers are the salt's draw over {len(key.band)} {units}, {stored})"
    )
    print(key.commitment())
    return 0


def audit_corpus(args: argparse.Namespace) -> Any:
    """The texts to draw the audit from: the named accounts' traffic, pooled, every
    account's (``--all-accounts``), or --corpus."""
    from .keygen import corpus_texts

    every = args.all_accounts
    if args.account is None and not every:
        return corpus_texts(args)
    from ..core.records.traffic_sample import read_traffic_texts
    from ..core.records.traffic_store import TrafficSampleError

    try:
        return read_traffic_texts(args.corpus, account=None if every else args.account)
    except TrafficSampleError as exc:
        raise UsageError(str(exc)) from None


def accounts_note(args: argparse.Namespace) -> str:
    """What a re-audit from several accounts is, and what testing them one by one costs
    ('' for one account or a plain corpus)."""
    from ..core.records.traffic_sample import traffic_accounts

    every = args.all_accounts
    if not every and len(args.account or ()) < 2:
        return ""
    counts = traffic_accounts(args.corpus)
    named = list(counts) if every else list(dict.fromkeys(args.account))
    sizes = sorted(counts.get(name, 0) for name in named)
    tests = len(named)
    return (
        f"one exact test over {tests} accounts' pooled texts (an account holds "
        f"{sizes[0]:,} to {sizes[-1]:,}); an audit of one account alone asks at most its "
        f"own texts, so a copy trained across accounts shows in each only weakly: if you "
        f"also audit the accounts one by one, multiply the smallest of those {tests} "
        f"p-values by {tests + 1} (Bonferroni over them and this pooled audit) before "
        "calling any of them evidence"
    )


def audit_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``with_audit`` options the re-audit flags set."""
    return {
        "probes_per_word": args.probes_per_word,
        "cover_traffic": args.cover_traffic,
        "probe_mix": args.probe_mix,
        "audit_round": args.audit_round,
        "audit_budget": args.audit_budget,
    }


def reaudited(holder: Any, args: argparse.Namespace, *, committed: bool = False) -> Any:
    """``holder.with_audit`` (a key or a key ring) on the flags' corpus and clean model.

    ``committed``: ``holder`` is a key, and a single ``--account`` of a traffic sample
    whose pools ``espew serve`` committed draws its audit from that account's last
    committed pool (:func:`..core.records.traffic_sample.with_committed_audit`), so that ``espew
    evidence check --pool-log`` can prove the texts were fixed before the audit.
    """
    from ..models import resolve_embedder

    corpus = audit_corpus(args)
    embed, name = resolve_embedder(args.embedder, **endpoint_options(args))
    with progress(None, f"embedding with {name}", "text", not args.no_progress) as bar:
        # with_audit reports (done, total): the bar gets its total (and so an ETA)
        options = {"progress": advancing(bar), **audit_options(args)}
        if committed and committed_account(args) is not None:
            from ..core.records.traffic_commitments import CommitmentError
            from ..core.records.traffic_sample import with_committed_audit

            try:
                return with_committed_audit(
                    holder, args.corpus, committed_account(args), embed, **options
                )
            except CommitmentError as exc:
                raise UsageError(str(exc)) from None
        return holder.with_audit(corpus, embed, **options)


def committed_account(args: argparse.Namespace) -> str | None:
    """The one account whose committed pool a key's re-audit draws from: a single
    ``--account`` of a traffic sample that has a commitment log (None otherwise)."""
    from ..core.records.traffic_commitments import commitments_path

    if args.all_accounts or len(args.account or ()) != 1:
        return None
    return args.account[0] if commitments_path(args.corpus).exists() else None


def run_reaudit(args: argparse.Namespace) -> int:
    """Draw the key's audit from ``--corpus`` with the clean model; write it (mode 0600)."""
    out = Path(args.out)
    if out.exists() and not args.overwrite:  # before any slow work
        raise UsageError(f"{out} already exists; pass --overwrite to replace it")
    key = load_key(args.key)
    note = accounts_note(args)  # reads the sample's accounts before any slow work
    moved = reaudited(key, args, committed=True)
    moved.save(out, overwrite=args.overwrite)
    info = moved.info
    round_note = (
        f" (round {moved.audit_round}: verify multiplies its p-value by {moved.audit_round})"
        if moved.audit_round > 1
        else ""
    )
    held = (  # a field key asks any text: there is no band word to hold
        ""
        if "audit_band_rate" not in info
        else f" ({info['audit_band_rate']:.1%} hold a band word)"
    )
    print(
        f"key {moved.key_id}: the audit{round_note} of key {key.key_id} drawn from "
        f"{info['audit_corpus_texts']:,} texts{held}: {len(moved.probe_texts):,} probes and "
        f"{len(moved.cover_texts):,} cover texts, {moved.audit_queries:,} queries; "
        f"innocent-twin p = "
        f"{info['audit_twin_p_value']:.2g}. Written to {out}: same triggers, same marks; "
        "audit with it, keep serving with the original."
    )
    if note:
        print(f"accounts: {note}")
    if "audit_pool" in info:
        pool = info["audit_pool"]
        print(
            f"pool: drawn from account {pool['account']!r}'s pool committed at "
            f"{pool['time']} (record {pool['index']} of {Path(args.corpus).name}'s commitment "
            "log): espew evidence check --pool-log ties the audit to it"
        )
    return 0
