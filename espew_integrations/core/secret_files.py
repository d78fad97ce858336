"""Writing and reading files that hold a secret (keys, key rings).

One implementation of the hygiene every secret file gets: mode 0600 from the
first byte, an atomic write (temporary file, fsync, rename) so a crash never
leaves half a secret, no silent overwrite, and a warning, as ssh gives, when
a file is readable by others. Errors name the path and what went wrong, never
the content.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import Any

from .errors import KeyFileError

__all__ = [
    "canonical_json",
    "parse_sealed_document",
    "read_secret_file",
    "seal_document",
    "write_secret_file",
]


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


# ---------------------------------------------------------------------- sealed documents
def canonical_json(obj: Any) -> bytes:
    """The one byte form of a JSON value that checksums and ids are computed on."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def seal_document(
    *, format: str, version: int, field: str, payload: dict[str, Any], **header: Any
) -> str:
    """The JSON text of a secret file: format, version, ``header``, payload and its checksum.

    The checksum (SHA-256 of the payload's canonical form) catches a corrupted
    or hand-edited file at load time, before a wrong secret is used.
    """
    document = {
        "format": format,
        "version": version,
        field: payload,
        "checksum": hashlib.sha256(canonical_json(payload)).hexdigest(),
        **header,
    }
    return json.dumps(document, indent=1, sort_keys=True)


def parse_sealed_document(
    text: str | bytes,
    *,
    source: str,
    format: str,
    versions: Collection[int],
    field: str,
    what: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(document, payload) of :func:`seal_document`'s text, or KeyFileError naming the fault.

    ``what`` names the kind of file in messages ("key", "key ring"); no
    message quotes the content.
    """
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise KeyFileError(f"{source} is not valid JSON (corrupt {what} file?)") from None
    except RecursionError:
        raise KeyFileError(f"{source} is nested too deeply to be a {what} file") from None
    if not isinstance(document, dict) or document.get("format") != format:
        raise KeyFileError(f"{source} is not an espew {what} (missing format {format!r})")
    version = document.get("version")
    if version not in versions or isinstance(version, bool):
        raise KeyFileError(
            f"{source} has {what} format version {version!r}; this library reads versions "
            f"{tuple(versions)}. Upgrade espew-integrations."
        )
    payload = document.get(field)
    if not isinstance(payload, dict):
        raise KeyFileError(f"{source} has no {field!r} object (corrupt {what} file)")
    if hashlib.sha256(canonical_json(payload)).hexdigest() != document.get("checksum"):
        raise KeyFileError(
            f"{source} fails its checksum: the file was corrupted or edited. "
            "Restore it from your backup."
        )
    return document, payload
