"""Writing and reading files that hold a secret (keys, key rings).

One implementation of the hygiene every secret file gets: mode 0600 from the
first byte, an atomic write (temporary file, fsync, rename) so a crash never
leaves half a secret, no silent overwrite, and a warning, as ssh gives, when
a file is readable by others. Errors name the path and what went wrong, never
the content.
"""

from __future__ import annotations

import os
import secrets
import stat
import warnings
from pathlib import Path

from .errors import KeyFileError

__all__ = ["read_secret_file", "write_secret_file"]


def write_secret_file(
    path: str | os.PathLike[str], data: bytes, *, overwrite: bool, what: str, keep_hint: str
) -> Path:
    """Atomically write ``data`` to ``path`` with mode 0600.

    Refuses to replace an existing file unless ``overwrite``; ``keep_hint``
    says why the old file matters (it ends the FileExistsError message).
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(
            f"{what} {path} already exists; pass overwrite=True to replace it ({keep_hint})"
        )
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_secret_file(
    path: str | os.PathLike[str], *, what: str, warning: type[Warning], stacklevel: int = 3
) -> bytes:
    """The bytes of a secret file; KeyFileError (no content quoted) if it cannot be read.

    Warns with ``warning`` when the file is accessible by group or others.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise KeyFileError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise KeyFileError(f"{what} path {path} is a directory, not a file") from None
    except PermissionError:
        raise KeyFileError(f"{what} {path} is not readable by this user") from None
    except OSError as exc:
        raise KeyFileError(f"{what} {path} cannot be read ({exc.strerror})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.warn(
            f"{what} {path} is accessible by group or others (mode "
            f"{stat.S_IMODE(mode):o}); restrict it with chmod 600",
            warning,
            stacklevel=stacklevel,
        )
    return data
