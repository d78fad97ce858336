"""Writing files into a directory someone else may have planted files in.

Evidence is written where the other side might have prepared a trap: a link
named ``report.json`` pointing at a file of yours, or the directory itself
swapped for a link. :class:`SafeDirectory` refuses a linked directory, never
follows a planted link (files are created with ``O_EXCL | O_NOFOLLOW``
relative to the opened directory), never overwrites without ``force``, and
writes to a temporary name then renames or hard-links into place, so a
reader never sees half a file. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..ground.errors import NotADirectoryPathError, PathExistsError

__all__ = ["SafeDirectory"]

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FD = (
    _O_NOFOLLOW != 0
    and _O_DIRECTORY != 0
    and {os.open, os.stat, os.unlink, os.replace, os.link} <= os.supports_dir_fd
)
# Hard links unsupported by the file system: fall back to check-then-rename.
_NO_LINK = {errno.EPERM, errno.EXDEV, errno.EMLINK, getattr(errno, "ENOTSUP", -1)}


class SafeDirectory:
    """A directory, opened once without following a link; files are made inside it.

    Where the platform allows (Linux, macOS), every operation is relative to
    the opened directory's descriptor, so swapping the directory for a link
    after the check changes nothing.
    """

    def __init__(self, directory: str | os.PathLike[str]):
        self.path = Path(directory)
        self.fd: int | None = None

    def __enter__(self) -> SafeDirectory:
        path = self.path
        if path.is_symlink():
            raise NotADirectoryPathError(
                f"evidence directory {path} is a symbolic link; evidence is never written "
                "through a link (give the real directory)"
            )
        if path.exists() and not path.is_dir():
            raise NotADirectoryPathError(f"evidence directory {path} exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)
        if _DIR_FD:
            try:
                self.fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link meanwhile
                    raise NotADirectoryPathError(
                        f"evidence directory {path} is a symbolic link or not a directory; "
                        "evidence is never written through a link"
                    ) from None
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _where(self, name: str) -> tuple[str, dict[str, Any]]:
        if self.fd is not None:
            return name, {"dir_fd": self.fd}
        return str(self.path / name), {}

    def exists(self, name: str) -> bool:
        """True if ``name`` is there, as anything: a dangling link counts too."""
        where, kw = self._where(name)
        try:
            os.stat(where, follow_symlinks=False, **kw)
        except FileNotFoundError:
            return False
        return True

    def refuse_existing(self, names: Iterable[str], *, force: bool) -> None:
        """Without ``force``, raise before writing anything if any of ``names`` exists."""
        if force:
            return
        present = [str(self.path / name) for name in names if self.exists(name)]
        if present:
            raise PathExistsError(
                f"evidence already exists: {', '.join(present)}; it is never overwritten "
                "(pass force=True, or --force, to replace it, or choose another directory)"
            )

    def write(self, name: str, content: bytes, *, mode: int, force: bool) -> Path:
        """Create ``name`` atomically with ``content``; a link there is replaced, not followed."""
        temp = f".{name}.{secrets.token_hex(8)}.tmp"
        temp_where, kw = self._where(temp)
        final_where, _ = self._where(name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
        fd = os.open(temp_where, flags, mode, **kw)
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(content)
                stream.flush()
                os.fsync(stream.fileno())
            self._place(temp_where, final_where, kw, force=force)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_where, **kw)
        return self.path / name

    def _place(self, temp: str, final: str, kw: dict[str, Any], *, force: bool) -> None:
        move = {"src_dir_fd": self.fd, "dst_dir_fd": self.fd} if self.fd is not None else {}
        if force:
            os.replace(temp, final, **move)  # replaces a planted link itself, never its target
            return
        try:
            os.link(temp, final, follow_symlinks=False, **move)  # fails if anything is there
        except FileExistsError:
            raise PathExistsError(
                f"{self.path / final.rsplit('/', 1)[-1]} appeared while writing evidence; "
                "it is never overwritten (pass force=True, or --force, to replace it)"
            ) from None
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            if self.exists(Path(final).name):
                raise PathExistsError(
                    f"{self.path / Path(final).name} already exists; evidence is never "
                    "overwritten (pass force=True, or --force, to replace it)"
                ) from None
            os.replace(temp, final, **move)

    def remove(self, name: str) -> None:
        """Remove ``name`` if present (a link is removed itself, its target untouched)."""
        where, kw = self._where(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(where, **kw)
