"""``espew``: generate a key, watermark texts, serve a model, audit a suspect.

Exit codes (stable, for scripts and CI):

- 0: not copied (or, for keygen/embed/serve, success);
- 1: copied, the suspect carries the key's watermark;
- 2: inconclusive, no verdict could be reached (endpoint faults, too few answers);
- 3: usage error (bad arguments, missing or corrupt files, unknown specs).

A crash therefore never reads as a verdict. Files are handled so that nothing is
lost or clobbered silently (:mod:`.files`), and nothing ``espew`` prints quotes
the value of ``ESPEW_KEY`` or of any variable named by ``--key env:VAR`` /
``--api-key-env`` (:mod:`.redact`).

Each command lives in its own module with an ``add_<command>_command(subparsers)``
that adds it and sets ``func=callable(args) -> int``; :func:`build_parser` calls them in
:data:`COMMANDS` order. Other distributions add commands through entry points
(:mod:`.plugins`): the robustness lab (espew-lab, ``lab/`` in the repository)
adds ``lab`` and ``tune`` when it is installed.

Embedder and suspect specs (``--embedder``, ``--suspect``) are resolved by the
library's one model registry, :mod:`espew_integrations.models`: ``minilm``,
``paraphrase-minilm-l3``, ``openai:<base_url>#<model>``, ``module:attr`` or
``path/to/file.py:attr``. Flags that several commands share are defined once in
:mod:`espew_integrations.arguments`.

>>> main(["verify", "--key", "provider.key",                        # doctest: +SKIP
...       "--suspect", "openai:http://127.0.0.1:8000/v1#their-model"])
1
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from . import data, embed, evidence, key, keygen, keyring, plugins, serve, traffic, verify
from .common import EXIT_USAGE, Parser, UsageError
from .redact import scrub, secret_values

__all__ = ["COMMANDS", "build_parser", "main"]

#: What adds each command module's commands, in the order ``espew --help`` lists them.
COMMANDS = (
    keygen.add_keygen_command,
    key.add_key_command,
    embed.add_embed_command,
    verify.add_verify_command,
    evidence.add_evidence_command,
    keyring.add_keyring_command,
    serve.add_serve_command,
    traffic.add_traffic_command,
    data.add_data_command,
    plugins.add_plugin_commands,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``espew`` argument parser: each of :data:`COMMANDS` adds its module's command."""
    parser = Parser(
        prog="espew",
        description="ESpeW copyright watermarks for embedding services.",
        epilog="exit codes: 0 not copied, 1 copied, 2 inconclusive, 3 usage error",
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_commands in COMMANDS:
        add_commands(subparsers)
    return parser


def _version() -> str:
    from .. import __version__

    return f"espew {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``espew``; returns the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # Read once: the values every printed message is scrubbed of.
    secrets = secret_values(args)
    try:
        return int(func(args))
    except KeyboardInterrupt:
        return 130
    except (UsageError, ValueError, OSError, ImportError) as exc:
        # ESpeW's input errors (KeyFileError, KeyGenerationError...) are ValueErrors.
        print(f"error: {scrub(str(exc), secrets)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        # A bug must not read as a verdict: report it, exit as a failed run.
        shown = "".join(traceback.format_exception(exc))
        print(scrub(shown, secrets), end="", file=sys.stderr)
        print("error: unexpected failure (above); no verdict", file=sys.stderr)
        return EXIT_USAGE
