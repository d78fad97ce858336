"""``espew traffic``: work with traffic samples written by ``espew serve --traffic-sample``.

- ``espew traffic merge A.jsonl B.jsonl ... --out S.jsonl`` merges the samples
  of replicas that share one salt into the sample one process would have kept
  (:func:`~espew_integrations.core.records.traffic_sample.merge_traffic_samples`), to
  draw a re-audit from;
- ``espew traffic account S.jsonl --api-key-env VAR`` prints the account id a
  server without a key ring gave the client that sends the API key in ``$VAR``
  (a keyed hash of it: the sample never stores API keys), for ``--account``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from .common import UsageError, positive_int

__all__ = ["add_traffic_command"]

_EXAMPLE = """
example:
  # every replica ran: espew serve ... --traffic-sample /data/traffic-$HOST.jsonl
  # with the same traffic-$HOST.jsonl.salt copied in before it started
  espew traffic merge traffic-a.jsonl traffic-b.jsonl traffic-c.jsonl --out traffic.jsonl
  espew traffic account traffic.jsonl --api-key-env SUSPECT_API_KEY
  espew key reaudit provider.key --corpus traffic.jsonl --text-column text \\
      --account key-... --round 2 --embedder minilm --out suspect-round-2.key
"""


def add_traffic_command(subparsers: Any) -> None:
    """Add ``traffic`` (``merge``, ``account``) to the ``espew`` subcommands."""
    from ..core.ground.defaults import DEFAULT_SAMPLE_ACCOUNT_BYTES, DEFAULT_SAMPLE_FILE_BYTES
    from ..core.records.traffic_sample import DEFAULT_SAMPLE_CAPACITY

    traffic = subparsers.add_parser(
        "traffic",
        help="merge the traffic samples of several replicas; find a client's account id",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = traffic.add_subparsers(dest="traffic_action", metavar="ACTION", required=True)
    merge = actions.add_parser(
        "merge",
        help="merge samples written with one salt into the sample one process would have kept",
    )
    merge.add_argument("samples", nargs="+", metavar="SAMPLE.jsonl", help="the replicas' samples")
    merge.add_argument("--out", required=True, help="the merged sample (its .salt is written too)")
    merge.add_argument(
        "--traffic-sample-size",
        type=positive_int,
        default=DEFAULT_SAMPLE_CAPACITY,
        metavar="N",
        help=f"texts per account, as the replicas ran with (default {DEFAULT_SAMPLE_CAPACITY:,})",
    )
    merge.add_argument(
        "--traffic-sample-account-bytes",
        type=positive_int,
        default=DEFAULT_SAMPLE_ACCOUNT_BYTES,
        metavar="BYTES",
        help="bytes per account, as the replicas ran with "
        f"(default {DEFAULT_SAMPLE_ACCOUNT_BYTES:,})",
    )
    merge.add_argument(
        "--max-file-bytes",
        type=positive_int,
        default=DEFAULT_SAMPLE_FILE_BYTES,
        metavar="BYTES",
        help="refuse a merged sample larger than this (default "
        f"{DEFAULT_SAMPLE_FILE_BYTES:,}); nothing is cut to fit",
    )
    merge.add_argument(
        "--overwrite", "--force", action="store_true", help="replace an existing --out"
    )
    merge.set_defaults(func=run_merge)
    account = actions.add_parser(
        "account",
        help="the account id a server without a key ring gives the client with this API key",
    )
    account.add_argument("sample", metavar="SAMPLE.jsonl", help="a sample (its .salt beside it)")
    account.add_argument(
        "--api-key-env", required=True, metavar="VAR", help="the client's API key is in $VAR"
    )
    account.set_defaults(func=run_account)


def run_merge(args: argparse.Namespace) -> int:
    """Merge ``args.samples`` into ``args.out``; a salt mismatch or a full file is exit 3."""
    from ..core.records.traffic_sample import merge_traffic_samples
    from ..core.records.traffic_store import TrafficSampleError

    try:
        merged = merge_traffic_samples(
            args.samples,
            args.out,
            capacity=args.traffic_sample_size,
            max_account_bytes=args.traffic_sample_account_bytes,
            max_file_bytes=args.max_file_bytes,
            overwrite=args.overwrite,
        )
    except TrafficSampleError as exc:
        raise UsageError(str(exc)) from None
    print(
        f"merged {len(args.samples)} samples into {merged.path}: {merged.accounts:,} accounts, "
        f"{merged.texts:,} texts, {merged.bytes:,} bytes"
    )
    return 0


def run_account(args: argparse.Namespace) -> int:
    """Print the account id of the API key in ``$VAR`` under the sample's salt."""
    from ..core.records.traffic_sample import traffic_account_id
    from ..core.records.traffic_store import TrafficSampleError

    credential = os.environ.get(args.api_key_env)
    if not credential:
        raise UsageError(f"environment variable {args.api_key_env} (--api-key-env) is not set")
    try:
        print(traffic_account_id(args.sample, credential))
    except TrafficSampleError as exc:
        raise UsageError(str(exc)) from None
    return 0
