"""The audit flags of ``espew verify`` and ``espew trace``, built from :class:`AuditOptions`.

Why a module of its own: the flags' defaults and help are read from the options
object's fields (:class:`~espew_integrations.core.audit.options.AuditOptions`), so a
default changed there is the command line's too, and the values given are checked by
the options' one validator; a value it refuses is a usage error naming the flag.
"""

from __future__ import annotations

import argparse

from ..core.audit.options import TARGET_MODES, AuditOptions
from ..core.ground.errors import OptionsError
from .common import UsageError, positive_int, positive_seconds

__all__ = ["FLAGS", "add_audit_flags", "add_target_flag", "audit_options_from"]

#: Each audit option the command line sets, and its flag.
FLAGS: dict[str, str] = {
    "target_mode": "--target",
    "level": "--level",
    "batch_size": "--batch-size",
    "min_coverage": "--min-coverage",
    "seed": "--seed",
    "stall_timeout": "--stall-timeout",
    "deadline": "--deadline",
}


def add_target_flag(parser: argparse.ArgumentParser) -> None:
    """``--target key|query`` (``espew verify`` only: a trace compares with its key)."""
    parser.add_argument(
        FLAGS["target_mode"],
        dest="target_mode",
        choices=TARGET_MODES,
        default=AuditOptions.default("target_mode"),
        help="key: the stored target (a key with a stored audit maps a suspect of another "
        "dimension or with rotated coordinates back into its own); query: the suspect's own "
        "embedding of the target text (discloses the target text to the suspect)",
    )


def add_audit_flags(parser: argparse.ArgumentParser) -> None:
    """``--level``, ``--batch-size``, ``--min-coverage``, ``--seed``, ``--stall-timeout``
    and ``--deadline``, each defaulting to its :class:`AuditOptions` field."""
    for name, kind in (("level", float), ("batch_size", positive_int), ("min_coverage", float)):
        default = AuditOptions.default(name)
        parser.add_argument(
            FLAGS[name],
            type=kind,
            default=default,
            help=f"{AuditOptions.help(name)} (default {default:g})",
        )
    parser.add_argument(
        FLAGS["seed"],
        type=int,
        default=AuditOptions.default("seed"),
        help=AuditOptions.help("seed"),
    )
    stall = AuditOptions.default("stall_timeout")
    parser.add_argument(
        FLAGS["stall_timeout"],
        type=positive_seconds,
        default=stall,
        metavar="SECONDS",
        help="stop asking and report inconclusive when the suspect sends no answer for this "
        f"many seconds (default {stall:g}); an audit that keeps getting answers is never cut",
    )
    parser.add_argument(
        FLAGS["deadline"],
        type=positive_seconds,
        default=AuditOptions.default("deadline"),
        metavar="SECONDS",
        help="also stop asking after this many seconds in all and report inconclusive "
        "(default: no total bound); the bar shows it and warns when the audit will not "
        "fit in it",
    )


def audit_options_from(args: argparse.Namespace) -> AuditOptions:
    """The :class:`AuditOptions` the flags give, or a usage error naming the flag refused."""
    given = {name: getattr(args, name) for name in FLAGS if hasattr(args, name)}
    try:
        return AuditOptions(**given)
    except OptionsError as exc:
        shown = str(exc)
        name = next((name for name in given if shown.startswith(f"{name} ")), None)
        raise UsageError(shown if name is None else FLAGS[name] + shown[len(name) :]) from None
