"""Output files and evidence directories that never lose or clobber anything silently.

``--report-dir`` is checked (a real, writable directory, no planted symlinks,
no earlier evidence unless ``--force``) before the first query is sent, and
``--out`` files are written atomically and never replace an existing file
without ``--force``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from .common import UsageError

__all__ = [
    "check_writable",
    "prepare_out_file",
    "prepare_private_dir",
    "prepare_report_dir",
    "write_atomically",
]


def prepare_report_dir(directory: str | os.PathLike[str], *, force: bool) -> Path:
    """Create and check the evidence directory; raises ``UsageError`` when unusable.

    Why before the audit: a directory that cannot be written would otherwise be
    found only after the whole query budget was spent, and the verdict lost.
    The directory itself must not be a symlink, nor may any evidence file in
    it be one (a planted link would redirect the write); earlier evidence is
    replaced only with ``force``.
    """
    from ..core.records.evidence import evidence_paths

    path = Path(directory)
    if path.is_symlink():
        raise UsageError(f"--report-dir {path} is a symbolic link; give a real directory")
    if path.exists() and not path.is_dir():
        raise UsageError(f"--report-dir {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --report-dir {path}: {exc.strerror or exc}") from None
    check_writable(path, "--report-dir")
    for file in evidence_paths(path).values():
        if file.is_symlink():
            raise UsageError(
                f"{file} is a symbolic link; evidence is never written through a link "
                "(remove it, or choose another --report-dir)"
            )
        if file.exists() and not file.is_file():
            raise UsageError(f"{file} exists and is not a file")
        if file.exists() and not force:
            raise UsageError(
                f"{file} already exists; pass --force to replace the evidence in {path}"
            )
    return path


def prepare_private_dir(directory: str, shared: str | None) -> None:
    """The private directory must exist (or be creatable), be writable, and never be
    the shareable one: its files let a suspect that logged its answers find the triggers."""
    path = Path(directory)
    if shared and path.resolve() == Path(shared).resolve():
        raise UsageError("--private-report-dir must differ from --report-dir (which is shared)")
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise UsageError(f"--private-report-dir {path} must be a real directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --private-report-dir {path}: {exc.strerror}") from None
    check_writable(path, "--private-report-dir")


def check_writable(directory: Path, flag: str) -> None:
    """Create and remove a file in ``directory``: the only test that also holds for root."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".espew-write-check-", dir=directory)
    except OSError as exc:
        raise UsageError(f"cannot write into {flag} {directory}: {exc.strerror or exc}") from None
    os.close(handle)
    os.unlink(probe)


def prepare_out_file(out: Path, *, force: bool) -> None:
    """Refuse an existing ``--out`` without ``force``; make sure its directory is writable.

    Checked before any work, so a bad path costs nothing.
    """
    if (out.exists() or out.is_symlink()) and not force:
        raise UsageError(f"{out} already exists; pass --force to replace it")
    if out.is_dir() and not out.is_symlink():
        raise UsageError(f"--out {out} is a directory")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out.parent}: {exc.strerror or exc}") from None
    check_writable(out.parent, "the directory of --out")


def write_atomically(out: Path, write: Callable[[IO[bytes]], None], *, force: bool) -> None:
    """Write ``out`` through a temporary file in its directory, then move it in place.

    A crash never leaves half a file. With ``force`` the move replaces what is
    there (a symlink is replaced, never followed); without it the file is
    linked in only if the name is still free, so a file that appeared while
    ``espew`` worked is not clobbered either.
    """
    handle, temporary = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        if force:
            os.replace(temporary, out)
            return
        try:
            os.link(temporary, out)
        except FileExistsError:
            raise UsageError(f"{out} already exists; pass --force to replace it") from None
        except OSError:  # a file system without hard links
            if out.exists() or out.is_symlink():
                raise UsageError(f"{out} already exists; pass --force to replace it") from None
            os.replace(temporary, out)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)
